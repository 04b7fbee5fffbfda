//! The threaded I/O context: a [`Core`] behind one mutex, a pool of I/O
//! threads that take coalesced backing reads from its queue, and the
//! [`Backstore`] face the SCSI core calls.
//!
//! Guarantees:
//! - demand reads wait only for their own pages; readahead completes on the
//!   I/O threads, never on the caller's;
//! - in shared mode a read whose pages are all cached can be served on a
//!   thread that must not block (a reactor's non-blocking attempt); one
//!   that would wait refuses before it changes anything;
//! - the lock is never held across backing I/O;
//! - a read that cannot get its pages cached after a few tries (failing
//!   backing reads, concurrent writes, a thrashing cache) reads directly
//!   from the engine, so it always ends, with the engine's own error;
//! - on a device shared with other LUNs' contexts, backing reads start
//!   only during this context's turn (see [`DeviceGate`]);
//! - dropping the context stops and joins its I/O threads.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, TryLockError};
use std::thread::JoinHandle;
use std::time::Instant;

use super::cache::PAGE;
use super::core::{Core, Ticket};
use super::gate::{next_context_id, DeviceGate, GateStats};
use super::options::IoContextOptions;
use super::policy::{ContextMode, ReadaheadPolicy};
use super::queue::Batch;
use super::stats::IoStats;
use crate::common::{check_range, check_write, len_u64};
use crate::hint::StreamHint;
use crate::{
    buf::IoBuf, error::BackstoreError, error::Result, geometry::DeviceKey, geometry::Extent,
    geometry::Geometry, store::Backstore,
};

/// Attempts to get a read's pages cached before reading directly.
const MAX_RETRIES: u32 = 3;

#[derive(Debug)]
struct State {
    core: Core<Box<[u8]>>,
    stopping: bool,
    /// Order of the backing reads taken from the queue: a context's reads
    /// start at a shared device in this order (see `DeviceGate::enter`).
    next_seq: u64,
}

#[derive(Debug)]
struct Shared {
    inner: Arc<dyn Backstore>,
    /// Kernel readahead on a buffered fd: no cache of ours, just counting.
    passthrough: bool,
    epoch: Instant,
    state: Mutex<State>,
    /// Backing reads queued, or stopping.
    work: Condvar,
    /// Pages filled or dropped, or a write ended.
    done: Condvar,
    /// Turn-taking with the other contexts on the same seeking device.
    gate: Option<Turns>,
    /// Set with `State::stopping`, readable without the state lock (threads
    /// waiting at the gate poll it).
    stop: AtomicBool,
    /// The policy was picked by `readahead = "auto"`.
    auto: AtomicBool,
    /// Shared mode: reads whose pages are all cached may be served on a
    /// thread that must not block (a reactor).
    inline_hits: bool,
    /// A passthrough context's reads, counted without the state lock
    /// (every command of the LUN would take it, from every reactor);
    /// [`IoContext::stats`] adds them in.
    direct: DirectReads,
}

/// Reads passed straight to the engine: each is a demand request, a miss
/// and a backing read of its own length.
#[derive(Debug, Default)]
struct DirectReads {
    requests: AtomicU64,
    bytes: AtomicU64,
    sizes: rustgt_histogram::AtomicLog2Histogram<64>,
}

impl DirectReads {
    fn count(&self, len: u64) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(len, Ordering::Relaxed);
        self.sizes.record(len);
    }

    fn add_to(&self, s: &mut IoStats) {
        let requests = self.requests.load(Ordering::Relaxed);
        let bytes = self.bytes.load(Ordering::Relaxed);
        s.requests += requests;
        s.bytes += bytes;
        s.miss_bytes += bytes;
        s.backing_requests += requests;
        s.backing_bytes += bytes;
        s.backing_sizes.add(&self.sizes.counts(), self.sizes.sum());
    }
}

/// This context's place at its device's gate.
#[derive(Debug)]
struct Turns {
    gate: Arc<DeviceGate>,
    id: u64,
    /// Bytes per turn.
    budget: u64,
}

/// One LUN's I/O context (see the [module docs](super)).
#[derive(Debug)]
pub struct IoContext {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl IoContext {
    /// Wraps `inner` with a context running `opts`.
    pub fn new(inner: Arc<dyn Backstore>, opts: &IoContextOptions) -> Result<Self> {
        Self::build(inner, opts, false)
    }

