//! The admission hold of every operator Deployment shown that opted in
//! (`upgrade-gate.dev/admission: enforce`): what its operator recorded in
//! the namespace's `UpgradeRecord` (its entry, an admin's override),
//! whether the API server would judge an update and a create of it
//! ([`crate::admission::policy_in_force`]), and, where the record says
//! the running release's upgrade is not complete, what a server-side
//! dry-run of a move to another release says: refused by the policy
//! (verified), admitted (the hold is NOT in force), or not known; and the
//! images it runs by tag only, not digest, which a tag pushed again with
//! other code would change without a move the policy judges.
//!
//! Owns: the hold's content, its table, its warnings and the exit code of
//! a hold proven not in force. Must not touch: the cluster (the reads and
//! the dry-run are the plugin's, in `mod.rs`).

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::DynamicObject;
use serde::Serialize;
use serde_json::{Value, json};

use super::rows::summary;
use crate::admission::{
    COMPLETE, OPERATOR_LABEL, Override, POLICY_NAME, PolicyInForce, RECORD_KIND, RECORD_NAME,
    RELEASE_LABEL, entry_of, override_of,
};
use crate::bundle_lint::{RE_PUSHED_TAG, tag_only};
use crate::operator_condition::Obstacle;

/// The exit code of `kubectl upgrade-gate status` when a dry-run proved
/// that an opted-in Deployment whose upgrade is not complete can be moved
/// to another release: its hold is not in force.
pub const HOLD_NOT_IN_FORCE_EXIT: u8 = 15;

/// What the API server's refusal by our policy says.
pub(super) const POLICY_DENIAL: &str = "ValidatingAdmissionPolicy 'upgrade-gate.dev'";
/// What the dry-run appends to the running release to name another one.
const DRY_RUN_SUFFIX: &str = "-upgrade-gate-dry-run";
/// The longest label value the API server accepts.
const LABEL_VALUE_MAX: usize = 63;
/// The field manager of the dry-run (nothing is written).
pub(super) const FIELD_MANAGER: &str = "kubectl-upgrade-gate";

/// What the record says of the running release's upgrade (the UPGRADE
/// column).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "state")]
pub enum UpgradeRecord {
    /// The running release recorded its upgrade complete: the policy lets
    /// the Deployment move.
    Complete {
        /// That release.
        release: String,
    },
    /// The running release recorded that its upgrade is not complete.
    InProgress {
        /// That release.
        release: String,
        /// Why, as the operator wrote it.
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// A Deployment opts in, and the running release recorded nothing yet
    /// (the policy refuses to replace it until it records completion).
    NotRecorded {
        /// The last release the record says completed: an earlier one.
        #[serde(skip_serializing_if = "Option::is_none")]
        last_completed: Option<String>,
    },
    /// No Deployment opts in to the policy.
    NotOptedIn,
    /// The record could not be read.
    Unreadable {
        /// The error.
        why: String,
    },
}

impl UpgradeRecord {
    /// The UPGRADE cell.
    pub fn cell(&self) -> String {
        match self {
            UpgradeRecord::Complete { release } => format!("complete ({release})"),
            UpgradeRecord::InProgress {
                release,
                message: Some(message),
            } => format!("in progress ({release}): {}", summary(message)),
            UpgradeRecord::InProgress {
                release,
                message: None,
            } => format!("in progress ({release})"),
            UpgradeRecord::NotRecorded {
                last_completed: None,
            } => "not recorded".to_owned(),
            UpgradeRecord::NotRecorded {
                last_completed: Some(release),
            } => format!("not recorded (last complete: {release})"),
            UpgradeRecord::NotOptedIn => "not opted in".to_owned(),
            UpgradeRecord::Unreadable { why } => format!("unknown: {}", summary(why)),
        }
    }

