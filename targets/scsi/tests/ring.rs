//! Commands on a reactor's io_uring (`ScsiTarget::run_on_ring`; the test
//! thread plays the reactor)
//! against real file LUNs: a WRITE then READ returns the data (buffered and
//! O_DIRECT), SYNCHRONIZE CACHE and FUA complete, a failed read is a MEDIUM
//! ERROR, without a ring the command comes back for the workers, which
//! serve it, and ring completions never leave the workers' queued writes
//! waiting. Reads of cached pages on a thread with a ring are batched: after
//! the turn's first, left to the ring by `run_inline`, read and answered in one `submit_and_reap`
//! without waking the ring's eventfd; a queued read holds its range; a
//! thread without a ring still serves them inline.

#![allow(clippy::unwrap_used)]

mod common;

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{mpsc, Arc};

use common::*;
use rustgt_backstore::{uring, FileBackstore, FileOptions};
use rustgt_scsi::{Command, LunConfig, Response, Ring, Status, TaskAttr};

const FILE_BLOCKS: u64 = 256;

/// A harness whose LUN 1 is a file of 256 blocks of 512 bytes.
fn file_lun(path: &Path, direct: bool) -> Option<Harness> {
    let opts = FileOptions {
        size: Some(FILE_BLOCKS * u64::from(BS)),
        block_size: BS,
        read_only: false,
        thin: false,
        direct,
    };
    let store = match FileBackstore::open(path, &opts) {
        Ok(s) => s,
        Err(e) if direct => {
            skip(&format!("O_DIRECT: {e}"));
            return None;
        }
        Err(e) => panic!("open: {e}"),
    };
    let h = Harness::new();
    let mut cfg = LunConfig::new(Arc::new(store));
    cfg.workers = 2;
    h.target.add_lun(1, cfg).unwrap();
    // Clear the REPORTED LUNS DATA HAS CHANGED the new LUN raised.
    let _ = h.run_on(&h.nexus, 1, &[0; 6], 0);
    Some(h)
}

fn ring_available() -> bool {
    match uring::probe() {
        Ok(()) => true,
        Err(why) => {
            skip(&format!("io_uring unavailable: {why}"));
            false
        }
    }
}

/// The test's ring, as a reactor's (the test thread is the reactor).
/// Declared after the harness, it is dropped first: its ops complete
/// before the harness removes the LUNs, even when the test panics.
fn new_ring() -> (Ring, std::fs::File) {
    let (ring, fd) = Ring::start().unwrap().expect("io_uring enabled");
    (ring, std::fs::File::from(fd))
}

/// A test meets a machine without what it needs: it is skipped, unless
/// `RUSTGT_TEST_STRICT` is set (`tests/run` sets it), where a skip would
/// hide a path the run must cover, so it fails.
fn skip(why: &str) {
    assert!(
        std::env::var_os("RUSTGT_TEST_STRICT").is_none(),
        "cannot run: {why} (RUSTGT_TEST_STRICT is set)"
    );
    eprintln!("skipping: {why}");
}

/// Runs `cmd` through `ring`, which must take it, and reaps until its
/// completion arrives.
fn on_ring(h: &Harness, ring: &Ring, cmd: Command) -> Response {
    let (tx, rx) = mpsc::channel();
    let taken = h.target.run_on_ring(
        cmd,
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
        Some(ring),
    );
    assert!(taken.is_ok(), "the ring path takes the command");
    loop {
        if let Ok(r) = rx.try_recv() {
            assert!(rx.try_recv().is_err(), "second completion");
            return r;
        }
        assert!(ring.in_flight() > 0, "no completion and nothing in flight");
        ring.reap_blocking();
    }
}

fn pattern(blocks: usize, seed: u8) -> Vec<u8> {
    (0..blocks * BS as usize)
        .map(|i| (i % 251) as u8 ^ seed)
        .collect()
}

