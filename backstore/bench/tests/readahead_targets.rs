//! The targets, asserted on the benchmark's simulation. The
//! simulation runs in virtual time: these are deterministic computations,
//! not timings, and give the same numbers on any machine.

use rustgt_backstore::{ContextMode, ReadaheadPolicy};
use rustgt_rabench::{run_readahead, BenchOptions, BenchReport};

fn report(only: &[&str], policies: &[ReadaheadPolicy], modes: &[ContextMode]) -> BenchReport {
    run_readahead(&options(only, policies, modes))
}

fn options(only: &[&str], policies: &[ReadaheadPolicy], modes: &[ContextMode]) -> BenchOptions {
    BenchOptions {
        seconds: 4.0,
        only: only.iter().map(|s| s.to_string()).collect(),
        policies: policies.to_vec(),
        modes: modes.to_vec(),
        ..BenchOptions::default()
    }
}

fn assert_all_pass(rep: &BenchReport) {
    let checks = rep.targets();
    assert!(!checks.is_empty());
    let failed: Vec<_> = checks.iter().filter(|c| !c.pass).collect();
    assert!(failed.is_empty(), "missed: {failed:#?}");
}

#[test]
fn per_worker_contexts_reproduce_the_seed_collapse() {
    use ReadaheadPolicy::*;
    let rep = report(
        &["W1-qd1", "W2-2", "W2-seed"],
        &[None, Classic],
        &[ContextMode::PerWorker],
    );
    assert_eq!(rep.targets().len(), 4);
    assert_all_pass(&rep);
    // And the kernel's 128 KiB window collapses too, as in the seed thread.
    let k = report(&["W1-qd1", "W2-2"], &[Kernel], &[ContextMode::Shared]);
    let w1 = k
        .get("W1-qd1", Kernel, ContextMode::Shared)
        .expect("W1")
        .aggregate_mb_s();
    let w2 = k.get("W2-2", Kernel, ContextMode::Shared).expect("W2");
    assert!(w2.stream_mb_s(0) < 0.15 * w1 && w2.stream_mb_s(1) < 0.15 * w1);
}

#[test]
fn context_and_streams_meet_the_shared_targets() {
    use ReadaheadPolicy::*;
    let rep = report(
        &["W1-qd1", "W2-2", "W2-seed", "W3-8", "W3-8-inorder", "W4"],
        &[None, Context, Streams],
        &[ContextMode::Shared],
    );
    assert_all_pass(&rep);
}

#[test]
fn streams_beats_context_with_many_streams() {
    use ReadaheadPolicy::*;
    let rep = report(&["W2-16"], &[Context, Streams], &[ContextMode::Shared]);
    let s = rep
        .get("W2-16", Streams, ContextMode::Shared)
        .expect("streams");
    let c = rep
        .get("W2-16", Context, ContextMode::Shared)
        .expect("context");
    assert!(
        s.aggregate_mb_s() > 2.0 * c.aggregate_mb_s(),
        "{} vs {}",
        s.aggregate_mb_s(),
        c.aggregate_mb_s()
    );
    // Context thrashes the cache; streams' admission keeps waste small.
    assert!(
        s.wasted_bytes < c.wasted_bytes,
        "{} vs {}",
        s.wasted_bytes,
        c.wasted_bytes
    );
}

#[test]
fn streams_beats_context_on_reordered_chunks_per_worker() {
    use ReadaheadPolicy::*;
    let rep = report(&["W3-32"], &[Context, Streams], &[ContextMode::PerWorker]);
    let s = rep
        .get("W3-32", Streams, ContextMode::PerWorker)
        .expect("streams");
    let c = rep
        .get("W3-32", Context, ContextMode::PerWorker)
        .expect("context");
    assert!(
        s.aggregate_mb_s() > 1.02 * c.aggregate_mb_s(),
        "{} vs {}",
        s.aggregate_mb_s(),
        c.aggregate_mb_s()
    );
}

