//! The testbed's Nodes and Pods (docs/design.md §5); `cargo xtask testbed up --no-nodes` leaves
//! them out.
//!
//! Per cluster, two Nodes: network namespaces whose `eth0` sits on the cluster's underlay
//! (`198.18.<n>.0/24`, a bridge in `strait-core`, which routes between the underlays and to the
//! API servers). The testbed plays the kubelet (it registers each Node with its InternalIP and a
//! Ready condition it can flip, and Pods with their status) and the CNI (a veth per Pod, a /24 of
//! the cluster's Pod CIDR per Node, plain routes between the Nodes, the Pod MTU lowered by the
//! tunnel overhead). Every Node runs a real kube-proxy and mc-agent. Each Node also has its own
//! mount namespace with its own bpffs on /sys/fs/bpf, so that the agent pins under
//! /sys/fs/bpf/mc/v1 there and `testbed exec <cluster>/<node> -- bpftool ...` sees it as on a
//! real Node.

use std::{
    path::{Path, PathBuf},
    process::Command as Cmd,
};

use anyhow::{Context as _, bail};
use serde_json::json;

use crate::{
    cargo::{build_bin, build_test_server},
    controllers,
    paths::{kube_bin_dir, testbed_dir},
    pki, pods,
    proc::{self, Procs, run as exec},
    runtime,
    shared::{admin_kubeconfig, cluster_dir, ip, kubectl_for, kubelet_mode, netns_exists, say},
    topology::{CLUSTERS, CORE_NETNS, Cluster, PodNetwork, TestNode},
};

/// MTU of every underlay link.
const UPLINK_MTU: u32 = 1500;
/// Pods' MTU: the uplink's minus the tunnel's 36 bytes (mc_common::dataplane::ENCAP_OVERHEAD).
const POD_MTU: u32 = UPLINK_MTU - 36;
/// Where the Nodes' mount namespaces are bound.
const MOUNT_NS_DIR: &str = "/run/strait-testbed/mnt";
/// The address every Pod uses as its next hop; each Pod's host-side veth holds it.
const POD_GATEWAY: &str = "169.254.1.1";

fn sh(netns: &str, line: &str) -> anyhow::Result<String> {
    exec(
        Cmd::new("ip")
            .args(["netns", "exec", netns, "sh", "-c"])
            .arg(line),
    )
}

pub fn mount_ns(node: &TestNode) -> PathBuf {
    Path::new(MOUNT_NS_DIR).join(format!("{}-{}", node.cluster.name, node.name))
}

