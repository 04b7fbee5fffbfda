//! One iSCSI name type ([`IscsiName`], RFC 7143 §4.2.7, RFC 3720
//! §3.2.6.3, RFC 3722) for the names the target defines (its own name and
//! ACL entries, in the configuration) and the names initiators send at
//! login. All rules about iSCSI names are in this module.

use std::fmt;

/// RFC 7143 §4.2.7.1: an iSCSI name is at most 223 bytes.
pub const MAX_ISCSI_NAME_LEN: usize = 223;

/// An iSCSI name that passed one of this module's checks.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IscsiName(String);

/// Why a text is not an iSCSI name (the message names the rule).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NameError(String);

impl IscsiName {
    /// Checks an iSCSI name (RFC 7143 §4.2.7): `iqn.yyyy-mm.reversed.domain[:anything]`,
    /// `eui.` + 16 hex digits, or `naa.` + 16 or 32 hex digits; at most 223 bytes.
    /// `iqn.` names must be lowercase (the RFC 3722 stringprep profile maps to
    /// lowercase, so a configured name must already be in that form to match).
    pub fn parse(name: &str) -> Result<IscsiName, NameError> {
        check_full(name).map_err(NameError)?;
        Ok(IscsiName(name.to_owned()))
    }

    /// A name an initiator sent (InitiatorName, TargetName at login).
    /// Accepted as other targets accept it: a type prefix (`iqn.`, `eui.`
    /// or `naa.`, in any case), at most [`MAX_ISCSI_NAME_LEN`] bytes and no
    /// white space. The rest of the form is not enforced on peers, whose
    /// names the target only compares with its own and its ACLs' (which
    /// [`IscsiName::parse`] checked in full).
    pub fn from_peer(name: &str) -> Option<IscsiName> {
        let typed = ["iqn.", "eui.", "naa."].iter().any(|p| {
            name.get(..p.len())
                .is_some_and(|h| h.eq_ignore_ascii_case(p))
        });
        (typed && name.len() <= MAX_ISCSI_NAME_LEN && !name.contains(char::is_whitespace))
            .then(|| IscsiName(name.to_owned()))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name as an owned string.
    pub fn into_string(self) -> String {
        self.0
    }
}

impl fmt::Display for IscsiName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for IscsiName {
    type Err = NameError;
    fn from_str(s: &str) -> Result<Self, NameError> {
        IscsiName::parse(s)
    }
}

fn check_full(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if name.len() > MAX_ISCSI_NAME_LEN {
        return Err(format!(
            "is {} bytes; iSCSI names are at most {MAX_ISCSI_NAME_LEN} (RFC 7143 §4.2.7.1)",
            name.len()
        ));
    }
    if let Some(rest) = name.strip_prefix("iqn.") {
        return validate_iqn(rest).map_err(|m| format!("{name:?}: {m}"));
    }
    let (hex, lens): (&str, &[usize]) = if let Some(rest) = name.strip_prefix("eui.") {
        (rest, &[16])
    } else if let Some(rest) = name.strip_prefix("naa.") {
        (rest, &[16, 32])
    } else {
        return Err(format!(
            "{name:?} is not an iSCSI name: expected iqn.yyyy-mm.domain[:id], eui.<16 hex> \
             or naa.<16|32 hex> (RFC 7143 §4.2.7)"
        ));
    };
    if !lens.contains(&hex.len()) || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        let want = if lens.len() == 1 { "16" } else { "16 or 32" };
        return Err(format!(
            "{name:?}: expected {want} hexadecimal digits after the type prefix"
        ));
    }
    Ok(())
}

fn validate_iqn(rest: &str) -> Result<(), String> {
    if let Some(bad) = rest.chars().find(|&ch| !iqn_char_ok(ch)) {
        return Err(if bad.is_uppercase() {
            "iqn names must be lowercase (RFC 3722)".into()
        } else {
            format!("character {bad:?} is not allowed (letters, digits, '-', '.', ':')")
        });
    }
    // yyyy-mm.
    let date = rest
        .get(..7)
        .ok_or("missing the yyyy-mm date after \"iqn.\"")?;
    let (year, month) = date
        .split_once('-')
        .ok_or("expected a yyyy-mm date after \"iqn.\"")?;
    let year_ok = year.len() == 4 && year.bytes().all(|b| b.is_ascii_digit());
    let month_ok = month.len() == 2 && month.parse::<u8>().is_ok_and(|m| (1..=12).contains(&m));
    if !year_ok || !month_ok {
        return Err(format!("{date:?} is not a yyyy-mm date"));
    }
    let after_date = rest.get(7..).unwrap_or("");
    let authority = after_date
        .strip_prefix('.')
        .ok_or("expected \".\" and a reversed domain name after the date")?;
    let domain = authority.split(':').next().unwrap_or("");
    if domain.is_empty() || domain.split('.').any(|label| label.is_empty()) {
        return Err(
            "the naming authority must be a reversed domain name such as com.example".into(),
        );
    }
    if domain
        .split('.')
        .any(|l| l.starts_with('-') || l.ends_with('-'))
    {
        return Err("domain labels must not start or end with '-'".into());
    }
    Ok(())
}

fn iqn_char_ok(ch: char) -> bool {
    if ch.is_ascii() {
        ch.is_ascii_lowercase() || ch.is_ascii_digit() || matches!(ch, '-' | '.' | ':')
    } else {
        ch.is_alphanumeric() && !ch.is_uppercase()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_are_judged_by_prefix_length_and_spaces() {
        assert!(IscsiName::from_peer("IQN.1993-08.org.debian:01:abc").is_some());
        assert!(IscsiName::from_peer("naa.1234").is_some());
        assert!(IscsiName::from_peer("iqn.x y").is_none());
        assert!(IscsiName::from_peer("foo.bar").is_none());
        assert!(IscsiName::from_peer(&format!("iqn.{}", "a".repeat(220))).is_none());
    }

    #[test]
    fn configured_names_are_checked_in_full() {
        assert!(IscsiName::parse("iqn.2026-11.org.rustgt:default").is_ok());
        assert!(IscsiName::parse("IQN.2026-11.org.rustgt:default").is_err());
        assert!(IscsiName::parse("iqn.2026-13.org.rustgt").is_err());
        assert!(IscsiName::parse("eui.0123456789abcdef").is_ok());
        assert!(IscsiName::parse("naa.0123").is_err());
    }
}
