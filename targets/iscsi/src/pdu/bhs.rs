//! Checked, zero-copy view over the 48-byte Basic Header Segment
//! (RFC 7143 §11.2.1), plus the byte offsets of every BHS field.
//!
//! Guarantees: [`Bhs::new_checked`] is the only way to wrap a peer buffer and
//! rejects anything shorter than [`BHS_LEN`]; every accessor then reads a
//! fixed range inside those 48 bytes and never panics. Field ranges are named
//! consts below, grouped by PDU, with the RFC section that defines them.

use std::ops::Range;

use super::codes::Opcode;
use super::error::PduError;

/// Length of the Basic Header Segment.
pub const BHS_LEN: usize = 48;

// ---------------------------------------------------------------------------
// Fields common to every PDU (RFC 7143 §11.2.1).
// ---------------------------------------------------------------------------

/// Byte 0: reserved bit 7, I (immediate) bit 6, opcode bits 5..0 (§11.2.1.1, §11.2.1.2).
pub const OPCODE: usize = 0;
/// Byte 0 bit 6: immediate delivery (§11.2.1.1).
pub const IMMEDIATE_BIT: u8 = 0x40;
/// Byte 0 bits 5..0 (§11.2.1.2).
pub const OPCODE_MASK: u8 = 0x3f;
/// Byte 1: F bit and opcode-specific flags (§11.2.1.3).
pub const FLAGS: usize = 1;
/// Byte 1 bit 7: final PDU of a sequence (§11.2.1.3).
pub const FINAL_BIT: u8 = 0x80;
/// Byte 4: TotalAHSLength in 4-byte words (§11.2.1.4).
pub const TOTAL_AHS_LEN: usize = 4;
/// Bytes 5..8: DataSegmentLength, 24-bit big-endian, padding excluded (§11.2.1.5).
pub const DATA_SEGMENT_LEN: Range<usize> = 5..8;
/// Bytes 8..16: LUN or opcode-specific (§11.2.1.6).
pub const LUN: Range<usize> = 8..16;
/// Bytes 16..20: Initiator Task Tag (§11.2.1.8).
pub const ITT: Range<usize> = 16..20;

// Fields shared by most opcodes at the same place.

/// Bytes 20..24: Target Transfer Tag (NOP, Text, Data, R2T; §11.7.4, §11.8.2, §11.10.4, §11.18.2).
pub const TTT: Range<usize> = 20..24;
/// Bytes 24..28: CmdSN on initiator PDUs (§11.3.3).
pub const CMD_SN: Range<usize> = 24..28;
/// Bytes 28..32: ExpStatSN on initiator PDUs (§11.3.3).
pub const EXP_STAT_SN: Range<usize> = 28..32;
/// Bytes 24..28: StatSN on target PDUs (§11.4.4).
pub const STAT_SN: Range<usize> = 24..28;
/// Bytes 28..32: ExpCmdSN on target PDUs (§11.4.5).
pub const EXP_CMD_SN: Range<usize> = 28..32;
/// Bytes 32..36: MaxCmdSN on target PDUs (§11.4.5).
pub const MAX_CMD_SN: Range<usize> = 32..36;

/// SCSI Command (§11.3).
pub mod scsi_cmd {
    use std::ops::Range;
    /// Byte 1 bit 6: read (§11.3.1).
    pub const READ_BIT: u8 = 0x40;
    /// Byte 1 bit 5: write (§11.3.1).
    pub const WRITE_BIT: u8 = 0x20;
    /// Byte 1 bits 2..0: task attribute (§11.3.1).
    pub const ATTR_MASK: u8 = 0x07;
    /// Bytes 20..24: Expected Data Transfer Length (§11.3.4).
    pub const EXPECTED_DATA_LEN: Range<usize> = 20..24;
    /// Bytes 32..48: the first 16 CDB bytes (§11.3.5).
    pub const CDB: Range<usize> = 32..48;
}