fn is_mountpoint(path: &Path) -> bool {
    Cmd::new("mountpoint")
        .arg("-q")
        .arg(path)
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Creates (once) the Node's mount namespace with a private bpffs on /sys/fs/bpf (and, for a
/// kubelet Node, its own directories over the standard paths).
fn ensure_mount_ns(node: &TestNode, kubelet: bool) -> anyhow::Result<()> {
    let dir = Path::new(MOUNT_NS_DIR);
    std::fs::create_dir_all(dir)?;
    if !is_mountpoint(dir) {
        // A namespace can only be bound on a private mount.
        exec(Cmd::new("mount").arg("--bind").arg(dir).arg(dir))?;
        exec(Cmd::new("mount").args(["--make-private"]).arg(dir))?;
    }
    let file = mount_ns(node);
    if is_mountpoint(&file) {
        if kubelet {
            runtime::prepare_mounts(node, &file)?;
        }
        return Ok(());
    }
    std::fs::write(&file, b"")?;
    exec(
        Cmd::new("unshare")
            .arg(format!("--mount={}", file.display()))
            .args(["--propagation", "private", "true"]),
    )?;
    exec(
        Cmd::new("nsenter")
            .arg(format!("--mount={}", file.display()))
            .args(["mount", "-t", "bpf", "bpf", "/sys/fs/bpf"]),
    )?;
    if kubelet {
        runtime::prepare_mounts(node, &file)?;
    }
    Ok(())
}

fn ensure_router(cluster: &Cluster) -> anyhow::Result<()> {
    let bridge = format!("br-{}", cluster.name);
    if Path::new("/run/netns").join(CORE_NETNS).exists()
        && sh(
            CORE_NETNS,
            &format!("if ip link show {bridge} >/dev/null 2>&1; then echo yes; fi"),
        )?
        .trim()
            == "yes"
    {
        return Ok(());
    }
    sh(
        CORE_NETNS,
        &format!(
            "sysctl -qw net.ipv4.ip_forward=1 && ip link add {bridge} type bridge && \
             ip addr add {}/24 dev {bridge} && ip link set {bridge} up",
            cluster.router_ip()
        ),
    )?;
    Ok(())
}

/// The Node's namespace, uplink, routes and sysctls.
fn ensure_node_network(node: &TestNode) -> anyhow::Result<()> {
    let ns = node.netns();
    if netns_exists(&ns) {
        return Ok(());
    }
    ip(&["netns", "add", &ns])?;
    ip(&[
        "link",
        "add",
        "eth0",
        "netns",
        &ns,
        "type",
        "veth",
        "peer",
        &node.router_veth(),
        "netns",
        CORE_NETNS,
    ])?;
    sh(
        CORE_NETNS,
        &format!(
            "ip link set {v} master br-{c} && ip link set {v} up",
            v = node.router_veth(),
            c = node.cluster.name
        ),
    )?;
    // Routes: the testbed's 198.18.0.0/15 (API servers, the other underlays) and the cluster's
    // Service CIDR (so that the Node's own connections to ClusterIPs, the `kubernetes` Service
    // first, find a route before kube-proxy translates them) via the router; never a default
    // route. Forwarding for the Pods. Reverse-path filtering stays the kernel's default: the agent
    // loosens it on the uplink itself (and `mc-agent uninstall` puts it back). A bridge CNI
    // (Flannel's `cni0`) needs bridged Pod-to-Pod traffic to pass iptables, as kube-proxy's
    // iptables mode requires (br_netfilter, per namespace).
    let bridge_nf = if node.cluster.network == PodNetwork::Flannel {
        " && sysctl -qw net.bridge.bridge-nf-call-iptables=1"
    } else {
        ""
    };
    sh(
        &ns,
        &format!(
            "ip link set lo up && ip addr add {ip}/24 dev eth0 && ip link set eth0 mtu {UPLINK_MTU} up && \
             ip route add 198.18.0.0/15 via {router} dev eth0 && \
             ip route add {services} via {router} dev eth0 && \
             sysctl -qw net.ipv4.ip_forward=1{bridge_nf}",
            ip = node.ip(),
            router = node.cluster.router_ip(),
            services = node.cluster.service_cidr,
        ),
    )?;
    Ok(())
}

/// The testbed as CNI: each Node routes the other Nodes' Pod CIDRs to them (Flannel routes its
/// own, through its VXLAN device, on kubelet Nodes).
fn ensure_pod_routes(node: &TestNode, kubelets: bool) -> anyhow::Result<()> {
    if kubelets && node.cluster.network == PodNetwork::Flannel {
        return Ok(());
    }
    for other in
        TestNode::all().filter(|o| o.cluster.name == node.cluster.name && o.index != node.index)
    {
        sh(
            &node.netns(),
            &format!(
                "ip route replace {} via {} dev eth0",
                other.pod_cidr(),
                other.ip()
            ),
        )?;
    }
    Ok(())
}

fn kubectl(cluster: &Cluster) -> anyhow::Result<Cmd> {
    Ok(kubectl_for(&kube_bin_dir()?.join("kubectl"), cluster))
}

/// Registers the Node object as the kubelet would, Ready, gateway candidate if first.
fn register(node: &TestNode) -> anyhow::Result<()> {
    let annotations = if node.gateway_candidate() {
        "  annotations:\n    multicluster.antrea.io/gateway: \"true\"\n"
    } else {
        ""
    };
    let manifest = format!(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  labels:\n    kubernetes.io/hostname: {name}\n    strait.io/testbed: \"true\"\n{annotations}spec:\n  podCIDR: {cidr}\n  podCIDRs: [{cidr}]\n",
        name = node.name,
        cidr = node.pod_cidr()
    );
    apply(&node.cluster, &manifest)?;
    set_ready(node, true)
}

fn apply(cluster: &Cluster, manifest: &str) -> anyhow::Result<()> {
    controllers::apply(&kube_bin_dir()?.join("kubectl"), cluster, manifest)
}

/// Sets the Node's addresses and Ready condition (the kubelet's job).
pub fn set_ready(node: &TestNode, ready: bool) -> anyhow::Result<()> {
    let now = "2026-01-01T00:00:00Z";
    let status = json!({"status": {
        "addresses": [{"type": "InternalIP", "address": node.ip()},
                      {"type": "Hostname", "address": node.name}],
        "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" },
                        "reason": "StraitTestbed", "message": "set by the testbed",
                        "lastHeartbeatTime": now, "lastTransitionTime": now}],
    }});
    exec(kubectl(&node.cluster)?.args([
        "patch",
        "node",
        node.name,
        "--subresource=status",
        "--type=merge",
        "-p",
        &status.to_string(),
    ]))?;
    Ok(())
}

