//! Commands on a reactor's io_uring: READ, WRITE (6/10/12/16) and
//! SYNCHRONIZE CACHE (10/16) that [`crate::workers::run_inline`] could not
//! complete at once, on a LUN whose store hands out its file
//! ([`Backstore::uring_file`](rustgt_backstore::Backstore::uring_file):
//! file and block-device engines behind a passthrough I/O context), started
//! on the calling reactor's ring ([`Ring`], which the reactor hands down)
//! and finished by its completion ([`rustgt_backstore::uring`]) on that
//! same thread. A store with an
//! asynchronous API of its own ([`rustgt_backstore::aio`]: an RBD image)
//! takes the same commands the same way from any thread and finishes
//! them on its own thread, with no LUN worker in between.
//!
//! The split keeps the worker path's behaviour:
//! - start: a SIMPLE task only, entered into the task set as running (so
//!   task management, ORDERED tasks and TASK SET FULL behave as for
//!   inline commands); the generic checks of [`exec::admit`] (unit
//!   attention, CDB, reservations, readiness, write protection); the
//!   handler's own checks (transfer length, LBA range); the LBA range lock
//!   taken without waiting; anything answered by the checks completes at
//!   once;
//! - a range held by another command, a full ring, or an op the kernel did
//!   not perform sends the untouched command to the workers;
//! - in flight: the command waits in its op's slot of the reactor's
//!   [`Ring`] (a [`RingCmd`]), so starting and finishing allocate nothing
//!   once the ring's slots have grown to the reactor's depth;
//! - finish: the same [`Response`] and residuals as the handlers in `sbc`,
//!   MEDIUM ERROR (UNRECOVERED READ ERROR, WRITE ERROR) for a failed I/O,
//!   the LUN's and the store's counters, the range released, and the
//!   task completed the way the workers complete running tasks (aborted
//!   if task management marked it meanwhile).

use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Instant;

use crate::cdb::DataPathOp;
use rustgt_backstore::aio::AsyncStore;
use rustgt_backstore::uring::{self, Complete, IoKind, Op, RingBuf, UringFile};
use rustgt_backstore::{BackstoreError, IoBuf};

use crate::cdb::Cdb;
use crate::cmd::{Command, Done, Response, TaskAttr};
use crate::exec::{self, Admit};
use crate::lun::LogicalUnit;
use crate::outcome::{self, DataDir, Outcome};
use crate::sbc;
use crate::sense::{Asc, Sense, SenseFormat, SenseKey};
use crate::task_set::{call, TaskKey};

/// The commands this path serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Read,
    Write,
    Sync,
}

fn class(cdb: &[u8]) -> Option<Class> {
    match crate::cdb::data_path_op(cdb)? {
        DataPathOp::Read => Some(Class::Read),
        DataPathOp::Write => Some(Class::Write),
        DataPathOp::Sync => Some(Class::Sync),
        DataPathOp::TestUnitReady => None,
    }
}

/// Whether the ring path may serve this LUN's commands on a thread with a
/// ring (for the log line at LUN start).
pub(crate) fn serves(lu: &LogicalUnit) -> bool {
    lu.backstore.has_uring_file()
}

/// A reactor's io_uring, with each op's command in its slot.
pub type Ring = uring::Ring<RingCmd>;

/// Whether this read of this LUN goes to the reactor's ring even when the
/// page cache may hold its data: the ring has room, the LUN's store hands
/// out its file (a passthrough I/O context; LUNs with readahead of
/// rustgt's own never, so their context sees every read), and it is not
/// the first such read of the reactor's turn ([`uring::Ring::turn_read`];
/// the first is tried inline). A buffered read of cached pages completes
/// inside the `io_uring_enter` that submits it
/// ([`uring::Ring::submit_and_reap`]), so a turn's reads cost two system
/// calls together (one `preadv2`, one `io_uring_enter`) instead of one
/// `preadv2(RWF_NOWAIT)` each.
pub(crate) fn batches_reads(lu: &LogicalUnit, ring: Option<&Ring>) -> bool {
    ring.is_some_and(|ring| {
        ring.has_room() && lu.backstore.has_uring_file() && ring.turn_read() > 0
    })
}

/// Whether the LUN's store takes these commands on its own asynchronous
/// API ([`rustgt_backstore::aio`]) from any thread.
pub(crate) fn serves_async(lu: &LogicalUnit) -> bool {
    lu.backstore.async_io().is_some()
}

/// Where a started command's op goes.
enum Via {
    /// This thread's io_uring, on the store's file.
    Ring(UringFile),
    /// The store's own asynchronous API; finished on the store's thread.
    Store(AsyncStore),
}

