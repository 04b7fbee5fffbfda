//! One connection's side of the port: [`PortConn`], owned by the driver's
//! task for that connection.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rustgt_iscsi::negotiate::Transport;
use rustgt_iscsi::{ConnectionSetup, Event, PortalConfig, SessionTable};
use rustgt_scsi::{Done, Response, ResponseSink, Ring, ScsiTarget, Ticket, TmfResponse};
use tokio::sync::mpsc;

use crate::admission::Admitted;
use crate::msg::{ConnInfo, PortMsg};
use crate::poll::BusyPoll;
use crate::registry::Port;
use crate::stats::ConnStats;
use crate::tmf;

/// A connection registered with the [`Port`]: the driver feeds it the
/// core's events and takes its messages; dropping it releases the
/// connection's nexus (if still held) and forgets the connection.
#[derive(Debug)]
pub struct PortConn {
    port: Arc<Port>,
    id: u64,
    transport: Transport,
    tx: mpsc::UnboundedSender<PortMsg>,
    rx: mpsc::UnboundedReceiver<PortMsg>,
    /// The SCSI target of the logged-in session.
    target: Option<Arc<ScsiTarget>>,
    stats: Arc<ConnStats>,
    /// Where the SCSI core delivers the responses of commands it did not
    /// finish inline: one per connection, shared by its commands.
    sink: Arc<ConnSink>,
    /// Responses its sink got on this thread while the connection itself
    /// was calling into the SCSI core ([`Here`]), waiting for
    /// [`Self::try_recv`] and [`Self::recv`] ahead of the channel.
    local: VecDeque<Response>,
    admitted: Admitted,
}

/// A connection's [`ResponseSink`]: counts the command in the
/// connection's stats and hands the response to the connection's task.
/// A command carries it as an `Arc` clone and a [`Ticket`] (when it was
/// handed over, its Data-Out length), so handing a command to the SCSI
/// core allocates nothing.
#[derive(Debug)]
struct ConnSink {
    conn_id: u64,
    tx: mpsc::UnboundedSender<PortMsg>,
    stats: Arc<ConnStats>,
}

impl ResponseSink for ConnSink {
    fn deliver(&self, ticket: Ticket, response: Response) {
        let data_out = usize::try_from(ticket.token).unwrap_or(usize::MAX);
        self.stats.record(ticket.started, data_out, &response);
        if let Some(response) = Here::keep(self.conn_id, response) {
            let _ = self.tx.send(PortMsg::Done(response));
        }
    }
}

/// The connection whose own call into the SCSI core runs on this thread
/// now, and the responses its sink got meanwhile. A command the core
/// finishes during that call (a buffered write on the reactor, a check
/// that fails, a read of cached pages reaped when the turn's ring batch
/// ends) goes back to the turn that runs it, not through the
/// connection's channel, which would wake its own task for one more
/// poll. Responses for other connections, and from other threads, take
/// the channel as before.
struct Here {
    conn: Cell<Option<u64>>,
    done: RefCell<Vec<Response>>,
}

thread_local! {
    static HERE: Here = const {
        Here {
            conn: Cell::new(None),
            done: RefCell::new(Vec::new()),
        }
    };
}

impl Here {
    /// Keeps `response` for `conn` if that connection's call runs on this
    /// thread now; otherwise gives it back.
    fn keep(conn: u64, response: Response) -> Option<Response> {
        let mut response = Some(response);
        let _ = HERE.try_with(|h| {
            if h.conn.get() == Some(conn) {
                if let Ok(mut done) = h.done.try_borrow_mut() {
                    done.extend(response.take());
                }
            }
        });
        response
    }
}

