//! The daemon-wide budget for data buffers (issue 32): what every
//! connection of both transports may hold of Data-Out being collected or
//! handed to the SCSI core, and (TCP) of the Data-In of reads longer than
//! a small payload until the socket has taken it, and the fair share of it
//! one session may take while others wait. A read is admitted like a
//! write, before it runs, and waits in the same queue; its grant rides
//! with its Data-In to the driver's output queue.
//!
//! A write is admitted whole: before its first R2T (or RDMA Read) it takes
//! room for its entire Expected Data Transfer Length, so a command either
//! has all the room it needs or none, and partly collected commands can
//! never deadlock one another over the last bytes. What an initiator may
//! send without being asked (immediate data, unsolicited Data-Out up to
//! FirstBurstLength) is counted when the command arrives and never waited
//! for: it is bounded per session by the CmdSN window times
//! FirstBurstLength.
//!
//! The rules, for a write of `len` bytes by a connection holding `held`
//! admitted bytes, with `used` of `total` in use:
//!
//! - nothing admitted anywhere (unsolicited data aside): admitted whatever
//!   its size (a write larger than the whole budget still runs, alone, and
//!   writes waiting with unsolicited data counted cannot keep one another
//!   waiting for ever);
//! - `used + len > total`: it waits;
//! - `held == 0`: admitted (each session gets one write when there is room,
//!   so a newcomer is served while others sit on theirs);
//! - otherwise only within the first half of the budget (the second half
//!   is kept for sessions holding nothing) and within the session's fair
//!   share of that half (half / connections holding or waiting).
//!
//! A write that waits is retried by its connection on a timer (the core is
//! sans-I/O and its connections live on different threads); it is never
//! failed for lack of room. A connection over its fair share while others
//! wait does not open its CmdSN window further.
//!
//! The accounting is a few atomic operations per write and allocates
//! nothing: a [`Grant`] gives its bytes back when dropped, wherever the
//! task ends (completed, failed, aborted, connection closed).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Default budget when the configuration sets none (the daemon derives its
/// own from the machine's memory).
pub const DEFAULT_DATA_BUFFER_BYTES: u64 = 512 << 20;

/// The daemon-wide budget of write data buffers, shared by every
/// connection of both transports.
#[derive(Debug)]
pub struct DataBudget {
    total: AtomicU64,
    used: AtomicU64,
    /// Of `used`, what was admitted by the rules (not unsolicited data).
    admitted: AtomicU64,
    /// Connections holding admitted bytes.
    users: AtomicUsize,
    /// Connections with a write waiting for room.
    waiting: AtomicUsize,
    /// Writes that had to wait, since start.
    waits: AtomicU64,
    /// Connections closed because the initiator sat on solicited data
    /// past the Data-Out timeout, since start.
    timeouts: AtomicU64,
}

/// A copy of the budget's figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BudgetSnapshot {
    /// Bytes the budget allows.
    pub total: u64,
    /// Bytes held now (admitted writes and unsolicited data counted).
    pub used: u64,
    /// Connections with a write waiting for room now.
    pub waiting: usize,
    /// Writes that had to wait for room, since start.
    pub waits: u64,
    /// Connections closed for sitting on solicited data, since start.
    pub timeouts: u64,
}

impl DataBudget {
    /// A budget of `total` bytes, nothing used.
    pub fn new(total: u64) -> Self {
        DataBudget {
            total: AtomicU64::new(total.max(1)),
            used: AtomicU64::new(0),
            admitted: AtomicU64::new(0),
            users: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            waits: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
        }
    }

    /// Change the size (a configuration reload); what is held stays held.
    pub fn set_total(&self, total: u64) {
        self.total.store(total.max(1), Ordering::Relaxed);
    }

