//! One session of the load generator: its own OS thread, its own TCP
//! connection, sending and receiving on it. Between events the thread waits
//! in `ppoll` for "socket readable or the next due time" with a nanosecond
//! timeout and a 1 ns timer slack, so paced arrivals keep to the schedule at
//! tens of microseconds.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use nix::poll::{ppoll, PollFd, PollFlags};
use nix::sys::time::TimeSpec;
use rustgt_iscsi::pdu::*;
use rustgt_iscsi::text::parse_text;
use rustgt_test_initiator::pdu::{
    self, login_request, nop_out, scsi_command, CommandIds, LoginIds,
};
use rustgt_test_initiator::{rw16, CmdResult, READ_16, WRITE_16};
use socket2::{Domain, Socket, Type};

use crate::schedule::{Rng, Schedule};
use crate::{LoadError, Pattern, Plan, RwMix};

/// Longest wait for any answer of the target (login, a command, logout);
/// a dead target ends the run within this.
pub const STALL: Duration = Duration::from_secs(5);
/// MaxRecvDataSegmentLength this initiator declares.
const OUR_MAX_RECV: u32 = 262_144;

/// What one session measured.
#[derive(Debug)]
pub struct SessionStats {
    /// Latency from due time to completion, ns (measured window only).
    pub latency: Histogram<u64>,
    /// Send time minus due time, ns (measured window only).
    pub lateness: Histogram<u64>,
    /// Completion minus send time: the target's (and the network's)
    /// share of the latency, without the client's lateness, ns.
    pub service: Histogram<u64>,
    /// Send time minus the later of due time and the moment a slot of the
    /// full queue depth was freed: the client's own delay, ns.
    pub own_lateness: Histogram<u64>,
    pub reads: u64,
    pub writes: u64,
    /// Commands due in the window and sent.
    pub due: u64,
    /// Commands (due whenever) that completed within the window.
    pub completed_in_window: u64,
    /// SCSI errors by "status 0xNN sense K/ASC/ASCQ".
    pub errors: BTreeMap<String, u64>,
    /// Login attempts that failed before the one that succeeded.
    pub login_retries: u64,
    /// The transport error that ended the session early, if any.
    pub transport: Option<String>,
}

impl SessionStats {
    pub fn new() -> SessionStats {
        SessionStats {
            latency: new_histogram(),
            lateness: new_histogram(),
            service: new_histogram(),
            own_lateness: new_histogram(),
            reads: 0,
            writes: 0,
            due: 0,
            completed_in_window: 0,
            errors: BTreeMap::new(),
            login_retries: 0,
            transport: None,
        }
    }
}

impl Default for SessionStats {
    fn default() -> Self {
        Self::new()
    }
}

/// A histogram of nanoseconds up to 100 s, 2 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    // 2 significant digits (1%) up to 100 s: about 20 KB each, so a
    // thousand sessions stay small.
    match Histogram::new_with_bounds(1, 100_000_000_000, 2) {
        Ok(h) => h,
        Err(_) => unreachable!("constant bounds are valid"),
    }
}

/// A command in flight.
#[derive(Debug, Clone, Copy)]
struct InFlight {
    due: Instant,
    sent: Instant,
    write: bool,
    measured: bool,
}

/// One logged-in session.
#[derive(Debug)]
pub struct Conn {
    sock: TcpStream,
    buf: Vec<u8>,
    cmd_sn: u32,
    exp_stat_sn: u32,
    max_cmd_sn: u32,
    next_itt: u32,
    max_send: usize,
    immediate: Option<usize>,
    name: String,
}

/// Attempts of [`Conn::login_retrying`] at most.
pub const LOGIN_TRIES: u64 = 40;
/// First bound of the pause between two attempts (doubling up to 1 s);
/// each pause is drawn uniformly below the bound, so sessions started
/// together do not come back together.
pub const LOGIN_BACKOFF: Duration = Duration::from_millis(50);
/// Longest [`Conn::login_retrying`] keeps trying.
pub const LOGIN_RETRY_FOR: Duration = Duration::from_secs(20);

fn terr(name: &str, what: impl std::fmt::Display) -> LoadError {
    LoadError::Transport(format!("{name}: {what}"))
}

/// CmdSN `a` is at most `b` in serial arithmetic (RFC 1982).
fn sn_le(a: u32, b: u32) -> bool {
    a == b || (b.wrapping_sub(a) as i32) > 0
}

