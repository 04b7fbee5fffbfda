//! The backing-read queue of an I/O context: page runs waiting for a free
//! I/O slot, with synchronous (someone waits) runs served first and
//! adjacent runs of the same owner coalesced into one large backing read.
//!
//! Readahead that a demand read comes to wait for before it started is
//! promoted ([`SubmitQueue::promote`]): it becomes synchronous in its place
//! in the queue, so a stream whose next pages were queued as readahead
//! does not wait behind misses that came after them (nor, at a shared
//! device, for its context's turn). Promoted runs get no place ahead of
//! older misses of their own streams: that starved streams whose reads
//! missed (W2-8). Which of readahead and other readers' demand reads goes
//! next is the core's device share ([`Core::pop_batch`](super::core::Core::pop_batch));
//! among queued readahead the device is swept upward (C-SCAN).
//!
//! In shared mode every run has owner 0, so neighbouring requests from
//! different workers merge; in per-worker mode each worker owns its runs,
//! as each pre-patch thread had its own fd and I/O context, and nothing
//! merges across workers.

use std::collections::VecDeque;

/// A run of pages reserved in the cache for request `id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Run {
    pub(crate) id: u64,
    pub(crate) owner: usize,
    pub(crate) first: u64,
    pub(crate) count: u64,
    pub(crate) sync: bool,
    /// Promoted readahead (synchronous now, counted once).
    pub(crate) urgent: bool,
    /// A miss of a stream the policy prefetches (not another reader's).
    pub(crate) stream: bool,
    /// The sweep this run joined (set by the queue).
    pub(crate) sweep: u64,
}

/// One backing read: a contiguous page range made of one or more runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub(crate) first: u64,
    pub(crate) count: u64,
    /// The ids whose pages this read fills.
    pub(crate) ids: Vec<u64>,
    pub(crate) sync: bool,
    /// A reader other than a prefetched stream waits for it: its head run
    /// is synchronous and neither promoted readahead nor a stream's miss.
    pub(crate) demand: bool,
}

impl Batch {
    /// A demand read (someone waits for it), not readahead.
    pub fn is_sync(&self) -> bool {
        self.sync
    }

    pub(crate) fn end(&self) -> u64 {
        self.first + self.count
    }
}

#[derive(Debug)]
pub(crate) struct SubmitQueue {
    runs: VecDeque<Run>,
    /// Largest backing read, pages.
    max_pages: u64,
    /// The page after the last readahead read taken.
    scan: u64,
    /// The sweep runs queued now join: runs queued while a sweep is
    /// served wait for the next, so a stream whose runs keep landing
    /// ahead of the sweep cannot hold it (FSCAN).
    sweep: u64,
}

impl SubmitQueue {
    pub(crate) fn new(max_pages: u64) -> Self {
        Self {
            runs: VecDeque::new(),
            max_pages: max_pages.max(1),
            scan: 0,
            sweep: 0,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.runs.len()
    }

    /// Queues a run, split into pieces no larger than a backing read.
    pub(crate) fn push(&mut self, run: Run) {
        let mut first = run.first;
        let end = run.first + run.count;
        while first < end {
            let count = (end - first).min(self.max_pages);
            self.runs.push_back(Run {
                first,
                count,
                sweep: self.sweep,
                ..run
            });
            first += count;
        }
    }

    /// Makes the queued asynchronous runs holding pages of `[first, end)`
    /// synchronous (a demand read waits for them); returns how many it
    /// promoted. Only while demand reads are queued, which would go
    /// first: among readahead runs the order stays the sweep's, which
    /// keeps interleaved streams' backing reads in long runs.
    pub(crate) fn promote(&mut self, first: u64, end: u64) -> u64 {
        if !self.runs.iter().any(|r| r.sync && !r.urgent) {
            return 0;
        }
        let mut n = 0;
        for r in &mut self.runs {
            if !r.sync && r.first < end && first < r.first + r.count {
                r.urgent = true;
                r.sync = true;
                n += 1;
            }
        }
        n
    }

    /// Marks the synchronous runs of requests after `id` (queued by the
    /// read just planned) as a prefetched stream's misses.
    pub(crate) fn mark_stream(&mut self, id: u64) {
        for r in &mut self.runs {
            if r.id > id && r.sync && !r.urgent {
                r.stream = true;
            }
        }
    }

    /// The next backing read: the oldest synchronous run (promoted ones
    /// included), else the oldest run, grown by every queued run of the
    /// same owner that touches it, up to the size limit.
    #[cfg(test)]
    pub(crate) fn pop(&mut self) -> Option<Batch> {
        let idx = self.oldest_sync_or_first()?;
        self.pop_at(idx, self.max_pages)
    }

    /// Index of the oldest synchronous run, else of the oldest run.
    pub(crate) fn oldest_sync_or_first(&self) -> Option<usize> {
        if self.runs.is_empty() {
            return None;
        }
        Some(self.runs.iter().position(|r| r.sync).unwrap_or(0))
    }

    /// The oldest demand run (synchronous, neither promoted readahead nor
    /// a prefetched stream's miss) and the next readahead run: promoted
    /// readahead and streams' misses first, oldest first, else the
    /// asynchronous run next up the device from the last readahead read,
    /// in one sweep (C-SCAN), so that interleaved streams' backing reads
    /// seek a short way each, in turn.
    pub(crate) fn heads(&self) -> (Option<usize>, Option<usize>) {
        let demand = self
            .runs
            .iter()
            .position(|r| r.sync && !r.urgent && !r.stream);
        let ra = self
            .runs
            .iter()
            .position(|r| r.urgent || r.stream)
            .or_else(|| {
                // Sweeps up the device (C-SCAN) over the runs of the
                // oldest sweep: the first at or after the last readahead
                // read, else the lowest.
                self.runs
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| !r.sync)
                    .min_by_key(|(_, r)| (r.sweep, r.first < self.scan, r.first))
                    .map(|(i, _)| i)
            });
        (demand, ra)
    }

