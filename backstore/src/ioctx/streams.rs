//! The `streams` policy: a table of concurrent sequential streams per
//! context, in the manner of ZFS's zfetch, built to survive what breaks
//! single-state readahead:
//!
//! - many streams at once: each has its own entry (front, prefetch end,
//!   distance), so interleaving never resets another stream's window;
//! - reordered and skipped requests: a read matches the stream whose front
//!   is within the reorder tolerance, behind or ahead, and the front only
//!   moves forward;
//! - no prefetch on random reads: a new entry prefetches only once it is
//!   confirmed — it starts the LUN, the pages just before it are cached
//!   (context readahead's evidence, which also works across per-worker
//!   states), or its own reads cover at least half of the span it moved over;
//! - the prefetch distance doubles on every hit, up to a maximum sized by
//!   the competitive rule: at least one seek-plus-rotation worth of
//!   transfer (never more time positioning than transferring), and up to
//!   four (a stream visit then runs at 80% of the streaming rate however
//!   many streams share the disk), but never more than an equal share of
//!   the cache for each live stream, so streams never evict each other's
//!   prefetched pages;
//! - all prefetched pages not yet read, by every table of the context,
//!   stay within three quarters of the cache (admission control), so even
//!   per-worker tables that do not know of each other cannot thrash it;
//! - prefetch is issued in large pieces, at the real frontier: the first
//!   page ahead of the stream that is not cached or being read (so per-worker
//!   tables cooperate through the shared cache instead of fragmenting),
//!   only when less than a third of the distance remains ahead, and ending
//!   on a multiple of the largest backing read, so that a top-up splits
//!   into whole backing reads;
//! - idle streams expire.

use super::policy::{PolicyParams, RaView, Readahead};

/// Pages of cached history before a read that confirm a stream.
const CONFIRM_PAGES: u64 = 8;
/// The smallest prefetch distance (128 KiB).
const MIN_DISTANCE: u64 = 32;
/// The smallest top-up worth a seek when the cache is tight (1 MiB).
const MIN_TOPUP: u64 = 256;

/// Tunables of the stream table, in pages and ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamParams {
    /// Largest prefetch distance: four positioning times of transfer, and
    /// no less than the readahead maximum.
    pub max_pages: u64,
    /// Cache budget shared by the live streams.
    pub cache_pages: u64,
    /// How far from a stream's front a read may land and still belong to it.
    pub reorder_pages: u64,
    /// Streams idle this long are forgotten.
    pub expiry_ns: u64,
    /// Table size; the least recently used entry is replaced.
    pub slots: usize,
    /// The largest backing read; top-ups end on its multiples.
    pub io_pages: u64,
}

impl StreamParams {
    pub fn new(p: &PolicyParams) -> Self {
        Self {
            max_pages: p.max_pages.max(4 * p.competitive_pages).max(MIN_DISTANCE),
            cache_pages: p.cache_pages,
            reorder_pages: 1024,
            expiry_ns: 2_000_000_000,
            slots: 64,
            io_pages: p.io_pages.max(1),
        }
    }
}

#[derive(Debug, Clone)]
struct Stream {
    /// Lowest page read.
    low: u64,
    /// The page after the highest page read.
    front: u64,
    /// Pages read (re-reads included).
    demanded: u64,
    /// Prefetch has been issued up to here.
    pf_end: u64,
    /// Current prefetch distance ahead of `front`; 0 until confirmed.
    distance: u64,
    confirmed: bool,
    last_ns: u64,
}

/// The stream table of one context (or one worker).
#[derive(Debug, Clone)]
pub struct Streams {
    p: StreamParams,
    table: Vec<Stream>,
}

impl Streams {
    pub fn new(p: StreamParams) -> Self {
        Self {
            p,
            table: Vec::new(),
        }
    }

