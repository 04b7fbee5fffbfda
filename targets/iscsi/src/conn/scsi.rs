//! SCSI commands and Data-Out (RFC 7143 §11.3, §11.7, §11.8): the CmdSN
//! and buffer checks of a command, collecting a write's immediate,
//! unsolicited and solicited data, handing whole commands to the SCSI core
//! and sending their responses, and failing a task the SCSI core never saw.

use std::collections::VecDeque;
use std::time::Instant;

use rustgt_scsi::sense::{Asc, SenseKey};
use rustgt_scsi::{Command, IoBuf, Response, Status, TaskAttr};

use super::ending::{fixed_sense, internal_failure, Ending, SeqError};
use super::rdma::Deferred;
use super::{Connection, Event, Wire};
use crate::budget::Grant;
use crate::iser::ControlHeader;
use crate::pdu::{
    decode_lun, DataOut, Reply, ScsiCommand, ScsiResponse, TaskAttribute, BHS_LEN, RESERVED_TAG,
};
use crate::task::{InFlight, WriteBuf, WriteTask};

use super::stream::SMALL_PAYLOAD;

/// The Data-In length a read command asks for.
fn read_len(c: &ScsiCommand) -> usize {
    c.bidi_read_len.unwrap_or(c.expected_data_len) as usize
}

impl Connection {
    pub(super) fn handle_scsi_command(
        &mut self,
        c: ScsiCommand,
        data: &[u8],
        remote: ControlHeader,
    ) {
        tracing::trace!(
            itt = c.itt,
            cmd_sn = c.cmd_sn,
            edtl = c.expected_data_len,
            opcode = c.cdb.first().copied().unwrap_or(0),
            immediate_data = data.len(),
            "SCSI command"
        );
        if !self.accept_cmd_sn(c.immediate, c.cmd_sn) {
            return;
        }
        if self.inflight.contains_key(&c.itt)
            || self.writes.contains_key(&c.itt)
            || self.reads_waiting.contains_key(&c.itt)
        {
            // ITT reuse while in flight: answer with a failure, keep the old task.
            tracing::warn!(itt = c.itt, "ITT already in use");
            self.retire(c.immediate);
            return;
        }
        let lun = decode_lun(c.lun);
        let immediate_len = u32::try_from(data.len()).unwrap_or(u32::MAX);
        if matches!(self.wire, Wire::Rdma(_)) && self.missing_buffer(&c, immediate_len, &remote) {
            // RDMA has nowhere to move the data: refuse before running it.
            tracing::warn!(itt = c.itt, ?remote, "command without the buffers it needs");
            let end = Ending::of_command(&c, &remote);
            self.send_status(
                end,
                Status::CHECK_CONDITION,
                SeqError::MissingBuffer.sense(),
            );
            return;
        }
        if c.write && c.expected_data_len > 0 {
            if c.expected_data_len > self.cfg.max_write_len {
                // Refuse without collecting data; unsolicited data is ignored.
                let sense = fixed_sense(SenseKey::ILLEGAL_REQUEST, Asc::INVALID_FIELD_IN_CDB);
                let end = Ending::of_command(&c, &remote);
                self.send_status(end, Status::CHECK_CONDITION, sense);
                return;
            }
            let (initial_r2t, first_burst) = match &self.session {
                Some(s) => (s.params.initial_r2t, s.params.first_burst_length),
                None => return,
            };
            let unsolicited_open = !c.final_bit && !initial_r2t;
            let edtl = u64::from(c.expected_data_len);
            // What the initiator may send unasked is counted at once and
            // never waited for; the rest is admitted whole or waits.
            let unasked = if unsolicited_open {
                u64::from(first_burst.max(immediate_len))
            } else {
                u64::from(immediate_len)
            }
            .min(edtl);
            let mut grant = self.account.grant();
            let admitted = if unasked >= edtl {
                self.account.force(&mut grant, edtl);
                true
            } else if self.budget_wait.is_empty() && self.account.admit(&mut grant, edtl) {
                true
            } else {
                self.account.force(&mut grant, unasked);
                false
            };
            let mut task = WriteTask {
                lun,
                buf: WriteBuf::default(),
                unsolicited_open,
                unsolicited_data_sn: 0,
                next_r2t_offset: 0,
                r2ts: VecDeque::new(),
                r2t_sn: 0,
                remote,
                solicited_base: None,
                grant,
                admitted,
                stalled_since: None,
                cmd: c,
            };
            let edtl = task.edtl() as usize;
            task.buf.append(data, edtl);
            if admitted && task.complete() {
                // All its data came with it: it runs now, without a stay
                // among the writes that collect data.
                self.run_write(task);
                return;
            }
            let itt = task.cmd.itt;
            self.writes.insert(itt, task);
            if !admitted {
                self.wait_for_budget(itt);
            }
            self.advance_write(itt);
        } else if c.read && matches!(self.wire, Wire::Stream(_)) && read_len(&c) > SMALL_PAYLOAD {
            // Its Data-In is held until the socket has taken it: room in
            // the budget first, or it waits (in arrival order, with the
            // writes) and runs when there is.
            let mut grant = self.account.grant();
            if self.budget_wait.is_empty() && self.account.admit(&mut grant, read_len(&c) as u64) {
                self.submit(c, lun, IoBuf::default(), 0, remote, Some(grant));
            } else {
                let itt = c.itt;
                self.reads_waiting.insert(itt, (c, lun, remote));
                self.wait_for_budget(itt);
            }
        } else {
            self.submit(c, lun, IoBuf::default(), 0, remote, None);
        }
    }

