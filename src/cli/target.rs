//! Where a cluster command of `upgrade-gate` acts, and its client: the
//! target the flags name, its namespace from the flags, the
//! service-account file or the kubeconfig context.
//!
//! Owns: [`target_and_client`], shared by `commands` (hold, release,
//! status, record) and `keep`, which both import it from here. Must not
//! touch: the rules of a target ([`crate::locate`]).

use crate::gate::{self, GateError};
use crate::locate::{self, NamespaceSource, Target, TargetInput};

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
