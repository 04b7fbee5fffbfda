# shellcheck shell=bash
# Debian backports for the scripts that install packages (tests/run and
# tests/bench/vs-tgt), sourced by both: a machine's qemu-utils may come
# from <codename>-backports, and the qemu-block-extra of the very same
# version (qemu-img and qemu-io open iscsi:// through its module) only
# from there.

# add_backports_source [SUDO]: adds <codename>-backports to apt's sources,
# reusing the mirror the system's own Debian sources already point at, as
# /etc/apt/sources.list.d/rustgt-backports.sources (run through SUDO when
# given). Prints "added" when it wrote the file (apt's lists are then
# stale), nothing when it was there already; fails, saying why on stderr,
# when the mirror cannot be found.
add_backports_source() {
	local codename uri list=/etc/apt/sources.list.d/rustgt-backports.sources
	codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
	if [[ -z $codename ]]; then
		echo "no VERSION_CODENAME in /etc/os-release: cannot add backports" >&2
		return 1
	fi
	[[ ! -e $list ]] || return 0
	uri=""
	if [[ -r /etc/apt/sources.list.d/debian.sources ]]; then
		uri=$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources)
	fi
	if [[ -z $uri && -r /etc/apt/sources.list ]]; then
		uri=$(awk -v c="$codename" '$1 == "deb" && $3 == c { print $2; exit }' /etc/apt/sources.list)
	fi
	if [[ -z $uri ]]; then
		echo "cannot find the Debian mirror to add ${codename}-backports" >&2
		return 1
	fi
	printf 'Types: deb\nURIs: %s\nSuites: %s-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
		"$uri" "$codename" | ${1:+"$1"} tee "$list" >/dev/null || return 1
	echo added
}

# backports_needed PACKAGE VERSION: whether VERSION of PACKAGE is a
# backports build that apt's lists do not offer yet (adding backports
# would).
backports_needed() {
	local versions
	[[ $2 == *bpo* ]] || return 1
	versions=$(apt-cache madison "$1" 2>/dev/null | awk -F'|' '{ gsub(/ /, "", $2); print $2 }') || true
	! grep -qxF "$2" <<<"$versions"
}
