//! Leader election over a `coordination.k8s.io/v1` Lease, with the rules
//! of client-go's `leaderelection` package (what controller-runtime uses):
//! a holder renews every retry period and gives up leadership when it could
//! not renew for the renew deadline; a candidate takes the Lease over when
//! it is free (`holderIdentity` empty: released) or when the record has not
//! changed for the lease duration, measured on the candidate's own clock
//! from when it saw the record change — never by comparing the holder's
//! `renewTime` with the local clock, so skewed clocks cannot shorten a
//! lease. Every write is an update carrying the resourceVersion it was
//! decided from: of two candidates only one can win (the other gets 409).
//!
//! Owns: the one Lease named in [`LeaseSettings`] in the operator's
//! namespace — reading it, creating it, renewing it, releasing it — and
//! telling the rest of the operator whether it leads ([`Standing`],
//! [`Leadership::leading`]). Must not touch: anything else; what the
//! operator does as leader is the operator's.
//!
//! Which release leads: every release of an operator shares the Lease, so
//! a replica waiting for it cannot tell from `holderIdentity` alone whether
//! the holder runs its own release (a standby's leader, which keeps the
//! gate) or another one (the release it replaces, whose kept Lease it
//! waits out: nobody keeps its gate meanwhile). So a holder writes its
//! release ([`LeaseSettings::release`]) into the Lease's annotation
//! [`RELEASE_ANNOTATION`] with every claim and renewal, and keeps it when
//! it releases the Lease (it then says whose the Lease was last). A
//! candidate reports [`Standing::Following`]'s `own_release` from it
//! ([`release_leads`]), and a leader tells whether it took over from its
//! own release ([`Leadership::succeeds_own_release`], [`same_release`]):
//! `crate::keeper` keeps the gate closed from both.
//!
//! The decisions are pure ([`observe`], [`attempt`], [`claimed`],
//! [`released`], [`release_leads`], [`same_release`], [`annotate`]) and
//! table-tested; [`Elector`] does the requests.
//!
//! Why not a crate (checked for kube 5, December 2026): kube-rs has no
//! leader election (kube-rs/kube#485 is open). `kube-leader-election`
//! 0.44.0 (June 2026) requires kube 4 and judges expiry by timestamps
//! across clocks. `kube-lease-manager` 0.13.1 (kube 5, maintained: 0.11
//! to 0.13 in 2026) judges expiry by adding the holder's `renewTime` to
//! the local clock, keeps reporting leadership while its renewals fail
//! (it has no renew deadline), renews only every `duration - grace` whole
//! seconds, and bounds no release by a deadline. The renew deadline is
//! what keeps two leaders from writing the gate at once, and a release
//! bounded by it is what hands over within seconds, so this module keeps
//! client-go's rules on kube's typed Lease API.
//!
//! ```no_run
//! use std::time::Duration;
//! use tokio::sync::watch;
//! use upgrade_gate::leader::{Elector, LeaseSettings, Standing};
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let client = kube::Client::try_default().await?;
//! let settings = LeaseSettings::new("my-operator", "operators", "my-operator-5d8f-x2_1");
//! let elector = Elector::new(client, settings)?;
//! let (standing, _seen) = watch::channel(Standing::Unknown);
//! let stop = tokio::signal::ctrl_c();
//! let Some(mut leadership) = elector.lead_unless_stopped(&standing, async { stop.await.ok(); }).await
//! else {
//!     return Ok(()); // stopped before leading; a Lease written in flight was released
//! };
//! tokio::select! {
//!     lost = leadership.lost() => eprintln!("{lost}"),
//!     _ = tokio::time::sleep(Duration::from_secs(60)) => leadership.step_down().await,
//! }
//! # Ok(())
//! # }
//! ```

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use crate::telemetry::error_chain;

