//! The body of an iSER reactor thread: its io_uring
//! ([`rustgt_backstore::uring`], created when the thread starts unless
//! `[reactor] io_uring = "off"` or the kernel probe failed) and the
//! connection tasks it is handed, which it runs on the thread's
//! [`LocalSet`](tokio::task::LocalSet) with a reference to the ring. One
//! task waits on the ring's eventfd and runs the completions of finished
//! ops on the reactor thread itself, so a command's response reaches its
//! connection task without crossing threads. Submissions are batched: a
//! connection task ends its own turn's batch (`PortConn::end_ring_batch`:
//! one `io_uring_enter`, and the completions already there, such as reads
//! of cached pages, run at once with the eventfd muted); ops queued
//! otherwise are handed to the kernel by this task once the connection
//! tasks yield (one `io_uring_enter` per batch). When the last reference
//! goes (the reactor stopped, its tasks dropped), ops still in flight are
//! waited for and completed before the ring is freed.
//!
//! Kept apart from [`crate::Reactors`]: a reactor thread's body is
//! [`serve_until`].

use std::os::fd::OwnedFd;
use std::rc::Rc;
use std::sync::Arc;

use rustgt_scsi::{uring, Ring};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::{mpsc, oneshot, Notify};

use crate::reactors::Job;

/// The body of a reactor thread, inside its `LocalSet`: serves the
/// thread's ring (if any) and starts the connection tasks that arrive on
/// `jobs`, until `stopped` fires.
pub(crate) async fn serve_until(
    stopped: oneshot::Receiver<()>,
    jobs: mpsc::UnboundedReceiver<Job>,
) {
    let started = match Ring::start() {
        Ok(started) => started,
        Err(e) => {
            tracing::warn!(error = %e, "io_uring: no ring on this reactor");
            None
        }
    };
    let (ring, eventfd) = match started {
        Some((ring, fd)) => (Some(Rc::new(ring)), Some(fd)),
        None => (None, None),
    };
    // SAFETY: `eventfd` is an open descriptor owned by the `OwnedFd` the
    // AsyncFd takes; `OwnedFd::as_raw_fd` always returns that descriptor
    // and nothing else closes it while the AsyncFd lives.
    let registered =
        eventfd.map(|fd| unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) });
    let (ring, fd) = match (ring, registered) {
        (Some(ring), Some(Ok(fd))) => (Some(ring), Some(fd)),
        (_, Some(Err(e))) => {
            tracing::warn!(error = %e.into_parts().1, "io_uring: cannot poll the ring's eventfd");
            (None, None)
        }
        _ => (None, None),
    };
    let submit = Arc::new(Notify::new());
    if let Some(ring) = &ring {
        // A turn's ops go to the kernel together, when the turn ends.
        let wake = Arc::clone(&submit);
        ring.defer_submission(Box::new(move || wake.notify_one()));
    }
    tokio::select! {
        _ = stopped => {}
        () = start_jobs(jobs, ring.clone()) => {}
        () = reap_forever(ring.as_deref(), fd.as_ref(), &submit) => {}
    }
}

/// Starts each connection task handed to this reactor, with the ring.
async fn start_jobs(mut jobs: mpsc::UnboundedReceiver<Job>, ring: Option<Rc<Ring>>) {
    while let Some(job) = jobs.recv().await {
        tokio::task::spawn_local(job(ring.clone()));
    }
    // Every sender is gone: the reactors are being dropped.
    std::future::pending().await
}

/// Reaps after every wake-up of the eventfd. Its counter is read to zero
/// and the readiness cleared before reaping, so a completion posted during
/// the reap wakes the task again.
async fn reap_forever(ring: Option<&Ring>, fd: Option<&AsyncFd<OwnedFd>>, submit: &Notify) {
    let (Some(ring), Some(fd)) = (ring, fd) else {
        return std::future::pending().await;
    };
    loop {
        let readable = tokio::select! {
            r = fd.readable() => r,
            () = submit.notified() => {
                ring.flush();
                continue;
            }
        };
        match readable {
            Ok(mut guard) => {
                uring::clear_eventfd(guard.get_inner());
                guard.clear_ready();
            }
            Err(e) => {
                // Nothing will wake this task again: finish what is in
                // flight now and take no more (later commands go to the
                // workers).
                tracing::error!(error = %e, "io_uring: eventfd poll failed");
                ring.close();
                return std::future::pending().await;
            }
        }
        ring.reap();
    }
}
