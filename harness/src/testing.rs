//! Test support on the shared cluster of a test run: the cluster comes from
//! the environment `just` exports (`UPGRADE_GATE_TEST_CLUSTER`, `KUBECONFIG`,
//! `DATABASE_URL`, `UPGRADE_GATE_IMAGE`) and a test PANICS when it is missing
//! — never skips. Each test gets a fresh namespace (deleted by a guard, also
//! when the test panics) and ServiceAccount identities with exactly the
//! rights under test, with tokens from the TokenRequest API.
//!
//! Creates only namespaced objects in the test's namespace (and the
//! namespace itself), and for a test that restarts its database server, a
//! PostgreSQL of its own in the cluster's network namespace; never tears
//! the shared cluster down. Restarts its components (OLM, the kubelet,
//! containerd, the API server) for the fault tests that ask for it.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition, CertificateSigningRequestSpec,
    CertificateSigningRequestStatus,
};
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::config::AuthInfo;
use kube::{Api, Client};

use crate::cluster::Restarted;
use crate::layout::ClusterName;
use crate::postgres::TempPostgres;
use crate::process::{StartedProcess, Stopped};

/// How to get a cluster, quoted by every panic about a missing one.
pub const HOW_TO_START: &str = "start one with `just cluster-up test && eval \"$(just cluster-env test)\"` (and `export UPGRADE_GATE_IMAGE=localhost/upgrade-gate:<version>`), or run `just test`";

/// The shared cluster of this test run, as the environment describes it.
#[derive(Debug, Clone)]
pub struct TestCluster {
    pub name: ClusterName,
    pub kubeconfig: PathBuf,
    pub database_url: String,
    /// The project's image, e.g. `localhost/upgrade-gate:7.10.1`, loaded on the node.
    pub image: String,
}

fn required(var: &str) -> String {
    match std::env::var(var) {
        Ok(value) if !value.is_empty() => value,
        _ => panic!("this test needs a cluster, but {var} is not set: {HOW_TO_START}"),
    }
}

impl TestCluster {
    /// Reads the cluster from the environment; panics with how to start one.
    pub fn from_env() -> Self {
        let name = required("UPGRADE_GATE_TEST_CLUSTER");
        let name: ClusterName = name
            .parse()
            .unwrap_or_else(|error| panic!("UPGRADE_GATE_TEST_CLUSTER: {error}"));
        let kubeconfig = PathBuf::from(required("KUBECONFIG"));
        assert!(
            kubeconfig.is_file(),
            "KUBECONFIG={} does not exist; is cluster {name} up? {HOW_TO_START}",
            kubeconfig.display()
        );
        Self {
            name,
            kubeconfig,
            database_url: required("DATABASE_URL"),
            image: required("UPGRADE_GATE_IMAGE"),
        }
    }

    /// An admin (system:masters) client.
    pub async fn admin_client(&self) -> Client {
        crate::api::client_from_kubeconfig(&self.kubeconfig)
            .await
            .unwrap_or_else(|error| panic!("cluster {}: {error}; {HOW_TO_START}", self.name))
    }

    /// Creates a fresh namespace `<prefix>-<random>` deleted when the guard drops.
    pub async fn namespace(&self, prefix: &str) -> TestNamespace {
        create_namespace(&self.kubeconfig, prefix).await
    }

    /// Starts `opm serve` for a file-based catalog in the cluster's network
    /// namespace; the guard stops it (teardown also ends it, as a process in
    /// the cluster's netns). Returns the address for a CatalogSource's
    /// `spec.address`.
    pub async fn serve_catalog(&self, catalog_dir: &Path, port: u16) -> ServedCatalog {
        let (record, address) = self
            .attach()
            .serve_catalog(catalog_dir, port)
            .await
            .unwrap_or_else(|error| panic!("serving {}: {error}", catalog_dir.display()));
        ServedCatalog { record, address }
    }
}

