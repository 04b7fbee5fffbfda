//! io_uring on a reactor thread: reads, writes and fsyncs of file and
//! block-device stores that would otherwise block, submitted by the thread
//! that owns the ring and completed on that same thread.
//!
//! A reactor creates its [`Ring`] on its own thread ([`Ring::start`], when
//! io_uring is [enabled](set_enabled) and the [probe] passed) and hands it
//! by reference to what runs in its turns; nothing reaches it through a
//! thread-local. The kernel signals the eventfd `start` returns on every
//! completion; the reactor waits on it and calls [`Ring::reap`], which
//! runs each finished operation's callback ([`Complete`]) on the reactor
//! thread. Dropping the ring (or [`Ring::drain`]) waits for every
//! operation still in flight and runs their callbacks first. With
//! [`Ring::defer_submission`] the ops submitted during one reactor turn
//! wait in the submission queue and go to the kernel together at
//! [`Ring::flush`] (one `io_uring_enter` per batch).
//!
//! An operation owns its buffer ([`RingBuf`]) and a clone of the store's
//! `Arc<File>` ([`UringFile`]) until its completion has been reaped, so
//! neither memory nor descriptor can go away under the kernel. Short reads
//! and writes are continued by the ring itself; a read that meets the end
//! of the file fails with `UnexpectedEof`, a write that makes no progress
//! with `WriteZero`. A callback that receives an error of kind
//! [`io::ErrorKind::WouldBlock`] was not performed at all (the ring was
//! full, or the kernel kept answering EAGAIN): run it elsewhere.
//!
//! FUA writes carry `RWF_DSYNC` on the write op itself: every kernel with
//! io_uring (5.1 on) knows that flag. O_DIRECT stores get buffers aligned
//! to their block size ([`RingBuf::aligned`]).

use std::cell::{Cell, RefCell};
use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use io_uring::{opcode, types, IoUring};
use smallvec::SmallVec;

use crate::common::AlignedBuf;

/// Submission queue entries of one ring; the completion queue is twice as
/// large, so it cannot overflow while at most this many ops are in flight.
pub const RING_ENTRIES: u32 = 256;

/// How often an op answered with EAGAIN or EINTR is submitted again
/// before it is handed back as not performed.
const RETRIES: u8 = 3;

static ENABLED: AtomicBool = AtomicBool::new(true);

/// Whether the kernel's CQ ring has its flags word, so the eventfd can be
/// muted while a turn reaps its own completions ([`Ring::submit_and_reap`]).
/// Set by [`probe`].
static CQ_FLAGS: AtomicBool = AtomicBool::new(false);

/// Whether reactors started from now on create a ring (`[reactor]
/// io_uring = "auto"`, the default) or leave every blocking operation to
/// the LUNs' workers (`"off"`).
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// See [`set_enabled`].
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Sets up a small ring once per process and checks that the kernel has
/// the opcodes used here (READ, WRITE, FSYNC): `Err` says why not. The
/// answer is cached.
pub fn probe() -> Result<(), String> {
    static RESULT: OnceLock<Result<(), String>> = OnceLock::new();
    RESULT
        .get_or_init(|| {
            let ring = IoUring::new(2).map_err(|e| format!("io_uring_setup: {e}"))?;
            let mut probe = io_uring::Probe::new();
            ring.submitter()
                .register_probe(&mut probe)
                .map_err(|e| format!("io_uring opcode probe: {e}"))?;
            // IORING_OP_TEE came with Linux 5.8, as the CQ ring's flags
            // word (`IORING_CQ_EVENTFD_DISABLED`): before it the crate's
            // flags pointer would name another field of the ring.
            CQ_FLAGS.store(probe.is_supported(opcode::Tee::CODE), Ordering::Relaxed);
            for (code, name) in [
                (opcode::Read::CODE, "READ"),
                (opcode::Write::CODE, "WRITE"),
                (opcode::Fsync::CODE, "FSYNC"),
            ] {
                if !probe.is_supported(code) {
                    return Err(format!("the kernel's io_uring lacks {name}"));
                }
            }
            Ok(())
        })
        .clone()
}

/// What a store hands the ring: its open file and how it must be driven.
#[derive(Clone)]
pub struct UringFile {
    /// The store's open file or block device; the ring reads and writes
    /// its fd at the store's byte offsets (the store's own fd, not a dup).
    pub file: Arc<File>,
    /// `Some(alignment)` when the file was opened with O_DIRECT: buffers,
    /// offsets and lengths must be multiples of it.
    pub direct_align: Option<usize>,
    /// Layers that count the store's I/O (see [`IoMeter`]).
    /// Inline: building one per command allocates nothing.
    pub meters: SmallVec<[Arc<dyn IoMeter>; 2]>,
    /// Stores kept alive while an op is in flight, so that a layer that
    /// waits for the calls on a store before swapping it (the daemon's
    /// LUN store) waits for the ring's ops too.
    pub holds: SmallVec<[Arc<dyn crate::hold::Keepalive>; 1]>,
}

impl fmt::Debug for UringFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UringFile")
            .field("fd", &self.file.as_raw_fd())
            .field("direct_align", &self.direct_align)
            .field("meters", &self.meters.len())
            .field("holds", &self.holds.len())
            .finish()
    }
}

impl UringFile {
    /// Tells every meter that an op of `len` bytes started at `started`
    /// has ended (`ok`: without error).
    pub fn record(&self, kind: IoKind, len: u64, started: Instant, ok: bool) {
        // One clock read for all the meters.
        let took = started.elapsed();
        for m in &self.meters {
            m.io_done(kind, len, took, ok);
        }
    }

    /// Tells every meter what error the op just recorded ended with.
    pub fn failed(&self, error: &crate::BackstoreError) {
        for m in &self.meters {
            m.io_failed(error);
        }
    }

