//! Null engine: reads return zeros and writes are discarded. It still checks
//! ranges and read-only like a real store, so benchmarks of the layers above
//! exercise the same paths.

use crate::common::{check_pattern, check_range, check_write, geometry_for, len_u64};
use crate::{buf::IoBuf, error::Result, geometry::Geometry, store::Backstore};

/// A store that holds nothing.
#[derive(Debug)]
pub struct NullBackstore {
    geometry: Geometry,
}

impl NullBackstore {
    /// A store that claims `size` bytes.
    pub fn new(size: u64, block_size: u32, read_only: bool) -> Result<Self> {
        Ok(Self {
            geometry: geometry_for("null store", size, block_size, read_only)?,
        })
    }
}

impl Backstore for NullBackstore {
    fn kind(&self) -> &'static str {
        "null"
    }

    fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        check_range(&self.geometry, offset, len_u64(buf.len()))?;
        buf.fill(0);
        Ok(())
    }

    fn read_buf(&self, offset: u64, len: usize) -> Result<IoBuf> {
        check_range(&self.geometry, offset, len_u64(len))?;
        Ok(IoBuf::zeros(len))
    }

    fn write_at(&self, buf: &[u8], offset: u64, _fua: bool) -> Result<()> {
        check_write(&self.geometry, offset, len_u64(buf.len()))
    }

    fn flush(&self) -> Result<()> {
        Ok(())
    }

    fn write_same(&self, pattern: &[u8], offset: u64, len: u64) -> Result<()> {
        check_write(&self.geometry, offset, len)?;
        check_pattern(pattern)
    }

    fn unmap(&self, offset: u64, len: u64) -> Result<()> {
        check_write(&self.geometry, offset, len)
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
