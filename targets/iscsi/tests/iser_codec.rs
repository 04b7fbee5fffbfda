//! The iSER codec against hand-written byte fixtures (RFC 7145 §9.2-9.4,
//! InfiniBand Annex A12 CM private data as Linux sends it), truncated
//! input, and property tests: no parser panics, every value round-trips.

#![allow(clippy::unwrap_used)] // tests may panic on a broken invariant

use proptest::prelude::*;
use rustgt_iscsi::iser::*;

/// A SCSI READ+WRITE command's header: opcode 1, W and R set.
const BOTH: [u8; 28] = [
    0x1c, 0x00, 0x00, 0x00, // opcode 0x1, W 0x08, R 0x04
    0x11, 0x22, 0x33, 0x44, // Write STag
    0x00, 0x00, 0x7f, 0x00, 0x12, 0x34, 0x50, 0x00, // Write Base Offset
    0xaa, 0xbb, 0xcc, 0xdd, // Read STag
    0x00, 0x00, 0x7f, 0x00, 0x56, 0x78, 0x90, 0x00, // Read Base Offset
];

#[test]
fn control_header_fixture_with_both_buffers() {
    let h = ControlHeader::parse(&BOTH).unwrap();
    assert_eq!(
        h.write,
        Some(RemoteBuffer {
            stag: 0x1122_3344,
            base: 0x0000_7f00_1234_5000
        })
    );
    assert_eq!(
        h.read,
        Some(RemoteBuffer {
            stag: 0xaabb_ccdd,
            base: 0x0000_7f00_5678_9000
        })
    );
    assert_eq!(h.encode(), BOTH);
    // Both buffers: the initiator invalidates for itself.
    assert_eq!(h.invalidate_stag(), None);
}

#[test]
fn control_header_valid_bits_gate_the_fields() {
    // Only R: the write fields are ignored even when not zero.
    let mut only_read = BOTH;
    only_read[0] = 0x14;
    let h = ControlHeader::parse(&only_read).unwrap();
    assert_eq!(h.write, None);
    assert_eq!(h.read.map(|r| r.stag), Some(0xaabb_ccdd));
    assert_eq!(h.invalidate_stag(), Some(0xaabb_ccdd));
    // Canonical re-encoding zeroes the invalid buffer.
    let enc = h.encode();
    assert_eq!(enc[0], 0x14);
    assert_eq!(&enc[4..16], &[0u8; 12]);
    assert_eq!(&enc[16..], &BOTH[16..]);

    // Only W.
    let mut only_write = BOTH;
    only_write[0] = 0x18;
    let h = ControlHeader::parse(&only_write).unwrap();
    assert_eq!(h.read, None);
    assert_eq!(h.invalidate_stag(), Some(0x1122_3344));

    // Neither (a NOP-Out, a Data-Out...), reserved bits ignored.
    let mut plain = [0u8; 28];
    plain[0] = 0x13;
    plain[2] = 0xff;
    let h = ControlHeader::parse(&plain).unwrap();
    assert_eq!(h, ControlHeader::default());
    assert_eq!(h.invalidate_stag(), None);
    let mut canonical = [0u8; 28];
    canonical[0] = 0x10;
    assert_eq!(h.encode(), canonical);
}

#[test]
fn message_split_at_the_header() {
    let mut msg = BOTH.to_vec();
    msg.extend_from_slice(&[0xde; 48]);
    match IserMessage::parse(&msg).unwrap() {
        IserMessage::Control { header, pdu } => {
            assert_eq!(header.write.map(|w| w.stag), Some(0x1122_3344));
            assert_eq!(pdu, &[0xde; 48][..]);
        }
        other => panic!("{other:?}"),
    }
    // A bare header is a control message with an empty PDU: the connection
    // decides what that means.
    assert!(matches!(
        IserMessage::parse(&BOTH),
        Ok(IserMessage::Control { pdu: [], .. })
    ));
}

