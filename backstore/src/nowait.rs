//! Non-blocking attempts: running a command on a reactor thread.
//!
//! A front end that runs commands to completion on its own thread (a
//! reactor) must never block there. It asks the store first
//! ([`Backstore::nonblocking`](crate::Backstore::nonblocking)) and then
//! runs the command inside [`attempt`]. Inside an attempt every layer that
//! would have to wait (an engine whose data is not in memory, a lock held by
//! another command) calls [`would_block`] instead and fails with
//! [`BackstoreError::WouldBlock`]. [`attempt`] reports that, and the caller
//! throws the outcome away and runs the command again on a thread that may
//! block. Only operations without side effects before their first possible
//! wait may be attempted (reads; writes only where
//! [`Nonblocking::Always`] holds).
//!
//! The state is per thread, so attempts on one reactor never affect
//! commands that block on a worker thread.

use std::cell::Cell;

use crate::error::BackstoreError;

/// How a store behaves when called on a thread that must not block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nonblocking {
    /// Every operation may block (a disk, a simulated disk, an I/O context
    /// with its own readahead): run commands on workers only.
    Never,
    /// Reads can be tried: one that would have to wait for the device fails
    /// with [`BackstoreError::WouldBlock`] inside an [`attempt`] (a file in
    /// the page cache, read with `RWF_NOWAIT`). Writes go to workers.
    TryReads,
    /// Reads and writes complete without waiting for a device (memory,
    /// null, a mapping of memory). Such a store has no file for a ring
    /// ([`crate::Backstore::has_uring_file`] is false).
    Always,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Off,
    Trying,
    Blocked,
}

thread_local! {
    static STATE: Cell<State> = const { Cell::new(State::Off) };
}

/// Runs `f` as a non-blocking attempt: returns its result and whether any
/// layer gave up because it would have had to wait (then the result is to be
/// thrown away). Nested attempts count as one.
pub fn attempt<R>(f: impl FnOnce() -> R) -> (R, bool) {
    let outer = STATE.with(|s| s.replace(State::Trying));
    let result = f();
    let blocked = STATE.with(|s| s.replace(outer)) == State::Blocked;
    if blocked && outer != State::Off {
        STATE.with(|s| s.set(State::Blocked));
    }
    (result, blocked)
}

/// Whether this thread is inside an [`attempt`].
pub fn active() -> bool {
    STATE.with(|s| s.get()) != State::Off
}

/// Records that this attempt would have blocked and returns the error to
/// fail with. Outside an attempt it only returns the error.
pub fn would_block() -> BackstoreError {
    STATE.with(|s| {
        if s.get() == State::Trying {
            s.set(State::Blocked);
        }
    });
    BackstoreError::WouldBlock
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempt_reports_a_wait_and_resets() {
        assert!(!active());
        let (v, blocked) = attempt(|| {
            assert!(active());
            7
        });
        assert_eq!((v, blocked), (7, false));
        let ((), blocked) = attempt(|| {
            let _ = would_block();
        });
        assert!(blocked);
        assert!(!active(), "the attempt ends with its closure");
        let ((), blocked) = attempt(|| {});
        assert!(!blocked, "a later attempt starts clean");
        // Outside an attempt nothing is recorded.
        assert!(matches!(would_block(), BackstoreError::WouldBlock));
        assert!(!attempt(|| {}).1);
    }

    #[test]
    fn nested_attempt_propagates_a_wait() {
        let (inner, outer) = attempt(|| {
            let ((), inner) = attempt(|| {
                let _ = would_block();
            });
            inner
        });
        assert!(inner && outer);
    }
}
