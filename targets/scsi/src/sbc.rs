//! Block commands (SBC-3 §5): READ/WRITE 6/10/12/16, VERIFY and WRITE AND
//! VERIFY 10/12/16, SYNCHRONIZE CACHE 10/16 and READ CAPACITY 10/16
//! (START STOP UNIT is in `medium`).
//!
//! Checks run in SBC-3 order: transfer length against the block limits
//! (INVALID FIELD IN CDB), then the LBA range (LOGICAL BLOCK ADDRESS OUT OF
//! RANGE, also for zero-length transfers starting past the end), then I/O.
//!
//! Residual rules (SAM-5 §5.4.3, as libiscsi's iSCSIResiduals suite
//! expects): a read transfers at most the initiator's Data-In buffer and
//! only that much is read from the medium; a write stores the whole logical
//! blocks present in the Data-Out buffer, up to the CDB's transfer length,
//! and completes with GOOD, the residual telling the initiator the rest.
//!
//! Medium access holds the LBA range lock of its extent (`lba_lock`):
//! shared for reads and VERIFY, exclusive for writes, so COMPARE AND WRITE,
//! ORWRITE and WRITE ATOMIC stay atomic against these commands.

use rustgt_backstore::IoBuf;
use rustgt_backstore::StreamHint;

use crate::cdb::Cdb;
use crate::ctx::Ctx;
use crate::lun::LogicalUnit;
use crate::max_transfer::{max_transfer_blocks, MAX_TRANSFER_BYTES};
use crate::outcome::Outcome;
use crate::sense::{Asc, Sense, SenseKey};

/// LBA / transfer length fields of a medium-access CDB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Extent {
    pub lba: u64,
    pub blocks: u64,
    /// Byte offset of the TRANSFER LENGTH field, for field pointers.
    pub len_at: usize,
}

/// Decodes the LBA and length fields by CDB size (SBC-3 §5.*).
pub(crate) fn extent(cdb: Cdb<'_>) -> Extent {
    match cdb.opcode() >> 5 {
        // Group 0, 6-byte: 21-bit LBA, 8-bit length where 0 means 256.
        0 => {
            let lba = (u64::from(cdb.byte(1) & 0x1F) << 16) | u64::from(cdb.be16(2));
            let blocks = match cdb.byte(4) {
                0 => 256,
                n => u64::from(n),
            };
            Extent {
                lba,
                blocks,
                len_at: 4,
            }
        }
        // Groups 1 and 2, 10-byte.
        1 | 2 => Extent {
            lba: u64::from(cdb.be32(2)),
            blocks: u64::from(cdb.be16(7)),
            len_at: 7,
        },
        // Group 5, 12-byte.
        5 => Extent {
            lba: u64::from(cdb.be32(2)),
            blocks: u64::from(cdb.be32(6)),
            len_at: 6,
        },
        // Group 4, 16-byte.
        _ => Extent {
            lba: cdb.be64(2),
            blocks: u64::from(cdb.be32(10)),
            len_at: 10,
        },
    }
}

pub(crate) fn lba_out_of_range() -> Sense {
    Sense::illegal(Asc::LBA_OUT_OF_RANGE)
}

/// Block size of the unit, never zero.
pub(crate) fn block_size(lu: &LogicalUnit) -> u64 {
    u64::from(lu.geometry().block_size.max(1))
}

/// Refuses transfers above the block limits VPD MAXIMUM TRANSFER LENGTH.
pub(crate) fn check_max_transfer(lu: &LogicalUnit, ext: Extent) -> Result<(), Sense> {
    if ext.blocks > u64::from(max_transfer_blocks(lu.geometry().block_size)) {
        return Err(Sense::invalid_cdb_field(ext.len_at, None));
    }
    Ok(())
}

/// Checks the extent against the capacity; returns (byte offset, bytes).
pub(crate) fn check_range(lu: &LogicalUnit, ext: Extent) -> Result<(u64, u64), Sense> {
    let p = place(lu, ext, false)?;
    Ok((p.offset, p.bytes))
}

/// Where a data transfer's extent lies on the medium.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Placed {
    /// Byte offset.
    pub offset: u64,
    /// Bytes the extent covers.
    pub bytes: u64,
    /// The unit's block size, never zero.
    pub bs: u64,
}

