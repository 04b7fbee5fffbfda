//! [`ScsiTarget`]: one SCSI target device, i.e. a table of logical units,
//! the I_T nexuses that have used it, and task management (SAM-5 §7).
//!
//! Guarantees:
//! - [`ScsiTarget::submit`] never blocks on I/O and never calls the
//!   completion on the caller's stack while the target runs: commands for a
//!   LUN go to its workers; commands for a missing LUN and refused commands
//!   (BUSY, TASK SET FULL, overlapped tag) are completed by the target's
//!   control thread;
//! - [`ScsiTarget::task_management`] answers only after every task it
//!   aborted has delivered its (aborted) completion, so it may wait for a
//!   running backstore call: call it from a context that may block;
//! - a nexus is known from its first command or TMF until
//!   [`ScsiTarget::nexus_lost`]; only known nexuses receive unit
//!   attentions, so a new nexus starts without any.

use rustgt_backstore::StreamHint;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use crate::cmd::{Command, Completion, Done, Nexus, Response, TmfFunction, TmfResponse};
use crate::error::ScsiError;
use crate::exec;
use crate::lun::{LogicalUnit, LunConfig, LunStats};
use crate::registry::LunRegistry;
use crate::sense::Asc;
use crate::spc::MAX_LUN;
use crate::target_state::TargetShared;
use crate::task_set::TaskKey;
use crate::workers;

