//! What a member makes of the leader's ResourceImports (reference §3.4.2), decided without I/O:
//! Service + Endpoints `antrea-mc-<name>` and ServiceImport `<name>` per imported Service, a
//! ClusterInfoImport per remote cluster, ACNP `antrea-mc-<name>` per imported policy.
//!
//! The leader's Endpoints import is the union of every exporting cluster's endpoints, this
//! cluster's own included. That own contribution (a ClusterIP of this cluster, or Pod IPs that
//! may be stale) is replaced by this cluster's ready Pod endpoints: kube-proxy DNATs the
//! imported Service once, and a local ClusterIP reached after that DNAT goes nowhere.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{EndpointSubset, Endpoints, Service, ServicePort, ServiceSpec};
use kube::{ResourceExt as _, api::ObjectMeta};
use mc_api::{
    antrea::{ClusterNetworkPolicy, ClusterNetworkPolicySpec},
    clusterinfo::{ClusterInfoImport, ClusterInfoImportSpec},
    imports::{ResourceImport, kinds},
    mcs::{self, ServiceImport, ServiceImportSpec, ServiceImportType},
    names::{self, annotations},
    net::Prefix,
};

use mc_kube::{is_managed, managed_labels};

/// What the local cluster holds, as far as imports are concerned.
pub struct Local<'a> {
    pub cluster_id: &'a str,
    pub member_ns: &'a str,
    pub namespaces: &'a BTreeSet<String>,
    /// Services by `(ns, name)`.
    pub services: &'a BTreeMap<(String, String), &'a Service>,
    /// ServiceImports by `(ns, name)`.
    pub service_imports: &'a BTreeMap<(String, String), &'a ServiceImport>,
    /// ACNPs by name.
    pub acnps: &'a BTreeMap<String, &'a ClusterNetworkPolicy>,
    pub tiers: &'a BTreeSet<String>,
    /// This cluster's Service CIDR and Pod CIDRs: an imported endpoint inside them is this
    /// cluster's own.
    pub own_prefixes: &'a [Prefix],
    /// What this cluster has of a Service `(ns, name)` it may contribute to: present for every
    /// Service with an Endpoints import that exists here.
    pub own_endpoints: &'a BTreeMap<(String, String), OwnEndpoints>,
}

/// This cluster's side of one multi-cluster Service.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OwnEndpoints {
    /// Addresses this cluster is known to have contributed: its Endpoints ResourceExport as the
    /// leader holds it, the Service's ClusterIPs and every address of its EndpointSlices.
    pub addresses: BTreeSet<String>,
    /// The Service's ready endpoints: Pod IPs with the target ports, named as the Service's
    /// ports (what kube-proxy can reach in one DNAT).
    pub ready: Vec<EndpointSubset>,
}

/// The endpoints this cluster writes for a multi-cluster Service, from the leader's merged
/// `subsets`: every other cluster's endpoints as merged, and, when the leader counts this
/// cluster among the exporters (one of its own addresses is in the merge), this cluster's ready
/// Pod endpoints in place of what it exported. No address of this cluster is ever written as the
/// leader sent it: a ClusterIP here is not routable after kube-proxy's DNAT, and exported Pod IPs
/// lag the EndpointSlices.
pub fn serveable_subsets(
    merged: &[EndpointSubset],
    own_prefixes: &[Prefix],
    own: Option<&OwnEndpoints>,
) -> Vec<EndpointSubset> {
    let is_own = |ip: &str| {
        own_prefixes.iter().any(|p| p.contains_ip(ip))
            || own.is_some_and(|o| o.addresses.contains(ip))
    };
    let mut contributes = false;
    let mut out = Vec::new();
    for subset in merged {
        let mut keep = |list: &Option<Vec<_>>| {
            let (mine, theirs): (Vec<_>, Vec<_>) = list
                .iter()
                .flatten()
                .cloned()
                .partition(|a: &k8s_openapi::api::core::v1::EndpointAddress| is_own(&a.ip));
            contributes |= !mine.is_empty();
            theirs
        };
        let addresses = keep(&subset.addresses);
        let not_ready = keep(&subset.not_ready_addresses);
        if addresses.is_empty() && not_ready.is_empty() {
            continue;
        }
        out.push(EndpointSubset {
            addresses: (!addresses.is_empty()).then_some(addresses),
            not_ready_addresses: (!not_ready.is_empty()).then_some(not_ready),
            ports: subset.ports.clone(),
        });
    }
    if contributes && let Some(own) = own {
        out.extend(own.ready.iter().cloned());
    }
    out
}

