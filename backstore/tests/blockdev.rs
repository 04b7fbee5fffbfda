//! Block device engine against real loop devices (`losetup`, needs root),
//! plus refusal of anything that is not a block device.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use rustgt_backstore::{
    open, Backstore, BackstoreError, BackstoreSpec, BlockDevBackstore, BlockDevOptions, EngineKind,
};

const MIB: u64 = 1 << 20;

/// A loop device over a sparse temporary file, detached on drop.
struct LoopDev {
    device: PathBuf,
    backing: PathBuf,
    _dir: tempfile::TempDir,
}

impl LoopDev {
    fn new(size: u64, sector_size: u32) -> LoopDev {
        let dir = tempfile::tempdir().expect("tempdir");
        let backing = dir.path().join("disk.img");
        std::fs::File::create(&backing)
            .and_then(|f| f.set_len(size))
            .expect("backing file");
        let out = Command::new("losetup")
            .args(["--find", "--show", "--sector-size"])
            .arg(sector_size.to_string())
            .arg(&backing)
            .output()
            .expect("run losetup");
        assert!(
            out.status.success(),
            "losetup failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let device = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        LoopDev {
            device,
            backing,
            _dir: dir,
        }
    }
}

impl Drop for LoopDev {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.device).status();
    }
}

fn config_message<T: std::fmt::Debug>(r: Result<T, BackstoreError>) -> String {
    match r {
        Err(BackstoreError::Config(msg)) => msg,
        other => panic!("expected a Config error, got {other:?}"),
    }
}

fn blockdev(path: &Path, opts: &BlockDevOptions) -> BlockDevBackstore {
    BlockDevBackstore::open(path, opts).expect("open loop device")
}

fn read(store: &dyn Backstore, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0xEEu8; len];
    store.read_at(&mut buf, offset).expect("read");
    buf
}

/// Bytes the filesystem has allocated to `path`.
fn allocated(path: &Path) -> u64 {
    std::fs::metadata(path).expect("stat").blocks() * 512
}

fn data(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed) | 1)
        .collect()
}

#[test]
fn regular_files_and_missing_paths_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plain = dir.path().join("plain.img");
    std::fs::write(&plain, vec![0u8; 65536]).expect("write");
    let msg = config_message(BlockDevBackstore::open(&plain, &BlockDevOptions::default()));
    assert!(msg.contains("not a block device"), "{msg}");
    assert!(msg.contains("plain.img"), "{msg}");
    let msg = config_message(BlockDevBackstore::open(
        dir.path().join("absent"),
        &BlockDevOptions::default(),
    ));
    assert!(msg.contains("absent"), "{msg}");
    // A character device is not a block device either.
    config_message(BlockDevBackstore::open(
        "/dev/null",
        &BlockDevOptions::default(),
    ));
}

#[test]
fn loop_device_round_trip_unmap_and_write_same() {
    let lo = LoopDev::new(16 * MIB, 512);
    let store = blockdev(&lo.device, &BlockDevOptions::default());
    assert_eq!(store.kind(), "blockdev");
    assert_eq!(store.device_block_size(), 512);
    let g = store.geometry();
    assert_eq!(
        (g.block_size, g.num_blocks, g.read_only),
        (512, 32768, false)
    );

    let payload = data(3 * MIB as usize, 1);
    store.write_at(&payload, MIB, false).expect("write");
    store
        .write_at(&data(512, 2), 16 * MIB - 512, true)
        .expect("fua write at end");
    store.flush().expect("flush");
    assert_eq!(read(&store, MIB, payload.len()), payload);
    assert_eq!(read(&store, 16 * MIB - 512, 512), data(512, 2));
    // Kernel readahead can be switched off and on for the device's fd
    // (posix_fadvise; an error here would refuse the LUN's policy), and
    // reads still return the data.
    store.kernel_readahead(false).expect("fadvise random");
    assert_eq!(read(&store, MIB, payload.len()), payload);
    store.kernel_readahead(true).expect("fadvise normal");
    // A loop device names itself as its disk.
    let key = store.device_key().expect("a block device names its disk");
    assert!(key.key.starts_with("block:7:"), "{key:?}");
    // The data reached the device: the loop device's backing file has it.
    let backing = std::fs::read(&lo.backing).expect("read backing file");
    assert_eq!(&backing[MIB as usize..4 * MIB as usize], &payload[..]);

    // Unmap reads back zeros, neighbours are untouched, and the loop
    // device passed the deallocation down to its backing file.
    let before = allocated(&lo.backing);
    assert!(before >= 3 * MIB, "allocated {before}");
    store.unmap(2 * MIB, MIB).expect("unmap");
    let after = allocated(&lo.backing);
    assert!(after <= before - MIB, "before {before} after {after}");
    let all = read(&store, MIB, 3 * MIB as usize);
    assert_eq!(&all[..MIB as usize], &payload[..MIB as usize]);
    assert!(all[MIB as usize..2 * MIB as usize].iter().all(|&b| b == 0));
    assert_eq!(&all[2 * MIB as usize..], &payload[2 * MIB as usize..]);

    // WRITE SAME with a pattern, then with zeros.
    let pattern = data(512, 3);
    store
        .write_same(&pattern, 4 * MIB, 2 * MIB + 1024)
        .expect("write_same");
    let got = read(&store, 4 * MIB, 2 * MIB as usize + 1024);
    assert!(got.chunks(512).all(|b| b == &pattern[..]));
    store
        .write_same(&[0u8; 512], 4 * MIB, MIB)
        .expect("zero write_same");
    assert!(read(&store, 4 * MIB, MIB as usize).iter().all(|&b| b == 0));
    assert!(read(&store, 5 * MIB, 1024)
        .chunks(512)
        .all(|b| b == &pattern[..]));

    // BLKDISCARD is accepted (contents afterwards are device-defined).
    store.discard(8 * MIB, MIB).expect("discard");

    let oor = |r: Result<(), BackstoreError>| matches!(r, Err(BackstoreError::OutOfRange { .. }));
    assert!(oor(store.write_at(&[0u8; 1024], 16 * MIB - 512, false)));
    assert!(oor(store.unmap(16 * MIB, 512)));
    assert!(oor(store.discard(u64::MAX - 511, 1024)));
    let mut buf = [0u8; 512];
    assert!(oor(store.read_at(&mut buf, u64::MAX - 100)));
}

