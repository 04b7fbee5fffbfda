//! One logical unit's state: everything a command handler needs (its
//! backstore and geometry, identity, statistics, mode parameters, unit
//! attentions, reservations, medium, sanitize and copy state, LBA locks)
//! and its configuration. How its commands are queued and run is kept
//! apart: the task set in [`crate::task_set`], the workers and the inline
//! path in [`crate::workers`].
//!
//! Guarantees:
//! - all workers of a LUN share one I/O context: one `Arc<dyn Backstore>`,
//!   one set of atomic counters.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use rustgt_backstore::{Backstore, Geometry};

use crate::cmd::{Command, Done, Nexus};
use crate::copy_results::CopyResults;
use crate::fence::Fences;
use crate::lba_lock::LbaLocks;
use crate::medium::Medium;
use crate::pr::Reservations;
use crate::sanitize::Sanitizer;
use crate::sense::{Asc, SenseFormat};
use crate::task_set::{Refused, TaskKey, Tasks};
use crate::ua::SharedAttentions;

/// INQUIRY vendor and product identification when not configured.
pub(crate) const DEFAULT_VENDOR: &str = "RUSTGT";
pub(crate) const DEFAULT_PRODUCT: &str = "VIRTUAL-DISK";

/// Default number of worker threads per LUN.
pub const DEFAULT_WORKERS: usize = 8;

/// The changeable mode parameters of one logical unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ModeState {
    /// WCE: write-back caching; when clear every write is FUA.
    pub write_cache: bool,
    /// D_SENSE: descriptor-format sense data.
    pub d_sense: bool,
    /// SWP: software write protect (SPC-4 §7.5.8): the medium refuses
    /// writes with DATA PROTECT until cleared.
    pub swp: bool,
}

/// Configuration of one logical unit.
#[derive(Debug, Clone)]
pub struct LunConfig {
    /// The store the LUN's blocks live in (shared by all its workers); its
    /// geometry gives the block size and capacity.
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
    /// Used when `naa` is `None`.
    pub naa_id: u64,
    /// The whole 16-byte NAA designator (VPD page 83h), e.g. a configured
    /// WWN; beats `naa_id` when set.
    pub naa: Option<[u8; 16]>,
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
    /// IOPS and bandwidth limits ([`crate::qos`]); change them live with
    /// [`crate::ScsiTarget::set_lun_qos`].
    pub qos: crate::qos::LunQos,
    /// Implicit and/or explicit ALUA ([`crate::AluaMode`]).
    pub alua: crate::alua::AluaMode,
}

impl LunConfig {
    /// Defaults: 8 workers, "RUSTGT" / "VIRTUAL-DISK", write cache on,
    /// fully provisioned, and an empty serial and NAA id the caller should
    /// set to stable values.
    pub fn new(backstore: Arc<dyn Backstore>) -> Self {
        LunConfig {
            backstore,
            workers: DEFAULT_WORKERS,
            vendor: DEFAULT_VENDOR.to_string(),
            product: DEFAULT_PRODUCT.to_string(),
            serial: String::new(),
            naa_id: 0,
            naa: None,
            write_cache: true,
            thin: false,
            physical_block_size: None,
            unmap_command: true,
            pr_state_path: None,
            removable: false,
            sanitize_rate: None,
            qos: crate::qos::LunQos::default(),
            alua: crate::alua::AluaMode::default(),
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
    /// Successful medium reads since the LUN was added: READ commands, and
    /// each chunk an EXTENDED COPY read from this LUN.
    pub read_commands: u64,
    /// Successful medium writes since the LUN was added: WRITE, WRITE AND
    /// VERIFY, WRITE SAME and COMPARE AND WRITE commands, and each chunk an
    /// EXTENDED COPY wrote to this LUN.
    pub write_commands: u64,
    /// Bytes those reads returned from the medium.
    pub read_bytes: u64,
    /// Bytes those writes stored on the medium.
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
    pub naa: Option<[u8; 16]>,
    pub removable: bool,
}

/// One logical unit: the state its commands work on, and its task set.
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
    /// LBA range locks: writes exclude overlapping writes; COMPARE AND
    /// WRITE, ORWRITE, WRITE ATOMIC and fences exclude everything; reads
    /// register only while one of those is (`lba_lock`).
    pub lba_locks: LbaLocks,
    /// Ranges other gateways fenced off ([`crate::fence`]).
    pub fences: Fences,
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
    ua: SharedAttentions,
    /// The task set: queued and running tasks, in execution order.
    pub tasks: Tasks,
    /// Access states set by SET TARGET PORT GROUPS.
    pub alua: crate::alua::AluaStates,
    /// The worker threads ([`crate::workers`]).
    pub workers: Mutex<Vec<JoinHandle<()>>>,
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
                naa: cfg.naa,
                removable: cfg.removable,
            },
            alua: crate::alua::AluaStates::new(cfg.alua, cfg.backstore.shared_state().is_some()),
            stats: Stats::default(),
            thin: cfg.thin,
            phys_exp: cfg.physical_block_exponent().unwrap_or(0),
            unmap_command: cfg.unmap_command,
            lba_locks: LbaLocks::default(),
            fences: Fences::default(),
            pr: match cfg.backstore.shared_state() {
                Some(sh) => Reservations::new_shared(sh),
                None => Reservations::new(cfg.pr_state_path.clone()),
            },
            medium: Medium::new(cfg.removable),
            sanitizer: Sanitizer::new(cfg.sanitize_rate),
            copies: CopyResults::default(),
            mode: Mutex::new(defaults),
            mode_defaults: defaults,
            ua: SharedAttentions::default(),
            tasks: Tasks::default(),
            workers: Mutex::new(Vec::new()),
        }
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
        self.ua.take(nexus)
    }

    pub(crate) fn establish_ua<I>(&self, nexuses: I, asc: Asc, except: Option<u64>)
    where
        I: IntoIterator<Item = u64>,
    {
        self.ua.establish_for(nexuses, asc, except);
    }

    /// Forgets what the unit kept for `nexus`; `true` when that changed
    /// the reservation state other gateways share (announce it).
    pub(crate) fn drop_nexus(&self, nexus: &Nexus) -> bool {
        self.ua.drop_nexus(nexus.id);
        let changed = self.pr.nexus_lost(nexus);
        self.medium.drop_nexus(nexus.id);
        self.copies.drop_nexus(nexus.id);
        changed
    }

    /// Puts a command on the task set, or says why not.
    // A refusal is rare; boxing it would not save the hot path anything.
    #[allow(clippy::result_large_err)]
    pub(crate) fn enqueue(&self, cmd: Command, done: Done) -> Result<(), Refused> {
        self.tasks.enqueue(cmd, done, || self.sense_format())
    }

    /// Whether task management has aborted this running task (a long
    /// handler polls it to stop waiting early).
    pub(crate) fn task_aborted(&self, key: TaskKey) -> bool {
        self.tasks.task_aborted(key)
    }
}
