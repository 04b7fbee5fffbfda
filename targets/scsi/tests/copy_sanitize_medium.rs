//! EXTENDED COPY / RECEIVE COPY RESULTS, SANITIZE and removable media,
//! driven through a real `ScsiTarget`.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use rustgt_backstore::{Backstore, RamBackstore};
use rustgt_scsi::{LunConfig, LunRegistry, Nexus, ScsiTarget, Status, TmfFunction, TmfResponse};

const NOT_READY: u8 = 0x02;
const DATA_PROTECT: u8 = 0x07;
const COPY_ABORTED: u8 = 0x0A;

static TAGS: AtomicUsize = AtomicUsize::new(1000);

/// The NAA designator VPD page 83h reports for `naa_id`.
fn naa(naa_id: u64) -> [u8; 16] {
    let mut d = [0u8; 16];
    d[0] = 0x60;
    d[8..].copy_from_slice(&naa_id.to_be_bytes());
    d
}

fn e4(designator: &[u8; 16], block_size: u32) -> Vec<u8> {
    let mut d = vec![0u8; 32];
    d[0] = 0xE4;
    d[4] = 0x01;
    d[5] = 0x03;
    d[7] = 16;
    d[8..24].copy_from_slice(designator);
    d[28..32].copy_from_slice(&block_size.to_be_bytes());
    d
}

fn b2b(src: u16, dst: u16, blocks: u16, src_lba: u64, dst_lba: u64) -> Vec<u8> {
    let mut d = vec![0u8; 28];
    d[0] = 0x02;
    d[3] = 0x18;
    d[4..6].copy_from_slice(&src.to_be_bytes());
    d[6..8].copy_from_slice(&dst.to_be_bytes());
    d[10..12].copy_from_slice(&blocks.to_be_bytes());
    d[12..20].copy_from_slice(&src_lba.to_be_bytes());
    d[20..28].copy_from_slice(&dst_lba.to_be_bytes());
    d
}

fn param_list(list_id: u8, usage: u8, cscds: &[Vec<u8>], segs: &[Vec<u8>]) -> Vec<u8> {
    let c = cscds.concat();
    let s = segs.concat();
    let mut d = vec![0u8; 16];
    d[0] = list_id;
    d[1] = usage << 3;
    d[2..4].copy_from_slice(&(c.len() as u16).to_be_bytes());
    d[8..12].copy_from_slice(&(s.len() as u32).to_be_bytes());
    d.extend(c);
    d.extend(s);
    d
}

fn xcopy_cdb(len: usize) -> Vec<u8> {
    let mut c = vec![0u8; 16];
    c[0] = 0x83;
    c[10..14].copy_from_slice(&(len as u32).to_be_bytes());
    c
}

fn rcr_cdb(sa: u8, list_id: u8, alloc: u32) -> Vec<u8> {
    let mut c = vec![0u8; 16];
    c[0] = 0x84;
    c[1] = sa;
    c[2] = list_id;
    c[10..14].copy_from_slice(&alloc.to_be_bytes());
    c
}

fn run(
    target: &ScsiTarget,
    nexus: &Arc<Nexus>,
    lun: u64,
    cdb: &[u8],
    din: u32,
    dout: Vec<u8>,
) -> rustgt_scsi::Response {
    submit_wait(
        target,
        rustgt_scsi::Command {
            nexus: nexus.clone(),
            lun,
            tag: TAGS.fetch_add(1, Ordering::SeqCst) as u64,
            cdb: cdb.to_vec().into(),
            attr: rustgt_scsi::TaskAttr::Simple,
            data_in_len: din,
            data_out: dout.into(),
        },
    )
}

fn write_blocks(h: &Harness, lba: u32, data: Vec<u8>) {
    let blocks = (data.len() / BS as usize) as u16;
    let r = h.run(&cdb10(0x2A, 0, lba, blocks), 0, data);
    assert_eq!(r.status, Status::GOOD);
}