impl Via {
    fn record(&self, kind: IoKind, len: u64, started: Instant, ok: bool) {
        match self {
            Via::Ring(f) => f.record(kind, len, started, ok),
            Via::Store(a) => a.record(kind, len, started, ok),
        }
    }

    fn failed(&self, error: &BackstoreError) {
        match self {
            Via::Ring(f) => f.failed(error),
            Via::Store(a) => a.failed(error),
        }
    }
}

/// An LBA range held until dropped.
struct Held {
    lu: Arc<LogicalUnit>,
    id: Option<crate::lba_lock::Hold>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.lu.lba_locks.release_held(self.id.take());
    }
}

/// What the start decided.
enum Start {
    /// Answered by the checks (or nothing to transfer).
    Done(Response),
    /// To the workers, untouched.
    Workers(Command),
    /// Submit this op.
    Submit(Pending, RingBuf),
}

/// A command whose op is in the ring.
struct Pending {
    cmd: Command,
    class: Class,
    op: Op,
    /// The write's data was moved into `buf` (put back on completion).
    moved: bool,
    /// Bytes the CDB asked for.
    xfer_len: u64,
    held: Held,
}

/// A command on a reactor's ring, kept in its op's slot from its
/// submission to its completion.
pub struct RingCmd {
    lu: Arc<LogicalUnit>,
    key: TaskKey,
    done: Done,
    via: Via,
    p: Pending,
    started: Instant,
}

impl std::fmt::Debug for RingCmd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingCmd")
            .field("lun", &self.lu.lun)
            .field("tag", &self.key.tag)
            .finish_non_exhaustive()
    }
}

impl Complete for RingCmd {
    /// The ring's completion of the command's op.
    fn complete(self, result: io::Result<usize>, buf: RingBuf) {
        let RingCmd {
            lu,
            key,
            done,
            via,
            p,
            started,
        } = self;
        let result = result.map(drop).map_err(|e| ring_error(p.class, e));
        finish(&lu, key, done, &via, p, started, result, buf);
    }
}

/// Starts `cmd` on `ring`, the calling reactor's (or on the store's own
/// asynchronous API, which needs none). `Err` gives the command back
/// untouched when this path cannot take it (the caller submits it to the
/// workers); `Ok` means `done` has been or will be called exactly once.
/// The command comes back by value: boxing it would allocate per command.
#[allow(clippy::result_large_err)]
pub(crate) fn start(
    lu: &Arc<LogicalUnit>,
    cmd: Command,
    done: Done,
    ring: Option<&Ring>,
) -> Result<(), (Command, Done)> {
    let Some(class) = class(&cmd.cdb) else {
        return Err((cmd, done));
    };
    if cmd.attr != TaskAttr::Simple {
        return Err((cmd, done));
    }
    let mut now = false;
    let via = match (lu.backstore.uring_file(), ring) {
        (Some(file), Some(ring)) => {
            if class == Class::Write && file.direct_align.is_none() {
                // Buffered writes never go to the ring: on a file system
                // that cannot take them without blocking (ext4 refuses
                // RWF_NOWAIT for buffered writes), the kernel hands each
                // one to its own io-wq threads, and 4 KiB writes at QD 32
                // measured about 30% slower that way than on the LUN's
                // workers. Short ones without FUA run on this thread
                // ([`uring::Ring::write_now`]); the rest go to the workers.
                // (`prepare` decides which, once it knows the offset.)
                now = true;
            } else if !ring.has_room() {
                return Err((cmd, done));
            }
            Via::Ring(file)
        }
        (Some(_), None) => return Err((cmd, done)),
        (None, _) => match lu.backstore.async_io() {
            Some(a) => Via::Store(a),
            None => return Err((cmd, done)),
        },
    };
    let key = TaskKey {
        nexus: cmd.nexus.id,
        tag: cmd.tag,
    };
    if !lu.tasks.enter_running(key, &cmd) {
        return Err((cmd, done));
    }
    let started = Instant::now();
    let format = lu.sense_format();
    let decided = catch_unwind(AssertUnwindSafe(|| prepare(lu, cmd, class, &via, ring)))
        .unwrap_or_else(|_| {
            tracing::error!(lun = lu.lun, "start of a ring or store op panicked");
            Start::Done(outcome::check_condition(
                key.tag,
                &Sense::new(SenseKey::HARDWARE_ERROR, Asc::INTERNAL_TARGET_FAILURE),
                format,
            ))
        });
    match decided {
        Start::Done(response) => {
            lu.tasks.complete(key, done, response, false);
            Ok(())
        }
        Start::Workers(cmd) => {
            if lu.tasks.leave_running(key, true) {
                call(done, outcome::aborted(key.tag));
                Ok(())
            } else {
                Err((cmd, done))
            }
        }
        Start::Submit(p, buf) => {
            let op = p.op;
            if now {
                let result = match (&via, op, ring) {
                    (Via::Ring(file), Op::Write { offset, len, .. }, Some(ring)) => {
                        let data = buf.as_slice().get(..len).unwrap_or_default();
                        ring.write_now(file, offset, data)
                            .map_err(BackstoreError::Write)
                    }
                    _ => Err(BackstoreError::WouldBlock),
                };
                finish(lu, key, done, &via, p, started, result, buf);
                return Ok(());
            }
            let lu = Arc::clone(lu);
            match (via, ring) {
                (Via::Ring(file), Some(ring)) => {
                    let ring_file = Arc::clone(&file.file);
                    let cmd = RingCmd {
                        lu,
                        key,
                        done,
                        via: Via::Ring(file),
                        p,
                        started,
                    };
                    // A refusal (no room after all) completes it at once.
                    ring.submit(&ring_file, op, buf, cmd);
                }
                (Via::Store(a), _) => {
                    let io = Arc::clone(&a.io);
                    let via = Via::Store(a);
                    io.submit(
                        op,
                        buf.into_pooled(),
                        Box::new(move |result, buf| {
                            finish(
                                &lu,
                                key,
                                done,
                                &via,
                                p,
                                started,
                                result,
                                RingBuf::Pooled(buf),
                            );
                        }),
                    );
                }
                // `via` is the ring's only when a ring was given (above).
                (via @ Via::Ring(_), None) => {
                    let result = Err(BackstoreError::WouldBlock);
                    finish(&lu, key, done, &via, p, started, result, buf);
                }
            }
            Ok(())
        }
    }
}

