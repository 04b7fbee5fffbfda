//! The TCP reactors: threads that each wait for all their connections in
//! one readiness loop (mio over epoll) and run the port's turn for a
//! connection when its socket, a message from the port or its timer says
//! so. No tokio runtime runs on them: a wake-up is one `epoll_wait`, a
//! read, the turn and a vectored write, with no task to poll, no waker
//! to register per wait and no timer wheel.
//!
//! What a connection needs from its driver is a [`ReadyLink`]: a
//! descriptor to wait on (registered once, edge-triggered, for reading
//! and writing), a read without waiting and a send without waiting. The
//! port does the rest, as [`crate::serve`] does for a connection task:
//!
//! - messages from the port (a worker's completion, a task-management
//!   result, a kill, a logout request) come through the connection's
//!   channel, polled with a waker that marks the connection and, from
//!   another thread, wakes the loop ([`mio::Waker`]); from the reactor's
//!   own thread (an io_uring completion reaped there) nothing is woken.
//!   The channel is polled again only after such a wake (its mark), not
//!   on every round;
//! - the core's timer: one heap per reactor, a deadline pushed only when
//!   it moves earlier (the keepalive moves later after every PDU, and
//!   then fires early once, for nothing); one the core no longer has (a
//!   login deadline once the login completed) is dropped without waking
//!   the reactor;
//! - the busy-poll: only a connection alone on its reactor spins, with
//!   its [`BusyPoll`] and a [`SpinSlot`], looking at its socket with
//!   one read a look; with several, the reactor does not spin;
//! - the reactor's io_uring, whose eventfd is one more source of the loop
//!   and whose deferred submissions go to the kernel before the loop
//!   waits;
//! - the end: the connection leaves the loop and finishes on the
//!   runtime that started the reactors (its commands in flight drained,
//!   what it queued delivered within a bound, the socket closed, its
//!   nexus released), never holding the reactor up.

use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Token};
use rustgt_iscsi::Connection;
use rustgt_scsi::{uring, Ring};
use tracing::Instrument;

use crate::conn::PortConn;
use crate::poll::{BusyPoll, SpinSlot, COALESCE, SPIN_STEP_MAX, SPIN_STEP_MIN, SPIN_YIELD_AFTER};
use crate::reactors::{thread_count, LoadGuard, ThreadSetup};
use crate::turn::{drain, on_msg, turn, Got};

/// A byte-stream transport as a [`PollReactors`] loop drives it. It only
/// moves bytes between its socket and the core it holds, never waiting.
pub trait ReadyLink: Send + 'static {
    /// The connection's sans-I/O core.
    fn core(&mut self) -> &mut Connection;

    /// The descriptor the loop waits on, for reading and writing.
    fn fd(&self) -> RawFd;

    /// Sends what the core queued, as far as the socket takes it now.
    fn send(&mut self) -> io::Result<()>;

    /// Whether output still waits for room in the socket.
    fn output_pending(&self) -> bool;

    /// Whether so much output waits that no more input may be read (what
    /// an initiator that does not read its responses can make the daemon
    /// hold stays bounded).
    fn output_full(&self) -> bool;

    /// Whether the connection may end now: the core is closing and what
    /// it queued was sent, or the transport failed.
    fn finished(&mut self) -> bool;

    /// One read without waiting, handed to the core; and whether more may
    /// wait in the socket (the read filled its buffer), so the loop reads
    /// again before it waits for the next edge. `buf` is the reactor's
    /// read buffer, lent to each connection in turn (the link sizes it):
    /// the core keeps only what is left of a partial PDU before the
    /// reactor serves another connection, so a connection that never
    /// sends costs no read buffer of its own.
    fn look(&mut self, buf: &mut Vec<u8>) -> io::Result<(Got, bool)>;

    /// The clock the link gave the core with its last input, if not taken
    /// yet (see [`crate::Link::take_input_at`]).
    fn take_input_at(&mut self) -> Option<Instant>;

    /// The transport failed, or the port killed the connection: stop
    /// moving data and tell the core.
    fn fail(&mut self);

    /// The connection ends: deliver what is still queued, within a bound,
    /// unless `killed`, and close. With nothing to deliver (or killed) it
    /// closes at once and returns `None`; otherwise it returns what
    /// delivers and closes, which the port runs on a tokio runtime.
    fn close(self: Box<Self>, killed: bool) -> Option<Closing>;
}

