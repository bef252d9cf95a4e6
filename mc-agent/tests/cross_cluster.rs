//! Real packets through the programs on real interfaces: two "clusters" of network namespaces
//! joined by a router namespace, the programs attached by the agent binary on each Node's uplink
//! and the maps written by the agent's own sync code. A Pod behind east's regular Node talks to
//! a Service of west (nftables DNAT on west's gateway plays kube-proxy) and to a west Pod
//! directly: TCP (a request and a bulk transfer), UDP and ping, through the regular Node's
//! encapsulation, east's hairpin SNAT, west's decapsulation, and back. A capture between the
//! router and west must show nothing but Geneve between the two gateways, west's tunnelled TCP
//! segments cut by the kernel at the uplink's full MTU, UDP sent as GSO (`UDP_SEGMENT`) must
//! cross or be refused with fragmentation-needed, and a TCP stream must survive the agents being
//! restarted mid-transfer. Run as root.
//!
//! ```text
//!  pod-n 10.244.1.5 ── east-node 198.18.1.2 ─┐                        ┌─ west-gw 198.18.2.1 ── pod-w 10.245.0.7
//!                                            ├─ br-east ─ router ─────┘     (DNAT 10.98.0.10:80 -> pod-w:8080)
//!                      east-gw   198.18.1.1 ─┘  .1.254          .2.254
//! ```

mod support;

use std::{
    io::{Read as _, Write as _},
    net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket},
    path::{Path, PathBuf},
    process::Command,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread,
    time::Duration,
};

use mc_agent::{
    bpffs::PinLayout,
    counters,
    dataplane::DataplaneMaps,
    exposure::ExportedService,
    state::{ClusterInfoObject, GatewayObject, Inputs, desired},
    sync::apply,
};
use support::{Bpffs, NetNs, agent, in_netns, lacks_root, run};

/// Why the tests here need root (said when they are skipped without it).
const WHY_ROOT: &str = "loads eBPF programs and creates network namespaces";

const PORT_HTTP: u16 = 8080;
/// The Pods keep the full MTU (nothing tuned for the tunnel): full-size TCP segments must get
/// through by MSS clamping, and an oversize DF datagram must teach the sender the tunnel's MTU.
const POD_MTU: &str = "1500";

/// `UDP_SEGMENT` (linux/udp.h): the socket sends each write as one GSO packet of datagrams of
/// the given size, as QUIC stacks do.
const UDP_SEGMENT: libc::c_int = 103;

/// Sets an int socket option; panics on failure.
fn set_int_opt(sock: &UdpSocket, level: libc::c_int, opt: libc::c_int, val: libc::c_int) {
    use std::os::fd::AsRawFd as _;
    // SAFETY: setsockopt with an int option on a socket we own.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            level,
            opt,
            (&val as *const libc::c_int).cast(),
            4,
        )
    };
    assert_eq!(r, 0, "setsockopt({level}, {opt}, {val})");
}

/// The path MTU the kernel knows for a connected socket (`IP_MTU`).
fn path_mtu(sock: &UdpSocket) -> libc::c_int {
    use std::os::fd::AsRawFd as _;
    let mut mtu: libc::c_int = 0;
    let mut len: libc::socklen_t = 4;
    // SAFETY: getsockopt IP_MTU into an int we own.
    unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_MTU,
            (&mut mtu as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    mtu
}

fn sh_in(ns: &NetNs, line: &str) {
    run(ns.cmd("sh").arg("-c").arg(line));
}

/// The byte at position `i` of a response body: a pattern that shows lost or reordered data.
fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(31) ^ (i >> 9)) as u8
}

/// A minimal HTTP/1.0 server: `GET /<bytes>` answers that many pattern bytes; `/slow/<bytes>`
/// spreads them over about two seconds.
/// pod-w's HTTP server (10.245.0.7), until `stop`.
fn pod_w_http(pod_w: &NetNs, stop: Arc<AtomicBool>) -> thread::JoinHandle<()> {
    let (listening, ready) = std::sync::mpsc::channel();
    let server = in_netns(pod_w, move || {
        let listener = TcpListener::bind(("10.245.0.7", PORT_HTTP)).expect("bind http");
        let _ = listening.send(());
        serve_http(listener, stop)
    });
    // Returns once it listens: a request sent earlier would be refused.
    ready.recv().expect("pod-w's HTTP server listens");
    server
}

fn serve_http(listener: TcpListener, stop: Arc<AtomicBool>) {
    listener.set_nonblocking(true).unwrap();
    while !stop.load(Ordering::Relaxed) {
        let Ok((mut conn, _)) = listener.accept() else {
            thread::sleep(Duration::from_millis(10));
            continue;
        };
        conn.set_nonblocking(false).unwrap();
        thread::spawn(move || {
            // Read the whole request head: closing with unread data would send a reset.
            let mut req = Vec::new();
            let mut buf = [0u8; 512];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 8192 {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => req.extend_from_slice(&buf[..n]),
                }
            }
            let line = String::from_utf8_lossy(&req).into_owned();
            let path = line.split_whitespace().nth(1).unwrap_or("/0").to_owned();
            let (slow, size) = match path.strip_prefix("/slow/") {
                Some(s) => (true, s.parse().unwrap_or(0)),
                None => (false, path[1..].parse().unwrap_or(0)),
            };
            let _ = write!(conn, "HTTP/1.0 200 OK\r\nContent-Length: {size}\r\n\r\n");
            let body: Vec<u8> = (0..size).map(pattern).collect();
            let chunks = if slow { 100 } else { 1 };
            for chunk in body.chunks(size.div_ceil(chunks).max(1)) {
                if conn.write_all(chunk).is_err() {
                    return;
                }
                if slow {
                    thread::sleep(Duration::from_millis(20));
                }
            }
        });
    }
}

/// GET over TCP; returns the body after checking the status line.
fn http_get(addr: SocketAddr, path: &str) -> Result<Vec<u8>, String> {
    let mut conn = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| format!("connect {addr}: {e}"))?;
    conn.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    // One write: a request split over segments must not depend on the server's reads.
    conn.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
        .map_err(|e| e.to_string())?;
    let mut all = Vec::new();
    conn.read_to_end(&mut all)
        .map_err(|e| format!("reading from {addr}: {e}"))?;
    let split = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("no HTTP header in {} bytes", all.len()))?;
    let head = String::from_utf8_lossy(&all[..split]).into_owned();
    if !head.starts_with("HTTP/1.0 200") {
        return Err(format!("unexpected answer: {head}"));
    }
    Ok(all[split + 4..].to_vec())
}

fn assert_body(body: &[u8], size: usize, what: &str) {
    assert_eq!(body.len(), size, "{what}: body length");
    if let Some(i) = (0..size).find(|&i| body[i] != pattern(i)) {
        panic!("{what}: byte {i} is wrong (lost or reordered data)");
    }
}

struct Node {
    ns: NetNs,
    fs: Bpffs,
}

impl Node {
    fn pin_root(&self) -> PathBuf {
        self.fs.pin_root()
    }

    fn attach(&self, extra: &[&str]) -> String {
        let mut args = vec!["attach", "--uplink", "eth0"];
        args.extend_from_slice(extra);
        agent(&self.ns, &self.pin_root(), &args)
    }

    fn sync(&self, inputs: &Inputs) {
        self.sync_skipping(inputs, &[]);
    }

    /// Syncs what `inputs` give, of which exactly the parts `skipped` names (one reason each)
    /// are left out.
    fn sync_skipping(&self, inputs: &Inputs, skipped: &[&str]) {
        let layout = PinLayout::new(self.pin_root());
        let mut maps = DataplaneMaps::open_pinned(&layout).expect("pinned maps");
        let d = desired(inputs);
        assert!(d.not_ready.is_none(), "{d:?}");
        assert_eq!(d.skipped.len(), skipped.len(), "{:?}", d.skipped);
        for (got, want) in d.skipped.iter().zip(skipped) {
            assert!(got.contains(want), "{got:?} does not say {want:?}");
        }
        apply(&mut maps, &d).expect("sync");
    }

    fn counter(&self, name: &str) -> u64 {
        let map = counters::open_pinned(&self.pin_root().join("mc_counters")).expect("counters");
        counters::read(&map)
            .expect("read")
            .into_iter()
            .find(|r| r.name == name)
            .unwrap_or_else(|| panic!("no counter {name}"))
            .packets
    }

    /// Packets per policy rule, by the names `inputs` compile to.
    fn rule_counters(&self, inputs: &Inputs) -> std::collections::BTreeMap<String, u64> {
        let names = desired(inputs).policy.rules;
        let map = counters::open_pinned(&self.pin_root().join("mc_rule_counters"))
            .expect("rule counters");
        counters::read_rules(&map, &names)
            .expect("read")
            .into_iter()
            .map(|(name, packets, _)| (name, packets))
            .collect()
    }

    /// The counters that moved; with `drops_only`, only drop reasons.
    fn moved(&self, drops_only: bool) -> Vec<(&'static str, u64)> {
        let map = counters::open_pinned(&self.pin_root().join("mc_counters")).expect("counters");
        counters::read(&map)
            .expect("read")
            .into_iter()
            .filter(|r| r.packets > 0 && (r.drop || !drops_only))
            .map(|r| (r.name, r.packets))
            .collect()
    }

    /// Every CPU's flow-cache entries that hold a flow (the gateway's `mc_flow_cache`).
    fn flow_cache(&self) -> Vec<mc_common::dataplane::FlowCacheEntry> {
        use aya::maps::{Map, MapData, PerCpuArray};
        let data = MapData::from_pin(self.pin_root().join("mc_flow_cache")).expect("flow cache");
        let map: PerCpuArray<MapData, mc_common::dataplane::FlowCacheEntry> =
            PerCpuArray::try_from(Map::PerCpuArray(data)).expect("a per-CPU array");
        let mut out = Vec::new();
        for values in map.iter() {
            out.extend(values.expect("read").iter().filter(|e| e.flow.proto != 0));
        }
        out
    }

    /// The flows the gateway's shared verdict map (`mc_flow_verdicts`) holds.
    fn remembered_flows(&self) -> Vec<mc_common::dataplane::FlowKey> {
        use aya::maps::{HashMap, Map, MapData};
        let data =
            MapData::from_pin(self.pin_root().join("mc_flow_verdicts")).expect("flow verdicts");
        let map: HashMap<
            MapData,
            mc_common::dataplane::FlowKey,
            mc_common::dataplane::FlowVerdict,
        > = HashMap::try_from(Map::LruHashMap(data)).expect("an LRU hash");
        map.keys().map(|k| k.expect("read")).collect()
    }

