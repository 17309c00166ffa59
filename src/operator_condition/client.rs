//! Talking to the API server about one `OperatorCondition`: read it, set its
//! `Upgradeable` entry, wait until OLM has copied that into status, watch
//! it change.
//!
//! Owns: requests, retries (capped exponential backoff with jitter via
//! `backon`, bounded by a caller's deadline), and the classification of
//! failures into [`Obstacle`]s. Must not touch: any other object, the
//! `/status` subresource (OLM's), or any entry but `Upgradeable`; it offers
//! no way to delete anything.

use std::fmt;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder, Retryable};
use futures::Stream;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::time::Instant;

use super::olm::{Confirmation, CopyState, OlmVerdict, confirmation};
use super::resource::{GROUP, OperatorCondition, PLURAL, VERSION};
use super::upsert::{GateState, UpgradeableEntry, upsert_upgradeable};
use crate::telemetry::error_chain;

/// Longest a single request may take before it counts as timed out and is retried.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

/// What stood in the way of one request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Obstacle {
    /// 404: the object (or the API) does not exist (yet).
    #[error("not found (404): {0}")]
    NotFound(String),
    /// 403: the identity may not do this (yet: OLM binds its Role asynchronously).
    #[error("forbidden (403): {0}")]
    Forbidden(String),
    /// 409: the object changed since it was read.
    #[error("conflict (409): {0}")]
    Conflict(String),
    /// 429: the API server asks to slow down.
    #[error("too many requests (429): {0}")]
    TooManyRequests(String),
    /// 5xx: the API server failed.
    #[error("server error ({code}): {message}")]
    ServerError {
        /// The HTTP status code.
        code: u16,
        /// The API server's message.
        message: String,
    },
    /// No answer: connection refused, reset, DNS or TLS failure.
    #[error("API server unreachable: {0}")]
    Unreachable(String),
    /// The request got no answer in time.
    #[error("request timed out")]
    Timeout,
    /// Any other 4xx: the request itself is wrong; retrying will not help.
    #[error("rejected ({code}): {message}")]
    Rejected {
        /// The HTTP status code.
        code: u16,
        /// The API server's message.
        message: String,
    },
    /// A response that could not be understood, or a client-side failure.
    #[error("unexpected failure: {0}")]
    Unexpected(String),
}

impl Obstacle {
    /// Classifies a client error.
    pub fn of(error: &kube::Error) -> Obstacle {
        match error {
            kube::Error::Api(status) => {
                let message = status.message.clone();
                match status.code {
                    404 => Obstacle::NotFound(message),
                    403 => Obstacle::Forbidden(message),
                    409 => Obstacle::Conflict(message),
                    429 => Obstacle::TooManyRequests(message),
                    code @ 500..=599 => Obstacle::ServerError { code, message },
                    code => Obstacle::Rejected { code, message },
                }
            }
            kube::Error::HyperError(_) | kube::Error::Service(_) => {
                Obstacle::Unreachable(error_chain(error))
            }
            other => Obstacle::Unexpected(error_chain(other)),
        }
    }

    /// Whether waiting and trying again can help. NotFound and Forbidden are
    /// transient here: OLM creates the object and binds its Role
    /// asynchronously, possibly after the pod started.
    pub fn is_transient(&self) -> bool {
        !matches!(self, Obstacle::Rejected { .. } | Obstacle::Unexpected(_))
    }

    /// Whether an update that met this obstacle may have been carried out
    /// all the same: no answer came (a timeout, a connection lost after the
    /// request was sent), or a 5xx, which the API server also answers after
    /// the write reached etcd (504 when storage answered too late). A 4xx
    /// is a refusal: nothing was written.
    pub fn may_have_been_applied(&self) -> bool {
        matches!(
            self,
            Obstacle::ServerError { .. }
                | Obstacle::Unreachable(_)
                | Obstacle::Timeout
                | Obstacle::Unexpected(_)
        )
    }
}

