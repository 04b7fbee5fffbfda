//! The state of one open image that the engine and its requests share:
//! the librados/librbd handles and the resize watch.

use std::ffi::c_int;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};

use rados_sys as rados;
use rbd_sys as rbd;

use crate::geometry::Geometry;

/// The librados and librbd handles of one open image, closed in reverse
/// order on drop.
pub(super) struct Handles {
    pub(super) cluster: rados::rados_t,
    pub(super) ioctx: rados::rados_ioctx_t,
    pub(super) image: rbd::rbd_image_t,
}

// SAFETY: librados cluster and pool handles and librbd image handles are
// documented thread-safe: any thread may issue requests on them
// concurrently. Closing happens only in `Drop`, when no other reference is
// left.
unsafe impl Send for Handles {}
// SAFETY: as for `Send`; every method used through `&Handles` is one of
// librbd's thread-safe request or query calls.
unsafe impl Sync for Handles {}

impl Drop for Handles {
    fn drop(&mut self) {
        // SAFETY: each handle was opened once by `connect`/`open` and is
        // closed once here, image before pool context before cluster, as
        // librbd requires; a null handle was never opened.
        unsafe {
            if !self.image.is_null() {
                rbd::rbd_close(self.image);
            }
            if !self.ioctx.is_null() {
                rados::rados_ioctx_destroy(self.ioctx);
            }
            if !self.cluster.is_null() {
                rados::rados_shutdown(self.cluster);
            }
        }
    }
}

/// State shared with librbd's update-watch callback and the resize thread.
pub(super) struct Watch {
    /// Set by the callback, taken by the resize thread.
    pub(super) pending: Mutex<WatchState>,
    pub(super) wake: Condvar,
}

#[derive(Default)]
pub(super) struct WatchState {
    pub(super) updated: bool,
    pub(super) stop: bool,
}

/// What the resize thread needs.
pub(super) struct Shared {
    pub(super) handles: Handles,
    pub(super) size: AtomicU64,
    pub(super) block_size: u32,
    pub(super) watch: Watch,
    pub(super) notify: Mutex<Option<CapacityHook>>,
    pub(super) spec: String,
}

pub(super) type CapacityHook = Box<dyn Fn(u64) + Send + Sync>;

impl Shared {
    /// The image's geometry at its current size.
    pub(super) fn geometry(&self, read_only: bool) -> Geometry {
        Geometry {
            block_size: self.block_size,
            num_blocks: self.size.load(Ordering::Acquire) / u64::from(self.block_size),
            read_only,
        }
    }

    /// Whether a SYNCHRONIZE CACHE has anything for librbd to do here.
    /// The image is open with librbd's cache off (`rbd_cache = false`,
    /// set after ceph.conf and CEPH_ARGS), so every write librbd has
    /// completed is already committed by the OSDs, and a flush only waits
    /// for writes still in flight. But librbd takes the image's exclusive
    /// lock for a user flush, so through a gateway that does not own it a
    /// flush would pull the lock, and ALUA's optimized port group with
    /// it, to this path for nothing: the writes this gateway completed
    /// were committed while it held the lock (librbd flushes before it
    /// releases the lock). Only the owner, or a gateway that cannot tell,
    /// flushes.
    pub(super) fn flush_has_work(&self) -> bool {
        let mut mine: c_int = 0;
        // SAFETY: a live image; `mine` receives the answer.
        let r = unsafe { rbd::rbd_is_exclusive_lock_owner(self.handles.image, &mut mine) };
        r < 0 || mine != 0
    }
}
