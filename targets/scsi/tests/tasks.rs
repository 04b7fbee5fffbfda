//! Task sets, task management and unit attentions through a real target,
//! with the mock backstore's gate holding I/O to make timing deterministic.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use rustgt_scsi::{LunConfig, Residual, Response, Status, TaskAttr, TmfFunction, TmfResponse};

const TUR: [u8; 6] = [0; 6];

fn recv(rx: &std::sync::mpsc::Receiver<Response>) -> Response {
    rx.recv_timeout(Duration::from_secs(10))
        .expect("no completion")
}

fn pending(rx: &std::sync::mpsc::Receiver<Response>) -> bool {
    rx.recv_timeout(Duration::from_millis(100)).is_err()
}

#[test]
fn new_nexus_has_no_unit_attention_known_one_gets_luns_changed() {
    let h = Harness::new();
    assert_eq!(h.run(&TUR, 0, vec![]).status, Status::GOOD);
    h.target
        .add_lun(7, LunConfig::new(MockStore::new(8, 512, false)))
        .unwrap();

    // INQUIRY and REPORT LUNS do not report it.
    assert_eq!(
        h.run(&[0x12, 0, 0, 0, 36, 0], 36, vec![]).status,
        Status::GOOD
    );
    let r = h.run(&[0xA0, 0, 0, 0, 0, 0, 0, 0, 0, 64, 0, 0], 64, vec![]);
    assert_eq!(
        (r.status, &r.data_in[..4]),
        (Status::GOOD, &[0u8, 0, 0, 16][..])
    );
    // Any other command does, once, on each LUN.
    let r = h.run(&TUR, 0, vec![]);
    assert_eq!(sense_of(&r), (UNIT_ATTENTION, 0x3F, 0x0E));
    assert_eq!(h.run(&TUR, 0, vec![]).status, Status::GOOD);
    let n = h.nexus.clone();
    let r = h.run_on(&n, 7, &TUR, 0);
    assert_eq!(sense_of(&r), (UNIT_ATTENTION, 0x3F, 0x0E));

    // A nexus first seen now has nothing pending.
    let fresh = nexus(2);
    assert_eq!(h.run_on(&fresh, 0, &TUR, 0).status, Status::GOOD);
    assert_eq!(h.run_on(&fresh, 7, &TUR, 0).status, Status::GOOD);

    // Removal is announced too, and the LUN is gone.
    h.target.remove_lun(7).unwrap();
    assert!(h.target.remove_lun(7).is_err());
    let r = h.run_on(&fresh, 0, &TUR, 0);
    assert_eq!(sense_of(&r), (UNIT_ATTENTION, 0x3F, 0x0E));
    let r = h.run_on(&fresh, 7, &TUR, 0);
    assert_eq!(sense_of(&r), (ILLEGAL, 0x25, 0x00));
}

