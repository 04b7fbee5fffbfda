//! Heap allocations per command on the reactor's path, counted by a
//! global allocator that counts the calling thread's allocations only.
//! A session's 4 KiB reads go through `PortConn::on_event_at` the way a
//! driver's turn sends them: on a page-cached file LUN the turn's first
//! read runs inline (`preadv2(RWF_NOWAIT)`) and the others on this
//! test's io_uring (the test thread plays the reactor), answered by
//! `end_ring_batch`; on a RAM LUN every
//! read runs inline. After a warm-up (pools, slabs and queues grown to
//! the turn's size) more turns must not allocate at all.
//!
//! The thread-pool path (no run to completion) is counted on all threads.
//!
//! The iSCSI core's parsing and encoding are not in the count: the test
//! plays the driver and hands the port the core's events directly.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use rustgt_backstore::{uring, Backstore, FileBackstore, FileOptions};
use rustgt_iscsi::negotiate::{SessionParams, SessionType, Transport};
use rustgt_iscsi::{Event, PortalConfig, SessionInfo, TargetInfo};
use rustgt_port::{ConnInfo, Port, PortConn, PortMsg, Ring};
use rustgt_scsi::{CdbBytes, Command, IoBuf, LunConfig, Nexus, ScsiTarget, Status, TaskAttr};

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

/// Allocations of every thread.
static ALL_ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

/// The system allocator, counting each thread's allocations.
struct Counting;

// SAFETY: every call is forwarded unchanged to the system allocator; the
// counter is a const-initialised thread-local without a destructor, so
// touching it never allocates or re-enters the allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        ALL_ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on as it is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        ALL_ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        ALL_ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as for `alloc`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as for `alloc`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// Held by every test of this binary: the workers' test counts all
/// threads.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

const TARGET: &str = "iqn.2026-11.org.rustgt:alloc-test";
const BS: u32 = 512;
const BLOCKS: u64 = 2048;
/// Reads one driver turn hands over before it ends its ring batch.
const PER_TURN: u32 = 8;
const WORKER_WARM_TURNS: u32 = 600;

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("address")
}

/// A RAM LUN of BLOCKS blocks of BS bytes.
fn ram_store() -> Arc<dyn Backstore> {
    rustgt_backstore::open(&rustgt_backstore::BackstoreSpec {
        kind: rustgt_backstore::EngineKind::Ram,
        path: None,
        size: Some(BLOCKS * u64::from(BS)),
        block_size: BS,
        read_only: false,
        thin: false,
        rbd: None,
    })
    .expect("ram store")
}

/// A port serving TARGET with `store` as LUN 0, one logged-in connection
/// of it, and that session's nexus.
fn session(store: Arc<dyn Backstore>) -> (Arc<Port>, PortConn, Arc<Nexus>) {
    let port = Port::new(PortalConfig {
        targets: vec![TargetInfo {
            name: TARGET.into(),
            alias: None,
            tpgt: 1,
            portals: vec!["127.0.0.1:3260".into()],
            iser_portals: vec![],
            acl: vec![],
            chap: Default::default(),
            groups: Vec::new(),
            redirect: None,
        }],
        ..PortalConfig::default()
    });
    let t = ScsiTarget::new(TARGET);
    let mut lc = LunConfig::new(store);
    lc.workers = 1;
    t.add_lun(0, lc).expect("add lun");
    port.add_target(TARGET, t);
    let peer = addr("127.0.0.1:50123");
    let mut pc = port.open(ConnInfo {
        transport: Transport::Tcp,
        peer,
        local: addr("127.0.0.1:3260"),
        probe: None,
        admitted: port.admit(peer).expect("under the caps"),
    });
    let nexus = Arc::new(Nexus {
        id: 77,
        initiator_port: "iqn.2026-11.org.rustgt:alloc-initiator,i,0x800000123456".into(),
        target_port: format!("{TARGET},t,0x0001"),
        relative_port_id: 1,
        port_group: 1,
        lun_map: None,
    });
    let none = pc.on_event(Event::LoggedIn(SessionInfo {
        target: TARGET.into(),
        initiator: "iqn.2026-11.org.rustgt:alloc-initiator".into(),
        isid: [0x80, 0, 0, 0x12, 0x34, 0x56],
        tsih: 1,
        cid: 1,
        session_type: SessionType::Normal,
        nexus: Arc::clone(&nexus),
        params: SessionParams::default(),
    }));
    assert!(none.is_none());
    pc.login_done();
    (port, pc, nexus)
}

/// What one turn did.
#[derive(Debug, Default, Clone, Copy)]
struct Turn {
    inline: u32,
    later: u32,
    /// Reads waiting on the ring when the turn ended its batch.
    on_ring: u32,
    ring_completions: bool,
}

