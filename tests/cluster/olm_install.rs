//! Installing release 7.9.3 through the real OLM on the local cluster, from
//! `catalog-local/` (inline bundles) served by `opm serve`: Subscription to
//! channel `7.9.x` → CSV `Succeeded` with its gate confirmed → an App from
//! the CSV's `alm-examples` Ready against the cluster's PostgreSQL →
//! `kubectl describe operatorcondition` tells a person the gate is open.
//!
//! The checks on the CSV, the gate and the App are `tools/e2e-kind/assert.sh`,
//! the script the kind workflow runs, so both environments assert the same.
//! Needs the shared test cluster with our image loaded (`just test-cluster`);
//! panics without it. Creates a namespace, a database and a PersistentVolume
//! of its own, removed by guards.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use harness::testing::{HOW_TO_START, ServedCatalog, TestCluster, TestNamespace};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use upgrade_gate_tests::backup_volume::BackupVolume;
use upgrade_gate_tests::cluster_database::TestDatabase;
use upgrade_gate_tests::wait;

const RELEASE: &str = "7.9.3";
const CSV: &str = "upgrade-gate.v7.9.3";
/// Distinct from the ports other tests serve catalogs on.
const CATALOG_PORT: u16 = 50071;

fn repository_root() -> PathBuf {
    upgrade_gate_tests::repository_root()
}

fn tools_bin() -> PathBuf {
    let tools = std::env::var_os("UPGRADE_GATE_TOOLS").unwrap_or_else(|| {
        panic!("UPGRADE_GATE_TOOLS is not set (`just tools-dir`): {HOW_TO_START}")
    });
    Path::new(&tools).join("bin")
}

fn olm_api(
    client: &Client,
    namespace: &str,
    version: &str,
    kind: &str,
    plural: &str,
) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("operators.coreos.com", version, kind);
    Api::namespaced_with(
        client.clone(),
        namespace,
        &ApiResource::from_gvk_with_plural(&gvk, plural),
    )
}

fn object(value: Value) -> DynamicObject {
    serde_json::from_value(value).unwrap_or_else(|error| panic!("building an object: {error}"))
}

