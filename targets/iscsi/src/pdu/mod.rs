//! iSCSI PDUs (RFC 7143 §11), at two levels:
//!
//! - [`bhs`]: a checked view over the 48-byte Basic Header Segment with field
//!   accessors, no allocation;
//! - the typed enums here: [`Request`] for what an initiator sends and
//!   [`Reply`] for what a target sends.
//!
//! Parsing is two-step so that the header can be validated (opcode against
//! phase, DataSegmentLength against negotiated limits) *before* the data
//! segment is read or allocated: [`RequestHeader::parse`] decodes a BHS, and
//! the data segment is attached afterwards.

pub mod bhs;
mod codec;

pub use codec::*;

/// Length of the Basic Header Segment.
pub const BHS_LEN: usize = 48;

/// iSCSI opcode (RFC 7143 §11.2.1.2). Open: unknown values are representable
/// and get a Reject, never a panic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Opcode(pub u8);

impl Opcode {
    // Initiator opcodes.
    pub const NOP_OUT: Opcode = Opcode(0x00);
    pub const SCSI_COMMAND: Opcode = Opcode(0x01);
    pub const TASK_MGMT_REQUEST: Opcode = Opcode(0x02);
    pub const LOGIN_REQUEST: Opcode = Opcode(0x03);
    pub const TEXT_REQUEST: Opcode = Opcode(0x04);
    pub const DATA_OUT: Opcode = Opcode(0x05);
    pub const LOGOUT_REQUEST: Opcode = Opcode(0x06);
    pub const SNACK_REQUEST: Opcode = Opcode(0x10);
    // Target opcodes.
    pub const NOP_IN: Opcode = Opcode(0x20);
    pub const SCSI_RESPONSE: Opcode = Opcode(0x21);
    pub const TASK_MGMT_RESPONSE: Opcode = Opcode(0x22);
    pub const LOGIN_RESPONSE: Opcode = Opcode(0x23);
    pub const TEXT_RESPONSE: Opcode = Opcode(0x24);
    pub const DATA_IN: Opcode = Opcode(0x25);
    pub const LOGOUT_RESPONSE: Opcode = Opcode(0x26);
    pub const R2T: Opcode = Opcode(0x31);
    pub const ASYNC_MESSAGE: Opcode = Opcode(0x32);
    pub const REJECT: Opcode = Opcode(0x3f);
}

/// Reject reason codes (RFC 7143 §11.17.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RejectReason(pub u8);

impl RejectReason {
    pub const DATA_DIGEST_ERROR: RejectReason = RejectReason(0x02);
    pub const SNACK_REJECT: RejectReason = RejectReason(0x03);
    pub const PROTOCOL_ERROR: RejectReason = RejectReason(0x04);
    pub const COMMAND_NOT_SUPPORTED: RejectReason = RejectReason(0x05);
    pub const IMMEDIATE_COMMAND_REJECT: RejectReason = RejectReason(0x06);
    pub const TASK_IN_PROGRESS: RejectReason = RejectReason(0x07);
    pub const INVALID_DATA_ACK: RejectReason = RejectReason(0x08);
    pub const INVALID_PDU_FIELD: RejectReason = RejectReason(0x09);
    pub const LONG_OPERATION_REJECT: RejectReason = RejectReason(0x0a);
    pub const DEPRECATED: RejectReason = RejectReason(0x0b);
    pub const WAITING_FOR_LOGOUT: RejectReason = RejectReason(0x0c);
}

/// Login stage (CSG/NSG, RFC 7143 §11.12.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Stage(pub u8);

impl Stage {
    pub const SECURITY: Stage = Stage(0);
    pub const OPERATIONAL: Stage = Stage(1);
    pub const FULL_FEATURE: Stage = Stage(3);
}

/// Login status class and detail (RFC 7143 §11.13.5), as one u16: class << 8 | detail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LoginStatus(pub u16);

