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
//! Operators in any language use the `upgrade-gate` binary (its image holds
//! nothing else); operators written in Rust can also use this library:
//!
//! ```no_run
//! use std::time::Duration;
//! use upgrade_gate::operator_condition::{OperatorConditionClient, Reason, UpgradeableEntry};
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! // OLM injects the name into the operator's (main) containers.
//! let name = std::env::var("OPERATOR_CONDITION_NAME")?;
//! let client = kube::Client::try_default().await?;
//! let condition = OperatorConditionClient::new(client, "operators", &name);
//! let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
//!
//! // The data upgrade is done: let OLM move on (opening means True, never removal).
//! let entry = UpgradeableEntry::open(Reason::new("UpgradeComplete")?, "schema is at 1.2.0")?;
//! let confirmed = condition
//!     .wait_for_olm(condition.set(&entry, deadline).await?, deadline)
//!     .await?;
//! println!("OLM shows Upgradeable=True at generation {}", confirmed.generation());
//! # Ok(())
//! # }
//! ```
//!
//! The library an adopter uses, one module per concern (each says in its
//! own comment what it owns and what it must not touch):
//!
//! | module | concern |
//! | --- | --- |
//! | [`operator_condition`] | OLM's v2 `OperatorCondition`: the `Upgradeable` entry, OLM's verdict, writes that wait for OLM |
//! | [`locate`] | which OLM runs, which OperatorCondition guards an operator (fail closed) and who owns its pod: [`locate::Target`], [`locate::find`] |
//! | [`keeper`] | keeps an operator's verdict in its OperatorCondition while it runs: restores it after a deletion or a foreign write, never writes a stale one, writes only while leading |
//! | [`admission`] | the state the admission policy reads (`manifests/admission/`): which release completed its upgrade, recorded while the operator leads, for every deployer (Helm, `kubectl apply`, OLM) |
//! | [`leader`] | leader election over a Lease with client-go's rules: one writer of the gate at a time, released on stop |
//! | [`completion`] | the gate kept for an operator that writes none, from what its custom resources show (a CEL rule per object): what `upgrade-gate keep` runs |
//! | [`server_clock`] | the API server's clock as this process reads it (the `Date` of its answers): the times an operator writes and compares with others' stay right when its own clock is off |
//! | [`task`] | the handle of a background task (the keeper's, the recorder's): its standing, and a stop that waits for it |
//! | [`telemetry`] | logging set-up and one-line error rendering |
//! | [`duration`] | the one duration syntax of every binary's flags (`30s`, `2m`, `90`) |
//! | [`shutdown`] | the SIGTERM / SIGINT stop request a process honours (PID 1 in a container) |
//! | `testing` (feature `testing`) | a fake API server with OLM's copy rules, for tests without a cluster |
//!
//! The `upgrade-gate` binary's own layer is public so that the binary (a
//! thin `main`) and this workspace's tests reach it, but it is hidden from
//! these docs and carries no stability promise: `cli` (argument parsing,
//! one function per subcommand), `gate` (`hold`, `release`, `status`: the
//! init container's steps and exit codes, on top of [`locate`]), `plugin`
//! (`kubectl upgrade-gate status`), `bundle_lint` and `catalog_lint` (the
//! linters, their findings' shape in `lint_finding`). Use the commands
//! through the binary (docs/gate.md).
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

/// docs/adopt-reference.md's Rust code, compiled as a doc test so that
/// the guide cannot drift from the library.
#[cfg(doctest)]
#[doc = include_str!("../docs/adopt-reference.md")]
pub struct AdoptGuide;

/// README.crate.md's example (the crate's page on crates.io), compiled as
/// a doc test for the same reason.
#[cfg(doctest)]
#[doc = include_str!("../README.crate.md")]
pub struct CrateReadme;

pub mod admission;
#[doc(hidden)]
pub mod bundle_lint;
#[doc(hidden)]
pub mod catalog_lint;
#[doc(hidden)]
pub mod cli;
pub mod completion;
pub mod duration;
#[doc(hidden)]
pub mod gate;
pub mod keeper;
pub mod leader;
#[doc(hidden)]
pub mod lint_finding;
pub mod locate;
pub mod operator_condition;
#[doc(hidden)]
pub mod plugin;
pub mod server_clock;
pub mod shutdown;
pub mod task;
pub mod telemetry;
#[cfg(any(test, feature = "testing"))]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
