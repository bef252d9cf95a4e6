//! Property tests of the controllers' pure desired-state functions over arbitrary objects
//! (issue 24): the leader's merge, the member's import plan, the gateway election and the
//! webhook's rules, fed what other clusters and users may write — missing fields, long lists,
//! duplicate and ambiguous names, invalid IPs, CIDRs and ports, unicode, objects of other
//! clusters. None may panic, and what they produce keeps the invariants the rest of Strait relies
//! on. `PROPTEST_CASES=<n>` runs more cases, `PROPTEST_RNG_SEED=<n>` other ones (the default seed is
//! fixed); a failure prints the smallest input proptest found.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use k8s_openapi::{
    api::core::v1::{
        EndpointAddress, EndpointPort, EndpointSubset, Node, NodeAddress, NodeCondition,
        NodeStatus, ServicePort, ServiceSpec,
    },
    apimachinery::pkg::apis::meta::v1::Time,
    jiff::Timestamp,
};
use mc_api::{
    clusterinfo::{ClusterInfo, GatewayInfo},
    config::GatewayIpPrecedence,
    exports::{
        ClusterSubsets, EndpointsExport, LabelIdentityExport, ResourceExport, ResourceExportSpec,
        ServiceExport, Verdict,
    },
    imports::{ResourceImport, kinds},
};
use mc_controller::leader::{
    announce::{self, Accepted},
    merge::{Merged, announcements},
};
use proptest::{
    collection::vec,
    option,
    prelude::*,
    test_runner::{Config, RngSeed, TestCaseError},
};

const LEADER_NS: &str = "antrea-multicluster";

/// Short strings that collide on purpose (`a-b`/`c` and `a`/`b-c` make the same import name),
/// empty ones, unicode and a long one.
fn word() -> BoxedStrategy<String> {
    prop_oneof![
        4 => prop::sample::select(vec!["default", "web", "a", "b-c", "a-b", "c", "east", "west"])
            .prop_map(str::to_owned),
        1 => Just(String::new()),
        1 => Just("ünïcödé-名前".to_owned()),
        1 => Just("x".repeat(300)),
        1 => "[a-z0-9.-]{1,12}",
    ]
    .boxed()
}

fn cluster() -> BoxedStrategy<String> {
    prop_oneof![
        4 => prop::sample::select(vec!["east", "west", "north"]).prop_map(str::to_owned),
        1 => word(),
    ]
    .boxed()
}

/// An IP-ish string: mostly valid IPv4, sometimes IPv6 or garbage.
fn ip() -> BoxedStrategy<String> {
    prop_oneof![
        6 => (0u8..4, 0u8..4).prop_map(|(a, b)| format!("10.{a}.0.{b}")),
        1 => Just("fd00::1".to_owned()),
        1 => Just("300.1.2.3".to_owned()),
        1 => Just(String::new()),
        1 => ".{0,20}",
    ]
    .boxed()
}

fn port_name() -> impl Strategy<Value = Option<String>> {
    option::of(prop::sample::select(vec!["http", "dns", "", "h2"]).prop_map(str::to_owned))
}

fn protocol() -> impl Strategy<Value = Option<String>> {
    option::of(
        prop::sample::select(vec!["TCP", "UDP", "SCTP", "tcp", "bogus"]).prop_map(str::to_owned),
    )
}

fn port_number() -> impl Strategy<Value = i32> {
    prop_oneof![
        4 => prop::sample::select(vec![53, 80, 443, 8080]),
        1 => any::<i32>(),
    ]
}

fn service_ports() -> impl Strategy<Value = Option<Vec<ServicePort>>> {
    option::weighted(
        0.9,
        vec(
            (port_name(), port_number(), protocol()).prop_map(|(name, port, protocol)| {
                ServicePort {
                    name,
                    port,
                    protocol,
                    ..Default::default()
                }
            }),
            0..4,
        ),
    )
}

fn subset() -> BoxedStrategy<EndpointSubset> {
    let address = || {
        (ip(), option::of(word())).prop_map(|(ip, hostname)| EndpointAddress {
            ip,
            hostname,
            ..Default::default()
        })
    };
    let port =
        (port_name(), port_number(), protocol()).prop_map(|(name, port, protocol)| EndpointPort {
            name,
            port,
            protocol,
            app_protocol: None,
        });
    (
        option::of(vec(address(), 0..4)),
        option::of(vec(address(), 0..2)),
        option::of(vec(port, 0..3)),
    )
        .prop_map(|(addresses, not_ready_addresses, ports)| EndpointSubset {
            addresses,
            not_ready_addresses,
            ports,
        })
        .boxed()
}

fn kind() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        8 => prop::sample::select(vec![
            "Service", "Service", "Endpoints", "Endpoints", "ClusterInfo", "LabelIdentity",
            "AntreaClusterNetworkPolicy", "service", "Bogus",
        ])
        .prop_map(|k| Some(k.to_owned())),
        1 => Just(None),
    ]
}

