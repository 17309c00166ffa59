//! Test-time variants of a catalog a run serves — a release published
//! after the others, a skipRange — made by editing its file-based catalog
//! documents (the arms' variants are release-tools' own renderings, see
//! `arm`).
//!
//! Owns: those edits and the directories they are written to (temporary
//! ones). Must not touch: the committed catalogs.

use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};

use super::facts::{CSV_PREFIX, RELEASE_ENV};

/// The package's directory and file inside a catalog directory.
const CATALOG_FILE: &str = "upgrade-gate/catalog.json";

/// The documents of a file-based catalog directory.
pub fn read_documents(catalog_dir: &Path) -> Vec<Value> {
    let path = catalog_dir.join(CATALOG_FILE);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("reading {}: {error}", path.display()));
    serde_json::Deserializer::from_str(&text)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|error| {
            panic!(
                "{} is not a stream of JSON documents: {error}",
                path.display()
            )
        })
}

/// Writes `documents` as the catalog of `dir` (created).
pub fn write_documents(dir: &Path, documents: &[Value]) {
    let path = dir.join(CATALOG_FILE);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .unwrap_or_else(|error| panic!("creating {}: {error}", parent.display()));
    }
    let text: String = documents
        .iter()
        .map(|document| format!("{document}\n"))
        .collect();
    std::fs::write(&path, text)
        .unwrap_or_else(|error| panic!("writing {}: {error}", path.display()));
}

fn csv_name(release: &str) -> String {
    format!("{CSV_PREFIX}{release}")
}

fn bundle_mut<'a>(documents: &'a mut [Value], release: &str) -> &'a mut Value {
    let name = csv_name(release);
    documents
        .iter_mut()
        .find(|document| document["schema"] == "olm.bundle" && document["name"] == name.as_str())
        .unwrap_or_else(|| panic!("the catalog has no bundle {name}"))
}

/// Applies `edit` to the CSV inline in a bundle document.
fn edit_csv(bundle: &mut Value, mut edit: impl FnMut(&mut Value)) {
    let name = bundle["name"].to_string();
    let properties = bundle["properties"]
        .as_array_mut()
        .unwrap_or_else(|| panic!("bundle {name} has no properties"));
    for property in properties {
        if property["type"] != "olm.bundle.object" {
            continue;
        }
        let data = property["value"]["data"].as_str().unwrap_or_default();
        let decoded = BASE64
            .decode(data)
            .unwrap_or_else(|error| panic!("a bundle object is not base64: {error}"));
        let mut object: Value = serde_json::from_slice(&decoded)
            .unwrap_or_else(|error| panic!("a bundle object is not JSON: {error}"));
        if object["kind"] != "ClusterServiceVersion" {
            continue;
        }
        edit(&mut object);
        property["value"]["data"] = json!(BASE64.encode(object.to_string()));
    }
}

/// Sets `name`'s value in every container env list of the CSV's Deployments.
fn set_env(csv: &mut Value, name: &str, value: &str) {
    let Some(deployments) = csv
        .pointer_mut("/spec/install/spec/deployments")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for deployment in deployments {
        for list in ["containers", "initContainers"] {
            let Some(containers) = deployment
                .pointer_mut(&format!("/spec/template/spec/{list}"))
                .and_then(Value::as_array_mut)
            else {
                continue;
            };
            for env in containers
                .iter_mut()
                .filter_map(|c| c["env"].as_array_mut())
            {
                for var in env.iter_mut().filter(|var| var["name"] == name) {
                    var["value"] = json!(value);
                }
            }
        }
    }
}

/// Publishes `release` after `previous` in `previous`'s channels: a copy
/// of `previous`'s bundle acting as `release` (no new migrations).
pub fn add_release(documents: &mut Vec<Value>, previous: &str, release: &str) {
    let (old_name, new_name) = (csv_name(previous), csv_name(release));
    let mut bundle = bundle_mut(documents, previous).clone();
    let renamed: Value = serde_json::from_str(
        &bundle
            .to_string()
            .replace(&format!("\"{old_name}\""), &format!("\"{new_name}\"")),
    )
    .unwrap_or_else(|error| panic!("renaming the bundle: {error}"));
    bundle = renamed;
    for property in bundle["properties"].as_array_mut().into_iter().flatten() {
        if property["type"] == "olm.package" {
            property["value"]["version"] = json!(release);
        }
    }
    edit_csv(&mut bundle, |csv| {
        let text = csv.to_string().replace(&old_name, &new_name);
        *csv =
            serde_json::from_str(&text).unwrap_or_else(|error| panic!("renaming the CSV: {error}"));
        csv["spec"]["version"] = json!(release);
        csv["spec"]["replaces"] = json!(old_name);
        set_env(csv, RELEASE_ENV, release);
    });
    for channel in documents
        .iter_mut()
        .filter(|document| document["schema"] == "olm.channel")
    {
        let entries = channel["entries"].as_array_mut();
        let Some(entries) = entries else { continue };
        if entries
            .iter()
            .any(|entry| entry["name"] == old_name.as_str())
        {
            entries.push(json!({"name": new_name, "replaces": old_name}));
        }
    }
    documents.push(bundle);
}

