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
//! Spinning pays only while its thread has the CPU to itself. When another
//! runnable process shares the CPU, the scheduler takes it from a reactor
//! that spins through its time slice, and the initiator's next command
//! then waits for the reactor's next turn on the CPU instead of waking it:
//! a thread that sleeps in epoll gets the scheduler's wake-up preference,
//! one that spins does not. So the driver reports, between two looks of a
//! spin, how much longer the stretch took than the pause it made; a stretch
//! of [`PREEMPTED`] or more means the thread was descheduled, and the
//! connection then parks at once. For a hold-off that doubles from
//! [`HOLD_MIN`] to [`HOLD_MAX`] while descheduling recurs it spins no
//! longer than [`HELD_SPIN`] and never gives its CPU away on purpose
//! (`sched_yield` would hand it to the competing process for a whole time
//! slice): a wait as long as a QD 1 round trip then ends in epoll, with
//! the wake-up preference, while input that follows at once, as at high
//! queue depths, is still caught without sleeping. After the hold-off it
//! spins as before. Once it has spun for [`CLEAN`] without being
//! descheduled, the hold-off starts from [`HOLD_MIN`] again.
//!
//! Spinning pays only while the connection waits for its peer alone. While
//! it has commands in flight, their completions come from this process's
//! own work (a LUN's workers, a store's threads such as librbd's, the
//! kernel's I/O), which needs a CPU; on a small machine a spinning reactor
//! holds one of them. Drivers therefore spin, and report waits, only when
//! nothing is in flight.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The smallest window a growing budget starts from.
const GROW_FROM: Duration = Duration::from_micros(8);

/// Time lost between two looks of a spin that means the thread was
/// descheduled: far more than a look and its pause take, and less than a
/// scheduler time slice that another process gets.
pub const PREEMPTED: Duration = Duration::from_micros(500);
/// The first hold-off after the thread was descheduled while spinning.
pub const HOLD_MIN: Duration = Duration::from_millis(50);
/// The longest spin during a hold-off: shorter than a round trip to the
/// initiator, longer than the gap between its back-to-back PDUs.
pub const HELD_SPIN: Duration = Duration::from_micros(10);
/// The longest hold-off while descheduling recurs.
pub const HOLD_MAX: Duration = Duration::from_secs(1);
/// Spinning this long after a hold-off without being descheduled resets
/// the hold-off to [`HOLD_MIN`].
pub const CLEAN: Duration = Duration::from_secs(1);

/// The first pause between two looks of a busy-poll (it doubles).
pub const SPIN_STEP_MIN: Duration = Duration::from_micros(2);
/// The longest pause between two looks of a busy-poll.
pub const SPIN_STEP_MAX: Duration = Duration::from_micros(16);
/// The pause before the first look of a wait when the peer streams: a few
/// of a busy initiator's back-to-back commands (about one per 6 µs from
/// iscsi-perf at QD 32 on loopback) arrive in it.
pub const COALESCE: Duration = Duration::from_micros(4);
/// How long a busy-poll runs before each pause also yields the CPU.
pub const SPIN_YIELD_AFTER: Duration = Duration::from_micros(50);

/// Reactors spinning now, over the whole process.
static SPINNING: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Whether a connection of this thread's reactor holds a [`SpinSlot`].
    static SPINNING_HERE: Cell<bool> = const { Cell::new(false) };
    /// Commands this thread's reactor has taken from its connections.
    static COMMANDS_HERE: Cell<u64> = const { Cell::new(0) };
    /// Whether spinning pays on this thread's reactor.
    static GOVERNOR: std::cell::RefCell<Governor> = const { std::cell::RefCell::new(Governor::new()) };
}

/// Counts a command taken on the calling thread's reactor (the
/// [`Governor`]'s measure of what spinning returns).
pub fn count_command() {
    COMMANDS_HERE.set(COMMANDS_HERE.get().wrapping_add(1));
}

/// How long each of a probe's two halves lasts.
pub const PROBE: Duration = Duration::from_millis(100);
/// How much more a reactor must serve while it spins than while it does
/// not for spinning to count as paying.
pub const PAYS: f64 = 1.25;
/// How long spinning stays allowed after a probe found that it pays.
pub const ALLOWED_FOR: Duration = Duration::from_secs(2);
/// The first and the longest time spinning stays off after a probe found
/// that it does not pay.
pub const DENIED_MIN: Duration = Duration::from_secs(1);
/// The longest, which it doubles to while probes keep finding so.
pub const DENIED_MAX: Duration = Duration::from_secs(8);

