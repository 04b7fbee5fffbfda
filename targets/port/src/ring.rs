//! A reactor's io_uring ([`rustgt_backstore::uring`]): created when the
//! reactor thread starts (unless `[reactor] io_uring = "off"` or the kernel
//! probe failed), served by one task that waits on the ring's eventfd and
//! runs the completions of finished ops on the reactor thread itself, so a
//! command's response reaches its connection task without crossing
//! threads. Submissions are batched: a connection task ends its own turn's
//! batch (`PortConn::end_ring_batch`: one `io_uring_enter`, and the
//! completions already there, such as reads of cached pages, run at once
//! with the eventfd muted); ops queued otherwise are handed to the kernel
//! by this task once the connection tasks yield (one `io_uring_enter` per
//! batch). When the reactor stops, ops still in flight are waited for and
//! completed before the ring is freed.
//!
//! Kept apart from [`crate::Reactors`]: a reactor thread's body is
//! [`serve_until`].

use std::os::fd::OwnedFd;
use std::sync::Arc;

use rustgt_scsi::uring;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::Notify;

/// The body of a reactor thread: serves the thread's ring (if any) until
/// `stopped` fires, then drains it.
pub(crate) async fn serve_until(stopped: tokio::sync::oneshot::Receiver<()>) {
    let eventfd = match uring::start_thread() {
        Ok(fd) => fd,
        Err(e) => {
            tracing::warn!(error = %e, "io_uring: no ring on this reactor");
            None
        }
    };
    let Some(eventfd) = eventfd else {
        let _ = stopped.await;
        return;
    };
    // SAFETY: `eventfd` is an open descriptor owned by the `OwnedFd` the
    // AsyncFd takes; `OwnedFd::as_raw_fd` always returns that descriptor
    // and nothing else closes it while the AsyncFd lives.
    let registered = unsafe { AsyncFd::register_with_interest(eventfd, Interest::READABLE) };
    match registered.map_err(|e| e.into_parts().1) {
        Ok(fd) => {
            // A turn's ops go to the kernel together, when the turn ends.
            let submit = Arc::new(Notify::new());
            let wake = Arc::clone(&submit);
            uring::defer_submission(Box::new(move || wake.notify_one()));
            tokio::select! {
                _ = stopped => {}
                () = reap_forever(&fd, &submit) => {}
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "io_uring: cannot poll the ring's eventfd");
            uring::stop_thread();
            let _ = stopped.await;
        }
    }
    uring::stop_thread();
}

/// Reaps after every wake-up of the eventfd. Its counter is read to zero
/// and the readiness cleared before reaping, so a completion posted during
/// the reap wakes the task again.
async fn reap_forever(fd: &AsyncFd<OwnedFd>, submit: &Notify) {
    loop {
        let readable = tokio::select! {
            r = fd.readable() => r,
            () = submit.notified() => {
                uring::flush();
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
                // flight now; later commands find no ring and go to the
                // workers.
                tracing::error!(error = %e, "io_uring: eventfd poll failed");
                uring::stop_thread();
                return std::future::pending().await;
            }
        }
        uring::reap();
    }
}
