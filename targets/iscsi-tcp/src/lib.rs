//! # rustgt-iscsi-tcp: the TCP driver
//!
//! A thin tokio driver around [`rustgt_iscsi::Connection`]: it moves bytes
//! between a socket and the sans-I/O core, hands SCSI commands to the
//! [`rustgt_scsi::ScsiTarget`] of the session's target, feeds completions
//! back, and runs the keepalive timer. It holds no protocol logic.
//!
//! Guarantees: one task pair (reader/driver + writer) per connection; a
//! connection's failure never affects another; on shutdown every session is
//! asked to log out, in-flight commands finish, then sockets close.

use std::collections::{HashMap, VecDeque};
use std::io::IoSlice;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;
use rustgt_iscsi::negotiate::Transport;
use rustgt_iscsi::{Connection, ConnectionSetup, Event, PortalConfig, SessionInfo, SessionTable};
use rustgt_scsi::{Nexus, Response, ScsiTarget, TmfResponse};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
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
    pub session: Option<SessionInfo>,
}

#[derive(Debug)]
struct ConnEntry {
    tx: mpsc::UnboundedSender<ConnMsg>,
    peer: SocketAddr,
    session: Option<SessionInfo>,
}

/// The iSCSI/TCP front end: listeners, connections and the target table.
#[derive(Debug)]
pub struct Server {
    config: RwLock<Arc<PortalConfig>>,
    targets: RwLock<HashMap<String, Arc<ScsiTarget>>>,
    sessions: Arc<Mutex<SessionTable>>,
    conns: Mutex<HashMap<u64, ConnEntry>>,
    next_conn: AtomicU64,
    shutdown: watch::Sender<bool>,
}

impl Server {
    pub fn new(config: PortalConfig) -> Arc<Server> {
        let (shutdown, _) = watch::channel(false);
        Arc::new(Server {
            config: RwLock::new(Arc::new(config)),
            targets: RwLock::new(HashMap::new()),
            sessions: Arc::new(Mutex::new(SessionTable::new())),
            conns: Mutex::new(HashMap::new()),
            next_conn: AtomicU64::new(1),
            shutdown,
        })
    }

    /// Replace the protocol configuration; new logins see it at once.
    pub fn set_config(&self, config: PortalConfig) {
        if let Ok(mut c) = self.config.write() {
            *c = Arc::new(config);
        }
    }