/// [`check_max_transfer`] (when `limit`) and [`check_range`] on one look
/// at the unit's geometry, which the data path would otherwise take
/// three times a command.
pub(crate) fn place(lu: &LogicalUnit, ext: Extent, limit: bool) -> Result<Placed, Sense> {
    let g = lu.geometry();
    if limit && ext.blocks > u64::from(max_transfer_blocks(g.block_size)) {
        return Err(Sense::invalid_cdb_field(ext.len_at, None));
    }
    let num_blocks = g.num_blocks;
    let end = ext
        .lba
        .checked_add(ext.blocks)
        .ok_or_else(lba_out_of_range)?;
    if ext.lba >= num_blocks || end > num_blocks {
        return Err(lba_out_of_range());
    }
    let bs = u64::from(g.block_size.max(1));
    let offset = ext.lba.checked_mul(bs).ok_or_else(lba_out_of_range)?;
    let bytes = ext.blocks.checked_mul(bs).ok_or_else(lba_out_of_range)?;
    Ok(Placed { offset, bytes, bs })
}

/// Whole blocks of `data`, at most `bytes` (the CDB's transfer length).
pub(crate) fn whole_blocks(data: &[u8], bytes: u64, bs: u64) -> &[u8] {
    let usable = (data.len() as u64).min(bytes) / bs * bs;
    data.get(..usable as usize).unwrap_or(&[])
}

/// Reads `len` bytes at `offset` from the medium.
/// The buffer comes from the pool unzeroed: the store fills all of it or
/// fails, and a failed read's buffer is never sent.
pub(crate) fn read_medium(
    lu: &LogicalUnit,
    offset: u64,
    len: u64,
    hint: StreamHint,
) -> Result<IoBuf, Sense> {
    let len = usize::try_from(len).map_err(|_| lba_out_of_range())?;
    Ok(lu.backstore.read_buf_hinted(offset, len, hint)?)
}

/// MISCOMPARE DURING VERIFY OPERATION, INFORMATION = offset into Data-Out.
pub(crate) fn miscompare(at: usize) -> Sense {
    Sense::new(SenseKey::MISCOMPARE, Asc::MISCOMPARE_DURING_VERIFY).with_information(at as u64)
}

/// Compares `expected` with the medium at `offset` (SBC-3 §5.30, BYTCHK=01b).
fn compare_medium(
    lu: &LogicalUnit,
    offset: u64,
    expected: &[u8],
    hint: StreamHint,
) -> Result<(), Sense> {
    let medium = read_medium(lu, offset, expected.len() as u64, hint)?;
    match medium.iter().zip(expected).position(|(a, b)| a != b) {
        Some(at) => Err(miscompare(at)),
        None => Ok(()),
    }
}

/// Compares every block of the extent with one block of `pattern`
/// (BYTCHK=11b), reading the medium in bounded chunks.
fn compare_pattern(
    lu: &LogicalUnit,
    offset: u64,
    bytes: u64,
    pattern: &[u8],
    hint: StreamHint,
) -> Result<(), Sense> {
    let bs = pattern.len().max(1);
    let chunk = (u64::from(MAX_TRANSFER_BYTES) / bs as u64).max(1) * bs as u64;
    let mut done = 0u64;
    while done < bytes {
        let len = chunk.min(bytes - done);
        let medium = read_medium(lu, offset + done, len, hint)?;
        for (i, block) in medium.chunks(bs).enumerate() {
            if let Some(at) = block.iter().zip(pattern).position(|(a, b)| a != b) {
                // Offset as if the pattern had been sent once per block.
                let base = usize::try_from(done).unwrap_or(usize::MAX);
                return Err(miscompare(base.saturating_add(i * bs + at)));
            }
        }
        done += len;
    }
    Ok(())
}

/// READ(6/10/12/16). DPO and FUA are accepted; FUA needs nothing extra as
/// the backstore never serves stale data.
pub(crate) fn read(ctx: &Ctx<'_>) -> Result<Outcome, Sense> {
    let lu = ctx.lu()?;
    let ext = extent(ctx.cdb);
    let Placed { offset, bytes, bs } = place(lu, ext, true)?;
    // Only what fits the Data-In buffer is transferred, so only that is read.
    let buffer = u64::from(ctx.cmd.data_in_len).div_ceil(bs) * bs;
    let _range = lu.lba_locks.shared(ext.lba, ext.blocks)?;
    let data = read_medium(lu, offset, bytes.min(buffer), ctx.hint)?;
    lu.stats.count_read(data.len() as u64);
    Ok(Outcome::read(data, bytes))
}

