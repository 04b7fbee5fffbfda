//! Semantic checks of a whole configuration: the walk over its tables
//! (each table's own checks live with its settings) and [`check`] for a
//! configuration built in memory.

use std::collections::HashMap;
use std::path::PathBuf;

use super::auth::check_chap;
use super::error::{ConfigError, Problem};
use super::iscsi::check_iscsi;
use super::keypath::{Checker, KeyPath};
use super::limits::check_limits;
use super::targets::check_target;
use super::top::Config;

/// Longest Unix socket path (`sun_path` less its NUL).
pub const MAX_SOCKET_PATH: usize = 107;

/// Validates a configuration built in memory (an admin change); problems
/// are attributed to `origin`.
pub fn check(config: &Config, origin: &str) -> Result<(), ConfigError> {
    let problems = validate(config);
    if problems.is_empty() {
        return Ok(());
    }
    Err(ConfigError::Invalid(
        problems
            .into_iter()
            .map(|(key, message)| Problem {
                origin: origin.to_owned(),
                key: key.to_string(),
                message,
            })
            .collect(),
    ))
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
    if config.reactor.slice_us != 0 {
        c.range(
            root.key("reactor").key("slice_us"),
            config.reactor.slice_us,
            100,
            100_000,
        );
    }
    if let Some(chap) = &config.discovery.chap {
        check_chap(&mut c, &root.key("discovery").key("chap"), chap);
    }
    super::groups::check_discovery_groups(&mut c, &root.key("discovery"), &config.discovery.groups);
    let mut iqns: HashMap<String, usize> = HashMap::new();
    let mut backing: HashMap<PathBuf, KeyPath> = HashMap::new();
    let mut wwns: HashMap<[u8; 16], KeyPath> = HashMap::new();
    for (i, target) in config.targets.iter().enumerate() {
        let key = root.key("targets").index(i);
        check_target(&mut c, &key, target, &config.data_dir, &mut backing);
        // Two LUNs with one designator look like two paths to one disk.
        for (j, lun) in target.luns.iter().enumerate() {
            let Some(wwn) = &lun.wwn else { continue };
            let at = key.key("luns").index(j).key("wwn");
            if let Some(first) = wwns.insert(wwn.value().0, at.clone()) {
                c.fail(at, format!("{wwn} is already the wwn of {first}"));
            }
        }
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
