//! Command execution: routing through the table, generic CDB checks, unit
//! attention reporting, and turning a handler's outcome into a [`Response`]
//! with SAM-5 residuals.
//!
//! Order of checks for one command (SAM-5 §5.14, SPC-4 §5.14):
//! 1. a missing LUN answers only INQUIRY, REQUEST SENSE and REPORT LUNS;
//! 2. a pending unit attention is reported to any other command (even an
//!    unknown opcode), oldest first;
//! 3. unknown opcode / service action;
//! 4. CDB length and reserved bits against the table's usage data;
//! 5. reservation conflicts (`pr`), answered with RESERVATION CONFLICT;
//! 6. readiness: a sanitize in progress or failed, an ejected medium;
//! 7. write protection for commands that modify the medium;
//! 8. the handler.
//!
//! Residuals are reported for GOOD status only; a CHECK CONDITION carries
//! no data and no residual.

use crate::cdb::{check_usage, Cdb};
use crate::cmd::{Command, IoBuf, Residual, Response, Status};
use crate::lun::LogicalUnit;
use crate::pr_cmd;
use crate::sense::{Asc, Sense, SenseFormat, SenseKey};
use crate::table::{self, DataDir, Lookup};
use crate::target::TargetShared;

/// Everything a handler may look at.
#[derive(Debug)]
pub(crate) struct Ctx<'a> {
    pub cmd: &'a Command,
    pub cdb: Cdb<'a>,
    /// The addressed logical unit; `None` only for [`table::NO_LU`] commands.
    pub lu: Option<&'a LogicalUnit>,
    pub target: &'a TargetShared,
}

impl<'a> Ctx<'a> {
    /// The addressed logical unit, or LOGICAL UNIT NOT SUPPORTED.
    pub(crate) fn lu(&self) -> Result<&'a LogicalUnit, Sense> {
        self.lu
            .ok_or(Sense::illegal(Asc::LOGICAL_UNIT_NOT_SUPPORTED))
    }

    pub(crate) fn nexus_id(&self) -> u64 {
        self.cmd.nexus.id
    }
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

/// Executes one command and builds its response. `lu` is `None` when the
/// addressed LUN does not exist.
pub(crate) fn execute(cmd: &Command, lu: Option<&LogicalUnit>, target: &TargetShared) -> Response {
    let format = lu.map_or(SenseFormat::Fixed, LogicalUnit::sense_format);
    match run(cmd, lu, target) {
        Ok((dir, outcome)) => good(cmd, dir, outcome),
        Err(sense) => check_condition(cmd.tag, &sense, format),
    }
}

/// What the generic checks decided.
pub(crate) enum Admit {
    /// Run the command's handler.
    Run(&'static table::CmdDesc),
    /// The command ends here with this outcome (RESERVATION CONFLICT).
    Done(DataDir, Outcome),
}

fn run(
    cmd: &Command,
    lu: Option<&LogicalUnit>,
    target: &TargetShared,
) -> Result<(DataDir, Outcome), Sense> {
    let desc = match admit(cmd, lu)? {
        Admit::Run(desc) => desc,
        Admit::Done(dir, outcome) => return Ok((dir, outcome)),
    };
    let ctx = Ctx {
        cmd,
        cdb: Cdb::new(&cmd.cdb),
        lu,
        target,
    };
    tracing::trace!(command = desc.name, lun = cmd.lun, tag = cmd.tag, "execute");
    let outcome = (desc.handler)(&ctx).inspect_err(|sense| {
        tracing::debug!(
            command = desc.name,
            lun = cmd.lun,
            tag = cmd.tag,
            ?sense,
            "check condition"
        );
    })?;
    Ok((desc.dir, outcome))
}

/// Steps 1 to 7 of the order above, for every path that runs commands
/// (the handlers, and the io_uring path's own start of READ, WRITE and
/// SYNCHRONIZE CACHE). Reporting a unit attention consumes it.
pub(crate) fn admit(cmd: &Command, lu: Option<&LogicalUnit>) -> Result<Admit, Sense> {
    let found = table::lookup(&cmd.cdb);
    let desc = match (found, lu) {
        (Lookup::Found(desc), None) if desc.has(table::NO_LU) => desc,
        (_, None) => return Err(Sense::illegal(Asc::LOGICAL_UNIT_NOT_SUPPORTED)),
        (found, Some(lu)) => {
            let exempt = matches!(found, Lookup::Found(d) if d.has(table::UA_EXEMPT));
            if !exempt {
                if let Some(asc) = lu.take_unit_attention(cmd.nexus.id) {
                    return Err(Sense::unit_attention(asc));
                }
            }
            match found {
                Lookup::Found(desc) => desc,
                Lookup::UnknownOpcode => {
                    return Err(Sense::illegal(Asc::INVALID_COMMAND_OPERATION_CODE))
                }
                Lookup::UnknownServiceAction => return Err(Sense::invalid_cdb_field(1, Some(4))),
            }
        }
    };
    check_usage(&cmd.cdb, desc.usage, desc.sa_mask())?;
    if let Some(lu) = lu {
        // Reservations (SPC-4 §5.13.1): after unit attentions and CDB
        // checks, before the medium is looked at.
        if lu.pr.conflicts(&cmd.nexus, pr_cmd::access(&cmd.cdb)) {
            return Ok(Admit::Done(
                desc.dir,
                Outcome::status(Status::RESERVATION_CONFLICT),
            ));
        }
        // A running or failed sanitize, or a missing medium (SBC-3 §4.11,
        // §4.17), before anything touches the medium.
        lu.sanitizer.check(desc.opcode)?;
        lu.medium.check(desc.opcode)?;
        if desc.has(table::MEDIUM_WRITE) {
            if lu.geometry().read_only {
                return Err(Sense::new(SenseKey::DATA_PROTECT, Asc::WRITE_PROTECTED));
            }
            if lu.mode().swp {
                return Err(Sense::new(
                    SenseKey::DATA_PROTECT,
                    Asc::SOFTWARE_WRITE_PROTECTED,
                ));
            }
        }
    }
    Ok(Admit::Run(desc))
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
