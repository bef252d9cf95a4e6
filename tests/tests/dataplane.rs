//! Cross-cluster traffic on the testbed with everything real: the controllers elect the
//! gateways and exchange ClusterInfo, kube-proxy on every Node does the Service DNAT, mc-agent on
//! every Node programs the eBPF dataplane from the API. Pods on east's regular Node and on
//! east's gateway Node reach a Service exported from west through its `antrea-mc-<name>`
//! ClusterIP (TCP and UDP), and the other way round; Pods ping Pods across clusters; a capture on
//! the router shows only Geneve between the two gateways, and the agents' counters account for
//! the traffic without drops.
//!
//! Needs the testbed's Nodes (`cargo xtask testbed up` brings them up unless `--no-nodes`).

use std::{
    collections::BTreeMap,
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpStream, UdpSocket},
    process::{Command, Stdio},
    time::Duration,
};

use mc_integration::{
    Testbed,
    agent::{agent_bin, build_agent, counters, packets, xtask},
    bpf::{BPF_F_BEFORE, foreign_tcx},
    condition, join, kubelet_nodes,
    net::{RouterCapture, UnderlayCut, http_get, in_netns},
    procs, repo_root,
    services::{cluster_ip, endpoint_ips},
    wait_for,
};
use serde_json::Value;

const T: Duration = Duration::from_secs(60);

/// Runs `f` on a thread inside the Pod's network namespace (`testbed pod add` names it
/// `strait-<cluster>-pod-<pod>`, on kubelet Nodes as on process Nodes).
fn in_pod<T: Send + 'static>(
    cluster: &str,
    pod: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    in_netns(&format!("strait-{cluster}-pod-{pod}"), f)
}

/// `GET /` to a Pod's web server (3 s to connect): the line it answers with.
fn http_body(addr: SocketAddr) -> Result<String, String> {
    http_get(addr, "/", Duration::from_secs(3)).map(|(_, body)| body.trim().to_owned())
}

fn udp_echo(addr: SocketAddr, payload: &str) -> Result<String, String> {
    let sock = UdpSocket::bind("0.0.0.0:0").map_err(|e| e.to_string())?;
    sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    sock.send_to(payload.as_bytes(), addr)
        .map_err(|e| e.to_string())?;
    let mut buf = [0u8; 2048];
    let (n, _) = sock
        .recv_from(&mut buf)
        .map_err(|e| format!("no UDP answer from {addr}: {e}"))?;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// Sends a datagram from a connected UDP socket to a port nobody listens on: `Ok` when the ICMP
/// port-unreachable comes back to the socket as "connection refused".
fn udp_refused(addr: SocketAddr) -> Result<(), String> {
    let sock = UdpSocket::bind("0.0.0.0:0").map_err(|e| e.to_string())?;
    sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    sock.connect(addr).map_err(|e| e.to_string())?;
    sock.send(b"anyone?").map_err(|e| e.to_string())?;
    let mut buf = [0u8; 64];
    match sock.recv(&mut buf) {
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => Ok(()),
        Err(e) => Err(format!("{addr}: {e}, not refused")),
        Ok(n) => Err(format!("{addr}: an answer of {n} bytes")),
    }
}

fn ping(cluster: &str, pod: &str, ip: &str) -> Result<(), String> {
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &format!("strait-{cluster}-pod-{pod}"),
            "ping",
            "-c",
            "2",
            "-i",
            "0.2",
            "-W",
            "2",
            ip,
        ])
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// A web Pod `pod` labelled `app=<service>` and the exported Service `service` (TCP and UDP on
/// port 80) in `cluster`.
fn export_web(tb: &Testbed, cluster: &str, node: &str, pod: &str, service: &str) {
    xtask(&[
        "testbed",
        "pod",
        "add",
        cluster,
        node,
        pod,
        "--label",
        &format!("app={service}"),
        "--serve-http",
        "8080",
    ]);
    tb.apply(
        cluster,
        "default",
        &format!(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: {service}\nspec:\n  selector:\n    app: {service}\n  ports:\n    - {{name: http, port: 80, targetPort: 8080, protocol: TCP}}\n    - {{name: echo, port: 80, targetPort: 8080, protocol: UDP}}\n---\napiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceExport\nmetadata:\n  name: {service}\n"
        ),
    );
}

/// The ClusterIP of `antrea-mc-<name>` in `cluster`, once imported.
fn imported_ip(tb: &Testbed, cluster: &str, name: &str) -> String {
    wait_for(&format!("antrea-mc-{name} in {cluster}"), T, || {
        let si = tb
            .try_json(cluster, &["get", "serviceimport", "-n", "default", name])
            .ok_or("no ServiceImport")?;
        let ip = si["spec"]["ips"][0].as_str().ok_or("no IP yet")?.to_owned();
        let ep = tb
            .try_json(
                cluster,
                &[
                    "get",
                    "endpoints",
                    "-n",
                    "default",
                    &format!("antrea-mc-{name}"),
                ],
            )
            .ok_or("no Endpoints")?;
        if ep["subsets"][0]["addresses"]
            .as_array()
            .is_none_or(|a| a.is_empty())
        {
            return Err("no endpoint yet".into());
        }
        Ok(ip)
    })
}

fn pod_ip(tb: &Testbed, cluster: &str, pod: &str) -> String {
    tb.get_json(cluster, &["get", "pod", "-n", "default", pod])["status"]["podIP"]
        .as_str()
        .expect("podIP")
        .to_owned()
}

/// The four testbed Nodes of the dataplane tests, by name.
const ALL_NODES: [(&str, (&str, &str)); 4] = [
    ("east/node-a", ("east", "node-a")),
    ("east/node-b", ("east", "node-b")),
    ("west/node-a", ("west", "node-a")),
    ("west/node-b", ("west", "node-b")),
];

fn drops(counters: &Value) -> Vec<String> {
    counters
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["drop"] == true && c["packets"].as_u64() != Some(0))
        .map(|c| format!("{}={}", c["name"], c["packets"]))
        .collect()
}

/// A child process, stopped when the test ends (also when it fails).
struct Spawned(std::process::Child);