/// How the election runs; the defaults are controller-runtime's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseSettings {
    /// The Lease's name (shared by every release of the operator).
    pub name: String,
    /// The operator's namespace.
    pub namespace: String,
    /// This process: unique per start, so a restarted container never
    /// mistakes its predecessor's lease for its own.
    pub identity: String,
    /// How long a candidate waits for a record that stopped changing
    /// before it takes the Lease over (controller-runtime: 15 s).
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives up
    /// leadership (controller-runtime: 10 s). Shorter than the lease
    /// duration, so a leader that cannot renew stops before anyone else
    /// may start.
    pub renew_deadline: Duration,
    /// Between two renewals, and between two tries of a candidate
    /// (controller-runtime: 2 s).
    pub retry_period: Duration,
    /// Whether a graceful stop releases the Lease, so that a successor
    /// takes over at once (controller-runtime's `LeaderElectionReleaseOnCancel`,
    /// off there by default; on here).
    pub release_on_stop: bool,
    /// The release this process runs (e.g. `7.10.0`), written into the
    /// Lease ([`RELEASE_ANNOTATION`]) while it holds it, so that a replica
    /// waiting for the Lease knows whether a replica of its own release
    /// leads. `None`: not written, and every holder counts as another
    /// release's.
    pub release: Option<String>,
}

/// The Lease's annotation naming the holder's release
/// ([`LeaseSettings::release`]); kept when the Lease is released.
pub const RELEASE_ANNOTATION: &str = "upgrade-gate.dev/release";

/// controller-runtime's default lease duration.
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// controller-runtime's default renew deadline.
pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// controller-runtime's default retry period.
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);

/// A candidate's identity, unique per process start: `<who>_<start>_<pid>`,
/// `who` being the pod's name (downward API `POD_NAME`), else the host
/// name, else `fallback`; `start` the start time in microseconds. A
/// restarted container never takes its predecessor's Lease for its own.
pub fn identity(pod: Option<&str>, fallback: &str) -> String {
    let who = pod
        .filter(|pod| !pod.trim().is_empty())
        .map(str::to_owned)
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| fallback.to_owned());
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format!("{who}_{}_{}", started.as_micros(), std::process::id())
}

impl LeaseSettings {
    /// controller-runtime's durations, releasing on stop, for the Lease
    /// `name` in `namespace` and this process's `identity`.
    pub fn new(name: &str, namespace: &str, identity: &str) -> LeaseSettings {
        LeaseSettings {
            name: name.to_owned(),
            namespace: namespace.to_owned(),
            identity: identity.to_owned(),
            lease_duration: DEFAULT_LEASE_DURATION,
            renew_deadline: DEFAULT_RENEW_DEADLINE,
            retry_period: DEFAULT_RETRY_PERIOD,
            release_on_stop: true,
            release: None,
        }
    }

    /// The same settings for a process running `release`
    /// ([`LeaseSettings::release`]).
    pub fn of_release(mut self, release: &str) -> LeaseSettings {
        self.release = Some(release.to_owned());
        self
    }
}

/// The settings cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    /// client-go's rule: the lease must outlast the renew deadline, which
    /// must outlast the retry period, or two leaders can overlap.
    #[error(
        "leader election needs lease duration ({lease:?}) > renew deadline ({renew:?}) > retry period ({retry:?}) > 0"
    )]
    Order {
        /// The lease duration.
        lease: Duration,
        /// The renew deadline.
        renew: Duration,
        /// The retry period.
        retry: Duration,
    },
}

impl LeaseSettings {
    /// Checks client-go's ordering of the three durations.
    pub fn check(&self) -> Result<(), SettingsError> {
        let ordered = self.lease_duration > self.renew_deadline
            && self.renew_deadline > self.retry_period
            && !self.retry_period.is_zero();
        if ordered {
            Ok(())
        } else {
            Err(SettingsError::Order {
                lease: self.lease_duration,
                renew: self.renew_deadline,
                retry: self.retry_period,
            })
        }
    }
}

