//! LabelIdentity (cluster-scoped): a normalized label and its 24-bit ClusterSet-wide ID.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(
    CustomResource, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema,
)]
#[kube(
    group = "multicluster.crd.antrea.io",
    version = "v1alpha1",
    kind = "LabelIdentity",
    plural = "labelidentities",
    printcolumn(name = "Label", type_ = "string", json_path = ".spec.label"),
    printcolumn(name = "ID", type_ = "string", json_path = ".spec.id"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct LabelIdentitySpec {
    /// `ns:<namespace labels>&pod:<pod labels>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u32>,
}
