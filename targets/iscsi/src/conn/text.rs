//! Text requests in full feature phase (RFC 7143 §11.10, §11.11):
//! SendTargets, long requests and responses in C-bit continuations.

use std::collections::VecDeque;

use super::{Connection, TextOut};
use crate::negotiate::SessionType;
use crate::pdu::{Reply, TextRequest, TextResponse, BHS_LEN, RESERVED_TAG};
use crate::refusal::PduRefusal;
use crate::text::{encode_text, parse_text, TextSplitter};

impl Connection {
    pub(super) fn handle_text(&mut self, t: TextRequest, data: &[u8], bhs: &[u8; BHS_LEN]) {
        if !self.accept_cmd_sn(t.immediate, t.cmd_sn) {
            return;
        }
        self.retire(t.immediate);
        // Continuation of a long response we are sending.
        if t.ttt != RESERVED_TAG {
            let matches = self
                .text_out
                .as_ref()
                .is_some_and(|o| o.ttt == t.ttt && o.itt == t.itt);
            if matches && data.is_empty() {
                self.send_text_chunk();
            } else {
                self.text_out = None;
                self.reject(PduRefusal::TextContinuation, bhs);
            }
            return;
        }
        self.text_out = None;
        let full = match self.text_in.push(data, t.cont) {
            Ok(Some(full)) => full,
            Ok(None) => {
                // More request text follows: answer empty with a TTT (§11.10.2).
                let ttt = self.alloc_ttt();
                self.text_out = Some(TextOut {
                    itt: t.itt,
                    ttt,
                    chunks: VecDeque::new(),
                });
                let r = TextResponse {
                    final_bit: false,
                    cont: false,
                    lun: t.lun,
                    itt: t.itt,
                    ttt,
                    stat_sn: self.next_stat_sn(),
                    exp_cmd_sn: self.exp_cmd_sn,
                    max_cmd_sn: self.max_cmd_sn,
                    data: Vec::new(),
                };
                self.send(Reply::TextResponse(r));
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "text request too long or malformed");
                self.text_in.reset();
                self.reject(PduRefusal::TextMalformed, bhs);
                return;
            }
        };
        let pairs = match parse_text(&full) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "bad text request");
                self.reject(PduRefusal::TextMalformed, bhs);
                return;
            }
        };
        let answer = self.text_answer(&pairs);
        let encoded = encode_text(&answer);
        let max = self.max_send_dsl().max(512) as usize;
        let chunks: VecDeque<Vec<u8>> = TextSplitter::split(&encoded, max).into();
        let ttt = if chunks.len() > 1 {
            self.alloc_ttt()
        } else {
            RESERVED_TAG
        };
        self.text_out = Some(TextOut {
            itt: t.itt,
            ttt,
            chunks,
        });
        self.send_text_chunk();
    }

    pub(super) fn send_text_chunk(&mut self) {
        let Some(mut o) = self.text_out.take() else {
            return;
        };
        let chunk = o.chunks.pop_front().unwrap_or_default();
        let more = !o.chunks.is_empty();
        let r = TextResponse {
            final_bit: !more,
            cont: more,
            lun: 0,
            itt: o.itt,
            ttt: if more { o.ttt } else { RESERVED_TAG },
            stat_sn: self.next_stat_sn(),
            exp_cmd_sn: self.exp_cmd_sn,
            max_cmd_sn: self.max_cmd_sn,
            data: chunk,
        };
        self.send(Reply::TextResponse(r));
        if more {
            self.text_out = Some(o);
        }
    }

    pub(super) fn text_answer(&self, pairs: &[(String, String)]) -> Vec<(String, String)> {
        let Some(s) = &self.session else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (k, v) in pairs {
            if k == "SendTargets" {
                let only = match s.session_type {
                    SessionType::Discovery => None,
                    SessionType::Normal => Some(s.target.as_str()),
                };
                out.extend(crate::discovery::send_targets(
                    &self.cfg,
                    v,
                    &s.initiator,
                    &self.setup.local_addr,
                    only,
                ));
            } else {
                // Renegotiation in full feature phase is not offered.
                out.push((k.clone(), "NotUnderstood".to_string()));
            }
        }
        out
    }
}
