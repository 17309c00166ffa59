//! OLM v0's InstallPlans in a test's namespace, watched while the test
//! installs through OLM: a plan OLM failed only because its catalog
//! operator lost the race to update a CRD that every install of the package
//! shares is run again, as an admin would, and said so; a plan failed for
//! any other cause is left failed — OLM's verdict, which the test then meets.
//!
//! Why (OLM v0.46.0, `pkg/controller/operators/catalog/`): a plan's steps
//! run CSVs first, then CRDs, then the rest (`OrderSteps` in
//! operator-framework/api). A CRD that exists already is always updated
//! (`step.go`, `NewCRDV1Step`: create, `AlreadyExists`, then get, validate
//! and `Update` — with the plan's "installed alongside" annotation, so an
//! identical CRD installed beforehand changes nothing), retried on a
//! conflict only by client-go's `retry.DefaultRetry` (5 tries ~10 ms apart).
//! Every install of the package in another namespace updates the same CRD,
//! and OLM's adoption controller patches a label back on it after each
//! update, so with many installs at once a plan's update can lose every
//! try. The plan is retried on later syncs, but only until
//! `--install-plan-retry-timeout` (1 minute) after its first attempt
//! (`transitionInstallPlanState`, `operator.go`); on a loaded node its
//! syncs come about a minute apart, so two lost syncs fail it for good:
//! `Failed` is terminal (`syncInstallPlans`). Its CSV exists (created
//! first), its RBAC does not, and the CSV stays `Pending`
//! (`RequirementsNotMet`) for ever. Deleting the plan makes OLM resolve
//! nothing new — the Subscription already names that CSV, which exists
//! (`step_resolver.go`: up to date; `subscription/state.go` clears the
//! plan's reference only while the Subscription is `UpgradePending`). What
//! makes OLM execute the plan again is the phase it retries in:
//! [`run_again`] sets `Installing` back (and clears `startTime`, so OLM's
//! one-minute window starts anew, as for a new plan); the steps it already
//! applied are skipped (`ExecutePlan`: `Created`/`Present`), the rest run.
//!
//! Owns: which failure is that race ([`lost_crd_race`], [`decide`]: pure,
//! table-tested) and the re-run ([`run_again`], [`Watch`]: at most
//! [`MAX_RUNS_AGAIN`] per plan). Must not touch: a plan failed for another
//! cause, the Subscription, any CSV, OLM itself.

use std::collections::HashMap;
use std::fmt;

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

/// How often one plan is run again before its failure is left as it is: a
/// plan that lost the race this often has a cause the tests should see.
pub const MAX_RUNS_AGAIN: u32 = 3;

/// The condition reason OLM gives a plan a step of which failed
/// (`InstallPlanReasonComponentFailed`).
const COMPONENT_FAILED: &str = "InstallComponentFailed";

/// The namespace's InstallPlans.
pub fn api(client: &Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        namespace,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("operators.coreos.com", "v1alpha1", "InstallPlan"),
            "installplans",
        ),
    )
}

/// The CRD whose update lost a conflict, when `message` is exactly OLM's
/// error for that and nothing else: `error updating CRD "<crd>":` (step.go)
/// followed by the API server's conflict on that same CRD (its
/// `resourceVersion` precondition failed: another writer changed it between
/// OLM's read and its update).
pub fn lost_crd_race(message: &str) -> Option<&str> {
    let rest = message.strip_prefix("error updating CRD \"")?;
    let (crd, rest) = rest.split_once("\": ")?;
    let conflict = format!(
        "Operation cannot be fulfilled on customresourcedefinitions.apiextensions.k8s.io \"{crd}\": the object has been modified; please apply your changes to the latest version and try again"
    );
    (!crd.is_empty() && rest == conflict).then_some(crd)
}

/// Why OLM failed a plan, from its status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Only its update of `crd` lost a conflict ([`lost_crd_race`]).
    LostCrdRace { crd: String },
    /// Anything else (OLM's message as given).
    Other { message: String },
}

