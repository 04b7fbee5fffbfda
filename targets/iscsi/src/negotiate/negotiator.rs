//! [`Negotiator`], one connection's login-phase negotiation state, and the
//! processing of a login or Text request's keys: first-request checks,
//! duplicates, stage and leading-connection rules, relevance. The per-key
//! result functions are in `rules`, the target's own declarations and offers
//! in `declare`.

use std::collections::{HashMap, HashSet};

use crate::chap::is_security_key;
use crate::pdu::Stage;
use crate::text::KeyValues;

use super::error::NegotiationError;
use super::keys::{Key, Usage};
use super::limits::{Limits, DSL_MAX, DSL_MIN};
use super::params::{first_burst_irrelevant, SessionParams};
use super::types::{SessionType, Transport};
use super::values::{invalid, is_answer_constant, parse_session_type, parse_u32};

/// A key the target sent that needs the initiator's answer.
#[derive(Debug, Clone)]
pub(super) struct Offer {
    pub(super) key: Key,
    pub(super) value: String,
}

/// Target side of one connection's operational negotiation.
#[derive(Debug)]
pub struct Negotiator {
    pub(super) limits: Limits,
    pub(super) transport: Transport,
    pub(super) leading: bool,
    pub(super) params: SessionParams,
    /// No login request processed yet.
    pub(super) first_request: bool,
    /// Keys the initiator has sent in this login phase.
    pub(super) seen: HashSet<String>,
    /// The initiator's declarations that may be repeated unchanged
    /// ([`Key::any_stage`]), with their values.
    pub(super) declared: HashMap<Key, String>,
    /// Keys the target has declared or offered.
    pub(super) sent: HashSet<Key>,
    /// Target offers not yet answered.
    pub(super) awaiting: Vec<Offer>,
    /// The initiator's own MaxBurstLength/FirstBurstLength offers.
    pub(super) offered_max_burst: Option<u32>,
    pub(super) offered_first_burst: Option<u32>,
    /// pending_declarations has run.
    pub(super) declarations_sent: bool,
}

type Answer = Option<(String, String)>;

impl Negotiator {
    /// Negotiator for the leading connection of a new session.
    pub fn new(limits: Limits, transport: Transport) -> Self {
        Negotiator {
            limits: limits.clamped(),
            transport,
            leading: true,
            params: SessionParams::default(),
            first_request: true,
            seen: HashSet::new(),
            declared: HashMap::new(),
            sent: HashSet::new(),
            awaiting: Vec::new(),
            offered_max_burst: None,
            offered_first_burst: None,
            declarations_sent: false,
        }
    }

    /// Negotiator for a further connection joining `session`: session-wide
    /// results are inherited and leading-only keys are refused.
    pub fn new_non_leading(limits: Limits, transport: Transport, session: &SessionParams) -> Self {
        let defaults = SessionParams::default();
        let params = SessionParams {
            // Connection-only keys start over.
            header_digest: defaults.header_digest,
            data_digest: defaults.data_digest,
            initiator_max_recv_dsl: defaults.initiator_max_recv_dsl,
            target_max_recv_dsl: defaults.target_max_recv_dsl,
            initiator_recv_dsl: defaults.initiator_recv_dsl,
            target_recv_dsl: defaults.target_recv_dsl,
            ..session.clone()
        };
        Negotiator {
            leading: false,
            params,
            ..Negotiator::new(limits, transport)
        }
    }

    /// The values negotiated so far.
    pub fn params(&self) -> &SessionParams {
        &self.params
    }

    /// True while target offers (from [`pending_declarations`](Self::pending_declarations))
    /// await the initiator's answer: the target must not transit yet.
    pub fn awaiting_answers(&self) -> bool {
        !self.awaiting.is_empty()
    }

    /// Process the initiator's pairs of one login request (or, at
    /// `Stage::FULL_FEATURE`, one Text request) and return the answers, in
    /// the order of the offers. Call it for every login request, starting
    /// with the first (which must carry InitiatorName, and TargetName for a
    /// Normal session). At the security stage, security keys are skipped (see
    /// [`crate::chap::SecurityNegotiator`]).
    pub fn process(
        &mut self,
        stage: Stage,
        offered: &[(String, String)],
    ) -> Result<KeyValues, NegotiationError> {
        check_duplicates(offered)?;
        let result = if stage == Stage::FULL_FEATURE {
            self.process_text(offered)
        } else {
            self.process_login(stage, offered)
        };
        if let Err(e) = &result {
            tracing::debug!(error = %e, "negotiation failed");
        }
        result
    }

    fn process_login(
        &mut self,
        stage: Stage,
        offered: &[(String, String)],
    ) -> Result<KeyValues, NegotiationError> {
        let first = std::mem::replace(&mut self.first_request, false);
        if first {
            self.check_first_request(offered)?;
        }
        let mut order: Vec<usize> = (0..offered.len()).collect();
        order.sort_by_key(|&i| {
            offered
                .get(i)
                .and_then(|(k, _)| Key::from_name(k))
                .map_or(u8::MAX, Key::priority)
        });
        let mut answers: Vec<Answer> = vec![None; offered.len()];
        for i in order {
            if let (Some((key, value)), Some(slot)) = (offered.get(i), answers.get_mut(i)) {
                *slot = self.handle_login_key(stage, first, key, value)?;
            }
        }
        self.check_bursts()?;
        Ok(answers.into_iter().flatten().collect())
    }

