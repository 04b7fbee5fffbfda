//! The copy manager: EXTENDED COPY (LID1, SPC-4 §6.4) and RECEIVE COPY
//! RESULTS (SPC-4 §6.18), plus the Third-party Copy VPD page (§7.8.17).
//! The parameter list parser is in `xcopy_param`, the copy statuses a
//! logical unit keeps in `copy_results`.
//!
//! Supported descriptors: identification CSCD descriptors (E4h) naming a
//! logical unit by its NAA designator (VPD page 83h), resolved through the
//! process-wide [`crate::LunRegistry`], so copies work within one LUN and
//! across every LUN of this process; block device to block device segment
//! descriptors (02h). Every other descriptor type is refused with
//! UNSUPPORTED TARGET / SEGMENT DESCRIPTOR TYPE CODE.
//!
//! Guarantees:
//! - the whole parameter list is parsed and checked (lengths, limits,
//!   descriptor types) before any data moves; segments are then processed
//!   in order (SPC-4 §6.4.4), each resolving its CSCDs when it starts;
//!   parsing never panics on any input;
//! - data moves through the backstores in chunks of at most
//!   [`MAX_TRANSFER_BYTES`], never a whole segment in memory; overlapping
//!   ranges of one unit are copied in the safe direction;
//! - errors met while processing segments end the command with COPY
//!   ABORTED; the copy status (segments processed, bytes moved) is held per
//!   I_T nexus and list identifier when LIST ID USAGE asks for it, until
//!   COPY STATUS reports it, the same list identifier is reused, or the
//!   nexus is lost.

use rustgt_backstore::StreamHint;
use std::ops::Deref;
use std::sync::Arc;

use crate::copy_results::{copy_status_data, CopyState, Progress, Ticket};
use crate::ctx::Ctx;
use crate::lun::LogicalUnit;
use crate::max_transfer::MAX_TRANSFER_BYTES;
use crate::outcome::Outcome;
use crate::registry::{Resolved, NAA_LEN};
use crate::sense::{Asc, Sense, SenseKey};
use crate::xcopy_param::{
    parse, ParamList, Segment, CSCD_IDENTIFICATION, MAX_CSCD_DESCRIPTORS, MAX_DESCRIPTOR_LIST_LEN,
    MAX_SEGMENT_DESCRIPTORS, MAX_SEGMENT_LEN, SEG_BLOCK_TO_BLOCK, TOTAL_CONCURRENT_COPIES,
};

/// COPY ABORTED sense key (SPC-4 table 27).
const COPY_ABORTED: SenseKey = SenseKey(0x0A);
const UNREACHABLE_COPY_TARGET: Asc = Asc::new(0x08, 0x04);
const THIRD_PARTY_DEVICE_FAILURE: Asc = Asc::new(0x0D, 0x01);
const COPY_TARGET_DEVICE_NOT_REACHABLE: Asc = Asc::new(0x0D, 0x02);
const INCORRECT_COPY_TARGET_DEVICE_TYPE: Asc = Asc::new(0x0D, 0x03);

/// RECEIVE COPY RESULTS service actions (SPC-4 table 125).
pub(crate) const RCR_COPY_STATUS: u8 = 0x00;
pub(crate) const RCR_OPERATING_PARAMETERS: u8 = 0x03;

fn aborted(asc: Asc) -> Sense {
    Sense::new(COPY_ABORTED, asc)
}

/// A copy source or destination.
enum Unit<'a> {
    Local(&'a LogicalUnit),
    Other(Arc<LogicalUnit>),
}

impl Deref for Unit<'_> {
    type Target = LogicalUnit;

    fn deref(&self) -> &LogicalUnit {
        match self {
            Unit::Local(lu) => lu,
            Unit::Other(lu) => lu,
        }
    }
}

