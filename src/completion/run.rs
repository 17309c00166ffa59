//! [`keep`]: the sidecar's life — wait for the Lease (the keeper keeping
//! the gate closed meanwhile unless a replica of this release leads:
//! `Keeper::wait_to_lead`), watch every resource, judge each object, and
//! hand the verdict to the keeper (and the recorder) until stopped; step
//! down on the way out.
//!
//! Owns: the watches (one per resource and namespace, found by discovery,
//! retried while the resource is not served), what each one shows
//! ([`Watched`]), and the order of start and stop. Must not touch: the
//! verdict's rule ([`super::decide()`]) or how it is written (the keeper's
//! and the recorder's).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::discovery::{self, ApiCapabilities, ApiResource, Scope};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::{mpsc, watch};

use super::decide::{Watched, decide};
use super::resource::ResourceName;
use super::rule::{Rule, Shown};
use crate::admission::{self, Recorder};
use crate::keeper::{Evidence, Keeper, Verdict};
use crate::leader::{Elector, LeaseSettings, LostLease, SettingsError, Standing};
use crate::locate::Target;
use crate::operator_condition::UpgradeableEntry;
use crate::telemetry::error_chain;

/// The first pause after a resource could not be found; doubled up to
/// [`DISCOVERY_RETRY_AT_MOST`].
pub const DISCOVERY_RETRY: Duration = Duration::from_secs(1);
/// The longest pause between two tries to find a resource.
pub const DISCOVERY_RETRY_AT_MOST: Duration = Duration::from_secs(30);

/// What `upgrade-gate keep` runs with.
#[derive(Debug)]
pub struct KeepSettings {
    /// The resources whose every object must show the upgrade done.
    pub resources: Vec<ResourceName>,
    /// The namespaces to watch them in (empty: all).
    pub namespaces: Vec<String>,
    /// The rule each object is judged by.
    pub rule: Rule,
    /// The running release, as the rule reads it (`release`) and as the
    /// admission record names it.
    pub release: String,
    /// The OperatorCondition, found as `hold` finds it.
    pub target: Target,
    /// The admission record to keep as well, if any.
    pub record: Option<RecordSettings>,
    /// The Lease only whose holder writes.
    pub lease: LeaseSettings,
}

/// The admission record's part: whose entry, and how to find whom to
/// wake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordSettings {
    /// The operator's Deployment (the record's entry is named after it).
    pub deployment: String,
    /// How the deployer that holds the next release is found, to wake it
    /// once the upgrade is recorded complete ([`Recorder::wake`]).
    pub wake: admission::Wake,
}

