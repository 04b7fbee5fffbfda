//! Owners of the librdmacm and libibverbs objects the driver uses, with
//! safe methods. Every `unsafe` block of the crate is in this module.
//!
//! Guarantees:
//! - every object is released exactly once, in an order the libraries
//!   accept: a connection's QP, CQ, completion channel, memory regions,
//!   registrations of pooled buffers, PD, CM id and CM event channel go in
//!   that order ([`ConnResources`]);
//! - registered memory is never handed out as a Rust reference while the
//!   device may write it: buffers are raw allocations, and a slot is only
//!   borrowed while no work request that uses it is posted (the caller's
//!   slot pools track that);
//! - pooled `IoBuf` storage registered for zero-copy RDMA Writes is only
//!   read by the device, and only while the driver holds a `Bytes` of it
//!   for a posted WR; its registration is dropped before the pool frees the
//!   storage (release hook) and with the connection's PD, never while a WR
//!   names it;
//! - file descriptors are non-blocking, so readiness-driven callers never
//!   block in `rdma_get_cm_event` or `ibv_get_cq_event`.

use std::alloc::Layout;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::ptr::{self, NonNull};
use std::sync::Mutex;

use bytes::Bytes;
use rustgt_backstore::BufStorage;
use rustgt_iscsi::ReadDest;

use rdma_sys::*;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use crate::regcache::{Lookup, RegCache, PINNED_LIMIT};
use crate::sizing::DeviceLimits;

/// A failed library call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VerbsError {
    #[error("{op}: {source}")]
    Os {
        op: &'static str,
        #[source]
        source: io::Error,
    },
}

type Result<T> = std::result::Result<T, VerbsError>;

fn os_err(op: &'static str) -> VerbsError {
    VerbsError::Os {
        op,
        source: io::Error::last_os_error(),
    }
}

/// `rc` of a call that reports failure as non-zero with errno set.
fn check(rc: i32, op: &'static str) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(os_err(op))
    }
}

/// `rc` of a call that returns a positive errno itself (the verbs post and
/// notify calls).
fn check_errno(rc: i32, op: &'static str) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(VerbsError::Os {
            op,
            source: io::Error::from_raw_os_error(rc),
        })
    }
}

fn set_nonblocking(fd: RawFd, op: &'static str) -> Result<()> {
    // SAFETY: fcntl on a descriptor the caller owns; F_GETFL/F_SETFL only
    // read and set its status flags.
    let rc = unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 {
            flags
        } else {
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK)
        }
    };
    if rc < 0 {
        Err(os_err(op))
    } else {
        Ok(())
    }
}

fn would_block() -> bool {
    matches!(
        io::Error::last_os_error().raw_os_error(),
        Some(libc::EAGAIN) | Some(libc::EINTR)
    )
}

// ---------------------------------------------------------------------------
// Connection manager.
// ---------------------------------------------------------------------------

/// An rdma_cm event channel: where CM events of its ids arrive.
#[derive(Debug)]
pub struct EventChannel {
    ch: NonNull<rdma_event_channel>,
}

// SAFETY: librdmacm objects may be used from any thread; each owner is used
// by one task at a time.
unsafe impl Send for EventChannel {}

/// What the driver needs of one CM event; the event itself is acked before
/// this is returned.
#[derive(Debug)]
pub struct CmEvent {
    pub kind: rdma_cm_event_type::Type,
    pub status: i32,
    /// For a connect request: the new connection's id, now owned.
    pub new_conn: Option<CmId>,
    pub private_data: Vec<u8>,
    /// Connect request: RDMA Reads we may issue (already swapped by the CM).
    pub initiator_depth: u8,
    /// Connect request: RDMA Reads the peer may issue to us.
    pub responder_resources: u8,
}

impl EventChannel {
    pub fn new() -> Result<Self> {
        // SAFETY: plain constructor; the result is checked for NULL.
        let ch = unsafe { rdma_create_event_channel() };
        let ch = NonNull::new(ch).ok_or_else(|| os_err("rdma_create_event_channel"))?;
        let me = EventChannel { ch };
        set_nonblocking(me.fd(), "event channel O_NONBLOCK")?;
        Ok(me)
    }

    pub fn fd(&self) -> RawFd {
        // SAFETY: `ch` is a live channel for as long as `self` exists.
        unsafe { (*self.ch.as_ptr()).fd }
    }

