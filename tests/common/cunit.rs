//! Parser of `iscsi-test-cu -v` output (libiscsi's conformance suite, run
//! by CUnit's basic interface in verbose mode).
//!
//! CUnit only knows pass and fail. libiscsi skips a test by logging a line
//! with "[SKIPPED]" and then calling `CU_PASS`, so CUnit counts a skipped
//! test as passed; this parser tells them apart: a test CUnit passed whose
//! output before its verdict contains "[SKIPPED]" is a skip.
//!
//! Shape of the output (verdict either right after "..." or at column 0
//! after the test's own log lines, which libiscsi indents by four spaces):
//! ```text
//! Suite: Read10
//!   Test: Simple ...passed
//!   Test: Unwritten ...    [SKIPPED] COMPAREANDWRITE is not implemented.
//! passed
//!   Test: iSCSIDataSnInvalid ...FAILED
//!     1. test_iscsi_datasn_invalid.c:98  - CU_ASSERT_NOT_EQUAL(ret,0)
//!
//! Run Summary:    Type  Total    Ran Passed Failed Inactive
//!               suites      3      3    n/a      0        0
//!                tests     12     12     11      1        0
//! ```
//! The parsed test list is cross-checked against the run summary, so a
//! change in libiscsi's output format fails loudly instead of miscounting.

use std::collections::BTreeMap;
use std::fmt;

/// What happened to one test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    Pass,
    Skip,
    Fail,
}

/// One test's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestResult {
    pub suite: String,
    pub name: String,
    pub outcome: Outcome,
    /// The test's "[SKIPPED]"/"[FAILED]" log lines and CUnit's failed
    /// assertions, for the report.
    pub notes: Vec<String>,
    /// Everything printed from the test's header to the next test, suite or
    /// run summary: its whole verbose log, to quote when it fails.
    pub log: Vec<String>,
}

impl TestResult {
    pub fn full_name(&self) -> String {
        format!("{}.{}", self.suite, self.name)
    }

    /// Passed per CUnit, but libiscsi logged a "[FAILED]" line on the way.
    pub fn passed_with_failure_log(&self) -> bool {
        self.outcome == Outcome::Pass && self.notes.iter().any(|n| n.contains("[FAILED]"))
    }
}

/// One row of CUnit's run summary: `Total Ran Passed Failed Inactive`
/// (`n/a` cells are `None`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SummaryRow {
    pub total: u64,
    pub ran: u64,
    pub passed: Option<u64>,
    pub failed: u64,
    pub inactive: Option<u64>,
}

/// CUnit's closing "Run Summary" table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    pub suites: SummaryRow,
    pub tests: SummaryRow,
    pub asserts: SummaryRow,
}

/// pass/skip/fail counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub pass: u64,
    pub skip: u64,
    pub fail: u64,
}

impl Counts {
    pub fn add(&mut self, o: Outcome) {
        match o {
            Outcome::Pass => self.pass += 1,
            Outcome::Skip => self.skip += 1,
            Outcome::Fail => self.fail += 1,
        }
    }

    pub fn total(&self) -> u64 {
        self.pass + self.skip + self.fail
    }
}

impl fmt::Display for Counts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "pass {} skip {} fail {}",
            self.pass, self.skip, self.fail
        )
    }
}

/// A fully parsed run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub tests: Vec<TestResult>,
    pub summary: Summary,
}

/// Why output could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// No "Run Summary" table: the tool died, was killed or never started.
    NoSummary {
        /// Tests whose verdict was seen before the output ended.
        completed: Vec<TestResult>,
        /// The test that was running when the output ended, if any.
        unfinished: Option<String>,
    },
    /// The summary is there but a row is malformed or missing.
    BadSummary(String),
    /// Parsed tests disagree with CUnit's own counts.
    Mismatch(String),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::NoSummary {
                completed,
                unfinished,
            } => {
                write!(
                    f,
                    "no CUnit run summary ({} tests completed",
                    completed.len()
                )?;
                if let Some(t) = unfinished {
                    write!(f, ", output ended inside {t}")?;
                }
                f.write_str(")")
            }
            ParseError::BadSummary(s) => write!(f, "malformed CUnit run summary: {s}"),
            ParseError::Mismatch(s) => write!(f, "parsed tests disagree with CUnit: {s}"),
        }
    }
}

impl std::error::Error for ParseError {}

/// A test seen but whose verdict may not have arrived yet.
struct Pending {
    result: TestResult,
    decided: bool,
    skipped: bool,
}

impl Pending {
    fn new(suite: &str, name: &str) -> Self {
        Self {
            result: TestResult {
                suite: suite.to_owned(),
                name: name.to_owned(),
                outcome: Outcome::Pass,
                notes: Vec::new(),
                log: Vec::new(),
            },
            decided: false,
            skipped: false,
        }
    }