fn write_read_sync(direct: bool) {
    if !ring_available() {
        return;
    }
    // Under the build's directory, not /tmp, which may be a tmpfs (no
    // O_DIRECT).
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().join("lun.img");
    let Some(h) = file_lun(&path, direct) else {
        return;
    };
    let (ring, _fd) = new_ring();
    let cmd = |cdb: &[u8], din: u32, dout: Vec<u8>| h.cmd_on(&h.nexus, 1, cdb, din, dout);

    let data = pattern(8, 0x5A);
    let fua = pattern(2, 0xA5);
    // A write: on the ring with O_DIRECT. Buffered ones never go to the
    // ring: whole pages without FUA are written on this thread at once
    // (`inline_writes`), the rest are given back untouched for the workers.
    let given_back = |c: Command| {
        let Err((c, _)) = h.target.run_on_ring(c, Box::new(|_| {}), Some(&ring)) else {
            panic!("a buffered FUA or partial-page write is given back");
        };
        h.exec(c)
    };
    let now = |c: Command| {
        let (tx, rx) = mpsc::channel();
        let taken = h.target.run_on_ring(
            c,
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
            Some(&ring),
        );
        assert!(taken.is_ok(), "a buffered whole-page write is taken");
        assert_eq!(ring.in_flight(), 0, "written on this thread, not the ring");
        rx.try_recv().expect("completed before returning")
    };
    // 8 blocks of 512 bytes at LBA 16: one whole page.
    let w = if direct {
        on_ring(&h, &ring, cmd(&cdb10(0x2A, 0, 16, 8), 0, data.clone()))
    } else {
        now(cmd(&cdb10(0x2A, 0, 16, 8), 0, data.clone()))
    };
    assert_eq!(w.status, Status::GOOD, "{w:?}");
    // FUA, with a WRITE(16).
    let w = if direct {
        on_ring(&h, &ring, cmd(&cdb16(0x8A, 0x08, 40, 2), 0, fua.clone()))
    } else {
        given_back(cmd(&cdb16(0x8A, 0x08, 40, 2), 0, fua.clone()))
    };
    assert_eq!(w.status, Status::GOOD, "{w:?}");
    if !direct {
        // Part of a page, without FUA: to the workers too.
        let w = given_back(cmd(&cdb10(0x2A, 0, 60, 2), 0, pattern(2, 0x11)));
        assert_eq!(w.status, Status::GOOD, "{w:?}");
    }

    let r = on_ring(&h, &ring, cmd(&cdb10(0x28, 0, 16, 8), 8 * BS, vec![]));
    assert_eq!(r.status, Status::GOOD);
    assert_eq!(r.data_in, data, "READ returns what WRITE stored");
    let r = on_ring(&h, &ring, cmd(&cdb12(0xA8, 0, 40, 2), 2 * BS, vec![]));
    assert_eq!(r.data_in, fua);
    let s = on_ring(&h, &ring, cmd(&cdb10(0x35, 0, 0, 0), 0, vec![]));
    assert_eq!(s.status, Status::GOOD, "SYNCHRONIZE CACHE(10)");

    // The bytes are in the file itself.
    let file = std::fs::File::open(&path).unwrap();
    let mut back = vec![0u8; data.len()];
    file.read_exact_at(&mut back, 16 * u64::from(BS)).unwrap();
    assert_eq!(back, data);

    let stats = h.target.lun_stats(1).unwrap();
    let (writes, blocks) = if direct { (2, 10) } else { (3, 12) };
    assert_eq!((stats.read_commands, stats.write_commands), (2, writes));
    assert_eq!(stats.write_bytes, blocks * u64::from(BS));
    drop(ring);
}

#[test]
fn write_then_read_through_the_ring_buffered() {
    write_read_sync(false);
}

#[test]
fn write_then_read_through_the_ring_o_direct() {
    write_read_sync(true);
}

#[test]
fn checks_answer_at_once_and_residuals_match_the_workers() {
    if !ring_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let h = file_lun(&dir.path().join("lun.img"), false).unwrap();
    let (ring, _fd) = new_ring();
    // Past the end: CHECK CONDITION from the start, no op submitted.
    let (tx, rx) = mpsc::channel();
    let past = h.cmd_on(&h.nexus, 1, &cdb10(0x28, 0, 255, 2), 2 * BS, vec![]);
    assert!(h
        .target
        .run_on_ring(
            past,
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
            Some(&ring)
        )
        .is_ok());
    let r = rx.try_recv().expect("answered at once");
    assert_eq!(r.status, Status::CHECK_CONDITION);
    assert_eq!(sense_of(&r), (0x05, 0x21, 0x00), "LBA OUT OF RANGE");
    assert_eq!(ring.in_flight(), 0);

    // A Data-In buffer smaller than the transfer: same residual as a worker.
    let short = h.cmd_on(&h.nexus, 1, &cdb10(0x28, 0, 0, 4), 2 * BS, vec![]);
    let via_ring = on_ring(&h, &ring, short);
    let short = h.cmd_on(&h.nexus, 1, &cdb10(0x28, 0, 0, 4), 2 * BS, vec![]);
    let worker = h.exec(short);
    assert_eq!(via_ring.status, Status::GOOD);
    assert_eq!(via_ring.data_in.len(), 2 * BS as usize);
    assert_eq!(
        (via_ring.residual, via_ring.data_in),
        (worker.residual, worker.data_in)
    );
    drop(ring);
}

