//! `[reactor] inline_writes`, black-box: short buffered writes to a file
//! LUN are written by the connection's reactor, not handed to the LUN's
//! worker threads (which then never wake for them), and with
//! `inline_writes = false` every one of them goes to a worker. The
//! workers' voluntary context switches (summed over the daemon's
//! `rustgt-lun*-w*` threads in /proc) tell which: a worker sleeps after
//! each write it serves at a paced rate.

mod common;

use std::time::Duration;

use common::{run_tool, Daemon, DEFAULT_IQN};

/// Voluntary context switches of the LUN worker threads of `pid`.
fn worker_switches(pid: u32) -> u64 {
    let mut total = 0;
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("/proc/PID/task");
    for t in tasks.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        let comm = comm.trim();
        if !(comm.starts_with("rustgt-lun") && comm.contains("-w")) {
            continue;
        }
        let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
        total += status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
    }
    total
}

/// Runs 1,200 paced 4 KiB random writes (400 a second for 3 s); returns
/// the writes done and the worker switches over the run.
fn paced_writes(d: &Daemon) -> (u64, u64) {
    let pid = d.pid().expect("daemon running");
    let before = worker_switches(pid);
    let args: Vec<String> = [
        "bench",
        "load",
        &d.url(DEFAULT_IQN, 0),
        "--json",
        "--rw",
        "write",
        "--rate",
        "400",
        "--seconds",
        "3",
        "--warmup",
        "0",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let out = run_tool(env!("CARGO_BIN_EXE_rustgt"), &args, Duration::from_secs(60));
    assert!(out.success(), "bench load: {}\n{}", out.stdout, out.stderr);
    let r: serde_json::Value = serde_json::from_str(out.stdout.trim()).expect("json");
    assert_eq!(r["error_count"].as_u64(), Some(0), "{r}");
    let writes = r["writes"].as_u64().expect("writes");
    assert!(writes >= 1000, "{writes} writes: {r}");
    (writes, worker_switches(pid) - before)
}

fn config(inline: bool) -> String {
    format!(
        r#"
[reactor]
inline_writes = {inline}
[[targets]]
iqn = "{DEFAULT_IQN}"
[[targets.luns]]
id = 0
backstore = "file"
path = "{{data_dir}}/lun0.img"
size = "64M"
"#
    )
}

#[test]
fn short_buffered_writes_stay_on_the_reactor() {
    let on = Daemon::start_with_config(&config(true), 1);
    let (writes, switches) = paced_writes(&on);
    on.stop();
    // A slow write (the kernel throttling the writer) sends one second of
    // writes to the workers: a third of this run at most, for one such.
    assert!(
        (switches as f64) < 0.5 * writes as f64,
        "inline writes on: the workers switched {switches} times for {writes} writes"
    );

    let off = Daemon::start_with_config(&config(false), 1);
    let (writes, switches) = paced_writes(&off);
    assert!(
        (switches as f64) >= 0.8 * writes as f64,
        "inline writes off: the workers switched only {switches} times for {writes} writes"
    );
}
