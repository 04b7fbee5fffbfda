//! The verbs objects of one connection and the work requests on them.

use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::ptr::{self, NonNull};

use bytes::Bytes;
use rustgt_backstore::BufStorage;
use rustgt_iscsi::ReadDest;

use rdma_sys::*;

use super::cm::{CmId, EventChannel};
use super::mem::{Pd, PdRegs, Region};
use super::sys::{check, check_errno, invalid, os_err, set_nonblocking, Result, VerbsError};
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
        self.regs.lkey_for_range(&self.pd, storage, addr, len)
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
