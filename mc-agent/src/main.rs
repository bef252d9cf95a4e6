//! `mc-agent`: the Strait Node agent.

use std::{io::IsTerminal as _, net::Ipv4Addr, path::PathBuf, time::Duration};

use anyhow::Context as _;
use aya::maps::MapData;
use clap::{Parser, Subcommand};
use mc_agent::{
    bpffs::PinLayout,
    config::Multicluster,
    counters,
    dataplane::{self, AttachMode, Dataplane, DataplaneMaps},
    host::{self, DEFAULT_STATE_DIR, DEFAULT_SYSCTL_ROOT, DEFAULT_WIREGUARD_KEY, HostState},
    run::{RunOptions, run},
};
use mc_common::{
    DEFAULT_PIN_ROOT,
    dataplane::{
        CONFIG_WIREGUARD, EXPOSED_SERVICE, PEER_LOCAL_NODE, PEER_REMOTE_GATEWAY, ROLE_GATEWAY,
        ROLE_NODE, ROUTE_NO_WIREGUARD_PEER, SNAT_FORWARD,
    },
    maps,
};
use mc_kube::Metrics;

#[derive(Parser)]
#[command(version = mc_agent::VERSION, about = "Strait Node agent (eBPF dataplane)")]
struct Cli {
    /// Directory on bpffs where maps and links are pinned (overrides the config's pinPath).
    #[arg(long, global = true, env = "MC_PIN_ROOT")]
    pin_root: Option<PathBuf>,
    /// Where the agent records the Node's sysctls from before Strait (a hostPath in a Pod).
    #[arg(long, global = true, env = "MC_STATE_DIR", default_value = DEFAULT_STATE_DIR)]
    state_dir: PathBuf,
    /// Where the Node's sysctls are: /proc/sys, or in a container that is not privileged (whose
    /// /proc/sys is read-only) the host's /proc/sys/net mounted under `<root>/net`.
    #[arg(long, global = true, env = "MC_SYSCTL_ROOT", default_value = DEFAULT_SYSCTL_ROOT)]
    sysctl_root: PathBuf,
    /// This Node's WireGuard private key (`trafficEncryptionMode: wireGuard`), created on first
    /// use: a hostPath, so that a restarted agent keeps its key (`uninstall` removes it).
    #[arg(long, global = true, env = "MC_WIREGUARD_KEY", default_value = DEFAULT_WIREGUARD_KEY)]
    wireguard_key: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Attach to the uplink and keep the maps equal to the Gateway and ClusterInfoImports.
    Run {
        /// The agent config (antrea-agent's `multicluster` section plus Strait's keys).
        #[arg(long)]
        config: Option<PathBuf>,
        /// This Node's name.
        #[arg(long, env = "NODE_NAME")]
        node_name: String,
        /// Kubeconfig; in-cluster configuration when absent.
        #[arg(long, env = "KUBECONFIG")]
        kubeconfig: Option<PathBuf>,
        /// Default namespace of the Gateway and ClusterInfoImports when the config's is empty.
        #[arg(long, env = "POD_NAMESPACE", default_value = "kube-system")]
        pod_namespace: String,
        /// Where /healthz, /readyz and /metrics are served.
        #[arg(long, default_value = ":9090")]
        health_addr: String,
        /// Seconds between full resyncs (besides every watch event).
        #[arg(long, default_value_t = 30)]
        resync: u64,
    },
    /// Load, attach and pin the programs on the uplink, then exit (the pins keep them attached).
    Attach {
        #[arg(long)]
        uplink: String,
        /// Also attach the stretched NetworkPolicy program at netfilter's PREROUTING (and the
        /// masquerade program at POSTROUTING).
        #[arg(long)]
        stretched_policy: bool,
        /// How to attach: tcx, tc (a legacy clsact filter) or auto (TCX where the kernel has it).
        #[arg(long, default_value = "auto")]
        tc_attach: String,
    },
    /// Take Strait off this Node: detach and unpin every program, remove the maps, the routes
    /// (proto 167) and restore the sysctls the agent changed. Stop the agent first (delete its
    /// DaemonSet), or it attaches again.
    Uninstall {
        /// Change nothing: list what of Strait remains on this Node; exit 1 if anything does.
        #[arg(long, conflicts_with = "stay")]
        check: bool,
        /// After uninstalling, keep running until SIGTERM (the container of the cleanup
        /// DaemonSet, whose readiness probe is `uninstall --check`).
        #[arg(long)]
        stay: bool,
    },
    /// Remove the pinned links of the uplink (detaching the programs), and with --maps the maps
    /// (routes and sysctls stay: `uninstall` removes everything).
    Detach {
        #[arg(long)]
        uplink: String,
        #[arg(long)]
        maps: bool,
    },
    /// Print the counters (summed over CPUs) from the pinned map.
    Counters {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Print the role, remote routes, tunnel peers, Pod label IDs and SNAT table from the pinned
    /// maps.
    Maps,
    /// Mount a BPF filesystem at --path unless one is there already (the DaemonSet's privileged
    /// init container, whose mount reaches the host through Bidirectional propagation, so the
    /// agent itself needs no privilege for its pins to outlive it).
    MountBpffs {
        #[arg(long, default_value = "/sys/fs/bpf")]
        path: PathBuf,
    },
}

fn main() -> anyhow::Result<()> {
    init_tracing();
    let cli = Cli::parse();
    let pin_root = cli
        .pin_root
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_PIN_ROOT));
    let layout = PinLayout::new(&pin_root);
    let host = HostState::new(&cli.state_dir)
        .with_sysctl_root(&cli.sysctl_root)
        .with_wireguard_key(&cli.wireguard_key);
    match cli.command {
        Command::Run {
            config,
            node_name,
            kubeconfig,
            pod_namespace,
            health_addr,
            resync,
        } => run_agent(RunArgs {
            config,
            node_name,
            kubeconfig,
            pod_namespace,
            health_addr,
            resync,
            pin_root: cli.pin_root,
            host,
        }),
        Command::Attach {
            uplink,
            stretched_policy,
            tc_attach,
        } => {
            let mode = AttachMode::parse(&tc_attach)
                .map_err(|e| anyhow::anyhow!("--tc-attach {e}"))?
                .unwrap_or_else(AttachMode::for_kernel);
            attach(layout, &uplink, stretched_policy, mode)
        }
        // `--stay` conflicts with `--check` (clap refuses the two together).
        Command::Uninstall { check: true, .. } => check_uninstalled(&layout, &host),
        Command::Uninstall { stay, .. } => uninstall_and_stay(&layout, &host, stay),
        Command::Detach { uplink, maps } => detach(&layout, &uplink, maps),
        Command::Counters { json } => print_counters(&layout, json),
        Command::Maps => print_maps(&layout),
        Command::MountBpffs { path } => mount_bpffs(&path),
    }
}

