//! The configuration record of a store ([`BackstoreSpec`], opened by
//! [`crate::open`]) and its engine kinds, and parses human sizes ("64M", "1GiB") for the
//! daemon's configuration. Every problem is a [`BackstoreError::Config`]
//! that says what to fix.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use crate::error::{BackstoreError, Result};
use crate::rbd::RbdOptions;

/// Which engine backs a LUN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineKind {
    /// A regular file ([`crate::FileBackstore`]).
    File,
    /// A regular file, memory-mapped ([`crate::MmapBackstore`]).
    Mmap,
    /// A block device ([`crate::BlockDevBackstore`]).
    BlockDev,
    /// Memory ([`crate::RamBackstore`]).
    Ram,
    /// Zeros in, nothing kept ([`crate::NullBackstore`]).
    Null,
    /// A simulated 7200 rpm disk ([`crate::HddSimBackstore`]); data in RAM,
    /// or in a sparse file when a path is given.
    HddSim,
    /// A Ceph RBD image through librbd (cargo feature `rbd`).
    Rbd,
}

impl EngineKind {
    /// The configuration name: "file", "mmap", "blockdev", "ram", "null",
    /// "hddsim" or "rbd".
    pub fn as_str(&self) -> &'static str {
        match self {
            EngineKind::File => "file",
            EngineKind::Mmap => "mmap",
            EngineKind::BlockDev => "blockdev",
            EngineKind::Ram => "ram",
            EngineKind::Null => "null",
            EngineKind::HddSim => "hddsim",
            EngineKind::Rbd => "rbd",
        }
    }
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EngineKind {
    type Err = BackstoreError;

    /// Case-insensitive.
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "file" => Ok(EngineKind::File),
            "mmap" => Ok(EngineKind::Mmap),
            "blockdev" => Ok(EngineKind::BlockDev),
            "ram" => Ok(EngineKind::Ram),
            "null" => Ok(EngineKind::Null),
            "hddsim" => Ok(EngineKind::HddSim),
            "rbd" => Ok(EngineKind::Rbd),
            _ => Err(BackstoreError::Config(format!(
                "unknown backstore engine {s:?} (expected file, mmap, blockdev, ram, null, hddsim or rbd)"
            ))),
        }
    }
}

/// Configuration of one LUN's backing store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackstoreSpec {
    /// The engine that serves the LUN.
    pub kind: EngineKind,
    /// File or device path; required for `file`, `mmap` and `blockdev`,
    /// refused for `ram` and `null`.
    pub path: Option<PathBuf>,
    /// Size in bytes. Required for `ram` and `null`; for `file` and `mmap`,
    /// required to create a missing file and otherwise grows it (never
    /// shrinks); for `blockdev`, exports only the first `size` bytes.
    pub size: Option<u64>,
    /// Logical block size: 512 or 4096. For `blockdev` only, 0 means "the
    /// device's own block size".
    pub block_size: u32,
    /// The store refuses writes, WRITE SAME and unmap
    /// ([`BackstoreError::ReadOnly`](crate::BackstoreError::ReadOnly));
    /// `file`, `mmap` and `blockdev` open their path read-only.
    pub read_only: bool,
    /// `file`/`mmap`/`blockdev`: an all-zero WRITE SAME deallocates instead
    /// of writing zeros. (`ram` is always thin; `null` holds nothing.)
    pub thin: bool,
    /// `rbd`: the image and its cluster (required there, refused
    /// elsewhere); its `block_size` and `read_only` are this spec's.
    pub rbd: Option<RbdOptions>,
}

impl BackstoreSpec {
    /// A writable RAM store of `size` bytes with 512-byte blocks.
    pub fn ram(size: u64) -> Self {
        Self::sized(EngineKind::Ram, None, size)
    }

    /// A writable null store of `size` bytes with 512-byte blocks.
    pub fn null(size: u64) -> Self {
        Self::sized(EngineKind::Null, None, size)
    }

    /// A writable file store with 512-byte blocks; `size` as in the field doc.
    pub fn file(path: impl Into<PathBuf>, size: Option<u64>) -> Self {
        Self {
            kind: EngineKind::File,
            path: Some(path.into()),
            size,
            block_size: 512,
            read_only: false,
            thin: false,
            rbd: None,
        }
    }

