//! The decision table, row by row, and invariants over every combination of
//! phase × Job × database × server × target × retry budget × backoff ×
//! spec edits.
//!
//! `fixtures` holds the world the tests are read over; each other file one
//! concern of the table (its module comment says which).

mod failures;
mod fixtures;
mod invariants;
mod jobs;
mod queue;
mod status;
mod table;
