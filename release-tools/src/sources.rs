//! Reads the plain manifests (`manifests/`) the bundles are rendered from:
//! the App CRD, the operator's RBAC, its Deployment and the sample App; and
//! which releases carry a data upgrade (`migrations/<release>/`).
//!
//! Owns: finding each object in its file and parsing it into a typed value.
//! Must not touch: anything but reading files under the given root; what a
//! bundle makes of these objects is `csv`'s business.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::Deserialize;
use serde_json::Value;

/// Where each source lives, relative to the repository root.
pub const DEPLOYMENT_FILE: &str = "manifests/deployment.yaml";
pub const RBAC_FILE: &str = "manifests/rbac.yaml";
pub const CRD_FILE: &str = "manifests/crd/apps.upgrade-gate.dev.yaml";
pub const SAMPLE_APP_FILE: &str = "manifests/samples/app.yaml";
/// The sample application's manifest: its version is the newest release and the image tag.
pub const CARGO_MANIFEST_FILE: &str = "app/Cargo.toml";
/// The schema migrations, one folder per release that ships some.
pub const MIGRATIONS_DIR: &str = "migrations";

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("parsing {path}: {source}")]
    Yaml {
        path: PathBuf,
        source: serde_yaml::Error,
    },
    #[error("parsing {path}: {source}")]
    Toml {
        path: PathBuf,
        source: toml::de::Error,
    },
    #[error("{path}: expected exactly one {kind}, found {found}")]
    Count {
        path: PathBuf,
        kind: &'static str,
        found: usize,
    },
}

/// Everything a bundle is rendered from.
#[derive(Debug, Clone)]
pub struct Sources {
    /// The operator Deployment (`manifests/deployment.yaml`).
    pub deployment: Deployment,
    /// Rules of the operator's ClusterRole (→ CSV `clusterPermissions`).
    pub cluster_rules: Vec<PolicyRule>,
    /// Rules of the operator's namespaced Role (→ CSV `permissions`).
    pub namespace_rules: Vec<PolicyRule>,
    /// Every object of `manifests/rbac.yaml` as written (the Helm chart's
    /// templates).
    pub rbac_objects: Vec<Value>,
    /// The App CRD, typed (schema lookups) and as written (bundle output).
    pub crd: CustomResourceDefinition,
    pub crd_object: Value,
    /// The sample App (`alm-examples`).
    pub sample_app: Value,
    /// The version of the root crate: the tag of the image every bundle runs.
    pub image_tag: String,
    /// The releases that carry a data upgrade: those with a migration
    /// (`migrations/<release>/*.sql`).
    pub data_upgrades: BTreeSet<String>,
}

impl Sources {
    /// Reads every source below the repository root `root`.
    pub fn read(root: &Path) -> Result<Self, SourceError> {
        let deployment = single::<Deployment>(root, DEPLOYMENT_FILE, "Deployment")?;
        let cluster_role = single::<ClusterRole>(root, RBAC_FILE, "ClusterRole")?;
        let role = single::<Role>(root, RBAC_FILE, "Role")?;
        let crd_object = single::<Value>(root, CRD_FILE, "CustomResourceDefinition")?;
        let crd = single::<CustomResourceDefinition>(root, CRD_FILE, "CustomResourceDefinition")?;
        let sample_app = single::<Value>(root, SAMPLE_APP_FILE, "App")?;
        Ok(Self {
            deployment,
            cluster_rules: cluster_role.rules.unwrap_or_default(),
            namespace_rules: role.rules.unwrap_or_default(),
            rbac_objects: documents(root, RBAC_FILE)?,
            crd,
            crd_object,
            sample_app,
            image_tag: crate_version(root)?,
            data_upgrades: releases_with_migrations(root)?,
        })
    }
}

/// The releases with at least one `.sql` file in `migrations/<release>/`.
fn releases_with_migrations(root: &Path) -> Result<BTreeSet<String>, SourceError> {
    let read_dir = |path: PathBuf| {
        std::fs::read_dir(&path).map_err(|source| SourceError::Read { path, source })
    };
    let mut releases = BTreeSet::new();
    for release in read_dir(root.join(MIGRATIONS_DIR))? {
        let release = release.map_err(|source| SourceError::Read {
            path: root.join(MIGRATIONS_DIR),
            source,
        })?;
        if !release.path().is_dir() {
            continue;
        }
        let has_sql = read_dir(release.path())?
            .filter_map(Result::ok)
            .any(|file| file.path().extension().is_some_and(|e| e == "sql"));
        if has_sql {
            releases.insert(release.file_name().to_string_lossy().into_owned());
        }
    }
    Ok(releases)
}

