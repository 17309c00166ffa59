//! The test operator `gate-probe` and a file-based catalog with its bundles
//! inline (`olm.bundle.object`, `image: ""`), built as JSON for `opm serve`.
//!
//! Owns: the shape of the test operator — an operator that adopted the gate
//! as docs/adopt.md says, using only the gate-only image and the CLI, not
//! our library: a CSV without CRDs whose Deployment runs `hold` from the
//! gate-only image (`localhost/upgrade-gate-hold`, entry point
//! `upgrade-gate`) as its first init container, with `OPERATOR_CONDITION_NAME`
//! written literally (OLM won't inject it into init containers) and
//! `POD_NAME` so the gate checks it against the pod's owners; the rights of
//! the recipe (its own OperatorCondition by name; get on pods, replicasets
//! and its Deployment for that check); `Recreate`; and a main container from
//! the project's image that first prints what `upgrade-gate status` says OLM
//! will decide, then sleeps (ready once it printed). `upgrade-gate
//! lint-bundle`'s checks pass on it. Optionally each bundle also owns a
//! CRD of the caller's ([`owned_crd`], [`write_catalog_owning`]), for a
//! test of what OLM does with a bundle's CRD.
//! Must not touch: the cluster (pure JSON, plus writing the catalog file).

use std::path::Path;

use base64::Engine;
use serde_json::{Value, json};

/// The package name in the catalog.
pub const PACKAGE: &str = "gate-probe";
/// The operator's Deployment (the same name in every version, as usual).
pub const DEPLOYMENT: &str = "gate-probe";
/// The operator's ServiceAccount.
pub const SERVICE_ACCOUNT: &str = "gate-probe";
/// The pod label selecting the operator's pods.
pub const POD_LABEL: (&str, &str) = ("app", "gate-probe");
/// The init container running `upgrade-gate hold`.
pub const GATE_CONTAINER: &str = "upgrade-gate";
/// The operator's main container.
pub const MAIN_CONTAINER: &str = "probe";

/// The channel that ends at `version`: every version up to it, each
/// replacing the one before. A Subscription moved from one such channel to
/// the next sees exactly one new version, after the current one installed.
pub fn channel_until(version: &str) -> String {
    format!("until-{version}")
}

/// The CSV (and OperatorCondition) name of `version`.
pub fn csv_name(version: &str) -> String {
    format!("{PACKAGE}.v{version}")
}

/// The images the test operator runs.
#[derive(Clone, Copy, Debug)]
pub struct Images<'a> {
    /// The gate-only image (`UPGRADE_GATE_HOLD_IMAGE`), for the init container.
    pub gate: &'a str,
    /// The project's image (`UPGRADE_GATE_IMAGE`: a shell, `sleep` and the
    /// CLI), for the main container.
    pub operator: &'a str,
}

/// The gate-only image the cluster has loaded (`just test-cluster` exports
/// `UPGRADE_GATE_HOLD_IMAGE`); panics with how to get it.
pub fn hold_image() -> String {
    match std::env::var("UPGRADE_GATE_HOLD_IMAGE") {
        Ok(image) if !image.is_empty() => image,
        _ => panic!(
            "UPGRADE_GATE_HOLD_IMAGE is not set: `just image` builds localhost/upgrade-gate-hold and `just test-cluster` loads and exports it"
        ),
    }
}

/// The CSV of `version`, replacing `replaces` (a CSV name) if given.
pub fn cluster_service_version(images: Images<'_>, version: &str, replaces: Option<&str>) -> Value {
    let name = csv_name(version);
    let (label, value) = POD_LABEL;
    let mut spec = json!({
        "displayName": "gate-probe",
        "description": "Test operator: its init container closes the upgrade gate before the main container starts",
        "version": version,
        "maturity": "alpha",
        "provider": {"name": "upgrade-gate tests"},
        "installModes": [
            {"type": "OwnNamespace", "supported": true},
            {"type": "SingleNamespace", "supported": true},
            {"type": "MultiNamespace", "supported": false},
            {"type": "AllNamespaces", "supported": false}
        ],
        "install": {
            "strategy": "deployment",
            "spec": {
                // OLM binds its own Role for the OperatorCondition
                // asynchronously; the CSV's permissions exist before the
                // Deployment does. Only its own OperatorCondition; the
                // reads of the pod's owners are the optional check.
                "permissions": [{
                    "serviceAccountName": SERVICE_ACCOUNT,
                    "rules": [
                        {
                            "apiGroups": ["operators.coreos.com"],
                            "resources": ["operatorconditions"],
                            "resourceNames": [name],
                            "verbs": ["get", "update", "patch"]
                        },
                        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
                        {"apiGroups": ["apps"], "resources": ["replicasets"], "verbs": ["get"]},
                        {
                            "apiGroups": ["apps"],
                            "resources": ["deployments"],
                            "resourceNames": [DEPLOYMENT],
                            "verbs": ["get"]
                        }
                    ]
                }],
                "deployments": [{
                    "name": DEPLOYMENT,
                    "spec": {
                        "replicas": 1,
                        "selector": {"matchLabels": {label: value}},
                        "strategy": {"type": "Recreate"},
                        "template": {
                            "metadata": {"labels": {label: value, "gate-probe/version": version}},
                            "spec": pod_spec(images, &name)
                        }
                    }
                }]
            }
        }
    });
    if let Some(replaced) = replaces {
        spec["replaces"] = json!(replaced);
    }
    json!({
        "apiVersion": "operators.coreos.com/v1alpha1",
        "kind": "ClusterServiceVersion",
        "metadata": {
            "name": name,
            "annotations": {"capabilities": "Seamless Upgrades"}
        },
        "spec": spec
    })
}

