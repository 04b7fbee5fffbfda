//! The EXTENDED COPY(LID1) parameter list (SPC-4 §6.4.3): its limits, and
//! the parser that checks the whole list (lengths, limits, descriptor
//! types) before any data moves. Parsing never panics on any input.

// Parses what a peer sent (or a persisted file): no indexing that could
// panic (tests may index).
#![deny(clippy::indexing_slicing)]

use crate::sense::{Asc, Sense};

/// Most CSCD (target) descriptors in one parameter list.
pub(crate) const MAX_CSCD_DESCRIPTORS: u16 = 16;
/// Most segment descriptors in one parameter list.
pub(crate) const MAX_SEGMENT_DESCRIPTORS: u16 = 64;
/// Most bytes of CSCD plus segment descriptors.
pub(crate) const MAX_DESCRIPTOR_LIST_LEN: u32 = 2048;
/// Most bytes one segment copies: a 16-bit block count of 4096-byte blocks.
pub(crate) const MAX_SEGMENT_LEN: u32 = 0xFFFF * 4096;
/// EXTENDED COPY commands processed at once (one per LUN worker).
pub(crate) const TOTAL_CONCURRENT_COPIES: u16 = 8;
/// Descriptor type codes (SPC-4 tables 107 and 110).
pub(crate) const SEG_BLOCK_TO_BLOCK: u8 = 0x02;
pub(crate) const CSCD_IDENTIFICATION: u8 = 0xE4;

/// Length of the parameter list header (SPC-4 table 105).
const HEADER_LEN: usize = 16;
/// Length of a CSCD descriptor; E0h..E9h and FFh are 32 bytes long,
/// EAh and EBh 64 (SPC-4 §6.4.5).
const CSCD_LEN: usize = 32;
/// DESCRIPTOR LENGTH of a block to block segment descriptor.
const B2B_DESC_LEN: u16 = 0x18;

const TOO_MANY_TARGET_DESCRIPTORS: Asc = Asc::new(0x26, 0x06);
const UNSUPPORTED_TARGET_DESCRIPTOR_TYPE_CODE: Asc = Asc::new(0x26, 0x07);
const TOO_MANY_SEGMENT_DESCRIPTORS: Asc = Asc::new(0x26, 0x08);
const UNSUPPORTED_SEGMENT_DESCRIPTOR_TYPE_CODE: Asc = Asc::new(0x26, 0x09);

pub(crate) fn length_error() -> Sense {
    Sense::illegal(Asc::PARAMETER_LIST_LENGTH_ERROR)
}

pub(crate) fn be16(data: &[u8], at: usize) -> u16 {
    let mut b = [0u8; 2];
    for (i, x) in b.iter_mut().enumerate() {
        *x = data.get(at + i).copied().unwrap_or(0);
    }
    u16::from_be_bytes(b)
}

pub(crate) fn be32(data: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    for (i, x) in b.iter_mut().enumerate() {
        *x = data.get(at + i).copied().unwrap_or(0);
    }
    u32::from_be_bytes(b)
}

pub(crate) fn be64(data: &[u8], at: usize) -> u64 {
    (u64::from(be32(data, at)) << 32) | u64::from(be32(data, at + 4))
}

/// LIST ID USAGE field (SPC-4 table 106).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListIdUsage {
    /// 00b: hold the copy status for RECEIVE COPY RESULTS.
    Hold,
    /// 10b: the list identifier is unique but nothing is held.
    Discard,
    /// 11b: no list identifier.
    None,
}

/// An identification CSCD descriptor (SPC-4 §6.4.6.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cscd {
    /// Byte offset in the parameter list, for field pointers.
    pub offset: usize,
    pub device_type: u8,
    pub code_set: u8,
    pub association: u8,
    pub designator_type: u8,
    pub designator: Vec<u8>,
    /// DISK BLOCK LENGTH of the block device type specific parameters.
    pub block_len: u32,
}

/// A block device to block device segment descriptor (SPC-4 §6.4.7.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Segment {
    pub offset: usize,
    pub src: u16,
    pub dst: u16,
    /// DC: NUMBER OF BLOCKS counts destination (true) or source blocks.
    pub dc: bool,
    pub blocks: u16,
    pub src_lba: u64,
    pub dst_lba: u64,
}

/// A parsed EXTENDED COPY parameter list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParamList {
    pub list_id: u8,
    pub usage: ListIdUsage,
    pub cscds: Vec<Cscd>,
    pub segments: Vec<Segment>,
}

