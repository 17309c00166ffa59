//! A pod that runs one command of our image to its end, as a Job's pod or
//! an operator's init container would: under a ServiceAccount, with the
//! token the kubelet mounts (bound to the pod, so the API server names the
//! pod in the request's `userInfo.extra`). For the tests of who may write
//! what: a write from a pod is a write from that pod's identity.
//!
//! Owns: the pod it creates (deleted when it ended, and with the test's
//! namespace), and reading its phase and logs.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, LogParams, PostParams};
use serde_json::json;

use crate::wait::{self, Look};

/// How one pod ended.
#[derive(Debug)]
pub struct Ended {
    /// Phase `Succeeded` (every container exited 0).
    pub succeeded: bool,
    /// What its container printed.
    pub logs: String,
}

/// Runs `command` of `image` in pod `name` of `namespace` under
/// ServiceAccount `service_account` (restricted security, no restart)
/// and waits, `timeout` at most, until it ended.
pub async fn run(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    service_account: &str,
    image: &str,
    command: &[&str],
    timeout: Duration,
) -> Ended {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "serviceAccountName": service_account,
            "restartPolicy": "Never",
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "run",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": command,
                "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                                    "capabilities": {"drop": ["ALL"]}}
            }]
        }
    }))
    .unwrap_or_else(|error| panic!("pod {name}: {error}"));
    pods.create(&PostParams::default(), &pod)
        .await
        .unwrap_or_else(|error| panic!("creating pod {name}: {error}"));
    let succeeded = wait::until(&format!("pod {name} ended"), timeout, || async {
        let phase = pods
            .get(name)
            .await
            .ok()
            .and_then(|pod| pod.status)
            .and_then(|status| status.phase)
            .unwrap_or_default();
        match phase.as_str() {
            "Succeeded" => Look::Done(true),
            "Failed" => Look::Done(false),
            other => Look::NotYet(format!("phase {other:?}")),
        }
    })
    .await;
    let logs = pods
        .logs(name, &LogParams::default())
        .await
        .unwrap_or_else(|error| format!("(no logs: {error})"));
    let _gone = pods.delete(name, &DeleteParams::background()).await;
    Ended { succeeded, logs }
}
