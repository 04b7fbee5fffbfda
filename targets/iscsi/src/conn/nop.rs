//! NOP-Out and NOP-In (RFC 7143 §11.18, §11.19): answering the
//! initiator's pings and pinging an idle initiator.

use std::time::Instant;

use super::Connection;
use crate::pdu::{NopIn, NopOut, Reply, RESERVED_TAG};

impl Connection {
    pub(super) fn handle_nop_out(&mut self, n: NopOut, data: &[u8]) {
        if n.itt == RESERVED_TAG {
            // An answer to our ping, or a no-reply NOP.
            if let Some((ttt, _)) = self.ping {
                if n.ttt == ttt {
                    self.ping = None;
                }
            }
            return;
        }
        if !self.accept_cmd_sn(n.immediate, n.cmd_sn) {
            return;
        }
        self.retire(n.immediate);
        let reply = NopIn {
            lun: n.lun,
            itt: n.itt,
            ttt: RESERVED_TAG,
            stat_sn: self.next_stat_sn(),
            exp_cmd_sn: self.exp_cmd_sn,
            max_cmd_sn: self.max_cmd_sn,
            data: data.to_vec(),
        };
        self.send(Reply::NopIn(reply));
    }

    /// Once in full feature phase: ping an idle initiator with NOP-In and
    /// close the connection when a ping goes unanswered (RFC 7143 §11.19).
    pub(super) fn keepalive(&mut self, now: Instant) {
        if let Some((_, sent)) = self.ping {
            if now >= sent + self.cfg.nop_timeout {
                tracing::warn!("NOP-In ping timed out; dropping connection");
                self.fail();
            }
            return;
        }
        let (Some(interval), Some(last)) = (self.cfg.nop_interval, self.last_rx) else {
            return;
        };
        if now >= last + interval {
            let ttt = self.alloc_ttt();
            self.ping = Some((ttt, now));
            let nop = NopIn {
                lun: 0,
                itt: RESERVED_TAG,
                ttt,
                // A ping does not advance StatSN (RFC 7143 §11.19.3).
                stat_sn: self.stat_sn,
                exp_cmd_sn: self.exp_cmd_sn,
                max_cmd_sn: self.max_cmd_sn,
                data: Vec::new(),
            };
            self.send(Reply::NopIn(nop));
        }
    }
}
