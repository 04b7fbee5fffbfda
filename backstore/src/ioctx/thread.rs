//! What the calling thread tells the I/O contexts: which worker it is
//! (per-worker readahead state) and whether its backing read is readahead.

use std::cell::Cell;

thread_local! {
    static WORKER: Cell<Option<usize>> = const { Cell::new(None) };
    static READAHEAD_IO: Cell<bool> = const { Cell::new(false) };
}

/// Whether the backing read the calling thread is doing is readahead that
/// nobody waits for yet (Linux's REQ_RAHEAD), as opposed to a demand read.
/// Engines may use it; the tests use it to check the device turns.
pub fn is_readahead_io() -> bool {
    READAHEAD_IO.with(Cell::get)
}

pub(crate) fn set_readahead_io(on: bool) {
    READAHEAD_IO.with(|r| r.set(on));
}

/// Tells the I/O contexts which worker the calling thread is. The SCSI
/// core's worker threads call it once at start; per-worker mode keys its
/// readahead states on it. Threads that never call it count as worker 0.
pub fn set_worker_index(index: usize) {
    WORKER.with(|w| w.set(Some(index)));
}

/// The index set by [`set_worker_index`] on this thread.
pub fn worker_index() -> Option<usize> {
    WORKER.with(Cell::get)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_index_is_per_thread() {
        set_worker_index(3);
        assert_eq!(worker_index(), Some(3));
        let other = std::thread::spawn(worker_index).join().ok().flatten();
        assert_eq!(other, None);
    }
}
