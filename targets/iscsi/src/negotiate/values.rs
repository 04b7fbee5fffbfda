//! Parsing and formatting of key values (§6.1): numbers within a range,
//! Yes/No, lists, iSCSI names, SessionType, and the special answers of §6.2.

use crate::name::IscsiName;
use crate::text::parse_number;

use super::error::NegotiationError;
use super::keys::Key;
use super::types::SessionType;

/// The iSCSIProtocolLevel this implementation speaks (RFC 7143 is level 1).
pub(super) const PROTOCOL_LEVEL: u64 = 1;

/// The special answer values of §6.2.
pub(super) fn is_answer_constant(v: &str) -> bool {
    matches!(v, "Reject" | "Irrelevant" | "NotUnderstood")
}

pub(super) fn yes_no(b: bool) -> String {
    if b { "Yes" } else { "No" }.to_owned()
}

pub(super) fn parse_bool(key: Key, value: &str) -> Result<bool, NegotiationError> {
    match value {
        "Yes" => Ok(true),
        "No" => Ok(false),
        _ => Err(invalid(key, value)),
    }
}

pub(super) fn invalid(key: Key, value: &str) -> NegotiationError {
    NegotiationError::InvalidValue {
        key: key.name().to_owned(),
        value: value.to_owned(),
    }
}

/// A §6.1 numerical value within `lo..=hi`.
pub(super) fn parse_in_range(
    key: Key,
    value: &str,
    lo: u64,
    hi: u64,
) -> Result<u64, NegotiationError> {
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

pub(super) fn parse_u32(key: Key, value: &str, lo: u32, hi: u32) -> Result<u32, NegotiationError> {
    let n = parse_in_range(key, value, u64::from(lo), u64::from(hi))?;
    u32::try_from(n).map_err(|_| invalid(key, value))
}

pub(super) fn parse_u16(key: Key, value: &str, lo: u16, hi: u16) -> Result<u16, NegotiationError> {
    let n = parse_in_range(key, value, u64::from(lo), u64::from(hi))?;
    u16::try_from(n).map_err(|_| invalid(key, value))
}

pub(super) fn parse_session_type(value: &str) -> Result<SessionType, NegotiationError> {
    match value {
        "Normal" => Ok(SessionType::Normal),
        "Discovery" => Ok(SessionType::Discovery),
        _ => Err(invalid(Key::SessionType, value)),
    }
}

/// An iSCSI name (§4.2.7.1): iqn., eui. or naa. type, at most 223 bytes.
pub(super) fn parse_iscsi_name(key: Key, value: &str) -> Result<String, NegotiationError> {
    IscsiName::from_peer(value)
        .map(IscsiName::into_string)
        .ok_or_else(|| invalid(key, value))
}

/// A list value (§6.1 list-of-values): comma-separated, no empty items.
pub(super) fn parse_list(key: Key, value: &str) -> Result<Vec<&str>, NegotiationError> {
    let items: Vec<&str> = value.split(',').collect();
    if items.iter().any(|i| i.is_empty()) {
        return Err(invalid(key, value));
    }
    Ok(items)
}