/// Logs to stderr (in colour on a terminal), filtered by `RUST_LOG` (default: info, the kube
/// crates' warnings only).
fn init_tracing() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,kube_runtime=warn,kube_client=warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

/// `run`'s arguments, with the global options it reads.
struct RunArgs {
    config: Option<PathBuf>,
    node_name: String,
    kubeconfig: Option<PathBuf>,
    pod_namespace: String,
    health_addr: String,
    resync: u64,
    /// `--pin-root`, over the config's `pinPath`.
    pin_root: Option<PathBuf>,
    host: HostState,
}

/// `mc-agent run`: the agent's loop and its health endpoint on a multi-threaded runtime until
/// either ends or a signal comes; then, the runtime stopped, the programs are told that the
/// userspace WireGuard device went with this process.
fn run_agent(args: RunArgs) -> anyhow::Result<()> {
    let RunArgs {
        config,
        node_name,
        kubeconfig,
        pod_namespace,
        health_addr,
        resync,
        pin_root,
        host,
    } = args;
    let config = agent_config(config.as_ref(), pin_root)?;
    let namespace = if config.namespace.is_empty() {
        pod_namespace
    } else {
        config.namespace.clone()
    };
    let pin_layout = PinLayout::new(&config.pin_path);
    let runtime = tokio::runtime::Runtime::new()?;
    let outcome = runtime.block_on(async move {
        let mut shutdown = mc_kube::Shutdown::listen();
        let client = mc_kube::client(kubeconfig.as_ref()).await?;
        let metrics = Metrics::default();
        let serve = metrics.clone().serve(&health_addr);
        let opts = RunOptions {
            node_name,
            namespace,
            config,
            resync: Duration::from_secs(resync.max(1)),
            host,
        };
        // On a worker: a pass that loads the programs keeps its thread for seconds, and a
        // SIGTERM meanwhile must still stop the agent at once.
        let mut work = tokio::spawn(run(client, opts, metrics));
        let outcome = tokio::select! {
            r = serve => r,
            r = &mut work => r.context("the agent's loop")?,
            signal = shutdown.recv() => {
                tracing::info!(signal, "asked to stop; exiting (the pinned dataplane keeps forwarding)");
                Ok(())
            }
        };
        // No pass starts after this.
        work.abort();
        outcome
    });
    // A pass in the middle of a load is abandoned after 200 ms as a kill would abandon
    // it: the next agent reconciles from the pinned state.
    runtime.shutdown_timeout(Duration::from_millis(200));
    // boringtun's device ends with this process: the programs are told now.
    mc_agent::run::forget_gone_wireguard(&pin_layout);
    outcome
}

