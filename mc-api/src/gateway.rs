//! Gateway: the elected gateway Node of a member (name = Node name), top-level fields.

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::clusterinfo::WireGuardInfo;

#[derive(
    CustomResource, KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize,
)]
#[kube(
    group = "multicluster.crd.antrea.io",
    version = "v1alpha1",
    kind = "Gateway",
    plural = "gateways",
    namespaced,
    no_spec,
    printcolumn(name = "Gateway IP", type_ = "string", json_path = ".gatewayIP"),
    printcolumn(name = "Internal IP", type_ = "string", json_path = ".internalIP"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct GatewayFields {
    /// Address remote gateways tunnel to.
    #[serde(rename = "gatewayIP", default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    #[x_kube(validation = Rule::new("isIP(self)").message("gatewayIP must be an IPv4 or IPv6 address"))]
    pub gateway_ip: Option<String>,
    /// Address the cluster's own Nodes tunnel to.
    #[serde(
        rename = "internalIP",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 64))]
    #[x_kube(validation = Rule::new("isIP(self)").message("internalIP must be an IPv4 or IPv6 address"))]
    pub internal_ip: Option<String>,
    #[serde(
        rename = "serviceCIDR",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub service_cidr: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire_guard: Option<WireGuardInfo>,
}
