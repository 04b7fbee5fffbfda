//! # rustgt-port: the port layer both transport drivers share
//!
//! Layer: between the drivers (`rustgt-iscsi-tcp`, `rustgt-iser`) and the
//! sans-I/O core (`rustgt-iscsi`, `rustgt-scsi`). Dependencies point down
//! only: a driver depends on this crate, this crate on the core, never the
//! other way. A driver accepts connections and moves bytes (TCP) or work
//! requests (verbs); everything else about a connection's life is here,
//! once for both transports:
//!
//! - the [`Directory`](rustgt_iscsi::Directory) of targets and the protocol configuration, so a
//!   target added, changed or removed at run time reaches every portal of
//!   every transport at once;
//! - the one [`SessionTable`](rustgt_iscsi::SessionTable): session reinstatement (RFC 7143 §6.3.5)
//!   sees the sessions of both transports and closes the old connection
//!   whichever driver owns it;
//! - the connection registry, one id space for both transports: each
//!   entry carries its transport, peer, portal, session, counters
//!   ([`ConnStats`]) and the channel to its task;
//! - the control surface: [`Port::kill`], [`Port::logout`],
//!   [`Port::request_logout_all`] and the graceful [`Port::shutdown`];
//! - I_T nexus release ([`PortConn::release_nexus`]): once, under the
//!   registry's lock, after the connection's commands in flight; and before a new session
//!   goes on, the nexuses of its initiator's connections whose sockets are
//!   already closed;
//! - the reactor threads: [`PollReactors`] for TCP, one epoll loop each
//!   for all their connections, with the busy-poll, the core's timers and
//!   the reactor's io_uring; [`Reactors`] for iSER, single-threaded tokio
//!   runtimes with one connection task each ([`serve`]);
//! - the connection turn ([`turn`]), messages from the port ([`on_msg`])
//!   and the end of a connection ([`drain`]), once for both: a driver
//!   implements only a [`ReadyLink`] (TCP) or a [`Link`] (iSER), which
//!   moves bytes or work requests;
//! - the mapping of core [`Event`](rustgt_iscsi::Event)s to SCSI work
//!   ([`PortConn::on_event`]): commands the LUN can finish without
//!   blocking run to completion on the calling thread
//!   ([`ScsiTarget::run_inline`](rustgt_scsi::ScsiTarget::run_inline)); the rest go to the LUN's
//!   workers, whose completions, like task-management results and control
//!   requests, come back through [`PortConn::recv`];
//! - task-management functions run on a small fixed pool of threads
//!   ([`TMF_THREADS`]), never one thread per request.
//!
//! Guarantees: no I/O of its own (no sockets, no verbs: those are the
//! links'; the TCP reactors only wait on the descriptors a link gives
//! them); every lock is
//! short and never held across an await; nothing a peer sends reaches
//! this layer other than through the core's validated events; every wait
//! is bounded.

#![warn(missing_docs)]

mod admission;
mod conn;
mod msg;
pub mod poll;
mod poller;
mod reactors;
mod registry;
mod ring;
mod stats;
mod tmf;
mod turn;

pub use admission::{Admitted, ConnLimits, Refusal, REFUSAL_LOG_EVERY};
pub use conn::{PortConn, TURN_ROUNDS};
pub use msg::{ConnInfo, PortMsg};
pub use poll::{spin_slots, BusyPoll, Governor, SpinSlot};
pub use poller::{Closing, Opened, PollReactors, ReadyLink};
pub use reactors::{Reactors, ThreadSetup};
pub use registry::{ConnSummary, Port};
pub use rustgt_iscsi::negotiate::Transport;
/// A reactor's io_uring, as [`serve`] and [`PortConn::on_event_at`] take it.
pub use rustgt_scsi::Ring;
pub use stats::{ConnStats, ConnStatsSnapshot, LatencyHistogram, LATENCY_BUCKETS};
pub use tmf::TMF_THREADS;
pub use turn::{drain, on_msg, serve, turn, Got, Link};

#[cfg(test)]
mod tests;
