//! `upgrade-gate keep`: the sidecar's flags, its start, and its exit codes
//! ([`KEEP_EXIT_CODES`]). What it does is [`crate::completion`]'s.

use std::process::ExitCode;

use clap::Args;

use super::target::{TargetFlags, target_and_client};
use super::{exit_codes_help, one_line, runtime};
use crate::completion::{self, KeepError, KeepSettings, RecordSettings, ResourceName, Rule};
use crate::gate::GateError;
use crate::leader::{self, LeaseSettings};
use crate::locate::TargetInput;
use crate::shutdown;

/// `keep`'s exit codes: used by [`main`] and `--help`.
pub const KEEP_EXIT_CODES: &[(u8, &str)] = &[
    (
        0,
        "stopped by SIGTERM or SIGINT: the keeper stopped and the Lease was released",
    ),
    (
        1,
        "lost the Lease (another keeper leads, or renewing failed): stopped writing at once; the container restarts as a follower",
    ),
    (
        2,
        "invalid input: a flag or environment variable is unusable (a rule that does not read the release, a resource that is not a resource name); clap's usage errors are 2 as well",
    ),
    (
        10,
        "no cluster configuration: neither in-cluster service account nor kubeconfig",
    ),
];

/// `--help`'s table of [`KEEP_EXIT_CODES`].
pub fn keep_exit_codes_help() -> String {
    exit_codes_help(KEEP_EXIT_CODES)
}

/// `upgrade-gate keep`'s flags.
// `<plural>` in the help text is a placeholder, not an HTML tag.
#[allow(rustdoc::invalid_html_tags)]
#[derive(Debug, Args)]
pub struct KeepArgs {
    /// A custom resource whose every object must show this release's upgrade done, named as
    /// kubectl names it: <plural>.<group> (e.g. widgets.demo.example.com) or
    /// <plural>.<version>.<group>. Repeat it, or give a comma-separated list. An object being
    /// deleted counts as not done until it is gone (its finalizers may still migrate). With no
    /// object at all the gate opens: nothing to upgrade (a record already in progress with
    /// objects judged stays so: see --record).
    #[arg(
        long = "resource",
        env = "UPGRADE_GATE_RESOURCES",
        value_delimiter = ',',
        required = true
    )]
    resources: Vec<String>,
    /// The rule, short form: this field of each object equals the running release (--release),
    /// e.g. status.version. Combined with the other rule flags by "and".
    #[arg(long, env = "UPGRADE_GATE_DONE_FIELD")]
    done_field: Option<String>,
    /// The rule, short form: this condition in status.conditions is True (at the object's
    /// generation when it says which it saw). Never alone: a condition cannot tell this
    /// release's upgrade from the previous one's; add --done-field or --done-when.
    #[arg(long, env = "UPGRADE_GATE_DONE_CONDITIONS", value_delimiter = ',')]
    done_condition: Vec<String>,
    /// The rule as a CEL expression over `self` (the object) and `release`, true when the
    /// object shows this release's upgrade done, e.g. "self.status.version == release". It
    /// must read `release`. A field it reads that is missing counts as not done.
    #[arg(long, env = "UPGRADE_GATE_DONE_WHEN")]
    done_when: Option<String>,
    /// The running release, as the operator writes it where the rule reads it (and as the
    /// Deployment's upgrade-gate.dev/release label says, with --record).
    #[arg(long, env = "UPGRADE_GATE_RELEASE")]
    release: String,
    /// Watch the resources in these namespaces only (comma-separated; operator-sdk's
    /// WATCH_NAMESPACE). Default: every namespace.
    #[arg(
        long = "watch-namespace",
        env = "WATCH_NAMESPACE",
        value_delimiter = ','
    )]
    watch_namespaces: Vec<String>,
    /// Also keep the admission policy's record (UpgradeRecord upgrade-gate, entry named by
    /// --deployment; docs/admission.md), for deployers other than OLM v0. Needs --deployment.
    #[arg(long, env = "UPGRADE_GATE_RECORD")]
    record: bool,
    /// With --record: the ServiceAccount annotated to wake OLM v0 once the upgrade is recorded
    /// complete. Default: the one the Deployment's pods run as. Whatever deploys the operator
    /// (OLM v0, OLM v1, Flux, Argo CD, found from its marks on the Deployment) is woken three
    /// times, about 5 s apart, to retry the next release the policy refused (docs/gitops.md).
    #[arg(long, env = "UPGRADE_GATE_WAKE_SERVICE_ACCOUNT", requires = "record")]
    wake_service_account: Option<String>,
    /// With --record: Argo CD's own namespace, where the Application that tracks the Deployment
    /// lives when its tracking names no namespace. Default: argocd.
    #[arg(long, env = "UPGRADE_GATE_ARGOCD_NAMESPACE", requires = "record")]
    argocd_namespace: Option<String>,
    /// The Lease only whose holder writes (every release of the operator must use the same).
    /// Default: upgrade-gate-keep-<deployment>, or upgrade-gate-keep without --deployment.
    #[arg(long, env = "UPGRADE_GATE_LEASE")]
    lease: Option<String>,
    #[command(flatten)]
    target: TargetFlags,
}

