//! One logical unit: its I/O context (backstore, statistics, mode
//! parameters, unit attentions), its task set and its worker pool.
//!
//! Guarantees:
//! - all workers of a LUN share one I/O context: one `Arc<dyn Backstore>`,
//!   one set of atomic counters;
//! - every task is in the task set from enqueue until its completion has
//!   been decided, so task management always finds it; each completion
//!   callback is called exactly once, outside every lock;
//! - task attributes (SAM-5 §8.6) are honoured simply: a SIMPLE task waits
//!   for every older ORDERED task, an ORDERED task waits for every older
//!   task, a HEAD OF QUEUE task is queued first and never waits (ACA is
//!   treated as SIMPLE: NACA is not supported);
//! - a panic in a handler cannot lose a completion: it is caught and the
//!   command ends with HARDWARE ERROR;
//! - a command may instead run to completion on the caller's thread
//!   ([`LogicalUnit::run_inline`]) when the store says it can without
//!   blocking: it is in the task set as a running task meanwhile, so task
//!   management sees it like any other, and a command that would have to
//!   wait is handed back untouched for the workers; the io_uring path
//!   (`ring`) enters its tasks the same way and completes them like a
//!   worker does ([`LogicalUnit::complete`]);
//! - a condition variable is signalled only when a thread waits on it.

use std::collections::{HashSet, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustgt_backstore::{Backstore, Geometry};

use crate::cmd::{Command, Completion, Response, Status, TaskAttr};
use crate::error::ScsiError;
use crate::exec;
use crate::lba_lock::LbaLocks;
use crate::medium::Medium;
use crate::mode::ModeState;
use crate::outcome;
use crate::pr::Reservations;
use crate::sanitize::Sanitizer;
use crate::sense::{Asc, Sense, SenseFormat, SenseKey};
use crate::target_state::TargetShared;
use crate::ua::UnitAttentions;
use crate::xcopy::CopyResults;

/// Default number of worker threads per LUN.
pub const DEFAULT_WORKERS: usize = 8;

/// Most tasks one LUN holds (queued plus running); more get TASK SET FULL.
pub const MAX_TASKS_PER_LUN: usize = 2048;

/// Configuration of one logical unit.
#[derive(Debug, Clone)]
pub struct LunConfig {
    pub backstore: Arc<dyn Backstore>,
    /// Worker threads for this LUN; all share the LUN's I/O context.
    pub workers: usize,
    /// INQUIRY T10 vendor identification (8 ASCII characters at most).
    pub vendor: String,
    /// INQUIRY product identification (16 ASCII characters at most).
    pub product: String,
    /// Unit serial number (VPD page 80h).
    pub serial: String,
    /// Low bits of the NAA designator (VPD page 83h); stable per LUN.
    pub naa_id: u64,
    /// WCE in the caching mode page; when false every write is FUA.
    pub write_cache: bool,
    /// Thin provisioning (SBC-3 §4.7.3.3): LBPME in READ CAPACITY(16),
    /// UNMAP, WRITE SAME with UNMAP and GET LBA STATUS from the
    /// backstore's holes. False: fully provisioned, no LBP reported.
    pub thin: bool,
    /// Physical block size in bytes reported by READ CAPACITY(16) (and the
    /// unmap and atomic granularities derived from it); `None` means equal
    /// to the logical block size. Must be a power-of-two multiple of it.
    pub physical_block_size: Option<u32>,
    /// On a thin LUN, whether the UNMAP command is supported (LBPU). When
    /// false, deallocation is by WRITE SAME with UNMAP only (LBPWS and
    /// LBPWS10 stay set).
    pub unmap_command: bool,
    /// File keeping persistent reservations across restarts when an
    /// initiator asks for APTPL (SPC-4 §5.13.5); restored when the LUN is
    /// added. `None`: APTPL=1 is refused and PTPL_C reported as 0.
    pub pr_state_path: Option<PathBuf>,
    /// Removable medium (RMB in INQUIRY): START STOP UNIT with LOEJ ejects
    /// and loads it, PREVENT ALLOW MEDIUM REMOVAL locks it in.
    pub removable: bool,
    /// Pace of SANITIZE in bytes per second; `None` runs it at full speed.
    pub sanitize_rate: Option<u64>,
}

impl LunConfig {
    /// Defaults: 8 workers, "RUSTGT" / "VIRTUAL-DISK", write cache on,
    /// fully provisioned, and an empty serial and NAA id the caller should
    /// set to stable values.
    pub fn new(backstore: Arc<dyn Backstore>) -> Self {
        LunConfig {
            backstore,
            workers: DEFAULT_WORKERS,
            vendor: crate::vpd::DEFAULT_VENDOR.to_string(),
            product: crate::vpd::DEFAULT_PRODUCT.to_string(),
            serial: String::new(),
            naa_id: 0,
            write_cache: true,
            thin: false,
            physical_block_size: None,
            unmap_command: true,
            pr_state_path: None,
            removable: false,
            sanitize_rate: None,
        }
    }
}

impl LunConfig {
    /// log2 of logical blocks per physical block, or `None` when
    /// `physical_block_size` is not a power-of-two multiple (1 to 2^15
    /// times) of the backstore's block size.
    pub fn physical_block_exponent(&self) -> Option<u8> {
        let logical = self.backstore.geometry().block_size;
        let Some(physical) = self.physical_block_size else {
            return Some(0);
        };
        if logical == 0 || physical % logical != 0 {
            return None;
        }
        let ratio = physical / logical;
        (ratio.is_power_of_two() && ratio <= 1 << 15).then(|| ratio.trailing_zeros() as u8)
    }
}

/// A snapshot of a LUN's I/O counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LunStats {
    pub read_commands: u64,
    pub write_commands: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
}

