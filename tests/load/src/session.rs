//! One session's thread: log in, then send commands on the schedule and
//! read their answers on the same socket, waiting for "input or the next
//! due time" with a nanosecond timeout (`ppoll`).

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use nix::poll::{PollFd, PollFlags};
use nix::sys::time::TimeSpec;
use rustgt_iscsi::pdu::{encode_lun, DataOut, PduError, Reply};
use rustgt_test_initiator::pdu::{data_out, scsi_command, CommandIds};
use rustgt_test_initiator::{nop_out, rw16, RawSession, Session, READ_16, WRITE_16};

use crate::schedule::{client_lateness, Schedule};

/// How long the end of a run waits for commands still in flight.
pub const DRAIN: Duration = Duration::from_secs(5);
/// The longest single wait, so a session notices the end of the run.
const MAX_WAIT: Duration = Duration::from_millis(50);

/// What every session of a run does.
#[derive(Debug, Clone)]
pub struct Job {
    pub portal: SocketAddr,
    pub target: String,
    pub lun: u64,
    /// Commands per second per session; 0: unpaced.
    pub rate: f64,
    pub qd: usize,
    /// Bytes per command.
    pub bs: u32,
    /// Percentage of reads (100: reads only, 0: writes only).
    pub read_pct: u8,
    pub random: bool,
}

/// When the run's phases begin and end, the same for every session.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub start: Instant,
    /// Commands due before this are warm-up and not counted.
    pub measure_from: Instant,
    /// No command is sent from here on.
    pub end: Instant,
}

/// What one session saw in the measured window.
#[derive(Debug)]
pub struct Outcome {
    /// Latency from when the command could have been sent (its due time,
    /// or later when the queue was full) to its status, in nanoseconds.
    pub latency: Histogram<u64>,
    /// The client's own lateness in sending ([`client_lateness`]), ns.
    pub lateness: Histogram<u64>,
    pub completed: u64,
    pub bytes: u64,
    /// Commands due in the window that could not be sent before its end.
    pub unsent: u64,
    /// Errors by kind (status and sense, rejects, connection loss).
    pub errors: BTreeMap<String, u64>,
}

impl Outcome {
    fn new() -> Outcome {
        Outcome {
            latency: new_histogram(),
            lateness: new_histogram(),
            completed: 0,
            bytes: 0,
            unsent: 0,
            errors: BTreeMap::new(),
        }
    }

    fn error(&mut self, what: impl Into<String>) {
        *self.errors.entry(what.into()).or_insert(0) += 1;
    }
}

/// A histogram of nanoseconds from 1 ns to 100 s, 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 100_000_000_000, 3)
        .unwrap_or_else(|_| Histogram::new(3).unwrap_or_else(|_| unreachable!("3 digits is valid")))
}

/// A logged-in session ready to run: its connection, and the LUN's size.
#[derive(Debug)]
pub struct Ready {
    raw: RawSession,
    blocks: u64,
    block_size: u32,
}

/// Connects and logs in as `initiator`, then reads the LUN's capacity.
pub fn login(job: &Job, initiator: &str, isid: [u8; 6]) -> Result<Ready, String> {
    let sock = TcpStream::connect_timeout(&job.portal, Duration::from_secs(5))
        .map_err(|e| format!("connect {}: {e}", job.portal))?;
    let portal = job.portal;
    let target = job.target.clone();
    let initiator = initiator.to_owned();
    let lun = job.lun;
    // The test initiator panics on a refused login; keep that inside.
    let joined = std::thread::spawn(move || {
        let wire = rustgt_test_initiator::Wire::from_stream(sock);
        let mut s = Session::login_on(wire, &target, &initiator, isid);
        s.clear_unit_attentions(lun);
        let cap = s.command(lun, &read_capacity16(), &[], 32);
        (s, cap)
    })
    .join();
    let (s, cap) = joined.map_err(|_| format!("login to {portal} failed (see above)"))?;
    if !cap.is_good() {
        return Err(format!("READ CAPACITY(16) failed: {:?}", cap.sense_code()));
    }
    let last: [u8; 8] = cap
        .data
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or("short READ CAPACITY data")?;
    let bs: [u8; 4] = cap
        .data
        .get(8..12)
        .and_then(|b| b.try_into().ok())
        .ok_or("short READ CAPACITY data")?;
    Ok(Ready {
        raw: s.into_raw(),
        blocks: u64::from_be_bytes(last).saturating_add(1),
        block_size: u32::from_be_bytes(bs).max(1),
    })
}

