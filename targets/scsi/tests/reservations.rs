//! Reservations through a real `ScsiTarget`: persistent reservations
//! (registration, conflicts per type, unit attentions, PREEMPT AND ABORT,
//! APTPL surviving a re-created LUN), SPC-2 RESERVE/RELEASE and their
//! interplay, and ALUA reporting.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use rustgt_scsi::{LunConfig, Nexus, Response, ScsiTarget, Status, TmfFunction};

const RESERVATION_CONFLICT: u8 = 0x18;

fn nexus_on(id: u64, rel: u16) -> Arc<Nexus> {
    Arc::new(Nexus {
        id,
        initiator_port: format!("iqn.2026-01.test:init{id},i,0x00023d00000{id}"),
        target_port: format!("iqn.2026-11.org.rustgt:test,t,0x{rel:04x}"),
        relative_port_id: rel,
        port_group: rel,
        lun_map: None,
    })
}

fn pr_out(sa: u8, pr_type: u8, rk: u64, sark: u64, flags: u8) -> (Vec<u8>, Vec<u8>) {
    let cdb = vec![0x5F, sa, pr_type, 0, 0, 0, 0, 0, 24, 0];
    let mut data = vec![0u8; 24];
    data[..8].copy_from_slice(&rk.to_be_bytes());
    data[8..16].copy_from_slice(&sark.to_be_bytes());
    data[20] = flags;
    (cdb, data)
}

struct Lun {
    h: Harness,
}

impl Lun {
    fn new() -> Lun {
        Lun { h: Harness::new() }
    }

    fn out(&self, n: &Arc<Nexus>, sa: u8, ty: u8, rk: u64, sark: u64, flags: u8) -> Response {
        let (cdb, data) = pr_out(sa, ty, rk, sark, flags);
        self.h.exec(self.h.cmd_on(n, 0, &cdb, 0, data))
    }

    fn register(&self, n: &Arc<Nexus>, key: u64) {
        let r = self.out(n, 0x06, 0, 0, key, 0);
        assert_eq!(r.status, Status::GOOD, "{r:?}");
    }

    fn reserve(&self, n: &Arc<Nexus>, key: u64, ty: u8) -> Response {
        self.out(n, 0x01, ty, key, 0, 0)
    }

    fn pr_in(&self, n: &Arc<Nexus>, sa: u8) -> Response {
        self.h.exec(self.h.cmd_on(
            n,
            0,
            &[0x5E, sa, 0, 0, 0, 0, 0, 0x10, 0, 0],
            4096,
            Vec::new(),
        ))
    }

    fn read(&self, n: &Arc<Nexus>) -> Response {
        self.h
            .exec(self.h.cmd_on(n, 0, &cdb10(0x28, 0, 1, 1), 512, Vec::new()))
    }

    fn write(&self, n: &Arc<Nexus>) -> Response {
        self.h.exec(
            self.h
                .cmd_on(n, 0, &cdb10(0x2A, 0, 1, 1), 0, vec![0xAB; 512]),
        )
    }

    fn tur(&self, n: &Arc<Nexus>) -> Response {
        self.h.run_on(n, 0, &[0, 0, 0, 0, 0, 0], 0)
    }
}

fn keys(r: &Response) -> (u32, Vec<u64>) {
    let gen = u32::from_be_bytes(r.data_in[..4].try_into().unwrap());
    let len = u32::from_be_bytes(r.data_in[4..8].try_into().unwrap()) as usize;
    let keys = r.data_in[8..8 + len]
        .chunks(8)
        .map(|c| u64::from_be_bytes(c.try_into().unwrap()))
        .collect();
    (gen, keys)
}

fn conflict(r: &Response) -> bool {
    r.status == Status(RESERVATION_CONFLICT) && r.sense.is_empty() && r.data_in.is_empty()
}

