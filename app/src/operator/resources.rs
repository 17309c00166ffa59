//! The objects the operator creates for an App: its upgrade Job and its
//! server Deployment, built as plain values, and the labels by which they
//! are found and recognised again.
//!
//! Owns: names, labels, annotations (the intent a Job serves),
//! ownerReferences, the pod security settings and the commands of
//! `app-db-upgrade` and `app-server` in those pods. Must not touch: the
//! cluster (`act` sends these) or the decision.
//!
//! Both pods take the database connection from the App's Secret mounted as
//! files (`--database-secret-dir`), so the password is never in an
//! environment variable or an argument, and run under the restricted Pod
//! Security Standard.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::batch::v1::{
    Job, JobSpec, PodFailurePolicy, PodFailurePolicyOnExitCodesRequirement, PodFailurePolicyRule,
};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, HTTPGetAction, KeyToPath,
    PersistentVolumeClaimVolumeSource, PodSecurityContext, PodSpec, PodTemplateSpec, Probe,
    SeccompProfile, SecretVolumeSource, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Resource;

use crate::crd::{App, UpgradeStatus};
use crate::schema::UpgradeModel;

/// Label on everything the operator creates; its Job and Deployment watches
/// select on it.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of [`MANAGED_BY_LABEL`].
pub const MANAGED_BY: &str = "upgrade-gate-app-operator";
/// Label naming the App an object belongs to.
pub const APP_LABEL: &str = "upgrade-gate.dev/app";
/// Label/annotation naming the release an object was made for (on a Job:
/// the release its upgrade goes to).
pub const RELEASE_LABEL: &str = "upgrade-gate.dev/release";
/// Label with the UID of the App a Job (and its pod) belongs to: an App
/// deleted and created again under the same name is another App.
pub const APP_UID_LABEL: &str = "upgrade-gate.dev/app-uid";
/// Label of a Job: the release its upgrade starts from (`none`: empty).
pub const FROM_RELEASE_LABEL: &str = "upgrade-gate.dev/from-release";
/// Label of a Job: its attempt number.
pub const ATTEMPT_LABEL: &str = "upgrade-gate.dev/attempt";
/// Annotation of a Job: when its upgrade's first attempt was recorded
/// (`status.upgrade.startTime`), which tells two upgrades with the same
/// releases and attempt apart.
pub const INTENT_RECORDED_ANNOTATION: &str = "upgrade-gate.dev/intent-recorded-at";
/// The standard component label.
pub const COMPONENT_LABEL: &str = "app.kubernetes.io/component";
/// [`COMPONENT_LABEL`] of the server's pods.
pub const SERVER_COMPONENT: &str = "server";
/// [`COMPONENT_LABEL`] of the upgrade Job and its pod.
pub const JOB_COMPONENT: &str = "database-upgrade";
/// The upgrade Job's container.
pub const JOB_CONTAINER: &str = "app-db-upgrade";
/// Upper bound of pod retries inside one upgrade Job; the operator's own
/// retries (with backoff, `spec.upgrade.retryLimit`) come on top.
pub const JOB_BACKOFF_LIMIT: i32 = 1;
/// `app-db-upgrade` exit codes no retry can change (invalid command line or
/// configuration, a database newer than the release, a diverged history):
/// the Job fails at once instead of running its pod again.
pub const PERMANENT_EXIT_CODES: [i32; 4] = [2, 3, 6, 7];

const SECRET_DIR: &str = "/var/run/secrets/upgrade-gate.dev/database";
/// Where the backup claim is mounted in the Job's pod.
pub const BACKUP_DIR: &str = "/var/lib/upgrade-gate/backups";
/// The port `app-server` listens on in its pod.
pub const SERVER_PORT: i32 = 8080;

/// The server Deployment's name.
pub fn server_name(app: &str) -> String {
    format!("{app}-server")
}

