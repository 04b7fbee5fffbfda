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

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Instant;

use bytes::Bytes;
use rustgt_scsi::BufStorage;
use rustgt_scsi::{Response, Status};

use super::ending::{Ending, SeqError};
use super::{Connection, Wire};
use crate::iser::{ControlHeader, IserMessage, ISER_HEADER_LEN};
use crate::pdu::bhs::Bhs;
use crate::pdu::{padded_len, Reply, ScsiCommand, ScsiResponse, TmfResult, BHS_LEN};
use crate::refusal::PduRefusal;
use crate::task::{residual_bits, InFlight, OpenR2t, ReadDest};

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
/// [`Connection::poll_op`] returns them: a command's RDMA Writes come
/// before the Send of its SCSI Response, and a reliable connection places
/// them in that order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IserOp {
    Send(IserSend),
    Write(RdmaWrite),
    Read(RdmaRead),
}

/// Send `msg` (an iSER header and what follows it) as one RDMA Send
/// Message; with `invalidate`, as Send with Invalidate of that STag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IserSend {
    pub msg: Bytes,
    pub invalidate: Option<u32>,
}

/// RDMA Write `data` to the initiator at `remote_addr` under `stag`: Data-In
/// of task `itt`. Nothing comes back to the core.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaWrite {
    pub itt: u32,
    pub stag: u32,
    pub remote_addr: u64,
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
/// [`Connection::read_done`]. Otherwise (no `dest`, or it cannot be
/// registered) take the `dest` out and drop it *before* posting, read into
/// a buffer of the driver's, and hand the bytes back with
/// [`Connection::data_arrived`]`(itt, ttt, bytes)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaRead {
    pub itt: u32,
    pub ttt: u32,
    pub offset: u32,
    pub len: u32,
    pub stag: u32,
    pub remote_addr: u64,
    /// Where the data may land without a copy (exactly `len` bytes).
    pub dest: Option<ReadDest>,
}

/// How an RDMA Read came back.
#[derive(Debug, Clone, Copy)]
enum ReadAnswer<'a> {
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

    fn push_send(&mut self, msg: Vec<u8>, invalidate: Option<u32>) {
        self.ops.push_back(IserOp::Send(IserSend {
            msg: Bytes::from(msg),
            invalidate,
        }));
    }

    pub(super) fn pop(&mut self) -> Option<IserOp> {
        self.ops.pop_front()
    }

    fn read_slot_free(&self) -> bool {
        self.reads.len() < self.params.read_depth as usize
    }

    fn wait_for_read_slot(&mut self, itt: u32) {
        if !self.waiting.contains(&itt) {
            self.waiting.push_back(itt);
        }
    }
}

impl Connection {
    /// A connection for an iSER driver, with what its connection manager
    /// agreed. `setup.transport` is taken to be iSER.
    pub fn new_iser(
        cfg: std::sync::Arc<crate::config::PortalConfig>,
        sessions: std::sync::Arc<std::sync::Mutex<crate::session::SessionTable>>,
        mut setup: super::ConnectionSetup,
        params: IserParams,
        now: Instant,
    ) -> Self {
        setup.transport = crate::negotiate::Transport::Iser;
        let mut c = Connection::new(cfg, sessions, setup, now);
        c.wire = Wire::Rdma(RdmaWire::new(params));
        c
    }

    /// The agreed RDMA parameters, on an iSER connection.
    pub fn iser_params(&self) -> Option<IserParams> {
        match &self.wire {
            Wire::Rdma(w) => Some(w.params),
            Wire::Stream(_) => None,
        }
    }

