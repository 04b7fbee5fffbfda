//! # rustgt-iscsi-tcp: the TCP driver
//!
//! Layer: a transport driver on top of the port layer (`rustgt-port`),
//! which sits on the sans-I/O core. This crate only accepts TCP
//! connections and moves bytes between each socket and its
//! [`rustgt_iscsi::Connection`]; the targets, sessions, connection
//! registry, SCSI dispatch, statistics and the reactor threads are the
//! port's, shared with the iSER driver. It holds no protocol logic.
//!
//! Guarantees: every connection runs on one of the port's [`Reactors`]
//! (single-threaded tokio runtimes), one task per connection, which reads,
//! runs every PDU that came in, hands each event to its [`PortConn`]
//! (which runs on this thread each command the LUN can complete without
//! blocking), and writes every response ready in that turn with one
//! vectored write. Only commands that may block cross to the LUN's
//! workers, whose completions come back through the port. A connection's
//! failure never affects another; on shutdown (the port's) accepting
//! stops, in-flight commands finish, queued output is flushed (bounded),
//! then sockets close.
//!
//! [`Reactors`]: rustgt_port::Reactors

#![forbid(unsafe_code)]

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::io::IoSlice;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rustgt_iscsi::{Connection, ConnectionSetup};
use rustgt_port::{Admitted, ConnInfo, Port, PortConn, PortMsg, Transport, TurnDriver};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tracing::Instrument;

/// Accept connections on `listener` until the port shuts down.
pub async fn serve(port: Arc<Port>, listener: TcpListener) {
    serve_until(port, listener, std::future::pending()).await;
}

/// Accept connections on `listener` until the port shuts down or until
/// `stop_listener` completes (a portal removed at run time). Connections
/// already accepted are not affected by `stop_listener`.
pub async fn serve_until(
    port: Arc<Port>,
    listener: TcpListener,
    stop_listener: impl Future<Output = ()> + Send,
) {
    tokio::pin!(stop_listener);
    let stopping = port.stopping();
    tokio::pin!(stopping);
    loop {
        tokio::select! {
            _ = &mut stop_listener => break,
            r = listener.accept() => match r {
                // Over a cap ([limits]): closed at once, before anything is
                // allocated for it (the port logs refusals, rate-limited).
                Ok((sock, peer)) => match port.admit(peer) {
                    Ok(admitted) => hand_to_reactor(&port, sock, peer, admitted),
                    Err(_) => drop(sock),
                },
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = &mut stopping => break,
        }
    }
}

/// Moves an accepted connection to the least loaded reactor, which serves
/// it from then on.
fn hand_to_reactor(port: &Arc<Port>, sock: TcpStream, peer: SocketAddr, admitted: Admitted) {
    let reactors = match port.reactors() {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, %peer, "cannot start reactor threads; connection refused");
            return;
        }
    };
    let sock = match sock.into_std() {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, %peer, "cannot move an accepted connection");
            return;
        }
    };
    let port = Arc::clone(port);
    reactors.spawn(async move {
        match TcpStream::from_std(sock) {
            Ok(sock) => run_conn(port, sock, peer, admitted).await,
            Err(e) => tracing::warn!(error = %e, %peer, "cannot register a connection"),
        }
    });
}

async fn run_conn(port: Arc<Port>, sock: TcpStream, peer: SocketAddr, admitted: Admitted) {
    let local = match sock.local_addr() {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(error = %e, %peer, "accepted connection without a local address");
            return;
        }
    };
    let mut pc = port.open(ConnInfo {
        transport: Transport::Tcp,
        peer,
        local,
        probe: sock
            .as_fd()
            .try_clone_to_owned()
            .ok()
            .map(std::net::TcpStream::from),
        admitted,
    });
    let span = tracing::info_span!(
        "conn",
        id = pc.id(),
        %peer,
        initiator = tracing::field::Empty,
        isid = tracing::field::Empty,
        tsih = tracing::field::Empty,
    );
    async move {
        if let Err(e) = drive(&mut pc, sock, peer, local).await {
            tracing::debug!(error = %e, "connection ended with error");
        }
        // Its nexus goes (if logout did not already take it) and the port
        // forgets it.
        drop(pc);
        tracing::info!("connection closed");
    }
    .instrument(span)
    .await
}