impl LoginStatus {
    pub const SUCCESS: LoginStatus = LoginStatus(0x0000);
    pub const TARGET_MOVED_TEMPORARILY: LoginStatus = LoginStatus(0x0101);
    pub const TARGET_MOVED_PERMANENTLY: LoginStatus = LoginStatus(0x0102);
    pub const INITIATOR_ERROR: LoginStatus = LoginStatus(0x0200);
    pub const AUTHENTICATION_FAILURE: LoginStatus = LoginStatus(0x0201);
    pub const AUTHORIZATION_FAILURE: LoginStatus = LoginStatus(0x0202);
    pub const NOT_FOUND: LoginStatus = LoginStatus(0x0203);
    pub const TARGET_REMOVED: LoginStatus = LoginStatus(0x0204);
    pub const UNSUPPORTED_VERSION: LoginStatus = LoginStatus(0x0205);
    pub const TOO_MANY_CONNECTIONS: LoginStatus = LoginStatus(0x0206);
    pub const MISSING_PARAMETER: LoginStatus = LoginStatus(0x0207);
    pub const CANT_INCLUDE_IN_SESSION: LoginStatus = LoginStatus(0x0208);
    pub const SESSION_TYPE_NOT_SUPPORTED: LoginStatus = LoginStatus(0x0209);
    pub const SESSION_DOES_NOT_EXIST: LoginStatus = LoginStatus(0x020a);
    pub const INVALID_DURING_LOGIN: LoginStatus = LoginStatus(0x020b);
    pub const TARGET_ERROR: LoginStatus = LoginStatus(0x0300);
    pub const SERVICE_UNAVAILABLE: LoginStatus = LoginStatus(0x0301);
    pub const OUT_OF_RESOURCES: LoginStatus = LoginStatus(0x0302);

    pub fn class(self) -> u8 {
        (self.0 >> 8) as u8
    }
    pub fn detail(self) -> u8 {
        self.0 as u8
    }
}

/// Task management function codes (RFC 7143 §11.5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TmfCode(pub u8);

impl TmfCode {
    pub const ABORT_TASK: TmfCode = TmfCode(1);
    pub const ABORT_TASK_SET: TmfCode = TmfCode(2);
    pub const CLEAR_ACA: TmfCode = TmfCode(3);
    pub const CLEAR_TASK_SET: TmfCode = TmfCode(4);
    pub const LOGICAL_UNIT_RESET: TmfCode = TmfCode(5);
    pub const TARGET_WARM_RESET: TmfCode = TmfCode(6);
    pub const TARGET_COLD_RESET: TmfCode = TmfCode(7);
    pub const TASK_REASSIGN: TmfCode = TmfCode(8);
}

/// Task management response codes (RFC 7143 §11.6.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TmfResult(pub u8);

impl TmfResult {
    pub const COMPLETE: TmfResult = TmfResult(0);
    pub const TASK_DOES_NOT_EXIST: TmfResult = TmfResult(1);
    pub const LUN_DOES_NOT_EXIST: TmfResult = TmfResult(2);
    pub const TASK_STILL_ALLEGIANT: TmfResult = TmfResult(3);
    pub const REASSIGNMENT_NOT_SUPPORTED: TmfResult = TmfResult(4);
    pub const NOT_SUPPORTED: TmfResult = TmfResult(5);
    pub const AUTHORIZATION_FAILED: TmfResult = TmfResult(6);
    pub const REJECTED: TmfResult = TmfResult(255);
}

/// SCSI Command task attribute field (RFC 7143 §11.3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TaskAttribute(pub u8);

impl TaskAttribute {
    pub const UNTAGGED: TaskAttribute = TaskAttribute(0);
    pub const SIMPLE: TaskAttribute = TaskAttribute(1);
    pub const ORDERED: TaskAttribute = TaskAttribute(2);
    pub const HEAD_OF_QUEUE: TaskAttribute = TaskAttribute(3);
    pub const ACA: TaskAttribute = TaskAttribute(4);
}

/// Reserved Initiator Task Tag value (RFC 7143 §11.18).
pub const RESERVED_TAG: u32 = 0xffff_ffff;

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
    /// 0 close session, 1 close connection, 2 remove connection for recovery.
    pub reason: u8,
    pub itt: u32,
    pub cid: u16,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
}

/// SNACK Request (§11.16).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnackRequest {
    pub snack_type: u8,
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
    pub response: u8,
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
    /// 0 SCSI async event, 1 logout request, 2 drop connection, 3 drop all,
    /// 4 renegotiate, 255 vendor.
    pub event: u8,
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

/// Errors decoding a PDU. The connection maps each to a Reject reason or a
/// connection close in one place.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PduError {
    #[error("need {0} more bytes")]
    Incomplete(usize),
    #[error("unknown or unsupported opcode {0:#04x}")]
    UnknownOpcode(u8),
    #[error("reserved field or bit set in {0}")]
    Reserved(&'static str),
    #[error("invalid field: {0}")]
    InvalidField(&'static str),
    #[error("malformed AHS")]
    BadAhs,
}