/// Runs `f` as connection `conn`'s own call into the SCSI core (see
/// [`Here`]): the responses its sink gets on this thread meanwhile go to
/// the end of `local`.
fn here<T>(conn: u64, local: &mut VecDeque<Response>, f: impl FnOnce() -> T) -> T {
    let from = HERE.with(|h| h.done.try_borrow().map_or(0, |d| d.len()));
    let guard = HereGuard {
        prev: HERE.with(|h| h.conn.replace(Some(conn))),
    };
    let out = f();
    drop(guard);
    HERE.with(|h| {
        if let Ok(mut done) = h.done.try_borrow_mut() {
            if done.len() > from {
                local.extend(done.drain(from..));
            }
        }
    });
    out
}

/// Restores the thread's [`Here`] when a connection's call ends, also
/// if it panics.
struct HereGuard {
    prev: Option<u64>,
}

impl Drop for HereGuard {
    fn drop(&mut self) {
        let _ = HERE.try_with(|h| h.conn.set(self.prev));
    }
}

impl Port {
    /// Registers a new connection of a driver; the returned handle is its
    /// side of the port until it is dropped (which forgets the connection).
    pub fn open(self: &Arc<Self>, mut info: ConnInfo) -> PortConn {
        let r = self.register(&mut info);
        info.admitted.attach(r.tx.clone());
        PortConn::new(
            Arc::clone(self),
            r.conn_id,
            info.transport,
            r.tx,
            r.rx,
            r.stats,
            info.admitted,
        )
    }
}

/// Most rounds of events and io_uring completions one turn runs
/// ([`PortConn::end_ring_batch`]); what is left waits for the next turn
/// (the ring's task reaps it meanwhile).
pub const TURN_ROUNDS: usize = 4;

impl PortConn {
    pub(crate) fn new(
        port: Arc<Port>,
        id: u64,
        transport: Transport,
        tx: mpsc::UnboundedSender<PortMsg>,
        rx: mpsc::UnboundedReceiver<PortMsg>,
        stats: Arc<ConnStats>,
        admitted: Admitted,
    ) -> PortConn {
        let sink = Arc::new(ConnSink {
            conn_id: id,
            tx: tx.clone(),
            stats: Arc::clone(&stats),
        });
        PortConn {
            port,
            id,
            transport,
            tx,
            rx,
            target: None,
            stats,
            sink,
            local: VecDeque::new(),
            admitted,
        }
    }

    /// The connection reached full feature phase (any session type): it
    /// no longer counts against the login-phase cap. The turn calls it
    /// once the core has a session (`Connection::session`); idempotent.
    pub fn login_done(&mut self) {
        self.admitted.login_done();
    }

    /// The connection's id (the core's `conn_id`, the admin's `ID`).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The transport the connection came in on.
    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// The protocol configuration a new connection starts with.
    pub fn config(&self) -> Arc<PortalConfig> {
        self.port.config()
    }

    /// A busy-poller with the port's bound, for this connection's waits.
    pub fn busy_poll(&self) -> BusyPoll {
        self.port.busy_poll()
    }

    /// What the core's `Connection` of this connection starts from: its
    /// id and transport, the two addresses as the core reports them, and
    /// fresh randomness for its CHAP challenges.
    pub fn setup(&self, local: String, peer: String) -> std::io::Result<ConnectionSetup> {
        let mut random = [0u8; 32];
        getrandom::getrandom(&mut random).map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(ConnectionSetup {
            conn_id: self.id,
            transport: self.transport,
            local_addr: local,
            peer_addr: peer,
            random,
        })
    }

    /// The session table to give the core's `Connection`.
    pub fn sessions(&self) -> Arc<Mutex<SessionTable>> {
        self.port.sessions()
    }

    /// The next message for this connection. Never ends while the
    /// connection is registered (the port holds a sender).
    pub async fn recv(&mut self) -> Option<PortMsg> {
        if let Some(r) = self.local.pop_front() {
            return Some(PortMsg::Done(r));
        }
        self.rx.recv().await
    }

