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
    /// I bit: an immediate command, delivered at once and not advancing CmdSN.
    pub immediate: bool,
    /// The raw 8-byte LUN field, as on the wire (see [`super::decode_lun`]).
    pub lun: u64,
    /// Initiator Task Tag: the initiator's tag of the task or request (0xFFFFFFFF: none).
    pub itt: u32,
    /// Target Transfer Tag: 0xFFFFFFFF for an initiator's ping, else the TTT of the NOP-In it
    /// answers.
    pub ttt: u32,
    /// CmdSN: the command's sequence number in the session.
    pub cmd_sn: u32,
    /// ExpStatSN: the initiator acknowledges every status before this StatSN.
    pub exp_stat_sn: u32,
}

/// SCSI Command (§11.3). The CDB is the 16 bytes of the BHS plus any
/// extended CDB AHS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScsiCommand {
    /// I bit: an immediate command, delivered at once and not advancing CmdSN.
    pub immediate: bool,
    /// F bit: no unsolicited Data-Out PDUs follow.
    pub final_bit: bool,
    /// R bit: the command reads (Data-In is expected).
    pub read: bool,
    /// W bit: the command writes (Data-Out is expected).
    pub write: bool,
    /// ATTR: the SCSI task attribute.
    pub attr: TaskAttribute,
    /// The raw 8-byte LUN field, as on the wire (see [`super::decode_lun`]).
    pub lun: u64,
    /// Initiator Task Tag: the command's tag (the SCSI core's task tag).
    pub itt: u32,
    /// Expected Data Transfer Length: the initiator's buffer size for the command, bytes.
    pub expected_data_len: u32,
    /// CmdSN: the command's sequence number in the session.
    pub cmd_sn: u32,
    /// ExpStatSN: the initiator acknowledges every status before this StatSN.
    pub exp_stat_sn: u32,
    /// The CDB (see the struct's note on its length).
    pub cdb: rustgt_scsi::CdbBytes,
    /// Expected Bidirectional Read Data Length AHS, when present.
    pub bidi_read_len: Option<u32>,
}

/// Task Management Function Request (§11.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskMgmtRequest {
    /// I bit: an immediate command, delivered at once and not advancing CmdSN.
    pub immediate: bool,
    /// The task management function code.
    pub function: TmfCode,
    /// The raw 8-byte LUN field of the LU the function acts on.
    pub lun: u64,
    /// Initiator Task Tag of the request itself.
    pub itt: u32,
    /// Referenced Task Tag: the ITT of the task to abort or query (ABORT TASK, QUERY TASK).
    pub referenced_tag: u32,
    /// CmdSN: the command's sequence number in the session.
    pub cmd_sn: u32,
    /// ExpStatSN: the initiator acknowledges every status before this StatSN.
    pub exp_stat_sn: u32,
    /// RefCmdSN: the CmdSN of the referenced task (ABORT TASK).
    pub ref_cmd_sn: u32,
    /// ExpDataSN: for task reassignment, the next DataSN expected; 0 otherwise.
    pub exp_data_sn: u32,
}

/// Login Request (§11.12).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginRequest {
    /// T bit: a stage transition is asked for (request) or granted (response).
    pub transit: bool,
    /// C bit: the text continues in the next PDU.
    pub cont: bool,
    /// CSG: the current login stage.
    pub csg: Stage,
    /// NSG: the next stage, meaningful with T set.
    pub nsg: Stage,
    /// Version-max: the highest iSCSI version supported (0x00).
    pub version_max: u8,
    /// Version-min: the lowest iSCSI version supported (0x00).
    pub version_min: u8,
    /// ISID: the initiator part of the session identifier.
    pub isid: [u8; 6],
    /// TSIH: the target part of the session identifier (0 for a new session).
    pub tsih: u16,
    /// Initiator Task Tag of the login request.
    pub itt: u32,
    /// CID: the connection ID within the session.
    pub cid: u16,
    /// CmdSN: the session's first CmdSN (or the next one, for a new connection of a session).
    pub cmd_sn: u32,
    /// ExpStatSN: the initiator acknowledges every status before this StatSN.
    pub exp_stat_sn: u32,
}

