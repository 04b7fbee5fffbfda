//! The login phase (RFC 7143 §6.3, §11.12, §11.13): stage transitions,
//! security negotiation (CHAP), operational negotiation, target lookup, ACL
//! and TSIH assignment.

use std::sync::Arc;
use std::time::Instant;

use rustgt_scsi::Nexus;

use crate::chap::{is_security_key, ChapPolicy, SecurityNegotiator};
use crate::config::{PortalConfig, TargetInfo};
use crate::conn::{Connection, ConnectionSetup, Event, SessionInfo};
use crate::negotiate::{Negotiator, SessionType};
use crate::pdu::{LoginRequest, LoginResponse, LoginStatus, Reply, Stage};
use crate::session::SessionKey;
use crate::text::{encode_text, parse_text, KeyValues, TextAssembler};

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
    pub(crate) fn new(cfg: &PortalConfig, setup: &ConnectionSetup) -> Self {
        LoginState {
            first: None,
            stage: Stage::SECURITY,
            text: TextAssembler::new(cfg.max_text_len),
            negotiator: Negotiator::new(cfg.limits.clone(), setup.transport),
            security: None,
            random: setup.random,
            initiator: None,
            session_type: SessionType::Normal,
            target: None,
            sent_first_response: false,
            first_pdu_sent: false,
            brake_checked: false,
            held: None,
        }
    }
}

