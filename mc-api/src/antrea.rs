//! The subset of `crd.antrea.io/v1beta1` needed to store, replicate and validate the Antrea
//! ClusterNetworkPolicies (ACNPs) of the guides, for clusters that run Strait without Antrea.
//! Rules and `appliedTo` entries are kept as they were written ([`Parsed`]: fields Strait does
//! not read stay, and are written back unchanged) and read once into the types below: what
//! Strait decides on (actions, peers, ports, the ClusterSet-scoped Services).

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    parsed::{OrWhy, Parsed, null_as_empty, present},
    selector::Selector,
};

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "crd.antrea.io",
    version = "v1beta1",
    kind = "ClusterNetworkPolicy",
    plural = "clusternetworkpolicies",
    shortname = "acnp",
    status = "ClusterNetworkPolicyStatus",
    printcolumn(name = "Tier", type_ = "string", json_path = ".spec.tier"),
    printcolumn(name = "Priority", type_ = "number", json_path = ".spec.priority"),
    printcolumn(
        name = "Desired Nodes",
        type_ = "number",
        json_path = ".status.desiredNodesRealized"
    ),
    printcolumn(
        name = "Current Nodes",
        type_ = "number",
        json_path = ".status.currentNodesRealized"
    ),
    printcolumn(
        name = "Strait",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"EnforcedByStrait\")].reason"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterNetworkPolicySpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    /// 1.0 to 10000.0; lower is evaluated first.
    #[schemars(range(min = 1.0, max = 10000.0))]
    pub priority: f64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::schema::open_object_array")]
    pub applied_to: Vec<Parsed<AppliedTo>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::schema::policy_rules")]
    pub ingress: Vec<Parsed<Rule>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::schema::policy_rules")]
    pub egress: Vec<Parsed<Rule>>,
}

/// One ingress or egress rule, as Strait reads it (Antrea's `Rule`; `l7Protocols`, `logLabel`,
/// `enableLogging` and the rest stay as written).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    pub action: RuleAction,
    #[serde(default)]
    pub name: Option<String>,
    /// The sources of an ingress rule; none: every source. (Lists written `null` read as empty,
    /// as absent ones.)
    #[serde(default, deserialize_with = "null_as_empty")]
    pub from: Vec<Peer>,
    /// The destinations of an egress rule (besides `toServices`).
    #[serde(default, deserialize_with = "null_as_empty")]
    pub to: Vec<Peer>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub to_services: Vec<PeerService>,
    /// None: every port.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub ports: Vec<RulePort>,
    /// The rule's own targets; `None`: the policy's `appliedTo`.
    #[serde(default)]
    pub applied_to: Option<Vec<AppliedTo>>,
}

/// What a rule does with what it matches; `Pass` hands the decision to the baseline Tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum RuleAction {
    Allow,
    Drop,
    Reject,
    Pass,
}

impl RuleAction {
    pub fn as_str(self) -> &'static str {
        match self {
            RuleAction::Allow => "Allow",
            RuleAction::Drop => "Drop",
            RuleAction::Reject => "Reject",
            RuleAction::Pass => "Pass",
        }
    }
}

/// `scope` of a peer or a Service that reaches across the ClusterSet.
pub const SCOPE_CLUSTERSET: &str = "ClusterSet";

/// A source or destination of a rule: Pods by Namespace and Pod labels, in this cluster or,
/// with `scope: ClusterSet`, in every cluster of the ClusterSet. (Peers by `ipBlock`, `group`,
/// `fqdn`... read as neither selector: all Pods the other selector leaves.) A selector that
/// cannot be read (`null` included) keeps why: it refuses the rule only where Strait enforces
/// the peer (one of ClusterSet scope), not where the cluster's policy engine does.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Peer {
    #[serde(default, deserialize_with = "present")]
    pub pod_selector: Option<OrWhy<Selector>>,
    #[serde(default, deserialize_with = "present")]
    pub namespace_selector: Option<OrWhy<Selector>>,
    /// `Cluster` (the default) or `ClusterSet`.
    #[serde(default)]
    pub scope: Option<String>,
}

impl Peer {
    pub fn clusterset(&self) -> bool {
        self.scope.as_deref() == Some(SCOPE_CLUSTERSET)
    }
}

