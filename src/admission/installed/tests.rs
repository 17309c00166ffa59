//! Unit tests of `installed`: kept apart from the code they test so that
//! the module reads in one sitting.

use super::*;
use serde_json::{Value, json};

/// The shipped manifests of `file`, each document.
fn shipped(file: &str) -> Vec<Value> {
    let text = match file {
        "policy.yaml" => include_str!("../../../manifests/admission/policy.yaml"),
        "record-guard.yaml" => include_str!("../../../manifests/admission/record-guard.yaml"),
        "bindings.yaml" => include_str!("../../../manifests/admission/bindings.yaml"),
        other => panic!("no manifest {other}"),
    };
    text.split("\n---\n")
        .map(|document| serde_saphyr::from_str(document).expect("the manifest parses"))
        .collect()
}

fn policies() -> Vec<ValidatingAdmissionPolicy> {
    ["policy.yaml", "record-guard.yaml"]
        .iter()
        .flat_map(|file| shipped(file))
        .map(|policy| serde_json::from_value(policy).expect("a policy"))
        .collect()
}

/// The shipped bindings, each changed by `edit` (its name, its JSON).
fn bindings(edit: impl Fn(&str, &mut Value)) -> Vec<ValidatingAdmissionPolicyBinding> {
    shipped("bindings.yaml")
        .into_iter()
        .map(|mut binding| {
            let name = binding["metadata"]["name"].as_str().unwrap().to_owned();
            edit(&name, &mut binding);
            serde_json::from_value(binding).expect("a binding")
        })
        .collect()
}

fn only_in(namespace: &str) -> impl Fn(&str, &mut Value) {
    let namespace = namespace.to_owned();
    move |_, binding| {
        // The shipped selector's labels kept, this namespace alone.
        let selector = &mut binding["spec"]["matchResources"]["namespaceSelector"];
        if selector.is_null() {
            *selector = json!({});
        }
        selector["matchExpressions"] = json!([
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [namespace]}]);
    }
}

fn namespace(name: &str, labels: Value) -> Namespace {
    let mut labels = labels;
    labels["kubernetes.io/metadata.name"] = json!(name);
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap()
}

fn deployment(labels: Value) -> Deployment {
    serde_json::from_value(
        json!({"metadata": {"name": "app-operator", "namespace": "shop",
            "labels": labels}}),
    )
    .unwrap()
}

fn opted_in() -> Deployment {
    deployment(
        json!({"upgrade-gate.dev/admission": "enforce", "upgrade-gate.dev/release": "7.10.0"}),
    )
}

fn record() -> DynamicObject {
    serde_json::from_value(
        json!({"apiVersion": "upgrade-gate.dev/v1alpha1", "kind": "UpgradeRecord",
            "metadata": {"name": "upgrade-gate", "namespace": "shop"},
            "spec": {"operators": {"app-operator": {"release": "7.10.0", "state": "InProgress"}}}}),
    )
    .unwrap()
}

fn judged(binding: &str) -> Enforcement {
    Enforcement::Judged {
        binding: binding.into(),
    }
}

#[test]
fn label_selectors_follow_kubernetes() {
    let labels: BTreeMap<String, String> = [("team", "a"), ("tier", "db")]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let selector = |value: Value| -> LabelSelector { serde_json::from_value(value).unwrap() };
    let expression = |operator: &str, key: &str, values: &[&str]| {
        selector(
            json!({"matchExpressions": [{"key": key, "operator": operator, "values": values}]}),
        )
    };
    let table = [
        ("no selector", None, true),
        ("empty", Some(selector(json!({}))), true),
        (
            "matchLabels",
            Some(selector(json!({"matchLabels": {"team": "a"}}))),
            true,
        ),
        (
            "matchLabels other value",
            Some(selector(json!({"matchLabels": {"team": "b"}}))),
            false,
        ),
        (
            "matchLabels absent key",
            Some(selector(json!({"matchLabels": {"zone": "x"}}))),
            false,
        ),
        ("In", Some(expression("In", "team", &["a", "b"])), true),
        (
            "In other values",
            Some(expression("In", "team", &["b"])),
            false,
        ),
        (
            "In absent key",
            Some(expression("In", "zone", &["a"])),
            false,
        ),
        ("NotIn", Some(expression("NotIn", "team", &["b"])), true),
        (
            "NotIn its value",
            Some(expression("NotIn", "team", &["a"])),
            false,
        ),
        (
            "NotIn absent key",
            Some(expression("NotIn", "zone", &["a"])),
            true,
        ),
        ("Exists", Some(expression("Exists", "tier", &[])), true),
        (
            "Exists absent",
            Some(expression("Exists", "zone", &[])),
            false,
        ),
        (
            "DoesNotExist",
            Some(expression("DoesNotExist", "zone", &[])),
            true,
        ),
        (
            "DoesNotExist present",
            Some(expression("DoesNotExist", "tier", &[])),
            false,
        ),
        (
            "labels and expressions, all must hold",
            Some(selector(json!({"matchLabels": {"team": "a"},
                    "matchExpressions": [{"key": "tier", "operator": "In", "values": ["web"]}]}))),
            false,
        ),
    ];
    for (name, selector, expected) in table {
        assert_eq!(
            selector_matches(selector.as_ref(), &labels),
            expected,
            "{name}"
        );
    }
}

