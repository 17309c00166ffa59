//! OLM v1 on the shared test cluster (`cluster up --olm-v1`; `just
//! test-cluster` starts it so): our releases published to the cluster's
//! registry, ClusterCatalogs and ClusterExtensions made and removed by
//! guards, and the rights of an extension's installer ServiceAccount,
//! derived from the bundle as operator-controller's guide derives them
//! (`docs/howto/derive-service-account.md` in its module).
//!
//! Owns: the OLM v1 rendering of our releases (release-tools with
//! `--operator-image` and `--crd external`, into a temporary directory),
//! the images built from it (podman, FROM scratch) and their push; the
//! objects named above; the pure reading of their conditions and of a
//! CSV's rights ([`installer_rights`]); the turn of each test's extension
//! of our bundles ([`OlmV1Cluster::one_extension_at_a_time`]). Must not
//! touch: the committed `bundle/` and `catalog/`, or other tests' objects.
//!
//! The shared cluster forces two choices (docs/harness-olm-v1.md says what was
//! measured):
//! - every extension is installed for its own namespace alone
//!   (`olm.operatorframework.io/watch-namespace`, with the feature gate the
//!   harness turns on): for all namespaces, our operator would reconcile
//!   the other tests' Apps;
//! - the bundles leave the App CRD out (`--crd external`): it is every
//!   test's (OLM v0's installs and the manifest tests make it), OLM v1's
//!   Helm refuses to install over a CRD no release of its owns, and when a
//!   test hands it over, OLM v0's next install of the CRD takes it back.
//!   A test applies the CRD itself, as the other tests do.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use harness::components::ClusterContext;
use harness::layout::{REGISTRY_NAME, REGISTRY_PORT};
use harness::testing::{TestCluster, TestNamespace, clean_up_on_drop, delete_on_drop};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ObjectMeta, PostParams,
};
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

use crate::wait::{self, Look};

/// The package of our releases in the catalog.
pub const PACKAGE: &str = "upgrade-gate";
/// The label catalogd's mutating webhook would set on a ClusterCatalog (the
/// harness leaves the webhook out): what a ClusterExtension's catalog
/// selector matches.
pub const CATALOG_NAME_LABEL: &str = "olm.operatorframework.io/metadata.name";
/// The annotation that installs an extension for one namespace alone.
pub const WATCH_NAMESPACE_ANNOTATION: &str = "olm.operatorframework.io/watch-namespace";
/// How long a catalog may take to be unpacked and served.
pub const SERVING_WITHIN: Duration = Duration::from_secs(120);
/// How long an install may take, resolution to Helm release.
pub const INSTALLED_WITHIN: Duration = Duration::from_secs(180);

fn olm_v1_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("olm.operatorframework.io", "v1", kind),
        plural,
    )
}

/// `ClusterCatalog` of `olm.operatorframework.io/v1`.
pub fn cluster_catalogs() -> ApiResource {
    olm_v1_resource("ClusterCatalog", "clustercatalogs")
}

/// `ClusterExtension` of `olm.operatorframework.io/v1`.
pub fn cluster_extensions() -> ApiResource {
    olm_v1_resource("ClusterExtension", "clusterextensions")
}

/// The shared cluster's OLM v1: where the host pushes images and what it
/// trusts doing so.
#[derive(Debug, Clone)]
pub struct OlmV1Cluster {
    pub cluster: TestCluster,
    /// `<node IP>:5000`.
    pub push_address: String,
    /// The cluster CA alone, for `podman push --cert-dir`.
    pub ca_dir: PathBuf,
}

impl OlmV1Cluster {
    /// The shared cluster, checked to run OLM v1; panics saying how to
    /// start one that does.
    pub fn from_env() -> Self {
        Self::of(TestCluster::from_env())
    }

    /// The harness's cluster `cluster`, checked to run OLM v1; panics
    /// saying how to start one that does.
    pub fn of(cluster: TestCluster) -> Self {
        let attached = harness::cluster::Cluster::attach(&cluster.name)
            .unwrap_or_else(|error| panic!("cluster {}: {error}", cluster.name));
        assert!(
            attached.state().olm_v1,
            "cluster {} runs no OLM v1: start it with `cluster up --olm-v1` (`just test-cluster` does)",
            cluster.name
        );
        let context: ClusterContext = attached.context();
        Self {
            push_address: attached.layout().registry_address(),
            ca_dir: context.registry_ca_dir(),
            cluster,
        }
    }

