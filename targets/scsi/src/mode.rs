//! MODE SENSE(6/10) and MODE SELECT(6/10) (SPC-4 §6.9-6.12) with the
//! caching (SBC-3 §6.4.5), control (SPC-4 §7.5.8) and informational
//! exceptions control (SPC-4 §7.5.11) pages.
//!
//! Only WCE (caching page), D_SENSE and SWP (control page) are changeable;
//! the values are per logical unit, not saved (PC=saved and SP=1 are refused),
//! and return to their defaults on a logical unit reset.

use crate::cdb::Cdb;
use crate::ctx::Ctx;
use crate::lun::{LogicalUnit, ModeState};
use crate::outcome::Outcome;
use crate::sense::{Asc, Sense};

pub(crate) const PAGE_CACHING: u8 = 0x08;
pub(crate) const PAGE_CONTROL: u8 = 0x0A;
pub(crate) const PAGE_INFO_EXCEPTIONS: u8 = 0x1C;
pub(crate) const PAGE_ALL: u8 = 0x3F;

/// Pages in the order "all pages" returns them (ascending page code).
const PAGES: [u8; 3] = [PAGE_CACHING, PAGE_CONTROL, PAGE_INFO_EXCEPTIONS];

/// Mode parameter header device-specific parameter for direct-access
/// devices (SBC-3 §6.4.1): WP and DPOFUA.
const DSP_WP: u8 = 0x80;
const DSP_DPOFUA: u8 = 0x10;

/// What a page should show: parameter values, or the changeable mask.
#[derive(Debug, Clone, Copy)]
enum View {
    Values(ModeState),
    Changeable,
}

/// Builds one mode page, `None` if the page code is not supported.
fn page(code: u8, view: View) -> Option<Vec<u8>> {
    let bit = |flag: bool, mask: u8| if flag { mask } else { 0 };
    match code {
        PAGE_CACHING => {
            // SBC-3 table 170; byte 2: WCE is bit 2, RCD (bit 0) clear.
            let mut p = vec![0u8; 20];
            p[0] = PAGE_CACHING;
            p[1] = 0x12;
            p[2] = match view {
                View::Values(m) => bit(m.write_cache, 0x04),
                View::Changeable => 0x04,
            };
            Some(p)
        }
        PAGE_CONTROL => {
            // SPC-4 table 427.
            let mut p = vec![0u8; 12];
            p[0] = PAGE_CONTROL;
            p[1] = 0x0A;
            match view {
                View::Values(m) => {
                    // TST=000b (one task set), D_SENSE bit 2, GLTSD bit 1
                    // (no log parameters are saved).
                    p[2] = bit(m.d_sense, 0x04) | 0x02;
                    // QUEUE ALGORITHM MODIFIER=1: simple tasks may be
                    // reordered; QERR=00b.
                    p[3] = 0x10;
                    // TAS=0, UA_INTLCK_CTRL=00b; SWP is bit 3 of byte 4.
                    p[4] = bit(m.swp, 0x08);
                    // BUSY TIMEOUT PERIOD: unlimited.
                    p[8] = 0xFF;
                    p[9] = 0xFF;
                }
                View::Changeable => {
                    p[2] = 0x04;
                    p[4] = 0x08;
                }
            }
            Some(p)
        }
        PAGE_INFO_EXCEPTIONS => {
            // SPC-4 table 434: DEXCPT set, no exceptions are ever reported.
            let mut p = vec![0u8; 12];
            p[0] = PAGE_INFO_EXCEPTIONS;
            p[1] = 0x0A;
            if let View::Values(_) = view {
                p[2] = 0x08;
            }
            Some(p)
        }
        _ => None,
    }
}

/// MODE SENSE(6) / MODE SENSE(10).
pub(crate) fn mode_sense(ctx: &Ctx<'_>) -> Result<Outcome, Sense> {
    let lu = ctx.lu()?;
    let cdb = ctx.cdb;
    let ten = cdb.opcode() == 0x5A;
    let dbd = cdb.bit(1, 0x08);
    let llbaa = ten && cdb.bit(1, 0x10);
    let pc = cdb.byte(2) >> 6;
    let code = cdb.byte(2) & 0x3F;
    let subpage = cdb.byte(3);
    let alloc_len = if ten {
        u64::from(cdb.be16(7))
    } else {
        u64::from(cdb.byte(4))
    };

    let view = match pc {
        0 => View::Values(lu.mode()),
        1 => View::Changeable,
        2 => View::Values(lu.mode_defaults()),
        _ => return Err(Sense::illegal(Asc::SAVING_PARAMETERS_NOT_SUPPORTED)),
    };
    let pages = select_pages(code, subpage, view)?;
    let block_desc = if dbd {
        Vec::new()
    } else {
        block_descriptor(lu, llbaa, matches!(view, View::Changeable))
    };
    let dsp = if lu.write_protected() || ctx.cmd.nexus.maps_read_only(lu.lun) {
        DSP_WP
    } else {
        0
    } | DSP_DPOFUA;
    let data = assemble(ten, dsp, llbaa && !dbd, &block_desc, &pages);
    Ok(Outcome::alloc(data, alloc_len))
}

