//! LUN maps (LUN masking, SPC-4 §4.6.21 "access controls" in spirit): an
//! I_T nexus may see the target's logical units under LUN numbers of its
//! own, only some of them, and some read-only.
//!
//! A map only renames: the logical unit behind two mappings is one
//! object, so its reservations, unit attentions and task set are shared.
//! The front end translates the LUN of each command and task-management
//! request with [`LunMap::resolve`] before handing it over; the core then
//! answers an unmapped LUN as a missing one (INQUIRY peripheral qualifier
//! 011b, other commands LOGICAL UNIT NOT SUPPORTED), lists only the
//! mapped LUNs in REPORT LUNS (under their mapped numbers), and refuses
//! writes through a read-only mapping with WRITE PROTECTED, reporting WP
//! in the mode parameter header.

use std::collections::BTreeMap;

use crate::spc::MAX_LUN;

/// What a nexus addressing an unmapped LUN reaches: a number no logical
/// unit can have (above [`MAX_LUN`]).
pub const UNMAPPED_LUN: u64 = u64::MAX;
/// An unmapped LUN 0: like [`UNMAPPED_LUN`], but REPORT LUNS is still
/// answered through it (SPC-4 §6.33: LUN 0 always answers REPORT LUNS).
pub const UNMAPPED_LUN0: u64 = u64::MAX - 1;

/// One mapping: the target's LUN `lun` seen by the nexus, read-only or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mapped {
    /// The target's own LUN number (the logical unit's).
    pub lun: u64,
    /// Writes through this mapping are refused.
    pub read_only: bool,
}

/// The LUNs one nexus sees: its LUN number -> the target's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct LunMap {
    seen: BTreeMap<u64, Mapped>,
    /// The target's LUN -> the nexus's, for REPORT LUNS and read-only
    /// checks (a target LUN is mapped at most once per map).
    back: BTreeMap<u64, u64>,
}

/// Why a mapping cannot join a map.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LunMapError {
    /// The LUN number is beyond what the target can address.
    #[error("LUN {0} is out of range (0..={MAX_LUN})")]
    OutOfRange(u64),
    /// The nexus's LUN number is already taken.
    #[error("LUN {0} is mapped twice")]
    Duplicate(u64),
    /// The target's LUN is already mapped under another number.
    #[error("target LUN {source_lun} is already mapped as LUN {as_lun}")]
    SourceTwice {
        /// The target's LUN.
        source_lun: u64,
        /// The number it is already mapped as.
        as_lun: u64,
    },
}

impl LunMap {
    /// An empty map (the nexus sees no LUN).
    pub fn new() -> LunMap {
        LunMap::default()
    }

    /// Maps the target's LUN `source` as `lun`.
    pub fn insert(&mut self, lun: u64, source: u64, read_only: bool) -> Result<(), LunMapError> {
        for n in [lun, source] {
            if n > MAX_LUN {
                return Err(LunMapError::OutOfRange(n));
            }
        }
        if self.seen.contains_key(&lun) {
            return Err(LunMapError::Duplicate(lun));
        }
        if let Some(&as_lun) = self.back.get(&source) {
            return Err(LunMapError::SourceTwice {
                source_lun: source,
                as_lun,
            });
        }
        self.seen.insert(
            lun,
            Mapped {
                lun: source,
                read_only,
            },
        );
        self.back.insert(source, lun);
        Ok(())
    }

    /// The target's LUN that the nexus's `lun` addresses, or
    /// [`UNMAPPED_LUN`] / [`UNMAPPED_LUN0`].
    pub fn resolve(&self, lun: u64) -> u64 {
        match self.seen.get(&lun) {
            Some(m) => m.lun,
            None if lun == 0 => UNMAPPED_LUN0,
            None => UNMAPPED_LUN,
        }
    }

    /// The mapping of `lun` (the nexus's number), if any.
    pub fn get(&self, lun: u64) -> Option<Mapped> {
        self.seen.get(&lun).copied()
    }

    /// Whether the target's LUN `source` is mapped read-only.
    pub fn read_only(&self, source: u64) -> bool {
        self.back
            .get(&source)
            .and_then(|l| self.seen.get(l))
            .is_some_and(|m| m.read_only)
    }

    /// The nexus's LUN numbers of those of `target_luns` it sees, ascending.
    pub fn visible(&self, target_luns: &[u64]) -> Vec<u64> {
        let mut out: Vec<u64> = target_luns
            .iter()
            .filter_map(|l| self.back.get(l).copied())
            .collect();
        out.sort_unstable();
        out
    }

    /// Every mapping, by the nexus's LUN number.
    pub fn iter(&self) -> impl Iterator<Item = (u64, Mapped)> + '_ {
        self.seen.iter().map(|(k, v)| (*k, *v))
    }

    /// Whether nothing is mapped.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renames_hides_and_marks_read_only() {
        let mut m = LunMap::new();
        m.insert(0, 2, false).unwrap();
        m.insert(5, 0, true).unwrap();
        assert_eq!(m.resolve(0), 2);
        assert_eq!(m.resolve(5), 0);
        assert_eq!(m.resolve(1), UNMAPPED_LUN);
        assert!(m.read_only(0));
        assert!(!m.read_only(2));
        assert!(!m.read_only(1));
        assert_eq!(m.visible(&[0, 1, 2]), vec![0, 5]);
        assert_eq!(m.visible(&[0, 1]), vec![5]);
        let empty = LunMap::new();
        assert_eq!(empty.resolve(0), UNMAPPED_LUN0);
        assert!(empty.visible(&[0, 1]).is_empty());
    }

    #[test]
    fn refuses_duplicates_and_out_of_range() {
        let mut m = LunMap::new();
        m.insert(1, 1, false).unwrap();
        assert_eq!(m.insert(1, 2, false), Err(LunMapError::Duplicate(1)));
        assert_eq!(
            m.insert(2, 1, false),
            Err(LunMapError::SourceTwice {
                source_lun: 1,
                as_lun: 1
            })
        );
        assert_eq!(
            m.insert(MAX_LUN + 1, 0, false),
            Err(LunMapError::OutOfRange(MAX_LUN + 1))
        );
    }
}
