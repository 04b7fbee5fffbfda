# shellcheck shell=bash
# The checks of the qemu guest suite: the Linux initiator (open-iscsi +
# the kernel's iscsi_tcp) against rustgt, all on the guest's loopback.
#
# /init sources this file for CHECKS and runs each check as
#   bash checks.sh NAME
# in its own process under a time limit. A check ends with pass, fail or
# pending (lib.sh); pending means the target itself answered that it does
# not implement the feature the check needs (e.g. INVALID COMMAND OPERATION
# CODE), never that the check was skipped for convenience.

# name:time limit in seconds, in running order.
# shellcheck disable=SC2034 # read by /init, which sources this file
CHECKS=(
    discovery-sendtargets:120
    login-none:120
    login-chap:120
    login-chap-mutual:120
    refuse-chap-wrong-secret:120
    refuse-chap-missing:120
    refuse-mutual-bad-target-secret:120
    login-acl-allowed:120
    refuse-acl-initiator:120
    login-redirect:120
    fs-ext4:600
    fs-xfs:600
    fs-ext4-4k-blocks:300
    fio-randwrite-verify-digests:600
    fio-seqwrite-verify-digests:600
    two-luns-concurrent:600
    relogin-data-kept:300
    target-restart-graceful:420
    target-restart-crash:420
    sg-inq:120
    sg-vpd:120
    sg-readcap:120
    pr-two-initiators:180
    fstrim-thin:300
    seed-two-file-luns-one-disk:300
    seed-two-blockdev-regions-one-disk:300
    # iSER (guest/iser.sh): ib_iser over rdma_rxe, a second rustgt.
    iser-login:300
    iser-fs-roundtrip:600
    iser-fio-randwrite-verify:600
    iser-relogin:300
    iser-admin-live-target:300
    iser-target-restart-crash:300
)

# The multipath suite (guest/multipath.sh): the only checks of a guest booted
# with rustgt.gateways=1 (run-guest-suite --rbd-gateways), none otherwise.
# shellcheck disable=SC2034 # read by /init
MPATH_CHECKS=(
    mpath-rbd-failover:900
    mpath-rbd-explicit:900
)

# --- shared steps ---------------------------------------------------------

# login_ok IQN [IFACE]: logs in or fails the check.
login_ok() {
    local rc=0
    login "$@" || rc=$?
    [ "$rc" -eq 0 ] || fail "login to $1 (iface $(iface_of "$2")) failed: iscsiadm exit $rc"
    has_session "$@" || fail "iscsiadm reported a login to $1 but no session exists"
}

# dev_of IQN LUN [IFACE]: the LUN's disk or fails the check.
dev_of() {
    lun_dev "$@" || fail "no disk appeared for LUN $2 of $1 within 30 s"
}

# expect_refused IQN IFACE WHAT: a login must fail with an auth error.
expect_refused() {
    local rc=0
    login "$1" "$2" || rc=$?
    if has_session "$1" "$2"; then
        fail "$3: the login succeeded (a session exists)"
    fi
    [ "$rc" -ne 0 ] || fail "$3: iscsiadm exited 0 without a session"
    [ "$rc" -eq "$ISCSI_ERR_LOGIN_AUTH_FAILED" ] ||
        fail "$3: refused, but iscsiadm exit $rc, not $ISCSI_ERR_LOGIN_AUTH_FAILED (authentication/authorization failure)"
}

node_chap() {
    node_set "$1" "$2" node.session.auth.authmethod CHAP
    node_set "$1" "$2" node.session.auth.username "$CHAP_USER"
    node_set "$1" "$2" node.session.auth.password "$3"
}

node_mutual() {
    node_set "$1" "$2" node.session.auth.username_in "$MUTUAL_USER"
    node_set "$1" "$2" node.session.auth.password_in "$3"
}

# Reads a few blocks at the start and end of a disk (a live data path).
probe_io() {
    local dev="$1" size
    size=$(blockdev --getsize64 "$dev") || return 1
    dd if="$dev" of=/dev/null bs=4096 count=4 iflag=direct status=none || return 1
    dd if="$dev" of=/dev/null bs=4096 count=1 skip=$((size / 4096 - 1)) iflag=direct status=none
}

# populate DIR RANDOM_MIB WITH_USR_BIN: files whose sums are checked later.
populate() {
    local dir="$1" mb="$2" i
    mkdir -p "$dir/random" "$dir/small/a/b/c"
    for ((i = 1; i <= 4; i++)); do
        dd if=/dev/urandom of="$dir/random/r$i" bs=1M count=$((mb / 4)) status=none || return 1
    done
    for ((i = 1; i <= 200; i++)); do
        head -c $((i * 97)) /dev/urandom >"$dir/small/a/b/c/f$i" || return 1
    done
    if [ "$3" = yes ]; then
        cp -a /usr/bin "$dir/usr-bin" || return 1
    fi
}