    /// The turn of one test's extension of our bundles: operator-controller
    /// names a bundle's ClusterRoles and ClusterRoleBindings
    /// `<CSV>-<account>-<hash of the rules>`, the same for every extension
    /// of that bundle, so a second extension of it is refused while the
    /// first exists. Hold the guard until the extension is gone.
    pub async fn one_extension_at_a_time(&self) -> tokio::sync::MutexGuard<'static, ()> {
        static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
        TURN.lock().await
    }

    /// Publishes our catalog and bundles to the cluster's registry once per
    /// test process; returns what was published.
    pub async fn published(&self) -> &'static Published {
        static PUBLISHED: OnceCell<Published> = OnceCell::const_new();
        PUBLISHED.get_or_init(|| publish(self, &[])).await
    }

    /// [`Self::published`] for a test variant of the releases (`release`'s
    /// flags, e.g. `--successor naive`), under a path of the registry of
    /// its own so it never replaces the published images; once per variant
    /// and test process.
    pub async fn published_variant(&self, variant: &[&str]) -> &'static Published {
        if variant.is_empty() {
            return self.published().await;
        }
        type Variants = BTreeMap<Vec<String>, &'static Published>;
        static VARIANTS: tokio::sync::Mutex<Variants> =
            tokio::sync::Mutex::const_new(BTreeMap::new());
        let key: Vec<String> = variant.iter().map(|flag| (*flag).to_owned()).collect();
        let mut variants = VARIANTS.lock().await;
        if let Some(published) = variants.get(&key) {
            return published;
        }
        let published: &'static Published = Box::leak(Box::new(publish(self, variant).await));
        variants.insert(key, published);
        published
    }
}

/// What [`publish`] pushed.
#[derive(Debug, Clone)]
pub struct Published {
    /// The catalog image as pods pull it: `registry.upgrade-gate.test:5000/...`.
    pub catalog: String,
    /// Its manifest digest (`sha256:...`).
    pub catalog_digest: String,
    /// Each release's bundle as pushed.
    pub bundles: BTreeMap<String, Bundle>,
}

impl Published {
    /// The bundle of `release`; panics when it was not published.
    pub fn bundle(&self, release: &str) -> &Bundle {
        self.bundles.get(release).unwrap_or_else(|| {
            panic!(
                "release {release} was not published: {:?}",
                self.bundles.keys()
            )
        })
    }
}

/// An image reference in the cluster's registry, as pods see it.
pub fn in_cluster(repository: &str, tag: &str) -> String {
    format!("{REGISTRY_NAME}:{REGISTRY_PORT}/{repository}:{tag}")
}

/// The catalog image needs only its FBC files and the label naming their
/// directory (catalogd: `internal/shared/util/image/cache.go`); no opm.
pub const CATALOG_CONTAINERFILE: &str = "FROM scratch\n\
    COPY upgrade-gate /configs/upgrade-gate\n\
    LABEL operators.operatorframework.io.index.configs.v1=/configs\n";

/// Renders our releases for OLM v1 (bundle images in the cluster's
/// registry, the operator image the cluster loaded, no App CRD), builds the
/// bundle images and a catalog image FROM scratch, and pushes them.
async fn publish(olm: &OlmV1Cluster, variant: &[&str]) -> Published {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("temp dir: {error}"));
    let out = dir.path().join("render");
    // A variant's images under a path of its own: `naive/` for
    // `--successor naive`.
    let path: String = variant
        .iter()
        .filter(|flag| !flag.starts_with("--"))
        .map(|value| format!("{value}/"))
        .collect();
    let registry = format!("{REGISTRY_NAME}:{REGISTRY_PORT}/{path}");
    let registry = registry.trim_end_matches('/');
    for command in ["bundles", "catalog"] {
        run(tokio::process::Command::new(crate::binary("release"))
            .arg("--root")
            .arg(crate::repository_root())
            .arg("--out")
            .arg(&out)
            .args(variant)
            .args(["--registry", registry])
            .args(["--operator-image", &olm.cluster.image])
            .args(["--crd", "external"])
            .arg(command))
        .await;
    }
    let rendered = out.join("bundle");
    let releases: Vec<String> = std::fs::read_dir(&rendered)
        .unwrap_or_else(|error| panic!("reading {}: {error}", rendered.display()))
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    let mut bundles = BTreeMap::new();
    for release in releases {
        let context = rendered.join(&release);
        let image = build(&context, &context.join("bundle.Dockerfile"), dir.path()).await;
        let tag = format!("v{release}");
        push(
            olm,
            &image,
            &format!("{path}upgrade-gate-bundle"),
            &tag,
            dir.path(),
        )
        .await;
        bundles.insert(release, read_bundle(&context.join("manifests")));
    }
    let containerfile = dir.path().join("catalog.Containerfile");
    std::fs::write(&containerfile, CATALOG_CONTAINERFILE)
        .unwrap_or_else(|error| panic!("writing {}: {error}", containerfile.display()));
    let image = build(&out.join("catalog"), &containerfile, dir.path()).await;
    let tag = format!("v{}", app::RELEASE);
    let catalog_digest = push(
        olm,
        &image,
        &format!("{path}upgrade-gate-catalog"),
        &tag,
        dir.path(),
    )
    .await;
    eprintln!(
        "published the OLM v1 catalog and {} bundles to {} in {:.1}s",
        bundles.len(),
        olm.push_address,
        started.elapsed().as_secs_f64()
    );
    Published {
        catalog: in_cluster(&format!("{path}upgrade-gate-catalog"), &tag),
        catalog_digest,
        bundles,
    }
}