/// Whether a write must be durable on completion (FUA, or the LUN's
/// write cache off): such writes wait for the device, never on a reactor.
fn fua_or_write_through(lu: &LogicalUnit, cmd: &Command) -> bool {
    // WRITE (6) has no FUA bit: byte 1 holds LBA bits there.
    let fua = cmd.cdb.first() != Some(&0x0a) && Cdb::new(&cmd.cdb).bit(1, 0x08);
    fua || !lu.mode().write_cache
}

/// A ring op's error as the store's: not performed (WouldBlock) stays
/// that, to be run on the workers.
fn ring_error(class: Class, e: io::Error) -> BackstoreError {
    if e.kind() == io::ErrorKind::WouldBlock {
        return BackstoreError::WouldBlock;
    }
    match class {
        Class::Read => BackstoreError::Read(e),
        Class::Write => BackstoreError::Write(e),
        Class::Sync => BackstoreError::Flush(e),
    }
}

/// Checks and locks; builds the op.
fn prepare(
    lu: &Arc<LogicalUnit>,
    mut cmd: Command,
    class: Class,
    via: &Via,
    ring: Option<&Ring>,
) -> Start {
    let format = lu.sense_format();
    let fail = |cmd: &Command, sense: Sense| {
        Start::Done(outcome::check_condition(cmd.tag, &sense, format))
    };
    match exec::admit(&cmd, Some(lu)) {
        Ok(Admit::Run(_)) => {}
        Ok(Admit::Done(dir, outcome)) => return Start::Done(outcome::good(&cmd, dir, outcome)),
        Err(sense) => return fail(&cmd, sense),
    }
    let ext = sbc::extent(Cdb::new(&cmd.cdb));
    let sbc::Placed { offset, bytes, bs } = match sbc::place(lu, ext, class != Class::Sync) {
        Ok(p) => p,
        Err(sense) => return fail(&cmd, sense),
    };
    let (op, len, exclusive) = match class {
        Class::Read => {
            // Only what fits the Data-In buffer is read (as `sbc::read`).
            let buffer = u64::from(cmd.data_in_len).div_ceil(bs) * bs;
            let len = bytes.min(buffer);
            if len == 0 {
                lu.stats.count_read(0);
                let outcome = Outcome::read(Default::default(), bytes);
                return Start::Done(outcome::good(&cmd, DataDir::In, outcome));
            }
            let Ok(len) = usize::try_from(len) else {
                return fail(&cmd, sbc::lba_out_of_range());
            };
            (Op::Read { offset, len }, len, false)
        }
        Class::Write => {
            let len = sbc::whole_blocks(&cmd.data_out, bytes, bs).len();
            if len == 0 {
                lu.stats.count_write(0);
                let outcome = Outcome::data_out(bytes);
                return Start::Done(outcome::good(&cmd, DataDir::Out, outcome));
            }
            let dsync = fua_or_write_through(lu, &cmd);
            let buffered = matches!(via, Via::Ring(f) if f.direct_align.is_none());
            let inline = ring.is_some_and(|r| r.may_write_now(offset, len));
            if buffered && (dsync || !inline) {
                return Start::Workers(cmd);
            }
            (Op::Write { offset, len, dsync }, len, true)
        }
        Class::Sync => (Op::Fsync, 0, false),
    };
    let locked = if class == Class::Sync {
        Some(None)
    } else {
        let kind = if exclusive {
            crate::lba_lock::Kind::Write
        } else {
            crate::lba_lock::Kind::Read
        };
        lu.lba_locks.try_hold(ext.lba, ext.blocks, kind)
    };
    let Some(id) = locked else {
        // Another command holds the range: the workers wait for it.
        return Start::Workers(cmd);
    };
    let held = Held {
        lu: Arc::clone(lu),
        id,
    };
    let (buf, moved) = match (via, class) {
        (_, Class::Sync) => (RingBuf::Empty, false),
        // The store's own API takes pooled memory as it is.
        (Via::Store(_), Class::Read) => (RingBuf::Pooled(IoBuf::for_overwrite(len)), false),
        (Via::Store(_), Class::Write) => (RingBuf::Pooled(std::mem::take(&mut cmd.data_out)), true),
        (Via::Ring(file), Class::Read) => match file.buffer(len) {
            Ok(b) => (b, false),
            Err(_) => return Start::Workers(cmd),
        },
        (Via::Ring(file), Class::Write) => match file.direct_align {
            // Buffered, or O_DIRECT from a pooled buffer already aligned.
            None => (RingBuf::Pooled(std::mem::take(&mut cmd.data_out)), true),
            Some(align) if (cmd.data_out.as_ptr() as usize) % align.max(1) == 0 => {
                (RingBuf::Pooled(std::mem::take(&mut cmd.data_out)), true)
            }
            Some(align) => {
                let data = cmd.data_out.get(..len).unwrap_or_default();
                match RingBuf::aligned_copy(data, align) {
                    Ok(b) => (b, false),
                    Err(_) => return Start::Workers(cmd),
                }
            }
        },
    };
    Start::Submit(
        Pending {
            cmd,
            class,
            op,
            moved,
            xfer_len: bytes,
            held,
        },
        buf,
    )
}

