//! The mmap engine: round trips through the mapping, FUA and flush through
//! msync, read-only mappings, the file engine's sizing rules, unmap and
//! WRITE SAME, borrowing mapped bytes, and a backing file truncated behind
//! the engine's back (an error, never a SIGBUS crash), while a SIGBUS
//! outside its mappings still kills the process.

use std::fs::OpenOptions;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::Arc;

use rustgt_backstore::{
    open, Backstore, BackstoreError, BackstoreSpec, EngineKind, FileOptions, MmapBackstore,
};

const MIB: u64 = 1 << 20;

fn opts(size: Option<u64>) -> FileOptions {
    FileOptions {
        size,
        ..FileOptions::default()
    }
}

fn mmap_store(path: &Path, size: u64) -> MmapBackstore {
    MmapBackstore::open(path, &opts(Some(size))).expect("open mmap store")
}

/// Deterministic, position-dependent bytes so misplaced data is caught.
fn data(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1)
        .collect()
}

fn read(store: &dyn Backstore, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0xEEu8; len];
    store.read_at(&mut buf, offset).expect("read");
    buf
}

/// Reads the file through a fresh handle, bypassing the store.
fn read_file(path: &Path, offset: u64, len: usize) -> Vec<u8> {
    let f = std::fs::File::open(path).expect("fresh open");
    let mut buf = vec![0u8; len];
    f.read_exact_at(&mut buf, offset).expect("fresh read");
    buf
}

fn truncate(path: &Path, size: u64) {
    OpenOptions::new()
        .write(true)
        .open(path)
        .expect("second handle")
        .set_len(size)
        .expect("set_len");
}

#[test]
fn factory_builds_a_sparse_mmap_store_that_round_trips() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("lun.img");
    let store = open(&BackstoreSpec::mmap(&path, Some(8 * MIB))).expect("open");
    assert_eq!(store.kind(), "mmap");
    assert_eq!(store.geometry().size_bytes(), 8 * MIB);
    assert_eq!(store.geometry().block_size, 512);
    assert!(store.supports_unmap() && store.supports_write_same());
    let meta = std::fs::metadata(&path).expect("stat");
    assert_eq!(meta.len(), 8 * MIB);
    assert!(meta.blocks() * 512 < MIB, "created sparse");

    let places = [
        (0u64, 4096usize, 1u8),
        (MIB - 4096, 8192, 2),
        (8 * MIB - 4096, 4096, 3),
    ];
    for (i, &(offset, len, seed)) in places.iter().enumerate() {
        store
            .write_at(&data(len, seed), offset, i % 2 == 0)
            .expect("write");
    }
    store.flush().expect("flush");
    for &(offset, len, seed) in &places {
        assert_eq!(
            read(store.as_ref(), offset, len),
            data(len, seed),
            "at {offset}"
        );
        // The mapping and the file are one page cache.
        assert_eq!(
            read_file(&path, offset, len),
            data(len, seed),
            "file at {offset}"
        );
    }
    assert!(read(store.as_ref(), 2 * MIB, 4096).iter().all(|&b| b == 0));

    // Range checks as every engine.
    let mut buf = vec![0u8; 1024];
    assert!(matches!(
        store.read_at(&mut buf, 8 * MIB - 512),
        Err(BackstoreError::OutOfRange { .. })
    ));
    assert!(matches!(
        store.write_at(&buf, u64::MAX - 511, false),
        Err(BackstoreError::OutOfRange { .. })
    ));
    store
        .read_at(&mut [], 8 * MIB)
        .expect("empty read at the end");
}

#[test]
fn fua_write_and_flush_are_durable_and_seen_by_a_fresh_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("lun.img");
    let store = mmap_store(&path, 4 * MIB);
    let payload = data(12288, 7);
    // An offset that is not page-aligned: msync must round it down.
    store
        .write_at(&payload, MIB + 512, true)
        .expect("FUA write");
    store.write_at(&data(4096, 9), 0, false).expect("write");
    store.flush().expect("flush");
    drop(store);
    assert_eq!(read_file(&path, MIB + 512, payload.len()), payload);
    assert_eq!(read_file(&path, 0, 4096), data(4096, 9));
    // Reopened without a size, the mapping shows the same bytes.
    let again = MmapBackstore::open(&path, &opts(None)).expect("reopen");
    assert_eq!(again.geometry().size_bytes(), 4 * MIB);
    assert_eq!(read(&again, MIB + 512, payload.len()), payload);
}

