//! `rustgt-load`: the command line of the paced load generator
//! (`rustgt_load`).

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = rustgt_load::Args::parse();
    match rustgt_load::run(&args) {
        Ok(report) => {
            rustgt_load::print(&args, &report);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rustgt-load: {e}");
            ExitCode::from(2)
        }
    }
}