/// The live counters, shared by all workers.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    read_commands: AtomicU64,
    write_commands: AtomicU64,
    read_bytes: AtomicU64,
    write_bytes: AtomicU64,
}

impl Stats {
    pub(crate) fn count_read(&self, bytes: u64) {
        self.read_commands.fetch_add(1, Ordering::Relaxed);
        self.read_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) fn count_write(&self, bytes: u64) {
        self.write_commands.fetch_add(1, Ordering::Relaxed);
        self.write_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    fn snapshot(&self) -> LunStats {
        LunStats {
            read_commands: self.read_commands.load(Ordering::Relaxed),
            write_commands: self.write_commands.load(Ordering::Relaxed),
            read_bytes: self.read_bytes.load(Ordering::Relaxed),
            write_bytes: self.write_bytes.load(Ordering::Relaxed),
        }
    }
}

/// INQUIRY / VPD identity of the unit.
#[derive(Debug, Clone)]
pub(crate) struct Identity {
    pub vendor: String,
    pub product: String,
    pub serial: String,
    pub naa_id: u64,
    pub removable: bool,
}

/// A task is named by its nexus and the front end's tag (SAM-5 §4.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct TaskKey {
    pub nexus: u64,
    pub tag: u64,
}

#[derive(Debug)]
enum TaskState {
    Queued(Box<Pending>),
    Running { aborted: bool },
}

struct Pending {
    cmd: Command,
    done: Completion,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("cmd", &self.cmd)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct TaskEntry {
    key: TaskKey,
    attr: TaskAttr,
    state: TaskState,
}

#[derive(Debug)]
struct TaskSet {
    /// In execution order: HEAD OF QUEUE tasks at the front, others by arrival.
    entries: VecDeque<TaskEntry>,
    stopping: bool,
    /// Workers blocked on `work`.
    work_waiters: usize,
    /// Threads blocked on `idle` (task management waiting for tasks).
    idle_waiters: usize,
    /// Workers running (in their loop, asleep or not).
    workers: usize,
    /// Workers executing a task.
    busy: usize,
    /// Wake-ups sent to `work` that no worker has consumed yet.
    notified: usize,
    /// A sleeping worker that wakes on a short timeout while others are
    /// busy (see [`Self::fast`]).
    standby: bool,
    /// Moving average of how long the workers' tasks took to execute, ns.
    exec_ewma_ns: u64,
}

impl Default for TaskSet {
    fn default() -> Self {
        TaskSet {
            entries: VecDeque::new(),
            stopping: false,
            work_waiters: 0,
            idle_waiters: 0,
            workers: 0,
            busy: 0,
            notified: 0,
            standby: false,
            // Until measured, tasks count as slow: one worker per task.
            exec_ewma_ns: 4 * FAST_TASK_NS,
        }
    }
}

/// A task that executes in less than this on average is "fast": waking a
/// sleeping worker for it costs more than waiting for a busy worker to
/// finish its own (on a virtual machine a wake-up alone is tens of µs).
const FAST_TASK_NS: u64 = 50_000;
/// With fast tasks, another worker is woken only when more than this many
/// tasks queue per awake worker.
const FAST_TASKS_PER_WORKER: usize = 8;
/// With fast tasks and every awake worker busy, a standby worker looks at
/// the queue this often, so a task never waits long behind one that
/// turned out slow.
const STANDBY: Duration = Duration::from_micros(200);

impl TaskSet {
    /// Stopping with no task left: the workers may exit. A task that ends
    /// off the workers (inline, io_uring) must wake them for this.
    fn drained(&self) -> bool {
        self.stopping && self.entries.is_empty()
    }

    fn position(&self, key: TaskKey) -> Option<usize> {
        self.entries.iter().position(|e| e.key == key)
    }

