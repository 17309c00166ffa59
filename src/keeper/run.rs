//! The keeper's requests: find the OperatorCondition, then, round after
//! round, read it when due and write what it keeps ([`Keeps`]: the
//! verdict, or `Upgradeable=False` while the release waits to lead) when
//! it shows something else (the rules are `super::rules`').
//!
//! Owns: the loop, its wake-ups (a new verdict, a change of leadership or
//! of the election's standing, the object's watch, the poll timer, stop)
//! and what each round logs and reports. Must not touch: any object but
//! the OperatorCondition (and what `locate::find` reads to find it).

use std::future::Future;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::runtime::watcher;
use tokio::sync::watch;
use tokio::time::Instant;

use super::rules::{
    Found, Goal, Keeps, NextWrite, Revision, Role, Shown, WatchState, keeps, next_write_for,
    poll_interval, restored, role_after, unanswered_write_landed, wakes,
};
use super::types::{
    Keeper, KeeperEvents, KeeperStatus, LOCATE_BUDGET, LastWrite, Place, READ_BUDGET,
    STALE_RECHECK, Verdict, WRITE_BUDGET,
};
use crate::leader::Standing;
use crate::locate::{self, Located};
use crate::operator_condition::{OperatorConditionClient, UpgradeableEntry};
use crate::telemetry::error_chain;

/// How long the keeper waits before it looks for its OperatorCondition
/// again after discovery or the API server failed.
const LOCATE_RETRY: Duration = Duration::from_secs(5);

/// The keeper's inputs and outputs, shared by its steps.
struct Inputs<V> {
    verdicts: watch::Receiver<Option<V>>,
    leading: Option<watch::Receiver<bool>>,
    /// The election's standing, for a keeper started before it leads.
    election: Option<watch::Receiver<Standing>>,
    /// What it writes to keep the gate closed, if it does.
    closed: Option<UpgradeableEntry>,
    /// The role as of the last round (what `election` said last but `Unknown`).
    role: Role,
    stop: watch::Receiver<bool>,
    status: watch::Sender<KeeperStatus>,
    events: std::sync::Arc<dyn KeeperEvents>,
}

impl<V: Verdict> Inputs<V> {
    /// The role now: from the election's standing for a keeper that
    /// waits to lead, from leadership for a leader's, leading at once
    /// without either.
    fn role_now(&self) -> Role {
        if let Some(election) = &self.election {
            return role_after(self.role, &election.borrow());
        }
        match &self.leading {
            Some(leading) if !*leading.borrow() => Role::Idle,
            Some(_) | None => Role::Leading,
        }
    }

    /// What it keeps now.
    fn keeps_now(&self) -> Keeps {
        keeps(
            self.role_now(),
            self.verdicts.borrow().is_some(),
            self.closed.is_some(),
        )
    }

    fn stopped(&self) -> bool {
        *self.stop.borrow()
    }

    /// Resolves once a stop is asked for (or its sender is gone).
    fn stop_asked(&self) -> impl Future<Output = ()> + use<V> {
        let mut stop = self.stop.clone();
        async move {
            let _sender_gone = stop.wait_for(|stop| *stop).await;
        }
    }

    /// Resolves once the role is no longer `role` (never without a
    /// leadership or election input): a write for the old one is
    /// abandoned.
    fn role_left(&self, role: Role) -> impl Future<Output = ()> + use<V> {
        let leading = self.leading.clone();
        let election = self.election.clone();
        async move {
            match (election, leading) {
                (Some(mut election), _) => {
                    let _sender_gone = election
                        .wait_for(|standing| role_after(role, standing) != role)
                        .await;
                }
                (None, Some(mut leading)) => {
                    let _sender_gone = leading.wait_for(|leads| !*leads).await;
                }
                (None, None) => std::future::pending().await,
            }
        }
    }

    fn publish(&self, change: impl FnOnce(&mut KeeperStatus)) {
        self.status.send_modify(change);
    }
}

