//! One integration-test binary (faster to link than one per file); each module is a topic.

mod access;
mod accuracy;
mod alerts;
mod api;
mod auth;
mod cli;
mod compositions;
mod connections;
mod crash;
mod filter;
mod gdp_extremes;
mod headline;
mod oidc;
mod outage;
mod partitions;
mod pld;
mod properties;
mod protocol;
mod replicas;
mod robustness;
mod runs;
mod store;
mod ui;
