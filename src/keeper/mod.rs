//! The keeper: keeps an operator's verdict in its OperatorCondition for as
//! long as the operator runs — the other half of the gate, after the init
//! container's `hold`.
//!
//! The object is not the operator's alone. OLM recreates it empty after a
//! deletion (and an absent `Upgradeable` means upgradeable); `upgrade-gate
//! release`, a person or a GitOps tool may rewrite `spec.conditions`. So
//! the keeper watches the object, reads it on every change it is told of
//! (and every [`WATCHED_POLL_INTERVAL`] besides, every [`POLL_INTERVAL`]
//! while the watch is down) and puts the verdict back whenever the object
//! shows something else. It writes a verdict only while it is the latest
//! it was given (a newer one arriving while a write is on its way drops
//! that write, as does [`Verdict::still_current`] saying no) and only while
//! the process leads; a write with its retries is given up after
//! [`WRITE_BUDGET`].
//!
//! **While the release waits to lead** ([`Keeper::wait_to_lead`]). Between
//! the init container's `hold` and the new leader's first verdict, nobody
//! else keeps this release's OperatorCondition: the release it replaces
//! keeps its own (another object), and waiting out that release's kept
//! Lease takes up to the lease duration (15 s). A foreign `True` written
//! then is copied by OLM, and the next release may start. So a keeper runs
//! during the wait too, following the election's [`Standing`]:
//!
//! | the Lease | this keeper |
//! | --- | --- |
//! | held by a replica of this release (its annotation; renewed within the renew deadline) | writes nothing: that leader keeps the gate, open or not |
//! | held by another release, one that names none, or one silent for the renew deadline | keeps `Upgradeable=False`: any `False` will do, anything else (a foreign `True`, the entry dropped, the object recreated empty by OLM) is replaced by [`waiting_entry`] |
//! | not read yet | writes nothing |
//!
//! Only a leader writes a verdict, so only a leader opens the gate; a
//! replica that does not lead only ever restores `False`, the safe
//! direction. Once this process leads, the waiting keeper stops before
//! the leader's keeper starts, and the leader's keeper goes on keeping
//! `False` until its first verdict unless it took the Lease over from its
//! own release ([`Leadership::succeeds_own_release`]: that leader's open
//! gate stays as it is until this one decides). What it keeps is
//! [`KeeperStatus::keeps`]; the decisions are `rules`' ([`Keeps`]).
//!
//! Owns: finding the OperatorCondition as `hold` does
//! ([`crate::locate::find`]: the configured name, checked against the
//! pod's owners when it may read them; nothing outside OLM or under OLM
//! v1), reading what the object shows, writing the verdict's entry, and
//! reporting what it did ([`KeeperStatus`], [`KeeperEvents`], tracing).
//! Must not touch: the verdict (the operator's), any condition but
//! `Upgradeable` (the library keeps foreign entries and cannot delete), or
//! leadership (it is told whether it leads, and where the election stands).
//!
//! ```no_run
//! use tokio::sync::watch;
//! use upgrade_gate::locate::Target;
//! use upgrade_gate::keeper::Keeper;
//! use upgrade_gate::operator_condition::{Reason, UpgradeableEntry};
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let client = kube::Client::try_default().await?;
//! // OPERATOR_CONDITION_NAME (OLM injects it), POD_NAMESPACE or the
//! // service-account namespace, POD_NAME when the pod may read its owners.
//! let target = Target::from_env()?;
//! let (verdicts, latest) = watch::channel(None);
//! let keeper = Keeper::new(client, target).start(latest);
//!
//! verdicts.send_replace(Some(UpgradeableEntry::closed(
//!     Reason::new("UpgradeInProgress")?,
//!     "migrating the schema to 1.3.0",
//! )?));
//! // ... the upgrade runs; the keeper restores the entry if anyone changes it ...
//! verdicts.send_replace(Some(UpgradeableEntry::open(
//!     Reason::new("UpgradeComplete")?,
//!     "schema is at 1.3.0",
//! )?));
//! keeper.stop().await;
//! # Ok(())
//! # }
//! ```
//!
//! With leader election, the keeper waits to lead with the elector and
//! keeps the gate closed meanwhile; the keeper it hands back writes only
//! while the process leads:
//!
//! ```no_run
//! use tokio::sync::watch;
//! use upgrade_gate::keeper::Keeper;
//! use upgrade_gate::leader::{Elector, LeaseSettings, Standing};
//! use upgrade_gate::locate::Target;
//! use upgrade_gate::operator_condition::{Reason, UpgradeableEntry};
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let client = kube::Client::try_default().await?;
//! let target = Target::from_env()?;
//! // Every release shares the Lease's name; each writes its release into it.
//! let settings = LeaseSettings::new("my-operator", &target.namespace, "my-operator-5d8f-x2_1")
//!     .of_release("1.3.0");
//! let elector = Elector::new(client.clone(), settings)?;
//! let (standing, _seen) = watch::channel(Standing::Unknown);
//! let stop = async { tokio::signal::ctrl_c().await.ok(); };
//! let Some((leadership, keeper)) = Keeper::new(client, target)
//!     .wait_to_lead(elector, &standing, stop)
//!     .await
//! else {
//!     return Ok(()); // stopped before leading
//! };
//! let (verdicts, latest) = watch::channel(None);
//! let keeper = keeper.start(latest);
//! verdicts.send_replace(Some(UpgradeableEntry::closed(
//!     Reason::new("UpgradeInProgress")?,
//!     "migrating the schema to 1.3.0",
//! )?));
//! // ... until stopped: stop writing, then hand the Lease over.
//! keeper.stop().await;
//! leadership.step_down().await;
//! # Ok(())
//! # }
//! ```

