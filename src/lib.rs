//! upgrade-gate: keeps OLM from upgrading a stateful operator while its
//! database upgrade runs.
//!
//! Modules, one per concern (each says what it owns in its own comment):
//! see the list below.
pub mod app;
pub mod db_config;
pub mod db_upgrade;
pub mod gate;
pub mod migrations;
pub mod operator;
pub mod operator_condition;
pub mod schema;
pub mod server;
pub mod telemetry;