/// WRITE(6/10/12/16). FUA, or a disabled write cache, makes it durable.
pub(crate) fn write(ctx: &Ctx<'_>) -> Result<Outcome, Sense> {
    let lu = ctx.lu()?;
    let ext = extent(ctx.cdb);
    let Placed { offset, bytes, bs } = place(lu, ext, true)?;
    let data = whole_blocks(&ctx.cmd.data_out, bytes, bs);
    if !data.is_empty() {
        let _range = lu.lba_locks.exclusive(ext.lba, ext.blocks)?;
        let fua = ctx.cdb.bit(1, 0x08) || !lu.mode().write_cache;
        lu.backstore.write_at(data, offset, fua)?;
    }
    lu.stats.count_write(data.len() as u64);
    Ok(Outcome::data_out(bytes))
}

/// VERIFY(10/12/16). BYTCHK 00b checks the range only, 01b compares the
/// Data-Out buffer with the medium, 11b compares one block against every
/// block of the range; 10b is reserved.
pub(crate) fn verify(ctx: &Ctx<'_>) -> Result<Outcome, Sense> {
    let lu = ctx.lu()?;
    let ext = extent(ctx.cdb);
    let bs = block_size(lu);
    match (ctx.cdb.byte(1) >> 1) & 0x03 {
        0b00 => {
            check_range(lu, ext)?;
            Ok(Outcome::data_out(0))
        }
        0b01 => {
            check_max_transfer(lu, ext)?;
            let (offset, bytes) = check_range(lu, ext)?;
            let _range = lu.lba_locks.shared(ext.lba, ext.blocks)?;
            compare_medium(
                lu,
                offset,
                whole_blocks(&ctx.cmd.data_out, bytes, bs),
                ctx.hint,
            )?;
            Ok(Outcome::data_out(bytes))
        }
        0b11 => {
            check_max_transfer(lu, ext)?;
            let (offset, bytes) = check_range(lu, ext)?;
            let want = if ext.blocks == 0 { 0 } else { bs };
            if let Some(pattern) = ctx.cmd.data_out.get(..bs as usize).filter(|_| want > 0) {
                let _range = lu.lba_locks.shared(ext.lba, ext.blocks)?;
                compare_pattern(lu, offset, bytes, pattern, ctx.hint)?;
            }
            Ok(Outcome::data_out(want))
        }
        _ => Err(Sense::invalid_cdb_field(1, Some(2))),
    }
}

/// WRITE AND VERIFY(10/12/16): a FUA write (the data is on the medium
/// before it is verified), compared back when BYTCHK is set.
pub(crate) fn write_and_verify(ctx: &Ctx<'_>) -> Result<Outcome, Sense> {
    let lu = ctx.lu()?;
    let ext = extent(ctx.cdb);
    check_max_transfer(lu, ext)?;
    let (offset, bytes) = check_range(lu, ext)?;
    let data = whole_blocks(&ctx.cmd.data_out, bytes, block_size(lu));
    if !data.is_empty() {
        let _range = lu.lba_locks.exclusive(ext.lba, ext.blocks)?;
        lu.backstore.write_at(data, offset, true)?;
        if ctx.cdb.bit(1, 0x02) {
            compare_medium(lu, offset, data, ctx.hint)?;
        }
    }
    lu.stats.count_write(data.len() as u64);
    Ok(Outcome::data_out(bytes))
}

/// SYNCHRONIZE CACHE(10/16): flushes the whole store; a range beyond the
/// capacity is still an error (SBC-3 §5.26). IMMED is accepted and the
/// flush completes before the status anyway.
pub(crate) fn synchronize_cache(ctx: &Ctx<'_>) -> Result<Outcome, Sense> {
    let lu = ctx.lu()?;
    check_range(lu, extent(ctx.cdb))?;
    lu.backstore.flush()?;
    Ok(Outcome::none())
}

