//! Black-box: two rustgt gateways on one Ceph RBD image (target
//! `port_groups`, cargo feature `rbd`), driven with exact CDBs from the
//! raw initiator of tests/initiator (module tcp), one I_T nexus of its own
//! per initiator and gateway; against a real Ceph cluster from
//! `tests/ceph/with-cluster` (without `RUSTGT_CEPH_CONF` every test fails
//! and says how to run it). tests/rbd_gateways.rs runs libiscsi's
//! multipath and reservation suites across the same pair.
//!
//! Gateway A has `tpgt = 1`, gateway B `tpgt = 2`, both
//! `port_groups = [1, 2]`, the same target name and LUN. What is checked:
//! - one logical unit: the same serial and NAA designator through both,
//!   TPGS = implicit, each gateway its own relative target port and target
//!   port group (VPD 83h and REPORT TARGET PORT GROUPS, which lists both
//!   groups with their port on either gateway; no group is optimized
//!   before anyone wrote, the writer's group is after);
//! - persistent reservations are one state: a registration and a Write
//!   Exclusive reservation made through A are reported by PERSISTENT
//!   RESERVE IN through B and enforced there (a WRITE from another
//!   initiator, and from the holder's initiator through the path it did
//!   not register, gets RESERVATION CONFLICT; READs pass); with APTPL
//!   they survive both gateways being stopped and new ones started on
//!   fresh data directories (so the state is in the cluster, not in a
//!   gateway's files); a PREEMPT through B removes A's registrant, who
//!   gets REGISTRATIONS PREEMPTED;
//! - an SPC-2 reservation (RESERVE(6)) through one gateway is enforced
//!   through the other (for other initiators, and for the holder's
//!   initiator on the other path, another I_T nexus); RELEASE through the
//!   holder's gateway, a LOGICAL UNIT RESET through either, and the
//!   holder's logout end it everywhere;
//! - a LOGICAL UNIT RESET through one gateway gives every nexus of the
//!   other a reset unit attention, in both directions;
//! - COMPARE AND WRITE racing through A and B on the same blocks, one
//!   block (librbd's own compare-and-write) and eight (the gateways' RADOS
//!   lock): never both GOOD, the loser MISCOMPARE with the offset of the
//!   winner's first changed byte, and the blocks hold the winner's data;
//! - COMPARE AND WRITEs of eight blocks through A, each of the value it
//!   just read, raced against a plain WRITE through B (rounds): the blocks
//!   always hold one whole value, a value is replaced by at most one
//!   COMPARE AND WRITE, and B's acknowledged WRITE is never overwritten
//!   by a COMPARE AND WRITE that did not see it; with B killed, such a
//!   COMPARE AND WRITE through A still completes (after waiting for B's
//!   answer, with the exclusion renewed) and still compares;
//! - failover: a WRITE with FUA and a WRITE followed by SYNCHRONIZE CACHE,
//!   acknowledged by A, read back through B after A got SIGKILL; B then
//!   writes; A started again serves A's and B's data and can write.
//! - fast failover: with A owning the image's exclusive lock, A gets
//!   SIGKILL; B's WRITE completes within 10 s of the kill (B's heartbeat
//!   finds A silent, B blocklists A's client and breaks its lock), A's
//!   client address is on the OSD blocklist, everything A and B wrote
//!   reads back through both; A started again does not take the lock from
//!   B by itself (B goes on writing), gets it by librbd's hand-over for
//!   its own write, and no live gateway ever breaks a lock.
//!
//! Every cross-gateway effect is asserted on the very next command, with
//! no wait or poll: the implementation completes a PERSISTENT RESERVE OUT
//! and a LOGICAL UNIT RESET only once every other gateway has applied it
//! (docs/rbd.md). The only retry loops are for NOT READY, ASYMMETRIC
//! ACCESS STATE TRANSITION, the sense a write gets while the image's
//! exclusive lock is on its way (bounded in count and time).

#![cfg(feature = "rbd")]

#[path = "common/ceph.rs"]
mod ceph;
mod common;
use rustgt_test_initiator as initiator;
#[path = "common/pr.rs"]
mod pr;

use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use ceph::{ceph, gateway, gateway_with, Image};
use common::{Daemon, DEFAULT_IQN};
use initiator::{
    rw16, CmdResult, Session, CHECK_CONDITION, GOOD, MISCOMPARE, READ_16, RESERVATION_CONFLICT,
    UNIT_ATTENTION, WRITE_16,
};
use pr::{
    pr_out, ptpl_active, read_keys, read_reservation, PREEMPT, REGISTER, RESERVE, WRITE_EXCLUSIVE,
};
use rustgt_iscsi::pdu::{TmfCode, TmfResult};

const LUN: u64 = 0;
const BLOCK: usize = 512;

/// A session on LUN 0 of `d` from initiator port (`initiator`, ISID
/// ending in `isid_tail`), the unit attentions of the new nexus cleared.
fn login(d: &Daemon, initiator: &str, isid_tail: u8) -> Session {
    let mut s = Session::login(
        d.portal,
        DEFAULT_IQN,
        initiator,
        [0x80, 0, 0, 0, 0x67, isid_tail],
    );
    s.clear_unit_attentions(LUN);
    s
}

/// Whether `r` is NOT READY, ASYMMETRIC ACCESS STATE TRANSITION: the
/// image's exclusive lock is moving between clients; retry.
fn in_transition(r: &CmdResult) -> bool {
    r.status == CHECK_CONDITION && r.sense_code() == Some((0x02, 0x04, 0x0a))
}

/// Sends `cdb` with `data` again while it gets the transition sense, at
/// most `tries` times, `pause` apart (bounded: tries * pause plus the
/// commands). Returns the last answer and how many transitions it met.
fn retry_transition(
    s: &mut Session,
    cdb: &[u8],
    data: &[u8],
    tries: usize,
    pause: Duration,
) -> (CmdResult, usize) {
    let mut seen = 0;
    loop {
        let r = s.command(LUN, cdb, data, 0);
        if !in_transition(&r) || seen + 1 >= tries {
            return (r, seen);
        }
        seen += 1;
        thread::sleep(pause);
    }
}

/// A WRITE(16) of `data` at `lba`, retried (bounded) through lock
/// hand-overs between live gateways, GOOD asserted.
fn write(s: &mut Session, lba: u64, data: &[u8], what: &str) {
    let blocks = u32::try_from(data.len() / BLOCK).expect("blocks");
    let (r, _) = retry_transition(
        s,
        &rw16(WRITE_16, lba, blocks),
        data,
        50,
        Duration::from_millis(100),
    );
    assert_eq!(r.status, GOOD, "{what}: {r}");
}

fn read(s: &mut Session, lba: u64, blocks: u32) -> Vec<u8> {
    let len = blocks * BLOCK as u32;
    let r = s.command(LUN, &rw16(READ_16, lba, blocks), &[], len);
    assert_eq!(r.status, GOOD, "READ(16) at {lba}: {r}");
    assert_eq!(r.data.len(), len as usize, "READ(16) at {lba}: short data");
    r.data
}

