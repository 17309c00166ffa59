//! Which `OperatorCondition` the gate acts on, or why there is none — the
//! fail-closed rules, as one pure function ([`decide`]), table-tested.
//!
//! Owns: the decision from what was observed (which OLM, the configured
//! name, the pod's owner chain) and the set-up errors it can end in. Must
//! not touch: the cluster (the observations come from
//! [`super::detect`] and [`super::owner_chain`]).
//!
//! Two names can be given, and they mean different things: the configured
//! name (`--name`, `OPERATOR_CONDITION_NAME`) is the one a person asked for,
//! used wherever the pod runs; the CSV name (`--csv-name`,
//! `UPGRADE_GATE_CSV_NAME`) is the one written into a Deployment for OLM's
//! installs of it (a kustomize component writes it into every build,
//! `make deploy`'s too), used only where OLM installed the pod.
//!
//! The rules:
//! - No OLM API served: nothing to gate. OLM v1 only: nothing to gate
//!   either (v1 has no OperatorConditions) — said so in one line.
//! - OLM v0 served, the chain names the pod's CSV: that is the name; a
//!   configured or CSV name that differs is refused
//!   ([`SetupError::NameMismatch`]).
//! - OLM v0 served, the chain shows an OLM v1 ClusterExtension: nothing to gate.
//! - OLM v0 served, a configured name and no CSV owner (a Deployment OLM
//!   did not make, a Job, no chain): the configured name is used as given
//!   (an OperatorCondition made by hand).
//! - OLM v0 served, only a CSV name, and the chain shows a pod OLM did not
//!   install (a Deployment without OLM's marks, or no Deployment at all):
//!   nothing to gate — the name is for OLM's installs, and this is not one
//!   (`make deploy` on a cluster that also runs OLM).
//! - OLM v0 served, only a CSV name, and the chain cannot tell (unreadable,
//!   not asked, or `olm.managed` without a CSV): the CSV name is used. On
//!   OLM's install that is the right gate; elsewhere `hold` waits for an
//!   OperatorCondition nobody makes and fails — closed, never open.
//! - OLM v0 served and no name at all: the chain's CSV, or nothing to gate
//!   for a Deployment without OLM's marks; otherwise the gate fails
//!   ([`SetupError::NameUnknown`]) — it never passes silently under OLM v0.

use super::detect::Olm;
use super::owner_chain::{Chain, Owner};

/// What the gate was told about the name ([`decide`]'s input).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Names<'a> {
    /// `--name`, `OPERATOR_CONDITION_NAME`: the name a person asked for.
    pub configured: Option<&'a str>,
    /// `--csv-name`, `UPGRADE_GATE_CSV_NAME`: the CSV's name when OLM
    /// installs this Deployment; used only where the pod is OLM's.
    pub csv: Option<&'a str>,
}

/// The setting that gives the CSV name, as a person writes it.
pub const CSV_NAME_SETTING: &str = "UPGRADE_GATE_CSV_NAME (or --csv-name)";
/// The setting that gives the configured name, as a person writes it.
pub const NAME_SETTING: &str = "OPERATOR_CONDITION_NAME (or --name)";

/// How the name was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NameFound {
    /// Configured (`--name`, `OPERATOR_CONDITION_NAME`); the chain could
    /// not confirm or contradict it.
    Configured,
    /// The CSV name (`--csv-name`, `UPGRADE_GATE_CSV_NAME`), which the
    /// chain could not check: holding is the safe choice where OLM may have
    /// installed the pod.
    CsvNameUnchecked {
        /// Why the chain could not tell whether OLM installed the pod.
        why: String,
    },
    /// Configured or the CSV name, and the pod's Deployment belongs to the CSV of that name.
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
        /// The CSV name it was given for OLM's installs, which this is not.
        csv_name: Option<String>,
    },
    /// The pod is not run by a Deployment (OLM v0 installs operators only
    /// as Deployments) and only a CSV name is given.
    NotADeployment {
        /// The pod.
        pod: String,
        /// Its controller as `Kind/name`, if it has one.
        controller: Option<String>,
        /// The CSV name it was given for OLM's installs, which this is not.
        csv_name: String,
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
            OutsideOlm::NotManagedByOlm {
                deployment,
                csv_name: None,
            } => write!(
                f,
                "Deployment {deployment} was not installed by OLM (no olm.owner label, no ClusterServiceVersion owner) and no OperatorCondition name is configured: nothing to gate"
            ),
            OutsideOlm::NotManagedByOlm {
                deployment,
                csv_name: Some(csv_name),
            } => write!(
                f,
                "Deployment {deployment} was not installed by OLM (no olm.owner label, no ClusterServiceVersion owner): its CSV name {csv_name} ({CSV_NAME_SETTING}) is for OLM's installs only, so the gate does nothing here (installed by kubectl, make deploy or another deployer; upgrade-gate's admission policy holds those, docs/admission.md)"
            ),
            OutsideOlm::NotADeployment {
                pod,
                controller,
                csv_name,
            } => write!(
                f,
                "pod {pod} is run by {}, not by a Deployment, so OLM did not install it: its CSV name {csv_name} ({CSV_NAME_SETTING}) is for OLM's installs only, so the gate does nothing here",
                controller.as_deref().unwrap_or("no controller")
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
    /// The configured (or CSV) name is not the CSV that owns the pod's Deployment.
    #[error(
        "{setting} is {configured:?}, but Deployment {deployment} belongs to CSV {csv:?}: set it to {csv:?}, the CSV's metadata.name, in the CSV's init container"
    )]
    NameMismatch {
        /// Which setting gave it ([`NAME_SETTING`], [`CSV_NAME_SETTING`]).
        setting: &'static str,
        /// The name given.
        configured: String,
        /// The pod's Deployment.
        deployment: String,
        /// The CSV that owns it.
        csv: String,
    },
}

