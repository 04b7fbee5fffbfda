//! `rustgt bench floor`: the least an iSCSI target can do, as a benchmark's
//! reference. One thread, one `epoll` (through mio), every connection on
//! it; each PDU is decoded with rustgt's own codec and answered at once,
//! with no SCSI semantics behind it: a read gets zeros in Data-In PDUs of at
//! most the initiator's segment length (the last with status), READ
//! CAPACITY(16) a 1 GiB LUN of 512-byte blocks, every other command GOOD.
//! What it costs per I/O, loopback TCP, a wake-up and the least parsing,
//! any target on the same machine pays too, so a paced row's CPU can be
//! read against it (`tests/bench/vs-tgt --floor`).
//!
//! It answers any login without authentication, so it listens on loopback
//! addresses only. Bounded: at most [`MAX_CONNECTIONS`] connections, each
//! with at most [`IN_CAP`] bytes of input and [`OUT_CAP`] of output
//! waiting; a PDU it cannot decode, or a request it does not serve (text,
//! task management, SNACK, Data-Out, a write larger than its immediate
//! data), closes that connection or gets CHECK CONDITION, never a panic.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use rustgt_iscsi::pdu::{
    DataIn, LoginResponse, LoginStatus, LogoutResponse, LogoutResponseCode, NopIn, PduError, Reply,
    Request, RequestHeader, ScsiCommand, ScsiResponse, Stage, RESERVED_TAG,
};
use rustgt_scsi::{Asc, Sense, SenseKey, Status};

/// Connections served at once; more are closed as they come.
pub const MAX_CONNECTIONS: usize = 4096;
/// Input a connection may have waiting for a whole PDU: a header, the
/// largest AHS and the data segment it declares it takes, with digests.
pub const IN_CAP: usize = 48 + 1024 + OUR_MAX_RECV as usize + 8;
/// Output past which a connection's input is not read until the socket
/// takes what waits.
pub const OUT_CAP: usize = 4 << 20;
/// The largest read served (longer ones get CHECK CONDITION).
pub const MAX_READ: u32 = 1 << 20;
/// The data segment the floor takes (MaxRecvDataSegmentLength and
/// FirstBurstLength it declares).
const OUR_MAX_RECV: u32 = 65536;
/// The command window it grants past ExpCmdSN.
const WINDOW: u32 = 64;
/// The LUN's size it reports: 1 GiB of 512-byte blocks.
const BLOCKS: u64 = 1 << 21;
const BLOCK_LEN: u32 = 512;
const LISTENER: Token = Token(0);
/// How soon an accept that failed (no file descriptor left) is tried again.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);
static ZEROS: [u8; 65536] = [0; 65536];

/// `rustgt bench floor`: options.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct FloorArgs {
    /// The loopback address and port to listen on.
    #[arg(long, default_value = "127.0.0.1:3299")]
    pub listen: SocketAddr,
}

/// Why the floor responder could not serve.
#[derive(Debug, thiserror::Error)]
pub enum FloorError {
    /// The address is not a loopback address.
    #[error("--listen {0}: the floor answers any login without authentication; it listens on loopback addresses only")]
    NotLoopback(SocketAddr),
    /// Binding or polling failed.
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// One connection's state.
struct Conn {
    sock: TcpStream,
    input: Vec<u8>,
    out: Vec<u8>,
    stat_sn: u32,
    exp_cmd_sn: u32,
    /// The initiator's MaxRecvDataSegmentLength: the largest Data-In
    /// segment it takes.
    peer_max_recv: usize,
    /// A logout was answered: close once the output is out.
    closing: bool,
    writable_wanted: bool,
}

/// Serves until an I/O error of the listener or the poll; prints the
/// address it listens on first.
pub fn serve(a: &FloorArgs) -> Result<(), FloorError> {
    if !a.listen.ip().is_loopback() {
        return Err(FloorError::NotLoopback(a.listen));
    }
    let mut listener = TcpListener::bind(a.listen)?;
    let mut poll = Poll::new()?;
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)?;
    println!(
        "rustgt bench floor: listening on {}",
        listener.local_addr()?
    );
    let _ = io::stdout().flush();
    let mut conns: Vec<Option<Conn>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut events = Events::with_capacity(256);
    let mut chunk = vec![0u8; 65536];
    // The listener's readiness is edge-triggered: when an accept failed
    // for want of a descriptor, the connections still queued raise no new
    // edge, so it is tried again after a pause instead.
    let mut accept_stalled = false;
    loop {
        let wait = accept_stalled.then_some(ACCEPT_RETRY);
        if let Err(e) = poll.poll(&mut events, wait) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e.into());
        }
        if accept_stalled {
            accept_stalled = accept_all(&listener, &poll, &mut conns, &mut free);
        }
        for ev in events.iter() {
            if ev.token() == LISTENER {
                accept_stalled = accept_all(&listener, &poll, &mut conns, &mut free);
                continue;
            }
            let id = ev.token().0.wrapping_sub(1);
            let Some(slot) = conns.get_mut(id) else {
                continue;
            };
            let keep = match slot.as_mut() {
                Some(c) => c.turn(&poll, ev.token(), &mut chunk),
                None => continue,
            };
            if !keep {
                if let Some(mut c) = slot.take() {
                    let _ = poll.registry().deregister(&mut c.sock);
                }
                free.push(id);
            }
        }
    }
}

