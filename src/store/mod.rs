//! Persistence: the ledger's storage contract and its implementations.
//!
//! The ledger is append-only: a dataset row (budget, the filter's sums, a snapshot of the exact
//! composition and a `version` = number of entries) and its entries (charges and budget changes).
//! [`Store::append`] is the one write that matters: in a single transaction it bumps the version
//! *only if* it still equals the version the caller gated on (compare-and-swap), inserts the entry
//! (unique on `(dataset_id, idempotency_key)`) and updates the sums: a few hundred bytes, whatever
//! the ledger holds. A charge is acknowledged only after that transaction commits. Snapshots of the
//! composition are written apart from appends ([`Store::put_snapshot`]).
//!
//! # Layout
//! This file holds the contract ([`Store`], the one front door, and [`StoreError`]), the rows and
//! the schema ([`SCHEMA`], [`MIGRATIONS`]). [`sql`] holds every statement, once for both engines;
//! `shared` implements [`Store`] once, over an engine: its reads, its row decoders and every
//! write's algorithm (the append's compare-and-swap, the audit chain …). [`postgres`] and
//! [`sqlite`] keep only what differs: connection, pool, type names, placeholders, locking, error
//! codes, how a write is committed (SQLite's group-commit writer: `sqlite_writer`).
//!
//! # Schema versions
//! Both stores keep `schema_version` and apply [`MIGRATIONS`] in order on start (a fresh database
//! gets the version-1 tables, then every migration, so it ends identical to a migrated one).
//! Version 2 adds the adaptive filter's state: `datasets.mu_sq_spent`, `delta_spent`, `units`,
//! `exact_mu` and `entries.unit_mu`, `unit_delta` (NULL on rows written by version 1 until the ledger
//! converts them; `mu_spent_lower` is no longer read).
//! Version 3 adds reservations and runs: `entries.ref_id` (the charge a commit or release settles),
//! `run_id`, `chunk` (a run's declaration and its chunks), `status` (of a charge: `reserved`,
//! `committed`, `released`; NULL = committed, as every charge before version 3 was), and
//! `datasets.reserved` (open reservations) and `create_hash` (so a retried creation is recognised).
//! Version 4 adds `tokens`: bearer tokens stored only as their SHA-256, with a role, an optional
//! expiry and a revocation time.
//! Version 5 adds `grants` (a principal's role on one dataset), `quotas` (a principal's share of a
//! dataset's budget and what it spent; principal `*` is the unallocated share), `entries.principal`
//! and `entries.quota` (who charged a unit and which share paid for it), and the audit log:
//! `audit` (one hash-chained record per state change, a chain per dataset plus one for tokens) and
//! `audit_heads` (each chain's last seq and hash, written in the same transaction, so a deleted last
//! record is detected too). See [`audit_hash`].
//! Version 6 adds `shared_bodies`: parts of stored responses that many entries share (a charge's
//! report is the same for every charge within the budget), stored once under their SHA-256 and
//! referred to from `entries.response` ([`SharedBody`]); `entries_run` indexes run entries only.
//! Version 7 adds `datasets.partitioning`: a partitioned dataset's declaration (JSON). Its blocks
//! are datasets of their own, with ids `parent@block` ('@' is not allowed in a dataset id, so a
//! block id never collides with one), created by the first charge that reads them
//! ([`Store::append_many`]).
//! Version 8 adds what the ledger's guarantee statement needs: `datasets.mu_max`, `delta_max` (the
//! budget's high-water mark: the largest μ_B and δ_B ever in force; lowering the budget never lowers
//! them), `cap_mu`, `cap_delta` (an optional cap fixed at creation, which no budget may pass) and
//! `statement_unknown` (why no filter statement holds for the ledger's past, or NULL). Migrated
//! ledgers get the largest budget their entries and audit log record, and `statement_unknown`
//! when their charges were admitted by version 1's gate (a charge's stored response carries no
//! certificate) or when a budget change predates the audit log (the budget before it is lost).

//! Version 9 adds `datasets.states_from`: the first version whose audit record states the ledger's
//! state ([`LedgerState`]); migrated ledgers get their next version, new ones 0. A ledger at or past
//! it must have a state record, so deleting its chain does not hide a changed row.
//! Version 10 takes the exact composition off the write path: no append writes `state` or
//! `exact_mu` any more. The composition is a snapshot — at `state_seq` (the version it describes:
//! every charge committed at or before it; migrated ledgers get their version, whose composition
//! `state` held) — written now and then by the ledger outside any append ([`Store::put_snapshot`]),
//! in parts of at most [`SNAPSHOT_PART_BYTES`] (`snapshot_parts`, under a random `snapshot`
//! token), so no single write holds SQLite's writer for long; `state` keeps the snapshot of
//! ledgers none was written for since. `certificates` keeps units' certificates by the build that
//! computed them and the unit (`ledger::certificates`), so a restart does not certify them again.
//!
//! Version 11 keeps, in `audit_heads.state_seq`, the seq of the chain's last record that states
//! its ledger's state, so the check before every write ([`Store::last_state_audit`]) reads one
//! record by its key instead of searching the chain backwards (on PostgreSQL the generic plan of
//! that search read every record of the chain: 18 ms at 10⁴ records, growing with the ledger).
//!
//! Version 12 gives every audit record a position (`pos`) in the order records become visible,
//! which is what a reader paging with `after` needs: ids come from a sequence taken before
//! commit, so on PostgreSQL a record with a smaller id can commit after a reader passed a larger
//! one (139 of 1,241 records were never seen by a tailer under concurrent writers). SQLite
//! commits one writer at a time, so a trigger sets `pos` to the id. PostgreSQL records keep the
//! writing transaction's id (`xid`) and are placed by the reader ([`Store::list_audit`]), under
//! one advisory lock, in one batch after the largest placed position: only records whose
//! transaction is older than every running one (`pg_snapshot_xmin`), so nothing that is still
//! to commit can later take a smaller position. It also keeps dashboard sessions (`sessions`).
//!
//! Version 13 adds `datasets.budget_target`: how the budget was given when as an (ε, δ) target,
//! written with the budget it was converted to. Version 14 adds budget alerts: `alert_rules` (a
//! dataset's thresholds, when not the default) and `alert_crossings` (thresholds a ledger has
//! crossed, claimed once across replicas; removed when its use falls back below). Version 15 adds
//! `datasets.population`: the privacy unit (record, user, …) and the dataset's size, fixed at
//! creation (a run's sampler is checked against the size).

/// The schema version this release writes (the last of [`MIGRATIONS`]).
pub const LATEST: i64 = 15;

/// The version-1 schema, in [`MIGRATIONS`]' placeholders (spelt per store by [`migration_sql`]):
/// every store creates it if absent, then migrates it.
pub const SCHEMA: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS datasets (
        id TEXT PRIMARY KEY,
        description TEXT NOT NULL,
        neighboring_relation TEXT NOT NULL,
        budget_mu {F} NOT NULL,
        budget_delta {F} NOT NULL,
        grid_step {F} NOT NULL,
        version {I} NOT NULL,
        charges {I} NOT NULL,
        mu_spent {F} NOT NULL,
        mu_spent_lower {F} NOT NULL,
        state {BLOB} NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    )",
    "CREATE TABLE IF NOT EXISTS entries (
        dataset_id TEXT NOT NULL REFERENCES datasets(id),
        seq {I} NOT NULL,
        kind TEXT NOT NULL,
        charge_id TEXT,
        event TEXT,
        label TEXT,
        metadata TEXT,
        idempotency_key TEXT,
        request_hash TEXT,
        mu_after {F},
        budget_mu {F},
        budget_delta {F},
        response TEXT,
        created_at TEXT NOT NULL,
        PRIMARY KEY (dataset_id, seq)
    )",
    "CREATE UNIQUE INDEX IF NOT EXISTS entries_idempotency
        ON entries (dataset_id, idempotency_key) WHERE idempotency_key IS NOT NULL",
];

