//! # rustgt-iscsi: the sans-I/O iSCSI protocol core
//!
//! RFC 7143 (iSCSI) and the iSCSI-level parts of RFC 7145 (iSER), with no
//! sockets, no threads, no clocks and no files. A driver (TCP in
//! `rustgt-iscsi-tcp`, later iSER) feeds a [`Connection`] bytes, SCSI
//! completions and `now`; it returns bytes to send and [`Event`]s: SCSI
//! commands and task-management requests to run.
//!
//! Guarantees:
//! - every header is validated (opcode against phase, lengths against the
//!   negotiated limits, CmdSN window) before its data segment is buffered;
//! - nothing a peer sends panics; a bad PDU gets a Reject or a clean close;
//! - memory per connection is bounded by the negotiated limits and the
//!   configured queue depth.

pub mod chap;
pub mod config;
pub mod conn;
pub mod discovery;
mod login;
pub mod negotiate;
pub mod pdu;
pub mod session;
mod task;
pub mod text;

pub use config::{PortalConfig, TargetInfo};
pub use conn::{Connection, ConnectionSetup, Event, SessionInfo};
pub use session::SessionTable;