/// SCSI Response (§11.4).
pub mod scsi_resp {
    use std::ops::Range;
    /// Byte 1 bit 4: bidirectional read residual overflow (§11.4.1).
    pub const BIDI_OVERFLOW_BIT: u8 = 0x10;
    /// Byte 1 bit 3: bidirectional read residual underflow (§11.4.1).
    pub const BIDI_UNDERFLOW_BIT: u8 = 0x08;
    /// Byte 1 bit 2: residual overflow (§11.4.1).
    pub const OVERFLOW_BIT: u8 = 0x04;
    /// Byte 1 bit 1: residual underflow (§11.4.1).
    pub const UNDERFLOW_BIT: u8 = 0x02;
    /// Byte 2: iSCSI response code (§11.4.3).
    pub const RESPONSE: usize = 2;
    /// Byte 3: SCSI status (§11.4.2).
    pub const STATUS: usize = 3;
    /// Bytes 20..24: SNACK Tag (§11.4.6).
    pub const SNACK_TAG: Range<usize> = 20..24;
    /// Bytes 36..40: ExpDataSN (§11.4.8).
    pub const EXP_DATA_SN: Range<usize> = 36..40;
    /// Bytes 40..44: Bidirectional Read Residual Count (§11.4.7).
    pub const BIDI_RESIDUAL: Range<usize> = 40..44;
    /// Bytes 44..48: Residual Count (§11.4.7).
    pub const RESIDUAL: Range<usize> = 44..48;
}

/// Task Management Function Request and Response (§11.5, §11.6).
pub mod tmf {
    use std::ops::Range;
    /// Byte 1 bits 6..0 of the request: function (§11.5.1).
    pub const FUNCTION_MASK: u8 = 0x7f;
    /// Bytes 20..24 of the request: Referenced Task Tag (§11.5.2).
    pub const REFERENCED_TAG: Range<usize> = 20..24;
    /// Bytes 32..36 of the request: RefCmdSN (§11.5.4).
    pub const REF_CMD_SN: Range<usize> = 32..36;
    /// Bytes 36..40 of the request: ExpDataSN (§11.5.5).
    pub const EXP_DATA_SN: Range<usize> = 36..40;
    /// Byte 2 of the response: response code (§11.6.1).
    pub const RESPONSE: usize = 2;
}

/// SCSI Data-Out and Data-In (§11.7).
pub mod data {
    use std::ops::Range;
    /// Data-In byte 1 bit 6: acknowledge (§11.7.2).
    pub const ACK_BIT: u8 = 0x40;
    /// Data-In byte 1 bit 2: residual overflow, valid only with S (§11.7.3).
    pub const OVERFLOW_BIT: u8 = 0x04;
    /// Data-In byte 1 bit 1: residual underflow, valid only with S (§11.7.3).
    pub const UNDERFLOW_BIT: u8 = 0x02;
    /// Data-In byte 1 bit 0: S, status present (§11.7.3).
    pub const STATUS_BIT: u8 = 0x01;
    /// Data-In byte 3: SCSI status, valid only with S (§11.7.3).
    pub const STATUS: usize = 3;
    /// Bytes 36..40: DataSN (§11.7.5).
    pub const DATA_SN: Range<usize> = 36..40;
    /// Bytes 40..44: Buffer Offset (§11.7.6).
    pub const BUFFER_OFFSET: Range<usize> = 40..44;
    /// Data-In bytes 44..48: Residual Count, valid only with S (§11.7.3).
    pub const RESIDUAL: Range<usize> = 44..48;
}

/// Ready To Transfer (§11.8).
pub mod r2t {
    use std::ops::Range;
    /// Bytes 36..40: R2TSN (§11.8.3).
    pub const R2T_SN: Range<usize> = 36..40;
    /// Bytes 40..44: Buffer Offset (§11.8.4).
    pub const BUFFER_OFFSET: Range<usize> = 40..44;
    /// Bytes 44..48: Desired Data Transfer Length (§11.8.5).
    pub const DESIRED_LEN: Range<usize> = 44..48;
}

/// Asynchronous Message (§11.9).
pub mod async_msg {
    use std::ops::Range;
    /// Byte 36: AsyncEvent (§11.9.1).
    pub const EVENT: usize = 36;
    /// Byte 37: AsyncVCode (§11.9.2).
    pub const VCODE: usize = 37;
    /// Bytes 38..40: Parameter1 (§11.9.1).
    pub const PARAM1: Range<usize> = 38..40;
    /// Bytes 40..42: Parameter2 (§11.9.1).
    pub const PARAM2: Range<usize> = 40..42;
    /// Bytes 42..44: Parameter3 (§11.9.1).
    pub const PARAM3: Range<usize> = 42..44;
}