/// `podman build`, untagged (two checkouts on one machine may build at
/// once): returns the image ID.
async fn build(context: &Path, containerfile: &Path, scratch: &Path) -> String {
    let iid = scratch.join("iid");
    run(tokio::process::Command::new("podman")
        .args(["build", "--quiet", "--iidfile"])
        .arg(&iid)
        .arg("-f")
        .arg(containerfile)
        .arg(context))
    .await;
    std::fs::read_to_string(&iid)
        .unwrap_or_else(|error| panic!("reading {}: {error}", iid.display()))
        .trim()
        .to_owned()
}

/// `podman push` of `image` to `<repository>:<tag>` in the cluster's
/// registry (HTTPS, the cluster CA trusted); returns the manifest digest.
async fn push(
    olm: &OlmV1Cluster,
    image: &str,
    repository: &str,
    tag: &str,
    scratch: &Path,
) -> String {
    let digest_file = scratch.join("digest");
    run(tokio::process::Command::new("podman")
        .args(["push", "--quiet", "--cert-dir"])
        .arg(&olm.ca_dir)
        .arg("--digestfile")
        .arg(&digest_file)
        .arg(image)
        .arg(format!("docker://{}/{repository}:{tag}", olm.push_address)))
    .await;
    std::fs::read_to_string(&digest_file)
        .unwrap_or_else(|error| panic!("reading {}: {error}", digest_file.display()))
        .trim()
        .to_owned()
}

async fn run(command: &mut tokio::process::Command) -> String {
    let shown = format!("{command:?}");
    let output = command
        .output()
        .await
        .unwrap_or_else(|error| panic!("running {shown}: {error}"));
    assert!(
        output.status.success(),
        "{shown} failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// One condition of an object's `status.conditions`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Condition {
    pub status: String,
    pub reason: String,
    pub message: String,
    /// Its `observedGeneration` is the object's `metadata.generation`.
    pub current: bool,
}

/// The condition `type_` of `object` (a ClusterCatalog or
/// ClusterExtension as JSON), if it has one.
pub fn condition(object: &Value, type_: &str) -> Option<Condition> {
    let generation = object["metadata"]["generation"].as_i64();
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|condition| condition["type"] == type_)
        .map(|condition| Condition {
            status: condition["status"].as_str().unwrap_or_default().to_owned(),
            reason: condition["reason"].as_str().unwrap_or_default().to_owned(),
            message: condition["message"].as_str().unwrap_or_default().to_owned(),
            current: generation.is_some() && condition["observedGeneration"].as_i64() == generation,
        })
}

/// Whether condition `type_` is `True` for the current generation.
pub fn holds(object: &Value, type_: &str) -> bool {
    condition(object, type_).is_some_and(|c| c.status == "True" && c.current)
}

