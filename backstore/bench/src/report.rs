//! Running the policies on the workloads ([`run_readahead`]) and the
//! table of their results ([`BenchReport`]); the targets and the plots are
//! read off a report by `targets` and `plot`.

use std::fmt::Write as _;

use crate::sim::{self, Link, SimConfig, SimResult};
use crate::workload::{standard, Workload};
use rustgt_backstore::hddsim::ArrayParams;
use rustgt_backstore::ioctx::{ContextMode, DeviceHints, IoContextOptions, ReadaheadPolicy};

/// What to run.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchOptions {
    pub array: ArrayParams,
    pub link: Link,
    /// Cache, window and I/O sizes; policy and mode are set per run.
    pub ctx: IoContextOptions,
    /// Virtual seconds per run.
    pub seconds: f64,
    pub seed: u64,
    /// Workers per LUN (W3 uses its own N).
    pub workers: usize,
    pub policies: Vec<ReadaheadPolicy>,
    pub modes: Vec<ContextMode>,
    /// Workload ids or groups to run ("W2", "W3-32"); empty runs all.
    pub only: Vec<String>,
    /// Workloads to run instead of the standard set (from workload files).
    pub custom: Option<Vec<Workload>>,
    /// Parallel simulations.
    pub jobs: usize,
}

impl Default for BenchOptions {
    fn default() -> Self {
        let array = ArrayParams::default();
        Self {
            array,
            link: Link::default(),
            ctx: IoContextOptions {
                device: DeviceHints::of_array(&array),
                ..IoContextOptions::default()
            },
            seconds: 20.0,
            seed: 1,
            workers: 8,
            policies: ReadaheadPolicy::ALL.to_vec(),
            modes: ContextMode::ALL.to_vec(),
            only: Vec::new(),
            custom: None,
            jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }
}

/// One run of the matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub workload: Workload,
    pub policy: ReadaheadPolicy,
    pub mode: ContextMode,
    pub result: SimResult,
}

/// Every run, in workload, policy, mode order.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchReport {
    pub options: BenchOptions,
    pub rows: Vec<Row>,
}

impl BenchOptions {
    /// The workloads selected by `only`.
    pub fn workloads(&self) -> Vec<Workload> {
        let all = match &self.custom {
            Some(w) => w.clone(),
            None => standard(&self.array, self.workers),
        };
        all.into_iter()
            .filter(|w| {
                self.only.is_empty()
                    || self
                        .only
                        .iter()
                        .any(|o| o.eq_ignore_ascii_case(&w.id) || o.eq_ignore_ascii_case(&w.group))
            })
            .collect()
    }

    /// The setup of one run: these options with what `w` fixes itself.
    pub fn sim_config(
        &self,
        w: &Workload,
        policy: ReadaheadPolicy,
        mode: ContextMode,
    ) -> SimConfig {
        let o = &w.overrides;
        let array = ArrayParams {
            disks: o.disks.unwrap_or(self.array.disks),
            ..self.array
        };
        let device = if o.disks.is_some() {
            DeviceHints::of_array(&array)
        } else {
            self.ctx.device
        };
        SimConfig {
            array,
            link: Link {
                rate: o.link_rate.unwrap_or(self.link.rate),
                rtt_ns: o.link_rtt_ns.unwrap_or(self.link.rtt_ns),
            },
            ctx: IoContextOptions {
                policy,
                mode,
                io_threads: o.io_threads.unwrap_or(self.ctx.io_threads),
                cache_bytes: o.cache_bytes.unwrap_or(self.ctx.cache_bytes),
                max_readahead: o.max_readahead.unwrap_or(self.ctx.max_readahead),
                max_io: o.max_io.unwrap_or(self.ctx.max_io),
                device,
                ..self.ctx
            },
            duration_ns: (self.seconds * 1e9) as u64,
            seed: self.seed,
        }
    }
}

