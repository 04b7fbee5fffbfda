//! The protocol core against an in-memory initiator, over the real SCSI
//! core with a RAM backstore, with simulated time.
//!
//! Login, sequencing, task management and data tests are written once and
//! run against both transports of the same `Connection` (modules `tcp` and
//! `iser` at the end); tests of what only one transport has (digests and
//! stream framing, R2T sequencing, RDMA operations) follow, named by it.

#![allow(clippy::unwrap_used)] // tests may panic on a broken invariant

use std::time::Duration;

use rustgt_iscsi::chap::{ChapAlgorithm, ChapCredentials, ChapPolicy};
use rustgt_iscsi::iser::{ControlHeader, Hello, ISER_HEADER_LEN};
use rustgt_iscsi::negotiate::{Digest, Limits};
use rustgt_iscsi::pdu::*;
use rustgt_iscsi::text::{decode_binary, encode_hex, encode_text, parse_text};
use rustgt_iscsi::{DataBudget, IserParams, PortalConfig, SessionTable};
use rustgt_test_initiator::pair::*;
use std::sync::{Arc, Mutex};

/// Runs each listed `fn name(mode: Mode)` once per transport.
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
    login_negotiates_and_reports_tpgt,
    unknown_target_and_missing_initiator_name_are_refused,
    a_target_is_not_found_through_another_portal,
    logins_are_redirected_in_turn_after_the_acl,
    libiscsi_offering_chap_to_a_target_without_it_logs_in,
    acl_refuses_other_initiators,
    chap_and_mutual_chap,
    chap_required_refuses_skipping_security,
    chap_failures_hold_back_the_next_login_from_that_address,
    read_write_round_trip_with_small_pdus,
    unsolicited_data_out_with_initial_r2t_no,
    out_of_window_cmdsn_is_ignored_and_window_moves,
    unknown_opcodes_and_oversized_pdus_get_rejects,
    unsolicited_data_out_errors_fail_the_task_not_the_connection,
    nop_in_ping_and_timeout_with_simulated_time,
    discovery_send_targets,
    logout_closes_after_response,
    abort_task_of_a_write_still_collecting_data,
    a_non_immediate_tmf_gives_its_window_slot_back,
    reinstatement_reports_the_old_connection,
);

fn limits() -> Limits {
    Limits {
        header_digest: vec![Digest::CRC32C, Digest::None],
        data_digest: vec![Digest::CRC32C, Digest::None],
        ..Limits::default()
    }
}

fn default_pair(mode: Mode) -> Pair {
    Pair::with_mode(portal_config(limits(), ChapPolicy::default()), mode)
}

fn kv<'a>(kv: &'a [(String, String)], k: &str) -> Option<&'a str> {
    kv.iter().find(|(kk, _)| kk == k).map(|(_, v)| v.as_str())
}

fn login_negotiates_and_reports_tpgt(mode: Mode) {
    let mut p = default_pair(mode);
    let (lr, kv1) = p.login_step(
        Stage::SECURITY,
        Stage::OPERATIONAL,
        true,
        &[
            ("InitiatorName", INITIATOR),
            ("TargetName", TARGET),
            ("AuthMethod", "None"),
        ],
    );
    assert_eq!(lr.status, LoginStatus::SUCCESS);
    assert_eq!(kv(&kv1, "TargetPortalGroupTag"), Some("1"));
    assert_eq!(kv(&kv1, "AuthMethod"), Some("None"));
    let mut ops = vec![
        ("HeaderDigest", "CRC32C,None"),
        ("MaxBurstLength", "16384"),
        ("FirstBurstLength", "8192"),
        ("X-Foo", "bar"),
    ];
    if mode == Mode::Iser {
        ops.push(("RDMAExtensions", "Yes"));
        ops.push(("InitiatorRecvDataSegmentLength", "262144"));
    }
    let (lr, kv2) = p.login_step(Stage::OPERATIONAL, Stage::FULL_FEATURE, true, &ops);
    assert_eq!(lr.status, LoginStatus::SUCCESS);
    assert_ne!(lr.tsih, 0);
    assert_eq!(kv(&kv2, "MaxBurstLength"), Some("16384"));
    assert_eq!(kv(&kv2, "X-Foo"), Some("NotUnderstood"));
    match mode {
        Mode::Tcp => {
            assert_eq!(kv(&kv2, "HeaderDigest"), Some("CRC32C"));
            assert!(kv(&kv2, "MaxRecvDataSegmentLength").is_some());
            assert_eq!(kv(&kv2, "TargetRecvDataSegmentLength"), None);
        }
        Mode::Iser => {
            // RFC 7145 §6: no digests, the iSER declarations instead of
            // MaxRecvDataSegmentLength.
            assert_eq!(kv(&kv2, "HeaderDigest"), Some("None"));
            assert_eq!(kv(&kv2, "RDMAExtensions"), Some("Yes"));
            assert_eq!(kv(&kv2, "TargetRecvDataSegmentLength"), Some("8192"));
            // Not declared to an initiator that did not declare it (open-iscsi
            // fails a login on keys it does not know).
            assert_eq!(kv(&kv2, "MaxOutstandingUnexpectedPDUs"), None);
            assert_eq!(kv(&kv2, "MaxRecvDataSegmentLength"), None);
            let params = &p.conn.session().unwrap().params;
            assert!(params.rdma_extensions);
            assert_eq!(params.initiator_recv_dsl, 262_144);
        }
    }
}

/// The pair's connection arrives at 127.0.0.1:3260: a target whose only
/// portal is elsewhere is not found there (RFC 7143 0x0203), and is not
/// even tested against its ACL; a wildcard portal of that port, or an
/// iSER portal at that address, serves it.
fn a_target_is_not_found_through_another_portal(mode: Mode) {
    let with_portals = |portals: &[&str], iser: &[&str]| {
        let mut cfg = portal_config(limits(), ChapPolicy::default());
        for t in &mut cfg.targets {
            t.portals = portals.iter().map(|p| (*p).to_owned()).collect();
            t.iser_portals = iser.iter().map(|p| (*p).to_owned()).collect();
            t.acl = vec![INITIATOR.into()];
        }
        Pair::with_mode(cfg, mode)
    };
    let first = [
        ("InitiatorName", INITIATOR),
        ("TargetName", TARGET),
        ("SessionType", "Normal"),
        ("AuthMethod", "None"),
    ];
    for portals in [
        &["127.0.0.1:3401"][..],
        &["127.0.0.2:3260"],
        &["[::1]:3260"],
    ] {
        let mut p = with_portals(portals, &[]);
        let (lr, kv) = p.login_step(Stage::SECURITY, Stage::OPERATIONAL, true, &first);
        assert_eq!(lr.status, LoginStatus::NOT_FOUND, "{portals:?}");
        assert!(kv.is_empty(), "no redirect: {kv:?}");
        assert!(p.conn.is_closing());
    }
    for (portals, iser) in [
        (&["127.0.0.1:3401", "127.0.0.1:3260"][..], &[][..]),
        (&["0.0.0.0:3260"], &[]),
        (&["[::]:3260"], &[]),
        (&["127.0.0.1:3401"], &["127.0.0.1:3260"]),
    ] {
        let mut p = with_portals(portals, iser);
        let (lr, _) = p.login_step(Stage::SECURITY, Stage::OPERATIONAL, true, &first);
        assert_eq!(lr.status, LoginStatus::SUCCESS, "{portals:?} {iser:?}");
    }
}

/// A target with a redirect answers a Normal login at a portal it covers
/// with TARGET MOVED (0x0101, or 0x0102 when permanent) and a
/// TargetAddress, the addresses taken in turn, and closes the
/// connection; an initiator outside the ACL is refused without learning
/// an address; a portal the redirect does not cover serves the target;
/// a Discovery session is never redirected.
fn logins_are_redirected_in_turn_after_the_acl(mode: Mode) {
    let with_redirect = |from: &[&str], permanent: bool| {
        let mut cfg = portal_config(limits(), ChapPolicy::default());
        for t in &mut cfg.targets {
            t.acl = vec![INITIATOR.into()];
            t.redirect = Some(rustgt_iscsi::Redirect::new(
                vec!["192.0.2.10:3260,1".into(), "[2001:db8::2]:3261,2".into()],
                from.iter().map(|p| (*p).to_owned()).collect(),
                permanent,
            ));
        }
        cfg
    };
    let first = |initiator: &'static str| {
        [
            ("InitiatorName", initiator),
            ("TargetName", TARGET),
            ("SessionType", "Normal"),
            ("AuthMethod", "None"),
        ]
    };
    // Every portal (the pair arrives at 127.0.0.1:3260), in turn.
    let cfg = with_redirect(&[], false);
    for want in [
        "192.0.2.10:3260,1",
        "[2001:db8::2]:3261,2",
        "192.0.2.10:3260,1",
    ] {
        let mut p = Pair::with_mode(cfg.clone(), mode);
        let (lr, kv) = p.login_step(Stage::SECURITY, Stage::OPERATIONAL, true, &first(INITIATOR));
        assert_eq!(lr.status, LoginStatus::TARGET_MOVED_TEMPORARILY);
        assert_eq!(kv, vec![("TargetAddress".to_owned(), want.to_owned())]);
        assert!(p.conn.is_closing(), "closed after the redirect");
    }
    let mut p = Pair::with_mode(with_redirect(&["127.0.0.1:3260"], true), mode);
    let (lr, _) = p.login_step(Stage::SECURITY, Stage::OPERATIONAL, true, &first(INITIATOR));
    assert_eq!(lr.status, LoginStatus::TARGET_MOVED_PERMANENTLY);
    // Outside the ACL: refused, no address.
    let mut p = Pair::with_mode(with_redirect(&[], false), mode);
    let (lr, kv) = p.login_step(
        Stage::SECURITY,
        Stage::OPERATIONAL,
        true,
        &first("iqn.2026-11.org.rustgt.test:stranger"),
    );
    assert_eq!(lr.status, LoginStatus::AUTHORIZATION_FAILURE);
    assert!(kv.is_empty(), "{kv:?}");
    // Another portal redirects; this one serves.
    let mut p = Pair::with_mode(with_redirect(&["127.0.0.1:3401"], false), mode);
    let (lr, _) = p.login_step(Stage::SECURITY, Stage::OPERATIONAL, true, &first(INITIATOR));
    assert_eq!(lr.status, LoginStatus::SUCCESS);
    // Discovery is served where it arrives.
    let mut p = Pair::with_mode(with_redirect(&[], false), mode);
    let (lr, kv) = p.login_step(
        Stage::SECURITY,
        Stage::OPERATIONAL,
        true,
        &[
            ("InitiatorName", INITIATOR),
            ("SessionType", "Discovery"),
            ("AuthMethod", "None"),
        ],
    );
    assert_eq!(lr.status, LoginStatus::SUCCESS, "{kv:?}");
}

