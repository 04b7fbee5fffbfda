//! `rustgt-load`: a paced iSCSI load generator (the library; `main.rs`
//! is its command line).
//!
//! Opens N sessions to one LUN, each with its own initiator name and
//! thread, and issues reads, writes or a mix at a fixed rate per session
//! on an absolute timeline (open loop: command k of a session is due at
//! its start + k / rate, whatever became of the ones before it, and its
//! latency counts from that due time, or from when a queue slot freed if
//! the queue was full then), or unpaced at a queue depth.
//! Reports achieved IOPS and MB/s, latency percentiles, errors by status
//! and sense, how late the client itself was in sending, and for each
//! `--pid` that process's CPU and context switches over exactly the
//! measured window. A benchmark tool: it judges nothing, and exits
//! non-zero only when it cannot run (no login, a bad URL).

pub mod procstat;
pub mod schedule;
pub mod session;

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use hdrhistogram::Histogram;
use serde_json::json;

use session::{Job, Outcome, Window};

#[derive(Debug, Parser)]
#[command(
    name = "rustgt-load",
    version,
    about = "A paced iSCSI load generator (open loop)"
)]
pub struct Args {
    /// The LUN: iscsi://HOST:PORT/TARGET-IQN/LUN
    pub url: String,
    /// Sessions, each on its own connection and thread, 1..=4096.
    #[arg(long, default_value_t = 1)]
    pub sessions: usize,
    /// Commands per second per session; 0 is unpaced (keep --qd in flight).
    #[arg(long, default_value_t = 0.0)]
    pub rate: f64,
    /// Commands in flight per session at most, 1..=128.
    #[arg(long, default_value_t = 1)]
    pub qd: usize,
    /// Bytes per command (suffixes k and m: 4k, 1m).
    #[arg(long, default_value = "4k", value_parser = parse_size)]
    pub bs: u32,
    /// What the commands do.
    #[arg(long, value_enum, default_value_t = Rw::Read)]
    pub rw: Rw,
    /// Percentage of reads with --rw mix.
    #[arg(long, default_value_t = 50)]
    pub read_pct: u8,
    /// Where the commands go.
    #[arg(long, value_enum, default_value_t = Pattern::Random)]
    pub pattern: Pattern,
    /// Seconds measured.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Seconds run before the measured window, not counted.
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// Initiator names are this prefix and the session's index.
    #[arg(long, default_value = "iqn.2026-11.org.rustgt.load:i")]
    pub initiator_prefix: String,
    /// Processes whose CPU time and context switches are measured over
    /// the window (repeat, or a comma-separated list).
    #[arg(long, value_delimiter = ',')]
    pub pid: Vec<u32>,
    /// One JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// What the commands do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Rw {
    Read,
    Write,
    Mix,
}

/// Where the commands go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Pattern {
    Random,
    Seq,
}

fn parse_size(s: &str) -> Result<u32, String> {
    let s = s.trim();
    let (num, mul) = match s.char_indices().last() {
        Some((i, 'k' | 'K')) => (&s[..i], 1024u64),
        Some((i, 'm' | 'M')) => (&s[..i], 1024 * 1024),
        _ => (s, 1),
    };
    let n: u64 = num.parse().map_err(|_| format!("not a size: {s}"))?;
    let bytes = n.checked_mul(mul).ok_or("too large")?;
    if bytes == 0 || bytes > 16 * 1024 * 1024 {
        return Err("a size from 1 byte to 16m".into());
    }
    u32::try_from(bytes).map_err(|_| "too large".into())
}

/// `iscsi://HOST:PORT/IQN/LUN` as its portal, target and LUN.
fn parse_url(url: &str) -> Result<(SocketAddr, String, u64), String> {
    let rest = url
        .strip_prefix("iscsi://")
        .ok_or("the URL must start with iscsi://")?;
    let mut parts = rest.splitn(3, '/');
    let host = parts
        .next()
        .filter(|h| !h.is_empty())
        .ok_or("no host in the URL")?;
    let target = parts
        .next()
        .filter(|t| !t.is_empty())
        .ok_or("no target in the URL")?;
    let lun: u64 = parts
        .next()
        .unwrap_or("0")
        .parse()
        .map_err(|_| "the LUN is not a number")?;
    let with_port = if host.contains(':') && !host.ends_with(']') {
        host.to_owned()
    } else {
        format!("{host}:3260")
    };
    let portal = with_port
        .to_socket_addrs()
        .map_err(|e| format!("{host}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host}: no address"))?;
    Ok((portal, target.to_owned(), lun))
}

