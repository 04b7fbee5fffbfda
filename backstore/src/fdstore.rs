//! The engine the file and block-device stores share: one open fd
//! ([`FdIo`]: positioned, buffered or O_DIRECT I/O, FUA, fsync, io_uring,
//! non-blocking attempts) behind the [`Backstore`] checks of range,
//! read-only and WRITE SAME pattern. What differs between a regular file
//! and a block device (how a range is zeroed or deallocated, whether the
//! allocation map can be read, the names) is a [`Medium`].

use std::fmt;
use std::path::{Path, PathBuf};

use crate::common::{
    check_pattern, check_range, check_write, is_zero, len_u64, push_extent, AlignedBuf,
};
use crate::fdio::FdIo;
use crate::{
    error::BackstoreError, error::Result, geometry::DeviceKey, geometry::Extent,
    geometry::Geometry, store::Backstore,
};

/// What a kind of fd-backed store does its own way.
pub trait Medium: Send + Sync + Sized + 'static {
    /// Engine name ([`Backstore::kind`]).
    const KIND: &'static str;
    /// Name of the public store type, for `Debug`.
    const TYPE_NAME: &'static str;
    /// The fd is a block device (its device is `rdev`, not `dev`).
    const BLOCK_DEVICE: bool;

    /// Zeroes `len` bytes from `offset`, keeping them allocated.
    fn zero(store: &FdStore<Self>, offset: u64, len: u64) -> Result<()>;

    /// Zeroes `len` bytes from `offset`, deallocating them where the
    /// medium can (unmap, and thin all-zero WRITE SAME).
    fn deallocate(store: &FdStore<Self>, offset: u64, len: u64) -> Result<()>;

    /// Allocation map ([`Backstore::extents`]); by default everything is
    /// mapped.
    fn extents(store: &FdStore<Self>, offset: u64, len: u64) -> Result<Vec<Extent>> {
        check_range(&store.geometry, offset, len)?;
        let mut runs = Vec::new();
        push_extent(&mut runs, len, true);
        Ok(runs)
    }

    /// The medium's own fields, for `Debug`.
    fn debug_fields(&self, _d: &mut fmt::DebugStruct<'_, '_>) {}
}

/// A store on one open fd, shared by all workers (positioned I/O only).
pub struct FdStore<M> {
    pub(crate) path: PathBuf,
    pub(crate) io: FdIo,
    pub(crate) geometry: Geometry,
    pub(crate) thin: bool,
    pub(crate) medium: M,
}

impl<M: Medium> FdStore<M> {
    /// The path as given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes zeros block by block (for media that cannot zero otherwise).
    pub(crate) fn write_zeros(&self, offset: u64, len: u64) -> Result<()> {
        let block = vec![0u8; self.geometry.block_size as usize];
        self.io.write_pattern(&block, offset, len)
    }
}

impl<M: Medium> fmt::Debug for FdStore<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct(M::TYPE_NAME);
        d.field("path", &self.path)
            .field("io", &self.io)
            .field("geometry", &self.geometry);
        self.medium.debug_fields(&mut d);
        d.field("thin", &self.thin).finish()
    }
}

impl<M: Medium> Backstore for FdStore<M> {
    fn kind(&self) -> &'static str {
        M::KIND
    }

    fn device_key(&self) -> Option<DeviceKey> {
        self.io.device_key(M::BLOCK_DEVICE)
    }

    fn kernel_readahead(&self, on: bool) -> Result<()> {
        self.io.kernel_readahead(on)
    }

    fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        check_range(&self.geometry, offset, len_u64(buf.len()))?;
        self.io.read(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> Result<()> {
        check_write(&self.geometry, offset, len_u64(buf.len()))?;
        self.io.write(buf, offset, fua)
    }

    fn flush(&self) -> Result<()> {
        self.io.sync()
    }

    fn write_same(&self, pattern: &[u8], offset: u64, len: u64) -> Result<()> {
        check_write(&self.geometry, offset, len)?;
        check_pattern(pattern)?;
        if len == 0 {
            return Ok(());
        }
        if is_zero(pattern) {
            return if self.thin {
                M::deallocate(self, offset, len)
            } else {
                M::zero(self, offset, len)
            };
        }
        self.io.write_pattern(pattern, offset, len)
    }

    fn unmap(&self, offset: u64, len: u64) -> Result<()> {
        check_write(&self.geometry, offset, len)?;
        if len == 0 {
            return Ok(());
        }
        M::deallocate(self, offset, len)
    }

    fn extents(&self, offset: u64, len: u64) -> Result<Vec<Extent>> {
        M::extents(self, offset, len)
    }

    fn supports_write_same(&self) -> bool {
        true
    }

    fn supports_unmap(&self) -> bool {
        true
    }

    fn uring_file(&self) -> Option<crate::uring::UringFile> {
        Some(self.io.uring_file())
    }

    fn has_uring_file(&self) -> bool {
        true
    }

    fn nonblocking(&self) -> crate::nowait::Nonblocking {
        self.io.nonblocking()
    }
}

/// A configuration error naming `path`.
pub(crate) fn config(path: &Path, msg: &str) -> BackstoreError {
    BackstoreError::Config(format!("{}: {msg}", path.display()))
}

/// One aligned block read proves the fd accepts O_DIRECT at this block
/// size (a 512-byte LUN on a 4 KiB-sector disk does not).
pub(crate) fn probe_direct(path: &Path, io: &FdIo, block_size: u32) -> Result<()> {
    let mut buf = AlignedBuf::zeroed(block_size as usize, block_size as usize)?;
    match io.read(buf.as_mut_slice(), 0) {
        Ok(()) => Ok(()),
        Err(BackstoreError::Read(e)) if e.raw_os_error() == Some(libc::EINVAL) => Err(config(
            path,
            &format!("O_DIRECT I/O is refused at block size {block_size}"),
        )),
        Err(e) => Err(e),
    }
}