/// The fields of a Lease the election reads, as the API server returned them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseView {
    /// `holderIdentity`; empty when nobody holds it (released).
    pub holder: String,
    /// `leaseDurationSeconds`.
    pub duration: Duration,
    /// `acquireTime`: compared, with the two below, to notice a renewal.
    pub acquire_time: Option<MicroTime>,
    /// `renewTime`.
    pub renew_time: Option<MicroTime>,
    /// `leaseTransitions`.
    pub transitions: i32,
    /// The holder's release ([`RELEASE_ANNOTATION`]); for a released
    /// Lease, its last holder's. `None`: not written (a holder that names
    /// no release, or another elector).
    pub release: Option<String>,
}

impl LeaseView {
    /// The record of a Lease (a spec-less Lease reads as free).
    pub fn of(lease: &Lease) -> LeaseView {
        let spec = lease.spec.clone().unwrap_or_default();
        LeaseView {
            holder: spec.holder_identity.unwrap_or_default(),
            duration: Duration::from_secs(
                u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0),
            ),
            acquire_time: spec.acquire_time,
            renew_time: spec.renew_time,
            transitions: spec.lease_transitions.unwrap_or(0),
            release: lease
                .metadata
                .annotations
                .as_ref()
                .and_then(|annotations| annotations.get(RELEASE_ANNOTATION))
                .cloned(),
        }
    }
}

/// What a candidate remembers of the Lease: the record last read, when (on
/// its own clock) it last saw the record change, and whether it has seen
/// it change at all since it started looking (a holder that renews is alive).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// The Lease as last read.
    pub lease: LeaseView,
    /// When (on this process's clock) the record was last seen to change.
    pub changed_at: Instant,
    /// Whether it was seen to change at all since this process looked.
    pub seen_changing: bool,
}

/// Folds one read into what was known: the time only moves when the record
/// changed.
pub fn observe(previous: Option<&Observed>, lease: LeaseView, now: Instant) -> Observed {
    match previous {
        Some(previous) if previous.lease == lease => previous.clone(),
        Some(_) => Observed {
            lease,
            changed_at: now,
            seen_changing: true,
        },
        None => Observed {
            lease,
            changed_at: now,
            seen_changing: false,
        },
    }
}

/// What to do after a read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// No Lease yet: create it, holding it.
    Create,
    /// Free (released) or expired: take it over.
    TakeOver,
    /// Ours: renew it.
    Renew,
    /// Someone else holds it and it has not expired: wait.
    Wait {
        /// Who holds it.
        holder: String,
        /// The holder was seen renewing (not just an old record).
        alive: bool,
    },
}

/// The decision after a read (`None`: the Lease does not exist).
pub fn attempt(observed: Option<&Observed>, me: &str, now: Instant) -> Attempt {
    let Some(observed) = observed else {
        return Attempt::Create;
    };
    let record = &observed.lease;
    if record.holder == me {
        Attempt::Renew
    } else if record.holder.is_empty() || observed.changed_at + record.duration <= now {
        Attempt::TakeOver
    } else {
        Attempt::Wait {
            holder: record.holder.clone(),
            alive: observed.seen_changing,
        }
    }
}

/// Whether the holder of the Lease as `observed` is a replica of `release`
/// that may still lead: someone holds it, its annotation names `release`,
/// and its record changed within `renew_deadline` of `now` on this
/// candidate's clock (or was first seen that recently). A leader that
/// could not renew for the renew deadline has stopped writing by client-go's
/// rules, so past it nobody of `release` keeps the gate, although the Lease
/// has not expired yet.
pub fn release_leads(
    observed: &Observed,
    release: &str,
    renew_deadline: Duration,
    now: Instant,
) -> bool {
    let record = &observed.lease;
    !record.holder.is_empty()
        && record.release.as_deref() == Some(release)
        && now < observed.changed_at + renew_deadline
}

/// Whether a Lease taken over from `old` (`None`: created) was last held
/// by a replica of `release` (`None`: this process names none): then that
/// replica's verdict may be in the OperatorCondition, and the new leader
/// leaves it until it has its own.
pub fn same_release(old: Option<&LeaseView>, release: Option<&str>) -> bool {
    match (old, release) {
        (Some(old), Some(release)) => old.release.as_deref() == Some(release),
        _ => false,
    }
}

