//! Behaviour of the file, RAM and null engines and of the factory: round
//! trips, range and read-only checks, sparse creation, grow/refuse-shrink,
//! unmap, WRITE SAME and concurrent use from several threads.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

use rustgt_backstore::{
    open, Backstore, BackstoreError, BackstoreSpec, EngineKind, FileBackstore, FileOptions,
    NullBackstore, RamBackstore,
};

const MIB: u64 = 1 << 20;

fn file_opts(size: Option<u64>) -> FileOptions {
    FileOptions {
        size,
        ..FileOptions::default()
    }
}

fn file_store(dir: &Path, name: &str, opts: &FileOptions) -> FileBackstore {
    FileBackstore::open(dir.join(name), opts).expect("open file store")
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

/// Writes at the start, across a 1 MiB boundary and at the very end, with
/// and without FUA, then reads everything back.
fn check_round_trip(store: &dyn Backstore) {
    let size = store.geometry().size_bytes();
    let places = [
        (0u64, 4096usize, 1u8),
        (MIB - 4096, 8192, 2),
        (size - 4096, 4096, 3),
    ];
    for (i, &(offset, len, seed)) in places.iter().enumerate() {
        store
            .write_at(&data(len, seed), offset, i % 2 == 0)
            .expect("write");
    }
    store.flush().expect("flush");
    for &(offset, len, seed) in &places {
        assert_eq!(read(store, offset, len), data(len, seed), "at {offset}");
    }
    // Never-written space reads as zeros.
    assert!(read(store, 2 * MIB, 4096).iter().all(|&b| b == 0));
}

fn check_out_of_range(store: &dyn Backstore) {
    let size = store.geometry().size_bytes();
    let bs = u64::from(store.geometry().block_size);
    let mut buf = vec![0u8; 2 * bs as usize];
    let pattern = vec![1u8; bs as usize];
    let oor = |r: Result<(), BackstoreError>| matches!(r, Err(BackstoreError::OutOfRange { .. }));
    assert!(oor(store.read_at(&mut buf, size - bs)));
    assert!(oor(store.read_at(&mut buf, size)));
    assert!(oor(store.read_at(&mut buf, u64::MAX - bs)));
    assert!(oor(store.write_at(&buf, size - bs, false)));
    assert!(oor(store.write_at(&buf, u64::MAX - bs, true)));
    assert!(oor(store.unmap(size - bs, 2 * bs)));
    assert!(oor(store.unmap(bs, u64::MAX)));
    assert!(oor(store.write_same(&pattern, size, bs)));
    assert!(oor(store.write_same(&pattern, u64::MAX - bs + 1, 2 * bs)));
    // The last blocks and an empty access at the end are inside.
    store.read_at(&mut buf, size - 2 * bs).expect("last blocks");
    store.read_at(&mut [], size).expect("empty read at end");
}

fn check_read_only(store: &dyn Backstore) {
    assert!(store.geometry().read_only);
    let buf = [7u8; 512];
    let ro = |r: Result<(), BackstoreError>| matches!(r, Err(BackstoreError::ReadOnly));
    assert!(ro(store.write_at(&buf, 0, false)));
    assert!(ro(store.write_at(&buf, 0, true)));
    assert!(ro(store.unmap(0, 512)));
    assert!(ro(store.write_same(&buf, 0, 4096)));
    let mut out = [1u8; 512];
    store.read_at(&mut out, 0).expect("reads still work");
}

/// Fills `threads` interleaved regions concurrently, then checks each.
fn check_concurrent(store: Arc<dyn Backstore>) {
    const THREADS: usize = 4;
    const PER_THREAD: u64 = 64;
    const BLOCK: usize = 4096;
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                for i in 0..PER_THREAD {
                    // Block k belongs to thread k % THREADS: neighbours race.
                    let block = i * THREADS as u64 + t as u64;
                    let payload = data(BLOCK, (block % 251) as u8);
                    store
                        .write_at(&payload, block * BLOCK as u64, i % 8 == 0)
                        .expect("concurrent write");
                    let mut back = vec![0u8; BLOCK];
                    store
                        .read_at(&mut back, block * BLOCK as u64)
                        .expect("concurrent read");
                    assert_eq!(back, payload);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("writer thread");
    }
    for block in 0..PER_THREAD * THREADS as u64 {
        assert_eq!(
            read(store.as_ref(), block * BLOCK as u64, BLOCK),
            data(BLOCK, (block % 251) as u8),
            "block {block}"
        );
    }
}

/// Bytes the filesystem has allocated to `path`.
fn allocated(path: &Path) -> u64 {
    std::fs::metadata(path).expect("stat").blocks() * 512
}

fn config_message<T: std::fmt::Debug>(r: Result<T, BackstoreError>) -> String {
    match r {
        Err(BackstoreError::Config(msg)) => msg,
        other => panic!("expected a Config error, got {other:?}"),
    }
}

// ---- round trips, ranges, read-only ------------------------------------

#[test]
fn file_round_trip_range_and_concurrency() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = file_store(dir.path(), "lun", &file_opts(Some(4 * MIB)));
    assert_eq!(store.kind(), "file");
    assert_eq!(store.geometry().num_blocks, 4 * MIB / 512);
    check_round_trip(&store);
    check_out_of_range(&store);
    check_concurrent(Arc::new(store));
}