/// A ResourceExport as any member (or anyone with write access) could write it: usually named as
/// the webhook demands, sometimes not; fields of the wrong kind, missing or invalid.
fn resource_export() -> BoxedStrategy<ResourceExport> {
    let spec = (
        option::of(cluster()),
        option::of(word()),
        option::of(word()),
        kind(),
        option::of((
            service_ports(),
            any::<bool>(),
            option::of(prop::sample::select(vec!["ClientIP", "None", "x"])),
        )),
        option::of((vec(subset(), 0..4), vec((cluster(), 0u32..4), 0..3))),
        option::of((option::of(cluster()), option::of(word()), vec(ip(), 0..3))),
        option::of(word()),
    );
    (spec, any::<bool>(), 0i64..5, any::<bool>(), word())
        .prop_map(
            |(
                (cluster_id, namespace, name, kind, service, endpoints, info, label),
                named_well,
                age,
                deleted,
                odd_name,
            )| {
                let spec = ResourceExportSpec {
                    cluster_id: cluster_id.clone(),
                    namespace: namespace.clone(),
                    name: name.clone(),
                    kind: kind.clone(),
                    service: service.map(|(ports, headless, affinity)| ServiceExport {
                        service_spec: Some(Box::new(ServiceSpec {
                            ports,
                            cluster_ip: headless.then(|| "None".to_owned()),
                            session_affinity: affinity.map(str::to_owned),
                            ..Default::default()
                        })),
                        ..Default::default()
                    }),
                    endpoints: endpoints.map(|(subsets, counts)| EndpointsExport {
                        subsets,
                        cluster_subsets: counts
                            .into_iter()
                            .map(|(cluster_id, count)| ClusterSubsets { cluster_id, count })
                            .collect(),
                    }),
                    cluster_info: info.map(|(cluster_id, service_cidr, gateways)| ClusterInfo {
                        cluster_id,
                        service_cidr,
                        gateway_infos: gateways
                            .into_iter()
                            .map(|ip| GatewayInfo {
                                gateway_ip: Some(ip),
                            })
                            .collect(),
                        ..Default::default()
                    }),
                    label_identity: label.map(|l| LabelIdentityExport {
                        normalized_label: Some(l),
                    }),
                    ..Default::default()
                };
                let id = cluster_id.unwrap_or_default();
                let re_name = if named_well {
                    match kind.as_deref() {
                        Some("ClusterInfo") => format!("{id}-clusterinfo"),
                        Some("LabelIdentity") => format!("{id}-{}", "0123456789abcdef"),
                        Some(k) => mc_api::names::resource_export(
                            &id,
                            namespace.as_deref().unwrap_or_default(),
                            name.as_deref().unwrap_or_default(),
                            k,
                        ),
                        None => odd_name,
                    }
                } else {
                    odd_name
                };
                let mut re = ResourceExport::new(&re_name, spec);
                re.metadata.creation_timestamp = Some(Time(
                    Timestamp::from_second(1_700_000_000 + age).expect("timestamp"),
                ));
                if deleted {
                    re.metadata.deletion_timestamp = re.metadata.creation_timestamp.clone();
                }
                re
            },
        )
        .boxed()
}

/// A member's two exports of one Service, as a member writes them (names, kinds and source
/// fields agree), from small pools so that clusters share Services and disagree on ports and
/// headlessness; the endpoints are arbitrary.
fn service_pair() -> BoxedStrategy<Vec<ResourceExport>> {
    (
        prop::sample::select(vec!["east", "west", "north"]),
        prop::sample::select(vec![("default", "web"), ("a-b", "c"), ("a", "b-c")]),
        vec(
            (
                prop::sample::select(vec!["http", "dns", ""]),
                prop::sample::select(vec![53, 80]),
            ),
            0..3,
        ),
        prop::bool::weighted(0.2),
        (
            vec((vec(ip(), 0..3), vec(ip(), 0..2)), 0..3),
            prop::bool::weighted(0.8),
            vec(subset(), 0..2),
        ),
        0i64..5,
        prop::bool::weighted(0.1),
    )
        .prop_map(
            |(cluster, (ns, name), ports, headless, (addresses, alike, odd), age, deleted)| {
                let make = |kind: &str, spec: ResourceExportSpec| {
                    let mut re = ResourceExport::new(
                        &mc_api::names::resource_export(cluster, ns, name, kind),
                        ResourceExportSpec {
                            cluster_id: Some(cluster.into()),
                            namespace: Some(ns.into()),
                            name: Some(name.into()),
                            kind: Some(kind.into()),
                            ..spec
                        },
                    );
                    re.metadata.creation_timestamp = Some(Time(
                        Timestamp::from_second(1_700_000_000 + age).expect("timestamp"),
                    ));
                    if deleted {
                        re.metadata.deletion_timestamp = re.metadata.creation_timestamp.clone();
                    }
                    re
                };
                let ports: Vec<ServicePort> = ports
                    .into_iter()
                    .map(|(n, port)| ServicePort {
                        name: (!n.is_empty()).then(|| n.to_owned()),
                        port,
                        protocol: Some("TCP".into()),
                        ..Default::default()
                    })
                    .collect();
                // Usually the endpoints of the Service's own ports; sometimes anything.
                let endpoint_ports: Vec<EndpointPort> = ports
                    .iter()
                    .map(|p| EndpointPort {
                        name: p.name.clone(),
                        port: p.port,
                        protocol: p.protocol.clone(),
                        app_protocol: None,
                    })
                    .collect();
                let listed = |ips: Vec<String>| {
                    (!ips.is_empty()).then(|| {
                        ips.into_iter()
                            .map(|ip| EndpointAddress {
                                ip,
                                ..Default::default()
                            })
                            .collect()
                    })
                };
                let subsets: Vec<EndpointSubset> = if alike {
                    addresses
                        .into_iter()
                        .map(|(ready, not_ready)| EndpointSubset {
                            addresses: listed(ready),
                            not_ready_addresses: listed(not_ready),
                            ports: Some(endpoint_ports.clone()),
                        })
                        .collect()
                } else {
                    odd
                };
                vec![
                    make(
                        "Service",
                        ResourceExportSpec {
                            service: Some(ServiceExport {
                                service_spec: Some(Box::new(ServiceSpec {
                                    ports: Some(ports),
                                    cluster_ip: headless.then(|| "None".to_owned()),
                                    ..Default::default()
                                })),
                                ..Default::default()
                            }),
                            ..Default::default()
                        },
                    ),
                    make(
                        "Endpoints",
                        ResourceExportSpec {
                            endpoints: Some(EndpointsExport {
                                subsets,
                                cluster_subsets: Vec::new(),
                            }),
                            ..Default::default()
                        },
                    ),
                ]
            },
        )
        .boxed()
}