    /// A context that counts but leaves readahead and caching to the
    /// kernel's page cache (the `kernel` policy on a buffered fd).
    pub fn passthrough(inner: Arc<dyn Backstore>, opts: &IoContextOptions) -> Result<Self> {
        Self::build(inner, opts, true)
    }

    fn build(
        inner: Arc<dyn Backstore>,
        opts: &IoContextOptions,
        passthrough: bool,
    ) -> Result<Self> {
        opts.validate()?;
        let geometry = inner.geometry();
        let gate = if passthrough {
            None
        } else {
            turns(inner.as_ref(), opts)
        };
        let shared = Arc::new(Shared {
            passthrough,
            epoch: Instant::now(),
            state: Mutex::new(State {
                core: Core::new(opts.core_config(geometry.size_bytes())),
                stopping: false,
                next_seq: 0,
            }),
            work: Condvar::new(),
            done: Condvar::new(),
            gate,
            stop: AtomicBool::new(false),
            auto: AtomicBool::new(false),
            inline_hits: opts.mode == ContextMode::Shared,
            direct: DirectReads::default(),
            inner,
        });
        let ctx = IoContext {
            shared,
            threads: Mutex::new(Vec::new()),
        };
        let threads = if passthrough { 0 } else { opts.io_threads };
        for i in 0..threads {
            let shared = Arc::clone(&ctx.shared);
            let handle = std::thread::Builder::new()
                .name(format!("rustgt-ioctx-{i}"))
                .spawn(move || io_loop(&shared))
                .map_err(BackstoreError::Io)?;
            lock(&ctx.threads).push(handle);
        }
        Ok(ctx)
    }

    /// A snapshot of the statistics.
    pub fn stats(&self) -> IoStats {
        let mut s = lock(&self.shared.state).core.stats();
        self.shared.direct.add_to(&mut s);
        s
    }

    /// Bytes held by the readahead cache, and its bound.
    pub fn cache_usage(&self) -> (u64, u64) {
        let st = lock(&self.shared.state);
        (
            st.core.cached_pages() * PAGE,
            st.core.cache_capacity_pages() * PAGE,
        )
    }

    /// The device this context takes turns on, and its gate's counters;
    /// `None` when it does not share a seeking device through a gate.
    pub fn device_turns(&self) -> Option<(String, GateStats)> {
        let t = self.shared.gate.as_ref()?;
        Some((t.gate.key().to_owned(), t.gate.stats()))
    }

    /// The running policy.
    pub fn policy(&self) -> ReadaheadPolicy {
        lock(&self.shared.state).core.config().policy
    }

    /// Changes the policy at run time; readahead state restarts, cached
    /// pages stay. Has no effect on a passthrough context. The policy is
    /// then the one asked for, no longer `auto`'s pick.
    pub fn set_policy(&self, policy: ReadaheadPolicy) {
        lock(&self.shared.state).core.set_policy(policy);
        self.shared.auto.store(false, Ordering::Relaxed);
    }

    /// Records that `readahead = "auto"` picked the running policy.
    pub fn set_auto(&self, auto: bool) {
        self.shared.auto.store(auto, Ordering::Relaxed);
    }

    /// Whether `readahead = "auto"` picked the running policy.
    pub fn is_auto(&self) -> bool {
        self.shared.auto.load(Ordering::Relaxed)
    }

    /// The policy as the admin interface shows it: `streams`, or
    /// `auto (streams)` when `auto` picked it.
    pub fn policy_label(&self) -> String {
        let p = self.policy();
        if self.is_auto() {
            format!("auto ({p})")
        } else {
            p.as_str().to_owned()
        }
    }

    /// Whether reads go straight to the engine (kernel readahead).
    pub fn is_passthrough(&self) -> bool {
        self.shared.passthrough
    }

