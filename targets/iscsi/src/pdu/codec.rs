//! The iSCSI PDU wire codec (RFC 7143 §11): padding, CRC32C digests, SAM LUN
//! encoding, and the typed PDUs of `pdu` to and from bytes.
//!
//! Production direction: the target decodes [`Request`]s (header first with
//! [`RequestHeader::parse`], so limits are checked before the data segment is
//! read) and encodes [`Reply`]s. The reverse direction ([`Request::encode`],
//! [`Reply::decode`]) serves the in-memory test initiator and the tests.
//!
//! Guarantees:
//! - no decoder panics on any input; `Err(Incomplete(n))` means at least `n`
//!   more bytes are needed, and is the only error a truncated PDU yields;
//! - the codec rejects only what it cannot represent or frame: unknown
//!   opcodes, malformed AHS, data where a PDU has no room for it, bad digests.
//!   Open code fields (Stage, TmfCode, reasons, ...) and flag combinations
//!   pass through unjudged: the connection checks them, since the right answer
//!   (Reject, Login status, close) depends on the phase;
//! - LUN fields are kept as the raw 8 wire bytes (a big-endian `u64`); use
//!   [`decode_lun`] / [`encode_lun`] to convert to and from LUN numbers;
//! - encoders never fail. Lengths beyond what the wire can carry are clamped
//!   (data segment to [`MAX_DATA_SEGMENT_LEN`], CDB to [`MAX_CDB_LEN`]); the
//!   connection never produces such values.

use std::borrow::Cow;

use nom::bytes::complete::take;
use nom::number::complete::{be_u16, u8 as byte};
use nom::IResult;

use super::bhs::{self, Bhs};
use super::*;

/// Length of a header or data digest on the wire.
pub const DIGEST_LEN: usize = 4;

/// The bytes around a payload sent as its own segment: the header (with
/// its digest) and the trailer (pad and data digest), on the stack.
#[derive(Debug, Clone, Copy)]
pub struct Framing {
    head: [u8; BHS_LEN + DIGEST_LEN],
    head_len: usize,
    tail: [u8; 3 + DIGEST_LEN],
    tail_len: usize,
}

impl Default for Framing {
    fn default() -> Framing {
        Framing {
            head: [0; BHS_LEN + DIGEST_LEN],
            head_len: 0,
            tail: [0; 3 + DIGEST_LEN],
            tail_len: 0,
        }
    }
}

impl Framing {
    /// The header and header digest.
    pub fn head(&self) -> &[u8] {
        self.head.get(..self.head_len).unwrap_or_default()
    }

    /// The pad bytes and data digest.
    pub fn tail(&self) -> &[u8] {
        self.tail.get(..self.tail_len).unwrap_or_default()
    }
}
/// Largest DataSegmentLength the 24-bit field can express (§11.2.1.5).
pub const MAX_DATA_SEGMENT_LEN: usize = 0x00ff_ffff;
/// Largest total AHS length: 255 four-byte words (§11.2.1.4).
pub const MAX_AHS_LEN: usize = 255 * 4;
/// Longest CDB [`Request::encode`] carries (16 in the BHS, the rest in an
/// extended CDB AHS that still fits next to a bidirectional-read AHS).
pub const MAX_CDB_LEN: usize = 1024;
/// AHSType of the Extended CDB AHS (§11.2.2.3).
pub const AHS_TYPE_EXTENDED_CDB: u8 = 1;
/// AHSType of the Expected Bidirectional Read Data Length AHS (§11.2.2.4).
pub const AHS_TYPE_BIDI_READ_LEN: u8 = 2;
/// What [`decode_lun`] returns for an address it does not support; no
/// configured LUN ever has this number.
pub const INVALID_LUN: u64 = u64::MAX;
/// Largest LUN number [`encode_lun`] can express (flat space addressing).
pub const MAX_LUN: u64 = 0x3fff;

/// Rounds `n` up to a multiple of 4 (PDU segments are padded to 4-byte words,
/// §11.2.3). Saturates near `usize::MAX`.
pub fn padded_len(n: usize) -> usize {
    n.checked_next_multiple_of(4).unwrap_or(usize::MAX)
}

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

// ---------------------------------------------------------------------------
// Wire lengths.
// ---------------------------------------------------------------------------

impl<T: AsRef<[u8]>> Bhs<T> {
    /// Bytes from the start of the PDU to the data segment: BHS, AHS and the
    /// header digest if `header_digest`.
    pub fn header_wire_len(&self, header_digest: bool) -> usize {
        BHS_LEN + self.total_ahs_len_bytes() + if header_digest { DIGEST_LEN } else { 0 }
    }

    /// Bytes of the data segment on the wire: data, padding, and the data
    /// digest if `data_digest` and the segment is not empty.
    pub fn data_wire_len(&self, data_digest: bool) -> usize {
        let len = self.data_segment_len() as usize;
        let digest = if data_digest && len > 0 {
            DIGEST_LEN
        } else {
            0
        };
        padded_len(len) + digest
    }

    /// Total bytes this PDU occupies on the wire.
    pub fn pdu_wire_len(&self, header_digest: bool, data_digest: bool) -> usize {
        self.header_wire_len(header_digest) + self.data_wire_len(data_digest)
    }
}

// ---------------------------------------------------------------------------
// Framing shared by Request::decode and Reply::decode.
// ---------------------------------------------------------------------------

/// Splits one PDU off the front of `buf`: checks the header digest, runs
/// `parse` on BHS + AHS (before the data segment is needed, so a bad header
/// fails early), then checks the data digest. Returns the parsed header, the
/// data segment without padding, and the bytes consumed.
fn decode_frame<H>(
    buf: &[u8],
    header_digest: bool,
    data_digest: bool,
    parse: impl FnOnce(&[u8; BHS_LEN], &[u8]) -> Result<H, PduError>,
) -> Result<(H, &[u8], usize), PduError> {
    let bhs_bytes: &[u8; BHS_LEN] = match buf.first_chunk() {
        Some(b) => b,
        None => return Err(PduError::Incomplete(BHS_LEN - buf.len())),
    };
    let bhs = Bhs::from_array(bhs_bytes);
    let total = bhs.pdu_wire_len(header_digest, data_digest);
    let missing = || PduError::Incomplete(total.saturating_sub(buf.len()));

    let ahs_end = BHS_LEN + bhs.total_ahs_len_bytes();
    let header_end = bhs.header_wire_len(header_digest);
    let ahs = buf.get(BHS_LEN..ahs_end).ok_or_else(missing)?;
    if header_digest {
        let covered = buf.get(..ahs_end).ok_or_else(missing)?;
        let digest = buf.get(ahs_end..header_end).ok_or_else(missing)?;
        verify_digest(covered, digest)?;
    }
    let header = parse(bhs_bytes, ahs)?;

    let len = bhs.data_segment_len() as usize;
    let padded_end = header_end + padded_len(len);
    let padded = buf.get(header_end..padded_end).ok_or_else(missing)?;
    if data_digest && len > 0 {
        let digest = buf.get(padded_end..total).ok_or_else(missing)?;
        verify_digest(padded, digest)?;
    }
    let data = padded.get(..len).unwrap_or_default();
    Ok((header, data, total))
}