# manifest DIR: sha256 of every file, stable order, lost+found excluded.
manifest() {
    (cd "$1" && find . -path ./lost+found -prune -o -type f -print0 | sort -z | xargs -0 -r sha256sum)
}

mkfs_of() {
    case "$1" in
    ext4) mkfs.ext4 -q -F -E nodiscard,lazy_itable_init=0,lazy_journal_init=0 "$2" ;;
    xfs) mkfs.xfs -q -f -K "$2" ;;
    esac
}

fsck_of() {
    case "$1" in
    ext4) e2fsck -fn "$2" ;;
    xfs) xfs_repair -n "$2" ;;
    esac
}

# fs_roundtrip FSTYPE DEV RANDOM_MIB WITH_USR_BIN
fs_roundtrip() {
    local fs="$1" dev="$2" mnt=/mnt/fs sums count
    mkdir -p "$mnt"
    mkfs_of "$fs" "$dev" || fail "mkfs.$fs $dev failed"
    mount -t "$fs" "$dev" "$mnt" || fail "mount of fresh $fs failed"
    populate "$mnt" "$3" "$4" || fail "writing files to $fs failed"
    manifest "$mnt" >/tmp/manifest || fail "hashing the written files failed"
    count=$(wc -l </tmp/manifest)
    umount "$mnt" || fail "umount after writing failed"
    drop_caches
    blockdev --flushbufs "$dev"
    mount -t "$fs" "$dev" "$mnt" || fail "remount of $fs failed"
    sums=$(cd "$mnt" && sha256sum -c --quiet /tmp/manifest 2>&1) ||
        fail "data changed after remount: $(echo "$sums" | sed -n 1,3p | tr '\n' ' ')"
    [ "$(manifest "$mnt" | wc -l)" -eq "$count" ] || fail "file count changed after remount"
    umount "$mnt" || fail "final umount failed"
    fsck_of "$fs" "$dev" >/tmp/fsck.out 2>&1 ||
        fail "fsck of $fs not clean: $(tail -n3 /tmp/fsck.out | tr '\n' ' ')"
    echo "$count"
}

# fio_verify NAME DEV SIZE IODEPTH ARGS...: a write pass, then a verify pass.
fio_verify() {
    local name="$1" dev="$2" size="$3" depth="$4"
    shift 4
    fio --name="$name" --filename="$dev" --direct=1 --ioengine=libaio \
        --iodepth="$depth" --size="$size" --verify=crc32c --do_verify=1 \
        --verify_fatal=1 --group_reporting "$@" >"/tmp/fio-$name.out" 2>&1
}

fio_summary() {
    grep -oE '^ +(READ|WRITE): bw=[^ ]+' "/tmp/fio-$1.out" | sed 's/^ *//; s/: / /' | paste -sd, - | sed 's/,/, /g'
}

# --- 1. discovery and login ------------------------------------------------

check_discovery_sendtargets() {
    local out t n rc=0
    out=$(timeout 60 iscsiadm -m discovery -t st -p "$PORTAL" -I default) || rc=$?
    [ "$rc" -eq 0 ] || fail "SendTargets discovery failed: iscsiadm exit $rc"
    for t in $ALL_TARGETS; do
        grep -qxF "$PORTAL,1 $t" <<<"$out" || fail "discovery lacks '$PORTAL,1 $t': got $(echo "$out" | tr '\n' ' ')"
    done
    n=$(echo "$out" | wc -l)
    # A target's ACL also hides it from other initiators' discovery.
    rc=0
    out=$(timeout 60 iscsiadm -m discovery -t st -p "$PORTAL" -I "$IFACE_B") || rc=$?
    [ "$rc" -eq 0 ] || fail "SendTargets discovery as $INITIATOR_B failed: iscsiadm exit $rc"
    grep -qF " $T_OPEN" <<<"$out" || fail "discovery as $INITIATOR_B lacks $T_OPEN"
    ! grep -qF " $T_ACL" <<<"$out" || fail "discovery as $INITIATOR_B lists $T_ACL, whose ACL excludes it"
    pass "$n targets listed, each with portal $PORTAL,1; $T_ACL hidden from $INITIATOR_B"
}

