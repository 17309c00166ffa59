//! `kubectl upgrade-gate status`: every CSV with its gate — OLM's verdict,
//! the reason and message OLM reads, an admin's override, the CSV waiting to
//! replace it and since when — in one namespace (`-n`) or all (`-A`), once
//! or following changes (`--watch`); and, where OLM v1 runs, every
//! ClusterExtension installing into those namespaces: the bundle it
//! installed, the one it is trying to apply, what holds that one back (the
//! admission policy, with the state the operator recorded) and since when
//! (`extensions`); and, for every operator Deployment among them that opts
//! in to the admission policy, whether its hold is really in force: what
//! its `UpgradeRecord` says, whether the API server would judge an update
//! and a create of it, and, where the record holds it, a server-side
//! dry-run of a move to another release (`holds`).
//!
//! Owns: connecting the way kubectl does (`--kubeconfig`, `--context`), the
//! list and watch of ClusterServiceVersions and OperatorConditions, the list
//! of ClusterExtensions and what their rows read, the reads and dry-runs of
//! the holds, the output formats, and its own [`Error`]. Must not touch:
//! any object (read-only: list, get and watch; the one write is a
//! `dryRun=All` patch, which the API server never stores), or the command
//! line and its exit codes (`src/cli/kubectl_plugin.rs`).
//!
//! The `upgrade-gate` binary becomes this plugin when it runs under the
//! name `kubectl-upgrade_gate` (a copy or link on `PATH`): kubectl then
//! finds it for `kubectl upgrade-gate ...`.
//!
//! ```
//! use upgrade_gate::plugin::{Columns, render_table, rows, table_cells};
//! let rows = rows(&[], &[]);
//! let now = "2026-03-01T12:00:00Z".parse().unwrap();
//! let text = render_table(&table_cells(&rows, Columns { namespace: false, wide: false }, now));
//! assert!(text.starts_with("CSV"));
//! ```

mod extensions;
mod holds;
mod message;
mod rows;

use std::collections::BTreeMap;
use std::path::Path;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;
use serde::Serialize;
use serde_json::Value;
use tokio::time::Instant;

pub use extensions::{
    ExtensionRow, PendingRelease, extension_cells, extension_rows, opted_in, resolved_version,
};
pub use holds::{
    DryRun, HOLD_NOT_IN_FORCE_EXIT, Hold, UpgradeColumn, dry_run_outcome, dry_run_patch,
    dry_run_release, exit_code, hold, hold_cells, hold_warnings, operator_of, upgrade_of,
};
pub use message::{message_lines, summary};
pub use rows::{
    Columns, EntryView, GateRow, GateView, NextCsv, age, details, is_copied, render_table, rows,
    table_cells,
};

use crate::locate::{Olm, cluster_extensions_served, detect_olm};
use crate::operator_condition::{self, Obstacle, OperatorCondition};

/// Why the plugin could not list, watch or render. The command line maps
/// each onto the gate's exit codes (`crate::gate::EXIT_CODES`).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No kubeconfig, or not the context asked for.
    #[error("no cluster configuration: {0}")]
    NoClusterConfig(String),
    /// Discovery, a list or a watch failed (or was refused).
    #[error(transparent)]
    Condition(#[from] operator_condition::Error),
    /// The rows could not be rendered as asked.
    #[error("invalid input: {0}")]
    Render(String),
}

/// Which namespaces to show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// One namespace (`-n`, or the kubeconfig context's).
    Namespace(String),
    /// Every namespace (`-A`).
    All,
}

/// The output format (`-o`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// A table (the default).
    Table,
    /// A table with the message, override and the gate's age.
    Wide,
    /// JSON: `{"items": [...]}` (with `--watch`, one row per line).
    Json,
    /// YAML: `items: [...]` (with `--watch`, one document per row).
    Yaml,
}

/// Which kubeconfig and context kubectl was told to use; each absent one
/// is kubectl's default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KubeconfigChoice<'a> {
    /// `--kubeconfig` (else `KUBECONFIG`, `~/.kube/config`, or the
    /// in-cluster service account).
    pub path: Option<&'a Path>,
    /// `--context` (else the kubeconfig's current context).
    pub context: Option<&'a str>,
}

