//! The copy manager: EXTENDED COPY (LID1, SPC-4 §6.4) and RECEIVE COPY
//! RESULTS (SPC-4 §6.18), plus the Third-party Copy VPD page (§7.8.17).
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

use std::collections::VecDeque;
use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::ctx::Ctx;
use crate::lun::LogicalUnit;
use crate::outcome::Outcome;
use crate::registry::{Resolved, NAA_LEN};
use crate::sense::{Asc, Sense, SenseKey};
use crate::vpd::MAX_TRANSFER_BYTES;

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
/// Copy statuses held per logical unit; the oldest finished ones go first.
const MAX_HELD_STATUSES: usize = 256;

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

/// COPY ABORTED sense key (SPC-4 table 27).
const COPY_ABORTED: SenseKey = SenseKey(0x0A);
const OPERATION_IN_PROGRESS: Asc = Asc::new(0x00, 0x16);
const UNREACHABLE_COPY_TARGET: Asc = Asc::new(0x08, 0x04);
const THIRD_PARTY_DEVICE_FAILURE: Asc = Asc::new(0x0D, 0x01);
const COPY_TARGET_DEVICE_NOT_REACHABLE: Asc = Asc::new(0x0D, 0x02);
const INCORRECT_COPY_TARGET_DEVICE_TYPE: Asc = Asc::new(0x0D, 0x03);
const TOO_MANY_TARGET_DESCRIPTORS: Asc = Asc::new(0x26, 0x06);
const UNSUPPORTED_TARGET_DESCRIPTOR_TYPE_CODE: Asc = Asc::new(0x26, 0x07);
const TOO_MANY_SEGMENT_DESCRIPTORS: Asc = Asc::new(0x26, 0x08);
const UNSUPPORTED_SEGMENT_DESCRIPTOR_TYPE_CODE: Asc = Asc::new(0x26, 0x09);

/// RECEIVE COPY RESULTS service actions (SPC-4 table 125).
pub(crate) const RCR_COPY_STATUS: u8 = 0x00;
pub(crate) const RCR_OPERATING_PARAMETERS: u8 = 0x03;

fn length_error() -> Sense {
    Sense::illegal(Asc::PARAMETER_LIST_LENGTH_ERROR)
}

fn aborted(asc: Asc) -> Sense {
    Sense::new(COPY_ABORTED, asc)
}

fn be16(data: &[u8], at: usize) -> u16 {
    let mut b = [0u8; 2];
    for (i, x) in b.iter_mut().enumerate() {
        *x = data.get(at + i).copied().unwrap_or(0);
    }
    u16::from_be_bytes(b)
}

fn be32(data: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    for (i, x) in b.iter_mut().enumerate() {
        *x = data.get(at + i).copied().unwrap_or(0);
    }
    u32::from_be_bytes(b)
}

fn be64(data: &[u8], at: usize) -> u64 {
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
    // A unit without its medium, or being sanitized, cannot take part.
    if unit.medium.check(0x28).is_err() || unit.sanitizer.check(0x28).is_err() {
        return Err(aborted(COPY_TARGET_DEVICE_NOT_REACHABLE));
    }
    if cscd.block_len != unit.geometry().block_size {
        return Err(Sense::invalid_param_field(cscd.offset + 29, None));
    }
    Ok(unit)
}

/// Progress of one EXTENDED COPY, for COPY STATUS.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Progress {
    segments: u16,
    bytes: u64,
}

/// Copies one block to block segment; returns the bytes moved.
fn copy_segment(src: &LogicalUnit, dst: &LogicalUnit, seg: &Segment) -> Result<u64, Sense> {
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
    copy_bytes(src, dst, from, to, bytes, backwards)?;
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
                .read_at(part, from + at)
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
        progress.bytes += copy_segment(&src, &dst, seg)?;
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

/// COPY MANAGER STATUS values (SPC-4 table 127).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CopyState {
    Running,
    Done,
    Failed,
}

