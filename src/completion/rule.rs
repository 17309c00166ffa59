//! [`Rule`]: whether one custom resource shows the running release's
//! upgrade done — a CEL expression over the object (`self`) and the
//! release (`release`), written by the adopter or built from the two
//! shorthands ([`Rule::build`]).
//!
//! Owns: compiling the rule, refusing one that cannot tell this release's
//! "done" from the previous release's, and evaluating it on one object.
//! Must not touch: which objects there are, or what follows from them
//! ([`super::decide()`]).

use std::fmt;

use cel::{Context, ExecutionError, Program, Value as Cel};
use serde_json::Value;

/// The CEL variable that holds the object.
pub const OBJECT_VARIABLE: &str = "self";
/// The CEL variable that holds the running release (`--release`).
pub const RELEASE_VARIABLE: &str = "release";

/// The rule cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    /// Neither a CEL expression nor a field was given.
    #[error(
        "no rule: give --done-field (a field equal to the release, e.g. status.version) or --done-when (a CEL expression over self and release)"
    )]
    Missing,
    /// The CEL expression does not parse.
    #[error("--done-when {expression:?} is not a CEL expression: {why}")]
    Syntax {
        /// The expression.
        expression: String,
        /// The parser's words.
        why: String,
    },
    /// The rule never reads the release, so the previous release's "done"
    /// would pass for this one's.
    #[error(
        "the rule {expression:?} does not read `release`: right after an upgrade every object still shows the previous release's upgrade done, so the gate would open before this release's upgrade ran. Compare something the operator writes per release with it, e.g. --done-field status.version or --done-when \"self.status.version == release\""
    )]
    ReleaseBlind {
        /// The rule as built.
        expression: String,
    },
    /// The rule never reads the object, so no object's upgrade can hold
    /// the gate.
    #[error(
        "the rule {expression:?} does not read the object (`self`): it would say every object is done, or none, whatever the operator shows. Compare a field of self with release, e.g. \"self.status.version == release\""
    )]
    ObjectBlind {
        /// The rule as built.
        expression: String,
    },
    /// A field path is not a dotted path of names.
    #[error(
        "--done-field {path:?} is not a dotted path of field names (e.g. status.version): {why}"
    )]
    FieldPath {
        /// The path given.
        path: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A condition type is empty or has characters a type never has.
    #[error(
        "--done-condition {condition_type:?} is not a condition type (letters, digits, '.', '-', '_', '/')"
    )]
    ConditionType {
        /// The type given.
        condition_type: String,
    },
}

/// What a rule says about one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Shown {
    /// The object shows the running release's upgrade done.
    Done,
    /// It does not (yet).
    NotDone,
    /// The rule could not be evaluated on it (a field it reads is missing,
    /// a type it compares differs); counted as not done.
    Unreadable(String),
    /// It is being deleted (it has a `deletionTimestamp`): its finalizers
    /// may still be running the upgrade's work or undoing it, whatever its
    /// status says, so it counts as not done until it is gone.
    BeingDeleted,
}

/// A compiled rule: evaluated once per object with `self` the object and
/// `release` the running release.
pub struct Rule {
    source: String,
    program: Program,
}

impl fmt::Debug for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rule")
            .field("source", &self.source)
            .finish()
    }
}

impl Rule {
    /// The rule from the flags: every `conditions` type True at the
    /// object's generation, `field` equal to the release, and the CEL
    /// expression `when` — each given part must hold. The whole must read
    /// `release` ([`RuleError::ReleaseBlind`]): a condition alone cannot
    /// tell this release's upgrade from the previous one's.
    pub fn build(
        conditions: &[String],
        field: Option<&str>,
        when: Option<&str>,
    ) -> Result<Rule, RuleError> {
        let mut parts = Vec::new();
        for condition_type in conditions {
            parts.push(condition_true(condition_type)?);
        }
        if let Some(path) = field {
            parts.push(field_equals_release(path)?);
        }
        if let Some(when) = when {
            let when = when.trim();
            Program::compile(when).map_err(|error| RuleError::Syntax {
                expression: when.to_owned(),
                why: error.to_string(),
            })?;
            parts.push(if parts.is_empty() {
                when.to_owned()
            } else {
                format!("({when})")
            });
        }
        if parts.is_empty() {
            return Err(RuleError::Missing);
        }
        Rule::cel(&parts.join(" && "))
    }

