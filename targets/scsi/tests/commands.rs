//! Byte-level tests of SPC-4 commands through a real target: INQUIRY and
//! VPD pages, REPORT LUNS, REQUEST SENSE, READ CAPACITY, MODE SENSE/SELECT,
//! REPORT SUPPORTED OPERATION CODES and sense formats.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::*;
use rustgt_backstore::{Backstore, Geometry, Result as BsResult};
use rustgt_scsi::{LunConfig, Residual, ScsiTarget, Status};

fn inquiry(evpd: bool, page: u8, alloc: u16) -> Vec<u8> {
    let a = alloc.to_be_bytes();
    vec![0x12, u8::from(evpd), page, a[0], a[1], 0]
}

#[test]
fn inquiry_standard_data_and_residuals() {
    let h = Harness::new();
    let r = h.run(&inquiry(false, 0, 255), 255, vec![]);
    assert_eq!(r.status, Status::GOOD);
    let d = &r.data_in;
    assert_eq!(d.len(), 96);
    assert_eq!(&d[..5], &[0x00, 0x00, 0x06, 0x12, 91]);
    // Byte 5: TPGS=01b (implicit ALUA); 3PC and PROTECT are other features'.
    assert_eq!(d[5] & 0x30, 0x10);
    assert_eq!(&d[6..8], &[0x00, 0x02]);
    assert_eq!(&d[8..16], b"RUSTGT  ");
    assert_eq!(&d[16..32], b"VIRTUAL-DISK    ");
    assert_eq!(r.residual, Residual::Underflow(255 - 96));

    // Allocation length truncates; a smaller Data-In buffer overflows.
    let r = h.run(&inquiry(false, 0, 36), 36, vec![]);
    assert_eq!((r.data_in.len(), r.residual), (36, Residual::None));
    let r = h.run(&inquiry(false, 0, 255), 10, vec![]);
    assert_eq!((r.data_in.len(), r.residual), (10, Residual::Overflow(86)));

    // Every allocation length works; 255 and 256 give the same data.
    for alloc in 0..=256u16 {
        let r = h.run(&inquiry(false, 0, alloc), u32::from(alloc), vec![]);
        assert_eq!(r.status, Status::GOOD);
        assert_eq!(r.data_in.len(), usize::from(alloc).min(96));
    }
}

#[test]
fn inquiry_page_code_without_evpd_points_at_byte_2() {
    let h = Harness::new();
    let r = h.run(&inquiry(false, 1, 256), 256, vec![]);
    assert_eq!(r.status, Status::CHECK_CONDITION);
    assert_eq!(sense_of(&r), (ILLEGAL, 0x24, 0x00));
    // SKSV | C/D, no bit pointer, field pointer 2.
    assert_eq!(&r.sense[15..18], &[0xC0, 0x00, 0x02]);
}

#[test]
fn vpd_pages_are_listed_and_consistent() {
    let h = Harness::new();
    let r = h.run(&inquiry(true, 0x00, 255), 255, vec![]);
    assert_eq!(
        r.data_in,
        vec![0, 0x00, 0, 7, 0x00, 0x80, 0x83, 0x8F, 0xB0, 0xB1, 0xB2]
    );
    for &page in &r.data_in[4..] {
        let r = h.run(&inquiry(true, page, 255), 255, vec![]);
        assert_eq!(r.status, Status::GOOD, "page {page:#x}");
        let d = &r.data_in;
        assert_eq!(d[1], page);
        let len = usize::from(u16::from_be_bytes([d[2], d[3]]));
        assert_eq!(len + 4, d.len(), "page {page:#x} length");
    }
    let r = h.run(&inquiry(true, 0x80, 255), 255, vec![]);
    assert_eq!(&r.data_in[4..], b"SN0001");
    let r = h.run(&inquiry(true, 0xB0, 64), 64, vec![]);
    assert_eq!(r.data_in.len(), 64);
    assert_eq!(r.data_in[3], 0x3C);
    assert_eq!(&r.data_in[8..12], &16384u32.to_be_bytes());
    assert_eq!(&r.data_in[20..28], &[0; 8], "no UNMAP advertised");
    let r = h.run(&inquiry(true, 0x83, 255), 255, vec![]);
    assert_eq!(&r.data_in[4..8], &[0x01, 0x03, 0, 16]);
    assert_eq!(&r.data_in[16..24], &0xABCDu64.to_be_bytes());
    let r = h.run(&inquiry(true, 0x99, 255), 255, vec![]);
    assert_eq!(sense_of(&r), (ILLEGAL, 0x24, 0x00));
}