    /// The backing read headed by the run at `idx`, grown by every queued
    /// run of the same owner that touches it, up to `limit` pages (at
    /// least the largest backing read).
    pub(crate) fn pop_at(&mut self, idx: usize, limit: u64) -> Option<Batch> {
        let limit = limit.max(self.max_pages);
        let head = self.runs.remove(idx)?;
        let mut batch = Batch {
            first: head.first,
            count: head.count,
            ids: vec![head.id],
            sync: head.sync,
            demand: head.sync && !head.urgent && !head.stream,
        };
        loop {
            let next = self.runs.iter().position(|r| {
                r.owner == head.owner
                    && batch.count + r.count <= limit
                    && (r.first == batch.end() || r.first + r.count == batch.first)
            });
            let Some(i) = next else { break };
            let Some(r) = self.runs.remove(i) else { break };
            batch.first = batch.first.min(r.first);
            batch.count += r.count;
            batch.sync |= r.sync;
            if !batch.ids.contains(&r.id) {
                batch.ids.push(r.id);
            }
        }
        if !batch.sync {
            self.scan = batch.end();
            // Later runs join the next sweep.
            self.sweep = self.sweep.max(head.sweep + 1);
        }
        Some(batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: u64, owner: usize, first: u64, count: u64, sync: bool) -> Run {
        Run {
            id,
            owner,
            first,
            count,
            sync,
            urgent: false,
            stream: false,
            sweep: 0,
        }
    }

    #[test]
    fn promoted_readahead_goes_before_later_demand() {
        let mut q = SubmitQueue::new(256);
        q.push(run(3, 0, 64, 64, false));
        q.push(run(4, 0, 128, 64, false));
        q.push(run(1, 0, 1000, 1, true));
        q.push(run(2, 0, 2000, 1, true));
        // A read of pages 100..110 waits on run 3.
        assert_eq!(q.promote(100, 110), 1);
        assert_eq!(q.promote(100, 110), 0, "promoted once");
        let b = q.pop().expect("batch");
        // Run 3 in its place, before the later demand reads, with its
        // queued neighbour 4, as one synchronous read.
        assert_eq!((b.first, b.count, b.sync), (64, 128, true));
        assert_eq!(b.ids, vec![3, 4]);
        assert_eq!(q.pop().map(|b| b.first), Some(1000));
        assert_eq!(q.pop().map(|b| b.first), Some(2000));
        // With no demand queued there is nothing to overtake: readahead
        // keeps its order.
        let mut q = SubmitQueue::new(256);
        q.push(run(3, 0, 64, 64, false));
        q.push(run(5, 0, 500, 4, false));
        assert_eq!(q.promote(500, 504), 0);
        assert_eq!(q.pop().map(|b| b.first), Some(64));
        // Without the promotion run 3 would have gone after the demand.
        let mut q = SubmitQueue::new(256);
        q.push(run(3, 0, 64, 64, false));
        q.push(run(1, 0, 1000, 1, true));
        assert_eq!(q.pop().map(|b| b.first), Some(1000));
    }

    #[test]
    fn readahead_sweeps_up_the_device() {
        let mut q = SubmitQueue::new(256);
        q.push(run(1, 0, 5000, 16, false));
        q.push(run(2, 0, 1000, 16, false));
        q.push(run(3, 0, 3000, 16, false));
        let (_, ra) = q.heads();
        let first = ra.and_then(|i| q.pop_at(i, 256)).map(|b| b.first);
        assert_eq!(first, Some(1000));
        // A run behind the sweep waits for the next one.
        q.push(run(4, 0, 500, 16, false));
        let mut order = Vec::new();
        while let Some(b) = q.heads().1.and_then(|i| q.pop_at(i, 256)) {
            order.push(b.first);
        }
        assert_eq!(order, vec![3000, 5000, 500]);
    }

    #[test]
    fn adjacent_runs_of_one_owner_coalesce_in_either_direction() {
        let mut q = SubmitQueue::new(256);
        q.push(run(1, 0, 32, 16, false));
        q.push(run(2, 0, 48, 16, false));
        q.push(run(3, 0, 16, 16, true));
        q.push(run(4, 1, 64, 16, false));
        q.push(run(5, 0, 100, 4, false));
        let b = q.pop().expect("batch");
        // The sync run goes first and absorbs its neighbours of owner 0.
        assert_eq!((b.first, b.count, b.sync), (16, 48, true));
        assert_eq!(b.ids, vec![3, 1, 2]);
        assert_eq!(q.pop().map(|b| (b.first, b.count)), Some((64, 16)));
        assert_eq!(q.pop().map(|b| (b.first, b.count)), Some((100, 4)));
        assert!(q.pop().is_none());
    }

    #[test]
    fn large_runs_are_split_and_merges_respect_the_limit() {
        let mut q = SubmitQueue::new(64);
        q.push(run(1, 0, 0, 150, false));
        assert_eq!(q.len(), 3);
        let sizes: Vec<u64> = std::iter::from_fn(|| q.pop()).map(|b| b.count).collect();
        assert_eq!(sizes, vec![64, 64, 22]);
    }
}
