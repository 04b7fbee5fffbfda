//! The readahead cache's index: which pages of the LUN are cached or being
//! read, with Linux-style readahead markers, LRU eviction under a page
//! budget, and the bookkeeping for wasted readahead.
//!
//! Generic over the payload `D`: the I/O context stores the bytes
//! (`Box<[u8]>`), the simulation stores nothing (`()`), and both run the
//! same index, so the history that context readahead and stream detection
//! read is the same in both.
//!
//! Guarantees:
//! - a page is either absent, in flight for exactly one backing request
//!   (named by its id), or ready with its payload;
//! - an in-flight page marked stale (a write overlapped it) is dropped on
//!   completion instead of filled, so stale bytes never become readable;
//! - readahead reservations never take the cache past its budget (they are
//!   trimmed instead); demand reservations may exceed it by at most what
//!   the callers are waiting for;
//! - eviction is use-once: pages a read has already used go first (least
//!   recently used first), and pages read ahead but not yet used only when
//!   no used page is left (oldest first), so a stream's prefetched data is
//!   not evicted by other streams' consumed data.

use std::collections::{BTreeMap, BTreeSet};

/// Cache page size in bytes (the unit of readahead, as in Linux).
pub const PAGE: u64 = 4096;

/// A page's data state.
#[derive(Debug)]
pub(crate) enum Slot<D> {
    /// A backing read `id` will fill it; `stale` when a write overlapped it.
    InFlight {
        id: u64,
        stale: bool,
    },
    Ready(D),
}

#[derive(Debug)]
pub(crate) struct Page<D> {
    pub(crate) slot: Slot<D>,
    /// PG_readahead: reaching this page triggers asynchronous readahead.
    marker: bool,
    /// Brought in by readahead rather than by the read that needed it.
    readahead: bool,
    /// Read by a demand request at least once.
    referenced: bool,
    /// LRU position (only meaningful while ready).
    tick: u64,
}

/// The page index of one readahead cache.
#[derive(Debug)]
pub(crate) struct PageCache<D> {
    pages: BTreeMap<u64, Page<D>>,
    /// Ready pages some read has used, by last use: `(tick, page)`.
    used: BTreeSet<(u64, u64)>,
    /// Ready pages no read has used yet (readahead ahead of its reader).
    ahead: BTreeSet<(u64, u64)>,
    cap: u64,
    tick: u64,
    /// Readahead pages evicted before any read used them.
    wasted: u64,
    /// Pages (ready or in flight) no read has used yet.
    unused: u64,
}

impl<D> PageCache<D> {
    pub(crate) fn new(cap_pages: u64) -> Self {
        Self {
            pages: BTreeMap::new(),
            used: BTreeSet::new(),
            ahead: BTreeSet::new(),
            cap: cap_pages.max(1),
            tick: 0,
            wasted: 0,
            unused: 0,
        }
    }

    /// Pages held (ready or in flight).
    pub(crate) fn len(&self) -> u64 {
        self.pages.len() as u64
    }

    pub(crate) fn capacity(&self) -> u64 {
        self.cap
    }

    pub(crate) fn present(&self, page: u64) -> bool {
        self.pages.contains_key(&page)
    }

    pub(crate) fn slot(&self, page: u64) -> Option<&Slot<D>> {
        self.pages.get(&page).map(|p| &p.slot)
    }

    pub(crate) fn ready(&self, page: u64) -> Option<&D> {
        match self.pages.get(&page).map(|p| &p.slot) {
            Some(Slot::Ready(d)) => Some(d),
            _ => None,
        }
    }

    /// Clears the page's readahead marker; true when it had one.
    pub(crate) fn take_marker(&mut self, page: u64) -> bool {
        match self.pages.get_mut(&page) {
            Some(p) if p.marker => {
                p.marker = false;
                true
            }
            _ => false,
        }
    }

    /// The first page at or after `from` that is absent, looking at most
    /// `max` pages far; `from + max` when all of them are present.
    pub(crate) fn next_miss(&self, from: u64, max: u64) -> u64 {
        let mut expect = from;
        for (&page, _) in self.pages.range(from..from.saturating_add(max)) {
            if page != expect {
                break;
            }
            expect += 1;
        }
        expect
    }

