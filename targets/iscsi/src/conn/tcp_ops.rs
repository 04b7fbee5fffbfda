//! The connection's byte-stream operations (iSCSI over TCP, RFC 7143):
//! PDU framing out of a stream with optional CRC32C digests and padding,
//! R2T PDUs to solicit Data-Out, and Data-In PDUs whose payloads stay
//! slices of the response buffer. The stream's buffers are in
//! [`super::stream`].

use std::time::Instant;

use bytes::Bytes;

use super::ending::{fixed_sense, Ending};
use super::stream::SMALL_PAYLOAD;
use super::vet::Refused;
use super::{Connection, Wire};
use crate::budget::Grant;
use crate::iser::ControlHeader;
use crate::pdu::bhs::Bhs;
use crate::pdu::{padded_len, verify_digest, R2t, Reply, RequestHeader, ScsiResponse, BHS_LEN};
use crate::refusal::PduRefusal;
use crate::task::{data_in_pdus, residual_bits, DataInSlice, InFlight, OpenR2t};
use rustgt_scsi::sense::{Asc, SenseKey};
use rustgt_scsi::{IoBuf, Response, Status};

enum Step {
    NeedMore,
    Consumed(usize),
    /// A rejected PDU: skip this many bytes (header included).
    Skip(usize),
}

impl Connection {
    /// Feed bytes received from a byte-stream transport (TCP). On an iSER
    /// connection this is a driver error and closes the connection; use
    /// [`Connection::handle_message`] there.
    pub fn handle_input(&mut self, data: &[u8], now: Instant) {
        if self.is_closing() {
            return;
        }
        let Wire::Stream(s) = &mut self.wire else {
            tracing::error!("handle_input on a message transport; closing");
            self.fail();
            return;
        };
        self.last_rx = Some(now);
        self.clock = self.clock.max(now);
        if s.input_idle() {
            // Nothing of an earlier read waits: the PDUs are parsed where
            // the driver read them, and only an incomplete tail is kept.
            let (pos, discard) = self.parse_pdus(data, now);
            if let Wire::Stream(s) = &mut self.wire {
                s.keep_tail(data.get(pos..).unwrap_or_default(), discard);
            }
            return;
        }
        let mut buf = s.take_input(data);
        let (pos, discard) = self.parse_pdus(&buf, now);
        // Compact: keep only the unparsed tail.
        if pos >= buf.len() {
            buf.clear();
        } else if pos > 0 {
            buf.drain(..pos);
        }
        if let Wire::Stream(s) = &mut self.wire {
            s.keep_input(buf, discard);
        }
    }

    /// Takes every whole PDU from the front of `buf`: how many bytes they
    /// took, and how many bytes of a rejected PDU past the end of `buf`
    /// are still to skip.
    fn parse_pdus(&mut self, buf: &[u8], now: Instant) -> (usize, usize) {
        let mut pos = 0usize;
        let mut discard = 0usize;
        while !self.is_closing() {
            let avail = buf.get(pos..).unwrap_or_default();
            match self.next_pdu(avail, now) {
                Step::NeedMore => break,
                Step::Consumed(n) => pos += n,
                Step::Skip(n) => {
                    // Reject already sent; skip the data segment without keeping it.
                    let have = avail.len();
                    if n <= have {
                        pos += n;
                    } else {
                        pos += have;
                        discard = n - have;
                    }
                }
            }
        }
        (pos, discard)
    }