#[test]
fn direct_file_round_trip_with_unaligned_buffers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = FileOptions {
        size: Some(4 * MIB),
        block_size: 4096,
        direct: true,
        ..FileOptions::default()
    };
    let store = file_store(dir.path(), "lun", &opts);
    assert!(store.is_direct());
    check_round_trip(&store);
    check_out_of_range(&store);

    // A buffer one byte off alignment goes through the bounce buffer.
    let mut backing = vec![0u8; 3 * MIB as usize + 1];
    let unaligned = &mut backing[1..];
    unaligned.copy_from_slice(&data(3 * MIB as usize, 9));
    store
        .write_at(unaligned, 4096, true)
        .expect("bounced write");
    let mut back = vec![0u8; 3 * MIB as usize + 1];
    store.read_at(&mut back[1..], 4096).expect("bounced read");
    assert_eq!(&back[1..], &data(3 * MIB as usize, 9)[..]);

    // O_DIRECT cannot do sub-block I/O; that is an error, not a panic.
    assert!(matches!(
        store.write_at(&[1u8; 512], 512, false),
        Err(BackstoreError::Io(_))
    ));
    store
        .write_same(&[0xA5u8; 4096], 0, 2 * MIB)
        .expect("write_same");
    assert!(read(&store, 0, 2 * MIB as usize).iter().all(|&b| b == 0xA5));
    check_concurrent(Arc::new(store));
}

#[test]
fn ram_round_trip_range_and_concurrency() {
    let store = RamBackstore::new(4 * MIB, 512, false).expect("ram");
    assert_eq!(store.kind(), "ram");
    assert_eq!(store.allocated_bytes(), 0);
    check_round_trip(&store);
    // Writes touched chunks 0, 1 (boundary-crossing write) and 3 only.
    assert_eq!(store.allocated_bytes(), 3 * MIB);
    check_out_of_range(&store);
    check_concurrent(Arc::new(store));
}

#[test]
fn ram_with_small_chunks_and_short_last_chunk() {
    let store = RamBackstore::with_chunk_size(10 * 4096, 4096, false, 3 * 4096).expect("ram");
    let payload = data(10 * 4096, 4);
    store.write_at(&payload, 0, false).expect("write all");
    assert_eq!(read(&store, 0, payload.len()), payload);
    assert_eq!(store.allocated_bytes(), 10 * 4096);
    assert!(matches!(
        RamBackstore::with_chunk_size(4096, 512, false, 0),
        Err(BackstoreError::Config(_))
    ));
}

#[test]
fn null_reads_zeros_and_discards() {
    let store = NullBackstore::new(4 * MIB, 4096, false).expect("null");
    assert_eq!(store.kind(), "null");
    store.write_at(&[9u8; 4096], 0, true).expect("write");
    assert!(read(&store, 0, 4096).iter().all(|&b| b == 0));
    store.unmap(0, MIB).expect("unmap");
    store.write_same(&[1u8; 4096], 0, MIB).expect("write_same");
    store.flush().expect("flush");
    check_out_of_range(&store);
    check_read_only(&NullBackstore::new(MIB, 512, true).expect("null ro"));
    // Whole-buffer reads lend zeros; the range is still checked.
    let lent = store.read_buf(MIB, MIB as usize).expect("read_buf");
    assert_eq!(lent.len(), MIB as usize);
    assert!(lent.iter().all(|&b| b == 0));
    assert!(matches!(
        store.read_buf(4 * MIB - 4096, 8192),
        Err(BackstoreError::OutOfRange { .. })
    ));
}

