//! Property tests for the PDU codec: the decoders never panic on arbitrary
//! bytes, every well-formed PDU round-trips (with and without digests), a
//! flipped bit under digests is always caught, and LUNs round-trip.

use proptest::prelude::*;
use rustgt_iscsi::pdu::*;

fn data(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..max)
}

fn stage() -> impl Strategy<Value = Stage> {
    (0u8..4).prop_map(Stage)
}

// ---------------------------------------------------------------------------
// Arbitrary well-formed initiator PDUs: every field within its wire width.
// ---------------------------------------------------------------------------

fn nop_out() -> impl Strategy<Value = RequestHeader> {
    any::<(bool, u64, u32, u32, u32, u32)>().prop_map(|(immediate, lun, itt, ttt, cmd_sn, esn)| {
        RequestHeader::NopOut(NopOut {
            immediate,
            lun,
            itt,
            ttt,
            cmd_sn,
            exp_stat_sn: esn,
        })
    })
}

fn scsi_command() -> impl Strategy<Value = RequestHeader> {
    (
        any::<(bool, bool, bool, bool, u64, u32)>(),
        (0u8..8, any::<(u32, u32, u32)>()),
        // The BHS always holds 16 CDB bytes; longer CDBs use the AHS.
        prop_oneof![
            prop::collection::vec(any::<u8>(), 16..=16),
            prop::collection::vec(any::<u8>(), 17..=300),
            prop::collection::vec(any::<u8>(), MAX_CDB_LEN..=MAX_CDB_LEN),
        ],
        any::<Option<u32>>(),
    )
        .prop_map(
            |(
                (immediate, final_bit, read, write, lun, itt),
                (attr, (edtl, cmd_sn, esn)),
                cdb,
                bidi,
            )| {
                RequestHeader::ScsiCommand(ScsiCommand {
                    immediate,
                    final_bit,
                    read,
                    write,
                    attr: TaskAttribute(attr),
                    lun,
                    itt,
                    expected_data_len: edtl,
                    cmd_sn,
                    exp_stat_sn: esn,
                    cdb: cdb.into(),
                    bidi_read_len: bidi,
                })
            },
        )
}

fn task_mgmt() -> impl Strategy<Value = RequestHeader> {
    (
        0u8..0x80,
        any::<(bool, u64, u32, u32, u32, u32, u32, u32)>(),
    )
        .prop_map(
            |(function, (immediate, lun, itt, rtt, cmd_sn, esn, ref_cmd_sn, exp_data_sn))| {
                RequestHeader::TaskMgmt(TaskMgmtRequest {
                    immediate,
                    function: TmfCode(function),
                    lun,
                    itt,
                    referenced_tag: rtt,
                    cmd_sn,
                    exp_stat_sn: esn,
                    ref_cmd_sn,
                    exp_data_sn,
                })
            },
        )
}

fn login() -> impl Strategy<Value = RequestHeader> {
    (
        any::<(bool, bool, u8, u8, [u8; 6], u16)>(),
        stage(),
        stage(),
        any::<(u32, u16, u32, u32)>(),
    )
        .prop_map(
            |((transit, cont, vmax, vmin, isid, tsih), csg, nsg, (itt, cid, cmd_sn, esn))| {
                RequestHeader::Login(LoginRequest {
                    transit,
                    cont,
                    csg,
                    nsg,
                    version_max: vmax,
                    version_min: vmin,
                    isid,
                    tsih,
                    itt,
                    cid,
                    cmd_sn,
                    exp_stat_sn: esn,
                })
            },
        )
}

fn text() -> impl Strategy<Value = RequestHeader> {
    any::<(bool, bool, bool, u64, u32, u32, u32, u32)>().prop_map(
        |(immediate, final_bit, cont, lun, itt, ttt, cmd_sn, esn)| {
            RequestHeader::Text(TextRequest {
                immediate,
                final_bit,
                cont,
                lun,
                itt,
                ttt,
                cmd_sn,
                exp_stat_sn: esn,
            })
        },
    )
}

fn data_out() -> impl Strategy<Value = RequestHeader> {
    any::<(bool, u64, u32, u32, u32, u32, u32)>().prop_map(
        |(final_bit, lun, itt, ttt, esn, data_sn, buffer_offset)| {
            RequestHeader::DataOut(DataOut {
                final_bit,
                lun,
                itt,
                ttt,
                exp_stat_sn: esn,
                data_sn,
                buffer_offset,
            })
        },
    )
}

