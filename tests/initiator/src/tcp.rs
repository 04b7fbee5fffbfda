//! A minimal blocking iSCSI initiator for black-box tests that need exact
//! CDBs, several sessions of their own, or control over the I_T nexus
//! (initiator name and ISID): libiscsi's command-line tools cannot send a
//! PERSISTENT RESERVE OUT or race two COMPARE AND WRITE commands.
//!
//! Built on `rustgt_iscsi`'s PDU codec (RFC 7143 §11). One command at a
//! time per session; no authentication, no digests; immediate data, R2T
//! (§11.8) and Data-In (§11.7) sequences are handled, and the target's
//! NOP-In pings answered. Every wait is bounded by [`REPLY_TIMEOUT`].

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use rustgt_iscsi::pdu::*;
use rustgt_iscsi::text::parse_text;

use crate::pdu::{self, login_request, nop_out, scsi_command, CommandIds, LoginIds};

/// Longest wait for one reply PDU.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(30);
/// MaxRecvDataSegmentLength this initiator declares (§13.12).
const OUR_MAX_RECV: u32 = 65536;

/// SCSI status codes (SAM-5 §5.3).
pub const GOOD: u8 = 0x00;
pub const CHECK_CONDITION: u8 = 0x02;
pub const RESERVATION_CONFLICT: u8 = 0x18;

/// Sense keys (SPC-4 §4.5.6).
pub const UNIT_ATTENTION: u8 = 0x6;
pub const MISCOMPARE: u8 = 0xe;

/// What a SCSI command came back with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmdResult {
    pub status: u8,
    /// Sense data (fixed or descriptor format), empty when none.
    pub sense: Vec<u8>,
    /// Data-In, as many bytes as the target sent.
    pub data: Vec<u8>,
}

impl CmdResult {
    /// Sense key, ASC and ASCQ, from fixed (SPC-4 §4.5.3) or descriptor
    /// (§4.5.2) format sense data.
    pub fn sense_code(&self) -> Option<(u8, u8, u8)> {
        let s = &self.sense;
        match s.first()? & 0x7f {
            0x70 | 0x71 => Some((s.get(2)? & 0x0f, *s.get(12)?, *s.get(13)?)),
            0x72 | 0x73 => Some((s.get(1)? & 0x0f, *s.get(2)?, *s.get(3)?)),
            _ => None,
        }
    }

    /// The INFORMATION field when valid: fixed format with VALID set, or the
    /// descriptor format's information descriptor (type 0, §4.5.2.2).
    pub fn information(&self) -> Option<u64> {
        let s = &self.sense;
        match s.first()? {
            0xf0 | 0xf1 => {
                let b: [u8; 4] = s.get(3..7)?.try_into().ok()?;
                Some(u64::from(u32::from_be_bytes(b)))
            }
            0x72 | 0x73 => {
                let mut descs = s.get(8..)?;
                while descs.len() >= 2 {
                    let len = usize::from(*descs.get(1)?) + 2;
                    let d = descs.get(..len)?;
                    if d.first() == Some(&0x00) && d.get(2)? & 0x80 != 0 {
                        let b: [u8; 8] = d.get(4..12)?.try_into().ok()?;
                        return Some(u64::from_be_bytes(b));
                    }
                    descs = descs.get(len..)?;
                }
                None
            }
            _ => None,
        }
    }

    pub fn is_good(&self) -> bool {
        self.status == GOOD
    }
}

impl std::fmt::Display for CmdResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "status 0x{:02x}", self.status)?;
        if let Some((key, asc, ascq)) = self.sense_code() {
            write!(f, " sense {key:x}/{asc:02x}/{ascq:02x}")?;
        }
        Ok(())
    }
}

/// The target closed the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed;

/// One TCP connection to a target: raw bytes out, decoded replies in. Also
/// used bare by tests that send malformed or out-of-place PDUs.
#[derive(Debug)]
pub struct Wire {
    sock: TcpStream,
    buf: Vec<u8>,
}

