//! Quality of service: IOPS and bandwidth limits with bursts, in the
//! terms of OpenStack Cinder's QoS specs (the keys libvirt and QEMU take:
//! `total_iops_sec`, `read_bytes_sec`, `*_max`, `*_max_length`,
//! `size_iops_sec`), on a logical unit, on one initiator's commands to a
//! logical unit, and on a whole target.
//!
//! Enforced in the task set ([`crate::task_set`]): a READ or WRITE over a
//! limit that covers it stays queued (in order within every limit it is
//! over: a later command of the same scope does not overtake it) until
//! the buckets of every covering limit have refilled; it never fails for
//! it. While it waits it is an ordinary queued task, so ABORT TASK,
//! ABORT TASK SET, CLEAR TASK SET, LOGICAL UNIT RESET and the loss of its
//! session reach it. Nothing runs per command: a sleeping worker of the
//! unit waits on the task set's condition variable with a timeout for the
//! earliest time a throttled task may go (at most one such timed sleeper
//! per deadline).
//!
//! A command the limits let go at once, with nothing waiting for them,
//! keeps the fast paths (inline on the reactor, io_uring): its tokens are
//! taken when it enters the task set as a running task, and given back
//! if it is handed to the workers after all.
//!
//! Buckets ([`TokenBucket`]) hold tokens (I/Os or bytes) refilled at the
//! limit's rate. Without a burst a bucket holds a tenth of a second of
//! its rate; with `max` and `max_length` it holds `(max - rate) *
//! max_length`, so a unit idle long enough may run at `max` for
//! `max_length` seconds, and a second bucket of rate `max` caps the burst.
//! A command larger than a bucket goes when the bucket is full and leaves
//! it in debt, so large commands are never starved and the long-run rate
//! holds.
//!
//! Only READ(6/10/12/16) and WRITE(6/10/12/16) count: bytes are the
//! Data-In buffer of a read and the Data-Out data of a write; with
//! `size_iops_sec` an I/O of more than that many bytes counts as
//! `bytes / size_iops_sec` I/Os in the IOPS limits (as QEMU's `iops-size`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::cdb::{data_path_op, DataPathOp};
use crate::cmd::Command;

/// Most initiators with limits of their own on one logical unit.
pub const MAX_QOS_INITIATORS: usize = 64;

/// One limit: `rate` units per second on average; with `max`, bursts of
/// up to `max` per second lasting up to `max_length_secs` seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// Units (I/Os or bytes) per second, at least 1.
    pub rate: u64,
    /// Burst rate, above `rate` (Cinder `*_max`).
    pub max: Option<u64>,
    /// How long a burst may last, seconds (Cinder `*_max_length`; 1 when
    /// `max` is set without it).
    pub max_length_secs: u64,
}

impl Limit {
    /// A limit without a burst.
    pub fn rate(rate: u64) -> Limit {
        Limit {
            rate,
            max: None,
            max_length_secs: 1,
        }
    }
}

/// The limits of one scope (a target, a LUN, or one initiator's commands
/// to a LUN). Every limit set applies; unset ones do not.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QosLimits {
    /// `total_iops_sec`: reads and writes per second.
    pub total_iops: Option<Limit>,
    /// `read_iops_sec`.
    pub read_iops: Option<Limit>,
    /// `write_iops_sec`.
    pub write_iops: Option<Limit>,
    /// `total_bytes_sec`: bytes read and written per second.
    pub total_bytes: Option<Limit>,
    /// `read_bytes_sec`.
    pub read_bytes: Option<Limit>,
    /// `write_bytes_sec`.
    pub write_bytes: Option<Limit>,
    /// `size_iops_sec`: an I/O of more bytes than this counts as
    /// `bytes / size_iops_sec` I/Os in the IOPS limits.
    pub size_iops: Option<u64>,
}

impl QosLimits {
    /// No limit set.
    pub fn is_empty(&self) -> bool {
        self.total_iops.is_none()
            && self.read_iops.is_none()
            && self.write_iops.is_none()
            && self.total_bytes.is_none()
            && self.read_bytes.is_none()
            && self.write_bytes.is_none()
    }
}