    /// Try to take one PDU from the front of `buf`.
    fn next_pdu(&mut self, buf: &[u8], now: Instant) -> Step {
        let Some(bhs_bytes) = buf.get(..BHS_LEN) else {
            return Step::NeedMore;
        };
        let Ok(bhs) = Bhs::new_checked(bhs_bytes) else {
            return Step::NeedMore;
        };
        let Ok(bhs_arr) = <[u8; BHS_LEN]>::try_from(bhs_bytes) else {
            return Step::NeedMore;
        };
        let ahs_len = bhs.total_ahs_len_bytes();
        let dsl = bhs.data_segment_len();
        let header_len = bhs.header_wire_len(self.hd);
        let data_len = bhs.data_wire_len(self.dd);
        let dd_len = data_len - padded_len(dsl as usize);
        let total = header_len + data_len;

        // Validate what the BHS alone tells before waiting for the rest
        // (SPDK's rule: never buffer a payload we would refuse).
        match self.vet_bhs(bhs.opcode(), dsl, &bhs_arr) {
            Ok(()) => {}
            Err(Refused::Close) => return Step::NeedMore,
            Err(Refused::Rejected) => return Step::Skip(total),
        }
        let Some(header) = buf.get(..header_len) else {
            return Step::NeedMore;
        };
        if self.hd {
            let (hdr, dig) = header.split_at(header_len - 4);
            if !digest_ok(hdr, dig) {
                // The length fields can't be trusted: ERL 0 closes (RFC 7143 §7.8).
                tracing::warn!("header digest error; closing connection");
                self.fail();
                return Step::NeedMore;
            }
        }
        let ahs = header.get(BHS_LEN..BHS_LEN + ahs_len).unwrap_or_default();
        let hdr = match self.vet_header(&bhs_arr, ahs, dsl) {
            Ok(h) => h,
            Err(Refused::Close) => return Step::NeedMore,
            Err(Refused::Rejected) => return Step::Skip(total),
        };
        let Some(whole) = buf.get(..total) else {
            return Step::NeedMore;
        };
        let data_area = whole.get(header_len..).unwrap_or_default();
        let data = data_area.get(..dsl as usize).unwrap_or_default();
        if dd_len > 0 {
            let padded = data_area
                .get(..padded_len(dsl as usize))
                .unwrap_or_default();
            let dig = data_area.get(padded.len()..).unwrap_or_default();
            if !digest_ok(padded, dig) {
                tracing::warn!("data digest error");
                self.reject(PduRefusal::DataDigest, &bhs_arr);
                self.data_digest_failed(&hdr);
                return Step::Consumed(total);
            }
        }
        self.dispatch(hdr, data, &bhs_arr, ControlHeader::default(), now);
        Step::Consumed(total)
    }

    fn data_digest_failed(&mut self, hdr: &RequestHeader) {
        // RFC 7143 §7.8: terminate the task with CHECK CONDITION, ABORTED
        // COMMAND / PROTOCOL SERVICE CRC ERROR (47h/05h).
        let sense = || fixed_sense(SenseKey::ABORTED_COMMAND, Asc::PROTOCOL_SERVICE_CRC_ERROR);
        match hdr {
            RequestHeader::ScsiCommand(c) => {
                if !self.accept_cmd_sn(c.immediate, c.cmd_sn) {
                    return;
                }
                let end = Ending::of_command(c, &ControlHeader::default());
                self.send_status(end, Status::CHECK_CONDITION, sense());
            }
            RequestHeader::DataOut(d) => {
                if let Some(task) = self.writes.remove(&d.itt) {
                    let end = Ending::of_write(&task);
                    self.send_status(end, Status::CHECK_CONDITION, sense());
                }
            }
            _ => {}
        }
    }

    /// Ask for the next bursts of a write with R2T PDUs (RFC 7143 §11.8),
    /// up to MaxOutstandingR2T open at once.
    pub(super) fn send_r2ts(&mut self, itt: u32, max_burst: u32, max_r2t: u32) {
        let mut to_send = Vec::new();
        if let Some(task) = self.writes.get_mut(&itt) {
            if task.next_r2t_offset < task.received() {
                task.next_r2t_offset = task.received();
            }
            while (task.r2ts.len() as u32) < max_r2t && task.next_r2t_offset < task.edtl() {
                let len = max_burst.min(task.edtl() - task.next_r2t_offset);
                to_send.push((task.next_r2t_offset, len, task.r2t_sn, task.cmd.lun));
                task.r2ts.push_back(OpenR2t {
                    ttt: 0,
                    offset: task.next_r2t_offset,
                    len,
                    received: 0,
                    next_data_sn: 0,
                });
                task.next_r2t_offset += len;
                task.r2t_sn = task.r2t_sn.wrapping_add(1);
            }
            // Room for the whole write at once: the budget admitted all of
            // it, so it is counted already, and it arrives without the
            // copies of growing (pages are touched only as data lands).
            let edtl = task.edtl() as usize;
            task.buf.reserve_to(edtl, edtl);
        }
        for (offset, len, r2t_sn, lun_raw) in to_send {
            let ttt = self.alloc_ttt();
            if let Some(task) = self.writes.get_mut(&itt) {
                if let Some(r) = task.r2ts.iter_mut().find(|r| r.offset == offset) {
                    r.ttt = ttt;
                }
            }
            let r2t = R2t {
                lun: lun_raw,
                itt,
                ttt,
                // R2T carries StatSN without advancing it (§11.8.2).
                stat_sn: self.stat_sn,
                exp_cmd_sn: self.exp_cmd_sn,
                max_cmd_sn: self.max_cmd_sn,
                r2t_sn,
                buffer_offset: offset,
                desired_len: len,
            };
            self.send(Reply::R2t(r2t));
        }
        self.solicited(itt);
    }

