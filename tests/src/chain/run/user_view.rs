//! What a user of the App would look at after the chain: the App and its
//! Events, the last release's CSV and gate (or the admission record), the
//! App's server, the migration history against the last release's plan.
//!
//! Owns: reading those for [`ChainRun::user_view`]. Must not touch: any of
//! them (reads only).

use k8s_openapi::api::core::v1::Pod;
use kube::api::DynamicObject;

use super::{ChainRun, connect};
use crate::chain::facts::CSV_PREFIX;
use crate::chain::judge::Deployer;
use crate::chain::watches::{app_api, csv_api, read_history};

impl ChainRun {
    /// The operator's entry in the namespace's UpgradeRecord, the
    /// admission policy's parameter (what holds a deployer other than OLM v0).
    async fn admission_record_line(&self) -> String {
        let records: kube::Api<DynamicObject> = kube::Api::namespaced_with(
            self.client(),
            &self.namespace.name,
            &upgrade_gate::admission::record_resource(),
        );
        match records.get_opt(upgrade_gate::admission::RECORD_NAME).await {
            Ok(Some(record)) => format!(
                "the admission record (kubectl get upgraderecord upgrade-gate -o yaml): app-operator {}",
                record.data["spec"]["operators"]["app-operator"]
            ),
            Ok(None) => {
                "the admission record: none in this namespace (no admission policy here)".to_owned()
            }
            Err(error) => format!("the admission record: cannot be read ({error})"),
        }
    }

    /// What a user of the App would look at after the chain, in their
    /// words: the App as `kubectl describe` shows it with its Events, OLM's
    /// view of the last release (its CSV and its gate; under another
    /// deployer, the admission record), the App's server,
    /// and the database's migration history against the last release's
    /// plan. Each part that cannot be read says why.
    pub async fn user_view(&self) -> Vec<String> {
        let client = self.client();
        let ns = &self.namespace.name;
        let mut lines = Vec::new();
        match app_api(&client, ns).get(&self.app).await {
            Ok(app) => {
                lines.push(format!("kubectl describe app {}:", self.app));
                let app = serde_json::to_value(&app).unwrap_or_default();
                lines.extend(
                    crate::chain::narrate::describe_app(&app)
                        .into_iter()
                        .map(|line| format!("  {line}")),
                );
            }
            Err(error) => lines.push(format!("App {}: cannot be read ({error})", self.app)),
        }
        let events = kube::Api::<k8s_openapi::api::core::v1::Event>::namespaced(client.clone(), ns)
            .list(&kube::api::ListParams::default().fields(&format!(
                "involvedObject.kind=App,involvedObject.name={}",
                self.app
            )))
            .await;
        match events {
            Ok(list) => {
                let mut items = list.items;
                items.sort_by_key(|event| {
                    event
                        .last_timestamp
                        .as_ref()
                        .map(|time| time.0)
                        .or_else(|| event.event_time.as_ref().map(|time| time.0))
                });
                let shown: Vec<(String, String, String)> = items
                    .iter()
                    .rev()
                    .take(6)
                    .rev()
                    .map(|event| {
                        (
                            event.type_.clone().unwrap_or_default(),
                            event.reason.clone().unwrap_or_default(),
                            event.message.clone().unwrap_or_default(),
                        )
                    })
                    .collect();
                lines.push(format!(
                    "  Events (the last {} of {}):",
                    shown.len(),
                    items.len()
                ));
                lines.extend(
                    crate::chain::narrate::describe_events(&shown)
                        .into_iter()
                        .map(|line| format!("  {line}")),
                );
            }
            Err(error) => lines.push(format!("  Events: cannot be listed ({error})")),
        }
        let last = &self.chain.last;
        if self.chain.deployer == Deployer::Olm {
            let csv_name = format!("{}{last}", CSV_PREFIX);
            match csv_api(&client, ns).get(&csv_name).await {
                Ok(csv) => lines.push(format!(
                    "OLM: CSV {csv_name} {} ({})",
                    csv.data["status"]["phase"].as_str().unwrap_or("-"),
                    csv.data["status"]["reason"].as_str().unwrap_or("-")
                )),
                Err(error) => lines.push(format!("OLM: CSV {csv_name} cannot be read ({error})")),
            }
            let conditions =
                kube::Api::<upgrade_gate::operator_condition::OperatorCondition>::namespaced(
                    client.clone(),
                    ns,
                );
            match conditions.get(&csv_name).await {
                Ok(condition) => lines.push(match condition.upgradeable_in_spec() {
                    Some(entry) => format!(
                        "its gate (kubectl describe operatorcondition {csv_name}): Upgradeable={} ({}): {}",
                        entry.status(),
                        entry.reason(),
                        entry.message()
                    ),
                    None => format!("its gate: OperatorCondition {csv_name} has no Upgradeable entry"),
                }),
                Err(error) => lines.push(format!("its gate: cannot be read ({error})")),
            }
        } else {
            lines.push(self.admission_record_line().await);
        }
        lines.push(match self.server_healthz().await {
            Ok(answer) => format!("the App's server: {answer}"),
            Err(error) => format!("the App's server: not serving ({error})"),
        });
        let admin = connect(&self.database.url).await;
        match read_history(&admin).await {
            Ok(history) => {
                let applied: Vec<String> = history
                    .iter()
                    .map(|row| format!("V{} {}", row.version, row.name))
                    .collect();
                lines.push(format!(
                    "the database's migration history: {}",
                    applied.join(", ")
                ));
            }
            Err(error) => lines.push(format!("the migration history: cannot be read ({error})")),
        }
        lines.push(match schema_at_target(&admin, last).await {
            Ok(at) => format!("{last}'s plan for it: at target ({at})"),
            Err(plan) => format!("{last}'s plan for it (app-db-upgrade plan): {plan}"),
        });
        lines
    }