    /// After data arrived for a write: dispatch it when complete, or ask
    /// for more (R2T PDUs on TCP, RDMA Reads on iSER) once the unsolicited
    /// phase is over.
    pub(super) fn advance_write(&mut self, itt: u32) {
        let (max_burst, max_r2t) = match &self.session {
            Some(s) => (
                s.params.max_burst_length.max(512),
                s.params.max_outstanding_r2t.max(1),
            ),
            None => return,
        };
        let Some(task) = self.writes.get(&itt) else {
            return;
        };
        if task.complete() {
            if task.buf.lent() {
                // Every Read of it has answered, so only a driver still
                // holding a destination it reported gets here: the storage
                // stays with it, the write fails.
                tracing::error!(itt, "write complete while a Read still holds its buffer");
                if let Some(task) = self.writes.remove(&itt) {
                    self.fail_write_internally(task);
                }
                return;
            }
            if let Some(task) = self.writes.remove(&itt) {
                self.run_write(task);
            }
            return;
        }
        if task.unsolicited_open || !task.admitted {
            return;
        }
        match self.wire {
            Wire::Stream(_) => self.send_r2ts(itt, max_burst, max_r2t),
            Wire::Rdma(_) => self.issue_reads(itt, max_burst, max_r2t),
        }
    }

    /// A write whose data all arrived, none of it lent to an RDMA Read,
    /// goes to the SCSI core.
    fn run_write(&mut self, task: WriteTask) {
        let r2ts = task.r2t_sn;
        let (lun, remote, cmd, grant) = (task.lun, task.remote, task.cmd, task.grant);
        if let Some(data) = task.buf.into_data() {
            self.submit(cmd, lun, data, r2ts, remote, Some(grant));
        } else {
            // Unreachable: a caller either checked the buffer is not lent
            // or hands in one that never was (all data immediate). Should
            // it ever happen, write nothing rather than what may not have
            // landed, and end the command.
            tracing::error!(itt = cmd.itt, "write data still held by an RDMA Read");
            let end = Ending {
                itt: cmd.itt,
                immediate: cmd.immediate,
                r2ts,
                remote,
            };
            self.send_status(end, Status::CHECK_CONDITION, internal_failure());
        }
    }