    /// The next event, if one is queued (never blocks).
    pub fn next_event(&self) -> Result<Option<CmEvent>> {
        let mut ev: *mut rdma_cm_event = ptr::null_mut();
        // SAFETY: `ch` is live; `ev` receives an event we ack below.
        let rc = unsafe { rdma_get_cm_event(self.ch.as_ptr(), &mut ev) };
        if rc != 0 {
            return if would_block() {
                Ok(None)
            } else {
                Err(os_err("rdma_get_cm_event"))
            };
        }
        let Some(ev) = NonNull::new(ev) else {
            return Ok(None);
        };
        // SAFETY: `ev` is a valid event until acked. For connect requests
        // `param.conn` is the active union member and its private data
        // (`private_data_len` bytes, possibly NULL) lives as long as the
        // event; the new id survives the ack and becomes ours.
        let out = unsafe {
            let e = ev.as_ref();
            let is_request = e.event == rdma_cm_event_type::RDMA_CM_EVENT_CONNECT_REQUEST;
            let conn = &e.param.conn;
            let private_data = if is_request && !conn.private_data.is_null() {
                std::slice::from_raw_parts(
                    conn.private_data.cast::<u8>(),
                    usize::from(conn.private_data_len),
                )
                .to_vec()
            } else {
                Vec::new()
            };
            CmEvent {
                kind: e.event,
                status: e.status,
                new_conn: if is_request {
                    NonNull::new(e.id).map(|id| CmId { id })
                } else {
                    None
                },
                private_data,
                initiator_depth: if is_request { conn.initiator_depth } else { 0 },
                responder_resources: if is_request {
                    conn.responder_resources
                } else {
                    0
                },
            }
        };
        // SAFETY: acking the event we got; it is not used after this.
        unsafe { rdma_ack_cm_event(ev.as_ptr()) };
        Ok(Some(out))
    }
}

impl Drop for EventChannel {
    fn drop(&mut self) {
        // SAFETY: every id on this channel is destroyed before it (field
        // order of the owners) and all its events were acked.
        unsafe { rdma_destroy_event_channel(self.ch.as_ptr()) };
    }
}

/// What `rdma_accept` tells the initiator.
#[derive(Debug, Clone, Copy)]
pub struct AcceptParams<'a> {
    pub private_data: &'a [u8],
    pub initiator_depth: u8,
    pub responder_resources: u8,
}

/// An rdma_cm id: a listener or one connection.
#[derive(Debug)]
pub struct CmId {
    id: NonNull<rdma_cm_id>,
}

// SAFETY: see `EventChannel`.
unsafe impl Send for CmId {}

impl CmId {
    /// A new id for listening (reliable connected, TCP port space).
    pub fn create(ch: &EventChannel) -> Result<CmId> {
        let mut id: *mut rdma_cm_id = ptr::null_mut();
        // SAFETY: `ch` is live; `id` receives the new id on success.
        let rc = unsafe {
            rdma_create_id(
                ch.ch.as_ptr(),
                &mut id,
                ptr::null_mut(),
                rdma_port_space::RDMA_PS_TCP,
            )
        };
        check(rc, "rdma_create_id")?;
        NonNull::new(id)
            .map(|id| CmId { id })
            .ok_or_else(|| os_err("rdma_create_id"))
    }

    pub fn bind(&self, addr: SocketAddr) -> Result<()> {
        let mut storage = SockaddrStorage::from(addr);
        // SAFETY: `storage` holds a sockaddr of the family it says, and
        // outlives the call.
        let rc = unsafe { rdma_bind_addr(self.id.as_ptr(), storage.as_mut_ptr()) };
        check(rc, "rdma_bind_addr")
    }

    pub fn listen(&self, backlog: i32) -> Result<()> {
        // SAFETY: a bound id.
        check(
            unsafe { rdma_listen(self.id.as_ptr(), backlog) },
            "rdma_listen",
        )
    }

    /// Move this id's events to `ch` (waits until its events on the old
    /// channel are acked, which `next_event` always does).
    pub fn migrate(&self, ch: &EventChannel) -> Result<()> {
        // SAFETY: both live.
        let rc = unsafe { rdma_migrate_id(self.id.as_ptr(), ch.ch.as_ptr()) };
        check(rc, "rdma_migrate_id")
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        // SAFETY: the id is live; the address is inside it.
        unsafe { sockaddr_to_std(rdma_get_local_addr(self.id.as_ref())) }
    }

