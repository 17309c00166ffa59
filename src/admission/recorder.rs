//! [`Recorder`]: keeps the operator's own entry in the namespace's
//! UpgradeRecord (and in the state ConfigMap the previous policy read)
//! while it leads — written when its verdict changes, and read again every
//! [`REASSERT_INTERVAL`] so that a deleted record or a changed entry comes
//! back; records what its Deployment runs (read once, at its start) and
//! what its verdicts were judged from, and writes Complete only on
//! evidence ([`super::record::completion_refused`]); spends an override
//! once the move it allowed has happened — and, once the record says
//! complete, wakes the deployer that holds the next release
//! ([`super::wake`], [`Recorder::wake`]).
//! [`record_starting`] is the init container's part: the entry of a
//! release that starts, written before its operator runs.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::Value;
use tokio::sync::watch;

use super::claim::{STATE_CONFIGMAP, UpgradeClaim, data_patch, initial_data};
use super::record::{
    Facts, Override, RECORD_KIND, RECORD_NAME, Running, entry_of, override_of, record_patch,
    record_resource, spends,
};
use super::wake::{Said, Wake, wake_round};
use crate::keeper::{Evidence, Verdict};
use crate::task::TaskHandle;

/// How often the record is read back and put right when someone changed it.
pub const REASSERT_INTERVAL: Duration = Duration::from_secs(5);
/// The pause after a failed read or write before the next try, doubled
/// after each failure in a row up to [`RETRY_AT_MOST`].
pub const RETRY_AFTER: Duration = Duration::from_secs(1);
/// The longest pause between tries (a missing right is logged this often).
pub const RETRY_AT_MOST: Duration = Duration::from_secs(30);
/// How long one API request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one wake-up round may take (Argo CD's takes up to two writes
/// and 10 s of reads between them).
const WAKE_ROUND_TIMEOUT: Duration = Duration::from_secs(30);
/// How soon, at most, a running recorder puts its entry back after someone
/// changed it or deleted the record: its next round (at most
/// [`REASSERT_INTERVAL`] later), then a read and a write (each at most
/// 5 s). Typically about [`REASSERT_INTERVAL`].
pub const RESTORED_WITHIN: Duration =
    Duration::from_secs(REASSERT_INTERVAL.as_secs() + 2 * REQUEST_TIMEOUT.as_secs());
/// The field manager of the recorder's writes.
const FIELD_MANAGER: &str = "upgrade-gate-recorder";
/// How many times the deployer is woken once a release's completion is
/// recorded, one `REASSERT_INTERVAL` (5 s) apart. More than once: the API
/// server judges by its informer's copy of the record, which may lag the
/// write; a deployer's retry inside that lag is refused again, and only a
/// later wake-up wakes it (and Argo CD may need two steps: end a retry's
/// wait, then sync).
pub const WAKES: u32 = 3;

/// The number of the wake-up to send for `release`, given the last one
/// sent (`None`: all sent).
pub fn next_wake(woken: Option<&(String, u32)>, release: &str) -> Option<u32> {
    match woken {
        Some((of, sent)) if of == release => (*sent < WAKES).then_some(sent + 1),
        _ => Some(1),
    }
}

/// What a user of the recorder can see, published on every change.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecorderStatus {
    /// The record the ConfigMap showed after the last read or write.
    pub recorded: Option<UpgradeClaim>,
    /// When the recorder last changed the ConfigMap.
    pub last_write: Option<Timestamp>,
    /// The last failure since the last success, as one line.
    pub last_error: Option<String>,
    /// Why the last verdict's completion was written in progress instead
    /// (the record's evidence rule refused it,
    /// [`super::record::completion_refused`]); `None` when the record says
    /// what the verdict asked.
    pub held_back: Option<String>,
}

/// A recorder to start: whose state it records and where.
pub struct Recorder {
    client: Client,
    namespace: String,
    deployment: String,
    release: String,
    leading: Option<watch::Receiver<bool>>,
    wake: Option<Wake>,
}

