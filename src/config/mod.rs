//! Daemon configuration: a TOML file (see `etc/rustgt.toml`) merged with
//! `RUSTGT_*` environment variables and command-line overrides.
//!
//! Layer: daemon only. Nothing here touches a socket; the only filesystem
//! access is reading the config file, checking whether a `file` LUN's
//! backing file already exists (to know whether `size` is required), and
//! looking `admin_socket_group` up in the group database.
//!
//! Guarantees:
//! - a misspelt key is an error (`deny_unknown_fields` everywhere);
//! - a [`Config`] returned by [`load`] has passed every semantic check below,
//!   so the daemon can build targets from it without re-validating;
//! - every error names the key path (`targets[0].luns[1].block_size`) and
//!   where the value came from: the file, the environment variable
//!   (`RUSTGT_ISCSI__QUEUE_DEPTH`) or the command-line option;
//! - CHAP secrets never appear in `Debug` output.
//!
//! Precedence, lowest first: built-in defaults, the file, the environment
//! (`RUSTGT_` prefix, `__` between nested keys; only `data_dir`,
//! `admin_socket`, `admin_socket_group`, `metrics_listen`, `iscsi.*` and `discovery.*` — arrays of
//! targets are file-only), then [`Overrides`].

//!
//! Layout: one file per table ([`admin`], [`iscsi`], [`limits`],
//! [`reactor`], [`auth`], [`targets`], [`luns`], [`fault`]) holding its
//! settings and their checks; [`values`] the typed values parsed when the
//! configuration is read; [`load`] the merging of sources and attribution
//! of problems; [`check`] the walk over a whole configuration; [`error`]
//! the error types.

use std::net::SocketAddr;
use std::path::PathBuf;

use rustgt_backstore::EngineKind;
use serde::{Deserialize, Serialize};

mod admin;
mod auth;
mod check;
mod error;
mod fault;
mod iscsi;
mod limits;
mod load;
mod luns;
mod reactor;
mod targets;
mod values;

use luns::{default_io_context, default_readahead_cache, default_readahead_max};

pub use admin::AdminGroup;
pub use auth::ChapSettings;
pub use error::{ConfigError, Problem};
pub use fault::FaultSettings;
#[cfg(test)]
pub use fault::TriggerSettings;
pub use iscsi::{DiscoverySettings, IscsiSettings};
pub use limits::LimitSettings;
pub use load::{admin_socket_of, check, load, load_text};
pub use luns::LunSettings;
pub use reactor::ReactorSettings;
pub use targets::TargetSettings;

/// Name of the target served when no config file is given.
pub const DEFAULT_TARGET_IQN: &str = "iqn.2026-11.org.rustgt:default";
/// Data directory when neither the file, the environment nor `--data-dir` set one.
pub const DEFAULT_DATA_DIR: &str = "./rustgt-data";
/// Prefix of environment overrides; nested keys are joined with `__`.
pub const ENV_PREFIX: &str = "RUSTGT_";

/// RFC 7143 §4.2.7.1: an iSCSI name is at most 223 bytes.
pub const MAX_ISCSI_NAME_LEN: usize = 223;
/// SAM-5 flat/peripheral LUN addressing used here: LUN ids 0..=16383.
pub const MAX_LUN_ID: u64 = 16383;
/// RFC 7143 §9.2.1: a CHAP secret of fewer than 96 bits needs IPsec, which
/// rustgt does not provide, so shorter secrets are refused.
pub const MIN_CHAP_SECRET_LEN: usize = 12;
/// Longest Unix socket path (`sun_path` less its NUL).
pub const MAX_SOCKET_PATH: usize = 107;
/// Longest CHAP name or secret accepted (a text-key value, RFC 7143 §6.1).
pub const MAX_CHAP_FIELD_LEN: usize = 255;

