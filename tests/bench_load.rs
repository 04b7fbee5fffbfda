//! The paced load generator (`rustgt-load`, tests/load) against a real
//! daemon: paced sessions get the rate they offer, an unpaced run keeps
//! its queue full, and the daemon's CPU over the window is reported.

mod common;

use clap::Parser;
use common::Daemon;

const IQN: &str = "iqn.2026-11.org.rustgt:load";

fn null_daemon() -> Daemon {
    let toml = format!(
        "[[targets]]\niqn = \"{IQN}\"\nportals = [\"127.0.0.1:0\"]\n\n\
         [[targets.luns]]\nid = 0\nbackstore = \"null\"\nsize = \"1G\"\n"
    );
    Daemon::start_with_config(&toml, 1)
}

fn load(d: &Daemon, extra: &[&str]) -> serde_json::Value {
    let pid = d.pid().expect("daemon pid").to_string();
    let url = d.url(IQN, 0);
    let mut argv = vec!["rustgt-load", url.as_str(), "--pid", pid.as_str()];
    argv.extend_from_slice(extra);
    let args = rustgt_load::Args::try_parse_from(argv).expect("arguments");
    rustgt_load::run(&args).expect("load run")
}

fn num(v: &serde_json::Value, path: &[&str]) -> f64 {
    path.iter()
        .try_fold(v, |v, k| v.get(*k))
        .and_then(serde_json::Value::as_f64)
        .unwrap_or_else(|| panic!("no number at {path:?} in {v}"))
}

#[test]
fn paced_sessions_get_the_rate_they_offer() {
    let d = null_daemon();
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
        ],
    );
    assert_eq!(r["errors"], serde_json::json!({}), "{r}");
    let iops = num(&r, &["iops"]);
    // 2,000 offered; the machine is shared and noisy, so within 10%.
    assert!((1800.0..=2200.0).contains(&iops), "{r}");
    let p50 = num(&r, &["latency_us", "p50"]);
    let p99 = num(&r, &["latency_us", "p99"]);
    assert!(p50 > 0.0 && p99 >= p50, "{r}");
    let cpu = num(&r["processes"][0], &["cpu_us_per_io"]);
    assert!(cpu > 0.0, "{r}");
    assert!(num(&r["processes"][0], &["switches_per_io"]) >= 0.0, "{r}");
}

#[test]
fn an_unpaced_run_keeps_its_queue_full_and_writes_too() {
    let d = null_daemon();
    let r = load(
        &d,
        &[
            "--qd",
            "8",
            "--rw",
            "mix",
            "--seconds",
            "1",
            "--warmup",
            "0.2",
        ],
    );
    assert_eq!(r["errors"], serde_json::json!({}), "{r}");
    assert!(num(&r, &["completed"]) > 100.0, "{r}");
    assert_eq!(r["offered_iops"], serde_json::Value::Null, "{r}");
    // 1 MiB writes go through R2Ts (beyond FirstBurstLength).
    let r = load(
        &d,
        &[
            "--qd",
            "2",
            "--rw",
            "write",
            "--bs",
            "1m",
            "--seconds",
            "1",
            "--warmup",
            "0.2",
        ],
    );
    assert_eq!(r["errors"], serde_json::json!({}), "{r}");
    assert!(num(&r, &["mb_s"]) > 1.0, "{r}");
}

#[test]
fn a_bad_url_is_an_error_not_a_hang() {
    let args = rustgt_load::Args::try_parse_from([
        "rustgt-load",
        "iscsi://127.0.0.1:1/iqn.2026-11.org.rustgt:none/0",
        "--seconds",
        "1",
    ])
    .expect("arguments");
    let started = std::time::Instant::now();
    assert!(rustgt_load::run(&args).is_err());
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}
