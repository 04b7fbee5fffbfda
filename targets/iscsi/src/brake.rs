//! A brake on password guessing: failed authentications of one initiator
//! name from one source address hold back that name's next logins from
//! there for a while.
//!
//! Layer: sans-I/O, like the rest of the core: every call takes `now`, and
//! the table is plain data that the port keeps behind the session table's
//! lock (one per process, shared by every connection of both transports).
//! The login code asks [`LoginBrake::hold`] at a connection's first login
//! request (with the InitiatorName it declares) and holds that request
//! back until the deadline it returns (the driver sleeps until
//! [`crate::Connection::poll_timeout`]); nothing waits.
//!
//! The rule (defaults in [`BrakeSettings`]):
//! - failures count per (source address, initiator name);
//! - the first `free_failures` (5) of a name cost nothing;
//! - after that each login of the name from the address waits
//!   `base_delay` (1 s), doubled for every further failure, at most
//!   `max_delay` (5 s) and at most the `cap` the caller gives (the login
//!   code passes a third of the login timeout), so a held login always
//!   has time left to finish: the brake slows guessing, it never locks
//!   anyone out;
//! - one failure is forgiven per `decay` (30 s) without a new one, all of
//!   them after `forget` (5 min) without one, and a login that proves
//!   itself with CHAP forgets its name's failures from that address;
//! - a name that never failed from an address is not held there, unless
//!   the address is spraying names: once `spray_names` (4) or more names
//!   have failures counted there, a login of any other name from it waits
//!   as if that name had failed `free_failures` times plus once per name
//!   past `spray_names` (so rotating InitiatorName does not buy free
//!   guesses).
//!
//! Guarantees:
//! - failures from one address never slow a login from another, and
//!   nothing is refused, only answered later (by at most the cap);
//! - the table holds at most `capacity` (address, name) entries, and at
//!   most `names_per_address` names per address; when full, the entry
//!   with the oldest failure makes room;
//! - no arithmetic on a count can overflow (counts saturate, shifts are
//!   bounded).

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// How hard the brake is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrakeSettings {
    /// Failures of one name from one address before its logins are held.
    pub free_failures: u32,
    /// The hold after `free_failures` failures; doubles with each more.
    pub base_delay: Duration,
    /// Longest hold (the caller's cap may be shorter).
    pub max_delay: Duration,
    /// One failure is forgiven per this much time without a new one.
    pub decay: Duration,
    /// All failures of an entry are forgotten after this much time
    /// without a new one.
    pub forget: Duration,
    /// Names with failures at one address from which other names from
    /// there are held too.
    pub spray_names: usize,
    /// Most (address, name) entries remembered.
    pub capacity: usize,
    /// Most names remembered per address.
    pub names_per_address: usize,
}

impl Default for BrakeSettings {
    fn default() -> Self {
        BrakeSettings {
            free_failures: 5,
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(5),
            decay: Duration::from_secs(30),
            forget: Duration::from_secs(300),
            spray_names: 4,
            capacity: 4096,
            names_per_address: 32,
        }
    }
}

/// Failures of one name from one address.
#[derive(Debug, Clone, Copy)]
struct Entry {
    failures: u32,
    /// The last failure, from which the decay counts.
    last: Instant,
}

impl Entry {
    /// The failures still counted at `now`, after the decay.
    fn count(&self, s: &BrakeSettings, now: Instant) -> u32 {
        let quiet = now.saturating_duration_since(self.last);
        if quiet >= s.forget {
            return 0;
        }
        let forgiven = match s.decay.as_nanos() {
            0 => u128::from(u32::MAX),
            d => quiet.as_nanos() / d,
        };
        let forgiven = u32::try_from(forgiven).unwrap_or(u32::MAX);
        self.failures.saturating_sub(forgiven)
    }
}

/// Highest failure count kept; far past the point where the delay is at
/// its cap, so the doubling never overflows.
const MAX_COUNT: u32 = 64;

/// Failed authentications by source address and initiator name.
#[derive(Debug, Default)]
pub struct LoginBrake {
    /// Per address, per name (ASCII lowercase; iSCSI names compare so).
    entries: HashMap<IpAddr, HashMap<String, Entry>>,
    /// Entries over all addresses.
    len: usize,
    /// Failed authentications since start (for metrics).
    failures_total: u64,
    /// Logins held back since start (for metrics).
    held_total: u64,
}

