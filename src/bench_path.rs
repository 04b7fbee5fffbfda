//! `rustgt bench path`: what one command costs the daemon's command path
//! on the CPU, without sockets, wake-ups or the reactor's runtime.
//!
//! The daemon's own start-up ([`Runtime::start`]) builds a target with one
//! LUN (null or RAM) behind the port, as `rustgt` would from a config
//! file. One connection is then driven on this thread as the TCP driver's
//! turn drives it: a command's bytes go to the sans-I/O core, its events
//! through [`PortConn::on_event_at`], the port's ring batch ends, the
//! response goes back to the core and its segments are taken for the
//! socket. Only the socket's system calls and the wait for them are left
//! out, so the figure is the user-space part of a paced row's CPU per I/O,
//! measured on a busy thread where a profile of it is exact (a sampling
//! profiler attributes a sleeping reactor's short runs poorly here).
//!
//! Every command is a READ(10) or WRITE(10) (its data as immediate data)
//! of `--bs` bytes at a pseudo-random LBA. Before the timed rounds, a few
//! commands' replies are decoded and checked (GOOD status, the whole data
//! length); every timed command must then produce as many bytes of
//! replies as those did, or the run fails.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Args;
use rustgt_iscsi::pdu::{LoginStatus, Reply, Stage};
use rustgt_iscsi::Connection;
use rustgt_port::{ConnInfo, Port, PortConn, PortMsg, Transport};
use rustgt_test_initiator::pdu::{login_request, scsi_command, CommandIds, LoginIds};
use serde::Serialize;

use crate::bench::BenchError;
use crate::config::Overrides;
use crate::control::runtime::{ConfigSource, Runtime};

const TARGET: &str = "iqn.2026-12.org.rustgt:bench-path";
const INITIATOR: &str = "iqn.2026-12.org.rustgt:bench-path-initiator";
/// The LUN's size: 1 GiB null, 64 MiB of RAM.
const NULL_BYTES: u64 = 1 << 30;
const RAM_BYTES: u64 = 64 << 20;
/// Commands whose replies are decoded and checked before the timed rounds.
const CHECKED: u32 = 16;
/// How long one command may wait for a LUN worker (a command that does
/// not complete on this thread) before the run fails.
const WORKER_WAIT: Duration = Duration::from_secs(10);

/// `rustgt bench path`'s options.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct PathArgs {
    /// The LUN's backing: "null" (reads return zeros, writes are dropped)
    /// or "ram".
    #[arg(long, value_name = "KIND", default_value = "null", value_parser = ["null", "ram"])]
    pub backing: String,
    /// "read" (READ(10)) or "write" (WRITE(10), data as immediate data).
    #[arg(long, value_name = "RW", default_value = "read", value_parser = ["read", "write"])]
    pub rw: String,
    /// Bytes per command: a multiple of 512, 512..=65536.
    #[arg(long, value_name = "BYTES", default_value_t = 4096)]
    pub bs: u32,
    /// Commands per round, 1..=10000000.
    #[arg(long, value_name = "N", default_value_t = 200_000)]
    pub commands: u32,
    /// Sleep this many microseconds before each command, 0..=100000, as a
    /// reactor sleeps between a paced load's commands: each command then
    /// finds the caches as the kernel and other tasks left them, and is
    /// timed alone (the sleeps are not counted). 0: back to back.
    #[arg(long, value_name = "US", default_value_t = 0)]
    pub gap_us: u32,
    /// Timed rounds, 1..=100; the report gives each round's figure and
    /// their median.
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub rounds: u32,
    /// One JSON object instead of the text report.
    #[arg(long)]
    pub json: bool,
}

/// What `rustgt bench path` measured.
#[derive(Debug, Clone, Serialize)]
pub struct PathReport {
    pub backing: String,
    pub rw: String,
    pub bs: u32,
    pub commands: u32,
    pub gap_us: u32,
    /// Nanoseconds per command of each round, in the order run.
    pub ns_per_command: Vec<f64>,
    pub median_ns: f64,
    pub min_ns: f64,
    /// Commands that did not complete on this thread (handed to the LUN's
    /// workers and waited for); 0 where the LUN runs them to completion.
    pub off_thread: u64,
    /// Bytes of replies per command (every command's the same).
    pub reply_bytes: usize,
}

fn invalid(e: impl std::fmt::Display) -> BenchError {
    BenchError::Invalid(e.to_string())
}

