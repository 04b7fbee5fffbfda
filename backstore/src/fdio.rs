//! Positioned I/O on one shared file descriptor, used by the file and block
//! device engines. `pread`/`pwrite` carry their own offset, so one `File` is
//! safely shared by every worker thread without a lock.
//!
//! FUA writes use `pwritev2(RWF_DSYNC)`, which makes just that write durable;
//! kernels without it fall back to `pwrite` + `fdatasync`. With O_DIRECT,
//! offsets and lengths must be block multiples and buffers not aligned in
//! memory go through an aligned bounce buffer.
//!
//! The `File` sits in an `Arc` so that io_uring ops in flight
//! ([`crate::uring`]) keep the descriptor open until they complete.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::common::{fill_pattern, invalid_input, len_u64, AlignedBuf, BATCH};
use crate::{error::BackstoreError, error::Result, geometry::DeviceKey};

/// One open file or device plus how it must be driven.
#[derive(Debug)]
pub(crate) struct FdIo {
    /// Shared with io_uring ops in flight, which keep the fd open.
    file: Arc<File>,
    /// `Some(alignment)` when opened with O_DIRECT.
    direct: Option<usize>,
    /// `preadv2(RWF_NOWAIT)` was refused as unsupported on this fd.
    nowait_unsupported: AtomicBool,
}

impl FdIo {
    /// `direct_align` is the block size when the fd was opened with O_DIRECT.
    pub(crate) fn new(file: File, direct_align: Option<u32>) -> Self {
        Self {
            file: Arc::new(file),
            direct: direct_align.map(|a| a as usize),
            nowait_unsupported: AtomicBool::new(false),
        }
    }

    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    /// Switches the kernel's readahead on this fd on (POSIX_FADV_NORMAL) or
    /// off (POSIX_FADV_RANDOM), for a regular file or a block device alike;
    /// an O_DIRECT fd bypasses the page cache, so there is nothing to
    /// advise.
    pub(crate) fn kernel_readahead(&self, on: bool) -> Result<()> {
        if self.is_direct() {
            return Ok(());
        }
        let advice = if on {
            libc::POSIX_FADV_NORMAL
        } else {
            libc::POSIX_FADV_RANDOM
        };
        // SAFETY: posix_fadvise only reads its scalar arguments; the fd is
        // borrowed from the open `File` for the duration of the call.
        let rc = unsafe { libc::posix_fadvise(self.file.as_raw_fd(), 0, 0, advice) };
        if rc == 0 {
            Ok(())
        } else {
            Err(BackstoreError::Io(io::Error::from_raw_os_error(rc)))
        }
    }

    /// The disk under this fd: the device itself for a block device, the
    /// filesystem's device for a file; a partition counts as its whole
    /// disk. Whether it seeks comes from sysfs's `queue/rotational`.
    /// `None` when the device is not a block device (tmpfs, overlay).
    pub(crate) fn device_key(&self, block_device: bool) -> Option<DeviceKey> {
        use std::os::unix::fs::MetadataExt;
        let meta = self.file.metadata().ok()?;
        let dev = if block_device {
            meta.rdev()
        } else {
            meta.dev()
        };
        let base = format!("/sys/dev/block/{}:{}", libc::major(dev), libc::minor(dev));
        let disk = if std::path::Path::new(&base).join("partition").exists() {
            format!("{base}/..")
        } else {
            base
        };
        let id = std::fs::read_to_string(format!("{disk}/dev")).ok()?;
        let seeks = disk_seeks(std::path::Path::new(&disk), 0);
        Some(DeviceKey {
            key: format!("block:{}", id.trim()),
            seeks,
        })
    }

    /// The fd for io_uring ops, with the O_DIRECT alignment its buffers,
    /// offsets and lengths need.
    pub(crate) fn uring_file(&self) -> crate::uring::UringFile {
        crate::uring::UringFile {
            file: Arc::clone(&self.file),
            direct_align: self.direct,
            meters: smallvec::SmallVec::new(),
            holds: smallvec::SmallVec::new(),
        }
    }

    pub(crate) fn is_direct(&self) -> bool {
        self.direct.is_some()
    }

