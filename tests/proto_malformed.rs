//! Black-box: bad PDUs sent to a running daemon over real TCP get a Reject
//! or a clean close, and another session keeps working meanwhile.

#![allow(clippy::unwrap_used)] // tests may panic on a broken invariant

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::Daemon;
use rustgt_iscsi::pdu::*;
use rustgt_iscsi::text::encode_text;

const IQN: &str = "iqn.2026-11.org.rustgt:default";

/// A minimal blocking initiator for poking at the daemon.
struct Raw {
    sock: TcpStream,
    buf: Vec<u8>,
    cmd_sn: u32,
    exp_stat_sn: u32,
}

impl Raw {
    fn connect(addr: SocketAddr) -> Raw {
        let sock = TcpStream::connect(addr).expect("connect");
        sock.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        Raw {
            sock,
            buf: Vec::new(),
            cmd_sn: 1,
            exp_stat_sn: 0,
        }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.sock.write_all(bytes).expect("send");
    }

    /// Next reply, `None` on timeout, `Err` when the target closed.
    fn recv(&mut self, within: Duration) -> Result<Option<Reply>, ()> {
        let deadline = Instant::now() + within;
        loop {
            match Reply::decode(&self.buf, false, false) {
                Ok((r, n)) => {
                    self.buf.drain(..n);
                    return Ok(Some(r));
                }
                Err(PduError::Incomplete(_)) => {}
                Err(e) => panic!("undecodable reply: {e}"),
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            let mut tmp = [0u8; 65536];
            match self.sock.read(&mut tmp) {
                Ok(0) => return Err(()),
                Ok(n) => self.buf.extend_from_slice(&tmp[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => return Err(()),
            }
        }
    }

    fn login(&mut self, isid_tail: u8) {
        let keys: Vec<(String, String)> = [
            ("InitiatorName", "iqn.2026-11.org.rustgt:malformed-test"),
            ("TargetName", IQN),
            ("SessionType", "Normal"),
            ("AuthMethod", "None"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let req = Request {
            header: RequestHeader::Login(LoginRequest {
                transit: true,
                cont: false,
                csg: Stage::SECURITY,
                nsg: Stage::FULL_FEATURE,
                version_max: 0,
                version_min: 0,
                isid: [0x80, 0, 0, 0, 0x42, isid_tail],
                tsih: 0,
                itt: 1,
                cid: 0,
                cmd_sn: self.cmd_sn,
                exp_stat_sn: 0,
            }),
            data: encode_text(&keys),
        };
        self.send(&req.encode(false, false));
        match self.recv(Duration::from_secs(10)) {
            Ok(Some(Reply::LoginResponse(lr))) => {
                assert_eq!(lr.status, LoginStatus::SUCCESS, "login failed");
                assert!(lr.transit && lr.nsg == Stage::FULL_FEATURE);
                self.exp_stat_sn = lr.stat_sn.wrapping_add(1);
            }
            other => panic!("login: {other:?}"),
        }
    }

    fn nop(&mut self, itt: u32) -> Result<Option<Reply>, ()> {
        let req = Request {
            header: RequestHeader::NopOut(NopOut {
                immediate: true,
                lun: 0,
                itt,
                ttt: RESERVED_TAG,
                cmd_sn: self.cmd_sn,
                exp_stat_sn: self.exp_stat_sn,
            }),
            data: vec![],
        };
        self.send(&req.encode(false, false));
        self.recv(Duration::from_secs(10))
    }

    fn assert_alive(&mut self) {
        match self.nop(0x4242) {
            Ok(Some(Reply::NopIn(n))) => assert_eq!(n.itt, 0x4242),
            other => panic!("session not working: {other:?}"),
        }
    }

    fn expect_reject(&mut self, reason: RejectReason) {
        match self.recv(Duration::from_secs(10)) {
            Ok(Some(Reply::Reject(r))) => assert_eq!(r.reason, reason),
            other => panic!("expected Reject {reason:?}, got {other:?}"),
        }
    }

    /// The target must close: read until EOF (bounded).
    fn expect_close(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.recv(Duration::from_millis(200)).is_err() {
                return;
            }
        }
        panic!("target did not close the connection");
    }
}

fn bhs(opcode: u8, flags: u8, dsl: u32, itt: u32) -> [u8; 48] {
    let mut b = [0u8; 48];
    b[0] = opcode;
    b[1] = flags;
    b[5..8].copy_from_slice(&dsl.to_be_bytes()[1..]);
    b[16..20].copy_from_slice(&itt.to_be_bytes());
    b
}

#[test]
fn bad_pdus_get_reject_or_close_and_other_sessions_survive() {
    let d = Daemon::start();
    let mut witness = Raw::connect(d.portal);
    witness.login(1);

    // Unknown opcode: Reject, and the session goes on.
    let mut a = Raw::connect(d.portal);
    a.login(2);
    a.send(&bhs(0x1c, 0x80, 0, 0x10));
    a.expect_reject(RejectReason::COMMAND_NOT_SUPPORTED);
    a.assert_alive();

    // DataSegmentLength over the negotiated limit: Reject, payload skipped.
    let dsl = 4 << 20;
    a.send(&bhs(0x40, 0x80, dsl, 0x11));
    a.expect_reject(RejectReason::PROTOCOL_ERROR);
    a.send(&vec![0u8; dsl as usize]);
    a.assert_alive();

    // CmdSN outside the window: silently ignored; nothing comes back.
    let mut cmd = bhs(0x01, 0x80, 0, 0x12);
    cmd[24..28].copy_from_slice(&(a.cmd_sn.wrapping_add(1000)).to_be_bytes());
    a.send(&cmd);
    assert!(matches!(a.recv(Duration::from_millis(500)), Ok(None)));
    a.assert_alive();

    // Garbage login text: login reject, then close.
    let mut b = Raw::connect(d.portal);
    let mut login = bhs(0x43, 0x81, 9, 1);
    login[8..14].copy_from_slice(&[0x80, 0, 0, 0, 0x42, 3]);
    b.send(&login);
    b.send(b"\xff\xfe=\x00=\x01\x02\x00\x00\x00\x00\x00");
    match b.recv(Duration::from_secs(10)) {
        Ok(Some(Reply::LoginResponse(lr))) => assert_eq!(lr.status.class(), 2),
        other => panic!("expected a login reject: {other:?}"),
    }
    b.expect_close();

    // A truncated header followed by the peer going away: nothing breaks.
    let mut c = Raw::connect(d.portal);
    c.login(4);
    c.send(&bhs(0x40, 0x80, 0, 0x13)[..20]);
    drop(c);

    // A SCSI command before login: clean close.
    let mut e = Raw::connect(d.portal);
    e.send(&bhs(0x01, 0x80, 0, 0x14));
    e.expect_close();

    witness.assert_alive();
    a.assert_alive();
}
