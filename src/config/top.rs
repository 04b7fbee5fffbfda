//! The top-level table: [`Config`] with its defaults (the default target
//! served without a config file) and the command-line [`Overrides`].

use std::net::SocketAddr;
use std::path::PathBuf;

use rustgt_backstore::{EngineKind, ReadaheadChoice, ReadaheadPolicy};
use serde::{Deserialize, Serialize};

use super::admin::AdminGroup;
use super::error::ConfigError;
use super::iscsi::{DiscoverySettings, IscsiSettings};
use super::limits::LimitSettings;
use super::luns::{
    default_block_size, default_io_context, default_readahead_cache, default_readahead_max,
    LunSettings,
};
use super::reactor::ReactorSettings;
use super::targets::{default_portals, default_tpgt, TargetSettings};
use super::values::{Bytes, Setting};

/// Name of the target served when no config file is given.
pub const DEFAULT_TARGET_IQN: &str = "iqn.2026-11.org.rustgt:default";
/// Data directory when neither the file, the environment nor `--data-dir` set one.
pub const DEFAULT_DATA_DIR: &str = "./rustgt-data";
/// The configuration file in the data directory, read (and written at
/// first start) when the daemon is started without `--config`.
pub const DATA_DIR_CONFIG: &str = "rustgt.toml";
/// Prefix of environment overrides; nested keys are joined with `__`.
pub const ENV_PREFIX: &str = "RUSTGT_";

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
    /// Looked up in the group database when the admin socket is bound.
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
    /// Write every change made over the admin socket back to the
    /// configuration file (default true); `--no-persist` also turns it off.
    #[serde(default = "super::luns::default_true")]
    pub persist: bool,
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
            groups: Vec::new(),
            redirect: None,
            luns: vec![LunSettings {
                id: 0,
                backstore: Setting::new(EngineKind::File, EngineKind::File.as_str()),
                path: Some(PathBuf::from("lun0.img")),
                size: Some(Setting::new(Bytes(1 << 30), "1G")),
                block_size: default_block_size(),
                read_only: false,
                thin: true,
                write_cache: true,
                workers: None,
                serial: None,
                wwn: None,
                removable: false,
                alua: None,
                pr_state: None,
                physical_block_size: None,
                unmap_command: true,
                sanitize_rate: None,
                // The quick-start LUN is a sparse file in the data dir:
                // the kernel's readahead keeps it on the reactor's and
                // io_uring's data path on any disk.
                readahead: Setting::new(ReadaheadChoice::Fixed(ReadaheadPolicy::Kernel), "kernel"),
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
                qos: None,
                rbd: None,
            }],
            qos: None,
        }
    }

    /// Where the admin socket is: `admin_socket` (relative to `data_dir`)
    /// or `<data_dir>/admin.sock`.
    pub fn admin_socket_path(&self) -> PathBuf {
        let name = self
            .admin_socket
            .clone()
            .unwrap_or_else(|| PathBuf::from(crate::api::DEFAULT_SOCKET_NAME));
        self.data_dir.join(name)
    }

    /// The configuration as TOML, loadable again with [`load`](super::load()). Secrets are
    /// included: the output is for a root-only config file.
    pub fn to_toml(&self) -> Result<String, ConfigError> {
        Ok(toml::to_string_pretty(self)?)
    }
}

impl Default for Config {
    /// What [`load`](super::load()) returns with no file, no environment and no overrides.
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
            persist: true,
        }
    }
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------
