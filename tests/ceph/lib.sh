# shellcheck shell=bash
#
# tests/ceph/lib.sh: a throw-away one-node Ceph cluster for tests and
# benchmarks (one mon, one mgr, one memstore OSD, cephx, pool size 1, pool
# `rbd`), with no systemd and no cephadm. Sourced, never run; needs bash 4.4
# or later. The thin commands next to it (up, down, with-cluster) wrap it.
#
#   ceph_install   installs the Debian packages it needs, if missing
#   ceph_up        brings the cluster up and waits until it is healthy
#   ceph_down      stops what ceph_up started (by recorded PID) and removes
#                  the directory; idempotent
#   ceph_env       exports CEPH_CONF, RUSTGT_CEPH_CONF, RUSTGT_CEPH_KEYRING
#
# Settings, read from the environment each time a function runs:
#   RUSTGT_CEPH_DIR   everything of the cluster lives here
#                     (default /tmp/rustgt-ceph)
#   RUSTGT_CEPH_PORT  the mon's msgr2 port; msgr1 is the next one, and the mgr
#                     and OSD bind in PORT+2..PORT+99, so clusters whose ports
#                     are 100 apart never collide (default 36789)
#   SIG               the signal ceph_down sends: KILL (default; memstore keeps
#                     nothing worth a clean stop) or TERM (about 5 s)
#
# Every daemon listens on 127.0.0.1 only. Messages go to stderr. The
# functions return non-zero on failure (they do not exit), and do not rely
# on errexit: a caller may run them under `set -e` or in an `if`.
#
# Facts this relies on (Ceph 16, Debian 12):
#  - a memstore OSD's data directory must exist before `ceph-osd --mkfs`,
#    which otherwise crashes in MemStore::set_fsid (and the OSD id handed
#    out by `ceph osd new` is then taken: start over);
#  - memstore_page_set with 4 KiB pages keeps the OSD's memory close to the
#    data written (the default whole-object buffers fragment to several
#    times that under small random writes); memstore_device_bytes bounds
#    the data (default 1 GiB, too little for a 1 GiB image);
#  - HEALTH_OK shows up before the cluster is ready (a PG still peering, or
#    the mgr just turning active): ready means HEALTH_OK, an available mgr
#    and every PG active+clean, all at once;
#  - admin sockets named after $name collide for clients (they are all
#    client.admin), so only the daemons get one;
#  - the mon warns about free disk space below 30 % (mon_data_avail_warn);
#  - mgr_initial_modules replaces the default set, whose `restful` module
#    would listen on every interface;
#  - `kill -0` succeeds on a zombie: a process counts as gone when
#    /proc/PID/stat says state Z.

# The Debian packages of the cluster and of its clients (librbd, librados
# and their headers for builds, the tcmalloc an rbd-built rustgt links,
# tgt's rbd backstore).
CEPH_PACKAGES=(ceph-mon ceph-mgr ceph-osd ceph-common librbd-dev librados-dev libtcmalloc-minimal4 tgt-rbd)

# Set by ceph_up once it has created the directory: callers tear down only a
# cluster they started.
ceph_started_dir=""

ceph_dir() { printf '%s\n' "${RUSTGT_CEPH_DIR:-/tmp/rustgt-ceph}"; }
ceph_port() { printf '%s\n' "${RUSTGT_CEPH_PORT:-36789}"; }

ceph__log() { printf 'ceph: %s\n' "$*" >&2; }
ceph__err() { printf 'ceph: error: %s\n' "$*" >&2; }

# Microseconds since the epoch (bash 5's EPOCHREALTIME without its dot).
ceph__now_us() {
    local t=${EPOCHREALTIME:-}
    if [[ -n $t ]]; then
        printf '%s\n' "${t/[.,]/}"
    else
        printf '%s000000\n' "$(date +%s)"
    fi
}

