//! `app-operator` installed as a real pod in a test's namespace, from the
//! checked-in `manifests/`: the App CRD (server-side apply, shared by all
//! tests), the least-privilege rules of `manifests/rbac.yaml` (the
//! ClusterRole's rules as a Role of the namespace: the operator watches only
//! its own namespace there), the Deployment of `manifests/deployment.yaml`
//! with its `upgrade-gate hold` init container, and — standing in for OLM's
//! CSV — an OperatorCondition whose `spec.deployments` names that
//! Deployment, labelled `olm.managed: "true"` so that OLM's status copy runs
//! (see olm-facts.md), with `OPERATOR_CONDITION_NAME` set on both
//! containers as a CSV would.
//!
//! Creates only objects in the test's namespace, plus the CRD.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{EnvVar, Namespace, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kube::{Api, Client, ResourceExt};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::wait::{self, Look};

/// The OperatorCondition's name: what OLM would call the CSV.
pub const CONDITION_NAME: &str = "upgrade-gate.v7.10.1";
/// The operator's Deployment and ServiceAccount (from `manifests/`).
pub const OPERATOR: &str = "app-operator";
/// Selects the operator's pods.
pub const OPERATOR_SELECTOR: &str = "app.kubernetes.io/name=app-operator";
/// Field manager of what the tests apply.
const FIELD_MANAGER: &str = "cluster-operator-test";

fn manifest(path: &str) -> String {
    let path = crate::repository_root().join("manifests").join(path);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("reading {}: {error}", path.display()))
}

fn documents(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|document| {
            Value::deserialize(document).unwrap_or_else(|error| panic!("manifest yaml: {error}"))
        })
        .filter(|value| !value.is_null())
        .collect()
}

fn typed<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).unwrap_or_else(|error| panic!("manifest object: {error}"))
}

/// Applies `manifests/crd/apps.upgrade-gate.dev.yaml` unless the CRD is
/// established already, and waits until the API server serves Apps.
pub async fn install_app_crd(client: &Client) {
    let crd: CustomResourceDefinition =
        serde_yaml::from_str(&manifest("crd/apps.upgrade-gate.dev.yaml"))
            .unwrap_or_else(|error| panic!("the App CRD yaml: {error}"));
    let name = crd.name_any();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    // Once another test or an OLM InstallPlan made it, leave it: every
    // write races the InstallPlans of concurrent OLM tests, which update
    // this CRD too and give up on a conflict (the InstallPlan `Failed`).
    if let Ok(Some(existing)) = crds.get_opt(&name).await
        && harness::api::is_established(&existing)
    {
        return;
    }
    crds.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&crd),
    )
    .await
    .unwrap_or_else(|error| panic!("applying CRD {name}: {error}"));
    wait::until(
        "the App CRD to be Established",
        Duration::from_secs(30),
        || async {
            match crds.get_opt(&name).await {
                Ok(Some(crd)) if harness::api::is_established(&crd) => Look::Done(()),
                other => Look::NotYet(format!("{other:?}")),
            }
        },
    )
    .await;
}

/// Labels the namespace like `manifests/namespace.yaml`: the operator, its
/// Jobs and servers must run under the restricted Pod Security Standard.
pub async fn enforce_restricted_pod_security(client: &Client, namespace: &str) {
    let labels = json!({"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "restricted"
    }}});
    Api::<Namespace>::all(client.clone())
        .patch(namespace, &PatchParams::default(), &Patch::Merge(&labels))
        .await
        .unwrap_or_else(|error| panic!("labelling namespace {namespace}: {error}"));
}

/// `Upgradeable` in the OperatorCondition's `status.conditions` — what OLM
/// decides with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GateInStatus {
    pub status: String,
    pub reason: String,
    pub message: String,
    /// `observedGeneration == metadata.generation`: OLM copied the latest spec.
    pub current: bool,
    pub last_transition_time: String,
}

impl GateInStatus {
    /// True and copied from the current spec.
    pub fn open(&self) -> bool {
        self.status == "True" && self.current
    }
}

/// The operator as installed in one namespace.
pub struct InstalledOperator {
    pub namespace: String,
    client: Client,
}

fn condition_api(client: &Client, namespace: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("operators.coreos.com", "v2", "OperatorCondition");
    Api::namespaced_with(
        client.clone(),
        namespace,
        &ApiResource::from_gvk_with_plural(&gvk, "operatorconditions"),
    )
}

fn set_env(env: &mut Vec<EnvVar>, name: &str, value: &str) {
    env.retain(|variable| variable.name != name);
    env.push(EnvVar {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        ..EnvVar::default()
    });
}

