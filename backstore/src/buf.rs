//! Reused I/O buffers.
//!
//! A medium read needs a buffer as long as the transfer; allocating and
//! freeing one per command costs a zeroing memset and, for large buffers
//! the allocator hands back to the kernel, page faults on every reuse.
//! [`IoBuf::for_overwrite`] takes a buffer from a pool instead: first the
//! calling thread's own small cache, then a cache shared by all threads
//! (a buffer filled on a LUN worker is often freed on a reactor). Dropping
//! the buffer gives it back, wherever that happens.
//!
//! Guarantees:
//! - a pooled buffer is never zeroed again: its bytes are whatever the last
//!   user left (or zeros, when new). The caller must overwrite every byte it
//!   sends, as every [`crate::Backstore::read_at`] does on success (they fill
//!   the whole buffer or fail). No uninitialised memory exists: every buffer
//!   was zero-initialised when first allocated.
//! - the data starts at a 4 KiB boundary, so O_DIRECT reads need no bounce
//!   buffer;
//! - memory is bounded: at most [`THREAD_CACHE_BYTES`] per thread and
//!   [`SHARED_CACHE_BYTES`] in the shared cache are kept idle; buffers past
//!   that, and buffers larger than [`MAX_POOLED`], are freed;
//! - pooled storage never moves while it exists, and every pooled storage
//!   the pool frees (cache overflow, a thread's cache at thread exit) is
//!   first shown to the [release hook](set_release_hook), if one is set:
//!   a transport that registered the storage with a device (RDMA) drops
//!   that registration there, before the memory can be reused.

use std::cell::RefCell;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::{Mutex, OnceLock};

/// Alignment of a pooled buffer's first byte.
pub const ALIGN: usize = 4096;
/// The smallest size class; smaller requests get a buffer of this size.
const MIN_SHIFT: u32 = 12;
/// The largest pooled buffer (16 MiB); larger ones are allocated each time.
pub const MAX_POOLED: usize = 1 << 24;
const CLASSES: usize = (24 - MIN_SHIFT + 1) as usize;
/// Idle bytes one thread keeps.
pub const THREAD_CACHE_BYTES: usize = 8 << 20;
/// Idle bytes the shared cache keeps.
pub const SHARED_CACHE_BYTES: usize = 64 << 20;

/// A byte buffer for medium data: pooled when it came from
/// [`IoBuf::for_overwrite`], a plain vector otherwise.
pub struct IoBuf {
    storage: Vec<u8>,
    /// Offset of the first byte in `storage` (below [`ALIGN`]); small
    /// fields keep a command, which carries two buffers, small.
    start: u16,
    len: usize,
    /// The size class it returns to when dropped.
    class: Option<u8>,
    /// All zeros, read from [`ZEROS`]: `storage` is empty until someone
    /// writes to the buffer.
    zeros: bool,
}

/// The longest all-zero buffer [`IoBuf::zeros`] lends without allocating.
pub const ZEROS_LEN: usize = 1 << 20;
static ZEROS: [u8; ZEROS_LEN] = [0; ZEROS_LEN];

/// Called with the address and length of a pooled storage just before the
/// pool frees it (see [`set_release_hook`]).
pub type ReleaseHook = fn(addr: usize, len: usize);

static RELEASE_HOOK: OnceLock<ReleaseHook> = OnceLock::new();

/// Sets the hook every pooled storage passes through before it is freed.
/// One hook per process; false (and no change) if another one is set.
/// The hook may run on any thread; it must not drop an [`IoBuf`].
pub fn set_release_hook(hook: ReleaseHook) -> bool {
    RELEASE_HOOK.set(hook).is_ok() || RELEASE_HOOK.get() == Some(&hook)
}

/// Frees pooled storage, telling the release hook first.
fn free_storage(v: Vec<u8>) {
    if let Some(hook) = RELEASE_HOOK.get() {
        if !v.is_empty() {
            hook(v.as_ptr() as usize, v.len());
        }
    }
    drop(v);
}

/// Where a pooled buffer's storage lies: the whole allocation, which does
/// not move or shrink while it exists. Only [`IoBuf::storage`] makes one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BufStorage {
    addr: usize,
    len: usize,
}

