//! Mmap engine: a regular file mapped into memory (`backstore = "mmap"`).
//!
//! Guarantees:
//! - the file is opened, created, grown and refused exactly as by the file
//!   engine ([`FileBackstore`], which this engine keeps for its fd
//!   operations), then mapped shared read-write, or read-only for a
//!   read-only LUN, with memmap2;
//! - `read_at` copies out of the mapping and `write_at` into it: the page
//!   cache is shared with the fd, so data written either way is seen both
//!   ways;
//! - a FUA write is made durable with `msync(MS_SYNC)` of just the pages it
//!   wrote; `flush` msyncs the whole mapping (on Linux, msync of a shared
//!   file mapping is fsync of that range of the file);
//! - unmap, WRITE SAME and the allocation map work on the fd as in the file
//!   engine (hole punching; the mapping reads holes as zeros);
//! - kernel readahead is switched with `madvise` (MADV_NORMAL or
//!   MADV_RANDOM), which governs page faults on the mapping;
//! - [`MmapBackstore::mapped`] borrows the mapped bytes of a range for a
//!   zero-copy data path.
//!
//! # A file shortened behind rustgt's back
//!
//! Touching a mapped page that lies wholly past the end of the file raises
//! SIGBUS, which by default kills the process. This engine never lets that
//! happen:
//!
//! 1. before each access the range is compared with the file's current
//!    size (`fstat` of the mapped fd) and refused past it;
//! 2. because the file can shrink between that check and the copy, the
//!    engine installs (once per process) a SIGBUS handler (`sigaction`,
//!    `SA_SIGINFO | SA_ONSTACK`). Every mapping is registered in a
//!    fixed-size table of atomics (base, length, lowest truncated offset),
//!    so the handler needs no lock and no allocation. When the fault address
//!    (`si_addr`, `si_code == BUS_ADRERR`) lies inside a registered mapping,
//!    the handler maps one anonymous zero page over the faulting page
//!    (`mmap(MAP_FIXED | MAP_ANONYMOUS | MAP_PRIVATE)`), lowers the mapping's
//!    "truncated from" mark with an atomic `fetch_min`, and returns: the
//!    faulting copy then completes on zeros;
//! 3. after every copy the engine checks that mark and the file size again,
//!    and fails the access with [`BackstoreError::Read`] or
//!    [`BackstoreError::Write`], which the SCSI core reports as MEDIUM ERROR
//!    (UNRECOVERED READ ERROR / WRITE ERROR). Accesses reaching past the mark
//!    keep failing for the life of the store, even if the file grows back,
//!    since those pages of the mapping no longer reach the file; reopening
//!    the LUN maps it afresh.
//!
//! A SIGBUS whose address is in no registered mapping (a real bug, another
//! library's mapping, or a signal sent with `kill`) goes to the handler that
//! was installed before this one (Rust's own stack-guard handler, normally),
//! or, when that was the default action, restores the default and re-raises
//! it, so the process still dies as it should. The table holds
//! [`MmapBackstore::MAX_MAPPINGS`] mappings; opening more is a configuration error. The
//! handler is not reinstalled if other code replaces it later.
//!
//! Accesses to the mapping are raw-pointer copies (`copy_nonoverlapping`),
//! never references held across calls; the SCSI core's LBA range locks keep
//! rustgt's own reads and writes of one range from overlapping in time.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;
use std::sync::atomic::{compiler_fence, Ordering};

use memmap2::{Advice, MmapOptions, MmapRaw};

use crate::common::{check_range, check_write, invalid_input, len_u64};
use crate::file::{FileBackstore, FileOptions};
use crate::{
    error::BackstoreError, error::Result, geometry::DeviceKey, geometry::Extent,
    geometry::Geometry, store::Backstore,
};

/// A backing store on a memory-mapped regular file.
#[derive(Debug)]
pub struct MmapBackstore {
    /// The same file through the file engine: opening and sizing rules,
    /// unmap, WRITE SAME, extents and the device key.
    file: FileBackstore,
    /// The fd the mapping was made from; its size is checked around every
    /// access.
    map_file: File,
    /// The mapping's slot in the SIGBUS guard's table. Declared before
    /// `map` so that it is dropped (unregistered) before the mapping is
    /// unmapped and its addresses can be reused.
    guard: guard::Registration,
    map: MmapRaw,
    geometry: Geometry,
}

