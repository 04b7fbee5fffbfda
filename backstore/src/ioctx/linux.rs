//! Linux's on-demand readahead (mm/readahead.c), in pages, as the
//! `classic`, `context` and `kernel` policies.
//!
//! - `classic` is the 2.6.23 algorithm: one `file_ra_state` (start, size,
//!   async_size), an initial window from the request size (×4 or ×2, rounded
//!   to a power of two), ramping ×4 then ×2 up to the maximum, and
//!   asynchronous readahead when the marker page (PG_readahead) is reached
//!   and the state expects it. A marker hit the state does not expect starts
//!   a fresh initial window there; a non-sequential miss is a plain small
//!   read that never starts a stream: interleaved streams thrash.
//! - `kernel` (in the simulation, and on engines without a page cache) is
//!   the current algorithm with Linux's default 128 KiB window: what 2.6.24
//!   and 2.6.31 added is there, i.e. a marker hit without matching state
//!   restarts the window from the cache contents, and a non-sequential miss
//!   counts the contiguous cached pages just before it (history) to start a
//!   window when a stream left a trace.
//! - `context` is the same with rustgt's window and one change: a read next
//!   to the previous one counts as sequential only if history backs it, so
//!   clustered random reads that happen to touch do not start windows.

use super::policy::{RaView, Readahead};

/// One `file_ra_state`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct RaState {
    start: u64,
    size: u64,
    async_size: u64,
}

/// The on-demand readahead state machine.
#[derive(Debug, Clone)]
pub struct LinuxReadahead {
    max: u64,
    /// Interleaved-marker and history support (2.6.24 / 2.6.31).
    modern: bool,
    /// The trivial sequential test must be backed by history (`context`).
    confirm_by_history: bool,
    ra: RaState,
    /// Last page of the previous read (`prev_pos`); `None` before any read.
    prev: Option<u64>,
    /// `context` only: the streams its windows follow, for the core's
    /// device share (`None` for `classic` and `kernel`).
    fronts: Option<Fronts>,
    /// A window was submitted during the current read.
    windowed: bool,
}

/// Most streams `context` keeps track of for the device share.
const MAX_FRONTS: usize = 64;
/// A stream no read has touched for this long is gone (as `streams`'
/// expiry).
const FRONT_EXPIRY_NS: u64 = 2_000_000_000;

/// The streams a single `file_ra_state` serves through its markers and
/// history, as the device share counts them: one entry per window
/// followed, the pages from where the stream's window started to where it
/// ends. A read inside an entry, or one that submits a window next to it,
/// moves it on; entries no read touched for [`FRONT_EXPIRY_NS`] expire.
#[derive(Debug, Clone, Default)]
struct Fronts {
    /// (first page of the stream's latest read, the end of its latest
    /// window, the time of its latest read).
    entries: Vec<(u64, u64, u64)>,
    /// The latest read belonged to one of them.
    streamed: bool,
}

impl Fronts {
    /// Notes a read of `[first, end)` at `now`; `window` is the end of the
    /// window it submitted, if any; a read up to `tolerance` pages behind a
    /// stream's last one is still its. Returns whether the read is a
    /// stream's.
    fn note(
        &mut self,
        now: u64,
        (first, end): (u64, u64),
        window: Option<u64>,
        tolerance: u64,
    ) -> bool {
        self.entries
            .retain(|e| now.saturating_sub(e.2) <= FRONT_EXPIRY_NS);
        // Within the stream's window or just past it, or a little behind
        // where it read last (reordered commands).
        let inside = |e: &(u64, u64, u64)| first <= e.1 && e.0.saturating_sub(tolerance) <= end;
        let found = self.entries.iter().position(inside);
        self.streamed = match (found, window) {
            (Some(i), w) => {
                if let Some(e) = self.entries.get_mut(i) {
                    *e = (e.0.max(first), w.unwrap_or(e.1).max(e.1), now);
                }
                true
            }
            (None, Some(we)) => {
                if self.entries.len() >= MAX_FRONTS {
                    // The least recently read one goes.
                    if let Some(i) = (0..self.entries.len())
                        .min_by_key(|&i| self.entries.get(i).map_or(0, |e| e.2))
                    {
                        self.entries.swap_remove(i);
                    }
                }
                self.entries.push((first, we, now));
                true
            }
            (None, None) => false,
        };
        self.streamed
    }
}

impl LinuxReadahead {
    /// The 2.6.23 algorithm with a `max_pages` window.
    pub fn classic(max_pages: u64) -> Self {
        Self::new(max_pages, false)
    }

    /// Linux's current algorithm (interleave + context) with a `max_pages`
    /// window, as is (the `kernel` policy).
    pub fn modern(max_pages: u64) -> Self {
        Self::new(max_pages, true)
    }

