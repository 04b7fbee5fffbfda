//! The connection's side of the login phase: the brake's hold on a first
//! request, running each Login request through the login state machine
//! ([`crate::login`]) and putting its answer or failure on the wire (Login
//! Response framing and StatSN), then entering full feature phase.

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use super::{Connection, Event, Phase};
use crate::login::{LoginCtx, LoginStep};
use crate::pdu::{LoginRequest, LoginResponse, LoginStatus, Reply, Stage};

impl Connection {
    pub(super) fn handle_login(&mut self, req: LoginRequest, data: &[u8], now: Instant) {
        let peer = self.peer_ip();
        let Phase::Login(st) = &mut self.phase else {
            return;
        };
        if st.is_holding() {
            // A request before the answer to the one held: an initiator
            // waits for each Login Response before its next request.
            tracing::warn!("login request while the previous one awaits its answer");
            self.set_closing();
            return;
        }
        if st.first_brake_check() {
            // The brake counts failures per address and initiator name;
            // the first request declares the name (a request without one
            // fails anyway).
            let name = declared_initiator(data);
            // Held at most a third of the login timeout, so the login has
            // time left to finish.
            let cap = self.cfg.login_timeout / 3;
            let until = peer.and_then(|ip| {
                self.sessions
                    .lock()
                    .ok()
                    .and_then(|mut t| t.brake_mut().hold(&self.cfg.brake, ip, &name, now, cap))
            });
            if let Some(until) = until {
                tracing::info!(
                    delay_ms = until.saturating_duration_since(now).as_millis() as u64,
                    "login held back: earlier failed authentications from this address"
                );
                st.hold(req, data, until);
                return;
            }
        }
        self.run_login(&req, data, now);
    }

    /// When a held login request is due (for `poll_timeout`).
    pub(super) fn login_hold_until(&self) -> Option<Instant> {
        match &self.phase {
            Phase::Login(st) => st.hold_until(),
            _ => None,
        }
    }

    /// Runs a held login request once its time has come (from
    /// `handle_timeout`); whether it did.
    pub(super) fn release_held_login(&mut self, now: Instant) -> bool {
        let Phase::Login(st) = &mut self.phase else {
            return false;
        };
        let Some((req, data)) = st.take_due(now) else {
            return false;
        };
        self.run_login(&req, &data, now);
        true
    }

    fn run_login(&mut self, req: &LoginRequest, data: &[u8], now: Instant) {
        let peer_ip = self.peer_ip();
        let Phase::Login(st) = &mut self.phase else {
            return;
        };
        let ctx = LoginCtx {
            cfg: &self.cfg,
            local_addr: &self.setup.local_addr,
            peer_ip,
            conn_id: self.setup.conn_id,
            sessions: &self.sessions,
        };
        match st.step(&ctx, req, data) {
            Ok(step) => self.login_answer(req, step),
            Err(crate::login_failure::LoginFailure::Moved { address, permanent }) => {
                let status = if permanent {
                    LoginStatus::TARGET_MOVED_PERMANENTLY
                } else {
                    LoginStatus::TARGET_MOVED_TEMPORARILY
                };
                let initiator = match &self.phase {
                    Phase::Login(st) => st.who().0,
                    _ => None,
                };
                tracing::info!(
                    initiator = ?initiator,
                    portal = %self.setup.local_addr,
                    to = %address,
                    permanent,
                    "login redirected"
                );
                let data = crate::text::encode_text(&[("TargetAddress".to_owned(), address)]);
                self.send_login_response(req, status, false, Stage(0), Stage(0), 0, data);
                self.set_closing();
            }
            Err(failure) => {
                let status = failure.status();
                let (initiator, chap_user) = match &self.phase {
                    Phase::Login(st) => st.who(),
                    _ => (None, None),
                };
                tracing::warn!(
                    status = format_args!("{:#06x}", status.0),
                    why = failure.why(),
                    detail = failure.detail(),
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

    /// Puts a successful step on the wire; at the end of the login, enters
    /// full feature phase.
    fn login_answer(&mut self, req: &LoginRequest, step: LoginStep) {
        let LoginStep {
            transit,
            csg,
            nsg,
            data,
            done,
        } = step;
        let Some(done) = done else {
            self.send_login_response(req, LoginStatus::SUCCESS, transit, csg, nsg, 0, data);
            return;
        };
        if let Some(old) = done.reinstated {
            self.push_event(Event::Reinstate { conn_id: old });
        }
        let info = done.info;
        let tsih = info.tsih;
        self.send_login_response(req, LoginStatus::SUCCESS, transit, csg, nsg, tsih, data);
        tracing::info!(
            initiator = %info.initiator,
            target = %info.target,
            tsih,
            "login complete"
        );
        self.enter_full_feature(info, req.cmd_sn);
    }

    /// The initiator's IP address (IPv4-mapped ones as IPv4), the key of
    /// the brake.
    fn peer_ip(&self) -> Option<IpAddr> {
        let ip = self.setup.peer_addr.parse::<SocketAddr>().ok()?.ip();
        Some(match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        })
    }

    fn brake_failed(&mut self, now: Instant) {
        let Some(ip) = self.peer_ip() else {
            return;
        };
        let name = match &self.phase {
            Phase::Login(st) => st.who().0.unwrap_or_default(),
            _ => String::new(),
        };
        if let Ok(mut t) = self.sessions.lock() {
            t.brake_mut().failed(&self.cfg.brake, ip, &name, now);
        }
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
        let first = match &mut self.phase {
            Phase::Login(st) => st.take_first_response(),
            _ => false,
        };
        if first {
            self.stat_sn = req.exp_stat_sn;
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

/// The InitiatorName a login request's text declares (empty if none, or
/// if the text does not parse: such a login fails on its own).
fn declared_initiator(data: &[u8]) -> String {
    crate::text::parse_text(data)
        .ok()
        .and_then(|pairs| {
            pairs
                .into_iter()
                .find(|(k, _)| k == "InitiatorName")
                .map(|(_, v)| v)
        })
        .unwrap_or_default()
}