/// What is left of a connection's end once it has left its reactor
/// (see [`ReadyLink::close`]).
pub type Closing = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A connection a driver set up for a [`PollReactors`] loop: the port's
/// side, the link and the connection's span.
pub type Opened = (PortConn, Box<dyn ReadyLink>, tracing::Span);

/// What a reactor runs, on its own thread, to set a new connection up
/// (`None`: it could not be, and the opener reported why).
type Opener = Box<dyn FnOnce() -> Option<Opened> + Send>;

/// The reactor threads of the TCP driver (see the module's text).
#[derive(Debug)]
pub struct PollReactors {
    reactors: Vec<Handle>,
}

#[derive(Debug)]
struct Handle {
    shared: Arc<Shared>,
    /// Connections it serves now.
    load: Arc<AtomicUsize>,
}

/// What other threads reach of one reactor.
#[derive(Debug)]
struct Shared {
    /// Unique in the process: tells a waker whether it runs on this
    /// reactor's own thread.
    id: usize,
    waker: mio::Waker,
    /// Connections (slot numbers) whose channel got a message.
    woken: Mutex<Vec<usize>>,
    /// Connections handed to the reactor, not yet in its loop.
    inbox: Mutex<Vec<Incoming>>,
    /// Set after a push to `woken` or `inbox`, taken by the loop before it
    /// looks at them: a pass with nothing new locks neither.
    has_woken: AtomicBool,
    has_inbox: AtomicBool,
    stop: AtomicBool,
}

struct Incoming {
    open: Opener,
    load: LoadGuard,
}

impl std::fmt::Debug for Incoming {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Incoming").finish_non_exhaustive()
    }
}

thread_local! {
    /// On a reactor thread, its [`Shared::id`]; 0 elsewhere.
    static ON_REACTOR: Cell<usize> = const { Cell::new(0) };
}

/// The source of [`Shared::id`]s.
static NEXT_ID: AtomicUsize = AtomicUsize::new(1);

/// The loop's own tokens; connections take the slots from [`FIRST`] on.
const WAKE: Token = Token(0);
const RING: Token = Token(1);
const FIRST: usize = 2;

/// Most rounds (read, turn, send) one wake-up of a connection runs before
/// the loop serves the others; a connection with more to read is taken
/// again before the loop waits.
const ROUNDS: usize = 16;

impl PollReactors {
    /// Starts `count` reactor threads (0: one per available core), each
    /// running `setup` first. Must be called on a tokio runtime: closing
    /// connections finish there.
    pub fn start(count: usize, setup: Option<ThreadSetup>) -> io::Result<PollReactors> {
        let closer = tokio::runtime::Handle::try_current()
            .map_err(|e| io::Error::other(format!("reactors need a tokio runtime: {e}")))?;
        let count = thread_count(count);
        let mut reactors = Vec::with_capacity(count);
        for i in 0..count {
            let poll = mio::Poll::new()?;
            let waker = mio::Waker::new(poll.registry(), WAKE)?;
            let shared = Arc::new(Shared {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                waker,
                woken: Mutex::new(Vec::new()),
                inbox: Mutex::new(Vec::new()),
                has_woken: AtomicBool::new(false),
                has_inbox: AtomicBool::new(false),
                stop: AtomicBool::new(false),
            });
            let mine = Arc::clone(&shared);
            let setup = setup.clone();
            let closer = closer.clone();
            std::thread::Builder::new()
                .name(format!("rustgt-reactor{i}"))
                .spawn(move || {
                    if let Some(setup) = setup {
                        setup();
                    }
                    Reactor::new(poll, mine, closer).run();
                })?;
            reactors.push(Handle {
                shared,
                load: Arc::new(AtomicUsize::new(0)),
            });
        }
        tracing::info!(reactors = count, "reactor threads started");
        Ok(PollReactors { reactors })
    }

