//! Operational parameter negotiation (RFC 7143 §6.2, §13; iSER keys from
//! RFC 7145 §6), from the target's side.
//!
//! Layer: sans-I/O, above [`crate::text`]. The login state machine feeds the
//! initiator's key=value pairs of each login request to
//! [`Negotiator::process`] and sends back the answers; before the response
//! that ends the operational stage it appends
//! [`Negotiator::pending_declarations`]. Security keys are left to
//! [`crate::chap::SecurityNegotiator`].
//!
//! Guarantees:
//! - never panics on peer input; every numerical value is range-checked;
//! - the negotiated [`SessionParams`] never exceed the configured [`Limits`]
//!   (the target offers its own value when an RFC default would);
//! - a key sent twice in one login phase is an error (§6.2), except that
//!   the declaratives that may ride along with the security stage
//!   (InitiatorName, TargetName, InitiatorAlias, SessionType) may come
//!   again in a later request with the same value (libiscsi does so).
//!
//! Result functions (§6.2.2, per key in §13):
//!
//! | key                           | kind        | result            | Irrelevant when   |
//! |-------------------------------|-------------|-------------------|-------------------|
//! | HeaderDigest, DataDigest      | list (IO)   | first supported   | iSER: always None |
//! | MaxConnections                | number (LO) | min, 1..65535     | Discovery         |
//! | InitialR2T                    | bool (LO)   | OR                | Discovery         |
//! | ImmediateData                 | bool (LO)   | AND               | Discovery         |
//! | MaxRecvDataSegmentLength      | declarative | 512..2^24-1       |                   |
//! | MaxBurstLength                | number (LO) | min, 512..2^24-1  | Discovery         |
//! | FirstBurstLength              | number (LO) | min, <= MaxBurst  | Discovery, R2T=Yes & Imm=No |
//! | DefaultTime2Wait              | number (LO) | max, 0..3600      |                   |
//! | DefaultTime2Retain            | number (LO) | min, 0..3600      |                   |
//! | MaxOutstandingR2T             | number (LO) | min, 1..65535     | Discovery         |
//! | DataPDUInOrder, DataSequenceInOrder | bool (LO) | OR          | Discovery         |
//! | ErrorRecoveryLevel            | number (LO) | min, 0..2         |                   |
//! | TaskReporting (§13.23)        | list (LO)   | RFC3720 only      | Discovery         |
//! | iSCSIProtocolLevel (RFC 7144) | number (LO) | min, 0..31 (we: 1)| Discovery         |
//! | IFMarker, OFMarker (§13.25)   | obsolete    | Reject (iSER: No) |                   |
//! | IFMarkInt, OFMarkInt          | obsolete    | Reject            |                   |
//! | RDMAExtensions (7145 §6.3)    | bool (LO)   | AND               | TCP: answer No    |
//! | Target/InitiatorRecvDataSegmentLength (7145 §6.4, 6.5) | declarative | 512..2^24-1 | TCP |
//! | MaxOutstandingUnexpectedPDUs (7145 §6.7) | declarative | 0 or 2..2^32-1 | TCP  |

use std::collections::{HashMap, HashSet};

use crate::chap::is_security_key;
use crate::pdu::{LoginStatus, Stage};
use crate::text::{parse_number, KeyValues};

/// Transport the connection runs over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Tcp,
    Iser,
}

/// SessionType (§13.21).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionType {
    Normal,
    Discovery,
}

/// HeaderDigest/DataDigest values (§13.1).
#[allow(clippy::upper_case_acronyms)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Digest {
    None,
    CRC32C,
}

impl Digest {
    pub fn as_str(self) -> &'static str {
        match self {
            Digest::None => "None",
            Digest::CRC32C => "CRC32C",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "None" => Some(Digest::None),
            "CRC32C" => Some(Digest::CRC32C),
            _ => None,
        }
    }
}

/// Valid range of the data segment length keys (§13.12, §13.13, §13.14).
const DSL_MIN: u32 = 512;
const DSL_MAX: u32 = 16_777_215;
/// The iSCSIProtocolLevel this implementation speaks (RFC 7143 is level 1).
const PROTOCOL_LEVEL: u64 = 1;
/// Longest iSCSI name (RFC 3722 §6: 223 bytes).
const MAX_ISCSI_NAME_LEN: usize = 223;

/// What the target accepts and offers.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest data segment the target accepts per PDU (declared to the
    /// initiator). 512..=16777215.
    pub max_recv_data_segment_length: u32,
    /// Largest burst accepted; the result is min(offer, this).
    pub max_burst_length: u32,
    /// Largest unsolicited burst accepted; clamped to `max_burst_length`.
    pub first_burst_length: u32,
    /// InitialR2T (OR): `false` lets the initiator send unsolicited Data-Out
    /// if it also says No.
    pub initial_r2t: bool,
    /// ImmediateData (AND).
    pub immediate_data: bool,
    /// Largest MaxOutstandingR2T accepted (min).
    pub max_outstanding_r2t: u32,
    /// Acceptable header digests, in preference order.
    pub header_digest: Vec<Digest>,
    /// Acceptable data digests, in preference order.
    pub data_digest: Vec<Digest>,
    /// DefaultTime2Wait (max).
    pub default_time2wait: u16,
    /// DefaultTime2Retain (min).
    pub default_time2retain: u16,
    /// MaxConnections (min).
    pub max_connections: u16,
    /// ErrorRecoveryLevel (min).
    pub error_recovery_level: u8,
    /// DataPDUInOrder (OR): `true` requires in-order data PDUs.
    pub data_pdu_in_order: bool,
    /// DataSequenceInOrder (OR): `true` requires in-order sequences.
    pub data_sequence_in_order: bool,
    /// iSER TargetRecvDataSegmentLength the target declares (RFC 7145 §6.4).
    pub target_recv_data_segment_length: u32,
    /// iSER MaxOutstandingUnexpectedPDUs the target declares (RFC 7145 §6.7;
    /// 0 = no limit).
    pub max_outstanding_unexpected_pdus: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_recv_data_segment_length: 262_144,
            max_burst_length: 1_048_576,
            first_burst_length: 262_144,
            initial_r2t: true,
            immediate_data: true,
            max_outstanding_r2t: 16,
            header_digest: vec![Digest::None],
            data_digest: vec![Digest::None],
            default_time2wait: 2,
            default_time2retain: 20,
            max_connections: 1,
            error_recovery_level: 0,
            data_pdu_in_order: true,
            data_sequence_in_order: true,
            target_recv_data_segment_length: 8192,
            max_outstanding_unexpected_pdus: 0,
        }
    }
}

