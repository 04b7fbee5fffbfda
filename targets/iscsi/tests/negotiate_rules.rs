//! Operational negotiation: one test per §6.2 rule class and the §13 key
//! specifics, plus iSER (RFC 7145 §6) and a never-panics property.

use proptest::prelude::*;
use rustgt_iscsi::negotiate::{
    Digest, Limits, NegotiationError, Negotiator, SessionParams, SessionType, Transport,
};
use rustgt_iscsi::pdu::{LoginStatus, Stage};
use rustgt_iscsi::text::KeyValues;

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

const INITIATOR: &str = "iqn.1994-05.com.redhat:client";
const TARGET: &str = "iqn.2024-01.org.rustgt:disk1";

/// A negotiator past a security-stage first request (Normal session).
fn normal_with(limits: Limits, transport: Transport) -> Negotiator {
    let mut n = Negotiator::new(limits, transport);
    let a = n
        .process(
            Stage::SECURITY,
            &kv(&[
                ("InitiatorName", INITIATOR),
                ("TargetName", TARGET),
                ("SessionType", "Normal"),
                ("AuthMethod", "None"),
            ]),
        )
        .expect("first request");
    assert!(a.is_empty(), "declaratives get no answer: {a:?}");
    n
}

fn normal() -> Negotiator {
    normal_with(Limits::default(), Transport::Tcp)
}

fn discovery() -> Negotiator {
    let mut n = Negotiator::new(Limits::default(), Transport::Tcp);
    n.process(
        Stage::OPERATIONAL,
        &kv(&[("InitiatorName", INITIATOR), ("SessionType", "Discovery")]),
    )
    .expect("discovery first request");
    n
}

fn op(n: &mut Negotiator, pairs: &[(&str, &str)]) -> Result<KeyValues, NegotiationError> {
    n.process(Stage::OPERATIONAL, &kv(pairs))
}

#[test]
fn first_request_records_names() {
    let n = normal();
    let p = n.params();
    assert_eq!(p.initiator_name.as_deref(), Some(INITIATOR));
    assert_eq!(p.target_name.as_deref(), Some(TARGET));
    assert_eq!(p.session_type, SessionType::Normal);
}

#[test]
fn defaults_are_rfc_defaults() {
    let p = SessionParams::default();
    assert_eq!(p.max_burst_length, 262_144);
    assert_eq!(p.first_burst_length, 65_536);
    assert_eq!(p.initiator_max_recv_dsl, 8192);
    assert_eq!(p.target_max_recv_dsl, 8192);
    assert!(p.initial_r2t && p.immediate_data && p.data_pdu_in_order);
    assert_eq!((p.default_time2wait, p.default_time2retain), (2, 20));
    assert!(!p.header_digest && !p.data_digest && !p.rdma_extensions);
    assert!(Limits::default().validate().is_ok());
}

#[test]
fn missing_initiator_name_is_missing_parameter() {
    let mut n = Negotiator::new(Limits::default(), Transport::Tcp);
    let e = op(&mut n, &[("TargetName", TARGET)]).expect_err("no InitiatorName");
    assert_eq!(e, NegotiationError::MissingParameter("InitiatorName"));
    assert_eq!(e.login_status(), LoginStatus::MISSING_PARAMETER);
}

#[test]
fn missing_target_name_in_normal_session() {
    let mut n = Negotiator::new(Limits::default(), Transport::Tcp);
    let e = op(&mut n, &[("InitiatorName", INITIATOR)]).expect_err("no TargetName");
    assert_eq!(e.login_status(), LoginStatus::MISSING_PARAMETER);
}

#[test]
fn invalid_names_and_session_type() {
    let mut n = Negotiator::new(Limits::default(), Transport::Tcp);
    let e = op(
        &mut n,
        &[("InitiatorName", "not a name"), ("TargetName", TARGET)],
    )
    .expect_err("bad name");
    assert_eq!(e.login_status(), LoginStatus::INITIATOR_ERROR);
    let mut n = Negotiator::new(Limits::default(), Transport::Tcp);
    let e = op(
        &mut n,
        &[("InitiatorName", INITIATOR), ("SessionType", "Bogus")],
    )
    .expect_err("bad type");
    assert_eq!(e.login_status(), LoginStatus::INITIATOR_ERROR);
}

