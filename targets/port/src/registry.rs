//! The registry of the port: the directory of targets, the one session
//! table, every connection of every transport with its counters, and the
//! control surface (kill, logout, shutdown). Connections are opened from
//! [`crate::conn`], which builds the handle a driver holds.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use rustgt_iscsi::negotiate::Transport;
use rustgt_iscsi::{Directory, PortalConfig, SessionInfo, SessionTable};
use rustgt_scsi::ScsiTarget;
use tokio::sync::{mpsc, watch};

use crate::admission::{self, Admitted, ConnLimits, Refusal};
use crate::msg::{ConnInfo, PortMsg};
use crate::poll::BusyPoll;
use crate::poller::PollReactors;
use crate::reactors::{Reactors, ThreadSetup};
use crate::stats::{ConnStats, ConnStatsSnapshot};
use crate::tmf;

/// What [`Port::register`] hands the connection handle.
pub(crate) struct Registered {
    pub(crate) conn_id: u64,
    pub(crate) tx: mpsc::UnboundedSender<PortMsg>,
    pub(crate) rx: mpsc::UnboundedReceiver<PortMsg>,
    pub(crate) stats: Arc<ConnStats>,
}

/// A live connection as the port sees it.
#[derive(Debug, Clone)]
pub struct ConnSummary {
    /// The port's number for the connection.
    pub conn_id: u64,
    /// The initiator's address.
    pub peer: SocketAddr,
    /// The portal address the initiator connected to.
    pub local: SocketAddr,
    /// TCP or iSER.
    pub transport: Transport,
    /// `None` until a Normal session reaches full feature phase (discovery
    /// sessions and logins in progress stay `None`).
    pub session: Option<SessionInfo>,
    /// Counters of the SCSI commands this connection carried.
    pub stats: ConnStatsSnapshot,
}

/// One connection in the registry.
#[derive(Debug)]
struct ConnEntry {
    tx: mpsc::UnboundedSender<PortMsg>,
    transport: Transport,
    peer: SocketAddr,
    local: SocketAddr,
    session: Option<SessionInfo>,
    stats: Arc<ConnStats>,
    /// A second descriptor of a TCP socket, to see from another thread
    /// whether the initiator has closed it ([`Port::release_departed`]).
    probe: Option<std::net::TcpStream>,
}

/// How long [`Port::stop_sessions`] waits for killed connections to end
/// (an iSER connection waits for its flushed work requests).
const KILL_WAIT: Duration = Duration::from_secs(10);

/// What the daemon serves, and every connection of every transport.
#[derive(Debug)]
pub struct Port {
    /// The iSER driver's, started at its first connection.
    reactors: OnceLock<Reactors>,
    /// The TCP driver's, started at its first connection.
    poll_reactors: OnceLock<PollReactors>,
    /// How many reactors to start (0: one per core).
    reactor_count: AtomicUsize,
    /// Commands may run to completion on the connection's thread.
    run_to_completion: AtomicBool,
    /// Longest busy-poll of a connection before its reactor parks, in
    /// microseconds (0: never).
    busy_poll_us: AtomicU64,
    dir: Directory,
    sessions: Arc<Mutex<SessionTable>>,
    conns: Mutex<HashMap<u64, ConnEntry>>,
    next_conn: AtomicU64,
    /// Set once at shutdown; every accept loop stops on it.
    shutdown: watch::Sender<bool>,
    /// The connection caps and what they count.
    admission: Arc<admission::Admission>,
    /// Run by each reactor thread first (set before the first connection).
    reactor_setup: SetupHook,
    /// Runs task-management functions; started at the first one (`None`
    /// inside if no thread could be started).
    tmf_pool: OnceLock<Option<tmf::TmfPool>>,
}

/// [`Port::set_reactor_setup`]'s function.
struct SetupHook(Mutex<Option<ThreadSetup>>);

impl std::fmt::Debug for SetupHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SetupHook")
    }
}

impl Port {
    /// A port with no target and no connection yet.
    pub fn new(config: PortalConfig) -> Arc<Port> {
        let (shutdown, _) = watch::channel(false);
        Arc::new(Port {
            reactors: OnceLock::new(),
            poll_reactors: OnceLock::new(),
            reactor_count: AtomicUsize::new(0),
            run_to_completion: AtomicBool::new(true),
            busy_poll_us: AtomicU64::new(0),
            dir: Directory::new(config),
            sessions: Arc::new(Mutex::new(SessionTable::new())),
            conns: Mutex::new(HashMap::new()),
            next_conn: AtomicU64::new(1),
            shutdown,
            admission: Arc::new(admission::Admission::default()),
            reactor_setup: SetupHook(Mutex::new(None)),
            tmf_pool: OnceLock::new(),
        })
    }