impl TestCluster {
    fn attach(&self) -> crate::cluster::Cluster {
        crate::cluster::Cluster::attach(&self.name)
            .unwrap_or_else(|error| panic!("{error}; {HOW_TO_START}"))
    }

    /// Kills OLM's `olm` operator (SIGKILL) and starts it again, for tests
    /// of what a crash of OLM does mid-upgrade; returns once it is ready
    /// again. Every test on the shared cluster sees OLM pause meanwhile.
    pub async fn restart_olm(&self) -> Duration {
        self.attach()
            .restart_olm()
            .await
            .unwrap_or_else(|error| panic!("restarting olm on cluster {}: {error}", self.name))
    }

    /// Stops OLM's `olm` operator (SIGTERM) until the guard's
    /// [`OlmStopped::start`] — or its drop, also when the test panics.
    /// Every test on the shared cluster sees OLM stopped meanwhile.
    pub async fn stop_olm(&self) -> OlmStopped {
        let stopped = self
            .attach()
            .stop_olm()
            .await
            .unwrap_or_else(|error| panic!("stopping olm on cluster {}: {error}", self.name));
        OlmStopped {
            cluster: self.name.clone(),
            stopped,
            started: false,
        }
    }

    /// Restarts the node's kubelet (SIGTERM, the same spec started again);
    /// returns once the new one serves and the Node is Ready. Containers
    /// keep running; every test on the shared cluster sees its pods'
    /// status updates pause meanwhile.
    pub async fn restart_kubelet(&self) -> Restarted {
        self.attach()
            .restart_kubelet()
            .await
            .unwrap_or_else(|error| panic!("restarting the kubelet of {}: {error}", self.name))
    }

    /// Restarts the node's containerd (SIGTERM, the same spec started
    /// again); returns once it answers and the Node is Ready. Containers
    /// keep running; every test sees the runtime gone meanwhile (`ctr
    /// events` subscriptions end).
    pub async fn restart_containerd(&self) -> Restarted {
        self.attach()
            .restart_containerd()
            .await
            .unwrap_or_else(|error| panic!("restarting containerd of {}: {error}", self.name))
    }

    /// Restarts the cluster's API server (SIGTERM, the same spec started
    /// again); returns once its `/readyz` says ok. Cuts every request and
    /// watch of every test on the cluster: for tests that run alone.
    pub async fn restart_apiserver(&self) -> Restarted {
        self.attach()
            .restart_apiserver()
            .await
            .unwrap_or_else(|error| panic!("restarting the API server of {}: {error}", self.name))
    }
}

/// OLM's `olm` operator stopped ([`TestCluster::stop_olm`]); started again
/// by [`OlmStopped::start`] or, failing that, when the guard drops.
#[derive(Debug)]
pub struct OlmStopped {
    cluster: ClusterName,
    /// How the process ended: on SIGTERM, or killed after the grace.
    pub stopped: Stopped,
    started: bool,
}

impl OlmStopped {
    /// Starts OLM again and waits until it is ready; returns how long the
    /// start took.
    pub async fn start(mut self) -> Duration {
        self.started = true;
        crate::cluster::Cluster::attach(&self.cluster)
            .unwrap_or_else(|error| panic!("{error}; {HOW_TO_START}"))
            .start_olm()
            .await
            .unwrap_or_else(|error| panic!("starting olm on cluster {}: {error}", self.cluster))
    }
}

impl Drop for OlmStopped {
    fn drop(&mut self) {
        if self.started {
            return;
        }
        let name = self.cluster.clone();
        clean_up_on_drop("starting olm again", move || async move {
            crate::cluster::Cluster::attach(&name)
                .map_err(|error| error.to_string())?
                .start_olm()
                .await
                .map(drop)
                .map_err(|error| error.to_string())
        });
    }
}

