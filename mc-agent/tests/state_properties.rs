//! Property tests of the agent's desired state (`state::desired`, issue 24) over arbitrary
//! Gateways, ClusterInfoImports, Nodes and Pods — invalid and overlapping CIDRs, addresses that
//! are not IPv4, duplicate cluster IDs and gateways, a remote gateway that is a local Node, Pods
//! sharing an address. No panic, and nothing reaches the maps that an invalid object or an
//! overlap would put there; the result does not depend on the order the watches listed the
//! objects in. Pure (no kernel): `PROPTEST_CASES=<n>` runs more cases, `PROPTEST_RNG_SEED=<n>` other ones.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::Ipv4Addr,
};

use mc_agent::state::{ClusterInfoObject, GatewayObject, Inputs, PodObject, Prefix, desired};
use mc_common::dataplane::{PEER_LOCAL_NODE, PEER_REMOTE_GATEWAY, ROLE_GATEWAY};
use proptest::{
    collection::vec,
    option,
    prelude::*,
    test_runner::{Config, RngSeed},
};

/// The cases of each property: 1024, or `PROPTEST_CASES`; a fixed seed, so that the test command
/// is repeatable, or `PROPTEST_RNG_SEED=<n>` for another.
fn config() -> Config {
    let default = Config::default();
    let from_env = |name: &str| std::env::var(name).is_ok();
    Config {
        cases: if from_env("PROPTEST_CASES") {
            default.cases
        } else {
            1024
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

/// Addresses from a small underlay (so gateways and Nodes collide), sometimes not IPv4.
fn address() -> BoxedStrategy<String> {
    prop_oneof![
        24 => (1u8..4, 1u8..4).prop_map(|(a, b)| format!("198.18.{a}.{b}")),
        1 => Just("fd00::1".to_owned()),
        1 => Just("198.18.1.300".to_owned()),
        1 => ".{0,16}",
    ]
    .boxed()
}

/// CIDRs from a small space (so they overlap), sometimes invalid.
fn cidr() -> BoxedStrategy<String> {
    prop_oneof![
        16 => (prop::sample::select(vec![8u8, 16, 24, 32]), 0u8..4, 0u8..3)
            .prop_map(|(len, b, c)| format!("10.{b}.{c}.0/{len}")),
        1 => Just("10.1.0.0/33".to_owned()),
        1 => Just("10.1.0.1/16".to_owned()),
        1 => Just("fd00::/64".to_owned()),
        1 => ".{0,12}",
    ]
    .boxed()
}

fn name() -> BoxedStrategy<String> {
    prop_oneof![
        4 => prop::sample::select(vec!["gw-a", "gw-b", "node-1", "east", "west", "north"])
            .prop_map(str::to_owned),
        1 => ".{0,8}",
    ]
    .boxed()
}

fn inputs() -> BoxedStrategy<Inputs> {
    let gateway = (
        name(),
        option::weighted(0.95, address()),
        option::weighted(0.95, address()),
        option::of(cidr()),
    )
        .prop_map(
            |(name, gateway_ip, internal_ip, service_cidr)| GatewayObject {
                name,
                gateway_ip,
                internal_ip,
                service_cidr,
            },
        );
    let info = (
        name(),
        option::weighted(0.9, name()),
        option::weighted(0.9, cidr()),
        vec(address(), 1..3),
        vec(cidr(), 0..3),
    )
        .prop_map(|(name, cluster_id, service_cidr, gateway_ips, pod_cidrs)| {
            ClusterInfoObject {
                name,
                cluster_id,
                service_cidr,
                gateway_ips,
                pod_cidrs,
                ..Default::default()
            }
        });
    let pod = (
        prop::sample::select(vec!["prod", "dev", "gone"]),
        name(),
        prop::sample::select(vec!["db", "web"]),
        vec(
            prop_oneof![
                4 => (0u8..3).prop_map(|d| format!("10.244.0.{d}")),
                1 => Just("fd00::2".to_owned()),
                1 => Just("nope".to_owned()),
            ],
            0..3,
        ),
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.1),
        prop::sample::select(vec!["198.18.1.2", "198.18.1.3"]),
    )
        .prop_map(
            |(ns, name, app, ips, host_network, finished, node)| PodObject {
                namespace: ns.to_owned(),
                name,
                labels: [("app".to_owned(), app.to_owned())].into(),
                ips,
                host_network,
                finished,
                host_ip: Some(node.to_owned()),
            },
        );
    (
        (name(), option::weighted(0.95, (1u8..4, 1u8..4))),
        vec(gateway, 0..3).prop_map(|gws| {
            let mut seen = BTreeSet::new();
            gws.into_iter()
                .filter(|g| seen.insert(g.name.clone()))
                .collect::<Vec<_>>()
        }),
        // ClusterInfoImports live in one namespace: their names are unique.
        vec(info, 0..5).prop_map(|infos| {
            let mut seen = BTreeSet::new();
            infos
                .into_iter()
                .filter(|i| seen.insert(i.name.clone()))
                .collect::<Vec<_>>()
        }),
        vec((1u8..4, 1u8..4), 0..4),
        vec(cidr(), 0..2),
        any::<bool>(),
        vec(pod, 0..5),
        vec(
            (
                prop::sample::select(vec!["db", "web"]),
                prop_oneof![4 => 1u32..10, 1 => any::<u32>()],
            ),
            0..3,
        ),
    )
        .prop_map(
            |((node_name, node_ip), gateways, cluster_infos, nodes, pod_cidrs, p2p, pods, ids)| {
                let ns_labels = |ns: &str| -> BTreeMap<String, String> {
                    [("kubernetes.io/metadata.name".to_owned(), ns.to_owned())].into()
                };
                Inputs {
                    node_name,
                    node_ip: node_ip.map(|(a, b)| Ipv4Addr::new(198, 18, a, b)),
                    gateways,
                    cluster_infos,
                    local_nodes: nodes
                        .into_iter()
                        .map(|(a, b)| Ipv4Addr::new(198, 18, a, b))
                        .collect(),
                    local_pod_cidrs: pod_cidrs,
                    pod_to_pod: p2p,
                    tunnel_port: 0,
                    mtu: 1500,
                    // On the gateway, stretched policy checks the VNIs of every Pod's Node.
                    stretched_policy: true,
                    cluster_pods: pods.clone(),
                    pods,
                    // "gone" has no labels known: its Pods have no identity.
                    namespace_labels: [
                        ("prod".to_owned(), ns_labels("prod")),
                        ("dev".to_owned(), ns_labels("dev")),
                    ]
                    .into(),
                    label_ids: ids
                        .into_iter()
                        .flat_map(|(app, id)| {
                            ["prod", "dev"].map(|ns| {
                                (
                                    mc_api::labelidentity::normalized_label(
                                        &ns_labels(ns),
                                        &[("app".to_owned(), app.to_owned())].into(),
                                    ),
                                    id,
                                )
                            })
                        })
                        .collect(),
                    // Stretched policy's gateway inputs: the policy module's own tests.
                    ..Default::default()
                }
            },
        )
        .boxed()
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn the_agents_desired_state_takes_nothing_invalid_and_no_overlap(
        inputs in inputs(),
        rotate in 0usize..5,
    ) {
        let d = desired(&inputs);

        // The same objects listed in another order give the same maps.
        let mut other = inputs.clone();
        other.cluster_infos.reverse();
        let n = other.cluster_infos.len().max(1);
        other.cluster_infos.rotate_left(rotate % n);
        other.gateways.reverse();
        let e = desired(&other);
        prop_assert_eq!(&e.config, &d.config);
        prop_assert_eq!(&e.routes, &d.routes);
        prop_assert_eq!(&e.peers, &d.peers);
        prop_assert_eq!(&e.clusters, &d.clusters);

        // Routes: each from a valid CIDR of its cluster's ClusterInfoImport, none overlapping
        // another or a local prefix, towards that cluster's gateway.
        let local: Vec<Prefix> = inputs
            .local_pod_cidrs
            .iter()
            .filter_map(|c| Prefix::parse(c).ok())
            .collect();
        let routes: Vec<(&Prefix, _)> = d.routes.iter().collect();
        for (i, (p, r)) in routes.iter().enumerate() {
            for (q, _) in &routes[i + 1..] {
                prop_assert!(!p.overlaps(q), "routes {p} and {q} overlap");
            }
            for l in &local {
                prop_assert!(!p.overlaps(l), "route {p} overlaps the local Pod CIDR {l}");
            }
            let cluster = d.clusters.iter().find(|c| c.index == r.cluster);
            prop_assert!(cluster.is_some(), "route {p} to unknown cluster {}", r.cluster);
            let cluster = cluster.unwrap();
            prop_assert_eq!(cluster.gateway_ip.octets(), r.gateway_ip);
            prop_assert!(cluster.prefixes.contains(p));
            let from_input = inputs.cluster_infos.iter().any(|info| {
                info.cluster_id.as_deref() == Some(cluster.cluster_id.as_str())
                    && info.service_cidr.iter().chain(if inputs.pod_to_pod { &info.pod_cidrs[..] } else { &[] })
                        .any(|c| Prefix::parse(c).ok().as_ref() == Some(*p))
            });
            prop_assert!(from_input, "route {p} is no valid CIDR of cluster {}", cluster.cluster_id);
        }
        // Peers: a remote gateway is never this Node or one of its cluster's Nodes, and its peer
        // entry names the cluster whose gateway it is; local Nodes are peers only on the gateway.
        let node_ip = inputs.node_ip;
        for (ip, peer) in &d.peers {
            prop_assert_ne!(Some(*ip), node_ip);
            match peer.kind {
                PEER_REMOTE_GATEWAY => {
                    prop_assert!(!inputs.local_nodes.contains(ip), "remote gateway {ip} is a local Node");
                    let cluster = d.clusters.iter().find(|c| c.index == peer.cluster);
                    prop_assert_eq!(cluster.map(|c| c.gateway_ip), Some(*ip), "peer {} names cluster {}", ip, peer.cluster);
                }
                PEER_LOCAL_NODE => {
                    prop_assert_eq!(d.config.role, ROLE_GATEWAY);
                    prop_assert!(inputs.local_nodes.contains(ip));
                }
                other => prop_assert!(false, "peer {ip} of kind {other}"),
            }
        }
        for c in &d.clusters {
            prop_assert!(!c.cluster_id.is_empty());
            let peer = d.peers.get(&c.gateway_ip);
            prop_assert_eq!(peer.map(|p| (p.kind, p.cluster)), Some((PEER_REMOTE_GATEWAY, c.index)),
                "cluster {}'s gateway {} is not its peer", c.cluster_id, c.gateway_ip);
        }
        // Pod identities: in range, only for Pods of known labels that run on the Pod network,
        // and only where every Pod claiming the address agrees.
        let mut claims: BTreeMap<Ipv4Addr, BTreeSet<Option<u32>>> = BTreeMap::new();
        for pod in inputs.pods.iter().filter(|p| !p.host_network && !p.finished) {
            let id = inputs
                .namespace_labels
                .get(&pod.namespace)
                .and_then(|ns| inputs.label_ids.get(&mc_api::labelidentity::normalized_label(ns, &pod.labels)))
                .copied()
                .filter(|id| (1..=mc_api::labelidentity::MAX_ID).contains(id));
            for ip in pod.ips.iter().filter_map(|ip| ip.parse::<Ipv4Addr>().ok()) {
                claims.entry(ip).or_default().insert(id);
            }
        }
        for (ip, identity) in &d.pod_ids {
            let claimed = claims.get(ip);
            prop_assert!(claimed.is_some(), "{ip} has an ID and no Pod");
            let claimed = claimed.unwrap();
            prop_assert_eq!(claimed.len(), 1, "{} is claimed with IDs {:?}", ip, claimed);
            prop_assert_eq!(claimed.iter().next().copied().flatten(), Some(identity.id));
        }
        // The VNIs the gateway lets Nodes claim: only a Pod's ID, from its own address (every
        // Pod claiming it agreeing) or its Node's, sent by its Node; only on the gateway.
        if d.config.role != ROLE_GATEWAY {
            prop_assert!(d.sender_ids.is_empty());
        }
        for (key, sender) in &d.sender_ids {
            let (addr, node) = (Ipv4Addr::from(key.addr), Ipv4Addr::from(sender.node));
            let host = |p: &mc_agent::state::PodObject| {
                p.host_ip.as_deref().and_then(|h| h.parse::<Ipv4Addr>().ok())
            };
            let by = inputs.cluster_pods.iter().filter(|p| !p.host_network && !p.finished).any(|p| {
                let id = inputs
                    .namespace_labels
                    .get(&p.namespace)
                    .and_then(|ns| inputs.label_ids.get(&mc_api::labelidentity::normalized_label(ns, &p.labels)))
                    .copied();
                id == Some(key.id)
                    && host(p) == Some(node)
                    && (host(p) == Some(addr) || p.ips.iter().any(|ip| ip.parse::<Ipv4Addr>().ok() == Some(addr)))
            });
            prop_assert!(by, "{addr} may claim {} from {node}: no such Pod", key.id);
            if let Some(claimed) = claims.get(&addr) {
                prop_assert_eq!(claimed.len(), 1, "{} is claimed with IDs {:?}", addr, claimed);
            }
        }
    }
}
