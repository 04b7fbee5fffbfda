//! Checks and helpers shared by every engine: access checks (read-only,
//! range with checked arithmetic), configuration validation and pattern
//! tiling for WRITE SAME. Nothing here touches a file descriptor.

use std::io;

use crate::{error::BackstoreError, error::Result, geometry::Extent, geometry::Geometry};

/// Batch size for pattern writes, bounce buffers and the RAM engine's chunks.
pub(crate) const BATCH: usize = 1 << 20;

/// The kernel's page size (4096 when it cannot be read).
pub(crate) fn page_size() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf only reads its scalar argument.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(page)
            .ok()
            .filter(|&p| p > 0)
            .unwrap_or(4096)
    })
}

/// `len` as a byte count; `usize` never exceeds 64 bits on supported targets.
pub(crate) fn len_u64(len: usize) -> u64 {
    len as u64
}

/// Refuses any access that ends past the store or whose end overflows `u64`.
pub(crate) fn check_range(geometry: &Geometry, offset: u64, len: u64) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= geometry.size_bytes() => Ok(()),
        _ => Err(BackstoreError::OutOfRange { offset, len }),
    }
}

/// Read-only check first, then the range check.
pub(crate) fn check_write(geometry: &Geometry, offset: u64, len: u64) -> Result<()> {
    if geometry.read_only {
        return Err(BackstoreError::ReadOnly);
    }
    check_range(geometry, offset, len)
}

/// A WRITE SAME pattern must hold at least one byte.
pub(crate) fn check_pattern(pattern: &[u8]) -> Result<()> {
    if pattern.is_empty() {
        return Err(invalid_input("write_same pattern is empty"));
    }
    Ok(())
}

/// An I/O request the engine cannot express (not a configuration problem).
pub(crate) fn invalid_input(msg: &str) -> BackstoreError {
    BackstoreError::Io(io::Error::new(io::ErrorKind::InvalidInput, msg.to_owned()))
}

/// Logical block sizes rustgt exports.
pub(crate) fn validate_block_size(block_size: u32) -> Result<()> {
    match block_size {
        512 | 4096 => Ok(()),
        other => Err(BackstoreError::Config(format!(
            "block size {other} is not supported (use 512 or 4096)"
        ))),
    }
}

/// Builds a geometry from a byte size; `what` names the store in errors.
pub(crate) fn geometry_for(
    what: &str,
    size: u64,
    block_size: u32,
    read_only: bool,
) -> Result<Geometry> {
    validate_block_size(block_size)?;
    if size == 0 {
        return Err(BackstoreError::Config(format!(
            "{what}: size must not be zero"
        )));
    }
    let bs = u64::from(block_size);
    if size % bs != 0 {
        return Err(BackstoreError::Config(format!(
            "{what}: size {size} bytes is not a multiple of the block size {block_size}"
        )));
    }
    Ok(Geometry {
        block_size,
        num_blocks: size / bs,
        read_only,
    })
}

/// Appends a run to an allocation map, merging it into the previous run
/// when both have the same state; empty runs are dropped.
pub(crate) fn push_extent(runs: &mut Vec<Extent>, len: u64, mapped: bool) {
    if len == 0 {
        return;
    }
    match runs.last_mut() {
        Some(last) if last.mapped == mapped => last.len += len,
        _ => runs.push(Extent { len, mapped }),
    }
}

/// True when every byte is zero.
pub(crate) fn is_zero(buf: &[u8]) -> bool {
    buf.iter().all(|&b| b == 0)
}

/// Fills `dst` with `pattern` repeated from its first byte (the last copy may
/// be cut short). Doubling copies keep this fast for 1 MiB buffers.
pub(crate) fn fill_pattern(dst: &mut [u8], pattern: &[u8]) {
    let mut filled = 0;
    for (d, s) in dst.iter_mut().zip(pattern) {
        *d = *s;
        filled += 1;
    }
    if filled == 0 {
        return;
    }
    while filled < dst.len() {
        let n = filled.min(dst.len() - filled);
        dst.copy_within(0..n, filled);
        filled += n;
    }
}

