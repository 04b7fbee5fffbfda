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
    /// Check the configuration against the RFC ranges (for the config
    /// loader; [`Negotiator::new`](super::Negotiator::new) clamps silently).
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
