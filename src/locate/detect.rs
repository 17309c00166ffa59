//! Which OLM the cluster runs, from discovery: v0 (it serves
//! `operators.coreos.com/v2` `operatorconditions`), v1 (it serves
//! `olm.operatorframework.io/v1` `clusterextensions` and not v0's API), or
//! none.
//!
//! Owns: the discovery requests. Must not touch: any object. Discovery is
//! open to every authenticated identity, so it is the one reliable way to
//! tell "no OLM" from "not allowed": a 403 on an object is neither.

use serde::Serialize;
use tokio::time::Instant;

use crate::operator_condition::{self, Obstacle, operator_conditions_served};

/// OLM v1's API group and version.
pub const CLUSTER_EXTENSIONS_GROUP_VERSION: &str = "olm.operatorframework.io/v1";
/// OLM v1's resource for an installed operator.
pub const CLUSTER_EXTENSIONS: &str = "clusterextensions";

/// The OLM the cluster runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Olm {
    /// OLM v0: OperatorConditions are served (OLM v1 may run beside it).
    V0,
    /// OLM v1 only: ClusterExtensions are served, OperatorConditions are not.
    V1,
    /// Neither API is served.
    None,
}

/// Asks discovery for v0's API, then (only when it is not served) for v1's.
/// Transient failures are retried until `deadline`; an unreachable API
/// server is an error, never "no OLM".
pub async fn detect_olm(
    client: &kube::Client,
    deadline: Instant,
) -> Result<Olm, operator_condition::Error> {
    if operator_conditions_served(client, deadline).await? {
        return Ok(Olm::V0);
    }
    Ok(if cluster_extensions_served(client, deadline).await? {
        Olm::V1
    } else {
        Olm::None
    })
}

/// Whether discovery lists OLM v1's ClusterExtensions (whatever else runs).
pub async fn cluster_extensions_served(
    client: &kube::Client,
    deadline: Instant,
) -> Result<bool, operator_condition::Error> {
    let lookup = || async {
        match client
            .list_api_group_resources(CLUSTER_EXTENSIONS_GROUP_VERSION)
            .await
        {
            Ok(list) => Ok(list.resources.iter().any(|r| r.name == CLUSTER_EXTENSIONS)),
            Err(error) => match Obstacle::of(&error) {
                Obstacle::NotFound(_) => Ok(false),
                obstacle => Err(obstacle),
            },
        }
    };
    operator_condition::with_retries(
        deadline,
        "asking discovery whether ClusterExtensions are served",
        lookup,
    )
    .await
}
