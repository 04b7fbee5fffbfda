//! The floor's protocol, whatever moves its bytes: a connection's input,
//! its encoded answers and the few numbers a session needs.

use rustgt_iscsi::pdu::{
    DataIn, LoginResponse, LoginStatus, LogoutResponse, LogoutResponseCode, NopIn, PduError, Reply,
    Request, RequestHeader, ScsiCommand, ScsiResponse, Stage, RESERVED_TAG,
};
use rustgt_scsi::{Asc, Sense, SenseKey, Status};

/// Input a connection may have waiting for a whole PDU: a header, the
/// largest AHS and the data segment it declares it takes, with digests.
pub const IN_CAP: usize = 48 + 1024 + OUR_MAX_RECV as usize + 8;
/// Output past which a connection's input is not read until the socket
/// takes what waits.
pub const OUT_CAP: usize = 4 << 20;
/// The largest read served (longer ones get CHECK CONDITION).
pub const MAX_READ: u32 = 1 << 20;
/// The data segment the floor takes (MaxRecvDataSegmentLength and
/// FirstBurstLength it declares).
const OUR_MAX_RECV: u32 = 65536;
/// The command window it grants past ExpCmdSN.
const WINDOW: u32 = 64;
/// The LUN's size it reports: 1 GiB of 512-byte blocks.
const BLOCKS: u64 = 1 << 21;
const BLOCK_LEN: u32 = 512;
static ZEROS: [u8; 65536] = [0; 65536];

/// One connection's protocol state.
pub(super) struct Session {
    /// Received bytes not yet answered.
    pub(super) input: Vec<u8>,
    /// Encoded answers not yet sent.
    pub(super) out: Vec<u8>,
    stat_sn: u32,
    exp_cmd_sn: u32,
    /// The initiator's MaxRecvDataSegmentLength: the largest Data-In
    /// segment it takes.
    peer_max_recv: usize,
    /// A logout was answered: close once the output is out.
    pub(super) closing: bool,
}

impl Session {
    pub(super) fn new() -> Session {
        Session {
            input: Vec::new(),
            out: Vec::new(),
            stat_sn: 1,
            exp_cmd_sn: 0,
            peer_max_recv: 8192,
            closing: false,
        }
    }

    /// Answers the whole PDUs in `input` while the output has room: true
    /// when none is left, false when the output stopped it, `None` when one
    /// could not be decoded or is not served.
    pub(super) fn answer(&mut self) -> Option<bool> {
        let mut used = 0;
        let mut all = false;
        while self.out.len() < OUT_CAP && !self.closing {
            let rest = self.input.get(used..).unwrap_or_default();
            let (req, n) = match Request::decode(rest, false, false) {
                Ok(r) => r,
                // One that cannot fit the input's bound is not waited for.
                Err(PduError::Incomplete(more)) if rest.len().saturating_add(more) > IN_CAP => {
                    return None;
                }
                Err(PduError::Incomplete(_)) => {
                    all = true;
                    break;
                }
                Err(_) => return None,
            };
            used += n;
            if !self.reply(req) {
                return None;
            }
        }
        self.input.drain(..used);
        Some(all || self.closing)
    }

    fn stat_sn(&mut self) -> u32 {
        let s = self.stat_sn;
        self.stat_sn = s.wrapping_add(1);
        s
    }

    fn took(&mut self, cmd_sn: u32, immediate: bool) {
        if !immediate {
            self.exp_cmd_sn = cmd_sn.wrapping_add(1);
        }
    }

    fn max_cmd_sn(&self) -> u32 {
        self.exp_cmd_sn.wrapping_add(WINDOW - 1)
    }

    fn reply(&mut self, req: Request) -> bool {
        match req.header {
            RequestHeader::Login(l) => {
                self.exp_cmd_sn = l.cmd_sn;
                for (k, v) in keys(&req.data) {
                    if k == "MaxRecvDataSegmentLength" {
                        if let Ok(n) = v.parse::<usize>() {
                            self.peer_max_recv = n.clamp(512, MAX_READ as usize);
                        }
                    }
                }
                let text: &[u8] = if l.csg == Stage::SECURITY {
                    b"TargetPortalGroupTag=1\0"
                } else {
                    b"HeaderDigest=None\0DataDigest=None\0InitialR2T=Yes\0ImmediateData=Yes\0\
                      MaxRecvDataSegmentLength=65536\0FirstBurstLength=65536\0\
                      MaxBurstLength=262144\0ErrorRecoveryLevel=0\0"
                };
                let done = l.transit && l.nsg == Stage::FULL_FEATURE;
                let r = LoginResponse {
                    transit: l.transit,
                    cont: false,
                    csg: l.csg,
                    nsg: if l.transit { l.nsg } else { Stage::SECURITY },
                    version_max: 0,
                    version_active: 0,
                    isid: l.isid,
                    tsih: if done { 1 } else { 0 },
                    itt: l.itt,
                    stat_sn: self.stat_sn(),
                    exp_cmd_sn: self.exp_cmd_sn,
                    max_cmd_sn: self.max_cmd_sn(),
                    status: LoginStatus::SUCCESS,
                    data: text.to_vec(),
                };
                Reply::LoginResponse(r).encode_into(&mut self.out, false, false);
            }
            RequestHeader::ScsiCommand(c) => {
                self.took(c.cmd_sn, c.immediate);
                self.command(&c, req.data.len());
            }
            RequestHeader::NopOut(n) => {
                self.took(n.cmd_sn, n.immediate);
                if n.itt != RESERVED_TAG {
                    let r = NopIn {
                        lun: n.lun,
                        itt: n.itt,
                        ttt: RESERVED_TAG,
                        stat_sn: self.stat_sn(),
                        exp_cmd_sn: self.exp_cmd_sn,
                        max_cmd_sn: self.max_cmd_sn(),
                        data: req.data,
                    };
                    Reply::NopIn(r).encode_into(&mut self.out, false, false);
                }
            }
            RequestHeader::Logout(l) => {
                self.took(l.cmd_sn, l.immediate);
                let r = LogoutResponse {
                    response: LogoutResponseCode::CLOSED,
                    itt: l.itt,
                    stat_sn: self.stat_sn(),
                    exp_cmd_sn: self.exp_cmd_sn,
                    max_cmd_sn: self.max_cmd_sn(),
                    time2wait: 0,
                    time2retain: 0,
                };
                Reply::LogoutResponse(r).encode_into(&mut self.out, false, false);
                self.closing = true;
            }
            // Text, task management, SNACK, Data-Out: not served.
            _ => return false,
        }
        true
    }

