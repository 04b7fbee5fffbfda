//! The connection's iSER-specific operations (RFC 7145): taking in Send
//! Messages (iSER Hello, control-type PDUs framed by the message length),
//! moving solicited Data-Out by RDMA Read and Data-In by RDMA Write, and
//! holding the responses that end a task until its Reads have finished.
//! The RDMA wire state they work on, and the types an iSER driver sees,
//! are in [`super::rdma`].

use std::collections::HashSet;
use std::time::Instant;

use bytes::Bytes;
use rustgt_scsi::{Response, Status};

use super::ending::SeqError;
use super::rdma::{Deferred, IserOp, IserParams, RdmaRead, RdmaWire, RdmaWrite, ReadAnswer};
use super::{Connection, Wire};
use crate::iser::{ControlHeader, IserMessage};
use crate::pdu::bhs::Bhs;
use crate::pdu::{padded_len, Reply, ScsiCommand, ScsiResponse, BHS_LEN};
use crate::refusal::PduRefusal;
use crate::task::{residual_bits, InFlight, OpenR2t};

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
            Wire::Rdma(w) => Some(w.params()),
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
        self.clock = self.clock.max(now);
        match IserMessage::parse(msg) {
            Ok(IserMessage::Control { header, pdu }) => self.handle_iser_pdu(header, pdu, now),
            Ok(IserMessage::Hello(hello)) => {
                // RFC 7145 §5.1.3: answer with our version and how many RDMA
                // Reads we will have outstanding; the initiator's IRD bounds them.
                let Wire::Rdma(w) = &mut self.wire else {
                    return;
                };
                let ord = u16::try_from(w.params().read_depth).unwrap_or(u16::MAX);
                let reply = hello.reply(ord);
                w.set_read_depth(u32::from(reply.ord));
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
        if !w.answer_read(itt, ttt) {
            tracing::warn!(itt, ttt, "RDMA Read answer for no outstanding Read");
            return;
        }
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
            Wire::Rdma(w) => w.reads_for(itts),
            Wire::Stream(_) => HashSet::new(),
        }
    }

    /// No RDMA Read is outstanding (always true on TCP).
    pub(super) fn reads_idle(&self) -> bool {
        match &self.wire {
            Wire::Rdma(w) => w.reads_idle(),
            Wire::Stream(_) => true,
        }
    }

    /// Send `then` once the Reads `reads` have finished; now if none is
    /// outstanding.
    pub(super) fn after_reads(&mut self, reads: HashSet<u32>, then: Deferred) {
        match &mut self.wire {
            Wire::Rdma(w) if !reads.is_empty() => w.hold(reads, then),
            _ => self.run_deferred(then),
        }
    }

    /// A task-management request killed tasks with these Reads outstanding:
    /// its response, whenever it comes, waits for them.
    pub(super) fn fence_tmf(&mut self, tmf_itt: u32, reads: HashSet<u32>) {
        if let Wire::Rdma(w) = &mut self.wire {
            w.fence_tmf(tmf_itt, reads);
        }
    }

    /// The Reads a task-management response must still wait for.
    pub(super) fn take_tmf_fence(&mut self, tmf_itt: u32) -> HashSet<u32> {
        match &mut self.wire {
            Wire::Rdma(w) => w.take_tmf_fence(tmf_itt),
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
        for d in w.read_finished(ttt) {
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
            let max_len = max_burst.min(w.params().max_rdma_len).max(1);
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
            let slots = w.free_read_slots();
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
                w.post_read(read);
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
            let Some(itt) = w.next_waiting() else {
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
                let step = w.params().max_rdma_len as usize;
                let mut offset = 0usize;
                while offset < data.len() {
                    let end = data.len().min(offset + step);
                    w.push_write(RdmaWrite {
                        itt,
                        stag: buf.stag,
                        remote_addr: buf.base.wrapping_add(offset as u64),
                        data: data.slice(offset..end),
                        storage,
                    });
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
            .filter(|_| w.params().remote_invalidate);
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
            Wire::Rdma(w) if w.params().remote_invalidate => remote.invalidate_stag(),
            _ => None,
        }
    }
}
