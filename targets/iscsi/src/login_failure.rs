//! Why a login fails, by cause, and the one mapping from that cause to
//! what goes on the wire (the Login Response status class and detail, RFC
//! 7143 §11.13.5) and to the log text. The login code names the cause;
//! only [`LoginFailure::status`] picks the status.

use crate::chap::AuthError;
use crate::negotiate::NegotiationError;
use crate::pdu::LoginStatus;
use crate::session::RegisterError;

/// Why a login is refused; the connection answers with
/// [`LoginFailure::status`] and closes.
#[derive(Debug)]
pub(crate) enum LoginFailure {
    /// VersionMin above the one version there is.
    UnsupportedVersion,
    /// ISID, TSIH or CID changed between the requests of one login.
    IdentityChanged,
    /// A stage or a transition the login phase does not allow.
    BadStageTransition,
    /// Login text longer than the text limit.
    TextTooLong,
    /// Login text that is not key=value pairs.
    MalformedText,
    /// No InitiatorName in the leading login.
    MissingInitiatorName,
    /// A SessionType other than Normal or Discovery.
    UnknownSessionType,
    /// No TargetName in the leading login of a Normal session.
    MissingTargetName,
    /// No target of that name.
    NoSuchTarget,
    /// The target is not served on the portal the connection came in at.
    NotServedOnPortal,
    /// The initiator is not in the target's ACL.
    NotInAcl,
    /// The security negotiation (CHAP) failed.
    Auth(AuthError),
    /// The initiator left the security stage before authenticating.
    AuthNotCompleted,
    /// Security keys in the operational stage.
    SecurityKeysInOperational,
    /// The initiator skipped the security stage the target requires.
    AuthRequired,
    /// The operational negotiation failed.
    Negotiation(NegotiationError),
    /// The session table's lock is poisoned.
    SessionTableLock,
    /// A login to add a connection to a session that has its one.
    SessionHasConnection,
    /// A login to add a connection to a session that does not exist.
    UnknownTsih,
    /// Not a failure: the target's logins at this portal are redirected
    /// (status class 1, with a TargetAddress).
    Moved {
        /// The TargetAddress value.
        address: String,
        /// 0x0102 rather than 0x0101.
        permanent: bool,
    },
    /// The session could not be registered.
    Register(RegisterError),
}

impl LoginFailure {
    /// The Login Response status (class and detail) that goes on the wire.
    pub(crate) fn status(&self) -> LoginStatus {
        match self {
            LoginFailure::UnsupportedVersion => LoginStatus::UNSUPPORTED_VERSION,
            LoginFailure::IdentityChanged
            | LoginFailure::BadStageTransition
            | LoginFailure::TextTooLong
            | LoginFailure::MalformedText
            | LoginFailure::SecurityKeysInOperational => LoginStatus::INITIATOR_ERROR,
            LoginFailure::MissingInitiatorName | LoginFailure::MissingTargetName => {
                LoginStatus::MISSING_PARAMETER
            }
            LoginFailure::UnknownSessionType => LoginStatus::SESSION_TYPE_NOT_SUPPORTED,
            // Not "Target moved" through a portal that does not serve the
            // target: see `LoginState::identify`.
            LoginFailure::NoSuchTarget | LoginFailure::NotServedOnPortal => LoginStatus::NOT_FOUND,
            LoginFailure::NotInAcl => LoginStatus::AUTHORIZATION_FAILURE,
            LoginFailure::Auth(e) => e.login_status(),
            LoginFailure::AuthNotCompleted | LoginFailure::AuthRequired => {
                LoginStatus::AUTHENTICATION_FAILURE
            }
            LoginFailure::Negotiation(e) => e.login_status(),
            LoginFailure::SessionTableLock => LoginStatus::TARGET_ERROR,
            LoginFailure::SessionHasConnection => LoginStatus::TOO_MANY_CONNECTIONS,
            LoginFailure::UnknownTsih => LoginStatus::SESSION_DOES_NOT_EXIST,
            LoginFailure::Register(_) => LoginStatus::OUT_OF_RESOURCES,
            LoginFailure::Moved {
                permanent: true, ..
            } => LoginStatus::TARGET_MOVED_PERMANENTLY,
            LoginFailure::Moved { .. } => LoginStatus::TARGET_MOVED_TEMPORARILY,
        }
    }

    /// Why, for the log.
    pub(crate) fn why(&self) -> &'static str {
        match self {
            LoginFailure::UnsupportedVersion => "version",
            LoginFailure::IdentityChanged => "ISID/TSIH/CID changed during login",
            LoginFailure::BadStageTransition => "bad stage transition",
            LoginFailure::TextTooLong => "login text too long",
            LoginFailure::MalformedText => "malformed login text",
            LoginFailure::MissingInitiatorName => "InitiatorName missing",
            LoginFailure::UnknownSessionType => "unknown SessionType",
            LoginFailure::MissingTargetName => "TargetName missing",
            LoginFailure::NoSuchTarget => "no such target",
            LoginFailure::NotServedOnPortal => "target not served on this portal",
            LoginFailure::NotInAcl => "initiator not in the target's ACL",
            LoginFailure::Auth(_) => "authentication",
            LoginFailure::AuthNotCompleted => "authentication not completed",
            LoginFailure::SecurityKeysInOperational => "security keys in operational stage",
            LoginFailure::AuthRequired => "authentication required",
            LoginFailure::Negotiation(_) => "negotiation",
            LoginFailure::SessionTableLock => "lock",
            LoginFailure::SessionHasConnection => "session has its connection",
            LoginFailure::UnknownTsih => "unknown TSIH",
            LoginFailure::Register(e) => e.reason(),
            LoginFailure::Moved { .. } => "target moved",
        }
    }

    /// The underlying error's own words, when there is one.
    pub(crate) fn detail(&self) -> Option<String> {
        match self {
            LoginFailure::Auth(e) => Some(e.to_string()),
            LoginFailure::Negotiation(e) => Some(e.to_string()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_those_of_rfc_7143() {
        assert_eq!(
            LoginFailure::UnsupportedVersion.status(),
            LoginStatus::UNSUPPORTED_VERSION
        );
        assert_eq!(
            LoginFailure::NotServedOnPortal.status(),
            LoginStatus::NOT_FOUND
        );
        assert_eq!(
            LoginFailure::NotInAcl.status(),
            LoginStatus::AUTHORIZATION_FAILURE
        );
        assert_eq!(
            LoginFailure::Auth(AuthError::UnknownUser).status(),
            LoginStatus::AUTHENTICATION_FAILURE
        );
        assert_eq!(
            LoginFailure::Register(RegisterError::NoTsih).status(),
            LoginStatus::OUT_OF_RESOURCES
        );
        assert_eq!(
            LoginFailure::SessionHasConnection.status(),
            LoginStatus::TOO_MANY_CONNECTIONS
        );
    }
}
