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
//! - I_T nexus release ([`PortConn::release_nexus`]): on the connection's
//!   own thread, once, under the registry's lock; and before a new session
//!   goes on, the nexuses of its initiator's connections whose sockets are
//!   already closed;
//! - the [`Reactors`]: single-threaded tokio runtimes that run the
//!   connection tasks of both drivers;
//! - the connection task itself ([`serve`]): the turn, the wait with its
//!   busy-poll, messages from the port, the core's timer and the end of a
//!   connection, over a [`Link`], all a driver implements to move bytes
//!   or work requests;
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
//! [`Link`]'s); every lock is
//! short and never held across an await; nothing a peer sends reaches
//! this layer other than through the core's validated events; every wait
//! is bounded.

#![warn(missing_docs)]

mod admission;
mod conn;
mod msg;
pub mod poll;
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
pub use reactors::{connections_here, Reactors, ThreadSetup};
pub use registry::{ConnSummary, Port};
pub use rustgt_iscsi::negotiate::Transport;
pub use stats::{ConnStats, ConnStatsSnapshot, LatencyHistogram, LATENCY_BUCKETS};
pub use tmf::TMF_THREADS;
pub use turn::{serve, Got, Link};

#[cfg(test)]
mod tests;
