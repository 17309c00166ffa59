//! The ClusterServiceVersion of one release, rendered from the sources.
//!
//! Owns: the CSV's shape and its fixed metadata (display name, description,
//! icon, maintainers, links, keywords, install modes, minKubeVersion), the
//! data-upgrade annotation, and the `olm.csv.metadata` summary the
//! image-based catalog carries.
//! Must not touch: files; the Deployment and RBAC come from `install`, the
//! descriptors from `descriptors`, the upgrade edges from `releases`.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::rbac::v1::PolicyRule;
use serde::Serialize;
use serde_json::Value;

use crate::descriptors::{self, Descriptor, DescriptorError};
use crate::install::{self, InstallError, ReleasePod};
use crate::releases::{self, Release};
use crate::sources::Sources;

pub const DISPLAY_NAME: &str = "upgrade-gate App operator";
pub const MIN_KUBE_VERSION: &str = "1.29.0";
pub const REPOSITORY: &str = "https://github.com/upgrade-gate/upgrade-gate";
pub const ICON_SVG: &str = include_str!("../assets/icon.svg");
pub const SHORT_DESCRIPTION: &str = "Upgrades each App's PostgreSQL database and keeps OLM from replacing the operator until the upgrade is done";
const DESCRIPTION: &str = include_str!("../assets/description.md");
const APP_DESCRIPTION: &str = "A database-backed application: where its PostgreSQL database is, how its server runs, and how its database upgrades run";
const SUGGESTED_NAMESPACE: &str = "upgrade-gate-system";

