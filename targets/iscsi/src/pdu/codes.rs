//! The open code fields of iSCSI PDUs (opcodes, reasons, statuses, task
//! management functions...), each a newtype over its raw wire value made by
//! [`open_enum!`]: unknown values are representable and judged by the
//! connection, never by the codec.

use super::open_enum::open_enum;

open_enum! {
    /// iSCSI opcode (RFC 7143 §11.2.1.2). Open: unknown values are representable
    /// and get a Reject, never a panic.
    pub struct Opcode(u8) {
        // Initiator opcodes.
        NOP_OUT = 0x00,
        SCSI_COMMAND = 0x01,
        TASK_MGMT_REQUEST = 0x02,
        LOGIN_REQUEST = 0x03,
        TEXT_REQUEST = 0x04,
        DATA_OUT = 0x05,
        LOGOUT_REQUEST = 0x06,
        SNACK_REQUEST = 0x10,
        // Target opcodes.
        NOP_IN = 0x20,
        SCSI_RESPONSE = 0x21,
        TASK_MGMT_RESPONSE = 0x22,
        LOGIN_RESPONSE = 0x23,
        TEXT_RESPONSE = 0x24,
        DATA_IN = 0x25,
        LOGOUT_RESPONSE = 0x26,
        R2T = 0x31,
        ASYNC_MESSAGE = 0x32,
        REJECT = 0x3f,
    }
}

open_enum! {
    /// Reject reason codes (RFC 7143 §11.17.1).
    pub struct RejectReason(u8) {
        DATA_DIGEST_ERROR = 0x02,
        SNACK_REJECT = 0x03,
        PROTOCOL_ERROR = 0x04,
        COMMAND_NOT_SUPPORTED = 0x05,
        IMMEDIATE_COMMAND_REJECT = 0x06,
        TASK_IN_PROGRESS = 0x07,
        INVALID_DATA_ACK = 0x08,
        INVALID_PDU_FIELD = 0x09,
        LONG_OPERATION_REJECT = 0x0a,
        DEPRECATED = 0x0b,
        WAITING_FOR_LOGOUT = 0x0c,
    }
}

open_enum! {
    /// Login stage (CSG/NSG, RFC 7143 §11.12.3).
    #[derive(PartialOrd, Ord)]
    pub struct Stage(u8) {
        SECURITY = 0,
        OPERATIONAL = 1,
        FULL_FEATURE = 3,
    }
}

open_enum! {
    /// Login status class and detail (RFC 7143 §11.13.5), as one u16: class << 8 | detail.
    pub struct LoginStatus(u16) {
        SUCCESS = 0x0000,
        TARGET_MOVED_TEMPORARILY = 0x0101,
        TARGET_MOVED_PERMANENTLY = 0x0102,
        INITIATOR_ERROR = 0x0200,
        AUTHENTICATION_FAILURE = 0x0201,
        AUTHORIZATION_FAILURE = 0x0202,
        NOT_FOUND = 0x0203,
        TARGET_REMOVED = 0x0204,
        UNSUPPORTED_VERSION = 0x0205,
        TOO_MANY_CONNECTIONS = 0x0206,
        MISSING_PARAMETER = 0x0207,
        CANT_INCLUDE_IN_SESSION = 0x0208,
        SESSION_TYPE_NOT_SUPPORTED = 0x0209,
        SESSION_DOES_NOT_EXIST = 0x020a,
        INVALID_DURING_LOGIN = 0x020b,
        TARGET_ERROR = 0x0300,
        SERVICE_UNAVAILABLE = 0x0301,
        OUT_OF_RESOURCES = 0x0302,
    }
}

impl LoginStatus {
    pub fn class(self) -> u8 {
        (self.0 >> 8) as u8
    }
    pub fn detail(self) -> u8 {
        self.0 as u8
    }
}

open_enum! {
    /// Task management function codes (RFC 7143 §11.5.1).
    pub struct TmfCode(u8) {
        ABORT_TASK = 1,
        ABORT_TASK_SET = 2,
        CLEAR_ACA = 3,
        CLEAR_TASK_SET = 4,
        LOGICAL_UNIT_RESET = 5,
        TARGET_WARM_RESET = 6,
        TARGET_COLD_RESET = 7,
        TASK_REASSIGN = 8,
    }
}

open_enum! {
    /// Task management response codes (RFC 7143 §11.6.1).
    pub struct TmfResult(u8) {
        COMPLETE = 0,
        TASK_DOES_NOT_EXIST = 1,
        LUN_DOES_NOT_EXIST = 2,
        TASK_STILL_ALLEGIANT = 3,
        REASSIGNMENT_NOT_SUPPORTED = 4,
        NOT_SUPPORTED = 5,
        AUTHORIZATION_FAILED = 6,
        REJECTED = 255,
    }
}

open_enum! {
    /// SCSI Command task attribute field (RFC 7143 §11.3.1).
    pub struct TaskAttribute(u8) {
        UNTAGGED = 0,
        SIMPLE = 1,
        ORDERED = 2,
        HEAD_OF_QUEUE = 3,
        ACA = 4,
    }
}

/// Reserved Initiator Task Tag value (RFC 7143 §11.18).
pub const RESERVED_TAG: u32 = 0xffff_ffff;

open_enum! {
    /// Logout Request reason code (RFC 7143 §11.14.1).
    pub struct LogoutReason(u8) {
        CLOSE_SESSION = 0,
        CLOSE_CONNECTION = 1,
        REMOVE_FOR_RECOVERY = 2,
    }
}

open_enum! {
    /// Logout Response code (RFC 7143 §11.15.1).
    pub struct LogoutResponseCode(u8) {
        CLOSED = 0,
        CID_NOT_FOUND = 1,
        RECOVERY_NOT_SUPPORTED = 2,
        CLEANUP_FAILED = 3,
    }
}

open_enum! {
    /// SNACK Type (RFC 7143 §11.16.1).
    pub struct SnackType(u8) {
        DATA_R2T = 0,
        STATUS = 1,
        DATA_ACK = 2,
        R_DATA = 3,
    }
}

open_enum! {
    /// Asynchronous Message AsyncEvent (RFC 7143 §11.9.1).
    pub struct AsyncEvent(u8) {
        SCSI_EVENT = 0,
        LOGOUT_REQUEST = 1,
        DROP_CONNECTION = 2,
        DROP_ALL_CONNECTIONS = 3,
        RENEGOTIATE = 4,
        VENDOR = 255,
    }
}