/// Why OLM failed `plan`; `None` unless its phase is `Failed`. The race
/// only when the `Installed` condition says a component failed and both
/// it and `status.message` carry exactly that error.
pub fn failure(plan: &Value) -> Option<Failure> {
    let status = &plan["status"];
    if status["phase"] != "Failed" {
        return None;
    }
    let message = status["message"].as_str().unwrap_or_default();
    let installed = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|condition| condition["type"] == "Installed");
    let raced = installed.and_then(|condition| {
        let crd = lost_crd_race(condition["message"].as_str()?)?;
        (condition["status"] == "False"
            && condition["reason"] == COMPONENT_FAILED
            && lost_crd_race(message) == Some(crd))
        .then(|| crd.to_owned())
    });
    Some(match raced {
        Some(crd) => Failure::LostCrdRace { crd },
        None => Failure::Other {
            message: match (message, installed) {
                ("", Some(condition)) => {
                    condition["message"].as_str().unwrap_or_default().to_owned()
                }
                _ => message.to_owned(),
            },
        },
    })
}

/// What to do with one version of a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Not failed: nothing.
    Nothing,
    /// Failed only by the race, run again fewer than [`MAX_RUNS_AGAIN`]
    /// times so far: run it again.
    RunAgain { crd: String },
    /// Failed for another cause, or by the race once too often: OLM's
    /// verdict stands.
    Leave { message: String },
}

/// What to do with `plan`, run again `runs_so_far` times already.
pub fn decide(plan: &Value, runs_so_far: u32) -> Decision {
    match failure(plan) {
        None => Decision::Nothing,
        Some(Failure::LostCrdRace { crd }) if runs_so_far < MAX_RUNS_AGAIN => {
            Decision::RunAgain { crd }
        }
        Some(Failure::LostCrdRace { .. }) => Decision::Leave {
            message: format!(
                "{} (the race lost again after {runs_so_far} runs again)",
                plan["status"]["message"].as_str().unwrap_or_default()
            ),
        },
        Some(Failure::Other { message }) => Decision::Leave { message },
    }
}

/// Sets failed `plan` back to `Installing` for OLM to execute it again,
/// on the version read (its `resourceVersion` a precondition: a plan that
/// changed since is left alone, the error says so).
pub async fn run_again(api: &Api<DynamicObject>, plan: &DynamicObject) -> kube::Result<()> {
    api.patch_status(
        &plan.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({
            "metadata": {"resourceVersion": plan.resource_version()},
            "status": {"phase": "Installing", "message": "", "startTime": null}
        })),
    )
    .await
    .map(drop)
}

/// What the watch saw and did, once per failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub plan: String,
    /// The CSVs the plan installs (`spec.clusterServiceVersionNames`).
    pub csvs: Vec<String>,
    /// OLM's message.
    pub message: String,
    /// `Some(n)`: it failed only by the race and was run again, the n-th
    /// time; `None`: left failed.
    pub run_again: Option<u32>,
}

impl fmt::Display for Seen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "OLM failed InstallPlan {} ({}): {}",
            self.plan,
            self.csvs.join(", "),
            self.message
        )?;
        match self.run_again {
            Some(run) => write!(
                f,
                " — only its update of a CRD every install of the package shares lost a race with another writer, so the test set it back to Installing for OLM to execute again (run again {run} of at most {MAX_RUNS_AGAIN})"
            ),
            None => write!(f, " — left failed"),
        }
    }
}