fn read_blocks(h: &Harness, lba: u32, blocks: u16) -> Vec<u8> {
    let r = h.run(&cdb10(0x28, 0, lba, blocks), u32::from(blocks) * BS, vec![]);
    assert_eq!(r.status, Status::GOOD);
    r.data_in.into_vec()
}

#[test]
fn extended_copy_within_one_lun_and_copy_status() {
    let h = Harness::new();
    let data: Vec<u8> = (0..8 * BS as usize).map(|i| (i % 251) as u8).collect();
    write_blocks(&h, 0, data.clone());
    let list = param_list(1, 0, &[e4(&naa(0xABCD), BS)], &[b2b(0, 0, 8, 0, 40)]);
    // No status before the copy.
    let r = h.run(&rcr_cdb(0x00, 1, 64), 64, vec![]);
    assert_eq!(sense_of(&r), (ILLEGAL, 0x24, 0x00));
    let r = h.run(&xcopy_cdb(list.len()), 0, list);
    assert_eq!(r.status, Status::GOOD, "{r:?}");
    assert_eq!(read_blocks(&h, 40, 8), data);
    // COPY STATUS: completed, one segment, 4096 bytes; reported once.
    let r = h.run(&rcr_cdb(0x00, 1, 64), 64, vec![]);
    assert_eq!(r.data_in, vec![0, 0, 0, 8, 0x01, 0, 1, 0, 0, 0, 0x10, 0]);
    let r = h.run(&rcr_cdb(0x00, 1, 64), 64, vec![]);
    assert_eq!(sense_of(&r), (ILLEGAL, 0x24, 0x00));
    // A zero parameter list length copies nothing.
    assert_eq!(h.run(&xcopy_cdb(0), 0, vec![]).status, Status::GOOD);
}

#[test]
fn operating_parameters_and_third_party_copy_vpd() {
    let h = Harness::new();
    let r = h.run(&rcr_cdb(0x03, 0, 1024), 1024, vec![]);
    assert_eq!(r.status, Status::GOOD);
    let d = &r.data_in;
    assert_eq!(
        u32::from_be_bytes([d[0], d[1], d[2], d[3]]) as usize,
        d.len() - 4
    );
    let max_cscd = u16::from_be_bytes([d[8], d[9]]);
    let max_seg = u16::from_be_bytes([d[10], d[11]]);
    assert!(max_cscd >= 2 && max_seg >= 1);
    assert_eq!(&d[44..], &[0x02, 0xE4]);
    // INQUIRY: 3PC set, VPD 8Fh listed and well formed.
    let r = h.run(&[0x12, 0, 0, 0, 96, 0], 96, vec![]);
    assert_eq!(r.data_in[5] & 0x08, 0x08);
    let r = h.run(&[0x12, 1, 0x8F, 4, 0, 0], 1024, vec![]);
    assert_eq!(r.status, Status::GOOD);
    let len = usize::from(u16::from_be_bytes([r.data_in[2], r.data_in[3]]));
    assert_eq!(len + 4, r.data_in.len());
    assert_eq!(&r.data_in[4..6], &[0x00, 0x01]);
}