#[test]
fn missing_lun_behaviour() {
    let h = Harness::new();
    let n = h.nexus.clone();
    let r = h.run_on(&n, 5, &inquiry(false, 0, 96), 96);
    assert_eq!(r.status, Status::GOOD);
    assert_eq!(r.data_in[0], 0x7F);
    let r = h.run_on(&n, 5, &[0, 0, 0, 0, 0, 0], 0);
    assert_eq!(sense_of(&r), (ILLEGAL, 0x25, 0x00));
    let r = h.run_on(&n, 5, &inquiry(true, 0x80, 96), 96);
    assert_eq!(sense_of(&r), (ILLEGAL, 0x25, 0x00));
    // REQUEST SENSE answers GOOD with LOGICAL UNIT NOT SUPPORTED data.
    let r = h.run_on(&n, 5, &[0x03, 0, 0, 0, 18, 0], 18);
    assert_eq!(r.status, Status::GOOD);
    assert_eq!((r.data_in[2], r.data_in[12]), (0x05, 0x25));
    // REPORT LUNS only on LUN 0.
    let r = h.run_on(&n, 5, &[0xA0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0], 256);
    assert_eq!(sense_of(&r), (ILLEGAL, 0x25, 0x00));
}

#[test]
fn report_luns_addressing_and_select_report() {
    let store = MockStore::new(8, 512, false);
    let target = ScsiTarget::new("rl");
    let n = nexus(9);
    let rl = |select: u8| {
        let cmd = rustgt_scsi::Command {
            nexus: n.clone(),
            lun: 0,
            tag: 1,
            cdb: vec![0xA0, 0, select, 0, 0, 0, 0, 0, 1, 0, 0, 0].into(),
            attr: Default::default(),
            data_in_len: 256,
            data_out: vec![].into(),
        };
        submit_wait(&target, cmd)
    };
    // No LUNs at all: LUN 0 is still reported, and works on LUN 0.
    let r = rl(0);
    assert_eq!(
        r.data_in,
        vec![0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    );
    for lun in [1, 300, 255] {
        target.add_lun(lun, LunConfig::new(store.clone())).unwrap();
    }
    assert!(target.add_lun(1, LunConfig::new(store.clone())).is_err());
    assert!(target
        .add_lun(16384, LunConfig::new(store.clone()))
        .is_err());
    let r = rl(2);
    assert_eq!(r.status, Status::GOOD);
    assert_eq!(&r.data_in[..8], &[0, 0, 0, 24, 0, 0, 0, 0]);
    assert_eq!(&r.data_in[8..16], &[0, 1, 0, 0, 0, 0, 0, 0]);
    assert_eq!(&r.data_in[16..24], &[0, 255, 0, 0, 0, 0, 0, 0]);
    assert_eq!(&r.data_in[24..32], &[0x41, 0x2C, 0, 0, 0, 0, 0, 0]);
    assert_eq!(r.residual, Residual::Underflow(256 - 32));
    assert_eq!(rl(1).data_in, vec![0; 8]);
    assert_eq!(sense_of(&rl(0x10)), (ILLEGAL, 0x24, 0x00));
    assert_eq!(target.luns(), vec![1, 255, 300]);
    target.shutdown();
}

#[test]
fn request_sense_fixed_and_descriptor() {
    let h = Harness::new();
    let r = h.run(&[0x03, 0, 0, 0, 252, 0], 252, vec![]);
    assert_eq!(r.status, Status::GOOD);
    assert_eq!(r.data_in.len(), 18);
    assert_eq!(
        (r.data_in[0], r.data_in[2], r.data_in[7], r.data_in[12]),
        (0x70, 0, 10, 0)
    );
    let r = h.run(&[0x03, 1, 0, 0, 252, 0], 252, vec![]);
    assert_eq!(r.data_in, vec![0x72, 0, 0, 0, 0, 0, 0, 0]);
}

#[derive(Debug)]
struct HugeStore;

impl Backstore for HugeStore {
    fn kind(&self) -> &'static str {
        "huge"
    }
    fn geometry(&self) -> Geometry {
        Geometry {
            block_size: 4096,
            num_blocks: 1 << 33,
            read_only: true,
        }
    }
    fn read_at(&self, buf: &mut [u8], _offset: u64) -> BsResult<()> {
        buf.fill(0);
        Ok(())
    }
    fn write_at(&self, _buf: &[u8], _offset: u64, _fua: bool) -> BsResult<()> {
        Err(rustgt_backstore::BackstoreError::ReadOnly)
    }
    fn flush(&self) -> BsResult<()> {
        Ok(())
    }
}