/// Schema migrations after version 1, as (version, statements); the SQL is portable between
/// SQLite and PostgreSQL (`REAL` is `float4` in PostgreSQL, so `DOUBLE PRECISION` is spelt out
/// per store by [`migration_sql`]).
pub const MIGRATIONS: &[(i64, &[&str])] = &[
    (
        2,
        &[
            "ALTER TABLE datasets ADD COLUMN mu_sq_spent {F}",
            "ALTER TABLE datasets ADD COLUMN delta_spent {F}",
            "ALTER TABLE datasets ADD COLUMN units {I}",
            "ALTER TABLE datasets ADD COLUMN exact_mu {F}",
            "ALTER TABLE entries ADD COLUMN unit_mu {F}",
            "ALTER TABLE entries ADD COLUMN unit_delta {F}",
        ],
    ),
    (
        3,
        &[
            "ALTER TABLE entries ADD COLUMN ref_id TEXT",
            "ALTER TABLE entries ADD COLUMN run_id TEXT",
            "ALTER TABLE entries ADD COLUMN chunk {I}",
            "ALTER TABLE entries ADD COLUMN status TEXT",
            "ALTER TABLE datasets ADD COLUMN reserved {I}",
            "ALTER TABLE datasets ADD COLUMN create_hash TEXT",
            "CREATE INDEX IF NOT EXISTS entries_charge ON entries (dataset_id, charge_id)",
            "CREATE INDEX IF NOT EXISTS entries_run ON entries (dataset_id, run_id)",
        ],
    ),
    (
        4,
        &["CREATE TABLE IF NOT EXISTS tokens (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            hash TEXT NOT NULL UNIQUE,
            role TEXT NOT NULL,
            created_at TEXT NOT NULL,
            expires_at TEXT,
            revoked_at TEXT
        )"],
    ),
    (
        5,
        &[
            "CREATE TABLE IF NOT EXISTS grants (
                dataset_id TEXT NOT NULL,
                principal TEXT NOT NULL,
                role TEXT NOT NULL,
                created_at TEXT NOT NULL,
                PRIMARY KEY (dataset_id, principal)
            )",
            "CREATE INDEX IF NOT EXISTS grants_principal ON grants (principal, dataset_id)",
            "CREATE TABLE IF NOT EXISTS quotas (
                dataset_id TEXT NOT NULL,
                principal TEXT NOT NULL,
                mu {F} NOT NULL,
                delta {F} NOT NULL,
                mu_sq_spent {F} NOT NULL,
                delta_spent {F} NOT NULL,
                units {I} NOT NULL,
                updated_at TEXT NOT NULL,
                PRIMARY KEY (dataset_id, principal)
            )",
            "ALTER TABLE entries ADD COLUMN principal TEXT",
            "ALTER TABLE entries ADD COLUMN quota TEXT",
            "CREATE TABLE IF NOT EXISTS audit (
                id {SERIAL},
                chain TEXT NOT NULL,
                seq {I} NOT NULL,
                at TEXT NOT NULL,
                principal TEXT NOT NULL,
                credential TEXT,
                action TEXT NOT NULL,
                dataset_id TEXT,
                target TEXT,
                request_id TEXT,
                client TEXT,
                before_value TEXT,
                after_value TEXT,
                prev_hash TEXT NOT NULL,
                hash TEXT NOT NULL,
                UNIQUE (chain, seq)
            )",
            "CREATE INDEX IF NOT EXISTS audit_dataset ON audit (dataset_id, id)",
            "CREATE INDEX IF NOT EXISTS audit_principal ON audit (principal, id)",
            "CREATE TABLE IF NOT EXISTS audit_heads (
                chain TEXT PRIMARY KEY,
                seq {I} NOT NULL,
                hash TEXT NOT NULL
            )",
        ],
    ),
    (
        6,
        &[
            "CREATE TABLE IF NOT EXISTS shared_bodies (
                digest TEXT PRIMARY KEY,
                body TEXT NOT NULL
            )",
            // Only run entries need the run index: a plain charge no longer writes a page of it.
            "DROP INDEX IF EXISTS entries_run",
            "CREATE INDEX IF NOT EXISTS entries_run ON entries (dataset_id, run_id) \
                WHERE run_id IS NOT NULL",
        ],
    ),
    (
        7,
        &[
            "ALTER TABLE datasets ADD COLUMN partitioning TEXT",
            // Byte-wise order of ids, for a partitioned dataset's block range (`BLOCK_LIST`).
            "CREATE INDEX IF NOT EXISTS datasets_id_bytes ON datasets (id COLLATE {C})",
        ],
    ),
    (
        8,
        &[
            "ALTER TABLE datasets ADD COLUMN mu_max {F}",
            "ALTER TABLE datasets ADD COLUMN delta_max {F}",
            "ALTER TABLE datasets ADD COLUMN cap_mu {F}",
            "ALTER TABLE datasets ADD COLUMN cap_delta {F}",
            "ALTER TABLE datasets ADD COLUMN statement_unknown TEXT",
            "UPDATE datasets SET mu_max = budget_mu, delta_max = budget_delta",
            // Every budget the ledger recorded: budget entries, and the budget before each audited
            // change (the creation budget, when it was lowered).
            "UPDATE datasets SET mu_max = (SELECT MAX(e.budget_mu) FROM entries e WHERE \
             e.dataset_id = datasets.id AND e.kind = 'budget') WHERE mu_max < (SELECT \
             MAX(e.budget_mu) FROM entries e WHERE e.dataset_id = datasets.id AND \
             e.kind = 'budget')",
            "UPDATE datasets SET delta_max = (SELECT MAX(e.budget_delta) FROM entries e WHERE \
             e.dataset_id = datasets.id AND e.kind = 'budget') WHERE delta_max < (SELECT \
             MAX(e.budget_delta) FROM entries e WHERE e.dataset_id = datasets.id AND \
             e.kind = 'budget')",
            "UPDATE datasets SET mu_max = (SELECT MAX({J:a.before_value:mu}) FROM audit a WHERE \
             a.dataset_id = datasets.id AND a.action = 'budget.changed') WHERE mu_max < (SELECT \
             MAX({J:a.before_value:mu}) FROM audit a WHERE a.dataset_id = datasets.id AND \
             a.action = 'budget.changed')",
            "UPDATE datasets SET delta_max = (SELECT MAX({J:a.before_value:delta}) FROM audit a \
             WHERE a.dataset_id = datasets.id AND a.action = 'budget.changed') WHERE delta_max < \
             (SELECT MAX({J:a.before_value:delta}) FROM audit a WHERE a.dataset_id = datasets.id \
             AND a.action = 'budget.changed')",
            "UPDATE datasets SET statement_unknown = 'a budget change predates the audit log: the \
             budget in force before it is not recorded' WHERE (SELECT COUNT(*) FROM entries e \
             WHERE e.dataset_id = datasets.id AND e.kind = 'budget') > (SELECT COUNT(*) FROM \
             audit a WHERE a.dataset_id = datasets.id AND a.action = 'budget.changed')",
            // A version-1 charge's stored response has no certificate (`charge.unit`); parsed,
            // not searched as text (a caller's metadata may hold "unit").
            "UPDATE datasets SET statement_unknown = 'converted from schema version 1: its \
             earlier charges were admitted by the old gate, which is not a filter' WHERE EXISTS \
             (SELECT 1 FROM entries e WHERE e.dataset_id = datasets.id AND e.kind = 'charge' AND \
             e.principal IS NULL AND (e.response IS NULL OR \
             {J:e.response:charge.unit.mu} IS NULL))",
        ],
    ),
    (
        9,
        &[
            "ALTER TABLE datasets ADD COLUMN states_from {I}",
            "UPDATE datasets SET states_from = version + 1",
        ],
    ),
    (
        10,
        &[
            "ALTER TABLE datasets ADD COLUMN state_seq {I} NOT NULL DEFAULT 0",
            // Every append until now stored the composition at its version.
            "UPDATE datasets SET state_seq = version",
            "ALTER TABLE datasets ADD COLUMN snapshot TEXT",
            "ALTER TABLE datasets ADD COLUMN snapshot_parts {I}",
            "CREATE TABLE IF NOT EXISTS certificates (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
            // A run's entries after a seq, found without reading its earlier ones.
            "DROP INDEX IF EXISTS entries_run",
            "CREATE INDEX IF NOT EXISTS entries_run ON entries (dataset_id, run_id, seq) \
                WHERE run_id IS NOT NULL",
            "CREATE TABLE IF NOT EXISTS snapshot_parts (
                dataset_id TEXT NOT NULL,
                token TEXT NOT NULL,
                seq {I} NOT NULL,
                part {I} NOT NULL,
                bytes {BLOB} NOT NULL,
                PRIMARY KEY (dataset_id, token, part)
            )",
        ],
    ),
    (
        11,
        &[
            "ALTER TABLE audit_heads ADD COLUMN state_seq {I}",
            // The search every check made until now, once per chain.
            "UPDATE audit_heads SET state_seq = (SELECT MAX(a.seq) FROM audit a WHERE \
             a.chain = audit_heads.chain AND a.after_value LIKE '%\"ledger\":{%')",
        ],
    ),
    (
        12,
        &[
            // The audit log's commit-ordered position (see the module docs); earlier records
            // are all committed, so their ids serve.
            "ALTER TABLE audit ADD COLUMN pos {I}",
            "UPDATE audit SET pos = id",
            "CREATE UNIQUE INDEX IF NOT EXISTS audit_pos ON audit (pos)",
            "DROP INDEX IF EXISTS audit_dataset",
            "DROP INDEX IF EXISTS audit_principal",
            "CREATE INDEX IF NOT EXISTS audit_dataset_pos ON audit (dataset_id, pos)",
            "CREATE INDEX IF NOT EXISTS audit_principal_pos ON audit (principal, pos)",
            // SQLite commits one writer at a time in id order: a record's position is its id.
            "sqlite: CREATE TRIGGER IF NOT EXISTS audit_position AFTER INSERT ON audit \
             FOR EACH ROW WHEN NEW.pos IS NULL BEGIN \
             UPDATE audit SET pos = NEW.id WHERE id = NEW.id; END",
            // PostgreSQL: the writing transaction's id, so a record is placed only once every
            // transaction that could commit before it has ended ([`sql::AUDIT_PLACE`]).
            "postgres: ALTER TABLE audit ADD COLUMN xid BIGINT \
             DEFAULT (pg_current_xact_id()::text::bigint)",
            "postgres: CREATE INDEX IF NOT EXISTS audit_unplaced ON audit (id) WHERE pos IS NULL",
            // Dashboard sessions: the cookie's random id, stored as its SHA-256.
            "CREATE TABLE IF NOT EXISTS sessions (
                hash TEXT PRIMARY KEY,
                token_id TEXT NOT NULL,
                principal TEXT NOT NULL,
                role TEXT NOT NULL,
                created_at TEXT NOT NULL,
                expires_at TEXT NOT NULL
            )",
            "CREATE INDEX IF NOT EXISTS sessions_token ON sessions (token_id, created_at)",
            "CREATE INDEX IF NOT EXISTS sessions_expiry ON sessions (expires_at)",
        ],
    ),
    (
        13,
        &[
            // How the budget was given, when as an (ε, δ) target (JSON; see `DatasetRow`).
            "ALTER TABLE datasets ADD COLUMN budget_target TEXT",
        ],
    ),
    (
        14,
        &[
            // A dataset's alert thresholds (JSON list of used shares), when not the default.
            "CREATE TABLE IF NOT EXISTS alert_rules (
                dataset_id TEXT PRIMARY KEY,
                thresholds TEXT NOT NULL,
                updated_at TEXT NOT NULL
            )",
            // Thresholds a ledger has crossed (claimed once, by one replica, per crossing; removed
            // when its use falls back below, so the next crossing alerts again).
            "CREATE TABLE IF NOT EXISTS alert_crossings (
                dataset_id TEXT NOT NULL,
                threshold {F} NOT NULL,
                crossed_at TEXT NOT NULL,
                PRIMARY KEY (dataset_id, threshold)
            )",
        ],
    ),
    (
        15,
        &[
            // The privacy unit and the dataset's size (JSON; see `DatasetRow::population`).
            "ALTER TABLE datasets ADD COLUMN population TEXT",
        ],
    ),
];