impl Recorder {
    /// Records for Deployment `deployment` in `namespace`, which runs
    /// `release`, leading at once.
    pub fn new(
        client: Client,
        namespace: impl Into<String>,
        deployment: impl Into<String>,
        release: impl Into<String>,
    ) -> Recorder {
        Recorder {
            client,
            namespace: namespace.into(),
            deployment: deployment.into(),
            release: release.into(),
            leading: None,
            wake: Some(Wake::default()),
        }
    }

    /// Once the record says this release completed, wakes whatever holds
    /// the next release its admission policy refused — found from the
    /// marks the deployers put on the operator's Deployment (OLM v0, OLM
    /// v1, Flux, Argo CD: [`super::wake`]) — [`WAKES`] times,
    /// `REASSERT_INTERVAL` (5 s) apart. On by default with
    /// [`Wake::default`]; a wake-up lacking its right is said once in the
    /// log and skipped (the deployer's own retry still works).
    ///
    /// Why: OLM v0 fails a refused CSV for good
    /// (`InstallComponentFailedNoRetry`) until a ServiceAccount, Role or
    /// RoleBinding of the namespace changes, or its next resync (minutes);
    /// OLM v1 retries after controller-runtime's growing backoff; Flux
    /// after its retry interval; Argo CD's automated sync never retries a
    /// failed sync of the same revision. The wake-up is made the moment
    /// the policy would let the update through (and again, in case the
    /// API server's copy of the record still lagged).
    pub fn wake(mut self, wake: Wake) -> Recorder {
        self.wake = Some(wake);
        self
    }

    /// Wakes no deployer ([`Recorder::wake`]).
    pub fn without_wake(mut self) -> Recorder {
        self.wake = None;
        self
    }

    /// The ServiceAccount annotated to wake OLM v0 (default: the one the
    /// Deployment's pods run as; also the one annotated when the
    /// Deployment cannot be read). Every other deployer is woken as
    /// [`Recorder::wake`] says.
    pub fn wake_olm_v0(mut self, service_account: impl Into<String>) -> Recorder {
        self.wake.get_or_insert_with(Wake::default).service_account = Some(service_account.into());
        self
    }

    /// Writes only while `leading` says true.
    pub fn leading(mut self, leading: watch::Receiver<bool>) -> Recorder {
        self.leading = Some(leading);
        self
    }

    /// Writes once: `record` for the Deployment, creating the ConfigMap
    /// when it is missing. Returns whether it changed anything.
    pub async fn write_once(&self, record: &UpgradeClaim) -> Result<bool, kube::Error> {
        let running = read_running(&self.client, &self.namespace, &self.deployment).await?;
        let facts = Facts {
            running: running.as_ref(),
            evidence: None,
        };
        write(&self.apis(), &self.deployment, record, facts, None)
            .await
            .map(|(_, changed)| changed)
    }

    fn apis(&self) -> Apis {
        Apis::new(&self.client, &self.namespace)
    }

    /// Starts recording the latest verdict of `verdicts` (`None`: none yet)
    /// until [`TaskHandle::stop`] or until the sender is dropped.
    pub fn start<V: Verdict>(self, verdicts: watch::Receiver<Option<V>>) -> RecorderHandle {
        TaskHandle::spawn(
            "admission recorder",
            RecorderStatus::default(),
            |status, stop| self.run(verdicts, status, stop),
        )
    }

