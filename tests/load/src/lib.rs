//! `rustgt bench load`: a paced (open-loop) iSCSI load generator, usable
//! against any target.
//!
//! N sessions, each its own OS thread with its own initiator name and TCP
//! connection, issue 4 KiB (or `--bs`) reads, writes or a mix at a fixed
//! rate per session on an absolute timeline ([`schedule`]), at a queue depth
//! per session. Latency counts from each command's due time; the client's
//! own lateness (send time - due time) is reported, with a warning when it
//! could not hold its schedule. Given `--pid`, the CPU time and context
//! switches of those processes over exactly the measured window are read
//! from `/proc`. Output: a human table, or one JSON object (`--json`; the
//! fields are documented on [`Report`]).

pub mod floor;
pub mod hostile;
pub mod procstat;
pub mod schedule;
pub mod session;

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use hdrhistogram::Histogram;
use serde::Serialize;

use hostile::{Hostile, HostileReport};
use procstat::ProcSample;
use schedule::{phase, Rng, Schedule};
use session::{new_histogram, Conn, SessionStats};

/// Why a load run could not run or finish.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// Options that do not parse or fit together.
    #[error("{0}")]
    Invalid(String),
    /// The connection, login or a command failed at the transport level
    /// (refused, closed, timed out, undecodable, rejected).
    #[error("{0}")]
    Transport(String),
    /// The target refused the login with an initiator error (status class
    /// 2: authentication, authorization, no such target): trying again
    /// would not help.
    #[error("{0}")]
    Refused(String),
}

/// Reads, writes or a mix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Rw {
    Read,
    Write,
    Mix,
}

/// Random or sequential offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    Random,
    Seq,
}

/// `rustgt bench load` options.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct LoadArgs {
    /// The LUN: iscsi://HOST[:PORT]/TARGET_IQN/LUN.
    #[arg(value_name = "URL")]
    pub url: String,
    /// Sessions (one thread and one connection each).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub sessions: usize,
    /// Commands per second per session; 0 = unpaced (saturating).
    #[arg(long, value_name = "IOPS", default_value_t = 1000)]
    pub rate: u32,
    /// Commands in flight per session at most.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub qd: usize,
    /// Bytes per command (suffixes k, m).
    #[arg(long, value_name = "SIZE", default_value = "4k")]
    pub bs: String,
    /// Reads, writes or a mix (--read-pct).
    #[arg(long, value_enum, default_value_t = Rw::Read)]
    pub rw: Rw,
    /// Share of reads in --rw mix, percent.
    #[arg(long, value_name = "PCT", default_value_t = 70)]
    pub read_pct: u8,
    /// Offsets: random (uniform over the LUN) or seq (per session, from a
    /// random start).
    #[arg(long, value_enum, default_value_t = Pattern::Random)]
    pub pattern: Pattern,
    /// Measured seconds.
    #[arg(long, value_name = "S", default_value_t = 10.0)]
    pub seconds: f64,
    /// Seconds of load before the measured window.
    #[arg(long, value_name = "S", default_value_t = 1.0)]
    pub warmup: f64,
    /// Initiator names: this prefix and the session index.
    #[arg(
        long,
        value_name = "IQN",
        default_value = "iqn.2026-11.org.rustgt.load:i"
    )]
    pub initiator_prefix: String,
    /// Log the sessions in and keep them idle for the window (no
    /// commands; NOP-In pings answered): the target's cost of idle
    /// sessions, with --pid.
    #[arg(long)]
    pub idle: bool,
    /// No per-session phase offset: every session's timeline starts at the
    /// same instant (lockstep).
    #[arg(long)]
    pub no_phase: bool,
    /// Processes whose CPU time and context switches are measured over the
    /// window (repeatable or comma-separated).
    #[arg(long, value_name = "PID", value_delimiter = ',')]
    pub pid: Vec<u32>,
    /// Local addresses to connect from, sessions spread round-robin over
    /// them (comma-separated, e.g. 127.0.0.2,127.0.0.3): a target that
    /// caps connections per source address (rustgt's
    /// max_connections_per_address, 256) then takes more sessions.
    #[arg(long, value_name = "ADDRS", value_delimiter = ',')]
    pub bind: Vec<std::net::IpAddr>,
    /// Seed of the random offsets.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Hostile peers to run beside the load for the whole run
    /// (comma-separated): silent, write-hold, unread, login-churn (see
    /// `tests/load/src/hostile.rs`); with --pid, the report adds each
    /// process's resident memory at the start and its peak.
    #[arg(long, value_enum, value_name = "KINDS", value_delimiter = ',')]
    pub hostile: Vec<Hostile>,
    /// A file created when the measured window begins (after logins and
    /// warm-up), holding the window's length in seconds: a script can
    /// time something of its own (a system-call count) within the window.
    #[arg(long, value_name = "PATH")]
    pub window_file: Option<std::path::PathBuf>,
    /// One JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// The mix a session draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RwMix {
    Read,
    Write,
    /// Percent of reads.
    Mix(u8),
}

