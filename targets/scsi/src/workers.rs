//! How a logical unit's tasks execute: its worker threads, which take
//! tasks from the unit's task set ([`crate::task_set`]) and run them
//! through the dispatcher ([`crate::exec`]), and the inline path that runs
//! a data-path command on the caller's thread.
//!
//! Guarantees:
//! - a panic in a handler cannot lose a completion: it is caught and the
//!   command ends with HARDWARE ERROR;
//! - a command may instead run to completion on the caller's thread
//!   ([`run_inline`]) when the store says it can without blocking: it is
//!   in the task set as a running task meanwhile, so task management sees
//!   it like any other, and a command that would have to wait is handed
//!   back untouched for the workers; the io_uring path (`ring`) enters its
//!   tasks the same way and completes them like a worker does.

use rustgt_backstore::StreamHint;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use crate::cdb::{data_path_op, DataPathOp};
use crate::cmd::{Command, Response, TaskAttr};
use crate::error::ScsiError;
use crate::exec;
use crate::lun::LogicalUnit;
use crate::outcome;
use crate::sense::{Asc, Sense, SenseFormat, SenseKey};
use crate::target_state::TargetShared;
use crate::task_set::{Pending, TaskKey};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means a panic elsewhere; the data stays usable.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Spawns `count` workers (at least one).
pub(crate) fn start(
    unit: &Arc<LogicalUnit>,
    target: &Arc<TargetShared>,
    count: usize,
) -> Result<(), ScsiError> {
    let mut workers = lock(&unit.workers);
    for i in 0..count.max(1) {
        let lu = Arc::clone(unit);
        let target = Arc::clone(target);
        let handle = std::thread::Builder::new()
            .name(format!("rustgt-lun{}-w{i}", unit.lun))
            .spawn(move || {
                // Lets a long wait in the store (fault injection's
                // hang) end when its task is aborted or the LUN stops.
                let probe = Arc::clone(&lu);
                rustgt_backstore::cancel::install(Box::new(move |[nexus, tag]| {
                    probe.tasks.task_cancelled(TaskKey { nexus, tag })
                }));
                worker_loop(&lu, &target, StreamHint::worker(i))
            })
            .map_err(|source| ScsiError::Spawn {
                lun: unit.lun,
                source,
            });
        match handle {
            Ok(h) => workers.push(h),
            Err(e) => {
                drop(workers);
                stop_and_join(unit);
                return Err(e);
            }
        }
    }
    Ok(())
}

/// Runs `cmd` to completion on this thread if that cannot block: the
/// command is a READ or WRITE (or TEST UNIT READY) the store can serve
/// without waiting ([`rustgt_backstore::Backstore::nonblocking`]), a SIMPLE task with no
/// ORDERED task in the set, and nothing it needs is held by another
/// command. Otherwise, or when the attempt found it would have to
/// wait, the command comes back untouched for [`LogicalUnit::enqueue`].
pub(crate) fn run_inline(
    lu: &LogicalUnit,
    cmd: Command,
    target: &TargetShared,
    ring: Option<&crate::Ring>,
) -> Result<Response, Command> {
    use rustgt_backstore::Nonblocking;
    let Some(class) = inline_class(&cmd.cdb) else {
        return Err(cmd);
    };
    let nb = lu.backstore.nonblocking();
    let allowed = match class {
        InlineClass::NoMedium => true,
        InlineClass::Read => nb != Nonblocking::Never,
        InlineClass::Write => nb == Nonblocking::Always,
    };
    if !allowed || cmd.attr != TaskAttr::Simple {
        return Err(cmd);
    }
    // Only a store that may have to wait (a file: `TryReads`) hands out a
    // file to a ring; one of memory never does.
    if class == InlineClass::Read
        && nb == Nonblocking::TryReads
        && crate::ring::batches_reads(lu, ring)
    {
        // Not one `preadv2` per read here: after the turn's first, the
        // reactor's io_uring takes the turn's reads together
        // (`ring::start`), and cached pages are read inside the one
        // `io_uring_enter` that ends the turn.
        return Err(cmd);
    }
    let key = TaskKey {
        nexus: cmd.nexus.id,
        tag: cmd.tag,
    };
    if !lu.tasks.enter_running(key, &cmd) {
        return Err(cmd);
    }
    let (response, blocked) = rustgt_backstore::nowait::attempt(|| {
        catch_unwind(AssertUnwindSafe(|| {
            exec::execute(&cmd, Some(lu), target, StreamHint::default())
        }))
        .unwrap_or_else(|_| {
            tracing::error!(lun = lu.lun, tag = cmd.tag, "command handler panicked");
            let sense = Sense::new(SenseKey::HARDWARE_ERROR, Asc::INTERNAL_TARGET_FAILURE);
            outcome::check_condition(cmd.tag, &sense, SenseFormat::Fixed)
        })
    });
    let aborted = lu.tasks.leave_running(key, blocked);
    if aborted {
        Ok(outcome::aborted(key.tag))
    } else if blocked {
        Err(cmd)
    } else {
        Ok(response)
    }
}

/// `hint` tells the LUN's I/O context which worker reads.
fn worker_loop(lu: &LogicalUnit, target: &TargetShared, hint: StreamHint) {
    lu.tasks.worker_started();
    while let Some((key, pending)) = lu.tasks.next_task() {
        let Pending { cmd, done } = pending;
        let started = Instant::now();
        let response = catch_unwind(AssertUnwindSafe(|| {
            run_cancellable(lu, key, &cmd, target, hint)
        }))
        .unwrap_or_else(|_| {
            tracing::error!(lun = lu.lun, tag = cmd.tag, "command handler panicked");
            let sense = Sense::new(SenseKey::HARDWARE_ERROR, Asc::INTERNAL_TARGET_FAILURE);
            outcome::check_condition(cmd.tag, &sense, SenseFormat::Fixed)
        });
        drop(cmd);
        lu.tasks.worker_executed(started.elapsed());
        lu.tasks.complete(key, done, response, true);
    }
    lu.tasks.worker_stopped();
}

/// Runs a task on a worker, where the store can see it aborted
/// ([`rustgt_backstore::cancel`]).
fn run_cancellable(
    lu: &LogicalUnit,
    key: TaskKey,
    cmd: &Command,
    target: &TargetShared,
    hint: StreamHint,
) -> Response {
    rustgt_backstore::cancel::scope([key.nexus, key.tag], || {
        exec::execute(cmd, Some(lu), target, hint)
    })
}

/// Stops accepting tasks, lets queued and running ones finish, and joins
/// the workers. Called at most once per worker set; later calls return
/// immediately.
pub(crate) fn stop_and_join(lu: &LogicalUnit) {
    lu.tasks.stop();
    // A SANITIZE waiting for its operation must not hold up the join.
    lu.sanitizer.cancel();
    let handles: Vec<_> = lock(&lu.workers).drain(..).collect();
    let me = std::thread::current().id();
    for handle in handles {
        // A completion callback may shut the target down from a worker.
        if handle.thread().id() != me && handle.join().is_err() {
            tracing::error!(lun = lu.lun, "worker thread panicked");
        }
    }
    lu.sanitizer.join();
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

/// The commands [`run_inline`] may run: the data path's reads
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
