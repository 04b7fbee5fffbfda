//! Non-blocking attempts (`nowait::attempt`) on the real engines: what each
//! says it can do on a reactor, page-cache hits served at once, and a read
//! whose pages are not in memory refused instead of waiting.

use std::fs::File;
use std::os::fd::AsRawFd;

use rustgt_backstore::{
    nowait, Backstore, FileBackstore, FileOptions, MmapBackstore, Nonblocking, NullBackstore,
    RamBackstore,
};

const MIB: u64 = 1 << 20;

fn opts() -> FileOptions {
    FileOptions {
        size: Some(4 * MIB),
        ..FileOptions::default()
    }
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 253) as u8 | 1).collect()
}

/// Reads inside an attempt: the result and whether the attempt gave up.
fn try_read(store: &dyn Backstore, offset: u64, len: usize) -> (Result<Vec<u8>, String>, bool) {
    nowait::attempt(|| {
        let mut buf = vec![0u8; len];
        store
            .read_at(&mut buf, offset)
            .map(|()| buf)
            .map_err(|e| e.to_string())
    })
}

/// Drops the file's clean pages from the page cache.
fn evict(path: &std::path::Path) {
    let f = File::open(path).expect("open for fadvise");
    f.sync_all().expect("fsync");
    // SAFETY: posix_fadvise only reads its scalar arguments; the fd is
    // owned by `f` for the duration of the call.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0, "posix_fadvise(DONTNEED)");
}

/// Evicts the file's pages until a nowait read of the range gives up, and
/// says whether it did. The kernel keeps pages it added to a per-CPU batch
/// of another CPU from being dropped until that batch drains, so one
/// fadvise is not always enough; bounded to 100 tries.
fn evict_until_refused(
    store: &dyn Backstore,
    path: &std::path::Path,
    offset: u64,
    len: usize,
) -> bool {
    for _ in 0..100 {
        evict(path);
        if try_read(store, offset, len).1 {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    false
}

#[test]
fn memory_stores_never_block() {
    let ram = RamBackstore::new(MIB, 512, false).expect("ram");
    let null = NullBackstore::new(MIB, 512, false).expect("null");
    assert_eq!(ram.nonblocking(), Nonblocking::Always);
    assert_eq!(null.nonblocking(), Nonblocking::Always);
    let (r, blocked) = nowait::attempt(|| ram.write_at(&pattern(4096), 8192, false));
    assert!(r.is_ok() && !blocked);
    let (r, blocked) = try_read(&ram, 8192, 4096);
    assert_eq!((r, blocked), (Ok(pattern(4096)), false));
}

#[test]
fn buffered_file_reads_hit_the_page_cache_or_give_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("lun.img");
    let store = FileBackstore::open(&path, &opts()).expect("file store");
    assert_eq!(store.nonblocking(), Nonblocking::TryReads);
    store
        .write_at(&pattern(64 * 1024), MIB, false)
        .expect("write");

    // Just written: in the page cache, served inside the attempt.
    let (r, blocked) = try_read(&store, MIB, 64 * 1024);
    assert_eq!((r, blocked), (Ok(pattern(64 * 1024)), false));

    // Evicted: the attempt must give up rather than wait for the disk. (A
    // refused read may start the kernel's readahead, so the pages can be
    // back right after it: only the refused read itself is checked.)
    assert!(
        evict_until_refused(&store, &path, MIB, 64 * 1024),
        "an uncached read inside an attempt gives up"
    );

    // A read where blocking is allowed still works, and caches the pages.
    let mut buf = vec![0u8; 64 * 1024];
    store.read_at(&mut buf, MIB).expect("blocking read");
    assert_eq!(buf, pattern(64 * 1024));
    if store.nonblocking() == Nonblocking::TryReads {
        let (r, blocked) = try_read(&store, MIB, 64 * 1024);
        assert_eq!((r, blocked), (Ok(pattern(64 * 1024)), false));
    }
}

#[test]
fn mapped_reads_run_only_on_resident_pages() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("lun.img");
    let store = MmapBackstore::open(&path, &opts()).expect("mmap store");
    assert_eq!(store.nonblocking(), Nonblocking::TryReads);
    store
        .write_at(&pattern(8192), 3 * 4096, false)
        .expect("write");
    let (r, blocked) = try_read(&store, 3 * 4096, 8192);
    assert_eq!((r, blocked), (Ok(pattern(8192)), false));
    // Not in memory (dropped from the page cache, never touched through
    // the mapping): a first read would fault it in from the disk, which
    // the reactor must not do.
    assert!(
        evict_until_refused(&store, &path, 3 * MIB, 4096),
        "pages not in memory are the workers' business"
    );
}
