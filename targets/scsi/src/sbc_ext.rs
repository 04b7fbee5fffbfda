//! Further block commands: COMPARE AND WRITE (SBC-3 §5.2), ORWRITE(16)
//! (SBC-3 §5.9), PRE-FETCH(10/16) (SBC-3 §5.10-5.11), READ DEFECT DATA
//! (10/12) (SBC-3 §5.18-5.19) and WRITE ATOMIC(16) (SBC-4 §5.48).
//!
//! Atomicity: COMPARE AND WRITE, ORWRITE and WRITE ATOMIC hold the
//! exclusive LBA lock of their range ([`crate::lba_lock`]) across their
//! whole read-compare-write (or read-modify-write, or write), and every
//! READ, WRITE, VERIFY, WRITE SAME and UNMAP takes the same locks, so no
//! other command can change, or see half of, those blocks meanwhile. Two
//! COMPARE AND WRITEs of the same blocks with the same compare data can
//! therefore never both succeed. Power-fail atomicity is the backstore's
//! (one positioned write per command), not promised beyond that.
//!
//! A unit that several gateways serve: COMPARE AND WRITE uses the store's
//! own atomic compare-and-write where it has one (RBD: one 512-byte
//! sector), atomic against every writer; otherwise it, and ORWRITE, take
//! the gateways' exclusion ([`rustgt_backstore::shared`]) first, so two
//! such commands on different gateways never interleave, then the range
//! lock here, then fence the blocks off on every other gateway
//! ([`crate::cluster::fence`]) for the read-compare-write, so no command
//! through another gateway (a plain WRITE included) runs on those blocks
//! meanwhile. The exclusion is taken before any range lock, so a gateway
//! answering a fence never waits for a command of its own that waits for
//! the exclusion.

use crate::ctx::Ctx;
use crate::limits::{self, MAX_COMPARE_AND_WRITE_BLOCKS};
use crate::lun::LogicalUnit;
use crate::outcome::Outcome;
use crate::sbc::{
    block_size, check_max_transfer, check_range, extent, miscompare, read_medium, whole_blocks,
    Extent,
};
use crate::sense::Sense;

/// Writes `data` at `offset`; FUA, or a disabled write cache, makes it
/// durable before status.
fn write_medium(ctx: &Ctx<'_>, lu: &LogicalUnit, data: &[u8], offset: u64) -> Result<(), Sense> {
    let fua = ctx.cdb.bit(1, 0x08) || !lu.mode().write_cache;
    lu.backstore.write_at(data, offset, fua)?;
    lu.stats.count_write(data.len() as u64);
    Ok(())
}

/// For a unit several gateways serve: excludes the other gateways'
/// read-modify-write sequences until the guard is dropped.
fn exclude_gateways(
    lu: &LogicalUnit,
) -> Result<Option<rustgt_backstore::shared::Exclusion>, Sense> {
    match lu.backstore.shared_state() {
        Some(sh) => Ok(Some(sh.exclude()?)),
        None => Ok(None),
    }
}

/// Offset of the first byte where `a` and `b` differ.
fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x != y)
}

