//! `cargo xtask bench dataplane`: one namespace topology, eight ways through it (eight copies, up
//! at once), measured in the same run (issue: the dataplane's Measure section).
//!
//! ```text
//!  client 10.244.1.5 ── node 198.18.21.2 ─┐                    ┌─ wgw 198.18.22.1 ── server 10.245.0.7
//!                                         ├ br-east ─ router ──┘
//!                       egw  198.18.21.1 ─┘  .21.254    .22.254
//! ```
//!
//! - (a) plain routing, client → node → egw → router → wgw → server: no tunnel, no NAT (the
//!   ceiling), at the Pods' full MTU; (a') the same with the Pods' MTU lowered by Strait's tunnel
//!   overhead, the condition of the issue's reference figures (same segment sizes as (c));
//! - (b) the kernel doing the gateway's job: egw SNATs (nftables masquerade) into a VXLAN device
//!   to wgw; Pods' MTU lowered by VXLAN's 50 bytes;
//! - (c) Strait: the node tunnels to egw (Geneve), egw SNATs and hairpins to wgw, wgw
//!   decapsulates; Pods' MTU lowered by the tunnel's 36 bytes;
//! - (d) Strait with stretched NetworkPolicy: as (c), the client's label identity in the VNI,
//!   an Antrea NetworkPolicy in west covering the server (allow the client's label, drop the
//!   rest; the guide's `db-svc-allow-ingress-from-client-only`), so that every new flow is
//!   decided by west's gateway, and the policy program linked where the agent links it: on the
//!   Nodes with something to decide (west's gateway; until 2026-11-27 night, on every Node).
//!   The gateways' uplinks are veths into the router, so (as the agent would) egw's hairpin hands
//!   its packets to the other end (`bpf_redirect_peer`, since 2026-11-29), which skips the veth
//!   transmit and backlog queue that plain routing's forward pays at that hop;
//! - (d') as (d), but the hairpin transmits on the uplink, as it does on any other device (a
//!   NIC): the comparison that does not credit Strait with the veth's shortcut;
//! - (e) Strait with `trafficEncryptionMode: wireGuard`: as (c), Geneve between the gateways
//!   inside WireGuard (boringtun's userspace device, in this process, as in the agent); Pods'
//!   MTU lowered by 36 + 60 bytes;
//! - (f) a bare WireGuard tunnel of the same implementation between egw and wgw (plain routing
//!   otherwise, no Strait, no NAT); Pods' MTU lowered by 60 bytes: what (e) is held to.
//!
//! In every variant conntrack is on in every Node's namespace (node, egw, wgw), as kube-proxy
//! has it on a real Node whichever way its traffic goes (before 2026-11-26's late series, only (d)
//! had it).
//!
//! For each: TCP throughput with 1 and 4 streams (iperf3, under the machine's default congestion
//! control, which the test namespaces inherit and the output names: BBR paces one stream well below
//! what the path carries, docs/benchmarks.md 2026-11-28 afternoon), TCP request/response (1-byte
//! ping-pong, transactions per second and median round trip), 64-byte UDP packets per second
//! delivered (a sender thread in the client, a receiver in the server), and the kernel's softirq
//! CPU time per delivered packet over the whole path (namespaces share one kernel, so one hop's CPU
//! cannot be told apart). Every variant's topology is up at once (each in its own namespaces), and
//! each number is the median over rounds: in a round, every test runs through every variant in turn
//! before the next test, in an order that changes from test to test, so that the runs compared are
//! seconds apart (this machine's speed drifts over minutes; a drift must not favour one variant)
//! and no variant always follows the same other. Before every round after the first, the Strait
//! variants' programs are loaded again (`mc-agent attach`, which first rotating):
//! where a JIT image lands changes a program's time on CPUs with the ITS mitigation, and loaded
//! once, the variant loaded last took the same draw in every round (since 2026-11-28). For Strait,
//! one more request/response and UDP run with `kernel.bpf_stats_enabled` gives each program's own
//! time per packet (not during the measured runs: timing every run costs per packet). Last,
//! five more rounds of one stream through (a), (d) and (c): the machine's busy CPU time per
//! 64 KiB delivered (statistics off) and, for Strait, each program's time per 64 KiB (in runs
//! of their own with the statistics on): what one stream pays for the programs, against what
//! plain routing spends on the same bytes. It prints numbers; it asserts nothing.

use std::{
    collections::BTreeSet,
    io::{Read as _, Write as _},
    net::{Ipv4Addr, TcpListener, TcpStream, UdpSocket},
    os::fd::AsFd as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use mc_agent::{
    bpffs::PinLayout,
    dataplane::DataplaneMaps,
    routes,
    state::{ClusterInfoObject, GatewayObject, Inputs, Routed, desired},
    sync::apply,
};

const PREFIX: &str = "sbench";
const SERVER: &str = "10.245.0.7";
const IPERF_PORT: u16 = 5201;
const RR_PORT: u16 = 7000;
const UDP_PORT: u16 = 7001;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Variant {
    Plain,
    PlainTunnelMtu,
    Kernel,
    Strait,
    StraitPolicy,
    StraitPolicyTransmit,
    StraitWireGuard,
    WireGuardBare,
}

impl Variant {
    fn label(self) -> &'static str {
        match self {
            Variant::Plain => "(a) plain routing",
            Variant::PlainTunnelMtu => "(a') plain, MTU 1464",
            Variant::Kernel => "(b) kernel VXLAN+SNAT",
            Variant::Strait => "(c) Strait",
            Variant::StraitPolicy => "(d) Strait + policy",
            Variant::StraitPolicyTransmit => "(d') (d), hairpin transmits",
            Variant::StraitWireGuard => "(e) Strait + WireGuard",
            Variant::WireGuardBare => "(f) bare WireGuard",
        }
    }

    /// The variant's part of its namespaces' and bpffs directories' names: every variant's
    /// topology is up at once.
    fn tag(self) -> &'static str {
        match self {
            Variant::Plain => "a",
            Variant::PlainTunnelMtu => "a2",
            Variant::Kernel => "b",
            Variant::Strait => "c",
            Variant::StraitPolicy => "d",
            Variant::StraitPolicyTransmit => "d2",
            Variant::StraitWireGuard => "e",
            Variant::WireGuardBare => "f",
        }
    }

    /// The variants named by their tags (`a,a2,b,c,d,d2,e,f`); none: all of them.
    pub fn select(tags: &[String]) -> anyhow::Result<Vec<Variant>> {
        if tags.is_empty() {
            return Ok(VARIANTS.to_vec());
        }
        tags.iter()
            .map(|t| {
                VARIANTS
                    .into_iter()
                    .find(|v| v.tag() == t.trim())
                    .ok_or_else(|| anyhow::anyhow!("no variant {t:?}: a, a2, b, c, d, d2, e or f"))
            })
            .collect()
    }

    fn pod_mtu(self) -> u32 {
        match self {
            Variant::Plain => 1500,
            Variant::PlainTunnelMtu => 1464,
            Variant::Kernel => 1450,
            Variant::Strait | Variant::StraitPolicy | Variant::StraitPolicyTransmit => 1464,
            // Geneve's 36 bytes and WireGuard's 60.
            Variant::StraitWireGuard => 1404,
            Variant::WireGuardBare => 1500 - WIREGUARD_OVERHEAD,
        }
    }
}

const VARIANTS: [Variant; 8] = [
    Variant::Plain,
    Variant::PlainTunnelMtu,
    Variant::Kernel,
    Variant::Strait,
    Variant::StraitPolicy,
    Variant::StraitPolicyTransmit,
    Variant::StraitWireGuard,
    Variant::WireGuardBare,
];

