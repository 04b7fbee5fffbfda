//! Lock-free counters and log2 histograms for the LUN store wrapper, and
//! their wire form ([`Histogram`]) shared by the stats command and the
//! Prometheus exposition.

use rustgt_histogram::AtomicLog2Histogram;
use serde::{Deserialize, Serialize};

/// Buckets of an [`AtomicLog2`]: bucket `i` counts values in
/// `[2^i, 2^(i+1))` (bucket 0 also counts 0); the last bucket takes
/// everything above.
pub const BUCKETS: usize = 40;

/// A histogram of `u64` values in power-of-two buckets, updated without
/// locks from any worker thread.
#[derive(Debug, Default)]
pub struct AtomicLog2(AtomicLog2Histogram<BUCKETS>);

impl AtomicLog2 {
    pub fn record(&self, value: u64) {
        self.0.record(value);
    }

    /// A snapshot in wire form, values in `unit`.
    pub fn snapshot(&self, unit: &str) -> Histogram {
        Histogram::from_log2(unit, &self.0.counts(), self.0.sum())
    }
}

/// A histogram as the admin protocol carries it: only non-empty buckets,
/// each with its inclusive upper bound.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Histogram {
    /// "us" (microseconds) or "bytes".
    pub unit: String,
    pub count: u64,
    pub sum: u64,
    /// `[le, count]`: `count` values were `<= le` and above the previous
    /// bucket's bound (not cumulative). The last bound may be `u64::MAX`.
    pub buckets: Vec<(u64, u64)>,
}

impl Histogram {
    /// From log2 bucket counts where bucket `i` holds `[2^i, 2^(i+1))`
    /// and the last bucket is open-ended.
    pub fn from_log2(unit: &str, counts: &[u64], sum: u64) -> Histogram {
        let last = counts.len().saturating_sub(1);
        let buckets = counts
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(i, c)| {
                let le = if i >= last || i >= 63 {
                    u64::MAX
                } else {
                    (2u64 << i) - 1
                };
                (le, *c)
            })
            .collect();
        Histogram {
            unit: unit.to_owned(),
            count: counts.iter().sum(),
            sum,
            buckets,
        }
    }

    /// From the backstore's [`rustgt_backstore::ioctx::Log2Histogram`],
    /// dividing values by `div` (e.g. 1000 for ns to us).
    pub fn from_backstore(
        unit: &str,
        h: &rustgt_backstore::ioctx::Log2Histogram,
        div: u64,
    ) -> Self {
        let div = div.max(1);
        let buckets = h
            .buckets()
            .into_iter()
            .map(|(lower, count)| {
                // `lower` is 0 or 2^i; the bucket ends just before 2^(i+1).
                let upper = if lower == 0 {
                    1
                } else {
                    lower.saturating_mul(2).saturating_sub(1)
                };
                (upper / div, count)
            })
            .collect();
        let mean = h.mean() / div as f64;
        Histogram {
            unit: unit.to_owned(),
            count: h.count(),
            sum: (mean * h.count() as f64) as u64,
            buckets,
        }
    }

    /// Smallest bucket bound below which a fraction `q` of the values lie.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((self.count as f64) * q.clamp(0.0, 1.0)).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (le, c) in &self.buckets {
            seen += c;
            if seen >= rank {
                return *le;
            }
        }
        u64::MAX
    }

    /// Mean value, 0 when empty.
    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum as f64 / self.count as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log2_buckets_have_inclusive_upper_bounds() {
        let h = AtomicLog2::default();
        for v in [0, 1, 2, 3, 4096, 4096, 65536] {
            h.record(v);
        }
        let s = h.snapshot("bytes");
        assert_eq!(s.count, 7);
        assert_eq!(s.sum, 73734);
        assert_eq!(s.buckets, vec![(1, 2), (3, 2), (8191, 2), (131_071, 1)]);
        assert_eq!(s.quantile(0.5), 3);
        assert_eq!(s.quantile(1.0), 131_071);
        assert_eq!(Histogram::default().quantile(0.9), 0);
    }

    #[test]
    fn huge_values_land_in_the_open_last_bucket() {
        let h = AtomicLog2::default();
        h.record(u64::MAX);
        let s = h.snapshot("us");
        assert_eq!(s.buckets, vec![(u64::MAX, 1)]);
    }

    #[test]
    fn backstore_histograms_convert_with_a_divisor() {
        let mut b = rustgt_backstore::ioctx::Log2Histogram::default();
        b.record(4096);
        b.record(1_000_000);
        let h = Histogram::from_backstore("us", &b, 1000);
        assert_eq!(h.count, 2);
        assert_eq!(h.buckets, vec![(8, 1), (1048, 1)]);
    }
}
