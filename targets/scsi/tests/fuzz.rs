//! Property tests: no CDB, however malformed, with any buffer sizes, makes
//! the core panic, lose a completion or complete twice.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::OnceLock;

use common::*;
use proptest::prelude::*;
use rustgt_scsi::{Command, LunConfig, Status, TaskAttr};

fn harness() -> &'static Harness {
    static H: OnceLock<Harness> = OnceLock::new();
    H.get_or_init(|| {
        let h = Harness::with(64, 512, false, 4);
        h.target
            .add_lun(1, LunConfig::new(MockStore::new(16, 4096, true)))
            .unwrap();
        h
    })
}

/// Operation codes the core implements, so that random CDBs get past the
/// opcode check often enough to exercise the handlers.
const OPCODES: &[u8] = &[
    0x00, 0x03, 0x08, 0x0A, 0x12, 0x15, 0x1A, 0x1B, 0x25, 0x28, 0x2A, 0x2E, 0x2F, 0x35, 0x55, 0x5A,
    0x88, 0x8A, 0x8E, 0x8F, 0x91, 0x9E, 0xA0, 0xA3, 0xA8, 0xAA, 0xAE, 0xAF,
];

fn cdb_strategy() -> impl Strategy<Value = Vec<u8>> {
    let known = (
        prop::sample::select(OPCODES),
        prop::collection::vec(any::<u8>(), 0..32),
    )
        .prop_map(|(op, mut rest)| {
            rest.insert(0, op);
            rest.truncate(32);
            rest
        });
    prop_oneof![prop::collection::vec(any::<u8>(), 0..32), known]
}

fn attr_strategy() -> impl Strategy<Value = TaskAttr> {
    prop_oneof![
        Just(TaskAttr::Simple),
        Just(TaskAttr::Ordered),
        Just(TaskAttr::HeadOfQueue),
        Just(TaskAttr::Aca),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_cdbs_complete_exactly_once(
        cdb in cdb_strategy(),
        data_in_len in prop_oneof![0u32..70_000, any::<u32>()],
        data_out in prop::collection::vec(any::<u8>(), 0..2048),
        lun in 0u64..3,
        attr in attr_strategy(),
        tag in any::<u64>(),
        nexus_id in 1u64..4,
    ) {
        let h = harness();
        let cmd = Command {
            nexus: nexus(nexus_id),
            lun,
            tag,
            cdb: cdb.into(),
            attr,
            data_in_len,
            data_out: data_out.into(),
        };
        let r = submit_wait(&h.target, cmd);
        prop_assert_eq!(r.tag, tag);
        prop_assert!(r.data_in.len() as u64 <= u64::from(data_in_len));
        prop_assert!(!r.aborted);
        if r.status == Status::CHECK_CONDITION {
            prop_assert!(matches!(r.sense.first(), Some(0x70) | Some(0x72) | Some(0xF0)));
            prop_assert!(r.data_in.is_empty());
        } else {
            prop_assert!(r.sense.is_empty());
        }
    }
}
