//! The admin interface: a Unix socket speaking typed JSON lines, the
//! daemon's control path that applies requests one at a time, the
//! `rustgt admin` client, and the Prometheus endpoint.
//!
//! Layer: daemon only. The port, the drivers and the SCSI core know
//! nothing of it; it drives them through their management APIs
//! (`rustgt_port::Port::add_target`, `Port::connections`, `Port::kill`,
//! `ScsiTarget::add_lun`, ...), so every command covers the connections of
//! both transports.
//!
//! Guarantees:
//! - every change, whether an admin request, `config apply` or SIGHUP, is
//!   computed as a diff between the running configuration and the wanted
//!   one ([`diff`]) and applied by one task ([`runtime::Runtime`]), so
//!   concurrent clients never interleave half-applied changes;
//! - a request that fails changes nothing: everything fallible (opening
//!   backstores, binding portals, starting LUN workers) happens before the
//!   first visible change, and is undone if a later fallible step fails;
//! - removing a LUN or target that has sessions is refused unless forced;
//! - every error names what was wrong (target, LUN, portal, config key);
//! - the socket is created with mode 0600 (0660 for `admin_socket_group`)
//!   from its first instant at its path, and every caller is checked by
//!   its kernel credentials ([`peer`]), as it can read CHAP secrets back;
//!   every change is logged with who made it.
//!
//! Layout: [`proto`] is the wire protocol; [`server`] the socket;
//! [`peer`] the callers' credentials and who may call; [`runtime`]
//! the running state and request handling; [`apply`] the transactional
//! application of a [`diff::Plan`]; [`lunstore`] the swappable, metered
//! store under every LUN; [`metrics`] the Prometheus exposition; [`client`]
//! and [`render`] the CLI.

pub mod apply;
pub mod client;
pub mod diff;
mod groups;
pub mod lunstore;
pub mod metrics;
pub mod peer;
pub mod proto;
pub mod qos;
pub mod render;
pub mod runtime;
pub mod server;
pub mod stats;
mod views;

/// File name of the admin socket under the data directory when neither
/// `admin_socket` nor `--admin-socket` says otherwise.
pub const DEFAULT_SOCKET_NAME: &str = "admin.sock";
