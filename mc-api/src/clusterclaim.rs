//! ClusterClaim: top-level fields, no spec. Well-known names `id.k8s.io` and `clusterset.k8s.io`.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub mod v1alpha1 {
    use super::*;

    #[derive(
        CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema,
    )]
    #[kube(
        group = "multicluster.crd.antrea.io",
        version = "v1alpha1",
        kind = "ClusterClaim",
        plural = "clusterclaims",
        namespaced,
        no_spec,
        storage = false,
        printcolumn(name = "Value", type_ = "string", json_path = ".value"),
        printcolumn(
            name = "Age",
            type_ = "date",
            json_path = ".metadata.creationTimestamp"
        )
    )]
    pub struct ClusterClaimFields {
        /// Duplicate of metadata.name in v1alpha1.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub name: Option<String>,
        pub value: String,
    }
}

pub mod v1alpha2 {
    use super::*;

    #[derive(
        CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema,
    )]
    #[kube(
        group = "multicluster.crd.antrea.io",
        version = "v1alpha2",
        kind = "ClusterClaim",
        plural = "clusterclaims",
        namespaced,
        no_spec,
        storage = true,
        printcolumn(name = "Value", type_ = "string", json_path = ".value"),
        printcolumn(
            name = "Age",
            type_ = "date",
            json_path = ".metadata.creationTimestamp"
        )
    )]
    pub struct ClusterClaimFields {
        pub value: String,
        /// v1alpha1's duplicate of metadata.name, kept for lossless reads across versions.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub name: Option<String>,
    }
}
