//! Gateway mode of an RBD LUN: what the rustgt daemons that export one
//! image share, kept in Ceph itself ([`SharedState`]).
//!
//! Everything lives in one RADOS object next to the image,
//! `rustgt.scsi.<image id>`, in the image's pool and namespace:
//! - its data is the record: an 8-byte big-endian version, then the bytes
//!   the SCSI core stored. A store is one RADOS write operation that
//!   compares the version (`cmpext`) and replaces the whole object, so it
//!   is atomic at the OSD and two gateways never both win from one version;
//! - events go by RADOS watch/notify on the object. A notify returns when
//!   every watcher acknowledged it or timed out; a gateway acknowledges
//!   only after its hook ran (on a thread of its own, never on librados'
//!   callback thread), and acknowledges its own events at once;
//! - the mutual exclusion is a RADOS exclusive lock on the object with a
//!   lease (the operation timeout), so a gateway that died holding it
//!   blocks the others for one lease at most;
//! - each gateway writes its RADOS client address to the xattr
//!   `gw.<port group>`, which maps the image's exclusive-lock owner (an
//!   address, from `rbd_lock_get_owners`) to a target port group, and its
//!   RADOS instance id (the notifier id of its watch) to `id.<port group>`;
//! - fast failover: a writable gateway that does not own the image's
//!   exclusive lock pings the gateways every [`HEARTBEAT_INTERVAL`] while
//!   another gateway owns it; when the owner's watch misses
//!   [`HEARTBEAT_MISSES`] pings in a row (each [`HEARTBEAT_TIMEOUT`]), it
//!   breaks the owner's lock with `rbd_lock_break`, which blocklists the
//!   owner's client first, so librbd here takes the lock without waiting
//!   for the dead owner's watch to expire (osd_client_watch_timeout).

use std::collections::VecDeque;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::fmt;
use std::io;
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rados_sys as rados;
use rbd_sys as rbd;

use crate::shared::{EventHook, Exclusion, ExclusionHold, Record, SharedState};
use crate::{error::BackstoreError, error::Result};

/// Largest record accepted back from the object (persistent reservation
/// state of 256 registrations is well under 100 KiB).
const MAX_RECORD: usize = 4 << 20;
/// First framing byte of a notify payload: an event for the hook.
const EVENT: u8 = 1;
/// First framing byte of a notify payload: "who is there?".
const PING: u8 = 0;
/// First framing byte of a notify payload: "give the image's exclusive
/// lock up" (explicit ALUA: another gateway was asked to be the owner).
/// Acknowledged once released.
const RELEASE: u8 = 2;
/// How long a release request waits for the owner's answer (whole
/// seconds, as for [`HEARTBEAT_TIMEOUT`]).
const RELEASE_TIMEOUT: Duration = Duration::from_secs(1);
/// Pause between attempts to take the image's exclusive lock.
const ACQUIRE_PAUSE: Duration = Duration::from_millis(100);
/// How long a ping waits for answers.
const PING_TIMEOUT: Duration = Duration::from_secs(3);
/// How often a gateway that does not own the image's exclusive lock
/// checks whether the owner is a gateway that still answers.
const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(1);
/// How long the owner has to answer one heartbeat ping. librados hands
/// the OSD notify timeouts in whole seconds (rounded down; 0 would mean
/// the OSD's default, 30 s), so this is whole seconds, at least one.
const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(1);
const _: () = assert!(HEARTBEAT_TIMEOUT.as_secs() >= 1 && HEARTBEAT_TIMEOUT.subsec_nanos() == 0);
/// Consecutive heartbeats the owner must miss before its lock is broken.
const HEARTBEAT_MISSES: u32 = 3;
/// Name of the RADOS lock that [`SharedState::exclude`] takes.
const LOCK_NAME: &CStr = c"rustgt-exclusive";

fn os_error(ret: i64) -> io::Error {
    let errno = i32::try_from(ret.unsigned_abs()).unwrap_or(libc::EIO);
    io::Error::from_raw_os_error(errno)
}

fn rados_error(what: &str, ret: i64) -> BackstoreError {
    BackstoreError::Io(io::Error::new(
        os_error(ret).kind(),
        format!("rbd gateway state: {what}: {}", os_error(ret)),
    ))
}

/// Events waiting for the hook, with what their acknowledgement needs.
#[derive(Default)]
struct Inbox {
    queue: VecDeque<(u64, u64, Vec<u8>)>,
    stop: bool,
}

