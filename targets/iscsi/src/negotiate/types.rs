//! The value types of negotiation the rest of the crate names: the
//! transport, SessionType and the digest choices.

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
