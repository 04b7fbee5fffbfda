//! The port with real sans-I/O connections of both transports (a TCP
//! byte-stream core and an iSER message core), logged in through the real
//! login code to a real SCSI target on a RAM LUN. No sockets, no verbs:
//! the drivers' part is played by the test.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustgt_backstore::{open, BackstoreSpec, EngineKind};
use rustgt_iscsi::iser::ControlHeader;
use rustgt_iscsi::pdu::{LoginRequest, LoginStatus, NopOut, Reply, Request, RequestHeader, Stage};
use rustgt_iscsi::text::encode_text;
use rustgt_iscsi::{Connection, ConnectionSetup, IserOp, IserParams, PortalConfig, TargetInfo};
use rustgt_scsi::{LunConfig, ScsiTarget};

use super::*;

const TARGET: &str = "iqn.2026-11.org.rustgt:port-test";
const INITIATOR: &str = "iqn.2026-11.org.rustgt:port-initiator";
const ISID: [u8; 6] = [0x80, 0, 0, 0x12, 0x34, 0x56];

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("address")
}

fn port() -> Arc<Port> {
    let port = Port::new(PortalConfig {
        targets: vec![TargetInfo {
            name: TARGET.into(),
            alias: None,
            tpgt: 1,
            portals: vec!["127.0.0.1:3260".into()],
            iser_portals: vec![],
            acl: vec![],
            chap: Default::default(),
            groups: Vec::new(),
            redirect: None,
        }],
        queue_depth: 16,
        ..PortalConfig::default()
    });
    let t = ScsiTarget::new(TARGET);
    let store = open(&BackstoreSpec {
        kind: EngineKind::Ram,
        path: None,
        size: Some(1 << 20),
        block_size: 512,
        read_only: false,
        thin: false,
        rbd: None,
    })
    .expect("ram backstore");
    let mut lc = LunConfig::new(store);
    lc.workers = 1;
    t.add_lun(0, lc).expect("add lun");
    port.add_target(TARGET, t);
    port
}

/// One connection as a driver would run it: the port's handle and the core.
struct Driven {
    pc: PortConn,
    core: Connection,
    transport: Transport,
}

impl Driven {
    fn open(port: &Arc<Port>, transport: Transport, peer: &str) -> Driven {
        let pc = port.open(ConnInfo {
            transport,
            peer: addr(peer),
            local: addr("127.0.0.1:3260"),
            probe: None,
            admitted: port.admit(addr(peer)).expect("under the caps"),
        });
        let setup = ConnectionSetup {
            conn_id: pc.id(),
            transport,
            local_addr: "127.0.0.1:3260".into(),
            peer_addr: peer.into(),
            random: [7u8; 32],
        };
        let now = Instant::now();
        let core = match transport {
            Transport::Tcp => Connection::new(pc.config(), pc.sessions(), setup, now),
            Transport::Iser => Connection::new_iser(
                pc.config(),
                pc.sessions(),
                setup,
                IserParams {
                    read_depth: 4,
                    max_rdma_len: 4096,
                    remote_invalidate: false,
                },
                now,
            ),
        };
        Driven {
            pc,
            core,
            transport,
        }
    }

    /// Sends one PDU the way this transport carries it, runs the events it
    /// caused through the port, and returns the target's replies.
    fn send(&mut self, req: &Request) -> Vec<Reply> {
        let now = Instant::now();
        match self.transport {
            Transport::Tcp => self.core.handle_input(&req.encode(false, false), now),
            Transport::Iser => {
                let mut msg = ControlHeader::default().encode().to_vec();
                msg.extend_from_slice(&req.encode(false, false));
                self.core.handle_message(&msg, now);
            }
        }
        while let Some(ev) = self.core.poll_event() {
            if let Some(resp) = self.pc.on_event(ev) {
                self.core.complete(resp);
            }
        }
        let mut wire = Vec::new();
        let mut out = Vec::new();
        if let Some(segs) = self.core.poll_transmit() {
            for s in segs {
                wire.extend_from_slice(&s);
            }
        }
        while let Some(op) = self.core.poll_op() {
            if let IserOp::Send(s) = op {
                let pdu = s
                    .msg
                    .get(rustgt_iscsi::iser::ISER_HEADER_LEN..)
                    .unwrap_or_default();
                let (r, _) = Reply::decode(pdu, false, false).expect("a PDU per Send");
                out.push(r);
            }
        }
        let mut pos = 0;
        while pos < wire.len() {
            let (r, n) = Reply::decode(&wire[pos..], false, false).expect("a whole PDU");
            pos += n;
            out.push(r);
        }
        out
    }