/// The mapped bytes of a range of an [`MmapBackstore`], borrowed for a
/// zero-copy data path (see [`MmapBackstore::mapped`]).
///
/// The range was backed by the file when it was borrowed, but the file can
/// still be shortened by someone else while it is in use: reads of such
/// pages give zeros instead of crashing. A user of [`MappedRange::as_ptr`]
/// (say, a `sendmsg` of the pages, where the kernel returns EFAULT on such
/// a page) must call [`MappedRange::check`] after the bytes are used and
/// fail the command if it reports an error.
#[derive(Debug)]
pub struct MappedRange<'a> {
    store: &'a MmapBackstore,
    offset: u64,
    start: usize,
    len: usize,
}

impl MmapBackstore {
    /// Mappings the SIGBUS guard can watch at once: at most this many mmap
    /// stores are open in one process.
    pub const MAX_MAPPINGS: usize = guard::MAX_MAPPINGS;

    /// Opens `path` as the file engine would (creating it sparse when it is
    /// missing and a size is given, growing it, never shrinking it) and maps
    /// it. `opts.direct` must be false: a mapping always goes through the
    /// page cache.
    pub fn open(path: impl AsRef<Path>, opts: &FileOptions) -> Result<Self> {
        let path = path.as_ref();
        if opts.direct {
            return Err(config(path, "the mmap engine cannot use O_DIRECT"));
        }
        let existed = std::fs::symlink_metadata(path).is_ok();
        let file = FileBackstore::open(path, opts)?;
        match Self::map(path, file, opts.read_only) {
            Ok(store) => Ok(store),
            Err(e) => {
                if !existed {
                    // Leave nothing behind from a failed creation.
                    let _ = std::fs::remove_file(path);
                }
                Err(e)
            }
        }
    }

    fn map(path: &Path, file: FileBackstore, read_only: bool) -> Result<Self> {
        let geometry = file.geometry();
        let size = geometry.size_bytes();
        let len = usize::try_from(size)
            .map_err(|_| config(path, &format!("{size} bytes cannot be mapped")))?;
        let map_file = OpenOptions::new()
            .read(true)
            .write(!read_only)
            .open(path)
            .map_err(|e| config(path, &format!("cannot open: {e}")))?;
        let now = map_file
            .metadata()
            .map_err(|e| config(path, &format!("cannot stat: {e}")))?
            .len();
        if now < size {
            return Err(config(
                path,
                &format!("shrank to {now} bytes while being opened (expected {size})"),
            ));
        }
        let mut options = MmapOptions::new();
        options.len(len);
        let map = if read_only {
            options.map_raw_read_only(&map_file)
        } else {
            options.map_raw(&map_file)
        }
        .map_err(|e| config(path, &format!("cannot map {len} bytes: {e}")))?;
        let guard = guard::Registration::new(map.as_ptr() as usize, map.len(), !read_only)
            .map_err(|e| config(path, &format!("cannot guard the mapping: {e}")))?;
        tracing::info!(
            path = %path.display(),
            size,
            block_size = geometry.block_size,
            read_only,
            thin = file.is_thin(),
            "mmap backstore opened"
        );
        Ok(Self {
            file,
            map_file,
            guard,
            map,
            geometry,
        })
    }

    /// The file's path as given.
    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// Whether all-zero WRITE SAME punches holes.
    pub fn is_thin(&self) -> bool {
        self.file.is_thin()
    }

    /// Whether an access has faulted on a page that the file no longer
    /// backs (the SIGBUS guard caught it). Accesses past the lowest such
    /// page fail from then on.
    pub fn truncated(&self) -> bool {
        self.guard.truncated_from().is_some()
    }

