//! What the gate reads of each dataset, kept between charges: the row and quotas as of this
//! process's last write ([`GateInputs`]), moved forward by each append and dropped on any doubt.

use super::error::LedgerError;
use super::Ledgers;
use crate::store::{DatasetRow, DatasetUpdate, StoreError};
use std::sync::Arc;

/// A dataset's row and quotas at one version: what the gate reads.
#[derive(Debug)]
pub(super) struct GateInputs {
    pub(super) row: DatasetRow,
    pub(super) quotas: Vec<crate::store::QuotaRow>,
    /// The ledger holds idempotency keys stored before keys were scoped ([`keys`]): a keyed
    /// request is then checked for a replay in the store first (the unique index, which the
    /// kept inputs rely on, does not see a scoped key's legacy twin).
    pub(super) legacy_keys: bool,
}

impl GateInputs {
    /// Approximate heap and inline size, for the cache's bound.
    pub(super) fn bytes(&self) -> usize {
        let r = &self.row;
        let strings = r.id.len()
            + r.description.len()
            + r.neighboring_relation.len()
            + r.create_hash.as_ref().map_or(0, String::len)
            + r.created_at.len()
            + r.updated_at.len();
        let quotas: usize = self
            .quotas
            .iter()
            .map(|q| {
                std::mem::size_of::<crate::store::QuotaRow>()
                    + q.dataset_id.len()
                    + q.principal.len()
                    + q.updated_at.len()
            })
            .sum();
        std::mem::size_of::<Self>() + strings + quotas
    }
}

impl Ledgers {
    /// The caches after an append at `version + 1` with `update` that ended in `result` (or is
    /// queued and assumed to succeed: [`Ledgers::forget`] undoes that if not).
    pub(super) fn keep(
        &self,
        id: &str,
        version: i64,
        update: &DatasetUpdate,
        result: &Result<i64, StoreError>,
    ) {
        // Kept gate inputs stay only if they described the version appended on: then they move
        // to the next version exactly as the store's row did. Anything else drops them.
        {
            let mut gates = self.gates.lock().expect("gate inputs");
            let key = id.to_owned();
            match (&result, gates.get(&key)) {
                (Ok(_), Some(g)) if g.row.version == version => {
                    let (row, quotas) = update.applied(&g.row, &g.quotas);
                    let next = Arc::new(GateInputs {
                        row,
                        quotas,
                        legacy_keys: g.legacy_keys,
                    });
                    let size = next.bytes();
                    gates.insert(key, next, size);
                }
                _ => gates.remove(&key),
            }
        }
    }

    /// Drops what is kept of dataset `id` (a queued append failed: what was kept assumed it).
    pub(super) fn forget(&self, id: &str) {
        self.gates
            .lock()
            .expect("gate inputs")
            .remove(&id.to_owned());
    }

    /// What the gate of dataset `id` reads (its row and quotas), as the store has it now; kept
    /// for the next charge ([`Ledgers::append`] keeps it current).
    pub(super) async fn gate_inputs(&self, id: &str) -> Result<Arc<GateInputs>, LedgerError> {
        let row = self.row(id).await?;
        self.check_state(&row).await?;
        let quotas = self.store.list_quotas(id).await?;
        let known_clean = self
            .no_legacy_keys
            .lock()
            .expect("legacy keys")
            .contains(id);
        let legacy_keys = !known_clean && self.store.has_legacy_keys(id).await?;
        if !legacy_keys && !known_clean {
            let mut clean = self.no_legacy_keys.lock().expect("legacy keys");
            // Bounded: forgetting only costs a query.
            if clean.len() >= 1 << 20 {
                clean.clear();
            }
            clean.insert(id.to_owned());
        }
        let inputs = Arc::new(GateInputs {
            row,
            quotas,
            legacy_keys,
        });
        let bytes = inputs.bytes();
        self.gates
            .lock()
            .expect("gate inputs")
            .insert(id.to_owned(), inputs.clone(), bytes);
        Ok(inputs)
    }
}