/// Exports with unique names (the API server's): members' Service exports and arbitrary ones.
fn exports() -> impl Strategy<Value = Vec<Arc<ResourceExport>>> {
    (vec(service_pair(), 0..6), vec(resource_export(), 0..12)).prop_map(|(pairs, odd)| {
        let mut seen = BTreeSet::new();
        pairs
            .into_iter()
            .flatten()
            .chain(odd)
            .filter(|re| seen.insert(re.metadata.name.clone()))
            .map(Arc::new)
            .collect()
    })
}

/// The cases of each property: 512, or `PROPTEST_CASES`; a fixed seed, so that the test command
/// is repeatable, or `PROPTEST_RNG_SEED=<n>` for another.
fn config() -> Config {
    let default = Config::default();
    let from_env = |name: &str| std::env::var(name).is_ok();
    Config {
        cases: if from_env("PROPTEST_CASES") {
            default.cases
        } else {
            512
        },
        rng_seed: if from_env("PROPTEST_RNG_SEED") {
            default.rng_seed
        } else {
            RngSeed::Fixed(20261126)
        },
        // No regression files written into the source tree: a failure prints its input.
        failure_persistence: None,
        ..default
    }
}

/// A spec field as the merge reads it (the exports made here carry no source labels).
fn field(v: &Option<String>) -> String {
    v.clone().unwrap_or_default()
}

/// The leader's merge as its loop runs it: every ClusterInfo among `exports` weighed first. A
/// cluster that announces none gets a fixed part of the generator's addresses (east
/// 10.0.0.0/15, west 10.2.0.0/16, north 10.3.0.0/16), so that its endpoints are judged too.
fn merge(
    ns: &str,
    exports: &[Arc<ResourceExport>],
    existing: &[Arc<ResourceImport>],
    withdrawn: &BTreeSet<String>,
) -> Merged {
    let infos = announcements(exports, existing);
    let mut announced = announce::weigh(&infos, &announce::Rules::new(8));
    for (cluster, service) in [
        ("east", "10.0.0.0/15"),
        ("west", "10.2.0.0/16"),
        ("north", "10.3.0.0/16"),
    ] {
        if !infos.iter().any(|a| a.cluster == cluster) {
            announced.accepted.insert(
                cluster.to_owned(),
                Accepted {
                    service: mc_api::net::Prefix::parse(service).unwrap(),
                    pods: vec![],
                    gateways: vec![],
                },
            );
        }
    }
    let over = mc_controller::leader::merge::over_quota(
        exports,
        mc_controller::leader::merge::Quota {
            services: 2,
            label_identities: 2,
        },
    );
    mc_controller::leader::merge::merge(ns, exports, existing, withdrawn, &announced, &over)
}

/// The imports a merge gives, as ResourceImport objects (what the members read next).
fn as_imports(
    merged: &BTreeMap<String, mc_api::imports::ResourceImportSpec>,
) -> Vec<Arc<ResourceImport>> {
    merged
        .iter()
        .map(|(name, spec)| Arc::new(ResourceImport::new(name, spec.clone())))
        .collect()
}

