//! ClusterSet: v1alpha1 (served; the oldest guides' form) and v1alpha2 (served, storage).
//!
//! Like Antrea, the versions convert with strategy None (only `apiVersion` changes), so each
//! version's schema also carries the other's fields (`members` in v1alpha2, `clusterID` in
//! v1alpha1): an object written in one version reads back whole in the other.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::conditions::Condition;

/// Status, shared by both versions. Written by the controllers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSetStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_clusters: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_clusters: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_statuses: Vec<ClusterStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

impl ClusterSetStatus {
    /// The same status but for timestamps: no write is needed.
    pub fn same(&self, other: &ClusterSetStatus) -> bool {
        fn strip(c: &[Condition]) -> Vec<Condition> {
            c.iter()
                .map(|c| Condition {
                    last_transition_time: None,
                    ..c.clone()
                })
                .collect()
        }
        let (a, b) = (self, other);
        a.total_clusters == b.total_clusters
            && a.ready_clusters == b.ready_clusters
            && a.observed_generation == b.observed_generation
            && strip(&a.conditions) == strip(&b.conditions)
            && a.cluster_statuses.len() == b.cluster_statuses.len()
            && a.cluster_statuses
                .iter()
                .zip(&b.cluster_statuses)
                .all(|(x, y)| {
                    x.cluster_id == y.cluster_id && strip(&x.conditions) == strip(&y.conditions)
                })
    }
}

/// The ClusterSet a namespace's controller uses when a user made several: the oldest (the name
/// breaks ties). The leader, the member and the webhooks all follow this order.
pub fn oldest_first<S: std::borrow::Borrow<v1alpha2::ClusterSet>>(sets: &mut [S]) {
    sets.sort_by_key(|s| {
        let s = s.borrow();
        (
            s.metadata.creation_timestamp.as_ref().map(|t| t.0),
            s.metadata.name.clone(),
        )
    });
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    #[serde(rename = "clusterID", default, skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A cluster in a v1alpha1 ClusterSet (leader or member).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberCluster {
    #[serde(rename = "clusterID", default, skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
    /// API server URL of the leader, as members reach it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// Name of the Secret (in the ClusterSet's namespace) holding `ca.crt` and `token`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// The member's ServiceAccount in the leader (leader side, informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<String>,
}

pub mod v1alpha1 {
    use super::*;

    #[derive(
        CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema,
    )]
    #[kube(
        group = "multicluster.crd.antrea.io",
        version = "v1alpha1",
        kind = "ClusterSet",
        plural = "clustersets",
        namespaced,
        status = "ClusterSetStatus",
        storage = false,
        printcolumn(
            name = "Leader Cluster Namespace",
            type_ = "string",
            json_path = ".spec.namespace"
        ),
        printcolumn(
            name = "Total Clusters",
            type_ = "string",
            json_path = ".status.totalClusters"
        ),
        printcolumn(
            name = "Ready Clusters",
            type_ = "string",
            json_path = ".status.readyClusters"
        ),
        printcolumn(
            name = "Age",
            type_ = "date",
            json_path = ".metadata.creationTimestamp"
        )
    )]
    #[serde(rename_all = "camelCase")]
    pub struct ClusterSetSpec {
        /// Exactly one leader.
        #[schemars(length(min = 1, max = 1))]
        pub leaders: Vec<MemberCluster>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub members: Vec<MemberCluster>,
        /// The leader's Common Area namespace.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub namespace: Option<String>,
        /// v1alpha2's field, kept so an object read through either version loses nothing.
        #[serde(rename = "clusterID", default, skip_serializing_if = "Option::is_none")]
        pub cluster_id: Option<String>,
    }
}

pub mod v1alpha2 {
    use super::*;

    /// A leader in a v1alpha2 ClusterSet.
    #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
    #[serde(rename_all = "camelCase")]
    pub struct LeaderClusterInfo {
        #[serde(rename = "clusterID", default, skip_serializing_if = "Option::is_none")]
        pub cluster_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub server: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub secret: Option<String>,
        /// v1alpha1's field, kept for lossless reads across versions.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub service_account: Option<String>,
    }

    #[derive(
        CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema,
    )]
    #[kube(
        group = "multicluster.crd.antrea.io",
        version = "v1alpha2",
        kind = "ClusterSet",
        plural = "clustersets",
        namespaced,
        status = "ClusterSetStatus",
        storage = true,
        printcolumn(
            name = "Leader Cluster Namespace",
            type_ = "string",
            json_path = ".spec.namespace"
        ),
        printcolumn(
            name = "Total Clusters",
            type_ = "string",
            json_path = ".status.totalClusters"
        ),
        printcolumn(
            name = "Ready Clusters",
            type_ = "string",
            json_path = ".status.readyClusters"
        ),
        printcolumn(
            name = "Age",
            type_ = "date",
            json_path = ".metadata.creationTimestamp"
        )
    )]
    #[serde(rename_all = "camelCase")]
    pub struct ClusterSetSpec {
        /// This cluster's ID. When empty, it is read from the ClusterClaim `id.k8s.io`.
        #[serde(rename = "clusterID", default, skip_serializing_if = "Option::is_none")]
        pub cluster_id: Option<String>,
        /// Exactly one leader.
        #[schemars(length(min = 1, max = 1))]
        pub leaders: Vec<LeaderClusterInfo>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub namespace: Option<String>,
        /// v1alpha1's member list, kept for lossless reads across versions (unused).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub members: Vec<super::MemberCluster>,
    }
}
