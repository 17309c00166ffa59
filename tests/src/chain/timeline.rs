//! The timeline of one chain run: every fact the runner observed (from
//! watches, the migration history, the writer) or caused (the channel
//! switch, a fault), each with the time this process saw it.
//!
//! Owns: the fact vocabulary, the shared, append-only event list the fact
//! watches and the writer push to, waiting on it with a deadline, and how
//! a fact reads to a person. Must not touch: the cluster or the database
//! (the fact watches in `watches` and the writer in `writer` observe).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use serde::Serialize;
use tokio::sync::watch;

use super::write_failures::WriteFailures;

/// What kind of pod a pod fact is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PodKind {
    /// A pod of the operator's Deployment (`app-operator`).
    Operator,
    /// A pod of a database upgrade Job.
    Job,
}

/// A change of a pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PodChange {
    /// First seen.
    Created,
    /// Its main container runs.
    Started,
    /// Condition `Ready` turned True.
    Ready,
    /// Deletion requested (`metadata.deletionTimestamp` set).
    Stopping,
    /// Gone from the API.
    Deleted,
}

/// A change of a Job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JobChange {
    Created,
    /// A pod of it runs (`status.active` ≥ 1) for the first time.
    Active,
    Succeeded,
    Failed,
    Deleted,
}

