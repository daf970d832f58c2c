//! The SQL both stores run, written once with `?` placeholders ([`numbered`] makes PostgreSQL's
//! `$n`), and the values bound to it ([`Arg`]). Each engine spells a statement its way (PostgreSQL:
//! numbered placeholders and the byte-wise collation `"C"` for `BINARY`); nothing else differs.

/// Keeps a shared body (the same digest always names the same text, so a present one stays).
pub const SHARED_BODY_INSERT: &str = "INSERT INTO shared_bodies (digest, body) VALUES (?, ?) \
    ON CONFLICT (digest) DO NOTHING";
pub const SHARED_BODY_GET: &str = "SELECT body FROM shared_bodies WHERE digest = ?";
pub const AUDIT_HEAD_INIT: &str =
    "INSERT INTO audit_heads (chain, seq, hash) VALUES (?, 0, ?) ON CONFLICT (chain) DO NOTHING";
/// Takes the chain's next seq (and, on PostgreSQL, the head's row lock until commit).
pub const AUDIT_HEAD_NEXT: &str =
    "UPDATE audit_heads SET seq = seq + 1 WHERE chain = ? RETURNING seq, hash";
pub const AUDIT_HEAD_SET: &str = "UPDATE audit_heads SET hash = ? WHERE chain = ?";
/// The same for a record that states its ledger's state ([`states_ledger`]): the head points at it.
pub const AUDIT_HEAD_SET_STATE: &str =
    "UPDATE audit_heads SET hash = ?, state_seq = seq WHERE chain = ?";
pub const AUDIT_INSERT: &str = "INSERT INTO audit (chain, seq, at, principal, credential, \
    action, dataset_id, target, request_id, client, before_value, after_value, prev_hash, hash) \
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
/// Placed records (schema 12) after a position, in position order: the order they became
/// visible, so a reader paging with `after` never passes one that commits later.
pub const AUDIT_QUERY: &str = "SELECT pos AS id, chain, seq, at, principal, credential, action, \
    dataset_id, target, request_id, client, before_value, after_value, prev_hash, hash \
    FROM audit WHERE pos > ? AND (? IS NULL OR dataset_id = ?) AND (? IS NULL OR principal = ?) \
    AND (? IS NULL OR at >= ?) AND (? IS NULL OR at < ?) \
    AND (? IS NULL OR substr(action, 1, length(?)) = ?) ORDER BY pos LIMIT ?";
/// [`AUDIT_QUERY`] newest first: placed records before a position (all of them for `before`
/// = i64::MAX), in descending position order (the dashboard's audit page).
pub const AUDIT_QUERY_NEWEST: &str = "SELECT pos AS id, chain, seq, at, principal, credential, \
    action, dataset_id, target, request_id, client, before_value, after_value, prev_hash, hash \
    FROM audit WHERE pos < ? AND (? IS NULL OR dataset_id = ?) AND (? IS NULL OR principal = ?) \
    AND (? IS NULL OR at >= ?) AND (? IS NULL OR at < ?) \
    AND (? IS NULL OR substr(action, 1, length(?)) = ?) ORDER BY pos DESC LIMIT ?";
/// PostgreSQL: places unplaced records (at most `?`) after the largest position, in id order,
/// when their transaction is older than every running one (so each has committed and nothing
/// running can commit a record before it). Run under [`AUDIT_PLACE_LOCK`] in the same
/// transaction, so placings never interleave.
pub const AUDIT_PLACE: &str = "UPDATE audit SET pos = p.base + p.n FROM (SELECT id, \
    (SELECT COALESCE(MAX(pos), 0) FROM audit) AS base, row_number() OVER (ORDER BY id) AS n \
    FROM audit WHERE pos IS NULL \
    AND xid < pg_snapshot_xmin(pg_current_snapshot())::text::bigint ORDER BY id LIMIT ?) p \
    WHERE audit.id = p.id";