/// Text Request (§11.10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextRequest {
    /// I bit: an immediate command, delivered at once and not advancing CmdSN.
    pub immediate: bool,
    /// F bit: the initiator has sent its whole text.
    pub final_bit: bool,
    /// C bit: the text continues in the next PDU.
    pub cont: bool,
    /// The raw 8-byte LUN field, as on the wire (see [`super::decode_lun`]).
    pub lun: u64,
    /// Initiator Task Tag: the initiator's tag of the task or request (0xFFFFFFFF: none).
    pub itt: u32,
    /// Target Transfer Tag: 0xFFFFFFFF to start an exchange, else the TTT of the Text Response
    /// being continued.
    pub ttt: u32,
    /// CmdSN: the command's sequence number in the session.
    pub cmd_sn: u32,
    /// ExpStatSN: the initiator acknowledges every status before this StatSN.
    pub exp_stat_sn: u32,
}

/// SCSI Data-Out (§11.7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataOut {
    /// F bit: the last Data-Out PDU of the sequence (unsolicited burst or R2T).
    pub final_bit: bool,
    /// The raw 8-byte LUN field, as on the wire (see [`super::decode_lun`]).
    pub lun: u64,
    /// Initiator Task Tag: the initiator's tag of the task or request (0xFFFFFFFF: none).
    pub itt: u32,
    /// Target Transfer Tag: the R2T's tag, or 0xFFFFFFFF for unsolicited data.
    pub ttt: u32,
    /// ExpStatSN: the initiator acknowledges every status before this StatSN.
    pub exp_stat_sn: u32,
    /// DataSN: the PDU's number within its sequence (from 0 for each R2T).
    pub data_sn: u32,
    /// Buffer Offset: where the segment's data starts in the task's buffer, bytes.
    pub buffer_offset: u32,
}

/// Logout Request (§11.14).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogoutRequest {
    /// I bit: an immediate command, delivered at once and not advancing CmdSN.
    pub immediate: bool,
    /// Reason code: close the session, close a connection, or remove it for recovery.
    pub reason: LogoutReason,
    /// Initiator Task Tag: the initiator's tag of the task or request (0xFFFFFFFF: none).
    pub itt: u32,
    /// CID of the connection to close (for a connection logout).
    pub cid: u16,
    /// CmdSN: the command's sequence number in the session.
    pub cmd_sn: u32,
    /// ExpStatSN: the initiator acknowledges every status before this StatSN.
    pub exp_stat_sn: u32,
}

/// SNACK Request (§11.16).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnackRequest {
    /// The SNACK type (Data/R2T, Status, DataACK, R-Data).
    pub snack_type: SnackType,
    /// The raw 8-byte LUN field, as on the wire (see [`super::decode_lun`]).
    pub lun: u64,
    /// Initiator Task Tag: the initiator's tag of the task or request (0xFFFFFFFF: none).
    pub itt: u32,
    /// Target Transfer Tag (DataACK: the Data-In's TTT).
    pub ttt: u32,
    /// ExpStatSN: the initiator acknowledges every status before this StatSN.
    pub exp_stat_sn: u32,
    /// BegRun: the first DataSN, R2TSN or StatSN asked for again.
    pub beg_run: u32,
    /// RunLength: how many from BegRun (0: all after it).
    pub run_length: u32,
}

/// A decoded initiator BHS (plus AHS), before its data segment is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestHeader {
    /// A NOP-Out: a ping, or the answer to a target's NOP-In.
    NopOut(NopOut),
    /// A SCSI Command.
    ScsiCommand(ScsiCommand),
    /// A Task Management Function Request.
    TaskMgmt(TaskMgmtRequest),
    /// A Login Request.
    Login(LoginRequest),
    /// A Text Request (SendTargets discovery, text negotiation).
    Text(TextRequest),
    /// A SCSI Data-Out: write data, unsolicited or for an R2T.
    DataOut(DataOut),
    /// A Logout Request.
    Logout(LogoutRequest),
    /// A SNACK Request (refused: ErrorRecoveryLevel is 0).
    Snack(SnackRequest),
}

