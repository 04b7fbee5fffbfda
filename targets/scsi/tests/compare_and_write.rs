//! COMPARE AND WRITE: the compare-then-write is atomic against other
//! commands (two racing COMPARE AND WRITEs with the same compare data from
//! two nexuses never both succeed), MISCOMPARE sense carries the offset of
//! the first differing byte, and Data-Out sizes that do not match the CDB
//! are refused.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::{Arc, Barrier};
use std::time::Duration;

use common::*;
use rustgt_backstore::{Backstore, Geometry, RamBackstore, Result as BsResult};
use rustgt_scsi::{Command, LunConfig, Nexus, Response, ScsiTarget, Status, TaskAttr};

const MISCOMPARE: u8 = 0x0E;

/// A RAM store whose reads pause, so that two unsynchronised
/// read-compare-writes would interleave (both read before either writes).
#[derive(Debug)]
struct SlowReads(RamBackstore);

impl Backstore for SlowReads {
    fn kind(&self) -> &'static str {
        "slow-ram"
    }
    fn geometry(&self) -> Geometry {
        self.0.geometry()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> BsResult<()> {
        let r = self.0.read_at(buf, offset);
        std::thread::sleep(Duration::from_micros(200));
        r
    }
    fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> BsResult<()> {
        self.0.write_at(buf, offset, fua)
    }
    fn flush(&self) -> BsResult<()> {
        self.0.flush()
    }
}

fn caw_cdb(lba: u64, blocks: u8) -> Vec<u8> {
    let mut c = vec![0u8; 16];
    c[0] = 0x89;
    c[2..10].copy_from_slice(&lba.to_be_bytes());
    c[13] = blocks;
    c
}

fn command(nexus: &Arc<Nexus>, tag: u64, cdb: Vec<u8>, data_out: Vec<u8>) -> Command {
    Command {
        nexus: nexus.clone(),
        lun: 0,
        tag,
        cdb: cdb.into(),
        attr: TaskAttr::Simple,
        data_in_len: 0,
        data_out: data_out.into(),
    }
}

fn slow_target(workers: usize) -> Arc<ScsiTarget> {
    let store = RamBackstore::new(1 << 20, 512, false).unwrap();
    let target = ScsiTarget::new("caw");
    let mut cfg = LunConfig::new(Arc::new(SlowReads(store)));
    cfg.workers = workers;
    target.add_lun(0, cfg).unwrap();
    target
}

fn write_blocks(target: &ScsiTarget, nexus: &Arc<Nexus>, tag: u64, lba: u64, data: Vec<u8>) {
    let blocks = (data.len() / 512) as u32;
    let r = submit_wait(
        target,
        command(nexus, tag, cdb16(0x8A, 0, lba, blocks), data),
    );
    assert_eq!(r.status, Status::GOOD);
}

fn read_blocks(
    target: &ScsiTarget,
    nexus: &Arc<Nexus>,
    tag: u64,
    lba: u64,
    blocks: u32,
) -> Vec<u8> {
    let mut cmd = command(nexus, tag, cdb16(0x88, 0, lba, blocks), Vec::new());
    cmd.data_in_len = blocks * 512;
    let r = submit_wait(target, cmd);
    assert_eq!(r.status, Status::GOOD);
    r.data_in.into_vec()
}

fn is_miscompare(r: &Response) -> bool {
    r.status == Status::CHECK_CONDITION && sense_of(r) == (MISCOMPARE, 0x1D, 0x00)
}

#[test]
fn racing_compare_and_writes_never_both_succeed() {
    const ITERATIONS: u64 = 300;
    const BLOCKS: u8 = 4;
    let len = usize::from(BLOCKS) * 512;
    let target = slow_target(8);
    let nexuses = [nexus(1), nexus(2)];
    for i in 0..ITERATIONS {
        // Spread the iterations over a few LBAs; reset them to 'A' each time.
        let lba = (i % 8) * u64::from(BLOCKS);
        let old = vec![b'A'; len];
        write_blocks(&target, &nexuses[0], 1_000_000 + i, lba, old.clone());
        let barrier = Arc::new(Barrier::new(2));
        let racers: Vec<_> = nexuses
            .iter()
            .enumerate()
            .map(|(n, nexus)| {
                let (target, nexus, barrier) =
                    (Arc::clone(&target), Arc::clone(nexus), Arc::clone(&barrier));
                let mut data = old.clone();
                data.extend(vec![b'a' + n as u8; len]);
                std::thread::spawn(move || {
                    let cmd = command(&nexus, i, caw_cdb(lba, BLOCKS), data);
                    barrier.wait();
                    submit_wait(&target, cmd)
                })
            })
            .collect();
        let results: Vec<Response> = racers.into_iter().map(|t| t.join().unwrap()).collect();
        let winners: Vec<usize> = (0..2)
            .filter(|&n| results[n].status == Status::GOOD)
            .collect();
        assert_eq!(
            winners.len(),
            1,
            "iteration {i}: exactly one must succeed: {results:?}"
        );
        let loser = 1 - winners[0];
        assert!(
            is_miscompare(&results[loser]),
            "iteration {i}: {:?}",
            results[loser]
        );
        // The medium holds the winner's data, untouched by the loser.
        let now = read_blocks(&target, &nexuses[0], 2_000_000 + i, lba, u32::from(BLOCKS));
        assert_eq!(now, vec![b'a' + winners[0] as u8; len], "iteration {i}");
    }
}