/// The variants that run Strait's programs.
const STRAIT_VARIANTS: [Variant; 4] = [
    Variant::Strait,
    Variant::StraitPolicy,
    Variant::StraitPolicyTransmit,
    Variant::StraitWireGuard,
];

const WIREGUARD_OVERHEAD: u32 = mc_agent::wireguard::OVERHEAD;

/// The WireGuard devices of (e) and (f) (userspace, boringtun: threads of this process) and, for
/// (e), the objects whose program is on their ingress: kept until the bench ends.
static WIREGUARD: std::sync::Mutex<Vec<WireGuardEnd>> = std::sync::Mutex::new(Vec::new());

struct WireGuardEnd {
    implementation: &'static str,
    _device: mc_agent::wireguard::Device,
    _dataplane: Option<mc_agent::dataplane::Dataplane>,
}

/// Starts a WireGuard device in `node` of `v` with a key of its own (`MTU`: the tunnel's), with
/// Strait's program on its ingress when `strait`; returns its key and the device's facts for
/// the agent's inputs.
fn wireguard_device(
    v: Variant,
    node: &str,
    mtu: u32,
    strait: bool,
) -> anyhow::Result<(
    mc_agent::wireguard::KeyPair,
    mc_common::dataplane::WireGuardConfig,
)> {
    use mc_agent::wireguard::{DEFAULT_PORT, DEVICE, Device, Implementation, KeyPair};
    let key_path = std::env::temp_dir()
        .join(format!("sbench-wg-{}", std::process::id()))
        .join(format!("{}-{node}.key", v.tag()));
    let _ = std::fs::remove_file(&key_path);
    let layout = PinLayout::new(bpffs(v, node).join("mc/v1"));
    let (key, device, dataplane, config) = in_ns(v, node, move || -> anyhow::Result<_> {
        let key = KeyPair::load_or_create(&key_path)?;
        // The same implementation for (e) and (f): the kernel's where this kernel has it.
        let device = Device::start(DEVICE, DEFAULT_PORT, mtu, &key, Implementation::Auto)?;
        let dataplane = if strait {
            let mut d = mc_agent::dataplane::Dataplane::load(layout)?;
            d.attach_wireguard(
                DEVICE,
                mc_agent::dataplane::AttachMode::Tcx,
                device.outlives_process(),
            )?;
            Some(d)
        } else {
            None
        };
        let index = |dev: &str| nix::net::if_::if_nametoindex(dev).context(dev.to_owned());
        let config = mc_common::dataplane::WireGuardConfig {
            ifindex: index(DEVICE)?,
            uplink_ifindex: index("eth0")?,
            uplink_mac: routes::mac_address("eth0")?,
            port: DEFAULT_PORT,
        };
        Ok((key, device, dataplane, config))
    })
    .join()
    .map_err(|_| anyhow::anyhow!("WireGuard thread in {node}"))??;
    WIREGUARD
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(WireGuardEnd {
            implementation: device.implementation(),
            _device: device,
            _dataplane: dataplane,
        });
    Ok((key, config))
}

fn ns(v: Variant, name: &str) -> String {
    format!("{PREFIX}-{}-{name}", v.tag())
}

