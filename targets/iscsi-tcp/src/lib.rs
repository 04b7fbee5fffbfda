//! # rustgt-iscsi-tcp: the TCP driver
//!
//! Layer: a transport driver on top of the port layer (`rustgt-port`),
//! which sits on the sans-I/O core. This crate only accepts TCP
//! connections and moves bytes between each socket and its
//! [`rustgt_iscsi::Connection`]; the targets, sessions, connection
//! registry, SCSI dispatch, statistics and the reactor threads are the
//! port's, shared with the iSER driver. It holds no protocol logic.
//!
//! Guarantees: every connection runs on one of the port's
//! [`PollReactors`] (threads that each wait for all their connections in
//! one epoll loop); this crate's [`ReadyLink`] reads what the socket
//! holds into the core and writes every response ready in a turn with
//! one vectored write; the port runs the turn (on the reactor's thread
//! each command the LUN can complete without blocking). Only commands
//! that may block cross to the LUN's workers, whose completions come back
//! through the port. A connection's failure never affects another; on
//! shutdown (the port's) accepting stops, in-flight commands finish,
//! queued output is flushed (bounded), then sockets close.
//!
//! [`PollReactors`]: rustgt_port::PollReactors

#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::future::Future;
use std::io::{IoSlice, Read, Write};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rustgt_iscsi::Connection;
use rustgt_port::{Admitted, Closing, ConnInfo, Got, Opened, Port, ReadyLink, Transport};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

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

/// Moves an accepted connection to the least loaded reactor, which sets
/// it up and serves it from then on.
fn hand_to_reactor(port: &Arc<Port>, sock: TcpStream, peer: SocketAddr, admitted: Admitted) {
    let reactors = match port.poll_reactors() {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, %peer, "cannot start reactor threads; connection refused");
            return;
        }
    };
    // Out of tokio's reactor: the connection's reactor waits on it.
    let sock = match sock.into_std() {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, %peer, "cannot move an accepted connection");
            return;
        }
    };
    let port = Arc::clone(port);
    reactors.spawn(move || open(&port, sock, peer, admitted));
}

