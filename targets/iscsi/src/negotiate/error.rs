//! [`NegotiationError`] and the login status each failure maps to.

use crate::pdu::{LoginStatus, Stage};

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
