//! What a command handler returns ([`Outcome`]) and how an outcome, a
//! sense or a task management decision becomes the front end's
//! [`Response`], with SAM-5 residuals.
//!
//! Residuals are reported for GOOD status only; a CHECK CONDITION carries
//! no data and no residual.

use crate::cmd::{Command, IoBuf, Residual, Response, Status};
use crate::sense::{Sense, SenseFormat};

/// Direction of the data phase, for residual accounting (SAM-5 §5.4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DataDir {
    None,
    In,
    Out,
}

/// What a successful handler produced.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    /// Data-In (may be longer than the initiator's buffer; it is cut here).
    pub data_in: IoBuf,
    /// Bytes the command wanted to transfer in its data direction.
    pub xfer_len: u64,
    /// A status other than GOOD that carries no sense data (RESERVATION
    /// CONFLICT); such a response transfers nothing.
    pub status: Status,
}

impl Outcome {
    /// No data phase.
    pub(crate) fn none() -> Outcome {
        Outcome::default()
    }

    /// Parameter data limited by an ALLOCATION LENGTH (SPC-4 §4.2.5.6): the
    /// command transfers `min(alloc_len, data.len())` bytes.
    pub(crate) fn alloc(mut data: Vec<u8>, alloc_len: u64) -> Outcome {
        if let Ok(alloc) = usize::try_from(alloc_len) {
            data.truncate(alloc);
        }
        let xfer_len = data.len() as u64;
        Outcome {
            data_in: data.into(),
            xfer_len,
            status: Status::GOOD,
        }
    }

    /// Medium data: `xfer_len` is what the CDB asked for, `data` may hold
    /// only the part that fits the initiator's buffer.
    pub(crate) fn read(data: IoBuf, xfer_len: u64) -> Outcome {
        Outcome {
            data_in: data,
            xfer_len,
            status: Status::GOOD,
        }
    }

    /// Data-Out of `xfer_len` bytes expected by the CDB.
    pub(crate) fn data_out(xfer_len: u64) -> Outcome {
        Outcome {
            data_in: IoBuf::default(),
            xfer_len,
            status: Status::GOOD,
        }
    }

    /// A status without sense data and without data (RESERVATION CONFLICT).
    pub(crate) fn status(status: Status) -> Outcome {
        Outcome {
            status,
            ..Outcome::default()
        }
    }
}

/// Residual of a buffer of `buffer` bytes for a command that wanted `wanted`.
pub(crate) fn residual(buffer: u64, wanted: u64) -> Residual {
    let clamp = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
    match wanted.cmp(&buffer) {
        std::cmp::Ordering::Greater => Residual::Overflow(clamp(wanted - buffer)),
        std::cmp::Ordering::Less => Residual::Underflow(clamp(buffer - wanted)),
        std::cmp::Ordering::Equal => Residual::None,
    }
}

/// GOOD status: cut Data-In to the initiator's buffer and account residuals
/// in the command's data direction (SAM-5 §5.4.3).
pub(crate) fn good(cmd: &Command, dir: DataDir, outcome: Outcome) -> Response {
    if outcome.status != Status::GOOD {
        return status_only(cmd.tag, outcome.status);
    }
    let mut data_in = outcome.data_in;
    let residual = match dir {
        DataDir::In => {
            let buffer = u64::from(cmd.data_in_len);
            if let Ok(limit) = usize::try_from(buffer) {
                data_in.truncate(limit);
            }
            residual(buffer, outcome.xfer_len)
        }
        DataDir::Out => {
            data_in.clear();
            residual(cmd.data_out.len() as u64, outcome.xfer_len)
        }
        DataDir::None => {
            data_in.clear();
            let buffer = u64::from(cmd.data_in_len).max(cmd.data_out.len() as u64);
            residual(buffer, 0)
        }
    };
    Response {
        tag: cmd.tag,
        status: Status::GOOD,
        sense: Vec::new(),
        data_in,
        residual,
        aborted: false,
    }
}

/// CHECK CONDITION with sense data; no data is transferred.
pub(crate) fn check_condition(tag: u64, sense: &Sense, format: SenseFormat) -> Response {
    Response {
        tag,
        status: Status::CHECK_CONDITION,
        sense: sense.encode(format),
        data_in: IoBuf::default(),
        residual: Residual::None,
        aborted: false,
    }
}

/// A response carrying only a status (BUSY, TASK SET FULL, ...).
pub(crate) fn status_only(tag: u64, status: Status) -> Response {
    Response {
        tag,
        status,
        ..Response::default()
    }
}

/// The completion for a task aborted by task management (SAM-5 §7.2, TAS=0).
pub(crate) fn aborted(tag: u64) -> Response {
    Response {
        tag,
        status: Status::TASK_ABORTED,
        aborted: true,
        ..Response::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn residual_directions() {
        assert_eq!(residual(512, 512), Residual::None);
        assert_eq!(residual(10000, 512), Residual::Underflow(9488));
        assert_eq!(residual(200, 512), Residual::Overflow(312));
        assert_eq!(residual(0, 1 << 40), Residual::Overflow(u32::MAX));
    }

    #[test]
    fn alloc_outcome_truncates() {
        let o = Outcome::alloc(vec![1; 96], 36);
        assert_eq!((o.data_in.len(), o.xfer_len), (36, 36));
        let o = Outcome::alloc(vec![1; 96], 255);
        assert_eq!((o.data_in.len(), o.xfer_len), (96, 96));
    }
}