/// `manifests/deployment.yaml` for `namespace`: our image, watching only
/// that namespace, labelled as OLM labels what it manages, with the
/// OperatorCondition's name in both containers.
fn operator_deployment(namespace: &str, image: &str, extra: &[(&str, &str)]) -> Deployment {
    let mut deployment: Deployment = serde_yaml::from_str(&manifest("deployment.yaml"))
        .unwrap_or_else(|error| panic!("manifests/deployment.yaml: {error}"));
    deployment.metadata.namespace = Some(namespace.to_owned());
    deployment
        .metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert("olm.managed".to_owned(), "true".to_owned());
    let pod = deployment
        .spec
        .as_mut()
        .and_then(|spec| spec.template.spec.as_mut())
        .unwrap_or_else(|| panic!("manifests/deployment.yaml has no pod spec"));
    for container in pod
        .init_containers
        .iter_mut()
        .flatten()
        .chain(pod.containers.iter_mut())
    {
        container.image = Some(image.to_owned());
        let env = container.env.get_or_insert_with(Vec::new);
        set_env(env, "OPERATOR_CONDITION_NAME", CONDITION_NAME);
        if container.name == OPERATOR {
            set_env(env, "WATCH_NAMESPACE", namespace);
            set_env(env, "UPGRADE_GATE_IMAGE", image);
            for (name, value) in extra {
                set_env(env, name, value);
            }
        }
    }
    deployment
}

impl InstalledOperator {
    /// Installs RBAC, the Deployment and the OperatorCondition into
    /// `namespace` (the CRD must be installed).
    pub async fn install(client: Client, namespace: &str, image: &str) -> Self {
        Self::install_with_env(client, namespace, image, &[]).await
    }

    /// [`InstalledOperator::install`] with environment variables of the
    /// operator's container set (e.g. `UPGRADE_GATE_MAX_CONCURRENT_UPGRADES`).
    pub async fn install_with_env(
        client: Client,
        namespace: &str,
        image: &str,
        env: &[(&str, &str)],
    ) -> Self {
        let create = PostParams::default();
        for mut object in documents(&manifest("rbac.yaml")) {
            object["metadata"]["namespace"] = json!(namespace);
            let kind = object["kind"].as_str().unwrap_or_default().to_owned();
            match kind.as_str() {
                "ServiceAccount" => {
                    let account: ServiceAccount = typed(object);
                    Api::<ServiceAccount>::namespaced(client.clone(), namespace)
                        .create(&create, &account)
                        .await
                        .map(drop)
                }
                "ClusterRole" | "Role" => {
                    object["kind"] = json!("Role");
                    let role: Role = typed(object);
                    Api::<Role>::namespaced(client.clone(), namespace)
                        .create(&create, &role)
                        .await
                        .map(drop)
                }
                "ClusterRoleBinding" | "RoleBinding" => {
                    object["kind"] = json!("RoleBinding");
                    object["roleRef"]["kind"] = json!("Role");
                    for subject in object["subjects"].as_array_mut().into_iter().flatten() {
                        subject["namespace"] = json!(namespace);
                    }
                    let binding: RoleBinding = typed(object);
                    Api::<RoleBinding>::namespaced(client.clone(), namespace)
                        .create(&create, &binding)
                        .await
                        .map(drop)
                }
                other => panic!("manifests/rbac.yaml: unexpected kind {other}"),
            }
            .unwrap_or_else(|error| panic!("creating the operator's {kind}: {error}"));
        }
        // The Deployment first: OLM copies the condition's status only once
        // every Deployment it names exists.
        Api::<Deployment>::namespaced(client.clone(), namespace)
            .create(&create, &operator_deployment(namespace, image, env))
            .await
            .unwrap_or_else(|error| panic!("creating the operator Deployment: {error}"));
        let condition: DynamicObject = typed(json!({
            "apiVersion": "operators.coreos.com/v2",
            "kind": "OperatorCondition",
            "metadata": {"name": CONDITION_NAME, "namespace": namespace},
            "spec": {"deployments": [OPERATOR], "serviceAccounts": [OPERATOR]}
        }));
        condition_api(&client, namespace)
            .create(&create, &condition)
            .await
            .unwrap_or_else(|error| panic!("creating the OperatorCondition: {error}"));
        Self {
            namespace: namespace.to_owned(),
            client,
        }
    }