/// Parses an EXTENDED COPY(LID1) parameter list (SPC-4 §6.4.3). Length
/// errors are checked first, then limits, then each descriptor in order.
pub(crate) fn parse(data: &[u8]) -> Result<ParamList, Sense> {
    if data.len() < HEADER_LEN {
        return Err(length_error());
    }
    let list_id = data.first().copied().unwrap_or(0);
    let flags = data.get(1).copied().unwrap_or(0);
    let cscd_len = usize::from(be16(data, 2));
    let seg_len = be32(data, 8);
    let inline_len = be32(data, 12);
    let total = u64::from(seg_len) + u64::from(inline_len) + (HEADER_LEN + cscd_len) as u64;
    if total > data.len() as u64 {
        return Err(length_error());
    }
    if cscd_len as u64 + u64::from(seg_len) > u64::from(MAX_DESCRIPTOR_LIST_LEN) {
        return Err(length_error());
    }
    if inline_len != 0 {
        // No segment descriptor this copy manager supports uses inline data.
        return Err(Sense::invalid_param_field(12, None));
    }
    let usage = match (flags >> 3) & 0x03 {
        0b00 => ListIdUsage::Hold,
        0b10 => ListIdUsage::Discard,
        0b11 => ListIdUsage::None,
        _ => return Err(Sense::invalid_param_field(1, Some(4))),
    };
    if usage == ListIdUsage::None && list_id != 0 {
        return Err(Sense::invalid_param_field(0, None));
    }
    let cscd_end = HEADER_LEN + cscd_len;
    let seg_end = cscd_end + seg_len as usize;
    let cscds = parse_cscds(data.get(HEADER_LEN..cscd_end).unwrap_or(&[]), HEADER_LEN)?;
    let segments = parse_segments(data.get(cscd_end..seg_end).unwrap_or(&[]), cscd_end)?;
    Ok(ParamList {
        list_id,
        usage,
        cscds,
        segments,
    })
}

/// Length of a CSCD descriptor of type `code`, if this is a CSCD type.
fn cscd_len(code: u8) -> Option<usize> {
    match code {
        0xE0..=0xE9 | 0xFF => Some(CSCD_LEN),
        0xEA | 0xEB => Some(2 * CSCD_LEN),
        _ => None,
    }
}

fn parse_cscds(list: &[u8], base: usize) -> Result<Vec<Cscd>, Sense> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < list.len() {
        if out.len() >= usize::from(MAX_CSCD_DESCRIPTORS) {
            return Err(Sense::illegal(TOO_MANY_TARGET_DESCRIPTORS));
        }
        let offset = base + at;
        let code = list.get(at).copied().unwrap_or(0);
        let unsupported =
            Sense::illegal(UNSUPPORTED_TARGET_DESCRIPTOR_TYPE_CODE).with_field(false, offset, None);
        let len = cscd_len(code).ok_or(unsupported)?;
        let desc = list.get(at..at + len).ok_or_else(length_error)?;
        if code != CSCD_IDENTIFICATION {
            return Err(unsupported);
        }
        out.push(parse_identification(desc, offset)?);
        at += len;
    }
    Ok(out)
}

/// An identification descriptor. Byte 1 bits 7..5 (SPC-3's LU ID TYPE and
/// NUL) are obsolete in SPC-4 and ignored, as this unit claims SPC-4.
fn parse_identification(d: &[u8], offset: usize) -> Result<Cscd, Sense> {
    let b1 = d.get(1).copied().unwrap_or(0);
    let designator_len = usize::from(d.get(7).copied().unwrap_or(0));
    if designator_len > 20 {
        return Err(Sense::invalid_param_field(offset + 7, None));
    }
    Ok(Cscd {
        offset,
        device_type: b1 & 0x1F,
        code_set: d.get(4).copied().unwrap_or(0) & 0x0F,
        association: (d.get(5).copied().unwrap_or(0) >> 4) & 0x03,
        designator_type: d.get(5).copied().unwrap_or(0) & 0x0F,
        designator: d.get(8..8 + designator_len).unwrap_or(&[]).to_vec(),
        block_len: be32(d, 28) & 0x00FF_FFFF,
    })
}

