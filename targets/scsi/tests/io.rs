//! Medium access through the worker pool: READ/WRITE round trips, range
//! and transfer-length checks, residuals (libiscsi iSCSIResiduals), write
//! protection, VERIFY, WRITE AND VERIFY, caching and flushing.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::Ordering;

use common::*;
use rustgt_scsi::{LunConfig, Residual, ScsiTarget, Status};

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn write_read_round_trip_all_sizes() {
    let h = Harness::new();
    let bs = BS as usize;
    let cases: Vec<(Vec<u8>, Vec<u8>, u32)> = vec![
        (vec![0x0A, 0, 0, 1, 2, 0], vec![0x08, 0, 0, 1, 2, 0], 2),
        (cdb10(0x2A, 0, 5, 3), cdb10(0x28, 0, 5, 3), 3),
        (cdb12(0xAA, 0, 9, 4), cdb12(0xA8, 0, 9, 4), 4),
        (cdb16(0x8A, 0, 20, 5), cdb16(0x88, 0, 20, 5), 5),
    ];
    for (i, (w, r, blocks)) in cases.into_iter().enumerate() {
        let len = blocks as usize * bs;
        let data = pattern(len, i as u8);
        let resp = h.run(&w, 0, data.clone());
        assert_eq!((resp.status, resp.residual), (Status::GOOD, Residual::None));
        let resp = h.run(&r, len as u32, vec![]);
        assert_eq!((resp.status, resp.residual), (Status::GOOD, Residual::None));
        assert_eq!(resp.data_in, data);
    }
    // The data really is at the addressed LBAs.
    let stored = h.store.data.lock().unwrap();
    assert_eq!(&stored[5 * bs..6 * bs], &pattern(3 * bs, 1)[..bs]);
    drop(stored);
    let stats = h.target.lun_stats(0).unwrap();
    assert_eq!(stats.write_commands, 4);
    assert_eq!(stats.read_commands, 4);
    assert_eq!(stats.write_bytes, 14 * BS as u64);
    assert_eq!(stats.read_bytes, 14 * BS as u64);
}

#[test]
fn read6_zero_length_means_256_blocks() {
    let h = Harness::with(512, 512, false, 2);
    let r = h.run(&[0x08, 0, 0, 0, 0, 0], 256 * 512, vec![]);
    assert_eq!((r.status, r.data_in.len()), (Status::GOOD, 256 * 512));
    // READ(10) with length 0 transfers nothing.
    let r = h.run(&cdb10(0x28, 0, 0, 0), 0, vec![]);
    assert_eq!(
        (r.status, r.data_in.len(), r.residual),
        (Status::GOOD, 0, Residual::None)
    );
    let r = h.run(&cdb10(0x2A, 0, 0, 0), 0, vec![]);
    assert_eq!(r.status, Status::GOOD);
}

#[test]
fn out_of_range_accesses() {
    let h = Harness::new();
    for cdb in [
        cdb10(0x28, 0, 63, 2),
        cdb10(0x28, 0, 64, 1),
        cdb10(0x28, 0, 65, 0),
        cdb10(0x2A, 0, 64, 0),
        cdb10(0x28, 0, u32::MAX, 1),
        cdb16(0x88, 0, u64::MAX, 1),
        cdb16(0x8A, 0, u64::MAX - 1, 4),
        cdb12(0xA8, 0, 0x8000_0000, 1),
        cdb10(0x2F, 0, 60, 10),
        cdb10(0x35, 0, 64, 0),
    ] {
        let r = h.run(&cdb, 512, vec![0; 512]);
        assert_eq!(sense_of(&r), (ILLEGAL, 0x21, 0x00), "{cdb:02x?}");
    }
    assert_eq!(
        h.run(&cdb10(0x28, 0, 63, 1), 512, vec![]).status,
        Status::GOOD
    );
    assert_eq!(
        h.run(&cdb10(0x28, 0, 63, 0), 0, vec![]).status,
        Status::GOOD
    );
}

#[test]
fn transfer_length_above_block_limits() {
    let h = Harness::with(32768, 512, false, 1);
    let r = h.run(&cdb16(0x88, 0, 0, 16385), 0, vec![]);
    assert_eq!(sense_of(&r), (ILLEGAL, 0x24, 0x00));
    assert_eq!(&r.sense[15..18], &[0xC0, 0, 10]);
    let r = h.run(&cdb16(0x88, 0, 0, 16384), 0, vec![]);
    assert_eq!(r.status, Status::GOOD);
}

