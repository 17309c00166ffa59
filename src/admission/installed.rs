//! Whether the admission policy is in force for one operator's Deployment,
//! decided the way the API server decides it: what `kubectl upgrade-gate
//! status` shows beside every Deployment that opted in (the policy and its
//! bindings are a cluster admin's one-time step; without them, or with a
//! binding that covers other namespaces only, nothing is refused, and
//! nothing else says so).
//!
//! For an UPDATE and a CREATE of the Deployment, the policy
//! [`POLICY_NAME`] must exist, read the [`RECORD_KIND`] as its parameter
//! and match the request (its `matchConstraints`); some binding of it must
//! have `validationActions` `Deny`, match the request (`matchResources`:
//! resource rules and their exclusions, the namespace's labels against its
//! `namespaceSelector`, the Deployment's labels against its
//! `objectSelector`) and name the namespace's record ([`RECORD_NAME`]) in
//! its `paramRef`; where that record is missing, its
//! `parameterNotFoundAction` decides: `Deny` refuses every request (the
//! policy's `failurePolicy` `Fail`), `Allow` admits without judging. The
//! record's guard [`GUARD_POLICY_NAME`] must be bound the same way for an
//! UPDATE of the record, or anyone who may patch it can mark an upgrade
//! complete.
//!
//! Not modelled: `matchPolicy: Equivalent` (apps/v1 Deployments have no
//! other served version) and the policies' `matchConditions`; the plugin's
//! server-side dry-run is the proof, this is the explanation.
//!
//! Owns: the pure verdict from what was read ([`policy_in_force`]) and the
//! one read of the policies and their bindings ([`read_policy`]). Must not
//! touch: any object (read-only).

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::{
    MatchResources, NamedRuleWithOperations, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::Api;
use kube::api::{DynamicObject, ListParams};
use kube::core::{Selector, SelectorExt};
use serde::Serialize;

use super::record::{RECORD_GROUP, RECORD_KIND, RECORD_NAME, RECORD_PLURAL, RECORD_VERSION};

/// The policy's name (manifests/admission/policy.yaml).
pub const POLICY_NAME: &str = "upgrade-gate.dev";
/// The record guard's name (manifests/admission/record-guard.yaml).
pub const GUARD_POLICY_NAME: &str = "upgrade-gate.dev-record";

/// Whether the API server judges one kind of request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "verdict")]
pub enum Enforcement {
    /// A binding with `Deny` judges it against the namespace's record (for
    /// the guard: judges every write of the record).
    #[serde(rename_all = "camelCase")]
    Judged {
        /// That binding.
        binding: String,
    },
    /// A binding with `Deny` matches and the record is missing: its
    /// `parameterNotFoundAction` `Deny` refuses every such request.
    #[serde(rename_all = "camelCase")]
    RefusesAll {
        /// That binding.
        binding: String,
    },
    /// The policy is not installed.
    NoPolicy,
    /// The policy reads another parameter than the record.
    #[serde(rename_all = "camelCase")]
    OtherParamKind {
        /// `apiVersion/kind` of what it reads (empty: none).
        param_kind: String,
    },
    /// The policy's own `matchConstraints` leave the request out.
    #[serde(rename_all = "camelCase")]
    PolicyDoesNotMatch {
        /// The field that leaves it out.
        field: String,
    },
    /// No binding of the policy.
    NoBinding,
    /// Bindings, none with `validationActions` `Deny` (Warn, Audit).
    #[serde(rename_all = "camelCase")]
    NotDenying {
        /// Their names.
        bindings: Vec<String>,
    },
    /// Bindings with `Deny`, none of which matches the request.
    #[serde(rename_all = "camelCase")]
    NoBindingMatches {
        /// Each one, with the field that leaves the request out.
        bindings: Vec<String>,
    },
    /// A binding with `Deny` matches, but its `paramRef` is not the
    /// namespace's record: it judges by another object.
    #[serde(rename_all = "camelCase")]
    OtherParam {
        /// That binding.
        binding: String,
        /// What its `paramRef` names.
        param: String,
    },
    /// A binding with `Deny` matches, the record is missing and its
    /// `parameterNotFoundAction` is `Allow` (or the policy's
    /// `failurePolicy` `Ignore`): admitted without judging.
    #[serde(rename_all = "camelCase")]
    NoRecord {
        /// That binding.
        binding: String,
    },
    /// Something needed could not be read.
    #[serde(rename_all = "camelCase")]
    Unknown {
        /// What, and the error.
        why: String,
    },
}

impl Enforcement {
    /// Whether the request is refused unless the record allows it (or
    /// refused, every one).
    pub fn in_force(&self) -> bool {
        matches!(
            self,
            Enforcement::Judged { .. } | Enforcement::RefusesAll { .. }
        )
    }

    /// Whether it could not be decided.
    pub fn unknown(&self) -> bool {
        matches!(self, Enforcement::Unknown { .. })
    }

    /// A table cell: a few words.
    pub fn word(&self) -> String {
        match self {
            Enforcement::Judged { .. } => "judged".to_owned(),
            Enforcement::RefusesAll { .. } => "refused (no record)".to_owned(),
            Enforcement::NoRecord { .. } => "admitted (no record)".to_owned(),
            Enforcement::NoPolicy => "NOT judged: no policy".to_owned(),
            Enforcement::OtherParamKind { .. } => "NOT judged: policy's paramKind".to_owned(),
            Enforcement::PolicyDoesNotMatch { .. } => "NOT judged: policy's match".to_owned(),
            Enforcement::NoBinding => "NOT judged: no binding".to_owned(),
            Enforcement::NotDenying { .. } => "NOT judged: no Deny".to_owned(),
            Enforcement::NoBindingMatches { .. } => "NOT judged: not bound here".to_owned(),
            Enforcement::OtherParam { param, .. } => format!("judged by {param}"),
            Enforcement::Unknown { .. } => "unknown".to_owned(),
        }
    }

    /// What the API server does and why, in a sentence (`policy`: the
    /// policy it is about).
    fn sentence(&self, policy: &str) -> String {
        match self {
            Enforcement::Judged { binding } => format!(
                "judged by {policy} against the {RECORD_KIND} {RECORD_NAME} of the namespace (binding {binding})"
            ),
            Enforcement::RefusesAll { binding } => format!(
                "every one is refused: the namespace has no {RECORD_KIND} {RECORD_NAME} and binding {binding} of {policy} has parameterNotFoundAction Deny (the operator creates the record on its first write)"
            ),
            Enforcement::NoPolicy => format!("the admission policy {policy} is not installed"),
            Enforcement::OtherParamKind { param_kind } => format!(
                "the admission policy {policy} reads {} as its parameter, not the {RECORD_KIND} the operator writes",
                if param_kind.is_empty() {
                    "nothing"
                } else {
                    param_kind
                }
            ),
            Enforcement::PolicyDoesNotMatch { field } => format!(
                "the admission policy {policy} leaves it out (its matchConstraints.{field})"
            ),
            Enforcement::NoBinding => format!("the admission policy {policy} has no binding"),
            Enforcement::NotDenying { bindings } => format!(
                "no binding of the admission policy {policy} has validationActions Deny ({} only warn or audit)",
                bindings.join(", ")
            ),
            Enforcement::NoBindingMatches { bindings } => format!(
                "no binding of the admission policy {policy} with validationActions Deny covers it here ({})",
                bindings.join("; ")
            ),
            Enforcement::OtherParam { binding, param } => format!(
                "binding {binding} of {policy} judges it by {param}, not by the {RECORD_KIND} {RECORD_NAME} the operator writes"
            ),
            Enforcement::NoRecord { binding } => format!(
                "admitted unjudged: the namespace has no {RECORD_KIND} {RECORD_NAME} and binding {binding} of {policy} lets a request through without it"
            ),
            Enforcement::Unknown { why } => format!("cannot tell ({why})"),
        }
    }
}

/// What the API server would do with the writes that keep one opted-in
/// Deployment's hold.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyInForce {
    /// An UPDATE of the Deployment (set image, a new release label).
    pub update: Enforcement,
    /// A CREATE of it (delete-and-create, a renamed Deployment).
    pub create: Enforcement,
    /// An UPDATE of the namespace's record by someone else than the
    /// operator (the guard [`GUARD_POLICY_NAME`]).
    pub guard: Enforcement,
}