#[test]
fn minimum_keys() {
    let mut n = normal();
    let a = op(
        &mut n,
        &[
            ("MaxBurstLength", "16776192"),
            ("MaxConnections", "8"),
            ("MaxOutstandingR2T", "4"),
            ("DefaultTime2Retain", "0"),
            ("ErrorRecoveryLevel", "2"),
        ],
    )
    .expect("min keys");
    assert_eq!(
        a,
        kv(&[
            ("MaxBurstLength", "1048576"),
            ("MaxConnections", "1"),
            ("MaxOutstandingR2T", "4"),
            ("DefaultTime2Retain", "0"),
            ("ErrorRecoveryLevel", "0"),
        ])
    );
    let p = n.params();
    assert_eq!(p.max_burst_length, 1_048_576);
    assert_eq!(p.max_outstanding_r2t, 4);
    assert_eq!(p.default_time2retain, 0);
    assert_eq!(p.error_recovery_level, 0);
}

#[test]
fn maximum_key() {
    let mut n = normal_with(
        Limits {
            default_time2wait: 5,
            ..Limits::default()
        },
        Transport::Tcp,
    );
    let a = op(&mut n, &[("DefaultTime2Wait", "0")]).expect("max");
    assert_eq!(a, kv(&[("DefaultTime2Wait", "5")]));
    let mut n = normal();
    let a = op(&mut n, &[("DefaultTime2Wait", "0x10")]).expect("hex");
    assert_eq!(a, kv(&[("DefaultTime2Wait", "16")]));
    assert_eq!(n.params().default_time2wait, 16);
}

#[test]
fn boolean_or_keys() {
    // We say InitialR2T=Yes by default: OR gives Yes whatever the offer.
    let mut n = normal();
    let a = op(&mut n, &[("InitialR2T", "No"), ("DataPDUInOrder", "No")]).expect("or");
    assert_eq!(a, kv(&[("InitialR2T", "Yes"), ("DataPDUInOrder", "Yes")]));
    assert!(n.params().initial_r2t);
    // Configured to permit unsolicited data: both No gives No.
    let mut n = normal_with(
        Limits {
            initial_r2t: false,
            ..Limits::default()
        },
        Transport::Tcp,
    );
    let a = op(&mut n, &[("InitialR2T", "No")]).expect("or");
    assert_eq!(a, kv(&[("InitialR2T", "No")]));
    assert!(!n.params().initial_r2t);
}

#[test]
fn boolean_and_keys() {
    let mut n = normal();
    let a = op(&mut n, &[("ImmediateData", "No")]).expect("and");
    assert_eq!(a, kv(&[("ImmediateData", "No")]));
    assert!(!n.params().immediate_data);
    let mut n = normal_with(
        Limits {
            immediate_data: false,
            ..Limits::default()
        },
        Transport::Tcp,
    );
    let a = op(&mut n, &[("ImmediateData", "Yes")]).expect("and");
    assert_eq!(a, kv(&[("ImmediateData", "No")]));
}

#[test]
fn invalid_boolean_is_initiator_error() {
    let mut n = normal();
    let e = op(&mut n, &[("InitialR2T", "yes")]).expect_err("case matters");
    assert_eq!(e.login_status(), LoginStatus::INITIATOR_ERROR);
}

#[test]
fn list_keys() {
    let mut n = normal_with(
        Limits {
            header_digest: vec![Digest::CRC32C, Digest::None],
            ..Limits::default()
        },
        Transport::Tcp,
    );
    let a = op(
        &mut n,
        &[
            ("HeaderDigest", "CRC32C,None"),
            ("DataDigest", "CRC32C,None"),
            ("TaskReporting", "FastAbort,RFC3720"),
        ],
    )
    .expect("lists");
    assert_eq!(
        a,
        kv(&[
            ("HeaderDigest", "CRC32C"),
            ("DataDigest", "None"),
            ("TaskReporting", "RFC3720"),
        ])
    );
    assert!(n.params().header_digest);
    assert!(!n.params().data_digest);
}

#[test]
fn list_with_nothing_supported_is_rejected() {
    let mut n = normal();
    let a = op(
        &mut n,
        &[("HeaderDigest", "Y-Fancy"), ("TaskReporting", "FastAbort")],
    )
    .expect("reject");
    assert_eq!(
        a,
        kv(&[("HeaderDigest", "Reject"), ("TaskReporting", "Reject")])
    );
    // A required digest with no common value fails the login.
    let mut n = normal_with(
        Limits {
            data_digest: vec![Digest::CRC32C],
            ..Limits::default()
        },
        Transport::Tcp,
    );
    let e = op(&mut n, &[("DataDigest", "None")]).expect_err("required");
    assert_eq!(e.login_status(), LoginStatus::INITIATOR_ERROR);
}

