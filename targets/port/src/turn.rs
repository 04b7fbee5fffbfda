//! The connection turn, once for both transports. Its parts are the
//! same whoever waits: [`on_msg`] acts on a message from the port,
//! [`turn`] runs the core's events through the port, [`drain`] waits for
//! a closing connection's commands in flight. Two waits use them:
//!
//! - [`serve`], a connection's tokio task over a [`Link`] (iSER): the link
//!   sends what the core queued, then the task waits for input, a message
//!   from the port (a worker's completion, a task-management result, a
//!   kill, a logout request) or the core's timer, and runs a turn;
//! - the readiness loop of [`crate::PollReactors`] (TCP), which waits for
//!   every connection of its thread at once and runs the same turn.
//!
//! One turn: every event of the core goes through
//! [`PortConn::on_event_at`] (commands run to completion where the LUN
//! allows), the reactor's io_uring batch ends and the responses it
//! produced go back to the core, for at most [`TURN_ROUNDS`] rounds.
//! Nothing in a turn waits for another thread.

use std::io;
use std::time::{Duration, Instant};

use rustgt_iscsi::Connection;
use rustgt_scsi::Ring;

use crate::conn::{PortConn, TURN_ROUNDS};
use crate::msg::PortMsg;

/// How long a connection that is going away waits for each of its
/// in-flight commands' answers before it gives up on them.
const DRAIN_WAIT: Duration = Duration::from_secs(30);

/// What a look or a wait of a [`Link`] brought.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Got {
    /// Bytes or completions, already handed to the core.
    Input,
    /// The initiator is gone (end of stream, a disconnect).
    Eof,
    /// Nothing for the core: room in the transport, a spurious wake-up.
    Nothing,
}

/// A transport as [`serve`] drives it. It only moves bytes or work
/// requests between its peer and the core it holds; the turn, timers, messages from the port and the end of a connection
/// are the port's.
#[allow(async_fn_in_trait)]
pub trait Link {
    /// The connection's sans-I/O core.
    fn core(&mut self) -> &mut Connection;

    /// Sends what the core queued, as far as the transport takes it now
    /// (never waits).
    fn send(&mut self) -> io::Result<()>;

    /// Whether output still waits for room in the transport.
    fn output_pending(&self) -> bool;

    /// Whether the connection may end now: the core is closing and what
    /// the transport must deliver first was delivered, or the transport
    /// failed.
    fn finished(&mut self) -> bool;

    /// Waits until the transport has input (handed to the core before it
    /// returns) or, while [`Link::output_pending`], room for output.
    /// Cancel-safe: dropped at an await point, nothing is lost.
    async fn ready(&mut self) -> io::Result<Got>;

    /// The clock the link gave the core with the input it read since this
    /// was last asked, if any: the turn times its wait and its commands
    /// from it instead of reading the clock once more.
    fn take_input_at(&mut self) -> Option<Instant> {
        None
    }

    /// The transport failed, or the port killed the connection: stop
    /// moving data and tell the core.
    fn fail(&mut self);

    /// Stops the data path before in-flight commands are drained, where
    /// the transport needs it (iSER: disconnect and reap every posted work
    /// request, so no DMA touches a buffer afterwards).
    async fn quiesce(&mut self) {}

    /// The connection ends: deliver what is still queued, within a bound,
    /// unless `killed`, and close the transport.
    async fn close(&mut self, killed: bool);
}

/// Serves one connection over `link` until it ends, then lets it go: its
/// nexus is released (if logout did not already release it) when `pc` is
/// dropped by the caller. `ring`: the io_uring of the reactor the task
/// runs on (see [`crate::Reactors::spawn`]).
pub async fn serve<L: Link>(
    pc: &mut PortConn,
    link: &mut L,
    ring: Option<&Ring>,
) -> io::Result<()> {
    let mut task = Task {
        killed: false,
        timer: Box::pin(tokio::time::sleep_until(tokio::time::Instant::now())),
        armed: None,
    };
    let result = task.run(pc, link, ring).await;
    if result.is_err() {
        link.fail();
    }
    link.quiesce().await;
    if !task.killed {
        drain(pc, link.core()).await;
    }
    link.close(task.killed).await;
    result
}

/// Waits for the answers of `core`'s commands in flight (each within
/// [`DRAIN_WAIT`]) and hands them to it: a connection that goes away
/// lets them finish first, so no write is lost half-done.
pub async fn drain(pc: &mut PortConn, core: &mut Connection) {
    while core.in_flight() > 0 {
        match tokio::time::timeout(DRAIN_WAIT, pc.recv()).await {
            Ok(Some(PortMsg::Done(resp))) => core.complete(resp),
            Ok(Some(_)) => {}
            _ => break,
        }
    }
}

