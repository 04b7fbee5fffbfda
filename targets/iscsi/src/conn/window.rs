//! Sequence numbers (RFC 7143 §4.2.2): the CmdSN window, StatSN and
//! Target Transfer Tags.

use super::serial::sn_le;
use super::Connection;
use crate::pdu::RESERVED_TAG;

impl Connection {
    pub(super) fn next_stat_sn(&mut self) -> u32 {
        let s = self.stat_sn;
        self.stat_sn = self.stat_sn.wrapping_add(1);
        s
    }

    /// Check a non-immediate CmdSN against the window. Only the expected
    /// CmdSN is accepted: with one connection per session, anything else is
    /// outside the window or a duplicate, and is silently ignored (§4.2.2.1).
    pub(super) fn accept_cmd_sn(&mut self, immediate: bool, cmd_sn: u32) -> bool {
        if immediate {
            return true;
        }
        if cmd_sn == self.exp_cmd_sn && sn_le(cmd_sn, self.max_cmd_sn) {
            self.exp_cmd_sn = self.exp_cmd_sn.wrapping_add(1);
            true
        } else {
            tracing::debug!(
                cmd_sn,
                exp = self.exp_cmd_sn,
                max = self.max_cmd_sn,
                "CmdSN outside the window; ignored"
            );
            false
        }
    }

    /// A non-immediate command finished: open the window by one, unless
    /// the session is over its share of the data buffer budget while
    /// others wait (then the slot is owed and opened with a later one).
    pub(super) fn retire(&mut self, immediate: bool) {
        if immediate {
            return;
        }
        if self.account.over_share() {
            self.window_owed = self.window_owed.saturating_add(1);
            return;
        }
        let open = 1u32.saturating_add(std::mem::take(&mut self.window_owed));
        self.max_cmd_sn = self.max_cmd_sn.wrapping_add(open);
    }

    pub(super) fn alloc_ttt(&mut self) -> u32 {
        let t = self.next_ttt;
        self.next_ttt = self.next_ttt.wrapping_add(1);
        if self.next_ttt == RESERVED_TAG {
            self.next_ttt = 1;
        }
        t
    }
}
