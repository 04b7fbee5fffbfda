//! `rustgt bench load` against a real daemon: a paced run holds its offered
//! rate with no errors and reports the daemon's CPU over the window; an
//! unpaced run completes I/O.

mod common;

use std::time::Duration;

use common::{bench_load_json, run_tool, Daemon, DaemonOptions, DEFAULT_IQN};

fn load(d: &Daemon, extra: &[&str]) -> serde_json::Value {
    bench_load_json(&d.url(DEFAULT_IQN, 0), extra)
}

#[test]
fn paced_sessions_hold_the_offered_rate() {
    let d = Daemon::start();
    let pid = d.pid().expect("daemon running").to_string();
    let r = load(
        &d,
        &[
            "--sessions",
            "4",
            "--rate",
            "500",
            "--seconds",
            "2",
            "--warmup",
            "0.5",
            "--pid",
            &pid,
        ],
    );
    let iops = r["iops"].as_f64().expect("iops");
    assert_eq!(r["offered_iops"].as_f64(), Some(2000.0));
    assert!(
        (1800.0..=2200.0).contains(&iops),
        "achieved {iops} of 2000: {r}"
    );
    assert_eq!(r["error_count"].as_u64(), Some(0), "{r}");
    assert_eq!(
        r["transport_errors"].as_array().map(Vec::len),
        Some(0),
        "{r}"
    );
    let ios = r["ios"].as_u64().expect("ios");
    assert!(ios >= 3600, "{ios} commands measured: {r}");
    // Latency counts from the due time: a command sent before it was due
    // would show as 0; a loopback round trip takes microseconds.
    assert!(
        r["latency_us"]["p50"].as_f64().is_some_and(|v| v > 5.0),
        "{r}"
    );
    // Service time (send to status) is each command's latency less its
    // lateness, so none of its percentiles exceeds the latency's.
    for q in ["p50", "p99", "max"] {
        let service = r["service_us"][q].as_f64().expect("service_us");
        let latency = r["latency_us"][q].as_f64().expect("latency_us");
        assert!(service > 0.0 && service <= latency, "{q}: {r}");
    }
    let p = &r["pids"][0];
    assert_eq!(p["pid"].as_u64().map(|v| v.to_string()), Some(pid), "{r}");
    for key in ["cpu_pct", "cpu_us_per_io", "ctxsw_per_io"] {
        assert!(p[key].as_f64().is_some_and(|v| v > 0.0), "{key}: {r}");
    }
}

#[test]
fn unpaced_run_completes_io() {
    let d = Daemon::start();
    let r = load(
        &d,
        &[
            "--sessions",
            "2",
            "--rate",
            "0",
            "--qd",
            "4",
            "--rw",
            "mix",
            "--seconds",
            "1",
            "--warmup",
            "0.2",
        ],
    );
    assert!(r["reads"].as_u64().is_some_and(|v| v > 0), "{r}");
    assert!(r["writes"].as_u64().is_some_and(|v| v > 0), "{r}");
    assert!(r["iops"].as_f64().is_some_and(|v| v > 0.0), "{r}");
    assert_eq!(r["error_count"].as_u64(), Some(0), "{r}");
    assert_eq!(r["schedule_held"].as_bool(), Some(true), "{r}");
}

#[test]
fn a_dead_target_is_an_error_not_a_hang() {
    let d = Daemon::start();
    let url = d.url(DEFAULT_IQN, 0);
    d.stop();
    let out = run_tool(
        env!("CARGO_BIN_EXE_rustgt"),
        &[
            "bench".to_owned(),
            "load".to_owned(),
            url,
            "--seconds".to_owned(),
            "1".to_owned(),
        ],
        Duration::from_secs(30),
    );
    assert!(!out.success(), "{}", out.stdout);
    assert!(out.stderr.contains("connect"), "{}", out.stderr);
}

