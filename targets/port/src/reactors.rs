//! The iSER driver's reactor threads: single-threaded tokio runtimes, one
//! task per connection ([`crate::serve`]). The TCP driver's are
//! [`crate::PollReactors`].

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

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
    handle: tokio::runtime::Handle,
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
            let handle = rt.handle().clone();
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let load = Arc::new(AtomicUsize::new(0));
            let setup = setup.clone();
            std::thread::Builder::new()
                .name(format!("rustgt-reactor{i}"))
                .spawn(move || {
                    if let Some(setup) = setup {
                        setup();
                    }
                    rt.block_on(crate::ring::serve_until(stopped));
                })?;
            reactors.push(Reactor {
                handle,
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

    /// Runs `conn` (one connection's task) on the reactor with the fewest
    /// connections, counted there until the task ends. The future is
    /// polled only on that reactor's thread, so whatever it registers
    /// with tokio (sockets, `AsyncFd`s, timers) lives in that reactor.
    pub fn spawn<F>(&self, conn: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let (handle, load) = self.pick();
        handle.spawn(async move {
            let _load = load;
            conn.await;
        });
    }

    /// The reactor with the fewest connections, and a guard counting one
    /// more there.
    fn pick(&self) -> (tokio::runtime::Handle, LoadGuard) {
        let best = self
            .reactors
            .iter()
            .min_by_key(|r| r.load.load(Ordering::Relaxed));
        match best {
            Some(r) => {
                r.load.fetch_add(1, Ordering::Relaxed);
                (r.handle.clone(), LoadGuard(Arc::clone(&r.load)))
            }
            // `start` makes at least one; a caller's runtime otherwise.
            None => (
                tokio::runtime::Handle::current(),
                LoadGuard(Arc::new(AtomicUsize::new(1))),
            ),
        }
    }
}
