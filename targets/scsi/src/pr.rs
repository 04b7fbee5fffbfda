//! Reservations of one logical unit: persistent reservations (SPC-4 §5.13)
//! and SPC-2 RESERVE/RELEASE reservations, with the rules that tie the two
//! together (SPC-4 §5.13.3, SPC-2 §5.5.1).
//!
//! [`Reservations`] wraps the persistent reservation model
//! ([`PrState`], in `pr_state`) with the SPC-2 reservation under one lock,
//! keeps it persisted (the APTPL file in `pr_store`, or the state the
//! gateways of a shared backing hold) and answers the per-command conflict
//! check. Wire formats live in `pr_cmd`.
//!
//! Guarantees:
//! - registrations are keyed by I_T nexus *names* ([`ItNexus`]: initiator
//!   port + target port), never by connection, so they survive reconnects;
//!   the SPC-2 reservation is held by one I_T nexus (by name too, so the
//!   gateways of a shared backing can tell) and ends when that nexus is
//!   lost, with a logical unit reset or a target reset;
//! - with a shared backing the SPC-2 reservation lives in the shared state
//!   as well (compare-and-set like the persistent one): a RESERVE through
//!   one gateway is enforced on every other once the command that made it
//!   completes (the caller announces the change).
//! - a PERSISTENT RESERVE OUT is applied to a copy of the state, persisted
//!   when APTPL asks for it, and only then committed: a failed save leaves
//!   the state as it was;
//! - PRgeneration counts the successful REGISTER, REGISTER AND IGNORE
//!   EXISTING KEY, CLEAR, PREEMPT, PREEMPT AND ABORT and REGISTER AND MOVE
//!   service actions that changed something (SPC-4 §6.16.2); it restarts
//!   at zero when the unit is created, even from a saved state.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use rustgt_backstore::shared::SharedState;

use crate::cmd::Nexus;
use crate::pr_state::{Effects, ItNexus, PrState, Refusal};
use crate::pr_store::{self, PrStoreError};
use crate::sense::{Asc, Sense, SenseKey};

/// How the presence of a reservation affects a command (SPC-4 §5.13.1
/// tables 45/46, SBC-3 §4.17 table 13, SPC-2 §5.5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Never conflicts: INQUIRY, REPORT LUNS, REQUEST SENSE, READ CAPACITY, ...
    Always,
    /// TEST UNIT READY: allowed through persistent reservations only.
    TestUnitReady,
    /// PERSISTENT RESERVE IN/OUT: conflict while any SPC-2 reservation is
    /// held; PERSISTENT RESERVE OUT checks the rest itself.
    Persistent,
    /// RESERVE/RELEASE(6/10): the handler applies the SPC-2 rules.
    Spc2,
    /// Reads: allowed through write exclusive types.
    Read,
    /// Everything else: only for reservation holders (and registrants of
    /// registrants only / all registrants types).
    Write,
}

// A poisoned lock only means a panic elsewhere; the state stays usable.
fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(PoisonError::into_inner)
}

fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Debug, Default)]
struct Inner {
    pr: PrState,
    /// The I_T nexus holding an SPC-2 (RESERVE) reservation.
    spc2: Option<ItNexus>,
}

impl Inner {
    fn active(&self) -> bool {
        self.spc2.is_some() || self.pr.reservation.is_some() || !self.pr.registrations.is_empty()
    }
}

/// All reservation state of one logical unit.
#[derive(Debug)]
pub(crate) struct Reservations {
    /// Read by every command's conflict check, written by reservation commands.
    inner: RwLock<Inner>,
    /// False while there are no registrations and no reservation of any
    /// kind: the per-command check is then one atomic load.
    active: AtomicBool,
    /// Where APTPL state is kept; `None` = persistence not supported.
    store: Option<PathBuf>,
    /// The state the gateways of this backing share: when set, the
    /// persistent reservation state lives there (this copy is a cache
    /// kept current by the gateways' events) and `store` is unused.
    shared: Option<Arc<dyn SharedState>>,
    /// One PERSISTENT RESERVE OUT at a time on this gateway, without
    /// holding `inner` while the shared state is read and written.
    updating: Mutex<()>,
}

/// Attempts at a compare-and-set of the shared state before giving up.
const SHARED_ATTEMPTS: usize = 32;

fn internal_failure() -> Refusal {
    Refusal::Sense(Sense::new(
        SenseKey::HARDWARE_ERROR,
        Asc::INTERNAL_TARGET_FAILURE,
    ))
}

