//! A testbed Node's container runtime and kubelet (docs/design.md §5): containerd (built from its
//! Go module by scripts/build-node.sh) with Debian's runc and the standard CNI plugins, and the
//! pinned kubelet, both inside the Node's network and mount namespaces.
//!
//! Inside the Node's mount namespace the standard paths (`/var/lib/kubelet`, `/var/lib/containerd`,
//! `/run/containerd`, `/var/lib/cni`, `/etc/cni/net.d`, `/var/log/pods`, `/var/log/containers`)
//! are bound to directories of the Node's own under `target/testbed/nodes/<cluster>-<node>/`, so
//! that each component runs with its defaults and `testbed exec <cluster>/<node> -- ...` sees what
//! a real Node holds; the host only gets those (empty) directories as mount points. Each kubelet
//! has its own cgroup root (`/strait-testbed/<cluster>-<node>` in every hierarchy), runc uses the
//! cgroupfs driver (crun refuses this machine's hybrid cgroup layout), and containers keep the
//! runtime's default rlimits (below the machine's hard limits: the testbed cannot raise them, it
//! lacks CAP_SYS_RESOURCE, and neither can lower OOM scores: `restrict_oom_score_adj`).

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    process::Command as Cmd,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use crate::{
    image,
    paths::{flannel_bin_dir, kube_bin_dir, node_bin_dir, testbed_dir},
    proc::{self, Procs, run as exec},
    shared::{cluster_dir, say},
    topology::{PodNetwork, TestNode},
};

/// The standard paths each Node has for itself.
const NODE_PATHS: [&str; 10] = [
    "/var/lib/containerd",
    "/run/containerd",
    "/var/lib/kubelet",
    "/var/lib/cni",
    "/etc/cni/net.d",
    "/var/log/pods",
    "/var/log/containers",
    // The agent's record of the Node's sysctls (hostPath in deploy/agent).
    "/run/strait",
    // The agent's WireGuard key (hostPath in deploy/agent).
    "/var/lib/strait",
    // flanneld's lease (`subnet.env`), which the flannel CNI plugin reads.
    "/run/flannel",
];

/// Where Debian's containernetworking-plugins are.
const CNI_BIN_DIR: &str = "/usr/lib/cni";
/// Debian's runc.
const RUNC: &str = "/usr/sbin/runc";
/// The Pods' CNI network (its name shows in `crictl inspectp`).
const CNI_NETWORK: &str = "strait-testbed";
/// The CRI socket inside the Node.
const CRI_SOCKET: &str = "/run/containerd/containerd.sock";

pub fn node_dir(node: &TestNode) -> PathBuf {
    testbed_dir()
        .join("nodes")
        .join(format!("{}-{}", node.cluster.name, node.name))
}

/// The Node's own directory behind a standard path.
fn backing(node: &TestNode, path: &str) -> PathBuf {
    node_dir(node).join(path.trim_start_matches('/').replace('/', "_"))
}

/// The cgroup (below every hierarchy's root) the Node's kubelet puts its Pods under.
pub fn cgroup_root(node: &TestNode) -> String {
    format!("/strait-testbed/{}-{}", node.cluster.name, node.name)
}

/// Binds the Node's own directories over the standard paths in its mount namespace `mount_ns`
/// (those not bound yet: it runs on every `up`), makes the namespace's mounts shared among
/// themselves (the kubelet's mount propagation, the agent's Bidirectional bpffs) and creates the
/// kubelet's cgroup root.
pub fn prepare_mounts(node: &TestNode, mount_ns: &Path) -> anyhow::Result<()> {
    let mut script =
        String::from("set -e; mount --make-rshared /; mount --make-shared /sys/fs/bpf");
    for path in NODE_PATHS {
        let dir = backing(node, path);
        std::fs::create_dir_all(&dir)?;
        std::fs::create_dir_all(path)?;
        write!(
            script,
            "; mountpoint -q {path} || mount --bind {} {path}",
            dir.display()
        )?;
    }
    exec(
        Cmd::new("nsenter")
            .arg(format!("--mount={}", mount_ns.display()))
            .args(["sh", "-c", &script]),
    )
    .with_context(|| {
        format!(
            "binding the Node directories of {}/{}",
            node.cluster.name, node.name
        )
    })?;
    for hierarchy in cgroup_hierarchies() {
        std::fs::create_dir_all(hierarchy.join(cgroup_root(node).trim_start_matches('/')))?;
    }
    Ok(())
}

/// The mounted cgroup hierarchies: `/sys/fs/cgroup` itself on a cgroup v2 host, else the v1
/// controllers and the unified one of a hybrid layout.
fn cgroup_hierarchies() -> Vec<PathBuf> {
    if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        return vec![PathBuf::from("/sys/fs/cgroup")];
    }
    std::fs::read_dir("/sys/fs/cgroup")
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.join("cgroup.procs").exists())
                .collect()
        })
        .unwrap_or_default()
}