impl Enforcement {
    /// What a cluster admin does about it, in a sentence (none: nothing
    /// to do, or not known).
    fn fix(&self) -> &'static str {
        match self {
            Enforcement::NoPolicy
            | Enforcement::OtherParamKind { .. }
            | Enforcement::PolicyDoesNotMatch { .. }
            | Enforcement::NoBinding => {
                " A cluster admin applies manifests/admission/ once (docs/admission.md)."
            }
            Enforcement::NotDenying { .. } | Enforcement::NoBindingMatches { .. } => {
                " A cluster admin binds it here with validationActions Deny (manifests/admission/bindings.yaml, docs/admission.md)."
            }
            Enforcement::OtherParam { .. } => {
                " The binding's paramRef names upgrade-gate in manifests/admission/bindings.yaml."
            }
            _ => "",
        }
    }
}

impl PolicyInForce {
    /// Why updates of the Deployment are not held (none: they are).
    pub fn update_warning(&self) -> Option<String> {
        (!self.update.in_force()).then(|| {
            format!(
                "its updates are not held: {}; it can be rolled to another release while its upgrade runs.{}",
                self.update.sentence(POLICY_NAME),
                self.update.fix()
            )
        })
    }

    /// Why a delete-and-create of the Deployment is not judged (none: it
    /// is, or the namespace has no record yet, a first install, which the
    /// shipped binding admits by design).
    pub fn create_warning(&self) -> Option<String> {
        match &self.create {
            verdict if verdict.in_force() => None,
            Enforcement::NoRecord { .. } => None,
            verdict => Some(format!(
                "its creates are not judged: {}; deleting and creating it again moves it to any release.{}",
                verdict.sentence(POLICY_NAME),
                verdict.fix()
            )),
        }
    }