    /// The next message if one waits; otherwise `cx`'s waker is woken when
    /// one comes (what a reactor that is not a tokio runtime waits with).
    pub fn poll_recv(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<PortMsg>> {
        if let Some(r) = self.local.pop_front() {
            return std::task::Poll::Ready(Some(PortMsg::Done(r)));
        }
        self.rx.poll_recv(cx)
    }

    /// Whether answers that finished on this thread wait for
    /// [`Self::poll_recv`] (they never pass through the channel, so no
    /// waker announces them).
    pub fn has_local(&self) -> bool {
        !self.local.is_empty()
    }

    /// A message already waiting, without waiting.
    pub fn try_recv(&mut self) -> Option<PortMsg> {
        if let Some(r) = self.local.pop_front() {
            return Some(PortMsg::Done(r));
        }
        self.rx.try_recv().ok()
    }

    /// Ends this turn's io_uring batch now ([`Ring::submit_and_reap`]):
    /// the reads and other ops [`Self::on_event_at`] queued on the
    /// reactor's `ring` go to the kernel in one `io_uring_enter`, and the completions
    /// already there (reads of cached pages finish inside that call) run
    /// at once, so their responses wait in [`Self::try_recv`] before the
    /// driver sends what the turn produced (this connection's without
    /// passing through its channel, see [`Here`]). Returns whether any
    /// completion ran (of this connection or another on the reactor).
    /// Without a ring or with nothing queued it makes no system call.
    /// A turn calls it at most [`TURN_ROUNDS`] times.
    pub fn end_ring_batch(&mut self, ring: Option<&Ring>) -> bool {
        let Some(ring) = ring else {
            return false;
        };
        here(self.id, &mut self.local, || ring.submit_and_reap()) > 0
    }

    /// Releases this connection's I_T nexus now, if it still holds one
    /// (see `Port::release_nexus`). Drivers call it as soon as the
    /// initiator is gone or the session is closing with nothing in flight.
    pub fn release_nexus(&self) {
        self.port.release_nexus(self.id);
    }

    /// Acts on one event of the core. A command that ran to completion on
    /// this thread comes back as its response (give it to the core's
    /// `complete`): inline, or started on the ring and finished at once;
    /// everything else answers later through [`Self::try_recv`] and
    /// [`Self::recv`].
    pub fn on_event(&mut self, ev: Event) -> Option<Response> {
        self.on_event_at(ev, Instant::now(), None)
    }

    /// [`Self::on_event`] for input read at `now` (a command's statistics
    /// time it from there), on a reactor whose io_uring is `ring`: file
    /// and block-device LUNs' commands that cannot complete at once go to
    /// it (its completions run on this thread; end the turn's batch with
    /// [`Self::end_ring_batch`]).
    pub fn on_event_at(
        &mut self,
        ev: Event,
        now: Instant,
        ring: Option<&Ring>,
    ) -> Option<Response> {
        match ev {
            Event::LoggedIn(info) => {
                let span = tracing::Span::current();
                span.record("initiator", info.initiator.as_str());
                span.record("isid", format!("{:02x?}", info.isid).as_str());
                span.record("tsih", info.tsih);
                self.target = self.port.logged_in(self.id, info);
            }
            Event::Reinstate { conn_id } => {
                // Whichever driver owns it.
                self.port.kill(conn_id);
            }
            Event::Command(cmd) => {
                crate::poll::count_command();
                let started = now;
                let data_out = cmd.data_out.len();
                let Some(t) = &self.target else {
                    tracing::error!("command for a session without a SCSI target");
                    return None;
                };
                let cmd = if self.port.run_to_completion() {
                    match t.run_inline(cmd, ring) {
                        Ok(resp) => {
                            self.stats.record(started, data_out, &resp);
                            return Some(resp);
                        }
                        Err(cmd) => cmd,
                    }
                } else {
                    cmd
                };
                let sink: Arc<dyn ResponseSink> = self.sink.clone();
                let done = Done::Sink(
                    sink,
                    Ticket {
                        started,
                        token: data_out as u64,
                    },
                );
                // A file or block-device LUN: this reactor's io_uring, whose
                // completion runs on this thread too. What it finishes at
                // once (a buffered write, a failed check) comes back here.
                let (cmd, done) = if self.port.run_to_completion() {
                    // The command comes back by value (see `run_on_ring_to`).
                    #[allow(clippy::result_large_err)]
                    let started = here(self.id, &mut self.local, || {
                        t.run_on_ring_to(cmd, done, ring)
                    });
                    match started {
                        Ok(()) => return self.local.pop_front(),
                        Err(back) => back,
                    }
                } else {
                    (cmd, done)
                };
                t.submit_to(cmd, done);
            }
            Event::TaskMgmt { itt, lun, function } => {
                let tx = self.tx.clone();
                let (Some(t), Some(nexus)) = (self.target.clone(), self.port.nexus_of(self.id))
                else {
                    let _ = tx.send(PortMsg::Tmf(itt, TmfResponse::FunctionRejected));
                    return None;
                };
                // The core hands over at most MAX_TMFS_RUNNING at once per
                // connection; the pool's threads are fixed.
                let reply = tx.clone();
                let job: tmf::Job = Box::new(move || {
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        t.task_management(&nexus, nexus.resolve_lun(lun), function)
                    }))
                    .unwrap_or_else(|_| {
                        tracing::error!(itt, "task-management function panicked");
                        TmfResponse::FunctionRejected
                    });
                    let _ = reply.send(PortMsg::Tmf(itt, r));
                });
                if self.port.run_tmf(job).is_err() {
                    let _ = tx.send(PortMsg::Tmf(itt, TmfResponse::FunctionRejected));
                }
            }
        }
        None
    }
}