    pub(super) fn handle_data_out(&mut self, d: DataOut, data: &[u8], bhs: &[u8; BHS_LEN]) {
        tracing::trace!(
            itt = d.itt,
            ttt = d.ttt,
            data_sn = d.data_sn,
            offset = d.buffer_offset,
            len = data.len(),
            final_bit = d.final_bit,
            "Data-Out"
        );
        let (first_burst, initial_r2t) = match &self.session {
            Some(s) => (s.params.first_burst_length, s.params.initial_r2t),
            None => return,
        };
        let Some(task) = self.writes.get_mut(&d.itt) else {
            // Data for a task we no longer collect for (failed or aborted).
            tracing::debug!(itt = d.itt, "Data-Out for unknown task ignored");
            return;
        };
        let len = u32::try_from(data.len()).unwrap_or(u32::MAX);
        let in_order = d.buffer_offset == task.received();
        let fits = task
            .received()
            .checked_add(len)
            .is_some_and(|e| e <= task.edtl());
        let check = if d.ttt == RESERVED_TAG {
            // Unsolicited data (§4.2.4.2): only with InitialR2T=No, within
            // FirstBurstLength, before the F bit.
            let within = task
                .received()
                .checked_add(len)
                .is_some_and(|e| e <= first_burst);
            if initial_r2t || !task.unsolicited_open || !within {
                Err(SeqError::UnexpectedUnsolicited)
            } else if d.data_sn != task.unsolicited_data_sn {
                Err(SeqError::DataSn)
            } else if !in_order {
                Err(SeqError::Offset)
            } else if !fits {
                Err(SeqError::TooMuch)
            } else {
                task.unsolicited_data_sn = task.unsolicited_data_sn.wrapping_add(1);
                if d.final_bit {
                    task.unsolicited_open = false;
                }
                Ok(())
            }
        } else if matches!(self.wire, Wire::Rdma(_)) {
            // iSER moves solicited data by RDMA Read only (RFC 7145 §7.3.4).
            Err(SeqError::UnknownTtt)
        } else {
            match task.r2ts.iter_mut().find(|r| r.ttt == d.ttt) {
                None => Err(SeqError::UnknownTtt),
                Some(r) if d.data_sn != r.next_data_sn => Err(SeqError::DataSn),
                Some(r) if !in_order || d.buffer_offset != r.offset + r.received => {
                    Err(SeqError::Offset)
                }
                Some(r) if !fits || r.received + len > r.len => Err(SeqError::TooMuch),
                Some(r) => {
                    r.received += len;
                    r.next_data_sn = r.next_data_sn.wrapping_add(1);
                    Ok(())
                }
            }
        };
        if let Err(e) = check {
            // ERL 0 cannot recover within the command: the task ends with
            // CHECK CONDITION and later Data-Out for it is ignored. The
            // connection stays up, so other tasks are unaffected.
            tracing::warn!(
                itt = d.itt,
                ttt = d.ttt,
                data_sn = d.data_sn,
                offset = d.buffer_offset,
                error = ?e,
                "bad Data-Out; failing the task"
            );
            let _ = bhs;
            if let Some(task) = self.writes.remove(&d.itt) {
                self.fail_write(task, e);
            }
            return;
        }
        let edtl = task.edtl() as usize;
        task.buf.append(data, edtl);
        task.r2ts.retain(|r| r.received < r.len);
        if d.ttt != RESERVED_TAG {
            // Progress on what was solicited: the Data-Out timer restarts.
            task.stalled_since = (!task.r2ts.is_empty()).then_some(self.clock);
        }
        self.advance_write(d.itt);
    }

