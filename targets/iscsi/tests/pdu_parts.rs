//! Data-In sent in parts (header, caller's payload, trailer) is the same
//! bytes as the whole PDU encoded at once, with and without digests.

use proptest::prelude::*;
use rustgt_iscsi::pdu::{DataIn, Reply};

proptest! {
    #[test]
    fn parts_equal_whole(payload in proptest::collection::vec(any::<u8>(), 0..3000), hd: bool, dd: bool, status: bool, sn: u32) {
        let pdu = DataIn {
            final_bit: true, ack: false, overflow: false, underflow: status, has_status: status,
            status: 0, lun: 0, itt: 9, ttt: u32::MAX, stat_sn: sn, exp_cmd_sn: 2, max_cmd_sn: 3,
            data_sn: 4, buffer_offset: 512, residual: if status { 7 } else { 0 }, data: payload.clone(),
        };
        let whole = Reply::DataIn(pdu.clone()).encode(hd, dd);
        let framing = DataIn { data: Vec::new(), ..pdu }.encode_parts(&payload, hd, dd);
        let mut parts = framing.head().to_vec();
        parts.extend_from_slice(&payload);
        parts.extend_from_slice(framing.tail());
        prop_assert_eq!(parts, whole);
    }
}