/// Resolves on the next change of `input` (never without it, or once its
/// sender is gone: the value stays as it was last).
async fn changed<T>(input: &mut Option<watch::Receiver<T>>) {
    let gone = match input.as_mut() {
        Some(input) => input.changed().await.is_err(),
        None => true,
    };
    if gone {
        std::future::pending::<()>().await;
    }
}

/// Runs the keeper until stopped or the verdicts' sender is gone.
pub(super) async fn keep<V: Verdict>(
    keeper: Keeper,
    verdicts: watch::Receiver<Option<V>>,
    status: watch::Sender<KeeperStatus>,
    stop: watch::Receiver<bool>,
) {
    let mut inputs = Inputs {
        verdicts,
        leading: keeper.leading,
        election: keeper.election,
        closed: keeper.closed,
        role: Role::Idle,
        stop,
        status,
        events: keeper.events,
    };
    let located = match keeper.found {
        Some(found) => found,
        None => tokio::select! {
            located = locate(&keeper.client, &keeper.target, &inputs) => located,
            () = inputs.stop_asked() => return,
        },
    };
    match located {
        Ok(name) => {
            let condition =
                OperatorConditionClient::new(keeper.client, &keeper.target.namespace, &name);
            inputs.publish(|status| status.place = Place::Keeping { name: name.clone() });
            tracing::info!(operator_condition = %name, namespace = %keeper.target.namespace, "keeping the verdict in the OperatorCondition");
            keep_in(&condition, &mut inputs).await;
        }
        Err(why) => {
            inputs.publish(|status| status.place = Place::Idle { why: why.clone() });
            idle(&mut inputs).await;
        }
    }
}

/// Finds the OperatorCondition as `hold` does; `Err` says why there is
/// none (logged once). Discovery or API failures are retried until found.
async fn locate<V: Verdict>(
    client: &kube::Client,
    target: &locate::Target,
    inputs: &Inputs<V>,
) -> Result<String, String> {
    loop {
        match locate::find(client, target, Instant::now() + LOCATE_BUDGET).await {
            Ok((_, Located::Gate { name, .. })) => return Ok(name),
            Ok((_, Located::Outside(outside))) => {
                tracing::info!(why = %outside, "no OperatorCondition guards this operator: the verdict is not written");
                return Err(outside.to_string());
            }
            Err(locate::Error::Setup(setup)) => {
                tracing::warn!(error = %setup, "no OperatorCondition to keep the verdict in: the verdict is not written");
                return Err(setup.to_string());
            }
            Err(error) => {
                let error = error_chain(&error);
                tracing::warn!(%error, retry_in = ?LOCATE_RETRY, "cannot find the OperatorCondition yet");
                inputs.publish(|status| status.last_error = Some(error));
                tokio::time::sleep(LOCATE_RETRY).await;
            }
        }
    }
}

/// Nothing to keep: each new verdict is logged and reported as applied.
async fn idle<V: Verdict>(inputs: &mut Inputs<V>) {
    loop {
        if let Some(verdict) = inputs.verdicts.borrow_and_update().clone() {
            let entry = verdict.entry();
            tracing::info!(
                upgradeable = entry.state().condition_status(),
                reason = entry.reason().as_str(),
                message = entry.message(),
                "verdict (not written: no OperatorCondition)"
            );
            inputs.events.applied(entry, false);
        }
        let stop = inputs.stop_asked();
        tokio::select! {
            changed = inputs.verdicts.changed() => if changed.is_err() { return },
            () = stop => return,
        }
    }
}

/// What the keeper knows about the object between rounds.
#[derive(Default)]
struct Memory {
    /// What the object showed after our last write or matching read.
    last_shown: Option<Shown>,
    /// What it kept that the object showed then (for [`Keeps::Closed`],
    /// the entry it would write).
    settled: Option<(Keeps, UpgradeableEntry)>,
    /// What it keeps as of the last round.
    keeps: Keeps,
    /// When the object was last read (`None`: read it in the next round).
    last_read: Option<Instant>,
    /// Whether the object's watch reports its changes.
    watch: WatchState,
    /// The object is gone and that was logged.
    awaiting_logged: bool,
    /// What the last write was to restore when it failed: it may have been
    /// carried out all the same (its answer cut off by the write budget),
    /// which the next read tells.
    unanswered_restore: Option<UnansweredRestore>,
}

