//! Idempotency keys, scoped to who sent them, for what, and on what.
//!
//! A key a client sends (the `Idempotency-Key` header) names one request of *that client's*. It is
//! stored scoped to the triple (principal, operation, target): a key of principal A can never
//! find, replay or block an entry written by principal B, whatever A learnt of B's keys (e.g. from
//! a listing), and the same key used for another operation or another target is another key. The
//! scope is written into the stored key itself (`~`, 32 hex digits of SHA-256 of the triple, `~`,
//! then the client's key), so the stores' one unique index on `(dataset_id, idempotency_key)`
//! enforces it, and a listing can still show the client's own key ([`shown`]).
//!
//! Keys stored before scoping (the client's key alone) are still found for their own principal
//! ([`IdemKey::legacy`]), and those of entries that recorded no principal (written before
//! principals) for global admins only: a retry across an upgrade replays, never charges twice,
//! and nobody else's retry can take such an entry as its own (a key not found is a new request,
//! which at worst charges again: more privacy loss counted, never less).

use super::principal::Principal;
use sha2::{Digest, Sha256};

/// What a keyed request does: the operation part of a key's scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// A charge on one dataset (target: the dataset).
    Charge,
    /// A charge on several ledgers (target: none; every ledger it names keeps the same key).
    MultiCharge,
    /// A run's declaration (target: the dataset).
    DeclareRun,
    /// A run's next chunk (target: the run).
    Chunk,
    /// A reserved unit's start, commit or release (target: the charge).
    Start,
    Commit,
    Release,
    /// A budget change (target: the dataset).
    Budget,
    /// A quota's setting (target: the quota's holder).
    Quota,
}

impl Operation {
    fn name(self) -> &'static str {
        match self {
            Operation::Charge => "charge",
            Operation::MultiCharge => "charges",
            Operation::DeclareRun => "run",
            Operation::Chunk => "chunk",
            Operation::Start => "start",
            Operation::Commit => "commit",
            Operation::Release => "release",
            Operation::Budget => "budget",
            Operation::Quota => "quota",
        }
    }
}

/// A client's idempotency key within its scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdemKey {
    raw: String,
    stored: String,
    principal: String,
    admin: bool,
}

/// The length of a scoped key's prefix: `~`, 32 hex digits, `~`.
const PREFIX: usize = 34;

impl IdemKey {
    /// The key `raw` of `principal`, for `operation` on `target`. Each part is length-prefixed in
    /// the digest, so no two triples share one.
    pub fn scoped(principal: &str, operation: Operation, target: &str, raw: String) -> Self {
        let mut h = Sha256::new();
        for part in [principal, operation.name(), target] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part.as_bytes());
        }
        let digest = format!("{:x}", h.finalize());
        IdemKey {
            stored: format!("~{}~{raw}", &digest[..32]),
            raw,
            principal: principal.to_owned(),
            admin: false,
        }
    }

    /// [`IdemKey::scoped`] of an optional key of the caller `p`.
    pub fn of(
        p: &Principal,
        operation: Operation,
        target: &str,
        raw: Option<&String>,
    ) -> Option<Self> {
        raw.map(|r| IdemKey {
            admin: super::principal::role_allows(&p.role, super::principal::Action::Administer),
            ..Self::scoped(&p.name, operation, target, r.clone())
        })
    }

    /// The key as the client sent it.
    pub fn raw(&self) -> &str {
        &self.raw
    }

    /// The key as stored (its scope, then the client's key).
    pub fn stored(&self) -> &str {
        &self.stored
    }

    /// The key as an entry written before scoping stored it.
    pub fn legacy(&self) -> &str {
        &self.raw
    }

    /// Whether an entry written before scoping by `owner` (none: before principals) may be this
    /// key's request: its own principal's; an unowned one a global admin's only.
    pub fn may_replay_legacy(&self, owner: Option<&str>) -> bool {
        match owner {
            Some(o) => o == self.principal,
            None => self.admin,
        }
    }
}

/// The client's key of a stored key (a key stored before scoping is shown as it is).
pub fn shown(stored: &str) -> &str {
    let b = stored.as_bytes();
    // The same test as the stores' (`sql::LEGACY_KEY_ANY`): '~' at both ends of the prefix. A key
    // stored before scoping that happens to have that shape counts as scoped, so a retry of it
    // across the upgrade is a new request: more privacy loss counted, never less.
    let scoped = b.len() > PREFIX && b[0] == b'~' && b[PREFIX - 1] == b'~';
    if scoped {
        &stored[PREFIX..]
    } else {
        stored
    }
}

/// Whether a stored key was written before scoping.
pub fn is_legacy(stored: &str) -> bool {
    shown(stored).len() == stored.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_scoped_to_its_principal_operation_and_target() {
        let k = |p: &str, o, t: &str| IdemKey::scoped(p, o, t, "k-1".into());
        let base = k("alice", Operation::Charge, "d");
        assert_eq!(base.raw(), "k-1");
        assert_eq!(shown(base.stored()), "k-1");
        assert!(!is_legacy(base.stored()));
        for other in [
            k("bob", Operation::Charge, "d"),
            k("alice", Operation::Commit, "d"),
            k("alice", Operation::Charge, "e"),
            // Length prefixes: moving a character between parts gives another scope.
            k("alic", Operation::Charge, "ed"),
        ] {
            assert_ne!(base.stored(), other.stored());
        }
        assert_eq!(base, k("alice", Operation::Charge, "d"));
    }

    #[test]
    fn keys_stored_before_scoping_are_shown_as_they_are() {
        for legacy in ["k-1", "~abc~k", "~", &format!("~{}~", "0".repeat(32))] {
            // (the last has the prefix's shape but nothing after it)
            assert_eq!(shown(legacy), legacy);
            assert!(is_legacy(legacy));
        }
    }
}