/// The agent config read from `path` (without one: the gateway enabled, the rest default), its
/// `pinPath` replaced by `--pin-root` when that is given.
fn agent_config(path: Option<&PathBuf>, pin_root: Option<PathBuf>) -> anyhow::Result<Multicluster> {
    let mut config = match path {
        Some(path) => Multicluster::parse(
            &std::fs::read_to_string(path)
                .with_context(|| format!("reading the agent config {}", path.display()))?,
        )
        .with_context(|| format!("in {}", path.display()))?,
        None => Multicluster {
            enable_gateway: true,
            ..Default::default()
        },
    };
    if let Some(root) = pin_root {
        config.pin_path = root;
    }
    Ok(config)
}

/// `uninstall --check`: lists what of Strait remains on this Node; an error if anything does.
fn check_uninstalled(layout: &PinLayout, state: &HostState) -> anyhow::Result<()> {
    let left = host::leftovers(layout, state)?;
    if left.is_empty() {
        println!("nothing of Strait on this Node");
        return Ok(());
    }
    for item in &left {
        println!("{item}");
    }
    anyhow::bail!("{} item(s) of Strait remain on this Node", left.len());
}

/// `uninstall`, and with `--stay` then waiting for SIGTERM (the cleanup DaemonSet's container).
fn uninstall_and_stay(layout: &PinLayout, state: &HostState, stay: bool) -> anyhow::Result<()> {
    // Listening before the work: a SIGTERM during it must not be lost (PID 1).
    let stay = if stay {
        let runtime = tokio::runtime::Runtime::new()?;
        let shutdown = {
            let _in = runtime.enter();
            mc_kube::Shutdown::listen()
        };
        Some((runtime, shutdown))
    } else {
        None
    };
    uninstall(layout, state)?;
    if let Some((runtime, mut shutdown)) = stay {
        let signal = runtime.block_on(shutdown.recv());
        tracing::info!(signal, "asked to stop");
    }
    Ok(())
}

/// `detach`: removes the uplink's pinned links (and with `maps` the maps), logging each pin.
fn detach(layout: &PinLayout, uplink: &str, maps: bool) -> anyhow::Result<()> {
    for path in dataplane::detach(layout, uplink, maps)
        .with_context(|| format!("detaching from {uplink}"))?
    {
        tracing::info!(path = %path.display(), "removed pin");
    }
    Ok(())
}