/// The limits of one logical unit: on all its commands, and on the
/// commands of single initiators (by iSCSI initiator name, compared
/// without ASCII case), each on top of the LUN's and the target's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LunQos {
    /// Limits on every command of the LUN.
    pub all: QosLimits,
    /// Limits on one initiator's commands (at most
    /// [`MAX_QOS_INITIATORS`]; more are ignored).
    pub initiators: Vec<(String, QosLimits)>,
}

impl LunQos {
    /// No limit anywhere.
    pub fn is_empty(&self) -> bool {
        self.all.is_empty() && self.initiators.iter().all(|(_, l)| l.is_empty())
    }
}

/// Throttling counters of a scope (a LUN, an initiator on a LUN, or a
/// session over all LUNs of a target).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QosStats {
    /// READs and WRITEs that passed the limits (counted while any limit
    /// covers the LUN); their rate is the effective IOPS.
    pub commands: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Of those, commands that had to wait.
    pub delayed: u64,
    /// Time those commands waited, summed, in microseconds.
    pub throttled_us: u64,
    /// Commands waiting for their limits now.
    pub waiting: u64,
}

impl QosStats {
    fn add(&mut self, o: &QosStats) {
        self.commands += o.commands;
        self.bytes += o.bytes;
        self.delayed += o.delayed;
        self.throttled_us += o.throttled_us;
        self.waiting += o.waiting;
    }

    fn count(&mut self, bytes: u64, waited: Option<Duration>) {
        self.commands += 1;
        self.bytes += bytes;
        if let Some(w) = waited {
            self.delayed += 1;
            self.throttled_us += u64::try_from(w.as_micros()).unwrap_or(u64::MAX);
        }
    }
}

/// A LUN's throttling counters: the LUN's and each limited initiator's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LunQosStats {
    /// Every command of the LUN.
    pub lun: QosStats,
    /// Per initiator with limits of its own (as configured).
    pub initiators: Vec<(String, QosStats)>,
}

/// A token bucket: `rate` tokens per second up to `capacity`. Time comes
/// from the caller (`now`), so tests drive it with a made-up clock.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: f64,
    capacity: f64,
    level: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(rate: f64, capacity: f64, now: Instant) -> TokenBucket {
        let rate = rate.max(1e-3);
        let capacity = capacity.max(1.0);
        TokenBucket {
            rate,
            capacity,
            level: capacity,
            last: now,
        }
    }

    fn level_at(&self, now: Instant) -> f64 {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        (self.level + dt * self.rate).min(self.capacity)
    }

    /// How long until `cost` may be taken; `None`: now. A cost above the
    /// capacity needs a full bucket.
    pub fn wait(&self, cost: f64, now: Instant) -> Option<Duration> {
        let need = cost.min(self.capacity);
        let level = self.level_at(now);
        if level >= need {
            return None;
        }
        // Rounded up to the next microsecond, so that waiting that long
        // is always enough.
        let us = ((need - level) / self.rate * 1e6).ceil().clamp(1.0, 3.6e9);
        Some(Duration::from_micros(us as u64))
    }

    /// Takes `cost` (the level may go below zero: debt).
    pub fn take(&mut self, cost: f64, now: Instant) {
        self.level = self.level_at(now) - cost;
        if now > self.last {
            self.last = now;
        }
    }

    /// Gives `cost` back (a command taken and then not run), up to the
    /// capacity.
    pub fn give(&mut self, cost: f64, now: Instant) {
        self.level = (self.level_at(now) + cost).min(self.capacity);
        if now > self.last {
            self.last = now;
        }
    }

    /// Tokens now.
    pub fn level(&self, now: Instant) -> f64 {
        self.level_at(now)
    }
}

/// One limit's buckets: the average, and the burst cap when `max` is set.
#[derive(Debug, Clone)]
struct LimitBuckets {
    avg: TokenBucket,
    peak: Option<TokenBucket>,
}

impl LimitBuckets {
    fn new(l: &Limit, now: Instant) -> LimitBuckets {
        let rate = l.rate.max(1) as f64;
        match l.max.filter(|m| *m > l.rate) {
            None => LimitBuckets {
                avg: TokenBucket::new(rate, rate / 10.0, now),
                peak: None,
            },
            Some(max) => {
                let max = max as f64;
                let len = l.max_length_secs.max(1) as f64;
                LimitBuckets {
                    avg: TokenBucket::new(rate, ((max - rate) * len).max(rate / 10.0), now),
                    peak: Some(TokenBucket::new(max, max / 10.0, now)),
                }
            }
        }
    }