/// The advisory lock [`AUDIT_PLACE`] runs under (one placer at a time, on every replica).
pub const AUDIT_PLACE_LOCK: &str = "SELECT pg_advisory_xact_lock(7234001)";
/// Datasets (and blocks) that must have an audit chain and have none: an entry written with a
/// principal (schema 5 on, each with its record) or a version at or past `states_from`.
pub const DATASETS_WITHOUT_CHAIN: &str = "SELECT d.id FROM datasets d WHERE NOT EXISTS \
    (SELECT 1 FROM audit a WHERE a.chain = d.id) AND (d.version >= COALESCE(d.states_from, \
    d.version + 1) OR EXISTS (SELECT 1 FROM entries e WHERE e.dataset_id = d.id AND \
    e.principal IS NOT NULL)) ORDER BY d.id";
/// A chain's last record that states the ledger's state: the one its head points at (schema 11),
/// read by its key, so the check costs the same on a chain of any length.
pub const AUDIT_LAST_STATE: &str =
    "SELECT COALESCE(pos, 0) AS id, chain, seq, at, principal, credential, action, \
    dataset_id, target, request_id, client, before_value, after_value, prev_hash, hash \
    FROM audit WHERE chain = ? AND seq = (SELECT state_seq FROM audit_heads WHERE chain = ?)";

/// Whether an audit record's after value states its ledger's state (`"ledger":{`, the pattern
/// schema 11's migration searched for).
pub fn states_ledger(after: Option<&str>) -> bool {
    after.is_some_and(|a| a.contains("\"ledger\":{"))
}
pub const AUDIT_CHAIN: &str =
    "SELECT COALESCE(pos, 0) AS id, chain, seq, at, principal, credential, action, \
    dataset_id, target, request_id, client, before_value, after_value, prev_hash, hash \
    FROM audit WHERE chain = ? AND seq > ? ORDER BY seq LIMIT ?";
/// Every chain, with or without a head (a chain whose head row was deleted still has its
/// records checked, and shows seq -1 and an empty hash).
pub const AUDIT_HEADS: &str = "SELECT c.chain AS chain, COALESCE(h.seq, -1) AS seq, \
    COALESCE(h.hash, '') AS hash FROM (SELECT chain FROM audit_heads UNION \
    SELECT chain FROM audit) c LEFT JOIN audit_heads h ON h.chain = c.chain ORDER BY c.chain";
pub const GRANT_GET: &str = "SELECT role FROM grants WHERE dataset_id = ? AND principal = ?";
pub const GRANT_ANY: &str = "SELECT role FROM grants WHERE principal = ? LIMIT 1";
pub const GRANT_LIST: &str = "SELECT dataset_id, principal, role, created_at FROM grants \
    WHERE dataset_id = ? ORDER BY principal";
pub const GRANT_UPSERT: &str = "INSERT INTO grants (dataset_id, principal, role, created_at) \
    VALUES (?, ?, ?, ?) ON CONFLICT (dataset_id, principal) DO UPDATE SET role = excluded.role";
pub const GRANT_DELETE: &str = "DELETE FROM grants WHERE dataset_id = ? AND principal = ?";
pub const QUOTA_LIST: &str = "SELECT dataset_id, principal, mu, delta, mu_sq_spent, \
    delta_spent, units, updated_at FROM quotas WHERE dataset_id = ? ORDER BY principal";
pub const QUOTA_UPSERT: &str = "INSERT INTO quotas (dataset_id, principal, mu, delta, \
    mu_sq_spent, delta_spent, units, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) \
    ON CONFLICT (dataset_id, principal) DO UPDATE SET mu = excluded.mu, \
    delta = excluded.delta, mu_sq_spent = excluded.mu_sq_spent, \
    delta_spent = excluded.delta_spent, units = excluded.units, \
    updated_at = excluded.updated_at";