check_login_none() {
    local dev size
    node_new "$T_OPEN"
    login_ok "$T_OPEN"
    dev=$(dev_of "$T_OPEN" 0) || exit 1
    size=$(blockdev --getsize64 "$dev")
    [ "$size" -eq $((1 << 30)) ] || fail "LUN 0 is $size bytes, configured 1 GiB"
    probe_io "$dev" || fail "reads on $dev failed"
    logout "$T_OPEN" || fail "logout failed"
    ! has_session "$T_OPEN" || fail "session still present after logout"
    pass "login, 1 GiB disk $dev readable, logout"
}

check_login_chap() {
    local dev
    node_new "$T_CHAP"
    node_chap "$T_CHAP" "" "$CHAP_SECRET"
    login_ok "$T_CHAP"
    dev=$(dev_of "$T_CHAP" 0) || exit 1
    probe_io "$dev" || fail "reads on $dev failed"
    [ "$(session_state "$T_CHAP")" = LOGGED_IN ] || fail "session not LOGGED_IN"
    pass "CHAP login, $dev readable"
}

check_login_chap_mutual() {
    local dev
    node_new "$T_MUTUAL"
    node_chap "$T_MUTUAL" "" "$CHAP_SECRET"
    node_mutual "$T_MUTUAL" "" "$MUTUAL_SECRET"
    login_ok "$T_MUTUAL"
    dev=$(dev_of "$T_MUTUAL" 0) || exit 1
    probe_io "$dev" || fail "reads on $dev failed"
    pass "mutual CHAP login (initiator verified the target), $dev readable"
}

check_refuse_chap_wrong_secret() {
    node_new "$T_CHAP"
    node_chap "$T_CHAP" "" "not-the-right-secret"
    expect_refused "$T_CHAP" "" "wrong CHAP secret"
    pass "wrong CHAP secret refused (iscsiadm exit $ISCSI_ERR_LOGIN_AUTH_FAILED)"
}

check_refuse_chap_missing() {
    node_new "$T_CHAP"
    expect_refused "$T_CHAP" "" "login without CHAP to a CHAP target"
    pass "login without CHAP to a CHAP target refused"
}

check_refuse_mutual_bad_target_secret() {
    local rc=0
    node_new "$T_MUTUAL"
    node_chap "$T_MUTUAL" "" "$CHAP_SECRET"
    node_mutual "$T_MUTUAL" "" "a-different-target-secret"
    login "$T_MUTUAL" || rc=$?
    ! has_session "$T_MUTUAL" || fail "the initiator accepted a target proving the wrong secret"
    [ "$rc" -ne 0 ] || fail "iscsiadm exited 0 without a session"
    pass "initiator refused the target's mutual CHAP answer (iscsiadm exit $rc)"
}

check_login_acl_allowed() {
    local dev
    node_new "$T_ACL"
    login_ok "$T_ACL"
    dev=$(dev_of "$T_ACL" 0) || exit 1
    probe_io "$dev" || fail "reads on $dev failed"
    pass "$INITIATOR_A (in the ACL) logged in"
}

check_refuse_acl_initiator() {
    node_new "$T_ACL" "$IFACE_B"
    expect_refused "$T_ACL" "$IFACE_B" "initiator $INITIATOR_B outside the ACL"
    pass "$INITIATOR_B (not in the ACL) refused"
}

# Login redirection: the node's portal ($PORTAL) answers TARGET MOVED
# TEMPORARILY with $REDIRECT_PORTAL (rustgt.toml); open-iscsi logs in
# there and keeps $PORTAL as the node's persistent portal.
check_login_redirect() {
    local dev sid info
    node_new "$T_REDIRECT"
    login_ok "$T_REDIRECT"
    sid=$(session_id "$T_REDIRECT") || fail "no session id for $T_REDIRECT"
    info=$(iscsiadm -m session -r "$sid" -P 3 2>&1) || fail "iscsiadm -m session -r $sid -P 3 failed: $info"
    grep -qF "Current Portal: $REDIRECT_PORTAL,1" <<<"$info" ||
        fail "the session is not on the portal it was sent to: $(grep -F Portal <<<"$info" | tr '\n' ' ')"
    grep -qF "Persistent Portal: $PORTAL,1" <<<"$info" ||
        fail "the node's portal changed: $(grep -F Portal <<<"$info" | tr '\n' ' ')"
    dev=$(dev_of "$T_REDIRECT" 0) || exit 1
    probe_io "$dev" || fail "reads on $dev failed"
    logout "$T_REDIRECT" || fail "logout failed"
    pass "login at $PORTAL redirected to $REDIRECT_PORTAL (TARGET MOVED TEMPORARILY); the session reads there"
}

