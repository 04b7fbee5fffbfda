# shellcheck shell=bash
# The names below are read by checks.sh and iser.sh, which source this file.
# shellcheck disable=SC2034
#
# Guest-side helpers of the qemu suite: names, result markers, the rustgt
# daemon's lifecycle and the open-iscsi initiator. Sourced by /init and by
# checks.sh inside the guest; never run on the host.

export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export LC_ALL=C

readonly VM=/rustgt-vm
readonly STATE=/run/rustgt-vm
readonly DATA=/srv/rustgt
readonly PORTAL=127.0.0.1:3260
readonly RESULTS_TTY=/dev/ttyS1

readonly INITIATOR_A=iqn.2026-11.org.rustgt.vm:guest-a
readonly INITIATOR_B=iqn.2026-11.org.rustgt.vm:guest-b
# The second initiator name is an open-iscsi iface of the same host.
readonly IFACE_B=guestb

readonly T_OPEN=iqn.2026-11.org.rustgt:vm-open
readonly T_ACL=iqn.2026-11.org.rustgt:vm-acl
readonly T_CHAP=iqn.2026-11.org.rustgt:vm-chap
readonly T_MUTUAL=iqn.2026-11.org.rustgt:vm-mutual
readonly T_FIO=iqn.2026-11.org.rustgt:vm-fio
readonly T_SHARED=iqn.2026-11.org.rustgt:vm-shared
readonly T_THIN=iqn.2026-11.org.rustgt:vm-thin
readonly T_SEED_FILE=iqn.2026-11.org.rustgt:vm-seed-file
readonly T_SEED_DEV=iqn.2026-11.org.rustgt:vm-seed-dev
readonly T_REDIRECT=iqn.2026-11.org.rustgt:vm-redirect
# Where rustgt.toml redirects T_REDIRECT's logins at $PORTAL.
readonly REDIRECT_PORTAL=127.0.0.1:3264
readonly ALL_TARGETS="$T_OPEN $T_ACL $T_CHAP $T_MUTUAL $T_FIO $T_SHARED $T_THIN $T_SEED_FILE $T_SEED_DEV $T_REDIRECT"

readonly CHAP_USER=vm-initiator
readonly CHAP_SECRET=vm-chap-secret-0001
readonly MUTUAL_USER=iqn.2026-11.org.rustgt:vm-mutual
readonly MUTUAL_SECRET=vm-target-secret-0002

# open-iscsi's exit status for a login refused for authentication or
# authorization (ISCSI_ERR_LOGIN_AUTH_FAILED).
readonly ISCSI_ERR_LOGIN_AUTH_FAILED=24

say() { echo "[guest] $*" >&2; }

# A result line, on the console and on the results port the host parses.
marker() {
    local line="RUSTGT-$*"
    echo "$line"
    echo "$line" >"$RESULTS_TTY"
}

# --- Ending a check (checks run as their own process) ---------------------
# The reason goes to a file the runner puts into the marker.
pass() {
    echo "$*" >"$STATE/detail"
    exit 0
}
fail() {
    say "FAIL: $*"
    echo "$*" >"$STATE/detail"
    exit 1
}
# The target answered that it does not implement what the check needs.
pending() {
    say "PENDING: $*"
    echo "$*" >"$STATE/detail"
    exit 77
}

# Polls "$@" every half second until it succeeds or $1 seconds pass.
wait_until() {
    local secs="$1" i
    shift
    for ((i = 0; i < secs * 2; i++)); do
        if "$@"; then
            return 0
        fi
        sleep 0.5
    done
    "$@"
}

# --- The target daemon ----------------------------------------------------
target_pid() { cat "$STATE/rustgt.pid" 2>/dev/null; }

# True while the process lives (a zombie counts as gone).
pid_alive() {
    local st
    [ -n "$1" ] && [ -r "/proc/$1/stat" ] || return 1
    st=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null)
    [ -n "$st" ] && [ "$st" != Z ]
}

target_alive() { pid_alive "$(target_pid)"; }

target_listening() { grep -q '^rustgt: listening on ' "$STATE/rustgt.out" 2>/dev/null; }

target_start() {
    : >"$STATE/rustgt.out"
    echo "---- rustgt start $(date +%T)" >>"$STATE/rustgt.log"
    NO_COLOR=1 setsid rustgt --config "$VM/rustgt.toml" --data-dir "$DATA" \
        >>"$STATE/rustgt.out" 2>>"$STATE/rustgt.log" </dev/null &
    echo $! >"$STATE/rustgt.pid"
    if ! wait_until 30 target_listening; then
        say "rustgt did not start listening; its log:"
        tail -n 30 "$STATE/rustgt.log"
        return 1
    fi
}

# target_stop TERM|KILL: signals the daemon and waits for it to exit.
target_stop() {
    local pid
    pid=$(target_pid)
    pid_alive "$pid" || return 0
    kill -s "$1" "$pid"
    if ! wait_until 30 eval '! pid_alive '"$pid"; then
        say "rustgt ignored SIG$1 for 30 s; killing it"
        kill -s KILL "$pid"
        wait_until 10 eval '! pid_alive '"$pid"
        return 1
    fi
}

