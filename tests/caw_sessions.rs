//! Black-box: COMPARE AND WRITE (SBC-3 §5.2) is atomic across sessions.
//!
//! Two sessions (two initiators, two connections) race COMPARE AND WRITE on
//! the same block with the same compare data — the block's current content
//! — and different write data. Round after round, exactly one must succeed
//! and the other must get MISCOMPARE DURING VERIFY OPERATION with the
//! offset of the first differing byte in its INFORMATION field; the block
//! then holds the winner's data. Two successes would mean the compare and
//! the write are not one atomic step.

mod common;
use rustgt_test_initiator as initiator;

use std::sync::Barrier;
use std::thread;

use common::{Daemon, DEFAULT_IQN};
use initiator::{rw16, CmdResult, Session, CHECK_CONDITION, GOOD, MISCOMPARE, READ_16, WRITE_16};

const LUN: u64 = 0;
const BLOCK: usize = 512;
const LBA: u64 = 2048;
/// Rounds of the race (a few milliseconds each).
const ROUNDS: usize = 300;

/// COMPARE AND WRITE of one block at `lba`: Data-Out is the verify data
/// then the write data (SBC-3 §5.2, NUMBER OF LOGICAL BLOCKS = 1).
fn compare_and_write(s: &mut Session, lba: u64, compare: &[u8], write: &[u8]) -> CmdResult {
    let mut cdb = [0u8; 16];
    cdb[0] = 0x89;
    cdb[2..10].copy_from_slice(&lba.to_be_bytes());
    cdb[13] = 1;
    let mut data = compare.to_vec();
    data.extend_from_slice(write);
    s.command(LUN, &cdb, &data, 0)
}

fn read_block(s: &mut Session, lba: u64) -> Vec<u8> {
    let r = s.command(LUN, &rw16(READ_16, lba, 1), &[], BLOCK as u32);
    assert_eq!(r.status, GOOD, "READ(16): {r}");
    assert_eq!(r.data.len(), BLOCK);
    r.data
}

/// `base` with every byte from `from` on changed: the first difference is
/// at `from`.
fn changed_from(base: &[u8], from: usize, salt: u8) -> Vec<u8> {
    base.iter()
        .enumerate()
        .map(|(i, &b)| if i < from { b } else { b ^ (0x80 | salt) })
        .collect()
}

/// The loser's answer: CHECK CONDITION, MISCOMPARE / 0x1D00 (MISCOMPARE
/// DURING VERIFY OPERATION), INFORMATION = offset of the first byte that
/// did not compare.
fn assert_miscompare(r: &CmdResult, offset: usize, round: usize) {
    assert_eq!(r.status, CHECK_CONDITION, "round {round}: loser got {r}");
    assert_eq!(
        r.sense_code(),
        Some((MISCOMPARE, 0x1d, 0x00)),
        "round {round}: loser's sense {:02x?}",
        r.sense
    );
    assert_eq!(
        r.information(),
        Some(offset as u64),
        "round {round}: miscompare offset in {:02x?}",
        r.sense
    );
}

#[test]
fn concurrent_compare_and_write_never_both_succeed() {
    let d = Daemon::start();
    let mut a = Session::login(
        d.portal,
        DEFAULT_IQN,
        "iqn.2026-11.org.rustgt:caw-a",
        [0x80, 0, 0, 0, 0xca, 1],
    );
    let mut b = Session::login(
        d.portal,
        DEFAULT_IQN,
        "iqn.2026-11.org.rustgt:caw-b",
        [0x80, 0, 0, 0, 0xca, 2],
    );
    a.clear_unit_attentions(LUN);
    b.clear_unit_attentions(LUN);

    let mut current: Vec<u8> = (0..BLOCK).map(|i| (i * 7 + 3) as u8).collect();
    let r = a.command(LUN, &rw16(WRITE_16, LBA, 1), &current, 0);
    assert_eq!(r.status, GOOD, "initial WRITE(16): {r}");

    let (mut wins_a, mut wins_b) = (0usize, 0usize);
    for round in 0..ROUNDS {
        // Both differ from the current block from a different offset, so
        // the loser's INFORMATION field tells whose data it met.
        let from_a = 1 + round % 150;
        let from_b = 200 + round % 150;
        let new_a = changed_from(&current, from_a, 0x11);
        let new_b = changed_from(&current, from_b, 0x22);
        let start = Barrier::new(2);
        let (ra, rb) = thread::scope(|scope| {
            let ta = scope.spawn(|| {
                start.wait();
                compare_and_write(&mut a, LBA, &current, &new_a)
            });
            let tb = scope.spawn(|| {
                start.wait();
                compare_and_write(&mut b, LBA, &current, &new_b)
            });
            (
                ta.join().expect("session a panicked"),
                tb.join().expect("session b panicked"),
            )
        });
        let winner = match (ra.status == GOOD, rb.status == GOOD) {
            (true, true) => panic!("round {round}: both COMPARE AND WRITE succeeded"),
            (false, false) => panic!("round {round}: neither succeeded: a {ra}, b {rb}"),
            (true, false) => {
                assert_miscompare(&rb, from_a, round);
                wins_a += 1;
                new_a
            }
            (false, true) => {
                assert_miscompare(&ra, from_b, round);
                wins_b += 1;
                new_b
            }
        };
        let on_disk = read_block(&mut a, LBA);
        assert!(
            on_disk == winner,
            "round {round}: the block does not hold the winner's data"
        );
        current = winner;
    }
    println!("{ROUNDS} rounds: session a won {wins_a}, session b won {wins_b}");
    a.logout();
    b.logout();
    assert!(d.stop().success());
}