/// `blocks` blocks of a pattern of `seed`, different in every byte
/// position so a misplaced block shows.
fn pattern(seed: u8, blocks: usize) -> Vec<u8> {
    (0..blocks * BLOCK)
        .map(|i| seed ^ (i as u8).wrapping_mul(31) ^ ((i / BLOCK) as u8))
        .collect()
}

// ---------------------------------------------------------------------
// One logical unit, two target port groups.

/// INQUIRY with EVPD for `page` (or the standard data), GOOD asserted.
fn inquiry(s: &mut Session, page: Option<u8>) -> Vec<u8> {
    let alloc: u16 = 1024;
    let mut cdb = [0x12, 0, 0, 0, 0, 0];
    if let Some(p) = page {
        cdb[1] = 1;
        cdb[2] = p;
    }
    cdb[3..5].copy_from_slice(&alloc.to_be_bytes());
    let r = s.command(LUN, &cdb, &[], u32::from(alloc));
    assert_eq!(r.status, GOOD, "INQUIRY {page:?}: {r}");
    r.data
}

/// The designation descriptors of VPD page 83h: (association and type
/// byte masked to association << 4 | type, designator).
fn designators(page: &[u8]) -> Vec<(u8, Vec<u8>)> {
    assert_eq!(page.get(1), Some(&0x83), "not VPD 83h: {page:02x?}");
    let len = usize::from(u16::from_be_bytes([page[2], page[3]]));
    let body = page
        .get(4..4 + len)
        .unwrap_or_else(|| panic!("VPD 83h shorter than its length: {page:02x?}"));
    let mut out = Vec::new();
    let mut at = 0;
    while at + 4 <= body.len() {
        let kind = body[at + 1] & 0x3f;
        let n = usize::from(body[at + 3]);
        let d = body
            .get(at + 4..at + 4 + n)
            .unwrap_or_else(|| panic!("designator past the page: {page:02x?}"));
        out.push((kind, d.to_vec()));
        at += 4 + n;
    }
    assert_eq!(at, body.len(), "VPD 83h trailing bytes: {page:02x?}");
    out
}

/// The one designator of association/type `kind` (see [`designators`]).
fn designator(all: &[(u8, Vec<u8>)], kind: u8) -> Vec<u8> {
    let found: Vec<&Vec<u8>> = all.iter().filter(|d| d.0 == kind).map(|d| &d.1).collect();
    assert_eq!(
        found.len(),
        1,
        "designators of kind {kind:#04x}: {all:02x?}"
    );
    found[0].clone()
}

/// Association LU (0), type NAA (3).
const LU_NAA: u8 = 0x03;
/// Association target port (1), type relative target port (4).
const PORT_RELATIVE: u8 = 0x14;
/// Association target port (1), type target port group (5).
const PORT_GROUP: u8 = 0x15;

/// One target port group descriptor of REPORT TARGET PORT GROUPS.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Group {
    id: u16,
    /// ASYMMETRIC ACCESS STATE: 0 active/optimized, 1 active/non-optimized.
    state: u8,
    /// Relative target port identifiers of its ports.
    ports: Vec<u16>,
}

/// Active/optimized (SPC-4 table 279).
const AO: u8 = 0;
/// Active/non-optimized.
const ANO: u8 = 1;

/// REPORT TARGET PORT GROUPS (SPC-4 §6.36, length-only header), parsed
/// strictly: the return data length covers the descriptors exactly, both
/// AO_SUP and AN_SUP are set; sorted by group id.
fn rtpg(s: &mut Session) -> Vec<Group> {
    let cdb = [0xA3, 0x0A, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0];
    let r = s.command(LUN, &cdb, &[], 1024);
    assert_eq!(r.status, GOOD, "REPORT TARGET PORT GROUPS: {r}");
    let d = &r.data;
    assert!(d.len() >= 4, "RTPG data: {d:02x?}");
    let len = u32::from_be_bytes([d[0], d[1], d[2], d[3]]) as usize;
    assert_eq!(len + 4, d.len(), "RTPG RETURN DATA LENGTH: {d:02x?}");
    let mut out = Vec::new();
    let mut at = 4;
    while at < d.len() {
        let g = d
            .get(at..at + 8)
            .unwrap_or_else(|| panic!("RTPG descriptor cut short: {d:02x?}"));
        assert_eq!(
            g[1] & 0x03,
            0x03,
            "AO_SUP and AN_SUP in group descriptor {g:02x?}"
        );
        let count = usize::from(g[7]);
        let ports = d
            .get(at + 8..at + 8 + 4 * count)
            .unwrap_or_else(|| panic!("RTPG port list cut short: {d:02x?}"))
            .chunks_exact(4)
            .map(|p| u16::from_be_bytes([p[2], p[3]]))
            .collect();
        out.push(Group {
            id: u16::from_be_bytes([g[2], g[3]]),
            state: g[0] & 0x0f,
            ports,
        });
        at += 8 + 4 * count;
    }
    out.sort();
    out
}

/// Groups 1 and 2, each with its one port (relative id = tpgt), in the
/// given states.
fn both_groups(state_1: u8, state_2: u8) -> Vec<Group> {
    vec![
        Group {
            id: 1,
            state: state_1,
            ports: vec![1],
        },
        Group {
            id: 2,
            state: state_2,
            ports: vec![2],
        },
    ]
}

