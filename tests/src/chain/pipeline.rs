//! The pipelines that push a release the way their users push it, for the
//! deployers whose brake is the admission policy and who push by command:
//! Helm (`helm upgrade --install` of the release's chart) and kubectl
//! (`kubectl apply --server-side` of the release's manifests, its chart as
//! `helm template` renders it — what a GitOps pipeline applies). OLM v1
//! and Flux move on by themselves and are not among them.
//!
//! Owns: the [`Helm`] it renders with (its charts, manifests and the
//! cluster-scoped RBAC a release creates, removed when it drops) and the
//! commands it runs. Must not touch: anything but what the commands apply.

use std::path::Path;

use super::judge::Deployer;
use crate::helm::Helm;
use crate::kubectl::Kubectl;

/// The field manager of the kubectl pipeline's applies.
const FIELD_MANAGER: &str = "upgrade-gate-pipeline";

/// What one push said.
#[derive(Debug)]
pub struct Pushed {
    /// The command exited 0: the API server took the release.
    pub accepted: bool,
    /// stdout then stderr.
    pub output: String,
}

/// Helm, or kubectl with Helm rendering the manifests.
pub struct Pipeline {
    helm: Helm,
    kubectl: Option<Kubectl>,
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
        let helm = || Helm::new(kubeconfig, namespace, image).with_variant(variant);
        match deployer {
            Deployer::Olm | Deployer::OlmV1 | Deployer::Flux => None,
            Deployer::Helm => Some(Pipeline {
                helm: helm(),
                kubectl: None,
                namespace: namespace.to_owned(),
            }),
            Deployer::Kubectl => Some(Pipeline {
                helm: helm(),
                kubectl: Some(Kubectl::new(kubeconfig)),
                namespace: namespace.to_owned(),
            }),
        }
    }

    /// The command, as the narration names it.
    pub fn command(&self) -> &'static str {
        match self.kubectl {
            None => "helm upgrade --install",
            Some(_) => "kubectl apply --server-side",
        }
    }

    /// Pushes `release` once (blocking: call it off the async threads).
    pub fn push(&self, release: &str) -> Pushed {
        match &self.kubectl {
            None => {
                let ran = self.helm.upgrade(release, &[]);
                Pushed {
                    accepted: ran.success,
                    output: ran.output,
                }
            }
            Some(kubectl) => {
                let manifests = self.helm.manifests(release);
                let manifests = manifests.to_str().expect("a UTF-8 path");
                let ran = kubectl.run(
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
}
