//! The iSER front end: rdma_cm listeners, one tokio task per connection,
//! and the same target table and control surface as the TCP driver.
//!
//! A connection's task owns its verbs resources and its
//! [`rustgt_iscsi::Connection`]; it wakes on the CM event channel, the
//! completion channel (both non-blocking file descriptors in tokio's
//! reactor: no thread spins while a connection is idle), SCSI completions
//! and the keepalive timer.

#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdma_sys::rdma_cm_event_type as cm_event;
use rustgt_iscsi::iser::CmPrivateData;
use rustgt_iscsi::negotiate::Transport;
use rustgt_iscsi::{
    Connection, ConnectionSetup, Directory, Event, IserParams, PortalConfig, SessionInfo,
    SessionTable,
};
use rustgt_scsi::{Nexus, Response, ScsiTarget, TmfResponse};
use tokio::sync::{mpsc, watch};
use tracing::Instrument;

use crate::driver::{Driver, DriverError};
use crate::sizing::{self, IserSettings, PeerResources};
use crate::verbs::{watch, AcceptParams, ConnResources, ConnShape, IdChannel, VerbsError};

/// iSER connection ids start here, far from the TCP driver's, because both
/// name I_T nexuses of the same SCSI targets.
pub const ISER_CONN_ID_BASE: u64 = 1 << 48;
/// How long a closing connection waits for its flushed work requests.
const FLUSH_WAIT: Duration = Duration::from_secs(5);
/// Pending connection requests the CM queues for a listener.
const BACKLOG: i32 = 64;

/// Messages from the rest of the process to one connection.
#[derive(Debug)]
enum ConnMsg {
    Done(Response),
    Tmf(u32, TmfResponse),
    Kill,
    RequestLogout,
}

/// A live iSER connection as the server sees it.
#[derive(Debug, Clone)]
pub struct IserConnSummary {
    pub conn_id: u64,
    pub peer: Option<SocketAddr>,
    pub local: Option<SocketAddr>,
    /// `None` until a Normal session reaches full feature phase.
    pub session: Option<SessionInfo>,
}

#[derive(Debug)]
struct ConnEntry {
    tx: mpsc::UnboundedSender<ConnMsg>,
    peer: Option<SocketAddr>,
    local: Option<SocketAddr>,
    session: Option<SessionInfo>,
}

/// A bound, listening iSER portal.
#[derive(Debug)]
pub struct IserListener {
    cm: IdChannel,
    addr: SocketAddr,
}

impl IserListener {
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

/// Listen for iSER connections on `addr` (an address of an RDMA-capable
/// interface; port 0 is not resolved, give the port).
pub fn bind(addr: SocketAddr) -> Result<IserListener, VerbsError> {
    let cm = IdChannel::listen(addr, BACKLOG)?;
    Ok(IserListener { cm, addr })
}

/// The iSER front end.
#[derive(Debug)]
pub struct IserServer {
    dir: Directory,
    settings: IserSettings,
    sessions: Arc<Mutex<SessionTable>>,
    conns: Mutex<HashMap<u64, ConnEntry>>,
    next_conn: AtomicU64,
    shutdown: watch::Sender<bool>,
}

impl IserServer {
    pub fn new(config: PortalConfig, settings: IserSettings) -> Arc<IserServer> {
        Self::with_sessions(config, settings, Arc::new(Mutex::new(SessionTable::new())))
    }

    /// Share a session table with another front end, so that session
    /// reinstatement sees sessions of both transports.
    pub fn with_sessions(
        config: PortalConfig,
        settings: IserSettings,
        sessions: Arc<Mutex<SessionTable>>,
    ) -> Arc<IserServer> {
        let (shutdown, _) = watch::channel(false);
        Arc::new(IserServer {
            dir: Directory::new(iser_config(config)),
            settings,
            sessions,
            conns: Mutex::new(HashMap::new()),
            next_conn: AtomicU64::new(ISER_CONN_ID_BASE),
            shutdown,
        })
    }

