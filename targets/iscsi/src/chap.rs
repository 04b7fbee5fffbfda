//! Login security stage: AuthMethod negotiation and CHAP (RFC 7143 §12.1.3,
//! RFC 1994), one-way or mutual.
//!
//! Layer: sans-I/O; randomness (challenge, identifier) is supplied by the
//! driver. The login state machine feeds each security-stage request's keys
//! to [`SecurityNegotiator::process`] and asks [`SecurityNegotiator::is_complete`]
//! before letting the initiator leave the security stage.
//!
//! Guarantees:
//! - secrets never appear in `Debug` output;
//! - responses are compared in constant time;
//! - the target answers the initiator's challenge only after the initiator
//!   has proven itself, and refuses a reflected challenge.
//!
//! CHAP_A values: 5 = MD5 (RFC 1994, mandatory in RFC 7143 §12.1.3),
//! 7 = SHA-256 (IANA "PPP Authentication Algorithms" registry); 6 (SHA-1) and
//! 8 (SHA3-256) are not offered.

use std::fmt;

use md5::Md5;
use sha2::{Digest as _, Sha256};

use crate::pdu::LoginStatus;
use crate::text::{decode_binary, encode_hex, parse_number, KeyValues};

/// Shortest challenge we send (RFC 7143 §12.1.3 wants it unpredictable; 16
/// bytes matches the MD5 output size).
pub const MIN_CHALLENGE_LEN: usize = 16;
/// Longest challenge we send or accept.
pub const MAX_CHALLENGE_LEN: usize = 1024;

/// A CHAP name and secret.
#[derive(Clone, PartialEq, Eq)]
pub struct ChapCredentials {
    /// The CHAP name (CHAP_N) that goes with the secret.
    pub user: String,
    /// The shared secret, as bytes (never logged: `Debug` redacts it).
    pub secret: Vec<u8>,
}

impl fmt::Debug for ChapCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChapCredentials")
            .field("user", &self.user)
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// Who must authenticate whom.
#[derive(Debug, Clone, Default)]
pub struct ChapPolicy {
    /// The initiator must authenticate with these; `None` = no CHAP required.
    pub initiator: Option<ChapCredentials>,
    /// Mutual CHAP: the target answers the initiator's challenge with these
    /// (and then requires the initiator to send one).
    pub target: Option<ChapCredentials>,
}

impl ChapPolicy {
    /// Configuration check for the config loader: mutual CHAP needs initiator
    /// credentials too, and the two directions must not share a secret
    /// (RFC 7143 §12.1.3).
    pub fn validate(&self) -> Result<(), AuthError> {
        match (&self.initiator, &self.target) {
            (None, Some(_)) => Err(AuthError::Config(
                "mutual CHAP credentials require initiator credentials".into(),
            )),
            (Some(i), Some(t)) if i.secret == t.secret => Err(AuthError::Config(
                "initiator and target CHAP secrets must differ".into(),
            )),
            (Some(i), _) if i.secret.is_empty() => {
                Err(AuthError::Config("empty CHAP secret".into()))
            }
            _ => Ok(()),
        }
    }
}

/// CHAP hash algorithms we implement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChapAlgorithm {
    /// MD5 (CHAP_A=5), the algorithm every initiator supports.
    Md5,
    /// SHA-256 (CHAP_A=7, RFC 7143 §12.1.3).
    Sha256,
}

impl ChapAlgorithm {
    /// Supported CHAP_A codes; the initiator's list order decides between them.
    fn from_code(code: u64) -> Option<Self> {
        match code {
            5 => Some(ChapAlgorithm::Md5),
            7 => Some(ChapAlgorithm::Sha256),
            _ => None,
        }
    }

    /// The CHAP_A code.
    pub fn code(self) -> u8 {
        match self {
            ChapAlgorithm::Md5 => 5,
            ChapAlgorithm::Sha256 => 7,
        }
    }

    /// RFC 1994 §4.1 response: H(identifier || secret || challenge).
    pub fn response(self, id: u8, secret: &[u8], challenge: &[u8]) -> Vec<u8> {
        match self {
            ChapAlgorithm::Md5 => Md5::new()
                .chain_update([id])
                .chain_update(secret)
                .chain_update(challenge)
                .finalize()
                .to_vec(),
            ChapAlgorithm::Sha256 => Sha256::new()
                .chain_update([id])
                .chain_update(secret)
                .chain_update(challenge)
                .finalize()
                .to_vec(),
        }
    }
}