#[test]
fn hello_and_hello_reply_fixtures() {
    // Hello: opcode 2, MaxVer 1, MinVer 1, IRD 16.
    let hello = [0x20, 0x11, 0x00, 0x10, 0, 0, 0, 0, 0, 0, 0, 0];
    let h = match IserMessage::parse(&hello).unwrap() {
        IserMessage::Hello(h) => h,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        h,
        Hello {
            max_ver: 1,
            min_ver: 1,
            ird: 16
        }
    );
    assert_eq!(h.encode(), hello);

    // The reply: version 1, ORD limited by what the target allows.
    let r = h.reply(4);
    assert_eq!(
        r,
        HelloReply {
            reject: false,
            max_ver: 1,
            cur_ver: 1,
            ord: 4
        }
    );
    assert_eq!(r.encode(), [0x30, 0x11, 0x00, 0x04, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(
        IserMessage::parse(&r.encode()),
        Ok(IserMessage::HelloReply(r))
    );

    // An initiator that only speaks version 2 and up is refused (F bit).
    let newer = Hello {
        max_ver: 3,
        min_ver: 2,
        ird: 8,
    };
    let r = newer.reply(8);
    assert!(r.reject);
    assert_eq!(r.encode()[0], 0x31);
}

#[test]
fn cm_private_data_as_linux_sends_it() {
    // Linux's initiator: ZBVA not supported, Send with Invalidate supported;
    // the CM hands over 56 bytes, zero-padded.
    let mut req = vec![0x80, 0, 0, 0];
    req.resize(56, 0);
    let p = CmPrivateData::parse(&req).unwrap();
    assert!(!p.zero_based_va());
    assert!(p.send_with_invalidate());
    // The target's REP: no ZBVA; Send with Invalidate iff the device can.
    assert_eq!(p.target_reply(true).encode(), [0x80, 0, 0, 0]);
    assert_eq!(p.target_reply(false).encode(), [0xc0, 0, 0, 0]);

    // An initiator that refuses remote invalidation.
    let p = CmPrivateData::parse(&[0xc0, 0, 0, 0]).unwrap();
    assert!(!p.send_with_invalidate());
    assert_eq!(p.target_reply(true).encode(), [0xc0, 0, 0, 0]);

    // No private data: assume nothing optional.
    assert_eq!(
        CmPrivateData::legacy_initiator()
            .target_reply(true)
            .encode(),
        [0xc0, 0, 0, 0]
    );
}

#[test]
fn truncated_input_reports_what_it_needs() {
    assert_eq!(
        IserMessage::parse(&[]),
        Err(IserError::Truncated { need: 1, have: 0 })
    );
    assert_eq!(
        IserMessage::parse(&BOTH[..27]),
        Err(IserError::Truncated { need: 28, have: 27 })
    );
    assert_eq!(
        IserMessage::parse(&[0x20, 0x11, 0, 16]),
        Err(IserError::Truncated { need: 12, have: 4 })
    );
    assert_eq!(
        IserMessage::parse(&[0x30; 11]),
        Err(IserError::Truncated { need: 12, have: 11 })
    );
    assert_eq!(
        CmPrivateData::parse(&[0x80, 0]),
        Err(IserError::Truncated { need: 4, have: 2 })
    );
    assert_eq!(
        ControlHeader::parse(&[0x1c]),
        Err(IserError::Truncated { need: 28, have: 1 })
    );
}

#[test]
fn unknown_opcodes_are_errors_not_panics() {
    for op in [0x0u8, 0x4, 0x7, 0xf] {
        let mut msg = [0u8; 28];
        msg[0] = op << 4;
        assert_eq!(IserMessage::parse(&msg), Err(IserError::UnknownOpcode(op)));
    }
}

fn remote() -> impl Strategy<Value = Option<RemoteBuffer>> {
    proptest::option::of(any::<(u32, u64)>().prop_map(|(stag, base)| RemoteBuffer { stag, base }))
}

proptest! {
    #[test]
    fn parsers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
        let _ = IserMessage::parse(&bytes);
        let _ = ControlHeader::parse(&bytes);
        let _ = CmPrivateData::parse(&bytes);
    }

    #[test]
    fn control_headers_round_trip(write in remote(), read in remote(), tail in proptest::collection::vec(any::<u8>(), 0..64)) {
        let h = ControlHeader { write, read };
        let mut msg = h.encode().to_vec();
        prop_assert_eq!(msg.len(), ISER_HEADER_LEN);
        msg.extend_from_slice(&tail);
        match IserMessage::parse(&msg) {
            Ok(IserMessage::Control { header, pdu }) => {
                prop_assert_eq!(header, h);
                prop_assert_eq!(pdu, &tail[..]);
            }
            other => prop_assert!(false, "{:?}", other),
        }
    }

    #[test]
    fn hellos_round_trip(max_ver in 0u8..16, min_ver in 0u8..16, ird: u16, reject: bool, ord: u16) {
        let h = Hello { max_ver, min_ver, ird };
        let bytes = h.encode();
        prop_assert_eq!(IserMessage::parse(&bytes), Ok(IserMessage::Hello(h)));
        let r = HelloReply { reject, max_ver, cur_ver: min_ver, ord };
        let bytes = r.encode();
        prop_assert_eq!(IserMessage::parse(&bytes), Ok(IserMessage::HelloReply(r)));
    }

    #[test]
    fn hello_replies_never_offer_more_than_asked(max_ver in 0u8..16, min_ver in 0u8..16, ird: u16, limit: u16) {
        let r = Hello { max_ver, min_ver, ird }.reply(limit);
        prop_assert!(r.ord <= ird && r.ord <= limit);
        prop_assert_eq!(r.reject, !(min_ver..=max_ver).contains(&ISER_VERSION));
    }

    #[test]
    fn cm_private_data_round_trips(flags: u8, pad in proptest::collection::vec(any::<u8>(), 0..60)) {
        let p = CmPrivateData { flags };
        let mut buf = p.encode().to_vec();
        buf.extend_from_slice(&pad);
        prop_assert_eq!(CmPrivateData::parse(&buf), Ok(p));
    }
}
