//! Block device engine: a whole disk, partition, LV or loop device.
//!
//! Guarantees:
//! - anything but a block device is refused with [`BackstoreError::Config`];
//! - the device is opened `O_EXCL`, so a mounted or otherwise claimed device
//!   is refused rather than corrupted;
//! - size comes from `BLKGETSIZE64` and the default block size from
//!   `BLKSSZGET`; a configured block size smaller than the device's is refused;
//! - unmap leaves the range reading zeros: `fallocate(PUNCH_HOLE)` on a block
//!   device issues WRITE ZEROES with deallocation allowed and no slow
//!   fallback; devices without it get `BLKZEROOUT`. Plain `BLKDISCARD` does
//!   not promise zeroed reads, so it is only offered as [`BlockDevBackstore::discard`].

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

use crate::common::{check_write, geometry_for, validate_block_size};
use crate::fdio::{is_unsupported, FdIo};
use crate::fdstore::{config, probe_direct, FdStore, Medium};
use crate::{error::BackstoreError, error::Result};

/// How to open a block device store.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockDevOptions {
    /// Logical block size to export (512 or 4096); `None` uses the device's.
    pub block_size: Option<u32>,
    /// Export only the first `size` bytes; `None` uses the whole device
    /// (rounded down to whole blocks).
    pub size: Option<u64>,
    /// Open read-only.
    pub read_only: bool,
    /// An all-zero WRITE SAME deallocates (as unmap does) instead of
    /// writing zeros that stay allocated.
    pub thin: bool,
    /// Open with O_DIRECT (bypass the page cache).
    pub direct: bool,
}

/// A backing store on a block device.
pub type BlockDevBackstore = FdStore<BlockDevice>;

/// The [`Medium`] of a block device: zeroing and deallocation through the
/// block layer, no allocation map.
#[derive(Debug)]
pub struct BlockDevice {
    device_block_size: u32,
}

impl BlockDevBackstore {
    /// Opens the block device at `path` exclusively.
    pub fn open(path: impl AsRef<Path>, opts: &BlockDevOptions) -> Result<Self> {
        let path = path.as_ref();
        let meta =
            std::fs::metadata(path).map_err(|e| config(path, &format!("cannot stat: {e}")))?;
        if !meta.file_type().is_block_device() {
            return Err(config(
                path,
                "is not a block device (use the file engine for regular files)",
            ));
        }
        let file = open_exclusive(path, opts)?;
        let device_size = ioctl_get_u64(&file, BLKGETSIZE64)
            .map_err(|e| config(path, &format!("BLKGETSIZE64 failed: {e}")))?;
        let device_block_size = ioctl_get_int(&file, libc::BLKSSZGET)
            .ok()
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| config(path, "BLKSSZGET failed"))?;
        let block_size = choose_block_size(path, opts.block_size, device_block_size)?;
        let size = choose_size(path, opts.size, device_size, block_size)?;
        let geometry = geometry_for(
            &path.display().to_string(),
            size,
            block_size,
            opts.read_only,
        )?;
        let io = FdIo::new(file, opts.direct.then_some(block_size));
        if opts.direct {
            probe_direct(path, &io, block_size)?;
        }
        tracing::info!(
            path = %path.display(),
            size,
            block_size,
            device_block_size,
            read_only = opts.read_only,
            direct = opts.direct,
            "blockdev backstore opened"
        );
        Ok(Self {
            path: path.to_owned(),
            io,
            geometry,
            thin: opts.thin,
            medium: BlockDevice { device_block_size },
        })
    }

    /// The device's own logical block size (`BLKSSZGET`).
    pub fn device_block_size(&self) -> u32 {
        self.medium.device_block_size
    }

    /// `BLKDISCARD`: tells the device the range is unused. Unlike
    /// [`Backstore::unmap`], later reads of the range are undefined (old data,
    /// zeros or a fixed pattern, depending on the device).
    pub fn discard(&self, offset: u64, len: u64) -> Result<()> {
        check_write(&self.geometry, offset, len)?;
        if len == 0 {
            return Ok(());
        }
        ioctl_range(self.io.file(), BLKDISCARD, offset, len).map_err(BackstoreError::Write)
    }

    /// Zeroes the range without deallocating (`BLKZEROOUT`; the kernel uses
    /// WRITE ZEROES offload or writes zero pages).
    fn zero_out(&self, offset: u64, len: u64) -> Result<()> {
        match ioctl_range(self.io.file(), BLKZEROOUT, offset, len) {
            Ok(()) => Ok(()),
            Err(e) if is_unsupported(&e) => self.write_zeros(offset, len),
            Err(e) => Err(BackstoreError::Write(e)),
        }
    }

    /// Zeroes the range, deallocating it when the device can.
    fn deallocate(&self, offset: u64, len: u64) -> Result<()> {
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        match self.io.fallocate(mode, offset, len) {
            Ok(()) => Ok(()),
            Err(e) if is_unsupported(&e) => self.zero_out(offset, len),
            Err(e) => Err(BackstoreError::Write(e)),
        }
    }
}

