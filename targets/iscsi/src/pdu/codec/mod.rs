//! The iSCSI PDU wire codec (RFC 7143 §11): padding, CRC32C digests, SAM LUN
//! encoding, and the typed PDUs of `pdu` to and from bytes.
//!
//! Production direction: the target decodes [`Request`]s (header first with
//! [`RequestHeader::parse`], so limits are checked before the data segment is
//! read) and encodes [`Reply`]s. The reverse direction ([`Request::encode`],
//! [`Reply::decode`]) serves the in-memory test initiator and the tests.
//!
//! Guarantees:
//! - no decoder panics on any input; `Err(Incomplete(n))` means at least `n`
//!   more bytes are needed, and is the only error a truncated PDU yields;
//! - the codec rejects only what it cannot represent or frame: unknown
//!   opcodes, malformed AHS, data where a PDU has no room for it, bad digests.
//!   Open code fields (Stage, TmfCode, reasons, ...) and flag combinations
//!   pass through unjudged: the connection checks them, since the right answer
//!   (Reject, Login status, close) depends on the phase;
//! - LUN fields are kept as the raw 8 wire bytes (a big-endian `u64`); use
//!   [`decode_lun`] / [`encode_lun`] to convert to and from LUN numbers;
//! - encoders never fail. Lengths beyond what the wire can carry are clamped
//!   (data segment to [`MAX_DATA_SEGMENT_LEN`], CDB to [`MAX_CDB_LEN`]); the
//!   connection never produces such values.
//!
//! One file per sub-job: `digest` (CRC32C), `lun` (SAM LUN field), `frame`
//! (padding, wire lengths, splitting and appending whole PDUs), `ahs`
//! (Additional Header Segments), `fields` (helpers shared by the PDU
//! encoders), `request` (initiator PDUs) and `reply` (target PDUs).

mod ahs;
mod digest;
mod fields;
mod frame;
mod lun;
mod reply;
mod request;

pub use ahs::{AHS_TYPE_BIDI_READ_LEN, AHS_TYPE_EXTENDED_CDB, MAX_CDB_LEN};
pub use digest::{crc32c_digest, digest_wire_bytes, verify_digest, DIGEST_LEN};
pub use frame::{padded_len, Framing, PduSink, MAX_AHS_LEN, MAX_DATA_SEGMENT_LEN};
pub use lun::{decode_lun, encode_lun, INVALID_LUN, MAX_LUN};
