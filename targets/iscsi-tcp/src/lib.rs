//! # rustgt-iscsi-tcp: the TCP driver
//!
//! A thin tokio driver around [`rustgt_iscsi::Connection`]: it moves bytes
//! between a socket and the sans-I/O core, hands SCSI commands to the
//! [`rustgt_scsi::ScsiTarget`] of the session's target, feeds completions
//! back, and runs the keepalive timer. It holds no protocol logic.
//!
//! Guarantees: a fixed set of reactor threads ([`Reactors`], one per core
//! by default), each a single-threaded tokio runtime owning a share of the
//! connections; one task per connection, which reads, runs every PDU that
//! came in, executes on its own thread each command the LUN can complete
//! without blocking ([`ScsiTarget::run_inline`]), and writes every response
//! ready in that turn with one vectored write. A command on a file or
//! block-device LUN that cannot complete at once goes to the reactor's own
//! io_uring (`ring`), whose completions run on the same thread; only the
//! rest crosses to the LUN's workers, whose completions come back over a
//! channel.
//! A connection's failure never affects another; on shutdown every session
//! is asked to log out, in-flight commands finish, then sockets close.
//!
//! For the daemon's control path it also offers: per-listener stop
//! ([`Server::serve_until`]), per-connection statistics ([`ConnStats`]),
//! and a logout request to one connection ([`Server::logout`]).

mod ring;

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::io::IoSlice;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rustgt_iscsi::negotiate::Transport;
use rustgt_iscsi::{
    Connection, ConnectionSetup, Directory, Event, PortalConfig, SessionInfo, SessionTable,
};
use rustgt_scsi::{Nexus, Response, ScsiTarget, TmfResponse};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tracing::Instrument;

/// Messages from the rest of the process to one connection.
#[derive(Debug)]
enum ConnMsg {
    Done(Response),
    Tmf(u32, TmfResponse),
    /// Session reinstatement or admin kill: close now.
    Kill,
    /// Target shutdown: ask the initiator to log out.
    RequestLogout,
}

/// A live connection as the server sees it.
#[derive(Debug, Clone)]
pub struct ConnSummary {
    pub conn_id: u64,
    pub peer: SocketAddr,
    /// The portal address the initiator connected to.
    pub local: SocketAddr,
    pub transport: Transport,
    /// `None` until a Normal session reaches full feature phase (discovery
    /// sessions and logins in progress stay `None`).
    pub session: Option<SessionInfo>,
    /// Counters of the SCSI commands this connection carried.
    pub stats: ConnStatsSnapshot,
}

/// Buckets of [`LatencyHistogram`]: bucket `i` counts values in
/// `[2^i, 2^(i+1))` microseconds (bucket 0 also counts 0), the last one
/// everything from `2^(N-1)` up.
pub const LATENCY_BUCKETS: usize = 32;

/// A lock-free log2 histogram of durations in microseconds.
#[derive(Debug)]
pub struct LatencyHistogram {
    buckets: [AtomicU64; LATENCY_BUCKETS],
    sum_us: AtomicU64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_us: AtomicU64::new(0),
        }
    }
}

