//! Initiator PDUs (NOP-Out, SCSI Command, Task Management, Login, Text,
//! Data-Out, Logout, SNACK) to and from their BHS, and [`RequestHeader`] /
//! [`Request`] decoding and encoding.

use crate::pdu::bhs::{self, Bhs, BHS_LEN};
use crate::pdu::codes::{LogoutReason, Opcode, SnackType, TaskAttribute, TmfCode};
use crate::pdu::error::PduError;
use crate::pdu::types::{
    DataOut, LoginRequest, LogoutRequest, NopOut, Request, RequestHeader, ScsiCommand,
    SnackRequest, TaskMgmtRequest, TextRequest,
};

use super::ahs::{
    parse_command_ahs, push_ahs, AHS_TYPE_BIDI_READ_LEN, AHS_TYPE_EXTENDED_CDB, MAX_CDB_LEN,
};
use super::fields::{bit_if, flag, isid, login_flags, login_stages, new_bhs, BhsRef};
use super::frame::{decode_frame, write_pdu};

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
            reason: LogoutReason(b.flags() & REASON_MASK),
            itt: b.itt(),
            cid: b.u16_at(CID),
            cmd_sn: b.u32_at(bhs::CMD_SN),
            exp_stat_sn: b.u32_at(bhs::EXP_STAT_SN),
        }
    }

    fn write(&self) -> Bhs<[u8; BHS_LEN]> {
        use bhs::logout::*;
        let flags = bhs::FINAL_BIT | (self.reason.0 & REASON_MASK);
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
            snack_type: SnackType(b.flags() & TYPE_MASK),
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
        let flags = bhs::FINAL_BIT | (self.snack_type.0 & TYPE_MASK);
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

    /// The opcode of this header's PDU.
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

    /// The Initiator Task Tag (every request PDU has one).
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

    /// ExpStatSN: the initiator acknowledges every status before it.
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