/// Acts on one message from the port; `true` if it kills the connection
/// (its driver then stops moving data and tells the core, as
/// [`Link::fail`]).
pub fn on_msg(core: &mut Connection, msg: PortMsg) -> bool {
    match msg {
        PortMsg::Done(resp) => core.complete(resp),
        PortMsg::Tmf(itt, r) => core.tmf_done(itt, r),
        PortMsg::Kill => return true,
        PortMsg::RequestLogout => core.request_logout(2),
    }
    false
}

/// The turn proper, once the wait's input is in the core: the core's
/// events go through [`PortConn::on_event_at`], the turn's io_uring batch
/// ends ([`PortConn::end_ring_batch`]) and the responses it produced go
/// back to the core, for at most [`TURN_ROUNDS`] rounds; then the login
/// cap learns of a full-feature session, and a closing connection with
/// nothing in flight releases its nexus before the initiator can see a
/// Logout Response (so another session's next command never meets its
/// reservations or unit attentions). `input_at`: when the turn's input
/// was read (its commands' start). `true` if a message taken on the way
/// killed the connection.
pub fn turn(
    pc: &mut PortConn,
    core: &mut Connection,
    input_at: Option<Instant>,
    ring: Option<&Ring>,
) -> bool {
    let mut input_at = input_at;
    let mut killed = false;
    for _ in 0..TURN_ROUNDS {
        while let Some(ev) = core.poll_event() {
            let at = *input_at.get_or_insert_with(Instant::now);
            if let Some(resp) = pc.on_event_at(ev, at, ring) {
                core.complete(resp);
            }
        }
        if !pc.end_ring_batch(ring) {
            break;
        }
        while let Some(msg) = pc.try_recv() {
            killed |= on_msg(core, msg);
        }
    }
    if core.session().is_some() {
        pc.login_done();
    }
    if core.is_closing() && core.in_flight() == 0 {
        pc.release_nexus();
    }
    killed
}

/// The port's side of a connection's task between turns.
struct Task {
    /// The port killed the connection: nothing more is delivered.
    killed: bool,
    /// The core's timer, kept from wait to wait.
    timer: std::pin::Pin<Box<tokio::time::Sleep>>,
    /// When `timer` fires, if it is armed. It is moved only to an earlier
    /// time: a deadline that moved later (the keepalive, after every PDU)
    /// lets it fire early once, which the core's `handle_timeout` takes
    /// for nothing, instead of re-arming the reactor's timer every wait.
    armed: Option<Instant>,
}

impl Task {
    async fn run<L: Link>(
        &mut self,
        pc: &mut PortConn,
        link: &mut L,
        ring: Option<&Ring>,
    ) -> io::Result<()> {
        loop {
            link.send()?;
            if link.finished() {
                return Ok(());
            }
            let mut input_at = None;
            match self.park(pc, link).await? {
                Got::Eof => {
                    // The initiator is gone. With nothing in flight its
                    // nexus goes now, before anything else.
                    if link.core().in_flight() == 0 {
                        pc.release_nexus();
                    }
                    return Ok(());
                }
                Got::Input => {
                    input_at = link.take_input_at();
                    while let Some(msg) = pc.try_recv() {
                        self.on_msg(link, msg);
                    }
                }
                Got::Nothing => {}
            }
            if turn(pc, link.core(), input_at, ring) {
                self.kill(link);
            }
        }
    }

    /// Waits, parked, for a message from the port, the link, or the core's
    /// timer.
    async fn park<L: Link>(&mut self, pc: &mut PortConn, link: &mut L) -> io::Result<Got> {
        if let Some(t) = link.core().poll_timeout() {
            if self.armed.is_none_or(|armed| t < armed) {
                self.timer.as_mut().reset(tokio::time::Instant::from_std(t));
                self.armed = Some(t);
            }
        }
        let armed = self.armed.is_some();
        // The link is borrowed by its wait; a message is acted on after.
        let msg = tokio::select! {
            biased;
            Some(msg) = pc.recv() => msg,
            r = link.ready() => return r,
            _ = self.timer.as_mut(), if armed => {
                self.armed = None;
                link.core().handle_timeout(Instant::now());
                return Ok(Got::Nothing);
            }
        };
        self.on_msg(link, msg);
        Ok(Got::Input)
    }

    fn on_msg<L: Link>(&mut self, link: &mut L, msg: PortMsg) {
        if on_msg(link.core(), msg) {
            self.kill(link);
        }
    }

    fn kill<L: Link>(&mut self, link: &mut L) {
        self.killed = true;
        link.fail();
    }
}