/// `tools/e2e-kind/assert.sh ARGS...` against this cluster, with its kubectl.
fn shared_assertion(cluster: &TestCluster, args: &[&str]) {
    let script = repository_root().join("tools/e2e-kind/assert.sh");
    let path = format!(
        "{}:{}",
        tools_bin().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let status = Command::new(&script)
        .args(args)
        .env("KUBECONFIG", &cluster.kubeconfig)
        .env("PATH", path)
        .status()
        .unwrap_or_else(|error| panic!("running {}: {error}", script.display()));
    assert!(
        status.success(),
        "assert.sh {} failed (its output is above)",
        args.join(" ")
    );
}

fn describe_operator_condition(cluster: &TestCluster, namespace: &TestNamespace) -> String {
    let output = Command::new(tools_bin().join("kubectl"))
        .env("KUBECONFIG", &cluster.kubeconfig)
        .args(["describe", "operatorcondition", CSV, "-n", &namespace.name])
        .output()
        .unwrap_or_else(|error| panic!("running kubectl describe: {error}"));
    assert!(
        output.status.success(),
        "kubectl describe operatorcondition failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The guards of one OLM install, dropped namespace first.
struct Installed {
    namespace: TestNamespace,
    app_name: String,
    database: TestDatabase,
    _volume: BackupVolume,
    _catalog: ServedCatalog,
}

/// Serves catalog-local/ on `catalog_port`, subscribes a fresh namespace to
/// `7.9.x`, checks the install and creates the App of alm-examples, Ready
/// at 7.9.3 against a database of its own.
async fn install_7_9_3_with_app(
    cluster: &TestCluster,
    prefix: &str,
    catalog_port: u16,
) -> Installed {
    let local_image = format!("localhost/upgrade-gate:{}", app::RELEASE);
    assert_eq!(
        cluster.image, local_image,
        "catalog-local/'s bundles run {local_image}; load that image (`just cluster-load`)"
    );
    let namespace = cluster.namespace(prefix).await;
    let client = namespace.client();
    let catalog = cluster
        .serve_catalog(&repository_root().join("catalog-local"), catalog_port)
        .await;

    let catalog_sources = olm_api(
        &client,
        &namespace.name,
        "v1alpha1",
        "CatalogSource",
        "catalogsources",
    );
    catalog_sources
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": "operators.coreos.com/v1alpha1",
                "kind": "CatalogSource",
                "metadata": {"name": "upgrade-gate"},
                "spec": {"sourceType": "grpc", "address": catalog.address, "displayName": "upgrade-gate (catalog-local)"}
            })),
        )
        .await
        .unwrap_or_else(|error| panic!("creating the CatalogSource: {error}"));
    wait::until(
        "the CatalogSource to be READY",
        Duration::from_secs(60),
        || {
            let api = catalog_sources.clone();
            async move {
                let source = api.get("upgrade-gate").await.ok()?;
                (source.data["status"]["connectionState"]["lastObservedState"] == "READY")
                    .then_some(())
            }
        },
    )
    .await;

    olm_api(
        &client,
        &namespace.name,
        "v1",
        "OperatorGroup",
        "operatorgroups",
    )
    .create(
        &PostParams::default(),
        &object(json!({
            "apiVersion": "operators.coreos.com/v1",
            "kind": "OperatorGroup",
            "metadata": {"name": "upgrade-gate"},
            "spec": {"targetNamespaces": [namespace.name]}
        })),
    )
    .await
    .unwrap_or_else(|error| panic!("creating the OperatorGroup: {error}"));
    let subscribed = Instant::now();
    olm_api(
        &client,
        &namespace.name,
        "v1alpha1",
        "Subscription",
        "subscriptions",
    )
    .create(
        &PostParams::default(),
        &object(json!({
            "apiVersion": "operators.coreos.com/v1alpha1",
            "kind": "Subscription",
            "metadata": {"name": "upgrade-gate"},
            "spec": {
                "name": "upgrade-gate", "channel": "7.9.x",
                "source": "upgrade-gate", "sourceNamespace": namespace.name,
                "installPlanApproval": "Automatic"
            }
        })),
    )
    .await
    .unwrap_or_else(|error| panic!("creating the Subscription: {error}"));

    let csvs = olm_api(
        &client,
        &namespace.name,
        "v1alpha1",
        "ClusterServiceVersion",
        "clusterserviceversions",
    );
    let csv = wait::until(
        "CSV upgrade-gate.v7.9.3 to succeed",
        Duration::from_secs(300),
        || {
            let api = csvs.clone();
            async move {
                let csv = api.get(CSV).await.ok()?;
                (csv.data["status"]["phase"] == "Succeeded").then_some(csv)
            }
        },
    )
    .await;
    println!(
        "OLM install: Subscription created -> CSV {CSV} Succeeded in {:.1} s (init container included)",
        subscribed.elapsed().as_secs_f64()
    );
    shared_assertion(cluster, &["installed", &namespace.name, RELEASE]);

    // The App of alm-examples, with its Secret and backup claim.
    let examples = csv
        .metadata
        .annotations
        .as_ref()
        .and_then(|annotations| annotations.get("alm-examples"))
        .unwrap_or_else(|| panic!("CSV {CSV} has no alm-examples"));
    let examples: Vec<Value> = serde_json::from_str(examples)
        .unwrap_or_else(|error| panic!("alm-examples is not a JSON list: {error}"));
    let app = examples
        .into_iter()
        .find(|example| example["kind"] == "App")
        .unwrap_or_else(|| panic!("alm-examples has no App"));
    let app_name = app["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let secret_name = app["spec"]["database"]["secretRef"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let claim = app["spec"]["upgrade"]["backupVolumeClaim"]
        .as_str()
        .unwrap_or_default()
        .to_owned();

    let database =
        TestDatabase::create(&cluster.database_url, &namespace.name.replace('-', "_")).await;
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": secret_name},
        "stringData": {"url": database.url}
    }))
    .unwrap_or_else(|error| panic!("Secret: {error}"));
    namespace
        .api::<Secret>()
        .create(&PostParams::default(), &secret)
        .await
        .unwrap_or_else(|error| panic!("creating Secret {secret_name}: {error}"));
    let _volume = BackupVolume::create(
        client.clone(),
        cluster.kubeconfig.clone(),
        &namespace.name,
        &claim,
    )
    .await;
    let apps = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        &namespace.name,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("upgrade-gate.dev", "v1alpha1", "App"),
            "apps",
        ),
    );
    apps.create(&PostParams::default(), &object(app))
        .await
        .unwrap_or_else(|error| panic!("creating the App of alm-examples: {error}"));
    shared_assertion(cluster, &["app-ready", &namespace.name, &app_name, RELEASE]);
    Installed {
        namespace,
        app_name,
        database,
        _volume,
        _catalog: catalog,
    }
}

