//! [`PduError`], what decoding a PDU can fail with.

/// Errors decoding a PDU. The connection maps each to a Reject reason or a
/// connection close in one place.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PduError {
    /// The buffer holds less than the whole PDU (header, digests, padded
    /// data): this many more bytes are needed. On a stream, read more.
    #[error("need {0} more bytes")]
    Incomplete(usize),
    /// The opcode (the value) is not one of the initiator's.
    #[error("unknown or unsupported opcode {0:#04x}")]
    UnknownOpcode(u8),
    /// A reserved field or bit of the named PDU is set (the codec does not
    /// return this at present: reserved bits are not checked).
    #[error("reserved field or bit set in {0}")]
    Reserved(&'static str),
    /// The named field holds a value the codec cannot take (e.g. a digest
    /// that does not match, a data segment on a PDU that carries none).
    #[error("invalid field: {0}")]
    InvalidField(&'static str),
    /// The AHS does not parse: lengths that do not add up, an unknown or
    /// repeated AHS type, or a malformed extended CDB or bidirectional
    /// read length.
    #[error("malformed AHS")]
    BadAhs,
}