/// COMPARE AND WRITE (SBC-3 §5.2): the Data-Out buffer holds NUMBER OF
/// LOGICAL BLOCKS blocks of verify data then as many of write data. Under
/// the range's exclusive lock the medium is compared with the verify data;
/// on a mismatch nothing is written and the command ends with MISCOMPARE,
/// MISCOMPARE DURING VERIFY OPERATION, INFORMATION = offset of the first
/// differing byte. A Data-Out buffer of any other size is refused (INVALID
/// FIELD IN CDB at NUMBER OF LOGICAL BLOCKS): the compare would be
/// meaningless. Zero blocks is a no-op (§5.2: not an error) whose Data-Out
/// is ignored, unless that buffer is larger than any COMPARE AND WRITE may
/// carry (twice MAXIMUM COMPARE AND WRITE LENGTH): then the one-byte
/// NUMBER OF LOGICAL BLOCKS cannot be describing it (e.g. 256 blocks
/// wrapped to 0) and it is refused as above.
pub(crate) fn compare_and_write(ctx: &Ctx<'_>) -> Result<Outcome, Sense> {
    let lu = ctx.lu()?;
    let ext = Extent {
        lba: ctx.cdb.be64(2),
        blocks: u64::from(ctx.cdb.byte(13)),
        len_at: 13,
    };
    let max = u64::from(MAX_COMPARE_AND_WRITE_BLOCKS);
    let data = &ctx.cmd.data_out;
    if ext.blocks > max || data.len() as u64 > 2 * max * block_size(lu) {
        return Err(Sense::invalid_cdb_field(ext.len_at, None));
    }
    let (offset, bytes) = check_range(lu, ext)?;
    if ext.blocks == 0 {
        return Ok(Outcome::data_out(0));
    }
    if data.len() as u64 != bytes.saturating_mul(2) {
        return Err(Sense::invalid_cdb_field(ext.len_at, None));
    }
    let (verify, write) = data.split_at(bytes as usize);
    {
        let _range = lu.lba_locks.atomic(ext.lba, ext.blocks)?;
        // The store's own atomic compare-and-write where it has one: atomic
        // against every writer of the backing, other gateways' included.
        if let Some(done) = lu.backstore.compare_and_write(offset, verify, write) {
            if let Some(at) = done? {
                return Err(miscompare(at));
            }
            lu.stats.count_write(bytes);
            return Ok(Outcome::data_out(bytes * 2));
        }
    }
    // Other gateways' COMPARE AND WRITEs wait meanwhile; then the range
    // here, then on every other gateway.
    let gateways = exclude_gateways(lu)?;
    let _range = lu.lba_locks.atomic(ext.lba, ext.blocks)?;
    let _fence = crate::cluster::fence(lu, gateways.as_ref(), ext.lba, ext.blocks)?;
    let medium = read_medium(lu, offset, bytes, ctx.hint)?;
    if let Some(at) = first_difference(&medium, verify) {
        return Err(miscompare(at));
    }
    write_medium(ctx, lu, write, offset)?;
    Ok(Outcome::data_out(bytes * 2))
}

/// ORWRITE(16) (SBC-3 §5.9): each block becomes the bitwise OR of its
/// current contents and the Data-Out block, as one read-modify-write under
/// the range's exclusive lock. Like WRITE, the whole blocks present in the
/// Data-Out buffer (up to the transfer length) are processed.
pub(crate) fn orwrite(ctx: &Ctx<'_>) -> Result<Outcome, Sense> {
    let lu = ctx.lu()?;
    let ext = extent(ctx.cdb);
    check_max_transfer(lu, ext)?;
    let (offset, bytes) = check_range(lu, ext)?;
    let bs = block_size(lu);
    let data = whole_blocks(&ctx.cmd.data_out, bytes, bs);
    if !data.is_empty() {
        let blocks = data.len() as u64 / bs;
        let gateways = exclude_gateways(lu)?;
        let _range = lu.lba_locks.atomic(ext.lba, blocks)?;
        let _fence = crate::cluster::fence(lu, gateways.as_ref(), ext.lba, blocks)?;
        let mut medium = read_medium(lu, offset, data.len() as u64, ctx.hint)?;
        for (m, d) in medium.iter_mut().zip(data) {
            *m |= d;
        }
        write_medium(ctx, lu, &medium, offset)?;
    }
    Ok(Outcome::data_out(bytes))
}

