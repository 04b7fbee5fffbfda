//! [`TargetShared`]: the state of one SCSI target that its logical units'
//! commands see (the LUN table, the known I_T nexuses, the copy registry,
//! the target port groups). Below the command handlers and the task
//! management in `target`, above the logical units it holds.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

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
    pub(crate) nexuses: Mutex<HashMap<u64, Arc<Nexus>>>,
    /// Logical units the copy manager can reach (shared process-wide).
    pub(crate) registry: Arc<LunRegistry>,
    /// Target port groups of every gateway serving this target (its own
    /// included), reported by REPORT TARGET PORT GROUPS even before a
    /// nexus used them; empty: only the groups seen.
    pub(crate) port_groups: RwLock<Vec<u16>>,
}

impl TargetShared {
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

    pub(crate) fn register(&self, nexus: &Nexus) {
        lock(&self.nexuses)
            .entry(nexus.id)
            .or_insert_with(|| Arc::new(nexus.clone()));
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
