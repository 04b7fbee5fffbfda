//! QoS limits (Cinder's keys) against a running daemon, over real
//! sockets: the project's load generator (`rustgt bench load`, unpaced,
//! QD 32) reads a RAM LUN while the test samples the LUN's counters over
//! the admin socket and computes the rate the limit let through.
//!
//! The limiter defines the rate, so the upper bounds are tight (+5%);
//! the machine these run on is shared and busy, so the lower bounds are
//! loose (-20%, or "clearly above the base rate" for a burst) and only
//! say the limit did not starve the reader. The tests run one at a time
//! (a lock), as two loads at once would share the CPU.
//!
//! Also: two initiators with limits of their own on one LUN each get
//! their own rate; a limit changed over the admin socket (CLI) applies
//! within a second without dropping the session, and is saved; ABORT
//! TASK and LOGICAL UNIT RESET reach commands waiting for a limit.

mod admin_common;
mod common;
use rustgt_test_initiator as initiator;

use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use admin_common::{cli, Admin};
use common::{run_tool, Daemon, ToolOutput};
use initiator::{rw16, Session, READ_16};
use rustgt_iscsi::pdu::{Reply, TmfCode, TmfResult};
use serde_json::{json, Value};

const IQN: &str = "iqn.2026-11.org.rustgt:qos";

/// One load at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A target with RAM LUN 0 (`qos` is the body of its `[targets.luns.qos]`
/// table, `extra` more TOML after it) and an unlimited RAM LUN 1.
fn config(qos: &str, extra: &str) -> String {
    format!(
        "[[targets]]\niqn = \"{IQN}\"\n\
         [[targets.luns]]\nid = 0\nbackstore = \"ram\"\nsize = \"256M\"\nreadahead = \"none\"\n\
         [targets.luns.qos]\n{qos}\n{extra}\n\
         [[targets.luns]]\nid = 1\nbackstore = \"ram\"\nsize = \"64M\"\nreadahead = \"none\"\n"
    )
}

/// Starts `rustgt bench load` on LUN 0: unpaced, `qd` in flight, for
/// `secs` seconds; the report comes from the returned handle.
fn load(
    d: &Daemon,
    qd: usize,
    bs: &str,
    secs: u64,
    prefix: &str,
) -> thread::JoinHandle<ToolOutput> {
    let args: Vec<String> = [
        "bench",
        "load",
        &d.url(IQN, 0),
        "--json",
        "--rate",
        "0",
        "--qd",
        &qd.to_string(),
        "--bs",
        bs,
        "--seconds",
        &secs.to_string(),
        "--warmup",
        "0",
        "--initiator-prefix",
        prefix,
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    thread::spawn(move || {
        run_tool(
            env!("CARGO_BIN_EXE_rustgt"),
            &args,
            Duration::from_secs(secs + 60),
        )
    })
}

/// The load's report; it must have run without errors.
fn report(h: thread::JoinHandle<ToolOutput>) -> Value {
    let out = h.join().expect("load thread");
    assert!(out.success(), "bench load:\n{}\n{}", out.stdout, out.stderr);
    let r: Value =
        serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", out.stdout));
    assert_eq!(r["error_count"].as_u64(), Some(0), "{r}");
    assert_eq!(
        r["transport_errors"].as_array().map(Vec::len),
        Some(0),
        "{r}"
    );
    r
}

/// LUN 0's `lun_stats` entry.
fn lun0(a: &mut Admin) -> Value {
    a.ok(json!({"cmd": "lun_stats", "target": IQN, "lun": 0}))[0].clone()
}

fn reads(a: &mut Admin) -> (Instant, u64) {
    let v = lun0(a);
    (Instant::now(), v["read_commands"].as_u64().expect("reads"))
}

/// Waits (bounded) for the first read to complete; its time.
fn first_read(a: &mut Admin) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let (t, n) = reads(a);
        if n > 0 {
            return t;
        }
        thread::sleep(Duration::from_millis(10));
    }
    panic!("the load never read");
}

/// `f` (a counter) and when it was read: the middle of the request, so
/// that a slow answer (a busy machine) skews the rate by at most half of
/// its time.
fn at(a: &mut Admin, f: &mut impl FnMut(&mut Admin) -> u64) -> (Instant, u64) {
    let t = Instant::now();
    let c = f(a);
    (t + t.elapsed() / 2, c)
}

