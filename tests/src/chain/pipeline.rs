//! The pipelines that push a release the way their users push it, for the
//! deployers whose brake is the admission policy and who push by command:
//! Helm (`helm upgrade --install` of the release's chart) and kubectl
//! (`kubectl apply --server-side` of the release's manifests, its chart as
//! `helm template` renders it — what a GitOps pipeline applies). OLM v1
//! and Flux move on by themselves and are not among them.
//!
//! After a refusal the pipeline waits as docs/deploy-helm.md tells a
//! pipeline to: `kubectl wait` until the namespace's UpgradeRecord says the
//! operator's upgrade is Complete, then it tries again.
//!
//! Owns: the [`Helm`] it renders with (its charts, manifests and the
//! cluster-scoped RBAC a release creates, removed when it drops) and the
//! commands it runs. Must not touch: anything but what the commands apply.

use std::path::Path;
use std::time::Duration;

use upgrade_gate::admission::{COMPLETE, RECORD_GROUP, RECORD_NAME, RECORD_PLURAL};

use super::judge::Deployer;
use crate::helm::Helm;
use crate::kubectl::Kubectl;

/// The field manager of the kubectl pipeline's applies.
const FIELD_MANAGER: &str = "upgrade-gate-pipeline";

/// The operator's Deployment in the sample's chart: its entry in the
/// namespace's UpgradeRecord is named after it.
const OPERATOR_DEPLOYMENT: &str = "app-operator";

/// What one push said.
#[derive(Debug)]
pub struct Pushed {
    /// The command exited 0: the API server took the release.
    pub accepted: bool,
    /// stdout then stderr.
    pub output: String,
}

/// How a pipeline pushes a release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Push {
    /// `helm upgrade --install` of the release's chart.
    HelmUpgrade,
    /// `kubectl apply --server-side` of the chart as Helm renders it.
    KubectlApply,
}

/// Helm, or kubectl with Helm rendering the manifests; kubectl waits on
/// the record for both.
pub struct Pipeline {
    helm: Helm,
    kubectl: Kubectl,
    push: Push,
    namespace: String,
}

impl Pipeline {
    /// The pipeline of `deployer` for `namespace`, its releases running
    /// `image`, rendered with `release`'s `variant` flags (`--successor
    /// naive`); `None` for a deployer that is not pushed by command.
    /// Panics without the tools (`UPGRADE_GATE_TOOLS`).
    pub fn new(
        deployer: Deployer,
        kubeconfig: &Path,
        namespace: &str,
        image: &str,
        variant: &[&str],
    ) -> Option<Pipeline> {
        let push = match deployer {
            Deployer::Olm | Deployer::OlmV1 | Deployer::Flux => return None,
            Deployer::Helm => Push::HelmUpgrade,
            Deployer::Kubectl => Push::KubectlApply,
        };
        Some(Pipeline {
            helm: Helm::new(kubeconfig, namespace, image).with_variant(variant),
            kubectl: Kubectl::new(kubeconfig),
            push,
            namespace: namespace.to_owned(),
        })
    }

    /// The namespace it pushes to.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The command, as the narration names it.
    pub fn command(&self) -> &'static str {
        match self.push {
            Push::HelmUpgrade => "helm upgrade --install",
            Push::KubectlApply => "kubectl apply --server-side",
        }
    }

    /// Pushes `release` once (blocking: call it off the async threads).
    pub fn push(&self, release: &str) -> Pushed {
        match self.push {
            Push::HelmUpgrade => {
                let ran = self.helm.upgrade(release, &[]);
                Pushed {
                    accepted: ran.success,
                    output: ran.output,
                }
            }
            Push::KubectlApply => {
                let manifests = self.helm.manifests(release);
                let manifests = manifests.to_str().expect("a UTF-8 path");
                let ran = self.kubectl.run(
                    &[
                        "apply",
                        "--server-side",
                        "--force-conflicts",
                        "--field-manager",
                        FIELD_MANAGER,
                        "--namespace",
                        &self.namespace,
                        "-f",
                        manifests,
                    ],
                    None,
                );
                Pushed {
                    accepted: ran.accepted,
                    output: ran.output,
                }
            }
        }
    }

    /// Waits, at most `timeout`, until the namespace's UpgradeRecord says
    /// the operator's upgrade is Complete: the `kubectl wait` of
    /// docs/deploy-helm.md (blocking: call it off the async threads).
    /// Err with kubectl's output when the time ran out or kubectl failed
    /// (the caller tries again either way).
    pub fn wait_for_complete(&self, timeout: Duration) -> Result<(), String> {
        let record = format!("{RECORD_PLURAL}.{RECORD_GROUP}/{RECORD_NAME}");
        let condition = wait_condition(OPERATOR_DEPLOYMENT);
        let timeout = format!("--timeout={}s", timeout.as_secs().max(1));
        let ran = self.kubectl.run(
            &[
                "wait",
                &record,
                "--namespace",
                &self.namespace,
                &condition,
                &timeout,
            ],
            None,
        );
        if ran.accepted {
            Ok(())
        } else {
            Err(ran.output.trim().to_owned())
        }
    }
}

/// `kubectl wait`'s condition: the record's entry of `operator` says Complete.
fn wait_condition(operator: &str) -> String {
    format!("--for=jsonpath={{.spec.operators.{operator}.state}}={COMPLETE}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_is_the_one_the_helm_page_gives() {
        let condition = wait_condition(OPERATOR_DEPLOYMENT);
        assert_eq!(
            condition,
            "--for=jsonpath={.spec.operators.app-operator.state}=Complete"
        );
        let page = std::fs::read_to_string(crate::repository_root().join("docs/deploy-helm.md"))
            .unwrap_or_else(|error| panic!("reading docs/deploy-helm.md: {error}"));
        // The page's, for an operator named my-operator, quoted for the shell.
        let quoted = wait_condition("my-operator")
            .replacen("={", "='{", 1)
            .replacen("}=", "}'=", 1);
        assert_eq!(
            quoted,
            "--for=jsonpath='{.spec.operators.my-operator.state}'=Complete"
        );
        assert!(
            page.contains(&quoted)
                && page.contains(&format!("{RECORD_PLURAL}.{RECORD_GROUP}/{RECORD_NAME}")),
            "docs/deploy-helm.md no longer gives the pipeline's wait ({quoted})"
        );
    }
}
