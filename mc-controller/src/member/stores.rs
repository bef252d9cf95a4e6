//! What the member watches in its own cluster: the stores (each object trimmed to what is read),
//! and the key each change marks (`service_key`: everything about one multi-cluster Service has
//! the key of that Service; label identities share the one key `IDENTITIES`; what is neither is
//! recomputed on every pass).

use std::collections::BTreeSet;

use k8s_openapi::api::{
    core::v1::{Endpoints, Namespace, Node, Pod, Service, ServiceSpec},
    discovery::v1::EndpointSlice,
};
use kube::{Api, Client, Resource, ResourceExt as _, runtime::watcher};
use mc_api::{
    antrea::{ClusterNetworkPolicy, Tier},
    clusterclaim::v1alpha2::ClusterClaim,
    clusterinfo::ClusterInfoImport,
    clusterset::v1alpha2::ClusterSet,
    exports::{ResourceExport, kinds as re_kinds},
    gateway::Gateway,
    labelidentity::LabelIdentity,
    mcs::{self, ServiceExport, ServiceImport},
    names::{self, labels},
};
use mc_kube::{Trigger, Watched, watch::KeysOf};

pub(super) struct LocalStores {
    pub(super) clustersets: Watched<ClusterSet>,
    pub(super) claims: Watched<ClusterClaim>,
    pub(super) namespaces: Watched<Namespace>,
    pub(super) services: Watched<Service>,
    pub(super) slices: Watched<EndpointSlice>,
    /// MCS EndpointSlices (ours, and any another implementation wrote).
    pub(super) mcs_slices: Watched<EndpointSlice>,
    pub(super) endpoints: Watched<Endpoints>,
    pub(super) service_exports: Watched<ServiceExport>,
    pub(super) service_imports: Watched<ServiceImport>,
    pub(super) nodes: Watched<Node>,
    pub(super) gateways: Watched<Gateway>,
    pub(super) cluster_infos: Watched<ClusterInfoImport>,
    pub(super) acnps: Watched<ClusterNetworkPolicy>,
    pub(super) tiers: Watched<Tier>,
    /// Every Pod's labels (only with stretched NetworkPolicy on): the label identities.
    pub(super) pods: Option<Watched<Pod>>,
    /// The LabelIdentities this member made from the leader's imports.
    pub(super) label_identities: Watched<LabelIdentity>,
}

impl LocalStores {
    /// The names of this cluster's Tiers.
    pub(super) fn tier_names(&self) -> BTreeSet<String> {
        self.tiers.all().iter().map(|t| t.name_any()).collect()
    }