    /// A Normal session of INITIATOR with ISID to TARGET, no
    /// authentication; returns its TSIH.
    fn login(&mut self) -> u16 {
        let transport = self.transport;
        login_with(transport, |req| self.send(req))
    }
}

/// Logs in a Normal session of INITIATOR with ISID to TARGET, no
/// authentication, through `send` (a request in, the target's replies
/// out); returns its TSIH.
fn login_with(transport: Transport, mut send: impl FnMut(&Request) -> Vec<Reply>) -> u16 {
    {
        let mut exp_stat_sn = 0;
        let mut tsih = 0;
        let mut steps = vec![(
            Stage::SECURITY,
            Stage::OPERATIONAL,
            vec![
                ("InitiatorName", INITIATOR),
                ("TargetName", TARGET),
                ("SessionType", "Normal"),
                ("AuthMethod", "None"),
            ],
        )];
        let mut ops = vec![("HeaderDigest", "None"), ("DataDigest", "None")];
        if transport == Transport::Iser {
            ops.push(("RDMAExtensions", "Yes"));
        }
        steps.push((Stage::OPERATIONAL, Stage::FULL_FEATURE, ops));
        for (csg, nsg, keys) in steps {
            let pairs: Vec<(String, String)> = keys
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let req = Request {
                header: RequestHeader::Login(LoginRequest {
                    transit: true,
                    cont: false,
                    csg,
                    nsg,
                    version_max: 0,
                    version_min: 0,
                    isid: ISID,
                    tsih: 0,
                    itt: 1,
                    cid: 1,
                    cmd_sn: 1,
                    exp_stat_sn,
                }),
                data: encode_text(&pairs),
            };
            let replies = send(&req);
            let Some(Reply::LoginResponse(lr)) = replies.into_iter().next() else {
                panic!("no login response");
            };
            assert_eq!(lr.status, LoginStatus::SUCCESS, "{:?}", lr.data);
            exp_stat_sn = lr.stat_sn.wrapping_add(1);
            tsih = lr.tsih;
        }
        assert_ne!(tsih, 0, "a Normal session in full feature phase");
        tsih
    }
}

fn summary(port: &Port, id: u64) -> ConnSummary {
    port.connections()
        .into_iter()
        .find(|c| c.conn_id == id)
        .expect("listed")
}

#[tokio::test]
async fn a_session_reinstated_over_iser_kills_its_tcp_connection() {
    let port = port();
    let mut tcp = Driven::open(&port, Transport::Tcp, "127.0.0.1:50000");
    let tsih_tcp = tcp.login();
    assert!(summary(&port, tcp.pc.id()).session.is_some());
    assert!(
        tcp.pc.try_recv().is_none(),
        "nothing for the TCP connection yet"
    );

    // The same initiator and ISID log in again, over the other transport.
    let mut iser = Driven::open(&port, Transport::Iser, "127.0.0.2:50001");
    let tsih_iser = iser.login();
    assert_ne!(tsih_tcp, tsih_iser, "a new session");
    assert!(
        matches!(tcp.pc.try_recv(), Some(PortMsg::Kill)),
        "the old TCP connection is told to close"
    );
    assert!(iser.pc.try_recv().is_none(), "the new one is left alone");

    // The TCP driver closes it: only the iSER session is left, in the
    // registry and in the one session table.
    drop(tcp);
    let left = port.connections();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].transport, Transport::Iser);
    assert_eq!(left[0].session.as_ref().map(|s| s.tsih), Some(tsih_iser));
    assert_eq!(port.sessions().lock().expect("table").len(), 1);
}

#[tokio::test]
async fn a_session_reinstated_over_tcp_kills_its_iser_connection() {
    let port = port();
    let mut iser = Driven::open(&port, Transport::Iser, "127.0.0.2:50001");
    iser.login();
    let mut tcp = Driven::open(&port, Transport::Tcp, "127.0.0.1:50000");
    tcp.login();
    assert!(matches!(iser.pc.try_recv(), Some(PortMsg::Kill)));
    assert!(tcp.pc.try_recv().is_none());
}

