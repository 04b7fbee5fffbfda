//! Black-box: persistent reservations survive a restart of the daemon when
//! the initiator asked for APTPL (SPC-4 §5.13.5), and only then.
//!
//! Two initiators register keys over real iSCSI sessions and one reserves
//! the LUN (Write Exclusive); the daemon is stopped with SIGTERM and started
//! again on the same data directory; new sessions from the same initiator
//! ports (names and ISIDs) find the same keys and reservation, and the
//! reservation is enforced: the holder writes, the other registrant gets
//! RESERVATION CONFLICT.

mod common;
use rustgt_test_initiator as initiator;
#[path = "common/pr.rs"]
mod pr;

use common::{Daemon, DaemonOptions, DEFAULT_IQN};
use initiator::{rw16, CmdResult, Session, GOOD, RESERVATION_CONFLICT, WRITE_16};
use pr::{pr_out, ptpl_active, read_keys, read_reservation, REGISTER, RESERVE, WRITE_EXCLUSIVE};

const HOLDER: &str = "iqn.2026-11.org.rustgt:pr-holder";
const OTHER: &str = "iqn.2026-11.org.rustgt:pr-other";
const HOLDER_ISID: [u8; 6] = [0x80, 0, 0, 0, 0x50, 1];
const OTHER_ISID: [u8; 6] = [0x80, 0, 0, 0, 0x50, 2];
const HOLDER_KEY: u64 = 0x1234_5678_9abc_def0;
const OTHER_KEY: u64 = 0x0fed_cba9_8765_4321;
const LUN: u64 = 0;
const BLOCK: usize = 512;

fn write_block(s: &mut Session, fill: u8) -> CmdResult {
    s.command(LUN, &rw16(WRITE_16, 0, 1), &[fill; BLOCK], 0)
}

fn sessions(d: &Daemon) -> (Session, Session) {
    let mut holder = Session::login(d.portal, DEFAULT_IQN, HOLDER, HOLDER_ISID);
    let mut other = Session::login(d.portal, DEFAULT_IQN, OTHER, OTHER_ISID);
    holder.clear_unit_attentions(LUN);
    other.clear_unit_attentions(LUN);
    (holder, other)
}

/// Registers both initiators with `aptpl` and has the holder reserve
/// Write Exclusive; checks the state before the restart.
fn register_and_reserve(d: &Daemon, aptpl: bool) {
    let (mut holder, mut other) = sessions(d);
    let r = pr_out(&mut holder, REGISTER, 0, 0, HOLDER_KEY, aptpl);
    assert_eq!(r.status, GOOD, "REGISTER holder: {r}");
    let r = pr_out(&mut other, REGISTER, 0, 0, OTHER_KEY, aptpl);
    assert_eq!(r.status, GOOD, "REGISTER other: {r}");
    let r = pr_out(&mut holder, RESERVE, WRITE_EXCLUSIVE, HOLDER_KEY, 0, aptpl);
    assert_eq!(r.status, GOOD, "RESERVE: {r}");

    let mut both = vec![HOLDER_KEY, OTHER_KEY];
    both.sort_unstable();
    assert_eq!(read_keys(&mut other), both);
    assert_eq!(
        read_reservation(&mut other),
        Some((HOLDER_KEY, WRITE_EXCLUSIVE))
    );
    assert_eq!(ptpl_active(&mut other), aptpl);
    assert_enforced(&mut holder, &mut other);
    holder.logout();
    other.logout();
}

/// Write Exclusive held by `holder`: it writes, `other` may not.
fn assert_enforced(holder: &mut Session, other: &mut Session) {
    let r = write_block(other, 0xbb);
    assert_eq!(
        r.status, RESERVATION_CONFLICT,
        "a write from a non-holder under Write Exclusive: {r}"
    );
    let r = write_block(holder, 0xaa);
    assert_eq!(r.status, GOOD, "a write from the holder: {r}");
}

/// Stops `d` with SIGTERM and starts a new daemon on the same files.
fn restart(d: Daemon) -> Daemon {
    let scratch = d.stop_keep_files();
    Daemon::start_with(DaemonOptions {
        scratch: Some(scratch),
        ..DaemonOptions::default()
    })
}

#[test]
fn aptpl_state_survives_a_restart() {
    let d = Daemon::start();
    register_and_reserve(&d, true);
    let state = d
        .data_dir()
        .join("pr")
        .join(format!("{DEFAULT_IQN}-{LUN}.toml"));

    let d = restart(d);
    assert!(
        state.is_file(),
        "APTPL state not at its documented default path {}",
        state.display()
    );
    let (mut holder, mut other) = sessions(&d);
    let mut both = vec![HOLDER_KEY, OTHER_KEY];
    both.sort_unstable();
    assert_eq!(read_keys(&mut holder), both, "keys after the restart");
    assert_eq!(
        read_reservation(&mut other),
        Some((HOLDER_KEY, WRITE_EXCLUSIVE)),
        "reservation after the restart"
    );
    assert!(ptpl_active(&mut holder), "APTPL still in effect");
    assert_enforced(&mut holder, &mut other);
    holder.logout();
    other.logout();
    assert!(d.stop().success());
}

#[test]
fn without_aptpl_a_restart_clears_the_state() {
    let d = Daemon::start();
    register_and_reserve(&d, false);
    let d = restart(d);
    let (mut holder, mut other) = sessions(&d);
    assert_eq!(read_keys(&mut holder), Vec::<u64>::new());
    assert_eq!(read_reservation(&mut holder), None);
    let r = write_block(&mut other, 0xcc);
    assert_eq!(r.status, GOOD, "no reservation left: {r}");
    holder.logout();
    other.logout();
    assert!(d.stop().success());
}