/// libiscsi with credentials, against a target that needs none: it
/// offers AuthMethod=CHAP,None, and after the target picks None it
/// declares InitiatorName, TargetName and SessionType again with its
/// operational keys. That logs in; a changed TargetName does not.
fn libiscsi_offering_chap_to_a_target_without_it_logs_in(mode: Mode) {
    let first = [
        ("InitiatorName", INITIATOR),
        ("TargetName", TARGET),
        ("SessionType", "Normal"),
        ("AuthMethod", "CHAP,None"),
    ];
    let mut p = default_pair(mode);
    let (lr, kv1) = p.login_step(Stage::SECURITY, Stage::OPERATIONAL, true, &first);
    assert_eq!(lr.status, LoginStatus::SUCCESS);
    assert_eq!(kv(&kv1, "AuthMethod"), Some("None"));
    assert!(lr.transit);
    let mut ops = vec![
        ("InitiatorName", INITIATOR),
        ("TargetName", TARGET),
        ("SessionType", "Normal"),
        ("HeaderDigest", "None,CRC32C"),
        ("DataDigest", "None"),
        ("MaxRecvDataSegmentLength", "262144"),
    ];
    if mode == Mode::Iser {
        ops.push(("RDMAExtensions", "Yes"));
    }
    let (lr, kv2) = p.login_step(Stage::OPERATIONAL, Stage::FULL_FEATURE, true, &ops);
    assert_eq!(lr.status, LoginStatus::SUCCESS, "{kv2:?}");
    assert_eq!(lr.nsg, Stage::FULL_FEATURE);
    assert!(p.conn.session().is_some());

    // An initiator that offers only CHAP: no CHAP exchange without a
    // secret to check it against; Reject, and it may go on (nothing is
    // required), or give up if it insists on CHAP.
    let mut p = default_pair(mode);
    let (lr, k) = p.login_step(
        Stage::SECURITY,
        Stage::OPERATIONAL,
        true,
        &[
            ("InitiatorName", INITIATOR),
            ("TargetName", TARGET),
            ("AuthMethod", "CHAP"),
        ],
    );
    assert_eq!(lr.status, LoginStatus::SUCCESS);
    assert_eq!(kv(&k, "AuthMethod"), Some("Reject"));
    assert!(lr.transit);
    assert_eq!(kv(&k, "CHAP_C"), None);

    // The same, but the operational stage names another target.
    let mut p = default_pair(mode);
    let (lr, _) = p.login_step(Stage::SECURITY, Stage::OPERATIONAL, true, &first);
    assert_eq!(lr.status, LoginStatus::SUCCESS);
    let (lr, _) = p.login_step(
        Stage::OPERATIONAL,
        Stage::FULL_FEATURE,
        true,
        &[
            ("InitiatorName", INITIATOR),
            ("TargetName", "iqn.2026-11.org.rustgt:other"),
        ],
    );
    assert_eq!(lr.status, LoginStatus::INITIATOR_ERROR);
    assert!(p.conn.is_closing());
}

fn unknown_target_and_missing_initiator_name_are_refused(mode: Mode) {
    let mut p = default_pair(mode);
    let (lr, _) = p.login_step(
        Stage::SECURITY,
        Stage::OPERATIONAL,
        true,
        &[
            ("InitiatorName", INITIATOR),
            ("TargetName", "iqn.2026-11.org.nope:x"),
        ],
    );
    assert_eq!(lr.status, LoginStatus::NOT_FOUND);
    assert!(p.conn.is_closing());

    let mut p = default_pair(mode);
    let (lr, _) = p.login_step(
        Stage::SECURITY,
        Stage::OPERATIONAL,
        true,
        &[("TargetName", TARGET)],
    );
    assert_eq!(lr.status, LoginStatus::MISSING_PARAMETER);
}

fn acl_refuses_other_initiators(mode: Mode) {
    let mut cfg = portal_config(limits(), ChapPolicy::default());
    cfg.targets[0].acl = vec!["iqn.2026-11.org.rustgt:someone-else".into()];
    let mut p = Pair::with_mode(cfg, mode);
    let (lr, _) = p.login_step(
        Stage::SECURITY,
        Stage::OPERATIONAL,
        true,
        &[("InitiatorName", INITIATOR), ("TargetName", TARGET)],
    );
    assert_eq!(lr.status, LoginStatus::AUTHORIZATION_FAILURE);
}

fn chap_login(mode: Mode, secret: &[u8], mutual: bool) -> LoginStatus {
    let policy = ChapPolicy {
        initiator: Some(ChapCredentials {
            user: "alice".into(),
            secret: b"alice-secret-123".to_vec(),
        }),
        target: mutual.then(|| ChapCredentials {
            user: "tgt".into(),
            secret: b"target-secret-45".to_vec(),
        }),
    };
    let mut p = Pair::with_mode(portal_config(limits(), policy), mode);
    let (lr, k) = p.login_step(
        Stage::SECURITY,
        Stage::OPERATIONAL,
        true,
        &[
            ("InitiatorName", INITIATOR),
            ("TargetName", TARGET),
            ("AuthMethod", "CHAP,None"),
        ],
    );
    assert_eq!(lr.status, LoginStatus::SUCCESS);
    assert!(!lr.transit, "must not leave security before CHAP");
    assert_eq!(kv(&k, "AuthMethod"), Some("CHAP"));
    let (_, k) = p.login_step(
        Stage::SECURITY,
        Stage::OPERATIONAL,
        true,
        &[("CHAP_A", "7,5")],
    );
    assert_eq!(kv(&k, "CHAP_A"), Some("7"));
    let id: u8 = kv(&k, "CHAP_I").unwrap().parse().unwrap();
    let challenge = decode_binary(kv(&k, "CHAP_C").unwrap()).unwrap();
    let resp = ChapAlgorithm::Sha256.response(id, secret, &challenge);
    let resp_hex = encode_hex(&resp);
    let my_challenge = vec![0x42u8; 32];
    let my_challenge_hex = encode_hex(&my_challenge);
    let mut keys = vec![("CHAP_N", "alice"), ("CHAP_R", resp_hex.as_str())];
    if mutual {
        keys.push(("CHAP_I", "9"));
        keys.push(("CHAP_C", my_challenge_hex.as_str()));
    }
    let (lr, k) = p.login_step(Stage::SECURITY, Stage::OPERATIONAL, true, &keys);
    if lr.status == LoginStatus::SUCCESS && mutual {
        assert_eq!(kv(&k, "CHAP_N"), Some("tgt"));
        let expect = ChapAlgorithm::Sha256.response(9, b"target-secret-45", &my_challenge);
        assert_eq!(decode_binary(kv(&k, "CHAP_R").unwrap()).unwrap(), expect);
    }
    lr.status
}

fn chap_and_mutual_chap(mode: Mode) {
    assert_eq!(
        chap_login(mode, b"alice-secret-123", false),
        LoginStatus::SUCCESS
    );
    assert_eq!(
        chap_login(mode, b"alice-secret-123", true),
        LoginStatus::SUCCESS
    );
    assert_eq!(
        chap_login(mode, b"wrong-secret-xyz", false),
        LoginStatus::AUTHENTICATION_FAILURE
    );
}

/// The CHAP exchange of `chap_login` on a pair of the caller's, with
/// `secret`; the first request must get its answer at once.
fn chap_exchange(p: &mut Pair, secret: &[u8]) -> LoginStatus {
    let (lr, _) = p.login_step(
        Stage::SECURITY,
        Stage::OPERATIONAL,
        true,
        &[
            ("InitiatorName", INITIATOR),
            ("TargetName", TARGET),
            ("AuthMethod", "CHAP,None"),
        ],
    );
    assert_eq!(lr.status, LoginStatus::SUCCESS);
    chap_exchange_after_first(p, secret)
}

fn chap_exchange_after_first(p: &mut Pair, secret: &[u8]) -> LoginStatus {
    let (_, k) = p.login_step(
        Stage::SECURITY,
        Stage::OPERATIONAL,
        true,
        &[("CHAP_A", "5")],
    );
    let id: u8 = kv(&k, "CHAP_I").unwrap().parse().unwrap();
    let challenge = decode_binary(kv(&k, "CHAP_C").unwrap()).unwrap();
    let resp = encode_hex(&ChapAlgorithm::Md5.response(id, secret, &challenge));
    let (lr, _) = p.login_step(
        Stage::SECURITY,
        Stage::OPERATIONAL,
        true,
        &[("CHAP_N", "alice"), ("CHAP_R", resp.as_str())],
    );
    lr.status
}

/// The brake (crate::brake) with simulated time: five wrong CHAP answers
/// from one address cost nothing, the sixth login from it gets its first
/// answer only after 1 s (nothing waits: the request is held until
/// `poll_timeout`), a login from another address is not held, and a
/// proven login forgets the failures.
fn chap_failures_hold_back_the_next_login_from_that_address(mode: Mode) {
    use std::sync::{Arc, Mutex};
    let policy = ChapPolicy {
        initiator: Some(ChapCredentials {
            user: "alice".into(),
            secret: b"alice-secret-123".to_vec(),
        }),
        target: None,
    };
    let cfg = portal_config(limits(), policy);
    let table = Arc::new(Mutex::new(rustgt_iscsi::SessionTable::new()));
    let from =
        |conn: u64, peer: &str| Pair::with_peer(cfg.clone(), table.clone(), conn, mode, peer);
    for i in 0..5 {
        let mut p = from(i, "127.0.0.1:40000");
        assert_eq!(
            chap_exchange(&mut p, b"wrong-secret-xyz"),
            LoginStatus::AUTHENTICATION_FAILURE
        );
        assert!(p.conn.is_closing());
    }
    assert_eq!(table.lock().unwrap().brake().failures_total(), 5);

    // The sixth from that address (another port): held for 1 s.
    let mut p = from(10, "127.0.0.1:40001");
    // Only the login deadline (15 s from the connection's start).
    let login_deadline = p.conn.poll_timeout();
    assert!(
        login_deadline.is_some_and(|t| t >= p.now + Duration::from_secs(10)),
        "nothing but the login deadline armed before a request"
    );
    let first = p.login_request(
        Stage::SECURITY,
        Stage::OPERATIONAL,
        true,
        &[
            ("InitiatorName", INITIATOR),
            ("TargetName", TARGET),
            ("AuthMethod", "CHAP,None"),
        ],
    );
    p.send(&first);
    assert!(p.replies().is_empty(), "answered at once");
    let due = p.conn.poll_timeout().expect("held until a deadline");
    assert_eq!(due, p.now + Duration::from_secs(1));
    p.now += Duration::from_millis(999);
    p.conn.handle_timeout(p.now);
    p.pump();
    assert!(p.replies().is_empty(), "answered before the deadline");

    // Meanwhile another address logs in at once, and proves itself.
    let mut other = from(11, "127.0.0.2:40000");
    assert_eq!(
        chap_exchange(&mut other, b"alice-secret-123"),
        LoginStatus::SUCCESS
    );

    p.now += Duration::from_millis(1);
    p.conn.handle_timeout(p.now);
    p.pump();
    match &p.replies()[..] {
        [Reply::LoginResponse(lr)] => assert_eq!(lr.status, LoginStatus::SUCCESS),
        other => panic!("expected the held login response: {other:?}"),
    }
    assert_eq!(
        p.conn.poll_timeout(),
        login_deadline,
        "no hold left, only the login deadline"
    );
    // The rest of the exchange is not held again; the right secret logs in.
    assert_eq!(
        chap_exchange_after_first(&mut p, b"alice-secret-123"),
        LoginStatus::SUCCESS
    );
    // ... and forgets the failures: the next login from there is free.
    let mut p = from(12, "127.0.0.1:40002");
    assert_eq!(
        chap_exchange(&mut p, b"alice-secret-123"),
        LoginStatus::SUCCESS
    );
    assert_eq!(table.lock().unwrap().brake().held_total(), 1);

    // A second request while the first is held closes the connection.
    for i in 0..5 {
        let mut p = from(20 + i, "127.0.0.1:40003");
        chap_exchange(&mut p, b"wrong-secret-xyz");
    }
    let mut p = from(30, "127.0.0.1:40004");
    p.send(&first);
    assert!(p.replies().is_empty());
    p.send(&first);
    assert!(p.conn.is_closing());
}