#[test]
fn unit_attentions_are_delivered_oldest_first() {
    let h = Harness::new();
    let other = nexus(2);
    assert_eq!(h.run(&TUR, 0, vec![]).status, Status::GOOD);
    // Other nexus changes a mode parameter, then a LUN is added.
    let mut list = vec![
        0, 0, 0, 0, 0x0A, 0x0A, 0x06, 0x10, 0, 0, 0, 0, 0xFF, 0xFF, 0, 0,
    ];
    let r = h.exec(h.cmd_on(&other, 0, &[0x15, 0x10, 0, 0, 16, 0], 0, list.clone()));
    assert_eq!(r.status, Status::GOOD);
    h.target
        .add_lun(1, LunConfig::new(MockStore::new(8, 512, false)))
        .unwrap();

    // REQUEST SENSE returns (and clears) the oldest, in descriptor format
    // since D_SENSE is now set.
    let r = h.run(&[0x03, 0, 0, 0, 18, 0], 18, vec![]);
    assert_eq!(r.status, Status::GOOD);
    assert_eq!(
        (r.data_in[0], r.data_in[2], r.data_in[12], r.data_in[13]),
        (0x70, 6, 0x2A, 0x01)
    );
    let r = h.run(&TUR, 0, vec![]);
    assert_eq!(r.sense[0], 0x72);
    assert_eq!(sense_of(&r), (UNIT_ATTENTION, 0x3F, 0x0E));
    assert_eq!(h.run(&TUR, 0, vec![]).status, Status::GOOD);
    let r = h.run(&[0x03, 0, 0, 0, 18, 0], 18, vec![]);
    assert_eq!((r.data_in[2], r.data_in[12]), (0, 0));

    // Even an unknown opcode reports the pending condition first.
    let r = h.run_on(&other, 0, &TUR, 0);
    assert_eq!(sense_of(&r), (UNIT_ATTENTION, 0x3F, 0x0E));
    list[6] = 0x02;
    assert_eq!(
        h.exec(h.cmd_on(&other, 0, &[0x15, 0x10, 0, 0, 16, 0], 0, list))
            .status,
        Status::GOOD
    );
    let r = h.run(&[0xC1, 0, 0, 0, 0, 0], 0, vec![]);
    assert_eq!(sense_of(&r), (UNIT_ATTENTION, 0x2A, 0x01));
    let r = h.run(&[0xC1, 0, 0, 0, 0, 0], 0, vec![]);
    assert_eq!(sense_of(&r), (ILLEGAL, 0x20, 0x00));
}

#[test]
fn abort_task_removes_a_queued_task() {
    let h = Harness::with(64, 512, false, 1);
    h.store.close_gate();
    let a = h.cmd(&cdb10(0x28, 0, 0, 1), 512, vec![]);
    let b = h.cmd(&cdb10(0x28, 0, 1, 1), 512, vec![]);
    let b_tag = b.tag;
    let rx_a = submit(&h.target, a);
    h.store.wait_blocked(1);
    let rx_b = submit(&h.target, b);
    assert!(pending(&rx_b));

    let r = h
        .target
        .task_management(&h.nexus, 0, TmfFunction::QueryTask { tag: b_tag });
    assert_eq!(r, TmfResponse::FunctionSucceeded);
    let r = h
        .target
        .task_management(&h.nexus, 0, TmfFunction::AbortTask { tag: b_tag });
    assert_eq!(r, TmfResponse::FunctionComplete);
    let rb = recv(&rx_b);
    assert!(rb.aborted);
    assert_eq!(rb.tag, b_tag);
    let r = h
        .target
        .task_management(&h.nexus, 0, TmfFunction::QueryTask { tag: b_tag });
    assert_eq!(r, TmfResponse::FunctionComplete);
    let r = h
        .target
        .task_management(&h.nexus, 0, TmfFunction::AbortTask { tag: 999 });
    assert_eq!(r, TmfResponse::TaskNotFound);

    h.store.open_gate();
    let ra = recv(&rx_a);
    assert!(!ra.aborted);
    assert_eq!(ra.status, Status::GOOD);
    assert!(rx_b.try_recv().is_err(), "exactly one completion");
}

#[test]
fn abort_task_of_a_running_task_waits_for_it() {
    let h = Arc::new(Harness::with(64, 512, false, 2));
    h.store.close_gate();
    let a = h.cmd(&cdb10(0x2A, 0, 0, 1), 0, vec![1; 512]);
    let tag = a.tag;
    let rx = submit(&h.target, a);
    h.store.wait_blocked(1);

    let h2 = Arc::clone(&h);
    let tmf = std::thread::spawn(move || {
        h2.target
            .task_management(&h2.nexus, 0, TmfFunction::AbortTask { tag })
    });
    std::thread::sleep(Duration::from_millis(100));
    assert!(!tmf.is_finished(), "TMF answers only once the task is gone");
    h.store.open_gate();
    assert_eq!(tmf.join().unwrap(), TmfResponse::FunctionComplete);
    let r = rx
        .try_recv()
        .expect("aborted completion delivered before the TMF answer");
    assert!(r.aborted);
}

