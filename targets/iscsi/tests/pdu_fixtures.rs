//! Byte fixtures for every PDU type, written by hand from the RFC 7143 §11
//! layouts (one row per 4-byte word, as in the RFC diagrams), never produced
//! by the encoder under test. Each fixture is checked three ways: encode gives
//! exactly the bytes, decode gives exactly the struct, and every truncation
//! gives `Incomplete`.
//!
//! Digest bytes come from RFC 3720 Appendix B.4 or from a bit-at-a-time
//! CRC32C (reflected polynomial 0x82F63B78) independent of the `crc32c` crate.

use rustgt_iscsi::pdu::*;

/// Parses whitespace-separated hex bytes; `//` starts a comment to end of line.
fn hex(s: &str) -> Vec<u8> {
    s.lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .flat_map(str::split_whitespace)
        .map(|b| u8::from_str_radix(b, 16).expect("fixture hex"))
        .collect()
}

/// Every strict prefix must ask for more bytes, and for exactly the rest once
/// the BHS is there.
fn assert_truncations_incomplete<T: std::fmt::Debug>(
    wire: &[u8],
    decode: impl Fn(&[u8]) -> Result<T, PduError>,
) {
    for cut in 0..wire.len() {
        let res = decode(&wire[..cut]);
        let Err(PduError::Incomplete(n)) = res else {
            panic!("prefix of {cut}/{} bytes: {res:?}", wire.len());
        };
        assert!(n >= 1 && cut + n <= wire.len(), "prefix {cut}: need {n}");
        if cut >= BHS_LEN {
            assert_eq!(cut + n, wire.len(), "prefix {cut}");
        }
    }
}

fn check_request(wire: &[u8], req: Request, hd: bool, dd: bool) {
    assert_eq!(req.encode(hd, dd), wire, "encode {:?}", req.header.opcode());
    assert_eq!(Request::decode(wire, hd, dd), Ok((req.clone(), wire.len())));
    // The two-step path the connection uses gives the same header.
    let bhs: &[u8; BHS_LEN] = wire[..BHS_LEN].try_into().expect("48 bytes");
    let ahs_len = bhs::Bhs::from_array(bhs).total_ahs_len_bytes();
    let ahs = &wire[BHS_LEN..BHS_LEN + ahs_len];
    assert_eq!(RequestHeader::parse(bhs, ahs), Ok(req.header.clone()));
    assert_truncations_incomplete(wire, |b| Request::decode(b, hd, dd));
    // Trailing bytes of the next PDU are left alone.
    let mut more = wire.to_vec();
    more.extend_from_slice(&[0x55; 7]);
    assert_eq!(Request::decode(&more, hd, dd), Ok((req, wire.len())));
}

fn check_reply(wire: &[u8], reply: Reply, hd: bool, dd: bool) {
    let mut out = vec![0xee]; // encode_into appends
    reply.encode_into(&mut out, hd, dd);
    assert_eq!(&out[1..], wire, "encode {:?}", reply.opcode());
    assert_eq!(Reply::decode(wire, hd, dd), Ok((reply.clone(), wire.len())));
    assert_truncations_incomplete(wire, |b| Reply::decode(b, hd, dd));
    let mut more = wire.to_vec();
    more.extend_from_slice(&[0x55; 7]);
    assert_eq!(Reply::decode(&more, hd, dd), Ok((reply, wire.len())));
}

// ---------------------------------------------------------------------------
// Digests.
// ---------------------------------------------------------------------------

/// RFC 3720 Appendix B.4 (as reproduced for RFC 7143): the CRC bytes as they
/// appear on the wire.
#[test]
fn crc32c_known_answers() {
    let incrementing: Vec<u8> = (0u8..32).collect();
    let decrementing: Vec<u8> = (0u8..32).rev().collect();
    let cases: [(&[u8], [u8; 4]); 4] = [
        (&[0x00; 32], [0xaa, 0x36, 0x91, 0x8a]),
        (&[0xff; 32], [0x43, 0xab, 0xa8, 0x62]),
        (&incrementing, [0x4e, 0x79, 0xdd, 0x46]),
        (&decrementing, [0x5c, 0xdb, 0x3f, 0x11]),
    ];
    for (bytes, wire) in cases {
        assert_eq!(digest_wire_bytes(bytes), wire);
        assert_eq!(crc32c_digest(bytes), u32::from_le_bytes(wire));
    }
    assert_eq!(crc32c_digest(&[0; 32]), 0x8a91_36aa);
    assert_eq!(verify_digest(&[0; 32], &[0xaa, 0x36, 0x91, 0x8a]), Ok(()));
    assert_eq!(
        verify_digest(&[0; 32], &[0x8a, 0x91, 0x36, 0xaa]),
        Err(PduError::InvalidField("digest"))
    );
}