impl Limits {
    /// Check the configuration against the RFC ranges (for the config
    /// loader; [`Negotiator::new`] clamps silently).
    pub fn validate(&self) -> Result<(), NegotiationError> {
        let bad = |what: &str| Err(NegotiationError::InvalidLimits(what.to_owned()));
        let dsl = DSL_MIN..=DSL_MAX;
        if !dsl.contains(&self.max_recv_data_segment_length) {
            return bad("MaxRecvDataSegmentLength out of 512..=16777215");
        }
        if !dsl.contains(&self.max_burst_length) {
            return bad("MaxBurstLength out of 512..=16777215");
        }
        if !dsl.contains(&self.first_burst_length) {
            return bad("FirstBurstLength out of 512..=16777215");
        }
        if self.first_burst_length > self.max_burst_length {
            return bad("FirstBurstLength exceeds MaxBurstLength");
        }
        if !(1..=65_535).contains(&self.max_outstanding_r2t) {
            return bad("MaxOutstandingR2T out of 1..=65535");
        }
        if self.header_digest.is_empty() || self.data_digest.is_empty() {
            return bad("empty digest list");
        }
        if self.default_time2wait > 3600 || self.default_time2retain > 3600 {
            return bad("DefaultTime2Wait/DefaultTime2Retain out of 0..=3600");
        }
        if self.max_connections == 0 {
            return bad("MaxConnections is 0");
        }
        if self.error_recovery_level > 2 {
            return bad("ErrorRecoveryLevel out of 0..=2");
        }
        if !dsl.contains(&self.target_recv_data_segment_length) {
            return bad("TargetRecvDataSegmentLength out of 512..=16777215");
        }
        if self.max_outstanding_unexpected_pdus == 1 {
            return bad("MaxOutstandingUnexpectedPDUs must be 0 or >= 2");
        }
        Ok(())
    }

    /// The same limits forced into the RFC ranges.
    fn clamped(mut self) -> Self {
        self.max_recv_data_segment_length =
            self.max_recv_data_segment_length.clamp(DSL_MIN, DSL_MAX);
        self.max_burst_length = self.max_burst_length.clamp(DSL_MIN, DSL_MAX);
        self.first_burst_length = self
            .first_burst_length
            .clamp(DSL_MIN, DSL_MAX)
            .min(self.max_burst_length);
        self.max_outstanding_r2t = self.max_outstanding_r2t.clamp(1, 65_535);
        if self.header_digest.is_empty() {
            self.header_digest.push(Digest::None);
        }
        if self.data_digest.is_empty() {
            self.data_digest.push(Digest::None);
        }
        self.default_time2wait = self.default_time2wait.min(3600);
        self.default_time2retain = self.default_time2retain.min(3600);
        self.max_connections = self.max_connections.max(1);
        self.error_recovery_level = self.error_recovery_level.min(2);
        self.target_recv_data_segment_length =
            self.target_recv_data_segment_length.clamp(DSL_MIN, DSL_MAX);
        if self.max_outstanding_unexpected_pdus == 1 {
            self.max_outstanding_unexpected_pdus = 2;
        }
        self
    }
}

/// The negotiated values; starts at the RFC defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionParams {
    pub session_type: SessionType,
    pub initiator_name: Option<String>,
    pub initiator_alias: Option<String>,
    pub target_name: Option<String>,
    pub header_digest: bool,
    pub data_digest: bool,
    pub max_connections: u16,
    pub initial_r2t: bool,
    pub immediate_data: bool,
    pub max_burst_length: u32,
    pub first_burst_length: u32,
    pub default_time2wait: u16,
    pub default_time2retain: u16,
    pub max_outstanding_r2t: u32,
    pub data_pdu_in_order: bool,
    pub data_sequence_in_order: bool,
    pub error_recovery_level: u8,
    /// The initiator's MaxRecvDataSegmentLength: the most the target may send
    /// per PDU.
    pub initiator_max_recv_dsl: u32,
    /// The MaxRecvDataSegmentLength the target declared: the most it accepts
    /// per PDU (8192 until declared).
    pub target_max_recv_dsl: u32,
    /// iSER-assisted mode agreed (RDMAExtensions=Yes).
    pub rdma_extensions: bool,
    /// iSER InitiatorRecvDataSegmentLength declared by the initiator.
    pub initiator_recv_dsl: u32,
    /// iSER TargetRecvDataSegmentLength in force.
    pub target_recv_dsl: u32,
    /// iSER MaxOutstandingUnexpectedPDUs declared by the initiator: how many
    /// unexpected PDUs the target may have outstanding towards it (0 = no
    /// limit).
    pub max_outstanding_unexpected_pdus: u32,
}

impl Default for SessionParams {
    fn default() -> Self {
        SessionParams {
            session_type: SessionType::Normal,
            initiator_name: None,
            initiator_alias: None,
            target_name: None,
            header_digest: false,
            data_digest: false,
            max_connections: 1,
            initial_r2t: true,
            immediate_data: true,
            max_burst_length: 262_144,
            first_burst_length: 65_536,
            default_time2wait: 2,
            default_time2retain: 20,
            max_outstanding_r2t: 1,
            data_pdu_in_order: true,
            data_sequence_in_order: true,
            error_recovery_level: 0,
            initiator_max_recv_dsl: 8192,
            target_max_recv_dsl: 8192,
            rdma_extensions: false,
            initiator_recv_dsl: 8192,
            target_recv_dsl: 8192,
            max_outstanding_unexpected_pdus: 0,
        }
    }
}

