//! Commands run to completion on the caller's thread
//! (`ScsiTarget::run_inline`): which ones may, that one which would have to
//! wait comes back untouched for the workers, and that task management,
//! unit attentions and LBA range locks treat them like any other task.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use rustgt_backstore::{nowait, Backstore, BackstoreError, Geometry, Nonblocking};
use rustgt_scsi::{Command, LunConfig, ScsiTarget, Status, TaskAttr, TmfFunction, TmfResponse};

/// A `MockStore` that says how it may be used on a reactor and, when told
/// to, behaves like a file whose pages are not cached: reads inside an
/// attempt fail with would-block.
#[derive(Debug)]
struct ReactorStore {
    inner: Arc<MockStore>,
    mode: Nonblocking,
    uncached: AtomicBool,
}

impl Backstore for ReactorStore {
    fn kind(&self) -> &'static str {
        "reactor-mock"
    }
    fn geometry(&self) -> Geometry {
        self.inner.geometry()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), BackstoreError> {
        if nowait::active() && self.uncached.load(Ordering::SeqCst) {
            return Err(nowait::would_block());
        }
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> Result<(), BackstoreError> {
        self.inner.write_at(buf, offset, fua)
    }
    fn flush(&self) -> Result<(), BackstoreError> {
        self.inner.flush()
    }
    fn nonblocking(&self) -> Nonblocking {
        self.mode
    }
}

struct Setup {
    h: Harness,
    store: Arc<ReactorStore>,
}

/// A target whose LUN 1 is a `ReactorStore` of `mode` (LUN 0 is the
/// harness's plain mock, which never runs inline).
fn setup(mode: Nonblocking) -> Setup {
    let h = Harness::new();
    let store = Arc::new(ReactorStore {
        inner: MockStore::new(BLOCKS, BS, false),
        mode,
        uncached: AtomicBool::new(false),
    });
    let mut cfg = LunConfig::new(store.clone());
    cfg.workers = 2;
    h.target.add_lun(1, cfg).unwrap();
    // Clear the REPORTED LUNS DATA HAS CHANGED the new LUN raised.
    let _ = h.run_on(&h.nexus, 1, &[0; 6], 0);
    Setup { h, store }
}

impl Setup {
    fn cmd(&self, cdb: &[u8], data_in_len: u32, data_out: Vec<u8>) -> Command {
        self.h.cmd_on(&self.h.nexus, 1, cdb, data_in_len, data_out)
    }
    fn inline(&self, cmd: Command) -> Result<rustgt_scsi::Response, Command> {
        self.h.target.run_inline(cmd, None)
    }
}

fn pattern(blocks: usize) -> Vec<u8> {
    (0..blocks * BS as usize).map(|i| (i % 251) as u8).collect()
}

#[test]
fn memory_store_reads_and_writes_run_inline() {
    let s = setup(Nonblocking::Always);
    let data = pattern(4);
    let w = s
        .inline(s.cmd(&cdb10(0x2A, 0, 8, 4), 0, data.clone()))
        .expect("WRITE(10) runs inline on a memory store");
    assert_eq!(w.status, Status::GOOD);
    let r = s
        .inline(s.cmd(&cdb10(0x28, 0, 8, 4), 4 * BS, vec![]))
        .expect("READ(10) runs inline");
    assert_eq!((r.status, r.data_in.into_vec()), (Status::GOOD, data));
    let stats = s.h.target.lun_stats(1).unwrap();
    assert_eq!((stats.read_commands, stats.write_commands), (1, 1));
}

#[test]
fn stores_that_may_block_keep_commands_for_the_workers() {
    // The plain mock (Nonblocking::Never) on LUN 0.
    let h = Harness::new();
    let cmd = h.cmd(&cdb10(0x28, 0, 0, 1), BS, vec![]);
    let tag = cmd.tag;
    let back = h.target.run_inline(cmd, None).expect_err("never inline");
    assert_eq!(
        (back.tag, back.cdb[0]),
        (tag, 0x28),
        "handed back untouched"
    );
    assert_eq!(h.exec(back).status, Status::GOOD);

    // A page-cache store: reads may run inline, writes never.
    let s = setup(Nonblocking::TryReads);
    let write = s.cmd(&cdb10(0x2A, 0, 0, 1), 0, pattern(1));
    let write = s.inline(write).expect_err("writes go to the workers");
    assert_eq!(s.h.exec(write).status, Status::GOOD);
    let r = s
        .inline(s.cmd(&cdb10(0x28, 0, 0, 1), BS, vec![]))
        .expect("a cached read runs inline");
    assert_eq!(r.data_in, pattern(1));
}