/// Bytes of one part of a snapshot ([`Store::put_snapshot`]): a write of this size takes SQLite's
/// writer for about as long as a group of small appends.
pub const SNAPSHOT_PART_BYTES: usize = 256 << 10;

#[cfg(test)]
#[test]
fn latest_is_the_last_migration() {
    assert_eq!(MIGRATIONS.last().map(|m| m.0), Some(LATEST));
    // In order, one per version: the stores apply them in list order and record each version,
    // so one out of order would be skipped on a fresh database (a session once put 15 before 14).
    for w in MIGRATIONS.windows(2) {
        assert_eq!(
            w[1].0,
            w[0].0 + 1,
            "migration {} follows {}",
            w[1].0,
            w[0].0
        );
    }
}

/// Refuses a database written by a newer release (schema `current` above this release's `upto`):
/// an older binary would write rows without what the newer one relies on (the budget's
/// high-water mark, scoped keys, owners), so it must not serve them. Replicas are therefore
/// upgraded all together (stop the old ones first).
pub fn refuse_newer(current: Option<i64>, upto: i64) -> Result<(), StoreError> {
    match current {
        Some(c) if c > upto => Err(StoreError::Corrupt(format!(
            "the database's schema version {c} is newer than this release's {upto}: run the \
             release that wrote it (or a newer one)"
        ))),
        _ => Ok(()),
    }
}

/// How a store spells the schema's types: float, integer, auto-increment key and byte string,
/// its byte-wise collation (SQLite `BINARY`, PostgreSQL `"C"`), and `json(column, key)`: the
/// number at `key` (a dotted path) of the JSON text in `column`, NULL where it has none.
pub struct Dialect {
    pub float: &'static str,
    pub int: &'static str,
    pub serial: &'static str,
    pub blob: &'static str,
    pub bytes: &'static str,
    pub json: fn(&str, &str) -> String,
    /// The engine's name: a schema statement that starts with `name:` runs on that engine only.
    pub engine: &'static str,
}