impl TestCluster {
    /// A PostgreSQL server of one test's own beside the cluster's: in the
    /// cluster's network namespace on the node IP at `port` (not the
    /// cluster server's), reachable from this process and from pods as the
    /// cluster's is, so a test can stop, kill and start it again without
    /// disturbing the other tests. Its directory is under the cluster's
    /// state directory (reusing the cluster's `initdb` template; the
    /// cluster's teardown ends the server and removes it should the test
    /// process die), its log in the cluster's log directory
    /// (`postgres-<port>.log`). Stopped and removed when dropped.
    pub async fn private_postgres(&self, port: u16) -> TempPostgres {
        assert_ne!(
            port,
            crate::layout::POSTGRES_PORT,
            "port {port} is the cluster's PostgreSQL"
        );
        let cluster = crate::cluster::Cluster::attach(&self.name)
            .unwrap_or_else(|error| panic!("{error}; {HOW_TO_START}"));
        let layout = cluster.layout();
        TempPostgres::builder()
            .netns(layout.machine().netns)
            .listen_address(IpAddr::V4(layout.node_ip()))
            .port(port)
            .hba_line(format!("host all all {} scram-sha-256", layout.pod_cidr()))
            .hba_line(format!(
                "host all all {}/32 scram-sha-256",
                layout.host_ip()
            ))
            .base_dir(layout.path("postgres"))
            .log_file(
                layout
                    .machine()
                    .log_dir
                    .join(format!("postgres-{port}.log")),
            )
            .start()
            .await
            .unwrap_or_else(|error| {
                panic!(
                    "starting a PostgreSQL on port {port} in cluster {}: {error}",
                    self.name
                )
            })
    }
}

