//! `app-db-upgrade` against real, throwaway PostgreSQL servers (15 and 18):
//! each test starts its own (`harness::postgres::TempPostgres`, stopped and
//! removed on drop, also when the test panics) and drives the real binary.
//!
//! Needs root, `postgresql-15`, and PostgreSQL 18 with the client tools from
//! `tools/postgresql.sh` (`just test-postgres` fetches them and sets
//! `UPGRADE_GATE_PG18_DIR` and `UPGRADE_GATE_PG_BIN_DIR`); without them the
//! tests fail and say so.

mod chain_digest;
mod chain_history;
mod db_tls;
mod db_upgrade;
mod fixture;
mod operator_reader;
mod run_options;
mod upgrade_safety;
