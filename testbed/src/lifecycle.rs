//! `cargo xtask testbed up | down | status` — real Kubernetes control planes on one machine
//! (docs/design.md §5): one etcd and, per cluster, a kube-apiserver and a kube-controller-manager,
//! all in the `strait-core` network namespace, reachable from the host over a veth on
//! 198.18.0.0/24; then the Nodes and Strait's controllers and agents (their own modules).

use std::{
    fmt::Write as _,
    path::Path,
    process::Command as Cmd,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use crate::{
    controllers, incluster, nodes,
    paths::{kube_bin_dir, repo_root, testbed_dir},
    pki,
    proc::{self, Procs, run as exec},
    runtime,
    shared::{admin_kubeconfig, cluster_dir, ip, kubectl_for, mode_file, netns_exists, say},
    topology::{self, CLUSTERS, CORE_NETNS, CORE_VETH, Cluster, ETCD_URL, HOST_VETH},
};

/// The kubelets taint their Node `disk-pressure` (and nothing gets scheduled) once the disk
/// holding the testbed has less than 1% free (`evictionHard` in the kubelet config); on a large
/// disk shared with build caches that comes quietly. Refuse to start below 2%, saying so.
fn enough_disk(dir: &std::path::Path) -> anyhow::Result<()> {
    let st = nix::sys::statvfs::statvfs(dir).context("statvfs of the testbed directory")?;
    let block = st.fragment_size() as u64;
    let (avail, total) = (
        st.blocks_available() as u64 * block,
        st.blocks() as u64 * block,
    );
    let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
    if avail * 50 < total {
        bail!(
            "only {:.1} GiB of {:.0} GiB free on the disk holding {}: the kubelets would taint every Node disk-pressure below 1% free (2% needed to start); free some space (old cargo target directories under /var/cache/strait/cargo-target, say) first",
            gib(avail),
            gib(total),
            dir.display()
        );
    }
    Ok(())
}

pub(crate) fn up(
    join: bool,
    with_nodes: bool,
    release: bool,
    kubelets: bool,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let mode = if kubelets { "kubelets" } else { "processes" };
    if let Ok(was) = std::fs::read_to_string(mode_file())
        && was.trim() != mode
    {
        bail!(
            "the testbed is up with Nodes of another kind ({}); `cargo xtask testbed down` first to bring it up with {mode}",
            was.trim()
        );
    }
    build_prerequisites(kubelets)?;
    let bin = kube_bin_dir()?;
    let dir = testbed_dir();
    std::fs::create_dir_all(&dir)?;
    if kubelets {
        enough_disk(&dir)?;
    }
    std::fs::write(mode_file(), mode)?;
    ensure_network()?;
    let procs = Procs::new(&dir)?;
    start_etcd(&procs, &bin, &dir)?;
    for cluster in &CLUSTERS {
        start_control_plane(&procs, &bin, cluster, kubelets)?;
    }

    let kubectl = bin.join("kubectl");
    for cluster in &CLUSTERS {
        wait_ready(&kubectl, cluster, &procs)?;
    }
    install_crds(&kubectl)?;
    write_env(&kubectl)?;
    start_strait(&procs, &bin, &kubectl, join, with_nodes, release, kubelets)?;
    say(format!(
        "up in {:.0?}: {} (source {} for KUBECTL and the kubeconfigs)",
        started.elapsed(),
        CLUSTERS
            .iter()
            .map(|c| format!("{} {}", c.name, c.server()))
            .collect::<Vec<_>>()
            .join(", "),
        dir.join("env").display()
    ));
    Ok(())
}

/// The Kubernetes binaries (scripts/build-kube.sh) and, for kubelet Nodes, containerd, CoreDNS,
/// pause, helm and the images never built.
fn build_prerequisites(kubelets: bool) -> anyhow::Result<()> {
    let scripts = repo_root().join("scripts");
    exec(Cmd::new("bash").arg(scripts.join("build-kube.sh")))
        .context("building the Kubernetes binaries")?;
    if kubelets {
        exec(Cmd::new("bash").arg(scripts.join("build-node.sh")))
            .context("building containerd, CoreDNS and pause")?;
        exec(Cmd::new("bash").arg(scripts.join("build-helm.sh"))).context("building helm")?;
        // The Nodes run the images; build those never built (`cargo xtask image build`
        // rebuilds them all after a change).
        for image in crate::image::images()? {
            if !crate::image::archive(image.name).exists() {
                say(format!(
                    "building the image {} (first use)",
                    image.reference
                ));
                crate::image::build(&image, crate::image::Tool::Buildah)?;
            }
        }
    }
    Ok(())
}

/// The one etcd of all three clusters, in the core namespace (data in `dir`/etcd).
fn start_etcd(procs: &Procs, bin: &Path, dir: &Path) -> anyhow::Result<()> {
    let etcd_dir = dir.join("etcd");
    if procs.ensure(
        "etcd",
        CORE_NETNS,
        &bin.join("etcd"),
        &[
            "--name=strait-testbed".into(),
            format!("--data-dir={}", etcd_dir.display()),
            format!("--listen-client-urls={ETCD_URL}"),
            format!("--advertise-client-urls={ETCD_URL}"),
            "--listen-peer-urls=http://127.0.0.1:2380".into(),
            "--initial-advertise-peer-urls=http://127.0.0.1:2380".into(),
            "--initial-cluster=strait-testbed=http://127.0.0.1:2380".into(),
            // Test data only: skipping fsync makes three API servers on two cores responsive.
            "--unsafe-no-fsync".into(),
            "--quota-backend-bytes=4294967296".into(),
        ],
    )? {
        say("started etcd");
    }
    Ok(())
}

/// A cluster's kube-apiserver, kube-controller-manager and (kubelet Nodes) kube-scheduler, with
/// their PKI and kubeconfigs.
fn start_control_plane(
    procs: &Procs,
    bin: &Path,
    cluster: &Cluster,
    kubelets: bool,
) -> anyhow::Result<()> {
    let cdir = cluster_dir(cluster);
    let pki = cdir.join("pki");
    pki::ensure(&pki, cluster)?;
    pki::ensure_kubelet_client(&pki)?;
    std::fs::write(
        admin_kubeconfig(cluster),
        pki::kubeconfig(&pki, cluster, "admin")?,
    )?;
    let kcm_kubeconfig = cdir.join("controller-manager.kubeconfig");
    std::fs::write(
        &kcm_kubeconfig,
        pki::kubeconfig(&pki, cluster, "controller-manager")?,
    )?;
    std::fs::write(
        cdir.join("kube-proxy.kubeconfig"),
        pki::kubeconfig(&pki, cluster, "kube-proxy")?,
    )?;
    start_apiserver(procs, bin, cluster, &pki)?;
    start_controller_manager(procs, bin, cluster, &pki, &kcm_kubeconfig, kubelets)?;
    if kubelets {
        start_scheduler(procs, bin, cluster, &cdir, &pki)?;
    }
    Ok(())
}

/// A cluster's kube-apiserver at its address on the management subnet.
fn start_apiserver(procs: &Procs, bin: &Path, cluster: &Cluster, pki: &Path) -> anyhow::Result<()> {
    let p = |f: &str| pki.join(f).display().to_string();
    let name = format!("{}-apiserver", cluster.name);
    if procs.ensure(
        &name,
        CORE_NETNS,
        &bin.join("kube-apiserver"),
        &[
            format!("--etcd-servers={ETCD_URL}"),
            format!("--etcd-prefix=/registry/{}", cluster.name),
            format!("--bind-address={}", cluster.api_ip),
            format!("--advertise-address={}", cluster.api_ip),
            "--secure-port=6443".into(),
            format!("--tls-cert-file={}", p("apiserver.crt")),
            format!("--tls-private-key-file={}", p("apiserver.key")),
            format!("--client-ca-file={}", p("ca.crt")),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
            format!("--service-account-key-file={}", p("sa.pub")),
            format!("--service-account-signing-key-file={}", p("sa.key")),
            format!("--service-cluster-ip-range={}", cluster.service_cidr),
            "--authorization-mode=Node,RBAC".into(),
            "--allow-privileged=true".into(),
            format!("--cert-dir={}", p("generated")),
            "--profiling=false".into(),
            // The kubelets: logs, exec and port-forward through them.
            format!(
                "--kubelet-client-certificate={}",
                p("apiserver-kubelet-client.crt")
            ),
            format!("--kubelet-client-key={}", p("apiserver-kubelet-client.key")),
            "--kubelet-preferred-address-types=InternalIP".into(),
            // Webhooks and aggregated APIs at their Pods' addresses: the control plane's
            // namespace routes to the Pod CIDRs, it runs no kube-proxy for ClusterIPs.
            "--enable-aggregator-routing=true".into(),
            "--enable-admission-plugins=NodeRestriction".into(),
        ],
    )? {
        say(format!(
            "started kube-apiserver for {} on {}",
            cluster.name,
            cluster.server()
        ));
    }
    Ok(())
}

/// A cluster's kube-controller-manager (without the node IPAM the testbed's CNI does, and without
/// Node lifecycle when the testbed plays the Nodes).
fn start_controller_manager(
    procs: &Procs,
    bin: &Path,
    cluster: &Cluster,
    pki: &Path,
    kcm_kubeconfig: &Path,
    kubelets: bool,
) -> anyhow::Result<()> {
    let p = |f: &str| pki.join(f).display().to_string();
    let name = format!("{}-controller-manager", cluster.name);
    if procs.ensure(
        &name,
        CORE_NETNS,
        &bin.join("kube-controller-manager"),
        &[
            format!("--kubeconfig={}", kcm_kubeconfig.display()),
            format!("--service-account-private-key-file={}", p("sa.key")),
            format!("--root-ca-file={}", p("ca.crt")),
            "--use-service-account-credentials=true".into(),
            // The testbed's CNI gives the Nodes their Pod CIDRs. Without kubelets the testbed
            // plays them: no lifecycle of its Nodes either.
            if kubelets {
                "--controllers=*,-node-ipam-controller".into()
            } else {
                "--controllers=*,-node-lifecycle-controller,-node-ipam-controller,-taint-eviction-controller".into()
            },
            // A Node whose kubelet stopped is NotReady within about 12 s.
            "--node-monitor-period=2s".into(),
            "--node-monitor-grace-period=12s".into(),
            "--leader-elect=false".into(),
            "--secure-port=0".into(),
            format!("--cluster-name={}", cluster.name),
            format!("--service-cluster-ip-range={}", cluster.service_cidr),
        ],
    )? {
        say(format!("started kube-controller-manager for {}", cluster.name));
    }
    Ok(())
}

/// A cluster's kube-scheduler (kubelet Nodes: Pods are scheduled).
fn start_scheduler(
    procs: &Procs,
    bin: &Path,
    cluster: &Cluster,
    cdir: &Path,
    pki: &Path,
) -> anyhow::Result<()> {
    pki::ensure_scheduler(pki)?;
    let kubeconfig = cdir.join("scheduler.kubeconfig");
    std::fs::write(&kubeconfig, pki::kubeconfig(pki, cluster, "scheduler")?)?;
    let name = format!("{}-scheduler", cluster.name);
    if procs.ensure(
        &name,
        CORE_NETNS,
        &bin.join("kube-scheduler"),
        &[
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--authentication-kubeconfig={}", kubeconfig.display()),
            format!("--authorization-kubeconfig={}", kubeconfig.display()),
            "--leader-elect=false".into(),
            "--secure-port=0".into(),
        ],
    )? {
        say(format!("started kube-scheduler for {}", cluster.name));
    }
    Ok(())
}

/// Strait on the running control planes: in Pods on kubelet Nodes, else controllers as
/// processes and (unless left out) the process Nodes with their agents; joined if asked.
fn start_strait(
    procs: &Procs,
    bin: &Path,
    kubectl: &Path,
    join: bool,
    with_nodes: bool,
    release: bool,
    kubelets: bool,
) -> anyhow::Result<()> {
    if kubelets {
        // Everything of Strait runs in Pods: Nodes first.
        nodes::up(procs, bin, release, true)?;
        incluster::install(kubectl)?;
        if join {
            controllers::join(kubectl)?;
            incluster::wait_agents(kubectl)?;
        }
    } else {
        controllers::start(procs, kubectl, release)?;
        if join {
            controllers::join(kubectl)?;
        }
        if with_nodes {
            nodes::up(procs, bin, release, false)?;
        }
    }
    Ok(())
}

/// Deletes a host interface if it is there. Deleting a namespace destroys the veth peers inside
/// it asynchronously, so the host end can vanish between a check and the delete: "not found"
/// is success here.
fn delete_host_link(name: &str) -> anyhow::Result<()> {
    if !Path::new("/sys/class/net").join(name).exists() {
        return Ok(());
    }
    let out = Cmd::new("ip")
        .args(["link", "del", name])
        .output()
        .context("running ip link del")?;
    if out.status.success() || !Path::new("/sys/class/net").join(name).exists() {
        return Ok(());
    }
    bail!(
        "ip link del {name} failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    )
}

fn ensure_network() -> anyhow::Result<()> {
    let host_link = Path::new("/sys/class/net").join(HOST_VETH).exists();
    if netns_exists(CORE_NETNS) && host_link {
        return Ok(());
    }
    // Half-made (an earlier crash): start over.
    if netns_exists(CORE_NETNS) {
        ip(&["netns", "del", CORE_NETNS])?;
    }
    delete_host_link(HOST_VETH)?;
    ip(&["netns", "add", CORE_NETNS])?;
    ip(&["-n", CORE_NETNS, "link", "set", "lo", "up"])?;
    ip(&[
        "link", "add", HOST_VETH, "type", "veth", "peer", "name", CORE_VETH, "netns", CORE_NETNS,
    ])?;
    ip(&["addr", "add", topology::HOST_MGMT_ADDR, "dev", HOST_VETH])?;
    ip(&["link", "set", HOST_VETH, "up"])?;
    ip(&[
        "-n",
        CORE_NETNS,
        "addr",
        "add",
        topology::CORE_MGMT_ADDR,
        "dev",
        CORE_VETH,
    ])?;
    for cluster in &CLUSTERS {
        ip(&[
            "-n",
            CORE_NETNS,
            "addr",
            "add",
            &format!("{}/24", cluster.api_ip),
            "dev",
            CORE_VETH,
        ])?;
    }
    ip(&["-n", CORE_NETNS, "link", "set", CORE_VETH, "up"])?;
    say(format!(
        "network namespace {CORE_NETNS} with the management subnet 198.18.0.0/24 (host side {HOST_VETH})"
    ));
    Ok(())
}

fn wait_ready(kubectl: &Path, cluster: &Cluster, procs: &Procs) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(180);
    let name = format!("{}-apiserver", cluster.name);
    loop {
        let out = kubectl_for(kubectl, cluster)
            .args(["get", "--raw", "/readyz"])
            .output()?;
        if out.status.success() {
            return Ok(());
        }
        if procs.running(&name).is_none() {
            bail!(
                "kube-apiserver for {} exited; see {}",
                cluster.name,
                procs.log_path(&name).display()
            );
        }
        if Instant::now() > deadline {
            bail!(
                "kube-apiserver for {} not ready after 180 s: {}; see {}",
                cluster.name,
                String::from_utf8_lossy(&out.stderr).trim(),
                procs.log_path(&name).display()
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn install_crds(kubectl: &Path) -> anyhow::Result<()> {
    let deploy = repo_root().join("deploy");
    for cluster in &CLUSTERS {
        exec(
            kubectl_for(kubectl, cluster)
                .args(["apply", "--server-side", "--force-conflicts", "-f"])
                .arg(deploy.join("crds"))
                .arg("-f")
                .arg(deploy.join("antrea-crds")),
        )
        .with_context(|| format!("installing the CRDs in {}", cluster.name))?;
        exec(kubectl_for(kubectl, cluster).args([
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd",
            "--all",
        ]))?;
    }
    say("CRDs installed and established in every cluster");
    Ok(())
}

fn write_env(kubectl: &Path) -> anyhow::Result<()> {
    let mut env =
        String::from("# Written by `cargo xtask testbed up`. Source it: . target/testbed/env\n");
    writeln!(env, "export KUBECTL={}", kubectl.display())?;
    for cluster in &CLUSTERS {
        writeln!(
            env,
            "export KUBECONFIG_{}={}",
            cluster.name.to_uppercase(),
            admin_kubeconfig(cluster).display()
        )?;
    }
    let leader = CLUSTERS.iter().find(|c| c.leader).expect("one leader");
    writeln!(env, "export LEADER_SERVER={}", leader.server())?;
    std::fs::write(testbed_dir().join("env"), env)?;
    Ok(())
}

pub(crate) fn down() -> anyhow::Result<()> {
    nodes::down()?;
    let dir = testbed_dir();
    let mut pids = proc::pids_in_netns(CORE_NETNS);
    if let Ok(entries) = std::fs::read_dir(dir.join("pids")) {
        for entry in entries.flatten() {
            if let Some(pid) = std::fs::read_to_string(entry.path())
                .ok()
                .and_then(|s| s.trim().parse().ok())
                && proc::alive(pid)
                && !pids.contains(&pid)
            {
                pids.push(pid);
            }
        }
    }
    if !pids.is_empty() {
        say(format!("stopping {} processes", pids.len()));
        proc::terminate(&pids, Duration::from_secs(10));
    }
    if netns_exists(CORE_NETNS) {
        ip(&["netns", "del", CORE_NETNS])?;
    }
    delete_host_link(HOST_VETH)?;
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    say("down: processes stopped, namespaces and state removed");
    Ok(())
}

pub(crate) fn status() -> anyhow::Result<()> {
    let dir = testbed_dir();
    if !netns_exists(CORE_NETNS) {
        say("down (no network namespace)");
        return Ok(());
    }
    let procs = Procs::new(&dir)?;
    let kubectl = kube_bin_dir()?.join("kubectl");
    // Everything the testbed started (a PID file each).
    let mut names: Vec<String> = std::fs::read_dir(dir.join("pids"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| {
                    e.file_name()
                        .to_str()?
                        .strip_suffix(".pid")
                        .map(str::to_owned)
                })
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    println!(
        "{:<28} {:>8} {:>10} {:>10}",
        "COMPONENT", "PID", "RSS(MiB)", "PEAK(MiB)"
    );
    for name in &names {
        match procs.running(name) {
            Some(pid) => {
                let (now, peak) = proc::rss_kib(pid);
                println!("{name:<28} {pid:>8} {:>10} {:>10}", now / 1024, peak / 1024);
            }
            None => println!("{name:<28} {:>8} {:>10}", "-", "stopped"),
        }
    }
    // Every process of the testbed: the control plane's namespace, the Nodes' (kube-proxy,
    // containerd, its shims, kubelets, host-network Pods) and the containers in the Nodes' cgroups.
    let mut pids = proc::pids_in_netns(CORE_NETNS);
    for ns in nodes::namespaces() {
        pids.extend(proc::pids_in_netns(&ns));
    }
    pids.extend(runtime::cgroup_pids());
    pids.sort_unstable();
    pids.dedup();
    let (now, peak) = pids
        .iter()
        .map(|&p| proc::rss_kib(p))
        .fold((0, 0), |(n, p), (n1, p1)| (n + n1, p + p1));
    println!(
        "testbed processes ({}): {} MiB resident now, {} MiB at most (sum of each process's peak)",
        pids.len(),
        now / 1024,
        peak / 1024
    );
    for cluster in &CLUSTERS {
        let ready = kubectl_for(&kubectl, cluster)
            .args(["get", "--raw", "/readyz"])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        println!(
            "{:<6} {} {}",
            cluster.name,
            cluster.server(),
            if ready { "ready" } else { "NOT READY" }
        );
    }
    Ok(())
}
