//! The heart of an I/O context, with no threads, clocks or bytes of its
//! own: readahead state (one per LUN, or one per worker), the page cache
//! index, the coalescing backing-read queue, write coherence and counters.
//!
//! The threaded [`IoContext`](super::IoContext) wraps a `Core<Box<[u8]>>`
//! in a mutex and feeds it wall-clock time; the benchmark's discrete-event
//! simulation drives a `Core<()>` in virtual time. Both run exactly this
//! code, so the simulated policies are the served ones.
//!
//! Coherence: a write registers its page range before it reaches the
//! backing store and removes it after; while registered, completing reads
//! never insert pages of that range, and both at the start and at the end
//! cached pages of the range are dropped and in-flight ones turned stale.
//! So once a write has returned, no page read before it can be served.

use super::cache::{PageCache, Slot, PAGE};
use super::planners::new_policy;
use super::policy::{ContextMode, PolicyParams, RaView, Readahead, ReadaheadPolicy};
use super::queue::{Batch, Run, SubmitQueue};
use super::stats::IoStats;

/// Most per-worker states a context keeps (worker indexes wrap beyond).
const MAX_OWNERS: usize = 1024;

/// Fixed shape of a core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CoreConfig {
    /// Bytes in the LUN.
    pub(crate) size: u64,
    pub(crate) policy: ReadaheadPolicy,
    pub(crate) mode: ContextMode,
    pub(crate) params: PolicyParams,
    /// Largest backing read, pages.
    pub(crate) max_io_pages: u64,
}

/// A demand read in progress: its pages and whose state served it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    pub(crate) first: u64,
    pub(crate) end: u64,
    pub(crate) owner: usize,
    /// The read belongs to a stream the policy prefetches.
    pub(crate) stream: bool,
}

#[derive(Debug)]
pub struct Core<D> {
    cfg: CoreConfig,
    num_pages: u64,
    planners: Vec<Box<dyn Readahead>>,
    cache: PageCache<D>,
    queue: SubmitQueue,
    next_id: u64,
    /// Page ranges of writes in progress.
    writes: Vec<(u64, u64)>,
    stats: IoStats,
    /// Backing reads started and not yet completed: other readers'
    /// demand, and readahead (with promoted readahead and streams' misses).
    demand_inflight: u32,
    ra_inflight: u32,
    /// Device cost of the backing reads started lately, in pages of
    /// transfer (one positioning time of transfer per read plus its
    /// pages), halved as it grows: readahead's, and demand's.
    ra_cost: u64,
    demand_cost: u64,
    /// A demand read completed and no backing read started since: its
    /// reader is likely to send the next one at once.
    demand_done: bool,
}

/// Readahead's share of the device's cost while other readers' demand
/// reads wait, per stream the policy prefetches, in thousandths ...
const SHARE_PER_STREAM: u64 = 25;
/// ... and for all of them together.
const SHARE_MAX: u64 = 250;
/// Other readers' demand reads at the device from which they are taken
/// to keep it busy on their own, as if they were queued.
const BUSY_DEMAND: u32 = 2;
/// Cost counters are halved past this many positioning times.
const COST_WINDOW: u64 = 64;

/// Pages covering `len` bytes from `offset`.
pub(crate) fn pages_of(offset: u64, len: u64) -> (u64, u64) {
    let first = offset / PAGE;
    let end = offset.saturating_add(len).div_ceil(PAGE);
    (first, end.max(first))
}

impl<D> Core<D> {
    pub(crate) fn new(cfg: CoreConfig) -> Self {
        Self {
            cfg,
            num_pages: cfg.size.div_ceil(PAGE),
            planners: Vec::new(),
            cache: PageCache::new(cfg.params.cache_pages),
            queue: SubmitQueue::new(cfg.max_io_pages),
            next_id: 0,
            writes: Vec::new(),
            stats: IoStats::default(),
            demand_inflight: 0,
            ra_inflight: 0,
            ra_cost: 0,
            demand_cost: 0,
            demand_done: false,
        }
    }