#[test]
fn the_shipped_manifests_hold_every_opted_in_deployment() {
    let policies = policies();
    let bindings = bindings(|_, _| {});
    let shop = namespace("shop", json!({}));
    let verdict = policy_in_force(
        Ok((&policies, &bindings)),
        Ok(&shop),
        &opted_in(),
        Ok(Some(&record())),
    );
    assert_eq!(
        verdict,
        PolicyInForce {
            update: judged("upgrade-gate.dev"),
            create: judged("upgrade-gate.dev-create"),
            guard: judged("upgrade-gate.dev-record"),
        }
    );
    assert_eq!(verdict.update_warning(), None);
    assert_eq!(verdict.create_warning(), None);
    assert_eq!(verdict.guard_warning(), None);
}

#[test]
fn a_missing_record_refuses_every_update_and_admits_a_create() {
    let policies = policies();
    let bindings = bindings(|_, _| {});
    let shop = namespace("shop", json!({}));
    let verdict = policy_in_force(Ok((&policies, &bindings)), Ok(&shop), &opted_in(), Ok(None));
    assert_eq!(
        verdict.update,
        Enforcement::RefusesAll {
            binding: "upgrade-gate.dev".into()
        }
    );
    assert!(verdict.update.in_force());
    assert_eq!(
        verdict.create,
        Enforcement::NoRecord {
            binding: "upgrade-gate.dev-create".into()
        }
    );
    // A first install: not a warning.
    assert_eq!(verdict.create_warning(), None);
    // Unreadable: held either way when the binding refuses a missing one.
    let unreadable = policy_in_force(
        Ok((&policies, &bindings)),
        Ok(&shop),
        &opted_in(),
        Err("forbidden"),
    );
    assert!(unreadable.update.in_force());
    assert!(unreadable.create.unknown(), "{unreadable:?}");
}

