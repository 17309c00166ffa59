//! An InstallPlan the real OLM failed at its update of a CRD that exists
//! already — the step where, with many installs of one package at once,
//! OLM's catalog operator loses the race to update the CRD they share
//! (`upgrade_gate_tests::install_plan`) — and what the tests' watch of
//! InstallPlans does with it.
//!
//! The race itself cannot be had on demand (OLM retries a lost update five
//! times within ~50 ms, and a plan for a minute), so the test fails the plan
//! at that step another way: the bundle (`gate-probe` owning a CRD of the
//! test's own) meets its CRD already created, identical — OLM updates it
//! anyway (`step.go`: create, `AlreadyExists`, update), which proves that
//! installing the CRD beforehand does not spare the update — and a
//! validating admission policy refuses every update of that CRD (as
//! `Invalid`: OLM never fails a plan on `Forbidden`). After OLM's minute of
//! retries the plan is `Failed`, its CSV created (CSVs first), its RBAC
//! not. The watch must leave that failure alone: it is not the race. Then
//! the policy goes, [`install_plan::run_again`] — what the watch does to a
//! plan that lost the race — sets the plan back to `Installing`, and OLM
//! executes the rest of it: the plan `Complete`, the CSV `Succeeded`.
//!
//! Local provider only (the probe's gate-only image). Leaves nothing
//! behind: the namespace, the CRD, the policy and its binding go with
//! guards, also on failure.

use std::path::Path;
use std::time::Duration;

use harness::testing::{TestCluster, delete_on_drop};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use upgrade_gate_tests::gate_probe_catalog::{
    self, Images, channel_until, csv_name, hold_image, owned_crd, write_catalog_owning,
};
use upgrade_gate_tests::install_plan::{self, Seen};
use upgrade_gate_tests::object_history::ObjectHistory;
use upgrade_gate_tests::olm_v0;
use upgrade_gate_tests::wait::{self, Look};

use super::olm_v0_steps::{csv_api, csv_phase, latest};

/// An `opm serve` port no other test uses.
const CATALOG_PORT: u16 = 50141;
/// OLM fails a plan one minute after its first attempt
/// (`--install-plan-retry-timeout`), at its next sync; generous beyond.
const PLAN_FAILS_WITHIN: Duration = Duration::from_secs(300);
/// Generous: OLM installs on a loaded 2-core machine.
const OLM_STEP: Duration = Duration::from_secs(240);

/// The test's cluster-wide objects, deleted when dropped (the binding
/// first).
struct ClusterWide {
    kubeconfig: std::path::PathBuf,
    crd: String,
    policy: String,
    binding: Option<String>,
}

impl Drop for ClusterWide {
    fn drop(&mut self) {
        if let Some(binding) = &self.binding {
            delete_on_drop::<ValidatingAdmissionPolicyBinding>(&self.kubeconfig, binding);
        }
        delete_on_drop::<ValidatingAdmissionPolicy>(&self.kubeconfig, &self.policy);
        delete_on_drop::<CustomResourceDefinition>(&self.kubeconfig, &self.crd);
    }
}

fn typed<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).unwrap_or_else(|error| panic!("building an object: {error}"))
}