    /// What the App's server says on `/healthz`, asked through the API
    /// server's pod proxy (its pods are on the cluster's pod network).
    pub async fn server_healthz(&self) -> Result<String, String> {
        let pods = kube::Api::<Pod>::namespaced(self.client(), &self.namespace.name)
            .list(&kube::api::ListParams::default().labels(&format!(
                "app.kubernetes.io/component=server,upgrade-gate.dev/app={}",
                self.app
            )))
            .await
            .map_err(|error| format!("listing the server pods: {error}"))?;
        let pod = pods
            .items
            .iter()
            .find(|pod| pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .and_then(|pod| pod.metadata.name.clone())
            .ok_or_else(|| "no server pod is running".to_owned())?;
        let request = http::Request::get(format!(
            "/api/v1/namespaces/{}/pods/{pod}:8080/proxy/healthz",
            self.namespace.name
        ))
        .body(Vec::new())
        .map_err(|error| error.to_string())?;
        let answer = self
            .client()
            .request_text(request)
            .await
            .map_err(|error| format!("GET /healthz of {pod}: {error}"))?;
        Ok(format!("{pod}: {}", answer.trim()))
    }
}

/// What release `last` plans for the schema now: at its target, or not.
pub(super) async fn schema_at_target(
    client: &tokio_postgres::Client,
    last: &str,
) -> Result<String, String> {
    let release: app::migrations::Release = last.parse().map_err(|error| format!("{error}"))?;
    let state = app::schema::read_schema_state(client)
        .await
        .map_err(|error| upgrade_gate::telemetry::error_chain(&error))?;
    match app::schema::plan(&state, &release) {
        app::schema::UpgradePlan::AtTarget { target } => Ok(format!("{target}, {last}'s target")),
        app::schema::UpgradePlan::Refused(refusal) => Err(format!("refused: {refusal}")),
        app::schema::UpgradePlan::Upgrade { pending, .. } => Err(format!(
            "behind: {} pending",
            pending
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}
