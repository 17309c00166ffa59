//! The fact watches of a chain run: a watch per kind of object in the run's
//! namespace (CSVs, OperatorConditions, Jobs, pods, Apps; under OLM v1 its
//! Helm release's revisions too, under Flux its Kustomization), each version
//! turned into facts by `facts` as it arrives, and a poll of the database's
//! migration history, all pushing to the run's timeline.
//!
//! Owns: the watches ([`ObjectHistory`]) and the history poll
//! ([`HistoryPoll`]), stopped when [`FactWatches`] drops, and the facts of
//! their own gaps (a failed or relisted watch, a failed history read),
//! which make a run's judgement inconclusive instead of silently
//! incomplete; the poll's pause for a caller that takes the database down
//! (begun once a read in flight has ended). Must not touch: anything it
//! watches (read-only).

use std::any::Any;
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::task::JoinHandle;
use tokio_postgres::NoTls;
use upgrade_gate::operator_condition::OperatorCondition;

use super::facts;
use super::judge::HistoryRow;
use super::timeline::{Fact, Timeline};
use crate::object_history::{Gap, ObjectHistory, WatchGap};

/// How often the migration history is read.
const HISTORY_POLL: Duration = Duration::from_millis(250);
/// How long [`HistoryPoll::pause`] waits for a read in flight to end.
const READ_IN_FLIGHT_WITHIN: Duration = Duration::from_secs(60);

/// The API of a kind OLM or the App CRD serves, as dynamic objects.
pub fn dynamic_api(
    client: &Client,
    namespace: &str,
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(group, version, kind);
    Api::namespaced_with(
        client.clone(),
        namespace,
        &ApiResource::from_gvk_with_plural(&gvk, plural),
    )
}

/// ClusterServiceVersions in `namespace`.
pub fn csv_api(client: &Client, namespace: &str) -> Api<DynamicObject> {
    dynamic_api(
        client,
        namespace,
        "operators.coreos.com",
        "v1alpha1",
        "ClusterServiceVersion",
        "clusterserviceversions",
    )
}

/// Apps in `namespace`.
pub fn app_api(client: &Client, namespace: &str) -> Api<DynamicObject> {
    dynamic_api(
        client,
        namespace,
        "upgrade-gate.dev",
        "v1alpha1",
        "App",
        "apps",
    )
}

/// The running watches (and the history poll); dropping them stops every watch and the poll.
pub struct FactWatches {
    _histories: Vec<Box<dyn Any + Send + Sync>>,
    tasks: Vec<JoinHandle<()>>,
    history: HistoryPoll,
    /// The names of its watches, as their gap facts name them.
    watches: Vec<&'static str>,
}

/// The poll of a database's migration history ([`HISTORY_POLL`]): each
/// read's changes are facts ([`history_facts`]), the first failed read of
/// a streak a [`Fact::HistoryReadFailed`]. Stops on drop.
pub struct HistoryPoll {
    task: JoinHandle<()>,
    /// Held by the poll while it reads, and by a pause for as long as it
    /// lasts.
    reading: Arc<tokio::sync::Mutex<()>>,
}

impl Drop for HistoryPoll {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl HistoryPoll {
    /// Starts reading the history of `database_url` into `timeline`.
    pub fn start(database_url: &str, timeline: &Timeline) -> Self {
        let reading = Arc::new(tokio::sync::Mutex::new(()));
        let task = tokio::spawn(poll_history(
            database_url.to_owned(),
            timeline.clone(),
            reading.clone(),
        ));
        Self { task, reading }
    }