#[test]
fn declarative_keys_get_no_answer() {
    let mut n = normal();
    let a = op(
        &mut n,
        &[
            ("MaxRecvDataSegmentLength", "65536"),
            ("InitiatorAlias", "client host"),
        ],
    )
    .expect("declarative");
    assert!(a.is_empty(), "{a:?}");
    assert_eq!(n.params().initiator_max_recv_dsl, 65_536);
    assert_eq!(n.params().initiator_alias.as_deref(), Some("client host"));
}

#[test]
fn target_declares_its_mrdsl_once() {
    let mut n = normal();
    op(&mut n, &[("MaxRecvDataSegmentLength", "65536")]).expect("op");
    assert_eq!(n.params().target_max_recv_dsl, 8192, "not yet declared");
    let d = n.pending_declarations();
    assert_eq!(d, kv(&[("MaxRecvDataSegmentLength", "262144")]));
    assert_eq!(n.params().target_max_recv_dsl, 262_144);
    assert!(!n.awaiting_answers());
    assert!(n.pending_declarations().is_empty(), "sent once");
}

#[test]
fn unknown_and_private_keys_not_understood() {
    let mut n = normal();
    let a = op(
        &mut n,
        &[
            ("X-com.example.Foo", "1"),
            ("X#NodeArchitecture", "Linux"),
            ("FutureKey", "Yes"),
        ],
    )
    .expect("unknown");
    assert_eq!(
        a,
        kv(&[
            ("X-com.example.Foo", "NotUnderstood"),
            ("X#NodeArchitecture", "NotUnderstood"),
            ("FutureKey", "NotUnderstood"),
        ])
    );
}

#[test]
fn discovery_session_irrelevant_keys() {
    let mut n = discovery();
    assert_eq!(n.params().session_type, SessionType::Discovery);
    let a = op(
        &mut n,
        &[
            ("MaxBurstLength", "4096"),
            ("FirstBurstLength", "4096"),
            ("MaxConnections", "2"),
            ("InitialR2T", "No"),
            ("ImmediateData", "No"),
            ("MaxOutstandingR2T", "2"),
            ("DataPDUInOrder", "No"),
            ("DataSequenceInOrder", "No"),
            // Relevant in discovery sessions.
            ("DefaultTime2Wait", "3"),
            ("DefaultTime2Retain", "10"),
            ("ErrorRecoveryLevel", "0"),
            ("HeaderDigest", "None"),
        ],
    )
    .expect("discovery");
    for k in [
        "MaxBurstLength",
        "FirstBurstLength",
        "MaxConnections",
        "InitialR2T",
        "ImmediateData",
        "MaxOutstandingR2T",
        "DataPDUInOrder",
        "DataSequenceInOrder",
    ] {
        assert_eq!(get(&a, k), Some("Irrelevant"), "{k}");
    }
    assert_eq!(get(&a, "DefaultTime2Wait"), Some("3"));
    assert_eq!(get(&a, "DefaultTime2Retain"), Some("10"));
    assert_eq!(get(&a, "ErrorRecoveryLevel"), Some("0"));
    assert_eq!(get(&a, "HeaderDigest"), Some("None"));
    assert_eq!(n.params().max_burst_length, 262_144, "unchanged");
}

#[test]
fn out_of_range_values_are_rejected() {
    for (k, v) in [
        ("MaxBurstLength", "511"),
        ("MaxBurstLength", "16777216"),
        ("FirstBurstLength", "0"),
        ("MaxConnections", "0"),
        ("MaxOutstandingR2T", "65536"),
        ("DefaultTime2Wait", "3601"),
        ("DefaultTime2Retain", "3601"),
        ("ErrorRecoveryLevel", "3"),
        ("MaxRecvDataSegmentLength", "511"),
        ("MaxRecvDataSegmentLength", "16777216"),
        ("iSCSIProtocolLevel", "32"),
    ] {
        let mut n = normal();
        let e = op(&mut n, &[(k, v)]).expect_err(k);
        assert!(
            matches!(e, NegotiationError::OutOfRange { .. }),
            "{k}={v}: {e:?}"
        );
        assert_eq!(e.login_status(), LoginStatus::INITIATOR_ERROR);
    }
    let mut n = normal();
    let e = op(&mut n, &[("MaxBurstLength", "lots")]).expect_err("not a number");
    assert_eq!(e.login_status(), LoginStatus::INITIATOR_ERROR);
}

