//! The Multi-cluster Services API (`multicluster.x-k8s.io`): ServiceExport and ServiceImport, in
//! the shape of the copies Antrea ships (`v1alpha1`, what the guides write) with the fields of
//! upstream's `v1beta1`. The CRDs serve both versions with one schema (conversion None: upstream's
//! two versions are identical), so `v1alpha1` is all the Rust code uses.

use std::collections::BTreeMap;

/// The labels of MCS EndpointSlices (KEP-1645).
pub mod labels {
    /// The ServiceImport the slice belongs to.
    pub const SERVICE_NAME: &str = "multicluster.kubernetes.io/service-name";
    /// The cluster ID of the cluster the endpoints are in.
    pub const SOURCE_CLUSTER: &str = "multicluster.kubernetes.io/source-cluster";
    /// Who manages a slice (the stock controller's value is `endpointslice-controller.k8s.io`).
    pub const SLICE_MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
    pub const SLICE_MANAGER: &str = "strait-mc-controller.strait.io";
    /// The Service an EndpointSlice belongs to, for kube-proxy (and the Service's own slices).
    pub const KUBE_SERVICE_NAME: &str = "kubernetes.io/service-name";
    /// On an Endpoints object: Kubernetes' EndpointSlice mirroring leaves it alone.
    pub const SKIP_MIRROR: &str = "endpointslice.kubernetes.io/skip-mirror";
}

use k8s_openapi::{
    api::core::v1::SessionAffinityConfig,
    apimachinery::pkg::apis::meta::v1::Condition as MetaCondition,
};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ServiceExportStatus {
    /// `Valid` (as Antrea), plus the standard `Ready` and `Conflict`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<MetaCondition>,
}

/// What a ServiceExport may say besides its name (MCS API): labels and annotations for the
/// ServiceImport. Antrea's ServiceExports have no spec; both shapes are valid.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceExportSpec {
    /// Labels the ServiceImport carries in every cluster (of the oldest export, on a conflict).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub exported_labels: BTreeMap<String, String>,
    /// Annotations the ServiceImport carries, as `exportedLabels`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub exported_annotations: BTreeMap<String, String>,
}

/// A ServiceExport's name and namespace are the Service's; `spec` is optional.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "multicluster.x-k8s.io",
    version = "v1alpha1",
    kind = "ServiceExport",
    plural = "serviceexports",
    shortname = "svcex",
    namespaced,
    no_spec,
    status = "ServiceExportStatus",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct ServiceExportFields {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<ServiceExportSpec>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServicePort {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_protocol: Option<String>,
    pub port: i32,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ServiceImportType {
    #[default]
    ClusterSetIP,
    Headless,
}

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "multicluster.x-k8s.io",
    version = "v1alpha1",
    kind = "ServiceImport",
    plural = "serviceimports",
    shortname = "svcim",
    namespaced,
    status = "ServiceImportStatus",
    printcolumn(name = "Type", type_ = "string", json_path = ".spec.type"),
    printcolumn(name = "IP", type_ = "string", json_path = ".spec.ips"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ServiceImportSpec {
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub ports: Vec<ServicePort>,
    /// At most two (one per IP family); Strait sets the ClusterIP of `antrea-mc-<name>`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 2))]
    pub ips: Vec<String>,
    #[serde(rename = "type")]
    pub type_: ServiceImportType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::open_object")]
    pub session_affinity_config: Option<SessionAffinityConfig>,
    /// The family of each entry of `ips`, in the same order (Strait: `IPv4`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 2))]
    pub ip_families: Vec<String>,
    /// The exported Service's, copied (the MCS API carries them for consumers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_traffic_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_distribution: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ClusterStatus {
    pub cluster: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ServiceImportStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["cluster"]))]
    pub clusters: Vec<ClusterStatus>,
}
