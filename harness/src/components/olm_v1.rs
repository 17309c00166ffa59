//! OLM v1 (operator-controller and catalogd, the versions `tools/olm-v1`
//! pins) beside OLM v0, run as its release manifest runs it
//! (`olm-v1/manifests/standard.yaml` in the tools directory) but without
//! cert-manager: the harness's PKI signs what cert-manager would issue, and
//! the two Secrets the Deployments mount are written from it. The manifest
//! is applied minus its cert-manager objects and catalogd's mutating webhook
//! (docs/harness-olm-v1.md says why), with our images and the names the pods must
//! resolve without cluster DNS (`hostAliases`, a fixed ClusterIP for
//! catalogd's Service). Also the registry OLM v1 pulls catalog and bundle
//! images from: `registry` (tools/olm-v1/cmd/registry) on the node IP.
//!
//! Owns: rendering the manifest and the Secrets (pure, table-tested),
//! applying them, OLM v1's readiness, the registry's command line. Must not
//! touch: OLM v0's objects, or anything outside `olmv1-system` besides OLM
//! v1's own CRDs and cluster-wide RBAC.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde::Deserialize;
use serde_json::{Value, json};

use super::context::{ClusterContext, HealthProbe, ProbeError};
use crate::api::FIELD_MANAGER;
use crate::layout::{REGISTRY_NAME, REGISTRY_PORT};
pub use crate::olm_v1_names::{
    CATALOGD_CERT, CATALOGD_SERVICE, NAMESPACE, OPERATOR_CONTROLLER_CERT,
    OPERATOR_CONTROLLER_SERVICE, REGISTRY_CERT, service_dns_names,
};
use crate::process::ProcessSpec;

/// The operator-controller release `tools/olm-v1/go.mod` pins: the tag of
/// the images `tools/image.sh olm-v1` builds (a unit test compares them).
pub const VERSION: &str = "v1.5.1";
pub const CATALOGD_DEPLOYMENT: &str = "catalogd-controller-manager";
pub const OPERATOR_CONTROLLER_DEPLOYMENT: &str = "operator-controller-controller-manager";
/// The Secrets the Deployments mount, named as in the manifest (a release
/// would call catalogd's `catalogd-service-cert-<version>`; the module's
/// manifest keeps the placeholder).
pub const CATALOGD_SECRET: &str = "catalogd-service-cert-git-version";
pub const OPERATOR_CONTROLLER_SECRET: &str = "olmv1-cert";
/// The container of both Deployments that runs the command.
const MANAGER_CONTAINER: &str = "manager";
/// How often the kubelet asks both pods whether they are ready.
pub const READINESS_PERIOD_SECONDS: i64 = 1;
/// The one alpha feature gate the harness turns on (`experimental.yaml`
/// turns it on too): a ClusterExtension annotated
/// `olm.operatorframework.io/watch-namespace: <its namespace>` installs its
/// operator for that namespace alone (OwnNamespace), as OLM v0's
/// OperatorGroups do for the other tests. Without it every v1 install
/// watches all namespaces (`internal/operator-controller/applier/watchnamespace.go`),
/// and its operator would reconcile the Apps of every test on the shared
/// cluster. Without the annotation nothing changes.
pub const OPERATOR_CONTROLLER_FEATURE_GATE: &str =
    "--feature-gates=SingleOwnNamespaceInstallSupport=true";

/// `localhost/<command>:<VERSION>`, as `tools/image.sh olm-v1` tags it.
pub fn image(command: &str) -> String {
    format!("localhost/{command}:{VERSION}")
}

/// The images the Deployments run; imported into the node before the
/// manifest is applied.
pub fn images() -> [String; 2] {
    [image("catalogd"), image("operator-controller")]
}

#[derive(Debug, thiserror::Error)]
pub enum OlmV1Error {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("OLM v1's manifest is not YAML: {0}")]
    Yaml(#[from] serde_yaml::Error),
    #[error(
        "OLM v1's manifest has no {0}: was it changed upstream? (harness/src/components/olm_v1.rs)"
    )]
    Missing(String),
    #[error("OLM v1's manifest has a {0} the harness does not know how to apply")]
    UnknownKind(String),
    #[error("{what} is not a Kubernetes object: {source}")]
    Object {
        what: String,
        source: serde_json::Error,
    },
    #[error("applying {what}: {source}")]
    Apply { what: String, source: kube::Error },
    #[error(
        "the node's containerd has no {0}: build it with `tools/image.sh olm-v1` and pass its archive with --image"
    )]
    NoImage(String),
}