#[test]
fn duplicate_keys_are_rejected() {
    let mut n = normal();
    let e = op(
        &mut n,
        &[("MaxBurstLength", "4096"), ("MaxBurstLength", "8192")],
    )
    .expect_err("same request");
    assert_eq!(e, NegotiationError::DuplicateKey("MaxBurstLength".into()));
    let mut n = normal();
    op(&mut n, &[("MaxBurstLength", "4096")]).expect("first");
    let e = op(&mut n, &[("MaxBurstLength", "8192")]).expect_err("later request");
    assert_eq!(e.login_status(), LoginStatus::INITIATOR_ERROR);
    // InitiatorName may not be declared with another value.
    let mut n = normal();
    let e = op(&mut n, &[("InitiatorName", "iqn.1994-05.com.redhat:other")])
        .expect_err("redeclared with another name");
    assert_eq!(e, NegotiationError::DuplicateKey("InitiatorName".into()));
    assert_eq!(e.login_status(), LoginStatus::INITIATOR_ERROR);
    // Twice in one request, even with the same value, is still an error.
    let mut n = normal();
    let e =
        op(&mut n, &[("TargetName", TARGET), ("TargetName", TARGET)]).expect_err("same request");
    assert_eq!(e, NegotiationError::DuplicateKey("TargetName".into()));
}

/// What libiscsi sends after a security stage that ended at once (it
/// offered AuthMethod=CHAP,None to a target that needs no CHAP): the
/// leading declaratives again, unchanged, with its operational keys.
#[test]
fn identical_redeclaration_after_the_security_stage_is_accepted() {
    let mut n = normal();
    let a = op(
        &mut n,
        &[
            ("InitiatorName", INITIATOR),
            ("TargetName", TARGET),
            ("SessionType", "Normal"),
            ("MaxBurstLength", "65536"),
        ],
    )
    .expect("identical redeclaration");
    assert_eq!(get(&a, "MaxBurstLength"), Some("65536"));
    assert_eq!(a.len(), 1, "declaratives get no answer: {a:?}");
    assert_eq!(n.params().initiator_name.as_deref(), Some(INITIATOR));
    assert_eq!(n.params().target_name.as_deref(), Some(TARGET));
    assert_eq!(n.params().session_type, SessionType::Normal);
    // And once more in a further request.
    op(&mut n, &[("InitiatorName", INITIATOR)]).expect("again");

    // A changed value is an error, for each of them.
    for (key, other) in [
        ("InitiatorName", "iqn.1994-05.com.redhat:someone-else"),
        ("TargetName", "iqn.2024-01.org.rustgt:disk2"),
        ("SessionType", "Discovery"),
    ] {
        let mut n = normal();
        let e = op(&mut n, &[(key, other)]).expect_err(key);
        assert_eq!(e, NegotiationError::DuplicateKey(key.into()), "{key}");
        assert_eq!(e.login_status(), LoginStatus::INITIATOR_ERROR);
    }
    // Case counts: iSCSI names compare case-insensitively, but an
    // initiator that re-sends its declarations sends the same bytes.
    let mut n = normal();
    op(&mut n, &[("TargetName", &TARGET.to_ascii_uppercase())]).expect_err("changed spelling");
    // Operational keys are never repeatable.
    let mut n = normal();
    op(&mut n, &[("MaxBurstLength", "65536")]).expect("first");
    let e = op(&mut n, &[("MaxBurstLength", "65536")]).expect_err("repeated operational key");
    assert_eq!(e, NegotiationError::DuplicateKey("MaxBurstLength".into()));
}

#[test]
fn first_burst_never_exceeds_max_burst() {
    let mut n = normal_with(
        Limits {
            first_burst_length: 1_048_576,
            ..Limits::default()
        },
        Transport::Tcp,
    );
    let a = op(
        &mut n,
        &[("FirstBurstLength", "262144"), ("MaxBurstLength", "131072")],
    );
    // The initiator's own FirstBurstLength exceeds its MaxBurstLength.
    assert!(matches!(
        a,
        Err(NegotiationError::FirstBurstExceedsMaxBurst { .. })
    ));

    // Our MaxBurstLength limit caps FirstBurstLength even when listed first.
    let mut n = normal_with(
        Limits {
            max_burst_length: 65_536,
            first_burst_length: 1_048_576,
            ..Limits::default()
        },
        Transport::Tcp,
    );
    let a = op(
        &mut n,
        &[
            ("ImmediateData", "Yes"),
            ("FirstBurstLength", "262144"),
            ("MaxBurstLength", "262144"),
        ],
    )
    .expect("capped");
    assert_eq!(get(&a, "MaxBurstLength"), Some("65536"));
    assert_eq!(get(&a, "FirstBurstLength"), Some("65536"));
    let p = n.params();
    assert!(p.first_burst_length <= p.max_burst_length);
}

