//! Thin provisioning and the other SBC extensions through a real target:
//! UNMAP, WRITE SAME(10/16), GET LBA STATUS from the backstore's holes,
//! VPD B0/B2 and READ CAPACITY(16) provisioning bits, thick LUNs that
//! report and accept none of it, ORWRITE, PRE-FETCH, READ DEFECT DATA,
//! WRITE ATOMIC(16), DATA PROTECT on write-protected LUNs, and REPORT
//! SUPPORTED OPERATION CODES listing every new command.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::*;
use rustgt_backstore::{Backstore, FileBackstore, FileOptions, RamBackstore};
use rustgt_scsi::{Command, LunConfig, Response, ScsiTarget, Status, TaskAttr};

const KIB: u64 = 1024;
const DATA_PROTECT: u8 = 0x07;

struct Lun {
    target: Arc<ScsiTarget>,
    nexus: Arc<rustgt_scsi::Nexus>,
    tag: std::sync::atomic::AtomicU64,
    bs: u32,
}

impl Lun {
    fn new(store: Arc<dyn Backstore>, thin: bool, physical: Option<u32>) -> Lun {
        let bs = store.geometry().block_size;
        let target = ScsiTarget::new("sbc");
        let mut cfg = LunConfig::new(store);
        cfg.workers = 2;
        cfg.thin = thin;
        cfg.physical_block_size = physical;
        target.add_lun(0, cfg).unwrap();
        Lun {
            target,
            nexus: nexus(1),
            tag: std::sync::atomic::AtomicU64::new(1),
            bs,
        }
    }

    /// A thin LUN of `blocks` 512-byte blocks on a RAM store with 4 KiB
    /// chunks, so deallocation is visible at 8-block granularity.
    fn thin_ram(blocks: u64) -> Lun {
        let store = RamBackstore::with_chunk_size(blocks * 512, 512, false, 4096).unwrap();
        Lun::new(Arc::new(store), true, Some(4096))
    }

    fn thick_ram(blocks: u64) -> Lun {
        let store = RamBackstore::with_chunk_size(blocks * 512, 512, false, 4096).unwrap();
        Lun::new(Arc::new(store), false, None)
    }

    fn run(&self, cdb: &[u8], data_in_len: u32, data_out: Vec<u8>) -> Response {
        let cmd = Command {
            nexus: self.nexus.clone(),
            lun: 0,
            tag: self.tag.fetch_add(1, std::sync::atomic::Ordering::SeqCst),
            cdb: cdb.to_vec().into(),
            attr: TaskAttr::Simple,
            data_in_len,
            data_out: data_out.into(),
        };
        submit_wait(&self.target, cmd)
    }

    fn good(&self, cdb: &[u8], data_in_len: u32, data_out: Vec<u8>) -> Vec<u8> {
        let r = self.run(cdb, data_in_len, data_out);
        assert_eq!(r.status, Status::GOOD, "{cdb:02x?}: {r:?}");
        r.data_in.into_vec()
    }

    fn write(&self, lba: u64, data: Vec<u8>) {
        let blocks = (data.len() / self.bs as usize) as u32;
        self.good(&cdb16(0x8A, 0, lba, blocks), 0, data);
    }

    fn read(&self, lba: u64, blocks: u32) -> Vec<u8> {
        self.good(&cdb16(0x88, 0, lba, blocks), blocks * self.bs, Vec::new())
    }

    /// (lba, blocks, status) of each GET LBA STATUS descriptor.
    fn lba_status(&self, lba: u64, alloc: u32) -> Vec<(u64, u32, u8)> {
        let mut cdb = vec![0u8; 16];
        cdb[0] = 0x9E;
        cdb[1] = 0x12;
        cdb[2..10].copy_from_slice(&lba.to_be_bytes());
        cdb[10..14].copy_from_slice(&alloc.to_be_bytes());
        let d = self.good(&cdb, alloc, Vec::new());
        let len = u32::from_be_bytes(d[0..4].try_into().unwrap()) as usize;
        assert_eq!((len - 4) % 16, 0);
        d[8..]
            .chunks(16)
            .map(|c| {
                (
                    u64::from_be_bytes(c[0..8].try_into().unwrap()),
                    u32::from_be_bytes(c[8..12].try_into().unwrap()),
                    c[12] & 0x0F,
                )
            })
            .collect()
    }

