//! Logical block provisioning commands (SBC-3 §4.7): UNMAP (§5.28), WRITE
//! SAME(10/16) (§5.42, §5.44, with the UNMAP bit and SBC-4's NDOB) and
//! GET LBA STATUS (§5.7).
//!
//! A LUN is thin when configured so and its backstore can deallocate
//! ([`limits::lbp_enabled`]); only then are UNMAP, WRITE SAME with UNMAP
//! and deallocated LBA status reported. Deallocated blocks read as zeros
//! (LBPRZ=1), so on a thin LUN a WRITE SAME of zeros deallocates too: a
//! zero-fill that can be a hole is a hole. ANCHOR is not supported
//! (ANC_SUP=0): the bit is refused by the CDB usage data.
//!
//! Every range is validated before anything changes, and each change
//! holds the exclusive LBA lock of its range ([`crate::lba_lock`]).

// Parses what a peer sent (or a persisted file): no indexing that could
// panic (tests may index).
#![deny(clippy::indexing_slicing)]

use rustgt_backstore::Extent;

use crate::cdb::Cdb;
use crate::ctx::Ctx;
use crate::limits::{self, MAX_UNMAP_DESCRIPTORS, MAX_UNMAP_LBA_COUNT};
use crate::lun::LogicalUnit;
use crate::max_transfer::MAX_TRANSFER_BYTES;
use crate::outcome::Outcome;
use crate::sbc::{block_size, lba_out_of_range};
use crate::sense::{Asc, Sense};

/// UNMAP parameter list header length (SBC-3 table 97).
const UNMAP_HEADER: usize = 8;
/// UNMAP block descriptor length (SBC-3 table 98).
const UNMAP_DESCRIPTOR: usize = 16;

/// PROVISIONING STATUS values (SBC-3 table 41).
const STATUS_MAPPED: u8 = 0x0;
const STATUS_DEALLOCATED: u8 = 0x1;

/// Bytes of allocation map fetched from the backstore at a time by GET LBA
/// STATUS, so a fragmented store never builds one huge map.
const MAP_WINDOW_BYTES: u64 = 64 << 20;

/// One range of an UNMAP parameter list, already validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct UnmapRange {
    lba: u64,
    blocks: u64,
}

fn param_length_error() -> Sense {
    Sense::illegal(Asc::PARAMETER_LIST_LENGTH_ERROR)
}

/// Parses and validates an UNMAP parameter list (SBC-3 §5.28.2) against a
/// LUN of `num_blocks` blocks. Only complete descriptors within both the
/// parameter list and UNMAP BLOCK DESCRIPTOR DATA LENGTH count. Errors:
/// a list of 1..7 bytes is a PARAMETER LIST LENGTH ERROR; too many
/// descriptors or blocks is INVALID FIELD IN PARAMETER LIST; a range past
/// the last LBA is LOGICAL BLOCK ADDRESS OUT OF RANGE. Descriptors with no
/// blocks are accepted and dropped.
fn parse_unmap_list(list: &[u8], num_blocks: u64) -> Result<Vec<UnmapRange>, Sense> {
    if list.is_empty() {
        return Ok(Vec::new());
    }
    if list.len() < UNMAP_HEADER {
        return Err(param_length_error());
    }
    let p = Cdb::new(list);
    let declared = usize::from(p.be16(2));
    let available = list.len() - UNMAP_HEADER;
    let count = declared.min(available) / UNMAP_DESCRIPTOR;
    if count > MAX_UNMAP_DESCRIPTORS as usize {
        return Err(Sense::invalid_param_field(2, None));
    }
    let mut ranges = Vec::with_capacity(count);
    let mut total: u64 = 0;
    for i in 0..count {
        let at = UNMAP_HEADER + i * UNMAP_DESCRIPTOR;
        let lba = p.be64(at);
        let blocks = u64::from(p.be32(at + 8));
        let end = lba.checked_add(blocks).ok_or_else(lba_out_of_range)?;
        if end > num_blocks {
            return Err(lba_out_of_range());
        }
        total = total.saturating_add(blocks);
        if total > u64::from(MAX_UNMAP_LBA_COUNT) {
            return Err(Sense::invalid_param_field(at + 8, None));
        }
        if blocks > 0 {
            ranges.push(UnmapRange { lba, blocks });
        }
    }
    Ok(ranges)
}