    /// Stops reading until the guard drops, once a read in flight has
    /// ended: no read straddles what the caller does meanwhile (a server
    /// it takes down would fail that read, a gap in the record). Panics
    /// when a read stays in flight for [`READ_IN_FLIGHT_WITHIN`].
    pub async fn pause(&self) -> HistoryPaused {
        match tokio::time::timeout(READ_IN_FLIGHT_WITHIN, self.reading.clone().lock_owned()).await {
            Ok(guard) => HistoryPaused { _reading: guard },
            Err(_) => panic!(
                "a read of the migration history was in flight for {READ_IN_FLIGHT_WITHIN:?}: the poll cannot be paused"
            ),
        }
    }
}

/// The history poll paused ([`HistoryPoll::pause`]) until this drops.
pub struct HistoryPaused {
    _reading: tokio::sync::OwnedMutexGuard<()>,
}

impl Drop for FactWatches {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl FactWatches {
    /// Starts every watch of `namespace` but the Apps' (returns once each
    /// has listed, so no later change is missed) and the poll of
    /// `database_url`'s history.
    pub async fn start(
        client: &Client,
        namespace: &str,
        database_url: &str,
        timeline: &Timeline,
    ) -> Self {
        let mut fact_watches = FactWatches {
            _histories: Vec::new(),
            tasks: Vec::new(),
            history: HistoryPoll::start(database_url, timeline),
            watches: vec!["OperatorConditions"],
        };
        let as_json = |derive: fn(Option<&Value>, &Value, bool) -> Vec<Fact>| {
            move |previous: Option<&Value>, current: &Value, deleted: bool| {
                derive(previous, current, deleted)
            }
        };
        fact_watches
            .watch(
                "CSVs",
                csv_api(client, namespace),
                timeline,
                as_json(facts::csv_facts),
            )
            .await;
        fact_watches
            .watch(
                "Jobs",
                Api::<Job>::namespaced(client.clone(), namespace),
                timeline,
                as_json(facts::job_facts),
            )
            .await;
        fact_watches
            .watch(
                "pods",
                Api::<Pod>::namespaced(client.clone(), namespace),
                timeline,
                as_json(facts::pod_facts),
            )
            .await;
        let history = ObjectHistory::record(
            "OperatorConditions",
            Api::<OperatorCondition>::namespaced(client.clone(), namespace),
            watcher::Config::default(),
        )
        .await;
        fact_watches.tasks.push(tokio::spawn(follow_typed(
            history.follow(),
            timeline.clone(),
        )));
        fact_watches.tasks.push(tokio::spawn(follow_gaps(
            "OperatorConditions",
            history.gaps(),
            timeline.clone(),
        )));
        fact_watches._histories.push(Box::new(history));
        fact_watches
    }

    /// The names of the watches running, as their gap facts
    /// ([`Fact::WatchError`], [`Fact::WatchRelisted`]) name them.
    pub fn watches(&self) -> Vec<String> {
        self.watches.iter().map(|&watch| watch.to_owned()).collect()
    }

    /// Stops reading the migration history until the guard drops, once a
    /// read in flight has ended ([`HistoryPoll::pause`]), for a caller that
    /// takes the database's server down on purpose: reads can only fail
    /// then, and each failure would be a gap in the record. The caller
    /// answers for the window: the history cannot change in it unseen (the
    /// server is down, or the one writer of the history is held). The
    /// first read after it reports what changed meanwhile, as between any
    /// two reads.
    pub async fn pause_history(&self) -> HistoryPaused {
        self.history.pause().await
    }

    /// Starts watching the Apps of `namespace`: once the first release is
    /// installed, since its bundle brings the App CRD.
    pub async fn watch_apps(&mut self, client: &Client, namespace: &str, timeline: &Timeline) {
        self.watch(
            "Apps",
            app_api(client, namespace),
            timeline,
            facts::app_facts,
        )
        .await;
    }

    /// Starts watching the namespace's admission record (UpgradeRecord
    /// `upgrade-gate`): each operator entry's release and state is a
    /// [`Fact::AdmissionRecord`]. Needs the record's CRD installed.
    pub async fn watch_admission_record(
        &mut self,
        client: &Client,
        namespace: &str,
        timeline: &Timeline,
    ) {
        self.watch(
            facts::ADMISSION_RECORD,
            dynamic_api(
                client,
                namespace,
                "upgrade-gate.dev",
                "v1alpha1",
                "UpgradeRecord",
                "upgraderecords",
            ),
            timeline,
            facts::admission_record_facts,
        )
        .await;
    }

    /// Starts watching the revisions of OLM v1's Helm release of
    /// ClusterExtension `extension` (Secrets in operator-controller's
    /// namespace, read with `admin`): each applied or refused release is a
    /// [`Fact::Deployed`] ([`facts::olm_v1_release_facts`]). Revisions
    /// already at their end when it starts answer nothing.
    pub async fn watch_olm_v1_releases(
        &mut self,
        admin: &Client,
        system_namespace: &str,
        extension: &str,
        timeline: &Timeline,
    ) {
        self.watch_with(
            facts::OLM_V1_RELEASES,
            Api::<Secret>::namespaced(admin.clone(), system_namespace),
            watcher::Config::default().labels(&format!(
                "owner=operator-controller,type=index,name={extension}"
            )),
            timeline,
            facts::olm_v1_release_facts,
        )
        .await;
    }

