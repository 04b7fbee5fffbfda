//! Fault injection: a store wrapper ([`FaultBackstore`]) that makes reads
//! and writes fail, run slowly or hang, as [`FaultSpec`] says, for tests
//! and for administrators rehearsing failures.
//!
//! Faults:
//! - `read_error`: a read fails with EIO ([`BackstoreError::Read`]);
//! - `write_error`: a write fails with EIO ([`BackstoreError::Write`]);
//! - `write_nospace`: a write fails with ENOSPC ([`BackstoreError::Write`]
//!   whose error kind is `StorageFull`), as a thin store out of space does;
//! - `delay`: a read or write waits `time` first;
//! - `hang`: a read or write waits until the fault is cleared (or changed
//!   to no longer cover it), or until the work item is cancelled
//!   ([`crate::cancel`]: the SCSI core's workers cancel an aborted task).
//!
//! Each fault has a [`Trigger`]: an LBA range the I/O must touch, every
//! Nth I/O (among those in the range), a probability; all that are given
//! must hold, and an empty trigger fires on every I/O. Ranges and
//! every-Nth are deterministic, for tests; probabilities are for
//! rehearsals.
//!
//! Reads are `read_at` and `read_buf`; writes are `write_at` and
//! `write_same`. Flush, unmap and the allocation map are never faulted.
//! A write fault fires before the data is written; nothing is written.
//!
//! Guarantees:
//! - the faults can be replaced at any time ([`Faults::set`]); waits in
//!   progress re-check the new faults at once, and every-Nth counts start
//!   again;
//! - with no fault set the wrapper forwards every call, including
//!   [`Backstore::nonblocking`] and [`Backstore::uring_file`], so the
//!   LUN's fast paths stay; with a fault set it reports
//!   [`Nonblocking::Never`] and no ring file, so every command reaches the
//!   wrapper on a thread that may wait, and a non-blocking attempt already
//!   under way gives up ([`nowait::would_block`]);
//! - nothing waits without end on a thread that cannot be cancelled: there
//!   a hang gives up after [`UNCANCELLABLE_HANG_LIMIT`] and fails like an
//!   I/O error; a cancelled wait returns within about [`POLL`].

use std::fmt;
use std::io;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use crate::hint::StreamHint;
use crate::{
    buf::IoBuf, cancel, error::BackstoreError, geometry::Extent, geometry::Geometry, nowait,
    store::Backstore, uring,
};
use crate::{error::Result, nowait::Nonblocking};

/// Longest `delay` accepted.
pub const MAX_DELAY: Duration = Duration::from_secs(60);

/// How often a wait looks at its cancellation probe.
pub const POLL: Duration = Duration::from_millis(10);

/// Longest hang on a thread nothing can cancel (no [`cancel`] probe):
/// after it the I/O fails as an I/O error.
pub const UNCANCELLABLE_HANG_LIMIT: Duration = Duration::from_secs(30);

/// Logical blocks `first..=last`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LbaRange {
    /// The first block of the range, in logical blocks of the store.
    pub first: u64,
    /// The last block of the range (inclusive); `u64::MAX` for "to the end".
    pub last: u64,
}

impl LbaRange {
    fn overlaps(&self, first: u64, last: u64) -> bool {
        self.first <= last && first <= self.last
    }
}

/// "N" (one block), "A-B" (inclusive) or "A-" (from A to the end).
impl FromStr for LbaRange {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let num = |t: &str| {
            let t = t.trim();
            if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            t.parse::<u64>().ok()
        };
        let bad = || format!("{s:?} is not an LBA range such as \"100\", \"100-199\" or \"100-\"");
        let (first, last) = match s.split_once('-') {
            None => {
                let n = num(s).ok_or_else(bad)?;
                (n, n)
            }
            Some((a, b)) if b.trim().is_empty() => (num(a).ok_or_else(bad)?, u64::MAX),
            Some((a, b)) => (num(a).ok_or_else(bad)?, num(b).ok_or_else(bad)?),
        };
        if first > last {
            return Err(format!("{s:?}: the first LBA is after the last"));
        }
        Ok(LbaRange { first, last })
    }
}

