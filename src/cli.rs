//! Command-line entry points (the binary's `main` only parses arguments and calls these).

use crate::accountant::account::{self, AccountRequest};
use crate::accountant::AccountantError;
use std::io::Read;
use std::path::Path;

/// Why `account` failed; each maps to a distinct exit code.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("cannot read {what}")]
    Read {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("input is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Accountant(#[from] AccountantError),
}

impl CliError {
    /// Process exit code: 2 for bad input, 3 for valid input the engine cannot answer, 1 for I/O.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Read { .. } | CliError::Accountant(AccountantError::Stopped(_)) => 1,
            CliError::Json(_) | CliError::Accountant(AccountantError::Input(_)) => 2,
            CliError::Accountant(
                AccountantError::NeedsNumericalEngine { .. }
                | AccountantError::TooLarge { .. }
                | AccountantError::Unsupported { .. },
            ) => 3,
        }
    }
}

/// Largest input accepted by `account` (bytes): bounded memory on adversarial input.
pub const MAX_INPUT_BYTES: u64 = 16 * 1024 * 1024;

/// `privacy-ledger account [FILE|-]`: reads an account request and returns the report as pretty JSON.
pub fn account(input: Option<&Path>) -> Result<String, CliError> {
    let mut buf = String::new();
    let what = input.map_or("standard input".to_owned(), |p| p.display().to_string());
    let read = match input {
        Some(p) if p != Path::new("-") => std::fs::File::open(p)
            .and_then(|f| f.take(MAX_INPUT_BYTES + 1).read_to_string(&mut buf)),
        _ => std::io::stdin()
            .take(MAX_INPUT_BYTES + 1)
            .read_to_string(&mut buf),
    };
    read.map_err(|source| CliError::Read {
        what: what.clone(),
        source,
    })?;
    if buf.len() as u64 > MAX_INPUT_BYTES {
        return Err(CliError::Read {
            what,
            source: std::io::Error::other(format!("input exceeds {MAX_INPUT_BYTES} bytes")),
        });
    }
    let v: serde_json::Value = serde_json::from_str(&buf)?;
    let req = AccountRequest::from_json(&v).map_err(AccountantError::from)?;
    let rep = account::account(&req)?;
    Ok(serde_json::to_string_pretty(&rep).expect("reports serialise"))
}

/// `privacy-ledger token …`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum TokenAction {
    /// Make a token and print its secret (shown once).
    Create {
        /// Who or what the token is for.
        #[arg(long)]
        name: String,
        /// `admin`, `analyst` or `auditor`.
        #[arg(long, default_value = "analyst")]
        role: String,
        /// Expire the token after this many days.
        #[arg(long)]
        expires_in_days: Option<u32>,
    },
    /// List the tokens (never their secrets).
    List,
    /// Revoke a token by id (at once, on every replica).
    Revoke {
        /// The token's id (from `list`).
        id: String,
    },
}

/// Runs a token command against the database at `url`; the output to print.
pub fn token(url: &str, action: TokenAction) -> Result<String, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    rt.block_on(async {
        let store = crate::app::open_store(url).await.map_err(|e| {
            format!(
                "cannot open {}: {}",
                crate::app::redact(url),
                crate::app::redact(&e.to_string())
            )
        })?;
        let ledgers = crate::ledger::Ledgers::new(store);
        match action {
            TokenAction::Create {
                name,
                role,
                expires_in_days,
            } => {
                if !crate::ledger::auth::ROLES.contains(&role.as_str()) {
                    return Err(format!(
                        "--role must be one of {}",
                        crate::ledger::auth::ROLES.join(", ")
                    ));
                }
                let t = ledgers
                    .create_token(
                        &name,
                        &role,
                        expires_in_days.map(|d| chrono::Duration::days(d.into())),
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(format!(
                    "token {} ({}, {}){}\n{}",
                    t.token.id,
                    t.token.name,
                    t.token.role,
                    t.token
                        .expires_at
                        .map(|e| format!(", expires {e}"))
                        .unwrap_or_default(),
                    t.secret
                ))
            }
            TokenAction::List => {
                let list = ledgers.list_tokens().await.map_err(|e| e.to_string())?;
                serde_json::to_string_pretty(&list).map_err(|e| e.to_string())
            }
            TokenAction::Revoke { id } => {
                if ledgers.revoke_token(&id).await.map_err(|e| e.to_string())? {
                    Ok(format!("revoked {id}"))
                } else {
                    Err(format!("no live token with id {id:?}"))
                }
            }
        }
    })
}