proptest! {
    #![proptest_config(config())]

    /// The leader's merge of arbitrary exports: no panic; the same exports in any order and
    /// merged again over its own imports give the same imports and verdicts; one import per
    /// source object and kind; an Endpoints import only beside its Service's, whose clusters add
    /// up and include no withdrawn cluster and no cluster whose Service export was refused; a
    /// verdict only for live exports.
    #[test]
    fn the_leaders_merge_keeps_its_invariants(
        exports in exports(),
        withdrawn in vec(cluster(), 0..2),
        seed in any::<u64>(),
    ) {
        let withdrawn: BTreeSet<String> = withdrawn.into_iter().collect();
        let merged = merge(LEADER_NS, &exports, &[], &withdrawn);

        // Deterministic, whatever the order of the watch's list.
        let mut shuffled = exports.clone();
        let n = shuffled.len();
        if n > 1 {
            for i in 0..n {
                let j = (seed.wrapping_mul(6364136223846793005).wrapping_add(i as u64) % n as u64) as usize;
                shuffled.swap(i, j);
            }
        }
        let again = merge(LEADER_NS, &shuffled, &[], &withdrawn);
        prop_assert_eq!(&again.imports, &merged.imports);
        prop_assert_eq!(&again.verdicts, &merged.verdicts);
        // Stable over its own output (the next pass reads the imports it wrote).
        let next = merge(LEADER_NS, &exports, &as_imports(&merged.imports), &withdrawn);
        prop_assert_eq!(&next.imports, &merged.imports);

        let live: BTreeMap<String, &ResourceExport> = exports
            .iter()
            .filter(|re| re.metadata.deletion_timestamp.is_none())
            .map(|re| (re.metadata.name.clone().unwrap_or_default(), re.as_ref()))
            .collect();
        for name in merged.verdicts.keys() {
            prop_assert!(live.contains_key(name), "a verdict for {name}, which is not a live export");
        }
        // One import per (kind, namespace, name).
        let mut sources = BTreeSet::new();
        for spec in merged.imports.values() {
            let source = (spec.kind.clone(), spec.namespace.clone(), spec.name.clone());
            prop_assert!(sources.insert(source.clone()), "two imports of {source:?}");
        }
        for (ri_name, spec) in &merged.imports {
            if spec.kind.as_deref() != Some(kinds::ENDPOINTS) {
                continue;
            }
            let (ns, name) = (spec.namespace.clone().unwrap_or_default(), spec.name.clone().unwrap_or_default());
            let service = merged.imports.values().find(|s| {
                s.kind.as_deref() == Some(kinds::SERVICE_IMPORT)
                    && s.namespace.clone().unwrap_or_default() == ns
                    && s.name.clone().unwrap_or_default() == name
            });
            prop_assert!(service.is_some(), "{ri_name}: Endpoints without their Service import");
            let eps = spec.endpoints.as_ref().expect("an Endpoints import has endpoints");
            let clusters = eps.by_cluster();
            prop_assert!(
                clusters.is_some() || eps.subsets.is_empty(),
                "{ri_name}: cluster counts that do not add up"
            );
            for (cluster, _) in clusters.unwrap_or_default() {
                prop_assert!(!withdrawn.contains(cluster), "{ri_name}: endpoints of withdrawn {cluster}");
                // The cluster's Service export of this object was accepted.
                let accepted = live.iter().any(|(re_name, re)| {
                    re.spec.kind.as_deref() == Some("Service")
                        && (field(&re.spec.namespace), field(&re.spec.name)) == (ns.clone(), name.clone())
                        && field(&re.spec.cluster_id) == cluster
                        && matches!(
                            merged.verdicts.get(re_name),
                            Some(Verdict::Succeeded | Verdict::Conflict { accepted: true, .. })
                        )
                });
                prop_assert!(accepted, "{ri_name}: endpoints of {cluster}, whose Service export was not accepted");
            }
        }
    }
}

/// A Node as a member's cluster may hold it: annotated as a gateway candidate or not, Ready or
/// not, with or without (valid) addresses and gateway-IP annotation.
fn node() -> BoxedStrategy<Node> {
    (
        word(),
        any::<bool>(),
        option::of(ip()),
        option::of(ip()),
        option::of(ip()),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(name, candidate, gateway_ip, internal, external, ready, deleted)| {
                let mut n = Node::default();
                n.metadata.name = Some(name);
                let mut annotations = BTreeMap::new();
                if candidate {
                    annotations.insert(
                        "multicluster.antrea.io/gateway".to_owned(),
                        "true".to_owned(),
                    );
                }
                if let Some(ip) = gateway_ip {
                    annotations.insert("multicluster.antrea.io/gateway-ip".to_owned(), ip);
                }
                n.metadata.annotations = Some(annotations);
                if deleted {
                    n.metadata.deletion_timestamp =
                        Some(Time(Timestamp::from_second(1_700_000_000).expect("ts")));
                }
                let mut addresses = Vec::new();
                for (t, a) in [("InternalIP", internal), ("ExternalIP", external)] {
                    if let Some(address) = a {
                        addresses.push(NodeAddress {
                            type_: t.to_owned(),
                            address,
                        });
                    }
                }
                n.status = Some(NodeStatus {
                    addresses: Some(addresses),
                    conditions: Some(vec![NodeCondition {
                        type_: "Ready".into(),
                        status: if ready { "True" } else { "False" }.into(),
                        ..Default::default()
                    }]),
                    ..Default::default()
                });
                n
            },
        )
        .boxed()
}

