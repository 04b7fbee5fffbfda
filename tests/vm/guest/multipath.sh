# shellcheck shell=bash
# The dm-multipath checks (mpath-*), run only when the host boots the guest
# with `run-guest-suite --rbd-gateways` (kernel option rustgt.gateways=1):
# two rustgt gateways run on the HOST, on one RBD image of a one-node Ceph
# cluster, and the guest's kernel initiator reaches them through qemu's user
# network with restrict=on, whose only ways out are two guestfwd rules:
# 10.0.2.101:3260 -> gateway A, 10.0.2.102:3260 -> gateway B, both on the
# host's 127.0.0.1. Nothing leaves the machine.
#
# The guest runs udevd and multipathd as a distribution would (udev's
# database gives multipath the WWIDs), with prio alua and group_by_prio.
#
# Guest and host synchronise over serial ports: the guest asks on the
# results port (RUSTGT-SYNC WHAT), the host does it and answers on the
# guest's third port, /dev/ttyS2, with "done WHAT" (or "failed WHAT").

readonly GW_IQN=iqn.2026-11.org.rustgt:vm-gateways
readonly GW_A=10.0.2.101:3260
readonly GW_B=10.0.2.102:3260
readonly GW_GUEST_ADDR=10.0.2.15/24
readonly SYNC_TTY=/dev/ttyS2
# MiB written before the kill, during it and after it.
readonly MP_BEFORE_MB=8 MP_DURING_MB=8 MP_AFTER_MB=4

# mp_sync WHAT SECS: asks the host to do WHAT, waits up to SECS for its answer.
mp_sync() {
    local what="$1" secs="$2" line deadline
    stty -F "$SYNC_TTY" raw -echo || return 1
    exec 9<"$SYNC_TTY"
    marker "SYNC $what"
    deadline=$((SECONDS + secs))
    while [ "$SECONDS" -lt "$deadline" ]; do
        line=""
        read -r -t 5 line <&9 || true
        line=${line%$'\r'}
        case "$line" in
        "done $what") exec 9<&-; return 0 ;;
        "failed $what") exec 9<&-; return 1 ;;
        esac
    done
    exec 9<&-
    return 1
}

mp_has_nic() {
    local n
    for n in /sys/class/net/*; do
        [ "${n##*/}" = lo ] || return 0
    done
    return 1
}

# The guest's NIC (the one that is not lo), up with qemu's user-net address.
mp_net_up() {
    local ifc="" n
    for n in /sys/class/net/*; do
        [ "${n##*/}" = lo ] || ifc=${n##*/}
    done
    [ -n "$ifc" ] || return 1
    ip link set "$ifc" up && ip addr add "$GW_GUEST_ADDR" dev "$ifc"
}

mp_udev_start() {
    local udevd
    for udevd in /lib/systemd/systemd-udevd /usr/lib/systemd/systemd-udevd; do
        [ -x "$udevd" ] && break
    done
    [ -x "$udevd" ] || return 1
    "$udevd" --daemon || return 1
    udevadm trigger --action=add --subsystem-match=block --subsystem-match=scsi
    timeout 60 udevadm settle --timeout=50
}

mp_conf() {
    cat >/etc/multipath.conf <<'EOF'
defaults {
    user_friendly_names no
    find_multipaths no
    polling_interval 2
}
blacklist {
    devnode "^(vd|loop|ram|sr)"
}
devices {
    device {
        vendor "RUSTGT"
        product ".*"
        path_grouping_policy group_by_prio
        prio alua
        hardware_handler "1 alua"
        path_checker tur
        failback immediate
        # Queue while no path works, for at most 90 checks (about 3 min):
        # B answers ALUA transition sense until its librbd has broken the
        # dead A's lock.
        no_path_retry 90
    }
}
EOF
}

