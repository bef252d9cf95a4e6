//! ResourceExport: what a member (or an admin, for ACNPs) exports into the leader's namespace.

use k8s_openapi::api::core::v1::{EndpointSubset, ServiceSpec};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{clusterinfo::ClusterInfo, conditions::Condition};

/// `spec.kind` values.
pub mod kinds {
    pub const SERVICE: &str = "Service";
    pub const ENDPOINTS: &str = "Endpoints";
    pub const CLUSTER_INFO: &str = "ClusterInfo";
    pub const LABEL_IDENTITY: &str = "LabelIdentity";
    pub const ACNP: &str = "AntreaClusterNetworkPolicy";
}

/// What a ResourceExport exports (`spec.kind`), typed. A kind this version does not know is kept
/// as it was written, so it can be reported (and never read as another kind).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Service,
    Endpoints,
    ClusterInfo,
    LabelIdentity,
    Acnp,
    Unknown(String),
}

impl Kind {
    pub fn parse(kind: &str) -> Kind {
        match kind {
            kinds::SERVICE => Kind::Service,
            kinds::ENDPOINTS => Kind::Endpoints,
            kinds::CLUSTER_INFO => Kind::ClusterInfo,
            kinds::LABEL_IDENTITY => Kind::LabelIdentity,
            kinds::ACNP => Kind::Acnp,
            other => Kind::Unknown(other.to_owned()),
        }
    }

    /// The `spec.kind` string.
    pub fn as_str(&self) -> &str {
        match self {
            Kind::Service => kinds::SERVICE,
            Kind::Endpoints => kinds::ENDPOINTS,
            Kind::ClusterInfo => kinds::CLUSTER_INFO,
            Kind::LabelIdentity => kinds::LABEL_IDENTITY,
            Kind::Acnp => kinds::ACNP,
            Kind::Unknown(other) => other,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceExport {
    // Boxed: a `ServiceSpec` is 416 bytes, and the controllers hold thousands of
    // ResourceExports, most of them of other kinds.
    /// Only `ports` is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::open_object")]
    pub service_spec: Option<Box<ServiceSpec>>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EndpointsExport {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::schema::open_object_array")]
    pub subsets: Vec<EndpointSubset>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LabelIdentityExport {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub normalized_label: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RawResource {
    /// Base64 bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExternalEntityExport {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::open_object")]
    pub external_entity_spec: Option<serde_json::Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ResourceExportStatus {
    /// One condition: `Succeeded`/True, or `Failure`/False with reason `ConvergeFailure`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// The leader's verdict on a ResourceExport: the contract between leader and member. The leader
/// writes it as the export's one status condition ([`Verdict::condition`]); the member reads it
/// back with [`Verdict::of`]. Nothing else matches these conditions' strings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Succeeded,
    Failure(String),
}

impl Verdict {
    /// `(type, status, reason, message)` of the condition (Antrea's: `Succeeded`/True, or
    /// `Failure`/False with reason `ConvergeFailure`).
    pub fn condition(&self) -> (&'static str, &'static str, &'static str, &str) {
        match self {
            Verdict::Succeeded => ("Succeeded", "True", "", ""),
            Verdict::Failure(message) => ("Failure", "False", "ConvergeFailure", message),
        }
    }

    /// The verdict an export's status carries; `None` while the leader has given none.
    pub fn of(status: Option<&ResourceExportStatus>) -> Option<Verdict> {
        let c = status?.conditions.first()?;
        match (c.type_.as_deref(), c.status.as_deref()) {
            (Some("Failure"), _) => Some(Verdict::Failure(c.message.clone().unwrap_or_default())),
            (_, Some("True")) => Some(Verdict::Succeeded),
            _ => None,
        }
    }
}

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "multicluster.crd.antrea.io",
    version = "v1alpha1",
    kind = "ResourceExport",
    plural = "resourceexports",
    namespaced,
    status = "ResourceExportStatus",
    printcolumn(name = "Cluster ID", type_ = "string", json_path = ".spec.clusterID"),
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
pub struct ResourceExportSpec {
    /// The exporting member; empty for ACNPs an admin exports.
    #[serde(rename = "clusterID", default, skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// One of [`kinds`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceExport>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoints: Option<EndpointsExport>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_info: Option<ClusterInfo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_entity: Option<ExternalEntityExport>,
    /// A `crd.antrea.io/v1beta1` ClusterNetworkPolicy spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::open_object")]
    pub cluster_network_policy: Option<serde_json::Value>,
    /// The lowercase spelling used by the Markdown guide's ACNP example (Antrea's own type only
    /// knows `clusterNetworkPolicy`); accepted so that YAML applies unchanged, and read as the
    /// same thing (see [`ResourceExportSpec::acnp`]).
    #[serde(
        rename = "clusternetworkpolicy",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(schema_with = "crate::schema::open_object")]
    pub cluster_network_policy_lowercase: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_identity: Option<LabelIdentityExport>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<RawResource>,
}

impl ResourceExportSpec {
    /// `spec.kind`, typed (a missing kind is an unknown, empty one).
    pub fn kind(&self) -> Kind {
        Kind::parse(self.kind.as_deref().unwrap_or_default())
    }

    /// The exported ACNP spec, whichever of the two spellings carried it.
    pub fn acnp(&self) -> Option<&serde_json::Value> {
        self.cluster_network_policy
            .as_ref()
            .or(self.cluster_network_policy_lowercase.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_read_back_as_written_and_unknown_ones_are_kept() {
        for k in [
            kinds::SERVICE,
            kinds::ENDPOINTS,
            kinds::CLUSTER_INFO,
            kinds::LABEL_IDENTITY,
            kinds::ACNP,
            "Gadget",
            "",
        ] {
            assert_eq!(Kind::parse(k).as_str(), k);
        }
        assert_eq!(Kind::parse("service"), Kind::Unknown("service".into()));
    }

    #[test]
    fn a_verdict_reads_back_as_written() {
        for v in [Verdict::Succeeded, Verdict::Failure("ports differ".into())] {
            let (type_, status, reason, message) = v.condition();
            let written = ResourceExportStatus {
                conditions: vec![Condition {
                    type_: Some(type_.into()),
                    status: Some(status.into()),
                    reason: (!reason.is_empty()).then(|| reason.into()),
                    message: (!message.is_empty()).then(|| message.into()),
                    last_transition_time: None,
                }],
            };
            assert_eq!(Verdict::of(Some(&written)), Some(v));
        }
        assert_eq!(Verdict::of(None), None);
        assert_eq!(Verdict::of(Some(&ResourceExportStatus::default())), None);
    }
}
