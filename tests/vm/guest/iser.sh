# shellcheck shell=bash
# The iSER checks of the qemu guest suite: the kernel's ib_iser initiator
# against rustgt's iSER portal, over a soft-RoCE device (rdma_rxe) on a
# dummy interface. Sourced by checks.sh; each check_iser_* runs in its own
# process like every other check.
#
# The checks run their own rustgt (rustgt-iser.toml, data in
# /srv/rustgt-iser), started once the RDMA device exists and left running
# for the next iSER check. Every check proves the data went over RDMA:
# the rxe packet counters grow with the data, and no TCP connection to an
# iSCSI port is open while the session works.

readonly ISER_IP=192.0.2.1
readonly ISER_PORTAL=$ISER_IP:3260
readonly T_ISER=iqn.2026-11.org.rustgt:vm-iser
readonly ISER_DATA=/srv/rustgt-iser
readonly RXE_COUNTERS=/sys/class/infiniband/rxe0/ports/1/hw_counters

# rxe0 on dummy0 at ISER_IP, and the kernel's iSER initiator. Idempotent.
iser_fabric() {
    if [ ! -d /sys/class/infiniband/rxe0 ]; then
        modprobe dummy numdummies=0 || return 1
        ip link show dummy0 >/dev/null 2>&1 || ip link add dummy0 type dummy || return 1
        grep -qF "inet $ISER_IP/" <<<"$(ip -4 addr show dev dummy0)" ||
            ip addr add "$ISER_IP/24" dev dummy0 || return 1
        ip link set dummy0 up || return 1
        # rxe's ICRC needs the crypto API's crc32 (a soft dependency).
        modprobe crc32_generic || return 1
        modprobe rdma_rxe || return 1
        rdma link add rxe0 type rxe netdev dummy0 || return 1
    fi
    modprobe ib_iser || return 1
    wait_until 10 test -d "$RXE_COUNTERS"
}

iser_target_pid() { cat "$STATE/rustgt-iser.pid" 2>/dev/null; }

# Starts the iSER instance unless it runs; waits for its iSER portal.
iser_target_start() {
    pid_alive "$(iser_target_pid)" && return 0
    mkdir -p "$ISER_DATA"
    : >"$STATE/rustgt-iser.out"
    echo "---- rustgt (iSER) start $(date +%T)" >>"$STATE/rustgt-iser.log"
    NO_COLOR=1 setsid rustgt --config "$VM/rustgt-iser.toml" --data-dir "$ISER_DATA" \
        >>"$STATE/rustgt-iser.out" 2>>"$STATE/rustgt-iser.log" </dev/null &
    echo $! >"$STATE/rustgt-iser.pid"
    wait_until 30 grep -q '^rustgt: iSER listening on ' "$STATE/rustgt-iser.out" || {
        say "the iSER rustgt did not come up; its log:"
        tail -n 30 "$STATE/rustgt-iser.log" >&2
        return 1
    }
}

# Fabric and target, or the check fails.
iser_ready() {
    iser_fabric || fail "no RDMA fabric: dummy0 + rdma_rxe + ib_iser set-up failed ($(dmesg | tail -n 3 | tr '\n' ' '))"
    iser_target_start || fail "rustgt with an iSER portal did not start: $(tail -n 2 "$STATE/rustgt-iser.log" | tr '\n' ' ')"
}

# The helpers below take the target's IQN as an optional last argument
# (default T_ISER).

# A fresh node record for the iSER target with transport iser.
iser_node_new() {
    local t=${1:-$T_ISER}
    iscsiadm -m node -T "$t" -p "$ISER_PORTAL" -o delete >/dev/null 2>&1 || true
    iscsiadm -m node -T "$t" -p "$ISER_PORTAL,1" -o new >/dev/null || return 1
    iscsiadm -m node -T "$t" -p "$ISER_PORTAL" -o update \
        -n iface.transport_name -v iser >&2
}

iser_login() {
    timeout 90 iscsiadm -m node -T "${1:-$T_ISER}" -p "$ISER_PORTAL" --login >&2
}