/// Lets `release` replace any release in `range` directly (`skipRange` on
/// its channel entries and its CSV's `olm.skipRange` annotation).
pub fn set_skip_range(documents: &mut [Value], release: &str, range: &str) {
    let name = csv_name(release);
    for channel in documents
        .iter_mut()
        .filter(|document| document["schema"] == "olm.channel")
    {
        for entry in channel["entries"].as_array_mut().into_iter().flatten() {
            if entry["name"] == name.as_str() {
                entry["skipRange"] = json!(range);
            }
        }
    }
    edit_csv(bundle_mut(documents, release), |csv| {
        csv["metadata"]["annotations"]["olm.skipRange"] = json!(range);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local() -> Vec<Value> {
        read_documents(&crate::repository_root().join("catalog-local"))
    }

    fn csv_of(documents: &mut [Value], release: &str) -> Value {
        let mut found = Value::Null;
        edit_csv(bundle_mut(documents, release), |csv| found = csv.clone());
        found
    }

    #[test]
    fn a_published_release_follows_the_previous_one_in_its_channels() {
        let mut documents = local();
        add_release(&mut documents, "7.10.1", "7.10.2");
        let csv = csv_of(&mut documents, "7.10.2");
        assert_eq!(csv["metadata"]["name"], "upgrade-gate.v7.10.2");
        assert_eq!(csv["spec"]["version"], "7.10.2");
        assert_eq!(csv["spec"]["replaces"], "upgrade-gate.v7.10.1");
        let text = csv.to_string();
        assert_eq!(
            text.matches("upgrade-gate.v7.10.1").count(),
            1,
            "only spec.replaces names the previous release: {text}"
        );
        assert!(
            text.contains(&format!("\"name\":\"{RELEASE_ENV}\",\"value\":\"7.10.2\"")),
            "{text}"
        );
        let channel = documents
            .iter()
            .find(|document| document["schema"] == "olm.channel" && document["name"] == "7.10.x")
            .expect("channel 7.10.x");
        assert_eq!(
            channel["entries"]
                .as_array()
                .and_then(|entries| entries.last())
                .cloned(),
            Some(json!({"name": "upgrade-gate.v7.10.2", "replaces": "upgrade-gate.v7.10.1"}))
        );
        let package_version = documents
            .iter()
            .find(|document| document["name"] == "upgrade-gate.v7.10.2")
            .and_then(|bundle| {
                bundle["properties"]
                    .as_array()?
                    .iter()
                    .find(|property| property["type"] == "olm.package")
                    .map(|property| property["value"]["version"].clone())
            });
        assert_eq!(package_version, Some(json!("7.10.2")));
        // The original stays as it was.
        assert_eq!(
            csv_of(&mut documents, "7.10.1")["spec"]["version"],
            "7.10.1"
        );
    }

    #[test]
    fn a_skip_range_reaches_the_channel_entries_and_the_csv() {
        let mut documents = local();
        set_skip_range(&mut documents, "7.10.1", ">=7.9.3 <7.10.1");
        let entries: Vec<&Value> = documents
            .iter()
            .filter(|document| document["schema"] == "olm.channel")
            .flat_map(|channel| channel["entries"].as_array().into_iter().flatten())
            .filter(|entry| entry["name"] == "upgrade-gate.v7.10.1")
            .collect();
        assert!(!entries.is_empty());
        assert!(
            entries
                .iter()
                .all(|entry| entry["skipRange"] == ">=7.9.3 <7.10.1")
        );
        assert_eq!(
            csv_of(&mut documents, "7.10.1")["metadata"]["annotations"]["olm.skipRange"],
            ">=7.9.3 <7.10.1"
        );
    }

    #[test]
    fn documents_round_trip_through_a_directory() {
        let documents = local();
        let dir = tempfile::tempdir().expect("temp dir");
        write_documents(dir.path(), &documents);
        assert_eq!(read_documents(dir.path()), documents);
    }
}