/// Appends one PDU: BHS (with TotalAHSLength and DataSegmentLength filled
/// in), AHS, header digest, data, padding, data digest.
/// Where encoded PDUs are appended: a `Vec` or a `BytesMut` (whose written
/// part a driver can take as `Bytes` while keeping the allocation).
pub trait PduSink: bytes::BufMut + std::ops::Deref<Target = [u8]> {}

impl<B: bytes::BufMut + std::ops::Deref<Target = [u8]>> PduSink for B {}

fn write_pdu<B: PduSink>(
    out: &mut B,
    mut bhs: Bhs<[u8; BHS_LEN]>,
    ahs: &[u8],
    data: &[u8],
    header_digest: bool,
    data_digest: bool,
) {
    debug_assert!(ahs.len() <= MAX_AHS_LEN && ahs.len() % 4 == 0);
    debug_assert!(data.len() <= MAX_DATA_SEGMENT_LEN);
    let data = data.get(..MAX_DATA_SEGMENT_LEN).unwrap_or(data);
    bhs.set_total_ahs_len_bytes(ahs.len());
    bhs.set_data_segment_len(data.len() as u32);

    let start = out.len();
    out.put_slice(&bhs.into_array());
    out.put_slice(ahs);
    if header_digest {
        let digest = digest_wire_bytes(out.get(start..).unwrap_or_default());
        out.put_slice(&digest);
    }
    if !data.is_empty() {
        let data_start = out.len();
        out.put_slice(data);
        out.put_bytes(0, padded_len(data.len()) - data.len());
        if data_digest {
            let digest = digest_wire_bytes(out.get(data_start..).unwrap_or_default());
            out.put_slice(&digest);
        }
    }
}

// ---------------------------------------------------------------------------
// Additional Header Segments (§11.2.2).
// ---------------------------------------------------------------------------

/// The AHS a SCSI Command may carry.
#[derive(Debug, Default)]
struct CommandAhs<'a> {
    /// CDB bytes beyond the first 16.
    extended_cdb: Option<&'a [u8]>,
    bidi_read_len: Option<u32>,
}

/// One AHS: AHSLength (2), AHSType (1), AHS-specific (AHSLength bytes,
/// starting with byte 3), padding to a 4-byte word (§11.2.2.1).
fn ahs_segment(input: &[u8]) -> IResult<&[u8], (u8, &[u8])> {
    let (input, len) = be_u16(input)?;
    let (input, ahs_type) = byte(input)?;
    let (input, specific) = take(len)(input)?;
    let unpadded = 3 + usize::from(len);
    let (input, _pad) = take(padded_len(unpadded) - unpadded)(input)?;
    Ok((input, (ahs_type, specific)))
}

fn parse_command_ahs(mut input: &[u8]) -> Result<CommandAhs<'_>, PduError> {
    let mut ahs = CommandAhs::default();
    while !input.is_empty() {
        let (rest, (ahs_type, specific)) = ahs_segment(input).map_err(|_| PduError::BadAhs)?;
        input = rest;
        // Both defined types start with a reserved byte (§11.2.2.3, §11.2.2.4).
        let body = specific.get(1..).ok_or(PduError::BadAhs)?;
        match ahs_type {
            // An extended CDB AHS is only for CDBs of 17 bytes or more.
            AHS_TYPE_EXTENDED_CDB if ahs.extended_cdb.is_none() && !body.is_empty() => {
                ahs.extended_cdb = Some(body);
            }
            AHS_TYPE_BIDI_READ_LEN if ahs.bidi_read_len.is_none() => {
                let len: [u8; 4] = body.try_into().map_err(|_| PduError::BadAhs)?;
                ahs.bidi_read_len = Some(u32::from_be_bytes(len));
            }
            _ => return Err(PduError::BadAhs),
        }
    }
    Ok(ahs)
}

fn push_ahs(out: &mut Vec<u8>, ahs_type: u8, body: &[u8]) {
    let specific_len = 1 + body.len();
    let start = out.len();
    out.extend_from_slice(
        &u16::try_from(specific_len)
            .unwrap_or(u16::MAX)
            .to_be_bytes(),
    );
    out.push(ahs_type);
    out.push(0); // reserved
    out.extend_from_slice(body);
    out.resize(start + padded_len(3 + specific_len), 0);
}

// ---------------------------------------------------------------------------
// Initiator PDUs.
// ---------------------------------------------------------------------------

type BhsRef<'a> = Bhs<&'a [u8; BHS_LEN]>;

fn flag(flags: u8, bit: u8) -> bool {
    flags & bit != 0
}

fn bit_if(set: bool, bit: u8) -> u8 {
    if set {
        bit
    } else {
        0
    }
}

/// A BHS with byte 0 filled in.
fn new_bhs(opcode: Opcode, immediate: bool, flags: u8) -> Bhs<[u8; BHS_LEN]> {
    let mut b = Bhs::zeroed();
    b.set_opcode(opcode, immediate);
    b.set_flags(flags);
    b
}

impl NopOut {
    fn read(b: &BhsRef<'_>) -> Self {
        NopOut {
            immediate: b.immediate(),
            lun: b.lun_raw(),
            itt: b.itt(),
            ttt: b.u32_at(bhs::TTT),
            cmd_sn: b.u32_at(bhs::CMD_SN),
            exp_stat_sn: b.u32_at(bhs::EXP_STAT_SN),
        }
    }

    fn write(&self) -> Bhs<[u8; BHS_LEN]> {
        let mut b = new_bhs(Opcode::NOP_OUT, self.immediate, bhs::FINAL_BIT);
        b.set_lun_raw(self.lun);
        b.set_itt(self.itt);
        b.set_u32(bhs::TTT, self.ttt);
        b.set_u32(bhs::CMD_SN, self.cmd_sn);
        b.set_u32(bhs::EXP_STAT_SN, self.exp_stat_sn);
        b
    }
}

impl ScsiCommand {
    fn read(b: &BhsRef<'_>, ahs: &[u8]) -> Result<Self, PduError> {
        use bhs::scsi_cmd::*;
        let ahs = parse_command_ahs(ahs)?;
        let flags = b.flags();
        let cdb = rustgt_scsi::CdbBytes::with_extension(
            b.bytes_at(CDB),
            ahs.extended_cdb.unwrap_or_default(),
        );
        Ok(ScsiCommand {
            immediate: b.immediate(),
            final_bit: b.final_bit(),
            read: flag(flags, READ_BIT),
            write: flag(flags, WRITE_BIT),
            attr: TaskAttribute(flags & ATTR_MASK),
            lun: b.lun_raw(),
            itt: b.itt(),
            expected_data_len: b.u32_at(EXPECTED_DATA_LEN),
            cmd_sn: b.u32_at(bhs::CMD_SN),
            exp_stat_sn: b.u32_at(bhs::EXP_STAT_SN),
            cdb,
            bidi_read_len: ahs.bidi_read_len,
        })
    }