/// `counters`: the pinned counters summed over CPUs, as a table or JSON.
fn print_counters(layout: &PinLayout, json: bool) -> anyhow::Result<()> {
    let path = layout.map(maps::COUNTERS);
    let map = counters::open_pinned(&path).with_context(|| {
        format!(
            "opening {}: is the agent attached with this --pin-root?",
            path.display()
        )
    })?;
    let readings = counters::read(&map)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&readings)?);
    } else {
        println!("{:<24} {:>14} {:>16}", "COUNTER", "PACKETS", "BYTES");
        for r in readings {
            println!("{:<24} {:>14} {:>16}", r.name, r.packets, r.bytes);
        }
    }
    Ok(())
}

/// `mount-bpffs`: a BPF filesystem at `path` unless one is there already.
fn mount_bpffs(path: &std::path::Path) -> anyhow::Result<()> {
    if mc_agent::bpffs::mount(path)? {
        println!("mounted a BPF filesystem at {}", path.display());
    } else {
        println!("{} is a BPF filesystem already", path.display());
    }
    Ok(())
}

/// `uninstall`: takes Strait off this Node, logging what went, then checks that nothing is left.
fn uninstall(layout: &PinLayout, state: &HostState) -> anyhow::Result<()> {
    let done = host::uninstall(layout, state)?;
    for link in &done.links {
        tracing::info!(link = %link.display(), "detached the program and removed the pinned link");
    }
    if done.pin_dir_removed {
        tracing::info!(pin_dir = %layout.root().display(), "removed the pinned maps");
    }
    if !done.routes.is_empty() {
        tracing::info!(routes = ?done.routes, "removed Strait's routes (proto {})", mc_agent::routes::ROUTE_PROTO);
    }
    for (key, value) in &done.sysctls {
        tracing::info!(key, value, "restored the sysctl");
    }
    if done.wireguard_key_removed {
        tracing::info!(key = %state.wireguard_key().display(), "removed the WireGuard private key");
    }
    if done.wireguard_device_removed {
        tracing::info!(
            device = mc_agent::wireguard::DEVICE,
            "deleted the kernel's WireGuard device"
        );
    }
    let left = host::leftovers(layout, state)?;
    anyhow::ensure!(
        left.is_empty(),
        "still on this Node after uninstalling (is the agent still running?): {}",
        left.join("; ")
    );
    tracing::info!("nothing of Strait is left on this Node");
    Ok(())
}

/// `attach`: loads, attaches and pins the programs on the uplink (and with `stretched_policy`
/// the netfilter programs), logging each link.
fn attach(
    layout: PinLayout,
    uplink: &str,
    stretched_policy: bool,
    mode: AttachMode,
) -> anyhow::Result<()> {
    let root = layout.root().to_owned();
    let mut dataplane = Dataplane::load(layout.clone())?;
    if stretched_policy {
        for (hook, link) in mc_agent::netfilter::attach(mc_agent::EBPF_OBJECT, &layout)? {
            match hook {
                mc_agent::netfilter::Hook::Policy => {
                    tracing::info!(link = %link.display(), "attached the policy program at PREROUTING")
                }
                mc_agent::netfilter::Hook::Masquerade => {
                    tracing::info!(link = %link.display(), "attached the masquerade program at POSTROUTING")
                }
            }
        }
    }
    for hook in dataplane.attach_uplink_with(uplink, mode)? {
        tracing::info!(
            uplink,
            direction = hook.direction.as_str(),
            reused = hook.reused,
            mode = hook.mode.as_str(),
            link = %hook.link_pin.display(),
            pin_root = %root.display(),
            "{}",
            hook.what()
        );
    }
    Ok(())
}

/// `maps`: the pinned maps, section by section: the config, the remote routes, the tunnel peers,
/// the Pod label IDs, what is exposed, the SNAT table's forward entries and the next hops.
fn print_maps(layout: &PinLayout) -> anyhow::Result<()> {
    let maps = DataplaneMaps::open_pinned(layout).with_context(|| {
        format!(
            "opening the maps under {}: is the agent attached with this --pin-root?",
            layout.root().display()
        )
    })?;
    let encrypted = print_config(&maps)?;
    print_routes(&maps, encrypted)?;
    print_peers(&maps)?;
    print_pod_ids(&maps)?;
    print_exposed(&maps)?;
    print_snat(&maps)?;
    print_next_hops(&maps)
}