    pub(super) fn submit(
        &mut self,
        c: ScsiCommand,
        lun: u64,
        data_out: IoBuf,
        r2t_count: u32,
        remote: ControlHeader,
        grant: Option<Grant>,
    ) {
        let Some(session) = &self.session else {
            return;
        };
        let attr = match c.attr {
            TaskAttribute::ORDERED => TaskAttr::Ordered,
            TaskAttribute::HEAD_OF_QUEUE => TaskAttr::HeadOfQueue,
            TaskAttribute::ACA => TaskAttr::Aca,
            _ => TaskAttr::Simple,
        };
        let data_in_len = if c.read {
            c.bidi_read_len.unwrap_or(c.expected_data_len)
        } else {
            0
        };
        let cmd = Command {
            nexus: session.nexus.clone(),
            // Through the initiator's LUN map, if it has one.
            lun: session.nexus.resolve_lun(lun),
            tag: u64::from(c.itt),
            cdb: c.cdb,
            attr,
            data_in_len: if c.write {
                c.bidi_read_len.unwrap_or(0)
            } else {
                data_in_len
            },
            data_out,
        };
        self.inflight.insert(
            c.itt,
            InFlight {
                lun: c.lun,
                immediate: c.immediate,
                r2t_count,
                remote,
                grant,
            },
        );
        self.events.push_back(Event::Command(cmd));
    }

    /// A SCSI command finished. Sends Data-In and status (RFC 7143 §11.4,
    /// §11.7; RFC 7145 §7.3.5 on iSER); an aborted task gets no response.
    pub fn complete(&mut self, resp: Response) {
        let Ok(itt) = u32::try_from(resp.tag) else {
            return;
        };
        let Some(mut task) = self.inflight.remove(&itt) else {
            return;
        };
        if self.is_closing() {
            return;
        }
        // A write's buffer is the SCSI core's no more: give its room back
        // before the window is judged and before waiting writes try again.
        // A read's room goes with its Data-In until the socket took it.
        let grant = task.grant.take().filter(|_| !resp.data_in.is_empty());
        self.retire(task.immediate);
        if !resp.aborted && self.session.is_some() {
            match self.wire {
                Wire::Stream(_) => self.complete_stream(itt, &task, resp, grant),
                Wire::Rdma(_) => self.complete_rdma(itt, &task, resp),
            }
        }
        if !self.budget_wait.is_empty() {
            self.pump_budget();
        }
        self.maybe_finish_logout();
    }

    /// Queue a write that the budget has no room for yet: it gets its
    /// first R2T (or RDMA Read) when [`Connection::pump_budget`] admits it.
    fn wait_for_budget(&mut self, itt: u32) {
        self.account.budget().count_wait();
        self.budget_wait.push_back(itt);
        self.account.set_waiting(true);
        if self.budget_retry.is_none() {
            self.budget_backoff = super::BUDGET_RETRY_MIN;
            self.budget_retry = Some(self.clock + self.budget_backoff);
        }
    }

    /// Admit waiting writes in arrival order while the budget has room,
    /// and start soliciting their data; try again later if some still wait.
    pub(super) fn pump_budget(&mut self) {
        while let Some(&itt) = self.budget_wait.front() {
            if let Some((c, _, _)) = self.reads_waiting.get(&itt) {
                let mut grant = self.account.grant();
                if !self.account.admit(&mut grant, read_len(c) as u64) {
                    break;
                }
                self.budget_wait.pop_front();
                if let Some((c, lun, remote)) = self.reads_waiting.remove(&itt) {
                    self.submit(c, lun, IoBuf::default(), 0, remote, Some(grant));
                }
                continue;
            }
            let Some(task) = self.writes.get_mut(&itt) else {
                // Failed or aborted meanwhile.
                self.budget_wait.pop_front();
                continue;
            };
            let need = u64::from(task.edtl()).saturating_sub(task.grant.bytes());
            if !self.account.admit(&mut task.grant, need) {
                break;
            }
            task.admitted = true;
            self.budget_wait.pop_front();
            self.advance_write(itt);
        }
        if self.budget_wait.is_empty() {
            self.account.set_waiting(false);
            self.budget_retry = None;
            self.budget_backoff = super::BUDGET_RETRY_MIN;
        } else if self.budget_retry.is_none() {
            self.budget_retry = Some(self.clock + self.budget_backoff);
            self.budget_backoff = (self.budget_backoff * 2).min(super::BUDGET_RETRY_MAX);
        }
    }

