//! One iSER connection's data path: the core's [`IserOp`]s become work
//! requests on the pre-registered buffers, and completions go back into
//! the core. No tokio here; the server's task calls in when a file
//! descriptor is ready.
//!
//! Buffers: receives use receive slots (one per posted receive, reposted
//! as soon as the core has read the message); Sends use send slots, or a
//! data buffer for a message too long for one; each RDMA Write or Read
//! holds one data buffer until its completion. When a slot or the send
//! queue runs out, operations wait in order in a backlog: a command's
//! Writes always go before its response.
//!
//! Zero-copy Data-In: an RDMA Write whose data lies in a pooled buffer
//! (the command's `data_in`) is sent from that buffer, registered with the
//! connection's PD on first use and cached ([`crate::regcache`]); the
//! driver holds the data until the Write completes (or, at teardown, until
//! the QP is destroyed: `res` drops before `writes_from`). Data in no pooled
//! buffer, or past the pinned-bytes limit, is copied into a data buffer.
//!
//! Zero-copy Data-Out: an RDMA Read that comes with a destination (a range
//! of the write's pooled buffer, `RdmaRead::dest`) is posted straight into
//! it when that buffer's storage is registered or can be, the same way; the
//! driver holds the Read, and with it the destination and so the buffer,
//! until the Read completes or is flushed, or, at teardown, until the QP is
//! destroyed (`res` drops before `reads_into`), even if the core dropped
//! the task meanwhile. Otherwise the destination is dropped and the Read
//! lands in a data buffer, copied into the write by the core.

#![forbid(unsafe_code)]

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use bytes::Bytes;

use rustgt_iscsi::{Connection, IserOp, RdmaRead};

use crate::pool::SlotPool;
use crate::sizing::Plan;
use crate::verbs::{Buf, Completion, ConnResources, SendKind, VerbsError};
use crate::wrid::WrKind;

/// Completions handled per poll call, and per turn before yielding.
const POLL_BATCH: usize = 32;
const TURN_BUDGET: usize = 4096;

/// Why a connection's data path stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DriverError {
    /// A verbs or connection-manager call failed.
    #[error(transparent)]
    Verbs(#[from] VerbsError),
    /// A PDU to send does not fit the largest send buffer.
    #[error("a {len}-byte message is larger than any buffer ({max} bytes)")]
    MessageTooLong {
        /// Bytes of the message.
        len: usize,
        /// Bytes of the largest buffer.
        max: usize,
    },
}

/// The data path of one connection.
#[derive(Debug)]
pub struct Driver {
    pub core: Connection,
    pub res: ConnResources,
    plan: Plan,
    send_slots: SlotPool,
    chunks: SlotPool,
    /// Receives posted and not completed.
    recv_posted: u32,
    /// Send-queue WRs posted and not completed.
    sq_used: u32,
    backlog: VecDeque<IserOp>,
    /// RDMA Reads in flight, by the data buffer they fill.
    reads: HashMap<u32, RdmaRead>,
    /// A work request failed (or the peer left): post nothing more.
    failed: bool,
    completions: Vec<Completion>,
    /// Zero-copy RDMA Writes posted and not completed: the data each sends
    /// from, held so that its buffer (and registration) outlives the WR.
    /// Declared after `res`, so at drop the QP goes first.
    writes_from: HashMap<u32, Bytes>,
    next_write_from: u32,
    /// RDMA Writes sent from the buffer they were in / copied first.
    pub writes_zero_copy: u64,
    pub writes_copied: u64,
    /// Zero-copy RDMA Reads posted and not completed, each with its
    /// destination (a range of the write's buffer), held so that the buffer
    /// (and registration) outlives the WR even if the task is gone.
    /// Declared after `res`, so at drop the QP goes first.
    reads_into: HashMap<u32, RdmaRead>,
    next_read_into: u32,
    /// RDMA Reads that landed in the write's buffer / in a data buffer.
    pub reads_zero_copy: u64,
    pub reads_copied: u64,
}