impl Conn {
    /// [`Conn::login`], tried again as an initiator does when the target
    /// closes, resets or refuses the connection before the session is up
    /// or answers with a target error (a target's cap on logins in
    /// progress from one address, for example, when many sessions start at
    /// once): at most [`LOGIN_TRIES`] attempts, pauses drawn below
    /// [`LOGIN_BACKOFF`], doubling, for at most [`LOGIN_RETRY_FOR`] in all. A login the target
    /// refuses with an initiator error is not tried again. Returns the
    /// connection and how many attempts failed before it.
    pub fn login_retrying(
        addr: SocketAddr,
        source: Option<IpAddr>,
        target: &str,
        initiator: &str,
        isid: [u8; 6],
    ) -> Result<(Conn, u64), LoadError> {
        let started = Instant::now();
        let mut backoff = LOGIN_BACKOFF;
        let mut failed = 0u64;
        let mut rng = Rng::new(u64::from_be_bytes([
            0, 0, isid[0], isid[1], isid[2], isid[3], isid[4], isid[5],
        ]));
        loop {
            match Conn::login(addr, source, target, initiator, isid) {
                Ok(c) => return Ok((c, failed)),
                Err(LoadError::Transport(_))
                    if failed + 1 < LOGIN_TRIES
                        && started.elapsed() + backoff < LOGIN_RETRY_FOR =>
                {
                    failed += 1;
                    let ms = u64::try_from(backoff.as_millis()).unwrap_or(1000);
                    std::thread::sleep(Duration::from_millis(1 + rng.below(ms)));
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Connects (bounded) and logs in to `target` as `initiator`.
    pub fn login(
        addr: SocketAddr,
        source: Option<IpAddr>,
        target: &str,
        initiator: &str,
        isid: [u8; 6],
    ) -> Result<Conn, LoadError> {
        let sock = connect(addr, source)
            .map_err(|e| terr(initiator, format_args!("connect {addr}: {e}")))?;
        let _ = sock.set_nodelay(true);
        sock.set_read_timeout(Some(Duration::from_millis(200)))
            .and_then(|()| sock.set_write_timeout(Some(STALL)))
            .map_err(|e| terr(initiator, e))?;
        let mut c = Conn {
            sock,
            buf: Vec::with_capacity(1 << 16),
            cmd_sn: 1,
            exp_stat_sn: 0,
            max_cmd_sn: 1,
            next_itt: 1,
            max_send: 8192,
            immediate: Some(65536),
            name: initiator.to_owned(),
        };
        let security = [
            ("InitiatorName", initiator),
            ("TargetName", target),
            ("SessionType", "Normal"),
            ("AuthMethod", "None"),
        ];
        c.login_stage(isid, Stage::SECURITY, Stage::OPERATIONAL, &security)?;
        let ours = OUR_MAX_RECV.to_string();
        let operational = [
            ("HeaderDigest", "None"),
            ("DataDigest", "None"),
            ("InitialR2T", "Yes"),
            ("ImmediateData", "Yes"),
            ("MaxRecvDataSegmentLength", ours.as_str()),
            ("ErrorRecoveryLevel", "0"),
        ];
        c.login_stage(isid, Stage::OPERATIONAL, Stage::FULL_FEATURE, &operational)?;
        Ok(c)
    }

    fn login_stage(
        &mut self,
        isid: [u8; 6],
        csg: Stage,
        nsg: Stage,
        keys: &[(&str, &str)],
    ) -> Result<(), LoadError> {
        let mut keys = keys;
        for _ in 0..8 {
            let ids = LoginIds {
                isid,
                tsih: 0,
                itt: 0,
                cid: 0,
                cmd_sn: self.cmd_sn,
                exp_stat_sn: self.exp_stat_sn,
            };
            let req = login_request(ids, csg, nsg, true, keys);
            self.send(&req.encode(false, false))?;
            let lr = match self.recv(Instant::now() + STALL)? {
                Reply::LoginResponse(lr) => lr,
                other => {
                    return Err(terr(
                        &self.name,
                        format_args!("login: unexpected {other:?}"),
                    ))
                }
            };
            if lr.status.class() == 2 {
                return Err(LoadError::Refused(format!(
                    "{}: login refused: {:?}",
                    self.name, lr.status
                )));
            }
            if lr.status != LoginStatus::SUCCESS {
                return Err(terr(
                    &self.name,
                    format_args!("login refused: {:?}", lr.status),
                ));
            }
            self.exp_stat_sn = lr.stat_sn.wrapping_add(1);
            self.max_cmd_sn = lr.max_cmd_sn;
            let answered = parse_text(&lr.data)
                .map_err(|e| terr(&self.name, format_args!("login text: {e}")))?;
            for (k, v) in &answered {
                match k.as_str() {
                    "MaxRecvDataSegmentLength" => {
                        if let Ok(n) = v.parse::<usize>() {
                            self.max_send = n.max(512);
                        }
                    }
                    "ImmediateData" if v == "No" => self.immediate = None,
                    "FirstBurstLength" => {
                        if let (Some(b), Ok(n)) = (self.immediate.as_mut(), v.parse::<usize>()) {
                            *b = n;
                        }
                    }
                    _ => {}
                }
            }
            if lr.transit && lr.nsg == nsg {
                return Ok(());
            }
            keys = &[];
        }
        Err(terr(
            &self.name,
            format_args!("the target never completed login stage {csg:?}"),
        ))
    }

    fn send(&mut self, bytes: &[u8]) -> Result<(), LoadError> {
        self.sock
            .write_all(bytes)
            .map_err(|e| terr(&self.name, format_args!("send: {e}")))
    }

    /// One PDU already buffered, if complete.
    fn decoded(&mut self) -> Result<Option<Reply>, LoadError> {
        match Reply::decode(&self.buf, false, false) {
            Ok((reply, used)) => {
                self.buf.drain(..used);
                if let Some(m) = max_cmd_sn(&reply) {
                    if sn_le(self.max_cmd_sn, m) {
                        self.max_cmd_sn = m;
                    }
                }
                Ok(Some(reply))
            }
            Err(PduError::Incomplete(_)) => Ok(None),
            Err(e) => Err(terr(
                &self.name,
                format_args!("undecodable PDU from the target: {e}"),
            )),
        }
    }

    /// Reads what the socket has (waiting at most until `until`); false on
    /// timeout.
    fn fill(&mut self, until: Instant) -> Result<bool, LoadError> {
        let left = until.saturating_duration_since(Instant::now());
        if !wait_readable(&self.sock, left)
            .map_err(|e| terr(&self.name, format_args!("poll: {e}")))?
        {
            return Ok(false);
        }
        let mut chunk = [0u8; 65536];
        match self.sock.read(&mut chunk) {
            Ok(0) => Err(terr(&self.name, "the target closed the connection")),
            Ok(n) => {
                self.buf
                    .extend_from_slice(chunk.get(..n).unwrap_or_default());
                Ok(true)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(terr(&self.name, format_args!("receive: {e}"))),
        }
    }

    /// The next PDU, before `until`.
    fn recv(&mut self, until: Instant) -> Result<Reply, LoadError> {
        loop {
            if let Some(r) = self.decoded()? {
                return Ok(r);
            }
            if Instant::now() >= until {
                return Err(terr(&self.name, format_args!("no answer within {STALL:?}")));
            }
            self.fill(until)?;
        }
    }

    fn answer_ping(&mut self, nop: &NopIn) -> Result<(), LoadError> {
        if nop.ttt == RESERVED_TAG {
            return Ok(());
        }
        let p = nop_out(
            nop.lun,
            RESERVED_TAG,
            nop.ttt,
            self.cmd_sn,
            self.exp_stat_sn,
        );
        self.send(&p)
    }

    fn take_itt(&mut self) -> u32 {
        let itt = self.next_itt;
        self.next_itt = self.next_itt.wrapping_add(1).max(1);
        itt
    }

    /// Sends a command; returns its ITT.
    fn start(
        &mut self,
        lun: u64,
        cdb: &[u8],
        data_out: &[u8],
        read_len: u32,
    ) -> Result<u32, LoadError> {
        let itt = self.take_itt();
        let out_len = u32::try_from(data_out.len()).unwrap_or(u32::MAX);
        let imm = self
            .immediate
            .map_or(0, |b| data_out.len().min(b).min(self.max_send));
        let ids = CommandIds {
            lun: encode_lun(lun),
            itt,
            cmd_sn: self.cmd_sn,
            exp_stat_sn: self.exp_stat_sn,
            read: read_len > 0,
            write: !data_out.is_empty(),
            final_bit: true,
            expected_data_len: out_len.max(read_len),
        };
        let cmd = scsi_command(ids, cdb, data_out.get(..imm).unwrap_or_default().to_vec());
        self.cmd_sn = self.cmd_sn.wrapping_add(1);
        self.send(&cmd.encode(false, false))?;
        Ok(itt)
    }

    /// The Data-Out sequence an R2T asks for.
    fn answer_r2t(&mut self, r2t: &R2t, lun: u64, data: &[u8]) -> Result<(), LoadError> {
        let start = usize::try_from(r2t.buffer_offset).unwrap_or(usize::MAX);
        let len = usize::try_from(r2t.desired_len).unwrap_or(usize::MAX);
        let Some(wanted) = start.checked_add(len).and_then(|end| data.get(start..end)) else {
            return Err(terr(
                &self.name,
                format_args!("R2T beyond the data: {r2t:?}"),
            ));
        };
        let n = wanted.chunks(self.max_send).count();
        for (sn, chunk) in wanted.chunks(self.max_send).enumerate() {
            let header = DataOut {
                final_bit: sn + 1 == n,
                lun: encode_lun(lun),
                itt: r2t.itt,
                ttt: r2t.ttt,
                exp_stat_sn: self.exp_stat_sn,
                data_sn: u32::try_from(sn).unwrap_or(u32::MAX),
                buffer_offset: u32::try_from(start + sn * self.max_send).unwrap_or(u32::MAX),
            };
            let req = pdu::data_out(header, chunk.to_vec());
            self.send(&req.encode(false, false))?;
        }
        Ok(())
    }

    /// One command, waiting for its end (setup commands).
    fn command(&mut self, lun: u64, cdb: &[u8], read_len: u32) -> Result<CmdResult, LoadError> {
        let itt = self.start(lun, cdb, &[], read_len)?;
        let until = Instant::now() + STALL;
        let mut data = Vec::new();
        loop {
            match self.recv(until)? {
                Reply::DataIn(d) if d.itt == itt => {
                    data.extend_from_slice(&d.data);
                    if d.has_status {
                        self.exp_stat_sn = d.stat_sn.wrapping_add(1);
                        return Ok(CmdResult {
                            status: d.status,
                            sense: Vec::new(),
                            data,
                        });
                    }
                }
                Reply::ScsiResponse(r) if r.itt == itt => {
                    self.exp_stat_sn = r.stat_sn.wrapping_add(1);
                    return Ok(CmdResult {
                        status: r.status,
                        sense: r.sense,
                        data,
                    });
                }
                Reply::NopIn(nop) => self.answer_ping(&nop)?,
                Reply::AsyncMessage(_) => {}
                other => return Err(terr(&self.name, format_args!("unexpected {other:?}"))),
            }
        }
    }

    /// TEST UNIT READY until GOOD (a new I_T nexus may start with a unit
    /// attention), then READ CAPACITY(16): the LUN's blocks and block size.
    pub fn prepare(&mut self, lun: u64) -> Result<(u64, u32), LoadError> {
        let mut last = None;
        for _ in 0..16 {
            let r = self.command(lun, &[0; 6], 0)?;
            if r.is_good() {
                last = None;
                break;
            }
            last = Some(r);
        }
        if let Some(r) = last {
            return Err(terr(&self.name, format_args!("TEST UNIT READY: {r}")));
        }
        let mut cdb = [0u8; 16];
        cdb[0] = 0x9e;
        cdb[1] = 0x10;
        cdb[13] = 32;
        let r = self.command(lun, &cdb, 32)?;
        let parsed = (|| {
            let last_lba = u64::from_be_bytes(r.data.get(0..8)?.try_into().ok()?);
            let bs = u32::from_be_bytes(r.data.get(8..12)?.try_into().ok()?);
            Some((last_lba.checked_add(1)?, bs))
        })();
        match parsed {
            Some((blocks, bs)) if r.is_good() && bs > 0 => Ok((blocks, bs)),
            _ => Err(terr(&self.name, format_args!("READ CAPACITY(16): {r}"))),
        }
    }

    /// Logout closing the session, waiting (bounded) for the answer.
    pub fn logout(mut self) -> Result<(), LoadError> {
        let itt = self.take_itt();
        let req = Request {
            header: RequestHeader::Logout(LogoutRequest {
                immediate: true,
                reason: LogoutReason::CLOSE_SESSION,
                itt,
                cid: 0,
                cmd_sn: self.cmd_sn,
                exp_stat_sn: self.exp_stat_sn,
            }),
            data: Vec::new(),
        };
        self.send(&req.encode(false, false))?;
        let until = Instant::now() + STALL;
        loop {
            match self.recv(until)? {
                Reply::LogoutResponse(_) => return Ok(()),
                Reply::NopIn(nop) => self.answer_ping(&nop)?,
                _ => {}
            }
        }
    }

    /// The paced (or, at rate 0, saturating) run of one session: commands
    /// due on `sched` from `start` until `end`; those due in
    /// `[measure_from, end)` are measured. Then waits for those in flight.
    pub fn run(
        &mut self,
        plan: &Plan,
        sched: &mut Schedule,
        rng: &mut Rng,
        lun_blocks: u64,
        block_size: u32,
        stats: &mut SessionStats,
    ) -> Result<(), LoadError> {
        let io_blocks = u32::try_from(plan.bs / u64::from(block_size))
            .unwrap_or(u32::MAX)
            .max(1);
        let span = (lun_blocks / u64::from(io_blocks)).max(1);
        let io_bytes = u64::from(io_blocks) * u64::from(block_size);
        let payload = vec![0x5au8; usize::try_from(io_bytes).unwrap_or(0)];
        let read_len = u32::try_from(io_bytes).unwrap_or(u32::MAX);
        let mut seq = rng.below(span);
        let mut flying: HashMap<u32, InFlight> = HashMap::with_capacity(plan.qd * 2);
        let mut last_progress = Instant::now();
        // When the queue depth, full, last freed a slot: a command due
        // before that waited for the target, not for this client.
        let mut freed_at: Option<Instant> = None;
        loop {
            let now = Instant::now();
            // Send every command that is due while there is room.
            while flying.len() < plan.qd && sn_le(self.cmd_sn, self.max_cmd_sn) {
                let Some(due) = sched.next_due(now) else {
                    break;
                };
                // Nothing due after the window, and nothing sent after it
                // (an overloaded run ends on time; its shortfall shows in
                // the achieved rate).
                if due >= plan.end || now >= plan.end {
                    break;
                }
                // Not due yet: wait for it (below).
                if due > Instant::now() {
                    break;
                }
                let slot = if plan.pattern == Pattern::Random {
                    rng.below(span)
                } else {
                    let s = seq;
                    seq = (seq + 1) % span;
                    s
                };
                let write = match plan.rw {
                    RwMix::Read => false,
                    RwMix::Write => true,
                    RwMix::Mix(pct) => rng.below(100) >= u64::from(pct),
                };
                let lba = slot * u64::from(io_blocks);
                let at = Instant::now();
                let sent = if write {
                    self.start(plan.lun, &rw16(WRITE_16, lba, io_blocks), &payload, 0)?
                } else {
                    self.start(plan.lun, &rw16(READ_16, lba, io_blocks), &[], read_len)?
                };
                sched.advance();
                let measured = due >= plan.measure_from;
                if measured {
                    stats.due += 1;
                    let _ = stats
                        .lateness
                        .record(nanos(at.saturating_duration_since(due)).max(1));
                    let ready = freed_at.map_or(due, |f| f.max(due));
                    let _ = stats
                        .own_lateness
                        .record(nanos(at.saturating_duration_since(ready)).max(1));
                }
                if flying.is_empty() {
                    last_progress = at;
                }
                flying.insert(
                    sent,
                    InFlight {
                        due,
                        sent: at,
                        write,
                        measured,
                    },
                );
            }
            // Handle every complete reply.
            let mut progressed = false;
            while let Some(reply) = self.decoded()? {
                progressed = true;
                let done = match reply {
                    Reply::DataIn(d) if d.has_status => {
                        self.exp_stat_sn = d.stat_sn.wrapping_add(1);
                        Some((
                            d.itt,
                            CmdResult {
                                status: d.status,
                                sense: Vec::new(),
                                data: Vec::new(),
                            },
                        ))
                    }
                    Reply::DataIn(_) => None,
                    Reply::ScsiResponse(r) => {
                        self.exp_stat_sn = r.stat_sn.wrapping_add(1);
                        if r.response != 0 {
                            return Err(terr(
                                &self.name,
                                format_args!(
                                    "iSCSI response 0x{:02x} for ITT {}",
                                    r.response, r.itt
                                ),
                            ));
                        }
                        Some((
                            r.itt,
                            CmdResult {
                                status: r.status,
                                sense: r.sense,
                                data: Vec::new(),
                            },
                        ))
                    }
                    Reply::R2t(r2t) => {
                        self.answer_r2t(&r2t, plan.lun, &payload)?;
                        None
                    }
                    Reply::NopIn(nop) => {
                        self.answer_ping(&nop)?;
                        None
                    }
                    Reply::AsyncMessage(_) => None,
                    Reply::Reject(r) => {
                        return Err(terr(&self.name, format_args!("Reject: {:?}", r.reason)))
                    }
                    other => return Err(terr(&self.name, format_args!("unexpected {other:?}"))),
                };
                if let Some((itt, res)) = done {
                    if flying.len() >= plan.qd {
                        freed_at = Some(Instant::now());
                    }
                    let Some(f) = flying.remove(&itt) else {
                        return Err(terr(
                            &self.name,
                            format_args!("status for unknown ITT {itt}"),
                        ));
                    };
                    let at = Instant::now();
                    if at >= plan.measure_from && at < plan.end {
                        stats.completed_in_window += 1;
                    }
                    if f.measured {
                        let _ = stats
                            .latency
                            .record(nanos(at.saturating_duration_since(f.due)).max(1));
                        let _ = stats
                            .service
                            .record(nanos(at.saturating_duration_since(f.sent)).max(1));
                        if f.write {
                            stats.writes += 1
                        } else {
                            stats.reads += 1
                        }
                        if !res.is_good() {
                            *stats.errors.entry(res.to_string()).or_insert(0) += 1;
                        }
                    }
                }
            }
            let now = Instant::now();
            if progressed {
                last_progress = now;
            }
            // An idle session (no command ever due) stays until the end.
            let finished = now >= plan.end || sched.next_due(now).is_some_and(|d| d >= plan.end);
            if finished && flying.is_empty() {
                return Ok(());
            }
            if !flying.is_empty() && now.saturating_duration_since(last_progress) > STALL {
                return Err(terr(
                    &self.name,
                    format_args!("{} commands unanswered for {STALL:?}", flying.len()),
                ));
            }
            // Wait for the socket, or the next due time when a slot is free.
            let mut until = now + Duration::from_millis(100);
            if flying.len() < plan.qd && !finished {
                if let Some(d) = sched.next_due(now) {
                    until = until.min(d);
                }
            }
            if until > now {
                self.fill(until)?;
            } else if !finished && flying.len() < plan.qd {
                continue;
            } else {
                self.fill(now + Duration::from_millis(100))?;
            }
        }
    }
}

/// A bounded connect, from `source` when given.
fn connect(addr: SocketAddr, source: Option<IpAddr>) -> std::io::Result<TcpStream> {
    let Some(src) = source else {
        return TcpStream::connect_timeout(&addr, STALL);
    };
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    sock.bind(&SocketAddr::new(src, 0).into())?;
    sock.connect_timeout(&addr.into(), STALL)?;
    Ok(sock.into())
}

/// Waits up to `left` for `sock` to be readable.
fn wait_readable(sock: &TcpStream, left: Duration) -> nix::Result<bool> {
    let mut fds = [PollFd::new(sock.as_fd(), PollFlags::POLLIN)];
    let ts = TimeSpec::from_duration(left);
    match ppoll(&mut fds, Some(ts), None) {
        Ok(n) => Ok(n > 0),
        Err(nix::errno::Errno::EINTR) => Ok(false),
        Err(e) => Err(e),
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn max_cmd_sn(r: &Reply) -> Option<u32> {
    Some(match r {
        Reply::NopIn(x) => x.max_cmd_sn,
        Reply::ScsiResponse(x) => x.max_cmd_sn,
        Reply::DataIn(x) if x.has_status => x.max_cmd_sn,
        Reply::R2t(x) => x.max_cmd_sn,
        Reply::LogoutResponse(x) => x.max_cmd_sn,
        Reply::AsyncMessage(x) => x.max_cmd_sn,
        Reply::TaskMgmtResponse(x) => x.max_cmd_sn,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_add_up() {
        let mut total = new_histogram();
        for i in 1..=1000u64 {
            let mut h = new_histogram();
            h.record(i * 1000).unwrap();
            total.add(&h).unwrap();
        }
        assert_eq!(total.len(), 1000);
        let p50 = total.value_at_quantile(0.5);
        assert!((495_000..=505_000).contains(&p50), "{p50}");
    }
}