    /// The BHS and the AHS bytes (extended CDB first, then bidi read length).
    fn write(&self) -> (Bhs<[u8; BHS_LEN]>, Vec<u8>) {
        use bhs::scsi_cmd::*;
        let flags = bit_if(self.final_bit, bhs::FINAL_BIT)
            | bit_if(self.read, READ_BIT)
            | bit_if(self.write, WRITE_BIT)
            | (self.attr.0 & ATTR_MASK);
        let mut b = new_bhs(Opcode::SCSI_COMMAND, self.immediate, flags);
        b.set_lun_raw(self.lun);
        b.set_itt(self.itt);
        b.set_u32(EXPECTED_DATA_LEN, self.expected_data_len);
        b.set_u32(bhs::CMD_SN, self.cmd_sn);
        b.set_u32(bhs::EXP_STAT_SN, self.exp_stat_sn);

        let cdb = self.cdb.get(..MAX_CDB_LEN).unwrap_or(&self.cdb);
        let (first, extended) = cdb.split_at(cdb.len().min(16));
        let mut first16 = [0u8; 16];
        first16
            .get_mut(..first.len())
            .unwrap_or_default()
            .copy_from_slice(first);
        b.set_bytes(CDB, &first16);

        let mut ahs = Vec::new();
        if !extended.is_empty() {
            push_ahs(&mut ahs, AHS_TYPE_EXTENDED_CDB, extended);
        }
        if let Some(len) = self.bidi_read_len {
            push_ahs(&mut ahs, AHS_TYPE_BIDI_READ_LEN, &len.to_be_bytes());
        }
        (b, ahs)
    }
}

impl TaskMgmtRequest {
    fn read(b: &BhsRef<'_>) -> Self {
        use bhs::tmf::*;
        TaskMgmtRequest {
            immediate: b.immediate(),
            function: TmfCode(b.flags() & FUNCTION_MASK),
            lun: b.lun_raw(),
            itt: b.itt(),
            referenced_tag: b.u32_at(REFERENCED_TAG),
            cmd_sn: b.u32_at(bhs::CMD_SN),
            exp_stat_sn: b.u32_at(bhs::EXP_STAT_SN),
            ref_cmd_sn: b.u32_at(REF_CMD_SN),
            exp_data_sn: b.u32_at(EXP_DATA_SN),
        }
    }

    fn write(&self) -> Bhs<[u8; BHS_LEN]> {
        use bhs::tmf::*;
        let flags = bhs::FINAL_BIT | (self.function.0 & FUNCTION_MASK);
        let mut b = new_bhs(Opcode::TASK_MGMT_REQUEST, self.immediate, flags);
        b.set_lun_raw(self.lun);
        b.set_itt(self.itt);
        b.set_u32(REFERENCED_TAG, self.referenced_tag);
        b.set_u32(bhs::CMD_SN, self.cmd_sn);
        b.set_u32(bhs::EXP_STAT_SN, self.exp_stat_sn);
        b.set_u32(REF_CMD_SN, self.ref_cmd_sn);
        b.set_u32(EXP_DATA_SN, self.exp_data_sn);
        b
    }
}

/// Byte 1 of Login Request/Response: T, C, CSG, NSG (§11.12.1-3).
fn login_flags(transit: bool, cont: bool, csg: Stage, nsg: Stage) -> u8 {
    use bhs::login::*;
    bit_if(transit, TRANSIT_BIT)
        | bit_if(cont, CONTINUE_BIT)
        | ((csg.0 & STAGE_MASK) << CSG_SHIFT)
        | (nsg.0 & STAGE_MASK)
}

fn login_stages(flags: u8) -> (Stage, Stage) {
    use bhs::login::*;
    (
        Stage((flags >> CSG_SHIFT) & STAGE_MASK),
        Stage(flags & STAGE_MASK),
    )
}

fn isid(b: &BhsRef<'_>) -> [u8; 6] {
    b.bytes_at(bhs::login::ISID).try_into().unwrap_or([0; 6])
}

impl LoginRequest {
    fn read(b: &BhsRef<'_>) -> Self {
        use bhs::login::*;
        let flags = b.flags();
        let (csg, nsg) = login_stages(flags);
        LoginRequest {
            transit: flag(flags, TRANSIT_BIT),
            cont: flag(flags, CONTINUE_BIT),
            csg,
            nsg,
            version_max: b.u8_at(VERSION_MAX),
            version_min: b.u8_at(VERSION_MIN),
            isid: isid(b),
            tsih: b.u16_at(TSIH),
            itt: b.itt(),
            cid: b.u16_at(CID),
            cmd_sn: b.u32_at(bhs::CMD_SN),
            exp_stat_sn: b.u32_at(bhs::EXP_STAT_SN),
        }
    }

    fn write(&self) -> Bhs<[u8; BHS_LEN]> {
        use bhs::login::*;
        let flags = login_flags(self.transit, self.cont, self.csg, self.nsg);
        // Login Requests are always immediate (§11.12).
        let mut b = new_bhs(Opcode::LOGIN_REQUEST, true, flags);
        b.set_u8(VERSION_MAX, self.version_max);
        b.set_u8(VERSION_MIN, self.version_min);
        b.set_bytes(ISID, &self.isid);
        b.set_u16(TSIH, self.tsih);
        b.set_itt(self.itt);
        b.set_u16(CID, self.cid);
        b.set_u32(bhs::CMD_SN, self.cmd_sn);
        b.set_u32(bhs::EXP_STAT_SN, self.exp_stat_sn);
        b
    }
}

impl TextRequest {
    fn read(b: &BhsRef<'_>) -> Self {
        TextRequest {
            immediate: b.immediate(),
            final_bit: b.final_bit(),
            cont: flag(b.flags(), bhs::text::CONTINUE_BIT),
            lun: b.lun_raw(),
            itt: b.itt(),
            ttt: b.u32_at(bhs::TTT),
            cmd_sn: b.u32_at(bhs::CMD_SN),
            exp_stat_sn: b.u32_at(bhs::EXP_STAT_SN),
        }
    }

    fn write(&self) -> Bhs<[u8; BHS_LEN]> {
        let flags =
            bit_if(self.final_bit, bhs::FINAL_BIT) | bit_if(self.cont, bhs::text::CONTINUE_BIT);
        let mut b = new_bhs(Opcode::TEXT_REQUEST, self.immediate, flags);
        b.set_lun_raw(self.lun);
        b.set_itt(self.itt);
        b.set_u32(bhs::TTT, self.ttt);
        b.set_u32(bhs::CMD_SN, self.cmd_sn);
        b.set_u32(bhs::EXP_STAT_SN, self.exp_stat_sn);
        b
    }
}

impl DataOut {
    fn read(b: &BhsRef<'_>) -> Self {
        use bhs::data::*;
        DataOut {
            final_bit: b.final_bit(),
            lun: b.lun_raw(),
            itt: b.itt(),
            ttt: b.u32_at(bhs::TTT),
            exp_stat_sn: b.u32_at(bhs::EXP_STAT_SN),
            data_sn: b.u32_at(DATA_SN),
            buffer_offset: b.u32_at(BUFFER_OFFSET),
        }
    }

