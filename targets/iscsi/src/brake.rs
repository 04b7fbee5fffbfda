//! A brake on password guessing: failed authentications from one source
//! address hold back that address's next logins for a while.
//!
//! Layer: sans-I/O, like the rest of the core: every call takes `now`, and
//! the table is plain data that the port keeps behind the session table's
//! lock (one per process, shared by every connection of both transports).
//! The login code asks [`LoginBrake::hold`] at a connection's first login
//! request and holds that request back until the deadline it returns (the
//! driver sleeps until [`crate::Connection::poll_timeout`]); nothing waits.
//!
//! The rule (defaults in [`BrakeSettings`]):
//! - the first `free_failures` (5) failures from an address cost nothing;
//! - after that each login from the address waits `base_delay` (1 s),
//!   doubled for every further failure, at most `max_delay` (30 s);
//! - one failure is forgiven per `decay` (60 s) without a new one, and a
//!   login that proves itself with CHAP forgets the address's failures.
//!
//! Guarantees:
//! - the delay is per source address only: failures from one address never
//!   slow a login from another, and nothing is refused, only answered later;
//! - the table holds at most `capacity` addresses; when it is full the
//!   entry with the oldest failure makes room;
//! - no arithmetic on a count can overflow (counts saturate, shifts are
//!   bounded).

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// How hard the brake is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrakeSettings {
    /// Failures from one address before its logins are held.
    pub free_failures: u32,
    /// The hold after `free_failures` failures; doubles with each more.
    pub base_delay: Duration,
    /// Longest hold.
    pub max_delay: Duration,
    /// One failure is forgiven per this much time without a new one.
    pub decay: Duration,
    /// Most addresses remembered.
    pub capacity: usize,
}

impl Default for BrakeSettings {
    fn default() -> Self {
        BrakeSettings {
            free_failures: 5,
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(30),
            decay: Duration::from_secs(60),
            capacity: 4096,
        }
    }
}

/// Failures of one address.
#[derive(Debug, Clone, Copy)]
struct Entry {
    failures: u32,
    /// The last failure, from which the decay counts.
    last: Instant,
}

/// Highest failure count kept; far past the point where the delay is at
/// its cap, so the doubling never overflows.
const MAX_COUNT: u32 = 64;

/// Failed authentications by source address.
#[derive(Debug, Default)]
pub struct LoginBrake {
    entries: HashMap<IpAddr, Entry>,
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

    /// The failures of `ip` still counted at `now`, after the decay.
    fn count(&self, s: &BrakeSettings, ip: IpAddr, now: Instant) -> u32 {
        let Some(e) = self.entries.get(&ip) else {
            return 0;
        };
        let quiet = now.saturating_duration_since(e.last);
        let forgiven = match s.decay.as_nanos() {
            0 => u128::from(u32::MAX),
            d => quiet.as_nanos() / d,
        };
        let forgiven = u32::try_from(forgiven).unwrap_or(u32::MAX);
        e.failures.saturating_sub(forgiven)
    }

    /// How long a login from an address with `count` failures waits.
    fn delay_for(s: &BrakeSettings, count: u32) -> Option<Duration> {
        let over = count.checked_sub(s.free_failures)?;
        let factor = 1u32 << over.min(20);
        Some(s.base_delay.saturating_mul(factor).min(s.max_delay))
    }

    /// A login from `ip` starts at `now`: when it may be answered, if it
    /// must wait. Each call that returns a deadline counts as one login
    /// held.
    pub fn hold(&mut self, s: &BrakeSettings, ip: IpAddr, now: Instant) -> Option<Instant> {
        let count = self.count(s, ip, now);
        if count == 0 {
            // Fully forgiven: forget it.
            self.entries.remove(&ip);
            return None;
        }
        let delay = Self::delay_for(s, count)?;
        if delay.is_zero() {
            return None;
        }
        self.held_total = self.held_total.saturating_add(1);
        Some(now + delay)
    }

    /// A login from `ip` failed to authenticate at `now`.
    pub fn failed(&mut self, s: &BrakeSettings, ip: IpAddr, now: Instant) {
        self.failures_total = self.failures_total.saturating_add(1);
        if s.capacity == 0 {
            return;
        }
        let count = self.count(s, ip, now);
        if !self.entries.contains_key(&ip) && self.entries.len() >= s.capacity {
            self.evict_oldest();
        }
        self.entries.insert(
            ip,
            Entry {
                failures: count.saturating_add(1).min(MAX_COUNT),
                last: now,
            },
        );
    }

    /// A login from `ip` proved itself (CHAP verified): its failures are
    /// forgotten.
    pub fn succeeded(&mut self, ip: IpAddr) {
        self.entries.remove(&ip);
    }