/// Runs the load `args` describe and returns the report (the JSON object
/// `--json` prints; see docs/benchmarks.md for its fields).
pub fn run(args: &Args) -> Result<serde_json::Value, String> {
    if !(1..=4096).contains(&args.sessions) {
        return Err("--sessions takes 1 to 4096".into());
    }
    if !(1..=128).contains(&args.qd) {
        return Err("--qd takes 1 to 128".into());
    }
    let valid = args.rate.is_finite()
        && args.rate >= 0.0
        && args.seconds.is_finite()
        && args.seconds > 0.0
        && args.warmup.is_finite()
        && args.warmup >= 0.0;
    if !valid {
        return Err(
            "--rate, --seconds and --warmup take non-negative numbers (--seconds > 0)".into(),
        );
    }
    let (portal, target, lun) = parse_url(&args.url)?;
    let job = Job {
        portal,
        target,
        lun,
        rate: args.rate,
        qd: args.qd,
        bs: args.bs,
        read_pct: match args.rw {
            Rw::Read => 100,
            Rw::Write => 0,
            Rw::Mix => args.read_pct.min(100),
        },
        random: args.pattern == Pattern::Random,
    };
    // A finer timer slack than the default 50 µs, so waits until a due
    // time end on time (this thread's value is inherited by the
    // sessions' threads).
    let _ = nix::sys::prctl::set_timerslack(1000);

    // Log in every session first (in parallel), then start them together.
    let mut logins = Vec::with_capacity(args.sessions);
    for i in 0..args.sessions {
        let job = job.clone();
        let name = format!("{}{i}", args.initiator_prefix);
        let isid = [0x80, 0x4c, 0x44, 0, (i >> 8) as u8, i as u8];
        logins.push(std::thread::spawn(move || {
            session::login(&job, &name, isid)
        }));
        // Pace the logins a little, as initiators do.
        if i % 32 == 31 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let mut ready = Vec::with_capacity(args.sessions);
    for h in logins {
        match h.join() {
            Ok(Ok(r)) => ready.push(r),
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err("a login thread failed".into()),
        }
    }
    let start = Instant::now() + Duration::from_millis(100);
    let measure_from = start + Duration::from_secs_f64(args.warmup);
    let end = measure_from + Duration::from_secs_f64(args.seconds);
    let w = Window {
        start,
        measure_from,
        end,
    };
    let sessions = ready.len();
    let mut runners = Vec::with_capacity(sessions);
    for (i, r) in ready.into_iter().enumerate() {
        let job = job.clone();
        runners.push(std::thread::spawn(move || {
            session::run(&job, r, i, sessions, w)
        }));
    }
    // The processes' usage over exactly the window.
    sleep_until(measure_from);
    let before: Vec<_> = args.pid.iter().map(|&p| procstat::sample(p)).collect();
    sleep_until(end);
    let after: Vec<_> = args.pid.iter().map(|&p| procstat::sample(p)).collect();
    let mut total = Outcome {
        latency: session::new_histogram(),
        lateness: session::new_histogram(),
        completed: 0,
        bytes: 0,
        unsent: 0,
        errors: Default::default(),
    };
    for h in runners {
        let o = h.join().map_err(|_| "a session thread failed".to_owned())?;
        let _ = total.latency.add(&o.latency);
        let _ = total.lateness.add(&o.lateness);
        total.completed += o.completed;
        total.bytes += o.bytes;
        total.unsent += o.unsent;
        for (k, v) in o.errors {
            *total.errors.entry(k).or_insert(0) += v;
        }
    }
    Ok(report(args, &total, &before, &after))
}

fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        std::thread::sleep(t - now);
    }
}

fn us(h: &Histogram<u64>, q: f64) -> f64 {
    if h.is_empty() {
        return 0.0;
    }
    h.value_at_quantile(q) as f64 / 1000.0
}

fn report(
    args: &Args,
    t: &Outcome,
    before: &[Option<procstat::Usage>],
    after: &[Option<procstat::Usage>],
) -> serde_json::Value {
    let secs = args.seconds;
    let iops = t.completed as f64 / secs;
    let offered = if args.rate > 0.0 {
        Some(args.rate * args.sessions as f64)
    } else {
        None
    };
    let late_p99 = us(&t.lateness, 0.99);
    // The client could not keep its own schedule: it sent late although
    // a queue slot was free, or (paced) it is far below what it offered
    // with the queue not the cause.
    let behind = late_p99 > 250.0
        || offered.is_some_and(|o| iops < 0.97 * o && t.unsent == 0 && t.errors.is_empty());
    let procs: Vec<_> = args
        .pid
        .iter()
        .zip(before.iter().zip(after))
        .map(|(&pid, (b, a))| match (b, a) {
            (Some(b), Some(a)) => {
                let u = b.until(*a);
                let cpu_s = u.cpu.as_secs_f64();
                json!({
                    "pid": pid,
                    "cpu_pct": 100.0 * cpu_s / secs,
                    "cpu_us_per_io": if t.completed > 0 { cpu_s * 1e6 / t.completed as f64 } else { 0.0 },
                    "switches_per_io": if t.completed > 0 { u.switches as f64 / t.completed as f64 } else { 0.0 },
                    "cpu_seconds": cpu_s,
                    "switches": u.switches,
                })
            }
            _ => json!({ "pid": pid, "error": "process not readable" }),
        })
        .collect();
    json!({
        "sessions": args.sessions,
        "rate_per_session": args.rate,
        "offered_iops": offered,
        "qd": args.qd,
        "bs": args.bs,
        "rw": format!("{:?}", args.rw).to_lowercase(),
        "pattern": format!("{:?}", args.pattern).to_lowercase(),
        "seconds": secs,
        "completed": t.completed,
        "iops": iops,
        "mb_s": t.bytes as f64 / secs / 1e6,
        "latency_us": {
            "p50": us(&t.latency, 0.5), "p90": us(&t.latency, 0.9), "p99": us(&t.latency, 0.99),
            "p999": us(&t.latency, 0.999), "max": if t.latency.is_empty() { 0.0 } else { t.latency.max() as f64 / 1000.0 },
        },
        "client_lateness_us": { "p50": us(&t.lateness, 0.5), "p99": us(&t.lateness, 0.99) },
        "unsent": t.unsent,
        "client_behind": behind,
        "errors": t.errors,
        "processes": procs,
    })
}