    /// Borrows the mapped bytes of `len` bytes from `offset`, after the same
    /// checks as a read: within the store ([`BackstoreError::OutOfRange`]),
    /// and still backed by the file ([`BackstoreError::Read`]).
    pub fn mapped(&self, offset: u64, len: u64) -> Result<MappedRange<'_>> {
        check_range(&self.geometry, offset, len)?;
        self.check_backed(offset, len)
            .map_err(BackstoreError::Read)?;
        let len = usize::try_from(len).map_err(|_| BackstoreError::OutOfRange { offset, len })?;
        let start = self.map_index(offset, len)?;
        Ok(MappedRange {
            store: self,
            offset,
            start,
            len,
        })
    }

    /// Index into the mapping of `len` bytes from `offset`; refuses any
    /// range not wholly inside it. This is the memory-safety check of every
    /// copy (the geometry check above it is the store's contract).
    fn map_index(&self, offset: u64, len: usize) -> Result<usize> {
        let out = || BackstoreError::OutOfRange {
            offset,
            len: len_u64(len),
        };
        let start = usize::try_from(offset).map_err(|_| out())?;
        match start.checked_add(len) {
            Some(end) if end <= self.map.len() => Ok(start),
            _ => Err(out()),
        }
    }

    /// Refuses a range the file no longer backs: past the lowest page the
    /// SIGBUS guard replaced, or past the file's current size.
    fn check_backed(&self, offset: u64, len: u64) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        let end = offset.saturating_add(len);
        if let Some(from) = self.guard.truncated_from() {
            if len_u64(from) < end {
                return Err(io::Error::other(format!(
                    "{}: bytes {offset}..{end} are gone: the backing file was truncated \
                     behind rustgt's back (pages from byte {from} on no longer reach it)",
                    self.path().display()
                )));
            }
        }
        let size = self.map_file.metadata()?.len();
        if end > size {
            return Err(io::Error::other(format!(
                "{}: bytes {offset}..{end} lie past the end of the backing file, which was \
                 truncated behind rustgt's back to {size} bytes",
                self.path().display()
            )));
        }
        Ok(())
    }

    /// Copies from the mapping into `buf`, then checks the range is still
    /// backed. No check of the file size beforehand: this is also the path
    /// on which the file shrinks mid-copy and the SIGBUS guard steps in.
    /// Whether every page of `len` bytes from `offset` is in memory, so a
    /// copy from the mapping cannot wait for the disk. False when unsure.
    fn resident(&self, offset: u64, len: usize) -> bool {
        const CHUNK: usize = 256;
        let Ok(start) = self.map_index(offset, len) else {
            return false;
        };
        let page = crate::common::page_size();
        if len == 0 {
            return len == 0;
        }
        let base = self.map.as_ptr() as usize;
        let first = (base + start) / page * page;
        let end = base + start + len;
        let mut addr = first;
        let mut vec = [0u8; CHUNK];
        while addr < end {
            let pages = (end - addr).div_ceil(page).min(CHUNK);
            // SAFETY: [addr, addr + pages * page) lies within the mapping
            // (page-aligned, as mmap returns page-aligned mappings and
            // `map_index` checked the range), which `&self` keeps mapped;
            // mincore writes one byte per page into `vec`, which holds
            // `pages <= CHUNK` bytes.
            let rc = unsafe {
                libc::mincore(
                    addr as *mut libc::c_void,
                    pages * page,
                    vec.as_mut_ptr().cast::<libc::c_uchar>(),
                )
            };
            if rc != 0 || vec.iter().take(pages).any(|v| v & 1 == 0) {
                return false;
            }
            addr += pages * page;
        }
        true
    }

    fn copy_out(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let start = self.map_index(offset, buf.len())?;
        // SAFETY: `map_index` proved `start + buf.len() <= self.map.len()`,
        // so the source lies inside the mapping, which `&self` keeps mapped;
        // `buf` is an exclusive borrow of other memory, so the ranges do not
        // overlap. A page the file no longer backs raises SIGBUS, which the
        // guard answers by mapping a zero page there (module doc), so the
        // copy always completes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.map.as_ptr().add(start),
                buf.as_mut_ptr(),
                buf.len(),
            );
        }
        // The guard's mark is set by a signal handler on this thread: keep
        // the compiler from moving the check above the copy.
        compiler_fence(Ordering::SeqCst);
        self.check_backed(offset, len_u64(buf.len()))
            .map_err(BackstoreError::Read)
    }

    /// Copies `buf` into the mapping, checks the range is still backed, and
    /// with `fua` msyncs the written pages.
    fn copy_in(&self, buf: &[u8], offset: u64, fua: bool) -> Result<()> {
        if self.geometry.read_only {
            return Err(BackstoreError::ReadOnly);
        }
        let start = self.map_index(offset, buf.len())?;
        // SAFETY: as in `copy_out`, the destination lies inside the mapping,
        // which is writable (the store is not read-only, so it was mapped
        // PROT_READ | PROT_WRITE) and kept mapped by `&self`; `buf` is a
        // shared borrow of other memory. The SCSI core's LBA range locks keep
        // other rustgt accesses off this range meanwhile. A page the file no
        // longer backs is replaced by the SIGBUS guard (module doc).
        unsafe {
            std::ptr::copy_nonoverlapping(
                buf.as_ptr(),
                self.map.as_mut_ptr().add(start),
                buf.len(),
            );
        }
        compiler_fence(Ordering::SeqCst);
        self.check_backed(offset, len_u64(buf.len()))
            .map_err(BackstoreError::Write)?;
        if fua && !buf.is_empty() {
            self.map
                .flush_range(start, buf.len())
                .map_err(BackstoreError::Write)?;
        }
        Ok(())
    }
}