proptest! {
    #![proptest_config(config())]

    /// The gateway election over arbitrary Nodes: at most one Gateway, always a Ready candidate
    /// that is not being deleted, with IP addresses that parse; the current Gateway stays while it
    /// may; every passed-over candidate is reported.
    #[test]
    fn the_gateway_election_picks_one_valid_candidate(
        nodes in vec(node(), 0..6).prop_map(|nodes| {
            // Node names are unique in a cluster.
            let mut seen = BTreeSet::new();
            nodes.into_iter().filter(|n| seen.insert(n.metadata.name.clone())).collect::<Vec<_>>()
        }),
        current in option::of(word()),
        precedence in prop::sample::select(vec![
            GatewayIpPrecedence::Private,
            GatewayIpPrecedence::Public,
            GatewayIpPrecedence::Internal,
            GatewayIpPrecedence::External,
        ]),
    ) {
        use mc_controller::member::gateway::elect;
        let refs: Vec<&Node> = nodes.iter().collect();
        let (gateway, problems) = elect(&refs, current.as_deref(), precedence, "10.96.0.0/16");
        let candidates: Vec<&Node> = nodes
            .iter()
            .filter(|n| n.metadata.annotations.as_ref().is_some_and(|a| a.contains_key("multicluster.antrea.io/gateway")))
            .collect();
        let Some(gw) = gateway else {
            prop_assert_eq!(problems.len(), candidates.len(), "every candidate passed over says why: {:?}", problems);
            return Ok(());
        };
        let name = gw.metadata.name.clone().unwrap_or_default();
        let node = candidates.iter().find(|n| n.metadata.name.as_deref() == Some(name.as_str()));
        prop_assert!(node.is_some(), "Gateway {name} is not a candidate");
        let node = node.unwrap();
        prop_assert!(node.metadata.deletion_timestamp.is_none());
        for ip in [&gw.spec.gateway_ip, &gw.spec.internal_ip] {
            let ip = ip.as_deref().unwrap_or_default();
            prop_assert!(ip.parse::<std::net::IpAddr>().is_ok(), "Gateway {name} with address {ip:?}");
        }
        // The current Gateway stays when it is still valid (same name, elected again alone).
        if let Some(current) = &current {
            let alone: Vec<&Node> = candidates.iter().copied().filter(|n| n.metadata.name.as_deref() == Some(current.as_str())).collect();
            if let (Some(_), _) = elect(&alone, Some(current), precedence, "10.96.0.0/16") {
                prop_assert_eq!(&name, current);
            }
        }
    }
}