#[test]
fn access_per_reservation_type() {
    // (type, registered other: read, write; unregistered other: read, write)
    let cases = [
        (0x1, (true, false), (true, false)),
        (0x3, (false, false), (false, false)),
        (0x5, (true, true), (true, false)),
        (0x6, (true, true), (false, false)),
        (0x7, (true, true), (true, false)),
        (0x8, (true, true), (false, false)),
    ];
    for (ty, reg, unreg) in cases {
        let lun = Lun::new();
        let (a, b, c) = (nexus_on(1, 1), nexus_on(2, 1), nexus_on(3, 1));
        lun.register(&a, 0xA);
        lun.register(&b, 0xB);
        assert_eq!(lun.reserve(&a, 0xA, ty).status, Status::GOOD);
        assert_eq!(lun.read(&a).status, Status::GOOD);
        assert_eq!(lun.write(&a).status, Status::GOOD);
        let ok = |r: Response| {
            assert!(r.status == Status::GOOD || conflict(&r), "{r:?}");
            r.status == Status::GOOD
        };
        assert_eq!(
            (ok(lun.read(&b)), ok(lun.write(&b))),
            reg,
            "type {ty} registered"
        );
        assert_eq!(
            (ok(lun.read(&c)), ok(lun.write(&c))),
            unreg,
            "type {ty} unregistered"
        );
        // Never blocked: INQUIRY, TEST UNIT READY, READ CAPACITY, PR IN.
        assert_eq!(lun.tur(&c).status, Status::GOOD);
        assert_eq!(
            lun.h.run_on(&c, 0, &[0x12, 0, 0, 0, 96, 0], 96).status,
            Status::GOOD
        );
        assert_eq!(
            lun.h.run_on(&c, 0, &cdb10(0x25, 0, 0, 0), 8).status,
            Status::GOOD
        );
        assert_eq!(lun.pr_in(&c, 0x01).status, Status::GOOD);
        // An unregistered nexus cannot reserve, release or clear.
        assert!(conflict(&lun.reserve(&c, 0, ty)));
        assert!(conflict(&lun.out(&c, 0x03, 0, 0, 0, 0)));
    }
}

#[test]
fn read_keys_reservation_and_generation() {
    let lun = Lun::new();
    let (a, b) = (nexus_on(1, 1), nexus_on(2, 1));
    assert_eq!(keys(&lun.pr_in(&a, 0x00)), (0, vec![]));
    lun.register(&a, 0x1111);
    lun.register(&b, 0x2222);
    // Re-registering with the wrong key conflicts (libiscsi ProutRegister).
    assert!(conflict(&lun.out(&a, 0x00, 0, 0, 0x3333, 0)));
    assert_eq!(keys(&lun.pr_in(&a, 0x00)), (2, vec![0x1111, 0x2222]));
    assert_eq!(lun.reserve(&b, 0x2222, 0x3).status, Status::GOOD);
    let rr = lun.pr_in(&a, 0x01);
    assert_eq!(&rr.data_in[..8], &[0, 0, 0, 2, 0, 0, 0, 16]);
    assert_eq!(&rr.data_in[8..16], &0x2222u64.to_be_bytes());
    assert_eq!(rr.data_in[21], 0x03);
    // Allocation length 8: the header only, ADDITIONAL LENGTH unchanged.
    let short =
        lun.h.exec(
            lun.h
                .cmd_on(&a, 0, &[0x5E, 0, 0, 0, 0, 0, 0, 0, 8, 0], 4096, Vec::new()),
        );
    assert_eq!(short.data_in, vec![0, 0, 0, 2, 0, 0, 0, 16]);
    // Unknown service action.
    let bad = lun
        .h
        .run_on(&a, 0, &[0x5E, 0x04, 0, 0, 0, 0, 0, 0x10, 0, 0], 4096);
    assert_eq!(sense_of(&bad), (ILLEGAL, 0x24, 0x00));
    // REPORT CAPABILITIES without a state file: PTPL_C=0.
    let caps = lun.pr_in(&a, 0x02);
    assert_eq!(caps.data_in, vec![0, 8, 0x10, 0xB0, 0xEA, 0x01, 0, 0]);
    // APTPL=1 cannot be honoured.
    let r = lun.out(&a, 0x00, 0, 0x1111, 0x1111, 0x01);
    assert_eq!(sense_of(&r), (ILLEGAL, 0x26, 0x00));
    // CLEAR: one generation step, everything gone, the other told.
    assert_eq!(lun.out(&a, 0x03, 0, 0x1111, 0, 0).status, Status::GOOD);
    assert_eq!(keys(&lun.pr_in(&a, 0x00)), (3, vec![]));
    assert_eq!(lun.pr_in(&a, 0x01).data_in, vec![0, 0, 0, 3, 0, 0, 0, 0]);
    let ua = lun.tur(&b);
    assert_eq!(sense_of(&ua), (UNIT_ATTENTION, 0x2A, 0x03));
}