impl Wire {
    pub fn connect(portal: SocketAddr) -> Wire {
        let sock = TcpStream::connect(portal).unwrap_or_else(|e| panic!("connect {portal}: {e}"));
        Wire::from_stream(sock)
    }

    /// Connects from the local address `source` (any port). The kernel
    /// picks 127.0.0.1 as the source of every loopback connection by
    /// itself; this one comes from e.g. 127.0.0.2.
    pub fn connect_from(source: Ipv4Addr, portal: SocketAddr) -> Wire {
        use socket2::{Domain, Socket, Type};
        let sock = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
        sock.bind(&SocketAddr::from((source, 0)).into())
            .unwrap_or_else(|e| panic!("bind {source}: {e}"));
        sock.connect(&portal.into())
            .unwrap_or_else(|e| panic!("connect {portal} from {source}: {e}"));
        Wire::from_stream(sock.into())
    }

    /// Over a connection made elsewhere (e.g. from a chosen source address).
    pub fn from_stream(sock: TcpStream) -> Wire {
        sock.set_read_timeout(Some(Duration::from_millis(200)))
            .expect("read timeout");
        let _ = sock.set_nodelay(true);
        Wire {
            sock,
            buf: Vec::new(),
        }
    }

    /// The socket under this wire.
    pub fn stream(&self) -> &TcpStream {
        &self.sock
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.sock
            .write_all(bytes)
            .unwrap_or_else(|e| panic!("send: {e}"));
    }

    /// The next reply within `within`: `Ok(None)` on timeout, `Err` once
    /// the target has closed. An undecodable reply fails the test.
    pub fn try_recv(&mut self, within: Duration) -> Result<Option<Reply>, Closed> {
        let deadline = Instant::now() + within;
        loop {
            match Reply::decode(&self.buf, false, false) {
                Ok((reply, used)) => {
                    self.buf.drain(..used);
                    return Ok(Some(reply));
                }
                Err(PduError::Incomplete(_)) => {}
                Err(e) => panic!("undecodable PDU from the target: {e}"),
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            let mut chunk = [0u8; 65536];
            match self.sock.read(&mut chunk) {
                Ok(0) => return Err(Closed),
                Ok(n) => self
                    .buf
                    .extend_from_slice(chunk.get(..n).unwrap_or_default()),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => return Err(Closed),
            }
        }
    }

    /// Reads until the target closes (bounded); false if it never does.
    pub fn closes_within(&mut self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if self.try_recv(Duration::from_millis(200)).is_err() {
                return true;
            }
        }
        false
    }
}

/// One logged-in session on one connection.
#[derive(Debug)]
pub struct Session {
    wire: Wire,
    cmd_sn: u32,
    exp_stat_sn: u32,
    next_itt: u32,
    /// The target's MaxRecvDataSegmentLength: largest PDU data we may send.
    max_send: usize,
    /// Immediate data allowed (ImmediateData=Yes) and its bound
    /// (FirstBurstLength).
    immediate: Option<usize>,
    pub initiator: String,
    pub isid: [u8; 6],
}

impl Session {
    /// Connects and logs in to `target` (no authentication) as `initiator`
    /// with ISID `isid`, negotiating InitialR2T=Yes and ImmediateData=Yes.
    pub fn login(portal: SocketAddr, target: &str, initiator: &str, isid: [u8; 6]) -> Session {
        Self::login_on(Wire::connect(portal), target, initiator, isid)
    }

    /// [`Session::login`] on a connection of the caller's (e.g.
    /// [`Wire::connect_from`]).
    pub fn login_on(wire: Wire, target: &str, initiator: &str, isid: [u8; 6]) -> Session {
        let mut s = Session {
            wire,
            cmd_sn: 1,
            exp_stat_sn: 0,
            next_itt: 1,
            max_send: 8192,
            immediate: Some(65536),
            initiator: initiator.to_owned(),
            isid,
        };
        let security = [
            ("InitiatorName", initiator),
            ("TargetName", target),
            ("SessionType", "Normal"),
            ("AuthMethod", "None"),
        ];
        s.login_stage(Stage::SECURITY, Stage::OPERATIONAL, &security);
        let ours = OUR_MAX_RECV.to_string();
        let operational = [
            ("HeaderDigest", "None"),
            ("DataDigest", "None"),
            ("InitialR2T", "Yes"),
            ("ImmediateData", "Yes"),
            ("MaxRecvDataSegmentLength", ours.as_str()),
            ("ErrorRecoveryLevel", "0"),
        ];
        s.login_stage(Stage::OPERATIONAL, Stage::FULL_FEATURE, &operational);
        s
    }

