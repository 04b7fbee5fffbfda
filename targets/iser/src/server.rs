//! The iSER driver's accept loop and connection tasks: rdma_cm
//! listeners, and one task per connection on the port's reactors.
//!
//! Everything about a connection other than moving work requests is the
//! port's (`rustgt-port`): the targets, the one session table, the
//! connection registry (one id space with TCP), SCSI dispatch (run to
//! completion where the LUN allows, as on TCP), statistics, kill, logout
//! and shutdown. A connection's task owns its verbs resources, its
//! [`rustgt_iscsi::Connection`] and its [`PortConn`]; it runs on one of
//! the port's reactor threads and wakes on the CM event channel, the
//! completion channel (both non-blocking descriptors watched by that
//! reactor: no thread spins while a connection is idle), messages from
//! the port and the keepalive timer. The turn is the port's
//! ([`rustgt_port::serve`]); this file's [`Link`] only drains completions,
//! posts work requests and tears the queue pair down.

#![forbid(unsafe_code)]

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::OwnedFd;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma_sys::rdma_cm_event_type as cm_event;
use rustgt_iscsi::iser::CmPrivateData;
use rustgt_iscsi::{Connection, IserParams};
use rustgt_port::{Admitted, ConnInfo, Got, Link, Port, PortConn, Ring, Transport};
use tokio::io::unix::AsyncFd;
use tracing::Instrument;

use crate::driver::{Driver, DriverError};
use crate::sizing::{self, iser_config, IserSettings, PeerResources};
use crate::verbs::{watch, AcceptParams, ConnResources, ConnShape, IdChannel, VerbsError};

/// How long a closing connection waits for its flushed work requests.
const FLUSH_WAIT: Duration = Duration::from_secs(5);
/// Pending connection requests the CM queues for a listener.
const BACKLOG: i32 = 64;

/// A bound, listening iSER portal.
#[derive(Debug)]
pub struct IserListener {
    cm: IdChannel,
    addr: SocketAddr,
}

impl IserListener {
    /// The address the listener is bound to.
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

/// Accept iSER connections on `listener` until the port shuts down; each
/// is served on one of the port's reactors.
pub async fn serve(port: Arc<Port>, listener: IserListener, settings: IserSettings) {
    serve_until(port, listener, settings, std::future::pending()).await;
}

/// Accept connections until the port shuts down or `stop_listener`
/// completes; accepted connections are not affected by `stop_listener`.
pub async fn serve_until(
    port: Arc<Port>,
    listener: IserListener,
    settings: IserSettings,
    stop_listener: impl Future<Output = ()> + Send,
) {
    let fd = match watch(listener.cm.channel.fd()) {
        Ok(fd) => fd,
        Err(e) => {
            tracing::error!(error = %e, addr = %listener.addr, "cannot watch the CM channel");
            return;
        }
    };
    let stopping = port.stopping();
    tokio::pin!(stopping);
    tokio::pin!(stop_listener);
    loop {
        tokio::select! {
            _ = &mut stop_listener => break,
            _ = &mut stopping => break,
            r = fd.readable() => {
                let Ok(mut guard) = r else { break };
                // Clear first: an event arriving while we drain sets it again.
                let _ = guard.try_io(|_| Err::<(), _>(std::io::ErrorKind::WouldBlock.into()));
                if !accept_pending(&port, &listener, &settings) {
                    break;
                }
            }
        }
    }
    drop(fd);
    drop(listener);
}

/// Handle every queued listener event; false when the listener died.
fn accept_pending(port: &Arc<Port>, listener: &IserListener, settings: &IserSettings) -> bool {
    // Bounded: the CM queues at most BACKLOG requests, and the loop ends
    // as soon as the channel has no event left.
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
                let reactors = match port.reactors() {
                    Ok(r) => r,
                    Err(e) => {
                        // Dropping the id refuses the request.
                        tracing::error!(error = %e, "cannot start reactor threads; iSER connection refused");
                        continue;
                    }
                };
                match IdChannel::adopt(id) {
                    Ok(cm) => {
                        let unknown = SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0));
                        // Over a cap ([limits]): refused before its queue
                        // pair and buffers exist (dropping the id refuses
                        // the request; the port logs refusals, rate-limited).
                        let Ok(admitted) = port.admit(cm.id.peer_addr().unwrap_or(unknown)) else {
                            continue;
                        };
                        let port = Arc::clone(port);
                        let settings = *settings;
                        let private = ev.private_data;
                        reactors.spawn(move |ring| {
                            run_conn(port, settings, cm, peer, private, admitted, ring)
                        })
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

async fn run_conn(
    port: Arc<Port>,
    settings: IserSettings,
    cm: IdChannel,
    peer: PeerResources,
    private: Vec<u8>,
    admitted: Admitted,
    ring: Option<Rc<Ring>>,
) {
    let unknown = SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0));
    let mut pc = port.open(ConnInfo {
        transport: Transport::Iser,
        peer: cm.id.peer_addr().unwrap_or(unknown),
        local: cm.id.local_addr().unwrap_or(unknown),
        probe: None,
        admitted,
    });
    let span = tracing::info_span!(
        "iser",
        id = pc.id(),
        peer = ?cm.id.peer_addr(),
        initiator = tracing::field::Empty,
        isid = tracing::field::Empty,
        tsih = tracing::field::Empty,
    );
    async move {
        if let Err(e) = drive(&mut pc, &settings, cm, peer, &private, ring.as_deref()).await {
            tracing::warn!(error = %e, "iSER connection ended with an error");
        }
        // Its nexus goes (if logout did not already take it) and the port
        // forgets it.
        drop(pc);
        tracing::info!("iSER connection closed");
    }
    .instrument(span)
    .await
}