    /// Replace the protocol configuration; new logins see it at once.
    pub fn set_config(&self, config: PortalConfig) {
        self.dir.set_config(iser_config(config));
    }

    /// The configuration in force, with the MaxOutstandingUnexpectedPDUs
    /// the driver declares (as many as it posts receives for).
    pub fn config(&self) -> Arc<PortalConfig> {
        self.dir.config()
    }

    pub fn add_target(&self, name: &str, target: Arc<ScsiTarget>) {
        self.dir.add_target(name, target);
    }

    pub fn remove_target(&self, name: &str) -> Option<Arc<ScsiTarget>> {
        self.dir.remove_target(name)
    }

    fn target(&self, name: &str) -> Option<Arc<ScsiTarget>> {
        self.dir.target(name)
    }

    pub fn scsi_targets(&self) -> Vec<Arc<ScsiTarget>> {
        self.dir.scsi_targets()
    }

    pub fn connections(&self) -> Vec<IserConnSummary> {
        self.conns
            .lock()
            .map(|c| {
                c.iter()
                    .map(|(id, e)| IserConnSummary {
                        conn_id: *id,
                        peer: e.peer,
                        local: e.local,
                        session: e.session.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Close a connection now (its tasks are aborted).
    pub fn kill(&self, conn_id: u64) -> bool {
        self.send_to(conn_id, ConnMsg::Kill)
    }

    /// Ask the initiator of a connection to log out (RFC 7143 §11.9.1).
    pub fn logout(&self, conn_id: u64) -> bool {
        self.send_to(conn_id, ConnMsg::RequestLogout)
    }

    fn send_to(&self, conn_id: u64, msg: ConnMsg) -> bool {
        self.conns
            .lock()
            .ok()
            .and_then(|c| c.get(&conn_id).map(|e| e.tx.send(msg).is_ok()))
            .unwrap_or(false)
    }

    /// Accept connections on `listener` until shutdown.
    pub async fn serve(self: Arc<Self>, listener: IserListener) {
        self.serve_until(listener, std::future::pending()).await;
    }

    /// Accept connections until shutdown or until `stop_listener`
    /// completes; accepted connections are not affected by `stop_listener`.
    pub async fn serve_until(
        self: Arc<Self>,
        listener: IserListener,
        stop_listener: impl Future<Output = ()> + Send,
    ) {
        let fd = match watch(listener.cm.channel.fd()) {
            Ok(fd) => fd,
            Err(e) => {
                tracing::error!(error = %e, addr = %listener.addr, "cannot watch the CM channel");
                return;
            }
        };
        let mut stop = self.shutdown.subscribe();
        tokio::pin!(stop_listener);
        loop {
            tokio::select! {
                _ = &mut stop_listener => break,
                _ = stop.changed() => break,
                r = fd.readable() => {
                    let Ok(mut guard) = r else { break };
                    // Clear first: an event arriving while we drain sets it again.
                    let _ = guard.try_io(|_| Err::<(), _>(std::io::ErrorKind::WouldBlock.into()));
                    if !self.clone().accept_pending(&listener) {
                        break;
                    }
                }
            }
        }
        drop(fd);
        drop(listener);
    }

    /// Handle every queued listener event; false when the listener died.
    fn accept_pending(self: Arc<Self>, listener: &IserListener) -> bool {
        loop {
            let ev = match listener.cm.channel.next_event() {
                Ok(Some(ev)) => ev,
                Ok(None) => return true,
                Err(e) => {
                    tracing::warn!(error = %e, "reading the listener's CM events failed");
                    return false;
                }
            };
            match ev.kind {
                cm_event::RDMA_CM_EVENT_CONNECT_REQUEST => {
                    let Some(id) = ev.new_conn else { continue };
                    let peer = PeerResources {
                        initiator_depth: ev.initiator_depth,
                        responder_resources: ev.responder_resources,
                    };
                    match IdChannel::adopt(id) {
                        Ok(cm) => {
                            let me = self.clone();
                            tokio::spawn(me.run_conn(cm, peer, ev.private_data));
                        }
                        // Dropping the id refuses the request.
                        Err(e) => tracing::warn!(error = %e, "cannot take an iSER connection"),
                    }
                }
                cm_event::RDMA_CM_EVENT_DEVICE_REMOVAL => {
                    tracing::error!(addr = %listener.addr, "RDMA device removed; iSER portal down");
                    return false;
                }
                other => tracing::debug!(event = other, "listener CM event"),
            }
        }
    }

    /// Graceful shutdown: [`stop_sessions`](Self::stop_sessions), then stop
    /// the SCSI targets (which drains their in-flight commands).
    pub async fn shutdown(&self, grace: Duration) {
        self.stop_sessions(grace).await;
        let targets = self.scsi_targets();
        let _ = tokio::task::spawn_blocking(move || {
            for t in targets {
                t.shutdown();
            }
        })
        .await;
    }

    /// Stop accepting, ask every session to log out, wait up to `grace`,
    /// then close the rest. The SCSI targets keep running (for a process
    /// whose other front end still serves them).
    pub async fn stop_sessions(&self, grace: Duration) {
        let _ = self.shutdown.send(true);
        for id in self.conn_ids() {
            self.send_to(id, ConnMsg::RequestLogout);
        }
        let deadline = tokio::time::Instant::now() + grace;
        while tokio::time::Instant::now() < deadline && !self.conn_ids().is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for id in self.conn_ids() {
            self.kill(id);
        }
        // Killed connections still flush and release their resources.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while tokio::time::Instant::now() < deadline && !self.conn_ids().is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn conn_ids(&self) -> Vec<u64> {
        self.conns
            .lock()
            .map(|c| c.keys().copied().collect())
            .unwrap_or_default()
    }

    async fn run_conn(self: Arc<Self>, cm: IdChannel, peer: PeerResources, private: Vec<u8>) {
        let conn_id = self.next_conn.fetch_add(1, Ordering::Relaxed);
        let span = tracing::info_span!(
            "iser",
            id = conn_id,
            peer = ?cm.id.peer_addr(),
            initiator = tracing::field::Empty,
            tsih = tracing::field::Empty,
        );
        async move {
            if let Err(e) = self.clone().drive(cm, peer, &private, conn_id).await {
                tracing::warn!(error = %e, "iSER connection ended with an error");
            }
            let entry = self.conns.lock().ok().and_then(|mut c| c.remove(&conn_id));
            if let Ok(mut s) = self.sessions.lock() {
                s.remove_conn(conn_id);
            }
            if let Some(info) = entry.and_then(|e| e.session) {
                if let Some(t) = self.target(&info.target) {
                    let nexus: Arc<Nexus> = info.nexus.clone();
                    let _ = tokio::task::spawn_blocking(move || t.nexus_lost(&nexus)).await;
                }
            }
            tracing::info!("iSER connection closed");
        }
        .instrument(span)
        .await
    }

    /// Set up, accept and serve one connection, then tear it down.
    async fn drive(
        self: Arc<Self>,
        cm: IdChannel,
        peer: PeerResources,
        private: &[u8],
        conn_id: u64,
    ) -> Result<(), DriverError> {
        let dev = cm.id.device_limits()?;
        let cfg = self.config();
        let plan = sizing::plan(&cfg, &self.settings, &dev, peer);
        let request =
            CmPrivateData::parse(private).unwrap_or_else(|_| CmPrivateData::legacy_initiator());
        let reply = request.target_reply(dev.can_invalidate);
        let (local, peer_addr) = (cm.id.local_addr(), cm.id.peer_addr());
        tracing::debug!(?plan, ?request, ?reply, "iSER connection request");
        let shape = ConnShape {
            recv_depth: plan.recv_depth,
            recv_size: plan.recv_size,
            send_slots: plan.send_slots,
            send_size: plan.send_size,
            data_chunks: plan.data_chunks,
            chunk_size: plan.chunk_size as usize,
            sq_depth: plan.sq_depth,
            cq_depth: plan.cq_depth,
        };
        let res = ConnResources::new(cm, &shape)?;
        let mut random = [0u8; 32];
        getrandom::getrandom(&mut random).map_err(|e| {
            DriverError::Verbs(VerbsError::Os {
                op: "getrandom",
                source: std::io::Error::other(e.to_string()),
            })
        })?;
        let setup = ConnectionSetup {
            conn_id,
            transport: Transport::Iser,
            local_addr: local.map(|a| a.to_string()).unwrap_or_default(),
            peer_addr: peer_addr.map(|a| a.to_string()).unwrap_or_default(),
            random,
        };
        let params = IserParams {
            read_depth: plan.read_depth,
            max_rdma_len: plan.chunk_size,
            remote_invalidate: reply.send_with_invalidate(),
        };
        let core = Connection::new_iser(cfg, self.sessions.clone(), setup, params, Instant::now());
        let mut d = Driver::new(core, res, plan);
        d.post_receives()?;
        let rep = reply.encode();
        d.res.cm.id.accept(&AcceptParams {
            private_data: &rep,
            initiator_depth: u8::try_from(plan.read_depth).unwrap_or(u8::MAX),
            responder_resources: u8::try_from(plan.responder_resources).unwrap_or(u8::MAX),
        })?;

        tracing::info!(
            read_depth = plan.read_depth,
            receives = plan.recv_depth,
            send_queue = plan.sq_depth,
            remote_invalidate = reply.send_with_invalidate(),
            "iSER connection accepted"
        );
        let (tx, mut rx) = mpsc::unbounded_channel();
        if let Ok(mut c) = self.conns.lock() {
            c.insert(
                conn_id,
                ConnEntry {
                    tx: tx.clone(),
                    peer: peer_addr,
                    local,
                    session: None,
                },
            );
        }
        let cq_fd = watch(d.res.comp_fd()).map_err(|e| io_err("watch completion channel", e))?;
        let cm_fd = watch(d.res.cm.channel.fd()).map_err(|e| io_err("watch CM channel", e))?;
        let mut target: Option<Arc<ScsiTarget>> = None;
        let mut killed = false;

        loop {
            while let Some(ev) = d.core.poll_event() {
                self.handle_event(ev, &tx, &mut target, conn_id);
            }
            d.post_ops();
            if d.finished() {
                break;
            }
            let timeout = d.core.poll_timeout();
            let sleep = async {
                match timeout {
                    Some(t) => tokio::time::sleep_until(tokio::time::Instant::from_std(t)).await,
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                r = cq_fd.readable() => {
                    let mut g = r.map_err(|e| io_err("completion channel", e))?;
                    let _ = g.try_io(|_| Err::<(), _>(std::io::ErrorKind::WouldBlock.into()));
                    let handled = d.drain_cq(Instant::now());
                    if handled >= 4096 {
                        tokio::task::yield_now().await;
                    }
                }
                r = cm_fd.readable() => {
                    let mut g = r.map_err(|e| io_err("CM channel", e))?;
                    let _ = g.try_io(|_| Err::<(), _>(std::io::ErrorKind::WouldBlock.into()));
                    handle_cm_events(&mut d);
                }
                Some(msg) = rx.recv() => match msg {
                    ConnMsg::Done(resp) => d.core.complete(resp),
                    ConnMsg::Tmf(itt, r) => d.core.tmf_done(itt, r),
                    ConnMsg::Kill => { killed = true; d.fail(); }
                    ConnMsg::RequestLogout => d.core.request_logout(2),
                },
                _ = sleep => d.core.handle_timeout(Instant::now()),
            }
        }

        // Teardown: disconnect moves the QP to the error state; every posted
        // work request then completes (flushed), after which no DMA can
        // touch our buffers and they are released with the QP.
        let _ = d.res.cm.id.disconnect();
        d.fail();
        let deadline = tokio::time::Instant::now() + FLUSH_WAIT;
        while !d.quiesced() && tokio::time::Instant::now() < deadline {
            tokio::select! {
                r = cq_fd.readable() => {
                    if let Ok(mut g) = r {
                        let _ = g.try_io(|_| Err::<(), _>(std::io::ErrorKind::WouldBlock.into()));
                    }
                }
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
            d.drain_cq(Instant::now());
        }
        if !d.quiesced() {
            tracing::warn!(
                "work requests still posted after the flush wait; destroying the QP anyway"
            );
        }
        // In-flight SCSI commands finish before the nexus goes away (their
        // answers are dropped: the connection is gone).
        if !killed {
            while d.core.in_flight() > 0 {
                match tokio::time::timeout(Duration::from_secs(30), rx.recv()).await {
                    Ok(Some(ConnMsg::Done(resp))) => d.core.complete(resp),
                    Ok(Some(_)) => {}
                    _ => break,
                }
            }
        }
        drop(cm_fd);
        drop(cq_fd);
        drop(d);
        Ok(())
    }

    fn handle_event(
        &self,
        ev: Event,
        tx: &mpsc::UnboundedSender<ConnMsg>,
        target: &mut Option<Arc<ScsiTarget>>,
        conn_id: u64,
    ) {
        match ev {
            Event::LoggedIn(info) => {
                let span = tracing::Span::current();
                span.record("initiator", info.initiator.as_str());
                span.record("tsih", info.tsih);
                *target = self.target(&info.target);
                if let Ok(mut c) = self.conns.lock() {
                    if let Some(e) = c.get_mut(&conn_id) {
                        e.session = Some(info);
                    }
                }
            }
            Event::Reinstate { conn_id } => {
                self.kill(conn_id);
            }
            Event::Command(cmd) => {
                let tx = tx.clone();
                match target {
                    Some(t) => t.submit(
                        cmd,
                        Box::new(move |resp| {
                            let _ = tx.send(ConnMsg::Done(resp));
                        }),
                    ),
                    None => tracing::error!("command for a session without a SCSI target"),
                }
            }
            Event::TaskMgmt { itt, lun, function } => {
                let tx = tx.clone();
                let nexus = self.conns.lock().ok().and_then(|c| {
                    c.get(&conn_id)
                        .and_then(|e| e.session.as_ref().map(|s| s.nexus.clone()))
                });
                let (Some(t), Some(nexus)) = (target.clone(), nexus) else {
                    let _ = tx.send(ConnMsg::Tmf(itt, TmfResponse::FunctionRejected));
                    return;
                };
                tokio::task::spawn_blocking(move || {
                    let r = t.task_management(&nexus, lun, function);
                    let _ = tx.send(ConnMsg::Tmf(itt, r));
                });
            }
        }
    }
}

/// The connection's own CM events: anything but "established" ends it.
fn handle_cm_events(d: &mut Driver) {
    loop {
        match d.res.cm.channel.next_event() {
            Ok(Some(ev)) => match ev.kind {
                cm_event::RDMA_CM_EVENT_ESTABLISHED => {
                    tracing::debug!("iSER connection established")
                }
                cm_event::RDMA_CM_EVENT_DISCONNECTED
                | cm_event::RDMA_CM_EVENT_TIMEWAIT_EXIT
                | cm_event::RDMA_CM_EVENT_DEVICE_REMOVAL
                | cm_event::RDMA_CM_EVENT_CONNECT_ERROR
                | cm_event::RDMA_CM_EVENT_UNREACHABLE
                | cm_event::RDMA_CM_EVENT_REJECTED => {
                    tracing::info!(event = ev.kind, status = ev.status, "iSER peer gone");
                    d.fail();
                }
                other => tracing::debug!(event = other, "CM event"),
            },
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "reading CM events failed");
                d.fail();
                return;
            }
        }
    }
}

fn io_err(op: &'static str, source: std::io::Error) -> DriverError {
    DriverError::Verbs(VerbsError::Os { op, source })
}

/// The configuration as the iSER portal runs it: it declares as many
/// unexpected PDUs as it posts receives for (RFC 7145 §6.7).
fn iser_config(mut cfg: PortalConfig) -> PortalConfig {
    cfg.limits.max_outstanding_unexpected_pdus = sizing::unexpected_pdus(&cfg);
    cfg
}