#[test]
fn a_failed_read_is_a_medium_error() {
    if !ring_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lun.img");
    let h = file_lun(&path, false).unwrap();
    // The file shrinks under the LUN: its last blocks cannot be read.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(64 * u64::from(BS))
        .unwrap();
    let (ring, _fd) = new_ring();
    let cmd = h.cmd_on(&h.nexus, 1, &cdb10(0x28, 0, 200, 4), 4 * BS, vec![]);
    let r = on_ring(&h, &ring, cmd);
    assert_eq!(r.status, Status::CHECK_CONDITION);
    assert_eq!(
        sense_of(&r),
        (0x03, 0x11, 0x00),
        "MEDIUM ERROR, UNRECOVERED READ ERROR"
    );
    assert!(r.data_in.is_empty());
    drop(ring);
}

#[test]
fn without_a_ring_the_workers_serve_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let h = file_lun(&dir.path().join("lun.img"), false).unwrap();
    let data = pattern(2, 1);
    let w = h.cmd_on(&h.nexus, 1, &cdb10(0x2A, 0, 4, 2), 0, data.clone());
    let (w, _done) = h
        .target
        .run_on_ring(w, Box::new(|_| {}), None)
        .expect_err("given back");
    assert_eq!(h.exec(w).status, Status::GOOD);
    let r = h.exec(h.cmd_on(&h.nexus, 1, &cdb10(0x28, 0, 4, 2), 2 * BS, vec![]));
    assert_eq!(r.data_in, data);

    // With a ring: ORDERED tasks, other commands and stores the ring cannot
    // drive are given back too.
    if !ring_available() {
        return;
    }
    let (ring, _fd) = new_ring();
    let mut ordered = h.cmd_on(&h.nexus, 1, &cdb10(0x28, 0, 0, 1), BS, vec![]);
    ordered.attr = TaskAttr::Ordered;
    assert!(h
        .target
        .run_on_ring(ordered, Box::new(|_| {}), Some(&ring))
        .is_err());
    let inquiry = h.cmd_on(&h.nexus, 1, &[0x12, 0, 0, 0, 96, 0], 96, vec![]);
    assert!(h
        .target
        .run_on_ring(inquiry, Box::new(|_| {}), Some(&ring))
        .is_err());
    // LUN 0 is a mock store of memory.
    let mock = h.cmd(&cdb10(0x28, 0, 0, 1), BS, vec![]);
    assert!(h
        .target
        .run_on_ring(mock, Box::new(|_| {}), Some(&ring))
        .is_err());
    assert_eq!(ring.in_flight(), 0);
    drop(ring);
}

/// Starts `cmd` on the ring and returns the channel its completion
/// arrives on (after a reap).
fn start_on_ring(h: &Harness, ring: &Ring, cmd: Command) -> mpsc::Receiver<Response> {
    let (tx, rx) = mpsc::channel();
    let taken = h.target.run_on_ring(
        cmd,
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
        Some(ring),
    );
    assert!(taken.is_ok(), "the ring path takes the command");
    rx
}

#[test]
fn removing_a_lun_waits_for_its_ring_ops_and_then_ends() {
    if !ring_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let h = file_lun(&dir.path().join("lun.img"), false).unwrap();
    let (ring, _fd) = new_ring();
    let rx = start_on_ring(
        &h,
        &ring,
        h.cmd_on(&h.nexus, 1, &cdb10(0x28, 0, 0, 8), 8 * BS, vec![]),
    );
    assert_eq!(ring.in_flight(), 1);
    let target = Arc::clone(&h.target);
    let remover = std::thread::spawn(move || target.remove_lun(1));
    // The LUN leaves the table first, then its workers wait for the task
    // the ring still holds.
    while h.target.luns().contains(&1) {
        std::thread::yield_now();
    }
    let r = loop {
        if let Ok(r) = rx.try_recv() {
            break r;
        }
        ring.reap_blocking();
    };
    assert_eq!(r.status, Status::GOOD);
    // The task's completion wakes the stopping workers: the removal ends.
    remover.join().unwrap().unwrap();
    drop(ring);
}