#[test]
fn preempt_removes_registrations_and_raises_unit_attention() {
    let lun = Lun::new();
    let (a, b) = (nexus_on(1, 1), nexus_on(2, 1));
    lun.register(&a, 0x77);
    lun.register(&b, 0x77);
    assert_eq!(lun.reserve(&a, 0x77, 0x1).status, Status::GOOD);
    // b preempts the holder's key: a loses registration and reservation.
    assert_eq!(lun.out(&b, 0x04, 0x3, 0x77, 0x77, 0).status, Status::GOOD);
    let ua = lun.tur(&a);
    assert_eq!(sense_of(&ua), (UNIT_ATTENTION, 0x2A, 0x05));
    assert_eq!(keys(&lun.pr_in(&b, 0x00)), (3, vec![0x77]));
    let rr = lun.pr_in(&a, 0x01);
    assert_eq!(rr.data_in[21], 0x03);
    assert!(conflict(&lun.read(&a)));
    // READ FULL STATUS: one descriptor, the holder, with its TransportID.
    let fs = lun.pr_in(&a, 0x03);
    assert_eq!(fs.data_in[8 + 12], 0x01);
    assert_eq!(fs.data_in[8 + 13], 0x03);
    assert_eq!(fs.data_in[8 + 24], 0x45);
    let name = &fs.data_in[8 + 28..];
    assert!(name.starts_with(b.initiator_port.as_bytes()));
}

#[test]
fn preempt_and_abort_aborts_the_preempted_tasks() {
    let lun = Lun::new();
    let (a, b) = (nexus_on(1, 1), nexus_on(2, 1));
    lun.register(&a, 0xA);
    lun.register(&b, 0xB);
    // Write exclusive: b may still read, and does.
    assert_eq!(lun.reserve(&a, 0xA, 0x1).status, Status::GOOD);
    lun.h.store.close_gate();
    let read = submit(
        &lun.h.target,
        lun.h.cmd_on(&b, 0, &cdb10(0x28, 0, 0, 1), 512, Vec::new()),
    );
    lun.h.store.wait_blocked(1);
    let (cdb, data) = pr_out(0x05, 0x1, 0xA, 0xB, 0);
    let preempt = submit(&lun.h.target, lun.h.cmd_on(&a, 0, &cdb, 0, data));
    std::thread::sleep(Duration::from_millis(100));
    lun.h.store.open_gate();
    let read = read.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(read.aborted, "{read:?}");
    let preempt = preempt.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(preempt.status, Status::GOOD);
    assert_eq!(sense_of(&lun.tur(&b)), (UNIT_ATTENTION, 0x2A, 0x05));
    assert!(conflict(&lun.write(&b)));
}

#[test]
fn unregistering_a_registrants_only_holder_releases() {
    let lun = Lun::new();
    let (a, b) = (nexus_on(1, 1), nexus_on(2, 1));
    lun.register(&a, 0xA);
    lun.register(&b, 0xB);
    assert_eq!(lun.reserve(&a, 0xA, 0x6).status, Status::GOOD);
    assert_eq!(lun.out(&a, 0x00, 0, 0xA, 0, 0).status, Status::GOOD);
    assert_eq!(sense_of(&lun.tur(&b)), (UNIT_ATTENTION, 0x2A, 0x04));
    assert_eq!(lun.pr_in(&b, 0x01).data_in[4..8], [0, 0, 0, 0]);
}

