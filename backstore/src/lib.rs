//! # rustgt-backstore: the bottom layer
//!
//! Byte-addressed backing stores for rustgt's logical units. This crate knows
//! nothing of SCSI, CDBs or iSCSI: it is handed byte offsets and lengths that
//! the SCSI core has already checked against the store's [`Geometry`].
//!
//! Guarantees:
//! - every engine is `Send + Sync` and is shared by all workers of a LUN (one
//!   open fd per LUN, not one per worker);
//! - an operation an engine cannot do returns [`BackstoreError::Unsupported`]
//!   (the trait's default), never a panic;
//! - offsets outside the store return [`BackstoreError::OutOfRange`];
//!   every range check uses checked arithmetic, so `offset + len` overflow
//!   is out of range too;
//! - read-only stores refuse writes, WRITE SAME and unmap with
//!   [`BackstoreError::ReadOnly`];
//! - unmapped ranges read back as zeros;
//! - [`Backstore::extents`] describes every byte of the range it is asked
//!   about, in order, as runs of mapped or deallocated bytes.
//!
//! Engines: [`FileBackstore`] (regular file), [`MmapBackstore`] (regular
//! file, memory-mapped), [`BlockDevBackstore`] (block device),
//! [`RamBackstore`] (memory), [`NullBackstore`] (discards writes),
//! [`HddSimBackstore`] (a simulated 7200 rpm disk, see [`hddsim`]),
//! `RbdBackstore` (a Ceph RBD image through librbd, cargo feature `rbd`,
//! see [`rbd`]).
//! [`open`] builds one from a [`BackstoreSpec`]; [`build`] also wraps it in
//! the LUN's I/O context ([`ioctx`]: readahead policies, cache, coalescing,
//! stats); the readahead benchmark, in simulated time, is the
//! `rustgt-rabench` crate, which drives [`ioctx::simulation`].
//! [`nowait`] and [`uring`] serve reactor threads, which must not block:
//! non-blocking attempts, and a per-thread io_uring driving the file and
//! block-device engines' fd ([`Backstore::uring_file`]).
//! [`aio`] is the same for stores with an asynchronous API of their own
//! (librbd), completed on the store's threads.
//! [`fault`] wraps any store to inject I/O errors, ENOSPC, delays and
//! hangs; [`cancel`] lets a long wait inside a store see that its work
//! item was given up (an aborted task).

use std::fmt::Debug;

pub mod aio;
mod blockdev;
pub mod buf;
mod builder;
pub mod cancel;
mod common;
pub mod fault;
mod fdio;
mod fdstore;
mod file;
pub mod hddsim;
pub mod ioctx;
mod mmap;
pub mod nowait;
mod null;
mod ram;
pub mod rbd;
pub mod shared;
mod spec;
pub mod uring;

pub use blockdev::{BlockDevBackstore, BlockDevOptions};
pub use buf::{BufStorage, IoBuf};
pub use builder::{attach_context, auto_policy, build, open_engine, LunStoreSpec};
pub use fault::{FaultBackstore, FaultSpec, Faults};
pub use file::{FileBackstore, FileOptions};
pub use hddsim::{HddSimBackstore, HddSimOptions};
pub use ioctx::{
    set_worker_index, ContextMode, DeviceSlice, IoContext, IoContextOptions, IoStats,
    ReadaheadChoice, ReadaheadPolicy,
};
pub use mmap::{MappedRange, MmapBackstore};
pub use nowait::Nonblocking;
pub use null::NullBackstore;
pub use ram::RamBackstore;
#[cfg(feature = "rbd")]
pub use rbd::RbdBackstore;
pub use rbd::RbdOptions;
pub use spec::{open, parse_size, BackstoreSpec, EngineKind};

/// Size and shape of a backing store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Logical block size in bytes: 512 or 4096.
    pub block_size: u32,
    /// Number of logical blocks.
    pub num_blocks: u64,
    /// Writes are refused with [`BackstoreError::ReadOnly`].
    pub read_only: bool,
}