    /// Starts every watch of the member's own cluster; `ns` is the member's namespace; Pods are
    /// watched only for `stretched` NetworkPolicy.
    pub(super) fn new(c: &Client, ns: &str, t: &Trigger, stretched: bool) -> Self {
        LocalStores {
            // Who we are and how to reach the leader: a change recomputes everything.
            clustersets: local_watch(c, Some(ns), t, "ClusterSet", None),
            claims: local_watch(c, Some(ns), t, "ClusterClaim", None),
            namespaces: Watched::new(
                Api::all(c.clone()),
                Default::default(),
                t.clone(),
                "Namespace",
            ),
            services: Watched::keyed(
                Api::all(c.clone()),
                Default::default(),
                t.clone(),
                "Service",
                trim_service,
                key_of,
            ),
            // The slices of Services (the exports' endpoints), not those the API server mirrors
            // from the Endpoints we import (they carry our label; nothing here reads them).
            slices: Watched::keyed(
                Api::all(c.clone()),
                watcher::Config::default().labels(&format!(
                    "{},{}!={}",
                    mcs::labels::KUBE_SERVICE_NAME,
                    labels::MANAGED_BY,
                    labels::MANAGED_BY_VALUE
                )),
                t.clone(),
                "EndpointSlice",
                trim_slice,
                |s| {
                    let svc = s.labels().get(mcs::labels::KUBE_SERVICE_NAME)?;
                    Some(vec![service_key(
                        s.metadata.namespace.as_deref().unwrap_or_default(),
                        svc,
                    )])
                },
            ),
            mcs_slices: Watched::keyed(
                Api::all(c.clone()),
                watcher::Config::default().labels(mcs::labels::SERVICE_NAME),
                t.clone(),
                "EndpointSlice",
                trim_mcs_slice,
                |s| {
                    let svc = s.labels().get(mcs::labels::SERVICE_NAME)?;
                    Some(vec![service_key(
                        s.metadata.namespace.as_deref().unwrap_or_default(),
                        svc,
                    )])
                },
            ),
            endpoints: managed_watch(c, t, "Endpoints", key_of),
            service_exports: local_watch(c, None, t, "ServiceExport", Some(key_of)),
            service_imports: local_watch(c, None, t, "ServiceImport", Some(key_of)),
            // The gateway election and the ClusterInfo: every pass. A change of the Pod CIDRs the
            // Nodes give is seen there and recomputes everything.
            nodes: Watched::keyed(
                Api::all(c.clone()),
                Default::default(),
                t.clone(),
                "Node",
                trim_node,
                no_key,
            ),
            gateways: local_watch(c, Some(ns), t, "Gateway", Some(no_key)),
            cluster_infos: managed_watch(c, t, "ClusterInfoImport", no_key),
            acnps: Watched::keyed(
                Api::all(c.clone()),
                Default::default(),
                t.clone(),
                "ClusterNetworkPolicy",
                |_| {},
                no_key,
            ),
            tiers: Watched::keyed(
                Api::all(c.clone()),
                Default::default(),
                t.clone(),
                "Tier",
                |_| {},
                no_key,
            ),
            pods: stretched.then(|| {
                Watched::keyed(
                    Api::all(c.clone()),
                    Default::default(),
                    t.clone(),
                    "Pod",
                    trim_pod,
                    identities_key,
                )
            }),
            label_identities: managed_watch(c, t, "LabelIdentity", identities_key),
        }
    }
}

/// The one key of everything about label identities (Pods, this cluster's LabelIdentity exports,
/// the leader's LabelIdentity imports, the LabelIdentities made of them): a change recomputes
/// the cluster's label set, not the Services. A Namespace change recomputes everything anyway.
pub const IDENTITIES: &str = "@label-identities";

fn identities_key<K>(_: &K) -> Option<Vec<String>> {
    Some(vec![IDENTITIES.to_owned()])
}

/// The key of a multi-cluster Service in the member's loop: `<ns>/<name>` of the exported
/// Service; an imported `antrea-mc-<name>` has the key of `<name>`.
pub fn service_key(ns: &str, name: &str) -> String {
    format!(
        "{ns}/{}",
        name.strip_prefix(names::IMPORTED_PREFIX).unwrap_or(name)
    )
}

pub(super) fn key_of<K: Resource>(obj: &K) -> Option<Vec<String>> {
    let meta = obj.meta();
    Some(vec![service_key(
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default(),
    )])
}

/// The key of a ResourceExport or ResourceImport about a Service (`None` for other kinds).
pub(super) fn key_of_spec(
    kind: Option<&str>,
    ns: Option<&str>,
    name: Option<&str>,
) -> Option<String> {
    match kind? {
        re_kinds::SERVICE | re_kinds::ENDPOINTS | mc_api::imports::kinds::SERVICE_IMPORT => Some(
            service_key(ns.unwrap_or_default(), name.unwrap_or_default()),
        ),
        re_kinds::LABEL_IDENTITY => Some(IDENTITIES.to_owned()),
        _ => None,
    }
}

/// The key of one of this cluster's own ResourceExports (by its labels, which the member sets),
/// `None` for a ClusterInfo export, which every pass looks at.
pub fn own_export_key(re: &ResourceExport) -> Option<String> {
    let l = re.labels();
    key_of_spec(
        l.get(labels::SOURCE_KIND).map(String::as_str),
        l.get(labels::SOURCE_NAMESPACE).map(String::as_str),
        l.get(labels::SOURCE_NAME).map(String::as_str),
    )
}

