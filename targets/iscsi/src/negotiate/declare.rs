//! What the target sends on its own before leaving the operational stage:
//! its declarations and the offers that keep the session within [`Limits`](super::Limits).

use crate::text::KeyValues;

use super::keys::Key;
use super::negotiator::{Negotiator, Offer};
use super::params::first_burst_irrelevant;
use super::types::{Digest, SessionType, Transport};

impl Negotiator {
    /// Keys the target must still send in the response that ends the
    /// operational stage: its declarations (MaxRecvDataSegmentLength, or on
    /// iSER TargetRecvDataSegmentLength and MaxOutstandingUnexpectedPDUs) and
    /// offers for keys whose RFC default would exceed [`Limits`](super::Limits) because the
    /// initiator did not offer them. Each key is returned once. If
    /// [`awaiting_answers`](Self::awaiting_answers) is then true, the response
    /// must not transit (T=0) so that the initiator can answer.
    pub fn pending_declarations(&mut self) -> KeyValues {
        self.declarations_sent = true;
        let mut out = KeyValues::new();
        match self.transport {
            Transport::Tcp => {
                let v = self.limits.max_recv_data_segment_length;
                if self.declare(Key::MaxRecvDataSegmentLength, v.to_string(), &mut out) {
                    self.params.target_max_recv_dsl = v;
                }
                self.offer_digest(Key::HeaderDigest, &mut out);
                self.offer_digest(Key::DataDigest, &mut out);
            }
            Transport::Iser => {
                let v = self.limits.target_recv_data_segment_length;
                if self.declare(Key::TargetRecvDsl, v.to_string(), &mut out) {
                    self.params.target_recv_dsl = v;
                }
                // Declared only to an initiator that declared its own:
                // open-iscsi fails a login on any key it does not know, and
                // it does not know this one. Undeclared means 0, no limit.
                let known = self.seen.contains(Key::MaxOutstandingUnexpectedPdus.name());
                if self.leading && known {
                    let v = self.limits.max_outstanding_unexpected_pdus;
                    self.declare(Key::MaxOutstandingUnexpectedPdus, v.to_string(), &mut out);
                }
                if self.leading && self.params.session_type == SessionType::Normal {
                    self.offer(Key::RdmaExtensions, "Yes".into(), true, &mut out);
                }
            }
        }
        if self.leading {
            self.offer_session_limits(&mut out);
        }
        out
    }

    /// Offers for leading-only keys whose current value breaks our limits.
    fn offer_session_limits(&mut self, out: &mut KeyValues) {
        let (l, p) = (&self.limits, &self.params);
        let normal = p.session_type == SessionType::Normal;
        let wait = (l.default_time2wait > p.default_time2wait).then_some(l.default_time2wait);
        let retain =
            (l.default_time2retain < p.default_time2retain).then_some(l.default_time2retain);
        let immediate_off = normal && !l.immediate_data && p.immediate_data;
        let max_burst =
            (normal && l.max_burst_length < p.max_burst_length).then_some(l.max_burst_length);
        let burst_cap = max_burst.unwrap_or(p.max_burst_length);
        let first_cap = l.first_burst_length.min(burst_cap);
        if immediate_off && self.offer(Key::ImmediateData, "No".into(), false, out) {
            // AND with No: the result is No whatever the answer (§6.2.2), and
            // the initiator need not answer.
            self.params.immediate_data = false;
        }
        if let Some(v) = max_burst {
            self.offer(Key::MaxBurstLength, v.to_string(), true, out);
        }
        let p = &self.params;
        if normal && !first_burst_irrelevant(p) && first_cap < p.first_burst_length {
            self.offer(Key::FirstBurstLength, first_cap.to_string(), true, out);
        }
        if let Some(v) = wait {
            self.offer(Key::DefaultTime2Wait, v.to_string(), true, out);
        }
        if let Some(v) = retain {
            self.offer(Key::DefaultTime2Retain, v.to_string(), true, out);
        }
    }

    /// Offer digests when we do not accept the default (None).
    fn offer_digest(&mut self, key: Key, out: &mut KeyValues) {
        let prefs = self.digest_prefs(key);
        if prefs.contains(&Digest::None) {
            return;
        }
        let list = prefs
            .iter()
            .map(|d| d.as_str())
            .collect::<Vec<_>>()
            .join(",");
        self.offer(key, list, true, out);
    }

    /// Send a declarative `key=value` once (the initiator's own declaration
    /// of the same key is independent); returns whether it was added.
    fn declare(&mut self, key: Key, value: String, out: &mut KeyValues) -> bool {
        if !self.sent.insert(key) {
            return false;
        }
        out.push((key.name().to_owned(), value));
        true
    }

    /// Offer `key=value` unless either side already negotiated the key;
    /// records it as awaiting an answer when `answer_due`. Returns whether
    /// it was added.
    fn offer(&mut self, key: Key, value: String, answer_due: bool, out: &mut KeyValues) -> bool {
        if self.seen.contains(key.name()) || !self.declare(key, value.clone(), out) {
            return false;
        }
        if answer_due {
            self.awaiting.push(Offer { key, value });
        }
        true
    }
}
