//! The SANITIZE command (SBC-3 §5.19): checks its parameters and starts
//! (and, without IMMED, waits for) the operation run by the logical
//! unit's [`Sanitizer`](crate::sanitize::Sanitizer).

// Parses what a peer sent (or a persisted file): no indexing that could
// panic (tests may index).
#![deny(clippy::indexing_slicing)]

use std::sync::Arc;

use crate::ctx::Ctx;
use crate::lun::LogicalUnit;
use crate::outcome::Outcome;
use crate::sanitize::{
    overwrite_block, Job, SA_BLOCK_ERASE, SA_CRYPTO_ERASE, SA_EXIT_FAILURE_MODE, SA_OVERWRITE,
};
use crate::sense::{Asc, Sense};
use crate::task_set::TaskKey;

/// Whether BLOCK ERASE and CRYPTOGRAPHIC ERASE are offered: the unit
/// deallocates, i.e. it reports logical block provisioning (LBPME=1).
pub(crate) fn erase_supported(lu: &LogicalUnit) -> bool {
    crate::limits::lbp_enabled(lu)
}

/// SANITIZE (SBC-3 §5.19).
pub(crate) fn sanitize(ctx: &Ctx<'_>) -> Result<Outcome, Sense> {
    let lu = ctx.lu()?;
    let cdb = ctx.cdb;
    let immed = cdb.bit(1, 0x80);
    let ause = cdb.bit(1, 0x20);
    let sa = cdb.byte(1) & 0x1F;
    let param_len = usize::from(cdb.be16(7));
    let geometry = lu.geometry();
    let block_size = usize::try_from(geometry.block_size).unwrap_or(usize::MAX);
    let job = match sa {
        SA_OVERWRITE => {
            if param_len < 5 || param_len > block_size.saturating_add(4) {
                return Err(Sense::invalid_cdb_field(7, None));
            }
            let data = ctx
                .cmd
                .data_out
                .get(..param_len)
                .ok_or(Sense::illegal(Asc::PARAMETER_LIST_LENGTH_ERROR))?;
            Job::Overwrite(overwrite_block(data, block_size)?)
        }
        SA_BLOCK_ERASE | SA_CRYPTO_ERASE | SA_EXIT_FAILURE_MODE if param_len != 0 => {
            return Err(Sense::invalid_cdb_field(7, None));
        }
        SA_BLOCK_ERASE | SA_CRYPTO_ERASE if erase_supported(lu) => Job::Deallocate,
        SA_EXIT_FAILURE_MODE => {
            lu.sanitizer.exit_failure_mode()?;
            return Ok(Outcome::data_out(0));
        }
        _ => return Err(Sense::invalid_cdb_field(1, Some(4))),
    };
    let number = lu
        .sanitizer
        .start(job, Arc::clone(&lu.backstore), geometry.size_bytes(), ause)?;
    tracing::info!(lun = lu.lun, service_action = sa, immed, "sanitize started");
    if !immed {
        let key = TaskKey {
            nexus: ctx.nexus_id(),
            tag: ctx.cmd.tag,
        };
        lu.sanitizer.wait(number, || lu.task_aborted(key))?;
    }
    Ok(Outcome::data_out(param_len as u64))
}
