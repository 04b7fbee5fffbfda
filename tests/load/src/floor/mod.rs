//! `rustgt bench floor`: the least an iSCSI target can do, as a benchmark's
//! reference. One thread, every connection on it; each PDU is decoded with
//! rustgt's own codec and answered at once, with no SCSI semantics behind
//! it: a read gets zeros in Data-In PDUs of at most the initiator's segment
//! length (the last with status), READ CAPACITY(16) a 1 GiB LUN of
//! 512-byte blocks, every other command GOOD. What it costs per I/O,
//! loopback TCP, a wake-up and the least parsing, any target on the same
//! machine pays too, so a paced row's CPU can be read against it
//! (`tests/bench/vs-tgt --floor`).
//!
//! Two drivers move its bytes: readiness (`epoll` through mio: a wake-up,
//! a read and a write per I/O, as rustgt and tgt do; [`epoll`]) and, with
//! `--io-uring`, one io_uring (a receive and a send per connection in
//! flight, one `io_uring_enter` per wake-up that submits the sends and
//! waits; [`uring`]). The protocol is the same ([`session`]).
//!
//! It answers any login without authentication, so it listens on loopback
//! addresses only. Bounded: at most [`MAX_CONNECTIONS`] connections, each
//! with at most [`IN_CAP`] bytes of input and [`OUT_CAP`] of output
//! waiting; a PDU it cannot decode, or a request it does not serve (text,
//! task management, SNACK, Data-Out, a write larger than its immediate
//! data), closes that connection or gets CHECK CONDITION, never a panic.

mod epoll;
mod session;
mod uring;

use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use clap::Args;

pub use session::{IN_CAP, MAX_READ, OUT_CAP};

/// Connections served at once; more are closed as they come.
pub const MAX_CONNECTIONS: usize = 4096;
/// How soon an accept that failed (no file descriptor left) is tried again.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// `rustgt bench floor`: options.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct FloorArgs {
    /// The loopback address and port to listen on.
    #[arg(long, default_value = "127.0.0.1:3299")]
    pub listen: SocketAddr,
    /// Move the bytes through one io_uring (receive and send operations,
    /// one system call per wake-up) instead of epoll readiness with a
    /// read and a write per I/O.
    #[arg(long)]
    pub io_uring: bool,
}

/// Why the floor responder could not serve.
#[derive(Debug, thiserror::Error)]
pub enum FloorError {
    /// The address is not a loopback address.
    #[error("--listen {0}: the floor answers any login without authentication; it listens on loopback addresses only")]
    NotLoopback(SocketAddr),
    /// Binding, polling or setting up the ring failed.
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// Serves until an I/O error of the listener, the poll or the ring; prints
/// the address it listens on first.
pub fn serve(a: &FloorArgs) -> Result<(), FloorError> {
    if !a.listen.ip().is_loopback() {
        return Err(FloorError::NotLoopback(a.listen));
    }
    let listener = TcpListener::bind(a.listen)?;
    // The ring is set up before the address is announced, so a kernel
    // without io_uring fails the command instead of a client's connection.
    let ring = if a.io_uring {
        Some(uring::Ring::new()?)
    } else {
        None
    };
    println!(
        "rustgt bench floor: listening on {}",
        listener.local_addr()?
    );
    let _ = io::stdout().flush();
    match ring {
        Some(ring) => Ok(uring::serve(ring, listener)?),
        None => Ok(epoll::serve(listener)?),
    }
}