    /// A SCSI command: zeros for a read, the capacity for READ CAPACITY(16),
    /// GOOD for anything else; CHECK CONDITION for a read over
    /// [`MAX_READ`] or a write with more data than it carried.
    fn command(&mut self, c: &ScsiCommand, immediate_len: usize) {
        let cdb: &[u8] = &c.cdb;
        let len = c.expected_data_len;
        if (c.read && len > MAX_READ) || (c.write && len as usize > immediate_len) {
            let sense = Sense::new(SenseKey::ILLEGAL_REQUEST, Asc::INVALID_FIELD_IN_CDB);
            self.status(c, Status::CHECK_CONDITION, sense.fixed());
            return;
        }
        if !c.read || len == 0 {
            self.status(c, Status::GOOD, Vec::new());
            return;
        }
        let mut capacity = [0u8; 32];
        let data: &[u8] = if cdb.first() == Some(&0x9e) {
            if let Some(b) = capacity.get_mut(..8) {
                b.copy_from_slice(&(BLOCKS - 1).to_be_bytes());
            }
            if let Some(b) = capacity.get_mut(8..12) {
                b.copy_from_slice(&BLOCK_LEN.to_be_bytes());
            }
            &capacity
        } else {
            &[]
        };
        let total = len as usize;
        let mut offset = 0usize;
        let mut data_sn = 0u32;
        while offset < total {
            let seg = (total - offset).min(self.peer_max_recv).min(ZEROS.len());
            let last = offset + seg == total;
            let payload: Vec<u8>;
            let bytes: &[u8] = if data.is_empty() {
                ZEROS.get(..seg).unwrap_or_default()
            } else {
                let mut p = vec![0u8; seg];
                let n = data.len().saturating_sub(offset).min(seg);
                if let (Some(d), Some(s)) = (p.get_mut(..n), data.get(offset..offset + n)) {
                    d.copy_from_slice(s);
                }
                payload = p;
                &payload
            };
            let d = DataIn {
                final_bit: last,
                ack: false,
                overflow: false,
                underflow: false,
                has_status: last,
                status: Status::GOOD.0,
                lun: c.lun,
                itt: c.itt,
                ttt: RESERVED_TAG,
                stat_sn: if last { self.stat_sn() } else { 0 },
                exp_cmd_sn: self.exp_cmd_sn,
                max_cmd_sn: self.max_cmd_sn(),
                data_sn,
                buffer_offset: offset as u32,
                residual: 0,
                data: Vec::new(),
            };
            let framing = d.encode_parts(bytes, false, false);
            self.out.extend_from_slice(framing.head());
            self.out.extend_from_slice(bytes);
            self.out.extend_from_slice(framing.tail());
            offset += seg;
            data_sn = data_sn.wrapping_add(1);
        }
    }

    fn status(&mut self, c: &ScsiCommand, status: Status, sense: Vec<u8>) {
        let r = ScsiResponse {
            bidi_overflow: false,
            bidi_underflow: false,
            overflow: false,
            underflow: false,
            response: 0,
            status: status.0,
            itt: c.itt,
            snack_tag: 0,
            stat_sn: self.stat_sn(),
            exp_cmd_sn: self.exp_cmd_sn,
            max_cmd_sn: self.max_cmd_sn(),
            exp_data_sn: 0,
            bidi_residual: 0,
            residual: 0,
            sense,
        };
        Reply::ScsiResponse(r).encode_into(&mut self.out, false, false);
    }
}

/// The key=value pairs of a login's text (NUL-separated).
fn keys(data: &[u8]) -> impl Iterator<Item = (&str, &str)> {
    data.split(|b| *b == 0)
        .filter_map(|kv| std::str::from_utf8(kv).ok())
        .filter_map(|kv| kv.split_once('='))
}