/// Writes `release` into the Lease's [`RELEASE_ANNOTATION`] (`None`:
/// removes it, so that the Lease never names a release its holder does
/// not run); other annotations stay.
pub fn annotate(metadata: &mut ObjectMeta, release: Option<&str>) {
    match release {
        Some(release) => {
            metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(RELEASE_ANNOTATION.to_owned(), release.to_owned());
        }
        None => {
            if let Some(annotations) = metadata.annotations.as_mut() {
                annotations.remove(RELEASE_ANNOTATION);
            }
        }
    }
}

fn seconds(duration: Duration) -> i32 {
    i32::try_from(duration.as_secs()).unwrap_or(i32::MAX)
}

/// The spec that holds the Lease for `me` (create, take over or renew).
/// A renewal keeps the acquire time and the transition count; a takeover
/// counts one more transition.
pub fn claimed(
    old: Option<&LeaseView>,
    me: &str,
    settings: &LeaseSettings,
    now: Timestamp,
) -> LeaseSpec {
    let renewing = old.is_some_and(|old| old.holder == me);
    let (acquire_time, transitions) = match old {
        Some(old) if renewing => (
            old.acquire_time.clone().unwrap_or(MicroTime(now)),
            old.transitions,
        ),
        Some(old) => (MicroTime(now), old.transitions.saturating_add(1)),
        None => (MicroTime(now), 0),
    };
    LeaseSpec {
        holder_identity: Some(me.to_owned()),
        lease_duration_seconds: Some(seconds(settings.lease_duration)),
        acquire_time: Some(acquire_time),
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(transitions),
        ..LeaseSpec::default()
    }
}

/// The spec that releases the Lease (client-go's release): no holder, a
/// one-second duration, the transition count kept.
pub fn released(old: &LeaseView, now: Timestamp) -> LeaseSpec {
    LeaseSpec {
        holder_identity: None,
        lease_duration_seconds: Some(1),
        acquire_time: Some(MicroTime(now)),
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(old.transitions),
        ..LeaseSpec::default()
    }
}

/// Where this process stands in the election.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Standing {
    /// Not yet read, or the last read failed.
    Unknown,
    /// Waiting for `holder`'s Lease; `alive` once it was seen renewing.
    Following {
        /// Who holds the Lease.
        holder: String,
        /// Whether the holder was seen renewing.
        alive: bool,
        /// Whether the holder is a replica of this process's release that
        /// may still lead ([`release_leads`]): its leader keeps the gate.
        /// False for another release's holder (the one this release
        /// replaces), one that names no release, one silent for the renew
        /// deadline, and whenever this process names no release.
        own_release: bool,
    },
    /// This process leads.
    Leading,
}

/// Why leadership ended other than by a stop.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LostLease {
    /// Another identity holds the Lease now.
    #[error("lost the leader Lease to {holder}")]
    TakenBy {
        /// Who holds it now.
        holder: String,
    },
    /// The Lease was not renewed within the renew deadline.
    #[error("could not renew the leader Lease within {deadline:?}; last error: {last}")]
    NotRenewed {
        /// The renew deadline.
        deadline: Duration,
        /// The last failure.
        last: String,
    },
    /// The renewal task ended without a verdict (it panicked).
    #[error("the Lease renewal stopped unexpectedly")]
    RenewalGone,
}

/// One round's outcome.
enum Round {
    Holding,
    Waiting(Attempt),
}

/// Does the election's requests for one process.
pub struct Elector {
    api: Api<Lease>,
    settings: LeaseSettings,
    observed: Option<Observed>,
    lease: Option<Lease>,
    /// Whether the Lease this process claimed was last held by its own
    /// release ([`same_release`]).
    succeeds_own_release: bool,
}

