//! RBD engine: a LUN backed by a Ceph RBD image through librbd (the real
//! client library, as tcmu-runner's and tgt's rbd handlers use it), built
//! with the `rbd` cargo feature.
//!
//! One RADOS client, one pool context and one open image per LUN, shared
//! by all its workers: librbd's image handle takes concurrent
//! asynchronous requests from many threads. Each operation is one
//! `rbd_aio_*` request whose completion the calling worker waits for, so
//! a LUN has as many requests in flight as it has workers busy on it.
//!
//! What the SCSI core relies on:
//! - librbd's own cache is switched off (`rbd_cache = false`), whatever
//!   ceph.conf says: a write is acknowledged only once the OSDs hold it, so
//!   FUA needs nothing more and SYNCHRONIZE CACHE is one `rbd_aio_flush`;
//!   a second gateway on the same image never reads past a cached write;
//! - deallocation is `rbd_aio_write_zeroes`, never `rbd_aio_discard`:
//!   librbd drops a discard smaller than `rbd_discard_granularity_bytes`
//!   silently, while write-zeroes deallocates whole objects and zeroes the
//!   rest, so an unmapped range always reads back as zeros;
//! - the allocation map comes from `rbd_diff_iterate2` over the image;
//! - an image whose exclusive lock is held by another client (-EROFS), or
//!   a client fenced by a lock break (-ESHUTDOWN, -EBLOCKLISTED), gives
//!   [`BackstoreError::Fenced`](crate::BackstoreError::Fenced), which the SCSI core reports as an ALUA
//!   state transition so that the initiator retries on another path:
//!   never a silent success;
//! - a resize made elsewhere (`rbd resize`) is seen through librbd's
//!   update watch; the new size is read on a thread of the store's own,
//!   the geometry changes and the callback set by
//!   [`Backstore::watch_capacity`](crate::Backstore::watch_capacity) tells the layer above.
//!
//! The connection is bounded in time: `client_mount_timeout` (connect) and
//! the OSD and monitor operation timeouts are [`RbdOptions::op_timeout`],
//! so a lost cluster turns into I/O errors instead of hung workers.

#[cfg(feature = "rbd")]
mod async_io;
#[cfg(feature = "rbd")]
mod completion;
#[cfg(feature = "rbd")]
mod engine;
#[cfg(feature = "rbd")]
mod errors;
#[cfg(feature = "rbd")]
mod gateway;
#[cfg(feature = "rbd")]
mod image;
mod options;
#[cfg(feature = "rbd")]
pub use engine::RbdBackstore;
pub use options::RbdOptions;
