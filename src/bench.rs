//! `rustgt bench readahead`: the CLI face of the readahead benchmark that
//! lives in the `rustgt_rabench` crate (simulated time, deterministic).
//! Prints the setup, the table and the targets, and writes one SVG
//! per workload plus `results.md` into the output directory.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use rustgt_backstore::{parse_size, ContextMode, ReadaheadPolicy};
use rustgt_rabench::{parse_workloads, run_readahead, BenchOptions, Link, Workload};

/// Why a benchmark could not run, or missed its targets.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// An option or workload file that does not parse or fit together.
    #[error("{0}")]
    Invalid(String),
    /// Reading a workload file or writing the results failed.
    #[error("{what} {}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// `--check`: some of the targets were missed.
    #[error("some targets were missed")]
    TargetsMissed,
    /// `bench load`: the run could not start or a session failed.
    #[error("{0}")]
    Load(#[from] rustgt_load::LoadError),
    /// `bench load`: some sessions ended early on a transport error (the
    /// report was printed).
    #[error("{0} session(s) ended on a transport error")]
    SessionsFailed(usize),
    /// `bench floor`: it could not listen or its poll failed.
    #[error("{0}")]
    Floor(#[from] rustgt_load::floor::FloorError),
}

fn invalid(e: impl std::fmt::Display) -> BenchError {
    BenchError::Invalid(e.to_string())
}

/// Benchmarks; none of them starts the daemon.
#[derive(Debug, Clone, PartialEq, Subcommand)]
pub enum BenchCommand {
    /// Every readahead policy, shared and per-worker, on workloads W1..W5
    /// (or those of a workload file), in a simulated 7200 rpm md RAID-0
    /// behind a GbE link.
    Readahead(ReadaheadArgs),
    /// A paced (open-loop) iSCSI load against any target: N sessions at a
    /// fixed rate each, latency from each command's due time, the CPU of
    /// given processes over the window (docs/benchmarks.md, "rustgt bench
    /// load").
    Load(rustgt_load::LoadArgs),
    /// A reference responder, not a target: answers iSCSI logins and
    /// commands on loopback with no SCSI semantics and no storage (zeros
    /// for reads), from one thread on one epoll. What a paced load costs it
    /// per I/O is the floor any target pays on the machine
    /// (docs/benchmarks.md, "The floor"). Serves until killed.
    Floor(rustgt_load::floor::FloorArgs),
    /// What one command costs the daemon's command path on the CPU, on
    /// one thread without sockets: the daemon's own target and port, one
    /// connection driven as the TCP driver's turn drives it, READ(10) or
    /// WRITE(10) commands to a null or RAM LUN (docs/benchmarks.md, "The
    /// command path").
    Path(crate::bench_path::PathArgs),
}

#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct ReadaheadArgs {
    /// Directory for the plots (one SVG per workload) and results.md.
    #[arg(long, value_name = "DIR", default_value = "bench-out")]
    pub out: PathBuf,
    /// Simulated seconds per run.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub seconds: u32,
    /// Only these workloads or groups, comma-separated (e.g. "W2,W3-32").
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub only: Vec<String>,
    /// Run the workloads of this TOML file instead of the standard set
    /// (repeatable; format in docs/readahead.md, "Workload files"; the
    /// standard set is docs/readahead/workloads/W*.toml). Settings the file
    /// fixes (workers, io_threads, cache, link, ...) win over the options.
    #[arg(long, value_name = "FILE")]
    pub workload: Vec<PathBuf>,
    /// Policies to run, comma-separated [default: all].
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub policies: Vec<String>,
    /// Context modes to run: shared, per-worker [default: both].
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub modes: Vec<String>,
    /// Readahead cache per LUN.
    #[arg(long, value_name = "SIZE", default_value = "64M")]
    pub cache: String,
    /// Largest readahead window (classic, context; floor for streams).
    #[arg(long, value_name = "SIZE", default_value = "4M")]
    pub max_readahead: String,
    /// I/O threads (backing reads in flight) per LUN.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub io_threads: usize,
    /// Largest backing read after coalescing.
    #[arg(long, value_name = "SIZE", default_value = "1M")]
    pub io_max: String,
    /// Turns of the LUNs at the shared device in multi-LUN workloads
    /// (W2-seed): "auto" (sixteen positioning times of transfer each), "off",
    /// or bytes per turn such as "16M".
    #[arg(long, value_name = "V", default_value = "auto")]
    pub device_slice: String,
    /// Link payload rate in MB/s; 0 for unlimited (default: GbE).
    #[arg(long, value_name = "MBPS", default_value_t = 117)]
    pub link_mbps: u32,
    /// Seed of the random workloads.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Simulations run in parallel [default: CPUs].
    #[arg(long, value_name = "N")]
    pub jobs: Option<usize>,
    /// Exit with status 1 when a target is missed.
    #[arg(long)]
    pub check: bool,
}