fn agent_config(cluster: &Cluster) -> anyhow::Result<PathBuf> {
    let path = cluster_dir(cluster).join("strait-agent.conf");
    std::fs::write(
        &path,
        "multicluster:\n  enableGateway: true\n  enablePodToPodConnectivity: true\n  namespace: kube-system\n  uplink: eth0\n  tunnelPort: 6081\n  pinPath: /sys/fs/bpf/mc/v1\n",
    )?;
    Ok(path)
}

/// Brings up every Node (idempotent): network, Node object, kube-proxy and mc-agent; with
/// `kubelets`, containerd and a kubelet instead of the Node object and mc-agent written by the
/// testbed (the agent then comes as the DaemonSet of deploy/agent).
pub fn up(procs: &Procs, bin: &Path, release: bool, kubelets: bool) -> anyhow::Result<()> {
    for cluster in &CLUSTERS {
        ensure_router(cluster)?;
        let network = if kubelets {
            cluster.network.name()
        } else {
            "the testbed's own veths"
        };
        say(format!(
            "{}: Pods on {network}, kube-proxy in {} mode",
            cluster.name, cluster.proxy_mode
        ));
    }
    for node in TestNode::all() {
        ensure_node_network(&node)?;
        ensure_mount_ns(&node, kubelets)?;
        if !kubelets {
            register(&node)?;
        }
    }
    if kubelets {
        for node in TestNode::all() {
            ensure_pod_routes(&node, kubelets)?;
            runtime_up(procs, &node)?;
        }
        for node in TestNode::all() {
            adopt(&node)?;
        }
        // Flannel leases each Node its `podCIDR`, which `adopt` has just set.
        for node in TestNode::all().filter(|n| n.cluster.network == PodNetwork::Flannel) {
            runtime::flannel_up(
                procs,
                &node,
                &mount_ns(&node),
                &admin_kubeconfig(&node.cluster),
            )?;
        }
    }
    let agent = if kubelets {
        None
    } else {
        Some(build_bin("mc-agent", release)?)
    };
    for node in TestNode::all() {
        ensure_pod_routes(&node, kubelets)?;
        let cdir = cluster_dir(&node.cluster);
        let proxy = format!("{}-{}-kube-proxy", node.cluster.name, node.name);
        if procs.ensure(
            &proxy,
            &node.netns(),
            &bin.join("kube-proxy"),
            &[
                format!(
                    "--kubeconfig={}",
                    cdir.join("kube-proxy.kubeconfig").display()
                ),
                format!("--hostname-override={}", node.name),
                format!("--proxy-mode={}", node.cluster.proxy_mode),
                format!("--cluster-cidr={}", node.cluster.pod_cidr()),
                // Conntrack limits are the host's business, not a test Node's.
                "--conntrack-max-per-core=0".into(),
                "--conntrack-tcp-timeout-established=0".into(),
                "--conntrack-tcp-timeout-close-wait=0".into(),
                format!("--metrics-bind-address={}:10249", node.ip()),
                format!("--healthz-bind-address={}:10256", node.ip()),
            ],
        )? {
            say(format!(
                "started kube-proxy on {}/{}",
                node.cluster.name, node.name
            ));
        }
        let Some(agent) = &agent else { continue };
        let name = format!("{}-{}-mc-agent", node.cluster.name, node.name);
        if procs.ensure_in(
            &name,
            &node.netns(),
            Some(&mount_ns(&node)),
            agent,
            &[
                "run".into(),
                format!("--config={}", agent_config(&node.cluster)?.display()),
                format!("--node-name={}", node.name),
                format!("--kubeconfig={}", admin_kubeconfig(&node.cluster).display()),
                format!("--health-addr={}:9090", node.ip()),
                format!(
                    "--state-dir={}",
                    runtime::node_dir(&node).join("state").display()
                ),
            ],
        )? {
            say(format!(
                "started mc-agent on {}/{}",
                node.cluster.name, node.name
            ));
        }
    }
    Ok(())
}

