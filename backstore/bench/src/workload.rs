//! The benchmark's workloads as data: initiator-side request generators
//! over the LUNs of one simulated device, read from TOML workload files.
//!
//! The standard set (W1..W5 of issue 5) is shipped as files in
//! `docs/readahead/workloads/` and compiled in ([`standard`]); a user's own
//! file is parsed by [`parse_workloads`] (`rustgt bench readahead
//! --workload FILE`). The format is documented in `docs/readahead.md`
//! ("Workload files").
//!
//! | id | what |
//! |---|---|
//! | W1-qd1, W1-qd4 | one sequential stream of 64 KiB reads at QD1 / QD4 |
//! | W2-2 | the seed: two streams at 0% and 90% of the RAID-0, 64 KiB, QD1 each |
//! | W2-seed | the seed as it was served: two LUNs, the first and last 10% of the RAID-0, each with its own I/O context, one 64 KiB QD1 stream each |
//! | W2-4, -8, -16 | that many streams at evenly spaced offsets, 64 KiB, QD1 each |
//! | W3-N (N = 1, 5, 8, 32) | one stream read N chunks of 64 KiB at a time (as NFS splits a read into rsize chunks), the chunks reaching the N workers in shuffled order; `W3-N-inorder` is the same in order |
//! | W4-uniform | 4 KiB random reads over the LUN, QD4 |
//! | W4-clustered | 4 KiB random reads in clusters of 8 inside a random 1 MiB region, QD4 |
//! | W5 | the two seed streams plus a 4 KiB random reader at QD1 |
//!
//! Every position and size is resolved to bytes at parse time (percentages
//! of the device exactly, in integers), so a parsed [`Workload`] is plain
//! data and a run of it is as deterministic as before.

use std::fmt;

use serde::Deserialize;

use rustgt_backstore::hddsim::ArrayParams;

/// Which way a sequential stream walks its region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Upward, from the region's first byte.
    #[default]
    Forward,
    /// Downward, from the region's last request.
    Reverse,
}

/// How one initiator stream produces requests.
#[derive(Debug, Clone, PartialEq)]
pub enum Pattern {
    /// `req`-byte reads `stride` bytes apart over `[start, start + len)`,
    /// upward or downward, `qd` outstanding; at the end of the region the
    /// stream starts over at its beginning.
    Sequential {
        start: u64,
        len: u64,
        req: u64,
        stride: u64,
        qd: usize,
        direction: Direction,
    },
    /// Consecutive reads in groups of `n` issued together (shuffled when
    /// `shuffle`); the next group goes when the whole group completed.
    Batched {
        start: u64,
        req: u64,
        n: usize,
        shuffle: bool,
    },
    /// `req`-byte reads at random aligned offsets in `[lo, hi)`, `qd`
    /// outstanding; with `cluster = Some((span, count))`, `count` reads fall
    /// in one random `span`-aligned region before the next region is drawn.
    Random {
        lo: u64,
        hi: u64,
        req: u64,
        qd: usize,
        cluster: Option<(u64, u32)>,
    },
}

impl Pattern {
    /// The device byte where the stream starts.
    pub fn start(&self) -> u64 {
        match self {
            Pattern::Sequential { start, .. } | Pattern::Batched { start, .. } => *start,
            Pattern::Random { lo, .. } => *lo,
        }
    }

    /// Whether this stream is one of the sequential ones.
    pub fn is_sequential(&self) -> bool {
        !matches!(self, Pattern::Random { .. })
    }

    /// Bytes per request.
    pub fn request(&self) -> u64 {
        match self {
            Pattern::Sequential { req, .. }
            | Pattern::Batched { req, .. }
            | Pattern::Random { req, .. } => *req,
        }
    }
}

/// One initiator stream: its pattern and when it issues.
#[derive(Debug, Clone, PartialEq)]
pub struct Stream {
    pub pattern: Pattern,
    /// Pause between a completion and the next request (batched: the next
    /// group), virtual ns.
    pub think_ns: u64,
    /// When the stream issues its first request, virtual ns.
    pub start_ns: u64,
}