    /// How many reactors there are.
    pub fn len(&self) -> usize {
        self.reactors.len()
    }

    /// Whether there are none (never, once started).
    pub fn is_empty(&self) -> bool {
        self.reactors.is_empty()
    }

    /// Serves a connection on the reactor with the fewest connections
    /// from now on: `open` sets it up there (so accepting stays cheap and
    /// set-ups run on every reactor at once); its span is entered whenever
    /// the reactor works for it.
    pub fn spawn(&self, open: impl FnOnce() -> Option<Opened> + Send + 'static) {
        let Some(r) = self
            .reactors
            .iter()
            .min_by_key(|r| r.load.load(Ordering::Relaxed))
        else {
            return;
        };
        r.load.fetch_add(1, Ordering::Relaxed);
        let load = LoadGuard(Arc::clone(&r.load));
        if let Ok(mut inbox) = r.shared.inbox.lock() {
            inbox.push(Incoming {
                open: Box::new(open),
                load,
            });
        }
        r.shared.has_inbox.store(true, Ordering::Release);
        let _ = r.shared.waker.wake();
    }
}

impl Drop for PollReactors {
    fn drop(&mut self) {
        for r in &self.reactors {
            r.shared.stop.store(true, Ordering::Release);
            let _ = r.shared.waker.wake();
        }
    }
}

/// Marks a connection of a reactor when its channel gets a message.
struct ConnWake {
    shared: Arc<Shared>,
    slot: usize,
    /// A message may wait in the channel: set by a wake, taken by the
    /// connection's next look at its channel. While it is clear the
    /// channel is not polled (the waker its last empty poll registered
    /// still stands), which spares a poll of an empty channel per round.
    mail: AtomicBool,
}

impl Wake for ConnWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.mail.store(true, Ordering::Release);
        if let Ok(mut woken) = self.shared.woken.lock() {
            woken.push(self.slot);
        }
        self.shared.has_woken.store(true, Ordering::Release);
        // On the reactor's own thread the loop looks at `woken` before it
        // waits; from anywhere else it must be woken.
        if ON_REACTOR.get() != self.shared.id {
            let _ = self.shared.waker.wake();
        }
    }
}

/// A connection set up, before it joins the loop.
struct Joining {
    pc: PortConn,
    link: Box<dyn ReadyLink>,
    span: tracing::Span,
    load: LoadGuard,
}

/// One connection in a reactor's loop.
struct Slot {
    pc: PortConn,
    link: Box<dyn ReadyLink>,
    span: tracing::Span,
    wake: Arc<ConnWake>,
    waker: Waker,
    _load: LoadGuard,
    /// The socket may hold input not read yet (an edge was seen, and no
    /// read since came back short).
    readable: bool,
    /// The port killed the connection: nothing more is delivered.
    killed: bool,
    /// The deadline pushed on the reactor's heap for the core's timer, if
    /// one is.
    armed: Option<Instant>,
    poll: BusyPoll,
    /// The peer streams: its next PDU was already there at the last
    /// spin's first look.
    streaming: bool,
    /// When the connection began to wait for its initiator with nothing
    /// in flight (only while it may spin).
    wait_from: Option<Instant>,
}

/// What one wake-up of a connection came to.
enum Step {
    Wait,
    End { failed: bool },
}