#[test]
fn on_ceph_both_gateways_report_one_logical_unit_with_their_own_port_groups() {
    let image = Image::create("gwraw-ident", 64);
    let a = gateway(&image, 1);
    let b = gateway(&image, 2);
    let mut sa = login(&a, "iqn.2026-12.test:gw-ident", 1);
    let mut sb = login(&b, "iqn.2026-12.test:gw-ident", 2);

    for (s, name) in [(&mut sa, "A"), (&mut sb, "B")] {
        let std = inquiry(s, None);
        assert_eq!(
            std.get(5).map(|b| (b >> 4) & 0x3),
            Some(0b01),
            "gateway {name}: standard INQUIRY TPGS is not implicit ALUA: {std:02x?}"
        );
    }
    assert_eq!(
        inquiry(&mut sa, Some(0x80)),
        inquiry(&mut sb, Some(0x80)),
        "the gateways report different unit serial numbers"
    );
    let da = designators(&inquiry(&mut sa, Some(0x83)));
    let db = designators(&inquiry(&mut sb, Some(0x83)));
    assert_eq!(
        designator(&da, LU_NAA),
        designator(&db, LU_NAA),
        "the gateways report different NAA designators"
    );
    for (d, tpgt, name) in [(&da, 1u16, "A"), (&db, 2, "B")] {
        let want = [0, 0, (tpgt >> 8) as u8, tpgt as u8].to_vec();
        assert_eq!(
            designator(d, PORT_RELATIVE),
            want,
            "gateway {name}: relative target port identifier"
        );
        assert_eq!(
            designator(d, PORT_GROUP),
            want,
            "gateway {name}: target port group"
        );
    }

    // Nobody wrote yet: nobody holds the lock, no group is optimized.
    assert_eq!(rtpg(&mut sa), both_groups(ANO, ANO), "A, before any write");
    assert_eq!(rtpg(&mut sb), both_groups(ANO, ANO), "B, before any write");
    write(&mut sb, 64, &pattern(0x42, 1), "WRITE through B");
    assert_eq!(rtpg(&mut sa), both_groups(ANO, AO), "A, after B wrote");
    assert_eq!(rtpg(&mut sb), both_groups(ANO, AO), "B, after B wrote");
    write(&mut sa, 64, &pattern(0x43, 1), "WRITE through A");
    assert_eq!(rtpg(&mut sa), both_groups(AO, ANO), "A, after A wrote");
    assert_eq!(rtpg(&mut sb), both_groups(AO, ANO), "B, after A wrote");
    // A SYNCHRONIZE CACHE through the other path (an initiator flushing
    // every path, or a path checker) leaves the lock, and the optimized
    // group, where it is: B has nothing of its own to flush.
    let sync10 = [0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    let r = sb.command(LUN, &sync10, &[], 0);
    assert_eq!(r.status, GOOD, "SYNCHRONIZE CACHE through B: {r}");
    assert_eq!(rtpg(&mut sa), both_groups(AO, ANO), "A, after B's flush");
    assert_eq!(rtpg(&mut sb), both_groups(AO, ANO), "B, after B's flush");
    let r = sa.command(LUN, &sync10, &[], 0);
    assert_eq!(r.status, GOOD, "SYNCHRONIZE CACHE through A: {r}");
    assert_eq!(rtpg(&mut sb), both_groups(AO, ANO), "B, after A's flush");
    sa.logout();
    sb.logout();
}

// ---------------------------------------------------------------------
// Persistent reservations.

const HOLDER: &str = "iqn.2026-12.test:gw-pr-holder";
const OTHER: &str = "iqn.2026-12.test:gw-pr-other";
const HOLDER_KEY: u64 = 0x4757_0000_0000_00a1;
const OTHER_KEY: u64 = 0x4757_0000_0000_00b2;
/// The block the reservation tests write.
const PR_LBA: u64 = 128;

fn write_pr_block(s: &mut Session, fill: u8) -> CmdResult {
    s.command(LUN, &rw16(WRITE_16, PR_LBA, 1), &[fill; BLOCK], 0)
}

/// The holder's Write Exclusive reservation, made through A, as every
/// path sees it: `holder_a` (the holder's nexus through A) writes;
/// `other_b` (another initiator through B) and `holder_b` (the holder's
/// initiator port through B, a nexus it never registered) get
/// RESERVATION CONFLICT on WRITE and read; every path reports the key and
/// the reservation.
fn assert_reserved_by_holder_through_a(
    holder_a: &mut Session,
    holder_b: &mut Session,
    other_b: &mut Session,
    aptpl: bool,
    when: &str,
) {
    for (s, path) in [
        (&mut *holder_a, "holder through A"),
        (&mut *holder_b, "holder's initiator through B"),
        (&mut *other_b, "other initiator through B"),
    ] {
        assert_eq!(read_keys(s), vec![HOLDER_KEY], "{when}: READ KEYS, {path}");
        assert_eq!(
            read_reservation(s),
            Some((HOLDER_KEY, WRITE_EXCLUSIVE)),
            "{when}: READ RESERVATION, {path}"
        );
        assert_eq!(ptpl_active(s), aptpl, "{when}: PTPL_A, {path}");
    }
    let w = write_pr_block(holder_a, 0xa1);
    // The lock moves to A with this write: a hand-over, not a conflict.
    let w = if in_transition(&w) {
        retry_transition(
            holder_a,
            &rw16(WRITE_16, PR_LBA, 1),
            &[0xa1; BLOCK],
            50,
            Duration::from_millis(100),
        )
        .0
    } else {
        w
    };
    assert_eq!(w.status, GOOD, "{when}: WRITE by the holder through A: {w}");
    for (s, path) in [
        (&mut *other_b, "another initiator through B"),
        (
            &mut *holder_b,
            "the holder's initiator through B (unregistered nexus)",
        ),
    ] {
        let w = write_pr_block(s, 0xb2);
        assert_eq!(
            w.status, RESERVATION_CONFLICT,
            "{when}: WRITE by {path} under Write Exclusive held through A: {w}"
        );
        assert_eq!(
            read(s, PR_LBA, 1),
            vec![0xa1; BLOCK],
            "{when}: READ by {path} (allowed under Write Exclusive)"
        );
    }
}

#[test]
fn on_ceph_reservation_through_one_gateway_is_enforced_on_the_other() {
    let image = Image::create("gwraw-pr", 64);
    let a = gateway(&image, 1);
    let b = gateway(&image, 2);
    let mut holder_a = login(&a, HOLDER, 1);
    let mut holder_b = login(&b, HOLDER, 1);
    let mut other_b = login(&b, OTHER, 2);

    let r = pr_out(&mut holder_a, REGISTER, 0, 0, HOLDER_KEY, true);
    assert_eq!(r.status, GOOD, "REGISTER (APTPL) through A: {r}");
    let r = pr_out(&mut holder_a, RESERVE, WRITE_EXCLUSIVE, HOLDER_KEY, 0, true);
    assert_eq!(r.status, GOOD, "RESERVE Write Exclusive through A: {r}");
    assert_reserved_by_holder_through_a(&mut holder_a, &mut holder_b, &mut other_b, true, "live");
    holder_a.logout();
    holder_b.logout();
    other_b.logout();

    // Both gateways stop; new ones start on fresh data directories: what
    // they know of the reservation comes from the cluster alone.
    assert!(a.stop().success(), "gateway A did not exit cleanly");
    assert!(b.stop().success(), "gateway B did not exit cleanly");
    let a = gateway(&image, 1);
    let b = gateway(&image, 2);
    let mut holder_a = login(&a, HOLDER, 1);
    let mut holder_b = login(&b, HOLDER, 1);
    let mut other_b = login(&b, OTHER, 2);
    assert_reserved_by_holder_through_a(
        &mut holder_a,
        &mut holder_b,
        &mut other_b,
        true,
        "after both gateways restarted",
    );
    holder_a.logout();
    holder_b.logout();
    other_b.logout();
}

#[test]
fn on_ceph_preempt_through_one_gateway_reaches_the_registrant_on_the_other() {
    let image = Image::create("gwraw-preempt", 64);
    let a = gateway(&image, 1);
    let b = gateway(&image, 2);
    let mut holder_a = login(&a, HOLDER, 1);
    let mut other_b = login(&b, OTHER, 2);

    let r = pr_out(&mut holder_a, REGISTER, 0, 0, HOLDER_KEY, false);
    assert_eq!(r.status, GOOD, "REGISTER through A: {r}");
    let r = pr_out(
        &mut holder_a,
        RESERVE,
        WRITE_EXCLUSIVE,
        HOLDER_KEY,
        0,
        false,
    );
    assert_eq!(r.status, GOOD, "RESERVE through A: {r}");
    let r = pr_out(&mut other_b, REGISTER, 0, 0, OTHER_KEY, false);
    assert_eq!(r.status, GOOD, "REGISTER through B: {r}");
    assert_eq!(
        read_keys(&mut holder_a),
        vec![HOLDER_KEY, OTHER_KEY],
        "READ KEYS through A after a REGISTER through B"
    );
    // A registrant that does not hold Write Exclusive may not write.
    let w = write_pr_block(&mut other_b, 0xb2);
    assert_eq!(
        w.status, RESERVATION_CONFLICT,
        "WRITE by a mere registrant through B: {w}"
    );

    let r = pr_out(
        &mut other_b,
        PREEMPT,
        WRITE_EXCLUSIVE,
        OTHER_KEY,
        HOLDER_KEY,
        false,
    );
    assert_eq!(r.status, GOOD, "PREEMPT through B: {r}");

    // A's registrant learns of it on its next command.
    let tur = holder_a.command(LUN, &[0x00, 0, 0, 0, 0, 0], &[], 0);
    assert_eq!(
        tur.sense_code(),
        Some((UNIT_ATTENTION, 0x2a, 0x05)),
        "the preempted registrant through A: expected UNIT ATTENTION, \
         REGISTRATIONS PREEMPTED: {tur}"
    );
    assert_eq!(
        read_keys(&mut holder_a),
        vec![OTHER_KEY],
        "READ KEYS through A"
    );
    assert_eq!(
        read_reservation(&mut holder_a),
        Some((OTHER_KEY, WRITE_EXCLUSIVE)),
        "READ RESERVATION through A after the PREEMPT through B"
    );
    let w = write_pr_block(&mut holder_a, 0xa1);
    assert_eq!(
        w.status, RESERVATION_CONFLICT,
        "WRITE through A by the preempted initiator: {w}"
    );
    write(
        &mut other_b,
        PR_LBA,
        &[0xb2; BLOCK],
        "WRITE by the new holder through B",
    );
    assert_eq!(read(&mut holder_a, PR_LBA, 1), vec![0xb2; BLOCK]);
    holder_a.logout();
    other_b.logout();
}

// ---------------------------------------------------------------------
// SPC-2 RESERVE / RELEASE.

const RESERVE_6: [u8; 6] = [0x16, 0, 0, 0, 0, 0];
const RELEASE_6: [u8; 6] = [0x17, 0, 0, 0, 0, 0];
const TEST_UNIT_READY: [u8; 6] = [0x00, 0, 0, 0, 0, 0];

/// Sends `cdb` (no data) and asserts its status.
fn expect(s: &mut Session, cdb: &[u8], data: &[u8], status: u8, what: &str) {
    let r = s.command(LUN, cdb, data, if cdb[0] == READ_16 { 512 } else { 0 });
    assert_eq!(r.status, status, "{what}: {r}");
}

#[test]
fn on_ceph_spc2_reservation_through_one_gateway_is_enforced_on_the_other() {
    let image = Image::create("gwraw-spc2", 64);
    let a = gateway(&image, 1);
    let b = gateway(&image, 2);
    let x = "iqn.2026-12.test:gw-spc2-x";
    let mut x_a = login(&a, x, 1);
    // The same initiator through the other gateway: another I_T nexus.
    let mut x_b = login(&b, x, 2);
    let mut y_b = login(&b, "iqn.2026-12.test:gw-spc2-y", 3);
    let lba = 64u64;
    let data = pattern(0x61, 1);
    let w = rw16(WRITE_16, lba, 1);
    let r = rw16(READ_16, lba, 1);

    expect(&mut x_a, &RESERVE_6, &[], GOOD, "RESERVE(6) through A");
    // Enforced through B, on the very next command: every command but
    // the ones that cannot disturb it conflicts (SPC-2 §5.5.1).
    for (s, who) in [
        (&mut y_b, "another initiator"),
        (&mut x_b, "the holder's initiator on the other path"),
    ] {
        let what = format!("{who} through B while reserved through A");
        expect(
            s,
            &w,
            &data,
            RESERVATION_CONFLICT,
            &format!("WRITE(16), {what}"),
        );
        expect(
            s,
            &r,
            &[],
            RESERVATION_CONFLICT,
            &format!("READ(16), {what}"),
        );
        expect(
            s,
            &TEST_UNIT_READY,
            &[],
            RESERVATION_CONFLICT,
            &format!("TUR, {what}"),
        );
        expect(
            s,
            &RESERVE_6,
            &[],
            RESERVATION_CONFLICT,
            &format!("RESERVE(6), {what}"),
        );
        inquiry(s, None);
    }
    write(&mut x_a, lba, &data, "WRITE(16) by the holder through A");
    // Someone else's RELEASE has no effect (and is GOOD).
    expect(
        &mut y_b,
        &RELEASE_6,
        &[],
        GOOD,
        "RELEASE(6) by another initiator through B",
    );
    expect(
        &mut y_b,
        &w,
        &data,
        RESERVATION_CONFLICT,
        "WRITE(16) through B after another's RELEASE",
    );
    // The holder's RELEASE through A lets B in at once.
    expect(&mut x_a, &RELEASE_6, &[], GOOD, "RELEASE(6) through A");
    write(
        &mut y_b,
        lba,
        &data,
        "WRITE(16) through B after the RELEASE through A",
    );

    // Reserved through B, enforced through A; a LOGICAL UNIT RESET
    // through A releases it everywhere (SPC-2 §5.5.1).
    expect(&mut y_b, &RESERVE_6, &[], GOOD, "RESERVE(6) through B");
    expect(
        &mut x_a,
        &w,
        &data,
        RESERVATION_CONFLICT,
        "WRITE(16) through A while reserved through B",
    );
    let (resp, replies) = x_a.task_mgmt(TmfCode::LOGICAL_UNIT_RESET, LUN, (0, 0));
    assert_eq!(
        resp,
        TmfResult::COMPLETE,
        "LOGICAL UNIT RESET through A: {replies:?}"
    );
    for s in [&mut x_a, &mut x_b, &mut y_b] {
        s.clear_unit_attentions(LUN);
    }
    write(&mut x_a, lba, &data, "WRITE(16) through A after the reset");
    write(
        &mut x_b,
        lba,
        &data,
        "WRITE(16) by x through B after the reset",
    );
    expect(
        &mut x_b,
        &RESERVE_6,
        &[],
        GOOD,
        "RESERVE(6) by x through B after the reset",
    );

    // The holder's nexus ends (logout through B): the reservation ends
    // on A too. Nexus loss is handled as the session closes, which may
    // be just after the logout response: bounded retries (20 x 100 ms).
    expect(
        &mut x_a,
        &w,
        &data,
        RESERVATION_CONFLICT,
        "WRITE(16) through A while x holds it through B",
    );
    x_b.logout();
    let mut last = None;
    for _ in 0..20 {
        let r = x_a.command(LUN, &w, &data, 0);
        if r.status != RESERVATION_CONFLICT && !in_transition(&r) {
            last = Some(r);
            break;
        }
        thread::sleep(Duration::from_millis(100));
    }
    let r = last.expect("the SPC-2 reservation outlived its nexus's logout on the other gateway");
    assert_eq!(
        r.status, GOOD,
        "WRITE(16) through A after the holder logged out of B: {r}"
    );
    x_a.logout();
    y_b.logout();
}

// ---------------------------------------------------------------------
// Resets.

#[test]
fn on_ceph_lun_reset_on_one_gateway_reaches_the_other() {
    let image = Image::create("gwraw-reset", 64);
    let a = gateway(&image, 1);
    let b = gateway(&image, 2);
    let mut on_a = vec![
        login(&a, "iqn.2026-12.test:gw-reset-1", 1),
        login(&a, "iqn.2026-12.test:gw-reset-2", 2),
    ];
    let mut on_b = vec![
        login(&b, "iqn.2026-12.test:gw-reset-1", 1),
        login(&b, "iqn.2026-12.test:gw-reset-3", 3),
    ];
    for from in ["A", "B"] {
        let (issuers, others) = if from == "A" {
            (&mut on_a, &mut on_b)
        } else {
            (&mut on_b, &mut on_a)
        };
        for s in issuers.iter_mut().chain(others.iter_mut()) {
            s.clear_unit_attentions(LUN);
        }
        let (resp, replies) = issuers[0].task_mgmt(TmfCode::LOGICAL_UNIT_RESET, LUN, (0, 0));
        assert_eq!(
            resp,
            TmfResult::COMPLETE,
            "LOGICAL UNIT RESET through {from}: {replies:?}"
        );
        // Every nexus of the other gateway, and the other nexus of the
        // issuing one, has the reset to learn, once.
        let learners = others.iter_mut().map(|s| (s, "the other gateway")).chain(
            issuers
                .iter_mut()
                .skip(1)
                .map(|s| (s, "the issuing gateway")),
        );
        for (i, (s, where_)) in learners.enumerate() {
            let tur = s.command(LUN, &[0x00, 0, 0, 0, 0, 0], &[], 0);
            assert_eq!(tur.status, CHECK_CONDITION, "reset through {from}: {tur}");
            let code = tur.sense_code();
            assert!(
                matches!(code, Some((UNIT_ATTENTION, 0x29, _))),
                "reset through {from}: nexus {i} on {where_}: expected UNIT ATTENTION, \
                 29h (reset occurred): {tur}"
            );
            let again = s.command(LUN, &[0x00, 0, 0, 0, 0, 0], &[], 0);
            assert_eq!(
                again.status, GOOD,
                "reset through {from}: nexus {i} on {where_}: the unit attention came twice \
                 or another one was queued: {again}"
            );
        }
    }
    for s in on_a.into_iter().chain(on_b) {
        s.logout();
    }
}

// ---------------------------------------------------------------------
// COMPARE AND WRITE.

/// COMPARE AND WRITE (SBC-3 §5.2) of `compare.len() / 512` blocks at
/// `lba`: Data-Out is the verify data then the write data.
fn compare_and_write(s: &mut Session, lba: u64, compare: &[u8], write: &[u8]) -> CmdResult {
    let mut cdb = [0u8; 16];
    cdb[0] = 0x89;
    cdb[2..10].copy_from_slice(&lba.to_be_bytes());
    cdb[13] = u8::try_from(compare.len() / BLOCK).expect("blocks");
    let mut data = compare.to_vec();
    data.extend_from_slice(write);
    let (r, _) = retry_transition(s, &cdb, &data, 50, Duration::from_millis(100));
    r
}

/// `base` with every byte from `from` on changed: its first difference
/// from `base` is at `from`.
fn changed_from(base: &[u8], from: usize, salt: u8) -> Vec<u8> {
    base.iter()
        .enumerate()
        .map(|(i, &b)| if i < from { b } else { b ^ (0x80 | salt) })
        .collect()
}

/// The loser: CHECK CONDITION, MISCOMPARE / MISCOMPARE DURING VERIFY
/// OPERATION (1Dh/00h), INFORMATION = offset of the first byte that did
/// not compare.
fn assert_miscompare(r: &CmdResult, offset: usize, what: &str) {
    assert_eq!(r.status, CHECK_CONDITION, "{what}: loser got {r}");
    assert_eq!(
        r.sense_code(),
        Some((MISCOMPARE, 0x1d, 0x00)),
        "{what}: loser's sense {:02x?}",
        r.sense
    );
    assert_eq!(
        r.information(),
        Some(offset as u64),
        "{what}: miscompare offset in {:02x?}",
        r.sense
    );
}

/// Rounds of the race per length.
const CAW_ROUNDS: usize = 40;

#[test]
fn on_ceph_caw_race_across_gateways_never_both_succeed() {
    let image = Image::create("gwraw-caw", 64);
    let a = gateway(&image, 1);
    let b = gateway(&image, 2);
    let mut sa = login(&a, "iqn.2026-12.test:gw-caw-a", 1);
    let mut sb = login(&b, "iqn.2026-12.test:gw-caw-b", 2);

    // One block: librbd's compare-and-write; eight: the gateways' lock.
    for (blocks, lba) in [(1usize, 4096u64), (8, 8192)] {
        let len = blocks * BLOCK;
        let mut current = pattern(0x5c, blocks);
        write(&mut sa, lba, &current, "the initial WRITE");
        let (mut wins_a, mut wins_b) = (0usize, 0usize);
        for round in 0..CAW_ROUNDS {
            let what = format!("{blocks} block(s), round {round}");
            // A's data differs from the current from an offset in the
            // first half, B's from one in the second: the loser's
            // INFORMATION tells whose data it met.
            let from_a = 1 + (round * 37) % (len / 2 - 1);
            let from_b = len / 2 + (round * 53) % (len / 2);
            let new_a = changed_from(&current, from_a, 0x11);
            let new_b = changed_from(&current, from_b, 0x22);
            let start = Barrier::new(2);
            let (ra, rb) = thread::scope(|scope| {
                let ta = scope.spawn(|| {
                    start.wait();
                    compare_and_write(&mut sa, lba, &current, &new_a)
                });
                let tb = scope.spawn(|| {
                    start.wait();
                    compare_and_write(&mut sb, lba, &current, &new_b)
                });
                (
                    ta.join().expect("session through A panicked"),
                    tb.join().expect("session through B panicked"),
                )
            });
            let winner = match (ra.status == GOOD, rb.status == GOOD) {
                (true, true) => panic!("{what}: COMPARE AND WRITE succeeded through both"),
                (false, false) => panic!("{what}: neither succeeded: A {ra}, B {rb}"),
                (true, false) => {
                    assert_miscompare(&rb, from_a, &what);
                    wins_a += 1;
                    new_a
                }
                (false, true) => {
                    assert_miscompare(&ra, from_b, &what);
                    wins_b += 1;
                    new_b
                }
            };
            let blocks_u32 = u32::try_from(blocks).expect("blocks");
            assert!(
                read(&mut sa, lba, blocks_u32) == winner,
                "{what}: the blocks through A do not hold the winner's data"
            );
            assert!(
                read(&mut sb, lba, blocks_u32) == winner,
                "{what}: the blocks through B do not hold the winner's data"
            );
            current = winner;
        }
        println!("{blocks} block(s): {CAW_ROUNDS} rounds, A won {wins_a}, B won {wins_b}");
    }
    sa.logout();
    sb.logout();
}

/// A value of the blocks in the CAW-versus-WRITE race: 16 bytes
/// (who wrote it, round, sequence) repeated over every block, so a mix of
/// two values, or of two halves of one command, shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Tag {
    who: u8,
    round: u32,
    seq: u32,
}

