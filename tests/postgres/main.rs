//! `app-db-upgrade` against real, throwaway PostgreSQL servers: each test
//! starts its own (`harness::postgres::TempPostgres`, stopped and removed on
//! drop, also when the test panics) and drives the real binary.
//!
//! Needs root and the PostgreSQL server binaries; without them the tests
//! fail and say so.

mod db_tls;
mod db_upgrade;
mod run_options;
