//! Sense data (SPC-4 §4.5): one builder, two wire formats.
//!
//! Every error the SCSI core reports leaves as a [`Sense`] and is encoded
//! here, in fixed format (70h, SPC-4 §4.5.3) or descriptor format (72h,
//! SPC-4 §4.5.2) depending on the D_SENSE bit of the control mode page.
//! Backstore errors are mapped to sense data in exactly one place:
//! `impl From<BackstoreError> for Sense`.

use rustgt_backstore::BackstoreError;

/// Sense key (SPC-4 §4.5.6, table 27). Open: any 4-bit value is representable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SenseKey(pub u8);

impl SenseKey {
    /// 0h: no error to report; REQUEST SENSE returns it when nothing is pending.
    pub const NO_SENSE: SenseKey = SenseKey(0x0);
    /// 1h: the command succeeded after recovery; this core never reports it.
    pub const RECOVERED_ERROR: SenseKey = SenseKey(0x1);
    /// 2h: the logical unit cannot be accessed now (medium removed, a
    /// sanitize in progress, an ALUA state transition, see [`Asc`]).
    pub const NOT_READY: SenseKey = SenseKey(0x2);
    /// 3h: a read, write or flush of the store failed with an I/O error, or
    /// a SANITIZE failed.
    pub const MEDIUM_ERROR: SenseKey = SenseKey(0x3);
    /// 4h: the target failed, not the command: a handler that panicked, an
    /// APTPL file that could not be saved, a backstore configuration or I/O
    /// error it cannot attribute to a read or a write.
    pub const HARDWARE_ERROR: SenseKey = SenseKey(0x4);
    /// 5h: the CDB or its parameter list is invalid, or asks for something
    /// this LU does not support.
    pub const ILLEGAL_REQUEST: SenseKey = SenseKey(0x5);
    /// 6h: a unit attention condition (reset, changed parameters or
    /// capacity, reservations): reported once, to the nexus it was
    /// established for, in place of running one of its commands.
    pub const UNIT_ATTENTION: SenseKey = SenseKey(0x6);
    /// 7h: a write to a write-protected LU (read-only store, SWP bit) or a
    /// thin store out of space.
    pub const DATA_PROTECT: SenseKey = SenseKey(0x7);
    /// Bh: the target aborted the command (a tag already in use, an iSCSI
    /// data sequence or digest error); the initiator may retry it.
    pub const ABORTED_COMMAND: SenseKey = SenseKey(0xB);
    /// Eh: COMPARE AND WRITE or VERIFY (BYTCHK=01b) found different data;
    /// the INFORMATION field holds the offset of the first differing byte
    /// in the Data-Out buffer.
    pub const MISCOMPARE: SenseKey = SenseKey(0xE);
}

/// Additional sense code and qualifier (SPC-4 §4.5.6, table 28). Open type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Asc {
    /// ADDITIONAL SENSE CODE (byte 12 of fixed-format sense data).
    pub asc: u8,
    /// ADDITIONAL SENSE CODE QUALIFIER (byte 13 of fixed-format sense data).
    pub ascq: u8,
}

impl Asc {
    /// The code `asc`/`ascq`, for codes without a named constant.
    pub const fn new(asc: u8, ascq: u8) -> Asc {
        Asc { asc, ascq }
    }