/// Security-stage failures.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// A key out of order in the exchange (e.g. a renegotiated AuthMethod,
    /// CHAP_A after the algorithm was chosen); the message names it.
    #[error("security protocol error: {0}")]
    Protocol(String),
    /// A security key whose value does not parse.
    #[error("invalid value for {key}")]
    InvalidValue {
        /// The key.
        key: String,
    },
    /// The named security key appeared twice in one request.
    #[error("key {0} sent more than once")]
    DuplicateKey(String),
    /// The initiator's CHAP_C for mutual CHAP is empty or longer than
    /// [`MAX_CHALLENGE_LEN`] bytes (its length).
    #[error("challenge length {0} out of bounds")]
    BadChallengeLength(usize),
    /// CHAP_A offered neither MD5 nor SHA-256.
    #[error("no supported CHAP algorithm offered")]
    UnsupportedAlgorithm,
    /// CHAP_N is not the configured initiator name.
    #[error("unknown CHAP user")]
    UnknownUser,
    /// CHAP_R does not match the response the secret gives.
    #[error("wrong CHAP response")]
    BadResponse,
    /// The initiator's challenge is the target's own (a reflection attack).
    #[error("initiator reflected the target's challenge")]
    Reflection,
    /// The initiator asked for mutual CHAP (sent CHAP_I/CHAP_C) but the
    /// target has no credentials of its own.
    #[error("initiator challenged the target but mutual CHAP is not configured")]
    MutualNotConfigured,
    /// The target requires mutual CHAP and the initiator sent no challenge.
    #[error("mutual CHAP required but the initiator sent no challenge")]
    MutualRequired,
    /// The initiator asked to leave the security stage before the exchange
    /// completed.
    #[error("authentication has not completed")]
    NotAuthenticated,
    /// A call after an earlier failure: the exchange stays failed.
    #[error("authentication already failed")]
    Failed,
    /// The target's own CHAP configuration is unusable (see
    /// [`ChapPolicy::validate`]).
    #[error("target CHAP configuration error: {0}")]
    Config(String),
}

impl AuthError {
    /// Login response status for this failure (RFC 7143 §11.13.5).
    pub fn login_status(&self) -> LoginStatus {
        match self {
            AuthError::Protocol(_)
            | AuthError::InvalidValue { .. }
            | AuthError::DuplicateKey(_)
            | AuthError::BadChallengeLength(_) => LoginStatus::INITIATOR_ERROR,
            AuthError::UnsupportedAlgorithm
            | AuthError::UnknownUser
            | AuthError::BadResponse
            | AuthError::Reflection
            | AuthError::MutualNotConfigured
            | AuthError::MutualRequired
            | AuthError::NotAuthenticated
            | AuthError::Failed => LoginStatus::AUTHENTICATION_FAILURE,
            AuthError::Config(_) => LoginStatus::TARGET_ERROR,
        }
    }
}

/// True for keys that belong to the security stage (AuthMethod and the
/// per-method keys of §12.1), which the operational [`crate::negotiate::Negotiator`]
/// must not see outside it.
pub fn is_security_key(key: &str) -> bool {
    key == "AuthMethod"
        || ["CHAP_", "SRP_", "KRB_", "SPKM_"]
            .iter()
            .any(|p| key.starts_with(p))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for AuthMethod.
    Start,
    /// AuthMethod=CHAP agreed; waiting for CHAP_A.
    AwaitAlgorithm,
    /// Challenge sent; waiting for CHAP_N/CHAP_R.
    AwaitResponse(ChapAlgorithm),
    /// AuthMethod negotiation ended in Reject.
    Rejected,
    /// Authentication done (CHAP verified, or None agreed).
    Done,
    Failed,
}

/// Keys of one request that make up the initiator's CHAP answer.
#[derive(Default)]
struct ChapReply<'a> {
    name: Option<&'a str>,
    response: Option<&'a str>,
    id: Option<&'a str>,
    challenge: Option<&'a str>,
}

impl ChapReply<'_> {
    fn is_empty(&self) -> bool {
        self.name.is_none()
            && self.response.is_none()
            && self.id.is_none()
            && self.challenge.is_none()
    }
}

/// Drives the security stage of one connection's login.
#[derive(Debug)]
pub struct SecurityNegotiator {
    policy: ChapPolicy,
    challenge: Vec<u8>,
    identifier: u8,
    state: State,
    /// The CHAP_N the initiator answered with (cut to [`MAX_LOGGED_USER`]
    /// bytes), for log lines.
    user: Option<String>,
}

/// Longest CHAP user name kept for log lines.
const MAX_LOGGED_USER: usize = 64;