/// The run's timeline and I/O shape, as the sessions use it.
#[derive(Debug, Clone)]
pub struct Plan {
    pub lun: u64,
    pub qd: usize,
    pub bs: u64,
    pub rw: RwMix,
    pub pattern: Pattern,
    pub measure_from: Instant,
    pub end: Instant,
}

/// A parsed `iscsi://HOST[:PORT]/IQN/LUN`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IscsiUrl {
    pub host: String,
    pub port: u16,
    pub target: String,
    pub lun: u64,
}

/// Parses an iSCSI URL (port 3260 when absent).
pub fn parse_url(url: &str) -> Result<IscsiUrl, LoadError> {
    let bad = |why: &str| {
        LoadError::Invalid(format!(
            "bad URL {url:?}: {why} (want iscsi://HOST[:PORT]/TARGET_IQN/LUN)"
        ))
    };
    let rest = url
        .strip_prefix("iscsi://")
        .ok_or_else(|| bad("not iscsi://"))?;
    let mut parts = rest.splitn(3, '/');
    let hostport = parts
        .next()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| bad("no host"))?;
    let target = parts
        .next()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| bad("no target"))?;
    let lun = parts.next().ok_or_else(|| bad("no LUN"))?;
    let lun = lun.parse::<u64>().map_err(|_| bad("LUN is not a number"))?;
    let (host, port) = if let Some(h) = hostport.strip_prefix('[') {
        let (h, p) = h.split_once(']').ok_or_else(|| bad("unclosed ["))?;
        (h, p.strip_prefix(':'))
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    let port = match port {
        Some(p) => p.parse::<u16>().map_err(|_| bad("bad port"))?,
        None => 3260,
    };
    Ok(IscsiUrl {
        host: host.to_owned(),
        port,
        target: target.to_owned(),
        lun,
    })
}

/// Parses a size such as `4k`, `64K`, `1m` or `512`.
pub fn parse_bs(s: &str) -> Result<u64, LoadError> {
    let t = s.trim().to_ascii_lowercase();
    let t = t
        .strip_suffix("ib")
        .or_else(|| t.strip_suffix('b'))
        .unwrap_or(&t);
    let (num, mul) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 1024),
        Some('m') => (&t[..t.len() - 1], 1024 * 1024),
        _ => (t, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mul))
        .filter(|&n| n > 0 && n <= 16 * 1024 * 1024)
        .ok_or_else(|| LoadError::Invalid(format!("bad --bs {s:?} (e.g. 4k, 64k, 1m)")))
}

/// Checks the options that clap cannot.
pub fn validate(a: &LoadArgs) -> Result<(IscsiUrl, u64, RwMix), LoadError> {
    let inv = |s: String| Err(LoadError::Invalid(s));
    let url = parse_url(&a.url)?;
    let bs = parse_bs(&a.bs)?;
    if a.sessions == 0 || a.sessions > 4096 {
        return inv(format!("--sessions {} out of 1..=4096", a.sessions));
    }
    if a.qd == 0 || a.qd > 1024 {
        return inv(format!("--qd {} out of 1..=1024", a.qd));
    }
    if !(a.seconds > 0.0 && a.seconds <= 86_400.0) {
        return inv(format!("--seconds {} out of (0, 86400]", a.seconds));
    }
    if !(a.warmup >= 0.0 && a.warmup <= 3600.0) {
        return inv(format!("--warmup {} out of [0, 3600]", a.warmup));
    }
    if a.read_pct > 100 {
        return inv(format!("--read-pct {} above 100", a.read_pct));
    }
    if let Some(path) = &a.window_file {
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."));
        if !dir.is_dir() {
            return inv(format!(
                "--window-file {}: {} is not a directory",
                path.display(),
                dir.display()
            ));
        }
    }
    let rw = match a.rw {
        Rw::Read => RwMix::Read,
        Rw::Write => RwMix::Write,
        Rw::Mix => RwMix::Mix(a.read_pct),
    };
    Ok((url, bs, rw))
}

