//! docs/adopt.md's "With operator-sdk or kubebuilder" proven with real OLM:
//! the kubebuilder-scaffolded `widget-operator` whose bundles
//! tools/adopt-kubebuilder.sh made with the gate's kustomize component
//! (`make bundle` for 0.1.0 and 0.2.0; `UPGRADE_GATE_KUBEBUILDER_BUNDLES`
//! names them, and the cluster has each release's image loaded). The
//! operator is the adopter's own code, nothing of ours
//! (tools/adopt-kubebuilder/): per Widget a migration Job of its release
//! (created suspended while the Widget's spec.holdMigration says so), then
//! status.version = its release. The component's `upgrade-gate keep`
//! sidecar opens the gate from that field; no one runs `upgrade-gate
//! release`.
//!
//! - 0.1.0 installs: its init container (`upgrade-gate hold`, the gate-only
//!   image, the name the component wrote) confirms the name through the
//!   pod's owners and closes its OperatorCondition with the Role the
//!   component bound; a Widget whose migration is held keeps it closed,
//!   keep's message naming the Widget;
//! - 0.2.0 waits `Pending` (`OperatorConditionNotUpgradeable`) while
//!   0.1.0's migration Job is suspended;
//! - the Job resumed, the operator writes status.version 0.1.0, keep opens
//!   the gate and OLM installs 0.2.0, whose keep keeps its own gate closed
//!   while 0.2.0's migration is held and opens it once it ran.
//!
//! And `make deploy` of the same project where OLM v0 runs (OpenShift, or
//! kind with OLM installed): the manifests the component changed, applied
//! without OLM, start the manager; `hold` sees through the pod's owners
//! that OLM did not install the Deployment and does nothing, in one line
//! saying why, and the keep sidecar runs idle, saying why in one line too
//! (`UPGRADE_GATE_KUBEBUILDER_PROJECT`: the project).
//!
//! Creates namespaced objects in its own namespace, an `opm serve` process
//! (stopped by its guard) and a temp dir with the catalog; `make deploy`'s
//! ClusterRoles and ClusterRoleBindings, named after the namespace and
//! deleted by a guard.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use harness::testing::{TestCluster, delete_on_drop};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, DynamicObject, ListParams, LogParams, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use kube::runtime::watcher;
use serde::Deserialize;
use serde_json::{Value, json};
use upgrade_gate_tests::bundle_catalog::{self, BundledReleases, channel_until};
use upgrade_gate_tests::kubectl::Kubectl;
use upgrade_gate_tests::object_history::ObjectHistory;
use upgrade_gate_tests::olm_v0;
use upgrade_gate_tests::wait::{self, Look};

use super::olm_v0_steps::{
    csv_api, csv_phase, held_by_the_gate, latest, subscribe_package, switch_package_channel,
};

/// The scaffold's package (tools/adopt-kubebuilder.sh).
const PACKAGE: &str = "widget-operator";
const VERSIONS: [&str; 2] = ["0.1.0", "0.2.0"];
/// An `opm serve` port no other test uses.
const CATALOG_PORT: u16 = 50094;
const OLM_STEP: Duration = Duration::from_secs(240);
/// The component's `upgrade-gate keep` sidecar (manager_patch.yaml).
const KEEP_CONTAINER: &str = "upgrade-gate-keep";

fn csv_name(version: &str) -> String {
    bundle_catalog::csv_name(PACKAGE, version)
}

/// The bundles the tool wrote (`<dir>/<version>/`).
fn bundles_dir() -> PathBuf {
    bundle_catalog::bundles_from_env(
        "UPGRADE_GATE_KUBEBUILDER_BUNDLES",
        "`just test-cluster` runs tools/adopt-kubebuilder.sh --image, loads the image and exports it",
    )
}

/// The file-based catalog of the two releases, inline, for `opm serve`.
fn write_catalog(dir: &Path, bundles: &Path) {
    BundledReleases {
        package: PACKAGE,
        bundles,
        versions: &VERSIONS,
    }
    .write_catalog(dir);
}

/// The Widget the test migrates, and the Jobs its operator makes for it.
const WIDGET: &str = "shop";

/// The migration Job the widget-operator's reconciler creates for
/// [`WIDGET`] at `release` (tools/adopt-kubebuilder/widget_controller.go).
fn migration_job(release: &str) -> String {
    format!("{WIDGET}-migrate-{}", release.replace('.', "-"))
}

