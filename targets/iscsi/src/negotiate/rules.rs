//! The result functions of §6.2.2 per key (§13, RFC 7145 §6): the answer to
//! each initiator offer, the check of the initiator's answers to target
//! offers, and the FirstBurstLength/MaxBurstLength consistency check.

use crate::text::parse_number;

use super::error::NegotiationError;
use super::keys::Key;
use super::limits::{DSL_MAX, DSL_MIN};
use super::negotiator::{Negotiator, Offer};
use super::params::first_burst_irrelevant;
use super::types::{Digest, SessionType, Transport};
use super::values::{
    invalid, is_answer_constant, parse_bool, parse_in_range, parse_iscsi_name, parse_list,
    parse_u16, parse_u32, yes_no, PROTOCOL_LEVEL,
};

impl Negotiator {
    /// Apply one offered key; returns the answer value, if any.
    pub(super) fn negotiate(
        &mut self,
        key: Key,
        value: &str,
    ) -> Result<Option<String>, NegotiationError> {
        let l = &self.limits;
        let p = &mut self.params;
        let answer = match key {
            Key::HeaderDigest | Key::DataDigest => return self.digest(key, value).map(Some),
            Key::MaxConnections => {
                p.max_connections = parse_u16(key, value, 1, 65_535)?.min(l.max_connections);
                p.max_connections.to_string()
            }
            Key::InitialR2T => {
                p.initial_r2t = parse_bool(key, value)? || l.initial_r2t;
                yes_no(p.initial_r2t)
            }
            Key::ImmediateData => {
                p.immediate_data = parse_bool(key, value)? && l.immediate_data;
                yes_no(p.immediate_data)
            }
            Key::MaxBurstLength => {
                let v = parse_u32(key, value, DSL_MIN, DSL_MAX)?;
                self.offered_max_burst = Some(v);
                p.max_burst_length = v.min(l.max_burst_length);
                p.max_burst_length.to_string()
            }
            Key::FirstBurstLength => {
                let v = parse_u32(key, value, DSL_MIN, DSL_MAX)?;
                self.offered_first_burst = Some(v);
                p.first_burst_length = v.min(l.first_burst_length).min(p.max_burst_length);
                p.first_burst_length.to_string()
            }
            Key::DefaultTime2Wait => {
                p.default_time2wait = parse_u16(key, value, 0, 3600)?.max(l.default_time2wait);
                p.default_time2wait.to_string()
            }
            Key::DefaultTime2Retain => {
                p.default_time2retain = parse_u16(key, value, 0, 3600)?.min(l.default_time2retain);
                p.default_time2retain.to_string()
            }
            Key::MaxOutstandingR2T => {
                // §13.19: with ERL > 0 and in-order sequences, only one R2T
                // may be outstanding.
                let cap = if l.error_recovery_level > 0 && p.data_sequence_in_order {
                    1
                } else {
                    l.max_outstanding_r2t
                };
                p.max_outstanding_r2t = parse_u32(key, value, 1, 65_535)?.min(cap);
                p.max_outstanding_r2t.to_string()
            }
            Key::DataPduInOrder => {
                p.data_pdu_in_order = parse_bool(key, value)? || l.data_pdu_in_order;
                yes_no(p.data_pdu_in_order)
            }
            Key::DataSequenceInOrder => {
                p.data_sequence_in_order = parse_bool(key, value)? || l.data_sequence_in_order;
                yes_no(p.data_sequence_in_order)
            }
            Key::ErrorRecoveryLevel => {
                let v = parse_in_range(key, value, 0, 2)?;
                p.error_recovery_level = u8::try_from(v).unwrap_or(0).min(l.error_recovery_level);
                p.error_recovery_level.to_string()
            }
            Key::TaskReporting => {
                // We implement only the RFC 3720 semantics.
                let items = parse_list(key, value)?;
                if items.contains(&"RFC3720") {
                    "RFC3720"
                } else {
                    "Reject"
                }
                .to_owned()
            }
            Key::ProtocolLevel => parse_in_range(key, value, 0, 31)?
                .min(PROTOCOL_LEVEL)
                .to_string(),
            // §13.25 (Obsoleted Keys): answer Reject, never
            // NotUnderstood. iSER requires them off (RFC 7145 §6.6), and No
            // is an allowed answer under RFC 7143 too.
            Key::IfMarker | Key::OfMarker => match self.transport {
                Transport::Tcp => "Reject".to_owned(),
                Transport::Iser => "No".to_owned(),
            },
            Key::IfMarkInt | Key::OfMarkInt => "Reject".to_owned(),
            Key::RdmaExtensions => {
                let offered = parse_bool(key, value)?;
                let result = offered && self.transport == Transport::Iser;
                self.set_rdma_extensions(result)?;
                yes_no(result)
            }
            Key::TargetRecvDsl => {
                // The initiator may suggest a value; we answer what we accept.
                let v = parse_u32(key, value, DSL_MIN, DSL_MAX)?;
                p.target_recv_dsl = v.min(l.target_recv_data_segment_length);
                self.sent.insert(Key::TargetRecvDsl);
                p.target_recv_dsl.to_string()
            }
            Key::MaxRecvDataSegmentLength => {
                p.initiator_max_recv_dsl = parse_u32(key, value, DSL_MIN, DSL_MAX)?;
                return Ok(None);
            }
            Key::InitiatorRecvDsl => {
                p.initiator_recv_dsl = parse_u32(key, value, DSL_MIN, DSL_MAX)?;
                return Ok(None);
            }
            Key::MaxOutstandingUnexpectedPdus => {
                let v = parse_in_range(key, value, 0, u64::from(u32::MAX))?;
                if v == 1 {
                    return Err(NegotiationError::OutOfRange {
                        key: key.name().to_owned(),
                        value: value.to_owned(),
                    });
                }
                p.max_outstanding_unexpected_pdus = u32::try_from(v).unwrap_or(u32::MAX);
                return Ok(None);
            }
            Key::InitiatorName => {
                p.initiator_name = Some(parse_iscsi_name(key, value)?);
                return Ok(None);
            }
            Key::TargetName => {
                p.target_name = Some(parse_iscsi_name(key, value)?);
                return Ok(None);
            }
            Key::InitiatorAlias => {
                p.initiator_alias = Some(value.to_owned());
                return Ok(None);
            }
            // Filtered out by the caller.
            Key::SessionType
            | Key::SendTargets
            | Key::TargetAlias
            | Key::TargetAddress
            | Key::TargetPortalGroupTag => return Ok(None),
        };
        Ok(Some(answer))
    }

