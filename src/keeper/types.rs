//! What the keeper works with and reports: the verdict it keeps
//! ([`Verdict`], [`Evidence`]), its time budgets, the events it reports
//! ([`KeeperEvents`]), what it shows of itself ([`KeeperStatus`]) and the
//! keeper to start ([`Keeper`]).
//!
//! Owns: these types and constants. Must not touch: how a keeper is
//! started or waits to lead (the module's front) or its loop (`run`).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use tokio::sync::watch;

use super::rules::{Found, Keeps, WatchState};
use crate::leader::Standing;
use crate::locate::Target;
use crate::operator_condition::UpgradeableEntry;

/// How long one read may retry.
pub const READ_BUDGET: Duration = Duration::from_secs(1);
/// How long one write (read, update, retries on conflict) may take; after
/// that the latest verdict is taken up again.
pub const WRITE_BUDGET: Duration = Duration::from_secs(2);
/// How long finding the OperatorCondition (discovery, the pod's owners)
/// may retry before the keeper says so and tries again.
pub const LOCATE_BUDGET: Duration = Duration::from_secs(30);
/// How soon a write dropped by [`Verdict::still_current`] is tried again
/// when no newer verdict came meanwhile.
pub const STALE_RECHECK: Duration = Duration::from_millis(200);

/// What the keeper keeps: the `Upgradeable` entry (its state and reason
/// are set together: [`UpgradeableEntry::open`], [`UpgradeableEntry::closed`]),
/// and whether it still follows from the latest input.
///
/// [`UpgradeableEntry`] is a verdict that never goes stale by itself. An
/// operator whose verdict is decided from a cache can carry what it was
/// decided from, and say no once the cache moved on: the keeper asks right
/// before each update is sent and drops the write (counted by
/// [`KeeperEvents::dropped_stale`]).
pub trait Verdict: Clone + Send + Sync + 'static {
    /// The entry to keep in `spec.conditions`.
    fn entry(&self) -> &UpgradeableEntry;

    /// Whether the verdict still follows from the latest input; asked right
    /// before each update is sent.
    fn still_current(&self) -> bool {
        true
    }

    /// What the verdict was judged from, for the admission record
    /// ([`crate::admission::Recorder`]): how many objects, under which
    /// settings. `None` (the default): not said, and the record cannot
    /// tell a judgement of nothing from one of everything.
    fn evidence(&self) -> Option<Evidence> {
        None
    }
}

/// What a verdict was judged from: how many objects it judged, and the
/// settings it followed (the namespaces watched, the rule), in a person's
/// words. The admission record keeps both while an upgrade is in
/// progress, and lets it turn complete only from a judgement of at least
/// one object under the same settings: a settings change that leaves the
/// operator seeing nothing, or judging by another rule, is no evidence
/// that the upgrade completed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evidence {
    /// How many objects the verdict judged.
    pub judged: u32,
    /// The settings the judgement followed, at most [`MAX_BASIS_BYTES`].
    pub basis: String,
}

/// The longest [`Evidence::basis`] kept: a longer one keeps its start
/// and the SHA-256 of the whole, so that two different long settings
/// never compare equal.
pub const MAX_BASIS_BYTES: usize = 256;

impl Evidence {
    /// `judged` objects under `basis` (shortened as [`MAX_BASIS_BYTES`] says).
    pub fn new(judged: usize, basis: &str) -> Evidence {
        Evidence {
            judged: u32::try_from(judged).unwrap_or(u32::MAX),
            basis: shortened_basis(basis),
        }
    }
}

fn shortened_basis(basis: &str) -> String {
    use sha2::Digest;
    if basis.len() <= MAX_BASIS_BYTES {
        return basis.to_owned();
    }
    let digest = sha2::Sha256::digest(basis.as_bytes());
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    let suffix = format!("… (sha256 {hex})");
    let mut end = MAX_BASIS_BYTES - suffix.len();
    while !basis.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{suffix}", &basis[..end])
}

impl Verdict for UpgradeableEntry {
    fn entry(&self) -> &UpgradeableEntry {
        self
    }
}

/// What the keeper reports as it happens, for metrics. Every method does
/// nothing unless implemented; the same is logged with `tracing`.
pub trait KeeperEvents: Send + Sync + 'static {
    /// The object shows `verdict`: written now (`wrote`), or found so.
    fn applied(&self, verdict: &UpgradeableEntry, wrote: bool) {
        let _ = (verdict, wrote);
    }
    /// A write put the verdict back after someone else's change (or,
    /// keeping the gate closed while the release has no verdict yet,
    /// `Upgradeable=False`).
    fn restored(&self, found: &Found) {
        let _ = found;
    }
    /// A write was dropped: a newer verdict existed when it was to be sent.
    fn dropped_stale(&self) {}
    /// A read or a write failed; the next round tries again.
    fn failed(&self, error: &crate::operator_condition::Error) {
        let _ = error;
    }
}

/// The [`KeeperEvents`] that count nothing.
pub struct NoEvents;

impl KeeperEvents for NoEvents {}

/// Where the keeper stands with its OperatorCondition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Place {
    /// Finding the OperatorCondition (discovery, the pod's owners).
    #[default]
    Locating,
    /// Keeping the verdict in this OperatorCondition (in the target's namespace).
    Keeping {
        /// The OperatorCondition's (= the CSV's) name.
        name: String,
    },
    /// Nothing to keep: not installed by OLM, OLM v1, or the set-up leaves
    /// no OperatorCondition to act on safely. Verdicts are logged only.
    Idle {
        /// Why, as logged once.
        why: String,
    },
}

/// One write of the verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LastWrite {
    /// When the API server accepted it.
    pub at: Timestamp,
    /// What it wrote.
    pub verdict: UpgradeableEntry,
    /// What it put right, if it restored the verdict.
    pub restored: Option<Found>,
}

/// What a user of the keeper can see of it, published on every change.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeeperStatus {
    /// Where it stands.
    pub place: Place,
    /// The verdict the object showed after the last write or read that
    /// matched it (`None`: not in place, or someone changed it since).
    pub applied: Option<UpgradeableEntry>,
    /// The last write that changed the object.
    pub last_write: Option<LastWrite>,
    /// The last failure since the last success, as one line.
    pub last_error: Option<String>,
    /// Restores since the start.
    pub restores: u64,
    /// Whether the object's watch works.
    pub watch: WatchState,
    /// What it keeps now: the verdict, `Upgradeable=False` while the
    /// release has no verdict yet, or nothing.
    pub keeps: Keeps,
}

impl KeeperStatus {
    /// Whether `verdict` is what counts now: in the object, or nothing to
    /// keep ([`Place::Idle`]).
    pub fn shows(&self, verdict: &UpgradeableEntry) -> bool {
        matches!(self.place, Place::Idle { .. }) || self.applied.as_ref() == Some(verdict)
    }
}

/// A keeper to start: where its OperatorCondition is, whether the process
/// leads, and where its events go.
#[derive(Clone)]
pub struct Keeper {
    pub(super) client: kube::Client,
    pub(super) target: Target,
    pub(super) leading: Option<watch::Receiver<bool>>,
    pub(super) events: Arc<dyn KeeperEvents>,
    /// The election's standing: set on the keeper that runs while the
    /// process waits to lead.
    pub(super) election: Option<watch::Receiver<Standing>>,
    /// `Upgradeable=False` kept while there is no verdict (see [`Keeps`]).
    pub(super) closed: Option<UpgradeableEntry>,
    /// The OperatorCondition as a keeper before this one found it.
    pub(super) found: Option<Result<String, String>>,
}