impl MappedRange<'_> {
    /// Byte offset of the range in the store.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Bytes in the range.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the range is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Address of the first mapped byte, valid for [`MappedRange::len`]
    /// bytes while the borrow lives: for handing the pages to the kernel
    /// (an iovec for `sendmsg`/`writev`) without copying them.
    pub fn as_ptr(&self) -> *const u8 {
        self.store.map.as_ptr().wrapping_add(self.start)
    }

    /// The mapped bytes as a slice.
    ///
    /// # Safety
    ///
    /// Nothing may write the range while the slice lives: neither this
    /// store's `write_at`/`write_same`/`unmap` (hold the SCSI core's LBA
    /// range lock for it) nor another process writing the file. Call
    /// [`MappedRange::check`] after using the bytes: if the file was
    /// shortened meanwhile, they may have read as zeros.
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: the range lies inside the mapping (`mapped` checked it),
        // which lives as long as the borrowed store; the caller promises no
        // writes while the slice lives.
        unsafe { std::slice::from_raw_parts(self.as_ptr(), self.len) }
    }

    /// Copies the range into `dst` (exactly [`MappedRange::len`] bytes),
    /// with the checks of a read done afterwards.
    pub fn copy_to(&self, dst: &mut [u8]) -> Result<()> {
        if dst.len() != self.len {
            return Err(invalid_input(
                "mapped range copy: destination length differs from the range",
            ));
        }
        self.store.copy_out(dst, self.offset)
    }

    /// Whether the range is still backed by the file: an error when it was
    /// shortened since (the bytes read through the borrow may be zeros).
    pub fn check(&self) -> Result<()> {
        self.store
            .check_backed(self.offset, len_u64(self.len))
            .map_err(BackstoreError::Read)
    }
}

impl Backstore for MmapBackstore {
    fn kind(&self) -> &'static str {
        "mmap"
    }

    fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn kernel_readahead(&self, on: bool) -> Result<()> {
        let advice = if on { Advice::Normal } else { Advice::Random };
        self.map.advise(advice).map_err(BackstoreError::Io)
    }

    fn device_key(&self) -> Option<DeviceKey> {
        self.file.device_key()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        check_range(&self.geometry, offset, len_u64(buf.len()))?;
        self.check_backed(offset, len_u64(buf.len()))
            .map_err(BackstoreError::Read)?;
        if crate::nowait::active() && !self.resident(offset, buf.len()) {
            // A page fault here would wait for the disk on a reactor.
            return Err(crate::nowait::would_block());
        }
        self.copy_out(buf, offset)
    }

    /// Reads can run on a reactor when their pages are resident
    /// (`mincore`); writes may wait for dirty-page writeback, so they go
    /// to the workers.
    fn nonblocking(&self) -> crate::nowait::Nonblocking {
        crate::nowait::Nonblocking::TryReads
    }

    fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> Result<()> {
        check_write(&self.geometry, offset, len_u64(buf.len()))?;
        self.check_backed(offset, len_u64(buf.len()))
            .map_err(BackstoreError::Write)?;
        self.copy_in(buf, offset, fua)
    }

    fn flush(&self) -> Result<()> {
        if self.geometry.read_only {
            return Ok(());
        }
        self.map.flush().map_err(BackstoreError::Flush)
    }

    fn write_same(&self, pattern: &[u8], offset: u64, len: u64) -> Result<()> {
        check_write(&self.geometry, offset, len)?;
        self.check_backed(offset, len)
            .map_err(BackstoreError::Write)?;
        self.file.write_same(pattern, offset, len)
    }

    fn unmap(&self, offset: u64, len: u64) -> Result<()> {
        check_write(&self.geometry, offset, len)?;
        self.check_backed(offset, len)
            .map_err(BackstoreError::Write)?;
        self.file.unmap(offset, len)
    }

    fn extents(&self, offset: u64, len: u64) -> Result<Vec<Extent>> {
        check_range(&self.geometry, offset, len)?;
        self.check_backed(offset, len)
            .map_err(BackstoreError::Read)?;
        self.file.extents(offset, len)
    }

    fn supports_write_same(&self) -> bool {
        true
    }

    fn supports_unmap(&self) -> bool {
        true
    }
}