# --- 2. filesystems -----------------------------------------------------------

check_fs_ext4() {
    local dev n
    node_new "$T_OPEN"
    login_ok "$T_OPEN"
    dev=$(dev_of "$T_OPEN" 0) || exit 1
    n=$(fs_roundtrip ext4 "$dev" 32 yes) || exit 1
    pass "ext4 on $dev: $n files survive umount, drop_caches, remount; e2fsck -fn clean"
}

check_fs_xfs() {
    local dev n
    node_new "$T_OPEN"
    login_ok "$T_OPEN"
    dev=$(dev_of "$T_OPEN" 1) || exit 1
    n=$(fs_roundtrip xfs "$dev" 32 yes) || exit 1
    pass "xfs on $dev: $n files survive umount, drop_caches, remount; xfs_repair -n clean"
}

check_fs_ext4_4k_blocks() {
    local dev lbs n
    node_new "$T_OPEN"
    login_ok "$T_OPEN"
    dev=$(dev_of "$T_OPEN" 2) || exit 1
    lbs=$(blockdev --getss "$dev")
    [ "$lbs" -eq 4096 ] || fail "kernel sees $lbs-byte logical blocks, LUN has 4096"
    n=$(fs_roundtrip ext4 "$dev" 16 no) || exit 1
    pass "ext4 on 4096-byte-block $dev: $n files intact, e2fsck clean"
}

# --- 3. fio with verification, digests on -------------------------------------

# Logs in to the fio target with CRC32C header and data digests and checks
# the negotiated values; prints the disk.
login_with_digests() {
    local hd dd
    node_new "$T_FIO"
    node_set "$T_FIO" "" 'node.conn[0].iscsi.HeaderDigest' CRC32C
    node_set "$T_FIO" "" 'node.conn[0].iscsi.DataDigest' CRC32C
    login_ok "$T_FIO"
    hd=$(session_param "$T_FIO" HeaderDigest)
    dd=$(session_param "$T_FIO" DataDigest)
    { [ "$hd" = CRC32C ] && [ "$dd" = CRC32C ]; } ||
        fail "negotiated HeaderDigest=$hd DataDigest=$dd, asked for CRC32C"
    dev_of "$T_FIO" 0
}

check_fio_randwrite_verify_digests() {
    local dev
    dev=$(login_with_digests) || exit 1
    fio_verify randwrite "$dev" 64M 16 --rw=randwrite --bsrange=4k-128k ||
        fail "fio randwrite+verify failed: $(grep -m2 -iE 'verify|err' /tmp/fio-randwrite.out | tr '\n' ' ')"
    pass "digests CRC32C; randwrite 4k-128k iodepth 16 direct, crc32c verify ok ($(fio_summary randwrite))"
}

check_fio_seqwrite_verify_digests() {
    local dev
    dev=$(login_with_digests) || exit 1
    # 1 MiB writes exceed FirstBurstLength: unsolicited data plus R2Ts.
    fio_verify seqwrite "$dev" 96M 8 --rw=write --bs=1M ||
        fail "fio seq write+verify failed: $(grep -m2 -iE 'verify|err' /tmp/fio-seqwrite.out | tr '\n' ' ')"
    pass "digests CRC32C; 1 MiB sequential writes iodepth 8, crc32c verify ok ($(fio_summary seqwrite))"
}

# --- 4. concurrency and sessions -------------------------------------------

check_two_luns_concurrent() {
    local d0 d1 p0 p1 rc0=0 rc1=0
    node_new "$T_OPEN"
    login_ok "$T_OPEN"
    d0=$(dev_of "$T_OPEN" 0) || exit 1
    d1=$(dev_of "$T_OPEN" 1) || exit 1
    fio_verify lun0 "$d0" 48M 16 --rw=randwrite --bsrange=4k-64k &
    p0=$!
    fio_verify lun1 "$d1" 48M 16 --rw=randwrite --bsrange=4k-64k &
    p1=$!
    wait "$p0" || rc0=$?
    wait "$p1" || rc1=$?
    [ "$rc0" -eq 0 ] || fail "fio on LUN 0 failed: $(grep -m2 -iE 'verify|err' /tmp/fio-lun0.out | tr '\n' ' ')"
    [ "$rc1" -eq 0 ] || fail "fio on LUN 1 failed: $(grep -m2 -iE 'verify|err' /tmp/fio-lun1.out | tr '\n' ' ')"
    pass "fio randwrite+verify on LUN 0 and LUN 1 of one session at once"
}