/// A client the way kubectl makes one, from `choice`; also the context's
/// namespace.
pub async fn connect(choice: KubeconfigChoice<'_>) -> Result<(kube::Client, String), Error> {
    let KubeconfigChoice {
        path: kubeconfig,
        context,
    } = choice;
    let options = KubeConfigOptions {
        context: context.map(str::to_owned),
        ..KubeConfigOptions::default()
    };
    let unusable = |error: &dyn std::error::Error| {
        Error::NoClusterConfig(crate::telemetry::error_chain(error))
    };
    let config = match (kubeconfig, context) {
        (Some(path), _) => {
            let file = Kubeconfig::read_from(path).map_err(|e| unusable(&e))?;
            kube::Config::from_custom_kubeconfig(file, &options)
                .await
                .map_err(|e| unusable(&e))?
        }
        (None, Some(_)) => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(|e| unusable(&e))?,
        (None, None) => kube::Config::infer().await.map_err(|e| unusable(&e))?,
    };
    let namespace = config.default_namespace.clone();
    let client = kube::Client::try_from(config).map_err(|e| unusable(&e))?;
    Ok((client, namespace))
}

fn csv_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("operators.coreos.com", "v1alpha1", "ClusterServiceVersion"),
        "clusterserviceversions",
    )
}

fn csv_api(client: &kube::Client, scope: &Scope) -> Api<DynamicObject> {
    match scope {
        Scope::Namespace(namespace) => {
            Api::namespaced_with(client.clone(), namespace, &csv_resource())
        }
        Scope::All => Api::all_with(client.clone(), &csv_resource()),
    }
}

fn condition_api(client: &kube::Client, scope: &Scope) -> Api<OperatorCondition> {
    match scope {
        Scope::Namespace(namespace) => Api::namespaced(client.clone(), namespace),
        Scope::All => Api::all(client.clone()),
    }
}

/// Lists, retrying what is transient until `deadline`; 403 and 404 end it
/// at once (exit 4 and 5).
async fn list_all<K>(api: &Api<K>, what: &'static str, deadline: Instant) -> Result<Vec<K>, Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let list = || async {
        match api.list(&ListParams::default()).await {
            Ok(list) => Ok(Ok(list.items)),
            Err(error) => match Obstacle::of(&error) {
                obstacle @ (Obstacle::Forbidden(_) | Obstacle::NotFound(_)) => Ok(Err(obstacle)),
                obstacle => Err(obstacle),
            },
        }
    };
    operator_condition::with_retries(deadline, what, list)
        .await?
        .map_err(|obstacle| {
            Error::Condition(operator_condition::Error::Failed {
                action: what,
                obstacle,
            })
        })
}

fn to_value(object: &DynamicObject) -> Value {
    serde_json::to_value(object).unwrap_or(Value::Null)
}

/// What one look at the cluster found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// Which OLM runs.
    pub olm: Olm,
    /// The rows (none unless OLM v0 runs).
    pub rows: Vec<GateRow>,
    /// The ClusterExtensions' rows (`None`: OLM v1 does not run here).
    pub extensions: Option<Vec<ExtensionRow>>,
    /// What the holds of the Deployments shown that opt in warn about
    /// ([`hold_warnings`]; none: every hold in force, or no Deployment
    /// opted in), one line each, joined by `"\nwarning: "`: printed after
    /// `warning: `, each line reads as a warning of its own.
    pub admission_warning: Option<String>,
    /// Why the ClusterExtensions could not be listed beside OLM v0's CSVs.
    pub extensions_warning: Option<String>,
}

impl Listed {
    /// The holds of every row and ClusterExtension.
    pub fn holds(&self) -> impl Iterator<Item = &Hold> {
        all_holds(&self.rows, self.extensions.as_deref())
    }

    /// The plugin's exit code for what it found:
    /// [`HOLD_NOT_IN_FORCE_EXIT`] when a dry-run proved a hold not in
    /// force, else 0.
    pub fn exit_code(&self) -> u8 {
        exit_code(self.holds())
    }
}