fn chap_required_refuses_skipping_security(mode: Mode) {
    let policy = ChapPolicy {
        initiator: Some(ChapCredentials {
            user: "alice".into(),
            secret: b"alice-secret-123".to_vec(),
        }),
        target: None,
    };
    let mut p = Pair::with_mode(portal_config(limits(), policy), mode);
    let (lr, _) = p.login_step(
        Stage::OPERATIONAL,
        Stage::FULL_FEATURE,
        true,
        &[("InitiatorName", INITIATOR), ("TargetName", TARGET)],
    );
    assert_eq!(lr.status, LoginStatus::AUTHENTICATION_FAILURE);
}

/// 64 KiB through small PDUs (TCP, with digests) or small RDMA operations
/// (iSER, 4 KiB each), with 512 bytes of immediate data.
fn read_write_round_trip_with_small_pdus(mode: Mode) {
    let mut cfg = portal_config(
        Limits {
            max_recv_data_segment_length: 512,
            max_burst_length: 4096,
            first_burst_length: 1024,
            max_outstanding_r2t: 2,
            ..limits()
        },
        ChapPolicy::default(),
    );
    cfg.queue_depth = 8;
    let mut p = Pair::with_mode(cfg, mode);
    let k = p.login(&[
        ("HeaderDigest", "CRC32C"),
        ("DataDigest", "CRC32C"),
        ("MaxRecvDataSegmentLength", "512"),
        ("MaxBurstLength", "4096"),
        ("FirstBurstLength", "1024"),
        ("MaxOutstandingR2T", "2"),
    ]);
    match mode {
        Mode::Tcp => {
            assert_eq!(kv(&k, "MaxRecvDataSegmentLength"), Some("512"));
            assert!(p.hd && p.dd);
        }
        Mode::Iser => assert!(!p.hd && !p.dd, "no digests on iSER"),
    }
    let data = pattern(64 * 1024, 3);
    // 512 bytes of immediate data, the rest solicited: R2Ts of <= 4 KiB in
    // 512-byte PDUs, or RDMA Reads of <= 4 KiB.
    assert_eq!(p.write10(10, &data, 512, 512), 0);
    let (status, back, sense) = p.read10(10, 128);
    assert_eq!(status, 0, "sense {sense:?}");
    assert_eq!(back, data);
    if mode == Mode::Iser {
        let reads: u32 = p
            .posted
            .iter()
            .filter_map(|o| match o {
                Posted::Read { len, .. } => Some(*len),
                _ => None,
            })
            .sum();
        let writes: usize = p
            .posted
            .iter()
            .filter_map(|o| match o {
                Posted::Write { len, .. } => Some(*len),
                _ => None,
            })
            .sum();
        assert_eq!(reads as usize, data.len() - 512, "RDMA Read the rest");
        assert_eq!(writes, data.len(), "RDMA Write all of Data-In");
    }
}

fn unsolicited_data_out_with_initial_r2t_no(mode: Mode) {
    let mut p = Pair::with_mode(
        portal_config(
            Limits {
                initial_r2t: false,
                first_burst_length: 8192,
                ..limits()
            },
            ChapPolicy::default(),
        ),
        mode,
    );
    let k = p.login(&[
        ("InitialR2T", "No"),
        ("ImmediateData", "Yes"),
        ("FirstBurstLength", "8192"),
    ]);
    assert_eq!(kv(&k, "InitialR2T"), Some("No"));
    let data = pattern(16384, 9);
    // 1 KiB immediate + 7 KiB unsolicited Data-Out, then R2Ts (or RDMA
    // Reads from the first solicited byte) for the rest.
    p.stage_write(data.clone(), 8192);
    let itt = p.scsi_cmd(
        &write10_cdb(100, 32),
        false,
        true,
        16384,
        data[..1024].to_vec(),
        false,
    );
    p.data_out(itt, RESERVED_TAG, 0, 1024, &data[1024..4096], false);
    p.data_out(itt, RESERVED_TAG, 1, 4096, &data[4096..8192], true);
    if mode == Mode::Tcp {
        let replies = p.replies();
        let r2t = match &replies[..] {
            [Reply::R2t(r)] => r.clone(),
            other => panic!("expected one R2T, got {other:?}"),
        };
        assert_eq!(r2t.buffer_offset, 8192);
        assert_eq!(r2t.desired_len, 8192);
        p.data_out(itt, r2t.ttt, 0, 8192, &data[8192..], true);
    } else {
        assert_eq!(
            p.posted
                .iter()
                .filter(|o| matches!(o, Posted::Read { itt: i, .. } if *i == itt))
                .count(),
            2,
            "8 KiB solicited in 4 KiB RDMA Reads"
        );
    }
    let (status, _, _) = p.collect_result(itt);
    assert_eq!(status, 0);
    let (_, back, _) = p.read10(100, 32);
    assert_eq!(back, data);
}

fn out_of_window_cmdsn_is_ignored_and_window_moves(mode: Mode) {
    let mut p = default_pair(mode);
    p.login(&[]);
    // CmdSN too high: silently ignored.
    p.cmd_sn += 100;
    let _ = p.scsi_cmd(&[0u8; 6], false, false, 0, vec![], true);
    assert!(p.replies().is_empty());
    p.cmd_sn -= 101;
    // CmdSN too low (already used): ignored too.
    p.cmd_sn -= 1;
    let _ = p.scsi_cmd(&[0u8; 6], false, false, 0, vec![], true);
    assert!(p.replies().is_empty());
    // The expected CmdSN works and the window slides.
    let itt = p.scsi_cmd(&[0u8; 6], false, false, 0, vec![], true);
    let r = p.replies();
    match &r[..] {
        [Reply::ScsiResponse(s)] => {
            assert_eq!(s.itt, itt);
            assert_eq!(s.status, 0);
            assert_eq!(s.exp_cmd_sn, p.cmd_sn);
            assert_eq!(s.max_cmd_sn, p.cmd_sn.wrapping_add(15));
        }
        other => panic!("{other:?}"),
    }
}

/// Rejects that do not depend on framing: an unknown opcode, a data
/// segment over the negotiated limit, a SNACK.
fn unknown_opcodes_and_oversized_pdus_get_rejects(mode: Mode) {
    let mut p = default_pair(mode);
    p.login(&[]);
    let mut bhs = [0u8; 48];
    bhs[0] = 0x1c;
    bhs[16..20].copy_from_slice(&0x999u32.to_be_bytes());
    p.feed(&frame(mode, &bhs, &[]));
    match &p.replies()[..] {
        [Reply::Reject(r)] => {
            assert_eq!(r.reason, RejectReason::COMMAND_NOT_SUPPORTED);
            assert_eq!(&r.data[..], &bhs[..]);
        }
        other => panic!("{other:?}"),
    }
    // A NOP-Out declaring 1 MiB of data: refused on its header alone.
    let mut nop = [0u8; 48];
    nop[0] = 0x40;
    nop[1] = 0x80;
    nop[5..8].copy_from_slice(&[0x10, 0x00, 0x00]);
    nop[16..20].copy_from_slice(&7u32.to_be_bytes());
    nop[20..24].copy_from_slice(&RESERVED_TAG.to_be_bytes());
    p.feed(&frame(mode, &nop, &vec![0xee; 1 << 20]));
    match &p.replies()[..] {
        [Reply::Reject(r)] => assert_eq!(r.reason, RejectReason::PROTOCOL_ERROR),
        other => panic!("{other:?}"),
    }
    // SNACK needs ERL > 0.
    let snack = Request {
        header: RequestHeader::Snack(SnackRequest {
            snack_type: SnackType::DATA_R2T,
            lun: 0,
            itt: 0x44,
            ttt: RESERVED_TAG,
            exp_stat_sn: p.exp_stat_sn,
            beg_run: 0,
            run_length: 0,
        }),
        data: vec![],
    };
    p.send(&snack);
    match &p.replies()[..] {
        [Reply::Reject(r)] => assert_eq!(r.reason, RejectReason::COMMAND_NOT_SUPPORTED),
        other => panic!("{other:?}"),
    }
    assert!(!p.conn.is_closing());
    let (status, data, _) = p.read10(0, 1);
    assert_eq!((status, data.len()), (0, 512));
}

/// A raw BHS and data segment as the transport frames them.
fn frame(mode: Mode, bhs: &[u8; 48], data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    if mode == Mode::Iser {
        out.extend_from_slice(&ControlHeader::default().encode());
    }
    out.extend_from_slice(bhs);
    out.extend_from_slice(data);
    out
}