/// A new dataset (27 parameters, in [`super::DatasetRow`]'s order; `mu_spent_lower` repeats
/// `mu_spent`, `state` comes after `create_hash`).
pub const DATASET_INSERT: &str = "INSERT INTO datasets (id, description, \
    neighboring_relation, budget_mu, budget_delta, grid_step, version, charges, mu_spent, \
    mu_spent_lower, mu_sq_spent, delta_spent, units, exact_mu, reserved, create_hash, state, \
    mu_max, delta_max, cap_mu, cap_delta, statement_unknown, states_from, created_at, updated_at, \
    budget_target, population) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
/// The append's compare-and-swap: every field of [`super::DatasetUpdate`] assigned (what
/// [`super::DatasetUpdate::applied`] mirrors), the version moved by one, only at the expected
/// version. The composition's snapshot is not touched ([`SNAPSHOT_SET`]).
pub const APPEND_UPDATE: &str = "UPDATE datasets SET version = version + 1, budget_mu = ?, \
    budget_delta = ?, mu_max = ?, delta_max = ?, charges = ?, mu_spent = ?, \
    mu_spent_lower = ?, mu_sq_spent = ?, delta_spent = ?, units = ?, \
    reserved = ?, updated_at = ? WHERE id = ? AND version = ?";
pub const DATASET_EXISTS: &str = "SELECT 1 FROM datasets WHERE id = ?";
/// [`super::LedgerAppend::hold`]: changes nothing, but only at the held version, and (on
/// PostgreSQL) locks the row until the transaction ends.
pub const DATASET_HOLD: &str = "UPDATE datasets SET version = version WHERE id = ? AND \
    version = ?";
/// [`super::LedgerAppend::blocks`]: a partitioned dataset's blocks (see `block_id_range`),
/// compared byte by byte as [`BLOCK_LIST`] does (PostgreSQL: `COLLATE "C"`, see [`postgres`]); under a
/// linguistic collation the range would hold other datasets and miss some blocks.
pub const BLOCK_COUNT: &str = "SELECT count(*) FROM datasets WHERE id COLLATE BINARY >= ? \
    AND id COLLATE BINARY < ?";

/// A block's first row (a concurrent creator may have inserted it: then the append's
/// compare-and-swap at version 0 decides).
pub const DATASET_INSERT_IF_ABSENT: &str = "INSERT INTO datasets (id, description, \
    neighboring_relation, budget_mu, budget_delta, grid_step, version, charges, mu_spent, \
    mu_spent_lower, mu_sq_spent, delta_spent, units, exact_mu, reserved, create_hash, state, \
    mu_max, delta_max, cap_mu, cap_delta, statement_unknown, states_from, created_at, updated_at, \
    budget_target, population) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
    ON CONFLICT (id) DO NOTHING";
pub const ALERT_RULE_GET: &str = "SELECT thresholds FROM alert_rules WHERE dataset_id = ?";
pub const ALERT_RULE_SET: &str = "INSERT INTO alert_rules (dataset_id, thresholds, updated_at) \
    VALUES (?, ?, ?) ON CONFLICT (dataset_id) DO UPDATE SET thresholds = excluded.thresholds, \
    updated_at = excluded.updated_at";
pub const CROSSING_CLAIM: &str = "INSERT INTO alert_crossings (dataset_id, threshold, crossed_at) \
    VALUES (?, ?, ?) ON CONFLICT (dataset_id, threshold) DO NOTHING";
pub const CROSSING_REARM: &str =
    "DELETE FROM alert_crossings WHERE dataset_id = ? AND threshold > ?";
pub const CROSSING_LIST: &str =
    "SELECT threshold FROM alert_crossings WHERE dataset_id = ? ORDER BY threshold";