#[test]
fn a_read_that_would_block_comes_back_and_is_counted_once() {
    let s = setup(Nonblocking::TryReads);
    s.store.inner.data.lock().unwrap()[..BS as usize].copy_from_slice(&pattern(1));
    s.store.uncached.store(true, Ordering::SeqCst);
    let cmd = s.cmd(&cdb10(0x28, 0, 0, 1), BS, vec![]);
    let back = s
        .inline(cmd)
        .expect_err("an uncached read must not run inline");
    let before = s.h.target.lun_stats(1).unwrap().read_commands;
    assert_eq!(before, 0, "the failed attempt is not counted");
    // The same command, on a worker, reads the data.
    let r = s.h.exec(back);
    assert_eq!((r.status, r.data_in.into_vec()), (Status::GOOD, pattern(1)));
    assert_eq!(s.h.target.lun_stats(1).unwrap().read_commands, 1);
}

#[test]
fn only_simple_data_path_commands_run_inline() {
    let s = setup(Nonblocking::Always);
    let mut ordered = s.cmd(&cdb10(0x28, 0, 0, 1), BS, vec![]);
    ordered.attr = TaskAttr::Ordered;
    assert!(
        s.inline(ordered).is_err(),
        "ORDERED tasks go to the task set"
    );
    let sync = s.cmd(&cdb10(0x35, 0, 0, 0), 0, vec![]);
    assert!(
        s.inline(sync).is_err(),
        "SYNCHRONIZE CACHE goes to the workers"
    );
    let tur = s
        .inline(s.cmd(&[0; 6], 0, vec![]))
        .expect("TEST UNIT READY");
    assert_eq!(tur.status, Status::GOOD);
    // A LUN that does not exist is the control thread's business.
    let none = s.h.cmd_on(&s.h.nexus, 9, &cdb10(0x28, 0, 0, 1), BS, vec![]);
    assert!(s.h.target.run_inline(none, None).is_err());
}

#[test]
fn unit_attention_is_reported_inline_once() {
    let s = setup(Nonblocking::Always);
    // Adding a LUN raises REPORTED LUNS DATA HAS CHANGED for known nexuses.
    s.h.target
        .add_lun(2, LunConfig::new(MockStore::new(8, 512, false)))
        .unwrap();
    let r = s.inline(s.cmd(&cdb10(0x28, 0, 0, 1), BS, vec![])).unwrap();
    assert_eq!(sense_of(&r), (UNIT_ATTENTION, 0x3F, 0x0E));
    let r = s.inline(s.cmd(&cdb10(0x28, 0, 0, 1), BS, vec![])).unwrap();
    assert_eq!(r.status, Status::GOOD);
}

#[test]
fn a_range_held_by_a_running_compare_and_write_sends_the_read_to_the_workers() {
    let s = setup(Nonblocking::Always);
    s.store.inner.close_gate();
    // A COMPARE AND WRITE on a worker holds block 2 atomically (a read must
    // not see it half done) while its read of the medium waits at the gate.
    // The block holds zeros, so the compare matches and the write goes on.
    let mut data = vec![0u8; BS as usize];
    data.extend_from_slice(&pattern(1));
    let caw = submit(&s.h.target, s.cmd(&cdb16(0x89, 0, 2, 1), 0, data));
    s.store.inner.wait_blocked(1);
    let read = s.cmd(&cdb10(0x28, 0, 2, 1), BS, vec![]);
    let back = s
        .inline(read)
        .expect_err("the read must not wait on the reactor");
    s.store.inner.open_gate();
    assert_eq!(
        caw.recv_timeout(Duration::from_secs(10)).unwrap().status,
        Status::GOOD
    );
    let r = s.h.exec(back);
    assert_eq!(r.data_in, pattern(1), "the read saw the whole write");
}

#[test]
fn task_management_sees_and_aborts_an_inline_task() {
    let s = Arc::new(setup(Nonblocking::Always));
    s.store.inner.close_gate();
    let cmd = s.cmd(&cdb10(0x28, 0, 0, 1), BS, vec![]);
    let tag = cmd.tag;
    // The inline read runs on "a reactor" and is held at the gate.
    let reactor = {
        let s = Arc::clone(&s);
        std::thread::spawn(move || s.inline(cmd))
    };
    s.store.inner.wait_blocked(1);
    let target: Arc<ScsiTarget> = Arc::clone(&s.h.target);
    let nexus = s.h.nexus.clone();
    assert_eq!(
        target.task_management(&nexus, 1, TmfFunction::QueryTask { tag }),
        TmfResponse::FunctionSucceeded,
        "the inline task is in the task set"
    );
    let abort = {
        let (target, nexus) = (Arc::clone(&target), nexus.clone());
        std::thread::spawn(move || {
            target.task_management(&nexus, 1, TmfFunction::AbortTask { tag })
        })
    };
    // ABORT TASK waits for the running task; let it finish.
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        !abort.is_finished(),
        "ABORT TASK answers only once the task is gone"
    );
    s.store.inner.open_gate();
    let r = reactor.join().unwrap().expect("it ran inline");
    assert!(r.aborted, "the aborted inline task sends no response");
    assert_eq!(abort.join().unwrap(), TmfResponse::FunctionComplete);
    assert_eq!(
        target.task_management(&nexus, 1, TmfFunction::QueryTask { tag }),
        TmfResponse::FunctionComplete,
        "and it is gone"
    );
}