    fn evict_oldest(&mut self) {
        let oldest = self
            .entries
            .iter()
            .min_by_key(|(_, e)| e.last)
            .map(|(ip, _)| *ip);
        if let Some(ip) = oldest {
            self.entries.remove(&ip);
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

    /// Addresses remembered now.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no address is remembered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("address")
    }

    const SEC: Duration = Duration::from_secs(1);

    #[test]
    fn five_failures_are_free_then_the_hold_doubles_to_its_cap() {
        let s = BrakeSettings::default();
        let mut b = LoginBrake::new();
        let t0 = Instant::now();
        let a = ip("127.0.0.1");
        for _ in 0..5 {
            assert_eq!(b.hold(&s, a, t0), None);
            b.failed(&s, a, t0);
        }
        // The sixth login waits 1 s, and the next 2, 4, 8, 16, then 30.
        let mut want = Vec::new();
        let mut got = Vec::new();
        for (i, secs) in [1u64, 2, 4, 8, 16, 30, 30, 30].iter().enumerate() {
            want.push(Duration::from_secs(*secs));
            let now = t0 + Duration::from_millis(i as u64);
            let until = b.hold(&s, a, now).expect("held");
            got.push(until - now);
            b.failed(&s, a, now);
        }
        assert_eq!(got, want);
        assert_eq!(b.failures_total(), 13);
        assert_eq!(b.held_total(), 8);
        // Many more failures never overflow; the hold stays at its cap.
        for _ in 0..1000 {
            b.failed(&s, a, t0);
        }
        assert_eq!(b.hold(&s, a, t0), Some(t0 + 30 * SEC));
    }

    #[test]
    fn the_hold_is_per_source_address() {
        let s = BrakeSettings::default();
        let mut b = LoginBrake::new();
        let t0 = Instant::now();
        for _ in 0..10 {
            b.failed(&s, ip("127.0.0.1"), t0);
        }
        assert!(b.hold(&s, ip("127.0.0.1"), t0).is_some());
        assert_eq!(b.hold(&s, ip("127.0.0.2"), t0), None);
        assert_eq!(b.hold(&s, ip("::1"), t0), None);
    }

    #[test]
    fn failures_decay_with_quiet_time_and_go_with_a_success() {
        let s = BrakeSettings::default();
        let mut b = LoginBrake::new();
        let t0 = Instant::now();
        let a = ip("10.0.0.7");
        for _ in 0..7 {
            b.failed(&s, a, t0);
        }
        assert_eq!(b.hold(&s, a, t0), Some(t0 + 4 * SEC));
        // One failure forgiven per minute without a new one.
        let t1 = t0 + Duration::from_secs(61);
        assert_eq!(b.hold(&s, a, t1), Some(t1 + 2 * SEC));
        let t2 = t0 + Duration::from_secs(150);
        assert_eq!(b.hold(&s, a, t2), Some(t2 + SEC), "5 left: still held");
        let t2 = t0 + Duration::from_secs(185);
        assert_eq!(b.hold(&s, a, t2), None, "4 left: free again");
        // A failure now counts from what is left (4), not from 7.
        b.failed(&s, a, t2);
        assert_eq!(b.hold(&s, a, t2), Some(t2 + SEC));
        // Fully forgiven entries are forgotten.
        let t3 = t2 + Duration::from_secs(6 * 60);
        assert_eq!(b.hold(&s, a, t3), None);
        assert!(b.is_empty());
        // A proven login forgets at once.
        for _ in 0..9 {
            b.failed(&s, a, t3);
        }
        assert!(b.hold(&s, a, t3).is_some());
        b.succeeded(a);
        assert_eq!(b.hold(&s, a, t3), None);
    }

    #[test]
    fn the_table_is_bounded_and_evicts_the_oldest() {
        let s = BrakeSettings {
            capacity: 3,
            ..BrakeSettings::default()
        };
        let mut b = LoginBrake::new();
        let t0 = Instant::now();
        for i in 0..3u8 {
            for _ in 0..6 {
                b.failed(
                    &s,
                    IpAddr::from([10, 0, 0, i]),
                    t0 + Duration::from_secs(u64::from(i)),
                );
            }
        }
        assert_eq!(b.len(), 3);
        let t = t0 + Duration::from_secs(5);
        b.failed(&s, ip("10.0.0.9"), t);
        assert_eq!(b.len(), 3);
        // 10.0.0.0 had the oldest failure and made room.
        assert_eq!(b.hold(&s, IpAddr::from([10, 0, 0, 0]), t), None);
        assert!(b.hold(&s, IpAddr::from([10, 0, 0, 1]), t).is_some());
        // No capacity: nothing remembered, failures still counted.
        let none = BrakeSettings {
            capacity: 0,
            ..BrakeSettings::default()
        };
        let mut b = LoginBrake::new();
        for _ in 0..10 {
            b.failed(&none, ip("10.0.0.1"), t0);
        }
        assert!(b.is_empty());
        assert_eq!(b.failures_total(), 10);
        assert_eq!(b.hold(&none, ip("10.0.0.1"), t0), None);
    }
}