/// Creates a fresh namespace `<prefix>-<random>` on the cluster of
/// `kubeconfig` (any cluster, not only the harness's), deleted when the
/// guard drops.
pub async fn create_namespace(kubeconfig: &Path, prefix: &str) -> TestNamespace {
    let client = crate::api::client_from_kubeconfig(kubeconfig)
        .await
        .unwrap_or_else(|error| panic!("{}: {error}", kubeconfig.display()));
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace = Namespace {
        metadata: ObjectMeta {
            generate_name: Some(format!("{prefix}-")),
            labels: Some([("upgrade-gate.test/run".to_owned(), "true".to_owned())].into()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    let created = namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap_or_else(|error| panic!("creating a test namespace: {error}"));
    let name = created
        .metadata
        .name
        .unwrap_or_else(|| panic!("the API server returned a namespace without a name"));
    let namespace = TestNamespace {
        _olm_wake: crate::olm_wake::start(client.clone(), &name),
        name,
        client,
        kubeconfig: kubeconfig.to_owned(),
    };
    namespace.wait_for_default_service_account().await;
    namespace
}

/// How long a new namespace may go without its `default` ServiceAccount.
const DEFAULT_ACCOUNT_WITHIN: Duration = Duration::from_secs(120);

/// A running `opm serve`; stopped on drop.
#[derive(Debug)]
pub struct ServedCatalog {
    record: StartedProcess,
    pub address: String,
}

impl Drop for ServedCatalog {
    fn drop(&mut self) {
        self.record.stop(Duration::from_secs(3));
    }
}

/// A namespace for one test, deleted on drop (also when the test panics).
pub struct TestNamespace {
    pub name: String,
    client: Client,
    kubeconfig: PathBuf,
    /// OLM woken when a CSV here is deleted ([`crate::olm_wake`]).
    _olm_wake: crate::olm_wake::OlmResolutionWake,
}

impl TestNamespace {
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// Waits for the `default` ServiceAccount the controller manager makes
    /// in every namespace. Until it exists the API server refuses Pods that
    /// name no account ("error looking up service account …/default"): its
    /// admission plugin looks again for under 2 s only, and on a loaded
    /// cluster the controller takes longer. Waiting here lets every test
    /// create Pods in its namespace at once.
    async fn wait_for_default_service_account(&self) {
        let accounts: Api<ServiceAccount> = self.api();
        let exists = |account: Option<&ServiceAccount>| account.is_some();
        let waited = tokio::time::timeout(
            DEFAULT_ACCOUNT_WITHIN,
            kube::runtime::wait::await_condition(accounts, "default", exists),
        )
        .await;
        match waited {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => panic!(
                "watching for ServiceAccount default in namespace {}: {error}",
                self.name
            ),
            Err(_) => panic!(
                "namespace {} has no ServiceAccount default after {DEFAULT_ACCOUNT_WITHIN:?}; is the controller manager running?",
                self.name
            ),
        }
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }

    /// A ServiceAccount `name` bound to a Role with exactly `rules` in this
    /// namespace, and a client authenticated with a token from the
    /// TokenRequest API.
    pub async fn service_account(&self, name: &str, rules: Vec<PolicyRule>) -> Identity {
        let metadata = |name: &str| ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(self.name.clone()),
            ..ObjectMeta::default()
        };
        let accounts: Api<ServiceAccount> = self.api();
        let account = ServiceAccount {
            metadata: metadata(name),
            ..ServiceAccount::default()
        };
        accounts
            .create(&PostParams::default(), &account)
            .await
            .unwrap_or_else(|error| panic!("creating ServiceAccount {name}: {error}"));
        let role = Role {
            metadata: metadata(name),
            rules: Some(rules),
        };
        self.api::<Role>()
            .create(&PostParams::default(), &role)
            .await
            .unwrap_or_else(|error| panic!("creating Role {name}: {error}"));
        let binding = RoleBinding {
            metadata: metadata(name),
            role_ref: RoleRef {
                api_group: Some("rbac.authorization.k8s.io".into()),
                kind: "Role".into(),
                name: name.to_owned(),
            },
            subjects: Some(vec![Subject {
                kind: "ServiceAccount".into(),
                name: name.to_owned(),
                namespace: Some(self.name.clone()),
                ..Subject::default()
            }]),
        };
        self.api::<RoleBinding>()
            .create(&PostParams::default(), &binding)
            .await
            .unwrap_or_else(|error| panic!("creating RoleBinding {name}: {error}"));
        self.token_identity(name).await
    }

    /// A client for the existing ServiceAccount `name` with a fresh token
    /// from the TokenRequest API, and a kubeconfig file holding that token.
    pub async fn token_identity(&self, name: &str) -> Identity {
        self.token_identity_of(name, None).await
    }

    /// [`TestNamespace::token_identity`] with a token bound to pod `pod` of
    /// this namespace (which runs as ServiceAccount `name`), as the kubelet
    /// mounts one: the API server then names the pod in the request's
    /// `userInfo.extra`.
    pub async fn pod_token_identity(&self, name: &str, pod: &str) -> Identity {
        let uid = self
            .api::<Pod>()
            .get(pod)
            .await
            .unwrap_or_else(|error| panic!("reading pod {pod}: {error}"))
            .metadata
            .uid
            .unwrap_or_else(|| panic!("pod {pod} has no uid"));
        self.token_identity_of(
            name,
            Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(pod.to_owned()),
                uid: Some(uid),
            }),
        )
        .await
    }

    async fn token_identity_of(&self, name: &str, bound: Option<BoundObjectReference>) -> Identity {
        let accounts: Api<ServiceAccount> = self.api();
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                expiration_seconds: Some(3600),
                bound_object_ref: bound,
                ..TokenRequestSpec::default()
            }),
            ..TokenRequest::default()
        };
        let token = accounts
            .create_token_request(name, &PostParams::default(), &request)
            .await
            .unwrap_or_else(|error| panic!("TokenRequest for ServiceAccount {name}: {error}"))
            .status
            .and_then(|status| status.token)
            .unwrap_or_else(|| panic!("TokenRequest for {name} returned no token"));
        let admin = kube::config::Kubeconfig::read_from(&self.kubeconfig)
            .unwrap_or_else(|error| panic!("reading {}: {error}", self.kubeconfig.display()));
        let cluster = admin
            .clusters
            .first()
            .and_then(|named| named.cluster.clone())
            .unwrap_or_else(|| panic!("{} names no cluster", self.kubeconfig.display()));
        let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("temp dir: {error}"));
        let kubeconfig = dir.path().join(format!("{name}.kubeconfig"));
        let user = AuthInfo {
            token: Some(token.clone().into()),
            ..AuthInfo::default()
        };
        // The admin's cluster entry as it is: its CA a path (the local
        // cluster) or inline data (kind).
        crate::pki::write_kubeconfig(&kubeconfig, cluster, name, user)
            .unwrap_or_else(|error| panic!("{error}"));
        let client = crate::api::client_from_kubeconfig(&kubeconfig)
            .await
            .unwrap_or_else(|error| panic!("{error}"));
        Identity {
            service_account: name.to_owned(),
            namespace: self.name.clone(),
            token,
            kubeconfig,
            client,
            _dir: dir,
        }
    }
}

