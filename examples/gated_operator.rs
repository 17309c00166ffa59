//! A minimal operator that adopts the gate (docs/adopt.md): its pod's
//! first init container runs `upgrade-gate hold`, so `Upgradeable=False`
//! is in OLM's status before this process starts; this process upgrades
//! its data, then opens the gate. One replica at a time writes it (the
//! Lease, which names the release of its holder); while this release
//! waits for the Lease, the keeper keeps the gate closed unless a replica
//! of this release leads; and it puts the verdict back if anyone deletes
//! or rewrites the OperatorCondition meanwhile. `cargo test` builds it.
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

/// This build's release: every release's pods share the Lease's name, and
/// each writes its release into it.
const RELEASE: &str = "1.3.0";

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    init_logging(LogFormat::Text);
    let mut stop = shutdown::listen();
    let client = kube::Client::try_default().await?;
    let target = Target::from_env()?;

    // Lead before writing a verdict; until then the keeper keeps the gate
    // closed while no replica of this release leads.
    let identity = std::env::var("POD_NAME").unwrap_or_else(|_| "gated-operator".into());
    let settings =
        LeaseSettings::new("gated-operator", &target.namespace, &identity).of_release(RELEASE);
    let elector = Elector::new(client.clone(), settings)?;
    let (standing, _) = watch::channel(Standing::Unknown);
    let stopped = async {
        stop.recv().await;
    };
    let Some((mut leadership, keeper)) = Keeper::new(client, target)
        .wait_to_lead(elector, &standing, stopped)
        .await
    else {
        return Ok(());
    };

    // The keeper writes the latest verdict (only while leading) and keeps
    // it written.
    let (verdicts, latest) = watch::channel(None);
    let keeper = keeper.start(latest);
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