/// What a member's import plan must keep, whatever the leader sent.
fn check_plan(
    plan: &mc_controller::member::import::Plan,
    namespaces: &BTreeSet<String>,
    own_prefix: &mc_api::net::Prefix,
    own_ready: &BTreeSet<String>,
) -> Result<(), TestCaseError> {
    fn key<T: kube::Resource>(o: &T) -> (String, String) {
        let m = o.meta();
        (
            m.namespace.clone().unwrap_or_default(),
            m.name.clone().unwrap_or_default(),
        )
    }
    // One object per name, each in a namespace that exists.
    let mut all = BTreeSet::new();
    for (kind, k) in plan
        .services
        .iter()
        .map(|o| ("Service", key(o)))
        .chain(plan.endpoints.iter().map(|o| ("Endpoints", key(o))))
        .chain(
            plan.service_imports
                .iter()
                .map(|o| ("ServiceImport", key(o))),
        )
        .chain(plan.awaiting_ip.values().map(|o| ("ServiceImport", key(o))))
        .chain(plan.mcs_slices.iter().map(|o| ("EndpointSlice", key(o))))
    {
        prop_assert!(
            namespaces.contains(&k.0),
            "{kind} {k:?} in a namespace that does not exist"
        );
        prop_assert!(all.insert((kind, k.clone())), "two {kind}s {k:?}");
    }
    for eps in &plan.endpoints {
        let (ns, name) = key(eps);
        prop_assert!(name.starts_with("antrea-mc-"), "Endpoints {name}");
        prop_assert!(
            plan.services
                .iter()
                .any(|s| key(s) == (ns.clone(), name.clone())),
            "Endpoints {ns}/{name} without its Service"
        );
        // No address of this cluster as the leader sent it: only its ready Pods.
        let addresses = |ready: bool| -> Vec<String> {
            let mut v: Vec<String> = eps
                .subsets
                .iter()
                .flatten()
                .flat_map(|s| {
                    if ready {
                        &s.addresses
                    } else {
                        &s.not_ready_addresses
                    }
                    .iter()
                    .flatten()
                })
                .map(|a| a.ip.clone())
                .collect();
            v.sort();
            v
        };
        for ip in addresses(true).iter().chain(&addresses(false)) {
            prop_assert!(
                !own_prefix.contains_ip(ip) || own_ready.contains(ip),
                "{ns}/{name}: this cluster's {ip} written as the leader sent it"
            );
        }
        // Kubernetes mirrors them, or Strait's slices hold exactly the same endpoints.
        let skip = eps
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("endpointslice.kubernetes.io/skip-mirror"));
        if skip.is_none() {
            continue;
        }
        let sliced = |ready: bool| -> Vec<String> {
            let mut v: Vec<String> = plan
                .mcs_slices
                .iter()
                .filter(|s| {
                    key(*s).0 == ns
                        && s.metadata
                            .labels
                            .as_ref()
                            .and_then(|l| l.get("kubernetes.io/service-name"))
                            == Some(&name)
                })
                .flat_map(|s| s.endpoints.iter().flatten())
                .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(ready))
                .map(|e| e.addresses[0].clone())
                .collect();
            v.sort();
            v
        };
        prop_assert_eq!(
            sliced(true),
            addresses(true),
            "{}/{}: ready endpoints",
            ns,
            name
        );
        prop_assert_eq!(
            sliced(false),
            addresses(false),
            "{}/{}: not-ready endpoints",
            ns,
            name
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    /// A member's import plan from what the leader merged of arbitrary exports, plus arbitrary
    /// imports: no panic; one object per name, only in namespaces that exist; no address of this
    /// cluster written as sent (only its ready Pods); and when the Endpoints are marked
    /// skip-mirror, kube-proxy's slices hold exactly their endpoints.
    #[test]
    fn a_members_import_plan_keeps_its_invariants(
        exports in exports(),
        odd in vec((word(), word(), kind(), option::of((vec(subset(), 0..3), vec((cluster(), 0u32..4), 0..3)))), 0..6),
        own_cluster in prop::sample::select(vec!["east", "west", "north"]),
        own_ready in vec((0u8..4, prop::sample::select(vec!["http", "dns", ""]), prop::sample::select(vec![53, 80])), 0..3),
        existing in vec(prop::sample::select(vec!["default", "a-b", "a"]), 0..3),
    ) {
        use mc_controller::member::import::{Local, OwnEndpoints, plan};
        let merged = merge(LEADER_NS, &exports, &[], &BTreeSet::new());
        let mut imports = as_imports(&merged.imports);
        for (ns, name, kind, eps) in odd {
            let spec = mc_api::imports::ResourceImportSpec {
                namespace: Some(ns.clone()),
                name: Some(name.clone()),
                kind,
                endpoints: eps.map(|(subsets, counts)| EndpointsExport {
                    subsets,
                    cluster_subsets: counts
                        .into_iter()
                        .map(|(cluster_id, count)| ClusterSubsets { cluster_id, count })
                        .collect(),
                }),
                ..Default::default()
            };
            imports.push(Arc::new(ResourceImport::new(&format!("odd-{ns}-{name}-{}", imports.len()), spec)));
        }
        // This cluster: Pod CIDR 10.1.0.0/16, its ready Pods of every Service it could export.
        let own_prefix = mc_api::net::Prefix::parse("10.1.0.0/16").expect("prefix");
        let own_prefixes = vec![own_prefix];
        let ready: Vec<EndpointSubset> = own_ready
            .iter()
            .map(|(host, port, number)| EndpointSubset {
                addresses: Some(vec![EndpointAddress { ip: format!("10.1.9.{host}"), ..Default::default() }]),
                ports: Some(vec![EndpointPort {
                    name: (!port.is_empty()).then(|| (*port).to_owned()),
                    port: *number,
                    protocol: Some("TCP".into()),
                    app_protocol: None,
                }]),
                not_ready_addresses: None,
            })
            .collect();
        let own_ready_ips: BTreeSet<String> = own_ready.iter().map(|(h, _, _)| format!("10.1.9.{h}")).collect();
        let mut own_endpoints = BTreeMap::new();
        for (ns, name) in [("default", "web"), ("a-b", "c"), ("a", "b-c")] {
            own_endpoints.insert(
                (ns.to_owned(), name.to_owned()),
                OwnEndpoints { addresses: BTreeSet::new(), ready: ready.clone() },
            );
        }
        let namespaces: BTreeSet<String> = existing.into_iter().map(str::to_owned).collect();
        let (services, service_imports, mcs_slices, acnps, tiers) =
            (BTreeMap::new(), BTreeMap::new(), BTreeMap::new(), BTreeMap::new(), BTreeSet::new());
        let local = Local {
            cluster_id: own_cluster,
            member_ns: "kube-system",
            namespaces: &namespaces,
            services: &services,
            service_imports: &service_imports,
            mcs_slices: &mcs_slices,
            acnps: &acnps,
            tiers: &tiers,
            own_prefixes: &own_prefixes,
            own_endpoints: &own_endpoints,
            stretched: true,
        };
        let p = plan(&imports, &local);
        check_plan(&p, &namespaces, &own_prefix, &own_ready_ips)?;
    }
}