#[test]
fn task_management_aborts_a_ring_task_or_finds_it_done() {
    if !ring_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let h = file_lun(&dir.path().join("lun.img"), false).unwrap();
    let (ring, _fd) = new_ring();
    let cmd = h.cmd_on(&h.nexus, 1, &cdb10(0x28, 0, 0, 8), 8 * BS, vec![]);
    let tag = cmd.tag;
    let rx = start_on_ring(&h, &ring, cmd);
    let target = Arc::clone(&h.target);
    let nexus = Arc::clone(&h.nexus);
    let tmf = std::thread::spawn(move || {
        target.task_management(&nexus, 1, rustgt_scsi::TmfFunction::AbortTask { tag })
    });
    let r = loop {
        if let Ok(r) = rx.try_recv() {
            break r;
        }
        ring.reap_blocking();
    };
    let answer = tmf.join().unwrap();
    // Either the abort marked the running task (it completes as aborted,
    // and only then does the TMF answer) or the task had completed first.
    match answer {
        rustgt_scsi::TmfResponse::FunctionComplete => {
            assert!(r.aborted, "{r:?}");
            assert_eq!(r.status, Status::TASK_ABORTED);
        }
        rustgt_scsi::TmfResponse::TaskNotFound => {
            assert_eq!(r.status, Status::GOOD);
            assert!(!r.aborted);
        }
        other => panic!("unexpected TMF answer {other:?}"),
    }
    assert!(rx.try_recv().is_err(), "one completion");
    drop(ring);
}

/// Starts 4 writer threads, each writing `rounds` rounds of 4 one-block
/// WRITEs at once through the workers and waiting for them; a writer
/// returns how many were answered, or an error if one waited 10 s (a
/// stall: a buffered one-block write takes microseconds).
fn writers(h: &Arc<Harness>, rounds: u32) -> Vec<std::thread::JoinHandle<Result<u32, String>>> {
    (0..4u32)
        .map(|w| {
            let h = Arc::clone(h);
            std::thread::spawn(move || {
                let mut answered = 0;
                for round in 0..rounds {
                    let rxs: Vec<_> = (0..4u32)
                        .map(|i| {
                            let lba = w * 64 + (round * 4 + i) % 64;
                            let data = vec![w as u8; BS as usize];
                            let cdb = cdb10(0x2A, 0, lba, 1);
                            submit(&h.target, h.cmd_on(&h.nexus, 1, &cdb, 0, data))
                        })
                        .collect();
                    for rx in rxs {
                        let r = rx
                            .recv_timeout(std::time::Duration::from_secs(10))
                            .map_err(|_| {
                                format!("writer {w}: a WRITE waited 10 s, stalled (round {round})")
                            })?;
                        if r.status != Status::GOOD {
                            return Err(format!("writer {w}: {r:?}"));
                        }
                        answered += 1;
                    }
                }
                Ok(answered)
            })
        })
        .collect()
}

/// One READ of a block through this thread's ring, or through the
/// workers when the ring gives it back (it overlaps a write in progress:
/// the ring never waits for an LBA lock).
fn read_via_ring(h: &Harness, ring: &Ring, lba: u32) -> Response {
    let cmd = h.cmd_on(&h.nexus, 1, &cdb10(0x28, 0, lba, 1), BS, vec![]);
    let (tx, rx) = mpsc::channel();
    let done = Box::new(move |r| {
        let _ = tx.send(r);
    });
    match h.target.run_on_ring(cmd, done, Some(ring)) {
        Ok(()) => loop {
            if let Ok(r) = rx.try_recv() {
                return r;
            }
            assert!(ring.in_flight() > 0, "no completion and nothing in flight");
            ring.reap_blocking();
        },
        Err((cmd, _)) => h.exec(cmd),
    }
}

