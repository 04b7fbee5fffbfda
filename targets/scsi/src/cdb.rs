//! Checked CDB access (SPC-4 §4.2).
//!
//! A [`Cdb`] is a view of the peer's CDB bytes that never panics: every
//! accessor reads through `get`, and a byte past the end reads as zero. The
//! dispatcher has already checked the CDB length against the command table
//! before a handler sees it, so that fallback never changes a decoded value
//! in practice; it only keeps the code panic-free by construction.
//!
//! [`check_usage`] validates reserved and unsupported bits against the same
//! CDB usage data that REPORT SUPPORTED OPERATION CODES reports.

// Parses what a peer sent (or a persisted file): no indexing that could
// panic (tests may index).
#![deny(clippy::indexing_slicing)]

use crate::sense::Sense;

/// A read-only, bounds-safe view of a CDB.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cdb<'a>(&'a [u8]);

impl<'a> Cdb<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Cdb(bytes)
    }

    pub(crate) fn opcode(&self) -> u8 {
        self.byte(0)
    }

    pub(crate) fn byte(&self, i: usize) -> u8 {
        self.0.get(i).copied().unwrap_or(0)
    }

    /// Whether any bit of `mask` is set in byte `i`.
    pub(crate) fn bit(&self, i: usize, mask: u8) -> bool {
        self.byte(i) & mask != 0
    }

    fn be<const N: usize>(&self, i: usize) -> [u8; N] {
        let mut out = [0u8; N];
        for (k, b) in out.iter_mut().enumerate() {
            *b = self.byte(i + k);
        }
        out
    }

    pub(crate) fn be16(&self, i: usize) -> u16 {
        u16::from_be_bytes(self.be::<2>(i))
    }

    pub(crate) fn be32(&self, i: usize) -> u32 {
        u32::from_be_bytes(self.be::<4>(i))
    }

    pub(crate) fn be64(&self, i: usize) -> u64 {
        u64::from_be_bytes(self.be::<8>(i))
    }
}

/// Highest set bit of a non-zero byte.
pub(crate) fn top_bit(b: u8) -> u8 {
    7u8.saturating_sub(b.leading_zeros() as u8)
}

/// Control byte bits this core rejects (SAM-5 §5.2): NACA (we do not
/// support ACA) and the obsolete FLAG and LINK bits. Vendor bits 7..6 are
/// ignored.
const CONTROL_REJECT: u8 = 0x07;

/// Checks `cdb` against the command's CDB usage data (SPC-4 §6.35.3).
///
/// Byte 0 is the operation code; `sa_mask` lists the bits of byte 1 that
/// hold the service action (already matched by the lookup). Any other bit
/// set where the usage data has a zero is a reserved or unsupported field:
/// ILLEGAL REQUEST, INVALID FIELD IN CDB pointing at its highest bit.
pub(crate) fn check_usage(cdb: &[u8], usage: &[u8], sa_mask: u8) -> Result<(), Sense> {
    if cdb.len() < usage.len() {
        // The CDB is shorter than the command: point past its end.
        return Err(Sense::invalid_cdb_field(cdb.len(), None));
    }
    let last = usage.len().saturating_sub(1);
    // The common case first, in one pass with no branch a byte: no bit
    // outside the usage data between the opcode and the control byte
    // (service action bits count as outside here) and a clean control
    // byte. Otherwise the loop below decides and names the bad field.
    let stray = cdb
        .iter()
        .zip(usage)
        .take(last)
        .skip(1)
        .fold(0u8, |acc, (&have, &allowed)| acc | (have & !allowed));
    let control = cdb.get(last).copied().unwrap_or(0) & CONTROL_REJECT;
    if stray == 0 && (last == 0 || control == 0) {
        return Ok(());
    }
    for (i, (&have, &allowed)) in cdb.iter().zip(usage).enumerate().take(last).skip(1) {
        let allowed = if i == 1 { allowed | sa_mask } else { allowed };
        let bad = have & !allowed;
        if bad != 0 {
            return Err(Sense::invalid_cdb_field(i, Some(top_bit(bad))));
        }
    }
    if last > 0 && control != 0 {
        return Err(Sense::invalid_cdb_field(last, Some(top_bit(control))));
    }
    Ok(())
}