/// The Job `name` once it exists, asserting it is suspended (the Widget's
/// spec.holdMigration) and has not succeeded.
async fn held_job(jobs: &Api<Job>, name: &str) {
    let job = wait::until(
        &format!("the operator to create the migration Job {name}"),
        OLM_STEP,
        || async { jobs.get_opt(name).await.ok().flatten() },
    )
    .await;
    let spec = job.spec.unwrap_or_default();
    let succeeded = job.status.and_then(|status| status.succeeded);
    assert!(
        spec.suspend == Some(true) && succeeded.is_none(),
        "the Job {name} waits suspended (suspend {:?}, succeeded {succeeded:?})",
        spec.suspend
    );
}

/// Lets the migration Job `name` run: as an admin resuming a suspended Job.
async fn resume(jobs: &Api<Job>, name: &str) {
    jobs.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"suspend": false}})),
    )
    .await
    .unwrap_or_else(|error| panic!("resuming the Job {name}: {error}"));
}

/// The Widget's status once its operator wrote `release` into
/// status.version.
async fn migrated(widgets: &Api<DynamicObject>, release: &str) -> Value {
    wait::until(
        &format!("the Widget {WIDGET} to show its data migrated to {release}"),
        OLM_STEP,
        || async {
            let widget = match widgets.get(WIDGET).await {
                Ok(widget) => widget,
                Err(error) => return Look::NotYet(error.to_string()),
            };
            let status = &widget.data["status"];
            if status["version"] == release {
                Look::Done(status.clone())
            } else {
                Look::NotYet(format!("status {status}"))
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubebuilder_component_keeps_the_next_release_pending_while_the_widget_migrates() {
    let started = Instant::now();
    let cluster = TestCluster::from_env();
    let bundles = bundles_dir();
    let catalog_dir = tempfile::tempdir().unwrap_or_else(|error| panic!("temp dir: {error}"));
    write_catalog(catalog_dir.path(), &bundles);
    let served = cluster
        .serve_catalog(catalog_dir.path(), CATALOG_PORT)
        .await;
    let namespace = cluster.namespace("kb-adopt").await;
    let [v1, v2] = VERSIONS.map(csv_name);
    let csvs = ObjectHistory::record("CSVs", csv_api(&namespace), watcher::Config::default()).await;
    let conditions: Api<DynamicObject> = Api::namespaced_with(
        namespace.client(),
        &namespace.name,
        &ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("operators.coreos.com", "v2", "OperatorCondition"),
            "operatorconditions",
        ),
    );
    let widgets: Api<DynamicObject> = Api::namespaced_with(
        namespace.client(),
        &namespace.name,
        &ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("demo.example.com", "v1alpha1", "Widget"),
            "widgets",
        ),
    );
    let jobs = namespace.api::<Job>();
    let widget_key = format!("{}/{WIDGET}", namespace.name);

    let _plans = subscribe_package(
        &namespace,
        &served.address,
        PACKAGE,
        &channel_until(VERSIONS[0]),
    )
    .await;
    csvs.wait_for(&format!("{v1} to succeed"), OLM_STEP, |records| {
        latest(records, &v1)
            .filter(|csv| csv_phase(csv).0 == "Succeeded")
            .map(drop)
    })
    .await;
    let pods = namespace.api::<Pod>();
    let operator_pods = pods
        .list(&ListParams::default().labels("control-plane=controller-manager"))
        .await
        .unwrap_or_else(|error| panic!("listing the operator's pods: {error}"));
    let operator_pod = operator_pods
        .items
        .first()
        .and_then(|pod| pod.metadata.name.clone())
        .unwrap_or_else(|| panic!("{v1} runs no operator pod"));
    let hold_log = container_log(&pods, &operator_pod, "upgrade-gate").await;
    assert!(
        hold_log.contains("the pod's Deployment belongs to the configured CSV")
            && hold_log.contains(&v1),
        "hold confirmed the CSV name through the pod's owners (POD_NAME, the component's rights):\n{hold_log}"
    );

    // A Widget whose migration to 0.1.0 waits (its Job created suspended):
    // 0.1.0's keep closes the gate, naming it.
    let widget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "demo.example.com/v1alpha1",
        "kind": "Widget",
        "metadata": {"name": WIDGET},
        "spec": {"holdMigration": true}
    }))
    .unwrap_or_else(|error| panic!("the Widget: {error}"));
    widgets
        .create(&PostParams::default(), &widget)
        .await
        .unwrap_or_else(|error| panic!("creating the Widget: {error}"));
    let (_, message) = olm_v0::confirmed_upgradeable(
        &conditions,
        &v1,
        "closed for the Widget",
        OLM_STEP,
        |state, message| state == "False" && message.contains(&widget_key),
    )
    .await;
    eprintln!("{v1}'s keep: {message}");
    held_job(&jobs, &migration_job(VERSIONS[0])).await;

    // 0.2.0 is offered while 0.1.0's migration still waits: OLM keeps it
    // Pending on 0.1.0's gate.
    switch_package_channel(&namespace, PACKAGE, &channel_until(VERSIONS[1])).await;
    let message = csvs
        .wait_for(&format!("{v2} held by {v1}'s gate"), OLM_STEP, |records| {
            held_by_the_gate(records, &v2, &v1)
        })
        .await;
    eprintln!("{v2} waits: {message}");
    held_job(&jobs, &migration_job(VERSIONS[0])).await;

    // The migration finishes: the operator says so on the Widget, keep
    // opens 0.1.0's gate and OLM installs 0.2.0.
    resume(&jobs, &migration_job(VERSIONS[0])).await;
    let status = migrated(&widgets, VERSIONS[0]).await;
    assert!(
        status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|condition| condition["type"] == "Migrated" && condition["status"] == "True"),
        "the operator set Migrated=True with status.version: {status}"
    );
    csvs.wait_for(
        &format!("{v2} to succeed once the migration completed"),
        OLM_STEP,
        |records| {
            latest(records, &v2)
                .filter(|csv| csv_phase(csv).0 == "Succeeded")
                .map(drop)
        },
    )
    .await;

    // 0.2.0's own migration waits in turn: its keep keeps its gate closed
    // (the Widget still shows 0.1.0), and opens it once the Job ran.
    let (_, message) = olm_v0::confirmed_upgradeable(
        &conditions,
        &v2,
        "closed for the Widget",
        OLM_STEP,
        |state, message| {
            state == "False" && message.contains(&widget_key) && message.contains(VERSIONS[1])
        },
    )
    .await;
    eprintln!("{v2}'s keep: {message}");
    held_job(&jobs, &migration_job(VERSIONS[1])).await;
    resume(&jobs, &migration_job(VERSIONS[1])).await;
    migrated(&widgets, VERSIONS[1]).await;
    let (_, message) =
        olm_v0::confirmed_upgradeable(&conditions, &v2, "open", OLM_STEP, |state, _| {
            state == "True"
        })
        .await;
    eprintln!(
        "{v2}'s keep opened: {message} (test {:.1} s)",
        started.elapsed().as_secs_f64()
    );
    drop(namespace);
    drop(served);
}

