//! Which `OperatorCondition` the gate acts on, or why there is none — the
//! fail-closed rules, as one pure function ([`decide`]), table-tested.
//!
//! Owns: the decision from what was observed (which OLM, the configured
//! name, the pod's owner chain) and the set-up errors it can end in. Must
//! not touch: the cluster (the observations come from
//! [`super::detect`] and [`super::owner_chain`]).
//!
//! The rules:
//! - No OLM API served: nothing to gate. OLM v1 only: nothing to gate
//!   either (v1 has no OperatorConditions) — said so in one line.
//! - OLM v0 served, the chain names the pod's CSV: that is the name; a
//!   configured name that differs is refused ([`SetupError::NameMismatch`]).
//! - OLM v0 served, the chain shows a Deployment OLM did not make: a
//!   configured name is used as given (an OperatorCondition made by hand);
//!   without one there is nothing to gate.
//! - OLM v0 served, the chain shows an OLM v1 ClusterExtension: nothing to gate.
//! - OLM v0 served and no chain (not asked, or unreadable: the rights are
//!   optional): a configured name is used; without one the gate fails
//!   ([`SetupError::NameUnknown`]) — it never passes silently under OLM v0.

use super::detect::Olm;
use super::owner_chain::{Chain, Owner};

/// How the name was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NameFound {
    /// Configured (`--name`, `OPERATOR_CONDITION_NAME`); the chain could
    /// not confirm or contradict it.
    Configured,
    /// Configured, and the pod's Deployment belongs to the CSV of that name.
    ConfirmedByOwner {
        /// The Deployment whose owner confirmed it.
        deployment: String,
    },
    /// Not configured: read from the pod's Deployment.
    FromOwner {
        /// The Deployment it was read from.
        deployment: String,
    },
}

/// Where the gate acts, or why it does nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Located {
    /// The `OperatorCondition` of this name (in the target's namespace).
    Gate {
        /// The `OperatorCondition`'s (= the CSV's) name.
        name: String,
        /// How it was found.
        found: NameFound,
    },
    /// OLM is not in play for this pod.
    Outside(OutsideOlm),
}

/// Why the gate did nothing and succeeded: no OperatorCondition guards this
/// operator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutsideOlm {
    /// The cluster serves neither OLM v0's nor OLM v1's API.
    NoOlm,
    /// Only OLM v1 is installed: it has no OperatorConditions.
    OlmV1,
    /// OLM v0 is installed too, but this pod's Deployment belongs to an OLM
    /// v1 ClusterExtension.
    ManagedByOlmV1 {
        /// The pod's Deployment.
        deployment: String,
        /// The ClusterExtension it belongs to.
        extension: String,
    },
    /// The pod's Deployment carries none of OLM's marks and no name is configured.
    NotManagedByOlm {
        /// The pod's Deployment.
        deployment: String,
    },
}

/// What OLM v1 offers instead of the gate, said wherever v1 is detected.
pub const OLM_V1_PROTECTION: &str = "OLM v1 has no OperatorConditions, so there is no gate to close; what holds an upgrade back under v1 is upgrade-gate's admission policy, bound by the cluster's admin (its default Helm runtime applies the next release at once, docs/admission.md), and under its Boxcutter runtime the operator's own readiness (a new revision rolls out only once the Deployment is Available): keep the operator unready until its upgrade is done (docs/olm-v1.md)";

impl std::fmt::Display for OutsideOlm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OutsideOlm::NoOlm => write!(
                f,
                "the cluster serves neither OLM v0's operators.coreos.com/v2 operatorconditions nor OLM v1's clusterextensions: not installed by OLM, nothing to gate"
            ),
            OutsideOlm::OlmV1 => write!(
                f,
                "OLM v1 runs here (olm.operatorframework.io/v1 clusterextensions served, operators.coreos.com/v2 operatorconditions not): {OLM_V1_PROTECTION}"
            ),
            OutsideOlm::ManagedByOlmV1 {
                deployment,
                extension,
            } => write!(
                f,
                "Deployment {deployment} belongs to OLM v1's ClusterExtension {extension}: {OLM_V1_PROTECTION}"
            ),
            OutsideOlm::NotManagedByOlm { deployment } => write!(
                f,
                "Deployment {deployment} was not installed by OLM (no olm.owner label, no ClusterServiceVersion owner) and no OperatorCondition name is configured: nothing to gate"
            ),
        }
    }
}