    /// The wrapped engine.
    pub fn inner(&self) -> &Arc<dyn Backstore> {
        &self.shared.inner
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.shared.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// A read on a thread that must not block (inside a
    /// [`nowait::attempt`](crate::nowait::attempt)): served only when all
    /// its pages are cached and the lock is free, with the policy seeing it
    /// as any read; otherwise it refuses before changing anything, and the
    /// caller runs it again on a worker.
    fn inline_read(&self, buf: &mut [u8], offset: u64, hint: StreamHint) -> Result<()> {
        let sh = &*self.shared;
        let len = len_u64(buf.len());
        let mut st = match sh.state.try_lock() {
            Ok(st) => st,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            Err(TryLockError::WouldBlock) => return Err(crate::nowait::would_block()),
        };
        if !sh.inline_hits || !st.core.ready_now(offset, len) {
            return Err(crate::nowait::would_block());
        }
        let ticket = st.core.start_read(self.now_ns(), hint.worker, offset, len);
        if st.core.has_queued() {
            sh.work.notify_all();
        }
        if copy_out(&st.core, &ticket, buf, offset) {
            Ok(())
        } else {
            Err(crate::nowait::would_block())
        }
    }

    fn cached_read(&self, buf: &mut [u8], offset: u64, hint: StreamHint) -> Result<()> {
        if crate::nowait::active() {
            return self.inline_read(buf, offset, hint);
        }
        let sh = &*self.shared;
        let len = len_u64(buf.len());
        let mut st = lock(&sh.state);
        while st.core.write_blocked(offset, len) {
            st = sh.done.wait(st).unwrap_or_else(PoisonError::into_inner);
        }
        let ticket = st.core.start_read(self.now_ns(), hint.worker, offset, len);
        if st.core.has_queued() {
            sh.work.notify_all();
        }
        let mut retries = 0;
        loop {
            if st.core.all_ready(&ticket) {
                if copy_out(&st.core, &ticket, buf, offset) {
                    return Ok(());
                }
                break;
            }
            if st.core.any_absent(&ticket) && !st.core.write_blocked(offset, len) {
                if retries == MAX_RETRIES {
                    break;
                }
                retries += 1;
                st.core.ensure(&ticket);
                sh.work.notify_all();
            }
            st = sh.done.wait(st).unwrap_or_else(PoisonError::into_inner);
        }
        drop(st);
        sh.inner.read_at_hinted(buf, offset, hint)
    }

    /// Runs a write-like operation on the engine with the cache kept coherent.
    fn write_through(&self, offset: u64, len: u64, op: impl FnOnce() -> Result<()>) -> Result<()> {
        let sh = &*self.shared;
        if sh.passthrough {
            return op();
        }
        check_write(&sh.inner.geometry(), offset, len)?;
        let range = lock(&sh.state).core.begin_write(offset, len);
        let res = op();
        lock(&sh.state).core.end_write(range);
        sh.done.notify_all();
        res
    }
}

/// Copies the ticket's ready pages into `buf`; false if a page is short.
fn copy_out(core: &Core<Box<[u8]>>, t: &Ticket, buf: &mut [u8], offset: u64) -> bool {
    let end = offset + len_u64(buf.len());
    for page in t.first..t.end {
        let Some(data) = core.page(page) else {
            return false;
        };
        let base = page * PAGE;
        let from = offset.max(base);
        let to = end.min(base + PAGE);
        let (Ok(src_a), Ok(src_b), Ok(dst_a)) = (
            usize::try_from(from - base),
            usize::try_from(to - base),
            usize::try_from(from - offset),
        ) else {
            return false;
        };
        let (Some(src), Some(dst)) = (
            data.get(src_a..src_b),
            buf.get_mut(dst_a..dst_a + (src_b - src_a)),
        ) else {
            return false;
        };
        dst.copy_from_slice(src);
    }
    true
}

/// Whether the context should take turns at a device gate, and how many
/// bytes a turn may start.
fn turns(inner: &dyn Backstore, opts: &IoContextOptions) -> Option<Turns> {
    let device = inner.device_key()?;
    Some(Turns {
        budget: opts.turn_budget(device.seeks)?,
        gate: DeviceGate::of_device(&device.key),
        id: next_context_id(),
    })
}

/// An I/O thread: takes a coalesced backing read, does it without the
/// lock, and fills (or drops) its pages. On a device where contexts take
/// turns, readahead waits for this context's turn; a synchronous read
/// (someone waits for it, and it is small) goes at once, as deadline
/// scheduling serves sync reads, so misses keep their latency and a RAID's
/// members keep serving two LUNs' misses in parallel.
fn io_loop(sh: &Shared) {
    let stopping = || sh.stop.load(Ordering::Relaxed);
    loop {
        let (batch, start, len, seq) = {
            let mut st = lock(&sh.state);
            loop {
                if st.stopping {
                    return;
                }
                if let Some(b) = st.core.pop_batch() {
                    let (start, len) = st.core.batch_range(&b);
                    let seq = st.next_seq;
                    st.next_seq = seq.wrapping_add(1);
                    break (b, start, len, seq);
                }
                st = sh.work.wait(st).unwrap_or_else(PoisonError::into_inner);
            }
        };
        // One id per context: its I/O threads carry only its own reads, so
        // a thread waiting for the turn never holds up the turn's owner.
        let turn = sh.gate.as_ref();
        if let Some(t) = turn.filter(|_| !batch.sync) {
            if !t.gate.enter(t.id, seq, t.budget, len, &stopping) {
                return;
            }
        }
        let result = read_batch(sh, &batch, start, len);
        let mut st = lock(&sh.state);
        match result {
            Ok(data) => st.core.complete(&batch, |page| {
                let a = usize::try_from(page * PAGE - start).unwrap_or(usize::MAX);
                let b = a.saturating_add(PAGE as usize).min(data.len());
                data.get(a..b).map(Box::from).unwrap_or_default()
            }),
            Err(e) => {
                tracing::warn!(offset = start, len, error = %e, "backing read failed");
                st.core.fail(&batch);
            }
        }
        let queued = st.core.has_queued();
        drop(st);
        if queued {
            // This read's end may let more than the next one start (a
            // readahead held while it was in flight): wake the idle threads.
            sh.work.notify_all();
        }
        match turn {
            Some(t) if !batch.sync => t.gate.leave(t.id, queued),
            // A demand read needed no turn, but it may end an idle one.
            Some(t) => t.gate.settle(t.id, queued),
            None => {}
        }
        sh.done.notify_all();
    }
}

fn read_batch(sh: &Shared, batch: &Batch, start: u64, len: u64) -> Result<Vec<u8>> {
    let n = usize::try_from(len).map_err(|_| BackstoreError::OutOfRange { offset: start, len })?;
    let mut data = vec![0u8; n];
    let hint = StreamHint {
        worker: None,
        readahead: !batch.sync,
    };
    sh.inner.read_at_hinted(&mut data, start, hint)?;
    Ok(data)
}

impl Drop for IoContext {
    fn drop(&mut self) {
        lock(&self.shared.state).stopping = true;
        self.shared.stop.store(true, Ordering::Relaxed);
        self.shared.work.notify_all();
        for handle in lock(&self.threads).drain(..) {
            if handle.join().is_err() {
                tracing::error!("I/O context thread panicked");
            }
        }
        if let Some(t) = &self.shared.gate {
            t.gate.forget(t.id);
        }
    }
}

impl Backstore for IoContext {
    fn kind(&self) -> &'static str {
        self.shared.inner.kind()
    }

