//! QoS limits in the task set (`ScsiTarget::set_lun_qos`, `set_qos`):
//! commands over a limit wait (never fail) and go at the limit's rate; one initiator's limit leaves the others alone; a raised limit
//! applies to commands already waiting; the target's limit covers all its
//! LUNs together; task management reaches waiting commands.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use rustgt_scsi::{Limit, LunConfig, LunQos, QosLimits, Status, TmfFunction, TmfResponse};

const READ_10: u8 = 0x28;

fn iops(rate: u64) -> QosLimits {
    QosLimits {
        total_iops: Some(Limit::rate(rate)),
        ..QosLimits::default()
    }
}

fn lun_qos(all: QosLimits) -> LunQos {
    LunQos {
        all,
        initiators: Vec::new(),
    }
}

#[test]
fn reads_over_the_limit_wait_and_go_at_its_rate() {
    let h = Harness::with(BLOCKS, BS, false, 4);
    // 50 per second, a bucket of 5: 25 reads take about 0.4 s.
    h.target.set_lun_qos(0, &lun_qos(iops(50))).unwrap();
    let t = Instant::now();
    let rxs: Vec<_> = (0..25)
        .map(|i| submit(&h.target, h.cmd(&cdb10(READ_10, 0, i, 1), 512, Vec::new())))
        .collect();
    for rx in &rxs {
        let r = rx.recv_timeout(Duration::from_secs(10)).expect("completes");
        assert_eq!(r.status, Status::GOOD);
    }
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(380),
        "{took:?}: faster than the limit"
    );
    assert!(took < Duration::from_secs(3), "{took:?}");
    let s = h.target.lun_qos_stats(0).unwrap();
    assert_eq!(s.lun.commands, 25);
    assert!(s.lun.delayed >= 19, "{s:?}");
    assert_eq!(s.lun.waiting, 0);
    assert_eq!(h.target.nexus_qos_stats(h.nexus.id).commands, 25);
}

#[test]
fn an_initiators_limit_leaves_other_initiators_alone() {
    let h = Harness::with(BLOCKS, BS, false, 4);
    let slow = nexus(2);
    let name = "iqn.2026-01.test:init2".to_owned();
    h.target
        .set_lun_qos(
            0,
            &LunQos {
                all: QosLimits::default(),
                initiators: vec![(name.clone(), iops(1))],
            },
        )
        .unwrap();
    // The slow initiator's first read goes, the next waits a second.
    let first = submit(
        &h.target,
        h.cmd_on(&slow, 0, &cdb10(READ_10, 0, 0, 1), 512, Vec::new()),
    );
    first.recv_timeout(Duration::from_secs(5)).expect("first");
    let held = submit(
        &h.target,
        h.cmd_on(&slow, 0, &cdb10(READ_10, 0, 1, 1), 512, Vec::new()),
    );
    let t = Instant::now();
    for i in 0..20 {
        let r = h.run(&cdb10(READ_10, 0, i, 1), 512, Vec::new());
        assert_eq!(r.status, Status::GOOD);
    }
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    assert!(held.try_recv().is_err(), "the slow initiator's read waits");
    let s = h.target.lun_qos_stats(0).unwrap();
    assert_eq!(s.initiators[0].0, name);
    assert_eq!(s.initiators[0].1.waiting, 1);
    // Raising the limit lets the waiting read go at once.
    h.target
        .set_lun_qos(
            0,
            &LunQos {
                all: QosLimits::default(),
                initiators: vec![(name, iops(1000))],
            },
        )
        .unwrap();
    held.recv_timeout(Duration::from_millis(300))
        .expect("goes once the limit is raised");
}

#[test]
fn a_targets_limit_covers_its_luns_together() {
    let h = Harness::with(BLOCKS, BS, false, 4);
    let mut cfg = LunConfig::new(MockStore::new(BLOCKS, BS, false));
    cfg.workers = 2;
    h.target.add_lun(1, cfg).unwrap();
    h.target.set_qos(&iops(40));
    let t = Instant::now();
    let rxs: Vec<_> = (0..20u64)
        .map(|i| {
            submit(
                &h.target,
                h.cmd_on(&h.nexus, i % 2, &cdb10(READ_10, 0, 0, 1), 512, Vec::new()),
            )
        })
        .collect();
    for rx in &rxs {
        rx.recv_timeout(Duration::from_secs(10)).expect("completes");
    }
    // 20 reads at 40/s with a bucket of 4: about 0.4 s. The two LUNs check
    // the shared bucket each under its own lock, so both may take its last
    // token at once (the debt delays the reads after them): the last read
    // may go one token (25 ms) early, 375 ms in. Each LUN limited alone
    // would take 150 ms, no limit a few ms.
    assert!(
        t.elapsed() >= Duration::from_millis(350),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(h.target.target_qos_stats().unwrap().commands, 20);
    h.target.set_qos(&QosLimits::default());
    assert!(h.target.target_qos_stats().is_none());
}

#[test]
fn abort_and_reset_reach_waiting_commands_and_removal_does_not_wait() {
    let h = Harness::with(BLOCKS, BS, false, 2);
    h.target.set_lun_qos(0, &lun_qos(iops(1))).unwrap();
    let first = h.run(&cdb10(READ_10, 0, 0, 1), 512, Vec::new());
    assert_eq!(first.status, Status::GOOD);
    let a = h.cmd(&cdb10(READ_10, 0, 1, 1), 512, Vec::new());
    let a_tag = a.tag;
    let ra = submit(&h.target, a);
    let rb = submit(&h.target, h.cmd(&cdb10(READ_10, 0, 2, 1), 512, Vec::new()));
    let t = Instant::now();
    let resp = h
        .target
        .task_management(&h.nexus, 0, TmfFunction::AbortTask { tag: a_tag });
    assert_eq!(resp, TmfResponse::FunctionComplete);
    let r = ra.recv_timeout(Duration::from_secs(1)).expect("aborted");
    assert!(r.aborted);
    let resp = h
        .target
        .task_management(&h.nexus, 0, TmfFunction::LogicalUnitReset);
    assert_eq!(resp, TmfResponse::FunctionComplete);
    assert!(
        rb.recv_timeout(Duration::from_secs(1))
            .expect("aborted")
            .aborted
    );
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    // A LUN removed with reads waiting runs them without the limit.
    let rxs: Vec<_> = (0..5)
        .map(|i| submit(&h.target, h.cmd(&cdb10(READ_10, 0, i, 1), 512, Vec::new())))
        .collect();
    let t = Instant::now();
    h.target.remove_lun(0).unwrap();
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    for rx in &rxs {
        rx.recv_timeout(Duration::from_secs(1)).expect("completed");
    }
}