    /// Feed one received RDMA Send Message (iSER header included). On a
    /// byte-stream connection this is a driver error and closes it.
    pub fn handle_message(&mut self, msg: &[u8], now: Instant) {
        if self.is_closing() {
            return;
        }
        if !matches!(self.wire, Wire::Rdma(_)) {
            tracing::error!("handle_message on a byte-stream transport; closing");
            self.fail();
            return;
        }
        self.last_rx = Some(now);
        match IserMessage::parse(msg) {
            Ok(IserMessage::Control { header, pdu }) => self.handle_iser_pdu(header, pdu, now),
            Ok(IserMessage::Hello(hello)) => {
                // RFC 7145 §5.1.3: answer with our version and how many RDMA
                // Reads we will have outstanding; the initiator's IRD bounds them.
                let Wire::Rdma(w) = &mut self.wire else {
                    return;
                };
                let ord = u16::try_from(w.params.read_depth).unwrap_or(u16::MAX);
                let reply = hello.reply(ord);
                w.params.read_depth = u32::from(reply.ord).max(1);
                w.push_send(reply.encode().to_vec(), None);
                if reply.reject {
                    tracing::warn!(?hello, "no common iSER version");
                    self.set_closing();
                }
            }
            Ok(IserMessage::HelloReply(_)) => {
                tracing::warn!("HelloReply sent to a target; closing");
                self.fail();
            }
            Err(e) => {
                // Without a header the message cannot even be rejected.
                tracing::warn!(error = %e, "unreadable iSER message; closing");
                self.fail();
            }
        }
    }

    /// Next piece of work for an iSER driver, in posting order. Always
    /// `None` on a byte-stream connection (use `poll_transmit`).
    pub fn poll_op(&mut self) -> Option<IserOp> {
        match &mut self.wire {
            Wire::Rdma(w) => w.pop(),
            Wire::Stream(_) => None,
        }
    }

    /// An [`RdmaRead`] finished into a buffer of the driver's: `data` is
    /// what it read (the Read's `dest` was dropped before it was posted).
    /// Stale answers (the task was aborted meanwhile) only free the Read
    /// slot.
    pub fn data_arrived(&mut self, itt: u32, ttt: u32, data: &[u8]) {
        self.read_answered(itt, ttt, ReadAnswer::Copied(data));
    }

    /// An [`RdmaRead`] posted into its `dest` finished: `placed` bytes (the
    /// completion's byte count) landed there. The Read and its `dest` come
    /// back, so the write's buffer is the task's again once its last Read
    /// is back. A Read without a `dest`, or a count other than its length,
    /// fails the write.
    pub fn read_done(&mut self, read: RdmaRead, placed: u32) {
        let RdmaRead { itt, ttt, dest, .. } = read;
        let had_dest = dest.is_some();
        // The range is no longer the Read's: give the reference back first.
        drop(dest);
        self.read_answered(itt, ttt, ReadAnswer::Placed { placed, had_dest });
    }

    fn read_answered(&mut self, itt: u32, ttt: u32, answer: ReadAnswer<'_>) {
        let Wire::Rdma(w) = &mut self.wire else {
            return;
        };
        if w.reads.get(&ttt) != Some(&itt) {
            tracing::warn!(itt, ttt, "RDMA Read answer for no outstanding Read");
            return;
        }
        w.reads.remove(&ttt);
        if !self.is_closing() {
            self.take_read_data(itt, ttt, answer);
        }
        self.serve_waiting_reads();
        self.read_finished(ttt);
        self.maybe_finish_logout();
    }

    /// TTTs of the RDMA Reads outstanding for these tasks (none on TCP).
    pub(super) fn reads_for(&self, itts: &[u32]) -> HashSet<u32> {
        match &self.wire {
            Wire::Rdma(w) => w
                .reads
                .iter()
                .filter(|(_, itt)| itts.contains(itt))
                .map(|(ttt, _)| *ttt)
                .collect(),
            Wire::Stream(_) => HashSet::new(),
        }
    }

    /// No RDMA Read is outstanding (always true on TCP).
    pub(super) fn reads_idle(&self) -> bool {
        match &self.wire {
            Wire::Rdma(w) => w.reads.is_empty(),
            Wire::Stream(_) => true,
        }
    }