    /// 00h/00h: no additional information (with NO SENSE from REQUEST SENSE,
    /// or with COPY ABORTED for an EXTENDED COPY segment whose LBA range a
    /// copy target would refuse).
    pub const NO_ADDITIONAL_SENSE: Asc = Asc::new(0x00, 0x00);
    /// 04h/00h: LOGICAL UNIT NOT READY, CAUSE NOT REPORTABLE; this core
    /// reports more specific causes.
    pub const LOGICAL_UNIT_NOT_READY: Asc = Asc::new(0x04, 0x00);
    /// LOGICAL UNIT NOT ACCESSIBLE, ASYMMETRIC ACCESS STATE TRANSITION.
    pub const ASYMMETRIC_ACCESS_STATE_TRANSITION: Asc = Asc::new(0x04, 0x0A);
    /// LOGICAL UNIT NOT ACCESSIBLE, TARGET PORT IN STANDBY STATE.
    pub const TARGET_PORT_IN_STANDBY_STATE: Asc = Asc::new(0x04, 0x0B);
    /// LOGICAL UNIT NOT ACCESSIBLE, TARGET PORT IN UNAVAILABLE STATE.
    pub const TARGET_PORT_IN_UNAVAILABLE_STATE: Asc = Asc::new(0x04, 0x0C);
    /// 0Ch/00h: WRITE ERROR, with MEDIUM ERROR: a backstore write or flush
    /// failed with an I/O error other than out of space.
    pub const WRITE_ERROR: Asc = Asc::new(0x0C, 0x00);
    /// iSCSI: unsolicited data where none was allowed (RFC 7143 §11.4.7.2).
    pub const UNEXPECTED_UNSOLICITED_DATA: Asc = Asc::new(0x0C, 0x0C);
    /// iSCSI: an incorrect amount of (unsolicited) data (RFC 7143
    /// §11.4.7.2; SPC-4's name for the code).
    pub const NOT_ENOUGH_UNSOLICITED_DATA: Asc = Asc::new(0x0C, 0x0D);
    /// 11h/00h: UNRECOVERED READ ERROR, with MEDIUM ERROR: a backstore read failed.
    pub const UNRECOVERED_READ_ERROR: Asc = Asc::new(0x11, 0x00);
    /// 1Ah/00h: PARAMETER LIST LENGTH ERROR: the PARAMETER LIST LENGTH (or
    /// the Data-Out) does not fit the list the command requires, e.g. shorter
    /// than its header or than the lengths the header announces.
    pub const PARAMETER_LIST_LENGTH_ERROR: Asc = Asc::new(0x1A, 0x00);
    /// 1Dh/00h: MISCOMPARE DURING VERIFY OPERATION, with MISCOMPARE.
    pub const MISCOMPARE_DURING_VERIFY: Asc = Asc::new(0x1D, 0x00);
    /// 20h/00h: INVALID COMMAND OPERATION CODE: an opcode or service action
    /// not in the command table, or one the LU's backstore does not support.
    pub const INVALID_COMMAND_OPERATION_CODE: Asc = Asc::new(0x20, 0x00);
    /// 21h/00h: LOGICAL BLOCK ADDRESS OUT OF RANGE: the LBA range reaches past
    /// the last block of the LU.
    pub const LBA_OUT_OF_RANGE: Asc = Asc::new(0x21, 0x00);
    /// 24h/00h: INVALID FIELD IN CDB, with a field pointer to the byte (and
    /// bit) at fault ([`Sense::invalid_cdb_field`]).
    pub const INVALID_FIELD_IN_CDB: Asc = Asc::new(0x24, 0x00);
    /// 25h/00h: LOGICAL UNIT NOT SUPPORTED: the command addresses a LUN that is
    /// not configured (and is not one of the few commands that need no LU).
    pub const LOGICAL_UNIT_NOT_SUPPORTED: Asc = Asc::new(0x25, 0x00);
    /// 26h/00h: INVALID FIELD IN PARAMETER LIST, with a field pointer into the
    /// data-out buffer ([`Sense::invalid_param_field`]).
    pub const INVALID_FIELD_IN_PARAMETER_LIST: Asc = Asc::new(0x26, 0x00);
    /// 26h/04h: INVALID RELEASE OF PERSISTENT RESERVATION: PERSISTENT RESERVE
    /// OUT RELEASE with a type other than the reservation's.
    pub const INVALID_RELEASE_OF_PERSISTENT_RESERVATION: Asc = Asc::new(0x26, 0x04);
    /// 27h/00h: WRITE PROTECTED, with DATA PROTECT: the store is read-only.
    pub const WRITE_PROTECTED: Asc = Asc::new(0x27, 0x00);
    /// 27h/02h: WRITE PROTECTED, SOFTWARE WRITE PROTECTED, with DATA PROTECT:
    /// the control mode page's SWP bit is set.
    pub const SOFTWARE_WRITE_PROTECTED: Asc = Asc::new(0x27, 0x02);
    /// A thin store could not allocate the blocks a write needs (SBC-3
    /// §4.7.3.6, resource exhaustion): with DATA PROTECT.
    pub const SPACE_ALLOCATION_FAILED_WRITE_PROTECT: Asc = Asc::new(0x27, 0x07);
    /// 29h/00h: POWER ON, RESET, OR BUS DEVICE RESET OCCURRED (unit
    /// attention); this core establishes the more specific 29h codes.
    pub const POWER_ON_RESET: Asc = Asc::new(0x29, 0x00);
    /// 29h/01h: POWER ON OCCURRED: the unit attention of a TARGET COLD RESET.
    pub const POWER_ON_OCCURRED: Asc = Asc::new(0x29, 0x01);
    /// 29h/02h: SCSI BUS RESET OCCURRED: the unit attention of a TARGET WARM
    /// RESET.
    pub const SCSI_BUS_RESET_OCCURRED: Asc = Asc::new(0x29, 0x02);
    /// 29h/03h: BUS DEVICE RESET FUNCTION OCCURRED: the unit attention of a
    /// LOGICAL UNIT RESET.
    pub const BUS_DEVICE_RESET_FUNCTION_OCCURRED: Asc = Asc::new(0x29, 0x03);
    /// 29h/07h: I_T NEXUS LOSS OCCURRED (unit attention); not established:
    /// a lost nexus's unit attentions are dropped with it, and a new
    /// session starts with none.
    pub const I_T_NEXUS_LOSS_OCCURRED: Asc = Asc::new(0x29, 0x07);
    /// 2Ah/01h: MODE PARAMETERS CHANGED: unit attention for the other known
    /// nexuses after a MODE SELECT changed the LU's mode parameters.
    pub const MODE_PARAMETERS_CHANGED: Asc = Asc::new(0x2A, 0x01);
    /// ASYMMETRIC ACCESS STATE CHANGED (SPC-4 §5.16.2.5).
    pub const ASYMMETRIC_ACCESS_STATE_CHANGED: Asc = Asc::new(0x2A, 0x06);
    /// 2Ah/09h: CAPACITY DATA HAS CHANGED: unit attention for every known
    /// nexus when the LU's store changed size
    /// ([`ScsiTarget::capacity_changed`](crate::ScsiTarget::capacity_changed)).
    pub const CAPACITY_DATA_HAS_CHANGED: Asc = Asc::new(0x2A, 0x09);
    /// 2Ah/03h: RESERVATIONS PREEMPTED: unit attention for the other
    /// registrants when PERSISTENT RESERVE OUT CLEAR removes every
    /// registration and the reservation.
    pub const RESERVATIONS_PREEMPTED: Asc = Asc::new(0x2A, 0x03);
    /// 2Ah/04h: RESERVATIONS RELEASED: unit attention for the other
    /// registrants when a registrants-only or all-registrants reservation is
    /// released (or its holder unregisters), or a PREEMPT changes its type.
    pub const RESERVATIONS_RELEASED: Asc = Asc::new(0x2A, 0x04);
    /// 2Ah/05h: REGISTRATIONS PREEMPTED: unit attention for the nexuses whose
    /// registration a PREEMPT (or PREEMPT AND ABORT) removed.
    pub const REGISTRATIONS_PREEMPTED: Asc = Asc::new(0x2A, 0x05);
    /// 2Fh/00h: COMMANDS CLEARED BY ANOTHER INITIATOR: unit attention for the
    /// nexuses whose tasks another nexus aborted (CLEAR TASK SET, TAS=0).
    pub const COMMANDS_CLEARED_BY_ANOTHER_INITIATOR: Asc = Asc::new(0x2F, 0x00);
    /// 39h/00h: SAVING PARAMETERS NOT SUPPORTED: MODE SENSE asked for saved
    /// values (PC=3); this core keeps no saved pages.
    pub const SAVING_PARAMETERS_NOT_SUPPORTED: Asc = Asc::new(0x39, 0x00);
    /// INQUIRY DATA HAS CHANGED (a LUN's `alua` setting changed TPGS).
    pub const INQUIRY_DATA_HAS_CHANGED: Asc = Asc::new(0x3F, 0x03);
    /// 3Fh/0Eh: REPORTED LUNS DATA HAS CHANGED: unit attention after a LUN was
    /// added to or removed from the target.
    pub const REPORTED_LUNS_DATA_HAS_CHANGED: Asc = Asc::new(0x3F, 0x0E);
    /// 44h/00h: INTERNAL TARGET FAILURE, with HARDWARE ERROR (see
    /// [`SenseKey::HARDWARE_ERROR`] for when).
    pub const INTERNAL_TARGET_FAILURE: Asc = Asc::new(0x44, 0x00);
    /// iSCSI: a data digest failed (RFC 7143 §7.8).
    pub const PROTOCOL_SERVICE_CRC_ERROR: Asc = Asc::new(0x47, 0x05);
    /// 4Bh/00h: DATA PHASE ERROR, with ABORTED COMMAND: iSCSI Data-Out out of
    /// sequence (DataSN) or with no buffer to land in.
    pub const DATA_PHASE_ERROR: Asc = Asc::new(0x4B, 0x00);
    /// 4Bh/01h: INVALID TARGET PORT TRANSFER TAG RECEIVED, with ABORTED
    /// COMMAND: a Data-Out PDU with a Target Transfer Tag the target never gave.
    pub const INVALID_TARGET_PORT_TRANSFER_TAG_RECEIVED: Asc = Asc::new(0x4B, 0x01);
    /// 4Bh/05h: DATA OFFSET ERROR, with ABORTED COMMAND: a Data-Out PDU's
    /// buffer offset outside the expected range.
    pub const DATA_OFFSET_ERROR: Asc = Asc::new(0x4B, 0x05);
    /// 4Eh/00h: OVERLAPPED COMMANDS ATTEMPTED, with ABORTED COMMAND: a new
    /// command reuses the tag of a task still in the task set (SAM-5 §5.10).
    pub const OVERLAPPED_COMMANDS_ATTEMPTED: Asc = Asc::new(0x4E, 0x00);
    /// 55h/04h: INSUFFICIENT REGISTRATION RESOURCES: PERSISTENT RESERVE OUT
    /// REGISTER when the LU already holds its maximum of registrations.
    pub const INSUFFICIENT_REGISTRATION_RESOURCES: Asc = Asc::new(0x55, 0x04);