/// The key of a leader's ResourceImport, `None` for the kinds every pass looks at.
pub fn import_key(ri: &mc_api::imports::ResourceImport) -> Option<String> {
    key_of_spec(
        ri.spec.kind.as_deref(),
        ri.spec.namespace.as_deref(),
        ri.spec.name.as_deref(),
    )
}

/// Marks nothing per key: what the object feeds is recomputed on every pass.
pub(super) fn no_key<K>(_: &K) -> Option<Vec<String>> {
    Some(vec![])
}

pub(super) fn local_watch<K>(
    client: &Client,
    ns: Option<&str>,
    trigger: &Trigger,
    what: &'static str,
    keys: Option<KeysOf<K>>,
) -> Watched<K>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
{
    let api = match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    match keys {
        Some(keys) => Watched::keyed(
            api,
            watcher::Config::default(),
            trigger.clone(),
            what,
            |_| {},
            keys,
        ),
        None => Watched::new(api, watcher::Config::default(), trigger.clone(), what),
    }
}

pub(super) fn managed_watch<K>(
    client: &Client,
    trigger: &Trigger,
    what: &'static str,
    keys: KeysOf<K>,
) -> Watched<K>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    Watched::keyed(
        Api::all(client.clone()),
        watcher::Config::default().labels(&format!(
            "{}={}",
            labels::MANAGED_BY,
            labels::MANAGED_BY_VALUE
        )),
        trigger.clone(),
        what,
        |_| {},
        keys,
    )
}

/// What the member reads of a Service: its type, ClusterIPs and ports (exports), the traits the
/// MCS API copies into ServiceImports, and its metadata. Imported Services are compared with
/// what is desired of them, which sets no more.
pub(super) fn trim_service(svc: &mut Service) {
    svc.status = None;
    if let Some(spec) = svc.spec.take() {
        svc.spec = Some(ServiceSpec {
            type_: spec.type_,
            cluster_ip: spec.cluster_ip,
            cluster_ips: spec.cluster_ips,
            ports: spec.ports,
            session_affinity: spec.session_affinity,
            session_affinity_config: spec.session_affinity_config,
            internal_traffic_policy: spec.internal_traffic_policy,
            traffic_distribution: spec.traffic_distribution,
            ..Default::default()
        });
    }
}

/// What the member reads of an EndpointSlice: its address type, ports and each endpoint's
/// addresses, readiness and hostname (the Service it belongs to is its label).
pub(super) fn trim_slice(slice: &mut EndpointSlice) {
    slice.metadata.owner_references = None;
    trim_endpoints(slice);
}

/// Each endpoint's addresses, readiness and hostname (a headless Service's Pods are exported
/// with their hostnames).
fn trim_endpoints(slice: &mut EndpointSlice) {
    for e in slice.endpoints.iter_mut().flatten() {
        *e = k8s_openapi::api::discovery::v1::Endpoint {
            addresses: std::mem::take(&mut e.addresses),
            conditions: e.conditions.as_ref().map(|c| {
                k8s_openapi::api::discovery::v1::EndpointConditions {
                    ready: c.ready,
                    ..Default::default()
                }
            }),
            hostname: e.hostname.take(),
            ..Default::default()
        };
    }
}

/// What the member compares of an MCS EndpointSlice with the one it wants (it writes them all):
/// its labels, address type, ports and each endpoint's addresses, readiness and hostname. A
/// member holds one per imported Service and source cluster.
pub(super) fn trim_mcs_slice(slice: &mut EndpointSlice) {
    let m = &mut slice.metadata;
    (
        m.annotations,
        m.owner_references,
        m.creation_timestamp,
        m.generation,
    ) = (None, None, None, None);
    trim_endpoints(slice);
}

/// What the member reads of a Pod: its namespace, name and labels (the rest of a Pod, many KiB
/// on a real cluster, is not kept).
pub(super) fn trim_pod(pod: &mut Pod) {
    pod.spec = None;
    pod.status = None;
    let m = &mut pod.metadata;
    (m.annotations, m.owner_references, m.generate_name) = (None, None, None);
}