#[test]
fn read_residuals_like_libiscsi() {
    let h = Harness::new();
    let read1 = cdb10(0x28, 0, 0, 1);
    let r = h.run(&read1, 0, vec![]);
    assert_eq!(
        (r.status, r.data_in.len(), r.residual),
        (Status::GOOD, 0, Residual::Overflow(512))
    );
    let r = h.run(&read1, 10000, vec![]);
    assert_eq!(
        (r.data_in.len(), r.residual),
        (512, Residual::Underflow(9488))
    );
    let r = h.run(&read1, 200, vec![]);
    assert_eq!(
        (r.data_in.len(), r.residual),
        (200, Residual::Overflow(312))
    );
    let r = h.run(&cdb10(0x28, 0, 0, 2), 512, vec![]);
    assert_eq!(
        (r.data_in.len(), r.residual),
        (512, Residual::Overflow(512))
    );
    // READ flagged as a write on the transport: no Data-In buffer, GOOD.
    let r = h.run(&read1, 0, vec![0; 512]);
    assert_eq!(
        (r.status, r.residual),
        (Status::GOOD, Residual::Overflow(512))
    );
}

#[test]
fn write_residuals_like_libiscsi() {
    for op in [0x2A, 0x2E] {
        let h = Harness::new();
        let write = |blocks: u16, data: Vec<u8>| h.run(&cdb10(op, 0, 0, blocks), 0, data);
        let r = write(1, vec![]);
        assert_eq!(
            (r.status, r.residual),
            (Status::GOOD, Residual::Overflow(512))
        );
        let r = write(1, vec![b'x'; 10000]);
        assert_eq!(
            (r.status, r.residual),
            (Status::GOOD, Residual::Underflow(9488))
        );
        // 200 bytes cannot make a block: nothing is written, GOOD, overflow.
        h.store.data.lock().unwrap()[..512].fill(0);
        let r = write(1, vec![b'y'; 200]);
        assert_eq!(
            (r.status, r.residual),
            (Status::GOOD, Residual::Overflow(312))
        );
        assert!(h.store.data.lock().unwrap()[..512].iter().all(|&b| b == 0));

        // EDTL > SCSI TL: only the CDB's length is written.
        assert_eq!(write(2, vec![b'a'; 1024]).status, Status::GOOD);
        let r = write(1, vec![b'b'; 1024]);
        assert_eq!(r.residual, Residual::Underflow(512));
        let back = h.run(&cdb10(0x28, 0, 0, 2), 1024, vec![]).data_in;
        assert!(back[..512].iter().all(|&b| b == b'b'));
        assert!(back[512..].iter().all(|&b| b == b'a'));

        // EDTL < SCSI TL: only the data sent is written.
        assert_eq!(write(2, vec![b'a'; 1024]).status, Status::GOOD);
        let r = write(2, vec![b'b'; 512]);
        assert_eq!(
            (r.status, r.residual),
            (Status::GOOD, Residual::Overflow(512))
        );
        let back = h.run(&cdb10(0x28, 0, 0, 2), 1024, vec![]).data_in;
        assert!(back[..512].iter().all(|&b| b == b'b'));
        assert!(back[512..].iter().all(|&b| b == b'a'));
    }
}

#[test]
fn read_only_lun_refuses_writes() {
    let h = Harness::with(16, 512, true, 1);
    for cdb in [
        vec![0x0A, 0, 0, 0, 1, 0],
        cdb10(0x2A, 0, 0, 1),
        cdb12(0xAA, 0, 0, 1),
        cdb16(0x8A, 0, 0, 1),
        cdb10(0x2E, 0, 0, 1),
        cdb16(0x8E, 0, 0, 1),
    ] {
        let r = h.run(&cdb, 0, vec![0; 512]);
        assert_eq!(sense_of(&r), (0x07, 0x27, 0x00), "{cdb:02x?}");
    }
    assert_eq!(
        h.run(&cdb10(0x28, 0, 0, 1), 512, vec![]).status,
        Status::GOOD
    );
    assert_eq!(h.run(&cdb10(0x35, 0, 0, 0), 0, vec![]).status, Status::GOOD);
}

#[test]
fn protection_fields_are_refused() {
    let h = Harness::new();
    for rdprotect in 1..8u8 {
        for op in [0x28, 0x2A, 0x2F, 0x2E] {
            let r = h.run(&cdb10(op, rdprotect << 5, 0, 1), 512, vec![0; 512]);
            assert_eq!(sense_of(&r), (ILLEGAL, 0x24, 0x00));
        }
    }
    // DPO and FUA are accepted.
    for flags in [0x08, 0x10, 0x18] {
        assert_eq!(
            h.run(&cdb10(0x28, flags, 0, 1), 512, vec![]).status,
            Status::GOOD
        );
        assert_eq!(
            h.run(&cdb10(0x2A, flags, 0, 1), 0, vec![0; 512]).status,
            Status::GOOD
        );
    }
}