    /// Unit attentions of the "power on, reset" family (ASC 29h), which
    /// supersede any older unit attention (SAM-5 §5.14).
    pub fn is_reset(self) -> bool {
        self.asc == 0x29
    }
}

/// Field pointer sense-key-specific information (SPC-4 §4.5.2.4.2): which
/// byte (and optionally bit) of the CDB or parameter list was invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldPointer {
    /// C/D bit: the error is in the CDB (true) or in the parameter list.
    pub in_cdb: bool,
    /// Byte offset of the (first byte of the) invalid field.
    pub byte: u16,
    /// Bit of that byte, 0..=7, when a single bit is at fault (BPV=1).
    pub bit: Option<u8>,
}

impl FieldPointer {
    /// The three sense-key-specific bytes, SKSV set.
    fn bytes(self) -> [u8; 3] {
        let mut b0 = 0x80;
        if self.in_cdb {
            b0 |= 0x40;
        }
        if let Some(bit) = self.bit {
            b0 |= 0x08 | (bit & 0x07);
        }
        let [hi, lo] = self.byte.to_be_bytes();
        [b0, hi, lo]
    }
}

/// Which sense data format to emit (control mode page D_SENSE, SPC-4 §7.5.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SenseFormat {
    /// Fixed format, response code 70h.
    #[default]
    Fixed,
    /// Descriptor format, response code 72h.
    Descriptor,
}