impl Driver {
    pub fn new(core: Connection, res: ConnResources, plan: Plan) -> Driver {
        Driver {
            core,
            res,
            send_slots: SlotPool::new(plan.send_slots),
            chunks: SlotPool::new(plan.data_chunks),
            plan,
            recv_posted: 0,
            sq_used: 0,
            backlog: VecDeque::new(),
            reads: HashMap::new(),
            failed: false,
            completions: Vec::with_capacity(POLL_BATCH),
            writes_from: HashMap::new(),
            next_write_from: 0,
            writes_zero_copy: 0,
            writes_copied: 0,
            reads_into: HashMap::new(),
            next_read_into: 0,
            reads_zero_copy: 0,
            reads_copied: 0,
        }
    }

    /// Post every receive; before accepting, so the first login PDU finds
    /// a buffer.
    pub fn post_receives(&mut self) -> Result<(), DriverError> {
        for slot in 0..self.plan.recv_depth {
            self.res.post_recv(slot, WrKind::Recv(slot).encode())?;
            self.recv_posted += 1;
        }
        Ok(())
    }

    /// The transport is gone or broken: stop posting, tell the core.
    pub fn fail(&mut self) {
        if !self.failed {
            self.failed = true;
            self.backlog.clear();
            self.core.fail();
        }
    }

    /// Nothing of ours is left on the queues: every posted WR completed.
    pub fn quiesced(&self) -> bool {
        self.recv_posted == 0 && self.sq_used == 0
    }

    /// The connection may close: the core is closing and everything it
    /// wanted sent has completed (or the data path failed).
    pub fn finished(&self) -> bool {
        self.failed || (self.core.is_closing() && self.backlog.is_empty() && self.sq_used == 0)
    }