/// Accepts every queued connection. True when an accept failed with the
/// queue maybe not empty (no file descriptor left, say): the caller tries
/// again after [`ACCEPT_RETRY`].
fn accept_all(
    listener: &TcpListener,
    poll: &Poll,
    conns: &mut Vec<Option<Conn>>,
    free: &mut Vec<usize>,
) -> bool {
    loop {
        let mut sock = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // A connection that failed before it was accepted (the next
            // one is tried), or no file descriptor left (later).
            Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => continue,
            Err(_) => return true,
        };
        if conns.len() - free.len() >= MAX_CONNECTIONS {
            continue; // dropped: closed
        }
        let _ = sock.set_nodelay(true);
        let id = free.pop().unwrap_or(conns.len());
        if poll
            .registry()
            .register(&mut sock, Token(id + 1), Interest::READABLE)
            .is_err()
        {
            if id < conns.len() {
                free.push(id);
            }
            continue;
        }
        let c = Conn {
            sock,
            input: Vec::new(),
            out: Vec::new(),
            stat_sn: 1,
            exp_cmd_sn: 0,
            peer_max_recv: 8192,
            closing: false,
            writable_wanted: false,
        };
        match conns.get_mut(id) {
            Some(slot) => *slot = Some(c),
            None => conns.push(Some(c)),
        }
    }
}