    fn wait(&self, cost: f64, now: Instant) -> Option<Duration> {
        let a = self.avg.wait(cost, now);
        let p = self.peak.as_ref().and_then(|p| p.wait(cost, now));
        a.max(p)
    }

    fn take(&mut self, cost: f64, now: Instant) {
        self.avg.take(cost, now);
        if let Some(p) = &mut self.peak {
            p.take(cost, now);
        }
    }

    fn give(&mut self, cost: f64, now: Instant) {
        self.avg.give(cost, now);
        if let Some(p) = &mut self.peak {
            p.give(cost, now);
        }
    }
}

/// Direction of a counted command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dir {
    Read,
    Write,
}

/// What a queued command costs, classified at enqueue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cost {
    pub dir: Dir,
    pub bytes: u64,
    /// Index of its initiator's scope on the LUN.
    pub initiator: Option<usize>,
}

/// The READs and WRITEs QoS counts, with their bytes.
pub(crate) fn classify(cmd: &Command) -> Option<(Dir, u64)> {
    match data_path_op(&cmd.cdb)? {
        DataPathOp::Read => Some((Dir::Read, u64::from(cmd.data_in_len))),
        DataPathOp::Write => Some((Dir::Write, cmd.data_out.len() as u64)),
        DataPathOp::Sync | DataPathOp::TestUnitReady => None,
    }
}

/// The initiator name of a SCSI initiator port name ("NAME,i,0xISID").
pub(crate) fn initiator_name(port: &str) -> &str {
    port.split_once(",i,").map_or(port, |(name, _)| name)
}

/// The buckets of one scope.
#[derive(Debug, Clone)]
pub(crate) struct Scope {
    total_iops: Option<LimitBuckets>,
    read_iops: Option<LimitBuckets>,
    write_iops: Option<LimitBuckets>,
    total_bytes: Option<LimitBuckets>,
    read_bytes: Option<LimitBuckets>,
    write_bytes: Option<LimitBuckets>,
    size_iops: Option<u64>,
    pub stats: QosStats,
}

impl Scope {
    pub(crate) fn new(l: &QosLimits, now: Instant) -> Scope {
        let b = |x: &Option<Limit>| x.as_ref().map(|l| LimitBuckets::new(l, now));
        Scope {
            total_iops: b(&l.total_iops),
            read_iops: b(&l.read_iops),
            write_iops: b(&l.write_iops),
            total_bytes: b(&l.total_bytes),
            read_bytes: b(&l.read_bytes),
            write_bytes: b(&l.write_bytes),
            size_iops: l.size_iops.filter(|s| *s > 0),
            stats: QosStats::default(),
        }
    }

    fn ios(&self, bytes: u64) -> f64 {
        match self.size_iops {
            Some(s) if bytes > s => bytes as f64 / s as f64,
            _ => 1.0,
        }
    }

    /// The buckets covering a command of `dir`, with its cost in each.
    fn covering(&self, dir: Dir, bytes: u64) -> [(Option<&LimitBuckets>, f64); 4] {
        let ios = self.ios(bytes);
        let b = bytes as f64;
        let (iops, bw) = match dir {
            Dir::Read => (&self.read_iops, &self.read_bytes),
            Dir::Write => (&self.write_iops, &self.write_bytes),
        };
        [
            (self.total_iops.as_ref(), ios),
            (iops.as_ref(), ios),
            (self.total_bytes.as_ref(), b),
            (bw.as_ref(), b),
        ]
    }

    /// How long until a command may go; `None`: now.
    pub(crate) fn wait(&self, dir: Dir, bytes: u64, now: Instant) -> Option<Duration> {
        self.covering(dir, bytes)
            .into_iter()
            .filter_map(|(b, cost)| b?.wait(cost, now))
            .max()
    }

    /// Takes a command's tokens (`give`: gives them back).
    pub(crate) fn take(&mut self, dir: Dir, bytes: u64, now: Instant) {
        self.apply(dir, bytes, now, false);
    }