    /// The CEL expression `source` as it is.
    pub fn cel(source: &str) -> Result<Rule, RuleError> {
        let program = Program::compile(source).map_err(|error| RuleError::Syntax {
            expression: source.to_owned(),
            why: error.to_string(),
        })?;
        if !program.references().has_variable(RELEASE_VARIABLE) {
            return Err(RuleError::ReleaseBlind {
                expression: source.to_owned(),
            });
        }
        if !program.references().has_variable(OBJECT_VARIABLE) {
            return Err(RuleError::ObjectBlind {
                expression: source.to_owned(),
            });
        }
        Ok(Rule {
            source: source.to_owned(),
            program,
        })
    }

    /// The CEL expression, as evaluated.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// What the rule says about `object` for `release`.
    pub fn evaluate(&self, object: &Value, release: &str) -> Shown {
        let mut context = Context::default();
        if let Err(error) = context.add_variable(OBJECT_VARIABLE, object) {
            return Shown::Unreadable(format!("the object cannot be read as CEL: {error}"));
        }
        context.add_variable_from_value(RELEASE_VARIABLE, release);
        match self.program.execute(&context) {
            Ok(Cel::Bool(true)) => Shown::Done,
            Ok(Cel::Bool(false)) => Shown::NotDone,
            Ok(other) => Shown::Unreadable(format!("the rule gave {other:?}, not true or false")),
            Err(ExecutionError::NoSuchKey(key)) => {
                Shown::Unreadable(format!("it has no field {key:?} (yet)"))
            }
            Err(error) => Shown::Unreadable(error.to_string()),
        }
    }
}

/// `self.<path> == release`, each step of the path checked with `has()`
/// first so that an object without the field is "not done", not an error.
fn field_equals_release(path: &str) -> Result<String, RuleError> {
    let bad = |why| RuleError::FieldPath {
        path: path.to_owned(),
        why,
    };
    let steps: Vec<&str> = path.trim().trim_start_matches('.').split('.').collect();
    if steps.iter().any(|step| step.is_empty()) {
        return Err(bad("an empty step"));
    }
    for step in &steps {
        let mut chars = step.chars();
        let first_ok = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
        if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(bad(
                "a step is not a field name (letters, digits and '_', not starting with a digit)",
            ));
        }
    }
    let mut checks = Vec::new();
    let mut at = OBJECT_VARIABLE.to_owned();
    for step in &steps {
        at = format!("{at}.{step}");
        checks.push(format!("has({at})"));
    }
    checks.push(format!("{at} == {RELEASE_VARIABLE}"));
    Ok(checks.join(" && "))
}