/// Latency or lateness percentiles, microseconds.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    pub mean: f64,
}

impl Percentiles {
    fn of(h: &Histogram<u64>) -> Percentiles {
        let us = |ns: u64| ns as f64 / 1000.0;
        if h.is_empty() {
            return Percentiles {
                p50: 0.0,
                p90: 0.0,
                p99: 0.0,
                p999: 0.0,
                max: 0.0,
                mean: 0.0,
            };
        }
        Percentiles {
            p50: us(h.value_at_quantile(0.5)),
            p90: us(h.value_at_quantile(0.9)),
            p99: us(h.value_at_quantile(0.99)),
            p999: us(h.value_at_quantile(0.999)),
            max: us(h.max()),
            mean: h.mean() / 1000.0,
        }
    }
}

/// One `--pid`'s figures over the measured window.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PidReport {
    pub pid: u32,
    /// Time on a CPU, seconds: the threads' scheduler run time
    /// (`/proc/PID/task/*/schedstat`), or utime + stime at clock-tick
    /// resolution when a thread exited within the window.
    pub cpu_s: f64,
    /// CPU time as percent of one core.
    pub cpu_pct: f64,
    /// CPU microseconds per I/O completed in the window.
    pub cpu_us_per_io: f64,
    /// Voluntary + involuntary context switches of its threads.
    pub ctxsw: u64,
    pub ctxsw_per_io: f64,
    /// Resident memory at the start of the window, MiB.
    pub rss_start_mib: f64,
    /// The highest resident memory seen in the window (sampled every
    /// 100 ms), MiB.
    pub rss_peak_mib: f64,
}

/// The result of a run; `--json` prints it as one object with these
/// field names (stable).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Report {
    pub url: String,
    pub sessions: usize,
    /// --idle: no commands were sent.
    pub idle: bool,
    pub qd: usize,
    /// Per session; 0 = unpaced.
    pub rate_per_session: u32,
    /// sessions x rate (0 when unpaced).
    pub offered_iops: f64,
    pub rw: String,
    pub read_pct: u8,
    pub bs: u64,
    pub pattern: Pattern,
    /// The measured window, seconds.
    pub seconds: f64,
    pub warmup: f64,
    /// Commands due in the window and completed (the latency sample).
    pub ios: u64,
    pub reads: u64,
    pub writes: u64,
    /// Commands completed within the window, per second.
    pub iops: f64,
    /// 10^6 bytes per second, of the same.
    pub mbps: f64,
    /// Due time to completion.
    pub latency_us: Percentiles,
    /// Send time to completion: the latency without the client's own
    /// lateness (its wake-up for the due time, its waits for a slot).
    pub service_us: Percentiles,
    /// Send time - due time (the client's own delay, incl. waits for a
    /// free slot at the queue depth).
    pub lateness_us: Percentiles,
    /// Send time - the later of due time and the moment the full queue
    /// depth freed a slot: the client's own delay, without the waits for
    /// the target.
    pub own_lateness_us: Percentiles,
    /// Percent of commands sent 50 µs or more after their due time.
    pub late_pct: f64,
    /// False when the client could not hold its schedule: achieved below
    /// 97% of offered, or own lateness p99 above 1 ms (paced runs only).
    pub schedule_held: bool,
    /// Why not, in words; null when held.
    pub warning: Option<String>,
    /// SCSI errors ("status 0x02 sense 3/11/00" -> count).
    pub errors: BTreeMap<String, u64>,
    pub error_count: u64,
    /// Transport errors of sessions that ended early, one line each.
    pub transport_errors: Vec<String>,
    /// Login attempts that failed and were tried again (all sessions): the
    /// target closed, reset or refused a connection before its session was
    /// up, e.g. over a cap on logins in progress from one address.
    pub login_retries: u64,
    pub pids: Vec<PidReport>,
    /// The hostile peers that ran beside the load (--hostile).
    pub hostile: Vec<HostileReport>,
}