impl SecurityNegotiator {
    /// `challenge`: random bytes from the driver ([`MIN_CHALLENGE_LEN`]..=
    /// [`MAX_CHALLENGE_LEN`]); `identifier`: random CHAP_I.
    pub fn new(policy: ChapPolicy, challenge: Vec<u8>, identifier: u8) -> Self {
        SecurityNegotiator {
            policy,
            challenge,
            identifier,
            state: State::Start,
            user: None,
        }
    }

    /// The CHAP user the initiator named, if it got that far (at most 64
    /// bytes of it).
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// True once the initiator proved itself with CHAP (not when no
    /// authentication was needed).
    pub fn authenticated(&self) -> bool {
        self.state == State::Done && self.requires_chap()
    }

    fn requires_chap(&self) -> bool {
        self.policy.initiator.is_some()
    }

    /// True when the initiator may leave the security stage: CHAP succeeded,
    /// or the policy requires no authentication (whether AuthMethod=None was
    /// agreed or nothing was negotiated at all).
    pub fn is_complete(&self) -> bool {
        match self.state {
            State::Done => true,
            State::Start | State::Rejected => !self.requires_chap(),
            State::AwaitAlgorithm | State::AwaitResponse(_) | State::Failed => false,
        }
    }

    /// [`is_complete`](Self::is_complete) as a `Result`, for the point where
    /// the initiator asks to transit out of the security stage.
    pub fn check_transit(&self) -> Result<(), AuthError> {
        if self.is_complete() {
            Ok(())
        } else {
            Err(AuthError::NotAuthenticated)
        }
    }

    /// Feed the keys of one security-stage login request; returns the keys to
    /// answer with. Keys that are not security keys are ignored. Any error is
    /// final: later calls fail with [`AuthError::Failed`].
    pub fn process(&mut self, offered: &[(String, String)]) -> Result<KeyValues, AuthError> {
        if self.state == State::Failed {
            return Err(AuthError::Failed);
        }
        let result = self.process_inner(offered);
        if let Err(e) = &result {
            tracing::debug!(error = %e, "security negotiation failed");
            self.state = State::Failed;
        }
        result
    }

    fn process_inner(&mut self, offered: &[(String, String)]) -> Result<KeyValues, AuthError> {
        check_duplicates(offered)?;
        let mut answers = KeyValues::new();
        let mut reply = ChapReply::default();
        for (key, value) in offered {
            match key.as_str() {
                "AuthMethod" => answers.push(self.auth_method(value)?),
                "CHAP_A" => answers.extend(self.chap_algorithm(value)?),
                "CHAP_N" => reply.name = Some(value),
                "CHAP_R" => reply.response = Some(value),
                "CHAP_I" => reply.id = Some(value),
                "CHAP_C" => reply.challenge = Some(value),
                k if is_security_key(k) => answers.push((key.clone(), "NotUnderstood".into())),
                _ => {}
            }
        }
        if !reply.is_empty() {
            answers.extend(self.chap_reply(&reply)?);
        }
        Ok(answers)
    }

    /// AuthMethod (§12.1): a list negotiation (§6.2) that prefers None when
    /// the policy allows it.
    fn auth_method(&mut self, value: &str) -> Result<(String, String), AuthError> {
        if self.state != State::Start {
            return Err(AuthError::Protocol("AuthMethod renegotiated".into()));
        }
        let offered: Vec<&str> = value.split(',').collect();
        if offered.iter().any(|m| m.is_empty()) {
            return Err(AuthError::InvalidValue {
                key: "AuthMethod".into(),
            });
        }
        let answer = if self.requires_chap() {
            if offered.contains(&"CHAP") {
                self.state = State::AwaitAlgorithm;
                "CHAP"
            } else {
                self.state = State::Rejected;
                "Reject"
            }
        } else if offered.contains(&"None") {
            self.state = State::Done;
            "None"
        } else {
            self.state = State::Rejected;
            "Reject"
        };
        Ok(("AuthMethod".into(), answer.into()))
    }

    /// CHAP_A: pick the first supported algorithm in the initiator's order and
    /// send our identifier and challenge.
    fn chap_algorithm(&mut self, value: &str) -> Result<KeyValues, AuthError> {
        if self.state != State::AwaitAlgorithm {
            return Err(AuthError::Protocol("unexpected CHAP_A".into()));
        }
        let len = self.challenge.len();
        if !(MIN_CHALLENGE_LEN..=MAX_CHALLENGE_LEN).contains(&len) {
            return Err(AuthError::Config(format!("challenge length {len}")));
        }
        let alg = value
            .split(',')
            .filter_map(|v| parse_number(v).ok())
            .find_map(ChapAlgorithm::from_code)
            .ok_or(AuthError::UnsupportedAlgorithm)?;
        self.state = State::AwaitResponse(alg);
        Ok(vec![
            ("CHAP_A".into(), alg.code().to_string()),
            ("CHAP_I".into(), self.identifier.to_string()),
            ("CHAP_C".into(), encode_hex(&self.challenge)),
        ])
    }

