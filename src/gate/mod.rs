//! The gate: `upgrade-gate hold` (the operator pod's init container),
//! `release` and `status`, as library code under the thin `bin/upgrade-gate.rs`.
//!
//! Owns: the order of steps for each command — is OLM in play (discovery),
//! which OperatorCondition, write, wait for OLM — and how each ends
//! ([`Outcome`], [`GateError`], [`exit_code`]). Must not touch: how the
//! OperatorCondition is written or read (that is
//! [`crate::operator_condition`]'s), or any object but the OperatorCondition
//! and one read of the operator Deployment.
//!
//! `hold` closes the race of the feature request: OLM may create the next CSV
//! seconds after this one succeeds, so the gate must be closed — and OLM
//! must have *copied* it into status — before the main container starts.

mod outcome;
mod report;
mod target;

pub use outcome::{EXIT_CODES, GateError, Outcome, OutsideOlm, exit_code, exit_code_table};
pub use report::{EntryReport, StatusReport};
pub use target::{
    NameSource, OLM_OWNER_KIND_LABEL, OLM_OWNER_LABEL, SERVICE_ACCOUNT_NAMESPACE_FILE, Target,
    owning_csv, resolve_target,
};

use tokio::time::Instant;

use crate::operator_condition::{
    OperatorConditionClient, Reason, UpgradeableEntry, operator_conditions_served,
};

/// The reason `hold` writes unless told otherwise.
pub const DEFAULT_HOLD_REASON: &str = "UpgradeInProgress";
/// The reason `release` writes unless told otherwise.
pub const DEFAULT_RELEASE_REASON: &str = "UpgradeComplete";

/// The message `hold` writes unless told otherwise.
pub const DEFAULT_HOLD_MESSAGE: &str = "upgrade-gate hold: this operator version is starting; its operator opens the gate when its upgrade is complete";

/// The message `release` writes unless told otherwise.
pub const DEFAULT_RELEASE_MESSAGE: &str =
    "upgrade-gate release: the operator reports its upgrade complete; OLM may upgrade it";

/// The `Upgradeable=False` entry for `hold` from `--reason`/`--message` or
/// the defaults.
pub fn hold_entry(
    reason: Option<&str>,
    message: Option<&str>,
) -> Result<UpgradeableEntry, GateError> {
    let reason = checked_reason(reason.unwrap_or(DEFAULT_HOLD_REASON))?;
    UpgradeableEntry::closed(reason, message.unwrap_or(DEFAULT_HOLD_MESSAGE))
        .map_err(|e| GateError::InvalidInput(e.to_string()))
}

/// The `Upgradeable=True` entry for `release` from `--reason`/`--message`
/// or the defaults.
pub fn release_entry(
    reason: Option<&str>,
    message: Option<&str>,
) -> Result<UpgradeableEntry, GateError> {
    let reason = checked_reason(reason.unwrap_or(DEFAULT_RELEASE_REASON))?;
    UpgradeableEntry::open(reason, message.unwrap_or(DEFAULT_RELEASE_MESSAGE))
        .map_err(|e| GateError::InvalidInput(e.to_string()))
}

fn checked_reason(reason: &str) -> Result<Reason, GateError> {
    Reason::new(reason).map_err(|e| GateError::InvalidInput(e.to_string()))
}

/// Reads the pod's namespace from the service-account mount, if there is one.
pub fn service_account_namespace() -> Option<String> {
    std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE_FILE).ok()
}

/// A client from the in-cluster service account or the kubeconfig.
pub async fn connect() -> Result<kube::Client, GateError> {
    kube::Client::try_default()
        .await
        .map_err(|e| GateError::NoClusterConfig(e.to_string()))
}

/// The OperatorCondition to act on, or why OLM is not in play: asks
/// discovery first (a 403 on the object cannot tell "no OLM" from "not
/// allowed"), then resolves the name.
async fn locate(
    client: &kube::Client,
    target: &Target,
    deadline: Instant,
) -> Result<Result<OperatorConditionClient, OutsideOlm>, GateError> {
    if !operator_conditions_served(client, deadline).await? {
        return Ok(Err(OutsideOlm::ApiNotServed));
    }
    let name = match &target.name {
        NameSource::Given(name) => name.clone(),
        NameSource::OwnerOfDeployment(deployment) => {
            match target::owning_csv_of_deployment(client, &target.namespace, deployment, deadline)
                .await?
            {
                Some(name) => {
                    tracing::info!(%deployment, operator_condition = %name, "found the OperatorCondition name on the Deployment");
                    name
                }
                None => {
                    return Ok(Err(OutsideOlm::DeploymentNotFromCsv {
                        deployment: deployment.clone(),
                    }));
                }
            }
        }
    };
    Ok(Ok(OperatorConditionClient::new(
        client.clone(),
        &target.namespace,
        &name,
    )))
}