# mp_node PORTAL: a node record for the gateway at PORTAL, with short
# timeouts so a dead gateway is noticed within seconds.
mp_node() {
    iscsiadm -m node -T "$GW_IQN" -p "$1,1" -o new >/dev/null || return 1
    local kv
    for kv in node.session.timeo.replacement_timeout=5 node.conn[0].timeo.noop_out_interval=2 \
        node.conn[0].timeo.noop_out_timeout=4 node.session.initial_login_retry_max=4; do
        iscsiadm -m node -T "$GW_IQN" -p "$1" -o update -n "${kv%%=*}" -v "${kv#*=}" >/dev/null || return 1
    done
}

# mp_disk PORTAL: waits for the LUN's disk of the session to PORTAL, prints sdX.
mp_disk_now() {
    local s sid d addr="${1%:*}"
    for s in /sys/class/iscsi_session/session*; do
        [ "$(cat "$s/targetname" 2>/dev/null)" = "$GW_IQN" ] || continue
        sid=${s##*/session}
        [ "$(cat "/sys/class/iscsi_connection/connection$sid:0/persistent_address" 2>/dev/null)" = "$addr" ] || continue
        for d in "$s"/device/target*/*:*:*:0/block/*; do
            [ -e "$d" ] && echo "${d##*/}" && return 0
        done
    done
    return 1
}
mp_disk() {
    wait_until 60 mp_disk_now "$1" >/dev/null || return 1
    mp_disk_now "$1"
}

