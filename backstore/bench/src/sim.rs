//! The discrete-event simulation: initiator streams → link → the LUN's
//! worker pool → the I/O context core (the served policy code) → the
//! hddsim model, all in virtual nanoseconds. Deterministic: the same
//! configuration gives the same numbers on any machine.
//!
//! The pieces:
//! - commands reach the target half a round trip after they are issued;
//! - in shared mode a command whose pages are all cached is served on
//!   arrival without a worker, as the reactor serves it inline (the
//!   context's non-blocking attempt);
//! - an idle worker takes each other command (idle workers queue FIFO, as
//!   threads on a condition variable do), so a QD1 stream visits the
//!   workers in turn;
//! - the worker calls the core; if its pages are not ready it blocks until
//!   backing reads fill them;
//! - at most `io_threads` coalesced backing reads are out at the device at a
//!   time; each is queued on the disks' actuators by the model;
//! - a workload may have several LUNs on the device (W2-seed), each with
//!   its own worker pool and I/O context core; the LUNs' readahead takes
//!   turns at the device by the same rules as on served LUNs (`TurnState`).
//!   A backing read waiting for its turn holds one of its LUN's I/O slots,
//!   as a waiting I/O thread does;
//! - read data goes back over one shared link (GbE by default), then half a
//!   round trip later the initiator sees completion and issues more, after
//!   the stream's think time;
//! - streams may start late (`start_ms` in a workload file), and a LUN's
//!   cache may hold pages before the run starts (`prewarm`).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::rng::SplitMix64;
use super::workload::{Direction, Pattern, Stream, Workload};
use rustgt_backstore::hddsim::{ArrayParams, ArrayState};
use rustgt_backstore::ioctx::simulation::{Batch, SimCore, Ticket, TurnState};
use rustgt_backstore::ioctx::{ContextMode, IoContextOptions};

/// The front-end link between initiator and target.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    /// Payload bytes per second; 0 means unlimited.
    pub rate: f64,
    /// Command round trip outside the data transfer, ns.
    pub rtt_ns: u64,
}

impl Default for Link {
    /// Gigabit Ethernet as in the seed: about 117 MB/s of iSCSI payload and
    /// 0.1 ms per command.
    fn default() -> Self {
        Self {
            rate: 117e6,
            rtt_ns: 100_000,
        }
    }
}

/// One simulated run's setup.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    pub array: ArrayParams,
    pub link: Link,
    pub ctx: IoContextOptions,
    /// Virtual run time, ns.
    pub duration_ns: u64,
    pub seed: u64,
}

/// What one run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct SimResult {
    /// Bytes completed per stream within the run time.
    pub stream_bytes: Vec<u64>,
    /// Which streams are sequential.
    pub sequential: Vec<bool>,
    pub duration_ns: u64,
    /// Every completed request's latency (issue to completion), ns.
    pub latencies: Vec<u64>,
    pub requests: u64,
    pub demand_bytes: u64,
    pub hit_bytes: u64,
    pub backing_requests: u64,
    pub backing_bytes: u64,
    /// Readahead bytes evicted unused, or still unused at the end.
    pub wasted_bytes: u64,
    /// Turns at the device (0 with turns off).
    pub device_turns: u64,
}

impl SimResult {
    /// MB/s (10^6 bytes) of stream `i`.
    pub fn stream_mb_s(&self, i: usize) -> f64 {
        let bytes = self.stream_bytes.get(i).copied().unwrap_or(0);
        mb_s(bytes, self.duration_ns)
    }

    pub fn aggregate_mb_s(&self) -> f64 {
        mb_s(self.stream_bytes.iter().sum(), self.duration_ns)
    }

    /// Latency quantile `q` in ns (exact, from every sample).
    pub fn latency_quantile(&self, q: f64) -> u64 {
        let mut v = self.latencies.clone();
        v.sort_unstable();
        if v.is_empty() {
            return 0;
        }
        let rank = ((v.len() as f64) * q).ceil() as usize;
        v.get(rank.clamp(1, v.len()) - 1).copied().unwrap_or(0)
    }

    pub fn hit_ratio(&self) -> f64 {
        if self.demand_bytes == 0 {
            0.0
        } else {
            self.hit_bytes as f64 / self.demand_bytes as f64
        }
    }

    pub fn mean_backing_bytes(&self) -> f64 {
        if self.backing_requests == 0 {
            0.0
        } else {
            self.backing_bytes as f64 / self.backing_requests as f64
        }
    }

