//! `[reactor]`: the data path's threads.

use serde::{Deserialize, Serialize};

use super::values::{IoUringMode, Setting};

/// The data path's threads: reactors that own the connections and run
/// commands to completion where the LUN allows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReactorSettings {
    /// Reactor threads serving TCP connections; 0 = one per core, 0..=256.
    pub threads: usize,
    /// Run a command on its connection's reactor when its LUN can complete
    /// it without blocking (memory and null stores, page-cache hits of
    /// buffered files). `false` sends every command to the LUN's workers.
    pub run_to_completion: bool,
    /// What a reactor does with a command on a file or block-device LUN
    /// that cannot complete at once (a read missing the page cache, a
    /// write, SYNCHRONIZE CACHE): "auto" submits it to the reactor's own
    /// io_uring when the kernel offers one; "off" sends it to the LUN's
    /// workers.
    pub io_uring: Setting<IoUringMode>,
    /// The longest a connection checks its socket without sleeping before
    /// its reactor parks, in microseconds, 0..=1000; 0 never polls. The
    /// window adapts: it grows while waits are shorter than this and
    /// shrinks to nothing on an idle connection.
    pub busy_poll_us: u64,
    /// The time slice each reactor thread asks the kernel for, in
    /// microseconds: 0 (the kernel's default) or 100..=100000. A short
    /// slice lets a reactor that wakes for a command preempt a longer-sliced
    /// task on its CPU, and keeps the tasks its responses wake from
    /// preempting it mid-turn (Linux 6.12 and later; older kernels ignore
    /// it).
    pub slice_us: u64,
    /// A reactor writes a short (at most 128 KiB), non-FUA write to a
    /// buffered file or block device itself, into the page cache, instead
    /// of handing it to the LUN's workers; a write the kernel made wait
    /// (over 500 µs) sends that reactor's writes to the workers for a
    /// second. `false`: every such write goes to the workers.
    pub inline_writes: bool,
}

/// `[reactor] busy_poll_us` when not set.
pub const DEFAULT_BUSY_POLL_US: u64 = 100;

/// `[reactor] slice_us` when not set: the shortest slice Linux grants.
pub const DEFAULT_SLICE_US: u64 = 100;

impl Default for ReactorSettings {
    fn default() -> Self {
        Self {
            threads: 0,
            run_to_completion: true,
            io_uring: Setting::new(IoUringMode::Auto, "auto"),
            busy_poll_us: DEFAULT_BUSY_POLL_US,
            slice_us: DEFAULT_SLICE_US,
            inline_writes: true,
        }
    }
}

impl ReactorSettings {
    /// `io_uring = "auto"`.
    pub fn io_uring_enabled(&self) -> bool {
        self.io_uring.get() == IoUringMode::Auto
    }
}