#[test]
fn read_capacity_10_and_16() {
    let h = Harness::new();
    let r = h.run(&[0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0], 8, vec![]);
    assert_eq!(r.data_in, vec![0, 0, 0, 63, 0, 0, 2, 0]);
    // PMI=0 with a non-zero LBA is invalid.
    let r = h.run(&[0x25, 0, 0, 0, 0, 1, 0, 0, 0, 0], 8, vec![]);
    assert_eq!(sense_of(&r), (ILLEGAL, 0x24, 0x00));
    let rc16 = |alloc: u32| {
        let mut c = vec![0x9E, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        c[10..14].copy_from_slice(&alloc.to_be_bytes());
        c
    };
    let r = h.run(&rc16(32), 32, vec![]);
    assert_eq!(r.data_in.len(), 32);
    assert_eq!(&r.data_in[..12], &[0, 0, 0, 0, 0, 0, 0, 63, 0, 0, 2, 0]);
    assert!(r.data_in[12..].iter().all(|&b| b == 0), "no PI, LBPME=0");
    for alloc in 0..16 {
        let r = h.run(&rc16(alloc), 32, vec![]);
        assert_eq!(r.status, Status::GOOD);
        assert_eq!(r.data_in.len(), alloc as usize);
    }

    let target = ScsiTarget::new("huge");
    target
        .add_lun(0, LunConfig::new(Arc::new(HugeStore)))
        .unwrap();
    let n = nexus(3);
    let mk = |cdb: Vec<u8>, len| rustgt_scsi::Command {
        nexus: n.clone(),
        lun: 0,
        tag: 1,
        cdb: cdb.into(),
        attr: Default::default(),
        data_in_len: len,
        data_out: vec![].into(),
    };
    let r = submit_wait(&target, mk(vec![0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0], 8));
    assert_eq!(r.data_in, vec![0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0x10, 0]);
    let r = submit_wait(&target, mk(rc16(32), 32));
    assert_eq!(
        &r.data_in[..12],
        &[0, 0, 0, 1, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0x10, 0]
    );
    // The short block descriptor caps the block count, the long one does not.
    let r = submit_wait(&target, mk(vec![0x1A, 0, 0x08, 0, 255, 0], 255));
    assert_eq!(
        &r.data_in[2..12],
        &[0x90, 8, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0x10, 0]
    );
    let r = submit_wait(
        &target,
        mk(vec![0x5A, 0x10, 0x08, 0, 0, 0, 0, 1, 0, 0], 256),
    );
    assert_eq!(&r.data_in[3..8], &[0x90, 1, 0, 0, 16]);
    assert_eq!(&r.data_in[8..16], &(1u64 << 33).to_be_bytes());
    assert_eq!(&r.data_in[20..24], &4096u32.to_be_bytes());
    target.shutdown();
}

fn mode_sense6(dbd: bool, pc: u8, page: u8, alloc: u8) -> Vec<u8> {
    vec![
        0x1A,
        if dbd { 0x08 } else { 0 },
        (pc << 6) | page,
        0,
        alloc,
        0,
    ]
}

#[test]
fn mode_sense_pages_and_lengths() {
    let h = Harness::new();
    let r = h.run(&mode_sense6(false, 0, 0x3F, 255), 255, vec![]);
    assert_eq!(r.status, Status::GOOD);
    let d = &r.data_in;
    assert_eq!(d.len(), 4 + 8 + 20 + 12 + 12);
    assert_eq!(usize::from(d[0]) + 1, d.len());
    assert_eq!(&d[1..4], &[0, 0x10, 8], "DPOFUA, 8-byte block descriptor");
    assert_eq!(&d[4..12], &[0, 0, 0, 64, 0, 0, 2, 0]);
    assert_eq!(&d[12..15], &[0x08, 0x12, 0x04], "caching page, WCE");
    assert_eq!(
        &d[32..35],
        &[0x0A, 0x0A, 0x02],
        "control page, D_SENSE clear"
    );
    assert_eq!(&d[44..47], &[0x1C, 0x0A, 0x08]);
    assert_eq!(r.residual, Residual::Underflow(255 - 56));

    // Truncated by the allocation length: no residual (libiscsi Residuals).
    let r = h.run(&mode_sense6(false, 0, 0x3F, 4), 4, vec![]);
    assert_eq!((r.data_in.len(), r.residual), (4, Residual::None));
    assert_eq!(r.data_in[0], 55);

    let r = h.run(&mode_sense6(true, 0, 0x0A, 255), 255, vec![]);
    assert_eq!(
        r.data_in,
        vec![15, 0, 0x10, 0, 0x0A, 0x0A, 0x02, 0x10, 0, 0, 0, 0, 0xFF, 0xFF, 0, 0]
    );
    let r = h.run(&mode_sense6(true, 1, 0x0A, 255), 255, vec![]);
    assert_eq!(
        &r.data_in[4..8],
        &[0x0A, 0x0A, 0x04, 0x00],
        "only D_SENSE changeable"
    );
    let r = h.run(&mode_sense6(true, 1, 0x08, 255), 255, vec![]);
    assert_eq!(&r.data_in[4..7], &[0x08, 0x12, 0x04], "only WCE changeable");
    let r = h.run(&mode_sense6(true, 2, 0x08, 255), 255, vec![]);
    assert_eq!(r.status, Status::GOOD);
    let r = h.run(&mode_sense6(true, 3, 0x08, 255), 255, vec![]);
    assert_eq!(sense_of(&r), (ILLEGAL, 0x39, 0x00));
    let r = h.run(&mode_sense6(true, 0, 0x19, 255), 255, vec![]);
    assert_eq!(sense_of(&r), (ILLEGAL, 0x24, 0x00));

    // MODE SENSE(10): two-byte lengths.
    let r = h.run(&[0x5A, 0x00, 0x3F, 0, 0, 0, 0, 1, 0, 0], 256, vec![]);
    let d = &r.data_in;
    assert_eq!(d.len(), 8 + 8 + 44);
    assert_eq!(usize::from(u16::from_be_bytes([d[0], d[1]])) + 2, d.len());
    assert_eq!(&d[6..8], &[0, 8]);
}

#[test]
fn mode_sense_reports_write_protect() {
    let h = Harness::with(16, 512, true, 1);
    let r = h.run(&mode_sense6(true, 0, 0x3F, 255), 255, vec![]);
    assert_eq!(r.data_in[2], 0x90);
}

fn mode_select6(list: &[u8]) -> Vec<u8> {
    vec![0x15, 0x10, 0, 0, list.len() as u8, 0]
}

fn control_page(d_sense: bool) -> Vec<u8> {
    let mut list = vec![0, 0, 0, 0];
    list.extend_from_slice(&[
        0x0A,
        0x0A,
        0x02 | if d_sense { 0x04 } else { 0 },
        0x10,
        0,
        0,
        0,
        0,
        0xFF,
        0xFF,
        0,
        0,
    ]);
    list
}

#[test]
fn mode_select_d_sense_switches_sense_format_and_raises_ua() {
    let h = Harness::new();
    let other = nexus(2);
    // Make the other nexus known.
    assert_eq!(h.run_on(&other, 0, &[0; 6], 0).status, Status::GOOD);

    let list = control_page(true);
    let r = h.run(&mode_select6(&list), 0, list.clone());
    assert_eq!((r.status, r.residual), (Status::GOOD, Residual::None));

    // Descriptor sense from now on, with the field pointer descriptor.
    let r = h.run(&cdb10(0x28, 0x20, 0, 1), 512, vec![]);
    assert_eq!(r.sense[0], 0x72);
    assert_eq!(sense_of(&r), (ILLEGAL, 0x24, 0x00));
    assert_eq!(&r.sense[8..16], &[0x02, 0x06, 0, 0, 0xCD, 0x00, 0x01, 0]);

    // The other nexus is told; the one that changed it is not.
    let r = h.run_on(&other, 0, &[0; 6], 0);
    assert_eq!(sense_of(&r), (UNIT_ATTENTION, 0x2A, 0x01));
    assert_eq!(h.run_on(&other, 0, &[0; 6], 0).status, Status::GOOD);

    let list = control_page(false);
    assert_eq!(
        h.run(&mode_select6(&list), 0, list.clone()).status,
        Status::GOOD
    );
    let r = h.run(&cdb10(0x28, 0x20, 0, 1), 512, vec![]);
    assert_eq!(r.sense[0], 0x70);
}

#[test]
fn software_write_protect_refuses_writes_until_cleared() {
    let h = Harness::new();
    let mut list = control_page(false);
    list[4 + 4] |= 0x08; // SWP
    assert_eq!(
        h.run(&mode_select6(&list), 0, list.clone()).status,
        Status::GOOD
    );
    // WP in the mode parameter header's device-specific parameter.
    let r = h.run(&[0x1A, 0x08, 0x0A, 0, 255, 0], 255, vec![]);
    assert_eq!(r.data_in[2] & 0x80, 0x80);
    let r = h.run(&cdb10(0x2A, 0, 0, 1), 0, vec![0xAB; 512]);
    assert_eq!(sense_of(&r), (0x07, 0x27, 0x02));
    // Reads still work; clearing SWP allows writes again.
    assert_eq!(
        h.run(&cdb10(0x28, 0, 0, 1), 512, vec![]).status,
        Status::GOOD
    );
    let list = control_page(false);
    assert_eq!(
        h.run(&mode_select6(&list), 0, list.clone()).status,
        Status::GOOD
    );
    assert_eq!(
        h.run(&cdb10(0x2A, 0, 0, 1), 0, vec![0xAB; 512]).status,
        Status::GOOD
    );
}

#[test]
fn mode_select_rejects_unchangeable_fields() {
    let h = Harness::new();
    let mut list = control_page(false);
    list[8] |= 0x40; // TAS is not changeable
    let r = h.run(&mode_select6(&list), 0, list.clone());
    assert_eq!(sense_of(&r), (ILLEGAL, 0x26, 0x00));
    // C/D clear (parameter list), bit 6 of byte 8.
    assert_eq!(&r.sense[15..18], &[0x80 | 0x08 | 6, 0, 8]);
    // SP=1 is refused.
    let list = control_page(false);
    let r = h.run(&[0x15, 0x11, 0, 0, list.len() as u8, 0], 0, list);
    assert_eq!(sense_of(&r), (ILLEGAL, 0x24, 0x00));
}

fn rsoc(rctd: bool, options: u8, opcode: u8, sa: u16, alloc: u32) -> Vec<u8> {
    let mut c = vec![
        0xA3,
        0x0C,
        (u8::from(rctd) << 7) | options,
        opcode,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
    ];
    c[4..6].copy_from_slice(&sa.to_be_bytes());
    c[6..10].copy_from_slice(&alloc.to_be_bytes());
    c
}

#[test]
fn report_supported_opcodes_all_and_one() {
    let h = Harness::new();
    let r = h.run(&rsoc(false, 0, 0, 0, 65535), 65535, vec![]);
    assert_eq!(r.status, Status::GOOD);
    let d = &r.data_in;
    let len = u32::from_be_bytes([d[0], d[1], d[2], d[3]]) as usize;
    assert_eq!(len + 4, d.len());
    let descs: Vec<&[u8]> = d[4..].chunks(8).collect();
    let opcodes: Vec<u8> = descs.iter().map(|c| c[0]).collect();
    for op in [
        0x00, 0x03, 0x12, 0x1A, 0x25, 0x28, 0x2A, 0x2F, 0x35, 0x88, 0x9E, 0xA0, 0xA3,
    ] {
        assert!(opcodes.contains(&op), "{op:#x} missing");
    }
    for c in &descs {
        let servactv = c[5] & 1 == 1;
        if !servactv {
            assert_eq!(&c[2..4], &[0, 0]);
        }
        // One-command queries agree with the list.
        let sa = u16::from_be_bytes([c[2], c[3]]);
        let (good, bad) = if servactv { (2, 1) } else { (1, 2) };
        let r = h.run(&rsoc(false, good, c[0], sa, 65535), 65535, vec![]);
        assert_eq!(r.status, Status::GOOD);
        assert_eq!(r.data_in[1] & 0x07, 0b011);
        assert_eq!(r.data_in[4], c[0]);
        assert_eq!(&r.data_in[2..4], &c[6..8]);
        let r = h.run(&rsoc(false, bad, c[0], sa, 65535), 65535, vec![]);
        assert_eq!(sense_of(&r), (ILLEGAL, 0x24, 0x00), "opcode {:#x}", c[0]);
    }

    // READ(10) advertises DPO and FUA.
    let r = h.run(&rsoc(false, 1, 0x28, 0, 65535), 65535, vec![]);
    assert_eq!(&r.data_in[..6], &[0, 0x03, 0, 10, 0x28, 0x18]);

    // RCTD: every descriptor carries a 12-byte timeouts descriptor.
    let r = h.run(&rsoc(true, 0, 0, 0, 65535), 65535, vec![]);
    let d = &r.data_in;
    assert_eq!((d.len() - 4) % 20, 0);
    for c in d[4..].chunks(20) {
        assert_eq!(c[5] & 0x02, 0x02);
        assert_eq!(&c[8..10], &[0, 0x0A]);
    }
    let r = h.run(&rsoc(true, 1, 0x28, 0, 65535), 65535, vec![]);
    assert_eq!(r.data_in[1], 0x83);
    assert_eq!(r.data_in.len(), 4 + 10 + 12);

    // Unsupported opcode (READ LONG(10)): SUPPORT=001b.
    let r = h.run(&rsoc(false, 1, 0x3E, 0, 65535), 65535, vec![]);
    assert_eq!(r.data_in, vec![0, 0x01, 0, 0]);
    let r = h.run(&rsoc(false, 5, 0x28, 0, 65535), 65535, vec![]);
    assert_eq!(sense_of(&r), (ILLEGAL, 0x24, 0x00));
}

#[test]
fn usage_data_drives_cdb_validation() {
    // Every advertised CDB usage bit is accepted by the dispatcher and every
    // reserved bit is refused, with the field pointer on that very bit.
    let h = Harness::new();
    let r = h.run(&rsoc(false, 1, 0x28, 0, 64), 64, vec![]);
    let usage = r.data_in[4..14].to_vec();
    for byte in 1..9 {
        for bit in 0..8u8 {
            if usage[byte] & (1 << bit) != 0 {
                continue;
            }
            let mut cdb = cdb10(0x28, 0, 0, 1);
            cdb[byte] |= 1 << bit;
            let r = h.run(&cdb, 512, vec![]);
            assert_eq!(sense_of(&r), (ILLEGAL, 0x24, 0x00), "byte {byte} bit {bit}");
            assert_eq!(&r.sense[15..18], &[0xC8 | bit, 0, byte as u8]);
        }
    }
}

#[test]
fn unknown_opcode_and_service_action() {
    let h = Harness::new();
    let r = h.run(&[0xC0, 0, 0, 0, 0, 0], 0, vec![]);
    assert_eq!(sense_of(&r), (ILLEGAL, 0x20, 0x00));
    let r = h.run(
        &[0x9E, 0x11, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        32,
        vec![],
    );
    assert_eq!(sense_of(&r), (ILLEGAL, 0x24, 0x00));
    assert_eq!(&r.sense[15..18], &[0xCC, 0, 1]);
    let r = h.run(&[], 0, vec![]);
    assert_eq!(sense_of(&r), (ILLEGAL, 0x20, 0x00));
    // A CDB shorter than its command.
    let r = h.run(&[0x28, 0, 0], 0, vec![]);
    assert_eq!(sense_of(&r), (ILLEGAL, 0x24, 0x00));
    // The iSCSI BHS pads CDBs to 16 bytes: trailing bytes are ignored.
    let mut padded = cdb10(0x28, 0, 0, 1);
    padded.resize(16, 0xEE);
    assert_eq!(h.run(&padded, 512, vec![]).status, Status::GOOD);
}

#[test]
fn test_unit_ready_and_no_data_residual() {
    let h = Harness::new();
    let r = h.run(&[0; 6], 0, vec![]);
    assert_eq!((r.status, r.residual), (Status::GOOD, Residual::None));
    assert!(r.sense.is_empty() && r.data_in.is_empty());
    let r = h.run(&[0; 6], 512, vec![]);
    assert_eq!(r.residual, Residual::Underflow(512));
}