iser_logout() {
    timeout 60 iscsiadm -m node -T "${1:-$T_ISER}" -p "$ISER_PORTAL" --logout >&2
}

# The sysfs directory of the session to the target, whatever its iface.
iser_session_dir() {
    local s t=${1:-$T_ISER}
    for s in /sys/class/iscsi_session/session*; do
        if [ "$(cat "$s/targetname" 2>/dev/null)" = "$t" ]; then
            echo "$s"
            return 0
        fi
    done
    return 1
}

# Waits up to 30 s for LUN 0 of the iSER session and prints its disk.
iser_lun_dev() {
    local s d b i
    for ((i = 0; i < 60; i++)); do
        if s=$(iser_session_dir "$@"); then
            for d in "$s"/device/target*/*:*:*:0; do
                [ -d "$d/block" ] || continue
                b=$(ls "$d/block")
                if [ -b "/dev/$b" ]; then
                    echo "/dev/$b"
                    return 0
                fi
            done
        fi
        sleep 0.5
    done
    return 1
}

# The transport of the session to the target ("iser" when it is one).
iser_session_transport() {
    iscsiadm -m session -P 1 2>/dev/null | awk -v t="${1:-$T_ISER}" '
        $1 == "Target:" { cur = $2 }
        !found && /Iface Transport:/ && cur == t { print $3; found = 1 }'
}

# Logs in over iSER and prints the LUN 0 disk, or fails the check.
iser_login_ok() {
    local rc=0 dev
    iser_node_new "$@" || fail "creating the iSER node record failed"
    iser_login "$@" || rc=$?
    [ "$rc" -eq 0 ] || fail "iSER login failed: iscsiadm exit $rc; target log: $(tail -n 3 "$STATE/rustgt-iser.log" | tr '\n' ' ')"
    [ "$(iser_session_transport "$@")" = iser ] ||
        fail "the session's transport is '$(iser_session_transport "$@")', not iser"
    dev=$(iser_lun_dev "$@") || fail "no disk appeared for the iSER LUN within 30 s"
    echo "$dev"
}

rxe_packets() {
    echo $(($(cat "$RXE_COUNTERS/sent_pkts") + $(cat "$RXE_COUNTERS/rcvd_pkts")))
}

# Established TCP connections to or from an iSCSI port (3260, 0x0CBC).
iscsi_tcp_conns() {
    cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
        awk '$4 == "01" && ($2 ~ /:0CBC$/ || $3 ~ /:0CBC$/)' | wc -l
}

# rdma_proof BEFORE MIB: the rxe counters moved at least MIB MiB of
# packets (1 KiB of payload each at most) since BEFORE, and no TCP iSCSI
# connection is open. Prints a summary.
rdma_proof() {
    local delta tcp
    delta=$(($(rxe_packets) - $1))
    tcp=$(iscsi_tcp_conns)
    [ "$tcp" -eq 0 ] || fail "$tcp TCP connection(s) on port 3260 while the iSER session worked"
    [ "$delta" -ge $(($2 * 1024)) ] ||
        fail "rxe0 counted only $delta packets for $2 MiB of data: the data did not go over RDMA"
    echo "rxe0 +$delta packets, 0 TCP iSCSI connections"
}

# The target's own word on the data path: no failed or out-of-place work
# request, and whether Send with Invalidate was agreed.
iser_target_health() {
    local bad inv
    bad=$(grep -E 'WARN|ERROR' "$STATE/rustgt-iser.log" |
        grep -E 'work request|posting|RDMA Read|completion|iSER message' | sed -n 1,2p)
    [ -z "$bad" ] || fail "the iSER target reported: $(echo "$bad" | tr '\n' ' ')"
    inv=$(grep 'iSER connection accepted' "$STATE/rustgt-iser.log" | tail -n 1 |
        grep -oE 'remote_invalidate=(true|false)')
    echo "${inv:-remote_invalidate=?}"
}

# iser_data_in_writes BEFORE: waits (10 s at most) for more than BEFORE
# "iSER Data-In RDMA Writes" lines (one per closed connection) and prints
# the last one's zero_copy=N copied=N.
iser_data_in_lines() { grep -c 'iSER Data-In RDMA Writes' "$STATE/rustgt-iser.log" || true; }
iser_data_in_writes() {
    local i
    for i in $(seq 50); do
        [ "$(iser_data_in_lines)" -gt "$1" ] && break
        sleep 0.2
    done
    grep 'iSER Data-In RDMA Writes' "$STATE/rustgt-iser.log" | tail -n 1 |
        grep -oE '(zero_copy|copied)=[0-9]+' | tr '\n' ' '
}

# iser_data_out_reads BEFORE: the same for the "iSER Data-Out RDMA Reads"
# line, logged right after the Data-In one.
iser_data_out_lines() { grep -c 'iSER Data-Out RDMA Reads' "$STATE/rustgt-iser.log" || true; }
iser_data_out_reads() {
    local i
    for i in $(seq 50); do
        [ "$(iser_data_out_lines)" -gt "$1" ] && break
        sleep 0.2
    done
    grep 'iSER Data-Out RDMA Reads' "$STATE/rustgt-iser.log" | tail -n 1 |
        grep -oE '(zero_copy|copied)=[0-9]+' | tr '\n' ' '
}

check_iser_login() {
    local dev before proof health lines out_lines writes reads want got
    iser_ready
    lines=$(iser_data_in_lines)
    out_lines=$(iser_data_out_lines)
    dd if=/dev/urandom of=/tmp/iser-login.bin bs=1M count=4 status=none || fail "making the source failed"
    want=$(sha256sum </tmp/iser-login.bin | cut -d' ' -f1)
    before=$(rxe_packets)
    dev=$(iser_login_ok) || exit 1
    dd if=/tmp/iser-login.bin of="$dev" bs=1M count=4 oflag=direct status=none || fail "writing $dev failed"
    got=$(dd if="$dev" bs=1M count=4 iflag=direct status=none | sha256sum | cut -d' ' -f1) ||
        fail "reading $dev failed"
    [ "$got" = "$want" ] || fail "4 MiB changed over iSER: sha256 $got, want $want"
    proof=$(rdma_proof "$before" 8) || exit 1
    iser_logout || fail "logout failed"
    iser_session_dir >/dev/null && fail "a session remains after logout"
    health=$(iser_target_health) || exit 1
    # The 4 MiB read went out by RDMA Writes straight from the pooled
    # read buffers (registered once, cached), not copied; the 4 MiB write
    # came in by RDMA Reads straight into the pooled write buffers.
    writes=$(iser_data_in_writes "$lines")
    grep -qE 'zero_copy=[1-9]' <<<"$writes" ||
        fail "no zero-copy RDMA Write for the 4 MiB read (${writes:-no summary line})"
    reads=$(iser_data_out_reads "$out_lines")
    grep -qE 'zero_copy=[1-9]' <<<"$reads" ||
        fail "no zero-copy RDMA Read for the 4 MiB write (${reads:-no summary line})"
    pass "ib_iser login to $ISER_PORTAL (transport iser), 4 MiB written and read back over $dev, logout; $proof; $health; Data-In writes: $writes; Data-Out reads: $reads"
}

check_iser_fs_roundtrip() {
    local dev mnt=/mnt/iser before want got proof
    iser_ready
    dd if=/dev/urandom of=/tmp/iser-src.bin bs=1M count=64 status=none || fail "making the source file failed"
    want=$(sha256sum </tmp/iser-src.bin | cut -d' ' -f1)
    before=$(rxe_packets)
    dev=$(iser_login_ok) || exit 1
    mkdir -p "$mnt"
    mkfs.ext4 -q -F -E nodiscard,lazy_itable_init=0,lazy_journal_init=0 "$dev" || fail "mkfs.ext4 $dev failed"
    mount -t ext4 "$dev" "$mnt" || fail "mount failed"
    cp /tmp/iser-src.bin "$mnt/data.bin" || fail "writing 64 MiB failed"
    umount "$mnt" || fail "umount after writing failed"
    drop_caches
    blockdev --flushbufs "$dev"
    mount -t ext4 "$dev" "$mnt" || fail "remount failed"
    got=$(sha256sum <"$mnt/data.bin" | cut -d' ' -f1)
    [ "$got" = "$want" ] || fail "64 MiB file changed over iSER: sha256 $got, want $want"
    umount "$mnt" || fail "final umount failed"
    e2fsck -fn "$dev" >/tmp/iser-fsck.out 2>&1 ||
        fail "e2fsck not clean: $(tail -n 3 /tmp/iser-fsck.out | tr '\n' ' ')"
    proof=$(rdma_proof "$before" 128) || exit 1
    iser_logout || fail "logout failed"
    iser_target_health >/dev/null || exit 1
    pass "ext4 over iSER: 64 MiB file sha256 intact after drop_caches + remount, e2fsck clean; $proof"
}

check_iser_fio_randwrite_verify() {
    local dev before proof
    iser_ready
    before=$(rxe_packets)
    dev=$(iser_login_ok) || exit 1
    fio_verify iser-randwrite "$dev" 64M 16 --rw=randwrite --bsrange=4k-128k ||
        fail "fio randwrite+verify over iSER failed: $(grep -m2 -iE 'verify|err' /tmp/fio-iser-randwrite.out | tr '\n' ' ')"
    proof=$(rdma_proof "$before" 64) || exit 1
    iser_logout || fail "logout failed"
    iser_target_health >/dev/null || exit 1
    pass "randwrite 4k-128k iodepth 16 direct, crc32c verify ok ($(fio_summary iser-randwrite)); $proof"
}

# QPs, CQs, MRs and PDs on rxe0 (target and initiator together), e.g.
# "pd 3 cq 4 qp 4 mr 3".
rdma_objects() {
    rdma resource show 2>/dev/null | awk '$2 == "rxe0:" {
        for (i = 3; i < NF; i += 2)
            if ($i == "pd" || $i == "cq" || $i == "qp" || $i == "mr") printf "%s %s ", $i, $(i + 1)
    }'
}

check_iser_relogin() {
    local dev want got round idle
    iser_ready
    idle=$(rdma_objects)
    [ -n "$idle" ] || fail "rdma resource show lists nothing for rxe0"
    dev=$(iser_login_ok) || exit 1
    dd if=/dev/urandom of=/tmp/iser-pattern bs=1M count=16 status=none
    want=$(sha256sum </tmp/iser-pattern | cut -d' ' -f1)
    dd if=/tmp/iser-pattern of="$dev" bs=1M oflag=direct status=none || fail "writing the pattern failed"
    for round in 1 2; do
        iser_logout || fail "logout $round failed"
        iser_session_dir >/dev/null && fail "a session remains after logout $round"
        iser_login || fail "login $round after logout failed"
        dev=$(iser_lun_dev) || fail "no disk after login $round"
        got=$(dev_sum "$dev" 16)
        [ "$got" = "$want" ] || fail "pattern changed across logout/login $round"
    done
    iser_logout || fail "final logout failed"
    iser_target_health >/dev/null || exit 1
    # Every connection's QP, CQ, MRs and PD are gone again.
    # shellcheck disable=SC2016 # expanded by eval at each try
    wait_until 10 eval '[ "$(rdma_objects)" = "$idle" ]' ||
        fail "RDMA objects leaked: idle '$idle', after 3 sessions '$(rdma_objects)'"
    pass "16 MiB pattern intact across 2 iSER logout/login rounds; rxe0 back to '$idle' after 3 sessions"
}

# The iSER instance's admin CLI.
iser_admin() {
    timeout 30 rustgt admin --socket "$ISER_DATA/admin.sock" "$@"
}

# A target added at run time over the admin socket is served on the iSER
# portal that was bound at start (one directory of targets for both
# transports): ib_iser logs in to it, writes and reads back a pattern over
# RDMA, and `rustgt admin session list` shows the session with transport
# iser. The target is removed again at the end.
check_iser_admin_live_target() {
    local t=iqn.2026-11.org.rustgt:vm-iser-live dev before want got proof out row
    iser_ready
    iser_admin target remove "$t" --force >/dev/null 2>&1 || true
    out=$(iser_admin target add "$t" --portal "$ISER_PORTAL" 2>&1) ||
        fail "admin target add failed: $out"
    out=$(iser_admin lun add "$t" 0 --backstore file --path iser-live0.img --size 64M 2>&1) ||
        fail "admin lun add failed: $out"
    before=$(rxe_packets)
    dev=$(iser_login_ok "$t") || exit 1
    dd if=/dev/urandom of=/tmp/iser-live bs=1M count=16 status=none
    want=$(sha256sum </tmp/iser-live | cut -d' ' -f1)
    dd if=/tmp/iser-live of="$dev" bs=1M oflag=direct status=none || fail "writing the pattern to $dev failed"
    got=$(dev_sum "$dev" 16) || fail "reading back $dev failed"
    [ "$got" = "$want" ] || fail "16 MiB pattern changed on the target added at run time"
    proof=$(rdma_proof "$before" 32) || exit 1
    out=$(iser_admin session list 2>&1) || fail "admin session list failed: $out"
    # TSIH ISID INITIATOR TARGET CONNS PEER TRANSPORT ...
    row=$(awk -v t="$t" '$4 == t && $7 == "iser"' <<<"$out")
    [ -n "$row" ] || fail "admin session list shows no iser session of $t: $(tr '\n' '|' <<<"$out")"
    out=$(iser_admin connections 2>&1) || fail "admin connections failed: $out"
    # ID PEER PORTAL TRANSPORT STATE TSIH CID INITIATOR TARGET
    [ -n "$(awk -v t="$t" '$4 == "iser" && $NF == t' <<<"$out")" ] ||
        fail "admin connections lists no iser connection to $t: $(tr '\n' '|' <<<"$out")"
    iser_logout "$t" || fail "logout failed"
    iser_session_dir "$t" >/dev/null && fail "a session remains after logout"
    iscsiadm -m node -T "$t" -p "$ISER_PORTAL" -o delete >/dev/null 2>&1 || true
    # --force: the connection may still be closing after the logout.
    out=$(iser_admin target remove "$t" --force 2>&1) || fail "admin target remove failed: $out"
    iser_target_health >/dev/null || exit 1
    pass "target added over the admin socket served on iSER portal $ISER_PORTAL: 16 MiB written and read back; session list: $(tr -s ' ' <<<"$row"); $proof"
}

# The iSER target dies (SIGKILL) under a logged-in initiator and comes
# back: the kernel releases the dead process's RDMA objects, the new
# process binds the portal again, the initiator reconnects over iSER and
# finds its data.
check_iser_target_restart_crash() {
    local dev want got sid t0
    iser_ready
    dev=$(iser_login_ok) || exit 1
    # shellcheck disable=SC2034 # read in the eval'd test below
    sid=$(basename "$(iser_session_dir)")
    dd if=/dev/urandom of=/tmp/iser-crash bs=1M count=8 status=none
    want=$(sha256sum </tmp/iser-crash | cut -d' ' -f1)
    dd if=/tmp/iser-crash of="$dev" bs=1M oflag=direct status=none || fail "writing the pattern failed"
    kill -s KILL "$(iser_target_pid)"
    # shellcheck disable=SC2016 # expanded by eval at each try
    wait_until 10 eval '! pid_alive "$(iser_target_pid)"' || fail "the iSER target survived SIGKILL"
    t0=$SECONDS
    iser_target_start || fail "the iSER target did not start again after SIGKILL"
    # shellcheck disable=SC2016 # expanded by eval at each try
    wait_until 90 eval 'grep -q "iSCSI Session State: LOGGED_IN" <<<"$(iscsiadm -m session -r "${sid#session}" -P 3 2>/dev/null)"' ||
        fail "the initiator did not log in again within 90 s of the restart"
    dev=$(iser_lun_dev) || fail "no disk after the reconnect"
    got=$(dev_sum "$dev" 8) || fail "reading back after the reconnect failed"
    [ "$got" = "$want" ] || fail "data changed across the target crash"
    [ "$(iser_session_transport)" = iser ] || fail "the session came back on '$(iser_session_transport)'"
    iser_logout || fail "logout failed"
    pass "SIGKILL + restart: the initiator reconnected over iSER after $((SECONDS - t0))s; 8 MiB intact"
}
