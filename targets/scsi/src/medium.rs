//! Removable medium (SBC-3 §4.17, §5.14, §5.25): the medium's presence
//! and medium removal prevention, part of a logical unit's state. The
//! commands that change them, START STOP UNIT and PREVENT ALLOW MEDIUM
//! REMOVAL, are in `medium_cmd`.
//!
//! Guarantees:
//! - a non-removable unit always has its medium and refuses LOEJ (INVALID
//!   FIELD IN CDB), as a fixed disk does;
//! - removal is prevented while any I_T nexus holds a prevention; an
//!   eject or a load is then refused with MEDIUM REMOVAL PREVENTED;
//! - a nexus's prevention ends with ALLOW, with the loss of that nexus, and
//!   with a logical unit (or target) reset (SBC-3 §5.14);
//! - without a medium every command that needs one fails with NOT READY,
//!   MEDIUM NOT PRESENT - TRAY OPEN; the commands that do not access the
//!   medium ([`works_without_medium`]) still run.
//!
//! The medium is the LUN's backstore: ejecting it only makes it
//! unreachable, and loading it again brings back the same data, so no
//! "medium may have changed" unit attention is established.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::sense::{Asc, Sense, SenseKey};

/// MEDIUM NOT PRESENT - TRAY OPEN (SPC-4 table 28): an ejected medium.
pub(crate) const MEDIUM_NOT_PRESENT_TRAY_OPEN: Asc = Asc::new(0x3A, 0x02);
/// MEDIUM REMOVAL PREVENTED (SPC-4 table 28).
pub(crate) const MEDIUM_REMOVAL_PREVENTED: Asc = Asc::new(0x53, 0x02);

/// Operation codes that do not access the medium, so they run without one:
/// device, LUN and mode information, reservations, task-set level state,
/// copy results, and the medium handling commands themselves.
pub(crate) fn works_without_medium(opcode: u8) -> bool {
    matches!(
        opcode,
        0x03 // REQUEST SENSE
        | 0x12 // INQUIRY
        | 0x15 | 0x55 // MODE SELECT(6/10)
        | 0x16 | 0x17 | 0x56 | 0x57 // RESERVE / RELEASE(6/10)
        | 0x1A | 0x5A // MODE SENSE(6/10)
        | 0x1B // START STOP UNIT
        | 0x1E // PREVENT ALLOW MEDIUM REMOVAL
        | 0x4C | 0x4D // LOG SELECT / LOG SENSE
        | 0x5E | 0x5F // PERSISTENT RESERVE IN / OUT
        | 0x84 // RECEIVE COPY RESULTS
        | 0xA0 // REPORT LUNS
        | 0xA3 | 0xA4 // MAINTENANCE IN / OUT (RSOC, RTPG, ...)
    )
}

#[derive(Debug)]
struct MediumState {
    /// Nexuses that hold a medium removal prevention.
    preventing: HashSet<u64>,
}

/// The medium of one logical unit.
#[derive(Debug)]
pub(crate) struct Medium {
    removable: bool,
    /// Whether the medium is in: read by every command without the lock,
    /// written under it.
    loaded: AtomicBool,
    state: Mutex<MediumState>,
}

impl Medium {
    pub(crate) fn new(removable: bool) -> Medium {
        Medium {
            removable,
            loaded: AtomicBool::new(true),
            state: Mutex::new(MediumState {
                preventing: HashSet::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, MediumState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn removable(&self) -> bool {
        self.removable
    }

    pub(crate) fn present(&self) -> bool {
        self.loaded.load(Ordering::Acquire)
    }

    /// NOT READY sense for a command that needs the medium while it is out.
    pub(crate) fn check(&self, opcode: u8) -> Result<(), Sense> {
        if works_without_medium(opcode) || self.present() {
            Ok(())
        } else {
            Err(Sense::new(
                SenseKey::NOT_READY,
                MEDIUM_NOT_PRESENT_TRAY_OPEN,
            ))
        }
    }

    /// PREVENT (`true`) or ALLOW (`false`) medium removal for `nexus`.
    pub(crate) fn set_prevent(&self, nexus: u64, prevent: bool) {
        let mut st = self.lock();
        if prevent {
            st.preventing.insert(nexus);
        } else {
            st.preventing.remove(&nexus);
        }
    }

    #[cfg(test)]
    fn removal_prevented(&self) -> bool {
        !self.lock().preventing.is_empty()
    }

    /// Logical unit reset: every prevention ends (SBC-3 §5.14).
    pub(crate) fn reset(&self) {
        self.lock().preventing.clear();
    }

    /// I_T nexus loss: that nexus's prevention ends.
    pub(crate) fn drop_nexus(&self, nexus: u64) {
        self.lock().preventing.remove(&nexus);
    }

    /// Ejects (`load == false`) or loads the medium, unless prevented.
    pub(crate) fn load_eject(&self, load: bool) -> Result<(), Sense> {
        let st = self.lock();
        if !st.preventing.is_empty() {
            return Err(Sense::illegal(MEDIUM_REMOVAL_PREVENTED));
        }
        self.loaded.store(load, Ordering::Release);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prevention_is_per_nexus_and_cleared_by_reset() {
        let m = Medium::new(true);
        m.set_prevent(1, true);
        m.set_prevent(2, true);
        assert_eq!(
            m.load_eject(false).map_err(|s| s.asc),
            Err(MEDIUM_REMOVAL_PREVENTED)
        );
        m.set_prevent(1, false);
        assert!(m.removal_prevented());
        m.drop_nexus(2);
        assert!(!m.removal_prevented());
        assert!(m.load_eject(false).is_ok());
        assert!(!m.present());
        m.set_prevent(3, true);
        // A load is refused too while prevented.
        assert!(m.load_eject(true).is_err());
        m.reset();
        assert!(m.load_eject(true).is_ok());
        assert!(m.present());
    }

    #[test]
    fn absent_medium_blocks_media_commands_only() {
        let m = Medium::new(true);
        assert!(m.load_eject(false).is_ok());
        for op in [0x00, 0x08, 0x28, 0x2A, 0x25, 0x9E, 0x35, 0x88, 0x48, 0x83] {
            let sense = m.check(op).expect_err("needs the medium");
            assert_eq!(
                (sense.key, sense.asc),
                (SenseKey::NOT_READY, MEDIUM_NOT_PRESENT_TRAY_OPEN)
            );
        }
        for op in [0x03, 0x12, 0x1A, 0x1B, 0x1E, 0xA0, 0xA3, 0x5E, 0x84] {
            assert!(m.check(op).is_ok(), "opcode {op:#04x}");
        }
    }
}