    /// Why writers of the namespace's record are not limited (none: they
    /// are).
    pub fn guard_warning(&self) -> Option<String> {
        (!self.guard.in_force()).then(|| {
            format!(
                "writers of its {RECORD_KIND} {RECORD_NAME} are not limited: {}; anyone who may patch the record can mark an upgrade complete.{}",
                self.guard.sentence(GUARD_POLICY_NAME),
                self.guard.fix()
            )
        })
    }

    /// The update verdict in a sentence, with what to do about it.
    pub fn update_sentence(&self) -> String {
        format!(
            "{}.{}",
            self.update.sentence(POLICY_NAME),
            self.update.fix()
        )
    }
}

/// One request, as the API server's matching sees it.
#[derive(Clone, Copy, Debug)]
struct Request<'a> {
    group: &'a str,
    version: &'a str,
    resource: &'a str,
    operation: &'a str,
    name: &'a str,
    /// The namespace's labels, or why they could not be read.
    namespace_labels: Result<&'a BTreeMap<String, String>, &'a str>,
    /// The object's labels.
    labels: &'a BTreeMap<String, String>,
}

/// Whether something matches; when not, the field that leaves it out.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Matched {
    Yes,
    No(&'static str),
    Unknown(String),
}

/// `selector` as kube's (`None`: absent, or with an operator the API
/// server would have refused, which then matches nothing).
fn parsed(selector: &LabelSelector) -> Option<Selector> {
    Selector::try_from(selector.clone()).ok()
}

/// Whether `labels` satisfy `selector` (absent or empty: everything), the
/// rules of a Kubernetes label selector.
fn selector_matches(selector: Option<&LabelSelector>, labels: &BTreeMap<String, String>) -> bool {
    selector.is_none_or(|selector| parsed(selector).is_some_and(|s| s.matches(labels)))
}

fn is_empty(selector: Option<&LabelSelector>) -> bool {
    selector.is_none_or(|selector| parsed(selector).is_some_and(|s| s.selects_all()))
}

/// Whether `list` holds `value` or `*`.
fn lists(list: Option<&Vec<String>>, value: &str) -> bool {
    list.into_iter()
        .flatten()
        .any(|item| item == "*" || item == value)
}

