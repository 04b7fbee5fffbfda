//! The admin socket's wire protocol, shared by the daemon's control plane
//! ([`crate::control`]) and the `rustgt admin` client ([`crate::client`]):
//! the typed requests and replies ([`proto`]) and the latency histograms
//! they carry ([`stats`]). Types only: no I/O, no daemon state.

pub mod proto;
pub mod stats;

/// File name of the admin socket under the data directory when neither
/// `admin_socket` nor `--admin-socket` says otherwise.
pub const DEFAULT_SOCKET_NAME: &str = "admin.sock";