    pub(crate) fn config(&self) -> &CoreConfig {
        &self.cfg
    }

    /// Switches policy at run time: readahead state restarts, the cache stays.
    pub(crate) fn set_policy(&mut self, policy: ReadaheadPolicy) {
        self.cfg.policy = policy;
        self.planners.clear();
    }

    fn owner(&self, worker: Option<usize>) -> usize {
        match self.cfg.mode {
            ContextMode::Shared => 0,
            ContextMode::PerWorker => worker.unwrap_or(0) % MAX_OWNERS,
        }
    }

    /// A demand read of `len` bytes at `offset` arrives from `worker`: the
    /// policy plans readahead, the missing requested pages are queued as
    /// synchronous reads, and the pages count as used.
    pub fn start_read(&mut self, now: u64, worker: Option<usize>, offset: u64, len: u64) -> Ticket {
        let (first, end) = pages_of(offset, len);
        let owner = self.owner(worker);
        let present = (first..end).filter(|&p| self.cache.present(p)).count() as u64;
        let count = (end - first).max(1);
        self.stats.requests += 1;
        self.stats.bytes += len;
        let hit = len * present / count;
        self.stats.hit_bytes += hit;
        self.stats.miss_bytes += len - hit;
        while self.planners.len() <= owner {
            self.planners
                .push(new_policy(self.cfg.policy, &self.cfg.params));
        }
        let ids_before = self.next_id;
        if let Some(planner) = self.planners.get_mut(owner) {
            let mut view = View {
                urgent: false,
                cache: &mut self.cache,
                queue: &mut self.queue,
                next_id: &mut self.next_id,
                owner,
                demand: (first, end),
                now,
                num_pages: self.num_pages,
            };
            planner.on_read(first, end - first, &mut view);
        }
        let streamed = self.planners.get(owner).is_some_and(|p| p.streamed());
        if streamed {
            // A policy that reads a stream's missing pages as part of its
            // window (`context`): they are the stream's, not another
            // reader's demand.
            self.queue.mark_stream(ids_before);
        }
        let ticket = Ticket {
            first,
            end,
            owner,
            stream: streamed,
        };
        self.queue_missing(&ticket, streamed);
        // Readahead of these pages still queued: someone waits for it now.
        self.stats.promoted += self.queue.promote(first, end);
        for page in first..end {
            self.cache.reference(page);
        }
        ticket
    }

    /// Caches `len` bytes from `offset` as if a read had used them (a warm
    /// cache before a benchmark run), without counting them; stops at the
    /// cache's budget. Returns the pages cached.
    pub fn prewarm(&mut self, offset: u64, len: u64, mut data: impl FnMut(u64) -> D) -> u64 {
        let (first, end) = pages_of(offset, len);
        let end = end.min(self.num_pages);
        let mut cached = 0;
        for page in first..end {
            if self.cache.len() >= self.cache.capacity() {
                break;
            }
            if self.cache.present(page) {
                continue;
            }
            self.next_id += 1;
            let id = self.next_id;
            self.cache.reserve(page, page + 1, id, (page, page + 1));
            self.cache.fill(page, id, data(page));
            self.cache.reference(page);
            cached += 1;
        }
        cached
    }

    /// Queues synchronous reads for the ticket's absent pages (evicted or
    /// dropped by a write since); true when it queued any.
    pub fn ensure(&mut self, t: &Ticket) -> bool {
        self.queue_missing(t, t.stream)
    }

    /// As [`ensure`](Self::ensure); `streamed` marks the reads as a
    /// prefetched stream's misses, which share the stream's turn at the
    /// device rather than counting as other readers' demand.
    fn queue_missing(&mut self, t: &Ticket, streamed: bool) -> bool {
        let mut view = View {
            urgent: streamed,
            cache: &mut self.cache,
            queue: &mut self.queue,
            next_id: &mut self.next_id,
            owner: t.owner,
            demand: (t.first, t.end),
            now: 0,
            num_pages: self.num_pages,
        };
        let before = view.queue.len();
        view.read(t.first, t.end - t.first, None, true);
        view.queue.len() != before
    }

