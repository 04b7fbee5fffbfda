//! One iSCSI connection, sans I/O (RFC 7143 ERL 0, one connection per
//! session), over either transport: a byte stream (TCP) or RDMA messages
//! (iSER, RFC 7145).
//!
//! The driver feeds what it receives ([`Connection::handle_input`] for
//! stream bytes, [`Connection::handle_message`] for one iSER Send Message,
//! [`Connection::data_arrived`] for a finished RDMA Read), SCSI completions
//! with [`Connection::complete`], task-management results with
//! [`Connection::tmf_done`] and time with [`Connection::handle_timeout`]. It
//! drains work to do with [`Connection::poll_event`] and output with
//! [`Connection::poll_transmit`] (stream segments) or
//! [`Connection::poll_op`] (iSER Sends, RDMA Writes and Reads).
//!
//! Login, negotiation, sequence numbers, task and Data-Out sequencing are
//! written once here; the transports differ only in framing and in how
//! data moves, which the [`stream`] and [`rdma`] submodules hold behind
//! one internal enum. Nothing here blocks, allocates beyond the negotiated
//! limits, or panics on what a peer sends.

mod login_phase;
mod rdma;
mod stream;

use rdma::Deferred;
pub use rdma::{IserOp, IserParams, IserSend, RdmaRead, RdmaWrite};

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;

use rustgt_scsi::sense::{Asc, Sense, SenseKey};
use rustgt_scsi::{Command, IoBuf, Response, Status, TaskAttr, TmfFunction, TmfResponse};

use crate::config::PortalConfig;
use crate::iser::ControlHeader;
use crate::login::LoginState;
use crate::negotiate::{SessionType, Transport};
use crate::pdu::{
    decode_lun, encode_lun, AsyncMessage, DataOut, LogoutRequest, LogoutResponse, NopIn, NopOut,
    Opcode, Reject, Reply, RequestHeader, ScsiCommand, ScsiResponse, TaskAttribute,
    TaskMgmtRequest, TaskMgmtResponse, TextRequest, TextResponse, TmfCode, TmfResult, BHS_LEN,
    RESERVED_TAG,
};
use crate::refusal::PduRefusal;
pub use crate::session::SessionInfo;
use crate::session::SessionTable;
use crate::task::{InFlight, WriteBuf, WriteTask};
use crate::text::{encode_text, parse_text, TextAssembler, TextSplitter};

/// Work for the driver.
#[derive(Debug)]
pub enum Event {
    /// A Normal session reached full feature phase.
    LoggedIn(SessionInfo),
    /// Session reinstatement: the driver must close this other connection
    /// and abort its tasks (RFC 7143 §6.3.5).
    Reinstate { conn_id: u64 },
    /// Run this SCSI command; answer with [`Connection::complete`].
    Command(Command),
    /// Run this task-management function; answer with [`Connection::tmf_done`].
    TaskMgmt {
        itt: u32,
        lun: u64,
        function: TmfFunction,
    },
}

/// Fixed per-connection facts the driver supplies.
#[derive(Debug, Clone)]
pub struct ConnectionSetup {
    pub conn_id: u64,
    pub transport: Transport,
    /// `host:port` the initiator connected to.
    pub local_addr: String,
    /// `host:port` of the initiator.
    pub peer_addr: String,
    /// Fresh random bytes for the CHAP challenge and identifier.
    pub random: [u8; 32],
}

#[derive(Debug)]
enum Phase {
    Login(Box<LoginState>),
    FullFeature,
    /// Nothing more is read; close once the output is flushed.
    Closing,
}

/// Outstanding Text response chunks (C bit continuation, RFC 7143 §11.10.2).
#[derive(Debug)]
struct TextOut {
    itt: u32,
    ttt: u32,
    chunks: VecDeque<Vec<u8>>,
}

#[derive(Debug)]
struct PendingLogout {
    itt: u32,
    response: u8,
}

/// Limit on login PDU data segments before MaxRecvDataSegmentLength is
/// negotiated (RFC 7143 §13.12 default).
const LOGIN_MAX_DSL: u32 = 8192;

/// Task-management functions one connection may have handed to the driver
/// (running in the SCSI core) at once. Immediate TMF requests take no
/// CmdSN window slot, so without this a peer could make the daemon run any
/// number of them at once.
pub const MAX_TMFS_RUNNING: usize = 4;

/// Task-management requests one connection may have waiting for a running
/// slot, answered in arrival order as slots free up: as many as a full
/// default CmdSN window (128) of ABORT TASKs, which an initiator whose
/// commands all timed out may send at once. One more is answered Function
/// Rejected at once (RFC 7143 §11.6.1, response 255), so every request
/// still gets its answer promptly and nothing grows without bound.
pub const MAX_TMFS_QUEUED: usize = 128;

/// A task-management request waiting for a running slot.
#[derive(Debug)]
struct QueuedTmf {
    itt: u32,
    immediate: bool,
    lun: u64,
    function: TmfFunction,
}

