//! The test-time variants of the bundles, for measuring the race the gate
//! closes as a controlled experiment (`just race`, `just race-matrix`,
//! `just demo`, docs/race.md): three factors, each changing one thing of the
//! published CSVs, so that two arms differing in one factor differ in that
//! alone.
//!
//! - **gate**: `on` keeps the gate's init container; `off` removes it and
//!   changes nothing else.
//! - **start**: `fast` is ours (ready once the first reconcile wrote the
//!   gate's answer, the Lease released on stop); `slow` is what a typical
//!   controller-runtime operator does: ready as soon as it serves its probes
//!   (`--ready-when=started`) and its leader Lease kept on stop
//!   (`--leader-elect-release-on-stop=false`), so its successor waits the
//!   Lease out before its first reconcile.
//! - **successor**: `cumulative` is ours (any release upgrades any older
//!   schema); `naive` is a MODEL of the feature request's operator, whose
//!   upgrade assumes its predecessor's happened and applies only its own
//!   migrations (`--model-naive-successor`).
//!
//! Only gate on, fast start and the cumulative successor is published;
//! every other variant is rendered at test time below `target/`, never
//! committed (`release` refuses it without `--out`).
//!
//! Owns: what each factor changes. Must not touch: files, or anything of
//! the published rendering.

use k8s_openapi::api::core::v1::PodSpec;

use crate::csv::ClusterServiceVersion;
use crate::install::{GATE_CONTAINER, OPERATOR_CONTAINER};

pub use crate::factor::{Gate, Start, Successor};

/// One combination of the factors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Variant {
    pub gate: Gate,
    pub start: Start,
    pub successor: Successor,
}

/// The operator's arguments the slow start adds (its `run` subcommand's flags).
pub const SLOW_START_ARGS: [&str; 2] = [
    "--ready-when=started",
    "--leader-elect-release-on-stop=false",
];

/// The operator's argument the naive successor adds.
pub const NAIVE_SUCCESSOR_ARG: &str = "--model-naive-successor";

impl Variant {
    /// What users install.
    pub fn is_published(self) -> bool {
        self == Variant::default()
    }

    /// The operator arguments this variant adds, in order.
    fn operator_args(self) -> Vec<&'static str> {
        let mut args = Vec::new();
        if self.start == Start::Slow {
            args.extend(SLOW_START_ARGS);
        }
        if self.successor == Successor::Naive {
            args.push(NAIVE_SUCCESSOR_ARG);
        }
        args
    }

    /// Makes a rendered CSV this variant's.
    pub fn apply(self, csv: &mut ClusterServiceVersion) {
        for deployment in &mut csv.spec.install.spec.deployments {
            if let Some(pod) = deployment.spec.template.spec.as_mut() {
                self.apply_to_pod(pod);
            }
        }
    }

    /// Makes an operator pod this variant's (the CSV's and the chart's).
    pub fn apply_to_pod(self, pod: &mut PodSpec) {
        if self.gate == Gate::Off {
            if let Some(init) = pod.init_containers.as_mut() {
                init.retain(|container| container.name != GATE_CONTAINER);
            }
            if pod.init_containers.as_ref().is_some_and(Vec::is_empty) {
                pod.init_containers = None;
            }
        }
        let args = self.operator_args();
        if args.is_empty() {
            return;
        }
        for container in pod
            .containers
            .iter_mut()
            .filter(|container| container.name == OPERATOR_CONTAINER)
        {
            container
                .args
                .get_or_insert_with(Vec::new)
                .extend(args.iter().map(|arg| (*arg).to_owned()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::releases;
    use crate::sources::Sources;
    use serde_json::Value;

    fn csv() -> ClusterServiceVersion {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let sources = Sources::read(&root).unwrap_or_else(|error| panic!("{error}"));
        crate::csv::release_csv(&sources, releases::find("7.10.0").unwrap(), "i:1").unwrap()
    }

    fn rendered(variant: Variant) -> Value {
        let mut csv = csv();
        variant.apply(&mut csv);
        serde_json::to_value(&csv).unwrap()
    }

    /// Every path whose value differs between two JSON documents.
    fn differences(a: &Value, b: &Value, path: &str, out: &mut Vec<String>) {
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                for key in keys {
                    let (left, right) = (
                        x.get(key).unwrap_or(&Value::Null),
                        y.get(key).unwrap_or(&Value::Null),
                    );
                    differences(left, right, &format!("{path}/{key}"), out);
                }
            }
            (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
                for (index, (left, right)) in x.iter().zip(y).enumerate() {
                    differences(left, right, &format!("{path}/{index}"), out);
                }
            }
            _ if a != b => out.push(path.to_owned()),
            _ => {}
        }
    }

    fn changed(from: Variant, to: Variant) -> Vec<String> {
        let mut out = Vec::new();
        differences(&rendered(from), &rendered(to), "", &mut out);
        out
    }

    const POD: &str = "/spec/install/spec/deployments/0/spec/template/spec";

    #[test]
    fn the_published_variant_is_the_published_csv() {
        assert!(Variant::default().is_published());
        assert_eq!(
            rendered(Variant::default()),
            serde_json::to_value(csv()).unwrap()
        );
    }

    /// Each factor changes one thing, whatever the other two are: the arms
    /// of the race differ only in the variable under test.
    #[test]
    fn each_factor_changes_only_its_own_part_of_the_csv() {
        let gates = [Gate::On, Gate::Off];
        let starts = [Start::Fast, Start::Slow];
        let successors = [Successor::Cumulative, Successor::Naive];
        for gate in gates {
            for start in starts {
                for successor in successors {
                    let base = Variant {
                        gate,
                        start,
                        successor,
                    };
                    let gate_off = Variant {
                        gate: Gate::Off,
                        ..base
                    };
                    if gate == Gate::On {
                        assert_eq!(
                            changed(base, gate_off),
                            [format!("{POD}/initContainers")],
                            "{base:?}"
                        );
                    }
                    let operator_args = format!("{POD}/containers/0/args");
                    if start == Start::Fast {
                        assert_eq!(
                            changed(
                                base,
                                Variant {
                                    start: Start::Slow,
                                    ..base
                                }
                            ),
                            std::slice::from_ref(&operator_args),
                            "{base:?}"
                        );
                    }
                    if successor == Successor::Cumulative {
                        assert_eq!(
                            changed(
                                base,
                                Variant {
                                    successor: Successor::Naive,
                                    ..base
                                }
                            ),
                            [operator_args],
                            "{base:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn the_factors_add_their_arguments_after_the_published_ones() {
        let published = rendered(Variant::default());
        let args = |csv: &Value| -> Vec<String> {
            serde_json::from_value(
                csv.pointer(&format!("{POD}/containers/0/args"))
                    .unwrap()
                    .clone(),
            )
            .unwrap()
        };
        let before = args(&published);
        let all = rendered(Variant {
            gate: Gate::Off,
            start: Start::Slow,
            successor: Successor::Naive,
        });
        assert_eq!(all.pointer(&format!("{POD}/initContainers")), None);
        let after = args(&all);
        assert_eq!(after[..before.len()], before[..]);
        assert_eq!(
            after[before.len()..],
            [SLOW_START_ARGS[0], SLOW_START_ARGS[1], NAIVE_SUCCESSOR_ARG]
        );
        assert_eq!(
            published.pointer(&format!("{POD}/initContainers/0/name")),
            Some(&Value::from(GATE_CONTAINER))
        );
    }
}
