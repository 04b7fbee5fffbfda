//! The message transport (iSER, RFC 7145): every iSCSI control-type PDU
//! travels alone in an RDMA Send Message behind a 28-byte iSER header, with
//! no digests and no markers (§7.2). Data-In never goes out as PDUs: the
//! driver RDMA-Writes it into the initiator's read buffer, then Sends the
//! SCSI Response (§7.3.5). Solicited Data-Out is never requested with R2T
//! PDUs: the driver RDMA-Reads it from the initiator's write buffer
//! (§7.3.6), with at most [`IserParams::read_depth`] Reads outstanding on
//! the connection (§8.2). Immediate and unsolicited data still arrive in
//! Sends and take the same path as on TCP.
//!
//! The iSCSI layer above is unchanged: a "virtual" R2T still has a Target
//! Transfer Tag, an offset and a length, bounded by MaxBurstLength and
//! MaxOutstandingR2T; it just becomes an [`RdmaRead`] instead of a PDU.
//!
//! A response that ends a task (a failed write's SCSI Response, the TMF
//! Response of an abort, the Logout Response) waits until that task's
//! RDMA Reads have finished: the initiator may invalidate or reuse the
//! buffer as soon as it sees the response, and a Read that then hits it
//! would fail the whole connection.
//!
//! This module holds the types an iSER driver sees and the RDMA wire state
//! ([`RdmaWire`]: output queue, Read slots, waiting writes, fences), and
//! knows nothing of the connection; the connection's iSER operations are
//! in `conn/iser_ops.rs`.

use std::collections::{HashMap, HashSet, VecDeque};

use bytes::Bytes;
use rustgt_scsi::BufStorage;
use rustgt_scsi::Status;

use super::ending::Ending;
use crate::iser::{ControlHeader, ISER_HEADER_LEN};
use crate::pdu::{Reply, TmfResult, BHS_LEN};
use crate::task::ReadDest;

/// What the RDMA connection manager agreed, as the core needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IserParams {
    /// RDMA Reads the target may have outstanding on the connection: the
    /// initiator depth agreed when the connection was accepted (the
    /// initiator's responder resources), lowered by an iSER Hello's IRD.
    /// At least 1.
    pub read_depth: u32,
    /// Longest single RDMA Read or Write the driver takes (the size of its
    /// registered buffers). At least 512.
    pub max_rdma_len: u32,
    /// Both ends agreed to Send with Invalidate: a SCSI Response may retire
    /// the initiator's STag of its command.
    pub remote_invalidate: bool,
}

impl Default for IserParams {
    fn default() -> Self {
        IserParams {
            read_depth: 1,
            max_rdma_len: 256 << 10,
            remote_invalidate: false,
        }
    }
}

/// One unit of work for an iSER driver. Post them in the order
/// [`Connection::poll_op`](crate::Connection::poll_op) returns them: a command's RDMA Writes come
/// before the Send of its SCSI Response, and a reliable connection places
/// them in that order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IserOp {
    /// Post an RDMA Send (a PDU, a HelloReply).
    Send(IserSend),
    /// Post an RDMA Write of Data-In.
    Write(RdmaWrite),
    /// Post an RDMA Read of Data-Out.
    Read(RdmaRead),
}

/// Send `msg` (an iSER header and what follows it) as one RDMA Send
/// Message; with `invalidate`, as Send with Invalidate of that STag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IserSend {
    /// The whole message: iSER header, then BHS, AHS and data segment
    /// (no digests), or a HelloReply.
    pub msg: Bytes,
    /// The initiator's STag to invalidate with the Send (the SCSI
    /// Response of a command that advertised one buffer, when both sides
    /// agreed to Send with Invalidate).
    pub invalidate: Option<u32>,
}

/// RDMA Write `data` to the initiator at `remote_addr` under `stag`: Data-In
/// of task `itt`. Nothing comes back to the core.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaWrite {
    /// Initiator Task Tag of the read command.
    pub itt: u32,
    /// The initiator's Read STag from the command's iSER header.
    pub stag: u32,
    /// Where in the initiator's buffer: its Read Base Offset plus the
    /// data's offset in the command's Data-In.
    pub remote_addr: u64,
    /// The bytes to write.
    pub data: Bytes,
    /// The pooled buffer `data` is a slice of (the command's `data_in`),
    /// which lives at least as long as `data`: a driver that registered it
    /// with its device sends `data` from where it is, without a copy.
    /// None when the data is not in a pooled buffer.
    pub storage: Option<BufStorage>,
}