fn all_holds<'a>(
    rows: &'a [GateRow],
    extensions: Option<&'a [ExtensionRow]>,
) -> impl Iterator<Item = &'a Hold> {
    rows.iter()
        .flat_map(|row| &row.holds)
        .chain(extensions.into_iter().flatten().flat_map(|row| &row.holds))
}

/// An operator Deployment that opts in, as read.
struct OptedIn {
    deployment: Deployment,
    /// The CSV whose row shows its hold (none: a ClusterExtension's).
    csv: Option<String>,
    /// Why no dry-run can be made (the Deployment does not exist, or
    /// could not be read: `deployment` is then the CSV's description).
    no_dry_run: Option<String>,
}

/// Lists the CSVs and OperatorConditions in `scope` and builds the rows;
/// where OLM v1 runs, the ClusterExtensions' rows too; and the holds of
/// their Deployments that opt in to the admission policy.
pub async fn list(
    client: &kube::Client,
    scope: &Scope,
    deadline: Instant,
) -> Result<Listed, Error> {
    let olm = detect_olm(client, deadline).await?;
    let mut listed = Listed {
        olm,
        rows: Vec::new(),
        extensions: None,
        admission_warning: None,
        extensions_warning: None,
    };
    let mut csvs: Vec<Value> = Vec::new();
    let mut extensions = None;
    match olm {
        Olm::None => return Ok(listed),
        // Nothing but OLM v1: its ClusterExtensions are the answer.
        Olm::V1 => extensions = Some(read_extensions(client, scope, deadline).await?),
        Olm::V0 => {
            csvs = list_all(
                &csv_api(client, scope),
                "listing ClusterServiceVersions",
                deadline,
            )
            .await?
            .iter()
            .map(to_value)
            .collect();
            let conditions = list_all(
                &condition_api(client, scope),
                "listing OperatorConditions",
                deadline,
            )
            .await?;
            listed.rows = rows(&csvs, &conditions);
            // OLM v1 beside OLM v0: its extensions are shown too, and an
            // error reading them is a warning, not the end of the CSVs'
            // answer.
            if cluster_extensions_served(client, deadline).await? {
                match read_extensions(client, scope, deadline).await {
                    Ok(read) => extensions = Some(read),
                    Err(error) => listed.extensions_warning = Some(error.to_string()),
                }
            }
        }
    }
    let mut opted = csv_deployments(client, &csvs, deadline).await;
    if let Some(read) = &extensions {
        opted.extend(read.opted_in());
    }
    let holds = read_holds(client, &opted, deadline).await;
    for (opted, hold) in opted.iter().zip(&holds) {
        if let Some(csv) = &opted.csv
            && let Some(row) = listed
                .rows
                .iter_mut()
                .find(|row| row.namespace == hold.namespace && &row.csv == csv)
        {
            row.holds.push(hold.clone());
        }
    }
    if let Some(read) = extensions {
        listed.extensions = Some(extension_rows(
            &read.extensions,
            &read.deployment_values(),
            &holds,
            &read.revisions,
        ));
    }
    let warnings = hold_warnings(listed.holds());
    listed.admission_warning = (!warnings.is_empty()).then(|| warnings.join("\nwarning: "));
    Ok(listed)
}

fn cluster_extension_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("olm.operatorframework.io", "v1", "ClusterExtension"),
        crate::locate::CLUSTER_EXTENSIONS,
    )
}

/// The label selector of operator-controller's release index Secrets.
const OLM_V1_RELEASES: &str = "owner=operator-controller,type=index";

/// The ClusterExtensions installing into a scope and what their rows read.
struct ExtensionsRead {
    extensions: Vec<Value>,
    /// The Deployments they applied.
    deployments: Vec<Deployment>,
    /// The metadata of their Helm releases' revisions (empty when not
    /// allowed).
    revisions: Vec<Value>,
}