fn check(a: &PathArgs) -> Result<(), BenchError> {
    if a.bs == 0 || a.bs % 512 != 0 || a.bs > 65536 {
        return Err(invalid(format!(
            "--bs {}: a multiple of 512 from 512 to 65536",
            a.bs
        )));
    }
    if !(1..=10_000_000).contains(&a.commands) {
        return Err(invalid(format!("--commands {}: 1..=10000000", a.commands)));
    }
    if a.gap_us > 100_000 {
        return Err(invalid(format!("--gap-us {}: 0..=100000", a.gap_us)));
    }
    if !(1..=100).contains(&a.rounds) {
        return Err(invalid(format!("--rounds {}: 1..=100", a.rounds)));
    }
    Ok(())
}

/// Runs the benchmark and prints its report.
pub fn run(a: &PathArgs) -> Result<(), BenchError> {
    check(a)?;
    // Start-up uses `block_in_place`, which needs the multi-threaded
    // runtime; the commands run on this thread, in `block_on`.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(invalid)?;
    let report = rt.block_on(measure(a))?;
    if a.json {
        println!("{}", serde_json::to_string(&report).map_err(invalid)?);
    } else {
        print!("{}", render(&report));
    }
    Ok(())
}

fn render(r: &PathReport) -> String {
    let rounds: Vec<String> = r
        .ns_per_command
        .iter()
        .map(|ns| format!("{ns:.0}"))
        .collect();
    format!(
        "command path, {} LUN, {} of {} B, {} commands a round{}, on one thread without sockets\n\
         ns per command: median {:.0}, min {:.0} (rounds: {})\n\
         replies {} B per command; {} command(s) left the thread\n",
        r.backing,
        r.rw,
        r.bs,
        r.commands,
        if r.gap_us == 0 {
            String::from(", back to back")
        } else {
            format!(", {} µs asleep before each", r.gap_us)
        },
        r.median_ns,
        r.min_ns,
        rounds.join(" "),
        r.reply_bytes,
        r.off_thread,
    )
}

fn config_text(a: &PathArgs, dir: &std::path::Path) -> String {
    let size = if a.backing == "ram" {
        RAM_BYTES
    } else {
        NULL_BYTES
    };
    format!(
        "data_dir = {dir:?}\npersist = false\n\
         [[targets]]\niqn = \"{TARGET}\"\nportals = [\"127.0.0.1:0\"]\n\
         [[targets.luns]]\nid = 0\nbackstore = \"{}\"\nsize = \"{size}\"\n\
         serial = \"benchpath\"\nwwn = \"naa.60014050000000000000000000000001\"\n",
        a.backing,
        dir = dir.display().to_string(),
    )
}

async fn measure(a: &PathArgs) -> Result<PathReport, BenchError> {
    let dir = tempfile::tempdir().map_err(|source| BenchError::Io {
        what: "cannot make a data directory in",
        path: std::env::temp_dir(),
        source,
    })?;
    let file = dir.path().join("rustgt.toml");
    let cfg = crate::config::load_text(&file, config_text(a, dir.path()), &Overrides::default())
        .map_err(invalid)?;
    let (fenced, _fenced_rx) = tokio::sync::mpsc::unbounded_channel();
    let source = ConfigSource {
        file: None,
        overrides: Overrides::default(),
        persist: false,
    };
    let rt = Runtime::start(cfg, source, fenced).await.map_err(invalid)?;
    let port = Arc::clone(rt.port());
    // The connection comes in on the portal the target was bound to.
    let local = rt
        .portals()
        .first()
        .copied()
        .ok_or_else(|| invalid("the target has no portal"))?;
    let mut d = Driven::open(&port, local)?;
    d.login().await?;
    let blocks = u64::from(a.bs / 512);
    let lun_blocks = if a.backing == "ram" {
        RAM_BYTES
    } else {
        NULL_BYTES
    } / 512;
    let mut cmd = Command::new(a, d.cmd_sn, d.exp_stat_sn);
    let mut rng = rustgt_load::schedule::Rng::new(1);
    let mut next_lba = move || u32::try_from(rng.below(lun_blocks / blocks) * blocks).unwrap_or(0);
    // The checked commands: their replies decoded, their size learnt.
    let mut reply_bytes = None;
    for _ in 0..CHECKED {
        cmd.next(next_lba());
        let n = d.run(&cmd.pdu).await?;
        d.check_replies(a, cmd.itt)?;
        match reply_bytes {
            None => reply_bytes = Some(n),
            Some(m) if m != n => {
                return Err(invalid(format!(
                    "replies of {n} B where an earlier command's were {m} B"
                )))
            }
            Some(_) => {}
        }
    }
    let reply_bytes = reply_bytes.unwrap_or(0);
    let mut ns_per_command = Vec::new();
    for _ in 0..a.rounds {
        let mut total = 0usize;
        let busy = if a.gap_us == 0 {
            let start = Instant::now();
            for _ in 0..a.commands {
                cmd.next(next_lba());
                total += d.run(&cmd.pdu).await?;
                d.out.clear();
            }
            start.elapsed()
        } else {
            let gap = Duration::from_micros(u64::from(a.gap_us));
            let mut busy = Duration::ZERO;
            for _ in 0..a.commands {
                std::thread::sleep(gap);
                let start = Instant::now();
                cmd.next(next_lba());
                total += d.run(&cmd.pdu).await?;
                d.out.clear();
                busy += start.elapsed();
            }
            busy
        };
        let ns = busy.as_nanos() as f64 / f64::from(a.commands);
        let expected = reply_bytes.saturating_mul(a.commands as usize);
        if total != expected {
            return Err(invalid(format!(
                "{total} B of replies in a round where {expected} B were due"
            )));
        }
        ns_per_command.push(ns);
    }
    let mut sorted = ns_per_command.clone();
    sorted.sort_by(f64::total_cmp);
    let median_ns = sorted.get(sorted.len() / 2).copied().unwrap_or(0.0);
    let min_ns = sorted.first().copied().unwrap_or(0.0);
    let off_thread = d.off_thread;
    drop(d);
    port.shutdown(Duration::from_secs(5)).await;
    Ok(PathReport {
        backing: a.backing.clone(),
        rw: a.rw.clone(),
        bs: a.bs,
        commands: a.commands,
        gap_us: a.gap_us,
        ns_per_command,
        median_ns,
        min_ns,
        off_thread,
        reply_bytes,
    })
}

