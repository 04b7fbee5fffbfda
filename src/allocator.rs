//! The process's C allocator when rustgt is built with `rbd`: librbd and
//! librados allocate and free small buffers on their own threads for every
//! request (message frames, buffer lists, completions), often freeing on
//! another thread than the one that allocated. glibc's malloc spends a
//! large share of the gateway's CPU on that: in a profile at 4 KiB random
//! reads, QD 32, `malloc`, `_int_malloc` and `malloc_consolidate` took more
//! than half of the samples of librbd's `io_context_pool` thread, and with
//! tcmalloc the daemon's CPU per read fell by about a tenth. Ceph's own
//! daemons run on gperftools' tcmalloc, and so does rustgt with `rbd`: the
//! binary names `libtcmalloc_minimal.so.4` before the C library, so its
//! `malloc` and `free` serve the whole process (Rust's allocations
//! included).

use std::ffi::{c_char, c_int, c_void, CStr};

#[link(
    name = "libtcmalloc_minimal.so.4",
    kind = "dylib",
    modifiers = "+verbatim"
)]
unsafe extern "C" {
    /// gperftools' version: major, minor and the version string.
    fn tc_version(major: *mut c_int, minor: *mut c_int, patch: *mut *const c_char)
        -> *const c_char;
    /// tcmalloc's own `malloc` (the same function as its `malloc`).
    fn tc_malloc(size: usize) -> *mut c_void;
}

/// Which allocator serves `malloc` in this process, for the start-up log:
/// gperftools' version when the process's `malloc` is tcmalloc's, or a
/// warning that it is not (the library was linked but another `malloc`
/// came first).
pub fn describe() -> String {
    let (mut major, mut minor) = (0, 0);
    let mut patch: *const c_char = std::ptr::null();
    // SAFETY: tc_version only writes the three out-parameters and returns
    // a pointer to a static NUL-terminated string (or null).
    let s = unsafe { tc_version(&mut major, &mut minor, &mut patch) };
    let version = if s.is_null() {
        format!("tcmalloc {major}.{minor}")
    } else {
        // SAFETY: non-null, static and NUL-terminated.
        unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
    };
    // SAFETY: a lookup by name in the global scope; the name is a static
    // NUL-terminated string.
    let malloc = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"malloc".as_ptr()) };
    if malloc == tc_malloc as *mut c_void {
        version
    } else {
        format!("not {version}: another malloc came first")
    }
}