/// Says once per LUN where its commands that cannot complete at once run.
fn log_blocking_path(target: &str, lu: &LogicalUnit) {
    let path = match rustgt_backstore::uring::probe() {
        _ if crate::ring::serves_async(lu) => "the store's asynchronous API",
        _ if !rustgt_backstore::uring::enabled() => "worker threads (io_uring off)",
        Err(_) => "worker threads (io_uring unavailable)",
        Ok(()) if crate::ring::serves(lu) => "io_uring",
        Ok(()) => "worker threads (store not driven by io_uring)",
    };
    tracing::info!(target, lun = lu.lun, path, "blocking I/O path");
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

type Job = Box<dyn FnOnce() + Send + 'static>;

/// The control thread: completes commands that never reach a LUN queue.
#[derive(Debug)]
struct Control {
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    handle: Mutex<Option<JoinHandle<()>>>,
}

impl Control {
    fn start(name: &str) -> Control {
        let (tx, rx) = mpsc::channel::<Job>();
        let spawned = std::thread::Builder::new()
            .name(format!("rustgt-{name}-ctl"))
            .spawn(move || {
                for job in rx {
                    job();
                }
            });
        match spawned {
            Ok(handle) => Control {
                tx: Mutex::new(Some(tx)),
                handle: Mutex::new(Some(handle)),
            },
            Err(e) => {
                // Degraded but correct: jobs run on the caller's thread.
                tracing::error!(error = %e, "cannot start the SCSI control thread");
                Control {
                    tx: Mutex::new(None),
                    handle: Mutex::new(None),
                }
            }
        }
    }

    /// Runs `job` on the control thread, or inline once it has stopped.
    fn run(&self, job: Job) {
        let job = match lock(&self.tx).as_ref() {
            Some(tx) => match tx.send(job) {
                Ok(()) => return,
                Err(mpsc::SendError(job)) => job,
            },
            None => job,
        };
        job();
    }

    fn stop(&self) {
        drop(lock(&self.tx).take());
        if let Some(handle) = lock(&self.handle).take() {
            if handle.thread().id() != std::thread::current().id() && handle.join().is_err() {
                tracing::error!("SCSI control thread panicked");
            }
        }
    }
}

/// One SCSI target device: a LUN table with a worker pool per LUN.
#[derive(Debug)]
pub struct ScsiTarget {
    name: String,
    /// The target's QoS limits, shared by its units' task sets.
    qos: Arc<crate::qos::TargetQos>,
    shared: Arc<TargetShared>,
    control: Control,
    shut_down: AtomicBool,
}

impl ScsiTarget {
    /// A target with no LUNs. `name` is used for thread names and logs.
    /// EXTENDED COPY reaches this target's LUNs only; use
    /// [`Self::with_registry`] to copy between targets.
    pub fn new(name: &str) -> Arc<ScsiTarget> {
        Self::with_registry(name, LunRegistry::new())
    }

    /// A target with no LUNs whose LUNs join `registry`, so EXTENDED COPY
    /// on any target sharing it can reach them (create one registry per
    /// process and hand it to every target).
    pub fn with_registry(name: &str, registry: Arc<LunRegistry>) -> Arc<ScsiTarget> {
        Arc::new(ScsiTarget {
            name: name.to_string(),
            qos: Arc::default(),
            shared: Arc::new(TargetShared::new(registry)),
            control: Control::start(name),
            shut_down: AtomicBool::new(false),
        })
    }

    /// The name given at creation (thread names, logs).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The target port groups of every gateway that serves this target,
    /// this one's included (SPC-4 §5.16): REPORT TARGET PORT GROUPS lists
    /// them all, whether a nexus used them yet or not.
    pub fn set_port_groups(&self, groups: &[u16]) {
        let mut g = groups.to_vec();
        g.sort_unstable();
        g.dedup();
        *self
            .shared
            .port_groups
            .write()
            .unwrap_or_else(PoisonError::into_inner) = g;
    }

    /// Exports a logical unit and starts its workers. Every known nexus gets
    /// REPORTED LUNS DATA HAS CHANGED (SPC-4 §5.14) on every LUN.
    pub fn add_lun(&self, lun: u64, cfg: LunConfig) -> Result<(), ScsiError> {
        if self.shut_down.load(Ordering::SeqCst) {
            return Err(ScsiError::ShutDown);
        }
        if lun > MAX_LUN {
            return Err(ScsiError::LunOutOfRange(lun));
        }
        let block_size = cfg.backstore.geometry().block_size;
        if block_size == 0 || block_size % 512 != 0 {
            return Err(ScsiError::InvalidConfig {
                lun,
                reason: format!("block size {block_size} is not a multiple of 512"),
            });
        }
        if cfg.physical_block_exponent().is_none() {
            return Err(ScsiError::InvalidConfig {
                lun,
                reason: format!(
                    "physical block size {:?} is not a power-of-two multiple of {block_size}",
                    cfg.physical_block_size
                ),
            });
        }
        if self.shared.lu(lun).is_some() {
            return Err(ScsiError::LunExists(lun));
        }
        let lu = Arc::new(LogicalUnit::new(lun, &cfg));
        if let Some(sh) = lu.backstore.shared_state() {
            let target = Arc::downgrade(&self.shared);
            let weak = Arc::downgrade(&lu);
            sh.listen(Box::new(move |event| {
                crate::cluster::on_event(&target, &weak, event)
            }));
            let target = Arc::downgrade(&self.shared);
            let weak = Arc::downgrade(&lu);
            sh.on_owner_broken(Box::new(move || {
                crate::cluster::on_owner_broken(&target, &weak)
            }));
        }
        lu.pr.restore().map_err(|e| ScsiError::InvalidConfig {
            lun,
            reason: e.to_string(),
        })?;
        lu.tasks.set_target_qos(Arc::clone(&self.qos));
        lu.tasks.set_qos(&cfg.qos);
        workers::start(&lu, &self.shared, cfg.workers)?;
        log_blocking_path(self.name.as_str(), &lu);
        {
            let mut luns = self
                .shared
                .luns
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            if luns.contains_key(&lun) {
                drop(luns);
                workers::stop_and_join(&lu);
                return Err(ScsiError::LunExists(lun));
            }
            self.shared.registry.register(&lu);
            luns.insert(lun, lu);
        }
        tracing::info!(target = %self.name, lun, "LUN added");
        self.shared.luns_changed();
        Ok(())
    }

    /// Stops exporting a logical unit: new commands to it fail with LOGICAL
    /// UNIT NOT SUPPORTED, queued and running ones finish, then the workers
    /// stop and the backstore is flushed.
    pub fn remove_lun(&self, lun: u64) -> Result<(), ScsiError> {
        let lu = self
            .shared
            .luns
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&lun)
            .ok_or(ScsiError::NoSuchLun(lun))?;
        self.shared.registry.unregister(&lu);
        workers::stop_and_join(&lu);
        if let Err(e) = lu.backstore.flush() {
            tracing::warn!(target = %self.name, lun, error = %e, "flush on LUN removal failed");
        }
        tracing::info!(target = %self.name, lun, "LUN removed");
        self.shared.luns_changed();
        Ok(())
    }

    /// Exported LUNs, ascending.
    pub fn luns(&self) -> Vec<u64> {
        self.shared.lun_list()
    }

    /// The LUN's backstore now reports a different capacity (grown or
    /// swapped by the front end's owner): every known nexus gets CAPACITY
    /// DATA HAS CHANGED (ASC 2Ah/09h) on that LUN, so initiators re-read
    /// the capacity. Geometry is read from the backstore on every command,
    /// so nothing else needs updating.
    pub fn capacity_changed(&self, lun: u64) -> Result<(), ScsiError> {
        let lu = self.shared.lu(lun).ok_or(ScsiError::NoSuchLun(lun))?;
        lu.establish_ua(
            self.shared.known_nexuses(),
            Asc::CAPACITY_DATA_HAS_CHANGED,
            None,
        );
        tracing::info!(target = %self.name, lun, "capacity changed");
        Ok(())
    }

    /// I/O counters of a LUN.
    pub fn lun_stats(&self, lun: u64) -> Option<LunStats> {
        self.shared.lu(lun).map(|lu| lu.stats())
    }

    /// Sets the QoS limits on every command of the target (all its LUNs
    /// together), on top of each LUN's own; empty limits remove them.
    /// Commands waiting for a limit see the change at once.
    pub fn set_qos(&self, limits: &crate::qos::QosLimits) {
        self.qos.set(limits);
        for lu in self.shared.all_lus() {
            lu.tasks.qos_changed();
        }
    }

    /// Sets a LUN's `alua` setting, live: INQUIRY DATA HAS CHANGED when
    /// TPGS changes, ASYMMETRIC ACCESS STATE CHANGED when leaving explicit
    /// ALUA put groups back to active/optimized.
    pub fn set_lun_alua(&self, lun: u64, mode: crate::AluaMode) -> Result<(), ScsiError> {
        let lu = self.shared.lu(lun).ok_or(ScsiError::NoSuchLun(lun))?;
        let change = lu.alua.set_mode(mode);
        let nexuses = self.shared.known_nexuses();
        if change.tpgs {
            lu.establish_ua(nexuses.iter().copied(), Asc::INQUIRY_DATA_HAS_CHANGED, None);
        }
        if change.states {
            lu.establish_ua(nexuses, Asc::ASYMMETRIC_ACCESS_STATE_CHANGED, None);
        }
        Ok(())
    }

    /// A LUN's `alua` setting and the access state of this daemon's target
    /// port group `group` ("active/optimized", "standby", ...).
    pub fn lun_alua(&self, lun: u64, group: u16) -> Option<(crate::AluaMode, &'static str)> {
        self.shared.lu(lun).map(|lu| {
            let state = if lu.alua.gateway_explicit() {
                match lu.backstore.shared_state().is_some_and(|sh| sh.owns()) {
                    true => "active/optimized",
                    false => "standby",
                }
            } else {
                lu.alua.state_name(group)
            };
            (lu.alua.mode(), state)
        })
    }

    /// Sets a LUN's QoS limits (its own and its initiators'), live.
    pub fn set_lun_qos(&self, lun: u64, qos: &crate::qos::LunQos) -> Result<(), ScsiError> {
        let lu = self.shared.lu(lun).ok_or(ScsiError::NoSuchLun(lun))?;
        lu.tasks.set_qos(qos);
        Ok(())
    }

    /// A LUN's throttling counters.
    pub fn lun_qos_stats(&self, lun: u64) -> Option<crate::qos::LunQosStats> {
        self.shared.lu(lun).map(|lu| lu.tasks.qos_stats())
    }

    /// The target-wide limits' counters, when the target has limits.
    pub fn target_qos_stats(&self) -> Option<crate::qos::QosStats> {
        self.qos.stats()
    }

    /// A nexus's (a session's) throttling counters over every LUN.
    pub fn nexus_qos_stats(&self, nexus: u64) -> crate::qos::QosStats {
        let per: Vec<_> = self
            .shared
            .all_lus()
            .iter()
            .map(|lu| lu.tasks.qos_nexus_stats(nexus))
            .collect();
        crate::qos::sum(&per)
    }

    /// Queues a command; `done` is called exactly once, from a worker or
    /// the control thread (inline only after [`Self::shutdown`]).
    pub fn submit(&self, cmd: Command, done: Completion) {
        self.submit_to(cmd, Done::Boxed(done));
    }

    /// [`Self::submit`] with the response going to a [`Done`] (a front
    /// end's shared sink: no allocation per command).
    pub fn submit_to(&self, cmd: Command, done: Done) {
        self.shared.register(&cmd.nexus);
        match self.shared.lu(cmd.lun) {
            Some(lu) => {
                if let Err(refused) = lu.enqueue(cmd, done) {
                    let (done, response) = (refused.done, refused.response);
                    self.control.run(Box::new(move || done.call(response)));
                }
            }
            None => {
                let shared = Arc::clone(&self.shared);
                self.control.run(Box::new(move || {
                    let response = exec::execute(&cmd, None, &shared, StreamHint::default());
                    done.call(response);
                }));
            }
        }
    }

    /// Runs `cmd` to completion on the calling thread when its LUN can do
    /// that without blocking (see `workers::run_inline`: reads and
    /// writes of memory-backed stores, page-cache hits of buffered files);
    /// a reactor calls this first and hands what comes back to
    /// [`Self::submit`]. Task management, unit attentions, reservations and
    /// LBA range locks apply exactly as on the workers. `ring`: the calling
    /// reactor's io_uring, if it has one (after a turn's first read, the
    /// reads of a file LUN are left to it, see [`Self::run_on_ring_to`]).
    pub fn run_inline(
        &self,
        cmd: Command,
        ring: Option<&crate::Ring>,
    ) -> Result<Response, Command> {
        match self.shared.lu(cmd.lun) {
            Some(lu) => {
                self.shared.register(&cmd.nexus);
                workers::run_inline(&lu, cmd, &self.shared, ring)
            }
            None => Err(cmd),
        }
    }

    /// Starts `cmd` on `ring`, the calling reactor's io_uring, when
    /// [`Self::run_inline`] gave it back and the LUN's store is a file or
    /// block device the ring can drive (SIMPLE READ, WRITE and SYNCHRONIZE
    /// CACHE); `done` is then called on this thread, from the ring's
    /// completion ([`crate::Ring::reap`]) or at once when the checks
    /// answer the command. A store with an asynchronous API of its own
    /// (an RBD image, [`rustgt_backstore::aio`]) takes the same commands
    /// from any thread and calls `done` on its own thread. `Err` hands both
    /// back for [`Self::submit`].
    #[allow(clippy::result_large_err)]
    pub fn run_on_ring(
        &self,
        cmd: Command,
        done: Completion,
        ring: Option<&crate::Ring>,
    ) -> Result<(), (Command, Completion)> {
        match self.run_on_ring_to(cmd, Done::Boxed(done), ring) {
            Ok(()) => Ok(()),
            Err((cmd, Done::Boxed(done))) => Err((cmd, done)),
            // Only what went in comes back.
            Err((cmd, done @ Done::Sink(..))) => {
                self.submit_to(cmd, done);
                Ok(())
            }
        }
    }

    /// [`Self::run_on_ring`] with the response going to a [`Done`]: a
    /// command on the ring waits in its op's slot, so with a
    /// [`Done::Sink`] starting and finishing it allocates nothing in
    /// steady state.
    #[allow(clippy::result_large_err)]
    pub fn run_on_ring_to(
        &self,
        cmd: Command,
        done: Done,
        ring: Option<&crate::Ring>,
    ) -> Result<(), (Command, Done)> {
        match self.shared.lu(cmd.lun) {
            Some(lu) => {
                self.shared.register(&cmd.nexus);
                crate::ring::start(&lu, cmd, done, ring)
            }
            None => Err((cmd, done)),
        }
    }

    /// Executes a task management function (SAM-5 §7) for `nexus` on `lun`.
    pub fn task_management(&self, nexus: &Nexus, lun: u64, f: TmfFunction) -> TmfResponse {
        self.shared.register(nexus);
        match f {
            TmfFunction::TargetWarmReset => {
                self.reset_all(Asc::SCSI_BUS_RESET_OCCURRED);
                return TmfResponse::FunctionComplete;
            }
            TmfFunction::TargetColdReset => {
                self.reset_all(Asc::POWER_ON_OCCURRED);
                return TmfResponse::FunctionComplete;
            }
            TmfFunction::ClearAca => return TmfResponse::NotSupported,
            _ => {}
        }
        let Some(lu) = self.shared.lu(lun) else {
            return TmfResponse::IncorrectLun;
        };
        let me = nexus.id;
        match f {
            TmfFunction::AbortTask { tag } => {
                let key = TaskKey { nexus: me, tag };
                let aborted = lu.tasks.abort_matching(|k| *k == key);
                if aborted.nexuses.is_empty() {
                    return TmfResponse::TaskNotFound;
                }
                lu.tasks.wait_gone(&aborted);
                TmfResponse::FunctionComplete
            }
            TmfFunction::AbortTaskSet => {
                let aborted = lu.tasks.abort_matching(|k| k.nexus == me);
                lu.tasks.wait_gone(&aborted);
                TmfResponse::FunctionComplete
            }
            TmfFunction::ClearTaskSet => {
                let aborted = lu.tasks.abort_matching(|_| true);
                lu.tasks.wait_gone(&aborted);
                // TAS=0: other nexuses learn of their lost tasks (SAM-5 §7.4).
                lu.establish_ua(
                    aborted.nexuses.iter().copied(),
                    Asc::COMMANDS_CLEARED_BY_ANOTHER_INITIATOR,
                    Some(me),
                );
                TmfResponse::FunctionComplete
            }
            TmfFunction::LogicalUnitReset => {
                self.reset_lu(&lu, Asc::BUS_DEVICE_RESET_FUNCTION_OCCURRED);
                TmfResponse::FunctionComplete
            }
            TmfFunction::QueryTask { tag } => {
                if lu.tasks.has_task(TaskKey { nexus: me, tag }) {
                    TmfResponse::FunctionSucceeded
                } else {
                    TmfResponse::FunctionComplete
                }
            }
            TmfFunction::TargetWarmReset | TmfFunction::TargetColdReset | TmfFunction::ClearAca => {
                TmfResponse::NotSupported
            }
        }
    }

    /// Logical unit reset (SAM-5 §6.3.3), here and, for a unit other
    /// gateways serve too, on every gateway before it is reported done.
    fn reset_lu(&self, lu: &LogicalUnit, asc: Asc) {
        self.shared.reset_lu_here(lu, asc);
        crate::cluster::announce(lu, &crate::cluster::Event::Reset(asc));
    }

    /// Target reset (SAM-5 §6.3.2): a logical unit reset of every LUN.
    fn reset_all(&self, asc: Asc) {
        for lu in self.shared.all_lus() {
            self.reset_lu(&lu, asc);
        }
    }

    /// The nexus is gone (session closed or lost): its tasks are aborted
    /// (their completions report `aborted`), its unit attentions dropped.
    /// Does not wait for running tasks.
    pub fn nexus_lost(&self, nexus: &Nexus) {
        self.shared.forget(nexus.id);
        for lu in self.shared.all_lus() {
            lu.tasks.abort_matching(|k| k.nexus == nexus.id);
            lu.tasks.forget_nexus(nexus.id);
            if lu.drop_nexus(nexus) {
                // Its SPC-2 reservation ended on every gateway.
                crate::cluster::announce(&lu, &crate::cluster::Event::reservations_changed());
            }
        }
    }

    /// Stops every worker after draining queued and running commands,
    /// flushes every backstore, then stops the control thread. Later
    /// commands complete at once with BUSY. Idempotent; also run on drop.
    pub fn shutdown(&self) {
        if self.shut_down.swap(true, Ordering::SeqCst) {
            return;
        }
        for lu in self.shared.all_lus() {
            self.shared.registry.unregister(&lu);
            workers::stop_and_join(&lu);
            if let Err(e) = lu.backstore.flush() {
                tracing::warn!(target = %self.name, lun = lu.lun, error = %e, "flush on shutdown failed");
            }
        }
        self.control.stop();
        tracing::info!(target = %self.name, "SCSI target shut down");
    }
}

impl Drop for ScsiTarget {
    fn drop(&mut self) {
        self.shutdown();
    }
}