/// Finds the logical unit CSCD descriptor `index` names.
fn resolve<'a>(
    ctx: &Ctx<'_>,
    lu: &'a LogicalUnit,
    list: &ParamList,
    index: u16,
) -> Result<Unit<'a>, Sense> {
    let cscd = list
        .cscds
        .get(usize::from(index))
        .ok_or(aborted(UNREACHABLE_COPY_TARGET))?;
    if cscd.device_type != 0x00 {
        return Err(aborted(INCORRECT_COPY_TARGET_DEVICE_TYPE));
    }
    let naa = cscd.code_set == 0x1
        && cscd.association == 0x0
        && cscd.designator_type == 0x3
        && cscd.designator.len() == NAA_LEN;
    if !naa {
        return Err(aborted(COPY_TARGET_DEVICE_NOT_REACHABLE));
    }
    let unit = match ctx.target.registry().resolve(&cscd.designator, lu) {
        Some(Resolved::Local) => Unit::Local(lu),
        Some(Resolved::Other(other)) => Unit::Other(other),
        None => return Err(aborted(COPY_TARGET_DEVICE_NOT_REACHABLE)),
    };
    // A nexus with a LUN map reaches only the units it sees.
    if let Some(map) = &ctx.cmd.nexus.lun_map {
        let here = ctx
            .target
            .lu(unit.lun)
            .is_some_and(|t| std::ptr::eq(Arc::as_ptr(&t), &*unit));
        if !here || map.visible(&[unit.lun]).is_empty() {
            return Err(aborted(COPY_TARGET_DEVICE_NOT_REACHABLE));
        }
    }
    // A unit without its medium, or being sanitized, cannot take part.
    if unit.medium.check(0x28).is_err() || unit.sanitizer.check(0x28).is_err() {
        return Err(aborted(COPY_TARGET_DEVICE_NOT_REACHABLE));
    }
    if cscd.block_len != unit.geometry().block_size {
        return Err(Sense::invalid_param_field(cscd.offset + 29, None));
    }
    Ok(unit)
}

/// Copies one block to block segment; returns the bytes moved.
fn copy_segment(
    src: &LogicalUnit,
    dst: &LogicalUnit,
    seg: &Segment,
    hint: StreamHint,
) -> Result<u64, Sense> {
    let sbs = u64::from(src.geometry().block_size.max(1));
    let dbs = u64::from(dst.geometry().block_size.max(1));
    let unit = if seg.dc { dbs } else { sbs };
    let bytes = u64::from(seg.blocks) * unit;
    if bytes % sbs != 0 || bytes % dbs != 0 || bytes > u64::from(MAX_SEGMENT_LEN) {
        return Err(Sense::invalid_param_field(seg.offset + 10, None));
    }
    let in_range = |lba: u64, bs: u64, size: u64| {
        lba.checked_mul(bs)
            .and_then(|start| start.checked_add(bytes).map(|end| (start, end)))
            .filter(|&(_, end)| end <= size)
            .map(|(start, _)| start)
    };
    // The copy target would refuse the LBA range: the copy is aborted.
    let from = in_range(seg.src_lba, sbs, src.geometry().size_bytes())
        .ok_or(aborted(Asc::NO_ADDITIONAL_SENSE))?;
    let to = in_range(seg.dst_lba, dbs, dst.geometry().size_bytes())
        .ok_or(aborted(Asc::NO_ADDITIONAL_SENSE))?;
    if dst.write_protected() {
        return Err(Sense::new(SenseKey::DATA_PROTECT, Asc::WRITE_PROTECTED));
    }
    let same = std::ptr::eq(src, dst);
    // Like memmove: copy backwards when the destination overlaps ahead.
    let backwards = same && to > from && to < from + bytes;
    copy_bytes(src, dst, from, to, bytes, backwards, hint)?;
    Ok(bytes)
}

/// Moves `bytes` from `from` on `src` to `to` on `dst` in bounded chunks.
fn copy_bytes(
    src: &LogicalUnit,
    dst: &LogicalUnit,
    from: u64,
    to: u64,
    bytes: u64,
    backwards: bool,
    hint: StreamHint,
) -> Result<(), Sense> {
    let chunk = u64::from(MAX_TRANSFER_BYTES).min(bytes);
    let mut buf =
        vec![0u8; usize::try_from(chunk).map_err(|_| aborted(THIRD_PARTY_DEVICE_FAILURE))?];
    let fua = !dst.mode().write_cache;
    let sbs = u64::from(src.geometry().block_size.max(1));
    let dbs = u64::from(dst.geometry().block_size.max(1));
    let mut done = 0u64;
    while done < bytes {
        let len = chunk.min(bytes - done);
        let at = if backwards { bytes - done - len } else { done };
        let part = buf
            .get_mut(..usize::try_from(len).unwrap_or(0))
            .ok_or(aborted(THIRD_PARTY_DEVICE_FAILURE))?;
        // One LBA range lock at a time (reads shared, writes exclusive),
        // so a copy within one unit cannot deadlock on itself.
        {
            let _range = src.lba_locks.shared((from + at) / sbs, len / sbs)?;
            src.backstore
                .read_at_hinted(part, from + at, hint)
                .map_err(|_| aborted(THIRD_PARTY_DEVICE_FAILURE))?;
        }
        {
            let _range = dst.lba_locks.exclusive((to + at) / dbs, len / dbs)?;
            dst.backstore
                .write_at(part, to + at, fua)
                .map_err(|_| aborted(THIRD_PARTY_DEVICE_FAILURE))?;
        }
        src.stats.count_read(len);
        dst.stats.count_write(len);
        done += len;
    }
    Ok(())
}

