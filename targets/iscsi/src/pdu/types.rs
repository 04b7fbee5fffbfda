//! The typed PDUs: one struct per PDU with its header fields, gathered in
//! [`RequestHeader`]/[`Request`] (initiator to target) and [`Reply`] (target
//! to initiator). Plain data; the wire form is in the codec.

use super::codes::{
    AsyncEvent, LoginStatus, LogoutReason, LogoutResponseCode, RejectReason, SnackType, Stage,
    TaskAttribute, TmfCode, TmfResult,
};

// ---------------------------------------------------------------------------
// Initiator -> target headers (RFC 7143 §11). Data segments are carried
// separately so headers can be validated before any payload is read.
// ---------------------------------------------------------------------------

/// NOP-Out (§11.18).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NopOut {
    pub immediate: bool,
    pub lun: u64,
    pub itt: u32,
    pub ttt: u32,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
}

/// SCSI Command (§11.3). The CDB is the 16 bytes of the BHS plus any
/// extended CDB AHS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScsiCommand {
    pub immediate: bool,
    /// F bit: no unsolicited Data-Out PDUs follow.
    pub final_bit: bool,
    pub read: bool,
    pub write: bool,
    pub attr: TaskAttribute,
    pub lun: u64,
    pub itt: u32,
    pub expected_data_len: u32,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
    pub cdb: rustgt_scsi::CdbBytes,
    /// Expected Bidirectional Read Data Length AHS, when present.
    pub bidi_read_len: Option<u32>,
}

/// Task Management Function Request (§11.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskMgmtRequest {
    pub immediate: bool,
    pub function: TmfCode,
    pub lun: u64,
    pub itt: u32,
    pub referenced_tag: u32,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
    pub ref_cmd_sn: u32,
    pub exp_data_sn: u32,
}

/// Login Request (§11.12).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginRequest {
    pub transit: bool,
    pub cont: bool,
    pub csg: Stage,
    pub nsg: Stage,
    pub version_max: u8,
    pub version_min: u8,
    pub isid: [u8; 6],
    pub tsih: u16,
    pub itt: u32,
    pub cid: u16,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
}

/// Text Request (§11.10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextRequest {
    pub immediate: bool,
    pub final_bit: bool,
    pub cont: bool,
    pub lun: u64,
    pub itt: u32,
    pub ttt: u32,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
}

/// SCSI Data-Out (§11.7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataOut {
    pub final_bit: bool,
    pub lun: u64,
    pub itt: u32,
    pub ttt: u32,
    pub exp_stat_sn: u32,
    pub data_sn: u32,
    pub buffer_offset: u32,
}

/// Logout Request (§11.14).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogoutRequest {
    pub immediate: bool,
    pub reason: LogoutReason,
    pub itt: u32,
    pub cid: u16,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
}

/// SNACK Request (§11.16).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnackRequest {
    pub snack_type: SnackType,
    pub lun: u64,
    pub itt: u32,
    pub ttt: u32,
    pub exp_stat_sn: u32,
    pub beg_run: u32,
    pub run_length: u32,
}

/// A decoded initiator BHS (plus AHS), before its data segment is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestHeader {
    NopOut(NopOut),
    ScsiCommand(ScsiCommand),
    TaskMgmt(TaskMgmtRequest),
    Login(LoginRequest),
    Text(TextRequest),
    DataOut(DataOut),
    Logout(LogoutRequest),
    Snack(SnackRequest),
}

/// A whole initiator PDU: header plus data segment (padding and digests removed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub header: RequestHeader,
    pub data: Vec<u8>,
}

// ---------------------------------------------------------------------------
// Target -> initiator PDUs.
// ---------------------------------------------------------------------------

/// NOP-In (§11.19).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NopIn {
    pub lun: u64,
    pub itt: u32,
    pub ttt: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub data: Vec<u8>,
}

/// SCSI Response (§11.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScsiResponse {
    pub bidi_overflow: bool,
    pub bidi_underflow: bool,
    pub overflow: bool,
    pub underflow: bool,
    /// 0x00 command completed at target, 0x01 target failure.
    pub response: u8,
    pub status: u8,
    pub itt: u32,
    pub snack_tag: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub exp_data_sn: u32,
    pub bidi_residual: u32,
    pub residual: u32,
    /// Sense data without the 2-byte SenseLength prefix (the codec adds it).
    pub sense: Vec<u8>,
}

/// Task Management Function Response (§11.6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskMgmtResponse {
    pub response: TmfResult,
    pub itt: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
}

/// Login Response (§11.13).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginResponse {
    pub transit: bool,
    pub cont: bool,
    pub csg: Stage,
    pub nsg: Stage,
    pub version_max: u8,
    pub version_active: u8,
    pub isid: [u8; 6],
    pub tsih: u16,
    pub itt: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub status: LoginStatus,
    pub data: Vec<u8>,
}

/// Text Response (§11.11).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextResponse {
    pub final_bit: bool,
    pub cont: bool,
    pub lun: u64,
    pub itt: u32,
    pub ttt: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub data: Vec<u8>,
}

/// SCSI Data-In (§11.7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataIn {
    pub final_bit: bool,
    pub ack: bool,
    pub overflow: bool,
    pub underflow: bool,
    /// S bit: `status` and `stat_sn` are valid.
    pub has_status: bool,
    pub status: u8,
    pub lun: u64,
    pub itt: u32,
    pub ttt: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub data_sn: u32,
    pub buffer_offset: u32,
    pub residual: u32,
    pub data: Vec<u8>,
}

/// Logout Response (§11.15).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogoutResponse {
    pub response: LogoutResponseCode,
    pub itt: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub time2wait: u16,
    pub time2retain: u16,
}

/// Ready To Transfer (§11.8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct R2t {
    pub lun: u64,
    pub itt: u32,
    pub ttt: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub r2t_sn: u32,
    pub buffer_offset: u32,
    pub desired_len: u32,
}

/// Asynchronous Message (§11.9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AsyncMessage {
    pub lun: u64,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub event: AsyncEvent,
    pub vcode: u8,
    pub param1: u16,
    pub param2: u16,
    pub param3: u16,
    pub data: Vec<u8>,
}

/// Reject (§11.17). `data` is the complete BHS of the rejected PDU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reject {
    pub reason: RejectReason,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub data_sn: u32,
    pub data: Vec<u8>,
}

/// A target PDU ready to encode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    NopIn(NopIn),
    ScsiResponse(ScsiResponse),
    TaskMgmtResponse(TaskMgmtResponse),
    LoginResponse(LoginResponse),
    TextResponse(TextResponse),
    DataIn(DataIn),
    LogoutResponse(LogoutResponse),
    R2t(R2t),
    AsyncMessage(AsyncMessage),
    Reject(Reject),
}