/// The condition `condition_type` True, at the object's generation when
/// the condition says which generation it saw.
fn condition_true(condition_type: &str) -> Result<String, RuleError> {
    let valid = !condition_type.is_empty()
        && condition_type
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '/'));
    if !valid {
        return Err(RuleError::ConditionType {
            condition_type: condition_type.to_owned(),
        });
    }
    Ok(format!(
        "(has(self.status) && has(self.status.conditions) && self.status.conditions.exists(c, c.type == '{condition_type}' && c.status == 'True' && (!has(c.observedGeneration) || c.observedGeneration == self.metadata.generation)))"
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn widget(status: Value) -> Value {
        json!({
            "apiVersion": "demo.example.com/v1alpha1",
            "kind": "Widget",
            "metadata": {"name": "a", "namespace": "shop", "generation": 3},
            "status": status,
        })
    }

    #[test]
    fn a_field_equal_to_the_release_is_done_and_anything_else_is_not() {
        let rule = Rule::build(&[], Some("status.version"), None).expect("rule");
        let cases = [
            (json!({"version": "0.2.0"}), Shown::Done),
            (json!({"version": "0.1.0"}), Shown::NotDone),
            (json!({}), Shown::NotDone),
        ];
        for (status, shown) in cases {
            assert_eq!(
                rule.evaluate(&widget(status.clone()), "0.2.0"),
                shown,
                "{status}"
            );
        }
        // `status: null` has the field, whose value compares with nothing.
        assert!(matches!(
            rule.evaluate(&widget(Value::Null), "0.2.0"),
            Shown::Unreadable(_)
        ));
        let no_status = json!({"metadata": {"name": "a", "generation": 1}});
        assert_eq!(rule.evaluate(&no_status, "0.2.0"), Shown::NotDone);
    }

    #[test]
    fn a_condition_counts_only_true_at_the_objects_generation_and_with_the_release() {
        let rule =
            Rule::build(&["Migrated".to_owned()], Some("status.version"), None).expect("rule");
        let condition = |status: &str, generation: Option<u64>| {
            let mut condition = json!({"type": "Migrated", "status": status});
            if let Some(generation) = generation {
                condition["observedGeneration"] = json!(generation);
            }
            condition
        };
        let cases = [
            (condition("True", Some(3)), "0.2.0", Shown::Done),
            (condition("True", None), "0.2.0", Shown::Done),
            (condition("True", Some(2)), "0.2.0", Shown::NotDone),
            (condition("False", Some(3)), "0.2.0", Shown::NotDone),
            (condition("True", Some(3)), "0.1.0", Shown::NotDone),
        ];
        for (condition, version, shown) in cases {
            let object = widget(json!({"version": version, "conditions": [condition.clone()]}));
            assert_eq!(
                rule.evaluate(&object, "0.2.0"),
                shown,
                "{condition} {version}"
            );
        }
    }

    #[test]
    fn a_rule_that_never_reads_the_release_is_refused() {
        let refused = [
            Rule::build(&["Ready".to_owned()], None, None),
            Rule::build(&[], None, Some("self.status.phase == 'Done'")),
        ];
        for result in refused {
            assert!(
                matches!(result, Err(RuleError::ReleaseBlind { .. })),
                "{result:?}"
            );
        }
        assert_eq!(
            Rule::build(&[], None, None).unwrap_err(),
            RuleError::Missing
        );
    }

    #[test]
    fn a_cel_rule_reads_any_field_and_a_missing_one_is_unreadable() {
        let rule = Rule::build(
            &[],
            None,
            Some("self.status.deployedRelease.manifest.contains('version: ' + release + '\\n')"),
        )
        .expect("rule");
        let deployed = |manifest: &str| widget(json!({"deployedRelease": {"manifest": manifest}}));
        assert_eq!(
            rule.evaluate(&deployed("labels:\n  version: 0.2.0\n"), "0.2.0"),
            Shown::Done
        );
        assert_eq!(
            rule.evaluate(&deployed("labels:\n  version: 0.2.0-rc1\n"), "0.2.0"),
            Shown::NotDone
        );
        assert!(matches!(
            rule.evaluate(&widget(json!({})), "0.2.0"),
            Shown::Unreadable(why) if why.contains("deployedRelease")
        ));
        let not_a_bool = Rule::cel("self.metadata.name + release").expect("rule");
        assert!(matches!(
            not_a_bool.evaluate(&widget(json!({})), "0.2.0"),
            Shown::Unreadable(_)
        ));
    }

    #[test]
    fn bad_paths_types_and_expressions_say_what_is_wrong() {
        for path in ["", "status..version", "status.1st", "status.ver-sion"] {
            assert!(
                matches!(
                    Rule::build(&[], Some(path), None),
                    Err(RuleError::FieldPath { .. })
                ),
                "{path:?}"
            );
        }
        for condition_type in ["", "Ready'", "Read y"] {
            assert!(
                matches!(
                    Rule::build(&[condition_type.to_owned()], Some("status.version"), None),
                    Err(RuleError::ConditionType { .. })
                ),
                "{condition_type:?}"
            );
        }
        assert!(matches!(
            Rule::build(&[], None, Some("self.status.version == ")),
            Err(RuleError::Syntax { .. })
        ));
    }
}