/// The operator pod: `hold` from the gate-only image as init container; the
/// main container records OLM's verdict at its own start (`upgrade-gate
/// status`, with the name OLM injects into main containers), then sleeps.
/// `sleep` as PID 1 ignores SIGTERM, hence the short grace period.
fn pod_spec(images: Images<'_>, csv: &str) -> Value {
    let restricted = json!({
        "allowPrivilegeEscalation": false,
        "readOnlyRootFilesystem": true,
        "runAsNonRoot": true,
        "capabilities": {"drop": ["ALL"]}
    });
    json!({
        "serviceAccountName": SERVICE_ACCOUNT,
        "terminationGracePeriodSeconds": 1,
        "initContainers": [{
            "name": GATE_CONTAINER,
            "image": images.gate,
            "imagePullPolicy": "Never",
            "args": ["hold"],
            "env": [
                {"name": "OPERATOR_CONDITION_NAME", "value": csv},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "UPGRADE_GATE_TIMEOUT", "value": "90s"}
            ],
            "securityContext": restricted
        }],
        "containers": [{
            "name": MAIN_CONTAINER,
            "image": images.operator,
            "imagePullPolicy": "Never",
            "command": ["sh", "-c", "upgrade-gate status > /tmp/verdict && cat /tmp/verdict && exec sleep infinity"],
            "readinessProbe": {"exec": {"command": ["test", "-s", "/tmp/verdict"]}, "periodSeconds": 1},
            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
            "securityContext": restricted
        }],
        "volumes": [{"name": "tmp", "emptyDir": {}}]
    })
}

/// A CRD for a bundle to own: `probes.<group>`, kind `Probe`, namespaced,
/// one version `v1` that keeps any field (a `group` of the test's own makes
/// it the test's alone).
pub fn owned_crd(group: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("probes.{group}")},
        "spec": {
            "group": group,
            "names": {"kind": "Probe", "listKind": "ProbeList", "plural": "probes", "singular": "probe"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}
            }]
        }
    })
}

/// One inline bundle object (`olm.bundle.object`).
fn bundle_object(object: &Value) -> Value {
    let data = base64::engine::general_purpose::STANDARD.encode(object.to_string());
    json!({"type": "olm.bundle.object", "value": {"data": data}})
}

/// The catalog's documents: the package, one channel per version
/// ([`channel_until`]; the default is the last one) and one inline bundle
/// per version, each replacing the one before.
pub fn catalog(images: Images<'_>, versions: &[&str]) -> Vec<Value> {
    catalog_owning(images, versions, None)
}

/// [`catalog`], each bundle owning `crd` (an [`owned_crd`]) when given: in
/// the CSV's `customresourcedefinitions.owned` and as a bundle object.
pub fn catalog_owning(images: Images<'_>, versions: &[&str], crd: Option<&Value>) -> Vec<Value> {
    let mut entries = Vec::new();
    let mut channels = Vec::new();
    let mut bundles = Vec::new();
    let mut previous: Option<String> = None;
    for version in versions {
        let name = csv_name(version);
        let mut csv = cluster_service_version(images, version, previous.as_deref());
        let mut objects = Vec::new();
        if let Some(crd) = crd {
            csv["spec"]["customresourcedefinitions"] = json!({"owned": [{
                "name": crd["metadata"]["name"],
                "version": "v1",
                "kind": crd["spec"]["names"]["kind"],
                "displayName": "Probe",
                "description": "A CRD the test operator owns"
            }]});
            objects.push(bundle_object(crd));
        }
        objects.push(bundle_object(&csv));
        let mut entry = json!({"name": name});
        if let Some(replaced) = &previous {
            entry["replaces"] = json!(replaced);
        }
        entries.push(entry);
        channels.push(json!({
            "schema": "olm.channel",
            "package": PACKAGE,
            "name": channel_until(version),
            "entries": entries
        }));
        let mut properties = vec![
            json!({"type": "olm.package", "value": {"packageName": PACKAGE, "version": version}}),
        ];
        properties.extend(objects);
        bundles.push(json!({
            "schema": "olm.bundle",
            "name": name,
            "package": PACKAGE,
            "image": "",
            "properties": properties
        }));
        previous = Some(name);
    }
    let default_channel = versions
        .last()
        .map(|v| channel_until(v))
        .unwrap_or_default();
    let mut documents =
        vec![json!({"schema": "olm.package", "name": PACKAGE, "defaultChannel": default_channel})];
    documents.extend(channels);
    documents.extend(bundles);
    documents
}