#[derive(Default)]
pub struct Plan {
    pub services: Vec<Service>,
    pub endpoints: Vec<Endpoints>,
    pub service_imports: Vec<ServiceImport>,
    pub cluster_infos: Vec<ClusterInfoImport>,
    pub acnps: Vec<ClusterNetworkPolicy>,
    /// ACNP imports that failed: (ResourceImport name, message), reported to the leader.
    pub acnp_failures: Vec<(String, String)>,
    /// Imports skipped for a local reason, for the log.
    pub skipped: Vec<String>,
}

fn meta(name: &str, namespace: Option<&str>, annotation: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: namespace.map(str::to_owned),
        labels: Some(managed_labels()),
        annotations: annotation.map(|a| [(a.to_owned(), "true".to_owned())].into()),
        ..Default::default()
    }
}

pub fn plan(imports: &[std::sync::Arc<ResourceImport>], local: &Local) -> Plan {
    let mut plan = Plan::default();
    let by_name: BTreeMap<String, &ResourceImport> = imports
        .iter()
        .map(|ri| (ri.name_any(), ri.as_ref()))
        .collect();
    for (ri_name, ri) in &by_name {
        let ns = ri.spec.namespace.clone().unwrap_or_default();
        let name = ri.spec.name.clone().unwrap_or_default();
        match ri.spec.kind.as_deref() {
            Some(kinds::SERVICE_IMPORT) => service_import(&mut plan, local, &ns, &name, ri),
            Some(kinds::ENDPOINTS) => {
                // Only alongside the Service it belongs to.
                let service_ri = names::resource_import(&ns, &name, "Service");
                if !by_name.contains_key(&service_ri) || !importable(&mut plan, local, &ns, &name) {
                    continue;
                }
                plan.endpoints.push(Endpoints {
                    metadata: meta(
                        &names::imported(&name),
                        Some(&ns),
                        Some(annotations::IMPORTED_SERVICE),
                    ),
                    subsets: Some(serveable_subsets(
                        ri.spec
                            .endpoints
                            .as_ref()
                            .map(|e| e.subsets.as_slice())
                            .unwrap_or_default(),
                        local.own_prefixes,
                        local.own_endpoints.get(&(ns.clone(), name.clone())),
                    )),
                });
            }
            Some(kinds::CLUSTER_INFO) => {
                let Some(info) = &ri.spec.cluster_info else {
                    continue;
                };
                if info.cluster_id.as_deref() == Some(local.cluster_id) {
                    continue;
                }
                let mut cii = ClusterInfoImport::new(ri_name, ClusterInfoImportSpec(info.clone()));
                cii.metadata = meta(ri_name, Some(local.member_ns), None);
                plan.cluster_infos.push(cii);
            }
            Some(kinds::ACNP) => acnp(&mut plan, local, ri_name, &name, ri),
            _ => {}
        }
    }
    plan
}

/// Whether `<ns>/antrea-mc-<name>` may be written: the namespace exists and no Service of that
/// name belongs to someone else.
fn importable(plan: &mut Plan, local: &Local, ns: &str, name: &str) -> bool {
    if !local.namespaces.contains(ns) {
        plan.skipped.push(format!(
            "{ns}/{name}: namespace {ns} does not exist in this cluster (or is being deleted)"
        ));
        return false;
    }
    let target = names::imported(name);
    if let Some(existing) = local.services.get(&(ns.to_owned(), target.clone()))
        && !is_managed(*existing)
    {
        plan.skipped.push(format!(
            "{ns}/{name}: Service {ns}/{target} exists and was not created by Strait; it is left alone"
        ));
        return false;
    }
    true
}