impl Spawned {
    fn stop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The testbed, joined, with east's and west's Gateways elected.
fn joined_with_gateways() -> Testbed {
    let tb = Testbed::from_env();
    join::ensure_joined_with_gateways(&tb);
    tb
}

#[test]
fn pods_reach_services_and_pods_of_the_other_cluster_through_the_gateways() {
    let tb = joined_with_gateways();
    // The drops counted before (an earlier test's flood at east's gateway): none may be added.
    let drops_before: BTreeMap<&str, Vec<String>> = ALL_NODES
        .iter()
        .map(|(node, (c, n))| (*node, drops(&counters(c, n))))
        .collect();

    // A capture on the router, on west's underlay, for the whole test.
    let mut capture = RouterCapture::start("br-west", "ip and not net 198.18.0.0/24");

    export_web(&tb, "west", "node-b", "web-w", "web-w");
    export_web(&tb, "east", "node-b", "web-e", "web-e");
    xtask(&["testbed", "pod", "add", "east", "node-b", "client-eb"]);
    xtask(&["testbed", "pod", "add", "east", "node-a", "client-ea"]);
    xtask(&["testbed", "pod", "add", "west", "node-b", "client-wb"]);
    xtask(&["testbed", "pod", "add", "west", "node-a", "client-wa"]);
    let west_svc = imported_ip(&tb, "east", "web-w");
    let east_svc = imported_ip(&tb, "west", "web-e");

    // east -> west, from the regular Node and from the gateway Node.
    for client in ["client-eb", "client-ea"] {
        let addr: SocketAddr = format!("{west_svc}:80").parse().unwrap();
        let body = wait_for(
            &format!("HTTP from east/{client} to antrea-mc-web-w"),
            T,
            || in_pod("east", client, move || http_body(addr)),
        );
        assert_eq!(body, "hello from west/web-w", "answered by the Pod in west");
        let echo = in_pod("east", client, move || udp_echo(addr, "ping over udp")).expect("UDP");
        assert_eq!(echo, "hello from west/web-w: ping over udp");
    }
    // west -> east (Flannel, its masquerade on, and kube-proxy in iptables mode, to `ptp` and
    // nftables), from the regular Node and from the gateway Node.
    let addr: SocketAddr = format!("{east_svc}:80").parse().unwrap();
    for client in ["client-wb", "client-wa"] {
        let body = wait_for(
            &format!("HTTP from west/{client} to antrea-mc-web-e"),
            T,
            || in_pod("west", client, move || http_body(addr)),
        );
        assert_eq!(body, "hello from east/web-e");
        assert_eq!(
            in_pod("west", client, move || udp_echo(addr, "x")).expect("UDP"),
            "hello from east/web-e: x"
        );
    }
    // Pod to Pod (enablePodToPodConnectivity in the testbed's agent config).
    let web_w = pod_ip(&tb, "west", "web-w");
    let web_e = pod_ip(&tb, "east", "web-e");
    for client in ["client-eb", "client-ea"] {
        wait_for(
            &format!("ping east/{client} -> west/web-w {web_w}"),
            T,
            || ping("east", client, &web_w),
        );
    }
    for client in ["client-wb", "client-wa"] {
        wait_for(
            &format!("ping west/{client} -> east/web-e {web_e}"),
            T,
            || ping("west", client, &web_e),
        );
    }
    // An ICMP error about a translated flow is translated back with it: a closed UDP port in
    // west answers east's Pods (through the hairpin, and on the gateway Node) with port
    // unreachable, and the sockets see "connection refused".
    let closed: SocketAddr = format!("{web_w}:9").parse().unwrap();
    for client in ["client-eb", "client-ea"] {
        in_pod("east", client, move || udp_refused(closed))
            .unwrap_or_else(|e| panic!("east/{client}: {e}"));
    }

    std::thread::sleep(Duration::from_millis(500));
    capture.stop();

    // The counters: every path of the walk was taken, nothing dropped.
    let east_b = counters("east", "node-b");
    let east_a = counters("east", "node-a");
    let west_a = counters("west", "node-a");
    let west_b = counters("west", "node-b");
    assert!(packets(&east_b, "tx_to_gateway") > 0 && packets(&east_b, "rx_from_gateway") > 0);
    assert!(
        packets(&east_a, "hairpin_snat") > 0,
        "east's gateway hairpins node-b's requests"
    );
    assert!(packets(&east_a, "hairpin_unsnat") > 0);
    // The testbed's uplinks are veths into the router's namespace: the agent sees it and its
    // hairpin hands packets to the other end, so they do not meet the uplink's egress hook again
    // (without that, every hairpinned packet would be counted there too).
    let hairpinned = packets(&east_a, "hairpin_snat") + packets(&east_a, "hairpin_unsnat");
    let transmitted = packets(&east_a, "pass_own_tunnel");
    assert!(
        2 * transmitted < hairpinned,
        "{transmitted} of {hairpinned} hairpinned packets went out through east's uplink egress"
    );
    // What went to west went through WireGuard: the device's datagrams left by the uplink, and
    // what it decrypted came back through its program.
    for (node, c) in [("east", &east_a), ("west", &west_a)] {
        assert!(
            packets(c, "pass_own_wireguard") > 0 && packets(c, "rx_wireguard") > 0,
            "{node}'s gateway: {c}"
        );
    }
    assert!(
        packets(&east_a, "tx_snat_to_remote") > 0,
        "the gateway Node's own Pod"
    );
    assert!(packets(&east_a, "rx_unsnat_local") > 0);
    assert!(
        packets(&east_a, "icmp_error_translated") >= 2,
        "west's port unreachable to both east Pods"
    );
    assert!(
        packets(&east_a, "rx_from_remote") > 0,
        "west's requests to web-e"
    );
    assert!(packets(&west_a, "rx_from_remote") > 0 && packets(&west_a, "tx_reply_to_remote") > 0);
    assert!(
        packets(&west_b, "tx_to_gateway") > 0,
        "west/client-wb's requests"
    );
    for (node, c) in [
        ("east/node-a", &east_a),
        ("east/node-b", &east_b),
        ("west/node-a", &west_a),
        ("west/node-b", &west_b),
    ] {
        assert_eq!(
            drops(c),
            drops_before[node],
            "drops on {node} during the test (before it: {:?})",
            drops_before[node]
        );
    }

    // Between the clusters there is nothing but WireGuard between the two gateways (the
    // testbed's agents run with `trafficEncryptionMode: wireGuard`): no Geneve, and none of
    // what the Pods said in the clear.
    let lines = capture.lines();
    assert!(
        lines.len() >= 20,
        "too few packets captured: {}",
        lines.len()
    );
    for line in &lines {
        let outer = line.split(" IP ").nth(1).unwrap_or("");
        let ok = outer.starts_with("198.18.11.1.51821 > 198.18.12.1.51821: UDP")
            || outer.starts_with("198.18.12.1.51821 > 198.18.11.1.51821: UDP");
        assert!(
            ok,
            "a packet between the clusters that is not WireGuard between the gateways:\n{line}"
        );
    }
    let raw = capture.bytes();
    for marker in [
        "hello from west/web-w",
        "hello from east/web-e",
        "ping over udp",
    ] {
        assert!(
            !raw.windows(marker.len()).any(|w| w == marker.as_bytes()),
            "{marker:?} crossed between the clusters in the clear"
        );
    }
    println!(
        "{} packets between the clusters, all WireGuard between the gateways",
        lines.len()
    );
}

/// `mc-agent maps` on a testbed Node.
fn maps(cluster: &str, node: &str) -> String {
    xtask(&[
        "testbed",
        "exec",
        &format!("{cluster}/{node}"),
        "--",
        agent_bin().to_str().unwrap(),
        "maps",
    ])
}

#[test]
fn when_the_gateway_moves_new_connections_work_again_and_every_nodes_maps_follow() {
    let tb = Testbed::from_env();
    join::ensure_joined(&tb);
    let gw = "multicluster.antrea.io/gateway";
    export_web(&tb, "west", "node-b", "web-move", "web-move");
    xtask(&["testbed", "pod", "add", "east", "node-b", "client-move"]);
    let addr: SocketAddr = format!("{}:80", imported_ip(&tb, "east", "web-move"))
        .parse()
        .unwrap();
    let body = wait_for("HTTP before the move", T, || {
        in_pod("east", "client-move", move || http_body(addr))
    });
    assert_eq!(body, "hello from west/web-move");
    assert!(maps("east", "node-a").starts_with("ROLE gateway"));

    // node-b becomes a candidate too; node-a (the active gateway) turns NotReady. node-a's
    // dataplane keeps working meanwhile (only its Node object changed), so what is measured is
    // the time until every Node's maps have moved to the new gateway.
    tb.ok(
        "east",
        &[
            "annotate",
            "node",
            "node-b",
            &format!("{gw}=true"),
            "--overwrite",
        ],
    );
    let snat_before = packets(&counters("east", "node-b"), "tx_snat_to_remote");
    // As it was however the test ends: node-a Ready (its kubelet running), node-b no candidate.
    struct Restore<'a>(&'a Testbed);
    impl Drop for Restore<'_> {
        fn drop(&mut self) {
            if std::thread::panicking() {
                let _ = Command::new(env!("CARGO"))
                    .args([
                        "xtask", "testbed", "node", "ready", "east", "node-a", "true",
                    ])
                    .current_dir(repo_root())
                    .output();
                let _ = self
                    .0
                    .kubectl("east")
                    .args([
                        "annotate",
                        "node",
                        "node-b",
                        "multicluster.antrea.io/gateway-",
                    ])
                    .output();
            }
        }
    }
    let _restore = Restore(&tb);
    let flipped = std::time::Instant::now();
    xtask(&["testbed", "node", "ready", "east", "node-a", "false"]);
    wait_for("every Node's maps to follow the new gateway", T, || {
        let b = maps("east", "node-b");
        let a = maps("east", "node-a");
        let w: Vec<String> = ["node-a", "node-b"]
            .iter()
            .map(|n| maps("west", n))
            .collect();
        let moved = b.starts_with("ROLE gateway")
            && a.starts_with("ROLE node")
            && a.contains("GATEWAY internal 198.18.11.2")
            && w.iter().all(|m| {
                m.contains("198.18.11.2      remote-gateway")
                    && !m.contains("198.18.11.1      remote-gateway")
            });
        if moved {
            Ok(())
        } else {
            Err(format!(
                "east/node-a:\n{a}\neast/node-b:\n{b}\nwest:\n{}",
                w.join("\n")
            ))
        }
    });
    let maps_moved = flipped.elapsed();
    let g = tb.get_json("east", &["get", "gateway", "-n", join::MEMBER_NS, "node-b"]);
    assert_eq!(g["gatewayIP"], "198.18.11.2");
    let body = wait_for("HTTP after the gateway moved", T, || {
        in_pod("east", "client-move", move || http_body(addr))
    });
    let recovered = flipped.elapsed();
    assert_eq!(body, "hello from west/web-move");
    assert!(
        packets(&counters("east", "node-b"), "tx_snat_to_remote") > snat_before,
        "the new connection must leave through node-b, now the gateway"
    );
    println!(
        "gateway moved from east/node-a to east/node-b: every Node's maps followed within {maps_moved:?}; \
         a new connection through the new gateway answered {recovered:?} after the flip \
         (polled through `testbed exec`, so both are upper bounds)"
    );

    // Back as it was: node-a Ready, node-b no longer a candidate, so node-a is elected again.
    xtask(&["testbed", "node", "ready", "east", "node-a", "true"]);
    tb.ok("east", &["annotate", "node", "node-b", &format!("{gw}-")]);
    wait_for("east's gateway back on node-a", T, || {
        tb.try_json("east", &["get", "gateway", "-n", join::MEMBER_NS, "node-a"])
            .ok_or_else(|| "not yet".to_owned())
    });
    let body = wait_for("HTTP after moving back", T, || {
        in_pod("east", "client-move", move || http_body(addr))
    });
    assert_eq!(body, "hello from west/web-move");
}

/// The agent container of `cluster`'s DaemonSet, as the API server has it.
fn agent_container(tb: &Testbed, cluster: &str) -> serde_json::Value {
    tb.get_json(
        cluster,
        &["get", "daemonset", "-n", join::MEMBER_NS, "strait-agent"],
    )["spec"]["template"]["spec"]["containers"][0]
        .clone()
}

/// A second agent on east/node-b started with a bad setting (its health port `port`): on
/// kubelet Nodes a Pod of the agent's image as an operator's misconfigured DaemonSet would run
/// it (host network, the DaemonSet's capabilities, the Node's bpffs and /proc/sys/net, the
/// agent's ServiceAccount), with process
/// Nodes a process in the Node's namespaces. Stopped when dropped.
enum BadAgent {
    Pod(String),
    Process(Spawned),
}

impl BadAgent {
    fn start(tb: &Testbed, config: &str, port: u16) -> Self {
        let name = format!("strait-bad-agent-{port}");
        if kubelet_nodes() {
            let agent = agent_container(tb, "east");
            let objects = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
                {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": name, "namespace": join::MEMBER_NS},
                 "data": {"strait-agent.conf": config}},
                {"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": name, "namespace": join::MEMBER_NS},
                 "spec": {
                    "nodeName": "node-b", "hostNetwork": true, "restartPolicy": "Never",
                    "serviceAccountName": "strait-agent", "terminationGracePeriodSeconds": 1,
                    "containers": [{
                        "name": "agent", "image": agent["image"], "imagePullPolicy": "Never",
                        "args": ["run", "--config=/etc/strait/strait-agent.conf",
                                 format!("--health-addr=198.18.11.2:{port}")],
                        "env": [{"name": "NODE_NAME", "value": "node-b"},
                                {"name": "MC_SYSCTL_ROOT", "value": "/host/proc/sys"}],
                        "securityContext": agent["securityContext"],
                        "volumeMounts": [{"name": "bpffs", "mountPath": "/sys/fs/bpf"},
                                         {"name": "proc-sys-net", "mountPath": "/host/proc/sys/net"},
                                         {"name": "config", "mountPath": "/etc/strait"}]}],
                    "volumes": [{"name": "bpffs", "hostPath": {"path": "/sys/fs/bpf"}},
                                {"name": "proc-sys-net", "hostPath": {"path": "/proc/sys/net"}},
                                {"name": "config", "configMap": {"name": name}}]}},
            ]});
            tb.apply("east", join::MEMBER_NS, &objects.to_string());
            return Self::Pod(name);
        }
        let cfg = std::env::temp_dir().join(format!("{name}.conf"));
        std::fs::write(&cfg, config).unwrap();
        let kubeconfig = repo_root().join("target/testbed/east/admin.kubeconfig");
        Self::Process(Spawned(
            // The Node's own network and mount namespaces (its bpffs), as the testbed runs agents.
            Command::new("nsenter")
                .args([
                    "--net=/run/netns/strait-east-node-b",
                    "--mount=/run/strait-testbed/mnt/east-node-b",
                    "--",
                ])
                .arg(agent_bin())
                .arg("run")
                .arg(format!("--config={}", cfg.display()))
                .args([
                    "--node-name=node-b",
                    &format!("--health-addr=198.18.11.2:{port}"),
                ])
                .arg(format!("--kubeconfig={}", kubeconfig.display()))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("mc-agent"),
        ))
    }

    /// Whether it still runs (never restarted).
    fn running(&mut self, tb: &Testbed) -> bool {
        match self {
            Self::Process(child) => child.0.try_wait().unwrap().is_none(),
            Self::Pod(name) => {
                let pod = tb.get_json("east", &["get", "pod", "-n", join::MEMBER_NS, name]);
                pod["status"]["phase"] == "Running"
                    && pod["status"]["containerStatuses"][0]["restartCount"] == 0
            }
        }
    }
}

