//! The gate-off variant of the bundles: the feature request's operator, for
//! measuring the race the gate closes (`just race GATE=off`, `just demo
//! GATE=off`). The same bundles and catalogs, except that no init container
//! closes the gate, the operator becomes ready as soon as it serves its
//! probes (as controller-runtime serves healthz, leader or not), and it
//! keeps its leader Lease when it stops (controller-runtime's default), so
//! its successor waits the Lease out before its first reconcile — where it
//! sets `Upgradeable=False`, as operator-lib users do. Rendered at test time
//! below `target/`, never committed (`release` refuses it without `--out`).
//!
//! Owns: what differs between the variants. Must not touch: files, or
//! anything of the gate-on rendering.

use clap::ValueEnum;

use crate::csv::ClusterServiceVersion;
use crate::install::{GATE_CONTAINER, OPERATOR_CONTAINER};

/// Which bundles to render.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Variant {
    /// The published bundles: the gate's init container holds the upgrade.
    #[default]
    GateOn,
    /// No init container; readiness before leadership; the Lease kept on
    /// stop (the feature request's operator).
    GateOff,
}

/// The operator's arguments added in the gate-off variant (its `run`
/// subcommand's flags).
pub const GATE_OFF_OPERATOR_ARGS: [&str; 2] = [
    "--ready-when=started",
    "--leader-elect-release-on-stop=false",
];

/// Makes a rendered CSV the `variant` one.
pub fn apply(csv: &mut ClusterServiceVersion, variant: Variant) {
    if variant == Variant::GateOn {
        return;
    }
    for deployment in &mut csv.spec.install.spec.deployments {
        let Some(pod) = deployment.spec.template.spec.as_mut() else {
            continue;
        };
        if let Some(init) = pod.init_containers.as_mut() {
            init.retain(|container| container.name != GATE_CONTAINER);
        }
        if pod.init_containers.as_ref().is_some_and(Vec::is_empty) {
            pod.init_containers = None;
        }
        for container in pod
            .containers
            .iter_mut()
            .filter(|container| container.name == OPERATOR_CONTAINER)
        {
            container
                .args
                .get_or_insert_with(Vec::new)
                .extend(GATE_OFF_OPERATOR_ARGS.iter().map(|arg| (*arg).to_owned()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::releases;
    use crate::sources::Sources;

    fn csv() -> ClusterServiceVersion {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let sources = Sources::read(&root).unwrap_or_else(|error| panic!("{error}"));
        crate::csv::release_csv(&sources, releases::find("7.10.0").unwrap(), "i:1").unwrap()
    }

    fn pod(csv: &ClusterServiceVersion) -> k8s_openapi::api::core::v1::PodSpec {
        csv.spec.install.spec.deployments[0]
            .spec
            .template
            .spec
            .clone()
            .unwrap()
    }

    #[test]
    fn gate_on_is_the_published_csv() {
        let published = csv();
        let mut rendered = csv();
        apply(&mut rendered, Variant::GateOn);
        assert_eq!(
            serde_json::to_value(&rendered).unwrap(),
            serde_json::to_value(&published).unwrap()
        );
    }

    #[test]
    fn gate_off_drops_the_init_container_and_keeps_the_lease() {
        let mut rendered = csv();
        let before = pod(&rendered).containers[0].args.clone().unwrap();
        apply(&mut rendered, Variant::GateOff);
        let pod = pod(&rendered);
        assert_eq!(pod.init_containers, None);
        let operator = pod
            .containers
            .iter()
            .find(|c| c.name == OPERATOR_CONTAINER)
            .unwrap();
        let args = operator.args.clone().unwrap();
        assert_eq!(args[..before.len()], before[..]);
        assert_eq!(
            args[before.len()..],
            GATE_OFF_OPERATOR_ARGS.map(str::to_owned)
        );
        // Everything else stays: the same CSV name, RBAC and image.
        let published = csv();
        assert_eq!(rendered.metadata.name, published.metadata.name);
        assert_eq!(
            serde_json::to_value(&rendered.spec.install.spec.permissions).unwrap(),
            serde_json::to_value(&published.spec.install.spec.permissions).unwrap()
        );
    }
}