#[test]
fn small_max_burst_without_first_burst_gets_an_offer() {
    let mut n = normal();
    op(&mut n, &[("MaxBurstLength", "16384")]).expect("mbl");
    assert_eq!(n.params().first_burst_length, 65_536, "default, too big");
    let d = n.pending_declarations();
    assert_eq!(get(&d, "FirstBurstLength"), Some("16384"));
    assert!(n.awaiting_answers());
    let a = op(&mut n, &[("FirstBurstLength", "8192")]).expect("answer");
    assert!(a.is_empty(), "answers are not answered: {a:?}");
    assert!(!n.awaiting_answers());
    assert_eq!(n.params().first_burst_length, 8192);
}

#[test]
fn first_burst_irrelevant_without_unsolicited_data() {
    let mut n = normal();
    let a = op(
        &mut n,
        &[
            ("FirstBurstLength", "65536"),
            ("InitialR2T", "Yes"),
            ("ImmediateData", "No"),
        ],
    )
    .expect("irrelevant");
    assert_eq!(get(&a, "FirstBurstLength"), Some("Irrelevant"));
}

#[test]
fn target_offers_when_defaults_exceed_limits() {
    let mut n = normal_with(
        Limits {
            max_burst_length: 131_072,
            first_burst_length: 32_768,
            immediate_data: false,
            default_time2retain: 5,
            header_digest: vec![Digest::CRC32C],
            ..Limits::default()
        },
        Transport::Tcp,
    );
    // Initiator offers nothing relevant.
    op(&mut n, &[("MaxRecvDataSegmentLength", "8192")]).expect("op");
    let d = n.pending_declarations();
    assert_eq!(get(&d, "MaxRecvDataSegmentLength"), Some("262144"));
    assert_eq!(get(&d, "ImmediateData"), Some("No"));
    assert_eq!(get(&d, "MaxBurstLength"), Some("131072"));
    // InitialR2T=Yes and ImmediateData=No: no unsolicited data at all.
    assert_eq!(get(&d, "FirstBurstLength"), None);
    assert_eq!(get(&d, "DefaultTime2Retain"), Some("5"));
    assert_eq!(get(&d, "HeaderDigest"), Some("CRC32C"));
    assert_eq!(get(&d, "DataDigest"), None, "None is acceptable");
    assert!(!n.params().immediate_data, "AND with No needs no answer");
    assert!(n.awaiting_answers());
    let a = op(
        &mut n,
        &[
            ("MaxBurstLength", "65536"),
            ("DefaultTime2Retain", "5"),
            ("HeaderDigest", "CRC32C"),
        ],
    )
    .expect("answers");
    assert!(a.is_empty());
    assert!(!n.awaiting_answers());
    let p = n.params();
    assert_eq!(p.max_burst_length, 65_536);
    assert_eq!(p.default_time2retain, 5);
    assert!(p.header_digest);
}

#[test]
fn answers_to_offers_must_respect_the_result_function() {
    let limits = Limits {
        max_burst_length: 131_072,
        first_burst_length: 65_536,
        ..Limits::default()
    };
    let mut n = normal_with(limits.clone(), Transport::Tcp);
    op(&mut n, &[("FirstBurstLength", "65536")]).expect("op");
    n.pending_declarations();
    let e = op(&mut n, &[("MaxBurstLength", "262144")]).expect_err("above our offer");
    assert!(matches!(e, NegotiationError::OfferRefused { .. }));
    // Reject to an offer whose default we cannot live with fails too.
    let mut n = normal_with(limits, Transport::Tcp);
    op(&mut n, &[("FirstBurstLength", "65536")]).expect("op");
    n.pending_declarations();
    let e = op(&mut n, &[("MaxBurstLength", "Reject")]).expect_err("refused");
    assert_eq!(e.login_status(), LoginStatus::INITIATOR_ERROR);
}

#[test]
fn special_values_answer_declarations() {
    let mut n = normal();
    n.pending_declarations();
    // An initiator "answering" our declaration: accepted, nothing said.
    let a = op(&mut n, &[("MaxRecvDataSegmentLength", "NotUnderstood")]).expect("ok");
    assert!(a.is_empty());
    let a = op(&mut n, &[("SomethingElse", "Irrelevant")]).expect("ok");
    assert!(a.is_empty());
}

#[test]
fn obsolete_marker_keys() {
    let mut n = normal();
    let a = op(
        &mut n,
        &[
            ("IFMarker", "No"),
            ("OFMarker", "No"),
            ("IFMarkInt", "2048~8192"),
            ("OFMarkInt", "2048~8192"),
        ],
    )
    .expect("markers");
    assert_eq!(
        a,
        kv(&[
            ("IFMarker", "Reject"),
            ("OFMarker", "Reject"),
            ("IFMarkInt", "Reject"),
            ("OFMarkInt", "Reject"),
        ])
    );
}