    /// Whether a read of `len` bytes at `offset` would find all its pages
    /// ready (and no write in its way): it can be served without waiting.
    pub fn ready_now(&self, offset: u64, len: u64) -> bool {
        let (first, end) = pages_of(offset, len);
        !self.write_blocked(offset, len) && (first..end).all(|p| self.cache.ready(p).is_some())
    }

    /// All of the ticket's pages are ready.
    pub fn all_ready(&self, t: &Ticket) -> bool {
        (t.first..t.end).all(|p| self.cache.ready(p).is_some())
    }

    /// Some of the ticket's pages are neither cached nor being read.
    pub fn any_absent(&self, t: &Ticket) -> bool {
        (t.first..t.end).any(|p| !self.cache.present(p))
    }

    /// The ready payload of a page.
    pub(crate) fn page(&self, page: u64) -> Option<&D> {
        self.cache.ready(page)
    }

    pub fn has_queued(&self) -> bool {
        !self.queue.is_empty()
    }

    /// Takes the next coalesced backing read, or none while readahead
    /// must leave the device to other readers.
    ///
    /// On a seeking device, readahead and other readers' demand reads
    /// share the device's time (counted as positioning plus transfer):
    /// - while demand reads are queued, readahead (promoted readahead and
    ///   the misses of prefetched streams included) goes first only while
    ///   its share of the recent cost is within [`SHARE_PER_STREAM`] per
    ///   stream the policy prefetches (at most [`SHARE_MAX`]); it then goes
    ///   as one backing read of up to four positioning times of transfer,
    ///   so that its positioning is paid once for many pages;
    /// - otherwise demand reads go first, in their order;
    /// - while [`BUSY_DEMAND`] or more demand reads are in flight, other
    ///   readers keep the device busy without queueing here (a random
    ///   reader at QD4): readahead then goes only within that share, in
    ///   the same large reads, as if their reads were queued;
    /// - while one demand read is in flight, or has just completed and its
    ///   reader is likely to send the next one, at most one readahead read
    ///   is at the device beyond that share, so that the next demand read
    ///   queues behind one backing read, not behind all the I/O threads';
    ///   it transfers for at most one positioning time, so the reader
    ///   waits for it about as long as for one more seek.
    ///
    /// A held read is taken when a backing read in flight completes (the
    /// hold needs one in flight), so a hold never stalls the queue. With no
    /// demand reads at all, the order is the queue's (demand first, then
    /// first come first served).
    pub fn pop_batch(&mut self) -> Option<Batch> {
        let pos = self.cfg.params.competitive_pages;
        let io = self.cfg.max_io_pages;
        let (demand, readahead) = self.queue.heads();
        let (idx, limit) = match (demand, readahead) {
            (None, None) => return None,
            (Some(d), None) => (d, io),
            _ if pos == 0 => (self.queue.oldest_sync_or_first()?, io),
            (None, Some(r)) => {
                let owed = self.readahead_owed();
                if self.demand_inflight >= BUSY_DEMAND {
                    // Other readers keep the device busy on their own:
                    // readahead takes its share only, in large reads.
                    if !owed {
                        return None;
                    }
                    (r, (4 * pos).max(io))
                } else {
                    let waiting = self.demand_inflight > 0 || self.demand_done;
                    if waiting && self.ra_inflight > 0 && !owed {
                        return None;
                    }
                    if waiting {
                        // Beside one reader: the one read it may queue
                        // behind transfers for at most one positioning
                        // time, what one more seek would cost it.
                        (r, pos.max(io))
                    } else {
                        (r, io)
                    }
                }
            }
            (Some(d), Some(r)) => {
                if self.readahead_owed() {
                    (r, (4 * pos).max(io))
                } else {
                    (d, io)
                }
            }
        };
        let batch = self.queue.pop_at(idx, limit)?;
        let cost = batch.count + pos;
        if batch.demand {
            self.demand_cost += cost;
            self.demand_inflight += 1;
            self.demand_done = false;
        } else {
            self.ra_cost += cost;
            self.ra_inflight += 1;
            if self.demand_inflight == 0 {
                self.demand_done = false;
            }
        }
        if self.ra_cost + self.demand_cost > COST_WINDOW * pos.max(1) {
            self.ra_cost /= 2;
            self.demand_cost /= 2;
        }
        let bytes = self.batch_bytes(&batch);
        self.stats.backing_requests += 1;
        self.stats.backing_bytes += bytes;
        self.stats.backing_sizes.record(bytes);
        Some(batch)
    }