    /// rustgt's `context` policy: the current algorithm, with the trivial
    /// sequential test backed by history.
    pub fn context(max_pages: u64) -> Self {
        Self {
            confirm_by_history: true,
            fronts: Some(Fronts::default()),
            ..Self::new(max_pages, true)
        }
    }

    fn new(max_pages: u64, modern: bool) -> Self {
        Self {
            max: max_pages.max(1),
            modern,
            confirm_by_history: false,
            ra: RaState::default(),
            prev: None,
            fronts: None,
            windowed: false,
        }
    }

    /// One call of ondemand_readahead for a miss (`hit_marker` false) or a
    /// marker hit at `index` with `req` pages left in the request.
    fn ondemand(&mut self, view: &mut dyn RaView, index: u64, req: u64, hit_marker: bool) {
        let max = self.max;
        let ra = self.ra;
        if index != 0
            && (index == ra.start + ra.size - ra.async_size || index == ra.start + ra.size)
        {
            // The expected index: a sequential stream; push the window on.
            self.ra.start = ra.start + ra.size;
            self.ra.size = next_size(ra.size, max);
            self.ra.async_size = self.ra.size;
            return self.submit(view, index, hit_marker);
        }
        if index == 0 {
            return self.initial(view, index, req, hit_marker);
        }
        if self.modern && hit_marker {
            // Interleaved streams: size the window from what is cached.
            let start = view.next_miss(index + 1, max);
            if start - index > max {
                return;
            }
            self.ra.start = start;
            self.ra.size = next_size(start - index + req, max);
            self.ra.async_size = self.ra.size;
            return self.submit(view, index, hit_marker);
        }
        // An oversize read, a sequential miss, or (2.6.23) any marker hit.
        if req > max || self.sequential(view, index, req) || hit_marker {
            return self.initial(view, index, req, hit_marker);
        }
        if self.modern && self.history_window(view, index, req) {
            return self.submit(view, index, hit_marker);
        }
        // A standalone small read: read it as is, leave the state alone.
        view.read(index, req, None, true);
    }

    /// Linux: `index - prev_index <= 1` (the same page or the next one).
    /// rustgt's `context` also wants the history to back it (at least the
    /// request, and two pages, cached just before), so that two random
    /// reads that happen to touch never start a window.
    fn sequential(&self, view: &dyn RaView, index: u64, req: u64) -> bool {
        let adjacent = self
            .prev
            .and_then(|p| index.checked_sub(p))
            .is_some_and(|d| d <= 1);
        if !adjacent || !self.confirm_by_history {
            return adjacent;
        }
        let need = req.max(2);
        view.history(index, need) >= need
    }

    fn initial(&mut self, view: &mut dyn RaView, index: u64, req: u64, hit_marker: bool) {
        self.ra.start = index;
        self.ra.size = init_size(req, self.max);
        self.ra.async_size = if self.ra.size > req {
            self.ra.size - req
        } else {
            self.ra.size
        };
        self.submit(view, index, hit_marker);
    }

    /// try_context_readahead: a window sized from the pages cached before.
    fn history_window(&mut self, view: &mut dyn RaView, index: u64, req: u64) -> bool {
        let mut size = view.history(index, self.max);
        if size <= req {
            return false;
        }
        if size >= index {
            // History back to the start of the LUN: a long-running stream.
            size *= 2;
        }
        self.ra.start = index;
        self.ra.size = (size + req).min(self.max);
        self.ra.async_size = 1;
        true
    }

    /// The `readit` step: fold the next window in when this read would hit
    /// its own marker at once, then submit with the marker placed.
    fn submit(&mut self, view: &mut dyn RaView, index: u64, hit_marker: bool) {
        if index == self.ra.start && self.ra.size == self.ra.async_size {
            let add = next_size(self.ra.size, self.max);
            if self.ra.size + add <= self.max {
                self.ra.async_size = add;
                self.ra.size += add;
            } else {
                self.ra.size = self.max;
                self.ra.async_size = self.max / 2;
            }
        }
        let marker = self.ra.start + self.ra.size - self.ra.async_size;
        self.windowed = true;
        view.read(self.ra.start, self.ra.size, Some(marker), !hit_marker);
    }
}

impl Readahead for LinuxReadahead {
    fn on_read(&mut self, first: u64, count: u64, view: &mut dyn RaView) {
        let end = first + count;
        self.windowed = false;
        for page in first..end {
            if !view.present(page) {
                self.ondemand(view, page, end - page, false);
            } else if view.take_marker(page) {
                self.ondemand(view, page, end - page, true);
            }
        }
        self.prev = end.checked_sub(1);
        let window = self.windowed.then_some(self.ra.start + self.ra.size);
        if let Some(f) = self.fronts.as_mut() {
            f.note(view.now(), (first, end), window, self.max);
        }
    }