    fn nonzero(&self) -> Vec<(&'static str, u64)> {
        self.moved(false)
    }

    fn drops(&self) -> Vec<(&'static str, u64)> {
        self.moved(true)
    }
}

fn veth(a: &NetNs, a_dev: &str, b: &NetNs, b_dev: &str) {
    run(Command::new("ip").args([
        "link", "add", a_dev, "netns", &a.name, "type", "veth", "peer", b_dev, "netns", &b.name,
    ]));
}

fn inputs(
    node: &str,
    node_ip: [u8; 4],
    gateway: (&str, [u8; 4], &str, &str),
    remote: (&str, [u8; 4], &str, &str),
    nodes: &[[u8; 4]],
) -> Inputs {
    let ip = |o: [u8; 4]| Ipv4Addr::from(o).to_string();
    Inputs {
        node_name: node.into(),
        node_ip: Some(Ipv4Addr::from(node_ip)),
        gateways: vec![GatewayObject {
            name: gateway.0.into(),
            gateway_ip: Some(ip(gateway.1)),
            internal_ip: Some(ip(gateway.1)),
            service_cidr: Some(gateway.2.into()),
        }],
        cluster_infos: vec![ClusterInfoObject {
            name: format!("{}-clusterinfo", remote.0),
            cluster_id: Some(remote.0.into()),
            service_cidr: Some(remote.2.into()),
            gateway_ips: vec![ip(remote.1)],
            pod_cidrs: vec![remote.3.into()],
            ..Default::default()
        }],
        local_nodes: nodes.iter().map(|&n| Ipv4Addr::from(n)).collect(),
        local_pod_cidrs: vec![gateway.3.into()],
        pod_to_pod: true,
        mtu: 1500,
        exported: Some(west_exports()),
        ..Default::default()
    }
}

/// West's exported Services (east's gateway exposes them too: there they are remote prefixes,
/// which a remote-opened flow never reaches).
fn west_exports() -> Vec<ExportedService> {
    vec![ExportedService {
        namespace: "demo".into(),
        name: "web".into(),
        cluster_ips: vec![[10, 98, 0, 10].into(), [10, 98, 0, 20].into()],
        ports: vec![(6, 80), (17, 5353)],
        endpoints: vec![],
    }]
}

/// Two clusters of network namespaces (the picture at the top), the programs attached by the
/// agent binary (`attach_args` after `attach --uplink eth0`) and the maps written by its sync.
/// `tag` names the namespaces, so that tests may build theirs side by side. With `to_peer`, the
/// gateways' inputs say what the agent finds of their uplinks (a veth whose other end is in the
/// router: the hairpin hands packets to that end, `CONFIG_UPLINK_PEER`); without it, the hairpin
/// transmits on the uplink as on any other device.
struct World {
    router: NetNs,
    east_gw: Node,
    east_node: Node,
    west_gw: Node,
    /// What east's regular Node and west's gateway were synced with.
    east_node_inputs: Inputs,
    west_gw_inputs: Inputs,
    pod_n: NetNs,
    pod_w: NetNs,
    /// Links of the foreign programs `world_with` attached first (they go with the World).
    _foreign: Vec<std::os::fd::OwnedFd>,
}

fn world(tag: &str, attach_args: &[&str], to_peer: bool) -> World {
    world_with(tag, attach_args, to_peer, false)
}

/// Someone else's TC program on `eth0` of `ns` (see [`mc_integration::bpf::foreign_tcx`]).
fn foreign_tcx(ns: &NetNs, flags: u32) -> Vec<std::os::fd::OwnedFd> {
    in_netns(ns, move || mc_integration::bpf::foreign_tcx(flags))
        .join()
        .unwrap()
}

/// [`world`], with `foreign_first`: a foreign program that ends the chain attached to east's
/// gateway and regular Node before their agents attach (a CNI's DaemonSet that started first).
fn world_with(tag: &str, attach_args: &[&str], to_peer: bool, foreign_first: bool) -> World {
    let router = NetNs::new(&format!("mc-{tag}-router"));
    let east_gw = Node {
        ns: NetNs::new(&format!("mc-{tag}-egw")),
        fs: Bpffs::new(&format!("{tag}-egw")),
    };
    let east_node = Node {
        ns: NetNs::new(&format!("mc-{tag}-enode")),
        fs: Bpffs::new(&format!("{tag}-enode")),
    };
    let west_gw = Node {
        ns: NetNs::new(&format!("mc-{tag}-wgw")),
        fs: Bpffs::new(&format!("{tag}-wgw")),
    };
    let pod_n = NetNs::new(&format!("mc-{tag}-podn"));
    let pod_w = NetNs::new(&format!("mc-{tag}-podw"));

    // Underlay: east's Nodes on a bridge in the router, west's gateway on its own link.
    sh_in(
        &router,
        "ip link add br-east type bridge && ip addr add 198.18.1.254/24 dev br-east && ip link set br-east up && sysctl -qw net.ipv4.ip_forward=1",
    );
    veth(&east_gw.ns, "eth0", &router, "gw-e");
    veth(&east_node.ns, "eth0", &router, "node-e");
    veth(&west_gw.ns, "eth0", &router, "gw-w");
    sh_in(
        &router,
        "ip link set gw-e master br-east up && ip link set node-e master br-east up && ip addr add 198.18.2.254/24 dev gw-w && ip link set gw-w up",
    );
    for (node, addr, via, other) in [
        (&east_gw, "198.18.1.1/24", "198.18.1.254", "198.18.2.0/24"),
        (&east_node, "198.18.1.2/24", "198.18.1.254", "198.18.2.0/24"),
        (&west_gw, "198.18.2.1/24", "198.18.2.254", "198.18.1.0/24"),
    ] {
        sh_in(
            &node.ns,
            &format!(
                "ip addr add {addr} dev eth0 && ip link set eth0 up && ip route add {other} via {via} dev eth0 \
             && sysctl -qw net.ipv4.ip_forward=1 && sysctl -qw net.ipv4.conf.all.rp_filter=2 && sysctl -qw net.ipv4.conf.eth0.rp_filter=2"
            ),
        );
    }
    // Pods (the testbed's CNI does the same: a veth, a /24 per Node, the tunnel-sized MTU).
    veth(&pod_n, "eth0", &east_node.ns, "vpod");
    sh_in(
        &east_node.ns,
        &format!("ip addr add 10.244.1.1/24 dev vpod && ip link set vpod mtu {POD_MTU} up"),
    );
    sh_in(
        &pod_n,
        &format!(
            "ip addr add 10.244.1.5/24 dev eth0 && ip link set eth0 mtu {POD_MTU} up && ip route add 10.98.0.0/16 via 10.244.1.1 && ip route add 10.245.0.0/16 via 10.244.1.1"
        ),
    );
    veth(&pod_w, "eth0", &west_gw.ns, "vpod");
    sh_in(
        &west_gw.ns,
        &format!("ip addr add 10.245.0.1/24 dev vpod && ip link set vpod mtu {POD_MTU} up"),
    );
    sh_in(
        &pod_w,
        &format!(
            "ip addr add 10.245.0.7/24 dev eth0 && ip link set eth0 mtu {POD_MTU} up && ip route add 198.18.1.0/24 via 10.245.0.1 && ip route add 10.244.0.0/16 via 10.245.0.1"
        ),
    );
    // The routes the agent installs for remote prefixes (via the uplink's next hop).
    sh_in(
        &east_node.ns,
        "ip route add 10.98.0.0/16 via 198.18.1.254 dev eth0 && ip route add 10.245.0.0/16 via 198.18.1.254 dev eth0",
    );
    sh_in(
        &west_gw.ns,
        "ip route add 10.244.0.0/16 via 198.18.2.254 dev eth0",
    );
    // kube-proxy's part in west: the Service 10.98.0.10:80 -> pod-w:8080.
    sh_in(
        &west_gw.ns,
        &format!(
            "nft add table ip strait_test && nft add chain ip strait_test pre '{{ type nat hook prerouting priority -100; }}' \
         && nft add rule ip strait_test pre ip daddr 10.98.0.10 tcp dport 80 dnat to 10.245.0.7:{PORT_HTTP}"
        ),
    );

    let mut foreign = Vec::new();
    if foreign_first {
        for node in [&east_gw, &east_node] {
            foreign.extend(foreign_tcx(&node.ns, 0));
        }
    }
    // The dataplane: attached by the agent, maps written by its sync.
    for node in [&east_gw, &east_node, &west_gw] {
        let log = node.attach(attach_args);
        assert!(log.contains(support::attached_log()), "{log}");
    }
    let uplink_peer = |node: &Node| {
        to_peer && {
            let found = in_netns(&node.ns, || {
                mc_agent::routes::uplink_has_peer_elsewhere("eth0").expect("ip link")
            });
            assert!(
                found.join().unwrap(),
                "the agent must see that {}'s uplink is a veth into the router's namespace",
                node.ns.name
            );
            true
        }
    };
    let east_nodes = [[198, 18, 1, 1], [198, 18, 1, 2]];
    let east_gateway = ("east-gw", [198, 18, 1, 1], "10.97.0.0/16", "10.244.0.0/16");
    let west_remote = ("west", [198, 18, 2, 1], "10.98.0.0/16", "10.245.0.0/16");
    east_gw.sync(&Inputs {
        uplink_peer: uplink_peer(&east_gw),
        ..inputs(
            "east-gw",
            [198, 18, 1, 1],
            east_gateway,
            west_remote,
            &east_nodes,
        )
    });
    let east_node_inputs = inputs(
        "east-node",
        [198, 18, 1, 2],
        east_gateway,
        west_remote,
        &east_nodes,
    );
    east_node.sync(&east_node_inputs);
    let west_gw_inputs = Inputs {
        uplink_peer: uplink_peer(&west_gw),
        ..inputs(
            "west-gw",
            [198, 18, 2, 1],
            ("west-gw", [198, 18, 2, 1], "10.98.0.0/16", "10.245.0.0/16"),
            ("east", [198, 18, 1, 1], "10.97.0.0/16", "10.244.0.0/16"),
            &[[198, 18, 2, 1]],
        )
    };
    west_gw.sync(&west_gw_inputs);

    World {
        router,
        east_gw,
        east_node,
        west_gw,
        east_node_inputs,
        west_gw_inputs,
        pod_n,
        pod_w,
        _foreign: foreign,
    }
}