    /// Runs a task-management job on the port's pool; gives it back if
    /// the pool could not be started.
    pub(crate) fn run_tmf(&self, job: tmf::Job) -> Result<(), tmf::Job> {
        match self
            .tmf_pool
            .get_or_init(|| tmf::TmfPool::start(tmf::TMF_THREADS))
        {
            Some(pool) => pool.run(job),
            None => Err(job),
        }
    }

    /// Replace the connection caps ([`ConnLimits::default`] until set).
    /// Connections already open stay; new ones are checked against the
    /// new caps.
    pub fn set_limits(&self, limits: ConnLimits) {
        self.admission.set_limits(limits);
    }

    /// The connection caps in force.
    pub fn limits(&self) -> ConnLimits {
        self.admission.limits()
    }

    /// Checks a connection a driver has just accepted from `peer` against
    /// the caps, before the driver allocates anything for it. Admitted, it
    /// counts until the [`Admitted`] (which goes into [`ConnInfo`]) is
    /// dropped; refused, the driver closes it at once (the refusal is
    /// logged here, at most once per [`REFUSAL_LOG_EVERY`](crate::REFUSAL_LOG_EVERY)).
    pub fn admit(&self, peer: SocketAddr) -> Result<Admitted, Refusal> {
        self.admission.admit(peer)
    }

    /// Connections the caps count now: in all, in the login phase, and
    /// from `ip`.
    pub fn admitted_counts(&self, ip: std::net::IpAddr) -> (usize, usize, usize) {
        self.admission.counts(ip)
    }

    /// How many reactor threads serve connections (0: one per core).
    /// Takes effect if called before the first connection.
    pub fn set_reactors(&self, count: usize) {
        self.reactor_count.store(count, Ordering::Relaxed);
    }

    /// What each reactor thread runs first, on itself; reactors started
    /// before the call do not run it.
    pub fn set_reactor_setup(&self, setup: ThreadSetup) {
        if let Ok(mut s) = self.reactor_setup.0.lock() {
            *s = Some(setup);
        }
    }

    /// Whether commands the LUN can complete without blocking run on the
    /// connection's reactor (`true`, the default) or all go to the LUN's
    /// workers. New commands see a change at once.
    pub fn set_run_to_completion(&self, on: bool) {
        self.run_to_completion.store(on, Ordering::Relaxed);
    }

    /// The longest a connection busy-polls before its reactor parks (see
    /// [`BusyPoll`]); new connections see a change.
    pub fn set_busy_poll(&self, max: Duration) {
        let us = u64::try_from(max.as_micros()).unwrap_or(u64::MAX);
        self.busy_poll_us.store(us, Ordering::Relaxed);
    }

    /// A busy-poller for a new connection, with the bound in force.
    pub fn busy_poll(&self) -> BusyPoll {
        BusyPoll::new(Duration::from_micros(
            self.busy_poll_us.load(Ordering::Relaxed),
        ))
    }

    /// The TCP reactor threads, started at the first call (on a tokio
    /// runtime, where closing connections finish).
    pub fn poll_reactors(&self) -> std::io::Result<&PollReactors> {
        self.started(&self.poll_reactors, PollReactors::start)
    }

    /// The iSER reactor threads, started at the first call.
    pub fn reactors(&self) -> std::io::Result<&Reactors> {
        self.started(&self.reactors, Reactors::start)
    }