    async fn run<V: Verdict>(
        self,
        mut verdicts: watch::Receiver<Option<V>>,
        status: watch::Sender<RecorderStatus>,
        mut stop: watch::Receiver<bool>,
    ) {
        let api = self.apis();
        let mut memo = Memo::default();
        // What the Deployment runs, read once before the first write
        // (`None` inside: it may not be read, said once).
        let mut running: Option<Option<Running>> = None;
        let mut leading = self.leading.clone();
        let mut failures: u32 = 0;
        // The release the deployer was woken for, and how often.
        let mut woken: Option<(String, u32)> = None;
        // What the wake-ups said once (a missing right, nothing to wake).
        let mut said = Said::default();
        loop {
            if *stop.borrow() {
                return;
            }
            let leads = leading.as_ref().is_none_or(|rx| *rx.borrow());
            let verdict = verdicts.borrow_and_update().clone().filter(|_| leads);
            let pause = match verdict {
                None => REASSERT_INTERVAL,
                // Decided from input that has moved on: the operator sends
                // a newer verdict soon; never record a stale one.
                Some(verdict) if !verdict.still_current() => crate::keeper::STALE_RECHECK,
                Some(verdict) => {
                    let record = UpgradeClaim::of(&self.release, verdict.entry());
                    let evidence = verdict.evidence();
                    let written = tokio::select! {
                        written = self.write_round(&api, &mut running, &record, evidence.as_ref(), &mut memo) => written,
                        _ = stop.changed() => return,
                    };
                    match written {
                        Ok((written, changed)) => {
                            failures = 0;
                            let complete = matches!(written, UpgradeClaim::Complete { .. });
                            let held_back = held_back(&record, &written);
                            self.report_written(&status, written, held_back, changed);
                            if complete && !self.woke(&mut woken, &mut said).await {
                                failures = failures.saturating_add(1);
                                retry_pause(failures)
                            } else {
                                REASSERT_INTERVAL
                            }
                        }
                        Err(error) => {
                            tracing::warn!(
                                record = RECORD_NAME,
                                %error,
                                "cannot record the upgrade's state; trying again"
                            );
                            status
                                .send_modify(|status| status.last_error = Some(error.to_string()));
                            failures = failures.saturating_add(1);
                            retry_pause(failures)
                        }
                    }
                }
            };
            let leading_changed = async {
                match leading.as_mut() {
                    Some(rx) => {
                        if rx.changed().await.is_err() {
                            std::future::pending::<()>().await;
                        }
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                changed = verdicts.changed() => if changed.is_err() { return },
                () = leading_changed => {}
                _ = stop.changed() => return,
                () = tokio::time::sleep(pause) => {}
            }
        }
    }
}

impl Recorder {
    /// One write of `record`: reads what the Deployment runs first, once
    /// (a failure to read it that may pass is this round's error).
    async fn write_round(
        &self,
        api: &Apis,
        running: &mut Option<Option<Running>>,
        record: &UpgradeClaim,
        evidence: Option<&Evidence>,
        memo: &mut Memo,
    ) -> Result<(UpgradeClaim, bool), kube::Error> {
        if running.is_none() {
            *running = Some(read_running(&self.client, &self.namespace, &self.deployment).await?);
        }
        let running = running.as_ref().and_then(Option::as_ref);
        if let Some(label) = running.and_then(|r| r.release.as_deref())
            && label != self.release
        {
            tracing::warn!(
                deployment = %self.deployment,
                label,
                release = %self.release,
                "the Deployment's release label names another release than this operator runs: the policy will not find this release's record for it; set the label to the release"
            );
        }
        let facts = Facts { running, evidence };
        write(api, &self.deployment, record, facts, Some(memo)).await
    }
}

impl Recorder {
    /// Wakes the deployer [`WAKES`] times per release, once a call
    /// ([`Recorder::wake`]); false when that failed for a reason that may
    /// pass (tried again after a pause).
    async fn woke(&self, woken: &mut Option<(String, u32)>, said: &mut Said) -> bool {
        let Some(wake) = &self.wake else {
            return true;
        };
        let Some(round) = next_wake(woken.as_ref(), &self.release) else {
            return true;
        };
        let round_done = wake_round(
            &self.client,
            &self.namespace,
            &self.deployment,
            wake,
            &self.release,
            round,
            said,
        );
        match tokio::time::timeout(WAKE_ROUND_TIMEOUT, round_done).await {
            Ok(Ok(())) => {
                *woken = Some((self.release.clone(), round));
                true
            }
            Ok(Err(_)) => false,
            Err(_) => {
                tracing::warn!(release = %self.release, "waking the deployer timed out; trying again");
                false
            }
        }
    }

    fn report_written(
        &self,
        status: &watch::Sender<RecorderStatus>,
        record: UpgradeClaim,
        held_back: Option<String>,
        changed: bool,
    ) {
        let newly_held = held_back.is_some() && status.borrow().held_back != held_back;
        if let Some(why) = held_back.as_ref().filter(|_| newly_held) {
            tracing::warn!(
                record = RECORD_NAME,
                deployment = %self.deployment,
                why,
                "the upgrade's completion is not recorded: the gate stays closed"
            );
        }
        if changed {
            tracing::info!(
                record = RECORD_NAME,
                deployment = %self.deployment,
                record = ?record,
                "recorded the upgrade's state for the admission policy"
            );
        }
        status.send_modify(|status| {
            status.recorded = Some(record);
            status.held_back = held_back;
            status.last_error = None;
            if changed {
                status.last_write = Some(Timestamp::now());
            }
        });
    }
}

/// The pause after the `failures`-th failure in a row: [`RETRY_AFTER`],
/// doubled after each further one, at most [`RETRY_AT_MOST`].
fn retry_pause(failures: u32) -> Duration {
    RETRY_AFTER
        .saturating_mul(2u32.saturating_pow(failures.saturating_sub(1)))
        .min(RETRY_AT_MOST)
}

/// Writes `record` for `deployment` in `namespace` once, creating the
/// ConfigMap when it is missing, retrying what may pass (unreachable,
/// 404 of a namespace being created, 403 before a Role is bound, 409,
/// 429, 5xx) until `deadline` as the gate's commands do. `Ok(true)`: it
/// changed the ConfigMap; `Ok(false)`: it already said so.
pub async fn record_once(
    client: &Client,
    namespace: &str,
    deployment: &str,
    record: &UpgradeClaim,
    deadline: tokio::time::Instant,
) -> Result<bool, crate::operator_condition::Error> {
    let api = Apis::new(client, namespace);
    crate::operator_condition::with_retries(deadline, "recording the upgrade's state", || async {
        record_once_attempt(client, &api, deployment, record)
            .await
            .map_err(|error| crate::operator_condition::Obstacle::of(&error))
    })
    .await
}

async fn record_once_attempt(
    client: &Client,
    api: &Apis,
    deployment: &str,
    record: &UpgradeClaim,
) -> Result<bool, kube::Error> {
    let running = read_running(client, &api.namespace, deployment).await?;
    let facts = Facts {
        running: running.as_ref(),
        evidence: None,
    };
    write(api, deployment, record, facts, None)
        .await
        .map(|(_, changed)| changed)
}

/// What Deployment `deployment` runs ([`Running`]); `Ok(None)` when it may
/// not be read or is not there (said in one warning: the record then
/// keeps no images, and a re-created Deployment is compared by release
/// only).
pub async fn read_running(
    client: &Client,
    namespace: &str,
    deployment: &str,
) -> Result<Option<Running>, kube::Error> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    match read(&api, deployment, "Deployment").await {
        Ok(Some(found)) => Ok(Some(Running::of(&found))),
        Ok(None) => {
            tracing::warn!(
                deployment,
                "Deployment not found: the record names no images, and its entry is kept under the Deployment's name"
            );
            Ok(None)
        }
        Err(kube::Error::Api(status)) if status.code == 403 => {
            tracing::warn!(deployment, %status, "cannot read the Deployment (grant get on deployments named after it): the record names no images, and its entry is kept under the Deployment's name");
            Ok(None)
        }
        Err(error) => Err(error),
    }
}

/// What the recorder remembers between writes: the override the record
/// held at its first read (`None`: not read yet), which only this
/// release's own move can have used ([`super::record::spends`]).
#[derive(Debug, Default)]
struct Memo {
    first_override: Option<Option<Override>>,
}

/// Writes `record` for Deployment `deployment` where the policy reads it:
/// the namespace's [`RECORD_KIND`] (created when missing), under the
/// operator the Deployment names ([`Running::operator`], else its name),
/// and, for a cluster still bound to the previous policy, the state
/// ConfigMap. Returns the record written (a `Complete` held back for want
/// of evidence is written in progress) and whether either changed. A
/// cluster without the record's CRD has no policy that could read it (the
/// policy's parameter would not resolve, and its bindings would refuse
/// every release change): that part is skipped, once a debug line.
async fn write(
    apis: &Apis,
    deployment: &str,
    record: &UpgradeClaim,
    facts: Facts<'_>,
    memo: Option<&mut Memo>,
) -> Result<(UpgradeClaim, bool), kube::Error> {
    let operator = facts.running.map_or(deployment, |r| r.operator.as_str());
    let (written, upgrade_record) = match write_record(apis, operator, record, facts, memo).await {
        Err(kube::Error::Api(status)) if status.code == 404 => {
            tracing::debug!(%status, "no UpgradeRecord API in this cluster; recorded in the ConfigMap only");
            (record.clone(), false)
        }
        other => other?,
    };
    let configmap = write_configmap(&apis.configmaps, deployment, &written).await?;
    Ok((written, configmap || upgrade_record))
}

/// Writes `record` into the namespace's [`RECORD_KIND`], and removes the
/// operator's override once spent (with a `memo`: the recorder's rounds).
async fn write_record(
    apis: &Apis,
    operator: &str,
    record: &UpgradeClaim,
    facts: Facts<'_>,
    memo: Option<&mut Memo>,
) -> Result<(UpgradeClaim, bool), kube::Error> {
    let api = &apis.records;
    let Some(current) = read(api, RECORD_NAME, RECORD_KIND).await? else {
        let object: DynamicObject = serde_json::from_value(super::record::new_record(
            &apis.namespace,
            operator,
            record,
            facts,
        ))
        .map_err(kube::Error::SerdeError)?;
        if let Some(memo) = memo {
            memo.first_override.get_or_insert(None);
        }
        let created = create(api, RECORD_NAME, &object, RECORD_KIND).await?;
        return Ok((record.clone(), created));
    };
    let spec = current.data.get("spec");
    let now = override_of(spec, operator);
    let spend = match memo {
        Some(memo) => {
            let first = memo.first_override.get_or_insert_with(|| now.clone());
            spends(
                first.as_ref(),
                now.as_ref(),
                facts.running,
                record.release(),
            )
        }
        None => false,
    };
    let (written, changes) = record_patch(spec, operator, record, facts, spend);
    if &written != record
        && let UpgradeClaim::InProgress { why, .. } = &written
    {
        tracing::warn!(operator, why = %why, "not recording the upgrade complete");
    }
    let Some(changes) = changes else {
        return Ok((written, false));
    };
    patch(api, RECORD_NAME, &changes, RECORD_KIND).await?;
    if spend {
        tracing::info!(operator, release = %record.release(), "the override that let this release in is spent: removed");
    }
    Ok((written, true))
}

/// The init container's record (`upgrade-gate hold --record`): before the
/// operator of Deployment `deployment` starts, its entry names the release
/// the Deployment runs, in progress — unless the entry already names that
/// release (a restart: the running operator's own state stands). Spends
/// an override this pod's start has used (`record::spends`). So the policy holds
/// a release from the moment its pod runs, before its operator has judged
/// anything: nothing can replace it while its operator starts.
///
/// Needs to read the Deployment (its release label and images); fails
/// otherwise. Retries what may pass until `deadline`.
pub async fn record_starting(
    client: &Client,
    namespace: &str,
    deployment: &str,
    deadline: tokio::time::Instant,
) -> Result<Starting, crate::operator_condition::Error> {
    let apis = Apis::new(client, namespace);
    crate::operator_condition::with_retries(
        deadline,
        "recording this release as starting",
        || async {
            starting_attempt(client, &apis, deployment)
                .await
                .map_err(|error| crate::operator_condition::Obstacle::of(&error))
        },
    )
    .await
}

async fn starting_attempt(
    client: &Client,
    apis: &Apis,
    deployment: &str,
) -> Result<Starting, kube::Error> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), &apis.namespace);
    let found = read(&api, deployment, "Deployment")
        .await?
        .ok_or_else(|| not_found("Deployment", deployment))?;
    let running = Running::of(&found);
    let Some(release) = running.release.clone() else {
        return Ok(Starting::NoReleaseLabel);
    };
    let current = match read(&apis.records, RECORD_NAME, RECORD_KIND).await {
        // A missing record is `Ok(None)`; a 404 left over is the API server
        // not serving the resource at all: its CRD is not installed, and no
        // policy reads it.
        Err(kube::Error::Api(status)) if status.code == 404 => return Ok(Starting::NoRecordApi),
        other => other?,
    };
    let spec = current.as_ref().and_then(|record| record.data.get("spec"));
    let entry = entry_of(spec, &running.operator);
    let now = override_of(spec, &running.operator);
    // Found at this pod's start: set before it, so spent if this pod runs
    // what it names.
    let spent = spends(now.as_ref(), now.as_ref(), Some(&running), &release);
    if entry.as_ref().is_some_and(|entry| entry.release == release) {
        if spent {
            let changes =
                serde_json::json!({"spec": {"overrides": {running.operator.as_str(): null}}});
            patch(&apis.records, RECORD_NAME, &changes, RECORD_KIND).await?;
        }
        return Ok(Starting::Kept {
            operator: running.operator,
            release,
            spent,
        });
    }
    let record = UpgradeClaim::InProgress {
        release: release.clone(),
        why: format!("release {release} is starting: its operator has not judged its upgrade yet"),
    };
    let facts = Facts {
        running: Some(&running),
        evidence: None,
    };
    match current {
        None => {
            let object: DynamicObject = serde_json::from_value(super::record::new_record(
                &apis.namespace,
                &running.operator,
                &record,
                facts,
            ))
            .map_err(kube::Error::SerdeError)?;
            match create(&apis.records, RECORD_NAME, &object, RECORD_KIND).await {
                Ok(true) => {}
                // Created by another writer meanwhile: read it and try again.
                Ok(false) => return Err(conflict(RECORD_KIND, RECORD_NAME)),
                // The record's CRD is not installed: no policy reads it.
                Err(kube::Error::Api(status)) if status.code == 404 => {
                    return Ok(Starting::NoRecordApi);
                }
                Err(error) => return Err(error),
            }
        }
        Some(_) => {
            if let (_, Some(changes)) = record_patch(spec, &running.operator, &record, facts, spent)
            {
                patch(&apis.records, RECORD_NAME, &changes, RECORD_KIND).await?;
            }
        }
    }
    Ok(Starting::Recorded {
        operator: running.operator,
        release,
        spent,
    })
}