/// Deallocates `blocks` blocks from `lba` under the range's exclusive lock.
fn deallocate(lu: &LogicalUnit, lba: u64, blocks: u64) -> Result<(), Sense> {
    let bs = block_size(lu);
    let offset = lba.checked_mul(bs).ok_or_else(lba_out_of_range)?;
    let len = blocks.checked_mul(bs).ok_or_else(lba_out_of_range)?;
    let _range = lu.lba_locks.exclusive(lba, blocks)?;
    lu.backstore.unmap(offset, len)?;
    Ok(())
}

/// UNMAP (SBC-3 §5.28). Refused as an unsupported command when LBPU is
/// clear: on a fully provisioned LUN, or a thin one configured without it.
pub(crate) fn unmap(ctx: &Ctx<'_>) -> Result<Outcome, Sense> {
    let lu = ctx.lu()?;
    if !limits::unmap_supported(lu) {
        return Err(Sense::illegal(Asc::INVALID_COMMAND_OPERATION_CODE));
    }
    let param_len = usize::from(ctx.cdb.be16(7));
    let data = &ctx.cmd.data_out;
    let list = data.get(..param_len).unwrap_or(data);
    if list.len() < param_len && list.len() < UNMAP_HEADER {
        // The initiator sent less than the header it announced.
        return Err(param_length_error());
    }
    let ranges = parse_unmap_list(list, lu.geometry().num_blocks)?;
    for r in ranges {
        deallocate(lu, r.lba, r.blocks)?;
    }
    Ok(Outcome::data_out(param_len as u64))
}

/// WRITE SAME(10/16) CDB fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct WriteSame {
    lba: u64,
    /// NUMBER OF LOGICAL BLOCKS as sent; zero means "to the last LBA".
    blocks: u64,
    /// Byte offset of NUMBER OF LOGICAL BLOCKS, for field pointers.
    len_at: usize,
    unmap: bool,
    /// SBC-4 NDOB: no Data-Out buffer, the block is all zeros.
    ndob: bool,
}

fn decode_write_same(cdb: Cdb<'_>) -> WriteSame {
    let unmap = cdb.bit(1, 0x08);
    if cdb.opcode() == 0x41 {
        WriteSame {
            lba: u64::from(cdb.be32(2)),
            blocks: u64::from(cdb.be16(7)),
            len_at: 7,
            unmap,
            ndob: false,
        }
    } else {
        WriteSame {
            lba: cdb.be64(2),
            blocks: u64::from(cdb.be32(10)),
            len_at: 10,
            unmap,
            ndob: cdb.bit(1, 0x01),
        }
    }
}

/// Resolves the range of a WRITE SAME: range first (LOGICAL BLOCK ADDRESS
/// OUT OF RANGE), then MAXIMUM WRITE SAME LENGTH (INVALID FIELD IN CDB).
/// Returns the number of blocks to write.
fn write_same_blocks(lu: &LogicalUnit, ws: &WriteSame) -> Result<u64, Sense> {
    let num_blocks = lu.geometry().num_blocks;
    let blocks = if ws.blocks == 0 {
        // WSNZ=0: from LBA to the last logical block.
        if ws.lba >= num_blocks {
            return Err(lba_out_of_range());
        }
        num_blocks - ws.lba
    } else {
        let end = ws.lba.checked_add(ws.blocks).ok_or_else(lba_out_of_range)?;
        if ws.lba >= num_blocks || end > num_blocks {
            return Err(lba_out_of_range());
        }
        ws.blocks
    };
    if blocks > limits::max_write_same_blocks(lu) {
        return Err(Sense::invalid_cdb_field(ws.len_at, None));
    }
    Ok(blocks)
}