/// Whether one rule covers the request (a namespaced resource, never a
/// subresource).
fn rule_matches(rule: &NamedRuleWithOperations, request: &Request<'_>) -> bool {
    let resource = rule.resources.iter().flatten().any(|resource| {
        let (name, sub) = resource.split_once('/').unwrap_or((resource, ""));
        (name == "*" || name == request.resource) && (sub == "*" || sub.is_empty())
    });
    let scope = rule
        .scope
        .as_deref()
        .is_none_or(|scope| scope == "*" || scope == "Namespaced");
    let names = rule
        .resource_names
        .as_ref()
        .is_none_or(|names| names.is_empty() || names.iter().any(|name| name == request.name));
    lists(rule.operations.as_ref(), request.operation)
        && lists(rule.api_groups.as_ref(), request.group)
        && lists(rule.api_versions.as_ref(), request.version)
        && resource
        && scope
        && names
}

/// Whether `resources` (a policy's `matchConstraints` or a binding's
/// `matchResources`; absent: everything) match the request.
fn resources_match(resources: Option<&MatchResources>, request: &Request<'_>) -> Matched {
    let Some(resources) = resources else {
        return Matched::Yes;
    };
    // The rules first: a binding for other requests says so, whatever
    // the namespace.
    if resources
        .exclude_resource_rules
        .iter()
        .flatten()
        .any(|rule| rule_matches(rule, request))
    {
        return Matched::No("excludeResourceRules");
    }
    let rules = resources.resource_rules.as_deref().unwrap_or_default();
    if !rules.is_empty() && !rules.iter().any(|rule| rule_matches(rule, request)) {
        return Matched::No("resourceRules");
    }
    let namespace_selector = resources.namespace_selector.as_ref();
    if !is_empty(namespace_selector) {
        match request.namespace_labels {
            Ok(labels) if !selector_matches(namespace_selector, labels) => {
                return Matched::No("namespaceSelector");
            }
            Ok(_) => {}
            Err(why) => {
                return Matched::Unknown(format!(
                    "its namespaceSelector needs the namespace's labels: {why}"
                ));
            }
        }
    }
    if !selector_matches(resources.object_selector.as_ref(), request.labels) {
        return Matched::No("objectSelector");
    }
    Matched::Yes
}

/// The record of the request's namespace: there, missing, or unreadable.
#[derive(Clone, Copy, Debug)]
enum Param<'a> {
    Found,
    Missing,
    Unreadable(&'a str),
}

/// What one binding does with the request.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Outcome {
    NotDenying(String),
    /// The binding, and the field that leaves the request out.
    NoMatch(String, &'static str),
    Decided(Enforcement),
}

/// How strongly a verdict holds the request: the strongest binding wins.
fn strength(verdict: &Enforcement) -> u8 {
    match verdict {
        Enforcement::RefusesAll { .. } => 6,
        Enforcement::Judged { .. } => 5,
        Enforcement::Unknown { .. } => 4,
        Enforcement::OtherParam { .. } => 3,
        Enforcement::NoRecord { .. } => 2,
        _ => 0,
    }
}