/// Whether a reactor spins at all, decided from what spinning returns.
///
/// Spinning returns something only where the initiator waits for the
/// target: a closed loop (a queue depth kept full, one command after the
/// other) sends its next command sooner when the answer leaves sooner, so
/// the reactor serves more. Where the initiator sends at its own pace (an
/// open loop: a guest's steady I/O), spinning cannot bring a command
/// sooner; it only holds a CPU, and on a host whose initiator shares the
/// machine (loopback, a hypervisor) it makes things worse: the waker's CPU
/// no longer goes idle, so the woken initiator runs on another, halted
/// CPU, which takes longer to wake (measured here: 1 session paced at
/// 10,000 reads/s answered at a median 72 µs spinning, 45 µs by tgt,
/// which never spins). So the reactor measures it: it serves a probe's
/// first half ([`PROBE`]) without spinning and its second with, and
/// spins for [`ALLOWED_FOR`] if it served [`PAYS`] times as many commands
/// a second with (in two probes in a row where it did not spin before:
/// once may be chance, a backlog the initiator caught up on); otherwise not for [`DENIED_MIN`], doubling to [`DENIED_MAX`]
/// while probes keep finding that it does not pay. Then it probes again.
#[derive(Debug, Clone)]
pub struct Governor {
    state: GovState,
    /// Probes in a row that found spinning pays.
    paid: u32,
    /// What the last decision was.
    spinning: bool,
    /// The next time spinning is denied after a failed probe.
    denied_for: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum GovState {
    /// Nothing measured yet.
    Idle,
    /// A probe's first half (no spinning) began at `since`, with `at`
    /// commands counted.
    Without { since: Instant, at: u64 },
    /// Its second half (spinning) began at `since`; the first served
    /// `without` commands a second.
    With {
        since: Instant,
        at: u64,
        without: f64,
    },
    /// Decided until `until`.
    Decided { spin: bool, until: Instant },
}

impl Governor {
    /// A governor that probes at its first question.
    pub const fn new() -> Governor {
        Governor {
            state: GovState::Idle,
            paid: 0,
            spinning: false,
            denied_for: DENIED_MIN,
        }
    }

    /// Whether the reactor may spin at `now`, with `commands` counted so
    /// far (a running count).
    pub fn allows(&mut self, now: Instant, commands: u64) -> bool {
        match self.state {
            GovState::Idle => {
                self.state = GovState::Without {
                    since: now,
                    at: commands,
                };
                false
            }
            GovState::Without { since, at } => {
                let took = now.saturating_duration_since(since);
                if took < PROBE {
                    return false;
                }
                self.state = GovState::With {
                    since: now,
                    at: commands,
                    without: commands.wrapping_sub(at) as f64 / took.as_secs_f64(),
                };
                true
            }
            GovState::With { since, at, without } => {
                let took = now.saturating_duration_since(since);
                if took < PROBE {
                    return true;
                }
                let with = commands.wrapping_sub(at) as f64 / took.as_secs_f64();
                let pays = with > 0.0 && with >= without * PAYS;
                if pays && self.paid == 0 && !self.spinning {
                    // Once may be chance (a backlog the initiator caught
                    // up on): probe again at once.
                    self.paid = 1;
                    self.state = GovState::Without {
                        since: now,
                        at: commands,
                    };
                    return false;
                }
                self.paid = 0;
                self.spinning = pays;
                if pays {
                    self.denied_for = DENIED_MIN;
                    self.state = GovState::Decided {
                        spin: true,
                        until: now + ALLOWED_FOR,
                    };
                } else {
                    self.state = GovState::Decided {
                        spin: false,
                        until: now + self.denied_for,
                    };
                    self.denied_for = (self.denied_for * 2).min(DENIED_MAX);
                }
                pays
            }
            GovState::Decided { spin, until } => {
                if now < until {
                    return spin;
                }
                self.state = GovState::Without {
                    since: now,
                    at: commands,
                };
                false
            }
        }
    }
}

impl Default for Governor {
    fn default() -> Self {
        Governor::new()
    }
}

/// How many reactors may spin at once: one fewer than the CPUs this
/// process may run on (its affinity mask and CPU quota, as
/// `available_parallelism` reads them), so one CPU is always left for
/// the initiator, the kernel's network work and the host's other
/// processes; none on one CPU.
pub fn spin_slots() -> usize {
    static SLOTS: OnceLock<usize> = OnceLock::new();
    *SLOTS.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(1, usize::from)
            .saturating_sub(1)
    })
}