fn config(path: &Path, msg: &str) -> BackstoreError {
    BackstoreError::Config(format!("{}: {msg}", path.display()))
}

/// The process-wide SIGBUS guard (see the module doc).
mod guard {
    use std::io;
    use std::ptr;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::OnceLock;

    use libc::{c_int, c_void, siginfo_t};

    /// Mappings the guard can watch at once (one per open mmap LUN).
    pub(super) const MAX_MAPPINGS: usize = 1024;

    /// No truncation seen.
    const NONE: usize = usize::MAX;

    /// One registered mapping. `base == 0` means the slot is free (or being
    /// filled); the handler reads `base`, `len`, `base` again and skips the
    /// slot when the two reads differ.
    #[derive(Debug)]
    struct Slot {
        used: AtomicBool,
        base: AtomicUsize,
        len: AtomicUsize,
        writable: AtomicBool,
        /// Offset in the mapping of the lowest page replaced by zeros.
        truncated_from: AtomicUsize,
    }

    impl Slot {
        const fn new() -> Self {
            Self {
                used: AtomicBool::new(false),
                base: AtomicUsize::new(0),
                len: AtomicUsize::new(0),
                writable: AtomicBool::new(false),
                truncated_from: AtomicUsize::new(NONE),
            }
        }
    }

    static REGISTRY: [Slot; MAX_MAPPINGS] = [const { Slot::new() }; MAX_MAPPINGS];
    /// The page size, read once at installation (sysconf is not
    /// async-signal-safe).
    static PAGE: AtomicUsize = AtomicUsize::new(0);
    /// The SIGBUS disposition found at installation, to chain to.
    static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();
    /// Whether the handler went in (the errno when it did not).
    static INSTALLED: OnceLock<std::result::Result<(), i32>> = OnceLock::new();

    /// A mapping's slot; dropping it unregisters the mapping.
    #[derive(Debug)]
    pub(super) struct Registration {
        slot: &'static Slot,
    }

    impl Registration {
        /// Installs the handler if need be and registers `len` bytes from
        /// `base` (page-aligned, as mmap returns it).
        pub(super) fn new(base: usize, len: usize, writable: bool) -> io::Result<Self> {
            install()?;
            if base == 0 || len == 0 {
                return Err(io::Error::from(io::ErrorKind::InvalidInput));
            }
            let slot = REGISTRY
                .iter()
                .find(|s| {
                    s.used
                        .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                })
                .ok_or_else(|| {
                    io::Error::other(format!(
                        "at most {MAX_MAPPINGS} mmap backstores can be open at once"
                    ))
                })?;
            slot.len.store(len, Ordering::SeqCst);
            slot.writable.store(writable, Ordering::SeqCst);
            slot.truncated_from.store(NONE, Ordering::SeqCst);
            slot.base.store(base, Ordering::SeqCst);
            Ok(Self { slot })
        }

        /// Offset of the lowest page the handler replaced, if any.
        pub(super) fn truncated_from(&self) -> Option<usize> {
            match self.slot.truncated_from.load(Ordering::SeqCst) {
                NONE => None,
                from => Some(from),
            }
        }
    }

