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
        /// NOP-Out (§11.18): an initiator's ping, or its answer to a NOP-In.
        NOP_OUT = 0x00,
        /// SCSI Command (§11.3).
        SCSI_COMMAND = 0x01,
        /// Task Management Function Request (§11.5).
        TASK_MGMT_REQUEST = 0x02,
        /// Login Request (§11.12).
        LOGIN_REQUEST = 0x03,
        /// Text Request (§11.10).
        TEXT_REQUEST = 0x04,
        /// SCSI Data-Out (§11.7): write data.
        DATA_OUT = 0x05,
        /// Logout Request (§11.14).
        LOGOUT_REQUEST = 0x06,
        /// SNACK Request (§11.16); rejected (COMMAND_NOT_SUPPORTED), as
        /// ErrorRecoveryLevel is 0.
        SNACK_REQUEST = 0x10,
        // Target opcodes.
        /// NOP-In (§11.19): the answer to a NOP-Out, or the target's ping.
        NOP_IN = 0x20,
        /// SCSI Response (§11.4).
        SCSI_RESPONSE = 0x21,
        /// Task Management Function Response (§11.6).
        TASK_MGMT_RESPONSE = 0x22,
        /// Login Response (§11.13).
        LOGIN_RESPONSE = 0x23,
        /// Text Response (§11.11).
        TEXT_RESPONSE = 0x24,
        /// SCSI Data-In (§11.7): read data, possibly with the status.
        DATA_IN = 0x25,
        /// Logout Response (§11.15).
        LOGOUT_RESPONSE = 0x26,
        /// Ready To Transfer (§11.8): the target asks for write data.
        R2T = 0x31,
        /// Asynchronous Message (§11.9).
        ASYNC_MESSAGE = 0x32,
        /// Reject (§11.17).
        REJECT = 0x3f,
    }
}

open_enum! {
    /// Reject reason codes (RFC 7143 §11.17.1).
    pub struct RejectReason(u8) {
        /// 0x02: a data digest failed; the PDU's data was dropped.
        DATA_DIGEST_ERROR = 0x02,
        /// 0x03: SNACK Reject: a SNACK the target cannot honour.
        SNACK_REJECT = 0x03,
        /// 0x04: the PDU breaks the protocol (e.g. truncated, out of place, a
        /// malformed text continuation).
        PROTOCOL_ERROR = 0x04,
        /// 0x05: the opcode is unknown or not supported (SNACK).
        COMMAND_NOT_SUPPORTED = 0x05,
        /// 0x06: too many immediate commands.
        IMMEDIATE_COMMAND_REJECT = 0x06,
        /// 0x07: Task in progress (RFC 7143 §11.17.1).
        TASK_IN_PROGRESS = 0x07,
        /// 0x08: Invalid DataACK.
        INVALID_DATA_ACK = 0x08,
        /// 0x09: a field of the PDU is invalid (e.g. a malformed AHS).
        INVALID_PDU_FIELD = 0x09,
        /// 0x0a: Long operation reject: no Target Transfer Tag can be generated
        /// (out of resources).
        LONG_OPERATION_REJECT = 0x0a,
        /// 0x0b: formerly "negotiation reset"; not sent.
        DEPRECATED = 0x0b,
        /// 0x0c: waiting for logout: a new request after the initiator's Logout
        /// Request (Data-Out aside).
        WAITING_FOR_LOGOUT = 0x0c,
    }
}

open_enum! {
    /// Login stage (CSG/NSG, RFC 7143 §11.12.3).
    #[derive(PartialOrd, Ord)]
    pub struct Stage(u8) {
        /// 0: SecurityNegotiation (authentication).
        SECURITY = 0,
        /// 1: LoginOperationalNegotiation.
        OPERATIONAL = 1,
        /// 3: FullFeaturePhase, the stage a login ends in.
        FULL_FEATURE = 3,
    }
}

open_enum! {
    /// Login status class and detail (RFC 7143 §11.13.5), as one u16: class << 8 | detail.
    pub struct LoginStatus(u16) {
        /// 0x0000: the login proceeds (or is complete).
        SUCCESS = 0x0000,
        /// 0x0101: redirect; the TargetAddress key says where.
        TARGET_MOVED_TEMPORARILY = 0x0101,
        /// 0x0102: permanent redirect to TargetAddress.
        TARGET_MOVED_PERMANENTLY = 0x0102,
        /// 0x0200: a miscellaneous initiator error (bad key, value or order).
        INITIATOR_ERROR = 0x0200,
        /// 0x0201: the initiator could not be authenticated (CHAP failed).
        AUTHENTICATION_FAILURE = 0x0201,
        /// 0x0202: the initiator may not reach this target (ACL).
        AUTHORIZATION_FAILURE = 0x0202,
        /// 0x0203: no such target (or it is not served at this portal).
        NOT_FOUND = 0x0203,
        /// 0x0204: the target has been removed.
        TARGET_REMOVED = 0x0204,
        /// 0x0205: no common iSCSI version.
        UNSUPPORTED_VERSION = 0x0205,
        /// 0x0206: the session has all the connections it may have.
        TOO_MANY_CONNECTIONS = 0x0206,
        /// 0x0207: a required key (e.g. InitiatorName) is missing.
        MISSING_PARAMETER = 0x0207,
        /// 0x0208: the connection cannot join this session.
        CANT_INCLUDE_IN_SESSION = 0x0208,
        /// 0x0209: the SessionType is not supported.
        SESSION_TYPE_NOT_SUPPORTED = 0x0209,
        /// 0x020a: the TSIH names no existing session.
        SESSION_DOES_NOT_EXIST = 0x020a,
        /// 0x020b: a request not valid during login.
        INVALID_DURING_LOGIN = 0x020b,
        /// 0x0300: a target hardware or software error.
        TARGET_ERROR = 0x0300,
        /// 0x0301: the service is temporarily unavailable.
        SERVICE_UNAVAILABLE = 0x0301,
        /// 0x0302: the target is out of resources (e.g. sessions per initiator).
        OUT_OF_RESOURCES = 0x0302,
    }
}