    fn vpd(&self, page: u8) -> Vec<u8> {
        self.good(&[0x12, 0x01, page, 0, 255, 0], 255, Vec::new())
    }

    fn read_capacity16(&self) -> Vec<u8> {
        let mut cdb = cdb16(0x9E, 0x10, 0, 32);
        cdb[10..14].copy_from_slice(&32u32.to_be_bytes());
        self.good(&cdb, 32, Vec::new())
    }
}

fn unmap_list(ranges: &[(u64, u32)]) -> Vec<u8> {
    let bd_len = (ranges.len() * 16) as u16;
    let mut l = (bd_len + 6).to_be_bytes().to_vec();
    l.extend_from_slice(&bd_len.to_be_bytes());
    l.extend_from_slice(&[0; 4]);
    for &(lba, n) in ranges {
        l.extend_from_slice(&lba.to_be_bytes());
        l.extend_from_slice(&n.to_be_bytes());
        l.extend_from_slice(&[0; 4]);
    }
    l
}

fn unmap_cdb(param_len: u16) -> Vec<u8> {
    let mut c = vec![0x42, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    c[7..9].copy_from_slice(&param_len.to_be_bytes());
    c
}

fn ws10(flags: u8, lba: u32, blocks: u16) -> Vec<u8> {
    cdb10(0x41, flags, lba, blocks)
}

fn ws16(flags: u8, lba: u64, blocks: u32) -> Vec<u8> {
    cdb16(0x93, flags, lba, blocks)
}

fn check(r: &Response) -> (u8, u8, u8) {
    assert_eq!(r.status, Status::CHECK_CONDITION, "{r:?}");
    sense_of(r)
}

#[test]
fn thin_vpd_and_capacity_report_provisioning() {
    let lun = Lun::thin_ram(1024);
    let b2 = lun.vpd(0xB2);
    // LBPU, LBPWS, LBPWS10, LBPRZ; thin provisioning type.
    assert_eq!(b2, vec![0, 0xB2, 0, 4, 0, 0xE4, 0x02, 0]);
    let b0 = lun.vpd(0xB0);
    assert_eq!(b0.len(), 64);
    let be32 = |at: usize| u32::from_be_bytes(b0[at..at + 4].try_into().unwrap());
    assert_eq!(b0[4], 0, "WSNZ");
    assert_eq!(b0[5], 255, "MAXIMUM COMPARE AND WRITE LENGTH");
    assert_eq!(
        u16::from_be_bytes([b0[6], b0[7]]),
        8,
        "OPTIMAL TRANSFER LENGTH GRANULARITY"
    );
    assert_eq!(be32(20), 1 << 20, "MAXIMUM UNMAP LBA COUNT");
    assert_eq!(be32(24), 4095, "MAXIMUM UNMAP BLOCK DESCRIPTOR COUNT");
    assert_eq!(be32(28), 8, "OPTIMAL UNMAP GRANULARITY");
    assert_eq!(be32(32), 0x8000_0000, "UGAVALID, alignment 0");
    assert_eq!(u64::from_be_bytes(b0[36..44].try_into().unwrap()), 0xFFFF);
    assert_eq!(be32(44), be32(8), "MAXIMUM ATOMIC TRANSFER LENGTH");
    assert_eq!(
        (be32(48), be32(52)),
        (16, 16),
        "atomic alignment, granularity"
    );
    let rc = lun.read_capacity16();
    assert_eq!(rc[13], 3, "eight logical blocks per physical block");
    assert_eq!(rc[14] & 0xC0, 0xC0, "LBPME and LBPRZ");
}

#[test]
fn thick_lun_reports_and_accepts_no_provisioning() {
    let lun = Lun::thick_ram(1024);
    assert_eq!(lun.vpd(0xB2), vec![0, 0xB2, 0, 4, 0, 0, 0, 0]);
    let b0 = lun.vpd(0xB0);
    assert!(b0[20..36].iter().all(|&b| b == 0), "no unmap limits");
    let rc = lun.read_capacity16();
    assert_eq!((rc[13], rc[14]), (0, 0));
    // UNMAP is not supported; WRITE SAME with UNMAP is an invalid field.
    let list = unmap_list(&[(0, 1)]);
    let r = lun.run(&unmap_cdb(list.len() as u16), 0, list);
    assert_eq!(check(&r), (ILLEGAL, 0x20, 0x00));
    let r = lun.run(&ws10(0x08, 0, 1), 0, vec![0; 512]);
    assert_eq!(check(&r), (ILLEGAL, 0x24, 0x00));
    // Plain WRITE SAME works, and every LBA reports mapped.
    lun.good(&ws16(0, 10, 4), 0, vec![0x5A; 512]);
    assert_eq!(lun.read(10, 4), vec![0x5A; 2048]);
    assert_eq!(lun.lba_status(3, 1024), vec![(3, 1021, 0)]);
}

#[test]
fn thin_lun_without_unmap_command_deallocates_by_write_same_only() {
    let store = RamBackstore::with_chunk_size(1024 * 512, 512, false, 4096).unwrap();
    let target = ScsiTarget::new("no-unmap");
    let mut cfg = LunConfig::new(Arc::new(store));
    cfg.thin = true;
    cfg.unmap_command = false;
    target.add_lun(0, cfg).unwrap();
    let lun = Lun {
        target,
        nexus: nexus(1),
        tag: std::sync::atomic::AtomicU64::new(1),
        bs: 512,
    };
    // LBPU clear, LBPWS and LBPWS10 set; no unmap limits.
    assert_eq!(lun.vpd(0xB2)[5], 0x64);
    assert!(lun.vpd(0xB0)[20..36].iter().all(|&b| b == 0));
    assert_eq!(lun.read_capacity16()[14] & 0x80, 0x80, "still LBPME");
    let list = unmap_list(&[(0, 8)]);
    assert_eq!(
        check(&lun.run(&unmap_cdb(24), 0, list)),
        (ILLEGAL, 0x20, 0x00)
    );
    lun.write(0, vec![1; 8 * 512]);
    lun.good(&ws10(0x08, 0, 8), 0, vec![0; 512]);
    assert_eq!(lun.lba_status(0, 24), vec![(0, 1024, 1)]);
}

#[test]
fn unmap_deallocates_and_reads_zeros() {
    let lun = Lun::thin_ram(1024);
    lun.write(0, vec![b'a'; 64 * 512]);
    assert_eq!(lun.lba_status(0, 1024), vec![(0, 64, 0), (64, 960, 1)]);
    let list = unmap_list(&[(8, 16), (40, 8), (60, 0)]);
    lun.good(&unmap_cdb(list.len() as u16), 0, list);
    assert_eq!(lun.read(8, 16), vec![0; 16 * 512]);
    assert_eq!(lun.read(0, 8), vec![b'a'; 8 * 512]);
    assert_eq!(
        lun.lba_status(0, 1024),
        vec![
            (0, 8, 0),
            (8, 16, 1),
            (24, 16, 0),
            (40, 8, 1),
            (48, 16, 0),
            (64, 960, 1)
        ]
    );
    // The first descriptor starts at the requested LBA, mid-extent too.
    assert_eq!(lun.lba_status(10, 1024)[0], (10, 14, 1));
    assert_eq!(lun.lba_status(25, 1024)[0], (25, 15, 0));
    // A short allocation length still gets one whole descriptor.
    assert_eq!(lun.lba_status(0, 24), vec![(0, 8, 0)]);
}

#[test]
fn unmap_parameter_list_errors() {
    let lun = Lun::thin_ram(1024);
    // No parameter data, or no descriptors: nothing to do.
    lun.good(&unmap_cdb(0), 0, Vec::new());
    let list = unmap_list(&[]);
    lun.good(&unmap_cdb(8), 0, list);
    // Zero blocks at the end of the LUN is fine; one block is not.
    let list = unmap_list(&[(1024, 0)]);
    lun.good(&unmap_cdb(24), 0, list);
    let list = unmap_list(&[(1023, 2)]);
    assert_eq!(
        check(&lun.run(&unmap_cdb(24), 0, list)),
        (ILLEGAL, 0x21, 0x00)
    );
    // A header cut short.
    let r = lun.run(&unmap_cdb(4), 0, vec![0, 6, 0, 0]);
    assert_eq!(check(&r), (ILLEGAL, 0x1A, 0x00));
    // Nothing is unmapped when any descriptor is bad.
    lun.write(0, vec![1; 512]);
    let list = unmap_list(&[(0, 1), (5000, 1)]);
    assert_eq!(
        check(&lun.run(&unmap_cdb(40), 0, list)),
        (ILLEGAL, 0x21, 0x00)
    );
    assert_eq!(lun.read(0, 1), vec![1; 512]);
    // ANCHOR is not supported.
    let mut cdb = unmap_cdb(24);
    cdb[1] = 0x01;
    let r = lun.run(&cdb, 0, unmap_list(&[(0, 1)]));
    assert_eq!(check(&r), (ILLEGAL, 0x24, 0x00));
}

#[test]
fn write_same_unmap_zeros_and_patterns() {
    let lun = Lun::thin_ram(1024);
    lun.write(0, vec![0xFF; 256 * 512]);
    // UNMAP bit: deallocated whatever the block holds; reads zeros.
    lun.good(&ws10(0x08, 0, 16), 0, vec![0xA6; 512]);
    assert_eq!(lun.read(0, 16), vec![0; 16 * 512]);
    assert_eq!(lun.lba_status(0, 24), vec![(0, 16, 1)]);
    // A zero block without UNMAP deallocates on a thin LUN too.
    lun.good(&ws16(0, 16, 16), 0, vec![0; 512]);
    assert_eq!(lun.lba_status(0, 24), vec![(0, 32, 1)]);
    // A pattern is written to every block.
    let mut block = vec![0u8; 512];
    block[0] = 9;
    block[511] = 7;
    lun.good(&ws16(0, 40, 3), 0, block.clone());
    assert_eq!(lun.read(40, 3), block.repeat(3));
    // NDOB (WRITE SAME 16 only): zeros without a Data-Out buffer.
    lun.good(&ws16(0x01, 40, 3), 0, Vec::new());
    assert_eq!(lun.read(40, 3), vec![0; 3 * 512]);
    // Zero blocks: to the end of the LUN.
    lun.write(1000, vec![3; 24 * 512]);
    lun.good(&ws10(0x08, 1000, 0), 0, vec![0; 512]);
    assert_eq!(lun.read(1000, 24), vec![0; 24 * 512]);
}

#[test]
fn write_same_errors() {
    let lun = Lun::thin_ram(1024);
    // Data-Out of anything but one block.
    for len in [256usize, 1024] {
        let r = lun.run(&ws10(0x08, 0, 1), 0, vec![0; len]);
        assert_eq!(check(&r).0, ILLEGAL);
    }
    // NDOB with data.
    let r = lun.run(&ws16(0x01, 0, 1), 0, vec![0; 512]);
    assert_eq!(check(&r), (ILLEGAL, 0x24, 0x00));
    // Past the end, and wrapping.
    let r = lun.run(&ws10(0, 1020, 5), 0, vec![0; 512]);
    assert_eq!(check(&r), (ILLEGAL, 0x21, 0x00));
    let r = lun.run(&ws16(0, u64::MAX, 1), 0, vec![0; 512]);
    assert_eq!(check(&r), (ILLEGAL, 0x21, 0x00));
    let r = lun.run(&ws16(0, 1025, 0), 0, vec![0; 512]);
    assert_eq!(check(&r), (ILLEGAL, 0x21, 0x00));
    // ANCHOR (ANC_SUP=0) and WRPROTECT are refused.
    for flags in [0x10u8, 0x18, 0x20] {
        let r = lun.run(&ws10(flags, 0, 1), 0, vec![0; 512]);
        assert_eq!(check(&r), (ILLEGAL, 0x24, 0x00));
    }
}

#[test]
fn write_same_length_limit() {
    // MAXIMUM WRITE SAME LENGTH is 65535 blocks; the LUN has 2^17.
    let lun = Lun::thin_ram(1 << 17);
    let r = lun.run(&ws16(0, 0, 0x10000), 0, vec![1; 512]);
    assert_eq!(check(&r), (ILLEGAL, 0x24, 0x00));
    let r = lun.run(&ws16(0x08, 0, 0), 0, vec![0; 512]);
    assert_eq!(check(&r), (ILLEGAL, 0x24, 0x00), "to the end is too long");
    let r = lun.run(&ws10(0, (1 << 17) - 0x10000, 0), 0, vec![0; 512]);
    assert_eq!(
        check(&r),
        (ILLEGAL, 0x24, 0x00),
        "limit + 1 blocks to the end"
    );
    lun.good(&ws16(0x08, (1 << 17) - 0xFFFF, 0), 0, vec![0; 512]);
    lun.good(&ws10(0, 0, 0xFFFF), 0, vec![1; 512]);
}

#[test]
fn file_backstore_holes_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let opts = FileOptions {
        size: Some(4096 * KIB),
        thin: true,
        ..FileOptions::default()
    };
    let store = FileBackstore::open(dir.path().join("thin.img"), &opts).unwrap();
    let lun = Lun::new(Arc::new(store), true, Some(4096));
    assert_eq!(lun.lba_status(0, 64), vec![(0, 8192, 1)]);
    lun.write(16, vec![7; 32 * 512]);
    assert_eq!(
        lun.lba_status(0, 64),
        vec![(0, 16, 1), (16, 32, 0), (48, 8144, 1)]
    );
    let list = unmap_list(&[(24, 8)]);
    lun.good(&unmap_cdb(24), 0, list);
    assert_eq!(lun.lba_status(16, 24)[0], (16, 8, 0));
    assert_eq!(lun.lba_status(24, 24)[0], (24, 8, 1));
    assert_eq!(lun.read(24, 8), vec![0; 8 * 512]);
    // Past the last LBA.
    let mut cdb = vec![0u8; 16];
    cdb[0] = 0x9E;
    cdb[1] = 0x12;
    cdb[2..10].copy_from_slice(&8192u64.to_be_bytes());
    cdb[13] = 24;
    assert_eq!(check(&lun.run(&cdb, 24, Vec::new())), (ILLEGAL, 0x21, 0x00));
}