#[test]
fn tcp_malformed_pdus_get_rejects_and_the_session_survives() {
    let mut p = default_pair(Mode::Tcp);
    p.login(&[]);
    // Unknown opcode 0x1c.
    let mut bhs = [0u8; 48];
    bhs[0] = 0x1c;
    bhs[16..20].copy_from_slice(&0x999u32.to_be_bytes());
    p.feed(&bhs);
    match &p.replies()[..] {
        [Reply::Reject(r)] => {
            assert_eq!(r.reason, RejectReason::COMMAND_NOT_SUPPORTED);
            assert_eq!(&r.data[..], &bhs[..]);
        }
        other => panic!("{other:?}"),
    }
    // A NOP-Out whose DataSegmentLength is over the negotiated limit: the
    // header is rejected and the payload skipped without being buffered.
    let mut nop = [0u8; 48];
    nop[0] = 0x40;
    nop[1] = 0x80;
    nop[5..8].copy_from_slice(&[0x10, 0x00, 0x00]); // 1 MiB
    nop[16..20].copy_from_slice(&7u32.to_be_bytes());
    nop[20..24].copy_from_slice(&RESERVED_TAG.to_be_bytes());
    p.feed(&nop);
    match &p.replies()[..] {
        [Reply::Reject(r)] => assert_eq!(r.reason, RejectReason::PROTOCOL_ERROR),
        other => panic!("{other:?}"),
    }
    p.feed(&vec![0xee; 1 << 20]);
    assert!(p.replies().is_empty());
    // Truncated header: nothing happens until the rest arrives.
    let tur = Request {
        header: RequestHeader::NopOut(NopOut {
            immediate: true,
            lun: 0,
            itt: 0x55,
            ttt: RESERVED_TAG,
            cmd_sn: p.cmd_sn,
            exp_stat_sn: p.exp_stat_sn,
        }),
        data: b"ping".to_vec(),
    }
    .encode(false, false);
    p.feed(&tur[..20]);
    assert!(p.replies().is_empty());
    p.feed(&tur[20..]);
    match &p.replies()[..] {
        [Reply::NopIn(n)] => {
            assert_eq!(n.itt, 0x55);
            assert_eq!(n.data, b"ping");
        }
        other => panic!("{other:?}"),
    }
    // And SCSI still works.
    let (status, data, _) = p.read10(0, 1);
    assert_eq!((status, data.len()), (0, 512));
}