/// Where the cluster puts what the pods must reach by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The registry listens there.
    pub node_ip: Ipv4Addr,
    /// catalogd's Service gets this ClusterIP.
    pub catalogd_service_ip: Ipv4Addr,
}

/// Whether the harness leaves `object` of the manifest out: cert-manager's
/// objects (their API is not served; the harness issues the certificates)
/// and catalogd's MutatingWebhookConfiguration (its caBundle would come
/// from cert-manager's CA injector; what it does, the one label, our
/// ClusterCatalogs carry themselves).
pub fn left_out(object: &Value) -> bool {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    api_version.starts_with("cert-manager.io/") || object["kind"] == "MutatingWebhookConfiguration"
}

/// The objects to apply, in order: the manifest's (as [`left_out`] and
/// [`patch`] say) with `secrets` before the first Deployment, which mounts
/// them.
pub fn render(
    manifest: &str,
    placement: &Placement,
    secrets: Vec<Value>,
) -> Result<Vec<Value>, OlmV1Error> {
    let mut objects = Vec::new();
    for document in serde_yaml::Deserializer::from_str(manifest) {
        let object = Value::deserialize(document)?;
        if object.is_null() || left_out(&object) {
            continue;
        }
        objects.push(object);
    }
    patch(&mut objects, placement)?;
    let first_deployment = objects
        .iter()
        .position(|object| object["kind"] == "Deployment")
        .ok_or_else(|| OlmV1Error::Missing("Deployment".into()))?;
    objects.splice(first_deployment..first_deployment, secrets);
    Ok(objects)
}

/// What the harness changes in the manifest's objects:
/// - both Deployments run our images (`imagePullPolicy: Never`: nothing can
///   be pulled, and a missing image shows at once as `ErrImageNeverPull`);
/// - operator-controller gets [`OPERATOR_CONTROLLER_FEATURE_GATE`];
/// - their readiness probes look every [`READINESS_PERIOD_SECONDS`] from the
///   start (the manifest: after 5 s, then every 10 s, so a pod ready at
///   once counted as ready 5–15 s later, and catalogd's Service, which
///   operator-controller fetches catalogs from, had no endpoint until then);
/// - both pods map the registry's name to the node IP, operator-controller's
///   also catalogd's Service name (catalogd publishes
///   `https://catalogd-service.olmv1-system.svc/catalogs/...` as each
///   catalog's URL) to that Service's fixed ClusterIP;
/// - catalogd's Service gets that ClusterIP.
pub fn patch(objects: &mut [Value], placement: &Placement) -> Result<(), OlmV1Error> {
    let registry = json!({"ip": placement.node_ip.to_string(), "hostnames": [REGISTRY_NAME]});
    let catalogd = json!({
        "ip": placement.catalogd_service_ip.to_string(),
        "hostnames": [service_dns_names(CATALOGD_SERVICE)[0]],
    });
    let deployments = [
        (CATALOGD_DEPLOYMENT, "catalogd", json!([registry]), None),
        (
            OPERATOR_CONTROLLER_DEPLOYMENT,
            "operator-controller",
            json!([registry, catalogd]),
            Some(OPERATOR_CONTROLLER_FEATURE_GATE),
        ),
    ];
    for (name, command, aliases, extra_arg) in deployments {
        let deployment = find(objects, "Deployment", name)?;
        let pod = &mut deployment["spec"]["template"]["spec"];
        let manager = pod["containers"]
            .as_array_mut()
            .and_then(|containers| {
                containers
                    .iter_mut()
                    .find(|container| container["name"] == MANAGER_CONTAINER)
            })
            .ok_or_else(|| {
                OlmV1Error::Missing(format!(
                    "container {MANAGER_CONTAINER} in Deployment {name}"
                ))
            })?;
        manager["image"] = json!(image(command));
        manager["imagePullPolicy"] = json!("Never");
        let probe = manager["readinessProbe"].as_object_mut().ok_or_else(|| {
            OlmV1Error::Missing(format!(
                "readinessProbe of container {MANAGER_CONTAINER} in Deployment {name}"
            ))
        })?;
        probe.insert("initialDelaySeconds".into(), json!(0));
        probe.insert("periodSeconds".into(), json!(READINESS_PERIOD_SECONDS));
        if let Some(arg) = extra_arg {
            let args = manager["args"].as_array_mut().ok_or_else(|| {
                OlmV1Error::Missing(format!(
                    "args of container {MANAGER_CONTAINER} in Deployment {name}"
                ))
            })?;
            args.push(json!(arg));
        }
        pod["hostAliases"] = aliases;
    }
    let service = find(objects, "Service", CATALOGD_SERVICE)?;
    service["spec"]["clusterIP"] = json!(placement.catalogd_service_ip.to_string());
    Ok(())
}