/// What the operator puts into pods besides the App.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodSettings {
    /// The operator's own image (carries every binary).
    pub image: String,
    /// The release the operator acts as.
    pub release: String,
    /// Which migrations its upgrade Jobs apply: ours, or the naive model of
    /// the feature request's operator (`--model-naive-successor`, tests only).
    pub model: UpgradeModel,
}

fn labels(app: &App, component: &str, release: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned()),
        (
            APP_LABEL.to_owned(),
            app.metadata.name.clone().unwrap_or_default(),
        ),
        (COMPONENT_LABEL.to_owned(), component.to_owned()),
        (RELEASE_LABEL.to_owned(), release.to_owned()),
    ])
}

/// The upgrade a Job serves: what `status.upgrade` recorded before the Job
/// was created. Only a Job of the App carrying the intent in status counts
/// as that upgrade's attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobIntent {
    /// The Job's name.
    pub job: String,
    /// Release the upgrade starts from.
    pub from: String,
    /// Release the upgrade goes to.
    pub to: String,
    /// Attempt number.
    pub attempt: i32,
    /// `status.upgrade.startTime` as written (RFC 3339, seconds).
    pub recorded_at: String,
}

impl JobIntent {
    /// The intent of the upgrade in status.
    pub fn of(upgrade: &UpgradeStatus) -> Self {
        JobIntent {
            job: upgrade.job.clone(),
            from: upgrade.from.clone(),
            to: upgrade.to.clone(),
            attempt: upgrade.attempts,
            recorded_at: serde_json::to_value(&upgrade.start_time)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
        }
    }

    /// The intent a Job carries, if it carries a whole one.
    pub fn carried_by(job: &Job) -> Option<Self> {
        let label = |key: &str| job.metadata.labels.as_ref()?.get(key).cloned();
        Some(JobIntent {
            job: job.metadata.name.clone()?,
            from: label(FROM_RELEASE_LABEL)?,
            to: label(RELEASE_LABEL)?,
            attempt: label(ATTEMPT_LABEL)?.parse().ok()?,
            recorded_at: job
                .metadata
                .annotations
                .as_ref()?
                .get(INTENT_RECORDED_ANNOTATION)?
                .clone(),
        })
    }
}

/// Where an archive the Job reported (a path in its pod) is, for a person:
/// `pvc/<claim>/<path in the claim>`; `None` when it is not on the claim.
pub fn backup_location_of(claim: &str, archive: &str) -> Option<String> {
    let inside = archive.strip_prefix(BACKUP_DIR)?.trim_start_matches('/');
    (!inside.is_empty()).then(|| format!("pvc/{claim}/{inside}"))
}

fn owned_meta(app: &App, name: &str, labels: BTreeMap<String, String>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: app.metadata.namespace.clone(),
        labels: Some(labels),
        owner_references: app.controller_owner_ref(&()).map(|r| vec![r]),
        ..ObjectMeta::default()
    }
}

fn restricted_pod() -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(65532),
        run_as_group: Some(65532),
        fs_group: Some(65532),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".to_owned(),
            ..SeccompProfile::default()
        }),
        ..PodSecurityContext::default()
    }
}

/// The container security context of the restricted Pod Security Standard.
pub fn restricted_container() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_owned()]),
            ..Capabilities::default()
        }),
        ..SecurityContext::default()
    }
}

/// The App's Secret as files: the keys the spec names become the file names
/// `app-db-upgrade --database-secret-dir` reads.
fn database_secret_volume(app: &App) -> Volume {
    let keys = app.spec.database.secret_ref.effective_keys();
    let items: Vec<KeyToPath> = [
        (keys.url, "url"),
        (keys.host, "host"),
        (keys.port, "port"),
        (keys.dbname, "dbname"),
        (keys.user, "user"),
        (keys.password, "password"),
    ]
    .into_iter()
    .filter_map(|(key, path)| {
        key.map(|key| KeyToPath {
            key,
            path: path.to_owned(),
            mode: None,
        })
    })
    .collect();
    Volume {
        name: "database".to_owned(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(app.spec.database.secret_ref.name.clone()),
            items: Some(items),
            default_mode: Some(0o440),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    }
}

fn tmp_volume() -> Volume {
    Volume {
        name: "tmp".to_owned(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    }
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.to_owned(),
        mount_path: path.to_owned(),
        read_only: Some(read_only),
        ..VolumeMount::default()
    }
}

fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        ..EnvVar::default()
    }
}

