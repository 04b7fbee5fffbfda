//! A logical unit's task set (SAM-5 §4.8, §8.6): the queued and running
//! tasks in execution order, task attributes, aborts and the bookkeeping
//! that decides when a sleeping worker is woken. It only schedules: the
//! worker threads and the inline path that execute tasks are in
//! [`crate::workers`].
//!
//! Guarantees:
//! - every task is in the task set from enqueue until its completion has
//!   been decided, so task management always finds it; each completion
//!   callback is called exactly once, outside every lock;
//! - task attributes (SAM-5 §8.6) are honoured simply: a SIMPLE task waits
//!   for every older ORDERED task, an ORDERED task waits for every older
//!   task, a HEAD OF QUEUE task is queued first and never waits (ACA is
//!   treated as SIMPLE: NACA is not supported);
//! - a command run off the workers (inline, or on a reactor's io_uring)
//!   enters the set as a running task ([`Tasks::enter_running`]), so task
//!   management sees it like any other, and completes like a worker's
//!   ([`Tasks::complete`]);
//! - a condition variable is signalled only when a thread waits on it;
//! - a queued READ or WRITE over a QoS limit ([`crate::qos`]) is not
//!   runnable until its buckets allow it: one sleeping worker waits with a
//!   timeout for the earliest such time, none runs per command; it stays
//!   a queued task meanwhile, so task management reaches it. A stopping
//!   unit runs its queue without limits.

use std::cell::Cell;
use std::collections::{HashSet, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::cmd::{Command, Done, Response, Status, TaskAttr};
use crate::outcome;
use crate::qos::{Blocked, Cost, LunQos, LunQosState, LunQosStats, QosStats, TargetQos};
use crate::sense::{Asc, Sense, SenseFormat, SenseKey};

/// Most tasks one LUN holds (queued plus running); more get TASK SET FULL.
pub const MAX_TASKS_PER_LUN: usize = 2048;

/// A task is named by its nexus and the front end's tag (SAM-5 §4.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct TaskKey {
    pub nexus: u64,
    pub tag: u64,
}

#[derive(Debug)]
// Queued holds its command inline: the entries' deque keeps its capacity,
// so queueing a task allocates nothing in steady state.
#[allow(clippy::large_enum_variant)]
enum TaskState {
    Queued(Pending),
    Running { aborted: bool },
}

pub(crate) struct Pending {
    pub cmd: Command,
    pub done: Done,
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
    /// What QoS counts for it (a READ or WRITE).
    cost: Option<Cost>,
    /// When a scan first found it over a QoS limit.
    since: Cell<Option<Instant>>,
    /// Entered running off the workers with its QoS tokens taken: they
    /// go back if the command is handed to the workers after all.
    charged: bool,
}

impl TaskEntry {
    fn new(key: TaskKey, attr: TaskAttr, state: TaskState) -> TaskEntry {
        TaskEntry {
            key,
            attr,
            state,
            cost: None,
            since: Cell::new(None),
            charged: false,
        }
    }
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
    /// The unit's QoS limits and counters.
    qos: LunQosState,
    /// The target's limits.
    target_qos: Arc<TargetQos>,
    /// The earliest time a worker sleeping for a throttled task wakes.
    timer: Option<Instant>,
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
            qos: LunQosState::default(),
            target_qos: Arc::default(),
            timer: None,
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
        if self.work_waiters <= self.notified {
            return false;
        }
        let (next, wait) = self.scan();
        if next.is_none() {
            // Only throttled tasks: a sleeper must keep time for them,
            // unless one already wakes early enough.
            return wait.is_some_and(|w| {
                self.timer
                    .is_none_or(|t| Instant::now() + w + Duration::from_micros(100) < t)
            });
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
        self.scan().0
    }

    /// Whether QoS limits apply to this unit now.
    fn qos_active(&self) -> bool {
        !self.stopping && (self.qos.configured() || self.target_qos.active())
    }

