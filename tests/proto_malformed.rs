//! Black-box: bad PDUs sent to a running daemon over real TCP get a Reject
//! or a clean close, and another session keeps working meanwhile.

mod common;
use rustgt_test_initiator as initiator;

use std::time::Duration;

use common::Daemon;
use initiator::{Session, Wire};
use rustgt_iscsi::pdu::*;

const IQN: &str = "iqn.2026-11.org.rustgt:default";
const INITIATOR: &str = "iqn.2026-11.org.rustgt:malformed-test";
const WAIT: Duration = Duration::from_secs(10);

fn login(d: &Daemon, isid_tail: u8) -> Session {
    Session::login(d.portal, IQN, INITIATOR, [0x80, 0, 0, 0, 0x42, isid_tail])
}

fn assert_alive(s: &mut Session) {
    assert!(s.ping(0x4242), "session not working");
}

fn expect_reject(w: &mut Wire, reason: RejectReason) {
    match w.try_recv(WAIT) {
        Ok(Some(Reply::Reject(r))) => assert_eq!(r.reason, reason),
        other => panic!("expected Reject {reason:?}, got {other:?}"),
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
    let mut witness = login(&d, 1);

    // Unknown opcode: Reject, and the session goes on.
    let mut a = login(&d, 2);
    a.wire().send(&bhs(0x1c, 0x80, 0, 0x10));
    expect_reject(a.wire(), RejectReason::COMMAND_NOT_SUPPORTED);
    assert_alive(&mut a);

    // DataSegmentLength over the negotiated limit: Reject, payload skipped.
    let dsl = 4 << 20;
    a.wire().send(&bhs(0x40, 0x80, dsl, 0x11));
    expect_reject(a.wire(), RejectReason::PROTOCOL_ERROR);
    a.wire().send(&vec![0u8; dsl as usize]);
    assert_alive(&mut a);

    // CmdSN outside the window: silently ignored; nothing comes back.
    let mut cmd = bhs(0x01, 0x80, 0, 0x12);
    cmd[24..28].copy_from_slice(&(a.cmd_sn().wrapping_add(1000)).to_be_bytes());
    a.wire().send(&cmd);
    assert!(matches!(
        a.wire().try_recv(Duration::from_millis(500)),
        Ok(None)
    ));
    assert_alive(&mut a);

    // Garbage login text: login reject, then close.
    let mut b = Wire::connect(d.portal);
    let mut login_pdu = bhs(0x43, 0x81, 9, 1);
    login_pdu[8..14].copy_from_slice(&[0x80, 0, 0, 0, 0x42, 3]);
    b.send(&login_pdu);
    b.send(b"\xff\xfe=\x00=\x01\x02\x00\x00\x00\x00\x00");
    match b.try_recv(WAIT) {
        Ok(Some(Reply::LoginResponse(lr))) => assert_eq!(lr.status.class(), 2),
        other => panic!("expected a login reject: {other:?}"),
    }
    assert!(b.closes_within(WAIT), "target did not close the connection");

    // A truncated header followed by the peer going away: nothing breaks.
    let mut c = login(&d, 4);
    c.wire().send(&bhs(0x40, 0x80, 0, 0x13)[..20]);
    drop(c);

    // A SCSI command before login: clean close.
    let mut e = Wire::connect(d.portal);
    e.send(&bhs(0x01, 0x80, 0, 0x14));
    assert!(e.closes_within(WAIT), "target did not close the connection");

    assert_alive(&mut witness);
    assert_alive(&mut a);
}
