//! File engine: a regular file holds the LUN's blocks.
//!
//! Guarantees:
//! - a missing file is created sparse (`set_len`), so a 1 TiB LUN costs
//!   nothing until written;
//! - an existing file is never shrunk: a smaller requested size is a
//!   [`BackstoreError::Config`] naming the path and both sizes; a larger one
//!   grows it (sparse);
//! - unmap punches holes (`FALLOC_FL_PUNCH_HOLE`), so blocks really return
//!   to the filesystem; filesystems without hole punching get zeros written;
//! - one `File` is shared by all worker threads (positioned I/O only);
//! - the allocation map comes from the file's holes (`SEEK_DATA` /
//!   `SEEK_HOLE`); filesystems that cannot tell report everything mapped.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::common::{check_range, geometry_for, push_extent, validate_block_size};
use crate::fdio::{is_unsupported, FdIo};
use crate::fdstore::{config, probe_direct, FdStore, Medium};
use crate::{error::BackstoreError, error::Result, geometry::Extent};

/// How to open or create a file store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileOptions {
    /// Size in bytes. Required to create the file; `None` uses an existing
    /// file's size; larger than the file grows it; smaller is refused.
    pub size: Option<u64>,
    /// Logical block size: 512 or 4096.
    pub block_size: u32,
    /// Open read-only; the file must then exist and is never resized.
    pub read_only: bool,
    /// Thin provisioning: an all-zero WRITE SAME punches a hole instead of
    /// writing (or allocating) zeros.
    pub thin: bool,
    /// Open with O_DIRECT (bypass the page cache). Offsets and lengths must
    /// then be block multiples; unaligned buffers are bounced.
    pub direct: bool,
}

impl Default for FileOptions {
    fn default() -> Self {
        Self {
            size: None,
            block_size: 512,
            read_only: false,
            thin: false,
            direct: false,
        }
    }
}

/// A backing store on a regular file.
pub type FileBackstore = FdStore<RegularFile>;

/// The [`Medium`] of a regular file: holes punched and reported.
#[derive(Debug)]
pub struct RegularFile;

impl FileBackstore {
    /// Opens `path`, creating it (sparse) when missing and a size is given.
    pub fn open(path: impl AsRef<Path>, opts: &FileOptions) -> Result<Self> {
        let path = path.as_ref();
        validate_block_size(opts.block_size)?;
        if let Some(size) = opts.size {
            geometry_for(&path.display().to_string(), size, opts.block_size, false)?;
        }
        let (file, created) = open_or_create(path, opts)?;
        match Self::finish_open(path, file, created, opts) {
            Ok(store) => Ok(store),
            Err(e) => {
                if created {
                    // Leave nothing behind from a failed creation.
                    let _ = std::fs::remove_file(path);
                }
                Err(e)
            }
        }
    }

    fn finish_open(path: &Path, file: File, created: bool, opts: &FileOptions) -> Result<Self> {
        let meta = file
            .metadata()
            .map_err(|e| config(path, &format!("cannot stat: {e}")))?;
        if !meta.file_type().is_file() {
            return Err(not_regular(path));
        }
        let size = resolve_size(path, &file, meta.len(), created, opts)?;
        let geometry = geometry_for(
            &path.display().to_string(),
            size,
            opts.block_size,
            opts.read_only,
        )?;
        let io = FdIo::new(file, opts.direct.then_some(opts.block_size));
        if opts.direct {
            probe_direct(path, &io, opts.block_size)?;
        }
        tracing::info!(
            path = %path.display(),
            size,
            block_size = opts.block_size,
            read_only = opts.read_only,
            thin = opts.thin,
            direct = opts.direct,
            created,
            "file backstore opened"
        );
        Ok(Self {
            path: path.to_owned(),
            io,
            geometry,
            thin: opts.thin,
            medium: RegularFile,
        })
    }

    /// Whether all-zero WRITE SAME punches holes.
    pub fn is_thin(&self) -> bool {
        self.thin
    }

    /// Whether the file was opened with O_DIRECT.
    pub fn is_direct(&self) -> bool {
        self.io.is_direct()
    }

    /// Deallocates the range, or writes zeros where holes cannot be punched.
    fn punch_hole(&self, offset: u64, len: u64) -> Result<()> {
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        match self.io.fallocate(mode, offset, len) {
            Ok(()) => Ok(()),
            Err(e) if is_unsupported(&e) => self.write_zeros(offset, len),
            Err(e) => Err(BackstoreError::Write(e)),
        }
    }

    /// Zeroes the range keeping it allocated (`FALLOC_FL_ZERO_RANGE`), or
    /// writes zeros where the filesystem cannot.
    fn zero_range(&self, offset: u64, len: u64) -> Result<()> {
        let mode = libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE;
        match self.io.fallocate(mode, offset, len) {
            Ok(()) => Ok(()),
            Err(e) if is_unsupported(&e) => self.write_zeros(offset, len),
            Err(e) => Err(BackstoreError::Write(e)),
        }
    }