impl BufStorage {
    /// Address of the allocation's first byte (the key a memory
    /// registration cache, such as iSER's, files it under).
    pub fn addr(&self) -> usize {
        self.addr
    }

    /// Bytes in the allocation (its size class plus alignment slack), not
    /// the length of the buffer that lies in it.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the allocation has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `len` bytes at `addr` lie inside this storage.
    pub fn contains(&self, addr: usize, len: usize) -> bool {
        addr >= self.addr
            && addr
                .checked_add(len)
                .is_some_and(|end| end <= self.addr.saturating_add(self.len))
    }
}

/// Idle buffers of one cache, by size class.
struct Cache {
    free: [Vec<Vec<u8>>; CLASSES],
    bytes: usize,
    limit: usize,
}

impl Cache {
    const fn new(limit: usize) -> Cache {
        Cache {
            free: [const { Vec::new() }; CLASSES],
            bytes: 0,
            limit,
        }
    }

    fn take(&mut self, class: usize) -> Option<Vec<u8>> {
        let v = self.free.get_mut(class)?.pop()?;
        self.bytes = self.bytes.saturating_sub(v.len());
        Some(v)
    }

    /// Keeps `v` if there is room; gives it back otherwise.
    fn put(&mut self, class: usize, v: Vec<u8>) -> Option<Vec<u8>> {
        if self.bytes.saturating_add(v.len()) > self.limit {
            return Some(v);
        }
        match self.free.get_mut(class) {
            Some(list) => {
                self.bytes += v.len();
                list.push(v);
                None
            }
            None => Some(v),
        }
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        // A thread's cache at thread exit: its storage goes through the hook.
        for list in &mut self.free {
            for v in list.drain(..) {
                free_storage(v);
            }
        }
        self.bytes = 0;
    }
}

thread_local! {
    static LOCAL: RefCell<Cache> = const { RefCell::new(Cache::new(THREAD_CACHE_BYTES)) };
}
static SHARED: Mutex<Cache> = Mutex::new(Cache::new(SHARED_CACHE_BYTES));

/// The size class of `len` bytes, if it is pooled.
fn class_of(len: usize) -> Option<usize> {
    if len > MAX_POOLED {
        return None;
    }
    let bits = len.max(1 << MIN_SHIFT).next_power_of_two().trailing_zeros();
    usize::try_from(bits.checked_sub(MIN_SHIFT)?).ok()
}

/// Storage bytes of a class: its size plus room to align the start.
fn storage_len(class: usize) -> usize {
    (1usize << (MIN_SHIFT as usize + class)) + ALIGN
}

fn take_storage(class: usize) -> Vec<u8> {
    let local = LOCAL
        .try_with(|c| c.borrow_mut().take(class))
        .ok()
        .flatten();
    local
        .or_else(|| SHARED.lock().ok().and_then(|mut c| c.take(class)))
        .unwrap_or_else(|| vec![0u8; storage_len(class)])
}

fn give_back(class: usize, v: Vec<u8>) {
    let mut v = Some(v);
    // When the thread is exiting its cache is gone and `v` stays here.
    let local = LOCAL.try_with(|c| v.take().and_then(|v| c.borrow_mut().put(class, v)));
    let Some(v) = local.ok().flatten().or(v) else {
        return;
    };
    let rest = match SHARED.lock() {
        Ok(mut shared) => shared.put(class, v),
        Err(_) => Some(v),
    };
    if let Some(v) = rest {
        free_storage(v);
    }
}

impl IoBuf {
    /// A buffer of `len` bytes whose contents the caller overwrites: taken
    /// from the pool when one is idle, so its bytes are stale (never
    /// uninitialised). Larger than [`MAX_POOLED`]: a new zeroed buffer.
    pub fn for_overwrite(len: usize) -> IoBuf {
        let Some(class) = class_of(len) else {
            return IoBuf::from(vec![0u8; len]);
        };
        let storage = take_storage(class);
        let start = storage.as_ptr().align_offset(ALIGN);
        let (Ok(start16), Ok(class8)) = (u16::try_from(start), u8::try_from(class)) else {
            return IoBuf::from(vec![0u8; len]);
        };
        if start.saturating_add(len) > storage.len() {
            // Cannot happen (the storage has ALIGN spare bytes); stay correct.
            return IoBuf::from(vec![0u8; len]);
        }
        IoBuf {
            storage,
            start: start16,
            len,
            class: Some(class8),
            zeros: false,
        }
    }

