//! The sample application of upgrade-gate: an `App` custom resource whose
//! PostgreSQL schema moves with each release, the operator that upgrades it
//! (`app-operator`), the database-upgrade Job (`app-db-upgrade`) and the
//! application server (`app-server`). It uses the `upgrade_gate` crate the
//! way any operator would: the init container `upgrade-gate hold` closes the
//! gate, and the operator opens it through
//! [`upgrade_gate::operator_condition`] once every App is verified.
//!
//! The modules, one per concern (each says in its own comment what it owns
//! and what it must not touch):
//!
//! | module | concern |
//! | --- | --- |
//! | [`crd`] | the `App` custom resource and its CRD |
//! | [`operator`] | `app-operator`: observe → decide → act per App, at most N upgrades at once (the others queued, oldest first), and the operator-wide `Upgradeable` answer |
//! | [`migrations`] | the schema migrations embedded per release |
//! | [`schema`] | where a database stands and what a release must do (pure plan) |
//! | [`db_config`] | how a database is reached (URL, libpq variables, Secret files, TLS) |
//! | [`db_upgrade`] | `app-db-upgrade`: lock, back up, migrate, report |
//! | [`server`] | `app-server`, the sample application |
//! | [`cli`] | the arguments every binary of the sample takes |
pub mod cli;
pub mod crd;
pub mod db_config;
pub mod db_upgrade;
pub mod migrations;
pub mod operator;
pub mod schema;
pub mod server;

/// The newest release this build plays (the crate version); every binary
/// acts as it unless `--release` says otherwise.
pub const RELEASE: &str = env!("CARGO_PKG_VERSION");
