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

#[test]
fn wrong_secret_fails_authentication() {
    let bad = encode_hex(&md5(&[&[ID], b"wrong-secret!!!!", &CHALLENGE]));
    let e = fail_with(
        one_way(),
        &[("CHAP_N", "iqn.2024-01.test:host1"), ("CHAP_R", &bad)],
    );
    assert_eq!(e, AuthError::BadResponse);
    assert_eq!(e.login_status(), LoginStatus::AUTHENTICATION_FAILURE);
}

#[test]
fn truncated_response_fails_authentication() {
    let good = good_md5();
    let short = good.get(..good.len() - 2).expect("hex");
    let e = fail_with(
        one_way(),
        &[("CHAP_N", "iqn.2024-01.test:host1"), ("CHAP_R", short)],
    );
    assert_eq!(e, AuthError::BadResponse);
}

#[test]
fn wrong_user_fails_authentication() {
    let e = fail_with(
        one_way(),
        &[
            ("CHAP_N", "iqn.2024-01.test:other"),
            ("CHAP_R", &good_md5()),
        ],
    );
    assert_eq!(e, AuthError::UnknownUser);
    assert_eq!(e.login_status(), LoginStatus::AUTHENTICATION_FAILURE);
}

#[test]
fn reflected_challenge_fails() {
    let e = fail_with(
        mutual(),
        &[
            ("CHAP_N", "iqn.2024-01.test:host1"),
            ("CHAP_R", &good_md5()),
            ("CHAP_I", "42"),
            ("CHAP_C", &encode_hex(&CHALLENGE)),
        ],
    );
    assert_eq!(e, AuthError::Reflection);
    assert_eq!(e.login_status(), LoginStatus::AUTHENTICATION_FAILURE);
}

#[test]
fn mutual_challenge_without_target_credentials_fails() {
    let e = fail_with(
        one_way(),
        &[
            ("CHAP_N", "iqn.2024-01.test:host1"),
            ("CHAP_R", &good_md5()),
            ("CHAP_I", "1"),
            ("CHAP_C", "0x0102030405060708"),
        ],
    );
    assert_eq!(e, AuthError::MutualNotConfigured);
    assert_eq!(e.login_status(), LoginStatus::AUTHENTICATION_FAILURE);
}

#[test]
fn mutual_required_but_not_requested_fails() {
    let e = fail_with(
        mutual(),
        &[
            ("CHAP_N", "iqn.2024-01.test:host1"),
            ("CHAP_R", &good_md5()),
        ],
    );
    assert_eq!(e, AuthError::MutualRequired);
}

#[test]
fn wrong_response_is_not_answered_even_for_mutual() {
    // The target must not answer the initiator's challenge before it has
    // verified the initiator.
    let e = fail_with(
        mutual(),
        &[
            ("CHAP_N", "iqn.2024-01.test:host1"),
            ("CHAP_R", "0x00000000000000000000000000000000"),
            ("CHAP_I", "1"),
            ("CHAP_C", "0x0102030405060708"),
        ],
    );
    assert_eq!(e, AuthError::BadResponse);
}

#[test]
fn challenge_length_bounds() {
    let empty = fail_with(
        mutual(),
        &[
            ("CHAP_N", "iqn.2024-01.test:host1"),
            ("CHAP_R", &good_md5()),
            ("CHAP_I", "1"),
            ("CHAP_C", "0x"),
        ],
    );
    assert_eq!(empty.login_status(), LoginStatus::INITIATOR_ERROR);
    let huge = encode_hex(&vec![0x5a; 1025]);
    let e = fail_with(
        mutual(),
        &[
            ("CHAP_N", "iqn.2024-01.test:host1"),
            ("CHAP_R", &good_md5()),
            ("CHAP_I", "1"),
            ("CHAP_C", &huge),
        ],
    );
    assert_eq!(e, AuthError::BadChallengeLength(1025));
}

#[test]
fn chap_i_and_chap_c_must_come_together() {
    let e = fail_with(
        mutual(),
        &[
            ("CHAP_N", "iqn.2024-01.test:host1"),
            ("CHAP_R", &good_md5()),
            ("CHAP_I", "1"),
        ],
    );
    assert_eq!(e.login_status(), LoginStatus::INITIATOR_ERROR);
    let e = fail_with(
        mutual(),
        &[
            ("CHAP_N", "iqn.2024-01.test:host1"),
            ("CHAP_R", &good_md5()),
            ("CHAP_I", "256"),
            ("CHAP_C", "0x0102"),
        ],
    );
    assert_eq!(
        e,
        AuthError::InvalidValue {
            key: "CHAP_I".into()
        }
    );
}

#[test]
fn unsupported_algorithm_fails() {
    let mut s = SecurityNegotiator::new(one_way(), CHALLENGE.to_vec(), ID);
    s.process(&kv(&[("AuthMethod", "CHAP")]))
        .expect("AuthMethod");
    let e = s
        .process(&kv(&[("CHAP_A", "6,8,junk")]))
        .expect_err("no alg");
    assert_eq!(e, AuthError::UnsupportedAlgorithm);
    assert_eq!(e.login_status(), LoginStatus::AUTHENTICATION_FAILURE);
}

#[test]
fn out_of_order_chap_keys_are_protocol_errors() {
    let mut s = SecurityNegotiator::new(one_way(), CHALLENGE.to_vec(), ID);
    let e = s
        .process(&kv(&[("CHAP_A", "5")]))
        .expect_err("before AuthMethod");
    assert_eq!(e.login_status(), LoginStatus::INITIATOR_ERROR);

    let (mut s, _) = start(one_way(), "5");
    let e = s
        .process(&kv(&[("CHAP_A", "5")]))
        .expect_err("CHAP_A twice");
    assert_eq!(e.login_status(), LoginStatus::INITIATOR_ERROR);

    let (mut s, _) = start(one_way(), "5");
    let e = s
        .process(&kv(&[("CHAP_N", "iqn.2024-01.test:host1")]))
        .expect_err("CHAP_N alone");
    assert_eq!(e.login_status(), LoginStatus::INITIATOR_ERROR);

    let mut s = SecurityNegotiator::new(one_way(), CHALLENGE.to_vec(), ID);
    let e = s
        .process(&kv(&[("AuthMethod", "CHAP"), ("AuthMethod", "None")]))
        .expect_err("duplicate");
    assert_eq!(e, AuthError::DuplicateKey("AuthMethod".into()));
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
fn short_configured_challenge_is_a_target_error() {
    let mut s = SecurityNegotiator::new(one_way(), vec![1, 2, 3], ID);
    s.process(&kv(&[("AuthMethod", "CHAP")]))
        .expect("AuthMethod");
    let e = s.process(&kv(&[("CHAP_A", "5")])).expect_err("short");
    assert_eq!(e.login_status(), LoginStatus::TARGET_ERROR);
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