/// Why an operation on an `OperatorCondition` did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A transient obstacle persisted until the deadline.
    #[error("deadline reached while {action}; last: {last}")]
    DeadlineReached {
        /// What was being done.
        action: &'static str,
        /// The last obstacle before the deadline.
        last: Obstacle,
    },
    /// The API server refused in a way retrying cannot fix.
    #[error("{action} failed: {obstacle}")]
    Failed {
        /// What was being done.
        action: &'static str,
        /// The refusal.
        obstacle: Obstacle,
    },
    /// The write is in spec, but OLM's status copy did not show it in time.
    #[error("deadline reached waiting for OLM to confirm Upgradeable={}: {pending}", .state.condition_status())]
    NotConfirmed {
        /// The state written.
        state: GateState,
        /// How far OLM's copy had come.
        pending: CopyState,
    },
    /// While waiting, someone else changed spec's `Upgradeable` entry.
    #[error("while waiting for OLM to confirm Upgradeable={}, spec's Upgradeable entry was changed by someone else (now {})", .wanted.condition_status(), .spec_status.as_deref().unwrap_or("absent"))]
    Superseded {
        /// The state written.
        wanted: GateState,
        /// What spec says now (`None`: no `Upgradeable` entry).
        spec_status: Option<String>,
    },
}

impl fmt::Display for CopyState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CopyState::NothingInSpec => write!(f, "spec has no Upgradeable entry"),
            CopyState::Copied => write!(
                f,
                "status shows spec's Upgradeable at the current generation"
            ),
            CopyState::NotCopied => write!(f, "status has no Upgradeable entry yet"),
            CopyState::Outdated {
                observed_generation,
                generation,
            } => write!(
                f,
                "status was copied at generation {observed_generation}, the object is at {generation}"
            ),
            CopyState::Differs {
                spec_status,
                status_status,
            } => write!(
                f,
                "status says {status_status} at the current generation, spec says {spec_status}"
            ),
        }
    }
}

/// Proof that OLM's status shows a state at the object's current
/// generation. Only [`OperatorConditionClient::wait_for_olm`] makes one, so
/// "the gate is closed" cannot be reported before OLM confirmed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Confirmed {
    state: GateState,
    generation: i64,
    reason: String,
    message: String,
    verdict: OlmVerdict,
}

impl Confirmed {
    /// The state OLM confirmed.
    pub fn state(&self) -> GateState {
        self.state
    }
    /// The object's generation at which OLM confirmed it.
    pub fn generation(&self) -> i64 {
        self.generation
    }
    /// The reason in OLM's status entry.
    pub fn reason(&self) -> &str {
        &self.reason
    }
    /// The message in OLM's status entry.
    pub fn message(&self) -> &str {
        &self.message
    }
    /// What OLM decides from the object as confirmed. Usually what the
    /// state says; but an admin's `spec.overrides` entry wins over it
    /// ([`OlmVerdict::OverriddenTrue`]: OLM ignores a closed gate).
    pub fn verdict(&self) -> &OlmVerdict {
        &self.verdict
    }
}

/// The outcome of a set: spec now says `state` (written by this call, or
/// already so). Pass it to [`OperatorConditionClient::wait_for_olm`].
#[derive(Clone, Debug)]
#[must_use = "a written state counts only once OLM confirmed it: pass it to wait_for_olm"]
pub struct Written {
    state: GateState,
    object: OperatorCondition,
    replaced: Option<OperatorCondition>,
}

impl Written {
    /// The state spec now says.
    pub fn state(&self) -> GateState {
        self.state
    }
    /// Whether this call wrote (false: spec already said it).
    pub fn changed(&self) -> bool {
        self.replaced.is_some()
    }
    /// The object as last seen (the update's response, or the read).
    pub fn object(&self) -> &OperatorCondition {
        &self.object
    }
    /// The object this call's update replaced, as read right before it
    /// (`None` when nothing was written). It may be newer than anything
    /// the caller read: another writer's change that this write undid.
    /// An update whose answer was lost (a try cut off, a 5xx) counts as
    /// written when the next try finds spec saying its entry.
    pub fn replaced(&self) -> Option<&OperatorCondition> {
        self.replaced.as_ref()
    }
}

