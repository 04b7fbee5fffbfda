//! Persistent reservation commands for the raw-initiator tests (SPC-4
//! §6.15, §6.16), on LUN 0. A test file includes it beside the raw
//! initiator crate (imported as `initiator`):
//!
//! ```ignore
//! use rustgt_test_initiator as initiator;
//! #[path = "common/pr.rs"]
//! mod pr;
//! ```

#![allow(dead_code)] // each test binary uses a different subset

use crate::initiator::{CmdResult, Session, GOOD};

const LUN: u64 = 0;

/// PERSISTENT RESERVE OUT service actions (SPC-4 §6.16.2).
pub const REGISTER: u8 = 0x00;
pub const RESERVE: u8 = 0x01;
pub const PREEMPT: u8 = 0x04;
/// PERSISTENT RESERVE IN service actions (SPC-4 §6.15.1).
pub const READ_KEYS: u8 = 0x00;
pub const READ_RESERVATION: u8 = 0x01;
pub const REPORT_CAPABILITIES: u8 = 0x02;
/// Reservation type Write Exclusive (SPC-4 table 212), LU scope (0).
pub const WRITE_EXCLUSIVE: u8 = 0x1;

/// PERSISTENT RESERVE OUT (SPC-4 §6.16): the 10-byte CDB and its 24-byte
/// basic parameter list (§6.16.3: key, service action key, APTPL in
/// byte 20 bit 0).
pub fn pr_out(
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
pub fn pr_in(s: &mut Session, action: u8) -> Vec<u8> {
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
pub fn read_keys(s: &mut Session) -> Vec<u64> {
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
pub fn read_reservation(s: &mut Session) -> Option<(u64, u8)> {
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
pub fn ptpl_active(s: &mut Session) -> bool {
    let d = pr_in(s, REPORT_CAPABILITIES);
    d.get(3).is_some_and(|b| b & 1 != 0)
}
