//! Stores with an asynchronous API of their own (librbd's `rbd_aio_*`):
//! the SCSI core starts a READ, WRITE or SYNCHRONIZE CACHE on the thread
//! that received it (a reactor) and the store calls back when it is done,
//! on a thread of its own, with no LUN worker in between.
//!
//! The op is described as for io_uring ([`crate::uring::Op`]). The store
//! owns the buffer until it calls back, and hands it back with the result:
//! for a read, the first `len` bytes filled; for a write, its data
//! untouched. The callback is called exactly once, also when the request
//! could not be submitted (then at once, on the caller's thread).

use std::fmt::{self, Debug};
use std::sync::Arc;
use std::time::Instant;

use smallvec::SmallVec;

use crate::buf::IoBuf;
use crate::error::Result;
use crate::hold::Keepalive;
use crate::uring::{IoKind, IoMeter, Op};

/// Called once with the outcome and the buffer.
pub type AioDone = Box<dyn FnOnce(Result<()>, IoBuf) + Send>;

/// A store's asynchronous submission interface.
pub trait AsyncIo: Send + Sync + Debug {
    /// Starts `op` on `buf` (at least `len` bytes for reads and writes;
    /// empty for a flush); `done` follows exactly once. A FUA write
    /// (`dsync`) is durable when `done` reports success.
    fn submit(&self, op: Op, buf: IoBuf, done: AioDone);
}

/// What a store hands the SCSI core for asynchronous I/O
/// ([`crate::Backstore::async_io`]): the interface, and the layers above the
/// engine that count its I/O or must see it in flight, as for io_uring
/// ([`crate::uring::UringFile`]).
#[derive(Clone)]
pub struct AsyncStore {
    /// The engine's asynchronous interface the SCSI core submits to.
    pub io: Arc<dyn AsyncIo>,
    /// Layers that count the store's I/O. Inline: building one per
    /// command allocates nothing.
    pub meters: SmallVec<[Arc<dyn IoMeter>; 2]>,
    /// Stores kept alive while an op is in flight.
    pub holds: SmallVec<[Arc<dyn Keepalive>; 1]>,
}

impl AsyncStore {
    /// The engine's interface, with no layer above it yet.
    pub fn new(io: Arc<dyn AsyncIo>) -> Self {
        Self {
            io,
            meters: SmallVec::new(),
            holds: SmallVec::new(),
        }
    }

    /// Tells every meter that an op of `len` bytes started at `started`
    /// has ended (`ok`: without error).
    pub fn record(&self, kind: IoKind, len: u64, started: Instant, ok: bool) {
        // One clock read for all the meters.
        let took = started.elapsed();
        for m in &self.meters {
            m.io_done(kind, len, took, ok);
        }
    }

    /// Tells every meter what error the op just recorded ended with.
    pub fn failed(&self, error: &crate::BackstoreError) {
        for m in &self.meters {
            m.io_failed(error);
        }
    }
}

impl Debug for AsyncStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncStore")
            .field("io", &self.io)
            .field("meters", &self.meters.len())
            .field("holds", &self.holds.len())
            .finish()
    }
}
