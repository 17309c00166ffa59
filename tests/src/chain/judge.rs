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
//! - **The verdict** ([`RunVerdict`]): `raced`, `held` or `inconclusive`.
//!   A run is inconclusive when its evidence has a hole that could hide a
//!   race or damage: a recorder's gap (a failed or relisted watch, a failed
//!   history read; a watch that failed during the set-up and listed again
//!   before time zero is whole again and no hole), a Job pod's outcome that
//!   cannot be read, a release
//!   whose CSV succeeded without its operator pod ever observed, no write
//!   acknowledged in a schema layout the run went through, a write that
//!   failed with an error of an unexpected kind (neither refused, an SQL
//!   error nor a lost connection: the writer's counts by cause are not
//!   whole), or — for a run
//!   not raced — a load check not passed (a run whose Job was too short to
//!   meet OLM's step cannot show that the gate held it).
//! - **Raced**: the middle release's upgrade completes when its Job has
//!   succeeded *and* its operator verified the schema (the App Ready with
//!   its database at the middle release's schema — a gate opened by anyone
//!   else proves nothing). The run raced when, before that, the middle
//!   release's operator stopped for good (its last pod stopping — a pod
//!   replaced by another pod of the same release is a restart, not an
//!   upgrade) or an operator pod of a later release was created.
//! - **Damaged**: an acknowledged write lost or changed; the data present
//!   before the run changed; a migration missing at the end (cut off),
//!   applied twice, or committed out of order; or the chain not ending with
//!   the last release's CSV `Succeeded`, the App Ready at it and its gate
//!   `Upgradeable=True` as OLM copied it at the current generation.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde::Serialize;

use super::digest::{DataDigest, ExecutionsLayout};
use super::timeline::{Event, Fact, JobChange, PodChange, PodKind, offset, seconds_between};
use super::writer::WriterVerdict;

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
}

impl Deployer {
    /// Who applied a release, in the evidence.
    pub fn who(self) -> &'static str {
        match self {
            Deployer::Olm => "OLM",
            Deployer::Helm => "the deployer",
            Deployer::OlmV1 => "OLM v1",
            Deployer::Kubectl => "the pipeline",
        }
    }

    /// Whether the admission policy is this deployer's brake (everything
    /// but OLM v0, whose brake is the OperatorCondition).
    pub fn admitted(self) -> bool {
        self != Deployer::Olm
    }

    /// As the command line and the reports name it (`olm`, `helm`,
    /// `olm-v1`, `kubectl`).
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
    pub writer: WriterVerdict,
    pub history: Vec<HistoryRow>,
    /// What the last release's `app-db-upgrade plan` says of the schema at
    /// the end: `Ok` at its target, `Err` what it would do or refuse.
    pub schema: Result<String, String>,
    /// The layouts of `executions` the run went through (at its start and
    /// at its end): the writer must have had a write acknowledged in each.
    pub layouts: Vec<ExecutionsLayout>,
}

/// What a run shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunVerdict {
    /// Another upgrade started before the middle release's completed.
    Raced,
    /// Not raced, with evidence that could have shown a race: the load
    /// check passed and no hole in the record (a chain without a middle
    /// release has nothing to cut short, and no load to check).
    Held,
    /// The record has a hole that could hide a race or damage; the
    /// reasons say which ([`Verdict::inconclusive`]).
    Inconclusive,
}

impl RunVerdict {
    pub fn name(self) -> &'static str {
        match self {
            RunVerdict::Raced => "raced",
            RunVerdict::Held => "held",
            RunVerdict::Inconclusive => "inconclusive",
        }
    }
}

/// The judgement of one run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verdict {
    pub verdict: RunVerdict,
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
    /// Whether the load check held (`None`: not measurable, said in evidence).
    pub load_ok: Option<bool>,
    /// How soon OLM let the next release through once its status copy of
    /// the middle release's gate said `Upgradeable=True` (gated runs);
    /// under a deployer, how soon its apply of the next release was
    /// accepted once the middle release's upgrade completed.
    pub olm_reaction_seconds: Option<f64>,
}

