//! Security stage: AuthMethod negotiation and CHAP exchanges (RFC 7143
//! §12.1.3), checked against digests computed outside the crate.

use md5::{Digest as _, Md5};
use rustgt_iscsi::chap::{
    is_security_key, AuthError, ChapAlgorithm, ChapCredentials, ChapPolicy, SecurityNegotiator,
};
use rustgt_iscsi::pdu::LoginStatus;
use rustgt_iscsi::text::{encode_hex, KeyValues};
use sha2::Sha256;

const CHALLENGE: [u8; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];
const ID: u8 = 0x2a;

fn kv(pairs: &[(&str, &str)]) -> KeyValues {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn get<'a>(pairs: &'a KeyValues, key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

fn initiator_creds() -> ChapCredentials {
    ChapCredentials {
        user: "iqn.2024-01.test:host1".into(),
        secret: b"initiator-secret".to_vec(),
    }
}

fn target_creds() -> ChapCredentials {
    ChapCredentials {
        user: "iqn.2024-01.test:target".into(),
        secret: b"target-secret-xyz".to_vec(),
    }
}

fn one_way() -> ChapPolicy {
    ChapPolicy {
        initiator: Some(initiator_creds()),
        target: None,
    }
}

fn mutual() -> ChapPolicy {
    ChapPolicy {
        initiator: Some(initiator_creds()),
        target: Some(target_creds()),
    }
}

fn md5(parts: &[&[u8]]) -> Vec<u8> {
    let mut h = Md5::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().to_vec()
}

fn sha256(parts: &[&[u8]]) -> Vec<u8> {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().to_vec()
}

/// Runs AuthMethod and CHAP_A; returns the negotiator and the CHAP_A answer.
fn start(policy: ChapPolicy, algs: &str) -> (SecurityNegotiator, KeyValues) {
    let mut s = SecurityNegotiator::new(policy, CHALLENGE.to_vec(), ID);
    let a = s
        .process(&kv(&[
            ("InitiatorName", "iqn.2024-01.test:host1"),
            ("AuthMethod", "CHAP,None"),
        ]))
        .expect("AuthMethod");
    assert_eq!(a, kv(&[("AuthMethod", "CHAP")]));
    assert!(!s.is_complete());
    let a = s.process(&kv(&[("CHAP_A", algs)])).expect("CHAP_A");
    (s, a)
}

#[test]
fn md5_one_way_exchange_with_fixed_vector() {
    let (mut s, a) = start(one_way(), "5");
    assert_eq!(
        a,
        kv(&[
            ("CHAP_A", "5"),
            ("CHAP_I", "42"),
            ("CHAP_C", "0x000102030405060708090a0b0c0d0e0f"),
        ])
    );
    // MD5(0x2a || "initiator-secret" || 00..0f), computed with Python hashlib.
    let r = s
        .process(&kv(&[
            ("CHAP_N", "iqn.2024-01.test:host1"),
            ("CHAP_R", "0x146466a8b34b56526e0619fa9872f517"),
        ]))
        .expect("CHAP_R");
    assert!(r.is_empty(), "one-way CHAP sends nothing back: {r:?}");
    assert!(s.is_complete());
    assert!(s.check_transit().is_ok());
}

#[test]
fn base64_response_is_accepted() {
    let (mut s, _) = start(one_way(), "5");
    s.process(&kv(&[
        ("CHAP_N", "iqn.2024-01.test:host1"),
        ("CHAP_R", "0bFGRmqLNLVlJuBhn6mHL1Fw=="),
    ]))
    .expect("base64 CHAP_R");
    assert!(s.is_complete());
}

#[test]
fn sha256_preferred_in_initiator_order() {
    let (_, a) = start(one_way(), "7,5");
    assert_eq!(get(&a, "CHAP_A"), Some("7"));
    let (_, a) = start(one_way(), "5,7");
    assert_eq!(get(&a, "CHAP_A"), Some("5"));
    let (_, a) = start(one_way(), "6,7");
    assert_eq!(get(&a, "CHAP_A"), Some("7"), "SHA-1 is skipped");
}

#[test]
fn sha256_mutual_exchange() {
    let (mut s, a) = start(mutual(), "7");
    assert_eq!(get(&a, "CHAP_A"), Some("7"));
    // SHA-256(0x2a || "initiator-secret" || 00..0f), computed with Python hashlib.
    let resp = "0xc44227375bb64ad56d55fa56b9b06a4a43eff4f90ddc9a38d36491a68a948df6";
    let ichallenge: Vec<u8> = (0x80..0x94).collect();
    let r = s
        .process(&kv(&[
            ("CHAP_N", "iqn.2024-01.test:host1"),
            ("CHAP_R", resp),
            ("CHAP_I", "7"),
            ("CHAP_C", &encode_hex(&ichallenge)),
        ]))
        .expect("mutual");
    assert_eq!(
        r,
        kv(&[
            ("CHAP_N", "iqn.2024-01.test:target"),
            (
                "CHAP_R",
                "0x1de2a5e50f04132a8ad03beb2ddf8003ac82875566da7eac480245fcad20a0bb"
            ),
        ])
    );
    let expected = sha256(&[&[7], b"target-secret-xyz", &ichallenge]);
    assert_eq!(get(&r, "CHAP_R"), Some(encode_hex(&expected).as_str()));
    assert!(s.is_complete());
}

#[test]
fn md5_mutual_exchange() {
    let (mut s, _) = start(mutual(), "5");
    let resp = md5(&[&[ID], b"initiator-secret", &CHALLENGE]);
    let ichallenge: Vec<u8> = (0x80..0x94).collect();
    let r = s
        .process(&kv(&[
            ("CHAP_N", "iqn.2024-01.test:host1"),
            ("CHAP_R", &encode_hex(&resp)),
            ("CHAP_I", "0x07"),
            ("CHAP_C", &encode_hex(&ichallenge)),
        ]))
        .expect("mutual md5");
    // MD5(0x07 || "target-secret-xyz" || 80..93), computed with Python hashlib.
    assert_eq!(
        get(&r, "CHAP_R"),
        Some("0x2d13c74c6ee8be2f857a00ceccdce4f7")
    );
    assert_eq!(get(&r, "CHAP_N"), Some("iqn.2024-01.test:target"));
}

#[test]
fn algorithm_helper_matches_reference() {
    let c = b"some challenge bytes";
    assert_eq!(
        ChapAlgorithm::Md5.response(9, b"s3cret", c),
        md5(&[&[9], b"s3cret", c])
    );
    assert_eq!(
        ChapAlgorithm::Sha256.response(9, b"s3cret", c),
        sha256(&[&[9], b"s3cret", c])
    );
    assert_eq!(ChapAlgorithm::Md5.code(), 5);
    assert_eq!(ChapAlgorithm::Sha256.code(), 7);
}

fn fail_with(policy: ChapPolicy, reply: &[(&str, &str)]) -> AuthError {
    let (mut s, _) = start(policy, "5");
    let e = s.process(&kv(reply)).expect_err("must fail");
    assert!(!s.is_complete());
    // Failure is final.
    assert_eq!(
        s.process(&kv(&[("CHAP_N", "x")])).expect_err("final"),
        AuthError::Failed
    );
    e
}

fn good_md5() -> String {
    encode_hex(&md5(&[&[ID], b"initiator-secret", &CHALLENGE]))
}

/// One CHAP response the target must refuse, for good (see [`fail_with`]).
struct FailCase {
    name: &'static str,
    policy: fn() -> ChapPolicy,
    /// The initiator's answer to the challenge.
    reply: Vec<(&'static str, String)>,
    /// The error it must fail with, when the case names one.
    error: Option<AuthError>,
    /// The login status that error maps to, when the case names one.
    status: Option<LoginStatus>,
}

fn fail_cases() -> Vec<FailCase> {
    let good = good_md5();
    let bad = encode_hex(&md5(&[&[ID], b"wrong-secret!!!!", &CHALLENGE]));
    let short = good.get(..good.len() - 2).expect("hex").to_owned();
    let huge = encode_hex(&vec![0x5a; 1025]);
    let host1 = || ("CHAP_N", "iqn.2024-01.test:host1".to_owned());
    let response = |r: &str| ("CHAP_R", r.to_owned());
    let chap_i = |i: &str| ("CHAP_I", i.to_owned());
    let chap_c = |c: &str| ("CHAP_C", c.to_owned());
    vec![
        FailCase {
            name: "wrong secret",
            policy: one_way,
            reply: vec![host1(), response(&bad)],
            error: Some(AuthError::BadResponse),
            status: Some(LoginStatus::AUTHENTICATION_FAILURE),
        },
        FailCase {
            name: "truncated response",
            policy: one_way,
            reply: vec![host1(), response(&short)],
            error: Some(AuthError::BadResponse),
            status: None,
        },
        FailCase {
            name: "wrong user",
            policy: one_way,
            reply: vec![
                ("CHAP_N", "iqn.2024-01.test:other".to_owned()),
                response(&good),
            ],
            error: Some(AuthError::UnknownUser),
            status: Some(LoginStatus::AUTHENTICATION_FAILURE),
        },
        FailCase {
            name: "reflected challenge",
            policy: mutual,
            reply: vec![
                host1(),
                response(&good),
                chap_i("42"),
                chap_c(&encode_hex(&CHALLENGE)),
            ],
            error: Some(AuthError::Reflection),
            status: Some(LoginStatus::AUTHENTICATION_FAILURE),
        },
        FailCase {
            name: "mutual challenge without target credentials",
            policy: one_way,
            reply: vec![
                host1(),
                response(&good),
                chap_i("1"),
                chap_c("0x0102030405060708"),
            ],
            error: Some(AuthError::MutualNotConfigured),
            status: Some(LoginStatus::AUTHENTICATION_FAILURE),
        },
        FailCase {
            name: "mutual required but not requested",
            policy: mutual,
            reply: vec![host1(), response(&good)],
            error: Some(AuthError::MutualRequired),
            status: None,
        },
        // The target must not answer the initiator's challenge before it
        // has verified the initiator.
        FailCase {
            name: "wrong response is not answered even for mutual",
            policy: mutual,
            reply: vec![
                host1(),
                response("0x00000000000000000000000000000000"),
                chap_i("1"),
                chap_c("0x0102030405060708"),
            ],
            error: Some(AuthError::BadResponse),
            status: None,
        },
        FailCase {
            name: "empty challenge",
            policy: mutual,
            reply: vec![host1(), response(&good), chap_i("1"), chap_c("0x")],
            error: None,
            status: Some(LoginStatus::INITIATOR_ERROR),
        },
        FailCase {
            name: "challenge over 1024 bytes",
            policy: mutual,
            reply: vec![host1(), response(&good), chap_i("1"), chap_c(&huge)],
            error: Some(AuthError::BadChallengeLength(1025)),
            status: None,
        },
        FailCase {
            name: "CHAP_I without CHAP_C",
            policy: mutual,
            reply: vec![host1(), response(&good), chap_i("1")],
            error: None,
            status: Some(LoginStatus::INITIATOR_ERROR),
        },
        FailCase {
            name: "CHAP_I out of range",
            policy: mutual,
            reply: vec![host1(), response(&good), chap_i("256"), chap_c("0x0102")],
            error: Some(AuthError::InvalidValue {
                key: "CHAP_I".into(),
            }),
            status: None,
        },
    ]
}

/// Runs `check` on every case, then fails naming each case that failed
/// (each failure's own message is printed as it happens).
fn for_each_case<C>(cases: &[C], name: fn(&C) -> &'static str, check: impl Fn(&C)) {
    let failed: Vec<&str> = cases
        .iter()
        .filter(|c| {
            let run = std::panic::AssertUnwindSafe(|| check(c));
            std::panic::catch_unwind(run).is_err()
        })
        .map(name)
        .collect();
    assert!(failed.is_empty(), "failed cases: {failed:?}");
}

#[test]
fn bad_chap_responses_fail_authentication() {
    for_each_case(
        &fail_cases(),
        |c| c.name,
        |c| {
            let reply: Vec<(&str, &str)> = c.reply.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let e = fail_with((c.policy)(), &reply);
            if let Some(error) = &c.error {
                assert_eq!(&e, error, "{}", c.name);
            }
            if let Some(status) = c.status {
                assert_eq!(e.login_status(), status, "{}", c.name);
            }
        },
    );
}

/// One request the security negotiator must refuse, after `setup`.
struct RefusalCase {
    name: &'static str,
    setup: fn() -> SecurityNegotiator,
    request: &'static [(&'static str, &'static str)],
    /// The error it must fail with, when the case names one.
    error: Option<AuthError>,
    /// The login status that error maps to, when the case names one.
    status: Option<LoginStatus>,
}

fn fresh() -> SecurityNegotiator {
    SecurityNegotiator::new(one_way(), CHALLENGE.to_vec(), ID)
}

fn after_start() -> SecurityNegotiator {
    start(one_way(), "5").0
}

fn refusal_cases() -> Vec<RefusalCase> {
    vec![
        RefusalCase {
            name: "unsupported algorithm",
            setup: || {
                let mut s = fresh();
                s.process(&kv(&[("AuthMethod", "CHAP")]))
                    .expect("AuthMethod");
                s
            },
            request: &[("CHAP_A", "6,8,junk")],
            error: Some(AuthError::UnsupportedAlgorithm),
            status: Some(LoginStatus::AUTHENTICATION_FAILURE),
        },
        // Out-of-order CHAP keys are protocol errors.
        RefusalCase {
            name: "CHAP_A before AuthMethod",
            setup: fresh,
            request: &[("CHAP_A", "5")],
            error: None,
            status: Some(LoginStatus::INITIATOR_ERROR),
        },
        RefusalCase {
            name: "CHAP_A twice",
            setup: after_start,
            request: &[("CHAP_A", "5")],
            error: None,
            status: Some(LoginStatus::INITIATOR_ERROR),
        },
        RefusalCase {
            name: "CHAP_N alone",
            setup: after_start,
            request: &[("CHAP_N", "iqn.2024-01.test:host1")],
            error: None,
            status: Some(LoginStatus::INITIATOR_ERROR),
        },
        RefusalCase {
            name: "AuthMethod twice",
            setup: fresh,
            request: &[("AuthMethod", "CHAP"), ("AuthMethod", "None")],
            error: Some(AuthError::DuplicateKey("AuthMethod".into())),
            status: None,
        },
        RefusalCase {
            name: "configured challenge too short",
            setup: || {
                let mut s = SecurityNegotiator::new(one_way(), vec![1, 2, 3], ID);
                s.process(&kv(&[("AuthMethod", "CHAP")]))
                    .expect("AuthMethod");
                s
            },
            request: &[("CHAP_A", "5")],
            error: None,
            status: Some(LoginStatus::TARGET_ERROR),
        },
    ]
}

#[test]
fn out_of_place_or_unusable_requests_are_refused() {
    for_each_case(
        &refusal_cases(),
        |c| c.name,
        |c| {
            let mut s = (c.setup)();
            let e = s.process(&kv(c.request)).expect_err(c.name);
            if let Some(error) = &c.error {
                assert_eq!(&e, error, "{}", c.name);
            }
            if let Some(status) = c.status {
                assert_eq!(e.login_status(), status, "{}", c.name);
            }
        },
    );
}

#[test]
fn auth_method_and_chap_a_in_one_request() {
    let mut s = SecurityNegotiator::new(one_way(), CHALLENGE.to_vec(), ID);
    let a = s
        .process(&kv(&[("AuthMethod", "CHAP"), ("CHAP_A", "5")]))
        .expect("combined");
    assert_eq!(get(&a, "AuthMethod"), Some("CHAP"));
    assert_eq!(get(&a, "CHAP_A"), Some("5"));
}

#[test]
fn none_preferred_when_no_chap_required() {
    let mut s = SecurityNegotiator::new(ChapPolicy::default(), CHALLENGE.to_vec(), ID);
    assert!(s.is_complete(), "nothing required");
    let a = s
        .process(&kv(&[("AuthMethod", "CHAP,None")]))
        .expect("None");
    assert_eq!(a, kv(&[("AuthMethod", "None")]));
    assert!(s.is_complete());
}

#[test]
fn chap_only_offer_without_credentials_is_rejected() {
    let mut s = SecurityNegotiator::new(ChapPolicy::default(), CHALLENGE.to_vec(), ID);
    let a = s.process(&kv(&[("AuthMethod", "CHAP")])).expect("Reject");
    assert_eq!(a, kv(&[("AuthMethod", "Reject")]));
}

#[test]
fn required_chap_rejects_none_and_blocks_transit() {
    let mut s = SecurityNegotiator::new(one_way(), CHALLENGE.to_vec(), ID);
    assert!(!s.is_complete());
    let a = s.process(&kv(&[("AuthMethod", "None")])).expect("Reject");
    assert_eq!(a, kv(&[("AuthMethod", "Reject")]));
    assert!(!s.is_complete());
    let e = s.check_transit().expect_err("must authenticate");
    assert_eq!(e.login_status(), LoginStatus::AUTHENTICATION_FAILURE);
}

#[test]
fn non_security_keys_are_ignored_and_other_methods_not_understood() {
    let mut s = SecurityNegotiator::new(ChapPolicy::default(), CHALLENGE.to_vec(), ID);
    let a = s
        .process(&kv(&[
            ("InitiatorName", "iqn.x"),
            ("SessionType", "Normal"),
            ("SRP_U", "user"),
        ]))
        .expect("ignored");
    assert_eq!(a, kv(&[("SRP_U", "NotUnderstood")]));
    assert!(is_security_key("CHAP_R"));
    assert!(is_security_key("AuthMethod"));
    assert!(!is_security_key("MaxBurstLength"));
}

#[test]
fn same_secret_both_ways_is_refused() {
    let policy = ChapPolicy {
        initiator: Some(initiator_creds()),
        target: Some(ChapCredentials {
            user: "t".into(),
            secret: b"initiator-secret".to_vec(),
        }),
    };
    assert!(policy.validate().is_err());
    assert!(mutual().validate().is_ok());
    assert!(ChapPolicy::default().validate().is_ok());
}

#[test]
fn debug_output_hides_secrets() {
    let s = SecurityNegotiator::new(mutual(), CHALLENGE.to_vec(), ID);
    let text = format!("{:?} {:?}", mutual(), s);
    assert!(!text.contains("initiator-secret"), "{text}");
    assert!(!text.contains("target-secret-xyz"), "{text}");
    // Nor as a byte list.
    let bytes = format!("{:?}", b"initiator-secret".to_vec());
    assert!(!text.contains(bytes.trim_start_matches('[').trim_end_matches(']')));
    assert!(text.contains("iqn.2024-01.test:host1"));
}