impl fmt::Display for LbaRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.first, self.last) {
            (a, b) if a == b => write!(f, "{a}"),
            (a, u64::MAX) => write!(f, "{a}-"),
            (a, b) => write!(f, "{a}-{b}"),
        }
    }
}

/// When a fault fires; every condition given must hold.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Trigger {
    /// The I/O touches at least one of these blocks.
    pub lba: Option<LbaRange>,
    /// Every Nth I/O (N >= 1) that passed the range condition: the Nth,
    /// the 2Nth, ...
    pub every: Option<u64>,
    /// With this probability, 0.0..=1.0.
    pub probability: Option<f64>,
}

impl Trigger {
    /// Checks the values: `every` at least 1, `probability` in 0..=1.
    /// The message names the key.
    pub fn validate(&self) -> std::result::Result<(), (&'static str, String)> {
        if self.every == Some(0) {
            return Err(("every", "must be at least 1".into()));
        }
        if let Some(p) = self.probability {
            if !(0.0..=1.0).contains(&p) {
                return Err(("probability", format!("{p} is out of range 0.0..=1.0")));
            }
        }
        Ok(())
    }
}

/// A delay and when it applies.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Delay {
    /// How long a read or write waits before it goes to the inner store
    /// (configuration refuses more than [`MAX_DELAY`]).
    pub time: Duration,
    /// Which I/Os wait.
    pub when: Trigger,
}

/// The faults of one LUN; `None` is no such fault.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct FaultSpec {
    /// Reads that fail with EIO ([`BackstoreError::Read`]).
    pub read_error: Option<Trigger>,
    /// Writes that fail with EIO ([`BackstoreError::Write`]), writing nothing.
    pub write_error: Option<Trigger>,
    /// Writes that fail with ENOSPC ([`BackstoreError::Write`] of kind
    /// `StorageFull`), writing nothing.
    pub write_nospace: Option<Trigger>,
    /// Reads and writes that wait a while first.
    pub delay: Option<Delay>,
    /// Reads and writes that wait until the fault no longer covers them or
    /// their work item is cancelled (or, where nothing can cancel them,
    /// [`UNCANCELLABLE_HANG_LIMIT`], then fail as an I/O error).
    pub hang: Option<Trigger>,
}

impl FaultSpec {
    /// No fault at all.
    pub fn is_empty(&self) -> bool {
        *self == FaultSpec::default()
    }
}

/// Parses a duration: digits and a unit "us", "ms" or "s" ("5ms", "2s").
/// `None` when malformed or too large.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let t = s.trim().to_ascii_lowercase();
    let (digits, unit_us) = if let Some(d) = t.strip_suffix("us") {
        (d, 1)
    } else if let Some(d) = t.strip_suffix("ms") {
        (d, 1_000)
    } else if let Some(d) = t.strip_suffix('s') {
        (d, 1_000_000)
    } else {
        return None;
    };
    let digits = digits.trim_end();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let us = digits.parse::<u64>().ok()?.checked_mul(unit_us)?;
    Some(Duration::from_micros(us))
}

/// A duration as [`parse_duration`] reads it back.
pub fn format_duration(d: Duration) -> String {
    let us = d.as_micros();
    if us % 1_000_000 == 0 {
        format!("{}s", us / 1_000_000)
    } else if us % 1_000 == 0 {
        format!("{}ms", us / 1_000)
    } else {
        format!("{us}us")
    }
}

/// One fault spec in force, with its every-Nth counters.
#[derive(Debug)]
struct Plan {
    spec: FaultSpec,
    read_error: AtomicU64,
    write_error: AtomicU64,
    write_nospace: AtomicU64,
    delay: AtomicU64,
    hang: AtomicU64,
}

impl Plan {
    fn new(spec: FaultSpec) -> Plan {
        Plan {
            spec,
            read_error: AtomicU64::new(0),
            write_error: AtomicU64::new(0),
            write_nospace: AtomicU64::new(0),
            delay: AtomicU64::new(0),
            hang: AtomicU64::new(0),
        }
    }
}

/// Why a wait ended early.
enum Ended {
    Cancelled,
    TimedOut,
}