/// What the member reads of a Node: annotations, addresses, the Ready condition and the Pod
/// CIDRs. On a real cluster most of a Node object is its status (the image list alone is tens of
/// KiB per Node).
pub(super) fn trim_node(node: &mut Node) {
    if let Some(status) = node.status.take() {
        node.status = Some(k8s_openapi::api::core::v1::NodeStatus {
            addresses: status.addresses,
            conditions: status.conditions,
            ..Default::default()
        });
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};
    use serde_json::json;

    use super::{IDENTITIES, import_key, own_export_key, service_key, trim_service, trim_slice};
    use crate::member::export;

    #[test]
    fn stored_services_and_slices_keep_what_the_exports_read() {
        let full: Service = serde_json::from_value(json!({
            "metadata": {"name": "nginx", "namespace": "default",
                         "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}},
            "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                     "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
                     "selector": {"app": "nginx"}, "sessionAffinity": "None",
                     "ipFamilies": ["IPv4"], "internalTrafficPolicy": "Cluster"},
            "status": {"loadBalancer": {}}
        }))
        .expect("Service");
        let mut trimmed = full.clone();
        trim_service(&mut trimmed);
        let slice: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"name": "nginx-abc", "namespace": "default",
                         "labels": {"kubernetes.io/service-name": "nginx"},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": "nginx", "uid": "u"}]},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
            "endpoints": [
                {"addresses": ["10.244.1.5"], "conditions": {"ready": true, "serving": true},
                 "nodeName": "node-a", "targetRef": {"kind": "Pod", "name": "nginx-1"}},
                {"addresses": ["10.244.1.6"], "conditions": {"ready": false}}
            ]
        }))
        .expect("EndpointSlice");
        let mut trimmed_slice = slice.clone();
        trim_slice(&mut trimmed_slice);
        for ip_type in [
            mc_api::config::EndpointIpType::ClusterIP,
            mc_api::config::EndpointIpType::PodIP,
        ] {
            assert_eq!(
                export::decide(Some(&full), &[&slice], ip_type),
                export::decide(Some(&trimmed), &[&trimmed_slice], ip_type)
            );
        }
        let e = &trimmed_slice.endpoints.as_ref().expect("endpoints")[0];
        assert!(e.node_name.is_none() && e.target_ref.is_none());
        assert!(trimmed.status.is_none());
        assert!(trimmed.spec.as_ref().expect("spec").selector.is_none());
    }

    /// The member recomputes only the Services a change marks: everything about one Service
    /// must carry the same key.
    #[test]
    fn everything_about_one_service_has_its_key() {
        use mc_api::imports::{ResourceImport, ResourceImportSpec};
        let key = service_key("default", "nginx");
        assert_eq!(service_key("default", "antrea-mc-nginx"), key);
        let [svc_re, eps_re] = export::exports_for(
            "east",
            "antrea-multicluster",
            "default",
            "nginx",
            &export::Exported::default(),
            None,
        );
        assert_eq!(own_export_key(&svc_re).as_deref(), Some(key.as_str()));
        assert_eq!(own_export_key(&eps_re).as_deref(), Some(key.as_str()));
        for kind in ["ServiceImport", "Endpoints"] {
            let ri = ResourceImport::new(
                "x",
                ResourceImportSpec {
                    name: Some("nginx".into()),
                    namespace: Some("default".into()),
                    kind: Some(kind.into()),
                    ..Default::default()
                },
            );
            assert_eq!(import_key(&ri).as_deref(), Some(key.as_str()), "{kind}");
        }
        let info = ResourceImport::new(
            "west-clusterinfo",
            ResourceImportSpec {
                kind: Some("ClusterInfo".into()),
                ..Default::default()
            },
        );
        assert_eq!(import_key(&info), None, "looked at on every pass");
        let li = ResourceImport::new(
            "1e5106b3b89537a1",
            ResourceImportSpec {
                kind: Some("LabelIdentity".into()),
                ..Default::default()
            },
        );
        assert_eq!(import_key(&li).as_deref(), Some(IDENTITIES));
        let re = export::label_identity_export("east", "antrea-multicluster", "ns:a=b&pod:c=d");
        assert_eq!(own_export_key(&re).as_deref(), Some(IDENTITIES));
    }
}