impl Elector {
    /// An elector for `settings` (checked).
    pub fn new(client: kube::Client, settings: LeaseSettings) -> Result<Self, SettingsError> {
        settings.check()?;
        Ok(Elector {
            api: Api::namespaced(client, &settings.namespace),
            settings,
            observed: None,
            lease: None,
            succeeds_own_release: false,
        })
    }

    /// The settings.
    pub fn settings(&self) -> &LeaseSettings {
        &self.settings
    }

    /// Tries until this process leads, publishing where it stands on
    /// `standing` after every read. Never gives up: a missing right or an
    /// unreachable API server is logged and tried again. Dropped while a
    /// write is in flight, it may leave the Lease naming this process: to
    /// stop while waiting, use [`Elector::lead_unless_stopped`].
    pub async fn acquire(&mut self, standing: &watch::Sender<Standing>) {
        let mut waiting_for: Option<(String, bool)> = None;
        loop {
            match self.round().await {
                Ok(Round::Holding) => {
                    tracing::info!(lease = %self.settings.name, identity = %self.settings.identity, "acquired the leader Lease");
                    standing.send_replace(Standing::Leading);
                    return;
                }
                Ok(Round::Waiting(Attempt::Wait { holder, alive })) => {
                    let own_release = match (&self.observed, &self.settings.release) {
                        (Some(observed), Some(release)) => release_leads(
                            observed,
                            release,
                            self.settings.renew_deadline,
                            Instant::now(),
                        ),
                        _ => false,
                    };
                    let holder_release = self
                        .observed
                        .as_ref()
                        .and_then(|observed| observed.lease.release.clone());
                    if waiting_for.as_ref() != Some(&(holder.clone(), own_release)) {
                        tracing::info!(lease = %self.settings.name, %holder, holder_release = holder_release.as_deref().unwrap_or("not named"), own_release, "another process leads; waiting for its Lease");
                        waiting_for = Some((holder.clone(), own_release));
                    }
                    let now = Standing::Following {
                        holder,
                        alive,
                        own_release,
                    };
                    standing.send_if_modified(|standing| {
                        let changed = *standing != now;
                        *standing = now;
                        changed
                    });
                }
                Ok(Round::Waiting(_)) => {}
                Err(error) => {
                    tracing::warn!(lease = %self.settings.name, namespace = %self.settings.namespace, error = %error_chain(&error), "cannot take part in the leader election (needs get, create and update on coordination.k8s.io leases); retrying");
                    standing.send_if_modified(|standing| {
                        let changed = *standing != Standing::Unknown;
                        *standing = Standing::Unknown;
                        changed
                    });
                }
            }
            tokio::time::sleep(self.settings.retry_period).await;
        }
    }

    /// Tries until this process leads, then keeps leading (the returned
    /// [`Leadership`]), unless `stop` resolves first. A stop can come
    /// between a write that made this process the holder and its answer:
    /// the Lease then names a process that will never renew it, and its
    /// successor would wait out the whole lease duration. So a stop
    /// before leading ends as a stop while leading does: the Lease is
    /// released if it names this process (or kept, when the settings say
    /// so), and `None` is returned.
    pub async fn lead_unless_stopped(
        mut self,
        standing: &watch::Sender<Standing>,
        stop: impl Future<Output = ()>,
    ) -> Option<Leadership> {
        let stopped = tokio::select! {
            biased;
            () = self.acquire(standing) => false,
            () = stop => true,
        };
        if stopped {
            tracing::info!(lease = %self.settings.name, "stopped before leading");
            self.stop_leading().await;
            return None;
        }
        Some(self.keep())
    }