#[test]
fn extended_copy_errors() {
    let h = Harness::new();
    let cscd = e4(&naa(0xABCD), BS);
    let check = |list: Vec<u8>, want: (u8, u8, u8)| {
        let r = h.run(&xcopy_cdb(list.len()), 0, list);
        assert_eq!(sense_of(&r), want);
    };
    // Beyond the end of the destination.
    check(
        param_list(
            1,
            0,
            std::slice::from_ref(&cscd),
            &[b2b(0, 0, 8, 0, BLOCKS - 1)],
        ),
        (COPY_ABORTED, 0x00, 0x00),
    );
    // Destination descriptor index past the list.
    check(
        param_list(1, 0, std::slice::from_ref(&cscd), &[b2b(0, 1, 8, 0, 0)]),
        (COPY_ABORTED, 0x08, 0x04),
    );
    // Unknown designator.
    check(
        param_list(1, 2, &[e4(&naa(0x9999), BS)], &[b2b(0, 0, 1, 0, 1)]),
        (COPY_ABORTED, 0x0D, 0x02),
    );
    // Truncated list.
    let list = param_list(1, 0, std::slice::from_ref(&cscd), &[b2b(0, 0, 1, 0, 1)]);
    let r = h.run(&xcopy_cdb(47), 0, list[..47].to_vec());
    assert_eq!(sense_of(&r), (ILLEGAL, 0x1A, 0x00));
    // Stream-to-stream segments are not supported.
    let mut s2s = vec![0u8; 20];
    s2s[0] = 0x03;
    s2s[3] = 16;
    check(param_list(1, 0, &[cscd], &[s2s]), (ILLEGAL, 0x26, 0x09));
}

#[test]
fn extended_copy_across_targets_through_a_shared_registry() {
    let registry = LunRegistry::new();
    let stores: Vec<Arc<MockStore>> = (0..2).map(|_| MockStore::new(BLOCKS, BS, false)).collect();
    let targets: Vec<Arc<ScsiTarget>> = (0..2)
        .map(|i| {
            let t = ScsiTarget::with_registry(&format!("t{i}"), registry.clone());
            let mut cfg = LunConfig::new(stores[i].clone());
            cfg.naa_id = 0x100 + i as u64;
            t.add_lun(0, cfg).expect("lun");
            t
        })
        .collect();
    assert_eq!(registry.len(), 2);
    stores[0].data.lock().unwrap()[..512].fill(0x5A);
    let n = nexus(7);
    let list = param_list(
        0,
        3,
        &[e4(&naa(0x100), BS), e4(&naa(0x101), BS)],
        &[b2b(0, 1, 1, 0, 3)],
    );
    let r = run(&targets[0], &n, 0, &xcopy_cdb(list.len()), 0, list.clone());
    assert_eq!(r.status, Status::GOOD, "{r:?}");
    assert!(stores[1].data.lock().unwrap()[3 * 512..4 * 512]
        .iter()
        .all(|&b| b == 0x5A));
    // A target outside the registry cannot reach the other LUN.
    let lone = ScsiTarget::new("lone");
    let mut cfg = LunConfig::new(MockStore::new(BLOCKS, BS, false));
    cfg.naa_id = 0x100;
    lone.add_lun(0, cfg).expect("lun");
    let r = run(&lone, &n, 0, &xcopy_cdb(list.len()), 0, list);
    assert_eq!(sense_of(&r), (COPY_ABORTED, 0x0D, 0x02));
    // A removed LUN leaves the registry.
    targets[1].remove_lun(0).expect("remove");
    assert_eq!(registry.len(), 1);
}

#[test]
fn overlapping_copy_moves_like_memmove() {
    let size = 12u64 << 20;
    let store: Arc<dyn Backstore> = Arc::new(RamBackstore::new(size, 512, false).expect("ram"));
    let pattern: Vec<u8> = (0..size as usize).map(|i| (i / 512 % 253) as u8).collect();
    store.write_at(&pattern, 0, false).expect("fill");
    let target = ScsiTarget::new("overlap");
    let mut cfg = LunConfig::new(store.clone());
    cfg.naa_id = 42;
    target.add_lun(0, cfg).expect("lun");
    // 10 MiB from LBA 0 to 1 MiB further: two chunks, overlapping.
    let blocks = (10u64 << 20) / 512;
    let list = param_list(
        0,
        3,
        &[e4(&naa(42), 512)],
        &[b2b(0, 0, blocks as u16, 0, 2048)],
    );
    let r = run(&target, &nexus(1), 0, &xcopy_cdb(list.len()), 0, list);
    assert_eq!(r.status, Status::GOOD, "{r:?}");
    let mut out = vec![0u8; (10 << 20) as usize];
    store.read_at(&mut out, 1 << 20).expect("read");
    assert!(
        out == pattern[..10 << 20],
        "overlapping copy corrupted the data"
    );
}