/// The Pods a policy or a rule applies to (a selector written `null` cannot be read).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AppliedTo {
    #[serde(default, deserialize_with = "present")]
    pub pod_selector: Option<OrWhy<Selector>>,
    #[serde(default, deserialize_with = "present")]
    pub namespace_selector: Option<OrWhy<Selector>>,
}

/// A Service an egress rule names (`toServices`); with `scope: ClusterSet`, the multi-cluster
/// Service of that name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PeerService {
    #[serde(default)]
    pub name: Option<String>,
    /// None: the policy's own namespace (an Antrea NetworkPolicy's).
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub scope: Option<String>,
}

impl PeerService {
    pub fn clusterset(&self) -> bool {
        self.scope.as_deref() == Some(SCOPE_CLUSTERSET)
    }
}

/// A rule's port: a protocol (TCP when absent) and a number, a range (`port`..`endPort`), a
/// named port, or every port of the protocol (no `port`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RulePort {
    #[serde(default)]
    pub protocol: Option<String>,
    /// Absent: every port of the protocol (`null` cannot be read).
    #[serde(default, deserialize_with = "present")]
    pub port: Option<OrWhy<PortRef>>,
    #[serde(default)]
    pub end_port: Option<i64>,
}

/// A port by number or by name (Kubernetes' IntOrString).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum PortRef {
    Number(i64),
    Name(String),
}

/// An Antrea-native NetworkPolicy (namespaced): the same spec as a ClusterNetworkPolicy, its
/// rules selecting within its namespace.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "crd.antrea.io",
    version = "v1beta1",
    kind = "NetworkPolicy",
    plural = "networkpolicies",
    namespaced,
    shortname = "annp",
    shortname = "anp",
    status = "ClusterNetworkPolicyStatus",
    printcolumn(name = "Tier", type_ = "string", json_path = ".spec.tier"),
    printcolumn(name = "Priority", type_ = "number", json_path = ".spec.priority"),
    printcolumn(
        name = "Desired Nodes",
        type_ = "number",
        json_path = ".status.desiredNodesRealized"
    ),
    printcolumn(
        name = "Current Nodes",
        type_ = "number",
        json_path = ".status.currentNodesRealized"
    ),
    printcolumn(
        name = "Strait",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"EnforcedByStrait\")].reason"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct NetworkPolicySpec {
    /// The same fields as a ClusterNetworkPolicy's.
    #[serde(flatten)]
    pub policy: ClusterNetworkPolicySpec,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterNetworkPolicyStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_nodes_realized: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_nodes_realized: Option<i32>,
    /// Strait writes one of type `EnforcedByStrait` (`mc-agent` on the active gateway): whether
    /// it enforces the policy's rules, which, and why not the others.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<PolicyCondition>,
}

/// A condition of an Antrea-native policy (Antrea's `NetworkPolicyCondition`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyCondition {
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[derive(
    CustomResource, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema,
)]
#[kube(
    group = "crd.antrea.io",
    version = "v1beta1",
    kind = "Tier",
    plural = "tiers",
    shortname = "tr",
    printcolumn(name = "Priority", type_ = "integer", json_path = ".spec.priority"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct TierSpec {
    #[schemars(range(min = 0, max = 255))]
    pub priority: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// The Tiers Antrea's controller creates in every cluster (name, priority, description): a
/// policy names one of them in `spec.tier` (`application` when it names none).
pub const DEFAULT_TIERS: [(&str, i32, &str); 6] = [
    (
        "emergency",
        50,
        "[READ-ONLY]: System generated Emergency Tier",
    ),
    (
        "securityops",
        100,
        "[READ-ONLY]: System generated SecurityOps Tier",
    ),
    (
        "networkops",
        150,
        "[READ-ONLY]: System generated NetworkOps Tier",
    ),
    (
        "platform",
        200,
        "[READ-ONLY]: System generated Platform Tier",
    ),
    (
        "application",
        250,
        "[READ-ONLY]: System generated default Application Tier",
    ),
    (
        "baseline",
        253,
        "[READ-ONLY]: System generated Baseline Tier",
    ),
];

/// The default Tiers as objects.
pub fn default_tiers() -> Vec<Tier> {
    DEFAULT_TIERS
        .iter()
        .map(|(name, priority, description)| {
            Tier::new(
                name,
                TierSpec {
                    priority: *priority,
                    description: Some((*description).to_owned()),
                },
            )
        })
        .collect()
}