    pub fn peer_addr(&self) -> Option<SocketAddr> {
        // SAFETY: the id is live; the address is inside it.
        unsafe { sockaddr_to_std(rdma_get_peer_addr(self.id.as_ref())) }
    }

    fn verbs(&self) -> Result<NonNull<ibv_context>> {
        // SAFETY: reading a field of the live id.
        let ctx = unsafe { (*self.id.as_ptr()).verbs };
        NonNull::new(ctx).ok_or(VerbsError::Os {
            op: "rdma_cm_id has no device",
            source: io::Error::from_raw_os_error(libc::ENODEV),
        })
    }

    /// The limits of the device this id is bound to.
    pub fn device_limits(&self) -> Result<DeviceLimits> {
        let ctx = self.verbs()?;
        let mut attr = std::mem::MaybeUninit::<ibv_device_attr>::zeroed();
        // SAFETY: `ctx` is the id's open device; `attr` is written in full.
        let rc = unsafe { ibv_query_device(ctx.as_ptr(), attr.as_mut_ptr()) };
        check_errno(rc, "ibv_query_device")?;
        // SAFETY: initialised by the successful call (and zeroed before).
        let a = unsafe { attr.assume_init() };
        let n = |v: i32| u32::try_from(v).unwrap_or(0);
        Ok(DeviceLimits {
            max_qp_wr: n(a.max_qp_wr),
            max_cqe: n(a.max_cqe),
            max_qp_init_rd_atom: n(a.max_qp_init_rd_atom),
            max_qp_rd_atom: n(a.max_qp_rd_atom),
            can_invalidate: a.device_cap_flags
                & ibv_device_cap_flags::IBV_DEVICE_MEM_MGT_EXTENSIONS.0
                != 0,
        })
    }

    pub fn accept(&self, p: &AcceptParams<'_>) -> Result<()> {
        let mut param = rdma_conn_param {
            private_data: p.private_data.as_ptr().cast(),
            private_data_len: u8::try_from(p.private_data.len()).unwrap_or(u8::MAX),
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            flow_control: 0,
            retry_count: 7,
            // 7: retry forever on receiver-not-ready.
            rnr_retry_count: 7,
            srq: 0,
            qp_num: 0,
        };
        // SAFETY: `param` and the private data it points to outlive the call.
        check(
            unsafe { rdma_accept(self.id.as_ptr(), &mut param) },
            "rdma_accept",
        )
    }

    pub fn disconnect(&self) -> Result<()> {
        // SAFETY: a live id; disconnecting twice only fails with EINVAL.
        check(
            unsafe { rdma_disconnect(self.id.as_ptr()) },
            "rdma_disconnect",
        )
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        // SAFETY: its QP (if any) is destroyed first (field order of
        // `ConnResources`) and all its events were acked.
        unsafe { rdma_destroy_id(self.id.as_ptr()) };
    }
}

/// A C sockaddr big enough for IPv4 or IPv6.
struct SockaddrStorage(libc::sockaddr_storage);

impl From<SocketAddr> for SockaddrStorage {
    fn from(addr: SocketAddr) -> Self {
        // SAFETY: all-zero is a valid sockaddr_storage.
        let mut st: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        match addr {
            SocketAddr::V4(a) => {
                let sin = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: a.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from(*a.ip()).to_be(),
                    },
                    sin_zero: [0; 8],
                };
                // SAFETY: sockaddr_storage is larger than and aligned for
                // sockaddr_in.
                unsafe { ptr::write((&mut st as *mut libc::sockaddr_storage).cast(), sin) };
            }
            SocketAddr::V6(a) => {
                let sin6 = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo(),
                    sin6_addr: libc::in6_addr {
                        s6_addr: a.ip().octets(),
                    },
                    sin6_scope_id: a.scope_id(),
                };
                // SAFETY: as above, for sockaddr_in6.
                unsafe { ptr::write((&mut st as *mut libc::sockaddr_storage).cast(), sin6) };
            }
        }
        SockaddrStorage(st)
    }
}

impl SockaddrStorage {
    fn as_mut_ptr(&mut self) -> *mut libc::sockaddr {
        (&mut self.0 as *mut libc::sockaddr_storage).cast()
    }
}