    /// One login stage; repeats the request (with no keys) while the
    /// target does not transit yet. Applies the keys the target answers.
    fn login_stage(&mut self, csg: Stage, nsg: Stage, keys: &[(&str, &str)]) {
        let mut keys = keys;
        for _ in 0..8 {
            let ids = LoginIds {
                isid: self.isid,
                tsih: 0,
                itt: 0,
                cid: 0,
                cmd_sn: self.cmd_sn,
                exp_stat_sn: self.exp_stat_sn,
            };
            let req = login_request(ids, csg, nsg, true, keys);
            self.send(&req.encode(false, false));
            let lr = match self.recv() {
                Reply::LoginResponse(lr) => lr,
                other => panic!("{}: login: unexpected {other:?}", self.initiator),
            };
            assert_eq!(
                lr.status,
                LoginStatus::SUCCESS,
                "{}: login refused",
                self.initiator
            );
            self.exp_stat_sn = lr.stat_sn.wrapping_add(1);
            let answered = parse_text(&lr.data).expect("login response text");
            for (k, v) in &answered {
                self.apply_key(k, v);
            }
            if lr.transit && lr.nsg == nsg {
                return;
            }
            keys = &[];
        }
        panic!(
            "{}: the target never completed login stage {csg:?}",
            self.initiator
        );
    }

    fn apply_key(&mut self, key: &str, value: &str) {
        match key {
            "MaxRecvDataSegmentLength" => {
                if let Ok(n) = value.parse::<usize>() {
                    self.max_send = n.max(512);
                }
            }
            "ImmediateData" if value == "No" => self.immediate = None,
            "FirstBurstLength" => {
                if let (Some(b), Ok(n)) = (self.immediate.as_mut(), value.parse::<usize>()) {
                    *b = n;
                }
            }
            _ => {}
        }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.wire.send(bytes);
    }

    /// The next PDU from the target (bounded wait).
    fn recv(&mut self) -> Reply {
        match self.wire.try_recv(REPLY_TIMEOUT) {
            Ok(Some(reply)) => reply,
            Ok(None) => panic!("{}: no reply within {REPLY_TIMEOUT:?}", self.initiator),
            Err(Closed) => panic!("{}: the target closed the connection", self.initiator),
        }
    }

    /// Raw bytes on the session's connection (malformed PDUs), and the
    /// replies to them.
    pub fn wire(&mut self) -> &mut Wire {
        &mut self.wire
    }

    /// The CmdSN the next command would carry.
    pub fn cmd_sn(&self) -> u32 {
        self.cmd_sn
    }

    /// An immediate NOP-Out with `itt` (§11.18); true when the target
    /// echoes it in a NOP-In.
    pub fn ping(&mut self, itt: u32) -> bool {
        let pdu = nop_out(0, itt, RESERVED_TAG, self.cmd_sn, self.exp_stat_sn);
        self.send(&pdu);
        matches!(
            self.wire.try_recv(REPLY_TIMEOUT),
            Ok(Some(Reply::NopIn(n))) if n.itt == itt
        )
    }

    /// Answers a NOP-In ping (§11.19: a TTT other than 0xffffffff wants a
    /// NOP-Out echoing it).
    fn answer_ping(&mut self, nop: &NopIn) {
        if nop.ttt == RESERVED_TAG {
            return;
        }
        let pdu = nop_out(
            nop.lun,
            RESERVED_TAG,
            nop.ttt,
            self.cmd_sn,
            self.exp_stat_sn,
        );
        self.send(&pdu);
    }

    fn take_itt(&mut self) -> u32 {
        let itt = self.next_itt;
        self.next_itt = self.next_itt.wrapping_add(1).max(1);
        itt
    }

