//! Target PDUs (NOP-In, SCSI Response, Task Management Response, Login and
//! Text Responses, Data-In, Logout Response, R2T, Async Message, Reject) to
//! and from their BHS, and [`Reply`] encoding and decoding.

use std::borrow::Cow;

use nom::bytes::complete::take;
use nom::number::complete::be_u16;
use nom::IResult;

use crate::pdu::bhs::{self, Bhs, BHS_LEN};
use crate::pdu::codes::{
    AsyncEvent, LoginStatus, LogoutResponseCode, Opcode, RejectReason, TmfResult, RESERVED_TAG,
};
use crate::pdu::error::PduError;
use crate::pdu::types::{
    AsyncMessage, DataIn, LoginResponse, LogoutResponse, NopIn, R2t, Reject, Reply, ScsiResponse,
    TaskMgmtResponse, TextResponse,
};

use super::fields::{
    bit_if, flag, isid, login_flags, login_stages, new_bhs, no_data, write_sns, BhsRef, EMPTY,
};
use super::frame::{decode_frame, write_pdu, Framing, PduSink, MAX_DATA_SEGMENT_LEN};

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
        let payload = payload.get(..len).unwrap_or_default();
        Framing::around(&bhs.into_array(), payload, header_digest, data_digest)
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
        b.set_u8(RESPONSE, self.response.0);
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
            response: LogoutResponseCode(b.u8_at(RESPONSE)),
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
        b.set_u8(EVENT, self.event.0);
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
            event: AsyncEvent(b.u8_at(EVENT)),
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
    /// The opcode of this PDU.
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