/// Unsolicited Data-Out rules hold on both transports (RFC 7143 §4.2.4.2):
/// none while InitialR2T=Yes, DataSN in order, within FirstBurstLength.
fn unsolicited_data_out_errors_fail_the_task_not_the_connection(mode: Mode) {
    let mut p = Pair::with_mode(
        portal_config(
            Limits {
                initial_r2t: false,
                first_burst_length: 4096,
                ..limits()
            },
            ChapPolicy::default(),
        ),
        mode,
    );
    p.login(&[("InitialR2T", "No"), ("FirstBurstLength", "4096")]);
    let check = |p: &mut Pair, itt: u32, asc: u8, ascq: u8| {
        let replies = p.replies();
        let s = replies
            .iter()
            .find_map(|r| match r {
                Reply::ScsiResponse(s) if s.itt == itt => Some(s.clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no response for {itt:#x}: {replies:?}"));
        assert_eq!(s.status, 2);
        assert_eq!(s.sense[2] & 0x0f, 0x0b, "ABORTED COMMAND");
        assert_eq!((s.sense[12], s.sense[13]), (asc, ascq));
    };
    // Wrong DataSN.
    p.stage_write(vec![0u8; 8192], 4096);
    let itt = p.scsi_cmd(&write10_cdb(0, 16), false, true, 8192, vec![], false);
    p.data_out(itt, RESERVED_TAG, 5, 0, &[0u8; 512], false);
    check(&mut p, itt, 0x4b, 0x00);
    // Beyond FirstBurstLength.
    p.stage_write(vec![0u8; 8192], 4096);
    let itt = p.scsi_cmd(&write10_cdb(0, 16), false, true, 8192, vec![], false);
    p.data_out(itt, RESERVED_TAG, 0, 0, &[0u8; 4096], false);
    p.data_out(itt, RESERVED_TAG, 1, 4096, &[0u8; 512], false);
    check(&mut p, itt, 0x0c, 0x0c);
    // After the F bit closed the unsolicited burst.
    p.stage_write(vec![0u8; 8192], 512);
    p.hold_reads = true;
    let itt = p.scsi_cmd(&write10_cdb(0, 16), false, true, 8192, vec![], false);
    p.data_out(itt, RESERVED_TAG, 0, 0, &[0u8; 512], true);
    let _ = p.replies();
    p.data_out(itt, RESERVED_TAG, 1, 512, &[0u8; 512], false);
    if mode == Mode::Iser {
        // The response waits until no RDMA Read still reads the buffer
        // the initiator is about to release; the Read's data is ignored.
        assert!(p.replies().is_empty());
        p.release_reads();
    }
    check(&mut p, itt, 0x0c, 0x0c);
    p.hold_reads = false;
    assert!(p.replies().is_empty());
    assert!(!p.conn.is_closing());
    let (status, data, _) = p.read10(0, 2);
    assert_eq!((status, data.len()), (0, 1024));
}

#[test]
fn tcp_data_out_sequence_errors_fail_the_task_not_the_connection() {
    let mut p = Pair::new(portal_config(
        Limits {
            immediate_data: false,
            ..limits()
        },
        ChapPolicy::default(),
    ));
    p.login(&[("ImmediateData", "No")]);
    let check = |p: &mut Pair, itt: u32, asc: u8, ascq: u8| match &p.replies()[..] {
        [Reply::ScsiResponse(s)] => {
            assert_eq!((s.itt, s.status), (itt, 2));
            assert_eq!(s.sense[2] & 0x0f, 0x0b, "ABORTED COMMAND");
            assert_eq!((s.sense[12], s.sense[13]), (asc, ascq));
        }
        other => panic!("{other:?}"),
    };
    let r2t_of = |p: &mut Pair| match &p.replies()[..] {
        [Reply::R2t(r)] => r.clone(),
        other => panic!("{other:?}"),
    };
    // Wrong DataSN.
    let itt = p.scsi_cmd(&write10_cdb(0, 2), false, true, 1024, vec![], true);
    let r2t = r2t_of(&mut p);
    p.data_out(itt, r2t.ttt, 27, 0, &[0u8; 512], false);
    check(&mut p, itt, 0x4b, 0x00);
    // The rest of that task's data is ignored.
    p.data_out(itt, r2t.ttt, 1, 512, &[0u8; 512], true);
    assert!(p.replies().is_empty());
    // Wrong offset.
    let itt = p.scsi_cmd(&write10_cdb(0, 2), false, true, 1024, vec![], true);
    let r2t = r2t_of(&mut p);
    p.data_out(itt, r2t.ttt, 0, 512, &[0u8; 512], false);
    check(&mut p, itt, 0x4b, 0x05);
    // Unknown TTT.
    let itt = p.scsi_cmd(&write10_cdb(0, 2), false, true, 1024, vec![], true);
    let _ = r2t_of(&mut p);
    p.data_out(itt, 0x7777, 0, 0, &[0u8; 512], false);
    check(&mut p, itt, 0x4b, 0x01);
    // Unsolicited data while InitialR2T=Yes.
    let itt = p.scsi_cmd(&write10_cdb(0, 2), false, true, 1024, vec![], false);
    let _ = r2t_of(&mut p);
    p.data_out(itt, RESERVED_TAG, 0, 0, &[0u8; 512], false);
    check(&mut p, itt, 0x0c, 0x0c);
    assert!(!p.conn.is_closing());
    let (status, data, _) = p.read10(0, 2);
    assert_eq!((status, data.len()), (0, 1024));
}

fn nop_in_ping_and_timeout_with_simulated_time(mode: Mode) {
    let mut p = default_pair(mode);
    p.login(&[]);
    let t = p.conn.poll_timeout().expect("keepalive armed");
    assert_eq!(t, p.now + Duration::from_secs(5));
    p.now += Duration::from_secs(5);
    p.conn.handle_timeout(p.now);
    p.pump();
    let ping = match &p.replies()[..] {
        [Reply::NopIn(n)] => n.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(ping.itt, RESERVED_TAG);
    // Answer it: the connection stays up.
    let ans = Request {
        header: RequestHeader::NopOut(NopOut {
            immediate: true,
            lun: 0,
            itt: RESERVED_TAG,
            ttt: ping.ttt,
            cmd_sn: p.cmd_sn,
            exp_stat_sn: p.exp_stat_sn,
        }),
        data: vec![],
    };
    p.send(&ans);
    p.now += Duration::from_secs(9);
    p.conn.handle_timeout(p.now);
    assert!(!p.conn.is_closing());
    // Next ping unanswered: dropped after the timeout.
    p.now += Duration::from_secs(5);
    p.conn.handle_timeout(p.now);
    p.now += Duration::from_secs(11);
    p.conn.handle_timeout(p.now);
    assert!(p.conn.is_closing());
}

fn discovery_send_targets(mode: Mode) {
    let mut p = default_pair(mode);
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
    let req = Request {
        header: RequestHeader::Text(TextRequest {
            immediate: true,
            final_bit: true,
            cont: false,
            lun: 0,
            itt: 0x77,
            ttt: RESERVED_TAG,
            cmd_sn: p.cmd_sn,
            exp_stat_sn: p.exp_stat_sn,
        }),
        data: encode_text(&[("SendTargets".into(), "All".into())]),
    };
    p.send(&req);
    match &p.replies()[..] {
        [Reply::TextResponse(t)] => {
            let kv = parse_text(&t.data).unwrap();
            assert_eq!(
                kv,
                vec![
                    ("TargetName".to_string(), TARGET.to_string()),
                    ("TargetAddress".to_string(), "127.0.0.1:3260,1".to_string()),
                ]
            );
            assert!(t.final_bit);
        }
        other => panic!("{other:?}"),
    }
    // SCSI commands have no place in a discovery session.
    let _ = p.scsi_cmd(&[0u8; 6], false, false, 0, vec![], true);
    assert!(matches!(&p.replies()[..], [Reply::Reject(_)]));
}

fn logout_closes_after_response(mode: Mode) {
    let mut p = default_pair(mode);
    p.login(&[]);
    let req = Request {
        header: RequestHeader::Logout(LogoutRequest {
            immediate: true,
            reason: LogoutReason::CLOSE_SESSION,
            itt: 0x66,
            cid: 1,
            cmd_sn: p.cmd_sn,
            exp_stat_sn: p.exp_stat_sn,
        }),
        data: vec![],
    };
    p.send(&req);
    match &p.replies()[..] {
        [Reply::LogoutResponse(l)] => {
            assert_eq!((l.itt, l.response), (0x66, LogoutResponseCode::CLOSED))
        }
        other => panic!("{other:?}"),
    }
    assert!(p.conn.is_closing());
}

fn abort_task_of_a_write_still_collecting_data(mode: Mode) {
    let mut p = Pair::with_mode(
        portal_config(
            Limits {
                immediate_data: false,
                ..limits()
            },
            ChapPolicy::default(),
        ),
        mode,
    );
    p.login(&[("ImmediateData", "No")]);
    p.hold_reads = true;
    let itt = p.scsi_cmd(&write10_cdb(0, 8), false, true, 4096, vec![], true);
    match mode {
        Mode::Tcp => assert!(matches!(&p.replies()[..], [Reply::R2t(_)])),
        Mode::Iser => {
            assert!(p.replies().is_empty(), "no R2T PDU on iSER");
            assert_eq!(p.held_reads.len(), 1, "an RDMA Read instead");
        }
    }
    let req = Request {
        header: RequestHeader::TaskMgmt(TaskMgmtRequest {
            immediate: true,
            function: TmfCode::ABORT_TASK,
            lun: 0,
            itt: 0x500,
            referenced_tag: itt,
            cmd_sn: p.cmd_sn,
            exp_stat_sn: p.exp_stat_sn,
            ref_cmd_sn: p.cmd_sn - 1,
            exp_data_sn: 0,
        }),
        data: vec![],
    };
    p.send(&req);
    if mode == Mode::Iser {
        // The abort is answered once the task's RDMA Read has finished (its
        // data is dropped): the initiator frees the buffer on the answer.
        assert!(p.replies().is_empty());
        p.release_reads();
    }
    match &p.replies()[..] {
        [Reply::TaskMgmtResponse(t)] => {
            assert_eq!((t.itt, t.response), (0x500, TmfResult::COMPLETE))
        }
        other => panic!("{other:?}"),
    }
    // Late data for the aborted task is ignored, not an error.
    if mode == Mode::Tcp {
        p.data_out(itt, 1, 0, 0, &[0u8; 512], false);
    }
    assert!(!p.conn.is_closing());
    assert!(p.replies().is_empty());
    let (status, data, _) = p.read10(0, 8);
    assert_eq!((status, data.len()), (0, 4096));
}

fn abort_task_request(itt: u32, cmd_sn: u32, immediate: bool) -> Request {
    Request {
        header: RequestHeader::TaskMgmt(TaskMgmtRequest {
            immediate,
            function: TmfCode::ABORT_TASK,
            lun: 0,
            itt,
            referenced_tag: 0x7fff_0000 | itt,
            cmd_sn,
            exp_stat_sn: 0,
            ref_cmd_sn: cmd_sn.wrapping_sub(1),
            exp_data_sn: 0,
        }),
        data: vec![],
    }
}

fn a_non_immediate_tmf_gives_its_window_slot_back(mode: Mode) {
    let mut p = default_pair(mode);
    p.login(&[]);
    let mut window = None;
    for i in 0..3u32 {
        let req = abort_task_request(0x600 + i, p.cmd_sn, false);
        p.cmd_sn = p.cmd_sn.wrapping_add(1);
        p.send(&req);
        match &p.replies()[..] {
            [Reply::TaskMgmtResponse(t)] => {
                assert_eq!(t.response, TmfResult::TASK_DOES_NOT_EXIST);
                assert_eq!(t.exp_cmd_sn, p.cmd_sn);
                // The window stays as wide as it was: ExpCmdSN and
                // MaxCmdSN move together.
                let w = t.max_cmd_sn.wrapping_sub(t.exp_cmd_sn);
                assert_eq!(*window.get_or_insert(w), w, "window shrank at {i}");
            }
            other => panic!("{other:?}"),
        }
    }
}

/// The PDUs the target has queued, without running its events.
fn sent_now(p: &mut Pair) -> Vec<Reply> {
    let mut bytes = Vec::new();
    while let Some(out) = p.conn.poll_transmit() {
        for seg in out {
            bytes.extend_from_slice(&seg);
        }
    }
    let mut pos = 0;
    let mut replies = Vec::new();
    while pos < bytes.len() {
        let (r, n) = Reply::decode(&bytes[pos..], false, false).expect("a whole PDU");
        pos += n;
        replies.push(r);
    }
    replies
}

#[test]
fn tcp_a_burst_of_immediate_tmfs_runs_a_few_at_a_time_and_answers_all() {
    use rustgt_iscsi::conn::{MAX_TMFS_QUEUED, MAX_TMFS_RUNNING};
    use rustgt_iscsi::Event;
    const BURST: u32 = 1000;
    let mut p = default_pair(Mode::Tcp);
    p.login(&[]);
    let bytes: Vec<u8> = (1..=BURST)
        .flat_map(|itt| abort_task_request(itt, p.cmd_sn, true).encode(false, false))
        .collect();
    // All of it arrives in one read; nothing is run yet.
    p.conn.handle_input(&bytes, p.now);
    assert_eq!(p.conn.tmfs_pending(), (MAX_TMFS_RUNNING, MAX_TMFS_QUEUED));
    let mut running = std::collections::VecDeque::new();
    while let Some(ev) = p.conn.poll_event() {
        match ev {
            Event::TaskMgmt { itt, .. } => running.push_back(itt),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(running.len(), MAX_TMFS_RUNNING, "only the running slots");
    // Past the slots and the queue: Function Rejected at once.
    let rejected: Vec<u32> = sent_now(&mut p)
        .iter()
        .map(|r| match r {
            Reply::TaskMgmtResponse(t) => {
                assert_eq!(t.response, TmfResult::REJECTED);
                t.itt
            }
            other => panic!("{other:?}"),
        })
        .collect();
    let served = MAX_TMFS_RUNNING + MAX_TMFS_QUEUED;
    assert_eq!(rejected.len(), BURST as usize - served);
    assert!(rejected.iter().all(|itt| *itt as usize > served));
    // Each answer starts the next queued one, in arrival order.
    let mut answered = Vec::new();
    let mut rounds = 0;
    while let Some(itt) = running.pop_front() {
        rounds += 1;
        assert!(rounds <= served, "more TMFs ran than were accepted");
        p.conn.tmf_done(itt, rustgt_scsi::TmfResponse::TaskNotFound);
        answered.push(itt);
        while let Some(ev) = p.conn.poll_event() {
            match ev {
                Event::TaskMgmt { itt, .. } => running.push_back(itt),
                other => panic!("{other:?}"),
            }
        }
        assert!(running.len() <= MAX_TMFS_RUNNING);
    }
    let expected: Vec<u32> = (1..=served as u32).collect();
    assert_eq!(answered, expected);
    let replies = sent_now(&mut p);
    assert_eq!(replies.len(), served);
    assert!(replies.iter().all(|r| matches!(
        r,
        Reply::TaskMgmtResponse(t) if t.response == TmfResult::TASK_DOES_NOT_EXIST
    )));
    assert_eq!(p.conn.tmfs_pending(), (0, 0));
    // Room again: the next request is served, not rejected.
    let req = abort_task_request(BURST + 1, p.cmd_sn, true);
    p.send(&req);
    match &p.replies()[..] {
        [Reply::TaskMgmtResponse(t)] => assert_eq!(
            (t.itt, t.response),
            (BURST + 1, TmfResult::TASK_DOES_NOT_EXIST)
        ),
        other => panic!("{other:?}"),
    }
}

fn reinstatement_reports_the_old_connection(mode: Mode) {
    let table = std::sync::Arc::new(std::sync::Mutex::new(rustgt_iscsi::SessionTable::new()));
    let cfg = portal_config(limits(), ChapPolicy::default());
    let mut a = Pair::with_table_mode(cfg.clone(), table.clone(), 1, mode);
    a.login(&[]);
    let mut b = Pair::with_table_mode(cfg, table, 2, mode);
    b.isid = a.isid;
    // Drive b's login by hand to observe its events.
    let req = b.login_request(
        Stage::SECURITY,
        Stage::FULL_FEATURE,
        true,
        &[
            ("InitiatorName", INITIATOR),
            ("TargetName", TARGET),
            ("AuthMethod", "None"),
        ],
    );
    let bytes = frame(
        mode,
        &req.encode(false, false)[..48].try_into().unwrap(),
        &req.data,
    );
    match mode {
        Mode::Tcp => b.conn.handle_input(&req.encode(false, false), b.now),
        Mode::Iser => b.conn.handle_message(&bytes, b.now),
    }
    let mut saw = false;
    while let Some(ev) = b.conn.poll_event() {
        if let rustgt_iscsi::Event::Reinstate { conn_id } = ev {
            assert_eq!(conn_id, 1);
            saw = true;
        }
    }
    assert!(saw, "reinstatement of connection 1 expected");
}

// ---------------------------------------------------------------------------
// iSER only: RDMA data movement, buffers, Hello, message framing.
// ---------------------------------------------------------------------------

fn iser_pair(limits: Limits, params: IserParams) -> Pair {
    Pair::iser(portal_config(limits, ChapPolicy::default()), params)
}

/// The operations posted for one task, in order.
fn posted_for(p: &Pair, itt: u32, response_stag: Option<u32>) -> Vec<Posted> {
    p.posted
        .iter()
        .filter(|o| match o {
            Posted::Write { itt: i, .. } | Posted::Read { itt: i, .. } => *i == itt,
            Posted::Send(Some(Opcode::SCSI_RESPONSE), inv) => *inv == response_stag,
            _ => false,
        })
        .cloned()
        .collect()
}

#[test]
fn iser_read_data_is_rdma_written_before_the_response_that_invalidates() {
    let mut p = iser_pair(limits(), iser_params());
    p.login(&[]);
    let data = pattern(8192, 5);
    assert_eq!(p.write10(40, &data, 0, 0), 0);
    let write_itt = p.itt;
    let write_stag = p.task_regions[&write_itt].1.unwrap();
    // The write's response retired its write STag.
    assert!(p.regions[&write_stag].invalidated);

    let (status, back, _) = p.read10(40, 16);
    assert_eq!((status, &back), (0, &data));
    let itt = p.itt;
    let stag = p.task_regions[&itt].0.unwrap();
    assert_eq!(
        posted_for(&p, itt, Some(stag)),
        vec![
            Posted::Write { itt, len: 4096 },
            Posted::Write { itt, len: 4096 },
            Posted::Send(Some(Opcode::SCSI_RESPONSE), Some(stag)),
        ],
        "Data-In by RDMA Write, then the response with Send with Invalidate"
    );
    assert!(p.regions[&stag].invalidated);
    // A command without buffers has nothing to invalidate.
    let itt = p.scsi_cmd(&[0u8; 6], false, false, 0, vec![], true);
    assert_eq!(p.collect_result(itt).0, 0);
    assert_eq!(
        p.posted.last(),
        Some(&Posted::Send(Some(Opcode::SCSI_RESPONSE), None))
    );
}

#[test]
fn iser_login_declares_unexpected_pdus_only_to_initiators_that_know_the_key() {
    let mut p = iser_pair(
        Limits {
            max_outstanding_unexpected_pdus: 48,
            ..limits()
        },
        iser_params(),
    );
    let k = p.login(&[("MaxOutstandingUnexpectedPDUs", "8")]);
    assert_eq!(kv(&k, "MaxOutstandingUnexpectedPDUs"), Some("48"));
    assert_eq!(
        p.conn
            .session()
            .unwrap()
            .params
            .max_outstanding_unexpected_pdus,
        8
    );
}

#[test]
fn iser_no_send_with_invalidate_unless_agreed() {
    let mut p = iser_pair(
        limits(),
        IserParams {
            remote_invalidate: false,
            ..iser_params()
        },
    );
    p.login(&[]);
    let (status, _, _) = p.read10(0, 1);
    assert_eq!(status, 0);
    let stag = p.task_regions[&p.itt].0.unwrap();
    assert!(!p.regions[&stag].invalidated);
    assert!(p
        .posted
        .iter()
        .all(|o| !matches!(o, Posted::Send(_, Some(_)))));
}

#[test]
fn iser_response_carries_residuals_and_no_data_sn() {
    let mut p = iser_pair(limits(), iser_params());
    p.login(&[]);
    // INQUIRY with a 4 KiB allocation length: far less data comes back.
    let mut cdb = [0u8; 6];
    cdb[0] = 0x12;
    cdb[3..5].copy_from_slice(&4096u16.to_be_bytes());
    let itt = p.scsi_cmd(&cdb, true, false, 4096, vec![], true);
    let replies = p.replies();
    let s = match &replies[..] {
        [Reply::ScsiResponse(s)] => s.clone(),
        other => panic!("{other:?}"),
    };
    let written = p.regions[&p.task_regions[&itt].0.unwrap()].written;
    assert_eq!((s.status, s.underflow), (0, true));
    assert_eq!(s.residual as usize, 4096 - written);
    assert_eq!(s.exp_data_sn, 0, "no Data-In or R2T PDU was sent");
}

#[test]
fn iser_rdma_reads_respect_read_depth_and_max_outstanding_r2t() {
    let lim = Limits {
        immediate_data: false,
        max_outstanding_r2t: 16,
        ..limits()
    };
    // Connection-wide bound: 2 Reads in flight over three 32 KiB writes.
    let mut p = iser_pair(
        lim.clone(),
        IserParams {
            read_depth: 2,
            ..iser_params()
        },
    );
    p.login(&[("ImmediateData", "No"), ("MaxOutstandingR2T", "16")]);
    p.hold_reads = true;
    let blobs: Vec<Vec<u8>> = (0..3).map(|i| pattern(32 * 1024, 20 + i)).collect();
    let mut itts = Vec::new();
    for (i, b) in blobs.iter().enumerate() {
        p.stage_write(b.clone(), 0);
        itts.push(p.scsi_cmd(
            &write10_cdb(100 * i as u32, 64),
            false,
            true,
            32 * 1024,
            vec![],
            true,
        ));
    }
    let mut served = std::collections::HashSet::new();
    let mut max_held = 0;
    while !p.held_reads.is_empty() {
        max_held = max_held.max(p.held_reads.len());
        served.insert(p.held_reads[0].itt);
        p.release_one();
    }
    assert_eq!(max_held, 2, "read_depth bounds the Reads in flight");
    assert_eq!(served.len(), 3, "every write got Reads");
    let statuses: Vec<u8> = p
        .replies()
        .into_iter()
        .map(|r| match r {
            Reply::ScsiResponse(s) => s.status,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(statuses, vec![0, 0, 0]);
    p.hold_reads = false;
    for (i, b) in blobs.iter().enumerate() {
        assert_eq!(&p.read10(100 * i as u32, 64).1, b);
    }

    // Per-task bound: MaxOutstandingR2T=1 keeps one Read per task even when
    // the connection allows more.
    let mut p = iser_pair(
        lim,
        IserParams {
            read_depth: 8,
            ..iser_params()
        },
    );
    p.login(&[("ImmediateData", "No"), ("MaxOutstandingR2T", "1")]);
    p.hold_reads = true;
    p.stage_write(pattern(32 * 1024, 1), 0);
    let _ = p.scsi_cmd(&write10_cdb(0, 64), false, true, 32 * 1024, vec![], true);
    p.stage_write(pattern(32 * 1024, 2), 0);
    let _ = p.scsi_cmd(&write10_cdb(64, 64), false, true, 32 * 1024, vec![], true);
    while !p.held_reads.is_empty() {
        let mut per_task = std::collections::HashMap::new();
        for r in &p.held_reads {
            *per_task.entry(r.itt).or_insert(0) += 1;
        }
        assert!(per_task.values().all(|n| *n == 1), "{per_task:?}");
        p.release_one();
    }
    assert_eq!(p.replies().len(), 2);
}

#[test]
fn iser_commands_without_the_buffers_they_need_are_refused() {
    let mut p = iser_pair(limits(), iser_params());
    p.login(&[]);
    let refused = |p: &mut Pair, itt: u32| match &p.replies()[..] {
        [Reply::ScsiResponse(s)] => {
            assert_eq!((s.itt, s.status), (itt, 2));
            assert_eq!(s.sense[2] & 0x0f, 0x0b, "ABORTED COMMAND");
            assert_eq!((s.sense[12], s.sense[13]), (0x4b, 0x00), "DATA PHASE ERROR");
        }
        other => panic!("{other:?}"),
    };
    let command =
        |p: &mut Pair, cdb: [u8; 10], read: bool, write: bool, edtl: u32, imm: Vec<u8>| {
            let itt = p.next_itt();
            let req = Request {
                header: RequestHeader::ScsiCommand(ScsiCommand {
                    immediate: false,
                    final_bit: true,
                    read,
                    write,
                    attr: TaskAttribute::SIMPLE,
                    lun: 0,
                    itt,
                    expected_data_len: edtl,
                    cmd_sn: p.cmd_sn,
                    exp_stat_sn: p.exp_stat_sn,
                    cdb: cdb.to_vec().into(),
                    bidi_read_len: None,
                }),
                data: imm,
            };
            p.cmd_sn += 1;
            // No R or W bit in the iSER header.
            p.send_with(&req, ControlHeader::default());
            itt
        };
    let mut read = [0u8; 10];
    read[0] = 0x28;
    read[8] = 1;
    let itt = command(&mut p, read, true, false, 512, vec![]);
    refused(&mut p, itt);
    // A write whose data does not all come as immediate data.
    let itt = command(&mut p, write10_cdb(0, 8), false, true, 4096, vec![7u8; 512]);
    refused(&mut p, itt);
    // All of it immediate: nothing for RDMA to move, so no buffer needed.
    let itt = command(&mut p, write10_cdb(0, 1), false, true, 512, vec![7u8; 512]);
    assert_eq!(p.collect_result(itt).0, 0);
    assert!(!p.conn.is_closing());
    assert_eq!(p.read10(0, 1).1, vec![7u8; 512]);
    // The CmdSN window kept moving through the refusals.
    assert_eq!(p.conn.in_flight(), 0);
}

#[test]
fn iser_solicited_data_out_pdus_and_stale_reads_are_refused() {
    let mut p = iser_pair(
        Limits {
            immediate_data: false,
            ..limits()
        },
        iser_params(),
    );
    p.login(&[("ImmediateData", "No")]);
    p.hold_reads = true;
    p.stage_write(vec![1u8; 4096], 0);
    let itt = p.scsi_cmd(&write10_cdb(0, 8), false, true, 4096, vec![], true);
    let ttt = p.held_reads[0].ttt;
    // Data-Out naming the virtual R2T's TTT: solicited data goes by RDMA only.
    p.data_out(itt, ttt, 0, 0, &[0u8; 512], false);
    assert!(p.replies().is_empty(), "held until the Read finishes");
    // An answer for a Read that was never posted is ignored.
    p.conn.data_arrived(itt, ttt.wrapping_add(99), &[0u8; 4096]);
    p.release_reads();
    match &p.replies()[..] {
        [Reply::ScsiResponse(s)] => {
            assert_eq!((s.itt, s.status), (itt, 2));
            assert_eq!((s.sense[12], s.sense[13]), (0x4b, 0x01));
        }
        other => panic!("{other:?}"),
    }
    assert!(!p.conn.is_closing());
}

#[test]
fn iser_logout_waits_for_outstanding_reads() {
    let mut p = iser_pair(
        Limits {
            immediate_data: false,
            ..limits()
        },
        iser_params(),
    );
    p.login(&[("ImmediateData", "No")]);
    p.hold_reads = true;
    let _ = p.scsi_cmd(&write10_cdb(0, 8), false, true, 4096, vec![], true);
    assert_eq!(p.held_reads.len(), 1);
    let req = Request {
        header: RequestHeader::Logout(LogoutRequest {
            immediate: true,
            reason: LogoutReason::CLOSE_SESSION,
            itt: 0x66,
            cid: 1,
            cmd_sn: p.cmd_sn,
            exp_stat_sn: p.exp_stat_sn,
        }),
        data: vec![],
    };
    p.send(&req);
    assert!(p.replies().is_empty());
    assert!(!p.conn.is_closing());
    p.release_reads();
    match &p.replies()[..] {
        [Reply::LogoutResponse(l)] => {
            assert_eq!((l.itt, l.response), (0x66, LogoutResponseCode::CLOSED))
        }
        other => panic!("{other:?}"),
    }
    assert!(p.conn.is_closing());
}

#[test]
fn iser_hello_is_answered_and_bounds_reads() {
    let mut p = iser_pair(
        limits(),
        IserParams {
            read_depth: 8,
            ..iser_params()
        },
    );
    let hello = Hello {
        max_ver: 1,
        min_ver: 1,
        ird: 2,
    };
    p.feed(&hello.encode());
    assert_eq!(p.hello_replies.len(), 1);
    let r = p.hello_replies[0];
    assert!(!r.reject);
    assert_eq!((r.cur_ver, r.ord), (1, 2));
    assert_eq!(p.conn.iser_params().unwrap().read_depth, 2);
    // The session then works as usual.
    p.login(&[]);
    assert_eq!(p.read10(0, 1).0, 0);

    // No common version: refused, and the connection closes.
    let mut p = iser_pair(limits(), iser_params());
    p.feed(
        &Hello {
            max_ver: 3,
            min_ver: 2,
            ird: 4,
        }
        .encode(),
    );
    assert!(p.hello_replies[0].reject);
    assert!(p.conn.is_closing());
}

#[test]
fn iser_messages_frame_exactly_one_pdu() {
    let mut p = iser_pair(limits(), iser_params());
    // During login a badly framed message closes the connection.
    let req = p.login_request(
        Stage::SECURITY,
        Stage::OPERATIONAL,
        true,
        &[("InitiatorName", INITIATOR)],
    );
    let mut msg = ControlHeader::default().encode().to_vec();
    msg.extend_from_slice(&req.encode(false, false));
    msg.extend_from_slice(&[0u8; 8]);
    p.feed(&msg);
    assert!(p.conn.is_closing());

    let mut p = iser_pair(limits(), iser_params());
    p.login(&[]);
    let nop = |p: &Pair, itt: u32, data: &[u8]| {
        let mut bhs = [0u8; 48];
        bhs[0] = 0x40;
        bhs[1] = 0x80;
        bhs[5..8].copy_from_slice(&(data.len() as u32).to_be_bytes()[1..]);
        bhs[16..20].copy_from_slice(&itt.to_be_bytes());
        bhs[20..24].copy_from_slice(&RESERVED_TAG.to_be_bytes());
        bhs[24..28].copy_from_slice(&p.cmd_sn.to_be_bytes());
        bhs
    };
    // Data with and without its padding are both one PDU.
    let bhs = nop(&p, 0x51, b"abc");
    p.feed(&frame(Mode::Iser, &bhs, b"abc"));
    p.feed(&frame(Mode::Iser, &nop(&p, 0x52, b"abc"), b"abc\0"));
    let echoed: Vec<(u32, Vec<u8>)> = p
        .replies()
        .into_iter()
        .map(|r| match r {
            Reply::NopIn(n) => (n.itt, n.data),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        echoed,
        vec![(0x51, b"abc".to_vec()), (0x52, b"abc".to_vec())]
    );
    // A length that disagrees with the header: rejected, session goes on.
    let bhs = nop(&p, 0x53, b"abcd");
    p.feed(&frame(Mode::Iser, &bhs, b"abcdefgh"));
    match &p.replies()[..] {
        [Reply::Reject(r)] => assert_eq!(r.reason, RejectReason::PROTOCOL_ERROR),
        other => panic!("{other:?}"),
    }
    // TargetRecvDataSegmentLength (8 KiB here), not MaxRecvDataSegmentLength
    // (256 KiB), bounds a data segment on iSER.
    let big = vec![0u8; 16 * 1024];
    let bhs = nop(&p, 0x54, &big);
    p.feed(&frame(Mode::Iser, &bhs, &big));
    match &p.replies()[..] {
        [Reply::Reject(r)] => assert_eq!(r.reason, RejectReason::PROTOCOL_ERROR),
        other => panic!("{other:?}"),
    }
    assert!(!p.conn.is_closing());
    assert_eq!(p.read10(0, 1).0, 0);
    // A message too short for a BHS, or with an unknown iSER opcode, cannot
    // be answered: the connection closes.
    p.feed(&ControlHeader::default().encode()[..ISER_HEADER_LEN]);
    assert!(p.conn.is_closing());
    let mut p = iser_pair(limits(), iser_params());
    p.feed(&[0x70; 80]);
    assert!(p.conn.is_closing());
    // Stream bytes on an iSER connection are a driver error.
    let mut p = iser_pair(limits(), iser_params());
    p.conn.handle_input(&[0u8; 48], p.now);
    assert!(p.conn.is_closing());
}

#[test]
fn iser_text_responses_are_split_at_initiator_recv_data_segment_length() {
    let mut cfg = portal_config(limits(), ChapPolicy::default());
    for i in 0..20 {
        let mut t = cfg.targets[0].clone();
        t.name = format!("iqn.2026-11.org.rustgt:a-rather-long-target-name-number-{i:03}");
        cfg.targets.push(t);
    }
    let mut p = Pair::iser(cfg, iser_params());
    let (lr, _) = p.login_step(
        Stage::SECURITY,
        Stage::OPERATIONAL,
        true,
        &[
            ("InitiatorName", INITIATOR),
            ("SessionType", "Discovery"),
            ("AuthMethod", "None"),
        ],
    );
    assert_eq!(lr.status, LoginStatus::SUCCESS);
    let (lr, kv2) = p.login_step(
        Stage::OPERATIONAL,
        Stage::FULL_FEATURE,
        true,
        &[
            ("RDMAExtensions", "Yes"),
            ("InitiatorRecvDataSegmentLength", "512"),
            ("MaxRecvDataSegmentLength", "65536"),
        ],
    );
    assert_eq!(lr.status, LoginStatus::SUCCESS, "{kv2:?}");
    let mut text = Vec::new();
    let mut ttt = RESERVED_TAG;
    for round in 0..20 {
        let req = Request {
            header: RequestHeader::Text(TextRequest {
                immediate: true,
                final_bit: true,
                cont: false,
                lun: 0,
                itt: 0x77,
                ttt,
                cmd_sn: p.cmd_sn,
                exp_stat_sn: p.exp_stat_sn,
            }),
            data: if round == 0 {
                encode_text(&[("SendTargets".into(), "All".into())])
            } else {
                vec![]
            },
        };
        p.send(&req);
        let t = match &p.replies()[..] {
            [Reply::TextResponse(t)] => t.clone(),
            other => panic!("{other:?}"),
        };
        assert!(t.data.len() <= 512, "chunk of {} bytes", t.data.len());
        text.extend_from_slice(&t.data);
        if t.final_bit {
            break;
        }
        ttt = t.ttt;
    }
    let kv = parse_text(&text).unwrap();
    assert_eq!(kv.iter().filter(|(k, _)| k == "TargetName").count(), 21);
}

// ---------------------------------------------------------------------------
// iSER: Data-Out RDMA Reads straight into the write's buffer.
// ---------------------------------------------------------------------------

/// A login with no immediate data and `r2t` Reads per task.
fn iser_reads_pair(r2t: &str) -> Pair {
    let mut p = iser_pair(
        Limits {
            immediate_data: false,
            max_outstanding_r2t: 16,
            ..limits()
        },
        iser_params(),
    );
    p.login(&[("ImmediateData", "No"), ("MaxOutstandingR2T", r2t)]);
    p
}

/// Answer held Reads (and those they lead to) until none is left.
fn release_all(p: &mut Pair) {
    while p.release_one() {}
}

fn only_status(p: &mut Pair, itt: u32) -> (u8, Vec<u8>) {
    match &p.replies()[..] {
        [Reply::ScsiResponse(s)] => {
            assert_eq!(s.itt, itt);
            (s.status, s.sense.clone())
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn iser_data_out_reads_land_in_the_write_buffer_or_are_copied() {
    for zero_copy in [true, false] {
        let mut p = iser_pair(limits(), iser_params());
        p.zero_copy_reads = zero_copy;
        p.login(&[]);
        let data = pattern(64 * 1024, 41);
        assert_eq!(p.write10(10, &data, 512, 512), 0);
        assert_eq!(p.read10(10, 128).1, data, "zero_copy={zero_copy}");
        if zero_copy {
            assert_eq!((p.reads_placed, p.reads_copied), (16, 0));
        } else {
            assert_eq!((p.reads_placed, p.reads_copied), (0, 16), "the fallback");
        }
    }
}

#[test]
fn iser_several_reads_of_one_task_get_disjoint_ranges_of_one_buffer() {
    let mut p = iser_reads_pair("4");
    p.hold_reads = true;
    let data = pattern(32 * 1024, 42);
    p.stage_write(data.clone(), 0);
    let itt = p.scsi_cmd(&write10_cdb(0, 64), false, true, 32 * 1024, vec![], true);
    assert_eq!(p.held_reads.len(), 4, "read_depth and MaxOutstandingR2T");
    let dests: Vec<_> = p
        .held_reads
        .iter()
        .map(|r| r.dest.clone().expect("room reserved before the first Read"))
        .collect();
    let st = dests[0].storage().expect("pooled");
    for (i, d) in dests.iter().enumerate() {
        assert_eq!(d.storage(), Some(st), "one storage");
        assert_eq!(d.addr(), dests[0].addr() + i * 4096, "disjoint, in order");
        assert!(st.contains(d.addr(), d.len()));
    }
    drop(dests);
    // The driver could not register one of them: it copies that one.
    p.held_reads[1].dest = None;
    release_all(&mut p);
    assert_eq!(only_status(&mut p, itt).0, 0);
    assert!(
        p.reads_copied >= 1 && p.reads_placed >= 3,
        "{} {}",
        p.reads_placed,
        p.reads_copied
    );
    p.hold_reads = false;
    assert_eq!(p.read10(0, 64).1, data);
}

#[test]
fn iser_abort_with_reads_in_flight_keeps_their_buffer_until_the_last() {
    let mut p = iser_reads_pair("4");
    p.hold_reads = true;
    p.stage_write(pattern(32 * 1024, 43), 0);
    let itt = p.scsi_cmd(&write10_cdb(0, 64), false, true, 32 * 1024, vec![], true);
    assert_eq!(p.held_reads.len(), 4);
    let st = p.held_reads[0]
        .dest
        .as_ref()
        .and_then(|d| d.storage())
        .expect("a destination");
    let req = Request {
        header: RequestHeader::TaskMgmt(TaskMgmtRequest {
            immediate: true,
            function: TmfCode::ABORT_TASK,
            lun: 0,
            itt: 0x500,
            referenced_tag: itt,
            cmd_sn: p.cmd_sn,
            exp_stat_sn: p.exp_stat_sn,
            ref_cmd_sn: p.cmd_sn - 1,
            exp_data_sn: 0,
        }),
        data: vec![],
    };
    p.send(&req);
    assert!(p.replies().is_empty(), "the answer waits for the Reads");
    // The task is gone; its storage is not: the pool does not hand it out
    // while the Reads hold it.
    let same_class: Vec<rustgt_scsi::IoBuf> = (0..8)
        .map(|_| rustgt_scsi::IoBuf::for_overwrite(st.len() - 4096))
        .collect();
    assert!(same_class.iter().all(|b| b.storage() != Some(st)));
    // The Reads land (the device writes into memory still theirs), one at
    // a time; the abort is answered after the last.
    let mut answered = 0;
    while p.release_one() {
        answered += 1;
        let replies = p.replies();
        if p.held_reads.is_empty() {
            match &replies[..] {
                [Reply::TaskMgmtResponse(t)] => {
                    assert_eq!((t.itt, t.response), (0x500, TmfResult::COMPLETE))
                }
                other => panic!("{other:?}"),
            }
        } else {
            assert!(replies.is_empty(), "answered before the last Read");
        }
    }
    assert_eq!(answered, 4, "no new Read for an aborted task");
    assert_eq!(p.reads_placed, 4);
    drop(same_class);
    p.hold_reads = false;
    assert_eq!(
        p.read10(0, 64).1,
        vec![0u8; 32 * 1024],
        "nothing of it written"
    );
    assert!(!p.conn.is_closing());
}

#[test]
fn iser_connection_loss_with_reads_in_flight_leaves_the_buffer_to_them() {
    let mut p = iser_reads_pair("2");
    p.hold_reads = true;
    p.stage_write(pattern(32 * 1024, 44), 0);
    let _ = p.scsi_cmd(&write10_cdb(0, 64), false, true, 32 * 1024, vec![], true);
    assert_eq!(p.held_reads.len(), 2);
    let st = p.held_reads[0]
        .dest
        .as_ref()
        .and_then(|d| d.storage())
        .expect("a destination");
    p.conn.fail();
    assert!(p.conn.is_closing());
    let same_class: Vec<rustgt_scsi::IoBuf> = (0..8)
        .map(|_| rustgt_scsi::IoBuf::for_overwrite(st.len() - 4096))
        .collect();
    assert!(same_class.iter().all(|b| b.storage() != Some(st)));
    // Flushed or late, they come back to a closed connection: ignored.
    release_all(&mut p);
    assert!(p.held_reads.is_empty());
}

#[test]
fn iser_a_short_or_misplaced_read_fails_the_write_not_the_connection() {
    let mut p = iser_reads_pair("1");
    p.hold_reads = true;
    p.stage_write(pattern(8192, 45), 0);
    let itt = p.scsi_cmd(&write10_cdb(0, 16), false, true, 8192, vec![], true);
    assert_eq!(p.held_reads.len(), 1);
    let r = p.held_reads.remove(0);
    p.answer_read(r, Some(4095));
    p.pump();
    let (status, sense) = only_status(&mut p, itt);
    assert_eq!(status, 2);
    assert_eq!((sense[12], sense[13]), (0x4b, 0x05));
    assert!(
        p.held_reads.is_empty(),
        "no more Reads for the failed write"
    );
    // A Read answered as placed that had no destination fails it too.
    p.stage_write(pattern(8192, 46), 0);
    let itt = p.scsi_cmd(&write10_cdb(0, 16), false, true, 8192, vec![], true);
    let mut r = p.held_reads.remove(0);
    r.dest = None;
    p.conn.read_done(r, 4096);
    p.pump();
    assert_eq!(only_status(&mut p, itt).0, 2);
    // The connection goes on.
    assert!(!p.conn.is_closing());
    p.hold_reads = false;
    let data = pattern(8192, 47);
    p.stage_write(data.clone(), 0);
    let itt = p.scsi_cmd(&write10_cdb(0, 16), false, true, 8192, vec![], true);
    assert_eq!(only_status(&mut p, itt).0, 0);
    assert_eq!(p.read10(0, 16).1, data);
}

#[test]
fn iser_a_destination_kept_past_its_read_fails_the_write_and_writes_nothing() {
    // A driver must give a Read's destination back with read_done. One that
    // keeps a copy leaves the write buffer shared when all its data is in:
    // the command ends with HARDWARE ERROR / INTERNAL TARGET FAILURE, no
    // data reaches the LUN, and the connection goes on.
    let mut p = iser_reads_pair("1");
    let before = pattern(8192, 48);
    p.stage_write(before.clone(), 0);
    let itt = p.scsi_cmd(&write10_cdb(0, 16), false, true, 8192, vec![], true);
    assert_eq!(only_status(&mut p, itt).0, 0);
    p.hold_reads = true;
    p.stage_write(pattern(8192, 49), 0);
    let itt = p.scsi_cmd(&write10_cdb(0, 16), false, true, 8192, vec![], true);
    assert_eq!(p.held_reads.len(), 1);
    let r = p.held_reads.remove(0);
    let kept = r.dest.clone();
    assert!(kept.is_some(), "the Read came with a destination");
    p.answer_read(r, None);
    p.pump();
    // The rest of the write's Reads, answered as a driver should.
    for _ in 0..16 {
        if p.held_reads.is_empty() {
            break;
        }
        let r = p.held_reads.remove(0);
        p.answer_read(r, None);
        p.pump();
    }
    assert!(p.held_reads.is_empty());
    let (status, sense) = only_status(&mut p, itt);
    assert_eq!(status, 2);
    assert_eq!((sense[2] & 0x0f, sense[12], sense[13]), (0x04, 0x44, 0x00));
    drop(kept);
    assert!(!p.conn.is_closing());
    p.hold_reads = false;
    assert_eq!(
        p.read10(0, 16).1,
        before,
        "nothing of the failed write landed"
    );
}

/// Two connections sharing one small data buffer budget, without
/// immediate data (every byte is solicited).
fn budget_pairs(total: u64, data_out_timeout: Duration) -> (Pair, Pair, Arc<DataBudget>) {
    let budget = Arc::new(DataBudget::new(total));
    let cfg = || PortalConfig {
        data_budget: Arc::clone(&budget),
        data_out_timeout,
        ..portal_config(
            Limits {
                immediate_data: false,
                ..limits()
            },
            ChapPolicy::default(),
        )
    };
    let table = Arc::new(Mutex::new(SessionTable::new()));
    let mut a = Pair::with_table(cfg(), Arc::clone(&table), 1);
    a.login(&[("ImmediateData", "No")]);
    let mut b = Pair::with_table(cfg(), table, 2);
    b.login(&[("ImmediateData", "No")]);
    (a, b, budget)
}

fn r2ts(p: &mut Pair) -> Vec<R2t> {
    p.replies()
        .into_iter()
        .map(|r| match r {
            Reply::R2t(r) => r,
            other => panic!("R2T expected: {other:?}"),
        })
        .collect()
}

/// A write the budget has no room for waits for its first R2T (it is not
/// failed), gets it once another session's write has finished, and the
/// session over its share meanwhile does not get its CmdSN window opened.
#[test]
fn a_write_waits_for_budget_and_the_holder_keeps_its_window() {
    let (mut a, mut b, budget) = budget_pairs(64 * 1024, Duration::from_secs(30));
    let held = a.scsi_cmd(&write10_cdb(0, 64), false, true, 32 * 1024, vec![], true);
    let a_r2t = r2ts(&mut a);
    assert_eq!(a_r2t.len(), 1);
    assert_eq!(budget.used(), 32 * 1024, "admitted whole");
    // 32K held + 48K > 64K: B's write waits, with no R2T and no failure.
    let waiting = b.scsi_cmd(&write10_cdb(100, 96), false, true, 48 * 1024, vec![], true);
    assert!(b.replies().is_empty());
    assert_eq!(budget.snapshot().waiting, 1);
    assert!(b
        .conn
        .poll_timeout()
        .is_some_and(|t| t <= b.now + Duration::from_millis(1)));
    b.now += Duration::from_millis(1);
    b.conn.handle_timeout(b.now);
    b.pump();
    assert!(b.replies().is_empty(), "still no room");

    // A is over its share (32K > (64K / 2) / 2) while B waits: a NOP-Out
    // is answered without opening A's window.
    let before = a_r2t[0].max_cmd_sn;
    let nop = Request {
        header: RequestHeader::NopOut(NopOut {
            immediate: false,
            lun: 0,
            itt: 0x77,
            ttt: RESERVED_TAG,
            cmd_sn: a.cmd_sn,
            exp_stat_sn: a.exp_stat_sn,
        }),
        data: vec![],
    };
    a.cmd_sn += 1;
    a.send(&nop);
    match &a.replies()[..] {
        [Reply::NopIn(n)] => assert_eq!(n.max_cmd_sn, before, "window held"),
        other => panic!("{other:?}"),
    }

    // A sends its data: its write completes and the owed slot opens too.
    a.data_out(held, a_r2t[0].ttt, 0, 0, &[5u8; 32 * 1024], true);
    match &a.replies()[..] {
        [Reply::ScsiResponse(r)] => {
            assert_eq!((r.itt, r.status), (held, 0));
            assert_eq!(r.max_cmd_sn, before.wrapping_add(2), "both slots open");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(budget.used(), 0);
    // B's next try finds room.
    b.now += Duration::from_millis(2);
    b.conn.handle_timeout(b.now);
    b.pump();
    let b_r2t = r2ts(&mut b);
    assert_eq!((b_r2t.len(), b_r2t[0].itt), (1, waiting));
    assert_eq!(budget.snapshot().waiting, 0);
    assert_eq!(budget.snapshot().waits, 1);
    b.data_out(waiting, b_r2t[0].ttt, 0, 0, &[6u8; 48 * 1024], true);
    match &b.replies()[..] {
        [Reply::ScsiResponse(r)] => assert_eq!((r.itt, r.status), (waiting, 0)),
        other => panic!("{other:?}"),
    }
    assert_eq!(budget.used(), 0);
    let (status, data, _) = b.read10(100, 96);
    assert_eq!(status, 0);
    assert!(data.iter().all(|&x| x == 6));
}

/// A write larger than the whole budget still runs, alone; and a session
/// that sits on solicited data is closed after the Data-Out timeout, which
/// gives its room back.
#[test]
fn a_session_sitting_on_r2ts_is_closed_after_the_data_out_timeout() {
    let (mut a, mut b, budget) = budget_pairs(16 * 1024, Duration::from_secs(3));
    let itt = a.scsi_cmd(&write10_cdb(0, 64), false, true, 32 * 1024, vec![], true);
    let r2t = r2ts(&mut a);
    assert_eq!(r2t.len(), 1, "larger than the budget, admitted alone");
    assert_eq!(budget.used(), 32 * 1024);
    let _ = b.scsi_cmd(&write10_cdb(100, 8), false, true, 4096, vec![], true);
    assert!(b.replies().is_empty(), "B waits");
    // Half of the burst, then nothing: the timer runs from the last data.
    a.data_out(itt, r2t[0].ttt, 0, 0, &[1u8; 8192], false);
    a.now += Duration::from_secs(2);
    a.conn.handle_timeout(a.now);
    assert!(!a.conn.is_closing());
    a.data_out(itt, r2t[0].ttt, 1, 8192, &[1u8; 8192], false);
    let due = a.conn.poll_timeout().expect("a Data-Out deadline");
    assert!(due <= a.now + Duration::from_secs(3), "{due:?}");
    a.now += Duration::from_secs(3);
    a.conn.handle_timeout(a.now);
    assert!(a.conn.is_closing(), "closed after 3 s without Data-Out");
    assert_eq!(budget.used(), 0, "its room is given back");
    assert_eq!(budget.snapshot().timeouts, 1);
    b.now += Duration::from_millis(20);
    b.conn.handle_timeout(b.now);
    b.pump();
    assert_eq!(r2ts(&mut b).len(), 1, "B goes on");
}