#[test]
fn reserve6_between_two_initiators() {
    let lun = Lun::new();
    let (a, b) = (nexus_on(1, 1), nexus_on(2, 1));
    let reserve6 = [0x16, 0, 0, 0, 0, 0];
    let release6 = [0x17, 0, 0, 0, 0, 0];
    assert_eq!(lun.h.run_on(&a, 0, &reserve6, 0).status, Status::GOOD);
    assert_eq!(lun.h.run_on(&a, 0, &reserve6, 0).status, Status::GOOD);
    assert!(conflict(&lun.h.run_on(&b, 0, &reserve6, 0)));
    // Someone else's RELEASE is a no-op with GOOD status.
    assert_eq!(lun.h.run_on(&b, 0, &release6, 0).status, Status::GOOD);
    assert!(conflict(&lun.tur(&b)));
    assert!(conflict(&lun.h.run_on(
        &b,
        0,
        &[0x1A, 0, 0x3F, 0, 0xFF, 0],
        255
    )));
    assert!(conflict(&lun.pr_in(&b, 0x00)));
    assert!(
        conflict(&lun.pr_in(&a, 0x00)),
        "PR IN conflicts for the holder too"
    );
    assert_eq!(
        lun.h.run_on(&b, 0, &[0x12, 0, 0, 0, 96, 0], 96).status,
        Status::GOOD
    );
    assert_eq!(lun.tur(&a).status, Status::GOOD);
    assert_eq!(lun.h.run_on(&a, 0, &release6, 0).status, Status::GOOD);
    let reserve10 = [0x56, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    assert_eq!(lun.h.run_on(&b, 0, &reserve10, 0).status, Status::GOOD);
    // Third-party reservations are not supported.
    let third = lun
        .h
        .run_on(&b, 0, &[0x56, 0x10, 0, 5, 0, 0, 0, 0, 0, 0], 0);
    assert_eq!(sense_of(&third), (ILLEGAL, 0x24, 0x00));
    // Nexus loss releases it.
    lun.h.target.nexus_lost(&b);
    assert_eq!(lun.h.run_on(&a, 0, &reserve6, 0).status, Status::GOOD);
    // So does a logical unit reset.
    assert_eq!(
        lun.h
            .target
            .task_management(&a, 0, TmfFunction::LogicalUnitReset),
        rustgt_scsi::TmfResponse::FunctionComplete
    );
    let b2 = nexus_on(4, 1);
    assert_eq!(lun.h.run_on(&b2, 0, &reserve6, 0).status, Status::GOOD);
}

#[test]
fn reserve6_versus_persistent_reservations() {
    let lun = Lun::new();
    let (a, b) = (nexus_on(1, 1), nexus_on(2, 1));
    let reserve6 = [0x16, 0, 0, 0, 0, 0];
    let release6 = [0x17, 0, 0, 0, 0, 0];
    lun.register(&a, 0xA);
    // Registrations exist: RESERVE/RELEASE conflict for non-holders.
    assert!(conflict(&lun.h.run_on(&a, 0, &reserve6, 0)));
    assert!(conflict(&lun.h.run_on(&b, 0, &release6, 0)));
    assert_eq!(lun.reserve(&a, 0xA, 0x1).status, Status::GOOD);
    // The holder's RESERVE completes with GOOD and changes nothing.
    assert_eq!(lun.h.run_on(&a, 0, &reserve6, 0).status, Status::GOOD);
    assert_eq!(lun.read(&b).status, Status::GOOD);
    assert!(conflict(&lun.write(&b)));
}

fn target_with_state(path: &Path, store: &Arc<MockStore>) -> Arc<ScsiTarget> {
    let target = ScsiTarget::new("aptpl");
    let mut cfg = LunConfig::new(store.clone());
    cfg.workers = 2;
    cfg.pr_state_path = Some(path.to_path_buf());
    target.add_lun(0, cfg).unwrap();
    target
}

fn run(
    target: &ScsiTarget,
    n: &Arc<Nexus>,
    cdb: &[u8],
    data_in_len: u32,
    data_out: Vec<u8>,
) -> Response {
    submit_wait(
        target,
        rustgt_scsi::Command {
            nexus: n.clone(),
            lun: 0,
            tag: 1,
            cdb: cdb.to_vec().into(),
            attr: rustgt_scsi::TaskAttr::Simple,
            data_in_len,
            data_out: data_out.into(),
        },
    )
}

#[test]
fn aptpl_state_survives_recreating_the_lun() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pr").join("iqn.test-0.toml");
    let store = MockStore::new(BLOCKS, BS, false);
    let (a, b) = (nexus_on(1, 1), nexus_on(2, 1));
    {
        let t = target_with_state(&path, &store);
        let caps = run(&t, &a, &[0x5E, 0x02, 0, 0, 0, 0, 0, 0, 8, 0], 8, Vec::new());
        assert_eq!(caps.data_in[2] & 0x01, 0x01, "PTPL_C");
        let (cdb, data) = pr_out(0x06, 0, 0, 0xFEED_FACE_CAFE_BEEF, 0x01);
        assert_eq!(run(&t, &a, &cdb, 0, data).status, Status::GOOD);
        let (cdb, data) = pr_out(0x06, 0, 0, 0x22, 0x01);
        assert_eq!(run(&t, &b, &cdb, 0, data).status, Status::GOOD);
        let (cdb, data) = pr_out(0x01, 0x3, 0xFEED_FACE_CAFE_BEEF, 0, 0);
        assert_eq!(run(&t, &a, &cdb, 0, data).status, Status::GOOD);
        assert!(path.exists());
        t.shutdown();
    }
    // "Daemon restart": a new target and LUN from the same state file.
    let t = target_with_state(&path, &store);
    let rk = run(
        &t,
        &b,
        &[0x5E, 0x00, 0, 0, 0, 0, 0, 0x10, 0, 0],
        4096,
        Vec::new(),
    );
    assert_eq!(
        keys(&rk),
        (0, vec![0xFEED_FACE_CAFE_BEEF, 0x22]),
        "generation restarts at 0"
    );
    let rr = run(
        &t,
        &b,
        &[0x5E, 0x01, 0, 0, 0, 0, 0, 0x10, 0, 0],
        4096,
        Vec::new(),
    );
    assert_eq!(&rr.data_in[8..16], &0xFEED_FACE_CAFE_BEEFu64.to_be_bytes());
    assert_eq!(rr.data_in[21], 0x03);
    let caps = run(&t, &a, &[0x5E, 0x02, 0, 0, 0, 0, 0, 0, 8, 0], 8, Vec::new());
    assert_eq!(caps.data_in[3] & 0x01, 0x01, "PTPL_A");
    // The reservation is enforced again; the holder still has access.
    assert!(conflict(&run(
        &t,
        &b,
        &cdb10(0x28, 0, 0, 1),
        512,
        Vec::new()
    )));
    assert_eq!(
        run(&t, &a, &cdb10(0x28, 0, 0, 1), 512, Vec::new()).status,
        Status::GOOD
    );
    // APTPL=0 on the next REGISTER discards the file.
    let (cdb, data) = pr_out(0x00, 0, 0x22, 0x23, 0);
    assert_eq!(run(&t, &b, &cdb, 0, data).status, Status::GOOD);
    assert!(!path.exists());
    t.shutdown();
    let t = target_with_state(&path, &store);
    let rk = run(
        &t,
        &b,
        &[0x5E, 0x00, 0, 0, 0, 0, 0, 0x10, 0, 0],
        4096,
        Vec::new(),
    );
    assert_eq!(keys(&rk), (0, vec![]));
}