    /// Send `then` once the Reads `reads` have finished; now if none is
    /// outstanding.
    pub(super) fn after_reads(&mut self, reads: HashSet<u32>, then: Deferred) {
        match &mut self.wire {
            Wire::Rdma(w) if !reads.is_empty() => w.fences.push_back(Fence { reads, then }),
            _ => self.run_deferred(then),
        }
    }

    /// A task-management request killed tasks with these Reads outstanding:
    /// its response, whenever it comes, waits for them.
    pub(super) fn fence_tmf(&mut self, tmf_itt: u32, reads: HashSet<u32>) {
        if let Wire::Rdma(w) = &mut self.wire {
            if !reads.is_empty() {
                w.tmf_fences.insert(tmf_itt, reads);
            }
        }
    }

    /// The Reads a task-management response must still wait for.
    pub(super) fn take_tmf_fence(&mut self, tmf_itt: u32) -> HashSet<u32> {
        match &mut self.wire {
            Wire::Rdma(w) => w.tmf_fences.remove(&tmf_itt).unwrap_or_default(),
            Wire::Stream(_) => HashSet::new(),
        }
    }

    fn run_deferred(&mut self, d: Deferred) {
        match d {
            Deferred::Status { end, status, sense } => self.send_status(end, status, sense),
            Deferred::Tmf {
                itt,
                result,
                immediate,
            } => self.send_tmf_response(itt, result, immediate),
        }
    }

    /// Release what waited for Read `ttt`, in the order it was held.
    fn read_finished(&mut self, ttt: u32) {
        let Wire::Rdma(w) = &mut self.wire else {
            return;
        };
        for reads in w.tmf_fences.values_mut() {
            reads.remove(&ttt);
        }
        w.tmf_fences.retain(|_, reads| !reads.is_empty());
        for f in w.fences.iter_mut() {
            f.reads.remove(&ttt);
        }
        let mut ready = Vec::new();
        while w.fences.front().is_some_and(|f| f.reads.is_empty()) {
            if let Some(f) = w.fences.pop_front() {
                ready.push(f.then);
            }
        }
        for d in ready {
            self.run_deferred(d);
        }
    }

    /// One control-type PDU from a Send Message: the same checks as on a
    /// byte stream, except that the message length frames the PDU.
    fn handle_iser_pdu(&mut self, remote: ControlHeader, pdu: &[u8], now: Instant) {
        let Some(bhs_bytes) = pdu.get(..BHS_LEN) else {
            tracing::warn!(len = pdu.len(), "iSER message shorter than a BHS; closing");
            self.fail();
            return;
        };
        let (Ok(bhs), Ok(bhs_arr)) = (
            Bhs::new_checked(bhs_bytes),
            <[u8; BHS_LEN]>::try_from(bhs_bytes),
        ) else {
            self.fail();
            return;
        };
        let ahs_len = bhs.total_ahs_len_bytes();
        let dsl = bhs.data_segment_len() as usize;
        if self.vet_bhs(bhs.opcode(), dsl as u32, &bhs_arr).is_err() {
            return;
        }
        let ahs = pdu.get(BHS_LEN..BHS_LEN + ahs_len);
        let data_area = pdu.get(BHS_LEN + ahs_len..).unwrap_or_default();
        // No digests; the data segment may or may not carry its padding.
        let framed = ahs.is_some() && (dsl..=padded_len(dsl)).contains(&data_area.len());
        let Ok(hdr) = self.vet_header(&bhs_arr, ahs.unwrap_or_default(), dsl as u32) else {
            return;
        };
        if !framed {
            tracing::warn!(
                len = pdu.len(),
                ahs_len,
                dsl,
                "iSER message length disagrees with its PDU"
            );
            if self.in_login() {
                self.fail();
            } else {
                self.reject(PduRefusal::IserLength, &bhs_arr);
                self.after_precheck_reject(&hdr);
            }
            return;
        }
        let data = data_area.get(..dsl).unwrap_or_default();
        self.dispatch(hdr, data, &bhs_arr, remote, now);
    }