/// The seed as served, two LUNs with a context each on one md0: without
/// turns the contexts interleave their backing reads at the disks (every
/// 4 MiB per stream); with turns (the default) each stream gets the disks
/// for a budget at a time, and the pair reaches the link's speed.
#[test]
fn device_turns_lift_two_luns_on_one_disk() {
    use rustgt_backstore::DeviceSlice;
    use ReadaheadPolicy::*;
    let run = |slice| {
        let mut o = options(&["W2-seed"], &[Context, Streams], &[ContextMode::Shared]);
        o.ctx.device_slice = slice;
        run_readahead(&o)
    };
    let (on, off) = (run(DeviceSlice::Auto), run(DeviceSlice::Off));
    for policy in [Context, Streams] {
        let a = on.get("W2-seed", policy, ContextMode::Shared).expect("on");
        let b = off
            .get("W2-seed", policy, ContextMode::Shared)
            .expect("off");
        assert!(a.device_turns > 0 && b.device_turns == 0, "{policy}");
        assert!(
            a.aggregate_mb_s() > 1.15 * b.aggregate_mb_s(),
            "{policy}: {} with turns vs {} without",
            a.aggregate_mb_s(),
            b.aggregate_mb_s()
        );
        // Fair: the two LUNs within 10% of each other (4 s runs include
        // the start).
        let (x, y) = (a.stream_mb_s(0), a.stream_mb_s(1));
        assert!((x - y).abs() <= 0.1 * x.max(y), "{policy}: {x} vs {y}");
    }
}

/// Issue 13's mix (docs/readahead/workloads/mix.toml): two sequential
/// streams beside four random 4 KiB readers at QD4. Before promotion and
/// inline hits, the streams got under 0.05 MB/s under `context` and
/// `streams` (0.0 / 0.0 in the table) while `none` gave 0.5. Readahead the
/// streams wait on is now promoted, their cached reads are served without
/// a worker (as the reactor serves them), and readahead shares the device
/// with the random readers' demand reads: a share of its cost per stream,
/// taken in reads of four positioning times of transfer.
#[test]
fn sequential_streams_beside_random_readers_keep_their_readahead() {
    use rustgt_rabench::{parse_workloads, MIX_FILE};
    use ReadaheadPolicy::*;
    let mut o = options(&[], &[None, Context, Streams], &[ContextMode::Shared]);
    o.seconds = 10.0;
    let (name, text) = MIX_FILE;
    o.custom = Some(parse_workloads(text, name, &o.array, o.workers).expect("mix parses"));
    let rep = run_readahead(&o);
    let iops = |r: &rustgt_rabench::SimResult, streams: std::ops::Range<usize>| -> f64 {
        streams
            .map(|i| r.stream_bytes[i] as f64 / 4096.0)
            .sum::<f64>()
            / (r.duration_ns as f64 / 1e9)
    };
    let none = rep.get("M-mix", None, ContextMode::Shared).expect("none");
    for policy in [Context, Streams] {
        let mix = rep.get("M-mix", policy, ContextMode::Shared).expect("mix");
        let alone = rep
            .get("M-alone", policy, ContextMode::Shared)
            .expect("alone");
        let random = rep
            .get("M-random", policy, ContextMode::Shared)
            .expect("random");
        let solo = alone.stream_mb_s(0);
        let (a, b) = (mix.stream_mb_s(0), mix.stream_mb_s(1));
        let (r_mix, r_none, r_alone) = (iops(mix, 2..6), iops(none, 2..6), iops(random, 0..4));
        println!(
            "{policy}: streams {a:.2} / {b:.2} MB/s, alone beside one reader {solo:.2} MB/s \
             ({:.0}% / {:.0}%); random {r_mix:.1} IOPS, {r_none:.1} under none, \
             {r_alone:.1} without the streams",
            100.0 * a / solo,
            100.0 * b / solo
        );
        // The goal, met by `streams` (the default on seeking
        // devices; 59% / 64% and 95%) and by `context`, which reports the
        // streams its windows follow to the core as `streams` does (68% /
        // 55% and 97%): each stream keeps at least half of what it gets
        // alone beside one random reader, and the random readers lose at
        // most 10% of their IOPS under `none` in the same mix.
        assert!(
            a >= 0.5 * solo && b >= 0.5 * solo,
            "{policy}: {a} / {b} vs {solo}"
        );
        assert!(a.min(b) > 10.0 * none.stream_mb_s(0).max(none.stream_mb_s(1)));
        assert!(r_mix >= 0.9 * r_none, "{policy}: {r_mix} vs {r_none} IOPS");
        assert!(r_alone > r_mix);
        assert!(mix.hit_ratio() > 0.9, "{policy}: {}", mix.hit_ratio());
    }
}