fn parse_segments(list: &[u8], base: usize) -> Result<Vec<Segment>, Sense> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < list.len() {
        if out.len() >= usize::from(MAX_SEGMENT_DESCRIPTORS) {
            return Err(Sense::illegal(TOO_MANY_SEGMENT_DESCRIPTORS));
        }
        let offset = base + at;
        let head = list.get(at..at + 4).ok_or_else(length_error)?;
        let code = head.first().copied().unwrap_or(0);
        let desc_len = be16(head, 2);
        let len = 4 + usize::from(desc_len);
        if code != SEG_BLOCK_TO_BLOCK {
            return Err(Sense::illegal(UNSUPPORTED_SEGMENT_DESCRIPTOR_TYPE_CODE)
                .with_field(false, offset, None));
        }
        if desc_len != B2B_DESC_LEN {
            return Err(Sense::invalid_param_field(offset + 2, None));
        }
        let d = list.get(at..at + len).ok_or_else(length_error)?;
        out.push(Segment {
            offset,
            dc: d.get(1).copied().unwrap_or(0) & 0x02 != 0,
            src: be16(d, 4),
            dst: be16(d, 6),
            blocks: be16(d, 10),
            src_lba: be64(d, 12),
            dst_lba: be64(d, 20),
        });
        at += len;
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::sense::SenseKey;

    /// An identification descriptor naming `naa` with 512-byte blocks.
    pub(crate) fn e4(naa: &[u8; 16], lu_id_type: u8, nul: bool) -> Vec<u8> {
        let mut d = vec![0u8; 32];
        d[0] = CSCD_IDENTIFICATION;
        d[1] = (lu_id_type << 6) | if nul { 0x20 } else { 0 };
        d[4] = 0x01;
        d[5] = 0x03;
        d[7] = 16;
        d[8..24].copy_from_slice(naa);
        d[28..32].copy_from_slice(&512u32.to_be_bytes());
        d
    }

    pub(crate) fn b2b(src: u16, dst: u16, blocks: u16, src_lba: u64, dst_lba: u64) -> Vec<u8> {
        let mut d = vec![0u8; 28];
        d[0] = SEG_BLOCK_TO_BLOCK;
        d[2..4].copy_from_slice(&B2B_DESC_LEN.to_be_bytes());
        d[4..6].copy_from_slice(&src.to_be_bytes());
        d[6..8].copy_from_slice(&dst.to_be_bytes());
        d[10..12].copy_from_slice(&blocks.to_be_bytes());
        d[12..20].copy_from_slice(&src_lba.to_be_bytes());
        d[20..28].copy_from_slice(&dst_lba.to_be_bytes());
        d
    }

    pub(crate) fn list(list_id: u8, usage: u8, cscds: &[Vec<u8>], segs: &[Vec<u8>]) -> Vec<u8> {
        let c: Vec<u8> = cscds.concat();
        let s: Vec<u8> = segs.concat();
        let mut d = vec![0u8; 16];
        d[0] = list_id;
        d[1] = usage << 3;
        d[2..4].copy_from_slice(&(c.len() as u16).to_be_bytes());
        d[8..12].copy_from_slice(&(s.len() as u32).to_be_bytes());
        d.extend(c);
        d.extend(s);
        d
    }

    pub(crate) fn asc(r: Result<ParamList, Sense>) -> Option<(SenseKey, Asc)> {
        r.err().map(|s| (s.key, s.asc))
    }

    pub(crate) const NAA: [u8; 16] = [0x60, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];

    #[test]
    fn parses_a_libiscsi_style_list() {
        let data = list(1, 0, &[e4(&NAA, 0, false)], &[b2b(0, 0, 2048, 0, 4096)]);
        let p = parse(&data).expect("valid list");
        assert_eq!((p.list_id, p.usage), (1, ListIdUsage::Hold));
        assert_eq!(p.cscds.len(), 1);
        let c = &p.cscds[0];
        assert_eq!((c.code_set, c.association, c.designator_type), (1, 0, 3));
        assert_eq!(c.designator, NAA.to_vec());
        assert_eq!((c.block_len, c.offset), (512, 16));
        assert_eq!(
            p.segments,
            vec![Segment {
                offset: 48,
                src: 0,
                dst: 0,
                dc: false,
                blocks: 2048,
                src_lba: 0,
                dst_lba: 4096
            }]
        );
    }

    #[test]
    fn length_errors_come_first() {
        let data = list(1, 0, &[e4(&NAA, 0, false)], &[b2b(0, 0, 1, 0, 1)]);
        let plle = Some((SenseKey::ILLEGAL_REQUEST, Asc::PARAMETER_LIST_LENGTH_ERROR));
        assert_eq!(asc(parse(&data[..47])), plle);
        assert_eq!(asc(parse(&data[..data.len() - 1])), plle);
        assert_eq!(asc(parse(&data[..15])), plle);
        // Descriptor lists longer than the limit, even if too many.
        let many: Vec<Vec<u8>> = (0..=MAX_CSCD_DESCRIPTORS)
            .map(|_| e4(&NAA, 0, false))
            .collect();
        let segs: Vec<Vec<u8>> = (0..=MAX_SEGMENT_DESCRIPTORS)
            .map(|_| b2b(0, 0, 1, 0, 1))
            .collect();
        assert_eq!(asc(parse(&list(3, 0, &many, &segs))), plle);
    }

    #[test]
    fn descriptor_limits_and_types() {
        let too_many: Vec<Vec<u8>> = (0..=MAX_CSCD_DESCRIPTORS)
            .map(|_| e4(&NAA, 0, false))
            .collect();
        let data = list(1, 0, &too_many, &[b2b(0, 0, 1, 0, 1)]);
        assert_eq!(
            asc(parse(&data)),
            Some((SenseKey::ILLEGAL_REQUEST, TOO_MANY_TARGET_DESCRIPTORS))
        );
        let segs: Vec<Vec<u8>> = (0..=MAX_SEGMENT_DESCRIPTORS)
            .map(|_| b2b(0, 0, 1, 0, 1))
            .collect();
        let data = list(2, 0, &[e4(&NAA, 0, false)], &segs);
        assert_eq!(
            asc(parse(&data)),
            Some((SenseKey::ILLEGAL_REQUEST, TOO_MANY_SEGMENT_DESCRIPTORS))
        );
        let mut fc = e4(&NAA, 0, false);
        fc[0] = 0xE0;
        let data = list(1, 0, &[fc], &[b2b(0, 0, 1, 0, 1)]);
        assert_eq!(
            asc(parse(&data)),
            Some((
                SenseKey::ILLEGAL_REQUEST,
                UNSUPPORTED_TARGET_DESCRIPTOR_TYPE_CODE
            ))
        );
        let mut s2s = vec![0u8; 20];
        s2s[0] = 0x03;
        s2s[3] = 16;
        let data = list(1, 0, &[e4(&NAA, 0, false)], &[s2s]);
        assert_eq!(
            asc(parse(&data)),
            Some((
                SenseKey::ILLEGAL_REQUEST,
                UNSUPPORTED_SEGMENT_DESCRIPTOR_TYPE_CODE
            ))
        );
        // SPC-3's LU ID TYPE and NUL are obsolete in SPC-4: ignored.
        let data = list(1, 0, &[e4(&NAA, 2, true)], &[b2b(0, 0, 1, 0, 1)]);
        assert_eq!(parse(&data).map(|p| p.cscds.len()), Ok(1));
    }

    #[test]
    fn list_id_usage() {
        let segs = [b2b(0, 0, 1, 0, 1)];
        let cscds = [e4(&NAA, 0, false)];
        assert_eq!(
            parse(&list(7, 2, &cscds, &segs)).map(|p| p.usage),
            Ok(ListIdUsage::Discard)
        );
        assert_eq!(
            parse(&list(0, 3, &cscds, &segs)).map(|p| p.usage),
            Ok(ListIdUsage::None)
        );
        assert!(parse(&list(7, 3, &cscds, &segs)).is_err());
        assert!(parse(&list(7, 1, &cscds, &segs)).is_err());
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn parse_never_panics(data in proptest::collection::vec(any::<u8>(), 0..600)) {
                let _ = parse(&data);
            }

            #[test]
            fn parse_round_trips(
                list_id: u8,
                usage in prop_oneof![Just(0u8), Just(2u8)],
                naas in proptest::collection::vec(any::<[u8; 16]>(), 1..4),
                segs in proptest::collection::vec(
                    (any::<u16>(), any::<u16>(), any::<u16>(), any::<u64>(), any::<u64>()), 0..8),
            ) {
                let cscds: Vec<Vec<u8>> = naas.iter().map(|n| e4(n, 0, false)).collect();
                let seg_bytes: Vec<Vec<u8>> = segs
                    .iter()
                    .map(|&(s, d, n, sl, dl)| b2b(s, d, n, sl, dl))
                    .collect();
                let p = parse(&list(list_id, usage, &cscds, &seg_bytes)).expect("valid");
                prop_assert_eq!(p.list_id, list_id);
                let designators: Vec<Vec<u8>> = p.cscds.iter().map(|c| c.designator.clone()).collect();
                let expected: Vec<Vec<u8>> = naas.iter().map(|n| n.to_vec()).collect();
                prop_assert_eq!(designators, expected);
                let got: Vec<(u16, u16, u16, u64, u64)> = p
                    .segments
                    .iter()
                    .map(|s| (s.src, s.dst, s.blocks, s.src_lba, s.dst_lba))
                    .collect();
                prop_assert_eq!(got, segs);
            }
        }
    }
}