impl Reservations {
    /// No registrations and no reservation; APTPL state is kept in
    /// `store` (see [`Self::restore`]), or not at all when it is `None`.
    pub(crate) fn new(store: Option<PathBuf>) -> Reservations {
        Reservations {
            inner: RwLock::new(Inner::default()),
            active: AtomicBool::new(false),
            store,
            shared: None,
            updating: Mutex::new(()),
        }
    }

    /// Reservations kept in the state the gateways of one backing share.
    pub(crate) fn new_shared(shared: Arc<dyn SharedState>) -> Reservations {
        Reservations {
            shared: Some(shared),
            ..Reservations::new(None)
        }
    }

    /// Whether the state is shared with other gateways.
    pub(crate) fn is_shared(&self) -> bool {
        self.shared.is_some()
    }

    /// Replaces the cached state with the shared state as read.
    fn commit_shared(&self, pr: PrState, spc2: Option<ItNexus>) {
        let mut inner = write(&self.inner);
        inner.pr = pr;
        inner.spc2 = spc2;
        self.set_active(&inner);
    }

    /// Reads the shared state into the cache (another gateway changed it).
    pub(crate) fn refresh(&self) -> Result<(), PrStoreError> {
        let Some(sh) = &self.shared else {
            return Ok(());
        };
        let rec = sh.load().map_err(|e| PrStoreError::Invalid {
            path: "the shared state".into(),
            reason: e.to_string(),
        })?;
        let (pr, spc2) = pr_store::from_shared(&rec.data)?;
        self.commit_shared(pr, spc2);
        Ok(())
    }

    /// The shared state at unit creation: kept while another gateway
    /// serves the unit or when APTPL was set; otherwise this start is the
    /// unit's power on and registrations without APTPL end (SPC-4
    /// §5.13.5).
    fn restore_shared(&self, sh: &Arc<dyn SharedState>) -> Result<(), PrStoreError> {
        let bad = |e: rustgt_backstore::BackstoreError| PrStoreError::Invalid {
            path: "the shared state".into(),
            reason: e.to_string(),
        };
        for _ in 0..SHARED_ATTEMPTS {
            let rec = sh.load().map_err(bad)?;
            let (pr, spc2) = pr_store::from_shared(&rec.data)?;
            let fresh = pr == PrState::default() && spc2.is_none();
            if fresh || sh.others_alive().map_err(bad)? {
                self.commit_shared(pr, spc2);
                return Ok(());
            }
            // Power on: SPC-2 reservations end, and so do persistent ones
            // unless APTPL was set.
            let kept = if pr.aptpl { pr } else { PrState::default() };
            let data =
                pr_store::to_shared(&kept, None).map_err(|reason| PrStoreError::Invalid {
                    path: "the shared state".into(),
                    reason,
                })?;
            if sh.store(rec.version, &data).map_err(bad)?.is_some() {
                self.commit_shared(kept, None);
                return Ok(());
            }
        }
        Err(PrStoreError::Invalid {
            path: "the shared state".into(),
            reason: "it kept changing while it was read".into(),
        })
    }

    /// Restores the APTPL state saved in the store, if any (unit creation
    /// is this device's power on).
    pub(crate) fn restore(&self) -> Result<(), PrStoreError> {
        if let Some(sh) = &self.shared {
            return self.restore_shared(sh);
        }
        let Some(path) = &self.store else {
            return Ok(());
        };
        if let Some(pr) = pr_store::load(path)? {
            let mut inner = write(&self.inner);
            inner.pr = pr;
            self.set_active(&inner);
        }
        Ok(())
    }

    /// Whether APTPL=1 can be honoured (PTPL_C in REPORT CAPABILITIES).
    pub(crate) fn can_persist(&self) -> bool {
        self.store.is_some() || self.shared.is_some()
    }

    /// A copy of the persistent reservation state (PERSISTENT RESERVE IN).
    pub(crate) fn snapshot(&self) -> PrState {
        read(&self.inner).pr.clone()
    }

    fn set_active(&self, inner: &Inner) {
        self.active.store(inner.active(), Ordering::Release);
    }

    /// Whether a command of class `access` from `nexus` must end with
    /// RESERVATION CONFLICT.
    pub(crate) fn conflicts(&self, nexus: &Nexus, access: Access) -> bool {
        if !self.active.load(Ordering::Acquire) {
            return false;
        }
        let inner = read(&self.inner);
        if let Some(holder) = &inner.spc2 {
            return spc2_conflict(holder.is(nexus), access);
        }
        pr_conflict(&inner.pr, nexus, access)
    }