/// RDMA Read `len` bytes from the initiator at `remote_addr` under `stag`:
/// Data-Out of task `itt` at buffer offset `offset`.
///
/// With a `dest`, the Read may land straight in the write's buffer: post
/// it into `dest` (registered), hold the `RdmaRead` until its completion
/// (or the flush or destruction of the queue pair), then hand it back with
/// [`Connection::read_done`](crate::Connection::read_done). Otherwise (no `dest`, or it cannot be
/// registered) take the `dest` out and drop it *before* posting, read into
/// a buffer of the driver's, and hand the bytes back with
/// [`Connection::data_arrived`](crate::Connection::data_arrived)`(itt, ttt, bytes)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaRead {
    /// Initiator Task Tag of the write command.
    pub itt: u32,
    /// The target's transfer tag for this Read, as for an R2T; hand it back
    /// with the data.
    pub ttt: u32,
    /// Offset of the data in the command's Data-Out buffer, bytes.
    pub offset: u32,
    /// Bytes to read.
    pub len: u32,
    /// The initiator's Write STag from the command's iSER header.
    pub stag: u32,
    /// Where in the initiator's buffer: its Write Base Offset, which is the
    /// first solicited byte (unsolicited data is not in that buffer), plus
    /// `offset` less the unsolicited bytes.
    pub remote_addr: u64,
    /// Where the data may land without a copy (exactly `len` bytes).
    pub dest: Option<ReadDest>,
}

/// How an RDMA Read came back.
#[derive(Debug, Clone, Copy)]
pub(super) enum ReadAnswer<'a> {
    /// Into the driver's buffer: these bytes.
    Copied(&'a [u8]),
    /// Into the Read's destination: this many bytes.
    Placed { placed: u32, had_dest: bool },
}

/// Output queue and RDMA Read accounting of a message connection.
#[derive(Debug)]
pub(super) struct RdmaWire {
    params: IserParams,
    ops: VecDeque<IserOp>,
    /// RDMA Reads handed to the driver and not yet answered: TTT -> ITT.
    reads: HashMap<u32, u32>,
    /// Writes that wait for a free Read slot, served round-robin.
    waiting: VecDeque<u32>,
    /// Responses held until the Reads they name finish, in order.
    fences: VecDeque<Fence>,
    /// Reads each pending task-management request waits for (the tasks it
    /// killed); its response comes later, from the SCSI core.
    tmf_fences: HashMap<u32, HashSet<u32>>,
}

/// A response to send once some RDMA Reads have finished.
#[derive(Debug)]
pub(super) enum Deferred {
    Status {
        end: Ending,
        status: Status,
        sense: Vec<u8>,
    },
    Tmf {
        itt: u32,
        result: TmfResult,
        immediate: bool,
    },
}

#[derive(Debug)]
struct Fence {
    /// TTTs of the Reads still outstanding.
    reads: HashSet<u32>,
    then: Deferred,
}

impl RdmaWire {
    pub(super) fn new(params: IserParams) -> Self {
        RdmaWire {
            params: IserParams {
                read_depth: params.read_depth.max(1),
                max_rdma_len: params.max_rdma_len.max(512),
                remote_invalidate: params.remote_invalidate,
            },
            ops: VecDeque::new(),
            reads: HashMap::new(),
            waiting: VecDeque::new(),
            fences: VecDeque::new(),
            tmf_fences: HashMap::new(),
        }
    }

    /// A PDU as an iSER control-type message: header without STags, then
    /// the PDU with its padding and no digests.
    pub(super) fn push_pdu(&mut self, reply: &Reply, invalidate: Option<u32>) {
        let mut msg = Vec::with_capacity(ISER_HEADER_LEN + BHS_LEN + 64);
        msg.extend_from_slice(&ControlHeader::default().encode());
        reply.encode_into(&mut msg, false, false);
        self.push_send(msg, invalidate);
    }