impl ExtensionsRead {
    fn deployment_values(&self) -> Vec<Value> {
        self.deployments
            .iter()
            .map(|deployment| serde_json::to_value(deployment).unwrap_or(Value::Null))
            .collect()
    }

    /// Their Deployments that opt in.
    fn opted_in(&self) -> Vec<OptedIn> {
        let values = self.deployment_values();
        self.extensions
            .iter()
            .flat_map(|extension| opted_in(extension, &values))
            .filter_map(|value| {
                let name = value["metadata"]["name"].as_str()?;
                let namespace = value["metadata"]["namespace"].as_str()?;
                self.deployments.iter().find(|deployment| {
                    deployment.metadata.name.as_deref() == Some(name)
                        && deployment.metadata.namespace.as_deref() == Some(namespace)
                })
            })
            .map(|deployment| OptedIn {
                deployment: deployment.clone(),
                csv: None,
                no_dry_run: None,
            })
            .collect()
    }
}

/// Reads the ClusterExtensions installing into `scope`, the Deployments
/// they applied and (metadata only, when allowed) their Helm releases'
/// revisions.
async fn read_extensions(
    client: &kube::Client,
    scope: &Scope,
    deadline: Instant,
) -> Result<ExtensionsRead, Error> {
    use k8s_openapi::api::core::v1::Secret;
    let extensions = list_all(
        &Api::<DynamicObject>::all_with(client.clone(), &cluster_extension_resource()),
        "listing ClusterExtensions",
        deadline,
    )
    .await?;
    let extensions: Vec<Value> = extensions
        .iter()
        .map(to_value)
        .filter(|extension| match scope {
            Scope::All => true,
            Scope::Namespace(namespace) => extension["spec"]["namespace"] == namespace.as_str(),
        })
        .collect();
    let namespaces: std::collections::BTreeSet<String> = extensions
        .iter()
        .filter_map(|extension| extension["spec"]["namespace"].as_str())
        .map(str::to_owned)
        .collect();
    let mut deployments = Vec::new();
    let owned = format!(
        "{}=ClusterExtension",
        crate::locate::OLM_V1_OWNER_KIND_LABEL
    );
    for namespace in &namespaces {
        let api = Api::<Deployment>::namespaced(client.clone(), namespace);
        let listed = api
            .list(&ListParams::default().labels(&owned))
            .await
            .map_err(|error| listing_failed("listing the extensions' Deployments", &error))?;
        deployments.extend(listed.items);
    }
    // Metadata only; a user who may not list Secrets gets no `since`.
    let revisions = Api::<Secret>::all(client.clone())
        .list_metadata(&ListParams::default().labels(OLM_V1_RELEASES))
        .await
        .map(|list| {
            list.items
                .iter()
                .map(|item| serde_json::to_value(item).unwrap_or(Value::Null))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    Ok(ExtensionsRead {
        extensions,
        deployments,
        revisions,
    })
}

fn listing_failed(action: &'static str, error: &kube::Error) -> Error {
    Error::Condition(operator_condition::Error::Failed {
        action,
        obstacle: Obstacle::of(error),
    })
}

/// The Deployments the CSVs (copies left out) install that opt in to the
/// admission policy, once each: `(namespace, name, the CSVs that name it,
/// its entry of the first CSV's install strategy: name, label, spec)`.
fn csv_opted_in(csvs: &[Value]) -> Vec<(String, String, Vec<String>, Value)> {
    let mut found: Vec<(String, String, Vec<String>, Value)> = Vec::new();
    for csv in csvs.iter().filter(|csv| !is_copied(csv)) {
        let namespace = csv["metadata"]["namespace"].as_str().unwrap_or_default();
        let name = csv["metadata"]["name"].as_str().unwrap_or_default();
        let deployments = csv
            .pointer("/spec/install/spec/deployments")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|deployment| {
                deployment["label"][crate::admission::ADMISSION_LABEL] == crate::admission::ENFORCE
            });
        for deployment in deployments {
            let deployment_name = deployment["name"].as_str().unwrap_or_default();
            match found
                .iter_mut()
                .find(|(ns, found, _, _)| ns == namespace && found == deployment_name)
            {
                Some((_, _, owners, _)) => owners.push(name.to_owned()),
                None => found.push((
                    namespace.to_owned(),
                    deployment_name.to_owned(),
                    vec![name.to_owned()],
                    deployment.clone(),
                )),
            }
        }
    }
    found
}

/// The CSV whose row shows a Deployment's hold: the one OLM installed it
/// for (its label `olm.owner`) if it names it, else the first that does.
fn csv_owner<'a>(deployment: &Deployment, owners: &'a [String]) -> Option<&'a String> {
    let installed_for = deployment
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(crate::locate::OLM_OWNER_LABEL));
    owners
        .iter()
        .find(|owner| Some(*owner) == installed_for)
        .or(owners.first())
}