    fn write(&self) -> Bhs<[u8; BHS_LEN]> {
        use bhs::data::*;
        let flags = bit_if(self.final_bit, bhs::FINAL_BIT);
        let mut b = new_bhs(Opcode::DATA_OUT, false, flags);
        b.set_lun_raw(self.lun);
        b.set_itt(self.itt);
        b.set_u32(bhs::TTT, self.ttt);
        b.set_u32(bhs::EXP_STAT_SN, self.exp_stat_sn);
        b.set_u32(DATA_SN, self.data_sn);
        b.set_u32(BUFFER_OFFSET, self.buffer_offset);
        b
    }
}

impl LogoutRequest {
    fn read(b: &BhsRef<'_>) -> Self {
        use bhs::logout::*;
        LogoutRequest {
            immediate: b.immediate(),
            reason: b.flags() & REASON_MASK,
            itt: b.itt(),
            cid: b.u16_at(CID),
            cmd_sn: b.u32_at(bhs::CMD_SN),
            exp_stat_sn: b.u32_at(bhs::EXP_STAT_SN),
        }
    }

    fn write(&self) -> Bhs<[u8; BHS_LEN]> {
        use bhs::logout::*;
        let flags = bhs::FINAL_BIT | (self.reason & REASON_MASK);
        let mut b = new_bhs(Opcode::LOGOUT_REQUEST, self.immediate, flags);
        b.set_itt(self.itt);
        b.set_u16(CID, self.cid);
        b.set_u32(bhs::CMD_SN, self.cmd_sn);
        b.set_u32(bhs::EXP_STAT_SN, self.exp_stat_sn);
        b
    }
}

impl SnackRequest {
    fn read(b: &BhsRef<'_>) -> Self {
        use bhs::snack::*;
        SnackRequest {
            snack_type: b.flags() & TYPE_MASK,
            lun: b.lun_raw(),
            itt: b.itt(),
            ttt: b.u32_at(bhs::TTT),
            exp_stat_sn: b.u32_at(bhs::EXP_STAT_SN),
            beg_run: b.u32_at(BEG_RUN),
            run_length: b.u32_at(RUN_LENGTH),
        }
    }

    fn write(&self) -> Bhs<[u8; BHS_LEN]> {
        use bhs::snack::*;
        let flags = bhs::FINAL_BIT | (self.snack_type & TYPE_MASK);
        let mut b = new_bhs(Opcode::SNACK_REQUEST, false, flags);
        b.set_lun_raw(self.lun);
        b.set_itt(self.itt);
        b.set_u32(bhs::TTT, self.ttt);
        b.set_u32(bhs::EXP_STAT_SN, self.exp_stat_sn);
        b.set_u32(BEG_RUN, self.beg_run);
        b.set_u32(RUN_LENGTH, self.run_length);
        b
    }
}

impl RequestHeader {
    /// Decodes a BHS plus the AHS bytes that follow it. Only the first
    /// `TotalAHSLength × 4` bytes of `ahs` are looked at; fewer gives
    /// `Incomplete`. The data segment is not looked at.
    ///
    /// Errors: an opcode that is not an initiator opcode, AHS on anything but
    /// a SCSI Command, or a malformed AHS. Reserved fields are ignored and
    /// semantic checks (R/W bits vs. EDTL, T with C, opcode vs. phase) are
    /// left to the connection.
    pub fn parse(bhs: &[u8; BHS_LEN], ahs: &[u8]) -> Result<RequestHeader, PduError> {
        let b = Bhs::from_array(bhs);
        let ahs_len = b.total_ahs_len_bytes();
        let ahs = ahs
            .get(..ahs_len)
            .ok_or(PduError::Incomplete(ahs_len.saturating_sub(ahs.len())))?;
        let opcode = b.opcode();
        if opcode != Opcode::SCSI_COMMAND && !ahs.is_empty() {
            return Err(PduError::BadAhs);
        }
        Ok(match opcode {
            Opcode::NOP_OUT => RequestHeader::NopOut(NopOut::read(&b)),
            Opcode::SCSI_COMMAND => RequestHeader::ScsiCommand(ScsiCommand::read(&b, ahs)?),
            Opcode::TASK_MGMT_REQUEST => RequestHeader::TaskMgmt(TaskMgmtRequest::read(&b)),
            Opcode::LOGIN_REQUEST => RequestHeader::Login(LoginRequest::read(&b)),
            Opcode::TEXT_REQUEST => RequestHeader::Text(TextRequest::read(&b)),
            Opcode::DATA_OUT => RequestHeader::DataOut(DataOut::read(&b)),
            Opcode::LOGOUT_REQUEST => RequestHeader::Logout(LogoutRequest::read(&b)),
            Opcode::SNACK_REQUEST => RequestHeader::Snack(SnackRequest::read(&b)),
            other => return Err(PduError::UnknownOpcode(other.0)),
        })
    }

    pub fn opcode(&self) -> Opcode {
        match self {
            RequestHeader::NopOut(_) => Opcode::NOP_OUT,
            RequestHeader::ScsiCommand(_) => Opcode::SCSI_COMMAND,
            RequestHeader::TaskMgmt(_) => Opcode::TASK_MGMT_REQUEST,
            RequestHeader::Login(_) => Opcode::LOGIN_REQUEST,
            RequestHeader::Text(_) => Opcode::TEXT_REQUEST,
            RequestHeader::DataOut(_) => Opcode::DATA_OUT,
            RequestHeader::Logout(_) => Opcode::LOGOUT_REQUEST,
            RequestHeader::Snack(_) => Opcode::SNACK_REQUEST,
        }
    }

    pub fn itt(&self) -> u32 {
        match self {
            RequestHeader::NopOut(h) => h.itt,
            RequestHeader::ScsiCommand(h) => h.itt,
            RequestHeader::TaskMgmt(h) => h.itt,
            RequestHeader::Login(h) => h.itt,
            RequestHeader::Text(h) => h.itt,
            RequestHeader::DataOut(h) => h.itt,
            RequestHeader::Logout(h) => h.itt,
            RequestHeader::Snack(h) => h.itt,
        }
    }

    /// The I bit. Login Requests are always immediate (§11.12); Data-Out and
    /// SNACK have no I bit and report false.
    pub fn immediate(&self) -> bool {
        match self {
            RequestHeader::NopOut(h) => h.immediate,
            RequestHeader::ScsiCommand(h) => h.immediate,
            RequestHeader::TaskMgmt(h) => h.immediate,
            RequestHeader::Login(_) => true,
            RequestHeader::Text(h) => h.immediate,
            RequestHeader::Logout(h) => h.immediate,
            RequestHeader::DataOut(_) | RequestHeader::Snack(_) => false,
        }
    }

    /// CmdSN; `None` for Data-Out and SNACK, which carry none.
    pub fn cmd_sn(&self) -> Option<u32> {
        match self {
            RequestHeader::NopOut(h) => Some(h.cmd_sn),
            RequestHeader::ScsiCommand(h) => Some(h.cmd_sn),
            RequestHeader::TaskMgmt(h) => Some(h.cmd_sn),
            RequestHeader::Login(h) => Some(h.cmd_sn),
            RequestHeader::Text(h) => Some(h.cmd_sn),
            RequestHeader::Logout(h) => Some(h.cmd_sn),
            RequestHeader::DataOut(_) | RequestHeader::Snack(_) => None,
        }
    }

