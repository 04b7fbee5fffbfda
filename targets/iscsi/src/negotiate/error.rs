//! [`NegotiationError`] and the login status each failure maps to.

use crate::pdu::{LoginStatus, Stage};

/// Why a negotiation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NegotiationError {
    /// The named key was offered twice in the negotiation (RFC 7143 §6.2).
    #[error("key {0} sent more than once")]
    DuplicateKey(String),
    /// A value that does not parse for its key.
    #[error("invalid value for {key}: {value:?}")]
    InvalidValue {
        /// The key.
        key: String,
        /// The value as received.
        value: String,
    },
    /// A value that parses but lies outside the key's RFC range.
    #[error("{key}={value} is out of range")]
    OutOfRange {
        /// The key.
        key: String,
        /// The value as received.
        value: String,
    },
    /// A key not allowed in this login stage (or not in login at all).
    #[error("key {key} is not allowed in stage {stage:?}")]
    NotAllowedInStage {
        /// The key.
        key: String,
        /// The stage it came in.
        stage: Stage,
    },
    /// A security key (AuthMethod, CHAP_*) outside the security stage.
    #[error("security key {0} outside the security stage")]
    SecurityKeyOutsideSecurityStage(String),
    /// A leading-only key (e.g. MaxConnections) on a connection that does not
    /// lead its session.
    #[error("leading-only key {0} on a non-leading connection")]
    LeadingOnlyKey(String),
    /// A key only a target may send (e.g. TargetPortalGroupTag).
    #[error("key {0} may only be sent by a target")]
    TargetOnlyKey(String),
    /// The first login request lacks this key (InitiatorName, or TargetName
    /// for a Normal session): Missing Parameter.
    #[error("{0} missing from the first login request")]
    MissingParameter(&'static str),
    /// FirstBurstLength above MaxBurstLength (§13.14).
    #[error("FirstBurstLength {first} exceeds MaxBurstLength {max}")]
    FirstBurstExceedsMaxBurst {
        /// FirstBurstLength, bytes.
        first: u32,
        /// MaxBurstLength, bytes.
        max: u32,
    },
    /// No value of the initiator's list is one the target accepts (e.g. a
    /// HeaderDigest list without a digest the target allows).
    #[error("no acceptable value offered for {0}")]
    NoAcceptableValue(String),
    /// The initiator's answer to a key the target offered is not acceptable
    /// (Reject, Irrelevant, or a value the target did not allow).
    #[error("initiator answered the target's {key} offer with {value:?}")]
    OfferRefused {
        /// The key the target offered.
        key: String,
        /// The initiator's answer.
        value: String,
    },
    /// An iSER connection did not agree RDMAExtensions=Yes.
    #[error("RDMAExtensions=Yes is required on an iSER connection")]
    RdmaExtensionsRequired,
    /// The target's own negotiation limits are out of the RFC ranges (from
    /// [`Limits::validate`](super::Limits::validate)): Target Error.
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
