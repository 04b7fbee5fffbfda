//! Primary commands (SPC-4 §6): TEST UNIT READY, INQUIRY, REQUEST SENSE
//! and REPORT LUNS, plus SAM-5 LUN addressing helpers. REPORT SUPPORTED
//! OPERATION CODES is generated from the command table, in `table`.

use crate::ctx::Ctx;
use crate::outcome::Outcome;
use crate::sense::{Asc, Sense, SenseFormat, SenseKey};
use crate::vpd;

/// Largest LUN this core exports: the flat space addressing method's
/// 14-bit range (SAM-5 §4.7.7).
pub const MAX_LUN: u64 = 0x3FFF;

/// Encodes a LUN as an 8-byte SAM-5 LUN (§4.7): peripheral device
/// addressing (00b) below 256, flat space addressing (01b) below 16384.
pub fn lun_to_sam(lun: u64) -> Option<[u8; 8]> {
    let mut out = [0u8; 8];
    match lun {
        0..=0xFF => out[1] = lun as u8,
        0x100..=MAX_LUN => {
            out[0] = 0x40 | (lun >> 8) as u8;
            out[1] = lun as u8;
        }
        _ => return None,
    }
    Some(out)
}

/// Decodes a single-level SAM-5 LUN in peripheral or flat space addressing;
/// other methods and multi-level LUNs give `None`.
pub fn lun_from_sam(sam: [u8; 8]) -> Option<u64> {
    if sam[2..].iter().any(|&b| b != 0) {
        return None;
    }
    match sam[0] >> 6 {
        0b00 if sam[0] == 0 => Some(u64::from(sam[1])),
        0b01 => Some((u64::from(sam[0] & 0x3F) << 8) | u64::from(sam[1])),
        _ => None,
    }
}

/// TEST UNIT READY (SPC-4 §6.47): the unit is always ready.
pub(crate) fn test_unit_ready(ctx: &Ctx<'_>) -> Result<Outcome, Sense> {
    ctx.lu()?;
    Ok(Outcome::none())
}

/// INQUIRY (SPC-4 §6.4).
pub(crate) fn inquiry(ctx: &Ctx<'_>) -> Result<Outcome, Sense> {
    let cdb = ctx.cdb;
    let evpd = cdb.bit(1, 0x01);
    let page_code = cdb.byte(2);
    let alloc_len = u64::from(cdb.be16(3));
    let data = if evpd {
        let lu = ctx.lu()?;
        vpd::page(page_code, lu, &ctx.cmd.nexus).ok_or(Sense::invalid_cdb_field(2, None))?
    } else {
        if page_code != 0 {
            return Err(Sense::invalid_cdb_field(2, None));
        }
        let tpgs = ctx
            .lu
            .map_or(vpd::TPGS_IMPLICIT, |lu| lu.alua.mode().tpgs());
        vpd::standard_inquiry(ctx.lu.map(|lu| &lu.ident), tpgs)
    };
    Ok(Outcome::alloc(data, alloc_len))
}

/// REQUEST SENSE (SPC-4 §6.29): the oldest pending unit attention (which
/// it clears), LOGICAL UNIT NOT SUPPORTED for a missing LUN, else NO SENSE.
pub(crate) fn request_sense(ctx: &Ctx<'_>) -> Result<Outcome, Sense> {
    let cdb = ctx.cdb;
    let format = if cdb.bit(1, 0x01) {
        SenseFormat::Descriptor
    } else {
        SenseFormat::Fixed
    };
    let alloc_len = u64::from(cdb.byte(4));
    let sense = match ctx.lu {
        None => Sense::illegal(Asc::LOGICAL_UNIT_NOT_SUPPORTED),
        Some(lu) => match lu.take_unit_attention(ctx.nexus_id()) {
            Some(asc) => Sense::unit_attention(asc),
            // A not-ready unit says why, with progress (SPC-4 §5.11).
            None => lu
                .sanitizer
                .pending_sense()
                .or_else(|| lu.medium.check(0x00).err())
                .unwrap_or(Sense::new(SenseKey::NO_SENSE, Asc::NO_ADDITIONAL_SENSE)),
        },
    };
    Ok(Outcome::alloc(sense.encode(format), alloc_len))
}