    /// A buffer of `len` bytes fit for this file (aligned for O_DIRECT):
    /// a pooled one, whose start is aligned to [`crate::buf::ALIGN`], when
    /// that is enough.
    pub fn buffer(&self, len: usize) -> io::Result<RingBuf> {
        match self.direct_align {
            Some(align) if align > crate::buf::ALIGN => RingBuf::aligned(len, align),
            _ => Ok(RingBuf::Pooled(crate::buf::IoBuf::for_overwrite(len))),
        }
    }
}

/// Which kind of operation a meter is told about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoKind {
    /// A read of `len` bytes.
    Read,
    /// A write of `len` bytes (with or without FUA).
    Write,
    /// A flush (SYNCHRONIZE CACHE: an fdatasync on the ring).
    Flush,
}

/// A layer of a store that keeps statistics (the daemon's per-LUN store,
/// an I/O context): told of each op the ring did for it, since those ops
/// bypass its `read_at`/`write_at`.
pub trait IoMeter: Send + Sync + fmt::Debug {
    /// One op of `kind`, `len` bytes, which took `took`, has just
    /// completed (`ok`: without error). Called once per op, on the thread
    /// that completed it (a reactor reaping its ring, or the store's own
    /// thread for [`crate::aio`]); must not block.
    fn io_done(&self, kind: IoKind, len: u64, took: std::time::Duration, ok: bool);

    /// The op just reported with `ok` false ended with `error`: for a
    /// layer that acts on some errors (the daemon reopens an RBD LUN whose
    /// client was blocklisted). Same thread and rules as [`Self::io_done`].
    fn io_failed(&self, _error: &crate::BackstoreError) {}
}

/// The memory of one op, owned by the ring until the op completes.
#[derive(Debug)]
pub enum RingBuf {
    /// A pooled buffer (buffered I/O; a command's own Data-In or Data-Out).
    Pooled(crate::buf::IoBuf),
    /// Memory aligned for O_DIRECT.
    Aligned(AlignedBuf),
    /// No memory (fsync).
    Empty,
}

impl RingBuf {
    /// A zeroed buffer of `len` bytes starting on an `align` boundary.
    pub fn aligned(len: usize, align: usize) -> io::Result<RingBuf> {
        AlignedBuf::zeroed(len, align.max(1))
            .map(RingBuf::Aligned)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "cannot align a buffer"))
    }

    /// An aligned copy of `src` (a write's data for an O_DIRECT file).
    pub fn aligned_copy(src: &[u8], align: usize) -> io::Result<RingBuf> {
        let mut buf = RingBuf::aligned(src.len(), align)?;
        buf.as_mut_slice().copy_from_slice(src);
        Ok(buf)
    }

    /// Bytes of memory the op may use (0 for [`RingBuf::Empty`]).
    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    /// Whether the buffer has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The buffer's bytes, whichever memory holds them.
    pub fn as_slice(&self) -> &[u8] {
        match self {
            RingBuf::Pooled(v) => v,
            RingBuf::Aligned(a) => a.as_slice(),
            RingBuf::Empty => &[],
        }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        match self {
            RingBuf::Pooled(v) => v,
            RingBuf::Aligned(a) => a.as_mut_slice(),
            RingBuf::Empty => &mut [],
        }
    }

    /// The bytes as a pooled buffer (a copy only for aligned memory).
    pub fn into_pooled(self) -> crate::buf::IoBuf {
        match self {
            RingBuf::Pooled(v) => v,
            RingBuf::Aligned(a) => {
                let mut b = crate::buf::IoBuf::for_overwrite(a.as_slice().len());
                b.copy_from_slice(a.as_slice());
                b
            }
            RingBuf::Empty => crate::buf::IoBuf::default(),
        }
    }
}

/// What to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Fill the first `len` bytes of the buffer from `offset`.
    Read {
        /// Byte offset in the file.
        offset: u64,
        /// Bytes to read, at most the buffer's length.
        len: usize,
    },
    /// Write the first `len` bytes of the buffer at `offset`; `dsync`
    /// makes them durable before completion (FUA).
    Write {
        /// Byte offset in the file.
        offset: u64,
        /// Bytes to write, at most the buffer's length.
        len: usize,
        /// Durable before completion (`RWF_DSYNC`).
        dsync: bool,
    },
    /// fdatasync the file.
    Fsync,
}

/// A boxed completion: called once on the ring's thread with the op's
/// outcome (bytes moved) and its buffer back.
pub type OpDone = Box<dyn FnOnce(io::Result<usize>, RingBuf)>;

/// What a caller keeps with an op in the ring until it completes: its own
/// record of the op, stored in the ring's slot (so submitting and reaping
/// allocate nothing once the slots have grown to the ops in flight), and
/// what runs with the op's outcome.
pub trait Complete {
    /// Runs once, on the ring's thread, with the op's outcome (bytes
    /// moved, or why not) and its buffer back.
    fn complete(self, result: io::Result<usize>, buf: RingBuf);
}

impl Complete for OpDone {
    fn complete(self, result: io::Result<usize>, buf: RingBuf) {
        self(result, buf)
    }
}

/// Completions taken off the queue at once that stay on the stack.
const REAP_INLINE: usize = 32;

/// Finished ops of one reap: their slot and outcome. The ops stay in
/// their slots until their callbacks run.
type Finished = SmallVec<[(usize, io::Result<usize>); REAP_INLINE]>;

struct InFlight<T> {
    file: Arc<File>,
    buf: RingBuf,
    op: Op,
    /// Bytes already moved (short reads and writes go on from here).
    done_bytes: usize,
    retries: u8,
    owner: T,
}

