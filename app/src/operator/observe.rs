//! Observe: gathers what one App's decision needs — its Secret, its Jobs
//! (and the pod of the one that counts), its server Deployment and pods,
//! and its database's schema and upgrade sessions — into plain data.
//!
//! Owns: the reads (GETs and LISTs, read-only queries on a database session
//! kept for the next read: `db_sessions`)
//! and their translation into `decide::Observed`: which Job counts for the
//! recorded intent, why a Job's pod does not start, what its termination
//! message says. Must not touch: any write (that is `act`), or the decision
//! itself.
//!
//! The Job is read before the database, so a Job seen as succeeded was
//! finished before the schema was read: verification reads after the Job.

mod database;
mod job;
mod read;

pub use database::{
    DATABASE_READ_TIMEOUT, DatabaseRead, PostgresSchemaReader, SchemaReader, database_observation,
};
pub use job::{classify_job, foreign_owner, job_progress, pods_of_job, start_failure};
pub use read::{
    Observation, ObserveContext, ObserveError, connection_settings, observe_app,
    running_server_pods,
};

#[cfg(test)]
mod tests;
