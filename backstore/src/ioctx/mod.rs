//! # The per-LUN I/O context
//!
//! One [`IoContext`] per LUN, shared by all the workers that serve it. It
//! wraps the LUN's engine and is itself a [`Backstore`](crate::Backstore),
//! so the SCSI core is unchanged: it still holds one `Arc<dyn Backstore>`.
//! It owns what SCST's shared io_context and Linux's readahead gave a LUN:
//!
//! - the readahead policy state ([`ReadaheadPolicy`]): one state for the
//!   LUN, or one per worker in [`ContextMode::PerWorker`] (the broken
//!   pre-patch behaviour, kept for comparison);
//! - a readahead cache of 4 KiB pages with a memory bound, coherent with
//!   writes (a read that starts after a write returned sees its data);
//! - a backing-read queue that coalesces adjacent requests into large
//!   reads, served by a few I/O threads so readahead runs ahead of demand;
//! - per-LUN statistics ([`IoStats`]);
//! - on a seeking device shared with other LUNs, turns at the device
//!   ([`DeviceGate`]), so that the contexts' streams do not interleave at
//!   the disk.
//!
//! Policies are pure state machines ([`Readahead`]) over a view of the
//! cache ([`RaView`]); the benchmark's simulation runs the same code in
//! virtual time. This layer never sees a CDB.

mod cache;
mod context;
mod core;
mod gate;
mod linux;
mod planners;
mod policy;
mod queue;
pub mod simulation;
mod stats;
mod streams;

use std::cell::Cell;

pub use cache::PAGE;
pub use context::IoContext;
pub use gate::{DeviceGate, GateStats};
pub use linux::LinuxReadahead;
pub use planners::new_policy;
pub use policy::{
    ContextMode, NoReadahead, PolicyParams, RaView, Readahead, ReadaheadChoice, ReadaheadPolicy,
    KERNEL_MAX_PAGES,
};
pub use stats::{IoStats, Log2Histogram};
pub use streams::{StreamParams, Streams};

pub(crate) use self::core::{Core, CoreConfig, Ticket};
pub(crate) use queue::Batch;

use crate::hddsim::ArrayParams;
use crate::{error::BackstoreError, error::Result};

thread_local! {
    static WORKER: Cell<Option<usize>> = const { Cell::new(None) };
    static READAHEAD_IO: Cell<bool> = const { Cell::new(false) };
}

/// Whether the backing read the calling thread is doing is readahead that
/// nobody waits for yet (Linux's REQ_RAHEAD), as opposed to a demand read.
/// Engines may use it; the tests use it to check the device turns.
pub fn is_readahead_io() -> bool {
    READAHEAD_IO.with(Cell::get)
}

pub(crate) fn set_readahead_io(on: bool) {
    READAHEAD_IO.with(|r| r.set(on));
}

/// Tells the I/O contexts which worker the calling thread is. The SCSI
/// core's worker threads call it once at start; per-worker mode keys its
/// readahead states on it. Threads that never call it count as worker 0.
pub fn set_worker_index(index: usize) {
    WORKER.with(|w| w.set(Some(index)));
}

/// The index set by [`set_worker_index`] on this thread.
pub fn worker_index() -> Option<usize> {
    WORKER.with(Cell::get)
}

/// What the context knows of the backing device, for the competitive rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceHints {
    /// Mean positioning time of a random access (seek + rotation), ns.
    pub positioning_ns: u64,
    /// Streaming bandwidth, bytes per second.
    pub bandwidth: u64,
}

impl DeviceHints {
    /// The hints of a simulated device.
    pub fn of_array(params: &ArrayParams) -> Self {
        Self {
            positioning_ns: params.disk.mean_positioning_ns(),
            bandwidth: params.outer_rate() as u64,
        }
    }

    /// Bytes the device transfers in one positioning time.
    pub fn competitive_bytes(&self) -> u64 {
        (u128::from(self.positioning_ns) * u128::from(self.bandwidth) / 1_000_000_000)
            .try_into()
            .unwrap_or(u64::MAX)
    }
}

impl Default for DeviceHints {
    /// A rotating disk pair like the seed's md0.
    fn default() -> Self {
        Self::of_array(&ArrayParams::default())
    }
}

/// How a context takes turns with the other LUNs' contexts on its device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceSlice {
    /// Take turns on a device that seeks (a rotating disk, hddsim), with a
    /// budget of four positioning times of transfer per turn.
    #[default]
    Auto,
    /// Never take turns.
    Off,
    /// Take turns on any device the engine can name, this many bytes each.
    Bytes(u64),
}

