//! Gateway: the elected gateway Node of a member (name = Node name), top-level fields as in
//! Antrea, plus a status Strait adds: the gateway Node's agent reports there whether its
//! dataplane carries traffic (`DataplaneReady`).

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::clusterinfo::WireGuardInfo;
use crate::conditions::Condition;

/// The condition the gateway Node's agent writes: `True` when its programs are attached and
/// current, `False` with the reason (the agent's not-ready reason) when they are not.
pub const DATAPLANE_READY: &str = "DataplaneReady";
/// The gateway's agent, when traffic between gateways is (or should be) encrypted: whether it
/// goes through WireGuard to every remote cluster, or which members disagree on the mode.
pub const TRAFFIC_ENCRYPTED: &str = "TrafficEncrypted";

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
    status = "GatewayStatus",
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

/// Written by the gateway Node's agent (the `status` subresource; the controller writes the
/// top-level fields). No column for it: `kubectl get gateway` prints what the guides show.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct GatewayStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

impl Gateway {
    /// The gateway's `DataplaneReady` condition, if its agent wrote one.
    pub fn dataplane_ready(&self) -> Option<&Condition> {
        self.condition(DATAPLANE_READY)
    }

    /// The condition of that type its agent wrote, if any.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_.as_deref() == Some(type_))
    }
}