    /// CHAP_N/CHAP_R (and CHAP_I/CHAP_C for mutual CHAP).
    fn chap_reply(&mut self, reply: &ChapReply<'_>) -> Result<KeyValues, AuthError> {
        let State::AwaitResponse(alg) = self.state else {
            return Err(AuthError::Protocol("unexpected CHAP response".into()));
        };
        if let Some(name) = reply.name {
            let mut end = name.len().min(MAX_LOGGED_USER);
            while !name.is_char_boundary(end) {
                end -= 1;
            }
            self.user = name.get(..end).map(str::to_owned);
        }
        let (Some(name), Some(response)) = (reply.name, reply.response) else {
            return Err(AuthError::Protocol(
                "CHAP_N and CHAP_R must come together".into(),
            ));
        };
        let mutual = match (reply.id, reply.challenge) {
            (Some(id), Some(c)) => Some((parse_identifier(id)?, parse_challenge(c)?)),
            (None, None) => None,
            _ => {
                return Err(AuthError::Protocol(
                    "CHAP_I and CHAP_C must come together".into(),
                ))
            }
        };
        self.verify_initiator(alg, name, response)?;
        let answers = self.answer_mutual(alg, mutual)?;
        self.state = State::Done;
        Ok(answers)
    }

    fn verify_initiator(
        &self,
        alg: ChapAlgorithm,
        name: &str,
        response: &str,
    ) -> Result<(), AuthError> {
        let creds = self
            .policy
            .initiator
            .as_ref()
            .ok_or_else(|| AuthError::Protocol("CHAP not negotiated".into()))?;
        let received = decode_binary(response).map_err(|_| AuthError::InvalidValue {
            key: "CHAP_R".into(),
        })?;
        let expected = alg.response(self.identifier, &creds.secret, &self.challenge);
        // Check the response even for an unknown name: same work either way.
        let response_ok = constant_time_eq(&received, &expected);
        if name != creds.user {
            return Err(AuthError::UnknownUser);
        }
        if !response_ok {
            return Err(AuthError::BadResponse);
        }
        Ok(())
    }

    fn answer_mutual(
        &self,
        alg: ChapAlgorithm,
        mutual: Option<(u8, Vec<u8>)>,
    ) -> Result<KeyValues, AuthError> {
        match (mutual, &self.policy.target) {
            (None, None) => Ok(KeyValues::new()),
            (None, Some(_)) => Err(AuthError::MutualRequired),
            (Some(_), None) => Err(AuthError::MutualNotConfigured),
            (Some((id, challenge)), Some(target)) => {
                if challenge == self.challenge {
                    return Err(AuthError::Reflection);
                }
                if self
                    .policy
                    .initiator
                    .as_ref()
                    .is_some_and(|i| i.secret == target.secret)
                {
                    return Err(AuthError::Config(
                        "initiator and target CHAP secrets must differ".into(),
                    ));
                }
                let r = alg.response(id, &target.secret, &challenge);
                Ok(vec![
                    ("CHAP_N".into(), target.user.clone()),
                    ("CHAP_R".into(), encode_hex(&r)),
                ])
            }
        }
    }
}

fn check_duplicates(offered: &[(String, String)]) -> Result<(), AuthError> {
    for (i, (key, _)) in offered.iter().enumerate() {
        if !is_security_key(key) {
            continue;
        }
        if offered.iter().skip(i + 1).any(|(k, _)| k == key) {
            return Err(AuthError::DuplicateKey(key.clone()));
        }
    }
    Ok(())
}

fn parse_identifier(v: &str) -> Result<u8, AuthError> {
    parse_number(v)
        .ok()
        .and_then(|n| u8::try_from(n).ok())
        .ok_or_else(|| AuthError::InvalidValue {
            key: "CHAP_I".into(),
        })
}

fn parse_challenge(v: &str) -> Result<Vec<u8>, AuthError> {
    let c = decode_binary(v).map_err(|_| AuthError::InvalidValue {
        key: "CHAP_C".into(),
    })?;
    if c.is_empty() || c.len() > MAX_CHALLENGE_LEN {
        return Err(AuthError::BadChallengeLength(c.len()));
    }
    Ok(c)
}

/// Equality without early exit on the first differing byte.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    std::hint::black_box(a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y))) == 0
}
