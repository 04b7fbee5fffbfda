//! The open-loop timeline of one session and its random numbers.
//!
//! Command `k` of a session is due at `start + phase + k / rate`, whatever
//! happened to command `k - 1`: a late answer does not move the next due
//! time, and a command that waits for a free slot of the queue depth keeps
//! its due time (its latency counts from there, so a slow target is not
//! hidden by a client that slowed down with it: no coordinated omission).

use std::time::{Duration, Instant};

/// When the commands of one session are due.
#[derive(Debug, Clone)]
pub struct Schedule {
    start: Instant,
    /// `None`: unpaced, every command is due when a slot is free.
    interval_ns: Option<f64>,
    /// No command is ever due.
    idle: bool,
    k: u64,
}

impl Schedule {
    /// `rate` commands per second from `start + phase` (0: unpaced).
    pub fn new(start: Instant, rate: f64, phase: Duration) -> Schedule {
        if rate > 0.0 {
            Schedule {
                start: start + phase,
                interval_ns: Some(1e9 / rate),
                idle: false,
                k: 0,
            }
        } else {
            Schedule {
                start,
                interval_ns: None,
                idle: false,
                k: 0,
            }
        }
    }

    /// A timeline with no command.
    pub fn idle(start: Instant) -> Schedule {
        Schedule {
            start,
            interval_ns: None,
            idle: true,
            k: 0,
        }
    }

    /// The due time of the next command: on the timeline when paced; `now`
    /// when unpaced.
    pub fn next_due(&self, now: Instant) -> Option<Instant> {
        if self.idle {
            return None;
        }
        match self.interval_ns {
            Some(i) => {
                // Rounded to the nanosecond: no drift over the run.
                let off = (self.k as f64 * i).round();
                Some(self.start + Duration::from_nanos(off as u64))
            }
            None => Some(now.max(self.start)),
        }
    }

    /// The next command was sent.
    pub fn advance(&mut self) {
        self.k += 1;
    }

    /// Commands sent so far.
    pub fn sent(&self) -> u64 {
        self.k
    }
}

/// The per-session phase offset: sessions spread evenly over one interval
/// so they do not fire in lockstep.
pub fn phase(index: usize, sessions: usize, rate: f64) -> Duration {
    if rate <= 0.0 || sessions == 0 {
        return Duration::ZERO;
    }
    Duration::from_secs_f64(index as f64 / sessions as f64 / rate)
}

/// SplitMix64: a few lines of well-known generator, enough for offsets.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0; 0 otherwise).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paced_due_times_are_absolute() {
        let t0 = Instant::now();
        let mut s = Schedule::new(t0, 6000.0, Duration::ZERO);
        let mut dues = Vec::new();
        for _ in 0..6000 {
            dues.push(s.next_due(t0).unwrap());
            s.advance();
        }
        // Interval 166.67 µs, no drift after 6000 commands.
        assert_eq!(dues[1] - dues[0], Duration::from_nanos(166_667));
        assert_eq!(dues[3] - dues[0], Duration::from_micros(500));
        assert_eq!(s.next_due(t0).unwrap() - t0, Duration::from_secs(1));
        // Being late (asking much later) does not move the timeline.
        let late = t0 + Duration::from_secs(5);
        assert_eq!(s.next_due(late).unwrap() - t0, Duration::from_secs(1));
        assert_eq!(s.sent(), 6000);
    }

    #[test]
    fn phase_spreads_sessions_over_one_interval() {
        assert_eq!(phase(0, 4, 1000.0), Duration::ZERO);
        assert_eq!(phase(2, 4, 1000.0), Duration::from_micros(500));
        assert_eq!(phase(3, 4, 0.0), Duration::ZERO);
        let t0 = Instant::now();
        let s = Schedule::new(t0, 1000.0, phase(1, 4, 1000.0));
        assert_eq!(s.next_due(t0).unwrap() - t0, Duration::from_micros(250));
    }

    #[test]
    fn unpaced_is_due_now() {
        let t0 = Instant::now();
        let s = Schedule::new(t0, 0.0, Duration::from_secs(1));
        let later = t0 + Duration::from_millis(3);
        assert_eq!(s.next_due(later), Some(later));
        assert_eq!(Schedule::idle(t0).next_due(later), None);
    }

    #[test]
    fn rng_below_is_in_range_and_spread() {
        let mut r = Rng::new(7);
        let mut seen = [0u32; 10];
        for _ in 0..10_000 {
            let v = r.below(10);
            assert!(v < 10);
            seen[v as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n > 800), "{seen:?}");
        assert_eq!(r.below(0), 0);
    }
}