/// Runs a benchmark subcommand.
pub fn run(cmd: &BenchCommand) -> Result<(), BenchError> {
    match cmd {
        BenchCommand::Readahead(args) => readahead(args),
        BenchCommand::Load(args) => load(args),
        BenchCommand::Floor(args) => Ok(rustgt_load::floor::serve(args)?),
        BenchCommand::Path(args) => crate::bench_path::run(args),
    }
}

fn load(args: &rustgt_load::LoadArgs) -> Result<(), BenchError> {
    let report = rustgt_load::run(args)?;
    if args.json {
        let line = serde_json::to_string(&report).map_err(invalid)?;
        println!("{line}");
    } else {
        print!("{}", rustgt_load::render(&report));
    }
    match report.transport_errors.len() {
        0 => Ok(()),
        n => Err(BenchError::SessionsFailed(n)),
    }
}

fn options(a: &ReadaheadArgs) -> Result<BenchOptions, BenchError> {
    let mut o = BenchOptions {
        seconds: f64::from(a.seconds.max(1)),
        seed: a.seed,
        only: a.only.clone(),
        ..BenchOptions::default()
    };
    if !a.policies.is_empty() {
        o.policies = a
            .policies
            .iter()
            .map(|p| p.parse::<ReadaheadPolicy>())
            .collect::<Result<_, _>>()
            .map_err(invalid)?;
    }
    if !a.modes.is_empty() {
        o.modes = a
            .modes
            .iter()
            .map(|m| m.parse::<ContextMode>())
            .collect::<Result<_, _>>()
            .map_err(invalid)?;
    }
    o.ctx.cache_bytes =
        parse_size(&a.cache).ok_or_else(|| invalid(format!("bad --cache {:?}", a.cache)))?;
    o.ctx.max_readahead = parse_size(&a.max_readahead)
        .ok_or_else(|| invalid(format!("bad --max-readahead {:?}", a.max_readahead)))?;
    o.ctx.io_threads = a.io_threads;
    o.ctx.max_io =
        parse_size(&a.io_max).ok_or_else(|| invalid(format!("bad --io-max {:?}", a.io_max)))?;
    o.ctx.device_slice = a.device_slice.parse().map_err(|()| {
        invalid(format!(
            "bad --device-slice {:?}: expected auto, off or a size such as 16M",
            a.device_slice
        ))
    })?;
    o.ctx.validate().map_err(invalid)?;
    o.link = Link {
        rate: f64::from(a.link_mbps) * 1e6,
        ..Link::default()
    };
    if let Some(j) = a.jobs {
        o.jobs = j.max(1);
    }
    if !a.workload.is_empty() {
        let mut all: Vec<Workload> = Vec::new();
        for path in &a.workload {
            let text = std::fs::read_to_string(path).map_err(|source| BenchError::Io {
                what: "reading workload file",
                path: path.clone(),
                source,
            })?;
            let file = path.display().to_string();
            for w in parse_workloads(&text, &file, &o.array, o.workers).map_err(invalid)? {
                if all.iter().any(|x| x.id.eq_ignore_ascii_case(&w.id)) {
                    return Err(invalid(format!(
                        "{file}: workload id {:?} is defined by an earlier file too",
                        w.id
                    )));
                }
                all.push(w);
            }
        }
        o.custom = Some(all);
    }
    if o.workloads().is_empty() {
        return Err(invalid(format!("--only {:?} selects no workload", a.only)));
    }
    Ok(o)
}

