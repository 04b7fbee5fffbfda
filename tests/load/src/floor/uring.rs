//! The floor over one io_uring: each connection keeps a receive in flight
//! and, while it has answers to send, one send; an accept stays armed on
//! the listener. A wake-up is one `io_uring_enter` that submits what the
//! last completions queued (answers, the next receives) and waits; the
//! received bytes are copied in that same call (with `DEFER_TASKRUN`,
//! where the kernel has it).
//!
//! A send to a socket with room completes as it is submitted, so a call
//! that waited for one completion would return at once with it, and every
//! answer would cost a second call. After queuing a short send
//! ([`SURE_SEND`]) the loop waits for two completions instead, bounded by
//! [`SEND_WAIT`]: a send that did not complete as submitted (a full socket)
//! delays the loop by that much at most.

use std::io;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd};
use std::time::Duration;

use io_uring::{opcode, squeue, types, IoUring};
use nix::errno::Errno;

use super::session::{Session, IN_CAP, OUT_CAP};
use super::{ACCEPT_RETRY, MAX_CONNECTIONS};

/// Submission queue entries; a full queue is submitted and refilled.
const SQ_ENTRIES: u32 = 1024;
/// Completion queue entries: room for every operation that can be in
/// flight (a receive and a send per connection, the accept and its retry
/// timer), so none waits in the kernel's overflow list.
const CQ_ENTRIES: u32 = 4 * MAX_CONNECTIONS as u32;
/// The longest the loop waits for a second completion after queuing
/// sends (see the module's documentation).
const SEND_WAIT: Duration = Duration::from_millis(10);
/// A send of at most this many bytes, queued with no answer waiting behind
/// it, is taken to complete as it is submitted (the loop then waits for
/// two completions); a longer one, or the rest of a partial one, is not.
const SURE_SEND: usize = 16 * 1024;
/// A connection's receive buffer.
const RECV_BUF: usize = 16 * 1024;
/// `user_data` of the accept and of its retry timer; a connection's
/// operations carry its slot shifted left by 2 and their kind.
const ACCEPT: u64 = u64::MAX;
const ACCEPT_TIMER: u64 = u64::MAX - 1;
const RECV: u64 = 1;
const SEND: u64 = 2;

/// The floor's ring, set up before it announces its address.
pub(super) struct Ring(IoUring);

impl Ring {
    /// One ring, completions run in the waiting call (`SINGLE_ISSUER` and
    /// `DEFER_TASKRUN`) where the kernel has them, plain otherwise.
    pub(super) fn new() -> io::Result<Ring> {
        let deferred = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_cqsize(CQ_ENTRIES)
            .build(SQ_ENTRIES);
        let ring = match deferred {
            Ok(r) => r,
            Err(_) => IoUring::builder()
                .setup_cqsize(CQ_ENTRIES)
                .build(SQ_ENTRIES)?,
        };
        Ok(Ring(ring))
    }

    /// Queues `sqe`; a full submission queue is submitted first.
    fn push(&mut self, sqe: &squeue::Entry) -> io::Result<()> {
        for _ in 0..2 {
            // SAFETY: every buffer an entry points at (a connection's
            // receive buffer or send buffer, the timer's timespec) stays
            // allocated and untouched until that entry's completion is
            // reaped: a connection's slot is freed only when neither of its
            // operations is in flight, and the timespec lives for `serve`.
            if unsafe { self.0.submission().push(sqe) }.is_ok() {
                return Ok(());
            }
            self.0.submit()?;
        }
        Err(io::Error::other("io_uring submission queue stays full"))
    }
}

/// One connection: its socket, protocol state and buffers in flight.
struct Conn {
    sock: TcpStream,
    s: Session,
    /// Where a receive lands; its bytes join `s.input` on completion.
    rbuf: Box<[u8]>,
    /// Answers handed to the send in flight, from `sent` on.
    sending: Vec<u8>,
    sent: usize,
    recv_busy: bool,
    send_busy: bool,
    /// Shut down: freed once no operation is in flight.
    dead: bool,
}

impl Conn {
    fn new(sock: TcpStream) -> Conn {
        let _ = sock.set_nodelay(true);
        Conn {
            sock,
            s: Session::new(),
            rbuf: vec![0u8; RECV_BUF].into_boxed_slice(),
            sending: Vec::new(),
            sent: 0,
            recv_busy: false,
            send_busy: false,
            dead: false,
        }
    }

    fn kill(&mut self) {
        if !self.dead {
            self.dead = true;
            // Completes the receive in flight (end of stream) and fails a
            // send stuck on a full socket.
            let _ = self.sock.shutdown(Shutdown::Both);
        }
    }

    /// Answers what waits while the output has room, starts a send of the
    /// answers when none is in flight and arms the next receive when the
    /// input was all answered. True when it queued a send.
    fn drive(&mut self, id: usize, ring: &mut Ring) -> io::Result<bool> {
        if self.dead {
            return Ok(false);
        }
        let Some(all) = self.s.answer() else {
            self.kill();
            return Ok(false);
        };
        let mut queued = false;
        let fd = types::Fd(self.sock.as_raw_fd());
        if !self.send_busy && !self.s.out.is_empty() {
            std::mem::swap(&mut self.sending, &mut self.s.out);
            self.s.out.clear();
            self.sent = 0;
            let sqe = opcode::Send::new(fd, self.sending.as_ptr(), len32(self.sending.len()))
                .build()
                .user_data(tag(id, SEND));
            ring.push(&sqe)?;
            self.send_busy = true;
            // Short enough to complete as it is submitted, most likely.
            queued = self.sending.len() <= SURE_SEND;
        }
        if self.s.closing {
            if !self.send_busy {
                self.kill(); // the logout response is out
            }
        } else if all && !self.recv_busy && self.s.out.len() < OUT_CAP {
            let room = IN_CAP
                .saturating_sub(self.s.input.len())
                .min(self.rbuf.len());
            if room == 0 {
                self.kill(); // a PDU larger than it may be
                return Ok(queued);
            }
            let sqe = opcode::Recv::new(fd, self.rbuf.as_mut_ptr(), len32(room))
                .build()
                .user_data(tag(id, RECV));
            ring.push(&sqe)?;
            self.recv_busy = true;
        }
        Ok(queued)
    }