    /// Data-In PDUs for a finished read, each at most the initiator's
    /// MaxRecvDataSegmentLength and never across a MaxBurstLength boundary,
    /// with the status in the last one when there is no sense (§11.7.4);
    /// otherwise a SCSI Response follows.
    pub(super) fn complete_stream(
        &mut self,
        itt: u32,
        task: &InFlight,
        mut resp: Response,
        grant: Option<Grant>,
    ) {
        let (max_pdu, max_burst) = match &self.session {
            Some(s) => (s.params.initiator_max_recv_dsl, s.params.max_burst_length),
            None => return,
        };
        let (over, under, residual) = residual_bits(resp.residual);
        // Small reads are copied next to their headers and their buffer goes
        // back to the pool at once; larger ones are shared, uncopied, until
        // the driver has written them.
        let buf = std::mem::take(&mut resp.data_in);
        let (small, shared) = if buf.len() <= SMALL_PAYLOAD {
            (buf, None)
        } else {
            (
                IoBuf::default(),
                Some(match grant {
                    // The read's room in the budget goes back when the
                    // driver has written (and dropped) the last slice.
                    Some(grant) => Bytes::from_owner(Granted { buf, _grant: grant }),
                    None => Bytes::from_owner(buf),
                }),
            )
        };
        let data: &[u8] = shared.as_deref().unwrap_or(&small);
        let pdus = data_in_pdus(itt, task.lun, data.len(), max_pdu, max_burst);
        let count = pdus.clone().count();
        let n_pdus = u32::try_from(count).unwrap_or(u32::MAX);
        let status_in_data = count > 0 && resp.sense.is_empty();
        let last = count.saturating_sub(1);
        for (i, DataInSlice { mut pdu, range }) in pdus.enumerate() {
            pdu.exp_cmd_sn = self.exp_cmd_sn;
            pdu.max_cmd_sn = self.max_cmd_sn;
            if i == last && status_in_data {
                pdu.final_bit = true;
                pdu.has_status = true;
                pdu.status = resp.status.0;
                pdu.overflow = over;
                pdu.underflow = under;
                pdu.residual = residual;
                pdu.stat_sn = self.next_stat_sn();
            }
            let payload = data.get(range.clone()).unwrap_or_default();
            let framing = pdu.encode_parts(payload, self.hd, self.dd);
            let Wire::Stream(s) = &mut self.wire else {
                return;
            };
            let slice = shared.as_ref().map(|b| b.slice(range));
            s.push_data_in(framing.head(), payload, slice, framing.tail());
        }
        if !status_in_data {
            let r = ScsiResponse {
                bidi_overflow: false,
                bidi_underflow: false,
                overflow: over,
                underflow: under,
                response: 0,
                status: resp.status.0,
                itt,
                snack_tag: 0,
                stat_sn: self.next_stat_sn(),
                exp_cmd_sn: self.exp_cmd_sn,
                max_cmd_sn: self.max_cmd_sn,
                exp_data_sn: n_pdus.wrapping_add(task.r2t_count),
                bidi_residual: 0,
                residual,
                sense: resp.sense,
            };
            self.send(Reply::ScsiResponse(r));
        }
    }
}

fn digest_ok(covered: &[u8], digest: &[u8]) -> bool {
    verify_digest(covered, digest).is_ok()
}

/// Read data shared with the driver's output queue, holding its part of
/// the data buffer budget until the last slice of it is dropped.
struct Granted {
    buf: IoBuf,
    _grant: Grant,
}

impl AsRef<[u8]> for Granted {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}