    /// A command's advertised buffers must cover what RDMA has to move: a
    /// read buffer for Data-In, a write buffer for data beyond what may come
    /// unsolicited (RFC 7145 §7.3.1). Checked before the command runs.
    pub(super) fn missing_buffer(
        &self,
        c: &ScsiCommand,
        immediate: u32,
        remote: &ControlHeader,
    ) -> bool {
        let Some(params) = self.session.as_ref().map(|s| &s.params) else {
            return false;
        };
        let read_len = if c.read {
            c.bidi_read_len.unwrap_or(c.expected_data_len)
        } else {
            0
        };
        if read_len > 0 && remote.read.is_none() {
            return true;
        }
        if !c.write {
            return false;
        }
        let unsolicited = if !params.initial_r2t && !c.final_bit {
            params.first_burst_length.max(immediate)
        } else {
            immediate
        };
        c.expected_data_len > unsolicited && remote.write.is_none()
    }

    /// Ask for the next bursts of a write with RDMA Reads: at most
    /// MaxOutstandingR2T per task and `read_depth` on the connection, each
    /// at most MaxBurstLength and the driver's buffer size.
    pub(super) fn issue_reads(&mut self, itt: u32, max_burst: u32, max_r2t: u32) {
        loop {
            let Wire::Rdma(w) = &mut self.wire else {
                return;
            };
            let max_len = max_burst.min(w.params.max_rdma_len).max(1);
            let Some(task) = self.writes.get_mut(&itt) else {
                return;
            };
            if task.next_r2t_offset < task.received() {
                task.next_r2t_offset = task.received();
            }
            if task.r2ts.len() as u32 >= max_r2t || task.next_r2t_offset >= task.edtl() {
                return;
            }
            if !w.read_slot_free() {
                w.wait_for_read_slot(itt);
                return;
            }
            // Room for every Read this round may post, before the first is
            // posted: the storage cannot move while Reads hold it. Only what
            // the target solicits now, never the EDTL on the initiator's word.
            let slots = (w.params.read_depth as usize).saturating_sub(w.reads.len());
            let per_task = (max_r2t as usize).saturating_sub(task.r2ts.len());
            let round = u64::from(max_len) * slots.min(per_task) as u64;
            let round_end = (u64::from(task.next_r2t_offset) + round).min(u64::from(task.edtl()));
            let edtl = task.edtl() as usize;
            // False while earlier Reads hold it: then the Reads past its
            // room take the copy path.
            let _ = task.buf.reserve_to(round_end as usize, edtl);
            let Some(buf) = task.remote.write else {
                let task = self.writes.remove(&itt);
                if let Some(task) = task {
                    self.fail_write(task, SeqError::MissingBuffer);
                }
                return;
            };
            // The write buffer starts at the first solicited byte (what
            // Linux's initiator and target do): unsolicited data is not in it.
            let offset = task.next_r2t_offset;
            let base = *task.solicited_base.get_or_insert(offset);
            let len = max_len.min(task.edtl() - offset);
            let ttt = self.alloc_ttt();
            let Some(task) = self.writes.get_mut(&itt) else {
                return;
            };
            let dest = task.buf.dest(offset as usize, len as usize);
            task.r2ts.push_back(OpenR2t {
                ttt,
                offset,
                len,
                received: 0,
                next_data_sn: 0,
            });
            task.next_r2t_offset += len;
            let read = RdmaRead {
                itt,
                ttt,
                offset,
                len,
                stag: buf.stag,
                remote_addr: buf
                    .base
                    .wrapping_add(u64::from(offset.saturating_sub(base))),
                dest,
            };
            if let Wire::Rdma(w) = &mut self.wire {
                w.reads.insert(ttt, itt);
                w.ops.push_back(IserOp::Read(read));
            }
        }
    }