/// The whole daemon configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Directory for backing files given by relative paths (created at start).
    #[serde(default = "default_data_dir")]
    pub data_dir: PathBuf,
    /// Session defaults offered in login negotiation, shared by all targets.
    #[serde(default)]
    pub iscsi: IscsiSettings,
    /// Settings of discovery (SendTargets) sessions.
    #[serde(default)]
    pub discovery: DiscoverySettings,
    /// Served targets. Empty in a file means none; no file means the default target.
    #[serde(default)]
    pub targets: Vec<TargetSettings>,
    /// Admin socket (mode 0600); relative = under data_dir. Default
    /// `<data_dir>/admin.sock`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_socket: Option<PathBuf>,
    /// Group whose members may use the admin socket besides root and the
    /// daemon's own uid; the socket is then mode 0660 and owned by it.
    /// Looked up in the group database when the configuration is read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_socket_group: Option<AdminGroup>,
    /// ADDR:PORT serving Prometheus metrics on `GET /metrics`; none by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_listen: Option<SocketAddr>,
    /// The threads that serve connections (read at start only).
    #[serde(default)]
    pub reactor: ReactorSettings,
    /// Caps on what peers can make the daemon hold: connections, logins
    /// in progress, sessions per initiator.
    #[serde(default)]
    pub limits: LimitSettings,
}

/// Command-line values that beat the file and the environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// Replaces the portal list of every target.
    pub listen: Option<SocketAddr>,
    /// Replaces `data_dir`.
    pub data_dir: Option<PathBuf>,
    /// Replaces `admin_socket`.
    pub admin_socket: Option<PathBuf>,
}

pub(super) fn default_data_dir() -> PathBuf {
    PathBuf::from(DEFAULT_DATA_DIR)
}

pub(super) fn default_portals() -> Vec<SocketAddr> {
    vec![SocketAddr::from(([127, 0, 0, 1], 3260))]
}

pub(super) fn default_tpgt() -> u16 {
    1
}

pub(super) fn default_block_size() -> u32 {
    512
}

pub(super) fn default_true() -> bool {
    true
}

pub(super) fn parse_size(s: &str) -> Option<u64> {
    rustgt_backstore::parse_size(s)
}

impl Config {
    /// The target served when no config file is given: LUN 0 is a 1 GiB
    /// sparse file `lun0.img` under the data directory.
    pub fn default_target() -> TargetSettings {
        TargetSettings {
            iqn: DEFAULT_TARGET_IQN.to_owned(),
            alias: None,
            portals: default_portals(),
            iser_portals: Vec::new(),
            tpgt: default_tpgt(),
            port_groups: Vec::new(),
            acl: Vec::new(),
            chap: None,
            luns: vec![LunSettings {
                id: 0,
                backstore: EngineKind::File.as_str().to_owned(),
                path: Some(PathBuf::from("lun0.img")),
                size: Some("1G".to_owned()),
                block_size: default_block_size(),
                read_only: false,
                thin: true,
                write_cache: true,
                workers: None,
                serial: None,
                removable: false,
                pr_state: None,
                physical_block_size: None,
                unmap_command: true,
                sanitize_rate: None,
                // The quick-start LUN is a sparse file in the data dir:
                // the kernel's readahead keeps it on the reactor's and
                // io_uring's data path on any disk.
                readahead: "kernel".to_owned(),
                io_context: default_io_context(),
                readahead_cache: default_readahead_cache(),
                readahead_max: default_readahead_max(),
                hddsim_device: None,
                hddsim_offset: None,
                hddsim_disks: None,
                hddsim_speedup: None,
                readahead_io_threads: None,
                readahead_io_max: None,
                device_slice: None,
                fault: None,
                rbd: None,
            }],
        }
    }

    /// Where the admin socket is: `admin_socket` (relative to `data_dir`)
    /// or `<data_dir>/admin.sock`.
    pub fn admin_socket_path(&self) -> PathBuf {
        let name = self
            .admin_socket
            .clone()
            .unwrap_or_else(|| PathBuf::from(crate::admin::DEFAULT_SOCKET_NAME));
        self.data_dir.join(name)
    }

    /// The configuration as TOML, loadable again with [`load`]. Secrets are
    /// included: the output is for a root-only config file.
    pub fn to_toml(&self) -> Result<String, ConfigError> {
        Ok(toml::to_string_pretty(self)?)
    }
}

impl Default for Config {
    /// What [`load`] returns with no file, no environment and no overrides.
    fn default() -> Self {
        Self {
            data_dir: default_data_dir(),
            iscsi: IscsiSettings::default(),
            discovery: DiscoverySettings::default(),
            targets: vec![Self::default_target()],
            admin_socket: None,
            admin_socket_group: None,
            metrics_listen: None,
            reactor: ReactorSettings::default(),
            limits: LimitSettings::default(),
        }
    }
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

#[cfg(test)]
mod tests;
