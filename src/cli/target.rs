//! Where a cluster command of `upgrade-gate` acts, and its client: the
//! target the flags name, its namespace from the flags, the
//! service-account file or the kubeconfig context.
//!
//! Owns: the flags that name the target ([`TargetFlags`]) and
//! [`target_and_client`], shared by `commands` (hold, release, status) and
//! `keep`, which both import them from here. Must not touch: the rules of
//! a target ([`crate::locate`]).

use clap::Args;

use crate::gate::{self, GateError};
use crate::locate::{self, NamespaceSource, Target, TargetInput};

/// The flags that name the OperatorCondition (and the Deployment and pod
/// it is checked against) for `hold`, `release`, `status` and `keep`.
#[derive(Debug, Args)]
pub struct TargetFlags {
    /// Name of the OperatorCondition: the CSV's metadata.name. OLM injects
    /// OPERATOR_CONDITION_NAME into the Deployment's containers but not into init containers:
    /// for hold, set it literally in the CSV.
    #[arg(long, env = "OPERATOR_CONDITION_NAME")]
    pub name: Option<String>,
    /// The CSV's metadata.name when OLM installs this pod's Deployment, written into manifests
    /// that are also deployed without OLM (a kustomize component's, `make deploy`): used only
    /// where the pod's owners are OLM's (POD_NAME and `get` on pods, replicasets and
    /// deployments to see them); where they cannot be read, used as is.
    #[arg(long, env = "UPGRADE_GATE_CSV_NAME")]
    pub csv_name: Option<String>,
    /// The operator Deployment: its `olm.owner` label or ClusterServiceVersion ownerReference
    /// gives the name, or checks the configured one (needs `get` on that Deployment); with
    /// --record, it names the admission record's entry.
    #[arg(long, env = "UPGRADE_GATE_DEPLOYMENT")]
    pub deployment: Option<String>,
    /// This pod's name (set POD_NAME from the downward API, metadata.name): the owner chain
    /// pod -> ReplicaSet -> Deployment -> CSV starts there to find or check the name (needs
    /// `get` on pods, replicasets and deployments; without those rights the configured name is
    /// used as is); keep's Lease holder is named after it.
    #[arg(long, env = "POD_NAME")]
    pub pod: Option<String>,
    /// Namespace of the OperatorCondition (and of keep's Lease and record). Default: the pod's,
    /// from the service-account mount (/var/run/secrets/kubernetes.io/serviceaccount/namespace);
    /// outside a pod, the kubeconfig context's ("default" when it names none), as kubectl
    /// upgrade-gate does.
    #[arg(long, env = "POD_NAMESPACE")]
    pub namespace: Option<String>,
}

impl TargetFlags {
    /// The target as given, its namespace not yet chosen
    /// ([`target_and_client`] chooses it).
    pub fn input(&self) -> TargetInput<'_> {
        TargetInput {
            name: self.name.as_deref(),
            csv_name: self.csv_name.as_deref(),
            deployment: self.deployment.as_deref(),
            pod: self.pod.as_deref(),
            namespace: self.namespace.as_deref(),
            service_account_namespace: None,
            kubeconfig_namespace: None,
        }
    }
}

/// The target `given` names (its namespace from the flags, the
/// service-account file, or the kubeconfig context, in that order) and a
/// client of the cluster.
pub(super) async fn target_and_client(
    given: TargetInput<'_>,
) -> Result<(Target, kube::Client), GateError> {
    let named = given.namespace.is_some_and(|n| !n.trim().is_empty());
    let file = (!named).then(locate::service_account_namespace).flatten();
    let mut input = TargetInput {
        service_account_namespace: file.as_deref(),
        kubeconfig_namespace: None,
        ..given
    };
    // The cluster's configuration is read before the target is checked
    // only when the kubeconfig context has to name the namespace.
    let config = match locate::choose_namespace(&input) {
        Some(_) => None,
        None => Some(gate::client_config().await?),
    };
    input.kubeconfig_namespace = config.as_ref().map(|c| c.default_namespace.as_str());
    if let Some((namespace, NamespaceSource::KubeconfigContext)) = locate::choose_namespace(&input)
    {
        tracing::info!(%namespace, "the namespace is the kubeconfig context's (no --namespace, POD_NAMESPACE or service-account namespace file)");
    }
    let target = locate::resolve_target(&input)?;
    let config = match config {
        Some(config) => config,
        None => gate::client_config().await?,
    };
    Ok((target, gate::client(config)?))
}