/// The live faults of one LUN, shared by its wrapper and whoever changes
/// them (the admin path).
#[derive(Debug)]
pub struct Faults {
    active: AtomicBool,
    plan: RwLock<Option<Arc<Plan>>>,
    /// Bumped and signalled on every change, for waits in progress.
    generation: Mutex<u64>,
    changed: Condvar,
    rng: AtomicU64,
    injected: AtomicU64,
}

impl Faults {
    /// Faults with `spec` in force (an empty spec: none yet), ready to share
    /// between a [`FaultBackstore`] and the admin path.
    pub fn new(spec: FaultSpec) -> Arc<Faults> {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x9E37_79B9_7F4A_7C15, |d| d.as_nanos() as u64)
            | 1;
        let f = Faults {
            active: AtomicBool::new(false),
            plan: RwLock::new(None),
            generation: Mutex::new(0),
            changed: Condvar::new(),
            rng: AtomicU64::new(seed),
            injected: AtomicU64::new(0),
        };
        f.set(spec);
        Arc::new(f)
    }

    /// Puts `spec` in force (an empty one clears every fault). Waits in
    /// progress see it at once.
    pub fn set(&self, spec: FaultSpec) {
        let plan = (!spec.is_empty()).then(|| Arc::new(Plan::new(spec)));
        let active = plan.is_some();
        *self.plan.write().unwrap_or_else(PoisonError::into_inner) = plan;
        self.active.store(active, Ordering::SeqCst);
        let mut g = self
            .generation
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *g = g.wrapping_add(1);
        drop(g);
        self.changed.notify_all();
    }

    /// The faults in force.
    pub fn spec(&self) -> FaultSpec {
        self.plan().map(|p| p.spec).unwrap_or_default()
    }

    /// Faults injected so far (errors returned, delays and hangs begun).
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::Relaxed)
    }

    /// Whether any fault is set (one atomic load).
    pub fn active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    fn plan(&self) -> Option<Arc<Plan>> {
        if !self.active() {
            return None;
        }
        self.plan
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// A uniform number in [0, 1) (xorshift64*, shared; quality is not
    /// the point).
    fn random(&self) -> f64 {
        let mut x = self.rng.load(Ordering::Relaxed);
        loop {
            let mut n = x;
            n ^= n >> 12;
            n ^= n << 25;
            n ^= n >> 27;
            match self
                .rng
                .compare_exchange_weak(x, n, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => {
                    let out = n.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11;
                    return out as f64 / (1u64 << 53) as f64;
                }
                Err(cur) => x = cur,
            }
        }
    }

    fn fires(&self, t: &Trigger, counter: &AtomicU64, blocks: (u64, u64)) -> bool {
        if t.lba.is_some_and(|r| !r.overlaps(blocks.0, blocks.1)) {
            return false;
        }
        if let Some(every) = t.every {
            let n = counter.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
            if every == 0 || n % every != 0 {
                return false;
            }
        }
        if let Some(p) = t.probability {
            if self.random() >= p {
                return false;
            }
        }
        self.injected.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Waits until `until` (or without end when `None`) while `still`
    /// holds of the faults in force; ends early when the work item is
    /// cancelled, or after [`UNCANCELLABLE_HANG_LIMIT`] on a thread that
    /// cannot be.
    fn wait(
        &self,
        until: Option<Instant>,
        still: impl Fn(&FaultSpec) -> bool,
    ) -> std::result::Result<(), Ended> {
        let started = Instant::now();
        let cancellable = cancel::available();
        let mut g = self
            .generation
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        loop {
            if cancel::requested() {
                return Err(Ended::Cancelled);
            }
            let now = Instant::now();
            if until.is_some_and(|u| now >= u) || !still(&self.spec()) {
                return Ok(());
            }
            if !cancellable && now.duration_since(started) >= UNCANCELLABLE_HANG_LIMIT {
                return Err(Ended::TimedOut);
            }
            let step = until.map_or(POLL, |u| u.saturating_duration_since(now).min(POLL));
            g = self
                .changed
                .wait_timeout(g, step)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Read,
    Write,
}

fn eio() -> io::Error {
    io::Error::from_raw_os_error(libc::EIO)
}

fn op_error(op: Op, e: io::Error) -> BackstoreError {
    match op {
        Op::Read => BackstoreError::Read(e),
        Op::Write => BackstoreError::Write(e),
    }
}

fn cancelled() -> BackstoreError {
    BackstoreError::Io(io::Error::new(
        io::ErrorKind::Interrupted,
        "cancelled while held by fault injection",
    ))
}

/// A store whose reads and writes fail, wait or hang as its [`Faults`]
/// say; everything else goes to the store it wraps.
#[derive(Debug)]
pub struct FaultBackstore {
    inner: Arc<dyn Backstore>,
    faults: Arc<Faults>,
}

impl FaultBackstore {
    /// Wraps `inner`; its reads and writes obey `faults` from now on,
    /// whatever [`Faults::set`] puts in force later.
    pub fn new(inner: Arc<dyn Backstore>, faults: Arc<Faults>) -> FaultBackstore {
        FaultBackstore { inner, faults }
    }

    /// The store underneath.
    pub fn inner(&self) -> &Arc<dyn Backstore> {
        &self.inner
    }

    /// The live faults.
    pub fn faults(&self) -> &Arc<Faults> {
        &self.faults
    }

    /// Applies the faults to one I/O of `len` bytes at `offset`, before it
    /// reaches the store: waits, then fails or lets it through.
    fn before(&self, op: Op, offset: u64, len: u64) -> Result<()> {
        let Some(plan) = self.faults.plan() else {
            return Ok(());
        };
        if nowait::active() {
            // A reactor's attempt started before the faults were set: the
            // command goes to a worker, where it may wait.
            return Err(nowait::would_block());
        }
        let bs = u64::from(self.inner.geometry().block_size.max(1));
        let first = offset / bs;
        let last = offset.saturating_add(len.saturating_sub(1)) / bs;
        let blocks = (first, last.max(first));
        let f = &self.faults;
        let s = &plan.spec;
        if let Some(d) = &s.delay {
            if f.fires(&d.when, &plan.delay, blocks) {
                let until = Instant::now() + d.time;
                match f.wait(Some(until), |now| now.delay.is_some()) {
                    Ok(()) => {}
                    Err(Ended::Cancelled) => return Err(cancelled()),
                    Err(Ended::TimedOut) => return Err(op_error(op, eio())),
                }
            }
        }
        if let Some(h) = &s.hang {
            if f.fires(h, &plan.hang, blocks) {
                tracing::debug!(?op, offset, len, "fault injection: I/O hangs");
                let covered = |now: &FaultSpec| {
                    now.hang
                        .is_some_and(|h| h.lba.is_none_or(|r| r.overlaps(blocks.0, blocks.1)))
                };
                match f.wait(None, covered) {
                    Ok(()) => {}
                    Err(Ended::Cancelled) => return Err(cancelled()),
                    Err(Ended::TimedOut) => return Err(op_error(op, eio())),
                }
            }
        }
        match op {
            Op::Read => {
                if let Some(t) = &s.read_error {
                    if f.fires(t, &plan.read_error, blocks) {
                        return Err(op_error(op, eio()));
                    }
                }
            }
            Op::Write => {
                if let Some(t) = &s.write_nospace {
                    if f.fires(t, &plan.write_nospace, blocks) {
                        let e = io::Error::from_raw_os_error(libc::ENOSPC);
                        return Err(op_error(op, e));
                    }
                }
                if let Some(t) = &s.write_error {
                    if f.fires(t, &plan.write_error, blocks) {
                        return Err(op_error(op, eio()));
                    }
                }
            }
        }
        Ok(())
    }
}

impl Backstore for FaultBackstore {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    fn geometry(&self) -> Geometry {
        self.inner.geometry()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.read_at_hinted(buf, offset, StreamHint::default())
    }

    fn read_buf(&self, offset: u64, len: usize) -> Result<IoBuf> {
        self.read_buf_hinted(offset, len, StreamHint::default())
    }

    fn read_at_hinted(&self, buf: &mut [u8], offset: u64, hint: StreamHint) -> Result<()> {
        self.before(Op::Read, offset, buf.len() as u64)?;
        self.inner.read_at_hinted(buf, offset, hint)
    }

    fn read_buf_hinted(&self, offset: u64, len: usize, hint: StreamHint) -> Result<IoBuf> {
        self.before(Op::Read, offset, len as u64)?;
        self.inner.read_buf_hinted(offset, len, hint)
    }

    fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> Result<()> {
        self.before(Op::Write, offset, buf.len() as u64)?;
        self.inner.write_at(buf, offset, fua)
    }

    fn flush(&self) -> Result<()> {
        self.inner.flush()
    }

    fn write_same(&self, pattern: &[u8], offset: u64, len: u64) -> Result<()> {
        self.before(Op::Write, offset, len)?;
        self.inner.write_same(pattern, offset, len)
    }

    fn kernel_readahead(&self, on: bool) -> Result<()> {
        self.inner.kernel_readahead(on)
    }

    fn device_key(&self) -> Option<crate::geometry::DeviceKey> {
        self.inner.device_key()
    }

    fn unmap(&self, offset: u64, len: u64) -> Result<()> {
        self.inner.unmap(offset, len)
    }

    fn extents(&self, offset: u64, len: u64) -> Result<Vec<Extent>> {
        self.inner.extents(offset, len)
    }

    fn supports_write_same(&self) -> bool {
        self.inner.supports_write_same()
    }

    fn supports_unmap(&self) -> bool {
        self.inner.supports_unmap()
    }

    fn watch_capacity(&self, hook: Box<dyn Fn(u64) + Send + Sync>) -> bool {
        self.inner.watch_capacity(hook)
    }

    fn shared_state(&self) -> Option<std::sync::Arc<dyn crate::shared::SharedState>> {
        self.inner.shared_state()
    }

    /// Faults apply to the emulation (a read and a write) only.
    fn compare_and_write(
        &self,
        offset: u64,
        verify: &[u8],
        write: &[u8],
    ) -> Option<Result<Option<usize>>> {
        if self.faults.active() {
            return None;
        }
        self.inner.compare_and_write(offset, verify, write)
    }

    /// Faults apply on the workers only, as for io_uring.
    fn async_io(&self) -> Option<crate::aio::AsyncStore> {
        if self.faults.active() {
            None
        } else {
            self.inner.async_io()
        }
    }

    fn nonblocking(&self) -> Nonblocking {
        if self.faults.active() {
            Nonblocking::Never
        } else {
            self.inner.nonblocking()
        }
    }

    fn uring_file(&self) -> Option<uring::UringFile> {
        if self.faults.active() {
            None
        } else {
            self.inner.uring_file()
        }
    }

    fn has_uring_file(&self) -> bool {
        !self.faults.active() && self.inner.has_uring_file()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ram::RamBackstore;

    fn store(spec: FaultSpec) -> FaultBackstore {
        let ram: Arc<dyn Backstore> =
            Arc::new(RamBackstore::new(1 << 20, 512, false).expect("ram store"));
        FaultBackstore::new(ram, Faults::new(spec))
    }

    fn range(s: &str) -> Option<LbaRange> {
        Some(s.parse().expect("range"))
    }

    fn kind_of(e: &BackstoreError) -> (&'static str, Option<i32>) {
        match e {
            BackstoreError::Read(e) => ("read", e.raw_os_error()),
            BackstoreError::Write(e) => ("write", e.raw_os_error()),
            BackstoreError::Io(e) => ("io", e.raw_os_error()),
            _ => ("other", None),
        }
    }

    #[test]
    fn lba_ranges_parse_and_print() {
        for (text, first, last) in [
            ("7", 7, 7),
            ("100-199", 100, 199),
            (" 5 - 6 ", 5, 6),
            ("100-", 100, u64::MAX),
        ] {
            let r: LbaRange = text.parse().expect(text);
            assert_eq!((r.first, r.last), (first, last), "{text}");
            assert_eq!(r.to_string().parse::<LbaRange>(), Ok(r));
        }
        for bad in [
            "",
            "-",
            "-5",
            "a",
            "5-4",
            "1-2-3",
            "+1",
            "18446744073709551616",
        ] {
            assert!(bad.parse::<LbaRange>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn durations_parse_and_print() {
        assert_eq!(parse_duration("5ms"), Some(Duration::from_millis(5)));
        assert_eq!(parse_duration("2s"), Some(Duration::from_secs(2)));
        assert_eq!(parse_duration("250us"), Some(Duration::from_micros(250)));
        assert_eq!(parse_duration(" 10 MS "), Some(Duration::from_millis(10)));
        for bad in ["", "5", "ms", "1.5s", "-1s", "5m", "99999999999999999999s"] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
        for d in [1500u64, 2_000, 3_000_000] {
            let d = Duration::from_micros(d);
            assert_eq!(parse_duration(&format_duration(d)), Some(d));
        }
    }

    #[test]
    fn triggers_validate() {
        let t = Trigger {
            every: Some(0),
            ..Trigger::default()
        };
        assert_eq!(t.validate().map_err(|e| e.0), Err("every"));
        for p in [-0.1, 1.5, f64::NAN] {
            let t = Trigger {
                probability: Some(p),
                ..Trigger::default()
            };
            assert_eq!(t.validate().map_err(|e| e.0), Err("probability"), "{p}");
        }
        assert!(Trigger::default().validate().is_ok());
    }

    #[test]
    fn errors_hit_only_their_range_and_kind() {
        let s = store(FaultSpec {
            read_error: Some(Trigger {
                lba: range("8-15"),
                ..Trigger::default()
            }),
            write_error: Some(Trigger {
                lba: range("16"),
                ..Trigger::default()
            }),
            write_nospace: Some(Trigger {
                lba: range("32-"),
                ..Trigger::default()
            }),
            ..FaultSpec::default()
        });
        let mut buf = vec![0u8; 4096];
        // Blocks 0..=7: clean; 4..=11 touches the bad range.
        s.read_at(&mut buf, 0).expect("clean read");
        let e = s.read_at(&mut buf, 4 * 512).expect_err("faulty read");
        assert_eq!(kind_of(&e), ("read", Some(libc::EIO)));
        assert!(s.read_buf(8 * 512, 512).is_err());
        s.read_buf(16 * 512, 4096).expect("after the range");
        // Writes ignore the read fault, reads ignore the write faults.
        s.write_at(&buf, 8 * 512, false)
            .expect("write over a read fault");
        s.read_at(&mut buf[..512], 16 * 512)
            .expect("read over a write fault");
        let e = s.write_at(&buf, 12 * 512, false).expect_err("write error");
        assert_eq!(kind_of(&e), ("write", Some(libc::EIO)));
        let e = s
            .write_same(&[1u8; 512], 40 * 512, 4096)
            .expect_err("nospace");
        assert_eq!(kind_of(&e), ("write", Some(libc::ENOSPC)));
        if let BackstoreError::Write(io) = &e {
            assert_eq!(io.kind(), io::ErrorKind::StorageFull);
        }
        assert_eq!(s.faults().injected(), 4);
        // Flush and unmap are never faulted.
        s.flush().expect("flush");
        s.unmap(40 * 512, 512).expect("unmap");
        // Nothing was written by the failed write.
        s.read_at(&mut buf[..512], 16 * 512).expect("read");
        assert!(buf[..512].iter().all(|&b| b == 0));
    }

    #[test]
    fn every_nth_is_counted_and_restarts_on_set() {
        let every = |n| FaultSpec {
            write_error: Some(Trigger {
                every: Some(n),
                ..Trigger::default()
            }),
            ..FaultSpec::default()
        };
        let s = store(every(3));
        let buf = [0u8; 512];
        let fails: Vec<bool> = (0..7)
            .map(|_| s.write_at(&buf, 0, false).is_err())
            .collect();
        assert_eq!(fails, [false, false, true, false, false, true, false]);
        s.faults().set(every(2));
        assert!(s.write_at(&buf, 0, false).is_ok(), "count restarted");
        assert!(s.write_at(&buf, 0, false).is_err());
    }

    #[test]
    fn probabilities_zero_and_one() {
        let p = |p| FaultSpec {
            read_error: Some(Trigger {
                probability: Some(p),
                ..Trigger::default()
            }),
            ..FaultSpec::default()
        };
        let s = store(p(0.0));
        let mut buf = [0u8; 512];
        assert!((0..100).all(|_| s.read_at(&mut buf, 0).is_ok()));
        s.faults().set(p(1.0));
        assert!((0..100).all(|_| s.read_at(&mut buf, 0).is_err()));
        s.faults().set(p(0.5));
        let fails = (0..1000)
            .filter(|_| s.read_at(&mut buf, 0).is_err())
            .count();
        assert!((200..800).contains(&fails), "{fails} of 1000 at p=0.5");
    }

    #[test]
    fn fast_paths_only_without_faults() {
        let s = store(FaultSpec::default());
        assert_eq!(s.nonblocking(), Nonblocking::Always);
        assert!(!s.faults().active());
        s.faults().set(FaultSpec {
            hang: Some(Trigger::default()),
            ..FaultSpec::default()
        });
        assert_eq!(s.nonblocking(), Nonblocking::Never);
        assert!(s.uring_file().is_none());
        // An attempt under way gives up instead of hanging.
        let mut buf = [0u8; 512];
        let (r, blocked) = nowait::attempt(|| s.read_at(&mut buf, 0));
        assert!(blocked && matches!(r, Err(BackstoreError::WouldBlock)));
        s.faults().set(FaultSpec::default());
        assert_eq!(s.nonblocking(), Nonblocking::Always);
        assert!(s.faults().spec().is_empty());
    }

    #[test]
    fn delay_is_waited() {
        let s = store(FaultSpec {
            delay: Some(Delay {
                time: Duration::from_millis(50),
                when: Trigger::default(),
            }),
            ..FaultSpec::default()
        });
        let t = Instant::now();
        let mut buf = [0u8; 512];
        s.read_at(&mut buf, 0).expect("read");
        s.write_at(&buf, 0, false).expect("write");
        assert!(t.elapsed() >= Duration::from_millis(100));
    }

    fn hang_all() -> FaultSpec {
        FaultSpec {
            hang: Some(Trigger {
                lba: range("0-7"),
                ..Trigger::default()
            }),
            ..FaultSpec::default()
        }
    }

    #[test]
    fn hang_moved_elsewhere_releases_the_io() {
        let s = Arc::new(store(hang_all()));
        let s2 = Arc::clone(&s);
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            s2.read_at(&mut buf, 0)
        });
        std::thread::sleep(Duration::from_millis(100));
        assert!(!reader.is_finished(), "the read hangs");
        // A hang that no longer covers the I/O lets it go on.
        s.faults().set(FaultSpec {
            hang: Some(Trigger {
                lba: range("100"),
                ..Trigger::default()
            }),
            ..FaultSpec::default()
        });
        assert!(reader.join().expect("reader").is_ok());
    }

    #[test]
    fn hang_is_released_by_clearing_the_fault() {
        let s = Arc::new(store(hang_all()));
        let s2 = Arc::clone(&s);
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            s2.read_at(&mut buf, 0)
        });
        std::thread::sleep(Duration::from_millis(100));
        assert!(!reader.is_finished(), "the read hangs");
        s.faults().set(FaultSpec::default());
        let r = reader.join().expect("reader");
        assert!(r.is_ok(), "the I/O goes through once the hang is cleared");
    }

    #[test]
    fn hang_ends_when_cancelled() {
        let s = Arc::new(store(hang_all()));
        let flag = Arc::new(AtomicBool::new(false));
        let (s2, f2) = (Arc::clone(&s), Arc::clone(&flag));
        let reader = std::thread::spawn(move || {
            let f3 = Arc::clone(&f2);
            cancel::install(Box::new(move |_| f3.load(Ordering::SeqCst)));
            cancel::scope([1, 2], || {
                let mut buf = [0u8; 512];
                s2.read_at(&mut buf, 0)
            })
        });
        std::thread::sleep(Duration::from_millis(100));
        assert!(!reader.is_finished(), "the read hangs");
        let t = Instant::now();
        flag.store(true, Ordering::SeqCst);
        let r = reader.join().expect("reader");
        assert!(t.elapsed() < Duration::from_secs(5));
        let e = r.expect_err("a cancelled hang fails");
        assert_eq!(kind_of(&e).0, "io");
        // Outside the hang's range nothing waits.
        let mut buf = [0u8; 512];
        s.read_at(&mut buf, 8 * 512).expect("outside the hang");
    }
}
