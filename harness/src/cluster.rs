//! Creating a cluster as an ordered list of named actions, each reporting its
//! own status and time (the way kind does), and the handle to a running
//! cluster: tears it down on `down`, on `Drop` and so when a test panics —
//! unless it was detached for the CLI, whose `down` then works from the
//! state file.
//!
//! Owns the starting order and the deadlines; what each component runs and
//! how it is checked lives in `components`, how things are removed in
//! `teardown`.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};

use crate::api::{self, FIELD_MANAGER};
use crate::components::flux::FLUX_NAMESPACE;
use crate::components::olm_v1::{self, OlmV1Error, Registry};
use crate::components::{
    Catalog, ClusterContext, ComponentError, Containerd, ControllerManager, Etcd, HealthProbe,
    KubeApiserver, KubeProxy, Kubelet, KustomizeController, Olm, OpmServe, ProbeError, Scheduler,
};
use crate::layout::{ClusterName, Layout, POSTGRES_PORT, free_index};
use crate::machine;
use crate::pki::{Pki, PkiSubjects};
use crate::postgres::TempPostgres;
use crate::process::{ProcessSpec, StartedProcess};
use crate::progress::{Progress, StepStatus};
use crate::state::{ClusterState, taken_indexes};

mod restart;
mod types;

pub use restart::Restarted;
use types::{
    APISERVER_READY, CONTAINERD_READY, CONTROLLERS_READY, CRDS_ESTABLISHED, ETCD_READY, FLUX_READY,
    NODE_READY, OLM_NAMESPACES, OLM_READY, OLM_V1_READY, start_and_wait,
};
pub use types::{Cluster, ClusterConfig, ClusterError};

impl Cluster {
    /// Starts cluster `config.name`, clearing first what a dead cluster of
    /// the same name left. On failure everything started is torn down (logs
    /// stay in the log dir) and the error names the failing component.
    pub async fn up(config: ClusterConfig) -> Result<Self, ClusterError> {
        let mut progress = Progress::new(config.quiet);
        let mut cluster = Self {
            state: clear_previous(&config, &mut progress)?,
            progress: None,
            teardown_on_drop: true,
        };
        match cluster.start_all(&config, &mut progress).await {
            Ok(()) => {
                cluster.progress = Some(progress);
                Ok(cluster)
            }
            Err(error) => {
                if !config.quiet {
                    eprintln!("cluster {} failed; tearing it down", config.name);
                }
                Err(error)
            }
        }
    }

    /// A handle to a running cluster, from its state file; dropping it does
    /// not tear the cluster down.
    pub fn attach(name: &ClusterName) -> Result<Self, ClusterError> {
        let state =
            ClusterState::load(name)?.ok_or_else(|| ClusterError::NotFound(name.clone()))?;
        Ok(Self {
            state,
            progress: None,
            teardown_on_drop: false,
        })
    }

    /// Leaves the cluster running after this handle is gone (the CLI's `up`).
    pub fn detach(mut self) -> ClusterState {
        self.teardown_on_drop = false;
        self.state.clone()
    }

    /// Tears the cluster down now.
    pub fn down(mut self) -> Progress {
        self.teardown_on_drop = false;
        crate::teardown::teardown(&self.state.layout.name, false)
    }

    pub fn name(&self) -> &ClusterName {
        &self.state.layout.name
    }

    pub fn layout(&self) -> &Layout {
        &self.state.layout
    }

    pub fn state(&self) -> &ClusterState {
        &self.state
    }

    /// The steps and milestones of `up`, if this handle started the cluster.
    pub fn progress(&self) -> Option<&Progress> {
        self.progress.as_ref()
    }