/// Whether the cluster serves `operators.coreos.com/v2` `operatorconditions`,
/// i.e. whether OLM (v0.18 or newer) is installed. Asks discovery, which every
/// authenticated identity may read: a 403 on the object itself does not
/// tell "no OLM" from "not allowed", discovery does. Transient failures are
/// retried until `deadline`; an unreachable API server is an error, never
/// "not served".
pub async fn operator_conditions_served(
    client: &kube::Client,
    deadline: Instant,
) -> Result<bool, Error> {
    let group_version = format!("{GROUP}/{VERSION}");
    let lookup = || async {
        match client.list_api_group_resources(&group_version).await {
            Ok(list) => Ok(list.resources.iter().any(|r| r.name == PLURAL)),
            Err(error) => match Obstacle::of(&error) {
                Obstacle::NotFound(_) => Ok(false),
                obstacle => Err(obstacle),
            },
        }
    };
    with_retries(
        deadline,
        "asking discovery whether OperatorConditions are served",
        lookup,
    )
    .await
}

/// One `OperatorCondition`, addressed by namespace and name.
///
/// ```no_run
/// use std::time::Duration;
/// use upgrade_gate::operator_condition::{OperatorConditionClient, Reason, UpgradeableEntry};
///
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// let client = kube::Client::try_default().await?;
/// let name = std::env::var("OPERATOR_CONDITION_NAME")?;
/// let condition = OperatorConditionClient::new(client, "apps", &name);
/// let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
///
/// // The upgrade is done: let OLM move on. Opening means True, never removal.
/// let entry = UpgradeableEntry::open(
///     Reason::new("UpgradeComplete")?,
///     "App shop is at schema 7.10.1; OLM may upgrade the operator",
/// )?;
/// let written = condition.set(&entry, deadline).await?;
/// let confirmed = condition.wait_for_olm(written, deadline).await?;
/// println!("OLM shows Upgradeable=True at generation {}", confirmed.generation());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct OperatorConditionClient {
    api: Api<OperatorCondition>,
    namespace: String,
    name: String,
}

impl OperatorConditionClient {
    /// Addresses `namespace/name` (the CSV's namespace and name).
    pub fn new(client: kube::Client, namespace: &str, name: &str) -> Self {
        OperatorConditionClient {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }

    /// The object's namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The object's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The object's changes as kube-runtime's `watcher` reports them (a
    /// deletion, OLM's recreation, anyone's write, ours included): one
    /// watch of this object alone, by a `metadata.name` field selector,
    /// which RBAC's `resourceNames` admits for list and watch. After an
    /// error the stream yields it and relists with kube-runtime's default
    /// backoff. Needs `list` and `watch` on the object besides `get`.
    pub fn changes(
        &self,
    ) -> impl Stream<Item = Result<watcher::Event<OperatorCondition>, watcher::Error>> + Send + 'static
    {
        let config = watcher::Config::default().fields(&format!("metadata.name={}", self.name));
        watcher(self.api.clone(), config).default_backoff()
    }

    /// Reads the object; `None` when it does not exist (no retry on 404).
    /// Other transient failures are retried until `deadline`.
    pub async fn get(&self, deadline: Instant) -> Result<Option<OperatorCondition>, Error> {
        let read = || async {
            match self.api.get(&self.name).await {
                Ok(object) => Ok(Some(object)),
                Err(error) => match Obstacle::of(&error) {
                    Obstacle::NotFound(_) => Ok(None),
                    obstacle => Err(obstacle),
                },
            }
        };
        with_retries(deadline, "reading the OperatorCondition", read).await
    }

    /// Sets spec's `Upgradeable` entry to `entry`, keeping every other entry
    /// as it is. Writes nothing when spec already says exactly that.
    ///
    /// Waits for the object to exist and for access to it (404 and 403 are
    /// retried), and re-reads and retries when the update conflicts, all
    /// until `deadline`.
    pub async fn set(&self, entry: &UpgradeableEntry, deadline: Instant) -> Result<Written, Error> {
        self.write(deadline, |_| entry.clone()).await
    }

    /// Like [`set`](Self::set), for a writer whose decision can go stale
    /// while it is being written: `still_wanted` is asked after each fresh
    /// read, right before the update is sent, and once it says no nothing
    /// is written and the result is `Ok(None)`.
    ///
    /// ```no_run
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use std::time::Duration;
    /// use upgrade_gate::operator_condition::{OperatorConditionClient, Reason, UpgradeableEntry};
    ///
    /// # async fn example(condition: OperatorConditionClient, observations: AtomicU64) -> Result<(), Box<dyn std::error::Error>> {
    /// // Decided from observation 7; a newer observation makes the write moot.
    /// let decided_from = 7;
    /// let entry = UpgradeableEntry::open(Reason::new("UpgradeComplete")?, "all Apps at target")?;
    /// let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    /// let still_current = || observations.load(Ordering::Acquire) == decided_from;
    /// match condition.set_if(&entry, deadline, still_current).await? {
    ///     Some(written) => println!("spec says True (changed: {})", written.changed()),
    ///     None => println!("dropped: a newer observation exists"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn set_if(
        &self,
        entry: &UpgradeableEntry,
        deadline: Instant,
        still_wanted: impl Fn() -> bool,
    ) -> Result<Option<Written>, Error> {
        self.write_if(deadline, |_| entry.clone(), still_wanted)
            .await
    }

