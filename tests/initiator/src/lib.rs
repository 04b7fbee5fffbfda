//! Raw iSCSI test initiators shared by the workspace's tests (a dev-only
//! crate, never published):
//!
//! - [`tcp`]: a blocking initiator over real TCP connections, for the
//!   daemon's black-box tests (its items are re-exported at the root);
//! - [`pair`]: an in-memory initiator driving a `rustgt_iscsi::Connection`
//!   directly, for the iSCSI core's tests;
//! - [`pdu`]: the request PDUs both build (login, SCSI command, Data-Out,
//!   NOP-Out).

pub mod pair;
pub mod pdu;
pub mod tcp;

pub use pdu::nop_out;
pub use tcp::*;
