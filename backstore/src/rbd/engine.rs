//! The librbd engine itself (cargo feature `rbd`); see the parent module.

use std::ffi::{c_char, c_int, c_void, CString};
use std::fmt;
use std::io;
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use rados_sys as rados;
use rbd_sys as rbd;

use super::gateway::Gateway;
use super::options::RbdOptions;
use crate::aio::{AioDone, AsyncIo, AsyncStore};
use crate::buf::IoBuf;
use crate::common::{
    check_pattern, check_range, check_write, is_zero, len_u64, push_extent, validate_block_size,
};
use crate::uring::Op;
use crate::{
    error::BackstoreError, error::Result, geometry::Extent, geometry::Geometry, store::Backstore,
};

/// The librados and librbd handles of one open image, closed in reverse
/// order on drop.
struct Handles {
    cluster: rados::rados_t,
    ioctx: rados::rados_ioctx_t,
    image: rbd::rbd_image_t,
}

// SAFETY: librados cluster and pool handles and librbd image handles are
// documented thread-safe: any thread may issue requests on them
// concurrently. Closing happens only in `Drop`, when no other reference is
// left.
unsafe impl Send for Handles {}
// SAFETY: as for `Send`; every method used through `&Handles` is one of
// librbd's thread-safe request or query calls.
unsafe impl Sync for Handles {}

impl Drop for Handles {
    fn drop(&mut self) {
        // SAFETY: each handle was opened once by `connect`/`open` and is
        // closed once here, image before pool context before cluster, as
        // librbd requires; a null handle was never opened.
        unsafe {
            if !self.image.is_null() {
                rbd::rbd_close(self.image);
            }
            if !self.ioctx.is_null() {
                rados::rados_ioctx_destroy(self.ioctx);
            }
            if !self.cluster.is_null() {
                rados::rados_shutdown(self.cluster);
            }
        }
    }
}

/// State shared with librbd's update-watch callback and the resize thread.
struct Watch {
    /// Set by the callback, taken by the resize thread.
    pending: Mutex<WatchState>,
    wake: Condvar,
}

#[derive(Default)]
struct WatchState {
    updated: bool,
    stop: bool,
}

/// What the resize thread needs.
struct Shared {
    handles: Handles,
    size: AtomicU64,
    block_size: u32,
    watch: Watch,
    notify: Mutex<Option<CapacityHook>>,
    spec: String,
}

type CapacityHook = Box<dyn Fn(u64) + Send + Sync>;

impl Shared {
    /// The image's geometry at its current size.
    fn geometry(&self, read_only: bool) -> Geometry {
        Geometry {
            block_size: self.block_size,
            num_blocks: self.size.load(Ordering::Acquire) / u64::from(self.block_size),
            read_only,
        }
    }
}

/// A LUN backed by a Ceph RBD image.
pub struct RbdBackstore {
    shared: Arc<Shared>,
    /// The asynchronous interface handed to the SCSI core.
    aio: Arc<RbdAio>,
    read_only: bool,
    /// librbd's handle of the update watch, unregistered on drop.
    watch_handle: Option<u64>,
    resizer: Option<JoinHandle<()>>,
    /// Gateway mode ([`RbdOptions::gateway`]).
    gateway: Option<Arc<Gateway>>,
}

impl fmt::Debug for RbdBackstore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RbdBackstore")
            .field("image", &self.shared.spec)
            .field("size", &self.shared.size.load(Ordering::Relaxed))
            .field("block_size", &self.shared.block_size)
            .field("read_only", &self.read_only)
            .finish()
    }
}

fn cstr(what: &str, s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| BackstoreError::Config(format!("rbd {what} {s:?} contains a NUL")))
}

fn os_error(ret: i64) -> io::Error {
    let errno = i32::try_from(ret.unsigned_abs()).unwrap_or(libc::EIO);
    io::Error::from_raw_os_error(errno)
}

