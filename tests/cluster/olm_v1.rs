//! OLM v1 for real: catalogd and operator-controller (the versions
//! `tools/olm-v1` pins, v1.5.1) run beside OLM v0 on the shared cluster
//! (`cluster up --olm-v1`). Our catalog, published to the cluster's
//! registry, is served by catalogd; a ClusterExtension with an installer
//! ServiceAccount holding only the rights derived from the bundle installs
//! 7.9.3 for its own namespace; its operator pod runs; `upgrade-gate hold` (its init container)
//! exits 0 with its one line about OLM v1, and the keeper stays idle.
//!
//! And OLM v1 alone (no OLM v0 API): the harness's second kube-apiserver
//! serving OLM v1's own ClusterExtension CRD (from the tools directory),
//! where `hold`, `status` and the kubectl plugin name OLM v1; with the
//! shipped admission policy bound to one namespace, the plugin verifies by
//! a server-side dry-run that an opted-in extension's Deployment there is
//! held, and says loudly that one in a namespace no binding covers is not.
//!
//! Panics — never skips — without the cluster, OLM v1 or the tools.
//! Creates cluster-scoped objects named after this process (catalogs) or
//! the test's namespace (extension, installer RBAC), deleted by guards; the
//! bundles leave out the App CRD, which every test shares and applies (see
//! `upgrade_gate_tests::olm_v1`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use harness::testing::TestCluster;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{
    ApiResource, DynamicObject, GroupVersionKind, ListParams, LogParams, Patch, PatchParams,
};
use serde_json::{Value, json};
use upgrade_gate::admission::{
    ADMISSION_LABEL, ENFORCE, RECORD_NAME, RELEASE_LABEL, record_resource,
};
use upgrade_gate::locate::{OLM_V1_OWNER_KIND_LABEL, OLM_V1_OWNER_NAME_LABEL, OLM_V1_PROTECTION};
use upgrade_gate::plugin::HOLD_NOT_IN_FORCE_EXIT;
use upgrade_gate_tests::admission_policy::Policy;
use upgrade_gate_tests::apiserver_without_olm::ApiserverWithoutOlm;
use upgrade_gate_tests::gate_process::run_gate;
use upgrade_gate_tests::olm_v1::{
    CatalogGuard, Extension, ExtensionGuard, Installer, OlmV1Cluster, installer_rights,
};
use upgrade_gate_tests::operator_install;
use upgrade_gate_tests::wait::{self, Look};

/// A port for this test's API server, distinct from cluster_gate's.
const PORT: u16 = 6544;
/// The release the extension installs.
const RELEASE: &str = "7.9.3";
/// Our operator's Deployment, container names and pod label (the CSV's).
const DEPLOYMENT: &str = "app-operator";
const GATE_CONTAINER: &str = "upgrade-gate";
const OPERATOR_CONTAINER: &str = "app-operator";
/// What the keeper logs for each verdict it has nowhere to write.
const KEEPER_IDLE: &str = "verdict (not written: no OperatorCondition)";

/// OLM v1's own ClusterExtension CRD, as `just cluster-bins` copied it from
/// operator-controller's module into the tools directory.
fn cluster_extension_crd() -> CustomResourceDefinition {
    let tools = std::env::var("UPGRADE_GATE_TOOLS").unwrap_or_else(|_| {
        panic!("UPGRADE_GATE_TOOLS is not set: export the tools directory (`just tools-dir`; `just test-cluster` does)")
    });
    let path = PathBuf::from(tools)
        .join("olm-v1/crds/standard/olm.operatorframework.io_clusterextensions.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|error| {
        panic!(
            "reading {}: {error}; run `just cluster-bins`",
            path.display()
        )
    });
    serde_yaml::from_str(&text).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