    /// Starts watching Flux's Kustomization `name` of `namespace` (read
    /// with `admin`): each of its tries that ended is a [`Fact::Deployed`]
    /// ([`facts::flux_kustomization_facts`]). Its state when it starts
    /// answers nothing.
    pub async fn watch_flux_kustomization(
        &mut self,
        admin: &Client,
        namespace: &str,
        name: &str,
        timeline: &Timeline,
    ) {
        self.watch_with(
            facts::FLUX_KUSTOMIZATION,
            super::run::flux::kustomizations(admin, namespace),
            watcher::Config::default().fields(&format!("metadata.name={name}")),
            timeline,
            facts::flux_kustomization_facts,
        )
        .await;
    }

    /// Records from now on the `Ready` condition of the Kustomizations in
    /// `namespace` labelled `label` (`key=value`): Flux's health check of a
    /// run ([`facts::kustomization_ready_facts`]).
    pub async fn watch_flux_health(
        &mut self,
        admin: &Client,
        namespace: &str,
        label: &str,
        timeline: &Timeline,
    ) {
        self.watch_with(
            facts::FLUX_HEALTH_KUSTOMIZATIONS,
            super::run::flux::kustomizations(admin, namespace),
            watcher::Config::default().labels(label),
            timeline,
            facts::kustomization_ready_facts,
        )
        .await;
    }

    async fn watch<K>(
        &mut self,
        what: &'static str,
        api: Api<K>,
        timeline: &Timeline,
        derive: impl Fn(Option<&Value>, &Value, bool) -> Vec<Fact> + Send + 'static,
    ) where
        K: Resource + Clone + DeserializeOwned + Serialize + Debug + Send + Sync + 'static,
    {
        self.watch_with(what, api, watcher::Config::default(), timeline, derive)
            .await;
    }

