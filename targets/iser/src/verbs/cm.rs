//! The connection manager: event channels and CM ids (librdmacm).

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;
use std::ptr::{self, NonNull};

use rdma_sys::*;

use crate::sizing::DeviceLimits;

use super::sys::{check, check_errno, os_err, set_nonblocking, would_block, Result, VerbsError};
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
    pub(super) id: NonNull<rdma_cm_id>,
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

    pub(super) fn verbs(&self) -> Result<NonNull<ibv_context>> {
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