/// `app-db-upgrade run`'s arguments in an upgrade Job of `app`.
fn job_args(app: &App, settings: &PodSettings) -> Vec<String> {
    let mut args = vec![
        "run".to_owned(),
        "--release".to_owned(),
        settings.release.clone(),
        "--backup-dir".to_owned(),
        BACKUP_DIR.to_owned(),
        "--database-secret-dir".to_owned(),
        SECRET_DIR.to_owned(),
        "--log-format".to_owned(),
        "json".to_owned(),
        // The App's own directory on the claim: Apps sharing a claim
        // never share backups (or their retention).
        "--app".to_owned(),
        format!(
            "{}/{}",
            app.metadata.namespace.as_deref().unwrap_or_default(),
            app.metadata.name.as_deref().unwrap_or_default()
        ),
    ];
    if settings.model == UpgradeModel::NaiveSuccessor {
        args.push("--model-naive-successor".to_owned());
    }
    args
}

/// The upgrade Job of one intent, named `intent.job` (deterministic, so a
/// restarted operator finds it), labelled with the App's UID and the intent.
pub fn upgrade_job(app: &App, intent: &JobIntent, settings: &PodSettings) -> Job {
    let mut pod_labels = labels(app, JOB_COMPONENT, &settings.release);
    pod_labels.insert(
        APP_UID_LABEL.to_owned(),
        app.metadata.uid.clone().unwrap_or_default(),
    );
    let mut job_labels = pod_labels.clone();
    job_labels.insert(RELEASE_LABEL.to_owned(), intent.to.clone());
    job_labels.insert(FROM_RELEASE_LABEL.to_owned(), intent.from.clone());
    job_labels.insert(ATTEMPT_LABEL.to_owned(), intent.attempt.to_string());
    let mut metadata = owned_meta(app, &intent.job, job_labels);
    metadata.annotations = Some(BTreeMap::from([(
        INTENT_RECORDED_ANNOTATION.to_owned(),
        intent.recorded_at.clone(),
    )]));
    let container = Container {
        name: JOB_CONTAINER.to_owned(),
        image: Some(settings.image.clone()),
        image_pull_policy: Some("IfNotPresent".to_owned()),
        command: Some(vec!["app-db-upgrade".to_owned()]),
        args: Some(job_args(app, settings)),
        env: Some(vec![
            env("PGSSLMODE", app.spec.database.ssl_mode.as_libpq()),
            env("HOME", "/tmp"),
        ]),
        volume_mounts: Some(vec![
            mount("database", SECRET_DIR, true),
            mount("backups", BACKUP_DIR, false),
            mount("tmp", "/tmp", false),
        ]),
        security_context: Some(restricted_container()),
        termination_message_policy: Some("FallbackToLogsOnError".to_owned()),
        ..Container::default()
    };
    Job {
        metadata,
        spec: Some(JobSpec {
            active_deadline_seconds: Some(app.spec.upgrade.job_timeout_seconds),
            backoff_limit: Some(JOB_BACKOFF_LIMIT),
            pod_failure_policy: Some(PodFailurePolicy {
                rules: vec![PodFailurePolicyRule {
                    action: "FailJob".to_owned(),
                    on_exit_codes: Some(PodFailurePolicyOnExitCodesRequirement {
                        container_name: Some(JOB_CONTAINER.to_owned()),
                        operator: "In".to_owned(),
                        values: PERMANENT_EXIT_CODES.to_vec(),
                    }),
                    ..PodFailurePolicyRule::default()
                }],
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    restart_policy: Some("Never".to_owned()),
                    automount_service_account_token: Some(false),
                    security_context: Some(restricted_pod()),
                    containers: vec![container],
                    volumes: Some(vec![
                        database_secret_volume(app),
                        Volume {
                            name: "backups".to_owned(),
                            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                                claim_name: app.spec.upgrade.backup_volume_claim.clone(),
                                read_only: Some(false),
                            }),
                            ..Volume::default()
                        },
                        tmp_volume(),
                    ]),
                    ..PodSpec::default()
                }),
            },
            ..JobSpec::default()
        }),
        status: None,
    }
}