    /// Applies a PERSISTENT RESERVE OUT service action: on a copy, saved
    /// first when APTPL is (or was) in effect, then committed.
    pub(crate) fn update(
        &self,
        mut op: impl FnMut(&mut PrState) -> Result<Effects, Refusal>,
    ) -> Result<Effects, Refusal> {
        if let Some(sh) = &self.shared {
            return self.update_shared(sh, op);
        }
        let mut inner = write(&self.inner);
        if inner.spc2.is_some() {
            // SPC-2 §5.5.1: no PERSISTENT RESERVE command while reserved.
            return Err(Refusal::Conflict);
        }
        let mut next = inner.pr.clone();
        let effects = op(&mut next)?;
        if next != inner.pr {
            self.persist(&inner.pr, &next)?;
            inner.pr = next;
            self.set_active(&inner);
        }
        Ok(effects)
    }

    /// [`Self::update`] on the shared state: the action is applied to the
    /// state as stored now and the result stored only if nobody stored in
    /// between (compare-and-set), retried from a fresh read otherwise.
    fn update_shared(
        &self,
        sh: &Arc<dyn SharedState>,
        mut op: impl FnMut(&mut PrState) -> Result<Effects, Refusal>,
    ) -> Result<Effects, Refusal> {
        self.compare_and_set(sh, |cur, spc2| {
            if spc2.is_some() {
                // SPC-2 §5.5.1: no PERSISTENT RESERVE command while reserved.
                return Round::Keep(Err(Refusal::Conflict));
            }
            let mut next = cur.clone();
            match op(&mut next) {
                Ok(effects) if next != *cur => Round::Store(next, None, effects),
                done => Round::Keep(done),
            }
        })
    }

    /// One compare-and-set update of the shared state: `round` decides from
    /// the state as stored now; what it stores is kept only if nobody
    /// stored in between, and the round is retried from a fresh read
    /// otherwise. Either way the cache ends up holding what was read or
    /// stored. One update at a time per gateway.
    fn compare_and_set<R>(
        &self,
        sh: &Arc<dyn SharedState>,
        mut round: impl FnMut(&PrState, &Option<ItNexus>) -> Round<R>,
    ) -> Result<R, Refusal> {
        let _one = self.updating.lock().unwrap_or_else(PoisonError::into_inner);
        for _ in 0..SHARED_ATTEMPTS {
            let rec = sh.load().map_err(|e| failed("read", &e))?;
            let (pr, spc2) = pr_store::from_shared(&rec.data).map_err(|e| failed("read", &e))?;
            let (next_pr, next_spc2, answer) = match round(&pr, &spc2) {
                Round::Keep(done) => {
                    self.commit_shared(pr, spc2);
                    return done;
                }
                Round::Store(next_pr, next_spc2, answer) => (next_pr, next_spc2, answer),
            };
            let data = pr_store::to_shared(&next_pr, next_spc2.as_ref())
                .map_err(|e| failed("encode", &e))?;
            match sh.store(rec.version, &data) {
                Ok(Some(_)) => {
                    self.commit_shared(next_pr, next_spc2);
                    return Ok(answer);
                }
                Ok(None) => continue,
                Err(e) => return Err(failed("store", &e)),
            }
        }
        Err(failed("store", &"other gateways kept changing it"))
    }

    fn persist(&self, old: &PrState, new: &PrState) -> Result<(), Refusal> {
        let Some(path) = &self.store else {
            return Ok(());
        };
        let saved = if new.aptpl {
            pr_store::save(path, new)
        } else if old.aptpl {
            // APTPL=0: what was saved must not come back after power loss.
            pr_store::remove(path)
        } else {
            return Ok(());
        };
        saved.map_err(|e| {
            tracing::error!(error = %e, "cannot save persistent reservation state");
            Refusal::Sense(Sense::new(
                SenseKey::HARDWARE_ERROR,
                Asc::INTERNAL_TARGET_FAILURE,
            ))
        })
    }

    /// Applies `op` to the SPC-2 reservation holder, given the persistent
    /// state: here, or for a shared backing on the shared state as stored
    /// now (compare-and-set, retried from a fresh read). `Ok(true)` when
    /// the shared state changed: the caller announces it to the other
    /// gateways.
    fn update_spc2(
        &self,
        op: impl Fn(&PrState, &mut Option<ItNexus>) -> Result<(), Refusal>,
    ) -> Result<bool, Refusal> {
        let Some(sh) = &self.shared else {
            let mut inner = write(&self.inner);
            let Inner { pr, spc2 } = &mut *inner;
            let done = op(pr, spc2);
            self.set_active(&inner);
            return done.map(|()| false);
        };
        self.compare_and_set(sh, |pr, cur| {
            let mut next = cur.clone();
            match op(pr, &mut next) {
                Ok(()) if next != *cur => Round::Store(pr.clone(), next, true),
                done => Round::Keep(done.map(|()| false)),
            }
        })
    }