fn binding_outcome(
    binding: &ValidatingAdmissionPolicyBinding,
    policy: &ValidatingAdmissionPolicy,
    request: &Request<'_>,
    param: Param<'_>,
) -> Outcome {
    let name = binding.metadata.name.clone().unwrap_or_default();
    let spec = &binding.spec;
    if !spec
        .validation_actions
        .iter()
        .any(|action| action == "Deny")
    {
        return Outcome::NotDenying(name);
    }
    match resources_match(spec.match_resources.as_ref(), request) {
        Matched::Yes => {}
        Matched::No(field) => return Outcome::NoMatch(name, field),
        Matched::Unknown(why) => {
            return Outcome::Decided(Enforcement::Unknown {
                why: format!("binding {name}: {why}"),
            });
        }
    }
    let policy_spec = policy.spec.as_ref();
    if policy_spec.is_none_or(|spec| spec.param_kind.is_none()) {
        // No parameter (the guard): every matching request is judged.
        return Outcome::Decided(Enforcement::Judged { binding: name });
    }
    let fails_closed = policy_spec
        .and_then(|spec| spec.failure_policy.as_deref())
        .is_none_or(|failure| failure != "Ignore");
    let Some(param_ref) = spec.param_ref.as_ref() else {
        // A parameter the binding does not name: a configuration error,
        // which the failure policy decides.
        return Outcome::Decided(if fails_closed {
            Enforcement::RefusesAll { binding: name }
        } else {
            Enforcement::OtherParam {
                binding: name,
                param: "no paramRef".to_owned(),
            }
        });
    };
    let named = param_ref.name.as_deref().unwrap_or_default();
    let elsewhere = param_ref
        .namespace
        .as_deref()
        .filter(|namespace| !namespace.is_empty());
    if named != RECORD_NAME || elsewhere.is_some() {
        let param = match (named, elsewhere) {
            ("", _) => "a paramRef selector".to_owned(),
            (named, Some(namespace)) => format!("{namespace}/{named}"),
            (named, None) => named.to_owned(),
        };
        return Outcome::Decided(Enforcement::OtherParam {
            binding: name,
            param,
        });
    }
    let refuses_missing =
        fails_closed && param_ref.parameter_not_found_action.as_deref() != Some("Allow");
    Outcome::Decided(match (param, refuses_missing) {
        (Param::Found, _) => Enforcement::Judged { binding: name },
        (Param::Missing, true) => Enforcement::RefusesAll { binding: name },
        (Param::Missing, false) => Enforcement::NoRecord { binding: name },
        // Judged if it is there, every request refused if not: held.
        (Param::Unreadable(_), true) => Enforcement::Judged { binding: name },
        (Param::Unreadable(why), false) => Enforcement::Unknown {
            why: format!("reading the {RECORD_KIND}: {why}"),
        },
    })
}

/// The verdict of `policy` (absent: not installed) and its `bindings`
/// (those of other policies are ignored) on `request`.
fn judge(
    policy: Option<&ValidatingAdmissionPolicy>,
    bindings: &[ValidatingAdmissionPolicyBinding],
    request: &Request<'_>,
    param: Param<'_>,
    param_kind: Option<(&str, &str)>,
) -> Enforcement {
    let Some(policy) = policy else {
        return Enforcement::NoPolicy;
    };
    let name = policy.metadata.name.as_deref().unwrap_or_default();
    let spec = policy.spec.as_ref();
    let reads = spec.and_then(|spec| spec.param_kind.as_ref()).map(|kind| {
        (
            kind.api_version.as_deref().unwrap_or_default(),
            kind.kind.as_deref().unwrap_or_default(),
        )
    });
    if reads != param_kind {
        return Enforcement::OtherParamKind {
            param_kind: reads
                .map_or_else(String::new, |(version, kind)| format!("{version}/{kind}")),
        };
    }
    match resources_match(
        spec.and_then(|spec| spec.match_constraints.as_ref()),
        request,
    ) {
        Matched::Yes => {}
        Matched::No(field) => {
            return Enforcement::PolicyDoesNotMatch {
                field: field.to_owned(),
            };
        }
        Matched::Unknown(why) => return Enforcement::Unknown { why },
    }
    let outcomes: Vec<Outcome> = bindings
        .iter()
        .filter(|binding| binding.spec.policy_name == name)
        .map(|binding| binding_outcome(binding, policy, request, param))
        .collect();
    if outcomes.is_empty() {
        return Enforcement::NoBinding;
    }
    let strongest = outcomes
        .iter()
        .filter_map(|outcome| match outcome {
            Outcome::Decided(verdict) => Some(verdict),
            _ => None,
        })
        .max_by_key(|verdict| strength(verdict));
    if let Some(verdict) = strongest {
        return verdict.clone();
    }
    if outcomes
        .iter()
        .all(|outcome| matches!(outcome, Outcome::NotDenying(_)))
    {
        return Enforcement::NotDenying {
            bindings: outcomes
                .into_iter()
                .filter_map(|outcome| match outcome {
                    Outcome::NotDenying(name) => Some(name),
                    _ => None,
                })
                .collect(),
        };
    }
    // A binding for other requests (the create binding, for an update)
    // is named only when every binding is one.
    let other_requests = |outcome: &Outcome| {
        matches!(
            outcome,
            Outcome::NoMatch(_, "resourceRules" | "excludeResourceRules")
        )
    };
    let all_for_other_requests = outcomes.iter().all(other_requests);
    Enforcement::NoBindingMatches {
        bindings: outcomes
            .iter()
            .filter(|outcome| all_for_other_requests || !other_requests(outcome))
            .filter_map(|outcome| match outcome {
                Outcome::NotDenying(name) => {
                    Some(format!("{name}: no Deny in its validationActions"))
                }
                Outcome::NoMatch(name, field) => Some(format!("{name}: its {field}")),
                Outcome::Decided(_) => None,
            })
            .collect(),
    }
}

