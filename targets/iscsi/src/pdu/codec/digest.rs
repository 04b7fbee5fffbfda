//! Header and data digests: CRC32C over the covered bytes, as it goes on
//! the wire, and its check on receive.

use crate::pdu::error::PduError;

/// Length of a header or data digest on the wire.
pub const DIGEST_LEN: usize = 4;

/// The iSCSI digest of `bytes`: CRC32C (Castagnoli, RFC 7143 §13.1, RFC 3385),
/// hardware-accelerated where the CPU allows.
///
/// On the wire the digest goes least significant byte first: RFC 3720
/// Appendix B.4 gives 32 zero bytes a CRC of `aa 36 91 8a` = 0x8a9136aa, and
/// libiscsi and Linux store it the same way. See [`digest_wire_bytes`].
pub fn crc32c_digest(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

/// The 4 digest bytes of `covered` as they go on the wire (little-endian).
pub fn digest_wire_bytes(covered: &[u8]) -> [u8; DIGEST_LEN] {
    crc32c_digest(covered).to_le_bytes()
}

/// Checks a received digest (`wire`, 4 bytes) against the bytes it covers:
/// BHS + AHS for a header digest, data + padding for a data digest.
pub fn verify_digest(covered: &[u8], wire: &[u8]) -> Result<(), PduError> {
    if wire == digest_wire_bytes(covered) {
        Ok(())
    } else {
        Err(PduError::InvalidField("digest"))
    }
}
