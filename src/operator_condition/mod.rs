//! The OperatorCondition library: OLM's `operators.coreos.com/v2`
//! `OperatorCondition`, and the operations an operator needs to tell OLM
//! whether it may be upgraded — with OLM's own semantics.
//!
//! Owns: the resource type ([`OperatorCondition`]), the `Upgradeable` entry
//! of `spec.conditions` ([`UpgradeableEntry`], [`upsert_upgradeable`]),
//! OLM's reading of the object ([`OlmVerdict`], [`CopyState`]) and the
//! client ([`OperatorConditionClient`]). Must not touch: other condition
//! types, `spec.overrides`, `status`, or any other object; there is no
//! delete, because removing `Upgradeable` after OLM copied it can block
//! upgrades forever — opening the gate means `True`.
//!
//! The pieces, in the order an operator uses them:
//! 1. [`UpgradeableEntry::closed`] / [`UpgradeableEntry::open`] with a
//!    checked [`Reason`];
//! 2. [`OperatorConditionClient::set`] (or
//!    [`OperatorConditionClient::close_unless_closed`]) writes it with a full
//!    update, retried until a deadline, and returns [`Written`];
//! 3. [`OperatorConditionClient::wait_for_olm`] turns `Written` into
//!    [`Confirmed`] once OLM's status shows it at the current generation —
//!    the only way to obtain a `Confirmed`.
//!
//! ```no_run
//! use std::time::Duration;
//! use upgrade_gate::operator_condition::{
//!     OperatorConditionClient, OlmVerdict, Reason, UpgradeableEntry,
//! };
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let client = kube::Client::try_default().await?;
//! let condition = OperatorConditionClient::new(client, "apps", "app-operator.v7.10.1");
//! let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
//!
//! let entry = UpgradeableEntry::closed(
//!     Reason::new("DatabaseUpgradeFailed")?,
//!     "Job shop-db-upgrade-7-10-1 failed; see its logs, fix, then delete the Job to retry",
//! )?;
//! let confirmed = condition
//!     .wait_for_olm(condition.set(&entry, deadline).await?, deadline)
//!     .await?;
//! println!("closed at generation {}", confirmed.generation());
//!
//! let object = condition.get(deadline).await?;
//! let verdict = OlmVerdict::of(object.as_ref());
//! println!("upgradeable: {} ({})", verdict.upgradeable(), verdict.explanation());
//! # Ok(())
//! # }
//! ```

mod client;
mod olm;
mod resource;
mod upsert;

pub(crate) use client::with_retries;
pub use client::{
    Confirmed, Error, Obstacle, OperatorConditionClient, Written, operator_conditions_served,
};
pub use olm::{CopyState, OlmVerdict};
pub use resource::{
    ConditionView, GROUP, KIND, OperatorCondition, OperatorConditionSpec, OperatorConditionStatus,
    PLURAL, UPGRADEABLE, VERSION,
};
pub use upsert::{
    GateState, InvalidEntry, MAX_MESSAGE_BYTES, Reason, UpgradeableEntry, transition_time,
    upsert_upgradeable,
};