/// `pattern` repeated over `len` bytes.
pub(crate) fn tile(pattern: &[u8], len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    fill_pattern(&mut v, pattern);
    v
}

/// A zero-initialised buffer whose start is aligned to `align` bytes, as
/// O_DIRECT needs. Built on a slightly larger `Vec`, so no `unsafe`.
#[derive(Debug)]
pub struct AlignedBuf {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    /// `align` must be a power of two (block sizes are).
    pub(crate) fn zeroed(len: usize, align: usize) -> Result<Self> {
        let storage = vec![0u8; len.saturating_add(align)];
        let start = storage.as_ptr().align_offset(align);
        if start > align {
            return Err(invalid_input("cannot align an I/O buffer"));
        }
        Ok(Self {
            storage,
            start,
            len,
        })
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        self.storage
            .get(self.start..self.start + self.len)
            .unwrap_or_default()
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        self.storage
            .get_mut(self.start..self.start + self.len)
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geom(num_blocks: u64, read_only: bool) -> Geometry {
        Geometry {
            block_size: 512,
            num_blocks,
            read_only,
        }
    }

    #[test]
    fn range_checks_use_checked_arithmetic() {
        let g = geom(8, false);
        assert!(check_range(&g, 0, 4096).is_ok());
        assert!(check_range(&g, 4096, 0).is_ok());
        assert!(matches!(
            check_range(&g, 512, 4096),
            Err(BackstoreError::OutOfRange {
                offset: 512,
                len: 4096
            })
        ));
        assert!(matches!(
            check_range(&g, u64::MAX, 2),
            Err(BackstoreError::OutOfRange { .. })
        ));
        assert!(matches!(
            check_write(&geom(8, true), 0, 512),
            Err(BackstoreError::ReadOnly)
        ));
    }

    #[test]
    fn geometry_validation() {
        assert!(matches!(
            geometry_for("x", 1000, 512, false),
            Err(BackstoreError::Config(_))
        ));
        assert!(matches!(
            geometry_for("x", 0, 512, false),
            Err(BackstoreError::Config(_))
        ));
        assert!(matches!(
            geometry_for("x", 4096, 1024, false),
            Err(BackstoreError::Config(_))
        ));
        let g = geometry_for("x", 8192, 4096, true).expect("valid geometry");
        assert_eq!((g.num_blocks, g.read_only), (2, true));
    }

    #[test]
    fn pattern_fill_repeats_and_truncates() {
        assert_eq!(tile(&[1, 2, 3], 8), vec![1, 2, 3, 1, 2, 3, 1, 2]);
        assert_eq!(tile(&[9], 3), vec![9, 9, 9]);
        assert_eq!(tile(&[1, 2, 3], 2), vec![1, 2]);
        assert_eq!(tile(&[], 2), vec![0, 0]);
    }

    #[test]
    fn extent_runs_merge_and_skip_empty() {
        let mut runs = Vec::new();
        push_extent(&mut runs, 512, true);
        push_extent(&mut runs, 0, false);
        push_extent(&mut runs, 512, true);
        push_extent(&mut runs, 4096, false);
        push_extent(&mut runs, 1024, false);
        push_extent(&mut runs, 512, true);
        let flat: Vec<_> = runs.iter().map(|e| (e.len, e.mapped)).collect();
        assert_eq!(flat, vec![(1024, true), (5120, false), (512, true)]);
    }

    #[test]
    fn aligned_buffers_are_aligned() {
        for align in [512usize, 4096] {
            let mut b = AlignedBuf::zeroed(12345, align).expect("buffer");
            assert_eq!(b.as_slice().len(), 12345);
            assert_eq!(b.as_mut_slice().as_ptr() as usize % align, 0);
            assert!(is_zero(b.as_slice()));
        }
    }
}