/// Reads the Deployments of [`csv_opted_in`]; one that does not exist or
/// cannot be read is described by its CSV, and gets no dry-run.
async fn csv_deployments(client: &kube::Client, csvs: &[Value], deadline: Instant) -> Vec<OptedIn> {
    let mut opted = Vec::new();
    for (namespace, name, owners, entry) in csv_opted_in(csvs) {
        // As its CSV describes it: labels and, where it reads as one, the
        // pod template (its images).
        let described = || -> Deployment {
            let metadata = serde_json::json!({
                "name": name, "namespace": namespace, "labels": entry["label"]});
            serde_json::from_value(serde_json::json!({"metadata": metadata, "spec": entry["spec"]}))
                .or_else(|_| serde_json::from_value(serde_json::json!({"metadata": metadata})))
                .unwrap_or_default()
        };
        let api = Api::<Deployment>::namespaced(client.clone(), &namespace);
        let read = by(deadline, async {
            api.get_opt(&name)
                .await
                .map_err(|error| Obstacle::of(&error).to_string())
        })
        .await;
        let (deployment, no_dry_run) = match read {
            Ok(Some(deployment)) => (deployment, None),
            Ok(None) => (
                described(),
                Some("the Deployment does not exist yet".to_owned()),
            ),
            Err(why) => (
                described(),
                Some(format!("the Deployment could not be read ({why})")),
            ),
        };
        let csv = csv_owner(&deployment, &owners).cloned();
        opted.push(OptedIn {
            deployment,
            csv,
            no_dry_run,
        });
    }
    opted
}

/// The holds of `opted`, in its order: the policies and bindings read
/// once, each namespace and its record once, and a dry-run for each
/// Deployment its record holds.
async fn read_holds(client: &kube::Client, opted: &[OptedIn], deadline: Instant) -> Vec<Hold> {
    if opted.is_empty() {
        return Vec::new();
    }
    let cluster = by(deadline, crate::admission::read_policy(client)).await;
    let cluster = cluster
        .as_ref()
        .map(|(policies, bindings)| (policies.as_slice(), bindings.as_slice()))
        .map_err(String::as_str);
    type Read = (
        Result<Namespace, String>,
        Result<Option<DynamicObject>, String>,
    );
    let mut namespaces: BTreeMap<String, Read> = BTreeMap::new();
    for opted in opted {
        let namespace = opted.deployment.namespace().unwrap_or_default();
        if namespaces.contains_key(&namespace) {
            continue;
        }
        let read_namespace = by(deadline, async {
            Api::<Namespace>::all(client.clone())
                .get(&namespace)
                .await
                .map_err(|error| Obstacle::of(&error).to_string())
        })
        .await
        .map_err(|why| format!("reading the namespace: {why}"));
        let record = by(deadline, async {
            Api::<DynamicObject>::namespaced_with(
                client.clone(),
                &namespace,
                &crate::admission::record_resource(),
            )
            .get_opt(crate::admission::RECORD_NAME)
            .await
            .map_err(|error| Obstacle::of(&error).to_string())
        })
        .await;
        namespaces.insert(namespace, (read_namespace, record));
    }
    let mut holds = Vec::new();
    for opted in opted {
        let namespace = opted.deployment.namespace().unwrap_or_default();
        let (read_namespace, record) = &namespaces[&namespace];
        let record = record.as_ref().map(Option::as_ref).map_err(String::as_str);
        let policy = crate::admission::policy_in_force(
            cluster,
            read_namespace.as_ref().map_err(String::as_str),
            &opted.deployment,
            record,
        );
        let mut hold = hold(
            &opted.deployment,
            record,
            policy,
            opted.no_dry_run.as_deref(),
        );
        if hold.wants_dry_run() {
            hold.dry_run = dry_run(client, &hold, deadline).await;
        }
        holds.push(hold);
    }
    holds
}

