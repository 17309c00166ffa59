//! `kubectl upgrade-gate status`: every CSV with its gate — OLM's verdict,
//! the reason and message OLM reads, an admin's override, the CSV waiting to
//! replace it and since when — in one namespace (`-n`) or all (`-A`), once
//! or following changes (`--watch`); and, where OLM v1 runs, every
//! ClusterExtension installing into those namespaces: the bundle it
//! installed, the one it is trying to apply, what holds that one back (the
//! admission policy, with the state the operator recorded) and since when
//! (`extensions`).
//!
//! Owns: connecting the way kubectl does (`--kubeconfig`, `--context`), the
//! list and watch of ClusterServiceVersions and OperatorConditions, the list
//! of ClusterExtensions and what their rows read, and the output formats.
//! Must not touch: any object (read-only: list, get and watch).
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
mod rows;

use std::collections::BTreeMap;
use std::path::Path;

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;
use serde::Serialize;
use serde_json::Value;
use tokio::time::Instant;

pub use extensions::{
    ExtensionRow, PendingRelease, UpgradeRecord, extension_cells, extension_rows, resolved_version,
};
pub use rows::{
    Columns, EntryView, GateRow, GateView, NextCsv, age, details, is_copied, message_lines,
    render_table, rows, summary, table_cells,
};