/// One connection's protocol state.
#[derive(Debug)]
pub struct Connection {
    pub(crate) cfg: Arc<PortalConfig>,
    pub(crate) setup: ConnectionSetup,
    pub(crate) sessions: Arc<Mutex<SessionTable>>,
    phase: Phase,
    /// Framing and data movement of the transport.
    wire: Wire,
    events: VecDeque<Event>,
    pub(crate) hd: bool,
    pub(crate) dd: bool,
    pub(crate) stat_sn: u32,
    pub(crate) exp_cmd_sn: u32,
    pub(crate) max_cmd_sn: u32,
    pub(crate) session: Option<SessionInfo>,
    writes: HashMap<u32, WriteTask>,
    inflight: HashMap<u32, InFlight>,
    /// Task-management requests handed to the driver, by ITT, with
    /// whether each was immediate; at most [`MAX_TMFS_RUNNING`].
    tmfs: HashMap<u32, bool>,
    /// Task-management requests waiting for a running slot, in arrival
    /// order; at most [`MAX_TMFS_QUEUED`].
    tmf_queue: VecDeque<QueuedTmf>,
    /// Task-management requests rejected because the queue was full
    /// (logged once per connection, then counted).
    tmfs_rejected: u64,
    next_ttt: u32,
    text_in: TextAssembler,
    text_out: Option<TextOut>,
    logout: Option<PendingLogout>,
    last_rx: Option<Instant>,
    ping: Option<(u32, Instant)>,
    async_logout_sent: bool,
    /// When the login phase must be over: `now` at creation (the accept)
    /// plus [`PortalConfig::login_timeout`].
    login_deadline: Instant,
}

/// The one place the transports differ: how PDUs are framed and how data
/// moves.
#[derive(Debug)]
enum Wire {
    /// A byte stream: PDUs with digests and padding, R2T and Data-In PDUs.
    Stream(stream::StreamWire),
    /// RDMA messages: one PDU per Send, data by RDMA Write and Read.
    Rdma(rdma::RdmaWire),
}

/// Why a PDU header was refused; the connection already acted on it.
enum Refused {
    /// The connection is failing: read nothing more.
    Close,
    /// A Reject went out; drop this PDU and go on.
    Rejected,
}

/// What a SCSI Response needs to end a task the SCSI core never saw.
#[derive(Debug)]
struct Ending {
    itt: u32,
    immediate: bool,
    /// R2T PDUs sent for it (part of ExpDataSN).
    r2ts: u32,
    remote: ControlHeader,
}

impl Ending {
    fn of_command(c: &ScsiCommand, remote: &ControlHeader) -> Ending {
        Ending {
            itt: c.itt,
            immediate: c.immediate,
            r2ts: 0,
            remote: *remote,
        }
    }

    fn of_write(task: &WriteTask) -> Ending {
        Ending {
            itt: task.cmd.itt,
            immediate: task.cmd.immediate,
            r2ts: task.r2t_sn,
            remote: task.remote,
        }
    }
}

/// RFC 1982 serial comparison on 32-bit sequence numbers: `a < b`.
pub fn sn_lt(a: u32, b: u32) -> bool {
    a != b && (b.wrapping_sub(a) as i32) > 0
}

/// `a <= b` in serial arithmetic.
pub fn sn_le(a: u32, b: u32) -> bool {
    a == b || sn_lt(a, b)
}

impl Connection {
    pub fn new(
        cfg: Arc<PortalConfig>,
        sessions: Arc<Mutex<SessionTable>>,
        setup: ConnectionSetup,
        now: Instant,
    ) -> Self {
        let login = LoginState::new(&cfg, setup.transport, setup.random);
        let cfg_login_timeout = cfg.login_timeout;
        let text_in = TextAssembler::new(cfg.max_text_len);
        let wire = match setup.transport {
            Transport::Tcp => Wire::Stream(stream::StreamWire::default()),
            Transport::Iser => Wire::Rdma(rdma::RdmaWire::new(IserParams::default())),
        };
        Connection {
            cfg,
            setup,
            sessions,
            phase: Phase::Login(Box::new(login)),
            wire,
            events: VecDeque::new(),
            hd: false,
            dd: false,
            stat_sn: 0,
            exp_cmd_sn: 0,
            max_cmd_sn: 0,
            session: None,
            writes: HashMap::new(),
            inflight: HashMap::new(),
            tmfs: HashMap::new(),
            tmf_queue: VecDeque::new(),
            tmfs_rejected: 0,
            next_ttt: 1,
            text_in,
            text_out: None,
            logout: None,
            last_rx: Some(now),
            ping: None,
            async_logout_sent: false,
            login_deadline: now + cfg_login_timeout,
        }
    }

    /// The session, once login has completed.
    pub fn session(&self) -> Option<&SessionInfo> {
        self.session.as_ref()
    }

    pub fn conn_id(&self) -> u64 {
        self.setup.conn_id
    }

    /// True once the connection should be closed after flushing output.
    pub fn is_closing(&self) -> bool {
        matches!(self.phase, Phase::Closing)
    }

    /// Commands handed to the SCSI core and not yet answered.
    pub fn in_flight(&self) -> usize {
        self.inflight.len()
    }

    /// Like [`Connection::poll_transmit`], appending the segments to the
    /// driver's own queue, so a turn allocates nothing for them.
    pub fn transmit_into(&mut self, queue: &mut impl Extend<Bytes>) {
        if let Wire::Stream(s) = &mut self.wire {
            s.drain_output(queue);
        }
    }

    /// Byte-stream segments to send, in order, if any. A driver writes them
    /// with one vectored write. Always `None` on an iSER connection (use
    /// [`Connection::poll_op`]).
    pub fn poll_transmit(&mut self) -> Option<Vec<Bytes>> {
        match &mut self.wire {
            Wire::Stream(s) => s.take_output(),
            Wire::Rdma(_) => None,
        }
    }

