//! What a bundle's checks say: which check a finding comes from
//! ([`Rule`], with the name `--accept` takes), the finding itself
//! ([`Finding`]) and its [`Severity`].
//!
//! Owns: these types. Must not touch: any check (`rules`, `csv`,
//! `deployed`, `keep`) or reading the bundle (the module's front).

use serde::Serialize;

pub use crate::lint_finding::Severity;

/// Which check a finding comes from. Its name (kebab-case, as a finding's
/// JSON `rule` says it) and its first doc line are what `lint-bundle
/// --help` lists under `--accept`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Rule {
    /// The CSV has a name (the OperatorCondition is named after it).
    CsvName,
    /// An init container runs `upgrade-gate hold`.
    GateInitContainer,
    /// `upgrade-gate hold` is the first init container.
    GateFirst,
    /// hold's init container is a plain one, not a native sidecar.
    GateRestartPolicy,
    /// A container's command exists in the image it names (this project's
    /// images only).
    ImageCommand,
    /// hold's OperatorCondition name is literal and the CSV's.
    ConditionName,
    /// The rights on the OperatorCondition, limited to its name.
    ConditionRights,
    /// The rights granted to the ServiceAccount the gate's pod runs as.
    RightsServiceAccount,
    /// The rights in `permissions`, not only in `clusterPermissions` (a
    /// warning).
    ClusterRights,
    /// An update strategy that never runs two releases at once.
    UpdateStrategy,
    /// A readiness probe on the operator container.
    ReadinessProbe,
    /// `olm.skipRange` / `spec.skips` jumps (a warning; a range OLM cannot
    /// read, an error).
    Skips,
    /// An opted-in Deployment's release label: the CSV's release, and the
    /// one its operator is told it is.
    AdmissionRelease,
    /// An opted-in Deployment names the operator whose record the policy
    /// reads (`upgrade-gate.dev/operator`), which a rename keeps.
    AdmissionOperator,
    /// An image pinned by a real digest, not a placeholder.
    ImageDigest,
    /// An opted-in Deployment's images pinned by digest, not only by a tag
    /// that can be pushed again with other code (a warning).
    ImageTag,
    /// The gate-only image pinned by a digest, not only a tag (a note).
    GateImageTag,
    /// The gate's container has a service-account token to act with.
    GateCredentials,
    /// `upgrade-gate keep` runs as a container, not an init container.
    KeepSidecar,
    /// keep's rule can be built and reads the release.
    KeepRule,
    /// keep's resources are resource names the CSV owns or requires.
    KeepResources,
    /// keep's pod may list and watch its resources, everywhere it watches.
    KeepRights,
    /// keep's done field is in the schema of the CRD the bundle ships (the
    /// API server drops a field its schema does not have).
    KeepDoneField,
}

impl Rule {
    /// The rule's name: what a finding's JSON `rule` says and `--accept`
    /// takes (`image-tag`).
    pub fn name(self) -> String {
        clap::ValueEnum::to_possible_value(&self)
            .map(|value| value.get_name().to_owned())
            .unwrap_or_default()
    }
}

/// One problem of a bundle, located by file and field path.
pub type Finding = crate::lint_finding::Finding<Rule>;
