//! Limits of the login phase in the sans-I/O core, with simulated time:
//! the login timeout (from the connection's creation to full feature
//! phase, however far the login got) and the bound on sessions per
//! initiator name. Each runs on both transports of the same `Connection`.

#![allow(clippy::unwrap_used)] // tests may panic on a broken invariant

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustgt_iscsi::chap::ChapPolicy;
use rustgt_iscsi::negotiate::Limits;
use rustgt_iscsi::pdu::*;
use rustgt_iscsi::{PortalConfig, SessionTable};
use rustgt_test_initiator::pair::*;

macro_rules! on_both_transports {
    ($($name:ident),* $(,)?) => {
        mod tcp {
            $( #[test] fn $name() { super::$name(super::Mode::Tcp) } )*
        }
        mod iser {
            $( #[test] fn $name() { super::$name(super::Mode::Iser) } )*
        }
    };
}

on_both_transports!(
    a_silent_connection_closes_at_the_login_timeout,
    a_login_in_progress_closes_at_the_deadline_activity_does_not_extend_it,
    a_finished_login_leaves_the_login_timer_for_the_keepalive,
    a_discovery_login_also_ends_the_login_timer,
    sessions_per_initiator_name_are_bounded,
);

const LOGIN_TIMEOUT: Duration = Duration::from_secs(2);

fn config() -> PortalConfig {
    PortalConfig {
        login_timeout: LOGIN_TIMEOUT,
        ..portal_config(Limits::default(), ChapPolicy::default())
    }
}

fn security_keys() -> [(&'static str, &'static str); 4] {
    [
        ("InitiatorName", INITIATOR),
        ("TargetName", TARGET),
        ("SessionType", "Normal"),
        ("AuthMethod", "None"),
    ]
}

fn a_silent_connection_closes_at_the_login_timeout(mode: Mode) {
    let mut p = Pair::with_mode(config(), mode);
    let start = p.now;
    assert_eq!(p.conn.poll_timeout(), Some(start + LOGIN_TIMEOUT));
    // Early wake-ups change nothing.
    p.now = start + LOGIN_TIMEOUT - Duration::from_millis(1);
    p.conn.handle_timeout(p.now);
    assert!(!p.conn.is_closing());
    assert_eq!(p.conn.poll_timeout(), Some(start + LOGIN_TIMEOUT));
    p.now = start + LOGIN_TIMEOUT;
    p.conn.handle_timeout(p.now);
    assert!(
        p.conn.is_closing(),
        "login timeout must close the connection"
    );
    // Nothing is sent, and a closing connection asks for no more timers.
    assert!(p.replies().is_empty());
    assert_eq!(p.conn.poll_timeout(), None);
}

fn a_login_in_progress_closes_at_the_deadline_activity_does_not_extend_it(mode: Mode) {
    let mut p = Pair::with_mode(config(), mode);
    let start = p.now;
    p.now = start + Duration::from_millis(1500);
    // The first stage is answered; the login is still in progress.
    let (lr, _) = p.login_step(Stage::SECURITY, Stage::OPERATIONAL, true, &security_keys());
    assert_eq!(lr.status, LoginStatus::SUCCESS);
    assert_eq!(p.conn.poll_timeout(), Some(start + LOGIN_TIMEOUT));
    p.now = start + LOGIN_TIMEOUT;
    p.conn.handle_timeout(p.now);
    assert!(p.conn.is_closing());
    assert!(p.conn.session().is_none());
}

/// TCP only: a peer that stops halfway through a PDU header is as stuck
/// as one that never sent anything.
#[test]
fn tcp_half_a_header_does_not_keep_the_connection() {
    let mut p = Pair::with_mode(config(), Mode::Tcp);
    let start = p.now;
    let req = p.login_request(Stage::SECURITY, Stage::OPERATIONAL, true, &security_keys());
    let bytes = req.encode(false, false);
    p.now = start + Duration::from_secs(1);
    p.feed(bytes.get(..20).unwrap());
    assert!(p.replies().is_empty());
    assert_eq!(p.conn.poll_timeout(), Some(start + LOGIN_TIMEOUT));
    p.now = start + LOGIN_TIMEOUT;
    p.conn.handle_timeout(p.now);
    assert!(p.conn.is_closing());
    // The rest of the PDU arriving late is not acted on.
    p.feed(bytes.get(20..).unwrap());
    assert!(p.replies().is_empty());
}

fn a_finished_login_leaves_the_login_timer_for_the_keepalive(mode: Mode) {
    let mut p = Pair::with_mode(config(), mode);
    let start = p.now;
    p.now = start + Duration::from_secs(1);
    p.login(&[]);
    // portal_config's NOP-In interval is 5 s, from the last input.
    assert_eq!(p.conn.poll_timeout(), Some(p.now + Duration::from_secs(5)));
    p.now = start + LOGIN_TIMEOUT * 2;
    p.conn.handle_timeout(p.now);
    assert!(!p.conn.is_closing(), "the login deadline no longer applies");
}

fn a_discovery_login_also_ends_the_login_timer(mode: Mode) {
    let mut p = Pair::with_mode(config(), mode);
    let start = p.now;
    let (lr, _) = p.login_step(
        Stage::SECURITY,
        Stage::FULL_FEATURE,
        true,
        &[
            ("InitiatorName", INITIATOR),
            ("SessionType", "Discovery"),
            ("AuthMethod", "None"),
        ],
    );
    assert_eq!(lr.status, LoginStatus::SUCCESS);
    assert!(p.conn.session().is_some());
    p.now = start + LOGIN_TIMEOUT;
    p.conn.handle_timeout(p.now);
    assert!(!p.conn.is_closing());
}

fn sessions_per_initiator_name_are_bounded(mode: Mode) {
    let table = Arc::new(Mutex::new(SessionTable::new()));
    let cfg = PortalConfig {
        max_sessions_per_initiator: 2,
        ..config()
    };
    let mut a = Pair::with_table_mode(cfg.clone(), table.clone(), 1, mode);
    a.login(&[]);
    let mut b = Pair::with_table_mode(cfg.clone(), table.clone(), 2, mode);
    b.login(&[]);
    // A third ISID of the same initiator name: Out of Resources (0x0302).
    let mut c = Pair::with_table_mode(cfg.clone(), table.clone(), 3, mode);
    let (lr, _) = c.login_step(Stage::SECURITY, Stage::FULL_FEATURE, true, &security_keys());
    assert_eq!(lr.status, LoginStatus::OUT_OF_RESOURCES);
    assert!(c.conn.is_closing());
    assert_eq!(table.lock().unwrap().len(), 2);
    // Once a session goes, the name may log in again.
    table.lock().unwrap().remove_conn(1);
    let mut d = Pair::with_table_mode(cfg, table.clone(), 4, mode);
    d.login(&[]);
    assert_eq!(table.lock().unwrap().len(), 2);
}
