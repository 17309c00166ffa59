//! A second, real kube-apiserver in the test cluster's network namespace
//! that does not serve OLM's API: the harness's own kube-apiserver component
//! (same binary, certificates and etcd) on another port with an etcd key
//! prefix of its own, so its storage starts empty — no CRDs, hence no
//! `operators.coreos.com`. The shared cluster always has OLM; this is how a
//! test talks to "a cluster without OLM" without a second cluster.
//!
//! Owns: that one process (stopped on drop; the cluster's teardown would
//! also end it, as a process in its netns) and an admin kubeconfig for it in
//! a temp dir. Must not touch: the shared cluster's objects (its keys live
//! under a different etcd prefix; they go with the cluster's etcd).

use std::path::PathBuf;
use std::time::Duration;

use harness::cluster::Cluster;
use harness::components::KubeApiserver;
use harness::process::{ProcessSpec, StartedProcess};
use harness::testing::{HOW_TO_START, TestCluster};

/// A port on the node IP no cluster component uses (one per test that
/// starts such a server: they run concurrently).
const PORT: u16 = 6543;
/// Start-up on a loaded 2-core machine (bootstrap RBAC included).
const READY_WITHIN: Duration = Duration::from_secs(120);

pub struct ApiserverWithoutOlm {
    /// An admin (system:masters) kubeconfig for this API server.
    pub kubeconfig: PathBuf,
    record: StartedProcess,
    /// How it was started: [`ApiserverWithoutOlm::restart`] starts the
    /// same again (same port, same storage).
    spec: ProcessSpec,
    _dir: tempfile::TempDir,
}

impl ApiserverWithoutOlm {
    /// Starts it on the default port and waits until its `/readyz` says ok.
    pub async fn start(cluster: &TestCluster) -> Self {
        Self::start_on(cluster, PORT).await
    }

    /// Starts it on `port` (of the node IP; one no other test uses) and
    /// waits until its `/readyz` says ok.
    pub async fn start_on(cluster: &TestCluster, port: u16) -> Self {
        let attached = Cluster::attach(&cluster.name)
            .unwrap_or_else(|error| panic!("{error}; {HOW_TO_START}"));
        let context = attached.context();
        let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("temp dir: {error}"));
        let prefix = format!(
            "/upgrade-gate-test-without-olm-{}-{}",
            std::process::id(),
            jiff::Timestamp::now().as_nanosecond()
        );
        let mut spec = KubeApiserver { cluster: &context }.spec().args([
            // Later flags win: another port, another (empty) storage, and no
            // compaction of the shared etcd by this short-lived server.
            format!("--secure-port={port}"),
            format!("--etcd-prefix={prefix}"),
            "--etcd-compaction-interval=0".to_owned(),
        ]);
        spec.component = "kube-apiserver-without-olm".into();
        spec.log = dir.path().join("kube-apiserver-without-olm.log");
        let record = spec
            .start()
            .unwrap_or_else(|error| panic!("starting a kube-apiserver without OLM: {error}"));
        let guard = Self {
            kubeconfig: dir.path().join("admin.kubeconfig"),
            record,
            spec,
            _dir: dir,
        };
        let server = format!("https://{}:{port}", attached.layout().node_ip());
        context
            .pki
            .write_kubeconfig(&guard.kubeconfig, &server, "admin")
            .unwrap_or_else(|error| panic!("writing {}: {error}", guard.kubeconfig.display()));
        let client = harness::api::client_from_kubeconfig(&guard.kubeconfig)
            .await
            .unwrap_or_else(|error| panic!("{error}"));
        guard.wait_ready(&client).await;
        guard
    }

    async fn wait_ready(&self, client: &kube::Client) {
        self.record
            .wait_ready(READY_WITHIN, || KubeApiserver::ready(client))
            .await
            .unwrap_or_else(|error| panic!("the kube-apiserver without OLM: {error}"));
    }

    /// Stops it (SIGTERM, as a restart by its supervisor does: watches
    /// cut, admission caches gone) and starts it again on the same port
    /// and storage; returns once its `/readyz` says ok, with how long it
    /// was away.
    pub async fn restart(&mut self) -> Duration {
        let started = tokio::time::Instant::now();
        self.record.stop(Duration::from_secs(10));
        self.record = self.spec.start().unwrap_or_else(|error| {
            panic!("starting the kube-apiserver without OLM again: {error}")
        });
        let client = self.admin_client().await;
        self.wait_ready(&client).await;
        started.elapsed()
    }

    pub async fn admin_client(&self) -> kube::Client {
        harness::api::client_from_kubeconfig(&self.kubeconfig)
            .await
            .unwrap_or_else(|error| panic!("{error}"))
    }
}

impl Drop for ApiserverWithoutOlm {
    fn drop(&mut self) {
        self.record.stop(Duration::from_secs(5));
    }
}