/// Runs every segment in order, publishing progress after each.
fn run_segments(
    ctx: &Ctx<'_>,
    lu: &LogicalUnit,
    list: &ParamList,
    ticket: Option<&Ticket>,
) -> Result<(), Sense> {
    let mut progress = Progress::default();
    for seg in &list.segments {
        let src = resolve(ctx, lu, list, seg.src)?;
        let dst = resolve(ctx, lu, list, seg.dst)?;
        if ctx.cmd.nexus.maps_read_only(dst.lun) {
            return Err(Sense::new(SenseKey::DATA_PROTECT, Asc::WRITE_PROTECTED));
        }
        progress.bytes += copy_segment(&src, &dst, seg, ctx.hint)?;
        progress.segments = progress.segments.saturating_add(1);
        if let Some(t) = ticket {
            lu.copies.update(t, progress, CopyState::Running);
        }
    }
    Ok(())
}

/// EXTENDED COPY(LID1) (SPC-4 §6.4). A zero PARAMETER LIST LENGTH copies
/// nothing.
pub(crate) fn extended_copy(ctx: &Ctx<'_>) -> Result<Outcome, Sense> {
    let lu = ctx.lu()?;
    let param_len = usize::try_from(ctx.cdb.be32(10)).unwrap_or(usize::MAX);
    if param_len == 0 {
        return Ok(Outcome::data_out(0));
    }
    let data_out = &ctx.cmd.data_out;
    let data = data_out.get(..param_len).unwrap_or(data_out);
    let list = parse(data)?;
    let ticket = lu.copies.begin(ctx.nexus_id(), &list)?;
    let result = run_segments(ctx, lu, &list, ticket.as_ref());
    if let Some(t) = &ticket {
        let state = if result.is_ok() {
            CopyState::Done
        } else {
            CopyState::Failed
        };
        lu.copies.finish(t, state);
    }
    if let Err(sense) = &result {
        tracing::debug!(lun = lu.lun, ?sense, "extended copy aborted");
    }
    result.map(|()| Outcome::data_out(param_len as u64))
}

/// Implemented descriptor type codes, ascending.
const IMPLEMENTED_DESCRIPTORS: [u8; 2] = [SEG_BLOCK_TO_BLOCK, CSCD_IDENTIFICATION];

/// OPERATING PARAMETERS parameter data (SPC-4 table 129).
fn operating_parameters() -> Vec<u8> {
    let mut d = vec![0u8; 44];
    d[4] = 0x01; // SNLID: LIST ID USAGE 11b is supported
    d[8..10].copy_from_slice(&MAX_CSCD_DESCRIPTORS.to_be_bytes());
    d[10..12].copy_from_slice(&MAX_SEGMENT_DESCRIPTORS.to_be_bytes());
    d[12..16].copy_from_slice(&MAX_DESCRIPTOR_LIST_LEN.to_be_bytes());
    d[16..20].copy_from_slice(&MAX_SEGMENT_LEN.to_be_bytes());
    // MAXIMUM INLINE DATA LENGTH, HELD DATA LIMIT and MAXIMUM STREAM
    // DEVICE TRANSFER SIZE stay zero: no inline, held or stream data.
    d[34..36].copy_from_slice(&TOTAL_CONCURRENT_COPIES.to_be_bytes());
    d[36] = TOTAL_CONCURRENT_COPIES as u8; // MAXIMUM CONCURRENT COPIES
    d[37] = 9; // DATA SEGMENT GRANULARITY: 512 bytes (log2)
    d[43] = IMPLEMENTED_DESCRIPTORS.len() as u8;
    d.extend_from_slice(&IMPLEMENTED_DESCRIPTORS);
    let available = u32::try_from(d.len() - 4).unwrap_or(u32::MAX);
    d[..4].copy_from_slice(&available.to_be_bytes());
    d
}