/// What the watch callback and the event thread share.
struct Core {
    cluster: rados::rados_t,
    /// A pool context of the gateway state's own (not librbd's).
    ioctx: rados::rados_ioctx_t,
    image: rbd::rbd_image_t,
    oid: CString,
    group: u16,
    instance: u64,
    address: String,
    timeout: Duration,
    inbox: Mutex<Inbox>,
    wake: Condvar,
    hook: Mutex<Option<EventHook>>,
    /// Runs after the failover thread broke a dead owner's lock.
    broken_hook: Mutex<Option<Box<dyn Fn() + Send + Sync>>>,
    lock_seq: AtomicU64,
    spec: String,
    /// Set to stop the failover thread; `heartbeat` wakes it.
    stop_heartbeat: Mutex<bool>,
    heartbeat: Condvar,
    /// Keeps the cluster and image handles open while this state lives.
    _handles: Arc<dyn Send + Sync>,
}

// SAFETY: librados cluster and pool handles and librbd image handles are
// thread-safe for the calls made here (reads, write operations,
// watch/notify, locks, xattrs, lock-owner queries); the pool context is
// destroyed only in `Drop` of the last `Core` reference.
unsafe impl Send for Core {}
// SAFETY: as for `Send`.
unsafe impl Sync for Core {}

impl Drop for Core {
    fn drop(&mut self) {
        // SAFETY: created once in `Gateway::open`, destroyed once here,
        // after the watch was removed (`Gateway::drop`).
        unsafe { rados::rados_ioctx_destroy(self.ioctx) };
    }
}

/// The shared state of one image's gateways, as one gateway sees it.
pub(crate) struct Gateway {
    core: Arc<Core>,
    watch: Option<u64>,
    events: Option<JoinHandle<()>>,
    failover: Option<JoinHandle<()>>,
}

/// What a notify got back: the notifier (RADOS instance) ids of the
/// watchers that acknowledged it and of those that did not in time.
#[derive(Debug, Default)]
struct NotifyReply {
    acked: Vec<u64>,
    timed_out: Vec<u64>,
}

impl fmt::Debug for Gateway {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gateway")
            .field("image", &self.core.spec)
            .field("port_group", &self.core.group)
            .field("address", &self.core.address)
            .finish()
    }
}

/// The watch callback: on librados' thread, so it only queues the event
/// (or acknowledges its own at once).
unsafe extern "C" fn on_notify(
    arg: *mut c_void,
    notify_id: u64,
    cookie: u64,
    notifier: u64,
    data: *mut c_void,
    len: usize,
) {
    if arg.is_null() {
        return;
    }
    // SAFETY: `arg` is the `Core` the watch was registered with; the
    // watch is removed (rados_unwatch2, then rados_watch_flush) before
    // that `Arc` can go.
    let core = unsafe { &*(arg as *const Core) };
    let payload = if data.is_null() || len == 0 {
        Vec::new()
    } else {
        // SAFETY: librados hands `len` readable bytes at `data` for the
        // duration of the callback.
        unsafe { std::slice::from_raw_parts(data as *const u8, len) }.to_vec()
    };
    let queued = matches!(payload.first(), Some(&EVENT) | Some(&RELEASE));
    if notifier == core.instance || !queued {
        // Our own event (already applied), or a ping: answer now.
        core.ack(notify_id, cookie);
        return;
    }
    let mut inbox = core.inbox.lock().unwrap_or_else(PoisonError::into_inner);
    inbox.queue.push_back((notify_id, cookie, payload));
    core.wake.notify_one();
}

/// The watch's error callback (the watch was lost, e.g. after a
/// reconnect): nothing is lost for events already acknowledged; librados
/// re-establishes watches on reconnect, so only log it.
unsafe extern "C" fn on_watch_error(arg: *mut c_void, _cookie: u64, err: c_int) {
    if arg.is_null() {
        return;
    }
    // SAFETY: as in `on_notify`.
    let core = unsafe { &*(arg as *const Core) };
    tracing::warn!(image = %core.spec, error = %os_error(i64::from(err)),
        "rbd gateway: watch on the shared state lost; events may be missed until it is back");
}

impl Core {
    fn ack(&self, notify_id: u64, cookie: u64) {
        // SAFETY: a live pool context and object name; no payload.
        let r = unsafe {
            rados::rados_notify_ack(
                self.ioctx,
                self.oid.as_ptr(),
                notify_id,
                cookie,
                ptr::null(),
                0,
            )
        };
        if r < 0 {
            tracing::warn!(image = %self.spec, error = %os_error(i64::from(r)),
                "rbd gateway: acknowledging an event failed");
        }
    }

