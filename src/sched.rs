//! The reactors' scheduling: a short time slice (`[reactor] slice_us`).
//!
//! A reactor wakes for a command, runs it for a few microseconds and
//! sleeps again. Linux's EEVDF scheduler (6.12 and later) lets a thread of
//! the normal class ask for a slice of its own (`sched_setattr` with
//! `sched_runtime`, 100 µs to 100 ms): a thread with a shorter slice than
//! the one running preempts it when it wakes, and is not preempted by
//! tasks with longer slices that it wakes itself before its own slice is
//! used. So a reactor whose response wakes a local initiator (or any
//! thread) on its own CPU finishes its turn and parks instead of being
//! switched out mid-turn and back in, and on a busy host it gets its CPU
//! back promptly when the next command arrives. Older kernels ignore the
//! field (no error), and a thread whose policy the admin set (batch,
//! idle, real-time, for example with systemd's `CPUSchedulingPolicy`) is
//! left alone.

use std::io;

/// `struct sched_attr` (include/uapi/linux/sched/types.h), the part up to
/// `sched_period` (SCHED_ATTR_SIZE_VER0).
#[repr(C)]
#[derive(Default)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
}

/// The calling thread's scheduling attributes.
fn get_attr() -> io::Result<SchedAttr> {
    let size = std::mem::size_of::<SchedAttr>() as u32;
    let mut attr = SchedAttr {
        size,
        ..SchedAttr::default()
    };
    // SAFETY: `attr` is a valid, writable `sched_attr` of `size` bytes
    // (SCHED_ATTR_SIZE_VER0) that outlives the call; pid 0 is this thread.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            0,
            &mut attr as *mut SchedAttr,
            size,
            0,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(attr)
}

/// Asks the kernel for a slice of `us` microseconds for the calling
/// thread, keeping its policy and nice value. `Ok(false)`: left alone (the
/// thread is not in the normal policy).
pub fn set_slice(us: u64) -> io::Result<bool> {
    let mut attr = get_attr()?;
    if attr.policy != libc::SCHED_OTHER as u32 {
        return Ok(false);
    }
    attr.size = std::mem::size_of::<SchedAttr>() as u32;
    attr.flags = 0;
    attr.runtime = us.saturating_mul(1000);
    // SAFETY: as above; the kernel only reads `attr`.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The call succeeds on this thread, leaves its nice value alone, and
    /// (Linux 6.12 and later, which report it back) the slice is the one
    /// asked for.
    #[test]
    fn slice_keeps_nice() {
        let before = nice();
        assert!(set_slice(100).expect("sched_setattr"));
        assert_eq!(nice(), before);
        let runtime = get_attr().expect("sched_getattr").runtime;
        if kernel_at_least(6, 12) {
            assert_eq!(runtime, 100_000);
        }
        assert!(set_slice(0).expect("back to the default"));
    }

    fn nice() -> i32 {
        // SAFETY: getpriority has no memory arguments.
        unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }
    }

    fn kernel_at_least(major: u32, minor: u32) -> bool {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let mut parts = release
            .trim()
            .split(|c: char| !c.is_ascii_digit())
            .map(|p| p.parse::<u32>().unwrap_or(0));
        let have = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        have >= (major, minor)
    }
}