    fn set_rdma_extensions(&mut self, result: bool) -> Result<(), NegotiationError> {
        if self.transport == Transport::Iser
            && !result
            && self.params.session_type == SessionType::Normal
        {
            return Err(NegotiationError::RdmaExtensionsRequired);
        }
        self.params.rdma_extensions = result;
        Ok(())
    }

    pub(super) fn digest_prefs(&self, key: Key) -> &[Digest] {
        if key == Key::HeaderDigest {
            &self.limits.header_digest
        } else {
            &self.limits.data_digest
        }
    }

    fn set_digest(&mut self, key: Key, d: Digest) {
        let on = d == Digest::CRC32C;
        if key == Key::HeaderDigest {
            self.params.header_digest = on;
        } else {
            self.params.data_digest = on;
        }
    }

    /// HeaderDigest/DataDigest list negotiation (§13.1). On iSER digests are
    /// not used (RFC 7145 §6.1): the result is always None.
    fn digest(&mut self, key: Key, value: &str) -> Result<String, NegotiationError> {
        let items = parse_list(key, value)?;
        if self.transport == Transport::Iser {
            self.set_digest(key, Digest::None);
            return Ok(if items.contains(&"None") {
                "None"
            } else {
                "Reject"
            }
            .to_owned());
        }
        let prefs = self.digest_prefs(key);
        let choice = items
            .iter()
            .filter_map(|i| Digest::from_name(i))
            .find(|d| prefs.contains(d));
        match choice {
            Some(d) => {
                self.set_digest(key, d);
                Ok(d.as_str().to_owned())
            }
            // The result stays at the default, None: fine only if we accept it.
            None if prefs.contains(&Digest::None) => Ok("Reject".to_owned()),
            None => Err(NegotiationError::NoAcceptableValue(key.name().to_owned())),
        }
    }

    /// The initiator's answer to one of our offers.
    pub(super) fn take_answer(
        &mut self,
        offer: &Offer,
        value: &str,
    ) -> Result<(), NegotiationError> {
        let key = offer.key;
        let ours = parse_number(&offer.value).ok();
        let refused = || NegotiationError::OfferRefused {
            key: key.name().to_owned(),
            value: value.to_owned(),
        };
        if is_answer_constant(value) {
            return Err(refused());
        }
        match key {
            Key::MaxBurstLength => {
                let v = parse_u32(key, value, DSL_MIN, DSL_MAX)?;
                if ours.is_some_and(|o| u64::from(v) > o) {
                    return Err(refused());
                }
                self.params.max_burst_length = v;
            }
            Key::FirstBurstLength => {
                let v = parse_u32(key, value, DSL_MIN, DSL_MAX)?;
                if ours.is_some_and(|o| u64::from(v) > o) {
                    return Err(refused());
                }
                self.params.first_burst_length = v;
            }
            Key::DefaultTime2Wait => {
                let v = parse_u16(key, value, 0, 3600)?;
                if ours.is_some_and(|o| u64::from(v) < o) {
                    return Err(refused());
                }
                self.params.default_time2wait = v;
            }
            Key::DefaultTime2Retain => {
                let v = parse_u16(key, value, 0, 3600)?;
                if ours.is_some_and(|o| u64::from(v) > o) {
                    return Err(refused());
                }
                self.params.default_time2retain = v;
            }
            Key::HeaderDigest | Key::DataDigest => {
                let d = Digest::from_name(value).ok_or_else(|| invalid(key, value))?;
                if !offer.value.split(',').any(|o| o == value) {
                    return Err(refused());
                }
                self.set_digest(key, d);
            }
            Key::RdmaExtensions => {
                let v = parse_bool(key, value)?;
                self.set_rdma_extensions(v)?;
            }
            _ => return Err(invalid(key, value)),
        }
        Ok(())
    }

    /// FirstBurstLength must not exceed MaxBurstLength (§13.14).
    pub(super) fn check_bursts(&self) -> Result<(), NegotiationError> {
        if let (Some(first), Some(max)) = (self.offered_first_burst, self.offered_max_burst) {
            if first > max {
                return Err(NegotiationError::FirstBurstExceedsMaxBurst { first, max });
            }
        }
        // Before our declarations, pending_declarations can still fix a
        // default FirstBurstLength above a small MaxBurstLength by offering.
        let p = &self.params;
        if self.declarations_sent
            && !self.awaiting_answers()
            && p.first_burst_length > p.max_burst_length
            && !first_burst_irrelevant(p)
            && p.session_type == SessionType::Normal
        {
            return Err(NegotiationError::FirstBurstExceedsMaxBurst {
                first: p.first_burst_length,
                max: p.max_burst_length,
            });
        }
        Ok(())
    }
}
