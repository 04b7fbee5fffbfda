//! What the protocol core needs to know about the targets a portal serves:
//! names, portal groups, ACLs and CHAP. The driver builds a [`PortalConfig`]
//! snapshot; a live change swaps the `Arc`, so logins in progress keep the
//! snapshot they started with.

use std::time::Duration;

use crate::chap::ChapPolicy;
use crate::negotiate::Limits;

/// One iSCSI target as login and discovery see it.
#[derive(Debug, Clone)]
pub struct TargetInfo {
    /// iSCSI name (RFC 7143 §4.2.7).
    pub name: String,
    pub alias: Option<String>,
    /// Target portal group tag (RFC 7143 §13.9).
    pub tpgt: u16,
    /// `host:port` of every portal of the group, for SendTargets.
    pub portals: Vec<String>,
    /// Initiator names allowed to log in; empty means any.
    pub acl: Vec<String>,
    pub chap: ChapPolicy,
}

impl TargetInfo {
    /// Whether `initiator` may log in to this target or see it in discovery.
    pub fn allows(&self, initiator: &str) -> bool {
        self.acl.is_empty() || self.acl.iter().any(|a| a.eq_ignore_ascii_case(initiator))
    }
}

/// Everything a connection consults during its life.
#[derive(Debug, Clone)]
pub struct PortalConfig {
    pub targets: Vec<TargetInfo>,
    /// CHAP for discovery sessions.
    pub discovery_chap: ChapPolicy,
    /// Negotiation limits and preferences.
    pub limits: Limits,
    /// Commands the target accepts in flight per session (CmdSN window).
    pub queue_depth: u32,
    /// Idle time before the target pings with NOP-In; `None` disables.
    pub nop_interval: Option<Duration>,
    /// How long a NOP-In ping may go unanswered before the connection drops.
    pub nop_timeout: Duration,
    /// Largest ExpectedDataTransferLength accepted for a write; larger
    /// commands fail with CHECK CONDITION so memory stays bounded.
    pub max_write_len: u32,
    /// Largest text (login or Text request) accepted, across C-bit PDUs.
    pub max_text_len: usize,
    /// How long a connection may take from accept to full feature phase;
    /// past it the connection closes (a peer that never logs in, or stops
    /// halfway through a PDU, holds nothing for longer).
    pub login_timeout: Duration,
    /// Normal sessions one initiator name may hold at once (over all its
    /// ISIDs and targets); a login past it fails with Out of Resources.
    pub max_sessions_per_initiator: usize,
}

impl PortalConfig {
    pub fn target(&self, name: &str) -> Option<&TargetInfo> {
        self.targets
            .iter()
            .find(|t| t.name.eq_ignore_ascii_case(name))
    }
}

impl Default for PortalConfig {
    fn default() -> Self {
        PortalConfig {
            targets: Vec::new(),
            discovery_chap: ChapPolicy::default(),
            limits: Limits::default(),
            queue_depth: 128,
            nop_interval: Some(Duration::from_secs(15)),
            nop_timeout: Duration::from_secs(30),
            max_write_len: 32 << 20,
            max_text_len: 64 << 10,
            login_timeout: Duration::from_secs(15),
            max_sessions_per_initiator: 64,
        }
    }
}