check_relogin_data_kept() {
    local dev want got round
    node_new "$T_OPEN"
    login_ok "$T_OPEN"
    dev=$(dev_of "$T_OPEN" 1) || exit 1
    dd if=/dev/urandom of=/tmp/pattern bs=1M count=16 status=none
    want=$(sha256sum </tmp/pattern | cut -d' ' -f1)
    dd if=/tmp/pattern of="$dev" bs=1M oflag=direct conv=fsync status=none || fail "writing the pattern failed"
    for round in 1 2 3; do
        logout "$T_OPEN" || fail "logout $round failed"
        ! has_session "$T_OPEN" || fail "session still present after logout $round"
        login_ok "$T_OPEN"
        dev=$(dev_of "$T_OPEN" 1) || exit 1
        got=$(dev_sum "$dev" 16) || fail "reading back after login $round failed"
        [ "$got" = "$want" ] || fail "data differs after logout/login $round"
    done
    pass "16 MiB pattern intact across 3 logout/login rounds"
}

# reconnected OLD_PORT: the session to T_OPEN is LOGGED_IN on a new connection.
reconnected() {
    local now
    now=$(session_local_port "$T_OPEN") || return 1
    [ -n "$now" ] && [ "$now" != "$1" ] && session_logged_in "$T_OPEN"
}

# restart_check TERM|KILL: a mounted ext4 survives a target restart.
restart_check() {
    local sig="$1" dev mnt=/mnt/restart t0 waited errors port writer
    node_new "$T_OPEN"
    login_ok "$T_OPEN"
    dev=$(dev_of "$T_OPEN" 0) || exit 1
    mkdir -p "$mnt"
    mkfs_of ext4 "$dev" || fail "mkfs.ext4 failed"
    mount "$dev" "$mnt" || fail "mount failed"
    populate "$mnt/before" 16 no || fail "writing files failed"
    sync
    manifest "$mnt" >/tmp/manifest.before

    errors=$(dmesg | grep -c 'detected conn error')
    port=$(session_local_port "$T_OPEN") || fail "cannot read the connection's local port"
    dd if=/dev/urandom of=/tmp/inflight.src bs=1M count=4 status=none
    say "stopping rustgt with SIG$sig while $mnt is mounted"
    target_stop "$sig" || fail "rustgt did not exit on SIG$sig"
    # A write issued while the target is down must wait, then complete.
    dd if=/tmp/inflight.src of="$mnt/inflight" bs=64k oflag=direct conv=fsync status=none &
    writer=$!
    sleep 2
    target_start || fail "rustgt did not restart"
    t0=$SECONDS
    # Recovered = the same session, logged in again over a new connection.
    wait_until 150 reconnected "$port" ||
        fail "no re-login within 150 s of the restart (session: $(session_state "$T_OPEN" || echo gone), port $(session_local_port "$T_OPEN" || echo -), was $port)"
    waited=$((SECONDS - t0))
    errors=$(($(dmesg | grep -c 'detected conn error') - errors))
    wait "$writer" || fail "a write issued while the target was down failed after recovery"
    [ -b "$dev" ] || fail "$dev vanished across the restart"
    grep -q "^$dev $mnt .*\brw\b" /proc/mounts || fail "$mnt is no longer mounted read-write"

    # New writes go through the recovered session.
    populate "$mnt/after" 8 no || fail "writing after the restart failed"
    sync || fail "sync after the restart failed"
    manifest "$mnt" >/tmp/manifest.all
    umount "$mnt" || fail "umount failed"
    drop_caches
    mount "$dev" "$mnt" || fail "remount failed"
    (cd "$mnt" && sha256sum -c --quiet /tmp/manifest.before) >/tmp/sum.out 2>&1 ||
        fail "data synced before the restart changed: $(head -n2 /tmp/sum.out | tr '\n' ' ')"
    (cd "$mnt" && sha256sum -c --quiet /tmp/manifest.all) >/tmp/sum.out 2>&1 ||
        fail "data written after the restart changed: $(head -n2 /tmp/sum.out | tr '\n' ' ')"
    cmp -s /tmp/inflight.src "$mnt/inflight" || fail "the write issued while the target was down is not intact"
    umount "$mnt" || fail "final umount failed"
    fsck_of ext4 "$dev" >/tmp/fsck.out 2>&1 || fail "e2fsck not clean: $(tail -n2 /tmp/fsck.out | tr '\n' ' ')"
    pass "SIG$sig + restart: initiator logged in again after ${waited}s ($errors kernel conn errors); a write issued while it was down completed; $(wc -l </tmp/manifest.all) files intact, e2fsck clean"
}

