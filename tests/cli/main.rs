//! The workspace's binaries as processes, with no cluster and no database:
//! how they stop on signals and what they print.

mod bench_db;
mod gate_logs;
mod lint_bundle;
mod lint_catalog;
mod lint_run;
mod plugin;
mod signals;