/// One reactor's io_uring (see the module's text): created by the reactor
/// on its own thread ([`Ring::start`]) and handed by reference to whatever
/// submits or reaps during its turns. It is not `Send`: an op's callback
/// runs on the thread that submitted it. Dropping it waits for the ops
/// still in flight and runs their callbacks.
pub struct Ring<T: Complete> {
    inner: RefCell<Inner<T>>,
    /// Reads counted by [`Ring::turn_read`] since the last
    /// [`Ring::submit_and_reap`].
    turn_reads: Cell<u32>,
    /// The reactor's pause of inline writes ([`Ring::may_write_now`]).
    paused: Cell<InlinePause>,
}

struct Inner<T> {
    ring: IoUring,
    /// Kept open while registered with the ring.
    _eventfd: OwnedFd,
    slots: Vec<Option<InFlight<T>>>,
    free: Vec<usize>,
    in_flight: usize,
    /// Set by [`Ring::defer_submission`]: new SQEs wait for
    /// [`Ring::flush`], and this is called when the first of them is
    /// queued.
    deferred: Option<Box<dyn Fn()>>,
    /// SQEs queued and not yet handed to the kernel.
    unsubmitted: bool,
    /// [`Ring::close`]d: takes no more ops.
    closed: bool,
}

impl<T: Complete> fmt::Debug for Ring<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ring")
            .field("in_flight", &self.in_flight())
            .finish_non_exhaustive()
    }
}

/// Buffered writes at most this long may run on the reactor thread
/// ([`Ring::write_now`]); longer ones go to the LUN's workers.
pub const INLINE_WRITE_MAX: usize = 128 * 1024;

/// An inline write that slept and took longer than this (the kernel
/// throttled the writer, or waited for a lock or a page under writeback)
/// stops inline writes on this reactor for a while ([`next_pause`]).
const INLINE_WRITE_SLOW: Duration = Duration::from_micros(500);

/// How long an isolated slow inline write sends this reactor's buffered
/// writes back to the workers: a file under writeback makes one wait now
/// and then (measured: one to four writes of 1-4 ms in 6 s of 8,000
/// writes a second to a freshly copied file), and a longer pause would
/// send far more writes the slow way than the waits cost.
const INLINE_WRITE_PAUSE_MIN: Duration = Duration::from_millis(50);

/// The longest pause, which the pause doubles to while slow writes keep
/// coming (dirty-page throttling makes every write wait): the reactor
/// then waits at most once a second.
const INLINE_WRITE_PAUSE_MAX: Duration = Duration::from_secs(1);

/// A slow write less than this after the end of the previous pause
/// doubles the pause; after a longer calm it starts again from
/// [`INLINE_WRITE_PAUSE_MIN`].
const INLINE_WRITE_CALM: Duration = Duration::from_secs(2);

static INLINE_WRITES: AtomicBool = AtomicBool::new(true);

/// A reactor's pause of inline writes.
#[derive(Debug, Clone, Copy)]
struct InlinePause {
    /// Until when buffered writes go to the workers.
    until: Option<Instant>,
    /// The last pause's length.
    len: Duration,
    /// When the last pause ends (or ended).
    ends: Option<Instant>,
}

/// The pause after a slow inline write at `now`, given the last pause's
/// length and end: doubled (up to [`INLINE_WRITE_PAUSE_MAX`]) when the
/// slow write came within [`INLINE_WRITE_CALM`] of that end, otherwise
/// [`INLINE_WRITE_PAUSE_MIN`].
fn next_pause(last_len: Duration, last_end: Option<Instant>, now: Instant) -> Duration {
    match last_end {
        Some(end) if now.saturating_duration_since(end) < INLINE_WRITE_CALM => last_len
            .saturating_mul(2)
            .clamp(INLINE_WRITE_PAUSE_MIN, INLINE_WRITE_PAUSE_MAX),
        _ => INLINE_WRITE_PAUSE_MIN,
    }
}

/// Whether reactors may write buffered data themselves (`[reactor]
/// inline_writes`, default on).
pub fn set_inline_writes(on: bool) {
    INLINE_WRITES.store(on, Ordering::Relaxed);
}

/// This thread's voluntary context switches (it slept), 0 if unknown.
fn voluntary_switches() -> i64 {
    // SAFETY: getrusage writes one `rusage` (plain old data, all-zero is
    // valid) through the pointer, which is valid for the call.
    unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_THREAD, &mut usage) != 0 {
            return 0;
        }
        usage.ru_nvcsw
    }
}

/// Reads an eventfd's counter to zero (after a wake-up; before
/// [`Ring::reap`]).
pub fn clear_eventfd(fd: &OwnedFd) {
    let mut counter = 0u64;
    loop {
        // SAFETY: reads 8 bytes into `counter`, which lives across the
        // call; the fd is borrowed from `fd` and open.
        let n = unsafe {
            libc::read(
                fd.as_raw_fd(),
                std::ptr::addr_of_mut!(counter).cast::<libc::c_void>(),
                8,
            )
        };
        if n != 8 {
            return;
        }
    }
}

fn not_performed() -> io::Error {
    io::Error::new(io::ErrorKind::WouldBlock, "io_uring op not performed")
}

impl<T: Complete> Ring<T> {
    /// Creates a reactor's ring if io_uring is enabled and the probe
    /// passes, with a duplicate of its eventfd (readable after
    /// completions); `None` when the reactor is to leave blocking I/O to
    /// the workers.
    pub fn start() -> io::Result<Option<(Ring<T>, OwnedFd)>> {
        if !enabled() {
            return Ok(None);
        }
        if let Err(why) = probe() {
            tracing::debug!(%why, "io_uring unavailable");
            return Ok(None);
        }
        let ring = IoUring::builder()
            .setup_cqsize(RING_ENTRIES * 2)
            .build(RING_ENTRIES)?;
        // SAFETY: eventfd only reads its scalar arguments.
        let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a new descriptor this function alone owns.
        let eventfd = unsafe { OwnedFd::from_raw_fd(raw) };
        ring.submitter().register_eventfd(eventfd.as_raw_fd())?;
        let dup = eventfd.try_clone()?;
        let ring = Ring {
            inner: RefCell::new(Inner {
                ring,
                _eventfd: eventfd,
                slots: Vec::new(),
                free: Vec::new(),
                in_flight: 0,
                deferred: None,
                unsubmitted: false,
                closed: false,
            }),
            turn_reads: Cell::new(0),
            paused: Cell::new(InlinePause {
                until: None,
                len: Duration::ZERO,
                ends: None,
            }),
        };
        Ok(Some((ring, dup)))
    }