    /// The event thread: runs the hook for each queued event, in order,
    /// then acknowledges it.
    fn run_events(&self) {
        loop {
            let (id, cookie, payload) = {
                let mut inbox = self.inbox.lock().unwrap_or_else(PoisonError::into_inner);
                loop {
                    if inbox.stop {
                        return;
                    }
                    if let Some(e) = inbox.queue.pop_front() {
                        break e;
                    }
                    inbox = self
                        .wake
                        .wait(inbox)
                        .unwrap_or_else(PoisonError::into_inner);
                }
            };
            if payload.first() == Some(&RELEASE) {
                self.release_lock();
            } else if let Some(event) = payload.get(1..) {
                let hook = self.hook.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(hook) = hook.as_ref() {
                    let call = std::panic::AssertUnwindSafe(|| hook(event));
                    if std::panic::catch_unwind(call).is_err() {
                        tracing::error!(image = %self.spec, "rbd gateway: event hook panicked");
                    }
                }
            }
            self.ack(id, cookie);
        }
    }

    /// Sends a framed notify; returns who acknowledged it and who not.
    fn notify(&self, framed: &[u8], timeout: Duration) -> Result<NotifyReply> {
        let len = c_int::try_from(framed.len())
            .map_err(|_| rados_error("notify", -i64::from(libc::EMSGSIZE)))?;
        let mut reply: *mut c_char = ptr::null_mut();
        let mut reply_len = 0usize;
        let ms = u64::try_from(timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        // SAFETY: a live pool context; `framed` is valid for `len` bytes;
        // the reply buffer is freed below.
        let r = unsafe {
            rados::rados_notify2(
                self.ioctx,
                self.oid.as_ptr(),
                framed.as_ptr().cast::<c_char>(),
                len,
                ms,
                &mut reply,
                &mut reply_len,
            )
        };
        if reply.is_null() {
            if r < 0 {
                return Err(rados_error("notify", i64::from(r)));
            }
            return Ok(NotifyReply::default());
        }
        let mut acks: *mut rados::notify_ack_t = ptr::null_mut();
        let mut nr_acks = 0usize;
        let mut timeouts: *mut rados::notify_timeout_t = ptr::null_mut();
        let mut nr_timeouts = 0usize;
        let mut out = NotifyReply::default();
        // SAFETY: `reply` is the buffer librados returned with its length;
        // on success the decoded arrays hold `nr_acks` and `nr_timeouts`
        // entries (or are null when empty), are freed with
        // rados_free_notify_response and the buffer with
        // rados_buffer_free, once each.
        unsafe {
            let d = rados::rados_decode_notify_response(
                reply,
                reply_len,
                &mut acks,
                &mut nr_acks,
                &mut timeouts,
                &mut nr_timeouts,
            );
            if d == 0 {
                if !acks.is_null() {
                    out.acked = std::slice::from_raw_parts(acks, nr_acks)
                        .iter()
                        .map(|a| a.notifier_id)
                        .collect();
                }
                if !timeouts.is_null() {
                    out.timed_out = std::slice::from_raw_parts(timeouts, nr_timeouts)
                        .iter()
                        .map(|t| t.notifier_id)
                        .collect();
                }
                rados::rados_free_notify_response(acks, nr_acks, timeouts);
            }
            rados::rados_buffer_free(reply);
        }
        if r < 0 && r != -libc::ETIMEDOUT {
            return Err(rados_error("notify", i64::from(r)));
        }
        Ok(out)
    }

    /// `rados_lock_exclusive` of the exclusion's lock with `cookie`, a
    /// lease of the operation timeout and `flags`.
    fn lock_exclusion(&self, cookie: &CStr, flags: u8) -> c_int {
        let mut tv = rados::timeval {
            tv_sec: libc::time_t::try_from(self.timeout.as_secs().max(1)).unwrap_or(30),
            tv_usec: 0,
        };
        // SAFETY: a live context; NUL-terminated strings and `tv` outlive
        // the call.
        unsafe {
            rados::rados_lock_exclusive(
                self.ioctx,
                self.oid.as_ptr(),
                LOCK_NAME.as_ptr(),
                cookie.as_ptr(),
                c"COMPARE AND WRITE".as_ptr(),
                &mut tv,
                flags,
            )
        }
    }

    /// Gives the image's exclusive lock up if this client holds it
    /// (librbd first blocks new writes and completes those in flight).
    fn release_lock(&self) {
        if !self.owns_lock() {
            return;
        }
        // SAFETY: a live image handle.
        let r = unsafe { rbd::rbd_lock_release(self.image) };
        if r < 0 {
            tracing::warn!(image = %self.spec, error = %os_error(i64::from(r)),
                "rbd gateway: giving the exclusive lock up for another gateway failed");
        } else {
            tracing::info!(image = %self.spec, port_group = self.group,
                "rbd gateway: gave the exclusive lock up: another gateway was made active (SET TARGET PORT GROUPS)");
        }
    }

    fn xattr_name(group: u16) -> CString {
        CString::new(format!("gw.{group}")).unwrap_or_default()
    }
}

/// `rados_getaddrs`: this client's address as lock owners are named.
fn client_address(cluster: rados::rados_t) -> Result<String> {
    let mut addrs: *mut c_char = ptr::null_mut();
    // SAFETY: a connected cluster; the string is freed with
    // rados_buffer_free.
    let r = unsafe { rados::rados_getaddrs(cluster, &mut addrs) };
    if r < 0 || addrs.is_null() {
        return Err(rados_error(
            "reading the client address",
            i64::from(r.min(-1)),
        ));
    }
    // SAFETY: librados returns a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(addrs) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: allocated by librados for this call, freed once.
    unsafe { rados::rados_buffer_free(addrs) };
    Ok(s)
}

/// The image's id (stable across renames), for the object's name.
fn image_id(image: rbd::rbd_image_t) -> Result<String> {
    let mut buf = [0u8; 128];
    // SAFETY: a live image; `buf` is writable for its length.
    let r = unsafe { rbd::rbd_get_id(image, buf.as_mut_ptr().cast::<c_char>(), buf.len()) };
    if r < 0 {
        return Err(rados_error("reading the image id", i64::from(r)));
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Ok(String::from_utf8_lossy(buf.get(..end).unwrap_or_default()).into_owned())
}

impl Gateway {
    /// Joins the image's gateways as the gateway of target port group
    /// `group`: makes the state object if it is missing, registers this
    /// client's address, and starts listening for events.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn open(
        cluster: rados::rados_t,
        pool: &CStr,
        namespace: Option<&CStr>,
        image: rbd::rbd_image_t,
        group: u16,
        timeout: Duration,
        spec: &str,
        handles: Arc<dyn Send + Sync>,
        fail_over: bool,
    ) -> Result<Gateway> {
        let mut ioctx: rados::rados_ioctx_t = ptr::null_mut();
        // SAFETY: a connected cluster; `ioctx` receives a new context.
        let r = unsafe { rados::rados_ioctx_create(cluster, pool.as_ptr(), &mut ioctx) };
        if r < 0 {
            return Err(rados_error("opening the pool", i64::from(r)));
        }
        if let Some(ns) = namespace {
            // SAFETY: a live context; librados copies the name.
            unsafe { rados::rados_ioctx_set_namespace(ioctx, ns.as_ptr()) };
        }
        // SAFETY: a connected cluster.
        let instance = unsafe { rados::rados_get_instance_id(cluster) };
        let id = match image_id(image) {
            Ok(id) => id,
            Err(e) => {
                // SAFETY: created above, not shared yet.
                unsafe { rados::rados_ioctx_destroy(ioctx) };
                return Err(e);
            }
        };
        let address = client_address(cluster).unwrap_or_default();
        let core = Arc::new(Core {
            cluster,
            ioctx,
            image,
            oid: CString::new(format!("rustgt.scsi.{id}")).unwrap_or_default(),
            group,
            instance,
            address,
            timeout,
            inbox: Mutex::new(Inbox::default()),
            wake: Condvar::new(),
            hook: Mutex::new(None),
            broken_hook: Mutex::new(None),
            lock_seq: AtomicU64::new(0),
            spec: spec.to_owned(),
            stop_heartbeat: Mutex::new(false),
            heartbeat: Condvar::new(),
            _handles: handles,
        });
        let mut gw = Gateway {
            core: Arc::clone(&core),
            watch: None,
            events: None,
            failover: None,
        };
        gw.create_object()?;
        let name = Core::xattr_name(group);
        // SAFETY: a live context; the address is valid for its length.
        let r = unsafe {
            rados::rados_setxattr(
                core.ioctx,
                core.oid.as_ptr(),
                name.as_ptr(),
                core.address.as_ptr().cast::<c_char>(),
                core.address.len(),
            )
        };
        if r < 0 {
            return Err(rados_error("registering this gateway", i64::from(r)));
        }
        let id_name = CString::new(format!("id.{group}")).unwrap_or_default();
        let id_value = instance.to_string();
        // SAFETY: a live context; the value is valid for its length.
        let r = unsafe {
            rados::rados_setxattr(
                core.ioctx,
                core.oid.as_ptr(),
                id_name.as_ptr(),
                id_value.as_ptr().cast::<c_char>(),
                id_value.len(),
            )
        };
        if r < 0 {
            return Err(rados_error("registering this gateway", i64::from(r)));
        }
        let thread_core = Arc::clone(&core);
        gw.events = Some(
            std::thread::Builder::new()
                .name("rbd-events".into())
                .spawn(move || thread_core.run_events())
                .map_err(BackstoreError::Io)?,
        );
        let mut cookie = 0u64;
        // SAFETY: `core` outlives the watch: `Drop` removes the watch and
        // flushes its callbacks before this reference goes.
        let r = unsafe {
            rados::rados_watch2(
                core.ioctx,
                core.oid.as_ptr(),
                &mut cookie,
                Some(on_notify),
                Some(on_watch_error),
                Arc::as_ptr(&core) as *mut c_void,
            )
        };
        if r < 0 {
            return Err(rados_error("watching the shared state", i64::from(r)));
        }
        gw.watch = Some(cookie);
        if fail_over {
            let thread_core = Arc::clone(&core);
            gw.failover = Some(
                std::thread::Builder::new()
                    .name("rbd-failover".into())
                    .spawn(move || thread_core.run_failover())
                    .map_err(BackstoreError::Io)?,
            );
        }
        tracing::info!(image = %spec, port_group = group, address = %core.address,
            object = %core.oid.to_string_lossy(), "rbd gateway mode: state shared in RADOS");
        Ok(gw)
    }

    /// Makes the object holding version 0 and no data, unless it exists.
    fn create_object(&self) -> Result<()> {
        let c = &self.core;
        // SAFETY: a new write operation, released below.
        let op = unsafe { rados::rados_create_write_op() };
        if op.is_null() {
            return Err(rados_error("creating the state", -i64::from(libc::ENOMEM)));
        }
        let zero = 0u64.to_be_bytes();
        // SAFETY: a live operation and context; `zero` outlives operate.
        let r = unsafe {
            rados::rados_write_op_create(
                op,
                rados::LIBRADOS_CREATE_EXCLUSIVE as c_int,
                ptr::null(),
            );
            rados::rados_write_op_write_full(op, zero.as_ptr().cast::<c_char>(), zero.len());
            let r = rados::rados_write_op_operate(op, c.ioctx, c.oid.as_ptr(), ptr::null_mut(), 0);
            rados::rados_release_write_op(op);
            r
        };
        if r < 0 && r != -libc::EEXIST {
            return Err(rados_error("creating the state", i64::from(r)));
        }
        Ok(())
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        *self
            .core
            .stop_heartbeat
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = true;
        self.core.heartbeat.notify_all();
        if let Some(t) = self.failover.take() {
            let _ = t.join();
        }
        if let Some(cookie) = self.watch.take() {
            // SAFETY: the cookie came from rados_watch2 on this context;
            // the flush waits for callbacks in progress.
            unsafe {
                rados::rados_unwatch2(self.core.ioctx, cookie);
                rados::rados_watch_flush(self.core.cluster);
            }
        }
        {
            let mut inbox = self
                .core
                .inbox
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            inbox.stop = true;
            self.core.wake.notify_one();
        }
        if let Some(t) = self.events.take() {
            let _ = t.join();
        }
        // The hooks may hold references to layers above.
        self.core
            .hook
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        self.core
            .broken_hook
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }
}

/// The RADOS lock [`SharedState::exclude`] took, unlocked on drop.
struct Held {
    core: Arc<Core>,
    cookie: CString,
}

impl ExclusionHold for Held {
    fn renew(&self) -> Result<()> {
        let flags = u8::try_from(rados::LIBRADOS_LOCK_FLAG_MAY_RENEW).unwrap_or(1);
        let r = self.core.lock_exclusion(&self.cookie, flags);
        if r == -libc::EBUSY || r == -libc::EEXIST {
            return Err(BackstoreError::Fenced(io::Error::new(
                io::ErrorKind::TimedOut,
                "rbd gateway: the exclusion's lease ended and another gateway holds it",
            )));
        }
        if r < 0 {
            return Err(rados_error("renewing the exclusion", i64::from(r)));
        }
        Ok(())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // SAFETY: a live context; the lock was taken with this cookie.
        let r = unsafe {
            rados::rados_unlock(
                self.core.ioctx,
                self.core.oid.as_ptr(),
                LOCK_NAME.as_ptr(),
                self.cookie.as_ptr(),
            )
        };
        if r < 0 && r != -libc::ENOENT {
            tracing::warn!(image = %self.core.spec, error = %os_error(i64::from(r)),
                "rbd gateway: releasing the exclusion failed; it ends with its lease");
        }
    }
}

impl SharedState for Gateway {
    fn port_group(&self) -> u16 {
        self.core.group
    }

