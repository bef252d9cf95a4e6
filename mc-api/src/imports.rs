//! ResourceImport: the leader's merged view of exports, which every member imports.
//! Note the JSON names: `clusterinfo`, `clusternetworkpolicy`, `externalentity` are lowercase and
//! `clusterID` is a list — Antrea's wire format, reproduced exactly.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    antrea::ClusterNetworkPolicySpec,
    clusterinfo::ClusterInfo,
    conditions::Condition,
    exports::{EndpointsExport, RawResource},
    mcs::ServiceImportSpec,
    parsed::{OrWhy, Parsed},
};

/// The ServiceImport a Service's ResourceImport carries: in Antrea's format a whole
/// `multicluster.x-k8s.io/v1alpha1` ServiceImport; of it the leader writes, and a member reads,
/// the name and namespace, the exported labels and annotations (MCS API), and the spec (its
/// ports, type and the exported Service's traits; no IP, which each member's import gets). Other
/// fields an Antrea leader writes (`status`, `apiVersion`, `kind`) are not read.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ImportedService {
    #[serde(default)]
    pub metadata: ImportedServiceMeta,
    pub spec: ServiceImportSpec,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportedServiceMeta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The labels the exporting ServiceExport marked for export (MCS API).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LabelIdentityImport {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u32>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ExternalEntityImport {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::open_object")]
    pub externalentityspec: Option<serde_json::Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceImportClusterStatus {
    #[serde(rename = "clusterID", default, skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceImportStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_statuses: Vec<ResourceImportClusterStatus>,
}

/// `spec.kind` values.
pub mod kinds {
    pub const SERVICE_IMPORT: &str = "ServiceImport";
    pub const ENDPOINTS: &str = "Endpoints";
    pub const CLUSTER_INFO: &str = "ClusterInfo";
    pub const LABEL_IDENTITY: &str = "LabelIdentity";
    pub const ACNP: &str = "AntreaClusterNetworkPolicy";
}

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "multicluster.crd.antrea.io",
    version = "v1alpha1",
    kind = "ResourceImport",
    plural = "resourceimports",
    namespaced,
    status = "ResourceImportStatus",
    printcolumn(name = "Kind", type_ = "string", json_path = ".spec.kind"),
    printcolumn(name = "Namespace", type_ = "string", json_path = ".spec.namespace"),
    printcolumn(name = "Name", type_ = "string", json_path = ".spec.name"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ResourceImportSpec {
    /// Meant as "import only to these clusters"; never set or honoured (as in Antrea).
    #[serde(rename = "clusterID", default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_ids: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// A whole `multicluster.x-k8s.io/v1alpha1` ServiceImport (its name, namespace, labels,
    /// annotations and spec are used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::open_object")]
    pub service_import: Option<OrWhy<ImportedService>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoints: Option<EndpointsExport>,
    #[serde(
        rename = "clusterinfo",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cluster_info: Option<ClusterInfo>,
    #[serde(
        rename = "externalentity",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub external_entity: Option<ExternalEntityImport>,
    #[serde(
        rename = "clusternetworkpolicy",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(schema_with = "crate::schema::open_object")]
    pub cluster_network_policy: Option<Parsed<ClusterNetworkPolicySpec>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_identity: Option<LabelIdentityImport>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<RawResource>,
}