fn logout() -> impl Strategy<Value = RequestHeader> {
    (0u8..0x80, any::<(bool, u32, u16, u32, u32)>()).prop_map(
        |(reason, (immediate, itt, cid, cmd_sn, esn))| {
            RequestHeader::Logout(LogoutRequest {
                immediate,
                reason: LogoutReason(reason),
                itt,
                cid,
                cmd_sn,
                exp_stat_sn: esn,
            })
        },
    )
}

fn snack() -> impl Strategy<Value = RequestHeader> {
    (0u8..0x10, any::<(u64, u32, u32, u32, u32, u32)>()).prop_map(
        |(snack_type, (lun, itt, ttt, esn, beg_run, run_length))| {
            RequestHeader::Snack(SnackRequest {
                snack_type: SnackType(snack_type),
                lun,
                itt,
                ttt,
                exp_stat_sn: esn,
                beg_run,
                run_length,
            })
        },
    )
}

fn request() -> impl Strategy<Value = Request> {
    let header = prop_oneof![
        nop_out(),
        scsi_command(),
        task_mgmt(),
        login(),
        text(),
        data_out(),
        logout(),
        snack(),
    ];
    (header, data(600)).prop_map(|(header, data)| Request { header, data })
}

// ---------------------------------------------------------------------------
// Arbitrary well-formed target PDUs.
// ---------------------------------------------------------------------------

/// StatSN, ExpCmdSN, MaxCmdSN.
fn sns() -> impl Strategy<Value = (u32, u32, u32)> {
    any::<(u32, u32, u32)>()
}

fn reply() -> impl Strategy<Value = Reply> {
    prop_oneof![
        (any::<(u64, u32, u32)>(), sns(), data(600)).prop_map(
            |((lun, itt, ttt), (s, e, m), data)| {
                Reply::NopIn(NopIn {
                    lun,
                    itt,
                    ttt,
                    stat_sn: s,
                    exp_cmd_sn: e,
                    max_cmd_sn: m,
                    data,
                })
            }
        ),
        (
            any::<(bool, bool, bool, bool, u8, u8)>(),
            any::<(u32, u32, u32, u32, u32)>(),
            sns(),
            data(300),
        )
            .prop_map(
                |((bo, bu, o, u, response, status), (itt, tag, eds, br, r), (s, e, m), sense)| {
                    Reply::ScsiResponse(ScsiResponse {
                        bidi_overflow: bo,
                        bidi_underflow: bu,
                        overflow: o,
                        underflow: u,
                        response,
                        status,
                        itt,
                        snack_tag: tag,
                        stat_sn: s,
                        exp_cmd_sn: e,
                        max_cmd_sn: m,
                        exp_data_sn: eds,
                        bidi_residual: br,
                        residual: r,
                        sense,
                    })
                }
            ),
        (any::<(u8, u32)>(), sns()).prop_map(|((response, itt), (s, e, m))| {
            Reply::TaskMgmtResponse(TaskMgmtResponse {
                response: TmfResult(response),
                itt,
                stat_sn: s,
                exp_cmd_sn: e,
                max_cmd_sn: m,
            })
        }),
        (
            any::<(bool, bool, u8, u8, [u8; 6], u16, u32, u16)>(),
            stage(),
            stage(),
            sns(),
            data(600),
        )
            .prop_map(
                |((t, c, vmax, vact, isid, tsih, itt, status), csg, nsg, (s, e, m), data)| {
                    Reply::LoginResponse(LoginResponse {
                        transit: t,
                        cont: c,
                        csg,
                        nsg,
                        version_max: vmax,
                        version_active: vact,
                        isid,
                        tsih,
                        itt,
                        stat_sn: s,
                        exp_cmd_sn: e,
                        max_cmd_sn: m,
                        status: LoginStatus(status),
                        data,
                    })
                }
            ),
        (any::<(bool, bool, u64, u32, u32)>(), sns(), data(600)).prop_map(
            |((f, c, lun, itt, ttt), (s, e, m), data)| {
                Reply::TextResponse(TextResponse {
                    final_bit: f,
                    cont: c,
                    lun,
                    itt,
                    ttt,
                    stat_sn: s,
                    exp_cmd_sn: e,
                    max_cmd_sn: m,
                    data,
                })
            }
        ),
        data_in(),
        (any::<(u8, u32, u16, u16)>(), sns()).prop_map(|((response, itt, t2w, t2r), (s, e, m))| {
            Reply::LogoutResponse(LogoutResponse {
                response: LogoutResponseCode(response),
                itt,
                stat_sn: s,
                exp_cmd_sn: e,
                max_cmd_sn: m,
                time2wait: t2w,
                time2retain: t2r,
            })
        }),
        (any::<(u64, u32, u32, u32, u32, u32)>(), sns()).prop_map(
            |((lun, itt, ttt, r2t_sn, off, len), (s, e, m))| {
                Reply::R2t(R2t {
                    lun,
                    itt,
                    ttt,
                    stat_sn: s,
                    exp_cmd_sn: e,
                    max_cmd_sn: m,
                    r2t_sn,
                    buffer_offset: off,
                    desired_len: len,
                })
            }
        ),
        (any::<(u64, u8, u8, u16, u16, u16)>(), sns(), data(300)).prop_map(
            |((lun, event, vcode, p1, p2, p3), (s, e, m), data)| {
                Reply::AsyncMessage(AsyncMessage {
                    lun,
                    stat_sn: s,
                    exp_cmd_sn: e,
                    max_cmd_sn: m,
                    event: AsyncEvent(event),
                    vcode,
                    param1: p1,
                    param2: p2,
                    param3: p3,
                    data,
                })
            }
        ),
        (any::<(u8, u32)>(), sns(), data(100)).prop_map(|((reason, data_sn), (s, e, m), data)| {
            Reply::Reject(Reject {
                reason: RejectReason(reason),
                stat_sn: s,
                exp_cmd_sn: e,
                max_cmd_sn: m,
                data_sn,
                data,
            })
        }),
    ]
}