/// Rate of `f` (a counter) between now and `secs` later.
fn rate(a: &mut Admin, secs: f64, mut f: impl FnMut(&mut Admin) -> u64) -> f64 {
    let (t1, c1) = at(a, &mut f);
    thread::sleep(Duration::from_secs_f64(secs));
    let (t2, c2) = at(a, &mut f);
    (c2 - c1) as f64 / (t2 - t1).as_secs_f64()
}

fn read_commands(a: &mut Admin) -> u64 {
    lun0(a)["read_commands"].as_u64().expect("reads")
}

fn assert_rate(what: &str, got: f64, limit: f64, low: f64) {
    eprintln!("{what}: {got:.0}/s (limit {limit})");
    assert!(
        got <= limit * 1.05,
        "{what}: {got:.0}/s is above the limit {limit} + 5%"
    );
    assert!(
        got >= limit * low,
        "{what}: {got:.0}/s is far below the limit {limit} (a busy machine gets {:.0}% slack)",
        (1.0 - low) * 100.0
    );
}

#[test]
fn total_iops_sec_holds_a_qd32_reader() {
    let _one = serial();
    let d = Daemon::start_with_config(&config("total_iops_sec = 2000", ""), 1);
    let mut a = Admin::connect(&d);
    let h = load(&d, 32, "4k", 9, "iqn.2026-11.org.rustgt.load:i");
    first_read(&mut a);
    // Past the bucket's first tenth of a second.
    thread::sleep(Duration::from_millis(1000));
    let got = rate(&mut a, 6.0, read_commands);
    assert_rate("total_iops_sec = 2000, QD 32", got, 2000.0, 0.8);
    // Commands wait for the limit, in the task set, counted.
    let q = lun0(&mut a)["qos"].clone();
    assert!(q["delayed"].as_u64().is_some_and(|n| n > 1000), "{q}");
    assert!(q["throttled_us"].as_u64().is_some_and(|n| n > 0), "{q}");
    assert!(q["waiting"].as_u64().is_some_and(|n| n <= 32), "{q}");
    let s = a.ok(json!({"cmd": "session_stats"}));
    assert!(
        s[0]["qos"]["delayed"].as_u64().is_some_and(|n| n > 0),
        "{s}"
    );
    let m = a.ok(json!({"cmd": "metrics"}))["text"]
        .as_str()
        .expect("text")
        .to_owned();
    for series in [
        "rustgt_lun_qos_delayed_commands_total{target=\"iqn.2026-11.org.rustgt:qos\",lun=\"0\"}",
        "rustgt_lun_qos_throttled_seconds_total{",
        "rustgt_session_qos_waiting_commands{",
    ] {
        assert!(m.contains(series), "{series} missing:\n{m}");
    }
    let r = report(h);
    assert!(
        r["iops"]
            .as_f64()
            .is_some_and(|x| x <= 2000.0 * 1.05 + 25.0),
        "{r}"
    );
    let show = cli(&d, &["qos", "show", IQN]);
    show.assert_success();
    assert!(
        show.stdout.contains("total_iops_sec=2000"),
        "{}",
        show.stdout
    );
}

#[test]
fn read_bytes_sec_holds_1m_reads() {
    let _one = serial();
    let d = Daemon::start_with_config(&config("read_bytes_sec = \"50M\"", ""), 1);
    let mut a = Admin::connect(&d);
    let h = load(&d, 8, "1m", 8, "iqn.2026-11.org.rustgt.load:i");
    first_read(&mut a);
    thread::sleep(Duration::from_millis(1000));
    let got = rate(&mut a, 5.0, |a| {
        lun0(a)["read_bytes"].as_u64().expect("bytes")
    });
    assert_rate(
        "read_bytes_sec = 50M, 1 MiB reads",
        got,
        50.0 * 1048576.0,
        0.8,
    );
    report(h);
}

