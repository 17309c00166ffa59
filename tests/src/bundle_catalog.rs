//! A file-based catalog made from registry+v1 bundle directories on disk
//! (`<bundles>/<version>/manifests/`), every object inline
//! (`olm.bundle.object`, `image: ""`), for `opm serve`: how the adoption
//! tests install an operator someone else bundled (the kubebuilder
//! scaffold's `make bundle`, the Helm operator's bundles) through real OLM.
//!
//! Owns: reading a bundle's objects, the catalog's shape (one channel per
//! version ending there, each version replacing the one before, the last
//! the default) and the check that the bundles' CSVs say the same.
//! Must not touch: the cluster (pure JSON, plus writing the catalog file).

use std::path::{Path, PathBuf};

use base64::Engine;
use serde::Deserialize;
use serde_json::{Value, json};

/// A package's releases as bundle directories: `<bundles>/<version>/`.
#[derive(Clone, Copy, Debug)]
pub struct BundledReleases<'a> {
    /// The package (the CSVs are `<package>.v<version>`).
    pub package: &'a str,
    /// The directory holding one bundle directory per version.
    pub bundles: &'a Path,
    /// The versions, oldest first.
    pub versions: &'a [&'a str],
}

/// The CSV name of `package`'s `version`, as operator-sdk names it.
pub fn csv_name(package: &str, version: &str) -> String {
    format!("{package}.v{version}")
}

/// The channel whose head is `version`.
pub fn channel_until(version: &str) -> String {
    format!("until-{version}")
}

/// The bundles' directory from the environment variable `variable`,
/// panicking with `how` (what sets it) when it is not set.
pub fn bundles_from_env(variable: &str, how: &str) -> PathBuf {
    match std::env::var(variable) {
        Ok(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => panic!("{variable} is not set: {how}"),
    }
}

/// Every object of a bundle's `manifests/`, as JSON, in file-name order.
pub fn bundle_objects(bundle: &Path) -> Vec<Value> {
    let manifests = bundle.join("manifests");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&manifests)
        .unwrap_or_else(|error| panic!("reading {}: {error}", manifests.display()))
        .map(|entry| entry.unwrap_or_else(|error| panic!("{error}")).path())
        .collect();
    files.sort();
    files
        .iter()
        .map(|file| {
            let text = std::fs::read_to_string(file)
                .unwrap_or_else(|error| panic!("reading {}: {error}", file.display()));
            Value::deserialize(serde_yaml::Deserializer::from_str(&text))
                .unwrap_or_else(|error| panic!("{}: {error}", file.display()))
        })
        .collect()
}

impl BundledReleases<'_> {
    /// The CSV name of `version`.
    pub fn csv_name(&self, version: &str) -> String {
        csv_name(self.package, version)
    }

    /// The catalog's documents: the package, one channel per version
    /// ending there (the last the default), each version replacing the one
    /// before — asserting each bundle's CSV is named so and replaces so.
    pub fn catalog(&self) -> Vec<Value> {
        let package = self.package;
        let last = self.versions.last().expect("at least one version");
        let mut documents = vec![json!({
            "schema": "olm.package",
            "name": package,
            "defaultChannel": channel_until(last),
        })];
        let mut entries = Vec::new();
        let mut previous: Option<String> = None;
        for version in self.versions {
            let name = self.csv_name(version);
            let objects = bundle_objects(&self.bundles.join(version));
            let csv = objects
                .iter()
                .find(|object| object["kind"] == "ClusterServiceVersion")
                .unwrap_or_else(|| panic!("the bundle of {version} has no CSV"));
            assert_eq!(csv["metadata"]["name"], name.as_str());
            assert_eq!(
                csv["spec"]["replaces"].as_str(),
                previous.as_deref(),
                "{name} replaces the release before it"
            );
            let mut entry = json!({"name": name});
            if let Some(replaced) = &previous {
                entry["replaces"] = json!(replaced);
            }
            entries.push(entry);
            documents.push(json!({
                "schema": "olm.channel",
                "package": package,
                "name": channel_until(version),
                "entries": entries,
            }));
            let mut properties = vec![
                json!({"type": "olm.package", "value": {"packageName": package, "version": version}}),
            ];
            for object in &objects {
                let data = base64::engine::general_purpose::STANDARD.encode(object.to_string());
                properties.push(json!({"type": "olm.bundle.object", "value": {"data": data}}));
            }
            documents.push(json!({
                "schema": "olm.bundle",
                "name": name,
                "package": package,
                "image": "",
                "properties": properties,
            }));
            previous = Some(name);
        }
        documents
    }

    /// Writes [`BundledReleases::catalog`] to `<dir>/<package>/catalog.json`
    /// (one JSON document a line), for `opm serve <dir>`.
    pub fn write_catalog(&self, dir: &Path) {
        let package_dir = dir.join(self.package);
        std::fs::create_dir_all(&package_dir)
            .unwrap_or_else(|error| panic!("creating {}: {error}", package_dir.display()));
        let text: String = self
            .catalog()
            .iter()
            .map(|document| format!("{document}\n"))
            .collect();
        std::fs::write(package_dir.join("catalog.json"), text)
            .unwrap_or_else(|error| panic!("writing the catalog: {error}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bundle(dir: &Path, version: &str, replaces: Option<&str>) {
        let manifests = dir.join(version).join("manifests");
        std::fs::create_dir_all(&manifests).unwrap();
        let replaces = replaces.map_or(String::new(), |r| format!("\n  replaces: {r}"));
        std::fs::write(
            manifests.join("csv.yaml"),
            format!(
                "apiVersion: operators.coreos.com/v1alpha1\nkind: ClusterServiceVersion\nmetadata:\n  name: w.v{version}\nspec:\n  version: {version}{replaces}\n"
            ),
        )
        .unwrap();
    }

    #[test]
    fn each_version_gets_a_channel_ending_there_and_replaces_the_one_before() {
        let dir = tempfile::tempdir().unwrap();
        bundle(dir.path(), "0.1.0", None);
        bundle(dir.path(), "0.2.0", Some("w.v0.1.0"));
        let releases = BundledReleases {
            package: "w",
            bundles: dir.path(),
            versions: &["0.1.0", "0.2.0"],
        };
        let documents = releases.catalog();
        let schemas: Vec<_> = documents.iter().map(|d| d["schema"].clone()).collect();
        assert_eq!(
            schemas,
            [
                "olm.package",
                "olm.channel",
                "olm.bundle",
                "olm.channel",
                "olm.bundle"
            ]
        );
        assert_eq!(documents[0]["defaultChannel"], "until-0.2.0");
        assert_eq!(
            documents[3]["entries"],
            json!([{"name": "w.v0.1.0"}, {"name": "w.v0.2.0", "replaces": "w.v0.1.0"}])
        );
        assert_eq!(documents[4]["properties"].as_array().unwrap().len(), 2);
    }

    #[test]
    #[should_panic(expected = "w.v0.2.0 replaces the release before it")]
    fn a_bundle_that_replaces_another_release_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        bundle(dir.path(), "0.1.0", None);
        bundle(dir.path(), "0.2.0", None);
        BundledReleases {
            package: "w",
            bundles: dir.path(),
            versions: &["0.1.0", "0.2.0"],
        }
        .catalog();
    }
}