impl Drop for BadAgent {
    fn drop(&mut self) {
        match self {
            Self::Process(child) => child.stop(),
            Self::Pod(name) => {
                let tb = Testbed::from_env();
                tb.delete("east", &["-n", join::MEMBER_NS, &format!("pod/{name}")]);
                tb.delete(
                    "east",
                    &["-n", join::MEMBER_NS, &format!("configmap/{name}")],
                );
            }
        }
    }
}

/// An agent started with a bad setting keeps running and says why on /readyz.
fn agent_readiness(tb: &Testbed, uplink: &str, pin_path: &str, port: u16) -> String {
    let config = format!(
        "multicluster:\n  enableGateway: true\n  namespace: kube-system\n  uplink: \"{uplink}\"\n  pinPath: {pin_path}\n"
    );
    let mut agent = BadAgent::start(tb, &config, port);
    let reason = wait_for(
        &format!(
            "the agent with uplink {uplink:?} and pinPath {pin_path} to say why it is not ready"
        ),
        T,
        || {
            let out = Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    "strait-east-node-b",
                    "curl",
                    "-s",
                    "-w",
                    " %{http_code}",
                ])
                .arg(format!("http://198.18.11.2:{port}/readyz"))
                .output()
                .map_err(|e| e.to_string())?;
            let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            let settled =
                !text.starts_with("starting") && !text.contains("waiting for the first list");
            if text.ends_with(" 503") && settled {
                Ok(text)
            } else {
                Err(text)
            }
        },
    );
    assert!(agent.running(tb), "the agent must keep running");
    reason
}

#[test]
fn an_agent_with_a_bad_uplink_or_no_bpffs_is_not_ready_and_says_why() {
    let tb = Testbed::from_env();
    join::ensure_joined(&tb);
    let why = agent_readiness(&tb, "nosuch0", "/sys/fs/bpf/strait-test-bad/v1", 9191);
    assert!(
        why.contains("\"nosuch0\" does not exist") && why.contains("uplink"),
        "{why}"
    );
    // The operator sees it on the Node too: `kubectl describe node` / `kubectl get events`.
    wait_for(
        "a StraitDataplaneNotReady Event on east's node-b",
        T,
        || {
            let events = tb
                .try_json(
                    "east",
                    &[
                        "get",
                        "events",
                        "-n",
                        "default",
                        "--field-selector",
                        "reason=StraitDataplaneNotReady,involvedObject.name=node-b",
                        "-o",
                        "json",
                    ],
                )
                .ok_or("no events")?;
            events["items"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|e| {
                    e["type"] == "Warning"
                        && e["message"]
                            .as_str()
                            .is_some_and(|m| m.contains("\"nosuch0\" does not exist"))
                })
                .cloned()
                .ok_or_else(|| format!("{events}"))
        },
    );
    let why = agent_readiness(&tb, "eth0", "/tmp/strait-not-bpffs/v1", 9192);
    assert!(why.contains("not on a BPF filesystem"), "{why}");
}

/// What east says of its gateway's dataplane.
#[derive(Debug)]
struct EastDataplane {
    /// The elected Gateway (its Node's name).
    gateway: String,
    /// The Gateway's `DataplaneReady`: status and message.
    dataplane: (String, String),
    /// East's ClusterSet `Ready`: status and reason.
    ready: (String, String),
}

impl EastDataplane {
    fn read(tb: &Testbed) -> Result<Self, String> {
        let gateways = tb.get_json("east", &["get", "gateways", "-n", join::MEMBER_NS]);
        let gw = &gateways["items"][0];
        let name = gw["metadata"]["name"].as_str().ok_or("no Gateway")?;
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        let dp = condition(gw, "DataplaneReady").ok_or(format!("{gw}"))?;
        let set = tb.get_json(
            "east",
            &["get", "clusterset", "-n", join::MEMBER_NS, join::CLUSTERSET],
        );
        let ready = condition(&set, "Ready").ok_or(format!("{set}"))?;
        Ok(Self {
            gateway: name.to_owned(),
            dataplane: (text(&dp["status"]), text(&dp["message"])),
            ready: (text(&ready["status"]), text(&ready["reason"])),
        })
    }

    /// Waits until the Gateway's `DataplaneReady` and the ClusterSet's `Ready` are both `want`.
    fn wait(tb: &Testbed, what: &str, want: &str) -> Self {
        wait_for(what, Duration::from_secs(120), || {
            let s = Self::read(tb)?;
            if s.dataplane.0 == want && s.ready.0 == want {
                Ok(s)
            } else {
                Err(format!("{s:?}"))
            }
        })
    }
}

/// A program attached ahead of Strait's on east's gateway uplink (another CNI's, say) ends the
/// chain before Strait's programs see a packet. The operator finds why where they look: the
/// Gateway's `DataplaneReady` (written by the gateway Node's agent), east's ClusterSet not
/// `Ready` and `mcctl get clusterset` in east. Detached, everything is Ready again.
#[test]
fn a_gateway_whose_programs_cannot_run_makes_its_member_not_ready_and_says_why() {
    let tb = Testbed::from_env();
    join::ensure_joined(&tb);
    let gw =
        EastDataplane::wait(&tb, "east's gateway dataplane and ClusterSet Ready", "True").gateway;
    let links = in_netns(&format!("strait-east-{gw}"), || foreign_tcx(BPF_F_BEFORE));
    // The agent reads its uplink's chains every pass (at least every 30 s).
    let down = EastDataplane::wait(
        &tb,
        "the Gateway and the ClusterSet to say the gateway's programs do not run",
        "False",
    );
    // By its ID: the agent is not given the CAP_SYS_ADMIN that reading another's program name
    // takes.
    let named = format!(
        "programs run before Strait's on the uplink eth0 (ingress: program id {} ",
        mc_integration::bpf::link_program_id(&links[0])
    );
    assert!(down.dataplane.1.contains(&named), "{named}: {down:?}");
    assert_eq!(down.ready.1, "DataplaneNotReady");
    let table = mc_integration::ok(
        "mcctl get clusterset in east",
        tb.mcctl("east", &["get", "clusterset"]),
    );
    let rows: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let own = join::id("east");
    for row in [
        [
            own.as_str(),
            join::MEMBER_NS,
            join::CLUSTERSET,
            "Ready",
            "False",
            "DataplaneNotReady",
        ],
        [
            own.as_str(),
            join::MEMBER_NS,
            join::CLUSTERSET,
            "DataplaneReady",
            "False",
            "NotReady",
        ],
    ] {
        assert!(
            rows.iter().any(|r| r[..] == row[..]),
            "no row {row:?}:\n{table}"
        );
    }
    drop(links);
    EastDataplane::wait(&tb, "east Ready again once the program is gone", "True");
}

/// The tag of the second build the upgrade test runs.
const UPGRADE_BUILD: &str = "0.1.0+upgrade-test";

fn version(bin: &std::path::Path) -> String {
    let out = Command::new(bin)
        .arg("--version")
        .output()
        .expect("--version");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Replaces a Node's running agent by `bin` (same arguments, same namespaces); returns the new
/// process's log from its start.
fn replace_agent(cluster: &str, node: &str, bin: &std::path::Path) -> String {
    let name = format!("{cluster}-{node}-mc-agent");
    let log = repo_root().join(format!("target/testbed/logs/{name}.log"));
    let mut args = mc_integration::procs::kill(&name);
    let from = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0) as usize;
    args[0] = bin.to_string_lossy().into_owned();
    mc_integration::procs::start_in(
        &name,
        &format!("/run/netns/strait-{cluster}-{node}"),
        Some(&format!("/run/strait-testbed/mnt/{cluster}-{node}")),
        &args,
    );
    wait_for(&format!("{name} attached again"), T, || {
        let text = std::fs::read(&log).map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&text[from.min(text.len())..]).into_owned();
        if text.contains("reused=") {
            Ok(text)
        } else {
            Err(text)
        }
    })
}

/// The agents on the path of a stream, east's client to west's server.
const STREAM_PATH: [(&str, &str); 4] = [
    ("east", "node-b"),
    ("east", "node-a"),
    ("west", "node-a"),
    ("west", "node-b"),
];

/// An upgrade of the agents to another build and back: on kubelet Nodes, the DaemonSet's image
/// changed to another image build (`cargo xtask image build mc-agent --build-id`, imported into
/// every Node as a pull would), rolled out in east and west; with process agents, each
/// process replaced by the other binary.
enum Upgrade {
    Image {
        to: String,
        from: Vec<(String, String)>,
    },
    Binary {
        to: std::path::PathBuf,
        from: std::path::PathBuf,
    },
}