#[test]
fn the_default_read_buf_fills_a_pooled_buffer_with_the_data() {
    let store = RamBackstore::new(4 * MIB, 512, false).expect("ram");
    store.write_at(&data(8192, 3), 4096, false).expect("write");
    // A pooled buffer that held other bytes must come back holding the data.
    let mut stale = rustgt_backstore::IoBuf::for_overwrite(8192);
    stale.fill(0xEE);
    drop(stale);
    let got = store.read_buf(4096, 8192).expect("read_buf");
    assert_eq!(&*got, &data(8192, 3)[..]);
    drop(got);
    let mut stale = rustgt_backstore::IoBuf::for_overwrite(4096);
    stale.fill(0xEE);
    drop(stale);
    let zeros = store.read_buf(MIB, 4096).expect("read_buf unwritten");
    assert!(zeros.iter().all(|&b| b == 0));
}

#[test]
fn read_only_stores_refuse_changes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("lun");
    let rw = FileBackstore::open(&path, &file_opts(Some(MIB))).expect("create");
    rw.write_at(&[7u8; 512], 0, true).expect("write");
    drop(rw);
    let ro = FileBackstore::open(
        &path,
        &FileOptions {
            read_only: true,
            ..FileOptions::default()
        },
    )
    .expect("open read-only");
    check_read_only(&ro);
    assert_eq!(read(&ro, 0, 512), vec![7u8; 512]);
    check_read_only(&RamBackstore::new(MIB, 512, true).expect("ram ro"));

    // Read-only never creates or grows.
    let missing = FileOptions {
        size: Some(MIB),
        read_only: true,
        ..FileOptions::default()
    };
    let msg = config_message(FileBackstore::open(dir.path().join("nope"), &missing));
    assert!(msg.contains("nope"), "{msg}");
    assert!(!dir.path().join("nope").exists());
    let grow = FileOptions {
        size: Some(2 * MIB),
        read_only: true,
        ..FileOptions::default()
    };
    config_message(FileBackstore::open(&path, &grow));
    assert_eq!(std::fs::metadata(&path).expect("stat").len(), MIB);
}

// ---- file creation and sizing --------------------------------------------

#[test]
fn file_is_created_sparse() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("big");
    let store = FileBackstore::open(&path, &file_opts(Some(1 << 30))).expect("create 1 GiB");
    assert_eq!(store.geometry().size_bytes(), 1 << 30);
    let meta = std::fs::metadata(&path).expect("stat");
    assert_eq!(meta.len(), 1 << 30);
    assert!(allocated(&path) < MIB, "allocated {}", allocated(&path));
    assert_eq!(meta.mode() & 0o777, 0o600);
}

#[test]
fn file_grows_but_never_shrinks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("lun");
    let store = FileBackstore::open(&path, &file_opts(Some(MIB))).expect("create");
    store
        .write_at(&data(4096, 5), MIB - 4096, false)
        .expect("write");
    drop(store);

    let grown = FileBackstore::open(&path, &file_opts(Some(2 * MIB))).expect("grow");
    assert_eq!(grown.geometry().size_bytes(), 2 * MIB);
    assert_eq!(read(&grown, MIB - 4096, 4096), data(4096, 5));
    assert!(read(&grown, MIB, 4096).iter().all(|&b| b == 0));
    drop(grown);

    let msg = config_message(FileBackstore::open(&path, &file_opts(Some(MIB))));
    for needle in [
        path.display().to_string(),
        MIB.to_string(),
        (2 * MIB).to_string(),
    ] {
        assert!(msg.contains(&needle), "{msg:?} lacks {needle}");
    }
    assert_eq!(std::fs::metadata(&path).expect("stat").len(), 2 * MIB);

    // No size: use the file's own.
    let same = FileBackstore::open(&path, &file_opts(None)).expect("reopen");
    assert_eq!(same.geometry().size_bytes(), 2 * MIB);
    assert_eq!(read(&same, MIB - 4096, 4096), data(4096, 5));
}

#[test]
fn file_configuration_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Missing and no size to create it with.
    let msg = config_message(FileBackstore::open(dir.path().join("a"), &file_opts(None)));
    assert!(msg.contains("no size"), "{msg}");
    // Requested size not a block multiple: refused before creating anything.
    config_message(FileBackstore::open(
        dir.path().join("b"),
        &file_opts(Some(1000)),
    ));
    assert!(!dir.path().join("b").exists());
    let bs4k = FileOptions {
        size: Some(MIB + 512),
        block_size: 4096,
        ..FileOptions::default()
    };
    config_message(FileBackstore::open(dir.path().join("c"), &bs4k));
    // Existing file whose size is not a block multiple.
    std::fs::write(dir.path().join("d"), [0u8; 1000]).expect("write file");
    let msg = config_message(FileBackstore::open(dir.path().join("d"), &file_opts(None)));
    assert!(msg.contains("1000"), "{msg}");
    // Existing empty file.
    std::fs::write(dir.path().join("e"), []).expect("write file");
    config_message(FileBackstore::open(dir.path().join("e"), &file_opts(None)));
    // Not a regular file.
    let msg = config_message(FileBackstore::open(dir.path(), &file_opts(None)));
    assert!(msg.contains("regular file"), "{msg}");
    // Bad block size.
    let odd = FileOptions {
        size: Some(MIB),
        block_size: 1024,
        ..FileOptions::default()
    };
    config_message(FileBackstore::open(dir.path().join("f"), &odd));
}

