//! The CSV's spec and status descriptors of the App: which fields a console
//! shows, under which name and widget. Descriptions come from the CRD's
//! schema (itself generated from the Rust types), so they never drift.
//!
//! Owns: the descriptor table and the check that every path exists in the
//! CRD. Must not touch: files or the rest of the CSV.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};
use serde::Serialize;

/// One descriptor as the CSV carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    pub path: String,
    pub display_name: String,
    pub description: String,
    #[serde(rename = "x-descriptors")]
    pub x_descriptors: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DescriptorError {
    #[error("the CRD has no served version {0:?} with a schema")]
    NoSchema(String),
    #[error("descriptor path {section}.{path} is not in the CRD schema")]
    UnknownPath { section: &'static str, path: String },
}

type Row = (&'static str, &'static str, &'static [&'static str]);

const SPEC: &[Row] = &[
    (
        "database.secretRef.name",
        "Database Secret",
        &["urn:alm:descriptor:io.kubernetes:Secret"],
    ),
    (
        "database.sslMode",
        "TLS mode",
        &[
            "urn:alm:descriptor:com.tectonic.ui:select:disable",
            "urn:alm:descriptor:com.tectonic.ui:select:prefer",
            "urn:alm:descriptor:com.tectonic.ui:select:require",
        ],
    ),
    (
        "server.replicas",
        "Server replicas",
        &["urn:alm:descriptor:com.tectonic.ui:podCount"],
    ),
    (
        "server.image",
        "Server image",
        &[
            "urn:alm:descriptor:com.tectonic.ui:text",
            "urn:alm:descriptor:com.tectonic.ui:advanced",
        ],
    ),
    (
        "upgrade.backupVolumeClaim",
        "Backup PersistentVolumeClaim",
        &["urn:alm:descriptor:io.kubernetes:PersistentVolumeClaim"],
    ),
    (
        "upgrade.jobTimeoutSeconds",
        "Upgrade Job timeout (seconds)",
        &[
            "urn:alm:descriptor:com.tectonic.ui:number",
            "urn:alm:descriptor:com.tectonic.ui:advanced",
        ],
    ),
    (
        "upgrade.retryLimit",
        "Upgrade retry limit",
        &[
            "urn:alm:descriptor:com.tectonic.ui:number",
            "urn:alm:descriptor:com.tectonic.ui:advanced",
        ],
    ),
];

const STATUS: &[Row] = &[
    (
        "phase",
        "Phase",
        &["urn:alm:descriptor:io.kubernetes.phase"],
    ),
    (
        "conditions",
        "Conditions",
        &["urn:alm:descriptor:io.kubernetes.conditions"],
    ),
    (
        "database.release",
        "Database release",
        &["urn:alm:descriptor:text"],
    ),
    (
        "database.migration",
        "Newest migration",
        &["urn:alm:descriptor:text"],
    ),
    (
        "upgrade.from",
        "Upgrading from",
        &["urn:alm:descriptor:text"],
    ),
    ("upgrade.to", "Upgrading to", &["urn:alm:descriptor:text"]),
    (
        "upgrade.job",
        "Upgrade Job",
        &["urn:alm:descriptor:io.kubernetes:Job"],
    ),
    (
        "upgrade.phase",
        "Upgrade phase",
        &["urn:alm:descriptor:text"],
    ),
    (
        "upgrade.attempts",
        "Upgrade attempts",
        &["urn:alm:descriptor:text"],
    ),
    (
        "upgrade.backupLocation",
        "Backup location",
        &["urn:alm:descriptor:text"],
    ),
];

/// Spec and status descriptors of `version` of the CRD.
pub fn app_descriptors(
    crd: &CustomResourceDefinition,
    version: &str,
) -> Result<(Vec<Descriptor>, Vec<Descriptor>), DescriptorError> {
    let schema = crd
        .spec
        .versions
        .iter()
        .find(|v| v.name == version)
        .and_then(|v| v.schema.as_ref())
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .ok_or_else(|| DescriptorError::NoSchema(version.to_owned()))?;
    Ok((
        section(schema, "spec", SPEC)?,
        section(schema, "status", STATUS)?,
    ))
}

fn section(
    root: &JSONSchemaProps,
    section: &'static str,
    rows: &[Row],
) -> Result<Vec<Descriptor>, DescriptorError> {
    rows.iter()
        .map(|(path, display_name, x_descriptors)| {
            let field = lookup(root, &format!("{section}.{path}")).ok_or_else(|| {
                DescriptorError::UnknownPath {
                    section,
                    path: (*path).to_owned(),
                }
            })?;
            Ok(Descriptor {
                path: (*path).to_owned(),
                display_name: (*display_name).to_owned(),
                description: field.description.clone().unwrap_or_default(),
                x_descriptors: x_descriptors.iter().map(|x| (*x).to_owned()).collect(),
            })
        })
        .collect()
}

/// The schema of a dotted path below `root`.
fn lookup<'a>(root: &'a JSONSchemaProps, path: &str) -> Option<&'a JSONSchemaProps> {
    path.split('.')
        .try_fold(root, |schema, field| schema.properties.as_ref()?.get(field))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd(status_props: serde_json::Value) -> CustomResourceDefinition {
        serde_json::from_value(json!({
            "metadata": {"name": "apps.upgrade-gate.dev"},
            "spec": {
                "group": "upgrade-gate.dev", "scope": "Namespaced",
                "names": {"kind": "App", "plural": "apps"},
                "versions": [{"name": "v1alpha1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {"spec": {"type": "object", "properties": {}}, "status": {"type": "object", "properties": status_props}}
                }}}]
            }
        }))
        .unwrap()
    }

    #[test]
    fn descriptions_come_from_the_schema() {
        let schema = json!({"properties": {"a": {"properties": {"b": {"description": "the b"}}}}});
        let schema: JSONSchemaProps = serde_json::from_value(schema).unwrap();
        assert_eq!(
            lookup(&schema, "a.b").and_then(|s| s.description.as_deref()),
            Some("the b")
        );
        assert!(lookup(&schema, "a.c").is_none());
    }

    #[test]
    fn a_path_missing_from_the_crd_is_an_error() {
        let error = app_descriptors(&crd(json!({})), "v1alpha1").unwrap_err();
        assert!(matches!(
            error,
            DescriptorError::UnknownPath {
                section: "spec",
                ..
            }
        ));
        assert_eq!(
            app_descriptors(&crd(json!({})), "v1").unwrap_err(),
            DescriptorError::NoSchema("v1".into())
        );
    }
}
