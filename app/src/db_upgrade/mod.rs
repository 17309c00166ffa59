//! The database upgrade Job (`app-db-upgrade`): plan, lock, back up, migrate,
//! verify, report — plus `seed`, `restore` and `backups`.
//!
//! Owns: the order of those steps, the error vocabulary with one documented
//! exit code per failure ([`DbUpgradeError::exit_code`], [`EXIT_CODES`]) and
//! its kind for the operator ([`DbUpgradeError::kind`]), and the reports.
//! Must not touch: Kubernetes (the operator reads the outcome from the Job's
//! termination message and the progress from `pg_stat_activity`) or the
//! migration catalogue.
//!
//! Safety argument: the run takes the upgrade lock, then opens ONE
//! transaction that first locks every application table against writers
//! (`EXCLUSIVE`: `pg_dump` still reads), takes the backup while writers are
//! out, then — once `pg_dump` has exited, while the archive is checked,
//! checksummed and synced — locks the tables the pending migrations declare
//! `ACCESS EXCLUSIVE` and applies every pending migration with its history
//! row, and commits once, only after the archive is sealed. A write is therefore either in the backup and in the
//! migrated tables, or refused; and whatever fails or kills the process,
//! the database keeps exactly the schema and data it had (`apply`). The
//! session sets `client_connection_check_interval` and TCP keepalives, so
//! the server notices a dead or unreachable client and rolls back promptly,
//! which also frees the session-level upgrade lock for a rerun.

pub mod apply;
pub mod backup;
pub mod compression;
pub mod lock;
pub mod monitor;
pub mod outcome;
pub mod progress;
pub mod seed;

mod commands;
mod error;
mod run;

pub use commands::{PlanReport, plan_for, restore, seed_database};
pub use error::{DbUpgradeError, EXIT_CODES, exit_codes_help, refusal_exit_code};
pub use run::{APPLICATION_NAME, BackupChoice, BackupPolicy, RunOptions, run_upgrade};

#[cfg(test)]
mod tests;
