//! What the protocol core needs to know about the targets a portal serves:
//! names, portal groups, ACLs and CHAP. The driver builds a [`PortalConfig`]
//! snapshot; a live change swaps the `Arc`, so logins in progress keep the
//! snapshot they started with.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::brake::BrakeSettings;
use crate::budget::DataBudget;
use crate::chap::ChapPolicy;
use crate::negotiate::Limits;

/// One iSCSI target as login and discovery see it.
#[derive(Debug, Clone)]
pub struct TargetInfo {
    /// iSCSI name (RFC 7143 §4.2.7).
    pub name: String,
    /// TargetAlias (RFC 7143 §13.6), sent in the login response when set.
    pub alias: Option<String>,
    /// Target portal group tag (RFC 7143 §13.9).
    pub tpgt: u16,
    /// `host:port` of every portal of the group, for SendTargets.
    pub portals: Vec<String>,
    /// `host:port` of its iSER portals (RFC 7145). With `portals`, the
    /// only places the target is served (see [`TargetInfo::served_at`]).
    pub iser_portals: Vec<String>,
    /// Initiator names allowed to log in; empty means any.
    pub acl: Vec<String>,
    /// CHAP for Normal sessions to this target.
    pub chap: ChapPolicy,
    /// Initiator groups: their members' LUN maps and CHAP
    /// ([`crate::groups`]); members of a group may log in whatever `acl`
    /// says.
    pub groups: Vec<crate::groups::InitiatorGroup>,
    /// Login redirection (RFC 7143 §11.13.5, status class 1): Normal
    /// logins at the portals it covers are answered with TARGET MOVED
    /// and a TargetAddress instead of being served.
    pub redirect: Option<Redirect>,
}

/// Where a target's Normal logins are sent instead of being served.
#[derive(Debug, Clone)]
pub struct Redirect {
    /// TargetAddress values (`host:port` or `host:port,tpgt`), taken in
    /// turn: the n-th redirected login gets entry n modulo their number.
    pub to: Vec<String>,
    /// The target's portals whose logins are redirected (`host:port`,
    /// covering as [`TargetInfo::served_at`] does); empty: all of them.
    pub from: Vec<String>,
    /// TARGET MOVED PERMANENTLY (0x0102) rather than TEMPORARILY (0x0101):
    /// the initiator may forget this address.
    pub permanent: bool,
    /// Redirected logins so far (shared by the clones of one snapshot).
    pub turn: Arc<AtomicUsize>,
}