#[test]
fn worker_writes_are_never_left_queued_after_ring_reads() {
    // Ring completions end tasks off the workers and may wake one. They
    // once counted a wake-up even when every sleeping worker already had
    // one coming; the count outlived the sleepers, the next sleeper looked
    // as if a wake-up were on its way, and writes queued after the reads
    // stopped waited for an enqueue that never came (a soak of 4 sessions
    // x QD16 of writes then reads all but stopped). Phases of writes beside
    // ring reads alternate with writes alone; every write must be answered
    // within 10 s (a stall, not a slow machine).
    if !ring_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(h) = file_lun(&dir.path().join("lun.img"), false) else {
        return;
    };
    let h = Arc::new(h);
    let (ring, _fd) = new_ring();
    let mut answered = 0;
    for _ in 0..20 {
        let mixed = writers(&h, 50);
        let mut reads = 0u32;
        while reads < 5_000 && !mixed.iter().all(|t| t.is_finished()) {
            assert_eq!(read_via_ring(&h, &ring, reads % 256).status, Status::GOOD);
            reads += 1;
        }
        for t in mixed.into_iter().chain(writers(&h, 10)) {
            answered += t.join().unwrap().unwrap_or_else(|e| panic!("{e}"));
        }
    }
    assert_eq!(answered, 20 * 4 * (50 + 10) * 4);
    drop(ring);
}

/// Whether the eventfd `Ring::start` returned (non-blocking) has been
/// signalled since the last look (reads its counter to zero).
fn eventfd_signalled(fd: &std::fs::File) -> bool {
    use std::io::Read;
    let mut counter = [0u8; 8];
    matches!((&*fd).read(&mut counter), Ok(8)) && counter != [0; 8]
}

#[test]
fn cached_reads_are_batched_on_the_ring_and_answered_in_one_enter() {
    // On a thread with a ring, a READ of a file LUN after the first of the
    // turn is not tried inline (one preadv2 each): `run_inline` gives it
    // back, the ring queues it,
    // and `submit_and_reap` reads every queued one (cached pages inside
    // the one io_uring_enter) and runs the completions at once, without
    // signalling the eventfd the ring's task waits on.
    if !ring_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lun.img");
    let h = file_lun(&path, false).unwrap();
    // The data goes in through the page cache, so every read hits it.
    let data = pattern(FILE_BLOCKS as usize, 0x3C);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .write_all_at(&data, 0)
        .unwrap();
    let (ring, fd) = new_ring();
    let wakes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let w = Arc::clone(&wakes);
    ring.defer_submission(Box::new(move || {
        w.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }));
    let (tx, rx) = mpsc::channel();
    let mut lbas = Vec::new();
    // The turn's first read is tried inline (one preadv2) and served.
    let first = h.cmd_on(&h.nexus, 1, &cdb10(0x28, 0, 100, 2), 2 * BS, vec![]);
    let r = h
        .target
        .run_inline(first, Some(&ring))
        .expect("the turn's first read inline");
    let at = 100 * BS as usize;
    assert_eq!(&r.data_in[..], &data[at..at + 2 * BS as usize]);
    for i in 0..16u32 {
        let lba = (i * 37) % (FILE_BLOCKS as u32 - 2);
        let cmd = h.cmd_on(&h.nexus, 1, &cdb10(0x28, 0, lba, 2), 2 * BS, vec![]);
        let tag = cmd.tag;
        let cmd = h
            .target
            .run_inline(cmd, Some(&ring))
            .expect_err("left to the ring");
        let tx = tx.clone();
        let taken = h.target.run_on_ring(
            cmd,
            Box::new(move |r| {
                let _ = tx.send((tag, r));
            }),
            Some(&ring),
        );
        assert!(taken.is_ok(), "the ring takes the read");
        lbas.push((tag, lba));
    }
    assert_eq!(ring.in_flight(), 16);
    assert!(rx.try_recv().is_err(), "nothing answered before the batch");
    assert_eq!(
        wakes.load(std::sync::atomic::Ordering::Relaxed),
        1,
        "one wake-up of the ring's task for the whole batch"
    );
    let mut answered = ring.submit_and_reap();
    let mut spins = 0;
    // Cached pages complete inside the enter; should the kernel still have
    // punted one, wait for it (bounded by the ops in flight).
    while answered < 16 && ring.in_flight() > 0 && spins < 64 {
        answered += ring.reap_blocking();
        spins += 1;
    }
    assert_eq!(answered, 16);
    assert_eq!(ring.in_flight(), 0);
    for _ in 0..16 {
        let (tag, r) = rx.try_recv().expect("answered");
        let lba = lbas.iter().find(|(t, _)| *t == tag).unwrap().1 as usize;
        assert_eq!(r.status, Status::GOOD, "{r:?}");
        let at = lba * BS as usize;
        assert_eq!(&r.data_in[..], &data[at..at + 2 * BS as usize], "lba {lba}");
    }
    assert!(rx.try_recv().is_err(), "one completion each");
    if answered == 16 && spins == 0 {
        assert!(
            !eventfd_signalled(&fd),
            "completions reaped in the turn leave the eventfd quiet"
        );
    }
    // Nothing queued: no system call and nothing to run.
    assert_eq!(ring.submit_and_reap(), 0);
    let stats = h.target.lun_stats(1).unwrap();
    assert_eq!(stats.read_commands, 17);
    // The batch ended: the next turn's first read is tried inline again.
    let again = h.cmd_on(&h.nexus, 1, &cdb10(0x28, 0, 0, 1), BS, vec![]);
    assert!(h.target.run_inline(again, Some(&ring)).is_ok());

    // An op that completes after the batch (here: one submitted and then
    // left to the kernel) still signals the eventfd.
    let rx = start_on_ring(
        &h,
        &ring,
        h.cmd_on(&h.nexus, 1, &cdb10(0x28, 0, 0, 1), BS, vec![]),
    );
    ring.flush();
    let r = loop {
        if let Ok(r) = rx.try_recv() {
            break r;
        }
        ring.reap_blocking();
    };
    assert_eq!(&r.data_in[..], &data[..BS as usize]);
    assert!(
        eventfd_signalled(&fd),
        "a completion outside the batch signals"
    );
    drop(ring);
}

