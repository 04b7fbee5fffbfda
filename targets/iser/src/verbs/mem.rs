//! Registered memory: the slot regions of a connection, its protection
//! domain, and the registration cache of pooled I/O buffers.

use std::alloc::Layout;
use std::io;
use std::ptr::{self, NonNull};
use std::sync::Mutex;

use rustgt_backstore::BufStorage;

use rdma_sys::*;

use crate::regcache::{Lookup, RegCache, PINNED_LIMIT};

use super::sys::{os_err, Result, VerbsError};
// ---------------------------------------------------------------------------
// Verbs objects of one connection.
// ---------------------------------------------------------------------------

/// One registered buffer region, carved into equal slots.
#[derive(Debug)]
pub struct Region {
    buf: NonNull<u8>,
    layout: Layout,
    mr: NonNull<ibv_mr>,
    pub(super) slot_size: usize,
    slots: u32,
}

impl Region {
    pub(super) fn new(pd: &Pd, slot_size: usize, slots: u32) -> Result<Region> {
        let len = slot_size
            .checked_mul(slots.max(1) as usize)
            .ok_or(VerbsError::Os {
                op: "buffer size",
                source: io::Error::from_raw_os_error(libc::EOVERFLOW),
            })?;
        let layout = Layout::from_size_align(len, 4096).map_err(|_| VerbsError::Os {
            op: "buffer layout",
            source: io::Error::from_raw_os_error(libc::EINVAL),
        })?;
        // SAFETY: `layout` has a non-zero size.
        let buf = unsafe { std::alloc::alloc_zeroed(layout) };
        let Some(buf) = NonNull::new(buf) else {
            return Err(VerbsError::Os {
                op: "buffer allocation",
                source: io::Error::from_raw_os_error(libc::ENOMEM),
            });
        };
        // Local access only: the target never exposes its memory to the
        // initiator (it reads and writes the initiator's, not the reverse).
        let access = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0 as i32;
        // SAFETY: `buf` is `len` bytes we own until `Drop`, which
        // deregisters before freeing.
        let mr = unsafe { ibv_reg_mr(pd.pd.as_ptr(), buf.as_ptr().cast(), len, access) };
        let Some(mr) = NonNull::new(mr) else {
            let err = os_err("ibv_reg_mr");
            // SAFETY: allocated above with `layout`, never registered.
            unsafe { std::alloc::dealloc(buf.as_ptr(), layout) };
            return Err(err);
        };
        Ok(Region {
            buf,
            layout,
            mr,
            slot_size,
            slots,
        })
    }

    pub fn slot_size(&self) -> usize {
        self.slot_size
    }

    fn lkey(&self) -> u32 {
        // SAFETY: `mr` is live until `Drop`.
        unsafe { (*self.mr.as_ptr()).lkey }
    }

    /// Address and length of slot `i`, or None out of range.
    pub(super) fn sge(&self, i: u32, len: usize) -> Option<ibv_sge> {
        if i >= self.slots || len > self.slot_size {
            return None;
        }
        let off = i as usize * self.slot_size;
        Some(ibv_sge {
            addr: self.buf.as_ptr() as u64 + off as u64,
            length: u32::try_from(len).ok()?,
            lkey: self.lkey(),
        })
    }

    /// The first `len` bytes of slot `i`. The caller must not have a work
    /// request posted on that slot (the slot pools guarantee it).
    pub fn read(&self, i: u32, len: usize) -> Option<&[u8]> {
        if i >= self.slots || len > self.slot_size {
            return None;
        }
        // SAFETY: in bounds (checked); no posted WR writes this slot, so
        // the device does not write it while the borrow lives.
        Some(unsafe {
            std::slice::from_raw_parts(self.buf.as_ptr().add(i as usize * self.slot_size), len)
        })
    }

    /// Copy `data` to the start of slot `i` (same rule as `read`).
    pub fn write(&mut self, i: u32, data: &[u8]) -> bool {
        if i >= self.slots || data.len() > self.slot_size {
            return false;
        }
        // SAFETY: in bounds (checked); no posted WR uses this slot.
        unsafe {
            ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.buf.as_ptr().add(i as usize * self.slot_size),
                data.len(),
            )
        };
        true
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: the QP using it is destroyed first (field order of
        // `ConnResources`), so no DMA can reach the buffer any more;
        // deregister, then free what we allocated.
        unsafe {
            ibv_dereg_mr(self.mr.as_ptr());
            std::alloc::dealloc(self.buf.as_ptr(), self.layout);
        }
    }
}

#[derive(Debug)]
pub(super) struct Pd {
    pub(super) pd: NonNull<ibv_pd>,
}

// ---------------------------------------------------------------------------
// Registration cache: pooled I/O buffers registered with a connection's PD
// on first use and kept registered until the pool frees the storage or the
// PD goes (see `regcache` for the rules).
// ---------------------------------------------------------------------------