#[test]
fn a_burst_runs_faster_for_its_length_then_falls_back() {
    let _one = serial();
    // The figures of the issue are 8000 over 2000; a debug daemon and load
    // generator on a busy 2-core machine may not reach 8000, so the burst
    // is 4000 over 1000 (the same shape).
    let qos = "total_iops_sec = 1000\ntotal_iops_sec_max = 4000\ntotal_iops_sec_max_length = 2";
    let d = Daemon::start_with_config(&config(qos, ""), 1);
    let mut a = Admin::connect(&d);
    let h = load(&d, 32, "4k", 8, "iqn.2026-11.org.rustgt.load:i");
    let t0 = first_read(&mut a);
    thread::sleep((t0 + Duration::from_millis(1800)).saturating_duration_since(Instant::now()));
    let (t1, burst) = reads(&mut a);
    let secs = (t1 - t0).as_secs_f64();
    // The burst bucket holds (4000 - 1000) x 2 = 6000 I/Os, refilled at
    // 1000/s, taken at up to 4000/s: at most 4000/s (and the cap bucket's
    // 400) however fast the reader.
    let most = 4000.0 * secs + 400.0;
    eprintln!("burst: {burst} reads in the first {secs:.2} s");
    assert!(
        (burst as f64) <= most * 1.05,
        "{burst} reads in the first {secs:.2} s: above the burst rate"
    );
    assert!(
        (burst as f64) >= 2.0 * 1000.0 * secs,
        "{burst} reads in the first {secs:.2} s: the burst did not run above the base rate"
    );
    // Burst spent (6000 + 2 s of refill at 4000/s is 2 s): back to 1000.
    thread::sleep((t0 + Duration::from_millis(3500)).saturating_duration_since(Instant::now()));
    let after = rate(&mut a, 3.0, read_commands);
    assert_rate("after the burst", after, 1000.0, 0.8);
    report(h);
}

#[test]
fn two_initiators_with_their_own_limits_each_get_their_rate() {
    let _one = serial();
    let extra = "[[targets.luns.qos.initiators]]\ninitiator = \"iqn.2026-11.org.rustgt.load:a0\"\ntotal_iops_sec = 300\n\
                 [[targets.luns.qos.initiators]]\ninitiator = \"iqn.2026-11.org.rustgt.load:b0\"\ntotal_iops_sec = 900\n";
    let d = Daemon::start_with_config(&config("", extra), 1);
    let mut a = Admin::connect(&d);
    let ha = load(&d, 32, "4k", 9, "iqn.2026-11.org.rustgt.load:a");
    let hb = load(&d, 32, "4k", 9, "iqn.2026-11.org.rustgt.load:b");
    first_read(&mut a);
    thread::sleep(Duration::from_millis(1500));
    let per = |a: &mut Admin| -> (u64, u64) {
        let v = a.ok(json!({"cmd": "show_qos", "target": IQN}));
        let of = |name: &str| {
            v.as_array()
                .and_then(|l| l.iter().find(|x| x["initiator"] == name))
                .and_then(|x| x["stats"]["commands"].as_u64())
                .unwrap_or_else(|| panic!("no stats of {name}: {v}"))
        };
        (
            of("iqn.2026-11.org.rustgt.load:a0"),
            of("iqn.2026-11.org.rustgt.load:b0"),
        )
    };
    let t = Instant::now();
    let (a1, b1) = per(&mut a);
    let t1 = t + t.elapsed() / 2;
    thread::sleep(Duration::from_secs(5));
    let t = Instant::now();
    let (a2, b2) = per(&mut a);
    let t2 = t + t.elapsed() / 2;
    let secs = (t2 - t1).as_secs_f64();
    assert_rate("initiator a0", (a2 - a1) as f64 / secs, 300.0, 0.8);
    assert_rate("initiator b0", (b2 - b1) as f64 / secs, 900.0, 0.8);
    report(ha);
    report(hb);
}