/// The Node's containerd and kubelet, with its kubeconfig, and a route from the control plane's
/// namespace to its Pods (the API servers reach webhooks at their Pods' addresses).
fn runtime_up(procs: &Procs, node: &TestNode) -> anyhow::Result<()> {
    let pki = cluster_dir(&node.cluster).join("pki");
    let user = pki::ensure_node(&pki, node.name)?;
    std::fs::write(
        cluster_dir(&node.cluster).join(format!("kubelet-{}.kubeconfig", node.name)),
        pki::kubeconfig(&pki, &node.cluster, &user)?,
    )?;
    runtime::up(procs, node, &mount_ns(node), POD_MTU)?;
    sh(
        CORE_NETNS,
        &format!("ip route replace {} via {}", node.pod_cidr(), node.ip()),
    )?;
    Ok(())
}

/// Once the kubelet has registered its Node: the Pod CIDR the testbed's CNI gives it, and the
/// Gateway annotation on the candidates (what an operator sets).
fn adopt(node: &TestNode) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !kubectl(&node.cluster)?
        .args(["get", "node", node.name])
        .output()?
        .status
        .success()
    {
        if std::time::Instant::now() > deadline {
            bail!(
                "the kubelet of {}/{} did not register its Node in 120 s; see {}",
                node.cluster.name,
                node.name,
                testbed_dir()
                    .join(format!(
                        "logs/{}-{}-kubelet.log",
                        node.cluster.name, node.name
                    ))
                    .display()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    let spec = json!({"spec": {"podCIDR": node.pod_cidr(), "podCIDRs": [node.pod_cidr()]}});
    let current = exec(kubectl(&node.cluster)?.args([
        "get",
        "node",
        node.name,
        "-o",
        "jsonpath={.spec.podCIDR}",
    ]))?;
    if current.trim().is_empty() {
        exec(kubectl(&node.cluster)?.args([
            "patch",
            "node",
            node.name,
            "--type=merge",
            "-p",
            &spec.to_string(),
        ]))?;
    }
    if node.gateway_candidate() {
        exec(kubectl(&node.cluster)?.args([
            "annotate",
            "--overwrite",
            "node",
            node.name,
            "multicluster.antrea.io/gateway=true",
        ]))?;
    }
    Ok(())
}

/// Every network namespace of the testbed's Nodes and Pods (for `down`).
pub fn namespaces() -> Vec<String> {
    std::fs::read_dir("/run/netns")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.starts_with("strait-") && n != CORE_NETNS)
                .collect()
        })
        .unwrap_or_default()
}

/// Stops what runs in the Nodes and Pods and removes their namespaces and mounts.
pub fn down() -> anyhow::Result<()> {
    let mut pids = Vec::new();
    for ns in namespaces() {
        pids.extend(proc::pids_in_netns(&ns));
    }
    if !pids.is_empty() {
        proc::terminate(&pids, std::time::Duration::from_secs(10));
    }
    runtime::remove_cgroups();
    for ns in namespaces() {
        ip(&["netns", "del", &ns])?;
    }
    let dir = Path::new(MOUNT_NS_DIR);
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let _ = Cmd::new("umount").arg(e.path()).status();
            let _ = std::fs::remove_file(e.path());
        }
    }
    if is_mountpoint(dir) {
        let _ = Cmd::new("umount").arg(dir).status();
    }
    Ok(())
}

/// A Pod: where it runs and its address.
#[derive(serde::Serialize, serde::Deserialize)]
struct PodRecord {
    node: String,
    ip: String,
    netns: String,
    veth: String,
}

fn pods_dir(cluster: &Cluster) -> PathBuf {
    cluster_dir(cluster).join("pods")
}

fn cluster(name: &str) -> anyhow::Result<Cluster> {
    CLUSTERS
        .into_iter()
        .find(|c| c.name == name)
        .with_context(|| format!("no cluster {name:?} (north, east or west)"))
}

fn node(cluster: &str, name: &str) -> anyhow::Result<TestNode> {
    TestNode::find(cluster, name).with_context(|| {
        format!("no Node {cluster}/{name}: the testbed's Nodes are node-a and node-b (was it brought up with --no-nodes?)")
    })
}

