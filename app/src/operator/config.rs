//! How the operator runs: [`OperatorConfig`], built from `app-operator
//! run`'s flags ([`RunArgs`]) by [`OperatorConfig::from_args`], so that the
//! binary only parses and starts.
//!
//! Owns: the flags of `app-operator run` (what `--help` and docs/operator.md
//! list), their defaults and what each becomes (namespaces watched, the
//! pod's namespace, the Lease's settings and identity, the pods' image and
//! upgrade model). Must not touch: the cluster (the caller hands over the
//! client's default namespace) or the run itself.

use std::time::Duration;

use crate::migrations::Release;
use crate::operator::queue::DEFAULT_MAX_CONCURRENT_UPGRADES;
use crate::operator::readiness::ReadyWhen;
use crate::operator::resources::PodSettings;
use crate::schema::UpgradeModel;
use upgrade_gate::leader::{self, LeaseSettings};

/// The leader Lease's name: the same for every release, so an old and a
/// new operator never lead at once.
pub const LEASE_NAME: &str = "upgrade-gate-app-operator";

/// How the operator runs.
pub struct OperatorConfig {
    /// Namespaces to watch; empty = all.
    pub namespaces: Vec<String>,
    /// `OPERATOR_CONDITION_NAME` (set by OLM).
    pub operator_condition_name: Option<String>,
    /// The operator pod's namespace (where its OperatorCondition is).
    pub pod_namespace: String,
    /// The operator's own Deployment, under whose name the upgrade's state
    /// is recorded for the admission policy; `None`: nothing recorded.
    pub admission_deployment: Option<String>,
    /// The ServiceAccount annotated to wake OLM v0 once the upgrade is
    /// recorded complete (`admission::Recorder::wake_olm_v0`; `None`: the
    /// pods'). The recorder wakes whatever deploys the operator
    /// (`admission::wake`).
    pub admission_service_account: Option<String>,
    /// Address of /healthz, /readyz, /metrics.
    pub listen: String,
    /// When `/readyz` says ready.
    pub ready_when: ReadyWhen,
    /// Leader election; `None`: this process leads at once (one replica,
    /// or a test).
    pub election: Option<LeaseSettings>,
    /// How long in-flight reconciles may take after a stop request before
    /// the run ends anyway: OLM stalls an upgrade while the old pod lingers.
    pub shutdown_grace: Duration,
}

/// How long in-flight reconciles may take after SIGTERM before the process
/// exits anyway: OLM stalls an upgrade while the old pod lingers.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// `app-operator run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Namespaces to watch, comma-separated; empty = all (OLM passes its
    /// target namespaces here through the downward API).
    #[arg(long, env = "WATCH_NAMESPACE", default_value = "")]
    pub watch_namespace: String,
    /// The image with app-db-upgrade and app-server (the operator's own).
    #[arg(long, env = "UPGRADE_GATE_IMAGE")]
    pub image: String,
    /// Address of /healthz, /readyz and /metrics.
    #[arg(long, env = "UPGRADE_GATE_LISTEN", default_value = "0.0.0.0:8080")]
    pub listen: String,
    /// This operator's OperatorCondition (OLM injects it); unset = no OLM.
    #[arg(long, env = "OPERATOR_CONDITION_NAME")]
    pub operator_condition_name: Option<String>,
    /// The pod's namespace (downward API); default: the service-account namespace file.
    #[arg(long, env = "POD_NAMESPACE")]
    pub pod_namespace: Option<String>,
    /// This operator's own Deployment: while leading, the operator records
    /// under its name whether this release's upgrade is complete, in the
    /// UpgradeRecord upgrade-gate of the pod's namespace, which the
    /// admission policy reads (and in the ConfigMap upgrade-gate-state the
    /// previous policy read; docs/admission.md); unset = nothing recorded.
    #[arg(long, env = "UPGRADE_GATE_DEPLOYMENT")]
    pub admission_deployment: Option<String>,
    /// This pod's ServiceAccount (downward API): under OLM v0, once this
    /// release's upgrade is recorded complete, the operator annotates it
    /// (upgrade-gate.dev/completed), which makes OLM v0 retry at once a
    /// release the admission policy refused; unset = the ServiceAccount
    /// the Deployment's pods run as. Other deployers are woken through
    /// their own objects (docs/gitops.md).
    #[arg(long, env = "UPGRADE_GATE_SERVICE_ACCOUNT")]
    pub admission_service_account: Option<String>,
    /// The pod's name, reported in Events and part of the leader
    /// identity (downward API).
    #[arg(long, env = "POD_NAME")]
    pub pod_name: Option<String>,
    /// When /readyz says ready: `started` (at once, leader or not: no
    /// brake on OLM), `reconciled` (the leader reconciled every App
    /// once and the OperatorCondition shows its gate decision; a
    /// follower once it saw the leader renew), `verified` (as
    /// `reconciled`, and every App is verified at this release's target;
    /// under OLM v0 a CSV Installing for 5 minutes fails).
    #[arg(long, env = "UPGRADE_GATE_READY_WHEN", value_enum, default_value_t = ReadyWhen::Reconciled)]
    pub ready_when: ReadyWhen,
    /// Upgrade Jobs this operator runs at once, at most; further Apps wait
    /// their turn (phase Queued), oldest waiting first. Each Job is a pod
    /// with database sessions and a backup to write (see
    /// `queue::DEFAULT_MAX_CONCURRENT_UPGRADES` for the default).
    #[arg(long, env = "UPGRADE_GATE_MAX_CONCURRENT_UPGRADES", default_value_t = DEFAULT_MAX_CONCURRENT_UPGRADES, value_parser = clap::value_parser!(u16).range(1..))]
    pub max_concurrent_upgrades: u16,
    #[command(flatten)]
    pub election: ElectionArgs,
    /// A test model, hidden from --help: upgrade Jobs apply only the
    /// migrations this release introduced, assuming its predecessor's
    /// upgrade happened (the feature request's operator; `just race
    /// SUCCESSOR=naive`, docs/race.md). Never for real data.
    #[arg(long, hide = true)]
    pub model_naive_successor: bool,
}

