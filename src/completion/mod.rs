//! The gate kept from what an operator already shows: `upgrade-gate keep`,
//! a sidecar beside an operator that writes no OperatorCondition and no
//! admission record itself (a Go operator, a Helm- or Ansible-based one).
//!
//! The operator says, on each of its custom resources, that it finished
//! the running release's upgrade (a field it sets to its release, a
//! condition, anything a CEL expression can read). This module watches
//! every object of the given resources, judges each with a [`Rule`] and
//! keeps the verdict — closed until every object shows this release's
//! upgrade done, open then — with the library's [`crate::keeper`] (the
//! OperatorCondition under OLM v0) and [`crate::admission::Recorder`] (the
//! admission record, for every deployer), writing only while it holds a
//! Lease ([`crate::leader`]).
//!
//! Owns: naming the resources ([`ResourceName`]), the rule ([`rule`]), the
//! verdict from what every watch shows ([`decide()`]) and running the whole
//! ([`run()`](mod@run)). Must not touch: how the verdict is written and restored (the
//! keeper's and the recorder's), or the operator's objects (read only).
//!
//! A rule must read the running release: right after an upgrade every
//! object still shows the previous release's upgrade done, and a rule
//! blind to the release would open the gate before this release's upgrade
//! ran ([`RuleError::ReleaseBlind`]).

pub mod decide;
pub mod resource;
pub mod rule;
pub mod run;

pub use decide::{Watched, decide};
pub use resource::{InvalidResourceName, ResourceName};
pub use rule::{Rule, RuleError, Shown};
pub use run::{KeepError, KeepSettings, RecordSettings, keep};