/// `--hostile`: every kind of hostile peer runs beside the load (each
/// shows episodes), the legitimate sessions get no error, and the target's
/// resident memory is reported and stays bounded (the output bound, the
/// data buffer budget: far under the 4 GiB one write holder alone could
/// pin without them).
#[test]
fn hostile_peers_run_beside_the_load_and_are_reported() {
    let d = Daemon::start();
    let pid = d.pid().expect("daemon running").to_string();
    let r = load(
        &d,
        &[
            "--sessions",
            "2",
            "--rate",
            "200",
            "--seconds",
            "3",
            "--warmup",
            "1",
            "--pid",
            &pid,
            "--hostile",
            "silent,write-hold,unread,login-churn",
        ],
    );
    assert_eq!(r["error_count"].as_u64(), Some(0), "{r}");
    assert_eq!(
        r["transport_errors"].as_array().map(Vec::len),
        Some(0),
        "{r}"
    );
    let hostile = r["hostile"].as_array().expect("hostile");
    let kinds: Vec<&str> = hostile.iter().filter_map(|h| h["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        ["silent", "write-hold", "unread", "login-churn"],
        "{r}"
    );
    for h in hostile {
        assert!(h["episodes"].as_u64().unwrap_or(0) >= 1, "{h} never ran");
    }
    let p = &r["pids"][0];
    let (start, peak) = (
        p["rss_start_mib"].as_f64().expect("rss_start_mib"),
        p["rss_peak_mib"].as_f64().expect("rss_peak_mib"),
    );
    assert!(start > 0.0 && peak >= start, "{p}");
    assert!(
        peak < 2048.0,
        "the target grew to {peak} MiB under hostile peers"
    );
}

/// Sessions that start at once retry a login the target closes over its
/// cap on logins in progress from one address (here 2), as an initiator
/// does, instead of failing the run: every session logs in, the report
/// counts the retries.
#[test]
fn logins_over_the_per_address_cap_are_tried_again() {
    let d = Daemon::start_with(DaemonOptions {
        env: vec![(
            "RUSTGT_LIMITS__MAX_LOGIN_CONNECTIONS_PER_ADDRESS".to_owned(),
            "2".to_owned(),
        )],
        ..DaemonOptions::default()
    });
    let r = load(
        &d,
        &[
            "--sessions",
            "32",
            "--rate",
            "20",
            "--seconds",
            "1",
            "--warmup",
            "0",
        ],
    );
    assert_eq!(r["error_count"].as_u64(), Some(0), "{r}");
    assert_eq!(
        r["transport_errors"].as_array().map(Vec::len),
        Some(0),
        "{r}"
    );
    assert!(
        r["login_retries"].as_u64().is_some_and(|n| n > 0),
        "32 logins at once past a cap of 2 needed no retry? {r}"
    );
}

#[test]
fn window_file_appears_when_the_window_begins() {
    let d = Daemon::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let mark = dir.path().join("window");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_rustgt"))
        .args(["bench", "load", &d.url(DEFAULT_IQN, 0), "--json", "--idle"])
        .args(["--sessions", "2", "--seconds", "3", "--warmup", "0.5"])
        .arg("--window-file")
        .arg(&mark)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn rustgt bench load");
    // Bounded: 30 s in 20 ms steps.
    let mut appeared = false;
    for _ in 0..1500 {
        if mark.exists() {
            appeared = true;
            break;
        }
        if child.try_wait().expect("try_wait").is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(appeared, "no window file while the load ran");
    // The window (3 s) is still on when the file appears.
    assert!(
        child.try_wait().expect("try_wait").is_none(),
        "the load had already ended when the window file appeared"
    );
    let out = child.wait_with_output().expect("wait");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(r["ios"].as_u64(), Some(0), "{r}");
    let written = std::fs::read_to_string(&mark).expect("window file");
    assert_eq!(written.trim().parse::<f64>().ok(), Some(3.0), "{written:?}");
}
