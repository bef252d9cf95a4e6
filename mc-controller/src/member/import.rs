//! What a member makes of the leader's ResourceImports (reference §3.4.2), decided without I/O:
//! Service + Endpoints `antrea-mc-<name>` and ServiceImport `<name>` per imported Service, a
//! ClusterInfoImport per remote cluster, ACNP `antrea-mc-<name>` per imported policy.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Endpoints, Service, ServicePort, ServiceSpec};
use kube::{ResourceExt as _, api::ObjectMeta};
use mc_api::{
    antrea::{ClusterNetworkPolicy, ClusterNetworkPolicySpec},
    clusterinfo::{ClusterInfoImport, ClusterInfoImportSpec},
    imports::{ResourceImport, kinds},
    mcs::{self, ServiceImport, ServiceImportSpec, ServiceImportType},
    names::{self, annotations},
};

use crate::kube_util::{is_managed, managed_labels};

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
                    subsets: Some(
                        ri.spec
                            .endpoints
                            .as_ref()
                            .map(|e| e.subsets.clone())
                            .unwrap_or_default(),
                    ),
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
    let ports: Vec<mcs::ServicePort> = ri
        .spec
        .service_import
        .as_ref()
        .and_then(|si| si.pointer("/spec/ports"))
        .and_then(|p| serde_json::from_value(p.clone()).ok())
        .unwrap_or_default();
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
            type_: ServiceImportType::ClusterSetIP,
            ..Default::default()
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
                    service_import: Some(
                        json!({"spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}], "type": "ClusterSetIP"}}),
                    ),
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
        };
        let p = plan(&imports(), &local);
        assert_eq!(
            p.services[0].metadata.name.as_deref(),
            Some("antrea-mc-nginx")
        );
        assert_eq!(p.endpoints.len(), 1);
        assert_eq!(p.service_imports[0].spec.ips, ["10.97.3.4"]);
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
}
