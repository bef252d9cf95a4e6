//! What a member exports for one ServiceExport, its ClusterInfo and, with
//! stretched NetworkPolicy on, its Pods' label identities (§3.4.5), decided without I/O.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::{
    core::v1::{
        EndpointAddress, EndpointPort, EndpointSubset, Pod, Service, ServicePort, ServiceSpec,
    },
    discovery::v1::EndpointSlice,
};
use kube::ResourceExt as _;
use mc_api::{
    clusterinfo::{ClusterInfo, GatewayInfo},
    config::EndpointIpType,
    exports::{
        ConflictReason, EndpointsExport, LabelIdentityExport, ResourceExport, ResourceExportSpec,
        ServiceExport as ServicePayload, Verdict, kinds,
    },
    gateway::Gateway,
    labelidentity::{label_hash, normalized_label},
    mcs::ServiceExportSpec,
    names::{self, annotations, labels},
};

/// Why a ServiceExport cannot be exported: `Valid=False` with this reason and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid {
    pub reason: &'static str,
    pub message: String,
}

fn invalid(reason: &'static str, message: &str) -> Invalid {
    Invalid {
        reason,
        message: message.to_owned(),
    }
}

/// The Service's ports and the endpoint subsets to export.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Exported {
    pub ports: Vec<ServicePort>,
    pub subsets: Vec<EndpointSubset>,
    /// What the MCS API copies into the ServiceImport: the Service's `sessionAffinity`,
    /// `sessionAffinityConfig`, `internalTrafficPolicy` and `trafficDistribution`.
    pub traits: ServiceSpec,
}

/// The fields of a Service's spec a ServiceImport carries (MCS API).
fn traits(spec: &ServiceSpec) -> ServiceSpec {
    ServiceSpec {
        session_affinity: spec.session_affinity.clone(),
        session_affinity_config: spec.session_affinity_config.clone(),
        internal_traffic_policy: spec.internal_traffic_policy.clone(),
        traffic_distribution: spec.traffic_distribution.clone(),
        ..Default::default()
    }
}

fn is_ipv4(ip: &str) -> bool {
    ip.parse::<std::net::Ipv4Addr>().is_ok()
}

/// The ready endpoints of a Service's IPv4 slices: per slice, its ready addresses (sorted by IP,
/// with the Pod's hostname where the slice gives one) and its ports. A missing `ready` means
/// ready (EndpointSlice API semantics).
fn ready_endpoints(slices: &[&EndpointSlice]) -> Vec<(Vec<EndpointAddress>, Vec<EndpointPort>)> {
    let mut ready: Vec<(Vec<EndpointAddress>, Vec<EndpointPort>)> = Vec::new();
    for slice in slices {
        if slice.address_type != "IPv4" {
            continue;
        }
        let mut addresses: Vec<EndpointAddress> = slice
            .endpoints
            .iter()
            .flatten()
            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
            .flat_map(|e| {
                e.addresses.iter().map(|ip| EndpointAddress {
                    ip: ip.clone(),
                    hostname: e.hostname.clone(),
                    ..Default::default()
                })
            })
            .collect();
        if addresses.is_empty() {
            continue;
        }
        addresses.sort_by(|a, b| a.ip.cmp(&b.ip));
        addresses.dedup_by(|a, b| a.ip == b.ip);
        let ports = slice
            .ports
            .iter()
            .flatten()
            .map(|p| EndpointPort {
                name: p.name.clone().filter(|n| !n.is_empty()),
                port: p.port.unwrap_or_default(),
                protocol: Some(p.protocol.clone().unwrap_or_else(|| "TCP".into())),
                app_protocol: p.app_protocol.clone(),
            })
            .collect();
        ready.push((addresses, ports));
    }
    ready
}

