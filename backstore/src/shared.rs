//! What several gateways serving one backing share: a versioned record
//! changed only by compare-and-set, events every gateway hears, a
//! cluster-wide mutual exclusion for read-modify-write sequences, and who
//! owns the backing now.
//!
//! A store offers it ([`crate::Backstore::shared_state`]) when other
//! daemons may serve the same backing at the same time (an RBD image
//! exported by several gateways). The SCSI core keeps its persistent
//! reservations in the record, announces logical unit resets and
//! reservation changes as events, holds the exclusion across COMPARE AND
//! WRITE, and reports the owner's target port group as active/optimized.
//!
//! Guarantees an implementation gives:
//! - [`SharedState::store`] succeeds only if nobody stored since the
//!   version it names was loaded: two gateways never both win from one
//!   version;
//! - [`SharedState::announce`] returns only once every other gateway that
//!   is alive has run its hook for the event (or the store's timeout
//!   passed), so a change is in force everywhere before the command that
//!   made it completes;
//! - a gateway does not hear its own events.

use std::fmt::Debug;
use std::time::Duration;

use crate::error::Result;

/// One version of the shared record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Changes with every successful [`SharedState::store`]; 0 before the
    /// first.
    pub version: u64,
    /// The bytes last stored; empty before the first store.
    pub data: Vec<u8>,
}

/// The handler of events announced by other gateways. It runs on a thread
/// of the store's and may block (bounded): the announcing gateway waits
/// for it.
pub type EventHook = Box<dyn Fn(&[u8]) + Send + Sync>;

/// The store's hold on an [`Exclusion`]; dropping it ends the exclusion.
pub trait ExclusionHold: Send {
    /// Extends the exclusion to a full lease from now: it is still held,
    /// or nobody took it since its lease ended (then it is taken again).
    /// Fails when another gateway holds it now.
    fn renew(&self) -> Result<()>;
}

/// Held while other gateways' read-modify-write sequences are excluded;
/// dropping it ends the exclusion.
pub struct Exclusion(pub Box<dyn ExclusionHold>);

impl Exclusion {
    /// See [`ExclusionHold::renew`].
    pub fn renew(&self) -> Result<()> {
        self.0.renew()
    }
}

impl Debug for Exclusion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Exclusion")
    }
}

/// State shared by the gateways that serve one backing.
pub trait SharedState: Send + Sync + Debug {
    /// This gateway's target port group (its portal group tag).
    fn port_group(&self) -> u16;

    /// The store's operation timeout: how long [`SharedState::announce`]
    /// waits for an answer, and the lease of an [`Exclusion`].
    fn timeout(&self) -> Duration;

    /// The record as stored now.
    fn load(&self) -> Result<Record>;

    /// Replaces the record with `data` if it is still at `version`:
    /// `Ok(Some(new version))`, or `Ok(None)` when another gateway stored
    /// first (load again and retry).
    fn store(&self, version: u64, data: &[u8]) -> Result<Option<u64>>;

    /// Sends `event` to every other gateway and waits until each has run
    /// its hook or the store's timeout passed. Returns how many gateways
    /// did not answer in time.
    fn announce(&self, event: &[u8]) -> Result<usize>;

    /// Sets the handler of other gateways' events (replacing any earlier).
    fn listen(&self, hook: EventHook);

    /// Whether another gateway serves the backing now (answers events).
    fn others_alive(&self) -> Result<bool>;

    /// Excludes every other gateway's [`SharedState::exclude`] until the
    /// returned guard is dropped; waits (bounded by the store's timeout)
    /// while another gateway holds it.
    fn exclude(&self) -> Result<Exclusion>;

    /// The target port group of the gateway that owns the backing now
    /// (the one whose writes need no hand-over), if any gateway does.
    fn owner(&self) -> Result<Option<u16>>;

    /// Whether this gateway owns the backing now (a local check, cheap
    /// enough for every command).
    fn owns(&self) -> bool {
        false
    }

    /// Explicit ALUA: makes this gateway the owner, asking the current
    /// owner to give the backing up, and holds it (it is not handed over
    /// on another gateway's write) until another gateway asks for it
    /// here. `Ok(true)` once owned, `Ok(false)` when `deadline` passed.
    fn take_ownership(&self, deadline: std::time::Instant) -> Result<bool> {
        let _ = deadline;
        Ok(false)
    }

    /// Sets what runs (on a thread of the store's) after this gateway
    /// broke the ownership of a dead owner: the owner changed without any
    /// gateway announcing it.
    fn on_owner_broken(&self, hook: Box<dyn Fn() + Send + Sync>) {
        let _ = hook;
    }

    /// Explicit ALUA: gives the backing up, if this gateway owns it.
    fn give_up_ownership(&self) -> Result<()> {
        Ok(())
    }

    /// [`SharedState::announce`], waiting `within` at most (whole
    /// seconds, at least one) instead of the store's timeout.
    fn announce_within(&self, event: &[u8], within: Duration) -> Result<usize> {
        let _ = within;
        self.announce(event)
    }
}