/// A librados setup call that failed: a configuration error naming it.
fn setup_error(what: &str, spec: &str, ret: c_int) -> BackstoreError {
    BackstoreError::Config(format!(
        "rbd image {spec}: {what} failed: {}",
        os_error(i64::from(ret))
    ))
}

/// Which operation failed, for [`io_error`].
#[derive(Clone, Copy)]
enum OpKind {
    Read,
    Write,
    Flush,
}

/// The one mapping from librbd's return codes to backstore errors.
fn io_error(kind: OpKind, ret: i64) -> BackstoreError {
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

/// One librbd asynchronous request, released on drop.
struct Aio(rbd::rbd_completion_t);

impl Aio {
    fn new() -> io::Result<Self> {
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
    fn wait(self) -> i64 {
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
fn run(kind: OpKind, submit: impl FnOnce(rbd::rbd_completion_t) -> i64) -> Result<i64> {
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

/// librbd's update-watch callback: runs on a librbd thread, only flags
/// the resize thread (no librbd call from inside the callback).
unsafe extern "C" fn on_update(arg: *mut c_void) {
    if arg.is_null() {
        return;
    }
    // SAFETY: `arg` is the `Shared` the watch was registered with; the
    // watch is unregistered (rbd_update_unwatch waits for callbacks in
    // progress) before that `Arc` can be dropped.
    let shared = unsafe { &*(arg as *const Shared) };
    if let Ok(mut st) = shared.watch.pending.lock() {
        st.updated = true;
        shared.watch.wake.notify_one();
    }
}

impl RbdBackstore {
    /// Connects to the cluster, opens the image and starts watching it for
    /// resizes. Every failure is a [`BackstoreError::Config`] that names
    /// the image and the step.
    pub fn open(opts: &RbdOptions) -> Result<Self> {
        validate_block_size(opts.block_size)?;
        let spec = opts.image_spec();
        let mut handles = Handles {
            cluster: ptr::null_mut(),
            ioctx: ptr::null_mut(),
            image: ptr::null_mut(),
        };
        let id = cstr("client_id", &opts.client_id)?;
        // SAFETY: `handles.cluster` receives a new handle; `id` outlives
        // the call.
        let r = unsafe { rados::rados_create(&mut handles.cluster, id.as_ptr()) };
        if r < 0 {
            return Err(setup_error("rados_create", &spec, r));
        }
        // Defaults that ceph.conf and CEPH_ARGS may still override: one
        // librados completion thread. Completions only hand the result on
        // (no waiting in them), and on 2 cores one thread measured about
        // 1.4x the 4 KiB random reads at QD 32 of the default two, at
        // three quarters of the CPU per read.
        conf_set(&handles, &spec, "librados_thread_count", "1")?;
        let conf = match &opts.ceph_conf {
            Some(p) => Some(cstr("ceph_conf", &p.to_string_lossy())?),
            None => None,
        };
        // SAFETY: a live cluster handle; a null path means the default
        // search, a non-null one points into `conf`.
        let r = unsafe {
            rados::rados_conf_read_file(
                handles.cluster,
                conf.as_ref().map_or(ptr::null(), |c| c.as_ptr()),
            )
        };
        if r < 0 {
            let what = match &opts.ceph_conf {
                Some(p) => format!("reading {}", p.display()),
                None => "reading the default ceph.conf".into(),
            };
            return Err(setup_error(&what, &spec, r));
        }
        // CEPH_ARGS, as the ceph tools honour it.
        // SAFETY: a live cluster handle; null names CEPH_ARGS.
        unsafe { rados::rados_conf_parse_env(handles.cluster, ptr::null()) };
        let secs = opts.op_timeout.as_secs().max(1).to_string();
        let mut settings = vec![
            ("rbd_cache", "false".to_owned()),
            ("client_mount_timeout", secs.clone()),
            ("rados_osd_op_timeout", secs.clone()),
            ("rados_mon_op_timeout", secs),
        ];
        if let Some(k) = &opts.keyring {
            settings.push(("keyring", k.to_string_lossy().into_owned()));
        }
        for (key, value) in &settings {
            conf_set(&handles, &spec, key, value)?;
        }
        // SAFETY: a configured cluster handle; bounded by
        // client_mount_timeout.
        let r = unsafe { rados::rados_connect(handles.cluster) };
        if r < 0 {
            return Err(setup_error("connecting to the cluster", &spec, r));
        }
        let pool = cstr("pool", &opts.pool)?;
        // SAFETY: a connected cluster; `handles.ioctx` receives the pool
        // context.
        let r = unsafe {
            rados::rados_ioctx_create(handles.cluster, pool.as_ptr(), &mut handles.ioctx)
        };
        if r < 0 {
            return Err(setup_error(
                &format!("opening pool {:?}", opts.pool),
                &spec,
                r,
            ));
        }
        if let Some(ns) = &opts.namespace {
            let ns = cstr("namespace", ns)?;
            // SAFETY: a live pool context; librados copies the name.
            unsafe { rados::rados_ioctx_set_namespace(handles.ioctx, ns.as_ptr()) };
        }
        let image = cstr("image", &opts.image)?;
        // SAFETY: a live pool context (librbd's rados_ioctx_t is the same
        // opaque pointer type as librados'); `handles.image` receives the
        // image; no snapshot.
        let r = unsafe {
            let open = if opts.read_only {
                rbd::rbd_open_read_only
            } else {
                rbd::rbd_open
            };
            open(
                handles.ioctx,
                image.as_ptr(),
                &mut handles.image,
                ptr::null(),
            )
        };
        if r < 0 {
            return Err(setup_error("opening the image", &spec, r));
        }
        let size = image_size(&handles).map_err(|e| {
            BackstoreError::Config(format!("rbd image {spec}: reading its size failed: {e}"))
        })?;
        if size < u64::from(opts.block_size) {
            return Err(BackstoreError::Config(format!(
                "rbd image {spec}: {size} bytes is smaller than one {}-byte block",
                opts.block_size
            )));
        }
        let shared = Arc::new(Shared {
            handles,
            size: AtomicU64::new(size),
            block_size: opts.block_size,
            watch: Watch {
                pending: Mutex::new(WatchState::default()),
                wake: Condvar::new(),
            },
            notify: Mutex::new(None),
            spec: spec.clone(),
        });
        let mut store = Self {
            shared: Arc::clone(&shared),
            aio: Arc::new(RbdAio {
                shared: Arc::clone(&shared),
                read_only: opts.read_only,
            }),
            read_only: opts.read_only,
            watch_handle: None,
            resizer: None,
            gateway: None,
        };
        if let Some(group) = opts.gateway {
            let ns = match &opts.namespace {
                Some(ns) => Some(cstr("namespace", ns)?),
                None => None,
            };
            let gw = Gateway::open(
                shared.handles.cluster,
                &pool,
                ns.as_deref(),
                shared.handles.image,
                group,
                opts.op_timeout,
                &spec,
                Arc::clone(&shared) as Arc<dyn Send + Sync>,
            )
            .map_err(|e| BackstoreError::Config(format!("rbd image {spec}: gateway mode: {e}")))?;
            store.gateway = Some(Arc::new(gw));
        }
        let mut handle = 0u64;
        // SAFETY: `shared` outlives the watch: it is unregistered in
        // `Drop` before this store's reference goes, and the resize
        // thread holds another.
        let r = unsafe {
            rbd::rbd_update_watch(
                shared.handles.image,
                &mut handle,
                Some(on_update),
                Arc::as_ptr(&shared) as *mut c_void,
            )
        };
        if r < 0 {
            tracing::warn!(image = %spec, error = %os_error(i64::from(r)),
                "rbd: cannot watch the image; a resize made elsewhere is seen only at restart");
        } else {
            store.watch_handle = Some(handle);
            let thread_shared = Arc::clone(&shared);
            store.resizer = std::thread::Builder::new()
                .name("rbd-watch".into())
                .spawn(move || watch_resizes(&thread_shared))
                .map_err(BackstoreError::Io)
                .map(Some)?;
        }
        tracing::info!(image = %spec, size, block_size = opts.block_size, "rbd image open");
        Ok(store)
    }

    fn image(&self) -> rbd::rbd_image_t {
        self.shared.handles.image
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> Result<()> {
        let len = usize::try_from(len).map_err(|_| BackstoreError::OutOfRange { offset, len })?;
        run(OpKind::Write, |c| {
            // SAFETY: a live image and completion; no buffer.
            i64::from(unsafe { rbd::rbd_aio_write_zeroes(self.image(), offset, len, c, 0, 0) })
        })
        .map(drop)
    }
}

/// Sets one librados option on a cluster handle not yet connected.
fn conf_set(h: &Handles, spec: &str, key: &str, value: &str) -> Result<()> {
    let k = cstr("option", key)?;
    let v = cstr(key, value)?;
    // SAFETY: a live cluster handle, NUL-terminated strings that outlive
    // the call.
    let r = unsafe { rados::rados_conf_set(h.cluster, k.as_ptr(), v.as_ptr()) };
    if r < 0 {
        return Err(setup_error(&format!("setting {key}"), spec, r));
    }
    Ok(())
}

fn image_size(h: &Handles) -> io::Result<u64> {
    let mut size = 0u64;
    // SAFETY: a live image; `size` receives the value.
    let r = unsafe { rbd::rbd_get_size(h.image, &mut size) };
    if r < 0 {
        return Err(os_error(i64::from(r)));
    }
    Ok(size)
}

/// The resize thread: after each update notification reads the image's
/// size and, when it changed, stores it and calls the capacity hook.
fn watch_resizes(shared: &Shared) {
    loop {
        {
            let Ok(mut st) = shared.watch.pending.lock() else {
                return;
            };
            while !st.updated && !st.stop {
                st = match shared.watch.wake.wait(st) {
                    Ok(s) => s,
                    Err(_) => return,
                };
            }
            if st.stop {
                return;
            }
            st.updated = false;
        }
        match image_size(&shared.handles) {
            Ok(size) => {
                let old = shared.size.swap(size, Ordering::AcqRel);
                if old != size {
                    tracing::info!(image = %shared.spec, old, new = size, "rbd image resized");
                    let blocks = size / u64::from(shared.block_size);
                    if let Ok(hook) = shared.notify.lock() {
                        if let Some(hook) = hook.as_ref() {
                            hook(blocks);
                        }
                    }
                }
            }
            Err(e) => {
                tracing::warn!(image = %shared.spec, error = %e, "rbd: reading the new size failed");
            }
        }
    }
}

impl Drop for RbdBackstore {
    fn drop(&mut self) {
        if let Some(h) = self.watch_handle.take() {
            // SAFETY: the handle came from rbd_update_watch on this image;
            // unwatch returns after any callback in progress.
            unsafe { rbd::rbd_update_unwatch(self.image(), h) };
        }
        if let Ok(mut st) = self.shared.watch.pending.lock() {
            st.stop = true;
            self.shared.watch.wake.notify_one();
        }
        if let Some(t) = self.resizer.take() {
            let _ = t.join();
        }
        // The hook may hold references to layers above: drop it now.
        if let Ok(mut hook) = self.shared.notify.lock() {
            hook.take();
        }
    }
}

/// Collects `rbd_diff_iterate2` extents.
unsafe extern "C" fn on_extent(offset: u64, len: usize, exists: c_int, arg: *mut c_void) -> c_int {
    if arg.is_null() {
        return -libc::EINVAL;
    }
    // SAFETY: `arg` is the `Vec` that `extents` passed, alive and not
    // otherwise borrowed for the duration of rbd_diff_iterate2.
    let runs = unsafe { &mut *(arg as *mut Vec<(u64, u64)>) };
    if exists != 0 {
        runs.push((offset, len_u64(len)));
    }
    0
}

impl Backstore for RbdBackstore {
    fn kind(&self) -> &'static str {
        "rbd"
    }

    fn geometry(&self) -> Geometry {
        self.shared.geometry(self.read_only)
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        check_range(&self.geometry(), offset, len_u64(buf.len()))?;
        if buf.is_empty() {
            return Ok(());
        }
        let len = buf.len();
        let n = run(OpKind::Read, |c| {
            // SAFETY: `buf` is valid for `len` bytes and outlives the
            // request (`run` waits for it).
            i64::from(unsafe {
                rbd::rbd_aio_read2(
                    self.image(),
                    offset,
                    len,
                    buf.as_mut_ptr().cast::<c_char>(),
                    c,
                    0,
                )
            })
        })?;
        if n != len as i64 {
            return Err(BackstoreError::Read(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("rbd read of {len} bytes at {offset} returned {n}"),
            )));
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64, _fua: bool) -> Result<()> {
        // No librbd cache: an acknowledged write is on the OSDs, FUA or not.
        check_write(&self.geometry(), offset, len_u64(buf.len()))?;
        if buf.is_empty() {
            return Ok(());
        }
        let len = buf.len();
        run(OpKind::Write, |c| {
            // SAFETY: `buf` is valid for `len` bytes and outlives the
            // request.
            i64::from(unsafe {
                rbd::rbd_aio_write2(
                    self.image(),
                    offset,
                    len,
                    buf.as_ptr().cast::<c_char>(),
                    c,
                    0,
                )
            })
        })
        .map(drop)
    }

    fn flush(&self) -> Result<()> {
        run(OpKind::Flush, |c| {
            // SAFETY: a live image and completion.
            i64::from(unsafe { rbd::rbd_aio_flush(self.image(), c) })
        })
        .map(drop)
    }

    fn write_same(&self, pattern: &[u8], offset: u64, len: u64) -> Result<()> {
        check_write(&self.geometry(), offset, len)?;
        check_pattern(pattern)?;
        if len == 0 {
            return Ok(());
        }
        if is_zero(pattern) {
            return self.write_zeroes(offset, len);
        }
        // librbd wants the length a multiple of the pattern; one request
        // per at most 1 GiB keeps `usize` conversions trivially in range.
        let plen = len_u64(pattern.len());
        if len % plen != 0 {
            return Err(crate::common::invalid_input(
                "write_same length is not a multiple of the pattern",
            ));
        }
        let step = (1u64 << 30) / plen * plen;
        let mut done = 0u64;
        while done < len {
            let n = step.min(len - done);
            let at = offset + done;
            let n_usize = usize::try_from(n).unwrap_or(usize::MAX);
            run(OpKind::Write, |c| {
                // SAFETY: `pattern` is valid for its length and outlives
                // the request.
                i64::from(unsafe {
                    rbd::rbd_aio_writesame(
                        self.image(),
                        at,
                        n_usize,
                        pattern.as_ptr().cast::<c_char>(),
                        pattern.len(),
                        c,
                        0,
                    )
                })
            })?;
            done += n;
        }
        Ok(())
    }

    fn unmap(&self, offset: u64, len: u64) -> Result<()> {
        check_write(&self.geometry(), offset, len)?;
        if len == 0 {
            return Ok(());
        }
        self.write_zeroes(offset, len)
    }

    fn extents(&self, offset: u64, len: u64) -> Result<Vec<Extent>> {
        check_range(&self.geometry(), offset, len)?;
        let mut runs = Vec::new();
        if len == 0 {
            return Ok(runs);
        }
        let mut found: Vec<(u64, u64)> = Vec::new();
        // SAFETY: a live image; `found` outlives the synchronous call and
        // is reached only through the callback's argument meanwhile.
        let r = unsafe {
            rbd::rbd_diff_iterate2(
                self.image(),
                ptr::null(),
                offset,
                len,
                1,
                0,
                Some(on_extent),
                (&mut found as *mut Vec<(u64, u64)>).cast::<c_void>(),
            )
        };
        if r < 0 {
            return Err(io_error(OpKind::Read, i64::from(r)));
        }
        found.sort_unstable();
        let end = offset + len;
        let mut at = offset;
        for (o, l) in found {
            let s = o.max(at);
            let e = o.saturating_add(l).min(end);
            if e <= s {
                continue;
            }
            push_extent(&mut runs, s - at, false);
            push_extent(&mut runs, e - s, true);
            at = e;
        }
        push_extent(&mut runs, end - at, false);
        Ok(runs)
    }

    fn supports_write_same(&self) -> bool {
        true
    }

    fn supports_unmap(&self) -> bool {
        true
    }

    fn async_io(&self) -> Option<AsyncStore> {
        Some(AsyncStore::new(Arc::clone(&self.aio) as Arc<dyn AsyncIo>))
    }

    fn shared_state(&self) -> Option<Arc<dyn crate::shared::SharedState>> {
        self.gateway
            .as_ref()
            .map(|g| Arc::clone(g) as Arc<dyn crate::shared::SharedState>)
    }

    /// librbd's own compare-and-write, atomic at the OSD against every
    /// client's writes; librbd 16 takes one 512-byte sector only.
    fn compare_and_write(
        &self,
        offset: u64,
        verify: &[u8],
        write: &[u8],
    ) -> Option<Result<Option<usize>>> {
        const SECTOR: usize = 512;
        if verify.len() != SECTOR || write.len() != SECTOR || offset % SECTOR as u64 != 0 {
            return None;
        }
        if let Err(e) = check_write(&self.geometry(), offset, SECTOR as u64) {
            return Some(Err(e));
        }
        let mut mismatch = 0u64;
        let c = match Aio::new() {
            Ok(c) => c,
            Err(e) => return Some(Err(BackstoreError::Write(e))),
        };
        // SAFETY: `verify`, `write` and `mismatch` outlive the request:
        // `wait` returns after it completed.
        let r = unsafe {
            rbd::rbd_aio_compare_and_write(
                self.image(),
                offset,
                SECTOR,
                verify.as_ptr().cast::<c_char>(),
                write.as_ptr().cast::<c_char>(),
                c.0,
                &mut mismatch,
                0,
            )
        };
        if r < 0 {
            return Some(Err(io_error(OpKind::Write, r as i64)));
        }
        let ret = c.wait();
        if ret == -i64::from(libc::EILSEQ) {
            // librbd gives the offset within the request.
            let at = mismatch.min(SECTOR as u64 - 1);
            return Some(Ok(Some(at as usize)));
        }
        if ret < 0 {
            return Some(Err(io_error(OpKind::Write, ret)));
        }
        Some(Ok(None))
    }

    fn watch_capacity(&self, hook: CapacityHook) -> bool {
        match self.shared.notify.lock() {
            Ok(mut slot) => {
                *slot = Some(hook);
                self.watch_handle.is_some()
            }
            Err(_) => false,
        }
    }
}

/// The asynchronous side of an open image: each op one `rbd_aio_*`
/// request whose completion callback, on a librbd thread, hands the
/// result on. The request's state (buffer, callback, a reference on the
/// image) lives in one box from submission to callback.
struct RbdAio {
    shared: Arc<Shared>,
    read_only: bool,
}

impl fmt::Debug for RbdAio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RbdAio")
            .field("image", &self.shared.spec)
            .finish()
    }
}

/// One request in flight.
struct InFlight {
    /// Keeps the image open until the callback has run.
    _shared: Arc<Shared>,
    buf: IoBuf,
    kind: OpKind,
    /// Bytes a read must return.
    len: usize,
    done: AioDone,
}

/// librbd's completion callback.
unsafe extern "C" fn on_complete(c: rbd::rbd_completion_t, arg: *mut c_void) {
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