impl LoginStatus {
    /// Status-Class: 0 success, 1 redirection, 2 initiator error, 3 target error.
    pub fn class(self) -> u8 {
        (self.0 >> 8) as u8
    }
    /// Status-Detail within the class.
    pub fn detail(self) -> u8 {
        self.0 as u8
    }
}

open_enum! {
    /// Task management function codes (RFC 7143 §11.5.1).
    pub struct TmfCode(u8) {
        /// 1: ABORT TASK (the Referenced Task Tag's task).
        ABORT_TASK = 1,
        /// 2: ABORT TASK SET (every task of this I_T nexus on the LU).
        ABORT_TASK_SET = 2,
        /// 3: CLEAR ACA.
        CLEAR_ACA = 3,
        /// 4: CLEAR TASK SET (every task on the LU).
        CLEAR_TASK_SET = 4,
        /// 5: LOGICAL UNIT RESET.
        LOGICAL_UNIT_RESET = 5,
        /// 6: TARGET WARM RESET.
        TARGET_WARM_RESET = 6,
        /// 7: TARGET COLD RESET.
        TARGET_COLD_RESET = 7,
        /// 8: TASK REASSIGN (connection recovery, ErrorRecoveryLevel 2).
        TASK_REASSIGN = 8,
    }
}

open_enum! {
    /// Task management response codes (RFC 7143 §11.6.1).
    pub struct TmfResult(u8) {
        /// 0: Function complete.
        COMPLETE = 0,
        /// 1: Task does not exist.
        TASK_DOES_NOT_EXIST = 1,
        /// 2: LUN does not exist.
        LUN_DOES_NOT_EXIST = 2,
        /// 3: Task still allegiant (TASK REASSIGN).
        TASK_STILL_ALLEGIANT = 3,
        /// 4: Task allegiance reassignment not supported.
        REASSIGNMENT_NOT_SUPPORTED = 4,
        /// 5: Task management function not supported.
        NOT_SUPPORTED = 5,
        /// 6: Function authorization failed.
        AUTHORIZATION_FAILED = 6,
        /// 255: Function rejected.
        REJECTED = 255,
    }
}

open_enum! {
    /// SCSI Command task attribute field (RFC 7143 §11.3.1).
    pub struct TaskAttribute(u8) {
        /// 0: untagged; like any value but ORDERED, HEAD OF QUEUE and ACA, run
        /// as SIMPLE.
        UNTAGGED = 0,
        /// 1: SIMPLE.
        SIMPLE = 1,
        /// 2: ORDERED.
        ORDERED = 2,
        /// 3: HEAD OF QUEUE.
        HEAD_OF_QUEUE = 3,
        /// 4: ACA.
        ACA = 4,
    }
}

/// Reserved Initiator Task Tag value (RFC 7143 §11.18).
pub const RESERVED_TAG: u32 = 0xffff_ffff;

open_enum! {
    /// Logout Request reason code (RFC 7143 §11.14.1).
    pub struct LogoutReason(u8) {
        /// 0: close the session (all its connections).
        CLOSE_SESSION = 0,
        /// 1: close the connection named by CID.
        CLOSE_CONNECTION = 1,
        /// 2: remove the connection for recovery (ErrorRecoveryLevel 2).
        REMOVE_FOR_RECOVERY = 2,
    }
}

open_enum! {
    /// Logout Response code (RFC 7143 §11.15.1).
    pub struct LogoutResponseCode(u8) {
        /// 0: the connection or session was closed.
        CLOSED = 0,
        /// 1: no connection with that CID.
        CID_NOT_FOUND = 1,
        /// 2: connection recovery is not supported.
        RECOVERY_NOT_SUPPORTED = 2,
        /// 3: cleanup failed for some other reason.
        CLEANUP_FAILED = 3,
    }
}

open_enum! {
    /// SNACK Type (RFC 7143 §11.16.1).
    pub struct SnackType(u8) {
        /// 0: Data/R2T SNACK, for lost Data-In or R2T PDUs.
        DATA_R2T = 0,
        /// 1: Status SNACK, for lost responses.
        STATUS = 1,
        /// 2: DataACK, acknowledging Data-In up to a DataSN.
        DATA_ACK = 2,
        /// 3: R-Data SNACK, asking for the read data again.
        R_DATA = 3,
    }
}

open_enum! {
    /// Asynchronous Message AsyncEvent (RFC 7143 §11.9.1).
    pub struct AsyncEvent(u8) {
        /// 0: a SCSI asynchronous event; sense data in the data segment.
        SCSI_EVENT = 0,
        /// 1: the target asks the initiator to log out (within Parameter3 seconds).
        LOGOUT_REQUEST = 1,
        /// 2: the target will drop the connection named in Parameter1.
        DROP_CONNECTION = 2,
        /// 3: the target will drop every connection of the session.
        DROP_ALL_CONNECTIONS = 3,
        /// 4: the target asks for operational parameter renegotiation.
        RENEGOTIATE = 4,
        /// 255: vendor-specific event.
        VENDOR = 255,
    }
}