/// A budget change's new `budget_target`, in the append's transaction.
pub const BUDGET_TARGET_SET: &str = "UPDATE datasets SET budget_target = ? WHERE id = ?";
pub const PARTITIONING_SET: &str = "UPDATE datasets SET partitioning = ? WHERE id = ?";
pub const PARTITIONING_GET: &str = "SELECT partitioning FROM datasets WHERE id = ?";
/// A start, commit or release: the charge's new status, only from the status the ledger
/// read (a compare-and-swap on the status, in the append's transaction).
pub const SETTLE: &str = "UPDATE entries SET status = ? WHERE dataset_id = ? AND \
    charge_id = ? AND kind = 'charge' AND status = ?";
/// Whether a dataset holds an idempotency key stored before keys were scoped (not of the
/// form `~` + 32 characters + `~` + the client's key; see `ledger::keys`).
pub const LEGACY_KEY_ANY: &str = "SELECT 1 FROM entries WHERE dataset_id = ? AND \
    idempotency_key IS NOT NULL AND NOT (length(idempotency_key) > 34 AND \
    substr(idempotency_key, 1, 1) = '~' AND substr(idempotency_key, 34, 1) = '~') LIMIT 1";
pub const ENTRY_INSERT: &str = "INSERT INTO entries (dataset_id, seq, kind, charge_id, event, \
    label, metadata, idempotency_key, request_hash, mu_after, unit_mu, unit_delta, budget_mu, \
    budget_delta, response, ref_id, run_id, chunk, status, principal, quota, created_at) \
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
/// A version-1 ledger's conversion (only once: `mu_sq_spent` is NULL until then).
pub const CONVERT_DATASET: &str = "UPDATE datasets SET mu_spent = ?, mu_spent_lower = ?, \
    mu_sq_spent = ?, delta_spent = ?, units = ? WHERE id = ? AND version = ? \
    AND mu_sq_spent IS NULL";
pub const CONVERT_ENTRY: &str =
    "UPDATE entries SET unit_mu = ?, unit_delta = ? WHERE dataset_id = ? AND seq = ?";
pub const TOKEN_INSERT: &str = "INSERT INTO tokens (id, name, hash, role, created_at, \
    expires_at, revoked_at) VALUES (?, ?, ?, ?, ?, ?, ?)";
/// The first token, only on an empty store.
pub const TOKEN_INSERT_FIRST: &str = "INSERT INTO tokens (id, name, hash, role, created_at, \
    expires_at, revoked_at) SELECT ?, ?, ?, ?, ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM tokens)";
pub const TOKEN_REVOKE: &str =
    "UPDATE tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL";

macro_rules! dataset_columns {
    () => {
        "id, description, neighboring_relation, budget_mu, budget_delta, grid_step, version, \
         charges, mu_spent, mu_sq_spent, delta_spent, units, exact_mu, reserved, create_hash, \
         mu_max, delta_max, cap_mu, cap_delta, statement_unknown, states_from, state_seq, \
         budget_target, population, created_at, updated_at"
    };
}
macro_rules! entry_columns {
    () => {
        "seq, kind, charge_id, event, label, metadata, idempotency_key, request_hash, mu_after, \
         unit_mu, unit_delta, budget_mu, budget_delta, response, ref_id, run_id, chunk, status, \
         principal, quota, created_at"
    };
}
macro_rules! token_columns {
    () => {
        "id, name, hash, role, created_at, expires_at, revoked_at"
    };
}
pub const DATASET_GET: &str = concat!("SELECT ", dataset_columns!(), " FROM datasets WHERE id = ?");
/// Where a dataset's snapshot is: its seq, and the token and count of its parts, or (no
/// token) its bytes in `state`.
pub const SNAPSHOT_GET: &str = "SELECT state_seq, snapshot, snapshot_parts, \
    CASE WHEN snapshot IS NULL THEN state END AS state FROM datasets WHERE id = ?";
pub const CERTIFICATES_GET: &str = "SELECT value FROM certificates WHERE key = ?";
/// A key names one result, so replacing it changes nothing, except a row that was edited.
pub const CERTIFICATES_PUT: &str = "INSERT INTO certificates (key, value) VALUES (?, ?) \
    ON CONFLICT (key) DO UPDATE SET value = excluded.value";
