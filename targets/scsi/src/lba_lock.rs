//! Per-LUN LBA range locks: the scheme that makes COMPARE AND WRITE,
//! ORWRITE and WRITE ATOMIC atomic with respect to other commands
//! (SBC-3 §5.2, SBC-4 §4.29), and overlapping writes run one at a time.
//!
//! Three kinds of request:
//! - **read** (READ, VERIFY, a copy's source): conflicts only with an
//!   atomic request. SBC promises a read nothing about a plain write that
//!   overlaps it (LIO, SCST and tgt lock no reads), so while no atomic
//!   request is registered on the LUN a read registers nothing: it counts
//!   itself in an atomic counter and goes on (no mutex, no list);
//! - **write** (WRITE, WRITE SAME, UNMAP, a copy's destination, the ring's
//!   writes): conflicts with overlapping writes and atomic requests;
//! - **atomic** (COMPARE AND WRITE, ORWRITE, WRITE ATOMIC, another
//!   gateway's fence): conflicts with every overlapping request, and also
//!   waits until the unregistered reads in flight when it arrived are done
//!   (any range: they registered none), so a reader never sees half of it.
//!
//! Guarantees:
//! - first come, first served among registered requests: a request waits
//!   for every earlier request (granted or still waiting) whose range
//!   overlaps and whose kind conflicts; a read that arrives while an
//!   atomic request is registered registers, behind it, so a stream of
//!   readers cannot starve an atomic writer;
//! - no deadlock: a command holds at most one range at a time and waits
//!   only for requests that arrived before it;
//! - zero-length ranges lock nothing;
//! - the lock is released when the guard drops, on every path;
//! - inside a non-blocking attempt (`rustgt_backstore::nowait`) a request
//!   that would wait is not queued: it fails with the would-block error,
//!   and the command runs again on a worker;
//! - a release wakes waiters only when there are any.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use crate::sense::Sense;

/// What a request does to its blocks (see the module's text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Read,
    Write,
    Atomic,
}

/// One registered request, granted or waiting, in arrival order.
#[derive(Debug, Clone, Copy)]
struct Request {
    id: u64,
    start: u64,
    /// Exclusive end; `start < end`.
    end: u64,
    kind: Kind,
}

impl Request {
    fn conflicts(&self, other: &Request) -> bool {
        let overlap = self.start < other.end && other.start < self.end;
        overlap
            && match (self.kind, other.kind) {
                (Kind::Atomic, _) | (_, Kind::Atomic) => true,
                (Kind::Write, Kind::Write) => true,
                (Kind::Read, _) | (_, Kind::Read) => false,
            }
    }
}

#[derive(Debug, Default)]
struct State {
    requests: Vec<Request>,
    next_id: u64,
    /// Requests blocked in `acquire` (so a release knows whether to wake).
    waiters: usize,
}

impl State {
    /// The next request for `blocks` (> 0) blocks from `lba`, not queued yet.
    fn request(&self, lba: u64, blocks: u64, kind: Kind) -> Request {
        Request {
            id: self.next_id,
            start: lba,
            end: lba.saturating_add(blocks),
            kind,
        }
    }

    /// Whether any request, granted or waiting, conflicts with `me`.
    fn conflicts_any(&self, me: &Request) -> bool {
        self.requests.iter().any(|r| r.conflicts(me))
    }

    /// Queues `me` (made by [`State::request`]) behind every request there.
    fn enqueue(&mut self, me: Request) {
        self.next_id = self.next_id.wrapping_add(1);
        self.requests.push(me);
    }

    /// Whether a request queued earlier than `me` conflicts with it.
    fn blocked(&self, me: &Request) -> bool {
        self.requests
            .iter()
            .take_while(|r| r.id != me.id)
            .any(|r| r.conflicts(me))
    }
}

/// The range locks of one logical unit.
#[derive(Debug, Default)]
pub(crate) struct LbaLocks {
    state: Mutex<State>,
    released: Condvar,
    /// Reads in flight that registered nothing.
    reads: AtomicUsize,
    /// Atomic requests registered (granted or waiting): while there is
    /// one, reads register.
    atomics: AtomicUsize,
}

/// A range held past its command's stack (see [`LbaLocks::try_hold`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hold {
    /// A read that registered nothing.
    Read,
    /// A registered request.
    Range(u64),
}