#[test]
fn abort_task_set_and_clear_task_set_scopes() {
    let h = Harness::with(64, 512, false, 1);
    let other = nexus(2);
    assert_eq!(h.run_on(&other, 0, &TUR, 0).status, Status::GOOD);
    h.store.close_gate();
    let blocker = submit(&h.target, h.cmd(&cdb10(0x28, 0, 0, 1), 512, vec![]));
    h.store.wait_blocked(1);
    let mine = submit(&h.target, h.cmd(&TUR, 0, vec![]));
    let theirs = submit(&h.target, h.cmd_on(&other, 0, &TUR, 0, vec![]));

    // ABORT TASK SET: only this nexus's tasks (the running one included).
    let h_target = Arc::clone(&h.target);
    let me = h.nexus.clone();
    let tmf =
        std::thread::spawn(move || h_target.task_management(&me, 0, TmfFunction::AbortTaskSet));
    assert!(recv(&mine).aborted);
    assert!(pending(&theirs));
    h.store.open_gate();
    assert_eq!(tmf.join().unwrap(), TmfResponse::FunctionComplete);
    assert!(recv(&blocker).aborted);
    let r = recv(&theirs);
    assert_eq!((r.aborted, r.status), (false, Status::GOOD));

    // CLEAR TASK SET: everyone's; the other nexus is told (2Fh/00h).
    h.store.close_gate();
    let blocker = submit(&h.target, h.cmd(&cdb10(0x28, 0, 0, 1), 512, vec![]));
    h.store.wait_blocked(1);
    let theirs = submit(&h.target, h.cmd_on(&other, 0, &TUR, 0, vec![]));
    let h_target = Arc::clone(&h.target);
    let me = h.nexus.clone();
    let tmf =
        std::thread::spawn(move || h_target.task_management(&me, 0, TmfFunction::ClearTaskSet));
    assert!(recv(&theirs).aborted);
    h.store.open_gate();
    assert_eq!(tmf.join().unwrap(), TmfResponse::FunctionComplete);
    assert!(recv(&blocker).aborted);
    let r = h.run_on(&other, 0, &TUR, 0);
    assert_eq!(sense_of(&r), (UNIT_ATTENTION, 0x2F, 0x00));
    assert_eq!(h.run(&TUR, 0, vec![]).status, Status::GOOD);
}

#[test]
fn logical_unit_reset_aborts_and_raises_29_03_for_all() {
    let h = Harness::with(64, 512, false, 1);
    let other = nexus(2);
    assert_eq!(h.run_on(&other, 0, &TUR, 0).status, Status::GOOD);
    // D_SENSE on, to see it restored to the default by the reset.
    let list = vec![
        0, 0, 0, 0, 0x0A, 0x0A, 0x06, 0x10, 0, 0, 0, 0, 0xFF, 0xFF, 0, 0,
    ];
    assert_eq!(
        h.run(&[0x15, 0x10, 0, 0, 16, 0], 0, list).status,
        Status::GOOD
    );
    assert_eq!(
        sense_of(&h.run_on(&other, 0, &TUR, 0)),
        (UNIT_ATTENTION, 0x2A, 0x01)
    );

    h.store.close_gate();
    let running = submit(&h.target, h.cmd(&cdb10(0x28, 0, 0, 1), 512, vec![]));
    h.store.wait_blocked(1);
    let queued = submit(&h.target, h.cmd_on(&other, 0, &TUR, 0, vec![]));
    let h_target = Arc::clone(&h.target);
    let me = h.nexus.clone();
    let tmf =
        std::thread::spawn(move || h_target.task_management(&me, 0, TmfFunction::LogicalUnitReset));
    assert!(recv(&queued).aborted);
    h.store.open_gate();
    assert_eq!(tmf.join().unwrap(), TmfResponse::FunctionComplete);
    assert!(recv(&running).aborted);

    for n in [h.nexus.clone(), other.clone()] {
        let r = h.run_on(&n, 0, &TUR, 0);
        assert_eq!(r.sense[0], 0x70, "D_SENSE back to its default");
        assert_eq!(sense_of(&r), (UNIT_ATTENTION, 0x29, 0x03));
        assert_eq!(h.run_on(&n, 0, &TUR, 0).status, Status::GOOD);
    }
    let r = h
        .target
        .task_management(&h.nexus, 9, TmfFunction::LogicalUnitReset);
    assert_eq!(r, TmfResponse::IncorrectLun);
    let r = h.target.task_management(&h.nexus, 0, TmfFunction::ClearAca);
    assert_eq!(r, TmfResponse::NotSupported);
}