/// The standard set and the workloads the policies were not tuned on
/// (issues 13 and 35, docs/readahead/workloads/*.toml), every policy,
/// shared mode.
fn everything(seconds: f64) -> BenchReport {
    use rustgt_rabench::{parse_workloads, standard, UNTUNED_FILES};
    let mut o = options(&[], &ReadaheadPolicy::ALL, &[ContextMode::Shared]);
    o.seconds = seconds;
    let mut all = standard(&o.array, o.workers);
    for (name, text) in UNTUNED_FILES {
        all.extend(parse_workloads(text, name, &o.array, o.workers).expect(name));
    }
    o.custom = Some(all);
    run_readahead(&o)
}

/// What `readahead = "auto"` runs on the simulated disks (a seeking
/// device), asked of the builder rather than assumed.
fn default_policy() -> ReadaheadPolicy {
    use rustgt_backstore::{auto_policy, EngineKind, NullBackstore};
    let engine = NullBackstore::new(1 << 30, 512, false).expect("null engine");
    auto_policy(&EngineKind::HddSim, &engine)
}

/// Issues 13 and 35: on every workload, standard and new, the default
/// policy is within 5% of the best policy's aggregate, and never below
/// `none` in aggregate or for any sequential or strided stream; random
/// readers beside sequential streams (W5, M-*) keep 90% of their `none`
/// figure.
///
/// On stride-wide.toml's strided readers beside a sequential stream
/// (X-*-seq) `context` reaches 76-94 MB/s by leaving the strided reader
/// under its `none` figure; the default gets there too, with the strided
/// reader above it, by keeping few pieces ahead while the other stream is
/// live.
#[test]
fn the_default_policy_is_near_the_best_and_never_below_none() {
    let rep = everything(8.0);
    let default = default_policy();
    let shared = ContextMode::Shared;
    let mut ids: Vec<&str> = rep.rows.iter().map(|r| r.workload.id.as_str()).collect();
    ids.dedup();
    assert!(ids.len() >= 40, "{ids:?}");
    for id in ids {
        let d = rep.get(id, default, shared).expect("default row");
        let none = rep
            .get(id, ReadaheadPolicy::None, shared)
            .expect("none row");
        // Random readers may lose 10% (M-mix 95%, M-alone's QD4 reader
        // 119%, W5's QD1 reader 92%), sequential and strided streams
        // nothing.
        let floor = |i: usize| if d.sequential[i] { 0.995 } else { 0.9 };
        let (best, best_policy) = ReadaheadPolicy::ALL
            .iter()
            .filter_map(|&p| rep.get(id, p, shared).map(|r| (r.aggregate_mb_s(), p)))
            .fold((0.0, default), |a, b| if b.0 > a.0 { b } else { a });
        assert!(
            d.aggregate_mb_s() >= 0.95 * best,
            "{id}: {default} {:.1} MB/s vs {best_policy} {best:.1}",
            d.aggregate_mb_s()
        );
        // Where both saturate the link (W1-qd4) they tie to within the
        // last command's transfer: half a percent covers it.
        assert!(
            d.aggregate_mb_s() >= 0.995 * none.aggregate_mb_s(),
            "{id}: {:.2} vs {:.2} MB/s under none",
            d.aggregate_mb_s(),
            none.aggregate_mb_s()
        );
        for i in 0..d.stream_bytes.len() {
            let (mine, theirs) = (d.stream_mb_s(i), none.stream_mb_s(i));
            assert!(
                mine >= floor(i) * theirs,
                "{id} stream {i}: {mine:.2} MB/s vs {theirs:.2} under none"
            );
        }
    }
    // W5's two streams beside a QD1 random reader: 16 MB/s each when
    // readahead beside one reader went in reads of one backing read, 26-28
    // since they may transfer for one positioning time.
    let w5 = rep.get("W5", default, shared).expect("W5");
    for i in 0..2 {
        assert!(
            w5.stream_mb_s(i) >= 22.0,
            "W5 stream {i}: {:.1}",
            w5.stream_mb_s(i)
        );
    }
}