    /// Bytes the budget allows.
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// Bytes held now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// The figures now.
    pub fn snapshot(&self) -> BudgetSnapshot {
        BudgetSnapshot {
            total: self.total(),
            used: self.used(),
            waiting: self.waiting.load(Ordering::Relaxed),
            waits: self.waits.load(Ordering::Relaxed),
            timeouts: self.timeouts.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn count_timeout(&self) {
        self.timeouts.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_wait(&self) {
        self.waits.fetch_add(1, Ordering::Relaxed);
    }

    /// The fair share of the growth half for one session now.
    fn share(&self) -> u64 {
        let n = (self.users.load(Ordering::Relaxed) + self.waiting.load(Ordering::Relaxed)).max(1);
        (self.total() / 2) / n as u64
    }

    /// Whether a connection holding `held` admitted bytes is over its fair
    /// share while others wait (then its CmdSN window stays where it is).
    pub(crate) fn over_share(&self, held: u64, self_waiting: bool) -> bool {
        let waiting = self.waiting.load(Ordering::Relaxed);
        let others = waiting > usize::from(self_waiting);
        others && held > self.share()
    }

    /// Take `len` bytes for a connection holding `held`, by the rules of
    /// the module; false if it must wait.
    fn try_take(&self, held: u64, len: u64) -> bool {
        // Nothing admitted anywhere: this one goes, whatever its size and
        // whatever unsolicited data is counted (which waiting writes may
        // hold, so it must not keep them all waiting).
        if self
            .admitted
            .compare_exchange(0, len, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            self.used.fetch_add(len, Ordering::AcqRel);
            return true;
        }
        let total = self.total();
        let mut used = self.used.load(Ordering::Relaxed);
        loop {
            let fits = used.checked_add(len).is_some_and(|end| {
                end <= total && (held == 0 || (end <= total / 2 && held + len <= self.share()))
            });
            if !fits {
                return false;
            }
            match self.used.compare_exchange_weak(
                used,
                used.saturating_add(len),
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    self.admitted.fetch_add(len, Ordering::AcqRel);
                    return true;
                }
                Err(now) => used = now,
            }
        }
    }

    fn give_back(&self, admitted: u64, forced: u64) {
        if admitted > 0 {
            self.admitted.fetch_sub(admitted, Ordering::AcqRel);
        }
        if admitted + forced > 0 {
            self.used.fetch_sub(admitted + forced, Ordering::AcqRel);
        }
    }
}

impl Default for DataBudget {
    fn default() -> Self {
        DataBudget::new(DEFAULT_DATA_BUFFER_BYTES)
    }
}

/// One connection's part of the budget: its admitted bytes, and whether
/// it has writes waiting (counted in the budget while it has).
#[derive(Debug)]
pub(crate) struct Account {
    budget: Arc<DataBudget>,
    held: Arc<AtomicU64>,
    waiting: bool,
}

impl Account {
    pub fn new(budget: Arc<DataBudget>) -> Self {
        Account {
            budget,
            held: Arc::new(AtomicU64::new(0)),
            waiting: false,
        }
    }

    pub fn budget(&self) -> &DataBudget {
        &self.budget
    }

    /// Admitted bytes this connection holds.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// Mark whether the connection has writes waiting for room.
    pub fn set_waiting(&mut self, waiting: bool) {
        if waiting != self.waiting {
            self.waiting = waiting;
            if waiting {
                self.budget.waiting.fetch_add(1, Ordering::Relaxed);
            } else {
                self.budget.waiting.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// Over its fair share while others wait.
    pub fn over_share(&self) -> bool {
        self.budget.over_share(self.held(), self.waiting)
    }

    /// An empty grant for one write.
    pub fn grant(&self) -> Grant {
        Grant {
            budget: Arc::clone(&self.budget),
            held: Arc::clone(&self.held),
            admitted: 0,
            forced: 0,
        }
    }

    /// Count `len` bytes the initiator may send unasked into `grant`,
    /// whatever the budget says (they are bounded by the CmdSN window and
    /// FirstBurstLength).
    pub fn force(&self, grant: &mut Grant, len: u64) {
        self.budget.used.fetch_add(len, Ordering::AcqRel);
        grant.forced += len;
    }

    /// Admit `len` more bytes into `grant`, if the rules allow.
    pub fn admit(&self, grant: &mut Grant, len: u64) -> bool {
        let held = self.held();
        if !self.budget.try_take(held, len) {
            return false;
        }
        if self.held.fetch_add(len, Ordering::AcqRel) == 0 && len > 0 {
            self.budget.users.fetch_add(1, Ordering::Relaxed);
        }
        grant.admitted += len;
        true
    }
}

impl Drop for Account {
    fn drop(&mut self) {
        self.set_waiting(false);
    }
}

/// Bytes of the budget one write holds; given back when dropped.
#[derive(Debug)]
pub(crate) struct Grant {
    budget: Arc<DataBudget>,
    held: Arc<AtomicU64>,
    /// Taken by the rules (counted in the connection's share).
    admitted: u64,
    /// Counted unasked (unsolicited data).
    forced: u64,
}

impl Grant {
    /// Bytes held in all.
    pub fn bytes(&self) -> u64 {
        self.admitted + self.forced
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        self.budget.give_back(self.admitted, self.forced);
        if self.admitted > 0
            && self.held.fetch_sub(self.admitted, Ordering::AcqRel) == self.admitted
        {
            self.budget.users.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: u64 = 1 << 20;

    #[test]
    fn each_session_gets_one_write_from_the_reserve_and_grows_only_in_the_first_half() {
        let b = Arc::new(DataBudget::new(256 * M));
        let a = Account::new(Arc::clone(&b));
        let mut grants = Vec::new();
        // Alone, one session grows to half the budget, no further.
        for _ in 0..4 {
            let mut g = a.grant();
            assert!(a.admit(&mut g, 32 * M));
            grants.push(g);
        }
        let mut g = a.grant();
        assert!(!a.admit(&mut g, 32 * M), "past the first half");
        assert_eq!(b.used(), 128 * M);
        // Others holding nothing still get one write each.
        let others: Vec<Account> = (0..4).map(|_| Account::new(Arc::clone(&b))).collect();
        let mut theirs = Vec::new();
        for o in &others {
            let mut g = o.grant();
            assert!(o.admit(&mut g, 32 * M));
            theirs.push(g);
        }
        assert_eq!(b.used(), 256 * M);
        let late = Account::new(Arc::clone(&b));
        let mut g = late.grant();
        assert!(!late.admit(&mut g, M), "the budget is full");
        drop(theirs);
        assert!(late.admit(&mut g, M));
        drop(g);
        drop(grants);
        assert_eq!(b.used(), 0);
        assert_eq!(b.users.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_write_larger_than_the_budget_runs_alone_and_forced_bytes_count() {
        let b = Arc::new(DataBudget::new(16 * M));
        let a = Account::new(Arc::clone(&b));
        let mut g = a.grant();
        assert!(a.admit(&mut g, 32 * M), "nothing in use: admitted");
        let other = Account::new(Arc::clone(&b));
        let mut h = other.grant();
        other.force(&mut h, 256 * 1024);
        assert_eq!(b.used(), 32 * M + 256 * 1024);
        assert!(!other.admit(&mut h, M));
        drop(g);
        assert!(other.admit(&mut h, M));
        assert_eq!(h.bytes(), M + 256 * 1024);
        drop(h);
        assert_eq!(b.used(), 0);
    }

    #[test]
    fn over_share_only_while_others_wait() {
        let b = Arc::new(DataBudget::new(64 * M));
        let mut a = Account::new(Arc::clone(&b));
        let mut g = a.grant();
        assert!(a.admit(&mut g, 32 * M));
        assert!(!a.over_share(), "nobody waits");
        let mut w = Account::new(Arc::clone(&b));
        w.set_waiting(true);
        assert!(a.over_share(), "32M > (64M / 2) / 2");
        a.set_waiting(true);
        assert_eq!(b.snapshot().waiting, 2);
        drop(w);
        a.set_waiting(false);
        assert!(!a.over_share());
        assert_eq!(b.snapshot().waiting, 0);
    }
}
