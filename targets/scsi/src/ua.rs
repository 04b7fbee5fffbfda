//! Unit attention conditions of one logical unit, queued per I_T nexus
//! (SAM-5 §5.14, SPC-4 §5.14).
//!
//! Each nexus has a FIFO of pending conditions, reported oldest first. A
//! condition already pending is not queued twice, the queue is bounded, and
//! a reset-class condition (ASC 29h) replaces everything older: after a
//! reset the older state changes are moot.
//!
//! A nexus that has no entry has no pending condition; in particular a new
//! nexus starts with none (the POWER ON / RESET condition a physical device
//! would report after power-on is not established for new sessions, as LIO
//! and tgt behave).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use crate::sense::Asc;

/// Most conditions kept per nexus; later ones are dropped (SPC-4 §5.14
/// allows a device server to drop conditions it cannot queue).
pub(crate) const MAX_PENDING: usize = 16;

/// Pending unit attentions of one logical unit, keyed by nexus id.
#[derive(Debug, Default)]
pub(crate) struct UnitAttentions {
    pending: HashMap<u64, VecDeque<Asc>>,
}

impl UnitAttentions {
    /// Queues `asc` for `nexus`.
    pub(crate) fn establish(&mut self, nexus: u64, asc: Asc) {
        let queue = self.pending.entry(nexus).or_default();
        if asc.is_reset() {
            queue.clear();
        }
        if !queue.contains(&asc) && queue.len() < MAX_PENDING {
            queue.push_back(asc);
        }
    }

    /// Queues `asc` for each nexus in `nexuses` other than `except`.
    pub(crate) fn establish_for<I>(&mut self, nexuses: I, asc: Asc, except: Option<u64>)
    where
        I: IntoIterator<Item = u64>,
    {
        for nexus in nexuses {
            if Some(nexus) != except {
                self.establish(nexus, asc);
            }
        }
    }

    /// Removes and returns the oldest condition for `nexus`.
    pub(crate) fn take(&mut self, nexus: u64) -> Option<Asc> {
        let queue = self.pending.get_mut(&nexus)?;
        let asc = queue.pop_front();
        if queue.is_empty() {
            self.pending.remove(&nexus);
        }
        asc
    }

    /// Forgets everything about `nexus` (I_T nexus loss).
    pub(crate) fn drop_nexus(&mut self, nexus: u64) {
        self.pending.remove(&nexus);
    }

    #[cfg(test)]
    pub(crate) fn pending(&self, nexus: u64) -> Vec<Asc> {
        self.pending
            .get(&nexus)
            .map(|q| q.iter().copied().collect())
            .unwrap_or_default()
    }
}

/// The [`UnitAttentions`] of a unit, shared by all its commands: behind a
/// mutex, with a flag every command reads first, so that admission takes
/// no lock while no nexus has a condition pending (the usual state).
#[derive(Debug, Default)]
pub(crate) struct SharedAttentions {
    table: Mutex<UnitAttentions>,
    /// Whether `table` holds any condition; written under its lock.
    any: AtomicBool,
}

impl SharedAttentions {
    fn update<R>(&self, f: impl FnOnce(&mut UnitAttentions) -> R) -> R {
        // A poisoned lock only means a panic elsewhere; the table stays valid.
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        let r = f(&mut table);
        self.any.store(!table.pending.is_empty(), Ordering::Release);
        r
    }

    /// Removes and returns the oldest condition for `nexus`.
    pub(crate) fn take(&self, nexus: u64) -> Option<Asc> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        self.update(|t| t.take(nexus))
    }

    /// Queues `asc` for each nexus in `nexuses` other than `except`.
    pub(crate) fn establish_for<I>(&self, nexuses: I, asc: Asc, except: Option<u64>)
    where
        I: IntoIterator<Item = u64>,
    {
        self.update(|t| t.establish_for(nexuses, asc, except));
    }

    /// Forgets everything about `nexus` (I_T nexus loss).
    pub(crate) fn drop_nexus(&self, nexus: u64) {
        self.update(|t| t.drop_nexus(nexus));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_flag_follows_the_table() {
        let s = SharedAttentions::default();
        assert_eq!(s.take(1), None);
        s.establish_for([1, 2], Asc::CAPACITY_DATA_HAS_CHANGED, Some(2));
        assert!(s.any.load(Ordering::Acquire));
        assert_eq!(s.take(2), None);
        assert_eq!(s.take(1), Some(Asc::CAPACITY_DATA_HAS_CHANGED));
        assert!(!s.any.load(Ordering::Acquire), "the last condition taken");
        s.establish_for([3], Asc::CAPACITY_DATA_HAS_CHANGED, None);
        s.drop_nexus(3);
        assert!(!s.any.load(Ordering::Acquire), "the last nexus dropped");
        assert_eq!(s.take(3), None);
    }

    #[test]
    fn fifo_per_nexus_without_duplicates() {
        let mut ua = UnitAttentions::default();
        ua.establish(1, Asc::MODE_PARAMETERS_CHANGED);
        ua.establish(1, Asc::REPORTED_LUNS_DATA_HAS_CHANGED);
        ua.establish(1, Asc::MODE_PARAMETERS_CHANGED);
        ua.establish(2, Asc::REPORTED_LUNS_DATA_HAS_CHANGED);
        assert_eq!(ua.take(1), Some(Asc::MODE_PARAMETERS_CHANGED));
        assert_eq!(ua.take(1), Some(Asc::REPORTED_LUNS_DATA_HAS_CHANGED));
        assert_eq!(ua.take(1), None);
        assert_eq!(ua.take(2), Some(Asc::REPORTED_LUNS_DATA_HAS_CHANGED));
        assert_eq!(ua.take(3), None);
    }

    #[test]
    fn reset_supersedes_older_conditions() {
        let mut ua = UnitAttentions::default();
        ua.establish(1, Asc::MODE_PARAMETERS_CHANGED);
        ua.establish(1, Asc::BUS_DEVICE_RESET_FUNCTION_OCCURRED);
        ua.establish(1, Asc::REPORTED_LUNS_DATA_HAS_CHANGED);
        assert_eq!(
            ua.pending(1),
            vec![
                Asc::BUS_DEVICE_RESET_FUNCTION_OCCURRED,
                Asc::REPORTED_LUNS_DATA_HAS_CHANGED
            ]
        );
    }

    #[test]
    fn bounded_and_droppable() {
        let mut ua = UnitAttentions::default();
        for i in 0..100u8 {
            ua.establish(1, Asc::new(0x80, i));
        }
        assert_eq!(ua.pending(1).len(), MAX_PENDING);
        ua.establish_for([1, 2, 3], Asc::POWER_ON_OCCURRED, Some(2));
        assert_eq!(ua.pending(1), vec![Asc::POWER_ON_OCCURRED]);
        assert!(ua.pending(2).is_empty());
        ua.drop_nexus(1);
        assert_eq!(ua.take(1), None);
        assert_eq!(ua.take(3), Some(Asc::POWER_ON_OCCURRED));
    }
}