    /// Whether the policy refuses to move the Deployment to another
    /// release (the record does not say its release completed).
    pub fn holds(&self) -> bool {
        matches!(
            self,
            UpgradeRecord::InProgress { .. } | UpgradeRecord::NotRecorded { .. }
        )
    }
}

/// What the server-side dry-run of a move said.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "result")]
pub enum DryRun {
    /// Not tried: the record lets the Deployment move, nothing is held.
    NotNeeded,
    /// To be made (the plugin makes it before it shows the hold).
    Due,
    /// Not tried, and why.
    NotTried {
        /// Why.
        why: String,
    },
    /// The policy refused the move: the hold is in force.
    Verified {
        /// The release label the dry-run tried.
        tried: String,
        /// The refusal.
        message: String,
    },
    /// The API server admitted the move: the hold is NOT in force.
    Admitted {
        /// The release label the dry-run tried.
        tried: String,
    },
    /// The user may not patch Deployments: not verified.
    NoPatchRight,
    /// Refused by something else, or failed: not verified.
    Failed {
        /// The error.
        why: String,
    },
}

impl DryRun {
    /// The DRY-RUN cell.
    pub fn cell(&self) -> String {
        match self {
            DryRun::NotNeeded => "not needed (complete)".to_owned(),
            DryRun::Due => "not made".to_owned(),
            DryRun::NotTried { why } => format!("not tried: {why}"),
            DryRun::Verified { .. } => "verified by dry-run".to_owned(),
            DryRun::Admitted { .. } => "ADMITTED: hold NOT in force".to_owned(),
            DryRun::NoPatchRight => "could not verify (no patch right on deployments)".to_owned(),
            DryRun::Failed { why } => format!("could not verify: {}", summary(why)),
        }
    }
}

/// One operator Deployment that opted in, and its hold.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Hold {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub deployment: String,
    /// The identity its record is kept under (label
    /// `upgrade-gate.dev/operator`, else its name).
    pub operator: String,
    /// The release it runs (its label `upgrade-gate.dev/release`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub release: Option<String>,
    /// What its record says.
    pub upgrade: UpgradeRecord,
    /// An admin's override of one move, if any.
    #[serde(rename = "override", skip_serializing_if = "Option::is_none")]
    pub override_move: Option<Override>,
    /// Whether the API server judges its updates and creates, and guards
    /// the record.
    pub policy: PolicyInForce,
    /// What the dry-run of a move said.
    pub dry_run: DryRun,
    /// Its images that no digest pins (`tag_only_images`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tag_only_images: Vec<TagOnlyImage>,
}

/// An image a Deployment runs by tag only: the policy compares images as
/// text, so a tag pushed again with other code runs that code in every
/// pod started after, without a move the policy judges.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TagOnlyImage {
    /// The image reference.
    pub image: String,
    /// How it is pinned, in words (`pinned by tag ("7.10.1"), not digest`).
    pub pinned: String,
    /// What runs it: `init container NAME`, `container NAME`.
    pub containers: Vec<String>,
}

/// The images of `deployment`'s pod template that no digest pins, each
/// once, in the order of its init containers then containers.
pub fn tag_only_images(deployment: &Deployment) -> Vec<TagOnlyImage> {
    let Some(pod) = deployment
        .spec
        .as_ref()
        .and_then(|spec| spec.template.spec.as_ref())
    else {
        return Vec::new();
    };
    let init = pod
        .init_containers
        .iter()
        .flatten()
        .map(|c| ("init container", c));
    let main = pod.containers.iter().map(|c| ("container", c));
    let mut images: Vec<TagOnlyImage> = Vec::new();
    for (kind, container) in init.chain(main) {
        let image = container.image.as_deref().unwrap_or_default();
        let Some(how) = tag_only(image) else {
            continue;
        };
        let what = format!("{kind} {}", container.name);
        match images.iter_mut().find(|found| found.image == image) {
            Some(found) => found.containers.push(what),
            None => images.push(TagOnlyImage {
                image: image.to_owned(),
                pinned: how.pinned(),
                containers: vec![what],
            }),
        }
    }
    images
}

fn label<'a>(deployment: &'a Deployment, key: &str) -> Option<&'a str> {
    deployment
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(key))
        .map(String::as_str)
}

/// The identity the policy keeps `deployment`'s record under.
pub fn operator_of(deployment: &Deployment) -> String {
    label(deployment, OPERATOR_LABEL)
        .or(deployment.metadata.name.as_deref())
        .unwrap_or_default()
        .to_owned()
}