# ceph__secs_since START_US: seconds since START_US, one decimal.
ceph__secs_since() {
    local d=$(($(ceph__now_us) - $1))
    printf '%d.%d\n' $((d / 1000000)) $((d % 1000000 / 100000))
}

# ---------------------------------------------------------------------------
# Installing
# ---------------------------------------------------------------------------

# Installed version of a package, empty when not installed.
ceph__installed_version() {
    dpkg-query -W -f='${db:Status-Abbrev} ${Version}\n' "$1" 2>/dev/null |
        awk '$1 == "ii" { print $2 }'
}

# ceph_missing_packages: prints the Debian packages ceph_install would install
# (one line, possibly empty).
ceph_missing_packages() {
    local p missing=()
    for p in "${CEPH_PACKAGES[@]}"; do
        [[ -n $(ceph__installed_version "$p") ]] || missing+=("$p")
    done
    command -v uuidgen >/dev/null || missing+=(uuid-runtime)
    # The JSON of `ceph ... -f json` is read with the system's python3 (a
    # pyenv shim may come first on PATH); ceph-common pulls it in anyway.
    [[ -x /usr/bin/python3 ]] || missing+=(python3)
    # ss, for checking that the mon's ports are free.
    command -v ss >/dev/null || missing+=(iproute2)
    printf '%s\n' "${missing[*]}"
}