/// One observed or caused fact.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "fact", rename_all = "snake_case")]
pub enum Fact {
    /// The runner switched the Subscription's channel: time zero.
    ChannelSwitched {
        channel: String,
    },
    /// The runner subscribed to `channel` starting at `release` (nothing of
    /// the operator installed before): time zero.
    Subscribed {
        channel: String,
        release: String,
    },
    /// The runner switched the ClusterExtension to `channel` (OLM v1):
    /// time zero.
    ExtensionSwitched {
        extension: String,
        channel: String,
    },
    /// The runner moved Flux's source (the `ExternalArtifact` its
    /// Kustomization reads) to `release`, as a commit to the repository
    /// Flux follows would: the first move is time zero.
    SourceMoved {
        source: String,
        release: String,
    },
    /// Someone other than the runner asked Flux to reconcile the run's
    /// Kustomization now: a new `reconcile.fluxcd.io/requestedAt` on it
    /// (the operator's wake-up, once its upgrade is recorded complete).
    ReconcileRequested {
        kustomization: String,
        token: String,
    },
    /// The runner set up, under Flux, the check of upgrade-gate's shipped
    /// Flux health check (`manifests/gitops/flux-health.yaml`): Kustomization
    /// `kustomization` carries its `healthChecks` (the namespace's
    /// UpgradeRecord and the operator's Deployment) and
    /// `healthCheckExprs`, Kustomization `dependent` `dependsOn` it; both
    /// are created as soon as Flux applied the middle release (`run::flux`).
    HealthCheckSetUp {
        kustomization: String,
        dependent: String,
    },
    /// The `Ready` condition of a Kustomization of the health check
    /// changed (status or reason): kustomize-controller's verdict, its
    /// message included.
    KustomizationReady {
        kustomization: String,
        status: String,
        reason: String,
        message: String,
    },
    /// The runner did something to the chain (a fault, holding the lock...).
    Injected {
        what: String,
    },
    /// A deployer other than OLM v0 applied `release` of the operator:
    /// accepted, or not with `message` (the API server's answer: the
    /// admission policy's refusal only when it carries the policy's words,
    /// `chain::refusal`), as known when its command returned (Helm,
    /// kubectl), its Helm release's revision ended (OLM v1) or its
    /// Kustomization's status said how its try ended (Flux). Under Helm
    /// and kubectl the first one is time zero.
    Deployed {
        release: String,
        accepted: bool,
        message: String,
    },
    /// An operator's entry in the namespace's admission record
    /// (UpgradeRecord `upgrade-gate`, what the admission policy reads)
    /// changed: the release it runs and its upgrade's state
    /// (`InProgress`, `Complete`).
    AdmissionRecord {
        operator: String,
        release: String,
        state: String,
    },
    CsvCreated {
        release: String,
    },
    /// OLM failed InstallPlan `plan` (installing `csvs`) with `message`
    /// (`crate::install_plan`). `run_again: Some(n)`: only its update of a
    /// CRD every install of the package shares lost a race with another
    /// writer, and the runner set it back to `Installing` for OLM to
    /// execute again (the n-th time) — OLM's own retry, restarted: neither
    /// a fault of the chain nor anything the gate did. `None`: left failed.
    InstallPlanFailed {
        plan: String,
        csvs: Vec<String>,
        message: String,
        run_again: Option<u32>,
    },
    /// `status.phase`, `status.reason` or `status.message` changed (OLM
    /// writes each new evaluation that changes them).
    CsvPhase {
        release: String,
        phase: String,
        reason: String,
        message: String,
    },
    CsvDeleted {
        release: String,
    },
    ConditionCreated {
        release: String,
    },
    /// The `Upgradeable` entry of `spec.conditions` changed (`None`:
    /// absent), its message included: who wrote it (`upgrade-gate hold`,
    /// the operator, a release) shows there.
    ConditionSpec {
        release: String,
        status: Option<String>,
        reason: Option<String>,
        message: Option<String>,
        generation: i64,
    },
    /// The `Upgradeable` entry of `status.conditions` (OLM's copy) changed.
    ConditionStatus {
        release: String,
        status: Option<String>,
        reason: Option<String>,
        observed_generation: Option<i64>,
        generation: i64,
    },
    /// The `Upgradeable` entry of `spec.overrides` changed.
    ConditionOverride {
        release: String,
        status: Option<String>,
    },
    ConditionDeleted {
        release: String,
    },
    Job {
        job: String,
        release: String,
        change: JobChange,
    },
    Pod {
        pod: String,
        kind: PodKind,
        release: String,
        change: PodChange,
    },
    /// A container of the pod terminated; `message` is its termination
    /// message (an upgrade Job's outcome JSON).
    PodExited {
        pod: String,
        kind: PodKind,
        release: String,
        container: String,
        exit_code: i32,
        reason: String,
        message: String,
    },
    /// The App's status changed in what the judge reads.
    AppStatus {
        app: String,
        phase: String,
        database_release: Option<String>,
        ready: bool,
        upgrade: Option<String>,
        /// `status.upgrade.phase` (`GaveUp` and `Refused` wait for a person).
        upgrade_phase: Option<String>,
    },
    /// A row appeared in the migration history (`applied_on` as refinery
    /// wrote it).
    MigrationApplied {
        version: i64,
        name: String,
        applied_on: String,
    },
    /// A row of the history vanished or was rewritten.
    MigrationRemoved {
        version: i64,
    },
    /// The writer's first acknowledged write in a schema layout.
    WriterLayout {
        layout: String,
    },
    /// The writer's writes started to be refused: cancelled by its
    /// statement timeout or without their lock (a writer locked out).
    WriterRefused {
        error: String,
    },
    /// The writer's writes started to fail for another cause (an SQL
    /// error, the connection lost, an error of an unexpected kind).
    WriterFailed {
        cause: String,
        error: String,
    },
    /// Writes were acknowledged again after the failed ones, counted by
    /// cause (`refused`, `sql_errors`, `connections_lost`, `unexpected`).
    WriterResumed {
        #[serde(flatten)]
        failed: WriteFailures,
    },
    /// An update found no row for an execution whose write had been
    /// acknowledged: the row is gone.
    WriterMissing {
        id: i64,
    },
    /// A fact watch failed (it retries, resuming where it was):
    /// what changed meanwhile may have been missed.
    WatchError {
        watch: String,
        error: String,
    },
    /// A fact watch listed its objects again: a deletion (and
    /// any version) between its last event and the new list was missed.
    WatchRelisted {
        watch: String,
    },
    /// Reading the migration history failed (the first failure of a
    /// streak): a row that came and went meanwhile was missed.
    HistoryReadFailed {
        error: String,
    },
}