    pub fn context(&self) -> ClusterContext {
        ClusterContext::new(self.state.layout.clone(), self.state.tools.clone())
    }

    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.context().admin_kubeconfig()
    }

    pub fn database_url(&self) -> Option<&str> {
        self.state.database_url.as_deref()
    }

    pub async fn admin_client(&self) -> Result<Client, ClusterError> {
        Ok(api::client_from_kubeconfig(&self.admin_kubeconfig()).await?)
    }

    /// Imports OCI image archives into the node's containerd (`k8s.io` namespace).
    pub async fn load_images(&self, archives: &[PathBuf]) -> Result<(), ClusterError> {
        import_images(&self.state.layout, archives).await
    }

    /// Starts `opm serve` for a file-based catalog on `port` in the cluster's
    /// netns and records it, so teardown stops it.
    pub async fn serve_catalog(
        &mut self,
        catalog_dir: &Path,
        port: u16,
    ) -> Result<(StartedProcess, String), ClusterError> {
        let context = self.context();
        let opm = OpmServe {
            cluster: &context,
            catalog_dir: catalog_dir.to_path_buf(),
            port,
        };
        // opm's termination log and cache live there; without the directory
        // opm warns that it cannot write its termination log.
        let work = opm.work_dir();
        std::fs::create_dir_all(&work).map_err(|source| ComponentError::Write {
            path: work.clone(),
            source,
        })?;
        let record =
            start_and_wait(&opm.spec(), &opm.component(), OLM_READY, || opm.ready()).await?;
        self.state.record(record.clone())?;
        Ok((record, opm.address()))
    }

    async fn start_all(
        &mut self,
        config: &ClusterConfig,
        progress: &mut Progress,
    ) -> Result<(), ClusterError> {
        let context = self.context();
        let layout = context.layout.clone();

        step(
            progress,
            "Writing certificates and configuration",
            || async { write_files(&context) },
        )
        .await?;
        step(
            progress,
            &format!(
                "Creating network namespace {} (node IP {})",
                layout.machine().netns,
                layout.node_ip()
            ),
            || async { Ok(machine::create_network(&layout)?) },
        )
        .await?;
        step(
            progress,
            &format!("Creating cgroupRoot {}", layout.machine().cgroup_root),
            || async { Ok(machine::create_cgroup_root(&layout.machine())?) },
        )
        .await?;
        let probe = HealthProbe::new(&context.pki.ca())?;

        let etcd = Etcd { cluster: &context };
        self.start(progress, "Starting etcd", &etcd.spec(), ETCD_READY, || {
            etcd.ready(&probe)
        })
        .await?;

        let client = api::client_from_kubeconfig(&context.admin_kubeconfig()).await?;
        let apiserver = KubeApiserver { cluster: &context };
        self.start(
            progress,
            "Starting kube-apiserver",
            &apiserver.spec(),
            APISERVER_READY,
            || KubeApiserver::ready(&client),
        )
        .await?;

        let scheduler = Scheduler { cluster: &context };
        self.start(
            progress,
            "Starting kube-scheduler",
            &scheduler.spec(),
            CONTROLLERS_READY,
            || scheduler.ready(&probe),
        )
        .await?;
        // The controller-manager's readiness (its service-account controller
        // at work) matters only to the pods of whoever uses the cluster: it is
        // waited for while the node and OLM start, not before them.
        let controller_manager = ControllerManager { cluster: &context };
        let (since, name) = (Instant::now(), "Starting kube-controller-manager");
        let record = self.spawn(name, &controller_manager.spec())?;
        let controllers = async {
            let ready = || ControllerManager::ready(&client);
            let outcome = wait_until_ready(&record, name, CONTROLLERS_READY, ready).await;
            (outcome, Instant::now())
        };
        let ((controllers, ready_at), node_and_olm) = tokio::join!(
            controllers,
            self.start_node_and_olm(config, progress, &context, &client, &probe)
        );
        progress.finish_at(name, since, ready_at, status_of(&controllers));
        controllers?;
        progress.milestone_at("cluster ready", ready_at);
        node_and_olm
    }

    /// containerd, the node, kube-proxy, PostgreSQL and OLM, with the images
    /// loaded into containerd while OLM starts.
    async fn start_node_and_olm(
        &mut self,
        config: &ClusterConfig,
        progress: &mut Progress,
        context: &ClusterContext,
        client: &kube::Client,
        probe: &HealthProbe,
    ) -> Result<(), ClusterError> {
        let layout = context.layout.clone();
        let containerd = Containerd { cluster: context };
        self.start(
            progress,
            "Starting containerd",
            &containerd.spec(),
            CONTAINERD_READY,
            || containerd.ready(),
        )
        .await?;
        step(progress, "Importing the pause image", || {
            import_image(&layout, &config.pause_archive)
        })
        .await?;

        let kubelet = Kubelet { cluster: context };
        self.start(
            progress,
            "Starting kubelet (until the node is Ready)",
            &kubelet.spec(),
            NODE_READY,
            || kubelet.ready(client),
        )
        .await?;
        progress.milestone("node Ready");

        let kube_proxy = KubeProxy { cluster: context };
        self.start(
            progress,
            "Starting kube-proxy",
            &kube_proxy.spec(),
            CONTROLLERS_READY,
            || kube_proxy.ready(probe),
        )
        .await?;

        let since = Instant::now();
        let postgres = start_postgres(&layout).await;
        match postgres {
            Ok((record, url)) => {
                self.state.update(|state| {
                    state.database_url = Some(url);
                    state.processes.push(record);
                })?;
                progress.finish("Starting PostgreSQL", since, StepStatus::Done);
            }
            Err(error) => {
                progress.finish(
                    "Starting PostgreSQL",
                    since,
                    StepStatus::Failed(error.to_string()),
                );
                return Err(error);
            }
        }

        if config.olm_v1 {
            let registry = Registry { cluster: context };
            let blobs = registry.blob_dir();
            step(progress, "Writing the registry's directories", || async {
                write_registry_dirs(context, &blobs)
            })
            .await?;
            self.start(
                progress,
                "Starting the registry",
                &registry.spec(),
                OLM_READY,
                || registry.ready(probe),
            )
            .await?;
            self.state.update(|state| state.olm_v1 = true)?;
        }

        // The images only need containerd: they load while OLM starts. OLM
        // v1's come first, and OLM v1 (whose pods run them) starts while
        // the others load.
        let since = Instant::now();
        let images_and_v1 = async {
            let v1_images = import_images(&layout, &config.olm_v1_images).await;
            let v1_loaded_at = Instant::now();
            let v1 = async {
                match (&v1_images, config.olm_v1) {
                    (Ok(()), true) => {
                        let outcome = start_olm_v1(context, client).await;
                        Some((v1_loaded_at, outcome, Instant::now()))
                    }
                    _ => None,
                }
            };
            let others = async {
                let images = import_images(&layout, &config.images).await;
                (images, Instant::now())
            };
            let (v1, (images, loaded_at)) = tokio::join!(v1, others);
            (v1_images.and(images), loaded_at, v1)
        };
        let ((images, loaded_at, v1), olm) = tokio::join!(
            images_and_v1,
            self.install_olm(progress, context, client, probe)
        );
        if !(config.images.is_empty() && config.olm_v1_images.is_empty()) {
            progress.finish_at("Loading images", since, loaded_at, status_of(&images));
            images?;
        }
        if let Some((since, outcome, ready_at)) = v1 {
            progress.finish_at(
                "Starting OLM v1 (until catalogd and operator-controller are ready)",
                since,
                ready_at,
                status_of(&outcome),
            );
            outcome?;
            progress.milestone_at("OLM v1 ready", ready_at);
        }
        olm?;
        if config.flux {
            self.start_flux(progress, context, client, probe).await?;
        }
        Ok(())
    }

    /// Flux's CRDs (until established), then kustomize-controller (until
    /// ready); recorded in the state file.
    async fn start_flux(
        &mut self,
        progress: &mut Progress,
        context: &ClusterContext,
        client: &kube::Client,
        probe: &HealthProbe,
    ) -> Result<(), ClusterError> {
        let crds_dir = context.flux_crds_dir();
        step(
            progress,
            "Installing Flux's CRDs (until established)",
            || install_crds(client, &crds_dir, &[FLUX_NAMESPACE]),
        )
        .await?;
        let controller = KustomizeController { cluster: context };
        let work = controller.work_dir();
        std::fs::create_dir_all(&work).map_err(|source| ComponentError::Write {
            path: work.clone(),
            source,
        })?;
        self.start(
            progress,
            "Starting Flux's kustomize-controller",
            &controller.spec(),
            FLUX_READY,
            || controller.ready(probe),
        )
        .await?;
        self.state.update(|state| state.flux = true)?;
        progress.milestone("Flux ready");
        Ok(())
    }

    async fn install_olm(
        &mut self,
        progress: &mut Progress,
        context: &ClusterContext,
        client: &kube::Client,
        probe: &HealthProbe,
    ) -> Result<(), ClusterError> {
        let crds_dir = context.crds_dir();
        step(
            progress,
            "Installing OLM's CRDs (until established)",
            || install_olm_crds(client, &crds_dir),
        )
        .await?;
        let olm = Olm { cluster: context };
        let catalog = Catalog { cluster: context };
        self.start(progress, "Starting olm", &olm.spec(), OLM_READY, || {
            olm.ready(probe)
        })
        .await?;
        self.start(
            progress,
            "Starting catalog",
            &catalog.spec(),
            OLM_READY,
            || catalog.ready(probe),
        )
        .await?;
        progress.milestone("OLM ready");
        Ok(())
    }

    /// Starts one component and records its PID in the state file, so a
    /// failure or a kill still finds it; its readiness is the caller's.
    fn spawn(&mut self, name: &str, spec: &ProcessSpec) -> Result<StartedProcess, ClusterError> {
        let record = spec.start().map_err(|source| ClusterError::Process {
            step: name.to_owned(),
            source: Box::new(source),
        })?;
        self.state.record(record.clone())?;
        Ok(record)
    }

    /// Starts one component, records its PID in the state file before
    /// waiting, so a failure or a kill still finds it, then waits for it.
    async fn start<F, Fut>(
        &mut self,
        progress: &mut Progress,
        name: &str,
        spec: &ProcessSpec,
        deadline: Duration,
        check: F,
    ) -> Result<(), ClusterError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<(), ProbeError>>,
    {
        let since = Instant::now();
        let outcome = match self.spawn(name, spec) {
            Ok(record) => wait_until_ready(&record, name, deadline, check).await,
            Err(error) => Err(error),
        };
        report(progress, name, since, outcome)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.teardown_on_drop {
            let progress = crate::teardown::teardown(&self.state.layout.name, true);
            for failure in progress.failures() {
                eprintln!("teardown of cluster {}: {failure}", self.state.layout.name);
            }
        }
    }
}

