//! What a command handler receives: the command, its CDB, the addressed
//! logical unit and the target's shared state. Below every handler and
//! above the LU and target state it points to.

use crate::cdb::Cdb;
use crate::cmd::Command;
use crate::lun::LogicalUnit;
use crate::sense::{Asc, Sense};
use crate::target_state::TargetShared;
use rustgt_backstore::StreamHint;

/// Everything a handler may look at.
#[derive(Debug)]
pub(crate) struct Ctx<'a> {
    pub cmd: &'a Command,
    pub cdb: Cdb<'a>,
    /// The addressed logical unit; `None` only for `table::NO_LU` commands.
    pub lu: Option<&'a LogicalUnit>,
    pub target: &'a TargetShared,
    /// What the store is told about this command's reads (the worker
    /// serving it).
    pub hint: StreamHint,
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
