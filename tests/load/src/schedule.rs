//! The open-loop schedule of one session and what it records: command k
//! is due at `start + phase + k / rate`, whatever became of the commands
//! before it, and its latency counts from that due time, or from when a
//! queue slot freed (so a slow answer is not hidden by a later send: no
//! coordinated omission), but not from the client's own lateness.

use std::time::{Duration, Instant};

/// When a session's commands are due.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    first: Instant,
    /// Time between two commands; `None`: unpaced (as fast as the queue
    /// depth allows).
    interval: Option<Duration>,
    sent: u64,
}

impl Schedule {
    /// Commands at `rate` per second from `start + phase`; a rate of 0 is
    /// unpaced.
    pub fn new(start: Instant, phase: Duration, rate: f64) -> Schedule {
        let interval =
            (rate > 0.0 && rate.is_finite()).then(|| Duration::from_secs_f64(1.0 / rate));
        Schedule {
            first: start + phase,
            interval,
            sent: 0,
        }
    }

    /// The phase of session `index` of `sessions` at `rate` each, so the
    /// sessions do not all fire at once: spread evenly over one interval.
    pub fn phase(index: usize, sessions: usize, rate: f64) -> Duration {
        if rate <= 0.0 || !rate.is_finite() || sessions == 0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64(index as f64 / sessions as f64 / rate)
    }

    /// When the next command is due; `now` when unpaced.
    pub fn next_due(&self, now: Instant) -> Instant {
        match self.interval {
            None => now,
            Some(i) => {
                let k = u32::try_from(self.sent).unwrap_or(u32::MAX);
                // Interval × k, computed without accumulating error.
                self.first + i.saturating_mul(k)
            }
        }
    }

    /// Whether a command is due at `now`.
    pub fn due(&self, now: Instant) -> bool {
        self.next_due(now) <= now
    }

    /// The next command was sent.
    pub fn advance(&mut self) {
        self.sent += 1;
    }

    /// Whether the schedule is paced.
    pub fn paced(&self) -> bool {
        self.interval.is_some()
    }
}

/// How late the client itself was in sending a command: from when it
/// could have been sent (due, and a queue slot free) to when it was.
/// Waiting for a slot is the target's doing (a full queue), not the
/// client's, and is not counted here; it shows in the latency.
pub fn client_lateness(due: Instant, slot_free_since: Instant, sent: Instant) -> Duration {
    sent.saturating_duration_since(due.max(slot_free_since))
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn due_times_are_absolute_and_do_not_drift() {
        let t0 = Instant::now();
        let mut s = Schedule::new(t0, 10 * US, 6000.0);
        assert!(s.paced());
        for _ in 0..6000 {
            s.advance();
        }
        // One second and the phase after the start, to within rounding.
        let at = s.next_due(t0);
        let err = at.saturating_duration_since(t0 + Duration::from_secs(1) + 10 * US);
        assert!(err < 10 * US, "drifted by {err:?}");
        // A late send does not move the next due time.
        let before = s.next_due(t0);
        let _late = before + Duration::from_millis(5);
        assert_eq!(s.next_due(t0), before);
    }

    #[test]
    fn unpaced_is_always_due() {
        let t0 = Instant::now();
        let s = Schedule::new(t0, Duration::ZERO, 0.0);
        assert!(!s.paced());
        assert!(s.due(t0));
        assert_eq!(s.next_due(t0 + US), t0 + US);
    }

    #[test]
    fn phases_spread_sessions_over_one_interval() {
        assert_eq!(Schedule::phase(0, 4, 1000.0), Duration::ZERO);
        assert_eq!(Schedule::phase(2, 4, 1000.0), Duration::from_micros(500));
        assert_eq!(Schedule::phase(3, 4, 0.0), Duration::ZERO);
    }

    #[test]
    fn lateness_excludes_waiting_for_a_slot() {
        let t0 = Instant::now();
        // Due at t0, the slot freed at t0 + 100 µs, sent 3 µs after that.
        assert_eq!(client_lateness(t0, t0 + 100 * US, t0 + 103 * US), 3 * US);
        // The slot was free long before the due time.
        assert_eq!(client_lateness(t0 + 50 * US, t0, t0 + 60 * US), 10 * US);
        // Sent before due (cannot happen, but never negative).
        assert_eq!(client_lateness(t0 + 50 * US, t0, t0), Duration::ZERO);
    }
}