/// Data-In as the RFC allows it: status fields only with S, and S only with F.
fn data_in() -> impl Strategy<Value = Reply> {
    (
        any::<(bool, bool, bool, bool, bool, u8)>(),
        any::<(u64, u32, u32, u32, u32, u32)>(),
        any::<(u32, u32, u32)>(),
        data(600),
    )
        .prop_map(
            |((f, ack, o, u, s, status), (lun, itt, ttt, stat_sn, e, m), (dsn, off, res), data)| {
                Reply::DataIn(DataIn {
                    final_bit: f || s,
                    ack,
                    overflow: s && o,
                    underflow: s && u,
                    has_status: s,
                    status: if s { status } else { 0 },
                    lun,
                    itt,
                    ttt,
                    stat_sn: if s { stat_sn } else { 0 },
                    exp_cmd_sn: e,
                    max_cmd_sn: m,
                    data_sn: dsn,
                    buffer_offset: off,
                    residual: if s { res } else { 0 },
                    data,
                })
            },
        )
}

/// Bytes that look like a PDU: a plausible opcode, small AHS and data
/// lengths, then arbitrary content, so the decoders get past the first checks.
fn pdu_like_bytes() -> impl Strategy<Value = Vec<u8>> {
    let opcodes = prop::sample::select(vec![
        0x00u8, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x10, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26,
        0x31, 0x32, 0x3f,
    ]);
    (
        opcodes,
        any::<bool>(),
        prop::collection::vec(any::<u8>(), 48..=48),
        0u8..4,
        0u32..64,
        data(400),
    )
        .prop_map(|(op, imm, mut bhs, ahs_words, dsl, tail)| {
            bhs[0] = op | if imm { 0x40 } else { 0 };
            bhs[4] = ahs_words;
            bhs[5..8].copy_from_slice(&dsl.to_be_bytes()[1..]);
            bhs.extend(tail);
            bhs
        })
}