/// `hold`: closes the gate (unless spec already says False, whose reason
/// and message then stay) and waits until OLM's status shows False at the
/// current generation. Succeeds only when OLM confirmed it, or when OLM is
/// not in play.
pub async fn hold(
    client: &kube::Client,
    target: &Target,
    entry: &UpgradeableEntry,
    deadline: Instant,
) -> Result<Outcome, GateError> {
    let condition = match locate(client, target, deadline).await? {
        Ok(condition) => condition,
        Err(outside) => return Ok(Outcome::OutsideOlm(outside)),
    };
    let written = condition.close_unless_closed(entry, deadline).await?;
    let wrote = written.changed();
    if !wrote {
        tracing::info!(name = %condition.name(), "spec already says Upgradeable=False; keeping its reason and message");
    }
    let confirmed = condition.wait_for_olm(written, deadline).await?;
    Ok(Outcome::Held { confirmed, wrote })
}

/// `release`: sets `Upgradeable=True` (never removes the entry); with
/// `wait`, also waits until OLM's status shows it.
pub async fn release(
    client: &kube::Client,
    target: &Target,
    entry: &UpgradeableEntry,
    wait: bool,
    deadline: Instant,
) -> Result<Outcome, GateError> {
    let condition = match locate(client, target, deadline).await? {
        Ok(condition) => condition,
        Err(outside) => return Ok(Outcome::OutsideOlm(outside)),
    };
    let written = condition.set(entry, deadline).await?;
    let wrote = written.changed();
    let confirmed = if wait {
        Some(condition.wait_for_olm(written, deadline).await?)
    } else {
        None
    };
    Ok(Outcome::Released { wrote, confirmed })
}

/// `status`: reads the object once and reports what OLM will decide.
pub async fn status(
    client: &kube::Client,
    target: &Target,
    deadline: Instant,
) -> Result<Outcome, GateError> {
    let name_hint = match &target.name {
        NameSource::Given(name) => name.clone(),
        NameSource::OwnerOfDeployment(deployment) => format!("(owner of Deployment {deployment})"),
    };
    let condition = match locate(client, target, deadline).await? {
        Ok(condition) => condition,
        Err(OutsideOlm::ApiNotServed) => {
            let report = StatusReport::new(&target.namespace, &name_hint, false, None);
            return Ok(Outcome::Reported(Box::new(report)));
        }
        Err(outside) => return Ok(Outcome::OutsideOlm(outside)),
    };
    let object = condition.get(deadline).await?;
    let report = StatusReport::new(
        condition.namespace(),
        condition.name(),
        true,
        object.as_ref(),
    );
    Ok(Outcome::Reported(Box::new(report)))
}

#[cfg(test)]
mod mock_api;
#[cfg(test)]
mod mock_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator_condition::GateState;

    #[test]
    fn default_and_custom_entries() {
        let entry = hold_entry(None, None).expect("defaults are valid");
        assert_eq!(entry.state(), GateState::Closed);
        assert_eq!(entry.reason().as_str(), "UpgradeInProgress");
        assert_eq!(entry.message(), DEFAULT_HOLD_MESSAGE);
        let entry = release_entry(None, None).expect("defaults are valid");
        assert_eq!(entry.state(), GateState::Open);
        assert_eq!(entry.reason().as_str(), "UpgradeComplete");
        assert_eq!(entry.message(), DEFAULT_RELEASE_MESSAGE);
        let custom = hold_entry(Some("Migrating"), Some("m")).expect("valid");
        assert_eq!(
            (custom.reason().as_str(), custom.message()),
            ("Migrating", "m")
        );
        assert!(matches!(
            hold_entry(Some("not valid"), None),
            Err(GateError::InvalidInput(_))
        ));
    }
}
