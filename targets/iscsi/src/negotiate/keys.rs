//! The keys this target knows (RFC 7143 §13, RFC 7145 §6): their names and
//! per-key properties (where a key may appear, when it is irrelevant, the
//! order of evaluation).

/// "Use" column of §13: where a key may appear.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Usage {
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
pub(super) enum Key {
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
    pub(super) fn from_name(name: &str) -> Option<Key> {
        ALL_KEYS.iter().copied().find(|k| k.name() == name)
    }

    pub(super) fn name(self) -> &'static str {
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

    pub(super) fn usage(self) -> Usage {
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
    pub(super) fn any_stage(self) -> bool {
        matches!(
            self,
            Key::TargetName | Key::InitiatorName | Key::InitiatorAlias | Key::SessionType
        )
    }

    /// "Irrelevant when: SessionType=Discovery" in §13 (and RFC 7144 §2.1).
    pub(super) fn irrelevant_in_discovery(self) -> bool {
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
    pub(super) fn iser_only(self) -> bool {
        matches!(
            self,
            Key::TargetRecvDsl | Key::InitiatorRecvDsl | Key::MaxOutstandingUnexpectedPdus
        )
    }

    /// Order of evaluation within one request, so that keys whose results
    /// others depend on are settled first (FirstBurstLength depends on
    /// MaxBurstLength, InitialR2T and ImmediateData; MaxOutstandingR2T on
    /// DataSequenceInOrder and ErrorRecoveryLevel).
    pub(super) fn priority(self) -> u8 {
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