/// Decides where the gate acts (see the module's rules).
pub fn decide(olm: Olm, names: Names<'_>, chain: &Chain) -> Result<Located, SetupError> {
    match olm {
        Olm::None => return Ok(Located::Outside(OutsideOlm::NoOlm)),
        Olm::V1 => return Ok(Located::Outside(OutsideOlm::OlmV1)),
        Olm::V0 => {}
    }
    let gate = |name: &str, found: NameFound| {
        Ok(Located::Gate {
            name: name.to_owned(),
            found,
        })
    };
    let unchecked = |name: &str, why: String| gate(name, NameFound::CsvNameUnchecked { why });
    let unknown = |why: String| Err(SetupError::NameUnknown { why });
    match (chain, names.configured, names.csv) {
        (Chain::Read(Owner::Csv { deployment, csv }), ..) => owned_by_csv(names, deployment, csv),
        (
            Chain::Read(Owner::ClusterExtension {
                deployment,
                extension,
            }),
            ..,
        ) => Ok(Located::Outside(OutsideOlm::ManagedByOlmV1 {
            deployment: deployment.clone(),
            extension: extension.clone(),
        })),
        (_, Some(name), _) => gate(name, NameFound::Configured),
        (Chain::Read(Owner::NotOlm { deployment }), None, csv_name) => {
            Ok(Located::Outside(OutsideOlm::NotManagedByOlm {
                deployment: deployment.clone(),
                csv_name: csv_name.map(str::to_owned),
            }))
        }
        (Chain::Read(Owner::NotADeployment { pod, controller }), None, Some(csv_name)) => {
            Ok(Located::Outside(OutsideOlm::NotADeployment {
                pod: pod.clone(),
                controller: controller.clone(),
                csv_name: csv_name.to_owned(),
            }))
        }
        (Chain::Read(Owner::OlmManagedWithoutCsv { deployment }), None, Some(csv_name)) => {
            unchecked(
                csv_name,
                format!("Deployment {deployment} is labelled olm.managed but names no CSV"),
            )
        }
        (Chain::Unreadable(why), None, Some(csv_name)) => {
            unchecked(csv_name, format!("the pod's owners cannot be read: {why}"))
        }
        (Chain::NotAsked, None, Some(csv_name)) => unchecked(
            csv_name,
            "no POD_NAME (downward API) or --deployment to read the pod's owners from".to_owned(),
        ),
        (Chain::Read(Owner::OlmManagedWithoutCsv { deployment }), None, None) => unknown(format!(
            "Deployment {deployment} is labelled olm.managed but names no CSV"
        )),
        (Chain::Read(Owner::NotADeployment { pod, controller }), None, None) => unknown(format!(
            "pod {pod} is run by {}, not by a Deployment",
            controller.as_deref().unwrap_or("no controller")
        )),
        (Chain::Unreadable(why), None, None) => unknown(format!(
            "no name configured, and the pod's owners cannot be read: {why}"
        )),
        (Chain::NotAsked, None, None) => unknown(
            "no name configured, and no POD_NAME (downward API) or --deployment to find it from"
                .to_owned(),
        ),
    }
}