/// Why a negotiation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NegotiationError {
    #[error("key {0} sent more than once")]
    DuplicateKey(String),
    #[error("invalid value for {key}: {value:?}")]
    InvalidValue { key: String, value: String },
    #[error("{key}={value} is out of range")]
    OutOfRange { key: String, value: String },
    #[error("key {key} is not allowed in stage {stage:?}")]
    NotAllowedInStage { key: String, stage: Stage },
    #[error("security key {0} outside the security stage")]
    SecurityKeyOutsideSecurityStage(String),
    #[error("leading-only key {0} on a non-leading connection")]
    LeadingOnlyKey(String),
    #[error("key {0} may only be sent by a target")]
    TargetOnlyKey(String),
    #[error("{0} missing from the first login request")]
    MissingParameter(&'static str),
    #[error("FirstBurstLength {first} exceeds MaxBurstLength {max}")]
    FirstBurstExceedsMaxBurst { first: u32, max: u32 },
    #[error("no acceptable value offered for {0}")]
    NoAcceptableValue(String),
    #[error("initiator answered the target's {key} offer with {value:?}")]
    OfferRefused { key: String, value: String },
    #[error("RDMAExtensions=Yes is required on an iSER connection")]
    RdmaExtensionsRequired,
    #[error("invalid target limits: {0}")]
    InvalidLimits(String),
}

impl NegotiationError {
    /// Login response status for this failure (RFC 7143 §11.13.5).
    pub fn login_status(&self) -> LoginStatus {
        match self {
            NegotiationError::MissingParameter(_) => LoginStatus::MISSING_PARAMETER,
            NegotiationError::InvalidLimits(_) => LoginStatus::TARGET_ERROR,
            _ => LoginStatus::INITIATOR_ERROR,
        }
    }
}

/// "Use" column of §13: where a key may appear.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Usage {
    /// IO: login phase only.
    InitialOnly,
    /// LO: leading connection's login only.
    LeadingOnly,
    /// ALL: login and Text negotiation in full feature phase.
    All,
    /// FFPO: full feature phase only (SendTargets).
    FullFeatureOnly,
    /// Sent only by targets (TargetAlias, TargetAddress, TargetPortalGroupTag).
    TargetOnly,
}

/// The keys this target knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Key {
    HeaderDigest,
    DataDigest,
    MaxConnections,
    SendTargets,
    TargetName,
    InitiatorName,
    TargetAlias,
    InitiatorAlias,
    TargetAddress,
    TargetPortalGroupTag,
    InitialR2T,
    ImmediateData,
    MaxRecvDataSegmentLength,
    MaxBurstLength,
    FirstBurstLength,
    DefaultTime2Wait,
    DefaultTime2Retain,
    MaxOutstandingR2T,
    DataPduInOrder,
    DataSequenceInOrder,
    ErrorRecoveryLevel,
    SessionType,
    TaskReporting,
    ProtocolLevel,
    IfMarker,
    OfMarker,
    IfMarkInt,
    OfMarkInt,
    RdmaExtensions,
    TargetRecvDsl,
    InitiatorRecvDsl,
    MaxOutstandingUnexpectedPdus,
}

const ALL_KEYS: [Key; 32] = [
    Key::HeaderDigest,
    Key::DataDigest,
    Key::MaxConnections,
    Key::SendTargets,
    Key::TargetName,
    Key::InitiatorName,
    Key::TargetAlias,
    Key::InitiatorAlias,
    Key::TargetAddress,
    Key::TargetPortalGroupTag,
    Key::InitialR2T,
    Key::ImmediateData,
    Key::MaxRecvDataSegmentLength,
    Key::MaxBurstLength,
    Key::FirstBurstLength,
    Key::DefaultTime2Wait,
    Key::DefaultTime2Retain,
    Key::MaxOutstandingR2T,
    Key::DataPduInOrder,
    Key::DataSequenceInOrder,
    Key::ErrorRecoveryLevel,
    Key::SessionType,
    Key::TaskReporting,
    Key::ProtocolLevel,
    Key::IfMarker,
    Key::OfMarker,
    Key::IfMarkInt,
    Key::OfMarkInt,
    Key::RdmaExtensions,
    Key::TargetRecvDsl,
    Key::InitiatorRecvDsl,
    Key::MaxOutstandingUnexpectedPdus,
];

impl Key {
    fn from_name(name: &str) -> Option<Key> {
        ALL_KEYS.iter().copied().find(|k| k.name() == name)
    }

