//! # rustgt-iscsi: the sans-I/O iSCSI protocol core
//!
//! RFC 7143 (iSCSI) and the iSCSI-level parts of RFC 7145 (iSER), with no
//! sockets, no threads, no clocks and no files. A driver (TCP in
//! `rustgt-iscsi-tcp`, RDMA in `rustgt-iser`) feeds a [`Connection`] what
//! it received (stream bytes, or whole iSER messages and finished RDMA
//! Reads), SCSI completions and `now`; it gets back output (stream
//! segments, or iSER Sends and RDMA Writes/Reads to post) and [`Event`]s:
//! SCSI commands and task-management requests to run. The same
//! `Connection` serves both transports; only framing and data movement
//! differ, inside it.
//!
//! Layer: of the workspace's crates it depends on `rustgt-scsi` only, for
//! the types of the SCSI interface ([`rustgt_scsi::Command`], TMFs, the
//! I_T nexus) and the [`Directory`] of SCSI targets by name; it runs no
//! SCSI command itself, the driver does. The port layer (`rustgt-port`),
//! the two drivers (`rustgt-iscsi-tcp`, `rustgt-iser`), the `rustgt`
//! binary and the test initiator depend on it.
//!
//! Guarantees:
//! - every header is validated (opcode against phase, lengths against the
//!   negotiated limits, CmdSN window) before its data segment is buffered;
//! - nothing a peer sends panics; a bad PDU gets a Reject or a clean close;
//! - memory per connection is bounded by the negotiated limits and the
//!   configured queue depth;
//! - every public item is documented (`warn(missing_docs)`, which clippy
//!   `-D warnings` makes an error).

#![forbid(unsafe_code)]
#![warn(missing_docs)]
// Peer bytes are read with `get` and checked conversions, never by
// indexing that could panic; the lint keeps it so (tests may index).
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

pub mod brake;
pub mod budget;
pub mod chap;
pub mod config;
pub mod conn;
mod directory;
pub mod discovery;
pub mod groups;
pub mod iser;
mod login;
mod login_failure;
pub mod name;
pub mod negotiate;
pub mod pdu;
mod refusal;
pub mod session;
mod task;
pub mod text;

pub use budget::{BudgetSnapshot, DataBudget};
pub use config::{GatewayLoads, PortalConfig, Redirect, TargetInfo};
pub use conn::{
    Connection, ConnectionSetup, Event, IserOp, IserParams, IserSend, RdmaRead, RdmaWrite,
    SessionInfo,
};
pub use directory::Directory;
pub use name::{IscsiName, NameError};
pub use session::SessionTable;
pub use task::ReadDest;