/// A foreign TC program that ends the chain with `TC_ACT_OK` (as Cilium's do), attached with
/// TCX to the uplinks of east's Nodes before their agents start: Strait's programs attach at the
/// head of the chain, so east's Pod still reaches west's Service through both gateways, and the
/// agent sees no program ahead of its own. A program attached ahead of Strait's afterwards
/// (`BPF_F_BEFORE`) is named by the agent (its readiness says so) and, ending the chain, keeps
/// the traffic from the tunnel: the reason it is named.
#[test]
fn a_foreign_program_on_the_uplink_does_not_keep_strait_from_running() {
    if lacks_root(WHY_ROOT) {
        return;
    }
    if support::tc_attach() == "tc" {
        // TCX programs run before every legacy TC filter: nothing to order against.
        eprintln!("legacy TC attach: the TCX chain's order does not apply");
        return;
    }
    // (Every part is bound: a namespace goes when its handle is dropped, a link when its fd is.)
    let World {
        router: _router,
        east_gw: _east_gw,
        west_gw: _west_gw,
        east_node,
        pod_n,
        pod_w,
        _foreign,
        ..
    } = world_with("f", &[], false, true);
    let stop = Arc::new(AtomicBool::new(false));
    let http = pod_w_http(&pod_w, stop.clone());
    let service: SocketAddr = "10.98.0.10:80".parse().unwrap();
    assert!(
        connects(&pod_n, service),
        "a foreign program attached first kept east's Pod from west's Service: {:?}",
        east_node.nonzero()
    );
    assert!(east_node.counter("tx_to_gateway") > 0);
    let layout = PinLayout::new(east_node.pin_root());
    let ahead = |layout: PinLayout, confined: bool| {
        in_netns(&east_node.ns, move || {
            if confined {
                support::keep_only_caps_in_this_thread(&support::daemonset_caps());
            }
            let mut d = mc_agent::dataplane::Dataplane::load(layout).expect("load");
            d.attach_uplink("eth0").expect("attach");
            d.programs_ahead("eth0")
        })
        .join()
        .unwrap()
    };
    assert_eq!(ahead(layout.clone(), false), Vec::<String>::new());

    let _before = foreign_tcx(&east_node.ns, mc_integration::bpf::BPF_F_BEFORE);
    let named = ahead(layout.clone(), false);
    assert_eq!(named.len(), 2, "{named:?}");
    assert!(
        named[0].starts_with("ingress: foreign_ok (id ")
            && named[1].starts_with("egress: foreign_ok (id "),
        "{named:?}"
    );
    // With only the DaemonSet's capabilities (no CAP_SYS_ADMIN, which opening another's
    // program by ID takes) the agent still finds them, by ID.
    let found = ahead(layout, true);
    let id = |s: &str| {
        s.split("id ")
            .nth(1)
            .map(|r| r.split([')', ' ']).next().unwrap().to_owned())
    };
    assert_eq!(found.len(), 2, "{found:?}");
    for (found, named) in found.iter().zip(&named) {
        assert!(found.contains(": program id "), "{found}");
        assert_eq!(id(found), id(named), "{found} / {named}");
    }
    assert!(
        !connects(&pod_n, service),
        "a program ahead of Strait's that ends the chain keeps the flow from the tunnel"
    );
    stop.store(true, Ordering::Relaxed);
    http.join().unwrap();
}

/// A path between the gateways narrower than their uplinks (1400 bytes between sites whose
/// uplinks carry 1500), told to the agents as the tunnel MTU (`tunnelMTU`): TCP is clamped to
/// it and an oversize DF datagram gets fragmentation-needed for it, so a full-size transfer
/// crosses a link that drops anything larger without a word (a veth drops what exceeds the
/// receiving end's MTU).
#[test]
fn a_tunnel_mtu_below_the_uplinks_is_what_pods_are_held_to() {
    if lacks_root(WHY_ROOT) {
        return;
    }
    let World {
        router,
        east_gw: _east_gw,
        west_gw,
        east_node,
        east_node_inputs,
        west_gw_inputs,
        pod_n,
        pod_w,
        ..
    } = world("m", &[], false);
    // The narrow link: west's gateway keeps its 1500-byte uplink, the router's end takes 1400.
    sh_in(&router, "ip link set gw-w mtu 1400");
    east_node.sync(&Inputs {
        mtu: 1400,
        ..east_node_inputs
    });
    west_gw.sync(&Inputs {
        mtu: 1400,
        ..west_gw_inputs
    });
    let stop = Arc::new(AtomicBool::new(false));
    let http = pod_w_http(&pod_w, stop.clone());
    let clamped = (
        east_node.counter("tcp_mss_clamped"),
        west_gw.counter("tcp_mss_clamped"),
    );
    let service: SocketAddr = "10.98.0.10:80".parse().unwrap();
    let body = in_netns(&pod_n, move || http_get(service, "/2000000"))
        .join()
        .unwrap()
        .unwrap_or_else(|e| {
            panic!(
                "a full-size transfer through the narrow path: {e}; east node {:?}, west gateway {:?}",
                east_node.nonzero(),
                west_gw.nonzero()
            )
        });
    assert_body(&body, 2_000_000, "GET through the narrow path");
    assert!(
        east_node.counter("tcp_mss_clamped") > clamped.0,
        "the SYN is clamped"
    );
    assert!(
        west_gw.counter("tcp_mss_clamped") > clamped.1,
        "the SYN-ACK is clamped"
    );
    // 1372 + 28 + 36 > 1400: fragmentation-needed for 1364, the tunnel MTU less the tunnel.
    let (sent, learned) = df_datagrams(&pod_n, 1372, 1);
    assert!(sent[0].is_ok(), "{sent:?}");
    assert_eq!(learned, 1364, "the path MTU fragmentation-needed taught");
    stop.store(true, Ordering::Relaxed);
    http.join().unwrap();
}

