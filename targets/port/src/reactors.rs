//! The iSER driver's reactor threads: single-threaded tokio runtimes, one
//! local task per connection ([`crate::serve`]), each given the reactor's
//! io_uring. The TCP driver's are [`crate::PollReactors`].

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rustgt_scsi::Ring;

/// A connection's task as a reactor receives it: made on the reactor's
/// thread, with the reactor's io_uring (if it has one), and run there.
pub(crate) type Job = Box<dyn FnOnce(Option<Rc<Ring>>) -> Pin<Box<dyn Future<Output = ()>>> + Send>;

/// How many reactor threads `[reactor] threads = count` starts: `count`,
/// or one per available core for 0.
pub(crate) fn thread_count(count: usize) -> usize {
    if count == 0 {
        std::thread::available_parallelism().map_or(1, usize::from)
    } else {
        count
    }
}

/// What a reactor thread runs first, on itself (the daemon's scheduling
/// settings, for example).
pub type ThreadSetup = Arc<dyn Fn() + Send + Sync>;

/// The iSER reactor threads: each runs a single-threaded tokio runtime (its own
/// epoll, timers and tasks), so a connection's reads, inline commands and
/// writes all happen on one thread and no wake-up crosses to another.
#[derive(Debug)]
pub struct Reactors {
    reactors: Vec<Reactor>,
}

#[derive(Debug)]
struct Reactor {
    /// Where connection tasks go to it.
    jobs: tokio::sync::mpsc::UnboundedSender<Job>,
    /// Connections it serves now.
    load: Arc<AtomicUsize>,
    /// Dropped to stop the reactor's thread.
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// Counts a connection on its reactor while alive.
#[derive(Debug)]
pub(crate) struct LoadGuard(pub(crate) Arc<AtomicUsize>);

impl Drop for LoadGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Reactors {
    /// Starts `count` reactor threads (0: one per available core), each
    /// running `setup` first.
    pub fn start(count: usize, setup: Option<ThreadSetup>) -> std::io::Result<Reactors> {
        let count = thread_count(count);
        let mut reactors = Vec::with_capacity(count);
        for i in 0..count {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .thread_name(format!("rustgt-reactor{i}-io"))
                .build()?;
            let (jobs, incoming) = tokio::sync::mpsc::unbounded_channel();
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let load = Arc::new(AtomicUsize::new(0));
            let setup = setup.clone();
            std::thread::Builder::new()
                .name(format!("rustgt-reactor{i}"))
                .spawn(move || {
                    if let Some(setup) = setup {
                        setup();
                    }
                    // Connection tasks hold the ring, which is the
                    // thread's own: they run on its LocalSet. Dropping
                    // the set drops them, then the ring completes what is
                    // still in flight.
                    let local = tokio::task::LocalSet::new();
                    local.block_on(&rt, crate::ring::serve_until(stopped, incoming));
                    drop(local);
                })?;
            reactors.push(Reactor {
                jobs,
                load,
                _stop: stop,
            });
        }
        tracing::info!(reactors = count, "reactor threads started");
        Ok(Reactors { reactors })
    }

    /// How many reactors there are.
    pub fn len(&self) -> usize {
        self.reactors.len()
    }

    /// Whether there are none (never, once started).
    pub fn is_empty(&self) -> bool {
        self.reactors.is_empty()
    }

    /// Runs one connection's task on the reactor with the fewest
    /// connections, counted there until the task ends: `conn` makes it on
    /// that reactor's thread, given the reactor's io_uring (for
    /// [`crate::serve`]), and the future is polled only there, so whatever
    /// it registers with tokio (sockets, `AsyncFd`s, timers) lives in that
    /// reactor.
    pub fn spawn<F, Fut>(&self, conn: F)
    where
        F: FnOnce(Option<Rc<Ring>>) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + 'static,
    {
        let Some(r) = self
            .reactors
            .iter()
            .min_by_key(|r| r.load.load(Ordering::Relaxed))
        else {
            // `start` makes at least one.
            tracing::error!("no reactor thread: connection dropped");
            return;
        };
        r.load.fetch_add(1, Ordering::Relaxed);
        let load = LoadGuard(Arc::clone(&r.load));
        let job: Job = Box::new(move |ring| {
            Box::pin(async move {
                let _load = load;
                conn(ring).await;
            })
        });
        if r.jobs.send(job).is_err() {
            tracing::error!("reactor thread gone: connection dropped");
        }
    }
}
