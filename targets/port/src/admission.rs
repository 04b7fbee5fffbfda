//! Connection caps, checked when a driver accepts a connection and before
//! it allocates anything for it: connections in all, per source address,
//! still in the login phase, and still in the login phase per source
//! address. A refused connection is closed at once by its driver; refusals
//! are logged at most once per [`REFUSAL_LOG_EVERY`], with how many there
//! were, so a flood does not become a flood of log lines.
//!
//! The login-phase slots are shared fairly: one address holds at most
//! `max_in_login_per_address` of them, and when they are all taken a new
//! connection is not refused but takes the slot of the oldest connection
//! still logging in from the address that holds the most (ties: the one
//! whose oldest is oldest). The evicted connection is told to close on its
//! own reactor ([`PortMsg::Kill`]); its slot is free at once. So a flood of
//! silent connections, from one address or many, delays a real login by
//! at most one accept.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::msg::PortMsg;

/// The caps on connections of both transports together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// Connections open at once, in any phase.
    pub max_connections: usize,
    /// Connections open at once from one source address.
    pub max_per_address: usize,
    /// Connections open at once that have not reached full feature phase.
    pub max_in_login: usize,
    /// Connections open at once from one source address that have not
    /// reached full feature phase; below `max_in_login`.
    pub max_in_login_per_address: usize,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            max_connections: 4096,
            max_per_address: 256,
            max_in_login: 256,
            max_in_login_per_address: 16,
        }
    }
}

/// Which cap refused a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// `max_connections`.
    Total,
    /// `max_per_address`.
    PerAddress,
    /// `max_in_login` (only when no connection could be evicted).
    InLogin,
    /// `max_in_login_per_address`.
    InLoginPerAddress,
}

impl Refusal {
    fn key(self) -> &'static str {
        match self {
            Refusal::Total => "max_connections",
            Refusal::PerAddress => "max_connections_per_address",
            Refusal::InLogin => "max_login_connections",
            Refusal::InLoginPerAddress => "max_login_connections_per_address",
        }
    }
}

/// At most one log line about refused connections per this interval.
pub const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);

/// What the caps count now.
#[derive(Debug, Default)]
struct Counts {
    limits: ConnLimits,
    total: usize,
    /// Connections in the login phase: the sum of `login_by_addr`'s
    /// queues.
    in_login: usize,
    /// Only addresses with at least one connection are present.
    by_addr: HashMap<IpAddr, usize>,
    /// The connections in the login phase of each address, oldest first;
    /// only addresses with at least one are present.
    login_by_addr: HashMap<IpAddr, VecDeque<Arc<LoginSlot>>>,
    /// Numbers login slots in admission order.
    next_seq: u64,
}

/// One connection's place in the login phase, shared by its [`Admitted`]
/// and the admission table, through which it can be evicted.
#[derive(Debug)]
pub(crate) struct LoginSlot {
    seq: u64,
    /// How to tell the connection to close: set once the port registered
    /// it; `evicted` says to send the kill as soon as it is.
    kill: Mutex<KillState>,
}

#[derive(Debug, Default)]
struct KillState {
    tx: Option<mpsc::UnboundedSender<PortMsg>>,
    evicted: bool,
}

impl LoginSlot {
    /// The connection is registered: its kill channel.
    fn attach(&self, tx: mpsc::UnboundedSender<PortMsg>) {
        let mut k = lock(&self.kill);
        if k.evicted {
            let _ = tx.send(PortMsg::Kill);
        }
        k.tx = Some(tx);
    }

    /// Tells the connection to close (at once if registered, else as soon
    /// as it is).
    fn evict(&self) {
        let mut k = lock(&self.kill);
        k.evicted = true;
        if let Some(tx) = &k.tx {
            let _ = tx.send(PortMsg::Kill);
        }
    }
}

impl Counts {
    /// Takes slot `seq` of `ip` out of the login phase; whether it was
    /// still there (not evicted).
    fn leave_login(&mut self, ip: IpAddr, seq: u64) -> bool {
        let Some(q) = self.login_by_addr.get_mut(&ip) else {
            return false;
        };
        // At most `max_in_login_per_address` long.
        let Some(at) = q.iter().position(|s| s.seq == seq) else {
            return false;
        };
        q.remove(at);
        if q.is_empty() {
            self.login_by_addr.remove(&ip);
        }
        self.in_login = self.in_login.saturating_sub(1);
        true
    }