    /// A zero-filled buffer of `len` bytes (pooled).
    pub fn zeroed(len: usize) -> IoBuf {
        let mut b = IoBuf::for_overwrite(len);
        b.fill(0);
        b
    }

    /// `len` zero bytes that cost neither an allocation nor a memset while
    /// only read (a null LUN's data); pooled zeroed memory past
    /// [`ZEROS_LEN`]. Writing to it first makes a private copy.
    pub fn zeros(len: usize) -> IoBuf {
        if len > ZEROS_LEN {
            return IoBuf::zeroed(len);
        }
        IoBuf {
            storage: Vec::new(),
            start: 0,
            len,
            class: None,
            zeros: true,
        }
    }

    /// The buffer's `len` bytes (for a [`Self::zeros`] buffer, the shared
    /// zeros).
    pub fn as_slice(&self) -> &[u8] {
        if self.zeros {
            return ZEROS.get(..self.len).unwrap_or_default();
        }
        self.storage
            .get(usize::from(self.start)..usize::from(self.start) + self.len)
            .unwrap_or_default()
    }

    /// The buffer's `len` bytes, writable; a [`Self::zeros`] buffer first
    /// gets storage of its own (zeroed), so the shared zeros never change.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        if self.zeros {
            *self = IoBuf::zeroed(self.len);
        }
        self.storage
            .get_mut(usize::from(self.start)..usize::from(self.start) + self.len)
            .unwrap_or_default()
    }

    /// Keeps the first `len` bytes (no effect when already shorter).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Makes the buffer empty; its storage stays with it (a pooled one goes
    /// back to the pool on drop).
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Whether the buffer goes back to a pool when dropped.
    pub fn is_pooled(&self) -> bool {
        self.class.is_some()
    }

    /// The storage of a pooled buffer (None for a plain one, whose memory
    /// the pool does not track).
    pub fn storage(&self) -> Option<BufStorage> {
        self.class.map(|_| BufStorage {
            addr: self.storage.as_ptr() as usize,
            len: self.storage.len(),
        })
    }

    /// Address of the first byte, taken without borrowing the bytes (for
    /// a device that writes them, with the buffer kept alive and not
    /// touched meanwhile; see `BufStorage`). 0 for an all-zero lent one.
    pub fn data_addr(&self) -> usize {
        if self.zeros {
            return 0;
        }
        (self.storage.as_ptr() as usize).saturating_add(usize::from(self.start))
    }

    /// How long [`grow_in_place`](Self::grow_in_place) can make it: the
    /// room its storage has from its first byte (its length if it is not
    /// pooled).
    pub fn capacity_in_place(&self) -> usize {
        if self.class.is_none() || self.zeros {
            return self.len;
        }
        self.storage
            .len()
            .saturating_sub(usize::from(self.start))
            .max(self.len)
    }

    /// Lengthens a pooled buffer to `len` bytes inside the storage it
    /// already has (no move, no copy; the new bytes are stale, never
    /// uninitialised). False when the storage is too short or the buffer
    /// is not pooled; then nothing changes.
    pub fn grow_in_place(&mut self, len: usize) -> bool {
        if self.class.is_none() || self.zeros {
            return false;
        }
        if usize::from(self.start).saturating_add(len) > self.storage.len() {
            return false;
        }
        self.len = self.len.max(len);
        true
    }

    /// The bytes as a vector (copies a pooled buffer).
    pub fn into_vec(mut self) -> Vec<u8> {
        if self.class.is_none() && self.start == 0 && !self.zeros {
            let mut v = std::mem::take(&mut self.storage);
            v.truncate(self.len);
            return v;
        }
        self.as_slice().to_vec()
    }
}