    fn name(self) -> &'static str {
        match self {
            Key::HeaderDigest => "HeaderDigest",
            Key::DataDigest => "DataDigest",
            Key::MaxConnections => "MaxConnections",
            Key::SendTargets => "SendTargets",
            Key::TargetName => "TargetName",
            Key::InitiatorName => "InitiatorName",
            Key::TargetAlias => "TargetAlias",
            Key::InitiatorAlias => "InitiatorAlias",
            Key::TargetAddress => "TargetAddress",
            Key::TargetPortalGroupTag => "TargetPortalGroupTag",
            Key::InitialR2T => "InitialR2T",
            Key::ImmediateData => "ImmediateData",
            Key::MaxRecvDataSegmentLength => "MaxRecvDataSegmentLength",
            Key::MaxBurstLength => "MaxBurstLength",
            Key::FirstBurstLength => "FirstBurstLength",
            Key::DefaultTime2Wait => "DefaultTime2Wait",
            Key::DefaultTime2Retain => "DefaultTime2Retain",
            Key::MaxOutstandingR2T => "MaxOutstandingR2T",
            Key::DataPduInOrder => "DataPDUInOrder",
            Key::DataSequenceInOrder => "DataSequenceInOrder",
            Key::ErrorRecoveryLevel => "ErrorRecoveryLevel",
            Key::SessionType => "SessionType",
            Key::TaskReporting => "TaskReporting",
            Key::ProtocolLevel => "iSCSIProtocolLevel",
            Key::IfMarker => "IFMarker",
            Key::OfMarker => "OFMarker",
            Key::IfMarkInt => "IFMarkInt",
            Key::OfMarkInt => "OFMarkInt",
            Key::RdmaExtensions => "RDMAExtensions",
            Key::TargetRecvDsl => "TargetRecvDataSegmentLength",
            Key::InitiatorRecvDsl => "InitiatorRecvDataSegmentLength",
            Key::MaxOutstandingUnexpectedPdus => "MaxOutstandingUnexpectedPDUs",
        }
    }

    fn usage(self) -> Usage {
        match self {
            Key::SendTargets => Usage::FullFeatureOnly,
            Key::TargetAlias | Key::TargetAddress | Key::TargetPortalGroupTag => Usage::TargetOnly,
            Key::InitiatorAlias | Key::MaxRecvDataSegmentLength => Usage::All,
            Key::HeaderDigest
            | Key::DataDigest
            | Key::TargetName
            | Key::InitiatorName
            | Key::IfMarker
            | Key::OfMarker
            | Key::IfMarkInt
            | Key::OfMarkInt
            | Key::TargetRecvDsl
            | Key::InitiatorRecvDsl => Usage::InitialOnly,
            Key::MaxConnections
            | Key::InitialR2T
            | Key::ImmediateData
            | Key::MaxBurstLength
            | Key::FirstBurstLength
            | Key::DefaultTime2Wait
            | Key::DefaultTime2Retain
            | Key::MaxOutstandingR2T
            | Key::DataPduInOrder
            | Key::DataSequenceInOrder
            | Key::ErrorRecoveryLevel
            | Key::SessionType
            | Key::TaskReporting
            | Key::ProtocolLevel
            | Key::RdmaExtensions
            | Key::MaxOutstandingUnexpectedPdus => Usage::LeadingOnly,
        }
    }

    /// "Any-Stage" keys: the declaratives that may ride along with security
    /// negotiation (§13.4, 13.5, 13.7, 13.21).
    fn any_stage(self) -> bool {
        matches!(
            self,
            Key::TargetName | Key::InitiatorName | Key::InitiatorAlias | Key::SessionType
        )
    }

    /// "Irrelevant when: SessionType=Discovery" in §13 (and RFC 7144 §2.1).
    fn irrelevant_in_discovery(self) -> bool {
        matches!(
            self,
            Key::MaxConnections
                | Key::InitialR2T
                | Key::ImmediateData
                | Key::MaxBurstLength
                | Key::FirstBurstLength
                | Key::MaxOutstandingR2T
                | Key::DataPduInOrder
                | Key::DataSequenceInOrder
                | Key::TaskReporting
                | Key::ProtocolLevel
        )
    }

    /// RFC 7145 keys, "Irrelevant when: RDMAExtensions=No".
    fn iser_only(self) -> bool {
        matches!(
            self,
            Key::TargetRecvDsl | Key::InitiatorRecvDsl | Key::MaxOutstandingUnexpectedPdus
        )
    }

    /// Order of evaluation within one request, so that keys whose results
    /// others depend on are settled first (FirstBurstLength depends on
    /// MaxBurstLength, InitialR2T and ImmediateData; MaxOutstandingR2T on
    /// DataSequenceInOrder and ErrorRecoveryLevel).
    fn priority(self) -> u8 {
        match self {
            Key::SessionType | Key::RdmaExtensions => 0,
            Key::InitialR2T
            | Key::ImmediateData
            | Key::DataSequenceInOrder
            | Key::ErrorRecoveryLevel => 1,
            Key::MaxBurstLength => 2,
            _ => 3,
        }
    }
}

/// The special answer values of §6.2.
fn is_answer_constant(v: &str) -> bool {
    matches!(v, "Reject" | "Irrelevant" | "NotUnderstood")
}

fn yes_no(b: bool) -> String {
    if b { "Yes" } else { "No" }.to_owned()
}

fn parse_bool(key: Key, value: &str) -> Result<bool, NegotiationError> {
    match value {
        "Yes" => Ok(true),
        "No" => Ok(false),
        _ => Err(invalid(key, value)),
    }
}

fn invalid(key: Key, value: &str) -> NegotiationError {
    NegotiationError::InvalidValue {
        key: key.name().to_owned(),
        value: value.to_owned(),
    }
}

/// A §6.1 numerical value within `lo..=hi`.
fn parse_in_range(key: Key, value: &str, lo: u64, hi: u64) -> Result<u64, NegotiationError> {
    let n = parse_number(value).map_err(|_| invalid(key, value))?;
    if (lo..=hi).contains(&n) {
        Ok(n)
    } else {
        Err(NegotiationError::OutOfRange {
            key: key.name().to_owned(),
            value: value.to_owned(),
        })
    }
}

fn parse_u32(key: Key, value: &str, lo: u32, hi: u32) -> Result<u32, NegotiationError> {
    let n = parse_in_range(key, value, u64::from(lo), u64::from(hi))?;
    u32::try_from(n).map_err(|_| invalid(key, value))
}

fn parse_u16(key: Key, value: &str, lo: u16, hi: u16) -> Result<u16, NegotiationError> {
    let n = parse_in_range(key, value, u64::from(lo), u64::from(hi))?;
    u16::try_from(n).map_err(|_| invalid(key, value))
}

fn parse_session_type(value: &str) -> Result<SessionType, NegotiationError> {
    match value {
        "Normal" => Ok(SessionType::Normal),
        "Discovery" => Ok(SessionType::Discovery),
        _ => Err(invalid(Key::SessionType, value)),
    }
}

/// An iSCSI name (§4.2.7.1): iqn., eui. or naa. type, at most 223 bytes.
fn parse_iscsi_name(key: Key, value: &str) -> Result<String, NegotiationError> {
    let typed = ["iqn.", "eui.", "naa."].iter().any(|p| {
        value
            .get(..p.len())
            .is_some_and(|h| h.eq_ignore_ascii_case(p))
    });
    if !typed || value.len() > MAX_ISCSI_NAME_LEN || value.contains(char::is_whitespace) {
        return Err(invalid(key, value));
    }
    Ok(value.to_owned())
}

/// A list value (§6.1 list-of-values): comma-separated, no empty items.
fn parse_list(key: Key, value: &str) -> Result<Vec<&str>, NegotiationError> {
    let items: Vec<&str> = value.split(',').collect();
    if items.iter().any(|i| i.is_empty()) {
        return Err(invalid(key, value));
    }
    Ok(items)
}

/// A key the target sent that needs the initiator's answer.
#[derive(Debug, Clone)]
struct Offer {
    key: Key,
    value: String,
}