#[test]
fn orwrite_ors_into_the_medium() {
    let lun = Lun::thick_ram(256);
    lun.write(4, vec![0xA5; 2 * 512]);
    lun.good(&cdb16(0x8B, 0x08, 4, 2), 0, vec![0x5A; 2 * 512]);
    assert_eq!(lun.read(4, 2), vec![0xFF; 2 * 512]);
    lun.good(&cdb16(0x8B, 0, 0, 0), 0, Vec::new());
    let r = lun.run(&cdb16(0x8B, 0, 255, 2), 0, vec![0; 1024]);
    assert_eq!(check(&r), (ILLEGAL, 0x21, 0x00));
    let r = lun.run(&cdb16(0x8B, 0x20, 0, 1), 0, vec![0; 512]);
    assert_eq!(check(&r), (ILLEGAL, 0x24, 0x00), "ORPROTECT");
}

#[test]
fn prefetch_checks_range_and_returns_good() {
    let lun = Lun::thick_ram(256);
    for immed in [0u8, 0x02] {
        let r = lun.run(&cdb10(0x34, immed, 0, 16), 0, Vec::new());
        assert_eq!(r.status, Status::GOOD);
        let r = lun.run(&cdb16(0x90, immed, 250, 6), 0, Vec::new());
        assert_eq!(r.status, Status::GOOD);
    }
    lun.good(&cdb10(0x34, 0, 0, 0), 0, Vec::new());
    let r = lun.run(&cdb10(0x34, 0, 257, 0), 0, Vec::new());
    assert_eq!(check(&r), (ILLEGAL, 0x21, 0x00));
    let r = lun.run(&cdb16(0x90, 0, 255, 2), 0, Vec::new());
    assert_eq!(check(&r), (ILLEGAL, 0x21, 0x00));
}