impl Medium for BlockDevice {
    const KIND: &'static str = "blockdev";
    const TYPE_NAME: &'static str = "BlockDevBackstore";
    const BLOCK_DEVICE: bool = true;

    fn zero(store: &BlockDevBackstore, offset: u64, len: u64) -> Result<()> {
        store.zero_out(offset, len)
    }

    fn deallocate(store: &BlockDevBackstore, offset: u64, len: u64) -> Result<()> {
        store.deallocate(offset, len)
    }

    fn debug_fields(&self, d: &mut fmt::DebugStruct<'_, '_>) {
        d.field("device_block_size", &self.device_block_size);
    }
}

fn open_exclusive(path: &Path, opts: &BlockDevOptions) -> Result<File> {
    let mut flags = libc::O_EXCL;
    if opts.direct {
        flags |= libc::O_DIRECT;
    }
    OpenOptions::new()
        .read(true)
        .write(!opts.read_only)
        .custom_flags(flags)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::EBUSY) => config(
                path,
                "device is busy (mounted, or claimed by another holder)",
            ),
            _ => config(path, &format!("cannot open: {e}")),
        })
}

fn choose_block_size(path: &Path, configured: Option<u32>, device: u32) -> Result<u32> {
    match configured {
        None => validate_block_size(device).map(|()| device).map_err(|_| {
            config(
                path,
                &format!("device block size {device} cannot be exported; configure 512 or 4096"),
            )
        }),
        Some(bs) => {
            validate_block_size(bs)?;
            if bs < device {
                return Err(config(
                    path,
                    &format!(
                        "configured block size {bs} is smaller than the device's block size {device}"
                    ),
                ));
            }
            Ok(bs)
        }
    }
}

fn choose_size(path: &Path, wanted: Option<u64>, device_size: u64, block_size: u32) -> Result<u64> {
    let bs = u64::from(block_size);
    let capacity = device_size / bs * bs;
    match wanted {
        None => Ok(capacity),
        Some(w) if w > capacity => Err(config(
            path,
            &format!(
                "requested size {w} bytes is larger than the device's {capacity} usable bytes"
            ),
        )),
        Some(w) => Ok(w),
    }
}

// Block-layer ioctls of <linux/fs.h> that libc does not define.
// The encoding of _IO/_IOR differs on a few architectures.
#[cfg(any(
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "sparc",
    target_arch = "sparc64"
))]
mod ioc {
    pub const NONE: u32 = 1;
    pub const READ: u32 = 2;
    pub const DIR_SHIFT: u32 = 29;
}
#[cfg(not(any(
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "sparc",
    target_arch = "sparc64"
)))]
mod ioc {
    pub const NONE: u32 = 0;
    pub const READ: u32 = 2;
    pub const DIR_SHIFT: u32 = 30;
}

const fn ioc(dir: u32, nr: u32, size: u32) -> libc::Ioctl {
    ((dir << ioc::DIR_SHIFT) | (size << 16) | (0x12 << 8) | nr) as libc::Ioctl
}

/// `_IOR(0x12, 114, size_t)`
const BLKGETSIZE64: libc::Ioctl = ioc(ioc::READ, 114, std::mem::size_of::<usize>() as u32);
/// `_IO(0x12, 119)`, argument `u64[2]` = {start, length} in bytes.
const BLKDISCARD: libc::Ioctl = ioc(ioc::NONE, 119, 0);
/// `_IO(0x12, 127)`, argument `u64[2]` = {start, length} in bytes.
const BLKZEROOUT: libc::Ioctl = ioc(ioc::NONE, 127, 0);

fn ioctl_get_u64(file: &File, request: libc::Ioctl) -> io::Result<u64> {
    let mut value: u64 = 0;
    // SAFETY: the request writes one u64 (size_t on 64-bit, and the kernel
    // writes a u64 for BLKGETSIZE64 everywhere) into `value`, which lives
    // across the call. The fd is owned by `file`.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), request, &mut value as *mut u64) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(value)
}

fn ioctl_get_int(file: &File, request: libc::Ioctl) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    // SAFETY: the request writes one int into `value`, which lives across
    // the call. The fd is owned by `file`.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), request, &mut value as *mut libc::c_int) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(value)
}

fn ioctl_range(file: &File, request: libc::Ioctl, offset: u64, len: u64) -> io::Result<()> {
    let range: [u64; 2] = [offset, len];
    // SAFETY: the request only reads two u64s from `range`, which lives across
    // the call. The fd is owned by `file`.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), request, range.as_ptr()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