/// The one logical block to replicate: exactly one block of Data-Out, or
/// zeros with NDOB. Any other Data-Out size is refused (INVALID FIELD IN
/// CDB at NUMBER OF LOGICAL BLOCKS), as the data cannot be the block the
/// CDB describes.
fn write_same_pattern(ctx: &Ctx<'_>, ws: &WriteSame, bs: u64) -> Result<Vec<u8>, Sense> {
    let data = &ctx.cmd.data_out;
    if ws.ndob {
        if !data.is_empty() {
            return Err(Sense::invalid_cdb_field(1, Some(0)));
        }
        return Ok(vec![0u8; bs as usize]);
    }
    if data.len() as u64 != bs {
        return Err(Sense::invalid_cdb_field(ws.len_at, None));
    }
    Ok(data.to_vec())
}

/// Writes `pattern` over the range: through the backstore's WRITE SAME
/// when it has one, else in bounded batches of plain writes.
fn replicate(lu: &LogicalUnit, pattern: &[u8], offset: u64, len: u64) -> Result<(), Sense> {
    if lu.backstore.supports_write_same() {
        lu.backstore.write_same(pattern, offset, len)?;
        return Ok(());
    }
    let bs = pattern.len().max(1) as u64;
    let batch = (u64::from(MAX_TRANSFER_BYTES) / bs).max(1) * bs;
    let first = usize::try_from(batch.min(len)).map_err(|_| lba_out_of_range())?;
    let tiled: Vec<u8> = pattern.iter().copied().cycle().take(first).collect();
    let mut done = 0u64;
    while done < len {
        let n = batch.min(len - done);
        let chunk = tiled.get(..n as usize).unwrap_or(&tiled);
        lu.backstore.write_at(chunk, offset + done, false)?;
        done += n;
    }
    Ok(())
}

/// WRITE SAME(10/16). On a thin LUN the range is deallocated when UNMAP is
/// set (whatever the block holds: deallocated blocks then read as zeros,
/// LBPRZ=1) or when the block is all zeros; otherwise the block is
/// written to every LBA. UNMAP on a fully provisioned LUN is refused
/// (LBPWS=LBPWS10=0, SBC-4 §5.49).
pub(crate) fn write_same(ctx: &Ctx<'_>) -> Result<Outcome, Sense> {
    let lu = ctx.lu()?;
    let ws = decode_write_same(ctx.cdb);
    let thin = limits::lbp_enabled(lu);
    if ws.unmap && !thin {
        return Err(Sense::invalid_cdb_field(1, Some(3)));
    }
    let bs = block_size(lu);
    let pattern = write_same_pattern(ctx, &ws, bs)?;
    let blocks = write_same_blocks(lu, &ws)?;
    let offset = ws.lba.checked_mul(bs).ok_or_else(lba_out_of_range)?;
    let len = blocks.checked_mul(bs).ok_or_else(lba_out_of_range)?;
    let zeros = pattern.iter().all(|&b| b == 0);
    if thin && (ws.unmap || zeros) {
        deallocate(lu, ws.lba, blocks)?;
    } else {
        let _range = lu.lba_locks.exclusive(ws.lba, blocks)?;
        replicate(lu, &pattern, offset, len)?;
        if !lu.mode().write_cache {
            lu.backstore.flush()?;
        }
    }
    lu.stats.count_write(len);
    Ok(Outcome::data_out(if ws.ndob { 0 } else { bs }))
}

/// One LBA status descriptor's worth: a run of blocks with one status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct StatusRun {
    blocks: u64,
    mapped: bool,
}

fn push_run(runs: &mut Vec<StatusRun>, blocks: u64, mapped: bool) {
    if blocks == 0 {
        return;
    }
    match runs.last_mut() {
        Some(last) if last.mapped == mapped => last.blocks += blocks,
        _ => runs.push(StatusRun { blocks, mapped }),
    }
}