/// PRE-FETCH(10/16) (SBC-3 §5.10): checks the range and returns GOOD. The
/// device server keeps no cache of its own (the backstore's page cache is
/// outside its control), so it can never promise the blocks are resident:
/// that is the "insufficient cache capacity" case, GOOD rather than
/// CONDITION MET, with IMMED set or not. A PREFETCH LENGTH of zero means
/// "to the last LBA" and needs a valid starting LBA.
pub(crate) fn prefetch(ctx: &Ctx<'_>) -> Result<Outcome, Sense> {
    let lu = ctx.lu()?;
    check_range(lu, extent(ctx.cdb))?;
    Ok(Outcome::none())
}

/// DEFECT LIST FORMAT values defined by SBC-3 table 67 (111b is reserved).
const MAX_DEFECT_FORMAT: u8 = 0b110;

/// READ DEFECT DATA(10/12) (SBC-3 §5.18, §5.19): a virtual medium has no
/// defects, so the primary and grown lists are valid and empty, in the
/// requested format. PLISTV/GLISTV echo what was requested.
pub(crate) fn read_defect_data(ctx: &Ctx<'_>) -> Result<Outcome, Sense> {
    ctx.lu()?;
    let cdb = ctx.cdb;
    let twelve = cdb.opcode() == 0xB7;
    let flags_at = if twelve { 1 } else { 2 };
    let flags = cdb.byte(flags_at) & 0x1F;
    if flags & 0x07 > MAX_DEFECT_FORMAT {
        return Err(Sense::invalid_cdb_field(flags_at, Some(2)));
    }
    let (data, alloc_len) = if twelve {
        // Header: reserved, flags, GENERATION CODE (0), DEFECT LIST LENGTH.
        (vec![0, flags, 0, 0, 0, 0, 0, 0], u64::from(cdb.be32(6)))
    } else {
        // Header: reserved, flags, DEFECT LIST LENGTH.
        (vec![0, flags, 0, 0], u64::from(cdb.be16(7)))
    };
    Ok(Outcome::alloc(data, alloc_len))
}

/// WRITE ATOMIC(16) (SBC-4 §5.48): the blocks are written as one unit
/// under the range's exclusive lock. Checks, in order: TRANSFER LENGTH
/// against MAXIMUM ATOMIC TRANSFER LENGTH, the LBA range, then ATOMIC
/// ALIGNMENT of the LBA and ATOMIC TRANSFER LENGTH GRANULARITY of the
/// length (INVALID FIELD IN CDB). ATOMIC BOUNDARY must be zero (refused by
/// the usage data). All the blocks must be in the Data-Out buffer: part of
/// an atomic write would not be atomic.
pub(crate) fn write_atomic(ctx: &Ctx<'_>) -> Result<Outcome, Sense> {
    let lu = ctx.lu()?;
    let ext = Extent {
        lba: ctx.cdb.be64(2),
        blocks: u64::from(ctx.cdb.be16(12)),
        len_at: 12,
    };
    if ext.blocks > u64::from(limits::max_atomic_blocks(lu)) {
        return Err(Sense::invalid_cdb_field(ext.len_at, None));
    }
    let (offset, bytes) = check_range(lu, ext)?;
    let unit = u64::from(limits::atomic_unit(lu));
    if ext.lba % unit != 0 {
        return Err(Sense::invalid_cdb_field(2, None));
    }
    if ext.blocks % unit != 0 {
        return Err(Sense::invalid_cdb_field(ext.len_at, None));
    }
    if ext.blocks == 0 {
        return Ok(Outcome::data_out(0));
    }
    let Some(data) = ctx.cmd.data_out.get(..bytes as usize) else {
        return Err(Sense::invalid_cdb_field(ext.len_at, None));
    };
    let _range = lu.lba_locks.atomic(ext.lba, ext.blocks)?;
    write_medium(ctx, lu, data, offset)?;
    Ok(Outcome::data_out(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_difference_offsets() {
        assert_eq!(first_difference(b"abcd", b"abcd"), None);
        assert_eq!(first_difference(b"abcd", b"abXd"), Some(2));
        assert_eq!(first_difference(b"", b""), None);
    }
}