/// A schema statement ([`SCHEMA`], [`MIGRATIONS`]) in a store's [`Dialect`]: `{F}`, `{I}`,
/// `{SERIAL}`, `{BLOB}` and `{C}` replaced by its names, each `{J:column:key}` by its `json`;
/// `None` for a statement written for the other engine (`sqlite: …`, `postgres: …`).
pub fn migration_sql(stmt: &str, d: &Dialect) -> Option<String> {
    let stmt = match stmt.split_once(": ") {
        Some((engine, rest)) if engine == d.engine => rest,
        Some((engine, _)) if ["sqlite", "postgres"].contains(&engine) => return None,
        _ => stmt,
    };
    let mut s = stmt
        .replace("{F}", d.float)
        .replace("{I}", d.int)
        .replace("{SERIAL}", d.serial)
        .replace("{BLOB}", d.blob)
        .replace("{C}", d.bytes);
    while let Some(start) = s.find("{J:") {
        let end = start + s[start..].find('}').expect("a closed {J:…} placeholder");
        let (column, key) = s[start + 3..end].split_once(':').expect("{J:column:key}");
        let expr = (d.json)(column, key);
        s.replace_range(start..=end, &expr);
    }
    Some(s)
}

#[cfg(test)]
#[test]
fn json_placeholders_are_replaced_per_store() {
    let d = Dialect {
        float: "REAL",
        int: "INTEGER",
        serial: "",
        blob: "",
        bytes: "",
        json: |c, k| format!("j({c},{k})"),
        engine: "sqlite",
    };
    let q = migration_sql("SELECT {J:a.b:mu}, {J:c:delta} {F}", &d);
    assert_eq!(q.as_deref(), Some("SELECT j(a.b,mu), j(c,delta) REAL"));
    let only = migration_sql("sqlite: CREATE TRIGGER t", &d);
    assert_eq!(only.as_deref(), Some("CREATE TRIGGER t"));
    assert_eq!(migration_sql("postgres: CREATE INDEX i", &d), None);
}

pub mod postgres;
mod shared;
pub mod sql;
pub mod sqlite;
mod sqlite_writer;

use async_trait::async_trait;

/// A dataset row.
#[derive(Debug, Clone, PartialEq)]
pub struct DatasetRow {
    pub id: String,
    pub description: String,
    pub neighboring_relation: String,
    pub budget_mu: f64,
    pub budget_delta: f64,
    pub grid_step: f64,
    /// Number of ledger entries (charges and budget changes): the compare-and-swap token.
    pub version: i64,
    pub charges: i64,
    /// μ spent under the filter, √Σμᵢ² (rounded up).
    pub mu_spent: f64,
    /// Filter state: Σμᵢ², Σδᵢ and the unit count; `None` for a ledger written before the filter
    /// (schema version 1), which the ledger converts on first use.
    pub mu_sq_spent: Option<f64>,
    pub delta_spent: Option<f64>,
    pub units: Option<i64>,
    /// μ (upper) of the exact composition of all charges, for display only.
    pub exact_mu: Option<f64>,
    /// Open reservations (`None` on rows written before schema version 3: none).
    pub reserved: Option<i64>,
    /// SHA-256 of the creating request, so a retried creation is recognised.
    pub create_hash: Option<String>,
    /// The budget's high-water mark: the largest μ_B and δ_B ever in force on this ledger.
    pub mu_max: f64,
    pub delta_max: f64,
    /// The cap fixed at creation (no budget may pass it), if any.
    pub cap_mu: Option<f64>,
    pub cap_delta: Option<f64>,
    /// Why no filter statement holds for the ledger's past (`None`: one does).
    pub statement_unknown: Option<String>,
    /// The first version whose audit record states the ledger's state (`None`: not known).
    pub states_from: Option<i64>,
    /// The version the stored snapshot of the exact composition (and `exact_mu`) describes.
    pub state_seq: i64,
    /// How the budget was given when it was given as an (ε, δ) target (JSON: the target and the
    /// μ_B, δ_B it was converted to); `None` for a budget given in μ. Written with the budget
    /// (creation, or the budget change's append) in the same transaction.
    pub budget_target: Option<String>,
    /// Who the guarantee protects and how many of them there are (JSON: `privacy_unit`, `size`;
    /// schema 15), fixed at creation; `None`: a record, count not stated.
    pub population: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// A charge's summary: what a table or a chart of a ledger's units shows, without its event,
/// metadata and stored response (a tenth of the bytes of an [`EntryRow`]).
#[derive(Debug, Clone, PartialEq)]
pub struct UnitRow {
    pub seq: i64,
    pub charge_id: Option<String>,
    pub label: Option<String>,
    pub mu_after: Option<f64>,
    pub unit_mu: Option<f64>,
    pub unit_delta: Option<f64>,
    pub run_id: Option<String>,
    pub chunk: Option<i64>,
    pub status: Option<String>,
    pub principal: Option<String>,
    pub created_at: String,
}

/// A ledger entry as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct EntryRow {
    pub seq: i64,
    pub kind: String,
    pub charge_id: Option<String>,
    pub event: Option<String>,
    pub label: Option<String>,
    pub metadata: Option<String>,
    pub idempotency_key: Option<String>,
    pub request_hash: Option<String>,
    pub mu_after: Option<f64>,
    /// The unit's certificate (μᵢ, δᵢ) (charges only; `None` for charges not yet converted).
    pub unit_mu: Option<f64>,
    pub unit_delta: Option<f64>,
    pub budget_mu: Option<f64>,
    pub budget_delta: Option<f64>,
    /// The stored outcome (for idempotent replays).
    pub response: Option<String>,
    /// Commit and release entries: the charge they settle.
    pub ref_id: Option<String>,
    /// A run's declaration and its chunks: the run.
    pub run_id: Option<String>,
    /// A run's chunk: its index (from 0).
    pub chunk: Option<i64>,
    /// Charges: `reserved`, `committed` or `released` (`None`: committed, as before version 3).
    pub status: Option<String>,
    /// Who made the entry (`None` on entries written before schema version 5).
    pub principal: Option<String>,
    /// A charge: the share of the budget that paid for it (a principal's quota, `*` for the
    /// unallocated share; `None` when the dataset had no quotas).
    pub quota: Option<String>,
    /// Written with the entry (never read back into it): a part of `response` stored once for
    /// every entry that shares it.
    pub shared: Option<SharedBody>,
    pub created_at: String,
}

/// Text that many entries' responses share, kept once under its digest.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedBody {
    /// Hex SHA-256 of `body`.
    pub digest: String,
    pub body: String,
}

impl SharedBody {
    /// `body` under its digest.
    pub fn new(body: String) -> Self {
        use sha2::{Digest, Sha256};
        SharedBody {
            digest: format!("{:x}", Sha256::digest(body.as_bytes())),
            body,
        }
    }
}

impl EntryRow {
    /// An entry of `kind` with nothing else set.
    pub fn new(kind: &str, created_at: String) -> Self {
        EntryRow {
            seq: 0,
            kind: kind.to_owned(),
            charge_id: None,
            event: None,
            label: None,
            metadata: None,
            idempotency_key: None,
            request_hash: None,
            mu_after: None,
            unit_mu: None,
            unit_delta: None,
            budget_mu: None,
            budget_delta: None,
            response: None,
            ref_id: None,
            run_id: None,
            chunk: None,
            status: None,
            principal: None,
            quota: None,
            shared: None,
            created_at,
        }
    }
}