/// A login key and its value.
type Key = (&'static str, &'static str);

/// The one connection, driven as the TCP driver's turn drives it.
struct Driven {
    pc: PortConn,
    core: Connection,
    /// The segments a turn took for the socket.
    out: VecDeque<Bytes>,
    cmd_sn: u32,
    exp_stat_sn: u32,
    off_thread: u64,
}

impl Driven {
    fn open(port: &Arc<Port>, local: SocketAddr) -> Result<Driven, BenchError> {
        let peer: SocketAddr = ([127, 0, 0, 1], 50_000).into();
        let admitted = port
            .admit(peer)
            .map_err(|r| invalid(format!("connection refused: {r:?}")))?;
        let pc = port.open(ConnInfo {
            transport: Transport::Tcp,
            peer,
            local,
            probe: None,
            admitted,
        });
        let setup = pc
            .setup(local.to_string(), peer.to_string())
            .map_err(invalid)?;
        let core = Connection::new(pc.config(), pc.sessions(), setup, Instant::now());
        Ok(Driven {
            pc,
            core,
            out: VecDeque::new(),
            cmd_sn: 1,
            exp_stat_sn: 0,
            off_thread: 0,
        })
    }

    /// One turn for `pdu`'s bytes, as the TCP link and the port's turn
    /// run it (a command the LUN hands to its workers is waited for);
    /// the bytes of replies it produced, left in `out`.
    async fn run(&mut self, pdu: &[u8]) -> Result<usize, BenchError> {
        let now = Instant::now();
        self.core.handle_input(pdu, now);
        loop {
            // No ring: null and RAM LUNs serve every command inline.
            while let Some(ev) = self.core.poll_event() {
                if let Some(resp) = self.pc.on_event_at(ev, now, None) {
                    self.core.complete(resp);
                }
            }
            self.pc.end_ring_batch(None);
            while let Some(msg) = self.pc.try_recv() {
                self.on_msg(msg);
            }
            if self.core.in_flight() == 0 {
                break;
            }
            self.off_thread += 1;
            match tokio::time::timeout(WORKER_WAIT, self.pc.recv()).await {
                Ok(Some(msg)) => self.on_msg(msg),
                _ => {
                    return Err(invalid(
                        "a command handed to the LUN's workers never completed",
                    ))
                }
            }
        }
        let before = self.out.len();
        self.core.transmit_into(&mut self.out);
        Ok(self.out.range(before..).map(Bytes::len).sum())
    }

    fn on_msg(&mut self, msg: PortMsg) {
        if let PortMsg::Done(resp) = msg {
            self.core.complete(resp);
        }
    }

    /// The replies in `out`, decoded; `out` is emptied.
    fn replies(&mut self) -> Result<Vec<Reply>, BenchError> {
        let wire: Vec<u8> = self.out.drain(..).flat_map(|b| b.to_vec()).collect();
        let mut replies = Vec::new();
        let mut rest = wire.as_slice();
        while !rest.is_empty() {
            let (r, n) = Reply::decode(rest, false, false).map_err(invalid)?;
            replies.push(r);
            rest = rest.get(n..).unwrap_or_default();
        }
        Ok(replies)
    }

