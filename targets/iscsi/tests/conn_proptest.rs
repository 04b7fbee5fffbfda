//! Whatever bytes arrive, before or after login, the connection never
//! panics and only ever emits well-formed PDUs.

use proptest::prelude::*;
use rustgt_iscsi::chap::ChapPolicy;
use rustgt_iscsi::negotiate::Limits;
use rustgt_test_initiator::pair::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, .. ProptestConfig::default() })]

    #[test]
    fn garbage_before_login_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let mut p = Pair::new(portal_config(Limits::default(), ChapPolicy::default()));
        p.feed(&bytes);
        let _ = p.replies();
    }

    #[test]
    fn garbage_after_login_never_panics(chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..200), 0..8)) {
        let mut p = Pair::new(portal_config(Limits::default(), ChapPolicy::default()));
        p.login(&[]);
        for c in &chunks {
            p.feed(c);
        }
        let _ = p.replies();
    }

    #[test]
    fn pdu_shaped_garbage_after_login(op in 0u8..0x40, flags: u8, dsl in 0u32..70_000, itt: u32, rest in proptest::collection::vec(any::<u8>(), 28)) {
        let mut p = Pair::new(portal_config(Limits::default(), ChapPolicy::default()));
        p.login(&[]);
        let mut bhs = [0u8; 48];
        bhs[0] = op;
        bhs[1] = flags;
        bhs[5..8].copy_from_slice(&dsl.to_be_bytes()[1..]);
        bhs[16..20].copy_from_slice(&itt.to_be_bytes());
        bhs[20..48].copy_from_slice(&rest);
        p.feed(&bhs);
        p.feed(&vec![0u8; (dsl as usize).min(70_000)]);
        let _ = p.replies();
    }
}

/// The same for the message transport: arbitrary iSER messages, and
/// well-headed messages with arbitrary PDUs, never panic.
mod iser {
    use proptest::prelude::*;
    use rustgt_iscsi::chap::ChapPolicy;
    use rustgt_iscsi::iser::{ControlHeader, RemoteBuffer};
    use rustgt_iscsi::negotiate::Limits;
    use rustgt_test_initiator::pair::*;

    fn pair() -> Pair {
        Pair::iser(
            portal_config(Limits::default(), ChapPolicy::default()),
            iser_params(),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 128, .. ProptestConfig::default() })]

        #[test]
        fn garbage_messages_before_login_never_panic(msgs in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..200), 0..6)) {
            let mut p = pair();
            for m in &msgs {
                p.feed(m);
            }
            let _ = p.replies();
        }

        #[test]
        fn pdu_shaped_messages_after_login(op in 0u8..0x40, flags: u8, dsl in 0u32..20_000, len in 0usize..20_100, itt: u32, w: bool, r: bool, rest in proptest::collection::vec(any::<u8>(), 28)) {
            let mut p = pair();
            p.login(&[]);
            // One registered region for both directions: the harness fails
            // on any RDMA outside it or with another STag.
            let buf = p.register(vec![0u8; 20_000]);
            let remote = ControlHeader {
                write: w.then_some(RemoteBuffer { stag: buf.stag, base: buf.base }),
                read: r.then_some(buf),
            };
            let mut msg = remote.encode().to_vec();
            let mut bhs = [0u8; 48];
            bhs[0] = op;
            bhs[1] = flags;
            bhs[5..8].copy_from_slice(&dsl.to_be_bytes()[1..]);
            bhs[16..20].copy_from_slice(&itt.to_be_bytes());
            bhs[20..48].copy_from_slice(&rest);
            // LUN 0, the expected CmdSN, EDTL within the registered region:
            // commands get as far as the SCSI core and RDMA.
            bhs[8..16].fill(0);
            bhs[20..24].copy_from_slice(&(u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) % 20_000).to_be_bytes());
            bhs[24..28].copy_from_slice(&p.cmd_sn.to_be_bytes());
            msg.extend_from_slice(&bhs);
            msg.resize(msg.len() + len, 0);
            p.feed(&msg);
            let _ = p.replies();
        }
    }
}