/// A bearer token as stored (never the secret: only its SHA-256).
#[derive(Debug, Clone, PartialEq)]
pub struct TokenRow {
    pub id: String,
    pub name: String,
    /// Hex SHA-256 of the secret.
    pub hash: String,
    pub role: String,
    pub created_at: String,
    pub expires_at: Option<String>,
    pub revoked_at: Option<String>,
}

/// The dataset fields an append updates.
#[derive(Debug, Clone, PartialEq)]
pub struct DatasetUpdate {
    pub budget_mu: f64,
    pub budget_delta: f64,
    /// The budget's high-water mark after the entry (never below the row's).
    pub mu_max: f64,
    pub delta_max: f64,
    pub charges: i64,
    pub mu_spent: f64,
    pub mu_sq_spent: f64,
    pub delta_spent: f64,
    pub units: i64,
    /// Open reservations after the entry.
    pub reserved: i64,
    /// A start, commit or release: the charge whose status moves, in the same transaction (the
    /// append fails with [`StoreError::VersionConflict`] if its status is no longer `from`).
    pub settle: Option<Settle>,
    /// Quota rows written (inserted or replaced) in the same transaction.
    pub quotas: Vec<QuotaRow>,
    /// The audit record of the change, appended to the dataset's chain in the same transaction.
    pub audit: Option<AuditDraft>,
    /// A budget change: the row's new `budget_target` (`None`: unchanged).
    pub budget_target: Option<Option<String>>,
    pub updated_at: String,
}

impl DatasetUpdate {
    /// The dataset's row and quotas after this update was appended on `row` (at `row.version`)
    /// with `quotas`: exactly what both stores' `append` writes (every field is assigned, the
    /// version moves by one, quota rows are inserted or replaced), so a ledger may keep them
    /// instead of reading them back. The store contract checks this against both engines.
    pub fn applied(&self, row: &DatasetRow, quotas: &[QuotaRow]) -> (DatasetRow, Vec<QuotaRow>) {
        let row = DatasetRow {
            version: row.version + 1,
            budget_mu: self.budget_mu,
            budget_delta: self.budget_delta,
            mu_max: self.mu_max,
            delta_max: self.delta_max,
            charges: self.charges,
            mu_spent: self.mu_spent,
            mu_sq_spent: Some(self.mu_sq_spent),
            delta_spent: Some(self.delta_spent),
            units: Some(self.units),
            reserved: Some(self.reserved),
            budget_target: match &self.budget_target {
                Some(t) => t.clone(),
                None => row.budget_target.clone(),
            },
            updated_at: self.updated_at.clone(),
            ..row.clone()
        };
        let mut quotas = quotas.to_vec();
        for q in &self.quotas {
            match quotas.iter_mut().find(|o| o.principal == q.principal) {
                Some(o) => *o = q.clone(),
                None => quotas.push(q.clone()),
            }
        }
        // As the stores list them.
        quotas.sort_by(|a, b| a.principal.cmp(&b.principal));
        (row, quotas)
    }
}

/// A reserved unit's change of status ([`DatasetUpdate::settle`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Settle {
    pub charge_id: String,
    /// The status the ledger read (`reserved` or `started`).
    pub from: String,
    /// `started`, `committed` or `released`.
    pub to: String,
}

/// A ledger's state as an audit record states it (under [`STATE_KEY`] in its `after` value): what
/// the dataset row holds after the change, so the service and `audit verify` can tell a row
/// changed behind the service's back from one the audit log accounts for.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LedgerState {
    pub version: i64,
    pub mu_sq_spent: f64,
    pub delta_spent: f64,
    pub units: i64,
    pub budget_mu: f64,
    pub budget_delta: f64,
    pub mu_max: f64,
    pub delta_max: f64,
}

/// The key of an audit record's `after` value that holds the [`LedgerState`] after the change.
pub const STATE_KEY: &str = "ledger";

/// The key of an audit record's `after` value that holds the quota rows the change wrote (with
/// the [`LedgerState`]; every such record has it, possibly empty, and a ledger's first record has
/// all its rows), so `audit verify` can recompute each share's spend and compare the rows.
pub const QUOTAS_KEY: &str = "quota_rows";

/// A quota row as an audit record states it (under [`QUOTAS_KEY`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct QuotaState {
    pub principal: String,
    pub mu: f64,
    pub delta: f64,
    pub mu_sq_spent: f64,
    pub delta_spent: f64,
    pub units: i64,
}

impl QuotaState {
    pub fn of_row(q: &QuotaRow) -> Self {
        QuotaState {
            principal: q.principal.clone(),
            mu: q.mu,
            delta: q.delta,
            mu_sq_spent: q.mu_sq_spent,
            delta_spent: q.delta_spent,
            units: q.units,
        }
    }

    /// The quota rows an audit record states: `None` when it states none (written before
    /// records held them).
    pub fn of_audit(d: &AuditDraft) -> Option<Vec<Self>> {
        let after: serde_json::Value = serde_json::from_str(d.after.as_deref()?).ok()?;
        serde_json::from_value(after.get(QUOTAS_KEY)?.clone()).ok()
    }
}

impl LedgerState {
    /// The state of `row` (`None` for a row not yet converted to the filter).
    pub fn of_row(row: &DatasetRow) -> Option<Self> {
        Some(LedgerState {
            version: row.version,
            mu_sq_spent: row.mu_sq_spent?,
            delta_spent: row.delta_spent?,
            units: row.units?,
            budget_mu: row.budget_mu,
            budget_delta: row.budget_delta,
            mu_max: row.mu_max,
            delta_max: row.delta_max,
        })
    }

    /// The state an audit record states, if it states one.
    pub fn of_audit(d: &AuditDraft) -> Option<Self> {
        let after: serde_json::Value = serde_json::from_str(d.after.as_deref()?).ok()?;
        serde_json::from_value(after.get(STATE_KEY)?.clone()).ok()
    }

    /// `draft` with this state and the quota rows written with it added to its `after` value
    /// (an object, or none).
    pub fn seal(&self, mut draft: AuditDraft, quotas: &[QuotaRow]) -> AuditDraft {
        let mut after = match draft.after.as_deref().map(serde_json::from_str) {
            None => serde_json::Value::Object(Default::default()),
            Some(Ok(v @ serde_json::Value::Object(_))) => v,
            // Not an object: left as it is, without a state.
            Some(_) => return draft,
        };
        after[STATE_KEY] = serde_json::to_value(self).expect("a state serialises");
        let rows: Vec<QuotaState> = quotas.iter().map(QuotaState::of_row).collect();
        after[QUOTAS_KEY] = serde_json::to_value(rows).expect("quota rows serialise");
        draft.after = Some(after.to_string());
        draft
    }
}

impl DatasetUpdate {
    /// The update's audit record with the ledger's state after it (the dataset's own chain only),
    /// as the stores write it: `row_version + 1` is the version the append moves to.
    pub fn sealed_audit(&self, id: &str, row_version: i64) -> Option<AuditDraft> {
        let a = self.audit.clone()?;
        if a.chain != id {
            return Some(a);
        }
        let state = LedgerState {
            version: row_version + 1,
            mu_sq_spent: self.mu_sq_spent,
            delta_spent: self.delta_spent,
            units: self.units,
            budget_mu: self.budget_mu,
            budget_delta: self.budget_delta,
            mu_max: self.mu_max,
            delta_max: self.delta_max,
        };
        Some(state.seal(a, &self.quotas))
    }
}

