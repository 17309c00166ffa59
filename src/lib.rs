//! upgrade-gate: keeps OLM from upgrading a stateful operator while its
//! data upgrade runs.
//!
//! OLM walks an upgrade chain as fast as it can: the moment one operator
//! version succeeds it may be replaced by the next, often before its
//! reconcile loop ever ran. `upgrade-gate hold`, run as the operator
//! Deployment's init container, sets the CSV's OperatorCondition
//! `Upgradeable=False` and waits until OLM has copied it into status, so the
//! gate is closed before the operator's main container starts. The operator
//! (or `upgrade-gate release`, or any client of this library) opens it with
//! `Upgradeable=True` when its upgrade is complete.
//!
//! The modules, one per concern (each says in its own comment what it owns
//! and what it must not touch):
//!
//! | module | concern |
//! | --- | --- |
//! | [`operator_condition`] | OLM's v2 `OperatorCondition`: the `Upgradeable` entry, OLM's verdict, writes that wait for OLM |
//! | [`gate`] | `upgrade-gate hold` / `release` / `status`: the init container's steps and exit codes |
//! | [`telemetry`] | logging set-up and one-line error rendering |
//! | [`shutdown`] | the SIGTERM / SIGINT stop request a process honours (PID 1 in a container) |
pub mod gate;
pub mod operator_condition;
pub mod shutdown;
pub mod telemetry;
