//! upgrade-gate: keeps OLM from upgrading a stateful operator while its
//! database upgrade runs.
//!
//! The modules, one per concern (each says in its own comment what it owns
//! and what it must not touch):
//!
//! | module | concern |
//! | --- | --- |
//! | [`operator_condition`] | OLM's v2 `OperatorCondition`: the `Upgradeable` entry, OLM's verdict, writes that wait for OLM |
//! | [`gate`] | `upgrade-gate hold` / `release` / `status`: the init container's steps and exit codes |
//! | [`app`] | the `App` custom resource and its CRD |
//! | [`operator`] | `app-operator`: observe → decide → act per App, and the operator-wide gate |
//! | [`migrations`] | the schema migrations embedded per release |
//! | [`schema`] | where a database stands and what a release must do (pure plan) |
//! | [`db_config`] | how a database is reached (URL, libpq variables, Secret files, TLS) |
//! | [`db_upgrade`] | `app-db-upgrade`: lock, back up, migrate, report |
//! | [`server`] | `app-server`, the sample application |
//! | [`telemetry`] | logging set-up shared by every binary |
//! | [`shutdown`] | the SIGTERM / SIGINT stop request every binary honours (PID 1 in a container) |
pub mod app;
pub mod db_config;
pub mod db_upgrade;
pub mod gate;
pub mod migrations;
pub mod operator;
pub mod operator_condition;
pub mod schema;
pub mod server;
pub mod shutdown;
pub mod telemetry;