#[test]
fn read_only_mapping_refuses_writes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ro.img");
    std::fs::write(&path, data(64 * 1024, 4)).expect("seed file");
    let ro = FileOptions {
        read_only: true,
        ..FileOptions::default()
    };
    let store = MmapBackstore::open(&path, &ro).expect("open read-only");
    assert!(store.geometry().read_only);
    let buf = [7u8; 512];
    let refused = |r: Result<(), BackstoreError>| matches!(r, Err(BackstoreError::ReadOnly));
    assert!(refused(store.write_at(&buf, 0, false)));
    assert!(refused(store.write_at(&buf, 0, true)));
    assert!(refused(store.unmap(0, 512)));
    assert!(refused(store.write_same(&buf, 0, 4096)));
    store.flush().expect("flush of a read-only store");
    assert_eq!(read(&store, 0, 64 * 1024), data(64 * 1024, 4));
    assert_eq!(read_file(&path, 0, 512), data(512, 4), "file unchanged");

    // A read-only store is never created.
    let missing = MmapBackstore::open(dir.path().join("none.img"), &ro);
    assert!(matches!(missing, Err(BackstoreError::Config(_))));
}

#[test]
fn sizing_follows_the_file_engine() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("old.img");
    std::fs::write(&path, vec![1u8; 2 * MIB as usize]).expect("seed");
    // Smaller than the file: refused, the file untouched.
    let smaller = MmapBackstore::open(&path, &opts(Some(MIB)));
    let Err(BackstoreError::Config(msg)) = smaller else {
        panic!("shrink must be refused: {smaller:?}");
    };
    assert!(msg.contains("refusing to shrink"), "{msg}");
    assert_eq!(std::fs::metadata(&path).expect("stat").len(), 2 * MIB);
    // Larger: grown.
    let grown = mmap_store(&path, 4 * MIB);
    assert_eq!(grown.geometry().size_bytes(), 4 * MIB);
    assert_eq!(read(&grown, 2 * MIB - 512, 512), vec![1u8; 512]);
    assert!(read(&grown, 3 * MIB, 512).iter().all(|&b| b == 0));
    // Missing without a size, and O_DIRECT: configuration errors, nothing created.
    let none = dir.path().join("none.img");
    assert!(matches!(
        MmapBackstore::open(&none, &opts(None)),
        Err(BackstoreError::Config(_))
    ));
    let direct = FileOptions {
        size: Some(MIB),
        direct: true,
        ..FileOptions::default()
    };
    assert!(matches!(
        MmapBackstore::open(&none, &direct),
        Err(BackstoreError::Config(_))
    ));
    assert!(!none.exists());
    // The factory wants a path.
    let mut spec = BackstoreSpec::mmap(&none, Some(MIB));
    spec.path = None;
    assert_eq!(spec.kind, EngineKind::Mmap);
    assert!(matches!(open(&spec), Err(BackstoreError::Config(_))));
}

#[test]
fn unmap_and_write_same_show_through_the_mapping() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("thin.img");
    let thin = FileOptions {
        size: Some(4 * MIB),
        thin: true,
        ..FileOptions::default()
    };
    let store = MmapBackstore::open(&path, &thin).expect("open");
    store
        .write_at(&data(2 * MIB as usize, 5), MIB, false)
        .expect("write");
    store.flush().expect("flush");
    store.unmap(MIB, MIB).expect("unmap");
    assert!(read(&store, MIB, MIB as usize).iter().all(|&b| b == 0));
    assert_eq!(
        read(&store, 2 * MIB, 4096),
        data(2 * MIB as usize, 5)[MIB as usize..MIB as usize + 4096].to_vec()
    );
    // Extents cover the range asked, and the punched range is not data
    // (filesystems that cannot tell report all mapped).
    let map = store.extents(0, 4 * MIB).expect("extents");
    assert_eq!(map.iter().map(|e| e.len).sum::<u64>(), 4 * MIB);

    let pattern = data(512, 11);
    store
        .write_same(&pattern, 3 * MIB, 8192)
        .expect("write same");
    let back = read(&store, 3 * MIB, 8192);
    for block in back.chunks(512) {
        assert_eq!(block, pattern.as_slice());
    }
    store
        .write_same(&[0u8; 512], 3 * MIB, 4096)
        .expect("zero write same");
    assert!(read(&store, 3 * MIB, 4096).iter().all(|&b| b == 0));
    store.kernel_readahead(false).expect("MADV_RANDOM");
    store.kernel_readahead(true).expect("MADV_NORMAL");
}

#[test]
fn mapped_borrows_the_bytes_of_a_range() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = mmap_store(&dir.path().join("lun.img"), 2 * MIB);
    let payload = data(8192, 3);
    store.write_at(&payload, 4096, false).expect("write");
    let range = store.mapped(4096, 8192).expect("borrow");
    assert_eq!((range.offset(), range.len()), (4096, 8192));
    assert!(!range.as_ptr().is_null());
    // SAFETY: nothing writes the store while the slice lives.
    let bytes = unsafe { range.as_slice() };
    assert_eq!(bytes, payload.as_slice());
    let mut copy = vec![0u8; 8192];
    range.copy_to(&mut copy).expect("copy");
    assert_eq!(copy, payload);
    assert!(range.copy_to(&mut [0u8; 512]).is_err(), "length must match");
    range.check().expect("still backed");
    assert!(matches!(
        store.mapped(2 * MIB - 512, 1024),
        Err(BackstoreError::OutOfRange { .. })
    ));
}