impl Upgrade {
    fn prepare(tb: &Testbed) -> Self {
        if !kubelet_nodes() {
            let from = agent_bin();
            // Built again as a different build, the way an operator's upgrade brings a new binary.
            let to = build_agent(Some(UPGRADE_BUILD));
            assert_eq!(version(&to), format!("mc-agent {UPGRADE_BUILD}"));
            assert_ne!(version(&to), version(&from), "two different builds");
            return Self::Binary { to, from };
        }
        xtask(&["image", "build", "mc-agent", "--build-id", UPGRADE_BUILD]);
        let tag = format!("v{}", UPGRADE_BUILD.replace('+', "-"));
        let archive = repo_root().join(format!("target/images/mc-agent-{tag}.oci.tar"));
        xtask(&["testbed", "load", archive.to_str().unwrap()]);
        let from = ["east", "west"]
            .iter()
            .map(|c| {
                (
                    (*c).to_owned(),
                    agent_container(tb, c)["image"].as_str().unwrap().to_owned(),
                )
            })
            .collect::<Vec<_>>();
        let to = format!("ghcr.io/strait-net/mc-agent:{tag}");
        assert!(from.iter().all(|(_, i)| *i != to), "two different images");
        Self::Image { to, from }
    }

    /// Upgrades every agent on the path; returns each new agent's log.
    fn apply(&self, tb: &Testbed) -> Vec<((&'static str, &'static str), String)> {
        match self {
            Self::Binary { to, .. } => STREAM_PATH
                .iter()
                .map(|&(c, n)| ((c, n), replace_agent(c, n, to)))
                .collect(),
            Self::Image { to, .. } => {
                let images: Vec<(&str, &str)> = ["east", "west"].map(|c| (c, to.as_str())).into();
                rollout_agents(tb, &images);
                STREAM_PATH
                    .iter()
                    .map(|&(c, n)| ((c, n), agent_log(tb, c, n)))
                    .collect()
            }
        }
    }

    fn revert(&self, tb: &Testbed) {
        if std::thread::panicking() {
            eprintln!("the upgrade test failed: putting the agents back");
        }
        match self {
            Self::Binary { from, .. } => {
                for (c, n) in STREAM_PATH {
                    replace_agent(c, n, from);
                }
            }
            Self::Image { from, .. } => {
                let images: Vec<(&str, &str)> =
                    from.iter().map(|(c, i)| (c.as_str(), i.as_str())).collect();
                rollout_agents(tb, &images);
            }
        }
    }

    /// How long the stream must last to outlive the upgrade (a rollout of two DaemonSets,
    /// one Node at a time, takes far longer than four process restarts).
    fn stream_bytes(&self) -> usize {
        match self {
            Self::Binary { .. } => 12_000_000,
            Self::Image { .. } => 160_000_000,
        }
    }
}

/// `kubectl set image` of the agents' DaemonSet in each cluster, then waits for the rollouts.
fn rollout_agents(tb: &Testbed, images: &[(&str, &str)]) {
    for (cluster, image) in images {
        tb.ok(
            cluster,
            &[
                "set",
                "image",
                "-n",
                join::MEMBER_NS,
                "daemonset/strait-agent",
                &format!("strait-agent={image}"),
            ],
        );
    }
    for (cluster, _) in images {
        tb.ok(
            cluster,
            &[
                "rollout",
                "status",
                "-n",
                join::MEMBER_NS,
                "daemonset/strait-agent",
                "--timeout=180s",
            ],
        );
    }
}

/// `kubectl logs` of the agent Pod on a Node.
fn agent_log(tb: &Testbed, cluster: &str, node: &str) -> String {
    let pods = tb.get_json(
        cluster,
        &[
            "get",
            "pods",
            "-n",
            join::MEMBER_NS,
            "-l",
            "app=strait-agent",
            "--field-selector",
            &format!("spec.nodeName={node}"),
        ],
    );
    let name = pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["metadata"]["deletionTimestamp"].is_null())
        .and_then(|p| p["metadata"]["name"].as_str())
        .unwrap_or_else(|| panic!("no agent Pod on {cluster}/{node}"))
        .to_owned();
    tb.ok(cluster, &["logs", "-n", join::MEMBER_NS, &name])
}

#[test]
fn an_agent_upgrade_to_another_build_keeps_established_streams() {
    let tb = Testbed::from_env();
    join::ensure_joined(&tb);
    let upgrade = Upgrade::prepare(&tb);
    // Back to this checkout's build however the test ends: the next tests need working agents.
    struct Revert<'a>(&'a Upgrade, &'a Testbed);
    impl Drop for Revert<'_> {
        fn drop(&mut self) {
            self.0.revert(self.1);
        }
    }
    let revert = Revert(&upgrade, &tb);

    export_web(&tb, "west", "node-b", "web-up", "web-up");
    xtask(&["testbed", "pod", "add", "east", "node-b", "up-client"]);
    let ip = imported_ip(&tb, "east", "web-up");
    let addr: SocketAddr = format!("{ip}:80").parse().unwrap();
    wait_for("web-up answers from east", T, || {
        in_pod("east", "up-client", move || http_body(addr))
    });

    // A stream paced at about 2 MB/s while the agents of every Node on its path are replaced.
    // With `trafficEncryptionMode: wireGuard` (the testbed's) each gateway's WireGuard device
    // goes with its old agent: a pause of some seconds per gateway, which TCP's backed-off
    // retransmissions can stretch past 10 s when the two gateways' pauses follow each other.
    let size = upgrade.stream_bytes();
    let stream = slow_stream("up-client", addr, size, Duration::from_secs(30), None);
    std::thread::sleep(Duration::from_millis(500));
    for ((cluster, node), log) in upgrade.apply(&tb) {
        assert!(
            log.contains(UPGRADE_BUILD) && log.contains("reused=true"),
            "{cluster}/{node}: the new build must reuse the pinned links:\n{log}"
        );
    }
    assert!(
        !stream.is_finished(),
        "the stream ended before the upgrade was done: make it longer"
    );
    let all = stream
        .join()
        .unwrap()
        .expect("the stream across the upgrade");
    assert_slow_body(&all, size);
    // New connections work on the new build; then back to this checkout's build.
    in_pod("east", "up-client", move || http_body(addr)).expect("after the upgrade");
    drop(revert);
    wait_for("web-up answers after going back", T, || {
        in_pod("east", "up-client", move || http_body(addr))
    });
    xtask(&["testbed", "pod", "del", "east", "up-client"]);
    xtask(&["testbed", "pod", "del", "west", "web-up"]);
    tb.delete(
        "west",
        &["-n", "default", "service,serviceexport", "web-up"],
    );
}

/// `GET /slow/<size>` (about 2 MB/s) from east's Pod `pod` to `addr`, on a thread: the whole
/// answer, or where it broke off. `progress`, if given, follows the bytes received.
fn slow_stream(
    pod: &'static str,
    addr: SocketAddr,
    size: usize,
    read_timeout: Duration,
    progress: Option<std::sync::Arc<std::sync::atomic::AtomicUsize>>,
) -> std::thread::JoinHandle<Result<Vec<u8>, String>> {
    std::thread::spawn(move || {
        in_pod("east", pod, move || -> Result<Vec<u8>, String> {
            let mut conn = TcpStream::connect_timeout(&addr, Duration::from_secs(3))
                .map_err(|e| format!("connect: {e}"))?;
            conn.set_read_timeout(Some(read_timeout)).unwrap();
            conn.write_all(format!("GET /slow/{size} HTTP/1.0\r\n\r\n").as_bytes())
                .map_err(|e| e.to_string())?;
            let mut all = Vec::new();
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match conn.read(&mut buf) {
                    Ok(0) => return Ok(all),
                    Ok(n) => {
                        all.extend_from_slice(&buf[..n]);
                        if let Some(p) = &progress {
                            p.store(all.len(), std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                    Err(e) => return Err(format!("after {} bytes: {e}", all.len())),
                }
            }
        })
    })
}

/// The answer of [`slow_stream`] holds all `size` bytes of the test server's pattern.
fn assert_slow_body(all: &[u8], size: usize) {
    let body = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| &all[i + 4..])
        .expect("an HTTP answer");
    assert_eq!(body.len(), size, "no byte lost");
    assert!(
        body.iter().enumerate().all(|(i, b)| *b == (i % 251) as u8),
        "no byte corrupted"
    );
}

/// West's Pod `web` behind an exported Service of the same name and east's Pod `client` (both on
/// node-b): the address of the imported Service in east. `drop_web_across` removes them.
fn web_across(tb: &Testbed, web: &str, client: &str) -> SocketAddr {
    export_web(tb, "west", "node-b", web, web);
    xtask(&["testbed", "pod", "add", "east", "node-b", client]);
    let ip = imported_ip(tb, "east", web);
    format!("{ip}:80").parse().unwrap()
}

fn drop_web_across(tb: &Testbed, web: &str, client: &str) {
    xtask(&["testbed", "pod", "del", "east", client]);
    xtask(&["testbed", "pod", "del", "west", web]);
    tb.delete("west", &["-n", "default", "service,serviceexport", web]);
}

/// The PID of the agent in `cluster`/`node`'s network namespace (a kubelet's container or a
/// testbed process), if one runs.
fn agent_pid(cluster: &str, node: &str) -> Option<i32> {
    use std::os::unix::fs::MetadataExt as _;
    let netns = std::fs::metadata(format!("/run/netns/strait-{cluster}-{node}"))
        .ok()?
        .ino();
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let mut args = cmdline.split(|b| *b == 0);
        let agent = args.next()?.ends_with(b"mc-agent") && args.next()? == b"run";
        let here = std::fs::metadata(format!("/proc/{pid}/ns/net")).ok()?.ino() == netns;
        (agent && here).then_some(pid)
    })
}