#[test]
fn loop_device_geometry_options() {
    let lo = LoopDev::new(8 * MIB, 512);
    // A larger block size than the device's is fine.
    let opts = BlockDevOptions {
        block_size: Some(4096),
        ..BlockDevOptions::default()
    };
    let store = blockdev(&lo.device, &opts);
    assert_eq!(store.geometry().num_blocks, 8 * MIB / 4096);
    drop(store);

    // Exporting a prefix works; more than the device holds does not.
    let prefix = BlockDevOptions {
        size: Some(4 * MIB),
        ..BlockDevOptions::default()
    };
    assert_eq!(
        blockdev(&lo.device, &prefix).geometry().size_bytes(),
        4 * MIB
    );
    let too_big = BlockDevOptions {
        size: Some(16 * MIB),
        ..BlockDevOptions::default()
    };
    let msg = config_message(BlockDevBackstore::open(&lo.device, &too_big));
    assert!(msg.contains(&(16 * MIB).to_string()), "{msg}");
    let ragged = BlockDevOptions {
        size: Some(MIB + 100),
        ..BlockDevOptions::default()
    };
    config_message(BlockDevBackstore::open(&lo.device, &ragged));

    // Exclusive open: a second holder is refused.
    let first = blockdev(&lo.device, &BlockDevOptions::default());
    let msg = config_message(BlockDevBackstore::open(
        &lo.device,
        &BlockDevOptions::default(),
    ));
    assert!(msg.contains("busy"), "{msg}");
    drop(first);

    // Read-only.
    let ro = BlockDevOptions {
        read_only: true,
        ..BlockDevOptions::default()
    };
    let store = blockdev(&lo.device, &ro);
    assert!(matches!(
        store.write_at(&[0u8; 512], 0, false),
        Err(BackstoreError::ReadOnly)
    ));
    assert!(matches!(store.unmap(0, 512), Err(BackstoreError::ReadOnly)));
    assert!(matches!(
        store.write_same(&[1u8; 512], 0, 512),
        Err(BackstoreError::ReadOnly)
    ));
    assert!(matches!(
        store.discard(0, 512),
        Err(BackstoreError::ReadOnly)
    ));
    read(&store, 0, 4096);
}

#[test]
fn loop_device_with_4k_sectors() {
    let lo = LoopDev::new(8 * MIB, 4096);
    let store = blockdev(&lo.device, &BlockDevOptions::default());
    assert_eq!(store.device_block_size(), 4096);
    assert_eq!(store.geometry().block_size, 4096);
    drop(store);

    let small = BlockDevOptions {
        block_size: Some(512),
        ..BlockDevOptions::default()
    };
    let msg = config_message(BlockDevBackstore::open(&lo.device, &small));
    assert!(msg.contains("512") && msg.contains("4096"), "{msg}");

    // O_DIRECT at the device's block size, through the factory-free API.
    let direct = BlockDevOptions {
        direct: true,
        ..BlockDevOptions::default()
    };
    let store = blockdev(&lo.device, &direct);
    let payload = data(64 * 1024, 4);
    store.write_at(&payload, 4096, true).expect("direct write");
    assert_eq!(read(&store, 4096, payload.len()), payload);
    store.unmap(4096, 8192).expect("unmap");
    assert!(read(&store, 4096, 8192).iter().all(|&b| b == 0));
}

#[test]
fn spec_opens_a_loop_device() {
    let lo = LoopDev::new(4 * MIB, 512);
    let spec = BackstoreSpec {
        kind: EngineKind::BlockDev,
        path: Some(lo.device.clone()),
        size: None,
        block_size: 0,
        read_only: false,
        thin: true,
        rbd: None,
    };
    let store = open(&spec).expect("open via spec");
    assert_eq!(store.kind(), "blockdev");
    assert_eq!(store.geometry().block_size, 512);
    assert_eq!(store.geometry().size_bytes(), 4 * MIB);
    store.write_at(&data(4096, 5), 0, false).expect("write");
    assert_eq!(read(store.as_ref(), 0, 4096), data(4096, 5));
    store.write_same(&[0u8; 512], 0, 4096).expect("thin zero");
    assert!(read(store.as_ref(), 0, 4096).iter().all(|&b| b == 0));
    drop(store);
    let spec_4k = BackstoreSpec {
        block_size: 4096,
        ..spec
    };
    assert_eq!(
        open(&spec_4k).expect("4k").geometry().num_blocks,
        4 * MIB / 4096
    );
}
