//! [`Limits`]: what the target accepts and offers, with the RFC ranges it is
//! checked ([`Limits::validate`]) or forced ([`Limits::clamped`]) into.

use super::error::NegotiationError;
use super::types::Digest;

/// Valid range of the data segment length keys (§13.12, §13.13, §13.14).
pub(super) const DSL_MIN: u32 = 512;
pub(super) const DSL_MAX: u32 = 16_777_215;

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
    /// Every way these limits leave the RFC ranges, each naming its field
    /// (the config key of the same name). The one place the ranges are
    /// checked: the config loader reports these at their keys, and
    /// [`Limits::validate`] refuses the first.
    pub fn problems(&self) -> Vec<LimitProblem> {
        let mut out = Vec::new();
        let mut range = |field: &'static str, key: &'static str, value: u64, min: u64, max: u64| {
            if !(min..=max).contains(&value) {
                out.push(LimitProblem::OutOfRange {
                    field,
                    key,
                    value,
                    min,
                    max,
                });
            }
        };
        let dsl = (u64::from(DSL_MIN), u64::from(DSL_MAX));
        range(
            "max_recv_data_segment_length",
            "MaxRecvDataSegmentLength",
            self.max_recv_data_segment_length.into(),
            dsl.0,
            dsl.1,
        );
        range(
            "max_burst_length",
            "MaxBurstLength",
            self.max_burst_length.into(),
            dsl.0,
            dsl.1,
        );
        range(
            "first_burst_length",
            "FirstBurstLength",
            self.first_burst_length.into(),
            dsl.0,
            dsl.1,
        );
        range(
            "max_outstanding_r2t",
            "MaxOutstandingR2T",
            self.max_outstanding_r2t.into(),
            1,
            65_535,
        );
        range(
            "default_time2wait",
            "DefaultTime2Wait",
            self.default_time2wait.into(),
            0,
            3600,
        );
        range(
            "default_time2retain",
            "DefaultTime2Retain",
            self.default_time2retain.into(),
            0,
            3600,
        );
        range(
            "max_connections",
            "MaxConnections",
            self.max_connections.into(),
            1,
            65_535,
        );
        range(
            "error_recovery_level",
            "ErrorRecoveryLevel",
            self.error_recovery_level.into(),
            0,
            2,
        );
        range(
            "target_recv_data_segment_length",
            "TargetRecvDataSegmentLength",
            self.target_recv_data_segment_length.into(),
            dsl.0,
            dsl.1,
        );
        if self.first_burst_length > self.max_burst_length {
            out.push(LimitProblem::FirstBurstOverMaxBurst {
                first: self.first_burst_length,
                max: self.max_burst_length,
            });
        }
        if self.header_digest.is_empty() {
            out.push(LimitProblem::NoDigest {
                field: "header_digest",
            });
        }
        if self.data_digest.is_empty() {
            out.push(LimitProblem::NoDigest {
                field: "data_digest",
            });
        }
        if self.max_outstanding_unexpected_pdus == 1 {
            out.push(LimitProblem::UnexpectedPdusOne);
        }
        out
    }

    /// Check the configuration against the RFC ranges (for the config
    /// loader; [`Negotiator::new`](super::Negotiator::new) clamps silently).
    pub fn validate(&self) -> Result<(), NegotiationError> {
        match self.problems().first() {
            Some(p) => Err(NegotiationError::InvalidLimits(p.to_string())),
            None => Ok(()),
        }
    }

    /// The same limits forced into the RFC ranges.
    pub(super) fn clamped(mut self) -> Self {
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

/// One way a [`Limits`] leaves the RFC ranges ([`Limits::problems`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LimitProblem {
    /// A numeric field outside its range.
    OutOfRange {
        /// The field (and config key) name.
        field: &'static str,
        /// The RFC 7143 / RFC 7145 key it declares.
        key: &'static str,
        /// Its value.
        value: u64,
        /// The smallest value allowed.
        min: u64,
        /// The largest value allowed.
        max: u64,
    },
    /// FirstBurstLength above MaxBurstLength (RFC 7143 §13.14).
    FirstBurstOverMaxBurst {
        /// first_burst_length.
        first: u32,
        /// max_burst_length.
        max: u32,
    },
    /// An empty digest list.
    NoDigest {
        /// `header_digest` or `data_digest`.
        field: &'static str,
    },
    /// MaxOutstandingUnexpectedPDUs of 1 (RFC 7145 §6.7: 0 or at least 2).
    UnexpectedPdusOne,
}

impl LimitProblem {
    /// The field (config key) the problem is about.
    pub fn field(&self) -> &'static str {
        match self {
            LimitProblem::OutOfRange { field, .. } | LimitProblem::NoDigest { field } => field,
            LimitProblem::FirstBurstOverMaxBurst { .. } => "first_burst_length",
            LimitProblem::UnexpectedPdusOne => "max_outstanding_unexpected_pdus",
        }
    }

    /// What is wrong, in the words of a config problem (without the key).
    pub fn message(&self) -> String {
        match self {
            LimitProblem::OutOfRange {
                value, min, max, ..
            } => format!("{value} is out of range {min}..={max}"),
            LimitProblem::FirstBurstOverMaxBurst { first, max } => {
                format!("{first} exceeds max_burst_length {max} (RFC 7143 §13.14)")
            }
            LimitProblem::NoDigest { .. } => {
                "must list at least one of \"None\", \"CRC32C\"".to_owned()
            }
            LimitProblem::UnexpectedPdusOne => "must be 0 or >= 2 (RFC 7145 §6.7)".to_owned(),
        }
    }
}

impl std::fmt::Display for LimitProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LimitProblem::OutOfRange { key, min, max, .. } => {
                write!(f, "{key} out of {min}..={max}")
            }
            LimitProblem::FirstBurstOverMaxBurst { .. } => {
                f.write_str("FirstBurstLength exceeds MaxBurstLength")
            }
            LimitProblem::NoDigest { .. } => f.write_str("empty digest list"),
            LimitProblem::UnexpectedPdusOne => {
                f.write_str("MaxOutstandingUnexpectedPDUs must be 0 or >= 2")
            }
        }
    }
}