/// A current-error sense condition, independent of wire format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sense {
    /// SENSE KEY: the class of the condition.
    pub key: SenseKey,
    /// ADDITIONAL SENSE CODE and qualifier: the condition itself.
    pub asc: Asc,
    /// INFORMATION field (e.g. the miscompare offset), VALID bit set when present.
    pub information: Option<u64>,
    /// Sense-key-specific field pointer, SKSV set when present.
    pub field: Option<FieldPointer>,
    /// Sense-key-specific progress indication (SPC-4 §4.5.2.4.4), in
    /// 65536ths of the operation; used when `field` is not set.
    pub progress: Option<u16>,
}

/// Length of fixed-format sense data as this core builds it.
pub const FIXED_SENSE_LEN: usize = 18;

impl Sense {
    /// A condition with no INFORMATION and no sense-key-specific field.
    pub const fn new(key: SenseKey, asc: Asc) -> Sense {
        Sense {
            key,
            asc,
            information: None,
            field: None,
            progress: None,
        }
    }

    /// ILLEGAL REQUEST, INVALID FIELD IN CDB pointing at `byte` (and `bit`).
    pub fn invalid_cdb_field(byte: usize, bit: Option<u8>) -> Sense {
        Sense::new(SenseKey::ILLEGAL_REQUEST, Asc::INVALID_FIELD_IN_CDB).with_field(true, byte, bit)
    }