async fn drive(
    pc: &mut PortConn,
    sock: TcpStream,
    peer: SocketAddr,
    local: SocketAddr,
) -> std::io::Result<()> {
    let _ = sock.set_nodelay(true);
    let mut random = [0u8; 32];
    getrandom::getrandom(&mut random).map_err(|e| std::io::Error::other(e.to_string()))?;
    let setup = ConnectionSetup {
        conn_id: pc.id(),
        transport: Transport::Tcp,
        local_addr: local.to_string(),
        peer_addr: peer.to_string(),
        random,
    };
    let mut conn = Connection::new(pc.config(), pc.sessions(), setup, std::time::Instant::now());
    let mut out = Output::default();
    let mut killed = false;
    let mut poll = pc.busy_poll();
    let mut streaming = false;
    // The socket's descriptor once more, as a std stream: a connection
    // alone on its reactor looks at its socket by reading it, without
    // tokio's readiness, one system call a look (see the spin below).
    let direct = sock
        .as_fd()
        .try_clone_to_owned()
        .ok()
        .map(std::net::TcpStream::from);

    // One turn: send what is ready, wait for input, a message from the port
    // (a worker's completion, a kill), room in the socket or the timer;
    // then run every PDU that came in, to completion where the LUN allows,
    // and queue what they produced. Nothing here waits for another thread.
    // The wait starts with a short busy-poll when recent waits were short
    // and the wait is for the initiator alone, with no command in flight
    // (see `rustgt_port::BusyPoll`).
    loop {
        out.flush(&sock)?;
        let wait_from = std::time::Instant::now();
        let mut got = Got::Nothing;
        let for_peer = conn.in_flight() == 0;
        // A spin needs its reactor's slot (`rustgt_port::SpinSlot`): one
        // connection of a reactor spins for all of them, and a CPU is
        // always left over; without one the connection parks at once.
        let budget = if for_peer {
            poll.budget(wait_from)
        } else {
            Duration::ZERO
        };
        let slot = if budget.is_zero() {
            None
        } else {
            rustgt_port::SpinSlot::take(wait_from)
        };
        let until = wait_from
            + if slot.is_some() {
                budget
            } else {
                Duration::ZERO
            };
        // While the thread shares its CPU with another process (see
        // `BusyPoll::held`) it spins briefly and does not yield.
        let held = poll.held(wait_from);
        // Alone on its reactor, the connection has no other task to let
        // run between looks: it reads its socket directly, one system call
        // a look, where a look through tokio costs an `epoll_wait` and then
        // the read.
        let alone = match direct.as_ref() {
            Some(d) if rustgt_port::connections_here() == Some(1) => Some(d),
            _ => None,
        };
        let mut step = rustgt_port::poll::SPIN_STEP_MIN;
        // A peer that streams (its next PDU was already there at the last
        // wait's first look) gets a short pause before the first look, so
        // a turn takes several of its commands and answers them with one
        // read and one write, rather than one command a turn.
        if streaming && !held && !out.pending() {
            spin_until((wait_from + rustgt_port::poll::COALESCE).min(until));
        }
        let mut looks = 0u32;
        while !out.pending() && std::time::Instant::now() < until {
            looks += 1;
            if alone.is_none() {
                // Let the reactor's other tasks run and its epoll look
                // (without sleeping) at every socket, this one included.
                tokio::task::yield_now().await;
            }
            if let Some(msg) = pc.try_recv() {
                on_msg(&mut conn, msg, &mut killed);
                got = Got::Input;
                break;
            }
            got = match alone {
                Some(d) => read_into(&sock, Some(d), &mut conn)?,
                None => tokio::select! {
                    biased;
                    r = sock.readable() => {
                        r?;
                        read_into(&sock, None, &mut conn)?
                    }
                    () = std::future::ready(()) => Got::Nothing,
                },
            };
            if !matches!(got, Got::Nothing) {
                break;
            }
            // Between looks the CPU stays busy but makes no system call;
            // the looks thin out the longer the wait.
            let from = std::time::Instant::now();
            let next = from + step;
            spin_until(next.min(until));
            step = (step * 2).min(rustgt_port::poll::SPIN_STEP_MAX);
            // A short wait (the next PDU of a busy initiator) gives up
            // nothing; a longer one offers the CPU to whatever else is
            // runnable on it.
            if !held
                && from.saturating_duration_since(wait_from) >= rustgt_port::poll::SPIN_YIELD_AFTER
            {
                std::thread::yield_now();
            }
            // Time this stretch took beyond its pause was time off the CPU:
            // another process wants it, and a reactor that sleeps instead
            // of spinning gets it back sooner when the initiator writes.
            let now = std::time::Instant::now();
            let paused = next.min(until).saturating_duration_since(from);
            if poll.spun(
                now.saturating_duration_since(from).saturating_sub(paused),
                now,
            ) {
                break;
            }
        }
        drop(slot);
        streaming = for_peer && looks == 1 && matches!(got, Got::Input);
        if matches!(got, Got::Nothing) {
            let timeout = conn.poll_timeout();
            let sleep = async {
                match timeout {
                    Some(t) => tokio::time::sleep_until(tokio::time::Instant::from_std(t)).await,
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                biased;
                Some(msg) = pc.recv() => {
                    on_msg(&mut conn, msg, &mut killed);
                    got = Got::Input;
                }
                r = sock.readable() => {
                    r?;
                    got = read_into(&sock, None, &mut conn)?;
                }
                r = sock.writable(), if out.pending() => r?,
                _ = sleep => conn.handle_timeout(std::time::Instant::now()),
            }
        }
        match got {
            Got::Eof => {
                // The initiator is gone. With nothing in flight its nexus
                // goes now, before anything else.
                if conn.in_flight() == 0 {
                    pc.release_nexus();
                }
                break;
            }
            Got::Input => {
                if for_peer {
                    poll.waited(wait_from.elapsed());
                }
                while let Some(msg) = pc.try_recv() {
                    on_msg(&mut conn, msg, &mut killed);
                }
            }
            Got::Nothing => {}
        }
        // The turn's commands, and its reads queued on the reactor's
        // io_uring (cached pages read at once), answered here so their
        // responses leave in this turn's writev.
        let closing = pc.run_turn(&mut Turn {
            conn: &mut conn,
            killed: &mut killed,
        });
        conn.transmit_into(&mut out.queue);
        if closing {
            break;
        }
    }
    // Let in-flight commands finish before the nexus goes away, so no
    // write is lost half-done; bounded by the commands themselves.
    if !killed {
        while conn.in_flight() > 0 {
            match tokio::time::timeout(Duration::from_secs(30), pc.recv()).await {
                Ok(Some(PortMsg::Done(resp))) => conn.complete(resp),
                Ok(Some(_)) => {}
                _ => break,
            }
        }
    }
    // What was queued before the end (a Logout Response, a Reject)
    // still goes out, within a bound.
    if !killed {
        let _ = tokio::time::timeout(LINGER, out.flush_all(&sock)).await;
    }
    let mut sock = sock;
    let _ = sock.shutdown().await;
    Ok(())
}

/// What a wait brought.
enum Got {
    /// Bytes or a port message, now handed to the connection.
    Input,
    /// The initiator closed its side.
    Eof,
    /// A timer, room in the socket, or a spurious wake-up.
    Nothing,
}

/// The connection as [`PortConn::run_turn`] drives it.
struct Turn<'a> {
    conn: &'a mut Connection,
    killed: &'a mut bool,
}

