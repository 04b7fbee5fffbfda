//! Process-wide directory of logical units by their NAA designator (VPD
//! page 83h), so the copy manager can reach any LUN of this process that an
//! EXTENDED COPY names in an identification CSCD descriptor (SPC-4
//! §6.4.6.3), whichever target or session exports it.
//!
//! Guarantees:
//! - the registry holds weak references only: it never keeps a removed LUN
//!   alive, and a LUN is unregistered when its target removes it or drops;
//! - a lookup names a unit only when the designator is unambiguous: the
//!   unit that received the command if it matches, else exactly one other
//!   live unit (duplicated designators are a configuration error and are
//!   logged once at registration).

use std::sync::{Arc, PoisonError, RwLock, Weak};

use crate::lun::{Identity, LogicalUnit};

/// Length of an NAA IEEE Registered Extended designator (SPC-4 §7.8.6.6.5).
pub(crate) const NAA_LEN: usize = 16;

#[derive(Debug)]
struct Entry {
    naa: [u8; NAA_LEN],
    lu: Weak<LogicalUnit>,
}

/// Logical units of every [`crate::ScsiTarget`] sharing this registry.
///
/// Create one per process with [`LunRegistry::new`] and pass it to each
/// target through [`crate::ScsiTarget::with_registry`]; a target made with
/// [`crate::ScsiTarget::new`] has a private registry (copies stay within
/// that target).
#[derive(Debug, Default)]
pub struct LunRegistry {
    entries: RwLock<Vec<Entry>>,
}

impl LunRegistry {
    /// An empty registry, ready to be shared by several targets.
    pub fn new() -> Arc<LunRegistry> {
        Arc::new(LunRegistry::default())
    }

    /// Number of live logical units registered.
    pub fn len(&self) -> usize {
        self.read()
            .iter()
            .filter(|e| e.lu.strong_count() > 0)
            .count()
    }

    /// Whether no live logical unit is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<Entry>> {
        self.entries.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Vec<Entry>> {
        self.entries.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds `lu` under its NAA designator; dead entries are pruned.
    pub(crate) fn register(&self, lu: &Arc<LogicalUnit>) {
        let naa = lu.naa_designator();
        let mut entries = self.write();
        entries.retain(|e| e.lu.strong_count() > 0);
        if entries.iter().any(|e| e.naa == naa) {
            tracing::warn!(
                lun = lu.lun,
                "another logical unit has the same NAA designator: EXTENDED COPY cannot name either"
            );
        }
        entries.push(Entry {
            naa,
            lu: Arc::downgrade(lu),
        });
    }

    /// Removes `lu` (and any dead entry).
    pub(crate) fn unregister(&self, lu: &Arc<LogicalUnit>) {
        let me = Arc::as_ptr(lu);
        self.write()
            .retain(|e| e.lu.strong_count() > 0 && e.lu.as_ptr() != me);
    }

    /// The unit whose NAA designator is `naa`: `local` when it matches,
    /// else the single other live unit that does.
    pub(crate) fn resolve(&self, naa: &[u8], local: &LogicalUnit) -> Option<Resolved> {
        if local.naa_designator() == naa {
            return Some(Resolved::Local);
        }
        let entries = self.read();
        let mut found = entries
            .iter()
            .filter(|e| e.naa == naa)
            .filter_map(|e| e.lu.upgrade())
            .filter(|lu| !std::ptr::eq(Arc::as_ptr(lu), local));
        match (found.next(), found.next()) {
            (Some(lu), None) => Some(Resolved::Other(lu)),
            _ => None,
        }
    }
}

/// Outcome of [`LunRegistry::resolve`].
#[derive(Debug)]
pub(crate) enum Resolved {
    /// The unit that received the command.
    Local,
    /// Another unit of this process.
    Other(Arc<LogicalUnit>),
}

impl LogicalUnit {
    /// The NAA designator value this unit reports in VPD page 83h.
    pub(crate) fn naa_designator(&self) -> [u8; NAA_LEN] {
        self.ident.designator()
    }
}

impl Identity {
    /// The NAA designator value of VPD page 83h: the configured one, or
    /// the IEEE Registered Extended form of `naa_id`.
    pub(crate) fn designator(&self) -> [u8; NAA_LEN] {
        self.naa
            .unwrap_or_else(|| naa_registered_extended(self.naa_id))
    }
}

/// IEEE company ID placed in the NAA IEEE Registered Extended designator.
/// rustgt has no OUI of its own, so the field is zero and uniqueness comes
/// entirely from the per-LUN `naa_id` the daemon assigns.
pub(crate) const NAA_COMPANY_ID: u32 = 0x00_0000;

/// NAA IEEE Registered Extended designator value (SPC-4 §7.8.6.6.5):
/// NAA=6h, company ID, vendor specific identifier 0, extension `naa_id`.
pub(crate) fn naa_registered_extended(naa_id: u64) -> [u8; 16] {
    let mut v = [0u8; 16];
    let cid = NAA_COMPANY_ID & 0x00FF_FFFF;
    v[0] = 0x60 | ((cid >> 20) & 0x0F) as u8;
    v[1] = (cid >> 12) as u8;
    v[2] = (cid >> 4) as u8;
    v[3] = ((cid & 0x0F) as u8) << 4;
    v[8..16].copy_from_slice(&naa_id.to_be_bytes());
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lun::LunConfig;
    use rustgt_backstore::RamBackstore;

    fn unit(lun: u64, naa_id: u64) -> Arc<LogicalUnit> {
        let store = RamBackstore::new(1 << 20, 512, false).map(Arc::new);
        let mut cfg = LunConfig::new(store.expect("ram store"));
        cfg.naa_id = naa_id;
        Arc::new(LogicalUnit::new(lun, &cfg))
    }

    fn is_other(r: Option<Resolved>, want: &Arc<LogicalUnit>) -> bool {
        matches!(r, Some(Resolved::Other(lu)) if Arc::ptr_eq(&lu, want))
    }

    #[test]
    fn resolves_local_first_then_a_unique_other() {
        let reg = LunRegistry::new();
        let (a, b, c) = (unit(0, 1), unit(1, 2), unit(2, 2));
        for lu in [&a, &b] {
            reg.register(lu);
        }
        assert_eq!(reg.len(), 2);
        assert!(matches!(
            reg.resolve(&a.naa_designator(), &a),
            Some(Resolved::Local)
        ));
        assert!(is_other(reg.resolve(&b.naa_designator(), &a), &b));
        assert!(reg.resolve(&unit(9, 3).naa_designator(), &a).is_none());
        // A duplicated designator is ambiguous from elsewhere, local from
        // either of its owners.
        reg.register(&c);
        assert!(reg.resolve(&b.naa_designator(), &a).is_none());
        assert!(matches!(
            reg.resolve(&b.naa_designator(), &c),
            Some(Resolved::Local)
        ));
        reg.unregister(&c);
        assert!(is_other(reg.resolve(&b.naa_designator(), &a), &b));
        // Dropped units vanish without unregistering.
        drop(b);
        assert_eq!(reg.len(), 1);
        assert!(reg.resolve(&unit(1, 2).naa_designator(), &a).is_none());
    }
}