/// REPORT LUNS (SPC-4 §6.33). Answered on LUN 0 even when LUN 0 is not
/// exported; an empty target reports LUN 0 so initiators have something to
/// probe (it answers INQUIRY with peripheral qualifier 011b).
pub(crate) fn report_luns(ctx: &Ctx<'_>) -> Result<Outcome, Sense> {
    if ctx.lu.is_none() && ctx.cmd.lun != 0 && ctx.cmd.lun != crate::UNMAPPED_LUN0 {
        return Err(Sense::illegal(Asc::LOGICAL_UNIT_NOT_SUPPORTED));
    }
    let cdb = ctx.cdb;
    let alloc_len = u64::from(cdb.be32(6));
    let luns = match cdb.byte(2) {
        // 00h: all logical units but well-known ones; 02h: all. We have no
        // well-known logical units, so 01h (well-known only) is empty.
        0x00 | 0x02 => {
            let mut luns = ctx.target.lun_list();
            if let Some(map) = &ctx.cmd.nexus.lun_map {
                luns = map.visible(&luns);
            }
            if luns.is_empty() {
                vec![0]
            } else {
                luns
            }
        }
        0x01 => Vec::new(),
        _ => return Err(Sense::invalid_cdb_field(2, None)),
    };
    let encoded: Vec<[u8; 8]> = luns.into_iter().filter_map(lun_to_sam).collect();
    let list_len = u32::try_from(encoded.len() * 8).unwrap_or(u32::MAX);
    let mut data = Vec::with_capacity(8 + encoded.len() * 8);
    data.extend_from_slice(&list_len.to_be_bytes());
    data.extend_from_slice(&[0; 4]);
    for lun in encoded {
        data.extend_from_slice(&lun);
    }
    Ok(Outcome::alloc(data, alloc_len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lun_addressing_round_trips() {
        assert_eq!(lun_to_sam(0), Some([0; 8]));
        assert_eq!(lun_to_sam(255), Some([0, 0xFF, 0, 0, 0, 0, 0, 0]));
        assert_eq!(lun_to_sam(256), Some([0x41, 0x00, 0, 0, 0, 0, 0, 0]));
        assert_eq!(lun_to_sam(0x3FFF), Some([0x7F, 0xFF, 0, 0, 0, 0, 0, 0]));
        assert_eq!(lun_to_sam(0x4000), None);
        for lun in [0, 1, 255, 256, 4000, 0x3FFF] {
            assert_eq!(lun_to_sam(lun).and_then(lun_from_sam), Some(lun));
        }
        // Flat space can also express small LUNs.
        assert_eq!(lun_from_sam([0x40, 0x05, 0, 0, 0, 0, 0, 0]), Some(5));
        // Peripheral method with a bus id, logical unit method, multi-level.
        assert_eq!(lun_from_sam([0x01, 0x05, 0, 0, 0, 0, 0, 0]), None);
        assert_eq!(lun_from_sam([0x80, 0x05, 0, 0, 0, 0, 0, 0]), None);
        assert_eq!(lun_from_sam([0x00, 0x05, 0, 1, 0, 0, 0, 0]), None);
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn lun_encoding_round_trips(lun in 0u64..=MAX_LUN) {
                prop_assert_eq!(lun_to_sam(lun).and_then(lun_from_sam), Some(lun));
            }

            #[test]
            fn lun_decoding_is_total_and_consistent(sam: [u8; 8]) {
                if let Some(lun) = lun_from_sam(sam) {
                    prop_assert!(lun <= MAX_LUN);
                }
            }
        }
    }
}
