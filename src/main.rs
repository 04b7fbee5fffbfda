//! `rustgt`: the daemon. Parses the command line, loads the config, sets up
//! logging and hands over to [`daemon::run`]; `rustgt admin ...` is the
//! client of a running daemon's admin socket.

mod admin;
#[cfg(feature = "rbd")]
mod allocator;
mod bench;
mod bootstrap;
mod cli;
mod config;
mod daemon;
mod identity;
mod iser_portals;
mod persist;
mod wiring;

use clap::Parser;

fn main() -> anyhow::Result<()> {
    let cli = cli::Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_new(cli.log.as_deref().unwrap_or("info"))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour only for a person at a terminal: not in a file or a pipe, and
    // never when NO_COLOR is set to anything (no-color.org).
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour)
        .init();
    if let Some(cli::Command::Bench(cmd)) = &cli.command {
        return Ok(bench::run(cmd)?);
    }
    if let Some(cli::Command::Admin(args)) = &cli.command {
        std::process::exit(admin::client::run(
            args,
            cli.config.as_deref(),
            &cli.overrides(),
        ));
    }
    let start = bootstrap::prepare(cli.config.as_deref(), &cli.overrides(), cli.no_persist)?;
    #[cfg(feature = "rbd")]
    tracing::info!(allocator = %allocator::describe(), "built with rbd: C allocator");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("rustgt-io")
        .build()?;
    let source = admin::runtime::ConfigSource {
        file: start.file,
        overrides: cli.overrides(),
        persist: start.persist,
    };
    Ok(rt.block_on(daemon::run(start.cfg, source))?)
}
