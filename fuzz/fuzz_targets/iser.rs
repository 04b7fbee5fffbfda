//! iSER: the iSER header (RFC 7145 §9.2), Hello / HelloReply messages and
//! the iSER CM private data of a connect request. What parses must encode
//! back to bytes that parse the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rustgt_iscsi::iser::{CmPrivateData, ControlHeader, IserMessage};

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = ControlHeader::parse(data) {
        let again = h.encode();
        assert_eq!(
            ControlHeader::parse(&again).expect("re-encoded header parses"),
            h
        );
        let _ = h.invalidate_stag();
    }
    match IserMessage::parse(data) {
        Ok(IserMessage::Hello(h)) => {
            let _ = h.encode();
            let _ = h.reply(16).encode();
        }
        Ok(IserMessage::HelloReply(r)) => {
            let _ = r.encode();
        }
        Ok(_) | Err(_) => {}
    }
    if let Ok(cm) = CmPrivateData::parse(data) {
        let again = cm.encode();
        assert_eq!(
            CmPrivateData::parse(&again)
                .expect("re-encoded CM data parses")
                .flags,
            cm.flags
        );
        let _ = (cm.zero_based_va(), cm.send_with_invalidate());
        let _ = cm.target_reply(true).encode();
        let _ = cm.target_reply(false).encode();
    }
});
