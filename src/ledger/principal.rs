//! Who acts: principals, their roles, and what each role may do ([`role_allows`], the one place
//! the rule is written). Grants on one dataset are read by [`super::auth`].

use super::error::LedgerError;

/// The roles a grant can give.
pub const ROLES: &[&str] = &["admin", "analyst", "auditor"];

/// The global roles a token can hold: a role, or `none` (the token's grants only).
pub const GLOBAL_ROLES: &[&str] = &["admin", "analyst", "auditor", "none"];

/// The caller a request was authenticated as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The credential used (a token's id).
    pub token_id: String,
    /// The principal's name: what grants, quotas and the audit log refer to.
    pub name: String,
    /// The global role (`none`: grants only).
    pub role: String,
}

/// Who changes state, for the audit log: the principal, and where the request came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    pub principal: Principal,
    pub request_id: Option<String>,
    /// The client's address as the service saw it.
    pub client: Option<String>,
}

impl Actor {
    /// An operator at the command line (`privacy-ledger token …`), acting as a global admin.
    pub fn operator() -> Self {
        Actor {
            principal: Principal {
                token_id: "cli".into(),
                name: "operator (command line)".into(),
                role: "admin".into(),
            },
            request_id: None,
            client: Some("command line".into()),
        }
    }
}

/// Whether `role` allows `action`: the one place the rule is written.
pub fn role_allows(role: &str, action: Action) -> bool {
    match role {
        "admin" => true,
        "analyst" => matches!(action, Action::Read | Action::Spend),
        "auditor" => matches!(action, Action::Read | Action::Audit),
        _ => false,
    }
}

/// What a request does, for [`Principal::may`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Read datasets, ledgers, reports; stateless accounting.
    Read,
    /// Spend a dataset's budget (or ask what spending would do).
    Spend,
    /// Create datasets, change budgets, quotas and grants; manage tokens (globally).
    Administer,
    /// Read the audit log.
    Audit,
}

impl Action {
    pub fn describe(self) -> &'static str {
        match self {
            Action::Read => "read",
            Action::Spend => "spend a budget",
            Action::Administer => "administer (datasets, budgets, quotas, grants, tokens)",
            Action::Audit => "read the audit log",
        }
    }
}

impl Principal {
    /// Whether this principal's global role allows `action` everywhere ([`LedgerError::Forbidden`]
    /// if not). For a dataset, [`Ledgers::authorize`] also looks at grants.
    pub fn may(&self, action: Action) -> Result<(), LedgerError> {
        if role_allows(&self.role, action) {
            Ok(())
        } else {
            Err(LedgerError::Forbidden(format!(
                "the global {} role may not {}",
                self.role,
                action.describe()
            )))
        }
    }

    /// Whether the principal sees every dataset (a global role that may read).
    pub fn sees_all(&self) -> bool {
        role_allows(&self.role, Action::Read)
    }
}