fn sh(v: Variant, netns: &str, line: &str) -> anyhow::Result<()> {
    let out = Command::new("ip")
        .args(["netns", "exec", &ns(v, netns), "sh", "-c", line])
        .output()?;
    if !out.status.success() {
        bail!(
            "in {}: {line}: {}",
            ns(v, netns),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip").args(args).output()?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

const NAMESPACES: [&str; 6] = ["client", "node", "egw", "router", "wgw", "server"];
const BPF_NODES: [&str; 3] = ["node", "egw", "wgw"];

fn bpffs(v: Variant, node: &str) -> PathBuf {
    PathBuf::from(format!("/run/strait-bench/{}/{node}", v.tag()))
}

/// Removes every variant's topology. Processes still running in their namespaces (the iperf3
/// servers of an interrupted run) are killed first: each was started by `ip netns exec` in a
/// mount namespace of its own that can hold a copy of the bench's bpffs mounts (it did on
/// 2026-11-28), so while one lives the pinned links and programs can stay loaded after the
/// namespaces and mounts are gone.
fn teardown() {
    for v in VARIANTS {
        for n in NAMESPACES {
            kill_processes_in(&ns(v, n));
        }
    }
    for v in VARIANTS {
        for n in NAMESPACES {
            let _ = Command::new("ip")
                .args(["netns", "del", &ns(v, n)])
                .output();
        }
        for n in BPF_NODES {
            let _ = Command::new("umount").arg(bpffs(v, n)).output();
        }
    }
}

/// Kills every process in a network namespace (`ip netns pids`) and waits up to 2 s for them
/// to go.
fn kill_processes_in(netns: &str) {
    let pids = || -> Vec<i32> {
        Command::new("ip")
            .args(["netns", "pids", netns])
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .filter(|&p: &i32| p > 1 && p as u32 != std::process::id())
                    .collect()
            })
            .unwrap_or_default()
    };
    let first = pids();
    if first.is_empty() {
        return;
    }
    for pid in &first {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    while !pids().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn veth(v: Variant, a: &str, a_dev: &str, b: &str, b_dev: &str) -> anyhow::Result<()> {
    ip(&[
        "link",
        "add",
        a_dev,
        "netns",
        &ns(v, a),
        "type",
        "veth",
        "peer",
        b_dev,
        "netns",
        &ns(v, b),
    ])
}

/// The namespaces, links and addresses every variant shares.
fn build_common(variant: Variant) -> anyhow::Result<()> {
    let v = variant;
    for n in NAMESPACES {
        ip(&["netns", "add", &ns(v, n)])?;
        sh(v, n, "ip link set lo up")?;
    }
    veth(v, "client", "eth0", "node", "vpod")?;
    veth(v, "node", "eth0", "router", "node-e")?;
    veth(v, "egw", "eth0", "router", "gw-e")?;
    veth(v, "wgw", "eth0", "router", "gw-w")?;
    veth(v, "server", "eth0", "wgw", "vpod")?;
    sh(
        v,
        "router",
        "ip link add br-east type bridge && ip addr add 198.18.21.254/24 dev br-east && ip link set br-east up && \
         ip link set node-e master br-east up && ip link set gw-e master br-east up && \
         ip addr add 198.18.22.254/24 dev gw-w && ip link set gw-w up && sysctl -qw net.ipv4.ip_forward=1",
    )?;
    for (n, addr) in [
        ("node", "198.18.21.2/24"),
        ("egw", "198.18.21.1/24"),
        ("wgw", "198.18.22.1/24"),
    ] {
        sh(
            v,
            n,
            &format!(
                "ip addr add {addr} dev eth0 && ip link set eth0 up && sysctl -qw net.ipv4.ip_forward=1 && \
                 sysctl -qw net.ipv4.conf.all.rp_filter=2 && sysctl -qw net.ipv4.conf.eth0.rp_filter=2"
            ),
        )?;
    }
    // kube-proxy's conntrack, on in every Node's namespace in every variant: a real Node has it
    // whichever way its cross-cluster traffic goes, and Strait's policy relies on it.
    for n in BPF_NODES {
        sh(
            v,
            n,
            "nft add table ip benchct && nft add chain ip benchct pre '{ type filter hook prerouting priority 0; }' && nft add rule ip benchct pre ct state new counter",
        )?;
    }
    sh(v, "node", "ip route add 198.18.22.0/24 via 198.18.21.254")?;
    sh(v, "egw", "ip route add 198.18.22.0/24 via 198.18.21.254")?;
    sh(v, "wgw", "ip route add 198.18.21.0/24 via 198.18.22.254")?;
    let mtu = variant.pod_mtu();
    sh(
        v,
        "node",
        &format!("ip addr add 10.244.1.1/24 dev vpod && ip link set vpod mtu {mtu} up"),
    )?;
    sh(
        v,
        "client",
        &format!(
            "ip addr add 10.244.1.5/24 dev eth0 && ip link set eth0 mtu {mtu} up && \
             ip route add 10.245.0.0/16 via 10.244.1.1"
        ),
    )?;
    sh(
        v,
        "wgw",
        &format!("ip addr add 10.245.0.1/24 dev vpod && ip link set vpod mtu {mtu} up"),
    )?;
    sh(
        v,
        "server",
        &format!(
            "ip addr add {SERVER}/24 dev eth0 && ip link set eth0 mtu {mtu} up && \
             ip route add 10.244.0.0/16 via 10.245.0.1 && ip route add 198.18.21.0/24 via 10.245.0.1 && \
             ip route add 169.254.42.0/30 via 10.245.0.1"
        ),
    )?;
    Ok(())
}

fn build(variant: Variant, agent: &Path) -> anyhow::Result<()> {
    let v = variant;
    build_common(variant)?;
    match variant {
        Variant::Plain | Variant::PlainTunnelMtu => {
            // The same hops as the tunnel's: node -> egw -> router -> wgw.
            sh(v, "node", "ip route add 10.245.0.0/16 via 198.18.21.1")?;
            sh(
                v,
                "egw",
                "ip route add 10.245.0.0/16 via 198.18.21.254 && ip route add 10.244.1.0/24 via 198.18.21.2",
            )?;
            sh(
                v,
                "router",
                "ip route add 10.245.0.0/16 via 198.18.22.1 && ip route add 10.244.0.0/16 via 198.18.21.1",
            )?;
            sh(v, "wgw", "ip route add 10.244.0.0/16 via 198.18.22.254")?;
        }
        Variant::Kernel => {
            sh(v, "node", "ip route add 10.245.0.0/16 via 198.18.21.1")?;
            sh(
                v,
                "egw",
                "ip link add vxlan0 type vxlan id 42 local 198.18.21.1 remote 198.18.22.1 dstport 4789 && \
                 ip addr add 169.254.42.1/30 dev vxlan0 && ip link set vxlan0 up && \
                 ip route add 10.245.0.0/16 via 169.254.42.2 dev vxlan0 && \
                 ip route add 10.244.1.0/24 via 198.18.21.2 && \
                 nft add table ip bench && \
                 nft add chain ip bench post '{ type nat hook postrouting priority 100; }' && \
                 nft add rule ip bench post oifname vxlan0 masquerade",
            )?;
            sh(
                v,
                "wgw",
                "ip link add vxlan0 type vxlan id 42 local 198.18.22.1 remote 198.18.21.1 dstport 4789 && \
                 ip addr add 169.254.42.2/30 dev vxlan0 && ip link set vxlan0 up",
            )?;
        }
        Variant::WireGuardBare => {
            // Plain routing, with egw and wgw joined by a WireGuard tunnel between the Pod
            // subnets (no Strait, no NAT): the same implementation's cost alone.
            let mtu = 1500 - WIREGUARD_OVERHEAD;
            let (east_key, _) = wireguard_device(v, "egw", mtu, false)?;
            let (west_key, _) = wireguard_device(v, "wgw", mtu, false)?;
            {
                let mut devices = WIREGUARD.lock().unwrap_or_else(|e| e.into_inner());
                let n = devices.len();
                let port = mc_agent::wireguard::DEFAULT_PORT;
                devices[n - 2]._device.add_peer(
                    &west_key.public(),
                    std::net::SocketAddrV4::new([198, 18, 22, 1].into(), port),
                    &["10.245.0.0/16"],
                )?;
                devices[n - 1]._device.add_peer(
                    &east_key.public(),
                    std::net::SocketAddrV4::new([198, 18, 21, 1].into(), port),
                    &["10.244.0.0/16"],
                )?;
            }
            sh(v, "node", "ip route add 10.245.0.0/16 via 198.18.21.1")?;
            sh(
                v,
                "egw",
                "ip route add 10.245.0.0/16 dev strait-wg0 && ip route add 10.244.1.0/24 via 198.18.21.2",
            )?;
            sh(v, "wgw", "ip route add 10.244.0.0/16 dev strait-wg0")?;
        }
        Variant::Strait
        | Variant::StraitPolicy
        | Variant::StraitPolicyTransmit
        | Variant::StraitWireGuard => {
            let policy = matches!(
                variant,
                Variant::StraitPolicy | Variant::StraitPolicyTransmit
            );
            let east_gw = ("egw", "198.18.21.1", "10.97.0.0/16");
            let west = ("west", "198.18.22.1", "10.98.0.0/16", "10.245.0.0/16");
            let east_nodes = ["198.18.21.1", "198.18.21.2"];
            let with_policy = |mut i: Inputs| {
                if policy {
                    stretched(&mut i);
                }
                i
            };
            // West's gateway lets east reach its Pods (Pod-to-Pod connectivity): their CIDR
            // is the exposure the server is reached by.
            let west_pods = |mut i: Inputs| {
                i.local_pod_cidrs = vec!["10.245.0.0/16".into()];
                with_policy(i)
            };
            let nodes = [
                (
                    "egw",
                    with_policy(inputs("egw", "198.18.21.1", east_gw, west, &east_nodes)),
                ),
                (
                    "node",
                    with_policy(inputs("node", "198.18.21.2", east_gw, west, &east_nodes)),
                ),
                (
                    "wgw",
                    west_pods(inputs(
                        "wgw",
                        "198.18.22.1",
                        ("wgw", "198.18.22.1", "10.98.0.0/16"),
                        ("east", "198.18.21.1", "10.97.0.0/16", "10.244.0.0/16"),
                        &["198.18.22.1"],
                    )),
                ),
            ];
            for (n, node_inputs) in &nodes {
                let dir = bpffs(v, n);
                std::fs::create_dir_all(&dir)?;
                let status = Command::new("mount")
                    .args(["-t", "bpf", "bpf"])
                    .arg(&dir)
                    .status()?;
                if !status.success() {
                    bail!("mounting bpffs on {}", dir.display());
                }
                // The policy program where the agent links it: on a Node with something to
                // decide (here west's gateway, whose server the policy covers).
                let link_policy = policy && desired(node_inputs).decides_policy();
                attach(v, n, agent, link_policy)?;
            }
            let mut nodes = nodes;
            if variant == Variant::StraitWireGuard {
                // As the agents do with `trafficEncryptionMode: wireGuard`: every Node's tunnel
                // MTU 60 bytes smaller, each gateway's device up with its program, each told
                // the other's key.
                let mtu = 1500 - WIREGUARD_OVERHEAD;
                let (east_key, east_device) = wireguard_device(v, "egw", mtu, true)?;
                let (west_key, west_device) = wireguard_device(v, "wgw", mtu, true)?;
                for (n, i) in &mut nodes {
                    i.encryption = true;
                    i.wireguard_port = mc_agent::wireguard::DEFAULT_PORT;
                    i.mtu = mtu;
                    let (device, peer) = match *n {
                        "egw" => (Some(east_device), Some(&west_key)),
                        "wgw" => (Some(west_device), Some(&east_key)),
                        _ => (None, None),
                    };
                    i.wireguard_device = device;
                    i.cluster_infos[0].wireguard_public_key = peer.map(|k| k.public_base64());
                }
                let mut devices = WIREGUARD.lock().unwrap_or_else(|e| e.into_inner());
                let n = devices.len();
                for (end, inputs) in [(n - 2, &nodes[0].1), (n - 1, &nodes[2].1)] {
                    devices[end]
                        ._device
                        .set_peers(&desired(inputs).wireguard_peers)?;
                }
            }
            for (n, node_inputs) in &nodes {
                sync(v, n, node_inputs)?;
            }
        }
    }
    Ok(())
}

fn inputs(
    node: &str,
    node_ip: &str,
    gateway: (&str, &str, &str),
    remote: (&str, &str, &str, &str),
    nodes: &[&str],
) -> Inputs {
    Inputs {
        node_name: node.into(),
        node_ip: node_ip.parse().ok(),
        gateways: vec![GatewayObject {
            name: gateway.0.into(),
            gateway_ip: Some(gateway.1.into()),
            internal_ip: Some(gateway.1.into()),
            service_cidr: Some(gateway.2.into()),
        }],
        cluster_infos: vec![ClusterInfoObject {
            name: format!("{}-clusterinfo", remote.0),
            cluster_id: Some(remote.0.into()),
            service_cidr: Some(remote.2.into()),
            gateway_ips: vec![remote.1.into()],
            pod_cidrs: vec![remote.3.into()],
            ..Default::default()
        }],
        local_nodes: nodes
            .iter()
            .filter_map(|n| n.parse::<Ipv4Addr>().ok())
            .collect(),
        pod_to_pod: true,
        mtu: 1500,
        ..Default::default()
    }
}

/// Stretched NetworkPolicy for (d): the client (10.244.1.5, `app=client` in `prod`) and the
/// server (10.245.0.7, `app=db` in `prod`) with their label identities, and the guide's
/// `db-svc-allow-ingress-from-client-only` covering the server.
fn stretched(i: &mut Inputs) {
    use mc_agent::{policy::PolicyObject, state::PodObject};
    use mc_api::selector::labels;
    let ns = labels(&[("kubernetes.io/metadata.name", "prod")]);
    // Each Pod on its Node (the gateways check the identity a Node's packets claim by it).
    let pod = |name: &str, ip: &str, app: &str, node: &str| PodObject {
        namespace: "prod".into(),
        name: name.into(),
        labels: labels(&[("app", app)]),
        ips: vec![ip.into()],
        host_ip: Some(node.into()),
        ..Default::default()
    };
    let client = || pod("client", "10.244.1.5", "client", "198.18.21.2");
    i.stretched_policy = true;
    i.namespace_labels = [("prod".to_owned(), ns.clone())].into();
    i.label_ids = [
        (
            mc_api::labelidentity::normalized_label(&ns, &labels(&[("app", "client")])),
            7,
        ),
        (
            mc_api::labelidentity::normalized_label(&ns, &labels(&[("app", "db")])),
            8,
        ),
    ]
    .into();
    i.pods = if i.node_name == "node" {
        vec![client()]
    } else {
        Vec::new()
    };
    // The gateways see every Pod of their cluster.
    i.cluster_pods = match i.node_name.as_str() {
        "wgw" => vec![pod("server", SERVER, "db", "198.18.22.1")],
        "egw" => vec![client()],
        _ => Vec::new(),
    };
    i.policies = vec![PolicyObject {
        namespace: Some("prod".into()),
        name: "db-svc-allow-ingress-from-client-only".into(),
        spec: serde_json::from_value(serde_json::json!({
            "priority": 1, "tier": "application",
            "appliedTo": [{"podSelector": {"matchLabels": {"app": "db"}}}],
            "ingress": [
                {"action": "Allow", "from": [{"scope": "ClusterSet",
                    "podSelector": {"matchLabels": {"app": "client"}}}]},
                {"action": "Drop"}],
        }))
        .expect("the policy's spec"),
    }];
}

/// `mc-agent attach` on one Node of a Strait variant (and the policy program's link with
/// `link_policy`): the programs loaded afresh, the pinned maps and links kept.
fn attach(v: Variant, node: &str, agent: &Path, link_policy: bool) -> anyhow::Result<()> {
    let out = Command::new("nsenter")
        .arg(format!("--net=/run/netns/{}", ns(v, node)))
        .arg(agent)
        .arg("--pin-root")
        .arg(bpffs(v, node).join("mc/v1"))
        .args(["attach", "--uplink", "eth0"])
        .args(link_policy.then_some("--stretched-policy"))
        .output()?;
    if !out.status.success() {
        bail!(
            "mc-agent attach in {}: {}",
            ns(v, node),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// Loads the Strait variants' programs again, one variant after the other (which first
/// changes from round to round). Where the kernel puts a program's JIT image changes its time
/// by tens of ns on a CPU with aligned branch and return thunks (the ITS mitigation): loaded
/// once, the variant loaded last always took the same draw (docs/benchmarks.md, 2026-11-28); so
/// every round gets new draws, and the medians span them.
fn reload_strait(agent: &Path, round: usize) -> anyhow::Result<()> {
    let mut order = STRAIT_VARIANTS;
    order.rotate_left(round % STRAIT_VARIANTS.len());
    for v in order {
        for n in BPF_NODES {
            // The policy program where it is linked now (where the agent would link it).
            let linked = bpffs(v, n).join("mc/v1/links/netfilter_ingress").exists();
            attach(v, n, agent, linked)?;
        }
    }
    Ok(())
}

/// What the agent does on one Node: the maps from its inputs, its routes to the remote prefixes
/// (installed in the Node's namespace by the agent's own code), then the config flag that
/// depends on those routes.
fn sync(v: Variant, node: &str, inputs: &Inputs) -> anyhow::Result<()> {
    let layout = PinLayout::new(bpffs(v, node).join("mc/v1"));
    let mut maps = DataplaneMaps::open_pinned(&layout)?;
    // What the agent finds of the uplink (a veth into the router here); (d') as if it were a
    // NIC: the hairpin transmits on it.
    let uplink_peer = v != Variant::StraitPolicyTransmit
        && in_ns(v, node, || routes::uplink_has_peer_elsewhere("eth0"))
            .join()
            .map_err(|_| anyhow::anyhow!("uplink check thread in {node}"))?
            .with_context(|| format!("uplink in {node}"))?;
    let mut d = desired(&Inputs {
        uplink_peer,
        ..inputs.clone()
    });
    if let Some(why) = d.not_ready {
        bail!("{node}: {why}");
    }
    apply(&mut maps, &d)?;
    let prefixes: BTreeSet<_> = d.routes.keys().copied().collect();
    let toward = d.routes_toward();
    let routed = toward.map(|toward| Routed {
        toward,
        prefixes: prefixes.clone(),
    });
    in_ns(v, node, move || routes::sync("eth0", &prefixes, toward))
        .join()
        .map_err(|_| anyhow::anyhow!("route sync thread in {node}"))?
        .with_context(|| format!("routes in {node}"))?;
    d.config.flags |= d.routed_flag(routed.as_ref());
    apply(&mut maps, &d)?;
    Ok(())
}

/// Runs `f` on a thread inside a namespace of the topology.
fn in_ns<T: Send + 'static>(
    v: Variant,
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let path = format!("/run/netns/{}", ns(v, name));
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        nix::sched::setns(file.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
            .unwrap_or_else(|e| panic!("setns {path}: {e}"));
        f()
    })
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The congestion control the iperf3 senders reported: the TCP tests depend on it (BBR paces
/// one stream well below what the path carries; cubic, without reordering, fills it).
static CONGESTION_CONTROL: std::sync::Mutex<BTreeSet<String>> =
    std::sync::Mutex::new(BTreeSet::new());

fn iperf(v: Variant, streams: u32, seconds: u64) -> anyhow::Result<f64> {
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns(v, "client"),
            "iperf3",
            "-J",
            "-c",
            SERVER,
        ])
        .args([
            "-p",
            &IPERF_PORT.to_string(),
            "-t",
            &seconds.to_string(),
            "-P",
            &streams.to_string(),
        ])
        .output()
        .context("running iperf3")?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("iperf3 JSON")?;
    if let Some(e) = v["error"].as_str() {
        bail!("iperf3: {e}");
    }
    if let Some(cc) = v["end"]["sender_tcp_congestion"].as_str() {
        CONGESTION_CONTROL
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(cc.to_string());
    }
    v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .context("no bits_per_second in iperf3's report")
}

/// 1-byte ping-pong over one TCP connection: (transactions per second, median round trip).
fn request_response(v: Variant, seconds: u64) -> anyhow::Result<(f64, Duration)> {
    let ready = Arc::new(AtomicBool::new(false));
    let r2 = ready.clone();
    let server = in_ns(v, "server", move || -> std::io::Result<()> {
        let listener = TcpListener::bind((SERVER, RR_PORT))?;
        r2.store(true, Ordering::Release);
        let (mut conn, _) = listener.accept()?;
        conn.set_nodelay(true)?;
        let mut b = [0u8; 1];
        while conn.read_exact(&mut b).is_ok() {
            conn.write_all(&b)?;
        }
        Ok(())
    });
    while !ready.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let client = in_ns(v, "client", move || -> std::io::Result<Vec<Duration>> {
        let mut conn = TcpStream::connect((SERVER, RR_PORT))?;
        conn.set_nodelay(true)?;
        let mut rtts = Vec::new();
        let end = Instant::now() + Duration::from_secs(seconds);
        let mut b = [7u8; 1];
        while Instant::now() < end {
            let t = Instant::now();
            conn.write_all(&b)?;
            conn.read_exact(&mut b)?;
            rtts.push(t.elapsed());
        }
        Ok(rtts)
    });
    let mut rtts = client
        .join()
        .map_err(|_| anyhow::anyhow!("client thread"))??;
    let _ = server.join();
    rtts.sort();
    let rate = rtts.len() as f64 / seconds as f64;
    Ok((rate, rtts.get(rtts.len() / 2).copied().unwrap_or_default()))
}

/// Softirq time in nanoseconds, all CPUs (from /proc/stat).
fn softirq_ns() -> u64 {
    cpu_ns(&[7])
}

/// The CPU time all CPUs spent in the columns `fields` of `/proc/stat`'s first line (1 user,
/// 2 nice, 3 system, 6 irq, 7 softirq, ...), in ns.
fn cpu_ns(fields: &[usize]) -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let columns: Vec<u64> = stat
        .lines()
        .next()
        .map(|l| {
            l.split_whitespace()
                .map(|v| v.parse().unwrap_or(0))
                .collect()
        })
        .unwrap_or_default();
    let ticks: u64 = fields.iter().filter_map(|&f| columns.get(f)).sum();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    (u128::from(ticks) * 1_000_000_000 / u128::from(hz)) as u64
}

/// Busy CPU time (user, nice, system, irq, softirq) on all CPUs, in ns.
fn busy_ns() -> u64 {
    cpu_ns(&[1, 2, 3, 6, 7])
}

/// Datagrams per `sendmmsg`/`recvmmsg` call in the UDP flood.
const BATCH: usize = 64;

fn iovec(buf: &mut [u8]) -> libc::iovec {
    libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    }
}

/// `BATCH` message headers, the i-th pointing at the one iovec `iov(i)` (which must outlive their
/// use).
fn mmsg_headers(iov: impl Fn(usize) -> *mut libc::iovec) -> [libc::mmsghdr; BATCH] {
    // SAFETY: an all-zero mmsghdr is a valid value of this plain C struct.
    let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
    for (i, m) in msgs.iter_mut().enumerate() {
        m.msg_hdr.msg_iov = iov(i);
        m.msg_hdr.msg_iovlen = 1;
    }
    msgs
}

/// 64-byte UDP frames (18-byte payload) as fast as one sender thread goes with `sendmmsg`:
/// (delivered packets per second, softirq ns per delivered packet).
fn udp_flood(v: Variant, seconds: u64) -> anyhow::Result<(f64, f64)> {
    let received = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let ready = Arc::new(AtomicBool::new(false));
    let (r, s, rd) = (received.clone(), stop.clone(), ready.clone());
    let receiver = in_ns(v, "server", move || -> std::io::Result<()> {
        let sock = UdpSocket::bind((SERVER, UDP_PORT))?;
        sock.set_read_timeout(Some(Duration::from_millis(100)))?;
        rd.store(true, Ordering::Release);
        // recvmmsg: up to BATCH datagrams per system call, so the receiver keeps up.
        let mut bufs = [[0u8; 64]; BATCH];
        let mut iovs: Vec<libc::iovec> = bufs.iter_mut().map(|b| iovec(b)).collect();
        let base = iovs.as_mut_ptr();
        let mut msgs = mmsg_headers(|i| base.wrapping_add(i));
        let fd = std::os::fd::AsRawFd::as_raw_fd(&sock);
        while !s.load(Ordering::Relaxed) {
            // SAFETY: msgs, iovs and bufs outlive the call; SO_RCVTIMEO bounds the wait.
            let n = unsafe {
                libc::recvmmsg(
                    fd,
                    msgs.as_mut_ptr(),
                    BATCH as u32,
                    libc::MSG_WAITFORONE,
                    std::ptr::null_mut(),
                )
            };
            if n > 0 {
                r.fetch_add(n as u64, Ordering::Relaxed);
            }
        }
        Ok(())
    });
    while !ready.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let softirq_before = softirq_ns();
    let start_count = received.load(Ordering::Relaxed);
    let sender = in_ns(v, "client", move || -> std::io::Result<()> {
        let sock = UdpSocket::bind("10.244.1.5:0")?;
        sock.connect((SERVER, UDP_PORT))?;
        // sendmmsg: BATCH datagrams per system call, so the sender is not what limits the rate.
        let mut payload = [0u8; 18];
        let mut iov = iovec(&mut payload);
        let one: *mut libc::iovec = &mut iov;
        let mut msgs = mmsg_headers(|_| one);
        let fd = std::os::fd::AsRawFd::as_raw_fd(&sock);
        let end = Instant::now() + Duration::from_secs(seconds);
        while Instant::now() < end {
            for _ in 0..16 {
                // SAFETY: msgs, iov and payload outlive the call; the socket is connected.
                unsafe { libc::sendmmsg(fd, msgs.as_mut_ptr(), BATCH as u32, 0) };
            }
        }
        Ok(())
    });
    sender
        .join()
        .map_err(|_| anyhow::anyhow!("sender thread"))??;
    std::thread::sleep(Duration::from_millis(200));
    let delivered = received.load(Ordering::Relaxed) - start_count;
    let softirq = softirq_ns() - softirq_before;
    stop.store(true, Ordering::Relaxed);
    receiver
        .join()
        .map_err(|_| anyhow::anyhow!("receiver thread"))??;
    if delivered == 0 {
        bail!("no UDP packet was delivered");
    }
    Ok((
        delivered as f64 / seconds as f64,
        softirq as f64 / delivered as f64,
    ))
}

/// A row of the six ratios, in the table's columns.
fn ratio_row(name: &str, r: &[f64; 6]) -> String {
    format!(
        "{:<24} {:>11.2}x {:>10.2}x {:>10.2}x {:>8.2}x {:>10.2}x {:>12.2}x",
        name, r[0], r[1], r[2], r[3], r[4], r[5]
    )
}

fn median(v: Vec<f64>) -> f64 {
    quantile(v, 0.5)
}

/// The value at `at` (0 to 1) of the sorted values (the nearest rank; for the quartiles, as
/// many values outside on either side: the first is at rank k, the third at n - 1 - k).
fn quantile(mut v: Vec<f64>, at: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let last = v.len() - 1;
    let k = (last as f64 * at.min(1.0 - at)).round() as usize;
    if at <= 0.5 { v[k] } else { v[last - k] }
}

/// A range of ratios, as the table prints them.
fn span(low: f64, high: f64) -> String {
    format!("{low:.2}-{high:.2}x")
}

#[derive(Default, Clone)]
struct Row {
    tcp1: f64,
    tcp4: f64,
    rr: f64,
    rtt_us: f64,
    pps: f64,
    softirq_ns: f64,
}

/// Each program's name (Node and hook), mean time per run (ns) with the kernel's BPF statistics
/// on, and runs.
type Programs = Vec<(String, f64, u64)>;

/// Each program's cumulative run time (ns) and runs, as the kernel counts them.
type ProgramStats = Vec<(String, u64, u64)>;

/// What [`measure_all`] measured: each variant's rounds, the Strait variants' program times,
/// and one stream's costs ([`stream_costs_over_rounds`]).
type Measured = (
    Rounds,
    Vec<(Variant, Programs)>,
    Vec<(Variant, StreamCosts)>,
);

/// Run time and run count of the program behind each pinned Strait link (the kernel counts them
/// while `kernel.bpf_stats_enabled` is 1).
fn program_stats(v: Variant) -> ProgramStats {
    let mut out = Vec::new();
    for node in BPF_NODES {
        for hook in ["eth0_ingress", "eth0_egress", "netfilter_ingress"] {
            let link = bpffs(v, node).join("mc/v1/links").join(hook);
            let json = |args: &[&str]| -> Option<serde_json::Value> {
                let o = Command::new("bpftool")
                    .args(args)
                    .arg("--json")
                    .output()
                    .ok()?;
                serde_json::from_slice(&o.stdout).ok()
            };
            let Some(link_path) = link.to_str() else {
                continue;
            };
            let Some(id) =
                json(&["link", "show", "pinned", link_path]).and_then(|l| l["prog_id"].as_u64())
            else {
                continue;
            };
            let Some(prog) = json(&["prog", "show", "id", &id.to_string()]) else {
                continue;
            };
            out.push((
                format!("{node} {hook}"),
                prog["run_time_ns"].as_u64().unwrap_or(0),
                prog["run_cnt"].as_u64().unwrap_or(0),
            ));
        }
    }
    out
}

/// Sets `kernel.bpf_stats_enabled` and returns the value it had.
fn bpf_stats(enabled: bool) -> String {
    let path = "/proc/sys/kernel/bpf_stats_enabled";
    let old = std::fs::read_to_string(path).unwrap_or_else(|_| "0".into());
    let _ = std::fs::write(path, if enabled { "1" } else { "0" });
    old.trim().to_owned()
}

/// The four tests: each runs for every variant in turn before the next test begins.
#[derive(Clone, Copy)]
enum Test {
    Tcp1,
    Tcp4,
    RequestResponse,
    Udp,
}

const TESTS: [Test; 4] = [Test::Tcp1, Test::Tcp4, Test::RequestResponse, Test::Udp];

/// Builds a variant's topology and starts its iperf3 server (stopped when dropped).
fn bring_up(v: Variant, agent: &Path) -> anyhow::Result<Server> {
    build(v, agent).with_context(|| format!("building the topology for {}", v.label()))?;
    let server = Command::new("ip")
        .args(["netns", "exec", &ns(v, "server"), "iperf3", "-s", "-p"])
        .arg(IPERF_PORT.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting iperf3 -s")?;
    Ok(Server(server))
}

/// Warms up a variant's neighbours, conntrack and (for Strait) the SNAT entry's path.
fn warm_up(v: Variant) {
    let _ = Command::new("ip")
        .args(["netns", "exec", &ns(v, "client"), "ping", "-c", "3"])
        .args(["-i", "0.2", "-W", "1", SERVER])
        .output();
}

/// Runs one test through a variant's topology; its figures go into their columns of `values`.
fn run_test(v: Variant, test: Test, seconds: u64, values: &mut [f64; 6]) -> anyhow::Result<()> {
    match test {
        Test::Tcp1 => values[0] = iperf(v, 1, seconds)?,
        Test::Tcp4 => values[1] = iperf(v, 4, seconds)?,
        Test::RequestResponse => {
            let (rate, p50) = request_response(v, seconds)?;
            values[2] = rate;
            values[3] = p50.as_secs_f64() * 1e6;
        }
        Test::Udp => {
            let (pps, softirq_ns) = udp_flood(v, seconds)?;
            values[4] = pps;
            values[5] = softirq_ns;
        }
    }
    Ok(())
}

/// For a Strait variant, one more request/response and UDP run with the kernel's BPF statistics
/// on: each program's own time per packet (they time every program run, which costs enough per
/// packet that the measured runs leave them off).
fn program_times(v: Variant, seconds: u64) -> anyhow::Result<Programs> {
    let old = bpf_stats(true);
    let before = program_stats(v);
    let measured = request_response(v, seconds).and_then(|_| udp_flood(v, seconds));
    let after = program_stats(v);
    bpf_stats(old == "1");
    measured?;
    let mut programs: Programs = stats_delta(&before, after)
        .into_iter()
        .map(|(name, ns, runs)| (name, ns as f64 / runs.max(1) as f64, runs))
        .collect();
    programs.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(programs)
}

/// Each program's run time and runs between two [`program_stats`] readings, matched by name (a
/// program whose statistics could not be read in either is left out).
fn stats_delta(before: &ProgramStats, after: ProgramStats) -> ProgramStats {
    after
        .into_iter()
        .filter_map(|(name, t1, c1)| {
            let (_, t0, c0) = before.iter().find(|(n, _, _)| *n == name)?;
            Some((name, t1.saturating_sub(*t0), c1.saturating_sub(*c0)))
        })
        .collect()
}

/// 64 KiB, the unit of the one-stream figures below: about the largest GSO packet.
const CHUNK: f64 = 65536.0;

/// One more one-stream TCP run through a variant: the busy CPU time of the whole machine (ns),
/// the 64 KiB delivered and the rate (b/s), and, with `stats` (a Strait variant, BPF statistics
/// on for the run), each program's time and runs. Says what one TCP stream pays for Strait's
/// programs against what plain routing spends on the same bytes in all.
fn stream_costs(
    v: Variant,
    seconds: u64,
    stats: bool,
) -> anyhow::Result<(f64, f64, f64, ProgramStats)> {
    let old = stats.then(|| bpf_stats(true));
    let before = if stats { program_stats(v) } else { Vec::new() };
    let busy0 = busy_ns();
    let measured = iperf(v, 1, seconds);
    let busy = busy_ns().saturating_sub(busy0);
    let after = if stats { program_stats(v) } else { Vec::new() };
    if let Some(old) = old {
        bpf_stats(old == "1");
    }
    let rate = measured?;
    let chunks = (rate * seconds as f64 / 8.0 / CHUNK).max(1.0);
    Ok((busy as f64, chunks, rate, stats_delta(&before, after)))
}

/// One stream's costs per variant ([`stream_costs`]), over [`STREAM_ROUNDS`] rounds: in each,
/// one run of (a), (d) and (c) with the BPF statistics off (their busy CPU time per 64 KiB and
/// rate, the medians printed), then one of (d) and (c) with them on (each program's time and
/// runs, summed over the rounds, per 64 KiB delivered in those runs): timing every program run
/// costs CPU, which must not count in the busy time.
fn stream_costs_over_rounds(seconds: u64) -> anyhow::Result<Vec<(Variant, StreamCosts)>> {
    const COMPARED: [Variant; 3] = [Variant::Plain, Variant::StraitPolicy, Variant::Strait];
    let mut busy: Vec<Vec<f64>> = vec![Vec::new(); COMPARED.len()];
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); COMPARED.len()];
    let mut chunks = vec![0.0; COMPARED.len()];
    let mut programs: Vec<ProgramStats> = vec![Vec::new(); COMPARED.len()];
    for round in 0..STREAM_ROUNDS {
        eprintln!("  one stream's costs ({}/{STREAM_ROUNDS})", round + 1);
        for (i, &v) in COMPARED.iter().enumerate() {
            let (b, c, rate, _) = stream_costs(v, seconds, false)?;
            busy[i].push(b / c);
            rates[i].push(rate);
        }
        for (i, &v) in COMPARED.iter().enumerate() {
            if !STRAIT_VARIANTS.contains(&v) {
                continue;
            }
            let (_, c, _, p) = stream_costs(v, seconds, true)?;
            chunks[i] += c;
            for (name, ns, runs) in p {
                match programs[i].iter_mut().find(|(n, _, _)| *n == name) {
                    Some(e) => {
                        e.1 += ns;
                        e.2 += runs;
                    }
                    None => programs[i].push((name, ns, runs)),
                }
            }
        }
    }
    Ok(COMPARED
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let mut per_chunk: Vec<(String, f64, f64)> = programs[i]
                .iter()
                .map(|(name, ns, runs)| {
                    (
                        name.clone(),
                        *ns as f64 / chunks[i],
                        *runs as f64 / chunks[i],
                    )
                })
                .collect();
            per_chunk.sort_by(|a, b| a.0.cmp(&b.0));
            let costs = StreamCosts {
                busy_ns: median(busy[i].clone()),
                rate: median(rates[i].clone()),
                programs: per_chunk,
            };
            (v, costs)
        })
        .collect())
}