impl LoginBrake {
    /// No address remembered, counters at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Drops the entries of `ip` fully forgiven at `now`; the names left.
    fn prune(&mut self, s: &BrakeSettings, ip: IpAddr, now: Instant) -> usize {
        let Some(names) = self.entries.get_mut(&ip) else {
            return 0;
        };
        let before = names.len();
        names.retain(|_, e| e.count(s, now) > 0);
        let left = names.len();
        self.len = self.len.saturating_sub(before - left);
        if left == 0 {
            self.entries.remove(&ip);
        }
        left
    }

    /// How long a login with `count` failures waits.
    fn delay_for(s: &BrakeSettings, count: u32) -> Option<Duration> {
        let over = count.checked_sub(s.free_failures)?;
        let factor = 1u32 << over.min(20);
        Some(s.base_delay.saturating_mul(factor).min(s.max_delay))
    }

    /// A login of `name` from `ip` starts at `now`: when it may be
    /// answered, if it must wait (never later than `now + cap`). Each call
    /// that returns a deadline counts as one login held.
    pub fn hold(
        &mut self,
        s: &BrakeSettings,
        ip: IpAddr,
        name: &str,
        now: Instant,
        cap: Duration,
    ) -> Option<Instant> {
        let names = self.prune(s, ip, now);
        if names == 0 {
            return None;
        }
        let key = name.to_ascii_lowercase();
        let own = self
            .entries
            .get(&ip)
            .and_then(|m| m.get(&key))
            .map_or(0, |e| e.count(s, now));
        // Spraying: names other than this one with failures here.
        let others = names - usize::from(own > 0);
        let spray = if others >= s.spray_names.max(1) {
            let past = u32::try_from(others - s.spray_names.max(1)).unwrap_or(u32::MAX);
            s.free_failures.saturating_add(past)
        } else {
            0
        };
        let delay = Self::delay_for(s, own.max(spray))?.min(cap);
        if delay.is_zero() {
            return None;
        }
        self.held_total = self.held_total.saturating_add(1);
        Some(now + delay)
    }

    /// A login of `name` from `ip` failed to authenticate at `now`.
    pub fn failed(&mut self, s: &BrakeSettings, ip: IpAddr, name: &str, now: Instant) {
        self.failures_total = self.failures_total.saturating_add(1);
        if s.capacity == 0 || s.names_per_address == 0 {
            return;
        }
        let key = name.to_ascii_lowercase();
        self.prune(s, ip, now);
        let known = self.entries.get(&ip).is_some_and(|m| m.contains_key(&key));
        if !known {
            if self.entries.get(&ip).map_or(0, HashMap::len) >= s.names_per_address {
                self.evict_oldest(Some(ip));
            }
            if self.len >= s.capacity {
                self.evict_oldest(None);
            }
        }
        let names = self.entries.entry(ip).or_default();
        let count = names.get(&key).map_or(0, |e| e.count(s, now));
        let e = Entry {
            failures: count.saturating_add(1).min(MAX_COUNT),
            last: now,
        };
        if names.insert(key, e).is_none() {
            self.len += 1;
        }
    }

    /// A login of `name` from `ip` proved itself (CHAP verified): that
    /// name's failures from there are forgotten.
    pub fn succeeded(&mut self, ip: IpAddr, name: &str) {
        let key = name.to_ascii_lowercase();
        if let Some(names) = self.entries.get_mut(&ip) {
            if names.remove(&key).is_some() {
                self.len = self.len.saturating_sub(1);
            }
            if names.is_empty() {
                self.entries.remove(&ip);
            }
        }
    }

    /// Removes the entry whose last failure is oldest, of `ip` or of all
    /// (a scan of at most `capacity` entries, only when one is added to a
    /// full table).
    fn evict_oldest(&mut self, ip: Option<IpAddr>) {
        let oldest = self
            .entries
            .iter()
            .filter(|(a, _)| ip.is_none_or(|want| **a == want))
            .flat_map(|(a, m)| m.iter().map(move |(n, e)| (e.last, *a, n)))
            .min_by_key(|(last, _, _)| *last)
            .map(|(_, a, n)| (a, n.clone()));
        if let Some((a, n)) = oldest {
            self.succeeded(a, &n);
        }
    }