fn find<'a>(objects: &'a mut [Value], kind: &str, name: &str) -> Result<&'a mut Value, OlmV1Error> {
    objects
        .iter_mut()
        .find(|object| object["kind"] == kind && object["metadata"]["name"] == name)
        .ok_or_else(|| OlmV1Error::Missing(format!("{kind} {name}")))
}

/// A `kubernetes.io/tls` Secret in OLM v1's namespace, as cert-manager
/// writes one: `tls.crt`, `tls.key` and the issuing CA as `ca.crt`.
pub fn tls_secret(name: &str, ca: &str, cert: &str, key: &str) -> Value {
    let data: BTreeMap<String, ByteString> = [("ca.crt", ca), ("tls.crt", cert), ("tls.key", key)]
        .into_iter()
        .map(|(file, pem)| (file.to_owned(), ByteString(pem.as_bytes().to_vec())))
        .collect();
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(NAMESPACE.to_owned()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".to_owned()),
        data: Some(data),
        ..Default::default()
    };
    let mut value = serde_json::to_value(secret).unwrap_or_default();
    value["apiVersion"] = json!("v1");
    value["kind"] = json!("Secret");
    value
}

/// The REST resource of each kind the rendered manifest holds: its plural
/// and whether it is namespaced.
pub fn resource_of(kind: &str) -> Option<(&'static str, bool)> {
    Some(match kind {
        "Namespace" => ("namespaces", false),
        "CustomResourceDefinition" => ("customresourcedefinitions", false),
        "ClusterRole" => ("clusterroles", false),
        "ClusterRoleBinding" => ("clusterrolebindings", false),
        "ServiceAccount" => ("serviceaccounts", true),
        "Secret" => ("secrets", true),
        "Role" => ("roles", true),
        "RoleBinding" => ("rolebindings", true),
        "Service" => ("services", true),
        "Deployment" => ("deployments", true),
        "NetworkPolicy" => ("networkpolicies", true),
        _ => return None,
    })
}

/// `<kind> <namespace>/<name>` for messages.
fn describe(object: &Value) -> String {
    let metadata = &object["metadata"];
    let name = metadata["name"].as_str().unwrap_or("?");
    match metadata["namespace"].as_str() {
        Some(namespace) => format!("{} {namespace}/{name}", object["kind"]),
        None => format!("{} {name}", object["kind"]),
    }
}

/// Applies `objects` server-side, in order.
pub async fn apply(client: &Client, objects: &[Value]) -> Result<(), OlmV1Error> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    for object in objects {
        let what = describe(object);
        let kind = object["kind"].as_str().unwrap_or_default();
        let (plural, namespaced) =
            resource_of(kind).ok_or_else(|| OlmV1Error::UnknownKind(kind.to_owned()))?;
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let resource =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
        let dynamic: DynamicObject =
            serde_json::from_value(object.clone()).map_err(|source| OlmV1Error::Object {
                what: what.clone(),
                source,
            })?;
        let name = dynamic.metadata.name.clone().unwrap_or_default();
        let api: Api<DynamicObject> = match (namespaced, &dynamic.metadata.namespace) {
            (true, Some(namespace)) => Api::namespaced_with(client.clone(), namespace, &resource),
            _ => Api::all_with(client.clone(), &resource),
        };
        api.patch(&name, &params, &Patch::Apply(&dynamic))
            .await
            .map_err(|source| OlmV1Error::Apply { what, source })?;
    }
    Ok(())
}

