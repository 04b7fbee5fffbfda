//! The login phase (RFC 7143 §6.3, §11.12, §11.13) as a state machine
//! with no connection in it: stage transitions, security negotiation
//! (CHAP), operational negotiation, target lookup, ACL and TSIH
//! assignment. The connection hands each Login request in with a
//! [`LoginCtx`] (the few facts and shared tables a login needs) and gets
//! back a [`LoginStep`] to answer with, or a [`LoginFailure`]; it keeps
//! the Login Response framing, StatSN and the brake's hold
//! (`conn/login_phase.rs`).

use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rustgt_scsi::Nexus;

use crate::chap::{is_security_key, ChapPolicy, SecurityNegotiator};
use crate::config::{PortalConfig, TargetInfo};
use crate::login_failure::LoginFailure;
use crate::negotiate::{Negotiator, SessionType, Transport};
use crate::pdu::{LoginRequest, Stage};
use crate::session::{SessionInfo, SessionKey, SessionTable};
use crate::text::{encode_text, parse_text, KeyValues, TextAssembler};

/// What a login step needs from its connection.
pub(crate) struct LoginCtx<'a> {
    pub(crate) cfg: &'a PortalConfig,
    /// `host:port` the initiator connected to: the portal.
    pub(crate) local_addr: &'a str,
    /// The initiator's address, the key of the brake.
    pub(crate) peer_ip: Option<IpAddr>,
    pub(crate) conn_id: u64,
    pub(crate) sessions: &'a Mutex<SessionTable>,
}

/// The Login Response (status Success) one request gets.
#[derive(Debug)]
pub(crate) struct LoginStep {
    pub(crate) transit: bool,
    pub(crate) csg: Stage,
    pub(crate) nsg: Stage,
    /// Encoded text (key=value pairs).
    pub(crate) data: Vec<u8>,
    /// The login is over: enter full feature phase.
    pub(crate) done: Option<Finished>,
}

/// A login that reached full feature phase.
#[derive(Debug)]
pub(crate) struct Finished {
    pub(crate) info: SessionInfo,
    /// The connection of the session this login reinstated, to close.
    pub(crate) reinstated: Option<u64>,
}

/// Login progress of one connection.
#[derive(Debug)]
pub(crate) struct LoginState {
    first: Option<LoginRequest>,
    stage: Stage,
    text: TextAssembler,
    negotiator: Negotiator,
    security: Option<SecurityNegotiator>,
    /// Random bytes for CHAP.
    random: [u8; 32],
    initiator: Option<String>,
    session_type: SessionType,
    target: Option<TargetInfo>,
    sent_first_response: bool,
    first_pdu_sent: bool,
    /// The brake was consulted (at the first request).
    brake_checked: bool,
    /// The first request, held back by the brake until the deadline.
    held: Option<Held>,
}

/// A login request waiting for its time (see [`crate::brake`]).
#[derive(Debug)]
struct Held {
    req: LoginRequest,
    /// At most the login data segment limit (8 KiB).
    data: Vec<u8>,
    until: Instant,
}

impl LoginState {
    pub(crate) fn new(cfg: &PortalConfig, transport: Transport, random: [u8; 32]) -> Self {
        LoginState {
            first: None,
            stage: Stage::SECURITY,
            text: TextAssembler::new(cfg.max_text_len),
            negotiator: Negotiator::new(cfg.limits.clone(), transport),
            security: None,
            random,
            initiator: None,
            session_type: SessionType::Normal,
            target: None,
            sent_first_response: false,
            first_pdu_sent: false,
            brake_checked: false,
            held: None,
        }
    }

    /// True the first time only: the brake is consulted once per login.
    pub(crate) fn first_brake_check(&mut self) -> bool {
        !std::mem::replace(&mut self.brake_checked, true)
    }

    /// A request is held back by the brake.
    pub(crate) fn is_holding(&self) -> bool {
        self.held.is_some()
    }

    /// Holds `req` back until `until`.
    pub(crate) fn hold(&mut self, req: LoginRequest, data: &[u8], until: Instant) {
        self.held = Some(Held {
            req,
            data: data.to_vec(),
            until,
        });
    }

    /// When the held request is due.
    pub(crate) fn hold_until(&self) -> Option<Instant> {
        self.held.as_ref().map(|h| h.until)
    }

    /// The held request, once its time has come.
    pub(crate) fn take_due(&mut self, now: Instant) -> Option<(LoginRequest, Vec<u8>)> {
        if self.held.as_ref().is_none_or(|h| now < h.until) {
            return None;
        }
        self.held.take().map(|h| (h.req, h.data))
    }

    /// Who is logging in, for the log: initiator name and CHAP user.
    pub(crate) fn who(&self) -> (Option<String>, Option<String>) {
        (
            self.initiator.clone(),
            self.security
                .as_ref()
                .and_then(|s| s.user())
                .map(str::to_owned),
        )
    }