/// The pod's Deployment belongs to CSV `csv`: that is the gate, and every
/// name given must be it.
fn owned_by_csv(names: Names<'_>, deployment: &str, csv: &str) -> Result<Located, SetupError> {
    let given = [
        (names.configured, NAME_SETTING),
        (names.csv, CSV_NAME_SETTING),
    ];
    for (name, setting) in given {
        if let Some(name) = name.filter(|name| *name != csv) {
            return Err(SetupError::NameMismatch {
                setting,
                configured: name.to_owned(),
                deployment: deployment.to_owned(),
                csv: csv.to_owned(),
            });
        }
    }
    let deployment = deployment.to_owned();
    let found = if names.configured.is_some() || names.csv.is_some() {
        NameFound::ConfirmedByOwner { deployment }
    } else {
        NameFound::FromOwner { deployment }
    };
    Ok(Located::Gate {
        name: csv.to_owned(),
        found,
    })
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
        let configured = |name| Names {
            configured: Some(name),
            csv: None,
        };
        let csv_name = |name| Names {
            configured: None,
            csv: Some(name),
        };
        let both = |name, csv| Names {
            configured: Some(name),
            csv: Some(csv),
        };
        let nothing = Names::default();
        let gate = |name: &str, found: NameFound| {
            Ok(Located::Gate {
                name: name.into(),
                found,
            })
        };
        let unchecked = |name: &str, why: &str| {
            gate(
                name,
                NameFound::CsvNameUnchecked {
                    why: why.to_owned(),
                },
            )
        };
        type Case<'a> = (&'a str, Olm, Names<'a>, &'a Chain, Result<Located, &'a str>);
        let outside = |why| Ok(Located::Outside(why));
        let cases: Vec<Case> = vec![
            (
                "no OLM",
                Olm::None,
                configured("op.v2"),
                &csv,
                outside(OutsideOlm::NoOlm),
            ),
            (
                "no OLM, nothing configured",
                Olm::None,
                nothing,
                &Chain::NotAsked,
                outside(OutsideOlm::NoOlm),
            ),
            (
                "no OLM, only a CSV name",
                Olm::None,
                csv_name("op.v2"),
                &Chain::NotAsked,
                outside(OutsideOlm::NoOlm),
            ),
            (
                "OLM v1 only",
                Olm::V1,
                configured("op.v2"),
                &Chain::NotAsked,
                outside(OutsideOlm::OlmV1),
            ),
            (
                "v0: name found on the owner",
                Olm::V0,
                nothing,
                &csv,
                gate("op.v2", from_owner.clone()),
            ),
            (
                "v0: configured and confirmed",
                Olm::V0,
                configured("op.v2"),
                &csv,
                gate("op.v2", confirmed.clone()),
            ),
            (
                "v0: CSV name confirmed by OLM's owner chain",
                Olm::V0,
                csv_name("op.v2"),
                &csv,
                gate("op.v2", confirmed.clone()),
            ),
            (
                "v0: both names, both the owner's",
                Olm::V0,
                both("op.v2", "op.v2"),
                &csv,
                gate("op.v2", confirmed.clone()),
            ),
            (
                "v0: configured name is another CSV's",
                Olm::V0,
                configured("op.v1"),
                &csv,
                Err(
                    "OPERATOR_CONDITION_NAME (or --name) is \"op.v1\", but Deployment op belongs to CSV \"op.v2\"",
                ),
            ),
            (
                "v0: CSV name is another CSV's (a copied CSV kept its predecessor's)",
                Olm::V0,
                csv_name("op.v1"),
                &csv,
                Err(
                    "UPGRADE_GATE_CSV_NAME (or --csv-name) is \"op.v1\", but Deployment op belongs to CSV \"op.v2\"",
                ),
            ),
            (
                "v0: configured right, CSV name wrong",
                Olm::V0,
                both("op.v2", "op.v1"),
                &csv,
                Err("UPGRADE_GATE_CSV_NAME (or --csv-name) is \"op.v1\""),
            ),
            (
                "v0: pod of an OLM v1 extension",
                Olm::V0,
                configured("op.v2"),
                &v1_owned,
                outside(OutsideOlm::ManagedByOlmV1 {
                    deployment: "op".into(),
                    extension: "shop".into(),
                }),
            ),
            (
                "v0: pod of an OLM v1 extension, only a CSV name",
                Olm::V0,
                csv_name("op.v2"),
                &v1_owned,
                outside(OutsideOlm::ManagedByOlmV1 {
                    deployment: "op".into(),
                    extension: "shop".into(),
                }),
            ),
            (
                "v0: configured, Deployment not OLM's (hand-made condition)",
                Olm::V0,
                configured("x.v1"),
                &not_olm,
                gate("x.v1", NameFound::Configured),
            ),
            (
                "v0: both names, Deployment not OLM's: the person's name counts",
                Olm::V0,
                both("x.v1", "op.v2"),
                &not_olm,
                gate("x.v1", NameFound::Configured),
            ),
            (
                "v0: not configured, Deployment not OLM's",
                Olm::V0,
                nothing,
                &not_olm,
                outside(OutsideOlm::NotManagedByOlm {
                    deployment: "op".into(),
                    csv_name: None,
                }),
            ),
            (
                "v0: only a CSV name, Deployment not OLM's (make deploy)",
                Olm::V0,
                csv_name("op.v2"),
                &not_olm,
                outside(OutsideOlm::NotManagedByOlm {
                    deployment: "op".into(),
                    csv_name: Some("op.v2".into()),
                }),
            ),
            (
                "v0: olm.managed without a CSV, nothing configured",
                Olm::V0,
                nothing,
                &hand_made,
                Err("labelled olm.managed but names no CSV"),
            ),
            (
                "v0: olm.managed without a CSV, configured",
                Olm::V0,
                configured("x.v1"),
                &hand_made,
                gate("x.v1", NameFound::Configured),
            ),
            (
                "v0: olm.managed without a CSV, only a CSV name: holds",
                Olm::V0,
                csv_name("op.v2"),
                &hand_made,
                unchecked(
                    "op.v2",
                    "Deployment op is labelled olm.managed but names no CSV",
                ),
            ),
            (
                "v0: a Job's pod without a name",
                Olm::V0,
                nothing,
                &job,
                Err("run by Job/upgrade, not by a Deployment"),
            ),
            (
                "v0: a Job's pod with a name",
                Olm::V0,
                configured("x.v1"),
                &job,
                gate("x.v1", NameFound::Configured),
            ),
            (
                "v0: a Job's pod with only a CSV name: OLM installs only Deployments",
                Olm::V0,
                csv_name("op.v2"),
                &job,
                outside(OutsideOlm::NotADeployment {
                    pod: "p".into(),
                    controller: Some("Job/upgrade".into()),
                    csv_name: "op.v2".into(),
                }),
            ),
            (
                "v0: chain forbidden, configured (literal name, only the condition's rights)",
                Olm::V0,
                configured("x.v1"),
                &forbidden,
                gate("x.v1", NameFound::Configured),
            ),
            (
                "v0: chain forbidden, only a CSV name: holds (fails closed off OLM)",
                Olm::V0,
                csv_name("op.v2"),
                &forbidden,
                unchecked(
                    "op.v2",
                    "the pod's owners cannot be read: reading Pod p: forbidden (403): no",
                ),
            ),
            (
                "v0: chain forbidden, nothing configured",
                Olm::V0,
                nothing,
                &forbidden,
                Err("cannot be read: reading Pod p: forbidden"),
            ),
            (
                "v0: nothing to start from, configured",
                Olm::V0,
                configured("x.v1"),
                &Chain::NotAsked,
                gate("x.v1", NameFound::Configured),
            ),
            (
                "v0: nothing to start from, only a CSV name: holds",
                Olm::V0,
                csv_name("op.v2"),
                &Chain::NotAsked,
                unchecked(
                    "op.v2",
                    "no POD_NAME (downward API) or --deployment to read the pod's owners from",
                ),
            ),
            (
                "v0: nothing at all: never passes silently",
                Olm::V0,
                nothing,
                &Chain::NotAsked,
                Err("no POD_NAME (downward API) or --deployment"),
            ),
        ];
        for (case, olm, names, chain, expected) in cases {
            let decided = decide(olm, names, chain);
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

    /// Where the gate does nothing because the pod is not OLM's, the one
    /// line says so in the words of what was given.
    #[test]
    fn a_csv_name_off_olm_says_why_the_gate_does_nothing() {
        let line = OutsideOlm::NotManagedByOlm {
            deployment: "widget-operator-controller-manager".into(),
            csv_name: Some("widget-operator.v0.1.0".into()),
        }
        .to_string();
        assert!(!line.contains('\n'), "{line}");
        for part in [
            "Deployment widget-operator-controller-manager was not installed by OLM",
            "widget-operator.v0.1.0 (UPGRADE_GATE_CSV_NAME (or --csv-name)) is for OLM's installs only",
            "the gate does nothing here",
        ] {
            assert!(line.contains(part), "{part:?} in {line}");
        }
        let without = OutsideOlm::NotManagedByOlm {
            deployment: "op".into(),
            csv_name: None,
        }
        .to_string();
        assert!(
            without.contains("no OperatorCondition name is configured"),
            "{without}"
        );
    }
}
