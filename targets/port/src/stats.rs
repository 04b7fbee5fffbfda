//! Per-connection counters: commands, errors, bytes and a latency
//! histogram, updated lock-free by SCSI completions on any thread.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rustgt_histogram::AtomicLog2Histogram;
use rustgt_scsi::Response;

/// Buckets of [`LatencyHistogram`]: bucket `i` counts values in
/// `[2^i, 2^(i+1))` microseconds (bucket 0 also counts 0), the last one
/// everything from `2^(N-1)` up.
pub const LATENCY_BUCKETS: usize = 32;

/// A lock-free log2 histogram of durations in microseconds.
#[derive(Debug, Default)]
pub struct LatencyHistogram(AtomicLog2Histogram<LATENCY_BUCKETS>);

impl LatencyHistogram {
    /// Counts one duration.
    pub fn record(&self, d: Duration) {
        self.0
            .record(u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    }

    /// Counts per bucket and the sum of all values in microseconds.
    pub fn snapshot(&self) -> ([u64; LATENCY_BUCKETS], u64) {
        (self.0.counts(), self.0.sum())
    }
}

/// Live counters of one connection, updated by SCSI completions.
#[derive(Debug, Default)]
pub struct ConnStats {
    commands: AtomicU64,
    /// Commands that ended with a status other than GOOD.
    errors: AtomicU64,
    /// Data-In bytes (target to initiator).
    read_bytes: AtomicU64,
    /// Data-Out bytes (initiator to target).
    write_bytes: AtomicU64,
    /// From the command's arrival to its completion by the SCSI core.
    latency: LatencyHistogram,
}

impl ConnStats {
    pub(crate) fn record(&self, started: Instant, data_out: usize, resp: &Response) {
        self.commands.fetch_add(1, Ordering::Relaxed);
        if resp.status != rustgt_scsi::Status::GOOD {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        self.read_bytes
            .fetch_add(resp.data_in.len() as u64, Ordering::Relaxed);
        self.write_bytes
            .fetch_add(data_out as u64, Ordering::Relaxed);
        self.latency.record(started.elapsed());
    }

    /// The counters now.
    pub fn snapshot(&self) -> ConnStatsSnapshot {
        let (latency_us, latency_sum_us) = self.latency.snapshot();
        ConnStatsSnapshot {
            commands: self.commands.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            read_bytes: self.read_bytes.load(Ordering::Relaxed),
            write_bytes: self.write_bytes.load(Ordering::Relaxed),
            latency_us,
            latency_sum_us,
        }
    }
}

/// A copy of a connection's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ConnStatsSnapshot {
    /// SCSI commands answered.
    pub commands: u64,
    /// Of those, answered with another status than GOOD.
    pub errors: u64,
    /// Bytes sent as Data-In.
    pub read_bytes: u64,
    /// Bytes received as Data-Out and immediate data.
    pub write_bytes: u64,
    /// Command latency counts per [`LatencyHistogram`] bucket.
    pub latency_us: [u64; LATENCY_BUCKETS],
    /// Sum of the command latencies, microseconds.
    pub latency_sum_us: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_histogram_buckets_by_power_of_two_microseconds() {
        let h = LatencyHistogram::default();
        for us in [0, 1, 3, 4, 1000, u64::MAX / 2] {
            h.record(Duration::from_micros(us));
        }
        let (buckets, sum) = h.snapshot();
        assert_eq!(buckets[0], 2, "0 and 1 us");
        assert_eq!(buckets[1], 1, "3 us");
        assert_eq!(buckets[2], 1, "4 us");
        assert_eq!(buckets[9], 1, "1000 us is in [512, 1024)");
        assert_eq!(buckets[LATENCY_BUCKETS - 1], 1, "huge values saturate");
        assert_eq!(buckets.iter().sum::<u64>(), 6);
        assert!(sum >= 1008);
    }

    #[test]
    fn conn_stats_count_commands_bytes_and_errors() {
        let s = ConnStats::default();
        let ok = Response {
            data_in: vec![0; 4096].into(),
            ..Response::default()
        };
        let bad = Response {
            status: rustgt_scsi::Status::CHECK_CONDITION,
            ..Response::default()
        };
        s.record(Instant::now(), 0, &ok);
        s.record(Instant::now(), 512, &bad);
        let snap = s.snapshot();
        assert_eq!(
            (
                snap.commands,
                snap.errors,
                snap.read_bytes,
                snap.write_bytes
            ),
            (2, 1, 4096, 512)
        );
        assert_eq!(snap.latency_us.iter().sum::<u64>(), 2);
    }
}