    /// Closes the gate unless spec already says `Upgradeable=False`: then the
    /// reason and message there stay (the operator may have written a more
    /// precise one than `entry`'s) and nothing is written.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use upgrade_gate::operator_condition::{OperatorConditionClient, Reason, UpgradeableEntry};
    ///
    /// # async fn example(condition: OperatorConditionClient) -> Result<(), Box<dyn std::error::Error>> {
    /// let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    /// let entry = UpgradeableEntry::closed(
    ///     Reason::new("UpgradeInProgress")?,
    ///     "release 7.10.1 is starting; its operator opens the gate when its upgrade is complete",
    /// )?;
    /// let written = condition.close_unless_closed(&entry, deadline).await?;
    /// let confirmed = condition.wait_for_olm(written, deadline).await?;
    /// assert_eq!(confirmed.state(), upgrade_gate::operator_condition::GateState::Closed);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn close_unless_closed(
        &self,
        entry: &UpgradeableEntry,
        deadline: Instant,
    ) -> Result<Written, Error> {
        let closed = entry.state() == GateState::Closed;
        self.write(deadline, |object| {
            let existing_closed = object
                .upgradeable_in_spec()
                .filter(|e| e.status() == "False")
                .and_then(|e| {
                    let reason = super::upsert::Reason::new(e.reason()).ok()?;
                    UpgradeableEntry::closed(reason, e.message()).ok()
                });
            match existing_closed {
                Some(existing) if closed => existing,
                _ => entry.clone(),
            }
        })
        .await
    }

    async fn write(
        &self,
        deadline: Instant,
        choose: impl Fn(&OperatorCondition) -> UpgradeableEntry,
    ) -> Result<Written, Error> {
        match self.write_if(deadline, choose, || true).await? {
            Some(written) => Ok(written),
            None => Err(Error::Failed {
                action: "setting Upgradeable in spec.conditions",
                obstacle: Obstacle::Unexpected("an unconditional write was withdrawn".to_owned()),
            }),
        }
    }

    async fn write_if(
        &self,
        deadline: Instant,
        choose: impl Fn(&OperatorCondition) -> UpgradeableEntry,
        still_wanted: impl Fn() -> bool,
    ) -> Result<Option<Written>, Error> {
        // The object an earlier try's update would have replaced, while
        // that update may have been carried out without our hearing of it
        // (cut off, or answered with a 5xx): when a later try finds spec
        // already saying the entry, that update is what wrote it.
        let cell = std::sync::Mutex::new(None);
        let unanswered = |object: Option<OperatorCondition>| {
            std::mem::replace(
                &mut *cell.lock().unwrap_or_else(|poisoned| poisoned.into_inner()),
                object,
            )
        };
        let attempt = || async {
            let mut object = self
                .api
                .get(&self.name)
                .await
                .map_err(|e| Obstacle::of(&e))?;
            let entry = choose(&object);
            let now = Time(k8s_openapi::jiff::Timestamp::now());
            let current = object.spec.conditions.as_deref().unwrap_or_default();
            let Some(conditions) = upsert_upgradeable(current, &entry, &now) else {
                tracing::debug!(name = %self.name, "spec already says Upgradeable={}", entry.state().condition_status());
                return Ok(Some(Written {
                    state: entry.state(),
                    object,
                    replaced: unanswered(None),
                }));
            };
            if !still_wanted() {
                tracing::debug!(name = %self.name, "the write is no longer wanted; nothing sent");
                return Ok(None);
            }
            let replaced = object.clone();
            object.spec.conditions = Some(conditions);
            unanswered(Some(replaced.clone()));
            let updated = self
                .api
                .replace(&self.name, &PostParams::default(), &object)
                .await
                .map_err(|e| {
                    let obstacle = Obstacle::of(&e);
                    if !obstacle.may_have_been_applied() {
                        unanswered(None);
                    }
                    obstacle
                })?;
            tracing::info!(
                name = %self.name, namespace = %self.namespace,
                status = entry.state().condition_status(), reason = entry.reason().as_str(),
                generation = updated.generation(), "wrote Upgradeable to spec.conditions"
            );
            Ok(Some(Written {
                state: entry.state(),
                object: updated,
                replaced: Some(replaced),
            }))
        };
        with_retries(deadline, "setting Upgradeable in spec.conditions", attempt).await
    }

    /// Waits until OLM's `status.conditions[Upgradeable]` shows the written
    /// state at the object's current generation (`observedGeneration ==
    /// metadata.generation`), polling with capped backoff until `deadline`.
    /// Fails early when spec's entry is changed by someone else meanwhile.
    pub async fn wait_for_olm(
        &self,
        written: Written,
        deadline: Instant,
    ) -> Result<Confirmed, Error> {
        let wanted = written.state;
        let mut object = written.object;
        let mut polls = poll_backoff().build();
        loop {
            match confirmation(&object, wanted) {
                Confirmation::Confirmed => {
                    let entry = object.upgradeable_in_status();
                    return Ok(Confirmed {
                        state: wanted,
                        generation: object.generation(),
                        reason: entry.map(|e| e.reason().to_owned()).unwrap_or_default(),
                        message: entry.map(|e| e.message().to_owned()).unwrap_or_default(),
                        verdict: OlmVerdict::of(Some(&object)),
                    });
                }
                Confirmation::Superseded { spec_status } => {
                    return Err(Error::Superseded {
                        wanted,
                        spec_status,
                    });
                }
                Confirmation::Pending(pending) => {
                    let pause = polls.next().unwrap_or(MAX_POLL_INTERVAL);
                    if Instant::now() + pause >= deadline {
                        return Err(Error::NotConfirmed {
                            state: wanted,
                            pending,
                        });
                    }
                    tracing::debug!(name = %self.name, %pending, "waiting for OLM's status copy");
                    tokio::time::sleep(pause).await;
                    object = self.get_existing(deadline).await?;
                }
            }
        }
    }

    async fn get_existing(&self, deadline: Instant) -> Result<OperatorCondition, Error> {
        let read = || async { self.api.get(&self.name).await.map_err(|e| Obstacle::of(&e)) };
        with_retries(deadline, "reading the OperatorCondition", read).await
    }
}