/// Issue 24 (faults): the agent on east's gateway killed with SIGKILL 20 times in a row under an
/// established cross-cluster stream (east's Pod reading from west's through both gateways); on
/// kubelet Nodes the kubelet restarts it, with process agents the test does. Each kill comes a
/// little later in the new agent's start (0 to 1.4 s after it appeared), so kills land in every
/// phase of it. The programs and their pinned maps (the SNAT entry of the flow among them) carry
/// the stream meanwhile: every byte arrives intact. Prints how long the kills took and the longest
/// pause of the stream.
#[test]
fn an_established_stream_survives_the_gateways_agent_killed_20_times() {
    use std::sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    };
    const KILLS: u64 = 20;
    let tb = joined_with_gateways();
    let addr = web_across(&tb, "web-kill", "kill-client");
    wait_for("web-kill answers from east", T, || {
        in_pod("east", "kill-client", move || http_body(addr))
    });
    // With `trafficEncryptionMode: wireGuard` (the testbed's), the WireGuard device is the
    // agent process's own: each kill pauses the stream until the new agent's device is up (a
    // few seconds), and kills that keep coming before it is would stall the stream for longer
    // than TCP's patience. So each kill waits for the stream to move again after the last one
    // (the pause each costs is what the longest pause below measures), and the stream is
    // longer.
    let encrypted = tb
        .try_json("east", &["get", "gateway", "-n", join::MEMBER_NS, "node-a"])
        .is_some_and(|g| g["wireGuard"]["publicKey"].is_string());
    // About 2 MB/s for 80 s: the kills took 45 s on the testbed's kubelet Nodes (without
    // encryption).
    let size = if encrypted { 320_000_000 } else { 160_000_000 };
    let received = Arc::new(AtomicUsize::new(0));
    let stream_done = Arc::new(AtomicBool::new(false));
    let stream = slow_stream(
        "kill-client",
        addr,
        size,
        Duration::from_secs(30),
        Some(received.clone()),
    );
    wait_for("the stream under way", T, || {
        match received.load(Ordering::Relaxed) {
            0 => Err("no byte yet".to_owned()),
            n => Ok(n),
        }
    });
    let name = "east-node-a-mc-agent";
    let (netns, mnt) = (
        "/run/netns/strait-east-node-a",
        "/run/strait-testbed/mnt/east-node-a",
    );
    // The longest time without a byte, sampled every 20 ms until the stream ends.
    let sampler = {
        let received = received.clone();
        let stream_done = stream_done.clone();
        std::thread::spawn(move || {
            let (mut last, mut since, mut longest) = (0, std::time::Instant::now(), Duration::ZERO);
            while !stream_done.load(Ordering::Relaxed) {
                let now = received.load(Ordering::Relaxed);
                if now != last {
                    (last, since) = (now, std::time::Instant::now());
                }
                longest = longest.max(since.elapsed());
                std::thread::sleep(Duration::from_millis(20));
            }
            longest
        })
    };
    let started = std::time::Instant::now();
    for kill in 0..KILLS {
        if encrypted && kill > 0 {
            let at = received.load(Ordering::Relaxed);
            wait_for("the stream moving again", Duration::from_secs(60), || {
                (received.load(Ordering::Relaxed) > at)
                    .then_some(())
                    .ok_or_else(|| format!("{at} bytes"))
            });
        }
        let pid = wait_for(
            "east/node-a's agent running",
            Duration::from_secs(60),
            || agent_pid("east", "node-a").ok_or_else(|| "none".to_owned()),
        );
        std::thread::sleep(Duration::from_millis(200 * (kill % 8)));
        if kubelet_nodes() {
            // SAFETY: kill(2) on a PID this test just read.
            let rc = unsafe { libc::kill(pid, libc::SIGKILL) };
            assert_eq!(rc, 0, "kill -KILL {pid}");
        } else {
            let args = procs::kill(name);
            procs::start_in(name, netns, Some(mnt), &args);
        }
        wait_for(
            "the killed agent gone",
            Duration::from_secs(10),
            || match agent_pid("east", "node-a") {
                Some(p) if p == pid => Err("still there".to_owned()),
                _ => Ok(()),
            },
        );
        assert!(
            !stream.is_finished(),
            "the stream ended at kill {}",
            kill + 1
        );
    }
    let kills = started.elapsed();
    wait_for("east/node-a's agent back", Duration::from_secs(60), || {
        agent_pid("east", "node-a").ok_or_else(|| "none".to_owned())
    });
    while !stream.is_finished() {
        std::thread::sleep(Duration::from_millis(100));
    }
    stream_done.store(true, Ordering::Relaxed);
    let longest = sampler.join().unwrap();
    let all = stream.join().unwrap().expect("the stream across the kills");
    assert_slow_body(&all, size);
    eprintln!(
        "gateway agent killed {KILLS} times in {:.1} s under a stream: all {size} bytes intact, \
         the longest pause of the stream {} ms",
        kills.as_secs_f64(),
        longest.as_millis()
    );
    drop_web_across(&tb, "web-kill", "kill-client");
}

/// The `gatewayIP` of `cluster`'s Gateway (node-a).
fn gateway_ip(tb: &Testbed, cluster: &str) -> String {
    tb.get_json(
        cluster,
        &["get", "gateway", "-n", join::MEMBER_NS, "node-a"],
    )["gatewayIP"]
        .as_str()
        .expect("gatewayIP")
        .to_owned()
}