mod rules;
mod run;
mod types;

use std::sync::Arc;

use tokio::sync::watch;

use crate::leader::{Elector, Leadership, Standing};
use crate::locate::Target;
use crate::operator_condition::{Reason, UpgradeableEntry};
use crate::task::TaskHandle;

pub use rules::{Found, Keeps, POLL_INTERVAL, WATCHED_POLL_INTERVAL, WatchState};
pub use types::{
    Evidence, Keeper, KeeperEvents, KeeperStatus, LOCATE_BUDGET, LastWrite, MAX_BASIS_BYTES,
    NoEvents, Place, READ_BUDGET, STALE_RECHECK, Verdict, WRITE_BUDGET,
};

/// The reason of [`waiting_entry`].
pub const WAITING_REASON: &str = "WaitingToLead";

/// What a release's keeper writes while the release has no verdict yet
/// (it waits to lead, or leads and has not decided): `Upgradeable=False`,
/// reason [`WAITING_REASON`], saying so in the words OLM shows the user
/// (`operator is not upgradeable: <message>`). `None` for a release
/// string too long for a condition's message.
pub fn waiting_entry(release: &str) -> Option<UpgradeableEntry> {
    let reason = Reason::new(WAITING_REASON).ok()?;
    UpgradeableEntry::closed(
        reason,
        format!(
            "release {release} of this operator is starting: it waits to lead (the leader Lease is held by another release, or by a process that stopped renewing it), then checks its upgrade; its leader opens the gate when the upgrade is complete"
        ),
    )
    .ok()
}

impl Keeper {
    /// A keeper of the OperatorCondition `target` names (found as `hold`
    /// finds it), leading at once, counting nothing.
    pub fn new(client: kube::Client, target: Target) -> Keeper {
        Keeper {
            client,
            target,
            leading: None,
            events: Arc::new(NoEvents),
            election: None,
            closed: None,
            found: None,
        }
    }

    /// Writes only while `leading` says true (e.g.
    /// [`crate::leader::Leadership::leading`]); a write under way when it
    /// turns false is abandoned.
    pub fn leading(mut self, leading: watch::Receiver<bool>) -> Keeper {
        self.leading = Some(leading);
        self
    }

    /// Reports to `events` (metrics).
    pub fn events(mut self, events: Arc<dyn KeeperEvents>) -> Keeper {
        self.events = events;
        self
    }

    /// Waits until `elector` leads, unless `stop` resolves first
    /// ([`Elector::lead_unless_stopped`], publishing on `standing`), and
    /// keeps the gate closed meanwhile while no replica of this release
    /// leads (the module's table). Returns the leadership and this keeper,
    /// to be started with the leader's verdicts: it writes only while the
    /// process leads, and keeps `Upgradeable=False` until the first
    /// verdict unless the Lease was taken over from this release
    /// ([`Leadership::succeeds_own_release`]). `None` after a stop; the
    /// waiting keeper has stopped either way.
    ///
    /// Needs the release in the elector's settings
    /// ([`crate::leader::LeaseSettings::of_release`]): without it a holder
    /// of this release cannot be told from another release's, so nothing
    /// is kept while waiting (said in a warning), as before this existed.
    pub async fn wait_to_lead(
        self,
        elector: Elector,
        standing: &watch::Sender<Standing>,
        stop: impl Future<Output = ()>,
    ) -> Option<(Leadership, Keeper)> {
        let closed = elector
            .settings()
            .release
            .as_deref()
            .and_then(waiting_entry);
        if closed.is_none() {
            tracing::warn!(
                lease = %elector.settings().name,
                "the Lease settings name no release (or one too long): the gate is not kept while this process waits to lead"
            );
        }
        let waiting = closed.clone().map(|closed| {
            let (verdicts, none) = watch::channel::<Option<UpgradeableEntry>>(None);
            let keeper = Keeper {
                leading: None,
                election: Some(standing.subscribe()),
                closed: Some(closed),
                ..self.clone()
            }
            .start(none);
            (verdicts, keeper)
        });
        let leadership = elector.lead_unless_stopped(standing, stop).await;
        let mut found = None;
        if let Some((_verdicts, keeper)) = waiting {
            let status = keeper.status();
            // Stopped before the leader's keeper starts: one writer at a time.
            keeper.stop().await;
            // Read once it has ended: a search that ended during the stop
            // (and logged what it found) is not made again.
            let place = status.borrow().place.clone();
            found = match place {
                Place::Keeping { name } => Some(Ok(name)),
                Place::Idle { why } => Some(Err(why)),
                Place::Locating => None,
            };
        }
        let leadership = leadership?;
        let mut keeper = self.leading(leadership.leading());
        keeper.found = found;
        if !leadership.succeeds_own_release() {
            keeper.closed = closed;
        }
        Some((leadership, keeper))
    }

    /// Starts keeping the latest verdict of `verdicts` (`None`: none yet,
    /// nothing is written) until [`TaskHandle::stop`], or until the
    /// sender is dropped.
    pub fn start<V: Verdict>(self, verdicts: watch::Receiver<Option<V>>) -> KeeperHandle {
        TaskHandle::spawn("keeper", KeeperStatus::default(), |status, stop| {
            run::keep(self, verdicts, status, stop)
        })
    }
}

/// A running keeper: [`TaskHandle::status`] says what it did,
/// [`TaskHandle::stop`] stops it before leadership is released.
pub type KeeperHandle = TaskHandle<KeeperStatus>;

#[cfg(test)]
mod tests;
