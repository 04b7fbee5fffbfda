//! The CHAP security stage: login requests (text segments cut at 0xff
//! bytes) against one-way or mutual CHAP, or no CHAP. When a segment's
//! first byte asks for it, the harness appends the right CHAP_N/CHAP_R for
//! the challenge the target sent, so the fuzzer also gets past the
//! response check to mutual CHAP and to what follows success.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rustgt_iscsi::chap::{ChapAlgorithm, ChapCredentials, ChapPolicy, SecurityNegotiator};
use rustgt_iscsi::text::{decode_binary, parse_text};

const USER: &str = "user";
const SECRET: &[u8] = b"initiator-secret";

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let initiator = ChapCredentials {
        user: USER.into(),
        secret: SECRET.to_vec(),
    };
    let target = ChapCredentials {
        user: "target".into(),
        secret: b"target-secret-12".to_vec(),
    };
    let policy = match sel % 3 {
        0 => ChapPolicy::default(),
        1 => ChapPolicy {
            initiator: Some(initiator),
            target: None,
        },
        _ => ChapPolicy {
            initiator: Some(initiator),
            target: Some(target),
        },
    };
    let challenge: Vec<u8> = (0..16u8)
        .map(|i| i.wrapping_mul(37).wrapping_add(sel))
        .collect();
    let mut sec = SecurityNegotiator::new(policy, challenge, sel);
    let mut algorithm: Option<(ChapAlgorithm, u8, Vec<u8>)> = None;
    for seg in rest.split(|&b| b == 0xff).take(8) {
        let Some((&flags, text)) = seg.split_first() else {
            continue;
        };
        let Ok(mut pairs) = parse_text(text) else {
            continue;
        };
        if flags & 1 != 0 {
            if let Some((alg, id, chal)) = &algorithm {
                let resp: Vec<u8> = ChapAlgorithm::response(*alg, *id, SECRET, chal);
                let hex: String = resp.iter().map(|b| format!("{b:02x}")).collect();
                pairs.push(("CHAP_N".into(), USER.into()));
                pairs.push(("CHAP_R".into(), format!("0x{hex}")));
            }
        }
        match sec.process(&pairs) {
            Ok(answers) => {
                let get = |k: &str| {
                    answers
                        .iter()
                        .find(|(a, _)| a == k)
                        .map(|(_, v)| v.as_str())
                };
                if let (Some(a), Some(i), Some(c)) = (get("CHAP_A"), get("CHAP_I"), get("CHAP_C")) {
                    let alg = match a {
                        "5" => Some(ChapAlgorithm::Md5),
                        "7" => Some(ChapAlgorithm::Sha256),
                        _ => None,
                    };
                    if let (Some(alg), Ok(id), Ok(chal)) = (alg, i.parse::<u8>(), decode_binary(c))
                    {
                        algorithm = Some((alg, id, chal));
                    }
                }
            }
            Err(e) => {
                let _ = e.login_status();
            }
        }
        let _ = (
            sec.user(),
            sec.authenticated(),
            sec.is_complete(),
            sec.check_transit(),
        );
    }
});