    /// Move the core's operations to the send queue, as far as buffers
    /// and queue room allow.
    pub fn post_ops(&mut self) {
        while let Some(op) = self.core.poll_op() {
            self.backlog.push_back(op);
        }
        if self.failed {
            self.backlog.clear();
            return;
        }
        while let Some(op) = self.backlog.pop_front() {
            match self.try_post(&op) {
                Ok(true) => {}
                Ok(false) => {
                    self.backlog.push_front(op);
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "posting failed; closing the connection");
                    self.fail();
                    return;
                }
            }
        }
    }

    /// Post `op` if its buffer and queue room are free; false to wait.
    fn try_post(&mut self, op: &IserOp) -> Result<bool, DriverError> {
        if self.sq_used >= self.plan.sq_depth {
            return Ok(false);
        }
        match op {
            IserOp::Send(s) => {
                let kind = match s.invalidate {
                    Some(stag) => SendKind::SendInvalidate(stag),
                    None => SendKind::Send,
                };
                let len = s.msg.len();
                if len <= self.res.send.slot_size() {
                    let Some(slot) = self.send_slots.take() else {
                        return Ok(false);
                    };
                    self.res.send.write(slot, &s.msg);
                    self.post(kind, Buf::Send, slot, len, WrKind::Send(slot), PoolId::Send)?;
                } else if len <= self.res.data.slot_size() {
                    let Some(chunk) = self.chunks.take() else {
                        return Ok(false);
                    };
                    self.res.data.write(chunk, &s.msg);
                    self.post(
                        kind,
                        Buf::Data,
                        chunk,
                        len,
                        WrKind::SendLarge(chunk),
                        PoolId::Data,
                    )?;
                } else {
                    return Err(DriverError::MessageTooLong {
                        len,
                        max: self.res.data.slot_size(),
                    });
                }
            }
            IserOp::Write(w) => {
                let lkey = w
                    .storage
                    .as_ref()
                    .and_then(|st| self.res.lkey_for(st, &w.data));
                if let Some(lkey) = lkey {
                    let id = self.write_from_id();
                    let wr = WrKind::WriteFrom(id).encode();
                    self.res
                        .post_write_from(&w.data, lkey, w.remote_addr, w.stag, wr)?;
                    self.sq_used += 1;
                    self.writes_from.insert(id, w.data.clone());
                    self.writes_zero_copy += 1;
                    return Ok(true);
                }
                let Some(chunk) = self.chunks.take() else {
                    return Ok(false);
                };
                self.res.data.write(chunk, &w.data);
                self.writes_copied += 1;
                let kind = SendKind::RdmaWrite {
                    remote_addr: w.remote_addr,
                    rkey: w.stag,
                };
                self.post(
                    kind,
                    Buf::Data,
                    chunk,
                    w.data.len(),
                    WrKind::Write(chunk),
                    PoolId::Data,
                )?;
            }
            IserOp::Read(r) => {
                let lkey = r
                    .dest
                    .as_ref()
                    .filter(|d| d.len() == r.len as usize)
                    .and_then(|d| {
                        let st = d.storage()?;
                        self.res.lkey_for_range(&st, d.addr(), d.len())
                    });
                if let (Some(lkey), Some(dest)) = (lkey, r.dest.as_ref()) {
                    let id = self.read_into_id();
                    let wr = WrKind::ReadInto(id).encode();
                    self.res
                        .post_read_into(dest, lkey, r.remote_addr, r.stag, wr)?;
                    self.sq_used += 1;
                    // Holds the destination until the completion.
                    self.reads_into.insert(id, r.clone());
                    self.reads_zero_copy += 1;
                    return Ok(true);
                }
                let Some(chunk) = self.chunks.take() else {
                    return Ok(false);
                };
                let kind = SendKind::RdmaRead {
                    remote_addr: r.remote_addr,
                    rkey: r.stag,
                };
                self.post(
                    kind,
                    Buf::Data,
                    chunk,
                    r.len as usize,
                    WrKind::Read(chunk),
                    PoolId::Data,
                )?;
                // The copy path: the destination is not ours to hold (the
                // op, and with it `r.dest`, is dropped when this returns).
                self.reads.insert(
                    chunk,
                    RdmaRead {
                        dest: None,
                        ..r.clone()
                    },
                );
                self.reads_copied += 1;
            }
        }
        Ok(true)
    }

    /// An id for a zero-copy Read no posted Read has.
    fn read_into_id(&mut self) -> u32 {
        // At most sq_depth are posted, so a free id is found quickly.
        loop {
            let id = self.next_read_into;
            self.next_read_into = self.next_read_into.wrapping_add(1);
            if !self.reads_into.contains_key(&id) {
                return id;
            }
        }
    }

    /// An id for a zero-copy Write no posted Write has.
    fn write_from_id(&mut self) -> u32 {
        // At most sq_depth are posted, so a free id is found quickly.
        loop {
            let id = self.next_write_from;
            self.next_write_from = self.next_write_from.wrapping_add(1);
            if !self.writes_from.contains_key(&id) {
                return id;
            }
        }
    }

    /// Post one WR; on failure give its slot back.
    fn post(
        &mut self,
        kind: SendKind,
        buf: Buf,
        slot: u32,
        len: usize,
        wr: WrKind,
        pool: PoolId,
    ) -> Result<(), DriverError> {
        match self.res.post_send(kind, buf, slot, len, wr.encode()) {
            Ok(()) => {
                self.sq_used += 1;
                Ok(())
            }
            Err(e) => {
                match pool {
                    PoolId::Send => self.send_slots.give_back(slot),
                    PoolId::Data => self.chunks.give_back(slot),
                };
                Err(e.into())
            }
        }
    }

    /// Take completion events, re-arm, and handle completions until the
    /// queue is empty (polling on while they keep coming, up to a budget).
    /// Returns how many completions were handled.
    pub fn drain_cq(&mut self, now: Instant) -> usize {
        let mut handled = 0;
        loop {
            self.res.take_cq_events();
            if let Err(e) = self.res.arm() {
                tracing::warn!(error = %e, "cannot re-arm the completion queue");
                self.fail();
            }
            let mut round = 0;
            loop {
                let mut batch = std::mem::take(&mut self.completions);
                if let Err(e) = self.res.poll(&mut batch, POLL_BATCH) {
                    tracing::warn!(error = %e, "polling the completion queue failed");
                    self.completions = batch;
                    self.fail();
                    return handled;
                }
                let n = batch.len();
                for c in batch.drain(..) {
                    self.on_completion(c, now);
                }
                self.completions = batch;
                round += n;
                if n < POLL_BATCH {
                    break;
                }
            }
            handled += round;
            self.post_ops();
            // Under load keep polling; when idle, wait for the next event.
            if round == 0 || handled >= TURN_BUDGET {
                return handled;
            }
        }
    }

    fn on_completion(&mut self, c: Completion, now: Instant) {
        let Some(kind) = WrKind::decode(c.wr_id) else {
            tracing::error!(wr_id = c.wr_id, "completion of an unknown work request");
            self.fail();
            return;
        };
        if kind.on_send_queue() {
            self.sq_used = self.sq_used.saturating_sub(1);
        }
        if !c.ok() {
            self.release(kind);
            if !self.failed {
                if c.flushed() {
                    tracing::debug!(?kind, "work request flushed");
                } else {
                    tracing::warn!(
                        ?kind,
                        status = c.status,
                        vendor_err = c.vendor_err,
                        "work request failed; closing the connection"
                    );
                }
                self.fail();
            }
            return;
        }
        match kind {
            WrKind::Recv(slot) => {
                let len = (c.byte_len as usize).min(self.res.recv.slot_size());
                if let Some(msg) = self.res.recv.read(slot, len) {
                    self.core.handle_message(msg, now);
                }
                self.recv_posted = self.recv_posted.saturating_sub(1);
                if !self.failed {
                    match self.res.post_recv(slot, WrKind::Recv(slot).encode()) {
                        Ok(()) => self.recv_posted += 1,
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot repost a receive");
                            self.fail();
                        }
                    }
                }
            }
            WrKind::Read(chunk) => {
                if let Some(r) = self.reads.remove(&chunk) {
                    if let Some(data) = self.res.data.read(chunk, r.len as usize) {
                        self.core.data_arrived(r.itt, r.ttt, data);
                    }
                }
                self.chunks.give_back(chunk);
            }
            WrKind::ReadInto(id) => {
                if let Some(r) = self.reads_into.remove(&id) {
                    // The device is done with the range: it goes back to
                    // the core, which owns the buffer again with the last.
                    self.core.read_done(r, c.byte_len);
                }
            }
            WrKind::Send(_) | WrKind::SendLarge(_) | WrKind::Write(_) | WrKind::WriteFrom(_) => {
                self.release(kind)
            }
        }
    }

    /// Give back the buffer a finished (or failed) WR held.
    fn release(&mut self, kind: WrKind) {
        match kind {
            WrKind::Recv(_) => self.recv_posted = self.recv_posted.saturating_sub(1),
            WrKind::Send(slot) => {
                self.send_slots.give_back(slot);
            }
            WrKind::SendLarge(chunk) | WrKind::Write(chunk) => {
                self.chunks.give_back(chunk);
            }
            WrKind::Read(chunk) => {
                self.reads.remove(&chunk);
                self.chunks.give_back(chunk);
            }
            WrKind::WriteFrom(id) => {
                // The device is done with it: the buffer may go.
                self.writes_from.remove(&id);
            }
            WrKind::ReadInto(id) => {
                // Failed or flushed: the device writes no more into it, so
                // the buffer may go (the core is failed and wants no data).
                self.reads_into.remove(&id);
            }
        }
    }
}

/// Which pool a slot came from.
#[derive(Debug, Clone, Copy)]
enum PoolId {
    Send,
    Data,
}
