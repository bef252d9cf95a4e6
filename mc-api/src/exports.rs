//! ResourceExport: what a member (or an admin, for ACNPs) exports into the leader's namespace.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EndpointSubset, ServiceSpec};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    antrea::ClusterNetworkPolicySpec, clusterinfo::ClusterInfo, conditions::Condition,
    parsed::Parsed,
};

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
    /// The ServiceExport's `spec.exportedLabels` (MCS API; not in Antrea's payload).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub exported_labels: BTreeMap<String, String>,
    /// The ServiceExport's `spec.exportedAnnotations`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub exported_annotations: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EndpointsExport {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::schema::open_object_array")]
    pub subsets: Vec<EndpointSubset>,
    /// In a ResourceImport only (Strait's leader): which cluster each run of `subsets` came
    /// from, in order, so that members can say so (the MCS EndpointSlices' `source-cluster`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_subsets: Vec<ClusterSubsets>,
}

/// `subset` with only its ports named in `names` (an unnamed port is `""`); `None` when none is
/// left. A subset without ports is kept as it is. Traffic to a Service port goes only to endpoint
/// ports of its name, so this is how a port reaches only the clusters that serve it.
pub fn with_ports_named(
    subset: &EndpointSubset,
    names: &std::collections::BTreeSet<String>,
) -> Option<EndpointSubset> {
    let all = subset.ports.as_deref().unwrap_or_default();
    if all.is_empty() {
        return Some(subset.clone());
    }
    let ports: Vec<_> = all
        .iter()
        .filter(|p| names.contains(p.name.as_deref().unwrap_or_default()))
        .cloned()
        .collect();
    (!ports.is_empty()).then(|| EndpointSubset {
        ports: Some(ports),
        ..subset.clone()
    })
}

/// `count` consecutive subsets of a merged Endpoints import came from `clusterID`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ClusterSubsets {
    #[serde(rename = "clusterID")]
    pub cluster_id: String,
    pub count: u32,
}

impl EndpointsExport {
    /// The subsets of each source cluster, in order; `None` when the import does not say
    /// (an Antrea leader) or says something that does not add up.
    pub fn by_cluster(&self) -> Option<Vec<(&str, &[EndpointSubset])>> {
        if self.cluster_subsets.is_empty() {
            return None;
        }
        let mut rest = self.subsets.as_slice();
        let mut out = Vec::new();
        for c in &self.cluster_subsets {
            let n = usize::try_from(c.count).ok()?;
            if n > rest.len() {
                return None;
            }
            let (these, more) = rest.split_at(n);
            out.push((c.cluster_id.as_str(), these));
            rest = more;
        }
        rest.is_empty().then_some(out)
    }
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
/// writes it as the export's status conditions ([`Verdict::conditions`]); the member reads it
/// back with [`Verdict::of`]. Nothing else matches these conditions' strings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Succeeded,
    Failure(String),
    /// The export disagrees with another export of its Service (the MCS API's `Conflict`, which
    /// every exporter of the Service reports): `accepted` when it is imported all the same (its
    /// ports are the imported ones), refused otherwise; why, in [`ConflictReason`]'s order.
    Conflict {
        accepted: bool,
        reasons: Vec<ConflictReason>,
        message: String,
    },
}

/// Why exports conflict: the MCS API's reasons (in its order), then Strait's own. The condition
/// carries them comma-joined (`PortConflict,LabelsConflict`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ConflictReason {
    Port,
    Type,
    SessionAffinity,
    SessionAffinityConfig,
    InternalTrafficPolicy,
    TrafficDistribution,
    Labels,
    Annotations,
    /// A ClusterInfo accepted with some of its Pod CIDRs left out.
    PodCidrsNotRouted,
    /// A reason this version does not know, read back as it was written.
    Other(String),
}

impl ConflictReason {
    /// The MCS API's reasons, in its order.
    pub const MCS: [ConflictReason; 8] = [
        ConflictReason::Port,
        ConflictReason::Type,
        ConflictReason::SessionAffinity,
        ConflictReason::SessionAffinityConfig,
        ConflictReason::InternalTrafficPolicy,
        ConflictReason::TrafficDistribution,
        ConflictReason::Labels,
        ConflictReason::Annotations,
    ];

    pub fn as_str(&self) -> &str {
        match self {
            ConflictReason::Port => "PortConflict",
            ConflictReason::Type => "TypeConflict",
            ConflictReason::SessionAffinity => "SessionAffinityConflict",
            ConflictReason::SessionAffinityConfig => "SessionAffinityConfigConflict",
            ConflictReason::InternalTrafficPolicy => "InternalTrafficPolicyConflict",
            ConflictReason::TrafficDistribution => "TrafficDistributionConflict",
            ConflictReason::Labels => "LabelsConflict",
            ConflictReason::Annotations => "AnnotationsConflict",
            ConflictReason::PodCidrsNotRouted => "PodCIDRsNotRouted",
            ConflictReason::Other(s) => s,
        }
    }