    /// `context`: the streams its windows followed lately (at least one,
    /// as a single state); the others keep the default.
    fn streams(&self) -> u64 {
        self.fronts
            .as_ref()
            .map_or(1, |f| (f.entries.len() as u64).max(1))
    }

    /// `context`: the read moved one of its windows on, or read pages a
    /// window brought in.
    fn streamed(&self) -> bool {
        self.fronts.as_ref().is_some_and(|f| f.streamed)
    }
}

/// get_init_ra_size: the first window for a `size`-page read.
fn init_size(size: u64, max: u64) -> u64 {
    let size = size.max(1).next_power_of_two();
    if size <= max / 32 {
        size * 4
    } else if size <= max / 4 {
        size * 2
    } else {
        max
    }
}

/// get_next_ra_size: ×4 while small, then ×2, capped at `max`.
fn next_size(cur: u64, max: u64) -> u64 {
    if cur < max / 16 {
        (4 * cur).min(max)
    } else if cur <= max / 2 {
        2 * cur
    } else {
        max
    }
}

#[cfg(test)]
mod tests {
    use super::super::policy::testing::FakeView;
    use super::*;

    const MAX: u64 = 1024;

    fn read(ra: &mut LinuxReadahead, v: &mut FakeView, first: u64, count: u64) -> Vec<(u64, u64)> {
        ra.on_read(first, count, v);
        v.take_reads()
    }

    #[test]
    fn window_sizes_follow_linux() {
        assert_eq!(init_size(16, MAX), 64);
        assert_eq!(init_size(1, 32), 4);
        assert_eq!(init_size(100, MAX), 256);
        assert_eq!(init_size(600, MAX), MAX);
        assert_eq!(next_size(64, MAX), 128);
        assert_eq!(next_size(16, MAX), 64);
        assert_eq!(next_size(600, MAX), MAX);
    }

    #[test]
    fn a_sequential_stream_ramps_up_to_the_maximum() {
        let mut ra = LinuxReadahead::classic(MAX);
        let mut v = FakeView::new(1 << 30);
        // First read at page 0: initial window 64 pages, marker at 16.
        assert_eq!(read(&mut ra, &mut v, 0, 16), vec![(0, 64)]);
        // Reaching the marker pushes the window: 128 pages, then 256, ...
        assert_eq!(read(&mut ra, &mut v, 16, 16), vec![(64, 128)]);
        let mut sizes = Vec::new();
        let mut page = 32;
        while page < 8192 {
            sizes.extend(read(&mut ra, &mut v, page, 16).into_iter().map(|r| r.1));
            page += 16;
        }
        assert_eq!(sizes.first(), Some(&256));
        assert!(sizes.iter().skip(2).all(|&s| s == MAX), "{sizes:?}");
    }

    #[test]
    fn classic_thrashes_on_interleaved_streams_and_context_does_not() {
        for (modern, want_b_readahead) in [(false, false), (true, true)] {
            let mut ra = if modern {
                LinuxReadahead::context(MAX)
            } else {
                LinuxReadahead::classic(MAX)
            };
            let mut v = FakeView::new(1 << 30);
            let b0 = 1 << 24;
            let mut b_bytes = 0;
            for i in 0..64 {
                read(&mut ra, &mut v, i * 16, 16);
                b_bytes += read(&mut ra, &mut v, b0 + i * 16, 16)
                    .iter()
                    .map(|r| r.1)
                    .sum::<u64>();
            }
            // Stream B: only its own 64 x 16 pages without readahead.
            assert_eq!(
                b_bytes > 64 * 16,
                want_b_readahead,
                "modern={modern}: {b_bytes}"
            );
        }
    }

    #[test]
    fn random_reads_read_only_what_is_asked() {
        let mut ra = LinuxReadahead::context(MAX);
        let mut v = FakeView::new(1 << 30);
        for i in 1..50u64 {
            let page = i * 7919 * 13;
            assert_eq!(read(&mut ra, &mut v, page, 1), vec![(page, 1)]);
            // A neighbour of a random read is not a stream for `context`...
            assert_eq!(read(&mut ra, &mut v, page + 1, 1), vec![(page + 1, 1)]);
        }
        // ...but it is for Linux's trivial test.
        let mut k = LinuxReadahead::modern(32);
        read(&mut k, &mut v, 1 << 20, 1);
        assert_eq!(
            read(&mut k, &mut v, (1 << 20) + 1, 1),
            vec![((1 << 20) + 1, 4)]
        );
    }

    #[test]
    fn context_readahead_follows_history() {
        let mut ra = LinuxReadahead::modern(MAX);
        let mut v = FakeView::new(1 << 30);
        v.pages.extend(1000..1100);
        // A fresh state sees 100 cached pages before 1100: window of 116.
        assert_eq!(read(&mut ra, &mut v, 1100, 16), vec![(1100, 116)]);
        assert_eq!(v.markers.iter().copied().collect::<Vec<_>>(), vec![1215]);
    }
}
