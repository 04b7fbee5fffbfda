//! Connection caps, checked when a driver accepts a connection and before
//! it allocates anything for it: connections in all, per source address,
//! and still in the login phase. A refused connection is closed at once by
//! its driver; refusals are logged at most once per [`REFUSAL_LOG_EVERY`],
//! with how many there were, so a flood does not become a flood of log
//! lines.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The caps on connections of both transports together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// Connections open at once, in any phase.
    pub max_connections: usize,
    /// Connections open at once from one source address.
    pub max_per_address: usize,
    /// Connections open at once that have not reached full feature phase.
    pub max_in_login: usize,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            max_connections: 4096,
            max_per_address: 256,
            max_in_login: 256,
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
    /// `max_in_login`.
    InLogin,
}

impl Refusal {
    fn key(self) -> &'static str {
        match self {
            Refusal::Total => "max_connections",
            Refusal::PerAddress => "max_connections_per_address",
            Refusal::InLogin => "max_login_connections",
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
    in_login: usize,
    /// Only addresses with at least one connection are present.
    by_addr: HashMap<IpAddr, usize>,
}

/// Refusals since the last log line.
#[derive(Debug, Default)]
struct RefusalLog {
    last: Option<Instant>,
    total: u64,
    per_address: u64,
    in_login: u64,
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
    pub(crate) fn admit(self: &Arc<Self>, peer: SocketAddr) -> Result<Admitted, Refusal> {
        let ip = canonical(peer.ip());
        let refused = {
            let mut c = lock(&self.counts);
            let from_addr = c.by_addr.get(&ip).copied().unwrap_or(0);
            let refused = if c.total >= c.limits.max_connections {
                Some(Refusal::Total)
            } else if from_addr >= c.limits.max_per_address {
                Some(Refusal::PerAddress)
            } else if c.in_login >= c.limits.max_in_login {
                Some(Refusal::InLogin)
            } else {
                None
            };
            if refused.is_none() {
                c.total += 1;
                c.in_login += 1;
                *c.by_addr.entry(ip).or_insert(0) += 1;
            }
            refused
        };
        match refused {
            None => Ok(Admitted {
                admission: Arc::clone(self),
                ip,
                in_login: true,
            }),
            Some(r) => {
                self.note_refusal(r, peer, Instant::now());
                Err(r)
            }
        }
    }

    /// Counts a refusal; logs (with the counts since the last line) if the
    /// last line is at least [`REFUSAL_LOG_EVERY`] old.
    fn note_refusal(&self, r: Refusal, peer: SocketAddr, now: Instant) {
        let mut log = lock(&self.log);
        match r {
            Refusal::Total => log.total += 1,
            Refusal::PerAddress => log.per_address += 1,
            Refusal::InLogin => log.in_login += 1,
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
            max_connections = limits.max_connections,
            max_connections_per_address = limits.max_per_address,
            max_login_connections = limits.max_in_login,
            "connections refused over the [limits] caps (counts since the last such line; at most one line per {}s)",
            REFUSAL_LOG_EVERY.as_secs()
        );
        *log = RefusalLog {
            last: Some(now),
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
    in_login: bool,
}

impl Admitted {
    /// The connection reached full feature phase: it no longer counts
    /// against the login-phase cap. Idempotent.
    pub fn login_done(&mut self) {
        if std::mem::take(&mut self.in_login) {
            let mut c = lock(&self.admission.counts);
            c.in_login = c.in_login.saturating_sub(1);
        }
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut c = lock(&self.admission.counts);
        c.total = c.total.saturating_sub(1);
        if self.in_login {
            c.in_login = c.in_login.saturating_sub(1);
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
        });
        a
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
        assert_eq!(a.admit(peer("127.0.0.3:1")).unwrap_err(), Refusal::InLogin);
        three.login_done();
        three.login_done();
        let four = a.admit(peer("127.0.0.3:1")).expect("login slot freed");
        assert_eq!(a.admit(peer("127.0.0.4:1")).unwrap_err(), Refusal::Total);
        assert_eq!(a.counts(peer("127.0.0.1:0").ip()), (4, 3, 2));
        drop(one);
        let again = a.admit(peer("127.0.0.1:4")).expect("after one closed");
        drop((two, three, four, again));
        assert_eq!(a.counts(peer("127.0.0.1:0").ip()), (0, 0, 0));
        assert!(lock(&a.counts).by_addr.is_empty(), "no address kept");
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