pub const SNAPSHOT_PARTS: &str =
    "SELECT bytes FROM snapshot_parts WHERE dataset_id = ? AND token = ? ORDER BY part";
pub const SNAPSHOT_PART_INSERT: &str = "INSERT INTO snapshot_parts (dataset_id, token, seq, \
    part, bytes) VALUES (?, ?, ?, ?, ?)";
/// Points the dataset at a newer snapshot (only newer: two writers of one seq, or an older
/// one finishing late, change nothing), emptying `state`, with the composition's μ.
pub const SNAPSHOT_SET: &str = "UPDATE datasets SET state_seq = ?, snapshot = ?, \
    snapshot_parts = ?, state = ?, exact_mu = ? WHERE id = ? AND state_seq < ?";
/// Parts of snapshots older than the one in force (the newest is never dropped: a writer of
/// a newer one drops nothing of it, and a writer whose snapshot lost drops only its own).
pub const SNAPSHOT_DROP_BEFORE: &str =
    "DELETE FROM snapshot_parts WHERE dataset_id = ? AND seq < ?";
pub const SNAPSHOT_DROP_TOKEN: &str =
    "DELETE FROM snapshot_parts WHERE dataset_id = ? AND token = ?";
/// A page of datasets after an id (not blocks); with a principal, only those it has a grant
/// on.
pub const DATASET_LIST: &str = concat!(
    "SELECT ",
    dataset_columns!(),
    " FROM datasets WHERE id > ? AND id NOT LIKE '%@%' AND (? IS NULL OR id IN \
     (SELECT dataset_id FROM grants WHERE principal = ?)) ORDER BY id LIMIT ?"
);
/// A page of a partitioned dataset's blocks after an id: the ids `parent@…` are exactly
/// those in [`parent@`, `parentA`) ('A' follows '@') *in byte order*, so every comparison
/// and the order are byte-wise (`COLLATE BINARY`; PostgreSQL's `"C"`, see
/// [`postgres`]) — under a linguistic collation (e.g. en-US) `events1` would fall
/// inside `events`' range. PostgreSQL serves it from `datasets_id_bytes`, SQLite from the
/// primary key (BINARY already).
pub const BLOCK_LIST: &str = concat!(
    "SELECT ",
    dataset_columns!(),
    " FROM datasets WHERE id COLLATE BINARY >= ? AND id COLLATE BINARY < ? \
     AND id COLLATE BINARY > ? ORDER BY id COLLATE BINARY LIMIT ?"
);

pub const ENTRY_BY_KEY: &str = concat!(
    "SELECT ",
    entry_columns!(),
    " FROM entries WHERE dataset_id = ? AND idempotency_key = ?"
);
pub const ENTRY_BY_CHARGE: &str = concat!(
    "SELECT ",
    entry_columns!(),
    " FROM entries WHERE dataset_id = ? AND charge_id = ? AND kind = 'charge'"
);
pub const RUN_LIST: &str = concat!(
    "SELECT ",
    entry_columns!(),
    " FROM entries WHERE dataset_id = ? AND run_id = ? AND seq > ? ORDER BY seq"
);
/// A page of entries after a seq, optionally of one kind.
/// A ledger's charges, only the columns a summary shows ([`super::UnitRow`]).
pub const UNIT_LIST: &str = "SELECT seq, charge_id, label, mu_after, unit_mu, unit_delta, \
    run_id, chunk, status, principal, created_at FROM entries WHERE dataset_id = ? \
    AND seq > ? AND kind = 'charge' ORDER BY seq LIMIT ?";
