//! RAM engine: a volatile store held in memory.
//!
//! Guarantees:
//! - memory is taken lazily in fixed-size chunks (1 MiB by default), so
//!   never-written regions cost only a table slot, and reads of them are zeros;
//! - each chunk has its own `RwLock`: I/O to different chunks never contends
//!   and concurrent readers of one chunk share it;
//! - unmap (and an all-zero WRITE SAME) frees whole chunks and zeroes the
//!   partial ones at the edges;
//! - the allocation map is the chunk table: a chunk holding memory is
//!   mapped, an empty one deallocated.

use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::common::{check_pattern, check_range, check_write, geometry_for, is_zero, len_u64};
use crate::common::{push_extent, tile, BATCH};
use crate::{
    error::BackstoreError, error::Result, geometry::Extent, geometry::Geometry, store::Backstore,
};

type Chunk = RwLock<Option<Box<[u8]>>>;

/// Cap on the chunk table (16 Mi slots, 16 TiB at 1 MiB chunks), so a typo
/// in a size cannot eat gigabytes of bookkeeping.
const MAX_CHUNKS: u64 = 1 << 24;

/// An in-memory backing store.
#[derive(Debug)]
pub struct RamBackstore {
    geometry: Geometry,
    chunk_size: usize,
    chunks: Box<[Chunk]>,
}

/// One piece of an access that falls inside a single chunk.
#[derive(Debug, Clone, Copy)]
struct Span {
    /// Chunk index.
    index: usize,
    /// Offset inside the chunk.
    start: usize,
    /// Bytes in this piece.
    len: usize,
    /// Offset of this piece from the start of the access.
    done: usize,
}

impl RamBackstore {
    /// Default allocation unit.
    pub const DEFAULT_CHUNK_SIZE: usize = BATCH;

    /// A store of `size` bytes with 1 MiB chunks.
    pub fn new(size: u64, block_size: u32, read_only: bool) -> Result<Self> {
        Self::with_chunk_size(size, block_size, read_only, Self::DEFAULT_CHUNK_SIZE)
    }

    /// A store of `size` bytes allocated `chunk_size` bytes at a time.
    pub fn with_chunk_size(
        size: u64,
        block_size: u32,
        read_only: bool,
        chunk_size: usize,
    ) -> Result<Self> {
        let geometry = geometry_for("ram store", size, block_size, read_only)?;
        if chunk_size == 0 {
            return Err(BackstoreError::Config(
                "ram store: chunk size must not be zero".into(),
            ));
        }
        let count = size.div_ceil(len_u64(chunk_size));
        if count > MAX_CHUNKS {
            return Err(BackstoreError::Config(format!(
                "ram store: {size} bytes needs {count} chunks of {chunk_size} bytes \
                 (at most {MAX_CHUNKS})"
            )));
        }
        let chunks = (0..count).map(|_| RwLock::new(None)).collect();
        Ok(Self {
            geometry,
            chunk_size,
            chunks,
        })
    }

    /// The allocation unit in bytes.
    pub fn chunk_size(&self) -> usize {
        self.chunk_size
    }

    /// Bytes of memory currently holding data.
    pub fn allocated_bytes(&self) -> u64 {
        self.chunks
            .iter()
            .map(|c| read_lock(c).as_ref().map_or(0, |d| len_u64(d.len())))
            .sum()
    }

    /// Length of chunk `index` (the last one may be short).
    fn chunk_len(&self, index: usize) -> usize {
        let start = len_u64(index).saturating_mul(len_u64(self.chunk_size));
        let left = self.geometry.size_bytes().saturating_sub(start);
        usize::try_from(left).map_or(self.chunk_size, |l| l.min(self.chunk_size))
    }

    /// Splits an already range-checked access into per-chunk pieces.
    fn spans(&self, offset: u64, len: u64) -> impl Iterator<Item = Span> + '_ {
        let chunk = len_u64(self.chunk_size);
        let end = offset.saturating_add(len);
        let mut pos = offset;
        std::iter::from_fn(move || {
            if pos >= end {
                return None;
            }
            let index = usize::try_from(pos / chunk).ok()?;
            let start = usize::try_from(pos % chunk).ok()?;
            let room = self.chunk_len(index).checked_sub(start)?;
            let len = usize::try_from(end - pos).map_or(room, |r| r.min(room));
            if len == 0 {
                return None;
            }
            let done = usize::try_from(pos - offset).ok()?;
            pos += len_u64(len);
            Some(Span {
                index,
                start,
                len,
                done,
            })
        })
    }

    fn chunk(&self, index: usize) -> Result<&Chunk> {
        self.chunks
            .get(index)
            .ok_or_else(|| internal("chunk index past the table"))
    }

    /// Runs `f` on the writable bytes of `span`, allocating its chunk.
    fn with_chunk_mut(&self, span: Span, f: impl FnOnce(&mut [u8])) -> Result<()> {
        let mut guard = write_lock(self.chunk(span.index)?);
        let data = guard.get_or_insert_with(|| vec![0u8; self.chunk_len(span.index)].into());
        let bytes = data
            .get_mut(span.start..span.start + span.len)
            .ok_or_else(|| internal("span past the chunk"))?;
        f(bytes);
        Ok(())
    }

    /// Frees chunks the range covers entirely; zeroes the edges of others.
    fn deallocate(&self, offset: u64, len: u64) -> Result<()> {
        for span in self.spans(offset, len) {
            let mut guard = write_lock(self.chunk(span.index)?);
            if span.start == 0 && span.len == self.chunk_len(span.index) {
                *guard = None;
            } else if let Some(data) = guard.as_mut() {
                data.get_mut(span.start..span.start + span.len)
                    .ok_or_else(|| internal("span past the chunk"))?
                    .fill(0);
            }
        }
        Ok(())
    }
}