impl From<crate::install_plan::Seen> for Fact {
    fn from(seen: crate::install_plan::Seen) -> Self {
        Fact::InstallPlanFailed {
            plan: seen.plan,
            csvs: seen.csvs,
            message: seen.message,
            run_again: seen.run_again,
        }
    }
}

/// One fact and when it was seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub at: Timestamp,
    pub fact: Fact,
}

impl Event {
    /// Seconds from `zero` (negative before it).
    pub fn seconds_from(&self, zero: Timestamp) -> f64 {
        seconds_between(zero, self.at)
    }
}

/// Seconds from `from` to `to` (negative when `to` is earlier).
pub fn seconds_between(from: Timestamp, to: Timestamp) -> f64 {
    let nanos = to.as_nanosecond() - from.as_nanosecond();
    // Nanoseconds of a run fit an f64 exactly enough for a tenth.
    #[allow(clippy::cast_precision_loss)]
    let seconds = nanos as f64 / 1e9;
    seconds
}

/// `+12.3 s` from `zero`.
pub fn offset(zero: Timestamp, at: Timestamp) -> String {
    format!("{:+.1} s", seconds_between(zero, at))
}

impl fmt::Display for Fact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let csv = |release: &str| format!("CSV upgrade-gate.v{release}");
        let entry = |status: &Option<String>, reason: &Option<String>| match (status, reason) {
            (Some(status), Some(reason)) if !reason.is_empty() => {
                format!("Upgradeable={status} ({reason})")
            }
            (Some(status), _) => format!("Upgradeable={status}"),
            (None, _) => "no Upgradeable entry".to_owned(),
        };
        match self {
            Fact::ChannelSwitched { channel } => {
                write!(f, "Subscription switched to channel {channel}")
            }
            Fact::Subscribed { channel, release } => write!(
                f,
                "Subscription created on channel {channel}, starting at {}",
                csv(release)
            ),
            Fact::ExtensionSwitched { extension, channel } => {
                write!(
                    f,
                    "ClusterExtension {extension} switched to channel {channel}"
                )
            }
            Fact::SourceMoved { source, release } => write!(
                f,
                "Flux's source (ExternalArtifact {source}) moved to release {release}"
            ),
            Fact::ReconcileRequested {
                kustomization,
                token,
            } => write!(
                f,
                "Kustomization {kustomization}: a reconcile requested (reconcile.fluxcd.io/requestedAt: {token})"
            ),
            Fact::HealthCheckSetUp {
                kustomization,
                dependent,
            } => write!(
                f,
                "runner: Flux's health check set up: Kustomization {kustomization} (the shipped healthCheckExprs on the UpgradeRecord), Kustomization {dependent} dependsOn it"
            ),
            Fact::KustomizationReady {
                kustomization,
                status,
                reason,
                message,
            } => write!(
                f,
                "Kustomization {kustomization}: Ready={status} ({reason}): {message}"
            ),
            Fact::Injected { what } => write!(f, "runner: {what}"),
            Fact::Deployed {
                release,
                accepted: true,
                ..
            } => write!(f, "the deployer applied release {release}"),
            Fact::Deployed {
                release, message, ..
            } => match super::refusal::failure(message) {
                super::refusal::Failure::Policy => write!(
                    f,
                    "the deployer's apply of release {release} refused by the admission policy: {}",
                    crate::policy_in_force::reason(message)
                ),
                super::refusal::Failure::Other(cause) => write!(
                    f,
                    "the deployer's apply of release {release} failed ({}, not the admission policy): {message}",
                    cause.name()
                ),
            },
            Fact::AdmissionRecord {
                operator,
                release,
                state,
            } => write!(
                f,
                "admission record: {operator} runs release {release}, its upgrade {state}"
            ),
            Fact::CsvCreated { release } => write!(f, "{} created", csv(release)),
            Fact::CsvPhase {
                release,
                phase,
                reason,
                ..
            } if reason.is_empty() => write!(f, "{} {phase}", csv(release)),
            Fact::CsvPhase {
                release,
                phase,
                reason,
                ..
            } => write!(f, "{} {phase} ({reason})", csv(release)),
            Fact::CsvDeleted { release } => write!(f, "{} deleted", csv(release)),
            Fact::InstallPlanFailed {
                plan,
                csvs,
                message,
                run_again,
            } => write!(
                f,
                "{}",
                crate::install_plan::Seen {
                    plan: plan.clone(),
                    csvs: csvs.clone(),
                    message: message.clone(),
                    run_again: *run_again,
                }
            ),
            Fact::ConditionCreated { release } => {
                write!(f, "OperatorCondition of {release} created")
            }
            Fact::ConditionSpec {
                release,
                status,
                reason,
                generation,
                ..
            } => write!(
                f,
                "{release}'s OperatorCondition spec: {} (generation {generation})",
                entry(status, reason)
            ),
            Fact::ConditionStatus {
                release,
                status,
                reason,
                observed_generation,
                generation,
            } => write!(
                f,
                "{release}'s OperatorCondition status (OLM's copy): {} at generation {}/{generation}",
                entry(status, reason),
                observed_generation.map_or_else(|| "-".to_owned(), |g| g.to_string())
            ),
            Fact::ConditionOverride { release, status } => write!(
                f,
                "{release}'s OperatorCondition override: {}",
                entry(status, &None)
            ),
            Fact::ConditionDeleted { release } => {
                write!(f, "OperatorCondition of {release} deleted")
            }
            Fact::Job {
                job,
                release,
                change,
            } => {
                let what = match change {
                    JobChange::Created => "created",
                    JobChange::Active => "running",
                    JobChange::Succeeded => "succeeded",
                    JobChange::Failed => "failed",
                    JobChange::Deleted => "deleted",
                };
                write!(f, "{release}'s upgrade Job {job} {what}")
            }
            Fact::Pod {
                pod,
                kind,
                release,
                change,
            } => {
                let what = match change {
                    PodChange::Created => "created",
                    PodChange::Started => "started",
                    PodChange::Ready => "ready",
                    PodChange::Stopping => "stopping",
                    PodChange::Deleted => "deleted",
                };
                write!(f, "{} {pod} {what}", pod_label(*kind, release))
            }
            Fact::PodExited {
                pod,
                kind,
                release,
                container,
                exit_code,
                reason,
                ..
            } => write!(
                f,
                "{} {pod}: container {container} exited {exit_code} ({reason})",
                pod_label(*kind, release)
            ),
            Fact::AppStatus {
                app,
                phase,
                database_release,
                ready,
                upgrade,
                ..
            } => {
                write!(
                    f,
                    "App {app}: {phase}, database at {}, Ready={}",
                    database_release.as_deref().unwrap_or("-"),
                    if *ready { "True" } else { "False" }
                )?;
                if let Some(upgrade) = upgrade {
                    write!(f, ", upgrade {upgrade}")?;
                }
                Ok(())
            }
            Fact::MigrationApplied { version, name, .. } => {
                write!(f, "migration V{version} {name} committed")
            }
            Fact::MigrationRemoved { version } => {
                write!(f, "migration V{version} left the history")
            }
            Fact::WriterLayout { layout } => {
                write!(f, "writer: first write acknowledged in the {layout} layout")
            }
            Fact::WriterRefused { error } => write!(f, "writer: writes refused ({error})"),
            Fact::WriterFailed { cause, error } => {
                write!(f, "writer: writes failing, {cause} ({error})")
            }
            Fact::WriterResumed { failed } => {
                write!(f, "writer: writes acknowledged again after {failed}")
            }
            Fact::WriterMissing { id } => write!(
                f,
                "writer: execution {id}, acknowledged before, is gone (its update found no row)"
            ),
            Fact::WatchError { watch, error } => {
                write!(f, "fact watches: the watch of {watch} failed ({error})")
            }
            Fact::WatchRelisted { watch } => {
                write!(f, "fact watches: the watch of {watch} listed again")
            }
            Fact::HistoryReadFailed { error } => {
                write!(
                    f,
                    "fact watches: reading the migration history failed ({error})"
                )
            }
        }
    }
}

