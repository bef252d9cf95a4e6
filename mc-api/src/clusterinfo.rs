//! ClusterInfo (a member's network facts) and ClusterInfoImport (a remote member's, in a member).

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::conditions::Condition;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GatewayInfo {
    #[serde(rename = "gatewayIP", default, skip_serializing_if = "Option::is_none")]
    pub gateway_ip: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WireGuardInfo {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_key: Option<String>,
}

/// The same struct is `ResourceExport.spec.clusterInfo`, `ResourceImport.spec.clusterinfo` and
/// `ClusterInfoImport.spec`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterInfo {
    #[serde(rename = "clusterID", default, skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
    #[serde(
        rename = "serviceCIDR",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub service_cidr: Option<String>,
    /// At most 16 (a member has one active gateway; the API server refuses more).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub gateway_infos: Vec<GatewayInfo>,
    /// At most 1024 (the API server refuses more; members announce their Pod CIDRs summarized).
    #[serde(rename = "podCIDRs", default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1024))]
    pub pod_cidrs: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire_guard: Option<WireGuardInfo>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ClusterInfoImportStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

#[derive(
    CustomResource, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema,
)]
#[kube(
    group = "multicluster.crd.antrea.io",
    version = "v1alpha1",
    kind = "ClusterInfoImport",
    plural = "clusterinfoimports",
    namespaced,
    status = "ClusterInfoImportStatus",
    printcolumn(name = "Cluster ID", type_ = "string", json_path = ".spec.clusterID"),
    printcolumn(
        name = "Service CIDR",
        type_ = "string",
        json_path = ".spec.serviceCIDR"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(transparent)]
pub struct ClusterInfoImportSpec(pub ClusterInfo);