/// Prints a report as a table (or as JSON with `--json`).
pub fn print(args: &Args, out: &serde_json::Value) {
    if args.json {
        println!("{out}");
        return;
    }
    let f = |path: &[&str]| {
        path.iter()
            .try_fold(out, |v, k| v.get(*k))
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(0.0)
    };
    let secs = args.seconds;
    let iops = f(&["iops"]);
    let offered = out.get("offered_iops").and_then(serde_json::Value::as_f64);
    println!(
        "{} session(s) x {} QD{} {} {} {} B, {:.1} s measured",
        args.sessions,
        if args.rate > 0.0 {
            format!("{} IOPS", args.rate)
        } else {
            "unpaced".into()
        },
        args.qd,
        format!("{:?}", args.pattern).to_lowercase(),
        format!("{:?}", args.rw).to_lowercase(),
        args.bs,
        secs
    );
    let mb = f(&["mb_s"]);
    match offered {
        Some(o) => println!("iops        {iops:.0} of {o:.0} offered ({mb:.1} MB/s)"),
        None => println!("iops        {iops:.0} ({mb:.1} MB/s)"),
    }
    println!(
        "latency µs  p50 {:.1}  p90 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}",
        f(&["latency_us", "p50"]),
        f(&["latency_us", "p90"]),
        f(&["latency_us", "p99"]),
        f(&["latency_us", "p999"]),
        f(&["latency_us", "max"]),
    );
    println!(
        "client late p50 {:.1} µs  p99 {:.1} µs; unsent {}",
        f(&["client_lateness_us", "p50"]),
        f(&["client_lateness_us", "p99"]),
        f(&["unsent"]),
    );
    let procs = out.get("processes").and_then(serde_json::Value::as_array);
    for p in procs.into_iter().flatten() {
        let g = |k: &str| p.get(k).and_then(serde_json::Value::as_f64);
        match g("cpu_pct") {
            Some(cpu) => println!(
                "pid {}     cpu {cpu:.1}% of a core, {:.2} µs per I/O, {:.3} context switches per I/O",
                p.get("pid").unwrap_or(&serde_json::Value::Null),
                g("cpu_us_per_io").unwrap_or(0.0),
                g("switches_per_io").unwrap_or(0.0)
            ),
            None => println!(
                "pid {}     not readable",
                p.get("pid").unwrap_or(&serde_json::Value::Null)
            ),
        }
    }
    if let Some(errors) = out.get("errors").and_then(serde_json::Value::as_object) {
        for (k, v) in errors {
            println!("error       {v} x {k}");
        }
    }
    if out
        .get("client_behind")
        .and_then(serde_json::Value::as_bool)
        == Some(true)
    {
        println!(
            "WARNING: the client could not hold its schedule; these figures describe the client, not the target"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert_eq!(parse_size("512"), Ok(512));
        assert!(parse_size("0").is_err());
        assert!(parse_size("32m").is_err());
        assert!(parse_size("x").is_err());
    }

    #[test]
    fn urls() {
        let (p, t, l) =
            parse_url("iscsi://127.0.0.1:3262/iqn.2026-11.org.rustgt:bench/1").expect("url");
        assert_eq!(p, "127.0.0.1:3262".parse().expect("addr"));
        assert_eq!(t, "iqn.2026-11.org.rustgt:bench");
        assert_eq!(l, 1);
        let (p, _, l) = parse_url("iscsi://127.0.0.1/iqn.x:y").expect("url");
        assert_eq!(p.port(), 3260);
        assert_eq!(l, 0);
        assert!(parse_url("http://x/y/0").is_err());
        assert!(parse_url("iscsi://127.0.0.1:1/").is_err());
    }
}
