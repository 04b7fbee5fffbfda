//! The largest data transfer of one command (Block Limits MAXIMUM
//! TRANSFER LENGTH), also the chunk size of every operation that moves
//! medium data itself (WRITE SAME, SANITIZE, EXTENDED COPY). Below the
//! logical unit, whose sanitize state uses it.

/// Largest single transfer this core accepts (block limits VPD).
pub(crate) const MAX_TRANSFER_BYTES: u32 = 8 << 20;

/// Largest transfer in logical blocks for this block size.
pub(crate) fn max_transfer_blocks(block_size: u32) -> u32 {
    MAX_TRANSFER_BYTES / block_size.max(1)
}