/// What [`record_starting`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Starting {
    /// The entry now names the release, in progress.
    Recorded {
        /// The operator's entry.
        operator: String,
        /// The release the Deployment runs.
        release: String,
        /// Whether it spent the override that let this release in.
        spent: bool,
    },
    /// The entry already named the release: left as it is.
    Kept {
        /// The operator's entry.
        operator: String,
        /// The release the Deployment runs.
        release: String,
        /// Whether it spent the override that let this release in.
        spent: bool,
    },
    /// The Deployment names no release (label `upgrade-gate.dev/release`):
    /// nothing to record; the policy refuses its moves meanwhile.
    NoReleaseLabel,
    /// The cluster does not serve the record (its CRD is not installed):
    /// no admission policy reads it; nothing recorded.
    NoRecordApi,
}

fn conflict(kind: &str, name: &str) -> kube::Error {
    kube::Error::Api(
        kube::core::Status::failure(&format!("{kind} {name} was created meanwhile"), "Conflict")
            .with_code(409)
            .boxed(),
    )
}

fn not_found(kind: &str, name: &str) -> kube::Error {
    kube::Error::Api(
        kube::core::Status::failure(&format!("{kind} {name} not found"), "NotFound")
            .with_code(404)
            .boxed(),
    )
}

/// The APIs of a namespace that hold the record.
struct Apis {
    namespace: String,
    configmaps: Api<ConfigMap>,
    records: Api<DynamicObject>,
}