    /// Fills `buf` from `offset`.
    pub(crate) fn read(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        if crate::nowait::active() {
            return self.read_nowait(buf, offset);
        }
        let Some(align) = self.direct else {
            return self
                .file
                .read_exact_at(buf, offset)
                .map_err(BackstoreError::Read);
        };
        check_direct(align, offset, buf.len())?;
        if is_aligned(buf, align) {
            return self
                .file
                .read_exact_at(buf, offset)
                .map_err(BackstoreError::Read);
        }
        let mut bounce = AlignedBuf::zeroed(buf.len().min(BATCH), align)?;
        let mut pos = offset;
        for piece in buf.chunks_mut(BATCH) {
            let staging = bounce
                .as_mut_slice()
                .get_mut(..piece.len())
                .unwrap_or_default();
            self.file
                .read_exact_at(staging, pos)
                .map_err(BackstoreError::Read)?;
            piece.copy_from_slice(staging);
            pos += len_u64(piece.len());
        }
        Ok(())
    }

    /// Writes `buf` at `offset`; with `fua` the data is durable on return.
    pub(crate) fn write(&self, buf: &[u8], offset: u64, fua: bool) -> Result<()> {
        let Some(align) = self.direct else {
            return self.write_raw(buf, offset, fua);
        };
        check_direct(align, offset, buf.len())?;
        if is_aligned(buf, align) {
            return self.write_raw(buf, offset, fua);
        }
        let mut bounce = AlignedBuf::zeroed(buf.len().min(BATCH), align)?;
        let mut pos = offset;
        for piece in buf.chunks(BATCH) {
            let staging = bounce
                .as_mut_slice()
                .get_mut(..piece.len())
                .unwrap_or_default();
            staging.copy_from_slice(piece);
            self.write_raw(staging, pos, fua)?;
            pos += len_u64(piece.len());
        }
        Ok(())
    }

    /// Writes `pattern` repeated over `len` bytes from `offset`, in batches of
    /// up to 1 MiB built once (each batch starts on a pattern boundary).
    pub(crate) fn write_pattern(&self, pattern: &[u8], offset: u64, len: u64) -> Result<()> {
        let align = self.direct.unwrap_or(1);
        if let Some(a) = self.direct {
            check_direct(a, offset, usize::try_from(len).unwrap_or(usize::MAX))?;
        }
        // Batches start on a pattern boundary and, for O_DIRECT, on a block one.
        let unit = lcm(pattern.len().max(1), align);
        let per_batch = (BATCH / unit).max(1) * unit;
        let batch_len = usize::try_from(len).map_or(per_batch, |l| l.min(per_batch));
        let mut batch = AlignedBuf::zeroed(batch_len, align)?;
        fill_pattern(batch.as_mut_slice(), pattern);
        let end = offset
            .checked_add(len)
            .ok_or(BackstoreError::OutOfRange { offset, len })?;
        let mut pos = offset;
        while pos < end {
            let n = usize::try_from(end - pos).map_or(batch_len, |r| r.min(batch_len));
            let data = batch.as_slice().get(..n).unwrap_or_default();
            self.write_raw(data, pos, false)?;
            pos += len_u64(n);
        }
        Ok(())
    }

    /// fdatasync: completed writes (and the device cache) become durable.
    pub(crate) fn sync(&self) -> Result<()> {
        self.file.sync_data().map_err(BackstoreError::Flush)
    }

    /// fallocate(2) on the shared fd.
    pub(crate) fn fallocate(&self, mode: libc::c_int, offset: u64, len: u64) -> io::Result<()> {
        let off = to_off_t(offset)?;
        let n = to_off_t(len)?;
        // SAFETY: fallocate only reads its scalar arguments; the fd is owned
        // by `self.file` and open for the duration of the call.
        let rc = unsafe { libc::fallocate(self.file.as_raw_fd(), mode, off, n) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// lseek(2) with SEEK_DATA or SEEK_HOLE from `pos`: the offset found,
    /// or `None` when there is no such region at or after `pos` (ENXIO).
    pub(crate) fn seek(&self, whence: libc::c_int, pos: u64) -> io::Result<Option<u64>> {
        let off = to_off_t(pos)?;
        // SAFETY: lseek only reads its scalar arguments; the fd is owned by
        // `self.file` and open for the duration of the call. The file
        // position it moves is never used: all I/O here is positioned.
        let rc = unsafe { libc::lseek(self.file.as_raw_fd(), off, whence) };
        if rc >= 0 {
            return Ok(u64::try_from(rc).ok());
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::ENXIO) {
            Ok(None)
        } else {
            Err(err)
        }
    }

    fn write_raw(&self, buf: &[u8], offset: u64, fua: bool) -> Result<()> {
        if !fua {
            return self
                .file
                .write_all_at(buf, offset)
                .map_err(BackstoreError::Write);
        }
        match pwrite_all_dsync(&self.file, buf, offset) {
            Ok(()) => Ok(()),
            Err(e) if is_unsupported(&e) => {
                self.file
                    .write_all_at(buf, offset)
                    .map_err(BackstoreError::Write)?;
                self.sync()
            }
            Err(e) => Err(BackstoreError::Write(e)),
        }
    }
}

/// The kernel or filesystem lacks the requested operation.
pub(crate) fn is_unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) | Some(libc::ENOTTY)
    )
}

