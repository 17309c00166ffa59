//! The names OLM v1's objects and certificates go by on the local cluster:
//! its namespace, Services and the harness PKI's files behind their
//! certificates, with the DNS names each certificate lists.
//!
//! Owns: these names (the PKI reads them to issue the certificates; the
//! component, `components::olm_v1`, re-exports them). Must not touch: anything that
//! starts or reads the cluster.

/// The namespace the manifest installs OLM v1 into.
pub const NAMESPACE: &str = "olmv1-system";
pub const CATALOGD_SERVICE: &str = "catalogd-service";
pub const OPERATOR_CONTROLLER_SERVICE: &str = "operator-controller-service";
/// The harness PKI's files (`<name>.crt`, `<name>.key`) behind them.
pub const CATALOGD_CERT: &str = "olm-v1-catalogd";
pub const OPERATOR_CONTROLLER_CERT: &str = "olm-v1-operator-controller";
pub const REGISTRY_CERT: &str = "olm-v1-registry";

/// The DNS names of a Service of OLM v1, as its certificate lists them.
pub fn service_dns_names(service: &str) -> Vec<String> {
    vec![
        format!("{service}.{NAMESPACE}.svc"),
        format!("{service}.{NAMESPACE}.svc.cluster.local"),
    ]
}
