//! Locating: which OLM runs, which `OperatorCondition` guards an operator
//! (or why none does), and who owns its pod — for any caller that needs the
//! gate's object: the `upgrade-gate` commands, the keeper, an operator of
//! its own.
//!
//! Owns: what the gate was told ([`Target`], checked by [`resolve_target`]),
//! discovery ([`detect_olm`]), the pod's owner chain ([`read_chain`]), the
//! fail-closed set-up rules ([`decide`]), the one call that runs them in
//! order ([`find`]) and its error ([`Error`]). Must not touch: any write,
//! any object but the pod, its ReplicaSet and its Deployment (reads), how
//! the `OperatorCondition` itself is read or written (that is
//! [`crate::operator_condition`]'s), or how a command ends (exit codes are
//! the CLI's).
//!
//! ```no_run
//! use std::time::Duration;
//! use upgrade_gate::locate::{self, Located, Target};
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let client = kube::Client::try_default().await?;
//! let target = Target::from_env()?;
//! let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
//! match locate::find(&client, &target, deadline).await?.1 {
//!     Located::Gate { name, .. } => println!("OperatorCondition {name}"),
//!     Located::Outside(why) => println!("nothing to gate: {why}"),
//! }
//! # Ok(())
//! # }
//! ```

mod detect;
mod owner_chain;
mod setup;
mod target;

pub use detect::{
    CLUSTER_EXTENSIONS, CLUSTER_EXTENSIONS_GROUP_VERSION, Olm, cluster_extensions_served,
    detect_olm,
};
pub use owner_chain::{
    Chain, OLM_MANAGED_LABEL, OLM_OWNER_KIND_LABEL, OLM_OWNER_LABEL, OLM_V1_OWNER_KIND_LABEL,
    OLM_V1_OWNER_NAME_LABEL, Owner, controller_of, deployment_owner, owning_csv, read_chain,
};
pub use setup::{
    ADD_NAME_TO_CSV, CSV_NAME_SETTING, Located, NAME_SETTING, NameFound, Names, OLM_V1_PROTECTION,
    OutsideOlm, SetupError, decide,
};
pub use target::{
    InvalidTarget, NamespaceSource, SERVICE_ACCOUNT_DIR, SERVICE_ACCOUNT_NAMESPACE_FILE, Target,
    TargetInput, choose_namespace, resolve_target,
};

use tokio::time::Instant;

use crate::operator_condition;

/// Why [`find`] located nothing.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Discovery or a read of the pod's owners failed until the deadline.
    #[error(transparent)]
    Api(#[from] operator_condition::Error),
    /// The set-up leaves no OperatorCondition to act on safely.
    #[error(transparent)]
    Setup(#[from] SetupError),
}

/// Reads the pod's namespace from the service-account mount, if there is one.
pub fn service_account_namespace() -> Option<String> {
    std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE_FILE).ok()
}

/// Observes (which OLM; the pod's owners, when OLM v0 is served) and
/// decides where the gate acts ([`decide`]).
pub async fn find(
    client: &kube::Client,
    target: &Target,
    deadline: Instant,
) -> Result<(Olm, Located), Error> {
    let olm = detect_olm(client, deadline).await?;
    let chain = if olm == Olm::V0 {
        read_chain(client, target, deadline).await?
    } else {
        Chain::NotAsked
    };
    if let Chain::Unreadable(why) = &chain {
        tracing::info!(%why, "the pod's owners cannot be read (get on pods, replicasets and deployments is optional)");
    }
    let names = Names {
        configured: target.name.as_deref(),
        csv: target.csv_name.as_deref(),
    };
    let located = decide(olm, names, &chain)?;
    if let Located::Gate { name, found } = &located {
        match found {
            NameFound::Configured => {}
            NameFound::CsvNameUnchecked { why } => {
                tracing::warn!(operator_condition = %name, %why, "using the CSV name ({CSV_NAME_SETTING}) without knowing whether OLM installed this pod: on OLM's install that is its gate; anywhere else no one makes that OperatorCondition and the wait fails (closed): let the pod get pods, replicasets and deployments, and set POD_NAME, so a Deployment OLM did not install is seen as such")
            }
            NameFound::ConfirmedByOwner { deployment } => {
                tracing::info!(operator_condition = %name, %deployment, "the pod's Deployment belongs to the configured CSV")
            }
            NameFound::FromOwner { deployment } => {
                tracing::info!(operator_condition = %name, %deployment, "found the OperatorCondition name on the pod's Deployment")
            }
        }
    }
    Ok((olm, located))
}