#[tokio::test]
async fn catalogd_serves_our_catalog_from_the_cluster_registry() {
    let olm = OlmV1Cluster::from_env();
    let published = olm.published().await;
    let name = format!("upgrade-gate-served-{}", std::process::id());
    let catalog = CatalogGuard::create(&olm.cluster, &name, &published.catalog).await;
    let served = catalog
        .wait_serving(&olm.cluster.admin_client().await)
        .await;
    let resolved = served["status"]["resolvedSource"]["image"]["ref"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(
        resolved,
        format!(
            "{}@{}",
            published
                .catalog
                .rsplit_once(':')
                .map_or("", |(repository, _)| repository),
            published.catalog_digest
        ),
        "catalogd unpacked the image that was pushed"
    );
    assert_eq!(
        served["status"]["urls"]["base"],
        format!("https://catalogd-service.olmv1-system.svc/catalogs/{name}")
    );
}

/// The log lines of `container` of `pod` (JSON, one event a line; matched
/// as text: an event may carry two `message` fields, as the keeper's do).
async fn log_lines(pods: &Api<Pod>, pod: &str, container: &str) -> Vec<String> {
    let params = LogParams {
        container: Some(container.to_owned()),
        ..LogParams::default()
    };
    let text = pods
        .logs(pod, &params)
        .await
        .unwrap_or_else(|error| panic!("logs of {pod}/{container}: {error}"));
    text.lines().map(str::to_owned).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_7_9_3_installs_through_a_cluster_extension_and_hold_says_olm_v1() {
    let olm = OlmV1Cluster::from_env();
    let turn = olm.one_extension_at_a_time().await;
    let published = olm.published().await;
    let cluster = &olm.cluster;
    let client = cluster.admin_client().await;
    let namespace = cluster.namespace("olm-v1").await;
    let name = namespace.name.clone();

    let catalog = CatalogGuard::create(cluster, &name, &published.catalog).await;
    catalog.wait_serving(&client).await;

    let bundle = published.bundle(RELEASE);
    let rights = installer_rights(std::slice::from_ref(&bundle.csv), &bundle.crds);
    let installer = Installer::create(&namespace, &cluster.kubeconfig, rights).await;
    // The bundles leave the App CRD out (every test's): applied as the
    // other tests apply it.
    operator_install::install_app_crd(&client).await;

    let started = Instant::now();
    let extension = ExtensionGuard::create(
        &client,
        &cluster.kubeconfig,
        &Extension {
            name: &name,
            namespace: &namespace.name,
            service_account: &installer.service_account,
            catalog: &catalog.name,
            version: Some(RELEASE),
            channel: None,
        },
    )
    .await;
    let installed = extension.wait_installed(&client).await;
    eprintln!(
        "ClusterExtension {name}: Installed {:.1}s after its creation",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(
        (
            &installed["status"]["install"]["bundle"]["name"],
            &installed["status"]["install"]["bundle"]["version"]
        ),
        (
            &serde_json::json!(format!("upgrade-gate.v{RELEASE}")),
            &serde_json::json!(RELEASE)
        )
    );

    // Applied by OLM v1, for this namespace alone.
    let deployment = namespace
        .api::<Deployment>()
        .get(DEPLOYMENT)
        .await
        .unwrap_or_else(|error| panic!("Deployment {DEPLOYMENT}: {error}"));
    let labels = deployment.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        (
            labels.get(OLM_V1_OWNER_KIND_LABEL).map(String::as_str),
            labels.get(OLM_V1_OWNER_NAME_LABEL).map(String::as_str)
        ),
        (Some("ClusterExtension"), Some(name.as_str()))
    );
    let template_annotations = deployment
        .spec
        .as_ref()
        .and_then(|spec| spec.template.metadata.as_ref())
        .and_then(|metadata| metadata.annotations.clone())
        .unwrap_or_default();
    assert_eq!(
        template_annotations.get("olm.targetNamespaces"),
        Some(&namespace.name),
        "installed for its own namespace"
    );

    let pods = namespace.api::<Pod>();
    let selector = format!("app.kubernetes.io/name={DEPLOYMENT}");
    let pod = wait::until(
        "the operator pod to be Ready",
        Duration::from_secs(120),
        || async {
            let listed = pods.list(&ListParams::default().labels(&selector)).await;
            match listed {
                Ok(list) => match list
                    .items
                    .iter()
                    .find(|pod| harness::api::pod_is_ready(pod))
                {
                    Some(pod) => Look::Done(pod.clone()),
                    None => Look::NotYet(format!(
                        "{:?}",
                        list.items.iter().map(|pod| &pod.status).collect::<Vec<_>>()
                    )),
                },
                Err(error) => Look::NotYet(error.to_string()),
            }
        },
    )
    .await;
    let pod_name = pod.metadata.name.clone().unwrap_or_default();

    let status = pod.status.clone().unwrap_or_default();
    let gate = status
        .init_container_statuses
        .iter()
        .flatten()
        .find(|container| container.name == GATE_CONTAINER)
        .unwrap_or_else(|| panic!("pod {pod_name} has no init container {GATE_CONTAINER}"));
    let exit = gate
        .state
        .as_ref()
        .and_then(|state| state.terminated.as_ref())
        .map(|terminated| terminated.exit_code);
    assert_eq!(
        (exit, gate.restart_count),
        (Some(0), 0),
        "hold exited 0 at its first run"
    );
    let said = log_lines(&pods, &pod_name, GATE_CONTAINER).await;
    let about_v1: Vec<&String> = said.iter().filter(|line| line.contains("OLM v1")).collect();
    assert_eq!(
        about_v1.len(),
        1,
        "one line about OLM v1:\n{}",
        said.join("\n")
    );
    assert!(
        about_v1[0].contains(&format!("ClusterExtension {name}"))
            && about_v1[0].contains(OLM_V1_PROTECTION),
        "the line names the extension and what holds an upgrade back: {}",
        about_v1[0]
    );

    // The keeper has no OperatorCondition to write to: it says why (its
    // Deployment is the extension's, as `hold` said), logs each verdict,
    // and none exists.
    let said = wait::until(
        "the keeper to log a verdict it does not write",
        Duration::from_secs(60),
        || async {
            let said = log_lines(&pods, &pod_name, OPERATOR_CONTAINER).await;
            if said.iter().any(|line| line.contains(KEEPER_IDLE)) {
                Look::Done(said)
            } else {
                Look::NotYet(said.join("\n"))
            }
        },
    )
    .await;
    let why_idle: Vec<&String> = said
        .iter()
        .filter(|line| line.contains("no OperatorCondition guards this operator"))
        .collect();
    assert!(
        why_idle.len() == 1
            && why_idle[0].contains(&format!("belongs to OLM v1's ClusterExtension {name}")),
        "the keeper says once that its Deployment is the extension's:\n{}",
        said.join("\n")
    );
    assert!(
        !said.iter().any(|line| line.contains("name is unknown")),
        "no warning of an unknown OperatorCondition name:\n{}",
        said.join("\n")
    );
    let conditions: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &namespace.name,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("operators.coreos.com", "v2", "OperatorCondition"),
            "operatorconditions",
        ),
    );
    let listed = conditions
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|error| panic!("listing OperatorConditions: {error}"));
    assert!(listed.items.is_empty(), "no OperatorCondition: {listed:?}");
    let pod = pods
        .get(&pod_name)
        .await
        .unwrap_or_else(|error| panic!("pod {pod_name}: {error}"));
    let restarts: i32 = pod
        .status
        .and_then(|status| status.container_statuses)
        .unwrap_or_default()
        .iter()
        .map(|container| container.restart_count)
        .sum();
    assert_eq!(restarts, 0, "the operator never restarted");
    drop(extension);
    drop(installer);
    drop(catalog);
    drop(turn);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_olm_v1_only_hold_exits_0_and_says_what_protects_the_upgrade() {
    let cluster = TestCluster::from_env();
    let v1 = ApiserverWithoutOlm::start_on(&cluster, PORT).await;
    let crds: Api<CustomResourceDefinition> = Api::all(v1.admin_client().await);
    let crd = cluster_extension_crd();
    let name = crd.metadata.name.clone().unwrap_or_default();
    crds.patch(
        &name,
        &PatchParams::apply("cluster-olm-v1-test").force(),
        &Patch::Apply(&crd),
    )
    .await
    .unwrap_or_else(|error| panic!("applying {name}: {error}"));
    wait::until(
        "the ClusterExtension CRD to be Established",
        Duration::from_secs(60),
        || async {
            match crds.get_opt(&name).await {
                Ok(Some(crd)) if harness::api::is_established(&crd) => Look::Done(()),
                other => Look::NotYet(format!("{other:?}")),
            }
        },
    )
    .await;

    let hold = run_gate(
        &v1.kubeconfig,
        &[
            "hold",
            "--name",
            "shop-operator.v1.2.0",
            "--namespace",
            "default",
            "--timeout",
            "30s",
        ],
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(hold.code, Some(0), "hold under OLM v1:\n{}", hold.text());
    let said: Vec<&String> = hold
        .output
        .iter()
        .filter(|line| line.contains("OLM v1 runs here"))
        .collect();
    assert_eq!(said.len(), 1, "one line names OLM v1:\n{}", hold.text());
    assert!(
        said[0].contains("OLM v1 has no OperatorConditions") && said[0].contains("unready"),
        "the line says what protects the upgrade instead: {}",
        said[0]
    );

    let status = run_gate(
        &v1.kubeconfig,
        &[
            "status",
            "--name",
            "shop-operator.v1.2.0",
            "--namespace",
            "default",
            "-o",
            "json",
        ],
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(
        status.code,
        Some(0),
        "status under OLM v1:\n{}",
        status.text()
    );
    let report = status
        .output
        .iter()
        .skip_while(|line| !line.starts_with('{'))
        .cloned()
        .collect::<Vec<_>>()
        .join("\n");
    let report: serde_json::Value = serde_json::from_str(&report)
        .unwrap_or_else(|error| panic!("status -o json ({error}):\n{}", status.text()));
    assert_eq!(
        (&report["olm"], &report["served"]),
        (&serde_json::json!("v1"), &serde_json::json!(false))
    );

    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("temp dir: {error}"));
    let plugin = dir.path().join("kubectl-upgrade_gate");
    std::os::unix::fs::symlink(upgrade_gate_tests::binary("upgrade-gate"), &plugin)
        .unwrap_or_else(|error| panic!("linking the plugin: {error}"));
    let listed = std::process::Command::new(&plugin)
        .args(["status", "-A", "--kubeconfig"])
        .arg(&v1.kubeconfig)
        .output()
        .unwrap_or_else(|error| panic!("running the plugin: {error}"));
    let stderr = String::from_utf8_lossy(&listed.stderr);
    assert_eq!(listed.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("OLM v1 runs here"), "{stderr}");

    plugin_verifies_each_hold_by_dry_run(&v1, &plugin).await;
    drop(v1);
}

/// Under OLM v1 alone, with the shipped admission manifests and their
/// bindings limited to the namespace `shop`: two ClusterExtensions, `shop`
/// and `loose`, each with an opted-in Deployment whose record says 7.10.0's
/// upgrade runs (objects only: this API server runs no controller). The
/// plugin's dry-run of a move is refused by the policy in `shop` ("verified
/// by dry-run") and admitted in `loose`, which it says loudly; `loose`'s
/// Deployment runs its image by tag, which it warns of, `shop`'s by digest.
async fn plugin_verifies_each_hold_by_dry_run(v1: &ApiserverWithoutOlm, plugin: &Path) {
    const TAGGED_IMAGE: &str = "registry.invalid/app-operator:7.10.0";
    let client = v1.admin_client().await;
    let policy = Policy::apply(&client, &v1.kubeconfig, "plugin-status", &["shop"]).await;
    let apply = PatchParams::apply("cluster-olm-v1-test").force();
    let extensions = Api::<DynamicObject>::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("olm.operatorframework.io", "v1", "ClusterExtension"),
            "clusterextensions",
        ),
    );
    for namespace in ["shop", "loose"] {
        Api::<Namespace>::all(client.clone())
            .patch(
                namespace,
                &apply,
                &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": namespace}})),
            )
            .await
            .unwrap_or_else(|error| panic!("applying the namespace in {namespace}: {error}"));
        extensions
            .patch(
                namespace,
                &apply,
                &Patch::Apply(json!({"apiVersion": "olm.operatorframework.io/v1",
                    "kind": "ClusterExtension", "metadata": {"name": namespace},
                    "spec": {"namespace": namespace, "serviceAccount": {"name": "installer"},
                        "source": {"sourceType": "Catalog", "catalog": {"packageName": "upgrade-gate"}}}})),
            )
            .await
            .unwrap_or_else(|error| panic!("applying the ClusterExtension in {namespace}: {error}"));
        // The record before the Deployment: its create is then judged
        // (and admitted: the recorded release).
        Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &record_resource())
            .patch(
                RECORD_NAME,
                &apply,
                &Patch::Apply(json!({"apiVersion": "upgrade-gate.dev/v1alpha1",
                    "kind": "UpgradeRecord", "metadata": {"name": RECORD_NAME},
                    "spec": {"operators": {DEPLOYMENT: {"release": "7.10.0", "state": "InProgress",
                        "message": "the database upgrade Job runs"}}}})),
            )
            .await
            .unwrap_or_else(|error| panic!("applying the UpgradeRecord in {namespace}: {error}"));
        let labels = json!({OLM_V1_OWNER_KIND_LABEL: "ClusterExtension",
            OLM_V1_OWNER_NAME_LABEL: namespace, ADMISSION_LABEL: ENFORCE, RELEASE_LABEL: "7.10.0"});
        let image = match namespace {
            "shop" => format!("{TAGGED_IMAGE}@sha256:{}", "ab".repeat(32)),
            _ => TAGGED_IMAGE.to_owned(),
        };
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": DEPLOYMENT, "labels": labels},
            "spec": {"selector": {"matchLabels": {"app": DEPLOYMENT}},
                "template": {"metadata": {"labels": {"app": DEPLOYMENT}},
                    "spec": {"containers": [{"name": OPERATOR_CONTAINER, "image": image}]}}}});
        // The record's CRD was created moments ago on this API server:
        // until the policy's parameter informer has synced it, the policy
        // refuses (fail closed, "not yet synced"); that answer alone is
        // waited out.
        wait::until(
            &format!("the Deployment in {namespace} applied"),
            Duration::from_secs(60),
            || {
                let deployments = Api::<Deployment>::namespaced(client.clone(), namespace);
                let apply = apply.clone();
                let deployment = deployment.clone();
                async move {
                    match deployments
                        .patch(DEPLOYMENT, &apply, &Patch::Apply(deployment))
                        .await
                    {
                        Ok(_) => Look::Done(()),
                        Err(error) if error.to_string().contains("not yet synced") => {
                            Look::NotYet(error.to_string())
                        }
                        Err(error) => panic!("applying the Deployment in {namespace}: {error}"),
                    }
                }
            },
        )
        .await;
    }
    let status = |args: &'static [&'static str]| async move {
        tokio::process::Command::new(plugin)
            .args(args)
            .arg("--kubeconfig")
            .arg(&v1.kubeconfig)
            .output()
            .await
            .unwrap_or_else(|error| panic!("running the plugin: {error}"))
    };
    let hold = |listed: &Value, extension: &str| -> Value {
        listed["clusterExtensions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|row| row["name"] == extension)
            .map_or(Value::Null, |row| row["holds"][0].clone())
    };
    // Until the API server's policy informers have the bindings.
    let (listed, stderr, code) = wait::until(
        "the plugin to verify shop's hold by dry-run and find loose's admitted",
        Duration::from_secs(60),
        || async {
            let ran = status(&["status", "-A", "-o", "json"]).await;
            let stderr = String::from_utf8_lossy(&ran.stderr).into_owned();
            let listed: Value = match serde_json::from_slice(&ran.stdout) {
                Ok(listed) => listed,
                Err(error) => return Look::NotYet(format!("{error}: {stderr}")),
            };
            if hold(&listed, "shop")["dryRun"]["result"] == "verified"
                && hold(&listed, "loose")["dryRun"]["result"] == "admitted"
            {
                Look::Done((listed, stderr, ran.status.code()))
            } else {
                Look::NotYet(format!("{listed}\n{stderr}"))
            }
        },
    )
    .await;
    let (shop, loose) = (hold(&listed, "shop"), hold(&listed, "loose"));
    assert_eq!(
        (
            &shop["upgrade"]["state"],
            &shop["policy"]["update"]["verdict"],
            &shop["policy"]["update"]["binding"],
            &shop["policy"]["guard"]["verdict"],
        ),
        (
            &json!("inProgress"),
            &json!("judged"),
            &json!("plugin-status"),
            &json!("judged"),
        ),
        "{shop:#}"
    );
    assert!(
        shop["dryRun"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("ValidatingAdmissionPolicy 'upgrade-gate.dev'")),
        "{shop:#}"
    );
    assert_eq!(
        (
            &loose["policy"]["update"]["verdict"],
            &loose["policy"]["guard"]["verdict"],
            &loose["dryRun"]["tried"],
        ),
        (
            &json!("noBindingMatches"),
            &json!("noBindingMatches"),
            &json!("7.10.0-upgrade-gate-dry-run"),
        ),
        "{loose:#}"
    );
    assert!(
        stderr.contains(
            "the hold is NOT in force for operator app-operator (Deployment loose/app-operator)"
        ) && stderr
            .contains("namespace loose: writers of its UpgradeRecord upgrade-gate are not limited")
            && stderr.contains(&format!(
                "Deployment loose/app-operator: the image {TAGGED_IMAGE} (container {OPERATOR_CONTAINER}) is pinned by tag (\"7.10.0\"), not digest, under the admission policy: the policy compares images as text"
            ))
            && !stderr.contains("shop/app-operator"),
        "{stderr}"
    );
    assert_eq!(
        (
            &shop.get("tagOnlyImages"),
            &loose["tagOnlyImages"][0]["image"]
        ),
        (&None, &json!(TAGGED_IMAGE)),
        "{shop:#}\n{loose:#}"
    );
    // A hold proven not in force fails the command.
    assert_eq!(
        code,
        Some(i32::from(HOLD_NOT_IN_FORCE_EXIT)),
        "the plugin's exit: {stderr}"
    );
    let table = status(&["status", "-A"]).await;
    println!(
        "kubectl upgrade-gate status -A:\n{}{}",
        String::from_utf8_lossy(&table.stdout),
        String::from_utf8_lossy(&table.stderr)
    );
    drop(policy);
}