#[test]
fn protocol_level_is_minimum_with_one() {
    let mut n = normal();
    let a = op(&mut n, &[("iSCSIProtocolLevel", "2")]).expect("level");
    assert_eq!(a, kv(&[("iSCSIProtocolLevel", "1")]));
}

#[test]
fn security_keys_at_operational_stage_are_errors() {
    let mut n = normal();
    let e = op(&mut n, &[("AuthMethod", "None")]).expect_err("AuthMethod");
    assert_eq!(e.login_status(), LoginStatus::INITIATOR_ERROR);
    let mut n = normal();
    let e = op(&mut n, &[("CHAP_A", "5")]).expect_err("CHAP_A");
    assert!(matches!(
        e,
        NegotiationError::SecurityKeyOutsideSecurityStage(_)
    ));
}

#[test]
fn operational_keys_at_security_stage_are_errors() {
    let mut n = normal();
    let e = n
        .process(Stage::SECURITY, &kv(&[("MaxBurstLength", "4096")]))
        .expect_err("too early");
    assert!(matches!(e, NegotiationError::NotAllowedInStage { .. }));
    // Security keys are left to the security negotiator.
    let a = n
        .process(Stage::SECURITY, &kv(&[("CHAP_A", "5"), ("CHAP_A", "7")]))
        .expect("skipped");
    assert!(a.is_empty());
}

#[test]
fn target_only_and_ffp_only_keys_are_errors() {
    let mut n = normal();
    let e = op(&mut n, &[("TargetAlias", "x")]).expect_err("target key");
    assert_eq!(e, NegotiationError::TargetOnlyKey("TargetAlias".into()));
    let mut n = normal();
    let e = op(&mut n, &[("SendTargets", "All")]).expect_err("FFP only");
    assert_eq!(e.login_status(), LoginStatus::INITIATOR_ERROR);
}

#[test]
fn session_type_only_in_first_request() {
    let mut n = normal();
    let e = op(&mut n, &[("SessionType", "Discovery")]).expect_err("late");
    assert_eq!(e.login_status(), LoginStatus::INITIATOR_ERROR);
}

#[test]
fn leading_only_keys_refused_on_additional_connection() {
    let mut lead = normal();
    op(&mut lead, &[("MaxBurstLength", "65536")]).expect("lead");
    let mut n = Negotiator::new_non_leading(Limits::default(), Transport::Tcp, lead.params());
    let a = op(
        &mut n,
        &[
            ("InitiatorName", INITIATOR),
            ("TargetName", TARGET),
            ("SessionType", "Normal"),
            ("HeaderDigest", "None"),
            ("MaxRecvDataSegmentLength", "16384"),
        ],
    )
    .expect("connection keys");
    assert_eq!(a, kv(&[("HeaderDigest", "None")]));
    assert_eq!(n.params().max_burst_length, 65_536, "inherited");
    assert_eq!(n.params().initiator_max_recv_dsl, 16_384);
    let e = op(&mut n, &[("MaxBurstLength", "4096")]).expect_err("session-wide");
    assert_eq!(e, NegotiationError::LeadingOnlyKey("MaxBurstLength".into()));
    assert_eq!(e.login_status(), LoginStatus::INITIATOR_ERROR);
}

#[test]
fn iser_digests_forced_none_and_rdma_extensions() {
    let mut n = normal_with(
        Limits {
            header_digest: vec![Digest::CRC32C],
            data_digest: vec![Digest::CRC32C],
            target_recv_data_segment_length: 65_536,
            ..Limits::default()
        },
        Transport::Iser,
    );
    let a = op(
        &mut n,
        &[
            ("RDMAExtensions", "Yes"),
            ("HeaderDigest", "CRC32C,None"),
            ("DataDigest", "CRC32C"),
            ("InitiatorRecvDataSegmentLength", "131072"),
            ("MaxOutstandingUnexpectedPDUs", "4"),
            ("IFMarker", "No"),
        ],
    )
    .expect("iser");
    assert_eq!(
        a,
        kv(&[
            ("RDMAExtensions", "Yes"),
            ("HeaderDigest", "None"),
            ("DataDigest", "Reject"),
            ("IFMarker", "No"),
        ])
    );
    let p = n.params();
    assert!(p.rdma_extensions);
    assert!(!p.header_digest && !p.data_digest);
    assert_eq!(p.initiator_recv_dsl, 131_072);
    assert_eq!(p.max_outstanding_unexpected_pdus, 4);
    let d = n.pending_declarations();
    assert_eq!(
        d,
        kv(&[
            ("TargetRecvDataSegmentLength", "65536"),
            ("MaxOutstandingUnexpectedPDUs", "0"),
        ])
    );
    assert_eq!(n.params().target_recv_dsl, 65_536);
    assert!(!n.awaiting_answers());
}

