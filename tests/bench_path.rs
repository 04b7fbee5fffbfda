//! `rustgt bench path`, the in-process measure of the command path: every
//! combination of backing and direction completes its commands on the
//! calling thread with the replies due (a read's data and status, a
//! write's status), with a gap between commands too, and options out of
//! range are refused by name.

mod common;

use std::time::Duration;

use common::{bench_json, run_tool};

fn path(args: &[&str]) -> common::ToolOutput {
    let args: Vec<String> = ["bench", "path"]
        .iter()
        .chain(args)
        .map(|s| (*s).to_owned())
        .collect();
    run_tool(
        env!("CARGO_BIN_EXE_rustgt"),
        &args,
        Duration::from_secs(120),
    )
}

fn path_json(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["path"];
    all.extend_from_slice(args);
    bench_json(&all, Duration::from_secs(120))
}

#[test]
fn reads_and_writes_complete_on_the_calling_thread_with_their_replies() {
    for backing in ["null", "ram"] {
        for (rw, bs, reply) in [("read", 4096, 48 + 4096), ("write", 8192, 48)] {
            let bs_arg = bs.to_string();
            let r = path_json(&[
                "--backing",
                backing,
                "--rw",
                rw,
                "--bs",
                &bs_arg,
                "--commands",
                "3000",
                "--rounds",
                "2",
            ]);
            let what = format!("{backing} {rw}: {r}");
            assert_eq!(r["off_thread"], 0, "{what}");
            assert_eq!(r["reply_bytes"], reply, "{what}");
            assert_eq!(r["commands"], 3000, "{what}");
            let rounds = r["ns_per_command"].as_array().expect("rounds");
            assert_eq!(rounds.len(), 2, "{what}");
            for ns in rounds {
                let ns = ns.as_f64().expect("a number");
                assert!(ns > 0.0 && ns < 1e6, "{what}");
            }
            let median = r["median_ns"].as_f64().expect("median");
            assert!(
                rounds.iter().any(|ns| ns.as_f64() == Some(median)),
                "{what}"
            );
        }
    }
}

#[test]
fn a_gap_between_commands_is_not_counted() {
    // 200 commands after 2 ms each: 0.4 s asleep, far more than the
    // commands themselves take, and not in the figure.
    let r = path_json(&["--gap-us", "2000", "--commands", "200", "--rounds", "1"]);
    assert_eq!(r["gap_us"], 2000);
    assert_eq!(r["off_thread"], 0);
    let ns = r["median_ns"].as_f64().expect("median");
    assert!(ns > 0.0 && ns < 1_000_000.0, "{r}");
}

#[test]
fn options_out_of_range_are_refused_by_name() {
    for (args, name) in [
        (&["--bs", "1000"][..], "--bs"),
        (&["--bs", "131072"][..], "--bs"),
        (&["--commands", "0"][..], "--commands"),
        (&["--rounds", "101"][..], "--rounds"),
        (&["--gap-us", "100001"][..], "--gap-us"),
        (&["--backing", "file"][..], "--backing"),
    ] {
        let out = path(args);
        assert!(!out.success(), "{args:?} accepted");
        assert!(
            out.stderr.contains(name),
            "{args:?}: the error names {name}: {}",
            out.stderr
        );
    }
}
