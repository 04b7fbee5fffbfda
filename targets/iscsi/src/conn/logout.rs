//! Logout (RFC 7143 §11.14, §11.15) and the target's request for one
//! (Async Message, §11.9.1).

use super::{Connection, PendingLogout, Phase};
use crate::pdu::{
    AsyncEvent, AsyncMessage, LogoutReason, LogoutRequest, LogoutResponse, LogoutResponseCode,
    Reply,
};

impl Connection {
    /// Ask the initiator to log out, e.g. on target shutdown (RFC 7143
    /// §11.9.1, AsyncEvent 1). `seconds` is the time it has to do so.
    pub fn request_logout(&mut self, seconds: u16) {
        if !matches!(self.phase, Phase::FullFeature) || self.async_logout_sent {
            return;
        }
        self.async_logout_sent = true;
        let msg = AsyncMessage {
            lun: 0,
            stat_sn: self.next_stat_sn(),
            exp_cmd_sn: self.exp_cmd_sn,
            max_cmd_sn: self.max_cmd_sn,
            event: AsyncEvent::LOGOUT_REQUEST,
            vcode: 0,
            param1: 0,
            param2: 0,
            param3: seconds,
            data: Vec::new(),
        };
        self.send(Reply::AsyncMessage(msg));
    }

    pub(super) fn handle_logout(&mut self, l: LogoutRequest) {
        if !self.accept_cmd_sn(l.immediate, l.cmd_sn) {
            return;
        }
        self.retire(l.immediate);
        let my_cid = self.session.as_ref().map(|s| s.cid).unwrap_or(0);
        let response = match l.reason {
            LogoutReason::CLOSE_SESSION => LogoutResponseCode::CLOSED,
            LogoutReason::CLOSE_CONNECTION if l.cid == my_cid => LogoutResponseCode::CLOSED,
            LogoutReason::CLOSE_CONNECTION => LogoutResponseCode::CID_NOT_FOUND,
            // Removing a connection for recovery needs ERL 2.
            LogoutReason::REMOVE_FOR_RECOVERY => LogoutResponseCode::RECOVERY_NOT_SUPPORTED,
            _ => LogoutResponseCode::CLEANUP_FAILED,
        };
        self.logout = Some(PendingLogout {
            itt: l.itt,
            response,
        });
        // Collecting writes, and reads waiting for the budget, will never
        // complete now.
        self.writes.clear();
        self.reads_waiting.clear();
        self.maybe_finish_logout();
    }

    /// Send the Logout Response once no task is left in flight (and, on
    /// iSER, no RDMA Read still reads an initiator buffer).
    pub(super) fn maybe_finish_logout(&mut self) {
        if self.logout.is_none() || !self.inflight.is_empty() || !self.reads_idle() {
            return;
        }
        let Some(l) = self.logout.take() else {
            return;
        };
        let r = LogoutResponse {
            response: l.response,
            itt: l.itt,
            stat_sn: self.next_stat_sn(),
            exp_cmd_sn: self.exp_cmd_sn,
            max_cmd_sn: self.max_cmd_sn,
            time2wait: 0,
            time2retain: 0,
        };
        self.send(Reply::LogoutResponse(r));
        if l.response == LogoutResponseCode::CLOSED {
            self.phase = Phase::Closing;
        }
    }
}