    pub fn exp_stat_sn(&self) -> u32 {
        match self {
            RequestHeader::NopOut(h) => h.exp_stat_sn,
            RequestHeader::ScsiCommand(h) => h.exp_stat_sn,
            RequestHeader::TaskMgmt(h) => h.exp_stat_sn,
            RequestHeader::Login(h) => h.exp_stat_sn,
            RequestHeader::Text(h) => h.exp_stat_sn,
            RequestHeader::DataOut(h) => h.exp_stat_sn,
            RequestHeader::Logout(h) => h.exp_stat_sn,
            RequestHeader::Snack(h) => h.exp_stat_sn,
        }
    }

    /// The raw LUN field, for the PDUs whose bytes 8..16 hold a LUN.
    pub fn lun_raw(&self) -> Option<u64> {
        match self {
            RequestHeader::NopOut(h) => Some(h.lun),
            RequestHeader::ScsiCommand(h) => Some(h.lun),
            RequestHeader::TaskMgmt(h) => Some(h.lun),
            RequestHeader::Text(h) => Some(h.lun),
            RequestHeader::DataOut(h) => Some(h.lun),
            RequestHeader::Snack(h) => Some(h.lun),
            RequestHeader::Login(_) | RequestHeader::Logout(_) => None,
        }
    }

    /// The BHS (lengths not yet set) and the AHS bytes.
    fn write(&self) -> (Bhs<[u8; BHS_LEN]>, Vec<u8>) {
        match self {
            RequestHeader::NopOut(h) => (h.write(), Vec::new()),
            RequestHeader::ScsiCommand(h) => h.write(),
            RequestHeader::TaskMgmt(h) => (h.write(), Vec::new()),
            RequestHeader::Login(h) => (h.write(), Vec::new()),
            RequestHeader::Text(h) => (h.write(), Vec::new()),
            RequestHeader::DataOut(h) => (h.write(), Vec::new()),
            RequestHeader::Logout(h) => (h.write(), Vec::new()),
            RequestHeader::Snack(h) => (h.write(), Vec::new()),
        }
    }
}

impl Request {
    /// Encodes an initiator PDU: BHS, AHS (extended CDB when the CDB is longer
    /// than 16 bytes, then bidirectional read length), header digest if
    /// `header_digest`, data + padding, data digest if `data_digest` and the
    /// data is not empty. A CDB shorter than 16 bytes is zero-filled.
    pub fn encode(&self, header_digest: bool, data_digest: bool) -> Vec<u8> {
        let (bhs, ahs) = self.header.write();
        let mut out = Vec::new();
        write_pdu(&mut out, bhs, &ahs, &self.data, header_digest, data_digest);
        out
    }

    /// Decodes one complete initiator PDU from the front of `buf`; returns it
    /// and the bytes consumed. Built on [`RequestHeader::parse`]; a digest
    /// mismatch gives `InvalidField("digest")`.
    pub fn decode(
        buf: &[u8],
        header_digest: bool,
        data_digest: bool,
    ) -> Result<(Request, usize), PduError> {
        let (header, data, used) =
            decode_frame(buf, header_digest, data_digest, RequestHeader::parse)?;
        let data = data.to_vec();
        Ok((Request { header, data }, used))
    }
}

// ---------------------------------------------------------------------------
// Target PDUs.
// ---------------------------------------------------------------------------

const EMPTY: &[u8] = &[];

/// StatSN, ExpCmdSN, MaxCmdSN at bytes 24..36 of every target PDU.
fn write_sns(b: &mut Bhs<[u8; BHS_LEN]>, stat_sn: u32, exp_cmd_sn: u32, max_cmd_sn: u32) {
    b.set_u32(bhs::STAT_SN, stat_sn);
    b.set_u32(bhs::EXP_CMD_SN, exp_cmd_sn);
    b.set_u32(bhs::MAX_CMD_SN, max_cmd_sn);
}

fn no_data(data: &[u8]) -> Result<(), PduError> {
    if data.is_empty() {
        Ok(())
    } else {
        Err(PduError::InvalidField("DataSegmentLength"))
    }
}

impl NopIn {
    fn write(&self) -> Bhs<[u8; BHS_LEN]> {
        let mut b = new_bhs(Opcode::NOP_IN, false, bhs::FINAL_BIT);
        b.set_lun_raw(self.lun);
        b.set_itt(self.itt);
        b.set_u32(bhs::TTT, self.ttt);
        write_sns(&mut b, self.stat_sn, self.exp_cmd_sn, self.max_cmd_sn);
        b
    }

    fn read(b: &BhsRef<'_>, data: &[u8]) -> Self {
        NopIn {
            lun: b.lun_raw(),
            itt: b.itt(),
            ttt: b.u32_at(bhs::TTT),
            stat_sn: b.u32_at(bhs::STAT_SN),
            exp_cmd_sn: b.u32_at(bhs::EXP_CMD_SN),
            max_cmd_sn: b.u32_at(bhs::MAX_CMD_SN),
            data: data.to_vec(),
        }
    }
}

/// SCSI Response data segment: SenseLength (2 bytes) then sense data
/// (§11.4.7.2); any response data after the sense is not modelled.
fn sense_segment(input: &[u8]) -> IResult<&[u8], &[u8]> {
    let (input, len) = be_u16(input)?;
    take(len)(input)
}

impl ScsiResponse {
    fn write(&self) -> (Bhs<[u8; BHS_LEN]>, Cow<'_, [u8]>) {
        use bhs::scsi_resp::*;
        let flags = bhs::FINAL_BIT
            | bit_if(self.bidi_overflow, BIDI_OVERFLOW_BIT)
            | bit_if(self.bidi_underflow, BIDI_UNDERFLOW_BIT)
            | bit_if(self.overflow, OVERFLOW_BIT)
            | bit_if(self.underflow, UNDERFLOW_BIT);
        let mut b = new_bhs(Opcode::SCSI_RESPONSE, false, flags);
        b.set_u8(RESPONSE, self.response);
        b.set_u8(STATUS, self.status);
        b.set_itt(self.itt);
        b.set_u32(SNACK_TAG, self.snack_tag);
        write_sns(&mut b, self.stat_sn, self.exp_cmd_sn, self.max_cmd_sn);
        b.set_u32(EXP_DATA_SN, self.exp_data_sn);
        b.set_u32(BIDI_RESIDUAL, self.bidi_residual);
        b.set_u32(RESIDUAL, self.residual);

        let data = if self.sense.is_empty() {
            Cow::Borrowed(EMPTY)
        } else {
            let sense = self
                .sense
                .get(..usize::from(u16::MAX))
                .unwrap_or(&self.sense);
            let mut data = Vec::with_capacity(2 + sense.len());
            data.extend_from_slice(&(sense.len() as u16).to_be_bytes());
            data.extend_from_slice(sense);
            Cow::Owned(data)
        };
        (b, data)
    }

