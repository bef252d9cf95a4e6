//! What `mcctl verify` and `mcctl diagnose` learn of a member cluster before they start: its
//! cluster ID and ClusterSet, its Gateway, its Nodes, its view of the other members
//! (ClusterInfoImports) and its agents' configuration. Read-only.

use anyhow::{Context as _, bail};
use k8s_openapi::api::{
    core::v1::{ConfigMap, Node},
    discovery::v1::EndpointSlice,
};
use kube::{Api, ResourceExt as _, api::ListParams};
use mc_api::{
    clusterinfo::ClusterInfoImport, clusterset::v1alpha2::ClusterSet, gateway::Gateway,
    names::annotations,
};

use crate::cluster::{Cluster, connect_to, explain};

/// The agents' ConfigMap (deploy/agent, the chart) and its key.
pub const AGENT_CONFIG: &str = "strait-agent-config";
pub const AGENT_CONFIG_KEY: &str = "strait-agent.conf";

pub struct Member {
    /// The kubeconfig context it was reached with.
    pub context: String,
    pub cluster: Cluster,
    pub id: String,
    /// The member controller's namespace (the ClusterSet's, where Gateway and imports live).
    pub namespace: String,
    pub set: ClusterSet,
    pub gateway: Option<Gateway>,
    pub nodes: Vec<Node>,
    pub infos: Vec<ClusterInfoImport>,
    /// The agents' `multicluster` section, when their ConfigMap is found.
    pub agent_config: Option<serde_yaml::Value>,
}

/// The members of the contexts given (`current`, the current context when None, when none is),
/// each read through the kubeconfig given (kubectl's default when None).
pub async fn load_all(
    kubeconfig: Option<&std::path::Path>,
    current: Option<&str>,
    contexts: &[String],
) -> anyhow::Result<Vec<Member>> {
    let contexts: Vec<Option<&str>> = if contexts.is_empty() {
        vec![current]
    } else {
        contexts.iter().map(|c| Some(c.as_str())).collect()
    };
    let mut out = Vec::new();
    for ctx in contexts {
        let cluster = connect_to(kubeconfig, ctx).await?;
        out.push(Member::load(ctx.unwrap_or("(current)"), cluster).await?);
    }
    Ok(out)
}

