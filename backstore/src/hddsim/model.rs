//! The deterministic disk model: one 7200 rpm SATA disk, or md RAID-0 over
//! several. Pure arithmetic on nanoseconds: the caller passes `now` (virtual
//! time in the benchmark, time since an epoch in the sleeping engine), so one
//! model serves both.
//!
//! Per request on one disk:
//! - 0.2 ms command overhead;
//! - a sequential continuation (starting where the previous request on that
//!   disk ended) pays no positioning; any other access pays a seek of
//!   0.8 + 14.4·√(d/D) ms (none when d = 0) plus half a rotation (8.33 ms / 2);
//! - transfer at the zone's rate, 120 MB/s at the outer edge falling linearly
//!   to 60 MB/s at the inner edge (MB = 10^6 bytes);
//! - one actuator: requests are served in submission order, each starting
//!   when the previous one on that disk finishes.

use std::fmt;

/// Nanoseconds per millisecond.
const MS: f64 = 1_000_000.0;

/// Parameters of one disk.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DiskParams {
    /// Capacity in bytes (D in the seek formula).
    pub capacity: u64,
    /// Fixed part of a seek, ms.
    pub seek_base_ms: f64,
    /// Full-stroke increment of a seek, ms (times √(d/D)).
    pub seek_stroke_ms: f64,
    /// One revolution, ms (7200 rpm = 8.33 ms).
    pub rotation_ms: f64,
    /// Transfer rate at the outer edge, bytes per second.
    pub outer_rate: f64,
    /// Transfer rate at the inner edge, bytes per second.
    pub inner_rate: f64,
    /// Per-command overhead, ms.
    pub overhead_ms: f64,
}

impl Default for DiskParams {
    /// The 7200 rpm SATA disk, 250 GB (two of them made the seed's md0).
    fn default() -> Self {
        Self {
            capacity: 250_000_000_000,
            seek_base_ms: 0.8,
            seek_stroke_ms: 14.4,
            rotation_ms: 60_000.0 / 7200.0,
            outer_rate: 120e6,
            inner_rate: 60e6,
            overhead_ms: 0.2,
        }
    }
}

impl DiskParams {
    /// Seek time over `distance` bytes, ns.
    pub fn seek_ns(&self, distance: u64) -> u64 {
        if distance == 0 || self.capacity == 0 {
            return 0;
        }
        let frac = (distance as f64 / self.capacity as f64).min(1.0);
        ms_to_ns(self.seek_base_ms + self.seek_stroke_ms * frac.sqrt())
    }

    /// Transfer rate at byte `offset`, bytes per second.
    pub fn rate_at(&self, offset: u64) -> f64 {
        let frac = if self.capacity == 0 {
            0.0
        } else {
            (offset as f64 / self.capacity as f64).min(1.0)
        };
        self.outer_rate - (self.outer_rate - self.inner_rate) * frac
    }

    /// Transfer time of `len` bytes from `offset`, ns (rate at the midpoint).
    pub fn transfer_ns(&self, offset: u64, len: u64) -> u64 {
        let mid = offset.saturating_add(len / 2);
        (len as f64 * 1e9 / self.rate_at(mid)).round() as u64
    }

    /// Average positioning of a random access: mean seek over a uniform
    /// distance (E√x = 8/15) plus half a rotation, ns. The competitive rule
    /// of the `streams` policy sizes its window from this.
    pub fn mean_positioning_ns(&self) -> u64 {
        ms_to_ns(self.seek_base_ms + self.seek_stroke_ms * 8.0 / 15.0 + self.rotation_ms / 2.0)
    }

    /// What skipping a short gap forward costs a disk beyond the time the
    /// gap takes to pass under the head: the command overhead and the
    /// seek's fixed part (head switch and settle), ns. The rotation is no
    /// part of it: a disk with the next piece queued waits for the gap to
    /// pass whether it reads it or not (this model charges half a rotation
    /// on every access that does not continue the previous one, so a
    /// skip costs more here than on a disk).
    pub fn skip_ns(&self) -> u64 {
        ms_to_ns(self.overhead_ms + self.seek_base_ms)
    }