/// Writes [`catalog`] to `dir/gate-probe/catalog.json` (the layout `opm serve` reads).
pub fn write_catalog(dir: &Path, images: Images<'_>, versions: &[&str]) {
    write_catalog_owning(dir, images, versions, None);
}

/// Writes [`catalog_owning`] as [`write_catalog`] does.
pub fn write_catalog_owning(
    dir: &Path,
    images: Images<'_>,
    versions: &[&str],
    crd: Option<&Value>,
) {
    let package_dir = dir.join(PACKAGE);
    std::fs::create_dir_all(&package_dir)
        .unwrap_or_else(|error| panic!("creating {}: {error}", package_dir.display()));
    let text: String = catalog_owning(images, versions, crd)
        .iter()
        .map(|document| format!("{document}\n"))
        .collect();
    let file = package_dir.join("catalog.json");
    std::fs::write(&file, text)
        .unwrap_or_else(|error| panic!("writing {}: {error}", file.display()));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bundle_objects(bundle: &Value) -> Vec<Value> {
        bundle["properties"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["type"] == "olm.bundle.object")
            .map(|p| {
                let data = p["value"]["data"].as_str().expect("inline data");
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(data)
                    .expect("base64");
                serde_json::from_slice(&bytes).expect("JSON")
            })
            .collect()
    }

    fn bundle_csv(bundle: &Value) -> Value {
        bundle_objects(bundle)
            .into_iter()
            .find(|object| object["kind"] == "ClusterServiceVersion")
            .expect("every bundle carries its CSV inline")
    }

    const IMAGES: Images<'static> = Images {
        gate: "gate-img",
        operator: "img",
    };

    #[test]
    fn each_channel_ends_one_version_later_and_each_version_replaces_the_one_before() {
        let documents = catalog(IMAGES, &["0.1.0", "0.2.0", "0.3.0"]);
        assert_eq!(documents[0]["schema"], "olm.package");
        assert_eq!(documents[0]["defaultChannel"], "until-0.3.0");
        assert_eq!(documents[1]["name"], "until-0.1.0");
        assert_eq!(
            documents[1]["entries"],
            json!([{"name": "gate-probe.v0.1.0"}])
        );
        let last = &documents[3]["entries"];
        assert_eq!(last.as_array().map(Vec::len), Some(3));
        assert_eq!(last[2]["replaces"], "gate-probe.v0.2.0");
        let csvs: Vec<Value> = documents[4..].iter().map(bundle_csv).collect();
        assert_eq!(csvs.len(), 3);
        assert!(csvs[0]["spec"].get("replaces").is_none());
        assert_eq!(csvs[1]["spec"]["replaces"], "gate-probe.v0.1.0");
        assert_eq!(documents[4]["image"], "");
    }

    #[test]
    fn a_bundle_owning_a_crd_carries_it_and_its_csv_says_so() {
        let crd = owned_crd("t1.upgrade-gate.test");
        assert_eq!(crd["metadata"]["name"], "probes.t1.upgrade-gate.test");
        let documents = catalog_owning(IMAGES, &["0.1.0", "0.2.0"], Some(&crd));
        for bundle in &documents[3..] {
            let objects = bundle_objects(bundle);
            assert_eq!(objects.len(), 2);
            assert!(objects.contains(&crd));
            let owned = &bundle_csv(bundle)["spec"]["customresourcedefinitions"]["owned"];
            assert_eq!(
                owned,
                &json!([{"name": "probes.t1.upgrade-gate.test", "version": "v1", "kind": "Probe",
                         "displayName": "Probe", "description": "A CRD the test operator owns"}])
            );
        }
        let plain = catalog(IMAGES, &["0.1.0"]);
        assert_eq!(bundle_objects(&plain[2]).len(), 1);
        assert!(
            bundle_csv(&plain[2])["spec"]
                .get("customresourcedefinitions")
                .is_none()
        );
    }

    #[test]
    fn the_init_container_names_its_own_operator_condition_literally() {
        let csv = cluster_service_version(IMAGES, "0.2.0", None);
        let deployment = &csv["spec"]["install"]["spec"]["deployments"][0]["spec"];
        let init = &deployment["template"]["spec"]["initContainers"][0];
        assert_eq!(
            (&init["image"], &init["args"]),
            (&json!("gate-img"), &json!(["hold"]))
        );
        assert_eq!(init["env"][0]["value"], "gate-probe.v0.2.0");
        assert_eq!(deployment["strategy"]["type"], "Recreate");
        let rule = &csv["spec"]["install"]["spec"]["permissions"][0]["rules"][0];
        assert_eq!(rule["resourceNames"], json!(["gate-probe.v0.2.0"]));
    }

    #[test]
    fn the_test_operator_passes_lint_bundle() {
        let csv = cluster_service_version(IMAGES, "0.2.0", Some("gate-probe.v0.1.0"));
        let findings = upgrade_gate::bundle_lint::check_csv(&csv, "gate-probe", &[]);
        assert_eq!(
            findings,
            [],
            "the recipe of docs/adopt.md, as lint-bundle checks it"
        );
    }
}
