//! The `privacy-ledger` binary: parses the command line and dispatches.

use clap::{Parser, Subcommand};
use privacy_ledger::app::{init_tracing, Application};
use privacy_ledger::config::ServeConfig;
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
    /// Run the HTTP service (embedded SQLite store by default).
    Serve(Box<ServeConfig>),
    /// Print the OpenAPI document.
    Openapi,
    /// Compose a list of events and print the privacy report (JSON) for it.
    ///
    /// Input: {"events": [...], "neighboring_relation": "add_or_remove_one" | "replace_one",
    /// "deltas": [...], "epsilons": [...], "alphas": [...], "delta_slack": 1e-10,
    /// "grid_step": 1e-4}; only "events" is required. Reads FILE, or standard input when FILE is
    /// "-" or absent.
    Account {
        /// Input file ("-" for standard input).
        file: Option<PathBuf>,
    },
    /// Make, list or revoke bearer tokens (operators; talks to the database directly).
    Token {
        /// Database URL, as for `serve`.
        #[arg(
            long,
            env = "DATABASE_URL",
            default_value = "sqlite://privacy-ledger.db",
            global = true
        )]
        database_url: String,
        #[command(subcommand)]
        action: privacy_ledger::cli::TokenAction,
    },
    /// Verify or export the audit log (operators; talks to the database directly).
    Audit {
        /// Database URL, as for `serve`.
        #[arg(
            long,
            env = "DATABASE_URL",
            default_value = "sqlite://privacy-ledger.db",
            global = true
        )]
        database_url: String,
        #[command(subcommand)]
        action: privacy_ledger::cli::AuditAction,
    },
}

/// mimalloc keeps freed memory for reuse, where glibc's malloc maps and unmaps every large PMF and
/// FFT buffer (page faults and cross-core TLB flushes were ~10–15 % of a DP-SGD accounting run).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(cfg) => serve(*cfg),
        Command::Openapi => {
            println!("{}", privacy_ledger::http::openapi_json());
            ExitCode::SUCCESS
        }
        Command::Token {
            database_url,
            action,
        } => match privacy_ledger::cli::token(&database_url, action) {
            Ok(out) => {
                println!("{out}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Audit {
            database_url,
            action,
        } => match privacy_ledger::cli::audit(&database_url, action) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        },
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

fn serve(cfg: ServeConfig) -> ExitCode {
    init_tracing(cfg.log_format);
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = rt.block_on(async {
        let app = match Application::build(&cfg).await {
            Ok(a) => a,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        };
        if let Some(t) = app.first_token() {
            // Shown once: only its hash is stored.
            println!("admin token (first start; shown once, keep it): {t}");
        }
        // Tests and scripts read this line to find the port.
        println!("listening on {}", app.local_addr());
        tracing::info!(addr = %app.local_addr(), database = %privacy_ledger::app::redact(&cfg.database_url), "serving");
        match app.run_until_stopped().await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        }
    });
    // A blocking task that ignores its stop flag must not hold the process (every accountant loop
    // checks it, so this is a backstop).
    rt.shutdown_timeout(std::time::Duration::from_secs(5));
    code
}
