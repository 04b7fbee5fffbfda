//! CHAP credentials (`chap` tables of targets and of discovery) and their
//! checks; secrets never appear in `Debug` output or error messages.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::keypath::{Checker, KeyPath};

/// RFC 7143 §9.2.1: a CHAP secret of fewer than 96 bits needs IPsec, which
/// rustgt does not provide, so shorter secrets are refused.
pub const MIN_CHAP_SECRET_LEN: usize = 12;
/// Longest CHAP name or secret accepted (a text-key value, RFC 7143 §6.1).
pub const MAX_CHAP_FIELD_LEN: usize = 255;

/// CHAP credentials (RFC 7143 §12.1.3). `user`/`secret` authenticate the
/// initiator; `mutual_*`, when set, are what the target answers with when the
/// initiator asks it to authenticate itself.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChapSettings {
    pub user: String,
    pub secret: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mutual_user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mutual_secret: Option<String>,
}

impl fmt::Debug for ChapSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChapSettings")
            .field("user", &self.user)
            .field("secret", &"<redacted>")
            .field("mutual_user", &self.mutual_user)
            .field(
                "mutual_secret",
                &self.mutual_secret.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

pub(super) fn check_chap(c: &mut Checker, key: &KeyPath, chap: &ChapSettings) {
    check_chap_name(c, key.key("user"), &chap.user);
    check_chap_secret(c, key.key("secret"), &chap.secret);
    match (&chap.mutual_user, &chap.mutual_secret) {
        (Some(user), Some(secret)) => {
            check_chap_name(c, key.key("mutual_user"), user);
            check_chap_secret(c, key.key("mutual_secret"), secret);
            if secret == &chap.secret {
                // RFC 7143 §9.2.1: a secret used to authenticate initiators
                // must not also authenticate the target.
                c.fail(key.key("mutual_secret"), "must differ from secret");
            }
        }
        (Some(_), None) => c.fail(
            key.key("mutual_secret"),
            "is required when mutual_user is set",
        ),
        (None, Some(_)) => c.fail(
            key.key("mutual_user"),
            "is required when mutual_secret is set",
        ),
        (None, None) => {}
    }
}

fn check_chap_name(c: &mut Checker, key: KeyPath, name: &str) {
    if name.is_empty() || name.len() > MAX_CHAP_FIELD_LEN {
        c.fail(key, format!("must be 1..={MAX_CHAP_FIELD_LEN} bytes long"));
    } else if name.chars().any(char::is_control) {
        c.fail(key, "must not contain control characters");
    }
}

/// Never echoes the secret itself.
fn check_chap_secret(c: &mut Checker, key: KeyPath, secret: &str) {
    let len = secret.len();
    if len < MIN_CHAP_SECRET_LEN {
        c.fail(
            key,
            format!(
                "is {len} bytes; CHAP secrets must be at least {MIN_CHAP_SECRET_LEN} bytes \
                 (96 bits, RFC 7143 §9.2.1)"
            ),
        );
    } else if len > MAX_CHAP_FIELD_LEN {
        c.fail(
            key,
            format!("is {len} bytes; at most {MAX_CHAP_FIELD_LEN} are accepted"),
        );
    } else if secret.chars().any(char::is_control) {
        c.fail(key, "must not contain control characters");
    }
}