#[tokio::test]
async fn release_7_9_3_installs_through_olm_with_its_gate_confirmed() {
    let cluster = TestCluster::from_env();
    let installed = install_7_9_3_with_app(&cluster, "olm-install", CATALOG_PORT).await;
    let namespace = &installed.namespace;
    shared_assertion(&cluster, &["installed", &namespace.name, RELEASE]);

    let described = describe_operator_condition(&cluster, namespace);
    println!("{described}");
    let fields: Vec<(String, String)> = described
        .lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(key, value)| (key.trim().to_owned(), value.trim().to_owned()))
        .collect();
    let message = format!(
        "all 1 App(s) are at release {RELEASE}'s database schema; the operator may be upgraded"
    );
    for (key, value) in [
        ("Name", CSV),
        ("Kind", "OperatorCondition"),
        ("Type", "Upgradeable"),
        ("Status", "True"),
        ("Reason", "UpgradeComplete"),
        ("Message", message.as_str()),
    ] {
        assert!(
            fields.iter().any(|(k, v)| k == key && v == value),
            "kubectl describe operatorcondition lacks \"{key}: {value}\":\n{described}"
        );
    }
    assert!(
        described.contains("app-operator"),
        "the description names neither the Deployment nor the ServiceAccount:\n{described}"
    );
    drop(installed);
}

/// Rows `app-db-upgrade seed` adds before the channel switch, so the
/// upgrades move real data.
const SEED_ROWS: &str = "200000";

/// What the upgrades must keep: row counts and the sum of execution ids.
async fn data_fingerprint(url: &str) -> Vec<i64> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|error| panic!("connecting to the test database: {error}"));
    let connection = tokio::spawn(connection);
    let row = client
        .query_one(
            "SELECT (SELECT count(*) FROM connections), (SELECT count(*) FROM integrations), \
             (SELECT count(*) FROM executions), (SELECT coalesce(sum(id), 0)::bigint FROM executions)",
            &[],
        )
        .await
        .unwrap_or_else(|error| panic!("reading the data fingerprint: {error}"));
    drop(client);
    let _finished = connection.await;
    (0..4).map(|column| row.get::<_, i64>(column)).collect()
}

/// The feature request on the real OLM: 7.9.3 on `7.9.x` with data, then the
/// Subscription switched to `7.10.x`. 7.10.1 must wait (Pending,
/// OperatorConditionNotUpgradeable) while 7.10.0's database upgrade Job runs;
/// then the chain completes with the data intact. The assertions are
/// `assert.sh blocked` and `completed` (the kind workflow runs `chain`,
/// both in one), with the upgrade lock held across the switch.
#[tokio::test]
async fn switching_to_7_10_x_upgrades_through_7_10_0_before_7_10_1() {
    let cluster = TestCluster::from_env();
    let installed = install_7_9_3_with_app(&cluster, "olm-chain", CATALOG_PORT + 1).await;
    let namespace = &installed.namespace;

    installed
        .database
        .app_db_upgrade(&["seed", "--rows", SEED_ROWS]);
    let before = data_fingerprint(&installed.database.url).await;

    // The upgrade lock, held across the switch: 7.10.0's Job then waits
    // (observably `active`) until it is released, so "7.10.0's upgrade is
    // still running when 7.10.1's CSV appears" is certain instead of a race
    // against the machine's speed; the Job's own lock wait (120 s) is the
    // deadline.
    let lock = installed.database.hold_upgrade_lock().await;
    let switched = Instant::now();
    let subscriptions = olm_api(
        &namespace.client(),
        &namespace.name,
        "v1alpha1",
        "Subscription",
        "subscriptions",
    );
    subscriptions
        .patch(
            "upgrade-gate",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"channel": "7.10.x"}})),
        )
        .await
        .unwrap_or_else(|error| panic!("switching the Subscription to 7.10.x: {error}"));
    shared_assertion(
        &cluster,
        &[
            "blocked",
            &namespace.name,
            &installed.app_name,
            "7.10.0",
            "7.10.1",
        ],
    );
    lock.release().await;
    shared_assertion(
        &cluster,
        &[
            "completed",
            &namespace.name,
            &installed.app_name,
            "7.9.3",
            "7.10.1",
        ],
    );
    println!(
        "chain 7.9.3 -> 7.10.0 -> 7.10.1 with {SEED_ROWS} seeded rows: {:.1} s from the channel switch",
        switched.elapsed().as_secs_f64()
    );
    assert_eq!(
        data_fingerprint(&installed.database.url).await,
        before,
        "the data changed across the upgrades (connections, integrations, executions, sum of execution ids)"
    );
    drop(installed);
}