    /// Sends the CDB to `lun` with `data_out` (a write) or `read_len` bytes
    /// of Data-In expected (a read; not both), and waits for its status.
    pub fn command(&mut self, lun: u64, cdb: &[u8], data_out: &[u8], read_len: u32) -> CmdResult {
        assert!(
            data_out.is_empty() || read_len == 0,
            "bidirectional commands are not supported"
        );
        let itt = self.take_itt();
        let raw_lun = encode_lun(lun);
        let out_len = u32::try_from(data_out.len()).expect("data fits a command");
        let immediate_len = self
            .immediate
            .map_or(0, |burst| data_out.len().min(burst).min(self.max_send));
        let ids = CommandIds {
            lun: raw_lun,
            itt,
            cmd_sn: self.cmd_sn,
            exp_stat_sn: self.exp_stat_sn,
            read: read_len > 0,
            write: !data_out.is_empty(),
            // InitialR2T=Yes: no unsolicited Data-Out follows.
            final_bit: true,
            expected_data_len: out_len.max(read_len),
        };
        let immediate = data_out.get(..immediate_len).unwrap_or_default().to_vec();
        let cmd = scsi_command(ids, cdb, immediate);
        self.cmd_sn = self.cmd_sn.wrapping_add(1);
        self.send(&cmd.encode(false, false));

        let mut data = Vec::new();
        loop {
            match self.recv() {
                Reply::R2t(r2t) if r2t.itt == itt => self.send_r2t_data(&r2t, raw_lun, data_out),
                Reply::DataIn(d) if d.itt == itt => {
                    let at = usize::try_from(d.buffer_offset).expect("offset");
                    let end = at + d.data.len();
                    if data.len() < end {
                        data.resize(end, 0);
                    }
                    if let Some(dst) = data.get_mut(at..end) {
                        dst.copy_from_slice(&d.data);
                    }
                    if d.has_status {
                        self.exp_stat_sn = d.stat_sn.wrapping_add(1);
                        return CmdResult {
                            status: d.status,
                            sense: Vec::new(),
                            data,
                        };
                    }
                }
                Reply::ScsiResponse(r) if r.itt == itt => {
                    self.exp_stat_sn = r.stat_sn.wrapping_add(1);
                    assert_eq!(r.response, 0, "{}: iSCSI target failure", self.initiator);
                    return CmdResult {
                        status: r.status,
                        sense: r.sense,
                        data,
                    };
                }
                Reply::NopIn(nop) => self.answer_ping(&nop),
                Reply::AsyncMessage(_) => {}
                other => panic!(
                    "{}: unexpected PDU while waiting for ITT {itt}: {other:?}",
                    self.initiator
                ),
            }
        }
    }

    /// Sends a command without Data-Out that expects `read_len` bytes of
    /// Data-In (0 for none) and returns at once with its ITT and CmdSN;
    /// its replies are for the caller to read ([`Session::task_mgmt`]
    /// returns them, or [`Session::wire`]).
    pub fn start_command(&mut self, lun: u64, cdb: &[u8], read_len: u32) -> (u32, u32) {
        let itt = self.take_itt();
        let cmd_sn = self.cmd_sn;
        let ids = CommandIds {
            lun: encode_lun(lun),
            itt,
            cmd_sn,
            exp_stat_sn: self.exp_stat_sn,
            read: read_len > 0,
            write: false,
            final_bit: true,
            expected_data_len: read_len,
        };
        let cmd = scsi_command(ids, cdb, Vec::new());
        self.cmd_sn = self.cmd_sn.wrapping_add(1);
        self.send(&cmd.encode(false, false));
        (itt, cmd_sn)
    }

