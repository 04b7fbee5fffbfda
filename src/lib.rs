//! The rustgt daemon as a library: the binary (`src/main.rs`) parses the
//! command line and calls in here; the fuzz targets (`fuzz/`) use the
//! configuration loader and the admin protocol from here.
//!
//! Layout (dependencies point down the list):
//! - [`cli`], [`bootstrap`], [`daemon`]: the command line, the first start,
//!   and the daemon's lifetime (signals, admin socket, metrics);
//! - [`client`]: the `rustgt admin` client of the admin socket;
//! - [`control`]: the control plane: the running state, the change
//!   transactions, the portals of both transports, the store under every
//!   LUN, the admin socket's server and the Prometheus endpoint;
//! - [`gateway_load`]: the redirect targets' load, read from their metrics;
//! - [`wiring`]: configuration to the port's and SCSI core's types;
//! - [`api`]: the admin socket's wire protocol (client and control plane);
//! - [`config`]: the typed configuration (no I/O but reading its files);
//! - [`bench`], [`generate`]: the `bench` commands and the packaging
//!   step's generated files; [`identity`], [`persist`], [`logging`],
//!   [`sched`]: small services of the above.

pub mod api;
pub mod bench;
pub mod bench_path;
pub mod bootstrap;
pub mod cli;
pub mod client;
pub mod config;
pub mod control;
pub mod daemon;
pub mod gateway_load;
pub mod generate;
pub mod identity;
pub mod logging;
pub mod persist;
pub mod sched;
pub mod wiring;