/// `type=status reason: message` of every condition, for "last seen".
pub fn conditions_text(object: &Value) -> String {
    object["status"]["conditions"]
        .as_array()
        .map(|conditions| {
            conditions
                .iter()
                .map(|c| {
                    format!(
                        "{}={} {}: {}",
                        c["type"].as_str().unwrap_or("?"),
                        c["status"].as_str().unwrap_or("?"),
                        c["reason"].as_str().unwrap_or(""),
                        c["message"].as_str().unwrap_or("")
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        })
        .unwrap_or_else(|| "no conditions yet".to_owned())
}

fn to_value(object: &DynamicObject) -> Value {
    serde_json::to_value(object).unwrap_or_default()
}

/// A ClusterCatalog of this test, deleted on drop.
pub struct CatalogGuard {
    pub name: String,
    kubeconfig: PathBuf,
}

impl CatalogGuard {
    /// Creates ClusterCatalog `name` of `image`, labelled with its name as
    /// catalogd's webhook would.
    pub async fn create(cluster: &TestCluster, name: &str, image: &str) -> Self {
        let api: Api<DynamicObject> =
            Api::all_with(cluster.admin_client().await, &cluster_catalogs());
        let catalog: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "olm.operatorframework.io/v1",
            "kind": "ClusterCatalog",
            "metadata": {"name": name, "labels": {CATALOG_NAME_LABEL: name}},
            "spec": {"source": {"type": "Image", "image": {"ref": image}}},
        }))
        .unwrap_or_else(|error| panic!("ClusterCatalog {name}: {error}"));
        api.create(&PostParams::default(), &catalog)
            .await
            .unwrap_or_else(|error| panic!("creating ClusterCatalog {name}: {error}"));
        Self {
            name: name.to_owned(),
            kubeconfig: cluster.kubeconfig.clone(),
        }
    }

    /// Waits until catalogd serves it; returns the catalog as JSON.
    pub async fn wait_serving(&self, client: &Client) -> Value {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &cluster_catalogs());
        wait::until(
            &format!("ClusterCatalog {} to be Serving", self.name),
            SERVING_WITHIN,
            || async {
                match api.get_opt(&self.name).await {
                    Ok(Some(catalog)) => {
                        let value = to_value(&catalog);
                        if holds(&value, "Serving") {
                            Look::Done(value)
                        } else {
                            Look::NotYet(conditions_text(&value))
                        }
                    }
                    other => Look::NotYet(format!("{other:?}")),
                }
            },
        )
        .await
    }
}

impl Drop for CatalogGuard {
    fn drop(&mut self) {
        delete_dynamic_on_drop(
            &self.kubeconfig,
            cluster_catalogs(),
            &self.name,
            Deletion::Background,
        );
    }
}

/// Deletes the cluster-scoped object `name` from a guard's drop.
/// How a guard deletes its object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Deletion {
    /// Asked for; the garbage collector finishes it later.
    Background,
    /// Dependents first, and the drop returns once the object is gone.
    Waited,
}

/// How long a dropped guard waits for a [`Deletion::Waited`] object to go.
const GONE_WITHIN: Duration = Duration::from_secs(90);

/// Deletes the cluster-scoped object `name` from a guard's drop.
fn delete_dynamic_on_drop(kubeconfig: &Path, resource: ApiResource, name: &str, how: Deletion) {
    let kubeconfig = kubeconfig.to_owned();
    let name = name.to_owned();
    let what = format!("deleting {} {name}", resource.kind);
    clean_up_on_drop(&what, move || async move {
        let client = harness::api::client_from_kubeconfig(&kubeconfig)
            .await
            .map_err(|error| error.to_string())?;
        let api = Api::<DynamicObject>::all_with(client, &resource);
        let params = match how {
            Deletion::Background => DeleteParams::background(),
            Deletion::Waited => DeleteParams::foreground(),
        };
        match api.delete(&name, &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
            Err(error) => return Err(error.to_string()),
        }
        if how == Deletion::Background {
            return Ok(());
        }
        let deadline = Instant::now() + GONE_WITHIN;
        loop {
            match api.get_opt(&name).await {
                Ok(None) => return Ok(()),
                Ok(Some(_)) if Instant::now() < deadline => {}
                Ok(Some(left)) => {
                    return Err(format!(
                        "still there after {GONE_WITHIN:?}: {}",
                        conditions_text(&to_value(&left))
                    ));
                }
                Err(error) => return Err(error.to_string()),
            }
            tokio::time::sleep(wait::POLL_INTERVAL).await;
        }
    });
}

