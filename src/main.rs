//! The `privacy-ledger` binary: parses the command line and dispatches.

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "privacy-ledger",
    version,
    about = "Differential-privacy budgets, kept exactly"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compose a list of events and print the privacy report (JSON) for it.
    ///
    /// Input: {"events": [...], "neighboring_relation": "add_or_remove_one" | "replace_one",
    /// "deltas": [...], "epsilons": [...], "alphas": [...], "delta_slack": 1e-10}; only "events" is
    /// required. Reads FILE, or standard input when FILE is "-" or absent.
    Account {
        /// Input file ("-" for standard input).
        file: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Account { file } => match privacy_ledger::cli::account(file.as_deref()) {
            Ok(out) => {
                println!("{out}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                let mut msg = format!("error: {e}");
                let mut src = std::error::Error::source(&e);
                while let Some(s) = src {
                    msg.push_str(&format!(": {s}"));
                    src = s.source();
                }
                eprintln!("{msg}");
                ExitCode::from(e.exit_code())
            }
        },
    }
}
