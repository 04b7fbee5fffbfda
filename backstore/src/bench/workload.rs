//! The benchmark's workloads, W1..W5 of issue 5, as initiator-side request
//! generators over one LUN that spans the whole simulated device.
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

/// How one initiator stream produces requests.
#[derive(Debug, Clone, PartialEq)]
pub enum Pattern {
    /// Consecutive `req`-byte reads from `start`, `qd` outstanding.
    Sequential { start: u64, req: u64, qd: usize },
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
}

/// One workload: its streams and how many workers the LUN runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Short id, e.g. "W2-16".
    pub id: String,
    /// W1..W5.
    pub group: &'static str,
    pub title: String,
    pub streams: Vec<Pattern>,
    /// Workers of each LUN (W3 uses N).
    pub workers: usize,
    /// LUNs as `(offset on the device, bytes)`, each with its own I/O
    /// context and workers; a stream belongs to the LUN holding its first
    /// byte. Empty: one LUN spanning the device.
    pub luns: Vec<(u64, u64)>,
}

const KIB: u64 = 1024;
/// The request size of the sequential streams (the seed's dd bs=64K).
pub const SEQ_REQ: u64 = 64 * KIB;

impl Workload {
    fn new(
        id: &str,
        group: &'static str,
        title: &str,
        streams: Vec<Pattern>,
        workers: usize,
    ) -> Self {
        Self {
            id: id.into(),
            group,
            title: title.into(),
            streams,
            workers,
            luns: Vec::new(),
        }
    }

    /// The LUN serving a request at device byte `offset`.
    pub fn lun_of(&self, offset: u64) -> usize {
        self.luns
            .iter()
            .position(|&(base, len)| offset >= base && offset - base < len)
            .unwrap_or(0)
    }
}

/// A sequential 64 KiB QD1 stream from byte `start`, aligned to 64 KiB.
fn seq(start: u64, qd: usize) -> Pattern {
    Pattern::Sequential {
        start: start / SEQ_REQ * SEQ_REQ,
        req: SEQ_REQ,
        qd,
    }
}

/// The standard set on a LUN of `size` bytes with `workers` workers.
pub fn standard(size: u64, workers: usize) -> Vec<Workload> {
    let mut w = vec![
        Workload::new(
            "W1-qd1",
            "W1",
            "one sequential stream, 64 KiB, QD1",
            vec![seq(0, 1)],
            workers,
        ),
        Workload::new(
            "W1-qd4",
            "W1",
            "one sequential stream, 64 KiB, QD4",
            vec![seq(0, 4)],
            workers,
        ),
        Workload::new(
            "W2-2",
            "W2",
            "seed: two streams at 0% and 90% of the RAID-0, 64 KiB, QD1 each",
            vec![seq(0, 1), seq(size / 10 * 9, 1)],
            workers,
        ),
    ];
    // The seed's LUNs: the first and last 10%, whole 64 KiB chunks.
    let tenth = size / 10 / SEQ_REQ * SEQ_REQ;
    let last = size / 10 * 9 / SEQ_REQ * SEQ_REQ;
    let mut seed = Workload::new(
        "W2-seed",
        "W2",
        "seed as served: two LUNs (first and last 10% of the RAID-0), one 64 KiB QD1 stream each",
        vec![seq(0, 1), seq(last, 1)],
        workers,
    );
    seed.luns = vec![(0, tenth), (last, tenth)];
    w.push(seed);
    for n in [4u64, 8, 16] {
        w.push(Workload::new(
            &format!("W2-{n}"),
            "W2",
            &format!("{n} interleaved streams on distinct regions, 64 KiB, QD1 each"),
            (0..n).map(|i| seq(size / n * i, 1)).collect(),
            workers,
        ));
    }
    for n in [1usize, 5, 8, 32] {
        for shuffle in [true, false] {
            let id = if shuffle {
                format!("W3-{n}")
            } else {
                format!("W3-{n}-inorder")
            };
            let how = if shuffle { "out of order" } else { "in order" };
            w.push(Workload::new(
                &id,
                "W3",
                &format!("one stream in groups of {n} x 64 KiB chunks served {how} by {n} workers"),
                vec![Pattern::Batched {
                    start: 0,
                    req: SEQ_REQ,
                    n,
                    shuffle,
                }],
                n,
            ));
        }
    }
    let random = |cluster| Pattern::Random {
        lo: 0,
        hi: size,
        req: 4 * KIB,
        qd: 4,
        cluster,
    };
    w.push(Workload::new(
        "W4-uniform",
        "W4",
        "uniform random 4 KiB reads, QD4",
        vec![random(None)],
        workers,
    ));
    w.push(Workload::new(
        "W4-clustered",
        "W4",
        "clustered random 4 KiB reads (8 per random 1 MiB region), QD4",
        vec![random(Some((1 << 20, 8)))],
        workers,
    ));
    w.push(Workload::new(
        "W5",
        "W5",
        "the two seed streams plus 4 KiB random reads at QD1",
        vec![
            seq(0, 1),
            seq(size / 10 * 9, 1),
            Pattern::Random {
                lo: 0,
                hi: size,
                req: 4 * KIB,
                qd: 1,
                cluster: None,
            },
        ],
        workers,
    ));
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_standard_set_covers_w1_to_w5() {
        let set = standard(500_000_000_000, 8);
        let groups: Vec<&str> = set.iter().map(|w| w.group).collect();
        for g in ["W1", "W2", "W3", "W4", "W5"] {
            assert!(groups.contains(&g), "{g}");
        }
        let seed = set.iter().find(|w| w.id == "W2-2").expect("seed workload");
        assert_eq!(
            seed.streams.get(1),
            Some(&Pattern::Sequential {
                start: 450_000_000_000 / SEQ_REQ * SEQ_REQ,
                req: SEQ_REQ,
                qd: 1
            })
        );
        let w3 = set.iter().find(|w| w.id == "W3-32").expect("W3-32");
        assert_eq!(w3.workers, 32);
        // The end-to-end LUNs (tests/bench/seed-e2e): 49 999 970 304 bytes
        // each, the second at byte 449 999 994 880.
        let two = set.iter().find(|w| w.id == "W2-seed").expect("W2-seed");
        assert_eq!(
            two.luns,
            vec![(0, 49_999_970_304), (449_999_994_880, 49_999_970_304)]
        );
        assert_eq!(two.lun_of(449_999_994_880), 1);
        assert_eq!(two.lun_of(1 << 20), 0);
    }
}