/// The documents of a multi-document yaml file, as JSON values.
fn documents(root: &Path, file: &str) -> Result<Vec<Value>, SourceError> {
    let path = root.join(file);
    let text = std::fs::read_to_string(&path).map_err(|source| SourceError::Read {
        path: path.clone(),
        source,
    })?;
    let mut values = Vec::new();
    for document in serde_yaml::Deserializer::from_str(&text) {
        let value = Value::deserialize(document).map_err(|source| SourceError::Yaml {
            path: path.clone(),
            source,
        })?;
        if !value.is_null() {
            values.push(value);
        }
    }
    Ok(values)
}

/// The one object of `kind` in `file`, parsed as `T`.
fn single<T: serde::de::DeserializeOwned>(
    root: &Path,
    file: &str,
    kind: &'static str,
) -> Result<T, SourceError> {
    let path = root.join(file);
    let mut matching: Vec<Value> = documents(root, file)?
        .into_iter()
        .filter(|document| document.get("kind").and_then(Value::as_str) == Some(kind))
        .collect();
    if matching.len() != 1 {
        return Err(SourceError::Count {
            path,
            kind,
            found: matching.len(),
        });
    }
    let object = matching.remove(0);
    serde_json::from_value(object).map_err(|error| SourceError::Yaml {
        path,
        source: serde::de::Error::custom(error),
    })
}

/// `[package].version` of the sample application's Cargo.toml.
fn crate_version(root: &Path) -> Result<String, SourceError> {
    #[derive(Deserialize)]
    struct Manifest {
        package: Package,
    }
    #[derive(Deserialize)]
    struct Package {
        version: String,
    }
    let path = root.join(CARGO_MANIFEST_FILE);
    let text = std::fs::read_to_string(&path).map_err(|source| SourceError::Read {
        path: path.clone(),
        source,
    })?;
    let manifest: Manifest =
        toml::from_str(&text).map_err(|source| SourceError::Toml { path, source })?;
    Ok(manifest.package.version)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, file: &str, text: &str) {
        let path = root.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn picks_objects_by_kind_from_multi_document_files() {
        let root = tempfile::tempdir().unwrap();
        write(
            root.path(),
            RBAC_FILE,
            "# comment\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: a}\n---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: r}\n\
             rules: [{apiGroups: [x], resources: [y], verbs: [get]}]\n---\n",
        );
        let role: Role = single(root.path(), RBAC_FILE, "Role").unwrap();
        assert_eq!(role.rules.unwrap()[0].verbs, ["get"]);
        let missing = single::<ClusterRole>(root.path(), RBAC_FILE, "ClusterRole");
        assert!(matches!(missing, Err(SourceError::Count { found: 0, .. })));
    }

    #[test]
    fn reads_the_app_crate_version() {
        let root = tempfile::tempdir().unwrap();
        write(
            root.path(),
            CARGO_MANIFEST_FILE,
            "[package]\nname = \"x\"\nversion = \"7.10.1\"\n",
        );
        assert_eq!(crate_version(root.path()).unwrap(), "7.10.1");
    }

    #[test]
    fn a_release_with_a_migration_carries_a_data_upgrade() {
        let root = tempfile::tempdir().unwrap();
        write(root.path(), "migrations/1.0.0/V1__create.sql", "select 1;");
        write(
            root.path(),
            "migrations/1.1.0/README",
            "notes, no migration",
        );
        write(root.path(), "migrations/README.md", "not a release");
        std::fs::create_dir_all(root.path().join("migrations/1.2.0")).unwrap();
        assert_eq!(
            releases_with_migrations(root.path()).unwrap(),
            BTreeSet::from(["1.0.0".to_owned()])
        );
        assert!(matches!(
            releases_with_migrations(&root.path().join("absent")),
            Err(SourceError::Read { .. })
        ));
    }

    #[test]
    fn reads_the_repository_manifests() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let sources = Sources::read(&root).unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(
            sources.deployment.metadata.name.as_deref(),
            Some("app-operator")
        );
        assert!(!sources.cluster_rules.is_empty());
        assert_eq!(sources.sample_app["kind"], "App");
        for release in ["7.9.3", "7.10.0", "7.10.1"] {
            assert!(sources.data_upgrades.contains(release), "{release}");
        }
    }
}