    /// Next piece of work for the driver.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`Connection::handle_timeout`] next wants to run: the login
    /// deadline until full feature phase, then the keepalive timer.
    pub fn poll_timeout(&self) -> Option<Instant> {
        // A login held back by the brake (crate::brake), and the login
        // deadline: whichever comes first.
        let hold = self.login_hold_until();
        match self.phase {
            Phase::Login(_) => {
                return Some(hold.map_or(self.login_deadline, |t| t.min(self.login_deadline)))
            }
            Phase::Closing => return hold,
            Phase::FullFeature => {
                if hold.is_some() {
                    return hold;
                }
            }
        }
        if let Some((_, sent)) = self.ping {
            return Some(sent + self.cfg.nop_timeout);
        }
        let interval = self.cfg.nop_interval?;
        self.last_rx.map(|t| t + interval)
    }

    /// Drive the timers: run a login request the brake held back once its
    /// time has come ([`crate::brake`]); close a connection whose login is
    /// not over by its deadline (however far it got, a PDU header half
    /// sent included); once in full feature phase, ping an idle initiator
    /// with NOP-In and close the connection when a ping goes unanswered
    /// (RFC 7143 §11.19).
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.release_held_login(now) {
            // It counts as heard from now, like input.
            self.last_rx = Some(now);
            return;
        }
        match self.phase {
            Phase::Login(_) => {
                if now >= self.login_deadline {
                    tracing::warn!(
                        peer = %self.setup.peer_addr,
                        timeout_ms = u64::try_from(self.cfg.login_timeout.as_millis()).unwrap_or(u64::MAX),
                        "login not completed within the login timeout; closing"
                    );
                    self.fail();
                }
                return;
            }
            Phase::Closing => return,
            Phase::FullFeature => {}
        }
        if let Some((_, sent)) = self.ping {
            if now >= sent + self.cfg.nop_timeout {
                tracing::warn!("NOP-In ping timed out; dropping connection");
                self.fail();
            }
            return;
        }
        let (Some(interval), Some(last)) = (self.cfg.nop_interval, self.last_rx) else {
            return;
        };
        if now >= last + interval {
            let ttt = self.alloc_ttt();
            self.ping = Some((ttt, now));
            let nop = NopIn {
                lun: 0,
                itt: RESERVED_TAG,
                ttt,
                // A ping does not advance StatSN (RFC 7143 §11.19.3).
                stat_sn: self.stat_sn,
                exp_cmd_sn: self.exp_cmd_sn,
                max_cmd_sn: self.max_cmd_sn,
                data: Vec::new(),
            };
            self.send(Reply::NopIn(nop));
        }
    }

    /// Ask the initiator to log out, e.g. on target shutdown (RFC 7143
    /// §11.9.1, AsyncEvent 1). `seconds` is the time it has to do so.
    pub fn request_logout(&mut self, seconds: u16) {
        if !matches!(self.phase, Phase::FullFeature) || self.async_logout_sent {
            return;
        }
        self.async_logout_sent = true;
        let msg = AsyncMessage {
            lun: 0,
            stat_sn: self.next_stat_sn(),
            exp_cmd_sn: self.exp_cmd_sn,
            max_cmd_sn: self.max_cmd_sn,
            event: 1,
            vcode: 0,
            param1: 0,
            param2: 0,
            param3: seconds,
            data: Vec::new(),
        };
        self.send(Reply::AsyncMessage(msg));
    }

    /// The transport failed or the driver gave up: stop reading.
    pub fn fail(&mut self) {
        self.phase = Phase::Closing;
        self.writes.clear();
    }

    // ----------------------------------------------------------------------
    // Header checks shared by both framings.
    // ----------------------------------------------------------------------

    /// What the BHS alone tells: only Login during login, and no data
    /// segment over the negotiated limit (checked before the payload is
    /// read, SPDK's rule: never buffer a payload we would refuse).
    fn vet_bhs(&mut self, opcode: Opcode, dsl: u32, bhs: &[u8; BHS_LEN]) -> Result<(), Refused> {
        let in_login = self.in_login();
        if in_login && opcode != Opcode::LOGIN_REQUEST {
            tracing::warn!(opcode = opcode.0, "non-login PDU during login");
            self.fail();
            return Err(Refused::Close);
        }
        let limit = if in_login {
            LOGIN_MAX_DSL
        } else {
            self.params_target_mrdsl()
        };
        if dsl > limit {
            tracing::warn!(dsl, limit, "DataSegmentLength over the negotiated limit");
            if in_login {
                self.fail();
                return Err(Refused::Close);
            }
            self.reject(PduRefusal::DataSegmentTooLong, bhs);
            return Err(Refused::Rejected);
        }
        Ok(())
    }

    /// Decode the header and apply the opcode- and state-specific checks.
    fn vet_header(
        &mut self,
        bhs: &[u8; BHS_LEN],
        ahs: &[u8],
        dsl: u32,
    ) -> Result<RequestHeader, Refused> {
        let in_login = self.in_login();
        let hdr = match RequestHeader::parse(bhs, ahs) {
            Ok(h) => h,
            Err(e) => {
                tracing::debug!(error = %e, "unparseable PDU header");
                if in_login {
                    self.fail();
                    return Err(Refused::Close);
                }
                self.reject(PduRefusal::of_pdu_error(&e), bhs);
                return Err(Refused::Rejected);
            }
        };
        if !in_login {
            if let Some(refusal) = self.precheck(&hdr, dsl) {
                self.reject(refusal, bhs);
                self.after_precheck_reject(&hdr);
                return Err(Refused::Rejected);
            }
        }
        Ok(hdr)
    }

    fn in_login(&self) -> bool {
        matches!(self.phase, Phase::Login(_))
    }

    /// The most the target accepts per PDU: TargetRecvDataSegmentLength in
    /// iSER-assisted mode (RFC 7145 §6.4), else its MaxRecvDataSegmentLength.
    fn params_target_mrdsl(&self) -> u32 {
        self.session
            .as_ref()
            .map(|s| {
                if s.params.rdma_extensions {
                    s.params.target_recv_dsl
                } else {
                    s.params.target_max_recv_dsl
                }
            })
            .unwrap_or(LOGIN_MAX_DSL)
            .max(LOGIN_MAX_DSL)
    }

    /// The most the target may send per PDU: InitiatorRecvDataSegmentLength
    /// in iSER-assisted mode (RFC 7145 §6.5), else the initiator's
    /// MaxRecvDataSegmentLength.
    fn max_send_dsl(&self) -> u32 {
        self.session
            .as_ref()
            .map(|s| {
                if s.params.rdma_extensions {
                    s.params.initiator_recv_dsl
                } else {
                    s.params.initiator_max_recv_dsl
                }
            })
            .unwrap_or(LOGIN_MAX_DSL)
    }

    /// Opcode- and state-specific checks that need only the header.
    fn precheck(&self, hdr: &RequestHeader, dsl: u32) -> Option<PduRefusal> {
        let params = self.session.as_ref().map(|s| &s.params)?;
        let discovery = params.session_type == SessionType::Discovery;
        match hdr {
            RequestHeader::Login(_) => Some(PduRefusal::LoginInFullFeature),
            RequestHeader::ScsiCommand(_) | RequestHeader::TaskMgmt(_) if discovery => {
                Some(PduRefusal::NotInDiscovery)
            }
            RequestHeader::ScsiCommand(c) => {
                if dsl > 0
                    && (!params.immediate_data
                        || !c.write
                        || dsl > params.first_burst_length
                        || dsl > c.expected_data_len)
                {
                    Some(PduRefusal::ImmediateDataRefused)
                } else {
                    None
                }
            }
            RequestHeader::Snack(_) => Some(PduRefusal::SnackNotSupported),
            RequestHeader::NopOut(n) if n.itt == RESERVED_TAG && dsl > 0 => {
                Some(PduRefusal::NopWithData)
            }
            _ => None,
        }
    }

    /// A SCSI command whose header was rejected still consumed its CmdSN.
    fn after_precheck_reject(&mut self, hdr: &RequestHeader) {
        if let RequestHeader::ScsiCommand(c) = hdr {
            if !c.immediate && c.cmd_sn == self.exp_cmd_sn {
                self.exp_cmd_sn = self.exp_cmd_sn.wrapping_add(1);
                self.max_cmd_sn = self.max_cmd_sn.wrapping_add(1);
            }
        }
    }

    /// Act on one whole PDU. `remote` is its iSER header (empty on TCP).
    fn dispatch(
        &mut self,
        hdr: RequestHeader,
        data: &[u8],
        bhs: &[u8; BHS_LEN],
        remote: ControlHeader,
        now: Instant,
    ) {
        if let Phase::Login(_) = self.phase {
            if let RequestHeader::Login(req) = hdr {
                self.handle_login(req, data, now);
            }
            return;
        }
        if self.logout.is_some() {
            // After a Logout request nothing new is accepted (RFC 7143 §11.14).
            if !matches!(hdr, RequestHeader::DataOut(_)) {
                self.reject(PduRefusal::WaitingForLogout, bhs);
                return;
            }
        }
        match hdr {
            RequestHeader::NopOut(n) => self.handle_nop_out(n, data),
            RequestHeader::ScsiCommand(c) => self.handle_scsi_command(c, data, remote),
            RequestHeader::DataOut(d) => self.handle_data_out(d, data, bhs),
            RequestHeader::TaskMgmt(t) => self.handle_tmf(t),
            RequestHeader::Text(t) => self.handle_text(t, data, bhs),
            RequestHeader::Logout(l) => self.handle_logout(l),
            RequestHeader::Login(_) | RequestHeader::Snack(_) => {
                self.reject(PduRefusal::Unhandled, bhs)
            }
        }
    }

    // ----------------------------------------------------------------------
    // Sequence numbers (RFC 7143 §4.2.2).
    // ----------------------------------------------------------------------

    pub(crate) fn next_stat_sn(&mut self) -> u32 {
        let s = self.stat_sn;
        self.stat_sn = self.stat_sn.wrapping_add(1);
        s
    }

    /// Check a non-immediate CmdSN against the window. Only the expected
    /// CmdSN is accepted: with one connection per session, anything else is
    /// outside the window or a duplicate, and is silently ignored (§4.2.2.1).
    fn accept_cmd_sn(&mut self, immediate: bool, cmd_sn: u32) -> bool {
        if immediate {
            return true;
        }
        if cmd_sn == self.exp_cmd_sn && sn_le(cmd_sn, self.max_cmd_sn) {
            self.exp_cmd_sn = self.exp_cmd_sn.wrapping_add(1);
            true
        } else {
            tracing::debug!(
                cmd_sn,
                exp = self.exp_cmd_sn,
                max = self.max_cmd_sn,
                "CmdSN outside the window; ignored"
            );
            false
        }
    }

    /// A non-immediate command finished: open the window by one.
    fn retire(&mut self, immediate: bool) {
        if !immediate {
            self.max_cmd_sn = self.max_cmd_sn.wrapping_add(1);
        }
    }

    pub(crate) fn alloc_ttt(&mut self) -> u32 {
        let t = self.next_ttt;
        self.next_ttt = self.next_ttt.wrapping_add(1);
        if self.next_ttt == RESERVED_TAG {
            self.next_ttt = 1;
        }
        t
    }

    // ----------------------------------------------------------------------
    // Output.
    // ----------------------------------------------------------------------

    pub(crate) fn send(&mut self, reply: Reply) {
        self.send_reply(reply, None);
    }

    /// Queue a PDU; on iSER, `invalidate` asks for Send with Invalidate.
    fn send_reply(&mut self, reply: Reply, invalidate: Option<u32>) {
        match &mut self.wire {
            Wire::Stream(s) => s.encode(&reply, self.hd, self.dd),
            Wire::Rdma(r) => r.push_pdu(&reply, invalidate),
        }
    }

    /// Refuse a PDU with a Reject carrying its header (RFC 7143 §11.17);
    /// the reason code comes from the one mapping, [`PduRefusal::reason`].
    /// Only in full feature phase: before it, a bad PDU closes instead.
    pub(crate) fn reject(&mut self, refusal: PduRefusal, bhs: &[u8; BHS_LEN]) {
        if !matches!(self.phase, Phase::FullFeature) {
            return;
        }
        let reason = refusal.reason();
        tracing::debug!(reason = reason.0, ?refusal, "sending Reject");
        let r = Reject {
            reason,
            stat_sn: self.next_stat_sn(),
            exp_cmd_sn: self.exp_cmd_sn,
            max_cmd_sn: self.max_cmd_sn,
            data_sn: 0,
            data: bhs.to_vec(),
        };
        self.send(Reply::Reject(r));
    }

    /// Called by the login code when the final Login Response went out.
    pub(crate) fn enter_full_feature(&mut self, info: SessionInfo, exp_cmd_sn: u32) {
        self.hd = info.params.header_digest;
        self.dd = info.params.data_digest;
        self.exp_cmd_sn = exp_cmd_sn;
        self.max_cmd_sn = exp_cmd_sn.wrapping_add(self.cfg.queue_depth.max(1) - 1);
        if info.session_type == SessionType::Normal {
            self.events.push_back(Event::LoggedIn(info.clone()));
        }
        self.session = Some(info);
        self.phase = Phase::FullFeature;
    }

    pub(crate) fn push_event(&mut self, e: Event) {
        self.events.push_back(e);
    }

    pub(crate) fn set_closing(&mut self) {
        self.phase = Phase::Closing;
    }

    // ----------------------------------------------------------------------
    // NOP (RFC 7143 §11.18, §11.19).
    // ----------------------------------------------------------------------

    fn handle_nop_out(&mut self, n: NopOut, data: &[u8]) {
        if n.itt == RESERVED_TAG {
            // An answer to our ping, or a no-reply NOP.
            if let Some((ttt, _)) = self.ping {
                if n.ttt == ttt {
                    self.ping = None;
                }
            }
            return;
        }
        if !self.accept_cmd_sn(n.immediate, n.cmd_sn) {
            return;
        }
        self.retire(n.immediate);
        let reply = NopIn {
            lun: n.lun,
            itt: n.itt,
            ttt: RESERVED_TAG,
            stat_sn: self.next_stat_sn(),
            exp_cmd_sn: self.exp_cmd_sn,
            max_cmd_sn: self.max_cmd_sn,
            data: data.to_vec(),
        };
        self.send(Reply::NopIn(reply));
    }

    // ----------------------------------------------------------------------
    // SCSI commands and Data-Out (RFC 7143 §11.3, §11.7, §11.8).
    // ----------------------------------------------------------------------

    fn handle_scsi_command(&mut self, c: ScsiCommand, data: &[u8], remote: ControlHeader) {
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
        if self.inflight.contains_key(&c.itt) || self.writes.contains_key(&c.itt) {
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
            let initial_r2t = match &self.session {
                Some(s) => s.params.initial_r2t,
                None => return,
            };
            let mut task = WriteTask {
                lun,
                buf: WriteBuf::default(),
                unsolicited_open: !c.final_bit && !initial_r2t,
                unsolicited_data_sn: 0,
                next_r2t_offset: 0,
                r2ts: VecDeque::new(),
                r2t_sn: 0,
                remote,
                solicited_base: None,
                cmd: c,
            };
            let edtl = task.edtl() as usize;
            task.buf.append(data, edtl);
            let itt = task.cmd.itt;
            self.writes.insert(itt, task);
            self.advance_write(itt);
        } else {
            self.submit(c, lun, IoBuf::default(), 0, remote);
        }
    }

    /// After data arrived for a write: dispatch it when complete, or ask
    /// for more (R2T PDUs on TCP, RDMA Reads on iSER) once the unsolicited
    /// phase is over.
    fn advance_write(&mut self, itt: u32) {
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
                let r2ts = task.r2t_sn;
                let (lun, remote, cmd) = (task.lun, task.remote, task.cmd);
                if let Some(data) = task.buf.into_data() {
                    self.submit(cmd, lun, data, r2ts, remote);
                } else {
                    // Not lent a moment ago, so unreachable; should it ever
                    // happen, write nothing rather than what may not have
                    // landed, and end the command.
                    tracing::error!(itt, "write data still held by an RDMA Read");
                    let end = Ending {
                        itt: cmd.itt,
                        immediate: cmd.immediate,
                        r2ts,
                        remote,
                    };
                    self.send_status(end, Status::CHECK_CONDITION, internal_failure());
                }
            }
            return;
        }
        if task.unsolicited_open {
            return;
        }
        match self.wire {
            Wire::Stream(_) => self.send_r2ts(itt, max_burst, max_r2t),
            Wire::Rdma(_) => self.issue_reads(itt, max_burst, max_r2t),
        }
    }

    fn handle_data_out(&mut self, d: DataOut, data: &[u8], bhs: &[u8; BHS_LEN]) {
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
        self.advance_write(d.itt);
    }

    fn submit(
        &mut self,
        c: ScsiCommand,
        lun: u64,
        data_out: IoBuf,
        r2t_count: u32,
        remote: ControlHeader,
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
            lun,
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
        let Some(task) = self.inflight.remove(&itt) else {
            return;
        };
        if self.is_closing() {
            return;
        }
        self.retire(task.immediate);
        if !resp.aborted && self.session.is_some() {
            match self.wire {
                Wire::Stream(_) => self.complete_stream(itt, &task, resp),
                Wire::Rdma(_) => self.complete_rdma(itt, &task, resp),
            }
        }
        self.maybe_finish_logout();
    }

    /// End a write task that can go no further with CHECK CONDITION, once
    /// no RDMA Read of it is outstanding.
    fn fail_write(&mut self, task: WriteTask, e: SeqError) {
        self.fail_write_with(task, e.sense());
    }

    /// End a write task with CHECK CONDITION and `sense`, once no RDMA Read
    /// of it is outstanding.
    fn fail_write_with(&mut self, task: WriteTask, sense: Vec<u8>) {
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
    fn fail_write_internally(&mut self, task: WriteTask) {
        self.fail_write_with(task, internal_failure());
    }

    /// Answer a command the connection itself fails, without the SCSI core.
    fn send_status(&mut self, end: Ending, status: Status, sense: Vec<u8>) {
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

    // ----------------------------------------------------------------------
    // Task management (RFC 7143 §11.5, §11.6).
    // ----------------------------------------------------------------------

    fn handle_tmf(&mut self, t: TaskMgmtRequest) {
        if !self.accept_cmd_sn(t.immediate, t.cmd_sn) {
            return;
        }
        let lun = decode_lun(t.lun);
        let function = match t.function {
            TmfCode::ABORT_TASK => {
                // A write still collecting data never reached the SCSI core.
                if let Some(w) = self.writes.get(&t.referenced_tag) {
                    if decode_lun(w.cmd.lun) == lun {
                        let imm = w.cmd.immediate;
                        self.writes.remove(&t.referenced_tag);
                        self.retire(imm);
                        let reads = self.reads_for(&[t.referenced_tag]);
                        let then = Deferred::Tmf {
                            itt: t.itt,
                            result: TmfResult::COMPLETE,
                            immediate: t.immediate,
                        };
                        self.after_reads(reads, then);
                        return;
                    }
                }
                TmfFunction::AbortTask {
                    tag: u64::from(t.referenced_tag),
                }
            }
            TmfCode::ABORT_TASK_SET => TmfFunction::AbortTaskSet,
            TmfCode::CLEAR_TASK_SET => TmfFunction::ClearTaskSet,
            TmfCode::CLEAR_ACA => TmfFunction::ClearAca,
            TmfCode::LOGICAL_UNIT_RESET => TmfFunction::LogicalUnitReset,
            TmfCode::TARGET_WARM_RESET => TmfFunction::TargetWarmReset,
            TmfCode::TARGET_COLD_RESET => TmfFunction::TargetColdReset,
            TmfCode::TASK_REASSIGN => {
                // Needs ERL 2 (§11.5.1).
                self.send_tmf_response(t.itt, TmfResult::REASSIGNMENT_NOT_SUPPORTED, t.immediate);
                return;
            }
            _ => {
                self.send_tmf_response(t.itt, TmfResult::REJECTED, t.immediate);
                return;
            }
        };
        // Bounded: past the running slots and the queue, the request is
        // rejected before it has any effect.
        if self.tmfs.len() >= MAX_TMFS_RUNNING && self.tmf_queue.len() >= MAX_TMFS_QUEUED {
            self.tmfs_rejected = self.tmfs_rejected.saturating_add(1);
            if self.tmfs_rejected == 1 {
                tracing::warn!(
                    running = MAX_TMFS_RUNNING,
                    queued = MAX_TMFS_QUEUED,
                    "task-management requests over the per-connection bound: answering Function Rejected"
                );
            }
            self.send_tmf_response(t.itt, TmfResult::REJECTED, t.immediate);
            return;
        }
        if matches!(
            function,
            TmfFunction::AbortTaskSet
                | TmfFunction::ClearTaskSet
                | TmfFunction::LogicalUnitReset
                | TmfFunction::TargetWarmReset
                | TmfFunction::TargetColdReset
        ) {
            // Writes still collecting data on the affected LUN(s) die here.
            let all = matches!(
                function,
                TmfFunction::TargetWarmReset | TmfFunction::TargetColdReset
            );
            let dead: Vec<(u32, bool)> = self
                .writes
                .iter()
                .filter(|(_, w)| all || decode_lun(w.cmd.lun) == lun)
                .map(|(itt, w)| (*itt, w.cmd.immediate))
                .collect();
            let itts: Vec<u32> = dead.iter().map(|(itt, _)| *itt).collect();
            for (itt, imm) in dead {
                self.writes.remove(&itt);
                self.retire(imm);
            }
            let reads = self.reads_for(&itts);
            self.fence_tmf(t.itt, reads);
        }
        self.tmf_queue.push_back(QueuedTmf {
            itt: t.itt,
            immediate: t.immediate,
            lun,
            function,
        });
        self.start_tmfs();
    }

    /// Hands queued task-management requests to the driver while running
    /// slots are free.
    fn start_tmfs(&mut self) {
        while self.tmfs.len() < MAX_TMFS_RUNNING {
            let Some(q) = self.tmf_queue.pop_front() else {
                break;
            };
            self.tmfs.insert(q.itt, q.immediate);
            self.events.push_back(Event::TaskMgmt {
                itt: q.itt,
                lun: q.lun,
                function: q.function,
            });
        }
    }

    /// Task-management requests running and waiting (for tests and stats).
    pub fn tmfs_pending(&self) -> (usize, usize) {
        (self.tmfs.len(), self.tmf_queue.len())
    }

    /// The SCSI core's answer to a task-management request.
    pub fn tmf_done(&mut self, itt: u32, resp: TmfResponse) {
        let Some(immediate) = self.tmfs.remove(&itt) else {
            return;
        };
        self.start_tmfs();
        let result = match resp {
            TmfResponse::FunctionComplete | TmfResponse::FunctionSucceeded => TmfResult::COMPLETE,
            // With one connection per session every command below ExpCmdSN
            // was received, so the §11.5.1 "consider it received" case for
            // in-window RefCmdSN cannot arise: not found means done.
            TmfResponse::TaskNotFound => TmfResult::TASK_DOES_NOT_EXIST,
            TmfResponse::IncorrectLun => TmfResult::LUN_DOES_NOT_EXIST,
            TmfResponse::NotSupported => TmfResult::NOT_SUPPORTED,
            TmfResponse::FunctionRejected => TmfResult::REJECTED,
        };
        // A non-immediate request gives its CmdSN window slot back now.
        let reads = self.take_tmf_fence(itt);
        let then = Deferred::Tmf {
            itt,
            result,
            immediate,
        };
        self.after_reads(reads, then);
    }

    fn send_tmf_response(&mut self, itt: u32, result: TmfResult, immediate: bool) {
        self.retire(immediate);
        let r = TaskMgmtResponse {
            response: result,
            itt,
            stat_sn: self.next_stat_sn(),
            exp_cmd_sn: self.exp_cmd_sn,
            max_cmd_sn: self.max_cmd_sn,
        };
        self.send(Reply::TaskMgmtResponse(r));
    }

    // ----------------------------------------------------------------------
    // Text (RFC 7143 §11.10, §11.11).
    // ----------------------------------------------------------------------

    fn handle_text(&mut self, t: TextRequest, data: &[u8], bhs: &[u8; BHS_LEN]) {
        if !self.accept_cmd_sn(t.immediate, t.cmd_sn) {
            return;
        }
        self.retire(t.immediate);
        // Continuation of a long response we are sending.
        if t.ttt != RESERVED_TAG {
            let matches = self
                .text_out
                .as_ref()
                .is_some_and(|o| o.ttt == t.ttt && o.itt == t.itt);
            if matches && data.is_empty() {
                self.send_text_chunk();
            } else {
                self.text_out = None;
                self.reject(PduRefusal::TextContinuation, bhs);
            }
            return;
        }
        self.text_out = None;
        let full = match self.text_in.push(data, t.cont) {
            Ok(Some(full)) => full,
            Ok(None) => {
                // More request text follows: answer empty with a TTT (§11.10.2).
                let ttt = self.alloc_ttt();
                self.text_out = Some(TextOut {
                    itt: t.itt,
                    ttt,
                    chunks: VecDeque::new(),
                });
                let r = TextResponse {
                    final_bit: false,
                    cont: false,
                    lun: t.lun,
                    itt: t.itt,
                    ttt,
                    stat_sn: self.next_stat_sn(),
                    exp_cmd_sn: self.exp_cmd_sn,
                    max_cmd_sn: self.max_cmd_sn,
                    data: Vec::new(),
                };
                self.send(Reply::TextResponse(r));
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "text request too long or malformed");
                self.text_in.reset();
                self.reject(PduRefusal::TextMalformed, bhs);
                return;
            }
        };
        let pairs = match parse_text(&full) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "bad text request");
                self.reject(PduRefusal::TextMalformed, bhs);
                return;
            }
        };
        let answer = self.text_answer(&pairs);
        let encoded = encode_text(&answer);
        let max = self.max_send_dsl().max(512) as usize;
        let chunks: VecDeque<Vec<u8>> = TextSplitter::split(&encoded, max).into();
        let ttt = if chunks.len() > 1 {
            self.alloc_ttt()
        } else {
            RESERVED_TAG
        };
        self.text_out = Some(TextOut {
            itt: t.itt,
            ttt,
            chunks,
        });
        self.send_text_chunk();
    }

    fn send_text_chunk(&mut self) {
        let Some(mut o) = self.text_out.take() else {
            return;
        };
        let chunk = o.chunks.pop_front().unwrap_or_default();
        let more = !o.chunks.is_empty();
        let r = TextResponse {
            final_bit: !more,
            cont: more,
            lun: 0,
            itt: o.itt,
            ttt: if more { o.ttt } else { RESERVED_TAG },
            stat_sn: self.next_stat_sn(),
            exp_cmd_sn: self.exp_cmd_sn,
            max_cmd_sn: self.max_cmd_sn,
            data: chunk,
        };
        self.send(Reply::TextResponse(r));
        if more {
            self.text_out = Some(o);
        }
    }

    fn text_answer(&self, pairs: &[(String, String)]) -> Vec<(String, String)> {
        let Some(s) = &self.session else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (k, v) in pairs {
            if k == "SendTargets" {
                let only = match s.session_type {
                    SessionType::Discovery => None,
                    SessionType::Normal => Some(s.target.as_str()),
                };
                out.extend(crate::discovery::send_targets(
                    &self.cfg,
                    v,
                    &s.initiator,
                    &self.setup.local_addr,
                    only,
                ));
            } else {
                // Renegotiation in full feature phase is not offered.
                out.push((k.clone(), "NotUnderstood".to_string()));
            }
        }
        out
    }

    // ----------------------------------------------------------------------
    // Logout (RFC 7143 §11.14, §11.15).
    // ----------------------------------------------------------------------

    fn handle_logout(&mut self, l: LogoutRequest) {
        if !self.accept_cmd_sn(l.immediate, l.cmd_sn) {
            return;
        }
        self.retire(l.immediate);
        let my_cid = self.session.as_ref().map(|s| s.cid).unwrap_or(0);
        let response = match l.reason {
            0 => 0,
            1 if l.cid == my_cid => 0,
            1 => 1,
            // Removing a connection for recovery needs ERL 2.
            2 => 2,
            _ => 3,
        };
        self.logout = Some(PendingLogout {
            itt: l.itt,
            response,
        });
        // Collecting writes will never complete now.
        self.writes.clear();
        self.maybe_finish_logout();
    }

    /// Send the Logout Response once no task is left in flight (and, on
    /// iSER, no RDMA Read still reads an initiator buffer).
    fn maybe_finish_logout(&mut self) {
        if self.logout.is_none() || !self.inflight.is_empty() || !self.reads_idle() {
            return;
        }
        let Some(l) = self.logout.take() else {
            return;
        };
        let r = LogoutResponse {
            response: l.response,
            itt: l.itt,
            stat_sn: self.next_stat_sn(),
            exp_cmd_sn: self.exp_cmd_sn,
            max_cmd_sn: self.max_cmd_sn,
            time2wait: 0,
            time2retain: 0,
        };
        self.send(Reply::LogoutResponse(r));
        if l.response == 0 {
            self.phase = Phase::Closing;
        }
    }
}

