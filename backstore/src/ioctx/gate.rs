//! Device slices: the I/O contexts of LUNs on one seeking device take
//! turns at it.
//!
//! Each context keeps its own streams in order, but two contexts feeding
//! one disk's queue independently interleave their backing reads there, so
//! the heads switch regions every few backing reads. That is the seed's
//! collapse one level down. In 2009 the cure had two halves: SCST's threads
//! shared one io_context, and CFQ gave each io_context a time slice of the
//! disk. The contexts are rustgt's first half; this gate is the second.
//!
//! The rules:
//! - one context owns the device at a time; only the owner starts backing
//!   reads on it;
//! - the owner keeps the device while it has reads queued, until it has
//!   started `budget` bytes in this slice *and* another context is
//!   waiting; then it starts nothing more, and its turn ends when its
//!   reads in flight complete;
//! - an owner with nothing queued and nothing in flight while under its
//!   budget keeps the device for [`ANTICIPATE_NS`] while another context
//!   waits (as CFQ idles a few ms for a sequential queue): a stream whose
//!   window ran dry because its reader is slow asks for more within a few
//!   commands, and would otherwise lose a whole round of turns; it gives
//!   the device up at once when nobody waits, or after that time;
//! - waiting contexts get the device in the order they asked for it.
//!
//! The budget is in bytes, as in BFQ, so LUNs on slow inner zones get the
//! same bytes per turn as LUNs on fast outer ones. A context's budget is
//! its own (`device_slice`); the default is sixteen positioning times of
//! transfer (`TURN_POSITIONINGS`, about 200 ms of streaming), so that two
//! LUNs at opposite ends of the stroke lose under a tenth of their time to
//! the switches.
//!
//! A new owner's I/O threads all wake when its turn begins; they start
//! their reads in the order the context's queue gave them out (`seq` in
//! `DeviceGate::enter`), not in wake-up order, so a stream's next reads
//! reach the disks in order.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::time::{Duration, Instant};

/// How often a thread waiting for its turn checks whether its context is
/// stopping.
const STOP_POLL: Duration = Duration::from_millis(50);

/// An owner with nothing in flight loses its turn after this long if
/// others wait: the rules never leave the device owned and idle, and this
/// makes sure of it.
const STALE_TURN: Duration = Duration::from_millis(500);

/// How long an idle owner under budget keeps the device while another
/// context waits: a few 64 KiB commands' round trips on a loaded target
/// (0.1-0.7 ms each end to end), far under one positioning time (12 ms).
pub const ANTICIPATE_NS: u64 = 2_000_000;

/// Counters of one device's gate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GateStats {
    /// Turns started (ownership changes to a context).
    pub turns: u64,
    /// Turns that ended on the budget with another context waiting.
    pub preemptions: u64,
    /// Turns taken from an owner that started nothing for `STALE_TURN`
    /// while others waited (should stay 0).
    pub stale_turns: u64,
}

/// The rules of the module docs, with no threads or clocks: the
/// threaded [`DeviceGate`] and the benchmark's simulation both run them.
#[derive(Debug, Default)]
pub struct TurnState {
    owner: Option<u64>,
    /// Backing reads of the owner in flight.
    inflight: usize,
    /// Bytes the owner started in this turn.
    used: u64,
    /// The owner's budget for this turn.
    budget: u64,
    /// Since when (ns, the caller's clock) the owner, under budget, has had
    /// nothing queued or in flight while others waited.
    idle_since: Option<u64>,
    waiting: VecDeque<u64>,
    /// Threads in `DeviceGate::enter`: context id and the order in which
    /// the context took the read from its queue.
    pending: Vec<(u64, u64)>,
    /// Reads let through by `DeviceGate::enter`, in order (tests).
    #[cfg(test)]
    entered: Vec<(u64, u64)>,
    stats: GateStats,
}

impl TurnState {
    fn others_waiting(&self, id: u64) -> bool {
        self.waiting.iter().any(|&w| w != id)
    }

    /// The owner `id` has used its budget and someone else waits.
    fn spent(&self, id: u64) -> bool {
        self.used >= self.budget && self.others_waiting(id)
    }

    fn end_turn(&mut self) {
        self.owner = None;
        self.used = 0;
        self.inflight = 0;
        self.idle_since = None;
    }

    /// When an idle owner's anticipation ends (ns), if it is anticipating:
    /// a waiting context should ask again then.
    pub fn anticipating_until(&self) -> Option<u64> {
        self.idle_since.map(|t| t.saturating_add(ANTICIPATE_NS))
    }

    /// The counters so far.
    pub fn stats(&self) -> GateStats {
        self.stats
    }

