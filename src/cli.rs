//! Command line of the `rustgt` daemon (clap derive).
//!
//! The command line only says where things are and how loud to be; everything
//! about targets lives in the TOML config (see `etc/rustgt.toml`). The two
//! options that also exist in the config (`--listen`, `--data-dir`) are turned
//! into [`Overrides`] that beat both the file and the environment.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::config::Overrides;

/// Userspace iSCSI block target.
///
/// Without --config, serves DATA_DIR/rustgt.toml; at first start that file is
/// written with a target named for this host
/// (`iqn.2026-11.org.rustgt:<hostname>.<random hex>`) on 127.0.0.1:3260 and
/// LUN 0 backed by a 1 GiB sparse file `lun0.img` in the data directory.
#[derive(Debug, Clone, PartialEq, Parser)]
#[command(name = "rustgt", version, about, long_about)]
pub struct Cli {
    /// Listen on ADDR:PORT instead of the configured portals.
    ///
    /// Replaces the portal list of every target. Port 0 picks a free port;
    /// the real address is printed on stdout ("rustgt: listening on ...").
    #[arg(short, long, value_name = "ADDR:PORT")]
    pub listen: Option<SocketAddr>,

    /// Directory for backing files given by relative paths [default: ./rustgt-data].
    ///
    /// Created at first start. Beats `data_dir` in the config file and
    /// RUSTGT_DATA_DIR in the environment.
    #[arg(short, long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    /// TOML configuration file (see etc/rustgt.toml for every key).
    ///
    /// Without it DATA_DIR/rustgt.toml is served (written at first start).
    /// `data_dir`, `admin_socket`, `admin_socket_group`, `metrics_listen` and
    /// the keys of the `[iscsi]`, `[discovery]`, `[reactor]` and `[limits]`
    /// tables can also be set from the environment, e.g.
    /// RUSTGT_ISCSI__QUEUE_DEPTH=64.
    #[arg(short, long, value_name = "FILE", env = "RUSTGT_CONFIG")]
    pub config: Option<PathBuf>,

    /// Admin socket of the daemon [default: DATA_DIR/admin.sock].
    ///
    /// Beats `admin_socket` in the config file and RUSTGT_ADMIN_SOCKET;
    /// `rustgt admin` finds the daemon's socket the same way.
    #[arg(long, value_name = "PATH")]
    pub admin_socket: Option<PathBuf>,

    /// Do not write admin changes (nor generated identities) to the
    /// configuration file; same as `persist = false` in it.
    ///
    /// `rustgt admin status` and the log then say when the running state
    /// differs from the file, and SIGHUP refuses to revert live changes
    /// unless forced (`rustgt admin config reload --force`).
    #[arg(long)]
    pub no_persist: bool,

    /// Log filter: a level (error, warn, info, debug, trace) or a tracing
    /// directive list such as "info,rustgt_iscsi=debug".
    #[arg(long, value_name = "LEVEL", env = "RUSTGT_LOG")]
    pub log: Option<String>,

    /// Administrative subcommand; none runs the daemon.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Subcommands; running without one starts the daemon.
#[derive(Debug, Clone, PartialEq, Subcommand)]
pub enum Command {
    /// Benchmarks (e.g. `rustgt bench readahead`); no daemon is started.
    #[command(subcommand)]
    Bench(crate::bench::BenchCommand),
    /// Talk to a running daemon over its admin socket (see docs/admin.md).
    Admin(crate::client::AdminArgs),
}

impl Cli {
    /// The command-line values that override the configuration.
    pub fn overrides(&self) -> Overrides {
        Overrides {
            listen: self.listen,
            data_dir: self.data_dir.clone(),
            admin_socket: self.admin_socket.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn no_arguments_means_defaults_everywhere() {
        let cli = Cli::try_parse_from(["rustgt"]).expect("parses");
        assert_eq!(cli.listen, None);
        assert_eq!(cli.data_dir, None);
        assert_eq!(cli.command, None);
        assert_eq!(cli.overrides(), Overrides::default());
    }

    #[test]
    fn all_options_parse() {
        let cli = Cli::try_parse_from([
            "rustgt",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            "/tmp/d",
            "--config",
            "/etc/rustgt/rustgt.toml",
            "--log",
            "debug",
        ])
        .expect("parses");
        let listen: SocketAddr = "127.0.0.1:0".parse().expect("addr");
        assert_eq!(cli.listen, Some(listen));
        assert_eq!(cli.config, Some(PathBuf::from("/etc/rustgt/rustgt.toml")));
        assert_eq!(cli.log.as_deref(), Some("debug"));
        assert_eq!(
            cli.overrides(),
            Overrides {
                listen: Some(listen),
                data_dir: Some(PathBuf::from("/tmp/d")),
                admin_socket: None,
            }
        );
    }

    #[test]
    fn ipv6_listen_address_parses() {
        let cli = Cli::try_parse_from(["rustgt", "-l", "[::1]:3260"]).expect("parses");
        assert_eq!(cli.listen, Some("[::1]:3260".parse().expect("addr")));
    }

    #[test]
    fn listen_without_port_is_rejected() {
        let err = Cli::try_parse_from(["rustgt", "--listen", "127.0.0.1"]).expect_err("no port");
        assert!(err.to_string().contains("--listen"), "{err}");
    }

    #[test]
    fn unknown_subcommand_is_rejected() {
        assert!(Cli::try_parse_from(["rustgt", "frobnicate"]).is_err());
    }
}
