//! What a member makes of the leader's ResourceImports, decided without I/O:
//! Service + Endpoints `antrea-mc-<name>` and ServiceImport `<name>` per imported Service (a
//! headless one: only the ServiceImport), the MCS EndpointSlices of each source cluster, a
//! ClusterInfoImport per remote cluster, ACNP `antrea-mc-<name>` per imported policy, and, with
//! stretched NetworkPolicy on, a LabelIdentity `<hash>` per label identity.
//!
//! The leader's Endpoints import is the union of every exporting cluster's endpoints, this
//! cluster's own included. That own contribution (a ClusterIP of this cluster, or Pod IPs that
//! may be stale) is replaced by this cluster's ready Pod endpoints: kube-proxy DNATs the
//! imported Service once, and a local ClusterIP reached after that DNAT goes nowhere.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::{
    core::v1::{EndpointSubset, Endpoints, Service, ServicePort, ServiceSpec},
    discovery::v1::{Endpoint, EndpointConditions, EndpointPort as SlicePort, EndpointSlice},
};
use kube::{ResourceExt as _, api::ObjectMeta};
use mc_api::{
    antrea::{ClusterNetworkPolicy, ClusterNetworkPolicySpec},
    clusterinfo::{ClusterInfoImport, ClusterInfoImportSpec},
    imports::{ImportedService, ResourceImport, kinds},
    labelidentity::{self, LabelIdentity, LabelIdentitySpec},
    mcs::{self, ServiceImport, ServiceImportSpec, ServiceImportType},
    names::{self, annotations},
    net::Prefix,
    parsed::OrWhy,
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
    /// EndpointSlices with the MCS service-name label (ours and anyone's) by `(ns, name)`.
    pub mcs_slices: &'a BTreeMap<(String, String), &'a EndpointSlice>,
    /// ACNPs by name.
    pub acnps: &'a BTreeMap<String, &'a ClusterNetworkPolicy>,
    pub tiers: &'a BTreeSet<String>,
    /// This cluster's Service CIDR and Pod CIDRs: an imported endpoint inside them is this
    /// cluster's own.
    pub own_prefixes: &'a [Prefix],
    /// What this cluster has of a Service `(ns, name)` it may contribute to: present for every
    /// Service with an Endpoints import that exists here.
    pub own_endpoints: &'a BTreeMap<(String, String), OwnEndpoints>,
    /// `enableStretchedNetworkPolicy`: label identities are imported.
    pub stretched: bool,
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
    let (mut out, mine) = split_own(merged, own_prefixes, own);
    out.extend(mine);
    out
}

/// `merged` without this cluster's addresses, and this cluster's share of the Service: its ready
/// Pod endpoints with only the ports the leader kept for it, when one of its addresses is in
/// `merged` (none otherwise).
fn split_own(
    merged: &[EndpointSubset],
    own_prefixes: &[Prefix],
    own: Option<&OwnEndpoints>,
) -> (Vec<EndpointSubset>, Vec<EndpointSubset>) {
    let is_own = |ip: &str| {
        own_prefixes.iter().any(|p| p.contains_ip(ip))
            || own.is_some_and(|o| o.addresses.contains(ip))
    };
    let mut contributes = false;
    // The names of the ports this cluster serves (the leader keeps only those in its subsets).
    let mut served: BTreeSet<String> = BTreeSet::new();
    let mut theirs_all = Vec::new();
    for subset in merged {
        let mut keep = |list: &Option<Vec<_>>| {
            let (mine, theirs): (Vec<_>, Vec<_>) = list
                .iter()
                .flatten()
                .cloned()
                .partition(|a: &k8s_openapi::api::core::v1::EndpointAddress| is_own(&a.ip));
            if !mine.is_empty() {
                contributes = true;
                served.extend(
                    subset
                        .ports
                        .iter()
                        .flatten()
                        .map(|p| p.name.clone().unwrap_or_default()),
                );
            }
            theirs
        };
        let addresses = keep(&subset.addresses);
        let not_ready = keep(&subset.not_ready_addresses);
        if addresses.is_empty() && not_ready.is_empty() {
            continue;
        }
        theirs_all.push(EndpointSubset {
            addresses: (!addresses.is_empty()).then_some(addresses),
            not_ready_addresses: (!not_ready.is_empty()).then_some(not_ready),
            ports: subset.ports.clone(),
        });
    }
    let mine = match own {
        Some(own) if contributes => own
            .ready
            .iter()
            .filter_map(|s| mc_api::exports::with_ports_named(s, &served))
            .collect(),
        _ => Vec::new(),
    };
    (theirs_all, mine)
}

