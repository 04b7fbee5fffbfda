//! Black-box: explicit ALUA on a LUN two rustgt gateways serve from one
//! Ceph RBD image (`alua = "explicit"`, target `port_groups = [1, 2]`,
//! cargo feature `rbd`), driven with exact CDBs from the raw initiator of
//! tests/initiator; against a real Ceph cluster from
//! `tests/ceph/with-cluster` (without `RUSTGT_CEPH_CONF` every test
//! fails and says how to run it).
//!
//! What is checked:
//! - TPGS is explicit (10b) through both gateways; REPORT TARGET PORT
//!   GROUPS answers the same through both: every group standby while no
//!   gateway holds the image's exclusive lock, then the holder's group
//!   active/optimized and the other standby;
//! - nobody writes before a SET TARGET PORT GROUPS: a WRITE through
//!   either gateway gets NOT READY, TARGET PORT IN STANDBY STATE;
//! - STPG through B for B's group: GOOD, B active/optimized, A standby; a
//!   WRITE through A fails 04h/0Bh, through B succeeds and reads back;
//!   the session on A gets ASYMMETRIC ACCESS STATE CHANGED exactly once
//!   (the next command gets the standby answer); STPG through B for A's
//!   group, or for a state the model cannot give, gets INVALID FIELD IN
//!   PARAMETER LIST and changes nothing; STPG back through A moves
//!   everything back (B's session sees 2A/06 once, B's data reads through
//!   A); `admin ls` shows `explicit, active/optimized` on the owner and
//!   `explicit, standby` on the other; `admin lun set ... alua=implicit`
//!   is refused naming `alua`, and nothing changes; STPG through A for
//!   A's own group standby releases the lock (every group standby, B's
//!   session told once);
//! - failover: the owner A gets SIGKILL; STPG through B succeeds within
//!   10 s of the kill (retried while it answers ASYMMETRIC ACCESS STATE
//!   TRANSITION; B's heartbeat breaks A's lock) and B writes; another
//!   session on B gets 2Ah/06h once for each owner change; A started again reports B active/optimized
//!   and itself standby, cannot write until an STPG through A gives it
//!   the lock, then writes, and B no longer can.

#![cfg(feature = "rbd")]

mod admin_common;
#[path = "common/ceph.rs"]
mod ceph;
mod common;
use rustgt_test_initiator as initiator;

use std::thread;
use std::time::{Duration, Instant};

use admin_common::cli;
use ceph::{gateway_lun, Image};
use common::{Daemon, DEFAULT_IQN};
use initiator::{rw16, CmdResult, Session, CHECK_CONDITION, GOOD, READ_16, WRITE_16};

const LUN: u64 = 0;
const BLOCK: usize = 512;

/// ASYMMETRIC ACCESS STATE active/optimized and standby (SPC-4 table 279).
const AO: u8 = 0;
const STANDBY: u8 = 2;

/// Gateway `tpgt` of the pair on `image`, its LUN under explicit ALUA.
fn gateway(image: &Image, tpgt: u16) -> Daemon {
    gateway_lun(image, tpgt, "alua = \"explicit\"\n", "")
}

fn login(d: &Daemon, initiator: &str, isid_tail: u8) -> Session {
    let mut s = Session::login(
        d.portal,
        DEFAULT_IQN,
        initiator,
        [0x80, 0, 0, 0, 0x68, isid_tail],
    );
    // The new nexus's unit attentions (power on, ...); a standby port
    // then answers NOT READY, an active one GOOD.
    for _ in 0..16 {
        let r = s.command(LUN, &[0x00, 0, 0, 0, 0, 0], &[], 0);
        if sense(&r).map(|k| k.0) != Some(0x06) {
            assert!(
                r.status == GOOD || sense(&r) == Some(STANDBY_SENSE),
                "TEST UNIT READY after login: {r}"
            );
            return s;
        }
    }
    panic!("unit attentions did not clear in 16 commands");
}

