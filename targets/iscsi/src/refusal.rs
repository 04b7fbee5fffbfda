//! Why a PDU is refused in full feature phase, by cause, and the one
//! mapping from that cause to what goes on the wire: the Reject reason
//! code (RFC 7143 §11.17.1). The sites that find a bad PDU name the cause;
//! only [`PduRefusal::reason`] picks the code.

use crate::pdu::{PduError, RejectReason};

/// Why a PDU (header, or header and data) is refused with a Reject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PduRefusal {
    /// DataSegmentLength over the negotiated MaxRecvDataSegmentLength.
    DataSegmentTooLong,
    /// The header names an opcode the target does not know.
    UnknownOpcode,
    /// The header (its AHS) is shorter than it says.
    IncompleteHeader,
    /// A reserved or invalid header field, or a malformed AHS.
    InvalidField,
    /// A Login request in full feature phase.
    LoginInFullFeature,
    /// A SCSI command or task-management request in a discovery session.
    NotInDiscovery,
    /// Immediate data that is not allowed, or over FirstBurstLength or
    /// the expected data transfer length.
    ImmediateDataRefused,
    /// A SNACK: ERL 0 offers none.
    SnackNotSupported,
    /// A NOP-Out that wants no answer but carries data.
    NopWithData,
    /// A new request after a Logout request.
    WaitingForLogout,
    /// An immediate SCSI command while [`crate::conn::MAX_IMMEDIATE_COMMANDS`]
    /// of the connection's are still in flight.
    TooManyImmediate,
    /// The data digest does not match.
    DataDigest,
    /// A Text request continuing no response of ours.
    TextContinuation,
    /// Text request data too long or malformed.
    TextMalformed,
    /// An iSER message whose length disagrees with its PDU.
    IserLength,
    /// A request with no handler in full feature phase (the header checks
    /// refuse these first).
    Unhandled,
}

impl PduRefusal {
    /// The refusal of a header that does not parse.
    pub(crate) fn of_pdu_error(e: &PduError) -> PduRefusal {
        match e {
            PduError::UnknownOpcode(_) => PduRefusal::UnknownOpcode,
            PduError::Incomplete(_) => PduRefusal::IncompleteHeader,
            _ => PduRefusal::InvalidField,
        }
    }

    /// The Reject reason code that goes on the wire.
    pub(crate) fn reason(self) -> RejectReason {
        match self {
            PduRefusal::UnknownOpcode | PduRefusal::SnackNotSupported => {
                RejectReason::COMMAND_NOT_SUPPORTED
            }
            PduRefusal::InvalidField => RejectReason::INVALID_PDU_FIELD,
            PduRefusal::WaitingForLogout => RejectReason::WAITING_FOR_LOGOUT,
            PduRefusal::TooManyImmediate => RejectReason::IMMEDIATE_COMMAND_REJECT,
            PduRefusal::DataDigest => RejectReason::DATA_DIGEST_ERROR,
            PduRefusal::DataSegmentTooLong
            | PduRefusal::IncompleteHeader
            | PduRefusal::LoginInFullFeature
            | PduRefusal::NotInDiscovery
            | PduRefusal::ImmediateDataRefused
            | PduRefusal::NopWithData
            | PduRefusal::TextContinuation
            | PduRefusal::TextMalformed
            | PduRefusal::IserLength
            | PduRefusal::Unhandled => RejectReason::PROTOCOL_ERROR,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_those_of_rfc_7143() {
        assert_eq!(
            PduRefusal::of_pdu_error(&PduError::UnknownOpcode(0x3f)).reason(),
            RejectReason::COMMAND_NOT_SUPPORTED
        );
        assert_eq!(
            PduRefusal::of_pdu_error(&PduError::Incomplete(4)).reason(),
            RejectReason::PROTOCOL_ERROR
        );
        assert_eq!(
            PduRefusal::of_pdu_error(&PduError::BadAhs).reason(),
            RejectReason::INVALID_PDU_FIELD
        );
        assert_eq!(
            PduRefusal::SnackNotSupported.reason(),
            RejectReason::COMMAND_NOT_SUPPORTED
        );
        assert_eq!(
            PduRefusal::WaitingForLogout.reason(),
            RejectReason::WAITING_FOR_LOGOUT
        );
        assert_eq!(
            PduRefusal::DataDigest.reason(),
            RejectReason::DATA_DIGEST_ERROR
        );
        assert_eq!(
            PduRefusal::DataSegmentTooLong.reason(),
            RejectReason::PROTOCOL_ERROR
        );
    }
}