/// Issue 13: a strided reader (64 KiB every 256 KiB) and a reverse reader
/// each gain at least 2x over `none` alone, and beside a sequential
/// stream neither falls below its `none` figure. A stride from byte 0 is
/// found by its stride, not by where it starts.
#[test]
fn strided_and_reverse_readers_are_prefetched() {
    use ReadaheadPolicy::{None, Streams};
    let shared = ContextMode::Shared;
    let mut o = options(&[], &[None, Streams], &[shared]);
    let (name, text) = rustgt_rabench::UNTUNED_FILES[1];
    o.custom =
        Some(rustgt_rabench::parse_workloads(text, name, &o.array, o.workers).expect("stride"));
    let rep = run_readahead(&o);
    let mb = |id: &str, p, i| rep.get(id, p, shared).expect(id).stream_mb_s(i);
    for id in ["S-stride", "S-stride-0", "S-reverse"] {
        assert!(
            mb(id, Streams, 0) >= 2.0 * mb(id, None, 0),
            "{id}: {:.1} vs {:.1} MB/s",
            mb(id, Streams, 0),
            mb(id, None, 0)
        );
    }
    for id in ["S-stride-seq", "S-reverse-seq"] {
        assert!(mb(id, Streams, 0) >= mb(id, None, 0), "{id}");
        assert!(mb(id, Streams, 1) >= mb(id, None, 1), "{id}");
    }
    // The skipped three quarters of a stride are read (the gaps cost less
    // than a seek) but given back as the reader passes them: the cache
    // keeps serving the reader.
    let s = rep.get("S-stride", Streams, shared).expect("stride");
    assert!(s.hit_ratio() > 0.95, "{}", s.hit_ratio());
}

/// Issue 13: many interleaved streams in the default 64 MiB cache reach
/// 60% of one stream with 32 of them, degrade without a cliff (80 streams keep at least 80% of the 64-stream
/// aggregate), fairly (no stream under 60% of the fastest), and a cache
/// smaller than streams x window still gives at least 2x `none` with under
/// 5% of the bytes read wasted.
#[test]
fn many_streams_and_small_caches_degrade_gracefully() {
    use rustgt_rabench::{parse_workloads, UNTUNED_FILES};
    use ReadaheadPolicy::{None, Streams};
    let shared = ContextMode::Shared;
    let mut o = options(&[], &[None, Streams], &[shared]);
    o.seconds = 8.0;
    let mut all: Vec<_> = rustgt_rabench::standard(&o.array, o.workers)
        .into_iter()
        .filter(|w| w.id == "W1-qd1")
        .collect();
    for (name, text) in &UNTUNED_FILES[2..4] {
        all.extend(parse_workloads(text, name, &o.array, o.workers).expect(name));
    }
    o.custom = Some(all);
    let rep = run_readahead(&o);
    let agg = |id: &str| rep.get(id, Streams, shared).expect(id).aggregate_mb_s();
    // 32 interleaved streams reach 60% of one stream (69% since the
    // readahead queue is swept up the device).
    assert!(
        agg("N-32") >= 0.6 * agg("W1-qd1"),
        "{} vs {}",
        agg("N-32"),
        agg("W1-qd1")
    );
    assert!(
        agg("N-80") >= 0.8 * agg("N-64"),
        "{} vs {}",
        agg("N-80"),
        agg("N-64")
    );
    for id in ["N-32", "N-48", "N-64", "N-80", "C-8", "C-16"] {
        let r = rep.get(id, Streams, shared).expect(id);
        let v: Vec<f64> = (0..r.stream_bytes.len())
            .map(|i| r.stream_mb_s(i))
            .collect();
        let max = v.iter().copied().fold(0.0, f64::max);
        assert!(v.iter().all(|&x| x >= 0.6 * max), "{id}: {v:?}");
    }
    for id in ["C-8", "C-16"] {
        let s = rep.get(id, Streams, shared).expect(id);
        let n = rep.get(id, None, shared).expect(id);
        assert!(s.aggregate_mb_s() >= 2.0 * n.aggregate_mb_s(), "{id}");
        assert!(
            (s.wasted_bytes as f64) < 0.05 * s.demand_bytes as f64,
            "{id}: {} wasted of {}",
            s.wasted_bytes,
            s.demand_bytes
        );
    }
}

