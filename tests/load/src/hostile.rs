//! Hostile peers that run beside the paced load (`--hostile`), each kind
//! on its own thread until the run ends, so a soak shows what they cost
//! the legitimate sessions (their latency and errors) and the target (its
//! resident memory, with `--pid`):
//!
//! - `silent`: up to 300 TCP connections from 127.0.0.2 that never send a
//!   byte, reopened as the target closes them (the login-phase slots);
//! - `write-hold`: a logged-in session that sends 128 WRITE(16)s of
//!   32 MiB and answers every R2T but the last of each command (the data
//!   buffer budget and the Data-Out timeout), again when closed;
//! - `unread`: a logged-in session that sends immediate 64 KiB READs and
//!   never reads a byte of the answers (the output bound);
//! - `login-churn`: full logins and logouts back to back, each with a new
//!   initiator name.
//!
//! The peers use the project's raw test initiator, which panics when the
//! target closes a connection under it; such a panic ends one episode of
//! that peer (counted), never the run. Every loop ends at the run's end.

use std::io::{ErrorKind, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Once};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use clap::ValueEnum;
use rustgt_iscsi::pdu::{encode_lun, Reply};
use rustgt_test_initiator::pdu::{scsi_command, CommandIds};
use rustgt_test_initiator::{rw16, Closed, Session};
use serde::Serialize;

/// A kind of hostile peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Hostile {
    Silent,
    WriteHold,
    Unread,
    LoginChurn,
}

/// What one hostile peer did over the run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct HostileReport {
    pub kind: Hostile,
    /// Connections opened (silent), sessions logged in (the others).
    pub episodes: u64,
    /// Of those, how many the target closed (or refused) before the end.
    pub closed_by_target: u64,
}

/// The running peers; [`Peers::stop`] ends them and collects reports.
#[derive(Debug)]
pub struct Peers {
    stop: Arc<AtomicBool>,
    threads: Vec<(Hostile, JoinHandle<(u64, u64)>)>,
}

const SILENT: usize = 300;
const HOLD_LEN: u32 = 32 << 20;
const HOLD_WRITES: usize = 128;
const UNREAD_LEN: u32 = 64 << 10;

/// Starts one thread per kind against `target` at `portal`.
pub fn start(kinds: &[Hostile], portal: SocketAddr, target: &str) -> Peers {
    quiet_panics();
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for (i, &kind) in kinds.iter().enumerate() {
        let stop = Arc::clone(&stop);
        let target = target.to_owned();
        let h = std::thread::Builder::new()
            .name(format!("hostile-{i}"))
            .spawn(move || run(kind, portal, &target, &stop, i));
        if let Ok(h) = h {
            threads.push((kind, h));
        }
    }
    Peers { stop, threads }
}

impl Peers {
    /// Ends every peer (each within a few seconds) and reports.
    pub fn stop(self) -> Vec<HostileReport> {
        self.stop.store(true, Ordering::SeqCst);
        self.threads
            .into_iter()
            .map(|(kind, h)| {
                let (episodes, closed_by_target) = h.join().unwrap_or((0, 0));
                HostileReport {
                    kind,
                    episodes,
                    closed_by_target,
                }
            })
            .collect()
    }
}

/// The raw initiator's panics on a closed connection are expected here:
/// keep them off stderr for the hostile threads only.
fn quiet_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let hostile = std::thread::current()
                .name()
                .is_some_and(|n| n.starts_with("hostile-"));
            if !hostile {
                default(info);
            }
        }));
    });
}