/// Why a Deployment does not count as ready yet; `None` when it does: its
/// controller saw the current spec and every replica is updated and ready
/// (which is when its Service sends it traffic; `Available` would add
/// catalogd's `minReadySeconds`, 5 s, and say nothing more).
pub fn deployment_not_ready(deployment: &Deployment) -> Option<String> {
    let wanted = deployment
        .spec
        .as_ref()
        .and_then(|spec| spec.replicas)
        .unwrap_or(1);
    let Some(status) = &deployment.status else {
        return Some("no status yet".into());
    };
    let generation = deployment.metadata.generation.unwrap_or(0);
    if status.observed_generation.unwrap_or(0) < generation {
        return Some("its controller has not seen the current spec".into());
    }
    let updated = status.updated_replicas.unwrap_or(0);
    let ready = status.ready_replicas.unwrap_or(0);
    (updated < wanted || ready < wanted)
        .then(|| format!("{ready} of {wanted} replicas ready, {updated} updated"))
}

/// One line about a pod: its phase and each container that is not running
/// and ready (waiting reason, last exit), to say why OLM v1 is not ready.
pub fn pod_summary(pod: &Pod) -> String {
    let name = pod.metadata.name.as_deref().unwrap_or("?");
    let Some(status) = &pod.status else {
        return format!("pod {name}: no status");
    };
    let mut parts = vec![format!(
        "pod {name}: {}",
        status.phase.as_deref().unwrap_or("?")
    )];
    let containers = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten());
    for container in containers {
        if container.ready {
            continue;
        }
        let state = container.state.as_ref();
        let waiting = state
            .and_then(|state| state.waiting.as_ref())
            .map(|waiting| {
                format!(
                    "waiting {} {}",
                    waiting.reason.as_deref().unwrap_or(""),
                    waiting.message.as_deref().unwrap_or("")
                )
            });
        let running = state
            .and_then(|state| state.running.as_ref())
            .map(|_| "running, not ready".to_owned());
        let terminated = container
            .last_state
            .as_ref()
            .and_then(|last| last.terminated.as_ref())
            .map(|terminated| {
                format!(
                    "; last exit {} {}",
                    terminated.exit_code,
                    terminated.reason.as_deref().unwrap_or("")
                )
            })
            .unwrap_or_default();
        parts.push(format!(
            "{} {}{} (restarts {})",
            container.name,
            waiting.or(running).unwrap_or_else(|| "?".into()).trim(),
            terminated,
            container.restart_count
        ));
    }
    parts.join("; ")
}

/// Ready when both Deployments are (see [`deployment_not_ready`]); the
/// "not yet" names what is missing and what the pods say.
pub async fn ready(client: &Client) -> Result<(), ProbeError> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let mut waiting = Vec::new();
    for name in [CATALOGD_DEPLOYMENT, OPERATOR_CONTROLLER_DEPLOYMENT] {
        match deployments.get_opt(name).await? {
            None => waiting.push(format!("Deployment {name}: not found")),
            Some(deployment) => {
                if let Some(why) = deployment_not_ready(&deployment) {
                    waiting.push(format!("Deployment {name}: {why}"));
                }
            }
        }
    }
    if waiting.is_empty() {
        return Ok(());
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let pods = pods.list(&ListParams::default()).await?;
    waiting.extend(pods.items.iter().map(pod_summary));
    Err(ProbeError::NotYet(waiting.join("; ")))
}

/// The registry: go-containerregistry's in `registry` (tools/olm-v1), HTTPS
/// with the harness PKI's certificate (the registry's name and the node
/// IP), blobs on disk under the state dir, manifests in memory.
pub struct Registry<'a> {
    pub cluster: &'a ClusterContext,
}