/// The longest a session waits past the window's end for its figures to be
/// taken before it logs out anyway.
const CLOSE_WAIT: Duration = Duration::from_secs(10);

/// Set once the window's figures are taken.
#[derive(Default)]
struct WindowClosed {
    closed: Mutex<bool>,
    cv: Condvar,
}

impl WindowClosed {
    fn close(&self) {
        if let Ok(mut c) = self.closed.lock() {
            *c = true;
        }
        self.cv.notify_all();
    }

    /// Waits until [`WindowClosed::close`] or `deadline`.
    fn wait(&self, deadline: Instant) {
        let Ok(mut c) = self.closed.lock() else {
            return;
        };
        // Bounded: every wake-up re-checks the deadline.
        while !*c {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            match self.cv.wait_timeout(c, left) {
                Ok((g, _)) => c = g,
                Err(_) => return,
            }
        }
    }
}

/// Runs the load and returns its report; `Err` only when nothing could be
/// measured (bad options; no session logged in).
pub fn run(a: &LoadArgs) -> Result<Report, LoadError> {
    let (url, bs, rw) = validate(a)?;
    let addr: SocketAddr = (url.host.as_str(), url.port)
        .to_socket_addrs()
        .map_err(|e| LoadError::Invalid(format!("{}: {e}", url.host)))?
        .next()
        .ok_or_else(|| LoadError::Invalid(format!("{}: no address", url.host)))?;
    let n = a.sessions;
    let rate = f64::from(a.rate);
    let logged_in = Arc::new(Barrier::new(n + 1));
    let go = Arc::new(Barrier::new(n + 1));
    let plan_slot: Arc<Mutex<Option<(Plan, Instant)>>> = Arc::new(Mutex::new(None));
    let closed = Arc::new(WindowClosed::default());
    let mut handles = Vec::with_capacity(n);
    for i in 0..n {
        let (logged_in, go, plan_slot) = (logged_in.clone(), go.clone(), plan_slot.clone());
        let closed = closed.clone();
        let target = url.target.clone();
        let initiator = format!("{}{i}", a.initiator_prefix);
        let lun = url.lun;
        let idle = a.idle;
        let seed = a.seed.wrapping_mul(0x1000_0001).wrapping_add(i as u64);
        let ph = if a.no_phase {
            Duration::ZERO
        } else {
            phase(i, n, rate)
        };
        let isid = isid_of(i);
        let source = if a.bind.is_empty() {
            None
        } else {
            a.bind.get(i % a.bind.len()).copied()
        };
        let h = std::thread::Builder::new()
            .name(format!("load-{i}"))
            .stack_size(256 * 1024)
            .spawn(move || {
                let _ = nix::sys::prctl::set_timerslack(1);
                let mut stats = SessionStats::new();
                let conn = Conn::login_retrying(addr, source, &target, &initiator, isid).and_then(
                    |(mut c, retries)| {
                        stats.login_retries = retries;
                        let geo = c.prepare(lun)?;
                        Ok((c, geo))
                    },
                );
                logged_in.wait();
                go.wait();
                let (mut c, (blocks, block_size)) = match conn {
                    Ok(x) => x,
                    Err(e) => {
                        stats.transport = Some(e.to_string());
                        return (stats, false);
                    }
                };
                let Some((plan, start)) = plan_slot.lock().ok().and_then(|p| p.clone()) else {
                    return (stats, true);
                };
                let mut sched = if idle {
                    Schedule::idle(start)
                } else {
                    Schedule::new(start, rate, ph)
                };
                let mut rng = Rng::new(seed);
                match c.run(&plan, &mut sched, &mut rng, blocks, block_size, &mut stats) {
                    Ok(()) => {
                        // Logouts wait for the window's figures, so the
                        // target's work on them is not in the window.
                        closed.wait(plan.end + CLOSE_WAIT);
                        if let Err(e) = c.logout() {
                            stats.transport = Some(format!("logout: {e}"));
                        }
                    }
                    Err(e) => stats.transport = Some(e.to_string()),
                }
                (stats, true)
            })
            .map_err(|e| LoadError::Invalid(format!("cannot start session thread {i}: {e}")))?;
        handles.push(h);
    }
    logged_in.wait();
    let start = Instant::now() + Duration::from_millis(20);
    let measure_from = start + Duration::from_secs_f64(a.warmup);
    let end = measure_from + Duration::from_secs_f64(a.seconds);
    let plan = Plan {
        lun: url.lun,
        qd: a.qd,
        bs,
        rw,
        pattern: a.pattern,
        measure_from,
        end,
    };
    if let Ok(mut p) = plan_slot.lock() {
        *p = Some((plan, start));
    }
    // Hostile peers (if any) start with the warm-up, so the window sees
    // them at work.
    let peers = hostile::start(&a.hostile, addr, &url.target);
    go.wait();
    std::thread::sleep(measure_from.saturating_duration_since(Instant::now()));
    let before: Vec<Option<ProcSample>> = a.pid.iter().map(|&p| ProcSample::read(p)).collect();
    let rss_start: Vec<u64> = a
        .pid
        .iter()
        .map(|&p| procstat::rss_kib(p).unwrap_or(0))
        .collect();
    let mut rss_peak = rss_start.clone();
    let t_before = Instant::now();
    // A failure is reported with the transport errors, after the run.
    let window_file_error = a.window_file.as_ref().and_then(|path| {
        std::fs::write(path, format!("{}\n", a.seconds))
            .err()
            .map(|e| format!("--window-file {}: {e}", path.display()))
    });
    // Bounded: the window's length, in 100 ms steps.
    while Instant::now() < end {
        std::thread::sleep(end.saturating_duration_since(Instant::now()).min(RSS_STEP));
        for (peak, &p) in rss_peak.iter_mut().zip(&a.pid) {
            *peak = (*peak).max(procstat::rss_kib(p).unwrap_or(0));
        }
    }
    let after: Vec<Option<ProcSample>> = a.pid.iter().map(|&p| ProcSample::read(p)).collect();
    let window = t_before.elapsed().as_secs_f64();
    closed.close();
    let hostile = peers.stop();

    let mut latency = new_histogram();
    let mut service = new_histogram();
    let mut lateness = new_histogram();
    let mut own_lateness = new_histogram();
    let (mut reads, mut writes, mut completed) = (0u64, 0u64, 0u64);
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    let mut transport: Vec<String> = window_file_error.into_iter().collect();
    let mut login_retries = 0u64;
    let mut any_ran = false;
    for h in handles {
        let Ok((s, ran)) = h.join() else {
            transport.push("a session thread panicked".to_owned());
            continue;
        };
        any_ran |= ran;
        let _ = latency.add(&s.latency);
        let _ = service.add(&s.service);
        let _ = lateness.add(&s.lateness);
        let _ = own_lateness.add(&s.own_lateness);
        reads += s.reads;
        writes += s.writes;
        completed += s.completed_in_window;
        for (k, v) in s.errors {
            *errors.entry(k).or_insert(0) += v;
        }
        login_retries += s.login_retries;
        transport.extend(s.transport);
    }
    if !any_ran {
        return Err(LoadError::Transport(
            transport
                .first()
                .cloned()
                .unwrap_or_else(|| "no session logged in".to_owned()),
        ));
    }
    let ios = reads + writes;
    let iops = completed as f64 / a.seconds;
    let offered = if a.idle { 0.0 } else { rate * n as f64 };
    let late = lateness.count_between(50_000, u64::MAX);
    let late_pct = if lateness.is_empty() {
        0.0
    } else {
        100.0 * late as f64 / lateness.len() as f64
    };
    let lateness_us = Percentiles::of(&lateness);
    let own_lateness_us = Percentiles::of(&own_lateness);
    let mut warning = None;
    if a.rate > 0 && !a.idle {
        if iops < 0.97 * offered {
            warning = Some(format!(
                "achieved {iops:.0} IOPS, below 97% of the offered {offered:.0}"
            ));
        } else if own_lateness_us.p99 > 1000.0 {
            warning = Some(format!(
                "p99 of its own lateness {:.0} µs above 1 ms",
                own_lateness_us.p99
            ));
        }
    }
    let pids = a
        .pid
        .iter()
        .zip(before.iter().zip(after.iter()))
        .zip(rss_start.iter().zip(&rss_peak))
        .filter_map(|((&pid, (b, af)), (&rss0, &rss1))| {
            let (b, af) = (b.as_ref()?, af.as_ref()?);
            let cpu_s = af.cpu_since(b);
            let ctxsw = af.ctxsw.saturating_sub(b.ctxsw);
            let per = |x: f64| {
                if completed > 0 {
                    x / completed as f64
                } else {
                    0.0
                }
            };
            Some(PidReport {
                pid,
                cpu_s,
                cpu_pct: 100.0 * cpu_s / window,
                cpu_us_per_io: per(cpu_s * 1e6),
                ctxsw,
                ctxsw_per_io: per(ctxsw as f64),
                rss_start_mib: rss0 as f64 / 1024.0,
                rss_peak_mib: rss1 as f64 / 1024.0,
            })
        })
        .collect();
    Ok(Report {
        url: a.url.clone(),
        sessions: n,
        idle: a.idle,
        qd: a.qd,
        rate_per_session: a.rate,
        offered_iops: offered,
        rw: match rw {
            RwMix::Read => "read",
            RwMix::Write => "write",
            RwMix::Mix(_) => "mix",
        }
        .to_owned(),
        read_pct: match rw {
            RwMix::Read => 100,
            RwMix::Write => 0,
            RwMix::Mix(p) => p,
        },
        bs,
        pattern: a.pattern,
        seconds: a.seconds,
        warmup: a.warmup,
        ios,
        reads,
        writes,
        iops,
        mbps: completed as f64 * bs as f64 / a.seconds / 1e6,
        latency_us: Percentiles::of(&latency),
        service_us: Percentiles::of(&service),
        lateness_us,
        own_lateness_us,
        late_pct,
        schedule_held: warning.is_none(),
        warning,
        error_count: errors.values().sum(),
        errors,
        transport_errors: transport,
        login_retries,
        pids,
        hostile,
    })
}