    /// Walks the file's data and holes over `[offset, offset + len)`.
    fn map_holes(&self, offset: u64, len: u64) -> io::Result<Vec<Extent>> {
        let end = offset.saturating_add(len);
        let mut runs = Vec::new();
        let mut pos = offset;
        while pos < end {
            // No data at or after `pos`: the rest is one hole.
            let data = self.io.seek(libc::SEEK_DATA, pos)?.unwrap_or(end).min(end);
            if data > pos {
                push_extent(&mut runs, data - pos, false);
                pos = data;
                continue;
            }
            // `pos` is in data; it runs to the next hole (EOF at worst).
            let hole = self.io.seek(libc::SEEK_HOLE, pos)?.unwrap_or(end).min(end);
            // A hole at or before `pos` would contradict SEEK_DATA (a racing
            // writer): call the rest mapped rather than loop.
            let stop = if hole > pos { hole } else { end };
            push_extent(&mut runs, stop - pos, true);
            pos = stop;
        }
        Ok(runs)
    }
}

impl Medium for RegularFile {
    const KIND: &'static str = "file";
    const TYPE_NAME: &'static str = "FileBackstore";
    const BLOCK_DEVICE: bool = false;

    fn zero(store: &FileBackstore, offset: u64, len: u64) -> Result<()> {
        store.zero_range(offset, len)
    }

    fn deallocate(store: &FileBackstore, offset: u64, len: u64) -> Result<()> {
        store.punch_hole(offset, len)
    }

    fn extents(store: &FileBackstore, offset: u64, len: u64) -> Result<Vec<Extent>> {
        check_range(&store.geometry, offset, len)?;
        match store.map_holes(offset, len) {
            Ok(runs) => Ok(runs),
            // Filesystems without hole reporting: everything is data.
            Err(e) if is_unsupported(&e) || e.raw_os_error() == Some(libc::EINVAL) => {
                let mut runs = Vec::new();
                push_extent(&mut runs, len, true);
                Ok(runs)
            }
            Err(e) => Err(BackstoreError::Read(e)),
        }
    }
}

fn not_regular(path: &Path) -> BackstoreError {
    config(
        path,
        "is not a regular file (use the blockdev engine for block devices)",
    )
}

/// Opens the file, creating it (mode 0600) when missing and allowed to.
/// Returns whether it was created.
fn open_or_create(path: &Path, opts: &FileOptions) -> Result<(File, bool)> {
    // Look before opening: opening a FIFO would block, a directory fails vaguely.
    if let Ok(meta) = std::fs::metadata(path) {
        if !meta.file_type().is_file() {
            return Err(not_regular(path));
        }
    }
    let mut oo = OpenOptions::new();
    oo.read(true).write(!opts.read_only);
    if opts.direct {
        oo.custom_flags(libc::O_DIRECT);
    }
    match oo.open(path) {
        Ok(f) => return Ok((f, false)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(open_error(path, opts, &e)),
    }
    if opts.read_only {
        return Err(config(
            path,
            "does not exist (a read-only store is never created)",
        ));
    }
    if opts.size.is_none() {
        return Err(config(
            path,
            "does not exist and no size was given to create it",
        ));
    }
    oo.create_new(true).mode(0o600);
    match oo.open(path) {
        Ok(f) => Ok((f, true)),
        Err(e) => Err(open_error(path, opts, &e)),
    }
}

fn open_error(path: &Path, opts: &FileOptions, e: &io::Error) -> BackstoreError {
    if opts.direct && e.raw_os_error() == Some(libc::EINVAL) {
        config(path, "the filesystem does not support O_DIRECT")
    } else {
        config(path, &format!("cannot open: {e}"))
    }
}

/// Decides the store's size, growing the file when asked; never shrinks.
fn resolve_size(
    path: &Path,
    file: &File,
    current: u64,
    created: bool,
    opts: &FileOptions,
) -> Result<u64> {
    let Some(wanted) = opts.size else {
        return Ok(current);
    };
    if created || wanted > current {
        if opts.read_only {
            return Err(config(
                path,
                &format!(
                    "requested size {wanted} bytes is larger than the file's {current} bytes \
                     and a read-only store cannot grow it"
                ),
            ));
        }
        file.set_len(wanted)
            .map_err(|e| config(path, &format!("cannot set size to {wanted} bytes: {e}")))?;
        if !created {
            tracing::info!(path = %path.display(), from = current, to = wanted, "grew file backstore");
        }
        return Ok(wanted);
    }
    if wanted < current {
        return Err(config(
            path,
            &format!(
                "requested size {wanted} bytes is smaller than the existing file's {current} bytes; \
                 refusing to shrink it (data would be lost)"
            ),
        ));
    }
    Ok(current)
}