/// The role, addresses, tunnel port and MTU, and with encryption on the WireGuard device;
/// returns whether encryption is on.
fn print_config(maps: &DataplaneMaps<MapData>) -> anyhow::Result<bool> {
    let c = maps.config.get(&0, 0)?;
    let role = match c.role {
        ROLE_GATEWAY => "gateway",
        ROLE_NODE => "node",
        _ => "none (not configured)",
    };
    println!(
        "ROLE {role}  NODE {}  GATEWAY internal {} / gatewayIP {}  TUNNEL udp/{}  MTU {}",
        Ipv4Addr::from(c.node_ip),
        Ipv4Addr::from(c.gateway_internal_ip),
        Ipv4Addr::from(c.gateway_ip),
        c.tunnel_port,
        c.mtu
    );
    let encrypted = c.flags & CONFIG_WIREGUARD != 0;
    if encrypted {
        let wg = maps.wireguard.get(&0, 0)?;
        println!(
            "ENCRYPTION wireGuard  DEVICE {}  UDP {}",
            if wg.ifindex == 0 {
                "not up (traffic to remote gateways is dropped)".to_owned()
            } else if mc_agent::wireguard::is_kernel_device(mc_agent::wireguard::DEVICE) {
                format!("ifindex {} (the kernel's)", wg.ifindex)
            } else {
                format!("ifindex {} (userspace, boringtun)", wg.ifindex)
            },
            wg.port
        );
    }
    Ok(encrypted)
}

/// The remote prefixes, with their cluster and gateway (and, with encryption on, whether the
/// cluster has no WireGuard key).
fn print_routes(maps: &DataplaneMaps<MapData>, encrypted: bool) -> anyhow::Result<()> {
    println!(
        "\n{:<20} {:>8} {:<16}",
        "REMOTE PREFIX", "CLUSTER", "REMOTE GATEWAY"
    );
    let mut routes: Vec<_> = maps.routes.iter().collect::<Result<_, _>>()?;
    routes.sort_by_key(|(k, _)| (k.data(), k.prefix_len()));
    for (k, v) in routes {
        let prefix = format!("{}/{}", Ipv4Addr::from(k.data()), k.prefix_len());
        let unkeyed = encrypted && v.cluster & ROUTE_NO_WIREGUARD_PEER != 0;
        println!(
            "{prefix:<20} {:>8} {:<16}{}",
            v.cluster & !ROUTE_NO_WIREGUARD_PEER,
            Ipv4Addr::from(v.gateway_ip).to_string(),
            if unkeyed {
                " no WireGuard key: dropped"
            } else {
                ""
            }
        );
    }
    Ok(())
}

/// The tunnel peers: remote gateways and (on the gateway) local Nodes.
fn print_peers(maps: &DataplaneMaps<MapData>) -> anyhow::Result<()> {
    println!("\n{:<16} {:<16} {:>8}", "PEER", "KIND", "CLUSTER");
    let mut peers: Vec<_> = maps.peers.iter().collect::<Result<_, _>>()?;
    peers.sort_by_key(|(k, _)| *k);
    for (k, v) in peers {
        let kind = match v.kind {
            PEER_REMOTE_GATEWAY => "remote-gateway",
            PEER_LOCAL_NODE => "local-node",
            _ => "?",
        };
        println!(
            "{:<16} {kind:<16} {:>8}",
            Ipv4Addr::from(k).to_string(),
            v.cluster
        );
    }
    Ok(())
}