#[test]
fn iser_requires_rdma_extensions() {
    let mut n = normal_with(Limits::default(), Transport::Iser);
    let e = op(&mut n, &[("RDMAExtensions", "No")]).expect_err("required");
    assert_eq!(e, NegotiationError::RdmaExtensionsRequired);
    // Not offered by the initiator: the target offers it and waits.
    let mut n = normal_with(Limits::default(), Transport::Iser);
    let d = n.pending_declarations();
    assert_eq!(get(&d, "RDMAExtensions"), Some("Yes"));
    assert!(n.awaiting_answers());
    op(&mut n, &[("RDMAExtensions", "Yes")]).expect("answer");
    assert!(n.params().rdma_extensions);
    assert!(!n.awaiting_answers());
}

#[test]
fn iser_keys_on_tcp() {
    let mut n = normal();
    let a = op(
        &mut n,
        &[
            ("RDMAExtensions", "Yes"),
            ("TargetRecvDataSegmentLength", "8192"),
            ("InitiatorRecvDataSegmentLength", "8192"),
            ("MaxOutstandingUnexpectedPDUs", "0"),
        ],
    )
    .expect("tcp");
    assert_eq!(
        a,
        kv(&[
            ("RDMAExtensions", "No"),
            ("TargetRecvDataSegmentLength", "Irrelevant"),
            ("InitiatorRecvDataSegmentLength", "Irrelevant"),
            ("MaxOutstandingUnexpectedPDUs", "Irrelevant"),
        ])
    );
    assert!(!n.params().rdma_extensions);
}

#[test]
fn full_feature_text_negotiation() {
    let mut n = normal();
    op(&mut n, &[("MaxRecvDataSegmentLength", "8192")]).expect("login");
    let a = n
        .process(
            Stage::FULL_FEATURE,
            &kv(&[
                ("MaxRecvDataSegmentLength", "32768"),
                ("SendTargets", "All"),
                ("MaxBurstLength", "4096"),
                ("X-vendor", "1"),
            ]),
        )
        .expect("text");
    assert_eq!(
        a,
        kv(&[("MaxBurstLength", "Reject"), ("X-vendor", "NotUnderstood")])
    );
    assert_eq!(n.params().initiator_max_recv_dsl, 32_768);
    assert_eq!(n.params().max_burst_length, 262_144);
}

#[test]
fn answers_follow_offer_order() {
    let mut n = normal();
    let a = op(
        &mut n,
        &[
            ("FirstBurstLength", "65536"),
            ("MaxBurstLength", "262144"),
            ("InitialR2T", "Yes"),
        ],
    )
    .expect("order");
    let keys: Vec<&str> = a.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["FirstBurstLength", "MaxBurstLength", "InitialR2T"]);
}

#[test]
fn open_iscsi_like_login() {
    let mut n = normal();
    let a = op(
        &mut n,
        &[
            ("HeaderDigest", "None"),
            ("DataDigest", "None"),
            ("DefaultTime2Wait", "2"),
            ("DefaultTime2Retain", "0"),
            ("IFMarker", "No"),
            ("OFMarker", "No"),
            ("ErrorRecoveryLevel", "0"),
            ("InitialR2T", "No"),
            ("ImmediateData", "Yes"),
            ("MaxBurstLength", "16776192"),
            ("FirstBurstLength", "262144"),
            ("MaxOutstandingR2T", "1"),
            ("MaxConnections", "1"),
            ("DataPDUInOrder", "Yes"),
            ("DataSequenceInOrder", "Yes"),
            ("MaxRecvDataSegmentLength", "262144"),
        ],
    )
    .expect("login");
    assert_eq!(a.len(), 15, "all but the declaration answered: {a:?}");
    let d = n.pending_declarations();
    assert_eq!(d, kv(&[("MaxRecvDataSegmentLength", "262144")]));
    assert!(!n.awaiting_answers());
    let p = n.params();
    assert_eq!(p.max_burst_length, 1_048_576);
    assert_eq!(p.first_burst_length, 262_144);
    assert_eq!(p.default_time2retain, 0);
    assert!(p.initial_r2t && p.immediate_data);
    assert_eq!(p.initiator_max_recv_dsl, 262_144);
    assert_eq!(p.target_max_recv_dsl, 262_144);
}