#[test]
fn without_a_ring_cached_reads_still_run_inline() {
    // The fallback (io_uring off or unavailable): the thread has no ring,
    // so a cached READ runs inline as before.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lun.img");
    let h = file_lun(&path, false).unwrap();
    let data = pattern(4, 0x11);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .write_all_at(&data, 8 * u64::from(BS))
        .unwrap();
    let cmd = h.cmd_on(&h.nexus, 1, &cdb10(0x28, 0, 8, 4), 4 * BS, vec![]);
    let r = h.target.run_inline(cmd, None).expect("served inline");
    assert_eq!(r.status, Status::GOOD);
    assert_eq!(r.data_in, data);
}

#[test]
fn a_queued_ring_read_holds_off_a_compare_and_write_until_it_completes() {
    // A READ queued on the ring (not yet submitted) counts as a read in
    // flight: a COMPARE AND WRITE over its blocks on the workers waits for
    // it, so the read returns the data from before the write, whatever the
    // threads' order. (A plain WRITE would not wait: SBC orders nothing
    // between a read and an overlapping write, and reads take no range.)
    if !ring_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lun.img");
    let h = file_lun(&path, false).unwrap();
    let (ring, _fd) = new_ring();
    ring.defer_submission(Box::new(|| {}));
    let cmd = h.cmd_on(&h.nexus, 1, &cdb10(0x28, 0, 0, 8), 8 * BS, vec![]);
    let rx = start_on_ring(&h, &ring, cmd);
    // Block 0 holds zeros, so the compare matches and the write goes on.
    let written = pattern(1, 0x77);
    let mut data = vec![0u8; BS as usize];
    data.extend_from_slice(&written);
    let wrx = submit(
        &h.target,
        h.cmd_on(&h.nexus, 1, &cdb16(0x89, 0, 0, 1), 0, data),
    );
    // The read is not submitted yet: the COMPARE AND WRITE must wait.
    assert!(
        wrx.recv_timeout(std::time::Duration::from_millis(300))
            .is_err(),
        "the COMPARE AND WRITE ended before the queued read"
    );
    let mut rounds = 0;
    let r = loop {
        if let Ok(r) = rx.try_recv() {
            break r;
        }
        assert!(rounds < 1000, "the read never completed");
        rounds += 1;
        if ring.submit_and_reap() == 0 {
            ring.reap_blocking();
        }
    };
    assert_eq!(r.status, Status::GOOD);
    assert!(
        r.data_in.iter().all(|&b| b == 0),
        "the queued read saw the COMPARE AND WRITE's data"
    );
    let w = wrx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("the COMPARE AND WRITE ended");
    assert_eq!(w.status, Status::GOOD);
    let r = h.exec(h.cmd_on(&h.nexus, 1, &cdb10(0x28, 0, 0, 1), BS, vec![]));
    assert_eq!(r.data_in, written);
    drop(ring);
}