/// Target side of one connection's operational negotiation.
#[derive(Debug)]
pub struct Negotiator {
    limits: Limits,
    transport: Transport,
    leading: bool,
    params: SessionParams,
    /// No login request processed yet.
    first_request: bool,
    /// Keys the initiator has sent in this login phase.
    seen: HashSet<String>,
    /// The initiator's declarations that may be repeated unchanged
    /// ([`Key::any_stage`]), with their values.
    declared: HashMap<Key, String>,
    /// Keys the target has declared or offered.
    sent: HashSet<Key>,
    /// Target offers not yet answered.
    awaiting: Vec<Offer>,
    /// The initiator's own MaxBurstLength/FirstBurstLength offers.
    offered_max_burst: Option<u32>,
    offered_first_burst: Option<u32>,
    /// pending_declarations has run.
    declarations_sent: bool,
}

type Answer = Option<(String, String)>;

impl Negotiator {
    /// Negotiator for the leading connection of a new session.
    pub fn new(limits: Limits, transport: Transport) -> Self {
        Negotiator {
            limits: limits.clamped(),
            transport,
            leading: true,
            params: SessionParams::default(),
            first_request: true,
            seen: HashSet::new(),
            declared: HashMap::new(),
            sent: HashSet::new(),
            awaiting: Vec::new(),
            offered_max_burst: None,
            offered_first_burst: None,
            declarations_sent: false,
        }
    }

    /// Negotiator for a further connection joining `session`: session-wide
    /// results are inherited and leading-only keys are refused.
    pub fn new_non_leading(limits: Limits, transport: Transport, session: &SessionParams) -> Self {
        let defaults = SessionParams::default();
        let params = SessionParams {
            // Connection-only keys start over.
            header_digest: defaults.header_digest,
            data_digest: defaults.data_digest,
            initiator_max_recv_dsl: defaults.initiator_max_recv_dsl,
            target_max_recv_dsl: defaults.target_max_recv_dsl,
            initiator_recv_dsl: defaults.initiator_recv_dsl,
            target_recv_dsl: defaults.target_recv_dsl,
            ..session.clone()
        };
        Negotiator {
            leading: false,
            params,
            ..Negotiator::new(limits, transport)
        }
    }

    /// The values negotiated so far.
    pub fn params(&self) -> &SessionParams {
        &self.params
    }

    /// True while target offers (from [`pending_declarations`](Self::pending_declarations))
    /// await the initiator's answer: the target must not transit yet.
    pub fn awaiting_answers(&self) -> bool {
        !self.awaiting.is_empty()
    }

    /// Process the initiator's pairs of one login request (or, at
    /// `Stage::FULL_FEATURE`, one Text request) and return the answers, in
    /// the order of the offers. Call it for every login request, starting
    /// with the first (which must carry InitiatorName, and TargetName for a
    /// Normal session). At the security stage, security keys are skipped (see
    /// [`crate::chap::SecurityNegotiator`]).
    pub fn process(
        &mut self,
        stage: Stage,
        offered: &[(String, String)],
    ) -> Result<KeyValues, NegotiationError> {
        check_duplicates(offered)?;
        let result = if stage == Stage::FULL_FEATURE {
            self.process_text(offered)
        } else {
            self.process_login(stage, offered)
        };
        if let Err(e) = &result {
            tracing::debug!(error = %e, "negotiation failed");
        }
        result
    }

    fn process_login(
        &mut self,
        stage: Stage,
        offered: &[(String, String)],
    ) -> Result<KeyValues, NegotiationError> {
        let first = std::mem::replace(&mut self.first_request, false);
        if first {
            self.check_first_request(offered)?;
        }
        let mut order: Vec<usize> = (0..offered.len()).collect();
        order.sort_by_key(|&i| {
            offered
                .get(i)
                .and_then(|(k, _)| Key::from_name(k))
                .map_or(u8::MAX, Key::priority)
        });
        let mut answers: Vec<Answer> = vec![None; offered.len()];
        for i in order {
            if let (Some((key, value)), Some(slot)) = (offered.get(i), answers.get_mut(i)) {
                *slot = self.handle_login_key(stage, first, key, value)?;
            }
        }
        self.check_bursts()?;
        Ok(answers.into_iter().flatten().collect())
    }

    /// InitiatorName always, TargetName for Normal sessions, SessionType
    /// only here (§6.3, §13.4, §13.5, §13.21).
    fn check_first_request(
        &mut self,
        offered: &[(String, String)],
    ) -> Result<(), NegotiationError> {
        let find = |k: &str| offered.iter().find(|(key, _)| key == k).map(|(_, v)| v);
        if let Some(v) = find("SessionType") {
            let t = parse_session_type(v)?;
            if self.leading {
                self.params.session_type = t;
            } else if t != self.params.session_type {
                return Err(invalid(Key::SessionType, v));
            }
        }
        if find("InitiatorName").is_none() {
            return Err(NegotiationError::MissingParameter("InitiatorName"));
        }
        if self.params.session_type == SessionType::Normal && find("TargetName").is_none() {
            return Err(NegotiationError::MissingParameter("TargetName"));
        }
        Ok(())
    }