fn read_capacity16() -> [u8; 16] {
    let mut cdb = [0u8; 16];
    cdb[0] = 0x9e;
    cdb[1] = 0x10;
    cdb[13] = 32;
    cdb
}

/// A command in flight.
#[derive(Debug, Clone, Copy)]
struct InFlight {
    /// When it could have been sent: due, and a queue slot free.
    from: Instant,
    write: bool,
    counted: bool,
}

/// Runs session `index` on the schedule until the window ends, then waits
/// (bounded) for what is in flight.
pub fn run(job: &Job, mut ready: Ready, index: usize, sessions: usize, w: Window) -> Outcome {
    let mut out = Outcome::new();
    let raw = &mut ready.raw;
    if raw.sock.set_nonblocking(true).is_err() {
        out.error("socket setup");
        return out;
    }
    let _ = raw.sock.set_nodelay(true);
    let blocks_per_io = u64::from(job.bs.div_ceil(ready.block_size)).max(1);
    let io_blocks = u32::try_from(blocks_per_io).unwrap_or(u32::MAX);
    let slots = (ready.blocks / blocks_per_io).max(1);
    let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ (index as u64 + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let mut seq = (slots / sessions.max(1) as u64) * index as u64;
    let mut sched = Schedule::new(
        w.start,
        Schedule::phase(index, sessions, job.rate),
        job.rate,
    );
    let zeros =
        vec![0u8; usize::try_from(u64::from(io_blocks) * u64::from(ready.block_size)).unwrap_or(0)];
    let raw_lun = encode_lun(job.lun);
    let mut inflight: HashMap<u32, InFlight> = HashMap::with_capacity(job.qd * 2);
    let mut slot_free_since = w.start;
    let mut max_cmd_sn = raw.cmd_sn.wrapping_add(u32::try_from(job.qd).unwrap_or(1));
    let mut chunk = vec![0u8; 256 * 1024];
    let mut tx: Vec<u8> = Vec::with_capacity(64 * 1024);
    loop {
        let now = Instant::now();
        if now >= w.end {
            if inflight.is_empty() {
                break;
            }
            if now >= w.end + DRAIN {
                let lost = inflight.values().filter(|f| f.counted).count();
                for _ in 0..lost {
                    out.error("no answer within the drain time");
                }
                break;
            }
        }
        // Send every command that is due, as far as the queue depth and
        // the target's command window allow.
        while now < w.end
            && sched.due(now)
            && inflight.len() < job.qd
            && serial_le(raw.cmd_sn, max_cmd_sn)
        {
            let due = sched.next_due(now);
            sched.advance();
            let sent = Instant::now();
            let counted = due >= w.measure_from;
            let late = client_lateness(due, slot_free_since, sent);
            if counted {
                let _ = out.lateness.record(nanos(late).max(1));
            }
            // Latency counts from when the command could have been sent
            // (due, and a queue slot free): a full queue is the target's
            // doing and counts; the client's own lateness (a timer that
            // woke it late) does not.
            let from = sent.checked_sub(late).unwrap_or(sent);
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let slot = if job.random {
                rng % slots
            } else {
                seq = (seq + 1) % slots;
                seq
            };
            let write = u64::from(job.read_pct) <= (rng >> 8) % 100;
            let itt = raw.next_itt;
            raw.next_itt = raw.next_itt.wrapping_add(1);
            if raw.next_itt == u32::MAX {
                raw.next_itt = 1;
            }
            let len = u32::try_from(zeros.len()).unwrap_or(u32::MAX);
            let immediate = if write {
                raw.immediate
                    .map_or(0, |b| zeros.len().min(b).min(raw.max_send))
            } else {
                0
            };
            let ids = CommandIds {
                lun: raw_lun,
                itt,
                cmd_sn: raw.cmd_sn,
                exp_stat_sn: raw.exp_stat_sn,
                read: !write,
                write,
                final_bit: true,
                expected_data_len: len,
            };
            let cdb = rw16(
                if write { WRITE_16 } else { READ_16 },
                slot * blocks_per_io,
                io_blocks,
            );
            let data = zeros.get(..immediate).unwrap_or_default().to_vec();
            tx.extend_from_slice(&scsi_command(ids, &cdb, data).encode(false, false));
            raw.cmd_sn = raw.cmd_sn.wrapping_add(1);
            inflight.insert(
                itt,
                InFlight {
                    from,
                    write,
                    counted,
                },
            );
            if inflight.len() >= job.qd {
                slot_free_since = w.end + DRAIN;
            }
        }
        if !tx.is_empty() {
            if let Err(e) = send_all(&mut raw.sock, &tx) {
                out.error(format!("send: {e}"));
                break;
            }
            tx.clear();
        }
        // Wait for input, or until the next command is due.
        let now = Instant::now();
        let mut wait = MAX_WAIT;
        if now < w.end && inflight.len() < job.qd {
            wait = wait.min(sched.next_due(now).saturating_duration_since(now));
        }
        if !wait.is_zero() {
            let mut fds = [PollFd::new(raw.sock.as_fd(), PollFlags::POLLIN)];
            let _ = nix::poll::ppoll(&mut fds, Some(TimeSpec::from_duration(wait)), None);
        }
        // Read what came and handle every whole PDU.
        loop {
            match raw.sock.read(&mut chunk) {
                Ok(0) => {
                    out.error("connection closed by the target");
                    return out;
                }
                Ok(n) => raw
                    .buf
                    .extend_from_slice(chunk.get(..n).unwrap_or_default()),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    out.error(format!("receive: {e}"));
                    return out;
                }
            }
        }
        let mut used_total = 0;
        loop {
            let rest = raw.buf.get(used_total..).unwrap_or_default();
            let (reply, used) = match Reply::decode(rest, false, false) {
                Ok(r) => r,
                Err(PduError::Incomplete(_)) => break,
                Err(e) => {
                    out.error(format!("undecodable PDU: {e}"));
                    return out;
                }
            };
            used_total += used;
            let done = match reply {
                Reply::DataIn(d) => {
                    if d.has_status {
                        raw.exp_stat_sn = d.stat_sn.wrapping_add(1);
                        max_cmd_sn = d.max_cmd_sn;
                        Some((d.itt, d.status, 0x00, Vec::new()))
                    } else {
                        None
                    }
                }
                Reply::ScsiResponse(r) => {
                    raw.exp_stat_sn = r.stat_sn.wrapping_add(1);
                    max_cmd_sn = r.max_cmd_sn;
                    Some((r.itt, r.status, r.response, r.sense))
                }
                Reply::R2t(r2t) => {
                    max_cmd_sn = r2t.max_cmd_sn;
                    let start = usize::try_from(r2t.buffer_offset).unwrap_or(usize::MAX);
                    let len = usize::try_from(r2t.desired_len).unwrap_or(0);
                    let wanted = zeros
                        .get(start..start.saturating_add(len))
                        .unwrap_or_default();
                    let step = raw.max_send.max(512);
                    let n = wanted.len().div_ceil(step);
                    for (sn, piece) in wanted.chunks(step).enumerate() {
                        let header = DataOut {
                            final_bit: sn + 1 == n,
                            lun: raw_lun,
                            itt: r2t.itt,
                            ttt: r2t.ttt,
                            exp_stat_sn: raw.exp_stat_sn,
                            data_sn: u32::try_from(sn).unwrap_or(u32::MAX),
                            buffer_offset: u32::try_from(start + sn * step).unwrap_or(u32::MAX),
                        };
                        tx.extend_from_slice(
                            &data_out(header, piece.to_vec()).encode(false, false),
                        );
                    }
                    None
                }
                Reply::NopIn(nop) => {
                    max_cmd_sn = nop.max_cmd_sn;
                    if nop.ttt != 0xffff_ffff {
                        tx.extend_from_slice(&nop_out(
                            nop.lun,
                            0xffff_ffff,
                            nop.ttt,
                            raw.cmd_sn,
                            raw.exp_stat_sn,
                        ));
                    }
                    None
                }
                Reply::Reject(_) => {
                    out.error("reject");
                    None
                }
                Reply::AsyncMessage(_) => None,
                _ => {
                    out.error("unexpected PDU");
                    None
                }
            };
            if let Some((itt, status, response, sense)) = done {
                let Some(f) = inflight.remove(&itt) else {
                    out.error("answer to an unknown task");
                    continue;
                };
                let at = Instant::now();
                if inflight.len() + 1 == job.qd {
                    slot_free_since = at;
                }
                if !f.counted {
                    continue;
                }
                if response != 0 {
                    out.error("iSCSI target failure");
                } else if status != 0 {
                    out.error(status_text(status, &sense, f.write));
                } else {
                    out.completed += 1;
                    out.bytes += zeros.len() as u64;
                    let _ = out
                        .latency
                        .record(nanos(at.saturating_duration_since(f.from)).max(1));
                }
            }
        }
        raw.buf.drain(..used_total.min(raw.buf.len()));
        if !tx.is_empty() {
            if let Err(e) = send_all(&mut raw.sock, &tx) {
                out.error(format!("send: {e}"));
                break;
            }
            tx.clear();
        }
        if Instant::now() >= w.end && !sched.paced() && inflight.is_empty() {
            break;
        }
    }
    // Commands that were due in the window but never sent (the queue
    // stayed full): the offered load the target did not take.
    if sched.paced() {
        let due_by_end = sched_due_count(&sched, w);
        out.unsent = due_by_end;
    }
    out
}