    /// The connection to evict for a new one: the oldest in the login
    /// phase of the address holding the most login slots (ties: the
    /// address whose oldest is oldest). Scans the addresses in the login
    /// phase, at most `max_in_login` of them.
    fn victim(&self) -> Option<(IpAddr, Arc<LoginSlot>)> {
        self.login_by_addr
            .iter()
            .filter_map(|(ip, q)| q.front().map(|s| (q.len(), s, ip)))
            .max_by(|a, b| a.0.cmp(&b.0).then(b.1.seq.cmp(&a.1.seq)))
            .map(|(_, s, ip)| (*ip, Arc::clone(s)))
    }
}

/// Refusals since the last log line.
#[derive(Debug, Default)]
struct RefusalLog {
    last: Option<Instant>,
    total: u64,
    per_address: u64,
    in_login: u64,
    in_login_per_address: u64,
    /// Evictions since the last line about them, and when it was.
    evicted: u64,
    last_evicted: Option<Instant>,
}

/// The caps and their counts; one per port.
#[derive(Debug, Default)]
pub(crate) struct Admission {
    counts: Mutex<Counts>,
    log: Mutex<RefusalLog>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Admission {
    pub(crate) fn set_limits(&self, limits: ConnLimits) {
        lock(&self.counts).limits = limits;
    }

    pub(crate) fn limits(&self) -> ConnLimits {
        lock(&self.counts).limits
    }

    /// Counts a new connection from `peer` in, or says which cap it is over.
    /// When every login-phase slot is taken, the oldest connection in the
    /// login phase of the address holding the most is evicted instead
    /// (told to close; its slot is this one's at once).
    pub(crate) fn admit(self: &Arc<Self>, peer: SocketAddr) -> Result<Admitted, Refusal> {
        let ip = canonical(peer.ip());
        let mut evicted = None;
        let admitted = {
            let mut c = lock(&self.counts);
            let from_addr = c.by_addr.get(&ip).copied().unwrap_or(0);
            let login_from_addr = c.login_by_addr.get(&ip).map_or(0, VecDeque::len);
            if c.total >= c.limits.max_connections {
                Err(Refusal::Total)
            } else if from_addr >= c.limits.max_per_address {
                Err(Refusal::PerAddress)
            } else if login_from_addr >= c.limits.max_in_login_per_address {
                Err(Refusal::InLoginPerAddress)
            } else {
                let room = c.in_login < c.limits.max_in_login || {
                    match c.victim() {
                        Some((vip, slot)) if c.leave_login(vip, slot.seq) => {
                            evicted = Some((vip, slot));
                            true
                        }
                        _ => false,
                    }
                };
                if room {
                    c.total += 1;
                    c.in_login += 1;
                    *c.by_addr.entry(ip).or_insert(0) += 1;
                    let seq = c.next_seq;
                    c.next_seq = c.next_seq.wrapping_add(1);
                    let slot = Arc::new(LoginSlot {
                        seq,
                        kill: Mutex::new(KillState::default()),
                    });
                    c.login_by_addr
                        .entry(ip)
                        .or_default()
                        .push_back(Arc::clone(&slot));
                    Ok(slot)
                } else {
                    Err(Refusal::InLogin)
                }
            }
        };
        if let Some((vip, slot)) = evicted {
            slot.evict();
            self.note_eviction(vip, Instant::now());
        }
        match admitted {
            Ok(slot) => Ok(Admitted {
                admission: Arc::clone(self),
                ip,
                login: Some(slot),
            }),
            Err(r) => {
                self.note_refusal(r, peer, Instant::now());
                Err(r)
            }
        }
    }

    /// Counts an eviction; logs like refusals, at most once per
    /// [`REFUSAL_LOG_EVERY`].
    fn note_eviction(&self, victim: IpAddr, now: Instant) {
        let mut log = lock(&self.log);
        log.evicted += 1;
        if log
            .last_evicted
            .is_some_and(|t| now.saturating_duration_since(t) < REFUSAL_LOG_EVERY)
        {
            return;
        }
        tracing::warn!(
            %victim,
            evicted = log.evicted,
            max_login_connections = self.limits().max_in_login,
            "login slots full: the oldest login of the address holding the most was closed for a new connection (count since the last such line; at most one line per {}s)",
            REFUSAL_LOG_EVERY.as_secs()
        );
        log.evicted = 0;
        log.last_evicted = Some(now);
    }

    /// Counts a refusal; logs (with the counts since the last line) if the
    /// last line is at least [`REFUSAL_LOG_EVERY`] old.
    fn note_refusal(&self, r: Refusal, peer: SocketAddr, now: Instant) {
        let mut log = lock(&self.log);
        match r {
            Refusal::Total => log.total += 1,
            Refusal::PerAddress => log.per_address += 1,
            Refusal::InLogin => log.in_login += 1,
            Refusal::InLoginPerAddress => log.in_login_per_address += 1,
        }
        if log
            .last
            .is_some_and(|t| now.saturating_duration_since(t) < REFUSAL_LOG_EVERY)
        {
            return;
        }
        let limits = self.limits();
        tracing::warn!(
            %peer,
            cap = r.key(),
            over_max_connections = log.total,
            over_max_connections_per_address = log.per_address,
            over_max_login_connections = log.in_login,
            over_max_login_connections_per_address = log.in_login_per_address,
            max_connections = limits.max_connections,
            max_connections_per_address = limits.max_per_address,
            max_login_connections = limits.max_in_login,
            max_login_connections_per_address = limits.max_in_login_per_address,
            "connections refused over the [limits] caps (counts since the last such line; at most one line per {}s)",
            REFUSAL_LOG_EVERY.as_secs()
        );
        *log = RefusalLog {
            last: Some(now),
            evicted: log.evicted,
            last_evicted: log.last_evicted,
            ..RefusalLog::default()
        };
    }

    /// Connections counted now: (in all, in the login phase, from `ip`).
    pub(crate) fn counts(&self, ip: IpAddr) -> (usize, usize, usize) {
        let c = lock(&self.counts);
        let from = c.by_addr.get(&canonical(ip)).copied().unwrap_or(0);
        (c.total, c.in_login, from)
    }
}

/// An IPv4 peer reached over an IPv6 socket counts as its IPv4 address.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

/// One admitted connection, counted against the caps until dropped.
#[derive(Debug)]
pub struct Admitted {
    admission: Arc<Admission>,
    ip: IpAddr,
    /// Its login-phase slot, until full feature phase.
    login: Option<Arc<LoginSlot>>,
}

impl Admitted {
    /// The connection reached full feature phase: it no longer counts
    /// against the login-phase caps. Idempotent.
    pub fn login_done(&mut self) {
        if let Some(slot) = self.login.take() {
            lock(&self.admission.counts).leave_login(self.ip, slot.seq);
        }
    }

