//! Black-box: two rustgt gateways serving one Ceph RBD image (target
//! `port_groups`, cargo feature `rbd`), against a real Ceph cluster from
//! `tests/ceph/with-cluster` (tests/run runs this file that way; without
//! `RUSTGT_CEPH_CONF` every test fails and says how to run it).
//!
//! What is checked, each with libiscsi's own tests given one URL per
//! gateway (libiscsi then runs its multipath tests across them, and its
//! persistent reservation tests use the second gateway as the other
//! I_T nexus):
//! - `SCSI.MultipathIO` passes in full: Simple, Reset (a LUN reset through
//!   one gateway raises the unit attention on the other), CompareAndWrite
//!   and CompareAndWriteAsync (1,000 racing COMPARE AND WRITEs per path,
//!   each GOOD or MISCOMPARE);
//! - the persistent reservation suites pass with registrations made
//!   through one gateway and access checked through the other;
//! - the CompareAndWrite, OrWrite and Reserve6 suites pass with the other
//!   gateway serving the same image (multi-block COMPARE AND WRITE and
//!   ORWRITE fence their blocks off on it; Reserve6.2Initiators reserves
//!   through one gateway and is refused through the other);
//! - REPORT TARGET PORT GROUPS on either gateway lists both groups, the
//!   group of the gateway that wrote last active/optimized and the other
//!   active/non-optimized.

#![cfg(feature = "rbd")]

#[path = "common/ceph.rs"]
mod ceph;
mod common;
// Only the parser of the run is used here.
#[allow(dead_code)]
#[path = "common/cunit.rs"]
mod cunit;
use rustgt_test_initiator as initiator;

use std::time::Duration;

use ceph::{gateway, Image};
use common::{run_tool, Daemon, DEFAULT_IQN};
use cunit::{Outcome, TestResult};
use initiator::{rw16, Session, GOOD, WRITE_16};

const SUITES: Duration = Duration::from_secs(900);

/// Runs iscsi-test-cu on `tests` with one URL per gateway; asserts that
/// every test it ran passed and that each of `must_run` ran.
fn suites_pass(a: &Daemon, b: &Daemon, tests: &str, must_run: &[&str]) {
    let args = vec![
        "--dataloss".to_owned(),
        "-t".to_owned(),
        tests.to_owned(),
        a.url(DEFAULT_IQN, 0),
        b.url(DEFAULT_IQN, 0),
    ];
    let out = run_tool("iscsi-test-cu", &args, SUITES);
    let report = cunit::parse(&out.stdout)
        .unwrap_or_else(|e| panic!("iscsi-test-cu output: {e:?}\n{}", out.stdout));
    let bad: Vec<String> = report
        .tests
        .iter()
        .filter(|t| t.outcome != Outcome::Pass)
        .map(|t| format!("{} {:?}: {:?}", t.full_name(), t.outcome, t.notes))
        .collect();
    assert!(bad.is_empty(), "not passed across two gateways: {bad:#?}");
    assert_eq!(report.summary.tests.failed, 0);
    for name in must_run {
        assert!(
            report.tests.iter().any(|t| t.full_name().ends_with(name)),
            "{name} did not run: {:?}",
            report
                .tests
                .iter()
                .map(TestResult::full_name)
                .collect::<Vec<_>>()
        );
    }
}

#[test]
fn on_ceph_two_gateways_pass_libiscsi_multipath() {
    let image = Image::create("gw-mpio", 64);
    let a = gateway(&image, 1);
    let b = gateway(&image, 2);
    suites_pass(
        &a,
        &b,
        "ALL.MultipathIO",
        &[
            "MultipathIO.Simple",
            "MultipathIO.Reset",
            "MultipathIO.CompareAndWrite",
            "MultipathIO.CompareAndWriteAsync",
        ],
    );
}

#[test]
fn on_ceph_two_gateways_share_persistent_reservations() {
    let image = Image::create("gw-pr", 64);
    let a = gateway(&image, 1);
    let b = gateway(&image, 2);
    suites_pass(
        &a,
        &b,
        "ALL.PrinReadKeys,ALL.PrinServiceactionRange,ALL.PrinReportCapabilities,\
         ALL.ProutRegister,ALL.ProutReserve,ALL.ProutClear,ALL.ProutPreempt",
        &[
            "ProutReserve.AccessWE",
            "ProutReserve.AccessEA",
            "ProutReserve.OwnershipWE",
            "ProutPreempt.RemoveRegistration",
            "PrinReadKeys.Simple",
        ],
    );
}

#[test]
fn on_ceph_two_gateways_pass_libiscsi_caw_orwrite_and_reserve6() {
    // COMPARE AND WRITE of more than one block and ORWRITE fence their
    // blocks off on the other gateway; RESERVE(6) is enforced there.
    // CompareAndWrite.InvalidDataOutSize is left out: it needs at least
    // two logical blocks per physical block, and skips on this LUN.
    let image = Image::create("gw-caw-r6", 64);
    let a = gateway(&image, 1);
    let b = gateway(&image, 2);
    suites_pass(
        &a,
        &b,
        "ALL.CompareAndWrite.Simple,ALL.CompareAndWrite.DpoFua,ALL.CompareAndWrite.Miscompare,\
         ALL.CompareAndWrite.Unwritten,ALL.OrWrite,ALL.Reserve6",
        &[
            "CompareAndWrite.Simple",
            "CompareAndWrite.Miscompare",
            "OrWrite.Simple",
            "Reserve6.2Initiators",
            "Reserve6.LUNReset",
        ],
    );
}

/// (group id, asymmetric access state) of each descriptor.
fn rtpg(s: &mut Session) -> Vec<(u16, u8)> {
    let cdb = [0xA3, 0x0A, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0];
    let r = s.command(0, &cdb, &[], 1024);
    assert_eq!(r.status, GOOD, "REPORT TARGET PORT GROUPS: {r:?}");
    let d = &r.data;
    let mut out = Vec::new();
    let mut at = 4;
    while at + 8 <= d.len() {
        let state = d[at] & 0x0F;
        let group = u16::from_be_bytes([d[at + 2], d[at + 3]]);
        let ports = usize::from(d[at + 7]);
        out.push((group, state));
        at += 8 + 4 * ports;
    }
    out.sort_unstable();
    out
}

#[test]
fn on_ceph_report_target_port_groups_follows_the_writer() {
    let image = Image::create("gw-alua", 64);
    let a = gateway(&image, 1);
    let b = gateway(&image, 2);
    let login = |d: &Daemon, tail: u8| {
        let mut s = Session::login(
            d.portal,
            DEFAULT_IQN,
            "iqn.2026-12.test:gw-alua",
            [0x80, 0, 0, 0, 0, tail],
        );
        s.clear_unit_attentions(0);
        s
    };
    let mut sa = login(&a, 1);
    let mut sb = login(&b, 2);
    for (writer, optimized) in [(1u16, 1u16), (2, 2), (1, 1)] {
        let s = if writer == 1 { &mut sa } else { &mut sb };
        let w = s.command(0, &rw16(WRITE_16, 8, 1), &[writer as u8; 512], 0);
        assert_eq!(w.status, GOOD, "write through gateway {writer}: {w:?}");
        let other = 3 - optimized;
        let want = {
            let mut v = vec![(optimized, 0u8), (other, 1u8)];
            v.sort_unstable();
            v
        };
        assert_eq!(
            rtpg(&mut sa),
            want,
            "gateway 1 after a write through {writer}"
        );
        assert_eq!(
            rtpg(&mut sb),
            want,
            "gateway 2 after a write through {writer}"
        );
    }
    sa.logout();
    sb.logout();
}