/// Every process in the Nodes' cgroups (the containers).
pub fn cgroup_pids() -> Vec<i32> {
    let mut pids = Vec::new();
    for hierarchy in cgroup_hierarchies() {
        collect_pids(&hierarchy.join("strait-testbed"), &mut pids);
    }
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// Kills what still runs in the Nodes' cgroups (the containers: they live in network namespaces
/// of their own) and removes those cgroups, deepest first.
pub fn remove_cgroups() {
    let tops: Vec<PathBuf> = cgroup_hierarchies()
        .into_iter()
        .map(|h| h.join("strait-testbed"))
        .filter(|t| t.exists())
        .collect();
    let mut pids = Vec::new();
    for top in &tops {
        collect_pids(top, &mut pids);
    }
    pids.sort_unstable();
    pids.dedup();
    if !pids.is_empty() {
        proc::terminate(&pids, Duration::from_secs(5));
    }
    // A cgroup whose last process was just killed can still be busy for a moment.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        for top in &tops {
            remove_cgroup_tree(top);
        }
        let left: Vec<&PathBuf> = tops.iter().filter(|t| t.exists()).collect();
        if left.is_empty() {
            return;
        }
        if Instant::now() > deadline {
            say(format!("could not remove the cgroups {left:?}"));
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The processes of the Pod whose UID is `uid` (the kubelet's cgroupfs driver names a Pod's
/// cgroup `pod<uid>`), its sandbox's first.
pub fn pod_pids(uid: &str) -> Vec<i32> {
    fn find(dir: &Path, name: &str) -> Option<PathBuf> {
        for e in std::fs::read_dir(dir).ok()?.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if e.file_name().to_str() == Some(name) {
                return Some(e.path());
            }
            if let Some(found) = find(&e.path(), name) {
                return Some(found);
            }
        }
        None
    }
    let name = format!("pod{uid}");
    let mut pids = Vec::new();
    for hierarchy in cgroup_hierarchies() {
        if let Some(dir) = find(&hierarchy.join("strait-testbed"), &name) {
            collect_pids(&dir, &mut pids);
            if !pids.is_empty() {
                break;
            }
        }
    }
    pids
}

fn collect_pids(dir: &Path, pids: &mut Vec<i32>) {
    if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        pids.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                collect_pids(&e.path(), pids);
            }
        }
    }
}

fn remove_cgroup_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup_tree(&e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

fn containerd_config(node: &TestNode) -> anyhow::Result<String> {
    let mut bin_dirs = vec![CNI_BIN_DIR.to_owned()];
    if node.cluster.network == PodNetwork::Flannel {
        bin_dirs.push(flannel_bin_dir()?.display().to_string());
    }
    Ok(format!(
        r#"# Written by `cargo xtask testbed up` for {cluster}/{name}.
version = 3
root = "/var/lib/containerd"
state = "/run/containerd"
# Nothing here uses them, and the NRI socket would be shared by every Node of the machine.
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{CRI_SOCKET}"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{sandbox}"

[plugins.'io.containerd.cri.v1.runtime']
  # The testbed lacks CAP_SYS_RESOURCE: no score below containerd's own.
  restrict_oom_score_adj = true
  tolerate_missing_hugetlb_controller = true
  # Pod network namespaces under the Node's own /run/containerd, not the host's /run/netns.
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "{RUNC}"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = {bin_dirs:?}
    conf_dir = "/etc/cni/net.d"
"#,
        cluster = node.cluster.name,
        name = node.name,
        sandbox = sandbox_image().unwrap_or_default(),
    ))
}

fn sandbox_image() -> anyhow::Result<String> {
    image::reference("test-pause")
}

/// The Pods' network. `ptp`: a veth per Pod with an address of the Node's Pod CIDR, routes to
/// the testbed's ranges only (never a default route), the MTU lowered by the tunnel's overhead.
/// Flannel: its CNI plugin, which delegates to `bridge` (`cni0`, the Pods' gateway) and
/// `host-local` with the subnet and MTU flanneld leased (`/run/flannel/subnet.env`), and the
/// same routes to the testbed's ranges (no default route).
fn cni_config(node: &TestNode, mtu: u32) -> String {
    if node.cluster.network == PodNetwork::Flannel {
        return serde_json::json!({
            "cniVersion": "0.3.1",
            "name": CNI_NETWORK,
            "plugins": [{
                "type": "flannel",
                "ipam": {"routes": [{"dst": "10.0.0.0/8"}, {"dst": "198.18.0.0/15"}]},
                "delegate": {"hairpinMode": true, "isDefaultGateway": false},
            }],
        })
        .to_string();
    }
    serde_json::json!({
        "cniVersion": "1.0.0",
        "name": CNI_NETWORK,
        "plugins": [{
            "type": "ptp",
            "ipMasq": false,
            "mtu": mtu,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": node.pod_cidr()}]],
                "routes": [{"dst": "10.0.0.0/8"}, {"dst": "198.18.0.0/15"}],
            },
        }],
    })
    .to_string()
}

