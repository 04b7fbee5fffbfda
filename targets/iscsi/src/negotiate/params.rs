//! [`SessionParams`], the negotiated values, and the relevance rules that
//! depend on them.

use super::types::SessionType;

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

/// §13.14: "Irrelevant when: ( InitialR2T=Yes and ImmediateData=No )": no
/// unsolicited data at all.
pub(super) fn first_burst_irrelevant(p: &SessionParams) -> bool {
    p.initial_r2t && !p.immediate_data
}
