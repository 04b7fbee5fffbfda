//! Command execution: routing through the table, generic CDB checks, unit
//! attention reporting, then the handler; its outcome becomes a
//! [`Response`] in [`crate::outcome`]. Above every handler: no handler
//! imports this module.
//!
//! Order of checks for one command (SAM-5 §5.14, SPC-4 §5.14):
//! 1. a missing LUN answers only INQUIRY, REQUEST SENSE and REPORT LUNS;
//! 2. a pending unit attention is reported to any other command (even an
//!    unknown opcode), oldest first;
//! 3. unknown opcode / service action;
//! 4. CDB length and reserved bits against the table's usage data;
//!    then the access state of the nexus's target port group (`alua`:
//!    standby and unavailable take only a few commands);
//! 5. reservation conflicts (`pr`), answered with RESERVATION CONFLICT;
//! 6. readiness: a sanitize in progress or failed, an ejected medium;
//! 7. write protection for commands that modify the medium;
//! 8. the handler.

use crate::cdb::{check_usage, Cdb};
use crate::cmd::{Command, Response, Status};
use crate::ctx::Ctx;
use crate::lun::LogicalUnit;
use crate::outcome::{check_condition, good, DataDir, Outcome};
use crate::pr_cmd;
use crate::sense::{Asc, Sense, SenseFormat, SenseKey};
use crate::table::{self, Lookup};
use crate::target_state::TargetShared;
use rustgt_backstore::StreamHint;

/// Executes one command and builds its response. `lu` is `None` when the
/// addressed LUN does not exist.
pub(crate) fn execute(
    cmd: &Command,
    lu: Option<&LogicalUnit>,
    target: &TargetShared,
    hint: StreamHint,
) -> Response {
    let format = lu.map_or(SenseFormat::Fixed, LogicalUnit::sense_format);
    match run(cmd, lu, target, hint) {
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
    hint: StreamHint,
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
        hint,
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
        // Access state of the port group the command came through (SPC-4
        // §5.16.2.4): standby and unavailable take only a few commands.
        lu.alua.check(cmd.nexus.port_group, &cmd.cdb, || {
            lu.backstore.shared_state().is_some_and(|sh| sh.owns())
        })?;
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
            if lu.geometry().read_only || cmd.nexus.maps_read_only(lu.lun) {
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