impl Apis {
    fn new(client: &Client, namespace: &str) -> Apis {
        Apis {
            namespace: namespace.to_owned(),
            configmaps: Api::namespaced(client.clone(), namespace),
            records: Api::namespaced_with(client.clone(), namespace, &record_resource()),
        }
    }
}

/// Reads the ConfigMap and writes `record` when it says something else;
/// creates it when it is missing.
async fn write_configmap(
    api: &Api<ConfigMap>,
    deployment: &str,
    record: &UpgradeClaim,
) -> Result<bool, kube::Error> {
    let Some(current) = read(api, STATE_CONFIGMAP, "ConfigMap").await? else {
        let configmap = ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(STATE_CONFIGMAP.to_owned()),
                labels: Some(BTreeMap::from([(
                    "app.kubernetes.io/part-of".to_owned(),
                    "upgrade-gate".to_owned(),
                )])),
                ..Default::default()
            },
            data: Some(initial_data(deployment, record)),
            ..Default::default()
        };
        return create(api, STATE_CONFIGMAP, &configmap, "ConfigMap").await;
    };
    let data = current.data.unwrap_or_default();
    let Some(changes) = data_patch(&data, deployment, record) else {
        return Ok(false);
    };
    patch(api, STATE_CONFIGMAP, &changes, "ConfigMap").await?;
    Ok(true)
}