#[test]
fn a_limit_changed_live_applies_within_a_second_and_is_saved() {
    let _one = serial();
    let d = Daemon::start_with_config(&config("total_iops_sec = 500", ""), 1);
    let mut a = Admin::connect(&d);
    let h = load(&d, 32, "4k", 10, "iqn.2026-11.org.rustgt.load:i");
    first_read(&mut a);
    thread::sleep(Duration::from_millis(500));
    let before = rate(&mut a, 2.0, read_commands);
    assert_rate("before the change", before, 500.0, 0.8);
    let tsih = a.ok(json!({"cmd": "list_sessions"}))[0]["tsih"].clone();
    let set = cli(&d, &["qos", "set", IQN, "0", "total_iops_sec=1500"]);
    set.assert_success();
    assert!(set.stdout.contains("qos limits changed"), "{}", set.stdout);
    // Within a second of the change the new limit holds.
    thread::sleep(Duration::from_secs(1));
    let after = rate(&mut a, 3.0, read_commands);
    assert_rate("after the change", after, 1500.0, 0.8);
    let sessions = a.ok(json!({"cmd": "list_sessions"}));
    assert_eq!(sessions.as_array().map(Vec::len), Some(1), "{sessions}");
    assert_eq!(sessions[0]["tsih"], tsih, "the same session carried on");
    let r = report(h);
    assert!(r["ios"].as_u64().is_some_and(|n| n > 0), "{r}");
    // Saved to the daemon's file, and shown.
    let saved =
        std::fs::read_to_string(d.data_dir().join("../rustgt.toml")).expect("the config file");
    assert!(saved.contains("total_iops_sec = 1500"), "{saved}");
    let shown = cli(&d, &["--json", "qos", "show"]);
    shown.assert_success();
    let v: Value = serde_json::from_str(&shown.stdout).expect("json");
    assert_eq!(v[0]["limits"]["total_iops_sec"], 1500, "{v}");
    // Cleared: the LUN has no table left.
    cli(&d, &["qos", "clear", IQN, "0"]).assert_success();
    assert!(!a.saved().contains("total_iops_sec"), "cleared");
    // A misspelt key is refused, naming it.
    let bad = cli(&d, &["qos", "set", IQN, "0", "total_iops=5"]);
    bad.assert_failure();
    assert!(bad.stderr.contains("unknown QoS key"), "{}", bad.stderr);
}

#[test]
fn abort_task_and_lun_reset_reach_throttled_commands() {
    let _one = serial();
    // One read per second: the first goes, the others wait for the limit.
    let d = Daemon::start_with_config(&config("read_iops_sec = 1", ""), 1);
    let mut a = Admin::connect(&d);
    let mut s = Session::login(
        d.portal,
        IQN,
        "iqn.2026-11.org.rustgt:qos-abort",
        [0x40, 0, 0, 0, 0, 1],
    );
    s.clear_unit_attentions(0);
    let tasks: Vec<(u32, u32)> = (0..4u64)
        .map(|i| s.start_command(0, &rw16(READ_16, i, 1), 512))
        .collect();
    admin_common::eventually("three reads waiting for the limit", || {
        lun0(&mut a)["qos"]["waiting"].as_u64() == Some(3)
    });
    let last = *tasks.last().expect("tasks");
    let t = Instant::now();
    let (resp, _) = s.task_mgmt(TmfCode::ABORT_TASK, 0, last);
    assert_eq!(resp, TmfResult::COMPLETE, "ABORT TASK of a waiting read");
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(lun0(&mut a)["qos"]["waiting"].as_u64(), Some(2));
    let t = Instant::now();
    let (resp, replies) = s.task_mgmt(TmfCode::LOGICAL_UNIT_RESET, 0, (0, 0));
    assert_eq!(resp, TmfResult::COMPLETE, "LUN RESET: {replies:?}");
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "the reset did not wait for the limit: {:?}",
        t.elapsed()
    );
    assert_eq!(lun0(&mut a)["qos"]["waiting"].as_u64(), Some(0));
    let later = s.replies_within(Duration::from_millis(1500)).expect("open");
    let answered = |itt: u32| {
        replies.iter().chain(&later).any(|r| match r {
            Reply::ScsiResponse(x) => x.itt == itt,
            Reply::DataIn(x) => x.itt == itt && x.has_status,
            _ => false,
        })
    };
    for (itt, _) in &tasks[1..] {
        assert!(!answered(*itt), "an aborted read got a response");
    }
    // LUN 1 has no limit: not held up by any of it.
    s.clear_unit_attentions(0);
    s.clear_unit_attentions(1);
    let r = s.command(1, &rw16(READ_16, 0, 1), &[], 512);
    assert!(r.is_good(), "{r}");
    s.logout();
}