    /// An immediate task management function request (§11.5) on `lun`;
    /// `referenced` is the ITT and CmdSN of the task ABORT TASK names
    /// (ignored by the other functions). Waits (bounded) for the answer
    /// and returns its response code with every other PDU that arrived
    /// meanwhile (NOP-In pings are answered, not returned).
    pub fn task_mgmt(
        &mut self,
        function: TmfCode,
        lun: u64,
        referenced: (u32, u32),
    ) -> (TmfResult, Vec<Reply>) {
        let itt = self.take_itt();
        let req = Request {
            header: RequestHeader::TaskMgmt(TaskMgmtRequest {
                immediate: true,
                function,
                lun: encode_lun(lun),
                itt,
                referenced_tag: if function == TmfCode::ABORT_TASK {
                    referenced.0
                } else {
                    RESERVED_TAG
                },
                cmd_sn: self.cmd_sn,
                exp_stat_sn: self.exp_stat_sn,
                ref_cmd_sn: referenced.1,
                exp_data_sn: 0,
            }),
            data: Vec::new(),
        };
        self.send(&req.encode(false, false));
        let mut others = Vec::new();
        loop {
            match self.recv() {
                Reply::TaskMgmtResponse(r) if r.itt == itt => {
                    self.exp_stat_sn = r.stat_sn.wrapping_add(1);
                    return (r.response, others);
                }
                Reply::NopIn(nop) => self.answer_ping(&nop),
                other => others.push(other),
            }
        }
    }

    /// The replies that arrive within `within` (NOP-In pings answered, not
    /// returned); `Err` once the target has closed.
    pub fn replies_within(&mut self, within: Duration) -> Result<Vec<Reply>, Closed> {
        let deadline = Instant::now() + within;
        let mut out = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(out);
            }
            match self.wire.try_recv(left)? {
                Some(Reply::NopIn(nop)) => self.answer_ping(&nop),
                Some(r) => out.push(r),
                None => return Ok(out),
            }
        }
    }

    /// The Data-Out sequence an R2T asks for (§11.8), in PDUs the target
    /// accepts.
    /// Sends the Data-Out an R2T asks for, taken from `data_out` (the
    /// command's whole data), in PDUs of at most the target's
    /// MaxRecvDataSegmentLength.
    pub fn answer_r2t(&mut self, r2t: &R2t, raw_lun: u64, data_out: &[u8]) {
        self.send_r2t_data(r2t, raw_lun, data_out);
    }

    /// Sends a write of `len` bytes without immediate or unsolicited data
    /// (the F bit set: everything waits for R2Ts) and returns at once with
    /// its ITT; its R2Ts and status are for the caller to read.
    pub fn start_write(&mut self, lun: u64, cdb: &[u8], len: u32) -> u32 {
        let itt = self.take_itt();
        let ids = CommandIds {
            lun: encode_lun(lun),
            itt,
            cmd_sn: self.cmd_sn,
            exp_stat_sn: self.exp_stat_sn,
            read: false,
            write: true,
            final_bit: true,
            expected_data_len: len,
        };
        let cmd = scsi_command(ids, cdb, Vec::new());
        self.cmd_sn = self.cmd_sn.wrapping_add(1);
        self.send(&cmd.encode(false, false));
        itt
    }

    fn send_r2t_data(&mut self, r2t: &R2t, raw_lun: u64, data_out: &[u8]) {
        let start = usize::try_from(r2t.buffer_offset).expect("offset");
        let len = usize::try_from(r2t.desired_len).expect("length");
        let wanted = data_out
            .get(start..start + len)
            .unwrap_or_else(|| panic!("{}: R2T beyond the data: {r2t:?}", self.initiator));
        let chunks: Vec<&[u8]> = wanted.chunks(self.max_send).collect();
        for (sn, chunk) in chunks.iter().enumerate() {
            let offset = start + sn * self.max_send;
            let header = DataOut {
                final_bit: sn + 1 == chunks.len(),
                lun: raw_lun,
                itt: r2t.itt,
                ttt: r2t.ttt,
                exp_stat_sn: self.exp_stat_sn,
                data_sn: u32::try_from(sn).expect("DataSN"),
                buffer_offset: u32::try_from(offset).expect("offset"),
            };
            let req = pdu::data_out(header, chunk.to_vec());
            self.send(&req.encode(false, false));
        }
    }

    /// TEST UNIT READY until GOOD, consuming pending unit attentions (a
    /// new I_T nexus starts with POWER ON OCCURRED, SPC-4 §6.2).
    pub fn clear_unit_attentions(&mut self, lun: u64) {
        let mut last = None;
        for _ in 0..16 {
            let r = self.command(lun, &[0x00, 0, 0, 0, 0, 0], &[], 0);
            if r.is_good() {
                return;
            }
            assert_eq!(
                r.sense_code().map(|s| s.0),
                Some(UNIT_ATTENTION),
                "{}: TEST UNIT READY: {r}",
                self.initiator
            );
            last = Some(r);
        }
        panic!(
            "{}: unit attentions never cleared: {last:?}",
            self.initiator
        );
    }

    /// Logout closing the session (§11.14, reason 0), waiting for the answer.
    pub fn logout(mut self) {
        let itt = self.take_itt();
        let req = Request {
            header: RequestHeader::Logout(LogoutRequest {
                immediate: true,
                reason: rustgt_iscsi::pdu::LogoutReason::CLOSE_SESSION,
                itt,
                cid: 0,
                cmd_sn: self.cmd_sn,
                exp_stat_sn: self.exp_stat_sn,
            }),
            data: Vec::new(),
        };
        self.send(&req.encode(false, false));
        loop {
            match self.recv() {
                Reply::LogoutResponse(r) => {
                    assert_eq!(
                        r.response,
                        rustgt_iscsi::pdu::LogoutResponseCode::CLOSED,
                        "{}: logout refused",
                        self.initiator
                    );
                    return;
                }
                Reply::NopIn(nop) => self.answer_ping(&nop),
                Reply::AsyncMessage(_) => {}
                other => panic!("{}: waiting for logout: {other:?}", self.initiator),
            }
        }
    }
}