    /// RESERVE(6)/(10) (SPC-2 §7.21) with the SPC-4 §5.13.3 exceptions.
    /// `Ok(true)`: the shared state changed (announce it).
    pub(crate) fn spc2_reserve(&self, nexus: &Nexus) -> Result<bool, Refusal> {
        self.update_spc2(|pr, spc2| {
            spc2_persistent_exception(pr, nexus)?;
            if pr.registrations.is_empty() {
                match spc2 {
                    Some(holder) if !holder.is(nexus) => return Err(Refusal::Conflict),
                    _ => *spc2 = Some(ItNexus::of(nexus)),
                }
            }
            Ok(())
        })
    }

    /// RELEASE(6)/(10) (SPC-2 §7.23): only the holder's RELEASE has an
    /// effect; anyone else's completes with GOOD. `Ok(true)`: the shared
    /// state changed (announce it).
    pub(crate) fn spc2_release(&self, nexus: &Nexus) -> Result<bool, Refusal> {
        self.update_spc2(|pr, spc2| {
            spc2_persistent_exception(pr, nexus)?;
            if spc2.as_ref().is_some_and(|h| h.is(nexus)) {
                *spc2 = None;
            }
            Ok(())
        })
    }

    /// A logical unit or target reset releases the SPC-2 reservation
    /// (SPC-2 §5.5.1); persistent reservations are not affected. For a
    /// shared backing the reset is everywhere (the caller announces it),
    /// so the shared state is cleared too.
    pub(crate) fn reset(&self) {
        if let Err(e) = self.update_spc2(|_, spc2| {
            *spc2 = None;
            Ok(())
        }) {
            tracing::error!(error = ?e, "a reset could not release the shared SPC-2 reservation");
        }
    }

    /// I_T nexus loss releases that nexus's SPC-2 reservation. `true`:
    /// the shared state changed (announce it).
    pub(crate) fn nexus_lost(&self, nexus: &Nexus) -> bool {
        if !read(&self.inner).spc2.as_ref().is_some_and(|h| h.is(nexus)) {
            // Not the holder as far as this gateway knows (a holder on
            // another gateway has another target port name).
            return false;
        }
        let changed = self.update_spc2(|_, spc2| {
            if spc2.as_ref().is_some_and(|h| h.is(nexus)) {
                *spc2 = None;
            }
            Ok(())
        });
        changed.unwrap_or_else(|e| {
            tracing::error!(error = ?e, "the SPC-2 reservation of a lost nexus could not be released");
            false
        })
    }
}

/// What one round of [`Reservations::compare_and_set`] decides from the
/// shared state as read.
enum Round<R> {
    /// Store nothing; the answer.
    Keep(Result<R, Refusal>),
    /// Store this persistent state and SPC-2 holder, then answer `R`.
    Store(PrState, Option<ItNexus>, R),
}

fn failed(what: &str, e: &dyn std::fmt::Display) -> Refusal {
    tracing::error!(error = %e, "cannot {what} the shared reservation state");
    internal_failure()
}

/// SPC-4 §5.13.3: while any I_T nexus is registered, RESERVE and RELEASE
/// conflict, except that they complete with GOOD (and no effect) from a
/// persistent reservation holder, or from any registrant while a
/// registrants only or all registrants reservation exists.
fn spc2_persistent_exception(pr: &PrState, nexus: &Nexus) -> Result<(), Refusal> {
    if pr.registrations.is_empty() {
        return Ok(());
    }
    let shared = pr
        .reservation
        .as_ref()
        .is_some_and(|r| r.pr_type.registrants_share());
    if pr.is_holder(nexus) || (shared && pr.is_registered(nexus)) {
        Ok(())
    } else {
        Err(Refusal::Conflict)
    }
}

/// A command while an SPC-2 reservation exists (SPC-2 §5.5.1 and its
/// tables 10 and B.1): only the holder has access, except for the commands
/// that cannot disturb it; PERSISTENT RESERVE IN/OUT conflict for everyone.
fn spc2_conflict(is_holder: bool, access: Access) -> bool {
    match access {
        Access::Always | Access::Spc2 => false,
        Access::Persistent => true,
        Access::TestUnitReady | Access::Read | Access::Write => !is_holder,
    }
}