pub(crate) fn to_off_t(v: u64) -> io::Result<libc::off_t> {
    libc::off_t::try_from(v).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))
}

fn lcm(a: usize, b: usize) -> usize {
    let (mut x, mut y) = (a, b);
    while y != 0 {
        (x, y) = (y, x % y);
    }
    (a / x).saturating_mul(b)
}

fn is_aligned(buf: &[u8], align: usize) -> bool {
    buf.as_ptr() as usize % align == 0
}

fn check_direct(align: usize, offset: u64, len: usize) -> Result<()> {
    if offset % len_u64(align) != 0 || len % align != 0 {
        return Err(invalid_input(
            "O_DIRECT store: offset and length must be multiples of the block size",
        ));
    }
    Ok(())
}

impl FdIo {
    /// How a reactor may use this fd: buffered reads can be tried from the
    /// page cache; O_DIRECT reads always wait for the device.
    pub(crate) fn nonblocking(&self) -> crate::nowait::Nonblocking {
        if self.is_direct() || self.nowait_unsupported.load(Ordering::Relaxed) {
            crate::nowait::Nonblocking::Never
        } else {
            crate::nowait::Nonblocking::TryReads
        }
    }

    /// One `preadv2(RWF_NOWAIT)`: succeeds only when the page cache holds
    /// every byte; anything less is [`crate::nowait::would_block`] (the
    /// command is run again on a worker, which reads the rest the usual
    /// way and reports real errors).
    fn read_nowait(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        if self.is_direct() || buf.is_empty() {
            return Err(crate::nowait::would_block());
        }
        let iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast::<libc::c_void>(),
            iov_len: buf.len(),
        };
        let off = to_off_t(offset).map_err(BackstoreError::Read)?;
        // SAFETY: `iov` describes `buf`, which is borrowed mutably for the
        // whole call, so the kernel may write up to `buf.len()` bytes into
        // it; the fd is owned by `self.file`.
        let n = unsafe { libc::preadv2(self.file.as_raw_fd(), &iov, 1, off, libc::RWF_NOWAIT) };
        if usize::try_from(n).is_ok_and(|n| n == buf.len()) {
            return Ok(());
        }
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EOPNOTSUPP) || e.raw_os_error() == Some(libc::EINVAL)
            {
                // A kernel or filesystem without RWF_NOWAIT for buffered
                // reads: stop trying on this fd.
                self.nowait_unsupported.store(true, Ordering::Relaxed);
            }
        }
        Err(crate::nowait::would_block())
    }
}

