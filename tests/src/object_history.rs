//! Every version of the objects a watch delivers, each stamped with the
//! wall-clock time this process received it, so a test can ask what the
//! cluster showed and when (e.g. the first time OLM's status said
//! `Upgradeable=False` at the current generation), and wait on it with a
//! deadline instead of sleeping.
//!
//! Owns: one watch (kube-runtime's watcher, with its reconnect backoff) per
//! history, the recorded versions, and the gaps in them (a failed watch, a
//! new list), so a reader never mistakes a missed change for none. Must not
//! touch: the objects (read-only).

use std::fmt::Debug;
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;

/// How long the watch's initial list may take.
const LISTED_WITHIN: Duration = Duration::from_secs(30);

/// One version of an object as the watch delivered it.
#[derive(Clone, Debug)]
pub struct Observed<K> {
    /// When this process received it (host wall clock).
    pub at: Timestamp,
    pub object: K,
    pub deleted: bool,
}

/// Where a watch may have missed changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gap {
    /// The watch failed (it retries with backoff, resuming from the last
    /// version it saw): changes meanwhile may come late or, if the version
    /// expired, not at all.
    Error(String),
    /// The watch listed its objects again after its first list: a
    /// deletion (and any version) between its last event and the list was
    /// never delivered.
    Relisted,
}

/// A gap and when this process saw it.
#[derive(Clone, Debug)]
pub struct WatchGap {
    pub at: Timestamp,
    pub gap: Gap,
}

/// The versions a watch delivered, in order; the watch stops on drop.
pub struct ObjectHistory<K> {
    what: String,
    records: watch::Receiver<Vec<Observed<K>>>,
    gaps: watch::Receiver<Vec<WatchGap>>,
    task: tokio::task::JoinHandle<()>,
}

impl<K> ObjectHistory<K>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug + Send + Sync + 'static,
{
    /// Starts watching and returns once the initial list is recorded, so
    /// every change made after this returns is seen.
    pub async fn record(what: &str, api: Api<K>, config: watcher::Config) -> Self {
        let (sender, records) = watch::channel(Vec::new());
        let (gap_sender, gaps) = watch::channel(Vec::new());
        let (listed, listed_receiver) = tokio::sync::oneshot::channel();
        let label = what.to_owned();
        let task = tokio::spawn(async move {
            let mut listed = Some(listed);
            let mut stream = watcher::watcher(api, config).default_backoff().boxed();
            while let Some(event) = stream.next().await {
                let at = Timestamp::now();
                let gap = |gap: Gap| gap_sender.send_modify(|gaps| gaps.push(WatchGap { at, gap }));
                let (object, deleted) = match event {
                    Ok(Event::Apply(object) | Event::InitApply(object)) => (object, false),
                    Ok(Event::Delete(object)) => (object, true),
                    Ok(Event::InitDone) => {
                        if let Some(listed) = listed.take() {
                            let _receiver_gone = listed.send(());
                        }
                        continue;
                    }
                    Ok(Event::Init) => {
                        if listed.is_none() {
                            eprintln!("watching {label}: listing again");
                            gap(Gap::Relisted);
                        }
                        continue;
                    }
                    Err(error) => {
                        eprintln!("watching {label}: {error} (the watch retries)");
                        // Before the first list nothing was recorded to miss.
                        if listed.is_none() {
                            gap(Gap::Error(error.to_string()));
                        }
                        continue;
                    }
                };
                sender.send_modify(|records| {
                    records.push(Observed {
                        at,
                        object,
                        deleted,
                    });
                });
            }
        });
        match tokio::time::timeout(LISTED_WITHIN, listed_receiver).await {
            Ok(Ok(())) => {}
            _ => panic!("the watch of {what} did not list within {LISTED_WITHIN:?}"),
        }
        Self {
            what: what.to_owned(),
            records,
            gaps,
            task,
        }
    }

    /// Where the watch may have missed changes so far, notified of each.
    pub fn gaps(&self) -> watch::Receiver<Vec<WatchGap>> {
        self.gaps.clone()
    }

    /// Waits until `find` answers `Some` for the versions recorded so far
    /// (re-asked on every new version); panics with `what` and the last
    /// version seen after `timeout`.
    pub async fn wait_for<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut find: impl FnMut(&[Observed<K>]) -> Option<T>,
    ) -> T {
        let mut receiver = self.records.clone();
        let mut found = None;
        let outcome = tokio::time::timeout(
            timeout,
            receiver.wait_for(|records| {
                found = find(records);
                found.is_some()
            }),
        )
        .await;
        match (outcome, found) {
            (Ok(Ok(_)), Some(found)) => found,
            _ => panic!(
                "timed out after {timeout:?} waiting for {what}; the newest version of each of the {} seen:\n{}",
                self.what,
                self.describe_last()
            ),
        }
    }

    /// The versions recorded so far, notified of each new one: for a
    /// follower that turns versions into facts as they come.
    pub fn follow(&self) -> watch::Receiver<Vec<Observed<K>>> {
        self.records.clone()
    }

    /// Every version recorded so far.
    pub fn snapshot(&self) -> Vec<Observed<K>> {
        self.records.borrow().clone()
    }

    /// The name and status of the newest version of each object, in order.
    fn describe_last(&self) -> String {
        let records = self.records.borrow();
        let mut newest: Vec<(String, &Observed<K>)> = Vec::new();
        for record in records.iter() {
            let name = record.object.meta().name.clone().unwrap_or_default();
            match newest.iter_mut().find(|(seen, _)| *seen == name) {
                Some(entry) => entry.1 = record,
                None => newest.push((name, record)),
            }
        }
        if newest.is_empty() {
            return "(none)".into();
        }
        newest
            .iter()
            .map(|(name, record)| {
                let status = serde_json::to_value(&record.object)
                    .map(|value| value["status"].to_string())
                    .unwrap_or_default();
                format!(
                    "{name} at {} (deleted: {}): status {status}",
                    record.at, record.deleted
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl<K> Drop for ObjectHistory<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}