/// The watch of a namespace's InstallPlans; stops on drop.
#[must_use = "the watch stops when dropped"]
pub struct Watch {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Watch {
    /// Watches `namespace`'s InstallPlans until dropped: each failed one is
    /// [`decide`]d, run again when it lost the CRD race, and reported once
    /// per failure to `report` (which logs it: a fact of the run).
    pub fn start(
        client: &Client,
        namespace: &str,
        report: impl Fn(Seen) + Send + Sync + 'static,
    ) -> Self {
        let api = api(client, namespace);
        let namespace = namespace.to_owned();
        let task = tokio::spawn(async move {
            let mut runs: HashMap<String, u32> = HashMap::new();
            let mut reported: HashMap<String, String> = HashMap::new();
            let mut stream = watcher::watcher(api.clone(), watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(event) = stream.next().await {
                let plan = match event {
                    Ok(plan) => plan,
                    Err(error) => {
                        eprintln!(
                            "{namespace}: watching InstallPlans: {error} (the watch retries)"
                        );
                        continue;
                    }
                };
                let uid = plan.uid().unwrap_or_else(|| plan.name_any());
                // One report per failure: a failed version seen again (a
                // relist) is the same failure.
                let version = plan.resource_version().unwrap_or_default();
                if reported.get(&uid) == Some(&version) {
                    continue;
                }
                let value = serde_json::to_value(&plan).unwrap_or(Value::Null);
                let so_far = runs.get(&uid).copied().unwrap_or(0);
                let (message, run_again) = match decide(&value, so_far) {
                    Decision::Nothing => continue,
                    Decision::Leave { message } => (message, None),
                    Decision::RunAgain { .. } => match run_again(&api, &plan).await {
                        Ok(()) => {
                            runs.insert(uid.clone(), so_far + 1);
                            let message = value["status"]["message"].as_str().unwrap_or_default();
                            (message.to_owned(), Some(so_far + 1))
                        }
                        Err(error) => {
                            // Changed since it was read: its next version
                            // is decided on its own.
                            eprintln!(
                                "{namespace}: running InstallPlan {} again: {error}",
                                plan.name_any()
                            );
                            continue;
                        }
                    },
                };
                reported.insert(uid, version);
                report(Seen {
                    plan: plan.name_any(),
                    csvs: value["spec"]["clusterServiceVersionNames"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|name| name.as_str().map(str::to_owned))
                        .collect(),
                    message,
                    run_again,
                });
            }
        });
        Self { task }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CRD: &str = "apps.upgrade-gate.dev";

    /// OLM's message for the race, as the catalog operator logged it
    /// (namespace pg-restart-5481-qr75d, InstallPlan install-nq8dd, a
    /// `just test` run of 2026-12-06).
    fn raced(crd: &str) -> String {
        format!(
            "error updating CRD \"{crd}\": Operation cannot be fulfilled on customresourcedefinitions.apiextensions.k8s.io \"{crd}\": the object has been modified; please apply your changes to the latest version and try again"
        )
    }

    fn plan(phase: &str, reason: &str, condition_message: &str, message: &str) -> Value {
        json!({
            "metadata": {"name": "install-nq8dd", "uid": "u1", "resourceVersion": "7"},
            "spec": {"clusterServiceVersionNames": ["upgrade-gate.v7.10.1"], "approval": "Automatic", "approved": true},
            "status": {
                "phase": phase,
                "message": message,
                "conditions": [{
                    "type": "Installed", "status": "False", "reason": reason,
                    "message": condition_message
                }],
                "plan": [
                    {"resolving": "upgrade-gate.v7.10.1", "status": "Created",
                     "resource": {"kind": "ClusterServiceVersion", "name": "upgrade-gate.v7.10.1"}},
                    {"resolving": "upgrade-gate.v7.10.1", "status": "Unknown",
                     "resource": {"kind": "CustomResourceDefinition", "name": CRD}}
                ]
            }
        })
    }

    fn failed(message: &str) -> Value {
        plan("Failed", COMPONENT_FAILED, message, message)
    }

    #[test]
    fn only_a_conflict_on_the_crd_it_names_is_the_race() {
        assert_eq!(lost_crd_race(&raced(CRD)), Some(CRD));
        let table = [
            // Another error updating the CRD: a validating admission
            // policy's refusal, the data-loss check, a webhook's 409.
            format!(
                "error updating CRD \"{CRD}\": customresourcedefinitions.apiextensions.k8s.io \"{CRD}\" is invalid: : ValidatingAdmissionPolicy 'p' with binding 'b' denied request: held"
            ),
            format!("risk of data loss updating \"{CRD}\": new CRD removes version v1alpha1"),
            format!(
                "error updating CRD \"{CRD}\": admission webhook \"w\" denied the request: Operation cannot be fulfilled on customresourcedefinitions.apiextensions.k8s.io \"{CRD}\": the object has been modified; please apply your changes to the latest version and try again"
            ),
            // A conflict on another CRD than the one named, or on another kind.
            raced(CRD).replacen(
                &format!("customresourcedefinitions.apiextensions.k8s.io \"{CRD}\""),
                "customresourcedefinitions.apiextensions.k8s.io \"other.example.com\"",
                1,
            ),
            raced(CRD).replace(
                "customresourcedefinitions.apiextensions.k8s.io",
                "installplans.operators.coreos.com",
            ),
            // Something after the conflict, an empty name, a conflict alone.
            format!("{}; and more", raced(CRD)),
            raced(""),
            format!(
                "Operation cannot be fulfilled on customresourcedefinitions.apiextensions.k8s.io \"{CRD}\": the object has been modified; please apply your changes to the latest version and try again"
            ),
            String::new(),
        ];
        for message in table {
            assert_eq!(lost_crd_race(&message), None, "{message}");
        }
    }

    #[test]
    fn a_failed_plan_is_the_race_only_when_its_status_says_exactly_that() {
        let race = Some(Failure::LostCrdRace { crd: CRD.into() });
        assert_eq!(failure(&failed(&raced(CRD))), race);
        let other = |message: &str| {
            Some(Failure::Other {
                message: message.into(),
            })
        };
        let table = [
            // Not failed: nothing to judge, whatever the message.
            (
                plan("Installing", COMPONENT_FAILED, &raced(CRD), &raced(CRD)),
                None,
            ),
            (plan("Complete", "", "", ""), None),
            // Failed another way.
            (
                failed("error creating csv upgrade-gate.v7.10.1: forbidden"),
                other("error creating csv upgrade-gate.v7.10.1: forbidden"),
            ),
            // The condition and the message disagree, or another reason.
            (
                plan("Failed", COMPONENT_FAILED, &raced(CRD), "something else"),
                other("something else"),
            ),
            (
                plan("Failed", COMPONENT_FAILED, "something else", &raced(CRD)),
                other(&raced(CRD)),
            ),
            (
                plan(
                    "Failed",
                    COMPONENT_FAILED,
                    &raced("other.example.com"),
                    &raced(CRD),
                ),
                other(&raced(CRD)),
            ),
            (
                plan("Failed", "InstallCheckFailed", &raced(CRD), &raced(CRD)),
                other(&raced(CRD)),
            ),
            // No message: the condition's.
            (
                plan("Failed", "InstallCheckFailed", "no service account", ""),
                other("no service account"),
            ),
        ];
        for (plan, expected) in table {
            assert_eq!(failure(&plan), expected, "{plan}");
        }
        let mut unmet = failed(&raced(CRD));
        unmet["status"]["conditions"][0]["status"] = json!("True");
        assert_eq!(failure(&unmet), other(&raced(CRD)));
        let mut bare = failed(&raced(CRD));
        bare["status"]["conditions"] = json!([]);
        assert_eq!(failure(&bare), other(&raced(CRD)));
    }

    #[test]
    fn the_race_is_run_again_a_few_times_and_anything_else_left() {
        let race = failed(&raced(CRD));
        for runs in 0..MAX_RUNS_AGAIN {
            assert_eq!(decide(&race, runs), Decision::RunAgain { crd: CRD.into() });
        }
        assert!(matches!(
            decide(&race, MAX_RUNS_AGAIN),
            Decision::Leave { message } if message.starts_with("error updating CRD") && message.ends_with("(the race lost again after 3 runs again)")
        ));
        assert_eq!(
            decide(&failed("install timeout"), 0),
            Decision::Leave {
                message: "install timeout".into()
            }
        );
        assert_eq!(
            decide(&plan("Installing", "", "", ""), 0),
            Decision::Nothing
        );
    }

    #[test]
    fn what_was_seen_reads_as_what_happened() {
        let mut seen = Seen {
            plan: "install-nq8dd".into(),
            csvs: vec!["upgrade-gate.v7.10.1".into()],
            message: raced(CRD),
            run_again: Some(1),
        };
        let text = seen.to_string();
        assert!(text.starts_with(
            "OLM failed InstallPlan install-nq8dd (upgrade-gate.v7.10.1): error updating CRD"
        ));
        assert!(text.ends_with("(run again 1 of at most 3)"), "{text}");
        seen.run_again = None;
        assert!(seen.to_string().ends_with(" — left failed"));
    }
}