    fn handle_login_key(
        &mut self,
        stage: Stage,
        first: bool,
        name: &str,
        value: &str,
    ) -> Result<Answer, NegotiationError> {
        if let Some(pos) = self.awaiting.iter().position(|o| o.key.name() == name) {
            let offer = self.awaiting.remove(pos);
            self.seen.insert(name.to_owned());
            self.take_answer(&offer, value)?;
            return Ok(None);
        }
        if is_security_key(name) {
            return if stage == Stage::SECURITY {
                Ok(None)
            } else {
                Err(NegotiationError::SecurityKeyOutsideSecurityStage(
                    name.to_owned(),
                ))
            };
        }
        // An answer to something we declared, or a stray answer: nothing to say.
        if is_answer_constant(value) {
            return Ok(None);
        }
        if !self.seen.insert(name.to_owned()) {
            // libiscsi (and so QEMU) declares InitiatorName, TargetName and
            // SessionType again in the operational stage after a security
            // stage that ended at once; tgt accepts that. The same value
            // again changes nothing, so it is taken as it is; a changed
            // one is still an error.
            let same = Key::from_name(name)
                .filter(|k| k.any_stage())
                .and_then(|k| self.declared.get(&k))
                .is_some_and(|before| before == value);
            if same {
                return Ok(None);
            }
            return Err(NegotiationError::DuplicateKey(name.to_owned()));
        }
        let Some(key) = Key::from_name(name) else {
            // Unknown, including X- and X# private keys (§6.2, §13.22).
            return Ok(Some((name.to_owned(), "NotUnderstood".into())));
        };
        let not_allowed = || NegotiationError::NotAllowedInStage {
            key: name.to_owned(),
            stage,
        };
        match key.usage() {
            Usage::TargetOnly => return Err(NegotiationError::TargetOnlyKey(name.to_owned())),
            Usage::FullFeatureOnly => return Err(not_allowed()),
            _ => {}
        }
        if stage == Stage::SECURITY && !key.any_stage() {
            return Err(not_allowed());
        }
        if key.any_stage() {
            self.declared.insert(key, value.to_owned());
        }
        if key == Key::SessionType {
            // Already applied by check_first_request.
            return if first { Ok(None) } else { Err(not_allowed()) };
        }
        if !self.leading && key.usage() == Usage::LeadingOnly {
            return Err(NegotiationError::LeadingOnlyKey(name.to_owned()));
        }
        let irrelevant = (key.iser_only() && self.transport == Transport::Tcp)
            || (key.irrelevant_in_discovery()
                && self.params.session_type == SessionType::Discovery)
            || (key == Key::FirstBurstLength && first_burst_irrelevant(&self.params));
        if irrelevant {
            return Ok(Some((name.to_owned(), "Irrelevant".into())));
        }
        let answer = self.negotiate(key, value)?;
        Ok(answer.map(|v| (name.to_owned(), v)))
    }

    /// Apply one offered key; returns the answer value, if any.
    fn negotiate(&mut self, key: Key, value: &str) -> Result<Option<String>, NegotiationError> {
        let l = &self.limits;
        let p = &mut self.params;
        let answer = match key {
            Key::HeaderDigest | Key::DataDigest => return self.digest(key, value).map(Some),
            Key::MaxConnections => {
                p.max_connections = parse_u16(key, value, 1, 65_535)?.min(l.max_connections);
                p.max_connections.to_string()
            }
            Key::InitialR2T => {
                p.initial_r2t = parse_bool(key, value)? || l.initial_r2t;
                yes_no(p.initial_r2t)
            }
            Key::ImmediateData => {
                p.immediate_data = parse_bool(key, value)? && l.immediate_data;
                yes_no(p.immediate_data)
            }
            Key::MaxBurstLength => {
                let v = parse_u32(key, value, DSL_MIN, DSL_MAX)?;
                self.offered_max_burst = Some(v);
                p.max_burst_length = v.min(l.max_burst_length);
                p.max_burst_length.to_string()
            }
            Key::FirstBurstLength => {
                let v = parse_u32(key, value, DSL_MIN, DSL_MAX)?;
                self.offered_first_burst = Some(v);
                p.first_burst_length = v.min(l.first_burst_length).min(p.max_burst_length);
                p.first_burst_length.to_string()
            }
            Key::DefaultTime2Wait => {
                p.default_time2wait = parse_u16(key, value, 0, 3600)?.max(l.default_time2wait);
                p.default_time2wait.to_string()
            }
            Key::DefaultTime2Retain => {
                p.default_time2retain = parse_u16(key, value, 0, 3600)?.min(l.default_time2retain);
                p.default_time2retain.to_string()
            }
            Key::MaxOutstandingR2T => {
                // §13.19: with ERL > 0 and in-order sequences, only one R2T
                // may be outstanding.
                let cap = if l.error_recovery_level > 0 && p.data_sequence_in_order {
                    1
                } else {
                    l.max_outstanding_r2t
                };
                p.max_outstanding_r2t = parse_u32(key, value, 1, 65_535)?.min(cap);
                p.max_outstanding_r2t.to_string()
            }
            Key::DataPduInOrder => {
                p.data_pdu_in_order = parse_bool(key, value)? || l.data_pdu_in_order;
                yes_no(p.data_pdu_in_order)
            }
            Key::DataSequenceInOrder => {
                p.data_sequence_in_order = parse_bool(key, value)? || l.data_sequence_in_order;
                yes_no(p.data_sequence_in_order)
            }
            Key::ErrorRecoveryLevel => {
                let v = parse_in_range(key, value, 0, 2)?;
                p.error_recovery_level = u8::try_from(v).unwrap_or(0).min(l.error_recovery_level);
                p.error_recovery_level.to_string()
            }
            Key::TaskReporting => {
                // We implement only the RFC 3720 semantics.
                let items = parse_list(key, value)?;
                if items.contains(&"RFC3720") {
                    "RFC3720"
                } else {
                    "Reject"
                }
                .to_owned()
            }
            Key::ProtocolLevel => parse_in_range(key, value, 0, 31)?
                .min(PROTOCOL_LEVEL)
                .to_string(),
            // §13.25 (Obsoleted Keys): answer Reject, never
            // NotUnderstood. iSER requires them off (RFC 7145 §6.6), and No
            // is an allowed answer under RFC 7143 too.
            Key::IfMarker | Key::OfMarker => match self.transport {
                Transport::Tcp => "Reject".to_owned(),
                Transport::Iser => "No".to_owned(),
            },
            Key::IfMarkInt | Key::OfMarkInt => "Reject".to_owned(),
            Key::RdmaExtensions => {
                let offered = parse_bool(key, value)?;
                let result = offered && self.transport == Transport::Iser;
                self.set_rdma_extensions(result)?;
                yes_no(result)
            }
            Key::TargetRecvDsl => {
                // The initiator may suggest a value; we answer what we accept.
                let v = parse_u32(key, value, DSL_MIN, DSL_MAX)?;
                p.target_recv_dsl = v.min(l.target_recv_data_segment_length);
                self.sent.insert(Key::TargetRecvDsl);
                p.target_recv_dsl.to_string()
            }
            Key::MaxRecvDataSegmentLength => {
                p.initiator_max_recv_dsl = parse_u32(key, value, DSL_MIN, DSL_MAX)?;
                return Ok(None);
            }
            Key::InitiatorRecvDsl => {
                p.initiator_recv_dsl = parse_u32(key, value, DSL_MIN, DSL_MAX)?;
                return Ok(None);
            }
            Key::MaxOutstandingUnexpectedPdus => {
                let v = parse_in_range(key, value, 0, u64::from(u32::MAX))?;
                if v == 1 {
                    return Err(NegotiationError::OutOfRange {
                        key: key.name().to_owned(),
                        value: value.to_owned(),
                    });
                }
                p.max_outstanding_unexpected_pdus = u32::try_from(v).unwrap_or(u32::MAX);
                return Ok(None);
            }
            Key::InitiatorName => {
                p.initiator_name = Some(parse_iscsi_name(key, value)?);
                return Ok(None);
            }
            Key::TargetName => {
                p.target_name = Some(parse_iscsi_name(key, value)?);
                return Ok(None);
            }
            Key::InitiatorAlias => {
                p.initiator_alias = Some(value.to_owned());
                return Ok(None);
            }
            // Filtered out by the caller.
            Key::SessionType
            | Key::SendTargets
            | Key::TargetAlias
            | Key::TargetAddress
            | Key::TargetPortalGroupTag => return Ok(None),
        };
        Ok(Some(answer))
    }