impl Conn {
    /// One readiness event: send what waits, read what came, answer it.
    /// False: the connection ends.
    fn turn(&mut self, poll: &Poll, token: Token, chunk: &mut [u8]) -> bool {
        loop {
            // What came before (left while the output was full) first.
            let Some(all) = self.answer() else {
                return false;
            };
            if !self.flush() {
                return false;
            }
            if !all || self.closing {
                if self.out.len() < OUT_CAP && !self.closing {
                    continue; // the socket took it: answer the rest
                }
                break; // the writable edge brings the next turn
            }
            let room = IN_CAP.saturating_sub(self.input.len()).min(chunk.len());
            let Some(buf) = chunk.get_mut(..room) else {
                return false;
            };
            if buf.is_empty() {
                return false; // a PDU larger than it may be
            }
            match self.sock.read(buf) {
                Ok(0) => return false,
                Ok(n) => {
                    self.input
                        .extend_from_slice(buf.get(..n).unwrap_or_default());
                    if n < room {
                        // A short read emptied the socket (its next bytes
                        // bring a new edge): answer, and wait unless the
                        // output stopped the answers.
                        match self.answer() {
                            None => return false,
                            Some(all) => {
                                if !self.flush() {
                                    return false;
                                }
                                if all || self.out.len() >= OUT_CAP {
                                    break;
                                }
                            }
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        if self.closing && self.out.is_empty() {
            return false;
        }
        let want = !self.out.is_empty();
        if want != self.writable_wanted {
            let interest = if want {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            if poll
                .registry()
                .reregister(&mut self.sock, token, interest)
                .is_err()
            {
                return false;
            }
            self.writable_wanted = want;
        }
        true
    }

    /// Writes what the socket takes now. False on a write error.
    fn flush(&mut self) -> bool {
        let mut sent = 0;
        while sent < self.out.len() {
            match self.sock.write(self.out.get(sent..).unwrap_or_default()) {
                Ok(0) => return false,
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        self.out.drain(..sent);
        true
    }

    /// Answers the whole PDUs in `input` while the output has room: true
    /// when none is left, false when the output stopped it, `None` when one
    /// could not be decoded or is not served.
    fn answer(&mut self) -> Option<bool> {
        let mut used = 0;
        let mut all = false;
        while self.out.len() < OUT_CAP && !self.closing {
            let rest = self.input.get(used..).unwrap_or_default();
            let (req, n) = match Request::decode(rest, false, false) {
                Ok(r) => r,
                // One that cannot fit the input's bound is not waited for.
                Err(PduError::Incomplete(more)) if rest.len().saturating_add(more) > IN_CAP => {
                    return None;
                }
                Err(PduError::Incomplete(_)) => {
                    all = true;
                    break;
                }
                Err(_) => return None,
            };
            used += n;
            if !self.reply(req) {
                return None;
            }
        }
        self.input.drain(..used);
        Some(all || self.closing)
    }

    fn stat_sn(&mut self) -> u32 {
        let s = self.stat_sn;
        self.stat_sn = s.wrapping_add(1);
        s
    }

    fn took(&mut self, cmd_sn: u32, immediate: bool) {
        if !immediate {
            self.exp_cmd_sn = cmd_sn.wrapping_add(1);
        }
    }

    fn max_cmd_sn(&self) -> u32 {
        self.exp_cmd_sn.wrapping_add(WINDOW - 1)
    }

    fn reply(&mut self, req: Request) -> bool {
        match req.header {
            RequestHeader::Login(l) => {
                self.exp_cmd_sn = l.cmd_sn;
                for (k, v) in keys(&req.data) {
                    if k == "MaxRecvDataSegmentLength" {
                        if let Ok(n) = v.parse::<usize>() {
                            self.peer_max_recv = n.clamp(512, MAX_READ as usize);
                        }
                    }
                }
                let text: &[u8] = if l.csg == Stage::SECURITY {
                    b"TargetPortalGroupTag=1\0"
                } else {
                    b"HeaderDigest=None\0DataDigest=None\0InitialR2T=Yes\0ImmediateData=Yes\0\
                      MaxRecvDataSegmentLength=65536\0FirstBurstLength=65536\0\
                      MaxBurstLength=262144\0ErrorRecoveryLevel=0\0"
                };
                let done = l.transit && l.nsg == Stage::FULL_FEATURE;
                let r = LoginResponse {
                    transit: l.transit,
                    cont: false,
                    csg: l.csg,
                    nsg: if l.transit { l.nsg } else { Stage::SECURITY },
                    version_max: 0,
                    version_active: 0,
                    isid: l.isid,
                    tsih: if done { 1 } else { 0 },
                    itt: l.itt,
                    stat_sn: self.stat_sn(),
                    exp_cmd_sn: self.exp_cmd_sn,
                    max_cmd_sn: self.max_cmd_sn(),
                    status: LoginStatus::SUCCESS,
                    data: text.to_vec(),
                };
                Reply::LoginResponse(r).encode_into(&mut self.out, false, false);
            }
            RequestHeader::ScsiCommand(c) => {
                self.took(c.cmd_sn, c.immediate);
                self.command(&c, req.data.len());
            }
            RequestHeader::NopOut(n) => {
                self.took(n.cmd_sn, n.immediate);
                if n.itt != RESERVED_TAG {
                    let r = NopIn {
                        lun: n.lun,
                        itt: n.itt,
                        ttt: RESERVED_TAG,
                        stat_sn: self.stat_sn(),
                        exp_cmd_sn: self.exp_cmd_sn,
                        max_cmd_sn: self.max_cmd_sn(),
                        data: req.data,
                    };
                    Reply::NopIn(r).encode_into(&mut self.out, false, false);
                }
            }
            RequestHeader::Logout(l) => {
                self.took(l.cmd_sn, l.immediate);
                let r = LogoutResponse {
                    response: LogoutResponseCode::CLOSED,
                    itt: l.itt,
                    stat_sn: self.stat_sn(),
                    exp_cmd_sn: self.exp_cmd_sn,
                    max_cmd_sn: self.max_cmd_sn(),
                    time2wait: 0,
                    time2retain: 0,
                };
                Reply::LogoutResponse(r).encode_into(&mut self.out, false, false);
                self.closing = true;
            }
            // Text, task management, SNACK, Data-Out: not served.
            _ => return false,
        }
        true
    }

    /// A SCSI command: zeros for a read, the capacity for READ CAPACITY(16),
    /// GOOD for anything else; CHECK CONDITION for a read over
    /// [`MAX_READ`] or a write with more data than it carried.
    fn command(&mut self, c: &ScsiCommand, immediate_len: usize) {
        let cdb: &[u8] = &c.cdb;
        let len = c.expected_data_len;
        if (c.read && len > MAX_READ) || (c.write && len as usize > immediate_len) {
            let sense = Sense::new(SenseKey::ILLEGAL_REQUEST, Asc::INVALID_FIELD_IN_CDB);
            self.status(c, Status::CHECK_CONDITION, sense.fixed());
            return;
        }
        if !c.read || len == 0 {
            self.status(c, Status::GOOD, Vec::new());
            return;
        }
        let mut capacity = [0u8; 32];
        let data: &[u8] = if cdb.first() == Some(&0x9e) {
            if let Some(b) = capacity.get_mut(..8) {
                b.copy_from_slice(&(BLOCKS - 1).to_be_bytes());
            }
            if let Some(b) = capacity.get_mut(8..12) {
                b.copy_from_slice(&BLOCK_LEN.to_be_bytes());
            }
            &capacity
        } else {
            &[]
        };
        let total = len as usize;
        let mut offset = 0usize;
        let mut data_sn = 0u32;
        while offset < total {
            let seg = (total - offset).min(self.peer_max_recv).min(ZEROS.len());
            let last = offset + seg == total;
            let payload: Vec<u8>;
            let bytes: &[u8] = if data.is_empty() {
                ZEROS.get(..seg).unwrap_or_default()
            } else {
                let mut p = vec![0u8; seg];
                let n = data.len().saturating_sub(offset).min(seg);
                if let (Some(d), Some(s)) = (p.get_mut(..n), data.get(offset..offset + n)) {
                    d.copy_from_slice(s);
                }
                payload = p;
                &payload
            };
            let d = DataIn {
                final_bit: last,
                ack: false,
                overflow: false,
                underflow: false,
                has_status: last,
                status: Status::GOOD.0,
                lun: c.lun,
                itt: c.itt,
                ttt: RESERVED_TAG,
                stat_sn: if last { self.stat_sn() } else { 0 },
                exp_cmd_sn: self.exp_cmd_sn,
                max_cmd_sn: self.max_cmd_sn(),
                data_sn,
                buffer_offset: offset as u32,
                residual: 0,
                data: Vec::new(),
            };
            let framing = d.encode_parts(bytes, false, false);
            self.out.extend_from_slice(framing.head());
            self.out.extend_from_slice(bytes);
            self.out.extend_from_slice(framing.tail());
            offset += seg;
            data_sn = data_sn.wrapping_add(1);
        }
    }

    fn status(&mut self, c: &ScsiCommand, status: Status, sense: Vec<u8>) {
        let r = ScsiResponse {
            bidi_overflow: false,
            bidi_underflow: false,
            overflow: false,
            underflow: false,
            response: 0,
            status: status.0,
            itt: c.itt,
            snack_tag: 0,
            stat_sn: self.stat_sn(),
            exp_cmd_sn: self.exp_cmd_sn,
            max_cmd_sn: self.max_cmd_sn(),
            exp_data_sn: 0,
            bidi_residual: 0,
            residual: 0,
            sense,
        };
        Reply::ScsiResponse(r).encode_into(&mut self.out, false, false);
    }
}

/// The key=value pairs of a login's text (NUL-separated).
fn keys(data: &[u8]) -> impl Iterator<Item = (&str, &str)> {
    data.split(|b| *b == 0)
        .filter_map(|kv| std::str::from_utf8(kv).ok())
        .filter_map(|kv| kv.split_once('='))
}