/// What an extension's installer must be allowed, derived from the CSVs it
/// will install (and the CRDs their bundles hold).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InstallerRights {
    /// A ClusterRole's rules.
    pub cluster: Vec<PolicyRule>,
    /// A Role's rules in the install namespace.
    pub namespaced: Vec<PolicyRule>,
}

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str], names: &[&str]) -> PolicyRule {
    let strings = |items: &[&str]| items.iter().map(|item| (*item).to_owned()).collect();
    PolicyRule {
        api_groups: Some(strings(groups)),
        resources: Some(strings(resources)),
        verbs: strings(verbs),
        resource_names: (!names.is_empty()).then(|| strings(names)),
        non_resource_urls: None,
    }
}

const MANAGE: [&str; 4] = ["get", "update", "patch", "delete"];
const NAMELESS: [&str; 3] = ["create", "list", "watch"];

/// The installer's rights for a bundle installed for its own namespace
/// (OwnNamespace), as operator-controller renders it
/// (`internal/operator-controller/rukpak/render/registryv1/generators/generators.go`):
/// the CRDs (if the bundle has any); a ClusterRole and ClusterRoleBinding per `clusterPermissions`
/// entry, a Role and RoleBinding per `permissions` entry, all named with a
/// hash of their rules (so not limited by name); the ServiceAccounts and
/// Deployments of the CSV. RBAC lets a subject grant only what it holds, so
/// the installer holds every rule of the CSV where the CSV grants it. Helm
/// reads and writes each object (get, create, update, patch, delete), and
/// operator-controller watches each kind it applied across all namespaces
/// (`contentmanager.go`: list, watch). Nothing else: no wildcard, no other
/// namespace.
pub fn installer_rights(csvs: &[Value], crds: &[String]) -> InstallerRights {
    let crds: Vec<&str> = crds.iter().map(String::as_str).collect();
    let mut cluster = Vec::new();
    if !crds.is_empty() {
        cluster.push(rule(
            &["apiextensions.k8s.io"],
            &["customresourcedefinitions"],
            &NAMELESS,
            &[],
        ));
        cluster.push(rule(
            &["apiextensions.k8s.io"],
            &["customresourcedefinitions"],
            &MANAGE,
            &crds,
        ));
    }
    cluster.extend([
        rule(
            &["rbac.authorization.k8s.io"],
            &["clusterroles", "clusterrolebindings"],
            &[
                "create", "list", "watch", "get", "update", "patch", "delete",
            ],
            &[],
        ),
        // operator-controller's informers on what it applied in the namespace.
        rule(&[""], &["serviceaccounts"], &["list", "watch"], &[]),
        rule(&["apps"], &["deployments"], &["list", "watch"], &[]),
        rule(
            &["rbac.authorization.k8s.io"],
            &["roles", "rolebindings"],
            &["list", "watch"],
            &[],
        ),
    ]);
    let mut namespaced = vec![rule(
        &["rbac.authorization.k8s.io"],
        &["roles", "rolebindings"],
        &["create", "get", "update", "patch", "delete"],
        &[],
    )];
    let mut accounts = BTreeSet::new();
    let mut deployments = BTreeSet::new();
    for csv in csvs {
        let install = &csv["spec"]["install"]["spec"];
        for (key, target) in [
            ("clusterPermissions", &mut cluster),
            ("permissions", &mut namespaced),
        ] {
            for permission in install[key].as_array().into_iter().flatten() {
                accounts.insert(
                    permission["serviceAccountName"]
                        .as_str()
                        .unwrap_or("default")
                        .to_owned(),
                );
                for csv_rule in permission["rules"].as_array().into_iter().flatten() {
                    let csv_rule: PolicyRule = serde_json::from_value(csv_rule.clone())
                        .unwrap_or_else(|error| panic!("a CSV rule: {error}"));
                    target.push(csv_rule);
                }
            }
        }
        for deployment in install["deployments"].as_array().into_iter().flatten() {
            deployments.insert(deployment["name"].as_str().unwrap_or_default().to_owned());
            if let Some(account) =
                deployment["spec"]["template"]["spec"]["serviceAccountName"].as_str()
            {
                accounts.insert(account.to_owned());
            }
        }
    }
    // The namespace's `default` account is never made.
    accounts.remove("default");
    let accounts: Vec<&str> = accounts.iter().map(String::as_str).collect();
    let deployments: Vec<&str> = deployments.iter().map(String::as_str).collect();
    if !accounts.is_empty() {
        namespaced.push(rule(&[""], &["serviceaccounts"], &["create"], &[]));
        namespaced.push(rule(&[""], &["serviceaccounts"], &MANAGE, &accounts));
    }
    if !deployments.is_empty() {
        namespaced.push(rule(&["apps"], &["deployments"], &["create"], &[]));
        namespaced.push(rule(&["apps"], &["deployments"], &MANAGE, &deployments));
    }
    dedup(&mut cluster);
    dedup(&mut namespaced);
    InstallerRights {
        cluster,
        namespaced,
    }
}