fn kubelet_config(node: &TestNode) -> String {
    let pki = cluster_dir(&node.cluster).join("pki");
    format!(
        r#"# Written by `cargo xtask testbed up` for {cluster}/{name}.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine's cgroups are a hybrid v1 layout.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: {cgroup_root}
containerRuntimeEndpoint: unix://{CRI_SOCKET}
address: {ip}
readOnlyPort: 0
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: true}}
  x509: {{clientCAFile: {ca}}}
authorization: {{mode: Webhook}}
clusterDomain: cluster.local
clusterDNS: [{dns}]
# No host resolver: Pods resolve through the cluster DNS only.
resolvConf: ""
failSwapOn: false
# The testbed shares one disk with the machine: evict only when it is really full, and never
# collect the images it imported (nothing can pull them again).
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  imagefs.available: 1%
  nodefs.inodesFree: 1%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# The testbed lacks CAP_SYS_RESOURCE: the kubelet keeps the score it starts with.
oomScoreAdj: 0
protectKernelDefaults: false
# A stopped kubelet shows as NotReady within seconds (the lease is renewed every 2 s).
nodeLeaseDurationSeconds: 8
nodeStatusUpdateFrequency: 4s
serializeImagePulls: false
maxPods: 60
# A crashed container is restarted within a second (the default back-off grows to 5 min): the
# agent fault test kills the gateway's agent 20 times in a row (KubeletCrashLoopBackOffMax, beta
# and on by default since 1.35).
crashLoopBackOff:
  maxContainerRestartPeriod: 1s
"#,
        cluster = node.cluster.name,
        name = node.name,
        cgroup_root = cgroup_root(node),
        ip = node.ip(),
        ca = pki.join("ca.crt").display(),
        dns = node.cluster.dns_service_ip(),
    )
}

/// Starts containerd and the kubelet of `node` (unless they run) and loads the images into
/// containerd. `mount_ns` is the Node's mount namespace.
pub fn up(procs: &Procs, node: &TestNode, mount_ns: &Path, mtu: u32) -> anyhow::Result<()> {
    let dir = node_dir(node);
    std::fs::create_dir_all(&dir)?;
    let netns = node.netns();
    let node_bin = node_bin_dir()?;
    let label = format!("{}/{}", node.cluster.name, node.name);

    let config = dir.join("containerd.toml");
    std::fs::write(&config, containerd_config(node)?)?;
    std::fs::write(
        backing(node, "/etc/cni/net.d").join("10-strait-testbed.conflist"),
        cni_config(node, mtu),
    )?;
    let name = format!("{}-{}-containerd", node.cluster.name, node.name);
    if procs.running(&name).is_none() {
        // A socket left by a containerd that died would look ready.
        let _ = std::fs::remove_file(backing(node, "/run/containerd").join("containerd.sock"));
    }
    // containerd finds its shim on PATH.
    let path = format!(
        "PATH={}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        node_bin.display()
    );
    if procs.ensure_in(
        &name,
        &netns,
        Some(mount_ns),
        Path::new("/usr/bin/env"),
        &[
            path,
            node_bin.join("containerd").display().to_string(),
            format!("--config={}", config.display()),
        ],
    )? {
        say(format!("started containerd on {label}"));
    }
    wait_for_socket(node, procs, &name)?;
    load_images(node, mount_ns)?;

    let kubeconfig = cluster_dir(&node.cluster).join(format!("kubelet-{}.kubeconfig", node.name));
    let kconf = dir.join("kubelet.yaml");
    std::fs::write(&kconf, kubelet_config(node))?;
    let name = format!("{}-{}-kubelet", node.cluster.name, node.name);
    if procs.ensure_in(
        &name,
        &netns,
        Some(mount_ns),
        &kube_bin_dir()?.join("kubelet"),
        &[
            format!("--config={}", kconf.display()),
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--hostname-override={}", node.name),
            format!("--node-ip={}", node.ip()),
            "--node-labels=strait.io/testbed=true".into(),
            "--v=1".into(),
        ],
    )? {
        say(format!("started kubelet on {label}"));
    }
    Ok(())
}