    /// Service time of one request given where the head is, ns.
    fn service_ns(&self, head: &Head, offset: u64, len: u64) -> u64 {
        let positioning = if head.next == Some(offset) {
            0
        } else {
            let distance = head.next.map_or(offset, |h| h.abs_diff(offset));
            self.seek_ns(distance) + ms_to_ns(self.rotation_ms / 2.0)
        };
        ms_to_ns(self.overhead_ms) + positioning + self.transfer_ns(offset, len)
    }
}

fn ms_to_ns(ms: f64) -> u64 {
    (ms * MS).round() as u64
}

/// A device: one disk, or md RAID-0 over `disks` disks with `chunk`-byte chunks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ArrayParams {
    /// The parameters of each disk (all disks are alike).
    pub disk: DiskParams,
    /// Number of disks, at least 1; more than one stripes (RAID-0).
    pub disks: u32,
    /// Stripe chunk in bytes (md's default is 64 KiB).
    pub chunk: u64,
}

impl Default for ArrayParams {
    /// The seed's md0: RAID-0 of two default disks, 64 KiB chunks.
    fn default() -> Self {
        Self {
            disk: DiskParams::default(),
            disks: 2,
            chunk: 64 << 10,
        }
    }
}

impl ArrayParams {
    /// One disk, no striping.
    pub fn single(disk: DiskParams) -> Self {
        Self {
            disk,
            disks: 1,
            chunk: 64 << 10,
        }
    }

    /// Usable bytes.
    pub fn capacity(&self) -> u64 {
        self.disk
            .capacity
            .saturating_mul(u64::from(self.disks.max(1)))
    }

    /// Streaming rate of the whole array at the outer edge, bytes per second.
    pub fn outer_rate(&self) -> f64 {
        self.disk.outer_rate * f64::from(self.disks.max(1))
    }

    /// Splits `[offset, offset + len)` into one contiguous piece per disk:
    /// `(disk, disk offset, bytes)`. A contiguous array range maps to a
    /// contiguous range on each disk (chunks k, k+n, k+2n... are adjacent).
    pub fn split(&self, offset: u64, len: u64) -> Vec<(usize, u64, u64)> {
        let disks = u64::from(self.disks.max(1));
        if disks == 1 || self.chunk == 0 {
            return vec![(0, offset, len)];
        }
        let mut pieces: Vec<(usize, u64, u64)> = Vec::new();
        let end = offset.saturating_add(len);
        let mut pos = offset;
        while pos < end {
            let chunk_no = pos / self.chunk;
            let within = pos % self.chunk;
            let n = (self.chunk - within).min(end - pos);
            let disk = (chunk_no % disks) as usize;
            let disk_off = (chunk_no / disks) * self.chunk + within;
            match pieces.iter_mut().find(|p| p.0 == disk) {
                Some(p) if p.1 + p.2 == disk_off => p.2 += n,
                Some(_) => pieces.push((disk, disk_off, n)),
                None => pieces.push((disk, disk_off, n)),
            }
            pos += n;
        }
        pieces
    }
}

/// Where a disk's head is and when it is free.
#[derive(Debug, Clone, Copy, Default)]
struct Head {
    /// The byte after the previous request, when there was one.
    next: Option<u64>,
    /// When the actuator finishes its queued work, ns.
    busy_until: u64,
}

/// Mutable state of a device: one head per disk, and busy counters.
#[derive(Debug, Clone)]
pub struct ArrayState {
    params: ArrayParams,
    heads: Vec<Head>,
    /// Requests served per disk (pieces).
    pub requests: u64,
    /// Nanoseconds each disk spent busy, summed.
    pub busy_ns: u64,
}

impl ArrayState {
    /// A device at rest: every head idle at byte 0 (a first request seeks
    /// from there), counters at zero.
    pub fn new(params: ArrayParams) -> Self {
        Self {
            params,
            heads: vec![Head::default(); params.disks.max(1) as usize],
            requests: 0,
            busy_ns: 0,
        }
    }

    /// The parameters the state models.
    pub fn params(&self) -> &ArrayParams {
        &self.params
    }