#[test]
fn compare_and_write_racing_plain_writes_sees_old_or_new_never_torn() {
    // A WRITE of 'X' and a COMPARE AND WRITE expecting 'A' race: either
    // the CAW compares first and succeeds (then the WRITE lands after it),
    // or it miscompares against the whole 'X' range at its first byte. In
    // both cases the medium ends up all 'X', never a mix.
    let target = slow_target(8);
    let (n1, n2) = (nexus(1), nexus(2));
    for i in 0..100u64 {
        write_blocks(&target, &n1, 1_000_000 + i, 0, vec![b'A'; 1024]);
        let barrier = Arc::new(Barrier::new(2));
        let caw = {
            let (target, n, barrier) = (Arc::clone(&target), n1.clone(), Arc::clone(&barrier));
            let mut data = vec![b'A'; 1024];
            data.extend(vec![b'C'; 1024]);
            std::thread::spawn(move || {
                let cmd = command(&n, i, caw_cdb(0, 2), data);
                barrier.wait();
                submit_wait(&target, cmd)
            })
        };
        let write = {
            let (target, n, barrier) = (Arc::clone(&target), n2.clone(), Arc::clone(&barrier));
            std::thread::spawn(move || {
                let cmd = command(&n, i, cdb16(0x8A, 0, 0, 2), vec![b'X'; 1024]);
                barrier.wait();
                submit_wait(&target, cmd)
            })
        };
        let caw = caw.join().unwrap();
        assert_eq!(write.join().unwrap().status, Status::GOOD);
        let now = read_blocks(&target, &n1, 2_000_000 + i, 0, 2);
        if caw.status != Status::GOOD {
            assert!(is_miscompare(&caw), "{caw:?}");
            // Offset 0: the whole range already held 'X'.
            assert_eq!(&caw.sense[3..7], &[0, 0, 0, 0]);
        }
        assert_eq!(now, vec![b'X'; 1024], "iteration {i}");
    }
}

#[test]
fn miscompare_reports_first_differing_byte_and_writes_nothing() {
    let h = Harness::new();
    let r = h.run(&cdb16(0x8A, 0, 2, 2), 0, vec![b'A'; 1024]);
    assert_eq!(r.status, Status::GOOD);
    let mut data = vec![b'A'; 1024];
    data[1024 - 27] = b'C';
    data.extend(vec![b'B'; 1024]);
    let r = h.run(&caw_cdb(2, 2), 0, data);
    assert_eq!(r.status, Status::CHECK_CONDITION);
    assert_eq!(sense_of(&r), (MISCOMPARE, 0x1D, 0x00));
    // VALID set, INFORMATION = offset into the Data-Out buffer.
    assert_eq!(r.sense[0], 0xF0);
    assert_eq!(&r.sense[3..7], &997u32.to_be_bytes());
    let stored = h.store.data.lock().unwrap();
    assert!(stored[1024..2048].iter().all(|&b| b == b'A'));
}

#[test]
fn matching_compare_writes_second_half() {
    let h = Harness::new();
    let mut data = vec![0u8; 512];
    data.extend(vec![7u8; 512]);
    // FUA is accepted (DPOFUA=1) and makes the write durable.
    let mut cdb = caw_cdb(5, 1);
    cdb[1] = 0x18;
    let r = h.run(&cdb, 0, data);
    assert_eq!(r.status, Status::GOOD);
    assert!(h.store.data.lock().unwrap()[5 * 512..6 * 512]
        .iter()
        .all(|&b| b == 7));
    assert_eq!(
        h.store.fua_writes.load(std::sync::atomic::Ordering::SeqCst),
        1
    );
}

#[test]
fn size_limits_and_ranges() {
    let h = Harness::new();
    // Data-Out must be exactly twice the blocks: too small and too large.
    for blocks in [1u8, 3] {
        let r = h.run(&caw_cdb(0, blocks), 0, vec![0; 4 * 512]);
        assert_eq!(r.status, Status::CHECK_CONDITION);
        assert_eq!(sense_of(&r), (ILLEGAL, 0x24, 0x00));
    }
    // Zero blocks: nothing compared or written, not an error, whatever
    // small Data-Out came along...
    let r = h.run(&caw_cdb(0, 0), 0, Vec::new());
    assert_eq!(r.status, Status::GOOD);
    let r = h.run(&caw_cdb(0, 0), 0, vec![1; 512]);
    assert_eq!(r.status, Status::GOOD);
    // ...but not a Data-Out only a 256-block request could fill.
    let r = h.run(&caw_cdb(0, 0), 0, vec![1; 2 * 256 * 512]);
    assert_eq!(sense_of(&r), (ILLEGAL, 0x24, 0x00));
    let r = h.run(&caw_cdb(0, 255), 0, vec![1; 2 * 255 * 512]);
    assert_eq!(
        sense_of(&r),
        (ILLEGAL, 0x21, 0x00),
        "255 blocks fit, but not this LUN"
    );
    // Past the end.
    let r = h.run(&caw_cdb(BLOCKS, 1), 0, vec![0; 1024]);
    assert_eq!(sense_of(&r), (ILLEGAL, 0x21, 0x00));
    let r = h.run(&caw_cdb(u64::MAX, 1), 0, vec![0; 1024]);
    assert_eq!(sense_of(&r), (ILLEGAL, 0x21, 0x00));
    // WRPROTECT is refused (no protection information).
    let mut cdb = caw_cdb(0, 1);
    cdb[1] = 0x20;
    let r = h.run(&cdb, 0, vec![0; 1024]);
    assert_eq!(sense_of(&r), (ILLEGAL, 0x24, 0x00));
}

#[test]
fn write_protected_lun_refuses_compare_and_write() {
    let h = Harness::with(BLOCKS, BS, true, 1);
    let r = h.run(&caw_cdb(0, 1), 0, vec![0; 1024]);
    assert_eq!(sense_of(&r), (0x07, 0x27, 0x00));
}