    /// Feeds one piece of the test's output.
    fn feed(&mut self, text: &str) {
        self.result.log.push(text.to_owned());
        if self.decided {
            self.log_after(text);
        } else if !self.verdict(text) {
            self.log_before(text);
        }
    }

    /// Feeds text that may start with CUnit's verdict. Returns true if it did.
    fn verdict(&mut self, text: &str) -> bool {
        let outcome = if let Some(rest) = text.strip_prefix("passed") {
            self.log_after(rest);
            if self.skipped {
                Outcome::Skip
            } else {
                Outcome::Pass
            }
        } else if let Some(rest) = text.strip_prefix("FAILED") {
            self.log_after(rest);
            Outcome::Fail
        } else {
            return false;
        };
        self.result.outcome = outcome;
        self.decided = true;
        true
    }

    /// A log line of the test before its verdict.
    fn log_before(&mut self, text: &str) {
        let t = text.trim();
        if t.contains("[SKIPPED]") {
            self.skipped = true;
        }
        if t.contains("[SKIPPED]") || t.contains("[FAILED]") {
            self.result.notes.push(t.to_owned());
        }
    }

    /// Text after the verdict (late log lines, CUnit's failed assertions).
    fn log_after(&mut self, text: &str) {
        let t = text.trim();
        if !t.is_empty() {
            self.result.notes.push(t.to_owned());
        }
    }
}

/// Parses the complete stdout of one `iscsi-test-cu -v` run.
pub fn parse(output: &str) -> Result<Report, ParseError> {
    let mut suite = String::new();
    let mut tests: Vec<TestResult> = Vec::new();
    let mut pending: Option<Pending> = None;
    let mut lines = output.lines();
    let mut summary_lines: Option<Vec<&str>> = None;

    let finish = |p: Option<Pending>, tests: &mut Vec<TestResult>| {
        if let Some(p) = p {
            if p.decided {
                tests.push(p.result);
                None
            } else {
                Some(p.result.suite + "." + &p.result.name)
            }
        } else {
            None
        }
    };

    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("Run Summary:") {
            if let Some(unfinished) = finish(pending.take(), &mut tests) {
                return Err(ParseError::Mismatch(format!(
                    "{unfinished} has no verdict before the run summary"
                )));
            }
            summary_lines = Some(lines.by_ref().take(3).collect());
            break;
        }
        if let Some(name) = line.strip_prefix("Suite: ") {
            if let Some(unfinished) = finish(pending.take(), &mut tests) {
                return Err(ParseError::NoSummary {
                    completed: tests,
                    unfinished: Some(unfinished),
                });
            }
            suite = name.trim().to_owned();
            continue;
        }
        if let Some(rest) = test_header(line) {
            if let Some(unfinished) = finish(pending.take(), &mut tests) {
                return Err(ParseError::NoSummary {
                    completed: tests,
                    unfinished: Some(unfinished),
                });
            }
            let (name, after) = rest;
            let mut p = Pending::new(&suite, name);
            p.result.log.push(format!("Test: {name} ..."));
            p.feed(after);
            pending = Some(p);
            continue;
        }
        if let Some(p) = pending.as_mut() {
            p.feed(line);
        }
    }

    let Some(summary_lines) = summary_lines else {
        let unfinished = finish(pending, &mut tests);
        return Err(ParseError::NoSummary {
            completed: tests,
            unfinished,
        });
    };
    let summary = parse_summary(&summary_lines)?;
    let report = Report { tests, summary };
    report.cross_check()?;
    Ok(report)
}

/// `  Test: NAME ...REST` -> (NAME, REST).
fn test_header(line: &str) -> Option<(&str, &str)> {
    let rest = line.strip_prefix("  Test: ")?;
    let (name, after) = rest.split_once(" ...")?;
    Some((name.trim(), after))
}

fn parse_summary(lines: &[&str]) -> Result<Summary, ParseError> {
    let mut summary = Summary::default();
    let mut seen = [false; 3];
    for line in lines {
        let mut cells = line.split_whitespace();
        let (slot, row) = match cells.next() {
            Some("suites") => (0, &mut summary.suites),
            Some("tests") => (1, &mut summary.tests),
            Some("asserts") => (2, &mut summary.asserts),
            _ => continue,
        };
        let values: Vec<&str> = cells.collect();
        let [total, ran, passed, failed, inactive] = values.as_slice() else {
            return Err(ParseError::BadSummary(format!("row {line:?}")));
        };
        let num = |s: &str| {
            s.parse::<u64>()
                .map_err(|_| ParseError::BadSummary(format!("cell {s:?} in {line:?}")))
        };
        let opt = |s: &str| {
            if s == "n/a" {
                Ok(None)
            } else {
                num(s).map(Some)
            }
        };
        *row = SummaryRow {
            total: num(total)?,
            ran: num(ran)?,
            passed: opt(passed)?,
            failed: num(failed)?,
            inactive: opt(inactive)?,
        };
        if let Some(s) = seen.get_mut(slot) {
            *s = true;
        }
    }
    if seen != [true, true, true] {
        return Err(ParseError::BadSummary(format!(
            "expected suites, tests and asserts rows, got {lines:?}"
        )));
    }
    Ok(summary)
}

