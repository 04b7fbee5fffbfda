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
//! data moves, which the `stream` and `rdma` submodules hold (wire
//! state only, behind one internal enum) and `tcp_ops` and `iser_ops`
//! drive. This file holds the connection's state, the driver-facing API,
//! the dispatcher and output; each job has its own submodule: `vet`
//! (header checks), `window` (CmdSN window, StatSN, TTTs), `nop`, `scsi`
//! (commands and Data-Out), `tmf`, `text`, `logout` and `login_phase`
//! (the connection's side of `crate::login`). Nothing here blocks,
//! allocates beyond the negotiated limits, or panics on what a peer sends.

mod ending;
mod iser_ops;
mod login_phase;
mod logout;
mod nop;
mod rdma;
mod scsi;
mod serial;
mod stream;
mod tcp_ops;
mod text;
mod tmf;
mod vet;
mod window;

pub use rdma::{IserOp, IserParams, IserSend, RdmaRead, RdmaWrite};
pub use serial::{sn_le, sn_lt};

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rustc_hash::FxHashMap;

use rustgt_scsi::{Command, TmfFunction};

use crate::budget::Account;
use crate::config::PortalConfig;
use crate::iser::ControlHeader;
use crate::login::LoginState;
use crate::negotiate::{SessionType, Transport};
use crate::pdu::{encode_lun, Reject, Reply, RequestHeader, ScsiCommand, BHS_LEN};
use crate::refusal::PduRefusal;
pub use crate::session::SessionInfo;
use crate::session::SessionTable;
use crate::task::{InFlight, WriteTask};
use crate::text::TextAssembler;

/// Work for the driver.
#[derive(Debug)]
pub enum Event {
    /// A Normal session reached full feature phase.
    LoggedIn(SessionInfo),
    /// Session reinstatement: the driver must close this other connection
    /// and abort its tasks (RFC 7143 §6.3.5).
    Reinstate {
        /// The driver's id of the connection to close ([`ConnectionSetup::conn_id`]).
        conn_id: u64,
    },
    /// Run this SCSI command; answer with [`Connection::complete`].
    Command(Command),
    /// Run this task-management function; answer with [`Connection::tmf_done`].
    TaskMgmt {
        /// Initiator Task Tag of the TMF request, for [`Connection::tmf_done`].
        itt: u32,
        /// The LUN the function acts on, decoded from the SAM LUN field
        /// (an unsupported address form gives [`crate::pdu::INVALID_LUN`]).
        lun: u64,
        /// The function, with its referenced tag where it has one.
        function: TmfFunction,
    },
}

/// Fixed per-connection facts the driver supplies.
#[derive(Debug, Clone)]
pub struct ConnectionSetup {
    /// The driver's id for the connection, unique in the process; the
    /// session table and [`Event::Reinstate`] name connections by it.
    pub conn_id: u64,
    /// TCP or iSER: how PDUs are framed and data moves.
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
    response: crate::pdu::LogoutResponseCode,
}

/// Limit on login PDU data segments before MaxRecvDataSegmentLength is
/// negotiated (RFC 7143 §13.12 default).
const LOGIN_MAX_DSL: u32 = 8192;

/// Task-management functions one connection may have handed to the driver
/// (running in the SCSI core) at once. Immediate TMF requests take no
/// CmdSN window slot, so without this a peer could make the daemon run any
/// number of them at once.
pub const MAX_TMFS_RUNNING: usize = 4;

/// Most immediate SCSI commands (outside the CmdSN window) a connection
/// may have in flight; more are refused with a Reject, reason 0x06.
pub const MAX_IMMEDIATE_COMMANDS: usize = 16;

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
    cfg: Arc<PortalConfig>,
    setup: ConnectionSetup,
    sessions: Arc<Mutex<SessionTable>>,
    phase: Phase,
    /// Framing and data movement of the transport.
    wire: Wire,
    events: VecDeque<Event>,
    hd: bool,
    dd: bool,
    stat_sn: u32,
    exp_cmd_sn: u32,
    max_cmd_sn: u32,
    session: Option<SessionInfo>,
    /// Keyed by ITT with FxHash: the initiator chooses the keys, but
    /// these maps hold at most the session's queue depth, so colliding
    /// ITTs cost that initiator a few probes, no more.
    writes: FxHashMap<u32, WriteTask>,
    /// Reads (on TCP, longer than a small payload) waiting for room in the
    /// data buffer budget before they run: the command, its LUN, its iSER
    /// header. Their ITTs are in `budget_wait`.
    reads_waiting: HashMap<u32, (ScsiCommand, u64, ControlHeader)>,
    inflight: FxHashMap<u32, InFlight>,
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
    /// The latest `now` a driver gave (input, message or timer).
    clock: Instant,
    /// This connection's part of the data buffer budget.
    account: Account,
    /// Writes waiting for room in the budget before their first R2T or
    /// RDMA Read, by ITT in arrival order (at most the CmdSN window).
    budget_wait: VecDeque<u32>,
    /// When to try the waiting writes again, and the pause after that.
    budget_retry: Option<Instant>,
    budget_backoff: Duration,
    /// Window slots held back while the session is over its share of the
    /// budget and others wait: MaxCmdSN advances by them later.
    window_owed: u32,
    /// When to look for writes whose initiator sits on solicited data
    /// ([`PortalConfig::data_out_timeout`]).
    data_out_check: Option<Instant>,
}

