//! Per-LUN LBA range locks: the scheme that makes COMPARE AND WRITE,
//! ORWRITE and WRITE ATOMIC atomic with respect to other commands
//! (SBC-3 §5.2, SBC-4 §4.29).
//!
//! Every command that reads the medium takes a shared lock on the LBAs it
//! touches; every command that modifies it (WRITE, WRITE AND VERIFY,
//! WRITE SAME, UNMAP, ORWRITE, COMPARE AND WRITE, WRITE ATOMIC, and any
//! later writer such as EXTENDED COPY or SANITIZE) takes an exclusive lock
//! on its range for the whole of its read-modify-write. Overlapping
//! exclusive requests therefore run one after the other, and a reader never
//! sees half of an atomic write.
//!
//! Guarantees:
//! - first come, first served: a request waits for every earlier request
//!   (granted or still waiting) whose range overlaps and whose mode
//!   conflicts, so a stream of readers cannot starve a writer;
//! - no deadlock: a command holds at most one range at a time and waits
//!   only for requests that arrived before it;
//! - zero-length ranges lock nothing;
//! - the lock is released when the guard drops, on every path;
//! - inside a non-blocking attempt (`rustgt_backstore::nowait`) a request
//!   that would wait is not queued: it fails with the would-block error,
//!   and the command runs again on a worker;
//! - a release wakes waiters only when there are any.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use crate::sense::Sense;

/// One request, granted or waiting, in arrival order.
#[derive(Debug, Clone, Copy)]
struct Request {
    id: u64,
    start: u64,
    /// Exclusive end; `start < end`.
    end: u64,
    exclusive: bool,
}

impl Request {
    fn conflicts(&self, other: &Request) -> bool {
        let overlap = self.start < other.end && other.start < self.end;
        overlap && (self.exclusive || other.exclusive)
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
    fn request(&self, lba: u64, blocks: u64, exclusive: bool) -> Request {
        Request {
            id: self.next_id,
            start: lba,
            end: lba.saturating_add(blocks),
            exclusive,
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
}

/// Holds a range until dropped.
#[must_use = "the range is unlocked when the guard is dropped"]
#[derive(Debug)]
pub(crate) struct LbaGuard<'a> {
    locks: &'a LbaLocks,
    /// `None` for an empty range (nothing was locked).
    id: Option<u64>,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    // A poisoned lock only means a panic elsewhere; the list stays valid.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl LbaLocks {
    /// Shared lock on `blocks` blocks from `lba`, for commands that only read.
    /// Fails only inside a non-blocking attempt, when it would wait.
    pub(crate) fn shared(&self, lba: u64, blocks: u64) -> Result<LbaGuard<'_>, Sense> {
        self.acquire(lba, blocks, false)
    }

    /// Exclusive lock on `blocks` blocks from `lba`, for commands that write.
    /// Fails only inside a non-blocking attempt, when it would wait.
    pub(crate) fn exclusive(&self, lba: u64, blocks: u64) -> Result<LbaGuard<'_>, Sense> {
        self.acquire(lba, blocks, true)
    }

