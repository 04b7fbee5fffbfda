//! Bounded, adaptive busy-polling of a connection before its reactor
//! parks.
//!
//! On a virtual machine a parked reactor's CPU halts, and waking it takes
//! an inter-processor interrupt and a trip through the hypervisor; at
//! moderate queue depths that wake-up, not the work, sets the pace. A
//! connection that expects its next PDU soon therefore checks its socket
//! (and its port messages) without sleeping for a short while first, as
//! KVM's halt-polling does for a vCPU: the window grows while waits end
//! within the configured bound and shrinks while they outlast it, so an
//! idle connection stops spinning after a few waits and a busy one keeps
//! its CPU awake. `0` (or a bound of zero) never spins.
//!
//! Spinning pays only while the connection waits for its peer alone. While
//! it has commands in flight, their completions come from this process's
//! own work (a LUN's workers, a store's threads such as librbd's, the
//! kernel's I/O), which needs a CPU; on a small machine a spinning reactor
//! holds one of them. Drivers therefore spin, and report waits, only when
//! nothing is in flight.

use std::time::Duration;

/// The smallest window a growing budget starts from.
const GROW_FROM: Duration = Duration::from_micros(8);

/// How long one connection spins before it parks, adapted from how long
/// its recent waits lasted.
#[derive(Debug, Clone)]
pub struct BusyPoll {
    max: Duration,
    budget: Duration,
}

impl BusyPoll {
    /// A poller that never spins longer than `max` at a time.
    pub fn new(max: Duration) -> BusyPoll {
        BusyPoll {
            max,
            budget: Duration::ZERO,
        }
    }

    /// How long to spin before the next park (zero: park at once).
    pub fn budget(&self) -> Duration {
        self.budget
    }

    /// The connection waited `waited` for its next input, spinning and
    /// parked together. A wait that ended within the bound would have been
    /// caught by a long enough spin, so the window grows (doubling, up to
    /// the bound); a longer one means the connection is idle, so it
    /// halves, and below the smallest window it stops spinning.
    pub fn waited(&mut self, waited: Duration) {
        if self.max.is_zero() {
            return;
        }
        if waited <= self.max {
            self.budget = (self.budget * 2).max(GROW_FROM).min(self.max);
        } else {
            self.budget /= 2;
            if self.budget < GROW_FROM {
                self.budget = Duration::ZERO;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn grows_on_short_waits_up_to_the_bound() {
        let mut p = BusyPoll::new(50 * US);
        assert_eq!(p.budget(), Duration::ZERO);
        p.waited(20 * US);
        assert_eq!(p.budget(), 8 * US);
        p.waited(5 * US);
        assert_eq!(p.budget(), 16 * US);
        for _ in 0..10 {
            p.waited(49 * US);
        }
        assert_eq!(p.budget(), 50 * US);
    }

    #[test]
    fn shrinks_to_zero_when_idle() {
        let mut p = BusyPoll::new(50 * US);
        for _ in 0..10 {
            p.waited(US);
        }
        assert_eq!(p.budget(), 50 * US);
        p.waited(Duration::from_millis(3));
        assert_eq!(p.budget(), 25 * US);
        p.waited(Duration::from_millis(3));
        p.waited(Duration::from_millis(3));
        assert_eq!(p.budget(), Duration::ZERO);
        // And comes back once waits are short again.
        p.waited(10 * US);
        assert_eq!(p.budget(), 8 * US);
    }

    #[test]
    fn a_zero_bound_never_spins() {
        let mut p = BusyPoll::new(Duration::ZERO);
        for _ in 0..5 {
            p.waited(Duration::ZERO);
        }
        assert_eq!(p.budget(), Duration::ZERO);
    }
}
