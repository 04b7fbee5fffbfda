//! Per-LUN I/O statistics of an I/O context: demand requests and bytes,
//! cache hits and misses, wasted readahead, backing reads with a size
//! histogram, and a latency histogram. Histograms are log2-bucketed so they
//! are fixed-size and cheap to update under the context's lock.

/// Counts of values in power-of-two buckets: bucket `i` holds values in
/// `[2^i, 2^(i+1))` (bucket 0 also holds 0), 64 buckets so none saturates.
pub type Log2Histogram = rustgt_histogram::Log2Histogram<64>;

/// A snapshot of one LUN's I/O context statistics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IoStats {
    /// Demand read requests.
    pub requests: u64,
    /// Bytes those requests asked for.
    pub bytes: u64,
    /// Requested bytes found cached or already being read.
    pub hit_bytes: u64,
    /// Requested bytes that needed a backing read of their own.
    pub miss_bytes: u64,
    /// Readahead bytes evicted before any read used them.
    pub wasted_bytes: u64,
    /// Backing reads issued (after coalescing).
    pub backing_requests: u64,
    /// Total bytes of those backing reads.
    pub backing_bytes: u64,
    /// Backing read sizes in bytes.
    pub backing_sizes: Log2Histogram,
    /// Demand read latency in ns, from call to return.
    pub latency_ns: Log2Histogram,
    /// Writes (and WRITE SAME / unmap) passed through.
    pub writes: u64,
    /// Queued readahead runs promoted to demand because a read waited on
    /// their pages before they started.
    pub promoted: u64,
}

impl IoStats {
    /// Fraction of requested bytes that were hits.
    pub fn hit_ratio(&self) -> f64 {
        if self.bytes == 0 {
            0.0
        } else {
            self.hit_bytes as f64 / self.bytes as f64
        }
    }

    /// Mean backing read size in bytes.
    pub fn mean_backing_size(&self) -> f64 {
        if self.backing_requests == 0 {
            0.0
        } else {
            self.backing_bytes as f64 / self.backing_requests as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_and_quantiles() {
        let mut h = Log2Histogram::default();
        for v in [0, 1, 2, 3, 4096, 4096, 65536] {
            h.record(v);
        }
        assert_eq!(h.count(), 7);
        assert_eq!(h.buckets(), vec![(0, 2), (2, 2), (4096, 2), (65536, 1)]);
        assert_eq!(h.quantile(0.5), 3);
        assert_eq!(h.quantile(1.0), 131_071);
        assert!((h.mean() - 73734.0 / 7.0).abs() < 1e-6);
        assert_eq!(Log2Histogram::default().quantile(0.99), 0);
    }

    #[test]
    fn ratios_of_an_empty_snapshot_are_zero() {
        let s = IoStats::default();
        assert_eq!(s.hit_ratio(), 0.0);
        assert_eq!(s.mean_backing_size(), 0.0);
    }
}