    /// `Upgradeable` in the OperatorCondition's status, if OLM copied one.
    pub async fn gate(&self) -> Option<GateInStatus> {
        let condition = condition_api(&self.client, &self.namespace)
            .get(CONDITION_NAME)
            .await
            .unwrap_or_else(|error| panic!("reading the OperatorCondition: {error}"));
        let generation = condition.metadata.generation.unwrap_or_default();
        let entry = condition.data["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|entry| entry["type"] == "Upgradeable")?
            .clone();
        let text = |key: &str| entry[key].as_str().unwrap_or_default().to_owned();
        Some(GateInStatus {
            status: text("status"),
            reason: text("reason"),
            message: text("message"),
            current: entry["observedGeneration"].as_i64() == Some(generation),
            last_transition_time: text("lastTransitionTime"),
        })
    }

    /// Waits until `accept` holds for the gate in status; returns it.
    pub async fn wait_for_gate(
        &self,
        what: &str,
        timeout: Duration,
        accept: impl Fn(&GateInStatus) -> bool,
    ) -> GateInStatus {
        wait::until(what, timeout, || async {
            match self.gate().await {
                Some(gate) if accept(&gate) => Look::Done(gate),
                other => Look::NotYet(format!("{other:?}")),
            }
        })
        .await
    }

    /// The operator's pods that are not being deleted.
    pub async fn pods(&self) -> Vec<Pod> {
        Api::<Pod>::namespaced(self.client.clone(), &self.namespace)
            .list(&ListParams::default().labels(OPERATOR_SELECTOR))
            .await
            .unwrap_or_else(|error| panic!("listing the operator's pods: {error}"))
            .items
            .into_iter()
            .filter(|pod| pod.metadata.deletion_timestamp.is_none())
            .collect()
    }

    /// Waits for an operator pod other than `not` that is Ready (its
    /// `/readyz`: the first reconcile pass and gate decision are done).
    pub async fn wait_ready(&self, not: Option<&str>, timeout: Duration) -> Pod {
        wait::until("a Ready operator pod", timeout, || async {
            let pods = self.pods().await;
            let ready = pods
                .iter()
                .find(|pod| not != pod.metadata.uid.as_deref() && harness::api::pod_is_ready(pod));
            match ready {
                Some(pod) => Look::Done(pod.clone()),
                None => Look::NotYet(format!(
                    "{:?}",
                    pods.iter()
                        .map(|pod| (
                            pod.name_any(),
                            pod.status.as_ref().and_then(|s| s.phase.clone())
                        ))
                        .collect::<Vec<_>>()
                )),
            }
        })
        .await
    }
}

/// The App `shop` on the database at `url` (through the Secret `shop-db`),
/// with no server replicas and its backups on the claim `backup_claim`.
pub async fn create_app(
    namespace: &harness::testing::TestNamespace,
    url: &str,
    backup_claim: &str,
) {
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
        "metadata": {"name": "shop-db"}, "stringData": {"url": url}
    }))
    .unwrap_or_else(|error| panic!("Secret: {error}"));
    namespace
        .api::<k8s_openapi::api::core::v1::Secret>()
        .create(&PostParams::default(), &secret)
        .await
        .unwrap_or_else(|error| panic!("creating Secret shop-db: {error}"));
    let app: app::crd::App = serde_json::from_value(json!({
        "apiVersion": "upgrade-gate.dev/v1alpha1", "kind": "App",
        "metadata": {"name": "shop"},
        "spec": {
            "database": {"secretRef": {"name": "shop-db"}, "sslMode": "disable"},
            "server": {"replicas": 0},
            "upgrade": {"jobTimeoutSeconds": 300, "retryLimit": 3, "backupVolumeClaim": backup_claim}
        }
    }))
    .unwrap_or_else(|error| panic!("App: {error}"));
    namespace
        .api::<app::crd::App>()
        .create(&PostParams::default(), &app)
        .await
        .unwrap_or_else(|error| panic!("creating App shop: {error}"));
}

/// The operator from `manifests/` in `namespace` (restricted pod security),
/// its App `shop` on a database of its own seeded at 7.9.3 with backups on
/// `backup_claim`, and the App's upgrade Job waiting for the test's hold
/// on the database's upgrade lock. Fields drop in declaration order: the
/// operator before the lock, the lock before its database, the claim last.
/// `O` is how the operator was installed ([`HeldUpgrade::start_with`]).
pub struct HeldUpgrade<O = InstalledOperator> {
    pub operator: O,
    pub lock: crate::cluster_database::HeldUpgradeLock,
    pub database: crate::cluster_database::TestDatabase,
    _backups: crate::backup_volume::BackupVolume,
}

impl HeldUpgrade {
    /// Sets it up and waits (`timeout`) until the Job waits for the lock.
    pub async fn start(
        cluster: &harness::testing::TestCluster,
        namespace: &harness::testing::TestNamespace,
        backup_claim: &str,
        timeout: Duration,
    ) -> HeldUpgrade {
        let client = cluster.admin_client().await;
        let image = cluster.image.clone();
        let ns = namespace.name.clone();
        HeldUpgrade::start_with(cluster, namespace, backup_claim, timeout, async move || {
            InstalledOperator::install(client, &ns, &image).await
        })
        .await
    }
}

impl<O> HeldUpgrade<O> {
    /// The same with the operator installed by `install` (Helm, ...), once
    /// the App exists.
    pub async fn start_with(
        cluster: &harness::testing::TestCluster,
        namespace: &harness::testing::TestNamespace,
        backup_claim: &str,
        timeout: Duration,
        install: impl AsyncFnOnce() -> O,
    ) -> HeldUpgrade<O> {
        let client = cluster.admin_client().await;
        let ns = &namespace.name;
        enforce_restricted_pod_security(&client, ns).await;
        let backups = crate::backup_volume::BackupVolume::create(
            client.clone(),
            cluster.kubeconfig.clone(),
            ns,
            backup_claim,
        )
        .await;
        let database = crate::cluster_database::TestDatabase::create(
            &cluster.database_url,
            &format!("{}_shop", ns.replace('-', "_")),
        )
        .await;
        database.seed_at("7.9.3", 100);
        let lock = database.hold_upgrade_lock().await;
        create_app(namespace, &database.url, backup_claim).await;
        let operator = install().await;
        lock.wait_for_waiter(timeout).await;
        HeldUpgrade {
            operator,
            lock,
            database,
            _backups: backups,
        }
    }
}
