//! Errors and the small libc helpers the owners share.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// A failed library call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VerbsError {
    /// `op` failed with an OS error.
    #[error("{op}: {source}")]
    Os {
        /// The call that failed.
        op: &'static str,
        /// Its error.
        #[source]
        source: io::Error,
    },
}

pub(super) type Result<T> = std::result::Result<T, VerbsError>;

pub(super) fn os_err(op: &'static str) -> VerbsError {
    VerbsError::Os {
        op,
        source: io::Error::last_os_error(),
    }
}

/// `rc` of a call that reports failure as non-zero with errno set.
pub(super) fn check(rc: i32, op: &'static str) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(os_err(op))
    }
}

/// `rc` of a call that returns a positive errno itself (the verbs post and
/// notify calls).
pub(super) fn check_errno(rc: i32, op: &'static str) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(VerbsError::Os {
            op,
            source: io::Error::from_raw_os_error(rc),
        })
    }
}

pub(super) fn set_nonblocking(fd: RawFd, op: &'static str) -> Result<()> {
    // SAFETY: fcntl on a descriptor the caller owns; F_GETFL/F_SETFL only
    // read and set its status flags.
    let rc = unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 {
            flags
        } else {
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK)
        }
    };
    if rc < 0 {
        Err(os_err(op))
    } else {
        Ok(())
    }
}

pub(super) fn would_block() -> bool {
    matches!(
        io::Error::last_os_error().raw_os_error(),
        Some(libc::EAGAIN) | Some(libc::EINTR)
    )
}

pub(super) fn invalid(what: &'static str) -> VerbsError {
    VerbsError::Os {
        op: what,
        source: io::Error::from_raw_os_error(libc::EINVAL),
    }
}

/// Watch descriptor `fd` for readability in tokio's reactor, through a
/// duplicate the watcher owns: the original's owner may close it at any
/// time without leaving the reactor with a dangling descriptor. Must be
/// called inside a tokio runtime.
pub fn watch(fd: RawFd) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor the caller's object keeps
    // open for the duration of this call; the result is checked.
    let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if dup < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `dup` is a fresh descriptor nobody else owns.
    let owned = unsafe { OwnedFd::from_raw_fd(dup) };
    // SAFETY: the AsyncFd owns `owned`, so the descriptor stays open and
    // the same for the AsyncFd's whole life.
    unsafe { AsyncFd::register_with_interest(owned, Interest::READABLE) }
        .map_err(|e| e.into_parts().1)
}