    /// Byte range of a backing read, clipped to the LUN.
    pub fn batch_range(&self, batch: &Batch) -> (u64, u64) {
        let start = batch.first.saturating_mul(PAGE);
        let end = batch.end().saturating_mul(PAGE).min(self.cfg.size);
        (start, end.saturating_sub(start))
    }

    fn batch_bytes(&self, batch: &Batch) -> u64 {
        self.batch_range(batch).1
    }

    /// A backing read finished: its pages become ready with `data(page)`,
    /// except those a write overlaps now or overlapped meanwhile.
    pub fn complete(&mut self, batch: &Batch, mut data: impl FnMut(u64) -> D) {
        self.finished(batch);
        for page in batch.first..batch.end() {
            let Some(id) = self.inflight_id(page, batch) else {
                continue;
            };
            if self.write_overlaps(page) {
                self.cache.discard(page, id);
            } else {
                self.cache.fill(page, id, data(page));
            }
        }
    }

    /// A backing read failed: its pages are dropped; waiting readers retry
    /// or read directly and see the error themselves.
    pub(crate) fn fail(&mut self, batch: &Batch) {
        self.finished(batch);
        for page in batch.first..batch.end() {
            if let Some(id) = self.inflight_id(page, batch) {
                self.cache.discard(page, id);
            }
        }
    }

    /// Whether readahead is within its share of the device's recent cost.
    fn readahead_owed(&self) -> bool {
        let streams: u64 = self.planners.iter().map(|p| p.streams()).sum();
        let share = SHARE_PER_STREAM
            .saturating_mul(streams.max(1))
            .min(SHARE_MAX);
        self.ra_cost.saturating_mul(1000) <= share.saturating_mul(self.ra_cost + self.demand_cost)
    }

    /// Counts a backing read out of the device.
    fn finished(&mut self, batch: &Batch) {
        if batch.demand {
            self.demand_inflight = self.demand_inflight.saturating_sub(1);
            self.demand_done = true;
        } else {
            self.ra_inflight = self.ra_inflight.saturating_sub(1);
        }
    }

    fn inflight_id(&self, page: u64, batch: &Batch) -> Option<u64> {
        match self.cache.slot(page) {
            Some(Slot::InFlight { id, .. }) if batch.ids.contains(id) => Some(*id),
            _ => None,
        }
    }

    fn write_overlaps(&self, page: u64) -> bool {
        self.writes.iter().any(|&(s, e)| page >= s && page < e)
    }

    /// Whether a read of these pages must wait for a write in progress.
    pub(crate) fn write_blocked(&self, offset: u64, len: u64) -> bool {
        let (first, end) = pages_of(offset, len);
        self.writes.iter().any(|&(s, e)| first < e && s < end)
    }

    /// A write of `len` bytes at `offset` is about to reach the backing store.
    pub(crate) fn begin_write(&mut self, offset: u64, len: u64) -> (u64, u64) {
        let range = pages_of(offset, len);
        self.writes.push(range);
        self.cache.invalidate(range.0, range.1);
        self.stats.writes += 1;
        range
    }