/// What a server-side dry-run update of `crd` gets: `Ok` admitted, `Err`
/// the API server's refusal.
async fn dry_run_update(crds: &Api<CustomResourceDefinition>, crd: &str) -> Result<(), String> {
    crds.patch(
        crd,
        &PatchParams::default().dry_run(),
        &Patch::Merge(json!({"metadata": {"annotations": {"upgrade-gate.test/probe": "dry-run"}}})),
    )
    .await
    .map(drop)
    .map_err(|error| error.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_failed_at_its_crd_update_is_left_unless_raced_and_completes_when_run_again() {
    let cluster = TestCluster::from_env();
    let namespace = cluster.namespace("plan-again").await;
    let client = namespace.client();
    let ns = &namespace.name;
    let group = format!("{ns}.upgrade-gate.test");
    let crd = owned_crd(&group);
    let crd_name = format!("probes.{group}");
    let mut guard = ClusterWide {
        kubeconfig: cluster.kubeconfig.clone(),
        crd: crd_name.clone(),
        policy: format!("refuse-{crd_name}"),
        binding: None,
    };

    let gate_image = hold_image();
    let catalog_dir = tempfile::tempdir().unwrap_or_else(|error| panic!("temp dir: {error}"));
    write_catalog_owning(
        catalog_dir.path(),
        Images {
            gate: &gate_image,
            operator: &cluster.image,
        },
        &["0.1.0"],
        Some(&crd),
    );
    let served = cluster
        .serve_catalog(Path::new(catalog_dir.path()), CATALOG_PORT)
        .await;

    // The bundle's CRD, as the bundle has it, before OLM's plan runs.
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    crds.create(&PostParams::default(), &typed(crd.clone()))
        .await
        .unwrap_or_else(|error| panic!("creating CRD {crd_name}: {error}"));
    // Every update of it refused, as Invalid.
    let policy = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": guard.policy},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": ["apiextensions.k8s.io"], "apiVersions": ["v1"],
                "operations": ["UPDATE"], "resources": ["customresourcedefinitions"]
            }]},
            "validations": [{
                "expression": format!("object.metadata.name != '{crd_name}'"),
                "message": "the install_plan test refuses updates of this CRD",
                "reason": "Invalid"
            }]
        }
    });
    Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .create(&PostParams::default(), &typed(policy))
        .await
        .unwrap_or_else(|error| panic!("creating the policy: {error}"));
    let binding_name = format!("{}-binding", guard.policy);
    let binding = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": binding_name},
        "spec": {"policyName": guard.policy, "validationActions": ["Deny"]}
    });
    let bindings = Api::<ValidatingAdmissionPolicyBinding>::all(client.clone());
    bindings
        .create(&PostParams::default(), &typed(binding))
        .await
        .unwrap_or_else(|error| panic!("creating the binding: {error}"));
    guard.binding = Some(binding_name.clone());
    let refusal = wait::until(
        "the policy to refuse an update of the CRD",
        Duration::from_secs(120),
        || async {
            match dry_run_update(&crds, &crd_name).await {
                Ok(()) => Look::NotYet("admitted".to_owned()),
                Err(refusal) => Look::Done(refusal),
            }
        },
    )
    .await;
    assert!(
        refusal.contains("the install_plan test refuses updates of this CRD"),
        "{refusal}"
    );

    let (sender, mut seen) = tokio::sync::mpsc::unbounded_channel::<Seen>();
    let name = ns.clone();
    let _plans = install_plan::Watch::start(&client, ns, move |plan| {
        println!("{name}: {plan}");
        let _test_gone = sender.send(plan);
    });
    let csv = csv_name("0.1.0");
    let csvs = ObjectHistory::record("CSVs", csv_api(&namespace), watcher::Config::default()).await;
    olm_v0::create_catalog_source(&client, ns, gate_probe_catalog::PACKAGE, &served.address).await;
    olm_v0::subscribe(
        &client,
        ns,
        gate_probe_catalog::PACKAGE,
        &channel_until("0.1.0"),
        None,
    )
    .await;

    // OLM fails the plan at the CRD step; the watch leaves it failed.
    let failed = tokio::time::timeout(PLAN_FAILS_WITHIN, seen.recv())
        .await
        .unwrap_or_else(|_| panic!("no InstallPlan failed within {PLAN_FAILS_WITHIN:?}"))
        .unwrap_or_else(|| panic!("the watch of InstallPlans ended"));
    assert_eq!(failed.run_again, None, "{failed}");
    assert_eq!(failed.csvs, std::slice::from_ref(&csv));
    assert!(
        failed
            .message
            .starts_with(&format!("error updating CRD \"{crd_name}\": "))
            && failed
                .message
                .contains("the install_plan test refuses updates of this CRD"),
        "{failed}"
    );
    let plans = install_plan::api(&client, ns);
    let plan = plans
        .get(&failed.plan)
        .await
        .unwrap_or_else(|error| panic!("reading InstallPlan {}: {error}", failed.plan));
    let value = serde_json::to_value(&plan).unwrap_or_default();
    assert_eq!(value["status"]["phase"], "Failed", "{value}");
    let steps = value["status"]["plan"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let step = |kind: &str| {
        steps
            .iter()
            .find(|step| step["resource"]["kind"] == kind)
            .map(|step| step["status"].as_str().unwrap_or_default().to_owned())
    };
    let summary: Vec<String> = steps
        .iter()
        .map(|step| format!("{} {}", step["resource"]["kind"], step["status"]))
        .collect();
    // The CSV `Created` by the attempt that made it, `Present` when a later
    // attempt met it (an attempt whose status OLM could not write).
    assert!(
        matches!(
            step("ClusterServiceVersion").as_deref(),
            Some("Created" | "Present")
        ),
        "CSV applied: {summary:?}"
    );
    assert_eq!(
        (step("CustomResourceDefinition"), step("ServiceAccount")),
        (Some("Unknown".into()), Some("Unknown".into())),
        "CRD and RBAC not applied: {summary:?}"
    );
    let phase = csvs
        .wait_for(&format!("{csv} to exist"), OLM_STEP, |records| {
            latest(records, &csv).map(|csv| csv_phase(csv).0)
        })
        .await;
    assert_ne!(phase, "Succeeded", "{csv} succeeded without its RBAC");

    // The policy gone, the plan run again as the watch would: OLM
    // executes the rest of it.
    bindings
        .delete(&binding_name, &Default::default())
        .await
        .unwrap_or_else(|error| panic!("deleting the binding: {error}"));
    guard.binding = None;
    wait::until(
        "an update of the CRD admitted again",
        Duration::from_secs(120),
        || async {
            match dry_run_update(&crds, &crd_name).await {
                Ok(()) => Look::Done(()),
                Err(refusal) => Look::NotYet(refusal),
            }
        },
    )
    .await;
    install_plan::run_again(&plans, &plan)
        .await
        .unwrap_or_else(|error| panic!("running InstallPlan {} again: {error}", failed.plan));
    wait::until(
        &format!("InstallPlan {} Complete", failed.plan),
        OLM_STEP,
        || async {
            match plans.get(&failed.plan).await {
                Ok(plan) => {
                    let phase = plan.data["status"]["phase"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    if phase == "Complete" {
                        Look::Done(())
                    } else {
                        Look::NotYet(format!("{phase}: {}", plan.data["status"]["message"]))
                    }
                }
                Err(error) => Look::NotYet(error.to_string()),
            }
        },
    )
    .await;
    csvs.wait_for(&format!("{csv} to succeed"), OLM_STEP, |records| {
        latest(records, &csv)
            .filter(|csv| csv_phase(csv).0 == "Succeeded")
            .map(drop)
    })
    .await;
    assert!(
        seen.try_recv().is_err(),
        "the watch saw another failure after the run again"
    );
    println!(
        "{ns}: InstallPlan {} failed at its update of CRD {crd_name}, left failed by the watch; run again, OLM completed it and {csv} succeeded",
        failed.plan
    );
}
