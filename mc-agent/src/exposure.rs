//! What the gateway lets remote clusters open flows to (docs/design.md §4, "What a remote
//! cluster reaches"): this cluster's exported Services, by their ClusterIPs and ports and by
//! their endpoints' addresses and ports. The receiving gateway drops (and counts,
//! `drop_not_exported`) a remote-opened flow to anything else; Pod CIDRs are added by
//! `state::desired` when Pod-to-Pod connectivity is on.
//!
//! Endpoints are exposed whatever `endpointIPType` says: with `ClusterIP`, kube-proxy leads the
//! ClusterIP's flows to the same Pods and ports, so a remote cluster reaches nothing more.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::Ipv4Addr,
};

use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};
use kube::ResourceExt as _;
use mc_api::mcs::{ServiceExport, labels::KUBE_SERVICE_NAME};
use mc_common::dataplane::{EXPOSED_ENDPOINT, EXPOSED_SERVICE, Exposed, ExposedKey};

const IPPROTO_ICMP: u8 = 1;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;

/// One exported Service as the gateway exposes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExportedService {
    pub namespace: String,
    pub name: String,
    /// Its IPv4 ClusterIPs (none when headless).
    pub cluster_ips: Vec<Ipv4Addr>,
    /// (protocol, port) of its Service ports.
    pub ports: Vec<(u8, u16)>,
    /// (address, protocol, port) of its EndpointSlices' IPv4 endpoints.
    pub endpoints: Vec<(Ipv4Addr, u8, u16)>,
}

/// A port's (protocol, number): TCP and UDP only, as the gateways translate nothing else
/// (`drop_unsupported_proto`).
fn proto_port(protocol: Option<&str>, port: Option<i32>) -> Option<(u8, u16)> {
    let proto = match protocol.unwrap_or("TCP") {
        "TCP" => IPPROTO_TCP,
        "UDP" => IPPROTO_UDP,
        _ => return None,
    };
    Some((proto, u16::try_from(port?).ok()?))
}

/// The Services the ServiceExports name, unless the member controller said the export is not
/// valid (`Valid=False`: no such Service, an imported one, no endpoints, ...).
pub fn exported_services<'a>(
    exports: impl IntoIterator<Item = &'a ServiceExport>,
    service: impl Fn(&str, &str) -> Option<std::sync::Arc<Service>>,
    slices: &[std::sync::Arc<EndpointSlice>],
) -> Vec<ExportedService> {
    let mut out = Vec::new();
    for export in exports {
        let invalid = export.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Valid" && c.status == "False")
        });
        let namespace = export.namespace().unwrap_or_default();
        let name = export.name_any();
        let Some(svc) = (!invalid).then(|| service(&namespace, &name)).flatten() else {
            continue;
        };
        let spec = svc.spec.clone().unwrap_or_default();
        let cluster_ips = spec
            .cluster_ips
            .clone()
            .unwrap_or_else(|| spec.cluster_ip.clone().into_iter().collect())
            .iter()
            .filter_map(|ip| ip.parse().ok())
            .collect();
        let ports = spec
            .ports
            .iter()
            .flatten()
            .filter_map(|p| proto_port(p.protocol.as_deref(), Some(p.port)))
            .collect();
        let mut endpoints = Vec::new();
        for slice in slices.iter().filter(|s| {
            s.address_type == "IPv4"
                && s.namespace().as_deref() == Some(namespace.as_str())
                && s.labels().get(KUBE_SERVICE_NAME) == Some(&name)
        }) {
            let slice_ports: Vec<(u8, u16)> = slice
                .ports
                .iter()
                .flatten()
                .filter_map(|p| proto_port(p.protocol.as_deref(), p.port))
                .collect();
            for e in slice.endpoints.iter().flatten() {
                for addr in e.addresses.iter().filter_map(|a| a.parse().ok()) {
                    endpoints.extend(slice_ports.iter().map(|&(proto, port)| (addr, proto, port)));
                }
            }
        }
        out.push(ExportedService {
            namespace,
            name,
            cluster_ips,
            ports,
            endpoints,
        });
    }
    out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    out
}