struct Reactor {
    poll: mio::Poll,
    shared: Arc<Shared>,
    closer: tokio::runtime::Handle,
    conns: Vec<Option<Slot>>,
    free: Vec<usize>,
    live: usize,
    timers: BinaryHeap<Reverse<(Instant, usize)>>,
    /// Connections to take again before the loop waits (input left).
    again: Vec<usize>,
    /// The reactor's io_uring and its eventfd, which joins the loop.
    ring: Option<(Ring, OwnedFd)>,
    /// The read buffer its connections' reads go through
    /// ([`ReadyLink::look`]).
    read_buf: Vec<u8>,
    /// Ops were queued on the ring outside a turn's batch.
    deferred: Rc<Cell<bool>>,
}

impl Reactor {
    fn new(poll: mio::Poll, shared: Arc<Shared>, closer: tokio::runtime::Handle) -> Reactor {
        Reactor {
            poll,
            shared,
            closer,
            conns: Vec::new(),
            free: Vec::new(),
            live: 0,
            timers: BinaryHeap::new(),
            again: Vec::new(),
            ring: None,
            read_buf: Vec::new(),
            deferred: Rc::new(Cell::new(false)),
        }
    }

    fn run(mut self) {
        ON_REACTOR.set(self.shared.id);
        self.start_ring();
        let mut events = Events::with_capacity(256);
        let mut woken = Vec::new();
        let mut again = Vec::new();
        // The clock as the last pass's timers read it: the next wait's
        // timeout is taken from it, not from a clock read of its own.
        let mut now = None;
        while !self.shared.stop.load(Ordering::Acquire) {
            self.take_inbox();
            let timeout = self.timeout(now.take());
            if timeout != Some(Duration::ZERO) {
                if let Some((slot, got)) = self.spin() {
                    self.drive(slot, got);
                    self.flush_ring();
                    continue;
                }
            }
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                tracing::error!(error = %e, "reactor: cannot wait for its sockets");
                break;
            }
            for ev in events.iter() {
                match ev.token() {
                    WAKE => {}
                    RING => {
                        if let Some((ring, fd)) = &self.ring {
                            uring::clear_eventfd(fd);
                            ring.reap();
                        }
                    }
                    Token(t) => {
                        let slot = t - FIRST;
                        if let Some(Some(c)) = self.conns.get_mut(slot) {
                            c.readable |= ev.is_readable() || ev.is_read_closed() || ev.is_error();
                        }
                        self.drive(slot, Got::Nothing);
                    }
                }
            }
            std::mem::swap(&mut again, &mut self.again);
            for slot in again.drain(..) {
                self.drive(slot, Got::Nothing);
            }
            if self.shared.has_woken.swap(false, Ordering::Acquire) {
                if let Ok(mut w) = self.shared.woken.lock() {
                    std::mem::swap(&mut woken, &mut *w);
                }
            }
            for slot in woken.drain(..) {
                self.drive(slot, Got::Nothing);
            }
            now = self.fire_timers();
            self.flush_ring();
        }
        // Stopped: every connection left goes now (its nexus with it).
        self.conns.clear();
        // Its ops in flight complete before the ring goes.
        drop(self.ring.take());
    }

    /// The reactor's io_uring, if the kernel and the settings give one:
    /// its eventfd joins the loop.
    fn start_ring(&mut self) {
        let (ring, fd) = match Ring::start() {
            Ok(Some(started)) => started,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "io_uring: no ring on this reactor");
                return;
            }
        };
        if let Err(e) =
            self.poll
                .registry()
                .register(&mut SourceFd(&fd.as_raw_fd()), RING, Interest::READABLE)
        {
            tracing::warn!(error = %e, "io_uring: cannot poll the ring's eventfd");
            return;
        }
        let deferred = Rc::clone(&self.deferred);
        ring.defer_submission(Box::new(move || deferred.set(true)));
        self.ring = Some((ring, fd));
    }

    /// Ops queued outside a turn's batch go to the kernel now.
    fn flush_ring(&mut self) {
        if self.deferred.replace(false) {
            if let Some((ring, _)) = &self.ring {
                ring.flush();
            }
        }
    }

    fn take_inbox(&mut self) {
        if !self.shared.has_inbox.swap(false, Ordering::Acquire) {
            return;
        }
        let incoming = match self.shared.inbox.lock() {
            Ok(mut inbox) if !inbox.is_empty() => std::mem::take(&mut *inbox),
            _ => return,
        };
        for c in incoming {
            self.add(c);
        }
    }

    fn add(&mut self, incoming: Incoming) {
        let Some((pc, link, span)) = (incoming.open)() else {
            return;
        };
        let c = Joining {
            pc,
            link,
            span,
            load: incoming.load,
        };
        let slot = self.free.pop().unwrap_or(self.conns.len());
        let token = Token(FIRST + slot);
        let fd = c.link.fd();
        if let Err(e) = self.poll.registry().register(
            &mut SourceFd(&fd),
            token,
            Interest::READABLE | Interest::WRITABLE,
        ) {
            if slot < self.conns.len() {
                self.free.push(slot);
            }
            let _enter = c.span.enter();
            tracing::warn!(error = %e, "cannot register a connection");
            return;
        }
        // A new connection looks at its channel on its first round.
        let wake = Arc::new(ConnWake {
            shared: Arc::clone(&self.shared),
            slot,
            mail: AtomicBool::new(true),
        });
        let waker = Waker::from(Arc::clone(&wake));
        let poll = c.pc.busy_poll();
        let new = Slot {
            pc: c.pc,
            link: c.link,
            span: c.span,
            wake,
            waker,
            _load: c.load,
            readable: true,
            killed: false,
            armed: None,
            poll,
            streaming: false,
            wait_from: None,
        };
        if slot == self.conns.len() {
            self.conns.push(Some(new));
        } else if let Some(s) = self.conns.get_mut(slot) {
            *s = Some(new);
        }
        self.live += 1;
        self.drive(slot, Got::Nothing);
    }

    /// How long the loop may wait: not at all with work left, until the
    /// earliest timer otherwise. `now`: a clock reading of this pass, if
    /// one was taken.
    fn timeout(&mut self, now: Option<Instant>) -> Option<Duration> {
        if self.shared.has_woken.load(Ordering::Acquire) || !self.again.is_empty() {
            return Some(Duration::ZERO);
        }
        // Deadlines no connection waits for any more (a login's, once it
        // completed) do not wake the reactor.
        while let Some(Reverse((at, slot))) = self.timers.peek().copied() {
            let armed = matches!(self.conns.get(slot), Some(Some(c)) if c.armed == Some(at));
            if armed {
                return Some(at.saturating_duration_since(now.unwrap_or_else(Instant::now)));
            }
            self.timers.pop();
        }
        None
    }

    /// Runs the core's timer of every connection whose deadline passed.
    /// Returns the clock it read, if it had a timer to look at.
    fn fire_timers(&mut self) -> Option<Instant> {
        let Reverse((first, _)) = self.timers.peek()?;
        let now = Instant::now();
        if *first > now {
            return Some(now);
        }
        while let Some(Reverse((at, slot))) = self.timers.peek().copied() {
            if at > now {
                break;
            }
            self.timers.pop();
            let Some(Some(c)) = self.conns.get_mut(slot) else {
                continue;
            };
            // Stale: re-armed earlier since, or another connection's.
            if c.armed != Some(at) {
                continue;
            }
            c.armed = None;
            {
                let _enter = c.span.enter();
                c.link.core().handle_timeout(now);
            }
            self.drive(slot, Got::Nothing);
        }
        Some(now)
    }

    /// One wake-up of a connection: what its socket holds, its messages,
    /// the turn and its output, until nothing more comes; then its timer
    /// is armed, or it ends.
    fn drive(&mut self, slot: usize, got: Got) {
        let Some(Some(c)) = self.conns.get_mut(slot) else {
            return;
        };
        let span = std::mem::replace(&mut c.span, tracing::Span::none());
        let ring = self.ring.as_ref().map(|(ring, _)| ring);
        let step = {
            let _enter = span.enter();
            match c.step(got, ring, &mut self.read_buf) {
                Ok(step) => step,
                Err(e) => {
                    tracing::debug!(error = %e, "connection ended with error");
                    Step::End { failed: true }
                }
            }
        };
        c.span = span;
        match step {
            Step::Wait => {
                if c.readable && !c.link.output_full() {
                    self.again.push(slot);
                }
                match c.link.core().poll_timeout() {
                    Some(t) => {
                        if c.armed.is_none_or(|armed| t < armed) {
                            c.armed = Some(t);
                            self.timers.push(Reverse((t, slot)));
                        }
                    }
                    // No timer left (a login that completed, without
                    // keepalive): its heap entry is dropped unfired.
                    None => c.armed = None,
                }
            }
            Step::End { failed } => self.end(slot, failed),
        }
    }

    /// The connection leaves the loop. With commands in flight or output
    /// to deliver it finishes on the closer runtime; otherwise here, now.
    fn end(&mut self, slot: usize, failed: bool) {
        let Some(Some(mut c)) = self.conns.get_mut(slot).map(Option::take) else {
            return;
        };
        self.free.push(slot);
        self.live -= 1;
        let _ = self.poll.registry().deregister(&mut SourceFd(&c.link.fd()));
        if failed {
            c.link.fail();
        }
        let Slot {
            mut pc,
            mut link,
            span,
            killed,
            _load,
            ..
        } = c;
        if !killed && link.core().in_flight() > 0 {
            self.closer.spawn(
                async move {
                    // In-flight commands finish before the nexus goes away,
                    // so no write is lost half-done; bounded by the commands.
                    drain(&mut pc, link.core()).await;
                    if let Some(rest) = link.close(killed) {
                        rest.await;
                    }
                    closed(pc, _load);
                }
                .instrument(span),
            );
            return;
        }
        match link.close(killed) {
            None => {
                let _enter = span.enter();
                closed(pc, _load);
            }
            Some(rest) => {
                self.closer.spawn(
                    async move {
                        rest.await;
                        closed(pc, _load);
                    }
                    .instrument(span),
                );
            }
        }
    }

    /// The busy-poll of a connection alone on its reactor, while it pays:
    /// looks at its socket between short pauses, thinning out, until
    /// input, other work for the loop, or the end of the budget. Returns
    /// the connection and what came, if anything did.
    fn spin(&mut self) -> Option<(usize, Got)> {
        if self.live != 1 {
            return None;
        }
        let slot = self.conns.iter().position(Option::is_some)?;
        let c = self.conns.get_mut(slot)?.as_mut()?;
        let wait_from = c.wait_from?;
        let budget = c.poll.budget(wait_from);
        let taken = if budget.is_zero() {
            None
        } else {
            SpinSlot::take(wait_from)
        };
        let Some(taken) = taken else {
            c.streaming = false;
            return None;
        };
        let until = wait_from + budget;
        // While the thread shares its CPU with another process (see
        // `BusyPoll::held`) it spins briefly and does not yield.
        let held = c.poll.held(wait_from);
        // A peer that streams gets a short pause before the first look, so
        // a turn takes several of its commands and answers them together.
        if c.streaming && !held && !c.link.output_pending() {
            spin_until((wait_from + COALESCE).min(until));
        }
        let mut got = Got::Nothing;
        let mut step = SPIN_STEP_MIN;
        let mut looks = 0u32;
        let shared = &self.shared;
        while !c.link.output_pending() && Instant::now() < until {
            looks += 1;
            let other = shared.has_woken.load(Ordering::Acquire)
                || shared.has_inbox.load(Ordering::Acquire)
                || shared.stop.load(Ordering::Relaxed);
            if other {
                break;
            }
            match c.link.look(&mut self.read_buf) {
                Ok((g, more)) => {
                    c.readable = more;
                    got = g;
                }
                Err(_) => {
                    // The loop's next read meets the error again.
                    c.readable = true;
                    break;
                }
            }
            if got != Got::Nothing {
                break;
            }
            // Between looks the CPU stays busy but makes no system call;
            // the looks thin out the longer the wait.
            let from = Instant::now();
            let next = from + step;
            spin_until(next.min(until));
            step = (step * 2).min(SPIN_STEP_MAX);
            // A short wait gives up nothing; a longer one offers the CPU
            // to whatever else is runnable on it.
            if !held && from.saturating_duration_since(wait_from) >= SPIN_YIELD_AFTER {
                std::thread::yield_now();
            }
            // Time this stretch took beyond its pause was time off the
            // CPU: another process wants it, and a reactor that sleeps
            // instead of spinning gets it back sooner.
            let now = Instant::now();
            let paused = next.min(until).saturating_duration_since(from);
            if c.poll.spun(
                now.saturating_duration_since(from).saturating_sub(paused),
                now,
            ) {
                break;
            }
        }
        drop(taken);
        c.streaming = looks == 1 && got == Got::Input;
        (got != Got::Nothing).then_some((slot, got))
    }
}