/// One stream's costs through a variant ([`stream_costs_over_rounds`]).
struct StreamCosts {
    /// The machine's busy CPU time per 64 KiB delivered (median, statistics off), ns.
    busy_ns: f64,
    /// The stream's rate in those runs (median), b/s.
    rate: f64,
    /// Each program's time (ns) and runs per 64 KiB delivered, statistics on.
    programs: Vec<(String, f64, f64)>,
}

/// Runs per variant of [`stream_costs_over_rounds`].
const STREAM_ROUNDS: usize = 5;

/// Each variant's figures (in the table's columns), round by round.
type Rounds = Vec<Vec<[f64; 6]>>;

/// The order in which the variants take their turns in sequence `n`: a Williams design, whose
/// 2 x N sequences (a Latin square and its mirror) put every variant in every position twice and,
/// within a test, right after every other twice, so that over each 2N consecutive sequences no
/// variant is favoured by coming first or by following one whose load may linger. A test's
/// sequence is the round's number plus the test's ([`measure_all`]): over 2N rounds, every test
/// runs through all of them.
fn turns(n: usize) -> [usize; VARIANTS.len()] {
    const N: usize = VARIANTS.len();
    // 0, 1, N-1, 2, N-2, ...
    let first: [usize; N] = std::array::from_fn(|j| match j {
        0 => 0,
        j if j % 2 == 1 => j.div_ceil(2),
        j => N - j / 2,
    });
    let k = n % (2 * N);
    let mut order: [usize; N] = std::array::from_fn(|j| (first[j] + k % N) % N);
    if k >= N {
        order.reverse();
    }
    order
}