    pub fn parse(s: &str) -> ConflictReason {
        Self::MCS
            .into_iter()
            .chain([ConflictReason::PodCidrsNotRouted])
            .find(|r| r.as_str() == s)
            .unwrap_or_else(|| ConflictReason::Other(s.to_owned()))
    }

    /// The condition's reason: the reasons comma-joined.
    pub fn join(reasons: &[ConflictReason]) -> String {
        reasons
            .iter()
            .map(ConflictReason::as_str)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// A condition's reason read back.
    pub fn split(reason: &str) -> Vec<ConflictReason> {
        reason
            .split(',')
            .filter(|r| !r.is_empty())
            .map(ConflictReason::parse)
            .collect()
    }
}

/// The condition type of an export's conflict, beside the verdict's own condition.
const CONFLICT: &str = "Conflict";

impl Verdict {
    /// `(type, status, reason, message)` of each condition: first Antrea's (`Succeeded`/True, or
    /// `Failure`/False with reason `ConvergeFailure`), then, on a conflict, `Conflict`/True with
    /// the MCS reason (a condition Antrea's members do not read).
    pub fn conditions(&self) -> Vec<(&'static str, &'static str, String, &str)> {
        let succeeded = ("Succeeded", "True", String::new(), "");
        let failure = |message| ("Failure", "False", "ConvergeFailure".to_owned(), message);
        match self {
            Verdict::Succeeded => vec![succeeded],
            Verdict::Failure(message) => vec![failure(message.as_str())],
            Verdict::Conflict {
                accepted,
                reasons,
                message,
            } => vec![
                if *accepted {
                    succeeded
                } else {
                    failure(message.as_str())
                },
                (
                    CONFLICT,
                    "True",
                    ConflictReason::join(reasons),
                    message.as_str(),
                ),
            ],
        }
    }

    /// The verdict an export's status carries; `None` while the leader has given none.
    pub fn of(status: Option<&ResourceExportStatus>) -> Option<Verdict> {
        let conditions = &status?.conditions;
        let c = conditions.first()?;
        let accepted = match (c.type_.as_deref(), c.status.as_deref()) {
            (Some("Failure"), _) => false,
            (_, Some("True")) => true,
            _ => return None,
        };
        let conflict = conditions
            .iter()
            .find(|c| c.type_.as_deref() == Some(CONFLICT) && c.status.as_deref() == Some("True"));
        Some(match conflict {
            Some(k) => Verdict::Conflict {
                accepted,
                reasons: ConflictReason::split(k.reason.as_deref().unwrap_or_default()),
                message: k.message.clone().unwrap_or_default(),
            },
            None if accepted => Verdict::Succeeded,
            None => Verdict::Failure(c.message.clone().unwrap_or_default()),
        })
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
    // An admin's, read once ([`Parsed`]): a malformed one fails this export alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::open_object")]
    pub cluster_network_policy: Option<Parsed<ClusterNetworkPolicySpec>>,
    /// The lowercase spelling used by the Markdown guide's ACNP example (Antrea's own type only
    /// knows `clusterNetworkPolicy`); accepted so that YAML applies unchanged, and read as the
    /// same thing (see [`ResourceExportSpec::acnp`]).
    #[serde(
        rename = "clusternetworkpolicy",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(schema_with = "crate::schema::open_object")]
    pub cluster_network_policy_lowercase: Option<Parsed<ClusterNetworkPolicySpec>>,
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
    pub fn acnp(&self) -> Option<&Parsed<ClusterNetworkPolicySpec>> {
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
        let conflict = |accepted| Verdict::Conflict {
            accepted,
            reasons: vec![
                ConflictReason::Port,
                ConflictReason::Labels,
                ConflictReason::Other("SomethingNewConflict".into()),
            ],
            message: "ports and labels differ".into(),
        };
        for v in [
            Verdict::Succeeded,
            Verdict::Failure("ports differ".into()),
            conflict(true),
            conflict(false),
        ] {
            let written = ResourceExportStatus {
                conditions: v
                    .conditions()
                    .into_iter()
                    .map(|(type_, status, reason, message)| Condition {
                        type_: Some(type_.into()),
                        status: Some(status.into()),
                        reason: (!reason.is_empty()).then_some(reason),
                        message: (!message.is_empty()).then(|| message.into()),
                        last_transition_time: None,
                    })
                    .collect(),
            };
            assert_eq!(Verdict::of(Some(&written)), Some(v));
        }
        assert_eq!(Verdict::of(None), None);
        assert_eq!(Verdict::of(Some(&ResourceExportStatus::default())), None);
    }
}