#[test]
fn target_resets_cover_every_lun() {
    let h = Harness::new();
    h.target
        .add_lun(3, LunConfig::new(MockStore::new(8, 512, false)))
        .unwrap();
    let n = h.nexus.clone();
    for (f, ascq) in [
        (TmfFunction::TargetWarmReset, 0x02),
        (TmfFunction::TargetColdReset, 0x01),
    ] {
        // LUN numbers are irrelevant for target resets.
        assert_eq!(
            h.target.task_management(&n, 1234, f),
            TmfResponse::FunctionComplete
        );
        for lun in [0, 3] {
            let r = h.run_on(&n, lun, &TUR, 0);
            assert_eq!(sense_of(&r), (UNIT_ATTENTION, 0x29, ascq));
            assert_eq!(h.run_on(&n, lun, &TUR, 0).status, Status::GOOD);
        }
    }
}

#[test]
fn ordered_task_waits_for_older_and_blocks_younger() {
    let h = Harness::with(64, 512, false, 4);
    let order = Arc::new(Mutex::new(Vec::new()));
    let submit_logged = |cdb: &[u8], attr: TaskAttr, name: &'static str| {
        let mut cmd = h.cmd(cdb, 512, vec![]);
        cmd.attr = attr;
        let order = Arc::clone(&order);
        let (tx, rx) = std::sync::mpsc::channel();
        h.target.submit(
            cmd,
            Box::new(move |r| {
                order.lock().unwrap().push(name);
                let _ = tx.send(r);
            }),
        );
        rx
    };
    h.store.close_gate();
    let a = submit_logged(&cdb10(0x28, 0, 0, 1), TaskAttr::Simple, "A");
    h.store.wait_blocked(1);
    let b = submit_logged(&TUR, TaskAttr::Ordered, "B");
    let c = submit_logged(&TUR, TaskAttr::Simple, "C");
    // B waits for A, C waits for B, although workers are free.
    assert!(pending(&b));
    assert!(pending(&c));
    // HEAD OF QUEUE runs at once.
    let d = submit_logged(&TUR, TaskAttr::HeadOfQueue, "D");
    assert_eq!(recv(&d).status, Status::GOOD);
    h.store.open_gate();
    for rx in [a, b, c] {
        assert_eq!(recv(&rx).status, Status::GOOD);
    }
    assert_eq!(*order.lock().unwrap(), vec!["D", "A", "B", "C"]);
}

#[test]
fn overlapped_tag_is_refused() {
    let h = Harness::with(64, 512, false, 1);
    h.store.close_gate();
    let a = h.cmd(&cdb10(0x28, 0, 0, 1), 512, vec![]);
    let mut dup = h.cmd(&TUR, 0, vec![]);
    dup.tag = a.tag;
    let rx_a = submit(&h.target, a);
    h.store.wait_blocked(1);
    let r = submit_wait(&h.target, dup);
    assert_eq!(sense_of(&r), (0x0B, 0x4E, 0x00));
    h.store.open_gate();
    assert_eq!(recv(&rx_a).status, Status::GOOD);
}