/// What the record (its `spec`) says of `operator` running `release` (the
/// policy compares the entry's release with the running one's label).
pub fn upgrade_of(spec: Option<&Value>, operator: &str, release: Option<&str>) -> UpgradeRecord {
    let Some(entry) = entry_of(spec, operator) else {
        return UpgradeRecord::NotRecorded {
            last_completed: None,
        };
    };
    let complete = entry.state == COMPLETE;
    if Some(entry.release.as_str()) == release {
        return if complete {
            UpgradeRecord::Complete {
                release: entry.release,
            }
        } else {
            UpgradeRecord::InProgress {
                release: entry.release,
                message: entry.message.filter(|message| !message.is_empty()),
            }
        };
    }
    // Recorded by another release (the one before, or a rolled-back one).
    UpgradeRecord::NotRecorded {
        last_completed: if complete {
            Some(entry.release)
        } else {
            entry.last_completed
        },
    }
}

/// The release label the dry-run moves to: the running one with
/// `DRY_RUN_SUFFIX` (`-upgrade-gate-dry-run`), cut to a valid label value.
pub fn dry_run_release(release: Option<&str>) -> String {
    let release = release.unwrap_or_default();
    if release.is_empty() {
        return DRY_RUN_SUFFIX.trim_start_matches('-').to_owned();
    }
    let mut keep = release.len().min(LABEL_VALUE_MAX - DRY_RUN_SUFFIX.len());
    while !release.is_char_boundary(keep) {
        keep -= 1;
    }
    format!("{}{DRY_RUN_SUFFIX}", &release[..keep])
}

/// The merge patch of the dry-run: another release label, nothing else.
pub fn dry_run_patch(tried: &str) -> Value {
    json!({"metadata": {"labels": {RELEASE_LABEL: tried}}})
}

/// What the dry-run's answer means (`tried`: the release it moved to).
pub fn dry_run_outcome(answer: Result<(), Obstacle>, tried: &str) -> DryRun {
    let tried = tried.to_owned();
    match answer {
        Ok(()) => DryRun::Admitted { tried },
        Err(
            Obstacle::Forbidden(message)
            | Obstacle::Rejected { message, .. }
            | Obstacle::ServerError { message, .. },
        ) if message.contains(POLICY_DENIAL) => DryRun::Verified { tried, message },
        Err(Obstacle::Forbidden(message))
            if message.contains("cannot patch resource \"deployments\"") =>
        {
            DryRun::NoPatchRight
        }
        Err(Obstacle::NotFound(_)) => DryRun::NotTried {
            why: "the Deployment is gone".to_owned(),
        },
        Err(obstacle) => DryRun::Failed {
            why: obstacle.to_string(),
        },
    }
}

/// The hold of `deployment` from what was read: the namespace's record
/// (or why it could not be read) and the policy's verdict. Its dry-run
/// is [`DryRun::NotNeeded`] where the record lets it move, else
/// [`DryRun::NotTried`] with `no_dry_run` (why none can be made) or
/// [`DryRun::Due`].
pub fn hold(
    deployment: &Deployment,
    record: Result<Option<&DynamicObject>, &str>,
    policy: PolicyInForce,
    no_dry_run: Option<&str>,
) -> Hold {
    let operator = operator_of(deployment);
    let release = label(deployment, RELEASE_LABEL).map(str::to_owned);
    let (upgrade, override_move) = match record {
        Ok(record) => {
            let spec = record.and_then(|record| record.data.get("spec"));
            (
                upgrade_of(spec, &operator, release.as_deref()),
                override_of(spec, &operator),
            )
        }
        Err(why) => (
            UpgradeRecord::Unreadable {
                why: why.to_owned(),
            },
            None,
        ),
    };
    let dry_run = match (&upgrade, no_dry_run) {
        (UpgradeRecord::Complete { .. }, _) => DryRun::NotNeeded,
        (UpgradeRecord::Unreadable { .. }, _) => DryRun::NotTried {
            why: format!("the {RECORD_KIND} could not be read"),
        },
        (_, Some(why)) => DryRun::NotTried {
            why: why.to_owned(),
        },
        (_, None) => DryRun::Due,
    };
    Hold {
        namespace: deployment.metadata.namespace.clone().unwrap_or_default(),
        deployment: deployment.metadata.name.clone().unwrap_or_default(),
        operator,
        release,
        upgrade,
        override_move,
        policy,
        dry_run,
        tag_only_images: tag_only_images(deployment),
    }
}

impl Hold {
    /// Whether a dry-run should verify it: the record holds the Deployment
    /// and nothing keeps the plugin from trying.
    pub fn wants_dry_run(&self) -> bool {
        self.upgrade.holds() && self.dry_run == DryRun::Due
    }