    /// The first queued task its attribute and the QoS limits let run now;
    /// without one, how soon a throttled task may go.
    fn scan(&self) -> (Option<usize>, Option<Duration>) {
        // The set of a unit served inline is empty most of the time.
        if self.entries.is_empty() {
            return (None, None);
        }
        let qos = self.qos_active().then(Instant::now);
        let mut blocked = Blocked::default();
        let mut wait: Option<Duration> = None;
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
                    let (Some(now), Some(cost)) = (qos, entry.cost.as_ref()) else {
                        return (Some(i), None);
                    };
                    match self.qos.check(&self.target_qos, cost, now, &mut blocked) {
                        Ok(()) => return (Some(i), None),
                        Err(w) => {
                            if entry.since.get().is_none() {
                                entry.since.set(Some(now));
                            }
                            if let Some(w) = w {
                                wait = Some(wait.map_or(w, |x| x.min(w)));
                            }
                        }
                    }
                }
            }
            older_ordered |= entry.attr == TaskAttr::Ordered;
            older_any = true;
        }
        (None, wait)
    }

    /// The queued tasks waiting for QoS limits: (nexus, initiator scope).
    fn throttled(&self) -> Vec<(u64, Option<usize>)> {
        self.entries
            .iter()
            .filter(|e| matches!(e.state, TaskState::Queued(_)) && e.since.get().is_some())
            .map(|e| (e.key.nexus, e.cost.and_then(|c| c.initiator)))
            .collect()
    }
}