    /// How many pages just before `before` are present without a gap, at
    /// most `max` (Linux's count_history_pages).
    pub(crate) fn history(&self, before: u64, max: u64) -> u64 {
        let mut expect = before;
        let mut count = 0;
        for (&page, _) in self.pages.range(before.saturating_sub(max)..before).rev() {
            if Some(page) != expect.checked_sub(1) {
                break;
            }
            expect = page;
            count += 1;
        }
        count
    }

    /// Marks the absent pages of `[start, end)` in flight for request `id`.
    /// Pages in `demand` are the caller's own; the rest are readahead and are
    /// trimmed at the budget. Returns the reserved runs `(first, count)`.
    pub(crate) fn reserve(
        &mut self,
        start: u64,
        end: u64,
        id: u64,
        demand: (u64, u64),
    ) -> Vec<(u64, u64)> {
        let mut runs: Vec<(u64, u64)> = Vec::new();
        let mut page = start;
        while page < end {
            if self.pages.contains_key(&page) {
                page = self.next_miss(page, end - page);
                continue;
            }
            let readahead = page < demand.0 || page >= demand.1;
            if !self.make_room(readahead) {
                break;
            }
            self.unused += 1;
            self.pages.insert(
                page,
                Page {
                    slot: Slot::InFlight { id, stale: false },
                    marker: false,
                    readahead,
                    referenced: false,
                    tick: 0,
                },
            );
            match runs.last_mut() {
                Some((first, count)) if *first + *count == page => *count += 1,
                _ => runs.push((page, 1)),
            }
            page += 1;
        }
        runs
    }

    /// Sets the readahead marker on a page reserved for request `id`.
    pub(crate) fn set_marker(&mut self, page: u64, id: u64) {
        if let Some(p) = self.pages.get_mut(&page) {
            if matches!(p.slot, Slot::InFlight { id: i, .. } if i == id) {
                p.marker = true;
            }
        }
    }

    /// Evicts until one more page fits; a readahead page never exceeds the
    /// budget, a demand page may.
    fn make_room(&mut self, readahead: bool) -> bool {
        while self.len() >= self.cap {
            if !self.evict_one() {
                return !readahead;
            }
        }
        true
    }

    fn evict_one(&mut self) -> bool {
        let Some((tick, page)) = self.used.pop_first().or_else(|| self.ahead.pop_first()) else {
            return false;
        };
        if let Some(p) = self.remove(page) {
            debug_assert_eq!(p.tick, tick);
            if p.readahead && !p.referenced {
                self.wasted += 1;
            }
        }
        true
    }

    /// Removes a page from the index, keeping the unused count.
    fn remove(&mut self, page: u64) -> Option<Page<D>> {
        let p = self.pages.remove(&page)?;
        if !p.referenced {
            self.unused -= 1;
        }
        Some(p)
    }

    /// Pages cached or being read that no read has used yet: what
    /// readahead holds ahead of its readers.
    pub(crate) fn unused_pages(&self) -> u64 {
        self.unused
    }

    /// Completes page `page` of request `id` with `data`. Returns false (and
    /// drops the page) when it was marked stale; does nothing when the page
    /// no longer belongs to `id`.
    pub(crate) fn fill(&mut self, page: u64, id: u64, data: D) -> bool {
        let Some(p) = self.pages.get_mut(&page) else {
            return false;
        };
        match p.slot {
            Slot::InFlight { id: i, stale } if i == id => {
                if stale {
                    self.remove(page);
                    return false;
                }
                self.tick += 1;
                p.slot = Slot::Ready(data);
                p.tick = self.tick;
                let list = if p.referenced {
                    &mut self.used
                } else {
                    &mut self.ahead
                };
                list.insert((self.tick, page));
                true
            }
            _ => false,
        }
    }

    /// Drops page `page` if it is still in flight for request `id` (failed read).
    pub(crate) fn discard(&mut self, page: u64, id: u64) {
        if let Some(p) = self.pages.get(&page) {
            if matches!(p.slot, Slot::InFlight { id: i, .. } if i == id) {
                self.remove(page);
            }
        }
    }