/// Pages for a PAGE CODE / SUBPAGE CODE pair (SPC-4 §6.11.1).
fn select_pages(code: u8, subpage: u8, view: View) -> Result<Vec<u8>, Sense> {
    let mut out = Vec::new();
    if code == PAGE_ALL {
        // 3Fh/00h: all pages; 3Fh/FFh: all pages and subpages (we have none).
        if subpage != 0x00 && subpage != 0xFF {
            return Err(Sense::invalid_cdb_field(3, None));
        }
        for code in PAGES {
            out.extend(page(code, view).unwrap_or_default());
        }
        return Ok(out);
    }
    let Some(p) = page(code, view) else {
        return Err(Sense::invalid_cdb_field(2, Some(5)));
    };
    if subpage != 0 {
        return Err(Sense::invalid_cdb_field(3, None));
    }
    out.extend(p);
    Ok(out)
}

/// Short (8-byte) or long LBA (16-byte) block descriptor (SBC-3 §6.4.2).
fn block_descriptor(lu: &LogicalUnit, long: bool, changeable: bool) -> Vec<u8> {
    if changeable {
        return vec![0u8; if long { 16 } else { 8 }];
    }
    let g = lu.geometry();
    let len = g.block_size.to_be_bytes();
    if long {
        let mut d = vec![0u8; 16];
        d[..8].copy_from_slice(&g.num_blocks.to_be_bytes());
        d[12..16].copy_from_slice(&len);
        d
    } else {
        let blocks = u32::try_from(g.num_blocks).unwrap_or(u32::MAX);
        let mut d = vec![0u8; 8];
        d[..4].copy_from_slice(&blocks.to_be_bytes());
        d[5..8].copy_from_slice(&len[1..4]);
        d
    }
}

/// Mode parameter header (SPC-4 §7.5.4) + block descriptor + pages.
fn assemble(ten: bool, dsp: u8, long_lba: bool, block_desc: &[u8], pages: &[u8]) -> Vec<u8> {
    let header_len = if ten { 8 } else { 4 };
    let total = header_len + block_desc.len() + pages.len();
    let mut data = Vec::with_capacity(total);
    if ten {
        let mdl = u16::try_from(total - 2).unwrap_or(u16::MAX).to_be_bytes();
        let bdl = u16::try_from(block_desc.len()).unwrap_or(0).to_be_bytes();
        let longlba = if long_lba { 0x01 } else { 0 };
        data.extend_from_slice(&[mdl[0], mdl[1], 0, dsp, longlba, 0, bdl[0], bdl[1]]);
    } else {
        let mdl = u8::try_from(total - 1).unwrap_or(u8::MAX);
        let bdl = u8::try_from(block_desc.len()).unwrap_or(0);
        data.extend_from_slice(&[mdl, 0, dsp, bdl]);
    }
    data.extend_from_slice(block_desc);
    data.extend_from_slice(pages);
    data
}

/// MODE SELECT(6) / MODE SELECT(10): accepts WCE and D_SENSE changes.
pub(crate) fn mode_select(ctx: &Ctx<'_>) -> Result<Outcome, Sense> {
    let lu = ctx.lu()?;
    let cdb = ctx.cdb;
    let ten = cdb.opcode() == 0x55;
    let param_len = if ten {
        usize::from(cdb.be16(7))
    } else {
        usize::from(cdb.byte(4))
    };
    if cdb.bit(1, 0x01) {
        // SP: saving pages is not supported.
        return Err(Sense::invalid_cdb_field(1, Some(0)));
    }
    if param_len == 0 {
        return Ok(Outcome::data_out(0));
    }
    if !cdb.bit(1, 0x10) {
        // PF=0: vendor-specific page format, which we do not have.
        return Err(Sense::invalid_cdb_field(1, Some(4)));
    }
    let data = ctx
        .cmd
        .data_out
        .get(..param_len)
        .unwrap_or(&ctx.cmd.data_out);
    let current = lu.mode();
    let new = parse_select(data, ten, lu.geometry().block_size, current)?;
    if new != current && lu.set_mode(new) {
        if current.write_cache && !new.write_cache {
            // Write-through from now on: nothing may stay cached.
            lu.backstore.flush().map_err(Sense::from)?;
        }
        let others = ctx.target.known_nexuses();
        lu.establish_ua(others, Asc::MODE_PARAMETERS_CHANGED, Some(ctx.nexus_id()));
    }
    Ok(Outcome::data_out(param_len as u64))
}

