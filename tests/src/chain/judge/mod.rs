//! Judging one chain run from its timeline and its end checks: did another
//! upgrade start before one completed (raced), and did anything come to
//! harm (damaged)? Pure functions; every conclusion comes with the observed
//! facts it rests on and their times from the channel switch.
//!
//! Owns: the definitions of raced, held, inconclusive and damaged, the load
//! check (did the middle release's Job outlast OLM's step to the next one
//! by [`LOAD_MARGIN`]?), how long the next release waited `Pending` and how
//! soon OLM acted once the gate opened. Must not touch: the cluster or the
//! database.
//!
//! - **The verdict** ([`RunFinding`]): `raced`, `held`, `stuck`, `jumped`
//!   or `inconclusive`, each named the same in the JSON and the picture.
//!   A run is inconclusive when its evidence has a hole that could hide a
//!   race or damage: a fact watch's gap (a failed or relisted watch, a failed
//!   history read; a watch that failed during the set-up and listed again
//!   before time zero is whole again and no hole, and so is a watch's gap
//!   inside a span the caller answered for: [`AnsweredGap`]), a Job pod's
//!   outcome that cannot be read, a release whose CSV succeeded without
//!   its operator pod ever observed, no write acknowledged in a schema
//!   layout the run went through, a write that failed with an error of an
//!   unexpected kind (neither refused, an SQL error nor a lost connection:
//!   the writer's counts by cause are not whole), or — for a run not raced
//!   — a load check not passed (a run whose Job was too short to meet OLM's
//!   step cannot show that the gate held it) or not measurable, which it
//!   is when a deployer's first apply of the next release failed for
//!   another cause than the admission policy. A deployer's apply counts as
//!   the policy's refusal only when its message carries the policy's words
//!   (`chain::refusal`); the others are counted apart, by cause.
//! - **Stuck**: not raced, but the next release never moved on (under OLM
//!   v0 its CSV never past `Pending`; under a deployer no apply of it
//!   accepted): whatever held it never let go, or nothing offered it.
//!   Never "held".
//! - **Jumped**: a chain without a middle release (a skipRange): nothing
//!   could be cut short, so nothing was held either; what it shows is that
//!   no release between the first and the last was installed and the last
//!   one moved on. A release installed between makes it inconclusive.
//! - **Raced**: the middle release's upgrade completes when its Job has
//!   succeeded *and* its operator verified the schema (the App Ready with
//!   its database at the middle release's schema — a gate opened by anyone
//!   else proves nothing). The run raced when, before that, the middle
//!   release's operator stopped for good (its last pod stopping — a pod
//!   replaced by another pod of the same release is a restart, not an
//!   upgrade) or an operator pod of a later release was created.
//! - **An InstallPlan OLM failed** ([`Fact::InstallPlanFailed`]) is shown
//!   in the evidence and counts as nothing else: one the runner ran again
//!   because only OLM's update of the shared App CRD lost a race
//!   (`crate::install_plan`) is OLM's own retry, restarted — no fault, no
//!   hold, no hole; one left failed shows itself in the end checks (the
//!   chain does not end).
//! - **Damaged**: an acknowledged write lost or changed; the data present
//!   before the run changed; a migration missing at the end (cut off),
//!   applied twice, or committed out of order; or the chain not ending with
//!   the last release's CSV `Succeeded`, the App Ready at it and its gate
//!   `Upgradeable=True` as OLM copied it at the current generation.
//!
//! | file | what |
//! | --- | --- |
//! | `mod.rs` | the run's chain, the end checks, the verdict's types; [`judge`], which puts the parts together |
//! | `race.rs` | raced: when the middle release's upgrade completed, and what cut it first |
//! | `load.rs` | the load check |
//! | `applies.rs` | a deployer's applies: accepted, refused by the policy, failed otherwise (by cause) |
//! | `timing.rs` | how long the next release waited, how soon OLM or the deployer moved |
//! | `holes.rs` | the holes that make a run inconclusive |
//! | `health.rs` | Flux's health check of the record, under Flux: its three rules |
//! | `end.rs` | the end state; whether the chain ended or stopped for good |
//! | `damage.rs` | migrations, the data present before, the writer's writes |
//! | `tests.rs` | the table tests |

use jiff::Timestamp;
use serde::Serialize;

use super::digest::{DataDigest, ExecutionsLayout};
use super::timeline::{Event, Fact, PodKind};
use super::writer::WriterCheck;

mod applies;
mod damage;
mod end;
mod health;
mod holes;
mod load;
mod race;
#[cfg(test)]
mod tests;
mod timing;

pub use end::{chain_ended, chain_stopped};
pub use health::{rules as health_check_rules, settled as health_check_settled};
pub use race::race_of;
pub use timing::{AfterRestore, after_restore};