    fn set_rdma_extensions(&mut self, result: bool) -> Result<(), NegotiationError> {
        if self.transport == Transport::Iser
            && !result
            && self.params.session_type == SessionType::Normal
        {
            return Err(NegotiationError::RdmaExtensionsRequired);
        }
        self.params.rdma_extensions = result;
        Ok(())
    }

    fn digest_prefs(&self, key: Key) -> &[Digest] {
        if key == Key::HeaderDigest {
            &self.limits.header_digest
        } else {
            &self.limits.data_digest
        }
    }

    fn set_digest(&mut self, key: Key, d: Digest) {
        let on = d == Digest::CRC32C;
        if key == Key::HeaderDigest {
            self.params.header_digest = on;
        } else {
            self.params.data_digest = on;
        }
    }

    /// HeaderDigest/DataDigest list negotiation (§13.1). On iSER digests are
    /// not used (RFC 7145 §6.1): the result is always None.
    fn digest(&mut self, key: Key, value: &str) -> Result<String, NegotiationError> {
        let items = parse_list(key, value)?;
        if self.transport == Transport::Iser {
            self.set_digest(key, Digest::None);
            return Ok(if items.contains(&"None") {
                "None"
            } else {
                "Reject"
            }
            .to_owned());
        }
        let prefs = self.digest_prefs(key);
        let choice = items
            .iter()
            .filter_map(|i| Digest::from_name(i))
            .find(|d| prefs.contains(d));
        match choice {
            Some(d) => {
                self.set_digest(key, d);
                Ok(d.as_str().to_owned())
            }
            // The result stays at the default, None: fine only if we accept it.
            None if prefs.contains(&Digest::None) => Ok("Reject".to_owned()),
            None => Err(NegotiationError::NoAcceptableValue(key.name().to_owned())),
        }
    }

    /// The initiator's answer to one of our offers.
    fn take_answer(&mut self, offer: &Offer, value: &str) -> Result<(), NegotiationError> {
        let key = offer.key;
        let ours = parse_number(&offer.value).ok();
        let refused = || NegotiationError::OfferRefused {
            key: key.name().to_owned(),
            value: value.to_owned(),
        };
        if is_answer_constant(value) {
            return Err(refused());
        }
        match key {
            Key::MaxBurstLength => {
                let v = parse_u32(key, value, DSL_MIN, DSL_MAX)?;
                if ours.is_some_and(|o| u64::from(v) > o) {
                    return Err(refused());
                }
                self.params.max_burst_length = v;
            }
            Key::FirstBurstLength => {
                let v = parse_u32(key, value, DSL_MIN, DSL_MAX)?;
                if ours.is_some_and(|o| u64::from(v) > o) {
                    return Err(refused());
                }
                self.params.first_burst_length = v;
            }
            Key::DefaultTime2Wait => {
                let v = parse_u16(key, value, 0, 3600)?;
                if ours.is_some_and(|o| u64::from(v) < o) {
                    return Err(refused());
                }
                self.params.default_time2wait = v;
            }
            Key::DefaultTime2Retain => {
                let v = parse_u16(key, value, 0, 3600)?;
                if ours.is_some_and(|o| u64::from(v) > o) {
                    return Err(refused());
                }
                self.params.default_time2retain = v;
            }
            Key::HeaderDigest | Key::DataDigest => {
                let d = Digest::from_name(value).ok_or_else(|| invalid(key, value))?;
                if !offer.value.split(',').any(|o| o == value) {
                    return Err(refused());
                }
                self.set_digest(key, d);
            }
            Key::RdmaExtensions => {
                let v = parse_bool(key, value)?;
                self.set_rdma_extensions(v)?;
            }
            _ => return Err(invalid(key, value)),
        }
        Ok(())
    }

    /// FirstBurstLength must not exceed MaxBurstLength (§13.14).
    fn check_bursts(&self) -> Result<(), NegotiationError> {
        if let (Some(first), Some(max)) = (self.offered_first_burst, self.offered_max_burst) {
            if first > max {
                return Err(NegotiationError::FirstBurstExceedsMaxBurst { first, max });
            }
        }
        // Before our declarations, pending_declarations can still fix a
        // default FirstBurstLength above a small MaxBurstLength by offering.
        let p = &self.params;
        if self.declarations_sent
            && !self.awaiting_answers()
            && p.first_burst_length > p.max_burst_length
            && !first_burst_irrelevant(p)
            && p.session_type == SessionType::Normal
        {
            return Err(NegotiationError::FirstBurstExceedsMaxBurst {
                first: p.first_burst_length,
                max: p.max_burst_length,
            });
        }
        Ok(())
    }