    async fn watch_with<K>(
        &mut self,
        what: &'static str,
        api: Api<K>,
        config: watcher::Config,
        timeline: &Timeline,
        derive: impl Fn(Option<&Value>, &Value, bool) -> Vec<Fact> + Send + 'static,
    ) where
        K: Resource + Clone + DeserializeOwned + Serialize + Debug + Send + Sync + 'static,
    {
        let history = ObjectHistory::record(what, api, config).await;
        self.watches.push(what);
        self.tasks.push(tokio::spawn(follow_gaps(
            what,
            history.gaps(),
            timeline.clone(),
        )));
        let receiver = history.follow();
        let timeline = timeline.clone();
        self.tasks.push(tokio::spawn(async move {
            follow(
                receiver,
                timeline,
                |object: &K| serde_json::to_value(object).unwrap_or(Value::Null),
                derive,
            )
            .await;
        }));
        self._histories.push(Box::new(history));
    }
}

/// Turns each new version into facts, against the previous version of the
/// same object (by uid: a recreated object starts afresh).
async fn follow<K, T>(
    mut receiver: tokio::sync::watch::Receiver<Vec<crate::object_history::Observed<K>>>,
    timeline: Timeline,
    convert: impl Fn(&K) -> T,
    derive: impl Fn(Option<&T>, &T, bool) -> Vec<Fact>,
) where
    K: Resource + Clone,
{
    let mut done = 0;
    let mut last: HashMap<String, T> = HashMap::new();
    loop {
        let new: Vec<crate::object_history::Observed<K>> = {
            let records = receiver.borrow_and_update();
            records[done.min(records.len())..].to_vec()
        };
        done += new.len();
        for record in new {
            let key = record
                .object
                .uid()
                .unwrap_or_else(|| record.object.name_any());
            let current = convert(&record.object);
            for fact in derive(last.get(&key), &current, record.deleted) {
                timeline.push_at(record.at, fact);
            }
            if record.deleted {
                last.remove(&key);
            } else {
                last.insert(key, current);
            }
        }
        if receiver.changed().await.is_err() {
            return;
        }
    }
}

/// Turns each gap of a watch into a fact.
async fn follow_gaps(
    what: &'static str,
    mut receiver: tokio::sync::watch::Receiver<Vec<WatchGap>>,
    timeline: Timeline,
) {
    let mut done = 0;
    loop {
        let new: Vec<WatchGap> = {
            let gaps = receiver.borrow_and_update();
            gaps[done.min(gaps.len())..].to_vec()
        };
        done += new.len();
        for WatchGap { at, gap } in new {
            let watch = what.to_owned();
            timeline.push_at(
                at,
                match gap {
                    Gap::Error(error) => Fact::WatchError { watch, error },
                    Gap::Relisted => Fact::WatchRelisted { watch },
                },
            );
        }
        if receiver.changed().await.is_err() {
            return;
        }
    }
}

async fn follow_typed(
    receiver: tokio::sync::watch::Receiver<Vec<crate::object_history::Observed<OperatorCondition>>>,
    timeline: Timeline,
) {
    follow(receiver, timeline, Clone::clone, facts::condition_facts).await;
}

/// Reads the migration history once (empty when there is no table yet).
pub async fn read_history(
    client: &tokio_postgres::Client,
) -> Result<Vec<HistoryRow>, tokio_postgres::Error> {
    let exists: bool = client
        .query_one(
            "SELECT to_regclass('public.refinery_schema_history') IS NOT NULL",
            &[],
        )
        .await?
        .get(0);
    if !exists {
        return Ok(Vec::new());
    }
    let rows = client
        .query(
            "SELECT version::int8, coalesce(name, ''), coalesce(applied_on, '') \
             FROM refinery_schema_history ORDER BY version",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| HistoryRow {
            version: row.get(0),
            name: row.get(1),
            applied_on: row.get(2),
        })
        .collect())
}

/// The facts between two reads of the history.
pub fn history_facts(before: &[HistoryRow], now: &[HistoryRow]) -> Vec<Fact> {
    let mut facts = Vec::new();
    for row in before {
        if !now.contains(row) {
            facts.push(Fact::MigrationRemoved {
                version: row.version,
            });
        }
    }
    for row in now {
        if !before.contains(row) {
            facts.push(Fact::MigrationApplied {
                version: row.version,
                name: row.name.clone(),
                applied_on: row.applied_on.clone(),
            });
        }
    }
    facts
}

async fn poll_history(url: String, timeline: Timeline, reading: Arc<tokio::sync::Mutex<()>>) {
    let mut seen: Vec<HistoryRow> = Vec::new();
    let mut session: Option<tokio_postgres::Client> = None;
    let mut failing = false;
    let mut ticks = tokio::time::interval(HISTORY_POLL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        // Paused: no read until the pause ends.
        let Ok(_reading) = reading.try_lock() else {
            continue;
        };
        let read = read_once(&url, &mut session).await;
        match read {
            Ok(now) => {
                failing = false;
                for fact in history_facts(&seen, &now) {
                    timeline.push(fact);
                }
                seen = now;
            }
            Err(error) => {
                // One fact per streak: the gap, not each tick of it.
                if !failing {
                    timeline.push(Fact::HistoryReadFailed { error });
                }
                failing = true;
            }
        }
    }
}

/// One read of the history on the poll's session (opened when needed). A
/// session the server ended since the last read (a restart) is opened
/// again and the read made on the new one: a stale session is no gap.
async fn read_once(
    url: &str,
    session: &mut Option<tokio_postgres::Client>,
) -> Result<Vec<HistoryRow>, String> {
    let reused = session.as_ref().is_some_and(|client| !client.is_closed());
    match read_on(url, session).await {
        Err(error) if reused && error.is_closed() => {
            *session = None;
            read_on(url, session).await
        }
        read => read,
    }
    .map_err(|error| format!("reading: {}", describe(&error)))
}

/// An error with what the server said (tokio-postgres prints a server's
/// error as "db error" alone): its severity, SQLSTATE and message.
fn describe(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!(
            "{error}: {} {}: {}",
            db.severity(),
            db.code().code(),
            db.message()
        ),
        None => match std::error::Error::source(error) {
            Some(cause) => format!("{error}: {cause}"),
            None => error.to_string(),
        },
    }
}

async fn read_on(
    url: &str,
    session: &mut Option<tokio_postgres::Client>,
) -> Result<Vec<HistoryRow>, tokio_postgres::Error> {
    let client = match session.take() {
        Some(client) if !client.is_closed() => session.insert(client),
        _ => {
            let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
            tokio::spawn(connection);
            session.insert(client)
        }
    };
    read_history(client).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(version: i64, applied_on: &str) -> HistoryRow {
        HistoryRow {
            version,
            name: format!("m{version}"),
            applied_on: applied_on.into(),
        }
    }

    #[test]
    fn the_history_reports_new_vanished_and_rewritten_rows() {
        let before = [row(1, "a"), row(2, "b")];
        assert_eq!(history_facts(&before, &before), []);
        let grown = [row(1, "a"), row(2, "b"), row(3, "c")];
        assert_eq!(
            history_facts(&before, &grown),
            [Fact::MigrationApplied {
                version: 3,
                name: "m3".into(),
                applied_on: "c".into()
            }]
        );
        let rewritten = [row(1, "a"), row(2, "z")];
        assert_eq!(
            history_facts(&before, &rewritten),
            [
                Fact::MigrationRemoved { version: 2 },
                Fact::MigrationApplied {
                    version: 2,
                    name: "m2".into(),
                    applied_on: "z".into()
                }
            ]
        );
    }
}