#[test]
fn removable_medium_eject_load_and_prevention() {
    let store = MockStore::new(BLOCKS, BS, false);
    let target = ScsiTarget::new("rm");
    let mut cfg = LunConfig::new(store);
    cfg.removable = true;
    target.add_lun(0, cfg).expect("lun");
    let (a, b) = (nexus(1), nexus(2));
    let sense = |n: &Arc<Nexus>, cdb: &[u8]| {
        let r = run(&target, n, 0, cdb, 512, vec![]);
        if r.status == Status::GOOD {
            None
        } else {
            Some(sense_of(&r))
        }
    };
    let eject = [0x1B, 0, 0, 0, 0x02, 0];
    let load = [0x1B, 0, 0, 0, 0x03, 0];
    let tur = [0u8; 6];
    let r = run(&target, &a, 0, &[0x12, 0, 0, 0, 36, 0], 36, vec![]);
    assert_eq!(r.data_in[1], 0x80, "RMB");
    assert_eq!(sense(&a, &eject), None);
    assert_eq!(sense(&a, &tur), Some((NOT_READY, 0x3A, 0x02)));
    assert_eq!(
        sense(&b, &cdb10(0x28, 0, 0, 1)),
        Some((NOT_READY, 0x3A, 0x02))
    );
    assert_eq!(
        sense(&a, &[0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
        Some((NOT_READY, 0x3A, 0x02))
    );
    assert_eq!(sense(&a, &[0x12, 0, 0, 0, 36, 0]), None);
    // REQUEST SENSE explains the condition.
    let r = run(&target, &a, 0, &[0x03, 0, 0, 0, 18, 0], 18, vec![]);
    assert_eq!(
        (r.data_in[2], r.data_in[12], r.data_in[13]),
        (NOT_READY, 0x3A, 0x02)
    );
    // Prevention by one nexus blocks eject and load for every nexus.
    assert_eq!(sense(&a, &[0x1E, 0, 0, 0, 1, 0]), None);
    assert_eq!(sense(&b, &load), Some((ILLEGAL, 0x53, 0x02)));
    // Its loss ends it.
    target.nexus_lost(&a);
    assert_eq!(sense(&b, &load), None);
    assert_eq!(sense(&b, &tur), None);
    // A LUN reset ends a prevention too.
    assert_eq!(sense(&b, &[0x1E, 0, 0, 0, 1, 0]), None);
    assert_eq!(sense(&b, &eject), Some((ILLEGAL, 0x53, 0x02)));
    assert_eq!(
        target.task_management(&b, 0, TmfFunction::LogicalUnitReset),
        TmfResponse::FunctionComplete
    );
    let _ = sense(&b, &tur); // the reset's unit attention
    assert_eq!(sense(&b, &eject), None);
    assert_eq!(sense(&b, &load), None);
    // Power conditions never eject; changer PREVENT values are refused.
    assert_eq!(sense(&b, &[0x1B, 1, 0, 0, 0x52, 0]), None);
    assert_eq!(sense(&b, &tur), None);
    assert_eq!(
        sense(&b, &[0x1E, 0, 0, 0, 2, 0]),
        Some((ILLEGAL, 0x24, 0x00))
    );
}

fn overwrite_params(pattern: &[u8], count: u8) -> Vec<u8> {
    let mut d = vec![count, 0];
    d.extend_from_slice(&(pattern.len() as u16).to_be_bytes());
    d.extend_from_slice(pattern);
    d
}

fn sanitize_cdb(sa: u8, immed: bool, param_len: u16) -> Vec<u8> {
    let mut c = vec![0u8; 10];
    c[0] = 0x48;
    c[1] = sa | if immed { 0x80 } else { 0 };
    c[7..9].copy_from_slice(&param_len.to_be_bytes());
    c
}

#[test]
fn sanitize_overwrite_and_parameter_checks() {
    let h = Harness::new();
    let params = overwrite_params(&[0xAA, 0x55], 1);
    let r = h.run(&sanitize_cdb(0x01, false, params.len() as u16), 0, params);
    assert_eq!(r.status, Status::GOOD, "{r:?}");
    let data = h.store.data.lock().unwrap().clone();
    assert!(data.chunks(2).all(|c| c == [0xAA, 0x55]));
    // Parameter list length outside 5..=block size + 4.
    for len in [0u16, 4, BS as u16 + 5] {
        let r = h.run(&sanitize_cdb(0x01, false, len), 0, vec![1; len as usize]);
        assert_eq!(sense_of(&r), (ILLEGAL, 0x24, 0x00), "length {len}");
    }
    // OVERWRITE COUNT zero.
    let r = h.run(&sanitize_cdb(0x01, false, 5), 0, overwrite_params(&[1], 0));
    assert_eq!(sense_of(&r), (ILLEGAL, 0x26, 0x00));
    // Block and crypto erase are not offered on a fully provisioned LUN.
    assert_eq!(
        sense_of(&h.run(&sanitize_cdb(0x02, false, 0), 0, vec![])),
        (ILLEGAL, 0x24, 0x00)
    );
    // Unknown service action; EXIT FAILURE MODE outside failure mode.
    assert_eq!(
        sense_of(&h.run(&sanitize_cdb(0x05, false, 0), 0, vec![])),
        (ILLEGAL, 0x24, 0x00)
    );
    assert_eq!(
        h.run(&sanitize_cdb(0x1F, false, 0), 0, vec![]).status,
        Status::GOOD
    );
    // RSOC lists OVERWRITE and EXIT FAILURE MODE only.
    let rsoc = |sa: u16| {
        let mut c = vec![0xA3, 0x0C, 0x02, 0x48, 0, 0, 0, 0, 0x01, 0, 0, 0];
        c[4..6].copy_from_slice(&sa.to_be_bytes());
        h.run(&c, 256, vec![]).data_in[1] & 0x07
    };
    assert_eq!((rsoc(1), rsoc(2), rsoc(3), rsoc(0x1F)), (3, 1, 1, 3));
}

#[test]
fn sanitize_read_only_is_data_protect() {
    let h = Harness::with(BLOCKS, BS, true, 2);
    let params = overwrite_params(&[0], 1);
    let r = h.run(&sanitize_cdb(0x01, false, 5), 0, params);
    assert_eq!(sense_of(&r), (DATA_PROTECT, 0x27, 0x00));
}

#[test]
fn sanitize_in_progress_refuses_commands_and_survives_abort() {
    let h = Harness::with(BLOCKS, BS, false, 4);
    h.store.close_gate();
    let params = overwrite_params(&[0xEE], 1);
    let cmd = h.cmd(&sanitize_cdb(0x01, false, 5), 0, params);
    let tag = cmd.tag;
    let pending = submit(&h.target, cmd);
    h.store.wait_blocked(1);
    let tur = h.run(&[0u8; 6], 0, vec![]);
    assert_eq!(sense_of(&tur), (NOT_READY, 0x04, 0x1B));
    assert_eq!(tur.sense[15] & 0x80, 0x80, "progress indication");
    assert_eq!(
        sense_of(&h.run(&cdb10(0x28, 0, 0, 1), 512, vec![])),
        (NOT_READY, 0x04, 0x1B)
    );
    assert_eq!(
        h.run(&[0x12, 0, 0, 0, 36, 0], 36, vec![]).status,
        Status::GOOD
    );
    let rs = h.run(&[0x03, 0, 0, 0, 18, 0], 18, vec![]);
    assert_eq!(
        (rs.data_in[2], rs.data_in[12], rs.data_in[13]),
        (NOT_READY, 0x04, 0x1B)
    );
    // ABORT TASK returns without waiting for the operation, which goes on.
    let began = Instant::now();
    assert_eq!(
        h.target
            .task_management(&h.nexus, 0, TmfFunction::AbortTask { tag }),
        TmfResponse::FunctionComplete
    );
    assert!(began.elapsed() < Duration::from_secs(5));
    assert!(
        pending
            .recv_timeout(Duration::from_secs(5))
            .expect("completion")
            .aborted
    );
    assert_eq!(
        sense_of(&h.run(&[0u8; 6], 0, vec![])),
        (NOT_READY, 0x04, 0x1B)
    );
    h.store.open_gate();
    let deadline = Instant::now() + Duration::from_secs(10);
    while h.run(&[0u8; 6], 0, vec![]).status != Status::GOOD {
        assert!(Instant::now() < deadline, "sanitize never finished");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(h.store.data.lock().unwrap().iter().all(|&b| b == 0xEE));
}

#[test]
fn sanitize_immed_returns_at_once_and_is_paced() {
    let store = MockStore::new(BLOCKS, BS, false);
    let target = ScsiTarget::new("paced");
    let mut cfg = LunConfig::new(store.clone());
    // 32 KiB at 64 KiB/s: about half a second.
    cfg.sanitize_rate = Some(64 << 10);
    target.add_lun(0, cfg).expect("lun");
    let n = nexus(1);
    let began = Instant::now();
    let r = run(
        &target,
        &n,
        0,
        &sanitize_cdb(0x01, true, 5),
        0,
        overwrite_params(&[7], 1),
    );
    assert_eq!(r.status, Status::GOOD);
    assert!(began.elapsed() < Duration::from_millis(400));
    loop {
        let r = run(&target, &n, 0, &[0u8; 6], 0, vec![]);
        if r.status == Status::GOOD {
            break;
        }
        assert_eq!(sense_of(&r), (NOT_READY, 0x04, 0x1B));
        assert!(began.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(began.elapsed() >= Duration::from_millis(450), "not paced");
    assert!(store.data.lock().unwrap().iter().all(|&b| b == 7));
}

#[test]
fn sanitize_block_erase_on_a_thin_lun_deallocates() {
    let ram = Arc::new(RamBackstore::new(4 << 20, 512, false).expect("ram"));
    ram.write_at(&vec![0x61; 1 << 20], 0, false).expect("fill");
    let target = ScsiTarget::new("thin");
    let mut cfg = LunConfig::new(ram.clone());
    cfg.thin = true;
    target.add_lun(0, cfg).expect("lun");
    let n = nexus(1);
    // VPD B1h: WABEREQ = WACEREQ = 01b.
    let r = run(&target, &n, 0, &[0x12, 1, 0xB1, 0, 64, 0], 64, vec![]);
    assert_eq!(r.data_in[7], 0x50);
    for sa in [0x02, 0x03] {
        ram.write_at(&vec![0x61; 1 << 20], 0, false).expect("fill");
        let r = run(&target, &n, 0, &sanitize_cdb(sa, false, 0), 0, vec![]);
        assert_eq!(r.status, Status::GOOD, "{r:?}");
        assert_eq!(ram.allocated_bytes(), 0, "service action {sa:#x}");
        let r = run(&target, &n, 0, &cdb10(0x28, 0, 0, 8), 4096, vec![]);
        assert!(r.data_in.iter().all(|&b| b == 0));
    }
    // A parameter list is refused for the erases.
    let r = run(&target, &n, 0, &sanitize_cdb(0x02, false, 8), 0, vec![0; 8]);
    assert_eq!(sense_of(&r), (ILLEGAL, 0x24, 0x00));
}