// ---- unmap and write_same ------------------------------------------------

#[test]
fn file_unmap_reads_zeros_and_frees_blocks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("lun");
    let store = FileBackstore::open(&path, &file_opts(Some(8 * MIB))).expect("create");
    store
        .write_at(&data(4 * MIB as usize, 6), 0, false)
        .expect("write");
    store.flush().expect("flush");
    let before = allocated(&path);
    assert!(before >= 4 * MIB, "allocated {before}");

    store.unmap(MIB, 2 * MIB).expect("unmap");
    let after = allocated(&path);
    assert!(after <= before - 2 * MIB, "before {before} after {after}");
    assert!(read(&store, MIB, 2 * MIB as usize).iter().all(|&b| b == 0));
    assert_eq!(read(&store, 0, MIB as usize), data(MIB as usize, 6));
    assert_eq!(
        read(&store, 3 * MIB, MIB as usize),
        data(4 * MIB as usize, 6)[3 * MIB as usize..]
    );

    // A 512-byte unmap inside a filesystem block zeroes just those bytes.
    store.unmap(512, 512).expect("small unmap");
    let head = read(&store, 0, 1536);
    assert_eq!(&head[..512], &data(1536, 6)[..512]);
    assert!(head[512..1024].iter().all(|&b| b == 0));
    assert_eq!(&head[1024..], &data(1536, 6)[1024..]);
    store.unmap(0, 0).expect("empty unmap");
    assert!(store.supports_unmap() && store.supports_write_same());
}

#[test]
fn ram_unmap_frees_whole_chunks_and_zeroes_edges() {
    let store = RamBackstore::new(4 * MIB, 512, false).expect("ram");
    store
        .write_at(&data(4 * MIB as usize, 7), 0, false)
        .expect("write");
    assert_eq!(store.allocated_bytes(), 4 * MIB);
    // Covers the tail of chunk 0, chunks 1 and 2, the head of chunk 3.
    store.unmap(MIB - 512, 2 * MIB + 1024).expect("unmap");
    assert_eq!(store.allocated_bytes(), 2 * MIB);
    let all = read(&store, 0, 4 * MIB as usize);
    let want = data(4 * MIB as usize, 7);
    let (lo, hi) = ((MIB - 512) as usize, (3 * MIB + 512) as usize);
    assert_eq!(&all[..lo], &want[..lo]);
    assert!(all[lo..hi].iter().all(|&b| b == 0));
    assert_eq!(&all[hi..], &want[hi..]);
}

/// Non-zero pattern over an unaligned-to-batch range, neighbours untouched.
fn check_write_same_pattern(store: &dyn Backstore) {
    let bs = store.geometry().block_size as usize;
    let pattern = data(bs, 11);
    let before = read(store, 0, 4 * MIB as usize);
    let (offset, len) = (bs as u64 * 3, 2 * MIB + 5 * bs as u64);
    store.write_same(&pattern, offset, len).expect("write_same");
    let after = read(store, 0, 4 * MIB as usize);
    let (lo, hi) = (offset as usize, (offset + len) as usize);
    assert_eq!(&after[..lo], &before[..lo]);
    for (i, block) in after[lo..hi].chunks(bs).enumerate() {
        assert_eq!(block, &pattern[..], "block {i}");
    }
    assert_eq!(&after[hi..], &before[hi..]);
    assert!(matches!(
        store.write_same(&[], 0, 512),
        Err(BackstoreError::Io(_))
    ));
    store.write_same(&pattern, 0, 0).expect("empty write_same");
}

