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

use super::message::summary;
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
pub enum UpgradeColumn {
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

impl UpgradeColumn {
    /// The UPGRADE cell.
    pub fn cell(&self) -> String {
        match self {
            UpgradeColumn::Complete { release } => format!("complete ({release})"),
            UpgradeColumn::InProgress {
                release,
                message: Some(message),
            } => format!("in progress ({release}): {}", summary(message)),
            UpgradeColumn::InProgress {
                release,
                message: None,
            } => format!("in progress ({release})"),
            UpgradeColumn::NotRecorded {
                last_completed: None,
            } => "not recorded".to_owned(),
            UpgradeColumn::NotRecorded {
                last_completed: Some(release),
            } => format!("not recorded (last complete: {release})"),
            UpgradeColumn::NotOptedIn => "not opted in".to_owned(),
            UpgradeColumn::Unreadable { why } => format!("unknown: {}", summary(why)),
        }
    }

    /// Whether the policy refuses to move the Deployment to another
    /// release (the record does not say its release completed).
    pub fn holds(&self) -> bool {
        matches!(
            self,
            UpgradeColumn::InProgress { .. } | UpgradeColumn::NotRecorded { .. }
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
    pub upgrade: UpgradeColumn,
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
pub fn upgrade_of(spec: Option<&Value>, operator: &str, release: Option<&str>) -> UpgradeColumn {
    let Some(entry) = entry_of(spec, operator) else {
        return UpgradeColumn::NotRecorded {
            last_completed: None,
        };
    };
    let complete = entry.state == COMPLETE;
    if Some(entry.release.as_str()) == release {
        return if complete {
            UpgradeColumn::Complete {
                release: entry.release,
            }
        } else {
            UpgradeColumn::InProgress {
                release: entry.release,
                message: entry.message.filter(|message| !message.is_empty()),
            }
        };
    }
    // Recorded by another release (the one before, or a rolled-back one).
    UpgradeColumn::NotRecorded {
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
            UpgradeColumn::Unreadable {
                why: why.to_owned(),
            },
            None,
        ),
    };
    let dry_run = match (&upgrade, no_dry_run) {
        (UpgradeColumn::Complete { .. }, _) => DryRun::NotNeeded,
        (UpgradeColumn::Unreadable { .. }, _) => DryRun::NotTried {
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
        if let UpgradeColumn::Unreadable { why } = &hold.upgrade {
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
mod tests;