/// Set up, accept and serve one connection, then tear it down.
async fn drive(
    pc: &mut PortConn,
    settings: &IserSettings,
    cm: IdChannel,
    peer: PeerResources,
    private: &[u8],
    ring: Option<&Ring>,
) -> Result<(), DriverError> {
    let dev = cm.id.device_limits()?;
    // The shared configuration as this connection runs it.
    let cfg = Arc::new(iser_config((*pc.config()).clone()));
    let plan = sizing::plan(&cfg, settings, &dev, peer);
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
    let setup = pc
        .setup(
            local.map(|a| a.to_string()).unwrap_or_default(),
            peer_addr.map(|a| a.to_string()).unwrap_or_default(),
        )
        .map_err(|source| {
            DriverError::Verbs(VerbsError::Os {
                op: "getrandom",
                source,
            })
        })?;
    let params = IserParams {
        read_depth: plan.read_depth,
        max_rdma_len: plan.chunk_size,
        remote_invalidate: reply.send_with_invalidate(),
    };
    let core = Connection::new_iser(cfg, pc.sessions(), setup, params, Instant::now());
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
    let cq_fd = watch(d.res.comp_fd()).map_err(|e| io_err("watch completion channel", e))?;
    let cm_fd = watch(d.res.cm.channel.fd()).map_err(|e| io_err("watch CM channel", e))?;
    let mut link = IserLink {
        cq_fd,
        cm_fd,
        d,
        input_at: None,
    };
    rustgt_port::serve(pc, &mut link, ring)
        .await
        .map_err(|source| {
            DriverError::Verbs(VerbsError::Os {
                op: "serve",
                source,
            })
        })
}

/// An iSER connection as the port's turn drives it: its verbs resources
/// and core, and the two descriptors its reactor watches.
struct IserLink {
    // The watches go before the driver (field order), whose queue pair
    // goes before the buffers of zero-copy Writes and Reads.
    cq_fd: AsyncFd<OwnedFd>,
    cm_fd: AsyncFd<OwnedFd>,
    d: Driver,
    /// The clock the last drain gave the core (see
    /// [`Link::take_input_at`]).
    input_at: Option<Instant>,
}

impl Link for IserLink {
    fn core(&mut self) -> &mut Connection {
        &mut self.d.core
    }

    fn send(&mut self) -> std::io::Result<()> {
        self.d.post_ops();
        Ok(())
    }

    fn output_pending(&self) -> bool {
        false
    }

    fn finished(&mut self) -> bool {
        self.d.finished()
    }

    async fn ready(&mut self) -> std::io::Result<Got> {
        tokio::select! {
            r = self.cq_fd.readable() => {
                let mut g = r?;
                let _ = g.try_io(|_| Err::<(), _>(std::io::ErrorKind::WouldBlock.into()));
                let now = Instant::now();
                self.input_at = Some(now);
                let handled = self.d.drain_cq(now);
                if handled >= 4096 {
                    // Dropped here by the turn's select, nothing is lost:
                    // the completions are in the core already.
                    tokio::task::yield_now().await;
                }
                Ok(Got::Input)
            }
            r = self.cm_fd.readable() => {
                let mut g = r?;
                let _ = g.try_io(|_| Err::<(), _>(std::io::ErrorKind::WouldBlock.into()));
                handle_cm_events(&mut self.d);
                Ok(Got::Nothing)
            }
        }
    }

    fn take_input_at(&mut self) -> Option<Instant> {
        self.input_at.take()
    }

    fn fail(&mut self) {
        self.d.fail();
    }

    /// Disconnect moves the QP to the error state; every posted work
    /// request then completes (flushed), after which no DMA can touch our
    /// buffers and they are released with the QP.
    async fn quiesce(&mut self) {
        let _ = self.d.res.cm.id.disconnect();
        self.d.fail();
        let deadline = tokio::time::Instant::now() + FLUSH_WAIT;
        while !self.d.quiesced() && tokio::time::Instant::now() < deadline {
            tokio::select! {
                r = self.cq_fd.readable() => {
                    if let Ok(mut g) = r {
                        let _ = g.try_io(|_| Err::<(), _>(std::io::ErrorKind::WouldBlock.into()));
                    }
                }
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
            self.d.drain_cq(Instant::now());
        }
        if !self.d.quiesced() {
            tracing::warn!(
                "work requests still posted after the flush wait; destroying the QP anyway"
            );
        }
    }

    async fn close(&mut self, _killed: bool) {
        let d = &self.d;
        let (pinned, registrations) = crate::verbs::pinned();
        tracing::info!(
            zero_copy = d.writes_zero_copy,
            copied = d.writes_copied,
            pinned,
            registrations,
            "iSER Data-In RDMA Writes"
        );
        tracing::info!(
            zero_copy = d.reads_zero_copy,
            copied = d.reads_copied,
            "iSER Data-Out RDMA Reads"
        );
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