    fn timeout(&self) -> Duration {
        self.core.timeout
    }

    fn load(&self) -> Result<Record> {
        let c = &self.core;
        let mut size = 64 * 1024;
        loop {
            let mut buf = vec![0u8; size];
            // SAFETY: a live context; `buf` is writable for its length.
            let r = unsafe {
                rados::rados_read(
                    c.ioctx,
                    c.oid.as_ptr(),
                    buf.as_mut_ptr().cast::<c_char>(),
                    buf.len(),
                    0,
                )
            };
            let n =
                usize::try_from(r).map_err(|_| rados_error("reading the state", i64::from(r)))?;
            if n == size && size < MAX_RECORD {
                size *= 4;
                continue;
            }
            if n == size {
                return Err(rados_error("reading the state", -i64::from(libc::EFBIG)));
            }
            buf.truncate(n);
            let Some(head) = buf.get(..8) else {
                return Ok(Record {
                    version: 0,
                    data: Vec::new(),
                });
            };
            let mut v = [0u8; 8];
            v.copy_from_slice(head);
            return Ok(Record {
                version: u64::from_be_bytes(v),
                data: buf.split_off(8),
            });
        }
    }

    fn store(&self, version: u64, data: &[u8]) -> Result<Option<u64>> {
        let c = &self.core;
        let next = version.wrapping_add(1);
        let mut full = Vec::with_capacity(8 + data.len());
        full.extend_from_slice(&next.to_be_bytes());
        full.extend_from_slice(data);
        let expect = version.to_be_bytes();
        let mut cmp: c_int = 0;
        // SAFETY: a new write operation, released below; the buffers and
        // `cmp` outlive the synchronous operate.
        let r = unsafe {
            let op = rados::rados_create_write_op();
            if op.is_null() {
                return Err(rados_error("storing the state", -i64::from(libc::ENOMEM)));
            }
            rados::rados_write_op_cmpext(op, expect.as_ptr().cast::<c_char>(), 8, 0, &mut cmp);
            rados::rados_write_op_write_full(op, full.as_ptr().cast::<c_char>(), full.len());
            let r = rados::rados_write_op_operate(op, c.ioctx, c.oid.as_ptr(), ptr::null_mut(), 0);
            rados::rados_release_write_op(op);
            r
        };
        // A mismatch is -MAX_ERRNO - offset (<= -4095), or ECANCELED.
        if r <= -4095 || r == -libc::ECANCELED || cmp <= -4095 {
            return Ok(None);
        }
        if r < 0 {
            return Err(rados_error("storing the state", i64::from(r)));
        }
        Ok(Some(next))
    }

