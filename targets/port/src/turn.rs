//! The connection turn, once for both transports: [`serve`] runs a
//! connection's task over a [`Link`], the small trait a transport driver
//! implements to move bytes (TCP) or work requests (iSER).
//!
//! One turn: the link sends what the core queued, then the task waits for
//! input (a short busy-poll first where [`BusyPoll`] and the reactor's
//! [`SpinSlot`] allow it and the link can look without waiting), a message
//! from the port (a worker's completion, a task-management result, a
//! kill, a logout request) or the core's timer; then every event of the
//! core goes through [`PortConn::on_event`] (commands run to completion
//! where the LUN allows), the reactor's io_uring batch ends and the
//! responses it produced go back to the core, for at most [`TURN_ROUNDS`]
//! rounds. Nothing in a turn waits for another thread.

use std::io;
use std::time::{Duration, Instant};

use rustgt_iscsi::Connection;

use crate::conn::{PortConn, TURN_ROUNDS};
use crate::msg::PortMsg;
use crate::poll::{BusyPoll, SpinSlot, COALESCE, SPIN_STEP_MAX, SPIN_STEP_MIN, SPIN_YIELD_AFTER};

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
/// requests between its peer and the core it holds; the turn, the
/// busy-poll, timers, messages from the port and the end of a connection
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

    /// Whether [`Link::look`] can look for input without waiting and
    /// without a cost beyond a system call, so a busy-poll pays.
    fn can_spin(&self) -> bool {
        false
    }

    /// One look for input without waiting; what came is handed to the
    /// core. `alone`: this connection is the only one on its reactor, so
    /// the look need not go through the reactor's readiness.
    fn look(&mut self, alone: bool) -> io::Result<Got> {
        let _ = alone;
        Ok(Got::Nothing)
    }

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
/// dropped by the caller.
pub async fn serve<L: Link>(pc: &mut PortConn, link: &mut L) -> io::Result<()> {
    let mut task = Task {
        killed: false,
        poll: pc.busy_poll(),
        streaming: false,
        timer: Box::pin(tokio::time::sleep_until(tokio::time::Instant::now())),
        armed: None,
    };
    let result = task.run(pc, link).await;
    if result.is_err() {
        link.fail();
    }
    link.quiesce().await;
    // In-flight commands finish before the nexus goes away, so no write is
    // lost half-done; bounded by the commands themselves.
    if !task.killed {
        while link.core().in_flight() > 0 {
            match tokio::time::timeout(DRAIN_WAIT, pc.recv()).await {
                Ok(Some(PortMsg::Done(resp))) => link.core().complete(resp),
                Ok(Some(_)) => {}
                _ => break,
            }
        }
    }
    link.close(task.killed).await;
    result
}

/// The port's side of a connection's task between turns.
struct Task {
    /// The port killed the connection: nothing more is delivered.
    killed: bool,
    poll: BusyPoll,
    /// The peer streams: its next PDU was already there at the last wait's
    /// first look.
    streaming: bool,
    /// The core's timer, kept from wait to wait.
    timer: std::pin::Pin<Box<tokio::time::Sleep>>,
    /// When `timer` fires, if it is armed. It is moved only to an earlier
    /// time: a deadline that moved later (the keepalive, after every PDU)
    /// lets it fire early once, which the core's `handle_timeout` takes
    /// for nothing, instead of re-arming the reactor's timer every wait.
    armed: Option<Instant>,
}

impl Task {
    async fn run<L: Link>(&mut self, pc: &mut PortConn, link: &mut L) -> io::Result<()> {
        loop {
            link.send()?;
            if link.finished() {
                return Ok(());
            }
            let wait_from = Instant::now();
            let for_peer = link.core().in_flight() == 0;
            let mut got = if link.can_spin() {
                self.spin(pc, link, wait_from, for_peer).await?
            } else {
                Got::Nothing
            };
            if got == Got::Nothing {
                got = self.park(pc, link).await?;
            }
            let mut input_at = None;
            match got {
                Got::Eof => {
                    // The initiator is gone. With nothing in flight its
                    // nexus goes now, before anything else.
                    if link.core().in_flight() == 0 {
                        pc.release_nexus();
                    }
                    return Ok(());
                }
                Got::Input => {
                    let now = link.take_input_at().unwrap_or_else(Instant::now);
                    input_at = Some(now);
                    if for_peer {
                        self.poll.waited(now.saturating_duration_since(wait_from));
                    }
                    while let Some(msg) = pc.try_recv() {
                        self.on_msg(link, msg);
                    }
                }
                Got::Nothing => {}
            }
            self.turn(pc, link, input_at);
        }
    }