    /// True for the first Login Response PDU of the connection (it starts
    /// StatSN, §11.13.4); later calls return false.
    pub(crate) fn take_first_response(&mut self) -> bool {
        !std::mem::replace(&mut self.first_pdu_sent, true)
    }

    /// Runs one Login request: what to answer, or why the login fails.
    pub(crate) fn step(
        &mut self,
        ctx: &LoginCtx<'_>,
        req: &LoginRequest,
        data: &[u8],
    ) -> Result<LoginStep, LoginFailure> {
        let st = self;

        // Fields that must stay the same across the login (§11.12).
        match &st.first {
            None => {
                if req.version_min > 0 {
                    return Err(LoginFailure::UnsupportedVersion);
                }
                st.stage = req.csg;
                st.first = Some(req.clone());
            }
            Some(f) => {
                if f.isid != req.isid || f.tsih != req.tsih || f.cid != req.cid {
                    return Err(LoginFailure::IdentityChanged);
                }
            }
        }
        if req.csg != st.stage
            || req.csg == Stage(2)
            || req.csg == Stage::FULL_FEATURE
            || (req.transit && (req.nsg <= req.csg || req.nsg == Stage(2)))
        {
            return Err(LoginFailure::BadStageTransition);
        }

        // Text may span several PDUs (C bit, §6.1): acknowledge and wait.
        let full = match st.text.push(data, req.cont) {
            Ok(Some(full)) => full,
            Ok(None) => {
                return Ok(LoginStep {
                    transit: false,
                    csg: req.csg,
                    nsg: req.csg,
                    data: Vec::new(),
                    done: None,
                })
            }
            Err(_) => return Err(LoginFailure::TextTooLong),
        };
        let pairs = parse_text(&full).map_err(|_| LoginFailure::MalformedText)?;

        if st.initiator.is_none() {
            st.identify(ctx.cfg, ctx.local_addr, &pairs)?;
        }
        let (sec_keys, op_keys): (KeyValues, KeyValues) =
            pairs.into_iter().partition(|(k, _)| is_security_key(k));

        let mut answer = KeyValues::new();
        let mut may_transit = true;
        if req.csg == Stage::SECURITY {
            let policy = st.chap_policy(ctx.cfg);
            let random = st.random;
            let sec = st.security.get_or_insert_with(|| {
                let challenge = random.get(..16).unwrap_or_default().to_vec();
                SecurityNegotiator::new(policy, challenge, random[16])
            });
            let sec_answer = sec.process(&sec_keys).map_err(LoginFailure::Auth)?;
            let complete = sec.is_complete();
            if sec.authenticated() {
                // Proven with CHAP: the address's failures are forgotten.
                if let (Some(ip), Ok(mut t)) = (ctx.peer_ip, ctx.sessions.lock()) {
                    t.brake_mut()
                        .succeeded(ip, st.initiator.as_deref().unwrap_or_default());
                }
            }
            if req.transit && !complete && sec_answer.is_empty() {
                return Err(LoginFailure::AuthNotCompleted);
            }
            may_transit = complete;
            answer.extend(sec_answer);
        } else {
            if !sec_keys.is_empty() {
                return Err(LoginFailure::SecurityKeysInOperational);
            }
            // Skipping the security stage is only allowed when no
            // authentication is required.
            let policy = st.chap_policy(ctx.cfg);
            let passed = st.security.as_ref().is_some_and(|s| s.is_complete());
            if policy.initiator.is_some() && !passed {
                return Err(LoginFailure::AuthRequired);
            }
        }
        let op_answer = st
            .negotiator
            .process(req.csg, &op_keys)
            .map_err(LoginFailure::Negotiation)?;
        answer.extend(op_answer);

        // First response of a Normal session names the portal group (§13.9).
        if !st.sent_first_response {
            st.sent_first_response = true;
            if let (SessionType::Normal, Some(t)) = (st.session_type, &st.target) {
                answer.push(("TargetPortalGroupTag".into(), t.tpgt.to_string()));
                if let Some(alias) = &t.alias {
                    answer.push(("TargetAlias".into(), alias.clone()));
                }
            }
        }

        let mut transit = req.transit && may_transit;
        if transit && req.nsg == Stage::FULL_FEATURE && req.csg == Stage::OPERATIONAL {
            // Our declarations and offers go with the first request to
            // leave; if any needs an answer, stay for one more round.
            answer.extend(st.negotiator.pending_declarations());
            if st.negotiator.awaiting_answers() {
                transit = false;
            }
        }
        let nsg = if transit { req.nsg } else { req.csg };
        if transit {
            st.stage = req.nsg;
        }
        let done = if transit && req.nsg == Stage::FULL_FEATURE {
            Some(st.finish(ctx, req)?)
        } else {
            None
        };
        Ok(LoginStep {
            transit,
            csg: req.csg,
            nsg,
            data: encode_text(&answer),
            done,
        })
    }

