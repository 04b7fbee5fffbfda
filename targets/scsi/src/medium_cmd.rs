//! START STOP UNIT (SBC-3 §5.25) and PREVENT ALLOW MEDIUM REMOVAL (SBC-3
//! §5.14): the commands acting on a logical unit's
//! [`Medium`](crate::medium::Medium) state.

use crate::ctx::Ctx;
use crate::outcome::Outcome;
use crate::sense::Sense;

/// POWER CONDITION values of SBC-3 table 79: START_VALID, ACTIVE, IDLE,
/// STANDBY, LU_CONTROL, FORCE_IDLE_0 and FORCE_STANDBY_0.
fn defined_power_condition(pc: u8) -> bool {
    matches!(pc, 0x0 | 0x1 | 0x2 | 0x3 | 0x7 | 0xA | 0xB)
}

/// START STOP UNIT (SBC-3 §5.25). The medium never stops spinning, so a
/// stop only flushes the cache (unless NO_FLUSH); LOEJ ejects or loads a
/// removable medium. A non-zero POWER CONDITION makes START and LOEJ
/// ignored (SBC-3 table 79) and has no effect on a virtual disk. A fixed
/// unit refuses reserved power conditions; a removable one accepts every
/// value without ejecting, as removable media are expected to (libiscsi
/// StartStopUnit.PwrCnd). IMMED is accepted; the command always completes
/// after the operation.
pub(crate) fn start_stop_unit(ctx: &Ctx<'_>) -> Result<Outcome, Sense> {
    let lu = ctx.lu()?;
    let byte4 = ctx.cdb.byte(4);
    let power_condition = byte4 >> 4;
    let no_flush = byte4 & 0x04 != 0;
    let loej = byte4 & 0x02 != 0;
    let start = byte4 & 0x01 != 0;
    if !lu.medium.removable() && !defined_power_condition(power_condition) {
        return Err(Sense::invalid_cdb_field(4, Some(7)));
    }
    if power_condition != 0 {
        return Ok(Outcome::none());
    }
    if loej && !lu.medium.removable() {
        return Err(Sense::invalid_cdb_field(4, Some(1)));
    }
    let present = lu.medium.present();
    if !start && !no_flush && present {
        lu.backstore.flush()?;
    }
    if loej {
        lu.medium.load_eject(start)?;
    }
    Ok(Outcome::none())
}

/// PREVENT ALLOW MEDIUM REMOVAL (SBC-3 §5.14): PREVENT 00b allows, 01b
/// prevents removal for the issuing nexus; 1xb is for medium changers,
/// which this unit is not. A fixed medium accepts and ignores it.
pub(crate) fn prevent_allow_medium_removal(ctx: &Ctx<'_>) -> Result<Outcome, Sense> {
    let lu = ctx.lu()?;
    let prevent = match ctx.cdb.byte(4) & 0x03 {
        0b00 => false,
        0b01 => true,
        _ => return Err(Sense::invalid_cdb_field(4, Some(1))),
    };
    if lu.medium.removable() {
        lu.medium.set_prevent(ctx.nexus_id(), prevent);
    }
    Ok(Outcome::none())
}
