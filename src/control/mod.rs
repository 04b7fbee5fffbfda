//! The daemon's control plane: the admin socket speaking typed JSON lines
//! ([`crate::api`]), the running state and the one task that applies
//! changes to it, the portals of both transports, the store under every
//! LUN, and the Prometheus endpoint. The `rustgt admin` client is
//! [`crate::client`].
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
//! Layout: [`server`] the socket; [`peer`] the callers' credentials and
//! who may call; [`runtime`] the running state and request handling;
//! [`diff`] and [`apply`] the transactional application of a
//! [`diff::Plan`]; [`portals`] the listeners of both transports;
//! [`lunstore`] the swappable, metered store under every LUN; [`qos`]
//! the QoS requests; [`metrics`] the Prometheus exposition.

pub mod apply;
pub mod diff;
mod groups;
pub mod lunstore;
pub mod metrics;
pub mod peer;
pub mod portals;
pub mod qos;
pub mod runtime;
pub mod server;
mod views;
