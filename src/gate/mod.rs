//! The gate: `upgrade-gate hold` (the operator pod's init container),
//! `release` and `status`, as library code under the command line (`src/cli/`).
//!
//! Owns: the order of steps for each command — locate the OperatorCondition
//! ([`crate::locate::find`]: which OLM, the pod's owner chain, the set-up
//! rules), write, wait for OLM — and how each ends ([`Outcome`],
//! [`GateError`], [`exit_code`]). Must not touch: how the OperatorCondition
//! is found (that is [`crate::locate`]'s) or written and read (that is
//! [`crate::operator_condition`]'s), or any object but the OperatorCondition.
//!
//! `hold` closes the race of the feature request: OLM may create the next CSV
//! seconds after this one succeeds, so the gate must be closed — and OLM
//! must have *copied* it into status — before the main container starts.
//!
//! ```no_run
//! use std::time::Duration;
//! use upgrade_gate::gate::{self, EntryText, HoldOptions, OnOverride, Outcome};
//! use upgrade_gate::locate::{self, TargetInput};
//!
//! # async fn example() -> Result<(), upgrade_gate::gate::GateError> {
//! let client = gate::connect().await?;
//! let target = locate::resolve_target(&TargetInput {
//!     name: Some("my-operator.v1.2.0"),
//!     namespace: Some("operators"),
//!     ..TargetInput::default()
//! })?;
//! let options = HoldOptions {
//!     entry: gate::hold_entry(EntryText::default())?,
//!     on_override: OnOverride::Fail,
//!     deadline: tokio::time::Instant::now() + Duration::from_secs(120),
//! };
//! match gate::hold(&client, &target, &options).await? {
//!     Outcome::Held { name, confirmed, .. } => {
//!         println!("{name}: OLM shows Upgradeable=False at generation {}", confirmed.generation())
//!     }
//!     Outcome::OutsideOlm(why) => println!("nothing to gate: {why}"),
//!     other => println!("{other:?}"),
//! }
//! # Ok(())
//! # }
//! ```

mod outcome;
mod report;

pub use outcome::{
    EXIT_CODES, GateError, HELP_TABLE_WIDTH, Outcome, exit_code, exit_code_table, exit_codes_help,
    exit_table,
};
pub use report::{EntryReport, StatusReport};

use tokio::time::Instant;

use crate::locate::{self, Located, OutsideOlm, Target};
use crate::operator_condition::{OlmVerdict, OperatorConditionClient, Reason, UpgradeableEntry};

/// The reason `hold` writes unless told otherwise.
pub const DEFAULT_HOLD_REASON: &str = "UpgradeInProgress";
/// The reason `release` writes unless told otherwise.
pub const DEFAULT_RELEASE_REASON: &str = "UpgradeComplete";

/// The message `hold` writes unless told otherwise.
pub const DEFAULT_HOLD_MESSAGE: &str = "upgrade-gate hold: this operator version is starting; its operator opens the gate when its upgrade is complete";

/// The message `release` writes unless told otherwise.
pub const DEFAULT_RELEASE_MESSAGE: &str =
    "upgrade-gate release: the operator reports its upgrade complete; OLM may upgrade it";

/// The reason and message a command was given (`--reason`, `--message`);
/// each absent one is the command's default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EntryText<'a> {
    /// The condition reason (CamelCase).
    pub reason: Option<&'a str>,
    /// The message a person reads.
    pub message: Option<&'a str>,
}

/// The `Upgradeable=False` entry for `hold` from `text` or the defaults.
pub fn hold_entry(text: EntryText<'_>) -> Result<UpgradeableEntry, GateError> {
    let reason = checked_reason(text.reason.unwrap_or(DEFAULT_HOLD_REASON))?;
    UpgradeableEntry::closed(reason, text.message.unwrap_or(DEFAULT_HOLD_MESSAGE))
        .map_err(|e| GateError::InvalidInput(e.to_string()))
}