fn pod_label(kind: PodKind, release: &str) -> String {
    match kind {
        PodKind::Operator => format!("{release}'s operator pod"),
        PodKind::Job => format!("{release}'s Job pod"),
    }
}

/// The shared event list of one run: the fact watches push, anyone may read or
/// wait. Cheap to clone.
#[derive(Clone)]
pub struct Timeline {
    events: Arc<watch::Sender<Vec<Event>>>,
}

impl Default for Timeline {
    fn default() -> Self {
        Self::new()
    }
}

impl Timeline {
    pub fn new() -> Self {
        Self {
            events: Arc::new(watch::Sender::new(Vec::new())),
        }
    }

    /// Records `fact` as seen now.
    pub fn push(&self, fact: Fact) {
        self.push_at(Timestamp::now(), fact);
    }

    /// Records `fact` as seen at `at`, keeping the list in time order.
    pub fn push_at(&self, at: Timestamp, fact: Fact) {
        self.events.send_modify(|events| {
            let position = events.partition_point(|event| event.at <= at);
            events.insert(position, Event { at, fact });
        });
    }

    /// Every event so far, in time order.
    pub fn snapshot(&self) -> Vec<Event> {
        self.events.borrow().clone()
    }

    /// A receiver that is notified of every push (for live narration).
    pub fn subscribe(&self) -> watch::Receiver<Vec<Event>> {
        self.events.subscribe()
    }

