//! `rustgt`: the daemon. Parses the command line, loads the config, sets up
//! logging and hands over to [`daemon::run`]; `rustgt admin ...` is the
//! client of a running daemon's admin socket.

#[cfg(feature = "rbd")]
mod allocator;

use rustgt::{bench, bootstrap, cli, client, control, daemon, generate, logging};

use clap::Parser;

fn main() -> anyhow::Result<()> {
    // The packaging step's `rustgt generate`, outside the daemon's command line.
    if let Some(code) = generate::run_if_asked() {
        std::process::exit(code);
    }
    let cli = cli::Cli::parse();
    logging::init(cli.log.as_deref());
    if let Some(cli::Command::Bench(cmd)) = &cli.command {
        return Ok(bench::run(cmd)?);
    }
    if let Some(cli::Command::Admin(args)) = &cli.command {
        std::process::exit(client::run(args, cli.config.as_deref(), &cli.overrides()));
    }
    let start = bootstrap::prepare(cli.config.as_deref(), &cli.overrides(), cli.no_persist)?;
    #[cfg(feature = "rbd")]
    tracing::info!(allocator = %allocator::describe(), "built with rbd: C allocator");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("rustgt-io")
        .build()?;
    let source = control::runtime::ConfigSource {
        file: start.file,
        overrides: cli.overrides(),
        persist: start.persist,
    };
    Ok(rt.block_on(daemon::run(start.cfg, source))?)
}
