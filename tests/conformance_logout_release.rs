//! Black-box: a session's logout has released what its I_T nexus held by
//! the time the Logout Response arrives.
//!
//! A Logout Response with Response 0 says the session is closed (RFC 7143
//! §11.15.1), and closing a session is an I_T nexus loss, which releases a
//! RESERVE(6) reservation (SPC-2 §5.5.1). An initiator that logs one
//! session out and at once uses another must not run into the closed
//! session's reservation. libiscsi's Sanitize suite does exactly this:
//! Sanitize.Reservations reserves from a second session and logs it out,
//! and Sanitize.Reset's SANITIZE, sent right after, fails with RESERVATION
//! CONFLICT if the release is still pending. The same holds when the
//! initiator drops its connection without a logout and logs in again at
//! once (libiscsi's *.ITNexusLoss tests), whichever reactor thread owns the
//! old socket.

mod common;
use rustgt_test_initiator as initiator;

use common::{Daemon, DEFAULT_IQN};
use initiator::{rw16, Session, GOOD, WRITE_16};

const LUN: u64 = 0;
/// Rounds: the window is about a millisecond, so one round proves little.
const ROUNDS: u8 = 50;

#[test]
fn logout_releases_reserve6_before_the_logout_response() {
    let d = Daemon::start();
    let mut other = Session::login(
        d.portal,
        DEFAULT_IQN,
        "iqn.2026-11.org.rustgt:logout-other",
        [0x80, 0, 0, 0, 0x10, 1],
    );
    other.clear_unit_attentions(LUN);
    let mut late = Vec::new();
    for round in 0..ROUNDS {
        let mut holder = Session::login(
            d.portal,
            DEFAULT_IQN,
            "iqn.2026-11.org.rustgt:logout-holder",
            [0x80, 0, 0, 0, 0x20, round],
        );
        // INQUIRY is not subject to unit attentions or reservations, so
        // it works even if an earlier round's reservation were still held.
        let r = holder.command(LUN, &[0x12, 0, 0, 0, 36, 0], &[], 36);
        assert_eq!(r.status, GOOD, "round {round}: INQUIRY: {r}");
        let r = holder.command(LUN, &[0x16, 0, 0, 0, 0, 0], &[], 0);
        let r = if r.is_good() {
            r
        } else {
            // A pending unit attention: RESERVE(6) again.
            holder.command(LUN, &[0x16, 0, 0, 0, 0, 0], &[], 0)
        };
        assert_eq!(r.status, GOOD, "round {round}: RESERVE(6): {r}");
        holder.logout();
        let r = other.command(LUN, &rw16(WRITE_16, 0, 1), &[round; 512], 0);
        if !r.is_good() {
            late.push(format!("round {round}: {r}"));
            // Let the release land before the next round.
            for _ in 0..100 {
                let r = other.command(LUN, &[0x00, 0, 0, 0, 0, 0], &[], 0);
                if r.is_good() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
    }
    other.logout();
    assert!(d.stop().success());
    assert!(
        late.is_empty(),
        "{} of {ROUNDS} writes right after the reserving session's Logout Response \
         were refused (0x18 = RESERVATION CONFLICT):\n{}",
        late.len(),
        late.join("\n")
    );
}

/// The same without a logout: the initiator drops its connection and at
/// once logs in again (a new ISID, so a new I_T nexus, as libiscsi's
/// PreventAllow.ITNexusLoss and Reserve6.ITNexusLoss do). The target has
/// seen the old socket close by then, whichever reactor owns it, so the new
/// session must not meet the old nexus's RESERVE(6).
#[test]
fn a_dropped_connection_releases_reserve6_before_the_next_login() {
    let d = Daemon::start();
    let initiator = "iqn.2026-11.org.rustgt:drop-holder";
    let mut late = Vec::new();
    for round in 0..ROUNDS {
        let mut holder =
            Session::login(d.portal, DEFAULT_IQN, initiator, [0x80, 0, 0, 1, 0, round]);
        holder.clear_unit_attentions(LUN);
        let r = holder.command(LUN, &[0x16, 0, 0, 0, 0, 0], &[], 0);
        assert_eq!(r.status, GOOD, "round {round}: RESERVE(6): {r}");
        drop(holder);
        let mut next = Session::login(d.portal, DEFAULT_IQN, initiator, [0x80, 0, 0, 2, 0, round]);
        // A new nexus starts with a unit attention; then the write.
        let mut r = next.command(LUN, &rw16(WRITE_16, 0, 1), &[round; 512], 0);
        for _ in 0..4 {
            if r.sense_code().map(|s| s.0) != Some(initiator::UNIT_ATTENTION) {
                break;
            }
            r = next.command(LUN, &rw16(WRITE_16, 0, 1), &[round; 512], 0);
        }
        if !r.is_good() {
            late.push(format!("round {round}: {r}\n{}", d.stderr_tail(40)));
        }
        next.logout();
        if !late.is_empty() {
            break;
        }
    }
    assert!(d.stop().success());
    assert!(
        late.is_empty(),
        "a write right after the reserving connection was dropped was refused \
         (0x18 = RESERVATION CONFLICT):\n{}",
        late.join("\n")
    );
}