/// The right to spin, held by one connection of a reactor while it
/// spins; given back when dropped.
///
/// A reactor spins for all its connections at once: the spinning
/// connection's looks let the reactor's other tasks run and its epoll
/// look at every socket, so a second connection of the same reactor gets
/// no slot and parks, to be woken by that look. Across reactors, at most
/// [`spin_slots`] spin at once. A slot is dropped on the thread that took
/// it (a connection's task never leaves its reactor), where it clears
/// that reactor's mark.
#[derive(Debug)]
pub struct SpinSlot(());

impl SpinSlot {
    /// A slot for the calling thread's reactor at `now`, if its
    /// [`Governor`] finds that spinning pays, it has none yet, and fewer
    /// than [`spin_slots`] reactors spin now.
    pub fn take(now: Instant) -> Option<SpinSlot> {
        if spin_slots() == 0 {
            return None;
        }
        let commands = COMMANDS_HERE.get();
        if !GOVERNOR.with_borrow_mut(|g| g.allows(now, commands)) {
            return None;
        }
        SpinSlot::take_within(spin_slots())
    }

    fn take_within(slots: usize) -> Option<SpinSlot> {
        if SPINNING_HERE.get() {
            return None;
        }
        SPINNING
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                (n < slots).then_some(n + 1)
            })
            .ok()?;
        SPINNING_HERE.set(true);
        Some(SpinSlot(()))
    }
}

