//! The support library of the integration tests: everything the PostgreSQL,
//! process and cluster tests share, one of each.
//!
//! The tests run the workspace's real binaries (`cargo build --workspace
//! --bins` first; `just test` does) against real components: a throwaway
//! PostgreSQL (`harness::postgres`), the local cluster with OLM
//! (`harness::testing`). A test that needs a component that is missing
//! panics and says how to get it; none skips.
//!
//! | module | what |
//! | --- | --- |
//! | [`wait`] | waiting for an observable condition with a deadline |
//! | [`process_output`] | assertions on a finished process's output |
//! | [`gate_process`] | the `upgrade-gate` binary run on the host |
//! | [`cluster_database`] | a test's database on the cluster's PostgreSQL |
//! | [`schema_release`] | which release's schema a database is exactly at (7.9.3 or 7.10.0, or between) |
//! | [`backup_volume`] | the backup claim an upgrade Job mounts |
//! | [`operator_install`] | `app-operator` installed from `manifests/` |
//! | [`helm`] | the operator's chart installed and upgraded by the `helm` CLI |
//! | [`ansible_stand_in`] | a stand-in for an Ansible-based operator: ansible-operator's status around each reconcile, a playbook of its own |
//! | [`admission_policy`] | the shipped admission policy bound to some namespaces |
//! | [`policy_in_force`] | the policy's own refusal by its words; a namespace's binding proved in force by a refused dry-run |
//! | [`kubectl`] | the tools' `kubectl` run as a person or a pipeline runs it |
//! | [`gate_probe_catalog`] | the test operator `gate-probe` and its catalog |
//! | [`object_history`] | every version of watched objects, timestamped |
//! | [`container_task_events`] | containerd's task start/exit times |
//! | [`jobs_at_once`] | how many Jobs of a namespace ran at once, from a watch |
//! | [`apiserver_without_olm`] | a second API server that does not serve OLM |
//! | [`olm_v0`] | OLM v0's objects in a test's namespace: a CatalogSource of a served catalog, an OperatorGroup, a Subscription |
//! | [`install_plan`] | OLM v0's InstallPlans while a test installs: one failed only by OLM's lost race to update a shared CRD run again, any other failure left |
//! | [`olm_v1`] | OLM v1 on the shared cluster: our releases in its registry, ClusterCatalogs, ClusterExtensions, installer rights |
//! | [`chain`] | the upgrade chain through OLM, recorded and judged (`chain` binary, `just race`, `just demo`) |

pub mod admission_policy;
pub mod admission_record;
pub mod ansible_stand_in;
pub mod apiserver_without_olm;
pub mod backup_volume;
pub mod bundle_catalog;
mod catalog_ports;
pub mod chain;
pub mod cluster_database;
pub mod container_task_events;
pub mod gate_probe_catalog;
pub mod gate_process;
pub mod helm;
pub mod install_plan;
pub mod jobs_at_once;
pub mod kubectl;
pub mod object_history;
pub mod olm_v0;
pub mod olm_v1;
pub mod one_shot_pod;
pub mod operator_install;
pub mod policy_in_force;
pub mod process_output;
pub mod schema_release;
pub mod wait;

use std::path::PathBuf;

/// The repository's root directory (without `tests/..` in it, for the
/// paths tools print).
pub fn repository_root() -> PathBuf {
    let root = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    root.canonicalize().unwrap_or(root)
}

/// The path of one of the workspace's binaries in the caller's own target
/// directory (`target/<profile>/<name>`). Panics, saying how to build it,
/// when it is missing.
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the running binary knows its path");
    // A test binary is target/<profile>/deps/<name>-<hash>; a bin of this
    // crate (`chain`) is target/<profile>/<name>.
    let dir = exe
        .parent()
        .expect("the running binary lives in a directory");
    let profile_dir = if dir.ends_with("deps") {
        dir.parent().expect("target/<profile>/deps has a parent")
    } else {
        dir
    };
    let path = profile_dir.join(name);
    assert!(
        path.is_file(),
        "{} does not exist: build the binaries first (`cargo build --workspace --bins`; `just test` does)",
        path.display()
    );
    path
}