    /// Queues a request at time `now` behind everything already queued on
    /// the disks it touches; returns when its last piece completes, ns.
    pub fn submit(&mut self, now: u64, offset: u64, len: u64) -> u64 {
        let mut done = now;
        for (disk, disk_off, n) in self.params.split(offset, len) {
            let Some(head) = self.heads.get_mut(disk) else {
                continue;
            };
            let service = self.params.disk.service_ns(head, disk_off, n);
            let start = head.busy_until.max(now);
            head.busy_until = start + service;
            head.next = Some(disk_off + n);
            self.requests += 1;
            self.busy_ns += service;
            done = done.max(head.busy_until);
        }
        done
    }
}

impl fmt::Display for ArrayParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let gb = self.disk.capacity as f64 / 1e9;
        if self.disks > 1 {
            write!(
                f,
                "md RAID-0 of {} x {gb:.0} GB 7200 rpm disks, {} KiB chunks",
                self.disks,
                self.chunk >> 10
            )
        } else {
            write!(f, "one {gb:.0} GB 7200 rpm disk")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SplitMix64, as the benchmark's generator (`rustgt-rabench`), so
    /// the random offsets are the same as before it moved out.
    struct SplitMix64(u64);

    impl SplitMix64 {
        fn new(seed: u64) -> Self {
            Self(seed)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            (z ^ (z >> 31)) % n
        }
    }

    #[test]
    fn sequential_1mib_reads_reach_about_118_mb_s_at_the_outer_edge() {
        let mut disk = ArrayState::new(ArrayParams::single(DiskParams::default()));
        let mut now = 0;
        let n = 256u64;
        for i in 0..n {
            now = disk.submit(now, i << 20, 1 << 20);
        }
        let mb_s = (n << 20) as f64 / (now as f64 / 1e9) / 1e6;
        assert!((116.0..=119.5).contains(&mb_s), "{mb_s} MB/s");
    }

    #[test]
    fn random_4k_reads_at_qd1_reach_about_78_iops() {
        let params = ArrayParams::single(DiskParams::default());
        let mut disk = ArrayState::new(params);
        let mut rng = SplitMix64::new(7);
        let blocks = params.capacity() / 4096;
        let mut now = 0;
        let n = 4000u64;
        for _ in 0..n {
            now = disk.submit(now, rng.below(blocks) * 4096, 4096);
        }
        let iops = n as f64 / (now as f64 / 1e9);
        assert!((76.0..=80.0).contains(&iops), "{iops} IOPS");
    }

    #[test]
    fn raid0_stripes_large_reads_over_both_disks() {
        let params = ArrayParams::default();
        assert_eq!(
            params.split(0, 256 << 10),
            vec![(0, 0, 128 << 10), (1, 0, 128 << 10)]
        );
        assert_eq!(
            params.split(96 << 10, 64 << 10),
            vec![(1, 32 << 10, 32 << 10), (0, 64 << 10, 32 << 10)]
        );
        let mut array = ArrayState::new(params);
        let mut now = 0;
        for i in 0..128u64 {
            now = array.submit(now, i << 21, 2 << 20);
        }
        let mb_s = (128u64 << 21) as f64 / (now as f64 / 1e9) / 1e6;
        assert!((225.0..=240.0).contains(&mb_s), "{mb_s} MB/s");
    }

    #[test]
    fn model_is_deterministic_and_zoned() {
        let d = DiskParams::default();
        assert_eq!(d.seek_ns(0), 0);
        assert_eq!(d.seek_ns(d.capacity), 15_200_000);
        assert!((d.rate_at(0) - 120e6).abs() < 1.0);
        assert!((d.rate_at(d.capacity) - 60e6).abs() < 1.0);
        // A continuation pays no positioning; a jump pays seek + half a turn.
        let mut s = ArrayState::new(ArrayParams::single(d));
        let t1 = s.submit(0, 0, 4096);
        let t2 = s.submit(t1, 4096, 4096) - t1;
        let t3 = s.submit(t1 + t2, 1 << 30, 4096) - (t1 + t2);
        assert!(t2 < 300_000, "{t2}");
        assert!(t3 > 5_000_000, "{t3}");
    }
}