    pub fn config(&self) -> Arc<PortalConfig> {
        match self.config.read() {
            Ok(c) => c.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Attach the SCSI target device that serves iSCSI target `name`.
    pub fn add_target(&self, name: &str, target: Arc<ScsiTarget>) {
        if let Ok(mut t) = self.targets.write() {
            t.insert(name.to_ascii_lowercase(), target);
        }
    }

    pub fn remove_target(&self, name: &str) -> Option<Arc<ScsiTarget>> {
        self.targets
            .write()
            .ok()
            .and_then(|mut t| t.remove(&name.to_ascii_lowercase()))
    }

    fn target(&self, name: &str) -> Option<Arc<ScsiTarget>> {
        self.targets
            .read()
            .ok()
            .and_then(|t| t.get(&name.to_ascii_lowercase()).cloned())
    }

    /// All SCSI target devices.
    pub fn scsi_targets(&self) -> Vec<Arc<ScsiTarget>> {
        self.targets
            .read()
            .map(|t| t.values().cloned().collect())
            .unwrap_or_default()
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

    fn send_to(&self, conn_id: u64, msg: ConnMsg) -> bool {
        self.conns
            .lock()
            .ok()
            .and_then(|c| c.get(&conn_id).map(|e| e.tx.send(msg).is_ok()))
            .unwrap_or(false)
    }

    /// Accept connections on `listener` until shutdown.
    pub async fn serve(self: Arc<Self>, listener: TcpListener) {
        let mut stop = self.shutdown.subscribe();
        loop {
            tokio::select! {
                r = listener.accept() => match r {
                    Ok((sock, peer)) => {
                        let me = self.clone();
                        tokio::spawn(async move { me.run_conn(sock, peer).await });
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                _ = stop.changed() => break,
            }
        }
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
            // Forget the connection and release its nexus.
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
            tracing::info!("connection closed");
        }
        .instrument(span)
        .await
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
        if let Ok(mut c) = self.conns.lock() {
            c.insert(
                conn_id,
                ConnEntry {
                    tx: tx.clone(),
                    peer,
                    session: None,
                },
            );
        }
        let mut conn = Connection::new(
            self.config(),
            self.sessions.clone(),
            setup,
            std::time::Instant::now(),
        );
        let (mut rd, wr) = sock.into_split();
        let (out_tx, out_rx) = mpsc::unbounded_channel::<Vec<Bytes>>();
        let writer = tokio::spawn(write_loop(wr, out_rx));
        let mut target: Option<Arc<ScsiTarget>> = None;
        let mut buf = vec![0u8; 256 * 1024];
        let mut killed = false;

        loop {
            let timeout = conn.poll_timeout();
            let sleep = async {
                match timeout {
                    Some(t) => tokio::time::sleep_until(tokio::time::Instant::from_std(t)).await,
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                r = rd.read(&mut buf) => {
                    let n = r?;
                    if n == 0 {
                        break;
                    }
                    conn.handle_input(buf.get(..n).unwrap_or_default(), std::time::Instant::now());
                }
                Some(msg) = rx.recv() => match msg {
                    ConnMsg::Done(resp) => conn.complete(resp),
                    ConnMsg::Tmf(itt, r) => conn.tmf_done(itt, r),
                    ConnMsg::Kill => { killed = true; conn.fail(); }
                    ConnMsg::RequestLogout => conn.request_logout(2),
                },
                _ = sleep => conn.handle_timeout(std::time::Instant::now()),
            }
            while let Some(ev) = conn.poll_event() {
                self.handle_event(ev, &tx, &mut target, conn_id);
            }
            if let Some(bytes) = conn.poll_transmit() {
                if out_tx.send(bytes).is_err() {
                    break;
                }
            }
            if conn.is_closing() {
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
        drop(out_tx);
        let _ = writer.await;
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
                let tx = tx.clone();
                match target {
                    Some(t) => t.submit(
                        cmd,
                        Box::new(move |resp| {
                            let _ = tx.send(ConnMsg::Done(resp));
                        }),
                    ),
                    None => {
                        tracing::error!("command for a session without a SCSI target");
                    }
                }
            }
            Event::TaskMgmt { itt, lun, function } => {
                let tx = tx.clone();
                let Some(t) = target.clone() else {
                    let _ = tx.send(ConnMsg::Tmf(itt, TmfResponse::FunctionRejected));
                    return;
                };
                let nexus = self.conns.lock().ok().and_then(|c| {
                    c.get(&conn_id)
                        .and_then(|e| e.session.as_ref().map(|s| s.nexus.clone()))
                });
                let Some(nexus) = nexus else {
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

/// Write queued segments with vectored writes, so read payloads go from
/// the SCSI core's buffer to the socket without another copy.
async fn write_loop(
    mut wr: tokio::net::tcp::OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<Vec<Bytes>>,
) {
    let mut queue: VecDeque<Bytes> = VecDeque::new();
    while let Some(segs) = rx.recv().await {
        queue.extend(segs);
        while let Ok(more) = rx.try_recv() {
            queue.extend(more);
        }
        while !queue.is_empty() {
            let slices: Vec<IoSlice<'_>> = queue
                .iter()
                .take(MAX_IOVECS)
                .map(|b| IoSlice::new(b))
                .collect();
            let n = match wr.write_vectored(&slices).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            advance(&mut queue, n);
        }
    }
    let _ = wr.shutdown().await;
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