fn any_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![data(200), pdu_like_bytes()]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn decoders_never_panic(bytes in any_bytes(), hd: bool, dd: bool) {
        let _ = Request::decode(&bytes, hd, dd);
        let _ = Reply::decode(&bytes, hd, dd);
        if let Some((bhs, ahs)) = bytes.split_first_chunk::<BHS_LEN>() {
            let _ = RequestHeader::parse(bhs, ahs);
            let view = bhs::Bhs::new_checked(&bytes[..]);
            prop_assert!(view.is_ok());
        } else {
            prop_assert!(matches!(
                Request::decode(&bytes, hd, dd),
                Err(PduError::Incomplete(_))
            ));
        }
    }

    #[test]
    fn decoded_length_is_consistent(bytes in pdu_like_bytes(), hd: bool, dd: bool) {
        // Whatever decodes consumed exactly the length the BHS announces.
        if let Ok((_, used)) = Request::decode(&bytes, hd, dd) {
            let view = bhs::Bhs::new_checked(&bytes[..]).expect("decoded, so a whole BHS");
            prop_assert_eq!(used, view.pdu_wire_len(hd, dd));
            prop_assert!(used <= bytes.len());
        }
        if let Ok((_, used)) = Reply::decode(&bytes, hd, dd) {
            let view = bhs::Bhs::new_checked(&bytes[..]).expect("decoded, so a whole BHS");
            prop_assert_eq!(used, view.pdu_wire_len(hd, dd));
        }
    }

    #[test]
    fn request_round_trip(req in request(), hd: bool, dd: bool) {
        let wire = req.encode(hd, dd);
        let view = bhs::Bhs::new_checked(&wire[..]).expect("encoded BHS");
        prop_assert_eq!(wire.len(), view.pdu_wire_len(hd, dd));
        prop_assert_eq!(wire.len() % 4, 0);
        prop_assert_eq!(Request::decode(&wire, hd, dd), Ok((req.clone(), wire.len())));
        // Truncated: always Incomplete.
        let cut = wire.len() / 2;
        prop_assert!(matches!(
            Request::decode(&wire[..cut], hd, dd),
            Err(PduError::Incomplete(_))
        ));
        // Re-encoding a decoded PDU gives the same bytes.
        let (again, _) = Request::decode(&wire, hd, dd).expect("decodes");
        prop_assert_eq!(again.encode(hd, dd), wire);
    }

    #[test]
    fn reply_round_trip(reply in reply(), hd: bool, dd: bool) {
        let wire = reply.encode(hd, dd);
        let view = bhs::Bhs::new_checked(&wire[..]).expect("encoded BHS");
        prop_assert_eq!(wire.len(), view.pdu_wire_len(hd, dd));
        prop_assert_eq!(wire.len() % 4, 0);
        prop_assert_eq!(view.opcode(), reply.opcode());
        prop_assert_eq!(Reply::decode(&wire, hd, dd), Ok((reply.clone(), wire.len())));
        let cut = wire.len() / 2;
        prop_assert!(matches!(
            Reply::decode(&wire[..cut], hd, dd),
            Err(PduError::Incomplete(_))
        ));
    }

    #[test]
    fn back_to_back_pdus(a in reply(), b in reply(), hd: bool, dd: bool) {
        let mut wire = Vec::new();
        a.encode_into(&mut wire, hd, dd);
        b.encode_into(&mut wire, hd, dd);
        let (first, used) = Reply::decode(&wire, hd, dd).expect("first PDU");
        let (second, rest) = Reply::decode(&wire[used..], hd, dd).expect("second PDU");
        prop_assert_eq!(first, a);
        prop_assert_eq!(second, b);
        prop_assert_eq!(used + rest, wire.len());
    }

    /// CRC32C catches every single-bit error, so with both digests on no
    /// flipped bit can decode successfully.
    #[test]
    fn flipped_bit_is_caught_by_digests(req in request(), pos: prop::sample::Index, bit in 0u8..8) {
        let mut wire = req.encode(true, true);
        let i = pos.index(wire.len());
        wire[i] ^= 1 << bit;
        prop_assert!(Request::decode(&wire, true, true).is_err());
    }

    #[test]
    fn flipped_bit_in_reply_is_caught(reply in reply(), pos: prop::sample::Index, bit in 0u8..8) {
        let mut wire = reply.encode(true, true);
        let i = pos.index(wire.len());
        wire[i] ^= 1 << bit;
        prop_assert!(Reply::decode(&wire, true, true).is_err());
    }

    #[test]
    fn lun_round_trip(lun in 0u64..=MAX_LUN) {
        prop_assert_eq!(decode_lun(encode_lun(lun)), lun);
    }

    #[test]
    fn lun_out_of_range(lun in (MAX_LUN + 1)..=u64::MAX) {
        prop_assert_eq!(encode_lun(lun), INVALID_LUN);
        prop_assert_eq!(decode_lun(encode_lun(lun)), INVALID_LUN);
    }

    /// Any raw LUN decodes without panicking, and a supported one re-encodes to
    /// a raw LUN naming the same unit.
    #[test]
    fn raw_lun_decode(raw: u64) {
        let lun = decode_lun(raw);
        if lun != INVALID_LUN {
            prop_assert!(lun <= MAX_LUN);
            prop_assert_eq!(decode_lun(encode_lun(lun)), lun);
        }
    }
}

#[test]
fn every_lun_round_trips() {
    for lun in 0..=MAX_LUN {
        let raw = encode_lun(lun);
        assert_eq!(decode_lun(raw), lun);
        // Single-level: only the first two bytes are used.
        assert_eq!(raw & 0x0000_ffff_ffff_ffff, 0);
    }
}