/// The seed over loopback (no link cap, as `tests/bench/seed-e2e` runs it):
/// W1 streams at the outer zone's 229 MB/s, and the pair must share the
/// disks with one stream on the inner zone. Even with no seeks at all, two
/// streams at equal MB/s could average only 2 / (1/240 + 1/126) = 165 MB/s,
/// 72% of W1: the 80% is out of reach with fair streams, whatever
/// the turns. Turns of sixteen positioning times, started in queue order,
/// reach 68% of W1 (94% of that ceiling; issue 35 asks 90% end to end),
/// each stream within 10% of the other.
#[test]
fn the_seed_over_loopback_nears_its_no_seek_ceiling() {
    use rustgt_backstore::hddsim::ArrayParams;
    use ReadaheadPolicy::*;
    let mut o = options(
        &["W1-qd1", "W2-seed"],
        &[Classic, Context, Streams],
        &[ContextMode::Shared],
    );
    o.seconds = 8.0;
    o.link.rate = 0.0;
    let rep = run_readahead(&o);
    let a = ArrayParams::default();
    let disks = f64::from(a.disks.max(1));
    let per_disk = |at: u64| disks * a.disk.rate_at(at / u64::from(a.disks.max(1)));
    // The middle of each LUN (the first and the last 10% of md0).
    let (outer, inner) = (per_disk(25_000_000_000), per_disk(475_000_000_000));
    let ceiling = 2.0 / (1.0 / outer + 1.0 / inner);
    for policy in [Classic, Context, Streams] {
        let w1 = rep.get("W1-qd1", policy, ContextMode::Shared).expect("W1");
        let w2 = rep.get("W2-seed", policy, ContextMode::Shared).expect("W2");
        let (one, two) = (w1.aggregate_mb_s(), w2.aggregate_mb_s());
        assert!(
            ceiling / 1e6 < 0.8 * one,
            "{policy}: ceiling {ceiling} vs W1 {one}"
        );
        assert!(two >= 0.65 * one, "{policy}: {two} vs W1 {one}");
        assert!(
            two >= 0.92 * ceiling / 1e6,
            "{policy}: {two} vs ceiling {ceiling}"
        );
        let (x, y) = (w2.stream_mb_s(0), w2.stream_mb_s(1));
        assert!((x - y).abs() <= 0.1 * x.max(y), "{policy}: {x} vs {y}");
    }
}

/// Issue 35: every strided reader of
/// `docs/readahead/workloads/stride-wide.toml`, forward and reverse, gaps
/// of 4x, 16x and 64x the request, gains at least 2x over `none` alone
/// (2.2x: its pieces go to both disks at once), wastes under 10% of what
/// is read from the device (1.1-3.2%, alone and beside the sequential
/// stream: only its pieces are read, the gaps are wider than a short skip
/// costs), and a sequential stream beside
/// any of them keeps at least 90% of what it gets beside a `none` reader.
/// Before, a forward gap of 4x was read through (3,326 MiB wasted in 20
/// s) and reverse readers gained 1.96x.
#[test]
fn wide_and_reverse_strides_get_only_their_pieces() {
    use ReadaheadPolicy::{None, Streams};
    let shared = ContextMode::Shared;
    let mut o = options(&[], &[None, Streams], &[shared]);
    o.seconds = 20.0;
    let (name, text) = rustgt_rabench::UNTUNED_FILES[4];
    o.custom = Some(rustgt_rabench::parse_workloads(text, name, &o.array, o.workers).expect(name));
    let rep = run_readahead(&o);
    let get = |id: &str, p| rep.get(id, p, shared).expect(id);
    for id in [
        "X-for-4x",
        "X-rev-4x",
        "X-for-16x",
        "X-rev-16x",
        "X-for-64x",
        "X-rev-64x",
    ] {
        let (s, n) = (get(id, Streams), get(id, None));
        assert!(
            s.stream_mb_s(0) >= 2.0 * n.stream_mb_s(0),
            "{id}: {:.1} vs {:.1} MB/s",
            s.stream_mb_s(0),
            n.stream_mb_s(0)
        );
        assert!(
            s.wasted_bytes * 10 < s.backing_bytes,
            "{id}: {} of {} bytes wasted",
            s.wasted_bytes,
            s.backing_bytes
        );
    }
    for g in ["4x", "16x", "64x"] {
        for d in ["for", "rev"] {
            let id = format!("X-{d}-{g}-seq");
            let (s, n) = (get(&id, Streams), get(&id, None));
            assert!(
                s.stream_mb_s(1) >= 0.9 * n.stream_mb_s(1),
                "{id}: {:.1} vs {:.1} MB/s",
                s.stream_mb_s(1),
                n.stream_mb_s(1)
            );
            assert!(
                s.wasted_bytes * 10 < s.backing_bytes,
                "{id}: {} of {} bytes wasted",
                s.wasted_bytes,
                s.backing_bytes
            );
        }
    }
}