    /// Whether a dry-run proved it not in force.
    pub fn not_in_force(&self) -> bool {
        matches!(self.dry_run, DryRun::Admitted { .. })
    }
}

/// The header and the cells of each hold.
pub fn hold_cells<'a>(holds: impl IntoIterator<Item = &'a Hold>) -> Vec<Vec<String>> {
    let none = || "<none>".to_owned();
    let mut cells = vec![
        [
            "NAMESPACE",
            "DEPLOYMENT",
            "OPERATOR",
            "UPGRADE",
            "OVERRIDE",
            "UPDATES",
            "CREATES",
            "DRY-RUN",
        ]
        .map(str::to_owned)
        .to_vec(),
    ];
    for hold in holds {
        cells.push(vec![
            hold.namespace.clone(),
            hold.deployment.clone(),
            hold.operator.clone(),
            hold.upgrade.cell(),
            hold.override_move
                .as_ref()
                .map_or_else(none, |o| format!("{} -> {}", o.from, o.to)),
            hold.policy.update.word(),
            hold.policy.create.word(),
            hold.dry_run.cell(),
        ]);
    }
    cells
}

/// What to warn about, one line each, without repeats: a hold a dry-run
/// proved not in force (first), updates or creates the policy does not
/// judge, a record whose writers are not limited, a dry-run that failed,
/// an image run by tag only (one line per image).
pub fn hold_warnings<'a>(holds: impl IntoIterator<Item = &'a Hold>) -> Vec<String> {
    let holds: Vec<&Hold> = holds.into_iter().collect();
    let mut lines: Vec<String> = Vec::new();
    let mut push = |line: String| {
        if !lines.contains(&line) {
            lines.push(line);
        }
    };
    for hold in &holds {
        if let DryRun::Admitted { tried } = &hold.dry_run {
            push(format!(
                "the hold is NOT in force for operator {} (Deployment {}/{}): a server-side dry-run moving it to release {tried} was admitted, although its record says {}. The policy: {}",
                hold.operator,
                hold.namespace,
                hold.deployment,
                hold.upgrade.cell(),
                hold.policy.update_sentence(),
            ));
        }
    }
    for hold in &holds {
        let name = format!("Deployment {}/{}", hold.namespace, hold.deployment);
        // An admitted dry-run said it first.
        if let Some(warning) = hold.policy.update_warning()
            && !hold.not_in_force()
        {
            push(format!("{name}: {warning}"));
        }
        if let Some(warning) = hold.policy.create_warning() {
            push(format!("{name}: {warning}"));
        }
        if let Some(warning) = hold.policy.guard_warning() {
            push(format!("namespace {}: {warning}", hold.namespace));
        }
        match &hold.dry_run {
            DryRun::Failed { why } => push(format!(
                "{name}: the dry-run that verifies its hold failed ({why}); it is not verified"
            )),
            DryRun::Verified { .. } if !hold.policy.update.in_force() => push(format!(
                "{name}: the dry-run was refused by {POLICY_NAME} although its bindings read as not in force; the API server's answer wins"
            )),
            _ => {}
        }
        if let UpgradeRecord::Unreadable { why } = &hold.upgrade {
            push(format!(
                "{name}: the {RECORD_KIND} {RECORD_NAME} of its namespace could not be read ({why})"
            ));
        }
        for image in &hold.tag_only_images {
            push(format!(
                "{name}: the image {} ({}) is {}, under the admission policy: {RE_PUSHED_TAG}",
                image.image,
                image.containers.join(", "),
                image.pinned
            ));
        }
    }
    lines
}