#[test]
fn nexus_loss_aborts_its_tasks_only() {
    let h = Harness::with(64, 512, false, 1);
    let other = nexus(2);
    h.store.close_gate();
    let running = submit(&h.target, h.cmd(&cdb10(0x28, 0, 0, 1), 512, vec![]));
    h.store.wait_blocked(1);
    let queued = submit(&h.target, h.cmd(&TUR, 0, vec![]));
    let theirs = submit(&h.target, h.cmd_on(&other, 0, &TUR, 0, vec![]));
    h.target.nexus_lost(&h.nexus);
    assert!(recv(&queued).aborted);
    h.store.open_gate();
    assert!(recv(&running).aborted);
    assert_eq!(recv(&theirs).status, Status::GOOD);
}

#[test]
fn shutdown_drains_then_answers_busy() {
    let h = Harness::with(64, 512, false, 2);
    let rxs: Vec<_> = (0..20u32)
        .map(|i| {
            submit(
                &h.target,
                h.cmd(&cdb10(0x2A, 0, i, 1), 0, vec![i as u8; 512]),
            )
        })
        .collect();
    h.target.shutdown();
    for rx in rxs {
        let r = rx.try_recv().expect("drained before shutdown returned");
        assert_eq!((r.status, r.residual), (Status::GOOD, Residual::None));
    }
    assert!(h.store.flushes.load(std::sync::atomic::Ordering::SeqCst) >= 1);
    let r = h.run(&TUR, 0, vec![]);
    assert_eq!(r.status, Status::BUSY);
    assert!(h
        .target
        .add_lun(5, LunConfig::new(MockStore::new(8, 512, false)))
        .is_err());
    h.target.shutdown();
}

#[test]
fn many_concurrent_commands_complete_once() {
    let h = Harness::with(256, 512, false, 8);
    let rxs: Vec<_> = (0..500u32)
        .map(|i| {
            let lba = i % 256;
            if i % 2 == 0 {
                submit(
                    &h.target,
                    h.cmd(&cdb10(0x2A, 0, lba, 1), 0, vec![lba as u8; 512]),
                )
            } else {
                submit(&h.target, h.cmd(&cdb10(0x28, 0, lba, 1), 512, vec![]))
            }
        })
        .collect();
    for rx in rxs {
        assert_eq!(recv(&rx).status, Status::GOOD);
        assert!(rx.try_recv().is_err());
    }
    let stats = h.target.lun_stats(0).unwrap();
    assert_eq!(stats.read_commands + stats.write_commands, 500);
}

#[test]
fn fast_tasks_never_wait_behind_one_that_hangs() {
    // Fast tasks are left to the awake workers instead of waking one each;
    // a task queued behind one that then hangs must still run (a standby
    // worker looks at the queue) while the hung one is held.
    let h = Harness::with(64, 512, false, 4);
    for _ in 0..200 {
        let r = submit_wait(&h.target, h.cmd(&TUR, 0, Vec::new()));
        assert_eq!(r.status, Status::GOOD);
    }
    h.store.close_gate();
    let held = submit(&h.target, h.cmd(&cdb10(0x2A, 0, 0, 1), 0, vec![1; 512]));
    h.store.wait_blocked(1);
    let mut answered = 0;
    for _ in 0..20 {
        let rx = submit(&h.target, h.cmd(&TUR, 0, Vec::new()));
        match rx.recv_timeout(Duration::from_secs(5)) {
            Ok(r) if r.status == Status::GOOD => answered += 1,
            _ => break,
        }
    }
    let still_held = pending(&held);
    // Released before asserting, so a failure does not hang the harness.
    h.store.open_gate();
    assert_eq!(answered, 20, "a TUR waited behind a held WRITE");
    assert!(still_held, "the WRITE was held meanwhile");
    assert_eq!(recv(&held).status, Status::GOOD);
}