/// First pause before a write waiting for budget is tried again; it
/// doubles while the write keeps waiting, up to [`BUDGET_RETRY_MAX`].
const BUDGET_RETRY_MIN: Duration = Duration::from_millis(1);
/// Longest pause between two tries of a write waiting for budget.
const BUDGET_RETRY_MAX: Duration = Duration::from_millis(16);

/// The one place the transports differ: how PDUs are framed and how data
/// moves.
#[derive(Debug)]
enum Wire {
    /// A byte stream: PDUs with digests and padding, R2T and Data-In PDUs.
    Stream(stream::StreamWire),
    /// RDMA messages: one PDU per Send, data by RDMA Write and Read.
    Rdma(rdma::RdmaWire),
}

impl Connection {
    /// A connection at the start of login, answering with `cfg` and
    /// registering its session in `sessions`; `now` starts the login timeout.
    pub fn new(
        cfg: Arc<PortalConfig>,
        sessions: Arc<Mutex<SessionTable>>,
        setup: ConnectionSetup,
        now: Instant,
    ) -> Self {
        let login = LoginState::new(&cfg, setup.transport, setup.random);
        let cfg_login_timeout = cfg.login_timeout;
        let text_in = TextAssembler::new(cfg.max_text_len);
        let account = Account::new(Arc::clone(&cfg.data_budget));
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
            writes: FxHashMap::default(),
            reads_waiting: HashMap::new(),
            inflight: FxHashMap::default(),
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
            clock: now,
            account,
            budget_wait: VecDeque::new(),
            budget_retry: None,
            budget_backoff: BUDGET_RETRY_MIN,
            window_owed: 0,
            data_out_check: None,
        }
    }

    /// The session, once login has completed.
    pub fn session(&self) -> Option<&SessionInfo> {
        self.session.as_ref()
    }

    /// The driver's id given in [`ConnectionSetup::conn_id`].
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
        let keepalive = match self.ping {
            Some((_, sent)) => Some(sent + self.cfg.nop_timeout),
            None => self
                .cfg
                .nop_interval
                .and_then(|i| self.last_rx.map(|t| t + i)),
        };
        [self.data_out_check, self.budget_retry]
            .into_iter()
            .flatten()
            .fold(keepalive, |a, b| Some(a.map_or(b, |a| a.min(b))))
    }

    /// Drive the timers: run a login request the brake held back once its
    /// time has come ([`crate::brake`]); close a connection whose login is
    /// not over by its deadline (however far it got, a PDU header half
    /// sent included); once in full feature phase, ping an idle initiator
    /// with NOP-In and close the connection when a ping goes unanswered
    /// (RFC 7143 §11.19).
    pub fn handle_timeout(&mut self, now: Instant) {
        self.clock = self.clock.max(now);
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
        if self.data_out_check.is_some_and(|at| now >= at) {
            self.check_data_out(now);
            if self.is_closing() {
                return;
            }
        }
        if self.budget_retry.is_some_and(|at| now >= at) {
            self.budget_retry = None;
            self.pump_budget();
        }
        self.keepalive(now);
    }

    /// The transport failed or the driver gave up: stop reading.
    pub fn fail(&mut self) {
        self.phase = Phase::Closing;
        self.writes.clear();
        self.reads_waiting.clear();
        self.budget_wait.clear();
        self.budget_retry = None;
        self.data_out_check = None;
        self.account.set_waiting(false);
    }

    /// Bytes of the data buffer budget this connection's writes hold
    /// (admitted for solicitation; unsolicited data is counted daemon-wide
    /// only).
    pub fn budget_held(&self) -> u64 {
        self.account.held()
    }

    /// Immediate SCSI commands in flight: run by the SCSI core or still
    /// collecting their data. Counted only when one more arrives (rare:
    /// initiators send SCSI commands in the window).
    fn immediate_in_flight(&self) -> usize {
        self.inflight.values().filter(|t| t.immediate).count()
            + self.writes.values().filter(|w| w.cmd.immediate).count()
            + self
                .reads_waiting
                .values()
                .filter(|r| r.0.immediate)
                .count()
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
            // Immediate commands sit outside the CmdSN window, so their
            // number in flight has its own bound (RFC 7143 §11.17.1, reason
            // 0x06); a peer cannot queue work or output without end.
            RequestHeader::ScsiCommand(c)
                if c.immediate && self.immediate_in_flight() >= MAX_IMMEDIATE_COMMANDS =>
            {
                self.reject(PduRefusal::TooManyImmediate, bhs)
            }
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
    // Output.
    // ----------------------------------------------------------------------

    fn send(&mut self, reply: Reply) {
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
    fn reject(&mut self, refusal: PduRefusal, bhs: &[u8; BHS_LEN]) {
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
    fn enter_full_feature(&mut self, info: SessionInfo, exp_cmd_sn: u32) {
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

    fn push_event(&mut self, e: Event) {
        self.events.push_back(e);
    }

    fn set_closing(&mut self) {
        self.phase = Phase::Closing;
    }
}

/// Encode a flat LUN for a PDU header.
pub fn lun_field(lun: u64) -> u64 {
    encode_lun(lun)
}