use damage::{data, migrations, writes};
use end::end_state;
use holes::holes;
use load::load;
use timing::{deployer_reaction, olm_reaction, pending, refused_for};

/// How much longer than OLM's step to the next release the middle
/// release's Job must run for a run to show the race.
pub const LOAD_MARGIN: f64 = 10.0;
/// The reason the operator gives when it opens the gate after verifying.
pub const VERIFIED_REASON: &str = "UpgradeComplete";

/// The chain a run plays.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Chain {
    /// Installed before the switch (7.9.3).
    pub from: String,
    /// The release whose upgrade must not be cut short (7.10.0); `None`
    /// when OLM is expected to jump over it (a skipRange).
    pub middle: Option<String>,
    /// The release that replaces the middle one (7.10.1).
    pub next: String,
    /// Where the chain ends (7.10.1, or 7.10.2 when one is published).
    pub last: String,
    /// The release whose schema the middle release's target is (an App's
    /// `status.database.release` once verified by the middle release).
    pub middle_schema: Option<String>,
    /// The same for the last release (7.10.2 carries no migration of its
    /// own: its schema is 7.10.1's).
    pub last_schema: String,
    /// The migrations the end schema must hold, in order: (version, name).
    pub migrations: Vec<(i64, String)>,
    /// Who rolls the operator from release to release.
    pub deployer: Deployer,
}

/// Who rolls the operator from one release to the next.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Deployer {
    /// OLM v0, from a catalog through a Subscription: the end is the last
    /// release's CSV `Succeeded` and its gate open in OLM's copy.
    #[default]
    Olm,
    /// Helm (`helm upgrade`, pushed by the runner as a deployer would; the
    /// admission policy is the brake): the end is the last release applied
    /// ([`Fact::Deployed`] accepted) and an operator pod of it started.
    Helm,
    /// OLM v1 (operator-controller's Helm runtime) through a
    /// ClusterExtension switched to the next channel: each revision of its
    /// Helm release is a [`Fact::Deployed`]; judged as under Helm.
    #[serde(rename = "olm-v1")]
    #[value(name = "olm-v1")]
    OlmV1,
    /// `kubectl apply --server-side` of each release's manifests (its
    /// chart as `helm template` renders it, the way a GitOps pipeline
    /// applies a chart), retried as a pipeline does; the admission policy
    /// is the brake. Judged as under Helm.
    Kubectl,
    /// Flux's kustomize-controller applying a Kustomization whose source
    /// (an `ExternalArtifact` the runner serves) moves from release to
    /// release; each of its tries of a release is a [`Fact::Deployed`],
    /// read from the Kustomization's status; the admission policy is the
    /// brake. Judged as under Helm.
    Flux,
}

impl Deployer {
    /// Who applied a release, in the evidence.
    pub fn who(self) -> &'static str {
        match self {
            Deployer::Olm => "OLM",
            Deployer::Helm => "the deployer",
            Deployer::OlmV1 => "OLM v1",
            Deployer::Kubectl => "the pipeline",
            Deployer::Flux => "Flux",
        }
    }

    /// Whether the admission policy is this deployer's brake (everything
    /// but OLM v0, whose brake is the OperatorCondition).
    pub fn admitted(self) -> bool {
        self != Deployer::Olm
    }

    /// As the command line and the reports name it (`olm`, `helm`,
    /// `olm-v1`, `kubectl`, `flux`).
    pub fn name(self) -> String {
        clap::ValueEnum::to_possible_value(&self)
            .map(|value| value.get_name().to_owned())
            .unwrap_or_default()
    }
}

/// One row of the migration history at the end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HistoryRow {
    pub version: i64,
    pub name: String,
    pub applied_on: String,
}

/// What the runner checked after the chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndChecks {
    pub data_before: DataDigest,
    pub data_after: DataDigest,
    pub writer: WriterCheck,
    pub history: Vec<HistoryRow>,
    /// What the last release's `app-db-upgrade plan` says of the schema at
    /// the end: `Ok` at its target, `Err` what it would do or refuse.
    pub schema: Result<String, String>,
    /// The layouts of `executions` the run went through (at its start and
    /// at its end): the writer must have had a write acknowledged in each.
    pub layouts: Vec<ExecutionsLayout>,
    /// Spans of the run whose watch gaps the caller answered for.
    pub answered: Vec<AnsweredGap>,
}

/// A span of a run in which the fact watches lost their place (the
/// API server restarted under them) and for which the caller answers with
/// evidence of its own, read once every watch had listed again: a watch's
/// failure or relist inside the span is no hole, and the evidence joins
/// the run's. A relist after `until` still is one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnsweredGap {
    pub from: Timestamp,
    pub until: Timestamp,
    /// What the caller read, a line each.
    pub evidence: Vec<String>,
}