/// How often the window samples resident memory.
const RSS_STEP: Duration = Duration::from_millis(100);

/// A distinct ISID per session (random-qualifier format, RFC 7143 §11.12.5).
fn isid_of(i: usize) -> [u8; 6] {
    let b = (i as u32).to_be_bytes();
    [0x80, 0x4c, b[0], b[1], b[2], b[3]]
}

/// The human table.
pub fn render(r: &Report) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let offered = if r.idle {
        "idle".to_owned()
    } else if r.rate_per_session == 0 {
        "unpaced".to_owned()
    } else {
        format!(
            "{} x {} IOPS = {:.0} IOPS offered",
            r.sessions, r.rate_per_session, r.offered_iops
        )
    };
    let _ = writeln!(
        s,
        "{}  {} sessions, QD {}, {} B {} {:?}, {} s (+{} s warm-up); {offered}",
        r.url, r.sessions, r.qd, r.bs, r.rw, r.pattern, r.seconds, r.warmup
    );
    let _ = writeln!(
        s,
        "achieved   {:>10.0} IOPS  {:>8.1} MB/s  ({} reads, {} writes)",
        r.iops, r.mbps, r.reads, r.writes
    );
    let row = |s: &mut String, name: &str, p: &Percentiles| {
        let _ = writeln!(
            s,
            "{name:<10} p50 {:>9.1}  p90 {:>9.1}  p99 {:>9.1}  p99.9 {:>9.1}  max {:>9.1}  µs",
            p.p50, p.p90, p.p99, p.p999, p.max
        );
    };
    row(&mut s, "latency", &r.latency_us);
    row(&mut s, "service", &r.service_us);
    row(&mut s, "lateness", &r.lateness_us);
    row(&mut s, "own late", &r.own_lateness_us);
    let _ = writeln!(s, "late >=50µs {:.2}% of commands", r.late_pct);
    for p in &r.pids {
        let _ = writeln!(
            s,
            "pid {:<7} CPU {:>6.1}% of a core  {:>7.2} µs/IO  {:>6.3} ctxsw/IO  RSS {:.0} MiB, peak {:.0} MiB",
            p.pid, p.cpu_pct, p.cpu_us_per_io, p.ctxsw_per_io, p.rss_start_mib, p.rss_peak_mib
        );
    }
    for h in &r.hostile {
        let _ = writeln!(
            s,
            "hostile {:<12} {} episodes, {} closed or refused by the target",
            format!("{:?}", h.kind),
            h.episodes,
            h.closed_by_target
        );
    }
    if r.login_retries > 0 {
        let _ = writeln!(s, "logins     {} attempt(s) tried again", r.login_retries);
    }
    let _ = writeln!(s, "errors     {}", r.error_count);
    for (k, v) in &r.errors {
        let _ = writeln!(s, "  {k}: {v}");
    }
    for t in &r.transport_errors {
        let _ = writeln!(s, "transport error: {t}");
    }
    if let Some(w) = &r.warning {
        let _ = writeln!(s, "WARNING: the client could not hold its schedule: {w}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        a: LoadArgs,
    }

    fn args(extra: &[&str]) -> LoadArgs {
        let mut v = vec!["x", "iscsi://127.0.0.1:3261/iqn.2026-01.t:a/1"];
        v.extend_from_slice(extra);
        Cli::try_parse_from(v).map(|c| c.a).unwrap()
    }

    #[test]
    fn urls() {
        let u = parse_url("iscsi://127.0.0.1:3261/iqn.2026-01.t:a/3").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.target.as_str(), u.lun),
            ("127.0.0.1", 3261, "iqn.2026-01.t:a", 3)
        );
        assert_eq!(parse_url("iscsi://h/t/0").unwrap().port, 3260);
        assert_eq!(parse_url("iscsi://[::1]:99/t/0").unwrap().host, "::1");
        for bad in [
            "http://h/t/0",
            "iscsi://h/t",
            "iscsi://h/t/x",
            "iscsi:///t/0",
            "iscsi://h:70000/t/0",
        ] {
            assert!(
                matches!(parse_url(bad), Err(LoadError::Invalid(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_bs("4k").unwrap(), 4096);
        assert_eq!(parse_bs("64KiB").unwrap(), 65536);
        assert_eq!(parse_bs("1m").unwrap(), 1 << 20);
        assert_eq!(parse_bs("512").unwrap(), 512);
        for bad in ["", "0", "k", "4x", "1000m"] {
            assert!(parse_bs(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn options() {
        let a = args(&[
            "--sessions",
            "8",
            "--rate",
            "1500",
            "--qd",
            "4",
            "--rw",
            "mix",
            "--read-pct",
            "60",
            "--pid",
            "1,2",
            "--pid",
            "3",
            "--json",
            "--bind",
            "127.0.0.2,127.0.0.3",
        ]);
        assert_eq!(
            (a.sessions, a.rate, a.qd, a.pid.clone(), a.json),
            (8, 1500, 4, vec![1, 2, 3], true)
        );
        let (_, bs, rw) = validate(&a).unwrap();
        assert_eq!((bs, rw), (4096, RwMix::Mix(60)));
        assert_eq!(a.bind.len(), 2);
        let d = args(&[]);
        assert_eq!(
            (d.sessions, d.qd, d.pattern, d.rw),
            (1, 1, Pattern::Random, Rw::Read)
        );
        assert_eq!(d.initiator_prefix, "iqn.2026-11.org.rustgt.load:i");
        for bad in [
            &["--qd", "0"][..],
            &["--sessions", "0"],
            &["--seconds", "0"],
            &["--read-pct", "101"],
            &["--window-file", "/nonexistent-dir/window"],
        ] {
            assert!(validate(&args(bad)).is_err(), "{bad:?}");
        }
        assert!(Cli::try_parse_from(["x", "u", "--rw", "both"]).is_err());
    }

    #[test]
    fn isids_differ() {
        assert_ne!(isid_of(0), isid_of(1));
        assert_eq!(isid_of(258)[4..], [1, 2]);
    }
}