#[test]
fn truncated_file_gives_medium_errors_not_sigbus() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("lun.img");
    let store = Arc::new(mmap_store(&path, 4 * MIB));
    let head = data(4096, 1);
    store.write_at(&head, 0, false).expect("write head");
    store
        .write_at(&data(MIB as usize, 2), 2 * MIB, false)
        .expect("write tail");
    // Borrowed before the file shrinks: the size check has passed.
    let racing = store.mapped(3 * MIB, 64 * 1024).expect("borrow");

    truncate(&path, MIB);

    // Past the new end: errors the SCSI core reports as MEDIUM ERROR.
    let mut buf = vec![0u8; 4096];
    let r = store.read_at(&mut buf, 2 * MIB);
    assert!(matches!(r, Err(BackstoreError::Read(_))), "{r:?}");
    let r = store.write_at(&buf, 2 * MIB, true);
    assert!(matches!(r, Err(BackstoreError::Write(_))), "{r:?}");
    let r = store.unmap(2 * MIB, 4096);
    assert!(matches!(r, Err(BackstoreError::Write(_))), "{r:?}");
    let r = store.write_same(&[1u8; 512], 2 * MIB, 4096);
    assert!(matches!(r, Err(BackstoreError::Write(_))), "{r:?}");
    assert!(!store.truncated(), "the size check refused those: no fault");
    assert_eq!(std::fs::metadata(&path).expect("stat").len(), MIB);

    // The race: the copy runs after the file shrank. It faults, the SIGBUS
    // guard maps zeros there, and the copy reports the medium error.
    let mut raced = vec![0xEEu8; 64 * 1024];
    let r = racing.copy_to(&mut raced);
    assert!(matches!(r, Err(BackstoreError::Read(_))), "{r:?}");
    // Read what the copy wrote: the guard's zeros. (Unread, the copy into
    // `raced` is dead code an optimised build may drop, and then nothing
    // faults.)
    assert!(raced.iter().all(|&b| b == 0), "the guard's zero pages");
    assert!(store.truncated(), "the SIGBUS guard ran");
    assert!(racing.check().is_err());
    let msg = r.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(msg.contains("truncated"), "{msg}");

    // What the file still holds reads fine, from any thread.
    let s = Arc::clone(&store);
    let back = std::thread::spawn(move || read(s.as_ref(), 0, 4096))
        .join()
        .expect("reader");
    assert_eq!(back, head);
    store
        .write_at(&data(512, 8), 4096, true)
        .expect("write below the end");
    store.flush().expect("flush");

    // Grown back, the pages the guard replaced stay failed.
    truncate(&path, 4 * MIB);
    let r = store.read_at(&mut buf, 3 * MIB);
    assert!(matches!(r, Err(BackstoreError::Read(_))), "{r:?}");
}

/// Child mode of the test below: guard installed, then a SIGBUS in a
/// mapping the engine does not know. Must die of it.
const CHILD_ENV: &str = "RUSTGT_MMAP_FOREIGN_SIGBUS_CHILD";

#[test]
fn sigbus_outside_registered_mappings_still_kills() {
    if std::env::var_os(CHILD_ENV).is_some() {
        foreign_sigbus();
    }
    let exe = std::env::current_exe().expect("test binary");
    let out = std::process::Command::new(exe)
        .args([
            "sigbus_outside_registered_mappings_still_kills",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .output()
        .expect("run child");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGBUS),
        "child must die of SIGBUS: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("guard installed"),
        "the child got as far as the fault"
    );
}

fn foreign_sigbus() -> ! {
    let no_core = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: setrlimit reads the struct it is given; no core file wanted.
    unsafe { libc::setrlimit(libc::RLIMIT_CORE, &no_core) };
    let dir = tempfile::tempdir().expect("tempdir");
    // An engine's mapping, so the guard is installed.
    let _store = mmap_store(&dir.path().join("guarded.img"), MIB);
    let path = dir.path().join("foreign.img");
    std::fs::write(&path, vec![1u8; 2 * MIB as usize]).expect("seed");
    let file = std::fs::File::open(&path).expect("open");
    let map = memmap2::MmapOptions::new()
        .map_raw_read_only(&file)
        .expect("foreign map");
    truncate(&path, 4096);
    println!("guard installed, faulting");
    // SAFETY: the address is inside the mapping; the page past the file's
    // end raises SIGBUS, which is the point of this child.
    let byte = unsafe { std::ptr::read_volatile(map.as_ptr().add(MIB as usize)) };
    println!("survived a foreign SIGBUS (read {byte})");
    std::process::exit(0);
}
