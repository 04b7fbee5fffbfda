//! SANITIZE (SBC-3 §5.19, §4.11) with virtual-disk semantics.
//!
//! This module holds a logical unit's sanitize state and the thread that
//! runs the operation; the SANITIZE command itself is in `sanitize_cmd`.
//!
//! - OVERWRITE writes the initialization pattern (repeated to fill each
//!   logical block) over the whole medium. Only the last pass is visible on
//!   a virtual disk, so one pass is written: the pattern, inverted when
//!   INVERT is set and the OVERWRITE COUNT is even (SBC-3 §5.19.3).
//! - BLOCK ERASE and CRYPTOGRAPHIC ERASE deallocate the whole medium, which
//!   then reads as zeros. They are offered only on thin-provisioned units
//!   (LBPME=1), where deallocation is what an erase of flash amounts to;
//!   VPD page B1h reports WABEREQ/WACEREQ 01b for them (reads succeed).
//! - EXIT FAILURE MODE leaves the failure mode of a failed sanitize when
//!   that sanitize had AUSE set.
//!
//! Guarantees:
//! - the operation runs on its own thread in bounded chunks (at most
//!   [`CHUNK_BYTES`] per backstore call), optionally paced to the LUN's
//!   configured rate so that it cannot starve other LUNs' I/O;
//! - it survives the command that started it: ABORT TASK, resets and
//!   session loss do not stop it (SBC-3 §4.11.3); only shutting the LUN
//!   down does;
//! - while it runs, every command but INQUIRY, REPORT LUNS and REQUEST
//!   SENSE ends with NOT READY, SANITIZE IN PROGRESS and a progress
//!   indication; REQUEST SENSE returns that sense data;
//! - a failed sanitize (a backstore error) leaves the unit in the sanitize
//!   failure mode: commands that access the medium end with MEDIUM ERROR,
//!   SANITIZE COMMAND FAILED until a sanitize succeeds or EXIT FAILURE MODE
//!   is accepted. The state is not persisted across a restart.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustgt_backstore::{Backstore, BackstoreError};

use crate::max_transfer::MAX_TRANSFER_BYTES;
use crate::medium::works_without_medium;
use crate::sense::{Asc, Sense, SenseKey};

/// SANITIZE service actions (SBC-3 table 50).
pub(crate) const SA_OVERWRITE: u8 = 0x01;
pub(crate) const SA_BLOCK_ERASE: u8 = 0x02;
pub(crate) const SA_CRYPTO_ERASE: u8 = 0x03;
pub(crate) const SA_EXIT_FAILURE_MODE: u8 = 0x1F;

/// LOGICAL UNIT NOT READY, SANITIZE IN PROGRESS (SPC-4 table 28).
pub(crate) const SANITIZE_IN_PROGRESS: Asc = Asc::new(0x04, 0x1B);
/// SANITIZE COMMAND FAILED (SPC-4 table 28).
pub(crate) const SANITIZE_COMMAND_FAILED: Asc = Asc::new(0x31, 0x03);

/// Most bytes one backstore call of a sanitize covers.
pub(crate) const CHUNK_BYTES: u64 = MAX_TRANSFER_BYTES as u64;

/// How often a waiting SANITIZE command checks whether it was aborted.
const ABORT_POLL: Duration = Duration::from_millis(50);

/// Operation codes processed while a sanitize runs (SBC-3 §4.11.3).
fn allowed_while_running(opcode: u8) -> bool {
    matches!(opcode, 0x03 | 0x12 | 0xA0)
}

/// What the sanitize thread writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Job {
    /// One logical block of pattern, written over every block.
    Overwrite(Vec<u8>),
    /// Deallocate every block.
    Deallocate,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Idle,
    Running {
        done: u64,
        total: u64,
    },
    /// The last sanitize failed; `ause` allows EXIT FAILURE MODE.
    Failed {
        ause: bool,
    },
}

/// Outcomes remembered for commands still waiting on their operation.
const OUTCOMES_KEPT: usize = 8;

#[derive(Debug)]
struct Status {
    phase: Phase,
    /// Number of sanitize operations started so far.
    started: u64,
    /// (operation number, succeeded) of the latest ended operations.
    outcomes: VecDeque<(u64, bool)>,
}