/// Why a login failed: the status to send.
struct LoginFail(LoginStatus, &'static str);

impl Connection {
    pub(crate) fn handle_login(&mut self, req: LoginRequest, data: &[u8], now: Instant) {
        let peer = self.peer_ip();
        let settings = self.cfg.brake.clone();
        let sessions = self.sessions.clone();
        let Some(st) = self.login_state() else {
            return;
        };
        if st.held.is_some() {
            // A request before the answer to the one held: an initiator
            // waits for each Login Response before its next request.
            tracing::warn!("login request while the previous one awaits its answer");
            self.set_closing();
            return;
        }
        if !std::mem::replace(&mut st.brake_checked, true) {
            let until = peer.and_then(|ip| {
                sessions
                    .lock()
                    .ok()
                    .and_then(|mut t| t.brake_mut().hold(&settings, ip, now))
            });
            if let Some(until) = until {
                tracing::info!(
                    delay_ms = until.saturating_duration_since(now).as_millis() as u64,
                    "login held back: earlier failed authentications from this address"
                );
                st.held = Some(Held {
                    req,
                    data: data.to_vec(),
                    until,
                });
                return;
            }
        }
        self.run_login(&req, data, now);
    }

    /// When a held login request is due (for `poll_timeout`).
    pub(crate) fn login_hold_until(&self) -> Option<Instant> {
        self.login_state_ref()?.held.as_ref().map(|h| h.until)
    }

    /// Runs a held login request once its time has come (from
    /// `handle_timeout`); whether it did.
    pub(crate) fn release_held_login(&mut self, now: Instant) -> bool {
        let Some(st) = self.login_state() else {
            return false;
        };
        if st.held.as_ref().is_none_or(|h| now < h.until) {
            return false;
        }
        let Some(h) = st.held.take() else {
            return false;
        };
        self.run_login(&h.req, &h.data, now);
        true
    }

    fn run_login(&mut self, req: &LoginRequest, data: &[u8], now: Instant) {
        match self.login_step(req, data) {
            Ok(()) => {}
            Err(LoginFail(status, why)) => {
                let (initiator, chap_user) = match self.login_state() {
                    Some(st) => (
                        st.initiator.clone(),
                        st.security
                            .as_ref()
                            .and_then(|s| s.user())
                            .map(str::to_owned),
                    ),
                    None => (None, None),
                };
                tracing::warn!(
                    status = format_args!("{:#06x}", status.0),
                    why,
                    initiator = ?initiator,
                    chap_user = ?chap_user,
                    portal = %self.setup.local_addr,
                    "login rejected"
                );
                if status == LoginStatus::AUTHENTICATION_FAILURE {
                    self.brake_failed(now);
                }
                self.send_login_response(req, status, false, Stage(0), Stage(0), 0, Vec::new());
                self.set_closing();
            }
        }
    }

    /// The initiator's IP address (IPv4-mapped ones as IPv4), the key of
    /// the brake.
    fn peer_ip(&self) -> Option<std::net::IpAddr> {
        let ip = self
            .setup
            .peer_addr
            .parse::<std::net::SocketAddr>()
            .ok()?
            .ip();
        Some(match ip {
            std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, std::net::IpAddr::V4),
            v4 => v4,
        })
    }

    fn brake_failed(&mut self, now: Instant) {
        let Some(ip) = self.peer_ip() else {
            return;
        };
        if let Ok(mut t) = self.sessions.lock() {
            t.brake_mut().failed(&self.cfg.brake, ip, now);
        }
    }

    fn login_step(&mut self, req: &LoginRequest, data: &[u8]) -> Result<(), LoginFail> {
        let cfg = self.cfg.clone();
        let local = self.setup.local_addr.clone();
        let peer = self.peer_ip();
        let sessions = self.sessions.clone();
        let Some(st) = self.login_state() else {
            return Ok(());
        };

        // Fields that must stay the same across the login (§11.12).
        match &st.first {
            None => {
                if req.version_min > 0 {
                    return Err(LoginFail(LoginStatus::UNSUPPORTED_VERSION, "version"));
                }
                st.stage = req.csg;
                st.first = Some(req.clone());
            }
            Some(f) => {
                if f.isid != req.isid || f.tsih != req.tsih || f.cid != req.cid {
                    return Err(LoginFail(
                        LoginStatus::INITIATOR_ERROR,
                        "ISID/TSIH/CID changed during login",
                    ));
                }
            }
        }
        if req.csg != st.stage
            || req.csg == Stage(2)
            || req.csg == Stage::FULL_FEATURE
            || (req.transit && (req.nsg <= req.csg || req.nsg == Stage(2)))
        {
            return Err(LoginFail(
                LoginStatus::INITIATOR_ERROR,
                "bad stage transition",
            ));
        }

        // Text may span several PDUs (C bit, §6.1): acknowledge and wait.
        let full = match st.text.push(data, req.cont) {
            Ok(Some(full)) => full,
            Ok(None) => {
                let csg = req.csg;
                self.send_login_response(req, LoginStatus::SUCCESS, false, csg, csg, 0, Vec::new());
                return Ok(());
            }
            Err(_) => {
                return Err(LoginFail(
                    LoginStatus::INITIATOR_ERROR,
                    "login text too long",
                ))
            }
        };
        let pairs = parse_text(&full)
            .map_err(|_| LoginFail(LoginStatus::INITIATOR_ERROR, "malformed login text"))?;

        if st.initiator.is_none() {
            Self::identify(st, &cfg, &local, &pairs)?;
        }
        let (sec_keys, op_keys): (KeyValues, KeyValues) =
            pairs.into_iter().partition(|(k, _)| is_security_key(k));

        let mut answer = KeyValues::new();
        let mut may_transit = true;
        if req.csg == Stage::SECURITY {
            let policy = Self::chap_policy(st, &cfg);
            let random = st.random;
            let sec = st.security.get_or_insert_with(|| {
                let challenge = random.get(..16).unwrap_or_default().to_vec();
                SecurityNegotiator::new(policy, challenge, random[16])
            });
            let sec_answer = sec
                .process(&sec_keys)
                .map_err(|e| LoginFail(e.login_status(), "authentication"))?;
            let complete = sec.is_complete();
            if sec.authenticated() {
                // Proven with CHAP: the address's failures are forgotten.
                if let (Some(ip), Ok(mut t)) = (peer, sessions.lock()) {
                    t.brake_mut().succeeded(ip);
                }
            }
            if req.transit && !complete && sec_answer.is_empty() {
                return Err(LoginFail(
                    LoginStatus::AUTHENTICATION_FAILURE,
                    "authentication not completed",
                ));
            }
            may_transit = complete;
            answer.extend(sec_answer);
        } else {
            if !sec_keys.is_empty() {
                return Err(LoginFail(
                    LoginStatus::INITIATOR_ERROR,
                    "security keys in operational stage",
                ));
            }
            // Skipping the security stage is only allowed when no
            // authentication is required.
            let policy = Self::chap_policy(st, &cfg);
            let passed = st.security.as_ref().is_some_and(|s| s.is_complete());
            if policy.initiator.is_some() && !passed {
                return Err(LoginFail(
                    LoginStatus::AUTHENTICATION_FAILURE,
                    "authentication required",
                ));
            }
        }
        let op_answer = st
            .negotiator
            .process(req.csg, &op_keys)
            .map_err(|e| LoginFail(e.login_status(), "negotiation"))?;
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
        if transit && req.nsg == Stage::FULL_FEATURE {
            let info = self.finish_login(req)?;
            let tsih = info.tsih;
            self.send_login_response(
                req,
                LoginStatus::SUCCESS,
                true,
                req.csg,
                nsg,
                tsih,
                encode_text(&answer),
            );
            tracing::info!(
                initiator = %info.initiator,
                target = %info.target,
                tsih,
                "login complete"
            );
            self.enter_full_feature(info, req.cmd_sn);
        } else {
            self.send_login_response(
                req,
                LoginStatus::SUCCESS,
                transit,
                req.csg,
                nsg,
                0,
                encode_text(&answer),
            );
        }
        Ok(())
    }

    /// Leading-login keys: who is logging in, to what, for which session
    /// type; `local` is the portal the connection arrived at.
    fn identify(
        st: &mut LoginState,
        cfg: &PortalConfig,
        local: &str,
        pairs: &KeyValues,
    ) -> Result<(), LoginFail> {
        let get = |k: &str| pairs.iter().find(|(kk, _)| kk == k).map(|(_, v)| v.clone());
        let initiator = get("InitiatorName").ok_or(LoginFail(
            LoginStatus::MISSING_PARAMETER,
            "InitiatorName missing",
        ))?;
        st.session_type = match get("SessionType").as_deref() {
            None | Some("Normal") => SessionType::Normal,
            Some("Discovery") => SessionType::Discovery,
            Some(_) => {
                return Err(LoginFail(
                    LoginStatus::SESSION_TYPE_NOT_SUPPORTED,
                    "unknown SessionType",
                ))
            }
        };
        if st.session_type == SessionType::Normal {
            let name = get("TargetName").ok_or(LoginFail(
                LoginStatus::MISSING_PARAMETER,
                "TargetName missing",
            ))?;
            let t = cfg
                .target(&name)
                .ok_or(LoginFail(LoginStatus::NOT_FOUND, "no such target"))?;
            // A target is served only on its own portals. Through another
            // one it is "Not found" (0x0203, RFC 7143 §11.13.5: the
            // requested target name does not exist at this address), as
            // SendTargets on that portal does not list it either. Not
            // "Target moved" (0x0101/0x0102): that answer must carry a
            // TargetAddress, and redirecting would tell an initiator on one
            // network the address of the target's portal on another, which
            // is what putting a target behind a portal keeps from it.
            if !t.served_at(local) {
                return Err(LoginFail(
                    LoginStatus::NOT_FOUND,
                    "target not served on this portal",
                ));
            }
            if !t.allows(&initiator) {
                return Err(LoginFail(
                    LoginStatus::AUTHORIZATION_FAILURE,
                    "initiator not in the target's ACL",
                ));
            }
            st.target = Some(t.clone());
        }
        st.initiator = Some(initiator);
        Ok(())
    }

    fn chap_policy(st: &LoginState, cfg: &PortalConfig) -> ChapPolicy {
        match (&st.session_type, &st.target) {
            (SessionType::Normal, Some(t)) => t.chap.clone(),
            _ => cfg.discovery_chap.clone(),
        }
    }

    /// Register the session (TSIH, reinstatement) and build its identity.
    fn finish_login(&mut self, req: &LoginRequest) -> Result<SessionInfo, LoginFail> {
        let conn_id = self.setup.conn_id;
        let sessions = self.sessions.clone();
        let Some(st) = self.login_state() else {
            return Err(LoginFail(LoginStatus::TARGET_ERROR, "not in login"));
        };
        let initiator = st.initiator.clone().unwrap_or_default();
        let params = st.negotiator.params().clone();
        let session_type = st.session_type;
        let (target, tpgt) = match &st.target {
            Some(t) => (t.name.clone(), t.tpgt),
            None => (String::new(), 1),
        };
        if req.tsih != 0 {
            // Adding a connection to a session needs MaxConnections > 1,
            // which this target never agrees to.
            let table = sessions
                .lock()
                .map_err(|_| LoginFail(LoginStatus::TARGET_ERROR, "lock"))?;
            return Err(match table.find_tsih(req.tsih) {
                Some(_) => LoginFail(
                    LoginStatus::TOO_MANY_CONNECTIONS,
                    "session has its connection",
                ),
                None => LoginFail(LoginStatus::SESSION_DOES_NOT_EXIST, "unknown TSIH"),
            });
        }
        let tsih = if session_type == SessionType::Normal {
            let mut table = sessions
                .lock()
                .map_err(|_| LoginFail(LoginStatus::TARGET_ERROR, "lock"))?;
            let reg = table
                .register(
                    SessionKey {
                        initiator: initiator.clone(),
                        isid: req.isid,
                        target: target.clone(),
                    },
                    conn_id,
                    self.cfg.max_sessions_per_initiator,
                )
                .map_err(|e| LoginFail(LoginStatus::OUT_OF_RESOURCES, e.reason()))?;
            drop(table);
            if let Some(old) = reg.reinstated {
                tracing::info!(old_conn = old, "session reinstatement");
                self.push_event(Event::Reinstate { conn_id: old });
            }
            reg.tsih
        } else {
            // Discovery sessions are not registered; any non-zero TSIH will do.
            u16::try_from(conn_id % 0xfffe + 1).unwrap_or(1)
        };
        let isid_hex: String = req.isid.iter().map(|b| format!("{b:02x}")).collect();
        let nexus = Arc::new(Nexus {
            id: conn_id,
            initiator_port: format!("{initiator},i,0x{isid_hex}"),
            target_port: format!("{target},t,0x{tpgt:04x}"),
            relative_port_id: tpgt,
            port_group: tpgt,
        });
        Ok(SessionInfo {
            target,
            initiator,
            isid: req.isid,
            tsih,
            cid: req.cid,
            session_type,
            nexus,
            params,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn send_login_response(
        &mut self,
        req: &LoginRequest,
        status: LoginStatus,
        transit: bool,
        csg: Stage,
        nsg: Stage,
        tsih: u16,
        data: Vec<u8>,
    ) {
        // The first response starts StatSN at the initiator's ExpStatSN (§11.13.4).
        let first = self
            .login_state()
            .is_some_and(|s| !s.sent_first_response_pdu());
        if first {
            self.stat_sn = req.exp_stat_sn;
            if let Some(s) = self.login_state() {
                s.mark_response_pdu();
            }
        }
        let r = LoginResponse {
            transit,
            cont: false,
            csg,
            nsg,
            version_max: 0,
            version_active: 0,
            isid: req.isid,
            tsih,
            itt: req.itt,
            stat_sn: self.next_stat_sn(),
            exp_cmd_sn: req.cmd_sn,
            max_cmd_sn: req.cmd_sn.wrapping_add(self.cfg.queue_depth.max(1) - 1),
            status,
            data,
        };
        self.send(Reply::LoginResponse(r));
    }
}

impl LoginState {
    fn sent_first_response_pdu(&self) -> bool {
        self.first_pdu_sent
    }
    fn mark_response_pdu(&mut self) {
        self.first_pdu_sent = true;
    }
}