/// Runs the whole matrix.
pub fn run_readahead(opts: &BenchOptions) -> BenchReport {
    let mut jobs = Vec::new();
    for w in opts.workloads() {
        for &policy in &opts.policies {
            for &mode in &opts.modes {
                jobs.push((w.clone(), policy, mode));
            }
        }
    }
    let threads = opts.jobs.clamp(1, 64);
    let mut results: Vec<Option<SimResult>> = vec![None; jobs.len()];
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let jobs = &jobs;
                scope.spawn(move || {
                    jobs.iter()
                        .enumerate()
                        .skip(t)
                        .step_by(threads)
                        .map(|(i, (w, p, m))| (i, sim::run(w, &opts.sim_config(w, *p, *m))))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in handles {
            if let Ok(done) = h.join() {
                for (i, r) in done {
                    if let Some(slot) = results.get_mut(i) {
                        *slot = Some(r);
                    }
                }
            }
        }
    });
    let rows = jobs
        .into_iter()
        .zip(results)
        .filter_map(|((workload, policy, mode), r)| {
            r.map(|result| Row {
                workload,
                policy,
                mode,
                result,
            })
        })
        .collect();
    BenchReport {
        options: opts.clone(),
        rows,
    }
}

impl BenchReport {
    /// The run of `workload` under `policy` and `mode`.
    pub fn get(
        &self,
        workload: &str,
        policy: ReadaheadPolicy,
        mode: ContextMode,
    ) -> Option<&SimResult> {
        self.rows
            .iter()
            .find(|r| r.workload.id == workload && r.policy == policy && r.mode == mode)
            .map(|r| &r.result)
    }

    /// The setup, as a few lines of text.
    pub fn setup(&self) -> String {
        let o = &self.options;
        let link = if o.link.rate > 0.0 {
            format!("{:.0} MB/s link", o.link.rate / 1e6)
        } else {
            "unlimited link".to_string()
        };
        format!(
            "device: {}; {link}, {:.2} ms per command round trip; {} workers per LUN (W3: N); \
             cache {} MiB, max readahead {} KiB, backing reads up to {} KiB, {} I/O threads; \
             {} s of simulated time per run, seed {}{}",
            o.array,
            o.link.rtt_ns as f64 / 1e6,
            o.workers,
            o.ctx.cache_bytes >> 20,
            o.ctx.max_readahead >> 10,
            o.ctx.max_io >> 10,
            o.ctx.io_threads,
            o.seconds,
            o.seed,
            if o.custom.is_some() {
                "; settings a workload file fixes take precedence"
            } else {
                ""
            },
        )
    }

    /// The results as a Markdown table (MB = 10^6 bytes).
    pub fn table(&self) -> String {
        let mut out = String::from(
            "| workload | policy | mode | per-stream MB/s | aggregate MB/s | backing reads | mean backing KiB | hit % | wasted MiB | p99 ms |\n\
             |---|---|---|---|---:|---:|---:|---:|---:|---:|\n",
        );
        for row in &self.rows {
            let r = &row.result;
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {:.1} | {} | {:.0} | {:.1} | {:.1} | {:.2} |",
                row.workload.id,
                row.policy,
                row.mode,
                per_stream(r),
                r.aggregate_mb_s(),
                r.backing_requests,
                r.mean_backing_bytes() / 1024.0,
                r.hit_ratio() * 100.0,
                r.wasted_bytes as f64 / f64::from(1u32 << 20),
                r.latency_quantile(0.99) as f64 / 1e6,
            );
        }
        out
    }
}

/// Per-stream MB/s: each value for up to three streams, else min–max; with
/// more than three streams of both kinds, the sequential and the random
/// ones apart ("seq 9.1 / 9.0, random 0.1–0.1").
fn per_stream(r: &SimResult) -> String {
    let v: Vec<f64> = (0..r.stream_bytes.len())
        .map(|i| r.stream_mb_s(i))
        .collect();
    let mixed = r.sequential.iter().any(|&s| s) && r.sequential.iter().any(|&s| !s);
    if v.len() <= 3 || !mixed {
        return values(&v);
    }
    let pick = |seq: bool| -> Vec<f64> {
        v.iter()
            .zip(&r.sequential)
            .filter(|(_, &s)| s == seq)
            .map(|(&x, _)| x)
            .collect()
    };
    format!(
        "seq {}, random {}",
        values(&pick(true)),
        values(&pick(false))
    )
}

/// Up to three values joined with " / ", else their range.
fn values(v: &[f64]) -> String {
    if v.len() <= 3 {
        v.iter()
            .map(|x| format!("{x:.1}"))
            .collect::<Vec<_>>()
            .join(" / ")
    } else {
        let min = v.iter().copied().fold(f64::INFINITY, f64::min);
        let max = v.iter().copied().fold(0.0, f64::max);
        format!("{min:.1}–{max:.1}")
    }
}