#[tokio::test]
async fn listing_covers_both_transports_in_one_id_space() {
    let port = port();
    let mut tcp = Driven::open(&port, Transport::Tcp, "127.0.0.1:50000");
    let iser = Driven::open(&port, Transport::Iser, "127.0.0.2:50001");
    assert_ne!(tcp.pc.id(), iser.pc.id());
    tcp.login();

    let mut all = port.connections();
    all.sort_by_key(|c| c.conn_id);
    let got: Vec<(u64, Transport, SocketAddr, bool)> = all
        .iter()
        .map(|c| (c.conn_id, c.transport, c.peer, c.session.is_some()))
        .collect();
    assert_eq!(
        got,
        vec![
            (tcp.pc.id(), Transport::Tcp, addr("127.0.0.1:50000"), true),
            (
                iser.pc.id(),
                Transport::Iser,
                addr("127.0.0.2:50001"),
                false
            ),
        ]
    );

    // The control surface reaches both.
    assert!(port.logout(iser.pc.id()));
    assert_eq!(port.request_logout_all(), 2);
    let mut iser = iser;
    assert!(matches!(iser.pc.try_recv(), Some(PortMsg::RequestLogout)));
    assert!(matches!(iser.pc.try_recv(), Some(PortMsg::RequestLogout)));
    assert!(matches!(tcp.pc.try_recv(), Some(PortMsg::RequestLogout)));
    assert!(port.kill(tcp.pc.id()));
    assert!(matches!(tcp.pc.try_recv(), Some(PortMsg::Kill)));

    let gone = tcp.pc.id();
    drop(tcp);
    assert!(!port.kill(gone), "a closed connection is not listed");
    assert_eq!(port.connections().len(), 1);
    assert_eq!(
        port.sessions().lock().expect("table").len(),
        0,
        "its session went with it"
    );
}

#[tokio::test]
async fn stop_sessions_closes_what_does_not_log_out_and_stops_accepting() {
    let port = port();
    assert!(!port.is_stopping());
    let mut tcp = Driven::open(&port, Transport::Tcp, "127.0.0.1:50000");
    // A driver that acts on its messages: it ends on Kill.
    let driver = tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Some(msg) = tcp.pc.recv().await {
            let kill = matches!(msg, PortMsg::Kill);
            seen.push(msg);
            if kill {
                break;
            }
        }
        drop(tcp);
        seen
    });
    port.stop_sessions(Duration::ZERO).await;
    assert!(port.is_stopping());
    // Already stopping: returns at once.
    port.stopping().await;
    let seen = driver.await.expect("driver task");
    assert!(
        matches!(seen.first(), Some(PortMsg::RequestLogout)),
        "{seen:?}"
    );
    assert!(matches!(seen.last(), Some(PortMsg::Kill)), "{seen:?}");
    assert!(port.connections().is_empty());
}

#[tokio::test]
async fn caps_count_both_transports_and_logged_in_connections_leave_the_login_cap() {
    let port = port();
    port.set_limits(ConnLimits {
        max_connections: 3,
        max_per_address: 2,
        max_in_login: 2,
        max_in_login_per_address: 1,
    });
    let mut tcp = Driven::open(&port, Transport::Tcp, "127.0.0.1:50000");
    let _iser = Driven::open(&port, Transport::Iser, "127.0.0.2:50001");
    // One logging in from 127.0.0.2 over either transport: its share of
    // the login slots is taken.
    assert_eq!(
        port.admit(addr("127.0.0.2:1")).unwrap_err(),
        Refusal::InLoginPerAddress
    );
    // A driver reports full feature phase; the slot frees.
    tcp.login();
    tcp.pc.login_done();
    tcp.pc.login_done();
    let ip = addr("127.0.0.1:0").ip();
    assert_eq!(port.admitted_counts(ip), (2, 1, 1));
    let third = Driven::open(&port, Transport::Tcp, "127.0.0.1:50002");
    assert_eq!(port.admit(addr("127.0.0.4:1")).unwrap_err(), Refusal::Total);
    // A closed connection gives its place back.
    drop(third);
    drop(tcp);
    assert_eq!(port.admitted_counts(ip), (1, 1, 0));
    let _again = Driven::open(&port, Transport::Tcp, "127.0.0.1:50003");
}

/// A [`ReadyLink`] over one end of a Unix socket pair: what the TCP
/// driver does, on a socket the test holds the other end of.
struct PairLink {
    core: Connection,
    sock: std::os::unix::net::UnixStream,
    out: Vec<u8>,
    input_at: Option<Instant>,
}

impl ReadyLink for PairLink {
    fn core(&mut self) -> &mut Connection {
        &mut self.core
    }

