//! libiscsi conformance: runs `iscsi-test-cu` (libiscsi's SCSI/iSCSI test
//! suite, a real initiator) against fresh rustgt daemons.
//!
//! `conformance_gate_suites` runs each suite of [`GATE_SUITES`] against its
//! own fresh daemon and requires every test to pass: a failure or a skip
//! (libiscsi skips when a feature is missing) fails the gate.
//! `conformance_all_totals` runs `-t ALL` once and only reports the totals;
//! it fails only if the run does not complete with a parseable summary.
//!
//! Both print a per-suite table and `libiscsi: pass N skip N fail N`
//! (visible with `--nocapture`, as tests/run does).

mod common;
#[path = "common/cunit.rs"]
mod cunit;

use std::time::Duration;

use common::{run_tool_watched, Daemon, DEFAULT_IQN, LIBISCSI_INITIATOR};
use cunit::{Counts, Outcome, Report};

/// Suites (the `ALL.<suite>` families of `iscsi-test-cu --list`) that must
/// pass completely.
const GATE_SUITES: &[&str] = &[
    "Inquiry",
    "Mandatory",
    "ModeSense6",
    "Read6",
    "Read10",
    "Read12",
    "Read16",
    "ReadCapacity10",
    "ReadCapacity16",
    "ReportSupportedOpcodes",
    "TestUnitReady",
    "Verify10",
    "Verify12",
    "Verify16",
    "Write10",
    "Write12",
    "Write16",
    "WriteVerify10",
    "WriteVerify12",
    "WriteVerify16",
    "iSCSIcmdsn",
    "iSCSIdatasn",
    "iSCSIResiduals",
    "iSCSITMF",
];

/// Bound of one suite's run (tgt runs each in well under a second).
const SUITE_TIMEOUT: Duration = Duration::from_secs(300);
/// Bound of the whole `-t ALL` run (tgt: about 15 s).
const ALL_TIMEOUT: Duration = Duration::from_secs(900);

/// Runs `iscsi-test-cu -t <test_spec>` with data-loss tests allowed against
/// LUN 0 of `daemon`'s default target; cut short if the daemon dies.
fn run_cu(
    daemon: &Daemon,
    test_spec: &str,
    timeout: Duration,
) -> Result<common::ToolOutput, common::Interrupted> {
    run_tool_watched(
        "iscsi-test-cu",
        &args![
            "--dataloss",
            "--verbose",
            "--initiator-name",
            LIBISCSI_INITIATOR,
            "--test",
            test_spec,
            daemon.url(DEFAULT_IQN, 0)
        ],
        timeout,
        daemon,
    )
}

/// Lines of the daemon's log quoted in a failure.
const LOG_TAIL: usize = 60;

fn describe(t: &cunit::TestResult) -> String {
    let what = match t.outcome {
        Outcome::Pass => "pass",
        Outcome::Skip => "SKIP",
        Outcome::Fail => "FAIL",
    };
    format!("{what} {}: {}", t.full_name(), t.notes.join(" | "))
}

/// Runs one `iscsi-test-cu` invocation and parses it; the error explains
/// what went wrong with enough output to debug it.
fn run_and_parse(daemon: &Daemon, test_spec: &str, timeout: Duration) -> Result<Report, String> {
    let out = match run_cu(daemon, test_spec, timeout) {
        Ok(out) => out,
        Err(cut) => {
            let completed = match cunit::parse(&cut.partial.stdout) {
                Err(cunit::ParseError::NoSummary {
                    completed,
                    unfinished,
                }) => format!(
                    "{} tests completed, {} was running",
                    completed.len(),
                    unfinished.as_deref().unwrap_or("no test")
                ),
                other => format!("{other:?}"),
            };
            return Err(format!(
                "{test_spec}: {} ({completed})\n{}\n--- last rustgt log lines ---\n{}",
                cut.reason,
                cut.partial,
                daemon.stderr_tail(LOG_TAIL)
            ));
        }
    };
    cunit::parse(&out.stdout).map_err(|e| {
        format!(
            "{test_spec}: {e}\n{out}\n--- last rustgt log lines ---\n{}",
            daemon.stderr_tail(LOG_TAIL)
        )
    })
}

#[test]
fn conformance_gate_suites() {
    let mut rows: Vec<(&str, Counts)> = Vec::new();
    let mut problems: Vec<String> = Vec::new();
    for &suite in GATE_SUITES {
        let daemon = Daemon::start();
        let report = match run_and_parse(&daemon, &format!("ALL.{suite}"), SUITE_TIMEOUT) {
            Ok(r) => r,
            Err(e) => {
                problems.push(e);
                rows.push((suite, Counts::default()));
                continue;
            }
        };
        let counts = report.counts();
        if counts.total() == 0 || report.tests.iter().any(|t| t.suite != suite) {
            problems.push(format!(
                "{suite}: expected tests of this suite only, got {:?}",
                report.by_suite()
            ));
        }
        if report.failed_suites() > 0 {
            problems.push(format!("{suite}: CUnit could not set the suite up"));
        }
        problems.extend(report.not_passed().map(describe));
        for t in report.tests.iter().filter(|t| t.passed_with_failure_log()) {
            println!("note: {}", describe(t));
        }
        rows.push((suite, counts));
        let status = daemon.stop();
        if !status.success() {
            problems.push(format!("{suite}: rustgt exited with {status} on SIGTERM"));
        }
    }
    print!("{}", cunit::render_table(rows.iter().copied()));
    assert!(
        problems.is_empty(),
        "{} gate problem(s):\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn conformance_all_totals() {
    let daemon = Daemon::start();
    let report = run_and_parse(&daemon, "ALL", ALL_TIMEOUT)
        .unwrap_or_else(|e| panic!("iscsi-test-cu -t ALL did not complete: {e}"));
    println!("iscsi-test-cu -t ALL:");
    print!(
        "{}",
        cunit::render_table(report.by_suite().iter().map(|(s, c)| (s.as_str(), *c)))
    );
    for t in report.not_passed() {
        println!("  {}", describe(t));
    }
    assert!(report.counts().total() > 0, "no test ran");
    assert_eq!(
        u64::try_from(report.tests.len()).ok(),
        Some(report.summary.tests.ran)
    );
}