/// [`serveable_subsets`] by source cluster: each other cluster's subsets without this cluster's
/// addresses, and this cluster's share under its own ID. Together they are exactly what
/// `serveable_subsets` gives for the whole merge. `None` when the import does not say which
/// cluster sent what (an Antrea leader).
pub fn serveable_by_cluster(
    eps: &mc_api::exports::EndpointsExport,
    own_cluster: &str,
    own_prefixes: &[Prefix],
    own: Option<&OwnEndpoints>,
) -> Option<Vec<(String, Vec<EndpointSubset>)>> {
    let clusters = eps.by_cluster()?;
    let (_, mine) = split_own(&eps.subsets, own_prefixes, own);
    let mut out: Vec<(String, Vec<EndpointSubset>)> = clusters
        .into_iter()
        .map(|(cluster, subsets)| (cluster.to_owned(), split_own(subsets, own_prefixes, own).0))
        .collect();
    if !mine.is_empty() {
        match out.iter_mut().find(|(c, _)| c == own_cluster) {
            Some((_, subsets)) => subsets.extend(mine),
            None => out.push((own_cluster.to_owned(), mine)),
        }
    }
    Some(out)
}

#[derive(Default)]
pub struct Plan {
    pub services: Vec<Service>,
    pub endpoints: Vec<Endpoints>,
    pub service_imports: Vec<ServiceImport>,
    /// ServiceImports whose Service `(ns, antrea-mc-<name>)` has no ClusterIP yet: written with
    /// it (in `spec.ips`) as soon as that Service's apply returns it.
    pub awaiting_ip: BTreeMap<(String, String), ServiceImport>,
    /// The MCS EndpointSlices: per imported Service, the endpoints of each source cluster.
    pub mcs_slices: Vec<EndpointSlice>,
    pub cluster_infos: Vec<ClusterInfoImport>,
    pub acnps: Vec<ClusterNetworkPolicy>,
    /// ACNP imports that failed: (ResourceImport name, message), reported to the leader.
    pub acnp_failures: Vec<(String, String)>,
    /// LabelIdentity `<hash>` (cluster-scoped) per label identity import.
    pub label_identities: Vec<LabelIdentity>,
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
            Some(kinds::SERVICE_IMPORT) => {
                if canonical(&mut plan, ri_name, &ns, &name, "Service") {
                    service_import(&mut plan, local, &ns, &name, ri);
                }
            }
            Some(kinds::ENDPOINTS) => {
                if !canonical(&mut plan, ri_name, &ns, &name, "Endpoints") {
                    continue;
                }
                // Only alongside the Service it belongs to.
                let service_ri = names::resource_import(&ns, &name, "Service");
                let Some(service_ri) = by_name.get(&service_ri).filter(|s| {
                    s.spec.kind.as_deref() == Some(kinds::SERVICE_IMPORT)
                        && s.spec.namespace.as_deref().unwrap_or_default() == ns
                        && s.spec.name.as_deref().unwrap_or_default() == name
                }) else {
                    continue;
                };
                if !importable(&mut plan, local, &ns, &name) {
                    continue;
                }
                endpoints_import(&mut plan, local, &ns, &name, ri, headless(service_ri));
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
            Some(kinds::LABEL_IDENTITY) if local.stretched => {
                let li = ri.spec.label_identity.as_ref();
                let (Some(label), Some(id)) = (
                    li.and_then(|l| l.label.clone()),
                    li.and_then(|l| l.id)
                        .filter(|id| (1..=labelidentity::MAX_ID).contains(id)),
                ) else {
                    plan.skipped.push(format!(
                        "label identity {ri_name}: the import has no label or no valid ID"
                    ));
                    continue;
                };
                let mut cr = LabelIdentity::new(
                    ri_name,
                    LabelIdentitySpec {
                        label: Some(label),
                        id: Some(id),
                    },
                );
                cr.metadata = meta(ri_name, None, None);
                plan.label_identities.push(cr);
            }
            _ => {}
        }
    }
    plan
}