/// A server-side dry-run (`dryRun=All`: admission runs, nothing is
/// stored) of moving the hold's Deployment to another release label.
async fn dry_run(client: &kube::Client, hold: &Hold, deadline: Instant) -> DryRun {
    let tried = dry_run_release(hold.release.as_deref());
    let params = PatchParams {
        dry_run: true,
        field_manager: Some(holds::FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    let api = Api::<Deployment>::namespaced(client.clone(), &hold.namespace);
    let patch = Patch::Merge(dry_run_patch(&tried));
    let answer = tokio::time::timeout_at(deadline, api.patch(&hold.deployment, &params, &patch))
        .await
        .map_err(|_| Obstacle::Timeout)
        .and_then(|answer| answer.map(drop).map_err(|error| Obstacle::of(&error)));
    dry_run_outcome(answer, &tried)
}

/// `read`'s answer, or an error once `deadline` (`--request-timeout`)
/// passed: a hold's reads never outlast the listing's deadline.
async fn by<T>(
    deadline: Instant,
    read: impl std::future::Future<Output = Result<T, String>>,
) -> Result<T, String> {
    tokio::time::timeout_at(deadline, read)
        .await
        .unwrap_or_else(|_| Err("no answer before --request-timeout".to_owned()))
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Items<'a> {
    items: &'a [GateRow],
    #[serde(skip_serializing_if = "Option::is_none")]
    cluster_extensions: Option<&'a [ExtensionRow]>,
}

/// The CSV rows and the ClusterExtensions' (`None`: OLM v1 does not run)
/// in `format` (`namespace`: show a NAMESPACE column): tables one after
/// the other, JSON and YAML with `clusterExtensions` beside `items`.
pub fn render(
    rows: &[GateRow],
    extensions: Option<&[ExtensionRow]>,
    format: Format,
    namespace: bool,
    now: k8s_openapi::jiff::Timestamp,
) -> Result<String, Error> {
    let invalid =
        |error: &dyn std::error::Error| Error::Render(format!("cannot render the rows: {error}"));
    match format {
        Format::Table | Format::Wide => {
            let columns = Columns {
                namespace,
                wide: format == Format::Wide,
            };
            let mut out = String::new();
            if !rows.is_empty() || extensions.is_none() {
                out += &render_table(&table_cells(rows, columns, now));
                if columns.wide {
                    out += &details(rows);
                }
            }
            if let Some(extensions) = extensions.filter(|extensions| !extensions.is_empty()) {
                if !out.is_empty() {
                    out.push('\n');
                }
                out += &render_table(&extension_cells(extensions, now));
            }
            let holds: Vec<&Hold> = all_holds(rows, extensions).collect();
            if !holds.is_empty() {
                if !out.is_empty() {
                    out.push('\n');
                }
                out += &render_table(&hold_cells(holds));
            }
            Ok(out)
        }
        Format::Json => serde_json::to_string_pretty(&Items {
            items: rows,
            cluster_extensions: extensions,
        })
        .map(|text| text + "\n")
        .map_err(|e| invalid(&e)),
        Format::Yaml => serde_saphyr::to_string(&Items {
            items: rows,
            cluster_extensions: extensions,
        })
        .map_err(|e| invalid(&e)),
    }
}

/// One row changed, in `format`, for `--watch` (tables print the header once).
fn render_change(
    row: &GateRow,
    format: Format,
    namespace: bool,
    header: bool,
    now: k8s_openapi::jiff::Timestamp,
) -> Result<String, Error> {
    let invalid =
        |error: &dyn std::error::Error| Error::Render(format!("cannot render the row: {error}"));
    match format {
        Format::Table | Format::Wide => {
            let columns = Columns {
                namespace,
                wide: format == Format::Wide,
            };
            let cells = table_cells(std::slice::from_ref(row), columns, now);
            let rendered = render_table(&cells);
            Ok(if header {
                rendered
            } else {
                rendered
                    .lines()
                    .skip(1)
                    .map(|line| format!("{line}\n"))
                    .collect()
            })
        }
        Format::Json => serde_json::to_string(row)
            .map(|text| text + "\n")
            .map_err(|e| invalid(&e)),
        Format::Yaml => serde_saphyr::to_string(row)
            .map(|text| format!("---\n{text}"))
            .map_err(|e| invalid(&e)),
    }
}

fn key(meta: &kube::api::ObjectMeta) -> (String, String) {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// Follows CSVs and OperatorConditions in `scope` and calls `print` with
/// every row that changed (all rows once both lists are in). Ends only
/// with an error (or when the caller stops it).
pub async fn watch(
    client: &kube::Client,
    scope: &Scope,
    format: Format,
    namespace_column: bool,
    mut print: impl FnMut(&str),
) -> Result<(), Error> {
    let config = watcher::Config::default();
    let csvs = watcher(csv_api(client, scope), config.clone()).map(|event| event.map(Change::Csv));
    let conditions =
        watcher(condition_api(client, scope), config).map(|event| event.map(Change::Condition));
    let mut events = futures::stream::select(csvs.boxed(), conditions.boxed());
    let mut csv_objects: BTreeMap<(String, String), Value> = BTreeMap::new();
    let mut condition_objects: BTreeMap<(String, String), OperatorCondition> = BTreeMap::new();
    let mut printed: BTreeMap<(String, String), GateRow> = BTreeMap::new();
    let (mut csvs_listed, mut conditions_listed) = (false, false);
    let mut header = true;
    while let Some(event) = events.next().await {
        let event = event.map_err(|error| {
            Error::Condition(operator_condition::Error::Failed {
                action: "watching",
                obstacle: Obstacle::Unexpected(crate::telemetry::error_chain(&error)),
            })
        })?;
        match event {
            Change::Csv(event) => apply(&mut csv_objects, &mut csvs_listed, event, |o| {
                (key(&o.metadata), to_value(&o))
            }),
            Change::Condition(event) => {
                apply(&mut condition_objects, &mut conditions_listed, event, |o| {
                    (key(kube::Resource::meta(&o)), o)
                })
            }
        }
        if !(csvs_listed && conditions_listed) {
            continue;
        }
        let csvs: Vec<Value> = csv_objects.values().cloned().collect();
        let conditions: Vec<OperatorCondition> = condition_objects.values().cloned().collect();
        let now = k8s_openapi::jiff::Timestamp::now();
        for row in rows(&csvs, &conditions) {
            let row_key = (row.namespace.clone(), row.csv.clone());
            if printed.get(&row_key) == Some(&row) {
                continue;
            }
            print(&render_change(&row, format, namespace_column, header, now)?);
            header = false;
            printed.insert(row_key, row);
        }
    }
    Ok(())
}

enum Change {
    Csv(watcher::Event<DynamicObject>),
    Condition(watcher::Event<OperatorCondition>),
}

/// Applies one watcher event to `objects`; `listed` is true while a full
/// list is in (false during a re-list).
fn apply<K, V>(
    objects: &mut BTreeMap<(String, String), V>,
    listed: &mut bool,
    event: watcher::Event<K>,
    entry: impl Fn(K) -> ((String, String), V),
) {
    match event {
        watcher::Event::Apply(object) | watcher::Event::InitApply(object) => {
            let (key, value) = entry(object);
            objects.insert(key, value);
        }
        watcher::Event::Delete(object) => {
            let (key, _) = entry(object);
            objects.remove(&key);
        }
        watcher::Event::Init => {
            objects.clear();
            *listed = false;
        }
        watcher::Event::InitDone => *listed = true,
    }
}

#[cfg(test)]
mod tests;