/// This Node's Pod addresses with their label IDs.
fn print_pod_ids(maps: &DataplaneMaps<MapData>) -> anyhow::Result<()> {
    println!("\n{:<16} {:>8}", "POD ADDRESS", "LABEL ID");
    let mut ids: Vec<_> = maps.pod_ids.iter().collect::<Result<_, _>>()?;
    ids.sort_by_key(|(k, _)| *k);
    for (k, v) in ids {
        println!("{:<16} {:>8}", Ipv4Addr::from(k).to_string(), v.id);
    }
    Ok(())
}

/// What remote clusters may open flows to: the Pod CIDRs, then the exported Services and
/// their endpoints (port 0, fragments and ICMP, left out).
fn print_exposed(maps: &DataplaneMaps<MapData>) -> anyhow::Result<()> {
    println!("\nEXPOSED (what remote clusters may open flows to; port 0: fragments and ICMP)");
    let mut prefixes: Vec<_> = maps.exposed_prefixes.iter().collect::<Result<_, _>>()?;
    prefixes.sort_by_key(|(k, _)| (k.data(), k.prefix_len()));
    for (k, _) in prefixes {
        println!(
            "{:<22} pod-cidr",
            format!("{}/{}", Ipv4Addr::from(k.data()), k.prefix_len())
        );
    }
    let mut exposed: Vec<_> = maps.exposed.iter().collect::<Result<_, _>>()?;
    exposed.sort_by_key(|(k, _)| *k);
    for (k, v) in exposed.iter().filter(|(k, _)| k.port != 0) {
        let proto = if k.proto == 17 { "udp" } else { "tcp" };
        let kind = if v.kind == EXPOSED_SERVICE {
            "service"
        } else {
            "endpoint"
        };
        let addr = format!("{}:{}", Ipv4Addr::from(k.addr), k.port);
        println!("{addr:<22} {kind:<9} {proto}");
    }
    Ok(())
}

/// The SNAT table's forward entries (original -> translated, via which Node), and their count.
fn print_snat(maps: &DataplaneMaps<MapData>) -> anyhow::Result<()> {
    println!("\nSNAT (forward entries: original -> translated, via Node)");
    let mut n = 0;
    for item in maps.snat.iter() {
        let (k, v) = item?;
        if v.flags != SNAT_FORWARD {
            continue;
        }
        n += 1;
        let proto = match k.proto {
            6 => "tcp",
            17 => "udp",
            1 => "icmp",
            _ => "?",
        };
        println!(
            "{proto:<4} {}:{} -> {}:{}  as {}:{}  node {}",
            Ipv4Addr::from(k.src),
            k.src_port,
            Ipv4Addr::from(k.dst),
            k.dst_port,
            Ipv4Addr::from(v.addr),
            v.port,
            Ipv4Addr::from(v.node)
        );
    }
    println!("{n} flows");
    Ok(())
}

/// The next hops the programs learned from the kernel, with when each expires.
fn print_next_hops(maps: &DataplaneMaps<MapData>) -> anyhow::Result<()> {
    println!("\nNEXT HOPS (learned by the programs from the kernel; used until they expire)");
    println!(
        "{:<16} {:<17} {:<17} {:>7} {:>10}",
        "ADDRESS", "DST MAC", "SRC MAC", "IFINDEX", "EXPIRES"
    );
    let now = coarse_monotonic_ns();
    let mut hops: Vec<_> = maps.next_hops.iter().collect::<Result<_, _>>()?;
    hops.sort_by_key(|(k, _)| *k);
    for (k, v) in hops {
        let mac = |m: &[u8]| {
            m.iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(":")
        };
        let expires = if v.expires_ns > now {
            format!("in {} ms", (v.expires_ns - now) / 1_000_000)
        } else {
            "expired".to_owned()
        };
        println!(
            "{:<16} {:<17} {:<17} {:>7} {expires:>10}",
            Ipv4Addr::from(k).to_string(),
            mac(&v.macs[..6]),
            mac(&v.macs[6..]),
            v.ifindex
        );
    }
    Ok(())
}

/// The clock of `bpf_ktime_get_coarse_ns` (CLOCK_MONOTONIC_COARSE), in nanoseconds.
fn coarse_monotonic_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}
