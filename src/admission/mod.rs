//! The admission half of the gate, for every deployer: the state an
//! operator records about its own upgrade, which the cluster's
//! `ValidatingAdmissionPolicy` (`manifests/admission/`) reads to refuse
//! rolling the operator's Deployment to another release before the release
//! it runs has completed its upgrade (docs/admission.md).
//!
//! Owns: the names the policy and the operator share (the opt-in, release
//! and operator labels; the record, `record`, and the ConfigMap the
//! previous policy read, with its keys), the pure rule from a verdict to
//! the state to record and from the recorded state to the merge patch that
//! records it (Complete only on evidence), [`Recorder`], which keeps that
//! state written for as long as the operator leads, and
//! [`record_starting`], the init container's entry of a release that
//! starts, written before its operator runs, and [`wake`], which wakes
//! the deployer that holds the next release once the record says
//! complete. Must not touch: the OperatorCondition (the
//! keeper's), the policy's decision (the API server's; the unit tests
//! evaluate the policies' own expressions), any other operator's entry, or
//! an override but to spend it once used (`spec.overrides` is an admin's).
//!
//! Why a custom resource: the policy reads it as its parameter in the
//! namespace of the Deployment it judges, with no webhook and no server to
//! run, through an informer of the policy's own that follows every write.
//! RBAC limits a writer to the object by `resourceNames`; the record's
//! guard (`manifests/admission/record-guard.yaml`) limits it to its own
//! entry. `create` cannot be limited by name in RBAC, so the operator
//! creates the record only when it is missing; an update of an opted-in
//! Deployment is refused while it is.

mod after_record;
mod claim;
mod installed;
mod labels;
mod record;
mod recorder;
pub mod wake;

#[cfg(test)]
mod health_tests;
#[cfg(test)]
mod policy_tests;

pub use after_record::{
    AfterRecord, COMPLETION_REFUSED_REASON, Handover, after_record, open_after_recorded,
};
pub use claim::{
    MAX_PROGRESS_BYTES, STATE_CONFIGMAP, UpgradeClaim, completed_key, data_patch, initial_data,
    override_key, progress_key,
};
pub use installed::{
    Enforcement, GUARD_POLICY_NAME, POLICY_NAME, PolicyInForce, policy_in_force, read_policy,
};
pub use labels::{ADMISSION_LABEL, ENFORCE, OPERATOR_LABEL, RELEASE_LABEL};
pub use record::{
    COMPLETE, Entry, IN_PROGRESS, OVERRIDE_VERB, Override, RECORD_BY_HAND_VERB, RECORD_GROUP,
    RECORD_KIND, RECORD_NAME, RECORD_PLURAL, RECORD_VERB, RECORD_VERSION, Running,
    completion_refused, entry_of, override_of, record_resource,
};
pub use recorder::{
    REASSERT_INTERVAL, RESTORED_WITHIN, Recorder, RecorderHandle, RecorderStatus, Starting, WAKES,
    read_running, record_once, record_starting,
};
pub use wake::{COMPLETED_ANNOTATION, WAKE_ANNOTATION, Wake};