/// Runs `upgrade-gate keep` until SIGTERM; returns its exit code.
pub fn main(args: KeepArgs) -> ExitCode {
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    let code = runtime.block_on(async {
        let mut stop = shutdown::listen();
        let prepared = stop.unless_stopped(prepare(&args)).await;
        let (client, settings) = match prepared {
            Err(signal) => {
                tracing::info!(%signal, "stopped before starting");
                return 0;
            }
            Ok(Err(error)) => {
                eprintln!("upgrade-gate keep: {}", one_line(&error.to_string()));
                return crate::gate::exit_code(&Err(error));
            }
            Ok(Ok(prepared)) => prepared,
        };
        let stopped = async {
            let signal = stop.recv().await;
            tracing::info!(%signal, "stopping");
        };
        match completion::keep(client, settings, stopped).await {
            Ok(()) => 0,
            Err(error @ KeepError::LostLease(_)) => {
                eprintln!("upgrade-gate keep: {}", one_line(&error.to_string()));
                1
            }
            Err(error @ KeepError::Lease(_)) => {
                eprintln!("upgrade-gate keep: {}", one_line(&error.to_string()));
                2
            }
        }
    });
    ExitCode::from(code)
}

/// The flags checked and turned into the sidecar's settings, and a client.
async fn prepare(args: &KeepArgs) -> Result<(kube::Client, KeepSettings), GateError> {
    let invalid = |why: String| GateError::InvalidInput(why);
    let resources = args
        .resources
        .iter()
        .filter(|text| !text.trim().is_empty())
        .map(|text| text.parse::<ResourceName>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| invalid(error.to_string()))?;
    if resources.is_empty() {
        return Err(invalid("keep needs at least one --resource".into()));
    }
    let conditions: Vec<String> = args
        .done_condition
        .iter()
        .filter(|c| !c.trim().is_empty())
        .map(|c| c.trim().to_owned())
        .collect();
    let rule = Rule::build(
        &conditions,
        args.done_field.as_deref().filter(|f| !f.trim().is_empty()),
        args.done_when.as_deref().filter(|w| !w.trim().is_empty()),
    )
    .map_err(|error| invalid(error.to_string()))?;
    let release = args.release.trim().to_owned();
    if release.is_empty() {
        return Err(invalid(
            "keep needs a --release (UPGRADE_GATE_RELEASE)".into(),
        ));
    }
    let deployment = args
        .target
        .deployment
        .as_deref()
        .filter(|d| !d.trim().is_empty());
    let record = match (args.record, deployment) {
        (false, _) => None,
        (true, Some(deployment)) => Some(RecordSettings {
            deployment: deployment.to_owned(),
            wake: crate::admission::Wake {
                service_account: nonempty(args.wake_service_account.as_deref()),
                argo_cd_namespace: nonempty(args.argocd_namespace.as_deref()),
            },
        }),
        (true, None) => {
            return Err(invalid(
                "--record needs --deployment (UPGRADE_GATE_DEPLOYMENT): the record's entry is named after it".into(),
            ));
        }
    };
    let (target, client) = target_and_client(TargetInput {
        deployment,
        ..args.target.input()
    })
    .await?;
    let lease_name = match (&args.lease, deployment) {
        (Some(lease), _) if !lease.trim().is_empty() => lease.trim().to_owned(),
        (_, Some(deployment)) => format!("upgrade-gate-keep-{deployment}"),
        _ => "upgrade-gate-keep".to_owned(),
    };
    // The release is written into the Lease: a replica waiting for it
    // keeps the gate closed unless a replica of its own release leads.
    let lease = LeaseSettings::new(
        &lease_name,
        &target.namespace,
        &leader::identity(args.target.pod.as_deref(), "upgrade-gate-keep"),
    )
    .of_release(&release);
    lease
        .check()
        .map_err(|error| invalid(format!("the Lease: {error}")))?;
    let settings = KeepSettings {
        resources,
        namespaces: args
            .watch_namespaces
            .iter()
            .map(|n| n.trim().to_owned())
            .filter(|n| !n.is_empty())
            .collect(),
        rule,
        release,
        target,
        record,
        lease,
    };
    Ok((client, settings))
}

fn nonempty(value: Option<&str>) -> Option<String> {
    value
        .map(str::trim)
        .filter(|value| !value.is_empty())
        .map(str::to_owned)
}