/// The audit record of a new dataset with its (empty) state and its quota rows, when the record
/// is on its chain.
pub fn sealed_create_audit(
    row: &DatasetRow,
    audit: Option<&AuditDraft>,
    quotas: &[QuotaRow],
) -> Option<AuditDraft> {
    let a = audit?.clone();
    match LedgerState::of_row(row) {
        Some(s) if a.chain == row.id => Some(s.seal(a, quotas)),
        _ => Some(a),
    }
}

/// A principal's role on one dataset.
#[derive(Debug, Clone, PartialEq)]
pub struct GrantRow {
    pub dataset_id: String,
    pub principal: String,
    pub role: String,
    pub created_at: String,
}

/// A principal's share of a dataset's budget (principal `*`: the unallocated share) and what
/// was charged to it: Σμᵢ², Σδᵢ (rounded up, as the dataset's) and the unit count.
#[derive(Debug, Clone, PartialEq)]
pub struct QuotaRow {
    pub dataset_id: String,
    pub principal: String,
    pub mu: f64,
    pub delta: f64,
    pub mu_sq_spent: f64,
    pub delta_spent: f64,
    pub units: i64,
    pub updated_at: String,
}

/// An audit record before the store places it in its chain.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AuditDraft {
    /// The chain: the dataset's id, or `""` for changes outside datasets (tokens).
    pub chain: String,
    pub at: String,
    /// Who: the principal's name, and the credential (token id) it used.
    pub principal: String,
    pub credential: Option<String>,
    /// What, e.g. `charge.admitted`, `budget.changed`, `token.created`.
    pub action: String,
    pub dataset_id: Option<String>,
    /// The object changed (a charge, run, token or principal).
    pub target: Option<String>,
    pub request_id: Option<String>,
    /// The client's address as the service saw it.
    pub client: Option<String>,
    /// JSON of the values before and after.
    pub before: Option<String>,
    pub after: Option<String>,
}

/// A dashboard session (schema 12): the SHA-256 (hex) of its cookie's random id, the credential
/// it was opened with (a token's id, or `jwt:…`), who that was, and until when it lasts.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionRow {
    pub hash: String,
    pub token_id: String,
    pub principal: String,
    pub role: String,
    pub created_at: String,
    pub expires_at: String,
}

/// An audit record as stored: its draft, its place in the chain and the chain's hashes.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditRecord {
    /// Position in the order records became visible (schema 12; the pagination cursor); 0 for a
    /// PostgreSQL record not yet placed (read by chain, before a reader placed it).
    pub id: i64,
    pub seq: i64,
    pub draft: AuditDraft,
    pub prev_hash: String,
    pub hash: String,
}

/// The hash before a chain's first record.
pub const AUDIT_GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// A record's hash: SHA-256 of the previous record's hash, the record's seq and its draft, as one
/// JSON array (unambiguous: every field is quoted or `null`). Editing any field of a record, or
/// deleting or reordering records, breaks the chain from that record on; deleting the last record
/// is seen against `audit_heads`.
pub fn audit_hash(prev: &str, seq: i64, d: &AuditDraft) -> String {
    use sha2::{Digest, Sha256};
    let fields = serde_json::json!([
        prev,
        seq,
        d.chain,
        d.at,
        d.principal,
        d.credential,
        d.action,
        d.dataset_id,
        d.target,
        d.request_id,
        d.client,
        d.before,
        d.after
    ]);
    format!("{:x}", Sha256::digest(fields.to_string().as_bytes()))
}

/// Filters of an audit query (every one optional), a cursor (records with position `> after`) and a
/// page size.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AuditQuery {
    pub dataset_id: Option<String>,
    pub principal: Option<String>,
    /// RFC 3339 times: `since ≤ at < until`.
    pub since: Option<String>,
    pub until: Option<String>,
    /// Records whose action starts with this (`unit.` for every unit's).
    pub action_prefix: Option<String>,
    pub after: i64,
    pub limit: i64,
}

/// The filter state written when a version-1 ledger is converted.
#[derive(Debug, Clone, PartialEq)]
pub struct Conversion {
    pub mu_spent: f64,
    pub mu_sq_spent: f64,
    pub delta_spent: f64,
    pub units: i64,
    /// (seq, μᵢ, δᵢ) of every charge.
    pub certificates: Vec<(i64, f64, f64)>,
}

/// Storage failures, HTTP-agnostic.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StoreError {
    /// A dataset with this id already exists.
    #[error("the dataset already exists")]
    AlreadyExists,
    /// The dataset does not exist.
    #[error("the dataset does not exist")]
    NotFound,
    /// The dataset's version moved since the caller read it (another writer appended first).
    #[error("the ledger changed concurrently")]
    VersionConflict,
    /// The idempotency key was used already for this dataset.
    #[error("the idempotency key was already used")]
    DuplicateKey,
    /// The database cannot be reached or refused the operation; retryable.
    #[error("the store is unavailable: {0}")]
    Unavailable(String),
    /// The database refused a value it cannot represent (e.g. NUL in text on PostgreSQL); the
    /// edge refuses such values first, so this is a backstop, not a retryable failure.
    #[error("the database cannot store a value: {0}")]
    InvalidValue(String),
    /// Stored data could not be read back.
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
}

/// A snapshot read in parts: its bytes, or [`StoreError::VersionConflict`] when not all of its
/// `expected` parts were there (a newer snapshot replaced it and its parts were dropped between
/// the two reads: the caller reads again).
pub(crate) fn snapshot_of(
    seq: i64,
    parts: Vec<Vec<u8>>,
    expected: Option<i64>,
) -> Result<Option<(i64, Vec<u8>)>, StoreError> {
    if Some(parts.len() as i64) != expected {
        return Err(StoreError::VersionConflict);
    }
    Ok(Some((seq, parts.concat())))
}

/// The ids of `parent`'s blocks are exactly those in `[parent@, parentA)` ('A' follows '@', and
/// '@' is the first character after `parent` in every block id).
pub fn block_id_range(parent: &str) -> (String, String) {
    (format!("{parent}@"), format!("{parent}A"))
}

/// A block [`Store::create_block`] creates.
#[derive(Debug, Clone)]
pub struct NewBlock<'a> {
    pub row: &'a DatasetRow,
    pub state: &'a [u8],
    /// The partitioned dataset and its version when the block's budget and quotas were copied
    /// from it (see [`LedgerAppend::hold`]).
    pub parent: (&'a str, i64),
    /// The block's quota rows: the dataset's quotas, nothing spent.
    pub quotas: &'a [QuotaRow],
    /// The record on the dataset's chain (who declared the block).
    pub audit: Option<&'a AuditDraft>,
    /// The first record of the block's own chain, sealed with its state and quota rows.
    pub record: Option<&'a AuditDraft>,
}