    /// ILLEGAL REQUEST, INVALID FIELD IN PARAMETER LIST pointing at `byte`.
    pub fn invalid_param_field(byte: usize, bit: Option<u8>) -> Sense {
        Sense::new(
            SenseKey::ILLEGAL_REQUEST,
            Asc::INVALID_FIELD_IN_PARAMETER_LIST,
        )
        .with_field(false, byte, bit)
    }

    /// ILLEGAL REQUEST with the given additional sense code.
    pub const fn illegal(asc: Asc) -> Sense {
        Sense::new(SenseKey::ILLEGAL_REQUEST, asc)
    }

    /// UNIT ATTENTION with the given additional sense code.
    pub const fn unit_attention(asc: Asc) -> Sense {
        Sense::new(SenseKey::UNIT_ATTENTION, asc)
    }

    /// Sets the INFORMATION field.
    pub fn with_information(mut self, information: u64) -> Sense {
        self.information = Some(information);
        self
    }

    /// Sets a field pointer; a byte offset beyond 65535 is clamped.
    pub fn with_field(mut self, in_cdb: bool, byte: usize, bit: Option<u8>) -> Sense {
        self.field = Some(FieldPointer {
            in_cdb,
            byte: u16::try_from(byte).unwrap_or(u16::MAX),
            bit,
        });
        self
    }

    /// Sets a progress indication (NOT READY conditions of long operations).
    pub fn with_progress(mut self, progress: u16) -> Sense {
        self.progress = Some(progress);
        self
    }

    /// The three sense-key-specific bytes, SKSV set, if any are present.
    fn key_specific(&self) -> Option<[u8; 3]> {
        match (self.field, self.progress) {
            (Some(field), _) => Some(field.bytes()),
            (None, Some(p)) => {
                let [hi, lo] = p.to_be_bytes();
                Some([0x80, hi, lo])
            }
            (None, None) => None,
        }
    }

    /// Encodes in the requested format.
    pub fn encode(&self, format: SenseFormat) -> Vec<u8> {
        match format {
            SenseFormat::Fixed => self.fixed(),
            SenseFormat::Descriptor => self.descriptor(),
        }
    }

    /// Fixed format (SPC-4 §4.5.3, table 26): 18 bytes.
    pub fn fixed(&self) -> Vec<u8> {
        let mut b = vec![0u8; FIXED_SENSE_LEN];
        b[0] = 0x70;
        if let Some(info) = self.information {
            // A 4-byte INFORMATION field: VALID only when the value fits.
            if let Ok(info) = u32::try_from(info) {
                b[0] |= 0x80;
                b[3..7].copy_from_slice(&info.to_be_bytes());
            }
        }
        b[2] = self.key.0 & 0x0F;
        // ADDITIONAL SENSE LENGTH: bytes after byte 7.
        b[7] = (FIXED_SENSE_LEN - 8) as u8;
        b[12] = self.asc.asc;
        b[13] = self.asc.ascq;
        if let Some(sks) = self.key_specific() {
            b[15..18].copy_from_slice(&sks);
        }
        b
    }

    /// Descriptor format (SPC-4 §4.5.2): header plus an information
    /// descriptor (§4.5.2.2) and a sense-key-specific descriptor (§4.5.2.4)
    /// when those fields are set.
    pub fn descriptor(&self) -> Vec<u8> {
        let mut b = vec![
            0x72,
            self.key.0 & 0x0F,
            self.asc.asc,
            self.asc.ascq,
            0,
            0,
            0,
            0,
        ];
        if let Some(info) = self.information {
            b.extend_from_slice(&[0x00, 0x0A, 0x80, 0x00]);
            b.extend_from_slice(&info.to_be_bytes());
        }
        if let Some(sks) = self.key_specific() {
            b.extend_from_slice(&[0x02, 0x06, 0x00, 0x00]);
            b.extend_from_slice(&sks);
            b.push(0);
        }
        // ADDITIONAL SENSE LENGTH: at most 12 + 8 bytes of descriptors here.
        b[7] = u8::try_from(b.len() - 8).unwrap_or(u8::MAX);
        b
    }
}

