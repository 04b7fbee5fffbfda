//! # rustgt-histogram: log2-bucketed histograms
//!
//! The one histogram shape rustgt counts latencies and sizes in: `N`
//! power-of-two buckets, bucket `i` holding values in `[2^i, 2^(i+1))`
//! (bucket 0 also holds 0) and the last bucket everything from `2^(N-1)`
//! up. Fixed-size and cheap to update: [`Log2Histogram`] is a plain value
//! (updated under its owner's lock, cloned as a snapshot),
//! [`AtomicLog2Histogram`] is updated lock-free from any thread.
//! A leaf crate: it depends on nothing of rustgt.

#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering};

/// The bucket of `value` in a histogram of `n` buckets.
pub fn bucket_of(value: u64, n: usize) -> usize {
    (63 - (value | 1).leading_zeros() as usize).min(n.saturating_sub(1))
}

/// Counts of values in power-of-two buckets (see the [crate docs](crate)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Log2Histogram<const N: usize> {
    counts: [u64; N],
    total: u64,
    sum: u128,
}

impl<const N: usize> Default for Log2Histogram<N> {
    fn default() -> Self {
        Self {
            counts: [0; N],
            total: 0,
            sum: 0,
        }
    }
}

impl<const N: usize> Log2Histogram<N> {
    /// Counts one value.
    pub fn record(&mut self, value: u64) {
        if let Some(c) = self.counts.get_mut(bucket_of(value, N)) {
            *c += 1;
        }
        self.total += 1;
        self.sum += u128::from(value);
    }

    /// Adds the buckets and sum of an [`AtomicLog2Histogram`]'s snapshot.
    pub fn add(&mut self, counts: &[u64; N], sum: u64) {
        for (c, n) in self.counts.iter_mut().zip(counts) {
            *c += n;
            self.total += n;
        }
        self.sum += u128::from(sum);
    }

    /// Values counted.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// Mean of the values counted; 0 when empty.
    pub fn mean(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.sum as f64 / self.total as f64
        }
    }

    /// Upper bound of the bucket holding quantile `q` (0..=1); 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((self.total as f64) * q.clamp(0.0, 1.0)).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return if i >= 63 || i + 1 >= N {
                    u64::MAX
                } else {
                    (2u64 << i) - 1
                };
            }
        }
        u64::MAX
    }

    /// Non-empty buckets as `(lower bound, count)`.
    pub fn buckets(&self) -> Vec<(u64, u64)> {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(i, c)| (if i == 0 { 0 } else { 1u64 << i }, *c))
            .collect()
    }
}

/// A [`Log2Histogram`]'s buckets updated without locks from any thread;
/// the sum wraps at `u64::MAX`.
#[derive(Debug)]
pub struct AtomicLog2Histogram<const N: usize> {
    counts: [AtomicU64; N],
    sum: AtomicU64,
}

impl<const N: usize> Default for AtomicLog2Histogram<N> {
    fn default() -> Self {
        Self {
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            sum: AtomicU64::new(0),
        }
    }
}

impl<const N: usize> AtomicLog2Histogram<N> {
    /// Counts one value.
    pub fn record(&self, value: u64) {
        if let Some(c) = self.counts.get(bucket_of(value, N)) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        self.sum.fetch_add(value, Ordering::Relaxed);
    }

    /// The count of every bucket, lowest first.
    pub fn counts(&self) -> [u64; N] {
        std::array::from_fn(|i| self.counts.get(i).map_or(0, |c| c.load(Ordering::Relaxed)))
    }

    /// The sum of the values counted.
    pub fn sum(&self) -> u64 {
        self.sum.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_atomic_snapshot_adds_to_a_plain_histogram() {
        let a = AtomicLog2Histogram::<8>::default();
        for v in [0, 3, 4096, 4096] {
            a.record(v);
        }
        let mut h = Log2Histogram::<8>::default();
        h.record(3);
        h.add(&a.counts(), a.sum());
        assert_eq!(h.count(), 5);
        assert_eq!(h.buckets(), vec![(0, 1), (2, 2), (128, 2)]);
        assert_eq!(h.mean(), (3.0 + 3.0 + 4096.0 * 2.0) / 5.0);
    }

    #[test]
    fn buckets_are_powers_of_two_and_the_last_saturates() {
        assert_eq!(bucket_of(0, 64), 0);
        assert_eq!(bucket_of(1, 64), 0);
        assert_eq!(bucket_of(2, 64), 1);
        assert_eq!(bucket_of(1023, 64), 9);
        assert_eq!(bucket_of(u64::MAX, 64), 63);
        assert_eq!(bucket_of(u64::MAX, 32), 31);
    }

    #[test]
    fn plain_and_atomic_count_alike() {
        let mut p = Log2Histogram::<8>::default();
        let a = AtomicLog2Histogram::<8>::default();
        for v in [0, 1, 3, 4, 1000, 5] {
            p.record(v);
            a.record(v);
        }
        let from_plain: Vec<u64> = p.buckets().iter().map(|&(_, c)| c).collect();
        let from_atomic: Vec<u64> = a.counts().into_iter().filter(|&c| c > 0).collect();
        assert_eq!(from_plain, from_atomic);
        assert_eq!(a.sum(), 1013);
        assert_eq!(p.count(), 6);
        assert_eq!(p.quantile(1.0), u64::MAX, "the last bucket has no bound");
    }
}
