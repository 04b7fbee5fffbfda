//! The session table of one target process: TSIH assignment and session
//! reinstatement (RFC 7143 §6.3.5), and the [`LoginBrake`] (failed
//! authentications by source address), the other state every login
//! shares. Pure data; the driver keeps it behind a lock shared by all
//! connections.

use std::collections::HashMap;
use std::sync::Arc;

use rustgt_scsi::Nexus;

use crate::brake::LoginBrake;
use crate::negotiate::{SessionParams, SessionType};

/// Who is on the other end, once logged in.
#[derive(Debug, Clone)]
pub struct SessionInfo {
    /// TargetName of the session (empty for a discovery session).
    pub target: String,
    /// InitiatorName the initiator logged in with.
    pub initiator: String,
    /// ISID: the initiator part of the session identifier.
    pub isid: [u8; 6],
    /// TSIH the target gave the session.
    pub tsih: u16,
    /// CID of this connection.
    pub cid: u16,
    /// Normal or Discovery.
    pub session_type: SessionType,
    /// The session's I_T nexus, as the SCSI core knows it (port names built
    /// from the initiator name and ISID, and the target name and TPGT).
    pub nexus: Arc<Nexus>,
    /// The operational parameters negotiated at login.
    pub params: SessionParams,
}

/// Identity of a session: initiator name plus ISID (RFC 7143 §4.4.1 "SSID").
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionKey {
    /// InitiatorName (compared as given; [`SessionTable::sessions_of`]
    /// ignores ASCII case).
    pub initiator: String,
    /// ISID.
    pub isid: [u8; 6],
    /// TargetName: the same ISID may hold one session per target.
    pub target: String,
}

/// A registered session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionEntry {
    /// The TSIH assigned at registration, non-zero.
    pub tsih: u16,
    /// Driver's id for the (single) connection of the session.
    pub conn_id: u64,
}

/// Outcome of registering a new session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registered {
    /// The new session's TSIH, non-zero and unique among registered sessions.
    pub tsih: u16,
    /// The connection of a session with the same key, which must now be
    /// closed and its tasks aborted (session reinstatement).
    pub reinstated: Option<u64>,
}

/// Why a session could not be registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegisterError {
    /// The initiator name holds as many sessions as it may.
    TooManySessions,
    /// Every TSIH is in use.
    NoTsih,
}

impl RegisterError {
    /// Why, for the log.
    pub fn reason(self) -> &'static str {
        match self {
            RegisterError::TooManySessions => "initiator has too many sessions",
            RegisterError::NoTsih => "no TSIH left",
        }
    }
}

/// Every Normal session of the process, by [`SessionKey`], with the
/// TSIHs in use and the [`LoginBrake`]. One per process, shared by every
/// connection of both transports behind a lock.
#[derive(Debug, Default)]
pub struct SessionTable {
    by_key: HashMap<SessionKey, SessionEntry>,
    next_tsih: u16,
    brake: LoginBrake,
}

impl SessionTable {
    /// An empty table: no sessions, no brake entries.
    pub fn new() -> Self {
        Self::default()
    }

    /// Register a session for `conn_id`, replacing any session with the same
    /// key (reinstatement, which does not add to the initiator's count).
    /// Refused when the initiator name already holds `max_per_initiator`
    /// other sessions, or when all 65535 TSIHs are in use; a refusal
    /// changes nothing.
    pub fn register(
        &mut self,
        key: SessionKey,
        conn_id: u64,
        max_per_initiator: usize,
    ) -> Result<Registered, RegisterError> {
        if !self.by_key.contains_key(&key) && self.sessions_of(&key.initiator) >= max_per_initiator
        {
            return Err(RegisterError::TooManySessions);
        }
        let tsih = self.alloc_tsih().ok_or(RegisterError::NoTsih)?;
        let old = self.by_key.insert(key, SessionEntry { tsih, conn_id });
        Ok(Registered {
            tsih,
            reinstated: old.map(|e| e.conn_id),
        })
    }

    /// Sessions registered for `initiator` (names compare as iSCSI names
    /// do, ignoring ASCII case).
    pub fn sessions_of(&self, initiator: &str) -> usize {
        self.by_key
            .keys()
            .filter(|k| k.initiator.eq_ignore_ascii_case(initiator))
            .count()
    }

    /// Look up a session by TSIH (a login with a non-zero TSIH).
    pub fn find_tsih(&self, tsih: u16) -> Option<(&SessionKey, &SessionEntry)> {
        self.by_key.iter().find(|(_, e)| e.tsih == tsih)
    }

    /// Forget the session of `conn_id` if it is still the registered one.
    pub fn remove_conn(&mut self, conn_id: u64) {
        self.by_key.retain(|_, e| e.conn_id != conn_id);
    }

    /// Sessions registered (Normal ones: discovery sessions are not).
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Whether no session is registered.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// Failed authentications by source address (see [`crate::brake`]).
    pub fn brake(&self) -> &LoginBrake {
        &self.brake
    }

    /// The login brake, to record a failed or successful authentication.
    pub fn brake_mut(&mut self) -> &mut LoginBrake {
        &mut self.brake
    }

    fn alloc_tsih(&mut self) -> Option<u16> {
        // TSIH 0 is reserved for "new session" (RFC 7143 §11.12.6).
        for _ in 0..=u16::MAX {
            self.next_tsih = self.next_tsih.wrapping_add(1);
            if self.next_tsih == 0 {
                continue;
            }
            let t = self.next_tsih;
            if !self.by_key.values().any(|e| e.tsih == t) {
                return Some(t);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: &str, isid: u8) -> SessionKey {
        SessionKey {
            initiator: i.into(),
            isid: [0x80, 0, 0, 0, 0, isid],
            target: "iqn.t".into(),
        }
    }

    #[test]
    fn tsih_nonzero_unique_and_reinstatement() {
        let mut t = SessionTable::new();
        let a = t.register(key("i1", 1), 10, 64).unwrap();
        let b = t.register(key("i1", 2), 11, 64).unwrap();
        assert_ne!(a.tsih, 0);
        assert_ne!(a.tsih, b.tsih);
        assert_eq!(a.reinstated, None);
        let c = t.register(key("i1", 1), 12, 64).unwrap();
        assert_eq!(c.reinstated, Some(10));
        assert_eq!(t.len(), 2);
        t.remove_conn(12);
        assert_eq!(t.len(), 1);
        assert!(t.find_tsih(b.tsih).is_some());
    }

    #[test]
    fn sessions_per_initiator_are_bounded_but_reinstatement_is_not_refused() {
        let mut t = SessionTable::new();
        t.register(key("iqn.i1", 1), 10, 2).unwrap();
        t.register(key("iqn.i1", 2), 11, 2).unwrap();
        // A third ISID of the same name (in any case) is refused ...
        assert_eq!(
            t.register(key("IQN.I1", 3), 12, 2),
            Err(RegisterError::TooManySessions)
        );
        assert_eq!(t.len(), 2);
        // ... other initiators are not affected ...
        t.register(key("iqn.i2", 1), 13, 2).unwrap();
        // ... reinstating an existing session is not a new one ...
        let r = t.register(key("iqn.i1", 2), 14, 2).unwrap();
        assert_eq!(r.reinstated, Some(11));
        assert_eq!(t.sessions_of("iqn.i1"), 2);
        // ... and once a session goes, a new one is accepted again.
        t.remove_conn(10);
        t.register(key("iqn.i1", 3), 15, 2).unwrap();
        assert_eq!(t.sessions_of("iqn.i1"), 2);
    }
}
