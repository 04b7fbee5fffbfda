//! The task-management pool: a few threads of the port, shared by every
//! connection of both transports, that run task-management functions
//! ([`rustgt_scsi::ScsiTarget::task_management`]), which may wait for
//! aborted tasks to finish and so cannot run on a reactor.
//!
//! Guarantees:
//! - a fixed number of threads ([`TMF_THREADS`]), started with the first
//!   task-management request, whatever peers send: no thread per request;
//! - the queue in front of them is bounded by the connections: the iSCSI
//!   core hands the port at most `rustgt_iscsi::conn::MAX_TMFS_RUNNING`
//!   requests per connection at once (and queues or rejects the rest), so
//!   at most that many jobs per connection wait here;
//! - a job that panics is answered Function Rejected and the thread goes
//!   on (see [`crate::PortConn::on_event`]).

use std::sync::mpsc;
use std::sync::{Arc, Mutex};

/// Threads of the pool. Task-management functions are rare and short
/// (they mark tasks aborted and wait only for I/O already under way to
/// return), so a few threads serve the whole daemon; it is more than one
/// connection's running requests (`MAX_TMFS_RUNNING`, 4), so one
/// connection waiting on a slow device does not hold up every other's.
pub const TMF_THREADS: usize = 8;

/// One task-management function and the sending of its answer.
pub(crate) type Job = Box<dyn FnOnce() + Send + 'static>;

/// The pool's queue; dropping it (with the [`crate::Port`]) lets its
/// threads finish what is queued and exit.
#[derive(Debug)]
pub(crate) struct TmfPool {
    tx: mpsc::Sender<Job>,
}

impl TmfPool {
    /// Starts `threads` threads; `None` if not one could be started.
    pub(crate) fn start(threads: usize) -> Option<TmfPool> {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let mut started = 0;
        for i in 0..threads {
            let rx = Arc::clone(&rx);
            let spawned = std::thread::Builder::new()
                .name(format!("rustgt-tmf-{i}"))
                .spawn(move || worker(&rx));
            match spawned {
                Ok(_) => started += 1,
                Err(e) => tracing::error!(error = %e, "task-management thread not started"),
            }
        }
        (started > 0).then_some(TmfPool { tx })
    }

    /// Queues `job`; gives it back if the pool's threads are gone.
    pub(crate) fn run(&self, job: Job) -> Result<(), Job> {
        self.tx.send(job).map_err(|e| e.0)
    }
}

/// One thread: take a job, run it, until the pool is dropped.
fn worker(rx: &Mutex<mpsc::Receiver<Job>>) {
    loop {
        // The lock is held only while waiting for the next job, never
        // while one runs.
        let job = {
            let Ok(rx) = rx.lock() else {
                return;
            };
            match rx.recv() {
                Ok(job) => job,
                Err(_) => return,
            }
        };
        job();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn jobs_run_on_a_fixed_number_of_threads() {
        let pool = TmfPool::start(3).expect("pool");
        let (tx, rx) = mpsc::channel();
        for i in 0..200 {
            let tx = tx.clone();
            let job: Job = Box::new(move || {
                let name = std::thread::current().name().map(str::to_owned);
                let _ = tx.send((i, name));
            });
            assert!(pool.run(job).is_ok());
        }
        let mut names = std::collections::HashSet::new();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..200 {
            let (i, name) = rx.recv_timeout(Duration::from_secs(10)).expect("job ran");
            seen.insert(i);
            names.insert(name.expect("named thread"));
        }
        assert_eq!(seen.len(), 200);
        assert!(names.len() <= 3, "{names:?}");
        assert!(names.iter().all(|n| n.starts_with("rustgt-tmf-")));
    }
}
