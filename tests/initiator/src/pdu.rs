//! The request PDUs both initiators send, built in one place: login
//! requests (RFC 7143 §11.12), SCSI commands (§11.3), Data-Out (§11.7) and
//! NOP-Out (§11.18).

use rustgt_iscsi::pdu::*;
use rustgt_iscsi::text::encode_text;

/// The identifiers a login request carries besides its stages and keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoginIds {
    pub isid: [u8; 6],
    pub tsih: u16,
    pub itt: u32,
    pub cid: u16,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
}

/// A login request from stage `csg` towards `nsg` (transiting when
/// `transit`), version 0, not continued, carrying `keys` as text.
pub fn login_request(
    ids: LoginIds,
    csg: Stage,
    nsg: Stage,
    transit: bool,
    keys: &[(&str, &str)],
) -> Request {
    let pairs: Vec<(String, String)> = keys
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    Request {
        header: RequestHeader::Login(LoginRequest {
            transit,
            cont: false,
            csg,
            nsg,
            version_max: 0,
            version_min: 0,
            isid: ids.isid,
            tsih: ids.tsih,
            itt: ids.itt,
            cid: ids.cid,
            cmd_sn: ids.cmd_sn,
            exp_stat_sn: ids.exp_stat_sn,
        }),
        data: encode_text(&pairs),
    }
}

/// What a SCSI command request says besides its CDB and data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommandIds {
    /// The LUN field, already encoded.
    pub lun: u64,
    pub itt: u32,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
    pub read: bool,
    pub write: bool,
    pub final_bit: bool,
    pub expected_data_len: u32,
}

/// A non-immediate SIMPLE SCSI command (no bidirectional read length)
/// with `data` as its immediate data.
pub fn scsi_command(ids: CommandIds, cdb: &[u8], data: Vec<u8>) -> Request {
    Request {
        header: RequestHeader::ScsiCommand(ScsiCommand {
            immediate: false,
            final_bit: ids.final_bit,
            read: ids.read,
            write: ids.write,
            attr: TaskAttribute::SIMPLE,
            lun: ids.lun,
            itt: ids.itt,
            expected_data_len: ids.expected_data_len,
            cmd_sn: ids.cmd_sn,
            exp_stat_sn: ids.exp_stat_sn,
            cdb: cdb.to_vec().into(),
            bidi_read_len: None,
        }),
        data,
    }
}

/// A Data-Out PDU carrying `data`.
pub fn data_out(header: DataOut, data: Vec<u8>) -> Request {
    Request {
        header: RequestHeader::DataOut(header),
        data,
    }
}

/// An immediate NOP-Out (§11.18): a ping of ours (`itt`, TTT reserved) or
/// the answer to the target's (`itt` reserved, its TTT and LUN).
pub fn nop_out(lun: u64, itt: u32, ttt: u32, cmd_sn: u32, exp_stat_sn: u32) -> Vec<u8> {
    Request {
        header: RequestHeader::NopOut(NopOut {
            immediate: true,
            lun,
            itt,
            ttt,
            cmd_sn,
            exp_stat_sn,
        }),
        data: Vec::new(),
    }
    .encode(false, false)
}