/// Object `name` of `api` (`None`: missing), within [`REQUEST_TIMEOUT`].
async fn read<K>(api: &Api<K>, name: &str, kind: &str) -> Result<Option<K>, kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    tokio::time::timeout(REQUEST_TIMEOUT, api.get_opt(name))
        .await
        .map_err(|_| timeout("reading", kind, name))?
}

/// Creates `object`: `Ok(true)`, or `Ok(false)` when someone else created
/// it meanwhile (the next round patches it).
async fn create<K>(api: &Api<K>, name: &str, object: &K, kind: &str) -> Result<bool, kube::Error>
where
    K: Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..Default::default()
    };
    match tokio::time::timeout(REQUEST_TIMEOUT, api.create(&params, object))
        .await
        .map_err(|_| timeout("creating", kind, name))?
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
        Err(error) => Err(error),
    }
}

/// Merge-patches object `name` of `api` with `changes`.
async fn patch<K>(api: &Api<K>, name: &str, changes: &Value, kind: &str) -> Result<(), kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..Default::default()
    };
    tokio::time::timeout(
        REQUEST_TIMEOUT,
        api.patch(name, &params, &Patch::Merge(changes)),
    )
    .await
    .map_err(|_| timeout("patching", kind, name))??;
    Ok(())
}

fn timeout(what: &str, kind: &str, name: &str) -> kube::Error {
    kube::Error::Service(format!("{what} {kind} {name} timed out").into())
}

/// Why a record asked for (`asked`) was written otherwise (`written`): a
/// completion the evidence rule refused, written in progress with the
/// refusal's words.
fn held_back(asked: &UpgradeClaim, written: &UpgradeClaim) -> Option<String> {
    match (asked, written) {
        (UpgradeClaim::Complete { .. }, UpgradeClaim::InProgress { why, .. }) => Some(why.clone()),
        _ => None,
    }
}

/// A running recorder: [`TaskHandle::status`] says what it recorded,
/// [`TaskHandle::stop`] stops it.
pub type RecorderHandle = TaskHandle<RecorderStatus>;

#[cfg(test)]
mod tests;
