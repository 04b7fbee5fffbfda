//! The protocol core against an in-memory initiator, over the real SCSI
//! core with a RAM backstore, with simulated time.

#![allow(clippy::unwrap_used)] // tests may panic on a broken invariant

mod common;

use std::time::Duration;

use common::*;
use rustgt_iscsi::chap::{ChapAlgorithm, ChapCredentials, ChapPolicy};
use rustgt_iscsi::negotiate::{Digest, Limits};
use rustgt_iscsi::pdu::*;
use rustgt_iscsi::text::{decode_binary, encode_hex, encode_text, parse_text};

fn limits() -> Limits {
    Limits {
        header_digest: vec![Digest::CRC32C, Digest::None],
        data_digest: vec![Digest::CRC32C, Digest::None],
        ..Limits::default()
    }
}

fn default_pair() -> Pair {
    Pair::new(portal_config(limits(), ChapPolicy::default()))
}

fn kv<'a>(kv: &'a [(String, String)], k: &str) -> Option<&'a str> {
    kv.iter().find(|(kk, _)| kk == k).map(|(_, v)| v.as_str())
}

/// Write `data` at `lba` with WRITE(10), answering R2Ts as they come, and
/// return the SCSI status.
fn write_with_r2ts(p: &mut Pair, lba: u32, data: &[u8], immediate: usize, max_pdu: usize) -> u8 {
    let blocks = (data.len() / 512) as u16;
    let imm = data[..immediate].to_vec();
    let itt = p.scsi_cmd(
        &write10_cdb(lba, blocks),
        false,
        true,
        data.len() as u32,
        imm,
        true,
    );
    let mut status = None;
    for _round in 0..10_000 {
        let replies = p.replies();
        if replies.is_empty() {
            break;
        }
        for r in replies {
            match r {
                Reply::R2t(r2t) => {
                    assert_eq!(r2t.itt, itt);
                    let mut off = r2t.buffer_offset as usize;
                    let end = off + r2t.desired_len as usize;
                    let mut sn = 0;
                    while off < end {
                        let n = max_pdu.min(end - off);
                        p.data_out(
                            itt,
                            r2t.ttt,
                            sn,
                            off as u32,
                            &data[off..off + n],
                            off + n == end,
                        );
                        sn += 1;
                        off += n;
                    }
                }
                Reply::ScsiResponse(s) => {
                    assert_eq!(s.itt, itt);
                    status = Some(s.status);
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        if status.is_some() {
            break;
        }
    }
    status.expect("write status")
}

#[test]
fn login_negotiates_and_reports_tpgt() {
    let mut p = default_pair();
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
    let (lr, kv2) = p.login_step(
        Stage::OPERATIONAL,
        Stage::FULL_FEATURE,
        true,
        &[
            ("HeaderDigest", "CRC32C,None"),
            ("MaxBurstLength", "16384"),
            ("FirstBurstLength", "8192"),
            ("X-Foo", "bar"),
        ],
    );
    assert_eq!(lr.status, LoginStatus::SUCCESS);
    assert_ne!(lr.tsih, 0);
    assert_eq!(kv(&kv2, "HeaderDigest"), Some("CRC32C"));
    assert_eq!(kv(&kv2, "MaxBurstLength"), Some("16384"));
    assert_eq!(kv(&kv2, "X-Foo"), Some("NotUnderstood"));
    assert!(kv(&kv2, "MaxRecvDataSegmentLength").is_some());
}

#[test]
fn unknown_target_and_missing_initiator_name_are_refused() {
    let mut p = default_pair();
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

    let mut p = default_pair();
    let (lr, _) = p.login_step(
        Stage::SECURITY,
        Stage::OPERATIONAL,
        true,
        &[("TargetName", TARGET)],
    );
    assert_eq!(lr.status, LoginStatus::MISSING_PARAMETER);
}

#[test]
fn acl_refuses_other_initiators() {
    let mut cfg = portal_config(limits(), ChapPolicy::default());
    cfg.targets[0].acl = vec!["iqn.2026-11.org.rustgt:someone-else".into()];
    let mut p = Pair::new(cfg);
    let (lr, _) = p.login_step(
        Stage::SECURITY,
        Stage::OPERATIONAL,
        true,
        &[("InitiatorName", INITIATOR), ("TargetName", TARGET)],
    );
    assert_eq!(lr.status, LoginStatus::AUTHORIZATION_FAILURE);
}

fn chap_login(secret: &[u8], mutual: bool) -> LoginStatus {
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
    let mut p = Pair::new(portal_config(limits(), policy));
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

#[test]
fn chap_and_mutual_chap() {
    assert_eq!(chap_login(b"alice-secret-123", false), LoginStatus::SUCCESS);
    assert_eq!(chap_login(b"alice-secret-123", true), LoginStatus::SUCCESS);
    assert_eq!(
        chap_login(b"wrong-secret-xyz", false),
        LoginStatus::AUTHENTICATION_FAILURE
    );
}

#[test]
fn chap_required_refuses_skipping_security() {
    let policy = ChapPolicy {
        initiator: Some(ChapCredentials {
            user: "alice".into(),
            secret: b"alice-secret-123".to_vec(),
        }),
        target: None,
    };
    let mut p = Pair::new(portal_config(limits(), policy));
    let (lr, _) = p.login_step(
        Stage::OPERATIONAL,
        Stage::FULL_FEATURE,
        true,
        &[("InitiatorName", INITIATOR), ("TargetName", TARGET)],
    );
    assert_eq!(lr.status, LoginStatus::AUTHENTICATION_FAILURE);
}

#[test]
fn read_write_round_trip_with_small_pdus_and_digests() {
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
    let mut p = Pair::new(cfg);
    let k = p.login(&[
        ("HeaderDigest", "CRC32C"),
        ("DataDigest", "CRC32C"),
        ("MaxRecvDataSegmentLength", "512"),
        ("MaxBurstLength", "4096"),
        ("FirstBurstLength", "1024"),
        ("MaxOutstandingR2T", "2"),
    ]);
    assert_eq!(kv(&k, "MaxRecvDataSegmentLength"), Some("512"));
    assert!(p.hd && p.dd);
    let data = pattern(64 * 1024, 3);
    // 512 bytes of immediate data, the rest through R2Ts of <= 4 KiB in 512-byte PDUs.
    assert_eq!(write_with_r2ts(&mut p, 10, &data, 512, 512), 0);
    let (status, back, sense) = p.read10(10, 128);
    assert_eq!(status, 0, "sense {sense:?}");
    assert_eq!(back, data);
}

#[test]
fn unsolicited_data_out_with_initial_r2t_no() {
    let mut p = Pair::new(portal_config(
        Limits {
            initial_r2t: false,
            first_burst_length: 8192,
            ..limits()
        },
        ChapPolicy::default(),
    ));
    let k = p.login(&[
        ("InitialR2T", "No"),
        ("ImmediateData", "Yes"),
        ("FirstBurstLength", "8192"),
    ]);
    assert_eq!(kv(&k, "InitialR2T"), Some("No"));
    let data = pattern(16384, 9);
    // 1 KiB immediate + 7 KiB unsolicited Data-Out, then R2Ts for the rest.
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
    let replies = p.replies();
    let r2t = match &replies[..] {
        [Reply::R2t(r)] => r.clone(),
        other => panic!("expected one R2T, got {other:?}"),
    };
    assert_eq!(r2t.buffer_offset, 8192);
    assert_eq!(r2t.desired_len, 8192);
    p.data_out(itt, r2t.ttt, 0, 8192, &data[8192..], true);
    let (status, _, _) = p.collect_result(itt);
    assert_eq!(status, 0);
    let (_, back, _) = p.read10(100, 32);
    assert_eq!(back, data);
}

#[test]
fn out_of_window_cmdsn_is_ignored_and_window_moves() {
    let mut p = default_pair();
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

#[test]
fn malformed_pdus_get_rejects_and_the_session_survives() {
    let mut p = default_pair();
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

#[test]
fn data_out_sequence_errors_fail_the_task_not_the_connection() {
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

#[test]
fn nop_in_ping_and_timeout_with_simulated_time() {
    let mut p = default_pair();
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

#[test]
fn discovery_send_targets() {
    let mut p = default_pair();
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

#[test]
fn logout_closes_after_response() {
    let mut p = default_pair();
    p.login(&[]);
    let req = Request {
        header: RequestHeader::Logout(LogoutRequest {
            immediate: true,
            reason: 0,
            itt: 0x66,
            cid: 1,
            cmd_sn: p.cmd_sn,
            exp_stat_sn: p.exp_stat_sn,
        }),
        data: vec![],
    };
    p.send(&req);
    match &p.replies()[..] {
        [Reply::LogoutResponse(l)] => assert_eq!((l.itt, l.response), (0x66, 0)),
        other => panic!("{other:?}"),
    }
    assert!(p.conn.is_closing());
}

#[test]
fn abort_task_of_a_write_still_collecting_data() {
    let mut p = Pair::new(portal_config(
        Limits {
            immediate_data: false,
            ..limits()
        },
        ChapPolicy::default(),
    ));
    p.login(&[("ImmediateData", "No")]);
    let itt = p.scsi_cmd(&write10_cdb(0, 8), false, true, 4096, vec![], true);
    assert!(matches!(&p.replies()[..], [Reply::R2t(_)]));
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
    match &p.replies()[..] {
        [Reply::TaskMgmtResponse(t)] => {
            assert_eq!((t.itt, t.response), (0x500, TmfResult::COMPLETE))
        }
        other => panic!("{other:?}"),
    }
    // Late data for the aborted task is ignored, not an error.
    p.data_out(itt, 1, 0, 0, &[0u8; 512], false);
    assert!(!p.conn.is_closing());
    assert!(p.replies().is_empty());
}

#[test]
fn reinstatement_reports_the_old_connection() {
    let table = std::sync::Arc::new(std::sync::Mutex::new(rustgt_iscsi::SessionTable::new()));
    let cfg = portal_config(limits(), ChapPolicy::default());
    let mut a = Pair::with_table(cfg.clone(), table.clone(), 1);
    a.login(&[]);
    let mut b = Pair::with_table(cfg, table, 2);
    b.isid = a.isid;
    b.conn.handle_input(&[], b.now);
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
    b.conn.handle_input(&req.encode(false, false), b.now);
    let mut saw = false;
    while let Some(ev) = b.conn.poll_event() {
        if let rustgt_iscsi::Event::Reinstate { conn_id } = ev {
            assert_eq!(conn_id, 1);
            saw = true;
        }
    }
    assert!(saw, "reinstatement of connection 1 expected");
}