# --- The initiator --------------------------------------------------------
iface_of() { echo "${1:-default}"; }

# node_new IQN [IFACE...]: drops every node record of IQN, then makes a
# fresh one with iscsid.conf defaults per iface. The portal group tag (,1)
# matters: without it open-iscsi keeps one record per portal, not per iface.
node_new() {
    local iqn="$1" iface
    shift
    iscsiadm -m node -T "$iqn" -p "$PORTAL" -o delete >/dev/null 2>&1 || true
    for iface in "${@:-default}"; do
        iscsiadm -m node -T "$iqn" -p "$PORTAL,1" -I "$iface" -o new >/dev/null
    done
}

# node_set IQN IFACE KEY VALUE
node_set() {
    iscsiadm -m node -T "$1" -p "$PORTAL" -I "$(iface_of "$2")" -o update -n "$3" -v "$4" >&2
}

# login IQN [IFACE]: returns iscsiadm's exit status.
login() {
    timeout 90 iscsiadm -m node -T "$1" -p "$PORTAL" -I "$(iface_of "$2")" --login >&2
}

logout() {
    timeout 60 iscsiadm -m node -T "$1" -p "$PORTAL" -I "$(iface_of "$2")" --logout >&2
}

# session_dir IQN [IFACE]: the sysfs directory of the session, if any.
session_dir() {
    local iface s
    iface=$(iface_of "$2")
    for s in /sys/class/iscsi_session/session*; do
        [ -e "$s/targetname" ] || continue
        [ "$(cat "$s/targetname")" = "$1" ] || continue
        [ "$(cat "$s/ifacename" 2>/dev/null)" = "$iface" ] || continue
        echo "$s"
        return 0
    done
    return 1
}

has_session() { session_dir "$@" >/dev/null; }

session_id() {
    local s
    s=$(session_dir "$@") || return 1
    echo "${s##*/session}"
}

# The SCSI device directory of LUN $2 of the session to $1.
lun_sysfs() {
    local s d
    s=$(session_dir "$1" "$3") || return 1
    for d in "$s"/device/target*/*:*:*:"$2"; do
        if [ -d "$d/block" ]; then
            echo "$d"
            return 0
        fi
    done
    return 1
}

# lun_dev IQN LUN [IFACE]: waits for the disk and prints /dev/sdX.
lun_dev() {
    local d b
    wait_until 30 lun_sysfs "$@" >/dev/null || return 1
    d=$(lun_sysfs "$@")
    b=$(ls "$d/block")
    wait_until 10 test -b "/dev/$b" || return 1
    echo "/dev/$b"
}

# lun_sg IQN LUN [IFACE]: prints /dev/sgN of the LUN.
lun_sg() {
    local d
    d=$(lun_sysfs "$@") || return 1
    echo "/dev/$(ls "$d/scsi_generic")"
}

# The negotiated value of a session's parameter (iscsiadm -P 2).
session_param() {
    local sid
    sid=$(session_id "$1" "$3") || return 1
    iscsiadm -m session -r "$sid" -P 2 | awk -v k="$2:" '!found && $1 == k { print $2; found = 1 }'
}

# "iSCSI Session State" of the session (LOGGED_IN when healthy).
session_state() {
    local sid
    sid=$(session_id "$1" "$2") || return 1
    iscsiadm -m session -r "$sid" -P 3 | awk -F': ' '!found && /iSCSI Session State/ { print $2; found = 1 }'
}

# The initiator's TCP port of the session's connection: a new one after the
# initiator reconnects.
session_local_port() {
    local sid
    sid=$(session_id "$@") || return 1
    cat "/sys/class/iscsi_connection/connection$sid:0/local_port" 2>/dev/null
}

session_logged_in() { [ "$(session_state "$@")" = LOGGED_IN ]; }

# --- Data helpers ---------------------------------------------------------
# sha256 of the first $2 MiB of $1, read with O_DIRECT (past the page cache).
dev_sum() {
    dd if="$1" bs=1M count="$2" iflag=direct status=none | sha256sum | cut -d' ' -f1
}

drop_caches() {
    sync
    echo 3 >/proc/sys/vm/drop_caches
}

# Undoes whatever a check left behind: mounts, sessions, a stopped target.
reset_state() {
    local m
    sync
    while read -r m; do
        timeout 60 umount "$m" || timeout 30 umount -l "$m" || true
    done < <(awk '$2 ~ /^\/mnt\// { print $2 }' /proc/mounts | sort -r)
    timeout 120 iscsiadm -m node --logoutall=all >/dev/null 2>&1 || true
    if [ ! -e "$STATE/no-target" ] && ! target_alive; then
        say "restarting rustgt after the check"
        target_start || true
    fi
}