    /// Whether one more op can be submitted now (a caller checks this
    /// before taking locks for an op).
    pub fn has_room(&self) -> bool {
        self.inner
            .try_borrow()
            .is_ok_and(|r| r.in_flight < RING_ENTRIES as usize && !r.closed)
    }

    /// Ops submitted and not yet reaped.
    pub fn in_flight(&self) -> usize {
        self.inner.try_borrow().map_or(0, |r| r.in_flight)
    }

    /// Submits `op` on `buf`, on `file`'s descriptor; `owner` completes
    /// from a later [`Ring::reap`] (or the ring's end) on this thread.
    /// Without room it completes now with a `WouldBlock` error.
    pub fn submit(&self, file: &Arc<File>, op: Op, buf: RingBuf, owner: T) {
        let bad_len = match op {
            Op::Read { len, .. } | Op::Write { len, .. } => {
                len > buf.len() || len > u32::MAX as usize
            }
            Op::Fsync => false,
        };
        if bad_len {
            let e = io::Error::new(io::ErrorKind::InvalidInput, "op longer than its buffer");
            owner.complete(Err(e), buf);
            return;
        }
        let entry = InFlight {
            file: Arc::clone(file),
            buf,
            op,
            done_bytes: 0,
            retries: 0,
            owner,
        };
        let refused = match self.inner.try_borrow_mut() {
            Ok(mut ring) if ring.in_flight < RING_ENTRIES as usize && !ring.closed => {
                ring.start(entry)
            }
            _ => Err(entry),
        };
        if let Err(entry) = refused {
            entry.owner.complete(Err(not_performed()), entry.buf);
        }
    }

    /// Batches submissions: from now on a submitted op waits in the
    /// submission queue until [`Ring::flush`], and `wake` is called when
    /// the first op of a batch is queued (a reactor then flushes once its
    /// current task yields, so a turn's commands go to the kernel with one
    /// system call).
    pub fn defer_submission(&self, wake: Box<dyn Fn()>) {
        if let Ok(mut ring) = self.inner.try_borrow_mut() {
            ring.deferred = Some(wake);
        }
    }

    /// Hands every queued op to the kernel.
    pub fn flush(&self) {
        if let Ok(mut ring) = self.inner.try_borrow_mut() {
            if ring.unsubmitted {
                ring.flush();
            }
        }
    }

    /// Counts one read of the current reactor turn that the ring could
    /// take, and returns how many came before it since the turn's batch
    /// last ended ([`Ring::submit_and_reap`]). The SCSI core runs the first
    /// read of a turn inline (`preadv2(RWF_NOWAIT)`: one system call, as
    /// the ring's `io_uring_enter` would be, without the ring's extra
    /// work, which showed at queue depth 1) and queues the rest on the
    /// ring.
    pub fn turn_read(&self) -> u32 {
        let n = self.turn_reads.get();
        self.turn_reads.set(n.saturating_add(1));
        n
    }

    /// Ends a reactor turn's batch at once: hands every queued op to the
    /// kernel (one `io_uring_enter`) and runs the callbacks of every op
    /// that has completed, including reads of cached pages, which the
    /// kernel finishes inside that same `io_uring_enter`. A connection
    /// calls this after it has run the PDUs of one read so that the
    /// responses of those reads leave in the turn's `writev`, instead of a
    /// turn later after the reactor has submitted and been woken by the
    /// eventfd. While it runs the eventfd is muted
    /// (`IORING_CQ_EVENTFD_DISABLED`, Linux 5.8 on; an older kernel's
    /// eventfd wakes the reactor for nothing), so the completions reaped
    /// here wake nobody; it is unmuted before a last look at the
    /// completion queue, so an op finishing later (a page the cache did
    /// not hold) still signals it. Returns how many callbacks ran; 0 with
    /// nothing queued and nothing completed.
    pub fn submit_and_reap(&self) -> usize {
        self.turn_reads.set(0);
        // Most turns queue nothing (inline commands): return before a
        // `Finished` is built.
        let finished = match self.inner.try_borrow_mut() {
            Ok(mut ring) if ring.unsubmitted => {
                let mute = CQ_FLAGS.load(Ordering::Relaxed);
                if mute {
                    ring.ring.completion().disable_eventfd();
                }
                ring.flush();
                let mut finished = ring.collect();
                if mute {
                    ring.ring.completion().enable_eventfd();
                    // A completion posted while muted signalled nobody.
                    if !ring.ring.completion().is_empty() {
                        finished.extend(ring.collect());
                    }
                }
                finished
            }
            _ => return 0,
        };
        self.run(finished)
    }

    /// Runs the callbacks of every completed op; returns how many ran.
    pub fn reap(&self) -> usize {
        let finished = match self.inner.try_borrow_mut() {
            Ok(mut ring) if ring.in_flight > 0 => ring.collect(),
            _ => return 0,
        };
        self.run(finished)
    }

    /// Waits until at least one op has completed (when any is in flight),
    /// then reaps like [`Ring::reap`]. For a thread that has nothing else
    /// to wait for (tests, the ring's end; a reactor waits on the
    /// eventfd).
    pub fn reap_blocking(&self) -> usize {
        if let Err(e) = self.wait() {
            if e.kind() != io::ErrorKind::Interrupted {
                tracing::error!(error = %e, "io_uring: waiting for ops in flight");
            }
        }
        self.reap()
    }