const MAX_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Status copies take OLM well under a second: poll fast at first.
fn poll_backoff() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(MAX_POLL_INTERVAL)
        .with_jitter()
        .without_max_times()
}

/// How soon a request is tried again after an obstacle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RetryPace {
    /// At once, on a fresh read: a 409 only says the object changed since
    /// it was read, and the next read has the change.
    AtOnce,
    /// About a second: a missing object or Role (404, 403) appears when
    /// OLM gets to it; waiting longer only delays the operator's start.
    Short,
    /// Backing off to 5 s: the API server is overloaded, failing or gone.
    Long,
}

/// Conflicts retried at once in a row before they wait like a 404: a
/// writer that keeps changing the object gets a moment.
const CONFLICTS_AT_ONCE: usize = 3;

impl RetryPace {
    /// The pace for `obstacle`, given how many conflicts came right before it.
    pub(crate) fn after(obstacle: &Obstacle, conflicts_in_a_row: usize) -> RetryPace {
        match obstacle {
            Obstacle::Conflict(_) if conflicts_in_a_row < CONFLICTS_AT_ONCE => RetryPace::AtOnce,
            Obstacle::Conflict(_) | Obstacle::NotFound(_) | Obstacle::Forbidden(_) => {
                RetryPace::Short
            }
            _ => RetryPace::Long,
        }
    }
}

