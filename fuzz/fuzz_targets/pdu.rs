//! PDU decoder: initiator and target PDUs, with and without digests. A
//! decoded request must encode back to bytes that decode to the same
//! request (the codec is exact for what it accepts).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rustgt_iscsi::pdu::bhs::Bhs;
use rustgt_iscsi::pdu::{Reply, Request, RequestHeader, BHS_LEN};

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let (hd, dd) = (sel & 1 != 0, sel & 2 != 0);
    if let Ok((req, used)) = Request::decode(rest, hd, dd) {
        assert!(used <= rest.len());
        let again = req.encode(hd, dd);
        let (req2, used2) = Request::decode(&again, hd, dd).expect("re-encoded request decodes");
        assert_eq!(used2, again.len());
        assert_eq!(req2, req);
    }
    let _ = Reply::decode(rest, hd, dd);
    if let Some(bhs) = rest
        .get(..BHS_LEN)
        .and_then(|b| <&[u8; BHS_LEN]>::try_from(b).ok())
    {
        let ahs = rest.get(BHS_LEN..).unwrap_or_default();
        let _ = RequestHeader::parse(bhs, ahs);
        let b = Bhs::from_array(bhs);
        let _ = (b.header_wire_len(hd), b.pdu_wire_len(hd, dd));
    }
});
