# shellcheck shell=bash
# CACHE_ROOT and the like are read by the scripts that source this file.
# shellcheck disable=SC2034
#
# tests/vm/lib.sh: host-side helpers shared by build-guest and
# run-guest-suite. Sourced, never run. Needs bash.

VM_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$VM_DIR/../.." && pwd)"
CACHE_ROOT="${RUSTGT_VM_CACHE:-$REPO_DIR/.cache/vm}"
export DEBIAN_FRONTEND=noninteractive

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi

vm_log() { printf '==> [vm] %s\n' "$*" >&2; }
vm_die() {
    printf 'vm: error: %s\n' "$*" >&2
    exit 1
}

APT_UPDATED=0
apt_update() {
    if [ "$APT_UPDATED" -eq 0 ]; then
        $SUDO apt-get update -q >&2
        APT_UPDATED=1
    fi
}

# Installed version of a package, empty when not installed.
installed_version() {
    dpkg-query -W -f='${db:Status-Abbrev} ${Version}\n' "$1" 2>/dev/null |
        awk '$1 == "ii" { print $2 }'
}

# Candidate version of a package in the host's apt lists, empty if unknown.
candidate_version() {
    apt-cache policy "$1" 2>/dev/null | awk '!found && $1 == "Candidate:" && $2 != "(none)" { print $2; found = 1 }'
}

# Debian codename of the host (the guest userland uses the same release,
# so the host-built rustgt binary finds the same glibc in the guest).
host_codename() {
    (. /etc/os-release && echo "${VERSION_CODENAME:-}")
}

# Prints "URI SUITE" for every Debian source of the host whose suite is the
# release itself, its -updates or its -security suite (never backports or
# third-party suites), from both deb822 .sources files and one-line lists.
# The guest is built from exactly these, so no mirror name is hard-coded.
host_debian_sources() {
    local codename="$1" f
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -r "$f" ] || continue
        awk -v c="$codename" '
            function flush(   i, n, u, s, nu, ns) {
                if (types ~ /(^| )deb( |$)/ && enabled != "no") {
                    nu = split(uris, u, " "); ns = split(suites, s, " ")
                    for (i = 1; i <= ns; i++)
                        if (s[i] == c || s[i] == c "-updates" || s[i] == c "-security")
                            print u[1], s[i]
                }
                types = uris = suites = enabled = ""
            }
            /^[ \t]*$/ { flush(); next }
            /^#/ { next }
            tolower($1) == "types:" { $1 = ""; types = $0 }
            tolower($1) == "uris:" { $1 = ""; uris = $0 }
            tolower($1) == "suites:" { $1 = ""; suites = $0 }
            tolower($1) == "enabled:" { enabled = tolower($2) }
            END { flush() }
        ' "$f"
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -r "$f" ] || continue
        awk -v c="$codename" '
            $1 != "deb" { next }
            {
                i = 2
                if ($i ~ /^\[/) { while ($i !~ /\]$/ && i < NF) i++; i++ }
                uri = $i; suite = $(i + 1)
                if (suite == c || suite == c "-updates" || suite == c "-security") print uri, suite
            }
        ' "$f"
    done
}
