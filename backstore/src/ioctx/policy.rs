//! Readahead policies: what they are called, what they may see, and the
//! factory. A policy is a pure state machine over page numbers: it looks at
//! the cache through [`RaView`] and asks for pages to be read; it never sees
//! bytes, threads or clocks other than the `now` the view passes in. The
//! simulation and the I/O context drive the very same policy objects.

use std::fmt;
use std::str::FromStr;

use crate::error::BackstoreError;

/// What a policy sees of the cache, and how it asks for reads.
pub trait RaView {
    /// Current time in ns (virtual in the simulation).
    fn now(&self) -> u64;
    /// Pages in the LUN.
    fn num_pages(&self) -> u64;
    /// The page is cached or being read.
    fn present(&self, page: u64) -> bool;
    /// Clears the page's readahead marker; true when it was set.
    fn take_marker(&mut self, page: u64) -> bool;
    /// First absent page at or after `from`, scanning at most `max` pages
    /// (`from + max` when none is absent).
    fn next_miss(&self, from: u64, max: u64) -> u64;
    /// Present pages just before `before`, without a gap, at most `max`.
    fn history(&self, before: u64, max: u64) -> u64;
    /// Pages cached or being read that no read has used yet.
    fn unused_pages(&self) -> u64;
    /// Drops the cached pages of `[start, end)` that readahead brought in
    /// and no read used (a strided reader skipped them), freeing their room.
    fn drop_unused(&mut self, start: u64, end: u64);
    /// Reads the absent pages of `[start, start + count)` (clipped to the
    /// LUN). `marker` is set on that page if this call reserved it; `sync`
    /// reads go before asynchronous ones.
    fn read(&mut self, start: u64, count: u64, marker: Option<u64>, sync: bool);
}

/// One readahead state machine (one per LUN, or per worker in per-worker mode).
pub trait Readahead: Send + fmt::Debug {
    /// A demand read of pages `[first, first + count)` arrives.
    fn on_read(&mut self, first: u64, count: u64, view: &mut dyn RaView);

    /// Streams this state prefetches for now (each gets its own share of
    /// the device while other readers' demand reads wait).
    fn streams(&self) -> u64 {
        1
    }

    /// Whether the latest read belonged to a stream this state prefetches.
    fn streamed(&self) -> bool {
        false
    }
}

/// The readahead policies a LUN can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReadaheadPolicy {
    /// No readahead: only the requested pages are read.
    None,
    /// Leave it to Linux on a buffered fd; elsewhere (and in the simulation)
    /// Linux's current algorithm with its default 128 KiB window.
    Kernel,
    /// On-demand readahead with a single state and no interleave or
    /// history support (Linux 2.6.23).
    Classic,
    /// On-demand readahead plus interleaved-marker and context (history)
    /// readahead (Linux 2.6.31 and later), with rustgt's window and the
    /// sequential test backed by history.
    Context,
    /// A table of concurrent streams with reorder tolerance, doubling
    /// prefetch distance and a competitive maximum.
    Streams,
}

impl ReadaheadPolicy {
    /// Every policy, in the order reports use.
    pub const ALL: [ReadaheadPolicy; 5] = [
        ReadaheadPolicy::None,
        ReadaheadPolicy::Kernel,
        ReadaheadPolicy::Classic,
        ReadaheadPolicy::Context,
        ReadaheadPolicy::Streams,
    ];

    /// The configuration name.
    pub fn as_str(self) -> &'static str {
        match self {
            ReadaheadPolicy::None => "none",
            ReadaheadPolicy::Kernel => "kernel",
            ReadaheadPolicy::Classic => "classic",
            ReadaheadPolicy::Context => "context",
            ReadaheadPolicy::Streams => "streams",
        }
    }
}

impl fmt::Display for ReadaheadPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ReadaheadPolicy {
    type Err = BackstoreError;

    fn from_str(s: &str) -> Result<Self, BackstoreError> {
        let s = s.trim();
        Self::ALL
            .into_iter()
            .find(|p| p.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                BackstoreError::Config(format!(
                    "unknown readahead policy {s:?} (expected none, kernel, classic, context or streams)"
                ))
            })
    }
}

/// A LUN's readahead setting: a policy, or `auto`, which picks one from
/// the backing device when the LUN's store is built
/// ([`auto_policy`](crate::auto_policy)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReadaheadChoice {
    /// `streams` on a device that seeks (hddsim, a rotational disk under a
    /// file or block device), else `kernel` (the kernel's readahead and
    /// page cache, with the passthrough data path).
    Auto,
    /// This policy, whatever the device.
    Fixed(ReadaheadPolicy),
}

impl fmt::Display for ReadaheadChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadaheadChoice::Auto => f.write_str("auto"),
            ReadaheadChoice::Fixed(p) => p.fmt(f),
        }
    }
}

impl FromStr for ReadaheadChoice {
    type Err = BackstoreError;

    /// "auto" or a policy name, case-insensitive.
    fn from_str(s: &str) -> Result<Self, BackstoreError> {
        if s.trim().eq_ignore_ascii_case("auto") {
            return Ok(ReadaheadChoice::Auto);
        }
        s.parse().map(ReadaheadChoice::Fixed).map_err(|_| {
            BackstoreError::Config(format!(
                "unknown readahead policy {:?} (expected auto, none, kernel, classic, context or streams)",
                s.trim()
            ))
        })
    }
}