impl TurnDriver for Turn<'_> {
    fn core(&mut self) -> &mut Connection {
        self.conn
    }

    fn on_msg(&mut self, msg: PortMsg) {
        on_msg(self.conn, msg, self.killed);
    }
}

/// Acts on a message from outside the connection's thread.
fn on_msg(conn: &mut Connection, msg: PortMsg, killed: &mut bool) {
    match msg {
        PortMsg::Done(resp) => conn.complete(resp),
        PortMsg::Tmf(itt, r) => conn.tmf_done(itt, r),
        PortMsg::Kill => {
            *killed = true;
            conn.fail();
        }
        PortMsg::RequestLogout => conn.request_logout(2),
    }
}

/// How long a closing connection may take to send what it queued.
const LINGER: Duration = Duration::from_secs(10);

/// Reads what the socket holds (without waiting) into the connection:
/// through tokio, or through `direct`, a second descriptor of `sock`'s
/// socket, whatever tokio last saw of its readiness. Either way a read
/// that drained the socket clears that readiness (see [`read_some`]).
fn read_into(
    sock: &TcpStream,
    direct: Option<&std::net::TcpStream>,
    conn: &mut Connection,
) -> std::io::Result<Got> {
    let now = std::time::Instant::now();
    let full_feature = conn.session().is_some();
    got_of(read_into_core(
        full_feature,
        |buf| read_some(sock, direct, buf),
        |data| conn.handle_input(data, now),
    ))
}

/// Keeps the CPU busy, without a system call, until `deadline`.
fn spin_until(deadline: std::time::Instant) {
    while std::time::Instant::now() < deadline {
        std::hint::spin_loop();
    }
}

/// What one read's result means for the turn.
fn got_of(read: std::io::Result<usize>) -> std::io::Result<Got> {
    match read {
        Ok(0) => Ok(Got::Eof),
        Ok(_) => Ok(Got::Input),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(Got::Nothing),
        Err(e) => Err(e),
    }
}

/// Most one read takes in full feature phase.
const READ_MAX: usize = 256 * 1024;
/// Most one read takes until then: one login PDU (a 48-byte header, at
/// most 8192 bytes of data before MaxRecvDataSegmentLength is agreed,
/// RFC 7143 §13.12, and digests), so what the core keeps of a login in
/// progress stays within about two login PDUs.
const LOGIN_READ_MAX: usize = 48 + 8192 + 8;