impl Registry<'_> {
    pub const NAME: &'static str = "olm-v1-registry";

    pub fn blob_dir(&self) -> PathBuf {
        self.cluster.layout.path("olm-v1-registry/blobs")
    }

    pub fn spec(&self) -> ProcessSpec {
        let pki = &self.cluster.pki;
        self.cluster
            .spec(Self::NAME, self.cluster.tool("registry"))
            .args([
                "-address".into(),
                format!("{}:{REGISTRY_PORT}", self.cluster.layout.node_ip()),
                "-tls-cert".into(),
                pki.cert(REGISTRY_CERT).display().to_string(),
                "-tls-key".into(),
                pki.key(REGISTRY_CERT).display().to_string(),
                "-disk".into(),
                self.blob_dir().display().to_string(),
            ])
    }

    /// The distribution API's base answers 200.
    pub async fn ready(&self, probe: &HealthProbe) -> Result<(), ProbeError> {
        let url = format!("https://{}/v2/", self.cluster.layout.registry_address());
        probe.get_ok(&url).await.map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str = r#"
apiVersion: v1
kind: Namespace
metadata:
  name: olmv1-system
---
apiVersion: v1
kind: Service
metadata:
  name: catalogd-service
  namespace: olmv1-system
spec:
  ports: [{name: https, port: 443, targetPort: 8443}]
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: catalogd-controller-manager
  namespace: olmv1-system
spec:
  template:
    spec:
      containers:
      - name: manager
        image: quay.io/operator-framework/catalogd:devel
        imagePullPolicy: IfNotPresent
        readinessProbe: {httpGet: {path: /readyz, port: 8081}, initialDelaySeconds: 5, periodSeconds: 10}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: operator-controller-controller-manager
  namespace: olmv1-system
spec:
  template:
    spec:
      containers:
      - name: manager
        image: quay.io/operator-framework/operator-controller:devel
        args: [--leader-elect]
        readinessProbe: {httpGet: {path: /readyz, port: 8081}}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata:
  name: olmv1-ca
  namespace: cert-manager
---
apiVersion: cert-manager.io/v1
kind: ClusterIssuer
metadata:
  name: olmv1-ca
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: default-deny-all-traffic
  namespace: olmv1-system
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: catalogd-mutating-webhook-configuration
"#;

    fn placement() -> Placement {
        Placement {
            node_ip: Ipv4Addr::new(10, 231, 3, 2),
            catalogd_service_ip: Ipv4Addr::new(10, 233, 3, 10),
        }
    }

    fn names(objects: &[Value]) -> Vec<String> {
        objects
            .iter()
            .map(|object| {
                format!("{}/{}", object["kind"], object["metadata"]["name"]).replace('"', "")
            })
            .collect()
    }

    #[test]
    fn cert_manager_and_the_webhook_are_left_out_and_secrets_come_before_the_deployments() {
        let secret = tls_secret(CATALOGD_SECRET, "CA", "CERT", "KEY");
        let objects = render(MANIFEST, &placement(), vec![secret]).expect("renders");
        assert_eq!(
            names(&objects),
            [
                "Namespace/olmv1-system",
                "Service/catalogd-service",
                "Secret/catalogd-service-cert-git-version",
                "Deployment/catalogd-controller-manager",
                "Deployment/operator-controller-controller-manager",
                "NetworkPolicy/default-deny-all-traffic",
            ]
        );
    }

    #[test]
    fn the_deployments_run_our_images_and_resolve_what_they_dial() {
        let objects = render(MANIFEST, &placement(), vec![]).expect("renders");
        let pod = |name: &str| {
            objects
                .iter()
                .find(|object| object["metadata"]["name"] == name)
                .expect("deployment")["spec"]["template"]["spec"]
                .clone()
        };
        let catalogd = pod(CATALOGD_DEPLOYMENT);
        assert_eq!(
            catalogd["containers"][0]["image"],
            "localhost/catalogd:v1.5.1"
        );
        assert_eq!(catalogd["containers"][0]["imagePullPolicy"], "Never");
        assert_eq!(
            catalogd["hostAliases"],
            json!([{"ip": "10.231.3.2", "hostnames": ["registry.upgrade-gate.test"]}])
        );
        let controller = pod(OPERATOR_CONTROLLER_DEPLOYMENT);
        assert_eq!(
            controller["containers"][0]["image"],
            "localhost/operator-controller:v1.5.1"
        );
        assert_eq!(
            controller["containers"][0]["args"],
            json!([
                "--leader-elect",
                "--feature-gates=SingleOwnNamespaceInstallSupport=true"
            ])
        );
        assert_eq!(catalogd["containers"][0].get("args"), None);
        for pod in [&catalogd, &controller] {
            assert_eq!(
                pod["containers"][0]["readinessProbe"],
                json!({"httpGet": {"path": "/readyz", "port": 8081}, "initialDelaySeconds": 0, "periodSeconds": 1})
            );
        }
        assert_eq!(
            controller["hostAliases"],
            json!([
                {"ip": "10.231.3.2", "hostnames": ["registry.upgrade-gate.test"]},
                {"ip": "10.233.3.10", "hostnames": ["catalogd-service.olmv1-system.svc"]},
            ])
        );
        let service = objects
            .iter()
            .find(|object| object["kind"] == "Service")
            .expect("service");
        assert_eq!(service["spec"]["clusterIP"], "10.233.3.10");
    }

    #[test]
    fn a_manifest_without_what_the_harness_patches_is_refused() {
        let cases = [
            (
                "kind: Namespace\napiVersion: v1\nmetadata: {name: x}\n",
                "Deployment catalogd-controller-manager",
            ),
            (
                &MANIFEST.replace(
                    "name: manager\n        image: quay.io/operator-framework/catalogd",
                    "name: other\n        image: quay.io/operator-framework/catalogd",
                ),
                "container manager in Deployment catalogd-controller-manager",
            ),
            (
                &MANIFEST.replace("name: catalogd-service", "name: renamed"),
                "Service catalogd-service",
            ),
        ];
        for (manifest, missing) in cases {
            let error = render(manifest, &placement(), vec![]).expect_err("refused");
            assert!(
                matches!(&error, OlmV1Error::Missing(what) if what == missing),
                "{error}"
            );
        }
    }

    #[test]
    fn secrets_hold_what_cert_manager_writes() {
        let secret = tls_secret(OPERATOR_CONTROLLER_SECRET, "CA", "CERT", "KEY");
        assert_eq!(secret["type"], "kubernetes.io/tls");
        assert_eq!(secret["metadata"]["namespace"], "olmv1-system");
        let data = secret["data"].as_object().expect("data");
        assert_eq!(
            data.keys().collect::<Vec<_>>(),
            ["ca.crt", "tls.crt", "tls.key"]
        );
        // base64 of "CA"
        assert_eq!(data["ca.crt"], "Q0E=");
    }

    #[test]
    fn every_kind_of_the_manifest_has_a_resource() {
        for kind in [
            "Namespace",
            "CustomResourceDefinition",
            "ServiceAccount",
            "Role",
            "ClusterRole",
            "RoleBinding",
            "ClusterRoleBinding",
            "Service",
            "Deployment",
            "NetworkPolicy",
            "Secret",
        ] {
            assert!(resource_of(kind).is_some(), "{kind}");
        }
        assert_eq!(
            resource_of("NetworkPolicy"),
            Some(("networkpolicies", true))
        );
        assert_eq!(resource_of("Certificate"), None);
    }

    #[test]
    fn the_images_carry_the_version_tools_olm_v1_pins() {
        let go_mod = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tools/olm-v1/go.mod"
        ))
        .expect("tools/olm-v1/go.mod");
        let pinned = go_mod
            .lines()
            .map(str::trim)
            .find_map(|line| {
                line.strip_prefix("github.com/operator-framework/operator-controller ")
            })
            .expect("operator-controller is required");
        assert_eq!(pinned, VERSION);
    }

    fn deployment(status: Value) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "d", "generation": 2},
            "spec": {"replicas": 1, "selector": {}, "template": {}},
            "status": status,
        }))
        .expect("deployment")
    }

    #[test]
    fn a_deployment_is_ready_when_its_current_replica_is() {
        let cases = [
            (json!(null), Some("no status yet")),
            (
                json!({"observedGeneration": 1, "updatedReplicas": 1, "readyReplicas": 1}),
                Some("its controller has not seen the current spec"),
            ),
            (
                json!({"observedGeneration": 2, "updatedReplicas": 1, "readyReplicas": 0}),
                Some("0 of 1 replicas ready, 1 updated"),
            ),
            (
                json!({"observedGeneration": 2, "updatedReplicas": 0, "readyReplicas": 1}),
                Some("1 of 1 replicas ready, 0 updated"),
            ),
            (
                json!({"observedGeneration": 2, "updatedReplicas": 1, "readyReplicas": 1,
                       "conditions": [{"type": "Available", "status": "False"}]}),
                None,
            ),
        ];
        for (status, expected) in cases {
            assert_eq!(
                deployment_not_ready(&deployment(status.clone())).as_deref(),
                expected,
                "{status}"
            );
        }
    }

    #[test]
    fn a_pod_summary_says_why_a_container_is_not_ready() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "catalogd-1"},
            "status": {"phase": "Running", "containerStatuses": [{
                "name": "manager", "ready": false, "restartCount": 2, "image": "i", "imageID": "",
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
            }]},
        }))
        .expect("pod");
        assert_eq!(
            pod_summary(&pod),
            "pod catalogd-1: Running; manager waiting CrashLoopBackOff back-off; last exit 1 Error (restarts 2)"
        );
    }
}