/// The SCSI Read (10) Command PDU of RFC 3720 Appendix B.4, with its header
/// digest `56 3a 96 d9`.
fn rfc_read10() -> Vec<u8> {
    hex("
        01 c0 00 00 // . . 0x01 | F R, ATTR untagged | reserved
        00 00 00 00 // TotalAHSLength 0 | DataSegmentLength 0
        00 00 00 00 // LUN 0
        00 00 00 00
        14 00 00 00 // ITT
        00 00 04 00 // Expected Data Transfer Length 1024
        00 00 00 14 // CmdSN
        00 00 00 18 // ExpStatSN
        28 00 00 00 // CDB: READ(10), LBA 0,
        00 00 00 00
        02 00 00 00 //   transfer length 2
        00 00 00 00
        56 3a 96 d9 // header digest
    ")
}

fn rfc_read10_request() -> Request {
    let mut cdb = vec![0u8; 16];
    cdb[0] = 0x28;
    cdb[8] = 0x02;
    Request {
        header: RequestHeader::ScsiCommand(ScsiCommand {
            immediate: false,
            final_bit: true,
            read: true,
            write: false,
            attr: TaskAttribute::UNTAGGED,
            lun: 0,
            itt: 0x1400_0000,
            expected_data_len: 1024,
            cmd_sn: 0x14,
            exp_stat_sn: 0x18,
            cdb: cdb.into(),
            bidi_read_len: None,
        }),
        data: vec![],
    }
}

#[test]
fn scsi_command_rfc_read10_with_header_digest() {
    check_request(&rfc_read10(), rfc_read10_request(), true, false);
    // Without header digests the same PDU is the bare BHS.
    check_request(&rfc_read10()[..48], rfc_read10_request(), false, false);
    // No data, so a negotiated data digest adds nothing.
    check_request(&rfc_read10(), rfc_read10_request(), true, true);
}

#[test]
fn corrupted_digests_are_rejected() {
    let mut wire = rfc_read10();
    wire[20] ^= 0x01; // EDTL
    assert_eq!(
        Request::decode(&wire, true, false),
        Err(PduError::InvalidField("digest"))
    );
    let mut wire = rfc_read10();
    wire[50] ^= 0x80; // the digest itself
    assert_eq!(
        Request::decode(&wire, true, false),
        Err(PduError::InvalidField("digest"))
    );
    let mut wire = data_in_with_status();
    let last = wire.len() - 6; // a padding byte: the data digest covers it
    wire[last] = 0x01;
    assert_eq!(
        Reply::decode(&wire, true, true),
        Err(PduError::InvalidField("digest"))
    );
}

// ---------------------------------------------------------------------------
// Initiator PDUs.
// ---------------------------------------------------------------------------

#[test]
fn nop_out() {
    let wire = hex("
        40 80 00 00 // . I 0x00 | F | reserved
        00 00 00 05 // TotalAHSLength 0 | DataSegmentLength 5
        00 01 00 00 // LUN 1 (peripheral)
        00 00 00 00
        00 00 00 2a // ITT
        ff ff ff ff // TTT
        00 00 00 10 // CmdSN
        00 00 00 07 // ExpStatSN
        00 00 00 00 // reserved
        00 00 00 00
        00 00 00 00
        00 00 00 00
        70 69 6e 67 // ping data, 5 bytes
        21 00 00 00 //   + 3 padding
    ");
    let req = Request {
        header: RequestHeader::NopOut(NopOut {
            immediate: true,
            lun: 0x0001_0000_0000_0000,
            itt: 42,
            ttt: RESERVED_TAG,
            cmd_sn: 16,
            exp_stat_sn: 7,
        }),
        data: b"ping!".to_vec(),
    };
    check_request(&wire, req, false, false);
}

/// A 32-byte CDB (Extended CDB AHS) plus a Bidirectional Read AHS, with
/// immediate write data, header and data digests.
#[test]
fn scsi_command_with_ahs_and_digests() {
    let wire = hex("
        01 e1 00 00 // . . 0x01 | F R W, ATTR simple | reserved
        07 00 00 08 // TotalAHSLength 7 words | DataSegmentLength 8
        00 02 00 00 // LUN 2
        00 00 00 00
        00 00 00 99 // ITT
        00 00 00 08 // Expected Data Transfer Length
        00 00 00 40 // CmdSN
        00 00 00 1b // ExpStatSN
        7f 00 00 00 // CDB bytes 0..16
        00 00 00 18
        00 0b 00 00
        00 00 00 00
        00 11 01 00 // AHS: AHSLength 17 (16 CDB bytes + reserved) | type 1 | reserved
        10 11 12 13 //   CDB bytes 16..32
        14 15 16 17
        18 19 1a 1b
        1c 1d 1e 1f
        00 05 02 00 // AHS: AHSLength 5 | type 2 | reserved
        00 00 02 00 //   Expected Bidirectional Read Data Length 512
        99 7d 71 6e // header digest over BHS + AHS
        01 02 03 04 // data
        05 06 07 08
        81 1f 89 46 // data digest
    ");
    let mut cdb = hex("7f 00 00 00 00 00 00 18 00 0b 00 00 00 00 00 00");
    cdb.extend(0x10u8..0x20);
    let req = Request {
        header: RequestHeader::ScsiCommand(ScsiCommand {
            immediate: false,
            final_bit: true,
            read: true,
            write: true,
            attr: TaskAttribute::SIMPLE,
            lun: 0x0002_0000_0000_0000,
            itt: 0x99,
            expected_data_len: 8,
            cmd_sn: 0x40,
            exp_stat_sn: 0x1b,
            cdb: cdb.into(),
            bidi_read_len: Some(512),
        }),
        data: vec![1, 2, 3, 4, 5, 6, 7, 8],
    };
    check_request(&wire, req, true, true);
}

#[test]
fn task_mgmt_request() {
    let wire = hex("
        42 81 00 00 // . I 0x02 | F, function 1 ABORT TASK
        00 00 00 00
        00 03 00 00 // LUN 3
        00 00 00 00
        00 00 00 50 // ITT
        00 00 00 4f // Referenced Task Tag
        00 00 00 20 // CmdSN
        00 00 00 08 // ExpStatSN
        00 00 00 1f // RefCmdSN
        00 00 00 06 // ExpDataSN
        00 00 00 00 // reserved
        00 00 00 00
    ");
    let req = Request {
        header: RequestHeader::TaskMgmt(TaskMgmtRequest {
            immediate: true,
            function: TmfCode::ABORT_TASK,
            lun: 0x0003_0000_0000_0000,
            itt: 0x50,
            referenced_tag: 0x4f,
            cmd_sn: 0x20,
            exp_stat_sn: 8,
            ref_cmd_sn: 0x1f,
            exp_data_sn: 6,
        }),
        data: vec![],
    };
    check_request(&wire, req, false, false);
}

#[test]
fn login_request() {
    let wire = hex("
        43 87 00 00 // . 1 0x03 | T, CSG 1, NSG 3 | Version-max 0 | Version-min 0
        00 00 00 12 // DataSegmentLength 18
        80 12 34 56 // ISID (random format)
        00 01 00 00 //   | TSIH 0
        00 00 00 01 // ITT
        00 01 00 00 // CID 1 | reserved
        00 00 00 01 // CmdSN
        00 00 00 00 // ExpStatSN
        00 00 00 00 // reserved
        00 00 00 00
        00 00 00 00
        00 00 00 00
        48 65 61 64 // HeaderDigest=None\0
        65 72 44 69
        67 65 73 74
        3d 4e 6f 6e
        65 00 00 00 //   + 2 padding
    ");
    let req = Request {
        header: RequestHeader::Login(LoginRequest {
            transit: true,
            cont: false,
            csg: Stage::OPERATIONAL,
            nsg: Stage::FULL_FEATURE,
            version_max: 0,
            version_min: 0,
            isid: [0x80, 0x12, 0x34, 0x56, 0x00, 0x01],
            tsih: 0,
            itt: 1,
            cid: 1,
            cmd_sn: 1,
            exp_stat_sn: 0,
        }),
        data: b"HeaderDigest=None\0".to_vec(),
    };
    check_request(&wire, req, false, false);
}

#[test]
fn login_request_continue_and_csg_bits() {
    // C set, CSG 0 (security), NSG 1 with T clear: only the C bit and NSG.
    let mut bhs = [0u8; 48];
    bhs[0] = 0x43;
    bhs[1] = 0x41;
    let Ok(RequestHeader::Login(l)) = RequestHeader::parse(&bhs, &[]) else {
        panic!("login")
    };
    assert!(!l.transit && l.cont);
    assert_eq!((l.csg, l.nsg), (Stage::SECURITY, Stage::OPERATIONAL));
}

#[test]
fn text_request() {
    let wire = hex("
        44 80 00 00 // . I 0x04 | F
        00 00 00 10 // DataSegmentLength 16
        00 00 00 00 // LUN (reserved)
        00 00 00 00
        00 00 00 02 // ITT
        ff ff ff ff // TTT
        00 00 00 02 // CmdSN
        00 00 00 02 // ExpStatSN
        00 00 00 00 // reserved
        00 00 00 00
        00 00 00 00
        00 00 00 00
        53 65 6e 64 // SendTargets=All\0 (no padding)
        54 61 72 67
        65 74 73 3d
        41 6c 6c 00
    ");
    let req = Request {
        header: RequestHeader::Text(TextRequest {
            immediate: true,
            final_bit: true,
            cont: false,
            lun: 0,
            itt: 2,
            ttt: RESERVED_TAG,
            cmd_sn: 2,
            exp_stat_sn: 2,
        }),
        data: b"SendTargets=All\0".to_vec(),
    };
    check_request(&wire, req, false, false);

    let mut bhs = [0u8; 48];
    bhs[0] = 0x04;
    bhs[1] = 0x40; // C without F
    let Ok(RequestHeader::Text(t)) = RequestHeader::parse(&bhs, &[]) else {
        panic!("text")
    };
    assert!(t.cont && !t.final_bit && !t.immediate);
}

#[test]
fn data_out() {
    let wire = hex("
        05 80 00 00 // . . 0x05 | F
        00 00 00 06 // DataSegmentLength 6
        00 00 00 00 // LUN 0
        00 00 00 00
        00 00 00 33 // ITT
        00 00 10 00 // TTT
        00 00 00 00 // reserved
        00 00 00 09 // ExpStatSN
        00 00 00 00 // reserved
        00 00 00 02 // DataSN
        00 00 20 00 // Buffer Offset 8192
        00 00 00 00 // reserved
        01 02 03 04 // data
        05 06 00 00 //   + 2 padding
    ");
    let req = Request {
        header: RequestHeader::DataOut(DataOut {
            final_bit: true,
            lun: 0,
            itt: 0x33,
            ttt: 0x1000,
            exp_stat_sn: 9,
            data_sn: 2,
            buffer_offset: 8192,
        }),
        data: vec![1, 2, 3, 4, 5, 6],
    };
    check_request(&wire, req, false, false);
}

#[test]
fn logout_request() {
    let wire = hex("
        46 81 00 00 // . I 0x06 | F, reason 1 close connection
        00 00 00 00
        00 00 00 00 // reserved
        00 00 00 00
        00 00 00 77 // ITT
        00 01 00 00 // CID 1 | reserved
        00 00 00 30 // CmdSN
        00 00 00 11 // ExpStatSN
        00 00 00 00 // reserved
        00 00 00 00
        00 00 00 00
        00 00 00 00
    ");
    let req = Request {
        header: RequestHeader::Logout(LogoutRequest {
            immediate: true,
            reason: LogoutReason::CLOSE_CONNECTION,
            itt: 0x77,
            cid: 1,
            cmd_sn: 0x30,
            exp_stat_sn: 0x11,
        }),
        data: vec![],
    };
    check_request(&wire, req, false, false);
}

#[test]
fn snack_request() {
    let wire = hex("
        10 81 00 00 // . . 0x10 | F, type 1 (status)
        00 00 00 00
        00 00 00 00 // LUN
        00 00 00 00
        00 00 00 60 // ITT
        ff ff ff ff // TTT / SNACK Tag
        00 00 00 00 // reserved
        00 00 00 0c // ExpStatSN
        00 00 00 00 // reserved
        00 00 00 00
        00 00 00 05 // BegRun
        00 00 00 02 // RunLength
    ");
    let req = Request {
        header: RequestHeader::Snack(SnackRequest {
            snack_type: SnackType::STATUS,
            lun: 0,
            itt: 0x60,
            ttt: RESERVED_TAG,
            exp_stat_sn: 12,
            beg_run: 5,
            run_length: 2,
        }),
        data: vec![],
    };
    check_request(&wire, req, false, false);
}

#[test]
fn request_header_accessors() {
    let h = rfc_read10_request().header;
    assert_eq!(h.opcode(), Opcode::SCSI_COMMAND);
    assert_eq!(h.itt(), 0x1400_0000);
    assert!(!h.immediate());
    assert_eq!(h.cmd_sn(), Some(0x14));
    assert_eq!(h.exp_stat_sn(), 0x18);
    assert_eq!(h.lun_raw(), Some(0));

    let d = RequestHeader::DataOut(DataOut {
        final_bit: true,
        lun: 0,
        itt: 1,
        ttt: 2,
        exp_stat_sn: 3,
        data_sn: 0,
        buffer_offset: 0,
    });
    assert_eq!(
        (d.cmd_sn(), d.immediate(), d.exp_stat_sn()),
        (None, false, 3)
    );

    // A Login Request is immediate whatever byte 0 says.
    let mut bhs = [0u8; 48];
    bhs[0] = 0x03;
    assert!(RequestHeader::parse(&bhs, &[])
        .expect("login header")
        .immediate());
}

#[test]
fn request_header_errors() {
    let mut bhs = [0u8; 48];
    // Target opcodes and unassigned ones are not requests.
    for op in [0x20u8, 0x21, 0x3f, 0x07, 0x1c] {
        bhs[0] = op;
        assert_eq!(
            RequestHeader::parse(&bhs, &[]),
            Err(PduError::UnknownOpcode(op))
        );
    }
    // AHS on anything but a SCSI Command.
    bhs[0] = 0x00;
    bhs[4] = 2;
    let bidi = hex("00 05 02 00 00 00 00 01");
    assert_eq!(RequestHeader::parse(&bhs, &bidi), Err(PduError::BadAhs));
    // AHS shorter than TotalAHSLength says.
    bhs[0] = 0x01;
    assert_eq!(
        RequestHeader::parse(&bhs, &bidi[..3]),
        Err(PduError::Incomplete(5))
    );
    let Ok(RequestHeader::ScsiCommand(c)) = RequestHeader::parse(&bhs, &bidi) else {
        panic!("scsi command")
    };
    assert_eq!((c.bidi_read_len, c.cdb.len()), (Some(1), 16));
    // Malformed AHS content.
    let bad = hex("00 05 07 00 00 00 00 01");
    assert_eq!(RequestHeader::parse(&bhs, &bad), Err(PduError::BadAhs));
    // Unknown opcode with a full header is reported before the data arrives.
    let mut wire = [0u8; 48];
    wire[0] = 0x3f;
    wire[7] = 100;
    assert_eq!(
        Request::decode(&wire, false, false),
        Err(PduError::UnknownOpcode(0x3f))
    );
}

// ---------------------------------------------------------------------------
// Target PDUs.
// ---------------------------------------------------------------------------

#[test]
fn nop_in() {
    let wire = hex("
        20 80 00 00 // . . 0x20 | F
        00 00 00 04 // DataSegmentLength 4
        00 01 00 00 // LUN 1
        00 00 00 00
        00 00 00 2a // ITT
        ff ff ff ff // TTT
        00 00 00 07 // StatSN
        00 00 00 11 // ExpCmdSN
        00 00 00 50 // MaxCmdSN
        00 00 00 00 // reserved
        00 00 00 00
        00 00 00 00
        de ad be ef // ping data
    ");
    let reply = Reply::NopIn(NopIn {
        lun: 0x0001_0000_0000_0000,
        itt: 42,
        ttt: RESERVED_TAG,
        stat_sn: 7,
        exp_cmd_sn: 0x11,
        max_cmd_sn: 0x50,
        data: vec![0xde, 0xad, 0xbe, 0xef],
    });
    check_reply(&wire, reply, false, false);
}

#[test]
fn scsi_response_with_sense() {
    let wire = hex("
        21 82 00 02 // . . 0x21 | F U | response 0 | status CHECK CONDITION
        00 00 00 14 // DataSegmentLength 20
        00 00 00 00 // reserved
        00 00 00 00
        00 00 00 14 // ITT
        00 00 00 00 // SNACK Tag
        00 00 00 18 // StatSN
        00 00 00 15 // ExpCmdSN
        00 00 00 34 // MaxCmdSN
        00 00 00 03 // ExpDataSN
        00 00 00 00 // Bidirectional Read Residual Count
        00 00 02 00 // Residual Count 512
        00 12 70 00 // SenseLength 18 | fixed sense: ILLEGAL REQUEST,
        05 00 00 00
        00 0a 00 00
        00 00 24 00 //   ASC 0x24
        00 00 00 00
    ");
    let reply = Reply::ScsiResponse(ScsiResponse {
        bidi_overflow: false,
        bidi_underflow: false,
        overflow: false,
        underflow: true,
        response: 0,
        status: 0x02,
        itt: 0x14,
        snack_tag: 0,
        stat_sn: 0x18,
        exp_cmd_sn: 0x15,
        max_cmd_sn: 0x34,
        exp_data_sn: 3,
        bidi_residual: 0,
        residual: 512,
        sense: hex("70 00 05 00 00 00 00 0a 00 00 00 00 24 00 00 00 00 00"),
    });
    check_reply(&wire, reply, false, false);
}

#[test]
fn scsi_response_good_without_data() {
    let wire = hex("
        21 9c 01 00 // . . 0x21 | F o u O | response 1 (target failure) | status GOOD
        00 00 00 00 // no data segment
        00 00 00 00
        00 00 00 00
        00 00 00 0b // ITT
        00 00 00 01 // SNACK Tag
        00 00 00 02 // StatSN
        00 00 00 03 // ExpCmdSN
        00 00 00 04 // MaxCmdSN
        00 00 00 05 // ExpDataSN
        00 00 00 06 // Bidirectional Read Residual Count
        00 00 00 07 // Residual Count
    ");
    let reply = Reply::ScsiResponse(ScsiResponse {
        bidi_overflow: true,
        bidi_underflow: true,
        overflow: true,
        underflow: false,
        response: 1,
        status: 0,
        itt: 0x0b,
        snack_tag: 1,
        stat_sn: 2,
        exp_cmd_sn: 3,
        max_cmd_sn: 4,
        exp_data_sn: 5,
        bidi_residual: 6,
        residual: 7,
        sense: vec![],
    });
    check_reply(&wire, reply, false, false);
}

#[test]
fn scsi_response_bad_sense_length() {
    let mut wire = hex("21 80 00 02 00 00 00 04");
    wire.resize(48, 0);
    wire.extend(hex("00 09 70 00")); // SenseLength 9 in a 4-byte segment
    assert_eq!(
        Reply::decode(&wire, false, false),
        Err(PduError::InvalidField("SenseLength"))
    );
}

#[test]
fn task_mgmt_response() {
    let wire = hex("
        22 80 01 00 // . . 0x22 | F | response 1 (task does not exist)
        00 00 00 00
        00 00 00 00 // reserved
        00 00 00 00
        00 00 00 50 // ITT
        00 00 00 00 // reserved
        00 00 00 19 // StatSN
        00 00 00 21 // ExpCmdSN
        00 00 00 40 // MaxCmdSN
        00 00 00 00 // reserved
        00 00 00 00
        00 00 00 00
    ");
    let reply = Reply::TaskMgmtResponse(TaskMgmtResponse {
        response: TmfResult::TASK_DOES_NOT_EXIST,
        itt: 0x50,
        stat_sn: 0x19,
        exp_cmd_sn: 0x21,
        max_cmd_sn: 0x40,
    });
    check_reply(&wire, reply, false, false);
}

#[test]
fn login_response_success() {
    let wire = hex("
        23 87 00 00 // . . 0x23 | T, CSG 1, NSG 3 | Version-max 0 | Version-active 0
        00 00 00 17 // DataSegmentLength 23
        80 12 34 56 // ISID
        00 01 00 01 //   | TSIH 1
        00 00 00 01 // ITT
        00 00 00 00 // reserved
        00 00 00 00 // StatSN
        00 00 00 01 // ExpCmdSN
        00 00 00 01 // MaxCmdSN
        00 00 00 00 // Status-Class 0 | Status-Detail 0 | reserved
        00 00 00 00
        00 00 00 00
        54 61 72 67 // TargetPortalGroupTag=1\0
        65 74 50 6f
        72 74 61 6c
        47 72 6f 75
        70 54 61 67
        3d 31 00 00 //   + 1 padding
    ");
    let reply = Reply::LoginResponse(LoginResponse {
        transit: true,
        cont: false,
        csg: Stage::OPERATIONAL,
        nsg: Stage::FULL_FEATURE,
        version_max: 0,
        version_active: 0,
        isid: [0x80, 0x12, 0x34, 0x56, 0x00, 0x01],
        tsih: 1,
        itt: 1,
        stat_sn: 0,
        exp_cmd_sn: 1,
        max_cmd_sn: 1,
        status: LoginStatus::SUCCESS,
        data: b"TargetPortalGroupTag=1\0".to_vec(),
    });
    check_reply(&wire, reply, false, false);
}

#[test]
fn login_response_failure() {
    let wire = hex("
        23 40 00 00 // . . 0x23 | C, CSG 0, NSG 0
        00 00 00 00
        02 00 00 00 // ISID (OUI format)
        00 07 00 00 //   | TSIH 0
        00 00 00 05 // ITT
        00 00 00 00 // reserved
        00 00 00 03 // StatSN
        00 00 00 09 // ExpCmdSN
        00 00 00 09 // MaxCmdSN
        02 01 00 00 // Status-Class 2 | Status-Detail 1 (authentication failure)
        00 00 00 00
        00 00 00 00
    ");
    let reply = Reply::LoginResponse(LoginResponse {
        transit: false,
        cont: true,
        csg: Stage::SECURITY,
        nsg: Stage::SECURITY,
        version_max: 0,
        version_active: 0,
        isid: [0x02, 0, 0, 0, 0, 0x07],
        tsih: 0,
        itt: 5,
        stat_sn: 3,
        exp_cmd_sn: 9,
        max_cmd_sn: 9,
        status: LoginStatus::AUTHENTICATION_FAILURE,
        data: vec![],
    });
    check_reply(&wire, reply, false, false);
}

#[test]
fn text_response() {
    let wire = hex("
        24 80 00 00 // . . 0x24 | F
        00 00 00 11 // DataSegmentLength 17
        00 00 00 00 // LUN
        00 00 00 00
        00 00 00 02 // ITT
        ff ff ff ff // TTT
        00 00 00 03 // StatSN
        00 00 00 03 // ExpCmdSN
        00 00 00 22 // MaxCmdSN
        00 00 00 00 // reserved
        00 00 00 00
        00 00 00 00
        54 61 72 67 // TargetName=iqn.x\0
        65 74 4e 61
        6d 65 3d 69
        71 6e 2e 78
        00 00 00 00 //   + 3 padding
    ");
    let reply = Reply::TextResponse(TextResponse {
        final_bit: true,
        cont: false,
        lun: 0,
        itt: 2,
        ttt: RESERVED_TAG,
        stat_sn: 3,
        exp_cmd_sn: 3,
        max_cmd_sn: 0x22,
        data: b"TargetName=iqn.x\0".to_vec(),
    });
    check_reply(&wire, reply, false, false);
}

/// Data-In with phase-collapsed status, header and data digests.
fn data_in_with_status() -> Vec<u8> {
    hex("
        25 83 00 00 // . . 0x25 | F U S | reserved | status GOOD
        00 00 00 06 // DataSegmentLength 6
        00 00 00 00 // LUN 0
        00 00 00 00
        00 00 00 14 // ITT
        ff ff ff ff // TTT
        00 00 00 18 // StatSN
        00 00 00 15 // ExpCmdSN
        00 00 00 34 // MaxCmdSN
        00 00 00 00 // DataSN
        00 00 00 00 // Buffer Offset
        00 00 03 fa // Residual Count 1018
        2a f7 14 2d // header digest
        01 02 03 04 // data
        05 06 00 00 //   + 2 padding
        0b 8e 3d b6 // data digest (covers the padding)
    ")
}

#[test]
fn data_in_with_status_and_digests() {
    let reply = Reply::DataIn(DataIn {
        final_bit: true,
        ack: false,
        overflow: false,
        underflow: true,
        has_status: true,
        status: 0,
        lun: 0,
        itt: 0x14,
        ttt: RESERVED_TAG,
        stat_sn: 0x18,
        exp_cmd_sn: 0x15,
        max_cmd_sn: 0x34,
        data_sn: 0,
        buffer_offset: 0,
        residual: 1018,
        data: vec![1, 2, 3, 4, 5, 6],
    });
    check_reply(&data_in_with_status(), reply, true, true);
}

#[test]
fn data_in_without_status() {
    let wire = hex("
        25 40 00 00 // . . 0x25 | A
        00 00 00 04 // DataSegmentLength 4
        00 01 00 00 // LUN 1
        00 00 00 00
        00 00 00 14 // ITT
        00 00 00 0e // TTT
        00 00 00 00 // StatSN (reserved without S)
        00 00 00 15 // ExpCmdSN
        00 00 00 34 // MaxCmdSN
        00 00 00 01 // DataSN
        00 00 10 00 // Buffer Offset 4096
        00 00 00 00 // Residual Count (reserved without S)
        aa bb cc dd // data
    ");
    let expected = DataIn {
        final_bit: false,
        ack: true,
        overflow: false,
        underflow: false,
        has_status: false,
        status: 0,
        lun: 0x0001_0000_0000_0000,
        itt: 0x14,
        ttt: 0x0e,
        stat_sn: 0,
        exp_cmd_sn: 0x15,
        max_cmd_sn: 0x34,
        data_sn: 1,
        buffer_offset: 4096,
        residual: 0,
        data: vec![0xaa, 0xbb, 0xcc, 0xdd],
    };
    check_reply(&wire, Reply::DataIn(expected.clone()), false, false);

    // Status-only fields set in the struct do not leak out without S ...
    let noisy = DataIn {
        overflow: true,
        underflow: true,
        status: 0x02,
        stat_sn: 99,
        residual: 5,
        ..expected.clone()
    };
    assert_eq!(Reply::DataIn(noisy).encode(false, false), wire);
    // ... and reserved junk on the wire reads as zero.
    let mut junk = wire.clone();
    junk[1] |= 0x06; // O U
    junk[3] = 0x02; // status
    junk[27] = 0x63; // StatSN
    junk[47] = 0x05; // residual
    assert_eq!(
        Reply::decode(&junk, false, false),
        Ok((Reply::DataIn(expected), wire.len()))
    );
    // S without F is refused.
    let mut s_only = wire;
    s_only[1] = 0x01;
    assert!(matches!(
        Reply::decode(&s_only, false, false),
        Err(PduError::InvalidField(_))
    ));
}

#[test]
fn logout_response() {
    let wire = hex("
        26 80 02 00 // . . 0x26 | F | response 2 (recovery not supported)
        00 00 00 00
        00 00 00 00 // reserved
        00 00 00 00
        00 00 00 77 // ITT
        00 00 00 00 // reserved
        00 00 00 12 // StatSN
        00 00 00 31 // ExpCmdSN
        00 00 00 50 // MaxCmdSN
        00 00 00 00 // reserved
        00 02 00 14 // Time2Wait 2 | Time2Retain 20
        00 00 00 00 // reserved
    ");
    let reply = Reply::LogoutResponse(LogoutResponse {
        response: LogoutResponseCode::RECOVERY_NOT_SUPPORTED,
        itt: 0x77,
        stat_sn: 0x12,
        exp_cmd_sn: 0x31,
        max_cmd_sn: 0x50,
        time2wait: 2,
        time2retain: 20,
    });
    check_reply(&wire, reply, false, false);
}

#[test]
fn r2t() {
    let wire = hex("
        31 80 00 00 // . . 0x31 | F
        00 00 00 00
        00 01 00 00 // LUN 1
        00 00 00 00
        00 00 00 33 // ITT
        00 00 10 00 // TTT
        00 00 00 09 // StatSN
        00 00 00 31 // ExpCmdSN
        00 00 00 50 // MaxCmdSN
        00 00 00 01 // R2TSN
        00 01 00 00 // Buffer Offset 65536
        00 04 00 00 // Desired Data Transfer Length 262144
    ");
    let reply = Reply::R2t(R2t {
        lun: 0x0001_0000_0000_0000,
        itt: 0x33,
        ttt: 0x1000,
        stat_sn: 9,
        exp_cmd_sn: 0x31,
        max_cmd_sn: 0x50,
        r2t_sn: 1,
        buffer_offset: 65536,
        desired_len: 262_144,
    });
    check_reply(&wire, reply, false, false);

    // An R2T has no data segment.
    let mut with_data = wire.clone();
    with_data[7] = 4;
    with_data.extend([0; 4]);
    assert_eq!(
        Reply::decode(&with_data, false, false),
        Err(PduError::InvalidField("DataSegmentLength"))
    );
}

#[test]
fn async_message() {
    let wire = hex("
        32 80 00 00 // . . 0x32 | F
        00 00 00 02 // DataSegmentLength 2
        00 05 00 00 // LUN 5
        00 00 00 00
        ff ff ff ff // 0xffffffff
        00 00 00 00 // reserved
        00 00 00 13 // StatSN
        00 00 00 31 // ExpCmdSN
        00 00 00 50 // MaxCmdSN
        04 07 01 02 // AsyncEvent 4 | AsyncVCode 7 | Parameter1
        03 04 05 06 // Parameter2 | Parameter3
        00 00 00 00 // reserved
        00 00 00 00 // data (SenseLength 0) + 2 padding
    ");
    let reply = Reply::AsyncMessage(AsyncMessage {
        lun: 0x0005_0000_0000_0000,
        stat_sn: 0x13,
        exp_cmd_sn: 0x31,
        max_cmd_sn: 0x50,
        event: AsyncEvent::RENEGOTIATE,
        vcode: 7,
        param1: 0x0102,
        param2: 0x0304,
        param3: 0x0506,
        data: vec![0, 0],
    });
    check_reply(&wire, reply, false, false);
}

#[test]
fn reject() {
    let mut wire = hex("
        3f 80 09 00 // . . 0x3f | F | reason 9 (invalid PDU field)
        00 00 00 30 // DataSegmentLength 48
        00 00 00 00 // reserved
        00 00 00 00
        ff ff ff ff // 0xffffffff
        00 00 00 00 // reserved
        00 00 00 1a // StatSN
        00 00 00 15 // ExpCmdSN
        00 00 00 34 // MaxCmdSN
        00 00 00 03 // DataSN/R2TSN
        00 00 00 00 // reserved
        00 00 00 00
    ");
    let rejected = rfc_read10()[..48].to_vec();
    wire.extend_from_slice(&rejected);
    let reply = Reply::Reject(Reject {
        reason: RejectReason::INVALID_PDU_FIELD,
        stat_sn: 0x1a,
        exp_cmd_sn: 0x15,
        max_cmd_sn: 0x34,
        data_sn: 3,
        data: rejected,
    });
    check_reply(&wire, reply, false, false);
}

#[test]
fn reply_decode_errors() {
    let mut wire = [0u8; 48];
    // Initiator opcodes are not replies.
    for op in [0x00u8, 0x01, 0x05, 0x10, 0x30] {
        wire[0] = op;
        assert_eq!(
            Reply::decode(&wire, false, false),
            Err(PduError::UnknownOpcode(op))
        );
    }
    // Target PDUs carry no AHS.
    wire[0] = 0x20;
    wire[4] = 1;
    let mut with_ahs = wire.to_vec();
    with_ahs.extend([0, 1, 1, 0]);
    assert_eq!(
        Reply::decode(&with_ahs, false, false),
        Err(PduError::BadAhs)
    );
}

#[test]
fn reply_opcodes() {
    let r = Reply::R2t(R2t {
        lun: 0,
        itt: 0,
        ttt: 0,
        stat_sn: 0,
        exp_cmd_sn: 0,
        max_cmd_sn: 0,
        r2t_sn: 0,
        buffer_offset: 0,
        desired_len: 0,
    });
    assert_eq!(r.opcode(), Opcode::R2T);
    assert_eq!(
        bhs::Bhs::new_checked(r.encode(false, false))
            .expect("whole BHS")
            .opcode(),
        Opcode::R2T
    );
}