    /// The write registered as `range` has finished (or failed).
    pub(crate) fn end_write(&mut self, range: (u64, u64)) {
        self.cache.invalidate(range.0, range.1);
        if let Some(i) = self.writes.iter().position(|r| *r == range) {
            self.writes.swap_remove(i);
        }
    }
    pub(crate) fn record_latency(&mut self, ns: u64) {
        self.stats.latency_ns.record(ns);
    }

    pub fn stats(&self) -> IoStats {
        let mut s = self.stats.clone();
        s.wasted_bytes = self.cache.wasted_pages() * PAGE;
        s
    }

    /// Readahead bytes wasted so far plus those cached and still unused (the
    /// benchmark's end-of-run count).
    pub fn wasted_including_unused(&self) -> u64 {
        (self.cache.wasted_pages() + self.cache.unused_readahead_pages()) * PAGE
    }

    /// Pages held in the cache (ready or in flight).
    pub(crate) fn cached_pages(&self) -> u64 {
        self.cache.len()
    }

    pub(crate) fn cache_capacity_pages(&self) -> u64 {
        self.cache.capacity()
    }
}

/// The policy's window on the core for one request.
struct View<'a, D> {
    /// Synchronous reads queued through this view are a stream's.
    urgent: bool,
    cache: &'a mut PageCache<D>,
    queue: &'a mut SubmitQueue,
    next_id: &'a mut u64,
    owner: usize,
    demand: (u64, u64),
    now: u64,
    num_pages: u64,
}