check_target_restart_graceful() { restart_check TERM; }
check_target_restart_crash() { restart_check KILL; }

# --- 5. sg3-utils -------------------------------------------------------------

check_sg_inq() {
    local dev out pdt vendor product
    node_new "$T_OPEN"
    login_ok "$T_OPEN"
    dev=$(dev_of "$T_OPEN" 0) || exit 1
    out=$(sg_inq "$dev" 2>&1) || fail "sg_inq failed: $(echo "$out" | tail -n1)"
    pdt=$(grep -o 'Peripheral device type: [a-z ]*' <<<"$out" | sed -n 1p | cut -d: -f2 | sed 's/^ *//;s/ *$//')
    [ "$pdt" = disk ] || fail "peripheral device type '$pdt', want disk"
    vendor=$(echo "$out" | awk -F: '/Vendor identification/ { gsub(/^ +| +$/, "", $2); print $2 }')
    product=$(echo "$out" | awk -F: '/Product identification/ { gsub(/^ +| +$/, "", $2); print $2 }')
    { [ -n "$vendor" ] && [ -n "$product" ]; } || fail "empty vendor or product identification"
    pass "disk, vendor '$vendor', product '$product'"
}

check_sg_vpd() {
    local dev out pages p
    node_new "$T_OPEN"
    login_ok "$T_OPEN"
    dev=$(dev_of "$T_OPEN" 0) || exit 1
    # The Supported VPD Pages page, raw: a 4-byte header ending in the page
    # length, then one page code a byte (SPC-4 7.8.16).
    local -a bytes
    out=$(sg_vpd -p 0 -r "$dev" | od -An -tx1 -v) || fail "sg_vpd -p 0 failed"
    # shellcheck disable=SC2206 # split the hex dump into bytes
    bytes=($out)
    [ "${#bytes[@]}" -ge 4 ] || fail "Supported VPD Pages page is ${#bytes[@]} bytes long"
    local len=$((16#${bytes[2]} * 256 + 16#${bytes[3]})) i
    pages=""
    for ((i = 4; i < 4 + len && i < ${#bytes[@]}; i++)); do
        pages+="0x${bytes[i]} "
    done
    for p in 0x00 0x80 0x83; do
        [[ " $pages" == *" $p "* ]] || fail "mandatory VPD page $p missing from supported pages ($pages)"
    done
    for p in $pages; do
        sg_vpd -p "$p" "$dev" >/tmp/vpd.out 2>&1 ||
            fail "sg_vpd -p $p failed: $(tail -n1 /tmp/vpd.out)"
    done
    grep -q 'NAA' <<<"$(sg_vpd -p di "$dev" 2>&1)" || fail "device identification page has no NAA designator"
    grep -q 'Unit serial number: .' <<<"$(sg_vpd -p sn "$dev" 2>&1)" || fail "empty unit serial number"
    pass "pages ${pages% } all decode; NAA id and serial present"
}

# readcap_check DEV BLOCKS BLOCK_LEN: READ CAPACITY(10) and (16) agree.
readcap_check() {
    local dev="$1" out10 out16 n10 n16 l16
    out10=$(sg_readcap "$dev" 2>&1) || fail "READ CAPACITY(10) failed on $dev"
    out16=$(sg_readcap -l "$dev" 2>&1) || fail "READ CAPACITY(16) failed on $dev"
    n10=$(echo "$out10" | grep -o 'Number of logical blocks=[0-9]*' | cut -d= -f2)
    n16=$(echo "$out16" | grep -o 'Number of logical blocks=[0-9]*' | cut -d= -f2)
    l16=$(echo "$out16" | grep -o 'Logical block length=[0-9]*' | cut -d= -f2)
    { [ "$n10" = "$2" ] && [ "$n16" = "$2" ]; } || fail "$dev: blocks (10)=$n10 (16)=$n16, want $2"
    [ "$l16" = "$3" ] || fail "$dev: block length $l16, want $3"
}

check_sg_readcap() {
    local d0 d2
    node_new "$T_OPEN"
    login_ok "$T_OPEN"
    d0=$(dev_of "$T_OPEN" 0) || exit 1
    d2=$(dev_of "$T_OPEN" 2) || exit 1
    readcap_check "$d0" 2097152 512
    readcap_check "$d2" 16384 4096
    pass "1 GiB LUN = 2097152 x 512, 64 MiB LUN = 16384 x 4096, READ CAPACITY 10 and 16 agree"
}

# pr KEY... : sg_persist without the INQUIRY preamble.
pr() { sg_persist -n "$@" 2>&1; }

# raw_write DEV: WRITE(10) of one block at LBA 0 through SG_IO, so the SCSI
# status is seen as is. Prints sg_raw's output.
raw_write() {
    head -c 512 /dev/zero >/tmp/zero512
    sg_raw -s 512 -i /tmp/zero512 "$1" 2a 00 00 00 00 00 00 00 01 00 2>&1
}

check_pr_two_initiators() {
    local a b out rc=0
    node_new "$T_SHARED" default "$IFACE_B"
    login_ok "$T_SHARED"
    login_ok "$T_SHARED" "$IFACE_B"
    a=$(dev_of "$T_SHARED" 0) || exit 1
    b=$(dev_of "$T_SHARED" 0 "$IFACE_B") || exit 1

    out=$(pr -i -k "$a") || rc=$?
    if [ "$rc" -eq 9 ] || grep -qi 'invalid opcode\|invalid command operation code' <<<"$out"; then
        pending "target answers PERSISTENT RESERVE IN with INVALID COMMAND OPERATION CODE: persistent reservations not implemented"
    fi
    [ "$rc" -eq 0 ] || fail "PR IN READ KEYS failed (exit $rc): $(echo "$out" | tail -n1)"

    pr -o -G -S 0xa1 "$a" >/tmp/pr.out || fail "REGISTER key 0xa1 via $INITIATOR_A failed: $(tail -n1 /tmp/pr.out)"
    pr -o -G -S 0xb2 "$b" >/tmp/pr.out || fail "REGISTER key 0xb2 via $INITIATOR_B failed: $(tail -n1 /tmp/pr.out)"
    out=$(pr -i -k "$a") || fail "READ KEYS failed"
    { grep -q '0xa1' <<<"$out" && grep -q '0xb2' <<<"$out"; } || fail "READ KEYS lacks a key: $(echo "$out" | tr '\n' ' ')"
    pr -o -R -K 0xa1 -T 1 "$a" >/tmp/pr.out || fail "RESERVE (Write Exclusive) by A failed: $(tail -n1 /tmp/pr.out)"
    out=$(pr -i -r "$b") || fail "READ RESERVATION failed"
    { grep -q 'Key=0xa1' <<<"$out" && grep -qi 'write exclusive' <<<"$out"; } ||
        fail "READ RESERVATION does not show A's Write Exclusive: $(echo "$out" | tr '\n' ' ')"
    out=$(raw_write "$b") && fail "B wrote through A's Write Exclusive reservation"
    grep -qi 'reservation conflict' <<<"$out" || fail "B's write failed without RESERVATION CONFLICT: $(echo "$out" | tail -n1)"
    dd if="$b" of=/dev/null bs=4096 count=1 iflag=direct status=none || fail "B could not read under Write Exclusive"
    raw_write "$a" >/tmp/pr.out || fail "the holder A could not write: $(tail -n1 /tmp/pr.out)"
    pr -o -L -K 0xa1 -T 1 "$a" >/tmp/pr.out || fail "RELEASE by A failed: $(tail -n1 /tmp/pr.out)"
    raw_write "$b" >/tmp/pr.out || fail "B could not write after the release: $(tail -n1 /tmp/pr.out)"
    pr -o -G -K 0xa1 -S 0 "$a" >/tmp/pr.out || fail "unregister A failed"
    pr -o -G -K 0xb2 -S 0 "$b" >/tmp/pr.out || fail "unregister B failed"
    out=$(pr -i -k "$a") || fail "READ KEYS failed"
    grep -qi 'no registered reservation keys\|there are NO registered' <<<"$out" ||
        fail "keys left after unregistering: $(echo "$out" | tr '\n' ' ')"
    pass "register from two initiators, Write Exclusive conflicts B's write only, release, unregister"
}

check_fstrim_thin() {
    local dev out lbpme mnt=/mnt/thin before after trimmed
    node_new "$T_THIN"
    login_ok "$T_THIN"
    dev=$(dev_of "$T_THIN" 0) || exit 1
    out=$(sg_readcap -l "$dev" 2>&1) || fail "READ CAPACITY(16) failed"
    lbpme=$(echo "$out" | grep -o 'lbpme=[01]' | cut -d= -f2)
    if [ "$lbpme" = 0 ]; then
        pending "thin=true LUN reports LBPME=0 in READ CAPACITY(16): UNMAP not implemented"
    fi
    [ "$lbpme" = 1 ] || fail "cannot read LBPME from sg_readcap -l: $(echo "$out" | tr '\n' ' ')"
    grep -q 'Unmap command supported (LBPU): 1' <<<"$(sg_vpd -p lbpv "$dev" 2>&1)" ||
        fail "LBPME=1 but the Logical Block Provisioning VPD page does not announce UNMAP (LBPU)"
    [ "$(cat "/sys/block/${dev#/dev/}/queue/discard_max_bytes")" -gt 0 ] ||
        fail "the kernel did not enable discard on $dev"
    mkdir -p "$mnt"
    mkfs_of ext4 "$dev" || fail "mkfs.ext4 failed"
    mount -o nodiscard "$dev" "$mnt" || fail "mount failed"
    dd if=/dev/urandom of="$mnt/fill" bs=1M count=128 conv=fsync status=none || fail "writing 128 MiB failed"
    sync
    before=$(($(stat -c %b "$DATA/thin0.img") * 512))
    rm "$mnt/fill"
    sync
    out=$(fstrim -v "$mnt" 2>&1) || fail "fstrim failed: $out"
    sync
    after=$(($(stat -c %b "$DATA/thin0.img") * 512))
    trimmed=$(((before - after) >> 20))
    umount "$mnt"
    fsck_of ext4 "$dev" >/tmp/fsck.out 2>&1 || fail "e2fsck not clean after fstrim"
    [ "$trimmed" -ge 96 ] || fail "backing file shrank by $trimmed MiB after trimming 128 MiB ($out)"
    pass "$out; backing file released $trimmed MiB; e2fsck clean"
}

# --- 6. the seed experiment: two LUNs on one device, read at once ------------

# seed_pair IQN KEY0 KEY1: reads LUN 0 and LUN 1 with dd at the same time and
# compares with the sums taken when the guest wrote the regions.
seed_pair() {
    local iqn="$1" mb d0 d1 p0 p1 rc0=0 rc1=0 t0 e0 e1 want0 want1
    mb=$(awk '$1 == "mb" { print $2 }' "$STATE/seed.sums")
    want0=$(awk -v k="$2" '$1 == k { print $2 }' "$STATE/seed.sums")
    want1=$(awk -v k="$3" '$1 == k { print $2 }' "$STATE/seed.sums")
    node_new "$iqn"
    login_ok "$iqn"
    d0=$(dev_of "$iqn" 0) || exit 1
    d1=$(dev_of "$iqn" 1) || exit 1
    [ "$(blockdev --getsize64 "$d0")" -eq $((mb << 20)) ] || fail "LUN 0 is not $mb MiB"
    [ "$(blockdev --getsize64 "$d1")" -eq $((mb << 20)) ] || fail "LUN 1 is not $mb MiB"
    drop_caches
    t0=$SECONDS
    (
        dev_sum "$d0" "$mb" >/tmp/seed0 && echo $((SECONDS - t0)) >/tmp/seed0.t
    ) &
    p0=$!
    (
        dev_sum "$d1" "$mb" >/tmp/seed1 && echo $((SECONDS - t0)) >/tmp/seed1.t
    ) &
    p1=$!
    wait "$p0" || rc0=$?
    wait "$p1" || rc1=$?
    [ "$rc0" -eq 0 ] || fail "sequential read of LUN 0 failed"
    [ "$rc1" -eq 0 ] || fail "sequential read of LUN 1 failed"
    [ "$(cat /tmp/seed0)" = "$want0" ] || fail "LUN 0 data differs from its region"
    [ "$(cat /tmp/seed1)" = "$want1" ] || fail "LUN 1 data differs from its region"
    e0=$(cat /tmp/seed0.t)
    e1=$(cat /tmp/seed1.t)
    pass "two concurrent ${mb} MiB dd reads (direct, 1 MiB) intact; took ${e0}s and ${e1}s (informational)"
}

check_seed_two_file_luns_one_disk() { seed_pair "$T_SEED_FILE" file0 file1; }
check_seed_two_blockdev_regions_one_disk() { seed_pair "$T_SEED_DEV" dev0 dev1; }

# The iSER checks (check_iser_*).
# shellcheck source=tests/vm/guest/iser.sh
. /rustgt-vm/iser.sh
# The dm-multipath checks over two host gateways (check_mpath_*).
# shellcheck source=tests/vm/guest/multipath.sh
. /rustgt-vm/multipath.sh

# Run as `bash checks.sh NAME`: one check in this process.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    # shellcheck source=tests/vm/guest/lib.sh
    . /rustgt-vm/lib.sh
    set -o pipefail
    fn="check_${1//-/_}"
    declare -F "$fn" >/dev/null || fail "no such check: $1"
    "$fn"
    fail "check $1 ended without a verdict"
fi