/// Text Request and Response (§11.10, §11.11).
pub mod text {
    /// Byte 1 bit 6: C, text continues in the next PDU (§11.10.2).
    pub const CONTINUE_BIT: u8 = 0x40;
}

/// Login Request and Response (§11.12, §11.13).
pub mod login {
    use std::ops::Range;
    /// Byte 1 bit 7: T, transit to NSG (§11.12.1).
    pub const TRANSIT_BIT: u8 = 0x80;
    /// Byte 1 bit 6: C, text continues in the next PDU (§11.12.2).
    pub const CONTINUE_BIT: u8 = 0x40;
    /// Byte 1 bits 3..2: CSG (§11.12.3).
    pub const CSG_SHIFT: u32 = 2;
    /// Byte 1 bits 1..0: NSG (§11.12.3).
    pub const STAGE_MASK: u8 = 0x03;
    /// Byte 2: Version-max (§11.12.4).
    pub const VERSION_MAX: usize = 2;
    /// Byte 3: Version-min (request) or Version-active (response) (§11.12.4, §11.13.2).
    pub const VERSION_MIN: usize = 3;
    /// Bytes 8..14: ISID (§11.12.5).
    pub const ISID: Range<usize> = 8..14;
    /// Bytes 14..16: TSIH (§11.12.6).
    pub const TSIH: Range<usize> = 14..16;
    /// Request bytes 20..22: CID (§11.12.7).
    pub const CID: Range<usize> = 20..22;
    /// Response byte 36: Status-Class (§11.13.5).
    pub const STATUS_CLASS: usize = 36;
    /// Response byte 37: Status-Detail (§11.13.5).
    pub const STATUS_DETAIL: usize = 37;
}

/// Logout Request and Response (§11.14, §11.15).
pub mod logout {
    use std::ops::Range;
    /// Request byte 1 bits 6..0: reason code (§11.14.1).
    pub const REASON_MASK: u8 = 0x7f;
    /// Request bytes 20..22: CID (§11.14.3).
    pub const CID: Range<usize> = 20..22;
    /// Response byte 2: response code (§11.15.1).
    pub const RESPONSE: usize = 2;
    /// Response bytes 40..42: Time2Wait (§11.15.2).
    pub const TIME2WAIT: Range<usize> = 40..42;
    /// Response bytes 42..44: Time2Retain (§11.15.3).
    pub const TIME2RETAIN: Range<usize> = 42..44;
}

/// SNACK Request (§11.16).
pub mod snack {
    use std::ops::Range;
    /// Byte 1 bits 3..0: SNACK type (§11.16.1).
    pub const TYPE_MASK: u8 = 0x0f;
    /// Bytes 40..44: BegRun (§11.16.4).
    pub const BEG_RUN: Range<usize> = 40..44;
    /// Bytes 44..48: RunLength (§11.16.5).
    pub const RUN_LENGTH: Range<usize> = 44..48;
}

/// Reject (§11.17).
pub mod reject {
    use std::ops::Range;
    /// Byte 2: reason (§11.17.1).
    pub const REASON: usize = 2;
    /// Bytes 36..40: DataSN/R2TSN (§11.17.2).
    pub const DATA_SN: Range<usize> = 36..40;
}