    /// Hands queued ops to the kernel and waits until at least one op has
    /// completed; `Ok(false)` at once when none is in flight.
    fn wait(&self) -> io::Result<bool> {
        match self.inner.try_borrow_mut() {
            Ok(mut ring) if ring.in_flight > 0 => {
                ring.unsubmitted = false;
                ring.ring.submit_and_wait(1).map(|_| true)
            }
            _ => Ok(false),
        }
    }

    /// Waits for every op in flight and runs their callbacks (the
    /// reactor's end; `Drop` does it too). Callbacks may submit more;
    /// those are waited for as well. A wait that fails gives up (the
    /// slots' memory is then leaked, never freed under the kernel).
    pub fn drain(&self) {
        // Each wait ends at least one op unless interrupted.
        for _ in 0..1_000_000 {
            match self.wait() {
                Ok(false) => return,
                Err(e) if e.kind() != io::ErrorKind::Interrupted => {
                    tracing::error!(error = %e, "io_uring: waiting for ops in flight");
                    return;
                }
                _ => {}
            }
            self.reap();
        }
    }

    /// Takes no more ops (each is refused as not performed, so its caller
    /// runs it elsewhere), then waits for those in flight ([`Ring::drain`]):
    /// for a reactor that can no longer wait on the eventfd.
    pub fn close(&self) {
        if let Ok(mut ring) = self.inner.try_borrow_mut() {
            ring.closed = true;
        }
        self.drain();
    }

    /// Runs the callbacks of `finished`, each op taken out of its slot
    /// after the ring is released (a callback may submit again).
    fn run(&self, finished: Finished) -> usize {
        let n = finished.len();
        for (slot, result) in finished {
            let entry = match self.inner.try_borrow_mut() {
                Ok(mut ring) => ring.take(slot),
                Err(_) => None,
            };
            if let Some(entry) = entry {
                entry.owner.complete(result, entry.buf);
            }
        }
        n
    }

    /// Whether a buffered, non-FUA write of `len` bytes at `offset` may
    /// run on this reactor now ([`Ring::write_now`]): inline writes on,
    /// not too long, whole pages only (a partial page not in the cache
    /// would be read from the disk first), and inline writes not paused
    /// after a slow one ([`next_pause`]).
    pub fn may_write_now(&self, offset: u64, len: usize) -> bool {
        let page = crate::common::page_size();
        if len == 0
            || len > INLINE_WRITE_MAX
            || len % page != 0
            || offset % page as u64 != 0
            || !INLINE_WRITES.load(Ordering::Relaxed)
        {
            return false;
        }
        let mut pause = self.paused.get();
        match pause.until {
            None => true,
            Some(until) if Instant::now() >= until => {
                pause.until = None;
                self.paused.set(pause);
                true
            }
            Some(_) => false,
        }
    }

    /// Writes `data` at `offset` of a buffered file on this thread, with
    /// `pwrite`: a buffered write only copies into the page cache, a few
    /// microseconds for 4 KiB, cheaper than handing it to another thread
    /// and back (two context switches each way). The kernel may still make
    /// it wait (dirty-page throttling, a lock held by writeback): a write
    /// that slept (a voluntary context switch of this thread, `getrusage`)
    /// and took longer than [`INLINE_WRITE_SLOW`] pauses this reactor's
    /// inline writes ([`next_pause`]: briefly after an isolated one, up to
    /// a second while they keep coming), so a throttled file costs the
    /// reactor at most one such wait per pause.
    pub fn write_now(&self, file: &UringFile, offset: u64, data: &[u8]) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        let slept_before = voluntary_switches();
        let started = Instant::now();
        let r = file.file.write_all_at(data, offset);
        let took = started.elapsed();
        // Only a write that slept counts: one that was merely preempted on
        // a busy CPU would have taken as long on a worker.
        if took > INLINE_WRITE_SLOW && voluntary_switches() != slept_before {
            self.note_inline_write(took);
        }
        r
    }

    /// Pauses this reactor's inline writes after one that slept for
    /// `took`, longer than [`INLINE_WRITE_SLOW`].
    fn note_inline_write(&self, took: Duration) {
        if took > INLINE_WRITE_SLOW {
            let now = Instant::now();
            let last = self.paused.get();
            let len = next_pause(last.len, last.ends, now);
            self.paused.set(InlinePause {
                until: Some(now + len),
                len,
                ends: Some(now + len),
            });
            tracing::debug!(
                ?took,
                pause = ?len,
                "slow inline write: buffered writes go to the workers for a while"
            );
        }
    }
}

impl<T: Complete> Drop for Ring<T> {
    /// Waits for every op still in flight and runs their callbacks, so
    /// neither memory nor a command is lost with the ring.
    fn drop(&mut self) {
        self.drain();
    }
}

impl<T> Inner<T> {
    /// Puts `entry` in a slot and its SQE on the ring, then submits.
    fn start(&mut self, entry: InFlight<T>) -> Result<(), InFlight<T>> {
        let slot = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        if let Some(s) = self.slots.get_mut(slot) {
            *s = Some(entry);
        }
        if self.push(slot) {
            self.in_flight += 1;
            if self.deferred.is_some() {
                if !self.unsubmitted {
                    self.unsubmitted = true;
                    if let Some(wake) = &self.deferred {
                        wake();
                    }
                }
            } else {
                self.flush();
            }
            Ok(())
        } else {
            self.free.push(slot);
            match self.slots.get_mut(slot).and_then(Option::take) {
                Some(entry) => Err(entry),
                None => Ok(()),
            }
        }
    }

    /// Takes a finished op out of its slot, which becomes free.
    fn take(&mut self, slot: usize) -> Option<InFlight<T>> {
        let entry = self.slots.get_mut(slot).and_then(Option::take)?;
        self.free.push(slot);
        Some(entry)
    }

