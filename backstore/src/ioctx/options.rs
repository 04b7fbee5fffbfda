//! The options of an I/O context ([`IoContextOptions`]) and what it knows
//! of the device under it ([`DeviceHints`], [`DeviceSlice`]).

use super::cache::PAGE;
use super::core::CoreConfig;
use super::policy::{ContextMode, PolicyParams, ReadaheadPolicy};
use crate::error::{BackstoreError, Result};
use crate::hddsim::ArrayParams;

/// What the context knows of the backing device, for the competitive rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceHints {
    /// Mean positioning time of a random access (seek + rotation), ns.
    pub positioning_ns: u64,
    /// Streaming bandwidth, bytes per second.
    pub bandwidth: u64,
    /// What a short forward skip costs beyond passing the gap (command
    /// overhead and the seek's fixed part), ns: `streams` reads a
    /// stride's gap through only when it transfers in less.
    pub skip_ns: u64,
}

impl DeviceHints {
    /// The hints of a simulated device.
    pub fn of_array(params: &ArrayParams) -> Self {
        Self {
            positioning_ns: params.disk.mean_positioning_ns(),
            bandwidth: params.outer_rate() as u64,
            skip_ns: params.disk.skip_ns(),
        }
    }

    /// Bytes the device transfers in one positioning time.
    pub fn competitive_bytes(&self) -> u64 {
        self.bytes_in(self.positioning_ns)
    }

    /// Bytes the device transfers in the time a short skip costs: a
    /// stride's gap up to this is cheaper to read through than to skip.
    pub fn skip_bytes(&self) -> u64 {
        self.bytes_in(self.skip_ns)
    }

    fn bytes_in(&self, ns: u64) -> u64 {
        (u128::from(ns) * u128::from(self.bandwidth) / 1_000_000_000)
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

/// Positioning times of transfer in an `auto` turn. Sixteen, about 200
/// ms of streaming on a 7200 rpm pair: two LUNs at opposite ends pay a
/// switch across the stroke (about 1.5 mean positionings) twice per round,
/// so a round of two turns of N positionings loses about 3 / (2N + 3) of
/// its time to seeking: a fifth at four (the seed's pair reached 131 of
/// its no-seek 165 MB/s on md0, virtual time), 11% at eight (146), under
/// a tenth at sixteen (155; 150 end to end). A turn only matters while
/// another context waits for the device; a stream's readahead window
/// covers the wait, so its reader's latency does not grow with it (the
/// seed's p99 stays 6.7 ms at eight and sixteen).
pub const TURN_POSITIONINGS: u64 = 16;

/// How a context takes turns with the other LUNs' contexts on its device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceSlice {
    /// Take turns on a device that seeks (a rotating disk, hddsim), with a
    /// budget of sixteen (`TURN_POSITIONINGS`) positioning times of
    /// transfer per turn.
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
    /// The readahead policy the context runs.
    pub policy: ReadaheadPolicy,
    /// One context for the LUN, or one per worker.
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
    /// Positioning time and bandwidth of the backing device: the bytes one
    /// positioning time transfers bound `streams`' distances from below
    /// and decide when the backing queue holds a read for a demand read,
    /// and the `auto` device slice is a multiple of them.
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
            DeviceSlice::Auto => {
                Some(TURN_POSITIONINGS.saturating_mul(self.device.competitive_bytes().max(PAGE)))
            }
            DeviceSlice::Bytes(n) => Some(n),
        }
    }

    /// The policy sizes in pages.
    pub fn policy_params(&self) -> PolicyParams {
        PolicyParams {
            max_pages: (self.max_readahead / PAGE).max(1),
            cache_pages: (self.cache_bytes / PAGE).max(1),
            competitive_pages: self.device.competitive_bytes() / PAGE,
            skip_pages: self.device.skip_bytes() / PAGE,
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

    /// The stride rule of `streams` on the seed's pair: a short skip costs
    /// 1.0 ms (0.2 ms command, 0.8 ms seek) = 240 KB of transfer at 240
    /// MB/s, so a gap of 3x a 64 KiB request (192 KiB) is read through and
    /// one of 4x (256 KiB) skipped; from the model, not a constant.
    #[test]
    fn a_short_skip_of_the_seed_array_is_worth_240_kb() {
        let h = DeviceHints::default();
        assert_eq!(h.skip_ns, 1_000_000);
        let b = h.skip_bytes();
        assert!((192 << 10..256 << 10).contains(&b), "{b}");
        let faster = DeviceHints {
            bandwidth: 2 * h.bandwidth,
            ..h
        };
        assert_eq!(faster.skip_bytes(), 2 * b);
    }

    #[test]
    fn auto_turns_on_a_seeking_device_last_sixteen_positioning_times() {
        let o = IoContextOptions::default();
        let pos = o.device.competitive_bytes();
        let b = o.turn_budget(true).unwrap_or(0);
        assert_eq!(b, 16 * pos);
        // About 48 MB: 200 ms of streaming at the outer rate.
        let ms = b * 1000 / o.device.bandwidth;
        assert!((190..=220).contains(&ms), "{ms} ms");
        // Two LUNs at the seed's ends (240 and 126 MB/s, 18.8 ms switches)
        // lose under a tenth of a round to seeking.
        let round = b as f64 / 240e6 + b as f64 / 126e6;
        assert!(2.0 * 0.0188 / (round + 2.0 * 0.0188) < 0.1);
        // No turns on a device that does not seek, or when turned off; an
        // explicit size is taken as it is.
        assert_eq!(o.turn_budget(false), None);
        let off = IoContextOptions {
            device_slice: DeviceSlice::Off,
            ..o
        };
        assert_eq!(off.turn_budget(true), None);
        let fixed = IoContextOptions {
            device_slice: DeviceSlice::Bytes(16 << 20),
            ..o
        };
        assert_eq!(fixed.turn_budget(false), Some(16 << 20));
    }
}