    /// The stream whose front is nearest to `first`, within tolerance.
    fn find(&self, first: u64) -> Option<usize> {
        let tol = self.p.reorder_pages;
        self.table
            .iter()
            .enumerate()
            .filter(|(_, s)| first + tol >= s.front && first <= s.front + tol)
            .min_by_key(|(_, s)| s.front.abs_diff(first))
            .map(|(i, _)| i)
    }

    fn insert(&mut self, s: Stream) -> usize {
        if self.table.len() < self.p.slots.max(1) {
            self.table.push(s);
            return self.table.len() - 1;
        }
        let oldest = self
            .table
            .iter()
            .enumerate()
            .min_by_key(|(_, s)| s.last_ns)
            .map_or(0, |(i, _)| i);
        if let Some(slot) = self.table.get_mut(oldest) {
            *slot = s;
        }
        oldest
    }

    /// The distance cap now: the competitive maximum, bounded by an equal
    /// share of three quarters of the cache among the confirmed streams (the
    /// rest holds pages being read and pages already read, which LRU evicts
    /// first).
    fn max_distance(&self) -> u64 {
        let live = self.table.iter().filter(|s| s.confirmed).count().max(1) as u64;
        let share = self.p.cache_pages * 3 / (4 * live);
        self.p.max_pages.min(share).max(MIN_DISTANCE)
    }
}

/// Whether a read of `count` pages at `first` shows a sequential stream.
fn evidence(s: &Stream, first: u64, count: u64, view: &dyn RaView) -> bool {
    if first == 0 {
        return true;
    }
    let need = (count + 1).max(CONFIRM_PAGES);
    if view.history(first, need) >= need {
        return true;
    }
    let span = s.front - s.low;
    span >= 2 * need && s.demanded * 2 >= span
}