/// The data path's commands, by opcode: the ones the reactor may run
/// itself (`workers::run_inline`) or on its io_uring (`ring`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DataPathOp {
    /// READ (6/10/12/16).
    Read,
    /// WRITE (6/10/12/16).
    Write,
    /// SYNCHRONIZE CACHE (10/16).
    Sync,
    TestUnitReady,
}

pub(crate) fn data_path_op(cdb: &[u8]) -> Option<DataPathOp> {
    match cdb.first()? {
        0x08 | 0x28 | 0xA8 | 0x88 => Some(DataPathOp::Read),
        0x0A | 0x2A | 0xAA | 0x8A => Some(DataPathOp::Write),
        0x35 | 0x91 => Some(DataPathOp::Sync),
        0x00 => Some(DataPathOp::TestUnitReady),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sense::{Asc, FieldPointer};

    #[test]
    fn accessors_are_big_endian_and_total() {
        let c = Cdb::new(&[0x28, 0, 0x01, 0x02, 0x03, 0x04, 0, 0, 0x08, 0]);
        assert_eq!(c.opcode(), 0x28);
        assert_eq!(c.be32(2), 0x0102_0304);
        assert_eq!(c.be16(7), 0x0008);
        // Past the end reads as zero instead of panicking.
        assert_eq!(c.be64(6), 0x0000_0800_0000_0000);
        assert_eq!(c.byte(100), 0);
        assert!(!c.bit(100, 0xFF));
    }

    #[test]
    fn usage_check_points_at_offending_bit() {
        let usage = [0x28, 0x18, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0xFF, 0xFF, 0x00];
        let ok = [0x28, 0x18, 1, 2, 3, 4, 0, 0, 1, 0];
        assert!(check_usage(&ok, &usage, 0).is_ok());
        // RDPROTECT=3 in bits 6..5.
        let bad = [0x28, 0x60, 0, 0, 0, 0, 0, 0, 1, 0];
        let err = check_usage(&bad, &usage, 0).expect_err("must be refused");
        assert_eq!(err.asc, Asc::INVALID_FIELD_IN_CDB);
        assert_eq!(
            err.field,
            Some(FieldPointer {
                in_cdb: true,
                byte: 1,
                bit: Some(6)
            })
        );
        // NACA in the control byte.
        let naca = [0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0x04];
        let err = check_usage(&naca, &usage, 0).expect_err("must be refused");
        assert_eq!(err.field.map(|f| (f.byte, f.bit)), Some((9, Some(2))));
        // Vendor bits are fine; so are extra bytes past the CDB length.
        let vendor = [0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0xC0, 0xFF, 0xFF];
        assert!(check_usage(&vendor, &usage, 0).is_ok());
    }

    #[test]
    fn usage_check_short_cdb_and_service_action() {
        let usage = [0x9E, 0x10, 0, 0];
        let err = check_usage(&[0x9E, 0x10], &usage, 0x1F).expect_err("must be refused");
        assert_eq!(err.field.map(|f| f.byte), Some(2));
        assert!(check_usage(&[0x9E, 0x10, 0, 0], &usage, 0x1F).is_ok());
        let err = check_usage(&[0x9E, 0x30, 0, 0], &usage, 0x1F).expect_err("must be refused");
        assert_eq!(err.field.map(|f| (f.byte, f.bit)), Some((1, Some(5))));
    }

    #[test]
    fn top_bit_values() {
        assert_eq!(top_bit(0x01), 0);
        assert_eq!(top_bit(0x80), 7);
        assert_eq!(top_bit(0x18), 4);
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn usage_check_never_panics_and_points_inside(
                cdb in proptest::collection::vec(any::<u8>(), 0..40),
                usage in proptest::collection::vec(any::<u8>(), 0..20),
                sa_mask: u8,
            ) {
                if let Err(sense) = check_usage(&cdb, &usage, sa_mask) {
                    let field = sense.field.map(|f| usize::from(f.byte));
                    prop_assert!(field.is_some_and(|b| b <= usage.len()));
                }
            }

            #[test]
            fn accessors_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..20), at in 0usize..64) {
                let c = Cdb::new(&bytes);
                let _ = (c.byte(at), c.be16(at), c.be32(at), c.be64(at), c.bit(at, 0xFF));
            }
        }
    }
}
