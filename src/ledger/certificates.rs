//! A process-wide memo of unit certificates.
//!
//! A unit's certificates are a pure function of its event, the neighbouring relation, the grid
//! step and the δ rule ([`certify`] reads nothing else), so the same unit charged to many datasets,
//! a run's identical chunks and a retried request compute them once. The memo is bounded in bytes
//! (least recently used first out) and keeps only successes: a refusal or a stopped computation is
//! computed again next time. It changes no figure: a hit returns exactly what [`certify`] returned.

use crate::accountant::cache::ByteCache;
use crate::accountant::certificate::{certify, Certificate, UnitDelta};
use crate::accountant::json::JsonPath;
use crate::accountant::params::GridStep;
use crate::accountant::{AccountantError, Event, NeighboringRelation};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

/// Bytes of keys and certificates the memo keeps at most.
const MEMO_BYTES: usize = 16 << 20;

/// What a unit's certificates depend on. The event as its canonical JSON (two equal events give
/// the same text; two texts for one event only cost a miss).
#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    event: String,
    relation: NeighboringRelation,
    grid_step: u64,
    /// The δ rule: (automatic?, its δ's bits).
    rule: (bool, u64),
}

static MEMO: LazyLock<Mutex<ByteCache<Key, Arc<[Certificate]>>>> =
    LazyLock::new(|| Mutex::new(ByteCache::new(MEMO_BYTES)));

fn key(event: &Event, relation: NeighboringRelation, h: GridStep, rule: UnitDelta) -> Key {
    Key {
        event: event.to_json().to_string(),
        relation,
        grid_step: h.get().to_bits(),
        rule: match rule {
            UnitDelta::Fixed(d) => (false, d.to_bits()),
            UnitDelta::Auto(d) => (true, d.to_bits()),
        },
    }
}

/// Whether the memo holds the unit's certificates now (then [`certificates`] costs a lookup).
pub(crate) fn known(
    event: &Event,
    relation: NeighboringRelation,
    h: GridStep,
    rule: UnitDelta,
) -> bool {
    cached(event, relation, h, rule).is_some()
}

/// Drops the unit's certificates from the memo (the next use certifies it).
pub(crate) fn forget(event: &Event, relation: NeighboringRelation, h: GridStep, rule: UnitDelta) {
    let key = key(event, relation, h, rule);
    MEMO.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(&key);
}

/// Empties the memo.
pub(crate) fn forget_all() {
    *MEMO.lock().unwrap_or_else(PoisonError::into_inner) = ByteCache::new(MEMO_BYTES);
}

/// The unit's certificates if the memo holds them.
pub(crate) fn cached(
    event: &Event,
    relation: NeighboringRelation,
    h: GridStep,
    rule: UnitDelta,
) -> Option<Arc<[Certificate]>> {
    let key = key(event, relation, h, rule);
    MEMO.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&key)
}

/// [`certify`]'s certificates for the unit, from the memo when it holds them.
///
/// # Errors
/// [`certify`]'s.
pub(crate) fn certificates(
    event: &Event,
    relation: NeighboringRelation,
    h: GridStep,
    rule: UnitDelta,
    path: &JsonPath,
) -> Result<Arc<[Certificate]>, AccountantError> {
    let key = key(event, relation, h, rule);
    let memo = || MEMO.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(c) = memo().get(&key) {
        metrics::counter!("privacy_ledger_certificate_memo_hits_total").increment(1);
        return Ok(c);
    }
    let c: Arc<[Certificate]> = certify(event, relation, h, rule, path)?.into();
    let bytes = key.event.len() + 64 + std::mem::size_of::<Certificate>() * c.len();
    memo().insert(key, c.clone(), bytes);
    Ok(c)
}

/// The build this process runs: the SHA-256 of its executable (empty when it cannot be read,
/// and then nothing is persisted). Persisted certificates are keyed by it, so a release whose
/// `certify` differs (a soundness fix that raises a figure) never reads an older one's.
static BUILD: LazyLock<String> = LazyLock::new(|| {
    use sha2::Digest;
    std::env::current_exe()
        .and_then(std::fs::read)
        .map(|b| format!("{:x}", sha2::Sha256::digest(&b)))
        .unwrap_or_default()
});

/// The unit's key in the store's table of certificates (the SHA-256 of this build and of the
/// memo's key), or `None` when this build cannot name itself.
pub(crate) fn stored_key(
    event: &Event,
    relation: NeighboringRelation,
    h: GridStep,
    rule: UnitDelta,
) -> Option<String> {
    use sha2::Digest;
    if BUILD.is_empty() {
        return None;
    }
    let k = key(event, relation, h, rule);
    let text = serde_json::json!([
        *BUILD,
        k.event,
        format!("{relation:?}"),
        k.grid_step,
        k.rule.0,
        k.rule.1
    ]);
    Some(format!(
        "{:x}",
        sha2::Sha256::digest(text.to_string().as_bytes())
    ))
}

/// Puts certificates read from the store into the memo (they are what this build's [`certify`]
/// returned for the unit: the key names the build).
pub(crate) fn recall(
    event: &Event,
    relation: NeighboringRelation,
    h: GridStep,
    rule: UnitDelta,
    stored: &str,
) -> bool {
    let Ok(c) = serde_json::from_str::<Vec<Certificate>>(stored) else {
        return false;
    };
    if c.is_empty() {
        return false;
    }
    let key = key(event, relation, h, rule);
    let bytes = key.event.len() + 64 + std::mem::size_of::<Certificate>() * c.len();
    MEMO.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(key, c.into(), bytes);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A second call returns the first one's certificates from the memo, for any δ rule; another
    /// grid step or rule is another entry.
    #[test]
    fn the_same_unit_is_certified_once() {
        let ev = Event::from_json(&serde_json::json!({"type": "self_composed", "count": 37,
            "event": {"type": "poisson_sampled", "sampling_rate": 0.013,
                      "event": {"type": "gaussian", "noise_multiplier": 1.7}}}))
        .unwrap();
        let rel = NeighboringRelation::AddOrRemoveOne;
        let h = GridStep::new(1e-3).unwrap();
        let path = JsonPath::root();
        for rule in [UnitDelta::Auto(1e-9), UnitDelta::Fixed(1e-7)] {
            let first = certificates(&ev, rel, h, rule, &path).unwrap();
            assert!(MEMO.lock().unwrap().get(&key(&ev, rel, h, rule)).is_some());
            let again = certificates(&ev, rel, h, rule, &path).unwrap();
            assert!(Arc::ptr_eq(&first, &again));
            assert_eq!(&*first, &*certify(&ev, rel, h, rule, &path).unwrap());
        }
        let other = GridStep::new(2e-3).unwrap();
        assert!(MEMO
            .lock()
            .unwrap()
            .get(&key(&ev, rel, other, UnitDelta::Auto(1e-9)))
            .is_none());
    }
}