/// Fixed-format sense data for the few errors the transport itself raises.
fn fixed_sense(key: SenseKey, asc: Asc) -> Vec<u8> {
    Sense::new(key, asc).fixed()
}

/// HARDWARE ERROR / INTERNAL TARGET FAILURE, fixed format.
fn internal_failure() -> Vec<u8> {
    fixed_sense(SenseKey::HARDWARE_ERROR, Asc::INTERNAL_TARGET_FAILURE)
}

/// How a write's Data-Out sequence went wrong. Each maps to one sense code
/// (RFC 7143 §11.4.7.2, SPC-4 Annex D), so the initiator can tell why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SeqError {
    /// Unsolicited data not allowed here (InitialR2T, FirstBurstLength, after F).
    UnexpectedUnsolicited,
    /// Target Transfer Tag of no open R2T.
    UnknownTtt,
    DataSn,
    Offset,
    TooMuch,
    /// iSER: the command advertised no buffer for data RDMA must move.
    MissingBuffer,
}

impl SeqError {
    fn sense(self) -> Vec<u8> {
        let asc = match self {
            SeqError::UnexpectedUnsolicited => Asc::UNEXPECTED_UNSOLICITED_DATA,
            SeqError::UnknownTtt => Asc::INVALID_TARGET_PORT_TRANSFER_TAG_RECEIVED,
            SeqError::DataSn | SeqError::MissingBuffer => Asc::DATA_PHASE_ERROR,
            SeqError::Offset => Asc::DATA_OFFSET_ERROR,
            // RFC 7143 §11.4.7.2, "Incorrect amount of data".
            SeqError::TooMuch => Asc::NOT_ENOUGH_UNSOLICITED_DATA,
        };
        fixed_sense(SenseKey::ABORTED_COMMAND, asc)
    }
}

/// Encode a flat LUN for a PDU header.
pub fn lun_field(lun: u64) -> u64 {
    encode_lun(lun)
}