    /// One read and, if the decision says so, one write. 409 on the write
    /// means another candidate wrote first: wait for the next round.
    async fn round(&mut self) -> Result<Round, kube::Error> {
        let lease = self.api.get_opt(&self.settings.name).await?;
        let now = Instant::now();
        self.observed = lease
            .as_ref()
            .map(|lease| observe(self.observed.as_ref(), LeaseView::of(lease), now));
        self.lease = lease;
        let decision = attempt(self.observed.as_ref(), &self.settings.identity, now);
        let old = self.observed.as_ref().map(|o| &o.lease);
        let spec = claimed(
            old,
            &self.settings.identity,
            &self.settings,
            Timestamp::now(),
        );
        let claims_from = match decision {
            Attempt::Renew => None,
            _ => Some(same_release(old, self.settings.release.as_deref())),
        };
        let release = self.settings.release.as_deref();
        let written = match (&decision, &self.lease) {
            (Attempt::Wait { .. }, _) => return Ok(Round::Waiting(decision)),
            (Attempt::Create, _) | (_, None) => {
                let mut metadata = ObjectMeta {
                    name: Some(self.settings.name.clone()),
                    namespace: Some(self.settings.namespace.clone()),
                    ..Default::default()
                };
                annotate(&mut metadata, release);
                let lease = Lease {
                    metadata,
                    spec: Some(spec),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            (Attempt::TakeOver | Attempt::Renew, Some(current)) => {
                let mut lease = current.clone();
                lease.spec = Some(spec);
                annotate(&mut lease.metadata, release);
                self.api
                    .replace(&self.settings.name, &PostParams::default(), &lease)
                    .await
            }
        };
        match written {
            Ok(lease) => {
                if let Some(own) = claims_from {
                    self.succeeds_own_release = own;
                }
                self.observed = Some(observe(
                    self.observed.as_ref(),
                    LeaseView::of(&lease),
                    Instant::now(),
                ));
                self.lease = Some(lease);
                Ok(Round::Holding)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {
                tracing::debug!(lease = %self.settings.name, "another candidate wrote the Lease first");
                Ok(Round::Waiting(decision))
            }
            Err(error) => Err(error),
        }
    }

    /// Renews until leadership is lost (the returned [`Leadership`] says
    /// when) or [`Leadership::step_down`] is called.
    pub fn keep(self) -> Leadership {
        let succeeds_own_release = self.succeeds_own_release;
        let (lost_tx, lost_rx) = oneshot::channel();
        let (stop_tx, stop_rx) = oneshot::channel();
        let (leading_tx, leading_rx) = watch::channel(true);
        let task = tokio::spawn(async move {
            let ended = Ended {
                lost: lost_tx,
                leading: leading_tx,
            };
            self.renew_until_lost(ended, stop_rx).await;
        });
        Leadership {
            lost: lost_rx,
            leading: leading_rx,
            stop: Some(stop_tx),
            task,
            succeeds_own_release,
        }
    }

    async fn renew_until_lost(mut self, ended: Ended, mut stop: oneshot::Receiver<()>) {
        let mut renewed_at = Instant::now();
        loop {
            let deadline = renewed_at + self.settings.renew_deadline;
            let retry_period = self.settings.retry_period;
            let renewal = async {
                tokio::time::sleep(retry_period).await;
                tokio::time::timeout_at(deadline, self.round()).await
            };
            let round = tokio::select! {
                _ = &mut stop => {
                    ended.leading.send_replace(false);
                    self.stop_leading().await;
                    return;
                }
                round = renewal => round,
            };
            let error = match round {
                Ok(Ok(Round::Holding)) => {
                    renewed_at = Instant::now();
                    continue;
                }
                Ok(Ok(Round::Waiting(Attempt::Wait { holder, .. }))) => {
                    ended.lost(LostLease::TakenBy { holder });
                    return;
                }
                Ok(Ok(Round::Waiting(other))) => format!("renewal not written ({other:?})"),
                Ok(Err(error)) => error_chain(&error),
                Err(_) => "renewal timed out".to_owned(),
            };
            if Instant::now() >= deadline {
                ended.lost(LostLease::NotRenewed {
                    deadline: self.settings.renew_deadline,
                    last: error,
                });
                return;
            }
            tracing::warn!(lease = %self.settings.name, %error, "cannot renew the leader Lease; retrying");
        }
    }

    /// On a graceful stop: release the Lease, or keep it until it expires.
    async fn stop_leading(&mut self) {
        if self.settings.release_on_stop {
            self.release().await;
        } else {
            tracing::info!(lease = %self.settings.name, "stopping; the leader Lease is kept until it expires");
        }
    }

    /// Gives the Lease up if this process still holds it (a read, then an
    /// update with its resourceVersion), within the renew deadline, as
    /// client-go's elector does: a loaded API server can take longer than
    /// one retry period, and a release given up on leaves the successor
    /// waiting out the whole lease duration. A conflict means the Lease
    /// changed between the read and the update (a renewal cut short by the
    /// stop landing late, or a successor): read it again.
    async fn release(&mut self) {
        let release = async {
            loop {
                let Some(lease) = self.api.get_opt(&self.settings.name).await? else {
                    return Ok(false);
                };
                let record = LeaseView::of(&lease);
                if record.holder != self.settings.identity {
                    return Ok(false);
                }
                let mut lease = lease;
                lease.spec = Some(released(&record, Timestamp::now()));
                match self
                    .api
                    .replace(&self.settings.name, &PostParams::default(), &lease)
                    .await
                {
                    Ok(_) => return Ok(true),
                    Err(kube::Error::Api(status)) if status.code == 409 => {
                        tracing::debug!(lease = %self.settings.name, "the Lease changed while releasing it; reading it again");
                    }
                    Err(error) => return Err(error),
                }
            }
        };
        match tokio::time::timeout(self.settings.renew_deadline, release).await {
            Ok(Ok(true)) => {
                tracing::info!(lease = %self.settings.name, "released the leader Lease")
            }
            Ok(Ok(false)) => {
                tracing::info!(lease = %self.settings.name, "the leader Lease is no longer ours; nothing to release")
            }
            Ok(Err(error)) => {
                tracing::warn!(lease = %self.settings.name, error = %error_chain(&error), "cannot release the leader Lease; it expires by itself")
            }
            Err(_) => {
                tracing::warn!(lease = %self.settings.name, "releasing the leader Lease timed out; it expires by itself")
            }
        }
    }
}

/// How the renewal tells that leadership ended.
struct Ended {
    lost: oneshot::Sender<LostLease>,
    leading: watch::Sender<bool>,
}

impl Ended {
    /// Leading turns false before the loss is reported: whoever writes as
    /// leader stops first.
    fn lost(self, why: LostLease) {
        self.leading.send_replace(false);
        let _receiver_gone = self.lost.send(why);
    }
}

/// Leadership being kept by a background renewal.
pub struct Leadership {
    lost: oneshot::Receiver<LostLease>,
    leading: watch::Receiver<bool>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
    succeeds_own_release: bool,
}

impl Leadership {
    /// Whether this process still leads: true until leadership is lost or
    /// a step-down starts (before the Lease is released). What the leader
    /// writes (the keeper of its gate) watches it, so that it stops
    /// writing before anyone else may lead.
    pub fn leading(&self) -> watch::Receiver<bool> {
        self.leading.clone()
    }

    /// Whether the Lease this process claimed was last held by a replica of
    /// its own release ([`same_release`]; false when it created the Lease
    /// or names no release): that replica's verdict may be in the
    /// OperatorCondition. Otherwise whatever the object shows before this
    /// leader's first verdict is not its release's (`crate::keeper` keeps
    /// it closed until then).
    pub fn succeeds_own_release(&self) -> bool {
        self.succeeds_own_release
    }

    /// Resolves when leadership is lost (never while it is kept).
    pub async fn lost(&mut self) -> LostLease {
        (&mut self.lost).await.unwrap_or(LostLease::RenewalGone)
    }

    /// Stops renewing and, if configured, releases the Lease. Call after
    /// the leader's work has stopped.
    pub async fn step_down(mut self) {
        if let Some(stop) = self.stop.take() {
            let _renewal_gone = stop.send(());
        }
        if let Err(error) = self.task.await {
            tracing::warn!(%error, "the Lease renewal ended abnormally");
        }
    }
}

#[cfg(test)]
mod tests;