/// Converts a byte allocation map of `total` bytes (starting on a block
/// boundary) into block runs: a block is deallocated only when it lies
/// entirely inside a hole; any block holding some data is mapped.
fn block_runs(map: &[Extent], total: u64, bs: u64) -> Vec<StatusRun> {
    let bs = bs.max(1);
    let mut runs = Vec::new();
    let mut pos = 0u64;
    let mut emitted = 0u64;
    for e in map {
        let end = pos.saturating_add(e.len);
        if !e.mapped {
            let first = pos.div_ceil(bs);
            let last = end / bs;
            if last > first {
                push_run(&mut runs, first.saturating_sub(emitted), true);
                push_run(&mut runs, last - first, false);
                emitted = last;
            }
        }
        pos = end;
    }
    push_run(&mut runs, (total / bs).saturating_sub(emitted), true);
    runs
}

/// Provisioning runs from `lba` on, at most `max_runs` of them, scanning
/// the allocation map a window at a time. A fully provisioned LUN is one
/// mapped run (SBC-3 §5.7.3: status 0h for every LBA).
fn status_runs(lu: &LogicalUnit, lba: u64, max_runs: usize) -> Result<Vec<StatusRun>, Sense> {
    let g = lu.geometry();
    let bs = block_size(lu);
    // A descriptor's NUMBER OF LOGICAL BLOCKS is 32 bits wide.
    let span = (g.num_blocks - lba).min(u64::from(u32::MAX));
    if !limits::lbp_enabled(lu) {
        return Ok(vec![StatusRun {
            blocks: span,
            mapped: true,
        }]);
    }
    let window_blocks = (MAP_WINDOW_BYTES / bs).max(1);
    let mut runs: Vec<StatusRun> = Vec::new();
    let mut done = 0u64;
    while done < span {
        let blocks = window_blocks.min(span - done);
        let offset = (lba + done).checked_mul(bs).ok_or_else(lba_out_of_range)?;
        let len = blocks.checked_mul(bs).ok_or_else(lba_out_of_range)?;
        let map = lu.backstore.extents(offset, len)?;
        for run in block_runs(&map, len, bs) {
            push_run(&mut runs, run.blocks, run.mapped);
        }
        done += blocks;
        // The last run may still grow into the next window.
        if runs.len() > max_runs {
            break;
        }
    }
    runs.truncate(max_runs.max(1));
    Ok(runs)
}

/// GET LBA STATUS parameter data (SBC-3 §5.7.2): header, then one
/// 16-byte descriptor per run, the first starting at `lba`.
fn lba_status_data(lba: u64, runs: &[StatusRun]) -> Vec<u8> {
    let len = u32::try_from(4 + runs.len() * 16).unwrap_or(u32::MAX);
    let mut data = Vec::with_capacity(8 + runs.len() * 16);
    data.extend_from_slice(&len.to_be_bytes());
    data.extend_from_slice(&[0; 4]);
    let mut at = lba;
    for run in runs {
        let blocks = u32::try_from(run.blocks).unwrap_or(u32::MAX);
        data.extend_from_slice(&at.to_be_bytes());
        data.extend_from_slice(&blocks.to_be_bytes());
        let status = if run.mapped {
            STATUS_MAPPED
        } else {
            STATUS_DEALLOCATED
        };
        data.extend_from_slice(&[status, 0, 0, 0]);
        at = at.saturating_add(u64::from(blocks));
    }
    data
}