/// One memory registration of pooled storage.
#[derive(Debug)]
struct Mr(NonNull<ibv_mr>);

// SAFETY: an MR is a handle libibverbs lets any thread use and deregister;
// the cache's mutex serialises every use of it here.
unsafe impl Send for Mr {}

impl Mr {
    fn lkey(&self) -> u32 {
        // SAFETY: the MR is live while the cache holds it (callers hold the
        // cache's lock).
        unsafe { (*self.0.as_ptr()).lkey }
    }

    /// Deregister. Only for an MR no posted work request names: its storage
    /// is being freed (then nothing holds a buffer in it, and the driver
    /// holds the buffer of every WR it posted), or its PD's QP is destroyed.
    fn dereg(self) {
        // SAFETY: live MR, removed from the cache, deregistered once; per
        // the rule above no DMA can use it any more.
        let rc = unsafe { ibv_dereg_mr(self.0.as_ptr()) };
        if rc != 0 {
            tracing::warn!(rc, "ibv_dereg_mr of a pooled buffer failed");
        }
    }
}

static REGS: Mutex<Option<RegCache<Mr>>> = Mutex::new(None);

fn regs() -> std::sync::MutexGuard<'static, Option<RegCache<Mr>>> {
    REGS.lock().unwrap_or_else(|e| e.into_inner())
}

/// The buffer pool's release hook: storage about to be freed loses every
/// registration first, so its address, reused by the allocator, is never
/// found registered (an MR keeps the old pages pinned and would send them).
fn release_storage(addr: usize, _len: usize) {
    let gone = match regs().as_mut() {
        Some(c) => c.remove_storage(addr),
        None => return,
    };
    for mr in gone {
        mr.dereg();
    }
}

/// Registrations pinned now (bytes) and their count.
pub fn pinned() -> (usize, usize) {
    regs().as_ref().map_or((0, 0), |c| (c.pinned(), c.len()))
}

/// A connection PD's share of the cache: dropped after the QP and before
/// the PD, it deregisters the PD's registrations.
#[derive(Debug)]
pub(super) struct PdRegs {
    pd: usize,
}

impl PdRegs {
    pub(super) fn new(pd: &Pd) -> PdRegs {
        rustgt_backstore::buf::set_release_hook(release_storage);
        regs().get_or_insert_with(|| RegCache::new(PINNED_LIMIT));
        PdRegs {
            pd: pd.pd.as_ptr() as usize,
        }
    }
}

impl PdRegs {
    /// The local key of `len` bytes at `addr` inside `storage`, registered
    /// with `pd` (this share's PD) now if it is not and the pinned-bytes
    /// limit allows; None: the caller copies instead.
    pub(super) fn lkey_for_range(
        &self,
        pd: &Pd,
        storage: &BufStorage,
        addr: usize,
        len: usize,
    ) -> Option<u32> {
        if len == 0 || !storage.contains(addr, len) {
            return None;
        }
        let pd_key = self.pd;
        let mut guard = regs();
        let cache = guard.as_mut()?;
        match cache.lookup(pd_key, storage.addr(), storage.len()) {
            Lookup::Hit(mr) => return Some(mr.lkey()),
            Lookup::Refuse => return None,
            Lookup::Register => {}
        }
        // Local write too, so that an RDMA Read may land in the same
        // storage; never remote access (the initiator gets no key to it).
        let access = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0 as i32;
        // SAFETY: the PD is live (ours); `storage` is a pooled allocation
        // that is alive (the caller's `data` or Read destination, which lies
        // inside it, keeps it so) and does
        // not move while it exists; before the pool frees it the release
        // hook deregisters this MR, which takes the same lock we hold, so
        // the registration can never outlive the memory.
        let mr = unsafe {
            ibv_reg_mr(
                pd.pd.as_ptr(),
                storage.addr() as *mut libc::c_void,
                storage.len(),
                access,
            )
        };
        let Some(mr) = NonNull::new(mr) else {
            tracing::debug!(error = %io::Error::last_os_error(), len = storage.len(),
                "cannot register a pooled buffer; its data is copied");
            return None;
        };
        let mr = Mr(mr);
        let lkey = mr.lkey();
        match cache.insert(pd_key, storage.addr(), storage.len(), mr) {
            Ok(()) => Some(lkey),
            Err(mr) => {
                mr.dereg();
                None
            }
        }
    }
}

impl Drop for PdRegs {
    fn drop(&mut self) {
        let gone = regs()
            .as_mut()
            .map(|c| c.remove_pd(self.pd))
            .unwrap_or_default();
        for mr in gone {
            mr.dereg();
        }
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: its QP and MRs are gone (field order of `ConnResources`).
        unsafe { ibv_dealloc_pd(self.pd.as_ptr()) };
    }
}