/// A checked view over a Basic Header Segment.
///
/// The buffer may be longer than 48 bytes (e.g. a whole receive buffer);
/// only the first [`BHS_LEN`] bytes are read or written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bhs<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> Bhs<T> {
    /// Wraps `buf` after checking it holds at least a full BHS.
    pub fn new_checked(buf: T) -> Result<Self, PduError> {
        let len = buf.as_ref().len();
        if len < BHS_LEN {
            return Err(PduError::Incomplete(BHS_LEN - len));
        }
        Ok(Bhs { buf })
    }

    /// Gives the wrapped buffer back.
    pub fn into_inner(self) -> T {
        self.buf
    }

    /// The 48 header bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.buf.as_ref().get(..BHS_LEN).unwrap_or_default()
    }

    /// Opcode, the low 6 bits of byte 0 (§11.2.1.2).
    pub fn opcode(&self) -> Opcode {
        Opcode(self.u8_at(OPCODE) & OPCODE_MASK)
    }

    /// I bit, byte 0 bit 6 (§11.2.1.1).
    pub fn immediate(&self) -> bool {
        self.u8_at(OPCODE) & IMMEDIATE_BIT != 0
    }

    /// The whole flags byte (byte 1).
    pub fn flags(&self) -> u8 {
        self.u8_at(FLAGS)
    }

    /// F bit, byte 1 bit 7 (§11.2.1.3).
    pub fn final_bit(&self) -> bool {
        self.flags() & FINAL_BIT != 0
    }

    /// Length of the AHS that follows, in bytes (byte 4 × 4, §11.2.1.4).
    pub fn total_ahs_len_bytes(&self) -> usize {
        usize::from(self.u8_at(TOTAL_AHS_LEN)) * 4
    }

    /// DataSegmentLength, without padding (§11.2.1.5).
    pub fn data_segment_len(&self) -> u32 {
        let [a, b, c] = self.array::<3>(DATA_SEGMENT_LEN);
        u32::from_be_bytes([0, a, b, c])
    }

    /// The LUN field as it is on the wire (§11.2.1.6); see `decode_lun`.
    pub fn lun_raw(&self) -> u64 {
        self.u64_at(LUN)
    }

    /// Initiator Task Tag (§11.2.1.8).
    pub fn itt(&self) -> u32 {
        self.u32_at(ITT)
    }

    /// One byte at `at`.
    pub fn u8_at(&self, at: usize) -> u8 {
        self.as_bytes().get(at).copied().unwrap_or(0)
    }

    /// A big-endian u16 at `range` (two bytes).
    pub fn u16_at(&self, range: Range<usize>) -> u16 {
        u16::from_be_bytes(self.array(range))
    }

    /// A big-endian u32 at `range` (four bytes).
    pub fn u32_at(&self, range: Range<usize>) -> u32 {
        u32::from_be_bytes(self.array(range))
    }

    /// A big-endian u64 at `range` (eight bytes).
    pub fn u64_at(&self, range: Range<usize>) -> u64 {
        u64::from_be_bytes(self.array(range))
    }

    /// The bytes at `range` (empty if the range is not inside the BHS).
    pub fn bytes_at(&self, range: Range<usize>) -> &[u8] {
        self.as_bytes().get(range).unwrap_or_default()
    }

    /// Copies `range` into an array; zeros if the range does not fit, which
    /// cannot happen with the consts of this module since the length is
    /// checked at construction.
    fn array<const N: usize>(&self, range: Range<usize>) -> [u8; N] {
        self.bytes_at(range).try_into().unwrap_or([0; N])
    }
}

impl<'a> Bhs<&'a [u8; BHS_LEN]> {
    /// Wraps an exact BHS array; cannot fail.
    pub fn from_array(buf: &'a [u8; BHS_LEN]) -> Self {
        Bhs { buf }
    }
}

impl Bhs<[u8; BHS_LEN]> {
    /// An all-zero BHS to fill in with the setters (the encoders start here).
    pub fn zeroed() -> Self {
        Bhs { buf: [0; BHS_LEN] }
    }