    /// Pushes the SQE for what is left of the op in `slot`.
    fn push(&mut self, slot: usize) -> bool {
        let Some(Some(e)) = self.slots.get_mut(slot) else {
            return false;
        };
        let fd = types::Fd(e.file.as_raw_fd());
        let sqe = match e.op {
            Op::Read { offset, len } => {
                let rest = e
                    .buf
                    .as_mut_slice()
                    .get_mut(e.done_bytes..len)
                    .unwrap_or_default();
                opcode::Read::new(fd, rest.as_mut_ptr(), rest.len() as u32)
                    .offset(offset + e.done_bytes as u64)
                    .build()
            }
            Op::Write { offset, len, dsync } => {
                let rest = e.buf.as_slice().get(e.done_bytes..len).unwrap_or_default();
                let flags = if dsync { libc::RWF_DSYNC } else { 0 };
                opcode::Write::new(fd, rest.as_ptr(), rest.len() as u32)
                    .offset(offset + e.done_bytes as u64)
                    .rw_flags(flags)
                    .build()
            }
            Op::Fsync => opcode::Fsync::new(fd)
                .flags(types::FsyncFlags::DATASYNC)
                .build(),
        };
        let sqe = sqe.user_data(slot as u64);
        // SAFETY: the SQE points into `e.buf` and names `e.file`'s fd; both
        // are owned by the slot, which stays filled until this op's CQE has
        // been reaped (`collect`, then `take`) or the ring has waited for
        // it (`Ring::drain`, which `Drop` runs; a failed wait leaks the
        // slots, see `Inner`'s `Drop`). The buffer's heap memory does not
        // move when the slot's struct does.
        unsafe { self.ring.submission().push(&sqe).is_ok() }
    }

    /// Hands queued SQEs to the kernel. An error leaves them queued for
    /// the next call (EBUSY, EAGAIN) and is only logged.
    fn flush(&mut self) {
        self.unsubmitted = false;
        loop {
            match self.ring.submit() {
                Ok(_) => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::debug!(error = %e, "io_uring submit deferred");
                    return;
                }
            }
        }
    }

    /// Takes every completion off the queue: finished ops come back as
    /// their slot and result (they stay in the slot until taken); short
    /// transfers and retries are pushed again. On the stack up to a
    /// reactor turn's usual count: reaping allocates nothing then.
    fn collect(&mut self) -> Finished {
        let cqes: SmallVec<[(u64, i32); REAP_INLINE]> = self
            .ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        let mut finished = Finished::new();
        let mut resubmitted = false;
        for (user_data, res) in cqes {
            let slot = user_data as usize;
            let Some(Some(e)) = self.slots.get_mut(slot) else {
                tracing::error!(user_data, "io_uring completion for no op");
                continue;
            };
            match progress(e, res) {
                Progress::Again => {
                    if self.push(slot) {
                        resubmitted = true;
                    } else {
                        self.in_flight -= 1;
                        finished.push((slot, Err(not_performed())));
                    }
                }
                Progress::Done(result) => {
                    self.in_flight -= 1;
                    finished.push((slot, result));
                }
            }
        }
        if resubmitted {
            self.flush();
        }
        finished
    }
}

impl<T> Drop for Inner<T> {
    /// [`Ring::drain`] has run (the ring's `Drop`). If ops are still in
    /// flight (the wait failed), leak their buffers rather than free
    /// memory the kernel may still write.
    fn drop(&mut self) {
        if self.in_flight > 0 {
            for slot in self.slots.drain(..).flatten() {
                std::mem::forget(slot);
            }
        }
    }
}

enum Progress {
    Again,
    Done(io::Result<usize>),
}