/// READ(16) / WRITE(16) CDBs (SBC-3 §5.16, §5.35).
pub fn rw16(opcode: u8, lba: u64, blocks: u32) -> [u8; 16] {
    let mut cdb = [0u8; 16];
    cdb[0] = opcode;
    cdb[2..10].copy_from_slice(&lba.to_be_bytes());
    cdb[10..14].copy_from_slice(&blocks.to_be_bytes());
    cdb
}

pub const READ_16: u8 = 0x88;
pub const WRITE_16: u8 = 0x8a;

#[cfg(test)]
mod tests {
    use super::*;

    fn with_sense(sense: &[u8]) -> CmdResult {
        CmdResult {
            status: CHECK_CONDITION,
            sense: sense.to_vec(),
            data: Vec::new(),
        }
    }

    #[test]
    fn fixed_format_sense_with_information() {
        let mut s = [0u8; 18];
        s[0] = 0xf0;
        s[2] = MISCOMPARE;
        s[3..7].copy_from_slice(&37u32.to_be_bytes());
        s[7] = 10;
        s[12] = 0x1d;
        let r = with_sense(&s);
        assert_eq!(r.sense_code(), Some((MISCOMPARE, 0x1d, 0)));
        assert_eq!(r.information(), Some(37));
        s[0] = 0x70;
        assert_eq!(with_sense(&s).information(), None, "VALID clear");
    }

    #[test]
    fn descriptor_format_sense_with_information() {
        let mut s = vec![0x72, MISCOMPARE, 0x1d, 0x00, 0, 0, 0, 12];
        s.extend_from_slice(&[0x00, 0x0a, 0x80, 0]);
        s.extend_from_slice(&300u64.to_be_bytes());
        let r = with_sense(&s);
        assert_eq!(r.sense_code(), Some((MISCOMPARE, 0x1d, 0)));
        assert_eq!(r.information(), Some(300));
        assert_eq!(with_sense(&s[..10]).information(), None, "truncated");
        assert_eq!(with_sense(&[]).sense_code(), None);
    }

    #[test]
    fn read_write_16_cdbs() {
        let cdb = rw16(WRITE_16, 0x0102_0304_0506_0708, 9);
        assert_eq!(cdb[0], 0x8a);
        assert_eq!(&cdb[2..10], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&cdb[10..14], &[0, 0, 0, 9]);
    }
}