    /// Whether the workers' tasks have lately been fast (see
    /// [`FAST_TASK_NS`]).
    fn fast(&self) -> bool {
        self.exec_ewma_ns < FAST_TASK_NS
    }

    /// Records how long a worker's task executed.
    fn executed(&mut self, took: Duration) {
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.exec_ewma_ns = self.exec_ewma_ns - self.exec_ewma_ns / 8 + ns / 8;
    }

    /// Whether a sleeping worker should be woken for the queued tasks.
    /// Slow tasks get a worker each (beyond the workers about to look at
    /// the queue anyway); fast ones are left to the awake workers, which
    /// run them in turn, until too many queue up.
    fn should_wake(&self) -> bool {
        if self.work_waiters <= self.notified || self.next_runnable().is_none() {
            return false;
        }
        let queued = self
            .entries
            .iter()
            .filter(|e| matches!(e.state, TaskState::Queued(_)))
            .count();
        let awake = self.workers.saturating_sub(self.work_waiters) + self.notified;
        let looking = awake.saturating_sub(self.busy);
        if self.fast() {
            // Every awake worker busy and nobody on standby: one wakes,
            // to take the task or keep watch.
            awake == 0 || queued > FAST_TASKS_PER_WORKER * awake || (looking == 0 && !self.standby)
        } else {
            queued > looking
        }
    }

    /// Claims one wake-up of a sleeping worker: true (and counted in
    /// `notified`) when some registered sleeper has none coming yet. A
    /// notification beyond the sleepers would reach nobody, and counting
    /// it would make [`Self::should_wake`] believe a worker is on its way
    /// that never comes: a queued task then waits for the next enqueue.
    fn claim_wake(&mut self) -> bool {
        if self.notified < self.work_waiters {
            self.notified += 1;
            true
        } else {
            false
        }
    }

