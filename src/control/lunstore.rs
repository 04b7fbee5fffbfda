//! [`LunStore`]: the backstore the SCSI core sees for every LUN the daemon
//! builds. It forwards each call to the LUN's current store (an engine or
//! its I/O context) and meters it.
//!
//! Why a wrapper: the SCSI core holds one `Arc<dyn Backstore>` per LUN for
//! the LUN's life and reads the geometry from it on every command. Swapping
//! what is behind that Arc is how a LUN is resized (a store reopened at the
//! new size) or gets a new I/O context, without stopping the LUN.
//!
//! Ops a reactor's io_uring does on the store's file bypass these calls:
//! [`LunStore::uring_file`](Backstore::uring_file) hands the ring its
//! counters as a meter, so they count the same.
//!
//! Guarantees: a swap never waits for I/O (calls clone the current store's
//! Arc before doing I/O); calls already running finish on the store they
//! started on; counters are lock-free. The current store is read without a
//! lock (`arc-swap`): the reactors look at it several times per command
//! (its geometry first of all), and a lock's counter written by every
//! reactor would move between their CPUs' caches each time.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use arc_swap::ArcSwap;

use rustgt_backstore::uring::{IoKind, IoMeter, UringFile};
use rustgt_backstore::StreamHint;
use rustgt_backstore::{
    Backstore, BackstoreError, Extent, Faults, Geometry, IoBuf, IoContext, Nonblocking, Result,
};

use crate::api::proto::{DeviceTurnsView, ReadaheadStatsView, StoreStatsView};
use crate::api::stats::{AtomicLog2, Histogram};

/// Longest wait in [`LunStore::replace`] for calls on the old store.
pub const QUIESCE_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

/// What a LUN currently runs on.
#[derive(Debug, Clone)]
pub struct Current {
    /// What I/O goes to: the I/O context when there is one, else the engine.
    pub store: Arc<dyn Backstore>,
    /// The LUN's I/O context, for its policy and statistics.
    pub io_context: Option<Arc<IoContext>>,
    /// The LUN's live faults when it has a `fault` table: `store` is then
    /// the fault wrapper around the context (or engine).
    pub faults: Option<Arc<Faults>>,
    /// The lock on the LUN's image (file, mmap and block-device LUNs),
    /// held as long as this store is (docs/ARCHITECTURE.md, "One daemon
    /// per image").
    pub image_lock: Option<Arc<rustgt_backstore::image_lock::ImageLock>>,
}

/// The swappable, metered store of one LUN.
#[derive(Debug)]
pub struct LunStore {
    current: ArcSwap<Current>,
    /// Held by [`LunStore::replace`] while it waits for the calls on the
    /// old store; new calls that find `swapping` set wait for it.
    swap: Mutex<()>,
    swapping: AtomicBool,
    /// Shared with the io_uring ops in flight, which report here.
    counters: Arc<Counters>,
}

#[derive(Debug, Default)]
struct Counters {
    /// Tells the control plane when the store's client was blocklisted.
    fenced: FenceWatch,
    reads: AtomicU64,
    writes: AtomicU64,
    read_bytes: AtomicU64,
    write_bytes: AtomicU64,
    flushes: AtomicU64,
    errors: AtomicU64,
    read_latency_us: AtomicLog2,
    write_latency_us: AtomicLog2,
    sizes: AtomicLog2,
}

/// Hook called when the store reports that its client was blocklisted.
pub type FencedHook = Box<dyn Fn() + Send + Sync>;

/// Least time between two calls of a [`FencedHook`].
pub const FENCED_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Calls its hook, at most once per [`FENCED_EVERY`], when an op fails
/// because the store's client was blocklisted
/// ([`BackstoreError::client_blocklisted`]): such a client stays fenced
/// until it is replaced, so the hook asks the control plane to reopen the
/// LUN. Other errors do nothing.
#[derive(Default)]
struct FenceWatch {
    hook: std::sync::Mutex<Option<FencedHook>>,
    last: std::sync::Mutex<Option<Instant>>,
}

impl std::fmt::Debug for FenceWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FenceWatch").finish_non_exhaustive()
    }
}

impl FenceWatch {
    fn saw(&self, e: &BackstoreError) {
        if !e.client_blocklisted() {
            return;
        }
        {
            let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
            if last.is_some_and(|t| t.elapsed() < FENCED_EVERY) {
                return;
            }
            *last = Some(Instant::now());
        }
        if let Some(hook) = &*self.hook.lock().unwrap_or_else(PoisonError::into_inner) {
            hook();
        }
    }
}

fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

fn get(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

fn micros(since: Instant) -> u64 {
    micros_of(since.elapsed())
}

fn micros_of(took: std::time::Duration) -> u64 {
    u64::try_from(took.as_micros()).unwrap_or(u64::MAX)
}

impl LunStore {
    pub fn new(current: Current) -> Arc<LunStore> {
        Arc::new(LunStore {
            current: ArcSwap::from_pointee(current),
            swap: Mutex::new(()),
            swapping: AtomicBool::new(false),
            counters: Arc::default(),
        })
    }

    /// What the LUN runs on now.
    pub fn current(&self) -> Current {
        Current::clone(&self.current.load())
    }

    /// The current store for a call that does I/O: its Arc, which counts
    /// the call as running for [`Self::replace`]. Waits while a swap is
    /// under way.
    fn store(&self) -> Arc<dyn Backstore> {
        if self.swapping.load(Ordering::Acquire) {
            drop(self.swap.lock().unwrap_or_else(PoisonError::into_inner));
        }
        Arc::clone(&self.current.load().store)
    }

    /// `f` on the current store, for a call that does no I/O and takes no
    /// lock of the store's (its geometry, what it supports): no Arc is
    /// cloned, so nothing shared is written.
    fn peek<R>(&self, f: impl FnOnce(&dyn Backstore) -> R) -> R {
        f(&*self.current.load().store)
    }

    /// Puts `next` in place once every call already running on the old
    /// store has returned (new calls wait meanwhile), so the new store's
    /// cache cannot read ahead of a write still going to the old one.
    /// Returns what was there: drop it outside any lock (dropping an I/O
    /// context joins its threads). Blocks, at most [`QUIESCE_LIMIT`].
    pub fn replace(&self, next: Current) -> Current {
        let _swap = self.swap.lock().unwrap_or_else(PoisonError::into_inner);
        self.swapping.store(true, Ordering::SeqCst);
        let cur = self.current.load_full();
        // Our own references: the store, and the context when it is the
        // same allocation. Calls in flight hold one more each.
        // (Not with a fault wrapper: that is the store, the context
        // is under it.)
        let mut ours = if cur.io_context.is_some() && cur.faults.is_none() {
            2
        } else {
            1
        };
        // `next` may wrap the old store itself (a new context around the
        // same engine).
        if Arc::ptr_eq(&cur.store, &next.store) {
            ours += 1;
        }
        if next
            .io_context
            .as_ref()
            .is_some_and(|c| Arc::ptr_eq(c.inner(), &cur.store))
        {
            ours += 1;
        }
        let deadline = Instant::now() + QUIESCE_LIMIT;
        while Arc::strong_count(&cur.store) > ours {
            if Instant::now() >= deadline {
                tracing::warn!(
                    "store swap: calls still running after {QUIESCE_LIMIT:?}; swapping anyway"
                );
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        drop(cur);
        let old = self.current.swap(Arc::new(next));
        self.swapping.store(false, Ordering::Release);
        // A `peek` that began before the swap may hold the old value a
        // moment longer (it does no I/O): wait for it, bounded, so the
        // caller is the one that drops it.
        let deadline = Instant::now() + QUIESCE_LIMIT;
        let mut old = old;
        loop {
            match Arc::try_unwrap(old) {
                Ok(current) => return current,
                Err(back) if Instant::now() < deadline => {
                    old = back;
                    std::thread::yield_now();
                }
                Err(back) => return Current::clone(&back),
            }
        }
    }

    pub fn io_context(&self) -> Option<Arc<IoContext>> {
        self.current().io_context
    }

    /// The LUN's live faults, if it takes any.
    pub fn faults(&self) -> Option<Arc<Faults>> {
        self.current().faults
    }

    /// Counters of the requests made to the store.
    pub fn stats(&self) -> StoreStatsView {
        let c = &self.counters;
        StoreStatsView {
            reads: get(&c.reads),
            writes: get(&c.writes),
            read_bytes: get(&c.read_bytes),
            write_bytes: get(&c.write_bytes),
            flushes: get(&c.flushes),
            errors: get(&c.errors),
            read_latency: c.read_latency_us.snapshot("us"),
            write_latency: c.write_latency_us.snapshot("us"),
            request_sizes: c.sizes.snapshot("bytes"),
        }
    }

    /// The I/O context's statistics, if the LUN has one.
    pub fn readahead_stats(&self) -> Option<ReadaheadStatsView> {
        let ctx = self.io_context()?;
        let s = ctx.stats();
        let (cache_bytes, cache_limit_bytes) = ctx.cache_usage();
        Some(ReadaheadStatsView {
            policy: ctx.policy_label(),
            passthrough: ctx.is_passthrough(),
            requests: s.requests,
            bytes: s.bytes,
            hit_bytes: s.hit_bytes,
            miss_bytes: s.miss_bytes,
            wasted_bytes: s.wasted_bytes,
            backing_requests: s.backing_requests,
            backing_bytes: s.backing_bytes,
            backing_sizes: Histogram::from_backstore("bytes", &s.backing_sizes, 1),
            // A passthrough context does not time its reads: they are the
            // store's, timed by its counters.
            latency: if ctx.is_passthrough() {
                self.counters.read_latency_us.snapshot("us")
            } else {
                Histogram::from_backstore("us", &s.latency_ns, 1000)
            },
            cache_bytes,
            cache_limit_bytes,
            device_turns: ctx.device_turns().map(|(device, g)| DeviceTurnsView {
                device,
                turns: g.turns,
                budget_ends: g.preemptions,
                stale_turns: g.stale_turns,
            }),
        })
    }

    fn count<T>(&self, r: Result<T>) -> Result<T> {
        if let Err(e) = &r {
            add(&self.counters.errors, 1);
            self.counters.fenced.saw(e);
        }
        r
    }

    /// Calls `hook` (at most once per [`FENCED_EVERY`]) when an op fails
    /// because the store's client was blocklisted ([`FenceWatch`]).
    pub fn on_fenced(&self, hook: FencedHook) {
        *self
            .counters
            .fenced
            .hook
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(hook);
    }

    fn count_write(&self, len: u64, started: Instant) {
        let c = &self.counters;
        add(&c.writes, 1);
        add(&c.write_bytes, len);
        c.sizes.record(len);
        c.write_latency_us.record(micros(started));
    }
}

impl Backstore for LunStore {
    fn kind(&self) -> &'static str {
        self.peek(|s| s.kind())
    }

    fn geometry(&self) -> Geometry {
        self.peek(|s| s.geometry())
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.read_at_hinted(buf, offset, StreamHint::default())
    }

    fn read_buf(&self, offset: u64, len: usize) -> Result<IoBuf> {
        self.read_buf_hinted(offset, len, StreamHint::default())
    }

    fn read_at_hinted(&self, buf: &mut [u8], offset: u64, hint: StreamHint) -> Result<()> {
        let started = Instant::now();
        let r = self.store().read_at_hinted(buf, offset, hint);
        if matches!(r, Err(BackstoreError::WouldBlock)) {
            // A reactor's attempt, run again on a worker: counted there.
            return r;
        }
        let c = &self.counters;
        let len = buf.len() as u64;
        add(&c.reads, 1);
        add(&c.read_bytes, len);
        c.sizes.record(len);
        c.read_latency_us.record(micros(started));
        self.count(r)
    }

    fn read_buf_hinted(&self, offset: u64, len: usize, hint: StreamHint) -> Result<IoBuf> {
        let started = Instant::now();
        let r = self.store().read_buf_hinted(offset, len, hint);
        if matches!(r, Err(BackstoreError::WouldBlock)) {
            return r;
        }
        let c = &self.counters;
        let n = len as u64;
        add(&c.reads, 1);
        add(&c.read_bytes, n);
        c.sizes.record(n);
        c.read_latency_us.record(micros(started));
        self.count(r)
    }

    fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> Result<()> {
        let started = Instant::now();
        let r = self.store().write_at(buf, offset, fua);
        self.count_write(buf.len() as u64, started);
        self.count(r)
    }

    fn flush(&self) -> Result<()> {
        add(&self.counters.flushes, 1);
        let r = self.store().flush();
        self.count(r)
    }

    fn write_same(&self, pattern: &[u8], offset: u64, len: u64) -> Result<()> {
        let started = Instant::now();
        let r = self.store().write_same(pattern, offset, len);
        self.count_write(len, started);
        self.count(r)
    }

    fn unmap(&self, offset: u64, len: u64) -> Result<()> {
        let r = self.store().unmap(offset, len);
        self.count(r)
    }

    fn extents(&self, offset: u64, len: u64) -> Result<Vec<Extent>> {
        self.store().extents(offset, len)
    }

    fn supports_write_same(&self) -> bool {
        self.peek(|s| s.supports_write_same())
    }

    fn supports_unmap(&self) -> bool {
        self.peek(|s| s.supports_unmap())
    }

    /// The engine's watch: an engine swapped in later (a resize or a
    /// readahead change keeps the engine) is not watched again.
    fn watch_capacity(&self, hook: Box<dyn Fn(u64) + Send + Sync>) -> bool {
        self.store().watch_capacity(hook)
    }

    fn shared_state(&self) -> Option<Arc<dyn rustgt_backstore::shared::SharedState>> {
        self.store().shared_state()
    }

    fn compare_and_write(
        &self,
        offset: u64,
        verify: &[u8],
        write: &[u8],
    ) -> Option<rustgt_backstore::Result<Option<usize>>> {
        self.store().compare_and_write(offset, verify, write)
    }

    fn async_io(&self) -> Option<rustgt_backstore::aio::AsyncStore> {
        let store = self.store();
        let mut a = store.async_io()?;
        // Ops in flight count as calls on the store for `replace`.
        a.holds.push(store);
        a.meters
            .push(Arc::clone(&self.counters) as Arc<dyn IoMeter>);
        Some(a)
    }

    fn nonblocking(&self) -> Nonblocking {
        self.peek(|s| s.nonblocking())
    }

    fn has_uring_file(&self) -> bool {
        self.peek(|s| s.has_uring_file())
    }

    /// The current store's file, metered here too.
    fn uring_file(&self) -> Option<UringFile> {
        let store = self.store();
        let mut f = store.uring_file()?;
        // Ops in flight count as calls on the store for `replace`.
        f.holds.push(store);
        f.meters
            .push(Arc::clone(&self.counters) as Arc<dyn IoMeter>);
        Some(f)
    }
}

/// What a reactor's io_uring did for this LUN counts as if it had gone
/// through [`LunStore`]'s own calls.
impl IoMeter for Counters {
    fn io_done(&self, kind: IoKind, len: u64, took: std::time::Duration, ok: bool) {
        let us = micros_of(took);
        match kind {
            IoKind::Read => {
                add(&self.reads, 1);
                add(&self.read_bytes, len);
                self.sizes.record(len);
                self.read_latency_us.record(us);
            }
            IoKind::Write => {
                add(&self.writes, 1);
                add(&self.write_bytes, len);
                self.sizes.record(len);
                self.write_latency_us.record(us);
            }
            IoKind::Flush => add(&self.flushes, 1),
        }
        if !ok {
            add(&self.errors, 1);
        }
    }

    fn io_failed(&self, error: &BackstoreError) {
        self.fenced.saw(error);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustgt_backstore::RamBackstore;

    fn ram(size: u64) -> Arc<dyn Backstore> {
        Arc::new(RamBackstore::new(size, 512, false).expect("ram store"))
    }

    #[test]
    fn forwards_and_counts() {
        let s = LunStore::new(Current {
            store: ram(1 << 20),
            io_context: None,
            faults: None,
            image_lock: None,
        });
        s.write_at(&[7u8; 4096], 0, false).expect("write");
        let mut buf = [0u8; 4096];
        s.read_at(&mut buf, 0).expect("read");
        assert_eq!(buf, [7u8; 4096]);
        assert!(s.read_at(&mut buf, 1 << 20).is_err(), "beyond the end");
        s.flush().expect("flush");
        let st = s.stats();
        assert_eq!((st.reads, st.writes, st.flushes, st.errors), (2, 1, 1, 1));
        assert_eq!((st.read_bytes, st.write_bytes), (8192, 4096));
        assert_eq!(st.request_sizes.count, 3);
        assert!(s.readahead_stats().is_none());
    }

    #[test]
    fn a_swap_changes_the_geometry_seen_by_the_next_call() {
        let s = LunStore::new(Current {
            store: ram(1 << 20),
            io_context: None,
            faults: None,
            image_lock: None,
        });
        assert_eq!(s.geometry().size_bytes(), 1 << 20);
        let old = s.replace(Current {
            store: ram(2 << 20),
            io_context: None,
            faults: None,
            image_lock: None,
        });
        assert_eq!(old.store.geometry().size_bytes(), 1 << 20);
        assert_eq!(s.geometry().size_bytes(), 2 << 20);
        let mut buf = [0u8; 512];
        s.read_at(&mut buf, (2 << 20) - 512)
            .expect("new end readable");
    }

    /// A RAM store whose next write waits until `release` is sent.
    #[derive(Debug)]
    struct Held {
        ram: Arc<dyn Backstore>,
        entered: std::sync::mpsc::SyncSender<()>,
        release: Mutex<std::sync::mpsc::Receiver<()>>,
    }

    impl Backstore for Held {
        fn kind(&self) -> &'static str {
            "held"
        }
        fn geometry(&self) -> Geometry {
            self.ram.geometry()
        }
        fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
            self.ram.read_at(buf, offset)
        }
        fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> Result<()> {
            let _ = self.entered.send(());
            let _ = self
                .release
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .recv_timeout(std::time::Duration::from_secs(10));
            self.ram.write_at(buf, offset, fua)
        }
        fn flush(&self) -> Result<()> {
            self.ram.flush()
        }
    }

    #[test]
    fn a_swap_waits_for_the_calls_running_on_the_old_store() {
        let (entered_tx, entered) = std::sync::mpsc::sync_channel(1);
        let (release, release_rx) = std::sync::mpsc::channel();
        let old_ram = ram(1 << 20);
        let s = LunStore::new(Current {
            store: Arc::new(Held {
                ram: Arc::clone(&old_ram),
                entered: entered_tx,
                release: Mutex::new(release_rx),
            }),
            io_context: None,
            faults: None,
            image_lock: None,
        });
        let swapped = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let writer = scope.spawn(|| s.write_at(&[9u8; 512], 0, false));
            entered
                .recv_timeout(std::time::Duration::from_secs(10))
                .expect("the write started");
            let swapper = scope.spawn(|| {
                let old = s.replace(Current {
                    store: ram(2 << 20),
                    io_context: None,
                    faults: None,
                    image_lock: None,
                });
                swapped.store(true, Ordering::SeqCst);
                old
            });
            // The write on the old store is still running: no swap yet,
            // and the geometry is still the old one.
            std::thread::sleep(std::time::Duration::from_millis(100));
            assert!(
                !swapped.load(Ordering::SeqCst),
                "swapped under a running call"
            );
            assert_eq!(s.geometry().size_bytes(), 1 << 20);
            release.send(()).expect("release");
            writer.join().expect("writer").expect("write");
            let old = swapper.join().expect("swapper");
            assert!(swapped.load(Ordering::SeqCst));
            assert_eq!(old.store.kind(), "held");
        });
        // The write went to the old store, and the new one is in place.
        let mut buf = [0u8; 512];
        old_ram.read_at(&mut buf, 0).expect("read old");
        assert_eq!(buf, [9u8; 512]);
        assert_eq!(s.geometry().size_bytes(), 2 << 20);
    }

    #[test]
    fn only_a_blocklisted_client_calls_the_fenced_hook_at_most_every_few_seconds() {
        use std::sync::atomic::AtomicUsize;
        let calls = Arc::new(AtomicUsize::new(0));
        let w = FenceWatch::default();
        let c = Arc::clone(&calls);
        *w.hook.lock().expect("hook") = Some(Box::new(move || {
            c.fetch_add(1, Ordering::Relaxed);
        }));
        let fenced = |errno| BackstoreError::Fenced(std::io::Error::from_raw_os_error(errno));
        // A lock held elsewhere, or another error: nothing to reopen.
        w.saw(&fenced(libc::EROFS));
        w.saw(&BackstoreError::Read(std::io::Error::from_raw_os_error(
            libc::EIO,
        )));
        assert_eq!(calls.load(Ordering::Relaxed), 0);
        // Blocklisted: once, then not again within FENCED_EVERY.
        w.saw(&fenced(libc::ESHUTDOWN));
        w.saw(&fenced(libc::ESHUTDOWN));
        assert_eq!(calls.load(Ordering::Relaxed), 1);
        *w.last.lock().expect("last") = Instant::now().checked_sub(FENCED_EVERY);
        w.saw(&fenced(libc::ESHUTDOWN));
        assert_eq!(calls.load(Ordering::Relaxed), 2);
    }
}