    /// A demand read uses the page: it counts as referenced and moves to
    /// the most-recently-used end.
    pub(crate) fn reference(&mut self, page: u64) {
        let Some(p) = self.pages.get_mut(&page) else {
            return;
        };
        if matches!(p.slot, Slot::Ready(_)) {
            let was = (p.tick, page);
            if p.referenced {
                self.used.remove(&was);
            } else {
                self.ahead.remove(&was);
            }
            self.tick += 1;
            p.tick = self.tick;
            self.used.insert((self.tick, page));
        }
        if !p.referenced {
            p.referenced = true;
            self.unused -= 1;
        }
    }

    /// A write covers `[start, end)`: ready pages go, in-flight ones turn stale.
    pub(crate) fn invalidate(&mut self, start: u64, end: u64) {
        let keys: Vec<u64> = self.pages.range(start..end).map(|(&k, _)| k).collect();
        for page in keys {
            let Some(p) = self.pages.get_mut(&page) else {
                continue;
            };
            match &mut p.slot {
                Slot::InFlight { stale, .. } => *stale = true,
                Slot::Ready(_) => {
                    let key = (p.tick, page);
                    self.used.remove(&key);
                    self.ahead.remove(&key);
                    self.remove(page);
                }
            }
        }
    }

    /// Drops the pages of `[start, end)` that readahead brought in and no
    /// read has used: a strided reader has passed over them and will not
    /// come back. Ready ones go now, in-flight ones when their read ends
    /// (as if a write had overlapped them). They count as wasted. Returns
    /// how many were dropped.
    pub(crate) fn drop_unused(&mut self, start: u64, end: u64) -> u64 {
        let mut ready = Vec::new();
        let mut dropped = 0;
        for (&page, p) in self.pages.range_mut(start..end) {
            if !p.readahead || p.referenced {
                continue;
            }
            match &mut p.slot {
                Slot::Ready(_) => ready.push((p.tick, page)),
                Slot::InFlight { stale, .. } => {
                    if !*stale {
                        *stale = true;
                        dropped += 1;
                    }
                }
            }
        }
        for &(tick, page) in &ready {
            self.ahead.remove(&(tick, page));
            self.remove(page);
        }
        dropped += ready.len() as u64;
        self.wasted += dropped;
        dropped
    }

    /// Readahead pages evicted unused so far.
    pub(crate) fn wasted_pages(&self) -> u64 {
        self.wasted
    }

    /// Readahead pages still cached and never used.
    pub(crate) fn unused_readahead_pages(&self) -> u64 {
        self.pages
            .values()
            .filter(|p| p.readahead && !p.referenced)
            .count() as u64
    }

