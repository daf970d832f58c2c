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
    Json(String),
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
    let v = match crate::accountant::json::parse_strict(buf.as_bytes()) {
        Ok(v) => v,
        Err(crate::accountant::json::ParseError::Syntax(m)) => {
            return Err(CliError::Json(m));
        }
        Err(crate::accountant::json::ParseError::Invalid(e)) => {
            return Err(AccountantError::from(e).into())
        }
    };
    let req = AccountRequest::from_json(&v).map_err(AccountantError::from)?;
    let rep = account::account(&req)?;
    Ok(serde_json::to_string_pretty(&rep).expect("reports serialise"))
}

/// `privacy-ledger token …`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum TokenAction {
    /// Make a token and print its bearer token (shown once) and its id.
    Create {
        /// Who or what the token is for.
        #[arg(long)]
        name: String,
        /// The global role: `admin`, `analyst`, `auditor`, or `none` (only what grants give).
        #[arg(long, default_value = "analyst")]
        role: String,
        /// Expire the token after this many days (1 to 3650, as the API allows).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=crate::ledger::input::MAX_TOKEN_DAYS))]
        expires_in_days: Option<u64>,
    },
    /// List the tokens (never their secrets).
    List,
    /// Revoke a token by id (at once, on every replica).
    Revoke {
        /// The token's id (from `list`).
        id: String,
    },
}

/// Runs `f` on the ledgers over the database at `url`, on a runtime of its own (the operators'
/// commands talk to the database directly); errors never show the URL's password.
fn with_ledgers<T>(
    url: &str,
    f: impl AsyncFnOnce(crate::ledger::Ledgers) -> Result<T, String>,
) -> Result<T, String> {
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
        f(crate::ledger::Ledgers::new(store)).await
    })
}

/// Runs a token command against the database at `url`; the output to print.
pub fn token(url: &str, action: TokenAction) -> Result<String, String> {
    with_ledgers(url, async |ledgers| {
        let operator = crate::ledger::principal::Actor::operator();
        match action {
            TokenAction::Create {
                name,
                role,
                expires_in_days,
            } => {
                let t = ledgers
                    .create_token(
                        &operator,
                        &name,
                        &role,
                        expires_in_days.map(|d| chrono::Duration::days(d as i64)),
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                // The one thing to keep comes first, named as the API names it.
                Ok(format!(
                    "bearer token (shown once, keep it): {}\n\
                     its id {} ({}, {}{}) names it in `token revoke`; the id grants nothing",
                    t.secret,
                    t.token.id,
                    t.token.name,
                    t.token.role,
                    t.token
                        .expires_at
                        .map(|e| format!(", expires {e}"))
                        .unwrap_or_default(),
                ))
            }
            TokenAction::List => {
                let list = ledgers
                    .list_tokens(&operator)
                    .await
                    .map_err(|e| e.to_string())?;
                serde_json::to_string_pretty(&list).map_err(|e| e.to_string())
            }
            TokenAction::Revoke { id } => {
                if ledgers
                    .revoke_token(&operator, &id)
                    .await
                    .map_err(|e| e.to_string())?
                {
                    Ok(format!("revoked {id}"))
                } else {
                    Err(format!("no live token with id {id:?}"))
                }
            }
        }
    })
}

/// `privacy-ledger audit …`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum AuditAction {
    /// Recompute every chain of the audit log; exit 1 and name each break if one was edited or
    /// had records deleted. Prints each chain's head and one digest of them all: keep that output
    /// elsewhere, and give it back with `--expect` to detect a rollback.
    Verify {
        /// The output of an earlier `audit verify` (its `head` lines): each head must still be in
        /// the log, else the database was rolled back or a chain rewritten.
        #[arg(long)]
        expect: Option<std::path::PathBuf>,
    },
    /// Print the audit log (or one dataset's records) as JSON lines, oldest first.
    Export {
        /// Only this dataset's records.
        #[arg(long)]
        dataset_id: Option<String>,
    },
}

/// The `head "chain" seq hash` lines of an earlier `audit verify` (other lines are skipped).
pub fn kept_heads(text: &str) -> Result<Vec<(String, i64, String)>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let Some(rest) = line.strip_prefix("head ") else {
            continue;
        };
        let bad = || format!("line {}: not `head \"chain\" seq hash`", n + 1);
        let mut tail = rest.rsplitn(3, ' ');
        let (hash, seq, chain) = (tail.next(), tail.next(), tail.next());
        let (Some(hash), Some(seq), Some(chain)) = (hash, seq, chain) else {
            return Err(bad());
        };
        // Chains are dataset ids (no quotes, no escapes) or "" (the global chain).
        let chain = chain
            .strip_prefix('"')
            .and_then(|c| c.strip_suffix('"'))
            .filter(|c| !c.contains(['"', '\\']))
            .ok_or_else(bad)?;
        let seq: i64 = seq.parse().map_err(|_| bad())?;
        if hash.is_empty() || !hash.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(bad());
        }
        out.push((chain.to_owned(), seq, hash.to_owned()));
    }
    Ok(out)
}

/// Runs an audit command against the database at `url`, printing to standard output.
pub fn audit(url: &str, action: AuditAction) -> Result<(), String> {
    with_ledgers(url, async |ledgers| match action {
        AuditAction::Verify { expect } => {
            let kept = match expect {
                Some(path) => {
                    let text = std::fs::read_to_string(&path)
                        .map_err(|e| format!("--expect {}: {e}", path.display()))?;
                    kept_heads(&text).map_err(|e| format!("--expect {}: {e}", path.display()))?
                }
                None => Vec::new(),
            };
            let v = ledgers
                .verify_audit_against(&kept)
                .await
                .map_err(|e| e.to_string())?;
            for (chain, seq, hash) in &v.heads {
                println!("head {chain:?} {seq} {hash}");
            }
            println!("heads digest {}", v.digest);
            if v.problems.is_empty() {
                println!(
                    "audit log intact: {} records in {} chains",
                    v.records, v.chains
                );
                Ok(())
            } else {
                for p in &v.problems {
                    println!("BROKEN: {p}");
                }
                Err(format!(
                    "the audit log was tampered with: {} problems",
                    v.problems.len()
                ))
            }
        }
        AuditAction::Export { dataset_id } => {
            let operator = crate::ledger::principal::Actor::operator();
            let mut after = 0;
            loop {
                let q = crate::store::AuditQuery {
                    dataset_id: dataset_id.clone(),
                    after,
                    limit: 1000,
                    ..Default::default()
                };
                let (items, next) = ledgers
                    .list_audit(&operator, q)
                    .await
                    .map_err(|e| e.to_string())?;
                for r in &items {
                    println!("{}", serde_json::to_string(r).map_err(|e| e.to_string())?);
                }
                match next {
                    Some(n) => after = n,
                    None => return Ok(()),
                }
            }
        }
    })
}