#[test]
fn pods_reach_a_remote_service_and_pod_through_both_gateways() {
    if lacks_root(WHY_ROOT) {
        return;
    }
    let World {
        router,
        east_gw,
        east_node,
        west_gw,
        pod_n,
        pod_w,
        ..
    } = world("x", &[], true);
    // Servers in pod-w: HTTP and a UDP echo.
    let stop = Arc::new(AtomicBool::new(false));
    let http = pod_w_http(&pod_w, stop.clone());
    let (udp, _) = udp_echo_keeping(&pod_w, stop.clone());

    // So far every link is a veth: a GSO packet crosses whole, never cut into wire packets.
    // UDP datagrams sent as one GSO packet (`UDP_SEGMENT`) arrive at west's gateway like that,
    // where the kernel could not cut them apart once decapsulated: dropped there, counted.
    assert_eq!(udp_gso_echoes(&pod_n, 1200, 8), 0);
    assert_eq!(
        west_gw.counter("drop_gso_unsplit"),
        1,
        "west's gateway must count the one unsplit UDP GSO packet: {:?}",
        west_gw.nonzero()
    );
    // Now the link between the router and west behaves as a wire: neither end offloads tunnel
    // segmentation (as many virtual NICs do not), so the kernel cuts tunnelled GSO packets
    // into wire packets as they leave, and the capture below sees their real size.
    for (ns, dev) in [(&router, "gw-w"), (&west_gw.ns, "eth0")] {
        sh_in(
            ns,
            &format!(
                "ethtool -K {dev} tx-udp_tnl-segmentation off tx-udp_tnl-csum-segmentation off"
            ),
        );
    }
    // A capture between the router and west's gateway for the whole exchange.
    let (mut capture, pcap) = capture_toward_west(&router, "x");

    let service: SocketAddr = "10.98.0.10:80".parse().unwrap();
    // TCP through the Service: a small request, then a bulk transfer with full-size segments.
    let small = in_netns(&pod_n, move || http_get(service, "/1000"))
        .join()
        .unwrap();
    assert_body(&small.expect("HTTP through the Service"), 1000, "small GET");
    let bulk = in_netns(&pod_n, move || http_get(service, "/8000000"))
        .join()
        .unwrap();
    assert_body(&bulk.expect("bulk GET"), 8_000_000, "bulk GET");

    // UDP and ping, Pod to Pod.
    let echoed = in_netns(&pod_n, || {
        let sock = UdpSocket::bind("10.244.1.5:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut answers = 0;
        for i in 0..5u8 {
            sock.send_to(&[i; 100], "10.245.0.7:5353").unwrap();
            let mut buf = [0u8; 200];
            if let Ok((n, _)) = sock.recv_from(&mut buf)
                && buf[..n] == [i; 100]
            {
                answers += 1;
            }
        }
        answers
    })
    .join()
    .unwrap();
    assert_eq!(echoed, 5, "every UDP datagram must come back");

    // UDP sent as GSO, as QUIC stacks send it: eight 1200-byte datagrams in one write fit the
    // tunnel, are cut into wire packets on the way, and each comes back.
    assert_eq!(
        udp_gso_echoes(&pod_n, 1200, 8),
        8,
        "every datagram of a UDP GSO send must come back"
    );
    // 1450-byte datagrams do not fit (36 + 28 + 1450 > 1500) and cannot be cut smaller, even
    // sent without DF (`IP_PMTUDISC_DONT`): the Node answers with fragmentation-needed, and the
    // Pod's kernel learns the tunnel's MTU for that destination (a Service address of west; no
    // answer is needed from there).
    let gso_learned = in_netns(&pod_n, || {
        let sock = UdpSocket::bind("10.244.1.5:0").unwrap();
        sock.connect("10.98.0.10:5353").unwrap();
        set_int_opt(
            &sock,
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DONT,
        );
        set_int_opt(&sock, libc::SOL_UDP, UDP_SEGMENT, 1450);
        sock.send(&[3u8; 1450 * 4])
            .expect("an oversize GSO send leaves the Pod");
        thread::sleep(Duration::from_millis(300));
        path_mtu(&sock)
    })
    .join()
    .unwrap();
    assert_eq!(
        gso_learned, 1464,
        "an oversize UDP GSO send must teach the Pod the tunnel's MTU"
    );

    // A 1472-byte DF datagram does not fit the tunnel: the Node answers with fragmentation-
    // needed, so the Pod's kernel learns the path MTU (1464) and refuses the next one itself.
    let (sent, learned) = df_datagrams(&pod_n, 1472, 2);
    let (first, second) = (sent[0], sent[1]);
    assert!(
        first.is_ok(),
        "the first datagram leaves the Pod: {first:?}"
    );
    assert_eq!(
        second,
        Err(Some(libc::EMSGSIZE)),
        "the Pod's kernel must have learned the smaller path MTU"
    );
    assert_eq!(learned, 1464, "the path MTU the ICMP error taught");
    run(pod_n
        .cmd("ping")
        .args(["-c", "3", "-i", "0.2", "-W", "2", "10.245.0.7"]));

    // A stream that runs while every agent restarts (new program swapped into the pinned
    // links): no reset, no lost byte.
    let slow = in_netns(&pod_n, move || http_get(service, "/slow/4000000"));
    thread::sleep(Duration::from_millis(400));
    for node in [&east_gw, &east_node, &west_gw] {
        let log = node.attach(&[]);
        assert!(
            log.contains("reused=true"),
            "restart must reuse the links: {log}"
        );
    }
    assert_body(
        &slow.join().unwrap().expect("stream across agent restarts"),
        4_000_000,
        "slow GET",
    );

    stop.store(true, Ordering::Relaxed);
    http.join().unwrap();
    udp.join().unwrap();
    thread::sleep(Duration::from_millis(300));
    let _ = capture.kill();
    let _ = capture.wait();

    // Every path was taken, and nothing was dropped.
    for (node, counter) in [
        (&east_node, "tx_to_gateway"),
        (&east_node, "rx_from_gateway"),
        (&east_gw, "hairpin_snat"),
        (&east_gw, "hairpin_unsnat"),
        (&east_node, "tcp_mss_clamped"),
        (&east_node, "tx_frag_needed"),
        (&west_gw, "tcp_mss_clamped"),
        (&west_gw, "rx_from_remote"),
        (&west_gw, "tx_reply_to_remote"),
    ] {
        assert!(
            node.counter(counter) > 0,
            "{counter} did not move on {}",
            node.ns.name
        );
    }
    // The hairpin kept the flows it carried, both ways, for their next packets (the bodies
    // above arrived whole through it).
    let kinds: Vec<u16> = support::hairpin_cache(&east_gw.pin_root())
        .iter()
        .map(|e| e.kind)
        .collect();
    for kind in [
        mc_common::dataplane::HAIRPIN_SNAT,
        mc_common::dataplane::HAIRPIN_UNSNAT,
    ] {
        assert!(kinds.contains(&kind), "hairpin cache kinds {kinds:?}");
    }
    // With the next hop resolved, an encapsulated packet continues out of the regular Node's
    // uplink without going through the egress hook again; only the first packets, sent before
    // the gateway's neighbour entry exists, take the kernel's resolution (and come back).
    let sent = east_node.counter("tx_to_gateway");
    let resolved_by_kernel = east_node.counter("pass_own_tunnel");
    assert!(
        resolved_by_kernel <= 3 && sent > 100,
        "the regular Node should send its tunnel packets on directly (bpf_fib_lookup): \
         {resolved_by_kernel} of {sent} went through bpf_redirect_neigh"
    );
    // The gateway's uplink is a veth: the hairpin handed its packets to the router's end, past
    // the uplink's egress hook (only the first, sent before the next hop was known, went out
    // through the kernel's resolution and met it).
    let hairpinned = east_gw.counter("hairpin_snat") + east_gw.counter("hairpin_unsnat");
    let transmitted = east_gw.counter("pass_own_tunnel");
    assert!(
        transmitted <= 3 && hairpinned > 100,
        "{transmitted} of {hairpinned} hairpinned packets went out through the uplink's egress"
    );
    for (node, expected) in [
        (&east_gw, vec![]),
        (&east_node, vec![]),
        // The UDP GSO packet above, before the link cut tunnel packets.
        (&west_gw, vec![("drop_gso_unsplit", 1)]),
    ] {
        assert_eq!(node.drops(), expected, "drops on {}", node.ns.name);
    }

    // Between the router and west there is only Geneve between the two gateways.
    assert_only_geneve_between_gateways(&pcap);
    // The bulk responses' segments, tunnelled, fill the uplink's MTU and never exceed it: their
    // size was kept (36 + 20 + 32 + 1412), not cut by the tunnel's overhead a second time after
    // MSS clamping already made room for it (which left them at 1464 bytes).
    let lengths = ip_lengths(&pcap, [198, 18, 2, 1]);
    let large: Vec<usize> = lengths.iter().copied().filter(|&l| l > 1400).collect();
    let full = large.iter().filter(|&&l| l == 1500).count();
    assert!(
        lengths.iter().all(|&l| l <= 1500) && large.len() > 1000 && full * 10 >= large.len() * 9,
        "west's tunnel packets over 1400 bytes: {} in all, {full} of them 1500 bytes, the \
         largest {:?}",
        large.len(),
        lengths.iter().max()
    );
    let _ = std::fs::remove_file(&pcap);

    // Tunnel health: east's gateway probes west's through the tunnel.
    east_probes_west(&east_gw, &west_gw);
}

/// East's gateway probes west's as its agent does (four rounds, 300 ms apart): west's programs
/// answer every probe, east's take the answers into `mc_probes`, and the path is judged up
/// with a round trip. And the traffic before it was counted per remote cluster on both
/// gateways (`mc_peer_stats`, index 1 in the fixture), each way.
fn east_probes_west(east_gw: &Node, west_gw: &Node) {
    use mc_agent::probe::{Prober, Target, Verdict};
    for (name, gw) in [("east", east_gw), ("west", west_gw)] {
        let pin = PinLayout::new(gw.pin_root()).map(mc_common::maps::PEER_STATS);
        let map = aya::maps::PerCpuArray::<_, mc_common::dataplane::PeerStats>::try_from(
            aya::maps::Map::from_map_data(aya::maps::MapData::from_pin(pin).expect("pin"))
                .expect("map"),
        )
        .expect("mc_peer_stats");
        let sum = |f: fn(&mc_common::dataplane::PeerStats) -> u64| -> u64 {
            map.get(&1, 0).expect("slot 1").iter().map(f).sum()
        };
        let (txp, txb, rxp, rxb) = (
            sum(|s| s.tx_packets),
            sum(|s| s.tx_bytes),
            sum(|s| s.rx_packets),
            sum(|s| s.rx_bytes),
        );
        assert!(
            txp > 100 && rxp > 100 && txb >= txp * 50 && rxb >= rxp * 50,
            "{name}: per-peer counts tx {txp} packets {txb} bytes, rx {rxp} packets {rxb} bytes"
        );
        let empty: u64 = map
            .get(&2, 0)
            .expect("slot 2")
            .iter()
            .map(|s| s.tx_packets + s.rx_packets)
            .sum();
        assert_eq!(empty, 0, "{name}: a cluster index nobody has counted");
    }
    let layout = PinLayout::new(east_gw.pin_root());
    let (sent, answered, replies) = (
        east_gw.counter("probe_sent"),
        west_gw.counter("probe_answered"),
        east_gw.counter("probe_reply"),
    );
    let health = in_netns(&east_gw.ns, move || {
        let east = std::net::Ipv4Addr::new(198, 18, 1, 1);
        let mut prober = Prober::new(east, east, 6081).expect("the prober's socket");
        let targets = [Target {
            cluster_id: "west".into(),
            info_name: "west-clusterinfo".into(),
            gateway_ip: std::net::Ipv4Addr::new(198, 18, 2, 1),
            index: 1,
        }];
        let probes = aya::maps::HashMap::<_, [u8; 4], mc_common::dataplane::ProbeState>::try_from(
            aya::maps::Map::from_map_data(
                aya::maps::MapData::from_pin(layout.map(mc_common::maps::PROBES)).expect("pin"),
            )
            .expect("map"),
        )
        .expect("mc_probes");
        let mut last = Vec::new();
        for _ in 0..4 {
            last = prober.round(&targets, &|ip| probes.get(&ip.octets(), 0).ok());
            thread::sleep(Duration::from_millis(300));
        }
        last
    })
    .join()
    .unwrap();
    let h = &health[0];
    assert_eq!(h.verdict, Verdict::Up, "{h:?}");
    assert!(
        h.answered >= 2 && h.loss == 0.0 && h.rtt.is_some_and(|r| r < Duration::from_millis(100)),
        "{h:?}"
    );
    assert_eq!(
        east_gw.counter("probe_sent") - sent,
        4,
        "{:?}",
        east_gw.nonzero()
    );
    assert_eq!(
        west_gw.counter("probe_answered") - answered,
        4,
        "{:?}",
        west_gw.nonzero()
    );
    assert_eq!(
        east_gw.counter("probe_reply") - replies,
        4,
        "{:?}",
        east_gw.nonzero()
    );
}

/// Sends `count` datagrams of `size` bytes from pod-n to pod-w's echo server in one GSO write
/// (`UDP_SEGMENT`); returns how many came back within a second.
fn udp_gso_echoes(pod_n: &NetNs, size: usize, count: usize) -> usize {
    in_netns(pod_n, move || {
        let sock = UdpSocket::bind("10.244.1.5:0").unwrap();
        sock.connect("10.245.0.7:5353").unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        set_int_opt(&sock, libc::SOL_UDP, UDP_SEGMENT, size as libc::c_int);
        let sent = vec![9u8; size * count];
        sock.send(&sent).expect("a GSO send");
        let mut buf = [0u8; 2048];
        let mut echoed = 0;
        while echoed < count
            && let Ok(n) = sock.recv(&mut buf)
        {
            if buf[..n] == sent[..size] {
                echoed += 1;
            }
        }
        echoed
    })
    .join()
    .unwrap()
}

/// The total length of every IPv4 packet from `src` in a capture (Ethernet frames, pcap format
/// as tcpdump writes it on this host).
fn ip_lengths(pcap: &Path, src: [u8; 4]) -> Vec<usize> {
    let data = std::fs::read(pcap).expect("read the capture");
    assert_eq!(
        data.get(..4),
        Some(&0xa1b2_c3d4u32.to_ne_bytes()[..]),
        "a pcap file in this host's byte order"
    );
    let mut lengths = Vec::new();
    let mut at = 24;
    while let Some(record) = data.get(at..at + 16) {
        let caught = u32::from_ne_bytes(record[8..12].try_into().unwrap()) as usize;
        let frame = &data[at + 16..(at + 16 + caught).min(data.len())];
        // Ethernet, IPv4: the total length at bytes 2-3 of the IP header, the source at 12-15.
        if frame.len() >= 34 && frame[12..14] == [0x08, 0x00] && frame[26..30] == src {
            lengths.push(usize::from(u16::from_be_bytes([frame[16], frame[17]])));
        }
        at += 16 + caught;
    }
    lengths
}

/// tcpdump in the router on its link to west's gateway (`gw-w`), writing a pcap named after
/// `tag`; it captures once it returns.
fn capture_toward_west(router: &NetNs, tag: &str) -> (std::process::Child, PathBuf) {
    let pcap = std::env::temp_dir().join(format!("strait-{tag}-{}.pcap", std::process::id()));
    let capture = router
        .cmd("tcpdump")
        .args(["-i", "gw-w", "-n", "-U", "-w"])
        .arg(&pcap)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("tcpdump");
    thread::sleep(Duration::from_millis(500));
    (capture, pcap)
}

/// Asserts that every IPv4 packet of the capture (more than 100 of them) is, after tcpdump's
/// " IP ", what `between_gateways` accepts (`what` names it in the failure).
fn assert_only_between_gateways(pcap: &Path, what: &str, between_gateways: impl Fn(&str) -> bool) {
    let out = run(Command::new("tcpdump")
        .args(["-n", "-r"])
        .arg(pcap)
        .arg("ip"));
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines.len() > 100,
        "too few packets captured: {}",
        lines.len()
    );
    for line in lines {
        let outer = line.split(" IP ").nth(1).unwrap_or("");
        assert!(
            between_gateways(outer),
            "a packet between the router and west that is not {what}:\n{line}"
        );
    }
}

