//! Daemon configuration: a TOML file (see `etc/rustgt.toml`) merged with
//! `RUSTGT_*` environment variables and command-line overrides.
//!
//! Layer: daemon only. Nothing here touches a socket; the only filesystem
//! access is reading the config file and checking whether a `file` LUN's
//! backing file already exists (to know whether `size` is required).
//! `admin_socket_group` stays a name: the control plane looks it up when
//! it binds the socket.
//!
//! Guarantees:
//! - a misspelt key is an error (`deny_unknown_fields` everywhere);
//! - a [`Config`] returned by [`load()`] has passed every semantic check below,
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
//! configuration is read; [`load`](mod@load) the merging of sources and attribution
//! of problems; [`check`](mod@check) the walk over a whole configuration; [`error`]
//! the error types; [`top`] the top-level table; [`keypath`] key paths
//! and the problem collector.

mod admin;
mod auth;
mod check;
mod error;
mod fault;
mod groups;
mod iscsi;
mod keypath;
mod limits;
mod load;
mod luns;
mod qos;
mod reactor;
mod targets;
mod top;
mod values;

pub use admin::AdminGroup;
pub use auth::ChapSettings;
pub use check::check;
pub use error::{invalid, ConfigError};
pub use fault::FaultSettings;
#[cfg(test)]
pub use fault::TriggerSettings;
pub(crate) use groups::initiator_groups;
pub use groups::{GroupSettings, LunMapping};
#[cfg(test)]
pub use iscsi::IscsiSettings;
#[cfg(test)]
pub use load::load_text_jailed;
pub use load::{admin_socket_of, load, load_text};
pub use luns::LunSettings;
pub use qos::QosSettings;
pub use targets::{RedirectSettings, TargetSettings};
pub use top::{Config, Overrides, DATA_DIR_CONFIG};
pub use values::{ByteSize, Naa, Wwn};

#[cfg(test)]
mod tests;