    /// A writable memory-mapped file store with 512-byte blocks; `size` as
    /// for [`BackstoreSpec::file`].
    pub fn mmap(path: impl Into<PathBuf>, size: Option<u64>) -> Self {
        Self {
            kind: EngineKind::Mmap,
            ..Self::file(path, size)
        }
    }

    fn sized(kind: EngineKind, path: Option<PathBuf>, size: u64) -> Self {
        Self {
            kind,
            path,
            size: Some(size),
            block_size: 512,
            read_only: false,
            thin: false,
            rbd: None,
        }
    }
}

/// Parses a byte count: plain digits, or digits and a binary unit
/// K, M, G, T, P or E (powers of 1024), case-insensitive, optionally followed
/// by "B" or "iB" ("512K", "64MiB", "1gb", "4096B"). `None` when malformed or
/// too large for `u64`.
pub fn parse_size(s: &str) -> Option<u64> {
    let lower = s.trim().to_ascii_lowercase();
    let (rest, needs_unit) = match lower.strip_suffix("ib") {
        Some(r) => (r, true),
        None => (lower.strip_suffix('b').unwrap_or(&lower), false),
    };
    let (digits, shift) = match rest.chars().last() {
        Some(unit @ ('k' | 'm' | 'g' | 't' | 'p' | 'e')) => {
            let shift = match unit {
                'k' => 10,
                'm' => 20,
                'g' => 30,
                't' => 40,
                'p' => 50,
                _ => 60,
            };
            (rest.get(..rest.len() - 1)?, shift)
        }
        _ if needs_unit => return None,
        _ => (rest, 0),
    };
    let digits = digits.trim_end();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(1u64 << shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_size_accepts_documented_forms() {
        let cases = [
            ("1073741824", 1 << 30),
            ("512K", 512 << 10),
            ("64M", 64 << 20),
            ("1G", 1 << 30),
            ("2T", 2 << 40),
            ("1g", 1 << 30),
            ("64MiB", 64 << 20),
            ("64mib", 64 << 20),
            ("64MB", 64 << 20),
            ("4096B", 4096),
            ("4096b", 4096),
            (" 8 k ", 8 << 10),
            ("1P", 1 << 50),
            ("15E", 15 << 60),
            ("0", 0),
        ];
        for (text, want) in cases {
            assert_eq!(parse_size(text), Some(want), "{text}");
        }
    }

    #[test]
    fn parse_size_rejects_garbage_and_overflow() {
        for text in [
            "",
            "B",
            "iB",
            "K",
            "KiB",
            "12iB",
            "-1",
            "+1",
            "1.5G",
            "1X",
            "1KK",
            "G1",
            "16E",
            "18446744073709551616",
            "1 0",
            "１G",
        ] {
            assert_eq!(parse_size(text), None, "{text}");
        }
        assert_eq!(parse_size("18446744073709551615"), Some(u64::MAX));
    }

    #[test]
    fn engine_kind_round_trips() {
        for kind in [
            EngineKind::File,
            EngineKind::Mmap,
            EngineKind::BlockDev,
            EngineKind::Ram,
            EngineKind::Null,
            EngineKind::HddSim,
            EngineKind::Rbd,
        ] {
            assert_eq!(
                kind.to_string().parse::<EngineKind>().ok(),
                Some(kind.clone())
            );
        }
        assert_eq!("RAM".parse::<EngineKind>().ok(), Some(EngineKind::Ram));
        assert!(matches!(
            "tape".parse::<EngineKind>(),
            Err(BackstoreError::Config(_))
        ));
    }

    proptest::proptest! {
        #[test]
        fn parse_size_never_panics(s in "\\PC{0,12}") {
            let _ = parse_size(&s);
        }

        #[test]
        fn parse_size_round_trips(n in 0u64..(1 << 30), unit in 0usize..5, suffix in 0usize..3) {
            let letter = ["", "K", "M", "G", "T"][unit];
            let tail = if letter.is_empty() { ["", "B", "b"][suffix] } else { ["", "B", "iB"][suffix] };
            let text = format!("{n}{letter}{tail}");
            proptest::prop_assert_eq!(parse_size(&text), n.checked_mul(1 << (10 * unit)));
        }
    }
}