fn service_import(plan: &mut Plan, local: &Local, ns: &str, name: &str, ri: &ResourceImport) {
    if !importable(plan, local, ns, name) {
        return;
    }
    let field = |path: &str| {
        ri.spec
            .service_import
            .as_ref()
            .and_then(|si| si.pointer(path))
            .cloned()
    };
    let ports: Vec<mcs::ServicePort> = field("/spec/ports")
        .and_then(|p| serde_json::from_value(p).ok())
        .unwrap_or_default();
    let text = |path: &str| field(path).and_then(|v| v.as_str().map(str::to_owned));
    let session_affinity = text("/spec/sessionAffinity");
    let session_affinity_config = field("/spec/sessionAffinityConfig");
    let target = names::imported(name);
    plan.services.push(Service {
        metadata: meta(&target, Some(ns), Some(annotations::IMPORTED_SERVICE)),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            ports: Some(
                ports
                    .iter()
                    .map(|p| ServicePort {
                        name: p.name.clone(),
                        port: p.port,
                        protocol: p.protocol.clone(),
                        ..Default::default()
                    })
                    .collect(),
            ),
            // kube-proxy keeps a client on one endpoint across the clusters as it would on one
            // of the Service's own.
            session_affinity: session_affinity.clone(),
            session_affinity_config: session_affinity_config
                .clone()
                .and_then(|c| serde_json::from_value(c).ok()),
            ..Default::default()
        }),
        status: None,
    });
    // The ServiceImport carries the imported Service's ClusterIP, known once it exists.
    let Some(ip) = local
        .services
        .get(&(ns.to_owned(), target))
        .and_then(|s| s.spec.as_ref()?.cluster_ip.clone())
        .filter(|ip| ip != "None" && !ip.is_empty())
    else {
        return;
    };
    if let Some(existing) = local.service_imports.get(&(ns.to_owned(), name.to_owned()))
        && !is_managed(*existing)
    {
        plan.skipped.push(format!(
            "{ns}/{name}: ServiceImport {ns}/{name} exists and was not created by Strait"
        ));
        return;
    }
    let mut si = ServiceImport::new(
        name,
        ServiceImportSpec {
            ports,
            ips: vec![ip],
            ip_families: vec!["IPv4".into()],
            type_: ServiceImportType::ClusterSetIP,
            session_affinity,
            session_affinity_config,
            internal_traffic_policy: text("/spec/internalTrafficPolicy"),
            traffic_distribution: text("/spec/trafficDistribution"),
        },
    );
    si.metadata = meta(name, Some(ns), None);
    plan.service_imports.push(si);
}

fn acnp(plan: &mut Plan, local: &Local, ri_name: &str, name: &str, ri: &ResourceImport) {
    let target = names::imported(name);
    let spec: ClusterNetworkPolicySpec = match ri
        .spec
        .cluster_network_policy
        .clone()
        .map(serde_json::from_value)
    {
        Some(Ok(spec)) => spec,
        Some(Err(e)) => {
            plan.acnp_failures.push((
                ri_name.to_owned(),
                format!(
                    "Unable to import Antrea ClusterNetworkPolicy {name} in cluster {}: {e}",
                    local.cluster_id
                ),
            ));
            return;
        }
        None => return,
    };
    if let Some(existing) = local.acnps.get(&target)
        && !existing
            .annotations()
            .contains_key(annotations::IMPORTED_ACNP)
    {
        plan.acnp_failures.push((
            ri_name.to_owned(),
            format!(
                "Unable to import Antrea ClusterNetworkPolicy which conflicts with existing one in cluster {}",
                local.cluster_id
            ),
        ));
        return;
    }
    if let Some(tier) = spec.tier.as_deref().filter(|t| !t.is_empty())
        && !local.tiers.contains(tier)
    {
        plan.acnp_failures.push((
            ri_name.to_owned(),
            format!(
                "ACNP Tier {tier} does not exist in importing cluster {}",
                local.cluster_id
            ),
        ));
        return;
    }
    let mut policy = ClusterNetworkPolicy::new(&target, spec);
    policy.metadata = meta(&target, None, Some(annotations::IMPORTED_ACNP));
    plan.acnps.push(policy);
}