/// Every variant's topology up at once, then `runs` rounds: in each, every test runs through
/// every variant in turn (in the balanced order of [`turns`]), so that
/// a variant's run and the others' of the same test are seconds apart, not minutes. Returns
/// each variant's rounds, the Strait variants' program times and one stream's costs.
fn measure_all(
    runs: usize,
    seconds: u64,
    agent: &Path,
    only: &[Variant],
) -> anyhow::Result<Measured> {
    let mut servers = Vec::new();
    for v in VARIANTS {
        eprintln!("  building {}", v.label());
        servers.push(bring_up(v, agent)?);
    }
    std::thread::sleep(Duration::from_millis(500));
    for v in VARIANTS {
        warm_up(v);
    }
    let mut samples: Rounds = vec![Vec::with_capacity(runs); VARIANTS.len()];
    for round in 0..runs {
        let mut this = [[0.0; 6]; VARIANTS.len()];
        eprintln!("  round {}/{runs}", round + 1);
        if round > 0 {
            reload_strait(agent, round).context("loading the Strait programs again")?;
        }
        for (t, test) in TESTS.into_iter().enumerate() {
            for i in turns(round + t) {
                let v = VARIANTS[i];
                if !only.contains(&v) {
                    continue;
                }
                run_test(v, test, seconds, &mut this[i])
                    .with_context(|| format!("{} in round {}", v.label(), round + 1))?;
            }
        }
        for (rounds, values) in samples.iter_mut().zip(this) {
            rounds.push(values);
        }
    }
    let mut programs = Vec::new();
    for v in STRAIT_VARIANTS.into_iter().filter(|v| only.contains(v)) {
        eprintln!("  {} with BPF statistics", v.label());
        programs.push((v, program_times(v, seconds.max(5))?));
    }
    // A failure here leaves the rounds above standing.
    let streams = if only.len() == VARIANTS.len() {
        stream_costs_over_rounds(seconds.max(4)).unwrap_or_else(|e| {
            eprintln!("  one stream's costs not measured: {e:#}");
            Vec::new()
        })
    } else {
        Vec::new()
    };
    drop(servers);
    Ok((samples, programs, streams))
}