impl Slot {
    /// Reads, takes messages, runs the turn and sends, round after round
    /// while something comes (at most [`ROUNDS`]). `got`: what a spin
    /// already handed to the core. `ring` and `read_buf`: the reactor's
    /// io_uring and read buffer.
    fn step(
        &mut self,
        mut got: Got,
        ring: Option<&Ring>,
        read_buf: &mut Vec<u8>,
    ) -> io::Result<Step> {
        for round in 0..ROUNDS {
            if got == Got::Nothing && self.readable && !self.link.output_full() {
                let (g, more) = self.link.look(read_buf)?;
                got = g;
                self.readable = more;
            }
            let mut killed = false;
            let mail = self.wake.mail.swap(false, Ordering::Acquire);
            if mail || self.pc.has_local() {
                let mut cx = Context::from_waker(&self.waker);
                while let Poll::Ready(Some(msg)) = self.pc.poll_recv(&mut cx) {
                    killed |= on_msg(self.link.core(), msg);
                    if got == Got::Nothing {
                        got = Got::Input;
                    }
                }
            }
            if killed {
                self.kill();
            }
            // The first round runs the turn whatever woke the connection
            // (its timer's events, room to send); a later one only for
            // new input.
            if round > 0 && got == Got::Nothing {
                break;
            }
            let mut input_at = None;
            match got {
                Got::Eof => {
                    // The initiator is gone. With nothing in flight its
                    // nexus goes now, before anything else.
                    if self.link.core().in_flight() == 0 {
                        self.pc.release_nexus();
                    }
                    return Ok(Step::End { failed: false });
                }
                Got::Input => {
                    input_at = self.link.take_input_at();
                    if let Some(from) = self.wait_from.take() {
                        let now = input_at.unwrap_or_else(Instant::now);
                        self.poll.waited(now.saturating_duration_since(from));
                    }
                }
                Got::Nothing => {}
            }
            if turn(&mut self.pc, self.link.core(), input_at, ring) {
                self.kill();
            }
            self.link.send()?;
            if self.link.finished() {
                return Ok(Step::End { failed: false });
            }
            got = Got::Nothing;
        }
        if self.wait_from.is_none() && !self.poll.off() && self.link.core().in_flight() == 0 {
            self.wait_from = Some(Instant::now());
        }
        Ok(Step::Wait)
    }

    fn kill(&mut self) {
        self.killed = true;
        self.link.fail();
    }
}

/// The end of a closed connection: its nexus goes (if logout did not
/// already take it), the port forgets it, its reactor no longer counts it.
fn closed(pc: PortConn, load: LoadGuard) {
    drop(pc);
    drop(load);
    tracing::info!("connection closed");
}

/// Keeps the CPU busy, without a system call, until `deadline`.
fn spin_until(deadline: Instant) {
    while Instant::now() < deadline {
        std::hint::spin_loop();
    }
}