/// The exposure map's entries for `services`, at most `capacity` of them (whole Services, in
/// namespace/name order; the others are named in the second value). Beside each address's ports,
/// port 0 of the same protocol (its later fragments) and of ICMP (errors about its flows).
pub fn entries(
    services: &[ExportedService],
    capacity: usize,
) -> (BTreeMap<ExposedKey, Exposed>, Vec<String>) {
    let mut out = BTreeMap::new();
    let mut left_out = Vec::new();
    for svc in services {
        let mut mine = BTreeMap::new();
        let mut add = |addr: Ipv4Addr, proto: u8, port: u16, kind: u32| {
            for (proto, port) in [(proto, port), (proto, 0), (IPPROTO_ICMP, 0)] {
                let key = ExposedKey {
                    addr: addr.octets(),
                    port,
                    proto,
                    _pad: 0,
                };
                mine.entry(key).or_insert(Exposed { kind });
            }
        };
        for &ip in &svc.cluster_ips {
            for &(proto, port) in &svc.ports {
                add(ip, proto, port, EXPOSED_SERVICE);
            }
        }
        for &(addr, proto, port) in &svc.endpoints {
            add(addr, proto, port, EXPOSED_ENDPOINT);
        }
        let new: BTreeSet<_> = mine.keys().filter(|k| !out.contains_key(*k)).collect();
        if out.len() + new.len() > capacity {
            left_out.push(format!(
                "ServiceExport {}/{}: the gateway's exposure map holds {capacity} destinations; remote clusters' flows to this Service are dropped (drop_not_exported)",
                svc.namespace, svc.name
            ));
            continue;
        }
        for (k, v) in mine {
            out.entry(k).or_insert(v);
        }
    }
    (out, left_out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn export(ns: &str, name: &str, valid: Option<&str>) -> ServiceExport {
        let mut v = serde_json::json!({
            "apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ServiceExport",
            "metadata": {"namespace": ns, "name": name},
        });
        if let Some(status) = valid {
            v["status"] = serde_json::json!({"conditions": [{
                "type": "Valid", "status": status, "reason": "x", "message": "",
                "lastTransitionTime": "2026-12-02T00:00:00Z"}]});
        }
        serde_json::from_value(v).unwrap()
    }

    fn service(ns: &str, name: &str, ip: &str) -> Arc<Service> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"namespace": ns, "name": name},
                "spec": {"clusterIP": ip, "clusterIPs": [ip], "ports": [
                    {"port": 80, "targetPort": 8080},
                    {"port": 53, "protocol": "UDP"},
                    {"port": 9, "protocol": "SCTP"}]},
            }))
            .unwrap(),
        )
    }

    fn slice(ns: &str, svc: &str, addrs: &[&str]) -> Arc<EndpointSlice> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"namespace": ns, "name": format!("{svc}-abc"),
                             "labels": {"kubernetes.io/service-name": svc}},
                "addressType": "IPv4",
                "endpoints": addrs.iter().map(|a| serde_json::json!({"addresses": [a]})).collect::<Vec<_>>(),
                "ports": [{"port": 8080, "protocol": "TCP"}],
            }))
            .unwrap(),
        )
    }

    fn key(addr: [u8; 4], proto: u8, port: u16) -> ExposedKey {
        ExposedKey {
            addr,
            port,
            proto,
            _pad: 0,
        }
    }

    #[test]
    fn an_exported_service_exposes_its_cluster_ip_ports_and_endpoints_and_nothing_else() {
        let services = [
            service("demo", "web", "10.96.0.10"),
            service("demo", "secret", "10.96.0.11"),
            service("default", "kubernetes", "10.96.0.1"),
        ];
        let slices = [
            slice("demo", "web", &["10.244.1.5"]),
            slice("demo", "secret", &["10.244.1.6"]),
            slice("other", "web", &["10.244.1.7"]),
        ];
        let find = |ns: &str, name: &str| {
            services
                .iter()
                .find(|s| s.namespace().as_deref() == Some(ns) && s.name_any() == name)
                .cloned()
        };
        let exports = [
            export("demo", "web", Some("True")),
            export("demo", "gone", None),
        ];
        let exported = exported_services(&exports, find, &slices);
        assert_eq!(exported.len(), 1, "{exported:?}");
        let (map, left_out) = entries(&exported, 100);
        assert!(left_out.is_empty());
        let keys: BTreeSet<ExposedKey> = map.keys().copied().collect();
        let want: BTreeSet<ExposedKey> = [
            key([10, 96, 0, 10], 6, 80),
            key([10, 96, 0, 10], 6, 0),
            key([10, 96, 0, 10], 17, 53),
            key([10, 96, 0, 10], 17, 0),
            key([10, 96, 0, 10], 1, 0),
            key([10, 244, 1, 5], 6, 8080),
            key([10, 244, 1, 5], 6, 0),
            key([10, 244, 1, 5], 1, 0),
        ]
        .into();
        assert_eq!(
            keys, want,
            "SCTP is left out: the gateways cannot translate it"
        );
        assert_eq!(map[&key([10, 96, 0, 10], 6, 80)].kind, EXPOSED_SERVICE);
        assert_eq!(map[&key([10, 244, 1, 5], 6, 8080)].kind, EXPOSED_ENDPOINT);

        // The member controller refused the export: nothing of it is exposed.
        let refused = [export("demo", "web", Some("False"))];
        assert!(exported_services(&refused, find, &slices).is_empty());
    }

    #[test]
    fn services_beyond_the_maps_capacity_are_left_out_whole_and_named() {
        let services = [
            service("a", "one", "10.96.0.10"),
            service("b", "two", "10.96.0.20"),
        ];
        let find = |ns: &str, name: &str| {
            services
                .iter()
                .find(|s| s.namespace().as_deref() == Some(ns) && s.name_any() == name)
                .cloned()
        };
        let exports = [export("b", "two", None), export("a", "one", None)];
        let exported = exported_services(&exports, find, &[]);
        let (map, left_out) = entries(&exported, 6);
        assert_eq!(map.len(), 5, "a/one's five entries fit, b/two's would not");
        assert!(map.keys().all(|k| k.addr == [10, 96, 0, 10]));
        assert_eq!(left_out.len(), 1);
        assert!(left_out[0].contains("b/two"), "{left_out:?}");
    }
}