/// The scaffolded project tools/adopt-kubebuilder.sh made (its Makefile's
/// kustomize in `bin/`, the component in `config/upgrade-gate/`, its image
/// and the gate's pinned to the images the cluster has).
fn project_dir() -> PathBuf {
    match std::env::var("UPGRADE_GATE_KUBEBUILDER_PROJECT") {
        Ok(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => panic!(
            "UPGRADE_GATE_KUBEBUILDER_PROJECT is not set: `just test-cluster` runs tools/adopt-kubebuilder.sh --image, loads the image and exports it"
        ),
    }
}

/// What `make deploy` applies (`kustomize build config/default`, with the
/// Makefile's kustomize), moved into `namespace` and its objects named
/// after it (its random part) by an overlay, so that runs and the OLM test on
/// the same cluster do not meet. Left out: the Namespace (the test's
/// exists) and the CRD, which the OLM test's CSVs own on this cluster (the
/// gate does not need it; the manager starts and is ready without it).
fn make_deploy_manifests(project: &Path, namespace: &str) -> Vec<Value> {
    // Beside config/default (kustomize takes no absolute path to a base),
    // removed when this returns.
    let overlay = tempfile::tempdir_in(project.join("config"))
        .unwrap_or_else(|error| panic!("temp dir in the project's config/: {error}"));
    // The namespace's random part: the scaffold's Service name is 50
    // characters of the 63 a Service may have.
    let prefix = namespace.rsplit('-').next().unwrap_or(namespace);
    let kustomization =
        format!("namespace: {namespace}\nnamePrefix: {prefix}-\nresources:\n- ../default\n");
    std::fs::write(overlay.path().join("kustomization.yaml"), kustomization)
        .unwrap_or_else(|error| panic!("writing the overlay: {error}"));
    let kustomize = project.join("bin/kustomize");
    let output = Command::new(&kustomize)
        .arg("build")
        .arg(overlay.path())
        .output()
        .unwrap_or_else(|error| panic!("running {}: {error}", kustomize.display()));
    assert!(
        output.status.success(),
        "kustomize build: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8_lossy(&output.stdout);
    serde_yaml::Deserializer::from_str(&text)
        .map(|document| {
            Value::deserialize(document)
                .unwrap_or_else(|error| panic!("kustomize's output: {error}"))
        })
        .filter(|object| {
            !matches!(
                object["kind"].as_str(),
                Some("Namespace" | "CustomResourceDefinition")
            )
        })
        .collect()
}

/// Deletes `make deploy`'s cluster-wide objects when dropped.
struct ClusterWide {
    kubeconfig: PathBuf,
    objects: Vec<(String, String)>,
}

impl Drop for ClusterWide {
    fn drop(&mut self) {
        for (kind, name) in &self.objects {
            match kind.as_str() {
                "ClusterRole" => delete_on_drop::<ClusterRole>(&self.kubeconfig, name),
                "ClusterRoleBinding" => {
                    delete_on_drop::<ClusterRoleBinding>(&self.kubeconfig, name)
                }
                other => eprintln!("left {other} {name}: no clean-up for its kind"),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn make_deploy_where_olm_runs_starts_the_manager_and_says_why_the_gate_does_nothing() {
    let started = Instant::now();
    let cluster = TestCluster::from_env();
    let project = project_dir();
    let namespace = cluster.namespace("kb-deploy").await;
    let objects = make_deploy_manifests(&project, &namespace.name);
    let cluster_wide = ClusterWide {
        kubeconfig: cluster.kubeconfig.clone(),
        objects: objects
            .iter()
            .filter(|object| object["metadata"]["namespace"].is_null())
            .map(|object| {
                let field = |key: &str| object[key].as_str().unwrap_or_default().to_owned();
                (
                    field("kind"),
                    object["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                )
            })
            .collect(),
    };
    let deployment = objects
        .iter()
        .find(|object| object["kind"] == "Deployment")
        .unwrap_or_else(|| panic!("make deploy's manifests have no Deployment"));
    let deployment_name = deployment["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let gate = &deployment["spec"]["template"]["spec"]["initContainers"][0];
    assert_eq!(
        gate["name"], "upgrade-gate",
        "the component's init container is first"
    );
    let csv_name = gate["env"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|entry| entry["name"] == "UPGRADE_GATE_CSV_NAME")
        .and_then(|entry| entry["value"].as_str())
        .unwrap_or_else(|| panic!("the init container has no UPGRADE_GATE_CSV_NAME: {gate}"))
        .to_owned();

    let applied = Kubectl::new(&cluster.kubeconfig).run(
        &["apply"],
        Some(&json!({"apiVersion": "v1", "kind": "List", "items": objects})),
    );
    assert!(
        applied.accepted,
        "kubectl apply of make deploy's manifests: {}",
        applied.output
    );

    let pods = namespace.api::<Pod>();
    let selector = deployment["spec"]["selector"]["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(key, value)| format!("{key}={}", value.as_str().unwrap_or_default()))
        .collect::<Vec<_>>()
        .join(",");
    let pod = wait::until(
        &format!("the manager of Deployment {deployment_name} to start (ready), after its gate"),
        Duration::from_secs(120),
        || async {
            let list = match pods.list(&ListParams::default().labels(&selector)).await {
                Ok(list) => list,
                Err(error) => return Look::NotYet(error.to_string()),
            };
            let Some(pod) = list.items.into_iter().next() else {
                return Look::NotYet("no pod yet".into());
            };
            let status = pod.status.clone().unwrap_or_default();
            let gate = status
                .init_container_statuses
                .iter()
                .flatten()
                .find(|container| container.name == "upgrade-gate")
                .and_then(|container| container.state.as_ref()?.terminated.as_ref())
                .map(|terminated| terminated.exit_code);
            let ready = status
                .conditions
                .iter()
                .flatten()
                .any(|condition| condition.type_ == "Ready" && condition.status == "True");
            match (gate, ready) {
                (Some(0), true) => Look::Done(pod),
                (Some(code), _) if code != 0 => {
                    panic!("hold exited {code}: make deploy's pod cannot start ({status:?})")
                }
                _ => Look::NotYet(format!(
                    "init containers {:?}, conditions {:?}",
                    status.init_container_statuses, status.conditions
                )),
            }
        },
    )
    .await;
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let log = pods
        .logs(
            &pod_name,
            &LogParams {
                container: Some("upgrade-gate".into()),
                ..LogParams::default()
            },
        )
        .await
        .unwrap_or_else(|error| panic!("hold's log: {error}"));
    let why: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("was not installed by OLM"))
        .collect();
    assert_eq!(
        why.len(),
        1,
        "one line says why the gate does nothing:\n{log}"
    );
    for part in [
        format!("Deployment {deployment_name} was not installed by OLM"),
        format!("its CSV name {csv_name} (UPGRADE_GATE_CSV_NAME"),
        "the gate does nothing here".to_owned(),
    ] {
        assert!(
            why[0].contains(&part),
            "{part:?} in hold's line: {}",
            why[0]
        );
    }
    eprintln!(
        "make deploy where OLM runs: manager ready after {:.1} s, hold said: {}",
        started.elapsed().as_secs_f64(),
        why[0]
    );
    // The keep sidecar runs beside the manager, idle: it leads, finds no
    // OperatorCondition for a Deployment OLM did not install, and says so.
    let idle = wait::until(
        "the keep sidecar to say it writes nothing outside OLM",
        Duration::from_secs(60),
        || async {
            let log = match pods
                .logs(
                    &pod_name,
                    &LogParams {
                        container: Some(KEEP_CONTAINER.into()),
                        ..LogParams::default()
                    },
                )
                .await
            {
                Ok(log) => log,
                Err(error) => return Look::NotYet(error.to_string()),
            };
            match log.lines().find(|line| {
                line.contains("no OperatorCondition guards this operator")
                    && line.contains(&format!(
                        "Deployment {deployment_name} was not installed by OLM"
                    ))
            }) {
                Some(line) => Look::Done(line.to_owned()),
                None => Look::NotYet(log),
            }
        },
    )
    .await;
    let pod = pods
        .get(&pod_name)
        .await
        .unwrap_or_else(|error| panic!("the manager's pod: {error}"));
    let status = pod.status.unwrap_or_default();
    let keep = status
        .container_statuses
        .iter()
        .flatten()
        .find(|container| container.name == KEEP_CONTAINER)
        .unwrap_or_else(|| panic!("the pod has no {KEEP_CONTAINER} container: {status:?}"));
    assert!(
        keep.ready && keep.restart_count == 0,
        "the keep sidecar runs, never restarted: {keep:?}"
    );
    assert!(
        status
            .conditions
            .iter()
            .flatten()
            .any(|condition| condition.type_ == "Ready" && condition.status == "True"),
        "the pod is Ready with keep idle beside the manager: {:?}",
        status.conditions
    );
    eprintln!("keep said: {idle}");

    // docs/adopt.md step 3's Job, as the operator would create it from its
    // own env (the component's): migrate, record, then release.
    let manager = deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|container| container["name"] == "manager")
        .unwrap_or_else(|| panic!("no manager container: {deployment}"));
    let env = |name: &str| {
        manager["env"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|entry| entry["name"] == name)
            .and_then(|entry| entry["value"].as_str())
            .unwrap_or_else(|| panic!("the manager has no {name}: {manager}"))
            .to_owned()
    };
    let (operator, release) = (env("UPGRADE_GATE_DEPLOYMENT"), env("UPGRADE_GATE_RELEASE"));
    assert_eq!(
        operator, deployment_name,
        "the manager is told its prefixed Deployment name"
    );
    let job = migration_then_release_job(
        deployment["spec"]["template"]["spec"]["serviceAccountName"]
            .as_str()
            .unwrap_or_default(),
        &cluster.image,
        gate["image"].as_str().unwrap_or_default(),
        &operator,
        &release,
    );
    let created =
        Kubectl::new(&cluster.kubeconfig).run(&["-n", &namespace.name, "create"], Some(&job));
    assert!(created.accepted, "creating the Job: {}", created.output);
    let job_started = Instant::now();
    let job_pod = job_succeeded(&pods).await;
    let release_log = container_log(&pods, &job_pod, "release").await;
    assert!(
        release_log.contains(&format!(
            "Deployment {deployment_name} was not installed by OLM"
        )) && release_log.contains("nothing to gate"),
        "the release found no gate through the operator's Deployment:\n{release_log}"
    );
    let state: Api<ConfigMap> = namespace.api();
    let recorded = state
        .get("upgrade-gate-state")
        .await
        .unwrap_or_else(|error| panic!("the record's ConfigMap: {error}"));
    assert_eq!(
        recorded
            .data
            .unwrap_or_default()
            .get(&format!("{operator}.completed")),
        Some(&release),
        "the Job recorded {release} complete under the operator's name"
    );
    eprintln!(
        "the migration-then-release Job succeeded in {:.1} s (test {:.1} s)",
        job_started.elapsed().as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    drop(namespace);
    drop(cluster_wide);
}

/// docs/adopt.md step 3's Job: the migration as the first init container
/// (played by the sample image's shell), `upgrade-gate record --complete`
/// after it, and `upgrade-gate release --wait` as the one container, which
/// runs only once both exited 0. The gate is found through the operator's
/// Deployment (`UPGRADE_GATE_DEPLOYMENT`, no name): its CSV under OLM,
/// nothing to gate where OLM did not install it. Under the operator's
/// ServiceAccount, whose rights are the component's.
fn migration_then_release_job(
    service_account: &str,
    migrate_image: &str,
    gate_image: &str,
    operator: &str,
    release: &str,
) -> Value {
    let gate_env = json!([
        {"name": "UPGRADE_GATE_DEPLOYMENT", "value": operator},
        {"name": "UPGRADE_GATE_RELEASE", "value": release}
    ]);
    let restricted = json!({
        "allowPrivilegeEscalation": false,
        "readOnlyRootFilesystem": true,
        "runAsNonRoot": true,
        "capabilities": {"drop": ["ALL"]}
    });
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "migrate"},
        "spec": {
            "backoffLimit": 0,
            "template": {"spec": {
                "serviceAccountName": service_account,
                "restartPolicy": "Never",
                "initContainers": [
                    {"name": "migrate", "image": migrate_image,
                     "command": ["sh", "-c", "echo the data is at the new release"],
                     "securityContext": restricted},
                    {"name": "record", "image": gate_image,
                     "args": ["record", "--complete"],
                     "env": gate_env, "securityContext": restricted}
                ],
                "containers": [
                    {"name": "release", "image": gate_image,
                     "args": ["release", "--wait", "--message", format!("the data is at {release}")],
                     "env": gate_env, "securityContext": restricted}
                ]
            }}
        }
    })
}

/// The name of the pod of [`migration_then_release_job`], once it succeeded.
async fn job_succeeded(pods: &Api<Pod>) -> String {
    wait::until(
        "the migration Job to succeed",
        Duration::from_secs(90),
        || async {
            let list = match pods
                .list(&ListParams::default().labels("job-name=migrate"))
                .await
            {
                Ok(list) => list,
                Err(error) => return Look::NotYet(error.to_string()),
            };
            let Some(pod) = list.items.into_iter().next() else {
                return Look::NotYet("no pod yet".into());
            };
            let status = pod.status.clone().unwrap_or_default();
            match status.phase.as_deref() {
                Some("Succeeded") => Look::Done(pod.metadata.name.clone().unwrap_or_default()),
                Some("Failed") => panic!("the Job's pod failed: {status:?}"),
                _ => Look::NotYet(format!("{status:?}")),
            }
        },
    )
    .await
}

/// The log of container `container` of pod `pod`.
async fn container_log(pods: &Api<Pod>, pod: &str, container: &str) -> String {
    let params = LogParams {
        container: Some(container.into()),
        ..LogParams::default()
    };
    pods.logs(pod, &params)
        .await
        .unwrap_or_else(|error| panic!("the log of {pod}/{container}: {error}"))
}