impl Drop for IoBuf {
    fn drop(&mut self) {
        if let Some(class) = self.class {
            give_back(usize::from(class), std::mem::take(&mut self.storage));
        }
    }
}

impl From<Vec<u8>> for IoBuf {
    fn from(storage: Vec<u8>) -> IoBuf {
        IoBuf {
            len: storage.len(),
            storage,
            start: 0,
            class: None,
            zeros: false,
        }
    }
}

impl Default for IoBuf {
    fn default() -> IoBuf {
        IoBuf::from(Vec::new())
    }
}

impl Deref for IoBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl DerefMut for IoBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

impl AsRef<[u8]> for IoBuf {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl fmt::Debug for IoBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IoBuf")
            .field("len", &self.len)
            .field("pooled", &self.class.is_some())
            .finish()
    }
}

impl PartialEq for IoBuf {
    fn eq(&self, other: &IoBuf) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for IoBuf {}

impl PartialEq<Vec<u8>> for IoBuf {
    fn eq(&self, other: &Vec<u8>) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl PartialEq<[u8]> for IoBuf {
    fn eq(&self, other: &[u8]) -> bool {
        self.as_slice() == other
    }
}

impl<const N: usize> PartialEq<[u8; N]> for IoBuf {
    fn eq(&self, other: &[u8; N]) -> bool {
        self.as_slice() == other.as_slice()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pooled_buffer_grows_in_its_storage_without_moving() {
        let mut b = IoBuf::for_overwrite(5000);
        let (addr, storage) = (b.data_addr(), b.storage());
        assert_eq!(addr, b.as_ptr() as usize);
        assert!(b.grow_in_place(8192), "5000 bytes take the 8 KiB class");
        assert_eq!((b.len(), b.data_addr(), b.storage()), (8192, addr, storage));
        assert!(b.capacity_in_place() >= 8192 && b.capacity_in_place() < 8192 + ALIGN);
        assert!(
            !b.grow_in_place(b.capacity_in_place() + 1),
            "past its storage"
        );
        assert_eq!(b.len(), 8192);
        let mut plain = IoBuf::from(vec![1u8; 10]);
        assert!(!plain.grow_in_place(11));
        assert!(!IoBuf::zeros(10).grow_in_place(10));
    }

    #[test]
    fn size_classes_round_up_to_powers_of_two_from_4k() {
        assert_eq!(class_of(0), Some(0));
        assert_eq!(class_of(512), Some(0));
        assert_eq!(class_of(4096), Some(0));
        assert_eq!(class_of(4097), Some(1));
        assert_eq!(class_of(1 << 20), Some(8));
        assert_eq!(class_of(MAX_POOLED), Some(CLASSES - 1));
        assert_eq!(class_of(MAX_POOLED + 1), None);
    }

    #[test]
    fn a_dropped_buffer_is_reused_by_the_same_thread_without_zeroing() {
        let mut a = IoBuf::for_overwrite(64 * 1024);
        assert!(a.is_pooled());
        assert_eq!(a.as_ptr() as usize % ALIGN, 0);
        a.fill(0xAB);
        let addr = a.as_ptr();
        drop(a);
        let b = IoBuf::for_overwrite(60 * 1024);
        assert_eq!(b.as_ptr(), addr, "the same storage came back");
        assert_eq!(b.len(), 60 * 1024);
        assert!(b.iter().all(|&x| x == 0xAB), "reuse does not zero");
        drop(b);
        let z = IoBuf::zeroed(60 * 1024);
        assert!(z.iter().all(|&x| x == 0));
    }

    #[test]
    fn a_buffer_freed_on_another_thread_reaches_the_shared_cache() {
        // Fill the other thread's cache first so that the next buffer it
        // drops overflows to the shared one.
        let len = 2 << 20;
        let addr = std::thread::spawn(move || {
            let keep: Vec<IoBuf> = (0..THREAD_CACHE_BYTES / len)
                .map(|_| IoBuf::for_overwrite(len))
                .collect();
            let extra = IoBuf::for_overwrite(len);
            let addr = extra.as_ptr() as usize;
            drop(keep);
            drop(extra);
            addr
        })
        .join()
        .expect("thread");
        // Only this test uses 2 MiB buffers; the shared cache holds a
        // bounded number of them.
        let mut held = Vec::new();
        for _ in 0..=SHARED_CACHE_BYTES / len {
            held.push(IoBuf::for_overwrite(len));
        }
        assert!(
            held.iter().any(|b| b.as_ptr() as usize == addr),
            "the overflowed buffer was handed out again"
        );
    }

    #[test]
    fn idle_memory_per_thread_is_bounded() {
        let len = 1 << 20;
        let many: Vec<IoBuf> = (0..32).map(|_| IoBuf::for_overwrite(len)).collect();
        drop(many);
        let local = LOCAL.with(|c| c.borrow().bytes);
        assert!(local <= THREAD_CACHE_BYTES, "{local}");
        let shared = SHARED.lock().map(|c| c.bytes).unwrap_or(0);
        assert!(shared <= SHARED_CACHE_BYTES, "{shared}");
    }

    static RELEASED: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

    fn record(addr: usize, len: usize) {
        if let Ok(mut r) = RELEASED.lock() {
            r.push((addr, len));
        }
    }

    fn released(s: BufStorage) -> bool {
        RELEASED
            .lock()
            .map(|r| r.contains(&(s.addr(), s.len())))
            .unwrap_or(false)
    }

    #[test]
    fn storage_the_pool_frees_passes_the_release_hook_first() {
        assert!(set_release_hook(record));
        assert!(set_release_hook(record), "the same hook again is fine");
        // A thread's cache goes when the thread exits. (Overflowing the
        // shared cache here would disturb the other tests' use of it.)
        let len = 3 << 20;
        let kept = std::thread::spawn(move || {
            let a = IoBuf::for_overwrite(len);
            let sa = a.storage().expect("pooled");
            assert_eq!(sa.len(), storage_len(class_of(len).expect("class")));
            assert!(sa.contains(a.as_ptr() as usize, a.len()));
            assert!(!sa.contains(sa.addr() + 1, sa.len()));
            drop(a);
            assert!(!released(sa), "idle in the thread's cache, still alive");
            sa
        })
        .join()
        .expect("thread");
        assert!(
            released(kept),
            "at thread exit its cache was freed through the hook"
        );
        assert_eq!(
            IoBuf::from(vec![1]).storage(),
            None,
            "plain buffers untracked"
        );
    }

    #[test]
    fn lent_zeros_read_as_zeros_and_copy_on_first_write() {
        let mut z = IoBuf::zeros(64 * 1024);
        assert!(!z.is_pooled());
        assert_eq!(z.len(), 64 * 1024);
        assert!(z.iter().all(|&b| b == 0));
        z.truncate(4096);
        assert_eq!(z.len(), 4096);
        z[0] = 9;
        assert!(z.is_pooled(), "writing made a private pooled copy");
        assert_eq!((z[0], z.len()), (9, 4096));
        assert!(z.get(1..).is_some_and(|r| r.iter().all(|&b| b == 0)));
        assert!(ZEROS.iter().all(|&b| b == 0), "the shared zeros stay zero");
        let big = IoBuf::zeros(ZEROS_LEN + 4096);
        assert!(big.is_pooled() && big.iter().all(|&b| b == 0));
        assert_eq!(IoBuf::zeros(10).into_vec(), vec![0u8; 10]);
    }

    #[test]
    fn huge_and_plain_buffers_are_not_pooled() {
        let big = IoBuf::for_overwrite(MAX_POOLED + 1);
        assert!(!big.is_pooled());
        assert!(big.iter().all(|&x| x == 0));
        let v = IoBuf::from(vec![1, 2, 3]);
        assert!(!v.is_pooled());
        assert_eq!(v, vec![1, 2, 3]);
        assert_eq!(v.into_vec(), vec![1, 2, 3]);
        let mut t = IoBuf::from(vec![1, 2, 3]);
        t.truncate(2);
        assert_eq!(t, [1u8, 2]);
        t.clear();
        assert!(t.is_empty());
    }
}