    /// InitiatorName always, TargetName for Normal sessions, SessionType
    /// only here (§6.3, §13.4, §13.5, §13.21).
    fn check_first_request(
        &mut self,
        offered: &[(String, String)],
    ) -> Result<(), NegotiationError> {
        let find = |k: &str| offered.iter().find(|(key, _)| key == k).map(|(_, v)| v);
        if let Some(v) = find("SessionType") {
            let t = parse_session_type(v)?;
            if self.leading {
                self.params.session_type = t;
            } else if t != self.params.session_type {
                return Err(invalid(Key::SessionType, v));
            }
        }
        if find("InitiatorName").is_none() {
            return Err(NegotiationError::MissingParameter("InitiatorName"));
        }
        if self.params.session_type == SessionType::Normal && find("TargetName").is_none() {
            return Err(NegotiationError::MissingParameter("TargetName"));
        }
        Ok(())
    }

    fn handle_login_key(
        &mut self,
        stage: Stage,
        first: bool,
        name: &str,
        value: &str,
    ) -> Result<Answer, NegotiationError> {
        if let Some(pos) = self.awaiting.iter().position(|o| o.key.name() == name) {
            let offer = self.awaiting.remove(pos);
            self.seen.insert(name.to_owned());
            self.take_answer(&offer, value)?;
            return Ok(None);
        }
        if is_security_key(name) {
            return if stage == Stage::SECURITY {
                Ok(None)
            } else {
                Err(NegotiationError::SecurityKeyOutsideSecurityStage(
                    name.to_owned(),
                ))
            };
        }
        // An answer to something we declared, or a stray answer: nothing to say.
        if is_answer_constant(value) {
            return Ok(None);
        }
        if !self.seen.insert(name.to_owned()) {
            // libiscsi (and so QEMU) declares InitiatorName, TargetName and
            // SessionType again in the operational stage after a security
            // stage that ended at once; tgt accepts that. The same value
            // again changes nothing, so it is taken as it is; a changed
            // one is still an error.
            let same = Key::from_name(name)
                .filter(|k| k.any_stage())
                .and_then(|k| self.declared.get(&k))
                .is_some_and(|before| before == value);
            if same {
                return Ok(None);
            }
            return Err(NegotiationError::DuplicateKey(name.to_owned()));
        }
        let Some(key) = Key::from_name(name) else {
            // Unknown, including X- and X# private keys (§6.2, §13.22).
            return Ok(Some((name.to_owned(), "NotUnderstood".into())));
        };
        let not_allowed = || NegotiationError::NotAllowedInStage {
            key: name.to_owned(),
            stage,
        };
        match key.usage() {
            Usage::TargetOnly => return Err(NegotiationError::TargetOnlyKey(name.to_owned())),
            Usage::FullFeatureOnly => return Err(not_allowed()),
            _ => {}
        }
        if stage == Stage::SECURITY && !key.any_stage() {
            return Err(not_allowed());
        }
        if key.any_stage() {
            self.declared.insert(key, value.to_owned());
        }
        if key == Key::SessionType {
            // Already applied by check_first_request.
            return if first { Ok(None) } else { Err(not_allowed()) };
        }
        if !self.leading && key.usage() == Usage::LeadingOnly {
            return Err(NegotiationError::LeadingOnlyKey(name.to_owned()));
        }
        let irrelevant = (key.iser_only() && self.transport == Transport::Tcp)
            || (key.irrelevant_in_discovery()
                && self.params.session_type == SessionType::Discovery)
            || (key == Key::FirstBurstLength && first_burst_irrelevant(&self.params));
        if irrelevant {
            return Ok(Some((name.to_owned(), "Irrelevant".into())));
        }
        let answer = self.negotiate(key, value)?;
        Ok(answer.map(|v| (name.to_owned(), v)))
    }

    /// Text negotiation in full feature phase (§6.2, §11.10): only "ALL"
    /// keys can change; SendTargets is left to the caller.
    fn process_text(
        &mut self,
        offered: &[(String, String)],
    ) -> Result<KeyValues, NegotiationError> {
        let mut answers = KeyValues::new();
        for (name, value) in offered {
            if is_answer_constant(value) || name == "SendTargets" {
                continue;
            }
            let key = Key::from_name(name);
            let answer = match key {
                None if is_security_key(name) => "Reject",
                None => "NotUnderstood",
                Some(k @ Key::MaxRecvDataSegmentLength) => {
                    self.params.initiator_max_recv_dsl = parse_u32(k, value, DSL_MIN, DSL_MAX)?;
                    continue;
                }
                Some(Key::InitiatorAlias) => {
                    self.params.initiator_alias = Some(value.clone());
                    continue;
                }
                Some(_) => "Reject",
            };
            answers.push((name.clone(), answer.to_owned()));
        }
        Ok(answers)
    }
}

fn check_duplicates(offered: &[(String, String)]) -> Result<(), NegotiationError> {
    let mut keys = HashSet::with_capacity(offered.len());
    for (k, _) in offered {
        // Security keys are checked by the security negotiator.
        if !is_security_key(k) && !keys.insert(k.as_str()) {
            return Err(NegotiationError::DuplicateKey(k.clone()));
        }
    }
    Ok(())
}