#[test]
fn verify_bytchk_modes() {
    let h = Harness::new();
    let data = pattern(4 * 512, 7);
    assert_eq!(
        h.run(&cdb10(0x2A, 0, 8, 4), 0, data.clone()).status,
        Status::GOOD
    );

    // BYTCHK=0: range only, no data.
    let r = h.run(&cdb10(0x2F, 0, 8, 4), 0, vec![]);
    assert_eq!((r.status, r.residual), (Status::GOOD, Residual::None));
    // BYTCHK=1: match.
    let r = h.run(&cdb10(0x2F, 0x02, 8, 4), 0, data.clone());
    assert_eq!((r.status, r.residual), (Status::GOOD, Residual::None));
    for cdb in [cdb12(0xAF, 0x02, 8, 4), cdb16(0x8F, 0x12, 8, 4)] {
        assert_eq!(h.run(&cdb, 0, data.clone()).status, Status::GOOD);
    }
    // BYTCHK=1: mismatch at byte 1000 of the Data-Out buffer.
    let mut bad = data.clone();
    bad[1000] ^= b'X';
    let r = h.run(&cdb10(0x2F, 0x02, 8, 4), 0, bad);
    assert_eq!(sense_of(&r), (0x0E, 0x1D, 0x00));
    assert_eq!(r.sense[0], 0xF0, "INFORMATION valid");
    assert_eq!(&r.sense[3..7], &1000u32.to_be_bytes());

    // BYTCHK=11b: one block compared with every block.
    let block = pattern(512, 3);
    let mut same = Vec::new();
    for _ in 0..3 {
        same.extend_from_slice(&block);
    }
    assert_eq!(h.run(&cdb10(0x2A, 0, 20, 3), 0, same).status, Status::GOOD);
    let r = h.run(&cdb10(0x2F, 0x06, 20, 3), 0, block.clone());
    assert_eq!((r.status, r.residual), (Status::GOOD, Residual::None));
    let r = h.run(&cdb10(0x2F, 0x06, 19, 3), 0, block);
    assert_eq!(sense_of(&r), (0x0E, 0x1D, 0x00));
    // BYTCHK=10b is reserved.
    let r = h.run(&cdb10(0x2F, 0x04, 8, 1), 0, vec![]);
    assert_eq!(sense_of(&r), (ILLEGAL, 0x24, 0x00));
    assert_eq!(&r.sense[15..18], &[0xCA, 0, 1]);
}

#[test]
fn write_and_verify_writes_durably_and_compares() {
    let h = Harness::new();
    let data = pattern(2 * 512, 9);
    for cdb in [
        cdb10(0x2E, 0x02, 4, 2),
        cdb12(0xAE, 0x00, 4, 2),
        cdb16(0x8E, 0x12, 4, 2),
    ] {
        let r = h.run(&cdb, 0, data.clone());
        assert_eq!((r.status, r.residual), (Status::GOOD, Residual::None));
    }
    assert_eq!(h.store.fua_writes.load(Ordering::SeqCst), 3);
    assert_eq!(h.run(&cdb10(0x28, 0, 4, 2), 1024, vec![]).data_in, data);
    // BYTCHK=11b is not valid for WRITE AND VERIFY.
    let r = h.run(&cdb10(0x2E, 0x06, 4, 1), 0, vec![0; 512]);
    assert_eq!(sense_of(&r), (ILLEGAL, 0x24, 0x00));
}