/// The plugin's exit code for these holds: [`HOLD_NOT_IN_FORCE_EXIT`]
/// when a dry-run proved one not in force, else 0.
pub fn exit_code<'a>(holds: impl IntoIterator<Item = &'a Hold>) -> u8 {
    if holds.into_iter().any(Hold::not_in_force) {
        HOLD_NOT_IN_FORCE_EXIT
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::policy_in_force;
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    use k8s_openapi::api::core::v1::Namespace;

    fn deployment(labels: Value) -> Deployment {
        serde_json::from_value(
            json!({"metadata": {"name": "app-operator", "namespace": "shop",
            "labels": labels}}),
        )
        .unwrap()
    }

    fn opted_in(release: &str) -> Deployment {
        deployment(json!({"upgrade-gate.dev/admission": "enforce", RELEASE_LABEL: release}))
    }

    fn record(spec: Value) -> DynamicObject {
        serde_json::from_value(
            json!({"apiVersion": "upgrade-gate.dev/v1alpha1", "kind": "UpgradeRecord",
            "metadata": {"name": "upgrade-gate", "namespace": "shop"}, "spec": spec}),
        )
        .unwrap()
    }

    fn manifests(text: &str) -> Vec<Value> {
        text.split("\n---\n")
            .map(|document| serde_saphyr::from_str(document).unwrap())
            .collect()
    }

    /// The shipped policies, and the shipped bindings limited to the
    /// namespaces `bound`.
    fn shipped(
        bound: &[&str],
    ) -> (
        Vec<ValidatingAdmissionPolicy>,
        Vec<ValidatingAdmissionPolicyBinding>,
    ) {
        let policies = [
            include_str!("../../manifests/admission/policy.yaml"),
            include_str!("../../manifests/admission/record-guard.yaml"),
        ]
        .iter()
        .flat_map(|text| manifests(text))
        .map(|policy| serde_json::from_value(policy).unwrap())
        .collect();
        let bindings = manifests(include_str!("../../manifests/admission/bindings.yaml"))
            .into_iter()
            .map(|mut binding| {
                binding["spec"]["matchResources"]["namespaceSelector"] = json!({"matchExpressions": [
                    {"key": "kubernetes.io/metadata.name", "operator": "In", "values": bound}]});
                serde_json::from_value(binding).unwrap()
            })
            .collect();
        (policies, bindings)
    }

    fn policy(bound: &[&str], record: Option<&DynamicObject>) -> PolicyInForce {
        let (policies, bindings) = shipped(bound);
        let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": "shop",
            "labels": {"kubernetes.io/metadata.name": "shop"}}}))
        .unwrap();
        policy_in_force(
            Ok((&policies, &bindings)),
            Ok(&namespace),
            &opted_in("7.10.0"),
            Ok(record),
        )
    }

    #[test]
    fn the_record_says_what_the_running_release_recorded() {
        let running = json!({"operators": {"app-operator": {"release": "7.10.0", "state": "InProgress",
            "message": "37/100 upgraded: the rest queued", "lastCompleted": "7.9.3"}}});
        let done = json!({"operators": {"app-operator": {"release": "7.10.0", "state": "Complete",
            "lastCompleted": "7.10.0"}}});
        let table = [
            (
                "in progress",
                Some(running.clone()),
                "app-operator",
                Some("7.10.0"),
                UpgradeRecord::InProgress {
                    release: "7.10.0".into(),
                    message: Some("37/100 upgraded: the rest queued".into()),
                },
            ),
            (
                "complete",
                Some(done.clone()),
                "app-operator",
                Some("7.10.0"),
                UpgradeRecord::Complete {
                    release: "7.10.0".into(),
                },
            ),
            (
                "a newer release has recorded nothing yet",
                Some(done),
                "app-operator",
                Some("7.10.1"),
                UpgradeRecord::NotRecorded {
                    last_completed: Some("7.10.0".into()),
                },
            ),
            (
                "an older release's entry in progress",
                Some(running.clone()),
                "app-operator",
                Some("7.10.1"),
                UpgradeRecord::NotRecorded {
                    last_completed: Some("7.9.3".into()),
                },
            ),
            (
                "another operator's entry",
                Some(running),
                "web-operator",
                Some("7.10.0"),
                UpgradeRecord::NotRecorded {
                    last_completed: None,
                },
            ),
            (
                "no record",
                None,
                "app-operator",
                Some("7.10.0"),
                UpgradeRecord::NotRecorded {
                    last_completed: None,
                },
            ),
        ];
        for (name, spec, operator, release, expected) in table {
            let upgrade = upgrade_of(spec.as_ref(), operator, release);
            assert_eq!(upgrade, expected, "{name}");
            assert_eq!(
                upgrade.holds(),
                !matches!(expected, UpgradeRecord::Complete { .. }),
                "{name}"
            );
        }
    }

    #[test]
    fn the_upgrade_cell_keeps_the_columns_meaning() {
        let table = [
            (
                UpgradeRecord::Complete {
                    release: "7.10.1".into(),
                },
                "complete (7.10.1)",
            ),
            (
                UpgradeRecord::InProgress {
                    release: "7.10.0".into(),
                    message: Some("the Job runs: 40%".into()),
                },
                "in progress (7.10.0): the Job runs",
            ),
            (
                UpgradeRecord::InProgress {
                    release: "7.10.0".into(),
                    message: None,
                },
                "in progress (7.10.0)",
            ),
            (
                UpgradeRecord::NotRecorded {
                    last_completed: Some("7.9.3".into()),
                },
                "not recorded (last complete: 7.9.3)",
            ),
            (UpgradeRecord::NotOptedIn, "not opted in"),
        ];
        for (upgrade, cell) in table {
            assert_eq!(upgrade.cell(), cell);
        }
    }

    #[test]
    fn the_identity_is_the_operator_label_else_the_name() {
        assert_eq!(operator_of(&opted_in("1")), "app-operator");
        assert_eq!(
            operator_of(&deployment(json!({OPERATOR_LABEL: "shop-db"}))),
            "shop-db"
        );
    }

    /// An opted-in Deployment whose pod runs `init` then `containers`
    /// (name, image) pairs.
    fn running(init: &[(&str, &str)], containers: &[(&str, &str)]) -> Deployment {
        let list = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(name, image)| json!({"name": name, "image": image}))
                .collect::<Vec<_>>()
        };
        serde_json::from_value(json!({
            "metadata": {"name": "app-operator", "namespace": "shop", "labels": {
                "upgrade-gate.dev/admission": "enforce", RELEASE_LABEL: "7.10.0"}},
            "spec": {"selector": {}, "template": {"spec": {
                "initContainers": list(init), "containers": list(containers)}}}
        }))
        .unwrap()
    }

    #[test]
    fn images_by_tag_only_are_listed_once_with_what_runs_them() {
        let pinned = format!(
            "ghcr.io/upgrade-gate/upgrade-gate@sha256:{}",
            "ab".repeat(32)
        );
        let sample = "ghcr.io/upgrade-gate/upgrade-gate:7.10.1";
        /// An image, how it is pinned, what runs it.
        type Listed<'a> = (&'a str, &'a str, Vec<&'a str>);
        let table: Vec<(&str, Deployment, Vec<Listed<'_>>)> = vec![
            (
                "every image pinned by digest",
                running(&[("upgrade-gate", &pinned)], &[("app-operator", &pinned)]),
                vec![],
            ),
            (
                "the sample's: one image by tag, in the gate and the operator",
                running(&[("upgrade-gate", sample)], &[("app-operator", sample)]),
                vec![(
                    sample,
                    "pinned by tag (\"7.10.1\"), not digest",
                    vec!["init container upgrade-gate", "container app-operator"],
                )],
            ),
            (
                "a pinned gate, the operator by tag, a sidecar by no tag",
                running(
                    &[("upgrade-gate", &pinned)],
                    &[
                        ("app-operator", "localhost:5000/app-operator:7.10.1"),
                        ("proxy", "quay.io/example/proxy"),
                    ],
                ),
                vec![
                    (
                        "localhost:5000/app-operator:7.10.1",
                        "pinned by tag (\"7.10.1\"), not digest",
                        vec!["container app-operator"],
                    ),
                    (
                        "quay.io/example/proxy",
                        "pinned by neither tag nor digest (the kubelet pulls :latest)",
                        vec!["container proxy"],
                    ),
                ],
            ),
            (
                "no pod template (described by labels only)",
                opted_in("7.10.0"),
                vec![],
            ),
        ];
        for (case, deployment, expected) in table {
            let found = tag_only_images(&deployment);
            let found: Vec<Listed<'_>> = found
                .iter()
                .map(|image| {
                    (
                        image.image.as_str(),
                        image.pinned.as_str(),
                        image.containers.iter().map(String::as_str).collect(),
                    )
                })
                .collect();
            assert_eq!(found, expected, "{case}");
        }
    }

    #[test]
    fn a_held_deployment_by_tag_is_warned_of_in_the_users_words() {
        let sample = "ghcr.io/upgrade-gate/upgrade-gate:7.10.1";
        let done = record(
            json!({"operators": {"app-operator": {"release": "7.10.0", "state": "Complete"}}}),
        );
        let by_tag = running(&[("upgrade-gate", sample)], &[("app-operator", sample)]);
        // Complete: no dry-run, the policy judges, nothing else to say.
        let tagged = hold(
            &by_tag,
            Ok(Some(&done)),
            policy(&["shop"], Some(&done)),
            None,
        );
        assert_eq!(
            hold_warnings([&tagged]),
            [format!(
                "Deployment shop/app-operator: the image {sample} (init container upgrade-gate, container app-operator) is pinned by tag (\"7.10.1\"), not digest, under the admission policy: the policy compares images as text and admits `kubectl rollout restart`, so once the tag is pushed again with other code, every pod started after that (a restart, a rescheduled or evicted pod, a new node) may run the new code, unjudged, while the record still says the running release's upgrade is in progress; pin it by digest (IMAGE@sha256:..., from `podman push --digestfile FILE`, your registry, or a release's digests.txt; kustomize: edit set image NAME=NAME@sha256:...)"
            )]
        );
        assert_eq!(
            exit_code([&tagged]),
            0,
            "a warning, not a hold out of force"
        );
        let json = serde_json::to_value(&tagged).unwrap();
        assert_eq!(
            json["tagOnlyImages"],
            json!([{"image": sample, "pinned": "pinned by tag (\"7.10.1\"), not digest",
                "containers": ["init container upgrade-gate", "container app-operator"]}])
        );

        let pinned = format!("{sample}@sha256:{}", "ab".repeat(32));
        let by_digest = running(&[("upgrade-gate", &pinned)], &[("app-operator", &pinned)]);
        let quiet = hold(
            &by_digest,
            Ok(Some(&done)),
            policy(&["shop"], Some(&done)),
            None,
        );
        assert_eq!(hold_warnings([&quiet]), Vec::<String>::new());
        assert!(
            serde_json::to_value(&quiet)
                .unwrap()
                .get("tagOnlyImages")
                .is_none()
        );
    }

    #[test]
    fn the_dry_run_moves_to_a_valid_release_label() {
        assert_eq!(
            dry_run_release(Some("7.10.0")),
            "7.10.0-upgrade-gate-dry-run"
        );
        assert_eq!(dry_run_release(None), "upgrade-gate-dry-run");
        let long = "v".repeat(63);
        let tried = dry_run_release(Some(&long));
        assert_eq!(tried.len(), 63, "{tried}");
        assert!(tried.ends_with(DRY_RUN_SUFFIX));
        assert_eq!(
            dry_run_patch("x"),
            json!({"metadata": {"labels": {"upgrade-gate.dev/release": "x"}}})
        );
    }

    #[test]
    fn the_dry_runs_answer_says_whether_the_hold_is_in_force() {
        let denied = "deployments.apps \"app-operator\" is forbidden: ValidatingAdmissionPolicy 'upgrade-gate.dev' with binding 'upgrade-gate.dev' denied request: upgrade-gate: operator app-operator ...";
        let rbac = "deployments.apps \"app-operator\" is forbidden: User \"viewer\" cannot patch resource \"deployments\" in API group \"apps\" in the namespace \"shop\"";
        let other = "deployments.apps \"app-operator\" is forbidden: ValidatingAdmissionPolicy 'no-latest' with binding 'no-latest' denied request: no";
        let tried = "7.10.0-upgrade-gate-dry-run";
        let table = [
            (
                Err(Obstacle::Forbidden(denied.into())),
                DryRun::Verified {
                    tried: tried.into(),
                    message: denied.into(),
                },
            ),
            (
                Ok(()),
                DryRun::Admitted {
                    tried: tried.into(),
                },
            ),
            (Err(Obstacle::Forbidden(rbac.into())), DryRun::NoPatchRight),
            (
                Err(Obstacle::Forbidden(other.into())),
                DryRun::Failed {
                    why: format!("forbidden (403): {other}"),
                },
            ),
            (
                Err(Obstacle::NotFound("gone".into())),
                DryRun::NotTried {
                    why: "the Deployment is gone".into(),
                },
            ),
            (
                Err(Obstacle::Timeout),
                DryRun::Failed {
                    why: "request timed out".into(),
                },
            ),
        ];
        for (answer, expected) in table {
            let outcome = dry_run_outcome(answer, tried);
            assert_eq!(outcome, expected);
        }
        assert_eq!(
            DryRun::NoPatchRight.cell(),
            "could not verify (no patch right on deployments)"
        );
    }

    #[test]
    fn a_hold_is_verified_only_where_the_record_holds() {
        let running = record(
            json!({"operators": {"app-operator": {"release": "7.10.0", "state": "InProgress"}},
            "overrides": {"app-operator": {"from": "7.10.0", "to": "7.10.1", "reason": "hotfix"}}}),
        );
        let done = record(
            json!({"operators": {"app-operator": {"release": "7.10.0", "state": "Complete"}}}),
        );
        let held = hold(
            &opted_in("7.10.0"),
            Ok(Some(&running)),
            policy(&["shop"], Some(&running)),
            None,
        );
        assert!(held.wants_dry_run(), "{held:?}");
        assert_eq!(
            held.override_move.as_ref().map(|o| (&*o.from, &*o.to)),
            Some(("7.10.0", "7.10.1"))
        );
        let complete = hold(
            &opted_in("7.10.0"),
            Ok(Some(&done)),
            policy(&["shop"], Some(&done)),
            None,
        );
        assert_eq!(complete.dry_run, DryRun::NotNeeded);
        assert!(!complete.wants_dry_run());
        let missing = hold(
            &opted_in("7.10.0"),
            Ok(Some(&running)),
            policy(&["shop"], Some(&running)),
            Some("the Deployment does not exist yet"),
        );
        assert!(!missing.wants_dry_run());
        let unreadable = hold(
            &opted_in("7.10.0"),
            Err("forbidden"),
            policy(&["shop"], None),
            None,
        );
        assert!(!unreadable.wants_dry_run());
        assert_eq!(
            unreadable.upgrade,
            UpgradeRecord::Unreadable {
                why: "forbidden".into()
            }
        );
    }

    #[test]
    fn an_admitted_dry_run_is_loud_and_the_exit_code_says_so() {
        let running = record(
            json!({"operators": {"app-operator": {"release": "7.10.0", "state": "InProgress",
            "message": "the Job runs"}}}),
        );
        // Bound for another namespace only: not in force in shop.
        let mut loose = hold(
            &opted_in("7.10.0"),
            Ok(Some(&running)),
            policy(&["other"], Some(&running)),
            None,
        );
        loose.dry_run = DryRun::Admitted {
            tried: "7.10.0-upgrade-gate-dry-run".into(),
        };
        let mut tight = hold(
            &opted_in("7.10.0"),
            Ok(Some(&running)),
            policy(&["shop"], Some(&running)),
            None,
        );
        tight.dry_run = DryRun::Verified {
            tried: "7.10.0-upgrade-gate-dry-run".into(),
            message: POLICY_DENIAL.into(),
        };
        assert_eq!(exit_code([&tight]), 0);
        assert_eq!(hold_warnings([&tight]), Vec::<String>::new());
        assert_eq!(exit_code([&tight, &loose]), HOLD_NOT_IN_FORCE_EXIT);
        let warnings = hold_warnings([&tight, &loose]);
        assert!(
            warnings[0].starts_with("the hold is NOT in force for operator app-operator (Deployment shop/app-operator): a server-side dry-run moving it to release 7.10.0-upgrade-gate-dry-run was admitted, although its record says in progress (7.10.0): the Job runs. The policy: no binding of the admission policy upgrade-gate.dev with validationActions Deny covers it here (upgrade-gate.dev: its namespaceSelector). A cluster admin binds it here"),
            "{warnings:#?}"
        );
        // Then the policy's own: creates, the record's writers (the
        // updates' said above).
        assert_eq!(warnings.len(), 3, "{warnings:#?}");
        assert!(
            warnings[1].starts_with("Deployment shop/app-operator: its creates are not judged")
        );
        assert!(warnings[2].starts_with(
            "namespace shop: writers of its UpgradeRecord upgrade-gate are not limited"
        ));

        let cells = hold_cells([&tight, &loose]);
        assert_eq!(
            cells[1],
            [
                "shop",
                "app-operator",
                "app-operator",
                "in progress (7.10.0): the Job runs",
                "<none>",
                "judged",
                "judged",
                "verified by dry-run"
            ]
        );
        assert_eq!(cells[2][5], "NOT judged: not bound here");
        assert_eq!(cells[2][7], "ADMITTED: hold NOT in force");
    }
}