/// Decides the export of a Service given its EndpointSlices (those labelled with its name).
pub fn decide(
    service: Option<&Service>,
    slices: &[&EndpointSlice],
    ip_type: EndpointIpType,
) -> Result<Exported, Invalid> {
    let Some(svc) = service else {
        return Err(invalid("ServiceNotFound", "Service does not exist"));
    };
    let spec = svc.spec.clone().unwrap_or_default();
    if spec.type_.as_deref() == Some("ExternalName") {
        return Err(invalid(
            "ServiceTypeNotSupported",
            "Service of ExternalName type is not supported",
        ));
    }
    if svc
        .annotations()
        .contains_key(annotations::IMPORTED_SERVICE)
    {
        return Err(invalid(
            "ImportedService",
            "The Service is imported, not allowed to export",
        ));
    }
    // A headless Service (MCS API): its Pods' addresses are exported, whatever the mode.
    let headless = spec.cluster_ip.as_deref() == Some("None");
    let cluster_ips: Vec<String> = spec
        .cluster_ips
        .clone()
        .or_else(|| spec.cluster_ip.clone().map(|ip| vec![ip]))
        .unwrap_or_default()
        .into_iter()
        .filter(|ip| is_ipv4(ip))
        .collect();
    if cluster_ips.is_empty() && !headless {
        return Err(invalid(
            "ServiceNoClusterIP",
            "Service does not have a valid ClusterIP",
        ));
    }
    let mut ready = ready_endpoints(slices);
    if ready.is_empty() {
        return Err(invalid(
            "ServiceWithoutEndpoints",
            "Service has no Endpoints",
        ));
    }
    let ports = spec.ports.clone().unwrap_or_default();
    let mode = if headless {
        EndpointIpType::PodIP
    } else {
        ip_type
    };
    let subsets = match mode {
        EndpointIpType::ClusterIP => vec![EndpointSubset {
            addresses: Some(
                cluster_ips
                    .iter()
                    .map(|ip| EndpointAddress {
                        ip: ip.clone(),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ports: Some(
                ports
                    .iter()
                    .map(|p| EndpointPort {
                        name: p.name.clone().filter(|n| !n.is_empty()),
                        port: p.port,
                        protocol: Some(p.protocol.clone().unwrap_or_else(|| "TCP".into())),
                        app_protocol: None,
                    })
                    .collect(),
            ),
            not_ready_addresses: None,
        }],
        EndpointIpType::PodIP => {
            ready.sort_by(|a, b| a.0.first().map(|a| &a.ip).cmp(&b.0.first().map(|b| &b.ip)));
            ready
                .into_iter()
                .map(|(addresses, ports)| EndpointSubset {
                    addresses: Some(addresses),
                    ports: Some(ports),
                    not_ready_addresses: None,
                })
                .collect()
        }
    };
    let mut traits = traits(&spec);
    if headless {
        traits.cluster_ip = Some("None".into());
    }
    Ok(Exported {
        ports,
        subsets,
        traits,
    })
}

fn export_object(
    cluster_id: &str,
    leader_ns: &str,
    namespace: &str,
    name: &str,
    kind: &str,
    spec: ResourceExportSpec,
) -> ResourceExport {
    let mut re = ResourceExport::new(
        &names::resource_export(cluster_id, namespace, name, kind),
        ResourceExportSpec {
            cluster_id: Some(cluster_id.to_owned()),
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            kind: Some(kind.to_owned()),
            ..spec
        },
    );
    re.metadata.namespace = Some(leader_ns.to_owned());
    re.metadata.labels = Some(
        [
            (labels::SOURCE_NAME, name),
            (labels::SOURCE_NAMESPACE, namespace),
            (labels::SOURCE_CLUSTER_ID, cluster_id),
            (labels::SOURCE_KIND, kind),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect(),
    );
    re
}

/// The Service and Endpoints ResourceExports of one exported Service; `marks` is the
/// ServiceExport's spec (the labels and annotations it exports).
pub fn exports_for(
    cluster_id: &str,
    leader_ns: &str,
    namespace: &str,
    name: &str,
    exported: &Exported,
    marks: Option<&ServiceExportSpec>,
) -> [ResourceExport; 2] {
    let marks = marks.cloned().unwrap_or_default();
    [
        export_object(
            cluster_id,
            leader_ns,
            namespace,
            name,
            kinds::SERVICE,
            ResourceExportSpec {
                service: Some(ServicePayload {
                    service_spec: Some(Box::new(ServiceSpec {
                        ports: Some(exported.ports.clone()),
                        ..exported.traits.clone()
                    })),
                    exported_labels: marks.exported_labels,
                    exported_annotations: marks.exported_annotations,
                }),
                ..Default::default()
            },
        ),
        export_object(
            cluster_id,
            leader_ns,
            namespace,
            name,
            kinds::ENDPOINTS,
            ResourceExportSpec {
                endpoints: Some(EndpointsExport {
                    subsets: exported.subsets.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            },
        ),
    ]
}

/// This cluster's ClusterInfo export, from its current Gateway: the gateway IP, the Service CIDR
/// the Gateway carries and the cluster's Pod CIDRs.
pub fn cluster_info_export(
    cluster_id: &str,
    leader_ns: &str,
    member_ns: &str,
    gateway: &Gateway,
    pod_cidrs: Vec<String>,
) -> ResourceExport {
    let name = names::cluster_info_export(cluster_id);
    let mut re = ResourceExport::new(
        &name,
        ResourceExportSpec {
            cluster_id: Some(cluster_id.to_owned()),
            name: Some(cluster_id.to_owned()),
            namespace: Some(member_ns.to_owned()),
            kind: Some(kinds::CLUSTER_INFO.into()),
            cluster_info: Some(ClusterInfo {
                cluster_id: Some(cluster_id.to_owned()),
                service_cidr: gateway.spec.service_cidr.clone(),
                gateway_infos: vec![GatewayInfo {
                    gateway_ip: gateway.spec.gateway_ip.clone(),
                }],
                pod_cidrs,
                wire_guard: gateway.spec.wire_guard.clone(),
            }),
            ..Default::default()
        },
    );
    re.metadata.namespace = Some(leader_ns.to_owned());
    re.metadata.labels = Some(
        [
            (
                labels::SOURCE_KIND.to_owned(),
                kinds::CLUSTER_INFO.to_owned(),
            ),
            (labels::SOURCE_CLUSTER_ID.to_owned(), cluster_id.to_owned()),
        ]
        .into(),
    );
    re
}

/// The normalized labels of this cluster's Pods (as Antrea, every Pod counts, host-network ones
/// included): one LabelIdentity export each. `namespaces` gives each Namespace's labels (the
/// API server sets `kubernetes.io/metadata.name` on every one); a Pod whose Namespace is not
/// known yet is left out until it is.
pub fn pod_labels<'a>(
    pods: impl IntoIterator<Item = &'a Pod>,
    namespaces: &BTreeMap<String, BTreeMap<String, String>>,
) -> BTreeSet<String> {
    let none = BTreeMap::new();
    pods.into_iter()
        .filter_map(|pod| {
            let ns = namespaces.get(pod.metadata.namespace.as_deref()?)?;
            Some(normalized_label(
                ns,
                pod.metadata.labels.as_ref().unwrap_or(&none),
            ))
        })
        .collect()
}

/// This cluster's export of one normalized label: `<clusterID>-<hash>`, no
/// finalizer, source labels for kind and cluster only.
pub fn label_identity_export(cluster_id: &str, leader_ns: &str, label: &str) -> ResourceExport {
    let name = names::label_identity_export(cluster_id, &label_hash(label));
    let mut re = ResourceExport::new(
        &name,
        ResourceExportSpec {
            cluster_id: Some(cluster_id.to_owned()),
            kind: Some(kinds::LABEL_IDENTITY.into()),
            label_identity: Some(LabelIdentityExport {
                normalized_label: Some(label.to_owned()),
            }),
            ..Default::default()
        },
    );
    re.metadata.namespace = Some(leader_ns.to_owned());
    re.metadata.labels = Some(
        [
            (
                labels::SOURCE_KIND.to_owned(),
                kinds::LABEL_IDENTITY.to_owned(),
            ),
            (labels::SOURCE_CLUSTER_ID.to_owned(), cluster_id.to_owned()),
        ]
        .into(),
    );
    re
}

/// A ServiceExport's conditions, `(type, status, reason, message)`: `Valid` (as Antrea) and the
/// standard MCS `Ready` and `Conflict`, from the local decision and the leader's verdict on the
/// Service export.
pub fn service_export_conditions(
    decision: &Result<Exported, Invalid>,
    verdict: Option<&Verdict>,
) -> Vec<(&'static str, &'static str, String, String)> {
    let c = |t, s, r: &str, m: &str| (t, s, r.to_owned(), m.to_owned());
    let valid = c(
        "Valid",
        "True",
        "Succeed",
        "The Service is exported successfully",
    );
    match (decision, verdict) {
        (Err(inv), _) => vec![
            c("Valid", "False", inv.reason, &inv.message),
            c("Ready", "False", "Failed", "The ServiceExport is not valid"),
        ],
        (Ok(_), Some(Verdict::Failure(message))) => {
            vec![valid, c("Ready", "False", "Failed", message)]
        }
        (
            Ok(_),
            Some(Verdict::Conflict {
                accepted,
                reasons,
                message,
            }),
        ) => vec![
            valid,
            if *accepted {
                c(
                    "Ready",
                    "True",
                    "Exported",
                    "The Service is exported to the ClusterSet",
                )
            } else {
                c("Ready", "False", "Failed", "The leader refused the export")
            },
            c("Conflict", "True", &ConflictReason::join(reasons), message),
        ],
        (Ok(_), Some(Verdict::Succeeded)) => vec![
            valid,
            c(
                "Ready",
                "True",
                "Exported",
                "The Service is exported to the ClusterSet",
            ),
            c(
                "Conflict",
                "False",
                "NoConflicts",
                "No conflicts with other exports",
            ),
        ],
        (Ok(_), None) => vec![
            valid,
            c("Ready", "False", "Pending", "Waiting for the leader"),
        ],
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::{
        core::v1::{Pod, Service, ServicePort, ServiceSpec},
        discovery::v1::{Endpoint, EndpointConditions, EndpointSlice},
    };
    use kube::ResourceExt as _;
    use mc_api::{
        config::EndpointIpType,
        exports::{ConflictReason, Verdict},
        gateway::Gateway,
        names::{self, annotations, labels},
    };

    use super::{
        Exported, Invalid, cluster_info_export, decide, exports_for, invalid,
        label_identity_export, pod_labels, service_export_conditions,
    };

    fn service(cluster_ip: &str) -> Service {
        Service {
            metadata: kube::api::ObjectMeta {
                name: Some("nginx".into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                cluster_ip: Some(cluster_ip.into()),
                cluster_ips: Some(vec![cluster_ip.into()]),
                ports: Some(vec![ServicePort {
                    name: Some("http".into()),
                    port: 80,
                    protocol: Some("TCP".into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn slice(endpoints: &[(&str, Option<bool>)]) -> EndpointSlice {
        EndpointSlice {
            address_type: "IPv4".into(),
            endpoints: Some(
                endpoints
                    .iter()
                    .map(|(ip, ready)| Endpoint {
                        addresses: vec![(*ip).into()],
                        conditions: Some(EndpointConditions {
                            ready: *ready,
                            ..Default::default()
                        }),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ports: Some(vec![k8s_openapi::api::discovery::v1::EndpointPort {
                name: Some("http".into()),
                port: Some(8080),
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            metadata: Default::default(),
        }
    }

    fn ips(e: &Exported) -> Vec<String> {
        e.subsets
            .iter()
            .flat_map(|s| s.addresses.clone().unwrap_or_default())
            .map(|a| a.ip)
            .collect()
    }

    #[test]
    fn cluster_ip_mode_exports_the_cluster_ip_with_service_ports() {
        let s = slice(&[("10.244.1.5", Some(true)), ("10.244.1.6", Some(false))]);
        let e = decide(
            Some(&service("10.98.0.20")),
            &[&s],
            EndpointIpType::ClusterIP,
        )
        .unwrap();
        assert_eq!(ips(&e), ["10.98.0.20"]);
        assert_eq!(e.subsets[0].ports.as_ref().unwrap()[0].port, 80);
        let [svc_re, eps_re] =
            exports_for("west", "antrea-multicluster", "default", "nginx", &e, None);
        assert_eq!(
            svc_re.metadata.name.as_deref(),
            Some("west-default-nginx-service")
        );
        assert_eq!(
            eps_re.metadata.name.as_deref(),
            Some("west-default-nginx-endpoints")
        );
        assert_eq!(
            eps_re.labels().get("sourceKind").map(String::as_str),
            Some("Endpoints")
        );
    }

    #[test]
    fn pod_ip_mode_exports_ready_pod_ips_with_target_ports() {
        let s = slice(&[
            ("10.244.1.6", None),
            ("10.244.1.5", Some(true)),
            ("10.244.1.7", Some(false)),
        ]);
        let e = decide(Some(&service("10.98.0.20")), &[&s], EndpointIpType::PodIP).unwrap();
        assert_eq!(ips(&e), ["10.244.1.5", "10.244.1.6"]);
        assert_eq!(e.subsets[0].ports.as_ref().unwrap()[0].port, 8080);
    }

    #[test]
    fn a_headless_service_exports_its_pods_with_their_hostnames_in_either_mode() {
        let mut s = slice(&[("10.244.1.6", None), ("10.244.1.5", Some(false))]);
        s.endpoints.as_mut().unwrap()[0].hostname = Some("web-0".into());
        for mode in [EndpointIpType::ClusterIP, EndpointIpType::PodIP] {
            let e = decide(Some(&service("None")), &[&s], mode).unwrap();
            assert_eq!(ips(&e), ["10.244.1.6"]);
            let address = &e.subsets[0].addresses.as_ref().unwrap()[0];
            assert_eq!(address.hostname.as_deref(), Some("web-0"));
            assert_eq!(e.subsets[0].ports.as_ref().unwrap()[0].port, 8080);
            // The leader tells a headless export by its clusterIP.
            assert_eq!(e.traits.cluster_ip.as_deref(), Some("None"));
        }
        let e = decide(Some(&service("10.98.0.20")), &[&s], EndpointIpType::PodIP).unwrap();
        assert_eq!(e.traits.cluster_ip, None);
    }

    #[test]
    fn invalid_services_say_why() {
        let ready = slice(&[("10.244.1.5", Some(true))]);
        let cases: Vec<(Option<Service>, Vec<&EndpointSlice>, &str)> = vec![
            (None, vec![&ready], "ServiceNotFound"),
            (Some(service("")), vec![&ready], "ServiceNoClusterIP"),
            (Some(service("None")), vec![], "ServiceWithoutEndpoints"),
            (
                Some(service("10.98.0.20")),
                vec![],
                "ServiceWithoutEndpoints",
            ),
            (
                Some({
                    let mut s = service("10.98.0.20");
                    s.spec.as_mut().unwrap().type_ = Some("ExternalName".into());
                    s
                }),
                vec![&ready],
                "ServiceTypeNotSupported",
            ),
            (
                Some({
                    let mut s = service("10.98.0.20");
                    s.metadata.annotations = Some(
                        [(annotations::IMPORTED_SERVICE.to_owned(), "true".to_owned())].into(),
                    );
                    s
                }),
                vec![&ready],
                "ImportedService",
            ),
        ];
        for (svc, slices, reason) in cases {
            let e = decide(svc.as_ref(), &slices, EndpointIpType::ClusterIP).unwrap_err();
            assert_eq!(e.reason, reason);
        }
    }

    #[test]
    fn service_export_conditions_follow_the_decision_and_the_leaders_verdict() {
        let types = |v: Vec<(&str, &str, String, String)>| -> Vec<(String, String, String)> {
            v.into_iter()
                .map(|(t, s, r, _)| (t.to_owned(), s.to_owned(), r))
                .collect()
        };
        let t = |a: &str, b: &str, c: &str| (a.to_owned(), b.to_owned(), c.to_owned());
        let ok: Result<Exported, Invalid> = Ok(Exported::default());
        assert_eq!(
            types(service_export_conditions(&ok, None)),
            [
                t("Valid", "True", "Succeed"),
                t("Ready", "False", "Pending")
            ]
        );
        assert_eq!(
            types(service_export_conditions(&ok, Some(&Verdict::Succeeded))),
            [
                t("Valid", "True", "Succeed"),
                t("Ready", "True", "Exported"),
                t("Conflict", "False", "NoConflicts")
            ]
        );
        // A refusal that is no conflict (a malformed export): not Ready, with the leader's word.
        let refused = service_export_conditions(&ok, Some(&Verdict::Failure("no ports".into())));
        assert_eq!(
            types(refused.clone()),
            [t("Valid", "True", "Succeed"), t("Ready", "False", "Failed")]
        );
        assert_eq!(refused[1].3, "no ports");
        // A conflict is reported whether this cluster's export won (Ready) or lost (not Ready).
        for (accepted, ready, why) in [(true, "True", "Exported"), (false, "False", "Failed")] {
            let conflict = Verdict::Conflict {
                accepted,
                reasons: vec![ConflictReason::Port, ConflictReason::Labels],
                message: "ports differ".into(),
            };
            let conditions = service_export_conditions(&ok, Some(&conflict));
            assert_eq!(
                types(conditions.clone()),
                [
                    t("Valid", "True", "Succeed"),
                    t("Ready", ready, why),
                    t("Conflict", "True", "PortConflict,LabelsConflict")
                ]
            );
            assert_eq!(conditions[2].3, "ports differ");
        }
        let invalid = Err(invalid("ServiceNotFound", "Service does not exist"));
        assert_eq!(
            types(service_export_conditions(
                &invalid,
                Some(&Verdict::Succeeded)
            )),
            [
                t("Valid", "False", "ServiceNotFound"),
                t("Ready", "False", "Failed")
            ]
        );
    }

    #[test]
    fn the_cluster_info_export_carries_the_gateway() {
        let gw = Gateway::new(
            "node-a",
            mc_api::gateway::GatewayFields {
                gateway_ip: Some("198.18.11.1".into()),
                internal_ip: Some("198.18.11.1".into()),
                service_cidr: Some("10.97.0.0/16".into()),
                ..Default::default()
            },
        );
        let re = cluster_info_export(
            "east",
            "antrea-multicluster",
            "kube-system",
            &gw,
            vec!["10.244.0.0/16".into()],
        );
        assert_eq!(re.metadata.name.as_deref(), Some("east-clusterinfo"));
        assert_eq!(
            re.metadata.namespace.as_deref(),
            Some("antrea-multicluster")
        );
        let info = re.spec.cluster_info.unwrap();
        assert_eq!(info.service_cidr.as_deref(), Some("10.97.0.0/16"));
        assert_eq!(
            info.gateway_infos[0].gateway_ip.as_deref(),
            Some("198.18.11.1")
        );
        assert_eq!(info.pod_cidrs, ["10.244.0.0/16"]);
    }

    #[test]
    fn each_distinct_pod_label_is_exported_once_under_its_hash() {
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        let pod = |ns: &str, name: &str, l: &[(&str, &str)]| Pod {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                labels: (!l.is_empty()).then(|| labels(l)),
                ..Default::default()
            },
            ..Default::default()
        };
        let namespaces: BTreeMap<String, BTreeMap<String, String>> = [
            (
                "prod".to_owned(),
                labels(&[("kubernetes.io/metadata.name", "prod"), ("env", "prod")]),
            ),
            (
                "dev".to_owned(),
                labels(&[("kubernetes.io/metadata.name", "dev")]),
            ),
        ]
        .into();
        let pods = [
            pod("prod", "db-0", &[("app", "db")]),
            pod("prod", "db-1", &[("app", "db")]), // the same label: one export
            pod("dev", "db-0", &[("app", "db")]),  // another Namespace: another label
            pod("dev", "bare", &[]),
            pod("gone", "x", &[("app", "db")]), // Namespace not seen yet: left out
        ];
        let set = pod_labels(&pods, &namespaces);
        assert_eq!(
            set.iter().map(String::as_str).collect::<Vec<_>>(),
            [
                "ns:env=prod,kubernetes.io/metadata.name=prod&pod:app=db",
                "ns:kubernetes.io/metadata.name=dev&pod:",
                "ns:kubernetes.io/metadata.name=dev&pod:app=db",
            ]
        );
        let re = label_identity_export("east", "antrea-multicluster", "ns:a=b&pod:c=d");
        assert_eq!(re.name_any(), "east-1e5106b3b89537a1");
        assert_eq!(re.namespace().as_deref(), Some("antrea-multicluster"));
        assert_eq!(re.spec.kind(), mc_api::exports::Kind::LabelIdentity);
        assert_eq!(
            re.spec
                .label_identity
                .as_ref()
                .and_then(|l| l.normalized_label.as_deref()),
            Some("ns:a=b&pod:c=d")
        );
        assert_eq!(
            re.labels().get(labels::SOURCE_KIND).map(String::as_str),
            Some("LabelIdentity")
        );
        assert!(re.finalizers().is_empty());
        assert_eq!(
            names::label_hash_of_export(&re.name_any()),
            "1e5106b3b89537a1"
        );
    }
}