    /// Keys the target must still send in the response that ends the
    /// operational stage: its declarations (MaxRecvDataSegmentLength, or on
    /// iSER TargetRecvDataSegmentLength and MaxOutstandingUnexpectedPDUs) and
    /// offers for keys whose RFC default would exceed [`Limits`] because the
    /// initiator did not offer them. Each key is returned once. If
    /// [`awaiting_answers`](Self::awaiting_answers) is then true, the response
    /// must not transit (T=0) so that the initiator can answer.
    pub fn pending_declarations(&mut self) -> KeyValues {
        self.declarations_sent = true;
        let mut out = KeyValues::new();
        match self.transport {
            Transport::Tcp => {
                let v = self.limits.max_recv_data_segment_length;
                if self.declare(Key::MaxRecvDataSegmentLength, v.to_string(), &mut out) {
                    self.params.target_max_recv_dsl = v;
                }
                self.offer_digest(Key::HeaderDigest, &mut out);
                self.offer_digest(Key::DataDigest, &mut out);
            }
            Transport::Iser => {
                let v = self.limits.target_recv_data_segment_length;
                if self.declare(Key::TargetRecvDsl, v.to_string(), &mut out) {
                    self.params.target_recv_dsl = v;
                }
                // Declared only to an initiator that declared its own:
                // open-iscsi fails a login on any key it does not know, and
                // it does not know this one. Undeclared means 0, no limit.
                let known = self.seen.contains(Key::MaxOutstandingUnexpectedPdus.name());
                if self.leading && known {
                    let v = self.limits.max_outstanding_unexpected_pdus;
                    self.declare(Key::MaxOutstandingUnexpectedPdus, v.to_string(), &mut out);
                }
                if self.leading && self.params.session_type == SessionType::Normal {
                    self.offer(Key::RdmaExtensions, "Yes".into(), true, &mut out);
                }
            }
        }
        if self.leading {
            self.offer_session_limits(&mut out);
        }
        out
    }

    /// Offers for leading-only keys whose current value breaks our limits.
    fn offer_session_limits(&mut self, out: &mut KeyValues) {
        let (l, p) = (&self.limits, &self.params);
        let normal = p.session_type == SessionType::Normal;
        let wait = (l.default_time2wait > p.default_time2wait).then_some(l.default_time2wait);
        let retain =
            (l.default_time2retain < p.default_time2retain).then_some(l.default_time2retain);
        let immediate_off = normal && !l.immediate_data && p.immediate_data;
        let max_burst =
            (normal && l.max_burst_length < p.max_burst_length).then_some(l.max_burst_length);
        let burst_cap = max_burst.unwrap_or(p.max_burst_length);
        let first_cap = l.first_burst_length.min(burst_cap);
        if immediate_off && self.offer(Key::ImmediateData, "No".into(), false, out) {
            // AND with No: the result is No whatever the answer (§6.2.2), and
            // the initiator need not answer.
            self.params.immediate_data = false;
        }
        if let Some(v) = max_burst {
            self.offer(Key::MaxBurstLength, v.to_string(), true, out);
        }
        let p = &self.params;
        if normal && !first_burst_irrelevant(p) && first_cap < p.first_burst_length {
            self.offer(Key::FirstBurstLength, first_cap.to_string(), true, out);
        }
        if let Some(v) = wait {
            self.offer(Key::DefaultTime2Wait, v.to_string(), true, out);
        }
        if let Some(v) = retain {
            self.offer(Key::DefaultTime2Retain, v.to_string(), true, out);
        }
    }

    /// Offer digests when we do not accept the default (None).
    fn offer_digest(&mut self, key: Key, out: &mut KeyValues) {
        let prefs = self.digest_prefs(key);
        if prefs.contains(&Digest::None) {
            return;
        }
        let list = prefs
            .iter()
            .map(|d| d.as_str())
            .collect::<Vec<_>>()
            .join(",");
        self.offer(key, list, true, out);
    }

    /// Send a declarative `key=value` once (the initiator's own declaration
    /// of the same key is independent); returns whether it was added.
    fn declare(&mut self, key: Key, value: String, out: &mut KeyValues) -> bool {
        if !self.sent.insert(key) {
            return false;
        }
        out.push((key.name().to_owned(), value));
        true
    }

    /// Offer `key=value` unless either side already negotiated the key;
    /// records it as awaiting an answer when `answer_due`. Returns whether
    /// it was added.
    fn offer(&mut self, key: Key, value: String, answer_due: bool, out: &mut KeyValues) -> bool {
        if self.seen.contains(key.name()) || !self.declare(key, value.clone(), out) {
            return false;
        }
        if answer_due {
            self.awaiting.push(Offer { key, value });
        }
        true
    }

    /// Text negotiation in full feature phase (§6.2, §11.10): only "ALL"
    /// keys can change; SendTargets is left to the caller.
    fn process_text(
        &mut self,
        offered: &[(String, String)],
    ) -> Result<KeyValues, NegotiationError> {
        let mut answers = KeyValues::new();
        for (name, value) in offered {
            if is_answer_constant(value) || name == "SendTargets" {
                continue;
            }
            let key = Key::from_name(name);
            let answer = match key {
                None if is_security_key(name) => "Reject",
                None => "NotUnderstood",
                Some(k @ Key::MaxRecvDataSegmentLength) => {
                    self.params.initiator_max_recv_dsl = parse_u32(k, value, DSL_MIN, DSL_MAX)?;
                    continue;
                }
                Some(Key::InitiatorAlias) => {
                    self.params.initiator_alias = Some(value.clone());
                    continue;
                }
                Some(_) => "Reject",
            };
            answers.push((name.clone(), answer.to_owned()));
        }
        Ok(answers)
    }
}

/// §13.14: "Irrelevant when: ( InitialR2T=Yes and ImmediateData=No )": no
/// unsolicited data at all.
fn first_burst_irrelevant(p: &SessionParams) -> bool {
    p.initial_r2t && !p.immediate_data
}

fn check_duplicates(offered: &[(String, String)]) -> Result<(), NegotiationError> {
    let mut keys = HashSet::with_capacity(offered.len());
    for (k, _) in offered {
        // Security keys are checked by the security negotiator.
        if !is_security_key(k) && !keys.insert(k.as_str()) {
            return Err(NegotiationError::DuplicateKey(k.clone()));
        }
    }
    Ok(())
}