    fn read(b: &BhsRef<'_>, data: &[u8]) -> Result<Self, PduError> {
        use bhs::scsi_resp::*;
        let sense = if data.is_empty() {
            Vec::new()
        } else {
            let (_, sense) =
                sense_segment(data).map_err(|_| PduError::InvalidField("SenseLength"))?;
            sense.to_vec()
        };
        let flags = b.flags();
        Ok(ScsiResponse {
            bidi_overflow: flag(flags, BIDI_OVERFLOW_BIT),
            bidi_underflow: flag(flags, BIDI_UNDERFLOW_BIT),
            overflow: flag(flags, OVERFLOW_BIT),
            underflow: flag(flags, UNDERFLOW_BIT),
            response: b.u8_at(RESPONSE),
            status: b.u8_at(STATUS),
            itt: b.itt(),
            snack_tag: b.u32_at(SNACK_TAG),
            stat_sn: b.u32_at(bhs::STAT_SN),
            exp_cmd_sn: b.u32_at(bhs::EXP_CMD_SN),
            max_cmd_sn: b.u32_at(bhs::MAX_CMD_SN),
            exp_data_sn: b.u32_at(EXP_DATA_SN),
            bidi_residual: b.u32_at(BIDI_RESIDUAL),
            residual: b.u32_at(RESIDUAL),
            sense,
        })
    }
}

impl TaskMgmtResponse {
    fn write(&self) -> Bhs<[u8; BHS_LEN]> {
        let mut b = new_bhs(Opcode::TASK_MGMT_RESPONSE, false, bhs::FINAL_BIT);
        b.set_u8(bhs::tmf::RESPONSE, self.response.0);
        b.set_itt(self.itt);
        write_sns(&mut b, self.stat_sn, self.exp_cmd_sn, self.max_cmd_sn);
        b
    }

    fn read(b: &BhsRef<'_>, data: &[u8]) -> Result<Self, PduError> {
        no_data(data)?;
        Ok(TaskMgmtResponse {
            response: TmfResult(b.u8_at(bhs::tmf::RESPONSE)),
            itt: b.itt(),
            stat_sn: b.u32_at(bhs::STAT_SN),
            exp_cmd_sn: b.u32_at(bhs::EXP_CMD_SN),
            max_cmd_sn: b.u32_at(bhs::MAX_CMD_SN),
        })
    }
}

impl LoginResponse {
    fn write(&self) -> Bhs<[u8; BHS_LEN]> {
        use bhs::login::*;
        let flags = login_flags(self.transit, self.cont, self.csg, self.nsg);
        let mut b = new_bhs(Opcode::LOGIN_RESPONSE, false, flags);
        b.set_u8(VERSION_MAX, self.version_max);
        b.set_u8(VERSION_MIN, self.version_active);
        b.set_bytes(ISID, &self.isid);
        b.set_u16(TSIH, self.tsih);
        b.set_itt(self.itt);
        write_sns(&mut b, self.stat_sn, self.exp_cmd_sn, self.max_cmd_sn);
        b.set_u8(STATUS_CLASS, self.status.class());
        b.set_u8(STATUS_DETAIL, self.status.detail());
        b
    }

    fn read(b: &BhsRef<'_>, data: &[u8]) -> Self {
        use bhs::login::*;
        let flags = b.flags();
        let (csg, nsg) = login_stages(flags);
        let status = u16::from_be_bytes([b.u8_at(STATUS_CLASS), b.u8_at(STATUS_DETAIL)]);
        LoginResponse {
            transit: flag(flags, TRANSIT_BIT),
            cont: flag(flags, CONTINUE_BIT),
            csg,
            nsg,
            version_max: b.u8_at(VERSION_MAX),
            version_active: b.u8_at(VERSION_MIN),
            isid: isid(b),
            tsih: b.u16_at(TSIH),
            itt: b.itt(),
            stat_sn: b.u32_at(bhs::STAT_SN),
            exp_cmd_sn: b.u32_at(bhs::EXP_CMD_SN),
            max_cmd_sn: b.u32_at(bhs::MAX_CMD_SN),
            status: LoginStatus(status),
            data: data.to_vec(),
        }
    }
}

impl TextResponse {
    fn write(&self) -> Bhs<[u8; BHS_LEN]> {
        let flags =
            bit_if(self.final_bit, bhs::FINAL_BIT) | bit_if(self.cont, bhs::text::CONTINUE_BIT);
        let mut b = new_bhs(Opcode::TEXT_RESPONSE, false, flags);
        b.set_lun_raw(self.lun);
        b.set_itt(self.itt);
        b.set_u32(bhs::TTT, self.ttt);
        write_sns(&mut b, self.stat_sn, self.exp_cmd_sn, self.max_cmd_sn);
        b
    }

    fn read(b: &BhsRef<'_>, data: &[u8]) -> Self {
        TextResponse {
            final_bit: b.final_bit(),
            cont: flag(b.flags(), bhs::text::CONTINUE_BIT),
            lun: b.lun_raw(),
            itt: b.itt(),
            ttt: b.u32_at(bhs::TTT),
            stat_sn: b.u32_at(bhs::STAT_SN),
            exp_cmd_sn: b.u32_at(bhs::EXP_CMD_SN),
            max_cmd_sn: b.u32_at(bhs::MAX_CMD_SN),
            data: data.to_vec(),
        }
    }
}

impl DataIn {
    /// The wire bytes around a Data-In payload that stays in the caller's
    /// buffer, as a [`Framing`] (BHS + header digest; padding + data digest),
    /// `self.data` is ignored. Lets a driver send a read's buffer without
    /// copying it, and costs no allocation.
    pub fn encode_parts(&self, payload: &[u8], header_digest: bool, data_digest: bool) -> Framing {
        let len = payload.len().min(MAX_DATA_SEGMENT_LEN);
        let mut bhs = self.write();
        bhs.set_total_ahs_len_bytes(0);
        bhs.set_data_segment_len(len as u32);
        let mut f = Framing::default();
        let header = bhs.into_array();
        f.head[..BHS_LEN].copy_from_slice(&header);
        f.head_len = BHS_LEN;
        if header_digest {
            f.head[BHS_LEN..].copy_from_slice(&digest_wire_bytes(&header));
            f.head_len += DIGEST_LEN;
        }
        let pad_len = padded_len(len) - len;
        // The pad bytes are the zeros the trailer starts with.
        f.tail_len = pad_len;
        if data_digest && len > 0 {
            let payload = payload.get(..len).unwrap_or_default();
            let pad = [0u8; 3];
            let pad = pad.get(..pad_len).unwrap_or_default();
            let crc = crc32c::crc32c_append(crc32c::crc32c(payload), pad);
            if let Some(t) = f.tail.get_mut(pad_len..pad_len + DIGEST_LEN) {
                t.copy_from_slice(&crc.to_le_bytes());
                f.tail_len += DIGEST_LEN;
            }
        }
        f
    }

    /// O, U, Status, StatSN and Residual Count are written only with the S
    /// bit; without it they are reserved and go out as zero (§11.7.3).
    fn write(&self) -> Bhs<[u8; BHS_LEN]> {
        use bhs::data::*;
        let s = self.has_status;
        let flags = bit_if(self.final_bit, bhs::FINAL_BIT)
            | bit_if(self.ack, ACK_BIT)
            | bit_if(s && self.overflow, OVERFLOW_BIT)
            | bit_if(s && self.underflow, UNDERFLOW_BIT)
            | bit_if(s, STATUS_BIT);
        let mut b = new_bhs(Opcode::DATA_IN, false, flags);
        b.set_lun_raw(self.lun);
        b.set_itt(self.itt);
        b.set_u32(bhs::TTT, self.ttt);
        if s {
            b.set_u8(STATUS, self.status);
            b.set_u32(bhs::STAT_SN, self.stat_sn);
            b.set_u32(RESIDUAL, self.residual);
        }
        b.set_u32(bhs::EXP_CMD_SN, self.exp_cmd_sn);
        b.set_u32(bhs::MAX_CMD_SN, self.max_cmd_sn);
        b.set_u32(DATA_SN, self.data_sn);
        b.set_u32(BUFFER_OFFSET, self.buffer_offset);
        b
    }