/// The server Deployment at `replicas`, running `app-server` of this release.
pub fn server_deployment(app: &App, replicas: i32, settings: &PodSettings) -> Deployment {
    let name = server_name(&app.metadata.name.clone().unwrap_or_default());
    let labels = labels(app, SERVER_COMPONENT, &settings.release);
    let selector = BTreeMap::from([
        (
            APP_LABEL.to_owned(),
            app.metadata.name.clone().unwrap_or_default(),
        ),
        (COMPONENT_LABEL.to_owned(), SERVER_COMPONENT.to_owned()),
    ]);
    let probe = |path: &str| Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_owned()),
            port: IntOrString::Int(SERVER_PORT),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(10),
        ..Probe::default()
    };
    let container = Container {
        name: "app-server".to_owned(),
        image: Some(
            app.spec
                .server
                .image
                .clone()
                .unwrap_or_else(|| settings.image.clone()),
        ),
        image_pull_policy: Some("IfNotPresent".to_owned()),
        command: Some(vec!["app-server".to_owned()]),
        args: Some(vec![
            "--release".to_owned(),
            settings.release.clone(),
            "--listen".to_owned(),
            format!("0.0.0.0:{SERVER_PORT}"),
            "--database-secret-dir".to_owned(),
            SECRET_DIR.to_owned(),
            "--log-format".to_owned(),
            "json".to_owned(),
        ]),
        env: Some(vec![env(
            "PGSSLMODE",
            app.spec.database.ssl_mode.as_libpq(),
        )]),
        ports: Some(vec![ContainerPort {
            name: Some("http".to_owned()),
            container_port: SERVER_PORT,
            ..ContainerPort::default()
        }]),
        readiness_probe: Some(probe("/healthz")),
        liveness_probe: Some(probe("/healthz")),
        volume_mounts: Some(vec![mount("database", SECRET_DIR, true)]),
        security_context: Some(restricted_container()),
        ..Container::default()
    };
    Deployment {
        metadata: owned_meta(app, &name, labels.clone()),
        spec: Some(DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: Some(selector),
                ..LabelSelector::default()
            },
            // Two releases of the server never run at once against one schema.
            strategy: Some(DeploymentStrategy {
                type_: Some("Recreate".to_owned()),
                ..DeploymentStrategy::default()
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    automount_service_account_token: Some(false),
                    security_context: Some(restricted_pod()),
                    containers: vec![container],
                    volumes: Some(vec![database_secret_volume(app)]),
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        status: None,
    }
}

/// Whether a Deployment as read already is what `desired` asks for (replicas,
/// release, image, arguments), so that nothing is written when nothing changed.
pub fn server_matches(observed: &Deployment, desired: &Deployment) -> bool {
    let replicas = |d: &Deployment| d.spec.as_ref().and_then(|s| s.replicas);
    let container = |d: &Deployment| {
        d.spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|p| p.containers.first())
            .map(|c| (c.image.clone(), c.args.clone()))
    };
    let release = |d: &Deployment| {
        d.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(RELEASE_LABEL).cloned())
    };
    replicas(observed) == replicas(desired)
        && container(observed) == container(desired)
        && release(observed) == release(desired)
}

#[cfg(test)]
mod tests;
