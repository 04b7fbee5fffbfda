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
#[path = "common/initiator.rs"]
mod initiator;

use common::{Daemon, DaemonOptions, DEFAULT_IQN};
use initiator::{rw16, CmdResult, Session, GOOD, RESERVATION_CONFLICT, WRITE_16};

const HOLDER: &str = "iqn.2026-11.org.rustgt:pr-holder";
const OTHER: &str = "iqn.2026-11.org.rustgt:pr-other";
const HOLDER_ISID: [u8; 6] = [0x80, 0, 0, 0, 0x50, 1];
const OTHER_ISID: [u8; 6] = [0x80, 0, 0, 0, 0x50, 2];
const HOLDER_KEY: u64 = 0x1234_5678_9abc_def0;
const OTHER_KEY: u64 = 0x0fed_cba9_8765_4321;
const LUN: u64 = 0;
const BLOCK: usize = 512;

/// PERSISTENT RESERVE OUT service actions (SPC-4 §6.16.2).
const REGISTER: u8 = 0x00;
const RESERVE: u8 = 0x01;
/// PERSISTENT RESERVE IN service actions (SPC-4 §6.15.1).
const READ_KEYS: u8 = 0x00;
const READ_RESERVATION: u8 = 0x01;
const REPORT_CAPABILITIES: u8 = 0x02;
/// Reservation type Write Exclusive (SPC-4 table 212), LU scope (0).
const WRITE_EXCLUSIVE: u8 = 0x1;

/// PERSISTENT RESERVE OUT (SPC-4 §6.16): the 10-byte CDB and its 24-byte
/// basic parameter list (§6.16.3: key, service action key, APTPL in
/// byte 20 bit 0).
fn pr_out(
    s: &mut Session,
    action: u8,
    pr_type: u8,
    key: u64,
    sa_key: u64,
    aptpl: bool,
) -> CmdResult {
    let mut params = [0u8; 24];
    params[0..8].copy_from_slice(&key.to_be_bytes());
    params[8..16].copy_from_slice(&sa_key.to_be_bytes());
    params[20] = u8::from(aptpl);
    let mut cdb = [0u8; 10];
    cdb[0] = 0x5f;
    cdb[1] = action;
    cdb[2] = pr_type; // scope 0 (LU) in the high nibble
    cdb[5..9].copy_from_slice(&24u32.to_be_bytes());
    s.command(LUN, &cdb, &params, 0)
}

/// PERSISTENT RESERVE IN (SPC-4 §6.15), GOOD asserted.
fn pr_in(s: &mut Session, action: u8) -> Vec<u8> {
    let alloc: u16 = 1024;
    let mut cdb = [0u8; 10];
    cdb[0] = 0x5e;
    cdb[1] = action;
    cdb[7..9].copy_from_slice(&alloc.to_be_bytes());
    let r = s.command(LUN, &cdb, &[], u32::from(alloc));
    assert_eq!(r.status, GOOD, "PR IN 0x{action:02x}: {r}");
    r.data
}

fn be32(b: &[u8], at: usize) -> usize {
    let bytes: [u8; 4] = b
        .get(at..at + 4)
        .and_then(|s| s.try_into().ok())
        .unwrap_or_else(|| panic!("short PR IN data: {b:02x?}"));
    usize::try_from(u32::from_be_bytes(bytes)).expect("length")
}

/// READ KEYS (§6.15.2): the registered keys, sorted.
fn read_keys(s: &mut Session) -> Vec<u64> {
    let d = pr_in(s, READ_KEYS);
    let len = be32(&d, 4);
    let list = d
        .get(8..8 + len)
        .unwrap_or_else(|| panic!("READ KEYS data shorter than its length: {d:02x?}"));
    let mut keys: Vec<u64> = list
        .chunks_exact(8)
        .map(|k| u64::from_be_bytes(k.try_into().expect("8 bytes")))
        .collect();
    keys.sort_unstable();
    keys
}

/// READ RESERVATION (§6.15.3): (holder key, scope and type byte), if any.
fn read_reservation(s: &mut Session) -> Option<(u64, u8)> {
    let d = pr_in(s, READ_RESERVATION);
    match be32(&d, 4) {
        0 => None,
        16 => {
            let key = u64::from_be_bytes(d.get(8..16)?.try_into().ok()?);
            Some((key, *d.get(21)?))
        }
        other => panic!("READ RESERVATION additional length {other}: {d:02x?}"),
    }
}

/// PTPL_A (§6.15.4, byte 3 bit 0): persistence through power loss active.
fn ptpl_active(s: &mut Session) -> bool {
    let d = pr_in(s, REPORT_CAPABILITIES);
    d.get(3).is_some_and(|b| b & 1 != 0)
}

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