impl std::str::FromStr for DeviceSlice {
    type Err = ();

    /// "auto", "off", or a size such as "16M".
    fn from_str(s: &str) -> std::result::Result<Self, ()> {
        match s {
            "auto" => Ok(Self::Auto),
            "off" => Ok(Self::Off),
            _ => match crate::spec::parse_size(s) {
                Some(n) if n >= PAGE => Ok(Self::Bytes(n)),
                _ => Err(()),
            },
        }
    }
}

/// Configuration of one LUN's I/O context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoContextOptions {
    pub policy: ReadaheadPolicy,
    pub mode: ContextMode,
    /// Memory bound of the readahead cache, bytes.
    pub cache_bytes: u64,
    /// Largest readahead window of `classic` and `context`, and the floor of
    /// `streams`' maximum distance, bytes.
    pub max_readahead: u64,
    /// Largest backing read after coalescing, bytes.
    pub max_io: u64,
    /// Threads issuing backing reads (the context's I/O depth).
    pub io_threads: usize,
    pub device: DeviceHints,
    /// Turns at a device shared with other LUNs.
    pub device_slice: DeviceSlice,
}

impl Default for IoContextOptions {
    /// `streams`, shared, 64 MiB cache, 4 MiB readahead, 1 MiB backing
    /// reads, 4 I/O threads, turns on seeking devices.
    fn default() -> Self {
        Self {
            policy: ReadaheadPolicy::Streams,
            mode: ContextMode::Shared,
            cache_bytes: 64 << 20,
            max_readahead: 4 << 20,
            max_io: 1 << 20,
            io_threads: 4,
            device: DeviceHints::default(),
            device_slice: DeviceSlice::Auto,
        }
    }
}

impl IoContextOptions {
    /// Refuses sizes that cannot work.
    pub fn validate(&self) -> Result<()> {
        let problem = if self.cache_bytes < 1 << 20 {
            Some("readahead cache must be at least 1 MiB")
        } else if self.max_readahead < PAGE {
            Some("maximum readahead must be at least 4 KiB")
        } else if self.max_io < PAGE {
            Some("maximum backing read must be at least 4 KiB")
        } else if self.io_threads == 0 || self.io_threads > 256 {
            Some("I/O threads must be 1..=256")
        } else if matches!(self.device_slice, DeviceSlice::Bytes(n) if n < PAGE) {
            Some("device slice must be at least 4 KiB")
        } else {
            None
        };
        match problem {
            Some(p) => Err(BackstoreError::Config(p.into())),
            None => Ok(()),
        }
    }

    /// Bytes per turn at a shared device that `seeks` (or not), or `None`
    /// when the context should not take turns there.
    pub fn turn_budget(&self, seeks: bool) -> Option<u64> {
        match self.device_slice {
            DeviceSlice::Off => None,
            DeviceSlice::Auto if !seeks => None,
            DeviceSlice::Auto => Some(4 * self.device.competitive_bytes().max(PAGE)),
            DeviceSlice::Bytes(n) => Some(n),
        }
    }

    /// The policy sizes in pages.
    pub fn policy_params(&self) -> PolicyParams {
        PolicyParams {
            max_pages: (self.max_readahead / PAGE).max(1),
            cache_pages: (self.cache_bytes / PAGE).max(1),
            competitive_pages: self.device.competitive_bytes() / PAGE,
            io_pages: (self.max_io / PAGE).max(1),
        }
    }

    pub(crate) fn core_config(&self, size: u64) -> CoreConfig {
        CoreConfig {
            size,
            policy: self.policy,
            mode: self.mode,
            params: self.policy_params(),
            max_io_pages: (self.max_io / PAGE).max(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_index_is_per_thread() {
        set_worker_index(3);
        assert_eq!(worker_index(), Some(3));
        let other = std::thread::spawn(worker_index).join().ok().flatten();
        assert_eq!(other, None);
    }

    #[test]
    fn competitive_rule_of_the_seed_array() {
        let h = DeviceHints::default();
        // 8.48 ms seek + 4.17 ms half turn at 240 MB/s: about 3 MB.
        let b = h.competitive_bytes();
        assert!((2_900_000..3_200_000).contains(&b), "{b}");
        assert!(IoContextOptions::default().validate().is_ok());
        let bad = IoContextOptions {
            io_threads: 0,
            ..IoContextOptions::default()
        };
        assert!(bad.validate().is_err());
    }
}