    /// Close the connection if a write's initiator has sat on solicited
    /// data for [`crate::PortalConfig::data_out_timeout`] (RFC 7143 leaves
    /// the time to the target): its tasks end as on any connection failure
    /// and its buffers go back to the budget. Otherwise look again when
    /// the oldest such write is due.
    pub(super) fn check_data_out(&mut self, now: Instant) {
        let timeout = self.cfg.data_out_timeout;
        let mut next: Option<Instant> = None;
        for (&itt, t) in &self.writes {
            let Some(since) = t.stalled_since else {
                continue;
            };
            let due = since + timeout;
            if due <= now {
                tracing::warn!(
                    itt,
                    timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                    received = t.received(),
                    edtl = t.edtl(),
                    "no Data-Out for solicited data within the Data-Out timeout; closing"
                );
                self.account.budget().count_timeout();
                self.fail();
                return;
            }
            next = Some(next.map_or(due, |n| n.min(due)));
        }
        self.data_out_check = next;
    }

    /// R2Ts of write `itt` went out: its Data-Out timer runs from now, if
    /// it was not running.
    pub(super) fn solicited(&mut self, itt: u32) {
        let now = self.clock;
        if let Some(task) = self.writes.get_mut(&itt) {
            if task.stalled_since.is_none() && !task.r2ts.is_empty() {
                task.stalled_since = Some(now);
            }
        }
        if self.data_out_check.is_none() {
            self.data_out_check = Some(now + self.cfg.data_out_timeout);
        }
    }

    /// End a write task that can go no further with CHECK CONDITION, once
    /// no RDMA Read of it is outstanding.
    pub(super) fn fail_write(&mut self, task: WriteTask, e: SeqError) {
        self.fail_write_with(task, e.sense());
    }

    /// End a write task with CHECK CONDITION and `sense`, once no RDMA Read
    /// of it is outstanding.
    pub(super) fn fail_write_with(&mut self, task: WriteTask, sense: Vec<u8>) {
        let reads = self.reads_for(&[task.cmd.itt]);
        let then = Deferred::Status {
            end: Ending::of_write(&task),
            status: Status::CHECK_CONDITION,
            sense,
        };
        self.after_reads(reads, then);
    }

    /// End a write whose data the target cannot trust (its buffer is still
    /// held by a driver that reported every RDMA Read of it done) with
    /// HARDWARE ERROR / INTERNAL TARGET FAILURE: the fault is the target's,
    /// not the initiator's, and nothing is written.
    pub(super) fn fail_write_internally(&mut self, task: WriteTask) {
        self.fail_write_with(task, internal_failure());
    }

    /// Answer a command the connection itself fails, without the SCSI core.
    pub(super) fn send_status(&mut self, end: Ending, status: Status, sense: Vec<u8>) {
        self.retire(end.immediate);
        let r = ScsiResponse {
            bidi_overflow: false,
            bidi_underflow: false,
            overflow: false,
            underflow: false,
            response: 0,
            status: status.0,
            itt: end.itt,
            snack_tag: 0,
            stat_sn: self.next_stat_sn(),
            exp_cmd_sn: self.exp_cmd_sn,
            max_cmd_sn: self.max_cmd_sn,
            exp_data_sn: end.r2ts,
            bidi_residual: 0,
            residual: 0,
            sense,
        };
        let invalidate = self.invalidate_for(&end.remote);
        self.send_reply(Reply::ScsiResponse(r), invalidate);
    }
}