/// The `Upgradeable=True` entry for `release` from `text` or the defaults.
pub fn release_entry(text: EntryText<'_>) -> Result<UpgradeableEntry, GateError> {
    let reason = checked_reason(text.reason.unwrap_or(DEFAULT_RELEASE_REASON))?;
    UpgradeableEntry::open(reason, text.message.unwrap_or(DEFAULT_RELEASE_MESSAGE))
        .map_err(|e| GateError::InvalidInput(e.to_string()))
}

/// What `hold` does when an admin's `spec.overrides` entry
/// `Upgradeable=True` makes OLM ignore the closed gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnOverride {
    /// End in [`GateError::Overridden`] (exit 12): the gate does not hold.
    Fail,
    /// Warn and succeed (`--allow-override`).
    Warn,
}

/// How `hold` runs.
#[derive(Clone, Debug)]
pub struct HoldOptions {
    /// The `Upgradeable=False` entry to write ([`hold_entry`]).
    pub entry: UpgradeableEntry,
    /// What an admin's override does.
    pub on_override: OnOverride,
    /// When to give up (well before OLM's 5-minute install timeout).
    pub deadline: Instant,
}

/// How far `release` waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitFor {
    /// Until spec says `Upgradeable=True`.
    Spec,
    /// Until OLM's status shows it at the current generation (`--wait`).
    Olm,
}

/// How `release` runs.
#[derive(Clone, Debug)]
pub struct ReleaseOptions {
    /// The `Upgradeable=True` entry to write ([`release_entry`]).
    pub entry: UpgradeableEntry,
    /// How far to wait.
    pub wait_for: WaitFor,
    /// When to give up.
    pub deadline: Instant,
}

fn checked_reason(reason: &str) -> Result<Reason, GateError> {
    Reason::new(reason).map_err(|e| GateError::InvalidInput(e.to_string()))
}

/// A client from the in-cluster service account or the kubeconfig.
pub async fn connect() -> Result<kube::Client, GateError> {
    client(client_config().await?)
}

/// The cluster configuration, inferred as [`kube::Client::try_default`]
/// does: the kubeconfig (`KUBECONFIG`, `~/.kube/config`), else the pod's
/// service account. Its `default_namespace` is the kubeconfig context's
/// (`default` when it names none), or in a pod the pod's.
pub async fn client_config() -> Result<kube::Config, GateError> {
    kube::Config::infer()
        .await
        .map_err(|e| GateError::NoClusterConfig(e.to_string()))
}

/// A client of `config` ([`client_config`]).
pub fn client(config: kube::Config) -> Result<kube::Client, GateError> {
    kube::Client::try_from(config).map_err(|e| GateError::NoClusterConfig(e.to_string()))
}

async fn condition_client(
    client: &kube::Client,
    target: &Target,
    deadline: Instant,
) -> Result<Result<OperatorConditionClient, OutsideOlm>, GateError> {
    Ok(match locate::find(client, target, deadline).await?.1 {
        Located::Gate { name, .. } => Ok(OperatorConditionClient::new(
            client.clone(),
            &target.namespace,
            &name,
        )),
        Located::Outside(outside) => Err(outside),
    })
}

/// `hold`: closes the gate (unless spec already says False, whose reason
/// and message then stay) and waits until OLM's status shows False at the
/// current generation. Succeeds only when OLM confirmed it, or when no
/// OperatorCondition guards this operator. An admin's override
/// `Upgradeable=True` makes OLM ignore the gate: that ends in
/// [`GateError::Overridden`] unless [`OnOverride::Warn`].
pub async fn hold(
    client: &kube::Client,
    target: &Target,
    options: &HoldOptions,
) -> Result<Outcome, GateError> {
    let HoldOptions {
        entry,
        on_override,
        deadline,
    } = options;
    let deadline = *deadline;
    let condition = match condition_client(client, target, deadline).await? {
        Ok(condition) => condition,
        Err(outside) => return Ok(Outcome::OutsideOlm(outside)),
    };
    let written = condition.close_unless_closed(entry, deadline).await?;
    let wrote = written.changed();
    if !wrote {
        tracing::info!(name = %condition.name(), "spec already says Upgradeable=False; keeping its reason and message");
    }
    let confirmed = condition.wait_for_olm(written, deadline).await?;
    if let OlmVerdict::OverriddenTrue { message } = confirmed.verdict() {
        if *on_override == OnOverride::Fail {
            return Err(GateError::Overridden {
                name: condition.name().to_owned(),
                message: message.clone(),
            });
        }
        tracing::warn!(name = %condition.name(), override_message = %message, "spec.overrides sets Upgradeable=True: OLM ignores the gate; starting anyway (--allow-override)");
    }
    Ok(Outcome::Held {
        name: condition.name().to_owned(),
        confirmed,
        wrote,
    })
}