ceph_install() {
    local missing sudo=()
    read -ra missing <<<"$(ceph_missing_packages)"
    ((${#missing[@]})) || return 0
    if ((EUID != 0)); then
        command -v sudo >/dev/null || {
            ceph__err "missing ${missing[*]}; run as root to install them"
            return 1
        }
        sudo=(sudo)
    fi
    ceph__log "installing ${missing[*]} ..."
    "${sudo[@]}" apt-get update -q >&2 || {
        ceph__err "apt-get update failed"
        return 1
    }
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends "${missing[@]}" >&2 || {
        ceph__err "apt-get install ${missing[*]} failed"
        return 1
    }
}

# ---------------------------------------------------------------------------
# Processes
# ---------------------------------------------------------------------------

# ceph__alive PID: the process exists and is not a zombie.
ceph__alive() {
    local stat
    # Not $(<file): under errexit, bash 5.2 exits when that cannot open the
    # file, || or not.
    { read -r stat <"/proc/$1/stat"; } 2>/dev/null || return 1
    stat=${stat##*) }
    [[ ${stat%% *} != Z ]]
}

# ceph__ours PID NAME: PID is the daemon NAME (mon.a, mgr.x, osd.0) that
# ceph_up started for the cluster in DIR: its argv[0] is ceph-TYPE and it was
# given DIR's ceph.conf. (A zombie has no cmdline, so it is not ours.)
ceph__ours() {
    local pid=$1 name=$2 conf argv=() a conf_seen=0
    conf="$(ceph_dir)/ceph.conf"
    [[ $pid =~ ^[1-9][0-9]*$ ]] || return 1
    { mapfile -d '' -t argv <"/proc/$pid/cmdline"; } 2>/dev/null || return 1
    ((${#argv[@]})) || return 1
    [[ ${argv[0]##*/} == "ceph-${name%%.*}" ]] || return 1
    for a in "${argv[@]}"; do
        [[ $a != "$conf" ]] || conf_seen=1
    done
    ((conf_seen))
}

# ceph__recorded: prints "PID NAME" for each run/pid.NAME file of the cluster.
ceph__recorded() {
    local f pid dir
    dir=$(ceph_dir)
    for f in "$dir"/run/pid.*; do
        [[ -f $f ]] || continue
        { read -r pid <"$f"; } 2>/dev/null || continue
        printf '%s %s\n' "$pid" "${f##*/pid.}"
    done
}

# ceph__running: prints "PID NAME" for each recorded daemon still running.
ceph__running() {
    local pid name
    while read -r pid name; do
        if ceph__ours "$pid" "$name" && ceph__alive "$pid"; then
            printf '%s %s\n' "$pid" "$name"
        fi
    done < <(ceph__recorded)
}

# ceph__port_busy PORT: something listens on 127.0.0.1:PORT (or any address).
ceph__port_busy() {
    if command -v ss >/dev/null; then
        [[ -n $(ss -Hltn "sport = :$1" 2>/dev/null) ]]
    else
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
    fi
}

# ---------------------------------------------------------------------------
# Teardown
# ---------------------------------------------------------------------------

# ceph_down: signals the daemons that ceph_up recorded (only those still
# being that daemon), waits until they are gone or zombies (bounded: 10 s,
# then SIGKILL and 5 s more), and removes the directory. Returns 0 when nothing runs, also when there was nothing.
ceph_down() {
    local dir sig t0 pid i pids=() left
    dir=$(ceph_dir)
    sig=${SIG:-KILL}
    case $sig in KILL | TERM | INT) ;; *)
        ceph__err "SIG=$sig: use KILL or TERM"
        return 1
        ;;
    esac
    if [[ ! -e $dir ]]; then
        ceph__log "down: nothing at $dir"
        return 0
    fi
    if [[ ! -e $dir/.rustgt-ceph ]]; then
        ceph__err "$dir was not made by tests/ceph (no .rustgt-ceph in it); not touching it"
        return 1
    fi
    t0=$(ceph__now_us)
    while read -r pid _; do
        if kill "-$sig" "$pid" 2>/dev/null; then
            pids+=("$pid")
        fi
    done < <(ceph__running)
    for ((i = 0; i < 150; i++)); do
        left=0
        for pid in "${pids[@]}"; do
            ! ceph__alive "$pid" || left=1
        done
        ((left)) || break
        # After 10 s, the stragglers get SIGKILL.
        if ((i == 100)); then
            for pid in "${pids[@]}"; do
                if ceph__alive "$pid"; then
                    ceph__log "pid $pid still alive after 10 s of SIG$sig; SIGKILL"
                    kill -KILL "$pid" 2>/dev/null || true
                fi
            done
        fi
        sleep 0.1
    done
    for pid in "${pids[@]}"; do
        if ceph__alive "$pid"; then
            ceph__err "pid $pid survived SIGKILL; leaving $dir in place"
            return 1
        fi
    done
    rm -rf -- "$dir"
    [[ $ceph_started_dir != "$dir" ]] || ceph_started_dir=""
    ceph__log "down: stopped ${#pids[@]} daemon(s) with SIG$sig and removed $dir in $(ceph__secs_since "$t0") s"
}

# ---------------------------------------------------------------------------
# Bring-up
# ---------------------------------------------------------------------------

# ceph__write_conf DIR PORT FSID
ceph__write_conf() {
    local d=$1 port=$2 fsid=$3
    cat >"$d/ceph.conf" <<EOF
# Written by tests/ceph/lib.sh for a throw-away test cluster.
[global]
fsid = $fsid
mon_host = [v2:127.0.0.1:$port,v1:127.0.0.1:$((port + 1))]
public_addr = 127.0.0.1
public_network = 127.0.0.0/8
ms_bind_ipv4 = true
ms_bind_ipv6 = false
ms_bind_port_min = $((port + 2))
ms_bind_port_max = $((port + 99))
auth_cluster_required = cephx
auth_service_required = cephx
auth_client_required = cephx
auth_allow_insecure_global_id_reclaim = false
keyring = $d/keyring
run_dir = $d/run
pid_file = $d/run/\$name.pid
crash_dir = $d/crash
log_file = $d/log/\$name.log
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
osd_pool_default_pg_autoscale_mode = off
osd_crush_chooseleaf_type = 0
mon_allow_pool_size_one = true
mon_warn_on_pool_no_redundancy = false

[mon]
admin_socket = $d/run/\$name.asok
mon_data = $d/data/\$name
mon_cluster_log_file = $d/log/cluster.log
mon_data_avail_warn = 2
mon_data_avail_crit = 1
mon_allow_pool_delete = true
mgr_initial_modules = iostat

[mgr]
admin_socket = $d/run/\$name.asok
mgr_data = $d/data/\$name

[osd]
admin_socket = $d/run/\$name.asok
osd_data = $d/data/\$name
osd_objectstore = memstore
memstore_device_bytes = 4294967296
memstore_page_set = true
memstore_page_size = 4096
EOF
}

# ceph__start NAME CMD...: starts one daemon in the background, its output
# in log/NAME.out, and records its PID in run/pid.NAME. It is started from a
# subshell that exits at once, so it is no child of the caller: no job
# notice when it is killed, and a caller's `wait` never waits for it.
ceph__start() {
    local d name=$1
    d=$(ceph_dir)
    shift
    ("$@" </dev/null >"$d/log/$name.out" 2>&1 &
        printf '%s\n' "$!" >"$d/run/pid.$name")
}

# ceph__tail FILE: its last 3 lines, on one line.
ceph__tail() {
    tail -n 3 "$1" 2>/dev/null | tr '\n' ' ' || true
}

# ceph__cli ARGS...: the ceph command against the cluster, bounded in time.
ceph__cli() {
    timeout 30 ceph -c "$(ceph_dir)/ceph.conf" --connect-timeout 10 "$@"
}

# ceph__state: one line "ready|waiting SUMMARY" from `ceph status`.
ceph__state() {
    local json
    json=$(ceph__cli status -f json 2>/dev/null) || {
        echo "waiting (ceph status failed)"
        return 0
    }
    /usr/bin/python3 -c '
import json, sys
s = json.loads(sys.argv[1])
health = s.get("health", {}).get("status", "?")
mgr = bool(s.get("mgrmap", {}).get("available"))
osd = s.get("osdmap", {})
osd = osd.get("osdmap", osd)
up = osd.get("num_up_osds", 0)
pg = s.get("pgmap", {})
n = pg.get("num_pgs", 0)
states = pg.get("pgs_by_state", [])
clean = sum(x["count"] for x in states if x.get("state_name") == "active+clean")
ok = health == "HEALTH_OK" and mgr and up >= 1 and n > 0 and clean == n
summary = ", ".join("%d %s" % (x["count"], x["state_name"]) for x in states) or "no PGs"
print("%s %s, mgr %s, %d OSD up, %s" % ("ready" if ok else "waiting", health,
      "available" if mgr else "not available", up, summary))
' "$json" 2>/dev/null || echo "waiting (unreadable status)"
}

# ceph__osds_up: the number of OSDs up, or nothing.
ceph__osds_up() {
    local json
    json=$(ceph__cli osd stat -f json 2>/dev/null) || return 0
    /usr/bin/python3 -c '
import json, sys
s = json.loads(sys.argv[1])
s = s.get("osdmap", s)
print(s["num_up_osds"])' "$json" 2>/dev/null || true
}

# ceph__check_daemons: every recorded daemon still runs (else says which not).
ceph__check_daemons() {
    local pid name
    while read -r pid name; do
        if ! ceph__alive "$pid"; then
            ceph__err "$name (pid $pid) exited"
            return 1
        fi
    done < <(ceph__recorded)
}

# What the last probe saw, for the messages.
ceph__probed=""

ceph__probe_mon() { ceph__cli mon stat >/dev/null 2>&1; }
ceph__probe_osd() {
    ceph__probed="$(ceph__osds_up) OSD(s) up"
    [[ $ceph__probed == "1 OSD(s) up" ]]
}
ceph__probe_ready() {
    local s
    s=$(ceph__state)
    ceph__probed=${s#* }
    [[ $s == ready* ]]
}

# ceph__wait SECONDS WHAT PROBE: runs PROBE every half second until it
# succeeds; fails the bring-up (ceph__fail) when a daemon dies or after
# SECONDS (and at most 4 x SECONDS probes, should a probe return at once).
ceph__wait() {
    local secs=$1 what=$2 probe=$3 deadline i
    deadline=$((SECONDS + secs))
    ceph__probed=""
    for ((i = 0; i < secs * 4; i++)); do
        ceph__check_daemons || {
            ceph__fail "a daemon died while waiting until $what"
            return
        }
        "$probe" && return 0
        ((SECONDS < deadline)) || break
        sleep 0.5
    done
    ceph__fail "waited ${secs} s in vain until $what${ceph__probed:+ (last: $ceph__probed)}"
}

# ceph__fail MESSAGE: reports a failed bring-up with the logs' last lines,
# tears down what was started, returns 1.
ceph__fail() {
    local d f
    d=$(ceph_dir)
    ceph__err "$1"
    for f in "$d"/log/mon.a.log "$d"/log/mgr.x.log "$d"/log/osd.0.log "$d"/log/*.out "$d"/log/osd.0.mkfs.log; do
        [[ -s $f ]] || continue
        printf '==> %s (last 15 lines) <==\n' "$f" >&2
        tail -n 15 "$f" >&2 || true
    done
    ceph_down || true
    return 1
}

# ceph_up: brings the cluster up in RUSTGT_CEPH_DIR and returns once it is
# ready (HEALTH_OK, mgr available, every PG active+clean; at most 180 s of
# waiting for that, after bounded steps before). Refuses when a cluster
# recorded there still runs; removes the directory of one that died. On any
# failure it tears down what it started and returns 1.
ceph_up() {
    local d port t0 fsid osd_uuid id i running
    d=$(ceph_dir)
    port=$(ceph_port)
    if ! [[ $port =~ ^[0-9]{1,5}$ ]] || ((port < 1024 || port > 65436)); then
        ceph__err "RUSTGT_CEPH_PORT=$port: want a port in 1024..65436"
        return 1
    fi
    [[ $d == /* && $d != / ]] || {
        ceph__err "RUSTGT_CEPH_DIR=$d: want an absolute path"
        return 1
    }
    if [[ -e $d ]]; then
        [[ -e $d/.rustgt-ceph ]] || {
            ceph__err "$d exists and was not made by tests/ceph; remove it or set RUSTGT_CEPH_DIR"
            return 1
        }
        running=$(ceph__running)
        if [[ -n $running ]]; then
            ceph__err "a cluster recorded in $d still runs (pid name: ${running//$'\n'/, }); run tests/ceph/down first"
            return 1
        fi
        ceph__log "removing the stale $d (its daemons are gone)"
        ceph_down || return 1
    fi
    for i in "$port" $((port + 1)); do
        if ceph__port_busy "$i"; then
            ceph__err "port $i is busy; set RUSTGT_CEPH_PORT to another (ports PORT..PORT+99 are used)"
            return 1
        fi
    done
    for i in uuidgen ceph ceph-authtool monmaptool ceph-mon ceph-mgr ceph-osd rbd; do
        command -v "$i" >/dev/null || {
            ceph__err "$i not found (run ceph_install, or tests/ceph/up, as root)"
            return 1
        }
    done

    t0=$(ceph__now_us)
    mkdir -p "$d" || {
        ceph__err "cannot create $d"
        return 1
    }
    : >"$d/.rustgt-ceph"
    ceph_started_dir=$d
    mkdir -p "$d/run" "$d/log" "$d/data" "$d/crash" || { ceph__fail "cannot create $d/*"; return; }
    fsid=$(uuidgen) || { ceph__fail "uuidgen failed"; return; }
    osd_uuid=$(uuidgen) || { ceph__fail "uuidgen failed"; return; }
    ceph__write_conf "$d" "$port" "$fsid" || { ceph__fail "cannot write $d/ceph.conf"; return; }

    # One keyring for everybody; the mon imports every key (and its caps)
    # when it makes its store, so the OSD's key exists before the OSD does.
    local k=$d/keyring
    {
        ceph-authtool --create-keyring "$k" --gen-key -n mon. --cap mon 'allow *' &&
            ceph-authtool "$k" --gen-key -n client.admin \
                --cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' --cap mds 'allow *' &&
            ceph-authtool "$k" --gen-key -n mgr.x \
                --cap mon 'allow profile mgr' --cap osd 'allow *' --cap mds 'allow *' &&
            ceph-authtool "$k" --gen-key -n osd.0 \
                --cap mon 'allow profile osd' --cap mgr 'allow profile osd' --cap osd 'allow *'
    } >/dev/null || { ceph__fail "ceph-authtool failed"; return; }
    monmaptool --create --fsid "$fsid" \
        --addv a "[v2:127.0.0.1:$port,v1:127.0.0.1:$((port + 1))]" "$d/monmap" >/dev/null ||
        { ceph__fail "monmaptool failed"; return; }

    timeout 60 ceph-mon -c "$d/ceph.conf" --mkfs -i a --monmap "$d/monmap" --keyring "$k" \
        >"$d/log/mon.a.mkfs.log" 2>&1 || { ceph__fail "ceph-mon --mkfs failed"; return; }
    ceph__start mon.a ceph-mon -c "$d/ceph.conf" -i a -f
    ceph__wait 60 "the mon answers" ceph__probe_mon || return
    ceph__log "mon up after $(ceph__secs_since "$t0") s"

    ceph__start mgr.x ceph-mgr -c "$d/ceph.conf" -i x -f

    id=$(ceph__cli osd new "$osd_uuid" 0 2>"$d/log/osd-new.err") ||
        { ceph__fail "ceph osd new failed: $(ceph__tail "$d/log/osd-new.err")"; return; }
    [[ $id == 0 ]] || { ceph__fail "ceph osd new gave id '$id', not 0"; return; }
    mkdir -p "$d/data/osd.0" || { ceph__fail "cannot create $d/data/osd.0"; return; }
    timeout 120 ceph-osd -c "$d/ceph.conf" -i 0 --mkfs --osd-uuid "$osd_uuid" \
        >"$d/log/osd.0.mkfs.log" 2>&1 || { ceph__fail "ceph-osd --mkfs failed"; return; }
    ceph__start osd.0 ceph-osd -c "$d/ceph.conf" -i 0 -f
    ceph__wait 120 "the OSD is up" ceph__probe_osd || return
    ceph__log "OSD up after $(ceph__secs_since "$t0") s"

    ceph__cli osd pool create rbd 8 8 >/dev/null 2>"$d/log/pool.err" ||
        { ceph__fail "ceph osd pool create rbd failed: $(ceph__tail "$d/log/pool.err")"; return; }
    timeout 60 rbd -c "$d/ceph.conf" pool init rbd 2>"$d/log/pool.err" ||
        { ceph__fail "rbd pool init rbd failed: $(ceph__tail "$d/log/pool.err")"; return; }

    if ! ceph__wait 180 "the cluster is ready" ceph__probe_ready; then
        ceph__cli health detail >&2 || true
        return 1
    fi
    ceph__log "ready after $(ceph__secs_since "$t0") s: $ceph__probed"
    ceph__log "conf $d/ceph.conf, keyring $d/keyring, mon 127.0.0.1:$port (v2) and :$((port + 1)) (v1)"
}

# ceph_env: exports what a client of the cluster needs.
ceph_env() {
    local d
    d=$(ceph_dir)
    export CEPH_CONF="$d/ceph.conf"
    export RUSTGT_CEPH_CONF="$d/ceph.conf"
    export RUSTGT_CEPH_KEYRING="$d/keyring"
}