/// 200 ms doubling to 700 ms, each with up to as much again of jitter:
/// about a second between tries once it is capped.
fn short_backoff() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_millis(700))
        .with_jitter()
        .without_max_times()
}

/// 200 ms doubling to 5 s, with jitter.
fn long_backoff() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(5))
        .with_jitter()
        .without_max_times()
}

/// The pause before each retry, by [`RetryPace`]: each pace keeps its own
/// growing backoff.
struct Pauses {
    short: backon::ExponentialBackoff,
    long: backon::ExponentialBackoff,
    conflicts_in_a_row: usize,
}

impl Pauses {
    fn new() -> Pauses {
        Pauses {
            short: short_backoff().build(),
            long: long_backoff().build(),
            conflicts_in_a_row: 0,
        }
    }

    fn after(&mut self, obstacle: &Obstacle) -> Duration {
        let pace = RetryPace::after(obstacle, self.conflicts_in_a_row);
        self.conflicts_in_a_row = match obstacle {
            Obstacle::Conflict(_) => self.conflicts_in_a_row + 1,
            _ => 0,
        };
        match pace {
            RetryPace::AtOnce => Duration::ZERO,
            RetryPace::Short => self.short.next().unwrap_or(Duration::from_secs(1)),
            RetryPace::Long => self.long.next().unwrap_or(Duration::from_secs(5)),
        }
    }
}

/// Runs `attempt` until it succeeds, fails for good, or the next try would
/// start after `deadline`. Each try is cut off after [`ATTEMPT_TIMEOUT`] or
/// at the deadline, whichever is first. The pause before a retry depends on
/// what failed ([`RetryPace`]).
pub(crate) async fn with_retries<T, F, Fut>(
    deadline: Instant,
    action: &'static str,
    mut attempt: F,
) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Obstacle>>,
{
    // What the try before stood on: a try the deadline cuts short reports
    // it instead of a timeout (see `reported_obstacle`).
    let previous: std::sync::Mutex<Option<Obstacle>> = std::sync::Mutex::new(None);
    let timed = || {
        let by_deadline = deadline <= Instant::now() + ATTEMPT_TIMEOUT;
        let cutoff = deadline.min(Instant::now() + ATTEMPT_TIMEOUT);
        let attempt = attempt();
        let previous = &previous;
        async move {
            let outcome = tokio::time::timeout_at(cutoff, attempt).await;
            let mut previous = previous
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let obstacle = match outcome {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(obstacle)) => obstacle,
                Err(_elapsed) => reported_obstacle(previous.take(), Obstacle::Timeout, by_deadline),
            };
            *previous = Some(obstacle.clone());
            Err(obstacle)
        }
    };
    let mut pauses = Pauses::new();
    // The builder only says "retry forever"; `adjust` picks each pause.
    let forever = backon::ConstantBuilder::default()
        .with_delay(Duration::ZERO)
        .without_max_times();
    timed
        .retry(forever)
        .when(Obstacle::is_transient)
        .adjust(|obstacle, _| {
            let pause = pauses.after(obstacle);
            (Instant::now() + pause < deadline).then_some(pause)
        })
        .notify(|obstacle, pause| {
            tracing::warn!(%obstacle, retry_in = ?pause, "{action}: retrying");
        })
        .await
        .map_err(|last| {
            if last.is_transient() {
                Error::DeadlineReached { action, last }
            } else {
                Error::Failed {
                    action,
                    obstacle: last,
                }
            }
        })
}

/// The obstacle a deadline error names. A try cut short by the deadline
/// itself says nothing about the API server (it may have been about to
/// answer); the obstacle before it does: `hold` waiting for OLM to create
/// the object must end "not found" (exit 5), not "timed out" (exit 3),
/// when its deadline falls in the middle of a request.
fn reported_obstacle(
    previous: Option<Obstacle>,
    last: Obstacle,
    cut_by_deadline: bool,
) -> Obstacle {
    match (previous, cut_by_deadline) {
        (Some(previous), true) => previous,
        _ => last,
    }
}

#[cfg(test)]
mod tests;
