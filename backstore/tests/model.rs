//! Model check: random sequences of writes, unmaps, WRITE SAMEs and reads
//! against a plain `Vec<u8>`, for the RAM engine (small chunks, so accesses
//! straddle chunk edges and the last chunk is short) and the file engine
//! (thin, thick and O_DIRECT). Out-of-range operations must fail and leave
//! the store unchanged.

use proptest::prelude::*;
use rustgt_backstore::{Backstore, BackstoreError, FileBackstore, FileOptions, RamBackstore};

const BLOCK: u64 = 512;
const BLOCKS: u64 = 64;
const SIZE: u64 = BLOCK * BLOCKS;

#[derive(Debug, Clone)]
enum Op {
    Write {
        block: u64,
        count: u64,
        seed: u8,
        fua: bool,
    },
    Unmap {
        block: u64,
        count: u64,
    },
    WriteSame {
        block: u64,
        count: u64,
        fill: u8,
    },
    Read {
        block: u64,
        count: u64,
    },
    Flush,
}

/// Block ranges that mostly fit, sometimes run past the end.
fn range() -> impl Strategy<Value = (u64, u64)> {
    (0..BLOCKS + 4, 0..20u64)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (range(), any::<u8>(), any::<bool>())
            .prop_map(|((block, count), seed, fua)| Op::Write { block, count, seed, fua }),
        2 => range().prop_map(|(block, count)| Op::Unmap { block, count }),
        // fill 0 exercises the zero-pattern (hole punching) paths.
        2 => (range(), prop_oneof![Just(0u8), any::<u8>()])
            .prop_map(|((block, count), fill)| Op::WriteSame { block, count, fill }),
        2 => range().prop_map(|(block, count)| Op::Read { block, count }),
        1 => Just(Op::Flush),
    ]
}

fn payload(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_add(seed).rotate_left(3))
        .collect()
}

/// The block-aligned byte range, or `None` when it does not fit the store.
fn bytes(block: u64, count: u64) -> Option<std::ops::Range<usize>> {
    let (start, len) = (block * BLOCK, count * BLOCK);
    (start + len <= SIZE).then(|| start as usize..(start + len) as usize)
}

fn expect_ok_or_oor(result: Result<(), BackstoreError>, fits: bool) -> Result<(), TestCaseError> {
    match result {
        Ok(()) => prop_assert!(fits, "out-of-range access succeeded"),
        Err(BackstoreError::OutOfRange { .. }) => prop_assert!(!fits, "in-range access refused"),
        Err(e) => prop_assert!(false, "unexpected error {e}"),
    }
    Ok(())
}

fn run(store: &dyn Backstore, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut model = vec![0u8; SIZE as usize];
    for op in ops {
        match *op {
            Op::Write {
                block,
                count,
                seed,
                fua,
            } => {
                let data = payload((count * BLOCK) as usize, seed);
                let range = bytes(block, count);
                expect_ok_or_oor(store.write_at(&data, block * BLOCK, fua), range.is_some())?;
                if let Some(r) = range {
                    model[r].copy_from_slice(&data);
                }
            }
            Op::Unmap { block, count } => {
                let range = bytes(block, count);
                expect_ok_or_oor(store.unmap(block * BLOCK, count * BLOCK), range.is_some())?;
                if let Some(r) = range {
                    model[r].fill(0);
                }
            }
            Op::WriteSame { block, count, fill } => {
                let pattern: Vec<u8> = if fill == 0 {
                    vec![0; BLOCK as usize]
                } else {
                    payload(BLOCK as usize, fill)
                };
                let range = bytes(block, count);
                let result = store.write_same(&pattern, block * BLOCK, count * BLOCK);
                expect_ok_or_oor(result, range.is_some())?;
                if let Some(r) = range {
                    for chunk in model[r].chunks_mut(BLOCK as usize) {
                        chunk.copy_from_slice(&pattern);
                    }
                }
            }
            Op::Read { block, count } => {
                let mut buf = vec![0xEE; (count * BLOCK) as usize];
                let range = bytes(block, count);
                expect_ok_or_oor(store.read_at(&mut buf, block * BLOCK), range.is_some())?;
                if let Some(r) = range {
                    prop_assert_eq!(&buf[..], &model[r]);
                }
            }
            Op::Flush => store
                .flush()
                .map_err(|e| TestCaseError::fail(e.to_string()))?,
        }
    }
    let mut all = vec![0xEE; SIZE as usize];
    store
        .read_at(&mut all, 0)
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(all, model);
    Ok(())
}

fn file_run(ops: &[Op], thin: bool, direct: bool) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().map_err(|e| TestCaseError::fail(e.to_string()))?;
    let opts = FileOptions {
        size: Some(SIZE),
        block_size: BLOCK as u32,
        thin,
        direct,
        ..FileOptions::default()
    };
    let store = FileBackstore::open(dir.path().join("lun"), &opts)
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    run(&store, ops)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn ram_matches_model(ops in prop::collection::vec(op(), 1..40), chunk in 1usize..8) {
        // Chunks of 1..8 blocks plus 100 odd bytes: never block-aligned.
        let store = RamBackstore::with_chunk_size(SIZE, BLOCK as u32, false, chunk * 512 + 100)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        run(&store, &ops)?;
    }

    #[test]
    fn thin_file_matches_model(ops in prop::collection::vec(op(), 1..40)) {
        file_run(&ops, true, false)?;
    }

    #[test]
    fn thick_file_matches_model(ops in prop::collection::vec(op(), 1..40)) {
        file_run(&ops, false, false)?;
    }

    #[test]
    fn direct_file_matches_model(ops in prop::collection::vec(op(), 1..40)) {
        file_run(&ops, true, true)?;
    }
}