fn run(kind: Hostile, portal: SocketAddr, target: &str, stop: &AtomicBool, i: usize) -> (u64, u64) {
    let episodes = AtomicU64::new(0);
    let closed = AtomicU64::new(0);
    let mut round = 0u32;
    while !stop.load(Ordering::SeqCst) {
        round = round.wrapping_add(1);
        let name = format!("iqn.2026-12.org.rustgt.hostile:{kind:?}-{i}-{round}").to_lowercase();
        let isid = [
            0x80,
            0x68,
            i as u8,
            (round >> 16) as u8,
            (round >> 8) as u8,
            round as u8,
        ];
        let episode = catch_unwind(AssertUnwindSafe(|| match kind {
            Hostile::Silent => silent(portal, stop, &episodes, &closed),
            Hostile::WriteHold => {
                let s = Session::login(portal, target, &name, isid);
                episodes.fetch_add(1, Ordering::Relaxed);
                write_hold(s, stop, &closed);
            }
            Hostile::Unread => {
                let s = Session::login(portal, target, &name, isid);
                episodes.fetch_add(1, Ordering::Relaxed);
                unread(s, stop, &closed);
            }
            Hostile::LoginChurn => {
                let s = Session::login(portal, target, &name, isid);
                episodes.fetch_add(1, Ordering::Relaxed);
                s.logout();
            }
        }));
        if episode.is_err() {
            // The target closed or refused it under the initiator.
            closed.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    (episodes.into_inner(), closed.into_inner())
}

/// Keeps up to [`SILENT`] silent connections open from 127.0.0.2,
/// reopening those the target closed, once a second.
fn silent(portal: SocketAddr, stop: &AtomicBool, episodes: &AtomicU64, closed: &AtomicU64) {
    let mut conns: Vec<TcpStream> = Vec::with_capacity(SILENT);
    while !stop.load(Ordering::SeqCst) {
        conns.retain(|c| {
            let mut b = [0u8; 1];
            match c.peek(&mut b) {
                Ok(0) => {
                    closed.fetch_add(1, Ordering::Relaxed);
                    false
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => true,
                Ok(_) => true,
                Err(_) => {
                    closed.fetch_add(1, Ordering::Relaxed);
                    false
                }
            }
        });
        while conns.len() < SILENT && !stop.load(Ordering::SeqCst) {
            let Ok(c) = connect_from(Ipv4Addr::new(127, 0, 0, 2), portal) else {
                // Refused (over a cap): try again next round.
                closed.fetch_add(1, Ordering::Relaxed);
                break;
            };
            let _ = c.set_nonblocking(true);
            episodes.fetch_add(1, Ordering::Relaxed);
            conns.push(c);
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Sits on 128 writes of 32 MiB, answering every R2T but the last of each,
/// until the target closes the connection or the run ends.
fn write_hold(mut s: Session, stop: &AtomicBool, closed: &AtomicU64) {
    let data = vec![0u8; HOLD_LEN as usize];
    for _ in 0..HOLD_WRITES {
        s.start_write(0, &rw16(0x8a, 0, HOLD_LEN / 512), HOLD_LEN);
    }
    let raw_lun = encode_lun(0);
    while !stop.load(Ordering::SeqCst) {
        match s.wire().try_recv(Duration::from_millis(200)) {
            Ok(Some(Reply::R2t(r))) => {
                if u64::from(r.buffer_offset) + u64::from(r.desired_len) < u64::from(HOLD_LEN) {
                    s.answer_r2t(&r, raw_lun, &data);
                }
            }
            Ok(_) => {}
            Err(Closed) => {
                closed.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
    }
}

/// Sends immediate 64 KiB READs, 32 every 2 ms, and never reads, until
/// the target stops taking them; then holds the connection unread.
fn unread(mut s: Session, stop: &AtomicBool, closed: &AtomicU64) {
    let Ok(mut sock) = s.wire().stream().try_clone() else {
        return;
    };
    let _ = sock.set_write_timeout(Some(Duration::from_secs(1)));
    let cdb = rw16(0x88, 0, UNREAD_LEN / 512);
    let first_sn = s.cmd_sn();
    let mut sent = 0u32;
    let mut blocked_since: Option<Instant> = None;
    while !stop.load(Ordering::SeqCst) {
        if blocked_since.is_some() {
            // Held: check now and then that the target still has it.
            let mut b = [0u8; 1];
            let _ = sock.set_read_timeout(Some(Duration::from_millis(200)));
            if let Ok(0) = sock.peek(&mut b) {
                closed.fetch_add(1, Ordering::Relaxed);
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
            continue;
        }
        let ids = CommandIds {
            lun: encode_lun(0),
            itt: 0x4000_0000 | sent,
            cmd_sn: first_sn.wrapping_add(sent),
            exp_stat_sn: 0,
            read: true,
            write: false,
            final_bit: true,
            expected_data_len: UNREAD_LEN,
        };
        let mut pdu = scsi_command(ids, &cdb, Vec::new()).encode(false, false);
        if let Some(b) = pdu.first_mut() {
            *b |= 0x40;
        }
        match sock.write_all(&pdu) {
            Ok(()) => {
                sent = sent.wrapping_add(1);
                if sent % 32 == 0 {
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                blocked_since = Some(Instant::now());
            }
            Err(_) => {
                closed.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
    }
}

/// A TCP connection to `portal` from the local address `source`.
fn connect_from(source: Ipv4Addr, portal: SocketAddr) -> std::io::Result<TcpStream> {
    use socket2::{Domain, Socket, Type};
    let sock = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    sock.bind(&SocketAddr::from((source, 0)).into())?;
    sock.connect_timeout(&portal.into(), Duration::from_secs(2))?;
    Ok(sock.into())
}