    /// Context `id` wants to start a backing read of `bytes`: true when it
    /// may (the read then counts in flight and against the budget); else
    /// `id` is in line, and should ask again when a turn ends.
    /// `now` is the caller's clock in ns (virtual or wall).
    pub fn try_enter(&mut self, id: u64, budget: u64, bytes: u64, now: u64) -> bool {
        // An owner over budget with nothing in flight yields here (its
        // last read ended before anyone waited).
        if self.owner == Some(id) && self.spent(id) && self.inflight == 0 {
            self.stats.preemptions += 1;
            self.end_turn();
        }
        // An idle owner's anticipation is over.
        if self.owner.is_some_and(|o| o != id)
            && self.anticipating_until().is_some_and(|t| now >= t)
        {
            self.end_turn();
        }
        if self.owner.is_none() && self.waiting.front().is_none_or(|&w| w == id) {
            self.waiting.retain(|&w| w != id);
            self.owner = Some(id);
            self.used = 0;
            self.inflight = 0;
            self.budget = budget;
            self.stats.turns += 1;
        }
        if self.owner == Some(id) && !self.spent(id) {
            self.idle_since = None;
            self.inflight += 1;
            self.used = self.used.saturating_add(bytes);
            return true;
        }
        if !self.waiting.contains(&id) {
            self.waiting.push_back(id);
        }
        false
    }

    /// A read of `id` started by [`try_enter`](Self::try_enter) ended, and
    /// `queued` says whether `id` has more readahead waiting. True when
    /// the turn ended.
    pub fn leave(&mut self, id: u64, queued: bool, now: u64) -> bool {
        if self.owner != Some(id) {
            return false;
        }
        self.inflight = self.inflight.saturating_sub(1);
        self.settle(id, queued, now)
    }

    /// Ends `id`'s turn if it owns the device with nothing in flight and
    /// either its budget spent while others wait, or nothing `queued` and
    /// nobody waiting; with nothing queued, under budget, while others
    /// wait, it anticipates (see [`anticipating_until`](Self::anticipating_until)).
    /// True when the turn ended.
    pub fn settle(&mut self, id: u64, queued: bool, now: u64) -> bool {
        if self.owner != Some(id) || self.inflight > 0 {
            return false;
        }
        let spent = self.spent(id);
        if queued && !spent {
            return false;
        }
        if spent {
            self.stats.preemptions += 1;
        } else if self.others_waiting(id) {
            if self.idle_since.is_none() {
                self.idle_since = Some(now);
            }
            return false;
        }
        self.end_turn();
        true
    }

    /// `id` waits no more, and its turn ends.
    fn forget(&mut self, id: u64) {
        self.withdraw(id);
        if self.owner == Some(id) {
            self.end_turn();
        }
    }

    /// `id` stops waiting.
    fn withdraw(&mut self, id: u64) {
        self.waiting.retain(|&w| w != id);
    }
}

/// The turn-taking of one seeking device (see the `gate` module docs).
#[derive(Debug)]
pub struct DeviceGate {
    key: String,
    /// The clock of `TurnState`'s `now`.
    epoch: Instant,
    state: Mutex<TurnState>,
    turn: Condvar,
}

fn registry() -> &'static Mutex<HashMap<String, Weak<DeviceGate>>> {
    static GATES: OnceLock<Mutex<HashMap<String, Weak<DeviceGate>>>> = OnceLock::new();
    GATES.get_or_init(|| Mutex::new(HashMap::new()))
}