fn dedup(rules: &mut Vec<PolicyRule>) {
    let mut seen = Vec::new();
    rules.retain(|rule| {
        if seen.contains(rule) {
            false
        } else {
            seen.push(rule.clone());
            true
        }
    });
}

/// The CSV and the CRD names of a bundle's `manifests/` directory.
pub fn read_bundle(dir: &Path) -> Bundle {
    let mut csv = None;
    let mut crds = Vec::new();
    let entries =
        std::fs::read_dir(dir).unwrap_or_else(|error| panic!("reading {}: {error}", dir.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|error| panic!("reading {}: {error}", path.display()));
        let object: Value = serde_yaml::from_str(&text)
            .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        match object["kind"].as_str() {
            Some("ClusterServiceVersion") => csv = Some(object),
            Some("CustomResourceDefinition") => {
                crds.push(
                    object["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                );
            }
            _ => {}
        }
    }
    let csv = csv.unwrap_or_else(|| panic!("{} has no CSV", dir.display()));
    crds.sort();
    Bundle { csv, crds }
}

/// What [`installer_rights`] reads of a bundle.
#[derive(Clone, Debug)]
pub struct Bundle {
    pub csv: Value,
    pub crds: Vec<String>,
}

/// The committed `bundle/<release>/` (what users install).
pub fn committed_bundle(release: &str) -> Bundle {
    read_bundle(
        &crate::repository_root()
            .join("bundle")
            .join(release)
            .join("manifests"),
    )
}

/// An installer ServiceAccount with [`InstallerRights`]: the account, Role
/// and RoleBinding live in the test's namespace (and go with it), the
/// ClusterRole and ClusterRoleBinding are deleted on drop.
pub struct Installer {
    pub service_account: String,
    cluster_name: String,
    kubeconfig: PathBuf,
}

impl Installer {
    pub async fn create(
        namespace: &TestNamespace,
        kubeconfig: &Path,
        rights: InstallerRights,
    ) -> Self {
        let name = "installer";
        let cluster_name = format!("{}-installer", namespace.name);
        let client = namespace.client();
        let meta = |name: &str, namespace: Option<&str>| ObjectMeta {
            name: Some(name.to_owned()),
            namespace: namespace.map(str::to_owned),
            ..ObjectMeta::default()
        };
        let subject = Subject {
            kind: "ServiceAccount".into(),
            name: name.into(),
            namespace: Some(namespace.name.clone()),
            ..Subject::default()
        };
        let role_ref = |kind: &str, name: &str| RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: kind.into(),
            name: name.into(),
        };
        let post = PostParams::default();
        let installer = Self {
            service_account: name.to_owned(),
            cluster_name: cluster_name.clone(),
            kubeconfig: kubeconfig.to_owned(),
        };
        namespace
            .api::<ServiceAccount>()
            .create(
                &post,
                &ServiceAccount {
                    metadata: meta(name, Some(&namespace.name)),
                    ..ServiceAccount::default()
                },
            )
            .await
            .unwrap_or_else(|error| panic!("creating the installer ServiceAccount: {error}"));
        namespace
            .api::<Role>()
            .create(
                &post,
                &Role {
                    metadata: meta(name, Some(&namespace.name)),
                    rules: Some(rights.namespaced),
                },
            )
            .await
            .unwrap_or_else(|error| panic!("creating the installer Role: {error}"));
        namespace
            .api::<RoleBinding>()
            .create(
                &post,
                &RoleBinding {
                    metadata: meta(name, Some(&namespace.name)),
                    role_ref: role_ref("Role", name),
                    subjects: Some(vec![subject.clone()]),
                },
            )
            .await
            .unwrap_or_else(|error| panic!("creating the installer RoleBinding: {error}"));
        Api::<ClusterRole>::all(client.clone())
            .create(
                &post,
                &ClusterRole {
                    metadata: meta(&cluster_name, None),
                    rules: Some(rights.cluster),
                    ..ClusterRole::default()
                },
            )
            .await
            .unwrap_or_else(|error| panic!("creating the installer ClusterRole: {error}"));
        Api::<ClusterRoleBinding>::all(client)
            .create(
                &post,
                &ClusterRoleBinding {
                    metadata: meta(&cluster_name, None),
                    role_ref: role_ref("ClusterRole", &cluster_name),
                    subjects: Some(vec![subject]),
                },
            )
            .await
            .unwrap_or_else(|error| panic!("creating the installer ClusterRoleBinding: {error}"));
        installer
    }
}

impl Drop for Installer {
    fn drop(&mut self) {
        delete_on_drop::<ClusterRoleBinding>(&self.kubeconfig, &self.cluster_name);
        delete_on_drop::<ClusterRole>(&self.kubeconfig, &self.cluster_name);
    }
}

/// What a test's ClusterExtension installs, from where, as whom.
#[derive(Clone, Debug)]
pub struct Extension<'a> {
    /// Its name, also its Helm release's.
    pub name: &'a str,
    /// The install namespace; the operator watches it alone.
    pub namespace: &'a str,
    /// The installer ServiceAccount in `namespace`.
    pub service_account: &'a str,
    /// The ClusterCatalog it resolves from, alone.
    pub catalog: &'a str,
    /// The version of our package (`None`: any).
    pub version: Option<&'a str>,
    /// The channel it follows (`None`: any).
    pub channel: Option<&'a str>,
}