impl LatencyHistogram {
    /// Counts one duration.
    pub fn record(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let bucket = (63 - (us | 1).leading_zeros() as usize).min(LATENCY_BUCKETS - 1);
        if let Some(b) = self.buckets.get(bucket) {
            b.fetch_add(1, Ordering::Relaxed);
        }
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    /// Counts per bucket and the sum of all values in microseconds.
    pub fn snapshot(&self) -> ([u64; LATENCY_BUCKETS], u64) {
        (
            std::array::from_fn(|i| self.buckets.get(i).map_or(0, |b| b.load(Ordering::Relaxed))),
            self.sum_us.load(Ordering::Relaxed),
        )
    }
}

/// Live counters of one connection, updated by SCSI completions.
#[derive(Debug, Default)]
pub struct ConnStats {
    commands: AtomicU64,
    /// Commands that ended with a status other than GOOD.
    errors: AtomicU64,
    /// Data-In bytes (target to initiator).
    read_bytes: AtomicU64,
    /// Data-Out bytes (initiator to target).
    write_bytes: AtomicU64,
    /// From the command's arrival to its completion by the SCSI core.
    latency: LatencyHistogram,
}

impl ConnStats {
    fn record(&self, started: Instant, data_out: usize, resp: &Response) {
        self.commands.fetch_add(1, Ordering::Relaxed);
        if resp.status != rustgt_scsi::Status::GOOD {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        self.read_bytes
            .fetch_add(resp.data_in.len() as u64, Ordering::Relaxed);
        self.write_bytes
            .fetch_add(data_out as u64, Ordering::Relaxed);
        self.latency.record(started.elapsed());
    }

    pub fn snapshot(&self) -> ConnStatsSnapshot {
        let (latency_us, latency_sum_us) = self.latency.snapshot();
        ConnStatsSnapshot {
            commands: self.commands.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            read_bytes: self.read_bytes.load(Ordering::Relaxed),
            write_bytes: self.write_bytes.load(Ordering::Relaxed),
            latency_us,
            latency_sum_us,
        }
    }
}

/// A copy of a connection's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ConnStatsSnapshot {
    pub commands: u64,
    pub errors: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Command latency counts per [`LatencyHistogram`] bucket.
    pub latency_us: [u64; LATENCY_BUCKETS],
    pub latency_sum_us: u64,
}

#[derive(Debug)]
struct ConnEntry {
    tx: mpsc::UnboundedSender<ConnMsg>,
    peer: SocketAddr,
    local: SocketAddr,
    session: Option<SessionInfo>,
    stats: Arc<ConnStats>,
    /// A second descriptor of the socket, to see from another thread
    /// whether the initiator has closed it ([`Server::release_departed`]).
    probe: Option<std::net::TcpStream>,
}

/// The iSCSI/TCP front end: listeners, connections and the target table.
#[derive(Debug)]
pub struct Server {
    /// Started at the first accepted connection.
    reactors: OnceLock<Reactors>,
    /// How many reactors to start (0: one per core).
    reactor_count: AtomicUsize,
    /// Commands may run to completion on the reactor.
    run_to_completion: AtomicBool,
    dir: Directory,
    sessions: Arc<Mutex<SessionTable>>,
    conns: Mutex<HashMap<u64, ConnEntry>>,
    next_conn: AtomicU64,
    shutdown: watch::Sender<bool>,
}

impl Server {
    pub fn new(config: PortalConfig) -> Arc<Server> {
        let (shutdown, _) = watch::channel(false);
        Arc::new(Server {
            reactors: OnceLock::new(),
            reactor_count: AtomicUsize::new(0),
            run_to_completion: AtomicBool::new(true),
            dir: Directory::new(config),
            sessions: Arc::new(Mutex::new(SessionTable::new())),
            conns: Mutex::new(HashMap::new()),
            next_conn: AtomicU64::new(1),
            shutdown,
        })
    }

    /// How many reactor threads serve connections (0: one per core).
    /// Takes effect if called before the first connection is accepted.
    pub fn set_reactors(&self, count: usize) {
        self.reactor_count.store(count, Ordering::Relaxed);
    }

    /// Whether commands the LUN can complete without blocking run on the
    /// connection's reactor (`true`, the default) or all go to the LUN's
    /// workers. New commands see a change at once.
    pub fn set_run_to_completion(&self, on: bool) {
        self.run_to_completion.store(on, Ordering::Relaxed);
    }

    fn reactors(&self) -> std::io::Result<&Reactors> {
        if let Some(r) = self.reactors.get() {
            return Ok(r);
        }
        let r = Reactors::start(self.reactor_count.load(Ordering::Relaxed))?;
        // Another listener may have started a set meanwhile: keep the first
        // (the spare one stops when dropped).
        Ok(self.reactors.get_or_init(|| r))
    }