impl<D> RaView for View<'_, D> {
    fn now(&self) -> u64 {
        self.now
    }

    fn num_pages(&self) -> u64 {
        self.num_pages
    }

    fn present(&self, page: u64) -> bool {
        self.cache.present(page)
    }

    fn take_marker(&mut self, page: u64) -> bool {
        self.cache.take_marker(page)
    }

    fn next_miss(&self, from: u64, max: u64) -> u64 {
        self.cache.next_miss(from, max)
    }

    fn history(&self, before: u64, max: u64) -> u64 {
        self.cache.history(before, max)
    }

    fn unused_pages(&self) -> u64 {
        self.cache.unused_pages()
    }

    fn drop_unused(&mut self, start: u64, end: u64) {
        self.cache.drop_unused(start, end);
    }

    fn read(&mut self, start: u64, count: u64, marker: Option<u64>, sync: bool) {
        let end = start.saturating_add(count).min(self.num_pages);
        if start >= end {
            return;
        }
        *self.next_id += 1;
        let id = *self.next_id;
        let runs = self.cache.reserve(start, end, id, self.demand);
        if let Some(m) = marker {
            self.cache.set_marker(m, id);
        }
        for (first, count) in runs {
            self.queue.push(Run {
                id,
                owner: self.owner,
                first,
                count,
                sync,
                urgent: false,
                stream: sync && self.urgent,
                sweep: 0,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn core(policy: ReadaheadPolicy, mode: ContextMode) -> Core<u8> {
        Core::new(CoreConfig {
            size: 1 << 30,
            policy,
            mode,
            params: PolicyParams {
                max_pages: 256,
                cache_pages: 4096,
                competitive_pages: 256,
                skip_pages: 32,
                io_pages: 256,
            },
            max_io_pages: 256,
        })
    }

    fn drain(c: &mut Core<u8>, value: u8) -> Vec<(u64, u64)> {
        let mut done = Vec::new();
        while let Some(b) = c.pop_batch() {
            c.complete(&b, |_| value);
            done.push((b.first, b.count));
        }
        done
    }

    #[test]
    fn none_reads_exactly_the_request_and_then_hits() {
        let mut c = core(ReadaheadPolicy::None, ContextMode::Shared);
        let t = c.start_read(0, None, 8192, 65536);
        assert_eq!((t.first, t.end), (2, 18));
        assert!(!c.all_ready(&t));
        assert_eq!(drain(&mut c, 1), vec![(2, 16)]);
        assert!(c.all_ready(&t));
        let t2 = c.start_read(0, None, 8192, 4096);
        assert!(c.all_ready(&t2));
        let s = c.stats();
        assert_eq!((s.requests, s.bytes, s.hit_bytes), (2, 69632, 4096));
        assert_eq!((s.backing_requests, s.backing_bytes), (1, 65536));
    }

    #[test]
    fn a_write_drops_cached_pages_and_stales_reads_in_flight() {
        let mut c = core(ReadaheadPolicy::None, ContextMode::Shared);
        let t = c.start_read(0, None, 0, 8 * PAGE);
        let batch = c.pop_batch().expect("batch");
        // A write to pages 2..4 starts while the read is in flight.
        let w = c.begin_write(2 * PAGE, 2 * PAGE);
        c.complete(&batch, |_| 1);
        assert!(c.any_absent(&t));
        assert!(c.page(0).is_some() && c.page(2).is_none());
        // Reads queued during the write do not insert pages either.
        assert!(c.write_blocked(3 * PAGE, PAGE));
        assert!(c.ensure(&t));
        drain(&mut c, 2);
        assert!(c.page(2).is_none());
        c.end_write(w);
        assert!(!c.write_blocked(3 * PAGE, PAGE));
        assert!(c.ensure(&t));
        drain(&mut c, 3);
        assert_eq!(c.page(2), Some(&3));
        assert!(c.all_ready(&t));
    }

    #[test]
    fn per_worker_mode_keeps_separate_states_and_queues() {
        let mut c = core(ReadaheadPolicy::None, ContextMode::PerWorker);
        c.start_read(0, Some(0), 0, 4 * PAGE);
        c.start_read(0, Some(1), 4 * PAGE, 4 * PAGE);
        // Adjacent but of different workers: two backing reads.
        assert_eq!(drain(&mut c, 0), vec![(0, 4), (4, 4)]);
        let mut s = core(ReadaheadPolicy::None, ContextMode::Shared);
        s.start_read(0, Some(0), 0, 4 * PAGE);
        s.start_read(0, Some(1), 4 * PAGE, 4 * PAGE);
        assert_eq!(drain(&mut s, 0), vec![(0, 8)]);
    }

    fn queued(id: u64, first: u64, count: u64, sync: bool, stream: bool) -> Run {
        Run {
            id,
            owner: 0,
            first,
            count,
            sync,
            urgent: false,
            stream,
            sweep: 0,
        }
    }

    #[test]
    fn readahead_shares_the_device_with_other_readers_demand() {
        // One positioning time is 256 pages of transfer here.
        let mut c = core(ReadaheadPolicy::None, ContextMode::Shared);
        c.queue.push(queued(1, 1_000_000, 1, true, false));
        c.queue.push(queued(2, 0, 256, false, false));
        c.queue.push(queued(3, 256, 256, false, false));
        c.queue.push(queued(4, 4096, 256, false, false));
        // Readahead within its share goes as one read of up to four
        // positioning times of transfer, past the largest backing read.
        let a = c.pop_batch().expect("readahead");
        assert_eq!((a.first, a.count, a.demand), (0, 512, false));
        // Over its share now: the other reader's demand read goes first.
        let d = c.pop_batch().expect("demand");
        assert_eq!((d.first, d.demand), (1_000_000, true));
        // With a demand read and a readahead read at the device, the next
        // readahead waits, and still while the demand reader, just served,
        // is likely to send its next read ...
        assert!(c.pop_batch().is_none());
        c.finished(&d);
        assert!(c.pop_batch().is_none());
        // ... until the device has nothing of it: it never stalls.
        c.finished(&a);
        let b = c.pop_batch().expect("held readahead");
        assert_eq!((b.first, b.count), (4096, 256));
        // A prefetched stream's miss is not another reader's demand, and
        // with no demand at all readahead is not held.
        let mut c = core(ReadaheadPolicy::None, ContextMode::Shared);
        c.queue.push(queued(1, 0, 16, true, true));
        c.queue.push(queued(2, 4096, 256, false, false));
        c.queue.push(queued(3, 8192, 256, false, false));
        let firsts: Vec<(u64, bool)> = std::iter::from_fn(|| c.pop_batch())
            .map(|b| (b.first, b.demand))
            .collect();
        assert_eq!(firsts, vec![(0, false), (4096, false), (8192, false)]);
    }

    #[test]
    fn readahead_waits_for_its_share_while_other_readers_keep_the_device_busy() {
        // One positioning time is 256 pages of transfer here.
        let mut c = core(ReadaheadPolicy::None, ContextMode::Shared);
        c.ra_cost = 4 * 256;
        c.queue.push(queued(1, 1_000_000, 1, true, false));
        c.queue.push(queued(2, 2_000_000, 1, true, false));
        let d1 = c.pop_batch().expect("demand");
        let d2 = c.pop_batch().expect("demand");
        assert!(d1.demand && d2.demand);
        // Two demand reads at the device and none queued: readahead is
        // over its share and waits, though no demand read is queued ...
        c.queue.push(queued(3, 0, 256, false, false));
        c.queue.push(queued(4, 256, 256, false, false));
        assert!(c.pop_batch().is_none());
        // ... until a completion leaves one reader: one readahead read,
        // of up to one positioning time of transfer.
        c.finished(&d1);
        let a = c.pop_batch().expect("readahead beside one reader");
        assert_eq!((a.first, a.count, a.demand), (0, 256, false));
        // Once owed a share (the demand reads' cost grew), readahead goes
        // while the device is busy, as one read of up to four
        // positioning times.
        let mut c = core(ReadaheadPolicy::None, ContextMode::Shared);
        c.ra_cost = 0;
        c.demand_cost = 10 * 256;
        for i in 0..2 {
            c.queue
                .push(queued(1 + i, 1_000_000 * (i + 1), 1, true, false));
            c.pop_batch().expect("demand");
        }
        for i in 0..4 {
            c.queue.push(queued(10 + i, 256 * i, 256, false, false));
        }
        let big = c.pop_batch().expect("owed readahead");
        assert_eq!((big.first, big.count), (0, 1024));
    }

    #[test]
    fn context_reports_its_streams_and_their_misses() {
        let mut c = core(ReadaheadPolicy::Context, ContextMode::Shared);
        // Two interleaved sequential streams, far apart, and a random
        // reader's lone reads.
        for i in 0..32u64 {
            for base in [0u64, 1 << 28] {
                let t = c.start_read(i * 1_000_000, None, base + i * 65536, 65536);
                if i > 4 {
                    assert!(t.stream || c.all_ready(&t), "{base} {i}");
                }
                drain(&mut c, 0);
            }
            let t = c.start_read(i * 1_000_000, None, (1 << 29) + i * 7919 * 4096, 4096);
            assert!(!t.stream);
            drain(&mut c, 0);
        }
        let streams: u64 = c.planners.iter().map(|p| p.streams()).sum();
        assert_eq!(streams, 2);
        // Past the expiry, with no read of theirs, they are gone.
        c.start_read(40_000_000_000, None, 1 << 29, 4096);
        let streams: u64 = c.planners.iter().map(|p| p.streams()).sum();
        assert_eq!(streams, 1, "a single state counts as one at least");
    }

    #[test]
    fn sequential_reads_with_context_readahead_become_hits() {
        let mut c = core(ReadaheadPolicy::Context, ContextMode::Shared);
        let mut hits = 0;
        for i in 0..64u64 {
            let t = c.start_read(0, None, i * 65536, 65536);
            hits += u64::from(c.all_ready(&t));
            drain(&mut c, 0);
        }
        assert!(hits >= 60, "{hits}");
        let s = c.stats();
        assert!(s.mean_backing_size() >= 256.0 * 1024.0, "{s:?}");
    }
}
