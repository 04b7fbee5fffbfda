//! The value types of negotiation the rest of the crate names: the
//! transport, SessionType and the digest choices.

/// Transport the connection runs over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// iSCSI over TCP: a byte stream with digests and padding.
    Tcp,
    /// iSER (RFC 7145): RDMA Sends for PDUs, RDMA Writes and Reads for data.
    Iser,
}

/// SessionType (§13.21).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionType {
    /// A session to one target, for SCSI commands.
    Normal,
    /// A discovery session: Text requests (SendTargets) only, no target.
    Discovery,
}

/// HeaderDigest/DataDigest values (§13.1).
#[allow(clippy::upper_case_acronyms)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Digest {
    /// No digest.
    None,
    /// CRC32C (Castagnoli), 4 bytes after the header or data.
    CRC32C,
}

impl Digest {
    /// The key value: "None" or "CRC32C".
    pub fn as_str(self) -> &'static str {
        match self {
            Digest::None => "None",
            Digest::CRC32C => "CRC32C",
        }
    }

    /// The digest a key value names (exactly "None" or "CRC32C"), if any.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "None" => Some(Digest::None),
            "CRC32C" => Some(Digest::CRC32C),
            _ => None,
        }
    }
}