/// Why `keep` stopped other than by its stop signal.
#[derive(Debug, thiserror::Error)]
pub enum KeepError {
    /// The Lease settings cannot work.
    #[error(transparent)]
    Lease(#[from] SettingsError),
    /// Another process leads now, or renewing failed: this one stops
    /// writing at once (its container restarts as a follower).
    #[error(transparent)]
    LostLease(#[from] LostLease),
}

/// The verdict `keep` hands the keeper and the recorder: the entry, and
/// what it was judged from (every object watched, under the rule, the
/// resources and the namespaces).
#[derive(Clone, Debug, PartialEq, Eq)]
struct KeepVerdict {
    entry: UpgradeableEntry,
    evidence: Evidence,
}

impl Verdict for KeepVerdict {
    fn entry(&self) -> &UpgradeableEntry {
        &self.entry
    }

    fn evidence(&self) -> Option<Evidence> {
        Some(self.evidence.clone())
    }
}

/// The settings keep's judgement follows, in a person's words.
fn judgement_basis(settings: &KeepSettings) -> String {
    let namespaces = if settings.namespaces.is_empty() {
        "every namespace".to_owned()
    } else {
        let mut sorted = settings.namespaces.clone();
        sorted.sort();
        format!("namespaces {}", sorted.join(", "))
    };
    format!(
        "{} in {namespaces}, done when {}",
        names(&settings.resources),
        settings.rule.source()
    )
}

/// What every watch shows, judged: the verdict and its evidence.
fn judged(release: &str, watched: &[Watched], basis: &str) -> KeepVerdict {
    KeepVerdict {
        entry: decide(release, watched),
        evidence: Evidence::new(watched.iter().map(|watch| watch.objects.len()).sum(), basis),
    }
}

/// What one watch reports to the loop.
enum Update {
    /// The resource could not be found or read (one line).
    Problem(String),
    /// A complete list: every object there is.
    Listed(BTreeMap<String, Shown>),
    /// One object changed.
    Changed(String, Shown),
    /// One object is gone.
    Gone(String),
}

/// Runs the sidecar until `stop` completes: leads (or waits to, keeping
/// the gate closed meanwhile unless a replica of this release leads), then
/// keeps the verdict of every watched object in the OperatorCondition
/// (and the admission record) while leading. Returns `Ok` after a stop
/// (the keeper stopped, the Lease released).
pub async fn keep(
    client: kube::Client,
    settings: KeepSettings,
    stop: impl Future<Output = ()>,
) -> Result<(), KeepError> {
    tokio::pin!(stop);
    let elector = Elector::new(client.clone(), settings.lease.clone())?;
    let (standing, _) = watch::channel(Standing::Unknown);
    tracing::info!(lease = %settings.lease.name, identity = %settings.lease.identity, "waiting for the Lease: only its holder writes the verdict; meanwhile the gate is kept closed unless a replica of this release leads");
    let Some((mut leadership, keeper)) = Keeper::new(client.clone(), settings.target.clone())
        .wait_to_lead(elector, &standing, &mut stop)
        .await
    else {
        return Ok(());
    };
    let leading = leadership.leading();
    tracing::info!(
        release = %settings.release,
        rule = settings.rule.source(),
        resources = %names(&settings.resources),
        "leading: keeping the gate closed until every object shows this release's upgrade done"
    );

    let basis = judgement_basis(&settings);
    let (verdicts, latest) = watch::channel::<Option<KeepVerdict>>(None);
    let recorder = settings.record.as_ref().map(|record| {
        let recorder = Recorder::new(
            client.clone(),
            settings.target.namespace.clone(),
            record.deployment.clone(),
            settings.release.clone(),
        )
        .leading(leading)
        .wake(record.wake.clone());
        recorder.start(latest.clone())
    });
    let keeper = match &recorder {
        Some(recorder) => keeper.start(admission::open_after_recorded(
            latest.clone(),
            recorder.status(),
            &settings.release,
        )),
        None => keeper.start(latest.clone()),
    };

    let (updates, mut updated) = mpsc::channel(64);
    let rule = Arc::new(settings.rule);
    let release: Arc<str> = Arc::from(settings.release.as_str());
    let mut watched = Vec::new();
    let mut tasks = tokio::task::JoinSet::new();
    for (index, (resource, namespace)) in scopes(&settings.resources, &settings.namespaces)
        .into_iter()
        .enumerate()
    {
        let label = match &namespace {
            Some(namespace) => format!("{resource} in {namespace}"),
            None => resource.to_string(),
        };
        watched.push(Watched {
            label,
            ..Watched::default()
        });
        tasks.spawn(watch_one(
            client.clone(),
            resource,
            namespace,
            rule.clone(),
            release.clone(),
            index,
            updates.clone(),
        ));
    }
    drop(updates);
    verdicts.send_replace(Some(judged(&release, &watched, &basis)));

    let outcome = loop {
        tokio::select! {
            update = updated.recv() => {
                let Some((index, update)) = update else { break Ok(()) };
                apply(&mut watched[index], update);
                let verdict = judged(&release, &watched, &basis);
                let changed = verdicts.send_if_modified(|current| {
                    let changed = current.as_ref() != Some(&verdict);
                    if changed {
                        *current = Some(verdict.clone());
                    }
                    changed
                });
                if changed {
                    let entry = &verdict.entry;
                    tracing::info!(state = ?entry.state(), reason = entry.reason().as_str(), message = entry.message(), objects = verdict.evidence.judged, "verdict");
                }
            }
            lost = leadership.lost() => break Err(KeepError::from(lost)),
            () = &mut stop => break Ok(()),
        }
    };
    tasks.shutdown().await;
    if let Err(error) = &outcome {
        // As controller-runtime does: stop writing at once, await nothing.
        tracing::error!(error = %error, "stopped keeping the gate");
        return outcome;
    }
    keeper.stop().await;
    if let Some(recorder) = recorder {
        recorder.stop().await;
    }
    leadership.step_down().await;
    tracing::info!("stopped: the Lease is released");
    outcome
}

/// One watch per resource and namespace (one per resource when every
/// namespace is watched).
fn scopes(
    resources: &[ResourceName],
    namespaces: &[String],
) -> Vec<(ResourceName, Option<String>)> {
    resources
        .iter()
        .flat_map(|resource| {
            let scopes: Vec<Option<String>> = if namespaces.is_empty() {
                vec![None]
            } else {
                namespaces.iter().cloned().map(Some).collect()
            };
            scopes
                .into_iter()
                .map(move |namespace| (resource.clone(), namespace))
        })
        .collect()
}

fn names(resources: &[ResourceName]) -> String {
    resources
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// What `update` changes in what a watch shows.
fn apply(watched: &mut Watched, update: Update) {
    match update {
        Update::Problem(problem) => {
            watched.problem = Some(problem);
            return;
        }
        Update::Listed(objects) => {
            watched.objects = objects;
            watched.listed = true;
        }
        Update::Changed(key, shown) => {
            watched.objects.insert(key, shown);
        }
        Update::Gone(key) => {
            watched.objects.remove(&key);
        }
    }
    watched.problem = None;
}

/// Finds `resource` (retrying while it is not served), then watches it,
/// judging every object, until the loop stops listening.
async fn watch_one(
    client: kube::Client,
    resource: ResourceName,
    namespace: Option<String>,
    rule: Arc<Rule>,
    release: Arc<str>,
    index: usize,
    updates: mpsc::Sender<(usize, Update)>,
) {
    let send = |update: Update| {
        let updates = updates.clone();
        async move { updates.send((index, update)).await.is_ok() }
    };
    let mut pause = DISCOVERY_RETRY;
    let (found, capabilities) = loop {
        match find(&client, &resource).await {
            Ok(found) => break found,
            Err(why) => {
                tracing::warn!(resource = %resource, %why, retry_in = ?pause, "cannot find the resource");
                if !send(Update::Problem(why)).await {
                    return;
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(DISCOVERY_RETRY_AT_MOST);
            }
        }
    };
    let api: Api<DynamicObject> = match (&namespace, &capabilities.scope) {
        (Some(namespace), Scope::Namespaced) => Api::namespaced_with(client, namespace, &found),
        _ => Api::all_with(client, &found),
    };
    let judge = |object: &DynamicObject| (key(object), shown(object, &rule, &release));
    let mut stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut listing = BTreeMap::new();
    while let Some(event) = stream.next().await {
        let update = match event {
            Ok(watcher::Event::Init) => {
                listing.clear();
                continue;
            }
            Ok(watcher::Event::InitApply(object)) => {
                let (key, shown) = judge(&object);
                listing.insert(key, shown);
                continue;
            }
            Ok(watcher::Event::InitDone) => Update::Listed(std::mem::take(&mut listing)),
            Ok(watcher::Event::Apply(object)) => {
                let (key, shown) = judge(&object);
                Update::Changed(key, shown)
            }
            Ok(watcher::Event::Delete(object)) => Update::Gone(key(&object)),
            Err(error) => {
                let why = error_chain(&error);
                tracing::warn!(resource = %resource, %why, "watch failed; retrying");
                Update::Problem(why)
            }
        };
        if !send(update).await {
            return;
        }
    }
}

/// An object's key in [`Watched::objects`]: `<namespace>/<name>`, or its
/// name when it is cluster-scoped.
fn key(object: &DynamicObject) -> String {
    match &object.metadata.namespace {
        Some(namespace) => format!(
            "{namespace}/{}",
            object.metadata.name.as_deref().unwrap_or("")
        ),
        None => object.metadata.name.clone().unwrap_or_default(),
    }
}

/// What `rule` says of `object` for `release`; an object being deleted is
/// not done whatever it shows (its finalizers may still migrate).
fn shown(object: &DynamicObject, rule: &Rule, release: &str) -> Shown {
    if object.metadata.deletion_timestamp.is_some() {
        return Shown::BeingDeleted;
    }
    let value = serde_json::to_value(object).unwrap_or_default();
    rule.evaluate(&value, release)
}

/// The resource's API and whether it is namespaced, by discovery.
async fn find(
    client: &kube::Client,
    resource: &ResourceName,
) -> Result<(ApiResource, ApiCapabilities), String> {
    let group = discovery::group(client, &resource.group)
        .await
        .map_err(|error| {
            format!(
                "the API group {:?} is not served: {}",
                resource.group,
                error_chain(&error)
            )
        })?;
    let candidates = match &resource.version {
        Some(version) => group.versioned_resources(version),
        None => group.recommended_resources(),
    };
    candidates
        .into_iter()
        .find(|(found, _)| found.plural == resource.plural)
        .ok_or_else(|| {
            format!(
                "the API group {:?} serves no resource {:?}{}",
                resource.group,
                resource.plural,
                resource
                    .version
                    .as_ref()
                    .map(|version| format!(" at {version}"))
                    .unwrap_or_default()
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_after_a_list_updates_and_clears_the_problem() {
        let mut watched = Watched::default();
        apply(&mut watched, Update::Problem("refused".into()));
        assert!(!watched.listed);
        assert_eq!(watched.problem.as_deref(), Some("refused"));
        apply(
            &mut watched,
            Update::Listed([("shop/a".to_owned(), Shown::NotDone)].into()),
        );
        assert!(watched.listed && watched.problem.is_none());
        apply(&mut watched, Update::Changed("shop/a".into(), Shown::Done));
        apply(
            &mut watched,
            Update::Changed("shop/b".into(), Shown::NotDone),
        );
        assert_eq!(watched.objects.len(), 2);
        // A failing watch after a list keeps what it knew (the watcher
        // resumes or lists again); the problem is said until then.
        apply(&mut watched, Update::Problem("connection reset".into()));
        assert!(watched.listed);
        apply(
            &mut watched,
            Update::Changed("shop/b".into(), Shown::BeingDeleted),
        );
        assert_eq!(watched.objects["shop/b"], Shown::BeingDeleted);
        apply(&mut watched, Update::Gone("shop/b".into()));
        apply(&mut watched, Update::Gone("shop/a".into()));
        assert!(watched.objects.is_empty() && watched.problem.is_none());
    }

    #[test]
    fn an_object_being_deleted_is_not_done_whatever_its_status_says() {
        let rule = Rule::build(&[], Some("status.version"), None).expect("rule");
        let object = |deleting: bool| -> DynamicObject {
            let mut object: DynamicObject = serde_json::from_value(serde_json::json!({
                "apiVersion": "demo.example.com/v1",
                "kind": "Widget",
                "metadata": {"name": "a", "namespace": "shop"},
                "status": {"version": "0.2.0"}
            }))
            .expect("object");
            if deleting {
                object.metadata.deletion_timestamp = Some(
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()),
                );
                object.metadata.finalizers = Some(vec!["demo.example.com/migrate".into()]);
            }
            object
        };
        assert_eq!(key(&object(false)), "shop/a");
        assert_eq!(shown(&object(false), &rule, "0.2.0"), Shown::Done);
        assert_eq!(shown(&object(true), &rule, "0.2.0"), Shown::BeingDeleted);
        let entry = decide(
            "0.2.0",
            &[Watched {
                label: "widgets.demo.example.com".into(),
                listed: true,
                problem: None,
                objects: [(key(&object(true)), Shown::BeingDeleted)].into(),
            }],
        );
        assert!(
            entry
                .message()
                .contains("widgets.demo.example.com shop/a (being deleted: its finalizers"),
            "{}",
            entry.message()
        );
    }

    #[test]
    fn one_watch_per_resource_and_namespace() {
        let widgets: ResourceName = "widgets.demo.example.com".parse().unwrap();
        let gadgets: ResourceName = "gadgets.demo.example.com".parse().unwrap();
        let all = scopes(&[widgets.clone(), gadgets.clone()], &[]);
        assert_eq!(all, vec![(widgets.clone(), None), (gadgets.clone(), None)]);
        let two = scopes(std::slice::from_ref(&widgets), &["a".into(), "b".into()]);
        assert_eq!(
            two,
            vec![
                (widgets.clone(), Some("a".into())),
                (widgets, Some("b".into()))
            ]
        );
    }
}