/// A restoring write given up without an answer.
#[derive(Debug)]
struct UnansweredRestore {
    found: Found,
    /// The version of the object it was sent to replace.
    base: Revision,
}

/// The result of one round.
enum Round {
    /// The object shows the verdict, or there is nothing to do now.
    Settled,
    /// Not (yet): a read or write failed, the object is gone, or
    /// leadership ended during the write.
    Pending,
    /// The verdict went stale while it was written.
    Stale,
}

async fn keep_in<V: Verdict>(condition: &OperatorConditionClient, inputs: &mut Inputs<V>) {
    let mut memory = Memory::default();
    let mut changes: BoxStream<'static, _> = condition.changes().boxed();
    loop {
        if inputs.stopped() {
            return;
        }
        inputs.role = inputs.role_now();
        let verdict = inputs.verdicts.borrow_and_update().clone();
        let now_keeps = keeps(inputs.role, verdict.is_some(), inputs.closed.is_some());
        if now_keeps != memory.keeps {
            tracing::info!(keeps = ?now_keeps, role = ?inputs.role, "{}", keeps_line(now_keeps, inputs.role));
            memory.keeps = now_keeps;
            // Read at once: the object may have changed while it kept something else.
            memory.last_read = None;
            inputs.publish(|status| status.keeps = now_keeps);
        }
        let closed = inputs.closed.clone();
        let round = match (now_keeps, &verdict, &closed) {
            (Keeps::Verdict, Some(verdict), _) => {
                let still_current = || verdict.still_current();
                round(
                    condition,
                    Goal::Verdict(verdict.entry()),
                    &still_current,
                    inputs,
                    &mut memory,
                )
                .await
            }
            (Keeps::Closed, _, Some(closed)) => {
                round(
                    condition,
                    Goal::Closed(closed),
                    &|| true,
                    inputs,
                    &mut memory,
                )
                .await
            }
            _ => Round::Settled,
        };
        let pause = match round {
            Round::Stale => {
                inputs.events.dropped_stale();
                if inputs.verdicts.has_changed().unwrap_or(false) {
                    tracing::debug!(
                        "a newer verdict came while the last was written; taking it up"
                    );
                    continue;
                }
                STALE_RECHECK
            }
            Round::Settled | Round::Pending => {
                let interval = poll_interval(memory.watch);
                memory
                    .last_read
                    .map_or(interval, |read| interval.saturating_sub(read.elapsed()))
            }
        };
        let stop = inputs.stop_asked();
        tokio::select! {
            changed = inputs.verdicts.changed() => if changed.is_err() { return },
            () = stop => return,
            () = changed(&mut inputs.leading) => memory.last_read = None,
            // The next round takes the role up (and reads when it changes).
            () = changed(&mut inputs.election) => {}
            Some(item) = changes.next() => watched(&item, &mut memory, inputs),
            () = tokio::time::sleep(pause) => {}
        }
    }
}

/// The log line for what the keeper keeps from now on.
fn keeps_line(keeps: Keeps, role: Role) -> &'static str {
    match (keeps, role) {
        (Keeps::Verdict, _) => "keeping the verdict in the OperatorCondition",
        (Keeps::Closed, Role::Waiting) => {
            "no replica of this release leads: keeping Upgradeable=False in the OperatorCondition while this release waits to lead"
        }
        (Keeps::Closed, _) => {
            "leading, no verdict yet: keeping Upgradeable=False in the OperatorCondition until the first"
        }
        (Keeps::Nothing, Role::StandBy) => {
            "a replica of this release leads and keeps the gate: writing nothing"
        }
        (Keeps::Nothing, _) => "keeping nothing in the OperatorCondition for now",
    }
}

