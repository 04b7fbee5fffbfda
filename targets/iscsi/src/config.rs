//! What the protocol core needs to know about the targets a portal serves:
//! names, portal groups, ACLs and CHAP. The driver builds a [`PortalConfig`]
//! snapshot; a live change swaps the `Arc`, so logins in progress keep the
//! snapshot they started with.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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
    /// With [`Redirect::by_sessions`]: the metrics endpoint of each `to`
    /// gateway (same order), and what the daemon last learned from them.
    pub loads: Option<Arc<GatewayLoads>>,
}

/// The load of each gateway a [`Redirect`] sends logins to: its
/// logged-in sessions as the daemon last read them from its metrics
/// endpoint, plus the logins sent there since. The daemon's poller
/// writes it ([`GatewayLoads::set`]); logins read it.
#[derive(Debug)]
pub struct GatewayLoads {
    /// `host:port` of each gateway's metrics endpoint, in `to`'s order.
    pub metrics: Vec<SocketAddr>,
    /// Sessions last read, [`UNKNOWN`] while unread or unreachable.
    sessions: Vec<AtomicU64>,
    /// Logins redirected to it since that read.
    sent: Vec<AtomicU64>,
}

const UNKNOWN: u64 = u64::MAX;

impl GatewayLoads {
    fn new(metrics: Vec<SocketAddr>) -> GatewayLoads {
        let n = metrics.len();
        GatewayLoads {
            metrics,
            sessions: (0..n).map(|_| AtomicU64::new(UNKNOWN)).collect(),
            sent: (0..n).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Records gateway `i`'s sessions as just read (`None`: it could not
    /// be read, and the gateway gets no logins while others are known).
    pub fn set(&self, i: usize, sessions: Option<u64>) {
        let (Some(s), Some(sent)) = (self.sessions.get(i), self.sent.get(i)) else {
            return;
        };
        s.store(
            sessions.map_or(UNKNOWN, |v| v.min(UNKNOWN - 1)),
            Ordering::Relaxed,
        );
        sent.store(0, Ordering::Relaxed);
    }

    /// Gateway `i`'s sessions as last read plus the logins sent there
    /// since; `None` while its load is unknown.
    pub fn estimate(&self, i: usize) -> Option<u64> {
        let s = self.sessions.get(i)?.load(Ordering::Relaxed);
        if s == UNKNOWN {
            return None;
        }
        let sent = self.sent.get(i).map_or(0, |c| c.load(Ordering::Relaxed));
        Some(s.saturating_add(sent))
    }
}

impl Redirect {
    /// Redirection to `to` (in turn) from `from` (empty: every portal).
    pub fn new(to: Vec<String>, from: Vec<String>, permanent: bool) -> Redirect {
        Redirect {
            to,
            from,
            permanent,
            turn: Arc::new(AtomicUsize::new(0)),
            loads: None,
        }
    }

    /// Each login goes to the gateway with the fewest sessions instead of
    /// in turn; `metrics` is each `to` gateway's metrics endpoint (same
    /// order). Ties, and logins while no gateway's load is known, go in
    /// turn.
    pub fn by_sessions(mut self, metrics: Vec<SocketAddr>) -> Redirect {
        if !metrics.is_empty() {
            self.loads = Some(Arc::new(GatewayLoads::new(metrics)));
        }
        self
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

    /// The TargetAddress for the next redirected login: in turn, or with
    /// [`Redirect::by_sessions`] the least loaded gateway whose load is
    /// known (ties in turn).
    pub fn next_address(&self) -> Option<&str> {
        let n = self.to.len();
        if n == 0 {
            return None;
        }
        let mut i = self.turn.fetch_add(1, Ordering::Relaxed) % n;
        if let Some(loads) = &self.loads {
            let least = (0..n)
                .map(|k| (i + k) % n)
                .filter_map(|j| loads.estimate(j).map(|load| (load, j)))
                .min_by_key(|&(load, _)| load);
            if let Some((_, j)) = least {
                i = j;
                if let Some(sent) = loads.sent.get(j) {
                    sent.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
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

    #[test]
    fn logins_go_to_the_gateway_with_the_fewest_sessions() {
        let to: Vec<String> = ["a:3260,1", "b:3260,2", "c:3260,3"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        let metrics: Vec<SocketAddr> = ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]
            .iter()
            .filter_map(|s| s.parse().ok())
            .collect();
        let r = Redirect::new(to.clone(), Vec::new(), false).by_sessions(metrics);
        let loads = r.loads.clone().expect("loads");
        let next = |r: &Redirect| r.next_address().map(str::to_owned).unwrap_or_default();

        // Nothing read yet: in turn.
        assert_eq!(
            (0..4).map(|_| next(&r)).collect::<Vec<_>>(),
            ["a:3260,1", "b:3260,2", "c:3260,3", "a:3260,1"]
        );

        // a 5, b 2, c 3: b until it has as many as c, then b and c
        // until they have a's 5, each login counted where it was sent;
        // then all three in turn.
        loads.set(0, Some(5));
        loads.set(1, Some(2));
        loads.set(2, Some(3));
        let got: Vec<_> = (0..8).map(|_| next(&r)).collect();
        assert_eq!(got[0], "b:3260,2");
        let count = |got: &[String], a: &str| got.iter().filter(|g| *g == a).count();
        assert_eq!(count(&got[..5], "a:3260,1"), 0, "{got:?}");
        assert_eq!(count(&got[..5], "b:3260,2"), 3, "{got:?}");
        assert_eq!(count(&got[..5], "c:3260,3"), 2, "{got:?}");
        assert_eq!(count(&got[5..], "a:3260,1"), 1, "{got:?}");
        assert_eq!(loads.estimate(0), Some(6));
        assert_eq!(loads.estimate(1), Some(6));

        // A new read replaces the estimate; an unreachable gateway gets
        // nothing while another's load is known.
        loads.set(0, Some(0));
        loads.set(1, None);
        loads.set(2, Some(1));
        assert_eq!(next(&r), "a:3260,1");
        assert_eq!(next(&r), "c:3260,3");
        assert_eq!(loads.estimate(1), None);
        let got: Vec<_> = (0..6).map(|_| next(&r)).collect();
        assert!(!got.iter().any(|a| a == "b:3260,2"), "{got:?}");

        // Every gateway unreadable: in turn again, over all of them.
        for i in 0..3 {
            loads.set(i, None);
        }
        let got: std::collections::BTreeSet<_> = (0..3).map(|_| next(&r)).collect();
        assert_eq!(got.len(), 3, "{got:?}");

        // Without metrics it stays round robin.
        let plain = Redirect::new(to, Vec::new(), false).by_sessions(Vec::new());
        assert!(plain.loads.is_none());
    }
}
