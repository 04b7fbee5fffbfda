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

/// What one operational request must bring.
enum Outcome {
    /// Accepted with exactly this answer.
    Answer(&'static [(&'static str, &'static str)]),
    /// Accepted; each key listed answered with the value given (other keys
    /// unchecked).
    Answers(&'static [(&'static str, &'static str)]),
    /// Refused with this login status.
    Refused(LoginStatus),
    /// Refused with exactly this error, and this login status when given.
    Error(NegotiationError, Option<LoginStatus>),
    /// Refused with an error `is` recognises, and this login status when
    /// given.
    ErrorKind(fn(&NegotiationError) -> bool, Option<LoginStatus>),
}

/// One operational request to a fresh negotiator, and what it must bring.
struct Case {
    name: &'static str,
    negotiator: fn() -> Negotiator,
    /// An earlier request that must be accepted (empty: none).
    before: &'static [(&'static str, &'static str)],
    request: &'static [(&'static str, &'static str)],
    outcome: Outcome,
    /// Further checks on the negotiated parameters (after an accepted
    /// request).
    then: fn(&SessionParams),
}

fn case(
    name: &'static str,
    negotiator: fn() -> Negotiator,
    request: &'static [(&'static str, &'static str)],
    outcome: Outcome,
) -> Case {
    Case {
        name,
        negotiator,
        before: &[],
        request,
        outcome,
        then: |_| {},
    }
}

impl Case {
    fn before(mut self, request: &'static [(&'static str, &'static str)]) -> Case {
        self.before = request;
        self
    }

    fn then(mut self, check: fn(&SessionParams)) -> Case {
        self.then = check;
        self
    }

    fn run(&self) {
        let name = self.name;
        let mut n = (self.negotiator)();
        if !self.before.is_empty() {
            op(&mut n, self.before).expect(name);
        }
        let r = op(&mut n, self.request);
        match &self.outcome {
            Outcome::Answer(want) => {
                let a = r.expect(name);
                assert_eq!(a, kv(want), "{name}");
            }
            Outcome::Answers(want) => {
                let a = r.expect(name);
                for (k, v) in *want {
                    assert_eq!(get(&a, k), Some(*v), "{name}: {k}");
                }
            }
            Outcome::Refused(status) => {
                let e = r.expect_err(name);
                assert_eq!(e.login_status(), *status, "{name}");
            }
            Outcome::Error(want, status) => {
                let e = r.expect_err(name);
                assert_eq!(&e, want, "{name}");
                if let Some(status) = status {
                    assert_eq!(e.login_status(), *status, "{name}");
                }
            }
            Outcome::ErrorKind(is, status) => {
                let e = r.expect_err(name);
                assert!(is(&e), "{name}: {e:?}");
                if let Some(status) = status {
                    assert_eq!(e.login_status(), *status, "{name}");
                }
            }
        }
        (self.then)(n.params());
    }
}

/// A negotiator that has seen no request yet.
fn fresh() -> Negotiator {
    Negotiator::new(Limits::default(), Transport::Tcp)
}

fn out_of_range(e: &NegotiationError) -> bool {
    matches!(e, NegotiationError::OutOfRange { .. })
}

fn cases() -> Vec<Case> {
    use LoginStatus as S;
    use NegotiationError as E;
    const INITIATOR_ERROR: Option<LoginStatus> = Some(S::INITIATOR_ERROR);
    vec![
        // Names and session type in the first request.
        case(
            "missing InitiatorName",
            fresh,
            &[("TargetName", TARGET)],
            Outcome::Error(
                E::MissingParameter("InitiatorName"),
                Some(S::MISSING_PARAMETER),
            ),
        ),
        case(
            "missing TargetName in a normal session",
            fresh,
            &[("InitiatorName", INITIATOR)],
            Outcome::Refused(S::MISSING_PARAMETER),
        ),
        case(
            "invalid InitiatorName",
            fresh,
            &[("InitiatorName", "not a name"), ("TargetName", TARGET)],
            Outcome::Refused(S::INITIATOR_ERROR),
        ),
        case(
            "invalid SessionType",
            fresh,
            &[("InitiatorName", INITIATOR), ("SessionType", "Bogus")],
            Outcome::Refused(S::INITIATOR_ERROR),
        ),
        // Minimum and maximum numerical keys.
        case(
            "minimum keys",
            normal,
            &[
                ("MaxBurstLength", "16776192"),
                ("MaxConnections", "8"),
                ("MaxOutstandingR2T", "4"),
                ("DefaultTime2Retain", "0"),
                ("ErrorRecoveryLevel", "2"),
            ],
            Outcome::Answer(&[
                ("MaxBurstLength", "1048576"),
                ("MaxConnections", "1"),
                ("MaxOutstandingR2T", "4"),
                ("DefaultTime2Retain", "0"),
                ("ErrorRecoveryLevel", "0"),
            ]),
        )
        .then(|p| {
            assert_eq!(p.max_burst_length, 1_048_576);
            assert_eq!(p.max_outstanding_r2t, 4);
            assert_eq!(p.default_time2retain, 0);
            assert_eq!(p.error_recovery_level, 0);
        }),
        case(
            "maximum key",
            || {
                normal_with(
                    Limits {
                        default_time2wait: 5,
                        ..Limits::default()
                    },
                    Transport::Tcp,
                )
            },
            &[("DefaultTime2Wait", "0")],
            Outcome::Answer(&[("DefaultTime2Wait", "5")]),
        ),
        case(
            "maximum key in hex",
            normal,
            &[("DefaultTime2Wait", "0x10")],
            Outcome::Answer(&[("DefaultTime2Wait", "16")]),
        )
        .then(|p| assert_eq!(p.default_time2wait, 16)),
        // Boolean keys. We say InitialR2T=Yes by default: OR gives Yes
        // whatever the offer.
        case(
            "boolean OR with our Yes",
            normal,
            &[("InitialR2T", "No"), ("DataPDUInOrder", "No")],
            Outcome::Answer(&[("InitialR2T", "Yes"), ("DataPDUInOrder", "Yes")]),
        )
        .then(|p| assert!(p.initial_r2t)),
        // Configured to permit unsolicited data: both No gives No.
        case(
            "boolean OR with our No",
            || {
                normal_with(
                    Limits {
                        initial_r2t: false,
                        ..Limits::default()
                    },
                    Transport::Tcp,
                )
            },
            &[("InitialR2T", "No")],
            Outcome::Answer(&[("InitialR2T", "No")]),
        )
        .then(|p| assert!(!p.initial_r2t)),
        case(
            "boolean AND with their No",
            normal,
            &[("ImmediateData", "No")],
            Outcome::Answer(&[("ImmediateData", "No")]),
        )
        .then(|p| assert!(!p.immediate_data)),
        case(
            "boolean AND with our No",
            || {
                normal_with(
                    Limits {
                        immediate_data: false,
                        ..Limits::default()
                    },
                    Transport::Tcp,
                )
            },
            &[("ImmediateData", "Yes")],
            Outcome::Answer(&[("ImmediateData", "No")]),
        ),
        case(
            "invalid boolean (case matters)",
            normal,
            &[("InitialR2T", "yes")],
            Outcome::Refused(S::INITIATOR_ERROR),
        ),
        // List keys.
        case(
            "list keys",
            || {
                normal_with(
                    Limits {
                        header_digest: vec![Digest::CRC32C, Digest::None],
                        ..Limits::default()
                    },
                    Transport::Tcp,
                )
            },
            &[
                ("HeaderDigest", "CRC32C,None"),
                ("DataDigest", "CRC32C,None"),
                ("TaskReporting", "FastAbort,RFC3720"),
            ],
            Outcome::Answer(&[
                ("HeaderDigest", "CRC32C"),
                ("DataDigest", "None"),
                ("TaskReporting", "RFC3720"),
            ]),
        )
        .then(|p| {
            assert!(p.header_digest);
            assert!(!p.data_digest);
        }),
        case(
            "list with nothing supported",
            normal,
            &[("HeaderDigest", "Y-Fancy"), ("TaskReporting", "FastAbort")],
            Outcome::Answer(&[("HeaderDigest", "Reject"), ("TaskReporting", "Reject")]),
        ),
        // A required digest with no common value fails the login.
        case(
            "required digest with no common value",
            || {
                normal_with(
                    Limits {
                        data_digest: vec![Digest::CRC32C],
                        ..Limits::default()
                    },
                    Transport::Tcp,
                )
            },
            &[("DataDigest", "None")],
            Outcome::Refused(S::INITIATOR_ERROR),
        ),
        // Declaratives, unknown keys.
        case(
            "declarative keys get no answer",
            normal,
            &[
                ("MaxRecvDataSegmentLength", "65536"),
                ("InitiatorAlias", "client host"),
            ],
            Outcome::Answer(&[]),
        )
        .then(|p| {
            assert_eq!(p.initiator_max_recv_dsl, 65_536);
            assert_eq!(p.initiator_alias.as_deref(), Some("client host"));
        }),
        case(
            "unknown and private keys not understood",
            normal,
            &[
                ("X-com.example.Foo", "1"),
                ("X#NodeArchitecture", "Linux"),
                ("FutureKey", "Yes"),
            ],
            Outcome::Answer(&[
                ("X-com.example.Foo", "NotUnderstood"),
                ("X#NodeArchitecture", "NotUnderstood"),
                ("FutureKey", "NotUnderstood"),
            ]),
        ),
        // Out-of-range values.
        case(
            "MaxBurstLength=511",
            normal,
            &[("MaxBurstLength", "511")],
            Outcome::ErrorKind(out_of_range, INITIATOR_ERROR),
        ),
        case(
            "MaxBurstLength=16777216",
            normal,
            &[("MaxBurstLength", "16777216")],
            Outcome::ErrorKind(out_of_range, INITIATOR_ERROR),
        ),
        case(
            "FirstBurstLength=0",
            normal,
            &[("FirstBurstLength", "0")],
            Outcome::ErrorKind(out_of_range, INITIATOR_ERROR),
        ),
        case(
            "MaxConnections=0",
            normal,
            &[("MaxConnections", "0")],
            Outcome::ErrorKind(out_of_range, INITIATOR_ERROR),
        ),
        case(
            "MaxOutstandingR2T=65536",
            normal,
            &[("MaxOutstandingR2T", "65536")],
            Outcome::ErrorKind(out_of_range, INITIATOR_ERROR),
        ),
        case(
            "DefaultTime2Wait=3601",
            normal,
            &[("DefaultTime2Wait", "3601")],
            Outcome::ErrorKind(out_of_range, INITIATOR_ERROR),
        ),
        case(
            "DefaultTime2Retain=3601",
            normal,
            &[("DefaultTime2Retain", "3601")],
            Outcome::ErrorKind(out_of_range, INITIATOR_ERROR),
        ),
        case(
            "ErrorRecoveryLevel=3",
            normal,
            &[("ErrorRecoveryLevel", "3")],
            Outcome::ErrorKind(out_of_range, INITIATOR_ERROR),
        ),
        case(
            "MaxRecvDataSegmentLength=511",
            normal,
            &[("MaxRecvDataSegmentLength", "511")],
            Outcome::ErrorKind(out_of_range, INITIATOR_ERROR),
        ),
        case(
            "MaxRecvDataSegmentLength=16777216",
            normal,
            &[("MaxRecvDataSegmentLength", "16777216")],
            Outcome::ErrorKind(out_of_range, INITIATOR_ERROR),
        ),
        case(
            "iSCSIProtocolLevel=32",
            normal,
            &[("iSCSIProtocolLevel", "32")],
            Outcome::ErrorKind(out_of_range, INITIATOR_ERROR),
        ),
        case(
            "MaxBurstLength not a number",
            normal,
            &[("MaxBurstLength", "lots")],
            Outcome::Refused(S::INITIATOR_ERROR),
        ),
        // Duplicate keys.
        case(
            "duplicate key in the same request",
            normal,
            &[("MaxBurstLength", "4096"), ("MaxBurstLength", "8192")],
            Outcome::Error(E::DuplicateKey("MaxBurstLength".into()), None),
        ),
        case(
            "duplicate key in a later request",
            normal,
            &[("MaxBurstLength", "8192")],
            Outcome::Refused(S::INITIATOR_ERROR),
        )
        .before(&[("MaxBurstLength", "4096")]),
        // InitiatorName may not be declared with another value.
        case(
            "InitiatorName redeclared with another name",
            normal,
            &[("InitiatorName", "iqn.1994-05.com.redhat:other")],
            Outcome::Error(E::DuplicateKey("InitiatorName".into()), INITIATOR_ERROR),
        ),
        // Twice in one request, even with the same value, is still an error.
        case(
            "TargetName twice in the same request",
            normal,
            &[("TargetName", TARGET), ("TargetName", TARGET)],
            Outcome::Error(E::DuplicateKey("TargetName".into()), None),
        ),
        // A changed value of a leading declarative is an error, for each
        // of them.
        case(
            "InitiatorName redeclared changed",
            normal,
            &[("InitiatorName", "iqn.1994-05.com.redhat:someone-else")],
            Outcome::Error(E::DuplicateKey("InitiatorName".into()), INITIATOR_ERROR),
        ),
        case(
            "TargetName redeclared changed",
            normal,
            &[("TargetName", "iqn.2024-01.org.rustgt:disk2")],
            Outcome::Error(E::DuplicateKey("TargetName".into()), INITIATOR_ERROR),
        ),
        case(
            "SessionType redeclared changed",
            normal,
            &[("SessionType", "Discovery")],
            Outcome::Error(E::DuplicateKey("SessionType".into()), INITIATOR_ERROR),
        ),
        // Operational keys are never repeatable.
        case(
            "operational key repeated with the same value",
            normal,
            &[("MaxBurstLength", "65536")],
            Outcome::Error(E::DuplicateKey("MaxBurstLength".into()), None),
        )
        .before(&[("MaxBurstLength", "65536")]),
        // FirstBurstLength never exceeds MaxBurstLength.
        case(
            "initiator's FirstBurstLength above its MaxBurstLength",
            || {
                normal_with(
                    Limits {
                        first_burst_length: 1_048_576,
                        ..Limits::default()
                    },
                    Transport::Tcp,
                )
            },
            &[("FirstBurstLength", "262144"), ("MaxBurstLength", "131072")],
            Outcome::ErrorKind(
                |e| matches!(e, NegotiationError::FirstBurstExceedsMaxBurst { .. }),
                None,
            ),
        ),
        // Our MaxBurstLength limit caps FirstBurstLength even when listed
        // first.
        case(
            "our MaxBurstLength caps FirstBurstLength",
            || {
                normal_with(
                    Limits {
                        max_burst_length: 65_536,
                        first_burst_length: 1_048_576,
                        ..Limits::default()
                    },
                    Transport::Tcp,
                )
            },
            &[
                ("ImmediateData", "Yes"),
                ("FirstBurstLength", "262144"),
                ("MaxBurstLength", "262144"),
            ],
            Outcome::Answers(&[("MaxBurstLength", "65536"), ("FirstBurstLength", "65536")]),
        )
        .then(|p| assert!(p.first_burst_length <= p.max_burst_length)),
        case(
            "FirstBurstLength irrelevant without unsolicited data",
            normal,
            &[
                ("FirstBurstLength", "65536"),
                ("InitialR2T", "Yes"),
                ("ImmediateData", "No"),
            ],
            Outcome::Answers(&[("FirstBurstLength", "Irrelevant")]),
        ),
        case(
            "obsolete marker keys",
            normal,
            &[
                ("IFMarker", "No"),
                ("OFMarker", "No"),
                ("IFMarkInt", "2048~8192"),
                ("OFMarkInt", "2048~8192"),
            ],
            Outcome::Answer(&[
                ("IFMarker", "Reject"),
                ("OFMarker", "Reject"),
                ("IFMarkInt", "Reject"),
                ("OFMarkInt", "Reject"),
            ]),
        ),
        case(
            "iSCSIProtocolLevel is the minimum with one",
            normal,
            &[("iSCSIProtocolLevel", "2")],
            Outcome::Answer(&[("iSCSIProtocolLevel", "1")]),
        ),
        // Keys out of their stage or phase.
        case(
            "AuthMethod at the operational stage",
            normal,
            &[("AuthMethod", "None")],
            Outcome::Refused(S::INITIATOR_ERROR),
        ),
        case(
            "CHAP_A at the operational stage",
            normal,
            &[("CHAP_A", "5")],
            Outcome::ErrorKind(
                |e| matches!(e, NegotiationError::SecurityKeyOutsideSecurityStage(_)),
                None,
            ),
        ),
        case(
            "target-only key",
            normal,
            &[("TargetAlias", "x")],
            Outcome::Error(E::TargetOnlyKey("TargetAlias".into()), None),
        ),
        case(
            "full-feature-only key",
            normal,
            &[("SendTargets", "All")],
            Outcome::Refused(S::INITIATOR_ERROR),
        ),
        case(
            "SessionType only in the first request",
            normal,
            &[("SessionType", "Discovery")],
            Outcome::Refused(S::INITIATOR_ERROR),
        ),
        // iSER keys.
        case(
            "iSER requires RDMAExtensions",
            || normal_with(Limits::default(), Transport::Iser),
            &[("RDMAExtensions", "No")],
            Outcome::Error(E::RdmaExtensionsRequired, None),
        ),
        case(
            "iSER keys on TCP",
            normal,
            &[
                ("RDMAExtensions", "Yes"),
                ("TargetRecvDataSegmentLength", "8192"),
                ("InitiatorRecvDataSegmentLength", "8192"),
                ("MaxOutstandingUnexpectedPDUs", "0"),
            ],
            Outcome::Answer(&[
                ("RDMAExtensions", "No"),
                ("TargetRecvDataSegmentLength", "Irrelevant"),
                ("InitiatorRecvDataSegmentLength", "Irrelevant"),
                ("MaxOutstandingUnexpectedPDUs", "Irrelevant"),
            ]),
        )
        .then(|p| assert!(!p.rdma_extensions)),
    ]
}

/// Every one-request rule of §6.2 and §13 in [`cases`]: runs them all, then
/// fails naming each case that failed (each failure's own message is
/// printed as it happens).
#[test]
fn one_request_rules() {
    let cases = cases();
    let failed: Vec<&str> = cases
        .iter()
        .filter(|c| std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| c.run())).is_err())
        .map(|c| c.name)
        .collect();
    assert!(failed.is_empty(), "failed cases: {failed:?}");
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

    // A changed value is an error, for each of them: see `cases`.

    // Case counts: iSCSI names compare case-insensitively, but an
    // initiator that re-sends its declarations sends the same bytes.
    let mut n = normal();
    op(&mut n, &[("TargetName", &TARGET.to_ascii_uppercase())]).expect_err("changed spelling");
    // Operational keys are never repeatable: see `cases`.
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
    // Refused when the initiator says No: see `cases`. Not offered by the
    // initiator: the target offers it and waits.
    let mut n = normal_with(Limits::default(), Transport::Iser);
    let d = n.pending_declarations();
    assert_eq!(get(&d, "RDMAExtensions"), Some("Yes"));
    assert!(n.awaiting_answers());
    op(&mut n, &[("RDMAExtensions", "Yes")]).expect("answer");
    assert!(n.params().rdma_extensions);
    assert!(!n.awaiting_answers());
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