    /// The wait's busy-poll, while it pays: looks at the link between
    /// short pauses, thinning out, until input, a message, or the end of
    /// the budget.
    async fn spin<L: Link>(
        &mut self,
        pc: &mut PortConn,
        link: &mut L,
        wait_from: Instant,
        for_peer: bool,
    ) -> io::Result<Got> {
        // Only a wait for the initiator alone spins, with its reactor's
        // slot (one connection of a reactor spins for all of them, and a
        // CPU is always left over).
        let budget = if for_peer {
            self.poll.budget(wait_from)
        } else {
            Duration::ZERO
        };
        let slot = if budget.is_zero() {
            None
        } else {
            SpinSlot::take(wait_from)
        };
        if slot.is_none() {
            // No spin this wait (the usual case where spinning does not
            // pay): park at once, without looking at the clock again.
            self.streaming = false;
            return Ok(Got::Nothing);
        }
        let until = wait_from + budget;
        // While the thread shares its CPU with another process (see
        // `BusyPoll::held`) it spins briefly and does not yield.
        let held = self.poll.held(wait_from);
        // Alone on its reactor, the connection has no other task to let
        // run between looks, and its link may look past the reactor's
        // readiness (a TCP read: one system call a look, where a look
        // through tokio costs an `epoll_wait` and then the read).
        let alone = crate::reactors::connections_here() == Some(1);
        // A peer that streams gets a short pause before the first look, so
        // a turn takes several of its commands and answers them together.
        if self.streaming && !held && !link.output_pending() {
            spin_until((wait_from + COALESCE).min(until));
        }
        let mut got = Got::Nothing;
        let mut step = SPIN_STEP_MIN;
        let mut looks = 0u32;
        while !link.output_pending() && Instant::now() < until {
            looks += 1;
            if !alone {
                // Let the reactor's other tasks run and its epoll look
                // (without sleeping) at every socket, this one included.
                tokio::task::yield_now().await;
            }
            if let Some(msg) = pc.try_recv() {
                self.on_msg(link, msg);
                got = Got::Input;
                break;
            }
            got = link.look(alone)?;
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
            if self.poll.spun(
                now.saturating_duration_since(from).saturating_sub(paused),
                now,
            ) {
                break;
            }
        }
        drop(slot);
        self.streaming = for_peer && looks == 1 && got == Got::Input;
        Ok(got)
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

    /// Acts on one message from the port.
    fn on_msg<L: Link>(&mut self, link: &mut L, msg: PortMsg) {
        match msg {
            PortMsg::Done(resp) => link.core().complete(resp),
            PortMsg::Tmf(itt, r) => link.core().tmf_done(itt, r),
            PortMsg::Kill => {
                self.killed = true;
                link.fail();
            }
            PortMsg::RequestLogout => link.core().request_logout(2),
        }
    }

    /// The turn proper, once the wait's input is in the core: the core's
    /// events go through [`PortConn::on_event`], the turn's io_uring batch
    /// ends ([`PortConn::end_ring_batch`]) and the responses it produced
    /// go back to the core, for at most [`TURN_ROUNDS`] rounds; then the
    /// login cap learns of a full-feature session, and a closing
    /// connection with nothing in flight releases its nexus before the
    /// initiator can see a Logout Response (so another session's next
    /// command never meets its reservations or unit attentions).
    /// `input_at`: when the turn's input was read (its commands' start).
    fn turn<L: Link>(&mut self, pc: &mut PortConn, link: &mut L, input_at: Option<Instant>) {
        let mut input_at = input_at;
        for _ in 0..TURN_ROUNDS {
            while let Some(ev) = link.core().poll_event() {
                let at = *input_at.get_or_insert_with(Instant::now);
                if let Some(resp) = pc.on_event_at(ev, at) {
                    link.core().complete(resp);
                }
            }
            if !pc.end_ring_batch() {
                break;
            }
            while let Some(msg) = pc.try_recv() {
                self.on_msg(link, msg);
            }
        }
        let core = link.core();
        if core.session().is_some() {
            pc.login_done();
        }
        if core.is_closing() && core.in_flight() == 0 {
            pc.release_nexus();
        }
    }
}

/// Keeps the CPU busy, without a system call, until `deadline`.
fn spin_until(deadline: Instant) {
    while Instant::now() < deadline {
        std::hint::spin_loop();
    }
}