    /// The engine's, read on every call: a store that can be resized
    /// from elsewhere (an RBD image) changes it under the context.
    fn geometry(&self) -> Geometry {
        self.shared.inner.geometry()
    }

    fn read_buf(&self, offset: u64, len: usize) -> Result<IoBuf> {
        self.read_buf_hinted(offset, len, StreamHint::default())
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.read_at_hinted(buf, offset, StreamHint::default())
    }

    fn read_buf_hinted(&self, offset: u64, len: usize, hint: StreamHint) -> Result<IoBuf> {
        let sh = &*self.shared;
        if !sh.passthrough || len == 0 {
            let mut buf = IoBuf::for_overwrite(len);
            self.read_at_hinted(&mut buf, offset, hint)?;
            return Ok(buf);
        }
        let n = len_u64(len);
        check_range(&sh.inner.geometry(), offset, n)?;
        passthrough_read(sh, n, || sh.inner.read_buf_hinted(offset, len, hint))
    }

    fn read_at_hinted(&self, buf: &mut [u8], offset: u64, hint: StreamHint) -> Result<()> {
        let sh = &*self.shared;
        let len = len_u64(buf.len());
        check_range(&sh.inner.geometry(), offset, len)?;
        if len == 0 {
            return Ok(());
        }
        if sh.passthrough {
            return passthrough_read(sh, len, || sh.inner.read_at_hinted(buf, offset, hint));
        }
        let t0 = Instant::now();
        let result = self.cached_read(buf, offset, hint);
        if matches!(result, Err(BackstoreError::WouldBlock)) {
            return result;
        }
        let ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        lock(&sh.state).core.record_latency(ns);
        result
    }

    fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> Result<()> {
        let inner = &self.shared.inner;
        self.write_through(offset, len_u64(buf.len()), || {
            inner.write_at(buf, offset, fua)
        })
    }