impl Readahead for Streams {
    fn on_read(&mut self, first: u64, count: u64, view: &mut dyn RaView) {
        let now = view.now();
        let expiry = self.p.expiry_ns;
        self.table
            .retain(|s| now.saturating_sub(s.last_ns) <= expiry);
        let end = first + count;
        let i = match self.find(first) {
            Some(i) => i,
            None => self.insert(Stream {
                low: first,
                front: end,
                demanded: 0,
                pf_end: end,
                distance: 0,
                confirmed: false,
                last_ns: now,
            }),
        };
        let cap = self.max_distance();
        let budget = self.p.cache_pages * 3 / 4;
        let Some(s) = self.table.get_mut(i) else {
            return;
        };
        s.last_ns = now;
        s.demanded += count;
        s.low = s.low.min(first);
        s.front = s.front.max(end);
        if s.confirmed {
            s.distance = (s.distance * 2).min(cap);
        } else if evidence(s, first, count, view) {
            // Start from the stream's cached history (context readahead's
            // sizing): a stream met again, by another worker's table or
            // after expiry, resumes at full speed.
            s.confirmed = true;
            let history = view.history(first, cap);
            s.distance = (2 * count).max(MIN_DISTANCE).max(history).min(cap);
        } else {
            return;
        }
        // Top up at the real frontier, in large pieces: only when two thirds
        // of the distance are used.
        // Measured from this read, not the table's front: in per-worker
        // mode a table's front lags the stream by what other workers read.
        let from = s.pf_end.max(end);
        let from = view.next_miss(from, s.distance);
        s.pf_end = from;
        let target = (end + s.distance).min(view.num_pages());
        if (from - end) * 3 > s.distance || target <= from {
            return;
        }
        // Admission: all prefetched-but-unread pages together stay within
        // the streams' part of the cache, whoever issued them (tables of
        // other workers included); a top-up too small to be worth a seek
        // waits.
        let want = target - from;
        let room = budget.saturating_sub(view.unused_pages());
        let mut n = want.min(room);
        // End on a backing-read boundary, so that the top-up splits into
        // whole backing reads: round up when the cache has room (and the
        // LUN has pages), else down.
        let io = self.p.io_pages;
        let up = (from + n).div_ceil(io) * io;
        let down = (from + n) / io * io;
        if n >= io {
            if up - from <= room && up <= view.num_pages() {
                n = up - from;
            } else if down > from {
                n = down - from;
            }
        }
        if n > 0 && n >= want.min(MIN_TOPUP) {
            view.read(from, n, None, false);
            s.pf_end = from + n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::policy::testing::FakeView;
    use super::*;

    fn params() -> StreamParams {
        StreamParams::new(&PolicyParams {
            max_pages: 1024,
            cache_pages: 16384,
            competitive_pages: 128,
            io_pages: 64,
        })
    }

    fn read(s: &mut Streams, v: &mut FakeView, first: u64, count: u64) -> u64 {
        s.on_read(first, count, v);
        for p in first..first + count {
            v.pages.insert(p);
        }
        v.take_reads().iter().map(|r| r.1).sum()
    }

    #[test]
    fn random_reads_never_prefetch() {
        let mut s = Streams::new(params());
        let mut v = FakeView::new(1 << 30);
        let mut x: u64 = 12345;
        for _ in 0..2000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let page = (x >> 20) % (1 << 26);
            assert_eq!(read(&mut s, &mut v, page, 1), 0);
        }
        // Clustered: eight single pages scattered in each 1 MiB region.
        for c in 0..200u64 {
            for k in 0..8u64 {
                let page = (1 << 20) + c * 256 + (k * 37 + c * 11) % 256;
                assert_eq!(read(&mut s, &mut v, page, 1), 0, "cluster {c}");
            }
        }
    }

    #[test]
    fn interleaved_streams_each_keep_a_growing_window() {
        let mut s = Streams::new(params());
        let mut v = FakeView::new(1 << 30);
        let bases = [0u64, 1 << 22, 1 << 23, 1 << 24];
        let mut ahead = [0u64; 4];
        for i in 0..200u64 {
            for (k, base) in bases.iter().enumerate() {
                if let Some(a) = ahead.get_mut(k) {
                    *a += read(&mut s, &mut v, base + i * 16, 16);
                }
            }
        }
        // Every stream prefetched well beyond its 3200 read pages.
        for (k, a) in ahead.iter().enumerate() {
            assert!(*a >= 3200, "stream {k}: {a}");
        }
        assert_eq!(s.table.len(), 4);
        assert!(s.table.iter().all(|st| st.distance == 1024));
    }

    #[test]
    fn reordered_chunks_stay_one_stream() {
        let mut s = Streams::new(params());
        let mut v = FakeView::new(1 << 30);
        let order = [5u64, 2, 7, 0, 3, 1, 6, 4];
        for batch in 0..20u64 {
            for c in order {
                read(&mut s, &mut v, 4096 + (batch * 8 + c) * 16, 16);
            }
        }
        assert_eq!(s.table.len(), 1);
        let st = s.table.first().expect("one stream");
        assert!(st.confirmed);
        assert!(st.pf_end >= st.front + 512, "{st:?}");
    }

    #[test]
    fn the_cache_share_bounds_the_distance() {
        let mut p = params();
        p.cache_pages = 4096;
        let mut s = Streams::new(p);
        let mut v = FakeView::new(1 << 30);
        for i in 0..100u64 {
            for k in 0..8u64 {
                read(&mut s, &mut v, (k << 24) + i * 16, 16);
            }
        }
        // 3/4 of 4096 pages / 8 streams = 384 pages each.
        assert!(s.table.iter().all(|st| st.distance == 384), "{:?}", s.table);
    }

    #[test]
    fn idle_streams_expire() {
        let mut s = Streams::new(params());
        let mut v = FakeView::new(1 << 30);
        read(&mut s, &mut v, 100, 16);
        v.now = 3_000_000_000;
        read(&mut s, &mut v, 1 << 20, 16);
        assert_eq!(s.table.len(), 1);
    }
}
