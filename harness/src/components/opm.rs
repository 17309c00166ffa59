//! `opm serve`: serves a file-based catalog over gRPC on the node IP, so a
//! CatalogSource with `spec.address` uses it without a registry pod.

use std::path::PathBuf;

use super::{ClusterContext, ProbeError};
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

    pub fn spec(&self) -> ProcessSpec {
        self.cluster
            .spec(&self.component(), self.cluster.tool("opm"))
            .arg("serve")
            .arg(&self.catalog_dir)
            .args(["-p".to_owned(), self.port.to_string()])
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