/// `release`: sets `Upgradeable=True` (never removes the entry); with
/// [`WaitFor::Olm`], also waits until OLM's status shows it.
pub async fn release(
    client: &kube::Client,
    target: &Target,
    options: &ReleaseOptions,
) -> Result<Outcome, GateError> {
    let ReleaseOptions {
        entry,
        wait_for,
        deadline,
    } = options;
    let deadline = *deadline;
    let condition = match condition_client(client, target, deadline).await? {
        Ok(condition) => condition,
        Err(outside) => return Ok(Outcome::OutsideOlm(outside)),
    };
    let written = condition.set(entry, deadline).await?;
    let wrote = written.changed();
    let confirmed = if *wait_for == WaitFor::Olm {
        Some(condition.wait_for_olm(written, deadline).await?)
    } else {
        None
    };
    Ok(Outcome::Released {
        name: condition.name().to_owned(),
        wrote,
        confirmed,
    })
}

/// `status`: reads the object once and reports what OLM will decide.
pub async fn status(
    client: &kube::Client,
    target: &Target,
    deadline: Instant,
) -> Result<Outcome, GateError> {
    let (olm, located) = locate::find(client, target, deadline).await?;
    let name = match located {
        Located::Gate { name, .. } => name,
        Located::Outside(
            outside @ (OutsideOlm::NotManagedByOlm { .. }
            | OutsideOlm::NotADeployment { .. }
            | OutsideOlm::ManagedByOlmV1 { .. }),
        ) => {
            return Ok(Outcome::OutsideOlm(outside));
        }
        Located::Outside(_) => {
            let name = target.name.clone().unwrap_or_default();
            let report = StatusReport::new(&target.namespace, &name, olm, None);
            return Ok(Outcome::Reported(Box::new(report)));
        }
    };
    let condition = OperatorConditionClient::new(client.clone(), &target.namespace, &name);
    let object = condition.get(deadline).await?;
    let report = StatusReport::new(&target.namespace, &name, olm, object.as_ref());
    Ok(Outcome::Reported(Box::new(report)))
}

#[cfg(test)]
mod mock_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator_condition::GateState;

    #[test]
    fn default_and_custom_entries() {
        let entry = hold_entry(EntryText::default()).expect("defaults are valid");
        assert_eq!(entry.state(), GateState::Closed);
        assert_eq!(entry.reason().as_str(), "UpgradeInProgress");
        assert_eq!(entry.message(), DEFAULT_HOLD_MESSAGE);
        let entry = release_entry(EntryText::default()).expect("defaults are valid");
        assert_eq!(entry.state(), GateState::Open);
        assert_eq!(entry.reason().as_str(), "UpgradeComplete");
        assert_eq!(entry.message(), DEFAULT_RELEASE_MESSAGE);
        let custom = hold_entry(EntryText {
            reason: Some("Migrating"),
            message: Some("m"),
        })
        .expect("valid");
        assert_eq!(
            (custom.reason().as_str(), custom.message()),
            ("Migrating", "m")
        );
        assert!(matches!(
            hold_entry(EntryText {
                reason: Some("not valid"),
                message: None
            }),
            Err(GateError::InvalidInput(_))
        ));
    }
}