    fn acquire(&self, lba: u64, blocks: u64, exclusive: bool) -> Result<LbaGuard<'_>, Sense> {
        if blocks == 0 {
            return Ok(LbaGuard {
                locks: self,
                id: None,
            });
        }
        let mut state = lock(&self.state);
        let me = state.request(lba, blocks, exclusive);
        let id = me.id;
        if rustgt_backstore::nowait::active() && state.conflicts_any(&me) {
            return Err(Sense::from(rustgt_backstore::nowait::would_block()));
        }
        state.enqueue(me);
        while state.blocked(&me) {
            state.waiters += 1;
            state = self
                .released
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
            state.waiters -= 1;
        }
        Ok(LbaGuard {
            locks: self,
            id: Some(id),
        })
    }

    /// Takes the range now or not at all (`None` when an earlier request
    /// conflicts), for a command whose I/O completes later on another
    /// stack: it calls [`Self::release_held`] with the id when done
    /// (`Some(None)`: an empty range, nothing to release).
    pub(crate) fn try_hold(&self, lba: u64, blocks: u64, exclusive: bool) -> Option<Option<u64>> {
        if blocks == 0 {
            return Some(None);
        }
        let mut state = lock(&self.state);
        let me = state.request(lba, blocks, exclusive);
        if state.conflicts_any(&me) {
            return None;
        }
        state.enqueue(me);
        Some(Some(me.id))
    }

    /// Takes the range, waiting in turn (first come, first served) until
    /// `deadline` at most, for a holder that releases it later from
    /// elsewhere with [`Self::release_held`]: another gateway's COMPARE
    /// AND WRITE fencing this gateway's commands off its blocks. While it
    /// waits, later overlapping requests queue behind it. `None` when the
    /// deadline passed first (the request is withdrawn); `Some(None)` for
    /// an empty range.
    pub(crate) fn hold_until(
        &self,
        lba: u64,
        blocks: u64,
        exclusive: bool,
        deadline: Instant,
    ) -> Option<Option<u64>> {
        if blocks == 0 {
            return Some(None);
        }
        let mut state = lock(&self.state);
        let me = state.request(lba, blocks, exclusive);
        let id = me.id;
        state.enqueue(me);
        loop {
            if !state.blocked(&me) {
                return Some(Some(id));
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

    /// Releases a range of [`Self::try_hold`].
    pub(crate) fn release_held(&self, id: Option<u64>) {
        if let Some(id) = id {
            self.release(id);
        }
    }

    fn release(&self, id: u64) {
        let mut state = lock(&self.state);
        state.requests.retain(|r| r.id != id);
        let wake = state.waiters > 0;
        drop(state);
        if wake {
            self.released.notify_all();
        }
    }

    /// Requests currently granted or waiting (for tests).
    #[cfg(test)]
    fn pending(&self) -> usize {
        lock(&self.state).requests.len()
    }
}

impl Drop for LbaGuard<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            self.locks.release(id);
        }
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
        assert_eq!(locks.hold_until(15, 1, true, soon), None);
        assert_eq!(locks.pending(), 1, "a request that gave up is withdrawn");
        let t = {
            let locks = Arc::clone(&locks);
            std::thread::spawn(move || {
                let later = Instant::now() + Duration::from_secs(600);
                locks.hold_until(12, 4, true, later)
            })
        };
        drop(held);
        let id = t.join().expect("holder thread").expect("granted");
        assert!(id.is_some());
        assert!(locks.try_hold(13, 1, false).is_none(), "the fence is held");
        locks.release_held(id);
        assert_eq!(locks.pending(), 0);
        assert_eq!(locks.hold_until(0, 0, true, soon), Some(None));
    }

    #[test]
    fn conflict_rules() {
        let r = |start, end, exclusive| Request {
            id: 0,
            start,
            end,
            exclusive,
        };
        assert!(r(0, 10, true).conflicts(&r(9, 12, false)));
        assert!(r(0, 10, false).conflicts(&r(5, 6, true)));
        assert!(!r(0, 10, false).conflicts(&r(5, 6, false)));
        assert!(!r(0, 10, true).conflicts(&r(10, 12, true)));
        assert!(!r(3, 4, true).conflicts(&r(0, 3, true)));
    }

    #[test]
    fn readers_share_and_disjoint_writers_proceed() {
        let locks = LbaLocks::default();
        let a = locks.shared(0, 8).expect("no wait outside an attempt");
        let b = locks.shared(4, 8).expect("no wait outside an attempt");
        let c = locks.exclusive(100, 8).expect("no wait outside an attempt");
        let empty = locks.exclusive(4, 0).expect("no wait outside an attempt");
        assert_eq!(locks.pending(), 3);
        drop((a, b, c, empty));
        assert_eq!(locks.pending(), 0);
    }

    #[test]
    fn overlapping_writer_waits_for_holder() {
        let locks = Arc::new(LbaLocks::default());
        let held = locks.exclusive(10, 10).expect("no wait outside an attempt");
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
            "reader must wait for the writer"
        );
        drop(held);
        t.join().expect("reader thread");
        assert!(entered.load(Ordering::SeqCst));
        assert_eq!(locks.pending(), 0);
    }

    #[test]
    fn waiting_writer_is_not_starved_by_later_readers() {
        let locks = Arc::new(LbaLocks::default());
        let first_reader = locks.shared(0, 4).expect("no wait outside an attempt");
        let writer_done = Arc::new(AtomicBool::new(false));
        let writer = {
            let (locks, done) = (Arc::clone(&locks), Arc::clone(&writer_done));
            std::thread::spawn(move || {
                let _g = locks.exclusive(0, 4).expect("no wait outside an attempt");
                done.store(true, Ordering::SeqCst);
            })
        };
        while locks.pending() < 2 {
            std::thread::yield_now();
        }
        // A later reader queues behind the waiting writer.
        let saw_writer = {
            let (locks, done) = (Arc::clone(&locks), Arc::clone(&writer_done));
            std::thread::spawn(move || {
                let _g = locks.shared(2, 1).expect("no wait outside an attempt");
                done.load(Ordering::SeqCst)
            })
        };
        std::thread::sleep(Duration::from_millis(20));
        drop(first_reader);
        writer.join().expect("writer");
        assert!(
            saw_writer.join().expect("reader"),
            "reader ran before the writer"
        );
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
    fn attempt_fails_instead_of_waiting_and_queues_nothing() {
        let locks = LbaLocks::default();
        let held = locks.exclusive(10, 10).expect("free range");
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
    }
}
