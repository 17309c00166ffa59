//! A minimal operator that adopts the gate (docs/adopt.md): its pod's
//! first init container runs `upgrade-gate hold`, so `Upgradeable=False`
//! is in OLM's status before this process starts; this process upgrades
//! its data, then opens the gate. One replica at a time writes it (the
//! Lease), and the keeper puts the verdict back if anyone deletes or
//! rewrites the OperatorCondition meanwhile. `cargo test` builds it.
//!
//! Environment: `OPERATOR_CONDITION_NAME` (OLM injects it), `POD_NAMESPACE`
//! and `POD_NAME` (downward API).

use std::error::Error;
use std::time::Duration;

use tokio::sync::watch;
use upgrade_gate::keeper::Keeper;
use upgrade_gate::leader::{Elector, LeaseSettings, Standing};
use upgrade_gate::locate::Target;
use upgrade_gate::operator_condition::{Reason, UpgradeableEntry};
use upgrade_gate::shutdown;
use upgrade_gate::telemetry::{LogFormat, init_logging};

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    init_logging(LogFormat::Text);
    let mut stop = shutdown::listen();
    let client = kube::Client::try_default().await?;
    let target = Target::from_env()?;

    // Lead before writing: every release's pods share the Lease's name.
    let identity = std::env::var("POD_NAME").unwrap_or_else(|_| "gated-operator".into());
    let settings = LeaseSettings::new("gated-operator", &target.namespace, &identity);
    let elector = Elector::new(client.clone(), settings)?;
    let (standing, _) = watch::channel(Standing::Unknown);
    let stopped = async {
        stop.recv().await;
    };
    let Some(mut leadership) = elector.lead_unless_stopped(&standing, stopped).await else {
        return Ok(());
    };

    // The keeper writes the latest verdict and keeps it written.
    let (verdicts, latest) = watch::channel(None);
    let keeper = Keeper::new(client, target)
        .leading(leadership.leading())
        .start(latest);
    verdicts.send_replace(Some(UpgradeableEntry::closed(
        Reason::new("UpgradeInProgress")?,
        "upgrading the data to 1.3.0; the gate opens when it is done",
    )?));

    tokio::select! {
        () = upgrade_data() => {
            verdicts.send_replace(Some(UpgradeableEntry::open(
                Reason::new("UpgradeComplete")?,
                "the data is at 1.3.0; OLM may upgrade this operator",
            )?));
            tokio::select! {
                signal = stop.recv() => tracing::info!(%signal, "stopping"),
                lost = leadership.lost() => return Err(lost.into()),
            }
        }
        signal = stop.recv() => tracing::info!(%signal, "stopping mid-upgrade"),
        lost = leadership.lost() => return Err(lost.into()),
    }
    // Stop writing, then hand the Lease over.
    keeper.stop().await;
    leadership.step_down().await;
    Ok(())
}

/// Stands in for the operator's data upgrade (a schema migration, a
/// storage format rewrite) and its reconcile loop.
async fn upgrade_data() {
    tokio::time::sleep(Duration::from_secs(30)).await;
}
