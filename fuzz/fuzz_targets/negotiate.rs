//! Operational-parameter negotiation: a sequence of login requests (text
//! segments cut at 0xff bytes), each at a stage the input picks, then Text
//! requests in full feature phase; on a leading or a further connection,
//! over TCP or iSER, with digests and limits the first byte picks.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rustgt_iscsi::negotiate::{Digest, Limits, Negotiator, Transport};
use rustgt_iscsi::pdu::Stage;
use rustgt_iscsi::text::parse_text;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let transport = if sel & 1 != 0 {
        Transport::Iser
    } else {
        Transport::Tcp
    };
    let mut limits = Limits::default();
    if sel & 2 != 0 {
        limits.header_digest = vec![Digest::CRC32C, Digest::None];
        limits.data_digest = vec![Digest::CRC32C, Digest::None];
        limits.initial_r2t = false;
        limits.max_connections = 4;
        limits.error_recovery_level = 2;
    }
    let mut neg = if sel & 4 != 0 {
        let leading = Negotiator::new(limits.clone(), transport);
        Negotiator::new_non_leading(limits, transport, leading.params())
    } else {
        Negotiator::new(limits, transport)
    };
    let _ = neg.pending_declarations();
    for (i, seg) in rest.split(|&b| b == 0xff).take(16).enumerate() {
        let Some((&stage, text)) = seg.split_first() else {
            continue;
        };
        let Ok(pairs) = parse_text(text) else {
            continue;
        };
        let stage = match stage % 3 {
            0 if i == 0 => Stage::SECURITY,
            0 | 1 => Stage::OPERATIONAL,
            _ => Stage::FULL_FEATURE,
        };
        match neg.process(stage, &pairs) {
            Ok(_) => {
                let _ = neg.pending_declarations();
                let _ = neg.awaiting_answers();
            }
            Err(e) => {
                let _ = e.login_status();
            }
        }
    }
    let _ = neg.params();
});
