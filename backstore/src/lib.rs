//! # rustgt-backstore: the bottom layer
//!
//! Byte-addressed backing stores for rustgt's logical units. This crate knows
//! nothing of SCSI, CDBs or iSCSI: it is handed byte offsets and lengths that
//! the SCSI core has already checked against the store's [`Geometry`].
//!
//! Layer: the bottom of the stack. Of the workspace's crates it depends on
//! `rustgt-histogram` only (the histograms of [`IoStats`]). The SCSI core
//! (`rustgt-scsi`) issues the commands' I/O through it; the
//! port layer, the iSER driver and the `rustgt` binary use it to open
//! stores from configuration, for each reactor's [`uring::Ring`] and for the
//! buffer pool ([`IoBuf`], [`buf::set_release_hook`]); `rustgt-rabench`
//! drives its I/O contexts in simulated time.
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
//!   about, in order, as runs of mapped or deallocated bytes;
//! - every public item is documented (`warn(missing_docs)`, an error under
//!   clippy `-D warnings`).
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
//! non-blocking attempts, and a reactor's own io_uring driving the file and
//! block-device engines' fd ([`Backstore::uring_file`]).
//! [`aio`] is the same for stores with an asynchronous API of their own
//! (librbd), completed on the store's threads.
//! [`fault`] wraps any store to inject I/O errors, ENOSPC, delays and
//! hangs; [`cancel`] lets a long wait inside a store see that its work
//! item was given up (an aborted task).

#![warn(missing_docs)]

pub mod aio;
mod blockdev;
pub mod buf;
mod builder;
pub mod cancel;
mod common;
mod error;
pub mod fault;
mod fdio;
mod fdstore;
mod file;
mod geometry;
pub mod hddsim;
mod hint;
pub mod hold;
pub mod image_lock;
pub mod ioctx;
mod mmap;
pub mod nowait;
mod null;
mod open;
mod ram;
pub mod rbd;
pub mod shared;
mod spec;
mod store;
pub mod uring;

pub use blockdev::{BlockDevBackstore, BlockDevOptions};
pub use buf::{BufStorage, IoBuf};
pub use builder::{attach_context, auto_policy, build, open_engine, LunStoreSpec};
pub use error::{BackstoreError, Result};
pub use fault::{FaultBackstore, FaultSpec, Faults};
pub use file::{FileBackstore, FileOptions};
pub use geometry::{DeviceKey, Extent, Geometry};
pub use hddsim::{HddSimBackstore, HddSimOptions};
pub use hint::StreamHint;
pub use ioctx::{
    ContextMode, DeviceSlice, IoContext, IoContextOptions, IoStats, ReadaheadChoice,
    ReadaheadPolicy,
};
pub use mmap::{MappedRange, MmapBackstore};
pub use nowait::Nonblocking;
pub use null::NullBackstore;
pub use open::open;
pub use ram::RamBackstore;
#[cfg(feature = "rbd")]
pub use rbd::RbdBackstore;
pub use rbd::RbdOptions;
pub use spec::{parse_size, BackstoreSpec, EngineKind};
pub use store::Backstore;
