//! How the connection ends a task the SCSI core never saw: what its SCSI
//! Response needs ([`Ending`]), and the sense data of the errors the
//! transport itself raises ([`SeqError`] for a bad Data-Out sequence).
//! Plain data, no connection state.

use rustgt_scsi::sense::{Asc, Sense, SenseKey};

use crate::iser::ControlHeader;
use crate::pdu::ScsiCommand;
use crate::task::WriteTask;

/// What a SCSI Response needs to end a task the SCSI core never saw.
#[derive(Debug)]
pub(super) struct Ending {
    pub(super) itt: u32,
    pub(super) immediate: bool,
    /// R2T PDUs sent for it (part of ExpDataSN).
    pub(super) r2ts: u32,
    pub(super) remote: ControlHeader,
}

impl Ending {
    pub(super) fn of_command(c: &ScsiCommand, remote: &ControlHeader) -> Ending {
        Ending {
            itt: c.itt,
            immediate: c.immediate,
            r2ts: 0,
            remote: *remote,
        }
    }

    pub(super) fn of_write(task: &WriteTask) -> Ending {
        Ending {
            itt: task.cmd.itt,
            immediate: task.cmd.immediate,
            r2ts: task.r2t_sn,
            remote: task.remote,
        }
    }
}

/// Fixed-format sense data for the few errors the transport itself raises.
pub(super) fn fixed_sense(key: SenseKey, asc: Asc) -> Vec<u8> {
    Sense::new(key, asc).fixed()
}

/// HARDWARE ERROR / INTERNAL TARGET FAILURE, fixed format.
pub(super) fn internal_failure() -> Vec<u8> {
    fixed_sense(SenseKey::HARDWARE_ERROR, Asc::INTERNAL_TARGET_FAILURE)
}

/// How a write's Data-Out sequence went wrong. Each maps to one sense code
/// (RFC 7143 §11.4.7.2, SPC-4 Annex D), so the initiator can tell why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SeqError {
    /// Unsolicited data not allowed here (InitialR2T, FirstBurstLength, after F).
    UnexpectedUnsolicited,
    /// Target Transfer Tag of no open R2T.
    UnknownTtt,
    DataSn,
    Offset,
    TooMuch,
    /// iSER: the command advertised no buffer for data RDMA must move.
    MissingBuffer,
}

impl SeqError {
    pub(super) fn sense(self) -> Vec<u8> {
        let asc = match self {
            SeqError::UnexpectedUnsolicited => Asc::UNEXPECTED_UNSOLICITED_DATA,
            SeqError::UnknownTtt => Asc::INVALID_TARGET_PORT_TRANSFER_TAG_RECEIVED,
            SeqError::DataSn | SeqError::MissingBuffer => Asc::DATA_PHASE_ERROR,
            SeqError::Offset => Asc::DATA_OFFSET_ERROR,
            // RFC 7143 §11.4.7.2, "Incorrect amount of data".
            SeqError::TooMuch => Asc::NOT_ENOUGH_UNSOLICITED_DATA,
        };
        fixed_sense(SenseKey::ABORTED_COMMAND, asc)
    }
}
