//! What the admin's queries show: the views of the running state
//! (status, targets, LUNs, portals, sessions, connections), the live
//! counters and the metrics text, read off a [`Runtime`].

use std::collections::BTreeMap;

use rustgt_iscsi::negotiate::{SessionParams, Transport};
use rustgt_port::{ConnSummary, LATENCY_BUCKETS};

use super::runtime::{key, AdminError, Runtime};
use crate::api::proto::{
    ChapView, ConnView, LunStatsView, LunView, ParamsView, PortalView, SessionAction,
    SessionStatsView, SessionView, StatusView, TargetView,
};
use crate::api::stats::Histogram;
use crate::config::{LunSettings, TargetSettings};

impl Runtime {
    pub(super) fn status(&self) -> StatusView {
        let conns = self.port.connections();
        StatusView {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            pid: std::process::id(),
            uptime_secs: self.started.elapsed().as_secs(),
            config_file: self.source.file.as_ref().map(|p| p.display().to_string()),
            admin_socket: self
                .admin_socket
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            metrics: self.metrics,
            targets: self.cfg.targets.len(),
            luns: self.cfg.targets.iter().map(|t| t.luns.len()).sum(),
            portals: self.portals(),
            sessions: sessions_of(&conns).len(),
            connections: conns.len(),
            persist: self.source.persist,
            unsaved_changes: self.unsaved,
            data_buffers: self.port.config().data_budget.snapshot().into(),
        }
    }

    pub(super) fn target_views(&self) -> Vec<TargetView> {
        self.cfg
            .targets
            .iter()
            .map(|t| self.target_view(t))
            .collect()
    }

    pub(super) fn target_view(&self, t: &TargetSettings) -> TargetView {
        TargetView {
            iqn: t.iqn.clone(),
            alias: t.alias.clone(),
            tpgt: t.tpgt,
            portals: t.portals.clone(),
            acl: t.acl.clone(),
            chap: t.chap.as_ref().map(ChapView::of),
            luns: t.luns.iter().map(|l| self.lun_view(t, l)).collect(),
            sessions: self.session_views(Some(&t.iqn)),
            groups: t
                .groups
                .iter()
                .map(crate::api::proto::GroupView::of)
                .collect(),
        }
    }

    pub(super) fn lun_view(&self, t: &TargetSettings, l: &LunSettings) -> LunView {
        let store = self
            .targets
            .get(&key(&t.iqn))
            .and_then(|rt| rt.luns.get(&l.id));
        let geometry = store.map(|s| rustgt_backstore::Backstore::geometry(s.as_ref()));
        LunView {
            target: t.iqn.clone(),
            id: l.id,
            backstore: l.backstore.text().to_owned(),
            path: l
                .resolved_path(&self.cfg.data_dir)
                .map(|p| p.display().to_string()),
            size_bytes: geometry.map_or(0, |g| g.size_bytes()),
            block_size: geometry.map_or(l.block_size, |g| g.block_size),
            read_only: l.read_only,
            thin: l.thin,
            write_cache: l.write_cache,
            workers: l.effective_workers(&self.cfg.iscsi),
            serial: crate::wiring::lun_serial(&t.iqn, l),
            wwn: l.wwn.as_ref().map(|w| w.text().to_owned()),
            readahead: store.and_then(|s| s.io_context()).map(|c| c.policy_label()),
            alua: self
                .targets
                .get(&key(&t.iqn))
                .and_then(|rt| rt.scsi.lun_alua(l.id, t.tpgt))
                .filter(|(mode, _)| *mode != rustgt_scsi::AluaMode::Implicit)
                .map(|(mode, state)| format!("{}, {state}", mode.as_str())),
            faults: store.and_then(|s| s.faults()).map(|f| {
                let spec = f.spec();
                let set = [
                    ("read_error", spec.read_error.is_some()),
                    ("write_error", spec.write_error.is_some()),
                    ("write_nospace", spec.write_nospace.is_some()),
                    ("delay", spec.delay.is_some()),
                    ("hang", spec.hang.is_some()),
                ];
                crate::api::proto::FaultsView {
                    set: set
                        .iter()
                        .filter(|(_, on)| *on)
                        .map(|(k, _)| (*k).to_owned())
                        .collect(),
                    injected: f.injected(),
                }
            }),
        }
    }

    pub(super) fn lun_views(&self, target: Option<&str>) -> Result<Vec<LunView>, AdminError> {
        let targets: Vec<&TargetSettings> = match target {
            Some(t) => vec![self.find(t)?],
            None => self.cfg.targets.iter().collect(),
        };
        Ok(targets
            .into_iter()
            .flat_map(|t| t.luns.iter().map(move |l| (t, l)))
            .map(|(t, l)| self.lun_view(t, l))
            .collect())
    }

