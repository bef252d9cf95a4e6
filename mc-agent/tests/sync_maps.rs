//! The agent's sync against real (pinned) maps: what the maps hold after `sync::apply` is exactly
//! the desired state, whatever they held before, and the pins carry it across a reload (a
//! restart), and bpftool prints every map with named fields. Run as root.

mod support;

use std::net::Ipv4Addr;

use aya::maps::lpm_trie::Key;
use mc_agent::{
    bpffs::PinLayout,
    dataplane::{Dataplane, DataplaneMaps},
    exposure::ExportedService,
    state::{ClusterInfoObject, GatewayObject, Inputs, desired},
    sync::{SyncReport, apply},
};
use mc_common::{
    dataplane::{
        ACTION_REFUSE_ALL, EXPOSED_SERVICE, Exposed, ExposedKey, FlowKey, MAX_POLICY_ENTRIES,
        NextHop, PEER_LOCAL_NODE, Peer, PodIdentity, PolicyKey, PolicyVerdict, ROLE_GATEWAY,
        ROLE_NODE, RemoteRoute, SNAT_FORWARD, SenderId, SenderIdKey, SnatEntry,
    },
    maps,
};
use support::{Bpffs, lacks_root, run};

/// Why the tests here need root (said when they are skipped without it).
const WHY_ROOT: &str = "loads eBPF programs and mounts a bpffs";

fn inputs(node: &str, gateway: &str, clusters: &[(&str, &str, &str)]) -> Inputs {
    Inputs {
        node_name: node.into(),
        node_ip: Some(Ipv4Addr::new(198, 18, 1, 1)),
        gateways: vec![GatewayObject {
            name: gateway.into(),
            gateway_ip: Some("198.18.1.1".into()),
            internal_ip: Some("198.18.1.1".into()),
            service_cidr: Some("10.97.0.0/16".into()),
        }],
        cluster_infos: clusters
            .iter()
            .map(|(id, cidr, gw)| ClusterInfoObject {
                name: format!("{id}-clusterinfo"),
                cluster_id: Some((*id).into()),
                service_cidr: Some((*cidr).into()),
                gateway_ips: vec![(*gw).into()],
                pod_cidrs: vec![],
                ..Default::default()
            })
            .collect(),
        local_nodes: vec![Ipv4Addr::new(198, 18, 1, 1), Ipv4Addr::new(198, 18, 1, 2)],
        local_pod_cidrs: vec!["10.244.0.0/16".into()],
        pod_to_pod: true,
        mtu: 1500,
        exported: Some(vec![ExportedService {
            namespace: "demo".into(),
            name: "web".into(),
            cluster_ips: vec![Ipv4Addr::new(10, 97, 0, 20)],
            ports: vec![(6, 80)],
            endpoints: vec![(Ipv4Addr::new(10, 244, 1, 5), 6, 8080)],
        }]),
        ..Default::default()
    }
}