/// The completion of one command, by the ring (on this thread) or by the
/// store (on its thread).
#[allow(clippy::too_many_arguments)]
fn finish(
    lu: &Arc<LogicalUnit>,
    key: TaskKey,
    done: Done,
    via: &Via,
    p: Pending,
    started: Instant,
    result: Result<(), BackstoreError>,
    buf: RingBuf,
) {
    let Pending {
        mut cmd,
        class,
        op,
        moved,
        xfer_len,
        held,
    } = p;
    let len = match op {
        Op::Read { len, .. } | Op::Write { len, .. } => len as u64,
        Op::Fsync => 0,
    };
    let buf = if moved {
        cmd.data_out = buf.into_pooled();
        RingBuf::Empty
    } else {
        buf
    };
    drop(held);
    let result = match result {
        Err(BackstoreError::WouldBlock) => {
            // Not performed: the workers run it the usual way.
            if lu.tasks.leave_running(key, true) {
                call(done, outcome::aborted(key.tag));
            } else if let Err(refused) = lu.enqueue(cmd, done) {
                call(refused.done, refused.response);
            }
            return;
        }
        r => r,
    };
    let kind = match class {
        Class::Read => IoKind::Read,
        Class::Write => IoKind::Write,
        Class::Sync => IoKind::Flush,
    };
    via.record(kind, len, started, result.is_ok());
    if let Err(e) = &result {
        via.failed(e);
    }
    let format = lu.sense_format();
    let response = catch_unwind(AssertUnwindSafe(|| match (class, result) {
        (Class::Read, Ok(_)) => {
            lu.stats.count_read(len);
            outcome::good(
                &cmd,
                DataDir::In,
                Outcome::read(buf.into_pooled(), xfer_len),
            )
        }
        (Class::Write, Ok(_)) => {
            lu.stats.count_write(len);
            outcome::good(&cmd, DataDir::Out, Outcome::data_out(xfer_len))
        }
        (Class::Sync, Ok(_)) => outcome::good(&cmd, DataDir::None, Outcome::none()),
        (class, Err(e)) => {
            tracing::warn!(lun = lu.lun, tag = cmd.tag, error = %e, ?class, "I/O failed");
            outcome::check_condition(cmd.tag, &Sense::from(e), format)
        }
    }))
    .unwrap_or_else(|_| {
        tracing::error!(
            lun = lu.lun,
            tag = key.tag,
            "completion of a ring or store op panicked"
        );
        let sense = Sense::new(SenseKey::HARDWARE_ERROR, Asc::INTERNAL_TARGET_FAILURE);
        outcome::check_condition(key.tag, &sense, SenseFormat::Fixed)
    });
    lu.tasks.complete(key, done, response, false);
}
