//! Restarting the components of a running cluster, for tests of what a
//! restart does to an upgrade in flight: the kubelet, containerd and the
//! API server restarted as a supervisor restarts them (the stop signal,
//! teardown's grace — 2 s for the API server, 5 s for the others —
//! SIGKILL after it; the same spec started again; its readiness waited
//! for), OLM's `olm` operator killed as a crash kills it, or
//! stopped and started apart so a test can hold a moment open (the gate's
//! init container waiting for an OLM that does not answer).
//!
//! Owns: each restart's order and its readiness check. Every new process
//! takes the old one's record in the state file, in its place (teardown
//! stops in reverse start order), so `down` stops the new process. How a
//! component runs and is checked stays in `components`.

use std::time::{Duration, Instant};

use super::types::{
    APISERVER_READY, CONTAINERD_READY, Cluster, ClusterError, NODE_READY, OLM_READY, start_and_wait,
};
use crate::components::{Containerd, HealthProbe, KubeApiserver, Kubelet, Olm, ProbeError};
use crate::process::{ProcessSpec, StartedProcess, Stopped};

/// How a restart went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Restarted {
    /// How the old process ended: on its stop signal, or SIGKILLed after
    /// the grace.
    pub stopped: Stopped,
    /// From the stop signal to the old process gone.
    pub stopping: Duration,
    /// From the stop signal to the new process ready.
    pub away: Duration,
    pub old_pid: i32,
    pub new_pid: i32,
}

impl Cluster {
    /// Restarts the kubelet: ready again once the new process serves the
    /// node's API (its `/healthz` through the API server's node proxy) and
    /// the Node is `Ready`. Running containers are the runtime's and stay.
    pub async fn restart_kubelet(&mut self) -> Result<Restarted, ClusterError> {
        let context = self.context();
        let client = self.admin_client().await?;
        let kubelet = Kubelet { cluster: &context };
        self.restart(Kubelet::NAME, &kubelet.spec(), NODE_READY, || async {
            kubelet.serving(&client).await?;
            kubelet.ready(&client).await
        })
        .await
    }

    /// Restarts containerd: ready again once its API answers on the socket
    /// and the Node is `Ready`. Running containers stay (their shims
    /// outlive containerd, which finds them again when it starts).
    pub async fn restart_containerd(&mut self) -> Result<Restarted, ClusterError> {
        let context = self.context();
        let client = self.admin_client().await?;
        let containerd = Containerd { cluster: &context };
        let kubelet = Kubelet { cluster: &context };
        self.restart(
            Containerd::NAME,
            &containerd.spec(),
            CONTAINERD_READY,
            || async {
                containerd.ready().await?;
                kubelet.ready(&client).await
            },
        )
        .await
    }

    /// Restarts the API server (every watch and request of every client
    /// cut): ready again once its `/readyz` says ok.
    pub async fn restart_apiserver(&mut self) -> Result<Restarted, ClusterError> {
        let context = self.context();
        let client = self.admin_client().await?;
        let apiserver = KubeApiserver { cluster: &context };
        self.restart(
            KubeApiserver::NAME,
            &apiserver.spec(),
            APISERVER_READY,
            || KubeApiserver::ready(&client),
        )
        .await
    }

    /// Kills OLM's `olm` operator with SIGKILL, as a crash would, starts it
    /// again from the same spec and waits until it is ready. Returns how
    /// long it was gone.
    pub async fn restart_olm(&mut self) -> Result<Duration, ClusterError> {
        let old = self.record_of(Olm::NAME)?;
        let since = Instant::now();
        tokio::task::spawn_blocking(move || old.kill())
            .await
            .unwrap_or_else(|error| std::panic::resume_unwind(error.into_panic()));
        self.start_olm().await?;
        Ok(since.elapsed())
    }

    /// Stops OLM's `olm` operator (SIGTERM, SIGKILL after the grace) and
    /// leaves it stopped: no CSV, OperatorCondition or OperatorGroup is
    /// acted on until [`Cluster::start_olm`]. Its record stays in the state
    /// file (`down` finds it gone).
    pub async fn stop_olm(&mut self) -> Result<Stopped, ClusterError> {
        let old = self.record_of(Olm::NAME)?;
        Ok(stop(old).await)
    }

    /// Starts OLM's `olm` operator from its spec and waits until it is
    /// ready; its record in the state file is replaced. Returns how long
    /// the start took.
    pub async fn start_olm(&mut self) -> Result<Duration, ClusterError> {
        let context = self.context();
        let olm = Olm { cluster: &context };
        let probe = HealthProbe::new(&context.pki.ca())?;
        let since = Instant::now();
        let record =
            start_and_wait(&olm.spec(), "Starting olm", OLM_READY, || olm.ready(&probe)).await?;
        self.state.update(|state| state.replace(record))?;
        Ok(since.elapsed())
    }

    fn record_of(&self, component: &'static str) -> Result<StartedProcess, ClusterError> {
        self.state
            .processes
            .iter()
            .find(|record| record.component == component)
            .cloned()
            .ok_or_else(|| ClusterError::NoComponent {
                name: self.state.layout.name.clone(),
                component,
            })
    }

    /// Stops `component` as a supervisor does, starts `spec` and waits for
    /// `check`; the new record takes the old one's place.
    async fn restart<F, Fut>(
        &mut self,
        component: &'static str,
        spec: &ProcessSpec,
        deadline: Duration,
        check: F,
    ) -> Result<Restarted, ClusterError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<(), ProbeError>>,
    {
        let old = self.record_of(component)?;
        let old_pid = old.pid;
        let since = Instant::now();
        let stopped = stop(old).await;
        let stopping = since.elapsed();
        let record =
            start_and_wait(spec, &format!("Restarting {component}"), deadline, check).await?;
        let away = since.elapsed();
        let new_pid = record.pid;
        self.state.update(|state| state.replace(record))?;
        Ok(Restarted {
            stopped,
            stopping,
            away,
            old_pid,
            new_pid,
        })
    }
}

/// [`StartedProcess::stop`] with teardown's grace for the component (the
/// API server's short: it can take long to exit and holds nothing worth
/// waiting for), off the runtime's threads (it polls and sleeps).
async fn stop(record: StartedProcess) -> Stopped {
    let grace = crate::teardown::grace_for(&record.component);
    tokio::task::spawn_blocking(move || record.stop(grace))
        .await
        .unwrap_or_else(|error| std::panic::resume_unwind(error.into_panic()))
}