/// Returned LBA and PMI checks shared by READ CAPACITY 10 and 16: with
/// PMI=0 the LOGICAL BLOCK ADDRESS field must be zero (SBC-3 §5.15).
fn check_pmi(lba: u64, pmi: bool) -> Result<(), Sense> {
    if !pmi && lba != 0 {
        return Err(Sense::invalid_cdb_field(2, None));
    }
    Ok(())
}

/// READ CAPACITY(10) (SBC-3 §5.15): last LBA, FFFFFFFFh when it does not fit.
pub(crate) fn read_capacity10(ctx: &Ctx<'_>) -> Result<Outcome, Sense> {
    let lu = ctx.lu()?;
    check_pmi(u64::from(ctx.cdb.be32(2)), ctx.cdb.bit(8, 0x01))?;
    let g = lu.geometry();
    let last = g.num_blocks.saturating_sub(1);
    let returned = u32::try_from(last).unwrap_or(u32::MAX);
    let mut data = returned.to_be_bytes().to_vec();
    data.extend_from_slice(&g.block_size.to_be_bytes());
    Ok(Outcome::alloc(data, 8))
}

/// READ CAPACITY(16) (SBC-3 §5.16): no protection; LOGICAL BLOCKS PER
/// PHYSICAL BLOCK EXPONENT from the configured physical block size; a thin
/// LUN sets LBPME and LBPRZ (deallocated blocks read as zeros).
pub(crate) fn read_capacity16(ctx: &Ctx<'_>) -> Result<Outcome, Sense> {
    let lu = ctx.lu()?;
    check_pmi(ctx.cdb.be64(2), ctx.cdb.bit(14, 0x01))?;
    let g = lu.geometry();
    let mut data = vec![0u8; 32];
    data[..8].copy_from_slice(&g.num_blocks.saturating_sub(1).to_be_bytes());
    data[8..12].copy_from_slice(&g.block_size.to_be_bytes());
    data[13] = lu.phys_exp & 0x0F;
    if crate::limits::lbp_enabled(lu) {
        data[14] = 0x80 | 0x40; // LBPME, LBPRZ; lowest aligned LBA 0
    }
    Ok(Outcome::alloc(data, u64::from(ctx.cdb.be32(10))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extents_by_cdb_group() {
        let e = extent(Cdb::new(&[0x08, 0x1F, 0xFF, 0xFE, 0, 0]));
        assert_eq!(
            e,
            Extent {
                lba: 0x1F_FFFE,
                blocks: 256,
                len_at: 4
            }
        );
        let e = extent(Cdb::new(&[0x0A, 0xE1, 0, 2, 7, 0]));
        assert_eq!(
            e,
            Extent {
                lba: 0x01_0002,
                blocks: 7,
                len_at: 4
            }
        );
        let e = extent(Cdb::new(&[0x28, 0, 0, 0, 1, 0, 0, 0x01, 0x02, 0]));
        assert_eq!(
            e,
            Extent {
                lba: 256,
                blocks: 258,
                len_at: 7
            }
        );
        let e = extent(Cdb::new(&[0xA8, 0, 0, 0, 0, 9, 0, 1, 0, 0, 0, 0]));
        assert_eq!(
            e,
            Extent {
                lba: 9,
                blocks: 65536,
                len_at: 6
            }
        );
        let mut c16 = [0u8; 16];
        c16[0] = 0x88;
        c16[2..10].copy_from_slice(&u64::MAX.to_be_bytes());
        c16[10..14].copy_from_slice(&3u32.to_be_bytes());
        let e = extent(Cdb::new(&c16));
        assert_eq!(
            e,
            Extent {
                lba: u64::MAX,
                blocks: 3,
                len_at: 10
            }
        );
        // SYNCHRONIZE CACHE uses the same layouts.
        let e = extent(Cdb::new(&[0x35, 0, 0, 0, 0, 4, 0, 0, 2, 0]));
        assert_eq!(
            e,
            Extent {
                lba: 4,
                blocks: 2,
                len_at: 7
            }
        );
    }

    #[test]
    fn whole_blocks_only() {
        let data = [7u8; 1300];
        assert_eq!(whole_blocks(&data, 4096, 512).len(), 1024);
        assert_eq!(whole_blocks(&data, 512, 512).len(), 512);
        assert_eq!(whole_blocks(&data[..200], 512, 512).len(), 0);
    }
}
