//! How many Jobs of a namespace were unfinished at once, from one watch:
//! every event, not samples. The fleet test checks the operator's limit
//! with it and `just bench-scale` judges it. A watch error may hide Jobs
//! that started and finished before the watch saw them again, so the
//! count then is a lower bound: the errors are counted, not skipped.
//!
//! Owns: the watch and the count. Must not touch: the Jobs.

use std::collections::{BTreeMap, BTreeSet};

use app::operator::job_state::is_finished;
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt};

/// What the watch saw.
#[derive(Debug, Default)]
pub struct JobsAtOnce {
    /// The most Jobs unfinished (no `Complete` or `Failed` condition) at
    /// any moment.
    pub max: usize,
    /// Which they were, that moment.
    pub at_max: Vec<String>,
    /// Every Job seen.
    pub seen: BTreeSet<String>,
    /// The watch's errors: with any, `max` may be short of the truth.
    pub errors: usize,
    /// The first of them.
    pub first_error: Option<String>,
}

impl JobsAtOnce {
    /// Whether the watch saw every event (no error): `max` is then exact.
    pub fn whole(&self) -> bool {
        self.errors == 0
    }
}

/// Watches the Jobs of `namespace` until `stop` resolves; a watch error
/// is counted and restarts the watch (kube's watcher re-lists), and a
/// re-list replaces what was known.
pub async fn watch(
    client: Client,
    namespace: String,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) -> JobsAtOnce {
    let jobs: Api<Job> = Api::namespaced(client, &namespace);
    let mut events =
        std::pin::pin!(watcher::watcher(jobs, watcher::Config::default()).default_backoff());
    let mut unfinished: BTreeMap<String, bool> = BTreeMap::new();
    let mut relisting: Option<BTreeMap<String, bool>> = None;
    let mut seen = JobsAtOnce::default();
    loop {
        let event = tokio::select! {
            event = events.next() => event,
            _ = &mut stop => return seen,
        };
        let event = match event {
            // The watcher's stream does not end; if it did, nothing more is seen.
            None => return seen,
            Some(Err(error)) => {
                seen.errors += 1;
                seen.first_error.get_or_insert_with(|| error.to_string());
                continue;
            }
            Some(Ok(event)) => event,
        };
        match event {
            Event::Apply(job) => {
                seen.seen.insert(job.name_any());
                unfinished.insert(job.name_any(), !is_finished(&job));
            }
            Event::Delete(job) => {
                unfinished.remove(&job.name_any());
            }
            Event::Init => relisting = Some(BTreeMap::new()),
            Event::InitApply(job) => {
                seen.seen.insert(job.name_any());
                if let Some(list) = relisting.as_mut() {
                    list.insert(job.name_any(), !is_finished(&job));
                }
            }
            Event::InitDone => {
                if let Some(list) = relisting.take() {
                    unfinished = list;
                }
            }
        }
        let running: Vec<String> = unfinished
            .iter()
            .filter(|(_, running)| **running)
            .map(|(name, _)| name.clone())
            .collect();
        if running.len() > seen.max {
            seen.max = running.len();
            seen.at_max = running;
        }
    }
}
