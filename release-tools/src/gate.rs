//! The variant's first factor, defined once: whether the gate's init
//! container is in the operator's pod. `release --gate` parses it, and the
//! chain's arms (`tests/src/chain/arm.rs` includes this file) pass it, so
//! an arm's value is the value `release` takes.

/// Whether the gate's init container is in the operator's pod.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Gate {
    #[default]
    On,
    Off,
}