impl Drop for SpinSlot {
    fn drop(&mut self) {
        SPINNING_HERE.set(false);
        SPINNING.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How long one connection spins before it parks, adapted from how long
/// its recent waits lasted.
#[derive(Debug, Clone)]
pub struct BusyPoll {
    max: Duration,
    budget: Duration,
    /// No spinning before this instant: the thread was descheduled.
    held_until: Option<Instant>,
    /// The next hold-off's length.
    hold: Duration,
    /// The first look without descheduling since the last hold-off began.
    clean_since: Option<Instant>,
}

impl BusyPoll {
    /// A poller that never spins longer than `max` at a time.
    pub fn new(max: Duration) -> BusyPoll {
        BusyPoll {
            max,
            budget: Duration::ZERO,
            held_until: None,
            hold: HOLD_MIN,
            clean_since: None,
        }
    }

    /// Whether it never spins (its bound is zero).
    pub fn off(&self) -> bool {
        self.max.is_zero()
    }

    /// How long to spin, from `now`, before the next park (zero: park at
    /// once); no longer than [`HELD_SPIN`] while a hold-off lasts.
    pub fn budget(&self, now: Instant) -> Duration {
        if self.held(now) {
            self.budget.min(HELD_SPIN)
        } else {
            self.budget
        }
    }

    /// Whether a hold-off lasts at `now`: the thread was descheduled while
    /// spinning not long ago, so a spin must not yield its CPU.
    pub fn held(&self, now: Instant) -> bool {
        self.held_until.is_some_and(|until| now < until)
    }

    /// Between two looks of a spin, at `now`: the stretch since the
    /// previous look took `lost` longer than the pause the driver made in
    /// it. Returns whether to stop spinning and park now: when `lost`
    /// shows the thread was descheduled, which starts a hold-off.
    pub fn spun(&mut self, lost: Duration, now: Instant) -> bool {
        if lost >= PREEMPTED {
            self.held_until = Some(now + self.hold);
            self.hold = (self.hold * 2).min(HOLD_MAX);
            self.clean_since = None;
            return true;
        }
        match self.clean_since {
            None => self.clean_since = Some(now),
            Some(since) if now.saturating_duration_since(since) >= CLEAN => {
                self.hold = HOLD_MIN;
            }
            Some(_) => {}
        }
        false
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
    const MS: Duration = Duration::from_millis(1);

    /// A fixed origin for the synthetic times of these tests.
    fn t0() -> Instant {
        use std::sync::OnceLock;
        static T0: OnceLock<Instant> = OnceLock::new();
        *T0.get_or_init(Instant::now)
    }

    /// A poller whose window has grown to its bound of 50 µs.
    fn warm() -> BusyPoll {
        let mut p = BusyPoll::new(50 * US);
        for _ in 0..10 {
            p.waited(US);
        }
        assert_eq!(p.budget(t0()), 50 * US);
        p
    }

    #[test]
    fn short_gaps_between_looks_keep_it_spinning() {
        let mut p = warm();
        let t = t0();
        for i in 0..100u32 {
            assert!(!p.spun(PREEMPTED - US, t + i * 10 * US));
        }
        assert_eq!(p.budget(t + MS), 50 * US);
    }

    #[test]
    fn descheduled_while_spinning_parks_for_a_hold_off_then_spins_again() {
        let mut p = warm();
        let t = t0();
        assert!(!p.spun(3 * US, t));
        // The thread lost 3 ms between two looks: stop, and no more than
        // a short spin, without yielding, for HOLD_MIN from then.
        let at = t + 4 * MS;
        assert!(!p.held(at));
        assert!(p.spun(3 * MS, at));
        assert!(p.held(at));
        assert_eq!(p.budget(at), HELD_SPIN);
        assert_eq!(p.budget(at + HOLD_MIN - US), HELD_SPIN);
        // Short waits during the hold-off do not bring spinning back early.
        p.waited(US);
        assert_eq!(p.budget(at + HOLD_MIN / 2), HELD_SPIN);
        // After it, the window is the adapted one again.
        assert!(!p.held(at + HOLD_MIN));
        assert_eq!(p.budget(at + HOLD_MIN), 50 * US);
    }

    #[test]
    fn recurring_descheduling_doubles_the_hold_off_up_to_its_bound() {
        let mut p = warm();
        let mut at = t0();
        let mut hold = HOLD_MIN;
        for _ in 0..10 {
            assert!(p.spun(PREEMPTED, at));
            assert_eq!(p.budget(at + hold - US), HELD_SPIN);
            assert_eq!(p.budget(at + hold), 50 * US);
            // Spinning again after the hold-off, briefly, before the next
            // descheduling.
            at += hold;
            assert!(!p.spun(US, at));
            at += 2 * MS;
            hold = (hold * 2).min(HOLD_MAX);
        }
        assert_eq!(hold, HOLD_MAX);
        assert!(p.spun(PREEMPTED, at));
        assert_eq!(p.budget(at + HOLD_MAX - US), HELD_SPIN);
        assert_eq!(p.budget(at + HOLD_MAX), 50 * US);
    }

    #[test]
    fn spinning_clean_for_a_while_resets_the_hold_off() {
        let mut p = warm();
        let mut at = t0();
        for _ in 0..5 {
            assert!(p.spun(2 * MS, at));
            at += HOLD_MAX;
        }
        // The competition is gone: looks come on time for CLEAN.
        assert!(!p.spun(US, at));
        assert!(!p.spun(US, at + CLEAN / 2));
        assert!(!p.spun(US, at + CLEAN));
        // A later descheduling holds off for HOLD_MIN only.
        let at = at + 2 * CLEAN;
        assert!(p.spun(PREEMPTED, at));
        assert_eq!(p.budget(at + HOLD_MIN - US), HELD_SPIN);
        assert_eq!(p.budget(at + HOLD_MIN), 50 * US);
    }

    #[test]
    fn a_hold_off_never_lengthens_a_shorter_window() {
        let mut p = BusyPoll::new(50 * US);
        p.waited(US);
        assert_eq!(p.budget(t0()), 8 * US);
        assert!(p.spun(PREEMPTED, t0()));
        assert_eq!(p.budget(t0()), 8 * US);
    }

    #[test]
    fn a_zero_bound_never_spins_even_after_a_hold_off() {
        let mut p = BusyPoll::new(Duration::ZERO);
        assert!(p.spun(HOLD_MAX, t0()));
        assert_eq!(p.budget(t0() + 2 * HOLD_MAX), Duration::ZERO);
    }

    #[test]
    fn grows_on_short_waits_up_to_the_bound() {
        let mut p = BusyPoll::new(50 * US);
        assert_eq!(p.budget(t0()), Duration::ZERO);
        p.waited(20 * US);
        assert_eq!(p.budget(t0()), 8 * US);
        p.waited(5 * US);
        assert_eq!(p.budget(t0()), 16 * US);
        for _ in 0..10 {
            p.waited(49 * US);
        }
        assert_eq!(p.budget(t0()), 50 * US);
    }

    #[test]
    fn shrinks_to_zero_when_idle() {
        let mut p = BusyPoll::new(50 * US);
        for _ in 0..10 {
            p.waited(US);
        }
        assert_eq!(p.budget(t0()), 50 * US);
        p.waited(Duration::from_millis(3));
        assert_eq!(p.budget(t0()), 25 * US);
        p.waited(Duration::from_millis(3));
        p.waited(Duration::from_millis(3));
        assert_eq!(p.budget(t0()), Duration::ZERO);
        // And comes back once waits are short again.
        p.waited(10 * US);
        assert_eq!(p.budget(t0()), 8 * US);
    }

    /// Runs a governor over `ms` milliseconds, asking every 100 µs, with
    /// commands arriving at `rate_off` per ms while it does not spin and
    /// `rate_on` while it does; returns the share of asks it allowed.
    fn govern(g: &mut Governor, from: Instant, ms: u64, rate_off: u64, rate_on: u64) -> f64 {
        let mut commands = 0u64;
        let mut allowed = 0u64;
        let asks = ms * 10;
        for i in 0..asks {
            let now = from + i as u32 * 100 * US;
            let spin = g.allows(now, commands);
            allowed += u64::from(spin);
            // Per 100 µs: a tenth of the per-ms rate.
            commands += if spin { rate_on } else { rate_off };
        }
        allowed as f64 / asks as f64
    }

    #[test]
    fn a_closed_loop_that_serves_more_while_spinning_keeps_spinning() {
        let mut g = Governor::new();
        // 1.7x as many commands while spinning, as QD 1 showed here.
        let share = govern(&mut g, t0(), 10_000, 10, 17);
        assert!(share > 0.9, "spun {share}");
    }

    #[test]
    fn an_open_loop_that_serves_the_same_stops_spinning() {
        let mut g = Governor::new();
        let share = govern(&mut g, t0(), 20_000, 6, 6);
        // Probes only: 100 ms spinning per 1, 2, 4, 8, 8 ... s.
        assert!(share < 0.05, "spun {share}");
        // And an idle reactor never spins either.
        let mut g = Governor::new();
        assert!(govern(&mut g, t0(), 20_000, 0, 0) < 0.05);
    }

    #[test]
    fn one_lucky_probe_is_not_enough() {
        let mut g = Governor::new();
        let t = t0();
        let mut now = t;
        let mut commands = 0u64;
        // First probe: the spinning half happens to serve twice as much.
        assert!(!g.allows(now, commands));
        now += PROBE;
        commands += 100;
        assert!(g.allows(now, commands));
        now += PROBE;
        commands += 200;
        assert!(!g.allows(now, commands), "a second probe comes first");
        // The second finds no difference: spinning stays off.
        now += PROBE;
        commands += 100;
        assert!(g.allows(now, commands));
        now += PROBE;
        commands += 100;
        assert!(!g.allows(now, commands));
        assert!(!g.allows(now + DENIED_MIN / 2, commands));
    }

    #[test]
    fn a_load_that_turns_closed_is_found_at_the_next_probe() {
        let mut g = Governor::new();
        let start = t0();
        govern(&mut g, start, 3_000, 6, 6);
        // Within the longest denial plus a probe, spinning comes back.
        let later = start + Duration::from_millis(3_000);
        let share = govern(&mut g, later, 20_000, 10, 17);
        assert!(share > 0.5, "spun {share}");
    }

    #[test]
    fn one_slot_per_reactor_and_no_more_than_the_spare_cpus() {
        // This thread plays one reactor, two others two more; with two
        // slots the third reactor gets none until one is given back.
        let mine = SpinSlot::take_within(2).expect("a free slot");
        // A second connection of the same reactor gets none.
        assert!(SpinSlot::take_within(2).is_none());
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || {
            let slot = SpinSlot::take_within(2);
            held_tx.send(slot.is_some()).expect("main thread waits");
            go_rx.recv().expect("main thread signals");
            drop(slot);
        });
        assert!(held_rx.recv().expect("other thread answers"));
        let third = std::thread::spawn(|| SpinSlot::take_within(2).is_some());
        assert!(!third.join().expect("third thread"));
        drop(mine);
        let fourth = std::thread::spawn(|| SpinSlot::take_within(2).is_some());
        assert!(fourth.join().expect("fourth thread"));
        go_tx.send(()).expect("other thread waits");
        other.join().expect("other thread");
        // No slots (one CPU): never.
        assert!(SpinSlot::take_within(0).is_none());
    }

    #[test]
    fn a_zero_bound_never_spins() {
        let mut p = BusyPoll::new(Duration::ZERO);
        for _ in 0..5 {
            p.waited(Duration::ZERO);
        }
        assert_eq!(p.budget(t0()), Duration::ZERO);
    }
}
