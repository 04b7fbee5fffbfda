//! The [`Backstore`] trait: what every engine, wrapper and I/O context
//! offers the SCSI core.

use std::fmt::Debug;

use crate::aio;
use crate::buf::IoBuf;
use crate::common;
use crate::error::{BackstoreError, Result};
use crate::geometry::{DeviceKey, Extent, Geometry};
use crate::hint::StreamHint;
use crate::hold::Keepalive;
use crate::nowait::Nonblocking;
use crate::shared;
use crate::uring;

/// A backing store shared by all the workers of one LUN.
///
/// Offsets and lengths are in bytes and are multiples of the block size.
pub trait Backstore: Keepalive + Send + Sync + Debug {
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

    /// [`Backstore::read_at`] with what the reader tells about the read;
    /// a store that keeps per-stream state (the I/O context) or wraps
    /// another uses or forwards it, the others ignore it.
    fn read_at_hinted(&self, buf: &mut [u8], offset: u64, hint: StreamHint) -> Result<()> {
        let _ = hint;
        self.read_at(buf, offset)
    }

    /// [`Backstore::read_buf`] with what the reader tells about the read.
    fn read_buf_hinted(&self, offset: u64, len: usize, hint: StreamHint) -> Result<IoBuf> {
        let _ = hint;
        self.read_buf(offset, len)
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
    /// ([`ioctx::DeviceGate`](crate::ioctx::DeviceGate)). `None` for stores of memory.
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
    /// inside a [`nowait::attempt`](crate::nowait::attempt). The default, [`Nonblocking::Never`],
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

    /// Whether [`Self::uring_file`] would give a file now, without building
    /// one (which clones the file's and every meter's `Arc`): asked on
    /// every read a reactor considers for its ring. Layers that override
    /// `uring_file` override this too.
    fn has_uring_file(&self) -> bool {
        self.uring_file().is_some()
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