fn pattern(seed: u8, blocks: usize) -> Vec<u8> {
    (0..blocks * BLOCK)
        .map(|i| seed ^ (i as u8).wrapping_mul(29) ^ ((i / BLOCK) as u8))
        .collect()
}

fn sense(r: &CmdResult) -> Option<(u8, u8, u8)> {
    (r.status == CHECK_CONDITION)
        .then(|| r.sense_code())
        .flatten()
}

const STANDBY_SENSE: (u8, u8, u8) = (0x02, 0x04, 0x0b);
const TRANSITION_SENSE: (u8, u8, u8) = (0x02, 0x04, 0x0a);
const STATE_CHANGED: (u8, u8, u8) = (0x06, 0x2a, 0x06);
const INVALID_PARAM: (u8, u8, u8) = (0x05, 0x26, 0x00);

fn write(s: &mut Session, lba: u64, data: &[u8]) -> CmdResult {
    let blocks = u32::try_from(data.len() / BLOCK).expect("blocks");
    s.command(LUN, &rw16(WRITE_16, lba, blocks), data, 0)
}

fn read(s: &mut Session, lba: u64, blocks: u32) -> Vec<u8> {
    let len = blocks * BLOCK as u32;
    let r = s.command(LUN, &rw16(READ_16, lba, blocks), &[], len);
    assert_eq!(r.status, GOOD, "READ(16) at {lba}: {r}");
    r.data
}

/// Standard INQUIRY's TPGS field (byte 5 bits 5..4).
fn tpgs(s: &mut Session) -> u8 {
    let r = s.command(LUN, &[0x12, 0, 0, 0, 96, 0], &[], 96);
    assert_eq!(r.status, GOOD, "INQUIRY: {r}");
    (r.data[5] >> 4) & 0x3
}

/// REPORT TARGET PORT GROUPS: (group, state, supported states) sorted.
fn rtpg(s: &mut Session) -> Vec<(u16, u8, u8)> {
    let cdb = [0xA3, 0x0A, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0];
    let r = s.command(LUN, &cdb, &[], 1024);
    assert_eq!(r.status, GOOD, "REPORT TARGET PORT GROUPS: {r}");
    let d = &r.data;
    let len = u32::from_be_bytes([d[0], d[1], d[2], d[3]]) as usize;
    assert_eq!(len + 4, d.len(), "RTPG RETURN DATA LENGTH: {d:02x?}");
    let mut out = Vec::new();
    let mut at = 4;
    while at < d.len() {
        let g = d
            .get(at..at + 8)
            .unwrap_or_else(|| panic!("RTPG descriptor cut short: {d:02x?}"));
        out.push((u16::from_be_bytes([g[2], g[3]]), g[0] & 0x0f, g[1]));
        at += 8 + 4 * usize::from(g[7]);
    }
    out.sort();
    out
}

/// Groups 1 and 2 in these states, AO_SUP and S_SUP supported.
fn states(s1: u8, s2: u8) -> Vec<(u16, u8, u8)> {
    vec![(1, s1, 0x05), (2, s2, 0x05)]
}