#[test]
fn write_same_writes_the_pattern() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = file_store(dir.path(), "lun", &file_opts(Some(4 * MIB)));
    file.write_at(&data(4 * MIB as usize, 1), 0, false)
        .expect("fill");
    check_write_same_pattern(&file);

    let ram = RamBackstore::new(4 * MIB, 4096, false).expect("ram");
    ram.write_at(&data(MIB as usize, 1), 0, false)
        .expect("fill");
    check_write_same_pattern(&ram);

    // Odd-sized patterns tile correctly across RAM chunks too.
    let small = RamBackstore::with_chunk_size(64 * 512, 512, false, 1000).expect("ram");
    small
        .write_same(&[1, 2, 3], 512, 30 * 512)
        .expect("write_same");
    let got = read(&small, 512, 30 * 512);
    assert!(got.iter().enumerate().all(|(i, &b)| b == [1, 2, 3][i % 3]));
}

#[test]
fn zero_write_same_punches_holes_only_when_thin() {
    let dir = tempfile::tempdir().expect("tempdir");
    for thin in [true, false] {
        let path = dir.path().join(format!("lun-{thin}"));
        let opts = FileOptions {
            size: Some(4 * MIB),
            thin,
            ..FileOptions::default()
        };
        let store = FileBackstore::open(&path, &opts).expect("create");
        assert_eq!(store.is_thin(), thin);
        store
            .write_at(&data(4 * MIB as usize, 2), 0, false)
            .expect("fill");
        store.flush().expect("flush");
        let before = allocated(&path);
        store
            .write_same(&[0u8; 512], MIB, 2 * MIB)
            .expect("zero write_same");
        assert!(read(&store, MIB, 2 * MIB as usize).iter().all(|&b| b == 0));
        assert_eq!(read(&store, 0, MIB as usize), data(MIB as usize, 2));
        let after = allocated(&path);
        if thin {
            assert!(after <= before - 2 * MIB, "thin: {before} -> {after}");
        } else {
            assert!(after >= before, "thick: {before} -> {after}");
        }
    }

    let ram = RamBackstore::new(4 * MIB, 512, false).expect("ram");
    ram.write_at(&data(4 * MIB as usize, 3), 0, false)
        .expect("fill");
    ram.write_same(&[0u8; 512], 0, 2 * MIB).expect("zero");
    assert_eq!(ram.allocated_bytes(), 2 * MIB);
    assert!(read(&ram, 0, 2 * MIB as usize).iter().all(|&b| b == 0));
}

// ---- factory ---------------------------------------------------------------

#[test]
fn spec_opens_each_engine() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ram = open(&BackstoreSpec::ram(8 * MIB)).expect("ram");
    assert_eq!(ram.kind(), "ram");
    check_round_trip(ram.as_ref());
    let null = open(&BackstoreSpec::null(8 * MIB)).expect("null");
    assert_eq!(
        (null.kind(), null.geometry().num_blocks),
        ("null", 8 * MIB / 512)
    );
    let mut spec = BackstoreSpec::file(dir.path().join("lun"), Some(8 * MIB));
    spec.block_size = 4096;
    spec.thin = true;
    let file = open(&spec).expect("file");
    assert_eq!(
        (file.kind(), file.geometry().num_blocks),
        ("file", 8 * MIB / 4096)
    );
    check_round_trip(file.as_ref());
    check_concurrent(Arc::clone(&file));
    drop(file);
    spec.read_only = true;
    spec.size = None;
    check_read_only(open(&spec).expect("file ro").as_ref());
}

#[test]
fn spec_configuration_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = BackstoreSpec::ram(MIB);
    let with = |f: &dyn Fn(&mut BackstoreSpec)| {
        let mut s = base.clone();
        f(&mut s);
        config_message(open(&s))
    };
    assert!(with(&|s| s.block_size = 1024).contains("1024"));
    assert!(with(&|s| s.block_size = 0).contains("block size"));
    assert!(with(&|s| s.size = Some(1000)).contains("multiple"));
    assert!(with(&|s| s.size = Some(0)).contains("zero"));
    assert!(with(&|s| s.size = None).contains("size is required"));
    assert!(with(&|s| s.path = Some("/tmp/x".into())).contains("no path"));
    assert!(with(&|s| {
        s.kind = EngineKind::Null;
        s.size = None
    })
    .contains("size is required"));
    for kind in [EngineKind::File, EngineKind::BlockDev] {
        let msg = with(&|s| s.kind = kind.clone());
        assert!(msg.contains("path is required"), "{msg}");
    }
    // A regular file is not a block device.
    let plain = dir.path().join("plain");
    std::fs::write(&plain, vec![0u8; 4096]).expect("write");
    let msg = with(&|s| {
        s.kind = EngineKind::BlockDev;
        s.path = Some(plain.clone());
        s.size = None;
    });
    assert!(msg.contains("not a block device"), "{msg}");
}
