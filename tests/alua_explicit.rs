//! Explicit ALUA (a LUN's `alua` setting) over real sockets with the raw
//! initiator of tests/initiator: two initiators, each its own I_T nexus,
//! on one daemon whose target is target port group 1 (one `tpgt` per
//! target and daemon, so both nexuses are in that group).
//!
//! What is checked, on `ram` LUNs: INQUIRY's TPGS follows the setting;
//! REPORT TARGET PORT GROUPS reports the supported states (AO/AN/S/U) and
//! the state SET TARGET PORT GROUPS set, with STATUS CODE "altered by
//! STPG"; the other nexus gets ASYMMETRIC ACCESS STATE CHANGED (2A/06),
//! the one that asked does not; REPORT SUPPORTED OPERATION CODES lists
//! STPG only on the explicit LUN; in standby a READ and a TEST UNIT READY
//! get NOT READY 04/0B while INQUIRY, REPORT LUNS, RTPG and STPG pass; in
//! unavailable a READ gets 04/0C; an unknown group and a state STPG cannot
//! ask for get INVALID FIELD IN PARAMETER LIST; an `implicit` LUN refuses
//! STPG with INVALID FIELD IN CDB; `rustgt admin lun set IQN LUN
//! alua=explicit` switches a running LUN (INQUIRY DATA HAS CHANGED) and
//! `admin ls --json` shows the state.

mod admin_common;
mod common;
use rustgt_test_initiator as initiator;

use admin_common::cli;
use common::Daemon;
use initiator::{CmdResult, Session, CHECK_CONDITION, GOOD, UNIT_ATTENTION};

const IQN: &str = "iqn.2026-11.org.rustgt:alua";
const HOST_A: &str = "iqn.2026-11.org.rustgt.test:alua-a";
const HOST_B: &str = "iqn.2026-11.org.rustgt.test:alua-b";
const NOT_READY: u8 = 0x2;
const ILLEGAL_REQUEST: u8 = 0x5;

const AO: u8 = 0x0;
const STANDBY: u8 = 0x2;
const UNAVAILABLE: u8 = 0x3;

/// LUN 0 explicit, LUN 1 implicit (the default).
fn config() -> String {
    format!(
        "[[targets]]\niqn = \"{IQN}\"\n\
         [[targets.luns]]\nid = 0\nbackstore = \"ram\"\nsize = \"4M\"\nalua = \"explicit\"\n\
         [[targets.luns]]\nid = 1\nbackstore = \"ram\"\nsize = \"4M\"\n"
    )
}

fn isid(n: u8) -> [u8; 6] {
    [0x80, 0, 0, 0, 0xA1, n]
}

fn inquiry_tpgs(s: &mut Session, lun: u64) -> u8 {
    let r = s.command(lun, &[0x12, 0, 0, 0, 96, 0], &[], 96);
    assert_eq!(r.status, GOOD, "INQUIRY: {r}");
    r.data.get(5).copied().expect("byte 5") & 0x30
}

/// The RTPG descriptor of group 1: (state byte, supported byte, status).
fn rtpg_group1(s: &mut Session, lun: u64) -> (u8, u8, u8) {
    let r = s.command(lun, &[0xA3, 0x0A, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0], &[], 256);
    assert_eq!(r.status, GOOD, "RTPG: {r}");
    let d = &r.data;
    assert_eq!(
        d.get(6..8),
        Some(&[0u8, 1][..]),
        "first group is 1: {d:02x?}"
    );
    (d[4], d[5], d[9])
}

fn stpg(s: &mut Session, lun: u64, descriptors: &[(u8, u16)]) -> CmdResult {
    let mut data = vec![0u8; 4];
    for (state, group) in descriptors {
        data.extend_from_slice(&[*state, 0]);
        data.extend_from_slice(&group.to_be_bytes());
    }
    let len = u32::try_from(data.len()).expect("len").to_be_bytes();
    let cdb = [0xA4, 0x0A, 0, 0, 0, 0, len[0], len[1], len[2], len[3], 0, 0];
    s.command(lun, &cdb, &data, 0)
}

fn read(s: &mut Session, lun: u64) -> CmdResult {
    s.command(lun, &[0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0], &[], 512)
}

fn assert_sense(r: &CmdResult, key: u8, asc: u8, ascq: u8, what: &str) {
    assert_eq!(r.status, CHECK_CONDITION, "{what}: {r}");
    assert_eq!(r.sense_code(), Some((key, asc, ascq)), "{what}: {r}");
}