/// Runs the bench with `only` the variants measured (every topology is up all the same, as the
/// machine's load is part of the measurement); `only` empty: all of them.
pub fn run(runs: usize, seconds: u64, only: &[Variant]) -> anyhow::Result<()> {
    let agent = testbed::cargo::build_bin("mc-agent", true)?;
    teardown();
    let measured = measure_all(runs, seconds, &agent, only);
    teardown();
    let (samples, programs, streams) = measured?;
    let rows: Vec<(Variant, Row)> = VARIANTS
        .iter()
        .zip(&samples)
        .map(|(&variant, runs)| {
            let m = |k: usize| median(runs.iter().map(|v| v[k]).collect());
            let row = Row {
                tcp1: m(0),
                tcp4: m(1),
                rr: m(2),
                rtt_us: m(3),
                pps: m(4),
                softirq_ns: m(5),
            };
            (variant, row)
        })
        .collect();
    let (a, a2, b, c, d, d2) = (
        rows[0].1.clone(),
        rows[1].1.clone(),
        rows[2].1.clone(),
        rows[3].1.clone(),
        rows[4].1.clone(),
        rows[5].1.clone(),
    );
    let (e, f) = (rows[6].1.clone(), rows[7].1.clone());
    println!(
        "\ndataplane: medians of {runs} rounds, {seconds} s per test, every variant's topology up at once and the variants taking turns test by test; Pod MTU lowered by each tunnel's overhead (and for (a'))"
    );
    let congestion = CONGESTION_CONTROL
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    println!(
        "TCP congestion control, as iperf3's senders report it: {} (the machine's default, which the test namespaces inherit)\n",
        if congestion.is_empty() {
            "not reported"
        } else {
            &congestion
        }
    );
    println!(
        "{:<24} {:>11} {:>11} {:>11} {:>9} {:>11} {:>13}",
        "", "TCP 1 st.", "TCP 4 st.", "TCP RR", "RTT p50", "UDP 64 B", "softirq/pkt"
    );
    for (variant, r) in rows.iter().filter(|(v, _)| only.contains(v)) {
        println!(
            "{:<24} {:>7.2} Gb/s {:>6.2} Gb/s {:>8.0} /s {:>6.1} us {:>7.0} kpps {:>10.0} ns",
            variant.label(),
            r.tcp1 / 1e9,
            r.tcp4 / 1e9,
            r.rr,
            r.rtt_us,
            r.pps / 1e3,
            r.softirq_ns
        );
    }
    let measured = |x: usize| only.contains(&VARIANTS[x]);
    for (name, c, base) in [
        ("(c)/(a)", (&c, 3), (&a, 0)),
        ("(c)/(a')", (&c, 3), (&a2, 1)),
        ("(c)/(b)", (&c, 3), (&b, 2)),
        ("(d)/(a)", (&d, 4), (&a, 0)),
        ("(d)/(a')", (&d, 4), (&a2, 1)),
        ("(d)/(c)", (&d, 4), (&c, 3)),
        ("(d')/(a)", (&d2, 5), (&a, 0)),
        ("(e)/(f)", (&e, 6), (&f, 7)),
        ("(e)/(c)", (&e, 6), (&c, 3)),
        ("(f)/(a)", (&f, 7), (&a, 0)),
    ]
    .into_iter()
    .filter(|(_, (_, x), (_, base))| measured(*x) && measured(*base))
    .map(|(name, (c, _), (base, _))| (name, c, base))
    {
        let r = [
            c.tcp1 / base.tcp1,
            c.tcp4 / base.tcp4,
            c.rr / base.rr,
            c.rtt_us / base.rtt_us,
            c.pps / base.pps,
            c.softirq_ns / base.softirq_ns,
        ];
        println!("{}", ratio_row(name, &r));
    }
    // The same ratios taken round by round, each variant against the other's run of the same
    // test seconds before or after it: their median, and the middle half of the rounds (how far
    // one round's ratio strays).
    println!(
        "\nround by round (each run against the other variant's run of the same test in the same round):"
    );
    // Against (a') too: the issue's reference figures for plain routing lowered the sender's MTU
    // by the tunnel's overhead, as Strait's Pods have it.
    for (name, x, base) in [
        ("(c)/(a)", 3, 0),
        ("(d)/(a)", 4, 0),
        ("(d)/(a')", 4, 1),
        ("(d)/(c)", 4, 3),
        ("(d')/(a)", 5, 0),
        ("(d)/(d')", 4, 5),
        ("(e)/(f)", 6, 7),
        ("(e)/(c)", 6, 3),
    ]
    .into_iter()
    .filter(|(_, x, base)| measured(*x) && measured(*base))
    {
        let ratios: Vec<[f64; 6]> = samples[x]
            .iter()
            .zip(&samples[base])
            .map(|(v, b)| std::array::from_fn(|k| v[k] / b[k]))
            .collect();
        let q = |at: f64| -> [f64; 6] {
            std::array::from_fn(|k| quantile(ratios.iter().map(|r| r[k]).collect(), at))
        };
        println!("{}", ratio_row(&format!("{name} paired median"), &q(0.5)));
        let (low, high) = (q(0.25), q(0.75));
        println!(
            "{:<24} {:>12} {:>11} {:>11} {:>9} {:>11} {:>13}",
            format!("{name} middle half"),
            span(low[0], high[0]),
            span(low[1], high[1]),
            span(low[2], high[2]),
            span(low[3], high[3]),
            span(low[4], high[4]),
            span(low[5], high[5]),
        );
    }
    println!(
        "\ntargets: TCP >= 0.95x (a), small-packet rate >= 0.9x (a), round trip <= 1.1x (a) (the issue's reference figures lower the sender's MTU by the tunnel's overhead: (a')); softirq/pkt is the whole path's kernel time; (d') is (d) with the gateway's hairpin transmitting on its uplink, as on a NIC, instead of handing packets to the veth's other end (which plain routing's forward does not skip)"
    );
    println!(
        "encryption (issue 56): (e) >= 0.9x (f) on TCP throughput and request/response (WireGuard is the cost, not Strait's handling of it); (e)/(c) is what encryption costs Strait; both tunnels are the same WireGuard: {} (boringtun's threads' CPU time is user time, not softirq)",
        WIREGUARD
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .first()
            .map_or("not started", |w| w.implementation)
    );
    println!(
        "\nStrait's programs over one extra request/response and UDP run with kernel.bpf_stats_enabled (helpers included; not during the runs above):"
    );
    for (variant, programs) in &programs {
        println!("  {}:", variant.label());
        for (name, ns, runs) in programs {
            println!("    {name:<22} {ns:>7.0} ns per run over {runs} runs");
        }
    }
    println!(
        "\nOne TCP stream, {STREAM_ROUNDS} more rounds: the machine's busy CPU time (user, nice, system, irq, softirq) per 64 KiB delivered and the rate, medians of runs with BPF statistics off; Strait's programs' time and runs per 64 KiB delivered, over runs with kernel.bpf_stats_enabled on (which adds some 40 ns to each program run):"
    );
    let plain = streams
        .iter()
        .find(|(v, _)| *v == Variant::Plain)
        .map(|(_, c)| c.busy_ns);
    for (variant, c) in &streams {
        let against = plain
            .filter(|p| *p > 0.0 && *variant != Variant::Plain)
            .map(|p| format!(", {:.3}x (a)'s", c.busy_ns / p))
            .unwrap_or_default();
        println!(
            "  {}: {:.2} Gb/s, busy CPU {:.1} us per 64 KiB{against}",
            variant.label(),
            c.rate / 1e9,
            c.busy_ns / 1e3
        );
        let mut total = 0.0;
        for (name, ns, runs) in &c.programs {
            total += ns;
            println!("    {name:<22} {ns:>7.0} ns per 64 KiB over {runs:.2} runs");
        }
        if !c.programs.is_empty() {
            let share = plain
                .filter(|p| *p > 0.0)
                .map(|p| format!(", {:.1}% of (a)'s busy CPU per 64 KiB", 100.0 * total / p))
                .unwrap_or_default();
            println!("    all programs           {total:>7.0} ns per 64 KiB{share}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_turns_are_balanced_over_2n_sequences() {
        const N: usize = VARIANTS.len();
        for from in [0, 3, 2 * N] {
            let mut at = [[0; N]; N];
            let mut follows = [[0; N]; N];
            for n in from..from + 2 * N {
                let order = turns(n);
                let mut sorted = order;
                sorted.sort();
                assert_eq!(
                    sorted,
                    std::array::from_fn(|i| i),
                    "sequence {n}: {order:?}"
                );
                for (position, &v) in order.iter().enumerate() {
                    at[position][v] += 1;
                }
                for w in order.windows(2) {
                    follows[w[0]][w[1]] += 1;
                }
            }
            // Every variant in every position twice; every variant right after every other
            // twice (and never after itself).
            assert_eq!(at, [[2; N]; N]);
            for (v, row) in follows.iter().enumerate() {
                for (next, &count) in row.iter().enumerate() {
                    assert_eq!(count, if v == next { 0 } else { 2 }, "{next} after {v}");
                }
            }
        }
    }
}