fn wait_for_socket(node: &TestNode, procs: &Procs, name: &str) -> anyhow::Result<()> {
    let socket = backing(node, "/run/containerd").join("containerd.sock");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !socket.exists() {
        if procs.running(name).is_none() {
            bail!(
                "containerd of {}/{} exited; see {}",
                node.cluster.name,
                node.name,
                procs.log_path(name).display()
            );
        }
        if Instant::now() > deadline {
            bail!(
                "containerd of {}/{} did not open {} in 30 s",
                node.cluster.name,
                node.name,
                socket.display()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// Imports every built image archive into the Node's containerd (the Kubernetes namespace of it,
/// where the kubelet finds them); skips those already there.
/// `ctr` on the Node's containerd, in the namespace of the kubelet's images.
fn ctr(mount_ns: &Path) -> anyhow::Result<Cmd> {
    let mut c = Cmd::new("nsenter");
    c.arg(format!("--mount={}", mount_ns.display()))
        .arg("--")
        .arg(node_bin_dir()?.join("ctr"))
        .args(["--address", CRI_SOCKET, "--namespace", "k8s.io"]);
    Ok(c)
}

/// Imports an OCI archive into the Node's containerd (`testbed load`: a build the testbed does not
/// make itself, such as an upgrade to try).
pub fn import(node: &TestNode, mount_ns: &Path, archive: &Path) -> anyhow::Result<()> {
    exec(ctr(mount_ns)?.args(["images", "import"]).arg(archive)).with_context(|| {
        format!(
            "importing {} into {}/{}",
            archive.display(),
            node.cluster.name,
            node.name
        )
    })?;
    Ok(())
}

fn load_images(node: &TestNode, mount_ns: &Path) -> anyhow::Result<()> {
    let ctr_cmd = || ctr(mount_ns);
    let present = exec(ctr_cmd()?.args(["images", "list", "--quiet"]))?;
    for img in image::images()? {
        let archive = image::archive(img.name);
        if !archive.exists() {
            bail!(
                "{} is not built: run `cargo xtask image build` first",
                archive.display()
            );
        }
        // Re-imported when the archive is newer than the last import (a rebuilt image).
        let stamp = node_dir(node).join(format!("imported-{}", img.name));
        let fresh = std::fs::metadata(&stamp)
            .and_then(|s| s.modified())
            .ok()
            .zip(std::fs::metadata(&archive).and_then(|a| a.modified()).ok())
            .is_some_and(|(s, a)| s >= a);
        if fresh && present.lines().any(|l| l.trim() == img.reference) {
            continue;
        }
        import(node, mount_ns, &archive)?;
        std::fs::write(&stamp, b"")?;
    }
    Ok(())
}

/// flanneld on a Node of a Flannel cluster (unless it runs), in the Node's network and mount
/// namespaces, as a DaemonSet's Pod would run it: the Kubernetes subnet manager (the Node's
/// `podCIDR` is its lease), the VXLAN backend on the uplink and its masquerade on. Waits until
/// it has written its lease (`/run/flannel/subnet.env`), which the CNI plugin needs for every Pod.
pub fn flannel_up(
    procs: &Procs,
    node: &TestNode,
    mount_ns: &Path,
    kubeconfig: &Path,
) -> anyhow::Result<()> {
    let dir = node_dir(node);
    std::fs::create_dir_all(&dir)?;
    let net_conf = dir.join("flannel-net-conf.json");
    std::fs::write(
        &net_conf,
        serde_json::json!({
            "Network": node.cluster.pod_cidr(),
            "Backend": {"Type": "vxlan"},
        })
        .to_string(),
    )?;
    let name = format!("{}-{}-flanneld", node.cluster.name, node.name);
    if procs.ensure_in(
        &name,
        &node.netns(),
        Some(mount_ns),
        Path::new("/usr/bin/env"),
        &[
            format!("NODE_NAME={}", node.name),
            flannel_bin_dir()?.join("flanneld").display().to_string(),
            "--kube-subnet-mgr".into(),
            format!("--kubeconfig-file={}", kubeconfig.display()),
            "--iface=eth0".into(),
            "--ip-masq".into(),
            format!("--net-config-path={}", net_conf.display()),
        ],
    )? {
        say(format!(
            "started flanneld on {}/{}",
            node.cluster.name, node.name
        ));
    }
    let lease = backing(node, "/run/flannel").join("subnet.env");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !lease.exists() {
        if procs.running(&name).is_none() {
            bail!(
                "flanneld of {}/{} exited; see {}",
                node.cluster.name,
                node.name,
                procs.log_path(&name).display()
            );
        }
        if Instant::now() > deadline {
            bail!(
                "flanneld of {}/{} wrote no lease ({}) in 60 s; see {}",
                node.cluster.name,
                node.name,
                lease.display(),
                procs.log_path(&name).display()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}