async fn step<F, Fut>(progress: &mut Progress, name: &str, action: F) -> Result<(), ClusterError>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<(), ClusterError>>,
{
    let since = Instant::now();
    let outcome = action().await;
    report(progress, name, since, outcome)
}

fn report(
    progress: &mut Progress,
    name: &str,
    since: Instant,
    outcome: Result<(), ClusterError>,
) -> Result<(), ClusterError> {
    progress.finish(name, since, status_of(&outcome));
    outcome
}

fn status_of(outcome: &Result<(), ClusterError>) -> StepStatus {
    match outcome {
        Ok(()) => StepStatus::Done,
        Err(error) => StepStatus::Failed(error.to_string()),
    }
}

/// Waits until the started component `record` passes `check`.
async fn wait_until_ready<F, Fut>(
    record: &StartedProcess,
    name: &str,
    deadline: Duration,
    check: F,
) -> Result<(), ClusterError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), ProbeError>>,
{
    record
        .wait_ready(deadline, check)
        .await
        .map(drop)
        .map_err(|source| ClusterError::Process {
            step: name.to_owned(),
            source: Box::new(source),
        })
}

/// Refuses a running cluster of the same name, clears what a dead one left,
/// picks an index and writes the first state file.
fn clear_previous(
    config: &ClusterConfig,
    progress: &mut Progress,
) -> Result<ClusterState, ClusterError> {
    let since = Instant::now();
    if let Some(previous) = ClusterState::load(&config.name).ok().flatten()
        && previous.all_running()
    {
        return Err(ClusterError::AlreadyRunning(config.name.clone()));
    }
    let found = crate::leftovers::leftovers(&config.name);
    if found.is_empty() {
        progress.finish(
            &format!("Clearing what an earlier cluster {} left", config.name),
            since,
            StepStatus::Skipped("nothing left".into()),
        );
    } else {
        crate::teardown::teardown(&config.name, true);
        let still = crate::leftovers::leftovers(&config.name);
        if !still.is_empty() {
            return Err(ClusterError::Leftovers {
                name: config.name.clone(),
                details: still.to_string(),
            });
        }
        progress.finish(
            &format!("Clearing what an earlier cluster {} left", config.name),
            since,
            StepStatus::Done,
        );
    }
    let index = free_index(&taken_indexes()).ok_or(ClusterError::NoFreeIndex)?;
    let layout = Layout::new(config.name.clone(), index);
    let log_dir = layout.machine().log_dir;
    if log_dir.exists() {
        std::fs::remove_dir_all(&log_dir).map_err(|source| ComponentError::Write {
            path: log_dir.clone(),
            source,
        })?;
    }
    let state = ClusterState::new(layout, config.tools.clone());
    state.save()?;
    Ok(state)
}

