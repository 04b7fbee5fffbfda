//! Semantic checks of a whole configuration: key paths, the problem
//! collector, and the top-level walk (each table's own checks live with
//! its settings).

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;

use super::auth::check_chap;
use super::iscsi::check_iscsi;
use super::limits::check_limits;
use super::targets::check_target;
use super::{Config, MAX_SOCKET_PATH};

// ---------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------

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
    problems: Vec<(KeyPath, String)>,
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

pub(super) fn validate(config: &Config) -> Vec<(KeyPath, String)> {
    let mut c = Checker::default();
    let root = KeyPath::default();
    if config.data_dir.as_os_str().is_empty() {
        c.fail(root.key("data_dir"), "must not be empty");
    }
    if let Some(sock) = &config.admin_socket {
        // sun_path holds 108 bytes including the terminating NUL.
        let len = config.admin_socket_path().as_os_str().len();
        if sock.as_os_str().is_empty() {
            c.fail(root.key("admin_socket"), "must not be empty");
        } else if len > MAX_SOCKET_PATH {
            c.fail(
                root.key("admin_socket"),
                format!(
                    "the path is {len} bytes; a Unix socket path holds at most {MAX_SOCKET_PATH}"
                ),
            );
        }
    }
    check_iscsi(&mut c, &root.key("iscsi"), &config.iscsi);
    check_limits(&mut c, &root.key("limits"), &config.limits);
    c.range(
        root.key("reactor").key("threads"),
        config.reactor.threads,
        0,
        256,
    );
    c.range(
        root.key("reactor").key("busy_poll_us"),
        config.reactor.busy_poll_us,
        0,
        1000,
    );
    if !matches!(config.reactor.io_uring.as_str(), "auto" | "off") {
        c.fail(
            root.key("reactor").key("io_uring"),
            format!(
                "unknown value {:?}: expected \"auto\" or \"off\"",
                config.reactor.io_uring
            ),
        );
    }
    if let Some(chap) = &config.discovery.chap {
        check_chap(&mut c, &root.key("discovery").key("chap"), chap);
    }
    let mut iqns: HashMap<String, usize> = HashMap::new();
    let mut backing: HashMap<PathBuf, KeyPath> = HashMap::new();
    for (i, target) in config.targets.iter().enumerate() {
        let key = root.key("targets").index(i);
        check_target(&mut c, &key, target, &config.data_dir, &mut backing);
        // Names compare case-insensitively (RFC 3722 normalization).
        if let Some(first) = iqns.insert(target.iqn.to_ascii_lowercase(), i) {
            c.fail(
                key.key("iqn"),
                format!("duplicate target name, already used by targets[{first}].iqn"),
            );
        }
    }
    c.problems
}