/// GET LBA STATUS (SBC-3 §5.7): SERVICE ACTION IN(16), service action 12h.
/// As many descriptors as the allocation length holds (at least one).
pub(crate) fn get_lba_status(ctx: &Ctx<'_>) -> Result<Outcome, Sense> {
    let lu = ctx.lu()?;
    let lba = ctx.cdb.be64(2);
    let alloc_len = ctx.cdb.be32(10);
    if lba >= lu.geometry().num_blocks {
        return Err(lba_out_of_range());
    }
    let max_runs = (alloc_len.saturating_sub(8) / 16).max(1) as usize;
    let runs = status_runs(lu, lba, max_runs)?;
    Ok(Outcome::alloc(
        lba_status_data(lba, &runs),
        u64::from(alloc_len),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(descriptor_bytes: u16) -> Vec<u8> {
        let mut h = (descriptor_bytes + 6).to_be_bytes().to_vec();
        h.extend_from_slice(&descriptor_bytes.to_be_bytes());
        h.extend_from_slice(&[0; 4]);
        h
    }

    fn descriptor(lba: u64, blocks: u32) -> Vec<u8> {
        let mut d = lba.to_be_bytes().to_vec();
        d.extend_from_slice(&blocks.to_be_bytes());
        d.extend_from_slice(&[0; 4]);
        d
    }

    #[test]
    fn unmap_list_parses_and_drops_empty_descriptors() {
        let mut list = header(48);
        list.extend(descriptor(0, 8));
        list.extend(descriptor(100, 0));
        list.extend(descriptor(1000, 24));
        let r = parse_unmap_list(&list, 1024).expect("valid list");
        assert_eq!(
            r,
            vec![
                UnmapRange { lba: 0, blocks: 8 },
                UnmapRange {
                    lba: 1000,
                    blocks: 24
                }
            ]
        );
        // No descriptors, and an empty list.
        assert_eq!(parse_unmap_list(&header(0), 1024), Ok(Vec::new()));
        assert_eq!(parse_unmap_list(&[], 1024), Ok(Vec::new()));
        // Zero blocks at the end of the LUN is not an error.
        let mut end = header(16);
        end.extend(descriptor(1024, 0));
        assert_eq!(parse_unmap_list(&end, 1024), Ok(Vec::new()));
    }

    #[test]
    fn unmap_list_errors() {
        let e = parse_unmap_list(&[0, 6, 0], 1024).expect_err("short header");
        assert_eq!(e.asc, Asc::PARAMETER_LIST_LENGTH_ERROR);
        let mut oob = header(16);
        oob.extend(descriptor(1020, 5));
        let e = parse_unmap_list(&oob, 1024).expect_err("past the end");
        assert_eq!(e.asc, Asc::LBA_OUT_OF_RANGE);
        let mut wrap = header(16);
        wrap.extend(descriptor(u64::MAX, 2));
        assert!(parse_unmap_list(&wrap, 1024).is_err());
        let mut big = header(32);
        big.extend(descriptor(0, MAX_UNMAP_LBA_COUNT));
        big.extend(descriptor(0, 1));
        let e = parse_unmap_list(&big, u64::MAX).expect_err("too many blocks");
        assert_eq!(e.asc, Asc::INVALID_FIELD_IN_PARAMETER_LIST);
        assert_eq!(e.field.map(|f| (f.in_cdb, f.byte)), Some((false, 32)));
    }

    #[test]
    fn unmap_list_counts_only_complete_descriptors() {
        // Declared 40 bytes: two whole descriptors and half of a third.
        let mut list = header(40);
        list.extend(descriptor(0, 1));
        list.extend(descriptor(2, 1));
        list.extend(descriptor(4, 1));
        assert_eq!(parse_unmap_list(&list, 16).map(|r| r.len()), Ok(2));
        // Declared more than was sent: only what is present counts.
        let mut short = header(64);
        short.extend(descriptor(0, 1));
        assert_eq!(parse_unmap_list(&short, 16).map(|r| r.len()), Ok(1));
    }

    #[test]
    fn write_same_fields() {
        let ws = decode_write_same(Cdb::new(&[0x41, 0x08, 0, 0, 1, 0, 0, 0, 3, 0]));
        assert_eq!(
            ws,
            WriteSame {
                lba: 256,
                blocks: 3,
                len_at: 7,
                unmap: true,
                ndob: false
            }
        );
        let mut c16 = [0u8; 16];
        c16[0] = 0x93;
        c16[1] = 0x01;
        c16[2..10].copy_from_slice(&7u64.to_be_bytes());
        c16[10..14].copy_from_slice(&9u32.to_be_bytes());
        let ws = decode_write_same(Cdb::new(&c16));
        assert_eq!(
            (ws.lba, ws.blocks, ws.len_at, ws.unmap, ws.ndob),
            (7, 9, 10, false, true)
        );
    }

    fn ext(len: u64, mapped: bool) -> Extent {
        Extent { len, mapped }
    }

    #[test]
    fn block_runs_round_inward_for_holes() {
        // 512-byte blocks: data 1000 bytes, hole 3096, data 4096.
        let map = [ext(1000, true), ext(3096, false), ext(4096, true)];
        let runs = block_runs(&map, 8192, 512);
        // Block 0 and 1 hold data (1000 bytes spill into block 1); blocks
        // 2..8 are inside the hole; blocks 8..16 are data.
        assert_eq!(
            runs,
            vec![
                StatusRun {
                    blocks: 2,
                    mapped: true
                },
                StatusRun {
                    blocks: 6,
                    mapped: false
                },
                StatusRun {
                    blocks: 8,
                    mapped: true
                }
            ]
        );
        // A hole smaller than a block leaves everything mapped.
        let runs = block_runs(
            &[ext(100, true), ext(300, false), ext(624, true)],
            1024,
            512,
        );
        assert_eq!(
            runs,
            vec![StatusRun {
                blocks: 2,
                mapped: true
            }]
        );
        assert!(block_runs(&[], 0, 512).is_empty());
    }

    #[test]
    fn lba_status_layout() {
        let runs = [
            StatusRun {
                blocks: 8,
                mapped: false,
            },
            StatusRun {
                blocks: 1 << 33,
                mapped: true,
            },
        ];
        let d = lba_status_data(5, &runs);
        assert_eq!(d.len(), 8 + 32);
        assert_eq!(&d[..8], &[0, 0, 0, 36, 0, 0, 0, 0]);
        assert_eq!(&d[8..24], &[0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 8, 1, 0, 0, 0]);
        // Clamped to 32 bits; the next descriptor starts after it.
        assert_eq!(
            &d[24..40],
            &[0, 0, 0, 0, 0, 0, 0, 13, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0]
        );
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn unmap_parser_never_panics(list in proptest::collection::vec(any::<u8>(), 0..200), blocks: u64) {
                if let Ok(ranges) = parse_unmap_list(&list, blocks) {
                    for r in ranges {
                        prop_assert!(r.blocks > 0);
                        prop_assert!(r.lba.checked_add(r.blocks).is_some_and(|e| e <= blocks));
                    }
                }
            }

            #[test]
            fn unmap_list_round_trips(descs in proptest::collection::vec((0u64..1000, 0u32..50), 0..20)) {
                let mut list = header((descs.len() * 16) as u16);
                for &(lba, n) in &descs {
                    list.extend(descriptor(lba, n));
                }
                let parsed = parse_unmap_list(&list, 2000).expect("valid list");
                let want: Vec<_> = descs
                    .iter()
                    .filter(|d| d.1 > 0)
                    .map(|&(lba, n)| UnmapRange { lba, blocks: u64::from(n) })
                    .collect();
                prop_assert_eq!(parsed, want);
            }

            #[test]
            fn block_runs_cover_the_range(lens in proptest::collection::vec((1u64..5000, any::<bool>()), 0..12)) {
                let mut map = Vec::new();
                for &(len, mapped) in &lens {
                    map.push(ext(len, mapped));
                }
                let total: u64 = lens.iter().map(|l| l.0).sum();
                let runs = block_runs(&map, total, 512);
                prop_assert_eq!(runs.iter().map(|r| r.blocks).sum::<u64>(), total / 512);
                for pair in runs.windows(2) {
                    prop_assert_ne!(pair[0].mapped, pair[1].mapped);
                }
            }
        }
    }
}