/// What a run shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunFinding {
    /// Another upgrade started before the middle release's completed.
    Raced,
    /// Not raced, the next release moved on, with evidence that could have
    /// shown a race: the load check passed and no hole in the record.
    Held,
    /// Not raced, but the next release never moved on.
    Stuck,
    /// A chain without a middle release: no release between installed,
    /// the last one moved on; nothing to cut short, nothing held.
    Jumped,
    /// The record has a hole that could hide a race or damage; the
    /// reasons say which ([`Judgement::inconclusive`]).
    Inconclusive,
}

impl RunFinding {
    /// Every verdict, in the order the reports count them.
    pub const ALL: [RunFinding; 5] = [
        RunFinding::Held,
        RunFinding::Raced,
        RunFinding::Stuck,
        RunFinding::Jumped,
        RunFinding::Inconclusive,
    ];

    /// The verdict's name in the JSON, the tables and the picture.
    pub fn name(self) -> &'static str {
        match self {
            RunFinding::Raced => "raced",
            RunFinding::Held => "held",
            RunFinding::Stuck => "stuck",
            RunFinding::Jumped => "jumped",
            RunFinding::Inconclusive => "inconclusive",
        }
    }
}

/// The judgement of one run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Judgement {
    pub verdict: RunFinding,
    pub raced: bool,
    pub damaged: bool,
    /// Why the run is inconclusive (empty unless it is).
    pub inconclusive: Vec<String>,
    /// The facts each conclusion rests on, with their times.
    pub evidence: Vec<String>,
    /// How long the next release's CSV stayed `Pending`.
    pub pending_seconds: Option<f64>,
    /// Middle Job's success minus the next CSV's creation.
    pub load_margin_seconds: Option<f64>,
    /// The checks of the run that failed besides the verdict, in the
    /// user's words (Flux's health check: `health.rs`): any makes the run
    /// miss its arm's expectation.
    pub failed_checks: Vec<String>,
    /// Whether the load check held (`None`: not measurable, said in evidence).
    pub load_ok: Option<bool>,
    /// How soon OLM let the next release through once its status copy of
    /// the middle release's gate said `Upgradeable=True` (gated runs);
    /// under a deployer, how soon its apply of the next release was
    /// accepted once the middle release's upgrade completed.
    pub olm_reaction_seconds: Option<f64>,
}

/// Judges a run.
pub fn judge(events: &[Event], chain: &Chain, checks: &EndChecks) -> Judgement {
    let zero = zero_of(events);
    let mut evidence = Vec::new();
    let (raced, found) = race_of(events, chain);
    evidence.extend(found);
    let pending_seconds = match chain.deployer {
        Deployer::Olm => pending(events, &chain.next, zero, &mut evidence),
        Deployer::Helm | Deployer::OlmV1 | Deployer::Kubectl | Deployer::Flux => {
            refused_for(events, chain.deployer, &chain.next, zero, &mut evidence)
        }
    };
    let load = chain
        .middle
        .as_ref()
        .map(|middle| load(events, chain, middle, zero));
    if let Some(load) = &load {
        evidence.push(load.line.clone());
    }
    let (load_margin_seconds, load_ok) = load
        .as_ref()
        .map_or((None, None), |load| (load.margin, load.ok));
    let olm_reaction_seconds = match (&chain.middle, chain.deployer) {
        (Some(middle), Deployer::Olm) if !raced => {
            olm_reaction(events, chain, middle, zero, &mut evidence)
        }
        (Some(middle), Deployer::Helm | Deployer::OlmV1 | Deployer::Kubectl | Deployer::Flux)
            if !raced =>
        {
            deployer_reaction(events, chain, middle, zero, &mut evidence)
        }
        _ => None,
    };
    let mut damaged = false;
    damaged |= !end_state(events, chain, zero, &mut evidence);
    damaged |= !migrations(events, chain, &checks.history, zero, &mut evidence);
    match &checks.schema {
        Ok(at) => evidence.push(format!("schema at the end: {at}")),
        Err(plan) => {
            damaged = true;
            evidence.push(format!(
                "DAMAGED: the schema is not at {}'s target: {plan}",
                chain.last
            ));
        }
    }
    damaged |= !data(checks, &mut evidence);
    damaged |= !writes(&checks.writer, zero, &mut evidence);
    for event in events {
        if matches!(event.fact, Fact::InstallPlanFailed { .. }) {
            evidence.push(format!(
                "{}: {}",
                super::timeline::offset(zero, event.at),
                event.fact
            ));
        }
    }
    for gap in &checks.answered {
        evidence.push(format!(
            "{} to {}: the fact watches lost their place; the run answers for the span: {}",
            super::timeline::offset(zero, gap.from),
            super::timeline::offset(zero, gap.until),
            gap.evidence.join("; ")
        ));
    }
    let failed_checks = health::flux_health(events, zero, &mut evidence);
    let mut inconclusive = holes(events, chain, checks, zero);
    let moved = moved_on(events, chain, zero);
    let verdict = if !inconclusive.is_empty() {
        RunFinding::Inconclusive
    } else if raced {
        RunFinding::Raced
    } else if let Some(why) = load.as_ref().and_then(|load| load.unsure.clone()) {
        inconclusive.push(why);
        RunFinding::Inconclusive
    } else if moved.is_none() {
        evidence.push(format!(
            "STUCK: {} never moved on ({}): not held",
            chain.next,
            match chain.deployer {
                Deployer::Olm => format!("CSV upgrade-gate.v{} never past Pending", chain.next),
                other => format!("no apply of it by {} accepted", other.who()),
            }
        ));
        RunFinding::Stuck
    } else if chain.middle.is_none() {
        let between = race::between(events, chain, zero);
        if between.is_empty() {
            RunFinding::Jumped
        } else {
            inconclusive.push(format!(
                "a chain expected to jump over its middle release installed {}: a race with it is not judged",
                between.join(", ")
            ));
            RunFinding::Inconclusive
        }
    } else if load_ok != Some(true) {
        inconclusive.push(format!(
            "not raced, but the load check did not pass ({}): the run could not have shown a race",
            load.as_ref()
                .map_or("no load line", |load| load.line.as_str())
        ));
        RunFinding::Inconclusive
    } else {
        RunFinding::Held
    };
    for reason in &inconclusive {
        evidence.push(format!("INCONCLUSIVE: {reason}"));
    }
    Judgement {
        verdict,
        raced,
        damaged,
        inconclusive,
        failed_checks,
        evidence,
        pending_seconds,
        load_margin_seconds,
        load_ok,
        olm_reaction_seconds,
    }
}