    pub(super) fn portal_views(&self) -> Vec<PortalView> {
        let conns = self.port.connections();
        self.portals
            .tcp()
            .map(|addr| PortalView {
                address: addr,
                targets: self
                    .cfg
                    .targets
                    .iter()
                    .filter(|t| t.portals.contains(&addr))
                    .map(|t| t.iqn.clone())
                    .collect(),
                connections: conns
                    .iter()
                    .filter(|c| c.transport == Transport::Tcp && c.local == addr)
                    .count(),
            })
            .collect()
    }

    pub(super) fn conn_views(&self) -> Vec<ConnView> {
        let mut v: Vec<ConnView> = self.port.connections().iter().map(conn_view).collect();
        v.sort_by_key(|c| c.conn_id);
        v
    }

    pub(super) fn session_views(&self, target: Option<&str>) -> Vec<SessionView> {
        sessions_of(&self.port.connections())
            .into_iter()
            .filter(|(_, conns)| {
                target.is_none_or(|t| {
                    conns
                        .first()
                        .and_then(|c| c.session.as_ref())
                        .is_some_and(|s| s.target.eq_ignore_ascii_case(t))
                })
            })
            .filter_map(|(tsih, conns)| {
                let s = conns.first()?.session.as_ref()?;
                Some(SessionView {
                    tsih,
                    isid: s.isid.iter().map(|b| format!("{b:02x}")).collect(),
                    initiator: s.initiator.clone(),
                    initiator_alias: s.params.initiator_alias.clone(),
                    target: s.target.clone(),
                    connections: conns.iter().map(|c| conn_view(c)).collect(),
                    params: params_view(&s.params),
                })
            })
            .collect()
    }

    /// "initiator (TSIH n)" for every session of a target.
    pub(super) fn sessions_on(&self, iqn: &str) -> Vec<String> {
        self.session_views(Some(iqn))
            .into_iter()
            .map(|s| format!("{} TSIH {}", s.initiator, s.tsih))
            .collect()
    }

    /// Connection ids of every session of a target.
    pub(super) fn connections_on(&self, iqn: &str) -> Vec<u64> {
        self.port
            .connections()
            .into_iter()
            .filter(|c| {
                c.session
                    .as_ref()
                    .is_some_and(|s| s.target.eq_ignore_ascii_case(iqn))
            })
            .map(|c| c.conn_id)
            .collect()
    }

    pub(super) fn session_action(
        &self,
        tsih: u16,
        kill: bool,
    ) -> Result<SessionAction, AdminError> {
        let all = self.port.connections();
        let sessions = sessions_of(&all);
        let conns = sessions
            .get(&tsih)
            .ok_or(AdminError::UnknownSession(tsih))?;
        for c in conns {
            if kill {
                self.port.kill(c.conn_id);
            } else {
                self.port.logout(c.conn_id);
            }
        }
        Ok(SessionAction {
            tsih,
            connections: conns.len(),
        })
    }

    pub(super) fn lun_stats(
        &self,
        target: Option<&str>,
        lun: Option<u64>,
    ) -> Result<Vec<LunStatsView>, AdminError> {
        let targets: Vec<&TargetSettings> = match target {
            Some(t) => vec![self.find(t)?],
            None => {
                if lun.is_some() {
                    return Err(AdminError::Refused(
                        "a LUN number needs a target name".into(),
                    ));
                }
                self.cfg.targets.iter().collect()
            }
        };
        let mut out = Vec::new();
        for t in targets {
            let rt = self.rt_of(&t.iqn)?;
            if let Some(id) = lun {
                if !rt.luns.contains_key(&id) {
                    return Err(AdminError::UnknownLun {
                        target: t.iqn.clone(),
                        lun: id,
                    });
                }
            }
            for (id, store) in &rt.luns {
                if lun.is_some_and(|l| l != *id) {
                    continue;
                }
                let scsi = rt.scsi.lun_stats(*id).unwrap_or_default();
                out.push(LunStatsView {
                    target: t.iqn.clone(),
                    lun: *id,
                    capacity_bytes: rustgt_backstore::Backstore::geometry(store.as_ref())
                        .size_bytes(),
                    read_commands: scsi.read_commands,
                    write_commands: scsi.write_commands,
                    read_bytes: scsi.read_bytes,
                    write_bytes: scsi.write_bytes,
                    backing: store.stats(),
                    readahead: store.readahead_stats(),
                    qos: self.lun_qos(t, *id),
                });
            }
        }
        Ok(out)
    }

    pub(super) fn session_stats(
        &self,
        tsih: Option<u16>,
    ) -> Result<Vec<SessionStatsView>, AdminError> {
        let all = self.port.connections();
        let sessions = sessions_of(&all);
        if let Some(t) = tsih {
            if !sessions.contains_key(&t) {
                return Err(AdminError::UnknownSession(t));
            }
        }
        Ok(sessions
            .iter()
            .filter(|(t, _)| tsih.is_none_or(|want| want == **t))
            .filter_map(|(t, conns)| {
                let mut v = session_stats_view(*t, conns)?;
                let s = conns.first()?.session.as_ref()?;
                v.qos = self.session_qos(&s.target, s.nexus.id);
                Some(v)
            })
            .collect())
    }

