//! The librbd engine itself (cargo feature `rbd`); see the parent module.

use std::ffi::{c_char, c_int, c_void};
use std::fmt;
use std::io;
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use rados_sys as rados;
use rbd_sys as rbd;

use super::async_io::RbdAio;
use super::completion::{run, Aio};
use super::errors::{cstr, io_error, os_error, setup_error, OpKind};
use super::gateway::Gateway;
use super::image::{CapacityHook, Handles, Shared, Watch, WatchState};
use super::options::RbdOptions;
use crate::aio::{AsyncIo, AsyncStore};
use crate::common::{
    check_pattern, check_range, check_write, is_zero, len_u64, push_extent, validate_block_size,
};
use crate::{
    error::BackstoreError, error::Result, geometry::Extent, geometry::Geometry, store::Backstore,
};
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
                !opts.read_only,
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
        if !self.shared.flush_has_work() {
            return Ok(());
        }
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