    /// A receive completed with `res`.
    fn received(&mut self, res: i32) {
        self.recv_busy = false;
        match usize::try_from(res) {
            Ok(n) if n > 0 => self
                .s
                .input
                .extend_from_slice(self.rbuf.get(..n).unwrap_or_default()),
            _ => self.kill(), // end of stream or an error
        }
    }

    /// A send completed with `res`: what is left of it goes again.
    fn sent(&mut self, id: usize, res: i32, ring: &mut Ring) -> io::Result<()> {
        self.send_busy = false;
        let n = match usize::try_from(res) {
            Ok(n) if n > 0 => n,
            _ => {
                self.kill();
                return Ok(());
            }
        };
        self.sent = self.sent.saturating_add(n).min(self.sending.len());
        if self.sent < self.sending.len() && !self.dead {
            let rest = self.sending.get(self.sent..).unwrap_or_default();
            let sqe = opcode::Send::new(
                types::Fd(self.sock.as_raw_fd()),
                rest.as_ptr(),
                len32(rest.len()),
            )
            .build()
            .user_data(tag(id, SEND));
            ring.push(&sqe)?;
            self.send_busy = true;
        }
        Ok(())
    }
}

fn tag(id: usize, kind: u64) -> u64 {
    ((id as u64) << 2) | kind
}

fn len32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Serves on `listener` until an I/O error of the ring.
pub(super) fn serve(mut ring: Ring, listener: TcpListener) -> io::Result<()> {
    let lfd = types::Fd(listener.as_raw_fd());
    let accept = opcode::Accept::new(lfd, std::ptr::null_mut(), std::ptr::null_mut())
        .build()
        .user_data(ACCEPT);
    let retry = Box::new(types::Timespec::from(ACCEPT_RETRY));
    let timer = opcode::Timeout::new(&*retry)
        .build()
        .user_data(ACCEPT_TIMER);
    ring.push(&accept)?;
    let mut conns: Vec<Option<Conn>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut done: Vec<(u64, i32)> = Vec::with_capacity(CQ_ENTRIES as usize);
    let send_wait = types::Timespec::from(SEND_WAIT);
    let bounded = types::SubmitArgs::new().timespec(&send_wait);
    let mut sends = false;
    loop {
        let waited = if sends {
            ring.0.submitter().submit_with_args(2, &bounded)
        } else {
            ring.0.submit_and_wait(1)
        };
        sends = false;
        match waited {
            Ok(_) => {}
            // A signal, completions waiting in the overflow list, or the
            // bound of a wait for two: reap what there is.
            Err(e) if matches!(e.raw_os_error(), Some(n) if n == EINTR || n == EBUSY || n == ETIME) =>
                {}
            Err(e) => return Err(e),
        }
        done.clear();
        done.extend(ring.0.completion().map(|c| (c.user_data(), c.result())));
        for &(ud, res) in &done {
            if ud == ACCEPT {
                if res >= 0 {
                    // SAFETY: the accept's result is a new descriptor the
                    // kernel gave this process alone; the stream owns it.
                    let sock = unsafe { TcpStream::from_raw_fd(res) };
                    if conns.len() - free.len() < MAX_CONNECTIONS {
                        let id = free.pop().unwrap_or(conns.len());
                        if id == conns.len() {
                            conns.push(None);
                        }
                        if let Some(slot) = conns.get_mut(id) {
                            sends |= slot.insert(Conn::new(sock)).drive(id, &mut ring)?;
                        }
                    } // else dropped: closed
                    ring.push(&accept)?;
                } else if matches!(-res, EINTR | ECONNABORTED | EAGAIN) {
                    ring.push(&accept)?;
                } else {
                    // No descriptor left, say: the queued connections are
                    // tried again after a pause.
                    ring.push(&timer)?;
                }
                continue;
            }
            if ud == ACCEPT_TIMER {
                ring.push(&accept)?;
                continue;
            }
            let id = (ud >> 2) as usize;
            let Some(slot) = conns.get_mut(id) else {
                continue;
            };
            let Some(c) = slot.as_mut() else {
                continue;
            };
            match ud & 3 {
                RECV => c.received(res),
                SEND => c.sent(id, res, &mut ring)?,
                _ => continue,
            }
            sends |= c.drive(id, &mut ring)?;
            if c.dead && !c.recv_busy && !c.send_busy {
                *slot = None; // closes the socket
                free.push(id);
            }
        }
    }
}

const EINTR: i32 = Errno::EINTR as i32;
const EAGAIN: i32 = Errno::EAGAIN as i32;
const EBUSY: i32 = Errno::EBUSY as i32;
const ETIME: i32 = Errno::ETIME as i32;
const ECONNABORTED: i32 = Errno::ECONNABORTED as i32;