impl TestNamespace {
    /// A person, `<name>-<namespace>`, with a client certificate of the
    /// cluster's CA obtained as an admin onboards a user: a
    /// CertificateSigningRequest (signer kubernetes.io/kube-apiserver-client)
    /// the admin approves and the controller manager signs. Holds no right
    /// until bound; the request is deleted when the value drops.
    pub async fn person(&self, name: &str) -> Person {
        let username = format!("{name}-{}", self.name);
        let key = rcgen::KeyPair::generate()
            .unwrap_or_else(|error| panic!("a key for {username}: {error}"));
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new())
            .unwrap_or_else(|error| panic!("certificate params: {error}"));
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, username.clone());
        let request = params
            .serialize_request(&key)
            .unwrap_or_else(|error| panic!("a CSR for {username}: {error}"))
            .pem()
            .unwrap_or_else(|error| panic!("the CSR as PEM: {error}"));
        let requests: Api<CertificateSigningRequest> = Api::all(self.client.clone());
        let csr = CertificateSigningRequest {
            metadata: ObjectMeta {
                name: Some(username.clone()),
                ..ObjectMeta::default()
            },
            spec: CertificateSigningRequestSpec {
                request: k8s_openapi::ByteString(request.into_bytes()),
                signer_name: "kubernetes.io/kube-apiserver-client".into(),
                expiration_seconds: Some(3600),
                usages: Some(vec!["client auth".into()]),
                ..CertificateSigningRequestSpec::default()
            },
            status: None,
        };
        requests
            .create(&PostParams::default(), &csr)
            .await
            .unwrap_or_else(|error| panic!("creating the CSR of {username}: {error}"));
        let guard = CsrGuard {
            kubeconfig: self.kubeconfig.clone(),
            name: username.clone(),
        };
        let approval = CertificateSigningRequest {
            status: Some(CertificateSigningRequestStatus {
                conditions: Some(vec![CertificateSigningRequestCondition {
                    type_: "Approved".into(),
                    status: "True".into(),
                    reason: Some("TestUser".into()),
                    message: Some("a person for an upgrade-gate test".into()),
                    ..CertificateSigningRequestCondition::default()
                }]),
                certificate: None,
            }),
            ..csr
        };
        requests
            .patch_approval(
                &username,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"status": approval.status})),
            )
            .await
            .unwrap_or_else(|error| panic!("approving the CSR of {username}: {error}"));
        let signed = tokio::time::timeout(
            CERTIFICATE_WITHIN,
            kube::runtime::wait::await_condition(
                requests,
                &username,
                |csr: Option<&CertificateSigningRequest>| {
                    csr.and_then(|csr| csr.status.as_ref())
                        .and_then(|status| status.certificate.as_ref())
                        .is_some_and(|certificate| !certificate.0.is_empty())
                },
            ),
        )
        .await
        .unwrap_or_else(|_| {
            panic!("the CSR of {username} not signed within {CERTIFICATE_WITHIN:?}: is the controller manager's csrsigning controller running?")
        })
        .unwrap_or_else(|error| panic!("watching the CSR of {username}: {error}"))
        .and_then(|csr| csr.status)
        .and_then(|status| status.certificate)
        .unwrap_or_else(|| panic!("the CSR of {username} has no certificate"));
        let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("temp dir: {error}"));
        let write = |file: &str, bytes: &[u8]| {
            let path = dir.path().join(file);
            std::fs::write(&path, bytes)
                .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
            path
        };
        let certificate = write("tls.crt", &signed.0);
        let private_key = write("tls.key", key.serialize_pem().as_bytes());
        let admin = kube::config::Kubeconfig::read_from(&self.kubeconfig)
            .unwrap_or_else(|error| panic!("reading {}: {error}", self.kubeconfig.display()));
        let cluster = admin
            .clusters
            .first()
            .and_then(|named| named.cluster.clone())
            .unwrap_or_else(|| panic!("{} names no cluster", self.kubeconfig.display()));
        let kubeconfig = dir.path().join(format!("{name}.kubeconfig"));
        let user = AuthInfo {
            client_certificate: Some(certificate.display().to_string()),
            client_key: Some(private_key.display().to_string()),
            ..AuthInfo::default()
        };
        crate::pki::write_kubeconfig(&kubeconfig, cluster, &username, user)
            .unwrap_or_else(|error| panic!("{error}"));
        let client = crate::api::client_from_kubeconfig(&kubeconfig)
            .await
            .unwrap_or_else(|error| panic!("{error}"));
        Person {
            username,
            kubeconfig,
            client,
            _dir: dir,
            _request: guard,
        }
    }
}