#[derive(Debug)]
struct Shared {
    status: Mutex<Status>,
    ended: Condvar,
    cancel: AtomicBool,
    /// Whether the phase is [`Phase::Idle`], so that
    /// [`Sanitizer::check`], run for every command, takes no lock while no
    /// sanitize runs or failed. Written with the phase, under its lock.
    idle: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Status> {
        self.status.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets the phase of `st` (this `Shared`'s status, locked).
    fn set_phase(&self, st: &mut Status, phase: Phase) {
        st.phase = phase;
        self.idle
            .store(matches!(phase, Phase::Idle), Ordering::Release);
    }
}

impl Status {
    fn record(&mut self, number: u64, ok: bool) {
        if self.outcomes.len() >= OUTCOMES_KEPT {
            self.outcomes.pop_front();
        }
        self.outcomes.push_back((number, ok));
    }
}

/// The sanitize state of one logical unit.
#[derive(Debug)]
pub(crate) struct Sanitizer {
    shared: Arc<Shared>,
    worker: Mutex<Option<JoinHandle<()>>>,
    /// Pace in bytes per second; `None` runs at full speed.
    rate: Option<u64>,
}

/// NOT READY, SANITIZE IN PROGRESS with the progress in 65536ths.
fn in_progress(done: u64, total: u64) -> Sense {
    let progress = if total == 0 {
        0
    } else {
        u16::try_from(u128::from(done) * 65536 / u128::from(total)).unwrap_or(u16::MAX)
    };
    Sense::new(SenseKey::NOT_READY, SANITIZE_IN_PROGRESS).with_progress(progress)
}

fn failed() -> Sense {
    Sense::new(SenseKey::MEDIUM_ERROR, SANITIZE_COMMAND_FAILED)
}

impl Sanitizer {
    pub(crate) fn new(rate: Option<u64>) -> Sanitizer {
        Sanitizer {
            shared: Arc::new(Shared {
                status: Mutex::new(Status {
                    phase: Phase::Idle,
                    started: 0,
                    outcomes: VecDeque::new(),
                }),
                ended: Condvar::new(),
                cancel: AtomicBool::new(false),
                idle: AtomicBool::new(true),
            }),
            worker: Mutex::new(None),
            rate: rate.filter(|&r| r > 0),
        }
    }

    /// Refuses `opcode` while a sanitize runs or after one failed.
    pub(crate) fn check(&self, opcode: u8) -> Result<(), Sense> {
        if self.shared.idle.load(Ordering::Acquire) {
            return Ok(());
        }
        match self.shared.lock().phase {
            Phase::Running { done, total } if !allowed_while_running(opcode) => {
                Err(in_progress(done, total))
            }
            Phase::Failed { .. } if !works_without_medium(opcode) && opcode != 0x48 => {
                Err(failed())
            }
            _ => Ok(()),
        }
    }

    /// Sense data REQUEST SENSE reports while a sanitize runs.
    pub(crate) fn pending_sense(&self) -> Option<Sense> {
        match self.shared.lock().phase {
            Phase::Running { done, total } => Some(in_progress(done, total)),
            _ => None,
        }
    }

    /// EXIT FAILURE MODE: allowed after a failed sanitize with AUSE set; a
    /// no-op when not in failure mode.
    pub(crate) fn exit_failure_mode(&self) -> Result<(), Sense> {
        let mut st = self.shared.lock();
        match st.phase {
            Phase::Failed { ause: false } => Err(Sense::invalid_cdb_field(1, Some(5))),
            Phase::Failed { ause: true } => {
                self.shared.set_phase(&mut st, Phase::Idle);
                Ok(())
            }
            Phase::Idle | Phase::Running { .. } => Ok(()),
        }
    }

    /// Starts `job` over `total` bytes of `store`; returns its number.
    pub(crate) fn start(
        &self,
        job: Job,
        store: Arc<dyn Backstore>,
        total: u64,
        ause: bool,
    ) -> Result<u64, Sense> {
        let mut worker = self.worker.lock().unwrap_or_else(PoisonError::into_inner);
        let number = {
            let mut st = self.shared.lock();
            if let Phase::Running { done, total } = st.phase {
                return Err(in_progress(done, total));
            }
            self.shared
                .set_phase(&mut st, Phase::Running { done: 0, total });
            st.started += 1;
            st.started
        };
        // The previous operation has ended (its phase left Running).
        if let Some(old) = worker.take() {
            if old.join().is_err() {
                tracing::error!("previous sanitize thread panicked");
            }
        }
        let shared = Arc::clone(&self.shared);
        let rate = self.rate;
        let spawned = std::thread::Builder::new()
            .name("rustgt-sanitize".into())
            .spawn(move || {
                let result = run(&shared, store.as_ref(), &job, total, rate);
                if let Err(e) = &result {
                    tracing::error!(error = %e, "sanitize failed");
                }
                let mut st = shared.lock();
                let phase = if result.is_ok() {
                    Phase::Idle
                } else {
                    Phase::Failed { ause }
                };
                shared.set_phase(&mut st, phase);
                st.record(number, result.is_ok());
                drop(st);
                shared.ended.notify_all();
            });
        match spawned {
            Ok(handle) => {
                *worker = Some(handle);
                Ok(number)
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot start the sanitize thread");
                let mut st = self.shared.lock();
                self.shared.set_phase(&mut st, Phase::Idle);
                st.record(number, false);
                Err(Sense::new(
                    SenseKey::HARDWARE_ERROR,
                    Asc::INTERNAL_TARGET_FAILURE,
                ))
            }
        }
    }

    /// Waits for operation `number` to end; stops waiting (without
    /// stopping the operation) once `aborted` says the command was aborted.
    pub(crate) fn wait(&self, number: u64, aborted: impl Fn() -> bool) -> Result<(), Sense> {
        let mut st = self.shared.lock();
        loop {
            match st.outcomes.iter().find(|(n, _)| *n == number) {
                Some((_, true)) => return Ok(()),
                Some((_, false)) => return Err(failed()),
                None if st.started - number >= OUTCOMES_KEPT as u64 => return Ok(()),
                None => {}
            }
            if aborted() {
                return Ok(());
            }
            st = self
                .shared
                .ended
                .wait_timeout(st, ABORT_POLL)
                .map(|(guard, _)| guard)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }

    /// Asks a running operation to stop (LUN shutdown).
    pub(crate) fn cancel(&self) {
        self.shared.cancel.store(true, Ordering::SeqCst);
    }

    /// Joins the operation's thread, if any.
    pub(crate) fn join(&self) {
        let handle = self
            .worker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(handle) = handle {
            if handle.join().is_err() {
                tracing::error!("sanitize thread panicked");
            }
        }
    }
}

/// The sanitize thread's work: `job` over `total` bytes, chunk by chunk,
/// publishing progress, then a flush.
fn run(
    shared: &Shared,
    store: &dyn Backstore,
    job: &Job,
    total: u64,
    rate: Option<u64>,
) -> Result<(), BackstoreError> {
    let began = Instant::now();
    let chunk = chunk_len(job);
    let tiled = match job {
        Job::Overwrite(block) if !store.supports_write_same() => tile(block, chunk),
        _ => Vec::new(),
    };
    let mut done = 0u64;
    while done < total {
        if shared.cancel.load(Ordering::SeqCst) {
            return Err(BackstoreError::Io(std::io::Error::other(
                "sanitize interrupted by shutdown",
            )));
        }
        let len = chunk.min(total - done);
        match job {
            Job::Overwrite(block) if tiled.is_empty() => store.write_same(block, done, len)?,
            Job::Overwrite(_) => {
                let part = tiled.get(..usize::try_from(len).unwrap_or(usize::MAX));
                store.write_at(part.unwrap_or(&tiled), done, false)?;
            }
            Job::Deallocate => deallocate(store, done, len)?,
        }
        done += len;
        if let Phase::Running { done: d, .. } = &mut shared.lock().phase {
            *d = done;
        }
        pace(shared, began, done, rate);
    }
    store.flush()
}

/// Chunk length: a whole number of pattern blocks.
fn chunk_len(job: &Job) -> u64 {
    match job {
        Job::Overwrite(block) => {
            let bs = (block.len() as u64).max(1);
            (CHUNK_BYTES / bs).max(1) * bs
        }
        Job::Deallocate => CHUNK_BYTES,
    }
}

/// `block` repeated to `len` bytes.
fn tile(block: &[u8], len: u64) -> Vec<u8> {
    let len = usize::try_from(len).unwrap_or(0);
    block.iter().copied().cycle().take(len).collect()
}

/// Deallocates a range, or zeroes it if the store cannot deallocate.
fn deallocate(store: &dyn Backstore, offset: u64, len: u64) -> Result<(), BackstoreError> {
    match store.unmap(offset, len) {
        Err(BackstoreError::Unsupported) => {
            let zeros = vec![0u8; usize::try_from(len).unwrap_or(0)];
            store.write_at(&zeros, offset, false)
        }
        other => other,
    }
}

/// Sleeps until `done` bytes are due at `rate` bytes per second since
/// `began`, waking early for a cancellation.
fn pace(shared: &Shared, began: Instant, done: u64, rate: Option<u64>) {
    let Some(rate) = rate else { return };
    let due = Duration::from_secs_f64(done as f64 / rate as f64);
    while !shared.cancel.load(Ordering::SeqCst) {
        let elapsed = began.elapsed();
        if elapsed >= due {
            return;
        }
        std::thread::sleep((due - elapsed).min(Duration::from_millis(100)));
    }
}

/// Parses OVERWRITE parameter data (SBC-3 §5.19.3) into the logical block
/// the last pass writes. `param_len` has already been checked to be within
/// 5..=block_size+4.
pub(crate) fn overwrite_block(data: &[u8], block_size: usize) -> Result<Vec<u8>, Sense> {
    let param = |at: usize, bit: Option<u8>| Sense::invalid_param_field(at, bit);
    let [b0, b1, l0, l1] = match data.get(..4) {
        Some(&[a, b, c, d]) => [a, b, c, d],
        _ => return Err(Sense::illegal(Asc::PARAMETER_LIST_LENGTH_ERROR)),
    };
    let invert = b0 & 0x80 != 0;
    let test = (b0 >> 5) & 0x03;
    let count = b0 & 0x1F;
    if test != 0 {
        return Err(param(0, Some(6)));
    }
    if count == 0 {
        return Err(param(0, Some(4)));
    }
    if b1 != 0 {
        return Err(param(1, None));
    }
    let pattern_len = usize::from(u16::from_be_bytes([l0, l1]));
    if pattern_len == 0 || pattern_len > block_size || pattern_len + 4 != data.len() {
        return Err(param(2, None));
    }
    let pattern = data.get(4..).unwrap_or(&[]);
    // Passes alternate pattern and inverse; the last one is what remains.
    let flip = if invert && count % 2 == 0 { 0xFF } else { 0x00 };
    Ok(pattern
        .iter()
        .cycle()
        .take(block_size)
        .map(|b| b ^ flip)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overwrite_parameters() {
        let mut data = vec![0x01, 0, 0, 4, 1, 2, 3, 4];
        assert_eq!(overwrite_block(&data, 8), Ok(vec![1, 2, 3, 4, 1, 2, 3, 4]));
        // INVERT with an even count leaves the inverse.
        data[0] = 0x82;
        assert_eq!(overwrite_block(&data, 4), Ok(vec![0xFE, 0xFD, 0xFC, 0xFB]));
        // INVERT with an odd count leaves the pattern.
        data[0] = 0x83;
        assert_eq!(overwrite_block(&data, 4), Ok(vec![1, 2, 3, 4]));
        // A pattern shorter than a block is repeated, a partial copy last.
        assert_eq!(
            overwrite_block(&[1, 0, 0, 3, 7, 8, 9], 8),
            Ok(vec![7, 8, 9, 7, 8, 9, 7, 8])
        );
    }

    #[test]
    fn overwrite_parameter_errors() {
        let field = |r: Result<Vec<u8>, Sense>| r.err().and_then(|s| s.field).map(|f| f.byte);
        assert_eq!(field(overwrite_block(&[0, 0, 0, 1, 9], 512)), Some(0));
        assert_eq!(field(overwrite_block(&[0x41, 0, 0, 1, 9], 512)), Some(0));
        assert_eq!(field(overwrite_block(&[1, 1, 0, 1, 9], 512)), Some(1));
        assert_eq!(field(overwrite_block(&[1, 0, 0, 0, 9], 512)), Some(2));
        assert_eq!(field(overwrite_block(&[1, 0, 0, 2, 9], 512)), Some(2));
        assert_eq!(
            field(overwrite_block(&[1, 0, 0, 5, 1, 2, 3, 4, 5], 4)),
            Some(2)
        );
        let short = overwrite_block(&[1, 0], 512).err().map(|s| s.asc);
        assert_eq!(short, Some(Asc::PARAMETER_LIST_LENGTH_ERROR));
    }

    #[test]
    fn progress_is_scaled_to_65536ths() {
        assert_eq!(in_progress(0, 100).progress, Some(0));
        assert_eq!(in_progress(50, 100).progress, Some(0x8000));
        assert_eq!(in_progress(100, 100).progress, Some(u16::MAX));
        assert_eq!(in_progress(1, 0).progress, Some(0));
    }

    fn set(s: &Sanitizer, phase: Phase) {
        let mut st = s.shared.lock();
        s.shared.set_phase(&mut st, phase);
    }

    #[test]
    fn gate_by_phase() {
        let s = Sanitizer::new(None);
        assert!(s.check(0x28).is_ok());
        set(&s, Phase::Running { done: 1, total: 4 });
        let e = s.check(0x00).expect_err("TUR is refused while running");
        assert_eq!((e.key, e.asc), (SenseKey::NOT_READY, SANITIZE_IN_PROGRESS));
        assert_eq!(e.progress, Some(0x4000));
        assert!(s.check(0x12).is_ok() && s.check(0xA0).is_ok() && s.check(0x03).is_ok());
        assert!(s.pending_sense().is_some());
        set(&s, Phase::Failed { ause: false });
        assert_eq!(
            s.check(0x28).map_err(|e| e.asc),
            Err(SANITIZE_COMMAND_FAILED)
        );
        assert!(s.check(0x48).is_ok() && s.check(0x12).is_ok());
        assert!(s.exit_failure_mode().is_err());
        set(&s, Phase::Failed { ause: true });
        assert!(s.exit_failure_mode().is_ok());
        assert!(s.check(0x28).is_ok());
    }
}