#[derive(Debug, thiserror::Error)]
pub enum CsvError {
    #[error(transparent)]
    Install(#[from] InstallError),
    #[error(transparent)]
    Descriptors(#[from] DescriptorError),
    #[error("the CRD has no storage version")]
    NoStorageVersion,
    #[error("the CRD has no {0}")]
    CrdField(&'static str),
    #[error("the sample App cannot be written as JSON: {0}")]
    Example(serde_json::Error),
    #[error(
        "{file}: the operator Deployment has no label {OPERATOR_LABEL}: every bundle and the chart opt it in to the admission policy, which keeps its record under that label (else under the Deployment's name), so a later release that renamed the Deployment would be another operator to the policy and be let through while this one's upgrade runs; add {OPERATOR_LABEL}: <the name the operator records under> to its metadata.labels",
        file = crate::sources::DEPLOYMENT_FILE
    )]
    NoOperatorLabel,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterServiceVersion {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub metadata: Metadata,
    pub spec: CsvSpec,
}

#[derive(Debug, Clone, Serialize)]
pub struct Metadata {
    pub name: String,
    pub annotations: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CsvSpec {
    pub display_name: &'static str,
    pub description: &'static str,
    pub version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replaces: Option<String>,
    pub min_kube_version: &'static str,
    pub maturity: &'static str,
    pub provider: Link,
    pub maintainers: Vec<Maintainer>,
    pub links: Vec<Link>,
    pub keywords: Vec<&'static str>,
    pub icon: Vec<Icon>,
    pub install_modes: Vec<InstallMode>,
    #[serde(rename = "customresourcedefinitions")]
    pub custom_resource_definitions: CrdDescriptions,
    pub install: Install,
    pub related_images: Vec<RelatedImage>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Link {
    pub name: &'static str,
    pub url: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Maintainer {
    pub name: &'static str,
    pub email: &'static str,
}

#[derive(Debug, Clone, Serialize)]
pub struct Icon {
    pub base64data: String,
    pub mediatype: &'static str,
}

#[derive(Debug, Clone, Serialize)]
pub struct InstallMode {
    #[serde(rename = "type")]
    pub type_: &'static str,
    pub supported: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct CrdDescriptions {
    pub owned: Vec<OwnedCrd>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnedCrd {
    pub name: String,
    pub version: String,
    pub kind: String,
    pub display_name: String,
    pub description: String,
    pub resources: Vec<OwnedResource>,
    pub spec_descriptors: Vec<Descriptor>,
    pub status_descriptors: Vec<Descriptor>,
}

#[derive(Debug, Clone, Serialize)]
pub struct OwnedResource {
    pub kind: &'static str,
    pub version: &'static str,
}

#[derive(Debug, Clone, Serialize)]
pub struct Install {
    pub strategy: &'static str,
    pub spec: InstallSpec,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InstallSpec {
    pub cluster_permissions: Vec<Permission>,
    pub permissions: Vec<Permission>,
    pub deployments: Vec<InstallDeployment>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Permission {
    pub service_account_name: String,
    pub rules: Vec<PolicyRule>,
}

#[derive(Debug, Clone, Serialize)]
pub struct InstallDeployment {
    pub name: String,
    pub spec: DeploymentSpec,
    /// The Deployment's labels (OLM sets them on the object, replacing
    /// any added by hand): the source's, the release the admission policy
    /// compares across an update, the policy's opt-in, and the operator
    /// whose record it reads (the source's [`OPERATOR_LABEL`]). Whether the
    /// policy judges an install is the cluster admin's choice, by the
    /// binding's namespaces (docs/admission.md).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub label: BTreeMap<String, String>,
}

/// The annotation saying a release carries a data upgrade (`"true"`): its
/// operator's upgrade must run, so no upgrade edge may jump over it.
/// `upgrade-gate lint-catalog` reads it (`upgrade_gate::catalog_lint`,
/// docs/adopt.md).
pub const DATA_UPGRADE_ANNOTATION: &str = "upgrade-gate.dev/data-upgrade";

/// The label naming the release a Deployment runs, which the admission
/// policy compares (`upgrade_gate::admission::RELEASE_LABEL`,
/// manifests/admission/policy.yaml).
pub const RELEASE_LABEL: &str = "upgrade-gate.dev/release";
/// The label by which a Deployment opts in to the admission policy, and its
/// value (`upgrade_gate::admission::{ADMISSION_LABEL, ENFORCE}`).
pub const ADMISSION_LABEL: &str = "upgrade-gate.dev/admission";
pub const ENFORCE: &str = "enforce";
/// The label naming the operator whose record the admission policy reads
/// (`upgrade_gate::admission::OPERATOR_LABEL`; without it, the
/// Deployment's name): kept by every release, so a release that renames
/// the Deployment is still the same operator to the policy.
pub const OPERATOR_LABEL: &str = "upgrade-gate.dev/operator";

/// The operator's identity for the admission policy: the source
/// Deployment's [`OPERATOR_LABEL`]. Every bundle and the chart opt the
/// Deployment in, so a source without it is refused
/// ([`CsvError::NoOperatorLabel`]), never rendered under the name alone.
pub fn operator_identity(deployment: &Deployment) -> Result<&str, CsvError> {
    deployment
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(OPERATOR_LABEL))
        .map(String::as_str)
        .filter(|name| !name.is_empty())
        .ok_or(CsvError::NoOperatorLabel)
}

#[derive(Debug, Clone, Serialize)]
pub struct RelatedImage {
    pub name: &'static str,
    pub image: String,
}

/// The operator supports every install mode: `WATCH_NAMESPACE` takes OLM's
/// target namespaces as they come (one, several, or empty for all).
const INSTALL_MODES: [&str; 4] = [
    "OwnNamespace",
    "SingleNamespace",
    "MultiNamespace",
    "AllNamespaces",
];

/// The CSV of `release`, running `image`.
pub fn release_csv(
    sources: &Sources,
    release: &Release,
    image: &str,
) -> Result<ClusterServiceVersion, CsvError> {
    let name = releases::csv_name(release.version);
    let (deployment_name, deployment) = install::release_deployment(
        &sources.deployment,
        ReleasePod {
            csv_name: &name,
            release: release.version,
            image,
        },
    )?;
    let mut label = sources
        .deployment
        .metadata
        .labels
        .clone()
        .unwrap_or_default();
    label.insert(RELEASE_LABEL.to_owned(), release.version.to_owned());
    label.insert(ADMISSION_LABEL.to_owned(), ENFORCE.to_owned());
    label.insert(
        OPERATOR_LABEL.to_owned(),
        operator_identity(&sources.deployment)?.to_owned(),
    );
    let service_account = deployment
        .template
        .spec
        .as_ref()
        .and_then(|pod| pod.service_account_name.clone())
        .unwrap_or_else(|| "default".to_owned());
    let permissions = own_operator_condition_only(
        install::namespace_permissions(&sources.namespace_rules)?,
        &name,
    );

    let crd = &sources.crd;
    let storage_version = crd
        .spec
        .versions
        .iter()
        .find(|version| version.storage)
        .ok_or(CsvError::NoStorageVersion)?;
    let (spec_descriptors, status_descriptors) =
        descriptors::app_descriptors(crd, &storage_version.name)?;
    let crd_name = crd
        .metadata
        .name
        .clone()
        .ok_or(CsvError::CrdField("name"))?;
    let kind = crd.spec.names.kind.clone();

    let mut annotations = BTreeMap::from([
        (
            "alm-examples".to_owned(),
            alm_examples(&sources.sample_app)?,
        ),
        ("capabilities".to_owned(), "Seamless Upgrades".to_owned()),
        ("categories".to_owned(), "Database".to_owned()),
        ("containerImage".to_owned(), image.to_owned()),
        ("description".to_owned(), SHORT_DESCRIPTION.to_owned()),
        (
            "operatorframework.io/suggested-namespace".to_owned(),
            SUGGESTED_NAMESPACE.to_owned(),
        ),
        ("repository".to_owned(), REPOSITORY.to_owned()),
        ("support".to_owned(), "upgrade-gate maintainers".to_owned()),
    ]);
    if let Some(range) = release.skip_range {
        annotations.insert("olm.skipRange".to_owned(), range.to_owned());
    }
    if sources.data_upgrades.contains(release.version) {
        annotations.insert(DATA_UPGRADE_ANNOTATION.to_owned(), "true".to_owned());
    }

    Ok(ClusterServiceVersion {
        api_version: "operators.coreos.com/v1alpha1",
        kind: "ClusterServiceVersion",
        metadata: Metadata {
            name,
            annotations,
            labels: BTreeMap::from([
                (
                    "operatorframework.io/arch.amd64".to_owned(),
                    "supported".to_owned(),
                ),
                (
                    "operatorframework.io/os.linux".to_owned(),
                    "supported".to_owned(),
                ),
            ]),
        },
        spec: CsvSpec {
            display_name: DISPLAY_NAME,
            description: DESCRIPTION,
            version: release.version.to_owned(),
            replaces: release.replaces.map(releases::csv_name),
            min_kube_version: MIN_KUBE_VERSION,
            maturity: "alpha",
            provider: Link {
                name: "upgrade-gate project",
                url: REPOSITORY.to_owned(),
            },
            maintainers: vec![Maintainer {
                name: "upgrade-gate maintainers",
                email: "maintainers@upgrade-gate.dev",
            }],
            links: links(),
            keywords: vec![
                "upgrade",
                "database",
                "postgresql",
                "migrations",
                "operatorcondition",
                "olm",
            ],
            icon: vec![icon()],
            install_modes: INSTALL_MODES
                .iter()
                .map(|mode| InstallMode {
                    type_: mode,
                    supported: true,
                })
                .collect(),
            custom_resource_definitions: CrdDescriptions {
                owned: vec![OwnedCrd {
                    name: crd_name,
                    version: storage_version.name.clone(),
                    display_name: kind.clone(),
                    kind,
                    description: APP_DESCRIPTION.to_owned(),
                    resources: vec![
                        OwnedResource {
                            kind: "Job",
                            version: "v1",
                        },
                        OwnedResource {
                            kind: "Deployment",
                            version: "v1",
                        },
                        OwnedResource {
                            kind: "Secret",
                            version: "v1",
                        },
                    ],
                    spec_descriptors,
                    status_descriptors,
                }],
            },
            install: Install {
                strategy: "deployment",
                spec: InstallSpec {
                    cluster_permissions: vec![Permission {
                        service_account_name: service_account.clone(),
                        rules: sources.cluster_rules.clone(),
                    }],
                    permissions: vec![Permission {
                        service_account_name: service_account,
                        rules: permissions,
                    }],
                    deployments: vec![InstallDeployment {
                        name: deployment_name,
                        spec: deployment,
                        label,
                    }],
                },
            },
            related_images: vec![RelatedImage {
                name: "upgrade-gate",
                image: image.to_owned(),
            }],
        },
    })
}

/// The rules with every `operatorconditions` rule limited to the CSV's own
/// OperatorCondition (`resourceNames: [<csv name>]`), as OLM's own Role is:
/// in a namespace shared with other operators, rights on every
/// OperatorCondition could hold back or release theirs.
fn own_operator_condition_only(rules: Vec<PolicyRule>, csv_name: &str) -> Vec<PolicyRule> {
    rules
        .into_iter()
        .map(|mut rule| {
            let conditions = rule
                .resources
                .as_ref()
                .is_some_and(|resources| resources.iter().any(|r| r == "operatorconditions"));
            if conditions {
                rule.resource_names = Some(vec![csv_name.to_owned()]);
            }
            rule
        })
        .collect()
}

/// The package icon (also the catalog's).
pub fn icon() -> Icon {
    Icon {
        base64data: BASE64.encode(ICON_SVG),
        mediatype: "image/svg+xml",
    }
}

fn links() -> Vec<Link> {
    vec![
        Link {
            name: "Source",
            url: REPOSITORY.to_owned(),
        },
        Link {
            name: "Publishing and upgrade channels",
            url: format!("{REPOSITORY}/blob/main/docs/olm.md"),
        },
    ]
}

/// `alm-examples`: a JSON list with the sample App (without a namespace:
/// the console fills in the one the user picks).
fn alm_examples(sample_app: &Value) -> Result<String, CsvError> {
    let mut example = sample_app.clone();
    if let Some(metadata) = example.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("namespace");
    }
    serde_json::to_string_pretty(&[example]).map_err(CsvError::Example)
}

/// The `olm.csv.metadata` property of a bundle in the image-based catalog
/// (what `opm render` derives from the CSV).
pub fn catalog_metadata(csv: &ClusterServiceVersion) -> Result<Value, serde_json::Error> {
    let spec = &csv.spec;
    Ok(serde_json::json!({
        "annotations": csv.metadata.annotations,
        "crdDescriptions": serde_json::to_value(&spec.custom_resource_definitions)?,
        "description": spec.description,
        "displayName": spec.display_name,
        "installModes": serde_json::to_value(&spec.install_modes)?,
        "keywords": spec.keywords,
        "labels": csv.metadata.labels,
        "links": serde_json::to_value(&spec.links)?,
        "maintainers": serde_json::to_value(&spec.maintainers)?,
        "maturity": spec.maturity,
        "minKubeVersion": spec.min_kube_version,
        "provider": serde_json::to_value(&spec.provider)?,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn repository_sources() -> Sources {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        Sources::read(&root).unwrap_or_else(|error| panic!("{error}"))
    }

    #[test]
    fn each_release_gets_its_name_edges_and_literal_condition_name() {
        let sources = repository_sources();
        let release = releases::find("7.10.0").unwrap();
        let csv = release_csv(&sources, release, "registry.test/upgrade-gate:7.10.1").unwrap();
        let value = serde_json::to_value(&csv).unwrap();
        assert_eq!(value["metadata"]["name"], "upgrade-gate.v7.10.0");
        assert_eq!(value["spec"]["version"], "7.10.0");
        assert_eq!(value["spec"]["replaces"], "upgrade-gate.v7.9.3");
        assert!(
            value["metadata"]["annotations"]
                .get("olm.skipRange")
                .is_none()
        );
        let pod = &value["spec"]["install"]["spec"]["deployments"][0]["spec"]["template"]["spec"];
        let gate_env = pod["initContainers"][0]["env"].as_array().unwrap();
        assert!(gate_env.contains(&serde_json::json!(
            {"name": "OPERATOR_CONDITION_NAME", "value": "upgrade-gate.v7.10.0"}
        )));
        assert_eq!(value["spec"]["installModes"].as_array().unwrap().len(), 4);
        assert_eq!(
            value["spec"]["install"]["spec"]["deployments"][0]["label"],
            serde_json::json!({
                "app.kubernetes.io/name": "app-operator",
                RELEASE_LABEL: "7.10.0",
                ADMISSION_LABEL: ENFORCE,
                OPERATOR_LABEL: "app-operator"
            }),
            "the release the admission policy compares, the opt-in (where the policy is bound) and the operator whose record it reads"
        );
        let rules = value["spec"]["install"]["spec"]["permissions"][0]["rules"]
            .as_array()
            .unwrap();
        let condition_rules: Vec<&Value> = rules
            .iter()
            .filter(|rule| rule["resources"] == serde_json::json!(["operatorconditions"]))
            .collect();
        assert_eq!(condition_rules.len(), 1, "{rules:?}");
        assert_eq!(
            condition_rules[0]["resourceNames"],
            serde_json::json!(["upgrade-gate.v7.10.0"]),
            "only its own OperatorCondition"
        );
    }

    /// Every rendering opts the Deployment in: a source that names no
    /// operator is refused, not rendered as one the policy keys by name.
    #[test]
    fn a_source_deployment_without_its_operator_label_is_refused() {
        let mut sources = repository_sources();
        let release = releases::find("7.10.0").unwrap();
        assert_eq!(
            operator_identity(&sources.deployment).unwrap(),
            "app-operator"
        );
        for unnamed in [None, Some(String::new())] {
            let labels = sources.deployment.metadata.labels.get_or_insert_default();
            match &unnamed {
                None => labels.remove(OPERATOR_LABEL),
                Some(empty) => labels.insert(OPERATOR_LABEL.to_owned(), empty.clone()),
            };
            let error = release_csv(&sources, release, "i:1").unwrap_err();
            assert!(
                matches!(error, CsvError::NoOperatorLabel),
                "{unnamed:?}: {error}"
            );
            assert!(
                error.to_string().starts_with(
                    "manifests/deployment.yaml: the operator Deployment has no label upgrade-gate.dev/operator"
                ),
                "{error}"
            );
        }
    }

    #[test]
    fn a_release_with_migrations_is_annotated_as_a_data_upgrade() {
        let mut sources = repository_sources();
        let release = releases::find("7.10.0").unwrap();
        let annotation = |sources: &Sources| {
            let csv = release_csv(sources, release, "i:1").unwrap();
            csv.metadata
                .annotations
                .get(DATA_UPGRADE_ANNOTATION)
                .cloned()
        };
        assert_eq!(annotation(&sources).as_deref(), Some("true"));
        let metadata = catalog_metadata(&release_csv(&sources, release, "i:1").unwrap()).unwrap();
        assert_eq!(
            metadata["annotations"][DATA_UPGRADE_ANNOTATION], "true",
            "the image-based catalog shows it too"
        );
        sources.data_upgrades.remove("7.10.0");
        assert_eq!(annotation(&sources), None);
    }

    #[test]
    fn the_first_release_replaces_nothing() {
        let sources = repository_sources();
        let csv = release_csv(&sources, releases::find("7.9.3").unwrap(), "i:1").unwrap();
        let value = serde_json::to_value(&csv).unwrap();
        assert!(value["spec"].get("replaces").is_none());
    }

    #[test]
    fn alm_examples_is_a_json_list_without_namespace() {
        let app = serde_json::json!({"apiVersion": "upgrade-gate.dev/v1alpha1", "kind": "App",
            "metadata": {"name": "shop", "namespace": "x"}, "spec": {}});
        let parsed: Value = serde_json::from_str(&alm_examples(&app).unwrap()).unwrap();
        assert_eq!(parsed[0]["metadata"], serde_json::json!({"name": "shop"}));
    }

    #[test]
    fn the_icon_is_a_small_svg() {
        assert!(ICON_SVG.starts_with("<svg"));
        assert!(ICON_SVG.len() < 2048);
    }
}
