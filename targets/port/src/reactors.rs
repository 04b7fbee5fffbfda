//! The reactor threads both drivers run their connections on.

use std::cell::RefCell;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

thread_local! {
    /// On a reactor thread, the count of connections it serves.
    static HERE: RefCell<Option<Arc<AtomicUsize>>> = const { RefCell::new(None) };
}

/// How many connections the reactor whose thread calls this serves now;
/// `None` on any other thread. A connection alone on its reactor may wait
/// for its peer without letting other tasks of the reactor look at their
/// sockets, for there are none.
pub fn connections_here() -> Option<usize> {
    HERE.with(|h| h.borrow().as_ref().map(|l| l.load(Ordering::Relaxed)))
}

/// What a reactor thread runs first, on itself (the daemon's scheduling
/// settings, for example).
pub type ThreadSetup = Arc<dyn Fn() + Send + Sync>;

/// The reactor threads: each runs a single-threaded tokio runtime (its own
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
struct LoadGuard(Arc<AtomicUsize>);

impl Drop for LoadGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Reactors {
    /// Starts `count` reactor threads (0: one per available core), each
    /// running `setup` first.
    pub fn start(count: usize, setup: Option<ThreadSetup>) -> std::io::Result<Reactors> {
        let count = if count == 0 {
            std::thread::available_parallelism().map_or(1, usize::from)
        } else {
            count
        };
        let mut reactors = Vec::with_capacity(count);
        for i in 0..count {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .thread_name(format!("rustgt-reactor{i}-io"))
                .build()?;
            let handle = rt.handle().clone();
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let load = Arc::new(AtomicUsize::new(0));
            let here = Arc::clone(&load);
            let setup = setup.clone();
            std::thread::Builder::new()
                .name(format!("rustgt-reactor{i}"))
                .spawn(move || {
                    if let Some(setup) = setup {
                        setup();
                    }
                    HERE.with(|h| *h.borrow_mut() = Some(here));
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