/// A whole initiator PDU: header plus data segment (padding and digests removed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The decoded BHS (and AHS).
    pub header: RequestHeader,
    /// The data segment (padding and digests removed).
    pub data: Vec<u8>,
}

// ---------------------------------------------------------------------------
// Target -> initiator PDUs.
// ---------------------------------------------------------------------------

/// NOP-In (§11.19).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NopIn {
    /// The raw 8-byte LUN field, as on the wire (see [`super::decode_lun`]).
    pub lun: u64,
    /// Initiator Task Tag of the NOP-Out answered; 0xFFFFFFFF for a target's own ping.
    pub itt: u32,
    /// Target Transfer Tag: 0xFFFFFFFF when no answer is wanted, else the tag the initiator's NOP-
    /// Out must echo.
    pub ttt: u32,
    /// StatSN: this connection's status sequence number for the PDU.
    pub stat_sn: u32,
    /// ExpCmdSN: the next CmdSN the target expects.
    pub exp_cmd_sn: u32,
    /// MaxCmdSN: the largest CmdSN the target will accept now (the command window's end).
    pub max_cmd_sn: u32,
    /// Ping data, echoed from the NOP-Out.
    pub data: Vec<u8>,
}

/// SCSI Response (§11.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScsiResponse {
    /// o bit: bidirectional read residual overflow.
    pub bidi_overflow: bool,
    /// u bit: bidirectional read residual underflow.
    pub bidi_underflow: bool,
    /// O bit: residual overflow; `residual` bytes did not fit the buffer.
    pub overflow: bool,
    /// U bit: residual underflow; `residual` bytes of the buffer were not transferred.
    pub underflow: bool,
    /// 0x00 command completed at target, 0x01 target failure.
    pub response: u8,
    /// SCSI status byte (SAM-5), valid when `response` is 0x00.
    pub status: u8,
    /// Initiator Task Tag of the command.
    pub itt: u32,
    /// SNACKTag: 0, as this target does not support SNACK.
    pub snack_tag: u32,
    /// StatSN: this connection's status sequence number for the PDU.
    pub stat_sn: u32,
    /// ExpCmdSN: the next CmdSN the target expects.
    pub exp_cmd_sn: u32,
    /// MaxCmdSN: the largest CmdSN the target will accept now (the command window's end).
    pub max_cmd_sn: u32,
    /// ExpDataSN: the number of R2T and Data-In PDUs the target sent for the command.
    pub exp_data_sn: u32,
    /// Bidirectional Read Residual Count, bytes.
    pub bidi_residual: u32,
    /// Residual Count, bytes (valid with `overflow` or `underflow`).
    pub residual: u32,
    /// Sense data without the 2-byte SenseLength prefix (the codec adds it).
    pub sense: Vec<u8>,
}

/// Task Management Function Response (§11.6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskMgmtResponse {
    /// The function's result (Function complete, Task does not exist, ...).
    pub response: TmfResult,
    /// Initiator Task Tag of the TMF request.
    pub itt: u32,
    /// StatSN: this connection's status sequence number for the PDU.
    pub stat_sn: u32,
    /// ExpCmdSN: the next CmdSN the target expects.
    pub exp_cmd_sn: u32,
    /// MaxCmdSN: the largest CmdSN the target will accept now (the command window's end).
    pub max_cmd_sn: u32,
}

/// Login Response (§11.13).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginResponse {
    /// T bit: a stage transition is asked for (request) or granted (response).
    pub transit: bool,
    /// C bit: the text continues in the next PDU.
    pub cont: bool,
    /// CSG: the current login stage.
    pub csg: Stage,
    /// NSG: the next stage, meaningful with T set.
    pub nsg: Stage,
    /// Version-max: the highest iSCSI version supported (0x00).
    pub version_max: u8,
    /// Version-active: the iSCSI version in use (0x00).
    pub version_active: u8,
    /// ISID: the initiator part of the session identifier.
    pub isid: [u8; 6],
    /// TSIH: the target's session handle, set in the final response of a leading login.
    pub tsih: u16,
    /// Initiator Task Tag of the login request answered.
    pub itt: u32,
    /// StatSN: this connection's status sequence number for the PDU.
    pub stat_sn: u32,
    /// ExpCmdSN: the next CmdSN the target expects.
    pub exp_cmd_sn: u32,
    /// MaxCmdSN: the largest CmdSN the target will accept now (the command window's end).
    pub max_cmd_sn: u32,
    /// Status-Class and Status-Detail.
    pub status: LoginStatus,
    /// Login key=value text of the response.
    pub data: Vec<u8>,
}