# The multipath map of both paths and each path's group priority:
# lines "map NAME", "path sdX PRIO STATE".
mp_layout() {
    multipath -ll 2>/dev/null | awk '
        /^[^|` ]/ && $2 ~ /^dm-[0-9]+$/ { print "map " $1 }
        /prio=/ { for (i = 1; i <= NF; i++) if ($i ~ /^prio=/) { p = substr($i, 6) } }
        / [0-9]+:[0-9]+:[0-9]+:[0-9]+ sd[a-z]+ / {
            for (i = 1; i <= NF; i++) if ($i ~ /^sd[a-z]+$/) print "path " $i " " p " " $(i + 2) }'
}

# mp_two_groups SDA SDB: true once one map holds both paths, one in a group
# at prio 50 (active/optimized: the gateway that holds the image's
# exclusive lock) and the other at 10 (active/non-optimized).
mp_two_groups() {
    local l
    l=$(mp_layout)
    [ "$(grep -c '^map ' <<<"$l")" = 1 ] || return 1
    { grep -q "^path $1 50 " <<<"$l" && grep -q "^path $2 10 " <<<"$l"; } ||
        { grep -q "^path $1 10 " <<<"$l" && grep -q "^path $2 50 " <<<"$l"; }
}

# mp_writer DEV: rewrites /tmp/during at 16 MiB of DEV, pass after pass
# (64 KiB direct writes), until /tmp/mp-stop exists; then one more whole
# pass, which began after the stop was asked for. Passes in /tmp/mp-passes.
mp_writer() {
    local n=0 stop i
    while [ "$n" -lt 10000 ]; do
        stop=0
        [ ! -e /tmp/mp-stop ] || stop=1
        # A pass is 8 writes of 1 MiB, each synced; the time each ends is
        # logged (the failover time is measured to one of them).
        for i in 0 1 2 3 4 5 6 7; do
            dd if=/tmp/during of="$1" bs=64k skip=$((i * 16)) seek=$((256 + i * 16)) count=16 \
                oflag=direct conv=fsync status=none || return 1
            echo "$EPOCHREALTIME" >>/tmp/mp-write-ends
        done
        n=$((n + 1))
        echo "$n" >/tmp/mp-passes
        [ "$stop" -eq 0 ] || return 0
    done
    return 2
}

mp_sum() { # mp_sum DEV OFFSET_MB MB
    dd if="$1" bs=1M skip="$2" count="$3" iflag=direct status=none | sha256sum | cut -d' ' -f1
}

check_mpath_rbd_failover() {
    local sda sdb map mp l t0 rc=0 wpid waited own own_dev other other_dev kill_asked kill_done resumed
    for l in virtio_net dm_multipath dm_round_robin dm_service_time scsi_dh_alua; do
        modprobe "$l" || fail "modprobe $l failed"
    done
    wait_until 10 mp_has_nic || fail "no network interface appeared (virtio_net)"
    mp_net_up || fail "cannot bring up the network interface for qemu's user network"
    mp_udev_start || fail "udevd did not start"
    mp_conf
    mp_node "$GW_A" || fail "iscsiadm: no node for gateway A"
    mp_node "$GW_B" || fail "iscsiadm: no node for gateway B"
    timeout 90 iscsiadm -m node -T "$GW_IQN" -p "$GW_A" --login >&2 || fail "login to gateway A ($GW_A) failed"
    timeout 90 iscsiadm -m node -T "$GW_IQN" -p "$GW_B" --login >&2 || fail "login to gateway B ($GW_B) failed"
    sda=$(mp_disk "$GW_A") || fail "no disk for the session to gateway A"
    sdb=$(mp_disk "$GW_B") || fail "no disk for the session to gateway B"
    [ "$sda" != "$sdb" ] || fail "both sessions show the same disk $sda"
    [ "$(cat "/sys/block/$sda/device/wwid")" = "$(cat "/sys/block/$sdb/device/wwid")" ] ||
        fail "the gateways report different LUs: $(cat "/sys/block/$sda/device/wwid") / $(cat "/sys/block/$sdb/device/wwid")"
    # B answers writes with ALUA transition sense while it waits for the lock;
    # no SCSI timeout should interfere.
    echo 180 >"/sys/block/$sda/device/timeout"
    echo 180 >"/sys/block/$sdb/device/timeout"
    say "paths: A $sda, B $sdb, wwid $(cat "/sys/block/$sda/device/wwid")"

    # One write through A makes A the image's exclusive-lock owner, the
    # active/optimized group (usually: the lock may also have moved to B by
    # the time multipathd asks; the check then kills B instead).
    dd if=/dev/zero of="/dev/$sda" bs=4k count=1 seek=4096 oflag=direct status=none ||
        fail "a write through gateway A's path failed"
    timeout 60 udevadm settle --timeout=50
    multipathd -d -s >"$STATE/multipathd.log" 2>&1 </dev/null &
    echo $! >"$STATE/multipathd.pid"
    if ! wait_until 60 mp_two_groups "$sda" "$sdb"; then
        multipath -ll >&2
        fail "no map with one path at prio 50 and the other at 10 within 60 s: $(mp_layout | tr '\n' ';')"
    fi
    # The gateway to kill: the lock owner, whose path is active/optimized.
    if grep -q "^path $sda 50 " <<<"$(mp_layout)"; then
        own=a own_dev=$sda other=b other_dev=$sdb
    else
        own=b own_dev=$sdb other=a other_dev=$sda
    fi
    say "gateway $own ($own_dev) is active/optimized, $other ($other_dev) active/non-optimized"
    map=$(mp_layout | awk '$1 == "map" && m == "" { m = $2 } END { print m }')
    mp=/dev/mapper/$map
    wait_until 10 test -b "$mp" || fail "no $mp"
    multipath -ll >&2
    grep -q "hwhandler='1 alua'" <(multipath -ll "$map" 2>/dev/null) ||
        fail "the map does not use the alua hardware handler"

    head -c $((MP_BEFORE_MB << 20)) /dev/urandom >/tmp/before
    head -c $((MP_DURING_MB << 20)) /dev/urandom >/tmp/during
    head -c $((MP_AFTER_MB << 20)) /dev/urandom >/tmp/after
    dd if=/tmp/before of="$mp" bs=1M oflag=direct conv=fsync status=none ||
        fail "writing $MP_BEFORE_MB MiB through the multipath device failed"
    [ "$(mp_sum "$mp" 0 "$MP_BEFORE_MB")" = "$(sha256sum </tmp/before | cut -d' ' -f1)" ] ||
        fail "the data written through the multipath device reads back different"

    # A writer busy all the time while gateway A dies: it rewrites the same
    # 8 MiB pass after pass, and ends with a pass begun after the kill.
    rm -f /tmp/mp-stop /tmp/mp-passes /tmp/mp-write-ends
    timeout 600 bash -c "$(declare -f mp_writer); mp_writer $mp" &
    wpid=$!
    wait_until 120 test -s /tmp/mp-passes || fail "the writer did not complete a first pass through A"
    t0=$SECONDS
    # The failover time counts from before the guest asks for the kill
    # (the host kills within a second or so), so it is never too short;
    # it ends when the writer's first 1 MiB write that ends after the
    # host confirmed the kill ends: it went through the survivor.
    kill_asked=$EPOCHREALTIME
    mp_sync "kill-$own" 120 || fail "the host did not kill gateway $own (no answer on $SYNC_TTY)"
    kill_done=$EPOCHREALTIME
    say "gateway $own killed by the host"
    touch /tmp/mp-stop
    wait "$wpid" || rc=$?
    waited=$((SECONDS - t0))
    [ "$rc" -eq 0 ] || fail "the writer failed when $own died (exit $rc, after ${waited}s, $(cat /tmp/mp-passes) passes)"
    resumed=$(awk -v a="$kill_asked" -v d="$kill_done" '$1 > d { printf "%.1f", $1 - a; exit }' /tmp/mp-write-ends)
    [ -n "$resumed" ] || fail "no write ended after the kill"
    say "writes resumed through $other ${resumed}s after the kill was asked for"
    awk -v r="$resumed" 'BEGIN { exit !(r <= 10) }' ||
        fail "writes resumed through $other only ${resumed}s after the kill (over 10 s)"
    dd if=/tmp/after of="$mp" bs=1M seek=32 oflag=direct conv=fsync status=none ||
        fail "a write after the failover failed"
    multipath -ll >&2
    l=$(mp_layout)
    grep -q "^path $other_dev [0-9]* active" <<<"$l" ||
        fail "$other's path is not active after the failover: $(tr '\n' ';' <<<"$l")"
    grep -q "^path $own_dev [0-9]* active" <<<"$l" &&
        fail "$own's path is still active after $own died: $(tr '\n' ';' <<<"$l")"

    drop_caches
    [ "$(mp_sum "$mp" 0 "$MP_BEFORE_MB")" = "$(sha256sum </tmp/before | cut -d' ' -f1)" ] ||
        fail "the data written before A died reads back different"
    [ "$(mp_sum "$mp" 16 "$MP_DURING_MB")" = "$(sha256sum </tmp/during | cut -d' ' -f1)" ] ||
        fail "the data written while A died reads back different"
    [ "$(mp_sum "$mp" 32 "$MP_AFTER_MB")" = "$(sha256sum </tmp/after | cut -d' ' -f1)" ] ||
        fail "the data written after the failover reads back different"
    # And through the surviving gateway's own path, past dm-multipath.
    [ "$(mp_sum "/dev/$other_dev" 16 "$MP_DURING_MB")" = "$(sha256sum </tmp/during | cut -d' ' -f1)" ] ||
        fail "$other's path reads other data than the multipath device"

    multipath -F >/dev/null 2>&1 || true
    kill "$(cat "$STATE/multipathd.pid")" 2>/dev/null || true
    timeout 30 iscsiadm -m node -T "$GW_IQN" -p "$GW_B" --logout >&2 || true
    timeout 30 iscsiadm -m node -T "$GW_IQN" -p "$GW_A" --logout >&2 || true
    pass "one map $map, $own $own_dev prio 50 / $other $other_dev prio 10 (alua); $own (the lock owner) killed during a rewrite loop ($(cat /tmp/mp-passes) passes): writes went on through $other ${resumed}s after the kill, the loop ended ${waited}s after it; ${MP_BEFORE_MB}+${MP_DURING_MB}+${MP_AFTER_MB} MiB intact"
}