    /// Fields valid only with S read as zero without it; S without F is an
    /// error (§11.7.3).
    fn read(b: &BhsRef<'_>, data: &[u8]) -> Result<Self, PduError> {
        use bhs::data::*;
        let flags = b.flags();
        let s = flag(flags, STATUS_BIT);
        if s && !b.final_bit() {
            return Err(PduError::InvalidField("Data-In S bit without F bit"));
        }
        let if_s = |v: u32| if s { v } else { 0 };
        Ok(DataIn {
            final_bit: b.final_bit(),
            ack: flag(flags, ACK_BIT),
            overflow: s && flag(flags, OVERFLOW_BIT),
            underflow: s && flag(flags, UNDERFLOW_BIT),
            has_status: s,
            status: if s { b.u8_at(STATUS) } else { 0 },
            lun: b.lun_raw(),
            itt: b.itt(),
            ttt: b.u32_at(bhs::TTT),
            stat_sn: if_s(b.u32_at(bhs::STAT_SN)),
            exp_cmd_sn: b.u32_at(bhs::EXP_CMD_SN),
            max_cmd_sn: b.u32_at(bhs::MAX_CMD_SN),
            data_sn: b.u32_at(DATA_SN),
            buffer_offset: b.u32_at(BUFFER_OFFSET),
            residual: if_s(b.u32_at(RESIDUAL)),
            data: data.to_vec(),
        })
    }
}

impl LogoutResponse {
    fn write(&self) -> Bhs<[u8; BHS_LEN]> {
        use bhs::logout::*;
        let mut b = new_bhs(Opcode::LOGOUT_RESPONSE, false, bhs::FINAL_BIT);
        b.set_u8(RESPONSE, self.response);
        b.set_itt(self.itt);
        write_sns(&mut b, self.stat_sn, self.exp_cmd_sn, self.max_cmd_sn);
        b.set_u16(TIME2WAIT, self.time2wait);
        b.set_u16(TIME2RETAIN, self.time2retain);
        b
    }

    fn read(b: &BhsRef<'_>, data: &[u8]) -> Result<Self, PduError> {
        use bhs::logout::*;
        no_data(data)?;
        Ok(LogoutResponse {
            response: b.u8_at(RESPONSE),
            itt: b.itt(),
            stat_sn: b.u32_at(bhs::STAT_SN),
            exp_cmd_sn: b.u32_at(bhs::EXP_CMD_SN),
            max_cmd_sn: b.u32_at(bhs::MAX_CMD_SN),
            time2wait: b.u16_at(TIME2WAIT),
            time2retain: b.u16_at(TIME2RETAIN),
        })
    }
}

impl R2t {
    fn write(&self) -> Bhs<[u8; BHS_LEN]> {
        use bhs::r2t::*;
        let mut b = new_bhs(Opcode::R2T, false, bhs::FINAL_BIT);
        b.set_lun_raw(self.lun);
        b.set_itt(self.itt);
        b.set_u32(bhs::TTT, self.ttt);
        write_sns(&mut b, self.stat_sn, self.exp_cmd_sn, self.max_cmd_sn);
        b.set_u32(R2T_SN, self.r2t_sn);
        b.set_u32(BUFFER_OFFSET, self.buffer_offset);
        b.set_u32(DESIRED_LEN, self.desired_len);
        b
    }

    fn read(b: &BhsRef<'_>, data: &[u8]) -> Result<Self, PduError> {
        use bhs::r2t::*;
        no_data(data)?;
        Ok(R2t {
            lun: b.lun_raw(),
            itt: b.itt(),
            ttt: b.u32_at(bhs::TTT),
            stat_sn: b.u32_at(bhs::STAT_SN),
            exp_cmd_sn: b.u32_at(bhs::EXP_CMD_SN),
            max_cmd_sn: b.u32_at(bhs::MAX_CMD_SN),
            r2t_sn: b.u32_at(R2T_SN),
            buffer_offset: b.u32_at(BUFFER_OFFSET),
            desired_len: b.u32_at(DESIRED_LEN),
        })
    }
}

impl AsyncMessage {
    /// The data segment goes out as given (for a SCSI async event the caller
    /// includes the 2-byte SenseLength, §11.9.4).
    fn write(&self) -> Bhs<[u8; BHS_LEN]> {
        use bhs::async_msg::*;
        let mut b = new_bhs(Opcode::ASYNC_MESSAGE, false, bhs::FINAL_BIT);
        b.set_lun_raw(self.lun);
        b.set_itt(RESERVED_TAG);
        write_sns(&mut b, self.stat_sn, self.exp_cmd_sn, self.max_cmd_sn);
        b.set_u8(EVENT, self.event);
        b.set_u8(VCODE, self.vcode);
        b.set_u16(PARAM1, self.param1);
        b.set_u16(PARAM2, self.param2);
        b.set_u16(PARAM3, self.param3);
        b
    }

    fn read(b: &BhsRef<'_>, data: &[u8]) -> Self {
        use bhs::async_msg::*;
        AsyncMessage {
            lun: b.lun_raw(),
            stat_sn: b.u32_at(bhs::STAT_SN),
            exp_cmd_sn: b.u32_at(bhs::EXP_CMD_SN),
            max_cmd_sn: b.u32_at(bhs::MAX_CMD_SN),
            event: b.u8_at(EVENT),
            vcode: b.u8_at(VCODE),
            param1: b.u16_at(PARAM1),
            param2: b.u16_at(PARAM2),
            param3: b.u16_at(PARAM3),
            data: data.to_vec(),
        }
    }
}

impl Reject {
    fn write(&self) -> Bhs<[u8; BHS_LEN]> {
        use bhs::reject::*;
        let mut b = new_bhs(Opcode::REJECT, false, bhs::FINAL_BIT);
        b.set_u8(REASON, self.reason.0);
        b.set_itt(RESERVED_TAG);
        write_sns(&mut b, self.stat_sn, self.exp_cmd_sn, self.max_cmd_sn);
        b.set_u32(DATA_SN, self.data_sn);
        b
    }

    fn read(b: &BhsRef<'_>, data: &[u8]) -> Self {
        use bhs::reject::*;
        Reject {
            reason: RejectReason(b.u8_at(REASON)),
            stat_sn: b.u32_at(bhs::STAT_SN),
            exp_cmd_sn: b.u32_at(bhs::EXP_CMD_SN),
            max_cmd_sn: b.u32_at(bhs::MAX_CMD_SN),
            data_sn: b.u32_at(DATA_SN),
            data: data.to_vec(),
        }
    }
}