/// One ledger's part of [`Store::append_many`].
#[derive(Debug, Clone)]
pub struct LedgerAppend {
    pub id: String,
    pub expected_version: i64,
    /// A block's first row and its empty state, inserted first unless the row exists (then the
    /// compare-and-swap at `expected_version` = 0 decides).
    pub create: Option<(DatasetRow, std::sync::Arc<Vec<u8>>)>,
    pub entry: EntryRow,
    pub update: DatasetUpdate,
    /// A ledger this item was derived from without changing it (a new block's parent, whose
    /// budget and quotas the block copies): its version must still be this one at commit, else
    /// [`StoreError::VersionConflict`]. On PostgreSQL its row is locked in the same increasing id
    /// order as the items' rows, so a write that changes the parent (a quota set on the dataset)
    /// and one that creates a block from it are ordered, and neither deadlocks the other.
    pub hold: Option<(String, i64)>,
    /// For a partitioned dataset's own item: the number of its blocks must still be this one,
    /// counted after the item's row is locked (a write that updates every block misses none
    /// created meanwhile: those hold this row, see `hold`). Else [`StoreError::VersionConflict`].
    pub blocks: Option<i64>,
}

/// The order in which [`Store::append_many`] takes its rows' locks: every item and every
/// ledger an item holds ([`LedgerAppend::hold`], once each), by increasing id. `Ok(i)` is item
/// `i`; `Err((id, version))` a hold.
pub fn lock_order(items: &[LedgerAppend]) -> Vec<Result<usize, (String, i64)>> {
    let mut holds: Vec<(String, i64)> = items.iter().filter_map(|i| i.hold.clone()).collect();
    holds.sort();
    holds.dedup();
    let mut order: Vec<Result<usize, (String, i64)>> = (0..items.len()).map(Ok).collect();
    order.extend(holds.into_iter().map(Err));
    let id = |o: &Result<usize, (String, i64)>| match o {
        Ok(i) => items[*i].id.clone(),
        Err((h, _)) => h.clone(),
    };
    // Stable: a hold on an item's own id (never made) would come after it.
    order.sort_by_key(|o| id(o));
    order
}

/// An append queued by [`Store::append_queued`]: its seq once durable.
pub type PendingAppend =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<i64, StoreError>> + Send>>;