/// SET TARGET PORT GROUPS with one descriptor per (group, state).
fn stpg(s: &mut Session, asks: &[(u16, u8)]) -> CmdResult {
    let mut data = vec![0u8; 4];
    for (g, st) in asks {
        data.extend_from_slice(&[*st, 0]);
        data.extend_from_slice(&g.to_be_bytes());
    }
    let len = u32::try_from(data.len()).expect("len");
    let mut cdb = [0xA4, 0x0A, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    cdb[6..10].copy_from_slice(&len.to_be_bytes());
    s.command(LUN, &cdb, &data, 0)
}

/// STPG making `group` active/optimized, retried (at most 15 s) while it
/// answers ASYMMETRIC ACCESS STATE TRANSITION; GOOD asserted. Returns
/// how long it took.
fn make_active(s: &mut Session, group: u16, d: &Daemon) -> Duration {
    let start = Instant::now();
    loop {
        let r = stpg(s, &[(group, AO)]);
        if sense(&r) == Some(TRANSITION_SENSE) && start.elapsed() < Duration::from_secs(15) {
            thread::sleep(Duration::from_millis(100));
            continue;
        }
        assert_eq!(
            r.status,
            GOOD,
            "STPG for group {group}: {r}\n{}",
            d.stderr_tail(20)
        );
        return start.elapsed();
    }
}

/// A TEST UNIT READY through `s`: 2A/06 once, then the standby (or
/// GOOD, when `active`) answer.
fn assert_state_changed_once(s: &mut Session, active: bool, what: &str) {
    let tur = [0x00, 0, 0, 0, 0, 0];
    let r = s.command(LUN, &tur, &[], 0);
    assert_eq!(sense(&r), Some(STATE_CHANGED), "{what}: first command: {r}");
    let r = s.command(LUN, &tur, &[], 0);
    if active {
        assert_eq!(r.status, GOOD, "{what}: second command: {r}");
    } else {
        assert_eq!(
            sense(&r),
            Some(STANDBY_SENSE),
            "{what}: second command: {r}"
        );
    }
}

#[test]
fn on_ceph_explicit_alua_stpg_moves_the_active_gateway() {
    let image = Image::create("gwalua-stpg", 64);
    let a = gateway(&image, 1);
    let b = gateway(&image, 2);
    let initiator = "iqn.2026-12.test:gw-alua-stpg";
    let mut sa = login(&a, initiator, 1);
    let mut sb = login(&b, initiator, 2);

    assert_eq!(tpgs(&mut sa), 0b10, "TPGS through A");
    assert_eq!(tpgs(&mut sb), 0b10, "TPGS through B");
    // Nobody holds the lock: every group standby, nobody writes.
    assert_eq!(rtpg(&mut sa), states(STANDBY, STANDBY), "RTPG through A");
    assert_eq!(rtpg(&mut sb), states(STANDBY, STANDBY), "RTPG through B");
    let data_b = pattern(0x31, 8);
    for (s, what) in [(&mut sa, "A"), (&mut sb, "B")] {
        let r = write(s, 0, &data_b);
        assert_eq!(
            sense(&r),
            Some(STANDBY_SENSE),
            "WRITE through {what} before any STPG: {r}"
        );
    }

    // STPG through B for B's group.
    let took = make_active(&mut sb, 2, &b);
    println!("STPG through B (nobody held the lock) took {took:.2?}");
    assert_state_changed_once(&mut sa, false, "A after STPG through B");
    assert_eq!(rtpg(&mut sa), states(STANDBY, AO), "RTPG through A");
    assert_eq!(rtpg(&mut sb), states(STANDBY, AO), "RTPG through B");
    let r = write(&mut sa, 0, &pattern(0x99, 8));
    assert_eq!(sense(&r), Some(STANDBY_SENSE), "WRITE through A: {r}");
    let r = write(&mut sb, 0, &data_b);
    assert_eq!(r.status, GOOD, "WRITE through B: {r}");
    assert!(read(&mut sb, 0, 8) == data_b, "B's write read through B");

    // Asking another gateway's group to be active, or a state the model
    // cannot give, is refused and changes nothing.
    for (asks, what) in [
        (vec![(1u16, AO)], "A's group AO through B"),
        (vec![(2, 1)], "B's group active/non-optimized"),
        (vec![(1, 3)], "A's group unavailable"),
    ] {
        let r = stpg(&mut sb, &asks);
        assert_eq!(sense(&r), Some(INVALID_PARAM), "STPG {what}: {r}");
    }
    assert_eq!(rtpg(&mut sa), states(STANDBY, AO), "RTPG after refusals");
    let r = sa.command(LUN, &[0x00, 0, 0, 0, 0, 0], &[], 0);
    assert_eq!(sense(&r), Some(STANDBY_SENSE), "no new 2A/06 on A: {r}");
    let r = write(&mut sb, 8, &data_b);
    assert_eq!(r.status, GOOD, "B still writes: {r}");

    // STPG back through A: B gives the lock up at A's request.
    let took = make_active(&mut sa, 1, &a);
    println!("STPG through A (B held the lock) took {took:.2?}");
    assert!(took < Duration::from_secs(5), "hand-over took {took:?}");
    assert_state_changed_once(&mut sb, false, "B after STPG through A");
    assert_eq!(rtpg(&mut sa), states(AO, STANDBY), "RTPG through A");
    assert_eq!(rtpg(&mut sb), states(AO, STANDBY), "RTPG through B");
    let r = write(&mut sb, 16, &data_b);
    assert_eq!(sense(&r), Some(STANDBY_SENSE), "WRITE through B: {r}");
    assert!(read(&mut sa, 0, 8) == data_b, "B's write read through A");
    let data_a = pattern(0x42, 8);
    let r = write(&mut sa, 16, &data_a);
    assert_eq!(r.status, GOOD, "WRITE through A: {r}");
    assert!(read(&mut sa, 16, 8) == data_a, "A's write read through A");
    // STPG for the group that is active already: GOOD, no change.
    let r = stpg(&mut sa, &[(1, AO), (2, STANDBY)]);
    assert_eq!(r.status, GOOD, "STPG for the active group: {r}");
    let r = sb.command(LUN, &[0x00, 0, 0, 0, 0, 0], &[], 0);
    assert_eq!(sense(&r), Some(STANDBY_SENSE), "no new 2A/06 on B: {r}");

    // The admin interface shows each gateway's state; `alua` cannot
    // change live on a gateway LUN, and nothing changes.
    let ls = cli(&a, &["--json", "ls"]);
    ls.assert_success();
    assert!(
        ls.stdout.contains("explicit, active/optimized"),
        "admin ls on A: {}",
        ls.stdout
    );
    let ls = cli(&b, &["--json", "ls"]);
    ls.assert_success();
    assert!(
        ls.stdout.contains("explicit, standby"),
        "admin ls on B: {}",
        ls.stdout
    );
    let out = cli(&a, &["lun", "set", DEFAULT_IQN, "0", "alua=implicit"]);
    out.assert_failure();
    assert!(
        out.stderr.contains("`alua` cannot change live") && out.stderr.contains("LUN 0"),
        "the refusal names the key: {out}"
    );
    assert_eq!(tpgs(&mut sa), 0b10, "TPGS through A after the refusal");
    let r = write(&mut sa, 24, &data_a);
    assert_eq!(r.status, GOOD, "A still writes after the refusal: {r}");

    // STPG through A for A's group standby: A gives the lock up, every
    // group standby, nobody writes; B's session hears it once.
    let r = stpg(&mut sa, &[(1, STANDBY)]);
    assert_eq!(r.status, GOOD, "STPG A's group standby: {r}");
    assert_state_changed_once(&mut sb, false, "B after A gave the lock up");
    assert_eq!(rtpg(&mut sa), states(STANDBY, STANDBY), "RTPG through A");
    assert_eq!(rtpg(&mut sb), states(STANDBY, STANDBY), "RTPG through B");
    let r = write(&mut sa, 24, &data_a);
    assert_eq!(
        sense(&r),
        Some(STANDBY_SENSE),
        "WRITE through A after giving up: {r}"
    );
    sa.logout();
    sb.logout();
}

#[test]
fn on_ceph_explicit_alua_failover_by_stpg_after_sigkill_within_10_s() {
    let image = Image::create("gwalua-failover", 64);
    let a = gateway(&image, 1);
    let b = gateway(&image, 2);
    let initiator = "iqn.2026-12.test:gw-alua-failover";
    let mut sa = login(&a, initiator, 1);
    let mut sb = login(&b, initiator, 2);
    // A second initiator's session on B, which sends no STPG.
    let mut sb2 = login(&b, "iqn.2026-12.test:gw-alua-failover-2", 3);
    make_active(&mut sa, 1, &a);
    assert_state_changed_once(&mut sb, false, "B after STPG through A");
    assert_state_changed_once(&mut sb2, false, "B's other session after STPG through A");
    let data_a = pattern(0x51, 8);
    let r = write(&mut sa, 0, &data_a);
    assert_eq!(r.status, GOOD, "WRITE through A: {r}");

    a.kill_now("gateway A");
    let killed = Instant::now();
    drop(sa);
    drop(a);
    // The initiator moves to B (as dm-multipath's alua handler does).
    let took = make_active(&mut sb, 2, &b);
    let since_kill = killed.elapsed();
    println!("STPG through B completed {since_kill:.2?} after A's SIGKILL (STPG loop {took:.2?})");
    assert!(
        since_kill <= Duration::from_secs(10),
        "STPG through B completed {since_kill:?} after A's SIGKILL, over 10 s\n{}",
        b.stderr_tail(20)
    );
    // B's other session: the owner changed (A's lock broken by B's
    // heartbeat, then B's STPG), told once, and B is active for it too.
    assert_state_changed_once(&mut sb2, true, "B's other session after the failover");
    // B's own session may have been told of the lock break (A's group no
    // longer active) before its STPG took the lock; once at most.
    let tur = [0x00, 0, 0, 0, 0, 0];
    let r = sb.command(LUN, &tur, &[], 0);
    if sense(&r) == Some(STATE_CHANGED) {
        let r = sb.command(LUN, &tur, &[], 0);
        assert_eq!(r.status, GOOD, "B's session after one 2A/06: {r}");
    } else {
        assert_eq!(r.status, GOOD, "B's session after the failover: {r}");
    }
    let data_b = pattern(0x62, 8);
    let r = write(&mut sb, 8, &data_b);
    assert_eq!(r.status, GOOD, "WRITE through B after failover: {r}");
    assert!(read(&mut sb, 0, 8) == data_a, "A's write read through B");

    // A started again: standby, cannot write until STPG gives it the lock.
    let a = gateway(&image, 1);
    let mut sa = login(&a, initiator, 1);
    assert_eq!(
        rtpg(&mut sa),
        states(STANDBY, AO),
        "RTPG through restarted A"
    );
    assert_eq!(rtpg(&mut sb), states(STANDBY, AO), "RTPG through B");
    let r = write(&mut sa, 16, &pattern(0x73, 8));
    assert_eq!(
        sense(&r),
        Some(STANDBY_SENSE),
        "WRITE through restarted A: {r}"
    );
    let r = write(&mut sb, 16, &data_b);
    assert_eq!(r.status, GOOD, "B still writes: {r}");
    let took = make_active(&mut sa, 1, &a);
    println!("STPG through restarted A took {took:.2?}");
    let data_a2 = pattern(0x74, 8);
    let r = write(&mut sa, 24, &data_a2);
    assert_eq!(r.status, GOOD, "WRITE through A after its STPG: {r}");
    assert!(read(&mut sa, 8, 8) == data_b, "B's write read through A");
    assert!(read(&mut sa, 24, 8) == data_a2, "A's write read through A");
    assert_state_changed_once(&mut sb, false, "B after STPG through restarted A");
    let r = write(&mut sb, 32, &data_b);
    assert_eq!(sense(&r), Some(STANDBY_SENSE), "WRITE through B: {r}");
    assert_state_changed_once(&mut sb2, false, "B's other session after STPG through A");
    assert!(
        b.stderr().contains("broke its lock"),
        "B broke the dead A's lock: {}",
        b.stderr_tail(20)
    );
    sa.logout();
    sb.logout();
    sb2.logout();
}
