//! [`TargetShared`]: the state of one SCSI target that its logical units'
//! commands see (the LUN table, the known I_T nexuses, the copy registry,
//! the target port groups). Below the command handlers and the task
//! management in `target`, above the logical units it holds.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

use rustc_hash::FxHashMap;

use crate::cmd::Nexus;
use crate::lun::LogicalUnit;
use crate::registry::LunRegistry;
use crate::sense::Asc;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// State shared by the target and its workers.
#[derive(Debug)]
pub(crate) struct TargetShared {
    pub(crate) luns: RwLock<BTreeMap<u64, Arc<LogicalUnit>>>,
    /// Keyed by nexus id (the process chooses them): read by unit
    /// attentions and reservations, written by [`Self::register`] and
    /// [`Self::forget`].
    nexuses: Mutex<FxHashMap<u64, Arc<Nexus>>>,
    /// Process-unique, so [`SEEN`] cannot take another target for this one.
    serial: u64,
    /// How many nexuses were forgotten so far: a registration [`SEEN`]
    /// remembers from before the last one is looked at again.
    forgets: AtomicU64,
    /// Logical units the copy manager can reach (shared process-wide).
    pub(crate) registry: Arc<LunRegistry>,
    /// Target port groups of every gateway serving this target (its own
    /// included), reported by REPORT TARGET PORT GROUPS even before a
    /// nexus used them; empty: only the groups seen.
    pub(crate) port_groups: RwLock<Vec<u16>>,
}

/// Serials of [`TargetShared`]s; 0 is never one.
static SERIALS: AtomicU64 = AtomicU64::new(1);

/// Slots of [`SEEN`].
const SEEN_SLOTS: usize = 16;

thread_local! {
    /// The registrations this thread made, so a command of a nexus already
    /// known takes no lock: slot `nexus id % SEEN_SLOTS` holds (target
    /// serial, its forget count then, nexus id).
    static SEEN: [Cell<(u64, u64, u64)>; SEEN_SLOTS] =
        const { [const { Cell::new((0, 0, 0)) }; SEEN_SLOTS] };
}

impl TargetShared {
    pub(crate) fn new(registry: Arc<LunRegistry>) -> TargetShared {
        TargetShared {
            luns: RwLock::new(BTreeMap::new()),
            nexuses: Mutex::new(FxHashMap::default()),
            serial: SERIALS.fetch_add(1, Ordering::Relaxed),
            forgets: AtomicU64::new(0),
            registry,
            port_groups: RwLock::new(Vec::new()),
        }
    }

    pub(crate) fn registry(&self) -> &LunRegistry {
        &self.registry
    }

    pub(crate) fn lu(&self, lun: u64) -> Option<Arc<LogicalUnit>> {
        self.luns
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&lun)
            .cloned()
    }

    pub(crate) fn all_lus(&self) -> Vec<Arc<LogicalUnit>> {
        self.luns
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    /// Exported LUNs, ascending.
    pub(crate) fn lun_list(&self) -> Vec<u64> {
        self.luns
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .copied()
            .collect()
    }

    /// Ids of every nexus currently known.
    pub(crate) fn known_nexuses(&self) -> Vec<u64> {
        lock(&self.nexuses).keys().copied().collect()
    }

    /// The configured target port groups (`ScsiTarget::set_port_groups`).
    pub(crate) fn port_groups(&self) -> Vec<u16> {
        self.port_groups
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Logical unit reset (SAM-5 §6.3.3) on this gateway only: abort all
    /// tasks, restore default mode parameters, and establish `asc` for
    /// every known nexus, including the one that asked.
    pub(crate) fn reset_lu_here(&self, lu: &LogicalUnit, asc: Asc) {
        let aborted = lu.tasks.abort_matching(|_| true);
        lu.tasks.wait_gone(&aborted);
        let defaults = lu.mode_defaults();
        let was = lu.mode();
        if lu.set_mode(defaults) && was.write_cache && !defaults.write_cache {
            if let Err(e) = lu.backstore.flush() {
                tracing::warn!(lun = lu.lun, error = %e, "flush on reset failed");
            }
        }
        // SPC-2 reservations end with a reset; persistent ones do not.
        lu.pr.reset();
        // Medium removal prevention ends too (SBC-3 §5.14).
        lu.medium.reset();
        lu.establish_ua(self.known_nexuses(), asc, None);
    }

    /// Every nexus currently known (reservations map I_T nexus names to
    /// connections with it; ALUA learns target ports from it).
    pub(crate) fn nexus_list(&self) -> Vec<Arc<Nexus>> {
        lock(&self.nexuses).values().cloned().collect()
    }

    /// Makes `nexus` known (every command calls this). A nexus this
    /// thread already registered, with none forgotten since, takes no lock.
    pub(crate) fn register(&self, nexus: &Nexus) {
        let key = (self.serial, self.forgets.load(Ordering::Acquire), nexus.id);
        let slot = (nexus.id % SEEN_SLOTS as u64) as usize;
        if SEEN.with(|seen| seen.get(slot).is_some_and(|c| c.get() == key)) {
            return;
        }
        lock(&self.nexuses)
            .entry(nexus.id)
            .or_insert_with(|| Arc::new(nexus.clone()));
        SEEN.with(|seen| {
            if let Some(c) = seen.get(slot) {
                c.set(key);
            }
        });
    }

    /// Forgets nexus `id` (its session is gone); a later command of it
    /// registers it again.
    pub(crate) fn forget(&self, id: u64) {
        lock(&self.nexuses).remove(&id);
        self.forgets.fetch_add(1, Ordering::Release);
    }

    /// Whether nexus `id` is known.
    #[cfg(test)]
    pub(crate) fn knows(&self, id: u64) -> bool {
        lock(&self.nexuses).contains_key(&id)
    }

    /// REPORTED LUNS DATA HAS CHANGED for every known nexus on every LUN.
    pub(crate) fn luns_changed(&self) {
        let nexuses = self.known_nexuses();
        for lu in self.all_lus() {
            lu.establish_ua(
                nexuses.iter().copied(),
                Asc::REPORTED_LUNS_DATA_HAS_CHANGED,
                None,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pr_state::tests::nexus;

    #[test]
    fn a_forgotten_nexus_is_registered_again_by_its_next_command() {
        let a = TargetShared::new(Arc::default());
        let b = TargetShared::new(Arc::default());
        let n = nexus(7, 1);
        // Same slot of the thread's cache, other nexus and other target.
        let m = nexus(7 + SEEN_SLOTS as u64, 1);
        a.register(&n);
        assert!(a.knows(7));
        // The thread remembers it registered n on `a`; forgetting it must
        // not leave it unknown.
        a.forget(7);
        assert!(!a.knows(7));
        a.register(&n);
        assert!(a.knows(7), "registered again after it was forgotten");
        // What the thread remembers is for `a` only: `b` takes it.
        assert!(!b.knows(7));
        b.register(&n);
        assert!(b.knows(7));
        a.register(&m);
        a.register(&n);
        assert!(a.knows(7) && a.knows(m.id));
        assert_eq!(a.known_nexuses().len(), 2);
    }
}