    /// Replace the protocol configuration; new logins see it at once.
    pub fn set_config(&self, config: PortalConfig) {
        self.dir.set_config(config);
    }

    pub fn config(&self) -> Arc<PortalConfig> {
        self.dir.config()
    }

    /// Attach the SCSI target device that serves iSCSI target `name`.
    pub fn add_target(&self, name: &str, target: Arc<ScsiTarget>) {
        self.dir.add_target(name, target);
    }

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

    /// Live connections.
    pub fn connections(&self) -> Vec<ConnSummary> {
        self.conns
            .lock()
            .map(|c| {
                c.iter()
                    .map(|(id, e)| ConnSummary {
                        conn_id: *id,
                        peer: e.peer,
                        local: e.local,
                        transport: Transport::Tcp,
                        session: e.session.clone(),
                        stats: e.stats.snapshot(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Close a connection now (its tasks are aborted).
    pub fn kill(&self, conn_id: u64) -> bool {
        self.send_to(conn_id, ConnMsg::Kill)
    }

    /// Ask the initiator of a connection to log out (RFC 7143 §11.9.1,
    /// AsyncEvent 1, two seconds to do so). False if there is no such
    /// connection; a connection still logging in ignores the request.
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
    pub async fn serve(self: Arc<Self>, listener: TcpListener) {
        self.serve_until(listener, std::future::pending()).await;
    }

    /// Accept connections on `listener` until shutdown or until `stop`
    /// completes (a portal removed at run time). Connections already
    /// accepted are not affected by `stop`.
    pub async fn serve_until(
        self: Arc<Self>,
        listener: TcpListener,
        stop_listener: impl Future<Output = ()> + Send,
    ) {
        let mut stop = self.shutdown.subscribe();
        tokio::pin!(stop_listener);
        loop {
            tokio::select! {
                _ = &mut stop_listener => break,
                r = listener.accept() => match r {
                    Ok((sock, peer)) => self.hand_to_reactor(sock, peer),
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                _ = stop.changed() => break,
            }
        }
    }

    /// Moves an accepted connection to the least loaded reactor, which
    /// serves it from then on.
    fn hand_to_reactor(self: &Arc<Self>, sock: TcpStream, peer: SocketAddr) {
        let reactors = match self.reactors() {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, %peer, "cannot start reactor threads; connection refused");
                return;
            }
        };
        let sock = match sock.into_std() {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, %peer, "cannot move an accepted connection");
                return;
            }
        };
        let (handle, load) = reactors.pick();
        let me = Arc::clone(self);
        handle.spawn(async move {
            let _load = load;
            match TcpStream::from_std(sock) {
                Ok(sock) => me.run_conn(sock, peer).await,
                Err(e) => tracing::warn!(error = %e, %peer, "cannot register a connection"),
            }
        });
    }

    /// Graceful shutdown: stop accepting, ask every session to log out,
    /// wait up to `grace` for them, then close the rest and stop the
    /// SCSI targets (which drains in-flight commands and flushes).
    pub async fn shutdown(&self, grace: Duration) {
        let _ = self.shutdown.send(true);
        let ids: Vec<u64> = self
            .conns
            .lock()
            .map(|c| c.keys().copied().collect())
            .unwrap_or_default();
        for id in &ids {
            self.send_to(*id, ConnMsg::RequestLogout);
        }
        let deadline = tokio::time::Instant::now() + grace;
        while tokio::time::Instant::now() < deadline
            && self.conns.lock().map(|c| !c.is_empty()).unwrap_or(false)
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let ids: Vec<u64> = self
            .conns
            .lock()
            .map(|c| c.keys().copied().collect())
            .unwrap_or_default();
        for id in ids {
            self.kill(id);
        }
        let targets = self.scsi_targets();
        let _ = tokio::task::spawn_blocking(move || {
            for t in targets {
                t.shutdown();
            }
        })
        .await;
    }

    async fn run_conn(self: Arc<Self>, sock: TcpStream, peer: SocketAddr) {
        let conn_id = self.next_conn.fetch_add(1, Ordering::Relaxed);
        let span = tracing::info_span!(
            "conn",
            id = conn_id,
            %peer,
            initiator = tracing::field::Empty,
            isid = tracing::field::Empty,
            tsih = tracing::field::Empty,
        );
        async move {
            if let Err(e) = self.clone().drive(sock, peer, conn_id).await {
                tracing::debug!(error = %e, "connection ended with error");
            }
            // Release its nexus (if logout did not already) and forget it.
            self.release_nexus(conn_id);
            let _ = self.conns.lock().ok().and_then(|mut c| c.remove(&conn_id));
            if let Ok(mut s) = self.sessions.lock() {
                s.remove_conn(conn_id);
            }
            tracing::info!("connection closed");
        }
        .instrument(span)
        .await
    }

    /// Tell the SCSI core that this connection's I_T nexus is gone (once).
    /// Done at once on the connection's own thread: `nexus_lost` only takes
    /// short locks (it aborts the nexus's tasks without waiting for running
    /// ones), and an initiator that reconnects right away must find the old
    /// nexus's state (reservations, medium prevention) already gone.
    ///
    /// The connection table stays locked until the SCSI core has dropped
    /// the nexus, so a new session's [`Self::release_departed`] (which
    /// takes the same lock) never runs between the two.
    fn release_nexus(&self, conn_id: u64) {
        let Ok(mut conns) = self.conns.lock() else {
            return;
        };
        let info = conns.get_mut(&conn_id).and_then(|e| e.session.take());
        if let Some(info) = info {
            if let Some(t) = self.target(&info.target) {
                let nexus: Arc<Nexus> = info.nexus.clone();
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
    /// logs in again at once sends its FIN before its new login.
    fn release_departed(&self, initiator: &str, me: u64) {
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

    async fn drive(
        self: Arc<Self>,
        sock: TcpStream,
        peer: SocketAddr,
        conn_id: u64,
    ) -> std::io::Result<()> {
        let _ = sock.set_nodelay(true);
        let local = sock.local_addr()?;
        let mut random = [0u8; 32];
        getrandom::getrandom(&mut random).map_err(|e| std::io::Error::other(e.to_string()))?;
        let setup = ConnectionSetup {
            conn_id,
            transport: Transport::Tcp,
            local_addr: local.to_string(),
            peer_addr: peer.to_string(),
            random,
        };
        let (tx, mut rx) = mpsc::unbounded_channel();
        let stats = Arc::new(ConnStats::default());
        if let Ok(mut c) = self.conns.lock() {
            c.insert(
                conn_id,
                ConnEntry {
                    tx: tx.clone(),
                    peer,
                    local,
                    session: None,
                    stats: stats.clone(),
                    probe: sock
                        .as_fd()
                        .try_clone_to_owned()
                        .ok()
                        .map(std::net::TcpStream::from),
                },
            );
        }
        let mut conn = Connection::new(
            self.config(),
            self.sessions.clone(),
            setup,
            std::time::Instant::now(),
        );
        let mut out = Output::default();
        let mut target: Option<Arc<ScsiTarget>> = None;
        let mut buf = vec![0u8; 256 * 1024];
        let mut killed = false;

        // One turn: send what is ready, wait for input, a completion from a
        // worker, room in the socket or the timer; then run every PDU that
        // came in, to completion where the LUN allows, and queue what they
        // produced. Nothing here waits for another thread.
        loop {
            out.flush(&sock)?;
            let timeout = conn.poll_timeout();
            let sleep = async {
                match timeout {
                    Some(t) => tokio::time::sleep_until(tokio::time::Instant::from_std(t)).await,
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                biased;
                Some(msg) = rx.recv() => {
                    on_msg(&mut conn, msg, &mut killed);
                    while let Ok(msg) = rx.try_recv() {
                        on_msg(&mut conn, msg, &mut killed);
                    }
                }
                r = sock.readable() => {
                    r?;
                    match read_some(&sock, &mut buf) {
                        Ok(0) => {
                            // The initiator is gone. With nothing in flight
                            // its nexus goes now, before anything else.
                            if conn.in_flight() == 0 {
                                self.release_nexus(conn_id);
                            }
                            break;
                        }
                        Ok(n) => conn.handle_input(
                            buf.get(..n).unwrap_or_default(),
                            std::time::Instant::now(),
                        ),
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(e) => return Err(e),
                    }
                }
                r = sock.writable(), if out.pending() => r?,
                _ = sleep => conn.handle_timeout(std::time::Instant::now()),
            }
            while let Some(ev) = conn.poll_event() {
                if let Some(resp) = self.handle_event(ev, &tx, &mut target, conn_id, &stats) {
                    conn.complete(resp);
                }
            }
            let closing = conn.is_closing();
            if closing && conn.in_flight() == 0 {
                // The session's state (reservations, unit attentions) goes
                // before the initiator can see a Logout Response, so another
                // session's next command never meets it.
                self.release_nexus(conn_id);
            }
            if let Some(bytes) = conn.poll_transmit() {
                out.queue.extend(bytes);
            }
            if closing {
                break;
            }
        }
        // Let in-flight commands finish before the nexus goes away, so no
        // write is lost half-done; bounded by the commands themselves.
        if !killed {
            while conn.in_flight() > 0 {
                match tokio::time::timeout(Duration::from_secs(30), rx.recv()).await {
                    Ok(Some(ConnMsg::Done(resp))) => conn.complete(resp),
                    Ok(Some(_)) => {}
                    _ => break,
                }
            }
        }
        // What was queued before the end (a Logout Response, a Reject)
        // still goes out, within a bound.
        if !killed {
            let _ = tokio::time::timeout(LINGER, out.flush_all(&sock)).await;
        }
        let mut sock = sock;
        let _ = sock.shutdown().await;
        Ok(())
    }

    /// Acts on one event of the core; a command that ran to completion on
    /// this thread comes back as its response.
    fn handle_event(
        &self,
        ev: Event,
        tx: &mpsc::UnboundedSender<ConnMsg>,
        target: &mut Option<Arc<ScsiTarget>>,
        conn_id: u64,
        stats: &Arc<ConnStats>,
    ) -> Option<Response> {
        match ev {
            Event::LoggedIn(info) => {
                self.release_departed(&info.initiator, conn_id);
                let span = tracing::Span::current();
                span.record("initiator", info.initiator.as_str());
                span.record("isid", format!("{:02x?}", info.isid).as_str());
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
                let started = Instant::now();
                let data_out = cmd.data_out.len();
                let Some(t) = target else {
                    tracing::error!("command for a session without a SCSI target");
                    return None;
                };
                let cmd = if self.run_to_completion.load(Ordering::Relaxed) {
                    match t.run_inline(cmd) {
                        Ok(resp) => {
                            stats.record(started, data_out, &resp);
                            return Some(resp);
                        }
                        Err(cmd) => cmd,
                    }
                } else {
                    cmd
                };
                let tx = tx.clone();
                let stats = stats.clone();
                let done: rustgt_scsi::Completion = Box::new(move |resp| {
                    stats.record(started, data_out, &resp);
                    let _ = tx.send(ConnMsg::Done(resp));
                });
                // A file or block-device LUN: the reactor's io_uring.
                let (cmd, done) = if self.run_to_completion.load(Ordering::Relaxed) {
                    match t.run_on_ring(cmd, done) {
                        Ok(()) => return None,
                        Err(back) => back,
                    }
                } else {
                    (cmd, done)
                };
                t.submit(cmd, done);
            }
            Event::TaskMgmt { itt, lun, function } => {
                let tx = tx.clone();
                let Some(t) = target.clone() else {
                    let _ = tx.send(ConnMsg::Tmf(itt, TmfResponse::FunctionRejected));
                    return None;
                };
                let nexus = self.conns.lock().ok().and_then(|c| {
                    c.get(&conn_id)
                        .and_then(|e| e.session.as_ref().map(|s| s.nexus.clone()))
                });
                let Some(nexus) = nexus else {
                    let _ = tx.send(ConnMsg::Tmf(itt, TmfResponse::FunctionRejected));
                    return None;
                };
                tokio::task::spawn_blocking(move || {
                    let r = t.task_management(&nexus, lun, function);
                    let _ = tx.send(ConnMsg::Tmf(itt, r));
                });
            }
        }
        None
    }
}

/// Acts on a message from outside the connection's thread.
fn on_msg(conn: &mut Connection, msg: ConnMsg, killed: &mut bool) {
    match msg {
        ConnMsg::Done(resp) => conn.complete(resp),
        ConnMsg::Tmf(itt, r) => conn.tmf_done(itt, r),
        ConnMsg::Kill => {
            *killed = true;
            conn.fail();
        }
        ConnMsg::RequestLogout => conn.request_logout(2),
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

/// How long a closing connection may take to send what it queued.
const LINGER: Duration = Duration::from_secs(10);

/// One read of what the socket holds, without waiting. A read that did
/// not fill `buf` drained the socket, so its readiness is cleared at once
/// rather than by a second read that would only fail with EAGAIN (new data
/// raises a new edge, which the reactor sees before it sleeps).
fn read_some(sock: &TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
    let n = sock.try_read(buf)?;
    if n > 0 && n < buf.len() {
        let _ = sock.try_io(tokio::io::Interest::READABLE, || {
            Err::<(), _>(std::io::ErrorKind::WouldBlock.into())
        });
    }
    Ok(n)
}

/// The connection's queue of PDU segments to send, written with vectored
/// writes so read payloads go from the SCSI core's buffer to the socket
/// without another copy, and every response ready in a turn leaves in one
/// `writev`.
#[derive(Debug, Default)]
struct Output {
    queue: VecDeque<Bytes>,
}

impl Output {
    fn pending(&self) -> bool {
        !self.queue.is_empty()
    }

    /// Writes as much as the socket takes now.
    fn flush(&mut self, sock: &TcpStream) -> std::io::Result<()> {
        while self.pending() {
            let mut slices = [IoSlice::new(&[]); MAX_IOVECS];
            let mut count = 0;
            for (slot, b) in slices.iter_mut().zip(self.queue.iter()) {
                *slot = IoSlice::new(b);
                count += 1;
            }
            match sock.try_write_vectored(slices.get(..count).unwrap_or_default()) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => advance(&mut self.queue, n),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Writes everything, waiting for room as needed.
    async fn flush_all(&mut self, sock: &TcpStream) -> std::io::Result<()> {
        while self.pending() {
            sock.writable().await?;
            self.flush(sock)?;
        }
        Ok(())
    }
}

/// The reactor threads: each runs a single-threaded tokio runtime (its own
/// epoll, timers and tasks), so a connection's reads, inline commands and
/// writes all happen on one thread and no wake-up crosses to another.
#[derive(Debug)]
pub struct Reactors {
    reactors: Vec<Reactor>,
}

#[derive(Debug)]
struct Reactor {
    handle: tokio::runtime::Handle,
    /// Connections it serves now.
    load: Arc<AtomicUsize>,
    /// Dropped to stop the reactor's thread.
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// Counts a connection on its reactor while alive.
#[derive(Debug)]
struct LoadGuard(Arc<AtomicUsize>);

impl Drop for LoadGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Reactors {
    /// Starts `count` reactor threads (0: one per available core).
    pub fn start(count: usize) -> std::io::Result<Reactors> {
        let count = if count == 0 {
            std::thread::available_parallelism().map_or(1, usize::from)
        } else {
            count
        };
        let mut reactors = Vec::with_capacity(count);
        for i in 0..count {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .thread_name(format!("rustgt-reactor{i}-io"))
                .build()?;
            let handle = rt.handle().clone();
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            std::thread::Builder::new()
                .name(format!("rustgt-reactor{i}"))
                .spawn(move || {
                    rt.block_on(ring::serve_until(stopped));
                })?;
            reactors.push(Reactor {
                handle,
                load: Arc::new(AtomicUsize::new(0)),
                _stop: stop,
            });
        }
        tracing::info!(reactors = count, "reactor threads started");
        Ok(Reactors { reactors })
    }

    /// How many reactors there are.
    pub fn len(&self) -> usize {
        self.reactors.len()
    }

    /// Whether there are none (never, once started).
    pub fn is_empty(&self) -> bool {
        self.reactors.is_empty()
    }

    /// The reactor with the fewest connections, and a guard counting one
    /// more there.
    fn pick(&self) -> (tokio::runtime::Handle, LoadGuard) {
        let best = self
            .reactors
            .iter()
            .min_by_key(|r| r.load.load(Ordering::Relaxed));
        match best {
            Some(r) => {
                r.load.fetch_add(1, Ordering::Relaxed);
                (r.handle.clone(), LoadGuard(Arc::clone(&r.load)))
            }
            // `start` makes at least one; a caller's runtime otherwise.
            None => (
                tokio::runtime::Handle::current(),
                LoadGuard(Arc::new(AtomicUsize::new(1))),
            ),
        }
    }
}

/// Most segments handed to one writev (Linux's UIO_MAXIOV is 1024).
const MAX_IOVECS: usize = 64;

/// Drop `n` written bytes from the front of `queue`.
fn advance(queue: &mut VecDeque<Bytes>, mut n: usize) {
    while n > 0 {
        let Some(front) = queue.front_mut() else {
            return;
        };
        if n >= front.len() {
            n -= front.len();
            queue.pop_front();
        } else {
            let _ = front.split_to(n);
            n = 0;
        }
    }
}

/// Bind a listener for `addr`.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_histogram_buckets_by_power_of_two_microseconds() {
        let h = LatencyHistogram::default();
        for us in [0, 1, 3, 4, 1000, u64::MAX / 2] {
            h.record(Duration::from_micros(us));
        }
        let (buckets, sum) = h.snapshot();
        assert_eq!(buckets[0], 2, "0 and 1 us");
        assert_eq!(buckets[1], 1, "3 us");
        assert_eq!(buckets[2], 1, "4 us");
        assert_eq!(buckets[9], 1, "1000 us is in [512, 1024)");
        assert_eq!(buckets[LATENCY_BUCKETS - 1], 1, "huge values saturate");
        assert_eq!(buckets.iter().sum::<u64>(), 6);
        assert!(sum >= 1008);
    }

    #[test]
    fn conn_stats_count_commands_bytes_and_errors() {
        let s = ConnStats::default();
        let ok = Response {
            data_in: vec![0; 4096],
            ..Response::default()
        };
        let bad = Response {
            status: rustgt_scsi::Status::CHECK_CONDITION,
            ..Response::default()
        };
        s.record(Instant::now(), 0, &ok);
        s.record(Instant::now(), 512, &bad);
        let snap = s.snapshot();
        assert_eq!(
            (
                snap.commands,
                snap.errors,
                snap.read_bytes,
                snap.write_bytes
            ),
            (2, 1, 4096, 512)
        );
        assert_eq!(snap.latency_us.iter().sum::<u64>(), 2);
    }

    #[test]
    fn advance_drops_whole_and_partial_segments() {
        let mut q: VecDeque<Bytes> = ["abc", "de", "fghij"]
            .iter()
            .map(|s| Bytes::from_static(s.as_bytes()))
            .collect();
        advance(&mut q, 4);
        assert_eq!(
            q.iter().map(|b| b.as_ref()).collect::<Vec<_>>(),
            vec![&b"e"[..], &b"fghij"[..]]
        );
        advance(&mut q, 3);
        assert_eq!(
            q.iter().map(|b| b.as_ref()).collect::<Vec<_>>(),
            vec![&b"hij"[..]]
        );
        advance(&mut q, 3);
        assert!(q.is_empty());
        advance(&mut q, 5);
        assert!(q.is_empty());
    }
}