    impl Drop for Registration {
        fn drop(&mut self) {
            self.slot.base.store(0, Ordering::SeqCst);
            self.slot.len.store(0, Ordering::SeqCst);
            self.slot.used.store(false, Ordering::SeqCst);
        }
    }

    fn install() -> io::Result<()> {
        let result = INSTALLED.get_or_init(|| {
            // SAFETY: sysconf only reads its scalar argument.
            let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
            let page = usize::try_from(page).unwrap_or(4096);
            PAGE.store(page, Ordering::SeqCst);
            // SAFETY: `sigaction` is plain old data; all-zero is a valid
            // value (SIG_DFL, empty mask, no flags).
            let mut previous: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: a null new action only queries the current one into
            // `previous`, a valid, exclusively borrowed struct.
            if unsafe { libc::sigaction(libc::SIGBUS, ptr::null(), &mut previous) } != 0 {
                return Err(io::Error::last_os_error().raw_os_error().unwrap_or(0));
            }
            // Kept before our handler goes in, so the handler always finds it.
            let _ = PREVIOUS.set(previous);
            // SAFETY: as above, all-zero is a valid `sigaction`.
            let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
            let handler: extern "C" fn(c_int, *mut siginfo_t, *mut c_void) = on_sigbus;
            action.sa_sigaction = handler as libc::sighandler_t;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            // SAFETY: `action.sa_mask` is a valid, exclusively borrowed sigset.
            unsafe { libc::sigemptyset(&mut action.sa_mask) };
            // SAFETY: `action` is fully initialised and names a handler with
            // the SA_SIGINFO signature; the old action is not asked for.
            if unsafe { libc::sigaction(libc::SIGBUS, &action, ptr::null_mut()) } != 0 {
                return Err(io::Error::last_os_error().raw_os_error().unwrap_or(0));
            }
            Ok(())
        });
        result.map_err(io::Error::from_raw_os_error)
    }

