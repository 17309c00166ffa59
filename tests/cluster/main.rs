//! Everything proven on a real cluster: the shared test cluster of a
//! `just test-cluster` run (the environment says how to reach it; a test
//! panics without it). Each test has namespaces of its own, so libtest runs
//! them concurrently on the one cluster.

mod admission;
mod admission_holes;
mod admission_writers;
mod adopt;
mod adopt_ansible;
mod adopt_ci;
mod adopt_helm;
mod adopt_helm_admission;
mod adopt_kubebuilder;
mod adopt_widget_steps;
mod apiserver_restart;
mod database_restart;
mod faults;
mod flux_chain;
mod gate;
mod install_plan;
mod keep;
mod manifests;
mod olm_install;
mod olm_v0_steps;
mod olm_v1;
mod olm_v1_chain;
mod operate;
mod operator;
mod operator_gate;
mod serial;
mod smoke;
mod teardown;
