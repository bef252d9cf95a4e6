//! The member's own cluster beyond exports and imports: its Service CIDR and Pod CIDRs, the
//! Gateway it elects among the annotated Nodes, and Antrea's default Tiers.

use std::{
    collections::BTreeSet,
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::api::{
    core::v1::{Node, Service, ServiceSpec},
    networking::v1::ServiceCIDR,
};
use kube::{
    Api, Client, ResourceExt as _,
    api::{ApiResource, DynamicObject, ListParams, ObjectMeta, PostParams},
    core::GroupVersionKind,
};
use mc_api::{antrea::Tier, gateway::Gateway, names::annotations, net::Prefix};
use mc_kube::{run_all, write::Compare};

use super::{FULL_RESYNC, Member, gateway};

/// This cluster's Service CIDR: from the ServiceCIDR object `kubernetes`, or, on an older API
/// server, from the error a dry-run Service with an impossible ClusterIP gets.
pub async fn discover_service_cidr(client: &Client) -> anyhow::Result<String> {
    let api: Api<ServiceCIDR> = Api::all(client.clone());
    if let Ok(Some(sc)) = api.get_opt("kubernetes").await
        && let Some(cidr) = sc
            .spec
            .and_then(|s| s.cidrs)
            .into_iter()
            .flatten()
            .find(|c| c.contains('.'))
    {
        return Ok(cidr);
    }
    let svc = Service {
        metadata: ObjectMeta {
            name: Some("strait-discover-service-cidr".into()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("0.0.0.0".into()),
            ports: Some(vec![k8s_openapi::api::core::v1::ServicePort {
                port: 443,
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    };
    let api: Api<Service> = Api::namespaced(client.clone(), "default");
    let pp = PostParams {
        dry_run: true,
        ..Default::default()
    };
    match api.create(&pp, &svc).await {
        Err(kube::Error::Api(e)) => e
            .message
            .rsplit_once("valid IPs is ")
            .map(|(_, cidr)| cidr.trim().to_owned())
            .ok_or_else(|| anyhow::anyhow!("cannot discover the Service CIDR: {}", e.message)),
        Err(e) => Err(anyhow::anyhow!("cannot discover the Service CIDR: {e}")),
        Ok(_) => anyhow::bail!("cannot discover the Service CIDR: the API server accepted 0.0.0.0"),
    }
}

/// [`discover_service_cidr`], retried for 20 s (the API server may still be starting).
pub(super) async fn discover_service_cidr_retrying(client: &Client) -> anyhow::Result<String> {
    let mut attempt = 0;
    loop {
        match discover_service_cidr(client).await {
            Ok(cidr) => {
                tracing::info!(cidr, "discovered the Service CIDR");
                return Ok(cidr);
            }
            Err(e) if attempt < 10 => {
                attempt += 1;
                tracing::warn!(error = %e, "retrying");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            Err(e) => return Err(e.context("set serviceCIDR in the controller config")),
        }
    }
}

impl Member {
    pub(super) async fn elect_gateway(&mut self) -> usize {
        let nodes = self.local.nodes.all();
        let node_refs: Vec<&Node> = nodes.iter().map(Arc::as_ref).collect();
        let mut gateways = self.local.gateways.all();
        gateways.sort_by_key(|g| g.name_any());
        let current = gateways.first().map(|g| g.name_any());
        let (chosen, problems) = gateway::elect(
            &node_refs,
            current.as_deref(),
            self.config.gateway_ip_precedence,
            &self.service_cidr,
        );
        for p in problems {
            self.log_once(p);
        }
        match &chosen {
            Some(gw) if current.as_deref() != Some(&gw.name_any()) => {
                tracing::info!(node = gw.name_any(), "elected the Gateway");
            }
            None if current.is_some() => self.log_once(
                "no Ready gateway candidate: annotate a Node with multicluster.antrea.io/gateway=true"
                    .into(),
            ),
            _ => {}
        }
        let pod_cidrs = self.pod_cidrs().join(",");
        let desired: Vec<Gateway> = chosen
            .into_iter()
            .map(|mut gw| {
                // The WireGuard key is the gateway's agent's to write: kept as it wrote it.
                gw.spec.wire_guard = gateways
                    .iter()
                    .find(|g| g.name_any() == gw.name_any())
                    .and_then(|g| g.spec.wire_guard.clone());
                gw.metadata.namespace = Some(self.ns.clone());
                gw.metadata.annotations =
                    Some([(annotations::POD_CIDRS.to_owned(), pod_cidrs.clone())].into());
                gw
            })
            .collect();
        let ops = self.writer.converge(
            desired,
            &gateways,
            Compare::Fields,
            |ns: &str| Api::namespaced(self.client.clone(), ns),
            |_| true,
        );
        run_all("Gateway", ops).await
    }

    /// The Pod CIDRs this cluster announces: the config's `podCIDRs`, or, when it leaves them
    /// empty, the union of the Nodes' `spec.podCIDRs` (kube-controller-manager's IPAM, Flannel
    /// with `--kube-subnet-mgr`) and of what Calico's IPPools and Cilium's CiliumNodes hold,
    /// summarized.
    pub(super) fn pod_cidrs(&self) -> Vec<String> {
        if !self.config.pod_cidrs.is_empty() {
            return self.config.pod_cidrs.clone();
        }
        let cidrs: BTreeSet<String> = self
            .local
            .nodes
            .all()
            .iter()
            .flat_map(|n| {
                n.spec
                    .as_ref()
                    .and_then(|s| s.pod_cidrs.clone())
                    .unwrap_or_default()
            })
            .filter(|c| c.contains('.'))
            .chain(self.cni_cidrs.values().flatten().cloned())
            .collect();
        // Summarized (a Node's /24s of one range become that range: fewer prefixes for the
        // leader to weigh and every other cluster to route); what does not parse is announced
        // as it is, for the leader to refuse by name.
        let (good, bad): (Vec<_>, Vec<_>) = cidrs
            .into_iter()
            .map(|c| mc_api::net::Prefix::parse(&c).map_err(|_| c))
            .partition(Result::is_ok);
        mc_api::net::summarize(good.into_iter().flatten())
            .iter()
            .map(ToString::to_string)
            .chain(bad.into_iter().filter_map(Result::err))
            .collect()
    }

    /// Lists the CNIs' Pod CIDR objects ([`CNI_SOURCES`]) at most every [`FULL_RESYNC`], when
    /// the config leaves `podCIDRs` empty. A CRD that does not exist gives nothing; a list that
    /// fails otherwise keeps what the last one gave, logged.
    pub(super) async fn refresh_cni_cidrs(&mut self) {
        if !self.config.pod_cidrs.is_empty()
            || self.cni_listed.is_some_and(|at| at.elapsed() < FULL_RESYNC)
        {
            return;
        }
        self.cni_listed = Some(Instant::now());
        for source in &CNI_SOURCES {
            let gvk = GroupVersionKind::gvk(source.group, source.version, source.kind);
            let resource = ApiResource::from_gvk_with_plural(&gvk, source.plural);
            let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
            let cidrs = match api.list(&ListParams::default()).await {
                Ok(list) => {
                    let mut cidrs: Vec<String> = list
                        .items
                        .iter()
                        .flat_map(|o| (source.cidrs)(&o.data))
                        .collect();
                    cidrs.sort();
                    cidrs.dedup();
                    cidrs
                }
                // No such CRD: that CNI does not run here.
                Err(kube::Error::Api(e)) if e.code == 404 => Vec::new(),
                Err(e) => {
                    self.log_once(format!(
                        "cannot list {} for this cluster's Pod CIDRs (set podCIDRs in the controller config if this CNI's IPAM keeps them): {e}",
                        source.name
                    ));
                    continue;
                }
            };
            if self.cni_cidrs.get(source.name) != Some(&cidrs) {
                if cidrs.is_empty() {
                    self.cni_cidrs.remove(source.name);
                } else {
                    tracing::info!(source = source.name, ?cidrs, "Pod CIDRs found");
                    self.cni_cidrs.insert(source.name, cidrs);
                }
            }
        }
    }

    /// This cluster's Service CIDR and Pod CIDRs, those that parse.
    pub(super) fn own_prefixes(&self) -> Vec<Prefix> {
        std::iter::once(self.service_cidr.clone())
            .chain(self.pod_cidrs())
            .filter_map(|c| Prefix::parse(&c).ok())
            .collect()
    }
}

impl Member {
    /// Antrea's default Tiers (`mc_api::antrea::DEFAULT_TIERS`) this cluster lacks, created as
    /// Antrea's controller creates them: once the Tier watch has listed (so never without the
    /// CRD, and as soon as it is installed), then looked at every 30 s (not on every pass). A
    /// Tier of that name that exists (Antrea's, an operator's) is left as it is; a refused
    /// create is logged once.
    pub(super) async fn default_tiers(&mut self) {
        if !self.local.tiers.ready()
            || self
                .tiers_tried
                .is_some_and(|at| at.elapsed() < DEFAULT_TIERS_RETRY)
        {
            return;
        }
        self.tiers_tried = Some(Instant::now());
        let have = self.local.tier_names();
        let missing: Vec<Tier> = mc_api::antrea::default_tiers()
            .into_iter()
            .filter(|t| !have.contains(&t.name_any()))
            .collect();
        if missing.is_empty() {
            return;
        }
        let api: Api<Tier> = Api::all(self.client.clone());
        for tier in missing {
            let name = tier.name_any();
            match api.create(&PostParams::default(), &tier).await {
                Ok(_) => tracing::info!(tier = name, "created a default Tier"),
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => self.log_once(format!("cannot create the default Tier {name}: {e}")),
            }
        }
    }
}

/// How often the default Tiers are looked at.
const DEFAULT_TIERS_RETRY: Duration = Duration::from_secs(30);

/// Where a CNI keeps its Pod CIDRs in the API when it leaves `Node.spec.podCIDRs` empty: Calico's
/// IPPools and Cilium's CiliumNodes (cluster-pool IPAM). Read only when their CRDs exist.
pub(super) struct CniSource {
    pub name: &'static str,
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    /// The IPv4 CIDRs one object gives.
    cidrs: fn(&serde_json::Value) -> Vec<String>,
}

pub(super) const CNI_SOURCES: [CniSource; 2] = [
    CniSource {
        name: "Calico IPPools",
        group: "crd.projectcalico.org",
        version: "v1",
        kind: "IPPool",
        plural: "ippools",
        cidrs: calico_pool_cidrs,
    },
    CniSource {
        name: "CiliumNodes",
        group: "cilium.io",
        version: "v2",
        kind: "CiliumNode",
        plural: "ciliumnodes",
        cidrs: cilium_node_cidrs,
    },
];

fn ipv4_cidr(c: &str) -> bool {
    c.contains('.') && Prefix::parse(c).is_ok()
}

// Calico's IPPools and Cilium's CiliumNodes are read as dynamic objects (their CRDs have no Rust
// types here and only these fields are read): JSON by nature.

/// An IPPool's `spec.cidr` when Pods take addresses from it (`allowedUses` absent or naming
/// `Workload`; a pool only for LoadBalancer addresses is not a Pod CIDR). A disabled pool still
/// counts: its Pods keep their addresses until they go.
fn calico_pool_cidrs(pool: &serde_json::Value) -> Vec<String> {
    let spec = &pool["spec"];
    let workload = match spec["allowedUses"].as_array() {
        None => true,
        Some(uses) => uses.iter().any(|u| u == "Workload"),
    };
    spec["cidr"]
        .as_str()
        .filter(|c| workload && ipv4_cidr(c))
        .map(|c| vec![c.to_owned()])
        .unwrap_or_default()
}

/// A CiliumNode's `spec.ipam.podCIDRs` (cluster-pool IPAM).
fn cilium_node_cidrs(node: &serde_json::Value) -> Vec<String> {
    node["spec"]["ipam"]["podCIDRs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c.as_str())
        .filter(|c| ipv4_cidr(c))
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{calico_pool_cidrs, cilium_node_cidrs};

    #[test]
    fn calico_pools_for_pods_and_cilium_nodes_give_their_ipv4_cidrs() {
        let pool = |spec| calico_pool_cidrs(&json!({ "spec": spec }));
        assert_eq!(pool(json!({"cidr": "192.168.0.0/16"})), ["192.168.0.0/16"]);
        // Disabled pools still hold Pods' addresses.
        assert_eq!(
            pool(
                json!({"cidr": "10.48.0.0/16", "disabled": true, "allowedUses": ["Workload", "Tunnel"]})
            ),
            ["10.48.0.0/16"]
        );
        // Not for Pods, IPv6, or not a CIDR: nothing.
        assert!(pool(json!({"cidr": "10.50.0.0/24", "allowedUses": ["LoadBalancer"]})).is_empty());
        assert!(pool(json!({"cidr": "fd00:10::/64"})).is_empty());
        assert!(pool(json!({"cidr": "10.0.0.0/33"})).is_empty());
        assert!(pool(json!({})).is_empty());
        let node = json!({"spec": {"ipam": {"podCIDRs": ["10.0.1.0/24", "fd00::/120", 7]}}});
        assert_eq!(cilium_node_cidrs(&node), ["10.0.1.0/24"]);
        assert!(cilium_node_cidrs(&json!({"spec": {}})).is_empty());
    }
}
