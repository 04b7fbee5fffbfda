//! Allocation maps (`Backstore::extents`): the file engine reports its
//! holes, the RAM engine its empty chunks, and other engines (the trait's
//! default) everything mapped. Every map covers exactly the range asked.

use rustgt_backstore::{
    Backstore, BackstoreError, Extent, FileBackstore, FileOptions, NullBackstore, RamBackstore,
};

const MIB: u64 = 1 << 20;

fn runs(store: &dyn Backstore, offset: u64, len: u64) -> Vec<(u64, bool)> {
    let map = store.extents(offset, len).expect("extents");
    assert_eq!(
        map.iter().map(|e| e.len).sum::<u64>(),
        len,
        "map covers the range"
    );
    for pair in map.windows(2) {
        assert_ne!(pair[0].mapped, pair[1].mapped, "adjacent runs are merged");
    }
    map.iter().map(|e| (e.len, e.mapped)).collect()
}

#[test]
fn file_engine_reports_holes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = FileOptions {
        size: Some(8 * MIB),
        thin: true,
        ..FileOptions::default()
    };
    let store = FileBackstore::open(dir.path().join("lun.img"), &opts).expect("open");
    // A new sparse file is one hole.
    assert_eq!(runs(&store, 0, 8 * MIB), vec![(8 * MIB, false)]);

    store
        .write_at(&vec![0xAB; 3 * MIB as usize], MIB, false)
        .expect("write");
    assert_eq!(
        runs(&store, 0, 8 * MIB),
        vec![(MIB, false), (3 * MIB, true), (4 * MIB, false)]
    );
    // Punch the middle megabyte: data, hole, data.
    store.unmap(2 * MIB, MIB).expect("unmap");
    assert_eq!(
        runs(&store, MIB, 3 * MIB),
        vec![(MIB, true), (MIB, false), (MIB, true)]
    );
    // A window starting inside data and ending inside a hole.
    assert_eq!(
        runs(&store, MIB + 4096, MIB),
        vec![(MIB - 4096, true), (4096, false)]
    );
    // An all-zero WRITE SAME on a thin store deallocates too.
    store.write_same(&[0u8; 512], MIB, MIB).expect("write same");
    assert_eq!(runs(&store, 0, 3 * MIB), vec![(3 * MIB, false)]);
    assert!(runs(&store, 0, 0).is_empty());
}

#[test]
fn ram_engine_reports_empty_chunks() {
    let store = RamBackstore::with_chunk_size(16 * 4096, 512, false, 4096).expect("store");
    assert_eq!(runs(&store, 0, 16 * 4096), vec![(16 * 4096, false)]);
    store
        .write_at(&[1u8; 512], 4096 + 512, false)
        .expect("write");
    assert_eq!(
        runs(&store, 0, 16 * 4096),
        vec![(4096, false), (4096, true), (14 * 4096, false)]
    );
    // Partial chunks stay allocated after unmap; whole ones are freed.
    store.unmap(4096 + 512, 512).expect("unmap");
    assert_eq!(runs(&store, 4096, 4096), vec![(4096, true)]);
    store.unmap(4096, 4096).expect("unmap");
    assert_eq!(runs(&store, 0, 2 * 4096), vec![(2 * 4096, false)]);
}

#[test]
fn default_map_is_all_mapped_and_range_checked() {
    let store = NullBackstore::new(MIB, 512, false).expect("store");
    assert_eq!(
        store.extents(512, 4096).expect("extents"),
        vec![Extent {
            len: 4096,
            mapped: true
        }]
    );
    assert!(matches!(
        store.extents(MIB - 512, 1024),
        Err(BackstoreError::OutOfRange { .. })
    ));
    assert!(matches!(
        store.extents(u64::MAX, 2),
        Err(BackstoreError::OutOfRange { .. })
    ));
}