impl Geometry {
    /// Capacity in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.num_blocks.saturating_mul(u64::from(self.block_size))
    }
}

/// Errors of the backstore layer. The SCSI core maps each to sense data in one place.
// Not `#[non_exhaustive]`, unlike the other public error enums: the SCSI
// crate maps every variant to sense data in one exhaustive match
// (`From<BackstoreError> for Sense`), and a new variant must fail to
// compile there rather than fall into a wildcard.
#[derive(Debug, thiserror::Error)]
pub enum BackstoreError {
    #[error("operation not supported by this backstore")]
    Unsupported,
    #[error("access at byte {offset} length {len} is beyond the end of the store")]
    OutOfRange { offset: u64, len: u64 },
    #[error("backstore is read-only")]
    ReadOnly,
    #[error("invalid backstore configuration: {0}")]
    Config(String),
    #[error("read failed: {0}")]
    Read(#[source] std::io::Error),
    #[error("write failed: {0}")]
    Write(#[source] std::io::Error),
    #[error("flush failed: {0}")]
    Flush(#[source] std::io::Error),
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The store refused the I/O because another client owns it now (an
    /// RBD image whose exclusive lock another gateway holds, or this
    /// gateway fenced by a lock break). The SCSI core reports an ALUA
    /// state transition, so the initiator retries on another path.
    #[error("the store is owned by another client: {0}")]
    Fenced(#[source] std::io::Error),
    /// Inside a [`nowait::attempt`]: the operation would have had to wait.
    /// The caller runs it again where it may block; never sent to a peer.
    #[error("the operation would block")]
    WouldBlock,
}

pub type Result<T> = std::result::Result<T, BackstoreError>;

/// One run of a store's allocation map (see [`Backstore::extents`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// Bytes in the run.
    pub len: u64,
    /// Backed by storage (`true`), or deallocated and reading as zeros.
    pub mapped: bool,
}

/// Names the device under a store (see [`Backstore::device_key`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceKey {
    /// Equal for stores on the same device, e.g. "block:8:0" or "hddsim:md0".
    pub key: String,
    /// Whether the device seeks (rotational), so turns pay off.
    pub seeks: bool,
}

/// A backing store shared by all the workers of one LUN.
///
/// Offsets and lengths are in bytes and are multiples of the block size.
pub trait Backstore: Send + Sync + Debug {
    /// Engine name for logs and stats ("file", "mmap", "blockdev", "ram",
    /// "null", "hddsim", "rbd").
    fn kind(&self) -> &'static str;

    /// Current geometry.
    fn geometry(&self) -> Geometry;

    /// Fill `buf` from byte `offset`: on success every byte of `buf` was
    /// written (unmapped ranges as zeros), because callers hand in reused
    /// buffers ([`IoBuf`]) that still hold another command's data.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()>;

    /// Read `len` bytes from `offset` into a buffer of the store's choice:
    /// by default a pooled one that [`Backstore::read_at`] fills; a store
    /// that holds only zeros lends them ([`IoBuf::zeros`]) without a memset.
    /// Stores that wrap another forward it.
    fn read_buf(&self, offset: u64, len: usize) -> Result<IoBuf> {
        let mut buf = IoBuf::for_overwrite(len);
        if len > 0 {
            self.read_at(&mut buf, offset)?;
        }
        Ok(buf)
    }

    /// Write `buf` at byte `offset`. With `fua`, the data is durable on return.
    fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> Result<()>;

    /// Make all completed writes durable.
    fn flush(&self) -> Result<()>;

    /// Write `pattern` (one block) repeatedly over `len` bytes from `offset`.
    fn write_same(&self, _pattern: &[u8], _offset: u64, _len: u64) -> Result<()> {
        Err(BackstoreError::Unsupported)
    }

    /// Whether the kernel's own readahead should run on this store (`true`)
    /// or stay off because rustgt's I/O context reads ahead itself
    /// (`false`). Engines without a page cache have nothing to switch.
    fn kernel_readahead(&self, _on: bool) -> Result<()> {
        Ok(())
    }

    /// The device this store's reads queue on, if the engine can tell:
    /// the I/O contexts of LUNs on one device take turns at it
    /// ([`ioctx::DeviceGate`]). `None` for stores of memory.
    fn device_key(&self) -> Option<DeviceKey> {
        None
    }

    /// Deallocate `len` bytes from `offset`; later reads return zeros.
    fn unmap(&self, _offset: u64, _len: u64) -> Result<()> {
        Err(BackstoreError::Unsupported)
    }

    /// Allocation map of `len` bytes from `offset`: runs in address order
    /// that together cover exactly `len` bytes, adjacent runs differing in
    /// `mapped` (empty when `len` is zero). The default reports the whole
    /// range mapped, which is always true of a fully provisioned store.
    fn extents(&self, offset: u64, len: u64) -> Result<Vec<Extent>> {
        common::check_range(&self.geometry(), offset, len)?;
        let mut runs = Vec::new();
        common::push_extent(&mut runs, len, true);
        Ok(runs)
    }

    /// Whether [`Backstore::write_same`] is implemented (to advertise WRITE SAME).
    fn supports_write_same(&self) -> bool {
        false
    }

    /// Whether [`Backstore::unmap`] is implemented (to advertise UNMAP and
    /// logical block provisioning).
    fn supports_unmap(&self) -> bool {
        false
    }

    /// Whether reads (and writes) can run on a thread that must not block,
    /// inside a [`nowait::attempt`]. The default, [`Nonblocking::Never`],
    /// keeps every command on the LUN's workers.
    fn nonblocking(&self) -> Nonblocking {
        Nonblocking::Never
    }

    /// The open file a reactor's io_uring may read, write and fsync
    /// directly ([`uring`]) for commands that cannot complete at once, with
    /// the meters of every layer that counts I/O. `None`, the default,
    /// keeps those commands on the LUN's workers: stores of memory, the
    /// simulated disk, and I/O contexts with readahead of their own (whose
    /// threads must see every read).
    fn uring_file(&self) -> Option<uring::UringFile> {
        None
    }

    /// Calls `hook` with the new number of blocks whenever the store's
    /// capacity changes by itself (an RBD image resized elsewhere), so the
    /// layer above can tell its initiators. Returns whether the store
    /// watches at all; the default, for stores whose size changes only
    /// through rustgt, does not (and drops the hook).
    fn watch_capacity(&self, _hook: Box<dyn Fn(u64) + Send + Sync>) -> bool {
        false
    }

    /// The store's own asynchronous API ([`aio`]), for READ, WRITE and
    /// SYNCHRONIZE CACHE started on a reactor and finished by the store's
    /// callback instead of a LUN worker. `None`, the default, keeps them
    /// on the workers (or io_uring, [`Backstore::uring_file`]).
    fn async_io(&self) -> Option<aio::AsyncStore> {
        None
    }

    /// What the gateways serving this backing share ([`shared`]), when
    /// other daemons may serve it at the same time. `None`, the default:
    /// this daemon is the backing's only user.
    fn shared_state(&self) -> Option<std::sync::Arc<dyn shared::SharedState>> {
        None
    }

    /// COMPARE AND WRITE done by the store in one atomic step, for stores
    /// that can (an RBD image, for one 512-byte sector): `None` when it
    /// cannot for this request, otherwise the offset of the first byte of
    /// `verify` that differs from the medium (nothing written), or `None`
    /// inside `Ok` when the compare matched and `write` is on the medium.
    fn compare_and_write(
        &self,
        _offset: u64,
        _verify: &[u8],
        _write: &[u8],
    ) -> Option<Result<Option<usize>>> {
        None
    }
}
