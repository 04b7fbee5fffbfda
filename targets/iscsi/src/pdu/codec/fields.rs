//! Small helpers the PDU encoders and decoders share: flag bits, a fresh
//! BHS, the login stage byte, the ISID, the SN triple of target PDUs.

use crate::pdu::bhs::{self, Bhs, BHS_LEN};
use crate::pdu::codes::{Opcode, Stage};
use crate::pdu::error::PduError;

pub(super) type BhsRef<'a> = Bhs<&'a [u8; BHS_LEN]>;

pub(super) fn flag(flags: u8, bit: u8) -> bool {
    flags & bit != 0
}

pub(super) fn bit_if(set: bool, bit: u8) -> u8 {
    if set {
        bit
    } else {
        0
    }
}

/// A BHS with byte 0 filled in.
pub(super) fn new_bhs(opcode: Opcode, immediate: bool, flags: u8) -> Bhs<[u8; BHS_LEN]> {
    let mut b = Bhs::zeroed();
    b.set_opcode(opcode, immediate);
    b.set_flags(flags);
    b
}

/// Byte 1 of Login Request/Response: T, C, CSG, NSG (§11.12.1-3).
pub(super) fn login_flags(transit: bool, cont: bool, csg: Stage, nsg: Stage) -> u8 {
    use bhs::login::*;
    bit_if(transit, TRANSIT_BIT)
        | bit_if(cont, CONTINUE_BIT)
        | ((csg.0 & STAGE_MASK) << CSG_SHIFT)
        | (nsg.0 & STAGE_MASK)
}

pub(super) fn login_stages(flags: u8) -> (Stage, Stage) {
    use bhs::login::*;
    (
        Stage((flags >> CSG_SHIFT) & STAGE_MASK),
        Stage(flags & STAGE_MASK),
    )
}

pub(super) fn isid(b: &BhsRef<'_>) -> [u8; 6] {
    b.bytes_at(bhs::login::ISID).try_into().unwrap_or([0; 6])
}

pub(super) const EMPTY: &[u8] = &[];

/// StatSN, ExpCmdSN, MaxCmdSN at bytes 24..36 of every target PDU.
pub(super) fn write_sns(
    b: &mut Bhs<[u8; BHS_LEN]>,
    stat_sn: u32,
    exp_cmd_sn: u32,
    max_cmd_sn: u32,
) {
    b.set_u32(bhs::STAT_SN, stat_sn);
    b.set_u32(bhs::EXP_CMD_SN, exp_cmd_sn);
    b.set_u32(bhs::MAX_CMD_SN, max_cmd_sn);
}

pub(super) fn no_data(data: &[u8]) -> Result<(), PduError> {
    if data.is_empty() {
        Ok(())
    } else {
        Err(PduError::InvalidField("DataSegmentLength"))
    }
}