    fn fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.sock)
    }

    fn send(&mut self) -> std::io::Result<()> {
        use std::io::Write;
        if let Some(segs) = self.core.poll_transmit() {
            for s in segs {
                self.out.extend_from_slice(&s);
            }
        }
        while !self.out.is_empty() {
            match (&self.sock).write(&self.out) {
                Ok(n) => drop(self.out.drain(..n)),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn output_pending(&self) -> bool {
        !self.out.is_empty()
    }

    fn output_full(&self) -> bool {
        false
    }

    fn finished(&mut self) -> bool {
        self.core.is_closing()
    }

    fn look(&mut self, _buf: &mut Vec<u8>) -> std::io::Result<(Got, bool)> {
        use std::io::Read;
        let mut buf = [0u8; 4096];
        match (&self.sock).read(&mut buf) {
            Ok(0) => Ok((Got::Eof, false)),
            Ok(n) => {
                let now = Instant::now();
                self.core.handle_input(&buf[..n], now);
                self.input_at = Some(now);
                Ok((Got::Input, n == buf.len()))
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok((Got::Nothing, false)),
            Err(e) => Err(e),
        }
    }

    fn take_input_at(&mut self) -> Option<Instant> {
        self.input_at.take()
    }

    fn fail(&mut self) {
        self.core.fail();
    }

    fn close(self: Box<Self>, _killed: bool) -> Option<Closing> {
        drop(self);
        None
    }
}

/// The test's end of a [`PairLink`]: sends a request, reads one reply.
fn exchange(sock: &mut std::os::unix::net::UnixStream, req: &Request) -> Vec<Reply> {
    use std::io::Write;
    sock.write_all(&req.encode(false, false)).expect("write");
    vec![read_reply(sock).expect("a reply")]
}

/// One whole PDU from `sock`, or `None` at end of stream.
fn read_reply(sock: &mut std::os::unix::net::UnixStream) -> Option<Reply> {
    use std::io::Read;
    let mut pdu = vec![0u8; 48];
    if sock.read_exact(&mut pdu).is_err() {
        return None;
    }
    let ahs = usize::from(pdu[4]) * 4;
    let data = (usize::from(pdu[5]) << 16 | usize::from(pdu[6]) << 8 | usize::from(pdu[7]))
        .next_multiple_of(4);
    pdu.resize(48 + ahs + data, 0);
    sock.read_exact(&mut pdu[48..])
        .expect("the rest of the PDU");
    Some(Reply::decode(&pdu, false, false).expect("a PDU").0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_reactor_serves_its_socket_and_ends_the_connection_on_kill() {
    let port = port();
    let reactors = PollReactors::start(1, None).expect("a reactor");
    let (mut mine, theirs) = std::os::unix::net::UnixStream::pair().expect("a socket pair");
    theirs.set_nonblocking(true).expect("non-blocking");
    mine.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("a read timeout");
    let d = Driven::open(&port, Transport::Tcp, "127.0.0.1:50000");
    let id = d.pc.id();
    reactors.spawn(move || {
        let link = PairLink {
            core: d.core,
            sock: theirs,
            out: Vec::new(),
            input_at: None,
        };
        Some((
            d.pc,
            Box::new(link) as Box<dyn ReadyLink>,
            tracing::Span::none(),
        ))
    });
    // Served by the reactor's thread: a login, then a ping answered.
    let tsih =
        tokio::task::block_in_place(|| login_with(Transport::Tcp, |req| exchange(&mut mine, req)));
    assert_ne!(tsih, 0);
    assert!(summary(&port, id).session.is_some());
    let ping = Request {
        header: RequestHeader::NopOut(NopOut {
            immediate: true,
            lun: 0,
            itt: 9,
            ttt: 0xffff_ffff,
            cmd_sn: 2,
            exp_stat_sn: 0,
        }),
        data: b"ping".to_vec(),
    };
    let replies = tokio::task::block_in_place(|| exchange(&mut mine, &ping));
    match replies.first() {
        Some(Reply::NopIn(n)) => assert_eq!(n.itt, 9),
        other => panic!("not a NOP-In: {other:?}"),
    }

    // A logout request from the port reaches the initiator (a message
    // from another thread wakes the reactor).
    // Parked by now (past any busy-poll).
    tokio::time::sleep(Duration::from_millis(50)).await;
    let asked = Instant::now();
    assert_eq!(port.request_logout_all(), 1);
    let r = tokio::task::block_in_place(|| read_reply(&mut mine));
    assert!(matches!(r, Some(Reply::AsyncMessage(_))), "{r:?}");
    // Not at the core's next timer (seconds away): at once.
    assert!(
        asked.elapsed() < Duration::from_millis(500),
        "{:?}",
        asked.elapsed()
    );

    // Killed: the reactor ends the connection, its socket closes and the
    // port forgets it.
    assert!(port.kill(id));
    let r = tokio::task::block_in_place(|| read_reply(&mut mine));
    assert!(r.is_none(), "the socket closes: {r:?}");
    let mut waited = 0;
    while !port.connections().is_empty() && waited < 100 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        waited += 1;
    }
    assert!(
        port.connections().is_empty(),
        "the port forgot the connection"
    );
    assert_eq!(port.sessions().lock().expect("table").len(), 0);
}