impl From<Pattern> for Stream {
    fn from(pattern: Pattern) -> Self {
        Self {
            pattern,
            think_ns: 0,
            start_ns: 0,
        }
    }
}

impl Stream {
    /// The device byte where the stream starts.
    pub fn start(&self) -> u64 {
        self.pattern.start()
    }

    /// Whether this stream is one of the sequential ones.
    pub fn is_sequential(&self) -> bool {
        self.pattern.is_sequential()
    }
}

/// Settings a workload file may fix for its own runs; `None` keeps the
/// benchmark's (command line) value.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Overrides {
    /// I/O threads per LUN.
    pub io_threads: Option<usize>,
    /// Readahead cache per LUN, bytes.
    pub cache_bytes: Option<u64>,
    /// Largest readahead window, bytes.
    pub max_readahead: Option<u64>,
    /// Largest backing read, bytes.
    pub max_io: Option<u64>,
    /// Link payload rate, bytes per second (0: unlimited).
    pub link_rate: Option<f64>,
    /// Command round trip, ns.
    pub link_rtt_ns: Option<u64>,
    /// Disks in the RAID-0.
    pub disks: Option<u32>,
}

/// One workload: its streams, LUNs and setup.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Short id, e.g. "W2-16".
    pub id: String,
    /// A group several workloads share (W1..W5), for `--only`.
    pub group: String,
    pub title: String,
    pub streams: Vec<Stream>,
    /// Workers of each LUN (W3 uses N).
    pub workers: usize,
    /// LUNs as `(offset on the device, bytes)`, each with its own I/O
    /// context and workers; a stream belongs to the LUN holding its first
    /// byte. Empty: one LUN spanning the device.
    pub luns: Vec<(u64, u64)>,
    /// Device byte ranges `(offset, len)` cached before the run starts, in
    /// the LUN holding `offset` (clipped to it and to its cache).
    pub prewarm: Vec<(u64, u64)>,
    pub overrides: Overrides,
}

const KIB: u64 = 1024;
/// The request size of the sequential streams (the seed's dd bs=64K).
pub const SEQ_REQ: u64 = 64 * KIB;
/// LUN offsets and sizes in workload files are rounded down to this.
pub const LUN_ALIGN: u64 = SEQ_REQ;

impl Workload {
    /// The LUN serving a request at device byte `offset`.
    pub fn lun_of(&self, offset: u64) -> usize {
        self.luns
            .iter()
            .position(|&(base, len)| offset >= base && offset - base < len)
            .unwrap_or(0)
    }
}

/// The shipped workload files, compiled in.
pub const BUILTIN_FILES: [(&str, &str); 5] = [
    (
        "docs/readahead/workloads/W1.toml",
        include_str!("../../../docs/readahead/workloads/W1.toml"),
    ),
    (
        "docs/readahead/workloads/W2.toml",
        include_str!("../../../docs/readahead/workloads/W2.toml"),
    ),
    (
        "docs/readahead/workloads/W3.toml",
        include_str!("../../../docs/readahead/workloads/W3.toml"),
    ),
    (
        "docs/readahead/workloads/W4.toml",
        include_str!("../../../docs/readahead/workloads/W4.toml"),
    ),
    (
        "docs/readahead/workloads/W5.toml",
        include_str!("../../../docs/readahead/workloads/W5.toml"),
    ),
];

/// The mixed workload of issue 13 (sequential streams beside random
/// readers), shipped beside the standard set but not part of it.
pub const MIX_FILE: (&str, &str) = (
    "docs/readahead/workloads/mix.toml",
    include_str!("../../../docs/readahead/workloads/mix.toml"),
);

/// Workloads the policies were not tuned on (issues 13 and 35), shipped
/// beside the standard set but not part of it: the mix of [`MIX_FILE`],
/// strided and reverse readers, many streams, caches smaller than streams
/// x window, and strides with gaps of 4x to 64x the request.
pub const UNTUNED_FILES: [(&str, &str); 5] = [
    MIX_FILE,
    (
        "docs/readahead/workloads/stride.toml",
        include_str!("../../../docs/readahead/workloads/stride.toml"),
    ),
    (
        "docs/readahead/workloads/many.toml",
        include_str!("../../../docs/readahead/workloads/many.toml"),
    ),
    (
        "docs/readahead/workloads/small-cache.toml",
        include_str!("../../../docs/readahead/workloads/small-cache.toml"),
    ),
    (
        "docs/readahead/workloads/stride-wide.toml",
        include_str!("../../../docs/readahead/workloads/stride-wide.toml"),
    ),
];