/// Holds a range until dropped.
#[must_use = "the range is unlocked when the guard is dropped"]
#[derive(Debug)]
pub(crate) struct LbaGuard<'a> {
    locks: &'a LbaLocks,
    /// `None` for an empty range (nothing was locked).
    hold: Option<Hold>,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    // A poisoned lock only means a panic elsewhere; the list stays valid.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl LbaLocks {
    /// A lock on `blocks` blocks from `lba` for a command that only reads.
    /// Fails only inside a non-blocking attempt, when it would wait.
    pub(crate) fn shared(&self, lba: u64, blocks: u64) -> Result<LbaGuard<'_>, Sense> {
        self.acquire(lba, blocks, Kind::Read)
    }

    /// Exclusive lock on `blocks` blocks from `lba`, for commands that write.
    /// Fails only inside a non-blocking attempt, when it would wait.
    pub(crate) fn exclusive(&self, lba: u64, blocks: u64) -> Result<LbaGuard<'_>, Sense> {
        self.acquire(lba, blocks, Kind::Write)
    }

    /// Lock on `blocks` blocks from `lba` for a command that must be atomic
    /// against every other (COMPARE AND WRITE, ORWRITE, WRITE ATOMIC).
    /// Fails only inside a non-blocking attempt, when it would wait.
    pub(crate) fn atomic(&self, lba: u64, blocks: u64) -> Result<LbaGuard<'_>, Sense> {
        self.acquire(lba, blocks, Kind::Atomic)
    }

    /// A read without registering, unless an atomic request is registered.
    fn read_unregistered(&self) -> bool {
        // Paired with `atomics`' increment and `reads`' load in `begin`:
        // of a read and an atomic request arriving together, at least one
        // sees the other.
        self.reads.fetch_add(1, Ordering::SeqCst);
        if self.atomics.load(Ordering::SeqCst) == 0 {
            return true;
        }
        self.read_done();
        false
    }

    /// An unregistered read finished: an atomic request waiting for the
    /// reads in flight is told when the last one is.
    fn read_done(&self) {
        if self.reads.fetch_sub(1, Ordering::SeqCst) == 1 && self.atomics.load(Ordering::SeqCst) > 0
        {
            // Under the mutex, so a request that just saw reads in flight
            // is already waiting when this wakes it.
            let wake = lock(&self.state).waiters > 0;
            if wake {
                self.released.notify_all();
            }
        }
    }

    /// Registers `kind` (under `state`); an atomic request counts itself
    /// first, so reads arriving from now on register.
    fn begin(&self, state: &mut State, lba: u64, blocks: u64, kind: Kind) -> Request {
        if kind == Kind::Atomic {
            self.atomics.fetch_add(1, Ordering::SeqCst);
        }
        state.request(lba, blocks, kind)
    }

    /// Whether `me` (registered) must wait: for an earlier conflicting
    /// request, or, atomic, for unregistered reads in flight.
    fn must_wait(&self, state: &State, me: &Request) -> bool {
        state.blocked(me) || (me.kind == Kind::Atomic && self.reads.load(Ordering::SeqCst) > 0)
    }

    /// Whether `me` (not registered) would wait if it were.
    fn would_wait(&self, state: &State, me: &Request) -> bool {
        state.conflicts_any(me)
            || (me.kind == Kind::Atomic && self.reads.load(Ordering::SeqCst) > 0)
    }

    /// Undoes [`Self::begin`] for a request never queued.
    fn withdraw(&self, me: &Request) {
        if me.kind == Kind::Atomic {
            self.atomics.fetch_sub(1, Ordering::SeqCst);
        }
    }

    fn acquire(&self, lba: u64, blocks: u64, kind: Kind) -> Result<LbaGuard<'_>, Sense> {
        if blocks == 0 {
            return Ok(LbaGuard {
                locks: self,
                hold: None,
            });
        }
        if kind == Kind::Read && self.read_unregistered() {
            return Ok(LbaGuard {
                locks: self,
                hold: Some(Hold::Read),
            });
        }
        let mut state = lock(&self.state);
        let me = self.begin(&mut state, lba, blocks, kind);
        if rustgt_backstore::nowait::active() && self.would_wait(&state, &me) {
            self.withdraw(&me);
            return Err(Sense::from(rustgt_backstore::nowait::would_block()));
        }
        state.enqueue(me);
        while self.must_wait(&state, &me) {
            state.waiters += 1;
            state = self
                .released
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
            state.waiters -= 1;
        }
        Ok(LbaGuard {
            locks: self,
            hold: Some(Hold::Range(me.id)),
        })
    }

    /// Takes the range now or not at all (`None` when it would wait), for
    /// a command whose I/O completes later on another stack: it calls
    /// [`Self::release_held`] with the hold when done (`Some(None)`: an
    /// empty range, nothing to release).
    pub(crate) fn try_hold(&self, lba: u64, blocks: u64, kind: Kind) -> Option<Option<Hold>> {
        if blocks == 0 {
            return Some(None);
        }
        if kind == Kind::Read && self.read_unregistered() {
            return Some(Some(Hold::Read));
        }
        let mut state = lock(&self.state);
        let me = self.begin(&mut state, lba, blocks, kind);
        if self.would_wait(&state, &me) {
            self.withdraw(&me);
            return None;
        }
        state.enqueue(me);
        Some(Some(Hold::Range(me.id)))
    }

    /// Takes the range as an atomic request, waiting in turn (first come,
    /// first served) until `deadline` at most, for a holder that releases
    /// it later from elsewhere with [`Self::release_held`]: another
    /// gateway's COMPARE AND WRITE fencing this gateway's commands off its
    /// blocks. While it waits, later overlapping requests queue behind it.
    /// `None` when the deadline passed first (the request is withdrawn);
    /// `Some(None)` for an empty range.
    pub(crate) fn hold_until(
        &self,
        lba: u64,
        blocks: u64,
        deadline: Instant,
    ) -> Option<Option<Hold>> {
        if blocks == 0 {
            return Some(None);
        }
        let mut state = lock(&self.state);
        let me = self.begin(&mut state, lba, blocks, Kind::Atomic);
        let id = me.id;
        state.enqueue(me);
        loop {
            if !self.must_wait(&state, &me) {
                return Some(Some(Hold::Range(id)));
            }
            let now = Instant::now();
            if now >= deadline {
                drop(state);
                // Withdrawn: whoever queued behind it may go now.
                self.release(id);
                return None;
            }
            state.waiters += 1;
            state = self
                .released
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            state.waiters -= 1;
        }
    }

    /// Releases a range of [`Self::try_hold`] or [`Self::hold_until`].
    pub(crate) fn release_held(&self, hold: Option<Hold>) {
        match hold {
            None => {}
            Some(Hold::Read) => self.read_done(),
            Some(Hold::Range(id)) => self.release(id),
        }
    }

    fn release(&self, id: u64) {
        let mut state = lock(&self.state);
        let Some(at) = state.requests.iter().position(|r| r.id == id) else {
            return;
        };
        let gone = state.requests.remove(at);
        if gone.kind == Kind::Atomic {
            self.atomics.fetch_sub(1, Ordering::SeqCst);
        }
        let wake = state.waiters > 0;
        drop(state);
        if wake {
            self.released.notify_all();
        }
    }

    /// Requests currently registered, granted or waiting (for tests).
    #[cfg(test)]
    fn pending(&self) -> usize {
        lock(&self.state).requests.len()
    }

    /// Unregistered reads in flight (for tests).
    #[cfg(test)]
    fn reads_in_flight(&self) -> usize {
        self.reads.load(Ordering::SeqCst)
    }
}