/// RECEIVE COPY RESULTS (SPC-4 §6.18): COPY STATUS and OPERATING
/// PARAMETERS.
pub(crate) fn receive_copy_results(ctx: &Ctx<'_>) -> Result<Outcome, Sense> {
    let lu = ctx.lu()?;
    let cdb = ctx.cdb;
    let alloc_len = u64::from(cdb.be32(10));
    let data = match cdb.byte(1) & 0x1F {
        RCR_COPY_STATUS => {
            let record = lu
                .copies
                .take_status(ctx.nexus_id(), cdb.byte(2))
                .ok_or(Sense::invalid_cdb_field(2, None))?;
            copy_status_data(&record)
        }
        RCR_OPERATING_PARAMETERS => operating_parameters(),
        _ => return Err(Sense::invalid_cdb_field(1, Some(4))),
    };
    Ok(Outcome::alloc(data, alloc_len))
}

/// One third-party copy descriptor (SPC-4 table 588), padded to a
/// multiple of four bytes.
fn tpc_descriptor(kind: u16, body: &[u8]) -> Vec<u8> {
    let mut d = kind.to_be_bytes().to_vec();
    let padded = body.len().div_ceil(4) * 4;
    d.extend_from_slice(&u16::try_from(padded).unwrap_or(u16::MAX).to_be_bytes());
    d.extend_from_slice(body);
    d.resize(4 + padded, 0);
    d
}

/// Body of the Third-party Copy VPD page (SPC-4 §7.8.17): supported
/// commands, parameter data, supported descriptors, supported CSCD IDs and
/// general copy operations, with the limits EXTENDED COPY enforces.
pub(crate) fn third_party_copy_page() -> Vec<u8> {
    let mut out = Vec::new();
    // Supported Commands (0001h): 83h/00h, 84h/00h and 84h/03h.
    let commands = [
        0x83,
        1,
        0x00,
        0x84,
        2,
        RCR_COPY_STATUS,
        RCR_OPERATING_PARAMETERS,
    ];
    let mut body = vec![commands.len() as u8];
    body.extend_from_slice(&commands);
    out.extend(tpc_descriptor(0x0001, &body));
    // Parameter Data (0004h).
    let mut body = vec![0u8; 28];
    body[4..6].copy_from_slice(&MAX_CSCD_DESCRIPTORS.to_be_bytes());
    body[6..8].copy_from_slice(&MAX_SEGMENT_DESCRIPTORS.to_be_bytes());
    body[8..12].copy_from_slice(&MAX_DESCRIPTOR_LIST_LEN.to_be_bytes());
    out.extend(tpc_descriptor(0x0004, &body));
    // Supported Descriptors (0008h).
    let mut body = vec![IMPLEMENTED_DESCRIPTORS.len() as u8];
    body.extend_from_slice(&IMPLEMENTED_DESCRIPTORS);
    out.extend(tpc_descriptor(0x0008, &body));
    // Supported CSCD Descriptor IDs (000Ch): none beyond list indexes.
    out.extend(tpc_descriptor(0x000C, &[0, 0]));
    // General Copy Operations (8001h).
    let mut body = vec![0u8; 32];
    body[0..4].copy_from_slice(&u32::from(TOTAL_CONCURRENT_COPIES).to_be_bytes());
    body[4..8].copy_from_slice(&u32::from(TOTAL_CONCURRENT_COPIES).to_be_bytes());
    body[8..12].copy_from_slice(&MAX_SEGMENT_LEN.to_be_bytes());
    body[12] = 9; // DATA SEGMENT GRANULARITY (log2)
    out.extend(tpc_descriptor(0x8001, &body));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xcopy_param::be16;

    #[test]
    fn operating_parameters_layout() {
        let d = operating_parameters();
        assert_eq!(d.len(), 46);
        assert_eq!(&d[..4], &42u32.to_be_bytes());
        assert_eq!(&d[8..12], &[0, 16, 0, 64]);
        assert_eq!(&d[12..16], &2048u32.to_be_bytes());
        assert_eq!(d[43], 2);
        assert_eq!(&d[44..], &[0x02, 0xE4]);
    }

    #[test]
    fn third_party_copy_page_layout() {
        let p = third_party_copy_page();
        let mut at = 0;
        let mut kinds = Vec::new();
        while at < p.len() {
            let kind = be16(&p, at);
            let len = usize::from(be16(&p, at + 2));
            assert_eq!(len % 4, 0, "descriptor {kind:#06x} is padded");
            kinds.push(kind);
            at += 4 + len;
        }
        assert_eq!(at, p.len());
        assert_eq!(kinds, vec![0x0001, 0x0004, 0x0008, 0x000C, 0x8001]);
        // Supported commands: list length 7, then 83h/00h, 84h/00h,03h.
        assert_eq!(&p[4..12], &[7, 0x83, 1, 0, 0x84, 2, 0, 3]);
    }
}