/// A process-wide id for a context at the gate.
pub(crate) fn next_context_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl DeviceGate {
    /// The gate of device `key`, shared by every live context on it.
    pub fn of_device(key: &str) -> Arc<DeviceGate> {
        let mut gates = registry().lock().unwrap_or_else(PoisonError::into_inner);
        gates.retain(|_, g| g.strong_count() > 0);
        if let Some(g) = gates.get(key).and_then(Weak::upgrade) {
            return g;
        }
        let g = Arc::new(DeviceGate {
            key: key.to_owned(),
            epoch: Instant::now(),
            state: Mutex::new(TurnState::default()),
            turn: Condvar::new(),
        });
        gates.insert(key.to_owned(), Arc::downgrade(&g));
        g
    }

    /// The device key the gate was made for ([`Self::of_device`]).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The gate's counters so far, for the LUN statistics.
    pub fn stats(&self) -> GateStats {
        self.lock().stats
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn lock(&self) -> MutexGuard<'_, TurnState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Blocks until context `id` may start a backing read of `bytes`, then
    /// counts it in flight. Returns false, holding nothing, once `stopping`
    /// says so.
    ///
    /// `seq` is the order in which the context took the read from its
    /// queue: of one context's threads waiting here, the lowest `seq`
    /// starts first. When a turn begins, every thread of the new owner
    /// wakes at once, and in wake-up order their reads (the next few MiB
    /// of a stream) would reach the disks shuffled, each out-of-order one
    /// costing a short seek and a rotation; the simulation starts them in
    /// queue order.
    pub(crate) fn enter(
        &self,
        id: u64,
        seq: u64,
        budget: u64,
        bytes: u64,
        stopping: &dyn Fn() -> bool,
    ) -> bool {
        let mut st = self.lock();
        st.pending.push((id, seq));
        let mut idle_owner_since: Option<Instant> = None;
        loop {
            if stopping() {
                st.pending.retain(|&p| p != (id, seq));
                if !st.pending.iter().any(|&(i, _)| i == id) {
                    st.withdraw(id);
                }
                self.turn.notify_all();
                return false;
            }
            let first = !st.pending.iter().any(|&(i, s)| i == id && s < seq);
            let before = st.owner;
            if first && st.try_enter(id, budget, bytes, self.now()) {
                st.pending.retain(|&p| p != (id, seq));
                #[cfg(test)]
                st.entered.push((id, seq));
                if st.pending.iter().any(|&(i, _)| i == id) {
                    // The context's next read may go now.
                    self.turn.notify_all();
                }
                return true;
            }
            if before.is_some() && st.owner.is_none() {
                self.turn.notify_all();
            }
            // Safety valve: an owner that starts nothing for a long time
            // while others wait loses its turn.
            if st.owner.is_some() && st.inflight == 0 {
                let since = *idle_owner_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= STALE_TURN {
                    st.stats.stale_turns += 1;
                    st.end_turn();
                    continue;
                }
            } else {
                idle_owner_since = None;
            }
            // An anticipating owner may lose the device before anyone
            // signals: ask again when its time is up.
            let wait = st
                .anticipating_until()
                .map_or(STOP_POLL, |t| {
                    Duration::from_nanos(t.saturating_sub(self.now()).saturating_add(1))
                })
                .min(STOP_POLL);
            st = self
                .turn
                .wait_timeout(st, wait)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }

    /// A read of context `id` ended; `queued` says whether the context has
    /// more readahead waiting.
    pub(crate) fn leave(&self, id: u64, queued: bool) {
        let now = self.now();
        if self.lock().leave(id, queued, now) {
            self.turn.notify_all();
        }
    }

    /// Context `id` did something outside its turn (a demand read): ends
    /// its turn if it is idle.
    pub(crate) fn settle(&self, id: u64, queued: bool) {
        let now = self.now();
        if self.lock().settle(id, queued, now) {
            self.turn.notify_all();
        }
    }

    /// Context `id` is going away: it waits no more, and its turn ends.
    pub(crate) fn forget(&self, id: u64) {
        self.lock().forget(id);
        self.turn.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    fn never() -> bool {
        false
    }

    #[test]
    fn one_owner_at_a_time_and_turns_pass_in_order() {
        let g = DeviceGate::of_device("test:order");
        assert!(g.enter(1, 0, 100, 60, &never));
        // The owner may start more while under budget, even with others waiting.
        assert!(g.enter(1, 0, 100, 60, &never));
        let g2 = Arc::clone(&g);
        let waiter = std::thread::spawn(move || {
            let ok = g2.enter(2, 0, 100, 10, &never);
            g2.leave(2, false);
            ok
        });
        // Wait until context 2 queues (bounded).
        for _ in 0..200 {
            if g.lock().waiting.contains(&2) {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(
            g.lock().waiting.iter().copied().collect::<Vec<_>>(),
            vec![2]
        );
        // Budget spent with a waiter: the owner's turn ends with its reads.
        g.leave(1, true);
        assert_eq!(g.lock().owner, Some(1), "a read is still in flight");
        g.leave(1, true);
        assert!(waiter.join().unwrap_or(false));
        let s = g.stats();
        assert_eq!((s.turns, s.preemptions), (2, 1));
        assert_eq!(g.lock().owner, None);
    }

    #[test]
    fn an_idle_owner_gives_the_device_up_and_a_lone_owner_keeps_it() {
        let g = DeviceGate::of_device("test:idle");
        for _ in 0..10 {
            assert!(g.enter(7, 0, 10, 100, &never));
            g.leave(7, true);
        }
        // Far over budget, but nobody waits: still one turn.
        assert_eq!(g.stats().turns, 1);
        assert_eq!(g.lock().owner, Some(7));
        assert!(g.enter(7, 0, 10, 0, &never));
        g.leave(7, false);
        assert_eq!(g.lock().owner, None);
    }

    #[test]
    fn a_stopping_waiter_returns_and_forget_frees_the_device() {
        let g = DeviceGate::of_device("test:stop");
        assert!(g.enter(1, 0, 10, 0, &never));
        let stop = Arc::new(AtomicBool::new(false));
        let (g2, s2) = (Arc::clone(&g), Arc::clone(&stop));
        let waiter =
            std::thread::spawn(move || g2.enter(2, 0, 10, 0, &|| s2.load(Ordering::Relaxed)));
        std::thread::sleep(Duration::from_millis(20));
        stop.store(true, Ordering::Relaxed);
        assert!(!waiter.join().unwrap_or(true));
        assert!(g.lock().waiting.is_empty());
        g.forget(1);
        assert_eq!(g.lock().owner, None);
        assert!(g.enter(3, 0, 10, 0, &never));
    }

    #[test]
    fn an_owner_over_budget_yields_at_its_next_read_when_someone_waits() {
        let g = DeviceGate::of_device("test:yield");
        assert!(g.enter(1, 0, 10, 100, &never));
        // Nobody waits when the read ends: the owner keeps the device.
        g.leave(1, true);
        assert_eq!(g.lock().owner, Some(1));
        let g2 = Arc::clone(&g);
        let waiter = std::thread::spawn(move || g2.enter(2, 0, 10, 0, &never));
        for _ in 0..200 {
            if g.lock().waiting.contains(&2) {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        // Its next read must let context 2 go first instead of hanging.
        let g3 = Arc::clone(&g);
        let owner = std::thread::spawn(move || g3.enter(1, 0, 10, 0, &never));
        assert!(waiter.join().unwrap_or(false));
        g.leave(2, false);
        assert!(owner.join().unwrap_or(false));
        let s = g.stats();
        assert_eq!((s.turns, s.preemptions, s.stale_turns), (3, 1, 0));
    }

    #[test]
    fn a_new_owners_reads_start_in_queue_order() {
        let g = DeviceGate::of_device("test:inorder");
        // Context 1 owns the device, over budget, one read in flight.
        assert!(g.enter(1, 0, 10, 100, &never));
        // Context 2's threads took reads 5, 6 and 7 from its queue and wait
        // here; they reach the gate in the opposite order.
        let mut threads = Vec::new();
        for seq in [7u64, 6, 5] {
            let g2 = Arc::clone(&g);
            threads.push(std::thread::spawn(move || {
                g2.enter(2, seq, 1000, 10, &never)
            }));
            for _ in 0..200 {
                if g.lock().pending.contains(&(2, seq)) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        assert_eq!(g.lock().pending.len(), 3);
        // The turn passes: all three wake at once, and start 5, 6, 7.
        g.leave(1, true);
        for t in threads {
            assert!(t.join().unwrap_or(false));
        }
        assert_eq!(g.lock().entered, vec![(1, 0), (2, 5), (2, 6), (2, 7)]);
        assert!(g.lock().pending.is_empty());
        assert_eq!(g.lock().owner, Some(2));
    }

    #[test]
    fn an_idle_owner_under_budget_anticipates_while_another_waits() {
        let mut t = TurnState::default();
        let a = ANTICIPATE_NS;
        assert!(t.try_enter(1, 1000, 100, 0));
        assert!(!t.try_enter(2, 1000, 100, 1));
        // Its window ran dry: nothing queued, under budget, 2 waits.
        assert!(!t.leave(1, false, 10));
        assert_eq!(t.anticipating_until(), Some(10 + a));
        assert!(!t.try_enter(2, 1000, 100, 10 + a - 1));
        // Its reader asked for more in time: the turn goes on.
        assert!(t.try_enter(1, 1000, 100, 10 + a - 1));
        assert_eq!(t.anticipating_until(), None);
        assert!(!t.leave(1, false, 2 * a));
        // This time it did not: 2 takes the device when the time is up.
        assert!(!t.try_enter(2, 1000, 100, 3 * a - 1));
        assert!(t.try_enter(2, 1000, 100, 3 * a));
        assert_eq!(t.owner, Some(2));
        assert_eq!(t.stats().turns, 2);
        // With nobody waiting an idle owner gives the device up at once.
        assert!(t.leave(2, false, 3 * a + 1));
        assert_eq!(t.owner, None);
    }

    #[test]
    fn settle_ends_an_idle_turn() {
        let g = DeviceGate::of_device("test:settle");
        assert!(g.enter(4, 0, 10, 0, &never));
        g.leave(4, true);
        assert_eq!(g.lock().owner, Some(4));
        g.settle(4, false);
        assert_eq!(g.lock().owner, None);
    }

    #[test]
    fn gates_are_shared_by_key() {
        let a = DeviceGate::of_device("test:key");
        let b = DeviceGate::of_device("test:key");
        let c = DeviceGate::of_device("test:other");
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(a.key(), "test:key");
    }
}
