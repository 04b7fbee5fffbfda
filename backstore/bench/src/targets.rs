//! The "done when" targets, checked on a benchmark report.

use crate::report::BenchReport;
use rustgt_backstore::ioctx::{ContextMode, ReadaheadPolicy};

/// One target and whether the report meets it.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetCheck {
    pub target: String,
    pub pass: bool,
    /// The numbers behind the verdict.
    pub detail: String,
}

use ContextMode::{PerWorker, Shared};
use ReadaheadPolicy::{Classic, Context, None as NoRa, Streams};

/// Every target whose runs are in the report.
pub fn check_targets(rep: &BenchReport) -> Vec<TargetCheck> {
    let mut out = Vec::new();
    collapse(rep, &mut out);
    // The fix is the shared context; per-worker runs are the broken
    // baseline and are only reported.
    for policy in [Context, Streams] {
        fixed(rep, policy, Shared, &mut out);
    }
    streams_vs_context(rep, Shared, &mut out);
    better(rep, PerWorker, &mut out);
    out
}

/// Throughputs within this fraction count as equal (link-bound ties and
/// start-up transients).
const TIE: f64 = 0.01;

fn push(out: &mut Vec<TargetCheck>, target: String, pass: bool, detail: String) {
    out.push(TargetCheck {
        target,
        pass,
        detail,
    });
}

/// The seed's workloads: both streams on one LUN, and on two LUNs sharing
/// the disks (each with its own context, taking turns).
const SEED: [&str; 2] = ["W2-2", "W2-seed"];

/// none/classic per-worker: each seed stream at most 15% of W1-qd1.
fn collapse(rep: &BenchReport, out: &mut Vec<TargetCheck>) {
    for policy in [NoRa, Classic] {
        for w in SEED {
            let (Some(w1), Some(w2)) = (
                rep.get("W1-qd1", policy, PerWorker),
                rep.get(w, policy, PerWorker),
            ) else {
                continue;
            };
            let base = w1.aggregate_mb_s();
            let worst = (0..w2.stream_bytes.len())
                .map(|i| w2.stream_mb_s(i))
                .fold(0.0, f64::max);
            push(
                out,
                format!("{policy} per-worker: {w} collapses to <= 15% of W1 per stream"),
                worst <= 0.15 * base,
                format!(
                    "best stream {worst:.1} MB/s vs W1 {base:.1} MB/s ({:.0}%)",
                    100.0 * worst / base
                ),
            );
        }
    }
}

/// context and streams: the seed's W2 >= 80% of W1, W3 loss <= 5%, W4 extra <= 1%
/// and p99 <= 1.05x none.
fn fixed(
    rep: &BenchReport,
    policy: ReadaheadPolicy,
    mode: ContextMode,
    out: &mut Vec<TargetCheck>,
) {
    let name = format!("{policy} {mode}");
    for w in SEED {
        let (Some(w1), Some(w2)) = (rep.get("W1-qd1", policy, mode), rep.get(w, policy, mode))
        else {
            continue;
        };
        let (a, b) = (w2.aggregate_mb_s(), w1.aggregate_mb_s());
        push(
            out,
            format!("{name}: {w} aggregate >= 80% of W1"),
            a >= 0.8 * b,
            format!("{a:.1} vs {b:.1} MB/s ({:.0}%)", 100.0 * a / b),
        );
    }
    for n in [1, 5, 8, 32] {
        let (Some(ooo), Some(ino)) = (
            rep.get(&format!("W3-{n}"), policy, mode),
            rep.get(&format!("W3-{n}-inorder"), policy, mode),
        ) else {
            continue;
        };
        let (a, b) = (ooo.aggregate_mb_s(), ino.aggregate_mb_s());
        push(
            out,
            format!("{name}: W3-{n} loses <= 5% against in-order"),
            a >= 0.95 * b,
            format!("{a:.1} vs {b:.1} MB/s ({:+.1}%)", 100.0 * (a - b) / b),
        );
    }
    for w in ["W4-uniform", "W4-clustered"] {
        let (Some(r), Some(none)) = (rep.get(w, policy, mode), rep.get(w, NoRa, mode)) else {
            continue;
        };
        let extra = r.extra_fraction();
        push(
            out,
            format!("{name}: {w} reads <= 1% extra bytes"),
            extra <= 0.01,
            format!("{:.2}% extra", 100.0 * extra),
        );
        let (p, q) = (r.latency_quantile(0.99), none.latency_quantile(0.99));
        push(
            out,
            format!("{name}: {w} p99 <= 1.05x none"),
            p as f64 <= 1.05 * q as f64,
            format!("{:.2} vs {:.2} ms", p as f64 / 1e6, q as f64 / 1e6),
        );
    }
}

/// streams >= context on every workload, and better on W2-16 and W3-32.
fn streams_vs_context(rep: &BenchReport, mode: ContextMode, out: &mut Vec<TargetCheck>) {
    {
        let mut worse = Vec::new();
        let mut compared = 0;
        for row in rep
            .rows
            .iter()
            .filter(|r| r.policy == Streams && r.mode == mode)
        {
            let Some(ctx) = rep.get(&row.workload.id, Context, mode) else {
                continue;
            };
            compared += 1;
            let (s, c) = (row.result.aggregate_mb_s(), ctx.aggregate_mb_s());
            let random = row.workload.group == "W4";
            let ok = if random {
                row.result.latency_quantile(0.99) <= ctx.latency_quantile(0.99)
                    && row.result.wasted_bytes <= ctx.wasted_bytes
            } else {
                s >= c * (1.0 - TIE)
            };
            if !ok {
                worse.push(format!("{} ({s:.1} vs {c:.1})", row.workload.id));
            }
        }
        if compared > 0 {
            push(
                out,
                format!("streams >= context on every workload ({mode})"),
                worse.is_empty(),
                if worse.is_empty() {
                    format!("{compared} workloads compared")
                } else {
                    format!("worse on {}", worse.join(", "))
                },
            );
        }
        better(rep, mode, out);
    }
}

/// streams better than context on W2-16 and W3-32.
fn better(rep: &BenchReport, mode: ContextMode, out: &mut Vec<TargetCheck>) {
    {
        for w in ["W2-16", "W3-32"] {
            let (Some(s), Some(c)) = (rep.get(w, Streams, mode), rep.get(w, Context, mode)) else {
                continue;
            };
            let (a, b) = (s.aggregate_mb_s(), c.aggregate_mb_s());
            push(
                out,
                format!("streams better than context on {w} ({mode})"),
                a > b * (1.0 + TIE),
                format!("{a:.1} vs {b:.1} MB/s"),
            );
        }
    }
}

impl BenchReport {
    /// Checks the targets on these results.
    pub fn targets(&self) -> Vec<TargetCheck> {
        check_targets(self)
    }
}