    /// Failed authentications since start.
    pub fn failures_total(&self) -> u64 {
        self.failures_total
    }

    /// Logins held back since start.
    pub fn held_total(&self) -> u64 {
        self.held_total
    }

    /// (Address, name) entries remembered now.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("address")
    }

    const SEC: Duration = Duration::from_secs(1);
    /// No cap of the caller's.
    const NO_CAP: Duration = Duration::MAX;
    const N: &str = "iqn.2026-12.org.test:guesser";

    #[test]
    fn five_failures_are_free_then_the_hold_doubles_to_its_cap() {
        let s = BrakeSettings::default();
        let mut b = LoginBrake::new();
        let t0 = Instant::now();
        let a = ip("127.0.0.1");
        for _ in 0..5 {
            assert_eq!(b.hold(&s, a, N, t0, NO_CAP), None);
            b.failed(&s, a, N, t0);
        }
        // The sixth login waits 1 s, and the next 2, 4, then 5 (the cap).
        let mut want = Vec::new();
        let mut got = Vec::new();
        for (i, secs) in [1u64, 2, 4, 5, 5, 5].iter().enumerate() {
            want.push(Duration::from_secs(*secs));
            let now = t0 + Duration::from_millis(i as u64);
            let until = b.hold(&s, a, N, now, NO_CAP).expect("held");
            got.push(until - now);
            b.failed(&s, a, N, now);
        }
        assert_eq!(got, want);
        assert_eq!(b.failures_total(), 11);
        assert_eq!(b.held_total(), 6);
        // Many more failures never overflow; the hold stays at its cap,
        // and the caller's cap (a third of the login timeout) is shorter.
        for _ in 0..1000 {
            b.failed(&s, a, N, t0);
        }
        assert_eq!(b.hold(&s, a, N, t0, NO_CAP), Some(t0 + 5 * SEC));
        assert_eq!(b.hold(&s, a, N, t0, 2 * SEC), Some(t0 + 2 * SEC));
    }

    #[test]
    fn the_hold_is_per_address_and_name() {
        let s = BrakeSettings::default();
        let mut b = LoginBrake::new();
        let t0 = Instant::now();
        for _ in 0..20 {
            b.failed(&s, ip("127.0.0.1"), N, t0);
        }
        assert!(b.hold(&s, ip("127.0.0.1"), N, t0, NO_CAP).is_some());
        assert!(
            b.hold(
                &s,
                ip("127.0.0.1"),
                "IQN.2026-12.org.test:GUESSER",
                t0,
                NO_CAP
            )
            .is_some(),
            "names compare without case"
        );
        assert_eq!(b.hold(&s, ip("127.0.0.1"), "iqn.x:other", t0, NO_CAP), None);
        assert_eq!(b.hold(&s, ip("127.0.0.2"), N, t0, NO_CAP), None);
        assert_eq!(b.hold(&s, ip("::1"), N, t0, NO_CAP), None);
    }

    #[test]
    fn spraying_names_holds_the_address_s_new_names() {
        let s = BrakeSettings::default();
        let mut b = LoginBrake::new();
        let t0 = Instant::now();
        let a = ip("10.0.0.5");
        for i in 0..3 {
            b.failed(&s, a, &format!("iqn.x:n{i}"), t0);
        }
        assert_eq!(b.hold(&s, a, "iqn.x:new", t0, NO_CAP), None, "three names");
        b.failed(&s, a, "iqn.x:n3", t0);
        assert_eq!(b.hold(&s, a, "iqn.x:new", t0, NO_CAP), Some(t0 + SEC));
        b.failed(&s, a, "iqn.x:n4", t0);
        assert_eq!(b.hold(&s, a, "iqn.x:new", t0, NO_CAP), Some(t0 + 2 * SEC));
        // Another address is not affected.
        assert_eq!(b.hold(&s, ip("10.0.0.6"), "iqn.x:new", t0, NO_CAP), None);
    }

    #[test]
    fn failures_decay_with_quiet_time_and_go_with_a_success() {
        let s = BrakeSettings::default();
        let mut b = LoginBrake::new();
        let t0 = Instant::now();
        let a = ip("10.0.0.7");
        for _ in 0..7 {
            b.failed(&s, a, N, t0);
        }
        assert_eq!(b.hold(&s, a, N, t0, NO_CAP), Some(t0 + 4 * SEC));
        // One failure forgiven per 30 s without a new one.
        let t1 = t0 + Duration::from_secs(31);
        assert_eq!(b.hold(&s, a, N, t1, NO_CAP), Some(t1 + 2 * SEC));
        let t2 = t0 + Duration::from_secs(75);
        assert_eq!(
            b.hold(&s, a, N, t2, NO_CAP),
            Some(t2 + SEC),
            "5 left: still held"
        );
        let t2 = t0 + Duration::from_secs(95);
        assert_eq!(b.hold(&s, a, N, t2, NO_CAP), None, "4 left: free again");
        // A failure now counts from what is left (4), not from 7.
        b.failed(&s, a, N, t2);
        assert_eq!(b.hold(&s, a, N, t2, NO_CAP), Some(t2 + SEC));
        // Everything is forgotten after `forget` without a failure, even
        // a count past what the decay alone would clear by then.
        for _ in 0..60 {
            b.failed(&s, a, N, t2);
        }
        let t3 = t2 + s.forget;
        assert_eq!(b.hold(&s, a, N, t3, NO_CAP), None);
        assert!(b.is_empty());
        // A proven login forgets its name at once, not the others'.
        for _ in 0..9 {
            b.failed(&s, a, N, t3);
            b.failed(&s, a, "iqn.x:other", t3);
        }
        b.succeeded(a, N);
        assert_eq!(b.hold(&s, a, N, t3, NO_CAP), None);
        assert!(b.hold(&s, a, "iqn.x:other", t3, NO_CAP).is_some());
    }

    #[test]
    fn the_table_is_bounded_and_evicts_the_oldest() {
        let s = BrakeSettings {
            capacity: 3,
            names_per_address: 2,
            ..BrakeSettings::default()
        };
        let mut b = LoginBrake::new();
        let t0 = Instant::now();
        for i in 0..3u8 {
            for _ in 0..6 {
                b.failed(
                    &s,
                    IpAddr::from([10, 0, 0, i]),
                    N,
                    t0 + Duration::from_secs(u64::from(i)),
                );
            }
        }
        assert_eq!(b.len(), 3);
        let t = t0 + Duration::from_secs(5);
        b.failed(&s, ip("10.0.0.9"), N, t);
        assert_eq!(b.len(), 3);
        // 10.0.0.0 had the oldest failure and made room.
        assert_eq!(b.hold(&s, IpAddr::from([10, 0, 0, 0]), N, t, NO_CAP), None);
        assert!(b
            .hold(&s, IpAddr::from([10, 0, 0, 1]), N, t, NO_CAP)
            .is_some());
        // At most two names per address: a third replaces its oldest.
        let mut b = LoginBrake::new();
        let a = ip("10.0.0.1");
        for (i, n) in ["iqn.x:a", "iqn.x:b", "iqn.x:c"].iter().enumerate() {
            for _ in 0..6 {
                b.failed(&s, a, n, t0 + Duration::from_secs(i as u64));
            }
        }
        assert_eq!(b.len(), 2);
        let t = t0 + Duration::from_secs(3);
        assert_eq!(b.hold(&s, a, "iqn.x:a", t, NO_CAP), None, "its oldest went");
        assert!(b.hold(&s, a, "iqn.x:c", t, NO_CAP).is_some());
        // No capacity: nothing remembered, failures still counted.
        let none = BrakeSettings {
            capacity: 0,
            ..BrakeSettings::default()
        };
        let mut b = LoginBrake::new();
        for _ in 0..10 {
            b.failed(&none, ip("10.0.0.1"), N, t0);
        }
        assert!(b.is_empty());
        assert_eq!(b.failures_total(), 10);
        assert_eq!(b.hold(&none, ip("10.0.0.1"), N, t0, NO_CAP), None);
    }
}