    /// Leading-login keys: who is logging in, to what, for which session
    /// type; `local` is the portal the connection arrived at.
    fn identify(
        &mut self,
        cfg: &PortalConfig,
        local: &str,
        pairs: &KeyValues,
    ) -> Result<(), LoginFailure> {
        let get = |k: &str| pairs.iter().find(|(kk, _)| kk == k).map(|(_, v)| v.clone());
        let initiator = get("InitiatorName").ok_or(LoginFailure::MissingInitiatorName)?;
        self.session_type = match get("SessionType").as_deref() {
            None | Some("Normal") => SessionType::Normal,
            Some("Discovery") => SessionType::Discovery,
            Some(_) => return Err(LoginFailure::UnknownSessionType),
        };
        if self.session_type == SessionType::Normal {
            let name = get("TargetName").ok_or(LoginFailure::MissingTargetName)?;
            let t = cfg.target(&name).ok_or(LoginFailure::NoSuchTarget)?;
            // A target is served only on its own portals. Through another
            // one it is "Not found" (0x0203, RFC 7143 §11.13.5: the
            // requested target name does not exist at this address), as
            // SendTargets on that portal does not list it either. Not
            // "Target moved" (0x0101/0x0102): that answer must carry a
            // TargetAddress, and redirecting would tell an initiator on one
            // network the address of the target's portal on another, which
            // is what putting a target behind a portal keeps from it.
            if !t.served_at(local) {
                return Err(LoginFailure::NotServedOnPortal);
            }
            if !t.allows(&initiator) {
                return Err(LoginFailure::NotInAcl);
            }
            // Redirected only after the ACL check, so that an initiator
            // the target refuses learns no other address of it.
            if let Some(address) = t
                .redirect
                .as_ref()
                .filter(|r| r.covers(local))
                .and_then(|r| Some((r.next_address()?, r.permanent)))
            {
                return Err(LoginFailure::Moved {
                    address: address.0.to_owned(),
                    permanent: address.1,
                });
            }
            self.target = Some(t.clone());
        }
        self.initiator = Some(initiator);
        Ok(())
    }

    fn chap_policy(&self, cfg: &PortalConfig) -> ChapPolicy {
        match (&self.session_type, &self.target) {
            (SessionType::Normal, Some(t)) => {
                t.chap_for(self.initiator.as_deref().unwrap_or_default())
            }
            _ => cfg.discovery_chap_for(self.initiator.as_deref().unwrap_or_default()),
        }
    }

    /// Register the session (TSIH, reinstatement) and build its identity.
    fn finish(&mut self, ctx: &LoginCtx<'_>, req: &LoginRequest) -> Result<Finished, LoginFailure> {
        let conn_id = ctx.conn_id;
        let sessions = ctx.sessions;
        let st = self;
        let initiator = st.initiator.clone().unwrap_or_default();
        let params = st.negotiator.params().clone();
        let session_type = st.session_type;
        let (target, tpgt, lun_map) = match &st.target {
            Some(t) => (t.name.clone(), t.tpgt, t.lun_map_for(&initiator)),
            None => (String::new(), 1, None),
        };
        if req.tsih != 0 {
            // Adding a connection to a session needs MaxConnections > 1,
            // which this target never agrees to.
            let table = sessions
                .lock()
                .map_err(|_| LoginFailure::SessionTableLock)?;
            return Err(match table.find_tsih(req.tsih) {
                Some(_) => LoginFailure::SessionHasConnection,
                None => LoginFailure::UnknownTsih,
            });
        }
        let (tsih, reinstated) = if session_type == SessionType::Normal {
            let mut table = sessions
                .lock()
                .map_err(|_| LoginFailure::SessionTableLock)?;
            let reg = table
                .register(
                    SessionKey {
                        initiator: initiator.clone(),
                        isid: req.isid,
                        target: target.clone(),
                    },
                    conn_id,
                    ctx.cfg.max_sessions_per_initiator,
                )
                .map_err(LoginFailure::Register)?;
            drop(table);
            if let Some(old) = reg.reinstated {
                tracing::info!(old_conn = old, "session reinstatement");
            }
            (reg.tsih, reg.reinstated)
        } else {
            // Discovery sessions are not registered; any non-zero TSIH will do.
            (u16::try_from(conn_id % 0xfffe + 1).unwrap_or(1), None)
        };
        let isid_hex: String = req.isid.iter().map(|b| format!("{b:02x}")).collect();
        let nexus = Arc::new(Nexus {
            id: conn_id,
            initiator_port: format!("{initiator},i,0x{isid_hex}"),
            target_port: format!("{target},t,0x{tpgt:04x}"),
            relative_port_id: tpgt,
            port_group: tpgt,
            lun_map,
        });
        Ok(Finished {
            info: SessionInfo {
                target,
                initiator,
                isid: req.isid,
                tsih,
                cid: req.cid,
                session_type,
                nexus,
                params,
            },
            reinstated,
        })
    }
}