fn assert_only_geneve_between_gateways(pcap: &Path) {
    // "... IP 198.18.1.1.51234 > 198.18.2.1.6081: Geneve, ..."
    assert_only_between_gateways(pcap, "gateway-to-gateway Geneve", |outer| {
        (outer.starts_with("198.18.1.1.") && outer.contains(" > 198.18.2.1.6081: Geneve"))
            || (outer.starts_with("198.18.2.1.") && outer.contains(" > 198.18.1.1.6081: Geneve"))
    });
}

/// Whether a TCP connection to `addr` opens within 0.8 s: before the first SYN is sent again
/// (after 1 s), which would be a new flow to the DNAT and to the policy.
fn connects(ns: &NetNs, addr: SocketAddr) -> bool {
    in_netns(ns, move || {
        TcpStream::connect_timeout(&addr, Duration::from_millis(800)).is_ok()
    })
    .join()
    .unwrap()
}

/// `count` datagrams of `size` bytes with DF from pod-n to pod-w, 300 ms apart: what each send
/// returned (the errno of a refused one), and the path MTU the Pod's kernel knows after them.
fn df_datagrams(
    pod_n: &NetNs,
    size: usize,
    count: usize,
) -> (Vec<Result<(), Option<i32>>>, libc::c_int) {
    in_netns(pod_n, move || {
        let sock = UdpSocket::bind("10.244.1.5:0").unwrap();
        sock.connect("10.245.0.7:5353").unwrap();
        set_int_opt(
            &sock,
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DO,
        );
        let sent = (0..count)
            .map(|_| {
                let sent = sock
                    .send(&vec![1u8; size])
                    .map(|_| ())
                    .map_err(|e| e.raw_os_error());
                thread::sleep(Duration::from_millis(300));
                sent
            })
            .collect();
        (sent, path_mtu(&sock))
    })
    .join()
    .unwrap()
}