    /// The first queued task its attribute lets run now (SAM-5 §8.6).
    fn next_runnable(&self) -> Option<usize> {
        let mut older_ordered = false;
        let mut older_any = false;
        for (i, entry) in self.entries.iter().enumerate() {
            if matches!(entry.state, TaskState::Queued(_)) {
                let ready = match entry.attr {
                    TaskAttr::HeadOfQueue => true,
                    TaskAttr::Ordered => !older_any,
                    TaskAttr::Simple | TaskAttr::Aca => !older_ordered,
                };
                if ready {
                    return Some(i);
                }
            }
            older_ordered |= entry.attr == TaskAttr::Ordered;
            older_any = true;
        }
        None
    }
}

/// Why a command was not queued; the caller completes it with `response`.
pub(crate) struct Refused {
    pub done: Completion,
    pub response: Response,
}

/// Tasks removed or marked by an abort.
#[derive(Debug, Default)]
pub(crate) struct Aborted {
    /// Nexuses that lost at least one task.
    pub nexuses: HashSet<u64>,
    /// Running tasks that will complete as aborted.
    running: Vec<TaskKey>,
}

/// One logical unit and its workers.
#[derive(Debug)]
pub(crate) struct LogicalUnit {
    pub lun: u64,
    pub backstore: Arc<dyn Backstore>,
    pub ident: Identity,
    pub stats: Stats,
    /// Logical block provisioning management enabled (thin LUN).
    pub thin: bool,
    /// log2(logical blocks per physical block), READ CAPACITY(16) byte 13.
    pub phys_exp: u8,
    /// UNMAP supported on a thin LUN (LBPU).
    pub unmap_command: bool,
    /// LBA range locks taken by medium reads (shared) and writes (exclusive).
    pub lba_locks: LbaLocks,
    /// Persistent and SPC-2 reservations.
    pub pr: Reservations,
    /// The medium: present or ejected, removal prevention.
    pub medium: Medium,
    /// SANITIZE operation state.
    pub sanitizer: Sanitizer,
    /// EXTENDED COPY statuses for RECEIVE COPY RESULTS.
    pub copies: CopyResults,
    mode: Mutex<ModeState>,
    mode_defaults: ModeState,
    ua: Mutex<UnitAttentions>,
    tasks: Mutex<TaskSet>,
    /// Signalled when a task becomes runnable or the unit stops.
    work: Condvar,
    /// Signalled when a task leaves the task set.
    idle: Condvar,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means a panic elsewhere; the data stays usable.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl LogicalUnit {
    pub(crate) fn new(lun: u64, cfg: &LunConfig) -> LogicalUnit {
        let defaults = ModeState {
            write_cache: cfg.write_cache,
            d_sense: false,
            swp: false,
        };
        LogicalUnit {
            lun,
            backstore: Arc::clone(&cfg.backstore),
            ident: Identity {
                vendor: cfg.vendor.clone(),
                product: cfg.product.clone(),
                serial: cfg.serial.clone(),
                naa_id: cfg.naa_id,
                removable: cfg.removable,
            },
            stats: Stats::default(),
            thin: cfg.thin,
            phys_exp: cfg.physical_block_exponent().unwrap_or(0),
            unmap_command: cfg.unmap_command,
            lba_locks: LbaLocks::default(),
            pr: match cfg.backstore.shared_state() {
                Some(sh) => Reservations::new_shared(sh),
                None => Reservations::new(cfg.pr_state_path.clone()),
            },
            medium: Medium::new(cfg.removable),
            sanitizer: Sanitizer::new(cfg.sanitize_rate),
            copies: CopyResults::default(),
            mode: Mutex::new(defaults),
            mode_defaults: defaults,
            ua: Mutex::new(UnitAttentions::default()),
            tasks: Mutex::new(TaskSet::default()),
            work: Condvar::new(),
            idle: Condvar::new(),
            workers: Mutex::new(Vec::new()),
        }
    }

    /// Spawns `count` workers (at least one).
    pub(crate) fn start(
        self: &Arc<Self>,
        target: &Arc<TargetShared>,
        count: usize,
    ) -> Result<(), ScsiError> {
        let mut workers = lock(&self.workers);
        for i in 0..count.max(1) {
            let lu = Arc::clone(self);
            let target = Arc::clone(target);
            let handle = std::thread::Builder::new()
                .name(format!("rustgt-lun{}-w{i}", self.lun))
                .spawn(move || {
                    // Lets the LUN's I/O context tell its workers apart.
                    rustgt_backstore::set_worker_index(i);
                    // Lets a long wait in the store (fault injection's
                    // hang) end when its task is aborted or the LUN stops.
                    let probe = Arc::clone(&lu);
                    rustgt_backstore::cancel::install(Box::new(move |[nexus, tag]| {
                        probe.task_cancelled(TaskKey { nexus, tag })
                    }));
                    lu.worker_loop(&target)
                })
                .map_err(|source| ScsiError::Spawn {
                    lun: self.lun,
                    source,
                });
            match handle {
                Ok(h) => workers.push(h),
                Err(e) => {
                    drop(workers);
                    self.stop_and_join();
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    pub(crate) fn geometry(&self) -> Geometry {
        self.backstore.geometry()
    }

    pub(crate) fn stats(&self) -> LunStats {
        self.stats.snapshot()
    }

    pub(crate) fn mode(&self) -> ModeState {
        *lock(&self.mode)
    }

    /// Writes are refused: a read-only store, or SWP set in the control
    /// mode page.
    pub(crate) fn write_protected(&self) -> bool {
        self.geometry().read_only || self.mode().swp
    }

    pub(crate) fn mode_defaults(&self) -> ModeState {
        self.mode_defaults
    }

    /// Installs new mode parameters; returns whether anything changed.
    pub(crate) fn set_mode(&self, new: ModeState) -> bool {
        let mut cur = lock(&self.mode);
        let changed = *cur != new;
        *cur = new;
        changed
    }

    pub(crate) fn sense_format(&self) -> SenseFormat {
        if self.mode().d_sense {
            SenseFormat::Descriptor
        } else {
            SenseFormat::Fixed
        }
    }

    pub(crate) fn take_unit_attention(&self, nexus: u64) -> Option<Asc> {
        lock(&self.ua).take(nexus)
    }

    pub(crate) fn establish_ua<I>(&self, nexuses: I, asc: Asc, except: Option<u64>)
    where
        I: IntoIterator<Item = u64>,
    {
        lock(&self.ua).establish_for(nexuses, asc, except);
    }

    pub(crate) fn drop_nexus(&self, nexus: u64) {
        lock(&self.ua).drop_nexus(nexus);
        self.pr.nexus_lost(nexus);
        self.medium.drop_nexus(nexus);
        self.copies.drop_nexus(nexus);
    }

    /// Puts a command on the task set, or says why not.
    pub(crate) fn enqueue(&self, cmd: Command, done: Completion) -> Result<(), Refused> {
        let key = TaskKey {
            nexus: cmd.nexus.id,
            tag: cmd.tag,
        };
        let mut set = lock(&self.tasks);
        let refuse = if set.stopping {
            Some(outcome::status_only(cmd.tag, Status::BUSY))
        } else if set.position(key).is_some() {
            // SAM-5 §5.10: a tag already in use is an overlapped command.
            let sense = Sense::new(
                SenseKey::ABORTED_COMMAND,
                Asc::OVERLAPPED_COMMANDS_ATTEMPTED,
            );
            Some(outcome::check_condition(
                cmd.tag,
                &sense,
                self.sense_format(),
            ))
        } else if set.entries.len() >= MAX_TASKS_PER_LUN {
            Some(outcome::status_only(cmd.tag, Status::TASK_SET_FULL))
        } else {
            None
        };
        if let Some(response) = refuse {
            return Err(Refused { done, response });
        }
        let attr = cmd.attr;
        let entry = TaskEntry {
            key,
            attr,
            state: TaskState::Queued(Box::new(Pending { cmd, done })),
        };
        if attr == TaskAttr::HeadOfQueue {
            set.entries.push_front(entry);
        } else {
            set.entries.push_back(entry);
        }
        let wake = set.should_wake() && set.claim_wake();
        drop(set);
        if wake {
            self.work.notify_one();
        }
        Ok(())
    }

    /// Runs `cmd` to completion on this thread if that cannot block: the
    /// command is a READ or WRITE (or TEST UNIT READY) the store can serve
    /// without waiting ([`Backstore::nonblocking`]), a SIMPLE task with no
    /// ORDERED task in the set, and nothing it needs is held by another
    /// command. Otherwise, or when the attempt found it would have to
    /// wait, the command comes back untouched for [`Self::enqueue`].
    pub(crate) fn run_inline(
        &self,
        cmd: Command,
        target: &TargetShared,
    ) -> Result<Response, Command> {
        use rustgt_backstore::Nonblocking;
        let allowed = match (inline_class(&cmd.cdb), self.backstore.nonblocking()) {
            (None, _) => false,
            (Some(InlineClass::NoMedium), _) => true,
            (Some(InlineClass::Read), nb) => nb != Nonblocking::Never,
            (Some(InlineClass::Write), nb) => nb == Nonblocking::Always,
        };
        if !allowed || cmd.attr != TaskAttr::Simple {
            return Err(cmd);
        }
        let key = TaskKey {
            nexus: cmd.nexus.id,
            tag: cmd.tag,
        };
        if !self.enter_running(key) {
            return Err(cmd);
        }
        let (response, blocked) = rustgt_backstore::nowait::attempt(|| {
            catch_unwind(AssertUnwindSafe(|| exec::execute(&cmd, Some(self), target)))
                .unwrap_or_else(|_| {
                    tracing::error!(lun = self.lun, tag = cmd.tag, "command handler panicked");
                    let sense = Sense::new(SenseKey::HARDWARE_ERROR, Asc::INTERNAL_TARGET_FAILURE);
                    outcome::check_condition(cmd.tag, &sense, SenseFormat::Fixed)
                })
        });
        let aborted = self.leave_running(key);
        if aborted {
            Ok(outcome::aborted(key.tag))
        } else if blocked {
            Err(cmd)
        } else {
            Ok(response)
        }
    }

    /// Puts a SIMPLE task straight into the task set as running, for a
    /// command run off the workers (inline, or on a reactor's io_uring):
    /// false when the workers must see it instead (stopping, full set,
    /// overlapped tag, an ORDERED task in the set).
    pub(crate) fn enter_running(&self, key: TaskKey) -> bool {
        let mut set = lock(&self.tasks);
        if set.stopping
            || set.entries.len() >= MAX_TASKS_PER_LUN
            || set
                .entries
                .iter()
                .any(|e| e.key == key || e.attr == TaskAttr::Ordered)
        {
            return false;
        }
        set.entries.push_back(TaskEntry {
            key,
            attr: TaskAttr::Simple,
            state: TaskState::Running { aborted: false },
        });
        true
    }

    /// Takes a task of [`Self::enter_running`] out of the set without a
    /// completion (its command goes to the workers, or is answered by the
    /// caller); returns whether task management aborted it meanwhile.
    pub(crate) fn leave_running(&self, key: TaskKey) -> bool {
        let mut set = lock(&self.tasks);
        let aborted = match set.position(key) {
            Some(i) => matches!(
                set.entries.remove(i).map(|e| e.state),
                Some(TaskState::Running { aborted: true })
            ),
            None => false,
        };
        // Its removal can only have released an ORDERED task queued
        // meanwhile; idle workers stay asleep otherwise.
        let wake_idle = set.idle_waiters > 0;
        let wake_work = (set.next_runnable().is_some() || set.drained()) && set.claim_wake();
        drop(set);
        if wake_idle {
            self.idle.notify_all();
        }
        if wake_work {
            self.work.notify_one();
        }
        aborted
    }

    fn worker_loop(&self, target: &TargetShared) {
        lock(&self.tasks).workers += 1;
        while let Some((key, pending)) = self.next_task() {
            let Pending { cmd, done } = *pending;
            let started = Instant::now();
            let response =
                catch_unwind(AssertUnwindSafe(|| self.run_cancellable(key, &cmd, target)))
                    .unwrap_or_else(|_| {
                        tracing::error!(lun = self.lun, tag = cmd.tag, "command handler panicked");
                        let sense =
                            Sense::new(SenseKey::HARDWARE_ERROR, Asc::INTERNAL_TARGET_FAILURE);
                        outcome::check_condition(cmd.tag, &sense, SenseFormat::Fixed)
                    });
            drop(cmd);
            {
                let mut set = lock(&self.tasks);
                set.busy = set.busy.saturating_sub(1);
                set.executed(started.elapsed());
            }
            self.complete(key, done, response, true);
        }
        let mut set = lock(&self.tasks);
        set.workers = set.workers.saturating_sub(1);
    }

    /// Runs a task on a worker, where the store can see it aborted
    /// ([`rustgt_backstore::cancel`]).
    fn run_cancellable(&self, key: TaskKey, cmd: &Command, target: &TargetShared) -> Response {
        rustgt_backstore::cancel::scope([key.nexus, key.tag], || {
            exec::execute(cmd, Some(self), target)
        })
    }

    /// Blocks until a task may run; `None` once stopping and drained.
    fn next_task(&self) -> Option<(TaskKey, Box<Pending>)> {
        let mut set = lock(&self.tasks);
        loop {
            let runnable = set.next_runnable().and_then(|i| set.entries.get_mut(i));
            if let Some(entry) = runnable {
                let state =
                    std::mem::replace(&mut entry.state, TaskState::Running { aborted: false });
                if let TaskState::Queued(pending) = state {
                    let key = entry.key;
                    set.busy += 1;
                    // Wake one more worker if more work is ready: a finished
                    // ORDERED task can release many tasks at once.
                    if set.should_wake() && set.claim_wake() {
                        self.work.notify_one();
                    }
                    return Some((key, pending));
                }
            } else if set.stopping && set.entries.is_empty() {
                // Let the other workers see it too.
                self.work.notify_all();
                return None;
            }
            set.work_waiters += 1;
            // While fast tasks are left to busy workers, one sleeper keeps
            // an eye on the queue in case one of them turned out slow.
            let standby = !set.standby && set.busy > 0 && set.fast();
            if standby {
                set.standby = true;
                set = match self.work.wait_timeout(set, STANDBY) {
                    Ok((set, _)) => set,
                    Err(e) => e.into_inner().0,
                };
                set.standby = false;
            } else {
                set = self.work.wait(set).unwrap_or_else(PoisonError::into_inner);
            }
            // Whoever returns first takes a pending wake-up, whether it was
            // the one notified or a standby whose timeout fired meanwhile
            // (the notification then went to another sleeper or to none).
            set.work_waiters -= 1;
            set.notified = set.notified.saturating_sub(1);
            debug_assert!(set.notified <= set.work_waiters);
        }
    }

    /// Ends a running task: delivers its response, or an aborted completion
    /// when task management marked it meanwhile.
    /// `by_worker`: a worker completes its own task and looks for the next
    /// one itself, so it wakes no other worker for work.
    pub(crate) fn complete(
        &self,
        key: TaskKey,
        done: Completion,
        response: Response,
        by_worker: bool,
    ) {
        let mut set = lock(&self.tasks);
        let aborted = match set.position(key) {
            Some(i) => {
                let aborted = matches!(
                    set.entries.get(i).map(|e| &e.state),
                    Some(TaskState::Running { aborted: true })
                );
                if !aborted {
                    set.entries.remove(i);
                }
                aborted
            }
            None => false,
        };
        let wakes = |set: &mut TaskSet| {
            (
                set.idle_waiters > 0,
                (set.drained() || (!by_worker && set.next_runnable().is_some()))
                    && set.claim_wake(),
            )
        };
        let wake = if aborted {
            // Deliver the aborted completion before the waiting task
            // management function sees the task gone (it is still in the
            // set until then, so it released nothing yet).
            drop(set);
            call(done, outcome::aborted(key.tag));
            let mut set = lock(&self.tasks);
            if let Some(i) = set.position(key) {
                set.entries.remove(i);
            }
            wakes(&mut set)
        } else {
            // A claimed wake-up is always sent (below): claiming one and
            // not sending it would leave a sleeper counted as coming.
            let wake = wakes(&mut set);
            drop(set);
            call(done, response);
            wake
        };
        if wake.0 {
            self.idle.notify_all();
        }
        // Its removal may have released an ORDERED task or its followers.
        if wake.1 {
            self.work.notify_one();
        }
    }

    /// Aborts every task whose key matches: queued ones are removed and
    /// completed as aborted now, running ones are marked and complete as
    /// aborted when their handler returns (see [`Self::wait_gone`]).
    pub(crate) fn abort_matching(&self, matches: impl Fn(&TaskKey) -> bool) -> Aborted {
        let mut result = Aborted::default();
        let mut queued = Vec::new();
        let mut set = lock(&self.tasks);
        let mut kept = VecDeque::with_capacity(set.entries.len());
        for mut entry in set.entries.drain(..) {
            if !matches(&entry.key) {
                kept.push_back(entry);
                continue;
            }
            result.nexuses.insert(entry.key.nexus);
            match entry.state {
                TaskState::Queued(pending) => queued.push((entry.key, pending)),
                TaskState::Running { .. } => {
                    entry.state = TaskState::Running { aborted: true };
                    result.running.push(entry.key);
                    kept.push_back(entry);
                }
            }
        }
        set.entries = kept;
        drop(set);
        for (key, pending) in queued {
            call(pending.done, outcome::aborted(key.tag));
        }
        self.idle.notify_all();
        self.work.notify_all();
        result
    }

    /// Waits until the running tasks of an abort have completed, so that a
    /// task management function answers only after they are gone.
    pub(crate) fn wait_gone(&self, aborted: &Aborted) {
        let mut set = lock(&self.tasks);
        while aborted.running.iter().any(|k| set.position(*k).is_some()) {
            set.idle_waiters += 1;
            set = self.idle.wait(set).unwrap_or_else(PoisonError::into_inner);
            set.idle_waiters -= 1;
        }
    }

    /// Whether task management has aborted this running task (a long
    /// handler polls it to stop waiting early).
    pub(crate) fn task_aborted(&self, key: TaskKey) -> bool {
        let set = lock(&self.tasks);
        set.position(key)
            .and_then(|i| set.entries.get(i))
            .is_none_or(|e| matches!(e.state, TaskState::Running { aborted: true }))
    }

    /// Whether a running task should stop waiting: aborted, or the unit
    /// is stopping (the store's cancellation probe, see `start`).
    fn task_cancelled(&self, key: TaskKey) -> bool {
        let set = lock(&self.tasks);
        set.stopping
            || set
                .position(key)
                .and_then(|i| set.entries.get(i))
                .is_none_or(|e| matches!(e.state, TaskState::Running { aborted: true }))
    }

    /// QUERY TASK: whether the task is in the task set.
    pub(crate) fn has_task(&self, key: TaskKey) -> bool {
        lock(&self.tasks).position(key).is_some()
    }

    /// Stops accepting tasks, lets queued and running ones finish, and joins
    /// the workers. Called at most once per worker set; later calls return
    /// immediately.
    pub(crate) fn stop_and_join(&self) {
        lock(&self.tasks).stopping = true;
        // A SANITIZE waiting for its operation must not hold up the join.
        self.sanitizer.cancel();
        self.work.notify_all();
        let handles: Vec<_> = lock(&self.workers).drain(..).collect();
        let me = std::thread::current().id();
        for handle in handles {
            // A completion callback may shut the target down from a worker.
            if handle.thread().id() != me && handle.join().is_err() {
                tracing::error!(lun = self.lun, "worker thread panicked");
            }
        }
        self.sanitizer.join();
    }
}

/// The data path's commands, by opcode: the ones the reactor may run
/// itself ([`LogicalUnit::run_inline`]) or on its io_uring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DataPathOp {
    /// READ (6/10/12/16).
    Read,
    /// WRITE (6/10/12/16).
    Write,
    /// SYNCHRONIZE CACHE (10/16).
    Sync,
    TestUnitReady,
}

pub(crate) fn data_path_op(cdb: &[u8]) -> Option<DataPathOp> {
    match cdb.first()? {
        0x08 | 0x28 | 0xA8 | 0x88 => Some(DataPathOp::Read),
        0x0A | 0x2A | 0xAA | 0x8A => Some(DataPathOp::Write),
        0x35 | 0x91 => Some(DataPathOp::Sync),
        0x00 => Some(DataPathOp::TestUnitReady),
        _ => None,
    }
}

/// What an inline command touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InlineClass {
    /// Reads the medium and nothing else.
    Read,
    /// Writes the medium.
    Write,
    /// Touches neither (TEST UNIT READY).
    NoMedium,
}

/// The commands [`LogicalUnit::run_inline`] may run: the data path's reads
/// and writes, whose handlers have no side effect before their first
/// possible wait, and TEST UNIT READY.
fn inline_class(cdb: &[u8]) -> Option<InlineClass> {
    match data_path_op(cdb)? {
        DataPathOp::Read => Some(InlineClass::Read),
        DataPathOp::Write => Some(InlineClass::Write),
        DataPathOp::TestUnitReady => Some(InlineClass::NoMedium),
        DataPathOp::Sync => None,
    }
}

/// Calls a completion, keeping the worker alive if the front end panics.
pub(crate) fn call(done: Completion, response: Response) {
    if catch_unwind(AssertUnwindSafe(move || done(response))).is_err() {
        tracing::error!("completion callback panicked");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(tag: u64, attr: TaskAttr) -> TaskEntry {
        TaskEntry {
            key: TaskKey { nexus: 1, tag },
            attr,
            state: TaskState::Running { aborted: false },
        }
    }

    fn queued(tag: u64, attr: TaskAttr) -> TaskEntry {
        let nexus = Arc::new(crate::cmd::Nexus {
            id: 1,
            initiator_port: String::new(),
            target_port: String::new(),
            relative_port_id: 1,
            port_group: 1,
        });
        let cmd = Command {
            nexus,
            lun: 0,
            tag,
            cdb: vec![0; 6].into(),
            attr,
            data_in_len: 0,
            data_out: Default::default(),
        };
        TaskEntry {
            key: TaskKey { nexus: 1, tag },
            attr,
            state: TaskState::Queued(Box::new(Pending {
                cmd,
                done: Box::new(|_| {}),
            })),
        }
    }

    fn set(entries: Vec<TaskEntry>) -> TaskSet {
        TaskSet {
            entries: entries.into(),
            ..TaskSet::default()
        }
    }

    #[test]
    fn slow_tasks_get_a_worker_each() {
        let mut s = set(vec![
            queued(1, TaskAttr::Simple),
            queued(2, TaskAttr::Simple),
        ]);
        (s.workers, s.work_waiters) = (4, 4);
        assert!(!s.fast(), "unmeasured tasks count as slow");
        assert!(s.should_wake());
        s.notified = 1;
        assert!(s.should_wake(), "two queued, one worker coming");
        s.notified = 2;
        assert!(!s.should_wake(), "a worker coming for each");
    }

    #[test]
    fn wake_ups_are_never_claimed_beyond_the_sleepers() {
        // Off-worker completions (io_uring, inline) used to count a
        // wake-up whenever anyone slept, also when every sleeper already
        // had one coming; the extra count outlived the sleepers and made
        // the next sleeper look awake, so nobody woke it for queued work.
        let mut s = set(vec![queued(1, TaskAttr::Simple)]);
        (s.workers, s.work_waiters) = (2, 1);
        assert!(s.claim_wake());
        assert!(!s.claim_wake(), "the one sleeper already has a wake-up");
        assert_eq!(s.notified, 1);
        // It returns and takes the wake-up, the other worker exits, and it
        // sleeps again with the task still queued: it must be woken.
        (s.workers, s.work_waiters, s.notified) = (1, 0, 0);
        s.work_waiters = 1;
        assert!(s.should_wake(), "one queued and the only worker asleep");
        assert!(s.claim_wake());
    }

    #[test]
    fn fast_tasks_are_left_to_busy_workers_while_one_keeps_watch() {
        let mut s = set((1..=3).map(|t| queued(t, TaskAttr::Simple)).collect());
        for _ in 0..64 {
            s.executed(Duration::from_micros(5));
        }
        assert!(s.fast());
        (s.workers, s.work_waiters, s.busy) = (4, 3, 1);
        assert!(s.should_wake(), "nobody looking, nobody on standby");
        s.standby = true;
        assert!(!s.should_wake(), "the busy worker and the standby suffice");
        s.entries = (1..=9).map(|t| queued(t, TaskAttr::Simple)).collect();
        assert!(s.should_wake(), "more than 8 queued per awake worker");
        (s.workers, s.work_waiters, s.busy) = (4, 4, 0);
        s.entries = vec![queued(1, TaskAttr::Simple)].into();
        assert!(s.should_wake(), "everyone asleep");
        for _ in 0..64 {
            s.executed(Duration::from_millis(2));
        }
        assert!(!s.fast(), "slow again");
    }

    #[test]
    fn simple_tasks_run_concurrently() {
        let s = set(vec![
            running(1, TaskAttr::Simple),
            queued(2, TaskAttr::Simple),
        ]);
        assert_eq!(s.next_runnable(), Some(1));
    }

    #[test]
    fn ordered_waits_for_older_and_blocks_younger() {
        let s = set(vec![
            running(1, TaskAttr::Simple),
            queued(2, TaskAttr::Ordered),
            queued(3, TaskAttr::Simple),
        ]);
        assert_eq!(s.next_runnable(), None);
        let s = set(vec![
            queued(2, TaskAttr::Ordered),
            queued(3, TaskAttr::Simple),
        ]);
        assert_eq!(s.next_runnable(), Some(0));
        let s = set(vec![
            running(2, TaskAttr::Ordered),
            queued(3, TaskAttr::Simple),
        ]);
        assert_eq!(s.next_runnable(), None);
    }

    #[test]
    fn head_of_queue_never_waits() {
        let s = set(vec![
            queued(9, TaskAttr::HeadOfQueue),
            running(1, TaskAttr::Ordered),
        ]);
        assert_eq!(s.next_runnable(), Some(0));
        let s = set(vec![
            running(1, TaskAttr::Ordered),
            queued(9, TaskAttr::HeadOfQueue),
        ]);
        assert_eq!(s.next_runnable(), Some(1));
    }
}
