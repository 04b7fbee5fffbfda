//! Cancellation of long waits inside the backstore.
//!
//! The layer above (the SCSI core's LUN workers) installs, once per thread,
//! a probe that says whether the work item it is running has been given up
//! (a task aborted by task management, a LUN stopping), and runs each item
//! inside [`scope`] with the item's id. A store that waits for a long time
//! on purpose (fault injection's `hang` and `delay`, see [`crate::fault`])
//! polls [`requested`] and returns early when it says so.
//!
//! The backstore knows nothing of tasks: the id is two opaque `u64`s. The
//! state is per thread; a thread without a probe, or outside a scope, is
//! never cancelled.

use std::cell::{Cell, RefCell};

/// Says whether the work item with this id has been given up.
pub type Probe = Box<dyn Fn([u64; 2]) -> bool>;

thread_local! {
    static PROBE: RefCell<Option<Probe>> = const { RefCell::new(None) };
    static CURRENT: Cell<Option<[u64; 2]>> = const { Cell::new(None) };
}

/// Installs this thread's probe (replacing any earlier one).
pub fn install(probe: Probe) {
    PROBE.with(|p| *p.borrow_mut() = Some(probe));
}

/// Whether this thread can be cancelled at all: it has a probe and is
/// inside a [`scope`]. A wait that could not otherwise end uses this to
/// bound itself.
pub fn available() -> bool {
    CURRENT.with(Cell::get).is_some() && PROBE.with(|p| p.borrow().is_some())
}

/// Runs `f` as the work item `id`: [`requested`] asks the probe about it.
/// Scopes nest; the outer id is restored afterwards.
pub fn scope<R>(id: [u64; 2], f: impl FnOnce() -> R) -> R {
    let outer = CURRENT.with(|c| c.replace(Some(id)));
    let r = f();
    CURRENT.with(|c| c.set(outer));
    r
}

/// Whether the current work item has been given up. False outside a
/// scope or without a probe. Cheap enough to poll every few milliseconds
/// (the probe takes a lock), not per byte.
pub fn requested() -> bool {
    let Some(id) = CURRENT.with(Cell::get) else {
        return false;
    };
    PROBE.with(|p| p.borrow().as_ref().is_some_and(|probe| probe(id)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    #[test]
    fn probe_sees_the_scope_id() {
        // Runs on its own thread: the state is per thread.
        std::thread::spawn(|| {
            assert!(!requested(), "no probe, no scope");
            let cancelled = Arc::new(AtomicU64::new(7));
            let c = Arc::clone(&cancelled);
            install(Box::new(move |[a, b]| {
                a == 1 && b == c.load(Ordering::SeqCst)
            }));
            assert!(!requested() && !available(), "outside a scope");
            scope([1, 7], || {
                assert!(available());
                assert!(requested());
                cancelled.store(8, Ordering::SeqCst);
                assert!(!requested());
                scope([1, 8], || assert!(requested(), "inner id"));
                assert!(!requested(), "outer id restored");
            });
            assert!(!requested());
        })
        .join()
        .expect("test thread");
    }
}