/// Whether a UDP datagram to `addr` comes back within a second.
fn echoes(ns: &NetNs, addr: SocketAddr) -> bool {
    in_netns(ns, move || {
        let sock = UdpSocket::bind("0.0.0.0:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        sock.send_to(b"ping", addr).unwrap();
        let mut buf = [0u8; 16];
        sock.recv_from(&mut buf).is_ok()
    })
    .join()
    .unwrap()
}

/// Stretched NetworkPolicy on real packets (docs/design.md §4b): east's Pod carries its label
/// identity in the VNI, west's gateway records it per flow, and the policy program at
/// PREROUTING decides after the DNAT (nftables playing kube-proxy) for the Pod chosen. The
/// guide's `drop-tenant-access-to-admin-namespace` (with `Drop`) protects west's Pods in a
/// `role=admin` Namespace. What is decided is only new flows; the decision follows the
/// source's identity (its Namespace's labels) and the Pod the DNAT picked, and a flow without
/// an identity is dropped. Then the guide's egress rule: a tenant Pod's flows to one
/// multi-cluster Service are dropped at its own Node, before they reach the tunnel.
#[test]
fn clusterset_ingress_rules_decide_new_flows_by_identity_and_the_pod_kube_proxy_chose() {
    use mc_agent::{policy::PolicyObject, state::PodObject};
    use mc_api::{labelidentity::normalized_label, selector::labels};

    if lacks_root(WHY_ROOT) {
        return;
    }
    // (Every part is bound: a namespace goes when its handle is dropped.)
    let World {
        router: _router,
        east_gw,
        east_node,
        west_gw,
        pod_n,
        pod_w,
        east_node_inputs,
        west_gw_inputs,
        ..
    } = world("p", &["--stretched-policy"], false);
    // A second Pod in west, in a Namespace the policy does not cover, and a Service whose two
    // endpoints are pod-w (covered) and it, chosen in turn.
    let pod_w2 = NetNs::new("mc-p-podw2");
    veth(&pod_w2, "eth0", &west_gw.ns, "vpod2");
    sh_in(
        &west_gw.ns,
        "ip addr add 10.245.1.1/24 dev vpod2 && ip link set vpod2 up \
         && nft add rule ip strait_test pre ip daddr 10.98.0.20 tcp dport 80 dnat to numgen inc mod 2 map { 0 : 10.245.0.7, 1 : 10.245.1.8 }:8080",
    );
    sh_in(
        &pod_w2,
        "ip addr add 10.245.1.8/24 dev eth0 && ip link set eth0 up && ip route add default via 10.245.1.1",
    );
    let stop = Arc::new(AtomicBool::new(false));
    let mut servers = Vec::new();
    for (ns, ip) in [(&pod_w, "10.245.0.7"), (&pod_w2, "10.245.1.8")] {
        let stop_http = stop.clone();
        let addr = format!("{ip}:{PORT_HTTP}");
        servers.push(in_netns(ns, move || {
            serve_http(TcpListener::bind(addr).expect("bind http"), stop_http)
        }));
        let stop = stop.clone();
        let addr = format!("{ip}:5353");
        servers.push(in_netns(ns, move || {
            let sock = UdpSocket::bind(addr).expect("bind udp");
            sock.set_read_timeout(Some(Duration::from_millis(100)))
                .unwrap();
            let mut buf = [0u8; 2048];
            while !stop.load(Ordering::Relaxed) {
                if let Ok((n, from)) = sock.recv_from(&mut buf) {
                    let _ = sock.send_to(&buf[..n], from);
                }
            }
        }));
    }

    // Identities: pod-n in a tenant Namespace is 7; in an unlabelled one, 8.
    let ns_of = |name: &str, extra: &[(&str, &str)]| {
        let mut l = labels(extra);
        l.insert("kubernetes.io/metadata.name".into(), name.into());
        l
    };
    let tenant_ns = ns_of("t1", &[("role", "tenant")]);
    let plain_ns = ns_of("t1", &[]);
    let client = labels(&[("app", "client")]);
    let label_ids: std::collections::BTreeMap<String, u32> = [
        (normalized_label(&tenant_ns, &client), 7),
        (normalized_label(&plain_ns, &client), 8),
    ]
    .into();
    let pod = |ns: &str, name: &str, ip: &str, l: &[(&str, &str)]| PodObject {
        namespace: ns.into(),
        name: name.into(),
        labels: labels(l),
        ips: vec![ip.into()],
        ..Default::default()
    };
    // east's Node: pod-n's identity follows its Namespace's labels.
    let east_as = |ns_labels: Option<&std::collections::BTreeMap<String, String>>| {
        let mut i = east_node_inputs.clone();
        if let Some(l) = ns_labels {
            i.pods = vec![pod("t1", "pod-n", "10.244.1.5", &[("app", "client")])];
            i.namespace_labels = [("t1".to_owned(), l.clone())].into();
            i.label_ids = label_ids.clone();
        }
        i
    };
    // west's gateway: pod-w in admin (role=admin), pod-w2 in web; the guide's policy or none.
    let policy = PolicyObject {
        namespace: None,
        name: "drop-tenant-access-to-admin-namespace".into(),
        spec: serde_json::from_value(serde_json::json!({
            "priority": 1, "tier": "securityops",
            "appliedTo": [{"namespaceSelector": {"matchLabels": {"role": "admin"}}}],
            "ingress": [{"action": "Drop", "from": [{"scope": "ClusterSet",
                "namespaceSelector": {"matchLabels": {"role": "tenant"}}}]}],
        }))
        .unwrap(),
    };
    let west_with = |policies: Vec<PolicyObject>| {
        let mut i = west_gw_inputs.clone();
        i.stretched_policy = true;
        i.cluster_pods = vec![
            pod("admin", "pod-w", "10.245.0.7", &[("app", "db")]),
            pod("web", "pod-w2", "10.245.1.8", &[("app", "db")]),
        ];
        i.namespace_labels = [
            ("admin".to_owned(), ns_of("admin", &[("role", "admin")])),
            ("web".to_owned(), ns_of("web", &[])),
        ]
        .into();
        i.label_ids = label_ids.clone();
        i.policies = policies;
        i
    };
    let service: SocketAddr = "10.98.0.10:80".parse().unwrap();
    let mixed: SocketAddr = "10.98.0.20:80".parse().unwrap();
    let pod_udp: SocketAddr = "10.245.0.7:5353".parse().unwrap();

    // The policy in place, pod-n a tenant: its new flows to the admin Pod are dropped, through
    // the Service and Pod to Pod alike, and counted under the rule.
    west_gw.sync(&west_with(vec![policy.clone()]));
    east_node.sync(&east_as(Some(&tenant_ns)));
    assert!(!connects(&pod_n, service), "a tenant reached the admin Pod");
    assert!(
        !echoes(&pod_n, pod_udp),
        "a tenant's datagram reached the admin Pod"
    );
    assert!(
        west_gw.counter("policy_drop") >= 2,
        "west's counters: {:?}; east's Node: {:?}",
        west_gw.nonzero(),
        east_node.nonzero()
    );
    let rules = west_gw.rule_counters(&west_with(vec![policy.clone()]));
    let rule = "ClusterNetworkPolicy drop-tenant-access-to-admin-namespace ingress[0] Drop";
    assert!(
        rules.get(rule).copied().unwrap_or(0) >= 2,
        "the rule's own counter: {rules:?}"
    );
    // The Service with a covered and an uncovered endpoint: the verdict is the chosen Pod's,
    // so of four connections in turn the two DNATed to pod-w2 open and the two to pod-w not.
    let opened = (0..4).filter(|_| connects(&pod_n, mixed)).count();
    assert_eq!(opened, 2, "connections to the mixed Service that opened");

    // Unlabelling the Namespace changes pod-n's identity: new connections open, and a stream
    // opened then survives relabelling (only new flows are decided).
    east_node.sync(&east_as(Some(&plain_ns)));
    assert!(
        connects(&pod_n, service),
        "an unlabelled client must reach it"
    );
    assert!(echoes(&pod_n, pod_udp));
    let allowed = west_gw.counter("policy_allow");
    assert!(allowed >= 2, "policy_allow {allowed}");
    let slow = in_netns(&pod_n, move || http_get(service, "/slow/2000000"));
    thread::sleep(Duration::from_millis(300));
    east_node.sync(&east_as(Some(&tenant_ns)));
    assert_body(
        &slow
            .join()
            .unwrap()
            .expect("a stream opened before the relabelling"),
        2_000_000,
        "slow GET",
    );
    assert!(
        !connects(&pod_n, service),
        "relabelled: new flows are dropped"
    );

    // A one-way UDP stream (no reply: every packet of it is new to conntrack, and the gateway
    // answers its later packets from the verdict it remembers) follows a policy change and a
    // change of its source's identity from the next packet on.
    let received = Arc::new(AtomicU64::new(0));
    {
        let received = received.clone();
        let stop = stop.clone();
        servers.push(in_netns(&pod_w, move || {
            let sock = UdpSocket::bind("10.245.0.7:5354").expect("bind the sink");
            sock.set_read_timeout(Some(Duration::from_millis(100)))
                .unwrap();
            let mut buf = [0u8; 2048];
            while !stop.load(Ordering::Relaxed) {
                if sock.recv_from(&mut buf).is_ok() {
                    received.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    let stream_stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stream_stop.clone();
        servers.push(in_netns(&pod_n, move || {
            let sock = UdpSocket::bind("10.244.1.5:40404").expect("bind the stream");
            while !stop.load(Ordering::Relaxed) {
                let _ = sock.send_to(b"stream", "10.245.0.7:5354");
                thread::sleep(Duration::from_millis(10));
            }
        }));
    }
    // Datagrams the sink takes in 600 ms, from 300 ms after a change.
    let arriving = || {
        thread::sleep(Duration::from_millis(300));
        let before = received.load(Ordering::Relaxed);
        thread::sleep(Duration::from_millis(600));
        received.load(Ordering::Relaxed) - before
    };
    let drop_all = PolicyObject {
        name: "drop-clusterset-to-admin".into(),
        spec: serde_json::from_value(serde_json::json!({
            "priority": 1, "tier": "securityops",
            "appliedTo": [{"namespaceSelector": {"matchLabels": {"role": "admin"}}}],
            "ingress": [{"action": "Drop", "from": [{"scope": "ClusterSet",
                "namespaceSelector": {}}]}],
        }))
        .unwrap(),
        ..policy.clone()
    };
    east_node.sync(&east_as(Some(&plain_ns)));
    let n = arriving();
    assert!(n > 10, "an allowed stream: {n} datagrams arrived");
    // Its later packets were decided from the flow cache of the CPU that took them.
    let cached: Vec<_> = west_gw
        .flow_cache()
        .into_iter()
        .filter(|e| e.flow.dst == [10, 245, 0, 7] && e.flow.dst_port == 5354)
        .collect();
    assert!(
        cached.iter().any(
            |e| u32::from(e.action) == mc_common::dataplane::ACTION_ALLOW
                && e.pod == [10, 245, 0, 7]
        ),
        "the stream's verdict in the gateway's flow cache: {cached:?}"
    );
    // Decided in the cache alone: the shared verdict map, which only a flow missing its slot
    // goes to, never had it.
    let shared: Vec<_> = west_gw
        .remembered_flows()
        .into_iter()
        .filter(|k| k.dst == [10, 245, 0, 7] && k.dst_port == 5354)
        .collect();
    assert!(
        shared.is_empty(),
        "the stream in mc_flow_verdicts: {shared:?}"
    );
    west_gw.sync(&west_with(vec![drop_all]));
    let n = arriving();
    assert_eq!(n, 0, "the stream after a policy dropping it");
    west_gw.sync(&west_with(vec![policy.clone()]));
    let n = arriving();
    assert!(n > 10, "the stream with the policy back: {n}");
    east_node.sync(&east_as(Some(&tenant_ns)));
    let n = arriving();
    assert_eq!(n, 0, "the stream after its source became a tenant");
    assert!(
        west_gw.counter("policy_drop_no_flow_identity") == 0,
        "{:?}",
        west_gw.nonzero()
    );
    stream_stop.store(true, Ordering::Relaxed);

    // A rule that names a protocol and no port: a tenant's UDP to the admin Pod is dropped, its
    // TCP is not (no rule matches it).
    let udp_only = PolicyObject {
        name: "drop-tenant-udp-to-admin".into(),
        spec: serde_json::from_value(serde_json::json!({
            "priority": 1, "tier": "securityops",
            "appliedTo": [{"namespaceSelector": {"matchLabels": {"role": "admin"}}}],
            "ingress": [{"action": "Drop", "ports": [{"protocol": "UDP"}],
                "from": [{"scope": "ClusterSet",
                    "namespaceSelector": {"matchLabels": {"role": "tenant"}}}]}],
        }))
        .unwrap(),
        ..policy.clone()
    };
    west_gw.sync(&west_with(vec![udp_only]));
    assert!(
        !echoes(&pod_n, pod_udp),
        "a tenant's datagram passed a UDP-only Drop"
    );
    assert!(
        connects(&pod_n, service),
        "a tenant's TCP was refused by a UDP-only Drop"
    );
    west_gw.sync(&west_with(vec![policy.clone()]));

    // No identity (pod-n unknown to its Node): dropped towards the covered Pod, as Antrea does,
    // while the uncovered one is reached.
    east_node.sync(&east_as(None));
    assert!(!connects(&pod_n, service));
    assert!(west_gw.counter("policy_drop_unknown_identity") >= 1);
    assert!(echoes(&pod_n, "10.245.1.8:5353".parse().unwrap()));

    // A policy map too small for pod-w's verdicts (the size the agent reads off the map):
    // pod-w refuses every remote flow, even the unlabelled client's that its rules allow (fail
    // closed), counted; pod-w2, which no rule covers, is still reached. With room, the rules
    // decide again.
    east_node.sync(&east_as(Some(&plain_ns)));
    assert!(connects(&pod_n, service), "an unlabelled client, before");
    let full = |mut i: Inputs| {
        i.policy_capacity = Some(0);
        i
    };
    west_gw.sync_skipping(
        &full(west_with(vec![policy.clone()])),
        &["1 covered Pods refuse every remote flow (10.245.0.7)"],
    );
    assert!(!connects(&pod_n, service), "a Pod whose rules did not fit");
    assert!(
        west_gw.counter("policy_drop_map_full") >= 1,
        "{:?}",
        west_gw.nonzero()
    );
    assert!(echoes(&pod_n, "10.245.1.8:5353".parse().unwrap()));
    west_gw.sync(&west_with(vec![policy.clone()]));
    assert!(connects(&pod_n, service), "with room for the rules");

    // A restart of west's agent keeps deciding (the new program attached before the old one
    // is detached), and deleting the policy lifts it.
    let log = west_gw.attach(&["--stretched-policy"]);
    assert!(log.contains("attached the policy program"), "{log}");
    east_node.sync(&east_as(Some(&tenant_ns)));
    assert!(!connects(&pod_n, service), "after the agent's restart");
    west_gw.sync(&west_with(vec![]));
    assert!(connects(&pod_n, service), "with the policy deleted");

    // As the running agent does it (`netfilter::PolicyHook`): with nothing to decide, no
    // program at PREROUTING; with the policy back, the program linked (in place of the CLI's
    // link) and deciding.
    let layout = PinLayout::new(west_gw.pin_root());
    let mut hook = in_netns(&west_gw.ns, move || {
        mc_agent::netfilter::PolicyHook::load(mc_agent::EBPF_OBJECT, &layout).expect("load")
    })
    .join()
    .unwrap();
    assert!(hook.detach().expect("detach"), "the CLI's link was pinned");
    assert!(!hook.link_path().exists());
    assert!(!hook.detach().expect("detach"), "nothing left to detach");
    west_gw.sync(&west_with(vec![policy.clone()]));
    assert!(
        connects(&pod_n, service),
        "the policy in the maps but no program linked: nothing decides"
    );
    let hook = in_netns(&west_gw.ns, move || {
        let mut hook = hook;
        assert!(hook.attach().expect("attach"));
        assert!(!hook.attach().expect("attach again"), "already linked");
        hook
    })
    .join()
    .unwrap();
    assert!(hook.link_path().exists());
    assert!(!connects(&pod_n, service), "linked by PolicyHook");
    west_gw.sync(&west_with(vec![]));
    assert!(connects(&pod_n, service), "with the policy deleted again");

    // Egress: the guide's acnp-drop-tenant-to-secured-mc-service at east's Node, decided on the
    // Service's address before the DNAT (conntrack on, as kube-proxy has it on every Node).
    sh_in(
        &east_node.ns,
        "nft add table ip strait_ct && nft add chain ip strait_ct pre '{ type filter hook prerouting priority 0; }' && nft add rule ip strait_ct pre ct state new counter",
    );
    let egress = PolicyObject {
        namespace: None,
        name: "acnp-drop-tenant-to-secured-mc-service".into(),
        spec: serde_json::from_value(serde_json::json!({
            "priority": 1, "tier": "securityops",
            "appliedTo": [{"podSelector": {"matchLabels": {"role": "tenant"}}}],
            "egress": [{"action": "Drop", "toServices": [{"name": "secured-service",
                "namespace": "svc-ns", "scope": "ClusterSet"}]}],
        }))
        .unwrap(),
    };
    let east_egress = |policies: Vec<PolicyObject>, role: &str| {
        let mut i = east_as(Some(&plain_ns));
        i.stretched_policy = true;
        i.pods = vec![pod(
            "t1",
            "pod-n",
            "10.244.1.5",
            &[("app", "client"), ("role", role)],
        )];
        i.label_ids.insert(
            normalized_label(&plain_ns, &labels(&[("app", "client"), ("role", role)])),
            20,
        );
        i.imported_services = [(
            ("svc-ns".to_owned(), "secured-service".to_owned()),
            vec![Ipv4Addr::new(10, 98, 0, 10)],
        )]
        .into();
        i.policies = policies;
        i
    };
    east_node.sync(&east_egress(vec![egress.clone()], "tenant"));
    let dropped = east_node.counter("policy_drop");
    assert!(
        !connects(&pod_n, service),
        "a tenant reached the secured Service"
    );
    assert!(east_node.counter("policy_drop") > dropped);
    assert!(
        connects(&pod_n, mixed),
        "a tenant must reach another multi-cluster Service"
    );
    east_node.sync(&east_egress(vec![egress.clone()], "guest"));
    assert!(
        connects(&pod_n, service),
        "a Pod that is no tenant must reach it"
    );
    east_node.sync(&east_egress(vec![], "tenant"));
    assert!(connects(&pod_n, service), "with the egress policy deleted");
    // Without `CONFIG_UPLINK_PEER`, every hairpinned packet was transmitted on the uplink, and
    // so met its egress hook again.
    let hairpinned = east_gw.counter("hairpin_snat") + east_gw.counter("hairpin_unsnat");
    assert!(hairpinned > 0);
    assert!(
        east_gw.counter("pass_own_tunnel") >= hairpinned,
        "hairpinned packets must leave through the uplink's egress without the flag"
    );

    // A CNI that masquerades its Pods' traffic (Flannel's `--ip-masq`, Calico's `natOutgoing`):
    // east's Node SNATs pod-n to its own address at POSTROUTING, so its egress program no
    // longer sees the Pod, and the label ID comes from conntrack (`mc_nf_masq`, which `attach
    // --stretched-policy` links). A masqueraded tenant is refused by its identity, not as
    // unknown; unlabelled, it is let in (its Pod covered, an unknown identity would not be).
    sh_in(
        &east_node.ns,
        "nft add table ip strait_masq && nft add chain ip strait_masq post '{ type nat hook postrouting priority srcnat; }' && nft add rule ip strait_masq post ip saddr 10.244.1.0/24 oifname eth0 masquerade",
    );
    let masqueraded = |ns_labels: &std::collections::BTreeMap<String, String>| {
        let mut i = east_as(Some(ns_labels));
        i.stretched_policy = true;
        i
    };
    west_gw.sync(&west_with(vec![policy.clone()]));
    east_node.sync(&masqueraded(&tenant_ns));
    let unknown = west_gw.counter("policy_drop_unknown_identity");
    let dropped = west_gw.counter("policy_drop");
    let via_conntrack = east_node.counter("tx_identity_via_conntrack");
    assert!(
        !connects(&pod_n, service),
        "a masqueraded tenant reached the admin Pod"
    );
    assert!(!echoes(&pod_n, pod_udp), "a masqueraded tenant's datagram");
    assert!(
        west_gw.counter("policy_drop") >= dropped + 2,
        "west's counters: {:?}; east's Node: {:?}",
        west_gw.nonzero(),
        east_node.nonzero()
    );
    assert_eq!(
        west_gw.counter("policy_drop_unknown_identity"),
        unknown,
        "a masqueraded tenant refused as unknown, not by its identity"
    );
    east_node.sync(&masqueraded(&plain_ns));
    assert!(
        connects(&pod_n, service),
        "a masqueraded, unlabelled client must reach the admin Pod"
    );
    assert!(echoes(&pod_n, pod_udp));
    assert!(
        east_node.counter("tx_identity_via_conntrack") >= via_conntrack + 4,
        "east's Node: {:?}",
        east_node.nonzero()
    );
    assert_eq!(east_node.counter("tx_identity_unknown"), 0);

    stop.store(true, Ordering::Relaxed);
    for s in servers {
        s.join().unwrap();
    }
}

/// The gateway's side of WireGuard in a test: its device and the object whose program is on the
/// device's ingress (both go with it), and what its peers and maps are told.
struct WireGuardGateway {
    _dataplane: mc_agent::dataplane::Dataplane,
    device: mc_agent::wireguard::Device,
    public_key: String,
    config: mc_common::dataplane::WireGuardConfig,
}

/// Starts `node`'s WireGuard device (a key of its own under `dir`) in its namespace and
/// attaches the device's program, as the agent does on the gateway.
fn wireguard_gateway(node: &Node, dir: &Path, mtu: u32) -> WireGuardGateway {
    use mc_agent::wireguard::{DEFAULT_PORT, DEVICE, Device, Implementation, KeyPair};
    let layout = PinLayout::new(node.pin_root());
    let key_path = dir.join(&node.ns.name).join("private.key");
    // As the uplink's programs attach in this run (legacy TC filters, or TCX).
    let attach_mode = mc_agent::dataplane::AttachMode::parse(&support::tc_attach())
        .expect("STRAIT_TEST_TC_ATTACH")
        .expect("a mode");
    in_netns(&node.ns, move || {
        let key = KeyPair::load_or_create(&key_path).expect("key");
        let device = Device::start(DEVICE, DEFAULT_PORT, mtu, &key, Implementation::Auto)
            .expect("WireGuard device");
        let mut dataplane = mc_agent::dataplane::Dataplane::load(layout).expect("load");
        dataplane
            .attach_wireguard(DEVICE, attach_mode, device.outlives_process())
            .expect("attach to the device");
        let index = |dev: &str| nix::net::if_::if_nametoindex(dev).expect("ifindex");
        WireGuardGateway {
            _dataplane: dataplane,
            device,
            public_key: key.public_base64(),
            config: mc_common::dataplane::WireGuardConfig {
                ifindex: index(DEVICE),
                uplink_ifindex: index("eth0"),
                uplink_mac: mc_agent::routes::mac_address("eth0").expect("MAC"),
                port: DEFAULT_PORT,
            },
        }
    })
    .join()
    .unwrap()
}

/// The datagrams a server got.
type Received = Arc<std::sync::Mutex<Vec<Vec<u8>>>>;

/// A UDP server in pod-w on port 5353 that echoes every datagram and keeps what it got.
fn udp_echo_keeping(pod_w: &NetNs, stop: Arc<AtomicBool>) -> (thread::JoinHandle<()>, Received) {
    let got = Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = got.clone();
    let server = in_netns(pod_w, move || {
        let sock = UdpSocket::bind("10.245.0.7:5353").expect("bind udp");
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let mut buf = [0u8; 2048];
        while !stop.load(Ordering::Relaxed) {
            if let Ok((n, from)) = sock.recv_from(&mut buf) {
                kept.lock().unwrap().push(buf[..n].to_vec());
                let _ = sock.send_to(&buf[..n], from);
            }
        }
    });
    (server, got)
}

/// From the router (on the underlay between the gateways): Strait's plaintext Geneve with
/// east's gateway's address as source, addressed to west's gateway, carrying a flow "east
/// opened" to pod-w with a forged label identity (VNI 7) and `payload`.
fn forge_geneve_from_east(router: &NetNs, payload: &'static [u8]) {
    in_netns(router, move || {
        let inner =
            support::frames::udp([198, 18, 1, 1], [10, 245, 0, 7], 40000, 5353, payload, true);
        let mut packet = support::frames::geneve([198, 18, 1, 1], [198, 18, 2, 1], 6081, &inner);
        // The VNI (bytes 4-6 of the Geneve header, after the outer IPv4 and UDP headers).
        packet[20 + 8 + 4..20 + 8 + 7].copy_from_slice(&[0, 0, 7]);
        // SAFETY: plain socket calls on a descriptor owned here.
        unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_RAW);
            assert!(fd >= 0, "raw socket: {}", std::io::Error::last_os_error());
            let mut to: libc::sockaddr_in = std::mem::zeroed();
            to.sin_family = libc::AF_INET as libc::sa_family_t;
            to.sin_addr.s_addr = u32::from_ne_bytes([198, 18, 2, 1]);
            let sent = libc::sendto(
                fd,
                packet.as_ptr().cast(),
                packet.len(),
                0,
                (&to as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as u32,
            );
            assert_eq!(
                sent,
                packet.len() as isize,
                "{}",
                std::io::Error::last_os_error()
            );
            libc::close(fd);
        }
    })
    .join()
    .unwrap();
}

/// `trafficEncryptionMode: wireGuard` on real packets (docs/design.md §4c): both gateways run
/// the agent's WireGuard device (boringtun; this kernel has no WireGuard module) with their own
/// keys, told each other's as the ClusterInfoImports carry them. East's Pod reaches west's
/// Service (TCP, a bulk transfer) and west's Pod (UDP) through east's regular Node, east's
/// hairpin, WireGuard, west's decapsulation and back; a capture between the router and west
/// sees nothing but WireGuard between the two gateways' WireGuard ports, and not the marker the
/// Pod sent. Plaintext Geneve forged with east's gateway's address (and a label identity),
/// which west took before encryption was on, is dropped and counted once it is, and nothing of
/// it reaches the Pod.
#[test]
fn gateways_tunnel_through_wireguard_and_refuse_plaintext_from_remote_gateways() {
    if lacks_root(WHY_ROOT) {
        return;
    }
    let World {
        router,
        east_gw,
        east_node,
        west_gw,
        east_node_inputs,
        west_gw_inputs,
        pod_n,
        pod_w,
        ..
    } = world("wg", &[], true);
    let stop = Arc::new(AtomicBool::new(false));
    let http = pod_w_http(&pod_w, stop.clone());
    let (udp, got) = udp_echo_keeping(&pod_w, stop.clone());
    thread::sleep(Duration::from_millis(200));

    // Without encryption, west takes the forged packet: the test's forgery is a real one.
    forge_geneve_from_east(&router, b"forged-before");
    thread::sleep(Duration::from_millis(300));
    assert!(
        got.lock().unwrap().iter().any(|d| d == b"forged-before"),
        "without encryption west's gateway must take plaintext Geneve from east's address: {:?}",
        west_gw.nonzero()
    );

    // Encryption on: the tunnel MTU less WireGuard's 60 bytes on every Node.
    const MTU: u32 = 1440;
    let dir = std::env::temp_dir().join(format!("strait-wg-keys-{}", std::process::id()));
    let east_wg = wireguard_gateway(&east_gw, &dir, MTU);
    let mut west_wg = wireguard_gateway(&west_gw, &dir, MTU);
    let encrypted = |inputs: Inputs, wg: &WireGuardGateway, peer_key: &str| {
        let mut inputs = Inputs {
            encryption: true,
            wireguard_port: mc_agent::wireguard::DEFAULT_PORT,
            wireguard_device: Some(wg.config),
            mtu: MTU,
            ..inputs
        };
        inputs.cluster_infos[0].wireguard_public_key = Some(peer_key.to_owned());
        inputs
    };
    let east_gw_inputs = encrypted(
        Inputs {
            uplink_peer: true,
            ..inputs(
                "east-gw",
                [198, 18, 1, 1],
                ("east-gw", [198, 18, 1, 1], "10.97.0.0/16", "10.244.0.0/16"),
                ("west", [198, 18, 2, 1], "10.98.0.0/16", "10.245.0.0/16"),
                &[[198, 18, 1, 1], [198, 18, 1, 2]],
            )
        },
        &east_wg,
        &west_wg.public_key,
    );
    let west_inputs = encrypted(west_gw_inputs, &west_wg, &east_wg.public_key);
    east_node.sync(&Inputs {
        mtu: MTU,
        ..east_node_inputs
    });
    let mut east_wg = east_wg;
    for (node, wg, inputs) in [
        (&east_gw, &mut east_wg, &east_gw_inputs),
        (&west_gw, &mut west_wg, &west_inputs),
    ] {
        let want = desired(inputs);
        assert_eq!(want.wireguard_peers.len(), 1, "{want:?}");
        assert!(wg.device.set_peers(&want.wireguard_peers).expect("peers"));
        node.sync(inputs);
    }

    let (mut capture, pcap) = capture_toward_west(&router, "wg");

    // The first packet starts WireGuard's handshake: UDP until an echo comes back.
    const MARKER: &[u8] = b"strait-wireguard-marker-9f3c";
    let echoed = in_netns(&pod_n, || {
        let sock = UdpSocket::bind("10.244.1.5:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let mut answers = 0;
        for _ in 0..20 {
            sock.send_to(MARKER, "10.245.0.7:5353").unwrap();
            let mut buf = [0u8; 200];
            if let Ok((n, _)) = sock.recv_from(&mut buf)
                && buf[..n] == *MARKER
            {
                answers += 1;
                if answers == 3 {
                    break;
                }
            }
        }
        answers
    })
    .join()
    .unwrap();
    assert_eq!(
        echoed,
        3,
        "UDP Pod to Pod through WireGuard: east gw {:?}, west gw {:?}",
        east_gw.nonzero(),
        west_gw.nonzero()
    );
    let service: SocketAddr = "10.98.0.10:80".parse().unwrap();
    let small = in_netns(&pod_n, move || http_get(service, "/1000"))
        .join()
        .unwrap();
    assert_body(&small.expect("HTTP through the Service"), 1000, "small GET");
    let bulk = in_netns(&pod_n, move || http_get(service, "/4000000"))
        .join()
        .unwrap();
    assert_body(&bulk.expect("bulk GET"), 4_000_000, "bulk GET");
    thread::sleep(Duration::from_millis(300));
    let _ = capture.kill();
    let _ = capture.wait();

    // Only WireGuard between the gateways, on its port both ways, and no marker in the clear.
    assert_only_between_gateways(&pcap, "WireGuard between the gateways", |outer| {
        outer.starts_with("198.18.1.1.51821 > 198.18.2.1.51821: UDP")
            || outer.starts_with("198.18.2.1.51821 > 198.18.1.1.51821: UDP")
    });
    let raw = std::fs::read(&pcap).unwrap();
    assert!(
        !raw.windows(MARKER.len()).any(|w| w == MARKER),
        "the marker crossed the underlay in the clear"
    );
    let _ = std::fs::remove_file(&pcap);
    for (name, node) in [("east", &east_gw), ("west", &west_gw)] {
        assert!(
            node.counter("rx_wireguard") > 0 && node.counter("pass_own_wireguard") > 0,
            "{name}'s gateway took nothing from WireGuard, or sent nothing: {:?}",
            node.nonzero()
        );
        // East's only drop: pod-w's echo of the first forgery, a reply to a flow east never
        // opened.
        let drops = node.drops();
        assert!(
            drops
                .iter()
                .all(|&(n, c)| n == "drop_no_snat_entry" && c == 1),
            "{name}'s gateway dropped packets: {drops:?}"
        );
    }
    assert!(east_gw.counter("hairpin_snat") > 0 && east_gw.counter("hairpin_unsnat") > 0);
    assert!(west_gw.counter("rx_from_remote") > 0 && west_gw.counter("tx_reply_to_remote") > 0);
    let stats = west_wg.device.stats().expect("stats");
    assert_eq!(stats.len(), 1, "{stats:?}");
    assert_eq!(stats[0].public_key, east_wg.public_key);
    // West sent the bulk transfer (its server answered the GET) through the tunnel.
    assert!(
        stats[0].since_handshake.is_some() && stats[0].tx_bytes > 4_000_000,
        "{stats:?}"
    );

    // Tunnel health through WireGuard: the probes and their answers are encrypted too.
    let before = west_gw.counter("rx_wireguard");
    east_probes_west(&east_gw, &west_gw);
    assert!(west_gw.counter("rx_wireguard") - before >= 4);

    // The forgery again, now that west takes remote gateways' tunnel traffic only through
    // WireGuard: dropped, counted, not delivered.
    for _ in 0..3 {
        forge_geneve_from_east(&router, b"forged-after");
    }
    thread::sleep(Duration::from_millis(300));
    assert_eq!(
        west_gw.counter("drop_plaintext_from_remote"),
        3,
        "{:?}",
        west_gw.nonzero()
    );
    assert!(
        !got.lock().unwrap().iter().any(|d| d == b"forged-after"),
        "plaintext Geneve from a remote gateway's address reached the Pod"
    );

    // East's device goes as boringtun's goes with the agent that made it: the maps still name
    // it until an agent forgets it (at its exit, or at the next one's start); from then on what
    // east's gateway would send west is dropped and counted, not redirected to an interface
    // that no longer exists (the kernel would drop that without a Strait counter).
    let WireGuardGateway {
        device, _dataplane, ..
    } = east_wg;
    if !device.outlives_process() {
        drop(device);
        drop(_dataplane);
        let layout = PinLayout::new(east_gw.pin_root());
        let forgot = in_netns(&east_gw.ns, move || {
            let first = mc_agent::dataplane::forget_gone_wireguard_device(
                &layout,
                mc_agent::wireguard::DEVICE,
            );
            let again = mc_agent::dataplane::forget_gone_wireguard_device(
                &layout,
                mc_agent::wireguard::DEVICE,
            );
            (first.expect("forget"), again.expect("forget again"))
        })
        .join()
        .unwrap();
        assert_eq!(forgot, (true, false), "the device's ifindex forgotten once");
        let before = east_gw.counter("drop_wireguard_not_ready");
        in_netns(&pod_n, || {
            let sock = UdpSocket::bind("10.244.1.5:0").unwrap();
            for _ in 0..3 {
                sock.send_to(b"after the device", "10.245.0.7:5353")
                    .unwrap();
            }
        })
        .join()
        .unwrap();
        thread::sleep(Duration::from_millis(300));
        assert_eq!(
            east_gw.counter("drop_wireguard_not_ready") - before,
            3,
            "{:?}",
            east_gw.nonzero()
        );
    }
    stop.store(true, Ordering::Relaxed);
    http.join().unwrap();
    udp.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// `wireGuardImplementation`: `auto` takes the kernel's WireGuard where the kernel has it
/// (the device then outlives the agent, and `uninstall` deletes it) and boringtun where it has
/// not; `kernel` on a kernel without it fails naming why and leaves no device behind.
#[test]
fn the_kernels_wireguard_is_taken_where_the_kernel_has_it_and_userspace_otherwise() {
    if lacks_root(WHY_ROOT) {
        return;
    }
    use mc_agent::wireguard::{DEFAULT_PORT, DEVICE, Device, Implementation, KeyPair};
    let ns = NetNs::new("mc-wgk");
    let dir = std::env::temp_dir().join(format!("strait-wgk-{}", std::process::id()));
    let key_path = dir.join("private.key");
    in_netns(&ns, move || {
        let key = KeyPair::load_or_create(&key_path).expect("key");
        // Whether this kernel has WireGuard, asked as an operator would.
        let has_kernel_wireguard = std::process::Command::new("ip")
            .args(["link", "add", "probe-wg", "type", "wireguard"])
            .output()
            .unwrap()
            .status
            .success();
        let _ = std::process::Command::new("ip")
            .args(["link", "del", "probe-wg"])
            .output();
        let gone = || nix::net::if_::if_nametoindex(DEVICE).is_err();
        let kernel = Device::start(DEVICE, DEFAULT_PORT, 1380, &key, Implementation::Kernel);
        if has_kernel_wireguard {
            let device = kernel.expect("the kernel's WireGuard");
            assert!(device.outlives_process() && device.implementation() == "kernel");
            drop(device);
            assert!(mc_agent::wireguard::is_kernel_device(DEVICE), "kept");
            // A restarted agent takes it over.
            let again = Device::start(DEVICE, DEFAULT_PORT, 1380, &key, Implementation::Auto)
                .expect("taken over");
            assert!(again.outlives_process());
            assert_eq!(mc_agent::wireguard::remove_kernel_device(DEVICE), Ok(true));
            assert!(gone());
        } else {
            let e = kernel
                .err()
                .expect("no WireGuard in this kernel")
                .to_string();
            assert!(
                e.contains("strait-wg0") && e.contains("type wireguard"),
                "the error names the device and what failed: {e}"
            );
            assert!(gone(), "a failed start leaves no device");
            assert_eq!(mc_agent::wireguard::remove_kernel_device(DEVICE), Ok(false));
        }
        let device = Device::start(DEVICE, DEFAULT_PORT, 1380, &key, Implementation::Userspace)
            .expect("boringtun");
        assert!(!device.outlives_process());
        assert_eq!(device.implementation(), "userspace (boringtun)");
        assert!(!mc_agent::wireguard::is_kernel_device(DEVICE));
        drop(device);
        let auto =
            Device::start(DEVICE, DEFAULT_PORT, 1380, &key, Implementation::Auto).expect("auto");
        assert_eq!(auto.outlives_process(), has_kernel_wireguard);
        if auto.outlives_process() {
            auto.close();
            assert!(gone());
        }
    })
    .join()
    .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