/// One driver turn: PER_TURN 4 KiB READ(10)s at spread LBAs, the ring's
/// batch ended, and every response taken (waiting on the ring for reads
/// the page cache did not hold, or on the workers).
fn turn(pc: &mut PortConn, ring: Option<&Ring>, nexus: &Arc<Nexus>, tag: &mut u64) -> Turn {
    let mut t = Turn::default();
    for _ in 0..PER_TURN {
        *tag += 1;
        let lba = u32::try_from((*tag * 8) % (BLOCKS - 8)).expect("small");
        let mut cdb = [0u8; 10];
        cdb[0] = 0x28;
        cdb[2..6].copy_from_slice(&lba.to_be_bytes());
        cdb[7..9].copy_from_slice(&8u16.to_be_bytes());
        let cmd = Command {
            nexus: Arc::clone(nexus),
            lun: 0,
            tag: *tag,
            cdb: CdbBytes::new(&cdb),
            attr: TaskAttr::Simple,
            data_in_len: 4096,
            data_out: IoBuf::default(),
        };
        if let Some(resp) = pc.on_event_at(Event::Command(cmd), Instant::now(), ring) {
            assert_eq!(resp.status, Status::GOOD);
            assert_eq!(resp.data_in.len(), 4096);
            t.inline += 1;
        }
    }
    t.on_ring = u32::try_from(ring.map_or(0, Ring::in_flight)).expect("small");
    t.ring_completions = pc.end_ring_batch(ring);
    let mut rounds = 0u32;
    while t.inline + t.later < PER_TURN {
        match pc.try_recv() {
            Some(PortMsg::Done(resp)) => {
                assert_eq!(resp.status, Status::GOOD);
                assert_eq!(resp.data_in.len(), 4096);
                t.later += 1;
            }
            Some(other) => panic!("unexpected message {other:?}"),
            None => {
                rounds += 1;
                assert!(rounds < 100_000, "responses never came");
                if let Some(ring) = ring.filter(|r| r.in_flight() > 0) {
                    ring.reap_blocking();
                } else {
                    std::thread::yield_now();
                }
            }
        }
    }
    t
}

/// Allocations of `turns` turns on this thread, after `warm` turns.
fn count(
    pc: &mut PortConn,
    ring: Option<&Ring>,
    nexus: &Arc<Nexus>,
    warm: u32,
    turns: u32,
) -> (u64, Turn) {
    let mut tag = 0u64;
    for _ in 0..warm {
        turn(pc, ring, nexus, &mut tag);
    }
    let mut sum = Turn::default();
    let before = allocations();
    for _ in 0..turns {
        let t = turn(pc, ring, nexus, &mut tag);
        sum.inline += t.inline;
        sum.later += t.later;
        sum.on_ring += t.on_ring;
        sum.ring_completions |= t.ring_completions;
    }
    (allocations() - before, sum)
}

#[test]
fn reads_on_the_ring_and_inline_allocate_nothing_in_steady_state() {
    let _serial = serial();
    if let Err(why) = uring::probe() {
        // tests/run sets RUSTGT_TEST_STRICT: there the ring must be there.
        assert!(
            std::env::var_os("RUSTGT_TEST_STRICT").is_none(),
            "io_uring unavailable: {why} (RUSTGT_TEST_STRICT is set)"
        );
        eprintln!("skipping: io_uring unavailable here: {why}");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("lun.img");
    let opts = FileOptions {
        size: Some(BLOCKS * u64::from(BS)),
        block_size: BS,
        read_only: false,
        thin: false,
        direct: false,
    };
    let store = FileBackstore::open(&path, &opts).expect("file store");
    // Real data in the page cache, not holes.
    store
        .write_at(&vec![0x5a; (BLOCKS * u64::from(BS)) as usize], 0, false)
        .expect("fill");
    let (_port, mut pc, nexus) = session(Arc::new(store));
    let (ring, _fd) = Ring::start().expect("ring").expect("io_uring enabled");
    // As on a reactor: a turn's ops go to the kernel when the turn ends.
    ring.defer_submission(Box::new(|| {}));

    let (few, t_few) = count(&mut pc, Some(&ring), &nexus, 64, 50);
    let (many, t_many) = count(&mut pc, Some(&ring), &nexus, 0, 500);
    drop(ring);
    eprintln!("file LUN: {few} allocations in 50 turns {t_few:?}, {many} in 500 {t_many:?}");
    assert!(
        t_many.inline > 0 && t_many.on_ring > 0 && t_many.ring_completions,
        "both paths served reads: {t_many:?}"
    );
    assert_eq!(
        many,
        0,
        "{} reads through the port, inline and on the ring, allocated",
        500 * PER_TURN
    );
    assert_eq!(few, 0);
}

#[test]
fn reads_of_a_memory_lun_run_inline_without_allocating() {
    let _serial = serial();
    let store = ram_store();
    let (_port, mut pc, nexus) = session(store);
    let (n, t) = count(&mut pc, None, &nexus, 64, 500);
    eprintln!("RAM LUN: {n} allocations in 500 turns {t:?}");
    assert_eq!(t.inline, 500 * PER_TURN, "every read inline");
    assert_eq!(n, 0);
}

#[test]
fn reads_on_the_workers_allocate_nothing_in_steady_state() {
    // The thread-pool path (`[reactor] io_uring = "off"`, or a port that
    // does not run commands to completion): every read goes to the LUN's
    // worker and comes back through the connection's channel. Counted on
    // every thread, since the worker allocates on its own; the tests of
    // this binary take SERIAL so that no other test allocates meanwhile.
    // The warm-up fills this thread's buffer cache (8 MiB): until then the
    // buffers the worker takes and this thread frees stay here, and the
    // worker allocates new ones.
    let _serial = serial();
    let store = ram_store();
    let (port, mut pc, nexus) = session(store);
    port.set_run_to_completion(false);
    let mut tag = 0u64;
    for _ in 0..WORKER_WARM_TURNS {
        turn(&mut pc, None, &nexus, &mut tag);
    }
    let before = ALL_ALLOCATIONS.load(Ordering::Relaxed);
    let mut later = 0;
    for _ in 0..500 {
        later += turn(&mut pc, None, &nexus, &mut tag).later;
    }
    let n = ALL_ALLOCATIONS.load(Ordering::Relaxed) - before;
    eprintln!("workers: {n} allocations on all threads in 500 turns, {later} reads");
    assert_eq!(later, 500 * PER_TURN, "every read on the workers");
    // The worker path's own steps allocate nothing (0 measured); the
    // bound leaves room for the channel between threads, whose blocks
    // are reused unless the two ends race, never one per command.
    assert!(
        n < u64::from(later) / 16,
        "{n} allocations for {later} reads on the workers"
    );
}