/// Text Response (§11.11).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextResponse {
    /// F bit: the target has sent its whole response.
    pub final_bit: bool,
    /// C bit: the text continues in the next PDU.
    pub cont: bool,
    /// The raw 8-byte LUN field, as on the wire (see [`super::decode_lun`]).
    pub lun: u64,
    /// Initiator Task Tag: the initiator's tag of the task or request (0xFFFFFFFF: none).
    pub itt: u32,
    /// Target Transfer Tag: 0xFFFFFFFF when the exchange ends, else the tag the next Text Request
    /// continues with.
    pub ttt: u32,
    /// StatSN: this connection's status sequence number for the PDU.
    pub stat_sn: u32,
    /// ExpCmdSN: the next CmdSN the target expects.
    pub exp_cmd_sn: u32,
    /// MaxCmdSN: the largest CmdSN the target will accept now (the command window's end).
    pub max_cmd_sn: u32,
    /// Key=value text of the response.
    pub data: Vec<u8>,
}

/// SCSI Data-In (§11.7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataIn {
    /// F bit: the last Data-In PDU of the command (or of the sequence).
    pub final_bit: bool,
    /// A bit: the initiator is asked to acknowledge with a DataACK SNACK (ErrorRecoveryLevel > 0
    /// only).
    pub ack: bool,
    /// O bit: residual overflow; `residual` bytes did not fit the buffer.
    pub overflow: bool,
    /// U bit: residual underflow; `residual` bytes of the buffer were not transferred.
    pub underflow: bool,
    /// S bit: `status` and `stat_sn` are valid.
    pub has_status: bool,
    /// SCSI status byte (SAM-5), valid with `has_status`.
    pub status: u8,
    /// The raw 8-byte LUN field, as on the wire (see [`super::decode_lun`]).
    pub lun: u64,
    /// Initiator Task Tag: the initiator's tag of the task or request (0xFFFFFFFF: none).
    pub itt: u32,
    /// Target Transfer Tag: 0xFFFFFFFF unless `ack` is set.
    pub ttt: u32,
    /// StatSN, valid with `has_status`.
    pub stat_sn: u32,
    /// ExpCmdSN: the next CmdSN the target expects.
    pub exp_cmd_sn: u32,
    /// MaxCmdSN: the largest CmdSN the target will accept now (the command window's end).
    pub max_cmd_sn: u32,
    /// DataSN: the PDU's number in the task's data sequence.
    pub data_sn: u32,
    /// Buffer Offset: where the segment's data starts in the task's buffer, bytes.
    pub buffer_offset: u32,
    /// Residual Count, bytes, valid with `has_status`.
    pub residual: u32,
    /// The read data carried by this PDU.
    pub data: Vec<u8>,
}

/// Logout Response (§11.15).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogoutResponse {
    /// Whether the connection or session was closed, or why not.
    pub response: LogoutResponseCode,
    /// Initiator Task Tag of the Logout Request.
    pub itt: u32,
    /// StatSN: this connection's status sequence number for the PDU.
    pub stat_sn: u32,
    /// ExpCmdSN: the next CmdSN the target expects.
    pub exp_cmd_sn: u32,
    /// MaxCmdSN: the largest CmdSN the target will accept now (the command window's end).
    pub max_cmd_sn: u32,
    /// Time2Wait: seconds to wait before task reassignment (ErrorRecoveryLevel 2 only; 0 here).
    pub time2wait: u16,
    /// Time2Retain: seconds the target keeps the tasks for reassignment (ErrorRecoveryLevel 2 only;
    /// 0 here).
    pub time2retain: u16,
}