/// The lowest address of the Node's Pod /24, from .10, that no Pod recorded in `dir` has.
fn free_pod_ip(dir: &Path, c: &Cluster, n: &TestNode) -> anyhow::Result<String> {
    let used: Vec<String> = std::fs::read_dir(dir)?
        .flatten()
        .filter_map(|e| std::fs::read(e.path()).ok())
        .filter_map(|b| serde_json::from_slice::<PodRecord>(&b).ok())
        .map(|r| r.ip)
        .collect();
    let prefix = format!("10.{}.{}.", c.pod_octet, n.index);
    (10..250)
        .map(|i| format!("{prefix}{i}"))
        .find(|a| !used.contains(a))
        .context("the Node's Pod CIDR is full")
}

/// `testbed pod add`: a Pod namespace behind a Node and its Pod object, Running and Ready.
pub fn pod_add(
    cluster_name: &str,
    node_name: &str,
    name: &str,
    labels: &[String],
    serve_http: Option<u16>,
) -> anyhow::Result<()> {
    let c = cluster(cluster_name)?;
    let n = node(cluster_name, node_name)?;
    if !netns_exists(&n.netns()) {
        bail!("Node {cluster_name}/{node_name} is not up: run `cargo xtask testbed up`");
    }
    if kubelet_mode() {
        return pods::add(&c, &n, name, labels, serve_http);
    }
    let dir = pods_dir(&c);
    std::fs::create_dir_all(&dir)?;
    let record_path = dir.join(format!("{name}.json"));
    if record_path.exists() {
        bail!("Pod {cluster_name}/{name} exists already (`testbed pod del {cluster_name} {name}`)");
    }
    let ip_addr = free_pod_ip(&dir, &c, &n)?;
    let netns = pods::netns_name(cluster_name, name);
    let veth = format!("p{:08x}", fnv(&format!("{cluster_name}/{name}")));
    ip(&["netns", "add", &netns])?;
    ip(&[
        "link",
        "add",
        "eth0",
        "netns",
        &netns,
        "type",
        "veth",
        "peer",
        &veth,
        "netns",
        &n.netns(),
    ])?;
    sh(
        &n.netns(),
        &format!(
            "ip addr add {POD_GATEWAY}/32 dev {veth} && ip link set {veth} mtu {POD_MTU} up && \
             ip route add {ip_addr}/32 dev {veth}"
        ),
    )?;
    sh(
        &netns,
        &format!(
            "ip link set lo up && ip addr add {ip_addr}/32 dev eth0 && ip link set eth0 mtu {POD_MTU} up && \
             ip route add {POD_GATEWAY} dev eth0 scope link && \
             ip route add 10.0.0.0/8 via {POD_GATEWAY} dev eth0 && \
             ip route add 198.18.0.0/15 via {POD_GATEWAY} dev eth0"
        ),
    )?;
    let record = PodRecord {
        node: node_name.into(),
        ip: ip_addr.clone(),
        netns: netns.clone(),
        veth,
    };
    std::fs::write(&record_path, serde_json::to_vec(&record)?)?;

    let mut label_yaml = format!("    strait.io/testbed-pod: \"{name}\"\n");
    for l in labels {
        let (k, v) = l
            .split_once('=')
            .with_context(|| format!("label {l:?}: expected key=value"))?;
        label_yaml.push_str(&format!("    {k}: \"{v}\"\n"));
    }
    apply(
        &c,
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: default\n  labels:\n{label_yaml}spec:\n  nodeName: {node_name}\n  containers:\n    - name: main\n      image: strait-testbed/pod\n"
        ),
    )?;
    let now = "2026-01-01T00:00:00Z";
    let status = json!({"status": {
        "phase": "Running", "podIP": ip_addr, "podIPs": [{"ip": ip_addr}], "hostIP": n.ip(),
        "hostIPs": [{"ip": n.ip()}], "startTime": now,
        "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": now},
            {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now}],
        "containerStatuses": [{"name": "main", "ready": true, "restartCount": 0,
            "image": "strait-testbed/pod", "imageID": "", "started": true,
            "state": {"running": {"startedAt": now}}}],
    }});
    exec(kubectl(&c)?.args([
        "patch",
        "pod",
        name,
        "-n",
        "default",
        "--subresource=status",
        "--type=merge",
        "-p",
        &status.to_string(),
    ]))?;
    if let Some(port) = serve_http {
        let procs = Procs::new(&testbed_dir())?;
        let server = build_test_server()?;
        procs.ensure(
            &format!("{cluster_name}-pod-{name}-http"),
            &netns,
            &server,
            &[
                format!("--port={port}"),
                format!("--answer=hello from {cluster_name}/{name}"),
            ],
        )?;
    }
    say(format!(
        "Pod {cluster_name}/{name} on {node_name}: {ip_addr}"
    ));
    Ok(())
}

