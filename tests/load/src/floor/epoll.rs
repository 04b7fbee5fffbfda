//! The floor over readiness: one `epoll` (through mio), every connection
//! on it, edge-triggered; a wake-up reads what came, answers it and writes
//! the answers.

use std::io::{self, Read, Write};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};

use super::session::{Session, IN_CAP, OUT_CAP};
use super::{ACCEPT_RETRY, MAX_CONNECTIONS};

const LISTENER: Token = Token(0);

/// One connection: its socket and protocol state.
struct Conn {
    sock: TcpStream,
    s: Session,
    writable_wanted: bool,
}

/// Serves on `listener` until an I/O error of the listener or the poll.
pub(super) fn serve(listener: std::net::TcpListener) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    let mut listener = TcpListener::from_std(listener);
    let mut poll = Poll::new()?;
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)?;
    let mut conns: Vec<Option<Conn>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut events = Events::with_capacity(256);
    let mut chunk = vec![0u8; 65536];
    // The listener's readiness is edge-triggered: when an accept failed
    // for want of a descriptor, the connections still queued raise no new
    // edge, so it is tried again after a pause instead.
    let mut accept_stalled = false;
    loop {
        let wait = accept_stalled.then_some(ACCEPT_RETRY);
        if let Err(e) = poll.poll(&mut events, wait) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if accept_stalled {
            accept_stalled = accept_all(&listener, &poll, &mut conns, &mut free);
        }
        for ev in events.iter() {
            if ev.token() == LISTENER {
                accept_stalled = accept_all(&listener, &poll, &mut conns, &mut free);
                continue;
            }
            let id = ev.token().0.wrapping_sub(1);
            let Some(slot) = conns.get_mut(id) else {
                continue;
            };
            let keep = match slot.as_mut() {
                Some(c) => c.turn(&poll, ev.token(), &mut chunk),
                None => continue,
            };
            if !keep {
                if let Some(mut c) = slot.take() {
                    let _ = poll.registry().deregister(&mut c.sock);
                }
                free.push(id);
            }
        }
    }
}

/// Accepts every queued connection. True when an accept failed with the
/// queue maybe not empty (no file descriptor left, say): the caller tries
/// again after [`ACCEPT_RETRY`].
fn accept_all(
    listener: &TcpListener,
    poll: &Poll,
    conns: &mut Vec<Option<Conn>>,
    free: &mut Vec<usize>,
) -> bool {
    loop {
        let mut sock = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // A connection that failed before it was accepted (the next
            // one is tried), or no file descriptor left (later).
            Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => continue,
            Err(_) => return true,
        };
        if conns.len() - free.len() >= MAX_CONNECTIONS {
            continue; // dropped: closed
        }
        let _ = sock.set_nodelay(true);
        let id = free.pop().unwrap_or(conns.len());
        if poll
            .registry()
            .register(&mut sock, Token(id + 1), Interest::READABLE)
            .is_err()
        {
            if id < conns.len() {
                free.push(id);
            }
            continue;
        }
        let c = Conn {
            sock,
            s: Session::new(),
            writable_wanted: false,
        };
        match conns.get_mut(id) {
            Some(slot) => *slot = Some(c),
            None => conns.push(Some(c)),
        }
    }
}

impl Conn {
    /// One readiness event: send what waits, read what came, answer it.
    /// False: the connection ends.
    fn turn(&mut self, poll: &Poll, token: Token, chunk: &mut [u8]) -> bool {
        loop {
            // What came before (left while the output was full) first.
            let Some(all) = self.s.answer() else {
                return false;
            };
            if !self.flush() {
                return false;
            }
            if !all || self.s.closing {
                if self.s.out.len() < OUT_CAP && !self.s.closing {
                    continue; // the socket took it: answer the rest
                }
                break; // the writable edge brings the next turn
            }
            let room = IN_CAP.saturating_sub(self.s.input.len()).min(chunk.len());
            let Some(buf) = chunk.get_mut(..room) else {
                return false;
            };
            if buf.is_empty() {
                return false; // a PDU larger than it may be
            }
            match self.sock.read(buf) {
                Ok(0) => return false,
                Ok(n) => {
                    self.s
                        .input
                        .extend_from_slice(buf.get(..n).unwrap_or_default());
                    if n < room {
                        // A short read emptied the socket (its next bytes
                        // bring a new edge): answer, and wait unless the
                        // output stopped the answers.
                        match self.s.answer() {
                            None => return false,
                            Some(all) => {
                                if !self.flush() {
                                    return false;
                                }
                                if all || self.s.out.len() >= OUT_CAP {
                                    break;
                                }
                            }
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        if self.s.closing && self.s.out.is_empty() {
            return false;
        }
        let want = !self.s.out.is_empty();
        if want != self.writable_wanted {
            let interest = if want {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            if poll
                .registry()
                .reregister(&mut self.sock, token, interest)
                .is_err()
            {
                return false;
            }
            self.writable_wanted = want;
        }
        true
    }

    /// Writes what the socket takes now. False on a write error.
    fn flush(&mut self) -> bool {
        let mut sent = 0;
        while sent < self.s.out.len() {
            match self.sock.write(self.s.out.get(sent..).unwrap_or_default()) {
                Ok(0) => return false,
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        self.s.out.drain(..sent);
        true
    }
}