#[test]
fn corrupt_state_file_refuses_the_lun() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, "version = 99\n").unwrap();
    let target = ScsiTarget::new("bad");
    let mut cfg = LunConfig::new(MockStore::new(BLOCKS, BS, false));
    cfg.pr_state_path = Some(path);
    let err = target.add_lun(0, cfg).unwrap_err();
    assert!(err.to_string().contains("version"), "{err}");
    assert!(target.luns().is_empty());
}

#[test]
fn report_target_port_groups_and_tpgs() {
    let lun = Lun::new();
    let (a, b) = (nexus_on(1, 1), nexus_on(2, 2));
    assert_eq!(lun.tur(&b).status, Status::GOOD);
    let inq = lun.h.run_on(&a, 0, &[0x12, 0, 0, 0, 96, 0], 96);
    assert_eq!(inq.data_in[5] & 0x30, 0x10, "TPGS=01b");
    let rtpg = lun
        .h
        .run_on(&a, 0, &[0xA3, 0x0A, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0], 4096);
    assert_eq!(rtpg.status, Status::GOOD);
    let d = &rtpg.data_in;
    assert_eq!(&d[..4], &(d.len() as u32 - 4).to_be_bytes());
    assert_eq!(&d[4..12], &[0x00, 0x01, 0, 1, 0, 0, 0, 1]);
    assert_eq!(&d[12..16], &[0, 0, 0, 1]);
    assert_eq!(&d[16..24], &[0x00, 0x01, 0, 2, 0, 0, 0, 1]);
    assert_eq!(&d[24..28], &[0, 0, 0, 2]);
    // VPD 83h names the same group.
    let vpd = lun.h.run_on(&b, 0, &[0x12, 1, 0x83, 0x01, 0, 0], 256);
    let body = &vpd.data_in[4..];
    let mut at = 0;
    let mut group = None;
    while at + 4 <= body.len() {
        let len = usize::from(body[at + 3]);
        if body[at + 1] & 0x0F == 0x05 {
            group = Some(u16::from_be_bytes([body[at + 6], body[at + 7]]));
        }
        at += 4 + len;
    }
    assert_eq!(group, Some(2));
    // Extended header; an unknown format is refused.
    let ext = lun
        .h
        .run_on(&a, 0, &[0xA3, 0x2A, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0], 4096);
    assert_eq!(ext.data_in[4], 0x10);
    let bad = lun
        .h
        .run_on(&a, 0, &[0xA3, 0x4A, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0], 4096);
    assert_eq!(sense_of(&bad), (ILLEGAL, 0x24, 0x00));
}