impl Reply {
    pub fn opcode(&self) -> Opcode {
        match self {
            Reply::NopIn(_) => Opcode::NOP_IN,
            Reply::ScsiResponse(_) => Opcode::SCSI_RESPONSE,
            Reply::TaskMgmtResponse(_) => Opcode::TASK_MGMT_RESPONSE,
            Reply::LoginResponse(_) => Opcode::LOGIN_RESPONSE,
            Reply::TextResponse(_) => Opcode::TEXT_RESPONSE,
            Reply::DataIn(_) => Opcode::DATA_IN,
            Reply::LogoutResponse(_) => Opcode::LOGOUT_RESPONSE,
            Reply::R2t(_) => Opcode::R2T,
            Reply::AsyncMessage(_) => Opcode::ASYNC_MESSAGE,
            Reply::Reject(_) => Opcode::REJECT,
        }
    }

    /// Appends the wire bytes: BHS, header digest (if `header_digest`), data
    /// segment + padding, data digest (if `data_digest` and the data segment
    /// is not empty). ScsiResponse's data segment is SenseLength + sense, only
    /// when there is sense; Reject's is the rejected BHS.
    pub fn encode_into<B: PduSink>(&self, out: &mut B, header_digest: bool, data_digest: bool) {
        let (bhs, data): (_, Cow<'_, [u8]>) = match self {
            Reply::NopIn(p) => (p.write(), Cow::Borrowed(p.data.as_slice())),
            Reply::ScsiResponse(p) => p.write(),
            Reply::TaskMgmtResponse(p) => (p.write(), Cow::Borrowed(EMPTY)),
            Reply::LoginResponse(p) => (p.write(), Cow::Borrowed(p.data.as_slice())),
            Reply::TextResponse(p) => (p.write(), Cow::Borrowed(p.data.as_slice())),
            Reply::DataIn(p) => (p.write(), Cow::Borrowed(p.data.as_slice())),
            Reply::LogoutResponse(p) => (p.write(), Cow::Borrowed(EMPTY)),
            Reply::R2t(p) => (p.write(), Cow::Borrowed(EMPTY)),
            Reply::AsyncMessage(p) => (p.write(), Cow::Borrowed(p.data.as_slice())),
            Reply::Reject(p) => (p.write(), Cow::Borrowed(p.data.as_slice())),
        };
        write_pdu(out, bhs, &[], &data, header_digest, data_digest);
    }

    /// The wire bytes in a new buffer; see [`Reply::encode_into`].
    pub fn encode(&self, header_digest: bool, data_digest: bool) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out, header_digest, data_digest);
        out
    }

    /// Decodes one complete target PDU from the front of `buf`; returns it and
    /// the bytes consumed. `Err(Incomplete(n))` when more bytes are needed; a
    /// digest mismatch gives `InvalidField("digest")`. Target PDUs carry no
    /// AHS; one that does gives `BadAhs`.
    pub fn decode(
        buf: &[u8],
        header_digest: bool,
        data_digest: bool,
    ) -> Result<(Reply, usize), PduError> {
        let check_header = |bhs: &[u8; BHS_LEN], ahs: &[u8]| {
            let opcode = Bhs::from_array(bhs).opcode();
            if !matches!(
                opcode,
                Opcode::NOP_IN
                    | Opcode::SCSI_RESPONSE
                    | Opcode::TASK_MGMT_RESPONSE
                    | Opcode::LOGIN_RESPONSE
                    | Opcode::TEXT_RESPONSE
                    | Opcode::DATA_IN
                    | Opcode::LOGOUT_RESPONSE
                    | Opcode::R2T
                    | Opcode::ASYNC_MESSAGE
                    | Opcode::REJECT
            ) {
                return Err(PduError::UnknownOpcode(opcode.0));
            }
            if !ahs.is_empty() {
                return Err(PduError::BadAhs);
            }
            Ok(*bhs)
        };
        let (bhs, data, used) = decode_frame(buf, header_digest, data_digest, check_header)?;
        let b = Bhs::from_array(&bhs);
        let reply = match b.opcode() {
            Opcode::NOP_IN => Reply::NopIn(NopIn::read(&b, data)),
            Opcode::SCSI_RESPONSE => Reply::ScsiResponse(ScsiResponse::read(&b, data)?),
            Opcode::TASK_MGMT_RESPONSE => {
                Reply::TaskMgmtResponse(TaskMgmtResponse::read(&b, data)?)
            }
            Opcode::LOGIN_RESPONSE => Reply::LoginResponse(LoginResponse::read(&b, data)),
            Opcode::TEXT_RESPONSE => Reply::TextResponse(TextResponse::read(&b, data)),
            Opcode::DATA_IN => Reply::DataIn(DataIn::read(&b, data)?),
            Opcode::LOGOUT_RESPONSE => Reply::LogoutResponse(LogoutResponse::read(&b, data)?),
            Opcode::R2T => Reply::R2t(R2t::read(&b, data)?),
            Opcode::ASYNC_MESSAGE => Reply::AsyncMessage(AsyncMessage::read(&b, data)),
            Opcode::REJECT => Reply::Reject(Reject::read(&b, data)),
            other => return Err(PduError::UnknownOpcode(other.0)),
        };
        Ok((reply, used))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding() {
        let cases = [(0, 0), (1, 4), (3, 4), (4, 4), (5, 8), (8191, 8192)];
        for (n, want) in cases {
            assert_eq!(padded_len(n), want, "padded_len({n})");
        }
        assert_eq!(padded_len(usize::MAX), usize::MAX);
    }

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

    #[test]
    fn ahs_rejections() {
        // Extended CDB with no CDB bytes (AHSLength 1 = just the reserved byte).
        assert_eq!(
            parse_command_ahs(&[0, 1, 1, 0]).map(|_| ()),
            Err(PduError::BadAhs)
        );
        // Unknown AHS type.
        assert_eq!(
            parse_command_ahs(&[0, 1, 7, 0]).map(|_| ()),
            Err(PduError::BadAhs)
        );
        // Bidi read length of the wrong size.
        assert_eq!(
            parse_command_ahs(&[0, 4, 2, 0, 0, 0, 1, 0]).map(|_| ()),
            Err(PduError::BadAhs)
        );
        // Two bidi AHS.
        let two = [0, 5, 2, 0, 0, 0, 0, 1, 0, 5, 2, 0, 0, 0, 0, 2];
        assert_eq!(parse_command_ahs(&two).map(|_| ()), Err(PduError::BadAhs));
        // Length running past the end.
        assert_eq!(
            parse_command_ahs(&[0, 9, 1, 0, 1, 2, 3, 4]).map(|_| ()),
            Err(PduError::BadAhs)
        );
    }

    #[test]
    fn wire_lengths() {
        let mut b = Bhs::zeroed();
        b.set_total_ahs_len_bytes(8);
        b.set_data_segment_len(5);
        assert_eq!(b.header_wire_len(false), 56);
        assert_eq!(b.header_wire_len(true), 60);
        assert_eq!(b.data_wire_len(false), 8);
        assert_eq!(b.data_wire_len(true), 12);
        assert_eq!(b.pdu_wire_len(true, true), 72);
        b.set_data_segment_len(0);
        assert_eq!(b.data_wire_len(true), 0);
    }
}