/// A JSON value where the webhook reads a field: usually a string from the pools, sometimes
/// anything else.
fn json_leaf() -> BoxedStrategy<serde_json::Value> {
    use serde_json::{Value, json};
    prop_oneof![
        6 => word().prop_map(Value::String),
        1 => Just(Value::Null),
        1 => any::<i64>().prop_map(|n| json!(n)),
        1 => any::<bool>().prop_map(Value::Bool),
        1 => vec(word(), 0..3).prop_map(|v| json!(v)),
        1 => Just(json!({"x": {"y": 1}})),
    ]
    .boxed()
}

/// An object as the API server hands the webhook a ResourceExport or MemberClusterAnnounce:
/// metadata is an object; every field in it and in spec may be missing, of the wrong type or
/// odd; labels and finalizers often as a member writes them.
fn admission_object() -> BoxedStrategy<serde_json::Value> {
    use serde_json::{Value, json};
    let field = || option::of(json_leaf());
    (
        (field(), field(), field(), field(), field()),
        (field(), option::of(vec((prop::sample::select(vec![
            "sourceName", "sourceNamespace", "sourceKind", "sourceClusterID", "a/b", "~x",
        ]), json_leaf()), 0..5))),
        prop_oneof![
            2 => Just(None),
            2 => Just(Some(json!(["resourceexport.multicluster.crd.antrea.io"]))),
            1 => option::of(json_leaf()),
        ],
        prop::bool::weighted(0.2),
        option::of(json_leaf()),
    )
        .prop_map(|((cluster_id, name, namespace, kind, policy), (obj_name, labels), finalizers, deleting, info_id)| {
            let mut spec = serde_json::Map::new();
            for (k, v) in [
                ("clusterID", cluster_id),
                ("name", name),
                ("namespace", namespace),
                ("kind", kind),
                ("clusterNetworkPolicy", policy),
            ] {
                if let Some(v) = v {
                    spec.insert(k.to_owned(), v);
                }
            }
            if let Some(id) = info_id {
                spec.insert("clusterInfo".into(), json!({"clusterID": id}));
            }
            let mut metadata = serde_json::Map::new();
            if let Some(n) = obj_name {
                metadata.insert("name".into(), n);
            }
            if let Some(labels) = labels {
                let map: serde_json::Map<String, Value> =
                    labels.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
                metadata.insert("labels".into(), Value::Object(map));
            }
            if let Some(f) = finalizers {
                metadata.insert("finalizers".into(), f);
            }
            if deleting {
                metadata.insert("deletionTimestamp".into(), json!("2026-11-26T00:00:00Z"));
            }
            json!({"metadata": metadata, "spec": spec, "clusterID": spec.get("clusterID").cloned()})
        })
    .boxed()
}

/// A member's export as it writes it (usually valid for its cluster), with at most one field
/// replaced by anything.
fn member_export() -> BoxedStrategy<serde_json::Value> {
    use serde_json::json;
    (
        prop::sample::select(vec!["east", "west", "north"]),
        prop::sample::select(vec!["Service", "Endpoints", "ClusterInfo"]),
        prop::sample::select(vec![("default", "web"), ("a-b", "c"), ("a", "b-c")]),
        option::of((
            prop::sample::select(vec![
                "/spec/clusterID",
                "/spec/name",
                "/spec/namespace",
                "/spec/kind",
                "/metadata/name",
                "/metadata/labels/sourceClusterID",
                "/metadata/labels/sourceKind",
                "/spec/clusterInfo/clusterID",
            ]),
            json_leaf(),
        )),
    )
        .prop_map(|(id, kind, (ns, name), change)| {
            let re_name = if kind == "ClusterInfo" {
                mc_api::names::cluster_info_export(id)
            } else {
                mc_api::names::resource_export(id, ns, name, kind)
            };
            let mut v = json!({
                "metadata": {"name": re_name, "labels": {
                    "sourceClusterID": id, "sourceKind": kind,
                    "sourceNamespace": ns, "sourceName": name,
                }},
                "spec": {"clusterID": id, "kind": kind, "namespace": ns, "name": name,
                         "service": {}, "endpoints": {}, "clusterInfo": {"clusterID": id}},
            });
            if let Some((path, value)) = change
                && let Some(slot) = v.pointer_mut(path)
            {
                *slot = value;
            }
            v
        })
        .boxed()
}

fn caller() -> impl Strategy<Value = mc_controller::webhook::rules::Caller> {
    use mc_controller::webhook::rules::Caller;
    prop_oneof![
        1 => Just(Caller::Controller),
        1 => Just(Caller::Admin),
        1 => word().prop_map(Caller::User),
        6 => (prop::sample::select(vec![LEADER_NS, LEADER_NS, "kube-system"]), word())
            .prop_map(|(ns, name)| Caller::ServiceAccount { namespace: ns.to_owned(), name }),
    ]
}

