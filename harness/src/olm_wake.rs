//! Wakes OLM's resolution of a test's namespace when a CSV in it is deleted.
//!
//! OLM's catalog operator resolves a namespace again on Subscription,
//! OperatorGroup and catalog events and at its wake-up (`--interval`), not
//! when a CSV is deleted. A resolution that ran while the replaced CSV still
//! existed fails as not satisfiable ("… exists and is not referenced by a
//! subscription") and is not retried when that CSV goes: the namespace
//! waits for the wake-up (docs/olm-behaviour.md). A short wake-up resolves
//! every namespace of the cluster each time, and on two cores that sweep
//! kept the catalog operator's queue full: with all cluster tests at once,
//! a resolution waited 28 s (median) behind it.
//!
//! So the event OLM misses is delivered instead: while a test's namespace
//! lives, a metadata watch of its CSVs touches the namespace's
//! Subscriptions (an annotation) after each deletion, and after each new
//! listing of the watch (a deletion may have gone unseen meanwhile) — one
//! resolution of that namespace, as the wake-up would do, right away.
//!
//! Owns: that watch and the annotation `upgrade-gate.test/olm-wake`. Must
//! not touch: anything outside the test's namespace, or a Subscription's
//! spec. Best effort: an error (no OLM on the cluster, the API server away)
//! waits for the watch's next try; the catalog operator's own wake-up stays.

use std::time::{SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Api, Client};

/// The annotation that carries the wake (its value: what woke it, and when).
pub const ANNOTATION: &str = "upgrade-gate.test/olm-wake";

/// The watch of one namespace; dropping it ends the watch.
#[derive(Debug)]
pub struct OlmResolutionWake {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for OlmResolutionWake {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("operators.coreos.com", "v1alpha1", kind),
        plural,
    )
}

/// Why the namespace is woken: a deletion, or a new listing.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Wake {
    Deleted(String),
    Relisted,
}

/// What the watch's event asks for: a wake after a deletion, and after every
/// listing but the first (which follows the namespace's creation: nothing
/// can have been missed before it).
fn wake_for<K>(event: &Event<K>, name: impl Fn(&K) -> String, listed_before: bool) -> Option<Wake> {
    match event {
        Event::Delete(object) => Some(Wake::Deleted(name(object))),
        Event::InitDone if listed_before => Some(Wake::Relisted),
        _ => None,
    }
}

/// Starts the watch of `namespace`'s CSVs on the current runtime.
pub fn start(client: Client, namespace: &str) -> OlmResolutionWake {
    let namespace = namespace.to_owned();
    let task = tokio::spawn(async move {
        // Metadata only: a CSV carries its whole install strategy.
        let csvs: Api<PartialObjectMeta<DynamicObject>> = Api::namespaced_with(
            client.clone(),
            &namespace,
            &resource("ClusterServiceVersion", "clusterserviceversions"),
        );
        let subscriptions: Api<DynamicObject> = Api::namespaced_with(
            client,
            &namespace,
            &resource("Subscription", "subscriptions"),
        );
        let mut events =
            std::pin::pin!(watcher(csvs, watcher::Config::default()).default_backoff());
        let mut listed_before = false;
        while let Some(event) = events.next().await {
            let Ok(event) = event else { continue };
            let name = |csv: &PartialObjectMeta<DynamicObject>| {
                csv.metadata.name.clone().unwrap_or_default()
            };
            let wake = wake_for(&event, name, listed_before);
            if matches!(event, Event::InitDone) {
                listed_before = true;
            }
            if let Some(wake) = wake {
                touch_subscriptions(&subscriptions, &namespace, &wake).await;
            }
        }
    });
    OlmResolutionWake { task }
}

/// Annotates every Subscription of the namespace; says what it did.
async fn touch_subscriptions(subscriptions: &Api<DynamicObject>, namespace: &str, wake: &Wake) {
    let Ok(list) = subscriptions.list_metadata(&ListParams::default()).await else {
        return;
    };
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos());
    let why = match wake {
        Wake::Deleted(csv) => format!("CSV {csv} deleted"),
        Wake::Relisted => "CSVs listed again".to_owned(),
    };
    let patch = serde_json::json!({
        "metadata": {"annotations": {ANNOTATION: format!("{why} at {nanos}")}}
    });
    let mut touched = Vec::new();
    for subscription in list.items {
        let Some(name) = subscription.metadata.name else {
            continue;
        };
        if subscriptions
            .patch_metadata(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .is_ok()
        {
            touched.push(name);
        }
    }
    if !touched.is_empty() {
        eprintln!(
            "{namespace}: {why}: OLM woken to resolve the namespace again (Subscription {})",
            touched.join(", ")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deletion_and_every_listing_after_the_first_wake_the_namespace() {
        let name = |csv: &&str| (*csv).to_owned();
        let cases: [(Event<&str>, bool, Option<Wake>); 7] = [
            (
                Event::Delete("app.v7.9.3"),
                false,
                Some(Wake::Deleted("app.v7.9.3".to_owned())),
            ),
            (
                Event::Delete("app.v7.9.3"),
                true,
                Some(Wake::Deleted("app.v7.9.3".to_owned())),
            ),
            (Event::InitDone, false, None),
            (Event::InitDone, true, Some(Wake::Relisted)),
            (Event::Apply("app.v7.10.0"), true, None),
            (Event::InitApply("app.v7.10.0"), true, None),
            (Event::Init, true, None),
        ];
        for (event, listed_before, expected) in cases {
            assert_eq!(
                wake_for(&event, name, listed_before),
                expected,
                "{event:?} (listed before: {listed_before})"
            );
        }
    }
}