    /// `cell`'s reactors, started with `start` at the first call with the
    /// count and setup in force.
    fn started<'a, R>(
        &self,
        cell: &'a OnceLock<R>,
        start: impl FnOnce(usize, Option<ThreadSetup>) -> std::io::Result<R>,
    ) -> std::io::Result<&'a R> {
        if let Some(r) = cell.get() {
            return Ok(r);
        }
        let setup = self.reactor_setup.0.lock().ok().and_then(|s| s.clone());
        let r = start(self.reactor_count.load(Ordering::Relaxed), setup)?;
        // Another listener may have started a set meanwhile: keep the first
        // (the spare one stops when dropped).
        Ok(cell.get_or_init(|| r))
    }

    /// Replace the protocol configuration; new logins on every transport
    /// see it at once.
    pub fn set_config(&self, config: PortalConfig) {
        self.dir.set_config(config);
    }

    /// The configuration in force (a driver adapts its own copy per
    /// connection, e.g. iSER's MaxOutstandingUnexpectedPDUs).
    pub fn config(&self) -> Arc<PortalConfig> {
        self.dir.config()
    }

    /// Attach the SCSI target device that serves iSCSI target `name`.
    pub fn add_target(&self, name: &str, target: Arc<ScsiTarget>) {
        self.dir.add_target(name, target);
    }

    /// Forgets target `name`: logins from now on do not find it. Returns
    /// it if it was there.
    pub fn remove_target(&self, name: &str) -> Option<Arc<ScsiTarget>> {
        self.dir.remove_target(name)
    }

    fn target(&self, name: &str) -> Option<Arc<ScsiTarget>> {
        self.dir.target(name)
    }

    /// All SCSI target devices.
    pub fn scsi_targets(&self) -> Vec<Arc<ScsiTarget>> {
        self.dir.scsi_targets()
    }

    /// The session table every connection of every transport logs in to.
    pub fn sessions(&self) -> Arc<Mutex<SessionTable>> {
        Arc::clone(&self.sessions)
    }

    /// Live connections of both transports.
    pub fn connections(&self) -> Vec<ConnSummary> {
        self.conns
            .lock()
            .map(|c| {
                c.iter()
                    .map(|(id, e)| ConnSummary {
                        conn_id: *id,
                        peer: e.peer,
                        local: e.local,
                        transport: e.transport,
                        session: e.session.clone(),
                        stats: e.stats.snapshot(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Close a connection now, whichever driver owns it.
    pub fn kill(&self, conn_id: u64) -> bool {
        self.send_to(conn_id, PortMsg::Kill)
    }

    /// Ask the initiator of a connection to log out (RFC 7143 §11.9.1,
    /// AsyncEvent 1, two seconds to do so). False if there is no such
    /// connection; a connection still logging in ignores the request.
    pub fn logout(&self, conn_id: u64) -> bool {
        self.send_to(conn_id, PortMsg::RequestLogout)
    }

    /// Ask every connection's initiator to log out; how many were asked.
    pub fn request_logout_all(&self) -> usize {
        self.conn_ids()
            .into_iter()
            .filter(|id| self.logout(*id))
            .count()
    }

    fn send_to(&self, conn_id: u64, msg: PortMsg) -> bool {
        self.conns
            .lock()
            .ok()
            .and_then(|c| c.get(&conn_id).map(|e| e.tx.send(msg).is_ok()))
            .unwrap_or(false)
    }

    fn conn_ids(&self) -> Vec<u64> {
        self.conns
            .lock()
            .map(|c| c.keys().copied().collect())
            .unwrap_or_default()
    }

    /// Whether shutdown has begun.
    pub fn is_stopping(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// Completes once shutdown has begun (at once if it already has): the
    /// accept loops of every driver stop on it.
    pub async fn stopping(&self) {
        let mut rx = self.shutdown.subscribe();
        let _ = rx.wait_for(|stopping| *stopping).await;
    }

    /// Stop accepting on every portal, ask every session to log out, wait
    /// up to `grace` for them, close the rest, and wait (bounded) for the
    /// closed ones to end. The SCSI targets keep running.
    pub async fn stop_sessions(&self, grace: Duration) {
        // `send_replace`: `send` would not store the value while no accept
        // loop is subscribed.
        self.shutdown.send_replace(true);
        self.request_logout_all();
        self.wait_empty(grace).await;
        for id in self.conn_ids() {
            self.kill(id);
        }
        self.wait_empty(KILL_WAIT).await;
    }

    /// Graceful shutdown: [`stop_sessions`](Self::stop_sessions), then stop
    /// the SCSI targets (which drains in-flight commands and flushes).
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

    /// Waits until no connection is left or `limit` has passed.
    async fn wait_empty(&self, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        while tokio::time::Instant::now() < deadline
            && self.conns.lock().map(|c| !c.is_empty()).unwrap_or(false)
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Puts a new connection of a driver in the registry: its id, the
    /// channel the port reaches it through, and its counters.
    pub(crate) fn register(&self, info: &mut ConnInfo) -> Registered {
        let conn_id = self.next_conn.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        let stats = Arc::new(ConnStats::default());
        if let Ok(mut c) = self.conns.lock() {
            c.insert(
                conn_id,
                ConnEntry {
                    tx: tx.clone(),
                    transport: info.transport,
                    peer: info.peer,
                    local: info.local,
                    session: None,
                    stats: Arc::clone(&stats),
                    probe: info.probe.take(),
                },
            );
        }
        Registered {
            conn_id,
            tx,
            rx,
            stats,
        }
    }

    /// Tell the SCSI core that this connection's I_T nexus is gone (once).
    /// Done at once on the connection's own thread: `nexus_lost` only takes
    /// short locks (it aborts the nexus's tasks without waiting for running
    /// ones; only the loss of an SPC-2 reservation holder on a unit several
    /// gateways serve costs a write of the shared state and an event), and an initiator that reconnects right away must find the old
    /// nexus's state (reservations, medium prevention) already gone.
    ///
    /// The connection table stays locked until the SCSI core has dropped
    /// the nexus, so a new session's [`Self::release_departed`] (which
    /// takes the same lock) never runs between the two.
    pub(crate) fn release_nexus(&self, conn_id: u64) {
        let Ok(mut conns) = self.conns.lock() else {
            return;
        };
        let info = conns.get_mut(&conn_id).and_then(|e| e.session.take());
        if let Some(info) = info {
            if let Some(t) = self.target(&info.target) {
                let nexus: Arc<rustgt_scsi::Nexus> = info.nexus.clone();
                t.nexus_lost(&nexus);
            }
        }
        drop(conns);
    }

    /// Before a new session of `initiator` goes on: the nexuses of its
    /// earlier connections whose sockets the initiator has already closed
    /// are released now, so the new session never meets their state
    /// (reservations, medium prevention) just because the reactor that owns
    /// the old socket has not yet run. An initiator that disconnects and
    /// logs in again at once sends its FIN before its new login. (Only
    /// connections with a probe, i.e. TCP ones, can be seen closed here.)
    pub(crate) fn release_departed(&self, initiator: &str, me: u64) {
        let departed: Vec<u64> = self
            .conns
            .lock()
            .map(|c| {
                c.iter()
                    .filter(|(id, e)| {
                        **id != me
                            && e.session.as_ref().is_some_and(|s| s.initiator == initiator)
                            && e.probe.as_ref().is_some_and(peer_closed)
                    })
                    .map(|(id, _)| *id)
                    .collect()
            })
            .unwrap_or_default();
        for id in departed {
            tracing::debug!(
                conn = id,
                "initiator closed an earlier connection; its nexus goes now"
            );
            self.release_nexus(id);
        }
    }

    /// Records a connection's logged-in session; its SCSI target.
    pub(crate) fn logged_in(&self, conn_id: u64, info: SessionInfo) -> Option<Arc<ScsiTarget>> {
        self.release_departed(&info.initiator, conn_id);
        let target = self.target(&info.target);
        if let Ok(mut c) = self.conns.lock() {
            if let Some(e) = c.get_mut(&conn_id) {
                e.session = Some(info);
            }
        }
        target
    }

    /// The nexus of a connection's session, if it has one.
    pub(crate) fn nexus_of(&self, conn_id: u64) -> Option<Arc<rustgt_scsi::Nexus>> {
        self.conns.lock().ok().and_then(|c| {
            c.get(&conn_id)
                .and_then(|e| e.session.as_ref().map(|s| s.nexus.clone()))
        })
    }

    /// A connection ended: its nexus goes (if logout did not already take
    /// it), then the registry and the session table forget it.
    pub(crate) fn close(&self, conn_id: u64) {
        self.release_nexus(conn_id);
        let _ = self.conns.lock().ok().and_then(|mut c| c.remove(&conn_id));
        if let Ok(mut s) = self.sessions.lock() {
            s.remove_conn(conn_id);
        }
    }

    pub(crate) fn run_to_completion(&self) -> bool {
        self.run_to_completion.load(Ordering::Relaxed)
    }
}

/// Whether the peer has closed (or reset) the connection of `probe`, as far
/// as the socket can tell without waiting: a peek that sees end of file.
fn peer_closed(probe: &std::net::TcpStream) -> bool {
    let mut byte = [0u8; 1];
    match probe.peek(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => matches!(
            e.kind(),
            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
        ),
    }
}