fn write_files(context: &ClusterContext) -> Result<(), ClusterError> {
    context.check_tools()?;
    let layout = &context.layout;
    let subjects = PkiSubjects {
        node_name: layout.node_name(),
        node_ip: layout.node_ip(),
        api_service_ip: layout.api_service_ip(),
    };
    let pki = Pki::generate(&context.pki.dir, &subjects)?;
    pki.write_kubeconfig(&context.admin_kubeconfig(), &layout.api_url(), "admin")?;
    pki.write_kubeconfig(&context.node_kubeconfig(), &layout.api_url(), "node")?;
    Containerd { cluster: context }.write_config()?;
    Kubelet { cluster: context }.write_config()?;
    Ok(())
}

/// The registry's blob directory, and the CA alone in a directory of its
/// own for pushes from the host (`podman push --cert-dir`).
fn write_registry_dirs(context: &ClusterContext, blobs: &Path) -> Result<(), ClusterError> {
    let fail = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ComponentError::Write { path, source }
    };
    std::fs::create_dir_all(blobs).map_err(fail(blobs))?;
    let ca_dir = context.registry_ca_dir();
    std::fs::create_dir_all(&ca_dir).map_err(fail(&ca_dir))?;
    let ca = ca_dir.join("ca.crt");
    std::fs::copy(context.pki.ca(), &ca).map_err(fail(&ca))?;
    Ok(())
}