    /// Drops everything (policy change keeps data; this is for tests).
    #[cfg(test)]
    pub(crate) fn clear(&mut self) {
        self.pages.clear();
        self.used.clear();
        self.ahead.clear();
        self.unused = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A demand read of `[start, end)`: reserved, filled and used.
    fn filled(cache: &mut PageCache<()>, start: u64, end: u64, id: u64) {
        for (first, count) in cache.reserve(start, end, id, (start, end)) {
            for p in first..first + count {
                assert!(cache.fill(p, id, ()));
                cache.reference(p);
            }
        }
    }

    #[test]
    fn history_and_next_miss_see_contiguous_runs() {
        let mut c = PageCache::new(100);
        filled(&mut c, 10, 20, 1);
        assert_eq!(c.history(20, 100), 10);
        assert_eq!(c.history(20, 4), 4);
        assert_eq!(c.history(15, 100), 5);
        assert_eq!(c.history(10, 100), 0);
        assert_eq!(c.history(21, 100), 0);
        assert_eq!(c.next_miss(10, 100), 20);
        assert_eq!(c.next_miss(12, 3), 15);
        assert_eq!(c.next_miss(25, 100), 25);
    }

    #[test]
    fn skipped_readahead_is_dropped_ready_now_and_in_flight_on_completion() {
        let mut c: PageCache<()> = PageCache::new(100);
        // A demand read of 0..4 with readahead to 16; 4..8 arrive, 8..16
        // are still being read when the reader skips to 16.
        assert_eq!(c.reserve(0, 16, 1, (0, 4)), vec![(0, 16)]);
        for p in 0..8 {
            assert!(c.fill(p, 1, ()));
        }
        for p in 0..4 {
            c.reference(p);
        }
        assert_eq!(c.unused_pages(), 12);
        assert_eq!(c.drop_unused(0, 16), 12);
        // Used pages stay; unused ready ones are gone at once.
        assert!((0..4).all(|p| c.ready(p).is_some()));
        assert!((4..8).all(|p| !c.present(p)));
        // In-flight ones are dropped when their read completes.
        assert!((8..16).all(|p| c.present(p)));
        for p in 8..16 {
            assert!(!c.fill(p, 1, ()));
        }
        assert!((8..16).all(|p| !c.present(p)));
        assert_eq!((c.unused_pages(), c.wasted_pages(), c.len()), (0, 12, 4));
        // Dropping again counts nothing twice.
        assert_eq!(c.drop_unused(0, 16), 0);
    }

    #[test]
    fn reserve_skips_present_pages_and_respects_the_budget() {
        let mut c: PageCache<()> = PageCache::new(8);
        filled(&mut c, 2, 4, 1);
        let runs = c.reserve(0, 8, 2, (0, 1));
        assert_eq!(runs, vec![(0, 2), (4, 4)]);
        assert_eq!(c.len(), 8);
        // Full: readahead evicts the two ready pages, then is trimmed...
        assert_eq!(c.reserve(8, 12, 3, (0, 0)), vec![(8, 2)]);
        assert!(!c.present(2) && !c.present(3));
        // ...while demand may go past the budget.
        assert_eq!(c.reserve(11, 12, 4, (11, 12)), vec![(11, 1)]);
        assert_eq!(c.len(), 9);
    }

    #[test]
    fn eviction_is_use_once_and_counts_unused_readahead_as_waste() {
        let mut c: PageCache<()> = PageCache::new(6);
        // Pages 0..4 by readahead (demand range elsewhere).
        for (first, count) in c.reserve(0, 4, 1, (100, 101)) {
            for p in first..first + count {
                c.fill(p, 1, ());
            }
        }
        c.reference(0);
        c.reference(1);
        // Used pages go first, least recently used first: 0, then 1.
        filled(&mut c, 10, 12, 2);
        filled(&mut c, 20, 21, 3);
        assert!(!c.present(0) && c.present(1) && c.present(2));
        assert_eq!(c.wasted_pages(), 0);
        // Then the used 10, 11, 20 and 1, and only then unused readahead.
        filled(&mut c, 30, 35, 4);
        assert!(!c.present(1) && !c.present(10) && !c.present(2));
        assert!(c.present(3));
        assert_eq!(c.wasted_pages(), 1);
        assert_eq!(c.len(), 6);
        // Unused now: page 3 only (the others were read by demand).
        assert_eq!(c.unused_pages(), 1);
        c.reference(3);
        assert_eq!(c.unused_pages(), 0);
    }

    #[test]
    fn stale_pages_are_dropped_on_fill_and_ids_must_match() {
        let mut c: PageCache<u8> = PageCache::new(10);
        c.reserve(0, 2, 7, (0, 2));
        c.invalidate(1, 2);
        assert!(c.fill(0, 7, 1));
        assert!(!c.fill(1, 7, 1));
        assert!(!c.present(1));
        // A page re-reserved by a newer request ignores the older one.
        c.reserve(1, 2, 8, (1, 2));
        assert!(!c.fill(1, 7, 9));
        assert!(c.fill(1, 8, 2));
        assert_eq!(c.ready(1), Some(&2));
        c.invalidate(0, 2);
        assert_eq!(c.len(), 0);
        c.clear();
    }

    #[test]
    fn markers_are_taken_once() {
        let mut c: PageCache<()> = PageCache::new(10);
        c.reserve(0, 4, 3, (0, 0));
        c.set_marker(2, 3);
        c.set_marker(3, 99);
        assert!(c.take_marker(2));
        assert!(!c.take_marker(2));
        assert!(!c.take_marker(3));
    }
}
