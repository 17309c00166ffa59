//! The variant's three factors, defined once: whether the gate's init
//! container is in the operator's pod, how the operator starts, and what a
//! release's upgrade assumes of its predecessor's. `release --gate`,
//! `--start` and `--successor` parse them, and the chain's arms
//! (`tests/src/chain/arm.rs` includes this file) pass them, so an arm's
//! value is the value `release` takes. Each default is what is published.
//!
//! Owns: the factors' values and names. Must not touch: what each changes
//! (`variant.rs`), or anything else: the tests crate builds this file too.

use serde::Serialize;

/// Whether the gate's init container is in the operator's pod.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Gate {
    #[default]
    On,
    Off,
}

/// How the operator starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Start {
    /// Ours: ready after its first reconcile wrote the gate's answer, the
    /// Lease released on stop.
    #[default]
    Fast,
    /// A typical controller-runtime operator: ready once it serves its
    /// probes, its leader Lease kept on stop (its successor waits it out).
    Slow,
}

/// What a release's upgrade assumes of its predecessor's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Successor {
    /// Ours: every pending migration, from any older schema.
    #[default]
    Cumulative,
    /// A model of the feature request's operator: only its own migrations.
    Naive,
}