#[cfg(test)]
mod tests {
    use super::*;
    use mc_api::{clusterinfo::ClusterInfo, imports::ResourceImportSpec};
    use serde_json::json;
    use std::sync::Arc;

    fn ri(name: &str, spec: ResourceImportSpec) -> Arc<ResourceImport> {
        Arc::new(ResourceImport::new(name, spec))
    }

    fn imports() -> Vec<Arc<ResourceImport>> {
        vec![
            ri(
                "default-nginx-service",
                ResourceImportSpec {
                    name: Some("nginx".into()),
                    namespace: Some("default".into()),
                    kind: Some("ServiceImport".into()),
                    service_import: Some(json!({"spec": {
                        "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
                        "type": "ClusterSetIP",
                        "sessionAffinity": "ClientIP",
                        "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 10}},
                        "internalTrafficPolicy": "Cluster",
                        "trafficDistribution": "PreferClose",
                    }})),
                    ..Default::default()
                },
            ),
            ri(
                "default-nginx-endpoints",
                ResourceImportSpec {
                    name: Some("nginx".into()),
                    namespace: Some("default".into()),
                    kind: Some("Endpoints".into()),
                    endpoints: Some(Default::default()),
                    ..Default::default()
                },
            ),
            ri(
                "east-clusterinfo",
                ResourceImportSpec {
                    kind: Some("ClusterInfo".into()),
                    cluster_info: Some(ClusterInfo {
                        cluster_id: Some("east".into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ),
            ri(
                "west-clusterinfo",
                ResourceImportSpec {
                    kind: Some("ClusterInfo".into()),
                    cluster_info: Some(ClusterInfo {
                        cluster_id: Some("west".into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ),
            ri(
                "strict-antreaclusternetworkpolicy",
                ResourceImportSpec {
                    name: Some("strict".into()),
                    kind: Some("AntreaClusterNetworkPolicy".into()),
                    cluster_network_policy: Some(json!({"tier": "securityops", "priority": 1.0})),
                    ..Default::default()
                },
            ),
        ]
    }

    #[test]
    fn imports_become_local_objects() {
        let namespaces = BTreeSet::from(["default".to_owned()]);
        let mut imported = Service::default();
        imported.metadata.labels = Some(managed_labels());
        imported.spec = Some(ServiceSpec {
            cluster_ip: Some("10.97.3.4".into()),
            ..Default::default()
        });
        let services = BTreeMap::from([(
            ("default".to_owned(), "antrea-mc-nginx".to_owned()),
            &imported,
        )]);
        let tiers = BTreeSet::from(["securityops".to_owned()]);
        let local = Local {
            cluster_id: "east",
            member_ns: "kube-system",
            namespaces: &namespaces,
            services: &services,
            service_imports: &BTreeMap::new(),
            acnps: &BTreeMap::new(),
            tiers: &tiers,
            own_prefixes: &[],
            own_endpoints: &BTreeMap::new(),
        };
        let p = plan(&imports(), &local);
        assert_eq!(
            p.services[0].metadata.name.as_deref(),
            Some("antrea-mc-nginx")
        );
        assert_eq!(p.endpoints.len(), 1);
        let si = &p.service_imports[0].spec;
        assert_eq!(si.ips, ["10.97.3.4"]);
        assert_eq!(si.ip_families, ["IPv4"]);
        // The exported Service's traits, as the leader merged them; kube-proxy honours the
        // affinity on the imported Service.
        assert_eq!(si.session_affinity.as_deref(), Some("ClientIP"));
        assert_eq!(
            si.session_affinity_config,
            Some(json!({"clientIP": {"timeoutSeconds": 10}}))
        );
        assert_eq!(si.internal_traffic_policy.as_deref(), Some("Cluster"));
        assert_eq!(si.traffic_distribution.as_deref(), Some("PreferClose"));
        let svc = p.services[0].spec.as_ref().unwrap();
        assert_eq!(svc.session_affinity.as_deref(), Some("ClientIP"));
        assert_eq!(
            svc.session_affinity_config
                .as_ref()
                .and_then(|c| c.client_ip.as_ref())
                .and_then(|c| c.timeout_seconds),
            Some(10)
        );
        // Only the remote cluster's info.
        assert_eq!(p.cluster_infos.len(), 1);
        assert_eq!(
            p.cluster_infos[0].metadata.name.as_deref(),
            Some("west-clusterinfo")
        );
        assert_eq!(
            p.acnps[0].metadata.name.as_deref(),
            Some("antrea-mc-strict")
        );
        assert!(p.acnp_failures.is_empty());
    }

    #[test]
    fn a_users_service_a_missing_namespace_or_tier_is_never_overwritten() {
        let namespaces = BTreeSet::from(["default".to_owned()]);
        let users = Service::default();
        let services =
            BTreeMap::from([(("default".to_owned(), "antrea-mc-nginx".to_owned()), &users)]);
        let local = Local {
            cluster_id: "east",
            member_ns: "kube-system",
            namespaces: &namespaces,
            services: &services,
            service_imports: &BTreeMap::new(),
            acnps: &BTreeMap::new(),
            tiers: &BTreeSet::new(),
            own_prefixes: &[],
            own_endpoints: &BTreeMap::new(),
        };
        let p = plan(&imports(), &local);
        assert!(p.services.is_empty() && p.endpoints.is_empty() && p.service_imports.is_empty());
        assert_eq!(p.skipped.len(), 2);
        assert!(p.acnps.is_empty());
        assert!(
            p.acnp_failures[0]
                .1
                .contains("Tier securityops does not exist in importing cluster east")
        );

        let none = BTreeSet::new();
        let local = Local {
            namespaces: &none,
            services: &BTreeMap::new(),
            ..local
        };
        let p = plan(&imports(), &local);
        assert!(p.services.is_empty());
        assert!(p.skipped[0].contains("namespace default does not exist"));
    }

    fn subset(ips: &[&str], port: (&str, i32)) -> EndpointSubset {
        EndpointSubset {
            addresses: Some(
                ips.iter()
                    .map(|ip| k8s_openapi::api::core::v1::EndpointAddress {
                        ip: (*ip).into(),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ports: Some(vec![k8s_openapi::api::core::v1::EndpointPort {
                name: Some(port.0.into()),
                port: port.1,
                protocol: Some("TCP".into()),
                app_protocol: None,
            }]),
            not_ready_addresses: None,
        }
    }

    fn all_ips(subsets: &[EndpointSubset]) -> Vec<(String, i32)> {
        subsets
            .iter()
            .flat_map(|s| {
                let port = s.ports.as_ref().unwrap()[0].port;
                s.addresses
                    .iter()
                    .flatten()
                    .map(move |a| (a.ip.clone(), port))
            })
            .collect()
    }

    fn prefixes(cidrs: &[&str]) -> Vec<Prefix> {
        cidrs.iter().map(|c| Prefix::parse(c).unwrap()).collect()
    }

    #[test]
    fn the_own_clusterip_is_replaced_by_the_ready_local_pods() {
        let merged = [
            subset(&["10.96.0.10"], ("http", 80)),
            subset(&["10.97.0.20"], ("http", 80)),
        ];
        let own = OwnEndpoints {
            addresses: BTreeSet::from(["10.96.0.10".to_owned()]),
            ready: vec![subset(&["10.244.1.5", "10.244.1.6"], ("http", 8080))],
        };
        let out = serveable_subsets(&merged, &prefixes(&["10.96.0.0/16"]), Some(&own));
        assert_eq!(
            all_ips(&out),
            [
                ("10.97.0.20".to_owned(), 80),
                ("10.244.1.5".to_owned(), 8080),
                ("10.244.1.6".to_owned(), 8080)
            ]
        );
    }

    #[test]
    fn local_pods_count_only_while_the_leader_counts_this_cluster() {
        let own = OwnEndpoints {
            addresses: BTreeSet::from(["10.96.0.10".to_owned()]),
            ready: vec![subset(&["10.244.1.5"], ("http", 8080))],
        };
        let own_prefixes = prefixes(&["10.96.0.0/16"]);
        // The leader has not merged (or has refused) this cluster's export: remote only.
        let merged = [subset(&["10.97.0.20"], ("http", 80))];
        assert_eq!(
            all_ips(&serveable_subsets(&merged, &own_prefixes, Some(&own))),
            [("10.97.0.20".to_owned(), 80)]
        );
        // Scaled to zero ready Pods while the leader still lists us: remote only, and never
        // the local ClusterIP.
        let merged = [
            subset(&["10.96.0.10"], ("http", 80)),
            subset(&["10.97.0.20"], ("http", 80)),
        ];
        let none_ready = OwnEndpoints {
            ready: vec![],
            ..own.clone()
        };
        assert_eq!(
            all_ips(&serveable_subsets(
                &merged,
                &own_prefixes,
                Some(&none_ready)
            )),
            [("10.97.0.20".to_owned(), 80)]
        );
        // This cluster's Service gone: its ClusterIP is still never written.
        assert_eq!(
            all_ips(&serveable_subsets(&merged, &own_prefixes, None)),
            [("10.97.0.20".to_owned(), 80)]
        );
        // Only this cluster exports: only its Pods.
        let merged = [subset(&["10.96.0.10"], ("http", 80))];
        assert_eq!(
            all_ips(&serveable_subsets(&merged, &own_prefixes, Some(&own))),
            [("10.244.1.5".to_owned(), 8080)]
        );
    }

    #[test]
    fn exported_pod_ips_are_replaced_by_the_current_ready_pods() {
        // endpointIPType PodIP, Pod CIDRs unknown: the leader still holds a Pod that is gone
        // (10.244.1.9, known from this cluster's own export); the slices now say 10.244.1.5.
        let merged = [
            subset(&["10.244.1.9"], ("http", 8080)),
            subset(&["10.245.2.7"], ("http", 8080)),
        ];
        let own = OwnEndpoints {
            addresses: BTreeSet::from(["10.96.0.10".to_owned(), "10.244.1.9".to_owned()]),
            ready: vec![subset(&["10.244.1.5"], ("http", 8080))],
        };
        let out = serveable_subsets(&merged, &prefixes(&["10.96.0.0/16"]), Some(&own));
        assert_eq!(
            all_ips(&out),
            [
                ("10.245.2.7".to_owned(), 8080),
                ("10.244.1.5".to_owned(), 8080)
            ]
        );
    }

    #[test]
    fn the_plan_writes_no_local_cluster_ip() {
        let namespaces = BTreeSet::from(["default".to_owned()]);
        let mut all = imports();
        all[1] = ri(
            "default-nginx-endpoints",
            ResourceImportSpec {
                name: Some("nginx".into()),
                namespace: Some("default".into()),
                kind: Some("Endpoints".into()),
                endpoints: Some(mc_api::exports::EndpointsExport {
                    subsets: vec![
                        subset(&["10.96.0.10"], ("http", 80)),
                        subset(&["10.97.0.20"], ("http", 80)),
                    ],
                }),
                ..Default::default()
            },
        );
        let own_endpoints = BTreeMap::from([(
            ("default".to_owned(), "nginx".to_owned()),
            OwnEndpoints {
                addresses: BTreeSet::new(),
                ready: vec![subset(&["10.244.1.5"], ("http", 8080))],
            },
        )]);
        let own_prefixes = prefixes(&["10.96.0.0/16", "10.244.0.0/16"]);
        let local = Local {
            cluster_id: "east",
            member_ns: "kube-system",
            namespaces: &namespaces,
            services: &BTreeMap::new(),
            service_imports: &BTreeMap::new(),
            acnps: &BTreeMap::new(),
            tiers: &BTreeSet::new(),
            own_prefixes: &own_prefixes,
            own_endpoints: &own_endpoints,
        };
        let p = plan(&all, &local);
        assert_eq!(
            all_ips(p.endpoints[0].subsets.as_deref().unwrap()),
            [
                ("10.97.0.20".to_owned(), 80),
                ("10.244.1.5".to_owned(), 8080)
            ]
        );
    }
}