/// The rules, one case each: (what, bindings as edited, the namespace,
/// the Deployment's labels, the update's verdict).
#[test]
fn an_update_is_held_only_where_a_denying_binding_covers_it() {
    let policies = policies();
    let record = record();
    type Edit = Box<dyn Fn(&str, &mut Value)>;
    let update_only = |edit: Edit| -> Edit {
        Box::new(move |name: &str, binding: &mut Value| {
            if name == "upgrade-gate.dev" {
                edit(name, binding);
            }
        })
    };
    let table: Vec<(&str, Edit, Namespace, Enforcement)> = vec![
        (
            "a binding limited to another namespace is not in force here",
            Box::new(only_in("other")),
            namespace("shop", json!({})),
            Enforcement::NoBindingMatches {
                bindings: vec!["upgrade-gate.dev: its namespaceSelector".into()],
            },
        ),
        (
            "a binding whose namespaceSelector matches this namespace is",
            Box::new(only_in("shop")),
            namespace("shop", json!({})),
            judged("upgrade-gate.dev"),
        ),
        (
            "matchLabels on the namespace's labels",
            update_only(Box::new(|_, binding| {
                binding["spec"]["matchResources"]["namespaceSelector"] =
                    json!({"matchLabels": {"upgrade-gate.dev/hold": "on"}});
            })),
            namespace("shop", json!({"upgrade-gate.dev/hold": "on"})),
            judged("upgrade-gate.dev"),
        ),
        (
            "NotIn leaves the namespace out",
            update_only(Box::new(|_, binding| {
                binding["spec"]["matchResources"]["namespaceSelector"] = json!({"matchExpressions": [
                        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["shop"]}]});
            })),
            namespace("shop", json!({})),
            Enforcement::NoBindingMatches {
                bindings: vec!["upgrade-gate.dev: its namespaceSelector".into()],
            },
        ),
        (
            "an objectSelector the Deployment does not match",
            update_only(Box::new(|_, binding| {
                binding["spec"]["matchResources"]["objectSelector"] =
                    json!({"matchLabels": {"tier": "db"}});
            })),
            namespace("shop", json!({})),
            Enforcement::NoBindingMatches {
                bindings: vec!["upgrade-gate.dev: its objectSelector".into()],
            },
        ),
        (
            "Audit only is not in force",
            update_only(Box::new(|_, binding| {
                binding["spec"]["validationActions"] = json!(["Audit", "Warn"]);
            })),
            namespace("shop", json!({})),
            Enforcement::NoBindingMatches {
                bindings: vec!["upgrade-gate.dev: no Deny in its validationActions".into()],
            },
        ),
        (
            "no binding denies",
            Box::new(|_, binding| binding["spec"]["validationActions"] = json!(["Warn"])),
            namespace("shop", json!({})),
            Enforcement::NotDenying {
                bindings: vec![
                    "upgrade-gate.dev".into(),
                    "upgrade-gate.dev-create".into(),
                    "upgrade-gate.dev-create-unlabelled".into(),
                ],
            },
        ),
        (
            "a binding for CREATE only does not hold an update",
            update_only(Box::new(|_, binding| {
                binding["spec"]["matchResources"]["resourceRules"][0]["operations"] =
                    json!(["CREATE"]);
            })),
            namespace("shop", json!({})),
            Enforcement::NoBindingMatches {
                bindings: vec![
                    "upgrade-gate.dev: its resourceRules".into(),
                    "upgrade-gate.dev-create: its resourceRules".into(),
                    "upgrade-gate.dev-create-unlabelled: its resourceRules".into(),
                ],
            },
        ),
        (
            "a binding with no resource rules covers what the policy matches",
            update_only(Box::new(|_, binding| {
                binding["spec"]["matchResources"] = json!({});
            })),
            namespace("shop", json!({})),
            judged("upgrade-gate.dev"),
        ),
        (
            "an exclusion of deployments",
            update_only(Box::new(|_, binding| {
                binding["spec"]["matchResources"]["excludeResourceRules"] = json!([{
                        "apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*"]}]);
            })),
            namespace("shop", json!({})),
            Enforcement::NoBindingMatches {
                bindings: vec![
                    "upgrade-gate.dev: its excludeResourceRules".into(),
                    "upgrade-gate.dev-create: its resourceRules".into(),
                    "upgrade-gate.dev-create-unlabelled: its resourceRules".into(),
                ],
            },
        ),
        (
            "resourceNames naming another Deployment",
            update_only(Box::new(|_, binding| {
                binding["spec"]["matchResources"]["resourceRules"][0]["resourceNames"] =
                    json!(["web"]);
            })),
            namespace("shop", json!({})),
            Enforcement::NoBindingMatches {
                bindings: vec![
                    "upgrade-gate.dev: its resourceRules".into(),
                    "upgrade-gate.dev-create: its resourceRules".into(),
                    "upgrade-gate.dev-create-unlabelled: its resourceRules".into(),
                ],
            },
        ),
        (
            "a paramRef naming another object",
            update_only(Box::new(|_, binding| {
                binding["spec"]["paramRef"]["name"] = json!("frozen");
            })),
            namespace("shop", json!({})),
            Enforcement::OtherParam {
                binding: "upgrade-gate.dev".into(),
                param: "frozen".into(),
            },
        ),
        (
            "a paramRef in another namespace",
            update_only(Box::new(|_, binding| {
                binding["spec"]["paramRef"]["namespace"] = json!("admin");
            })),
            namespace("shop", json!({})),
            Enforcement::OtherParam {
                binding: "upgrade-gate.dev".into(),
                param: "admin/upgrade-gate".into(),
            },
        ),
        (
            "no binding of the policy",
            update_only(Box::new(|_, binding| {
                binding["spec"]["policyName"] = json!("other.example");
            })),
            namespace("shop", json!({})),
            // The create binding covers CREATE only.
            Enforcement::NoBindingMatches {
                bindings: vec![
                    "upgrade-gate.dev-create: its resourceRules".into(),
                    "upgrade-gate.dev-create-unlabelled: its resourceRules".into(),
                ],
            },
        ),
    ];
    for (name, edit, namespace, expected) in table {
        let bindings = bindings(edit);
        let verdict = policy_in_force(
            Ok((&policies, &bindings)),
            Ok(&namespace),
            &opted_in(),
            Ok(Some(&record)),
        );
        assert_eq!(verdict.update, expected, "{name}");
        assert_eq!(
            verdict.update_warning().is_none(),
            expected.in_force(),
            "{name}"
        );
    }
}