pub const ENTRY_LIST: &str = concat!(
    "SELECT ",
    entry_columns!(),
    " FROM entries WHERE dataset_id = ? AND seq > ? AND (? IS NULL OR kind = ?) \
     ORDER BY seq LIMIT ?"
);
pub const TOKEN_BY_ID: &str = concat!("SELECT ", token_columns!(), " FROM tokens WHERE id = ?");
/// Dashboard sessions (schema 12).
pub const SESSION_PURGE: &str = "DELETE FROM sessions WHERE expires_at <= ?";
pub const SESSION_INSERT: &str = "INSERT INTO sessions (hash, token_id, principal, role, \
    created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)";
/// Keeps a credential's newest `?` sessions.
pub const SESSION_TRIM: &str = "DELETE FROM sessions WHERE token_id = ? AND hash NOT IN \
    (SELECT hash FROM sessions WHERE token_id = ? ORDER BY created_at DESC, hash LIMIT ?)";
pub const SESSION_GET: &str = "SELECT hash, token_id, principal, role, created_at, expires_at \
    FROM sessions WHERE hash = ?";
pub const SESSION_DELETE: &str = "DELETE FROM sessions WHERE hash = ?";
pub const SESSION_DELETE_TOKEN: &str = "DELETE FROM sessions WHERE token_id = ?";
pub const TOKEN_BY_HASH: &str = concat!("SELECT ", token_columns!(), " FROM tokens WHERE hash = ?");
pub const TOKEN_LIST: &str = concat!(
    "SELECT ",
    token_columns!(),
    " FROM tokens ORDER BY created_at, id"
);

/// `?` placeholders as PostgreSQL's `$1, $2, …` (no statement here has a `?` in a literal).
pub fn numbered(q: &str) -> String {
    let mut out = String::with_capacity(q.len() + 16);
    let mut n = 0;
    for ch in q.chars() {
        if ch == '?' {
            n += 1;
            out.push('$');
            out.push_str(&n.to_string());
        } else {
            out.push(ch);
        }
    }
    out
}

/// A statement as PostgreSQL runs it: `$n` placeholders, and its byte-wise collation `"C"` where
/// SQLite's is `BINARY` (only [`BLOCK_LIST`] and [`BLOCK_COUNT`] name one).
pub fn postgres(q: &str) -> String {
    numbered(&q.replace("COLLATE BINARY", "COLLATE \"C\""))
}

/// A value bound to a placeholder: text, an integer or a float (each possibly NULL), or bytes.
/// Each engine binds the Rust type it holds (`Option<&str>`, `Option<i64>`, `Option<f64>`,
/// `&[u8]`), as each store bound its own values before they shared their statements.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arg<'a> {
    Text(Option<&'a str>),
    Int(Option<i64>),
    Real(Option<f64>),
    Bytes(&'a [u8]),
}

macro_rules! arg_from {
    ($($t:ty => |$v:ident| $e:expr;)*) => {
        $(impl<'a> From<$t> for Arg<'a> {
            fn from($v: $t) -> Self {
                $e
            }
        })*
    };
}

arg_from! {
    &'a str => |v| Arg::Text(Some(v));
    &'a String => |v| Arg::Text(Some(v));
    Option<&'a str> => |v| Arg::Text(v);
    &'a Option<String> => |v| Arg::Text(v.as_deref());
    i64 => |v| Arg::Int(Some(v));
    &'a i64 => |v| Arg::Int(Some(*v));
    Option<i64> => |v| Arg::Int(v);
    f64 => |v| Arg::Real(Some(v));
    &'a f64 => |v| Arg::Real(Some(*v));
    Option<f64> => |v| Arg::Real(v);
    &'a [u8] => |v| Arg::Bytes(v);
    &'a Vec<u8> => |v| Arg::Bytes(v);
}

/// The values of a statement's placeholders, in order: `args!(id, seq)`.
macro_rules! args {
    ($($v:expr),* $(,)?) => {
        &[$($crate::store::sql::Arg::from($v)),*][..]
    };
}
pub(crate) use args;