fn routes<T: std::borrow::Borrow<aya::maps::MapData>>(
    maps: &DataplaneMaps<T>,
) -> Vec<(String, RemoteRoute)> {
    let mut v: Vec<_> = maps
        .routes
        .iter()
        .map(|r| {
            let (k, v) = r.expect("route");
            (
                format!("{}/{}", Ipv4Addr::from(k.data()), k.prefix_len()),
                v,
            )
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

fn peers<T: std::borrow::Borrow<aya::maps::MapData>>(
    maps: &DataplaneMaps<T>,
) -> Vec<(Ipv4Addr, u32)> {
    let mut v: Vec<_> = maps
        .peers
        .iter()
        .map(|r| {
            let (k, v) = r.expect("peer");
            (Ipv4Addr::from(k), v.kind)
        })
        .collect();
    v.sort();
    v
}

#[test]
fn maps_follow_the_desired_state_and_survive_a_reload() {
    if lacks_root(WHY_ROOT) {
        return;
    }
    let fs = Bpffs::new("sync");
    let layout = PinLayout::new(fs.pin_root());
    let mut dp = Dataplane::load(layout.clone()).expect("load");

    // The gateway with two remote clusters.
    let two = desired(&inputs(
        "east-gw",
        "east-gw",
        &[
            ("west", "10.98.0.0/16", "198.18.2.1"),
            ("south", "10.99.0.0/16", "198.18.3.1"),
        ],
    ));
    {
        let mut maps = dp.maps().expect("maps");
        let report = apply(&mut maps, &two).expect("apply");
        assert_eq!(report.routes_written, 2);
        assert_eq!(
            report.peers_written, 3,
            "two remote gateways and the other Node"
        );
        assert!(report.config_changed);
        assert_eq!(maps.config.get(&0, 0).unwrap().role, ROLE_GATEWAY);
        assert_eq!(
            routes(&maps)
                .iter()
                .map(|r| r.0.as_str())
                .collect::<Vec<_>>(),
            ["10.98.0.0/16", "10.99.0.0/16"]
        );
        // A second apply of the same state changes nothing.
        assert_eq!(
            apply(&mut maps, &two).expect("apply again"),
            SyncReport::default()
        );

        // Junk written behind the agent's back goes away on the next sync.
        maps.routes
            .insert(&Key::new(24, [10, 200, 0, 0]), &RemoteRoute::default(), 0)
            .unwrap();
        maps.peers
            .insert(
                &[198, 18, 7, 7],
                &Peer {
                    kind: PEER_LOCAL_NODE,
                    cluster: 0,
                },
                0,
            )
            .unwrap();
        let report = apply(&mut maps, &two).expect("apply");
        assert_eq!((report.routes_removed, report.peers_removed), (1, 1));
        assert_eq!(routes(&maps).len(), 2);

        // The exposure: the Service's ClusterIP and its endpoint (each with port 0 of TCP and
        // of ICMP beside it), and the local Pod CIDR. Junk goes; exports not known yet (a
        // restarted agent before its watches listed them) leave it as it is.
        let exposed = |maps: &DataplaneMaps<&mut aya::maps::MapData>| maps.exposed.keys().count();
        assert_eq!(exposed(&maps), 6);
        assert_eq!(maps.exposed_prefixes.iter().count(), 1);
        let junk = ExposedKey {
            addr: [10, 96, 0, 1],
            port: 443,
            proto: 6,
            _pad: 0,
        };
        let kind = EXPOSED_SERVICE;
        maps.exposed.insert(&junk, &Exposed { kind }, 0).unwrap();
        let report = apply(&mut maps, &two).expect("apply");
        assert_eq!((report.exposed_written, report.exposed_removed), (0, 1));
        let mut unknown = two.clone();
        unknown.exposed = None;
        maps.exposed.insert(&junk, &Exposed { kind }, 0).unwrap();
        assert_eq!(
            apply(&mut maps, &unknown).expect("apply").exposed_removed,
            0
        );
        assert_eq!(exposed(&maps), 7);
        apply(&mut maps, &two).expect("apply");
    }
    drop(dp);

    // A restart: a new object reuses the pinned maps, and they still hold the state.
    let mut dp = Dataplane::load(layout.clone()).expect("reload");
    let mut maps = dp.maps().expect("maps");
    assert_eq!(
        routes(&maps).len(),
        2,
        "the pins kept the routes across the reload"
    );
    assert_eq!(
        apply(&mut maps, &two).expect("apply"),
        SyncReport::default()
    );

    // The gateway moves to another Node and south leaves: this Node becomes a regular Node,
    // south's route and gateway go, and local Nodes are no longer peers here.
    let one = desired(&inputs(
        "east-gw",
        "east-other",
        &[("west", "10.98.0.0/16", "198.18.2.1")],
    ));
    let report = apply(&mut maps, &one).expect("apply");
    assert!(report.config_changed);
    assert_eq!(maps.config.get(&0, 0).unwrap().role, ROLE_NODE);
    assert_eq!(
        routes(&maps),
        [(
            "10.98.0.0/16".to_owned(),
            RemoteRoute {
                cluster: 1,
                gateway_ip: [198, 18, 2, 1]
            }
        )]
    );
    assert_eq!(peers(&maps), [(Ipv4Addr::new(198, 18, 2, 1), 1)]);

    // The same view through the pins (what `mc-agent maps` and bpftool read).
    let mut pinned = DataplaneMaps::open_pinned(&layout).expect("open pinned");
    assert_eq!(routes(&pinned).len(), 1);
    assert_eq!(pinned.config.get(&0, 0).unwrap().role, ROLE_NODE);

    // bpftool prints every map with named fields (BTF). The maps the programs fill (SNAT, next
    // hops) get one entry each here, as a program would write it.
    let flow = FlowKey {
        src: [10, 244, 1, 5],
        dst: [10, 98, 0, 10],
        src_port: 40000,
        dst_port: 80,
        proto: 6,
        _pad: [0; 3],
    };
    let entry = SnatEntry {
        addr: [198, 18, 1, 1],
        port: 40000,
        checked: 0,
        node: [198, 18, 1, 2],
        flags: SNAT_FORWARD,
    };
    pinned.snat.insert(&flow, &entry, 0).expect("SNAT entry");
    let hop = NextHop {
        macs: [2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2],
        ifindex: 1,
        expires_ns: 0,
    };
    pinned
        .next_hops
        .insert(&[198, 18, 2, 1], &hop, 0)
        .expect("next hop");
    pinned
        .pod_ids
        .insert(&[10, 244, 1, 5], &PodIdentity { id: 7 }, 0)
        .expect("pod identity");
    let verdict = mc_common::dataplane::PolicyVerdict { action: 2, rule: 1 };
    pinned
        .protected_pods
        .insert(&[10, 244, 1, 6], &verdict, 0)
        .expect("protected Pod");
    let policy_key = mc_common::dataplane::PolicyKey {
        pod: [10, 244, 1, 6],
        id: 7,
        port: 80,
        proto: 6,
        _pad: 0,
    };
    pinned
        .ingress_policy
        .insert(&policy_key, &verdict, 0)
        .expect("policy entry");
    let egress_key = mc_common::dataplane::EgressKey {
        src: [10, 244, 1, 6],
        dst: [10, 98, 0, 10],
    };
    pinned
        .egress_policy
        .insert(&egress_key, &verdict, 0)
        .expect("egress entry");
    let sender = SenderIdKey {
        addr: [10, 244, 1, 6],
        id: 7,
    };
    let node = SenderId {
        node: [198, 18, 1, 2],
    };
    pinned
        .sender_ids
        .insert(&sender, &node, 0)
        .expect("sender identity");
    // The maps only the programs write: one entry each, through their pins.
    pinned_hash(&layout, maps::FLOW_IDS)
        .insert(&flow, &mc_common::dataplane::FlowIdentity { id: 7 }, 0)
        .expect("flow identity");
    pinned_hash(&layout, maps::MASQ_IDS)
        .insert(&flow, &mc_common::dataplane::PodIdentity { id: 7 }, 0)
        .expect("masqueraded flow's identity");
    pinned_hash(&layout, maps::FLOW_VERDICTS)
        .insert(
            &flow,
            &mc_common::dataplane::FlowVerdict {
                generation: 1,
                pod: [10, 245, 0, 7],
                port: 8080,
                action: 1,
                rule: 2,
            },
            0,
        )
        .expect("flow verdict");
    pinned_hash::<[u8; 4], mc_common::dataplane::ProbeState>(&layout, maps::PROBES)
        .insert(
            &[198u8, 18, 2, 1],
            &mc_common::dataplane::ProbeState {
                replies: 3,
                rtt_ns: 400_000,
                last_ns: 1,
                seq: 3,
                _pad: 0,
            },
            0,
        )
        .expect("probe state");
    for name in maps::ALL {
        // A ring buffer: bpftool dumps no entries of it.
        if *name == maps::REJECTS {
            continue;
        }
        let fields = bpftool_fields(&layout.map(name));
        let expected: &[&str] = match *name {
            maps::CONFIG => &[
                "role",
                "node_ip",
                "gateway_internal_ip",
                "flags",
                "policy_generation",
                "route_generation",
            ],
            maps::ROUTES => &["cluster", "gateway_ip"],
            maps::PEERS => &["kind"],
            maps::SNAT => &["addr", "port", "checked", "node", "flags"],
            maps::NEXT_HOPS => &["macs", "ifindex", "expires_ns"],
            maps::COUNTERS => &["packets", "bytes"],
            maps::POD_IDS | maps::MASQ_IDS => &["id"],
            maps::FLOW_IDS => &["id"],
            maps::FLOW_VERDICTS => &["generation", "pod", "port", "action", "rule"],
            maps::FLOW_CACHE => &[
                "flow",
                "id",
                "generation",
                "pod",
                "port",
                "action",
                "rule",
                "hits",
            ],
            maps::HAIRPIN_CACHE => &[
                "flow",
                "sender",
                "generation",
                "kind",
                "until_ns",
                "addr",
                "port",
                "dst",
                "ifindex",
                "macs",
            ],
            maps::INGRESS_POLICY | maps::PROTECTED_PODS | maps::EGRESS_POLICY => {
                &["action", "rule"]
            }
            maps::RULE_COUNTERS => &["packets", "bytes"],
            maps::EXPOSED | maps::EXPOSED_PREFIXES => &["kind"],
            maps::SENDER_IDS => &["node"],
            maps::WIREGUARD => &["ifindex", "uplink_ifindex", "uplink_mac", "port"],
            maps::PROBES => &["replies", "rtt_ns", "last_ns", "seq"],
            maps::PEER_STATS => &["tx_packets", "tx_bytes", "rx_packets", "rx_bytes"],
            other => panic!("map {other} has no expectation here: add one"),
        };
        for f in expected {
            assert!(
                fields.contains(*f),
                "bpftool map dump of {name}: no field {f} in {fields:?}"
            );
        }
    }
}

/// A pinned hash (or LRU hash) map, opened by its pin.
fn pinned_hash<K: aya::Pod, V: aya::Pod>(
    layout: &PinLayout,
    name: &str,
) -> aya::maps::HashMap<aya::maps::MapData, K, V> {
    aya::maps::HashMap::try_from(
        aya::maps::Map::from_map_data(aya::maps::MapData::from_pin(layout.map(name)).expect(name))
            .expect(name),
    )
    .expect(name)
}

/// The field names of the values `bpftool -j map dump pinned` prints for a map (per-CPU values
/// included); fails if the map is empty or a value has no named fields.
fn bpftool_fields(path: &std::path::Path) -> std::collections::BTreeSet<String> {
    let out = run(std::process::Command::new("bpftool")
        .args(["-j", "map", "dump", "pinned"])
        .arg(path));
    let dump: serde_json::Value = serde_json::from_slice(&out.stdout).expect("bpftool JSON");
    let entries = dump.as_array().expect("an array of entries");
    assert!(!entries.is_empty(), "{} is empty", path.display());
    let mut names = std::collections::BTreeSet::new();
    for e in entries {
        let f = &e["formatted"];
        let values: Vec<&serde_json::Value> = match f["values"].as_array() {
            Some(per_cpu) => per_cpu.iter().map(|v| &v["value"]).collect(),
            None => vec![&f["value"]],
        };
        for v in values {
            let obj = v
                .as_object()
                .unwrap_or_else(|| panic!("{}: no named fields in {e}", path.display()));
            names.extend(obj.keys().cloned());
        }
    }
    names
}

/// A full ingress policy map fails closed and holds up no other map: the Pod whose verdicts it
/// cannot take refuses every remote flow (its verdict in `mc_protected_pods` says so), the
/// routes and the config still follow the desired state, also a change made while the map is
/// still full, and once there is room the Pod's own verdicts are in place.
#[test]
fn a_full_policy_map_refuses_the_pods_it_cannot_hold_and_the_other_maps_still_follow() {
    if lacks_root(WHY_ROOT) {
        return;
    }
    let fs = Bpffs::new("sync-full");
    let mut dp = Dataplane::load(PinLayout::new(fs.pin_root())).expect("load");
    let capacity = dp.policy_capacity().expect("the policy map's size");
    assert_eq!(capacity, MAX_POLICY_ENTRIES as usize);
    let mut maps = dp.maps().expect("maps");
    // Entries of no one's, to the last slot (as a map some other writer filled).
    let fill = |maps: &mut DataplaneMaps<&mut aya::maps::MapData>| {
        let junk = PolicyVerdict { action: 2, rule: 0 };
        for id in 0..capacity as u32 {
            let key = PolicyKey {
                pod: [10, 250, 0, 1],
                id,
                port: 0,
                proto: 0,
                _pad: 0,
            };
            if maps.ingress_policy.insert(&key, &junk, 0).is_err() {
                break;
            }
        }
    };
    let pod = Ipv4Addr::new(10, 244, 0, 9);
    let with_policy = |clusters: &[(&str, &str, &str)]| {
        let mut want = desired(&inputs("east-gw", "east-gw", clusters));
        let drop = PolicyVerdict { action: 2, rule: 1 };
        want.policy.protected.insert(pod, drop);
        let key = PolicyKey {
            pod: pod.octets(),
            id: 7,
            port: 0,
            proto: 0,
            _pad: 0,
        };
        want.policy.entries.insert(key, drop);
        want
    };
    let west = ("west", "10.98.0.0/16", "198.18.2.1");
    let south = ("south", "10.99.0.0/16", "198.18.3.1");

    fill(&mut maps);
    let one = with_policy(&[west]);
    let err = apply(&mut maps, &one).expect_err("a full policy map");
    assert!(
        err.failed
            .iter()
            .any(|f| f.starts_with(maps::INGRESS_POLICY)),
        "{err}"
    );
    let refused = maps
        .protected_pods
        .get(&pod.octets(), 0)
        .expect("protected");
    assert_eq!(refused.action, ACTION_REFUSE_ALL, "fail closed");
    assert_eq!(
        routes(&maps).len(),
        1,
        "the routes were written all the same"
    );
    let config = maps.config.get(&0, 0).unwrap();
    assert_eq!(config.role, ROLE_GATEWAY);
    assert_ne!(
        config.policy_generation, one.config.policy_generation,
        "no remembered verdict may pass for one of the complete policy"
    );

    // Still full: a new cluster's route follows.
    fill(&mut maps);
    let two = with_policy(&[west, south]);
    assert!(apply(&mut maps, &two).is_err());
    assert_eq!(
        routes(&maps).len(),
        2,
        "a route added while the map is full"
    );
    assert_eq!(
        maps.protected_pods.get(&pod.octets(), 0).unwrap().action,
        ACTION_REFUSE_ALL
    );

    // Room again (the junk went with the failing passes): the Pod's own verdicts.
    apply(&mut maps, &two).expect("a map with room");
    assert_eq!(maps.protected_pods.get(&pod.octets(), 0).unwrap().action, 2);
    assert_eq!(maps.ingress_policy.iter().count(), 1);
    assert_eq!(
        maps.config.get(&0, 0).unwrap().policy_generation,
        two.config.policy_generation
    );
}
