//! privacy-ledger: differential-privacy budgets kept exactly.
//!
//! Layers (imports point inward): `http` → `ledger` → `accountant`, and `ledger` → `store`.
//! `app` wires them; `cli` is the command line. The accountant is pure and synchronous.

#![forbid(unsafe_code)]

pub mod accountant;
pub mod app;
pub mod cli;
pub mod config;
pub mod http;
pub mod ledger;
pub mod store;