/// Due commands of the measured window the schedule never reached.
fn sched_due_count(sched: &Schedule, w: Window) -> u64 {
    let mut s = *sched;
    let mut n = 0u64;
    while s.next_due(w.end) < w.end && n < 10_000_000 {
        if s.next_due(w.end) >= w.measure_from {
            n += 1;
        }
        s.advance();
    }
    n
}

fn status_text(status: u8, sense: &[u8], write: bool) -> String {
    let r = rustgt_test_initiator::CmdResult {
        status,
        sense: sense.to_vec(),
        data: Vec::new(),
    };
    let op = if write { "write" } else { "read" };
    match r.sense_code() {
        Some((k, asc, ascq)) => {
            format!("{op}: status {status:#04x} sense {k:x}/{asc:02x}/{ascq:02x}")
        }
        None => format!("{op}: status {status:#04x}"),
    }
}

/// Writes all of `bytes` to a non-blocking socket, waiting (bounded) for
/// room.
fn send_all(sock: &mut TcpStream, mut bytes: &[u8]) -> std::io::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !bytes.is_empty() {
        match sock.write(bytes) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = bytes.get(n..).unwrap_or_default(),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    return Err(std::io::ErrorKind::TimedOut.into());
                }
                let mut fds = [PollFd::new(sock.as_fd(), PollFlags::POLLOUT)];
                let _ = nix::poll::ppoll(
                    &mut fds,
                    Some(TimeSpec::from_duration(Duration::from_millis(50))),
                    None,
                );
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// a <= b in RFC 1982 serial arithmetic (32 bits).
fn serial_le(a: u32, b: u32) -> bool {
    a == b || (b.wrapping_sub(a) as i32) > 0
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