/// Why a command was not queued; the caller completes it with `response`.
pub(crate) struct Refused {
    pub done: Done,
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means a panic elsewhere; the data stays usable.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A logical unit's task set with the condition variables its workers
/// and task management wait on.
#[derive(Debug, Default)]
pub(crate) struct Tasks {
    set: Mutex<TaskSet>,
    /// Signalled when a task becomes runnable or the unit stops.
    work: Condvar,
    /// Signalled when a task leaves the task set.
    idle: Condvar,
}

impl Tasks {
    /// Puts a command on the task set, or says why not.
    /// `sense_format` is the unit's sense data format, asked for only when
    /// the command is refused with sense data.
    #[allow(clippy::result_large_err)]
    pub(crate) fn enqueue(
        &self,
        cmd: Command,
        done: Done,
        sense_format: impl FnOnce() -> SenseFormat,
    ) -> Result<(), Refused> {
        let key = TaskKey {
            nexus: cmd.nexus.id,
            tag: cmd.tag,
        };
        let mut set = lock(&self.set);
        let refuse = if set.stopping {
            Some(outcome::status_only(cmd.tag, Status::BUSY))
        } else if set.position(key).is_some() {
            // SAM-5 §5.10: a tag already in use is an overlapped command.
            let sense = Sense::new(
                SenseKey::ABORTED_COMMAND,
                Asc::OVERLAPPED_COMMANDS_ATTEMPTED,
            );
            Some(outcome::check_condition(cmd.tag, &sense, sense_format()))
        } else if set.entries.len() >= MAX_TASKS_PER_LUN {
            Some(outcome::status_only(cmd.tag, Status::TASK_SET_FULL))
        } else {
            None
        };
        if let Some(response) = refuse {
            return Err(Refused { done, response });
        }
        let attr = cmd.attr;
        let cost = set.qos.cost(&cmd);
        let mut entry = TaskEntry::new(key, attr, TaskState::Queued(Pending { cmd, done }));
        entry.cost = cost;
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

    /// Puts a SIMPLE task straight into the task set as running, for a
    /// command run off the workers (inline, or on a reactor's io_uring):
    /// false when the workers must see it instead (stopping, full set,
    /// overlapped tag, an ORDERED task in the set).
    /// Under QoS limits, only a command the limits let go now, with
    /// nothing waiting for them: its tokens are taken here (and given
    /// back by [`Self::leave_running`]).
    pub(crate) fn enter_running(&self, key: TaskKey, cmd: &Command) -> bool {
        let mut set = lock(&self.set);
        if set.stopping
            || set.entries.len() >= MAX_TASKS_PER_LUN
            || set
                .entries
                .iter()
                .any(|e| e.key == key || e.attr == TaskAttr::Ordered)
        {
            return false;
        }
        let mut entry =
            TaskEntry::new(key, TaskAttr::Simple, TaskState::Running { aborted: false });
        if set.qos_active() {
            if let Some(cost) = set.qos.cost(cmd) {
                let throttled = set.entries.iter().any(|e| e.since.get().is_some());
                let now = Instant::now();
                if throttled
                    || set
                        .qos
                        .check(&set.target_qos, &cost, now, &mut Blocked::default())
                        .is_err()
                {
                    return false;
                }
                let set = &mut *set;
                set.qos.admit(&set.target_qos, key.nexus, &cost, now, None);
                entry.cost = Some(cost);
                entry.charged = true;
            }
        }
        set.entries.push_back(entry);
        true
    }

    /// Takes a task of [`Self::enter_running`] out of the set without a
    /// completion (its command goes to the workers, or is answered by the
    /// caller); returns whether task management aborted it meanwhile.
    /// `not_run`: it was not executed (handed to the workers), so its QoS
    /// tokens go back.
    pub(crate) fn leave_running(&self, key: TaskKey, not_run: bool) -> bool {
        let mut set = lock(&self.set);
        let aborted = match set.position(key).and_then(|i| set.entries.remove(i)) {
            Some(e) => {
                if let (true, true, Some(cost)) = (not_run, e.charged, e.cost) {
                    let set = &mut *set;
                    set.qos
                        .refund(&set.target_qos, key.nexus, &cost, Instant::now());
                }
                matches!(e.state, TaskState::Running { aborted: true })
            }
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

    /// Blocks until a task may run; `None` once stopping and drained.
    pub(crate) fn next_task(&self) -> Option<(TaskKey, Pending)> {
        let mut set = lock(&self.set);
        loop {
            let (next, throttled) = set.scan();
            let qos_active = set.qos_active();
            let runnable = next.and_then(|i| set.entries.get_mut(i));
            if let Some(entry) = runnable {
                let state =
                    std::mem::replace(&mut entry.state, TaskState::Running { aborted: false });
                if let TaskState::Queued(pending) = state {
                    let key = entry.key;
                    let (cost, since) = (entry.cost, entry.since.get());
                    if let (Some(cost), true) = (cost, qos_active) {
                        let set = &mut *set;
                        set.qos
                            .admit(&set.target_qos, key.nexus, &cost, Instant::now(), since);
                    }
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
            // Throttled tasks: this sleeper wakes when the first may go,
            // unless another wakes no later.
            let deadline = throttled
                .map(|w| Instant::now() + w)
                .filter(|d| set.timer.is_none_or(|t| *d < t));
            if let Some(deadline) = deadline {
                set.timer = Some(deadline);
                let wait = deadline.saturating_duration_since(Instant::now());
                set = match self.work.wait_timeout(set, wait) {
                    Ok((set, _)) => set,
                    Err(e) => e.into_inner().0,
                };
                if set.timer == Some(deadline) {
                    set.timer = None;
                }
            } else if standby {
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
    pub(crate) fn complete(&self, key: TaskKey, done: Done, response: Response, by_worker: bool) {
        let mut set = lock(&self.set);
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
            let mut set = lock(&self.set);
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
        let mut set = lock(&self.set);
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
        let mut set = lock(&self.set);
        while aborted.running.iter().any(|k| set.position(*k).is_some()) {
            set.idle_waiters += 1;
            set = self.idle.wait(set).unwrap_or_else(PoisonError::into_inner);
            set.idle_waiters -= 1;
        }
    }

    /// Whether task management has aborted this running task (a long
    /// handler polls it to stop waiting early).
    pub(crate) fn task_aborted(&self, key: TaskKey) -> bool {
        let set = lock(&self.set);
        set.position(key)
            .and_then(|i| set.entries.get(i))
            .is_none_or(|e| matches!(e.state, TaskState::Running { aborted: true }))
    }

    /// Whether a running task should stop waiting: aborted, or the unit
    /// is stopping (the store's cancellation probe, see `workers::start`).
    pub(crate) fn task_cancelled(&self, key: TaskKey) -> bool {
        let set = lock(&self.set);
        set.stopping
            || set
                .position(key)
                .and_then(|i| set.entries.get(i))
                .is_none_or(|e| matches!(e.state, TaskState::Running { aborted: true }))
    }

    /// A worker thread entered its loop.
    pub(crate) fn worker_started(&self) {
        lock(&self.set).workers += 1;
    }

    /// A worker thread left its loop.
    pub(crate) fn worker_stopped(&self) {
        let mut set = lock(&self.set);
        set.workers = set.workers.saturating_sub(1);
    }

    /// A worker finished executing a task that took `took`.
    pub(crate) fn worker_executed(&self, took: Duration) {
        let mut set = lock(&self.set);
        set.busy = set.busy.saturating_sub(1);
        set.executed(took);
    }

    /// Stops accepting tasks and wakes every worker, so that they finish
    /// the tasks left and exit.
    pub(crate) fn stop(&self) {
        lock(&self.set).stopping = true;
        self.work.notify_all();
    }

    /// Sets the target's limits this unit shares (once, before its workers
    /// start).
    pub(crate) fn set_target_qos(&self, target: Arc<TargetQos>) {
        lock(&self.set).target_qos = target;
    }

    /// Sets the unit's QoS limits; a changed limit applies to the tasks
    /// already waiting, at once.
    pub(crate) fn set_qos(&self, qos: &LunQos) {
        let mut set = lock(&self.set);
        if set.qos.set(qos) {
            let set = &mut *set;
            for e in set.entries.iter_mut() {
                if let TaskState::Queued(p) = &e.state {
                    e.cost = set.qos.cost(&p.cmd);
                }
            }
        }
        drop(set);
        self.qos_changed();
    }

    /// The limits changed (the unit's or its target's): sleepers look at
    /// the queue again.
    pub(crate) fn qos_changed(&self) {
        let mut set = lock(&self.set);
        set.timer = None;
        drop(set);
        self.work.notify_all();
    }

    /// The unit's throttling counters.
    pub(crate) fn qos_stats(&self) -> LunQosStats {
        let set = lock(&self.set);
        set.qos.snapshot(&set.throttled())
    }

    /// One nexus's throttling counters on this unit.
    pub(crate) fn qos_nexus_stats(&self, nexus: u64) -> QosStats {
        let set = lock(&self.set);
        set.qos.nexus_stats(nexus, &set.throttled())
    }

    /// Forgets a nexus's throttling counters (its session ended).
    pub(crate) fn forget_nexus(&self, nexus: u64) {
        lock(&self.set).qos.forget_nexus(nexus);
    }

    /// QUERY TASK: whether the task is in the task set.
    pub(crate) fn has_task(&self, key: TaskKey) -> bool {
        lock(&self.set).position(key).is_some()
    }
}

/// Calls a completion, keeping the worker alive if the front end panics.
pub(crate) fn call(done: Done, response: Response) {
    if catch_unwind(AssertUnwindSafe(move || done.call(response))).is_err() {
        tracing::error!("completion callback panicked");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn running(tag: u64, attr: TaskAttr) -> TaskEntry {
        TaskEntry::new(
            TaskKey { nexus: 1, tag },
            attr,
            TaskState::Running { aborted: false },
        )
    }

    fn queued(tag: u64, attr: TaskAttr) -> TaskEntry {
        let nexus = Arc::new(crate::cmd::Nexus {
            id: 1,
            initiator_port: String::new(),
            target_port: String::new(),
            relative_port_id: 1,
            port_group: 1,
            lun_map: None,
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
        TaskEntry::new(
            TaskKey { nexus: 1, tag },
            attr,
            TaskState::Queued(Pending {
                cmd,
                done: Done::Boxed(Box::new(|_| {})),
            }),
        )
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