impl Report {
    fn cross_check(&self) -> Result<(), ParseError> {
        let counts = self.counts();
        let t = &self.summary.tests;
        if counts.total() != t.ran {
            return Err(ParseError::Mismatch(format!(
                "{} test verdicts parsed, CUnit ran {}",
                counts.total(),
                t.ran
            )));
        }
        if counts.fail != t.failed {
            return Err(ParseError::Mismatch(format!(
                "{} failures parsed, CUnit counted {}",
                counts.fail, t.failed
            )));
        }
        Ok(())
    }

    /// Totals over all tests.
    pub fn counts(&self) -> Counts {
        let mut c = Counts::default();
        for t in &self.tests {
            c.add(t.outcome);
        }
        c
    }

    /// Counts per suite, ordered by suite name.
    pub fn by_suite(&self) -> BTreeMap<String, Counts> {
        let mut m: BTreeMap<String, Counts> = BTreeMap::new();
        for t in &self.tests {
            m.entry(t.suite.clone()).or_default().add(t.outcome);
        }
        m
    }

    /// Suites CUnit could not even set up (their tests never ran).
    pub fn failed_suites(&self) -> u64 {
        self.summary.suites.failed
    }
}

/// The tests of `family` (e.g. "ALL") named by `iscsi-test-cu --list`, as
/// `Suite.Test`, in listed order. The listing names each family, suite and
/// test on its own line (`ALL`, `ALL.Read10`, `ALL.Read10.Simple`), maybe
/// indented; only the three-part names of the family are tests.
pub fn list_tests(listing: &str, family: &str) -> Vec<String> {
    listing
        .lines()
        .filter_map(|l| l.trim().strip_prefix(family)?.strip_prefix('.'))
        .filter(|rest| rest.split('.').count() == 2)
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TGT_ALL: &str = include_str!("../fixtures/libiscsi/tgt-1.0.85-all.txt");
    const TGT_READ10: &str = include_str!("../fixtures/libiscsi/tgt-1.0.85-read10.txt");
    const TGT_MIXED: &str = include_str!("../fixtures/libiscsi/tgt-1.0.85-mixed.txt");

    fn find<'a>(r: &'a Report, full: &str) -> &'a TestResult {
        r.tests
            .iter()
            .find(|t| t.full_name() == full)
            .unwrap_or_else(|| panic!("{full} not parsed"))
    }

    #[test]
    fn all_passing_suite() {
        let r = parse(TGT_READ10).expect("parses");
        assert_eq!(
            r.counts(),
            Counts {
                pass: 6,
                skip: 0,
                fail: 0
            }
        );
        let names: Vec<String> = r.tests.iter().map(TestResult::full_name).collect();
        assert_eq!(
            names,
            [
                "Read10.Simple",
                "Read10.BeyondEol",
                "Read10.ZeroBlocks",
                "Read10.ReadProtect",
                "Read10.DpoFua",
                "Read10.Async"
            ]
        );
        assert_eq!(
            r.summary.tests,
            SummaryRow {
                total: 6,
                ran: 6,
                passed: Some(6),
                failed: 0,
                inactive: Some(0)
            }
        );
        assert_eq!(r.summary.suites.passed, None, "n/a cell");
        assert_eq!(r.summary.asserts.total, 5675);
    }

    #[test]
    fn skips_and_failures_are_told_apart() {
        let r = parse(TGT_MIXED).expect("parses");
        assert_eq!(
            r.counts(),
            Counts {
                pass: 6,
                skip: 5,
                fail: 1
            }
        );
        let caw = find(&r, "CompareAndWrite.Simple");
        assert_eq!(caw.outcome, Outcome::Skip);
        assert!(caw
            .notes
            .iter()
            .any(|n| n.contains("COMPAREANDWRITE is not implemented")));
        let datasn = find(&r, "iSCSIdatasn.iSCSIDataSnInvalid");
        assert_eq!(datasn.outcome, Outcome::Fail);
        assert_eq!(datasn.notes.len(), 4, "{:?}", datasn.notes);
        assert!(datasn
            .notes
            .iter()
            .all(|n| n.contains("test_iscsi_datasn_invalid.c")));
        let by_suite = r.by_suite();
        assert_eq!(
            by_suite.get("CompareAndWrite"),
            Some(&Counts {
                pass: 0,
                skip: 5,
                fail: 0
            })
        );
        assert_eq!(
            by_suite.get("Read10"),
            Some(&Counts {
                pass: 6,
                skip: 0,
                fail: 0
            })
        );
        assert_eq!(
            by_suite.get("iSCSIdatasn"),
            Some(&Counts {
                pass: 0,
                skip: 0,
                fail: 1
            })
        );
    }

    #[test]
    fn full_run_against_tgt() {
        let r = parse(TGT_ALL).expect("parses");
        // CUnit: 230 ran, 222 passed, 8 failed. 62 of CUnit's passes are
        // libiscsi skips (81 "[SKIPPED]" lines: some tests log it twice).
        assert_eq!(
            r.counts(),
            Counts {
                pass: 160,
                skip: 62,
                fail: 8
            }
        );
        assert_eq!(r.summary.tests.passed, Some(222));
        assert_eq!(r.summary.suites.ran, 51);
        // A verdict at column 0 after log lines.
        assert_eq!(find(&r, "Reserve6.2Initiators").outcome, Outcome::Fail);
        assert_eq!(find(&r, "Reserve6.Logout").outcome, Outcome::Pass);
        // Log text after the verdict on the same line does not change it.
        let lun_reset = find(&r, "Reserve6.LUNReset");
        assert_eq!(lun_reset.outcome, Outcome::Pass);
        assert!(lun_reset.passed_with_failure_log());
        // A "[FAILED]" log with a CUnit pass stays a pass (CUnit decides).
        assert_eq!(find(&r, "WriteSame10.UnmapVPD").outcome, Outcome::Pass);
        // Names with punctuation.
        assert_eq!(
            find(&r, "ModeSense6.Control-D_SENSE").outcome,
            Outcome::Pass
        );
        assert_eq!(find(&r, "MultipathIO.Simple").outcome, Outcome::Skip);
        assert_eq!(
            find(&r, "iSCSITMF.LUNResetSimpleAsync").outcome,
            Outcome::Pass
        );
        assert_eq!(r.by_suite().len(), 51);
    }

    #[test]
    fn output_without_summary_is_an_error_listing_what_completed() {
        let cut = TGT_READ10
            .find("  Test: ZeroBlocks")
            .and_then(|i| TGT_READ10.get(..i + "  Test: ZeroBlocks ...".len()))
            .expect("fixture shape");
        match parse(cut) {
            Err(ParseError::NoSummary {
                completed,
                unfinished,
            }) => {
                assert_eq!(completed.len(), 2);
                assert_eq!(unfinished.as_deref(), Some("Read10.ZeroBlocks"));
            }
            other => panic!("expected NoSummary, got {other:?}"),
        }
        assert!(matches!(parse(""), Err(ParseError::NoSummary { .. })));
        let login_failure =
            "Login Failed. iscsi_service failed\nFailed to connect to SCSI device 0\n";
        assert!(matches!(
            parse(login_failure),
            Err(ParseError::NoSummary { .. })
        ));
    }

    #[test]
    fn counts_that_disagree_with_cunit_are_an_error() {
        let doctored = TGT_READ10.replace("  Test: Async ...passed\n", "");
        assert!(
            matches!(parse(&doctored), Err(ParseError::Mismatch(_))),
            "{:?}",
            parse(&doctored)
        );
        let bad_row =
            TGT_READ10.replace("tests      6      6      6", "tests      6      six      6");
        assert!(matches!(parse(&bad_row), Err(ParseError::BadSummary(_))));
    }

    #[test]
    fn test_log_keeps_the_whole_output_of_a_failed_test() {
        let r = parse(TGT_MIXED).expect("parses");
        let datasn = find(&r, "iSCSIdatasn.iSCSIDataSnInvalid");
        assert_eq!(
            datasn.log.first().map(String::as_str),
            Some("Test: iSCSIDataSnInvalid ...")
        );
        assert!(datasn.log.iter().any(|l| l.starts_with("FAILED")));
        assert!(datasn
            .log
            .iter()
            .any(|l| l.contains("test_iscsi_datasn_invalid.c")));
        assert!(
            !datasn.log.iter().any(|l| l.contains("Run Summary")),
            "the log stops at the summary"
        );
    }

    #[test]
    fn listing_gives_the_tests_of_a_family() {
        let listing = "ALL\nALL.Read10\nALL.Read10.Simple\nALL.Read10.BeyondEol\n\
                       ALL.ModeSense6\nALL.ModeSense6.Control-D_SENSE\n\
                       iSCSI\niSCSI.iSCSIcmdsn\niSCSI.iSCSIcmdsn.iSCSICmdSnTooHigh\n\
                       ALLOTHER.X.Y\n";
        assert_eq!(
            list_tests(listing, "ALL"),
            [
                "Read10.Simple",
                "Read10.BeyondEol",
                "ModeSense6.Control-D_SENSE"
            ]
        );
    }
}
