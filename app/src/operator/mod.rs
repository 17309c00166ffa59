//! The `app-operator`: reconciles `App` resources and opens the OLM upgrade
//! gate once every App's database is verified at this release's schema.
//!
//! This file is the front: it names the rooms and hands on what the binary
//! and the tests use. Each room says in its own comment what it owns.
//!
//! | module | owns |
//! | --- | --- |
//! | [`config`] | `app-operator run`'s flags and the [`OperatorConfig`] they become |
//! | [`context`] | the [`Context`] every reconcile and the gate loop share |
//! | [`reconcile`] | one App's pass, observe → decide → act, and the retry after a failure |
//! | [`observe`] | the reads (the only database access: a read-only query) |
//! | [`decide`] | the pure table: the next step for one App |
//! | [`act`] | the writes |
//! | [`queue`] | how many upgrades run at once and who is next (asked between decide and act) |
//! | [`gate`] | the operator-wide `Upgradeable` answer (pure) and the loop that hands it to the keeper |
//! | [`fleet`] | the fleet in numbers, as the gate's message and the metrics show it |
//! | [`readiness`] | when `/readyz` says ready |
//! | [`http`] | `/healthz`, `/readyz`, `/metrics` |
//! | [`run`] | the order of a run: serve, win the Lease, lead, step down |
//! | [`leading`] | the leader's work: the controllers, the recorder, the keeper, the gate loop |
//! | [`stop`] | the stop request as the tasks wait for it |
//! | [`metrics`], [`resources`], [`job_state`], [`db_sessions`] | what the steps share: metrics, the objects the operator makes, a Job's state, the database's sessions |
//!
//! Must not touch: the database (only `observe`'s read-only query) or OLM's
//! objects (`upgrade_gate::keeper` writes this operator's own
//! OperatorCondition).

pub mod act;
pub mod config;
pub mod context;
pub mod db_sessions;
pub mod decide;
pub mod fleet;
pub mod gate;
pub mod http;
pub mod job_state;
pub mod leading;
pub mod metrics;
pub mod observe;
pub mod queue;
pub mod readiness;
pub mod reconcile;
pub mod resources;
pub mod run;
pub mod stop;

pub use config::{LEASE_NAME, OperatorConfig, RunArgs};
pub use context::{Context, StartError, schema_target};
pub use gate::gate_loop::{GateVerdict, judgement_basis, observe_apps};
pub use leading::MAX_CONCURRENT_RECONCILES;
pub use readiness::{Readiness, ReadyWhen, WorkDone, readiness, work_ready};
pub use reconcile::{ReconcileError, error_policy, reconcile};
pub use run::{RunError, run};
pub use stop::stopped;
