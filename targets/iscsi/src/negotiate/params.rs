//! [`SessionParams`], the negotiated values, and the relevance rules that
//! depend on them.

use super::types::SessionType;

/// The negotiated values; starts at the RFC defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionParams {
    /// SessionType (§13.21): Normal or Discovery.
    pub session_type: SessionType,
    /// InitiatorName (§13.5), required in the first login request.
    pub initiator_name: Option<String>,
    /// InitiatorAlias (§13.6), if the initiator declared one.
    pub initiator_alias: Option<String>,
    /// TargetName (§13.4), required for a Normal session.
    pub target_name: Option<String>,
    /// HeaderDigest=CRC32C agreed: every PDU header carries a CRC32C.
    pub header_digest: bool,
    /// DataDigest=CRC32C agreed: every data segment carries a CRC32C.
    pub data_digest: bool,
    /// MaxConnections (§13.2): at most the target's limit (1 by default).
    pub max_connections: u16,
    /// InitialR2T (§13.10): true when a write sends no unsolicited Data-Out
    /// PDUs (immediate data aside).
    pub initial_r2t: bool,
    /// ImmediateData (§13.11): a write may carry data in its command PDU.
    pub immediate_data: bool,
    /// MaxBurstLength (§13.13): most bytes in one solicited sequence
    /// (per R2T), or per Data-In sequence.
    pub max_burst_length: u32,
    /// FirstBurstLength (§13.14): most unsolicited bytes (immediate plus
    /// unsolicited Data-Out) a write may send.
    pub first_burst_length: u32,
    /// DefaultTime2Wait (§13.15), seconds.
    pub default_time2wait: u16,
    /// DefaultTime2Retain (§13.16), seconds.
    pub default_time2retain: u16,
    /// MaxOutstandingR2T (§13.17): R2Ts a task may have outstanding.
    pub max_outstanding_r2t: u32,
    /// DataPDUInOrder (§13.18): data PDUs of a sequence arrive in order.
    pub data_pdu_in_order: bool,
    /// DataSequenceInOrder (§13.19): a task's data sequences go in order.
    pub data_sequence_in_order: bool,
    /// ErrorRecoveryLevel (§13.20): at most the target's limit (0 by default).
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

/// §13.14: "Irrelevant when: ( InitialR2T=Yes and ImmediateData=No )": no
/// unsolicited data at all.
pub(super) fn first_burst_irrelevant(p: &SessionParams) -> bool {
    p.initial_r2t && !p.immediate_data
}