    pub(super) fn metrics_text(&self) -> String {
        let luns = self.lun_stats(None, None).unwrap_or_default();
        let sessions = self.session_stats(None).unwrap_or_default();
        let conns = self.port.connections();
        let on = |t: Transport| conns.iter().filter(|c| c.transport == t).count();
        let (auth_failures, logins_held) = self
            .port
            .sessions()
            .lock()
            .map(|t| (t.brake().failures_total(), t.brake().held_total()))
            .unwrap_or_default();
        let gauges = super::metrics::Gauges {
            uptime_secs: self.started.elapsed().as_secs(),
            targets: self.cfg.targets.len(),
            portals: self.portals.tcp_count(),
            connections: conns.len(),
            tcp_connections: on(Transport::Tcp),
            iser_connections: on(Transport::Iser),
            auth_failures,
            logins_held,
            data_buffers: self.port.config().data_budget.snapshot().into(),
        };
        super::metrics::render(&gauges, &luns, &sessions)
    }
}

/// Logged-in connections grouped by TSIH.
fn sessions_of(conns: &[ConnSummary]) -> BTreeMap<u16, Vec<&ConnSummary>> {
    let mut m: BTreeMap<u16, Vec<&ConnSummary>> = BTreeMap::new();
    for c in conns {
        if let Some(s) = &c.session {
            m.entry(s.tsih).or_default().push(c);
        }
    }
    for v in m.values_mut() {
        v.sort_by_key(|c| c.conn_id);
    }
    m
}

fn conn_view(c: &ConnSummary) -> ConnView {
    ConnView {
        conn_id: c.conn_id,
        peer: c.peer,
        local: c.local,
        transport: transport_name(c.transport).to_owned(),
        state: if c.session.is_some() {
            "full-feature"
        } else {
            "login"
        }
        .to_owned(),
        cid: c.session.as_ref().map(|s| s.cid),
        tsih: c.session.as_ref().map(|s| s.tsih),
        initiator: c.session.as_ref().map(|s| s.initiator.clone()),
        target: c.session.as_ref().map(|s| s.target.clone()),
    }
}

/// How listings and metrics name a transport.
fn transport_name(t: Transport) -> &'static str {
    match t {
        Transport::Tcp => "tcp",
        Transport::Iser => "iser",
    }
}

fn params_view(p: &SessionParams) -> ParamsView {
    let digest = |on: bool| if on { "CRC32C" } else { "None" }.to_owned();
    ParamsView {
        header_digest: digest(p.header_digest),
        data_digest: digest(p.data_digest),
        max_connections: p.max_connections,
        initial_r2t: p.initial_r2t,
        immediate_data: p.immediate_data,
        max_burst_length: p.max_burst_length,
        first_burst_length: p.first_burst_length,
        initiator_max_recv_data_segment_length: p.initiator_max_recv_dsl,
        target_max_recv_data_segment_length: p.target_max_recv_dsl,
        max_outstanding_r2t: p.max_outstanding_r2t,
        default_time2wait: p.default_time2wait,
        default_time2retain: p.default_time2retain,
        data_pdu_in_order: p.data_pdu_in_order,
        data_sequence_in_order: p.data_sequence_in_order,
        error_recovery_level: p.error_recovery_level,
        rdma_extensions: p.rdma_extensions,
    }
}

fn session_stats_view(tsih: u16, conns: &[&ConnSummary]) -> Option<SessionStatsView> {
    let s = conns.first()?.session.as_ref()?;
    let mut v = SessionStatsView {
        tsih,
        isid: s.isid.iter().map(|b| format!("{b:02x}")).collect(),
        transport: conns
            .first()
            .map_or("", |c| transport_name(c.transport))
            .to_owned(),
        target: s.target.clone(),
        initiator: s.initiator.clone(),
        connections: conns.len(),
        commands: 0,
        errors: 0,
        read_bytes: 0,
        write_bytes: 0,
        latency: Histogram::default(),
        qos: None,
    };
    let mut buckets = [0u64; LATENCY_BUCKETS];
    let mut sum = 0u64;
    for c in conns {
        let st = &c.stats;
        v.commands += st.commands;
        v.errors += st.errors;
        v.read_bytes += st.read_bytes;
        v.write_bytes += st.write_bytes;
        for (acc, n) in buckets.iter_mut().zip(st.latency_us.iter()) {
            *acc += n;
        }
        sum = sum.saturating_add(st.latency_sum_us);
    }
    v.latency = Histogram::from_log2("us", &buckets, sum);
    Some(v)
}