/// OLM v1 from its release manifest (see `components::olm_v1`): its images
/// checked in containerd, the manifest rendered with the TLS Secrets from
/// the harness PKI and applied, then both Deployments waited for.
async fn start_olm_v1(context: &ClusterContext, client: &Client) -> Result<(), ClusterError> {
    for image in olm_v1::images() {
        if !image_present(&context.layout, &image).await? {
            return Err(OlmV1Error::NoImage(image).into());
        }
    }
    let read = |path: PathBuf| {
        std::fs::read_to_string(&path).map_err(|source| OlmV1Error::Read { path, source })
    };
    let pki = &context.pki;
    let ca = read(pki.ca())?;
    let secrets = [
        (olm_v1::CATALOGD_SECRET, olm_v1::CATALOGD_CERT),
        (
            olm_v1::OPERATOR_CONTROLLER_SECRET,
            olm_v1::OPERATOR_CONTROLLER_CERT,
        ),
    ]
    .into_iter()
    .map(|(secret, file)| {
        Ok(olm_v1::tls_secret(
            secret,
            &ca,
            &read(pki.cert(file))?,
            &read(pki.key(file))?,
        ))
    })
    .collect::<Result<Vec<_>, OlmV1Error>>()?;
    let placement = olm_v1::Placement {
        node_ip: context.layout.node_ip(),
        catalogd_service_ip: context.layout.catalogd_service_ip(),
    };
    let objects = olm_v1::render(&read(context.olm_v1_manifest())?, &placement, secrets)?;
    olm_v1::apply(client, &objects).await?;
    let crds: Vec<String> = objects
        .iter()
        .filter(|object| object["kind"] == "CustomResourceDefinition")
        .filter_map(|object| object["metadata"]["name"].as_str().map(str::to_owned))
        .collect();
    let since = Instant::now();
    let mut last = String::new();
    while since.elapsed() < OLM_V1_READY {
        let pending = api::not_established(client, &crds)
            .await
            .map_err(ProbeError::from)?;
        let outcome = if pending.is_empty() {
            olm_v1::ready(client).await
        } else {
            Err(ProbeError::NotYet(format!(
                "CRDs not established: {}",
                pending.join(", ")
            )))
        };
        match outcome {
            Ok(()) => return Ok(()),
            Err(error) => last = error.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(ProbeError::NotYet(format!("not ready within {OLM_V1_READY:?}: {last}")).into())
}

/// Whether the node's containerd holds `reference` (`k8s.io` namespace).
async fn image_present(layout: &Layout, reference: &str) -> Result<bool, ClusterError> {
    let output = tokio::process::Command::new("ctr")
        .arg("--address")
        .arg(layout.containerd_socket())
        .args(["--namespace", "k8s.io", "images", "list", "--quiet"])
        .arg(format!("name=={reference}"))
        .output()
        .await
        .map_err(|error| ClusterError::Import {
            archive: PathBuf::from(reference),
            detail: error.to_string(),
        })?;
    Ok(output.status.success() && !String::from_utf8_lossy(&output.stdout).trim().is_empty())
}

/// Imports the archives one after the other (at once, they took longer).
async fn import_images(layout: &Layout, archives: &[PathBuf]) -> Result<(), ClusterError> {
    for archive in archives {
        import_image(layout, archive).await?;
    }
    Ok(())
}

async fn import_image(layout: &Layout, archive: &Path) -> Result<(), ClusterError> {
    let output = tokio::process::Command::new("ctr")
        .arg("--address")
        .arg(layout.containerd_socket())
        .args(["--namespace", "k8s.io", "images", "import"])
        .arg(archive)
        .output()
        .await
        .map_err(|error| ClusterError::Import {
            archive: archive.to_path_buf(),
            detail: error.to_string(),
        })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(ClusterError::Import {
            archive: archive.to_path_buf(),
            detail: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }
}

async fn install_olm_crds(client: &Client, crds_dir: &Path) -> Result<(), ClusterError> {
    install_crds(client, crds_dir, &OLM_NAMESPACES).await
}

/// Applies every CRD of `crds_dir` and the `namespaces`, then waits until
/// the CRDs are established.
async fn install_crds(
    client: &Client,
    crds_dir: &Path,
    namespaces: &[&str],
) -> Result<(), ClusterError> {
    let crds = api::read_crds(crds_dir)?;
    api::apply_crds(client, &crds).await?;
    let names: Vec<String> = crds
        .iter()
        .filter_map(|crd| crd.metadata.name.clone())
        .collect();
    let api: Api<Namespace> = Api::all(client.clone());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    for &name in namespaces {
        let namespace = Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some(name.to_owned()),
                ..Default::default()
            },
            ..Default::default()
        };
        api.patch(name, &params, &Patch::Apply(&namespace))
            .await
            .map_err(ProbeError::from)?;
    }
    let since = Instant::now();
    loop {
        let pending = api::not_established(client, &names)
            .await
            .map_err(ProbeError::from)?;
        if pending.is_empty() {
            return Ok(());
        }
        if since.elapsed() > CRDS_ESTABLISHED {
            return Err(ProbeError::NotYet(format!(
                "CRDs not established after {CRDS_ESTABLISHED:?}: {}",
                pending.join(", ")
            ))
            .into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Starts the cluster's PostgreSQL in its netns on the node IP, reachable
/// from the host (through the veth) and from pods (through the bridge);
/// its directory is under the state dir, so teardown finds the postmaster by
/// its command line. Returns the postmaster and the admin URL.
async fn start_postgres(layout: &Layout) -> Result<(StartedProcess, String), ClusterError> {
    let postgres = TempPostgres::builder()
        .netns(layout.machine().netns)
        .listen_address(IpAddr::V4(layout.node_ip()))
        .port(POSTGRES_PORT)
        .hba_line(format!("host all all {} scram-sha-256", layout.pod_cidr()))
        .hba_line(format!(
            "host all all {}/32 scram-sha-256",
            layout.host_ip()
        ))
        .setting("fsync", "off")
        .base_dir(layout.path("postgres"))
        .log_file(layout.machine().log_dir.join("postgres.log"))
        .start()
        .await?;
    let detached = postgres.detach().ok_or(ClusterError::PostgresDetach)?;
    Ok((detached.record, detached.admin_url))
}