impl CopyState {
    fn code(self) -> u8 {
        match self {
            CopyState::Running => 0x00,
            CopyState::Done => 0x01,
            CopyState::Failed => 0x02,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Record {
    nexus: u64,
    list_id: u8,
    hold: bool,
    state: CopyState,
    progress: Progress,
}

/// Names the status record of one running EXTENDED COPY.
#[derive(Debug)]
struct Ticket {
    nexus: u64,
    list_id: u8,
}

/// Copy statuses of one logical unit, per I_T nexus and list identifier.
#[derive(Debug, Default)]
pub(crate) struct CopyResults {
    records: Mutex<VecDeque<Record>>,
}

impl CopyResults {
    fn lock(&self) -> MutexGuard<'_, VecDeque<Record>> {
        self.records.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a starting copy; OPERATION IN PROGRESS if its list
    /// identifier is in use by a running copy of the same nexus.
    fn begin(&self, nexus: u64, list: &ParamList) -> Result<Option<Ticket>, Sense> {
        if list.usage == ListIdUsage::None {
            return Ok(None);
        }
        let mut records = self.lock();
        let same = |r: &Record| r.nexus == nexus && r.list_id == list.list_id;
        if records
            .iter()
            .any(|r| same(r) && r.state == CopyState::Running)
        {
            return Err(Sense::illegal(OPERATION_IN_PROGRESS));
        }
        records.retain(|r| !same(r));
        while records.len() >= MAX_HELD_STATUSES {
            match records.iter().position(|r| r.state != CopyState::Running) {
                Some(i) => {
                    records.remove(i);
                }
                None => break,
            }
        }
        records.push_back(Record {
            nexus,
            list_id: list.list_id,
            hold: list.usage == ListIdUsage::Hold,
            state: CopyState::Running,
            progress: Progress::default(),
        });
        Ok(Some(Ticket {
            nexus,
            list_id: list.list_id,
        }))
    }

    fn update(&self, t: &Ticket, progress: Progress, state: CopyState) {
        let mut records = self.lock();
        if let Some(r) = records
            .iter_mut()
            .find(|r| r.nexus == t.nexus && r.list_id == t.list_id)
        {
            r.progress = progress;
            r.state = state;
        }
    }

    /// Marks a copy finished; drops its record unless it is to be held.
    fn finish(&self, t: &Ticket, state: CopyState) {
        let mut records = self.lock();
        if let Some(i) = records
            .iter()
            .position(|r| r.nexus == t.nexus && r.list_id == t.list_id)
        {
            let hold = records.get(i).is_some_and(|r| r.hold);
            if hold {
                if let Some(r) = records.get_mut(i) {
                    r.state = state;
                }
            } else {
                records.remove(i);
            }
        }
    }

    /// The status of a copy; a finished copy's status is reported once.
    fn take_status(&self, nexus: u64, list_id: u8) -> Option<Record> {
        let mut records = self.lock();
        let i = records
            .iter()
            .position(|r| r.nexus == nexus && r.list_id == list_id && r.hold)?;
        let record = *records.get(i)?;
        if record.state != CopyState::Running {
            records.remove(i);
        }
        Some(record)
    }

    /// I_T nexus loss: its held statuses are discarded.
    pub(crate) fn drop_nexus(&self, nexus: u64) {
        self.lock().retain(|r| r.nexus != nexus);
    }
}

/// COPY STATUS parameter data (SPC-4 table 126): the transfer count in the
/// smallest power-of-1024 unit that fits 32 bits.
fn copy_status_data(record: &Record) -> Vec<u8> {
    let mut units = 0u8;
    let mut count = record.progress.bytes;
    while count > u64::from(u32::MAX) && units < 6 {
        count >>= 10;
        units += 1;
    }
    let count = u32::try_from(count).unwrap_or(u32::MAX);
    let mut d = vec![0u8; 12];
    d[..4].copy_from_slice(&8u32.to_be_bytes());
    d[4] = record.state.code();
    d[5..7].copy_from_slice(&record.progress.segments.to_be_bytes());
    d[7] = units;
    d[8..12].copy_from_slice(&count.to_be_bytes());
    d
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

    /// An identification descriptor naming `naa` with 512-byte blocks.
    fn e4(naa: &[u8; 16], lu_id_type: u8, nul: bool) -> Vec<u8> {
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

    fn b2b(src: u16, dst: u16, blocks: u16, src_lba: u64, dst_lba: u64) -> Vec<u8> {
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

    fn list(list_id: u8, usage: u8, cscds: &[Vec<u8>], segs: &[Vec<u8>]) -> Vec<u8> {
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

    fn asc(r: Result<ParamList, Sense>) -> Option<(SenseKey, Asc)> {
        r.err().map(|s| (s.key, s.asc))
    }

    const NAA: [u8; 16] = [0x60, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];

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

    #[test]
    fn copy_status_records() {
        let results = CopyResults::default();
        let p = parse(&list(5, 0, &[e4(&NAA, 0, false)], &[b2b(0, 0, 1, 0, 1)])).expect("valid");
        let t = results.begin(9, &p).expect("free list id").expect("held");
        assert_eq!(
            results.begin(9, &p).err().map(|s| s.asc),
            Some(OPERATION_IN_PROGRESS)
        );
        // Another nexus may use the same list identifier.
        assert!(results.begin(10, &p).is_ok());
        results.update(
            &t,
            Progress {
                segments: 1,
                bytes: 1 << 20,
            },
            CopyState::Running,
        );
        let running = results.take_status(9, 5).expect("running");
        assert_eq!(
            copy_status_data(&running),
            vec![0, 0, 0, 8, 0, 0, 1, 0, 0, 0x10, 0, 0]
        );
        results.finish(&t, CopyState::Done);
        let done = results.take_status(9, 5).expect("held");
        assert_eq!(done.state, CopyState::Done);
        assert!(results.take_status(9, 5).is_none(), "reported once");
        results.drop_nexus(10);
        assert!(results.take_status(10, 5).is_none());
    }

    #[test]
    fn big_transfer_counts_scale_units() {
        let r = Record {
            nexus: 0,
            list_id: 0,
            hold: true,
            state: CopyState::Failed,
            progress: Progress {
                segments: 2,
                bytes: 16 << 30,
            },
        };
        let d = copy_status_data(&r);
        assert_eq!(d[4], 0x02);
        assert_eq!(d[7], 1);
        assert_eq!(&d[8..12], &(16u32 << 20).to_be_bytes());
    }

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
