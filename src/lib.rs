//! privacy-ledger: differential-privacy budgets kept exactly.
//!
//! Layers (imports point inward): `cli` → `accountant`. The accountant is pure and synchronous; the
//! ledger service (HTTP, storage, the budget gate) builds on it.

#![forbid(unsafe_code)]

pub mod accountant;
pub mod cli;