#[test]
fn stpg_moves_states_and_gates_commands() {
    let d = Daemon::start_with_config(&config(), 1);
    let mut a = Session::login(d.portal, IQN, HOST_A, isid(1));
    let mut b = Session::login(d.portal, IQN, HOST_B, isid(2));
    for lun in [0, 1] {
        a.clear_unit_attentions(lun);
        b.clear_unit_attentions(lun);
    }

    assert_eq!(inquiry_tpgs(&mut a, 0), 0x20, "explicit: TPGS=10b");
    assert_eq!(inquiry_tpgs(&mut a, 1), 0x10, "implicit: TPGS=01b");
    assert_eq!(rtpg_group1(&mut a, 0), (AO, 0x0F, 0x00));
    assert_eq!(rtpg_group1(&mut a, 1), (AO, 0x01, 0x00));

    // REPORT SUPPORTED OPERATION CODES, one command (A4h/0Ah): SUPPORT
    // 011b (supported) on the explicit LUN, 001b on the implicit one.
    let rsoc = [0xA3, 0x0C, 0x02, 0xA4, 0, 0x0A, 0, 0, 0, 64, 0, 0];
    for (lun, support) in [(0, 0b011), (1, 0b001)] {
        let r = a.command(lun, &rsoc, &[], 64);
        assert_eq!(r.status, GOOD, "RSOC: {r}");
        assert_eq!(r.data.get(1).map(|b| b & 0x07), Some(support), "LUN {lun}");
    }

    // Implicit LUN: STPG is not supported.
    let r = stpg(&mut a, 1, &[(STANDBY, 1)]);
    assert_sense(&r, ILLEGAL_REQUEST, 0x24, 0x00, "STPG on implicit LUN");

    // Bad parameter lists change nothing.
    let r = stpg(&mut a, 0, &[(STANDBY, 2)]);
    assert_sense(&r, ILLEGAL_REQUEST, 0x26, 0x00, "STPG unknown group");
    let r = stpg(&mut a, 0, &[(0x0F, 1)]);
    assert_sense(&r, ILLEGAL_REQUEST, 0x26, 0x00, "STPG transitioning");
    assert_eq!(rtpg_group1(&mut a, 0), (AO, 0x0F, 0x00));
    assert_eq!(read(&mut b, 0).status, GOOD, "no UA after refused STPGs");

    // A moves group 1 to standby.
    let r = stpg(&mut a, 0, &[(STANDBY, 1)]);
    assert_eq!(r.status, GOOD, "STPG standby: {r}");
    assert_eq!(rtpg_group1(&mut a, 0), (STANDBY, 0x0F, 0x01));
    let r = read(&mut a, 0);
    assert_sense(&r, NOT_READY, 0x04, 0x0B, "A's READ in standby");
    // B first hears of the change, then meets the standby state.
    let r = read(&mut b, 0);
    assert_sense(&r, UNIT_ATTENTION, 0x2A, 0x06, "B's UA");
    let r = read(&mut b, 0);
    assert_sense(&r, NOT_READY, 0x04, 0x0B, "B's READ in standby");
    let r = b.command(0, &[0x00, 0, 0, 0, 0, 0], &[], 0);
    assert_sense(&r, NOT_READY, 0x04, 0x0B, "TEST UNIT READY in standby");
    assert_eq!(inquiry_tpgs(&mut b, 0), 0x20, "INQUIRY passes in standby");
    let r = b.command(0, &[0xA0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0], &[], 256);
    assert_eq!(r.status, GOOD, "REPORT LUNS in standby: {r}");
    // The implicit LUN is not affected.
    assert_eq!(read(&mut b, 1).status, GOOD);

    // Unavailable, asked through the standby group itself.
    let r = stpg(&mut b, 0, &[(UNAVAILABLE, 1)]);
    assert_eq!(r.status, GOOD, "STPG unavailable: {r}");
    let r = read(&mut b, 0);
    assert_sense(&r, NOT_READY, 0x04, 0x0C, "READ in unavailable");
    let r = read(&mut a, 0);
    assert_sense(&r, UNIT_ATTENTION, 0x2A, 0x06, "A's UA");
    assert_eq!(rtpg_group1(&mut a, 0), (UNAVAILABLE, 0x0F, 0x01));

    // Back to active/optimized: READ passes again.
    let r = stpg(&mut a, 0, &[(AO, 1)]);
    assert_eq!(r.status, GOOD, "STPG active/optimized: {r}");
    assert_eq!(read(&mut a, 0).status, GOOD);
    let r = read(&mut b, 0);
    assert_sense(&r, UNIT_ATTENTION, 0x2A, 0x06, "B's second UA");
    assert_eq!(read(&mut b, 0).status, GOOD);
    assert_eq!(rtpg_group1(&mut b, 0), (AO, 0x0F, 0x01));
    a.logout();
    b.logout();
}

#[test]
fn admin_switches_a_running_lun_to_explicit() {
    let d = Daemon::start_with_config(&config(), 1);
    let mut a = Session::login(d.portal, IQN, HOST_A, isid(3));
    a.clear_unit_attentions(1);
    assert_eq!(inquiry_tpgs(&mut a, 1), 0x10);

    let out = cli(&d, &["lun", "set", IQN, "1", "alua=explicit"]);
    out.assert_success();
    let r = read(&mut a, 1);
    assert_sense(&r, UNIT_ATTENTION, 0x3F, 0x03, "INQUIRY DATA HAS CHANGED");
    assert_eq!(inquiry_tpgs(&mut a, 1), 0x20);
    let r = stpg(&mut a, 1, &[(STANDBY, 1)]);
    assert_eq!(r.status, GOOD, "STPG after lun set: {r}");
    // The RAM LUN kept its data and stayed exported (set live).
    assert_eq!(read(&mut a, 0).status, GOOD);

    let ls = cli(&d, &["--json", "ls"]);
    ls.assert_success();
    assert!(
        ls.stdout.contains("explicit, standby"),
        "admin ls shows the state: {}",
        ls.stdout
    );

    // Back to implicit: every group active/optimized again.
    let out = cli(&d, &["lun", "set", IQN, "1", "alua=implicit"]);
    out.assert_success();
    a.clear_unit_attentions(1);
    assert_eq!(inquiry_tpgs(&mut a, 1), 0x10);
    assert_eq!(read(&mut a, 1).status, GOOD);
    let r = stpg(&mut a, 1, &[(STANDBY, 1)]);
    assert_sense(&r, ILLEGAL_REQUEST, 0x24, 0x00, "STPG after implicit");
    a.logout();
}