    fn flush(&self) -> Result<()> {
        self.shared.inner.flush()
    }

    fn write_same(&self, pattern: &[u8], offset: u64, len: u64) -> Result<()> {
        let inner = &self.shared.inner;
        self.write_through(offset, len, || inner.write_same(pattern, offset, len))
    }

    fn unmap(&self, offset: u64, len: u64) -> Result<()> {
        let inner = &self.shared.inner;
        self.write_through(offset, len, || inner.unmap(offset, len))
    }

    fn extents(&self, offset: u64, len: u64) -> Result<Vec<Extent>> {
        self.shared.inner.extents(offset, len)
    }

    fn device_key(&self) -> Option<DeviceKey> {
        self.shared.inner.device_key()
    }

    fn supports_write_same(&self) -> bool {
        self.shared.inner.supports_write_same()
    }

    fn supports_unmap(&self) -> bool {
        self.shared.inner.supports_unmap()
    }

    fn watch_capacity(&self, hook: Box<dyn Fn(u64) + Send + Sync>) -> bool {
        self.shared.inner.watch_capacity(hook)
    }

    fn shared_state(&self) -> Option<Arc<dyn crate::shared::SharedState>> {
        self.shared.inner.shared_state()
    }

    /// Only a passthrough context: a cache of its own would miss the write.
    fn compare_and_write(
        &self,
        offset: u64,
        verify: &[u8],
        write: &[u8],
    ) -> Option<Result<Option<usize>>> {
        if !self.shared.passthrough {
            return None;
        }
        self.shared.inner.compare_and_write(offset, verify, write)
    }

    /// As [`Self::uring_file`]: only a passthrough context, which counts
    /// what the store did.
    fn async_io(&self) -> Option<crate::aio::AsyncStore> {
        if !self.shared.passthrough {
            return None;
        }
        let mut a = self.shared.inner.async_io()?;
        a.meters
            .push(Arc::clone(&self.shared) as Arc<dyn crate::uring::IoMeter>);
        Some(a)
    }

    /// A passthrough context lets io_uring drive its engine (and counts
    /// what the ring did); one with readahead of its own must see every
    /// read, so never.
    fn uring_file(&self) -> Option<crate::uring::UringFile> {
        if !self.shared.passthrough {
            return None;
        }
        let mut f = self.shared.inner.uring_file()?;
        f.meters
            .push(Arc::clone(&self.shared) as Arc<dyn crate::uring::IoMeter>);
        Some(f)
    }

    fn has_uring_file(&self) -> bool {
        self.shared.passthrough && self.shared.inner.has_uring_file()
    }

    /// A passthrough context is as non-blocking as its engine. With
    /// rustgt's own readahead in shared mode, reads can be tried: one whose
    /// pages are all cached is served on the caller's thread (a reactor),
    /// so a stream that readahead keeps ahead does not wait for a worker
    /// behind other readers' misses; a miss goes to the workers. In
    /// per-worker mode (the pre-fix emulation) every read goes to a worker.
    fn nonblocking(&self) -> crate::nowait::Nonblocking {
        if self.shared.passthrough {
            self.shared.inner.nonblocking()
        } else if self.shared.inline_hits {
            crate::nowait::Nonblocking::TryReads
        } else {
            crate::nowait::Nonblocking::Never
        }
    }
}

/// Counts the reads io_uring served for a passthrough context as its own
/// direct reads (their latency is the store's: see [`passthrough_read`]).
impl crate::uring::IoMeter for Shared {
    fn io_done(&self, kind: crate::uring::IoKind, len: u64, _took: std::time::Duration, ok: bool) {
        if kind == crate::uring::IoKind::Read && ok {
            self.direct.count(len);
        }
    }
}

/// A read passed straight to the engine, counted as direct I/O; a
/// reactor's refused attempt (`WouldBlock`) is not counted, as it runs
/// again where it may block. Its latency is not timed here: a passthrough
/// context adds nothing to the engine's, which whoever holds the store
/// (the daemon's per-LUN statistics) times already.
fn passthrough_read<T>(sh: &Shared, len: u64, read: impl FnOnce() -> Result<T>) -> Result<T> {
    let r = read();
    if matches!(r, Err(BackstoreError::WouldBlock)) {
        return r;
    }
    sh.direct.count(len);
    r
}