/// A command while a persistent reservation may exist (SPC-4 table 45,
/// SBC-3 table 13).
fn pr_conflict(pr: &PrState, nexus: &Nexus, access: Access) -> bool {
    let Some(res) = &pr.reservation else {
        return false;
    };
    let shared = res.pr_type.registrants_share() && pr.is_registered(nexus);
    if shared || pr.is_holder(nexus) {
        return false;
    }
    match access {
        Access::Always | Access::TestUnitReady | Access::Persistent | Access::Spc2 => false,
        Access::Read => res.pr_type.exclusive_access(),
        Access::Write => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pr_state::tests::{nexus, registered};
    use crate::pr_state::PrType;

    #[test]
    fn access_through_persistent_reservations() {
        let (a, b, c) = (nexus(1, 1), nexus(2, 1), nexus(3, 1));
        let cases = [
            // type, registered non-holder (read, write), unregistered (read, write)
            (PrType::WRITE_EXCLUSIVE, (true, false), (true, false)),
            (PrType::EXCLUSIVE_ACCESS, (false, false), (false, false)),
            (PrType::WRITE_EXCLUSIVE_RO, (true, true), (true, false)),
            (PrType::EXCLUSIVE_ACCESS_RO, (true, true), (false, false)),
            (PrType::WRITE_EXCLUSIVE_AR, (true, true), (true, false)),
            (PrType::EXCLUSIVE_ACCESS_AR, (true, true), (false, false)),
        ];
        for (ty, reg, unreg) in cases {
            let mut s = registered(&[(1, 0xA), (2, 0xB)]);
            s.reserve(&a, 0xA, ty).expect("reserve");
            let ok = |n: &Nexus, acc| !pr_conflict(&s, n, acc);
            assert!(
                ok(&a, Access::Read) && ok(&a, Access::Write),
                "{ty:?} holder"
            );
            assert_eq!(
                (ok(&b, Access::Read), ok(&b, Access::Write)),
                reg,
                "{ty:?} registered"
            );
            assert_eq!(
                (ok(&c, Access::Read), ok(&c, Access::Write)),
                unreg,
                "{ty:?} unregistered"
            );
            for always in [Access::Always, Access::TestUnitReady, Access::Persistent] {
                assert!(ok(&c, always));
            }
        }
    }

    #[test]
    fn spc2_reservations() {
        let (a, b) = (nexus(1, 1), nexus(2, 1));
        let r = Reservations::new(None);
        assert!(!r.conflicts(&b, Access::Write));
        assert_eq!(r.spc2_reserve(&a), Ok(false), "not shared");
        r.spc2_reserve(&a).expect("again");
        assert_eq!(r.spc2_reserve(&b), Err(Refusal::Conflict));
        assert!(r.conflicts(&b, Access::TestUnitReady));
        assert!(r.conflicts(&b, Access::Read));
        assert!(!r.conflicts(&b, Access::Always));
        assert!(!r.conflicts(&a, Access::Write));
        // PERSISTENT RESERVE conflicts for everyone, the holder included.
        assert!(r.conflicts(&a, Access::Persistent));
        assert_eq!(
            r.update(|s| s.register(&a, 0, 1, false, false)),
            Err(Refusal::Conflict)
        );
        // Someone else's RELEASE is a no-op.
        r.spc2_release(&b).expect("no-op");
        assert!(r.conflicts(&b, Access::Write));
        assert!(!r.nexus_lost(&b), "not the holder");
        assert!(r.conflicts(&b, Access::Write));
        assert!(!r.nexus_lost(&a));
        assert!(!r.conflicts(&b, Access::Write));
        r.spc2_reserve(&b).expect("reserve");
        r.reset();
        assert!(!r.conflicts(&a, Access::Write));
    }

    #[test]
    fn spc2_versus_registrations() {
        let (a, b) = (nexus(1, 1), nexus(2, 1));
        let r = Reservations::new(None);
        r.update(|s| s.register(&a, 0, 0xA, false, false))
            .expect("register");
        // Registered, not a holder: RESERVE and RELEASE conflict.
        assert_eq!(r.spc2_reserve(&a), Err(Refusal::Conflict));
        assert_eq!(r.spc2_release(&b), Err(Refusal::Conflict));
        r.update(|s| {
            s.reserve(&a, 0xA, PrType::WRITE_EXCLUSIVE)
                .map(|()| Effects::default())
        })
        .expect("reserve");
        // The holder's RESERVE completes with GOOD and changes nothing.
        r.spc2_reserve(&a).expect("holder");
        assert!(r.conflicts(&b, Access::Write));
        assert!(!r.conflicts(&b, Access::Read));
        assert!(!r.conflicts(&b, Access::TestUnitReady));
    }
}