/// When the next release moved on after zero: under OLM v0 its CSV past
/// `Pending` (`InstallReady`, `Installing`, `Succeeded`), under a deployer
/// an apply of it accepted.
fn moved_on<'a>(events: &'a [Event], chain: &Chain, zero: Timestamp) -> Option<&'a Event> {
    after(events, zero).find(|event| match (&event.fact, chain.deployer) {
        (Fact::CsvPhase { release, phase, .. }, Deployer::Olm) => {
            *release == chain.next
                && matches!(phase.as_str(), "InstallReady" | "Installing" | "Succeeded")
        }
        (
            Fact::Deployed {
                release,
                accepted: true,
                ..
            },
            Deployer::Helm | Deployer::OlmV1 | Deployer::Kubectl | Deployer::Flux,
        ) => *release == chain.next,
        _ => false,
    })
}

/// Time zero: the channel switch (the first event if there was none).
pub fn zero_of(events: &[Event]) -> Timestamp {
    super::timeline::zero_at(events)
        .or_else(|| events.first().map(|event| event.at))
        .unwrap_or_default()
}

fn after(events: &[Event], zero: Timestamp) -> impl Iterator<Item = &Event> {
    events.iter().filter(move |event| event.at >= zero)
}

/// The upgrade outcomes the Job pods reported.
struct JobOutcomes {
    /// (pod, versions applied) of each readable outcome.
    applied: Vec<(String, Vec<i64>)>,
    /// (pod, termination message) of each pod that exited 0 without one.
    unreadable: Vec<(String, String)>,
}

fn job_outcomes(events: &[Event]) -> JobOutcomes {
    let mut outcomes = JobOutcomes {
        applied: Vec::new(),
        unreadable: Vec::new(),
    };
    for event in events {
        let Fact::PodExited {
            pod,
            kind: PodKind::Job,
            exit_code: 0,
            message,
            ..
        } = &event.fact
        else {
            continue;
        };
        match applied_versions(message) {
            Some(applied) => outcomes.applied.push((pod.clone(), applied)),
            None => outcomes.unreadable.push((pod.clone(), message.clone())),
        }
    }
    outcomes
}

/// The versions an upgrade outcome (a Job's termination message) says it
/// applied; `None` when it is no outcome.
fn applied_versions(message: &str) -> Option<Vec<i64>> {
    let outcome: serde_json::Value = serde_json::from_str(message).ok()?;
    outcome["applied"]
        .as_array()?
        .iter()
        .map(|step| step["version"].as_i64())
        .collect()
}

fn versions(applied: &[i64]) -> String {
    if applied.is_empty() {
        return "nothing".to_owned();
    }
    applied
        .iter()
        .map(|version| format!("V{version}"))
        .collect::<Vec<_>>()
        .join(", ")
}