fn param_length_error() -> Sense {
    Sense::illegal(Asc::PARAMETER_LIST_LENGTH_ERROR)
}

/// Validates a MODE SELECT parameter list and returns the resulting state;
/// nothing is applied unless the whole list is valid.
fn parse_select(
    data: &[u8],
    ten: bool,
    block_size: u32,
    current: ModeState,
) -> Result<ModeState, Sense> {
    let p = Cdb::new(data);
    let header_len = if ten { 8 } else { 4 };
    if data.len() < header_len {
        return Err(param_length_error());
    }
    let (bdl, desc_len) = if ten {
        let long = p.bit(4, 0x01);
        (usize::from(p.be16(6)), if long { 16 } else { 8 })
    } else {
        (usize::from(p.byte(3)), 8)
    };
    let bdl_at = if ten { 6 } else { 3 };
    if bdl % desc_len != 0 {
        return Err(Sense::invalid_param_field(bdl_at, None));
    }
    let pages_at = header_len + bdl;
    if data.len() < pages_at {
        return Err(param_length_error());
    }
    // Block descriptors may restate the block length but not change it.
    for desc in (header_len..pages_at).step_by(desc_len) {
        // LOGICAL BLOCK LENGTH: the last 3 (short) or 4 (long) bytes.
        let len = p.be32(desc + desc_len - 4) & if desc_len == 8 { 0x00FF_FFFF } else { u32::MAX };
        if len != block_size {
            let field_at = desc + if desc_len == 8 { 5 } else { 12 };
            return Err(Sense::invalid_param_field(field_at, None));
        }
    }
    let mut new = current;
    let mut off = pages_at;
    while off < data.len() {
        if off + 2 > data.len() {
            return Err(param_length_error());
        }
        let code = p.byte(off) & 0x3F;
        if p.bit(off, 0x40) {
            // SPF: no subpages are supported.
            return Err(Sense::invalid_param_field(off, Some(6)));
        }
        let len = usize::from(p.byte(off + 1));
        let end = off + 2 + len;
        let Some(sent) = data.get(off..end) else {
            return Err(param_length_error());
        };
        let (Some(cur), Some(mask)) = (page(code, View::Values(new)), page(code, View::Changeable))
        else {
            return Err(Sense::invalid_param_field(off, Some(5)));
        };
        if sent.len() != cur.len() {
            return Err(Sense::invalid_param_field(off + 1, None));
        }
        for (i, ((&s, &c), &m)) in sent.iter().zip(&cur).zip(&mask).enumerate().skip(2) {
            let bad = (s ^ c) & !m;
            if bad != 0 {
                return Err(Sense::invalid_param_field(
                    off + i,
                    Some(crate::cdb::top_bit(bad)),
                ));
            }
        }
        let flags = p.byte(off + 2);
        match code {
            PAGE_CACHING => new.write_cache = flags & 0x04 != 0,
            PAGE_CONTROL => {
                new.d_sense = flags & 0x04 != 0;
                new.swp = p.byte(off + 4) & 0x08 != 0;
            }
            _ => {}
        }
        off = end;
    }
    Ok(new)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CUR: ModeState = ModeState {
        write_cache: true,
        d_sense: false,
        swp: false,
    };

    #[test]
    fn page_layouts() {
        let c = page(PAGE_CACHING, View::Values(CUR)).unwrap_or_default();
        assert_eq!(c.len(), 20);
        assert_eq!(&c[..3], &[0x08, 0x12, 0x04]);
        let ctl = page(PAGE_CONTROL, View::Values(CUR)).unwrap_or_default();
        assert_eq!(
            ctl,
            vec![0x0A, 0x0A, 0x02, 0x10, 0, 0, 0, 0, 0xFF, 0xFF, 0, 0]
        );
        let ctl_mask = page(PAGE_CONTROL, View::Changeable).unwrap_or_default();
        assert_eq!(
            ctl_mask,
            vec![0x0A, 0x0A, 0x04, 0, 0x08, 0, 0, 0, 0, 0, 0, 0]
        );
        let ie = page(PAGE_INFO_EXCEPTIONS, View::Values(CUR)).unwrap_or_default();
        assert_eq!(&ie[..4], &[0x1C, 0x0A, 0x08, 0]);
        assert!(page(0x01, View::Changeable).is_none());
    }

    #[test]
    fn all_pages_and_bad_subpages() {
        let all = select_pages(PAGE_ALL, 0, View::Values(CUR)).unwrap_or_default();
        assert_eq!(all.len(), 20 + 12 + 12);
        assert_eq!((all[0], all[20], all[32]), (0x08, 0x0A, 0x1C));
        assert!(select_pages(PAGE_ALL, 0xFF, View::Changeable).is_ok());
        let e = select_pages(PAGE_CONTROL, 1, View::Changeable).expect_err("must be refused");
        assert_eq!(e.field.map(|f| f.byte), Some(3));
        let e = select_pages(0x19, 0, View::Changeable).expect_err("must be refused");
        assert_eq!(e.field.map(|f| (f.byte, f.bit)), Some((2, Some(5))));
    }

    #[test]
    fn headers_count_lengths() {
        let d6 = assemble(false, 0x90, false, &[0; 8], &[1; 12]);
        assert_eq!(&d6[..4], &[4 + 8 + 12 - 1, 0, 0x90, 8]);
        let d10 = assemble(true, 0x10, true, &[0; 16], &[1; 20]);
        assert_eq!(&d10[..8], &[0, 8 + 16 + 20 - 2, 0, 0x10, 1, 0, 0, 16]);
    }

    fn select6(pages: &[u8]) -> Vec<u8> {
        let mut d = vec![0, 0, 0, 0];
        d.extend_from_slice(pages);
        d
    }

    #[test]
    fn select_changes_wce_and_d_sense() {
        let mut caching = page(PAGE_CACHING, View::Values(CUR)).unwrap_or_default();
        caching[2] = 0;
        let mut control = page(PAGE_CONTROL, View::Values(CUR)).unwrap_or_default();
        control[2] |= 0x04;
        control[0] |= 0x80; // PS is ignored
        let mut list = caching;
        list.extend(control);
        let new = parse_select(&select6(&list), false, 512, CUR);
        assert_eq!(
            new,
            Ok(ModeState {
                write_cache: false,
                d_sense: true,
                swp: false,
            })
        );
    }

    #[test]
    fn select_rejects_unchangeable_bits_and_bad_lists() {
        let mut control = page(PAGE_CONTROL, View::Values(CUR)).unwrap_or_default();
        control[4] |= 0x10; // TAS is not changeable
        let e = parse_select(&select6(&control), false, 512, CUR).expect_err("must be refused");
        assert_eq!(e.asc, Asc::INVALID_FIELD_IN_PARAMETER_LIST);
        assert_eq!(
            e.field.map(|f| (f.in_cdb, f.byte, f.bit)),
            Some((false, 4 + 4, Some(4)))
        );

        let e = parse_select(&select6(&[0x01, 0x02, 0, 0]), false, 512, CUR)
            .expect_err("must be refused");
        assert_eq!(e.field.map(|f| f.byte), Some(4));
        let e = parse_select(&select6(&[0x0A, 0x0A, 0, 0]), false, 512, CUR)
            .expect_err("must be refused");
        assert_eq!(e.asc, Asc::PARAMETER_LIST_LENGTH_ERROR);
        let e = parse_select(&select6(&[0x0A, 0x04, 0, 0, 0, 0]), false, 512, CUR)
            .expect_err("must be refused");
        assert_eq!(e.field.map(|f| f.byte), Some(5));
        let e = parse_select(&[0, 0], false, 512, CUR).expect_err("must be refused");
        assert_eq!(e.asc, Asc::PARAMETER_LIST_LENGTH_ERROR);
    }

    #[test]
    fn select_block_descriptor_must_keep_block_size() {
        let ok = [0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0x02, 0x00];
        assert_eq!(parse_select(&ok, false, 512, CUR), Ok(CUR));
        let bad = [0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0x10, 0x00];
        let e = parse_select(&bad, false, 512, CUR).expect_err("must be refused");
        assert_eq!(e.field.map(|f| f.byte), Some(9));
        let mut ten = vec![0, 0, 0, 0, 1, 0, 0, 16];
        ten.extend_from_slice(&[0; 12]);
        ten.extend_from_slice(&4096u32.to_be_bytes());
        assert_eq!(parse_select(&ten, true, 4096, CUR), Ok(CUR));
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn parse_select_never_panics(data in proptest::collection::vec(any::<u8>(), 0..96), ten: bool) {
                let _ = parse_select(&data, ten, 512, CUR);
            }

            #[test]
            fn sensed_pages_round_trip_through_select(wce: bool, d_sense: bool, ten: bool) {
                let want = ModeState { write_cache: wce, d_sense, swp: false };
                let pages = select_pages(PAGE_ALL, 0, View::Values(want)).unwrap_or_default();
                let list = assemble(ten, 0, false, &[], &pages);
                prop_assert_eq!(parse_select(&list, ten, 512, CUR), Ok(want));
            }
        }
    }
}