proptest! {
    #![proptest_config(config())]

    /// The admission rules over arbitrary objects and callers: no panic; a member's
    /// ServiceAccount never gets an export allowed that speaks for another cluster; the mutating
    /// patches apply to the object and, applied, leave nothing more to patch.
    #[test]
    fn the_webhook_rules_hold_for_any_object(
        caller in caller(),
        op in prop::sample::select(vec![
            mc_controller::webhook::rules::Op::Create,
            mc_controller::webhook::rules::Op::Update,
            mc_controller::webhook::rules::Op::Delete,
        ]),
        old in option::weighted(0.3, prop_oneof![admission_object(), member_export()]),
        new in option::weighted(0.9, prop_oneof![admission_object(), member_export()]),
        bound_to in option::of(cluster()),
        bound_to_new in any::<bool>(),
        others in vec(word(), 0..2),
    ) {
        use mc_controller::webhook::rules::{self, Account, AnnounceFacts, Caller, Verdict};
        use mc_api::{
            clusterset::v1alpha2::ClusterSet, exports::ResourceExport, gateway::Gateway,
            memberclusterannounce::MemberClusterAnnounce,
        };
        // Often the ServiceAccount of the cluster the new object names (the usual request).
        let bound_to = match (&new, bound_to_new) {
            (Some(new), true) => new["spec"]["clusterID"].as_str().map(str::to_owned).or(bound_to),
            _ => bound_to,
        };
        let account = Account { found: true, cluster_id: bound_to.clone() };
        // The webhook reads the objects first and refuses (for a ServiceAccount) what it cannot
        // read: the rules see the objects that read.
        if let (Ok(o), Ok(n)) = (read::<ResourceExport>(&old), read::<ResourceExport>(&new)) {
            let verdict = rules::resource_export(op, &caller, LEADER_NS, &account, o.as_ref(), n.as_ref());
            if let (Verdict::Allow, Caller::ServiceAccount { namespace, .. }, Some(new)) = (&verdict, &caller, &new)
                && namespace == LEADER_NS
                && op != rules::Op::Delete
            {
                let id = bound_to.clone().unwrap_or_default();
                prop_assert_eq!(new["spec"]["clusterID"].as_str(), Some(id.as_str()), "allowed an export of another cluster");
                prop_assert_eq!(new["metadata"]["labels"]["sourceClusterID"].as_str(), Some(id.as_str()));
            }
        }
        if let (Ok(o), Ok(n)) = (read::<ClusterSet>(&old), read::<ClusterSet>(&new)) {
            let _ = rules::clusterset(op, o.as_ref(), n.as_ref(), &others, others.len());
        }
        let facts = AnnounceFacts {
            leader_ns: LEADER_NS,
            account,
            clusterset: bound_to.clone().map(|id| ("set".to_owned(), id)),
            bound: others.iter().map(|o| (o.clone(), o.clone())).collect(),
        };
        if let (Ok(o), Ok(n)) = (read::<MemberClusterAnnounce>(&old), read::<MemberClusterAnnounce>(&new)) {
            let _ = rules::member_announce(op, &caller, o.as_ref(), n.as_ref(), &facts);
        }
        if let (Ok(o), Ok(n)) = (read::<Gateway>(&old), read::<Gateway>(&new)) {
            let _ = rules::gateway(&caller, op, o.as_ref(), n.as_ref(), None);
        }
        type PatchOf<'a> = &'a dyn Fn(&serde_json::Value) -> Option<Vec<json_patch::PatchOperation>>;
        let mutate: PatchOf = &|v| read::<ResourceExport>(&Some(v.clone())).ok().flatten().map(|re| rules::mutate_resource_export(&re));
        let stamp: PatchOf = &|v| read::<MemberClusterAnnounce>(&Some(v.clone())).ok().flatten().map(|m| rules::stamp_announce(&caller, LEADER_NS, &m));
        for (what, patch_of) in [("mutate_resource_export", mutate), ("stamp_announce", stamp)] {
            let Some(mut object) = new.clone() else { continue };
            let ops = patch_of(&object).unwrap_or_default();
            if ops.is_empty() {
                continue;
            }
            json_patch::patch(&mut object, &ops)
                .map_err(|e| TestCaseError::fail(format!("{what}: the patch does not apply: {e}: {ops:?}")))?;
            prop_assert_eq!(patch_of(&object).unwrap_or_default(), Vec::new(), "{} again on its own result", what);
        }
    }
}

/// An object as the webhook reads it: `Err` when it cannot be (the webhook refuses it).
fn read<K: serde::de::DeserializeOwned>(v: &Option<serde_json::Value>) -> Result<Option<K>, ()> {
    v.as_ref()
        .map(|v| serde_json::from_value(v.clone()).map_err(|_| ()))
        .transpose()
}