    /// Wasted readahead as a fraction of the bytes asked for.
    pub fn extra_fraction(&self) -> f64 {
        if self.demand_bytes == 0 {
            0.0
        } else {
            self.wasted_bytes as f64 / self.demand_bytes as f64
        }
    }
}

fn mb_s(bytes: u64, ns: u64) -> f64 {
    if ns == 0 {
        0.0
    } else {
        bytes as f64 / (ns as f64 / 1e9) / 1e6
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// A command reaches the target.
    Arrive(usize),
    /// Backing read in slot `usize` is done.
    BackingDone(usize),
    /// The initiator sees the command complete.
    Complete(usize),
    /// A stream issues its first requests (its start time).
    Start(usize),
    /// A stream issues its next request (or group) after its think time.
    Issue(usize),
    /// An idle owner's anticipation at the device ends: waiting LUNs ask
    /// again.
    TurnTimer,
}

#[derive(Debug, Clone, Copy)]
struct Cmd {
    stream: usize,
    lun: usize,
    offset: u64,
    len: u64,
    issued: u64,
}

/// Initiator-side state of one stream.
#[derive(Debug)]
struct Gen {
    pattern: Pattern,
    think_ns: u64,
    /// Sequential: requests issued so far (the position wraps in the
    /// region); batched: the next offset.
    next: u64,
    rng: SplitMix64,
    cluster_base: u64,
    cluster_left: u32,
    /// Commands of the current batch still outstanding.
    batch_left: usize,
}

impl Gen {
    fn new(stream: &Stream, seed: u64) -> Self {
        let next = match &stream.pattern {
            Pattern::Batched { start, .. } => *start,
            Pattern::Sequential { .. } | Pattern::Random { .. } => 0,
        };
        Self {
            pattern: stream.pattern.clone(),
            think_ns: stream.think_ns,
            next,
            rng: SplitMix64::new(seed),
            cluster_base: 0,
            cluster_left: 0,
            batch_left: 0,
        }
    }

    /// The next `(offset, len)` of a sequential or random stream.
    fn next_request(&mut self) -> (u64, u64) {
        match self.pattern {
            Pattern::Sequential {
                start,
                len,
                req,
                stride,
                direction,
                ..
            } => {
                // Request k of a region holding `slots` of them.
                let slots = len.saturating_sub(req) / stride.max(1) + 1;
                let k = self.next % slots;
                self.next += 1;
                let k = match direction {
                    Direction::Forward => k,
                    Direction::Reverse => slots - 1 - k,
                };
                (start + k * stride, req)
            }
            Pattern::Batched { req, .. } => {
                let off = self.next;
                self.next += req;
                (off, req)
            }
            Pattern::Random {
                lo,
                hi,
                req,
                cluster,
                ..
            } => {
                let slots = hi.saturating_sub(lo) / req.max(1);
                match cluster {
                    None => (lo + self.rng.below(slots) * req, req),
                    Some((span, count)) => {
                        if self.cluster_left == 0 {
                            let regions = hi.saturating_sub(lo) / span.max(1);
                            self.cluster_base = lo + self.rng.below(regions) * span;
                            self.cluster_left = count;
                        }
                        self.cluster_left -= 1;
                        let within = self.rng.below(span / req.max(1)) * req;
                        (self.cluster_base + within, req)
                    }
                }
            }
        }
    }
}

/// A worker blocked on its pages.
#[derive(Debug)]
struct Waiter {
    ticket: Ticket,
    cmd: usize,
    worker: usize,
}

/// One LUN: its workers, its command queue and its I/O context core.
struct Lun {
    /// Byte offset of the LUN on the device.
    base: u64,
    core: SimCore,
    idle: VecDeque<usize>,
    queue: VecDeque<usize>,
    waiters: Vec<Waiter>,
    /// Backing reads at the device.
    in_flight: usize,
    /// Readahead taken from the queue, waiting for the LUN's turn.
    parked: VecDeque<Batch>,
}

/// A LUN's id at the device's turns (one per context, as served).
fn turn_id(lun: usize) -> u64 {
    lun as u64
}

struct Sim {
    cfg: SimConfig,
    now: u64,
    seq: u64,
    events: BinaryHeap<Reverse<(u64, u64, Event)>>,
    cmds: Vec<Cmd>,
    luns: Vec<Lun>,
    /// Turn-taking and bytes per turn, unless turns are off.
    turns: Option<(TurnState, u64)>,
    array: ArrayState,
    /// Backing reads at the device: LUN, read, and whether it took a turn.
    slots: Vec<Option<(usize, Batch, bool)>>,
    link_free: u64,
    gens: Vec<Gen>,
    stream_luns: Vec<usize>,
    stream_bytes: Vec<u64>,
    latencies: Vec<u64>,
}

/// Runs `workload` under `cfg` and returns what it measured.
pub fn run(workload: &Workload, cfg: &SimConfig) -> SimResult {
    let size = cfg.array.capacity();
    let lun_spans = if workload.luns.is_empty() {
        vec![(0, size)]
    } else {
        workload.luns.clone()
    };
    let luns: Vec<Lun> = lun_spans
        .iter()
        .map(|&(base, len)| Lun {
            base,
            core: SimCore::for_simulation(&cfg.ctx, len),
            idle: (0..workload.workers.max(1)).collect(),
            queue: VecDeque::new(),
            waiters: Vec::new(),
            in_flight: 0,
            parked: VecDeque::new(),
        })
        .collect();
    // The simulated disks seek, so turns run as on served hddsim LUNs.
    let turns = cfg
        .ctx
        .turn_budget(true)
        .map(|budget| (TurnState::default(), budget));
    let mut sim = Sim {
        now: 0,
        seq: 0,
        events: BinaryHeap::new(),
        cmds: Vec::new(),
        luns,
        turns,
        array: ArrayState::new(cfg.array),
        slots: Vec::new(),
        link_free: 0,
        gens: workload
            .streams
            .iter()
            .enumerate()
            .map(|(i, p)| Gen::new(p, cfg.seed.wrapping_add(i as u64 * 7919)))
            .collect(),
        stream_luns: workload
            .streams
            .iter()
            .map(|p| workload.lun_of(p.start()))
            .collect(),
        stream_bytes: vec![0; workload.streams.len()],
        latencies: Vec::new(),
        cfg: cfg.clone(),
    };
    for &(offset, len) in &workload.prewarm {
        if let Some(l) = sim.luns.get_mut(workload.lun_of(offset)) {
            l.core.prewarm(offset.saturating_sub(l.base), len, |_| ());
        }
    }
    for (s, stream) in workload.streams.iter().enumerate() {
        if stream.start_ns == 0 {
            sim.start_stream(s);
        } else {
            sim.schedule(stream.start_ns, Event::Start(s));
        }
    }
    while let Some(Reverse((t, _, ev))) = sim.events.pop() {
        if t > sim.cfg.duration_ns {
            break;
        }
        sim.now = t;
        match ev {
            Event::Arrive(c) => sim.arrive(c),
            Event::BackingDone(slot) => sim.backing_done(slot),
            Event::Complete(c) => sim.complete(c),
            Event::Start(s) => sim.start_stream(s),
            Event::Issue(s) => sim.issue_next(s),
            Event::TurnTimer => sim.dispatch_all(),
        }
    }
    let mut totals = rustgt_backstore::ioctx::IoStats::default();
    let mut wasted = 0;
    for lun in &sim.luns {
        let st = lun.core.stats();
        totals.bytes += st.bytes;
        totals.hit_bytes += st.hit_bytes;
        totals.backing_requests += st.backing_requests;
        totals.backing_bytes += st.backing_bytes;
        wasted += lun.core.wasted_including_unused();
    }
    SimResult {
        sequential: workload.streams.iter().map(Stream::is_sequential).collect(),
        stream_bytes: sim.stream_bytes,
        duration_ns: cfg.duration_ns,
        requests: sim.latencies.len() as u64,
        latencies: sim.latencies,
        demand_bytes: totals.bytes,
        hit_bytes: totals.hit_bytes,
        backing_requests: totals.backing_requests,
        backing_bytes: totals.backing_bytes,
        wasted_bytes: wasted,
        device_turns: sim.turns.as_ref().map_or(0, |(t, _)| t.stats().turns),
    }
}

impl Sim {
    fn schedule(&mut self, at: u64, ev: Event) {
        self.seq += 1;
        self.events.push(Reverse((at, self.seq, ev)));
    }

    fn issue(&mut self, stream: usize) {
        let Some(gen) = self.gens.get_mut(stream) else {
            return;
        };
        let (offset, len) = gen.next_request();
        self.issue_at(stream, offset, len);
    }

    fn issue_at(&mut self, stream: usize, offset: u64, len: u64) {
        let id = self.cmds.len();
        let lun = self.stream_luns.get(stream).copied().unwrap_or(0);
        let base = self.luns.get(lun).map_or(0, |l| l.base);
        self.cmds.push(Cmd {
            stream,
            lun,
            offset: offset.saturating_sub(base),
            len,
            issued: self.now,
        });
        let at = self.now + self.cfg.link.rtt_ns / 2;
        self.schedule(at, Event::Arrive(id));
    }

    fn start_stream(&mut self, s: usize) {
        let Some(gen) = self.gens.get(s) else { return };
        match gen.pattern {
            Pattern::Sequential { qd, .. } | Pattern::Random { qd, .. } => {
                for _ in 0..qd.max(1) {
                    self.issue(s);
                }
            }
            Pattern::Batched { .. } => self.issue_batch(s),
        }
    }

    /// Issues a group of consecutive chunks, shuffled when asked: all of
    /// them reach the target at once, in that order.
    fn issue_batch(&mut self, s: usize) {
        let Some(gen) = self.gens.get_mut(s) else {
            return;
        };
        let Pattern::Batched { n, shuffle, .. } = gen.pattern else {
            return;
        };
        let mut reqs: Vec<(u64, u64)> = (0..n.max(1)).map(|_| gen.next_request()).collect();
        if shuffle {
            gen.rng.shuffle(&mut reqs);
        }
        gen.batch_left = reqs.len();
        for (offset, len) in reqs {
            self.issue_at(s, offset, len);
        }
    }

    fn arrive(&mut self, c: usize) {
        let Some(cmd) = self.cmds.get(c).copied() else {
            return;
        };
        let lun = cmd.lun;
        let inline = self.cfg.ctx.mode == ContextMode::Shared;
        let now = self.now;
        let Some(l) = self.luns.get_mut(lun) else {
            return;
        };
        if inline && l.core.ready_now(cmd.offset, cmd.len) {
            // All cached: the reactor serves it, no worker needed.
            l.core.start_read(now, None, cmd.offset, cmd.len);
            self.transmit(c);
            self.dispatch_all();
            return;
        }
        match l.idle.pop_front() {
            Some(w) => self.serve(lun, c, w),
            None => l.queue.push_back(c),
        }
    }

    fn serve(&mut self, lun: usize, c: usize, worker: usize) {
        let Some(cmd) = self.cmds.get(c).copied() else {
            return;
        };
        let now = self.now;
        let Some(l) = self.luns.get_mut(lun) else {
            return;
        };
        let ticket = l.core.start_read(now, Some(worker), cmd.offset, cmd.len);
        if l.core.all_ready(&ticket) {
            self.respond(lun, c, worker);
        } else {
            l.waiters.push(Waiter {
                ticket,
                cmd: c,
                worker,
            });
        }
        self.dispatch_all();
    }

    /// Starts backing reads on every LUN until nothing more can start (a
    /// LUN's turn ending lets another's waiting readahead go).
    fn dispatch_all(&mut self) {
        for _ in 0..=self.luns.len() {
            let mut started = false;
            for lun in 0..self.luns.len() {
                started |= self.dispatch(lun);
            }
            if !started {
                break;
            }
        }
    }

    /// Starts `lun`'s backing reads while it has free I/O slots: demand
    /// reads at once, readahead when its turn allows. True if any started.
    fn dispatch(&mut self, lun: usize) -> bool {
        let io_threads = self.cfg.ctx.io_threads.max(1);
        let mut started = false;
        loop {
            let Some(l) = self.luns.get_mut(lun) else {
                return started;
            };
            if let Some(b) = l.parked.front() {
                let (_, len) = l.core.batch_range(b);
                let id = turn_id(lun);
                let Some((turns, budget)) = self.turns.as_mut() else {
                    return started;
                };
                if !turns.try_enter(id, *budget, len, self.now) {
                    return started;
                }
                let Some(b) = l.parked.pop_front() else {
                    return started;
                };
                self.submit(lun, b, true);
                started = true;
                continue;
            }
            if l.in_flight + l.parked.len() >= io_threads {
                return started;
            }
            let Some(batch) = l.core.pop_batch() else {
                return started;
            };
            match self.turns.as_mut() {
                Some((turns, budget)) if !batch.is_sync() => {
                    let (_, len) = l.core.batch_range(&batch);
                    if turns.try_enter(turn_id(lun), *budget, len, self.now) {
                        self.submit(lun, batch, true);
                        started = true;
                    } else {
                        l.parked.push_back(batch);
                    }
                }
                _ => {
                    self.submit(lun, batch, false);
                    started = true;
                }
            }
        }
    }

    fn submit(&mut self, lun: usize, batch: Batch, turn: bool) {
        let Some(l) = self.luns.get_mut(lun) else {
            return;
        };
        let (start, len) = l.core.batch_range(&batch);
        l.in_flight += 1;
        let done = self.array.submit(self.now, l.base + start, len);
        let slot = match self.slots.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        if let Some(s) = self.slots.get_mut(slot) {
            *s = Some((lun, batch, turn));
        }
        self.schedule(done, Event::BackingDone(slot));
    }

    fn backing_done(&mut self, slot: usize) {
        let Some((lun, batch, turn)) = self.slots.get_mut(slot).and_then(Option::take) else {
            return;
        };
        let Some(l) = self.luns.get_mut(lun) else {
            return;
        };
        l.in_flight -= 1;
        l.core.complete(&batch, |_| ());
        let mut ready = Vec::new();
        let mut still = Vec::with_capacity(l.waiters.len());
        for w in std::mem::take(&mut l.waiters) {
            if l.core.all_ready(&w.ticket) {
                ready.push(w);
            } else {
                if l.core.any_absent(&w.ticket) {
                    // Evicted before this worker could copy it: read again.
                    l.core.ensure(&w.ticket);
                }
                still.push(w);
            }
        }
        l.waiters = still;
        let queued = l.core.has_queued() || !l.parked.is_empty();
        if let Some((turns, _)) = self.turns.as_mut() {
            let id = turn_id(lun);
            if turn {
                turns.leave(id, queued, self.now);
            } else {
                turns.settle(id, queued, self.now);
            }
            if let Some(t) = turns.anticipating_until() {
                self.schedule(t, Event::TurnTimer);
            }
        }
        for w in ready {
            self.respond(lun, w.cmd, w.worker);
        }
        self.dispatch_all();
    }

    /// The worker hands the data to the link and takes the next command.
    fn respond(&mut self, lun: usize, c: usize, worker: usize) {
        self.transmit(c);
        let Some(l) = self.luns.get_mut(lun) else {
            return;
        };
        match l.queue.pop_front() {
            Some(next) => self.serve(lun, next, worker),
            None => l.idle.push_back(worker),
        }
    }

    /// The command's data goes over the link; the initiator sees it done.
    fn transmit(&mut self, c: usize) {
        let len = self.cmds.get(c).map_or(0, |cmd| cmd.len);
        let transfer = if self.cfg.link.rate > 0.0 {
            (len as f64 * 1e9 / self.cfg.link.rate) as u64
        } else {
            0
        };
        let start = self.link_free.max(self.now);
        self.link_free = start + transfer;
        let at = self.link_free + self.cfg.link.rtt_ns / 2;
        self.schedule(at, Event::Complete(c));
    }

    fn complete(&mut self, c: usize) {
        let Some(cmd) = self.cmds.get(c).copied() else {
            return;
        };
        self.latencies.push(self.now - cmd.issued);
        if let Some(b) = self.stream_bytes.get_mut(cmd.stream) {
            *b += cmd.len;
        }
        let s = cmd.stream;
        let Some(gen) = self.gens.get_mut(s) else {
            return;
        };
        if matches!(gen.pattern, Pattern::Batched { .. }) {
            gen.batch_left = gen.batch_left.saturating_sub(1);
            if gen.batch_left > 0 {
                return;
            }
        }
        match gen.think_ns {
            0 => self.issue_next(s),
            t => {
                let at = self.now + t;
                self.schedule(at, Event::Issue(s));
            }
        }
    }

    /// The stream's next request, or its next group when batched.
    fn issue_next(&mut self, s: usize) {
        let batched = self
            .gens
            .get(s)
            .is_some_and(|g| matches!(g.pattern, Pattern::Batched { .. }));
        if batched {
            self.issue_batch(s);
        } else {
            self.issue(s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::standard;
    use rustgt_backstore::ioctx::{ContextMode, ReadaheadPolicy};

    fn cfg(policy: ReadaheadPolicy, mode: ContextMode, seconds: u64) -> SimConfig {
        SimConfig {
            array: ArrayParams::default(),
            link: Link::default(),
            ctx: IoContextOptions {
                policy,
                mode,
                ..IoContextOptions::default()
            },
            duration_ns: seconds * 1_000_000_000,
            seed: 1,
        }
    }

    fn workload(id: &str) -> Workload {
        standard(&ArrayParams::default(), 8)
            .into_iter()
            .find(|w| w.id == id)
            .expect("known workload")
    }

    #[test]
    fn runs_are_deterministic() {
        let w = workload("W5");
        let c = cfg(ReadaheadPolicy::Streams, ContextMode::Shared, 1);
        assert_eq!(run(&w, &c), run(&w, &c));
    }

    #[test]
    fn a_lone_stream_without_readahead_is_bound_by_round_trips() {
        // 64 KiB per (0.1 ms + 0.2 ms + 0.55 ms disk + 0.56 ms link).
        let r = run(
            &workload("W1-qd1"),
            &cfg(ReadaheadPolicy::None, ContextMode::Shared, 2),
        );
        let mb = r.aggregate_mb_s();
        assert!((42.0..50.0).contains(&mb), "{mb}");
        assert_eq!(r.hit_ratio(), 0.0);
    }

    fn parsed(text: &str) -> Workload {
        crate::workload::parse_workloads(text, "t.toml", &ArrayParams::default(), 8)
            .expect("parses")
            .remove(0)
    }

    #[test]
    fn a_prewarmed_region_is_read_from_the_cache() {
        let text = |warm: &str| {
            format!(
                "[[workload]]\nid = \"w\"\n[[workload.streams]]\nkind = \"random\"\n\
                 length = \"16M\"\nqd = 4\n{warm}"
            )
        };
        let c = cfg(ReadaheadPolicy::None, ContextMode::Shared, 1);
        let cold = run(&parsed(&text("")), &c);
        let warm = run(
            &parsed(&text(
                "[[workload.prewarm]]\noffset = 0\nlength = \"16M\"\n",
            )),
            &c,
        );
        assert!(cold.hit_ratio() < 0.5, "{}", cold.hit_ratio());
        assert_eq!(warm.hit_ratio(), 1.0);
        assert_eq!((warm.backing_requests, warm.wasted_bytes), (0, 0));
        assert!(warm.aggregate_mb_s() > 10.0 * cold.aggregate_mb_s());
    }

    #[test]
    fn reverse_strided_late_and_thinking_streams_issue_as_described() {
        let w = parsed(
            "[[workload]]\nid = \"w\"\n[[workload.streams]]\nkind = \"sequential\"\n\
             start = \"1M\"\nlength = \"1M\"\nrequest = \"64K\"\nstride = \"128K\"\n\
             direction = \"reverse\"\n",
        );
        let mut g = Gen::new(w.streams.first().expect("stream"), 1);
        let offs: Vec<u64> = (0..10).map(|_| g.next_request().0 >> 10).collect();
        // 8 requests 128 KiB apart from the top of [1M, 2M), then again.
        assert_eq!(
            offs,
            vec![1920, 1792, 1664, 1536, 1408, 1280, 1152, 1024, 1920, 1792]
        );
        let c = cfg(ReadaheadPolicy::None, ContextMode::Shared, 1);
        let late = parsed(
            "[[workload]]\nid = \"w\"\n[[workload.streams]]\nkind = \"sequential\"\n\
             start_ms = 500\n",
        );
        let early =
            parsed("[[workload]]\nid = \"w\"\n[[workload.streams]]\nkind = \"sequential\"\n");
        let thinking = parsed(
            "[[workload]]\nid = \"w\"\n[[workload.streams]]\nkind = \"sequential\"\n\
             think_us = 1000\n",
        );
        let (a, b, t) = (run(&early, &c), run(&late, &c), run(&thinking, &c));
        // Half a second late: about half the bytes.
        let ratio = b.stream_bytes[0] as f64 / a.stream_bytes[0] as f64;
        assert!((0.45..0.55).contains(&ratio), "{ratio}");
        // 1 ms of think time per 64 KiB read (about 1.4 ms each without).
        assert!(t.aggregate_mb_s() < 0.7 * a.aggregate_mb_s());
    }
}