impl Drop for PortConn {
    fn drop(&mut self) {
        self.port.close(self.id);
    }
}

#[cfg(test)]
mod here_tests {
    use super::*;

    fn sink(conn_id: u64) -> (ConnSink, mpsc::UnboundedReceiver<PortMsg>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let stats = Arc::new(ConnStats::default());
        (ConnSink { conn_id, tx, stats }, rx)
    }

    fn deliver(s: &ConnSink, tag: u64) {
        let ticket = Ticket {
            started: Instant::now(),
            token: 0,
        };
        s.deliver(
            ticket,
            Response {
                tag,
                ..Response::default()
            },
        );
    }

    fn tag_of(msg: Option<PortMsg>) -> Option<u64> {
        match msg {
            Some(PortMsg::Done(r)) => Some(r.tag),
            _ => None,
        }
    }

    #[test]
    fn only_the_calling_connections_own_responses_skip_its_channel() {
        let (mine, mut mine_rx) = sink(7);
        let (other, mut other_rx) = sink(8);
        let mut local = VecDeque::new();
        here(7, &mut local, || {
            deliver(&mine, 1);
            deliver(&other, 2);
            deliver(&mine, 3);
        });
        assert_eq!(local.iter().map(|r| r.tag).collect::<Vec<_>>(), [1, 3]);
        assert_eq!(tag_of(mine_rx.try_recv().ok()), None);
        assert_eq!(tag_of(other_rx.try_recv().ok()), Some(2));
        // Outside the call, and from another thread during it, the
        // channel as before.
        deliver(&mine, 4);
        assert_eq!(tag_of(mine_rx.try_recv().ok()), Some(4));
        let mine = Arc::new(mine);
        here(7, &mut local, || {
            let m = Arc::clone(&mine);
            std::thread::spawn(move || deliver(&m, 5))
                .join()
                .expect("delivering thread");
        });
        assert_eq!(local.len(), 2);
        assert_eq!(tag_of(mine_rx.try_recv().ok()), Some(5));
    }

    #[test]
    fn a_call_that_panics_leaves_no_connection_marked_on_the_thread() {
        let (mine, mut rx) = sink(9);
        let mut local = VecDeque::new();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            here(9, &mut local, || panic!("in the core"))
        }));
        assert!(r.is_err());
        deliver(&mine, 1);
        assert_eq!(tag_of(rx.try_recv().ok()), Some(1));
        assert!(local.is_empty());
    }
}
