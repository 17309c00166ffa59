//! The file-based catalog (FBC) of the `upgrade-gate` package, in two forms:
//! one whose bundles are images (to publish), one whose bundles carry their
//! manifests inline (`olm.bundle.object`, for clusters that cannot pull a
//! bundle image: the local cluster, kind with a loaded image).
//!
//! Owns: the FBC documents (package, channels, bundles and their
//! properties). Must not touch: files, or what is in a CSV.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};

use crate::releases::{self, Channel, PACKAGE, Release};

/// How a bundle reaches the cluster.
#[derive(Debug, Clone, PartialEq)]
pub enum BundleSource {
    /// A pullable bundle image; the catalog summarizes its CSV.
    Image {
        bundle_image: String,
        csv_metadata: Value,
    },
    /// Every manifest inline; no image to pull.
    Inline { manifests: Vec<Value> },
}

/// One bundle of the catalog.
#[derive(Debug, Clone, PartialEq)]
pub struct CatalogBundle {
    pub release: Release,
    /// The operator image the CSV runs (listed as a related image).
    pub operator_image: String,
    /// The (group, version, kind)s of the CRDs it owns.
    pub provided_apis: Vec<(String, String, String)>,
    pub source: BundleSource,
}

/// The catalog's documents: the package, its channels, its bundles.
pub fn catalog_documents(
    releases: &[Release],
    bundles: &[CatalogBundle],
    description: &str,
    icon: Value,
) -> Vec<Value> {
    let mut documents = vec![json!({
        "schema": "olm.package",
        "name": PACKAGE,
        "defaultChannel": releases::default_channel(releases),
        "description": description,
        "icon": icon,
    })];
    documents.extend(releases::channels(releases).iter().map(channel_document));
    documents.extend(bundles.iter().map(bundle_document));
    documents
}

fn channel_document(channel: &Channel) -> Value {
    let entries: Vec<Value> = channel
        .entries
        .iter()
        .map(|entry| {
            let mut value = json!({"name": entry.csv_name});
            if let Some(replaces) = &entry.replaces {
                value["replaces"] = json!(replaces);
            }
            if let Some(range) = &entry.skip_range {
                value["skipRange"] = json!(range);
            }
            value
        })
        .collect();
    json!({
        "schema": "olm.channel",
        "package": PACKAGE,
        "name": channel.name,
        "entries": entries,
    })
}

fn bundle_document(bundle: &CatalogBundle) -> Value {
    let mut properties = vec![json!({
        "type": "olm.package",
        "value": {"packageName": PACKAGE, "version": bundle.release.version},
    })];
    properties.extend(bundle.provided_apis.iter().map(|(group, version, kind)| {
        json!({"type": "olm.gvk", "value": {"group": group, "kind": kind, "version": version}})
    }));
    let mut related_images = Vec::new();
    let image = match &bundle.source {
        BundleSource::Image {
            bundle_image,
            csv_metadata,
        } => {
            properties.push(json!({"type": "olm.csv.metadata", "value": csv_metadata}));
            related_images.push(json!({"name": "", "image": bundle_image}));
            bundle_image.clone()
        }
        BundleSource::Inline { manifests } => {
            properties.extend(manifests.iter().map(|manifest| {
                json!({"type": "olm.bundle.object", "value": {"data": BASE64.encode(manifest.to_string())}})
            }));
            String::new()
        }
    };
    related_images.push(json!({"name": "upgrade-gate", "image": bundle.operator_image}));
    json!({
        "schema": "olm.bundle",
        "name": releases::csv_name(bundle.release.version),
        "package": PACKAGE,
        "image": image,
        "properties": properties,
        "relatedImages": related_images,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::releases::RELEASES;

    fn bundle(version: &str, source: BundleSource) -> CatalogBundle {
        CatalogBundle {
            release: *releases::find(version).unwrap(),
            operator_image: "r/upgrade-gate:7.10.1".into(),
            provided_apis: vec![("upgrade-gate.dev".into(), "v1alpha1".into(), "App".into())],
            source,
        }
    }

    #[test]
    fn package_and_channels_replay_the_feature_request() {
        let documents = catalog_documents(RELEASES, &[], "d", json!({}));
        assert_eq!(documents[0]["defaultChannel"], "7.10.x");
        let channel = |name: &str| {
            documents
                .iter()
                .find(|d| d["schema"] == "olm.channel" && d["name"] == name)
                .unwrap()["entries"]
                .clone()
        };
        assert_eq!(channel("7.9.x"), json!([{"name": "upgrade-gate.v7.9.3"}]));
        assert_eq!(
            channel("7.10.x"),
            json!([
                {"name": "upgrade-gate.v7.10.0", "replaces": "upgrade-gate.v7.9.3"},
                {"name": "upgrade-gate.v7.10.1", "replaces": "upgrade-gate.v7.10.0"}
            ])
        );
        assert_eq!(channel("latest").as_array().unwrap().len(), 3);
    }

    #[test]
    fn inline_bundles_have_no_image_and_one_object_per_manifest() {
        let manifests = vec![
            json!({"kind": "ClusterServiceVersion"}),
            json!({"kind": "CustomResourceDefinition"}),
        ];
        let document = bundle_document(&bundle("7.10.0", BundleSource::Inline { manifests }));
        assert_eq!(document["image"], "");
        let objects: Vec<&Value> = document["properties"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["type"] == "olm.bundle.object")
            .collect();
        assert_eq!(objects.len(), 2);
        let decoded = BASE64
            .decode(objects[0]["value"]["data"].as_str().unwrap())
            .unwrap();
        let decoded: Value = serde_json::from_slice(&decoded).unwrap();
        assert_eq!(decoded["kind"], "ClusterServiceVersion");
    }

    #[test]
    fn image_bundles_reference_their_image_and_summarize_the_csv() {
        let source = BundleSource::Image {
            bundle_image: "r/upgrade-gate-bundle:v7.9.3".into(),
            csv_metadata: json!({"displayName": "x"}),
        };
        let document = bundle_document(&bundle("7.9.3", source));
        assert_eq!(document["image"], "r/upgrade-gate-bundle:v7.9.3");
        assert_eq!(document["properties"][0]["value"]["version"], "7.9.3");
        assert_eq!(document["properties"][1]["value"]["kind"], "App");
        assert_eq!(document["properties"][2]["type"], "olm.csv.metadata");
        assert_eq!(
            document["relatedImages"][0]["image"],
            "r/upgrade-gate-bundle:v7.9.3"
        );
    }
}