impl Tag {
    fn bytes(self, len: usize) -> Vec<u8> {
        let mut unit = [0u8; 16];
        unit[..3].copy_from_slice(b"RGT");
        unit[3] = self.who;
        unit[4..8].copy_from_slice(&self.round.to_be_bytes());
        unit[8..12].copy_from_slice(&self.seq.to_be_bytes());
        unit[12..16].copy_from_slice(&(self.round ^ self.seq ^ 0x5a5a_5a5a).to_be_bytes());
        unit.iter().copied().cycle().take(len).collect()
    }

    /// The one value `data` holds whole; panics on a mix.
    fn of(data: &[u8], what: &str) -> Tag {
        let first = data
            .get(..16)
            .unwrap_or_else(|| panic!("{what}: short data"));
        assert!(
            data.chunks(16).all(|c| c == first),
            "{what}: the blocks hold a mix of values: {:02x?}",
            data.chunks(16)
                .enumerate()
                .filter(|(_, c)| *c != first)
                .map(|(i, c)| (i * 16, c.to_vec()))
                .take(4)
                .collect::<Vec<_>>()
        );
        let tag = Tag {
            who: first[3],
            round: u32::from_be_bytes([first[4], first[5], first[6], first[7]]),
            seq: u32::from_be_bytes([first[8], first[9], first[10], first[11]]),
        };
        assert!(
            tag.bytes(16) == first,
            "{what}: not a value of this test: {first:02x?}"
        );
        tag
    }
}

