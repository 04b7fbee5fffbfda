//! The block limits this core enforces and reports in the Block Limits VPD
//! page (SBC-4 §6.6.4, page B0h) and the Logical Block Provisioning VPD
//! page (SBC-4 §6.6.6, page B2h). Each limit is computed in one place and
//! used both by the command that enforces it and by the page that reports
//! it, so the two cannot disagree.

use crate::lun::LogicalUnit;
use crate::max_transfer::max_transfer_blocks;

/// MAXIMUM COMPARE AND WRITE LENGTH, in logical blocks (a one-byte field).
pub(crate) const MAX_COMPARE_AND_WRITE_BLOCKS: u8 = 255;

/// MAXIMUM UNMAP LBA COUNT: blocks one UNMAP command may deallocate in
/// total. Hole punching is cheap, so this is generous.
pub(crate) const MAX_UNMAP_LBA_COUNT: u32 = 1 << 20;

/// MAXIMUM UNMAP BLOCK DESCRIPTOR COUNT: as many 16-byte descriptors as a
/// 16-bit PARAMETER LIST LENGTH can carry after the 8-byte header.
pub(crate) const MAX_UNMAP_DESCRIPTORS: u32 = (u16::MAX as u32 - 8) / 16;

/// MAXIMUM WRITE SAME LENGTH in logical blocks: bounds the time one WRITE
/// SAME of a non-zero pattern spends writing (32 MiB at 512-byte blocks).
/// Kept below 65536, because libiscsi's WriteSame16.Unmap follows a larger
/// limit with a 65536-block WRITE(16) that ignores MAXIMUM TRANSFER LENGTH.
const MAX_WRITE_SAME_BLOCKS: u64 = 0xFFFF;

/// Smallest atomic write unit in bytes; see [`atomic_unit`].
const MIN_ATOMIC_UNIT_BYTES: u32 = 8192;

/// Logical blocks per physical block (READ CAPACITY(16) LBPPBE).
pub(crate) fn blocks_per_physical(lu: &LogicalUnit) -> u32 {
    1u32 << (lu.phys_exp & 0x0F)
}

/// OPTIMAL UNMAP GRANULARITY: one physical block, the unit the backstore
/// deallocates without zeroing partial blocks.
pub(crate) fn unmap_granularity(lu: &LogicalUnit) -> u32 {
    blocks_per_physical(lu)
}

/// MAXIMUM WRITE SAME LENGTH in logical blocks.
pub(crate) fn max_write_same_blocks(_lu: &LogicalUnit) -> u64 {
    MAX_WRITE_SAME_BLOCKS
}

/// ATOMIC ALIGNMENT and ATOMIC TRANSFER LENGTH GRANULARITY, in logical
/// blocks: a physical block, and never less than 8 KiB or two logical
/// blocks, so that an atomic write is always a whole number of the units
/// the backstore writes in one piece. Never more than the largest transfer.
pub(crate) fn atomic_unit(lu: &LogicalUnit) -> u32 {
    let bs = lu.geometry().block_size.max(1);
    let unit = blocks_per_physical(lu)
        .max(MIN_ATOMIC_UNIT_BYTES / bs)
        .max(2);
    unit.min(max_transfer_blocks(bs).max(1))
}

/// MAXIMUM ATOMIC TRANSFER LENGTH: the largest transfer, rounded down to a
/// whole number of atomic units.
pub(crate) fn max_atomic_blocks(lu: &LogicalUnit) -> u32 {
    let unit = atomic_unit(lu);
    max_transfer_blocks(lu.geometry().block_size) / unit * unit
}

/// Whether the LUN does logical block provisioning management: configured
/// thin and backed by a store that can deallocate.
pub(crate) fn lbp_enabled(lu: &LogicalUnit) -> bool {
    lu.thin && lu.backstore.supports_unmap()
}

/// Whether the UNMAP command is supported (LBPU): a thin LUN that has not
/// been configured to deallocate through WRITE SAME only.
pub(crate) fn unmap_supported(lu: &LogicalUnit) -> bool {
    lbp_enabled(lu) && lu.unmap_command
}

fn put_u32(body: &mut [u8], at: usize, v: u32) {
    if let Some(dst) = body.get_mut(at..at + 4) {
        dst.copy_from_slice(&v.to_be_bytes());
    }
}

/// Fills the fields of a Block Limits page body (the page without its
/// 4-byte header, SBC-4 table 262 offsets minus 4) that this module owns:
/// WSNZ, MAXIMUM COMPARE AND WRITE LENGTH, OPTIMAL TRANSFER LENGTH
/// GRANULARITY, the unmap limits (zero when UNMAP is not supported, as
/// SBC-4 requires when LBPU is clear), MAXIMUM WRITE SAME LENGTH and the
/// atomic write limits. The atomic boundary fields stay zero: WRITE ATOMIC
/// with a non-zero ATOMIC BOUNDARY is not supported.
pub(crate) fn fill_block_limits(lu: &LogicalUnit, body: &mut [u8]) {
    if let Some(b) = body.get_mut(0) {
        *b = 0; // WSNZ=0: NUMBER OF LOGICAL BLOCKS 0 writes to the last LBA
    }
    if let Some(b) = body.get_mut(1) {
        *b = MAX_COMPARE_AND_WRITE_BLOCKS;
    }
    let granularity = u16::try_from(blocks_per_physical(lu)).unwrap_or(u16::MAX);
    if let Some(dst) = body.get_mut(2..4) {
        dst.copy_from_slice(&granularity.to_be_bytes());
    }
    if unmap_supported(lu) {
        put_u32(body, 16, MAX_UNMAP_LBA_COUNT);
        put_u32(body, 20, MAX_UNMAP_DESCRIPTORS);
        put_u32(body, 24, unmap_granularity(lu));
        // UGAVALID=1, UNMAP GRANULARITY ALIGNMENT=0.
        put_u32(body, 28, 0x8000_0000);
    }
    if let Some(dst) = body.get_mut(32..40) {
        dst.copy_from_slice(&max_write_same_blocks(lu).to_be_bytes());
    }
    put_u32(body, 40, max_atomic_blocks(lu));
    put_u32(body, 44, atomic_unit(lu));
    put_u32(body, 48, atomic_unit(lu));
}

/// Logical Block Provisioning page body (SBC-4 table 269): a thin LUN has
/// LBPWS, LBPWS10, LBPRZ=001b (deallocated blocks read as zeros), LBPU
/// when UNMAP is supported, and PROVISIONING TYPE 010b (thin); a fully
/// provisioned LUN reports nothing (all zero).
pub(crate) fn provisioning_body(lu: &LogicalUnit) -> [u8; 4] {
    if !lbp_enabled(lu) {
        return [0; 4];
    }
    let lbpu = if unmap_supported(lu) { 0x80 } else { 0 };
    [0x00, lbpu | 0x40 | 0x20 | 0x04, 0x02, 0x00]
}