thread_local! {
    /// The read buffer of every connection on this reactor thread. A read
    /// is handed to the core, which keeps only what is left of a partial
    /// PDU, before the connection's task can yield, so no connection
    /// needs a buffer of its own: one that never sends costs no read
    /// buffer, and one in full feature phase no 256 KiB of its own.
    static READ_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// One read (`read`) of what the socket holds (at most [`LOGIN_READ_MAX`]
/// until full feature phase, [`READ_MAX`] after), handed to `consume` if
/// not empty; the byte count, 0 at end of file.
fn read_into_core(
    full_feature: bool,
    read: impl FnOnce(&mut [u8]) -> std::io::Result<usize>,
    consume: impl FnOnce(&[u8]),
) -> std::io::Result<usize> {
    let limit = if full_feature {
        READ_MAX
    } else {
        LOGIN_READ_MAX
    };
    READ_BUF.with(|cell| {
        // Never borrowed already (nothing reads while a read is handed
        // on); if it were, a buffer of this read's own does.
        let mut own = Vec::new();
        let mut shared = cell.try_borrow_mut();
        let buf = match shared.as_deref_mut() {
            Ok(b) => b,
            Err(_) => &mut own,
        };
        if buf.len() < limit {
            buf.resize(limit, 0);
        }
        let buf = buf.get_mut(..limit).unwrap_or_default();
        let n = read(buf)?;
        if n > 0 {
            consume(buf.get(..n).unwrap_or_default());
        }
        Ok(n)
    })
}

/// One read of what the socket holds, without waiting: through tokio, or
/// through `direct` (the same socket, read past tokio's readiness). A read
/// that did not fill `buf` drained the socket, so tokio's readiness is
/// cleared at once
/// rather than by a second read that would only fail with EAGAIN (new data
/// raises a new edge, which the reactor sees before it sleeps).
fn read_some(
    sock: &TcpStream,
    direct: Option<&std::net::TcpStream>,
    buf: &mut [u8],
) -> std::io::Result<usize> {
    let n = match direct {
        Some(d) => std::io::Read::read(&mut &*d, buf)?,
        None => sock.try_read(buf)?,
    };
    if n > 0 && n < buf.len() {
        let _ = sock.try_io(tokio::io::Interest::READABLE, || {
            Err::<(), _>(std::io::ErrorKind::WouldBlock.into())
        });
    }
    Ok(n)
}

/// The connection's queue of PDU segments to send, written with vectored
/// writes so read payloads go from the SCSI core's buffer to the socket
/// without another copy, and every response ready in a turn leaves in one
/// `writev`.
#[derive(Debug, Default)]
struct Output {
    queue: VecDeque<Bytes>,
}

impl Output {
    fn pending(&self) -> bool {
        !self.queue.is_empty()
    }

    /// Writes as much as the socket takes now.
    fn flush(&mut self, sock: &TcpStream) -> std::io::Result<()> {
        while self.pending() {
            let mut slices = [IoSlice::new(&[]); MAX_IOVECS];
            let mut count = 0;
            for (slot, b) in slices.iter_mut().zip(self.queue.iter()) {
                *slot = IoSlice::new(b);
                count += 1;
            }
            match sock.try_write_vectored(slices.get(..count).unwrap_or_default()) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => advance(&mut self.queue, n),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Writes everything, waiting for room as needed.
    async fn flush_all(&mut self, sock: &TcpStream) -> std::io::Result<()> {
        while self.pending() {
            sock.writable().await?;
            self.flush(sock)?;
        }
        Ok(())
    }
}

/// Most segments handed to one writev (Linux's UIO_MAXIOV is 1024).
const MAX_IOVECS: usize = 64;

/// Drop `n` written bytes from the front of `queue`.
fn advance(queue: &mut VecDeque<Bytes>, mut n: usize) {
    while n > 0 {
        let Some(front) = queue.front_mut() else {
            return;
        };
        if n >= front.len() {
            n -= front.len();
            queue.pop_front();
        } else {
            let _ = front.split_to(n);
            n = 0;
        }
    }
}

/// Bind a listener for `addr`.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advance_drops_whole_and_partial_segments() {
        let mut q: VecDeque<Bytes> = ["abc", "de", "fghij"]
            .iter()
            .map(|s| Bytes::from_static(s.as_bytes()))
            .collect();
        advance(&mut q, 4);
        assert_eq!(
            q.iter().map(|b| b.as_ref()).collect::<Vec<_>>(),
            vec![&b"e"[..], &b"fghij"[..]]
        );
        advance(&mut q, 3);
        assert_eq!(
            q.iter().map(|b| b.as_ref()).collect::<Vec<_>>(),
            vec![&b"hij"[..]]
        );
        advance(&mut q, 3);
        assert!(q.is_empty());
        advance(&mut q, 5);
        assert!(q.is_empty());
    }
}