/// Who owns readahead state: the whole LUN, or each worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ContextMode {
    /// One I/O context shared by all workers of the LUN (SCST's fix).
    Shared,
    /// Each worker has its own readahead state and backing queue, as each
    /// pre-patch SCST thread had its own fd and io_context (for comparison).
    PerWorker,
}

impl ContextMode {
    /// Both modes, in the order reports use.
    pub const ALL: [ContextMode; 2] = [ContextMode::Shared, ContextMode::PerWorker];

    /// The name configuration and reports use: "shared" or "per-worker".
    pub fn as_str(self) -> &'static str {
        match self {
            ContextMode::Shared => "shared",
            ContextMode::PerWorker => "per-worker",
        }
    }
}

impl fmt::Display for ContextMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ContextMode {
    type Err = BackstoreError;

    fn from_str(s: &str) -> Result<Self, BackstoreError> {
        let s = s.trim();
        Self::ALL
            .into_iter()
            .find(|m| m.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                BackstoreError::Config(format!(
                    "unknown I/O context mode {s:?} (expected shared or per-worker)"
                ))
            })
    }
}

/// Linux's default read_ahead_kb (128 KiB) in pages: the `kernel` window.
pub const KERNEL_MAX_PAGES: u64 = 32;

/// Sizes every policy needs, in pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyParams {
    /// Maximum readahead window of `classic` and `context`.
    pub max_pages: u64,
    /// The cache budget (for `streams`' per-stream share).
    pub cache_pages: u64,
    /// One seek plus rotation worth of transfer on the backing device: the
    /// competitive rule's lower bound for `streams`' maximum distance.
    pub competitive_pages: u64,
    /// What a short forward skip costs the backing device beyond passing
    /// the gap (command overhead and the seek's fixed part), in pages of
    /// transfer: `streams` reads a stride's gaps through up to this size
    /// and skips wider ones.
    pub skip_pages: u64,
    /// The largest backing read: `streams` ends its top-ups on multiples
    /// of it, so that they split into whole backing reads.
    pub io_pages: u64,
}

/// `none`: nothing beyond what is asked.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoReadahead;

impl Readahead for NoReadahead {
    fn on_read(&mut self, _first: u64, _count: u64, _view: &mut dyn RaView) {}
}

#[cfg(test)]
pub(crate) mod testing {
    //! A plain view over a page set for policy unit tests.
    use std::collections::BTreeSet;

    use super::RaView;

    #[derive(Debug, Default)]
    pub(crate) struct FakeView {
        pub now: u64,
        pub pages: BTreeSet<u64>,
        pub markers: BTreeSet<u64>,
        pub num_pages: u64,
        /// Every read asked for: (start, count, marker, sync).
        pub reads: Vec<(u64, u64, Option<u64>, bool)>,
        pub unused: u64,
        /// Every range dropped as skipped.
        pub dropped: Vec<(u64, u64)>,
    }

    impl FakeView {
        pub(crate) fn new(num_pages: u64) -> Self {
            Self {
                num_pages,
                ..Self::default()
            }
        }

        /// Pages read since the last call, as (start, count) pairs.
        pub(crate) fn take_reads(&mut self) -> Vec<(u64, u64)> {
            self.reads.drain(..).map(|r| (r.0, r.1)).collect()
        }
    }

    impl RaView for FakeView {
        fn now(&self) -> u64 {
            self.now
        }
        fn num_pages(&self) -> u64 {
            self.num_pages
        }
        fn present(&self, page: u64) -> bool {
            self.pages.contains(&page)
        }
        fn take_marker(&mut self, page: u64) -> bool {
            self.markers.remove(&page)
        }
        fn next_miss(&self, from: u64, max: u64) -> u64 {
            (from..from + max)
                .find(|p| !self.pages.contains(p))
                .unwrap_or(from + max)
        }
        fn history(&self, before: u64, max: u64) -> u64 {
            (0..max)
                .take_while(|i| before > *i && self.pages.contains(&(before - 1 - i)))
                .count() as u64
        }
        fn unused_pages(&self) -> u64 {
            self.unused
        }
        fn drop_unused(&mut self, start: u64, end: u64) {
            self.dropped.push((start, end));
            let gone: Vec<u64> = self.pages.range(start..end).copied().collect();
            for p in gone {
                self.pages.remove(&p);
            }
        }
        fn read(&mut self, start: u64, count: u64, marker: Option<u64>, sync: bool) {
            let end = (start + count).min(self.num_pages);
            let mut reserved_marker = false;
            for p in start..end {
                if self.pages.insert(p) && Some(p) == marker {
                    reserved_marker = true;
                }
            }
            if let (true, Some(m)) = (reserved_marker, marker) {
                self.markers.insert(m);
            }
            self.reads
                .push((start, end.saturating_sub(start), marker, sync));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for p in ReadaheadPolicy::ALL {
            assert_eq!(p.to_string().parse::<ReadaheadPolicy>().ok(), Some(p));
        }
        for m in ContextMode::ALL {
            assert_eq!(m.to_string().parse::<ContextMode>().ok(), Some(m));
        }
        assert_eq!(
            "STREAMS".parse::<ReadaheadPolicy>().ok(),
            Some(ReadaheadPolicy::Streams)
        );
        assert!("zfetch".parse::<ReadaheadPolicy>().is_err());
        assert!("per-thread".parse::<ContextMode>().is_err());
    }
}