/// `testbed pod del`.
pub fn pod_del(cluster_name: &str, name: &str) -> anyhow::Result<()> {
    let c = cluster(cluster_name)?;
    if kubelet_mode() {
        return pods::del(&c, name);
    }
    let record_path = pods_dir(&c).join(format!("{name}.json"));
    let record: PodRecord = serde_json::from_slice(
        &std::fs::read(&record_path)
            .with_context(|| format!("no testbed Pod {cluster_name}/{name}"))?,
    )?;
    let pids = proc::pids_in_netns(&record.netns);
    proc::terminate(&pids, std::time::Duration::from_secs(5));
    if netns_exists(&record.netns) {
        ip(&["netns", "del", &record.netns])?;
    }
    let _ = kubectl(&c)?
        .args([
            "delete",
            "pod",
            name,
            "-n",
            "default",
            "--grace-period=0",
            "--force",
        ])
        .output();
    std::fs::remove_file(record_path)?;
    Ok(())
}

/// `testbed exec <cluster>/<pod-or-node> -- cmd`: runs a command on a Node (its network and
/// mount namespaces) or in a Pod. Returns the command's exit code.
pub fn exec_in(target: &str, command: &[String]) -> anyhow::Result<i32> {
    let (cluster_name, name) = target
        .split_once('/')
        .with_context(|| format!("{target:?}: expected <cluster>/<pod-or-node>"))?;
    let c = cluster(cluster_name)?;
    let mut cmd = Cmd::new("nsenter");
    if let Some(n) = TestNode::find(cluster_name, name) {
        cmd.arg(format!("--net=/run/netns/{}", n.netns()))
            .arg(format!("--mount={}", mount_ns(&n).display()));
    } else if kubelet_mode() {
        return pods::exec_in(&c, name, command);
    } else {
        let record: PodRecord = serde_json::from_slice(
            &std::fs::read(pods_dir(&c).join(format!("{name}.json")))
                .with_context(|| format!("{target}: neither a testbed Node nor a testbed Pod"))?,
        )?;
        cmd.arg(format!("--net=/run/netns/{}", record.netns));
    }
    let (program, args) = command
        .split_first()
        .context("no command given (testbed exec <target> -- <command>)")?;
    let status = cmd.arg("--").arg(program).args(args).status()?;
    Ok(status.code().unwrap_or(1))
}

/// `testbed load <archive>...`: into every Node's containerd.
pub fn load(archives: &[PathBuf]) -> anyhow::Result<()> {
    if !kubelet_mode() {
        bail!("the testbed's Nodes have no containerd (it was brought up with --processes)");
    }
    for archive in archives {
        if !archive.is_file() {
            bail!("{}: no such archive", archive.display());
        }
        for n in TestNode::all() {
            runtime::import(&n, &mount_ns(&n), archive)?;
        }
        say(format!("{} imported into every Node", archive.display()));
    }
    Ok(())
}

/// `testbed node stop|start <cluster> <node>`: the Node's kubelet.
pub fn kubelet(cluster_name: &str, node_name: &str, run: bool) -> anyhow::Result<()> {
    let n = node(cluster_name, node_name)?;
    if !kubelet_mode() {
        bail!("the testbed's Nodes have no kubelets (it was brought up with --processes)");
    }
    let procs = Procs::new(&testbed_dir())?;
    let name = format!("{cluster_name}-{node_name}-kubelet");
    if run {
        runtime::up(&procs, &n, &mount_ns(&n), POD_MTU)?;
    } else {
        let pid = procs
            .running(&name)
            .with_context(|| format!("no kubelet runs on {cluster_name}/{node_name}"))?;
        proc::terminate(&[pid], std::time::Duration::from_secs(10));
        say(format!("stopped the kubelet of {cluster_name}/{node_name}"));
    }
    Ok(())
}

/// `testbed node ready <cluster> <node> true|false`.
/// With kubelet Nodes, stops or starts the Node's kubelet and waits for the condition it gives.
pub fn node_ready(cluster_name: &str, node_name: &str, ready: bool) -> anyhow::Result<()> {
    let n = node(cluster_name, node_name)?;
    if kubelet_mode() {
        return pods::node_ready(&n.cluster, &n, ready, || {
            kubelet(cluster_name, node_name, ready)
        });
    }
    set_ready(&n, ready)
}

fn fnv(s: &str) -> u32 {
    s.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}