#[test]
fn fua_and_write_cache() {
    let h = Harness::new();
    h.run(&cdb10(0x2A, 0, 0, 1), 0, vec![1; 512]);
    h.run(&cdb10(0x2A, 0x08, 0, 1), 0, vec![1; 512]);
    assert_eq!(h.store.plain_writes.load(Ordering::SeqCst), 1);
    assert_eq!(h.store.fua_writes.load(Ordering::SeqCst), 1);

    // WCE off in the configuration: every write is FUA.
    let store = MockStore::new(16, 512, false);
    let target = ScsiTarget::new("wt");
    let mut cfg = LunConfig::new(store.clone());
    cfg.write_cache = false;
    target.add_lun(0, cfg).unwrap();
    let n = nexus(1);
    let cmd = rustgt_scsi::Command {
        nexus: n.clone(),
        lun: 0,
        tag: 1,
        cdb: cdb10(0x2A, 0, 0, 1).into(),
        attr: Default::default(),
        data_in_len: 0,
        data_out: vec![1; 512].into(),
    };
    assert_eq!(submit_wait(&target, cmd).status, Status::GOOD);
    assert_eq!(store.fua_writes.load(Ordering::SeqCst), 1);
    assert_eq!(store.plain_writes.load(Ordering::SeqCst), 0);
    let ms = rustgt_scsi::Command {
        nexus: n,
        lun: 0,
        tag: 2,
        cdb: vec![0x1A, 0x08, 0x08, 0, 255, 0].into(),
        attr: Default::default(),
        data_in_len: 255,
        data_out: vec![].into(),
    };
    assert_eq!(submit_wait(&target, ms).data_in[6], 0x00, "WCE clear");
    target.shutdown();
}

#[test]
fn mode_select_wce_off_flushes_and_forces_fua() {
    let h = Harness::new();
    let mut list = vec![0, 0, 0, 0, 0x08, 0x12];
    list.extend_from_slice(&[0; 18]);
    let r = h.run(&[0x15, 0x10, 0, 0, list.len() as u8, 0], 0, list);
    assert_eq!(r.status, Status::GOOD);
    assert_eq!(h.store.flushes.load(Ordering::SeqCst), 1);
    h.run(&cdb10(0x2A, 0, 0, 1), 0, vec![1; 512]);
    assert_eq!(h.store.fua_writes.load(Ordering::SeqCst), 1);
    assert_eq!(h.store.plain_writes.load(Ordering::SeqCst), 0);
}

#[test]
fn synchronize_cache_and_start_stop() {
    let h = Harness::new();
    assert_eq!(h.run(&cdb10(0x35, 0, 0, 0), 0, vec![]).status, Status::GOOD);
    assert_eq!(
        h.run(&cdb16(0x91, 0x02, 10, 20), 0, vec![]).status,
        Status::GOOD
    );
    assert_eq!(h.store.flushes.load(Ordering::SeqCst), 2);
    // START STOP UNIT: stop flushes, start does not, NO_FLUSH skips it.
    assert_eq!(
        h.run(&[0x1B, 0, 0, 0, 0x00, 0], 0, vec![]).status,
        Status::GOOD
    );
    assert_eq!(
        h.run(&[0x1B, 1, 0, 0, 0x01, 0], 0, vec![]).status,
        Status::GOOD
    );
    assert_eq!(
        h.run(&[0x1B, 0, 0, 0, 0x04, 0], 0, vec![]).status,
        Status::GOOD
    );
    assert_eq!(h.store.flushes.load(Ordering::SeqCst), 3);
    // LOEJ on a non-removable medium, reserved power condition.
    let r = h.run(&[0x1B, 1, 0, 0, 0x02, 0], 0, vec![]);
    assert_eq!(sense_of(&r), (ILLEGAL, 0x24, 0x00));
    let r = h.run(&[0x1B, 0, 0, 0, 0x50, 0], 0, vec![]);
    assert_eq!(sense_of(&r), (ILLEGAL, 0x24, 0x00));
}

#[test]
fn backstore_errors_become_sense() {
    let h = Harness::new();
    h.store.fail_reads(true);
    let r = h.run(&cdb10(0x28, 0, 0, 1), 512, vec![]);
    assert_eq!(sense_of(&r), (0x03, 0x11, 0x00));
    assert!(r.data_in.is_empty());
    h.store.fail_reads(false);
    assert_eq!(
        h.run(&cdb10(0x28, 0, 0, 1), 512, vec![]).status,
        Status::GOOD
    );
}

#[test]
fn block_size_4096() {
    let h = Harness::with(16, 4096, false, 2);
    let data = pattern(8192, 5);
    assert_eq!(
        h.run(&cdb10(0x2A, 0, 14, 2), 0, data.clone()).status,
        Status::GOOD
    );
    assert_eq!(h.run(&cdb10(0x28, 0, 14, 2), 8192, vec![]).data_in, data);
    let r = h.run(&cdb10(0x28, 0, 15, 2), 8192, vec![]);
    assert_eq!(sense_of(&r), (ILLEGAL, 0x21, 0x00));
    let r = h.run(&[0x12, 1, 0xB0, 0, 64, 0], 64, vec![]);
    assert_eq!(&r.data_in[8..12], &2048u32.to_be_bytes());
}
