//! Whatever bytes arrive, before or after login, the connection never
//! panics and only ever emits well-formed PDUs.

mod common;

use common::*;
use proptest::prelude::*;
use rustgt_iscsi::chap::ChapPolicy;
use rustgt_iscsi::negotiate::Limits;

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