/// Sets an accepted connection up (on its reactor): its place in the
/// port, its span and its core.
fn open(
    port: &Arc<Port>,
    sock: std::net::TcpStream,
    peer: SocketAddr,
    admitted: Admitted,
) -> Option<Opened> {
    let local = match sock.local_addr() {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(error = %e, %peer, "accepted connection without a local address");
            return None;
        }
    };
    let _ = sock.set_nodelay(true);
    let pc = port.open(ConnInfo {
        transport: Transport::Tcp,
        peer,
        local,
        probe: sock.try_clone().ok(),
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
    let setup = match pc.setup(local.to_string(), peer.to_string()) {
        Ok(s) => s,
        Err(e) => {
            let _enter = span.enter();
            tracing::warn!(error = %e, "cannot set a connection up");
            return None;
        }
    };
    let conn = Connection::new(pc.config(), pc.sessions(), setup, std::time::Instant::now());
    let link = TcpLink {
        conn,
        sock,
        out: Output::default(),
        input_at: None,
    };
    Some((pc, Box::new(link), span))
}

/// A TCP connection as its reactor's loop drives it: its core, its
/// socket (non-blocking) and the segments queued for it.
struct TcpLink {
    conn: Connection,
    sock: std::net::TcpStream,
    out: Output,
    /// The clock the last read that got input gave the core (see
    /// [`ReadyLink::take_input_at`]).
    input_at: Option<std::time::Instant>,
}

impl ReadyLink for TcpLink {
    fn core(&mut self) -> &mut Connection {
        &mut self.conn
    }

    fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    fn send(&mut self) -> std::io::Result<()> {
        self.out.take_from(&mut self.conn);
        let sock = &self.sock;
        self.out.flush(|s| (&mut &*sock).write_vectored(s))
    }

    fn output_pending(&self) -> bool {
        self.out.pending()
    }

    fn output_full(&self) -> bool {
        // An initiator that does not read its responses gets no more of
        // its commands read (and so run) until it does: what it can make
        // the daemon hold for it stays bounded (see [`OUTPUT_FULL`]).
        self.out.full()
    }

    fn finished(&mut self) -> bool {
        self.conn.is_closing()
    }

    fn look(&mut self, buf: &mut Vec<u8>) -> std::io::Result<(Got, bool)> {
        let now = std::time::Instant::now();
        let full_feature = self.conn.session().is_some();
        let sock = &self.sock;
        let conn = &mut self.conn;
        let mut filled = false;
        let got = got_of(read_into_core(
            full_feature,
            buf,
            |buf| {
                let n = (&mut &*sock).read(buf)?;
                filled = n == buf.len();
                Ok(n)
            },
            |data| conn.handle_input(data, now),
        ))?;
        if got == Got::Input {
            self.input_at = Some(now);
        }
        Ok((got, got == Got::Input && filled))
    }

    fn take_input_at(&mut self) -> Option<std::time::Instant> {
        self.input_at.take()
    }

    fn fail(&mut self) {
        self.conn.fail();
    }

    fn close(self: Box<Self>, killed: bool) -> Option<Closing> {
        let TcpLink {
            mut conn,
            sock,
            mut out,
            ..
        } = *self;
        if !killed {
            out.take_from(&mut conn);
        }
        if killed || !out.pending() {
            let _ = sock.shutdown(std::net::Shutdown::Write);
            return None;
        }
        Some(Box::pin(async move {
            let Ok(sock) = TcpStream::from_std(sock) else {
                return;
            };
            // What was queued before the end (a Logout Response, a Reject)
            // still goes out, within a bound.
            let _ = tokio::time::timeout(LINGER, out.flush_all(&sock)).await;
            let mut sock = sock;
            let _ = sock.shutdown().await;
        }))
    }
}

/// How long a closing connection may take to send what it queued.
const LINGER: Duration = Duration::from_secs(10);

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

/// One read (`read`) of what the socket holds (at most [`LOGIN_READ_MAX`]
/// until full feature phase, [`READ_MAX`] after) into `buf`, the
/// reactor's read buffer (grown to the limit once), handed to `consume` if
/// not empty; the byte count, 0 at end of file. The core keeps only what
/// is left of a partial PDU, so no connection needs a buffer of its own:
/// one that never sends costs no read buffer, and one in full feature
/// phase no 256 KiB of its own.
fn read_into_core(
    full_feature: bool,
    buf: &mut Vec<u8>,
    read: impl FnOnce(&mut [u8]) -> std::io::Result<usize>,
    consume: impl FnOnce(&[u8]),
) -> std::io::Result<usize> {
    let limit = if full_feature {
        READ_MAX
    } else {
        LOGIN_READ_MAX
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
}

/// The connection's queue of PDU segments to send, written with vectored
/// writes so read payloads go from the SCSI core's buffer to the socket
/// without another copy, and every response ready in a turn leaves in one
/// `writev`.
#[derive(Debug, Default)]
struct Output {
    queue: VecDeque<Bytes>,
    /// Bytes in `queue`.
    bytes: usize,
}

/// Queued output past which a connection reads no more input until the
/// socket takes some: an initiator that keeps sending commands but does
/// not read their responses can make the daemon hold this much, plus
/// what the commands already read produce (bounded by the CmdSN window),
/// and no more. Large enough that a streaming reader (1 MiB reads at
/// queue depth 32 and more) never meets it while it reads.
const OUTPUT_FULL: usize = 16 << 20;

impl Output {
    fn pending(&self) -> bool {
        !self.queue.is_empty()
    }

    /// Whether the initiator has left so much unread that the connection
    /// must stop reading its commands.
    fn full(&self) -> bool {
        self.bytes >= OUTPUT_FULL
    }

    /// Moves what the core queued to the end of the queue.
    fn take_from(&mut self, conn: &mut Connection) {
        let before = self.queue.len();
        conn.transmit_into(&mut self.queue);
        self.bytes += self.queue.range(before..).map(Bytes::len).sum::<usize>();
    }

    /// Writes as much as `write` (one vectored write, never waiting)
    /// takes now.
    fn flush(
        &mut self,
        mut write: impl FnMut(&[IoSlice<'_>]) -> std::io::Result<usize>,
    ) -> std::io::Result<()> {
        while self.pending() {
            // A turn's answers are a few segments: their array is filled,
            // not the largest one.
            let written = if self.queue.len() <= FEW_IOVECS {
                write_from::<FEW_IOVECS>(&self.queue, &mut write)
            } else {
                write_from::<MAX_IOVECS>(&self.queue, &mut write)
            };
            match written {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    advance(&mut self.queue, n);
                    self.bytes = self.bytes.saturating_sub(n);
                }
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
            self.flush(|s| sock.try_write_vectored(s))?;
        }
        Ok(())
    }
}

/// Most segments handed to one writev (Linux's UIO_MAXIOV is 1024).
const MAX_IOVECS: usize = 64;

/// Segments of a short queue (one or two answers).
const FEW_IOVECS: usize = 4;

/// One vectored write of the first `N` segments of `queue` at most.
fn write_from<const N: usize>(
    queue: &VecDeque<Bytes>,
    write: &mut impl FnMut(&[IoSlice<'_>]) -> std::io::Result<usize>,
) -> std::io::Result<usize> {
    let mut slices = [IoSlice::new(&[]); N];
    let mut count = 0;
    for (slot, b) in slices.iter_mut().zip(queue.iter()) {
        *slot = IoSlice::new(b);
        count += 1;
    }
    write(slices.get(..count).unwrap_or_default())
}

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