fn key_strategy() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("HeaderDigest".to_owned()),
        Just("DataDigest".to_owned()),
        Just("MaxConnections".to_owned()),
        Just("SendTargets".to_owned()),
        Just("TargetName".to_owned()),
        Just("InitiatorName".to_owned()),
        Just("TargetAlias".to_owned()),
        Just("InitiatorAlias".to_owned()),
        Just("InitialR2T".to_owned()),
        Just("ImmediateData".to_owned()),
        Just("MaxRecvDataSegmentLength".to_owned()),
        Just("MaxBurstLength".to_owned()),
        Just("FirstBurstLength".to_owned()),
        Just("DefaultTime2Wait".to_owned()),
        Just("DefaultTime2Retain".to_owned()),
        Just("MaxOutstandingR2T".to_owned()),
        Just("DataPDUInOrder".to_owned()),
        Just("DataSequenceInOrder".to_owned()),
        Just("ErrorRecoveryLevel".to_owned()),
        Just("SessionType".to_owned()),
        Just("TaskReporting".to_owned()),
        Just("iSCSIProtocolLevel".to_owned()),
        Just("IFMarker".to_owned()),
        Just("OFMarkInt".to_owned()),
        Just("RDMAExtensions".to_owned()),
        Just("TargetRecvDataSegmentLength".to_owned()),
        Just("InitiatorRecvDataSegmentLength".to_owned()),
        Just("MaxOutstandingUnexpectedPDUs".to_owned()),
        Just("AuthMethod".to_owned()),
        Just("CHAP_A".to_owned()),
        "[A-Za-z0-9.#_-]{1,12}",
    ]
}

fn value_strategy() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("Yes".to_owned()),
        Just("No".to_owned()),
        Just("None".to_owned()),
        Just("CRC32C,None".to_owned()),
        Just("Reject".to_owned()),
        Just("Irrelevant".to_owned()),
        Just("NotUnderstood".to_owned()),
        Just("Normal".to_owned()),
        Just("Discovery".to_owned()),
        Just("iqn.2000-01.x:y".to_owned()),
        (0u64..20_000_000).prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| format!("0x{n:x}")),
        "\\PC{0,20}",
    ]
}

fn pairs_strategy() -> impl Strategy<Value = KeyValues> {
    proptest::collection::vec((key_strategy(), value_strategy()), 0..12)
}

fn stage_strategy() -> impl Strategy<Value = Stage> {
    prop_oneof![
        Just(Stage::SECURITY),
        Just(Stage::OPERATIONAL),
        Just(Stage::FULL_FEATURE),
        any::<u8>().prop_map(Stage),
    ]
}

proptest! {
    #[test]
    fn process_never_panics(
        iser in any::<bool>(),
        steps in proptest::collection::vec((stage_strategy(), pairs_strategy(), any::<bool>()), 1..5),
    ) {
        let transport = if iser { Transport::Iser } else { Transport::Tcp };
        let mut n = Negotiator::new(Limits::default(), transport);
        for (stage, pairs, declare) in steps {
            let _ = n.process(stage, &pairs);
            if declare {
                let _ = n.pending_declarations();
            }
        }
        let p = n.params();
        // Whatever happened, results stay within our limits.
        prop_assert!(p.max_burst_length <= 1_048_576);
        prop_assert!(p.max_outstanding_r2t <= 16);
        prop_assert!(p.max_connections <= 1);
        prop_assert!(p.error_recovery_level == 0);
    }

    #[test]
    fn successful_results_respect_limits(
        mbl in 512u32..=16_777_215,
        fbl in 512u32..=16_777_215,
        mor2t in 1u32..=65_535,
    ) {
        let mut n = normal();
        let r = op(&mut n, &[
            ("MaxBurstLength", &mbl.to_string()),
            ("FirstBurstLength", &fbl.to_string()),
            ("MaxOutstandingR2T", &mor2t.to_string()),
            ("ImmediateData", "Yes"),
        ]);
        if fbl > mbl {
            prop_assert!(r.is_err());
        } else {
            prop_assert!(r.is_ok());
            let p = n.params();
            prop_assert_eq!(p.max_burst_length, mbl.min(1_048_576));
            prop_assert!(p.first_burst_length <= p.max_burst_length);
            prop_assert!(p.first_burst_length <= 262_144);
            prop_assert_eq!(p.max_outstanding_r2t, mor2t.min(16));
        }
    }
}