    fn announce(&self, event: &[u8]) -> Result<usize> {
        let mut framed = Vec::with_capacity(1 + event.len());
        framed.push(EVENT);
        framed.extend_from_slice(event);
        let timeouts = self
            .core
            .notify(&framed, self.core.timeout)?
            .timed_out
            .len();
        if timeouts > 0 {
            tracing::warn!(image = %self.core.spec, timeouts,
                "rbd gateway: gateways did not acknowledge an event in time");
        }
        Ok(timeouts)
    }

    fn listen(&self, hook: EventHook) {
        *self
            .core
            .hook
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(hook);
    }

    fn others_alive(&self) -> Result<bool> {
        let reply = self.core.notify(&[PING], PING_TIMEOUT)?;
        Ok(reply.acked.iter().any(|&id| id != self.core.instance))
    }

    fn exclude(&self) -> Result<Exclusion> {
        let c = &self.core;
        let seq = c.lock_seq.fetch_add(1, Ordering::Relaxed);
        let cookie = CString::new(format!("{}-{seq}", c.instance)).unwrap_or_default();
        let deadline = Instant::now() + c.timeout;
        let mut pause = Duration::from_micros(200);
        loop {
            let r = c.lock_exclusion(&cookie, 0);
            if r == 0 {
                return Ok(Exclusion(Box::new(Held {
                    core: Arc::clone(c),
                    cookie,
                })));
            }
            if r != -libc::EBUSY && r != -libc::EEXIST {
                return Err(rados_error("taking the exclusion", i64::from(r)));
            }
            if Instant::now() >= deadline {
                return Err(BackstoreError::Fenced(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "rbd gateway: another gateway holds the exclusion",
                )));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(5));
        }
    }

