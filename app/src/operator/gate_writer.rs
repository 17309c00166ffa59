//! Writes the operator-wide gate decision (`gate::decide_gate`) into this
//! operator's OperatorCondition with the `operator_condition` library.
//!
//! Owns: finding the OperatorCondition (OLM injects
//! `OPERATOR_CONDITION_NAME` into the operator's container; the namespace is
//! the pod's) and telling "no OLM" apart, said once in the log. Must not
//! touch: the decision, or any condition but `Upgradeable` (the library
//! keeps foreign entries and cannot delete).

use std::time::Duration;

use tokio::time::Instant;

use crate::operator::gate::GateDecision;
use upgrade_gate::operator_condition::{
    OperatorConditionClient, Reason, UpgradeableEntry, operator_conditions_served,
};

/// How long one gate write may retry before the next decision tries again.
const WRITE_DEADLINE: Duration = Duration::from_secs(30);

/// The gate could not be written.
#[derive(Debug, thiserror::Error)]
pub enum GateWriteError {
    /// The reason or message is not a valid condition entry.
    #[error("invalid Upgradeable entry")]
    Entry(#[from] upgrade_gate::operator_condition::InvalidEntry),
    /// The API server refused or the deadline passed.
    #[error("cannot write the OperatorCondition")]
    Write(#[from] upgrade_gate::operator_condition::Error),
}

/// Where gate decisions go.
pub enum GateSink {
    /// Installed by OLM: this operator's OperatorCondition.
    Olm(Box<OperatorConditionClient>),
    /// Not installed by OLM: decisions are only logged and exported.
    NoOlm {
        /// Why, for the one log line.
        why: String,
    },
}

impl GateSink {
    /// Finds the sink: the OperatorCondition named by
    /// `OPERATOR_CONDITION_NAME` in `namespace`, if OLM's v2 API is served.
    pub async fn find(
        client: &kube::Client,
        condition_name: Option<&str>,
        namespace: &str,
    ) -> Result<GateSink, GateWriteError> {
        let Some(name) = condition_name.filter(|n| !n.is_empty()) else {
            return Ok(GateSink::NoOlm {
                why: "OPERATOR_CONDITION_NAME is not set (not installed by OLM)".to_owned(),
            });
        };
        if !operator_conditions_served(client, Instant::now() + WRITE_DEADLINE).await? {
            return Ok(GateSink::NoOlm {
                why: "the cluster does not serve operators.coreos.com/v2 OperatorConditions"
                    .to_owned(),
            });
        }
        Ok(GateSink::Olm(Box::new(OperatorConditionClient::new(
            client.clone(),
            namespace,
            name,
        ))))
    }

    /// Writes the decision; `Ok(true)` when the object changed. Without OLM
    /// nothing is written.
    pub async fn apply(&self, decision: &GateDecision) -> Result<bool, GateWriteError> {
        let GateSink::Olm(condition) = self else {
            return Ok(false);
        };
        let reason = Reason::new(decision.reason)?;
        let entry = if decision.upgradeable {
            UpgradeableEntry::open(reason, decision.message.clone())?
        } else {
            UpgradeableEntry::closed(reason, decision.message.clone())?
        };
        let written = condition
            .set(&entry, Instant::now() + WRITE_DEADLINE)
            .await?;
        Ok(written.changed())
    }
}