fn readahead(a: &ReadaheadArgs) -> Result<(), BenchError> {
    let opts = options(a)?;
    let report = run_readahead(&opts);
    let mut text = String::new();
    let _ = writeln!(text, "{}\n", report.setup());
    text.push_str(&report.table());
    text.push('\n');
    let targets = report.targets();
    for t in &targets {
        let verdict = if t.pass { "PASS" } else { "FAIL" };
        let _ = writeln!(text, "- {verdict} {}: {}", t.target, t.detail);
    }
    print!("{text}");
    let plots = report
        .write_plots(&a.out)
        .map_err(|source| BenchError::Io {
            what: "writing plots into",
            path: a.out.clone(),
            source,
        })?;
    let results = a.out.join("results.md");
    std::fs::write(&results, &text).map_err(|source| BenchError::Io {
        what: "writing",
        path: results.clone(),
        source,
    })?;
    println!(
        "\nwrote {} plots and results.md into {}",
        plots.len(),
        a.out.display()
    );
    if a.check && targets.iter().any(|t| !t.pass) {
        return Err(BenchError::TargetsMissed);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn arguments_map_to_options() {
        let cli = crate::cli::Cli::try_parse_from([
            "rustgt",
            "bench",
            "readahead",
            "--seconds",
            "2",
            "--only",
            "W1,W2-2",
            "--policies",
            "none,streams",
            "--modes",
            "shared",
            "--cache",
            "32M",
        ])
        .expect("parses");
        let Some(crate::cli::Command::Bench(BenchCommand::Readahead(a))) = cli.command else {
            panic!("not a bench command");
        };
        let o = options(&a).expect("valid");
        assert_eq!(
            o.policies,
            vec![ReadaheadPolicy::None, ReadaheadPolicy::Streams]
        );
        assert_eq!(o.modes, vec![ContextMode::Shared]);
        assert_eq!(o.ctx.cache_bytes, 32 << 20);
        assert_eq!(o.workloads().len(), 3);
        let bad = ReadaheadArgs {
            only: vec!["W9".into()],
            ..a.clone()
        };
        assert!(options(&bad).is_err());
    }

    #[test]
    fn a_workload_file_replaces_the_standard_set() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("mine.toml");
        std::fs::write(
            &path,
            "[[workload]]\nid = \"mine\"\n[[workload.streams]]\nkind = \"random\"\nqd = 2\n",
        )
        .expect("write");
        let cli = crate::cli::Cli::try_parse_from([
            "rustgt".as_ref(),
            "bench".as_ref(),
            "readahead".as_ref(),
            "--workload".as_ref(),
            path.as_os_str(),
        ])
        .expect("parses");
        let Some(crate::cli::Command::Bench(BenchCommand::Readahead(a))) = cli.command else {
            panic!("not a bench command");
        };
        let o = options(&a).expect("valid");
        let ids: Vec<String> = o.workloads().into_iter().map(|w| w.id).collect();
        assert_eq!(ids, vec!["mine".to_string()]);
        // A bad file: the error names the file and the key.
        std::fs::write(
            &path,
            "[[workload]]\nid = \"mine\"\n[[workload.streams]]\nkind = \"random\"\nqd = 0\n",
        )
        .expect("write");
        let e = options(&a).expect_err("refused").to_string();
        assert!(
            e.contains("mine.toml") && e.contains("workload[0].streams[0].qd"),
            "{e}"
        );
        // The same id twice across files.
        std::fs::write(
            &path,
            "[[workload]]\nid = \"mine\"\n[[workload.streams]]\nkind = \"random\"\n",
        )
        .expect("write");
        let twice = ReadaheadArgs {
            workload: vec![path.clone(), path.clone()],
            ..a
        };
        assert!(options(&twice).is_err());
    }
}