#[test]
fn read_defect_data_is_empty_in_the_requested_format() {
    let lun = Lun::thick_ram(256);
    let d = lun.good(
        &[0x37, 0, 0x18 | 0x03, 0, 0, 0, 0, 0, 32, 0],
        32,
        Vec::new(),
    );
    assert_eq!(d, vec![0, 0x1B, 0, 0]);
    let d = lun.good(
        &[0xB7, 0x10 | 0x05, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0],
        32,
        Vec::new(),
    );
    assert_eq!(d, vec![0, 0x15, 0, 0, 0, 0, 0, 0]);
    let r = lun.run(&[0x37, 0, 0x07, 0, 0, 0, 0, 0, 32, 0], 32, Vec::new());
    assert_eq!(check(&r), (ILLEGAL, 0x24, 0x00));
}

fn wa16(lba: u64, blocks: u16) -> Vec<u8> {
    let mut c = vec![0u8; 16];
    c[0] = 0x9C;
    c[2..10].copy_from_slice(&lba.to_be_bytes());
    c[12..14].copy_from_slice(&blocks.to_be_bytes());
    c
}

#[test]
fn write_atomic_limits() {
    let lun = Lun::thick_ram(1024);
    // 512-byte blocks, atomic unit 8 KiB = 16 blocks.
    lun.good(&wa16(16, 32), 0, vec![4; 32 * 512]);
    assert_eq!(lun.read(16, 32), vec![4; 32 * 512]);
    lun.good(&wa16(0, 0), 0, Vec::new());
    type Sense = (u8, u8, u8);
    let cases: [(Vec<u8>, usize, Sense); 5] = [
        (wa16(1, 16), 16, (ILLEGAL, 0x24, 0)),    // misaligned LBA
        (wa16(0, 1), 1, (ILLEGAL, 0x24, 0)),      // not a whole unit
        (wa16(1024, 16), 16, (ILLEGAL, 0x21, 0)), // past the end
        (wa16(1008, 32), 32, (ILLEGAL, 0x21, 0)), // crosses the end
        (wa16(0, 16), 8, (ILLEGAL, 0x24, 0)),     // Data-Out too short
    ];
    for (cdb, blocks, want) in cases {
        assert_eq!(
            check(&lun.run(&cdb, 0, vec![1; blocks * 512])),
            want,
            "{cdb:02x?}"
        );
    }
    let mut boundary = wa16(0, 16);
    boundary[11] = 1;
    assert_eq!(
        check(&lun.run(&boundary, 0, vec![1; 16 * 512])),
        (ILLEGAL, 0x24, 0)
    );
}