impl Backstore for RamBackstore {
    fn kind(&self) -> &'static str {
        "ram"
    }

    fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        check_range(&self.geometry, offset, len_u64(buf.len()))?;
        for span in self.spans(offset, len_u64(buf.len())) {
            let dst = buf
                .get_mut(span.done..span.done + span.len)
                .ok_or_else(|| internal("span past the buffer"))?;
            let guard = read_lock(self.chunk(span.index)?);
            match guard.as_ref() {
                None => dst.fill(0),
                Some(data) => dst.copy_from_slice(
                    data.get(span.start..span.start + span.len)
                        .ok_or_else(|| internal("span past the chunk"))?,
                ),
            }
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64, _fua: bool) -> Result<()> {
        check_write(&self.geometry, offset, len_u64(buf.len()))?;
        for span in self.spans(offset, len_u64(buf.len())) {
            let src = buf
                .get(span.done..span.done + span.len)
                .ok_or_else(|| internal("span past the buffer"))?;
            self.with_chunk_mut(span, |dst| dst.copy_from_slice(src))?;
        }
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        Ok(())
    }

    fn write_same(&self, pattern: &[u8], offset: u64, len: u64) -> Result<()> {
        check_write(&self.geometry, offset, len)?;
        check_pattern(pattern)?;
        if is_zero(pattern) {
            // Zeros and unallocated read the same; keep the memory free.
            return self.deallocate(offset, len);
        }
        // One tile, sliced at each chunk's phase within the pattern.
        let piece_max = usize::try_from(len).map_or(self.chunk_size, |l| l.min(self.chunk_size));
        let tiled = tile(pattern, piece_max.saturating_add(pattern.len()));
        for span in self.spans(offset, len) {
            let phase = span.done % pattern.len();
            let src = tiled
                .get(phase..phase + span.len)
                .ok_or_else(|| internal("span past the pattern tile"))?;
            self.with_chunk_mut(span, |dst| dst.copy_from_slice(src))?;
        }
        Ok(())
    }

    fn unmap(&self, offset: u64, len: u64) -> Result<()> {
        check_write(&self.geometry, offset, len)?;
        self.deallocate(offset, len)
    }

    fn extents(&self, offset: u64, len: u64) -> Result<Vec<Extent>> {
        check_range(&self.geometry, offset, len)?;
        let mut runs = Vec::new();
        for span in self.spans(offset, len) {
            let mapped = read_lock(self.chunk(span.index)?).is_some();
            push_extent(&mut runs, len_u64(span.len), mapped);
        }
        Ok(runs)
    }

    fn supports_write_same(&self) -> bool {
        true
    }

    fn supports_unmap(&self) -> bool {
        true
    }

    fn nonblocking(&self) -> crate::nowait::Nonblocking {
        crate::nowait::Nonblocking::Always
    }
}

/// A broken internal invariant, reported instead of panicking.
fn internal(what: &str) -> BackstoreError {
    BackstoreError::Io(std::io::Error::other(format!("ram store: {what}")))
}

// A writer that panicked mid-copy leaves plain bytes behind; the lock stays
// usable rather than poisoning the whole LUN.
fn read_lock(c: &Chunk) -> RwLockReadGuard<'_, Option<Box<[u8]>>> {
    c.read().unwrap_or_else(PoisonError::into_inner)
}

fn write_lock(c: &Chunk) -> RwLockWriteGuard<'_, Option<Box<[u8]>>> {
    c.write().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_split_at_chunk_boundaries() {
        let r = RamBackstore::with_chunk_size(10 * 512, 512, false, 1536).expect("store");
        let spans: Vec<_> = r
            .spans(1024, 3 * 512)
            .map(|s| (s.index, s.start, s.len, s.done))
            .collect();
        assert_eq!(spans, vec![(0, 1024, 512, 0), (1, 0, 1024, 512)]);
        // The last chunk is short: 5120 = 3 * 1536 + 512.
        assert_eq!(r.chunk_len(3), 512);
        let tail: Vec<_> = r
            .spans(4608, 512)
            .map(|s| (s.index, s.start, s.len))
            .collect();
        assert_eq!(tail, vec![(3, 0, 512)]);
    }

    #[test]
    fn chunk_table_is_capped() {
        let r = RamBackstore::with_chunk_size(1 << 40, 512, false, 512);
        assert!(matches!(r, Err(BackstoreError::Config(_))));
    }
}