/// Ready To Transfer (§11.8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct R2t {
    /// The raw 8-byte LUN field, as on the wire (see [`super::decode_lun`]).
    pub lun: u64,
    /// Initiator Task Tag of the write command.
    pub itt: u32,
    /// Target Transfer Tag: the initiator echoes it in the Data-Out PDUs that answer.
    pub ttt: u32,
    /// StatSN: the next StatSN (an R2T does not advance it).
    pub stat_sn: u32,
    /// ExpCmdSN: the next CmdSN the target expects.
    pub exp_cmd_sn: u32,
    /// MaxCmdSN: the largest CmdSN the target will accept now (the command window's end).
    pub max_cmd_sn: u32,
    /// R2TSN: the R2T's number among the command's R2Ts, from 0.
    pub r2t_sn: u32,
    /// Buffer Offset: where the requested data starts in the command's buffer, bytes.
    pub buffer_offset: u32,
    /// Desired Data Transfer Length: bytes asked for (at most MaxBurstLength).
    pub desired_len: u32,
}

/// Asynchronous Message (§11.9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AsyncMessage {
    /// The raw 8-byte LUN field (SCSI events); 0 otherwise.
    pub lun: u64,
    /// StatSN: this connection's status sequence number for the PDU.
    pub stat_sn: u32,
    /// ExpCmdSN: the next CmdSN the target expects.
    pub exp_cmd_sn: u32,
    /// MaxCmdSN: the largest CmdSN the target will accept now (the command window's end).
    pub max_cmd_sn: u32,
    /// AsyncEvent: what happened (SCSI event, logout request, drop, ...).
    pub event: AsyncEvent,
    /// AsyncVCode: vendor code, 0 here.
    pub vcode: u8,
    /// Parameter1: the CID of the connection to be dropped (AsyncEvent 2); 0 otherwise.
    pub param1: u16,
    /// Parameter2: Time2Wait, seconds (AsyncEvents 2 and 3); 0 otherwise.
    pub param2: u16,
    /// Parameter3: Time2Retain, seconds (AsyncEvents 2 and 3), or the seconds the initiator has to
    /// log out (AsyncEvent 1, the one this target sends) or renegotiate (4).
    pub param3: u16,
    /// Sense data (a SCSI event) or iSCSI event data; empty otherwise.
    pub data: Vec<u8>,
}

/// Reject (§11.17). `data` is the complete BHS of the rejected PDU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reject {
    /// Why the PDU was rejected.
    pub reason: RejectReason,
    /// StatSN: this connection's status sequence number for the PDU.
    pub stat_sn: u32,
    /// ExpCmdSN: the next CmdSN the target expects.
    pub exp_cmd_sn: u32,
    /// MaxCmdSN: the largest CmdSN the target will accept now (the command window's end).
    pub max_cmd_sn: u32,
    /// DataSN/R2TSN: for a rejected Data/R2T SNACK, the next one the target would send; 0
    /// otherwise.
    pub data_sn: u32,
    /// The complete BHS of the rejected PDU.
    pub data: Vec<u8>,
}

/// A target PDU ready to encode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A NOP-In: the answer to a ping, or the target's own ping.
    NopIn(NopIn),
    /// A SCSI Response: the command's status and sense data.
    ScsiResponse(ScsiResponse),
    /// A Task Management Function Response.
    TaskMgmtResponse(TaskMgmtResponse),
    /// A Login Response.
    LoginResponse(LoginResponse),
    /// A Text Response.
    TextResponse(TextResponse),
    /// A SCSI Data-In: read data, possibly with the status (S bit).
    DataIn(DataIn),
    /// A Logout Response.
    LogoutResponse(LogoutResponse),
    /// A Ready To Transfer: the target asks for write data.
    R2t(R2t),
    /// An Asynchronous Message.
    AsyncMessage(AsyncMessage),
    /// A Reject of a PDU the target could not take.
    Reject(Reject),
}