#[test]
fn one_denying_binding_that_covers_the_namespace_is_enough() {
    let policies = policies();
    let record = record();
    let mut bindings = bindings(only_in("other"));
    bindings.extend(self::bindings(|name, binding| {
        binding["metadata"]["name"] = json!(format!("{name}-shop"));
        only_in("shop")(name, binding);
    }));
    let shop = namespace("shop", json!({}));
    let verdict = policy_in_force(
        Ok((&policies, &bindings)),
        Ok(&shop),
        &opted_in(),
        Ok(Some(&record)),
    );
    assert_eq!(verdict.update, judged("upgrade-gate.dev-shop"));
    assert_eq!(verdict.create, judged("upgrade-gate.dev-create-shop"));
    assert_eq!(verdict.guard, judged("upgrade-gate.dev-record-shop"));
    // And in a third namespace, none.
    let web = namespace("web", json!({}));
    let verdict = policy_in_force(
        Ok((&policies, &bindings)),
        Ok(&web),
        &opted_in(),
        Ok(Some(&record)),
    );
    assert!(!verdict.update.in_force(), "{verdict:?}");
    assert!(verdict.create_warning().is_some());
    assert!(verdict.guard_warning().is_some());
}

#[test]
fn the_policy_itself_must_be_there_read_the_record_and_match() {
    let bindings = bindings(|_, _| {});
    let record = record();
    let shop = namespace("shop", json!({}));
    let edited = |edit: &dyn Fn(&mut Value)| -> Vec<ValidatingAdmissionPolicy> {
        let mut policy = shipped("policy.yaml").remove(0);
        edit(&mut policy);
        vec![serde_json::from_value(policy).unwrap()]
    };
    let table: [(&str, Vec<ValidatingAdmissionPolicy>, Enforcement); 4] = [
        ("no policy", vec![], Enforcement::NoPolicy),
        (
            "the ConfigMap parameter of the previous policy",
            edited(&|policy| {
                policy["spec"]["paramKind"] = json!({"apiVersion": "v1", "kind": "ConfigMap"});
            }),
            Enforcement::OtherParamKind {
                param_kind: "v1/ConfigMap".into(),
            },
        ),
        (
            "a policy for CREATE only",
            edited(&|policy| {
                policy["spec"]["matchConstraints"]["resourceRules"][0]["operations"] =
                    json!(["CREATE"]);
            }),
            Enforcement::PolicyDoesNotMatch {
                field: "resourceRules".into(),
            },
        ),
        (
            "failurePolicy Ignore still judges a record that is there",
            edited(&|policy| policy["spec"]["failurePolicy"] = json!("Ignore")),
            judged("upgrade-gate.dev"),
        ),
    ];
    for (name, policies, expected) in table {
        let verdict = policy_in_force(
            Ok((&policies, &bindings)),
            Ok(&shop),
            &opted_in(),
            Ok(Some(&record)),
        );
        assert_eq!(verdict.update, expected, "{name}");
    }
    // Without the guard policy, the record's writers are not limited.
    let verdict = policy_in_force(
        Ok((&edited(&|_| {}), &bindings)),
        Ok(&shop),
        &opted_in(),
        Ok(Some(&record)),
    );
    assert_eq!(verdict.guard, Enforcement::NoPolicy);
    assert!(
        verdict
            .guard_warning()
            .unwrap()
            .contains("anyone who may patch the record"),
        "{verdict:?}"
    );
    // failurePolicy Ignore admits an update without the record.
    let verdict = policy_in_force(
        Ok((
            &edited(&|policy| policy["spec"]["failurePolicy"] = json!("Ignore")),
            &bindings,
        )),
        Ok(&shop),
        &opted_in(),
        Ok(None),
    );
    assert_eq!(
        verdict.update,
        Enforcement::NoRecord {
            binding: "upgrade-gate.dev".into()
        }
    );
}

#[test]
fn what_cannot_be_read_is_unknown_and_says_why() {
    let policies = policies();
    let record = record();
    let verdict = policy_in_force(
        Err("listing policy bindings: forbidden"),
        Ok(&namespace("shop", json!({}))),
        &opted_in(),
        Ok(Some(&record)),
    );
    assert!(verdict.update.unknown() && verdict.create.unknown() && verdict.guard.unknown());
    assert!(
        verdict.update_warning().unwrap().contains("forbidden"),
        "{verdict:?}"
    );
    // The namespace's labels are needed only by a namespaceSelector.
    let everywhere = bindings(|_, _| {});
    let verdict = policy_in_force(
        Ok((&policies, &everywhere)),
        Err("namespaces \"shop\" is forbidden"),
        &opted_in(),
        Ok(Some(&record)),
    );
    assert_eq!(verdict.update, judged("upgrade-gate.dev"));
    let limited = bindings(only_in("shop"));
    let verdict = policy_in_force(
        Ok((&policies, &limited)),
        Err("namespaces \"shop\" is forbidden"),
        &opted_in(),
        Ok(Some(&record)),
    );
    assert!(verdict.update.unknown(), "{verdict:?}");
}

#[test]
fn the_shipped_names_are_the_manifests() {
    assert_eq!(shipped("policy.yaml")[0]["metadata"]["name"], POLICY_NAME);
    assert_eq!(
        shipped("record-guard.yaml")[0]["metadata"]["name"],
        GUARD_POLICY_NAME
    );
}
