//! Key paths into the configuration (`targets[0].luns[1].block_size`)
//! and the collector of (key, message) problems the checks fill.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Seg {
    Key(&'static str),
    Index(usize),
}

impl fmt::Display for Seg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Seg::Key(k) => f.write_str(k),
            Seg::Index(i) => write!(f, "{i}"),
        }
    }
}

/// A key path into the config, displayed as `targets[0].luns[1].block_size`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct KeyPath(pub(super) Vec<Seg>);

impl KeyPath {
    pub(super) fn key(&self, k: &'static str) -> Self {
        let mut p = self.clone();
        p.0.push(Seg::Key(k));
        p
    }

    pub(super) fn index(&self, i: usize) -> Self {
        let mut p = self.clone();
        p.0.push(Seg::Index(i));
        p
    }
}

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, seg) in self.0.iter().enumerate() {
            match seg {
                Seg::Key(k) if n == 0 => f.write_str(k)?,
                Seg::Key(k) => write!(f, ".{k}")?,
                Seg::Index(i) => write!(f, "[{i}]")?,
            }
        }
        Ok(())
    }
}

/// Collects (key, message) pairs.
#[derive(Default)]
pub(super) struct Checker {
    pub(super) problems: Vec<(KeyPath, String)>,
}

impl Checker {
    pub(super) fn fail(&mut self, key: KeyPath, message: impl Into<String>) {
        self.problems.push((key, message.into()));
    }

    pub(super) fn range<T>(&mut self, key: KeyPath, value: T, min: T, max: T)
    where
        T: PartialOrd + fmt::Display + Copy,
    {
        if value < min || value > max {
            self.fail(key, format!("{value} is out of range {min}..={max}"));
        }
    }
}