/// Rounds of the CAW-versus-WRITE race, and A's COMPARE AND WRITEs per round.
const FENCE_ROUNDS: u32 = 30;
const FENCE_CAWS: u32 = 6;

#[test]
fn on_ceph_caw_through_one_gateway_is_atomic_against_writes_through_the_other() {
    let image = Image::create("gwraw-fence", 64);
    let a = gateway(&image, 1);
    let b = gateway(&image, 2);
    let mut sa = login(&a, "iqn.2026-12.test:gw-fence-a", 1);
    let mut sb = login(&b, "iqn.2026-12.test:gw-fence-b", 2);
    // Eight blocks across the boundary of the image's first two 4 MiB
    // objects (each command is then two RADOS writes): the gateways'
    // read-compare-write, not librbd's one-sector compare-and-write.
    let (lba, blocks) = (8192u64 - 4, 8u32);
    let len = blocks as usize * BLOCK;
    let mut current = Tag {
        who: b'S',
        round: 0,
        seq: 0,
    };
    write(&mut sa, lba, &current.bytes(len), "the initial WRITE");
    let (mut won, mut lost) = (0usize, 0usize);
    for round in 0..FENCE_ROUNDS {
        let start = Barrier::new(2);
        let mine = Tag {
            who: b'B',
            round,
            seq: 0,
        };
        let (cas, ()) = thread::scope(|scope| {
            let ta = scope.spawn(|| {
                start.wait();
                // A: read the value, COMPARE AND WRITE it to a new one.
                let mut cas = Vec::new();
                for seq in 0..FENCE_CAWS {
                    let what = format!("round {round}, CAW {seq} through A");
                    let seen = Tag::of(&read(&mut sa, lba, blocks), &what);
                    let next = Tag {
                        who: b'A',
                        round,
                        seq,
                    };
                    let r = compare_and_write(&mut sa, lba, &seen.bytes(len), &next.bytes(len));
                    match (r.status, r.sense_code()) {
                        (GOOD, _) => cas.push((seen, next)),
                        (CHECK_CONDITION, Some((MISCOMPARE, 0x1d, 0x00))) => {}
                        _ => panic!("{what}: {r}"),
                    }
                }
                cas
            });
            let tb = scope.spawn(|| {
                start.wait();
                // B: a few READs (a different place in A's sequence each
                // round), then one plain WRITE.
                for _ in 0..round % 4 {
                    Tag::of(&read(&mut sb, lba, blocks), "a READ through B");
                }
                write(&mut sb, lba, &mine.bytes(len), "the WRITE through B");
            });
            (
                ta.join().expect("session through A panicked"),
                tb.join().expect("session through B panicked"),
            )
        });
        let what = format!("round {round}");
        let end = Tag::of(&read(&mut sa, lba, blocks), &format!("{what}: through A"));
        assert_eq!(
            Tag::of(&read(&mut sb, lba, blocks), &format!("{what}: through B")),
            end,
            "{what}: A and B read different data"
        );
        // Atomic COMPARE AND WRITEs replace only the value they saw, and
        // values never repeat: each is replaced by at most one, each saw
        // the round's first value, B's, or one an earlier one wrote.
        let mut next = std::collections::HashMap::new();
        for (seen, wrote) in &cas {
            assert!(
                *seen == current || *seen == mine || cas.iter().any(|(_, w)| w == seen),
                "{what}: a COMPARE AND WRITE succeeded against {seen:?}, never written"
            );
            assert!(
                next.insert(*seen, *wrote).is_none(),
                "{what}: two COMPARE AND WRITEs both replaced {seen:?}: {cas:?}"
            );
        }
        // B's acknowledged WRITE is never lost: after it, the blocks
        // changed only by COMPARE AND WRITEs that saw it or their results.
        let mut v = mine;
        let mut steps = 0;
        while let Some(w) = next.get(&v) {
            v = *w;
            steps += 1;
            assert!(steps <= cas.len(), "{what}: a cycle in {cas:?}");
        }
        assert_eq!(
            v, end,
            "{what}: B's acknowledged WRITE {mine:?} was lost: the blocks went on \
             to {end:?} through COMPARE AND WRITEs that never saw it ({cas:?})"
        );
        won += cas.len();
        lost += FENCE_CAWS as usize - cas.len();
        current = end;
    }
    println!(
        "{FENCE_ROUNDS} rounds: {won} COMPARE AND WRITEs through A succeeded, {lost} \
         miscompared against B's WRITE"
    );
    sa.logout();
    sb.logout();
}