    /// The port registered the connection: an eviction reaches it through
    /// `tx` from now on (at once if it was already evicted).
    pub(crate) fn attach(&self, tx: mpsc::UnboundedSender<PortMsg>) {
        if let Some(slot) = &self.login {
            slot.attach(tx);
        }
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut c = lock(&self.admission.counts);
        c.total = c.total.saturating_sub(1);
        if let Some(slot) = self.login.take() {
            c.leave_login(self.ip, slot.seq);
        }
        if let Some(n) = c.by_addr.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                c.by_addr.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(s: &str) -> SocketAddr {
        s.parse().expect("address")
    }

    fn admission(total: usize, per_address: usize, in_login: usize) -> Arc<Admission> {
        let a = Arc::new(Admission::default());
        a.set_limits(ConnLimits {
            max_connections: total,
            max_per_address: per_address,
            max_in_login: in_login,
            max_in_login_per_address: per_address,
        });
        a
    }

    fn evicted(a: &Admitted) -> bool {
        a.login.as_ref().is_some_and(|s| lock(&s.kill).evicted)
    }

    #[test]
    fn each_cap_refuses_and_frees_its_place_on_drop() {
        let a = admission(4, 2, 3);
        let one = a.admit(peer("127.0.0.1:1")).expect("first");
        let two = a.admit(peer("127.0.0.1:2")).expect("second");
        assert_eq!(
            a.admit(peer("127.0.0.1:3")).unwrap_err(),
            Refusal::PerAddress
        );
        let mut three = a.admit(peer("127.0.0.2:1")).expect("other address");
        three.login_done();
        three.login_done();
        let four = a.admit(peer("127.0.0.3:1")).expect("login slot freed");
        assert_eq!(a.admit(peer("127.0.0.4:1")).unwrap_err(), Refusal::Total);
        assert_eq!(a.counts(peer("127.0.0.1:0").ip()), (4, 3, 2));
        drop(one);
        let again = a.admit(peer("127.0.0.1:4")).expect("after one closed");
        drop((two, three, four, again));
        assert_eq!(a.counts(peer("127.0.0.1:0").ip()), (0, 0, 0));
        let c = lock(&a.counts);
        assert!(c.by_addr.is_empty(), "no address kept");
        assert!(c.login_by_addr.is_empty(), "no login slot kept");
    }

    #[test]
    fn one_address_holds_at_most_its_share_of_login_slots() {
        let a = Arc::new(Admission::default());
        a.set_limits(ConnLimits {
            max_connections: 100,
            max_per_address: 100,
            max_in_login: 10,
            max_in_login_per_address: 3,
        });
        let mut held: Vec<Admitted> = (0..3)
            .map(|i| a.admit(peer(&format!("127.0.0.2:{i}"))).expect("share"))
            .collect();
        assert_eq!(
            a.admit(peer("127.0.0.2:9")).unwrap_err(),
            Refusal::InLoginPerAddress
        );
        // Logged in, a connection leaves its address's share.
        if let Some(h) = held.first_mut() {
            h.login_done();
        }
        held.push(a.admit(peer("127.0.0.2:10")).expect("share freed"));
        assert_eq!(a.counts(peer("127.0.0.2:0").ip()), (4, 3, 4));
    }

    #[test]
    fn a_full_login_pool_evicts_the_oldest_of_the_biggest_holder() {
        let a = Arc::new(Admission::default());
        a.set_limits(ConnLimits {
            max_connections: 100,
            max_per_address: 100,
            max_in_login: 6,
            max_in_login_per_address: 4,
        });
        let (tx, mut rx) = mpsc::unbounded_channel();
        // 127.0.0.2 holds 4, 127.0.0.3 holds 2: the pool is full.
        let big: Vec<Admitted> = (0..4)
            .map(|i| a.admit(peer(&format!("127.0.0.2:{i}"))).expect("big"))
            .collect();
        let small: Vec<Admitted> = (0..2)
            .map(|i| a.admit(peer(&format!("127.0.0.3:{i}"))).expect("small"))
            .collect();
        if let Some(first) = big.first() {
            first.attach(tx.clone());
        }
        let mut legit = a.admit(peer("127.0.0.1:1")).expect("evicts, not refused");
        assert!(
            big.first().is_some_and(evicted),
            "the oldest of the biggest"
        );
        assert!(matches!(rx.try_recv(), Ok(PortMsg::Kill)), "told to close");
        assert!(!big.iter().skip(1).any(evicted));
        assert!(!small.iter().any(evicted));
        assert_eq!(a.counts(peer("127.0.0.2:0").ip()), (7, 6, 4));
        // Now 3 and 2 (and 1): the next comes from 127.0.0.2 again; an
        // eviction before the connection is registered reaches it then.
        let _l2 = a.admit(peer("127.0.0.1:2")).expect("second");
        assert!(big.get(1).is_some_and(evicted));
        if let Some(b) = big.get(1) {
            b.attach(tx.clone());
        }
        assert!(matches!(rx.try_recv(), Ok(PortMsg::Kill)));
        // Ties (2, 2, 2): the address whose oldest is oldest goes first,
        // so the newest arrival is the last to be evicted.
        let _l3 = a.admit(peer("127.0.0.4:1")).expect("third");
        assert!(big.get(2).is_some_and(evicted));
        assert!(!evicted(&legit));
        legit.login_done();
        drop(big);
        drop(small);
        let c = lock(&a.counts);
        assert_eq!(c.in_login, 2);
        assert_eq!(
            c.login_by_addr.values().map(VecDeque::len).sum::<usize>(),
            2
        );
    }

    #[test]
    fn ipv4_mapped_peers_count_as_their_ipv4_address() {
        let a = admission(10, 1, 10);
        let _v4 = a.admit(peer("127.0.0.1:1")).expect("v4");
        assert_eq!(
            a.admit(peer("[::ffff:127.0.0.1]:2")).unwrap_err(),
            Refusal::PerAddress
        );
        let _v6 = a.admit(peer("[::1]:2")).expect("a different address");
    }

    #[test]
    fn refusals_are_logged_at_most_once_per_interval() {
        let a = admission(0, 0, 0);
        let t0 = Instant::now();
        a.note_refusal(Refusal::Total, peer("127.0.0.1:1"), t0);
        assert!(lock(&a.log).last == Some(t0));
        for i in 0..100 {
            a.note_refusal(
                Refusal::PerAddress,
                peer("127.0.0.1:1"),
                t0 + Duration::from_millis(i),
            );
        }
        // Suppressed ones are counted for the next line, which resets them.
        assert_eq!(lock(&a.log).per_address, 100);
        let later = t0 + REFUSAL_LOG_EVERY;
        a.note_refusal(Refusal::InLogin, peer("127.0.0.1:1"), later);
        let log = lock(&a.log);
        assert_eq!(log.last, Some(later));
        assert_eq!((log.total, log.per_address, log.in_login), (0, 0, 0));
    }
}