    pub(super) fn push_send(&mut self, msg: Vec<u8>, invalidate: Option<u32>) {
        self.ops.push_back(IserOp::Send(IserSend {
            msg: Bytes::from(msg),
            invalidate,
        }));
    }

    pub(super) fn pop(&mut self) -> Option<IserOp> {
        self.ops.pop_front()
    }

    pub(super) fn read_slot_free(&self) -> bool {
        self.reads.len() < self.params.read_depth as usize
    }

    pub(super) fn wait_for_read_slot(&mut self, itt: u32) {
        if !self.waiting.contains(&itt) {
            self.waiting.push_back(itt);
        }
    }

    /// What the connection manager agreed (read depth as lowered by Hello).
    pub(super) fn params(&self) -> IserParams {
        self.params
    }

    /// The RDMA Reads outstanding at once, as an iSER Hello lowered it.
    pub(super) fn set_read_depth(&mut self, depth: u32) {
        self.params.read_depth = depth.max(1);
    }

    /// An RDMA Write of Data-In to post.
    pub(super) fn push_write(&mut self, write: RdmaWrite) {
        self.ops.push_back(IserOp::Write(write));
    }

    /// An RDMA Read to post; its slot is taken until it is answered.
    pub(super) fn post_read(&mut self, read: RdmaRead) {
        self.reads.insert(read.ttt, read.itt);
        self.ops.push_back(IserOp::Read(read));
    }

    /// Whether Read `ttt` of task `itt` is outstanding; if so it is no
    /// longer, and its slot is free.
    pub(super) fn answer_read(&mut self, itt: u32, ttt: u32) -> bool {
        if self.reads.get(&ttt) != Some(&itt) {
            return false;
        }
        self.reads.remove(&ttt);
        true
    }

    /// Read slots free now.
    pub(super) fn free_read_slots(&self) -> usize {
        (self.params.read_depth as usize).saturating_sub(self.reads.len())
    }

    /// TTTs of the Reads outstanding for these tasks.
    pub(super) fn reads_for(&self, itts: &[u32]) -> HashSet<u32> {
        self.reads
            .iter()
            .filter(|(_, itt)| itts.contains(itt))
            .map(|(ttt, _)| *ttt)
            .collect()
    }

    /// No Read is outstanding.
    pub(super) fn reads_idle(&self) -> bool {
        self.reads.is_empty()
    }

    /// The next write waiting for a Read slot, if a slot is free.
    pub(super) fn next_waiting(&mut self) -> Option<u32> {
        if !self.read_slot_free() {
            return None;
        }
        self.waiting.pop_front()
    }

    /// Holds `then` until the Reads `reads` (not empty) have finished.
    pub(super) fn hold(&mut self, reads: HashSet<u32>, then: Deferred) {
        self.fences.push_back(Fence { reads, then });
    }

    /// A task-management request's response, whenever it comes, waits for
    /// these Reads.
    pub(super) fn fence_tmf(&mut self, tmf_itt: u32, reads: HashSet<u32>) {
        if !reads.is_empty() {
            self.tmf_fences.insert(tmf_itt, reads);
        }
    }

    /// The Reads a task-management response must still wait for.
    pub(super) fn take_tmf_fence(&mut self, tmf_itt: u32) -> HashSet<u32> {
        self.tmf_fences.remove(&tmf_itt).unwrap_or_default()
    }

    /// Read `ttt` finished: the responses no longer held, in the order
    /// they were held.
    pub(super) fn read_finished(&mut self, ttt: u32) -> Vec<Deferred> {
        for reads in self.tmf_fences.values_mut() {
            reads.remove(&ttt);
        }
        self.tmf_fences.retain(|_, reads| !reads.is_empty());
        for f in self.fences.iter_mut() {
            f.reads.remove(&ttt);
        }
        let mut ready = Vec::new();
        while self.fences.front().is_some_and(|f| f.reads.is_empty()) {
            if let Some(f) = self.fences.pop_front() {
                ready.push(f.then);
            }
        }
        ready
    }
}
