//! The SAM LUN field: raw 8 wire bytes to and from a LUN number.

/// What [`decode_lun`] returns for an address it does not support; no
/// configured LUN ever has this number.
pub const INVALID_LUN: u64 = u64::MAX;
/// Largest LUN number [`encode_lun`] can express (flat space addressing).
pub const MAX_LUN: u64 = 0x3fff;

/// Turns a raw 8-byte LUN field into a LUN number (SAM-5 §4.7).
///
/// Understands single-level peripheral device addressing (00b, bus 0) and
/// flat space addressing (01b). Every other form (multi-level, other buses,
/// extended addressing) gives [`INVALID_LUN`], which matches no LUN.
pub fn decode_lun(raw: u64) -> u64 {
    let [b0, b1, rest @ ..] = raw.to_be_bytes();
    if rest != [0; 6] {
        return INVALID_LUN;
    }
    match b0 >> 6 {
        0b00 if b0 == 0 => u64::from(b1),
        0b01 => (u64::from(b0 & 0x3f) << 8) | u64::from(b1),
        _ => INVALID_LUN,
    }
}

/// Turns a LUN number into the raw 8-byte LUN field (SAM-5 §4.7): peripheral
/// device addressing below 256, flat space addressing up to [`MAX_LUN`].
/// Larger numbers are not addressable and give [`INVALID_LUN`] (all ones).
pub fn encode_lun(lun: u64) -> u64 {
    match lun {
        0..=0xff => lun << 48,
        0x100..=MAX_LUN => (0x4000 | lun) << 48,
        _ => INVALID_LUN,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lun_forms() {
        assert_eq!(encode_lun(0), 0);
        assert_eq!(encode_lun(5), 0x0005_0000_0000_0000);
        assert_eq!(encode_lun(0x100), 0x4100_0000_0000_0000);
        assert_eq!(encode_lun(0x3fff), 0x7fff_0000_0000_0000);
        assert_eq!(encode_lun(0x4000), INVALID_LUN);
        // Flat space for a small LUN is valid too.
        assert_eq!(decode_lun(0x4005_0000_0000_0000), 5);
        // Peripheral addressing on another bus, multi-level, extended: unsupported.
        assert_eq!(decode_lun(0x0105_0000_0000_0000), INVALID_LUN);
        assert_eq!(decode_lun(0x0005_0001_0000_0000), INVALID_LUN);
        assert_eq!(decode_lun(0x0000_0000_0000_0005), INVALID_LUN);
        assert_eq!(decode_lun(0xd200_0001_0000_0000), INVALID_LUN);
        assert_eq!(decode_lun(INVALID_LUN), INVALID_LUN);
    }
}
