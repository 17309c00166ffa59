//! Test fixtures for real components: a throwaway PostgreSQL and the local
//! single-node cluster with OLM.

pub mod api;
pub mod artifacts;
pub mod cluster;
pub mod components;
pub mod layout;
pub mod leftovers;
pub mod machine;
pub mod olm_v1_names;
pub mod olm_wake;
pub mod pki;
pub mod postgres;
pub mod process;
pub mod processes;
pub mod progress;
pub mod state;
pub mod teardown;
pub mod testing;
