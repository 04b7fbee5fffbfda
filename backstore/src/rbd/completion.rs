//! Waiting for one librbd request: a completion released on drop.

use std::io;
use std::ptr;

use rbd_sys as rbd;

use super::errors::{io_error, os_error, OpKind};
use crate::error::Result;

/// One librbd asynchronous request, released on drop.
pub(super) struct Aio(pub(super) rbd::rbd_completion_t);

impl Aio {
    pub(super) fn new() -> io::Result<Self> {
        let mut c: rbd::rbd_completion_t = ptr::null_mut();
        // SAFETY: a completion without callback; `c` receives the handle.
        let r = unsafe { rbd::rbd_aio_create_completion(ptr::null_mut(), None, &mut c) };
        if r < 0 || c.is_null() {
            return Err(os_error(i64::from(r.min(-1))));
        }
        Ok(Self(c))
    }

    /// Waits for the request the completion was handed to, and returns
    /// librbd's result (bytes transferred, 0, or a negative errno).
    pub(super) fn wait(self) -> i64 {
        // SAFETY: the completion is live (released only by drop) and was
        // passed to exactly one successful rbd_aio_* call.
        unsafe {
            rbd::rbd_aio_wait_for_complete(self.0);
            rbd::rbd_aio_get_return_value(self.0) as i64
        }
    }
}

impl Drop for Aio {
    fn drop(&mut self) {
        // SAFETY: created by rbd_aio_create_completion, released once;
        // `wait` returned before any drop of a submitted request.
        unsafe { rbd::rbd_aio_release(self.0) }
    }
}

/// Runs one asynchronous request and waits for it: `submit` gets the
/// completion and returns the submission's result.
pub(super) fn run(kind: OpKind, submit: impl FnOnce(rbd::rbd_completion_t) -> i64) -> Result<i64> {
    let c = Aio::new().map_err(|e| io_error(kind, -i64::from(e.raw_os_error().unwrap_or(5))))?;
    let r = submit(c.0);
    if r < 0 {
        // Not submitted: the completion is released unused.
        return Err(io_error(kind, r));
    }
    let ret = c.wait();
    if ret < 0 {
        return Err(io_error(kind, ret));
    }
    Ok(ret)
}
