//! The reactors' time slice (`[reactor] slice_us`), black-box: the daemon's
//! reactor threads carry the slice the configuration asks for, as the
//! kernel reports it in /proc/PID/task/TID/sched (`se.slice`, Linux 6.12
//! and later; the test says so and checks nothing on older kernels).

mod common;

use std::time::Duration;

use common::{run_tool, Daemon, DEFAULT_IQN};

/// `se.slice` of each reactor thread of `pid`, in nanoseconds.
fn reactor_slices(pid: u32) -> Vec<u64> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if !comm.trim().starts_with("rustgt-reactor") || comm.trim().ends_with("-io") {
            continue;
        }
        let sched = std::fs::read_to_string(t.path().join("sched")).unwrap_or_default();
        let slice = sched
            .lines()
            .find(|l| l.starts_with("se.slice"))
            .and_then(|l| l.split(':').nth(1))
            .and_then(|v| v.trim().parse::<u64>().ok());
        if let Some(s) = slice {
            out.push(s);
        }
    }
    out
}

fn slice_reported() -> bool {
    std::fs::read_to_string("/proc/self/sched").is_ok_and(|s| s.contains("se.slice"))
}

fn check(config: &str, want_ns: Option<u64>) {
    let d = Daemon::start_with_config(config, 1);
    // Reactors start with the first connection.
    let out = run_tool(
        "iscsi-inq",
        &args![d.url(DEFAULT_IQN, 0)],
        Duration::from_secs(60),
    );
    assert!(out.success(), "iscsi-inq: {}", out.stderr);
    let pid = d.pid().expect("daemon pid");
    let slices = reactor_slices(pid);
    assert!(
        !slices.is_empty(),
        "no reactor thread found in /proc/{pid}/task"
    );
    let own = reactor_slices_of_self();
    for s in slices {
        match want_ns {
            Some(w) => assert_eq!(s, w, "a reactor's se.slice"),
            // The kernel's default: what any other thread has.
            None => assert_eq!(Some(s), own, "a reactor's se.slice with slice_us = 0"),
        }
    }
}

fn reactor_slices_of_self() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/sched")
        .ok()?
        .lines()
        .find(|l| l.starts_with("se.slice"))?
        .split(':')
        .nth(1)?
        .trim()
        .parse()
        .ok()
}

const TARGET: &str = r#"
[[targets]]
iqn = "iqn.2026-11.org.rustgt:default"
[[targets.luns]]
id = 0
backstore = "null"
size = "64M"
"#;

#[test]
fn reactors_take_the_configured_slice() {
    if !slice_reported() {
        eprintln!("this kernel does not report se.slice; nothing to check");
        return;
    }
    check(TARGET, Some(100_000));
    check(
        &format!("[reactor]\nslice_us = 2000\n{TARGET}"),
        Some(2_000_000),
    );
    check(&format!("[reactor]\nslice_us = 0\n{TARGET}"), None);
}