/// Accounts one CQE result for the op `e`.
fn progress<T>(e: &mut InFlight<T>, res: i32) -> Progress {
    let total = match e.op {
        Op::Read { len, .. } | Op::Write { len, .. } => len,
        Op::Fsync => 0,
    };
    if res < 0 {
        let errno = -res;
        if (errno == libc::EAGAIN || errno == libc::EINTR) && e.retries < RETRIES {
            e.retries += 1;
            return Progress::Again;
        }
        if errno == libc::EAGAIN && e.done_bytes == 0 {
            return Progress::Done(Err(not_performed()));
        }
        return Progress::Done(Err(io::Error::from_raw_os_error(errno)));
    }
    let n = res as usize;
    if matches!(e.op, Op::Fsync) {
        return Progress::Done(Ok(0));
    }
    if n == 0 && total > e.done_bytes {
        let kind = match e.op {
            Op::Read { .. } => io::ErrorKind::UnexpectedEof,
            _ => io::ErrorKind::WriteZero,
        };
        return Progress::Done(Err(io::Error::new(kind, "short transfer")));
    }
    e.done_bytes += n;
    if e.done_bytes < total {
        Progress::Again
    } else {
        Progress::Done(Ok(total))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;
    use std::os::unix::fs::FileExt;
    use std::rc::Rc;

    type Outcome = Rc<RefCell<Option<(io::Result<usize>, RingBuf)>>>;
    type TestRing = Ring<OpDone>;

    /// A ring for this test, or None (skipped) where the kernel has none.
    fn ring_or_skip() -> Option<(TestRing, OwnedFd)> {
        if let Err(why) = probe() {
            // tests/run sets RUSTGT_TEST_STRICT: there the ring must be there.
            assert!(
                std::env::var_os("RUSTGT_TEST_STRICT").is_none(),
                "io_uring unavailable: {why} (RUSTGT_TEST_STRICT is set)"
            );
            eprintln!("skipping: io_uring unavailable here: {why}");
            return None;
        }
        Some(TestRing::start().expect("ring").expect("enabled"))
    }

    fn run(
        ring: &TestRing,
        file: &UringFile,
        op: Op,
        buf: RingBuf,
    ) -> (io::Result<usize>, RingBuf) {
        let out: Outcome = Rc::new(RefCell::new(None));
        let sink = Rc::clone(&out);
        ring.submit(
            &file.file,
            op,
            buf,
            Box::new(move |r, b| *sink.borrow_mut() = Some((r, b))),
        );
        // Blocks until the op is done.
        ring.drain();
        let got = out.borrow_mut().take();
        got.expect("callback ran")
    }

    /// A temporary file of `len` bytes of `byte`, as a store hands it out.
    fn filled(byte: u8, len: usize) -> UringFile {
        let mut tmp = tempfile::tempfile().expect("tempfile");
        tmp.write_all(&vec![byte; len]).expect("fill");
        uring_file(tmp)
    }

    fn uring_file(file: File) -> UringFile {
        UringFile {
            file: Arc::new(file),
            direct_align: None,
            meters: SmallVec::new(),
            holds: SmallVec::new(),
        }
    }

    #[test]
    fn write_then_read_fua_and_fsync_on_a_tempfile() {
        let Some((ring, _fd)) = ring_or_skip() else {
            return;
        };
        let f = filled(0, 8192);

        let data: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
        let (r, buf) = run(
            &ring,
            &f,
            Op::Write {
                offset: 4096,
                len: 4096,
                dsync: true,
            },
            RingBuf::Pooled(data.clone().into()),
        );
        assert_eq!(r.expect("write"), 4096);
        assert_eq!(buf.as_slice(), &data[..], "the buffer comes back");
        let mut check = vec![0u8; 4096];
        f.file.read_exact_at(&mut check, 4096).expect("pread");
        assert_eq!(check, data, "the ring's write is in the file");

        let (r, buf) = run(
            &ring,
            &f,
            Op::Read {
                offset: 4096,
                len: 4096,
            },
            RingBuf::Pooled(vec![0; 4096].into()),
        );
        assert_eq!(r.expect("read"), 4096);
        assert_eq!(buf.into_pooled().into_vec(), data);

        let (r, _) = run(&ring, &f, Op::Fsync, RingBuf::Empty);
        assert_eq!(r.expect("fsync"), 0);
        assert_eq!(ring.in_flight(), 0);
    }

    #[test]
    fn inline_writes_take_whole_short_pages_until_one_is_slow() {
        let Some((ring, _fd)) = ring_or_skip() else {
            return;
        };
        let page = crate::common::page_size();
        assert!(ring.may_write_now(0, page));
        assert!(ring.may_write_now(page as u64 * 3, INLINE_WRITE_MAX));
        assert!(!ring.may_write_now(0, INLINE_WRITE_MAX + page), "too long");
        assert!(!ring.may_write_now(512, page), "starts inside a page");
        assert!(!ring.may_write_now(0, 512), "ends inside a page");
        assert!(!ring.may_write_now(0, 0));

        let f = filled(0, page * 2);
        let data = vec![0x5a_u8; page];
        ring.write_now(&f, page as u64, &data)
            .expect("inline write");
        let mut check = vec![0u8; page];
        f.file
            .read_exact_at(&mut check, page as u64)
            .expect("pread");
        assert_eq!(check, data, "the inline write is in the file");

        ring.note_inline_write(INLINE_WRITE_SLOW / 2);
        assert!(ring.may_write_now(0, page), "a quick write changes nothing");
        ring.note_inline_write(INLINE_WRITE_SLOW * 2);
        assert!(
            !ring.may_write_now(0, page),
            "a slow write pauses inline writes"
        );
        let mut pause = ring.paused.get();
        assert_eq!(pause.len, INLINE_WRITE_PAUSE_MIN, "isolated: briefly");
        pause.until = Some(Instant::now());
        ring.paused.set(pause);
        assert!(ring.may_write_now(0, page), "the pause ends");
        ring.note_inline_write(INLINE_WRITE_SLOW * 2);
        assert!(!ring.may_write_now(0, page));
        assert_eq!(
            ring.paused.get().len,
            INLINE_WRITE_PAUSE_MIN * 2,
            "another soon after: twice as long"
        );
        let (other, _fd) = TestRing::start().expect("ring").expect("enabled");
        assert!(
            other.may_write_now(0, page),
            "the pause is the reactor's own: another ring's writes go on"
        );
    }

    #[test]
    fn the_pause_after_slow_writes_doubles_while_they_keep_coming() {
        let t0 = Instant::now();
        let min = INLINE_WRITE_PAUSE_MIN;
        assert_eq!(next_pause(Duration::ZERO, None, t0), min, "the first");
        // Each slow write right at the end of the pause before.
        let mut len = Duration::ZERO;
        let mut end = None;
        let mut now = t0;
        let mut lens = Vec::new();
        for _ in 0..8 {
            len = next_pause(len, end, now);
            lens.push(len.as_millis());
            now += len;
            end = Some(now);
        }
        assert_eq!(lens, [50, 100, 200, 400, 800, 1000, 1000, 1000]);
        // Within the calm after the last pause: still doubling (capped).
        let soon = now + INLINE_WRITE_CALM - Duration::from_millis(1);
        assert_eq!(next_pause(len, end, soon), INLINE_WRITE_PAUSE_MAX);
        // After the calm: from the start again.
        let later = now + INLINE_WRITE_CALM;
        assert_eq!(next_pause(len, end, later), min);
    }

    #[test]
    fn read_past_the_end_is_an_eof_error_and_bad_fd_an_os_error() {
        let Some((ring, _fd)) = ring_or_skip() else {
            return;
        };
        let f = filled(7, 1024);
        // 512 bytes exist from 512 on, 1024 are asked for: the ring
        // continues the short read, then meets the end.
        let (r, _) = run(
            &ring,
            &f,
            Op::Read {
                offset: 512,
                len: 1024,
            },
            RingBuf::Pooled(vec![0; 1024].into()),
        );
        assert_eq!(r.expect_err("eof").kind(), io::ErrorKind::UnexpectedEof);

        // A file opened read-only refuses the write with EBADF.
        let path = tempfile::NamedTempFile::new().expect("named");
        let ro = uring_file(File::open(path.path()).expect("open"));
        let (r, _) = run(
            &ring,
            &ro,
            Op::Write {
                offset: 0,
                len: 512,
                dsync: false,
            },
            RingBuf::Pooled(vec![1; 512].into()),
        );
        assert_eq!(r.expect_err("ebadf").raw_os_error(), Some(libc::EBADF));
    }

    #[test]
    fn an_op_longer_than_its_buffer_is_refused_at_once() {
        let Some((ring, _fd)) = ring_or_skip() else {
            return;
        };
        let f = uring_file(tempfile::tempfile().expect("tempfile"));
        let called = Rc::new(Cell::new(false));
        let c = Rc::clone(&called);
        ring.submit(
            &f.file,
            Op::Read {
                offset: 0,
                len: 8192,
            },
            RingBuf::Pooled(vec![0; 4096].into()),
            Box::new(move |r, _| {
                assert_eq!(r.expect_err("refused").kind(), io::ErrorKind::InvalidInput);
                c.set(true);
            }),
        );
        assert!(called.get(), "refusal runs the callback at once");
        assert_eq!(ring.in_flight(), 0);
    }

    #[test]
    fn a_closed_ring_completes_what_it_holds_and_refuses_more() {
        let Some((ring, _fd)) = ring_or_skip() else {
            return;
        };
        let f = filled(5, 4096);
        ring.defer_submission(Box::new(|| {}));
        let read = Rc::new(Cell::new(false));
        let r = Rc::clone(&read);
        ring.submit(
            &f.file,
            Op::Read {
                offset: 0,
                len: 4096,
            },
            RingBuf::Pooled(vec![0; 4096].into()),
            Box::new(move |res, b| {
                assert_eq!(res.expect("read"), 4096);
                assert!(b.as_slice().iter().all(|&x| x == 5));
                r.set(true);
            }),
        );
        assert!(ring.has_room());
        ring.close();
        assert!(read.get(), "the queued op was submitted and completed");
        assert_eq!(ring.in_flight(), 0);
        assert!(!ring.has_room(), "closed: no room");
        let refused = Rc::new(Cell::new(false));
        let c = Rc::clone(&refused);
        ring.submit(
            &f.file,
            Op::Fsync,
            RingBuf::Empty,
            Box::new(move |res, _| {
                assert_eq!(res.expect_err("refused").kind(), io::ErrorKind::WouldBlock);
                c.set(true);
            }),
        );
        assert!(refused.get(), "refused at once, as not performed");
        assert_eq!(ring.in_flight(), 0);
    }

    #[test]
    fn reap_runs_callbacks_on_this_thread_and_aligned_buffers_are_aligned() {
        let Some((ring, fd)) = ring_or_skip() else {
            return;
        };
        let b = RingBuf::aligned(4096, 4096).expect("aligned");
        assert_eq!(b.as_slice().as_ptr() as usize % 4096, 0);
        let f = filled(3, 4096);
        let out: Outcome = Rc::new(RefCell::new(None));
        let sink = Rc::clone(&out);
        ring.submit(
            &f.file,
            Op::Read {
                offset: 0,
                len: 4096,
            },
            b,
            Box::new(move |r, b| *sink.borrow_mut() = Some((r, b))),
        );
        // Wait for the eventfd the way a reactor's poll would.
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        for _ in 0..1000 {
            if out.borrow().is_some() {
                break;
            }
            // SAFETY: one pollfd that lives across the call.
            let rc = unsafe { libc::poll(&mut pfd, 1, 10_000) };
            assert!(rc >= 0, "poll");
            clear_eventfd(&fd);
            ring.reap();
        }
        let (r, buf) = out.borrow_mut().take().expect("done");
        assert_eq!(r.expect("read"), 4096);
        assert!(buf.as_slice().iter().all(|&b| b == 3));
        assert_eq!(ring.in_flight(), 0);
    }

    #[test]
    fn deferred_submission_wakes_once_per_batch_and_flush_submits() {
        let Some((ring, fd)) = ring_or_skip() else {
            return;
        };
        let f = filled(9, 8192);
        let wakes = Rc::new(Cell::new(0));
        let w = Rc::clone(&wakes);
        ring.defer_submission(Box::new(move || w.set(w.get() + 1)));
        let done = Rc::new(Cell::new(0));
        for offset in [0u64, 4096] {
            let d = Rc::clone(&done);
            ring.submit(
                &f.file,
                Op::Read { offset, len: 4096 },
                RingBuf::Pooled(vec![0; 4096].into()),
                Box::new(move |r, b| {
                    assert_eq!(r.expect("read"), 4096);
                    assert!(b.as_slice().iter().all(|&x| x == 9));
                    d.set(d.get() + 1);
                }),
            );
        }
        assert_eq!(wakes.get(), 1, "one wake for the batch");
        assert_eq!(ring.in_flight(), 2);
        ring.flush();
        for _ in 0..1000 {
            if done.get() >= 2 {
                break;
            }
            ring.reap_blocking();
        }
        assert_eq!(done.get(), 2);
        clear_eventfd(&fd);
        // The next batch wakes again.
        let synced = Rc::new(Cell::new(false));
        let s = Rc::clone(&synced);
        ring.submit(
            &f.file,
            Op::Fsync,
            RingBuf::Empty,
            Box::new(move |r, _| {
                assert!(r.is_ok());
                s.set(true);
            }),
        );
        assert_eq!(wakes.get(), 2);
        // Dropping the ring submits what is queued, waits for it and runs
        // its callback.
        drop(ring);
        assert!(synced.get(), "the ring's end completed the queued op");
    }
}