/// Whether a Service's import is named for it (`<ns>-<name>-service`, `-endpoints`): one named
/// otherwise would write a second object of the same name (anyone who may write the leader's
/// namespace can create one), and the `-` join is ambiguous (`a-b`/`c` and `a`/`b-c`).
fn canonical(plan: &mut Plan, ri_name: &str, ns: &str, name: &str, kind: &str) -> bool {
    let want = names::resource_import(ns, name, kind);
    if ri_name != want {
        plan.skipped.push(format!(
            "ResourceImport {ri_name} ({kind} {ns}/{name}) is not named {want:?}; ignored"
        ));
    }
    ri_name == want
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

/// Whether a Service's ResourceImport is of a headless Service (MCS API).
fn headless(ri: &ResourceImport) -> bool {
    ri.spec
        .service_import
        .as_ref()
        .and_then(OrWhy::ok)
        .is_some_and(|si| si.spec.type_ == ServiceImportType::Headless)
}

/// What one Endpoints import becomes: the MCS EndpointSlices (MCS API, KEP-1645) and, unless
/// the Service is headless, Endpoints `antrea-mc-<name>`.
///
/// A ClusterSetIP import's slices are also what kube-proxy reads for `antrea-mc-<name>` (label
/// `kubernetes.io/service-name`, as the KEP has an MCS controller do): per source cluster, the
/// endpoints the Endpoints hold (that cluster's as merged; this cluster's ready Pods for its
/// own share), and the Endpoints are marked `skip-mirror` so that Kubernetes does not write a
/// second copy of them. A headless import's slices are the endpoints as exported (with their
/// hostnames, which DNS answers); so are a ClusterSetIP import's when the leader does not say
/// which cluster sent what, or an address is not IPv4 (then Kubernetes mirrors the Endpoints).
fn endpoints_import(
    plan: &mut Plan,
    local: &Local,
    ns: &str,
    name: &str,
    ri: &ResourceImport,
    headless: bool,
) {
    let Some(eps) = &ri.spec.endpoints else {
        if !headless {
            plan.endpoints
                .push(imported_endpoints(ns, name, Vec::new(), false));
        }
        return;
    };
    let own = local.own_endpoints.get(&(ns.to_owned(), name.to_owned()));
    if headless {
        if let Some(clusters) = eps.by_cluster() {
            mcs_slices(plan, local, ns, name, &clusters, None);
        }
        return;
    }
    let proxied =
        serveable_by_cluster(eps, local.cluster_id, local.own_prefixes, own).filter(|clusters| {
            clusters.iter().flat_map(|(_, s)| s).all(|s| {
                let ips = s.addresses.iter().chain(&s.not_ready_addresses).flatten();
                ips.into_iter()
                    .all(|a| a.ip.parse::<std::net::Ipv4Addr>().is_ok())
            })
        });
    match &proxied {
        Some(clusters) => {
            let clusters: Vec<(&str, &[EndpointSubset])> = clusters
                .iter()
                .map(|(c, s)| (c.as_str(), s.as_slice()))
                .collect();
            mcs_slices(
                plan,
                local,
                ns,
                name,
                &clusters,
                Some(&names::imported(name)),
            );
        }
        None => {
            if let Some(clusters) = eps.by_cluster() {
                mcs_slices(plan, local, ns, name, &clusters, None);
            }
        }
    }
    let subsets = serveable_subsets(&eps.subsets, local.own_prefixes, own);
    plan.endpoints
        .push(imported_endpoints(ns, name, subsets, proxied.is_some()));
}

/// Endpoints `<ns>/antrea-mc-<name>`; `skip_mirror` when Strait writes kube-proxy's slices.
fn imported_endpoints(
    ns: &str,
    name: &str,
    subsets: Vec<EndpointSubset>,
    skip_mirror: bool,
) -> Endpoints {
    let mut metadata = meta(
        &names::imported(name),
        Some(ns),
        Some(annotations::IMPORTED_SERVICE),
    );
    if skip_mirror {
        metadata
            .labels
            .get_or_insert_default()
            .insert(mcs::labels::SKIP_MIRROR.to_owned(), "true".to_owned());
    }
    Endpoints {
        metadata,
        subsets: Some(subsets),
    }
}

/// The MCS EndpointSlices of one imported Service: per source cluster and subset, an IPv4 slice
/// `<name>-<cluster>-<i>` labelled with the Service's name and the cluster (hostnames kept: DNS
/// answers `<hostname>.<cluster>.<svc>.<ns>.svc.clusterset.local` from them). With `proxy_for`
/// (the imported Service's name), labelled for kube-proxy too and with not-ready endpoints
/// (`ready: false`); without it, no `kubernetes.io/service-name` label and ready endpoints only.
fn mcs_slices(
    plan: &mut Plan,
    local: &Local,
    ns: &str,
    name: &str,
    clusters: &[(&str, &[EndpointSubset])],
    proxy_for: Option<&str>,
) {
    for (cluster, subsets) in clusters {
        // Slices are numbered per cluster; a subset of more endpoints than a slice may hold
        // (1000, the API's limit) takes several.
        let mut i = 0;
        for subset in subsets.iter() {
            let not_ready = subset
                .not_ready_addresses
                .iter()
                .flatten()
                .filter(|_| proxy_for.is_some());
            let endpoints: Vec<Endpoint> = subset
                .addresses
                .iter()
                .flatten()
                .map(|a| (a, true))
                .chain(not_ready.map(|a| (a, false)))
                .filter(|(a, _)| a.ip.parse::<std::net::Ipv4Addr>().is_ok())
                .map(|(a, ready)| Endpoint {
                    addresses: vec![a.ip.clone()],
                    conditions: Some(EndpointConditions {
                        ready: Some(ready),
                        ..Default::default()
                    }),
                    hostname: a.hostname.clone(),
                    ..Default::default()
                })
                .collect();
            for endpoints in endpoints.chunks(MAX_SLICE_ENDPOINTS) {
                let slice_name = format!("{name}-{cluster}-{i}");
                i += 1;
                if let Some(existing) = local.mcs_slices.get(&(ns.to_owned(), slice_name.clone()))
                    && !is_managed(*existing)
                {
                    plan.skipped.push(format!(
                    "{ns}/{name}: EndpointSlice {ns}/{slice_name} exists and was not created by Strait"
                ));
                    continue;
                }
                let mut metadata = meta(&slice_name, Some(ns), None);
                let labels = metadata.labels.get_or_insert_default();
                for (k, v) in [
                    (mcs::labels::SERVICE_NAME, name),
                    (mcs::labels::SOURCE_CLUSTER, cluster),
                    (mcs::labels::SLICE_MANAGED_BY, mcs::labels::SLICE_MANAGER),
                ] {
                    labels.insert(k.to_owned(), v.to_owned());
                }
                if let Some(service) = proxy_for {
                    labels.insert(
                        mcs::labels::KUBE_SERVICE_NAME.to_owned(),
                        service.to_owned(),
                    );
                }
                plan.mcs_slices.push(EndpointSlice {
                    metadata,
                    address_type: "IPv4".into(),
                    endpoints: Some(endpoints.to_vec()),
                    ports: Some(
                        subset
                            .ports
                            .iter()
                            .flatten()
                            .map(|p| SlicePort {
                                name: p.name.clone(),
                                port: Some(p.port),
                                protocol: p.protocol.clone(),
                                app_protocol: p.app_protocol.clone(),
                            })
                            .collect(),
                    ),
                });
            }
        }
    }
}

/// The most endpoints one EndpointSlice may hold (the API's validation).
const MAX_SLICE_ENDPOINTS: usize = 1000;

fn service_import(plan: &mut Plan, local: &Local, ns: &str, name: &str, ri: &ResourceImport) {
    if !importable(plan, local, ns, name) {
        return;
    }
    let imported = match ri.spec.service_import.as_ref().map(|si| &si.0) {
        Some(Ok(si)) => si.clone(),
        Some(Err(why)) => {
            plan.skipped.push(format!(
                "{ns}/{name}: the leader's ServiceImport cannot be read ({why}); it is not imported"
            ));
            return;
        }
        None => ImportedService::default(),
    };
    let headless = imported.spec.type_ == ServiceImportType::Headless;
    // The leader's spec, with this cluster's IP (below) and family.
    let mut spec = ServiceImportSpec {
        ips: Vec::new(),
        ip_families: vec!["IPv4".into()],
        ..imported.spec
    };
    let target = names::imported(name);
    if !headless {
        plan.services.push(Service {
            metadata: meta(&target, Some(ns), Some(annotations::IMPORTED_SERVICE)),
            spec: Some(ServiceSpec {
                type_: Some("ClusterIP".into()),
                ports: Some(
                    spec.ports
                        .iter()
                        .map(|p| ServicePort {
                            name: p.name.clone(),
                            port: p.port,
                            protocol: p.protocol.clone(),
                            ..Default::default()
                        })
                        .collect(),
                ),
                // kube-proxy keeps a client on one endpoint across the clusters as it would on
                // one of the Service's own.
                session_affinity: spec.session_affinity.clone(),
                session_affinity_config: spec.session_affinity_config.clone(),
                ..Default::default()
            }),
            status: None,
        });
        // The ServiceImport carries the imported Service's ClusterIP, known once it exists.
        spec.ips = local
            .services
            .get(&(ns.to_owned(), target.clone()))
            .and_then(|s| s.spec.as_ref()?.cluster_ip.clone())
            .filter(|ip| ip != "None" && !ip.is_empty())
            .into_iter()
            .collect();
    }
    // A headless import's DNS names answer the Pods' addresses (the MCS EndpointSlices): no IP.
    let waits = !headless && spec.ips.is_empty();
    let marks = (imported.metadata.labels, imported.metadata.annotations);
    let Some(si) = service_import_object(plan, local, (ns, name), spec, marks) else {
        return;
    };
    if waits {
        // Written once the Service's apply returns its ClusterIP.
        plan.awaiting_ip.insert((ns.to_owned(), target), si);
    } else {
        plan.service_imports.push(si);
    }
}

/// The ServiceImport `<ns>/<name>` with the labels and annotations the exporting ServiceExport
/// marked (`marks`, as the leader's import carries them); `None` when someone else's object has
/// that name.
fn service_import_object(
    plan: &mut Plan,
    local: &Local,
    (ns, name): (&str, &str),
    spec: ServiceImportSpec,
    (marked_labels, mut marked_annotations): (BTreeMap<String, String>, BTreeMap<String, String>),
) -> Option<ServiceImport> {
    if let Some(existing) = local.service_imports.get(&(ns.to_owned(), name.to_owned()))
        && !is_managed(*existing)
    {
        plan.skipped.push(format!(
            "{ns}/{name}: ServiceImport {ns}/{name} exists and was not created by Strait"
        ));
        return None;
    }
    let mut si = ServiceImport::new(name, spec);
    si.metadata = meta(name, Some(ns), None);
    // The marks (MCS API); Strait's own labels win a clash.
    let keys = |m: &BTreeMap<String, String>| m.keys().cloned().collect::<Vec<_>>().join(",");
    let exported_keys = format!(
        "labels={};annotations={}",
        keys(&marked_labels),
        keys(&marked_annotations)
    );
    let labels = si.metadata.labels.get_or_insert_default();
    for (k, v) in marked_labels {
        labels.entry(k).or_insert(v);
    }
    marked_annotations.insert(annotations::EXPORTED_KEYS.to_owned(), exported_keys);
    si.metadata.annotations = Some(marked_annotations);
    Some(si)
}

fn acnp(plan: &mut Plan, local: &Local, ri_name: &str, name: &str, ri: &ResourceImport) {
    let target = names::imported(name);
    let spec: ClusterNetworkPolicySpec =
        match ri.spec.cluster_network_policy.as_ref().map(|p| p.get()) {
            Some(Ok(spec)) => spec.clone(),
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
    use mc_api::parsed::Parsed;
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
                        serde_json::from_value(json!({"spec": {
                            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
                            "type": "ClusterSetIP",
                            "sessionAffinity": "ClientIP",
                            "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 10}},
                            "internalTrafficPolicy": "Cluster",
                            "trafficDistribution": "PreferClose",
                        }}))
                        .unwrap(),
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
                    cluster_network_policy: Some(Parsed::new(
                        json!({"tier": "securityops", "priority": 1.0}),
                    )),
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
            mcs_slices: &BTreeMap::new(),
            acnps: &BTreeMap::new(),
            tiers: &tiers,
            own_prefixes: &[],
            own_endpoints: &BTreeMap::new(),
            stretched: false,
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
            serde_json::to_value(&si.session_affinity_config).unwrap(),
            json!({"clientIP": {"timeoutSeconds": 10}})
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
        // A ServiceImport the leader wrote that cannot be read (an Antrea leader's `ports: null`)
        // is not imported, and says why; the other imports are made as before.
        let mut bad = imports();
        bad.push(ri(
            "default-broken-service",
            serde_json::from_value(json!({"name": "broken", "namespace": "default",
                "kind": "ServiceImport", "serviceImport": {"spec": {"ports": null, "type": "ClusterSetIP"}}}))
            .unwrap(),
        ));
        let q = plan(&bad, &local);
        assert_eq!(q.services, p.services);
        assert!(
            q.skipped
                .iter()
                .any(|s| s.starts_with("default/broken: the leader's ServiceImport cannot be read")),
            "{:?}",
            q.skipped
        );
    }

    /// A Service import (headless or not, with marks) and its Endpoints import from west (two
    /// Pods with hostnames) and east.
    fn web_imports(headless: bool) -> Vec<Arc<ResourceImport>> {
        let subset = |ip: &str, host: Option<&str>| EndpointSubset {
            addresses: Some(vec![k8s_openapi::api::core::v1::EndpointAddress {
                ip: ip.into(),
                hostname: host.map(str::to_owned),
                ..Default::default()
            }]),
            ports: Some(vec![k8s_openapi::api::core::v1::EndpointPort {
                name: Some("http".into()),
                port: 8080,
                protocol: Some("TCP".into()),
                app_protocol: None,
            }]),
            not_ready_addresses: None,
        };
        let count = |c: &str, n| mc_api::exports::ClusterSubsets {
            cluster_id: c.into(),
            count: n,
        };
        vec![
            ri(
                "default-web-service",
                ResourceImportSpec {
                    name: Some("web".into()),
                    namespace: Some("default".into()),
                    kind: Some("ServiceImport".into()),
                    service_import: Some(
                        serde_json::from_value(json!({
                            "metadata": {"labels": {"tier": "front"}, "annotations": {"note": "w"}},
                            "spec": {
                                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
                                "type": if headless { "Headless" } else { "ClusterSetIP" },
                            },
                        }))
                        .unwrap(),
                    ),
                    ..Default::default()
                },
            ),
            ri(
                "default-web-endpoints",
                ResourceImportSpec {
                    name: Some("web".into()),
                    namespace: Some("default".into()),
                    kind: Some("Endpoints".into()),
                    endpoints: Some(mc_api::exports::EndpointsExport {
                        subsets: vec![
                            subset("10.244.9.9", None),
                            subset("10.245.1.5", Some("web-0")),
                            subset("10.245.1.6", Some("web-1")),
                        ],
                        cluster_subsets: vec![count("east", 1), count("west", 2)],
                    }),
                    ..Default::default()
                },
            ),
        ]
    }

    #[test]
    fn a_headless_import_is_a_service_import_and_mcs_endpoint_slices_per_cluster() {
        let namespaces = BTreeSet::from(["default".to_owned()]);
        let local = Local {
            cluster_id: "north",
            member_ns: "kube-system",
            namespaces: &namespaces,
            services: &BTreeMap::new(),
            service_imports: &BTreeMap::new(),
            mcs_slices: &BTreeMap::new(),
            acnps: &BTreeMap::new(),
            tiers: &BTreeSet::new(),
            own_prefixes: &[],
            own_endpoints: &BTreeMap::new(),
            stretched: false,
        };
        let p = plan(&web_imports(true), &local);
        assert!(
            p.services.is_empty() && p.endpoints.is_empty(),
            "no antrea-mc objects"
        );
        assert!(p.awaiting_ip.is_empty());
        let si = &p.service_imports[0];
        assert_eq!(si.spec.type_, ServiceImportType::Headless);
        assert!(si.spec.ips.is_empty());
        assert_eq!(si.spec.ip_families, ["IPv4"]);
        // The marks the leader imported, beside Strait's own label.
        let labels = si.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["tier"], "front");
        assert!(is_managed(si));
        let annotations = si.metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations["note"], "w");
        assert_eq!(
            annotations[annotations::EXPORTED_KEYS],
            "labels=tier;annotations=note"
        );
        // One slice per cluster and subset, named and labelled for the MCS API.
        type Slice = (String, String, Vec<(String, Option<String>)>);
        let slices: Vec<Slice> = p
            .mcs_slices
            .iter()
            .map(|s| {
                let l = s.metadata.labels.as_ref().unwrap();
                assert_eq!(l[mcs::labels::SERVICE_NAME], "web");
                assert_eq!(l[mcs::labels::SLICE_MANAGED_BY], mcs::labels::SLICE_MANAGER);
                assert!(!l.contains_key("kubernetes.io/service-name"));
                assert_eq!(s.address_type, "IPv4");
                assert_eq!(s.ports.as_ref().unwrap()[0].port, Some(8080));
                let eps = s
                    .endpoints
                    .iter()
                    .flatten()
                    .map(|e| (e.addresses[0].clone(), e.hostname.clone()))
                    .collect();
                (
                    s.metadata.name.clone().unwrap(),
                    l[mcs::labels::SOURCE_CLUSTER].clone(),
                    eps,
                )
            })
            .collect();
        assert_eq!(
            slices,
            [
                (
                    "web-east-0".to_owned(),
                    "east".to_owned(),
                    vec![("10.244.9.9".to_owned(), None)]
                ),
                (
                    "web-west-0".to_owned(),
                    "west".to_owned(),
                    vec![("10.245.1.5".to_owned(), Some("web-0".to_owned()))]
                ),
                (
                    "web-west-1".to_owned(),
                    "west".to_owned(),
                    vec![("10.245.1.6".to_owned(), Some("web-1".to_owned()))]
                ),
            ]
        );
        // A ClusterSetIP import whose Service has no ClusterIP yet: its ServiceImport waits for
        // the Service's apply.
        let p = plan(&web_imports(false), &local);
        assert_eq!(p.services.len(), 1);
        assert!(p.service_imports.is_empty());
        let waiting = &p.awaiting_ip[&("default".to_owned(), "antrea-mc-web".to_owned())];
        assert_eq!(waiting.spec.type_, ServiceImportType::ClusterSetIP);
        assert!(waiting.spec.ips.is_empty());
        assert_eq!(p.mcs_slices.len(), 3);
    }

    /// The plan of `imports` in cluster `cluster_id` with namespace `default` and nothing else
    /// but `own_prefixes` and `own_endpoints`.
    fn plan_in(
        cluster_id: &str,
        own_prefixes: &[Prefix],
        own_endpoints: &BTreeMap<(String, String), OwnEndpoints>,
        imports: &[Arc<ResourceImport>],
    ) -> Plan {
        let namespaces = BTreeSet::from(["default".to_owned()]);
        let local = Local {
            cluster_id,
            member_ns: "kube-system",
            namespaces: &namespaces,
            services: &BTreeMap::new(),
            service_imports: &BTreeMap::new(),
            mcs_slices: &BTreeMap::new(),
            acnps: &BTreeMap::new(),
            tiers: &BTreeSet::new(),
            own_prefixes,
            own_endpoints,
            stretched: false,
        };
        plan(imports, &local)
    }

    #[test]
    fn a_cluster_set_ip_imports_slices_are_kube_proxys_with_this_clusters_ready_pods_as_its_share()
    {
        let key = ("default".to_owned(), "web".to_owned());
        // West imports its own export: 10.245.0.0/16 is its Pod CIDR; one Pod is ready now.
        let own = BTreeMap::from([(
            key.clone(),
            OwnEndpoints {
                addresses: BTreeSet::new(),
                ready: vec![subset(&["10.245.7.7"], ("http", 8080))],
            },
        )]);
        let own_prefixes = prefixes(&["10.245.0.0/16"]);
        let endpoint_ips = |p: &Plan| -> Vec<String> {
            let mut ips: Vec<String> = p.endpoints[0]
                .subsets
                .iter()
                .flatten()
                .flat_map(|s| s.addresses.iter().flatten())
                .map(|a| a.ip.clone())
                .collect();
            ips.sort();
            ips
        };
        let slice_ips = |p: &Plan| -> Vec<(String, String)> {
            let mut ips: Vec<(String, String)> = p
                .mcs_slices
                .iter()
                .flat_map(|s| {
                    let cluster =
                        s.metadata.labels.as_ref().unwrap()[mcs::labels::SOURCE_CLUSTER].clone();
                    s.endpoints
                        .iter()
                        .flatten()
                        .map(move |e| (cluster.clone(), e.addresses[0].clone()))
                })
                .collect();
            ips.sort();
            ips
        };
        let p = plan_in("west", &own_prefixes, &own, &web_imports(false));
        // The Endpoints: east's as merged, west's ready Pod in place of what it exported.
        assert_eq!(endpoint_ips(&p), ["10.244.9.9", "10.245.7.7"]);
        let labels = p.endpoints[0].metadata.labels.as_ref().unwrap();
        assert_eq!(labels[mcs::labels::SKIP_MIRROR], "true", "no mirrored copy");
        // The same endpoints in the slices, each under its cluster, read by kube-proxy.
        assert_eq!(
            slice_ips(&p),
            [
                ("east".to_owned(), "10.244.9.9".to_owned()),
                ("west".to_owned(), "10.245.7.7".to_owned())
            ]
        );
        for s in &p.mcs_slices {
            let l = s.metadata.labels.as_ref().unwrap();
            assert_eq!(l[mcs::labels::KUBE_SERVICE_NAME], "antrea-mc-web");
            assert_eq!(l[mcs::labels::SERVICE_NAME], "web");
            let port = &s.ports.as_ref().unwrap()[0];
            assert_eq!(
                (port.name.as_deref(), port.port),
                (Some("http"), Some(8080))
            );
        }
        // No ready Pod in west: only east's endpoint, and no slice for west.
        let none = BTreeMap::from([(
            key,
            OwnEndpoints {
                addresses: BTreeSet::new(),
                ready: Vec::new(),
            },
        )]);
        let p = plan_in("west", &own_prefixes, &none, &web_imports(false));
        assert_eq!(endpoint_ips(&p), ["10.244.9.9"]);
        assert_eq!(
            slice_ips(&p),
            [("east".to_owned(), "10.244.9.9".to_owned())]
        );
        // A leader that does not say which cluster sent what (Antrea's): the slices cannot be
        // kube-proxy's, so Kubernetes mirrors the Endpoints.
        let mut antrea = web_imports(false);
        let eps = Arc::make_mut(&mut antrea[1]);
        eps.spec.endpoints.as_mut().unwrap().cluster_subsets.clear();
        let p = plan_in("west", &own_prefixes, &own, &antrea);
        assert_eq!(endpoint_ips(&p), ["10.244.9.9", "10.245.7.7"]);
        assert!(p.mcs_slices.is_empty());
        assert!(
            !p.endpoints[0]
                .metadata
                .labels
                .as_ref()
                .unwrap()
                .contains_key(mcs::labels::SKIP_MIRROR)
        );
    }

    #[test]
    fn a_subset_of_more_endpoints_than_a_slice_holds_takes_several_slices() {
        let mut imports = web_imports(false);
        let ips: Vec<String> = (0..2500)
            .map(|i| format!("10.244.{}.{}", i / 250, i % 250 + 1))
            .collect();
        let refs: Vec<&str> = ips.iter().map(String::as_str).collect();
        let eps = Arc::make_mut(&mut imports[1])
            .spec
            .endpoints
            .as_mut()
            .unwrap();
        eps.subsets = vec![subset(&refs, ("http", 8080))];
        eps.cluster_subsets = vec![mc_api::exports::ClusterSubsets {
            cluster_id: "east".into(),
            count: 1,
        }];
        let p = plan_in("north", &[], &BTreeMap::new(), &imports);
        let slices: Vec<(String, usize)> = p
            .mcs_slices
            .iter()
            .map(|s| {
                (
                    s.metadata.name.clone().unwrap(),
                    s.endpoints.as_ref().map_or(0, Vec::len),
                )
            })
            .collect();
        assert_eq!(
            slices,
            [
                ("web-east-0".to_owned(), 1000),
                ("web-east-1".to_owned(), 1000),
                ("web-east-2".to_owned(), 500)
            ]
        );
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
            mcs_slices: &BTreeMap::new(),
            acnps: &BTreeMap::new(),
            tiers: &BTreeSet::new(),
            own_prefixes: &[],
            own_endpoints: &BTreeMap::new(),
            stretched: false,
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
    fn local_pods_serve_only_the_ports_the_leader_kept_for_this_cluster() {
        // This cluster exported ports `tcp` and `tcp2`; another export claimed `tcp`, so the
        // leader kept only `tcp2` in this cluster's subset.
        let merged = [
            subset(&["10.96.0.10"], ("tcp2", 4242)),
            subset(&["10.97.0.20"], ("tcp", 42)),
        ];
        let mut ready = subset(&["10.244.1.5"], ("tcp", 42));
        ready
            .ports
            .as_mut()
            .unwrap()
            .push(k8s_openapi::api::core::v1::EndpointPort {
                name: Some("tcp2".into()),
                port: 42,
                protocol: Some("TCP".into()),
                app_protocol: None,
            });
        let own = OwnEndpoints {
            addresses: BTreeSet::from(["10.96.0.10".to_owned()]),
            ready: vec![ready],
        };
        let out = serveable_subsets(&merged, &prefixes(&["10.96.0.0/16"]), Some(&own));
        let names: Vec<(String, Vec<String>)> = out
            .iter()
            .map(|s| {
                (
                    s.addresses.as_ref().unwrap()[0].ip.clone(),
                    s.ports
                        .iter()
                        .flatten()
                        .map(|p| p.name.clone().unwrap_or_default())
                        .collect(),
                )
            })
            .collect();
        assert_eq!(
            names,
            [
                ("10.97.0.20".to_owned(), vec!["tcp".to_owned()]),
                ("10.244.1.5".to_owned(), vec!["tcp2".to_owned()])
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
                    ..Default::default()
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
            mcs_slices: &BTreeMap::new(),
            acnps: &BTreeMap::new(),
            tiers: &BTreeSet::new(),
            own_prefixes: &own_prefixes,
            own_endpoints: &own_endpoints,
            stretched: false,
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