#[test]
fn on_ceph_caw_goes_on_when_the_other_gateway_died() {
    // A dead gateway answers no fence until its watch expires: the
    // COMPARE AND WRITE waits the operation timeout (2 s) for it, renews
    // the gateways' exclusion (whose lease that wait used up) and goes on.
    let image = Image::create("gwraw-fence-dead", 64);
    let a = gateway_with(&image, 1, "op_timeout_secs = 2\n");
    let b = gateway_with(&image, 2, "op_timeout_secs = 2\n");
    let mut sa = login(&a, "iqn.2026-12.test:gw-fence-dead", 1);
    let (lba, blocks) = (8192u64 - 4, 8usize);
    let old = pattern(0x21, blocks);
    let new = pattern(0x42, blocks);
    write(&mut sa, lba, &old, "the initial WRITE");
    b.kill_now("gateway B");
    drop(b);
    let r = compare_and_write(&mut sa, lba, &old, &new);
    assert_eq!(
        r.status,
        GOOD,
        "COMPARE AND WRITE with B dead: {r}\n{}",
        a.stderr_tail(20)
    );
    assert!(
        read(&mut sa, lba, 8) == new,
        "the blocks after the COMPARE AND WRITE"
    );
    let r = compare_and_write(&mut sa, lba, &old, &pattern(0x63, blocks));
    assert_miscompare(
        &r,
        0,
        "a second COMPARE AND WRITE of the old data with B dead",
    );
    assert!(
        read(&mut sa, lba, 8) == new,
        "the blocks after the miscompare"
    );
    assert!(
        a.stderr()
            .contains("did not answer a COMPARE AND WRITE fence"),
        "A did not wait for the dead B: {}",
        a.stderr_tail(20)
    );
    sa.logout();
}

