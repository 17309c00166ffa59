//! `opm serve`: serves a file-based catalog over gRPC on the node IP, so a
//! CatalogSource with `spec.address` uses it without a registry pod.

use std::path::PathBuf;

use super::context::{ClusterContext, ProbeError};
use crate::process::ProcessSpec;

pub struct OpmServe<'a> {
    pub cluster: &'a ClusterContext,
    /// A directory of file-based catalog files.
    pub catalog_dir: PathBuf,
    pub port: u16,
}

impl OpmServe<'_> {
    pub fn component(&self) -> String {
        format!("opm-serve-{}", self.port)
    }

    /// The `spec.address` of a CatalogSource that uses this server.
    pub fn address(&self) -> String {
        format!("{}:{}", self.cluster.layout.node_ip(), self.port)
    }

    /// Its cache and termination log, under the cluster's state dir.
    pub fn work_dir(&self) -> PathBuf {
        self.cluster.layout.path(&self.component())
    }

    /// By default opm writes `/dev/termination-log` on the host, serves pprof
    /// on localhost:6060 (a second server in the netns would collide) and
    /// keeps its cache in /tmp: all three are moved or turned off.
    pub fn spec(&self) -> ProcessSpec {
        let work = self.work_dir();
        self.cluster
            .spec(&self.component(), self.cluster.tool("opm"))
            .arg("serve")
            .arg(&self.catalog_dir)
            .args([
                format!("--port={}", self.port),
                "--pprof-addr=".to_owned(),
                format!("--cache-dir={}", work.join("cache").display()),
                "--cache-enforce-integrity=false".to_owned(),
                format!(
                    "--termination-log={}",
                    work.join("termination-log").display()
                ),
            ])
    }

    /// Ready when its gRPC port accepts connections: opm listens only after
    /// it has loaded the catalog.
    pub async fn ready(&self) -> Result<(), ProbeError> {
        tokio::net::TcpStream::connect(self.address())
            .await
            .map(drop)
            .map_err(|error| ProbeError::NotYet(format!("{}: {error}", self.address())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Layout;

    #[test]
    fn opm_writes_nothing_outside_the_cluster_state_dir() {
        let layout = Layout::new("dev".parse().expect("name"), 2);
        let cluster = ClusterContext::new(layout, "/tools".into());
        let opm = OpmServe {
            cluster: &cluster,
            catalog_dir: "/catalogs/demo".into(),
            port: 50052,
        };
        let args: Vec<String> = opm
            .spec()
            .args
            .iter()
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect();
        assert!(args.contains(&"--pprof-addr=".to_owned()));
        assert!(
            args.contains(&"--cache-dir=/run/upgrade-gate/dev/opm-serve-50052/cache".to_owned())
        );
        assert!(args.contains(
            &"--termination-log=/run/upgrade-gate/dev/opm-serve-50052/termination-log".to_owned()
        ));
        assert_eq!(opm.address(), "10.231.2.2:50052");
    }
}