/// The storage contract (object-safe so the service holds an `Arc<dyn Store>`).
#[async_trait]
pub trait Store: Send + Sync {
    /// Creates a dataset with its initial (empty) state, its partitioning (if any) and its audit
    /// record.
    async fn create_dataset(
        &self,
        row: &DatasetRow,
        state: &[u8],
        partitioning: Option<&str>,
        audit: Option<&AuditDraft>,
    ) -> Result<(), StoreError>;
    /// Creates a block on its own (a declared named partition) with its quota rows, only while
    /// its parent is still at the version they were copied at (else
    /// [`StoreError::VersionConflict`]; on PostgreSQL the parent's row is locked first, as in
    /// [`Store::append_many`]). [`StoreError::AlreadyExists`] if the block exists.
    async fn create_block(&self, block: &NewBlock<'_>) -> Result<(), StoreError>;
    /// A dataset's partitioning as stored, read with its existence in one query: `None` when
    /// there is no such dataset, `Some(None)` when it is not partitioned.
    async fn partitioning(&self, id: &str) -> Result<Option<Option<String>>, StoreError>;
    /// A partitioned dataset's blocks (rows with ids `parent@…`) by id, after `after`.
    async fn list_blocks(
        &self,
        parent: &str,
        after: Option<&str>,
        limit: i64,
    ) -> Result<Vec<DatasetRow>, StoreError>;
    /// One dataset.
    async fn get_dataset(&self, id: &str) -> Result<Option<DatasetRow>, StoreError>;
    /// The dataset's snapshot of its exact composition: the seq it describes and its bytes
    /// (`None`: no such dataset). [`StoreError::VersionConflict`] when its parts were replaced
    /// while being read (a newer snapshot: read again).
    async fn get_snapshot(&self, id: &str) -> Result<Option<(i64, Vec<u8>)>, StoreError>;
    /// A unit's certificates as stored under `key` (see `ledger::certificates::stored_key`).
    async fn get_certificates(&self, key: &str) -> Result<Option<String>, StoreError>;
    /// Stores a unit's certificates under `key` (replacing what is there).
    async fn put_certificates(&self, key: &str, value: &str) -> Result<(), StoreError>;
    /// One part of a snapshot being written ([`Store::put_snapshot`]), in a transaction of its own.
    async fn put_snapshot_part(
        &self,
        id: &str,
        token: &str,
        seq: i64,
        part: i64,
        bytes: &[u8],
    ) -> Result<(), StoreError>;
    /// Makes the snapshot under `token` (`parts` parts, describing `seq`, μ `exact_mu`) the
    /// dataset's, if it is newer than its own; whether it did.
    async fn set_snapshot(
        &self,
        id: &str,
        token: &str,
        seq: i64,
        parts: i64,
        exact_mu: Option<f64>,
    ) -> Result<bool, StoreError>;
    /// Drops the parts of snapshots older than `seq` (`token` None) or those under `token`.
    async fn drop_snapshot_parts(
        &self,
        id: &str,
        seq: i64,
        token: Option<&str>,
    ) -> Result<(), StoreError>;
    /// Stores `bytes` as the dataset's snapshot at `seq` (with its μ), if newer than the one it
    /// has: in parts of [`SNAPSHOT_PART_BYTES`], each its own small transaction, then one that
    /// points the dataset at them, then older parts dropped. Never part of an append, and never
    /// under a dataset's lock: a charge does not wait for it. Parts are under a random token, so
    /// two writers (replicas) never mix their parts; a reader that finds the parts replaced
    /// reads again. Whether the snapshot became the dataset's.
    async fn put_snapshot(
        &self,
        id: &str,
        seq: i64,
        bytes: &[u8],
        exact_mu: Option<f64>,
    ) -> Result<bool, StoreError> {
        let token = uuid::Uuid::new_v4().simple().to_string();
        let mut parts = 0;
        for chunk in bytes.chunks(SNAPSHOT_PART_BYTES) {
            self.put_snapshot_part(id, &token, seq, parts, chunk)
                .await?;
            parts += 1;
        }
        let set = self.set_snapshot(id, &token, seq, parts, exact_mu).await?;
        if set {
            self.drop_snapshot_parts(id, seq, None).await?;
        } else {
            self.drop_snapshot_parts(id, seq, Some(&token)).await?;
        }
        Ok(set)
    }
    /// Datasets ordered by id, strictly after `after`; with `grantee`, only those it holds a
    /// grant on.
    async fn list_datasets(
        &self,
        after: Option<&str>,
        limit: i64,
        grantee: Option<&str>,
    ) -> Result<Vec<DatasetRow>, StoreError>;
    /// The entry that used an idempotency key, if any.
    async fn find_entry_by_key(&self, id: &str, key: &str) -> Result<Option<EntryRow>, StoreError>;
    /// Whether dataset `id` holds an idempotency key stored before keys were scoped.
    async fn has_legacy_keys(&self, id: &str) -> Result<bool, StoreError>;
    /// The shared body under `digest` (see [`SharedBody`]), if any.
    async fn shared_body(&self, digest: &str) -> Result<Option<String>, StoreError>;
    /// The charge with this id, if any.
    async fn find_charge(&self, id: &str, charge_id: &str) -> Result<Option<EntryRow>, StoreError>;
    /// A run's entries (its declaration, its chunks and their starts, commits and releases)
    /// with seq > `after`, in order.
    async fn list_run(
        &self,
        id: &str,
        run_id: &str,
        after: i64,
    ) -> Result<Vec<EntryRow>, StoreError>;
    /// Summaries of the charges with seq > `after`, in order.
    async fn list_units(
        &self,
        id: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<UnitRow>, StoreError>;
    /// Entries of a kind (or all) with seq > `after`, in order.
    async fn list_entries(
        &self,
        id: &str,
        kind: Option<&str>,
        after: i64,
        limit: i64,
    ) -> Result<Vec<EntryRow>, StoreError>;
    /// Atomically: if the dataset's version is `expected_version`, append `entry` as seq
    /// `expected_version + 1`, apply `update`, and bump the version. Returns the seq.
    async fn append(
        &self,
        id: &str,
        expected_version: i64,
        entry: &EntryRow,
        update: &DatasetUpdate,
    ) -> Result<i64, StoreError>;
    /// [`Store::append`], queued now, its outcome once durable: the write is ordered after every
    /// write queued before it and before every later one, so a caller may queue the append at the
    /// next version before this one committed (if this one fails, that one's compare-and-swap
    /// fails too). `None` when the store cannot queue (or its queue is full): append as usual.
    /// PostgreSQL's transactions are independent (nothing orders them), so it never queues.
    fn append_queued(
        &self,
        _id: &str,
        _expected_version: i64,
        _entry: &EntryRow,
        _update: &DatasetUpdate,
    ) -> Option<PendingAppend> {
        None
    }
    /// All or nothing, in one transaction: every item as [`Store::append`] does it (creating the
    /// block rows of items with `create` first), and `shared` stored once. Items must be in
    /// increasing id order: on PostgreSQL the row locks are then taken in one global order, so
    /// two of these (and a single-ledger append, which locks one row) never wait on each other
    /// in a cycle. Fails with the first item's error ([`StoreError::VersionConflict`],
    /// [`StoreError::DuplicateKey`] …) and writes nothing.
    async fn append_many(
        &self,
        items: &[LedgerAppend],
        shared: Option<&SharedBody>,
    ) -> Result<(), StoreError>;
    /// Writes the filter state of a version-1 ledger, once: only if the dataset is still at
    /// `expected_version` and has no filter state yet (else [`StoreError::VersionConflict`]).
    async fn convert(
        &self,
        id: &str,
        expected_version: i64,
        conversion: &Conversion,
    ) -> Result<(), StoreError>;
    /// Stores a token; with `only_if_none`, only when no token exists yet (the first start's
    /// admin token, created once even when replicas start together). Returns whether it was stored.
    async fn create_token(
        &self,
        token: &TokenRow,
        only_if_none: bool,
        audit: &AuditDraft,
    ) -> Result<bool, StoreError>;
    /// The token with this hash, if any.
    async fn token_by_hash(&self, hash: &str) -> Result<Option<TokenRow>, StoreError>;
    /// Every token, oldest first.
    async fn list_tokens(&self) -> Result<Vec<TokenRow>, StoreError>;
    /// Marks a token revoked at `at` (once), ending its dashboard sessions; whether a live token
    /// was revoked (audited only then).
    async fn revoke_token(
        &self,
        id: &str,
        at: &str,
        audit: &AuditDraft,
    ) -> Result<bool, StoreError>;
    /// A principal's role on a dataset, if it holds a grant.
    async fn grant(&self, dataset_id: &str, principal: &str) -> Result<Option<String>, StoreError>;
    /// Whether a principal holds a grant on any dataset.
    async fn has_grants(&self, principal: &str) -> Result<bool, StoreError>;
    /// A dataset's grants, by principal.
    async fn list_grants(&self, dataset_id: &str) -> Result<Vec<GrantRow>, StoreError>;
    /// Grants (`role` given) or withdraws (`None`) a principal's role on a dataset, with its
    /// audit record; whether anything changed.
    async fn set_grant(
        &self,
        dataset_id: &str,
        principal: &str,
        role: Option<&str>,
        at: &str,
        audit: &AuditDraft,
    ) -> Result<bool, StoreError>;
    /// A dataset's quotas (with the unallocated share `*` once there is any quota).
    async fn list_quotas(&self, dataset_id: &str) -> Result<Vec<QuotaRow>, StoreError>;
    /// Appends an audit record that goes with no other write (a rejected charge).
    async fn audit(&self, draft: &AuditDraft) -> Result<(), StoreError>;
    /// Opens a dashboard session, with its audit record: deletes sessions expired at
    /// `s.created_at` and keeps only the credential's `keep` newest.
    async fn open_session(
        &self,
        s: &SessionRow,
        keep: i64,
        audit: &AuditDraft,
    ) -> Result<(), StoreError>;
    /// The session whose id hashes to `hash`, and the token it was opened with when that is a
    /// local token that still exists.
    async fn session(
        &self,
        hash: &str,
    ) -> Result<Option<(SessionRow, Option<TokenRow>)>, StoreError>;
    /// Ends a session (with its audit record); whether there was one.
    async fn close_session(&self, hash: &str, audit: &AuditDraft) -> Result<bool, StoreError>;
    /// Placed audit records matching `q`, by position (schema 12), placing those written since the
    /// last read first.
    async fn list_audit(&self, q: &AuditQuery) -> Result<Vec<AuditRecord>, StoreError>;
    /// One chain's records with seq > `after`, in order.
    async fn audit_chain(
        &self,
        chain: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<AuditRecord>, StoreError>;
    /// Every chain's head: (chain, last seq, last hash); (chain, -1, "") for a chain that has
    /// records but no head.
    async fn audit_heads(&self) -> Result<Vec<(String, i64, String)>, StoreError>;
    /// Datasets and blocks that must have an audit chain and have none
    /// ([`sql::DATASETS_WITHOUT_CHAIN`]).
    async fn datasets_without_chain(&self) -> Result<Vec<String>, StoreError>;
    /// Audit records matching `q` (its `after` ignored) with a position below `before`, newest
    /// first.
    async fn list_audit_newest(
        &self,
        q: &AuditQuery,
        before: i64,
    ) -> Result<Vec<AuditRecord>, StoreError>;
    /// A dataset's alert thresholds as stored (JSON), if set.
    async fn alert_rule(&self, dataset_id: &str) -> Result<Option<String>, StoreError>;
    /// Sets a dataset's alert thresholds (JSON) with its audit record, in one transaction.
    async fn set_alert_rule(
        &self,
        dataset_id: &str,
        thresholds: &str,
        at: &str,
        audit: &AuditDraft,
    ) -> Result<(), StoreError>;
    /// Claims the crossing of `threshold` by ledger `ledger_id`: true for the one caller (of any
    /// replica) that recorded it, false when it was already recorded.
    async fn claim_crossing(
        &self,
        ledger_id: &str,
        threshold: f64,
        at: &str,
    ) -> Result<bool, StoreError>;
    /// Forgets the crossings of ledger `ledger_id` above `used` (its use fell back below them):
    /// how many were forgotten.
    async fn rearm_crossings(&self, ledger_id: &str, used: f64) -> Result<u64, StoreError>;
    /// The thresholds ledger `ledger_id` has crossed (and not fallen back below), ascending.
    async fn crossings(&self, ledger_id: &str) -> Result<Vec<f64>, StoreError>;
    /// The last record of `chain` that states its ledger's state ([`LedgerState`]), if any.
    async fn last_state_audit(&self, chain: &str) -> Result<Option<AuditRecord>, StoreError>;
    /// Whether the database answers.
    async fn ping(&self) -> Result<(), StoreError>;
}