use crate::gate::{GateError, Olm, cluster_extensions_served, detect_olm};
use crate::operator_condition::{self, Obstacle, OperatorCondition};

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
pub async fn connect(choice: KubeconfigChoice<'_>) -> Result<(kube::Client, String), GateError> {
    let KubeconfigChoice {
        path: kubeconfig,
        context,
    } = choice;
    let options = KubeConfigOptions {
        context: context.map(str::to_owned),
        ..KubeConfigOptions::default()
    };
    let unusable = |error: &dyn std::error::Error| {
        GateError::NoClusterConfig(crate::telemetry::error_chain(error))
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
async fn list_all<K>(
    api: &Api<K>,
    what: &'static str,
    deadline: Instant,
) -> Result<Vec<K>, GateError>
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
            GateError::Condition(operator_condition::Error::Failed {
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
    /// Why the admission policy does not protect a Deployment shown here
    /// that opted in to it (none: in force, or no Deployment opted in).
    pub admission_warning: Option<String>,
    /// Why the ClusterExtensions could not be listed beside OLM v0's CSVs.
    pub extensions_warning: Option<String>,
}

/// Lists the CSVs and OperatorConditions in `scope` and builds the rows;
/// where OLM v1 runs, the ClusterExtensions' rows too.
pub async fn list(
    client: &kube::Client,
    scope: &Scope,
    deadline: Instant,
) -> Result<Listed, GateError> {
    let olm = detect_olm(client, deadline).await?;
    let mut listed = Listed {
        olm,
        rows: Vec::new(),
        extensions: None,
        admission_warning: None,
        extensions_warning: None,
    };
    match olm {
        Olm::None => return Ok(listed),
        // Nothing but OLM v1: its ClusterExtensions are the answer.
        Olm::V1 => {
            listed.extensions = Some(list_extensions(client, scope, deadline).await?);
            return Ok(listed);
        }
        Olm::V0 => {}
    }
    let csvs = list_all(
        &csv_api(client, scope),
        "listing ClusterServiceVersions",
        deadline,
    )
    .await?;
    let conditions = list_all(
        &condition_api(client, scope),
        "listing OperatorConditions",
        deadline,
    )
    .await?;
    let csvs: Vec<Value> = csvs.iter().map(to_value).collect();
    listed.admission_warning = if csvs.iter().any(opts_in) {
        crate::admission::read_policy(client).await.warning()
    } else {
        None
    };
    listed.rows = rows(&csvs, &conditions);
    // OLM v1 beside OLM v0: its extensions are shown too, and an error
    // reading them is a warning, not the end of the CSVs' answer.
    if cluster_extensions_served(client, deadline).await? {
        match list_extensions(client, scope, deadline).await {
            Ok(extensions) => listed.extensions = Some(extensions),
            Err(error) => listed.extensions_warning = Some(error.to_string()),
        }
    }
    Ok(listed)
}

fn cluster_extension_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("olm.operatorframework.io", "v1", "ClusterExtension"),
        crate::gate::CLUSTER_EXTENSIONS,
    )
}

/// The label selector of operator-controller's release index Secrets.
const OLM_V1_RELEASES: &str = "owner=operator-controller,type=index";

/// The ClusterExtensions installing into `scope`, with what their rows
/// read: the Deployments they applied, the namespaces' admission state,
/// and (metadata only, when allowed) their Helm releases' revisions.
async fn list_extensions(
    client: &kube::Client,
    scope: &Scope,
    deadline: Instant,
) -> Result<Vec<ExtensionRow>, GateError> {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
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
    let mut states = BTreeMap::new();
    let owned = format!("{}=ClusterExtension", crate::gate::OLM_V1_OWNER_KIND_LABEL);
    for namespace in &namespaces {
        let api = Api::<Deployment>::namespaced(client.clone(), namespace);
        let listed = api
            .list(&ListParams::default().labels(&owned))
            .await
            .map_err(|error| listing_failed("listing the extensions' Deployments", &error))?;
        deployments.extend(
            listed
                .items
                .iter()
                .map(|deployment| serde_json::to_value(deployment).unwrap_or(Value::Null)),
        );
        let state = Api::<ConfigMap>::namespaced(client.clone(), namespace)
            .get_opt(crate::admission::STATE_CONFIGMAP)
            .await
            .map_err(|error| listing_failed("reading the admission state", &error))?;
        if let Some(data) = state.and_then(|state| state.data) {
            states.insert(namespace.clone(), data);
        }
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
    Ok(extension_rows(
        &extensions,
        &deployments,
        &states,
        &revisions,
    ))
}

fn listing_failed(action: &'static str, error: &kube::Error) -> GateError {
    GateError::Condition(operator_condition::Error::Failed {
        action,
        obstacle: Obstacle::of(error),
    })
}

/// Whether a CSV's Deployment opts in to the admission policy.
fn opts_in(csv: &Value) -> bool {
    csv.pointer("/spec/install/spec/deployments")
        .and_then(Value::as_array)
        .is_some_and(|deployments| {
            deployments.iter().any(|deployment| {
                deployment["label"][crate::admission::ADMISSION_LABEL] == crate::admission::ENFORCE
            })
        })
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
) -> Result<String, GateError> {
    let invalid = |error: &dyn std::error::Error| {
        GateError::InvalidInput(format!("cannot render the rows: {error}"))
    };
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
) -> Result<String, GateError> {
    let invalid = |error: &dyn std::error::Error| {
        GateError::InvalidInput(format!("cannot render the row: {error}"))
    };
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
) -> Result<(), GateError> {
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
            GateError::Condition(operator_condition::Error::Failed {
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
mod tests {
    use super::*;

    fn extension_row() -> ExtensionRow {
        ExtensionRow {
            name: "shop".into(),
            namespace: "shop".into(),
            package: "upgrade-gate".into(),
            installed: Some("7.10.0".into()),
            next: None,
            upgrade: UpgradeRecord::Complete {
                release: "7.10.0".into(),
            },
        }
    }

    #[test]
    fn extensions_follow_the_csvs_and_stay_out_where_olm_v1_does_not_run() {
        let now = "2026-03-01T12:00:00Z".parse().expect("valid");
        let extensions = [extension_row()];
        // Only OLM v1's: its table alone.
        let table = render(&[], Some(&extensions), Format::Table, false, now).expect("rendered");
        assert!(table.starts_with("CLUSTEREXTENSION"), "{table}");
        assert_eq!(table.lines().count(), 2, "{table}");
        // Beside OLM v0 with no CSV and no extension: the CSVs' header, as before.
        let table = render(&[], None, Format::Table, false, now).expect("rendered");
        assert!(table.starts_with("CSV"), "{table}");
        // JSON names the extensions only where OLM v1 runs.
        let json = render(&[], Some(&extensions), Format::Json, false, now).expect("json");
        let value: Value = serde_json::from_str(&json).expect("valid JSON");
        assert_eq!(value["clusterExtensions"][0]["installed"], "7.10.0");
        assert_eq!(
            value["clusterExtensions"][0]["upgrade"]["state"],
            "complete"
        );
        let json = render(&[], None, Format::Json, false, now).expect("json");
        let value: Value = serde_json::from_str(&json).expect("valid JSON");
        assert!(value.get("clusterExtensions").is_none(), "{json}");
    }
}
