//! MemberClusterAnnounce: a member's heartbeat in the leader's namespace.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "multicluster.crd.antrea.io",
    version = "v1alpha1",
    kind = "MemberClusterAnnounce",
    plural = "memberclusterannounces",
    namespaced,
    no_spec,
    printcolumn(name = "Cluster ID", type_ = "string", json_path = ".clusterID"),
    printcolumn(name = "ClusterSet ID", type_ = "string", json_path = ".clusterSetID"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct MemberClusterAnnounceFields {
    #[serde(rename = "clusterID", default, skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
    #[serde(
        rename = "clusterSetID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cluster_set_id: Option<String>,
    #[serde(
        rename = "leaderClusterID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub leader_cluster_id: Option<String>,
}
