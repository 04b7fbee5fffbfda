//! iSCSI PDUs (RFC 7143 §11), at two levels:
//!
//! - [`bhs`]: a checked view over the 48-byte Basic Header Segment with field
//!   accessors, no allocation;
//! - the typed enums here: [`Request`] for what an initiator sends and
//!   [`Reply`] for what a target sends.
//!
//! Parsing is two-step so that the header can be validated (opcode against
//! phase, DataSegmentLength against negotiated limits) *before* the data
//! segment is read or allocated: [`RequestHeader::parse`] decodes a BHS, and
//! the data segment is attached afterwards.
//!
//! Layout, lowest first: `codes` (the open code types, from one macro in
//! `open_enum`), `error` ([`PduError`]), [`bhs`] (the header view and field
//! offsets), `types` (the typed PDUs) and `codec` (digests, LUNs, framing,
//! AHS, and each PDU to and from bytes). This module only re-exports them;
//! the submodules refer to each other directly, never through `pdu`.

pub mod bhs;
mod codec;
mod codes;
mod error;
pub(crate) mod open_enum;
mod types;

pub use bhs::BHS_LEN;
pub use codec::*;
pub use codes::*;
pub use error::PduError;
pub use types::*;