// ---------------------------------------------------------------------
// Failover.

/// SYNCHRONIZE CACHE (10) of the whole LUN (SBC-3 §5.22).
const SYNCHRONIZE_CACHE_10: [u8; 10] = [0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0];

#[test]
fn on_ceph_failover_after_sigkill_keeps_fua_and_flushed_writes() {
    let image = Image::create("gwraw-failover", 64);
    let a = gateway(&image, 1);
    let b = gateway(&image, 2);
    let (fua_lba, flushed_lba, b_lba, a2_lba) = (1000u64, 30_000u64, 2000u64, 50_000u64);
    let fua_data = pattern(0x11, 16);
    let flushed_data = pattern(0x22, 64);
    let b_data = pattern(0x33, 16);
    let a2_data = pattern(0x44, 8);

    let mut sa = login(&a, "iqn.2026-12.test:gw-failover", 1);
    let mut cdb = rw16(WRITE_16, fua_lba, 16);
    cdb[1] |= 0x08; // FUA
    let r = sa.command(LUN, &cdb, &fua_data, 0);
    assert_eq!(r.status, GOOD, "WRITE(16) FUA through A: {r}");
    let r = sa.command(LUN, &rw16(WRITE_16, flushed_lba, 64), &flushed_data, 0);
    assert_eq!(r.status, GOOD, "WRITE(16) through A: {r}");
    let r = sa.command(LUN, &SYNCHRONIZE_CACHE_10, &[], 0);
    assert_eq!(r.status, GOOD, "SYNCHRONIZE CACHE through A: {r}");

    a.kill_now("gateway A");
    drop(sa);
    drop(a);

    // Reads need no lock: what A acknowledged is there through B at once.
    let mut sb = login(&b, "iqn.2026-12.test:gw-failover", 2);
    assert!(
        read(&mut sb, fua_lba, 16) == fua_data,
        "the FUA write acknowledged by A is not there through B"
    );
    assert!(
        read(&mut sb, flushed_lba, 64) == flushed_data,
        "the flushed write acknowledged by A is not there through B"
    );

    // The dead A still holds the image's exclusive lock until B's
    // heartbeat finds it silent and B breaks the lock (blocklisting A),
    // within a few seconds (the test below times it); B's writes may get
    // the transition sense meanwhile. Bounded: at most 180 tries half a
    // second apart (90 s).
    let (r, waited) = retry_transition(
        &mut sb,
        &rw16(WRITE_16, b_lba, 16),
        &b_data,
        180,
        Duration::from_millis(500),
    );
    assert_eq!(
        r.status,
        GOOD,
        "gateway B never took over the writes ({waited} transition answers): {r}\n{}",
        b.stderr_tail(20)
    );
    println!("B took the lock over after {waited} transition answers");
    assert!(read(&mut sb, b_lba, 16) == b_data, "B's write through B");

    // A started again is a new client: it serves everything and writes.
    let a = gateway(&image, 1);
    let mut sa = login(&a, "iqn.2026-12.test:gw-failover", 1);
    for (s, path) in [(&mut sa, "A restarted"), (&mut sb, "B")] {
        assert!(read(s, fua_lba, 16) == fua_data, "{path}: A's FUA write");
        assert!(
            read(s, flushed_lba, 64) == flushed_data,
            "{path}: A's flushed write"
        );
        assert!(read(s, b_lba, 16) == b_data, "{path}: B's write");
    }
    write(&mut sa, a2_lba, &a2_data, "WRITE through A restarted");
    assert!(
        read(&mut sb, a2_lba, 8) == a2_data,
        "the restarted A's write through B"
    );
    assert!(
        read(&mut sb, b_lba, 16) == b_data,
        "B's write after the restarted A wrote"
    );
    sa.logout();
    sb.logout();
}

/// The RADOS client address gateway `d` logged when it joined.
fn logged_address(d: &Daemon) -> String {
    let log = d.stderr();
    let line = log
        .lines()
        .find(|l| l.contains("rbd gateway mode"))
        .expect("the gateway logged its mode");
    let at = line.find("address=").expect("the line names the address") + "address=".len();
    line[at..]
        .split_whitespace()
        .next()
        .expect("an address")
        .to_owned()
}

/// The bare `IP:PORT/NONCE` forms of a logged RADOS client address
/// (`[v2:IP:PORT/NONCE,v1:...]`), as `ceph osd blocklist` lists them.
fn bare_addresses(logged: &str) -> Vec<String> {
    logged
        .trim_start_matches('[')
        .trim_end_matches(']')
        .split(',')
        .map(|a| {
            a.trim_start_matches("v2:")
                .trim_start_matches("v1:")
                .to_owned()
        })
        .filter(|a| a.contains('/'))
        .collect()
}

