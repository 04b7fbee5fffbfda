//! `rustgt`: the daemon. Parses the command line, loads the config, sets up
//! logging and hands over to [`daemon::run`].

mod bench;
mod cli;
mod config;
mod daemon;

use clap::Parser;

fn main() -> anyhow::Result<()> {
    let cli = cli::Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_new(cli.log.as_deref().unwrap_or("info"))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    if let Some(cli::Command::Bench(cmd)) = &cli.command {
        return bench::run(cmd);
    }
    let cfg = config::load(cli.config.as_deref(), &cli.overrides())?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("rustgt-io")
        .build()?;
    rt.block_on(daemon::run(cfg))
}