impl Drop for LbaGuard<'_> {
    fn drop(&mut self) {
        self.locks.release_held(self.hold.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn hold_until_waits_in_turn_and_gives_up_at_the_deadline() {
        let locks = Arc::new(LbaLocks::default());
        let held = locks.exclusive(10, 10).expect("no wait outside an attempt");
        let soon = Instant::now() + Duration::from_millis(20);
        assert_eq!(locks.hold_until(15, 1, soon), None);
        assert_eq!(locks.pending(), 1, "a request that gave up is withdrawn");
        assert_eq!(locks.atomics.load(Ordering::SeqCst), 0);
        let t = {
            let locks = Arc::clone(&locks);
            std::thread::spawn(move || {
                let later = Instant::now() + Duration::from_secs(600);
                locks.hold_until(12, 4, later)
            })
        };
        drop(held);
        let hold = t.join().expect("holder thread").expect("granted");
        assert!(matches!(hold, Some(Hold::Range(_))));
        assert!(
            locks.try_hold(13, 1, Kind::Read).is_none(),
            "the fence is held against reads"
        );
        let outside = locks.try_hold(20, 1, Kind::Read);
        assert!(
            matches!(outside, Some(Some(Hold::Range(_)))),
            "outside it, reads go, registered while an atomic request is"
        );
        locks.release_held(outside.flatten());
        locks.release_held(hold);
        assert_eq!(locks.pending(), 0);
        assert_eq!(locks.hold_until(0, 0, soon), Some(None));
    }

    #[test]
    fn conflict_rules() {
        let r = |start, end, kind| Request {
            id: 0,
            start,
            end,
            kind,
        };
        use Kind::{Atomic, Read, Write};
        assert!(r(0, 10, Write).conflicts(&r(9, 12, Write)));
        assert!(!r(0, 10, Write).conflicts(&r(9, 12, Read)));
        assert!(!r(0, 10, Read).conflicts(&r(5, 6, Write)));
        assert!(!r(0, 10, Read).conflicts(&r(5, 6, Read)));
        assert!(r(0, 10, Atomic).conflicts(&r(9, 12, Read)));
        assert!(r(0, 10, Read).conflicts(&r(5, 6, Atomic)));
        assert!(r(0, 10, Write).conflicts(&r(5, 6, Atomic)));
        assert!(!r(0, 10, Atomic).conflicts(&r(10, 12, Atomic)));
        assert!(!r(3, 4, Write).conflicts(&r(0, 3, Write)));
    }

    #[test]
    fn readers_register_nothing_and_disjoint_writers_proceed() {
        let locks = LbaLocks::default();
        let a = locks.shared(0, 8).expect("no wait outside an attempt");
        let b = locks.shared(4, 8).expect("no wait outside an attempt");
        let c = locks.exclusive(100, 8).expect("no wait outside an attempt");
        let empty = locks.exclusive(4, 0).expect("no wait outside an attempt");
        assert_eq!(locks.pending(), 1, "only the write registered");
        assert_eq!(locks.reads_in_flight(), 2);
        drop((a, b, c, empty));
        assert_eq!(locks.pending(), 0);
        assert_eq!(locks.reads_in_flight(), 0);
    }

    #[test]
    fn a_reader_does_not_wait_for_a_plain_writer() {
        let locks = LbaLocks::default();
        let w = locks.exclusive(10, 10).expect("no wait outside an attempt");
        let (ok, blocked) = rustgt_backstore::nowait::attempt(|| locks.shared(12, 4).is_ok());
        assert!(ok && !blocked, "a read overlapping a plain write goes on");
        drop(w);
        assert_eq!(locks.pending(), 0);
    }

    #[test]
    fn a_reader_waits_for_an_atomic_holder() {
        let locks = Arc::new(LbaLocks::default());
        let held = locks.atomic(10, 10).expect("no wait outside an attempt");
        let entered = Arc::new(AtomicBool::new(false));
        let t = {
            let (locks, entered) = (Arc::clone(&locks), Arc::clone(&entered));
            std::thread::spawn(move || {
                let _g = locks.shared(19, 1).expect("no wait outside an attempt");
                entered.store(true, Ordering::SeqCst);
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !entered.load(Ordering::SeqCst),
            "reader must wait for the atomic writer"
        );
        drop(held);
        t.join().expect("reader thread");
        assert!(entered.load(Ordering::SeqCst));
        assert_eq!(locks.pending(), 0);
        assert_eq!(locks.atomics.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn an_atomic_writer_waits_for_reads_in_flight_and_is_not_starved_by_later_ones() {
        let locks = Arc::new(LbaLocks::default());
        let first_reader = locks.shared(0, 4).expect("no wait outside an attempt");
        assert_eq!(locks.pending(), 0, "the first read registered nothing");
        let writer_done = Arc::new(AtomicBool::new(false));
        let writer = {
            let (locks, done) = (Arc::clone(&locks), Arc::clone(&writer_done));
            std::thread::spawn(move || {
                let _g = locks.atomic(0, 4).expect("no wait outside an attempt");
                done.store(true, Ordering::SeqCst);
            })
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while locks.pending() < 1 && !writer_done.load(Ordering::SeqCst) {
            assert!(Instant::now() < deadline, "the writer never registered");
            std::thread::yield_now();
        }
        // A later reader registers, behind the waiting writer.
        let saw_writer = {
            let (locks, done) = (Arc::clone(&locks), Arc::clone(&writer_done));
            std::thread::spawn(move || {
                let _g = locks.shared(2, 1).expect("no wait outside an attempt");
                done.load(Ordering::SeqCst)
            })
        };
        std::thread::sleep(Duration::from_millis(20));
        assert!(
            !writer_done.load(Ordering::SeqCst),
            "the atomic writer waits for the read in flight"
        );
        drop(first_reader);
        writer.join().expect("writer");
        assert!(
            saw_writer.join().expect("reader"),
            "reader ran before the writer"
        );
        assert_eq!(locks.pending(), 0);
        assert_eq!(locks.reads_in_flight(), 0);
    }

    #[test]
    fn exclusive_sections_never_overlap() {
        let locks = Arc::new(LbaLocks::default());
        let inside = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let (locks, inside) = (Arc::clone(&locks), Arc::clone(&inside));
                std::thread::spawn(move || {
                    for i in 0..200u64 {
                        // [0,3), [1,4) and [2,5) all overlap pairwise.
                        let _g = locks
                            .exclusive((t + i) % 3, 3)
                            .expect("no wait outside an attempt");
                        assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0);
                        inside.fetch_sub(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("worker");
        }
    }

    #[test]
    fn no_read_overlaps_an_atomic_section() {
        let locks = Arc::new(LbaLocks::default());
        // Readers add 1, the atomic writer adds 1000: a reader that sees a
        // thousand, or the writer that sees anything, overlapped.
        let inside = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..3u64)
            .map(|t| {
                let (locks, inside, stop) =
                    (Arc::clone(&locks), Arc::clone(&inside), Arc::clone(&stop));
                std::thread::spawn(move || {
                    let mut i = t;
                    // Bounded: the writer's 100 sections take about 20 ms.
                    while !stop.load(Ordering::SeqCst) && i < 10_000_000 {
                        // [0,4) .. [4,8): all inside the writer's [0,8).
                        let _g = locks.shared(i % 5, 4).expect("no wait outside an attempt");
                        let before = inside.fetch_add(1, Ordering::SeqCst);
                        assert!(before < 1000, "a read overlapped an atomic write");
                        inside.fetch_sub(1, Ordering::SeqCst);
                        i += 1;
                    }
                })
            })
            .collect();
        for _ in 0..100 {
            let _g = locks.atomic(0, 8).expect("no wait outside an attempt");
            let before = inside.fetch_add(1000, Ordering::SeqCst);
            assert_eq!(before % 1000, 0, "a read overlapped an atomic write");
            std::thread::sleep(Duration::from_micros(200));
            inside.fetch_sub(1000, Ordering::SeqCst);
        }
        stop.store(true, Ordering::SeqCst);
        for t in readers {
            t.join().expect("reader");
        }
        assert_eq!(locks.pending(), 0);
        assert_eq!(locks.reads_in_flight(), 0);
        assert_eq!(locks.atomics.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn attempt_fails_instead_of_waiting_and_queues_nothing() {
        let locks = LbaLocks::default();
        let held = locks.atomic(10, 10).expect("free range");
        let (r, blocked) = rustgt_backstore::nowait::attempt(|| locks.shared(15, 1).is_err());
        assert!(
            r && blocked,
            "a conflicting request inside an attempt fails at once"
        );
        assert_eq!(locks.pending(), 1, "the failed request left nothing queued");
        let (ok, blocked) = rustgt_backstore::nowait::attempt(|| locks.shared(30, 1).is_ok());
        assert!(ok && !blocked, "a free range is granted inside an attempt");
        drop(held);
        assert_eq!(locks.pending(), 0);
        // An atomic request inside an attempt while a read is in flight.
        let read = locks.shared(50, 1).expect("free range");
        let (r, blocked) = rustgt_backstore::nowait::attempt(|| locks.atomic(0, 1).is_err());
        assert!(r && blocked, "it would wait for the read in flight");
        assert_eq!(locks.atomics.load(Ordering::SeqCst), 0, "withdrawn");
        drop(read);
        assert!(locks.try_hold(0, 1, Kind::Atomic).is_some());
    }
}
