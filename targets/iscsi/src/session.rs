//! The session table of one target process: TSIH assignment and session
//! reinstatement (RFC 7143 §6.3.5), and the [`LoginBrake`] (failed
//! authentications by source address), the other state every login
//! shares. Pure data; the driver keeps it behind a lock shared by all
//! connections.

use std::collections::HashMap;

use crate::brake::LoginBrake;

/// Identity of a session: initiator name plus ISID (RFC 7143 §4.4.1 "SSID").
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionKey {
    pub initiator: String,
    pub isid: [u8; 6],
    pub target: String,
}

/// A registered session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionEntry {
    pub tsih: u16,
    /// Driver's id for the (single) connection of the session.
    pub conn_id: u64,
}

/// Outcome of registering a new session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registered {
    pub tsih: u16,
    /// The connection of a session with the same key, which must now be
    /// closed and its tasks aborted (session reinstatement).
    pub reinstated: Option<u64>,
}

#[derive(Debug, Default)]
pub struct SessionTable {
    by_key: HashMap<SessionKey, SessionEntry>,
    next_tsih: u16,
    brake: LoginBrake,
}

impl SessionTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Register a session for `conn_id`, replacing any session with the same
    /// key. Returns `None` when all 65535 TSIHs are in use.
    pub fn register(&mut self, key: SessionKey, conn_id: u64) -> Option<Registered> {
        let old = self.by_key.remove(&key);
        let tsih = self.alloc_tsih()?;
        self.by_key.insert(key, SessionEntry { tsih, conn_id });
        Some(Registered {
            tsih,
            reinstated: old.map(|e| e.conn_id),
        })
    }

    /// Look up a session by TSIH (a login with a non-zero TSIH).
    pub fn find_tsih(&self, tsih: u16) -> Option<(&SessionKey, &SessionEntry)> {
        self.by_key.iter().find(|(_, e)| e.tsih == tsih)
    }

    /// Forget the session of `conn_id` if it is still the registered one.
    pub fn remove_conn(&mut self, conn_id: u64) {
        self.by_key.retain(|_, e| e.conn_id != conn_id);
    }

    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// Failed authentications by source address (see [`crate::brake`]).
    pub fn brake(&self) -> &LoginBrake {
        &self.brake
    }

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
        let a = t.register(key("i1", 1), 10).unwrap();
        let b = t.register(key("i1", 2), 11).unwrap();
        assert_ne!(a.tsih, 0);
        assert_ne!(a.tsih, b.tsih);
        assert_eq!(a.reinstated, None);
        let c = t.register(key("i1", 1), 12).unwrap();
        assert_eq!(c.reinstated, Some(10));
        assert_eq!(t.len(), 2);
        t.remove_conn(12);
        assert_eq!(t.len(), 1);
        assert!(t.find_tsih(b.tsih).is_some());
    }
}