impl Member {
    pub async fn load(context: &str, cluster: Cluster) -> anyhow::Result<Self> {
        let sets: Api<ClusterSet> = Api::all(cluster.client.clone());
        let sets = sets.list(&ListParams::default()).await.map_err(|e| {
            explain(
                e,
                &format!("context {context}: listing ClusterSets"),
                &cluster.server,
            )
        })?;
        // A member's ClusterSet names its leader's API server and token Secret; the leader's
        // own (a dual-role cluster has both) does not.
        let mut members: Vec<ClusterSet> = sets
            .items
            .into_iter()
            .filter(|s| {
                s.spec
                    .leaders
                    .iter()
                    .any(|l| l.secret.as_deref().is_some_and(|s| !s.is_empty()))
            })
            .collect();
        let set = match members.len() {
            0 => bail!(
                "context {context} ({}): no member ClusterSet (is it a member of a ClusterSet? `mcctl join`)",
                cluster.server
            ),
            1 => members.remove(0),
            _ => bail!(
                "context {context}: {} member ClusterSets ({}); Strait runs one per cluster",
                members.len(),
                members
                    .iter()
                    .map(|s| format!("{}/{}", s.namespace().unwrap_or_default(), s.name_any()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let namespace = set.namespace().unwrap_or_default();
        let Some(id) = set.spec.cluster_id.clone().filter(|i| !i.is_empty()) else {
            bail!(
                "context {context}: ClusterSet {namespace}/{} has no clusterID",
                set.name_any()
            );
        };
        let client = cluster.client.clone();
        let gateways: Api<Gateway> = Api::namespaced(client.clone(), &namespace);
        let gateway = gateways
            .list(&ListParams::default())
            .await
            .map_err(|e| {
                explain(
                    e,
                    &format!("context {context}: listing Gateways"),
                    &cluster.server,
                )
            })?
            .items
            .into_iter()
            .next();
        let nodes = Api::<Node>::all(client.clone())
            .list(&ListParams::default())
            .await
            .map_err(|e| {
                explain(
                    e,
                    &format!("context {context}: listing Nodes"),
                    &cluster.server,
                )
            })?
            .items;
        let infos = Api::<ClusterInfoImport>::namespaced(client.clone(), &namespace)
            .list(&ListParams::default())
            .await
            .map_err(|e| {
                explain(
                    e,
                    &format!("context {context}: listing ClusterInfoImports"),
                    &cluster.server,
                )
            })?
            .items;
        let agent_config = agent_config(&client).await;
        Ok(Self {
            context: context.to_owned(),
            cluster,
            id,
            namespace,
            set,
            gateway,
            nodes,
            infos,
            agent_config,
        })
    }

    /// The Node the Gateway names.
    pub fn gateway_node(&self) -> Option<String> {
        self.gateway.as_ref().map(|g| g.name_any())
    }

    /// A Ready Node that is not a gateway candidate (else not the gateway), for the client on
    /// a regular Node.
    pub fn regular_node(&self) -> Option<String> {
        let gw = self.gateway_node();
        let ready = |n: &&Node| node_ready(n) && !unschedulable(n);
        let candidate = |n: &Node| {
            n.annotations()
                .get(annotations::GATEWAY)
                .is_some_and(|v| v == "true")
        };
        let others: Vec<&Node> = self
            .nodes
            .iter()
            .filter(ready)
            .filter(|n| Some(n.name_any()) != gw)
            .collect();
        others
            .iter()
            .find(|n| !candidate(n))
            .or(others.first())
            .map(|n| n.name_any())
    }

    /// A key of the agents' `multicluster` section, as a bool.
    pub fn agent_flag(&self, key: &str) -> Option<bool> {
        self.agent_config.as_ref()?.get(key)?.as_bool()
    }

    pub fn agent_str(&self, key: &str) -> Option<String> {
        let v = self.agent_config.as_ref()?.get(key)?;
        v.as_str()
            .map(str::to_owned)
            .or_else(|| v.as_u64().map(|n| n.to_string()))
    }

    /// This member's ClusterInfoImport of another cluster.
    pub fn info_of(&self, cluster_id: &str) -> Option<&ClusterInfoImport> {
        self.infos
            .iter()
            .find(|i| i.spec.0.cluster_id.as_deref() == Some(cluster_id))
    }

    /// The gateway's address remote gateways tunnel to.
    pub fn gateway_ip(&self) -> Option<String> {
        self.gateway.as_ref()?.spec.gateway_ip.clone()
    }
}

pub fn node_ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

fn unschedulable(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

/// The agents' `multicluster` section from their ConfigMap, wherever it is.
async fn agent_config(client: &kube::Client) -> Option<serde_yaml::Value> {
    let cms: Api<ConfigMap> = Api::all(client.clone());
    let lp = ListParams::default().fields(&format!("metadata.name={AGENT_CONFIG}"));
    let cm = cms.list(&lp).await.ok()?.items.into_iter().next()?;
    let text = cm.data?.remove(AGENT_CONFIG_KEY)?;
    let v: serde_yaml::Value = serde_yaml::from_str(&text)
        .with_context(|| format!("{AGENT_CONFIG}: {AGENT_CONFIG_KEY}"))
        .ok()?;
    v.get("multicluster").cloned()
}

/// The endpoints of Service `ns/service` that are ready (or do not say), over its
/// EndpointSlices; 0 when they cannot be listed.
pub async fn ready_endpoints(client: &kube::Client, ns: &str, service: &str) -> usize {
    Api::<EndpointSlice>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={service}")))
        .await
        .map(|l| {
            l.items
                .iter()
                .flat_map(|s| &s.endpoints)
                .flatten()
                .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
                .count()
        })
        .unwrap_or(0)
}