    /// Store what one RDMA Read brought. Reads of a task complete in the
    /// order they were posted (one queue pair), so the data must continue
    /// the buffer exactly.
    fn take_read_data(&mut self, itt: u32, ttt: u32, answer: ReadAnswer<'_>) {
        let Some(task) = self.writes.get_mut(&itt) else {
            return;
        };
        let len = match answer {
            ReadAnswer::Copied(data) => Some(data.len()),
            ReadAnswer::Placed { placed, had_dest } => Some(placed as usize).filter(|_| had_dest),
        };
        let at = task.r2ts.iter().position(|r| r.ttt == ttt);
        let fits = at
            .and_then(|i| task.r2ts.get(i))
            .is_some_and(|r| r.offset == task.received() && len == Some(r.len as usize));
        let (Some(at), true) = (at, fits) else {
            tracing::warn!(itt, ttt, len, "RDMA Read data out of place");
            if let Some(task) = self.writes.remove(&itt) {
                self.fail_write(task, SeqError::Offset);
            }
            return;
        };
        let edtl = task.edtl() as usize;
        match answer {
            ReadAnswer::Copied(data) => task.buf.append(data, edtl),
            ReadAnswer::Placed { placed, .. } => task.buf.placed(placed as usize),
        }
        task.r2ts.remove(at);
        if task.complete() {
            self.advance_write(itt);
        } else if let Wire::Rdma(w) = &mut self.wire {
            w.wait_for_read_slot(itt);
        }
    }

    /// Hand free Read slots to the writes that wait, one round each.
    fn serve_waiting_reads(&mut self) {
        loop {
            let Wire::Rdma(w) = &mut self.wire else {
                return;
            };
            if !w.read_slot_free() {
                return;
            }
            let Some(itt) = w.waiting.pop_front() else {
                return;
            };
            self.advance_write(itt);
        }
    }

    /// Data-In by RDMA Write into the command's read buffer, then the SCSI
    /// Response in a Send (never status in a Data-In: there is none). The
    /// response may invalidate the command's STag.
    pub(super) fn complete_rdma(&mut self, itt: u32, task: &InFlight, resp: Response) {
        let (over, under, residual) = residual_bits(resp.residual);
        let Wire::Rdma(w) = &mut self.wire else {
            return;
        };
        let storage = resp.data_in.storage();
        let data = Bytes::from_owner(resp.data_in);
        let mut status = resp.status;
        let mut sense = resp.sense;
        match task.remote.read {
            _ if data.is_empty() => {}
            Some(buf) => {
                let step = w.params.max_rdma_len as usize;
                let mut offset = 0usize;
                while offset < data.len() {
                    let end = data.len().min(offset + step);
                    w.ops.push_back(IserOp::Write(RdmaWrite {
                        itt,
                        stag: buf.stag,
                        remote_addr: buf.base.wrapping_add(offset as u64),
                        data: data.slice(offset..end),
                        storage,
                    }));
                    offset = end;
                }
            }
            None => {
                // Refused at arrival; only a SCSI core over-delivering gets here.
                tracing::error!(itt, "Data-In for a command with no read buffer");
                status = Status::CHECK_CONDITION;
                sense = SeqError::MissingBuffer.sense();
            }
        }
        let invalidate = task
            .remote
            .invalidate_stag()
            .filter(|_| w.params.remote_invalidate);
        let r = ScsiResponse {
            bidi_overflow: false,
            bidi_underflow: false,
            overflow: over,
            underflow: under,
            response: 0,
            status: status.0,
            itt,
            snack_tag: 0,
            stat_sn: self.next_stat_sn(),
            exp_cmd_sn: self.exp_cmd_sn,
            max_cmd_sn: self.max_cmd_sn,
            // No Data-In or R2T PDU went on the wire.
            exp_data_sn: 0,
            bidi_residual: 0,
            residual,
            sense,
        };
        self.send_reply(Reply::ScsiResponse(r), invalidate);
    }

    /// The STag a SCSI Response for this command may invalidate, if both
    /// ends agreed to Send with Invalidate.
    pub(super) fn invalidate_for(&self, remote: &ControlHeader) -> Option<u32> {
        match &self.wire {
            Wire::Rdma(w) if w.params.remote_invalidate => remote.invalidate_stag(),
            _ => None,
        }
    }
}