    /// Gives a command's tokens back and uncounts it.
    pub(crate) fn give(&mut self, dir: Dir, bytes: u64, now: Instant) {
        self.apply(dir, bytes, now, true);
        self.stats.commands = self.stats.commands.saturating_sub(1);
        self.stats.bytes = self.stats.bytes.saturating_sub(bytes);
    }

    fn apply(&mut self, dir: Dir, bytes: u64, now: Instant, give: bool) {
        let ios = self.ios(bytes);
        let b = bytes as f64;
        let (iops, bw) = match dir {
            Dir::Read => (&mut self.read_iops, &mut self.read_bytes),
            Dir::Write => (&mut self.write_iops, &mut self.write_bytes),
        };
        let (total_iops, total_bytes) = (&mut self.total_iops, &mut self.total_bytes);
        for (bucket, cost) in [(iops, ios), (bw, b), (total_iops, ios), (total_bytes, b)] {
            match bucket {
                Some(x) if give => x.give(cost, now),
                Some(x) => x.take(cost, now),
                None => {}
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A target's limits, shared by all its logical units.
#[derive(Debug, Default)]
pub(crate) struct TargetQos {
    active: AtomicBool,
    scope: Mutex<Option<(QosLimits, Scope)>>,
}

impl TargetQos {
    pub(crate) fn active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// Sets the limits; unchanged limits keep their buckets.
    pub(crate) fn set(&self, limits: &QosLimits) {
        let mut s = lock(&self.scope);
        if limits.is_empty() {
            *s = None;
        } else if s.as_ref().is_none_or(|(l, _)| l != limits) {
            *s = Some((limits.clone(), Scope::new(limits, Instant::now())));
        }
        self.active.store(s.is_some(), Ordering::Relaxed);
    }

    pub(crate) fn wait(&self, dir: Dir, bytes: u64, now: Instant) -> Option<Duration> {
        lock(&self.scope)
            .as_ref()
            .and_then(|(_, s)| s.wait(dir, bytes, now))
    }

    pub(crate) fn take(&self, dir: Dir, bytes: u64, now: Instant, waited: Option<Duration>) {
        if let Some((_, s)) = lock(&self.scope).as_mut() {
            s.take(dir, bytes, now);
            s.stats.count(bytes, waited);
        }
    }

    pub(crate) fn give(&self, dir: Dir, bytes: u64, now: Instant) {
        if let Some((_, s)) = lock(&self.scope).as_mut() {
            s.give(dir, bytes, now);
        }
    }

    pub(crate) fn stats(&self) -> Option<QosStats> {
        lock(&self.scope).as_ref().map(|(_, s)| s.stats)
    }
}

/// Scopes a scan found over their limits: later commands in them wait
/// behind the first (in order within a scope).
#[derive(Debug, Default)]
pub(crate) struct Blocked {
    lun: bool,
    target: bool,
    initiators: u64,
}

/// A LUN's QoS state, kept under its task set's lock.
#[derive(Debug, Default)]
pub(crate) struct LunQosState {
    config: LunQos,
    lun: Option<Scope>,
    /// (lowercase initiator name, its scope).
    initiators: Vec<(String, Scope)>,
    /// Counters per nexus (the session's figures), by nexus id.
    nexus: HashMap<u64, QosStats>,
    /// The LUN's own counters (any limit, the target's included).
    pub stats: QosStats,
}

impl LunQosState {
    /// Whether the LUN has limits of its own.
    pub(crate) fn configured(&self) -> bool {
        self.lun.is_some() || !self.initiators.is_empty()
    }

    /// Sets the limits; unchanged scopes keep their buckets. Returns
    /// whether anything changed (queued costs must then be reclassified).
    pub(crate) fn set(&mut self, qos: &LunQos) -> bool {
        if self.config == *qos {
            return false;
        }
        let now = Instant::now();
        if self.config.all != qos.all {
            self.lun = (!qos.all.is_empty()).then(|| Scope::new(&qos.all, now));
        }
        let mut old: HashMap<String, (QosLimits, Scope)> = HashMap::new();
        for ((name, scope), (_, limits)) in self
            .initiators
            .drain(..)
            .zip(self.config.initiators.iter().filter(|(_, l)| !l.is_empty()))
        {
            old.insert(name, (limits.clone(), scope));
        }
        for (name, limits) in qos
            .initiators
            .iter()
            .filter(|(_, l)| !l.is_empty())
            .take(MAX_QOS_INITIATORS)
        {
            let key = name.to_ascii_lowercase();
            let scope = match old.remove(&key) {
                Some((l, s)) if l == *limits => s,
                _ => Scope::new(limits, now),
            };
            self.initiators.push((key, scope));
        }
        self.config = qos.clone();
        true
    }

    /// The cost of a command of `initiator_port`, or `None` when QoS does
    /// not count it.
    pub(crate) fn cost(&self, cmd: &Command) -> Option<Cost> {
        let (dir, bytes) = classify(cmd)?;
        let initiator = if self.initiators.is_empty() {
            None
        } else {
            let name = initiator_name(&cmd.nexus.initiator_port);
            self.initiators
                .iter()
                .position(|(n, _)| n.eq_ignore_ascii_case(name))
        };
        Some(Cost {
            dir,
            bytes,
            initiator,
        })
    }

    /// `Ok` when the command may go now; else how long until one of its
    /// scopes may let it (`None` when it waits behind an earlier command
    /// of a scope already over its limit). Scopes it is over are marked
    /// in `blocked`.
    pub(crate) fn check(
        &self,
        target: &TargetQos,
        c: &Cost,
        now: Instant,
        blocked: &mut Blocked,
    ) -> Result<(), Option<Duration>> {
        let ini = c
            .initiator
            .and_then(|i| Some((i, &self.initiators.get(i)?.1)));
        let ini_bit = ini.map_or(0, |(i, _)| 1u64 << (i % 64));
        let target_on = target.active();
        if (blocked.lun && self.lun.is_some())
            || (blocked.target && target_on)
            || (blocked.initiators & ini_bit != 0)
        {
            return Err(None);
        }
        let mut worst: Option<Duration> = None;
        if let Some(w) = self.lun.as_ref().and_then(|s| s.wait(c.dir, c.bytes, now)) {
            blocked.lun = true;
            worst = worst.max(Some(w));
        }
        if let Some(w) = ini.and_then(|(_, s)| s.wait(c.dir, c.bytes, now)) {
            blocked.initiators |= ini_bit;
            worst = worst.max(Some(w));
        }
        if target_on {
            if let Some(w) = target.wait(c.dir, c.bytes, now) {
                blocked.target = true;
                worst = worst.max(Some(w));
            }
        }
        match worst {
            None => Ok(()),
            Some(w) => Err(Some(w)),
        }
    }

    /// A command goes: its tokens are taken and it is counted.
    pub(crate) fn admit(
        &mut self,
        target: &TargetQos,
        nexus: u64,
        c: &Cost,
        now: Instant,
        since: Option<Instant>,
    ) {
        let waited = since.map(|s| now.saturating_duration_since(s));
        if let Some(s) = &mut self.lun {
            s.take(c.dir, c.bytes, now);
            s.stats.count(c.bytes, waited);
        }
        if let Some((_, s)) = c.initiator.and_then(|i| self.initiators.get_mut(i)) {
            s.take(c.dir, c.bytes, now);
            s.stats.count(c.bytes, waited);
        }
        if target.active() {
            target.take(c.dir, c.bytes, now, waited);
        }
        self.stats.count(c.bytes, waited);
        self.nexus.entry(nexus).or_default().count(c.bytes, waited);
    }

    /// Undoes [`Self::admit`] of a command that was not run after all
    /// (admitted off the workers, then handed to them).
    pub(crate) fn refund(&mut self, target: &TargetQos, nexus: u64, c: &Cost, now: Instant) {
        if let Some(s) = &mut self.lun {
            s.give(c.dir, c.bytes, now);
        }
        if let Some((_, s)) = c.initiator.and_then(|i| self.initiators.get_mut(i)) {
            s.give(c.dir, c.bytes, now);
        }
        if target.active() {
            target.give(c.dir, c.bytes, now);
        }
        for st in [Some(&mut self.stats), self.nexus.get_mut(&nexus)]
            .into_iter()
            .flatten()
        {
            st.commands = st.commands.saturating_sub(1);
            st.bytes = st.bytes.saturating_sub(c.bytes);
        }
    }

    /// Forgets a nexus's counters (its session ended).
    pub(crate) fn forget_nexus(&mut self, nexus: u64) {
        self.nexus.remove(&nexus);
    }

    /// The counters; `waiting` lists (nexus, initiator scope) of the
    /// commands waiting now.
    pub(crate) fn snapshot(&self, waiting: &[(u64, Option<usize>)]) -> LunQosStats {
        let mut lun = self.stats;
        lun.waiting = waiting.len() as u64;
        let initiators = self
            .initiators
            .iter()
            .enumerate()
            .map(|(i, (name, s))| {
                let mut st = s.stats;
                st.waiting = waiting.iter().filter(|(_, x)| *x == Some(i)).count() as u64;
                (name.clone(), st)
            })
            .collect();
        LunQosStats { lun, initiators }
    }

    /// A nexus's counters, `waiting` as in [`Self::snapshot`].
    pub(crate) fn nexus_stats(&self, nexus: u64, waiting: &[(u64, Option<usize>)]) -> QosStats {
        let mut s = self.nexus.get(&nexus).copied().unwrap_or_default();
        s.waiting = waiting.iter().filter(|(n, _)| *n == nexus).count() as u64;
        s
    }
}

/// Sums counters (a session's over the LUNs of its target).
pub(crate) fn sum<'a>(it: impl IntoIterator<Item = &'a QosStats>) -> QosStats {
    let mut out = QosStats::default();
    for s in it {
        out.add(s);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    #[test]
    fn a_bucket_refills_at_its_rate_up_to_its_capacity() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1000.0, 100.0, t0);
        assert_eq!(b.wait(100.0, t0), None, "starts full");
        b.take(100.0, t0);
        assert_eq!(b.wait(1.0, t0), Some(Duration::from_millis(1)));
        assert_eq!(b.wait(1.0, at(t0, 1)), None);
        // Refills no further than its capacity, however long idle.
        assert!((b.level(at(t0, 60_000)) - 100.0).abs() < 1e-9);
    }

    #[test]
    fn a_cost_above_the_capacity_needs_a_full_bucket_and_leaves_debt() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(100.0, 10.0, t0);
        assert_eq!(b.wait(50.0, t0), None);
        b.take(50.0, t0);
        // -40: 0.5 s until full again.
        assert_eq!(b.wait(50.0, t0), Some(Duration::from_millis(500)));
        assert_eq!(b.wait(50.0, at(t0, 500)), None);
    }

    /// Admits commands as fast as the limit lets them, on a made-up clock
    /// advanced to each wait's end; returns admissions per second slot.
    fn run(limits: &QosLimits, dir: Dir, bytes: u64, secs: u64) -> Vec<u64> {
        let t0 = Instant::now();
        let mut s = Scope::new(limits, t0);
        let mut now = t0;
        let mut per_sec = vec![0u64; secs as usize];
        loop {
            match s.wait(dir, bytes, now) {
                Some(w) => now += w,
                None => {
                    let slot = (now - t0).as_secs() as usize;
                    let Some(n) = per_sec.get_mut(slot) else {
                        break;
                    };
                    *n += 1;
                    s.take(dir, bytes, now);
                }
            }
        }
        per_sec
    }

    #[test]
    fn an_iops_limit_holds_its_rate() {
        let l = QosLimits {
            total_iops: Some(Limit::rate(2000)),
            ..QosLimits::default()
        };
        let per = run(&l, Dir::Read, 4096, 10);
        // The first second also empties the full bucket (a tenth of a second).
        assert!((2000..=2201).contains(&per[0]), "{per:?}");
        for n in &per[1..] {
            assert!((1999..=2001).contains(n), "{per:?}");
        }
    }

    #[test]
    fn a_burst_runs_at_max_for_max_length_then_falls_back() {
        let l = QosLimits {
            total_iops: Some(Limit {
                rate: 2000,
                max: Some(8000),
                max_length_secs: 2,
            }),
            ..QosLimits::default()
        };
        let per = run(&l, Dir::Write, 4096, 6);
        // The burst bucket holds (8000 - 2000) x 2 s: 12,000 plus 2 s of
        // refill go in the first 2 s, at most 8,000 per second (plus the
        // cap bucket's own tenth of a second at the start).
        assert!(per[0] <= 8801 && per[1] <= 8000, "{per:?}");
        assert!((15_900..=16_100).contains(&(per[0] + per[1])), "{per:?}");
        for n in &per[3..] {
            assert!((1999..=2001).contains(n), "{per:?}");
        }
    }

    #[test]
    fn byte_limits_count_bytes_and_only_their_direction() {
        let l = QosLimits {
            read_bytes: Some(Limit::rate(50_000_000)),
            ..QosLimits::default()
        };
        let per = run(&l, Dir::Read, 1 << 20, 5);
        for n in &per[1..] {
            // 50e6 / 2^20 = 47.7 per second.
            assert!((47..=48).contains(n), "{per:?}");
        }
        let s = Scope::new(&l, Instant::now());
        assert_eq!(s.wait(Dir::Write, 1 << 30, Instant::now()), None);
    }

    #[test]
    fn size_iops_counts_large_ios_as_several() {
        let l = QosLimits {
            total_iops: Some(Limit::rate(100)),
            size_iops: Some(4096),
            ..QosLimits::default()
        };
        // 64 KiB = 16 I/Os: 100/16 = 6.25 per second.
        let per = run(&l, Dir::Read, 64 << 10, 5);
        for n in &per[1..] {
            assert!((6..=7).contains(n), "{per:?}");
        }
    }

    #[test]
    fn initiators_are_limited_on_their_own_and_in_order() {
        let now = Instant::now();
        let mut st = LunQosState::default();
        let slow = QosLimits {
            total_iops: Some(Limit::rate(10)),
            ..QosLimits::default()
        };
        assert!(st.set(&LunQos {
            all: QosLimits::default(),
            initiators: vec![("iqn.a".into(), slow)],
        }));
        let target = TargetQos::default();
        let a = Cost {
            dir: Dir::Read,
            bytes: 512,
            initiator: Some(0),
        };
        let b = Cost {
            initiator: None,
            ..a
        };
        // The bucket holds one I/O (10/10): the second waits 0.1 s.
        let mut blocked = Blocked::default();
        assert_eq!(st.check(&target, &a, now, &mut blocked), Ok(()));
        st.admit(&target, 1, &a, now, None);
        assert_eq!(
            st.check(&target, &a, now, &mut blocked),
            Err(Some(Duration::from_millis(100)))
        );
        // A later one of the same initiator waits behind it...
        assert_eq!(st.check(&target, &a, now, &mut blocked), Err(None));
        // ...others go.
        assert_eq!(st.check(&target, &b, now, &mut blocked), Ok(()));
        st.admit(&target, 2, &a, at(now, 100), Some(now));
        let snap = st.snapshot(&[(1, Some(0))]);
        assert_eq!(snap.lun.commands, 2);
        assert_eq!(snap.lun.delayed, 1);
        assert_eq!(snap.lun.throttled_us, 100_000);
        assert_eq!(snap.initiators[0].1.waiting, 1);
        assert_eq!(st.nexus_stats(2, &[]).delayed, 1);
    }

    #[test]
    fn unchanged_limits_keep_their_buckets() {
        let l = LunQos {
            all: QosLimits {
                total_iops: Some(Limit::rate(10)),
                ..QosLimits::default()
            },
            initiators: vec![],
        };
        let mut st = LunQosState::default();
        st.set(&l);
        let c = Cost {
            dir: Dir::Read,
            bytes: 512,
            initiator: None,
        };
        let now = Instant::now();
        st.admit(&TargetQos::default(), 1, &c, now, None);
        assert!(!st.set(&l));
        assert!(st
            .check(&TargetQos::default(), &c, now, &mut Blocked::default())
            .is_err());
    }

    #[test]
    fn initiator_names_come_from_the_port_name() {
        assert_eq!(
            initiator_name("iqn.1994-05.com.redhat:x,i,0x00023d000001"),
            "iqn.1994-05.com.redhat:x"
        );
        assert_eq!(initiator_name("plain"), "plain");
    }
}