    /// The finished 48 bytes.
    pub fn into_array(self) -> [u8; BHS_LEN] {
        self.buf
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Bhs<T> {
    fn bytes_mut(&mut self) -> &mut [u8] {
        self.buf.as_mut().get_mut(..BHS_LEN).unwrap_or_default()
    }

    /// Sets byte 0: opcode and I bit.
    pub fn set_opcode(&mut self, opcode: Opcode, immediate: bool) {
        let i = if immediate { IMMEDIATE_BIT } else { 0 };
        self.set_u8(OPCODE, (opcode.0 & OPCODE_MASK) | i);
    }

    /// Sets the whole flags byte (byte 1).
    pub fn set_flags(&mut self, flags: u8) {
        self.set_u8(FLAGS, flags);
    }

    /// Sets TotalAHSLength from a byte count, which must be a multiple of 4
    /// and at most 1020 (larger values saturate at 255 words).
    pub fn set_total_ahs_len_bytes(&mut self, bytes: usize) {
        self.set_u8(TOTAL_AHS_LEN, u8::try_from(bytes / 4).unwrap_or(u8::MAX));
    }

    /// Sets DataSegmentLength (only the low 24 bits are representable).
    pub fn set_data_segment_len(&mut self, len: u32) {
        let [_, a, b, c] = len.to_be_bytes();
        self.set_bytes(DATA_SEGMENT_LEN, &[a, b, c]);
    }

    /// Sets the LUN field as it goes on the wire; see `encode_lun`.
    pub fn set_lun_raw(&mut self, lun: u64) {
        self.set_u64(LUN, lun);
    }

    /// Sets the Initiator Task Tag.
    pub fn set_itt(&mut self, itt: u32) {
        self.set_u32(ITT, itt);
    }

    /// Sets one byte.
    pub fn set_u8(&mut self, at: usize, value: u8) {
        if let Some(b) = self.bytes_mut().get_mut(at) {
            *b = value;
        }
    }

    /// Sets a big-endian u16.
    pub fn set_u16(&mut self, range: Range<usize>, value: u16) {
        self.set_bytes(range, &value.to_be_bytes());
    }

    /// Sets a big-endian u32.
    pub fn set_u32(&mut self, range: Range<usize>, value: u32) {
        self.set_bytes(range, &value.to_be_bytes());
    }

    /// Sets a big-endian u64.
    pub fn set_u64(&mut self, range: Range<usize>, value: u64) {
        self.set_bytes(range, &value.to_be_bytes());
    }

    /// Copies `value` into `range`; nothing is written unless the lengths match.
    pub fn set_bytes(&mut self, range: Range<usize>, value: &[u8]) {
        if let Some(dst) = self.bytes_mut().get_mut(range) {
            if dst.len() == value.len() {
                dst.copy_from_slice(value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_buffer_is_incomplete() {
        assert_eq!(
            Bhs::new_checked(&[0u8; 47][..]),
            Err(PduError::Incomplete(1))
        );
        assert_eq!(Bhs::new_checked(&[][..]), Err(PduError::Incomplete(48)));
        assert!(Bhs::new_checked(&[0u8; 60][..]).is_ok());
    }

    #[test]
    fn common_fields() {
        let mut b = [0u8; 48];
        b[0] = 0xc1; // reserved bit, I, SCSI Command
        b[1] = 0x80;
        b[4] = 3;
        b[5..8].copy_from_slice(&[0x01, 0x02, 0x03]);
        b[8..16].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        b[16..20].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        let v = Bhs::from_array(&b);
        assert_eq!(v.opcode(), Opcode::SCSI_COMMAND);
        assert!(v.immediate());
        assert!(v.final_bit());
        assert_eq!(v.total_ahs_len_bytes(), 12);
        assert_eq!(v.data_segment_len(), 0x010203);
        assert_eq!(v.lun_raw(), 0x0102_0304_0506_0708);
        assert_eq!(v.itt(), 0xdead_beef);
    }

    #[test]
    fn setters_write_the_same_fields() {
        let mut v = Bhs::zeroed();
        v.set_opcode(Opcode::LOGIN_REQUEST, true);
        v.set_flags(0x87);
        v.set_total_ahs_len_bytes(8);
        v.set_data_segment_len(0x00ab_cdef);
        v.set_lun_raw(0x0001_0000_0000_0000);
        v.set_itt(7);
        let b = v.into_array();
        assert_eq!(&b[..8], &[0x43, 0x87, 0, 0, 2, 0xab, 0xcd, 0xef]);
        assert_eq!(&b[8..16], &[0, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&b[16..20], &[0, 0, 0, 7]);
    }

    #[test]
    fn mismatched_set_is_ignored() {
        let mut v = Bhs::zeroed();
        v.set_bytes(ITT, &[1, 2, 3]);
        v.set_bytes(44..52, &[1; 8]);
        assert_eq!(v.into_array(), [0; 48]);
    }
}