    /// A Normal session with no authentication, immediate data on.
    async fn login(&mut self) -> Result<(), BenchError> {
        let steps: [(Stage, Stage, &[Key]); 2] = [
            (
                Stage::SECURITY,
                Stage::OPERATIONAL,
                &[
                    ("InitiatorName", INITIATOR),
                    ("TargetName", TARGET),
                    ("SessionType", "Normal"),
                    ("AuthMethod", "None"),
                ],
            ),
            (
                Stage::OPERATIONAL,
                Stage::FULL_FEATURE,
                &[
                    ("HeaderDigest", "None"),
                    ("DataDigest", "None"),
                    ("ImmediateData", "Yes"),
                    ("MaxRecvDataSegmentLength", "262144"),
                ],
            ),
        ];
        let mut tsih = 0;
        for (csg, nsg, keys) in steps {
            let ids = LoginIds {
                isid: [0x80, 0, 0, 0, 0, 1],
                tsih: 0,
                itt: 1,
                cid: 1,
                cmd_sn: self.cmd_sn,
                exp_stat_sn: self.exp_stat_sn,
            };
            let pdu = login_request(ids, csg, nsg, true, keys).encode(false, false);
            self.run(&pdu).await?;
            let reply = self.replies()?.into_iter().next();
            let Some(Reply::LoginResponse(lr)) = reply else {
                return Err(invalid(format!("login: no login response ({reply:?})")));
            };
            if lr.status != LoginStatus::SUCCESS {
                return Err(invalid(format!("login refused: {:?}", lr.status)));
            }
            self.exp_stat_sn = lr.stat_sn.wrapping_add(1);
            self.cmd_sn = lr.exp_cmd_sn;
            tsih = lr.tsih;
        }
        if tsih == 0 {
            return Err(invalid("login: no session"));
        }
        Ok(())
    }

    /// Checks the replies in `out` to command `itt`: GOOD, with the whole
    /// data of a read.
    fn check_replies(&mut self, a: &PathArgs, itt: u32) -> Result<(), BenchError> {
        let mut data = 0usize;
        let mut status = None;
        for r in self.replies()? {
            match r {
                Reply::DataIn(d) if d.itt == itt => {
                    data += d.data.len();
                    if d.has_status {
                        status = Some(d.status);
                    }
                }
                Reply::ScsiResponse(s) if s.itt == itt => status = Some(s.status),
                other => return Err(invalid(format!("unexpected reply {other:?}"))),
            }
        }
        let want = if a.rw == "read" { a.bs as usize } else { 0 };
        match status {
            Some(0) if data == want => Ok(()),
            _ => Err(invalid(format!(
                "command {itt}: status {status:?} with {data} B of data, not GOOD with {want} B"
            ))),
        }
    }
}

/// The command PDU, encoded once and renumbered in place for each command.
struct Command {
    pdu: Vec<u8>,
    itt: u32,
    cmd_sn: u32,
    exp_stat_sn: u32,
}

/// Where the BHS holds what changes from command to command
/// (RFC 7143 §11.3): the ITT, CmdSN, ExpStatSN and the CDB's LBA.
const ITT_AT: usize = 16;
const CMD_SN_AT: usize = 24;
const EXP_STAT_SN_AT: usize = 28;
const LBA_AT: usize = 32 + 2;

impl Command {
    fn new(a: &PathArgs, cmd_sn: u32, exp_stat_sn: u32) -> Command {
        let blocks = u16::try_from(a.bs / 512).unwrap_or(u16::MAX);
        let write = a.rw == "write";
        let opcode = if write { 0x2a } else { 0x28 };
        let [b0, b1] = blocks.to_be_bytes();
        let cdb = [opcode, 0, 0, 0, 0, 0, 0, b0, b1, 0];
        let ids = CommandIds {
            lun: 0,
            itt: 0,
            cmd_sn,
            exp_stat_sn,
            read: !write,
            write,
            final_bit: true,
            expected_data_len: a.bs,
        };
        let data = if write {
            vec![0xa5; a.bs as usize]
        } else {
            Vec::new()
        };
        Command {
            pdu: scsi_command(ids, &cdb, data).encode(false, false),
            itt: 0,
            // Taken by the first `next`.
            cmd_sn: cmd_sn.wrapping_sub(1),
            exp_stat_sn: exp_stat_sn.wrapping_sub(1),
        }
    }

    /// The next command, at `lba`: every status before it acknowledged.
    fn next(&mut self, lba: u32) {
        self.itt = self.itt.wrapping_add(1);
        self.cmd_sn = self.cmd_sn.wrapping_add(1);
        self.exp_stat_sn = self.exp_stat_sn.wrapping_add(1);
        for (at, v) in [
            (ITT_AT, self.itt),
            (CMD_SN_AT, self.cmd_sn),
            (EXP_STAT_SN_AT, self.exp_stat_sn),
            (LBA_AT, lba),
        ] {
            if let Some(field) = self.pdu.get_mut(at..at + 4) {
                field.copy_from_slice(&v.to_be_bytes());
            }
        }
    }
}