#[test]
fn write_protected_lun_refuses_every_new_write_command() {
    let store = RamBackstore::new(1 << 20, 512, true).unwrap();
    let lun = Lun::new(Arc::new(store), true, None);
    let writes: Vec<(Vec<u8>, Vec<u8>)> = vec![
        (unmap_cdb(24), unmap_list(&[(0, 1)])),
        (ws10(0, 0, 1), vec![0; 512]),
        (ws10(0x08, 0, 1), Vec::new()),
        (ws16(0, 0, 1), vec![0; 512]),
        (ws16(0x08, 0, 1), Vec::new()),
        (cdb16(0x8B, 0, 0, 1), vec![0; 512]),
        (wa16(0, 16), vec![0; 16 * 512]),
    ];
    for (cdb, data) in writes {
        assert_eq!(
            check(&lun.run(&cdb, 0, data)),
            (DATA_PROTECT, 0x27, 0x00),
            "{cdb:02x?}"
        );
    }
    // MODE SENSE(6) reports WP.
    let ms = lun.good(&[0x1A, 0x08, 0x3F, 0, 255, 0], 255, Vec::new());
    assert_eq!(ms[2] & 0x80, 0x80);
    // Reading commands still work.
    lun.good(&cdb10(0x34, 0, 0, 1), 0, Vec::new());
    assert_eq!(lun.lba_status(0, 24)[0].0, 0);
}

#[test]
fn report_supported_opcodes_lists_the_new_commands() {
    let lun = Lun::thick_ram(256);
    let mut cdb = vec![0xA3, 0x0C, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0];
    let all = lun.good(&cdb, 4096, Vec::new());
    let listed: Vec<(u8, u16)> = all[4..]
        .chunks(8)
        .map(|d| (d[0], u16::from_be_bytes([d[2], d[3]])))
        .collect();
    for want in [
        (0x34, 0),
        (0x37, 0),
        (0x41, 0),
        (0x42, 0),
        (0x89, 0),
        (0x8B, 0),
        (0x90, 0),
        (0x93, 0),
        (0x9C, 0),
        (0x9E, 0x12),
        (0xB7, 0),
    ] {
        assert!(listed.contains(&want), "{want:02x?} missing");
    }
    // One command: COMPARE AND WRITE accepts DPO and FUA.
    cdb[2] = 0x01;
    cdb[3] = 0x89;
    let one = lun.good(&cdb, 64, Vec::new());
    assert_eq!(one[1] & 0x07, 0x03, "supported");
    assert_eq!(&one[2..4], &[0, 16]);
    assert_eq!(one[5] & 0x18, 0x18);
}
