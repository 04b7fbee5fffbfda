//! The asynchronous side of an open image ([`crate::aio::AsyncIo`]).

use std::ffi::{c_char, c_void};
use std::fmt;
use std::io;
use std::ptr;
use std::sync::Arc;

use rbd_sys as rbd;

use super::errors::{io_error, OpKind};
use super::image::Shared;

use crate::aio::{AioDone, AsyncIo};
use crate::buf::IoBuf;
use crate::common::{check_range, check_write, len_u64};
use crate::error::BackstoreError;
use crate::uring::Op;

/// The asynchronous side of an open image: each op one `rbd_aio_*`
/// request whose completion callback, on a librbd thread, hands the
/// result on. The request's state (buffer, callback, a reference on the
/// image) lives in one box from submission to callback.
pub(super) struct RbdAio {
    pub(super) shared: Arc<Shared>,
    pub(super) read_only: bool,
}

impl fmt::Debug for RbdAio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RbdAio")
            .field("image", &self.shared.spec)
            .finish()
    }
}

/// One request in flight.
pub(super) struct InFlight {
    /// Keeps the image open until the callback has run.
    pub(super) _shared: Arc<Shared>,
    pub(super) buf: IoBuf,
    pub(super) kind: OpKind,
    /// Bytes a read must return.
    pub(super) len: usize,
    pub(super) done: AioDone,
}

/// librbd's completion callback.
pub(super) unsafe extern "C" fn on_complete(c: rbd::rbd_completion_t, arg: *mut c_void) {
    if arg.is_null() {
        return;
    }
    // SAFETY: `arg` is the box `RbdAio::submit` leaked for this request,
    // reclaimed only here (the request was submitted, so submit no longer
    // touches it).
    let st = unsafe { Box::from_raw(arg.cast::<InFlight>()) };
    // SAFETY: `c` is this request's completion; released once, here.
    let ret = unsafe {
        let r = rbd::rbd_aio_get_return_value(c) as i64;
        rbd::rbd_aio_release(c);
        r
    };
    let st = *st;
    let result = if ret < 0 {
        Err(io_error(st.kind, ret))
    } else if matches!(st.kind, OpKind::Read) && ret != st.len as i64 {
        Err(BackstoreError::Read(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("rbd read of {} bytes returned {ret}", st.len),
        )))
    } else {
        Ok(())
    };
    // Unwinding must not cross into librbd.
    let call = std::panic::AssertUnwindSafe(move || (st.done)(result, st.buf));
    if std::panic::catch_unwind(call).is_err() {
        tracing::error!("rbd completion callback panicked");
    }
}

impl AsyncIo for RbdAio {
    fn submit(&self, op: Op, buf: IoBuf, done: AioDone) {
        let geometry = self.shared.geometry(self.read_only);
        let (kind, offset, len) = match op {
            Op::Read { offset, len } => (OpKind::Read, offset, len),
            Op::Write { offset, len, .. } => (OpKind::Write, offset, len),
            Op::Fsync => (OpKind::Flush, 0, 0),
        };
        let checked = match kind {
            OpKind::Read => check_range(&geometry, offset, len_u64(len)),
            OpKind::Write => check_write(&geometry, offset, len_u64(len)),
            OpKind::Flush => Ok(()),
        }
        .and_then(|()| {
            if buf.len() < len {
                Err(crate::common::invalid_input("buffer shorter than the op"))
            } else {
                Ok(())
            }
        });
        if let Err(e) = checked {
            done(Err(e), buf);
            return;
        }
        if matches!(kind, OpKind::Flush) && !self.shared.flush_has_work() {
            done(Ok(()), buf);
            return;
        }
        let raw = Box::into_raw(Box::new(InFlight {
            _shared: Arc::clone(&self.shared),
            buf,
            kind,
            len,
            done,
        }));
        // The buffer's address, taken before the request can complete
        // (the box does not move; its heap memory stays put).
        // SAFETY: `raw` is the live box made above, not yet shared.
        let data = unsafe {
            match kind {
                OpKind::Read => (*raw).buf.as_mut_ptr(),
                // Only read by librbd: no mutable access (a lent buffer
                // would be copied for it).
                _ => (*raw).buf.as_ptr().cast_mut(),
            }
        };
        let mut c: rbd::rbd_completion_t = ptr::null_mut();
        // SAFETY: the completion carries `raw` to `on_complete`.
        let r = unsafe {
            rbd::rbd_aio_create_completion(raw.cast::<c_void>(), Some(on_complete), &mut c)
        };
        if r < 0 || c.is_null() {
            // SAFETY: nothing else has `raw`: reclaimed once, here.
            let st = unsafe { Box::from_raw(raw) };
            (st.done)(Err(io_error(kind, i64::from(r.min(-1)))), st.buf);
            return;
        }
        let image = self.shared.handles.image;
        // SAFETY: a live image and completion; `data` points to at least
        // `len` bytes owned by the box, which only `on_complete` frees,
        // after librbd is done with them.
        let r = unsafe {
            match kind {
                OpKind::Read => rbd::rbd_aio_read2(image, offset, len, data.cast::<c_char>(), c, 0),
                OpKind::Write => {
                    rbd::rbd_aio_write2(image, offset, len, data.cast::<c_char>(), c, 0)
                }
                OpKind::Flush => rbd::rbd_aio_flush(image, c),
            }
        };
        if r < 0 {
            // Not submitted: the callback will never run.
            // SAFETY: `c` unused by librbd, released once; `raw` reclaimed
            // once, here.
            let st = unsafe {
                rbd::rbd_aio_release(c);
                Box::from_raw(raw)
            };
            (st.done)(Err(io_error(kind, i64::from(r))), st.buf);
        }
    }
}