/// The ClusterExtension of `extension`, as JSON.
pub fn cluster_extension(extension: &Extension<'_>) -> Value {
    let mut catalog = json!({
        "packageName": PACKAGE,
        "selector": {"matchLabels": {CATALOG_NAME_LABEL: extension.catalog}},
    });
    if let Some(version) = extension.version {
        catalog["version"] = json!(version);
    }
    if let Some(channel) = extension.channel {
        catalog["channels"] = json!([channel]);
    }
    json!({
        "apiVersion": "olm.operatorframework.io/v1",
        "kind": "ClusterExtension",
        "metadata": {
            "name": extension.name,
            "annotations": {WATCH_NAMESPACE_ANNOTATION: extension.namespace},
        },
        "spec": {
            "namespace": extension.namespace,
            "serviceAccount": {"name": extension.service_account},
            "source": {"sourceType": "Catalog", "catalog": catalog},
        },
    })
}

/// A ClusterExtension of this test, deleted on drop, which returns once it
/// is gone with what it applied (owner references; foreground deletion).
/// Waiting matters: the ClusterRoles and ClusterRoleBindings of a bundle are
/// named `<CSV>-<account>-<hash of the rules>`, the same for every
/// extension of that bundle, so the next extension of it (the next test,
/// the next run on this cluster) is refused ("ClusterRole '…' already
/// exists … cannot be managed by operator-controller") until they are
/// deleted.
pub struct ExtensionGuard {
    pub name: String,
    kubeconfig: PathBuf,
}

impl ExtensionGuard {
    pub async fn create(client: &Client, kubeconfig: &Path, extension: &Extension<'_>) -> Self {
        let name = extension.name;
        let object: DynamicObject = serde_json::from_value(cluster_extension(extension))
            .unwrap_or_else(|error| panic!("ClusterExtension {name}: {error}"));
        Api::<DynamicObject>::all_with(client.clone(), &cluster_extensions())
            .create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|error| panic!("creating ClusterExtension {name}: {error}"));
        Self {
            name: name.to_owned(),
            kubeconfig: kubeconfig.to_owned(),
        }
    }

    /// Waits until the extension is Installed; returns it as JSON.
    pub async fn wait_installed(&self, client: &Client) -> Value {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &cluster_extensions());
        wait::until(
            &format!("ClusterExtension {} to be Installed", self.name),
            INSTALLED_WITHIN,
            || async {
                match api.get_opt(&self.name).await {
                    Ok(Some(extension)) => {
                        let value = to_value(&extension);
                        if holds(&value, "Installed") {
                            Look::Done(value)
                        } else {
                            Look::NotYet(conditions_text(&value))
                        }
                    }
                    other => Look::NotYet(format!("{other:?}")),
                }
            },
        )
        .await
    }
}

impl Drop for ExtensionGuard {
    fn drop(&mut self) {
        delete_dynamic_on_drop(
            &self.kubeconfig,
            cluster_extensions(),
            &self.name,
            Deletion::Waited,
        );
    }
}

#[cfg(test)]
mod tests;