/// The one mapping from backstore failures to sense data (SPC-4 table 28).
impl From<BackstoreError> for Sense {
    fn from(err: BackstoreError) -> Sense {
        match err {
            BackstoreError::Unsupported => Sense::illegal(Asc::INVALID_COMMAND_OPERATION_CODE),
            BackstoreError::OutOfRange { .. } => Sense::illegal(Asc::LBA_OUT_OF_RANGE),
            BackstoreError::ReadOnly => Sense::new(SenseKey::DATA_PROTECT, Asc::WRITE_PROTECTED),
            BackstoreError::Read(_) => {
                Sense::new(SenseKey::MEDIUM_ERROR, Asc::UNRECOVERED_READ_ERROR)
            }
            // Out of space (ENOSPC) is the thin provisioning resource
            // exhaustion of SBC-3 §4.7.3.6, whatever the LUN reports:
            // a store on a sparse file or thin volume is thin underneath
            // even when the LUN says it is fully provisioned, and Linux
            // turns this sense into ENOSPC for the file system rather
            // than EIO.
            BackstoreError::Write(e) | BackstoreError::Flush(e) | BackstoreError::Io(e)
                if e.kind() == std::io::ErrorKind::StorageFull =>
            {
                Sense::new(
                    SenseKey::DATA_PROTECT,
                    Asc::SPACE_ALLOCATION_FAILED_WRITE_PROTECT,
                )
            }
            BackstoreError::Write(_) | BackstoreError::Flush(_) => {
                Sense::new(SenseKey::MEDIUM_ERROR, Asc::WRITE_ERROR)
            }
            // Another gateway owns the store now (SPC-4 §5.15.2.5): the
            // initiator retries the command, on another path if this
            // one stays in transition.
            BackstoreError::Fenced(_) => {
                Sense::new(SenseKey::NOT_READY, Asc::ASYMMETRIC_ACCESS_STATE_TRANSITION)
            }
            // WouldBlock ends a non-blocking attempt, which is thrown away
            // and run again on a worker; it never reaches a peer.
            BackstoreError::Config(_) | BackstoreError::Io(_) | BackstoreError::WouldBlock => {
                Sense::new(SenseKey::HARDWARE_ERROR, Asc::INTERNAL_TARGET_FAILURE)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_format_with_field_pointer() {
        let s = Sense::invalid_cdb_field(2, Some(5));
        assert_eq!(
            s.fixed(),
            vec![
                0x70,
                0,
                0x05,
                0,
                0,
                0,
                0,
                10,
                0,
                0,
                0,
                0,
                0x24,
                0x00,
                0,
                0xC0 | 0x08 | 5,
                0x00,
                0x02
            ]
        );
    }

    #[test]
    fn fixed_format_field_pointer_without_bit_and_param_list() {
        let s = Sense::invalid_param_field(0x1234, None);
        let b = s.fixed();
        assert_eq!(&b[12..18], &[0x26, 0x00, 0, 0x80, 0x12, 0x34]);
    }

    #[test]
    fn fixed_format_information_sets_valid() {
        let s =
            Sense::new(SenseKey::MISCOMPARE, Asc::MISCOMPARE_DURING_VERIFY).with_information(513);
        let b = s.fixed();
        assert_eq!(b[0], 0xF0);
        assert_eq!(b[2], 0x0E);
        assert_eq!(&b[3..7], &[0, 0, 2, 1]);
        assert_eq!(&b[12..14], &[0x1D, 0x00]);
        // Too large for 4 bytes: VALID stays clear.
        let big = s.with_information(1 << 40).fixed();
        assert_eq!(big[0], 0x70);
        assert_eq!(&big[3..7], &[0, 0, 0, 0]);
    }

    #[test]
    fn progress_indication_in_both_formats() {
        let s = Sense::new(SenseKey::NOT_READY, Asc::new(0x04, 0x1B)).with_progress(0x8000);
        let f = s.fixed();
        assert_eq!(&f[12..18], &[0x04, 0x1B, 0, 0x80, 0x80, 0x00]);
        let d = s.descriptor();
        assert_eq!(&d[8..16], &[0x02, 0x06, 0, 0, 0x80, 0x80, 0x00, 0]);
        // A field pointer takes precedence.
        let both = Sense::invalid_cdb_field(1, None).with_progress(7);
        assert_eq!(&both.fixed()[15..18], &[0xC0, 0, 1]);
    }

    #[test]
    fn descriptor_format_plain() {
        let s = Sense::unit_attention(Asc::POWER_ON_RESET);
        assert_eq!(s.descriptor(), vec![0x72, 0x06, 0x29, 0x00, 0, 0, 0, 0]);
    }

    #[test]
    fn descriptor_format_with_information_and_field_pointer() {
        let s = Sense::invalid_cdb_field(1, Some(4)).with_information(7);
        let b = s.descriptor();
        assert_eq!(b.len(), 8 + 12 + 8);
        assert_eq!(&b[..8], &[0x72, 0x05, 0x24, 0x00, 0, 0, 0, 20]);
        assert_eq!(&b[8..20], &[0, 0x0A, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 7]);
        assert_eq!(&b[20..28], &[0x02, 0x06, 0, 0, 0xCC, 0x00, 0x01, 0]);
    }

    #[test]
    fn backstore_errors_map_once() {
        let io = || std::io::Error::other("x");
        // ENOSPC on Linux.
        let nospace = || std::io::Error::from_raw_os_error(28);
        let cases = [
            (
                BackstoreError::Unsupported,
                SenseKey::ILLEGAL_REQUEST,
                Asc::INVALID_COMMAND_OPERATION_CODE,
            ),
            (
                BackstoreError::OutOfRange { offset: 0, len: 1 },
                SenseKey::ILLEGAL_REQUEST,
                Asc::LBA_OUT_OF_RANGE,
            ),
            (
                BackstoreError::ReadOnly,
                SenseKey::DATA_PROTECT,
                Asc::WRITE_PROTECTED,
            ),
            (
                BackstoreError::Read(io()),
                SenseKey::MEDIUM_ERROR,
                Asc::UNRECOVERED_READ_ERROR,
            ),
            (
                BackstoreError::Write(io()),
                SenseKey::MEDIUM_ERROR,
                Asc::WRITE_ERROR,
            ),
            (
                BackstoreError::Flush(io()),
                SenseKey::MEDIUM_ERROR,
                Asc::WRITE_ERROR,
            ),
            (
                BackstoreError::Write(nospace()),
                SenseKey::DATA_PROTECT,
                Asc::SPACE_ALLOCATION_FAILED_WRITE_PROTECT,
            ),
            (
                BackstoreError::Io(nospace()),
                SenseKey::DATA_PROTECT,
                Asc::SPACE_ALLOCATION_FAILED_WRITE_PROTECT,
            ),
            (
                BackstoreError::Write(std::io::Error::from(std::io::ErrorKind::StorageFull)),
                SenseKey::DATA_PROTECT,
                Asc::SPACE_ALLOCATION_FAILED_WRITE_PROTECT,
            ),
            (
                BackstoreError::Io(io()),
                SenseKey::HARDWARE_ERROR,
                Asc::INTERNAL_TARGET_FAILURE,
            ),
            (
                BackstoreError::Config("c".into()),
                SenseKey::HARDWARE_ERROR,
                Asc::INTERNAL_TARGET_FAILURE,
            ),
            (
                BackstoreError::Fenced(io()),
                SenseKey::NOT_READY,
                Asc::ASYMMETRIC_ACCESS_STATE_TRANSITION,
            ),
        ];
        for (err, key, asc) in cases {
            let s = Sense::from(err);
            assert_eq!((s.key, s.asc), (key, asc));
        }
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn encodings_are_self_consistent(
                key in 0u8..16, asc: u8, ascq: u8,
                info in proptest::option::of(any::<u64>()),
                field in proptest::option::of((any::<bool>(), any::<usize>(), proptest::option::of(0u8..8))),
            ) {
                let mut s = Sense::new(SenseKey(key), Asc::new(asc, ascq));
                s.information = info;
                if let Some((in_cdb, byte, bit)) = field {
                    s = s.with_field(in_cdb, byte, bit);
                }
                let f = s.fixed();
                prop_assert_eq!(f.len(), FIXED_SENSE_LEN);
                prop_assert_eq!((f[2], f[12], f[13]), (key, asc, ascq));
                let d = s.descriptor();
                prop_assert_eq!(usize::from(d[7]) + 8, d.len());
                prop_assert_eq!((d[1], d[2], d[3]), (key, asc, ascq));
            }
        }
    }
}
