//! # rustgt-scsi: the SCSI core
//!
//! Sits between the front ends (iSCSI over TCP, iSER) and the backstore. It
//! parses CDBs, executes SPC-4/SBC-3 commands against a
//! [`rustgt_backstore::Backstore`], builds sense data, keeps unit attentions
//! per I_T nexus and runs a worker pool per logical unit. It knows nothing of
//! iSCSI: a front end hands it a [`Command`] and gets a [`Response`] back
//! through a callback.
//!
//! Layer: of the workspace's crates it depends on `rustgt-backstore` only
//! (the stores, pooled [`IoBuf`]s and the per-thread [`uring`]); the
//! iSCSI core (`rustgt-iscsi`), the port layer (`rustgt-port`), the
//! `rustgt` binary, the test initiator and the fuzz targets depend on it.
//! It never calls up: a response leaves through the front end's
//! [`Completion`] or [`ResponseSink`].
//!
//! Guarantees: no CDB, however malformed, panics; every command gets exactly
//! one completion; every error leaves as CHECK CONDITION with sense data
//! built in one place ([`sense`], including `From<BackstoreError>`); no
//! `unsafe` code (`forbid(unsafe_code)`); every public item is documented
//! (`warn(missing_docs)`, which clippy `-D warnings` makes an error).
//!
//! Layout, in layers (a module uses only modules of its own or lower
//! layers; there are no import cycles):
//! 1. leaves: [`cmd`] is the front-end interface, [`sense`] builds sense
//!    data, `cdb` reads CDB fields; `ua`, `lba_lock`, `max_transfer`;
//! 2. state a logical unit owns, with no knowledge of commands: `pr_state`
//!    (the persistent reservation model), `pr_store` (its APTPL file),
//!    `pr` (the live, locked reservations and conflict check), `medium`,
//!    `sanitize` (state and the operation's thread), `xcopy_param` and
//!    `copy_results`, and `task_set` (queueing, task attributes, aborts);
//! 3. `lun`, a logical unit's state (the above plus backstore, identity,
//!    mode parameters, unit attentions), and `target_state`, the target
//!    state its commands see; `registry`, `limits`, `cluster`, `error`;
//! 4. what handlers receive and return: `ctx` and `outcome`;
//! 5. the handlers: `spc`, `sbc`, `sbc_ext`, `provisioning`, `mode`,
//!    `vpd`, `alua`, `pr_cmd`, `medium_cmd`, `sanitize_cmd`, `xcopy`;
//! 6. `table`, the single command table that both routes CDBs and feeds
//!    REPORT SUPPORTED OPERATION CODES, and `exec`, the dispatcher with
//!    the generic checks;
//! 7. how commands run: `workers` (a LUN's worker threads and the inline
//!    path) and `ring`, which starts READ, WRITE and SYNCHRONIZE CACHE on
//!    the calling reactor's io_uring ([`Ring`], which the reactor hands
//!    down) and finishes them from its completions;
//! 8. [`ScsiTarget`] (`target`): the LUN table and task management.
//!
//! Threading contract for front ends:
//! - [`ScsiTarget::submit`] only queues; the completion runs on a LUN worker
//!   or the target's control thread, never inside `submit` (until the
//!   target is shut down);
//! - [`ScsiTarget::run_inline`] and [`ScsiTarget::run_on_ring`] run on the
//!   caller's thread, with the caller's [`Ring`] if it has one; a command
//!   started on the ring completes from that ring's [`Ring::reap`] (or
//!   at once when its checks answer it);
//! - [`ScsiTarget::submit_to`] and [`ScsiTarget::run_on_ring_to`] take a
//!   [`Done`] instead of a boxed [`Completion`]: a front end's shared
//!   [`ResponseSink`] and a [`Ticket`], so handing over a command
//!   allocates nothing;
//! - [`ScsiTarget::task_management`] may block until the tasks it aborted
//!   have finished their current backstore call: call it where blocking is
//!   allowed (e.g. `spawn_blocking`);
//! - a nexus is known from its first command or TMF; unit attentions are
//!   only established for known nexuses, so a new session starts with none
//!   (as LIO and tgt behave).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod cmd;
pub mod sense;

mod alua;
mod cdb;
mod cluster;
mod copy_results;
mod ctx;
mod error;
mod exec;
mod fence;
mod lba_lock;
mod limits;
mod lun;
mod lunmap;
mod max_transfer;
mod medium;
mod medium_cmd;
mod mode;
mod outcome;
mod pr;
mod pr_cmd;
mod pr_state;
mod pr_store;
mod provisioning;
pub mod qos;
mod registry;
mod ring;
mod sanitize;
mod sanitize_cmd;
mod sbc;
mod sbc_ext;
mod spc;
mod table;
mod target;
mod target_state;
mod task_set;
mod ua;
mod vpd;
mod workers;
mod xcopy;
mod xcopy_param;

pub use alua::AluaMode;
pub use cmd::*;
pub use error::ScsiError;
pub use lun::{LunConfig, LunStats, DEFAULT_WORKERS};
pub use lunmap::{LunMap, LunMapError, Mapped, UNMAPPED_LUN, UNMAPPED_LUN0};
pub use qos::{Limit, LunQos, LunQosStats, QosLimits, QosStats, MAX_QOS_INITIATORS};
pub use registry::LunRegistry;
pub use ring::{Ring, RingCmd};
/// The largest buffer the pool keeps ([`IoBuf::for_overwrite`] of more is a plain vector).
pub use rustgt_backstore::buf::MAX_POOLED;
/// io_uring for reactors: the probe, the settings, eventfd handling
/// (a reactor creates, serves and drains its own [`Ring`]).
pub use rustgt_backstore::uring;
pub use sense::{Asc, FieldPointer, Sense, SenseFormat, SenseKey};
pub use spc::{lun_from_sam, lun_to_sam, MAX_LUN};
pub use target::ScsiTarget;
pub use task_set::MAX_TASKS_PER_LUN;
