//! The `App` custom resource (`upgrade-gate.dev/v1alpha1`): one sample
//! application whose PostgreSQL database the operator keeps at the schema
//! its release needs.
//!
//! Owns: the Rust types the CRD is generated from (spec, status, condition
//! vocabulary) and the CRD yaml rendering (`crd_yaml`), which is checked in
//! under `manifests/crd/` and diffed by a golden-file test.
//! Must not touch: the cluster (no API calls here) or the reconcile logic
//! (`crate::operator`).

mod crd;

pub use crd::{
    App, AppCondition, AppSpec, AppStatus, ConditionStatus, DatabaseConnection,
    DatabaseSchemaStatus, SecretKeys, SecretReference, ServerSpec, SslMode, UpgradePhase,
    UpgradeSpec, UpgradeStatus, condition_type, crd_yaml,
};
