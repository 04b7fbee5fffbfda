//! [`PduError`], what decoding a PDU can fail with.

/// Errors decoding a PDU. The connection maps each to a Reject reason or a
/// connection close in one place.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PduError {
    #[error("need {0} more bytes")]
    Incomplete(usize),
    #[error("unknown or unsupported opcode {0:#04x}")]
    UnknownOpcode(u8),
    #[error("reserved field or bit set in {0}")]
    Reserved(&'static str),
    #[error("invalid field: {0}")]
    InvalidField(&'static str),
    #[error("malformed AHS")]
    BadAhs,
}