    /// Waits until `find` answers `Some` for the events so far (asked again
    /// on every push). `Err` carries the newest events after `timeout`.
    pub async fn wait_for<T>(
        &self,
        timeout: Duration,
        mut find: impl FnMut(&[Event]) -> Option<T>,
    ) -> Result<T, TimedOut> {
        let mut receiver = self.events.subscribe();
        let mut found = None;
        let outcome = tokio::time::timeout(
            timeout,
            receiver.wait_for(|events| {
                found = find(events);
                found.is_some()
            }),
        )
        .await;
        match (outcome, found) {
            (Ok(Ok(_)), Some(found)) => Ok(found),
            _ => Err(TimedOut {
                after: timeout,
                last: self
                    .snapshot()
                    .iter()
                    .rev()
                    .take(8)
                    .rev()
                    .map(|event| format!("{} {}", event.at, event.fact))
                    .collect(),
            }),
        }
    }
}

/// A wait on the timeline passed its deadline.
#[derive(Debug, thiserror::Error)]
#[error("nothing matched within {after:?}; the newest events:\n{}", last.join("\n"))]
pub struct TimedOut {
    pub after: Duration,
    pub last: Vec<String>,
}

/// The first event matching `predicate`.
pub fn first(events: &[Event], predicate: impl Fn(&Fact) -> bool) -> Option<&Event> {
    events.iter().find(|event| predicate(&event.fact))
}

/// When the first fact after `since` matching `predicate` was seen.
pub fn first_after(
    events: &[Event],
    since: Timestamp,
    predicate: impl Fn(&Fact) -> bool,
) -> Option<Timestamp> {
    events
        .iter()
        .find(|event| event.at > since && predicate(&event.fact))
        .map(|event| event.at)
}

/// The last event matching `predicate`.
pub fn last(events: &[Event], predicate: impl Fn(&Fact) -> bool) -> Option<&Event> {
    events.iter().rev().find(|event| predicate(&event.fact))
}