/// What to add to the CSV, said by every [`SetupError::NameUnknown`].
pub const ADD_NAME_TO_CSV: &str = "in the CSV, set env OPERATOR_CONDITION_NAME to the CSV's metadata.name on the container running upgrade-gate (OLM injects it into containers, never into init containers)";

/// A set-up the gate refuses to run with.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SetupError {
    /// OLM v0 is installed, no name is configured and the pod's owner chain
    /// does not give one.
    #[error(
        "OLM v0 serves OperatorConditions here, but this operator's OperatorCondition name is unknown ({why}): {ADD_NAME_TO_CSV}"
    )]
    NameUnknown {
        /// Why the chain gave no name.
        why: String,
    },
    /// The configured name is not the CSV that owns the pod's Deployment.
    #[error(
        "OPERATOR_CONDITION_NAME (or --name) is {configured:?}, but Deployment {deployment} belongs to CSV {csv:?}: set it to {csv:?}, the CSV's metadata.name, in the CSV's init container"
    )]
    NameMismatch {
        /// The configured name.
        configured: String,
        /// The pod's Deployment.
        deployment: String,
        /// The CSV that owns it.
        csv: String,
    },
}

/// Decides where the gate acts (see the module's rules).
pub fn decide(olm: Olm, configured: Option<&str>, chain: &Chain) -> Result<Located, SetupError> {
    match olm {
        Olm::None => return Ok(Located::Outside(OutsideOlm::NoOlm)),
        Olm::V1 => return Ok(Located::Outside(OutsideOlm::OlmV1)),
        Olm::V0 => {}
    }
    let configured_gate = |name: &str, found: NameFound| {
        Ok(Located::Gate {
            name: name.to_owned(),
            found,
        })
    };
    let unknown = |why: String| Err(SetupError::NameUnknown { why });
    match (chain, configured) {
        (Chain::Read(Owner::Csv { deployment, csv }), Some(name)) if name != csv => {
            Err(SetupError::NameMismatch {
                configured: name.to_owned(),
                deployment: deployment.clone(),
                csv: csv.clone(),
            })
        }
        (Chain::Read(Owner::Csv { deployment, csv }), configured) => configured_gate(
            csv,
            match configured {
                Some(_) => NameFound::ConfirmedByOwner {
                    deployment: deployment.clone(),
                },
                None => NameFound::FromOwner {
                    deployment: deployment.clone(),
                },
            },
        ),
        (
            Chain::Read(Owner::ClusterExtension {
                deployment,
                extension,
            }),
            _,
        ) => Ok(Located::Outside(OutsideOlm::ManagedByOlmV1 {
            deployment: deployment.clone(),
            extension: extension.clone(),
        })),
        (_, Some(name)) => configured_gate(name, NameFound::Configured),
        (Chain::Read(Owner::NotOlm { deployment }), None) => {
            Ok(Located::Outside(OutsideOlm::NotManagedByOlm {
                deployment: deployment.clone(),
            }))
        }
        (Chain::Read(Owner::OlmManagedWithoutCsv { deployment }), None) => unknown(format!(
            "Deployment {deployment} is labelled olm.managed but names no CSV"
        )),
        (Chain::Read(Owner::NotADeployment { pod, controller }), None) => unknown(format!(
            "pod {pod} is run by {}, not by a Deployment",
            controller.as_deref().unwrap_or("no controller")
        )),
        (Chain::Unreadable(why), None) => unknown(format!(
            "no name configured, and the pod's owners cannot be read: {why}"
        )),
        (Chain::NotAsked, None) => unknown(
            "no name configured, and no POD_NAME (downward API) or --deployment to find it from"
                .to_owned(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decision_table() {
        let csv = Chain::Read(Owner::Csv {
            deployment: "op".into(),
            csv: "op.v2".into(),
        });
        let v1_owned = Chain::Read(Owner::ClusterExtension {
            deployment: "op".into(),
            extension: "shop".into(),
        });
        let not_olm = Chain::Read(Owner::NotOlm {
            deployment: "op".into(),
        });
        let hand_made = Chain::Read(Owner::OlmManagedWithoutCsv {
            deployment: "op".into(),
        });
        let job = Chain::Read(Owner::NotADeployment {
            pod: "p".into(),
            controller: Some("Job/upgrade".into()),
        });
        let forbidden = Chain::Unreadable("reading Pod p: forbidden (403): no".into());
        let from_owner = NameFound::FromOwner {
            deployment: "op".into(),
        };
        let confirmed = NameFound::ConfirmedByOwner {
            deployment: "op".into(),
        };
        type Case<'a> = (
            &'a str,
            Olm,
            Option<&'a str>,
            &'a Chain,
            Result<Located, &'a str>,
        );
        let outside = |why| Ok(Located::Outside(why));
        let cases: Vec<Case> = vec![
            (
                "no OLM",
                Olm::None,
                Some("op.v2"),
                &csv,
                outside(OutsideOlm::NoOlm),
            ),
            (
                "no OLM, nothing configured",
                Olm::None,
                None,
                &Chain::NotAsked,
                outside(OutsideOlm::NoOlm),
            ),
            (
                "OLM v1 only",
                Olm::V1,
                Some("op.v2"),
                &Chain::NotAsked,
                outside(OutsideOlm::OlmV1),
            ),
            (
                "v0: name found on the owner",
                Olm::V0,
                None,
                &csv,
                Ok(Located::Gate {
                    name: "op.v2".into(),
                    found: from_owner.clone(),
                }),
            ),
            (
                "v0: configured and confirmed",
                Olm::V0,
                Some("op.v2"),
                &csv,
                Ok(Located::Gate {
                    name: "op.v2".into(),
                    found: confirmed.clone(),
                }),
            ),
            (
                "v0: configured name is another CSV's",
                Olm::V0,
                Some("op.v1"),
                &csv,
                Err("belongs to CSV \"op.v2\""),
            ),
            (
                "v0: pod of an OLM v1 extension",
                Olm::V0,
                Some("op.v2"),
                &v1_owned,
                outside(OutsideOlm::ManagedByOlmV1 {
                    deployment: "op".into(),
                    extension: "shop".into(),
                }),
            ),
            (
                "v0: configured, Deployment not OLM's (hand-made condition)",
                Olm::V0,
                Some("x.v1"),
                &not_olm,
                Ok(Located::Gate {
                    name: "x.v1".into(),
                    found: NameFound::Configured,
                }),
            ),
            (
                "v0: not configured, Deployment not OLM's",
                Olm::V0,
                None,
                &not_olm,
                outside(OutsideOlm::NotManagedByOlm {
                    deployment: "op".into(),
                }),
            ),
            (
                "v0: olm.managed without a CSV, nothing configured",
                Olm::V0,
                None,
                &hand_made,
                Err("labelled olm.managed but names no CSV"),
            ),
            (
                "v0: olm.managed without a CSV, configured",
                Olm::V0,
                Some("x.v1"),
                &hand_made,
                Ok(Located::Gate {
                    name: "x.v1".into(),
                    found: NameFound::Configured,
                }),
            ),
            (
                "v0: a Job's pod without a name",
                Olm::V0,
                None,
                &job,
                Err("run by Job/upgrade, not by a Deployment"),
            ),
            (
                "v0: a Job's pod with a name",
                Olm::V0,
                Some("x.v1"),
                &job,
                Ok(Located::Gate {
                    name: "x.v1".into(),
                    found: NameFound::Configured,
                }),
            ),
            (
                "v0: chain forbidden, configured (literal name, only the condition's rights)",
                Olm::V0,
                Some("x.v1"),
                &forbidden,
                Ok(Located::Gate {
                    name: "x.v1".into(),
                    found: NameFound::Configured,
                }),
            ),
            (
                "v0: chain forbidden, nothing configured",
                Olm::V0,
                None,
                &forbidden,
                Err("cannot be read: reading Pod p: forbidden"),
            ),
            (
                "v0: nothing to start from, configured",
                Olm::V0,
                Some("x.v1"),
                &Chain::NotAsked,
                Ok(Located::Gate {
                    name: "x.v1".into(),
                    found: NameFound::Configured,
                }),
            ),
            (
                "v0: nothing at all: never passes silently",
                Olm::V0,
                None,
                &Chain::NotAsked,
                Err("no POD_NAME (downward API) or --deployment"),
            ),
        ];
        for (case, olm, configured, chain, expected) in cases {
            let decided = decide(olm, configured, chain);
            match (decided, expected) {
                (Ok(located), Ok(expected)) => assert_eq!(located, expected, "case: {case}"),
                (Err(error), Err(part)) => {
                    let line = error.to_string();
                    assert!(line.contains(part), "case: {case}: {line}");
                    assert!(!line.contains('\n'), "case: {case}: one line");
                    if matches!(error, SetupError::NameUnknown { .. }) {
                        assert!(
                            line.contains(ADD_NAME_TO_CSV),
                            "case: {case}: says what to add"
                        );
                    }
                }
                (other, expected) => panic!("case: {case}: got {other:?}, expected {expected:?}"),
            }
        }
    }
}
