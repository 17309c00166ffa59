//! The `operators.coreos.com/v2` `OperatorCondition` resource, read and
//! written whole, so that a full update sends back everything it read.
//!
//! Owns: the Rust shape of the object and lenient read access to its
//! condition lists. Must not touch: the cluster (no I/O here).
//!
//! Condition lists (`spec.conditions`, `spec.overrides`, `status.conditions`)
//! are kept as JSON values, not as typed `metav1.Condition`s, so that entries
//! written by others — with fields this crate does not know, or not valid at
//! all — are sent back exactly as they were read. The API server stores JSON
//! objects with their keys sorted (Go's `encoding/json` on unstructured
//! maps), and `serde_json::Value` maps are sorted the same way, so an entry
//! read and written back yields the very bytes the server would store.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The API group of `OperatorCondition`.
pub const GROUP: &str = "operators.coreos.com";
/// The API version this crate speaks: v2, the storage version and the only
/// one with `spec.conditions`.
pub const VERSION: &str = "v2";
/// The resource's plural name, as served by the API server.
pub const PLURAL: &str = "operatorconditions";
/// The resource's kind.
pub const KIND: &str = "OperatorCondition";
/// The condition type OLM reads to decide whether an operator may be upgraded.
pub const UPGRADEABLE: &str = "Upgradeable";

/// One `OperatorCondition` as the API server returned it.
///
/// There is no public constructor and no public mutator: OLM creates these
/// objects, and this crate changes only the `Upgradeable` entry of
/// `spec.conditions` (see [`crate::operator_condition::OperatorConditionClient`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OperatorCondition {
    #[serde(rename = "apiVersion", default = "default_api_version")]
    api_version: String,
    #[serde(default = "default_kind")]
    kind: String,
    #[serde(default)]
    pub(crate) metadata: ObjectMeta,
    #[serde(default)]
    pub(crate) spec: OperatorConditionSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) status: Option<OperatorConditionStatus>,
}

fn default_api_version() -> String {
    format!("{GROUP}/{VERSION}")
}

fn default_kind() -> String {
    KIND.to_owned()
}

/// `spec` of an `OperatorCondition`. OLM fills `deployments` and
/// `serviceAccounts`; operators write `conditions`; admins write `overrides`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OperatorConditionSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    service_accounts: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    deployments: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    overrides: Option<Vec<Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) conditions: Option<Vec<Value>>,
    /// Fields of a newer OLM this crate does not know; sent back unchanged.
    #[serde(flatten)]
    unknown_fields: Map<String, Value>,
}

/// `status` of an `OperatorCondition`: OLM's copy of `spec.conditions`,
/// each entry stamped with the `observedGeneration` it was copied at.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OperatorConditionStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    conditions: Option<Vec<Value>>,
    #[serde(flatten)]
    unknown_fields: Map<String, Value>,
}

impl kube::Resource for OperatorCondition {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(KIND)
    }
    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(GROUP)
    }
    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(VERSION)
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(PLURAL)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl OperatorCondition {
    /// `metadata.generation`; absent counts as 0, as in OLM's Go types.
    pub fn generation(&self) -> i64 {
        self.metadata.generation.unwrap_or(0)
    }

    /// `spec.deployments`: the Deployments OLM waits for before it copies
    /// spec into status.
    pub fn deployments(&self) -> &[String] {
        self.spec.deployments.as_deref().unwrap_or_default()
    }

    /// `spec.serviceAccounts`: the identities OLM grants access to this object.
    pub fn service_accounts(&self) -> &[String] {
        self.spec.service_accounts.as_deref().unwrap_or_default()
    }

    /// Every entry of `spec.conditions`, in order, including foreign ones.
    pub fn spec_conditions(&self) -> impl Iterator<Item = ConditionView<'_>> {
        views(self.spec.conditions.as_deref())
    }

    /// Every entry of `spec.overrides`, in order.
    pub fn overrides(&self) -> impl Iterator<Item = ConditionView<'_>> {
        views(self.spec.overrides.as_deref())
    }

    /// Every entry of `status.conditions`, in order.
    pub fn status_conditions(&self) -> impl Iterator<Item = ConditionView<'_>> {
        views(self.status.as_ref().and_then(|s| s.conditions.as_deref()))
    }

    /// The `Upgradeable` entry of `spec.overrides` OLM reads: the first one
    /// (`meta.FindStatusCondition`).
    pub fn upgradeable_override(&self) -> Option<ConditionView<'_>> {
        self.overrides().find(ConditionView::is_upgradeable)
    }

    /// The `Upgradeable` entry of `status.conditions` OLM reads: the first one
    /// (`meta.FindStatusCondition`).
    pub fn upgradeable_in_status(&self) -> Option<ConditionView<'_>> {
        self.status_conditions().find(ConditionView::is_upgradeable)
    }

    /// The `Upgradeable` entry of `spec.conditions` that ends up in status.
    ///
    /// OLM's copy (`syncOperatorConditionStatus` in
    /// `pkg/controller/operators/operatorcondition_controller.go`) applies the
    /// spec entries in order onto the first matching status entry, so with
    /// duplicates the *last* one wins. This crate never writes duplicates and
    /// folds existing ones into one entry when it writes.
    pub fn upgradeable_in_spec(&self) -> Option<ConditionView<'_>> {
        self.spec_conditions()
            .filter(ConditionView::is_upgradeable)
            .last()
    }
}