/// How long the controller manager may take to sign an approved CSR.
const CERTIFICATE_WITHIN: Duration = Duration::from_secs(60);

/// A person's identity ([`TestNamespace::person`]): the username the API
/// server sees, a kubeconfig with the person's certificate (kept while
/// this value lives) and a client.
pub struct Person {
    pub username: String,
    pub kubeconfig: PathBuf,
    pub client: Client,
    _dir: tempfile::TempDir,
    _request: CsrGuard,
}

/// Deletes a person's CertificateSigningRequest when dropped.
struct CsrGuard {
    kubeconfig: PathBuf,
    name: String,
}

impl Drop for CsrGuard {
    fn drop(&mut self) {
        delete_on_drop::<CertificateSigningRequest>(&self.kubeconfig, &self.name);
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        delete_on_drop::<Namespace>(&self.kubeconfig, &self.name);
    }
}

/// Runs a guard's asynchronous clean-up from its `Drop`, on a thread with a
/// runtime of its own: a drop may run inside the test's runtime, which must
/// not be blocked on. A failure is printed as `{what}: {error}`, never
/// panicked on (the drop may run while a test panics).
pub fn clean_up_on_drop<F, Fut>(what: &str, clean_up: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let outcome = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|error| error.to_string())?;
        runtime.block_on(clean_up())
    })
    .join();
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(error)) => eprintln!("{what}: {error}"),
        Err(_) => eprintln!("{what}: the clean-up thread panicked"),
    }
}

/// Deletes the cluster-scoped object `name` of kind `K` (in the background)
/// from a guard's `Drop`, with a client of its own from `kubeconfig`; see
/// [`clean_up_on_drop`].
pub fn delete_on_drop<K>(kubeconfig: &Path, name: &str)
where
    K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + 'static,
    K::DynamicType: Default,
{
    let kubeconfig = kubeconfig.to_owned();
    let name = name.to_owned();
    let what = format!("deleting {} {name}", K::kind(&K::DynamicType::default()));
    clean_up_on_drop(&what, move || async move {
        let client = crate::api::client_from_kubeconfig(&kubeconfig)
            .await
            .map_err(|error| error.to_string())?;
        Api::<K>::all(client)
            .delete(&name, &DeleteParams::background())
            .await
            .map(drop)
            .map_err(|error| error.to_string())
    });
}

/// A ServiceAccount's identity: its token, a kubeconfig file with it (kept
/// while this value lives) and a client.
pub struct Identity {
    pub service_account: String,
    pub namespace: String,
    pub token: String,
    pub kubeconfig: PathBuf,
    pub client: Client,
    _dir: tempfile::TempDir,
}
