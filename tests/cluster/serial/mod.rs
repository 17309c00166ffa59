//! Faults that reach past one test's namespace: the node's kubelet or
//! container runtime restarted, OLM's `olm` operator stopped for a while,
//! the cluster's API server restarted. Each would cut into the other
//! tests on the shared cluster (their pods' status, their `ctr events`,
//! every request and watch), so `just test-cluster` runs these after the
//! concurrent tests, on the same cluster, one at a time (`serial::`,
//! `--test-threads 1`). Local provider only: they restart the harness's
//! processes.

mod apiserver_olm;
mod node_restart;