/// # Safety
/// `sa` must point to a sockaddr as large as its family says.
unsafe fn sockaddr_to_std(sa: &libc::sockaddr) -> Option<SocketAddr> {
    let p = sa as *const libc::sockaddr;
    match i32::from(sa.sa_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage is a sockaddr_in.
            let sin = unsafe { &*p.cast::<libc::sockaddr_in>() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage is a sockaddr_in6.
            let sin6 = unsafe { &*p.cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

// ---------------------------------------------------------------------------
// Verbs objects of one connection.
// ---------------------------------------------------------------------------

/// One registered buffer region, carved into equal slots.
#[derive(Debug)]
pub struct Region {
    buf: NonNull<u8>,
    layout: Layout,
    mr: NonNull<ibv_mr>,
    slot_size: usize,
    slots: u32,
}

impl Region {
    fn new(pd: &Pd, slot_size: usize, slots: u32) -> Result<Region> {
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
    fn sge(&self, i: u32, len: usize) -> Option<ibv_sge> {
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
struct Pd {
    pd: NonNull<ibv_pd>,
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
struct PdRegs {
    pd: usize,
}

impl PdRegs {
    fn new(pd: &Pd) -> PdRegs {
        rustgt_backstore::buf::set_release_hook(release_storage);
        regs().get_or_insert_with(|| RegCache::new(PINNED_LIMIT));
        PdRegs {
            pd: pd.pd.as_ptr() as usize,
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

#[derive(Debug)]
struct CompChannel {
    ch: NonNull<ibv_comp_channel>,
}

impl CompChannel {
    fn fd(&self) -> RawFd {
        // SAFETY: `ch` is live for as long as `self`.
        unsafe { (*self.ch.as_ptr()).fd }
    }
}

impl Drop for CompChannel {
    fn drop(&mut self) {
        // SAFETY: its CQ is destroyed first.
        unsafe { ibv_destroy_comp_channel(self.ch.as_ptr()) };
    }
}

#[derive(Debug)]
struct Cq {
    cq: NonNull<ibv_cq>,
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: its QP is destroyed first and every CQ event was acked
        // when it was read (`ConnResources::take_cq_events`).
        unsafe { ibv_destroy_cq(self.cq.as_ptr()) };
    }
}

/// The QP of a connection id; destroyed through the id.
#[derive(Debug)]
struct Qp {
    id: NonNull<rdma_cm_id>,
    qp: NonNull<ibv_qp>,
}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: the id is dropped after this (field order).
        unsafe { rdma_destroy_qp(self.id.as_ptr()) };
    }
}

/// One finished work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    pub wr_id: u64,
    pub status: ibv_wc_status::Type,
    pub byte_len: u32,
    pub vendor_err: u32,
}

impl Completion {
    pub fn ok(&self) -> bool {
        self.status == ibv_wc_status::IBV_WC_SUCCESS
    }

    /// Flushed because the QP went to the error state (disconnect).
    pub fn flushed(&self) -> bool {
        self.status == ibv_wc_status::IBV_WC_WR_FLUSH_ERR
    }
}

/// What a send-queue work request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendKind {
    Send,
    SendInvalidate(u32),
    RdmaWrite { remote_addr: u64, rkey: u32 },
    RdmaRead { remote_addr: u64, rkey: u32 },
}

/// Which registered region a send-queue work request uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Buf {
    Send,
    Data,
}

/// Queue sizes and buffer layout of a connection.
#[derive(Debug, Clone, Copy)]
pub struct ConnShape {
    pub recv_depth: u32,
    pub recv_size: usize,
    pub send_slots: u32,
    pub send_size: usize,
    pub data_chunks: u32,
    pub chunk_size: usize,
    pub sq_depth: u32,
    pub cq_depth: u32,
}

/// A CM id with the event channel its events go to. The id drops first:
/// destroying it needs its channel.
#[derive(Debug)]
pub struct IdChannel {
    pub id: CmId,
    pub channel: EventChannel,
}

/// Everything one iSER connection holds. Fields drop in declaration
/// order, which is the order the libraries need.
#[derive(Debug)]
pub struct ConnResources {
    qp: Qp,
    cq: Cq,
    comp: CompChannel,
    pub recv: Region,
    pub send: Region,
    pub data: Region,
    /// Pooled buffers registered with the PD: deregistered after the QP
    /// is gone and before the PD.
    regs: PdRegs,
    /// Held for its `Drop`, after the regions and before the id.
    pd: Pd,
    pub cm: IdChannel,
}

// SAFETY: libibverbs and librdmacm objects are thread-safe; the driver uses
// one connection's resources from one task at a time, and the buffers are
// only touched through `Region`'s slot rules.
unsafe impl Send for ConnResources {}

impl ConnResources {
    /// PD, completion channel, CQ, QP and the three registered regions for
    /// the connection of `cm`. On failure everything made so far is
    /// released (locals drop before `cm`).
    pub fn new(cm: IdChannel, shape: &ConnShape) -> Result<ConnResources> {
        let ctx = cm.id.verbs()?;
        // SAFETY: `ctx` is the id's open device context.
        let pd = unsafe { ibv_alloc_pd(ctx.as_ptr()) };
        let pd = Pd {
            pd: NonNull::new(pd).ok_or_else(|| os_err("ibv_alloc_pd"))?,
        };
        // SAFETY: as above.
        let comp = unsafe { ibv_create_comp_channel(ctx.as_ptr()) };
        let comp = CompChannel {
            ch: NonNull::new(comp).ok_or_else(|| os_err("ibv_create_comp_channel"))?,
        };
        set_nonblocking(comp.fd(), "completion channel O_NONBLOCK")?;
        let cqe = i32::try_from(shape.cq_depth).unwrap_or(i32::MAX);
        // SAFETY: `ctx` and `comp` are live; no CQ context pointer.
        let cq = unsafe { ibv_create_cq(ctx.as_ptr(), cqe, ptr::null_mut(), comp.ch.as_ptr(), 0) };
        let cq = Cq {
            cq: NonNull::new(cq).ok_or_else(|| os_err("ibv_create_cq"))?,
        };
        let recv = Region::new(&pd, shape.recv_size, shape.recv_depth)?;
        let send = Region::new(&pd, shape.send_size, shape.send_slots)?;
        let data = Region::new(&pd, shape.chunk_size, shape.data_chunks)?;
        let regs = PdRegs::new(&pd);
        let mut attr = ibv_qp_init_attr {
            qp_context: ptr::null_mut(),
            send_cq: cq.cq.as_ptr(),
            recv_cq: cq.cq.as_ptr(),
            srq: ptr::null_mut(),
            cap: ibv_qp_cap {
                max_send_wr: shape.sq_depth,
                max_recv_wr: shape.recv_depth,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: ibv_qp_type::IBV_QPT_RC,
            // Every send-queue WR completes: that is when its buffer is free.
            sq_sig_all: 1,
        };
        // SAFETY: id, pd and cq are live; `attr` outlives the call.
        let rc = unsafe { rdma_create_qp(cm.id.id.as_ptr(), pd.pd.as_ptr(), &mut attr) };
        check(rc, "rdma_create_qp")?;
        // SAFETY: set by the successful rdma_create_qp.
        let qp = unsafe { (*cm.id.id.as_ptr()).qp };
        let qp = Qp {
            id: cm.id.id,
            qp: NonNull::new(qp).ok_or_else(|| os_err("rdma_create_qp"))?,
        };
        let me = ConnResources {
            qp,
            cq,
            comp,
            recv,
            send,
            data,
            regs,
            pd,
            cm,
        };
        me.arm()?;
        Ok(me)
    }

    pub fn comp_fd(&self) -> RawFd {
        self.comp.fd()
    }

    /// Ask for a completion event on the next completion.
    pub fn arm(&self) -> Result<()> {
        // SAFETY: live CQ.
        let rc = unsafe { ibv_req_notify_cq(self.cq.cq.as_ptr(), 0) };
        check_errno(rc, "ibv_req_notify_cq")
    }

    /// Read and ack every pending completion event (never blocks); returns
    /// how many there were.
    pub fn take_cq_events(&self) -> u32 {
        let mut n = 0u32;
        loop {
            let mut cq: *mut ibv_cq = ptr::null_mut();
            let mut ctx: *mut libc::c_void = ptr::null_mut();
            // SAFETY: live channel, non-blocking fd; out-pointers are ours.
            let rc = unsafe { ibv_get_cq_event(self.comp.ch.as_ptr(), &mut cq, &mut ctx) };
            if rc != 0 {
                break;
            }
            n += 1;
        }
        if n > 0 {
            // SAFETY: acking exactly the events just read, all for our CQ
            // (the channel serves no other).
            unsafe { ibv_ack_cq_events(self.cq.cq.as_ptr(), n) };
        }
        n
    }

    /// Poll up to `max` completions into `out` (cleared first).
    pub fn poll(&self, out: &mut Vec<Completion>, max: usize) -> Result<()> {
        out.clear();
        let mut wcs: Vec<ibv_wc> = Vec::with_capacity(max);
        let n = i32::try_from(max).unwrap_or(i32::MAX);
        // SAFETY: `wcs` has room for `max` entries; the call writes at most
        // that many and returns how many.
        let got = unsafe { ibv_poll_cq(self.cq.cq.as_ptr(), n, wcs.as_mut_ptr()) };
        if got < 0 {
            return Err(VerbsError::Os {
                op: "ibv_poll_cq",
                source: io::Error::from_raw_os_error(-got),
            });
        }
        let got = (got as usize).min(max);
        // SAFETY: the first `got` entries were written by ibv_poll_cq.
        unsafe { wcs.set_len(got) };
        out.extend(wcs.iter().map(|wc| Completion {
            wr_id: wc.wr_id,
            status: wc.status,
            byte_len: wc.byte_len,
            vendor_err: wc.vendor_err,
        }));
        Ok(())
    }

    /// Post a receive into receive slot `slot`.
    pub fn post_recv(&self, slot: u32, wr_id: u64) -> Result<()> {
        let mut sge = self
            .recv
            .sge(slot, self.recv.slot_size)
            .ok_or_else(|| invalid("receive slot"))?;
        let mut wr = ibv_recv_wr {
            wr_id,
            next: ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        let mut bad: *mut ibv_recv_wr = ptr::null_mut();
        // SAFETY: live QP; `wr` and `sge` outlive the call (the device copies
        // them); the slot is not in use by another WR (caller's pool).
        let rc = unsafe { ibv_post_recv(self.qp.qp.as_ptr(), &mut wr, &mut bad) };
        check_errno(rc, "ibv_post_recv")
    }

    /// Post one send-queue work request over `len` bytes of slot `slot` of
    /// `buf`.
    pub fn post_send(
        &self,
        kind: SendKind,
        buf: Buf,
        slot: u32,
        len: usize,
        wr_id: u64,
    ) -> Result<()> {
        let region = match buf {
            Buf::Send => &self.send,
            Buf::Data => &self.data,
        };
        let sge = region.sge(slot, len).ok_or_else(|| invalid("send slot"))?;
        // The slot is reserved for this WR until its completion (caller's
        // pool), so the device may read or write it meanwhile.
        self.post_sge(kind, sge, wr_id)
    }

    /// The local key of `storage` registered with this connection's PD,
    /// registering it now if it is not and the pinned-bytes limit allows.
    /// `data` must be a slice of a buffer in `storage` (checked), which
    /// keeps the storage alive while we register it. None: send `data` by
    /// the copy path.
    pub fn lkey_for(&self, storage: &BufStorage, data: &Bytes) -> Option<u32> {
        self.lkey_for_range(storage, data.as_ptr() as usize, data.len())
    }

    /// The same for `len` bytes at `addr`, which must lie in `storage`
    /// (an RDMA Read's destination, kept alive by the caller).
    pub fn lkey_for_range(&self, storage: &BufStorage, addr: usize, len: usize) -> Option<u32> {
        if len == 0 || !storage.contains(addr, len) {
            return None;
        }
        let pd = self.regs.pd;
        let mut guard = regs();
        let cache = guard.as_mut()?;
        match cache.lookup(pd, storage.addr(), storage.len()) {
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
                self.pd.pd.as_ptr(),
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
        match cache.insert(pd, storage.addr(), storage.len(), mr) {
            Ok(()) => Some(lkey),
            Err(mr) => {
                mr.dereg();
                None
            }
        }
    }

    /// Post an RDMA Write of `data` straight from where it is, under
    /// `lkey` (from [`lkey_for`](Self::lkey_for) with `data`'s storage).
    /// The caller holds `data` (and so its buffer and registration) until
    /// the WR completes or the QP is destroyed.
    pub fn post_write_from(
        &self,
        data: &Bytes,
        lkey: u32,
        remote_addr: u64,
        rkey: u32,
        wr_id: u64,
    ) -> Result<()> {
        let sge = ibv_sge {
            addr: data.as_ptr() as u64,
            length: u32::try_from(data.len()).map_err(|_| invalid("write length"))?,
            lkey,
        };
        self.post_sge(SendKind::RdmaWrite { remote_addr, rkey }, sge, wr_id)
    }

    /// Post an RDMA Read of `dest.len()` bytes from `remote_addr` under
    /// `rkey` straight into `dest` (Data-Out into the write's buffer), with
    /// `lkey` from [`lkey_for_range`](Self::lkey_for_range) for it. The
    /// caller holds `dest` (and so the buffer and its registration) until
    /// the WR completes or the QP is destroyed; until then the range is
    /// the device's alone (the core neither reads, writes nor moves it).
    pub fn post_read_into(
        &self,
        dest: &ReadDest,
        lkey: u32,
        remote_addr: u64,
        rkey: u32,
        wr_id: u64,
    ) -> Result<()> {
        let sge = ibv_sge {
            addr: dest.addr() as u64,
            length: u32::try_from(dest.len()).map_err(|_| invalid("read length"))?,
            lkey,
        };
        self.post_sge(SendKind::RdmaRead { remote_addr, rkey }, sge, wr_id)
    }

    /// Post one send-queue WR over `sge`, whose memory stays valid and
    /// unborrowed-for-writing until the WR completes (callers' rule).
    fn post_sge(&self, kind: SendKind, mut sge: ibv_sge, wr_id: u64) -> Result<()> {
        // SAFETY: all-zero is a valid ibv_send_wr (null pointers, zero
        // fields); the fields that matter are set below.
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = wr_id;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
        match kind {
            SendKind::Send => wr.opcode = ibv_wr_opcode::IBV_WR_SEND,
            SendKind::SendInvalidate(rkey) => {
                wr.opcode = ibv_wr_opcode::IBV_WR_SEND_WITH_INV;
                wr.imm_data_invalidated_rkey_union.invalidated_rkey = rkey;
            }
            SendKind::RdmaWrite { remote_addr, rkey } => {
                wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE;
                wr.wr.rdma = rdma_t { remote_addr, rkey };
            }
            SendKind::RdmaRead { remote_addr, rkey } => {
                wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_READ;
                wr.wr.rdma = rdma_t { remote_addr, rkey };
            }
        }
        let mut bad: *mut ibv_send_wr = ptr::null_mut();
        // SAFETY: live QP; `wr` and `sge` outlive the call (the library
        // copies them); the memory `sge` names stays valid until the WR
        // completes (callers' rule: a reserved slot, or a held buffer).
        let rc = unsafe { ibv_post_send(self.qp.qp.as_ptr(), &mut wr, &mut bad) };
        check_errno(rc, "ibv_post_send")
    }
}

fn invalid(what: &'static str) -> VerbsError {
    VerbsError::Os {
        op: what,
        source: io::Error::from_raw_os_error(libc::EINVAL),
    }
}

impl IdChannel {
    /// A listening id on `addr`, with its own event channel.
    pub fn listen(addr: SocketAddr, backlog: i32) -> Result<IdChannel> {
        let channel = EventChannel::new()?;
        let id = CmId::create(&channel)?;
        let me = IdChannel { id, channel };
        me.id.bind(addr)?;
        me.id.listen(backlog)?;
        Ok(me)
    }

    /// Give a freshly requested connection id its own event channel.
    pub fn adopt(id: CmId) -> Result<IdChannel> {
        let channel = EventChannel::new()?;
        id.migrate(&channel)?;
        Ok(IdChannel { id, channel })
    }
}

/// Watch descriptor `fd` for readability in tokio's reactor, through a
/// duplicate the watcher owns: the original's owner may close it at any
/// time without leaving the reactor with a dangling descriptor. Must be
/// called inside a tokio runtime.
pub fn watch(fd: RawFd) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor the caller's object keeps
    // open for the duration of this call; the result is checked.
    let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if dup < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `dup` is a fresh descriptor nobody else owns.
    let owned = unsafe { OwnedFd::from_raw_fd(dup) };
    // SAFETY: the AsyncFd owns `owned`, so the descriptor stays open and
    // the same for the AsyncFd's whole life.
    unsafe { AsyncFd::register_with_interest(owned, Interest::READABLE) }
        .map_err(|e| e.into_parts().1)
}