/// Strait-shaped Geneve (version 0, IPv4 inside, a well-formed inner UDP packet) sent to UDP
/// 6081 of `to` from the testbed's router (`strait-core`, an address that is no tunnel peer) at
/// `pps` packets a second while `on` is set, on a thread; counts what the socket sent.
struct Flood {
    on: std::sync::Arc<std::sync::atomic::AtomicBool>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    sent: std::sync::Arc<std::sync::atomic::AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Flood {
    fn start(to: &str, pps: u64) -> Self {
        use std::sync::{
            Arc,
            atomic::{AtomicBool, AtomicU64, Ordering},
        };
        let target: SocketAddr = format!("{to}:6081").parse().expect("gateway address");
        let (on, stop, sent) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
        );
        let (on2, stop2, sent2) = (on.clone(), stop.clone(), sent.clone());
        let thread = std::thread::spawn(move || {
            in_netns("strait-core", move || {
                let sock = UdpSocket::bind("0.0.0.0:0").expect("a UDP socket in strait-core");
                // Inner IPv4/UDP: 10.244.99.9 -> 10.244.1.9, 32 bytes of payload.
                let mut inner = vec![
                    0x45, 0, 0, 60, 0, 1, 0x40, 0, 64, 17, 0, 0, 10, 244, 99, 9, 10, 244, 1, 9,
                ];
                let mut sum: u32 = inner
                    .chunks(2)
                    .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
                    .sum();
                while sum > 0xffff {
                    sum = (sum & 0xffff) + (sum >> 16);
                }
                inner[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
                inner.extend_from_slice(&[0x9c, 0x40, 0x00, 0x35, 0, 40, 0, 0]);
                inner.extend_from_slice(&[0x5a; 32]);
                // Geneve: version 0, no options, protocol IPv4, VNI 0xffffff.
                let mut frame = vec![0, 0, 0x08, 0x00, 0xff, 0xff, 0xff, 0];
                frame.extend_from_slice(&inner);
                let tick = Duration::from_millis(10);
                let per_tick = (pps / 100).max(1);
                let mut next = std::time::Instant::now();
                while !stop2.load(Ordering::Relaxed) {
                    if on2.load(Ordering::Relaxed) {
                        for _ in 0..per_tick {
                            if sock.send_to(&frame, target).is_ok() {
                                sent2.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    next += tick;
                    std::thread::sleep(next.saturating_duration_since(std::time::Instant::now()));
                }
            })
        });
        Flood {
            on,
            stop,
            sent,
            thread: Some(thread),
        }
    }

    fn set(&self, on: bool) {
        self.on.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Stops the flood; returns how many packets it sent.
    fn stop(mut self) -> u64 {
        self.end();
        self.sent.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn end(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.end();
    }
}

/// Issue 24 (faults): a flood of Strait-shaped Geneve at east's gateway from an address that is
/// not one of its peers (the testbed's router), while a Pod in east exchanges UDP round trips with
/// a Pod of west behind an imported Service, through both gateways. The gateway drops the flood at
/// TC and counts every packet of it (`drop_unknown_peer`), and the round trips keep at least 90% of
/// the rate they have without it: 31 pairs of 500 ms windows, one with the flood and one without,
/// which comes first alternating, so that both see the same machine (the flood's sender and the
/// router share its two cores); the median of the pairs' ratios and the ratio of their sums must
/// both reach 90%. Prints every pair and the flood's rate.
#[test]
fn a_geneve_flood_from_a_stranger_is_dropped_and_counted_and_real_traffic_keeps_its_rate() {
    /// The flood: about twice the packets the round trips take through east's gateway.
    const PPS: u64 = 50_000;
    const WINDOW: Duration = Duration::from_millis(500);
    const ROUNDS: usize = 31;
    let tb = joined_with_gateways();
    let addr = web_across(&tb, "web-flood", "flood-client");
    wait_for("web-flood echoes from east", T, || {
        in_pod("east", "flood-client", move || udp_echo(addr, "hello"))
    });
    // Round trips answered by west's Pod in one window, one after the other on one UDP flow
    // (netperf's UDP_RR): each crosses both gateways twice.
    let calls = move || -> u64 {
        in_pod("east", "flood-client", move || {
            let sock = UdpSocket::bind("0.0.0.0:0").expect("a UDP socket");
            sock.connect(addr).expect("connect");
            sock.set_read_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            let start = std::time::Instant::now();
            let (mut n, mut buf) = (0u64, [0u8; 256]);
            while start.elapsed() < WINDOW {
                let ping = format!("ping {n}");
                if sock.send(ping.as_bytes()).is_err() {
                    continue;
                }
                if let Ok(len) = sock.recv(&mut buf)
                    && buf[..len].ends_with(ping.as_bytes())
                {
                    n += 1;
                }
            }
            n
        })
    };
    let dropped = || packets(&counters("east", "node-a"), "drop_unknown_peer");
    let flood = Flood::start(&gateway_ip(&tb, "east"), PPS);
    let before = dropped();
    // Short paired windows, which one comes first alternating: the round trips' own rate ranged
    // from 17 000 to 31 000 per 2 s window in one run, flood or not, on a 2-core machine shared
    // with three control planes, and windows half a second apart share most of that movement.
    const _: () = assert!(ROUNDS % 2 == 1, "an odd count has one median");
    // The sender works in 10 ms ticks: let it start (or its last burst clear the gateway)
    // before a window opens.
    const SETTLE: Duration = Duration::from_millis(20);
    let mut rounds = Vec::with_capacity(ROUNDS);
    let mut flood_on = Duration::ZERO;
    for round in 0..ROUNDS {
        let flooded_first = round % 2 == 1;
        let (mut quiet, mut flooded) = (0, 0);
        for flooding in [flooded_first, !flooded_first] {
            let on = std::time::Instant::now();
            flood.set(flooding);
            std::thread::sleep(SETTLE);
            let n = calls();
            flood.set(false);
            if flooding {
                flood_on += on.elapsed();
                flooded = n;
            } else {
                quiet = n;
            }
            std::thread::sleep(SETTLE);
        }
        rounds.push((quiet, flooded));
    }
    let sent = flood.stop();
    // The counters are per-CPU sums read through the agent: let the last packets land.
    std::thread::sleep(Duration::from_millis(500));
    let counted = dropped() - before;
    let mut ratios: Vec<f64> = rounds
        .iter()
        .map(|&(quiet, flooded)| flooded as f64 / quiet.max(1) as f64)
        .collect();
    ratios.sort_by(f64::total_cmp);
    let median = ratios[ratios.len() / 2];
    let (quiet_sum, flooded_sum) = rounds
        .iter()
        .fold((0, 0), |(q, f), &(quiet, flooded)| (q + quiet, f + flooded));
    let whole = flooded_sum as f64 / quiet_sum.max(1) as f64;
    let per_round: Vec<String> = rounds
        .iter()
        .map(|(quiet, flooded)| format!("{flooded}/{quiet}"))
        .collect();
    let secs = flood_on.as_secs_f64();
    eprintln!(
        "Geneve flood: {sent} packets from a stranger while it was on ({secs:.1} s, {:.0}/s in \
         10 ms bursts), {counted} dropped and counted at the gateway; round trips through the \
         gateways per {} ms window with/without it: {}; median ratio {:.0}%, ratio of the sums \
         {:.0}%",
        sent as f64 / secs,
        WINDOW.as_millis(),
        per_round.join(" "),
        100.0 * median,
        100.0 * whole
    );
    assert!(sent > 0, "the flood did not run");
    assert!(
        quiet_sum > 0,
        "no round trip through the gateways without the flood"
    );
    assert_eq!(
        counted, sent,
        "every packet of the flood dropped and counted"
    );
    assert!(
        median >= 0.9 && whole >= 0.9,
        "the round trips kept a median {:.0}% (sums {:.0}%) of their quiet rate under the flood \
         (with/without per window: {per_round:?})",
        100.0 * median,
        100.0 * whole
    );
    drop_web_across(&tb, "web-flood", "flood-client");
}

/// Issue 24 (faults): the underlay between east's and west's gateways cut for 30 s under an
/// established cross-cluster stream, then restored. The connection resumes on its own (TCP
/// retransmits through the same tunnel; no state in Strait's path expires): no byte lost or
/// corrupted, and new connections work at once. Prints how long the stream stalled.
#[test]
fn an_established_stream_survives_a_30_s_underlay_cut_between_the_gateways() {
    use std::sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    };
    let tb = joined_with_gateways();
    let addr = web_across(&tb, "web-cut", "cut-client");
    wait_for("web-cut answers from east", T, || {
        in_pod("east", "cut-client", move || http_body(addr))
    });
    let (east_gw, west_gw) = (gateway_ip(&tb, "east"), gateway_ip(&tb, "west"));

    // About 2 MB/s: 30 MB outlast the first seconds and the cut.
    let size = 30_000_000;
    let received = Arc::new(AtomicUsize::new(0));
    // The read timeout is longer than the cut and TCP's retransmission back-off after it.
    let stream = slow_stream(
        "cut-client",
        addr,
        size,
        Duration::from_secs(120),
        Some(received.clone()),
    );
    std::thread::sleep(Duration::from_secs(3));
    let before = received.load(Ordering::Relaxed);
    assert!(before > 0, "the stream did not start");
    let cut = UnderlayCut::new(&east_gw, &west_gw);
    // In flight when the cut came: a few round trips' worth at most.
    std::thread::sleep(Duration::from_secs(2));
    let settled = received.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_secs(28));
    let at_restore = received.load(Ordering::Relaxed);
    assert_eq!(at_restore, settled, "bytes crossed the cut underlay");
    assert!(!stream.is_finished(), "the stream ended during the cut");
    // A new connection during the cut does not get through either.
    assert!(
        in_pod("east", "cut-client", move || http_body(addr)).is_err(),
        "a new connection crossed the cut underlay"
    );
    drop(cut);
    let restored = std::time::Instant::now();
    let resumed = wait_for("the stream to resume", Duration::from_secs(90), || {
        if received.load(Ordering::Relaxed) > at_restore {
            Ok(restored.elapsed())
        } else {
            Err("no byte yet".to_owned())
        }
    });
    let all = stream.join().unwrap().expect("the stream across the cut");
    assert_slow_body(&all, size);
    let fresh = std::time::Instant::now();
    in_pod("east", "cut-client", move || http_body(addr)).expect("a new connection after the cut");
    eprintln!(
        "underlay cut: {before} bytes before, {} more in flight, none for 28 s; resumed {:.1} s \
         after the restore; all {size} bytes intact {:.1} s after it; a new connection took {} ms",
        settled - before,
        resumed.as_secs_f64(),
        restored.elapsed().as_secs_f64(),
        fresh.elapsed().as_millis()
    );
    drop_web_across(&tb, "web-cut", "cut-client");
}

/// A gateway agent's metrics (its health port, :9090 on its Node's address), the lines of
/// `name` for `cluster`.
fn tunnel_metric(gateway: &str, name: &str, cluster: &str) -> Option<f64> {
    let addr: SocketAddr = format!("{gateway}:9090").parse().expect("address");
    let (_, body) = in_netns("strait-core", move || {
        http_get(addr, "/metrics", Duration::from_secs(2))
    })
    .ok()?;
    let needle = format!("{name}{{cluster=\"{}\"", join::id(cluster));
    body.lines()
        .find(|l| l.starts_with(&needle))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Issue 57: the gateways probe each other through the tunnel (inside WireGuard: the testbed
/// encrypts) every second. Each member's ClusterInfoImport of the other says `TunnelUp` True,
/// the gateway agent's metrics give the round trip; with the tunnel's port blocked between the
/// gateways at the router, the condition turns False within 5 s (and `mcctl get clusterset`
/// says so) and the metrics show the loss; after the restore it is True again within 5 s.
#[test]
fn the_gateways_probe_each_other_and_a_blocked_tunnel_shows_within_5_s() {
    let tb = joined_with_gateways();
    let (east_gw, west_gw) = (gateway_ip(&tb, "east"), gateway_ip(&tb, "west"));
    for (cluster, remote) in [("east", "west"), ("west", "east")] {
        wait_for(&format!("{cluster}'s TunnelUp to {remote}"), T, || match tb
            .tunnel_up(cluster, remote)
        {
            Some((status, reason)) if status == "True" && reason == "ProbesAnswered" => Ok(()),
            other => Err(format!("{other:?}")),
        });
    }
    let rtt = wait_for("east's round trip to west in its metrics", T, || {
        tunnel_metric(&east_gw, "strait_tunnel_rtt_seconds", "west")
            .ok_or_else(|| "no metric".to_owned())
    });
    assert!(rtt > 0.0 && rtt < 0.5, "round trip {rtt} s");
    assert_eq!(
        tunnel_metric(&east_gw, "strait_tunnel_up", "west"),
        Some(1.0)
    );

    // WireGuard's port between the two gateways: the tunnel's way with encryption on.
    let blocked = UnderlayCut::udp_port(&east_gw, &west_gw, 51821);
    let at = std::time::Instant::now();
    // Both sides in one poll: the time measured is the agents', not the test's.
    wait_for("TunnelUp False on both sides", T, || {
        let both = [("east", "west"), ("west", "east")].map(|(c, r)| tb.tunnel_up(c, r));
        match &both {
            [Some((a, ra)), Some((b, rb))]
                if a == "False" && b == "False" && ra == "NoAnswer" && rb == "NoAnswer" =>
            {
                Ok(())
            }
            other => Err(format!("{other:?}")),
        }
    });
    let down = at.elapsed();
    assert!(
        down <= Duration::from_secs(5),
        "both False only {down:?} after the block"
    );
    let (_, table, _) = tb.mcctl("east", &["get", "clusterset", "-A"]);
    assert!(
        table.lines().any(|l| l.starts_with(&join::id("west"))
            && l.contains("TunnelUp")
            && l.contains("NoAnswer")),
        "{table}"
    );
    assert_eq!(
        tunnel_metric(&east_gw, "strait_tunnel_up", "west"),
        Some(0.0)
    );
    let loss = tunnel_metric(&east_gw, "strait_tunnel_probe_loss_ratio", "west").unwrap_or(0.0);
    assert!(loss > 0.0, "loss {loss}");

    drop(blocked);
    let at = std::time::Instant::now();
    wait_for("TunnelUp True again on both sides", T, || {
        let both = [("east", "west"), ("west", "east")].map(|(c, r)| tb.tunnel_up(c, r));
        match &both {
            [Some((a, _)), Some((b, _))] if a == "True" && b == "True" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    let up = at.elapsed();
    assert!(
        up <= Duration::from_secs(5),
        "both True only {up:?} after the restore"
    );
    eprintln!(
        "tunnel health: round trip {:.2} ms; False on both sides {:.1} s after the block, {:.0}% of the last probes lost; True again {:.1} s after the restore",
        rtt * 1e3,
        down.as_secs_f64(),
        loss * 100.0,
        up.as_secs_f64()
    );
}

/// Waits until `cluster`'s `antrea-mc-<service>` Endpoints hold exactly `want` (in any order),
/// and returns the imported Service's ClusterIP.
fn wait_endpoints(tb: &Testbed, cluster: &str, service: &str, want: &[String]) -> String {
    let mut want = want.to_vec();
    want.sort();
    let imported = format!("antrea-mc-{service}");
    wait_for(
        &format!("{imported} in {cluster} to hold {want:?}"),
        T,
        || {
            // Sorted; empty when the Endpoints do not exist.
            let have = endpoint_ips(tb, cluster, "default", &imported).unwrap_or_default();
            if have != want {
                return Err(format!("Endpoints: {have:?}"));
            }
            // What kube-proxy reads: the EndpointSlices of the imported Service (the member's MCS
            // slices, one per source cluster).
            let label = format!("kubernetes.io/service-name={imported}");
            let slices = tb
                .try_json(
                    cluster,
                    &["get", "endpointslices", "-n", "default", "-l", &label],
                )
                .ok_or("no EndpointSlices")?;
            let mut sliced: Vec<String> = slices["items"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
                .flat_map(|e| e["addresses"].as_array().cloned().unwrap_or_default())
                .filter_map(|a| a.as_str().map(str::to_owned))
                .collect();
            sliced.sort();
            if sliced != want {
                return Err(format!("EndpointSlices: {sliced:?}"));
            }
            Ok(())
        },
    );
    // kube-proxy applies a change at most once a second (its minSyncPeriod).
    std::thread::sleep(Duration::from_secs(2));
    cluster_ip(tb, cluster, "default", &imported)
}

/// Waits until every cluster of `clusters` has a Gateway, holds the ClusterInfoImport of every
/// other, and each of its Nodes routes the others' Service CIDRs (its agent acted on them): the
/// path between the clusters exists. A cluster that just joined has it only seconds after the
/// leader counts it (and longer after its API server restarted: an agent's watch saw a new
/// Gateway 24 s late then).
fn gateways_know_each_other(tb: &Testbed, clusters: &[&str]) {
    for c in clusters {
        let cidrs = wait_for(&format!("{c}'s Gateway and ClusterInfoImports"), T, || {
            let gateways = tb.get_json(c, &["get", "gateway", "-n", join::MEMBER_NS]);
            if gateways["items"].as_array().is_none_or(Vec::is_empty) {
                return Err("no Gateway".to_owned());
            }
            let list = tb.get_json(c, &["get", "clusterinfoimport", "-n", join::MEMBER_NS]);
            let known: Vec<&str> = list["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|i| i["spec"]["gatewayInfos"][0]["gatewayIP"].is_string())
                .filter_map(|i| i["spec"]["clusterID"].as_str())
                .collect();
            let missing: Vec<&&str> = clusters
                .iter()
                .filter(|o| *o != c && !known.contains(&join::id(o).as_str()))
                .collect();
            if !missing.is_empty() {
                return Err(format!("knows {known:?}, not {missing:?}"));
            }
            let ids: Vec<String> = clusters.iter().map(|o| join::id(o)).collect();
            Ok(list["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|i| {
                    i["spec"]["clusterID"]
                        .as_str()
                        .is_some_and(|id| ids.iter().any(|x| x == id))
                })
                .filter_map(|i| i["spec"]["serviceCIDR"].as_str().map(str::to_owned))
                .collect::<Vec<_>>())
        });
        for node in ["node-a", "node-b"] {
            wait_for(&format!("{c}/{node} routing {cidrs:?}"), 2 * T, || {
                let netns = format!("strait-{c}-{node}");
                let unrouted: Vec<&String> = cidrs
                    .iter()
                    .filter(|cidr| {
                        // Strait's routes: the main table, its protocol number.
                        let out = Command::new("ip")
                            .args(["-n", &netns, "route", "show", "table", "main"])
                            .args(["proto", "167", cidr.as_str()])
                            .output()
                            .expect("ip route");
                        out.stdout.is_empty()
                    })
                    .collect();
                if unrouted.is_empty() {
                    Ok(())
                } else {
                    Err(format!("no route to {unrouted:?}"))
                }
            });
        }
    }
}

/// 24 HTTP requests from a Pod to `ip:80`, the ClusterIP of `antrea-mc-both-web`: every one must
/// be answered. Returns the clusters that answered, with how many answers each. When some fail,
/// the message says what each of the Service's endpoints answers when asked directly.
fn every_request_answered(
    tb: &Testbed,
    cluster: &str,
    client: &str,
    ip: &str,
) -> BTreeMap<String, usize> {
    let addr: SocketAddr = format!("{ip}:80").parse().unwrap();
    let answers = in_pod(cluster, client, move || {
        (0..24).map(|_| http_body(addr)).collect::<Vec<_>>()
    });
    let mut by_cluster = BTreeMap::new();
    let mut failed = Vec::new();
    for a in answers {
        match a {
            Ok(body) => {
                let from = body
                    .strip_prefix("hello from ")
                    .and_then(|b| b.split('/').next())
                    .unwrap_or(&body)
                    .to_owned();
                *by_cluster.entry(from).or_insert(0) += 1;
            }
            Err(e) => failed.push(e),
        }
    }
    assert!(
        failed.is_empty(),
        "{cluster}/{client} -> {ip}: {} of 24 requests failed ({failed:?}); answered: {by_cluster:?}; \
         each endpoint asked directly: {:?}",
        failed.len(),
        endpoints_asked_directly(tb, cluster, client)
    );
    by_cluster
}

/// Each TCP endpoint of `antrea-mc-both-web` in `cluster`, asked twice from `client`, with its
/// answers: tells a kube-proxy that lags behind its Endpoints from a path that fails.
fn endpoints_asked_directly(
    tb: &Testbed,
    cluster: &str,
    client: &str,
) -> Vec<(String, Vec<String>)> {
    let Some(e) = tb.try_json(
        cluster,
        &["get", "endpoints", "-n", "default", "antrea-mc-both-web"],
    ) else {
        return vec![("no Endpoints".into(), vec![])];
    };
    let mut addrs = Vec::new();
    for s in e["subsets"].as_array().into_iter().flatten() {
        let tcp = s["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["protocol"].as_str().unwrap_or("TCP") == "TCP")
            .and_then(|p| p["port"].as_u64());
        for a in s["addresses"].as_array().into_iter().flatten() {
            if let (Some(ip), Some(port)) = (a["ip"].as_str(), tcp)
                && let Ok(addr) = format!("{ip}:{port}").parse::<SocketAddr>()
            {
                addrs.push(addr);
            }
        }
    }
    in_pod(cluster, client, move || {
        addrs
            .into_iter()
            .map(|a| {
                let answers = (0..2).map(|_| http_body(a).unwrap_or_else(|e| e)).collect();
                (a.to_string(), answers)
            })
            .collect()
    })
}

fn answered_by(
    tb: &Testbed,
    cluster: &str,
    clients: &[&str],
    ip: &str,
    expected: &[&str],
) -> BTreeMap<String, usize> {
    let mut all = BTreeMap::new();
    for client in clients {
        let by = every_request_answered(tb, cluster, client, ip);
        let from: Vec<&str> = by.keys().map(String::as_str).collect();
        assert_eq!(
            from, expected,
            "{cluster}/{client}: answers by cluster {by:?}"
        );
        for (k, v) in by {
            *all.entry(k).or_insert(0) += v;
        }
    }
    println!("{cluster} {clients:?} -> {ip}: {all:?}");
    all
}

/// Once `cluster`'s `antrea-mc-both-web` holds exactly `endpoints`, 24 requests from each of
/// `clients` are all answered, by exactly the clusters `by`.
fn served(tb: &Testbed, cluster: &str, clients: &[&str], endpoints: &[&String], by: &[&str]) {
    let endpoints: Vec<String> = endpoints.iter().map(|e| (*e).clone()).collect();
    let ip = wait_endpoints(tb, cluster, "both-web", &endpoints);
    answered_by(tb, cluster, clients, &ip, by);
}

/// Removes the test's Pods, Services and exports from every cluster (north's member join is
/// undone by its `join::DualRole`).
struct MultiExporterCleanup<'a>(&'a Testbed);

impl Drop for MultiExporterCleanup<'_> {
    fn drop(&mut self) {
        let tb = self.0;
        for cluster in ["north", "east", "west"] {
            tb.delete(
                cluster,
                &[
                    "-n",
                    "default",
                    "serviceexport/both-web",
                    "service/both-web",
                ],
            );
        }
        for (cluster, pod) in [
            ("east", "both-e"),
            ("west", "both-w"),
            ("north", "both-n"),
            ("east", "both-client-eb"),
            ("east", "both-client-ea"),
            ("west", "both-client-wb"),
            ("west", "both-client-wa"),
            ("north", "both-client-nb"),
        ] {
            let _ = Command::new(env!("CARGO"))
                .args(["xtask", "testbed", "pod", "del", cluster, pod])
                .current_dir(repo_root())
                .output();
        }
    }
}

/// A Service exported from the caller's own cluster and from another answers every request:
/// the caller's cluster serves its share with its own ready Pods (kube-proxy reaches them in one
/// DNAT), never with its own ClusterIP, whichever `endpointIPType` the members use; scaled to
/// zero it leaves the traffic to the other cluster, and the dual-role cluster does the same.
#[test]
fn a_service_exported_from_the_callers_cluster_and_another_answers_every_request() {
    let tb = joined_with_gateways();
    let _cleanup = MultiExporterCleanup(&tb);
    export_web(&tb, "east", "node-b", "both-e", "both-web");
    export_web(&tb, "west", "node-b", "both-w", "both-web");
    let east_clients = ["both-client-eb", "both-client-ea"];
    let west_clients = ["both-client-wb", "both-client-wa"];
    for (cluster, pod, node) in [
        ("east", east_clients[0], "node-b"),
        ("east", east_clients[1], "node-a"),
        ("west", west_clients[0], "node-b"),
        ("west", west_clients[1], "node-a"),
    ] {
        xtask(&["testbed", "pod", "add", cluster, node, pod]);
    }
    let east_pod = pod_ip(&tb, "east", "both-e");
    let west_pod = pod_ip(&tb, "west", "both-w");
    let east_svc = cluster_ip(&tb, "east", "default", "both-web");
    let west_svc = cluster_ip(&tb, "west", "default", "both-web");

    // endpointIPType ClusterIP (the default): each cluster's own Pod and the other's ClusterIP.
    served(
        &tb,
        "east",
        &east_clients,
        &[&east_pod, &west_svc],
        &["east", "west"],
    );
    served(
        &tb,
        "west",
        &west_clients,
        &[&west_pod, &east_svc],
        &["east", "west"],
    );

    // East scaled to zero ready Pods: west answers everything; back to one: east again.
    xtask(&["testbed", "pod", "del", "east", "both-e"]);
    served(&tb, "east", &east_clients, &[&west_svc], &["west"]);
    xtask(&[
        "testbed",
        "pod",
        "add",
        "east",
        "node-a",
        "both-e",
        "--label",
        "app=both-web",
        "--serve-http",
        "8080",
    ]);
    let east_pod = pod_ip(&tb, "east", "both-e");
    served(
        &tb,
        "east",
        &east_clients,
        &[&east_pod, &west_svc],
        &["east", "west"],
    );

    // North as leader and member at once, importing a Service it exports too.
    let north = join::north_as_member(&tb);
    gateways_know_each_other(&tb, &["east", "north", "west"]);
    export_web(&tb, "north", "node-b", "both-n", "both-web");
    xtask(&["testbed", "pod", "add", "north", "node-b", "both-client-nb"]);
    let north_pod = pod_ip(&tb, "north", "both-n");
    served(
        &tb,
        "north",
        &["both-client-nb"],
        &[&north_pod, &east_svc, &west_svc],
        &["east", "north", "west"],
    );
    tb.delete(
        "north",
        &[
            "-n",
            "default",
            "serviceexport/both-web",
            "service/both-web",
        ],
    );
    north.leave();
    wait_endpoints(
        &tb,
        "east",
        "both-web",
        &[east_pod.clone(), west_svc.clone()],
    );

    // endpointIPType PodIP: the other cluster's Pod, reached Pod to Pod through the gateways.
    {
        let _podip = mc_integration::Reconfigured::endpoint_ip_type(&["east", "west"], "PodIP");
        served(
            &tb,
            "east",
            &east_clients,
            &[&east_pod, &west_pod],
            &["east", "west"],
        );
        served(
            &tb,
            "west",
            &west_clients,
            &[&west_pod, &east_pod],
            &["east", "west"],
        );
    }

    // West's export deleted: east answers everything.
    wait_endpoints(
        &tb,
        "east",
        "both-web",
        &[east_pod.clone(), west_svc.clone()],
    );
    tb.delete("west", &["-n", "default", "serviceexport/both-web"]);
    served(&tb, "east", &east_clients, &[&east_pod], &["east"]);
}

/// A CNI that tunnels on Strait's port between its own Nodes (Antrea's encap mode and
/// OVN-Kubernetes use Geneve on 6081) keeps working beside Strait: datagrams on UDP 6081 between
/// east's gateway Node and its regular Node, both ways, arrive while Strait's programs are attached
/// to both uplinks, and each receiving Node counts them as not Strait's (`pass_foreign_tunnel`).
#[test]
fn another_tunnel_on_the_tunnel_port_between_nodes_keeps_working() {
    let _tb = joined_with_gateways();
    let nodes = [("node-a", "198.18.11.1"), ("node-b", "198.18.11.2")];
    for (i, (to, to_ip)) in nodes.iter().enumerate() {
        let (from, _) = nodes[1 - i];
        let before = packets(&counters("east", to), "pass_foreign_tunnel");
        let server = in_netns(&format!("strait-east-{to}"), || {
            UdpSocket::bind("0.0.0.0:6081").expect("UDP 6081 is free on the Node")
        });
        server
            .set_read_timeout(Some(Duration::from_secs(3)))
            .unwrap();
        let client = in_netns(&format!("strait-east-{from}"), || {
            UdpSocket::bind("0.0.0.0:6081").expect("UDP 6081 is free on the Node")
        });
        let payload = format!("a CNI's datagram from {from} to {to}");
        let mut got = Vec::new();
        for _ in 0..5 {
            client
                .send_to(payload.as_bytes(), format!("{to_ip}:6081"))
                .expect("send");
            let mut buf = [0u8; 512];
            if let Ok((n, _)) = server.recv_from(&mut buf) {
                got = buf[..n].to_vec();
                break;
            }
        }
        assert_eq!(
            String::from_utf8_lossy(&got),
            payload,
            "east/{from} -> east/{to} on UDP 6081"
        );
        let after = packets(&counters("east", to), "pass_foreign_tunnel");
        assert!(after > before, "east/{to} counts it as not Strait's");
    }
}

/// `wireGuard.publicKey` of `cluster`'s Gateway (node-a), once its agent published it.
fn wireguard_key(tb: &Testbed, cluster: &str) -> String {
    wait_for(&format!("{cluster}'s gateway's WireGuard key"), T, || {
        let gw = tb
            .try_json(
                cluster,
                &["get", "gateway", "-n", join::MEMBER_NS, "node-a"],
            )
            .ok_or("no Gateway")?;
        gw["wireGuard"]["publicKey"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| "not published yet".to_owned())
    })
}

/// A file of a testbed Node, read in its mount namespace (`/var/lib/strait` is the Node's own).
fn node_file(cluster: &str, node: &str, path: &str, cmd: &[&str]) -> String {
    let out = Command::new("nsenter")
        .arg(format!("--mount=/run/strait-testbed/mnt/{cluster}-{node}"))
        .args(cmd)
        .arg(path)
        .output()
        .expect("nsenter");
    assert!(
        out.status.success(),
        "{cmd:?} {path} on {cluster}/{node}: {out:?}"
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Issue 56: with `trafficEncryptionMode: wireGuard` (the testbed's agents run with it), each
/// member's gateway agent publishes its WireGuard public key in its Gateway, the controllers
/// carry it in ClusterInfo to the other member, and each member's ClusterSet says its traffic
/// between gateways is encrypted (`TrafficEncrypted`, shown by `mcctl get clusterset`). The
/// private key stays on the gateway Node (mode 0600) and is in no object of any cluster.
#[test]
fn the_gateways_keys_travel_in_the_api_and_the_private_ones_never_do() {
    let tb = joined_with_gateways();
    for (cluster, other) in [("east", "west"), ("west", "east")] {
        let key = wireguard_key(&tb, cluster);
        assert_eq!(key.len(), 44, "a base64 WireGuard key: {key}");
        let import = format!("{}-clusterinfo", join::id(cluster));
        wait_for(
            &format!("{other}'s ClusterInfoImport {import} carries {cluster}'s key"),
            T,
            || {
                let ci = tb
                    .try_json(
                        other,
                        &["get", "clusterinfoimport", "-n", join::MEMBER_NS, &import],
                    )
                    .ok_or("no ClusterInfoImport")?;
                match ci["spec"]["wireGuard"]["publicKey"].as_str() {
                    Some(k) if k == key => Ok(()),
                    k => Err(format!("{k:?}")),
                }
            },
        );
        wait_for(
            &format!("{cluster}'s ClusterSet TrafficEncrypted"),
            T,
            || {
                let set = tb
                    .try_json(
                        cluster,
                        &["get", "clusterset", "-n", join::MEMBER_NS, join::CLUSTERSET],
                    )
                    .ok_or("no ClusterSet")?;
                let c = condition(&set, "TrafficEncrypted").ok_or("no condition yet")?;
                (c["status"] == "True" && c["reason"] == "WireGuard")
                    .then_some(())
                    .ok_or_else(|| c.to_string())
            },
        );
        let (_, table, _) = tb.mcctl(cluster, &["get", "clusterset", "-n", join::MEMBER_NS]);
        assert!(
            table.lines().any(|l| l.contains("TrafficEncrypted")
                && l.contains("True")
                && l.contains("WireGuard")),
            "mcctl get clusterset in {cluster}:\n{table}"
        );
    }
    for cluster in ["east", "west"] {
        let path = "/var/lib/strait/wireguard/private.key";
        let private = node_file(cluster, "node-a", path, &["cat"]);
        assert_eq!(private.len(), 44, "{cluster}'s private key file");
        assert_eq!(
            node_file(cluster, "node-a", path, &["stat", "-c", "%a"]),
            "600"
        );
        for anywhere in ["north", "east", "west"] {
            let objects = tb.ok(
                anywhere,
                &[
                    "get",
                    "gateways,clusterinfoimports,resourceexports,resourceimports,memberclusterannounces,configmaps,secrets",
                    "-A",
                    "-o",
                    "json",
                ],
            );
            assert!(
                !objects.contains(&private),
                "{cluster}'s WireGuard private key is in an object of {anywhere}"
            );
        }
    }
}

/// Issue 56: the gateway's agent killed (the kubelet restarts it) keeps its WireGuard key (the
/// Node's file): the other member's peer stays as it was, and traffic through WireGuard resumes
/// once the new agent's device is up. The device is the agent's process's (userspace
/// WireGuard), so traffic pauses meanwhile: measured here with a UDP probe every 20 ms from
/// east's regular Node to west's Service, printed.
#[test]
fn a_restarted_gateway_agent_keeps_its_wireguard_key_and_traffic_resumes() {
    use std::sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    };
    let tb = joined_with_gateways();
    let addr = web_across(&tb, "web-wgr", "wgr-client");
    wait_for("web-wgr answers from east", T, || {
        in_pod("east", "wgr-client", move || udp_echo(addr, "before"))
    });
    let key = wireguard_key(&tb, "east");
    let stop = Arc::new(AtomicBool::new(false));
    let answers = Arc::new(Mutex::new(Vec::<std::time::Instant>::new()));
    let prober = {
        let (stop, answers) = (stop.clone(), answers.clone());
        std::thread::spawn(move || {
            in_pod("east", "wgr-client", move || {
                let sock = UdpSocket::bind("0.0.0.0:0").unwrap();
                sock.set_read_timeout(Some(Duration::from_millis(20)))
                    .unwrap();
                let mut buf = [0u8; 256];
                while !stop.load(Ordering::Relaxed) {
                    let _ = sock.send_to(b"probe", addr);
                    let deadline = std::time::Instant::now() + Duration::from_millis(20);
                    while std::time::Instant::now() < deadline {
                        if let Ok((n, _)) = sock.recv_from(&mut buf)
                            && buf[..n].ends_with(b"probe")
                        {
                            answers.lock().unwrap().push(std::time::Instant::now());
                        }
                    }
                }
            })
        })
    };
    std::thread::sleep(Duration::from_secs(1));
    let pid = agent_pid("east", "node-a").expect("east/node-a's agent");
    let killed = std::time::Instant::now();
    // SAFETY: kill(2) on a PID this test just read.
    assert_eq!(
        unsafe { libc::kill(pid, libc::SIGKILL) },
        0,
        "kill -KILL {pid}"
    );
    wait_for("east/node-a's new agent", T, || {
        match agent_pid("east", "node-a") {
            Some(p) if p != pid => Ok(()),
            _ => Err("not yet".to_owned()),
        }
    });
    wait_for("probes answered again after the restart", T, || {
        let last = *answers.lock().unwrap().last().ok_or("none")?;
        (last > killed + Duration::from_millis(100))
            .then_some(())
            .ok_or_else(|| "not yet".to_owned())
    });
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    prober.join().unwrap();
    let answers = answers.lock().unwrap().clone();
    let pause = answers
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default();
    assert_eq!(
        wireguard_key(&tb, "east"),
        key,
        "the restarted agent kept its key"
    );
    eprintln!(
        "east's gateway agent killed: {} probe answers, the longest pause {} ms (from the kill to \
         the new agent's WireGuard device and handshake)",
        answers.len(),
        pause.as_millis()
    );
    drop_web_across(&tb, "web-wgr", "wgr-client");
}