/// What the API server would do with an UPDATE and a CREATE of
/// `deployment` (an operator's Deployment that opted in) and an UPDATE of
/// its namespace's record, from what was read: the cluster's policies and
/// bindings (or why they could not be read), the Deployment's Namespace
/// (or why it could not be read: needed only for a binding's
/// `namespaceSelector`) and the namespace's record ([`RECORD_NAME`]:
/// there, missing, or why it could not be read).
pub fn policy_in_force(
    cluster: Result<
        (
            &[ValidatingAdmissionPolicy],
            &[ValidatingAdmissionPolicyBinding],
        ),
        &str,
    >,
    namespace: Result<&Namespace, &str>,
    deployment: &Deployment,
    record: Result<Option<&DynamicObject>, &str>,
) -> PolicyInForce {
    let (policies, bindings) = match cluster {
        Ok(read) => read,
        Err(why) => {
            let unknown = Enforcement::Unknown {
                why: why.to_owned(),
            };
            return PolicyInForce {
                update: unknown.clone(),
                create: unknown.clone(),
                guard: unknown,
            };
        }
    };
    let named = |name: &str| {
        policies
            .iter()
            .find(|policy| policy.metadata.name.as_deref() == Some(name))
    };
    let empty = BTreeMap::new();
    let namespace_labels =
        namespace.map(|namespace| namespace.metadata.labels.as_ref().unwrap_or(&empty));
    let deployment_request = |operation| Request {
        group: "apps",
        version: "v1",
        resource: "deployments",
        operation,
        name: deployment.metadata.name.as_deref().unwrap_or_default(),
        namespace_labels,
        labels: deployment.metadata.labels.as_ref().unwrap_or(&empty),
    };
    let param = match record {
        Ok(Some(_)) => Param::Found,
        Ok(None) => Param::Missing,
        Err(why) => Param::Unreadable(why),
    };
    let api_version = format!("{RECORD_GROUP}/{RECORD_VERSION}");
    let param_kind = Some((api_version.as_str(), RECORD_KIND));
    let record_labels = match record {
        Ok(Some(record)) => record.metadata.labels.as_ref().unwrap_or(&empty),
        _ => &empty,
    };
    let guard_request = Request {
        group: RECORD_GROUP,
        version: RECORD_VERSION,
        resource: RECORD_PLURAL,
        operation: "UPDATE",
        name: RECORD_NAME,
        namespace_labels,
        labels: record_labels,
    };
    PolicyInForce {
        update: judge(
            named(POLICY_NAME),
            bindings,
            &deployment_request("UPDATE"),
            param,
            param_kind,
        ),
        create: judge(
            named(POLICY_NAME),
            bindings,
            &deployment_request("CREATE"),
            param,
            param_kind,
        ),
        guard: judge(
            named(GUARD_POLICY_NAME),
            bindings,
            &guard_request,
            Param::Found,
            None,
        ),
    }
}

/// Reads the two policies and every binding once: the input of
/// [`policy_in_force`] (an error: what could not be read).
pub async fn read_policy(
    client: &kube::Client,
) -> Result<
    (
        Vec<ValidatingAdmissionPolicy>,
        Vec<ValidatingAdmissionPolicyBinding>,
    ),
    String,
> {
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let mut found = Vec::new();
    for name in [POLICY_NAME, GUARD_POLICY_NAME] {
        match policies.get_opt(name).await {
            Ok(policy) => found.extend(policy),
            Err(error) => return Err(format!("reading the policy {name}: {error}")),
        }
    }
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    match bindings.list(&ListParams::default()).await {
        Ok(list) => Ok((found, list.items)),
        Err(error) => Err(format!("listing policy bindings: {error}")),
    }
}

#[cfg(test)]
mod tests;
