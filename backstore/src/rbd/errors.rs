//! The one mapping from librados and librbd return codes to backstore
//! errors.

use std::ffi::{c_int, CString};
use std::io;

use crate::error::{BackstoreError, Result};

pub(super) fn cstr(what: &str, s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| BackstoreError::Config(format!("rbd {what} {s:?} contains a NUL")))
}

pub(super) fn os_error(ret: i64) -> io::Error {
    let errno = i32::try_from(ret.unsigned_abs()).unwrap_or(libc::EIO);
    io::Error::from_raw_os_error(errno)
}

/// A librados setup call that failed: a configuration error naming it.
pub(super) fn setup_error(what: &str, spec: &str, ret: c_int) -> BackstoreError {
    BackstoreError::Config(format!(
        "rbd image {spec}: {what} failed: {}",
        os_error(i64::from(ret))
    ))
}

/// Which operation failed, for [`io_error`].
#[derive(Clone, Copy)]
pub(super) enum OpKind {
    Read,
    Write,
    Flush,
}

/// The one mapping from librbd's return codes to backstore errors.
pub(super) fn io_error(kind: OpKind, ret: i64) -> BackstoreError {
    let errno = i32::try_from(ret.unsigned_abs()).unwrap_or(libc::EIO);
    match errno {
        // Another client holds the exclusive lock, or this one was
        // fenced: its lock broken, its address blocklisted (Ceph's
        // EBLOCKLISTED is ESHUTDOWN on Linux).
        libc::EROFS | libc::ESHUTDOWN => {
            BackstoreError::Fenced(io::Error::from_raw_os_error(errno))
        }
        // A pool quota is out of space too.
        libc::EDQUOT => BackstoreError::Write(io::Error::from_raw_os_error(libc::ENOSPC)),
        libc::EINVAL => BackstoreError::Io(io::Error::from_raw_os_error(errno)),
        _ => {
            let e = io::Error::from_raw_os_error(errno);
            match kind {
                OpKind::Read => BackstoreError::Read(e),
                OpKind::Write => BackstoreError::Write(e),
                OpKind::Flush => BackstoreError::Flush(e),
            }
        }
    }
}
