//! The namespace's UpgradeRecord as the admission tests write and read it:
//! an operator's entry written by hand (as a cluster admin may), the
//! override a refusal prints, and `kubectl patch` of the record as a
//! person types it.
//!
//! Owns: nothing on the cluster but the record's writes it is asked for.

use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use upgrade_gate::admission::{self, RECORD_NAME};

/// The namespace's records.
pub fn records(client: &Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &admission::record_resource())
}

/// Writes operator `operator`'s entry as its operator would (as an admin,
/// by hand), naming the containers it runs (`name=image`).
pub async fn write_entry(
    client: &Client,
    namespace: &str,
    operator: &str,
    release: &str,
    state: &str,
    images: &[&str],
) {
    let api = records(client, namespace);
    let entry = json!({"release": release, "state": state,
        "message": format!("release {release}: migrating"), "images": images});
    if api
        .get_opt(RECORD_NAME)
        .await
        .unwrap_or_else(|e| panic!("reading the record: {e}"))
        .is_none()
    {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "upgrade-gate.dev/v1alpha1", "kind": "UpgradeRecord",
            "metadata": {"name": RECORD_NAME, "namespace": namespace},
            "spec": {"operators": {operator: entry}}
        }))
        .expect("a record");
        api.create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| panic!("creating the record: {e}"));
        return;
    }
    api.patch(
        RECORD_NAME,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"operators": {operator: entry}}})),
    )
    .await
    .unwrap_or_else(|e| panic!("writing the record: {e}"));
}

/// The merge patch of the override a refusal prints (`kubectl ... -p '<patch>'`).
pub fn printed_override(refusal: &str) -> String {
    let start = refusal
        .find(" -p '")
        .unwrap_or_else(|| panic!("the refusal prints an override: {refusal}"));
    let patch = &refusal[start + " -p '".len()..];
    let end = patch
        .find("'")
        .unwrap_or_else(|| panic!("the override's end: {refusal}"));
    patch[..end].to_owned()
}

/// `kubectl -n ns patch upgraderecord upgrade-gate --type merge -p patch`.
pub fn patch_record<'a>(ns: &'a str, patch: &'a str) -> Vec<&'a str> {
    vec![
        "-n",
        ns,
        "patch",
        "upgraderecord",
        RECORD_NAME,
        "--type",
        "merge",
        "-p",
        patch,
    ]
}

/// `args` followed by `more`.
pub fn with<'a>(mut args: Vec<&'a str>, more: &[&'a str]) -> Vec<&'a str> {
    args.extend_from_slice(more);
    args
}