#[test]
fn on_ceph_failover_after_sigkill_writes_through_the_other_within_10_s() {
    // The dead owner of the image's exclusive lock misses the gateways'
    // heartbeat; B blocklists it and breaks its lock at once instead of
    // waiting for its watch to expire (30 s), so B writes within 10 s.
    let image = Image::create("gwraw-fast-failover", 64);
    let a = gateway(&image, 1);
    let b = gateway(&image, 2);
    let a_address = logged_address(&a);
    let initiator = "iqn.2026-12.test:gw-fast-failover";
    let mut sa = login(&a, initiator, 1);
    let mut sb = login(&b, initiator, 2);
    // B reads first (no lock needed), then A writes: A owns the lock.
    let _ = read(&mut sb, 0, 1);
    let before: Vec<(u64, Vec<u8>)> = (0..32u64)
        .map(|i| (i * 64, pattern(0x50 + i as u8, 8)))
        .collect();
    for (lba, data) in &before {
        write(&mut sa, *lba, data, "WRITE through A before the kill");
    }
    // In-flight writes through A up to the kill: acknowledged or not,
    // each block holds either the old or this whole value afterwards.
    a.kill_now("gateway A");
    let killed = Instant::now();
    drop(sa);
    drop(a);

    let b_lba = 40_000u64;
    let b_data = pattern(0x77, 16);
    let (r, waited) = retry_transition(
        &mut sb,
        &rw16(WRITE_16, b_lba, 16),
        &b_data,
        300,
        Duration::from_millis(100),
    );
    let took = killed.elapsed();
    assert_eq!(
        r.status,
        GOOD,
        "B's write after A's kill ({waited} transition answers, {took:?}): {r}\n{}",
        b.stderr_tail(20)
    );
    println!("B's write completed {took:.2?} after A's SIGKILL ({waited} transition answers)");
    assert!(
        took <= Duration::from_secs(10),
        "B's write completed {took:?} after A's SIGKILL, over 10 s\n{}",
        b.stderr_tail(20)
    );
    assert!(
        b.stderr().contains("broke its lock"),
        "B did not break the dead owner's lock: {}",
        b.stderr_tail(20)
    );
    // The old A's client is fenced: its writes still on the way can no
    // longer land.
    let blocklist = ceph(&["osd", "blocklist", "ls"]);
    let bare = bare_addresses(&a_address);
    assert!(!bare.is_empty(), "A's logged address {a_address:?}");
    assert!(
        bare.iter().any(|a| blocklist.contains(a.as_str())),
        "A's address {a_address} is not blocklisted: {blocklist}"
    );
    for (lba, data) in &before {
        assert!(
            read(&mut sb, *lba, 8) == *data,
            "A's write at {lba} through B"
        );
    }
    assert!(read(&mut sb, b_lba, 16) == b_data, "B's write through B");

    // A started again is a new client. It is not the owner: B still
    // writes without a transition, and A's own write waits for librbd's
    // hand-over of the lock from B and never corrupts B's data.
    let a = gateway(&image, 1);
    let mut sa = login(&a, initiator, 1);
    let b2_data = pattern(0x78, 16);
    let r = sb.command(LUN, &rw16(WRITE_16, b_lba + 16, 16), &b2_data, 0);
    assert_eq!(
        r.status, GOOD,
        "B still owns the lock after A restarted: {r}"
    );
    for (lba, data) in &before {
        assert!(
            read(&mut sa, *lba, 8) == *data,
            "A's write at {lba} through A restarted"
        );
    }
    assert!(
        read(&mut sa, b_lba, 16) == b_data,
        "B's write through A restarted"
    );
    let a2_data = pattern(0x79, 8);
    write(&mut sa, 50_000, &a2_data, "WRITE through A restarted");
    assert!(
        read(&mut sb, 50_000, 8) == a2_data,
        "A's new write through B"
    );
    assert!(
        read(&mut sb, b_lba, 16) == b_data,
        "B's write after A wrote again"
    );
    assert!(
        read(&mut sb, b_lba + 16, 16) == b2_data,
        "B's second write after A wrote again"
    );
    // Neither live gateway was ever taken for dead.
    assert!(
        !a.stderr().contains("broke its lock"),
        "the restarted A broke a lock: {}",
        a.stderr_tail(20)
    );
    assert_eq!(
        b.stderr().matches("broke its lock").count(),
        1,
        "B broke a lock more than once: {}",
        b.stderr_tail(20)
    );
    sa.logout();
    sb.logout();
}

#[test]
fn on_ceph_a_live_gateway_blocklisted_by_mistake_reopens_its_image() {
    // A false "dead" verdict (the owner cut off from the OSDs for a few
    // seconds) blocklists a live gateway: its client stays fenced, so the
    // gateway must reopen the LUN with a new client to serve again.
    let image = Image::create("gwraw-blocklisted-live", 64);
    let a = gateway(&image, 1);
    let b = gateway(&image, 2);
    let a_address = logged_address(&a);
    let initiator = "iqn.2026-12.test:gw-blocklisted";
    let mut sa = login(&a, initiator, 1);
    let mut sb = login(&b, initiator, 2);
    let first = pattern(0x31, 8);
    write(&mut sa, 0, &first, "WRITE through A before the blocklist");
    let bare = bare_addresses(&a_address);
    assert!(!bare.is_empty(), "A's logged address {a_address:?}");
    for addr in &bare {
        ceph(&["osd", "blocklist", "add", addr]);
    }
    let blocklisted = Instant::now();

    // A's commands fail (fenced: the transition sense, then the unit
    // attention of the replaced LUN) until A serves with a new client.
    let data = pattern(0x32, 8);
    let deadline = blocklisted + Duration::from_secs(60);
    let mut answers = Vec::new();
    let r = loop {
        let r = sa.command(LUN, &rw16(WRITE_16, 64, 8), &data, 0);
        if r.status == GOOD || Instant::now() > deadline {
            break r;
        }
        let allowed = in_transition(&r)
            || (r.status == CHECK_CONDITION && r.sense_code().is_some_and(|(k, _, _)| k == 0x06));
        assert!(
            allowed,
            "A's write while blocklisted: {r}\n{}",
            a.stderr_tail(20)
        );
        if answers.last() != Some(&r.sense_code()) {
            answers.push(r.sense_code());
        }
        thread::sleep(Duration::from_millis(200));
    };
    let took = blocklisted.elapsed();
    assert_eq!(
        r.status,
        GOOD,
        "A never wrote again after its client was blocklisted ({took:?}, answers {answers:?})\n{}",
        a.stderr_tail(30)
    );
    println!("A wrote again {took:.2?} after its client was blocklisted (answers {answers:?})");
    assert!(
        a.stderr().contains("LUN reopened with a new RADOS client"),
        "{}",
        a.stderr_tail(30)
    );
    assert!(
        took <= Duration::from_secs(20),
        "A wrote again only {took:?} after the blocklist"
    );
    // Both writes read back through both gateways.
    for s in [&mut sa, &mut sb] {
        s.clear_unit_attentions(LUN);
        assert!(read(s, 0, 8) == first, "the write before the blocklist");
        assert!(read(s, 64, 8) == data, "the write after the reopen");
    }
    sa.logout();
    sb.logout();
}