/// Time zero of a run: when the channel was switched (the Subscription's
/// or the ClusterExtension's), the Subscription starting at the middle
/// release created, Flux's source first moved, or the deployer first
/// applied a release.
pub fn zero_at(events: &[Event]) -> Option<Timestamp> {
    first(events, |fact| {
        matches!(
            fact,
            Fact::ChannelSwitched { .. }
                | Fact::ExtensionSwitched { .. }
                | Fact::Subscribed { .. }
                | Fact::SourceMoved { .. }
                | Fact::Deployed { .. }
        )
    })
    .map(|event| event.at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + seconds).expect("valid")
    }

    #[test]
    fn events_stay_in_time_order_whatever_the_push_order() {
        let timeline = Timeline::new();
        timeline.push_at(
            at(5),
            Fact::CsvCreated {
                release: "b".into(),
            },
        );
        timeline.push_at(
            at(1),
            Fact::CsvCreated {
                release: "a".into(),
            },
        );
        timeline.push_at(
            at(5),
            Fact::CsvCreated {
                release: "c".into(),
            },
        );
        let releases: Vec<String> = timeline
            .snapshot()
            .into_iter()
            .map(|event| match event.fact {
                Fact::CsvCreated { release } => release,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(releases, ["a", "b", "c"]);
    }

    #[test]
    fn time_zero_is_the_switch_or_the_subscription_at_the_middle_release() {
        let event = |second, fact| Event {
            at: at(second),
            fact,
        };
        let created = event(
            1,
            Fact::CsvCreated {
                release: "7.9.3".into(),
            },
        );
        let switched = event(
            4,
            Fact::ChannelSwitched {
                channel: "7.10.x".into(),
            },
        );
        let subscribed = event(
            2,
            Fact::Subscribed {
                channel: "7.10.x".into(),
                release: "7.10.0".into(),
            },
        );
        assert_eq!(zero_at(&[created.clone(), switched]), Some(at(4)));
        assert_eq!(zero_at(&[created.clone(), subscribed.clone()]), Some(at(2)));
        assert_eq!(zero_at(&[created]), None);
        assert_eq!(
            subscribed.fact.to_string(),
            "Subscription created on channel 7.10.x, starting at CSV upgrade-gate.v7.10.0"
        );
    }

    #[test]
    fn offsets_are_signed_tenths() {
        assert_eq!(offset(at(10), at(22)), "+12.0 s");
        assert_eq!(offset(at(10), at(7)), "-3.0 s");
    }

    #[tokio::test]
    async fn a_wait_returns_what_a_later_push_matched_or_times_out() {
        let timeline = Timeline::new();
        let pusher = timeline.clone();
        tokio::spawn(async move {
            pusher.push(Fact::CsvCreated {
                release: "7.10.1".into(),
            });
        });
        let found = timeline
            .wait_for(Duration::from_secs(5), |events| {
                first(events, |fact| matches!(fact, Fact::CsvCreated { .. }))
                    .map(|event| event.fact.to_string())
            })
            .await
            .expect("found");
        assert_eq!(found, "CSV upgrade-gate.v7.10.1 created");
        let missing = timeline
            .wait_for(Duration::from_millis(50), |events| {
                first(events, |fact| matches!(fact, Fact::CsvDeleted { .. })).map(|event| event.at)
            })
            .await;
        assert!(missing.is_err());
    }

    #[test]
    fn facts_serialize_with_their_tag() {
        let fact = Fact::Job {
            job: "shop-db-7-10-0-1".into(),
            release: "7.10.0".into(),
            change: JobChange::Succeeded,
        };
        assert_eq!(
            serde_json::to_value(&fact).expect("json"),
            serde_json::json!({"fact": "job", "job": "shop-db-7-10-0-1", "release": "7.10.0", "change": "succeeded"})
        );
    }

    #[test]
    fn the_writers_failures_read_and_serialize_by_cause() {
        let resumed = Fact::WriterResumed {
            failed: WriteFailures {
                refused: 12,
                sql_errors: [("42703".to_owned(), 1)].into(),
                connections_lost: 2,
                unexpected: 0,
            },
        };
        assert_eq!(
            resumed.to_string(),
            "writer: writes acknowledged again after 12 refused, 1 other SQL error (42703 ×1), 2 lost connections"
        );
        // `refused` stays where the readers of the timeline found it.
        assert_eq!(
            serde_json::to_value(&resumed).expect("json"),
            serde_json::json!({"fact": "writer_resumed", "refused": 12, "sql_errors": {"42703": 1},
                               "connections_lost": 2, "unexpected": 0})
        );
        let failing = Fact::WriterFailed {
            cause: "connection lost".into(),
            error: "connection closed".into(),
        };
        assert_eq!(
            failing.to_string(),
            "writer: writes failing, connection lost (connection closed)"
        );
    }
}