/// Leader election over a Lease in the pod's namespace: only the leader
/// reconciles and writes the gate.
#[derive(Debug, clap::Args)]
pub struct ElectionArgs {
    /// Take part in leader election (`--leader-elect=false`: lead at once;
    /// only safe with one process).
    #[arg(long, env = "UPGRADE_GATE_LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// The Lease's name (the same for every release).
    #[arg(long, env = "UPGRADE_GATE_LEADER_ELECT_LEASE_NAME", default_value = LEASE_NAME)]
    pub leader_elect_lease_name: String,
    /// How long a follower waits for a Lease that stopped being renewed
    /// before it takes over, e.g. `15s`.
    #[arg(long, env = "UPGRADE_GATE_LEADER_ELECT_LEASE_DURATION", default_value = "15s", value_parser = seconds)]
    pub leader_elect_lease_duration: Duration,
    /// How long the leader tries to renew before it gives up leadership
    /// (and exits with code 3).
    #[arg(long, env = "UPGRADE_GATE_LEADER_ELECT_RENEW_DEADLINE", default_value = "10s", value_parser = seconds)]
    pub leader_elect_renew_deadline: Duration,
    /// Between renewals, and between a follower's tries.
    #[arg(long, env = "UPGRADE_GATE_LEADER_ELECT_RETRY_PERIOD", default_value = "2s", value_parser = seconds)]
    pub leader_elect_retry_period: Duration,
    /// Release the Lease on a graceful stop so a successor leads at once.
    /// `false` keeps it until it expires, as controller-runtime does by
    /// default: the successor then waits up to the lease duration.
    #[arg(long, env = "UPGRADE_GATE_LEADER_ELECT_RELEASE_ON_STOP", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect_release_on_stop: bool,
}

/// `15s`, `1500ms`, `1m` or `15` (seconds): every binary's one duration
/// syntax (`upgrade_gate::duration`), longer than zero.
fn seconds(text: &str) -> Result<Duration, String> {
    match upgrade_gate::duration::flag(text)? {
        duration if duration.is_zero() => Err("the duration must be longer than zero".into()),
        duration => Ok(duration),
    }
}

impl OperatorConfig {
    /// The configuration `args` describe for `release`. The pod's namespace
    /// is `--pod-namespace`, else the service-account mount's, else
    /// `default_namespace` (the client's, from a kubeconfig).
    pub fn from_args(args: &RunArgs, release: &Release, default_namespace: &str) -> Self {
        let pod_namespace = args
            .pod_namespace
            .clone()
            .or_else(|| {
                upgrade_gate::locate::service_account_namespace().map(|s| s.trim().to_owned())
            })
            .unwrap_or_else(|| default_namespace.to_owned());
        let election = &args.election;
        let election = election.leader_elect.then(|| LeaseSettings {
            name: election.leader_elect_lease_name.clone(),
            namespace: pod_namespace.clone(),
            identity: leader::identity(args.pod_name.as_deref(), "app-operator"),
            lease_duration: election.leader_elect_lease_duration,
            renew_deadline: election.leader_elect_renew_deadline,
            retry_period: election.leader_elect_retry_period,
            release_on_stop: election.leader_elect_release_on_stop,
            // Written into the Lease: a replica waiting for it tells
            // whether a replica of its own release leads.
            release: Some(release.to_string()),
        });
        OperatorConfig {
            namespaces: args
                .watch_namespace
                .split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(str::to_owned)
                .collect(),
            operator_condition_name: args.operator_condition_name.clone(),
            pod_namespace,
            admission_deployment: args
                .admission_deployment
                .clone()
                .filter(|name| !name.is_empty()),
            admission_service_account: args
                .admission_service_account
                .clone()
                .filter(|name| !name.is_empty()),
            listen: args.listen.clone(),
            ready_when: args.ready_when,
            election,
            shutdown_grace: SHUTDOWN_GRACE,
        }
    }
}

impl RunArgs {
    /// The image, release and upgrade model of the Job and server pods.
    pub fn pods(&self, release: &Release) -> PodSettings {
        PodSettings {
            image: self.image.clone(),
            release: release.to_string(),
            model: if self.model_naive_successor {
                tracing::warn!(
                    "MODEL --model-naive-successor: upgrade Jobs apply only this release's own migrations (a test model of an operator that assumes its predecessor's upgrade; never for real data)"
                );
                UpgradeModel::NaiveSuccessor
            } else {
                UpgradeModel::Cumulative
            },
        }
    }
}