    fn owner(&self) -> Result<Option<u16>> {
        let c = &self.core;
        let mut mine: c_int = 0;
        // SAFETY: a live image; `mine` receives the answer.
        let r = unsafe { rbd::rbd_is_exclusive_lock_owner(c.image, &mut mine) };
        if r == 0 && mine != 0 {
            return Ok(Some(c.group));
        }
        let Some(owner) = c.owner_address()? else {
            return Ok(None);
        };
        Ok(c.group_of(&owner))
    }

    fn owns(&self) -> bool {
        self.core.owns_lock()
    }

    fn take_ownership(&self, deadline: Instant) -> Result<bool> {
        let c = &self.core;
        loop {
            if c.owns_lock() {
                return Ok(true);
            }
            // SAFETY: a live image handle. Taking the lock this way
            // switches librbd to the standard lock policy: it no longer
            // gives the lock up when another client asks for it (their
            // writes fail instead) until rbd_lock_release.
            let r = unsafe {
                rbd::rbd_lock_acquire(c.image, rbd::rbd_lock_mode_t::RBD_LOCK_MODE_EXCLUSIVE)
            };
            if r == 0 && c.owns_lock() {
                tracing::info!(image = %c.spec, port_group = c.group,
                    "rbd gateway: took the exclusive lock (SET TARGET PORT GROUPS)");
                return Ok(true);
            }
            if r == -libc::EINVAL || r == -libc::EOPNOTSUPP {
                return Err(rados_error("taking the exclusive lock", i64::from(r)));
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
            // Another gateway holds it: ask it to give it up (it answers
            // once it did). A dead one does not answer; the failover
            // thread breaks its lock after its missed heartbeats.
            if let Ok(Some(owner)) = c.owner_address() {
                if owner != c.address {
                    if let Err(e) = c.notify(&[RELEASE], RELEASE_TIMEOUT) {
                        tracing::debug!(image = %c.spec, error = %e,
                            "rbd gateway: asking the owner to give the lock up failed");
                    }
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            std::thread::sleep(ACQUIRE_PAUSE.min(left));
        }
    }

    fn on_owner_broken(&self, hook: Box<dyn Fn() + Send + Sync>) {
        *self
            .core
            .broken_hook
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(hook);
    }

    fn give_up_ownership(&self) -> Result<()> {
        self.core.release_lock();
        Ok(())
    }

    fn announce_within(&self, event: &[u8], within: Duration) -> Result<usize> {
        let mut framed = Vec::with_capacity(1 + event.len());
        framed.push(EVENT);
        framed.extend_from_slice(event);
        let within = Duration::from_secs(within.as_secs().max(1));
        Ok(self.core.notify(&framed, within)?.timed_out.len())
    }
}

impl Core {
    /// The address of the image's exclusive-lock owner, if it has one.
    fn owner_address(&self) -> Result<Option<String>> {
        let mut mode: rbd::rbd_lock_mode_t = rbd::rbd_lock_mode_t::RBD_LOCK_MODE_EXCLUSIVE;
        let mut owners: [*mut c_char; 8] = [ptr::null_mut(); 8];
        let mut count = owners.len();
        // SAFETY: a live image; `owners` has room for `count` pointers,
        // freed with rbd_lock_get_owners_cleanup.
        let r = unsafe {
            rbd::rbd_lock_get_owners(self.image, &mut mode, owners.as_mut_ptr(), &mut count)
        };
        if r == -libc::ENOENT || r == -libc::EINVAL {
            // No owner now, or no exclusive-lock feature.
            return Ok(None);
        }
        if r < 0 {
            return Err(rados_error("reading the lock owner", i64::from(r)));
        }
        let count = count.min(owners.len());
        let names: Vec<String> = owners
            .iter()
            .take(count)
            .filter(|p| !p.is_null())
            // SAFETY: librbd filled `count` NUL-terminated strings.
            .map(|p| unsafe { CStr::from_ptr(*p) }.to_string_lossy().into_owned())
            .collect();
        // SAFETY: the strings librbd allocated, freed once.
        unsafe { rbd::rbd_lock_get_owners_cleanup(owners.as_mut_ptr(), count) };
        Ok(names.into_iter().next())
    }

    /// Whether this client owns the image's exclusive lock.
    fn owns_lock(&self) -> bool {
        let mut mine: c_int = 0;
        // SAFETY: a live image; `mine` receives the answer.
        let r = unsafe { rbd::rbd_is_exclusive_lock_owner(self.image, &mut mine) };
        r == 0 && mine != 0
    }

    /// The RADOS instance id gateway `group` registered (`id.<group>`).
    fn instance_of(&self, group: u16) -> Option<u64> {
        let name = CString::new(format!("id.{group}")).ok()?;
        let mut buf = [0u8; 32];
        // SAFETY: a live context; `buf` is writable for its length.
        let r = unsafe {
            rados::rados_getxattr(
                self.ioctx,
                self.oid.as_ptr(),
                name.as_ptr(),
                buf.as_mut_ptr().cast::<c_char>(),
                buf.len(),
            )
        };
        let n = usize::try_from(r).ok()?;
        std::str::from_utf8(buf.get(..n)?).ok()?.trim().parse().ok()
    }

    /// Waits `d`, or less when told to stop; true when told to stop.
    fn pause(&self, d: Duration) -> bool {
        let stop = self
            .stop_heartbeat
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (stop, _) = self
            .heartbeat
            .wait_timeout_while(stop, d, |s| !*s)
            .unwrap_or_else(PoisonError::into_inner);
        *stop
    }

    /// The failover thread: while another gateway owns the image's
    /// exclusive lock, pings the gateways each [`HEARTBEAT_INTERVAL`];
    /// breaks the owner's lock (blocklisting it) once the owner's own
    /// watch missed [`HEARTBEAT_MISSES`] pings in a row.
    fn run_failover(&self) {
        // (owner address, its instance id, consecutive misses)
        let mut suspect: Option<(String, u64, u32)> = None;
        loop {
            let missed = suspect.as_ref().is_some_and(|s| s.2 > 0);
            if !missed && self.pause(HEARTBEAT_INTERVAL) {
                return;
            }
            if *self
                .stop_heartbeat
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
            {
                return;
            }
            suspect = self.heartbeat_once(suspect.take());
        }
    }

    /// One heartbeat round; returns the suspect to carry on with.
    fn heartbeat_once(&self, suspect: Option<(String, u64, u32)>) -> Option<(String, u64, u32)> {
        if self.owns_lock() {
            return None;
        }
        let owner = match self.owner_address() {
            Ok(Some(o)) if o != self.address => o,
            Ok(_) => return None,
            Err(e) => {
                tracing::debug!(image = %self.spec, error = %e,
                    "rbd gateway: heartbeat: reading the lock owner failed");
                return None;
            }
        };
        // Only a gateway of this image, with its instance id registered,
        // is ever judged: any other owner is left to librbd.
        let group = self.group_of(&owner)?;
        let instance = self.instance_of(group)?;
        if instance == self.instance {
            return None;
        }
        let reply = match self.notify(&[PING], HEARTBEAT_TIMEOUT) {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(image = %self.spec, error = %e,
                    "rbd gateway: heartbeat ping failed");
                return None;
            }
        };
        let answered = reply.acked.contains(&instance);
        let silent = reply.timed_out.contains(&instance);
        if answered || !silent {
            // Alive, or its watch is gone already (then librbd breaks
            // the lock itself, without waiting).
            return None;
        }
        let misses = match suspect {
            Some((a, i, m)) if a == owner && i == instance => m + 1,
            _ => 1,
        };
        tracing::warn!(image = %self.spec, owner = %owner, port_group = group, misses,
            "rbd gateway: the exclusive-lock owner did not answer a heartbeat");
        if misses < HEARTBEAT_MISSES {
            return Some((owner, instance, misses));
        }
        let Ok(name) = CString::new(owner.as_str()) else {
            return None;
        };
        // SAFETY: a live, writable image; the NUL-terminated owner
        // outlives the call. librbd breaks the lock only while `owner`
        // still holds it, and blocklists that client first
        // (rbd_blocklist_on_break_lock).
        let r = unsafe {
            rbd::rbd_lock_break(
                self.image,
                rbd::rbd_lock_mode_t::RBD_LOCK_MODE_EXCLUSIVE,
                name.as_ptr(),
            )
        };
        if r < 0 {
            tracing::warn!(image = %self.spec, owner = %owner, error = %os_error(i64::from(r)),
                "rbd gateway: breaking the silent owner's lock failed");
        } else {
            tracing::warn!(image = %self.spec, owner = %owner, port_group = group,
                "rbd gateway: blocklisted the silent exclusive-lock owner and broke its lock");
            let hook = self
                .broken_hook
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if let Some(hook) = hook.as_ref() {
                let call = std::panic::AssertUnwindSafe(hook);
                if std::panic::catch_unwind(call).is_err() {
                    tracing::error!(image = %self.spec, "rbd gateway: lock-break hook panicked");
                }
            }
        }
        None
    }

    /// The port group whose registered address is `owner`; the groups
    /// are found by the xattrs of the state object.
    fn group_of(&self, owner: &str) -> Option<u16> {
        let c = self;
        let mut iter: rados::rados_xattrs_iter_t = ptr::null_mut();
        // SAFETY: a live context; the iterator is ended below.
        let r = unsafe { rados::rados_getxattrs(c.ioctx, c.oid.as_ptr(), &mut iter) };
        if r < 0 {
            return None;
        }
        let mut found = None;
        loop {
            let mut name: *const c_char = ptr::null();
            let mut val: *const c_char = ptr::null();
            let mut len = 0usize;
            // SAFETY: a live iterator; librados sets the pointers to
            // memory it owns until the next call.
            let r = unsafe { rados::rados_getxattrs_next(iter, &mut name, &mut val, &mut len) };
            if r < 0 || name.is_null() {
                break;
            }
            // SAFETY: a NUL-terminated name and `len` value bytes.
            let (name, value) = unsafe {
                (
                    CStr::from_ptr(name).to_string_lossy().into_owned(),
                    if val.is_null() {
                        Vec::new()
                    } else {
                        std::slice::from_raw_parts(val.cast::<u8>(), len).to_vec()
                    },
                )
            };
            if value == owner.as_bytes() {
                found = name.strip_prefix("gw.").and_then(|g| g.parse::<u16>().ok());
                if found.is_some() {
                    break;
                }
            }
        }
        // SAFETY: the iterator from rados_getxattrs, ended once.
        unsafe { rados::rados_getxattrs_end(iter) };
        found
    }
}