/// The standard set on the default md0 with `workers` workers per LUN.
///
/// # Panics
///
/// Only if a shipped file is malformed, which the unit tests rule out.
pub fn standard(array: &ArrayParams, workers: usize) -> Vec<Workload> {
    BUILTIN_FILES
        .iter()
        .flat_map(|(name, text)| {
            parse_workloads(text, name, array, workers).expect("shipped workload files parse")
        })
        .collect()
}

/// A workload file that does not parse: the file, the key and what is
/// wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadError {
    pub file: String,
    /// Key path, e.g. `workload[0].streams[1].request`; empty for a TOML
    /// syntax error (whose message gives the line and column).
    pub key: String,
    pub message: String,
}

impl fmt::Display for WorkloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "{}: {}", self.file, self.message)
        } else {
            write!(f, "{}: {}: {}", self.file, self.key, self.message)
        }
    }
}

impl std::error::Error for WorkloadError {}

/// A size or position: an integer of bytes, or a string.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum Value {
    Int(u64),
    Text(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDoc {
    #[serde(default)]
    workload: Vec<WorkloadDoc>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkloadDoc {
    id: String,
    group: Option<String>,
    title: Option<String>,
    workers: Option<usize>,
    io_threads: Option<usize>,
    cache: Option<Value>,
    max_readahead: Option<Value>,
    io_max: Option<Value>,
    disks: Option<u32>,
    link_mbps: Option<f64>,
    link_rtt_us: Option<f64>,
    #[serde(default)]
    luns: Vec<LunDoc>,
    #[serde(default)]
    streams: Vec<StreamDoc>,
    #[serde(default)]
    prewarm: Vec<RangeDoc>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LunDoc {
    offset: Value,
    size: Value,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RangeDoc {
    offset: Value,
    length: Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Kind {
    Sequential,
    Batched,
    Random,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StreamDoc {
    kind: Kind,
    count: Option<usize>,
    step: Option<Value>,
    start: Option<Value>,
    length: Option<Value>,
    request: Option<Value>,
    stride: Option<Value>,
    direction: Option<Direction>,
    qd: Option<usize>,
    think_us: Option<f64>,
    start_ms: Option<f64>,
    batch: Option<usize>,
    shuffle: Option<bool>,
    cluster_span: Option<Value>,
    cluster_count: Option<u32>,
}

/// Most streams one workload may have (copies included).
const MAX_STREAMS: usize = 4096;
/// Largest queue depth or batch of one stream.
const MAX_DEPTH: usize = 1024;

/// Parses `text`, the contents of workload file `file`, resolving
/// percentages against the device `array` (or the file's own `disks`);
/// `workers` is the default of a workload that sets none.
pub fn parse_workloads(
    text: &str,
    file: &str,
    array: &ArrayParams,
    workers: usize,
) -> Result<Vec<Workload>, WorkloadError> {
    let err = |key: String, message: String| WorkloadError {
        file: file.to_owned(),
        key,
        message,
    };
    let doc: FileDoc = toml::from_str(text).map_err(|e| err(String::new(), e.to_string()))?;
    if doc.workload.is_empty() {
        return Err(err(
            "workload".into(),
            "the file defines no [[workload]]".into(),
        ));
    }
    let mut out: Vec<Workload> = Vec::new();
    for (i, w) in doc.workload.iter().enumerate() {
        let key = format!("workload[{i}]");
        let parsed = parse_one(w, &key, array, workers).map_err(|(k, m)| err(k, m))?;
        if out.iter().any(|o| o.id.eq_ignore_ascii_case(&parsed.id)) {
            return Err(err(
                format!("{key}.id"),
                format!("{:?} is used twice", parsed.id),
            ));
        }
        out.push(parsed);
    }
    Ok(out)
}

type Problem = (String, String);

fn parse_one(
    w: &WorkloadDoc,
    key: &str,
    array: &ArrayParams,
    workers: usize,
) -> Result<Workload, Problem> {
    let k = |name: &str| format!("{key}.{name}");
    if w.id.trim().is_empty() || w.id.contains(',') {
        return Err((k("id"), "must be non-empty and without commas".into()));
    }
    let disks = match w.disks {
        Some(d) if !(1..=64).contains(&d) => {
            return Err((k("disks"), format!("{d} is not 1..=64")))
        }
        d => d,
    };
    let array = ArrayParams {
        disks: disks.unwrap_or(array.disks),
        ..*array
    };
    let capacity = array.capacity();
    let workers = match w.workers {
        Some(n) if !(1..=1024).contains(&n) => {
            return Err((k("workers"), format!("{n} is not 1..=1024")))
        }
        Some(n) => n,
        None => workers.max(1),
    };
    let io_threads = match w.io_threads {
        Some(n) if !(1..=256).contains(&n) => {
            return Err((k("io_threads"), format!("{n} is not 1..=256")))
        }
        n => n,
    };
    let size_key = |name: &str, v: &Option<Value>, min: u64| -> Result<Option<u64>, Problem> {
        match v {
            None => Ok(None),
            Some(v) => match size(v) {
                Some(n) if n >= min => Ok(Some(n)),
                _ => Err((
                    k(name),
                    format!("{} is not a size of at least {min}", show(v)),
                )),
            },
        }
    };
    let link_rate = match w.link_mbps {
        Some(r) if !(r.is_finite() && r >= 0.0) => {
            return Err((k("link_mbps"), format!("{r} is not a rate >= 0")))
        }
        r => r.map(|r| r * 1e6),
    };
    let overrides = Overrides {
        io_threads,
        cache_bytes: size_key("cache", &w.cache, 1 << 20)?,
        max_readahead: size_key("max_readahead", &w.max_readahead, 4096)?,
        max_io: size_key("io_max", &w.io_max, 4096)?,
        link_rate,
        link_rtt_ns: match w.link_rtt_us {
            Some(us) if !(us.is_finite() && (0.0..=1e6).contains(&us)) => {
                return Err((k("link_rtt_us"), format!("{us} is not 0..=1000000")))
            }
            us => us.map(|us| (us * 1e3) as u64),
        },
        disks,
    };
    let mut luns = Vec::new();
    for (j, l) in w.luns.iter().enumerate() {
        let lk = format!("{key}.luns[{j}]");
        let offset = position(&l.offset, capacity)
            .ok_or_else(|| (format!("{lk}.offset"), not_a_position(&l.offset)))?
            / LUN_ALIGN
            * LUN_ALIGN;
        let len = position(&l.size, capacity)
            .ok_or_else(|| (format!("{lk}.size"), not_a_position(&l.size)))?
            / LUN_ALIGN
            * LUN_ALIGN;
        if len == 0 || offset.saturating_add(len) > capacity {
            return Err((
                format!("{lk}.size"),
                format!("the LUN must be non-empty and end within the device ({capacity} bytes)"),
            ));
        }
        if luns
            .iter()
            .any(|&(b, n): &(u64, u64)| offset < b + n && b < offset + len)
        {
            return Err((format!("{lk}.offset"), "overlaps an earlier LUN".into()));
        }
        luns.push((offset, len));
    }
    let lun_end = |at: u64| -> u64 {
        luns.iter()
            .find(|&&(b, n)| at >= b && at - b < n)
            .map_or(capacity, |&(b, n)| b + n)
    };
    let mut streams = Vec::new();
    for (j, s) in w.streams.iter().enumerate() {
        let sk = format!("{key}.streams[{j}]");
        let mut copies = parse_stream(s, &sk, capacity, &lun_end)?;
        if streams.len() + copies.len() > MAX_STREAMS {
            return Err((
                sk,
                format!("more than {MAX_STREAMS} streams in the workload"),
            ));
        }
        streams.append(&mut copies);
    }
    if streams.is_empty() {
        return Err((k("streams"), "the workload has no stream".into()));
    }
    let mut prewarm = Vec::new();
    for (j, r) in w.prewarm.iter().enumerate() {
        let rk = format!("{key}.prewarm[{j}]");
        let offset = position(&r.offset, capacity)
            .filter(|&o| o < capacity)
            .ok_or_else(|| (format!("{rk}.offset"), not_a_position(&r.offset)))?;
        let len = position(&r.length, capacity)
            .filter(|&n| n > 0)
            .ok_or_else(|| (format!("{rk}.length"), not_a_position(&r.length)))?;
        prewarm.push((offset, len.min(capacity - offset)));
    }
    Ok(Workload {
        id: w.id.clone(),
        group: w.group.clone().unwrap_or_else(|| w.id.clone()),
        title: w.title.clone().unwrap_or_else(|| w.id.clone()),
        streams,
        workers,
        luns,
        prewarm,
        overrides,
    })
}

/// One `[[workload.streams]]` entry, as `count` streams.
fn parse_stream(
    s: &StreamDoc,
    key: &str,
    capacity: u64,
    lun_end: &dyn Fn(u64) -> u64,
) -> Result<Vec<Stream>, Problem> {
    let k = |name: &str| format!("{key}.{name}");
    let only = |name: &str, set: bool, kinds: &str| -> Result<(), Problem> {
        if set {
            Err((k(name), format!("applies to {kinds} streams only")))
        } else {
            Ok(())
        }
    };
    let seq = s.kind == Kind::Sequential;
    only("stride", s.stride.is_some() && !seq, "sequential")?;
    only("direction", s.direction.is_some() && !seq, "sequential")?;
    only(
        "qd",
        s.qd.is_some() && s.kind == Kind::Batched,
        "sequential and random",
    )?;
    only(
        "batch",
        (s.batch.is_some() || s.shuffle.is_some()) && s.kind != Kind::Batched,
        "batched",
    )?;
    only(
        "cluster_span",
        (s.cluster_span.is_some() || s.cluster_count.is_some()) && s.kind != Kind::Random,
        "random",
    )?;
    only(
        "length",
        s.length.is_some() && s.kind == Kind::Batched,
        "sequential and random",
    )?;
    let req = match &s.request {
        None => match s.kind {
            Kind::Random => 4 * KIB,
            _ => SEQ_REQ,
        },
        Some(v) => size(v)
            .filter(|&n| n >= 512 && n % 512 == 0 && n <= 64 << 20)
            .ok_or_else(|| {
                (
                    k("request"),
                    format!("{} is not a multiple of 512 bytes up to 64M", show(v)),
                )
            })?,
    };
    let depth = |name: &str, v: Option<usize>| -> Result<usize, Problem> {
        match v {
            None => Ok(1),
            Some(n) if (1..=MAX_DEPTH).contains(&n) => Ok(n),
            Some(n) => Err((k(name), format!("{n} is not 1..={MAX_DEPTH}"))),
        }
    };
    let ms_or_us = |name: &str, v: Option<f64>, scale: f64| -> Result<u64, Problem> {
        match v {
            None => Ok(0),
            Some(x) if x.is_finite() && (0.0..=3.6e9).contains(&x) => Ok((x * scale) as u64),
            Some(x) => Err((k(name), format!("{x} is not a time >= 0"))),
        }
    };
    let think_ns = ms_or_us("think_us", s.think_us, 1e3)?;
    let start_ns = ms_or_us("start_ms", s.start_ms, 1e6)?;
    let count = match s.count {
        None => 1,
        Some(n) if (1..=MAX_STREAMS).contains(&n) => n,
        Some(n) => return Err((k("count"), format!("{n} is not 1..={MAX_STREAMS}"))),
    };
    let step = match &s.step {
        None if count > 1 => return Err((k("step"), "is needed with count > 1".into())),
        None => 0,
        Some(v) => position(v, capacity).ok_or_else(|| (k("step"), not_a_position(v)))?,
    };
    let base = match &s.start {
        None => 0,
        Some(v) => position(v, capacity).ok_or_else(|| (k("start"), not_a_position(v)))?,
    };
    let length = match &s.length {
        None => None,
        Some(v) => Some(position(v, capacity).ok_or_else(|| (k("length"), not_a_position(v)))?),
    };
    let stride = match &s.stride {
        None => req,
        Some(v) => size(v)
            .filter(|&n| n > 0 && n % 512 == 0)
            .ok_or_else(|| (k("stride"), format!("{} is not a multiple of 512", show(v))))?,
    };
    let mut out = Vec::with_capacity(count);
    for c in 0..count as u64 {
        let raw = base.saturating_add(step.saturating_mul(c));
        let start = raw / req * req;
        if start.saturating_add(req) > capacity {
            return Err((
                k(if c == 0 { "start" } else { "step" }),
                format!("stream {c} starts at byte {raw}, past the device ({capacity} bytes)"),
            ));
        }
        let end = match length {
            Some(n) => start.saturating_add(n).min(capacity),
            None => lun_end(start),
        };
        if end.saturating_sub(start) < req {
            return Err((k("length"), "shorter than one request".into()));
        }
        let pattern = match s.kind {
            Kind::Sequential => Pattern::Sequential {
                start,
                len: end - start,
                req,
                stride,
                qd: depth("qd", s.qd)?,
                direction: s.direction.unwrap_or_default(),
            },
            Kind::Batched => Pattern::Batched {
                start,
                req,
                n: depth("batch", s.batch)?,
                shuffle: s.shuffle.unwrap_or(false),
            },
            Kind::Random => Pattern::Random {
                lo: start,
                hi: end,
                req,
                qd: depth("qd", s.qd)?,
                cluster: match (&s.cluster_span, s.cluster_count) {
                    (None, None) => None,
                    (Some(v), n) => {
                        let span = size(v)
                            .filter(|&x| x >= req && x % req == 0 && x <= end - start)
                            .ok_or_else(|| {
                                (
                                    k("cluster_span"),
                                    format!(
                                        "{} is not a multiple of the request within the region",
                                        show(v)
                                    ),
                                )
                            })?;
                        let n = n.unwrap_or(8);
                        if n == 0 {
                            return Err((k("cluster_count"), "must be at least 1".into()));
                        }
                        Some((span, n))
                    }
                    (None, Some(_)) => {
                        return Err((k("cluster_count"), "needs cluster_span".into()))
                    }
                },
            },
        };
        out.push(Stream {
            pattern,
            think_ns,
            start_ns,
        });
    }
    Ok(out)
}

fn show(v: &Value) -> String {
    match v {
        Value::Int(n) => n.to_string(),
        Value::Text(s) => format!("{s:?}"),
    }
}

fn not_a_position(v: &Value) -> String {
    format!(
        "{} is not a byte count, a size such as \"4G\" or a percentage of the device such as \"90%\"",
        show(v)
    )
}

/// A size: bytes, or a string such as "64K" (binary units).
fn size(v: &Value) -> Option<u64> {
    match v {
        Value::Int(n) => Some(*n),
        Value::Text(s) => rustgt_backstore::parse_size(s),
    }
}

/// A size, or a percentage of `capacity` with up to 6 decimals ("6.25%"),
/// computed exactly (rounded down to a byte).
fn position(v: &Value, capacity: u64) -> Option<u64> {
    let Value::Text(s) = v else {
        return size(v);
    };
    let Some(pct) = s.trim().strip_suffix('%') else {
        return size(v);
    };
    let pct = pct.trim();
    let (whole, frac) = pct.split_once('.').unwrap_or((pct, ""));
    if whole.is_empty()
        || frac.len() > 6
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let scale = 10u128.pow(frac.len() as u32);
    let num: u128 = format!("{whole}{frac}").parse().ok()?;
    if num > 100 * scale {
        return None;
    }
    u64::try_from(u128::from(capacity) * num / (100 * scale)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set() -> Vec<Workload> {
        standard(&ArrayParams::default(), 8)
    }

    fn seq(start: u64, len: u64, qd: usize) -> Pattern {
        Pattern::Sequential {
            start,
            len,
            req: SEQ_REQ,
            stride: SEQ_REQ,
            qd,
            direction: Direction::Forward,
        }
    }

    #[test]
    fn the_standard_set_covers_w1_to_w5() {
        let set = set();
        let ids: Vec<&str> = set.iter().map(|w| w.id.as_str()).collect();
        assert_eq!(ids.len(), 18, "{ids:?}");
        for g in ["W1", "W2", "W3", "W4", "W5"] {
            assert!(set.iter().any(|w| w.group == g), "{g}");
        }
        let size = ArrayParams::default().capacity();
        assert_eq!(size, 500_000_000_000);
        let seed = set.iter().find(|w| w.id == "W2-2").expect("seed workload");
        let at = 450_000_000_000 / SEQ_REQ * SEQ_REQ;
        assert_eq!(
            seed.streams.get(1).map(|s| &s.pattern),
            Some(&seq(at, size - at, 1))
        );
        let w3 = set.iter().find(|w| w.id == "W3-32").expect("W3-32");
        assert_eq!(w3.workers, 32);
        assert_eq!(
            w3.streams.first().map(|s| &s.pattern),
            Some(&Pattern::Batched {
                start: 0,
                req: SEQ_REQ,
                n: 32,
                shuffle: true
            })
        );
        // The end-to-end LUNs (tests/bench/seed-e2e): 49 999 970 304 bytes
        // each, the second at byte 449 999 994 880.
        let two = set.iter().find(|w| w.id == "W2-seed").expect("W2-seed");
        assert_eq!(
            two.luns,
            vec![(0, 49_999_970_304), (449_999_994_880, 49_999_970_304)]
        );
        assert_eq!(two.lun_of(449_999_994_880), 1);
        assert_eq!(two.lun_of(1 << 20), 0);
        // A stream ends with its LUN.
        assert_eq!(
            two.streams.get(1).map(|s| &s.pattern),
            Some(&seq(449_999_994_880, 49_999_970_304, 1))
        );
        // The evenly spaced streams, as size / n * i.
        let w16 = set.iter().find(|w| w.id == "W2-16").expect("W2-16");
        let starts: Vec<u64> = w16.streams.iter().map(Stream::start).collect();
        let want: Vec<u64> = (0..16).map(|i| size / 16 * i / SEQ_REQ * SEQ_REQ).collect();
        assert_eq!(starts, want);
        let w4 = set.iter().find(|w| w.id == "W4-clustered").expect("W4");
        assert_eq!(
            w4.streams.first().map(|s| &s.pattern),
            Some(&Pattern::Random {
                lo: 0,
                hi: size,
                req: 4096,
                qd: 4,
                cluster: Some((1 << 20, 8))
            })
        );
        let w5 = set.iter().find(|w| w.id == "W5").expect("W5");
        assert_eq!(w5.streams.len(), 3);
        assert!(!w5.streams.iter().all(Stream::is_sequential));
    }

    #[test]
    fn the_mix_file_parses() {
        let (name, text) = MIX_FILE;
        let set = parse_workloads(text, name, &ArrayParams::default(), 8).expect("mix");
        assert!(set.len() >= 2);
        for (name, text) in UNTUNED_FILES {
            let set = parse_workloads(text, name, &ArrayParams::default(), 8).expect(name);
            assert!(set.len() >= 2, "{name}");
        }
    }

    const ONE: &str = r#"
[[workload]]
id = "mine"
workers = 4
io_threads = 2
cache = "16M"
link_mbps = 0
link_rtt_us = 50

[[workload.luns]]
offset = "0%"
size = "50%"

[[workload.streams]]
kind = "sequential"
start = "1G"
length = "8M"
request = "128K"
stride = "256K"
direction = "reverse"
qd = 2
think_us = 100
start_ms = 5

[[workload.streams]]
kind = "random"
count = 2
start = "10%"
step = "5%"
length = "1G"
qd = 4

[[workload.prewarm]]
offset = "1G"
length = "4M"
"#;

    #[test]
    fn a_users_file_sets_every_knob() {
        let a = ArrayParams::default();
        let set = parse_workloads(ONE, "one.toml", &a, 8).expect("parses");
        let [w] = set.as_slice() else {
            panic!("one workload: {set:?}")
        };
        assert_eq!(
            (w.id.as_str(), w.group.as_str(), w.workers),
            ("mine", "mine", 4)
        );
        assert_eq!(w.luns, vec![(0, a.capacity() / 2 / LUN_ALIGN * LUN_ALIGN)]);
        assert_eq!(w.overrides.io_threads, Some(2));
        assert_eq!(w.overrides.cache_bytes, Some(16 << 20));
        assert_eq!(w.overrides.link_rate, Some(0.0));
        assert_eq!(w.overrides.link_rtt_ns, Some(50_000));
        assert_eq!(w.prewarm, vec![(1 << 30, 4 << 20)]);
        let first = w.streams.first().expect("stream");
        assert_eq!(
            first.pattern,
            Pattern::Sequential {
                start: 1 << 30,
                len: 8 << 20,
                req: 128 << 10,
                stride: 256 << 10,
                qd: 2,
                direction: Direction::Reverse
            }
        );
        assert_eq!((first.think_ns, first.start_ns), (100_000, 5_000_000));
        let lo: Vec<u64> = w.streams.iter().skip(1).map(Stream::start).collect();
        // Starts are rounded down to the request size.
        assert_eq!(
            lo,
            vec![50_000_000_000 / 4096 * 4096, 75_000_000_000 / 4096 * 4096]
        );
    }

    fn error(text: &str) -> WorkloadError {
        parse_workloads(text, "bad.toml", &ArrayParams::default(), 8).expect_err("refused")
    }

    #[test]
    fn errors_name_the_file_and_the_key() {
        let stream = |extra: &str| {
            format!(
                "[[workload]]\nid = \"x\"\n[[workload.streams]]\nkind = \"sequential\"\n{extra}\n"
            )
        };
        let cases = [
            (stream("request = \"4X\""), "workload[0].streams[0].request"),
            (stream("start = \"101%\""), "workload[0].streams[0].start"),
            (stream("batch = 4"), "workload[0].streams[0].batch"),
            (stream("qd = 0"), "workload[0].streams[0].qd"),
            (stream("count = 3"), "workload[0].streams[0].step"),
            (stream("length = \"4K\""), "workload[0].streams[0].length"),
            (stream("think_us = -1.0"), "workload[0].streams[0].think_us"),
            (
                "[[workload]]\nid = \"x\"\nworkers = 0\n".into(),
                "workload[0].workers",
            ),
            ("[[workload]]\nid = \"x\"\n".into(), "workload[0].streams"),
            (
                format!(
                    "{}[[workload.luns]]\noffset = \"0\"\nsize = \"0\"\n",
                    stream("")
                ),
                "workload[0].luns[0].size",
            ),
        ];
        for (text, key) in cases {
            let e = error(&text);
            assert_eq!(e.key, key, "{text}: {e}");
            assert!(
                e.to_string().starts_with(&format!("bad.toml: {key}: ")),
                "{e}"
            );
        }
        // Unknown keys and wrong types come from serde, with the line.
        let e = error(&stream("colour = \"blue\""));
        assert!(
            e.to_string().contains("bad.toml") && e.message.contains("colour"),
            "{e}"
        );
        let e = error(&stream("direction = \"sideways\""));
        assert!(e.message.contains("sideways"), "{e}");
        let e = error("");
        assert_eq!(e.key, "workload");
    }

    #[test]
    fn percentages_are_exact() {
        let c = 500_000_000_000;
        let p = |s: &str| position(&Value::Text(s.into()), c);
        assert_eq!(p("6.25%"), Some(31_250_000_000));
        assert_eq!(p("90%"), Some(450_000_000_000));
        assert_eq!(p("100%"), Some(c));
        assert_eq!(p("0.000001%"), Some(5000));
        assert_eq!(p("100.5%"), None);
        assert_eq!(p("%"), None);
        assert_eq!(p("-1%"), None);
        assert_eq!(p("1G"), Some(1 << 30));
        assert_eq!(position(&Value::Int(7), c), Some(7));
    }
}