impl Redirect {
    /// Redirection to `to` (in turn) from `from` (empty: every portal).
    pub fn new(to: Vec<String>, from: Vec<String>, permanent: bool) -> Redirect {
        Redirect {
            to,
            from,
            permanent,
            turn: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Whether a login that arrived at `local` is redirected.
    pub fn covers(&self, local: &str) -> bool {
        if self.from.is_empty() {
            return true;
        }
        let Ok(local) = local.parse::<SocketAddr>() else {
            return false;
        };
        let local = unmapped(local);
        self.from
            .iter()
            .filter_map(|p| p.parse::<SocketAddr>().ok())
            .any(|p| covers(unmapped(p), local))
    }

    /// The TargetAddress for the next redirected login.
    pub fn next_address(&self) -> Option<&str> {
        let n = self.to.len();
        if n == 0 {
            return None;
        }
        let i = self.turn.fetch_add(1, Ordering::Relaxed) % n;
        self.to.get(i).map(String::as_str)
    }
}

impl TargetInfo {
    /// Whether `initiator` may log in to this target or see it in discovery.
    pub fn allows(&self, initiator: &str) -> bool {
        self.acl.is_empty()
            || self.acl.iter().any(|a| a.eq_ignore_ascii_case(initiator))
            || self.group_of(initiator).is_some()
    }

    /// Whether a connection that arrived at `local` (the local
    /// `host:port` it was accepted on) may reach this target: `local` is
    /// one of its portals, TCP or iSER (an iSER portal is an address and
    /// port like any other, usually that of one of its TCP portals). A
    /// wildcard portal covers every local address of its port: `0.0.0.0`
    /// every IPv4 one, `[::]` every one (a dual-stack socket accepts IPv4
    /// too, seen as `::ffff:a.b.c.d`). A local address that does not
    /// parse is served nowhere.
    pub fn served_at(&self, local: &str) -> bool {
        let Ok(local) = local.parse::<SocketAddr>() else {
            return false;
        };
        let local = unmapped(local);
        self.portals
            .iter()
            .chain(&self.iser_portals)
            .filter_map(|p| p.parse::<SocketAddr>().ok())
            .any(|p| covers(unmapped(p), local))
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it stands for.
fn unmapped(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(v4.into(), a.port()),
            None => a,
        },
        SocketAddr::V4(_) => a,
    }
}

/// Whether `portal` (unmapped) serves a connection accepted at `local`
/// (unmapped).
fn covers(portal: SocketAddr, local: SocketAddr) -> bool {
    if portal.port() != local.port() {
        return false;
    }
    match (portal, local) {
        (SocketAddr::V4(p), _) if p.ip().is_unspecified() => local.is_ipv4(),
        (SocketAddr::V6(p), _) if p.ip().is_unspecified() => true,
        _ => portal.ip() == local.ip(),
    }
}

/// Everything a connection consults during its life.
#[derive(Debug, Clone)]
pub struct PortalConfig {
    /// The targets the portals serve (names compare ignoring ASCII case).
    pub targets: Vec<TargetInfo>,
    /// CHAP for discovery sessions.
    pub discovery_chap: ChapPolicy,
    /// Per-initiator CHAP of discovery sessions: a member of a group with
    /// CHAP passes the group's instead of `discovery_chap` (matched as a
    /// target's groups, [`crate::groups`]).
    pub discovery_groups: Vec<crate::groups::InitiatorGroup>,
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
    /// How failed authentications hold back an address's next logins.
    pub brake: BrakeSettings,
    /// How long a connection may take from accept to full feature phase;
    /// past it the connection closes (a peer that never logs in, or stops
    /// halfway through a PDU, holds nothing for longer).
    pub login_timeout: Duration,
    /// Normal sessions one initiator name may hold at once (over all its
    /// ISIDs and targets); a login past it fails with Out of Resources.
    pub max_sessions_per_initiator: usize,
    /// The daemon-wide budget of write data buffers ([`crate::budget`]),
    /// shared by every connection of both transports. A port keeps one
    /// across configuration changes (it takes the new size only).
    pub data_budget: Arc<DataBudget>,
    /// How long a write may go without Data-Out for the R2Ts it was sent
    /// before its connection is closed (its tasks aborted, its buffers
    /// freed).
    pub data_out_timeout: Duration,
}

impl PortalConfig {
    /// The target named `name`, compared as iSCSI names are (ignoring
    /// ASCII case).
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
            discovery_groups: Vec::new(),
            limits: Limits::default(),
            queue_depth: 128,
            nop_interval: Some(Duration::from_secs(15)),
            nop_timeout: Duration::from_secs(30),
            max_write_len: 32 << 20,
            max_text_len: 64 << 10,
            brake: BrakeSettings::default(),
            login_timeout: Duration::from_secs(15),
            max_sessions_per_initiator: 64,
            data_budget: Arc::new(DataBudget::default()),
            data_out_timeout: Duration::from_secs(30),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(portals: &[&str], iser: &[&str]) -> TargetInfo {
        TargetInfo {
            name: "iqn.2026-11.org.rustgt:t".into(),
            alias: None,
            tpgt: 1,
            portals: portals.iter().map(|p| (*p).to_owned()).collect(),
            iser_portals: iser.iter().map(|p| (*p).to_owned()).collect(),
            acl: Vec::new(),
            chap: ChapPolicy::default(),
            groups: Vec::new(),
            redirect: None,
        }
    }

    #[test]
    fn served_only_at_its_own_portals() {
        let t = target(&["127.0.0.1:3401", "[::1]:3260"], &["192.0.2.1:3260"]);
        assert!(t.served_at("127.0.0.1:3401"));
        assert!(t.served_at("[::1]:3260"));
        assert!(t.served_at("192.0.2.1:3260"), "iSER portals count");
        // Another port, another address of the same port, the other family.
        assert!(!t.served_at("127.0.0.1:3260"));
        assert!(!t.served_at("127.0.0.2:3401"));
        assert!(!t.served_at("[::1]:3401"));
        // IPv4 through a dual-stack socket.
        assert!(t.served_at("[::ffff:127.0.0.1]:3401"));
        // What does not parse is served nowhere.
        assert!(!t.served_at(""));
        assert!(!t.served_at("127.0.0.1"));
    }

    #[test]
    fn wildcard_portals_cover_their_port_on_every_address() {
        let v4 = target(&["0.0.0.0:3260"], &[]);
        assert!(v4.served_at("127.0.0.1:3260"));
        assert!(v4.served_at("10.1.2.3:3260"));
        assert!(v4.served_at("[::ffff:10.1.2.3]:3260"));
        assert!(!v4.served_at("[::1]:3260"), "0.0.0.0 is IPv4 only");
        assert!(!v4.served_at("127.0.0.1:3261"));
        let any = target(&["[::]:3260"], &[]);
        assert!(any.served_at("[::1]:3260"));
        assert!(any.served_at("127.0.0.1:3260"));
        assert!(!any.served_at("127.0.0.1:3262"));
        // A broken portal entry serves nothing.
        assert!(!target(&["localhost:3260"], &[]).served_at("127.0.0.1:3260"));
    }
}