fn views(entries: Option<&[Value]>) -> impl Iterator<Item = ConditionView<'_>> {
    entries.unwrap_or_default().iter().map(ConditionView)
}

/// Read access to one condition entry as OLM would see it: missing or
/// mistyped fields read as Go's zero values (`""`, `0`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ConditionView<'a>(pub(crate) &'a Value);

impl<'a> ConditionView<'a> {
    fn text(&self, field: &str) -> &'a str {
        self.0
            .get(field)
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// `type`; `""` when absent or not a string.
    pub fn type_(&self) -> &'a str {
        self.text("type")
    }
    /// `status`: `True`, `False`, `Unknown`, or whatever was written.
    pub fn status(&self) -> &'a str {
        self.text("status")
    }
    /// `reason`.
    pub fn reason(&self) -> &'a str {
        self.text("reason")
    }
    /// `message`.
    pub fn message(&self) -> &'a str {
        self.text("message")
    }
    /// `lastTransitionTime` as written (RFC 3339), `""` when absent.
    pub fn last_transition_time(&self) -> &'a str {
        self.text("lastTransitionTime")
    }
    /// `observedGeneration`; 0 when absent, as in OLM's Go types.
    pub fn observed_generation(&self) -> i64 {
        self.0
            .get("observedGeneration")
            .and_then(Value::as_i64)
            .unwrap_or(0)
    }
    /// Whether this is an `Upgradeable` entry (exact, case-sensitive match,
    /// as `meta.FindStatusCondition` compares).
    pub fn is_upgradeable(&self) -> bool {
        self.type_() == UPGRADEABLE
    }
    /// The entry as a typed `metav1.Condition`, or why it is not a valid one.
    pub fn to_condition(&self) -> Result<Condition, serde_json::Error> {
        serde_json::from_value(self.0.clone())
    }
    /// The entry exactly as stored.
    pub fn raw(&self) -> &'a Value {
        self.0
    }
}

#[cfg(test)]
pub(crate) mod fixtures {
    use super::OperatorCondition;
    use serde_json::{Value, json};

    /// An OperatorCondition as OLM creates it, with the given generation and
    /// condition lists, for the table tests.
    pub(crate) fn object(
        generation: i64,
        spec_conditions: Value,
        overrides: Value,
        status_conditions: Value,
    ) -> OperatorCondition {
        let mut spec =
            json!({"deployments": ["app-operator"], "serviceAccounts": ["app-operator"]});
        if !spec_conditions.is_null() {
            spec["conditions"] = spec_conditions;
        }
        if !overrides.is_null() {
            spec["overrides"] = overrides;
        }
        let mut value = json!({
            "apiVersion": "operators.coreos.com/v2",
            "kind": "OperatorCondition",
            "metadata": {"name": "app-operator.v7.10.1", "namespace": "apps",
                         "generation": generation, "resourceVersion": "100"},
            "spec": spec,
        });
        if !status_conditions.is_null() {
            value["status"] = json!({ "conditions": status_conditions });
        }
        serde_json::from_value(value).expect("fixture is a valid OperatorCondition")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trips_unknown_fields_and_foreign_entries_exactly() {
        let input = json!({
            "apiVersion": "operators.coreos.com/v2",
            "kind": "OperatorCondition",
            "metadata": {"name": "x", "namespace": "ns", "generation": 3, "resourceVersion": "7"},
            "spec": {
                "deployments": ["d"],
                "serviceAccounts": ["sa"],
                "futureField": {"a": [1, 2.5, "x"]},
                "conditions": [
                    {"type": "Foreign", "status": "True", "reason": "R", "message": "m",
                     "lastTransitionTime": "2024-01-01T00:00:00Z", "vendorExtra": {"z": 1}},
                    "not an object",
                    {"status": "False"}
                ]
            },
            "status": {"conditions": [], "somethingNew": true}
        });
        let object: OperatorCondition = serde_json::from_value(input.clone()).expect("parses");
        assert_eq!(serde_json::to_value(&object).expect("serializes"), input);
    }

    #[test]
    fn lenient_views_read_go_zero_values() {
        let entry = json!({"type": "Upgradeable", "status": 5});
        let view = ConditionView(&entry);
        assert!(view.is_upgradeable());
        assert_eq!(view.status(), "");
        assert_eq!(view.observed_generation(), 0);
        assert!(view.to_condition().is_err());
        let lowercase = json!({"type": "upgradeable"});
        assert!(!ConditionView(&lowercase).is_upgradeable());
    }
}