/// Takes one item of the object's watch into `memory`: a change makes the
/// next round read the object; the watch going down or coming back is
/// logged, with how often the object is read from then on.
fn watched<K, V: Verdict>(
    item: &Result<watcher::Event<K>, watcher::Error>,
    memory: &mut Memory,
    inputs: &Inputs<V>,
) {
    if wakes(item) {
        memory.last_read = None;
    }
    let before = memory.watch;
    memory.watch = before.after(item);
    if memory.watch == before {
        return;
    }
    let state = memory.watch;
    inputs.publish(|status| status.watch = state);
    let every = poll_interval(memory.watch).as_secs();
    match item {
        Err(error) => tracing::warn!(
            error = %error_chain(error),
            "cannot watch the OperatorCondition (it needs list and watch on it); reading it every {every} s until the watch is back"
        ),
        Ok(_) => tracing::info!(
            "watching the OperatorCondition: read on every change, and every {every} s besides"
        ),
    }
}

/// One round against the object: read it when due, then write what it
/// keeps (`goal`) if it shows something else.
async fn round<V: Verdict>(
    condition: &OperatorConditionClient,
    goal: Goal<'_>,
    still_current: &(dyn Fn() -> bool + Sync),
    inputs: &Inputs<V>,
    memory: &mut Memory,
) -> Round {
    let entry = goal.entry();
    let verdict = goal.keeps() == Keeps::Verdict;
    let changed = memory
        .settled
        .as_ref()
        .is_none_or(|(keeps, settled)| *keeps != goal.keeps() || settled != entry);
    let due = memory
        .last_read
        .is_none_or(|read| read.elapsed() >= poll_interval(memory.watch));
    if !changed && !due {
        return Round::Settled;
    }
    memory.last_read = Some(Instant::now());
    let object = match condition.get(Instant::now() + READ_BUDGET).await {
        Ok(object) => object,
        Err(error) => {
            failed(
                inputs,
                &error,
                "cannot read the OperatorCondition; trying again",
            );
            return Round::Pending;
        }
    };
    let shown = Shown::of(object.as_ref());
    let revision = object.as_ref().map(Revision::of);
    let unanswered = memory.unanswered_restore.take();
    let restore = match next_write_for(goal, &shown, memory.last_shown.as_ref()) {
        NextWrite::Nothing => {
            if let Some(UnansweredRestore { found, .. }) = unanswered {
                tracing::info!(
                    found = found.label(),
                    "the write that failed for want of an answer had restored the verdict"
                );
                count_restore(inputs, &found);
            }
            memory.last_shown = Some(shown);
            memory.awaiting_logged = false;
            if changed && verdict {
                tracing::info!(
                    upgradeable = entry.state().condition_status(),
                    reason = entry.reason().as_str(),
                    message = entry.message(),
                    "verdict taken; the OperatorCondition already says so"
                );
                inputs.events.applied(entry, false);
            }
            settle(memory, inputs, goal);
            return Round::Settled;
        }
        NextWrite::AwaitObject => {
            if !memory.awaiting_logged {
                tracing::warn!(
                    name = condition.name(),
                    "the OperatorCondition is gone; the verdict is restored as soon as OLM recreates it"
                );
                memory.awaiting_logged = true;
            }
            unsettle(memory, inputs);
            return Round::Pending;
        }
        NextWrite::Write { restore } => {
            // Changed again since a write given up without an answer: that
            // write counts if it was carried out before the change.
            if let Some(UnansweredRestore { found, base }) = unanswered
                && unanswered_write_landed(&base, revision.as_ref())
            {
                tracing::info!(
                    found = found.label(),
                    "the write that failed for want of an answer had restored the verdict before the object changed again"
                );
                count_restore(inputs, &found);
            }
            restore
        }
    };
    memory.awaiting_logged = false;
    if let Some(found) = &restore {
        let what = if verdict {
            "the OperatorCondition no longer shows the verdict; restoring it"
        } else {
            "the OperatorCondition shows no Upgradeable=False and this release has no verdict yet (it waits to lead, or its leader has not decided); closing the gate again"
        };
        tracing::warn!(
            found = found.label(), shown = ?shown, upgradeable = entry.state().condition_status(), reason = entry.reason().as_str(),
            "{what}"
        );
        unsettle(memory, inputs);
    }
    let role = inputs.role;
    let still_wanted = || {
        !inputs.stopped()
            && inputs.role_now() == role
            && inputs.keeps_now() == goal.keeps()
            && (!verdict || !inputs.verdicts.has_changed().unwrap_or(true))
            && still_current()
    };
    let write = condition.set_if(entry, Instant::now() + WRITE_BUDGET, still_wanted);
    let written = tokio::select! {
        written = write => written,
        () = inputs.role_left(role) => {
            tracing::info!(role = ?role, "this process's standing changed while the OperatorCondition was written; the write is abandoned");
            memory.settled = None;
            return Round::Pending;
        }
        () = inputs.stop_asked() => return Round::Pending,
    };
    match written {
        Ok(Some(written)) => {
            let wrote = written.changed();
            // Judged on what the update replaced: a change that landed after
            // the read above is restored by this write too.
            let restore = written.replaced().and_then(|replaced| {
                restored(goal, &Shown::of(Some(replaced)), memory.last_shown.as_ref())
            });
            if let Some(found) = &restore {
                count_restore(inputs, found);
            }
            tracing::info!(
                upgradeable = entry.state().condition_status(),
                reason = entry.reason().as_str(),
                message = entry.message(),
                changed = wrote,
                restored = restore.as_ref().map(Found::label),
                "{}",
                if verdict {
                    "verdict written"
                } else {
                    "Upgradeable=False written: this release has no verdict yet"
                }
            );
            if verdict {
                inputs.events.applied(entry, wrote);
            }
            if wrote {
                let write = LastWrite {
                    at: k8s_openapi::jiff::Timestamp::now(),
                    verdict: entry.clone(),
                    restored: restore,
                };
                inputs.publish(|status| status.last_write = Some(write));
            }
            memory.last_shown = Some(Shown::of(Some(written.object())));
            settle(memory, inputs, goal);
            Round::Settled
        }
        // Only a verdict goes stale; a closed gate's write is dropped when
        // the role or what it keeps changed, taken up by the next round.
        Ok(None) if verdict => Round::Stale,
        Ok(None) => Round::Pending,
        Err(error) => {
            failed(
                inputs,
                &error,
                "cannot write the OperatorCondition; trying again",
            );
            memory.settled = None;
            memory.unanswered_restore = restore
                .zip(revision)
                .map(|(found, base)| UnansweredRestore { found, base });
            Round::Pending
        }
    }
}

fn settle<V: Verdict>(memory: &mut Memory, inputs: &Inputs<V>, goal: Goal<'_>) {
    let entry = goal.entry();
    memory.settled = Some((goal.keeps(), entry.clone()));
    let applied = match goal {
        Goal::Verdict(entry) => Some(entry.clone()),
        Goal::Closed(_) => None,
    };
    inputs.publish(|status| {
        status.applied = applied;
        status.last_error = None;
    });
}

fn unsettle<V: Verdict>(memory: &mut Memory, inputs: &Inputs<V>) {
    memory.settled = None;
    inputs.publish(|status| status.applied = None);
}

fn count_restore<V: Verdict>(inputs: &Inputs<V>, found: &Found) {
    inputs.events.restored(found);
    inputs.publish(|status| status.restores += 1);
}

fn failed<V: Verdict>(inputs: &Inputs<V>, error: &crate::operator_condition::Error, what: &str) {
    let line = error_chain(error);
    tracing::warn!(error = %line, "{what}");
    inputs.events.failed(error);
    inputs.publish(|status| status.last_error = Some(line));
}