    /// The SIGBUS handler. Async-signal-safe: atomics, `mmap`, `sigaction`
    /// and `raise` only; no locks, no allocation.
    extern "C" fn on_sigbus(sig: c_int, info: *mut siginfo_t, ctx: *mut c_void) {
        // SAFETY: errno is thread-local; the handler restores it on exit so
        // the interrupted code never sees it change.
        let errno = unsafe { *libc::__errno_location() };
        let absorbed = absorb(info);
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = errno };
        if !absorbed {
            chain(sig, info, ctx);
        }
    }

    /// Maps a zero page over a fault inside a registered mapping and marks
    /// it truncated; `false` when the fault is not ours to absorb.
    fn absorb(info: *const siginfo_t) -> bool {
        if info.is_null() {
            return false;
        }
        // SAFETY: with SA_SIGINFO the kernel passes a valid siginfo_t; for a
        // kernel-generated SIGBUS (si_code BUS_ADRERR) `si_addr` is the
        // faulting address.
        let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
        if code != libc::BUS_ADRERR {
            return false;
        }
        let page = PAGE.load(Ordering::SeqCst);
        if page == 0 {
            return false;
        }
        for slot in &REGISTRY {
            let base = slot.base.load(Ordering::SeqCst);
            if base == 0 || addr < base {
                continue;
            }
            let len = slot.len.load(Ordering::SeqCst);
            if addr - base >= len || slot.base.load(Ordering::SeqCst) != base {
                continue;
            }
            let start = addr & !(page - 1);
            let prot = if slot.writable.load(Ordering::SeqCst) {
                libc::PROT_READ | libc::PROT_WRITE
            } else {
                libc::PROT_READ
            };
            // SAFETY: `start` is the page holding `addr`, inside a live
            // mapping this engine registered (a registration lives no longer
            // than its mapping, and a fault in it means an access through
            // the engine is in progress, so it is not being unregistered).
            // MAP_FIXED replaces just that page with anonymous zeros; the
            // page no longer reaches the file anyway, and the engine fails
            // every access to it from now on.
            let mapped = unsafe {
                libc::mmap(
                    start as *mut c_void,
                    page,
                    prot,
                    libc::MAP_FIXED | libc::MAP_ANONYMOUS | libc::MAP_PRIVATE,
                    -1,
                    0,
                )
            };
            if mapped == libc::MAP_FAILED {
                return false;
            }
            slot.truncated_from
                .fetch_min(start.saturating_sub(base), Ordering::SeqCst);
            return true;
        }
        false
    }

    /// Hands a fault that is not ours to the previous disposition.
    fn chain(sig: c_int, info: *mut siginfo_t, ctx: *mut c_void) {
        let previous = PREVIOUS.get();
        let handler = previous.map_or(libc::SIG_DFL, |p| p.sa_sigaction);
        match previous {
            Some(p) if handler != libc::SIG_DFL && handler != libc::SIG_IGN => {
                if p.sa_flags & libc::SA_SIGINFO != 0 {
                    // SAFETY: the previous action was installed with
                    // SA_SIGINFO, so its handler has this signature.
                    let f: extern "C" fn(c_int, *mut siginfo_t, *mut c_void) =
                        unsafe { std::mem::transmute(handler) };
                    f(sig, info, ctx);
                } else {
                    // SAFETY: without SA_SIGINFO the handler takes the
                    // signal number only.
                    let f: extern "C" fn(c_int) = unsafe { std::mem::transmute(handler) };
                    f(sig);
                }
            }
            _ => {
                // The default action (an ignored SIGBUS from a fault is fatal
                // too): restore it and re-raise. The signal is blocked in
                // here, so it is delivered as the handler returns; a
                // hardware fault would recur anyway.
                // SAFETY: all-zero is a valid `sigaction` (SIG_DFL).
                let mut dfl: libc::sigaction = unsafe { std::mem::zeroed() };
                dfl.sa_sigaction = libc::SIG_DFL;
                // SAFETY: `dfl` is a valid action; sigaction and raise are
                // async-signal-safe.
                unsafe {
                    libc::sigaction(libc::SIGBUS, &dfl, ptr::null_mut());
                    libc::raise(libc::SIGBUS);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn opts(size: u64) -> FileOptions {
        FileOptions {
            size: Some(size),
            ..FileOptions::default()
        }
    }

    /// The race: the size check passed, then the file shrinks, then the
    /// copy runs. The copy (size check bypassed) must fault, be absorbed by
    /// the guard and report a medium error; the process survives.
    #[test]
    fn copy_after_truncation_is_absorbed_and_fails() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("lun.img");
        let store = MmapBackstore::open(&path, &opts(4 * MIB)).expect("open");
        store
            .write_at(&vec![0x5A; 8192], 3 * MIB, false)
            .expect("write");
        let other = OpenOptions::new().write(true).open(&path).expect("reopen");
        other.set_len(MIB).expect("truncate");

        let mut buf = vec![0xEE; 8192];
        let err = store
            .copy_out(&mut buf, 3 * MIB)
            .expect_err("truncated read");
        assert!(matches!(err, BackstoreError::Read(_)), "{err:?}");
        assert!(store.truncated(), "the SIGBUS guard must have run");
        assert!(buf.iter().all(|&b| b == 0), "faulted pages read as zeros");
        let from = store.guard.truncated_from().expect("mark");
        assert!(len_u64(from) <= 3 * MIB && len_u64(from) >= MIB, "{from}");

        let err = store
            .copy_in(&[1u8; 512], 3 * MIB + 4096, false)
            .expect_err("truncated write");
        assert!(matches!(err, BackstoreError::Write(_)), "{err:?}");
        // Still failed after the file grows back: those pages are gone.
        other.set_len(4 * MIB).expect("regrow");
        let err = store.read_at(&mut buf, 3 * MIB).expect_err("still failed");
        assert!(matches!(err, BackstoreError::Read(_)), "{err:?}");
        // The part the file still backs is intact.
        let mut head = vec![0u8; 512];
        store.read_at(&mut head, 0).expect("read head");
    }

    #[test]
    fn map_index_refuses_ranges_outside_the_mapping() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = MmapBackstore::open(dir.path().join("a.img"), &opts(MIB)).expect("open");
        let m = usize::try_from(MIB).expect("usize");
        assert_eq!(store.map_index(0, m).ok(), Some(0));
        assert!(store.map_index(1, m).is_err());
        assert!(store.map_index(u64::MAX, 1).is_err());
        let mut buf = [0u8; 512];
        assert!(matches!(
            store.copy_out(&mut buf, MIB),
            Err(BackstoreError::OutOfRange { .. })
        ));
    }
}