/// Judges a run.
pub fn judge(events: &[Event], chain: &Chain, checks: &EndChecks) -> Verdict {
    let zero = zero_of(events);
    let mut evidence = Vec::new();
    let (raced, found) = race_of(events, chain);
    evidence.extend(found);
    let pending_seconds = match chain.deployer {
        Deployer::Olm => pending(events, &chain.next, zero, &mut evidence),
        Deployer::Helm | Deployer::OlmV1 | Deployer::Kubectl => {
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
        (Some(middle), Deployer::Helm | Deployer::OlmV1 | Deployer::Kubectl) if !raced => {
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
    let mut inconclusive = holes(events, chain, checks, zero);
    if chain.middle.is_some() && !raced && load_ok != Some(true) {
        inconclusive.push(format!(
            "not raced, but the load check did not pass ({}): the run could not have shown a race",
            load.as_ref()
                .map_or("no load line", |load| load.line.as_str())
        ));
    }
    for reason in &inconclusive {
        evidence.push(format!("INCONCLUSIVE: {reason}"));
    }
    let verdict = match (inconclusive.is_empty(), raced) {
        (false, _) => RunVerdict::Inconclusive,
        (true, true) => RunVerdict::Raced,
        (true, false) => RunVerdict::Held,
    };
    Verdict {
        verdict,
        raced,
        damaged,
        inconclusive,
        evidence,
        pending_seconds,
        load_margin_seconds,
        load_ok,
        olm_reaction_seconds,
    }
}

/// The holes in a run's record that could hide a race or damage.
fn holes(events: &[Event], chain: &Chain, checks: &EndChecks, zero: Timestamp) -> Vec<String> {
    let mut holes = Vec::new();
    // A watch that lost its place during the set-up and listed again
    // before time zero had the whole state again before the chain began:
    // nothing after zero can be missing from it.
    let healed_before_zero = |event: &Event| {
        let watch = match &event.fact {
            Fact::WatchError { watch, .. } | Fact::WatchRelisted { watch } => watch,
            _ => return false,
        };
        event.at < zero
            && events.iter().any(|later| {
                later.at >= event.at
                    && later.at < zero
                    && matches!(&later.fact, Fact::WatchRelisted { watch: relisted } if relisted == watch)
            })
    };
    for event in events {
        if matches!(
            event.fact,
            Fact::WatchError { .. } | Fact::WatchRelisted { .. } | Fact::HistoryReadFailed { .. }
        ) && !healed_before_zero(event)
        {
            holes.push(format!(
                "{}: {} (a change may have been missed)",
                offset(zero, event.at),
                event.fact
            ));
        }
    }
    for (pod, message) in job_outcomes(events).unreadable {
        holes.push(format!(
            "Job pod {pod} exited 0 with an outcome that cannot be read ({message:?}): what it applied is unknown"
        ));
    }
    let releases = chain
        .middle
        .iter()
        .chain([&chain.next, &chain.last])
        .collect::<Vec<_>>();
    let mut checked: Vec<&String> = Vec::new();
    for release in releases {
        if checked.contains(&release) {
            continue;
        }
        checked.push(release);
        let succeeded = after(events, zero).find(|event| {
            matches!(&event.fact, Fact::CsvPhase { release: of, phase, .. } if of == release && phase == "Succeeded")
        });
        let pod_seen = events.iter().any(|event| {
            matches!(&event.fact, Fact::Pod { kind: PodKind::Operator, release: of, .. } if of == release)
        });
        if let Some(succeeded) = succeeded
            && !pod_seen
        {
            holes.push(format!(
                "CSV upgrade-gate.v{release} Succeeded at {} but no operator pod of {release} was observed: when it started cannot be told",
                offset(zero, succeeded.at)
            ));
        }
        let applied = after(events, zero).find(|event| {
            matches!(&event.fact, Fact::Deployed { release: of, accepted: true, .. } if of == release)
        });
        // Replaced by another release before its Deployment made a pod (a
        // pipeline pushing at once): no pod of it ever existed, which the
        // pod watch, without a gap above, would otherwise have seen.
        let superseded = applied.is_some_and(|applied| {
            events.iter().any(|event| {
                event.at >= applied.at
                    && matches!(&event.fact, Fact::Deployed { release: of, accepted: true, .. } if of != release)
            })
        });
        if let Some(applied) = applied
            && !pod_seen
            && !superseded
        {
            holes.push(format!(
                "the deployer applied {release} at {} but no operator pod of {release} was observed: when it started cannot be told",
                offset(zero, applied.at)
            ));
        }
    }
    for (at, error) in &checks.writer.unexpected {
        holes.push(format!(
            "{}: the writer met an error of an unexpected kind ({error}): neither refused, an SQL error nor a lost connection, so its counts by cause are not whole",
            offset(zero, *at)
        ));
    }
    let mut layouts = checks.layouts.clone();
    layouts.dedup();
    for layout in layouts {
        if checks.writer.acknowledged(layout) == 0 {
            holes.push(format!(
                "no write acknowledged in the {} layout the database had: the writer checked nothing there",
                layout.name()
            ));
        }
    }
    holes
}

/// How soon after OLM's status copy of the middle release's gate said
/// `Upgradeable=True` (at its generation) the next release left `Pending`:
/// the copy in effect when it left (a `True` written and closed again
/// before, by a fault, is not what OLM acted on).
fn olm_reaction(
    events: &[Event],
    chain: &Chain,
    middle: &str,
    zero: Timestamp,
    evidence: &mut Vec<String>,
) -> Option<f64> {
    let moved = after(events, zero).find(|event| {
        matches!(&event.fact, Fact::CsvPhase { release, phase, .. } if *release == chain.next && phase != "Pending")
    })?;
    let opened = events
        .iter()
        .rfind(|event| {
            event.at <= moved.at
                && matches!(&event.fact, Fact::ConditionStatus { release, .. } if release == middle)
        })
        .filter(|event| {
            matches!(&event.fact, Fact::ConditionStatus { status: Some(status), observed_generation: Some(observed), generation, .. }
                if status == "True" && observed == generation)
        })?;
    let seconds = seconds_between(opened.at, moved.at);
    evidence.push(format!(
        "OLM acted {seconds:.1} s after its copy of {middle}'s gate said Upgradeable=True: {} at {}",
        moved.fact,
        offset(zero, moved.at)
    ));
    Some(seconds)
}

/// How soon after the middle release's upgrade completed the deployer's
/// apply of the next release was accepted (the deployer retries on its
/// own schedule: this includes its pause between tries).
fn deployer_reaction(
    events: &[Event],
    chain: &Chain,
    middle: &str,
    zero: Timestamp,
    evidence: &mut Vec<String>,
) -> Option<f64> {
    let middle_schema = chain.middle_schema.as_deref().unwrap_or(middle);
    let (completed, _) = completion(events, middle, middle_schema, zero)?;
    let accepted = after(events, zero).find(|event| {
        matches!(&event.fact, Fact::Deployed { release, accepted: true, .. } if *release == chain.next)
    })?;
    let seconds = seconds_between(completed, accepted.at);
    evidence.push(format!(
        "{}'s apply of {} accepted {seconds:.1} s after {middle}'s upgrade completed",
        chain.deployer.who(),
        chain.next
    ));
    Some(seconds)
}

/// What OLM did after a fault opened the middle release's gate from
/// outside (a deletion, a foreign `Upgradeable=True`) and its operator put
/// `Upgradeable=False` back, which OLM's status held from `copied` on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AfterRestore {
    /// The next release did not leave `Pending` before the gate was
    /// released again (by the operator, once its upgrade was verified):
    /// the restored gate held.
    Held,
    /// It left `Pending` `after` seconds from the copy (negative: before
    /// it), within OLM's reaction bound: OLM decided on its cache of the
    /// deleted or released object. Either outcome of the run is the fault's.
    ThroughWithinBound { after: f64 },
    /// It left `Pending` `after` seconds from the copy, past the bound and
    /// before anyone released the gate: a gate that did not hold.
    ThroughLate { after: f64 },
}

/// Judges [`AfterRestore`] from when OLM's status held the restored
/// answer (`copied`), when the next release left `Pending` (`through`),
/// when the gate was next released (`released`), and how long OLM takes
/// to act on a status change (`bound`, seconds).
pub fn after_restore(
    copied: Timestamp,
    through: Option<Timestamp>,
    released: Option<Timestamp>,
    bound: f64,
) -> AfterRestore {
    match through.filter(|through| released.is_none_or(|released| *through < released)) {
        None => AfterRestore::Held,
        Some(through) => {
            let after = seconds_between(copied, through);
            if after <= bound {
                AfterRestore::ThroughWithinBound { after }
            } else {
                AfterRestore::ThroughLate { after }
            }
        }
    }
}

/// Whether the chain stopped short of its end for good: the last release
/// in place (OLM v0: its CSV `Succeeded`; the other deployers: it was
/// applied) and the App's upgrade waiting for a person (`GaveUp` or
/// `Refused`), which no operator retries on its own. Says why.
pub fn chain_stopped(events: &[Event], chain: &Chain) -> Option<String> {
    let in_place = match chain.deployer {
        Deployer::Olm => {
            let last_csv = events.iter().rev().find(|event| {
                matches!(&event.fact, Fact::CsvPhase { release, .. } | Fact::CsvDeleted { release } if *release == chain.last)
            })?;
            matches!(&last_csv.fact, Fact::CsvPhase { phase, .. } if phase == "Succeeded")
        }
        Deployer::Helm | Deployer::OlmV1 | Deployer::Kubectl => events.iter().any(|event| {
            matches!(&event.fact, Fact::Deployed { release, accepted: true, .. } if *release == chain.last)
        }),
    };
    if !in_place {
        return None;
    }
    let app = events
        .iter()
        .rev()
        .find(|event| matches!(event.fact, Fact::AppStatus { .. }))?;
    match &app.fact {
        Fact::AppStatus {
            upgrade_phase: Some(phase),
            ..
        } if phase == "GaveUp" || phase == "Refused" => Some(format!(
            "the chain stopped: {} (waits for a person)",
            app.fact
        )),
        _ => None,
    }
}

/// Whether the chain reached its end: the last release's CSV `Succeeded`,
/// the App Ready at it, its gate `Upgradeable=True` as OLM copied it.
pub fn chain_ended(events: &[Event], chain: &Chain) -> bool {
    end_state(events, chain, zero_of(events), &mut Vec::new())
}

/// Whether the run raced, and the facts that say so (a chain without a
/// middle release cannot race: there is no upgrade to cut short).
pub fn race_of(events: &[Event], chain: &Chain) -> (bool, Vec<String>) {
    let zero = zero_of(events);
    let mut evidence = Vec::new();
    let raced = match &chain.middle {
        Some(middle) => race(events, chain, middle, zero, &mut evidence),
        None => {
            evidence.push(no_middle(events, chain, zero));
            false
        }
    };
    (raced, evidence)
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

/// When the middle release's upgrade completed: its Job succeeded and the
/// schema was verified (both needed; the later of the two).
fn completion(
    events: &[Event],
    middle: &str,
    middle_schema: &str,
    zero: Timestamp,
) -> Option<(Timestamp, Vec<String>)> {
    let job = after(events, zero).find(|event| {
        matches!(&event.fact, Fact::Job { release, change: JobChange::Succeeded, .. } if release == middle)
    })?;
    // Only the operator of the middle release marks the App Ready at its
    // schema; a gate opened by anyone (`upgrade-gate release` writes
    // `UpgradeComplete` too) proves nothing about the schema.
    let verified = after(events, zero).find(|event| {
        matches!(&event.fact, Fact::AppStatus { ready: true, database_release: Some(release), .. }
            if release == middle_schema)
    })?;
    let at = job.at.max(verified.at);
    Some((
        at,
        vec![
            format!("{}: {}", offset(zero, job.at), job.fact),
            format!(
                "{}: schema verified: {}",
                offset(zero, verified.at),
                verified.fact
            ),
        ],
    ))
}

/// When each operator pod of `release` was created and when it stopped.
fn operator_pods(
    events: &[Event],
    release: &str,
) -> BTreeMap<String, (Timestamp, Option<(Timestamp, String)>)> {
    let mut pods: BTreeMap<String, (Timestamp, Option<(Timestamp, String)>)> = BTreeMap::new();
    for event in events {
        let (pod, stop) = match &event.fact {
            Fact::Pod {
                pod,
                kind: PodKind::Operator,
                release: of,
                change,
            } if of == release => (
                pod,
                matches!(change, PodChange::Stopping | PodChange::Deleted),
            ),
            Fact::PodExited {
                pod,
                kind: PodKind::Operator,
                release: of,
                container,
                ..
            } if of == release && container == super::facts::OPERATOR_CONTAINER => (pod, true),
            _ => continue,
        };
        let entry = pods.entry(pod.clone()).or_insert((event.at, None));
        if stop && entry.1.is_none() {
            entry.1 = Some((event.at, event.fact.to_string()));
        }
    }
    pods
}

fn race(
    events: &[Event],
    chain: &Chain,
    middle: &str,
    zero: Timestamp,
    evidence: &mut Vec<String>,
) -> bool {
    let middle_schema = chain.middle_schema.as_deref().unwrap_or(middle);
    let completed = completion(events, middle, middle_schema, zero);
    match &completed {
        Some((at, facts)) => {
            evidence.extend(facts.iter().cloned());
            evidence.push(format!(
                "{}: {middle}'s upgrade complete",
                offset(zero, *at)
            ));
        }
        None => {
            let job = after(events, zero).find(|event| {
                matches!(&event.fact, Fact::Job { release, change: JobChange::Created, .. } if release == middle)
            });
            evidence.push(match job {
                Some(job) => format!(
                    "{middle}'s upgrade never completed ({} at {}; no success and verification by {middle} followed)",
                    job.fact,
                    offset(zero, job.at)
                ),
                None => format!("{middle}'s operator never created an upgrade Job"),
            });
        }
    }
    let middle_pods = operator_pods(events, middle);
    let last_middle = middle_pods.iter().max_by_key(|(_, (created, _))| *created);
    let stopped = last_middle.and_then(|(_, (_, stop))| stop.clone());
    if middle_pods.len() > 1 {
        evidence.push(format!(
            "{middle} ran {} operator pods; only the last one's stop ends {middle}'s operator",
            middle_pods.len()
        ));
    }
    let next_pod = after(events, zero).find(|event| {
        matches!(&event.fact, Fact::Pod { kind: PodKind::Operator, release, change: PodChange::Created, .. }
            if later(release, middle))
    });
    let mut cut: Vec<(Timestamp, String)> = Vec::new();
    if let Some((at, fact)) = &stopped {
        cut.push((*at, format!("{middle}'s operator stopped for good: {fact}")));
    }
    if let Some(pod) = next_pod {
        cut.push((pod.at, format!("the next upgrade started: {}", pod.fact)));
    }
    cut.sort_by_key(|(at, _)| *at);
    let Some((first_cut, what)) = cut.first() else {
        evidence.push(format!(
            "not raced: {middle}'s operator was never stopped and no later release started"
        ));
        return false;
    };
    match completed {
        Some((done, _)) if done <= *first_cut => {
            evidence.push(format!(
                "not raced: {} at {}, after {middle}'s upgrade completed at {}",
                what,
                offset(zero, *first_cut),
                offset(zero, done)
            ));
            false
        }
        Some((done, _)) => {
            evidence.push(format!(
                "RACED: {} at {}, {:.1} s before {middle}'s upgrade completed at {}",
                what,
                offset(zero, *first_cut),
                seconds_between(*first_cut, done),
                offset(zero, done)
            ));
            true
        }
        None => {
            evidence.push(format!(
                "RACED: {} at {}, and {middle}'s upgrade never completed",
                what,
                offset(zero, *first_cut)
            ));
            true
        }
    }
}

/// Whether `release` is a later version than `than` (both `x.y.z`).
fn later(release: &str, than: &str) -> bool {
    match (
        release.parse::<semver::Version>(),
        than.parse::<semver::Version>(),
    ) {
        (Ok(release), Ok(than)) => release > than,
        _ => false,
    }
}

fn no_middle(events: &[Event], chain: &Chain, zero: Timestamp) -> String {
    let between: Vec<String> = after(events, zero)
        .filter_map(|event| match &event.fact {
            Fact::CsvCreated { release } if *release != chain.from && *release != chain.last => {
                Some(release.clone())
            }
            _ => None,
        })
        .collect();
    if between.is_empty() {
        format!(
            "no release between {} and {} was installed: OLM went straight to {}",
            chain.from, chain.last, chain.last
        )
    } else {
        format!(
            "releases installed between {} and {}: {}",
            chain.from,
            chain.last,
            between.join(", ")
        )
    }
}

/// How long `release`'s CSV stayed Pending (first Pending to the first
/// phase after it).
fn pending(
    events: &[Event],
    release: &str,
    zero: Timestamp,
    evidence: &mut Vec<String>,
) -> Option<f64> {
    let phases: Vec<(&Event, &str)> = events
        .iter()
        .filter_map(|event| match &event.fact {
            Fact::CsvPhase {
                release: of, phase, ..
            } if of == release => Some((event, phase.as_str())),
            _ => None,
        })
        .collect();
    let start = phases.iter().position(|(_, phase)| *phase == "Pending")?;
    let (pending, _) = phases[start];
    let end = phases[start..]
        .iter()
        .position(|(_, phase)| *phase != "Pending")?
        + start;
    let left = &phases[end];
    let mut reasons: Vec<&str> = Vec::new();
    for (event, _) in &phases[start..end] {
        if let Fact::CsvPhase { reason, .. } = &event.fact
            && !reason.is_empty()
            && !reasons.contains(&reason.as_str())
        {
            reasons.push(reason);
        }
    }
    let reason = if reasons.is_empty() {
        String::new()
    } else {
        format!(" ({})", reasons.join(", then "))
    };
    let seconds = seconds_between(pending.at, left.0.at);
    evidence.push(format!(
        "CSV upgrade-gate.v{release} Pending{reason} from {} to {}: waited {seconds:.1} s",
        offset(zero, pending.at),
        offset(zero, left.0.at)
    ));
    Some(seconds)
}

/// How long the deployer's applies of `release` were refused: from the
/// first refused one to the accepted one (`None`: never refused, or never
/// accepted).
fn refused_for(
    events: &[Event],
    deployer: Deployer,
    release: &str,
    zero: Timestamp,
    evidence: &mut Vec<String>,
) -> Option<f64> {
    let applies: Vec<(&Event, bool)> = after(events, zero)
        .filter_map(|event| match &event.fact {
            Fact::Deployed {
                release: of,
                accepted,
                ..
            } if of == release => Some((event, *accepted)),
            _ => None,
        })
        .collect();
    let refused = applies.iter().filter(|(_, accepted)| !accepted).count();
    let first = applies.first()?;
    let Some((accepted, _)) = applies.iter().find(|(_, accepted)| *accepted) else {
        evidence.push(format!(
            "{}'s {} applies of {release} were all refused",
            deployer.who(),
            applies.len()
        ));
        return None;
    };
    if refused == 0 {
        evidence.push(format!(
            "{}'s first apply of {release} was accepted at {}",
            deployer.who(),
            offset(zero, accepted.at)
        ));
        return None;
    }
    let seconds = seconds_between(first.0.at, accepted.at);
    evidence.push(format!(
        "{}'s applies of {release} refused {refused} times from {} on; accepted at {}: waited {seconds:.1} s",
        deployer.who(),
        offset(zero, first.0.at),
        offset(zero, accepted.at)
    ));
    Some(seconds)
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

/// Whether the run carried load enough to show a race: the middle
/// release's Job outlasting the next release's offer by [`LOAD_MARGIN`].
struct Load {
    /// Seconds from the offer to the Job's success, when both happened.
    margin: Option<f64>,
    /// Whether `margin` reached [`LOAD_MARGIN`]; `None`: not measurable.
    ok: Option<bool>,
    /// The evidence line saying so.
    line: String,
}

fn load(events: &[Event], chain: &Chain, middle: &str, zero: Timestamp) -> Load {
    // When the next release was offered: OLM created its CSV, or the
    // deployer first applied it (accepted or not).
    let next_created = after(events, zero).find(|event| {
        matches!(&event.fact, Fact::CsvCreated { release } | Fact::Deployed { release, .. } if *release == chain.next)
    });
    let offered = match chain.deployer {
        Deployer::Olm => format!("OLM created CSV upgrade-gate.v{}", chain.next),
        Deployer::Helm | Deployer::OlmV1 | Deployer::Kubectl => {
            format!("{} first applied {}", chain.deployer.who(), chain.next)
        }
    };
    let job_done = after(events, zero).find(|event| {
        matches!(&event.fact, Fact::Job { release, change: JobChange::Succeeded, .. } if release == middle)
    });
    match (next_created, job_done) {
        (Some(next), Some(done)) => {
            let margin = seconds_between(next.at, done.at);
            let ok = margin >= LOAD_MARGIN;
            let line = if ok {
                format!(
                    "load: {middle}'s Job succeeded {margin:.1} s after {offered} (at least {LOAD_MARGIN} s needed)"
                )
            } else {
                format!(
                    "LOAD TOO SMALL: {middle}'s Job succeeded only {margin:.1} s after {offered} (at least {LOAD_MARGIN} s needed): this run cannot show the race; seed more rows"
                )
            };
            Load {
                margin: Some(margin),
                ok: Some(ok),
                line,
            }
        }
        (None, _) => Load {
            margin: None,
            ok: None,
            line: format!(
                "load: never {offered}: not measurable",
                offered = match chain.deployer {
                    Deployer::Olm => format!("did OLM create CSV upgrade-gate.v{}", chain.next),
                    Deployer::Helm | Deployer::OlmV1 | Deployer::Kubectl => {
                        format!("did {} apply {}", chain.deployer.who(), chain.next)
                    }
                }
            ),
        },
        (Some(next), None) => {
            let reshaped = job_outcomes(events)
                .applied
                .into_iter()
                .filter(|(_, applied)| {
                    applied.len() > 1
                        || applied
                            .iter()
                            .any(|v| chain.migrations.iter().any(|(m, _)| m == v))
                })
                .map(|(pod, applied)| format!("{pod} applied {}", versions(&applied)))
                .collect::<Vec<_>>();
            let line = format!(
                "load: {middle}'s Job never succeeded ({offered} at {}): not measurable; {}",
                offset(zero, next.at),
                if reshaped.is_empty() {
                    "no Job reported applying migrations".to_owned()
                } else {
                    reshaped.join("; ")
                }
            );
            Load {
                margin: None,
                ok: None,
                line,
            }
        }
    }
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

/// The chain ended where it should; says what is missing otherwise.
fn end_state(events: &[Event], chain: &Chain, zero: Timestamp, evidence: &mut Vec<String>) -> bool {
    let last = &chain.last;
    let schema = &chain.last_schema;
    let mut missing = Vec::new();
    match chain.deployer {
        Deployer::Olm => olm_csv_end(events, last, zero, evidence, &mut missing),
        Deployer::Helm | Deployer::OlmV1 | Deployer::Kubectl => {
            deployer_end(events, last, zero, evidence, &mut missing)
        }
    }
    let app = events
        .iter()
        .rev()
        .find(|event| matches!(event.fact, Fact::AppStatus { .. }));
    match app.map(|event| (&event.fact, event.at)) {
        Some((
            Fact::AppStatus {
                ready: true,
                database_release: Some(release),
                ..
            },
            at,
        )) if release == schema => {
            evidence.push(format!(
                "{}: App Ready, database at {schema}'s schema",
                offset(zero, at)
            ));
        }
        Some((fact, _)) => missing.push(format!(
            "the App Ready at {schema}'s schema (last seen: {fact})"
        )),
        None => missing.push(format!(
            "the App Ready at {schema}'s schema (no App status seen)"
        )),
    }
    if chain.deployer == Deployer::Olm {
        olm_gate_end(events, last, zero, evidence, &mut missing);
    }
    if missing.is_empty() {
        true
    } else {
        evidence.push(format!(
            "DAMAGED: the chain did not end: missing {}",
            missing.join("; ")
        ));
        false
    }
}

/// Under a deployer: the last release applied, and an operator pod of it
/// started after.
fn deployer_end(
    events: &[Event],
    last: &str,
    zero: Timestamp,
    evidence: &mut Vec<String>,
    missing: &mut Vec<String>,
) {
    let applied = events.iter().find(|event| {
        matches!(&event.fact, Fact::Deployed { release, accepted: true, .. } if release == last)
    });
    let Some(applied) = applied else {
        missing.push(format!("release {last} applied by the deployer"));
        return;
    };
    evidence.push(format!("{}: {}", offset(zero, applied.at), applied.fact));
    let started = events.iter().find(|event| {
        event.at >= applied.at
            && matches!(&event.fact, Fact::Pod { kind: PodKind::Operator, release, change: PodChange::Started, .. } if release == last)
    });
    match started {
        Some(started) => evidence.push(format!("{}: {}", offset(zero, started.at), started.fact)),
        None => missing.push(format!("an operator pod of {last} started")),
    }
}

/// Under OLM: the last release's CSV `Succeeded`.
fn olm_csv_end(
    events: &[Event],
    last: &str,
    zero: Timestamp,
    evidence: &mut Vec<String>,
    missing: &mut Vec<String>,
) {
    let csv = events.iter().rev().find(|event| {
        matches!(&event.fact, Fact::CsvPhase { release, .. } | Fact::CsvDeleted { release } if release == last)
    });
    match csv.map(|event| (&event.fact, event.at)) {
        Some((Fact::CsvPhase { phase, .. }, at)) if phase == "Succeeded" => {
            evidence.push(format!(
                "{}: CSV upgrade-gate.v{last} Succeeded",
                offset(zero, at)
            ));
        }
        Some((fact, _)) => missing.push(format!(
            "CSV upgrade-gate.v{last} Succeeded (last seen: {fact})"
        )),
        None => missing.push(format!("CSV upgrade-gate.v{last} Succeeded (never seen)")),
    }
}

/// Under OLM: the last release's gate open in OLM's copy.
fn olm_gate_end(
    events: &[Event],
    last: &str,
    zero: Timestamp,
    evidence: &mut Vec<String>,
    missing: &mut Vec<String>,
) {
    let gate = events.iter().rev().find(|event| {
        matches!(&event.fact, Fact::ConditionSpec { release, .. } | Fact::ConditionStatus { release, .. } | Fact::ConditionDeleted { release } if release == last)
    });
    match gate.map(|event| (&event.fact, event.at)) {
        Some((
            Fact::ConditionStatus {
                status: Some(status),
                observed_generation: Some(observed),
                generation,
                ..
            },
            at,
        )) if status == "True" && observed == generation => {
            evidence.push(format!(
                "{}: {last}'s gate Upgradeable=True, copied by OLM at generation {generation}",
                offset(zero, at)
            ));
        }
        Some((fact, _)) => missing.push(format!(
            "{last}'s gate Upgradeable=True in OLM's copy (last seen: {fact})"
        )),
        None => missing.push(format!(
            "{last}'s gate Upgradeable=True (no OperatorCondition seen)"
        )),
    }
}

fn migrations(
    events: &[Event],
    chain: &Chain,
    history: &[HistoryRow],
    zero: Timestamp,
    evidence: &mut Vec<String>,
) -> bool {
    let mut sound = true;
    let expected: Vec<i64> = chain
        .migrations
        .iter()
        .map(|(version, _)| *version)
        .collect();
    let present: Vec<i64> = history.iter().map(|row| row.version).collect();
    let missing: Vec<i64> = expected
        .iter()
        .copied()
        .filter(|v| !present.contains(v))
        .collect();
    if missing.is_empty() {
        evidence.push(format!("schema history at the end: {}", versions(&present)));
    } else {
        sound = false;
        evidence.push(format!(
            "DAMAGED: migrations cut off: {} missing from the history at the end ({} present)",
            versions(&missing),
            versions(&present)
        ));
    }
    // Each version: the distinct applied_on values seen, when first seen.
    let mut seen: BTreeMap<i64, (Timestamp, Vec<String>)> = BTreeMap::new();
    for event in events {
        match &event.fact {
            Fact::MigrationApplied {
                version,
                applied_on,
                ..
            } => {
                let entry = seen.entry(*version).or_insert((event.at, Vec::new()));
                if !entry.1.contains(applied_on) {
                    entry.1.push(applied_on.clone());
                }
            }
            Fact::MigrationRemoved { version } => {
                sound = false;
                evidence.push(format!(
                    "DAMAGED: {}: migration V{version} left the history (rolled back or restored)",
                    offset(zero, event.at)
                ));
            }
            _ => {}
        }
    }
    for (version, (_, applied_on)) in &seen {
        if applied_on.len() > 1 {
            sound = false;
            evidence.push(format!(
                "DAMAGED: migration V{version} applied {} times (applied_on {})",
                applied_on.len(),
                applied_on.join(", ")
            ));
        }
    }
    let mut by_jobs: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    for (pod, applied) in job_outcomes(events).applied {
        if !applied.is_empty() {
            evidence.push(format!("Job pod {pod} applied {}", versions(&applied)));
        }
        for version in applied {
            by_jobs.entry(version).or_default().push(pod.clone());
        }
    }
    for (version, pods) in &by_jobs {
        if pods.len() > 1 {
            sound = false;
            evidence.push(format!(
                "DAMAGED: migration V{version} applied by {} Jobs: {}",
                pods.len(),
                pods.join(", ")
            ));
        }
    }
    let order: Vec<(i64, Timestamp)> = seen
        .iter()
        .map(|(version, (at, _))| (*version, *at))
        .collect();
    for pair in order.windows(2) {
        if pair[1].1 < pair[0].1 {
            sound = false;
            evidence.push(format!(
                "DAMAGED: migration V{} committed at {}, before V{} at {}",
                pair[1].0,
                offset(zero, pair[1].1),
                pair[0].0,
                offset(zero, pair[0].1)
            ));
        }
    }
    let applied_on: Vec<(i64, Timestamp)> = history
        .iter()
        .filter_map(|row| Some((row.version, row.applied_on.parse::<Timestamp>().ok()?)))
        .collect();
    for pair in applied_on.windows(2) {
        if pair[1].1 < pair[0].1 {
            sound = false;
            evidence.push(format!(
                "DAMAGED: migration V{} has applied_on {} before V{}'s {}",
                pair[1].0, pair[1].1, pair[0].0, pair[0].1
            ));
        }
    }
    for (version, (at, _)) in seen.iter().filter(|(_, (at, _))| *at >= zero) {
        evidence.push(format!(
            "{}: migration V{version} committed",
            offset(zero, *at)
        ));
    }
    sound
}

fn data(checks: &EndChecks, evidence: &mut Vec<String>) -> bool {
    let (before, after) = (&checks.data_before, &checks.data_after);
    if before == after {
        evidence.push(format!(
            "data present before the run intact: {}",
            after.summary()
        ));
        true
    } else {
        evidence.push(format!(
            "DAMAGED: the data present before the run changed: before {}; after {}",
            before.summary(),
            after.summary()
        ));
        false
    }
}

fn writes(verdict: &WriterVerdict, zero: Timestamp, evidence: &mut Vec<String>) -> bool {
    let per_layout: Vec<String> = verdict
        .acknowledged_in
        .iter()
        .map(|(layout, count)| format!("{count} in the {}", layout.name()))
        .collect();
    evidence.push(format!(
        "writer: {} inserts and {} updates acknowledged ({}); failed: {}; {} of unknown outcome; {} rows checked: {} lost, {} changed, {} gone for a while and back",
        verdict.inserts_acknowledged,
        verdict.updates_acknowledged,
        if per_layout.is_empty() {
            "none".to_owned()
        } else {
            per_layout.join(", ")
        },
        verdict.failed,
        verdict.unknown,
        verdict.rows_checked,
        verdict.lost.len(),
        verdict.changed.len(),
        verdict.reappeared.len()
    ));
    const EXAMPLES: usize = 3;
    for damage in verdict.lost.iter().take(EXAMPLES) {
        evidence.push(format!(
            "DAMAGED: execution {} acknowledged at {} is gone",
            damage.id,
            offset(zero, damage.acknowledged_at)
        ));
    }
    for damage in verdict.changed.iter().take(EXAMPLES) {
        evidence.push(format!(
            "DAMAGED: execution {} acknowledged at {} has other content now (digest {})",
            damage.id,
            offset(zero, damage.acknowledged_at),
            damage.found.as_deref().unwrap_or("-")
        ));
    }
    for damage in verdict.reappeared.iter().take(EXAMPLES) {
        evidence.push(format!(
            "DAMAGED: execution {} acknowledged at {} was gone during the run (an update found no row) and is back at the end",
            damage.id,
            offset(zero, damage.acknowledged_at)
        ));
    }
    !verdict.damaged()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::digest::TableDigest;
    use crate::chain::writer::{Damage as WriteDamage, WriteFailures};

    fn at(tenths: i64) -> Timestamp {
        Timestamp::from_millisecond(1_700_000_000_000 + tenths * 100).expect("valid")
    }

    fn chain() -> Chain {
        Chain {
            from: "7.9.3".into(),
            middle: Some("7.10.0".into()),
            next: "7.10.1".into(),
            last: "7.10.1".into(),
            middle_schema: Some("7.10.0".into()),
            last_schema: "7.10.1".into(),
            migrations: (1..=5).map(|v| (v, format!("m{v}"))).collect(),
            deployer: Deployer::Olm,
        }
    }

    fn digest() -> DataDigest {
        let table = |rows| TableDigest {
            rows,
            digest: "abc".into(),
        };
        DataDigest {
            connections: table(40),
            integrations: table(500),
            executions: table(1000),
            last_execution: 1000,
        }
    }

    fn history() -> Vec<HistoryRow> {
        (1..=5)
            .map(|version| HistoryRow {
                version,
                name: format!("m{version}"),
                applied_on: format!("2023-11-14T22:13:{:02}Z", 20 + version),
            })
            .collect()
    }

    fn checks() -> EndChecks {
        EndChecks {
            data_before: digest(),
            data_after: digest(),
            writer: WriterVerdict {
                inserts_acknowledged: 100,
                updates_acknowledged: 90,
                failed: WriteFailures {
                    refused: 20,
                    ..WriteFailures::default()
                },
                rows_checked: 100,
                acknowledged_in: [
                    (ExecutionsLayout::JsonReport, 120),
                    (ExecutionsLayout::TypedColumns, 70),
                ]
                .into(),
                ..WriterVerdict::default()
            },
            history: history(),
            schema: Ok("V5 at target".into()),
            layouts: vec![ExecutionsLayout::JsonReport, ExecutionsLayout::TypedColumns],
        }
    }

    fn pod(name: &str, release: &str, change: PodChange) -> Fact {
        Fact::Pod {
            pod: name.into(),
            kind: PodKind::Operator,
            release: release.into(),
            change,
        }
    }

    fn job(release: &str, change: JobChange) -> Fact {
        Fact::Job {
            job: format!("shop-db-{}-1", release.replace('.', "-")),
            release: release.into(),
            change,
        }
    }

    fn phase(release: &str, phase: &str, reason: &str) -> Fact {
        Fact::CsvPhase {
            release: release.into(),
            phase: phase.into(),
            reason: reason.into(),
            message: String::new(),
        }
    }

    fn app(release: &str, ready: bool) -> Fact {
        Fact::AppStatus {
            app: "shop".into(),
            phase: if ready { "Ready" } else { "Upgrading" }.into(),
            database_release: Some(release.into()),
            ready,
            upgrade: None,
            upgrade_phase: None,
        }
    }

    fn migration(version: i64) -> Fact {
        Fact::MigrationApplied {
            version,
            name: format!("m{version}"),
            applied_on: format!("2023-11-14T22:13:{:02}Z", 20 + version),
        }
    }

    fn gate_status(release: &str, status: &str, generation: i64) -> Fact {
        Fact::ConditionStatus {
            release: release.into(),
            status: Some(status.into()),
            reason: Some(VERIFIED_REASON.into()),
            observed_generation: Some(generation),
            generation,
        }
    }

    fn gate_true(release: &str) -> Fact {
        Fact::ConditionStatus {
            release: release.into(),
            status: Some("True".into()),
            reason: Some(VERIFIED_REASON.into()),
            observed_generation: Some(3),
            generation: 3,
        }
    }

    fn events(facts: Vec<(i64, Fact)>) -> Vec<Event> {
        let mut events: Vec<Event> = facts
            .into_iter()
            .map(|(tenths, fact)| Event {
                at: at(tenths),
                fact,
            })
            .collect();
        events.sort_by_key(|event| event.at);
        events
    }

    /// The chain the gate makes: 7.10.1 held Pending until 7.10.0's Job
    /// succeeded and was verified.
    fn gated() -> Vec<(i64, Fact)> {
        vec![
            (-100, migration(1)),
            (-100, migration(2)),
            (
                0,
                Fact::ChannelSwitched {
                    channel: "7.10.x".into(),
                },
            ),
            (20, pod("op-a", "7.9.3", PodChange::Stopping)),
            (25, pod("op-b", "7.10.0", PodChange::Created)),
            (40, job("7.10.0", JobChange::Created)),
            (57, phase("7.10.0", "Succeeded", "InstallSucceeded")),
            (
                84,
                Fact::CsvCreated {
                    release: "7.10.1".into(),
                },
            ),
            (
                85,
                phase("7.10.1", "Pending", "OperatorConditionNotUpgradeable"),
            ),
            (300, migration(3)),
            (300, migration(4)),
            (416, job("7.10.0", JobChange::Succeeded)),
            (418, app("7.10.0", true)),
            (419, gate_status("7.10.0", "True", 5)),
            (420, phase("7.10.1", "InstallReady", "")),
            (421, pod("op-b", "7.10.0", PodChange::Stopping)),
            (430, pod("op-c", "7.10.1", PodChange::Created)),
            (454, phase("7.10.1", "Succeeded", "InstallSucceeded")),
            (500, migration(5)),
            (518, app("7.10.1", true)),
            (523, gate_true("7.10.1")),
        ]
    }

    #[test]
    fn a_gated_chain_is_neither_raced_nor_damaged() {
        let verdict = judge(&events(gated()), &chain(), &checks());
        assert!(!verdict.raced, "{:#?}", verdict.evidence);
        assert!(!verdict.damaged, "{:#?}", verdict.evidence);
        assert_eq!(verdict.verdict, RunVerdict::Held, "{:#?}", verdict.evidence);
        assert!(verdict.inconclusive.is_empty());
        assert_eq!(
            verdict.olm_reaction_seconds.map(|s| (s * 10.0).round()),
            Some(1.0)
        );
        // A True copied and closed again long before (a release, restored)
        // is not what OLM acted on.
        let mut facts = gated();
        facts.extend([
            (100, gate_status("7.10.0", "True", 3)),
            (101, gate_status("7.10.0", "False", 4)),
        ]);
        let verdict = judge(&events(facts), &chain(), &checks());
        assert_eq!(
            verdict.olm_reaction_seconds.map(|s| (s * 10.0).round()),
            Some(1.0)
        );
        assert_eq!(
            verdict.pending_seconds.map(|s| (s * 10.0).round()),
            Some(335.0)
        );
        assert_eq!(
            verdict.load_margin_seconds.map(|s| (s * 10.0).round()),
            Some(332.0)
        );
        assert_eq!(verdict.load_ok, Some(true));
        assert!(
            verdict
                .evidence
                .iter()
                .any(|line| line.starts_with("not raced: 7.10.0's operator stopped for good")),
            "{:#?}",
            verdict.evidence
        );
    }

    fn deployed(release: &str, accepted: bool) -> Fact {
        Fact::Deployed {
            release: release.into(),
            accepted,
            message: if accepted {
                String::new()
            } else {
                "denied request: upgrade-gate: ...".into()
            },
        }
    }

    fn helm_chain() -> Chain {
        Chain {
            deployer: Deployer::Helm,
            ..chain()
        }
    }

    /// Helm pushing 7.10.0 then 7.10.1 at once, the policy refusing 7.10.1
    /// until 7.10.0's upgrade completed.
    fn pushed() -> Vec<(i64, Fact)> {
        vec![
            (-100, migration(1)),
            (-100, migration(2)),
            (0, deployed("7.10.0", true)),
            (10, deployed("7.10.1", false)),
            (20, pod("op-a", "7.9.3", PodChange::Stopping)),
            (25, pod("op-b", "7.10.0", PodChange::Created)),
            (30, pod("op-b", "7.10.0", PodChange::Started)),
            (40, job("7.10.0", JobChange::Created)),
            (300, migration(3)),
            (300, migration(4)),
            (400, deployed("7.10.1", false)),
            (416, job("7.10.0", JobChange::Succeeded)),
            (418, app("7.10.0", true)),
            (428, deployed("7.10.1", true)),
            (429, pod("op-b", "7.10.0", PodChange::Stopping)),
            (430, pod("op-c", "7.10.1", PodChange::Created)),
            (440, pod("op-c", "7.10.1", PodChange::Started)),
            (500, migration(5)),
            (518, app("7.10.1", true)),
        ]
    }

    #[test]
    fn a_chain_pushed_by_a_deployer_and_refused_until_complete_is_held() {
        let verdict = judge(&events(pushed()), &helm_chain(), &checks());
        assert_eq!(verdict.verdict, RunVerdict::Held, "{:#?}", verdict.evidence);
        assert!(!verdict.damaged, "{:#?}", verdict.evidence);
        // Refused from the first push (+1.0 s) to the accepted one (+42.8 s).
        assert_eq!(
            verdict.pending_seconds.map(|s| (s * 10.0).round()),
            Some(418.0)
        );
        // The Job succeeded 40.6 s after the first push of 7.10.1.
        assert_eq!(
            verdict.load_margin_seconds.map(|s| (s * 10.0).round()),
            Some(406.0)
        );
        // Accepted 1.0 s after 7.10.0's upgrade completed (+41.8 s).
        assert_eq!(
            verdict.olm_reaction_seconds.map(|s| (s * 10.0).round()),
            Some(10.0)
        );
        // Under OLM the same facts do not end: no CSV, no gate.
        let verdict = judge(&events(pushed()), &chain(), &checks());
        assert!(verdict.damaged, "{:#?}", verdict.evidence);
    }

    #[test]
    fn olm_v1_refusing_the_next_release_until_complete_is_judged_as_a_deployer() {
        // Time zero is the ClusterExtension's switch to the next channel;
        // then OLM v1's revisions are the applies.
        let mut facts = pushed();
        facts.insert(
            0,
            (
                -5,
                Fact::ChannelSwitched {
                    channel: "7.10.x".into(),
                },
            ),
        );
        let v1 = Chain {
            deployer: Deployer::OlmV1,
            ..chain()
        };
        let verdict = judge(&events(facts), &v1, &checks());
        assert_eq!(verdict.verdict, RunVerdict::Held, "{:#?}", verdict.evidence);
        assert!(!verdict.damaged, "{:#?}", verdict.evidence);
        assert!(
            verdict
                .evidence
                .iter()
                .any(|line| line.contains("after OLM v1 first applied 7.10.1")),
            "{:#?}",
            verdict.evidence
        );
        assert_eq!(
            verdict.olm_reaction_seconds.map(|s| (s * 10.0).round()),
            Some(10.0)
        );
    }

    #[test]
    fn a_deployer_let_through_before_completion_races_and_a_missing_end_damages() {
        // No policy: 7.10.1 accepted at once, its pod before 7.10.0 completed.
        let mut facts: Vec<(i64, Fact)> = pushed()
            .into_iter()
            .filter(
                |(_, fact)| !matches!(fact, Fact::Deployed { release, .. } if release == "7.10.1"),
            )
            .collect();
        facts.push((10, deployed("7.10.1", true)));
        facts.push((35, pod("op-d", "7.10.1", PodChange::Created)));
        let verdict = judge(&events(facts), &helm_chain(), &checks());
        assert!(verdict.raced, "{:#?}", verdict.evidence);
        // The last release never applied: the chain did not end.
        let facts: Vec<(i64, Fact)> = pushed()
            .into_iter()
            .filter(|(_, fact)| !matches!(fact, Fact::Deployed { release, accepted: true, .. } if release == "7.10.1"))
            .collect();
        let verdict = judge(&events(facts), &helm_chain(), &checks());
        assert!(verdict.damaged, "{:#?}", verdict.evidence);
        assert!(
            verdict
                .evidence
                .iter()
                .any(|line| line.contains("release 7.10.1 applied by the deployer")),
            "{:#?}",
            verdict.evidence
        );
        // Applied, but its operator pod never seen: a hole.
        let facts: Vec<(i64, Fact)> = pushed()
            .into_iter()
            .filter(|(_, fact)| !matches!(fact, Fact::Pod { release, .. } if release == "7.10.1"))
            .collect();
        let verdict = judge(&events(facts), &helm_chain(), &checks());
        assert_eq!(
            verdict.verdict,
            RunVerdict::Inconclusive,
            "{:#?}",
            verdict.evidence
        );
    }

    /// A pipeline pushing 7.10.1 at once may replace 7.10.0 before its
    /// Deployment made a pod: no pod of it ever existed, and the run raced
    /// (not a hole in the record).
    #[test]
    fn a_release_replaced_before_its_pod_existed_raced() {
        let facts = vec![
            (-100, migration(1)),
            (-100, migration(2)),
            (0, deployed("7.10.0", true)),
            (11, deployed("7.10.1", true)),
            (12, pod("op-a", "7.9.3", PodChange::Stopping)),
            (16, pod("op-c", "7.10.1", PodChange::Created)),
            (28, pod("op-c", "7.10.1", PodChange::Started)),
            (190, job("7.10.1", JobChange::Created)),
            (290, migration(5)),
        ];
        let verdict = judge(&events(facts.clone()), &helm_chain(), &checks());
        assert_eq!(
            verdict.verdict,
            RunVerdict::Raced,
            "{:#?}",
            verdict.evidence
        );
        // The last release with no pod at all is still a hole.
        let facts: Vec<(i64, Fact)> = facts
            .into_iter()
            .filter(|(_, fact)| !matches!(fact, Fact::Pod { release, .. } if release == "7.10.1"))
            .collect();
        let verdict = judge(&events(facts), &helm_chain(), &checks());
        assert_eq!(
            verdict.verdict,
            RunVerdict::Inconclusive,
            "{:#?}",
            verdict.evidence
        );
    }

    #[test]
    fn the_feature_requests_race_is_judged_raced_not_necessarily_damaged() {
        // Gate off: 7.10.0 never reconciled (waiting for a lease), 7.10.1
        // replaced it and upgraded the schema on its own.
        let raced = vec![
            (
                0,
                Fact::ChannelSwitched {
                    channel: "7.10.x".into(),
                },
            ),
            (25, pod("op-b", "7.10.0", PodChange::Created)),
            (40, phase("7.10.0", "Succeeded", "InstallSucceeded")),
            (
                75,
                Fact::CsvCreated {
                    release: "7.10.1".into(),
                },
            ),
            (76, phase("7.10.1", "Pending", "")),
            (78, phase("7.10.1", "InstallReady", "")),
            (80, pod("op-b", "7.10.0", PodChange::Stopping)),
            (90, pod("op-c", "7.10.1", PodChange::Created)),
            (250, job("7.10.1", JobChange::Created)),
            (500, migration(3)),
            (500, migration(4)),
            (500, migration(5)),
            (510, phase("7.10.1", "Succeeded", "")),
            (518, app("7.10.1", true)),
            (523, gate_true("7.10.1")),
        ];
        let verdict = judge(&events(raced), &chain(), &checks());
        assert!(verdict.raced);
        assert_eq!(
            verdict.verdict,
            RunVerdict::Raced,
            "{:#?}",
            verdict.evidence
        );
        assert!(!verdict.damaged, "{:#?}", verdict.evidence);
        assert!(
            verdict
                .evidence
                .iter()
                .any(|line| line.contains("never created an upgrade Job"))
        );
        assert!(
            verdict
                .evidence
                .iter()
                .any(|line| line.starts_with("RACED"))
        );
        assert_eq!(verdict.load_ok, None);
    }

    #[test]
    fn a_restarted_operator_pod_of_the_same_release_is_no_race() {
        let mut facts = gated();
        facts.push((200, pod("op-b", "7.10.0", PodChange::Stopping)));
        facts.push((210, pod("op-b2", "7.10.0", PodChange::Created)));
        facts.push((421, pod("op-b2", "7.10.0", PodChange::Stopping)));
        let verdict = judge(&events(facts), &chain(), &checks());
        assert!(!verdict.raced, "{:#?}", verdict.evidence);
    }

    #[test]
    fn an_operator_stopped_before_verification_raced_even_after_its_job() {
        let mut facts: Vec<(i64, Fact)> = gated()
            .into_iter()
            .filter(|(_, fact)| !matches!(fact, Fact::AppStatus { database_release: Some(r), .. } if r == "7.10.0"))
            .collect();
        facts.push((440, app("7.10.0", true)));
        let verdict = judge(&events(facts), &chain(), &checks());
        assert!(verdict.raced, "{:#?}", verdict.evidence);
    }

    #[test]
    fn a_gate_opened_by_someone_else_is_not_a_verification() {
        let mut facts: Vec<(i64, Fact)> = gated()
            .into_iter()
            .filter(|(_, fact)| !matches!(fact, Fact::AppStatus { database_release: Some(r), .. } if r == "7.10.0"))
            .collect();
        facts.push((
            200,
            Fact::ConditionSpec {
                release: "7.10.0".into(),
                status: Some("True".into()),
                // What `upgrade-gate release` writes by default.
                reason: Some(VERIFIED_REASON.into()),
                message: Some("upgrade-gate release".into()),
                generation: 4,
            },
        ));
        let verdict = judge(&events(facts), &chain(), &checks());
        assert!(verdict.raced, "{:#?}", verdict.evidence);
    }

    #[test]
    fn a_small_load_is_said_never_silently() {
        let mut facts: Vec<(i64, Fact)> = gated()
            .into_iter()
            .filter(|(_, fact)| {
                !matches!(
                    fact,
                    Fact::Job {
                        change: JobChange::Succeeded,
                        ..
                    }
                )
            })
            .collect();
        facts.push((130, job("7.10.0", JobChange::Succeeded)));
        let verdict = judge(&events(facts), &chain(), &checks());
        assert_eq!(verdict.load_ok, Some(false));
        // Held only with the load check passed (the old report counted
        // this run as not raced).
        assert!(!verdict.raced);
        assert_eq!(verdict.verdict, RunVerdict::Inconclusive);
        assert!(
            verdict
                .evidence
                .iter()
                .any(|line| line.starts_with("LOAD TOO SMALL"))
        );
    }

    #[test]
    fn each_kind_of_damage_is_found_and_named() {
        type Damage = fn(&mut Vec<(i64, Fact)>, &mut EndChecks);
        let cases: [(&str, Damage); 9] = [
            ("schema not at target", |_, checks| {
                checks.schema = Err("V5 pending".into());
            }),
            ("cut off", |_, checks| {
                checks.history.pop();
            }),
            ("applied twice (history)", |facts, _| {
                facts.push((
                    510,
                    Fact::MigrationApplied {
                        version: 4,
                        name: "m4".into(),
                        applied_on: "2023-11-14T22:14:00Z".into(),
                    },
                ));
            }),
            ("applied twice (jobs)", |facts, _| {
                for pod in ["a", "b"] {
                    facts.push((
                        450,
                        Fact::PodExited {
                            pod: pod.into(),
                            kind: PodKind::Job,
                            release: "7.10.0".into(),
                            container: "app-db-upgrade".into(),
                            exit_code: 0,
                            reason: "Completed".into(),
                            message: r#"{"applied": [{"version": 4}]}"#.into(),
                        },
                    ));
                }
            }),
            ("out of order", |facts, _| {
                facts.retain(|(_, fact)| *fact != migration(3));
                facts.push((301, migration(3)));
            }),
            ("rolled back", |facts, _| {
                facts.push((305, Fact::MigrationRemoved { version: 4 }));
            }),
            ("not at the end", |facts, _| {
                facts.retain(|(_, fact)| *fact != gate_true("7.10.1"));
            }),
            ("data changed", |_, checks| {
                checks.data_after.executions.digest = "other".into();
            }),
            ("write lost", |_, checks| {
                checks.writer.lost.push(WriteDamage {
                    id: 1001,
                    acknowledged_at: at(300),
                    found: None,
                });
            }),
        ];
        for (case, damage) in cases {
            let mut facts = gated();
            let mut end = checks();
            damage(&mut facts, &mut end);
            let verdict = judge(&events(facts), &chain(), &end);
            assert!(verdict.damaged, "{case}: {:#?}", verdict.evidence);
            assert!(
                verdict
                    .evidence
                    .iter()
                    .any(|line| line.starts_with("DAMAGED")),
                "{case}"
            );
            assert!(!verdict.raced, "{case}");
        }
    }

    #[test]
    fn a_jump_over_the_middle_release_is_no_race() {
        let jump = Chain {
            middle: None,
            middle_schema: None,
            ..chain()
        };
        let facts = vec![
            (
                0,
                Fact::ChannelSwitched {
                    channel: "7.10.x".into(),
                },
            ),
            (
                30,
                Fact::CsvCreated {
                    release: "7.10.1".into(),
                },
            ),
            (40, phase("7.10.1", "Pending", "")),
            (42, phase("7.10.1", "InstallReady", "")),
            (45, pod("op-c", "7.10.1", PodChange::Created)),
            (200, migration(3)),
            (200, migration(4)),
            (200, migration(5)),
            (210, phase("7.10.1", "Succeeded", "")),
            (218, app("7.10.1", true)),
            (223, gate_true("7.10.1")),
        ];
        let verdict = judge(&events(facts), &jump, &checks());
        assert!(!verdict.raced);
        assert_eq!(verdict.verdict, RunVerdict::Held, "{:#?}", verdict.evidence);
        assert!(!verdict.damaged, "{:#?}", verdict.evidence);
        assert!(verdict.evidence[0].contains("went straight to 7.10.1"));
    }

    /// Every hole in a run's record makes it inconclusive, whether it
    /// looked held or raced; none is passed silently.
    #[test]
    fn every_hole_in_the_record_makes_the_run_inconclusive() {
        type Hole = fn(&mut Vec<(i64, Fact)>, &mut EndChecks);
        let holes: [(&str, Hole); 9] = [
            ("a failed watch", |facts, _| {
                facts.push((
                    100,
                    Fact::WatchError {
                        watch: "pods".into(),
                        error: "connection reset".into(),
                    },
                ));
            }),
            ("a relisted watch", |facts, _| {
                facts.push((
                    100,
                    Fact::WatchRelisted {
                        watch: "CSVs".into(),
                    },
                ));
            }),
            ("a failed history read", |facts, _| {
                facts.push((
                    100,
                    Fact::HistoryReadFailed {
                        error: "connecting: timed out".into(),
                    },
                ));
            }),
            ("an unreadable Job outcome", |facts, _| {
                facts.push((
                    417,
                    Fact::PodExited {
                        pod: "shop-db-7-10-0-1-x".into(),
                        kind: PodKind::Job,
                        release: "7.10.0".into(),
                        container: "app-db-upgrade".into(),
                        exit_code: 0,
                        reason: "Completed".into(),
                        message: "{\"applied\": [{\"versio".into(),
                    },
                ));
            }),
            ("the last release's pod never seen", |facts, _| {
                facts.retain(|(_, fact)| *fact != pod("op-c", "7.10.1", PodChange::Created));
            }),
            ("no write acknowledged after the rewrite", |_, checks| {
                checks
                    .writer
                    .acknowledged_in
                    .remove(&ExecutionsLayout::TypedColumns);
            }),
            (
                "an error of an unexpected kind met by the writer",
                |_, checks| {
                    checks.writer.failed.unexpected = 1;
                    checks
                        .writer
                        .unexpected
                        .push((at(300), "unexpected message from server".into()));
                },
            ),
            ("the load check not passed", |facts, _| {
                for (at, fact) in facts.iter_mut() {
                    if *fact == job("7.10.0", JobChange::Succeeded) {
                        *at = 90;
                    }
                }
                facts.sort_by_key(|(at, _)| *at);
            }),
            ("the load not measurable", |facts, _| {
                facts.retain(|(_, fact)| !matches!(fact, Fact::CsvCreated { .. }));
            }),
        ];
        for (hole, make) in holes {
            let mut facts = gated();
            let mut end = checks();
            make(&mut facts, &mut end);
            let verdict = judge(&events(facts), &chain(), &end);
            assert_eq!(
                verdict.verdict,
                RunVerdict::Inconclusive,
                "{hole}: {:#?}",
                verdict.evidence
            );
            assert!(!verdict.inconclusive.is_empty(), "{hole}");
            assert!(
                verdict
                    .evidence
                    .iter()
                    .any(|line| line.starts_with("INCONCLUSIVE")),
                "{hole}"
            );
        }
        // A race seen through a hole is not a clean race either.
        let mut raced: Vec<(i64, Fact)> = gated()
            .into_iter()
            .filter(|(_, fact)| *fact != pod("op-b", "7.10.0", PodChange::Stopping))
            .collect();
        raced.push((200, pod("op-b", "7.10.0", PodChange::Stopping)));
        let verdict = judge(&events(raced.clone()), &chain(), &checks());
        assert_eq!(
            verdict.verdict,
            RunVerdict::Raced,
            "{:#?}",
            verdict.evidence
        );
        raced.push((
            100,
            Fact::WatchRelisted {
                watch: "pods".into(),
            },
        ));
        let verdict = judge(&events(raced), &chain(), &checks());
        assert!(verdict.raced);
        assert_eq!(verdict.verdict, RunVerdict::Inconclusive);
    }

    #[test]
    fn the_writers_failures_are_told_by_cause_and_only_the_unexpected_is_a_hole() {
        let mut end = checks();
        end.writer.failed = WriteFailures {
            refused: 20,
            sql_errors: [("42703".to_owned(), 1)].into(),
            connections_lost: 2,
            unexpected: 0,
        };
        end.writer.unknown = 1;
        let verdict = judge(&events(gated()), &chain(), &end);
        assert_eq!(verdict.verdict, RunVerdict::Held, "{:#?}", verdict.evidence);
        assert!(!verdict.damaged);
        let told = verdict
            .evidence
            .iter()
            .find(|line| line.starts_with("writer:"))
            .expect("the writer's line");
        assert!(
            told.contains(
                "failed: 20 refused, 1 other SQL error (42703 ×1), 2 lost connections; 1 of unknown outcome"
            ),
            "{told}"
        );

        end.writer.failed.unexpected = 1;
        end.writer
            .unexpected
            .push((at(300), "no integrations to write executions of".into()));
        let verdict = judge(&events(gated()), &chain(), &end);
        assert_eq!(verdict.verdict, RunVerdict::Inconclusive);
        assert_eq!(
            verdict.inconclusive,
            [
                "+30.0 s: the writer met an error of an unexpected kind (no integrations to write executions of): neither refused, an SQL error nor a lost connection, so its counts by cause are not whole"
            ]
        );
    }

    #[test]
    fn a_watch_healed_before_time_zero_is_no_hole_and_one_still_broken_is() {
        let error = |at: i64| {
            (
                at,
                Fact::WatchError {
                    watch: "Apps".into(),
                    error: "too old resource version: 848 (887): Expired".into(),
                },
            )
        };
        let relisted = |at: i64, watch: &str| {
            (
                at,
                Fact::WatchRelisted {
                    watch: watch.into(),
                },
            )
        };
        // Lost and listed again during the set-up: held, as without it.
        let mut healed = gated();
        healed.extend([error(-50), relisted(-49, "Apps")]);
        let verdict = judge(&events(healed), &chain(), &checks());
        assert_eq!(verdict.verdict, RunVerdict::Held, "{:#?}", verdict.evidence);
        // Lost before zero, listed again only after it: a hole.
        let mut late = gated();
        late.extend([error(-50), relisted(5, "Apps")]);
        let verdict = judge(&events(late), &chain(), &checks());
        assert_eq!(
            verdict.verdict,
            RunVerdict::Inconclusive,
            "{:#?}",
            verdict.evidence
        );
        // Another watch's relist heals nothing.
        let mut other = gated();
        other.extend([error(-50), relisted(-49, "pods")]);
        let verdict = judge(&events(other), &chain(), &checks());
        assert_eq!(
            verdict.verdict,
            RunVerdict::Inconclusive,
            "{:#?}",
            verdict.evidence
        );
    }

    #[test]
    fn a_chain_waiting_for_a_person_at_its_last_release_has_stopped() {
        let gave_up = |phase: &str| Fact::AppStatus {
            app: "shop".into(),
            phase: "Degraded".into(),
            database_release: Some("7.10.1".into()),
            ready: false,
            upgrade: Some("7.9.3 -> 7.10.1 shop-db-7-10-1-1 (GaveUp)".into()),
            upgrade_phase: Some(phase.into()),
        };
        let mut facts = vec![
            (10, phase("7.10.1", "Succeeded", "InstallSucceeded")),
            (20, gave_up("Verifying")),
        ];
        assert_eq!(chain_stopped(&events(facts.clone()), &chain()), None);
        for waiting in ["GaveUp", "Refused"] {
            let mut stopped = facts.clone();
            stopped.push((30, gave_up(waiting)));
            let why = chain_stopped(&events(stopped), &chain())
                .unwrap_or_else(|| panic!("{waiting}: not stopped"));
            assert!(why.contains("waits for a person"), "{why}");
        }
        // Not while the last release is not the one running.
        facts.push((30, gave_up("GaveUp")));
        facts[0] = (
            10,
            phase("7.10.1", "Pending", "OperatorConditionNotUpgradeable"),
        );
        assert_eq!(chain_stopped(&events(facts), &chain()), None);
    }

    /// Under the deployers the policy holds, the last release is in place
    /// once it was applied (there is no CSV).
    #[test]
    fn a_pushed_chain_waiting_for_a_person_has_stopped_once_its_last_release_was_applied() {
        let gave_up = Fact::AppStatus {
            app: "shop".into(),
            phase: "Degraded".into(),
            database_release: Some("7.9.3".into()),
            ready: false,
            upgrade: Some("7.9.3 -> 7.10.1 shop-db-7-10-1-1 (GaveUp)".into()),
            upgrade_phase: Some("GaveUp".into()),
        };
        let applied = |accepted: bool| Fact::Deployed {
            release: "7.10.1".into(),
            accepted,
            message: String::new(),
        };
        for deployer in [Deployer::Helm, Deployer::OlmV1, Deployer::Kubectl] {
            let chain = Chain {
                deployer,
                ..chain()
            };
            let refused = events(vec![(10, applied(false)), (20, gave_up.clone())]);
            assert_eq!(chain_stopped(&refused, &chain), None, "{deployer:?}");
            let accepted = events(vec![(10, applied(true)), (20, gave_up.clone())]);
            let why = chain_stopped(&accepted, &chain)
                .unwrap_or_else(|| panic!("{deployer:?}: not stopped"));
            assert!(why.contains("waits for a person"), "{why}");
        }
    }

    /// After a fault the operator repaired, OLM may let the next release
    /// through only before, or within its reaction bound after, its status
    /// held the restored answer (the old check accepted any time before
    /// the gate was released again).
    #[test]
    fn a_pass_through_after_the_restored_status_counts_only_within_the_bound() {
        let copied = at(100);
        // (through, released, expected)
        let cases = [
            (None, None, AfterRestore::Held),
            (None, Some(at(400)), AfterRestore::Held),
            // After the operator released it: the normal end, held.
            (Some(at(410)), Some(at(400)), AfterRestore::Held),
            (
                Some(at(95)),
                None,
                AfterRestore::ThroughWithinBound { after: -0.5 },
            ),
            (
                Some(at(140)),
                Some(at(400)),
                AfterRestore::ThroughWithinBound { after: 4.0 },
            ),
            (
                Some(at(150)),
                Some(at(400)),
                AfterRestore::ThroughWithinBound { after: 5.0 },
            ),
            (
                Some(at(151)),
                Some(at(400)),
                AfterRestore::ThroughLate { after: 5.1 },
            ),
            (
                Some(at(300)),
                None,
                AfterRestore::ThroughLate { after: 20.0 },
            ),
        ];
        for (through, released, expected) in cases {
            let judged = match after_restore(copied, through, released, 5.0) {
                AfterRestore::ThroughWithinBound { after } => AfterRestore::ThroughWithinBound {
                    after: (after * 10.0).round() / 10.0,
                },
                AfterRestore::ThroughLate { after } => AfterRestore::ThroughLate {
                    after: (after * 10.0).round() / 10.0,
                },
                held => held,
            };
            assert_eq!(
                judged, expected,
                "through {through:?}, released {released:?}"
            );
        }
    }
}