/// `pwritev2(RWF_DSYNC)` until every byte is written.
fn pwrite_all_dsync(file: &File, mut buf: &[u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        let iov = libc::iovec {
            iov_base: buf.as_ptr() as *mut libc::c_void,
            iov_len: buf.len(),
        };
        // SAFETY: `iov` points into `buf`, which outlives the call; the kernel
        // only reads from it (a write). The fd is owned by `file`.
        let n = unsafe {
            libc::pwritev2(
                file.as_raw_fd(),
                &iov,
                1,
                to_off_t(offset)?,
                libc::RWF_DSYNC,
            )
        };
        match usize::try_from(n) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(written) => {
                buf = buf.get(written..).unwrap_or_default();
                offset += len_u64(written);
            }
            Err(_) => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

/// Drivers of paravirtual disks (virtio-blk; Xen blkfront registers as
/// "vbd"): they report `queue/rotational` = 1
/// because they cannot tell (the kernel's default for a queue), whatever
/// the host stores the disk on, so their flag says nothing.
const UNKNOWN_ROTATION_DRIVERS: &[&str] = &["virtio_blk", "vbd"];

/// Whether the disk at `disk` (a sysfs block device directory) seeks: its
/// `queue/rotational` is 1 and it is not a paravirtual disk whose flag is
/// the kernel's default; a stacked device (md, dm) seeks when one of the
/// disks under it does (their own flag only reflects those disks'). An
/// unreadable flag counts as not seeking, as does anything past four
/// levels of stacking.
fn disk_seeks(disk: &std::path::Path, depth: u32) -> bool {
    if depth > 4 {
        return false;
    }
    if let Ok(slaves) = std::fs::read_dir(disk.join("slaves")) {
        let mut any = false;
        let mut seen = false;
        for slave in slaves.flatten().take(64) {
            seen = true;
            // A slave may be a partition: its disk is the parent directory.
            let path = slave.path();
            let path = match std::fs::canonicalize(&path) {
                Ok(p) if p.join("partition").exists() => p.parent().map(|d| d.to_path_buf()),
                Ok(p) => Some(p),
                Err(_) => None,
            };
            if path.is_some_and(|p| disk_seeks(&p, depth + 1)) {
                any = true;
            }
        }
        if seen {
            return any;
        }
    }
    let rotational =
        std::fs::read_to_string(disk.join("queue/rotational")).is_ok_and(|v| v.trim() == "1");
    rotational && !paravirtual(disk)
}

/// Whether `disk` is driven by one of [`UNKNOWN_ROTATION_DRIVERS`].
fn paravirtual(disk: &std::path::Path) -> bool {
    std::fs::read_link(disk.join("device/driver"))
        .ok()
        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
        .is_some_and(|name| UNKNOWN_ROTATION_DRIVERS.contains(&name.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;
    use std::path::Path;

    /// A sysfs-like block device directory `name` with its
    /// `queue/rotational`.
    fn queue(root: &Path, name: &str, rotational: bool) -> std::path::PathBuf {
        let d = root.join(name);
        std::fs::create_dir_all(d.join("queue")).unwrap();
        let flag = if rotational { "1\n" } else { "0\n" };
        std::fs::write(d.join("queue/rotational"), flag).unwrap();
        d
    }

    /// A disk: its queue and a `device/driver` link to a directory named
    /// after the driver.
    fn disk(root: &Path, name: &str, rotational: bool, driver: &str) -> std::path::PathBuf {
        let d = queue(root, name, rotational);
        std::fs::create_dir_all(d.join("device")).unwrap();
        let drv = root.join("drivers").join(driver);
        std::fs::create_dir_all(&drv).unwrap();
        symlink(&drv, d.join("device/driver")).unwrap();
        d
    }

    /// A stacked device over `under`, reporting `rotational` itself.
    fn stacked(root: &Path, name: &str, rotational: bool, under: &[&Path]) -> std::path::PathBuf {
        let d = queue(root, name, rotational);
        std::fs::create_dir_all(d.join("slaves")).unwrap();
        for u in under {
            symlink(u, d.join("slaves").join(u.file_name().unwrap())).unwrap();
        }
        d
    }

    #[test]
    fn a_rotational_disk_seeks_unless_its_driver_cannot_tell() {
        let t = tempfile::tempdir().unwrap();
        assert!(disk_seeks(&disk(t.path(), "sda", true, "sd"), 0));
        assert!(!disk_seeks(&disk(t.path(), "sdb", false, "sd"), 0));
        assert!(
            !disk_seeks(&disk(t.path(), "vda", true, "virtio_blk"), 0),
            "virtio-blk always says rotational"
        );
        assert!(!disk_seeks(&t.path().join("missing"), 0));
    }

    #[test]
    fn a_stacked_device_seeks_when_a_disk_under_it_does() {
        let t = tempfile::tempdir().unwrap();
        let hdd = disk(t.path(), "sda", true, "sd");
        let ssd = disk(t.path(), "sdb", false, "sd");
        let vd = disk(t.path(), "vda", true, "virtio_blk");
        assert!(disk_seeks(
            &stacked(t.path(), "md0", false, &[&ssd, &hdd]),
            0
        ));
        assert!(!disk_seeks(
            &stacked(t.path(), "md1", true, &[&vd, &ssd]),
            0
        ));
        let dm = stacked(t.path(), "dm-0", true, &[&t.path().join("md0")]);
        assert!(disk_seeks(&dm, 0), "dm over md over a rotational disk");
    }
}
