//! Strait deployed as users deploy it: on the testbed's kubelet Nodes (`cargo xtask image build`
//! then `cargo xtask testbed up`), the controllers and agents are Pods the kubelets run from
//! Strait's images, installed from `deploy/` and the chart. What operators do with them. These
//! tests need kubelet Nodes: on the development shape (`testbed up --processes`) they fail at
//! once and say so.

use std::{process::Command, time::Duration};

use mc_integration::{Testbed, agent::xtask, join, pods, services::endpoint_ips, wait_for};

const SYSTEM: &str = "kube-system";

/// The testbed, which must have kubelet Nodes.
fn kubelet_testbed() -> Testbed {
    assert!(
        mc_integration::kubelet_nodes(),
        "these tests need the testbed's kubelet Nodes: `cargo xtask testbed down`, then `cargo xtask testbed up` (not --processes)"
    );
    Testbed::from_env()
}

/// A Service selecting the Pods `app=<name>`, port 80 to `target`, and its ServiceExport.
fn export_selected(tb: &Testbed, cluster: &str, ns: &str, name: &str, target: u16) {
    tb.apply(
        cluster,
        ns,
        &format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}}}\nspec:\n  selector: {{app: {name}}}\n  ports: [{{name: http, port: 80, targetPort: {target}, protocol: TCP}}]\n---\napiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceExport\nmetadata: {{name: {name}}}\n"
        ),
    );
}

/// The ClusterIP of the Service east made for an import, once it exists.
fn imported_ip(tb: &Testbed, ns: &str, name: &str) -> Result<String, String> {
    tb.try_json(
        "east",
        &["get", "service", "-n", ns, &format!("antrea-mc-{name}")],
    )
    .and_then(|s| s["spec"]["clusterIP"].as_str().map(str::to_owned))
    .ok_or_else(|| format!("no Service antrea-mc-{name} in east"))
}

/// The name every member resolves for an imported Service.
fn imported_name(ns: &str, name: &str) -> String {
    format!("antrea-mc-{name}.{ns}.svc.cluster.local")
}

fn wait_answer(tb: &Testbed, cluster: &str, ns: &str, pod: &str, url: &str, expected: &str) {
    wait_for(
        &format!("{url} from {cluster}/{pod} to answer {expected:?}"),
        Duration::from_secs(60),
        || match pods::curl(tb, cluster, ns, pod, url) {
            Ok(body) if body == expected => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
}

/// A web Pod in west (on `node`, if given) exported, and a client Pod in east that gets its
/// answer by the imported name.
fn export_and_reach(tb: &Testbed, prefix: &str, node: Option<&str>) {
    let ns = mc_integration::SameNamespace::new(tb, prefix);
    pods::web(tb, "west", &ns.name, "web", node, 8080);
    export_selected(tb, "west", &ns.name, "web", 8080);
    pods::client(tb, "east", &ns.name, "client", node);
    answers(tb, &ns.name);
}

/// East's client Pod gets west's web answer by the imported name.
fn answers(tb: &Testbed, ns: &str) {
    wait_answer(
        tb,
        "east",
        ns,
        "client",
        &format!("http://{}/", imported_name(ns, "web")),
        "hello from west/web",
    );
}

#[test]
fn a_container_in_east_reaches_a_container_in_west_by_the_imported_name() {
    let tb = kubelet_testbed();
    join::ensure_joined(&tb);
    // Through CoreDNS, kube-proxy, both gateways and the tunnel; from the non-gateway Nodes.
    export_and_reach(&tb, "kn-http", Some("node-b"));
}

#[test]
fn kubectl_logs_and_exec_show_the_controllers_and_agents() {
    let tb = kubelet_testbed();
    join::ensure_joined(&tb);
    // Structured logs of the Deployments and the DaemonSet, as `kubectl logs` shows them.
    let leader = tb.ok(
        "north",
        &[
            "logs",
            "-n",
            join::LEADER_NS,
            "deployment/antrea-mc-controller",
        ],
    );
    assert!(
        leader.contains("leader controller started"),
        "the leader's log: {leader}"
    );
    let member = tb.ok(
        "east",
        &["logs", "-n", SYSTEM, "deployment/antrea-mc-controller"],
    );
    assert!(
        member.contains("member controller started"),
        "east's member log: {member}"
    );
    let agent = tb.ok("east", &["logs", "-n", SYSTEM, "daemonset/strait-agent"]);
    // (Attached at its Node's first start; a restarted agent replaces the program in the pinned
    // link instead.)
    assert!(
        agent.contains("program=\"mc_ingress\"")
            && (agent.contains("attached with TCX")
                || agent.contains("replaced the program in the pinned link")),
        "an agent's log: {agent}"
    );
    // `mc-agent maps` in the agent's container (no privilege needed) shows the route.
    wait_for(
        "east's route map to hold west's Service CIDR",
        Duration::from_secs(30),
        || {
            let maps = tb.ok(
                "east",
                &[
                    "exec",
                    "-n",
                    SYSTEM,
                    "daemonset/strait-agent",
                    "--",
                    "mc-agent",
                    "maps",
                ],
            );
            if maps.contains("10.98.0.0/16") {
                Ok(())
            } else {
                Err(maps)
            }
        },
    );
    // bpftool from the agent image on the Node's pins, with the maps' field names: as the
    // operator's debugging Pod on the Node (`kubectl debug node --profile=sysadmin`), since
    // reading a map's BTF takes CAP_SYS_ADMIN, which the agent's container does not have.
    let image = tb.ok(
        "east",
        &[
            "get",
            "daemonset",
            "-n",
            SYSTEM,
            "strait-agent",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image}",
        ],
    );
    let created = tb
        .kubectl("east")
        .args([
            "debug",
            "node/node-a",
            "--profile=sysadmin",
            "--image",
            image.trim(),
            "--image-pull-policy=Never",
            "--",
            "bpftool",
            "map",
            "dump",
            "pinned",
            "/host/sys/fs/bpf/mc/v1/mc_routes",
        ])
        .output()
        .expect("kubectl debug");
    let said = String::from_utf8_lossy(&created.stdout).into_owned()
        + &String::from_utf8_lossy(&created.stderr);
    let pod = said
        .split_whitespace()
        .find(|w| w.starts_with("node-debugger-node-a-"))
        .unwrap_or_else(|| panic!("kubectl debug: {said}"))
        .to_owned();
    let phase = wait_for(
        "the debugging Pod to finish",
        Duration::from_secs(60),
        || {
            let phase = tb.ok(
                "east",
                &["get", "pod", &pod, "-o", "jsonpath={.status.phase}"],
            );
            match phase.trim() {
                "Succeeded" | "Failed" => Ok(phase.trim().to_owned()),
                other => Err(other.to_owned()),
            }
        },
    );
    let dump = tb.ok("east", &["logs", &pod]);
    tb.delete("east", &["pod", &pod]);
    assert_eq!(phase, "Succeeded", "{dump}");
    assert!(
        dump.contains("\"gateway_ip\"") && dump.contains("10,98,0,0"),
        "{dump}"
    );
    assert!(dump.contains("\"cluster\""), "{dump}");
}

/// Reads the whole stream a Pod's server sends (numbered lines) from a client Pod while `during`
/// runs; returns what socat printed and its exit status.
fn stream_while(
    tb: &Testbed,
    ns: &str,
    target: &str,
    lines: u32,
    during: impl FnOnce(),
) -> (String, bool) {
    let mut child = tb
        .kubectl("east")
        .args([
            "exec",
            "-n",
            ns,
            "client",
            "--",
            "socat",
            "-T",
            "20",
            "-u",
            &format!("TCP:{target}"),
            "STDOUT",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl exec socat");
    // The stream is under way before anything changes, and still is when the changes are done
    // (else they were not made under it).
    std::thread::sleep(Duration::from_secs(2));
    let changed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(during));
    let still_open = matches!(child.try_wait(), Ok(None));
    if changed.is_err() || !still_open {
        let _ = child.kill();
    }
    let out = child.wait_with_output().expect("socat");
    if let Err(e) = changed {
        std::panic::resume_unwind(e);
    }
    assert!(
        still_open,
        "the stream ended before the changes were done: make it longer ({} lines arrived)",
        String::from_utf8_lossy(&out.stdout).lines().count()
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let got = text.lines().count();
    assert!(
        got as u32 <= lines,
        "more lines than sent ({got}): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (text, out.status.success())
}

#[test]
fn restarting_the_agents_keeps_an_established_cross_cluster_stream() {
    let tb = kubelet_testbed();
    join::ensure_joined(&tb);
    let ns = mc_integration::SameNamespace::new(&tb, "kn-stream");
    // 15000 numbered lines, a few ms apart: the stream lasts longer than the restarts.
    const LINES: u32 = 15000;
    pods::run(
        &tb,
        "west",
        &ns.name,
        "streamer",
        Some("node-b"),
        &format!(
            "exec socat TCP-LISTEN:9000,reuseaddr,fork SYSTEM:'i=0; while [ $i -lt {LINES} ]; do echo line-$i; i=$((i+1)); usleep 2000; done'"
        ),
    );
    tb.apply(
        "west",
        &ns.name,
        "apiVersion: v1\nkind: Service\nmetadata: {name: streamer}\nspec:\n  selector: {app: streamer}\n  ports: [{name: tcp, port: 9000, protocol: TCP}]\n---\napiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceExport\nmetadata: {name: streamer}\n",
    );
    pods::client(&tb, "east", &ns.name, "client", Some("node-b"));
    let ip = wait_for(
        "the import of streamer in east",
        Duration::from_secs(60),
        || {
            endpoint_ips(&tb, "east", &ns.name, "antrea-mc-streamer").and_then(|ips| {
                if ips.is_empty() {
                    Err("no endpoints".into())
                } else {
                    Ok(())
                }
            })?;
            imported_ip(&tb, &ns.name, "streamer")
        },
    );
    let target = format!("{ip}:9000");
    let (text, ok) = stream_while(&tb, &ns.name, &target, LINES, || {
        for cluster in ["east", "west"] {
            tb.ok(
                cluster,
                &["rollout", "restart", "-n", SYSTEM, "daemonset/strait-agent"],
            );
        }
        for cluster in ["east", "west"] {
            tb.ok(
                cluster,
                &[
                    "rollout",
                    "status",
                    "-n",
                    SYSTEM,
                    "daemonset/strait-agent",
                    "--timeout=120s",
                ],
            );
        }
    });
    let lines: Vec<&str> = text.lines().collect();
    let expected: Vec<String> = (0..LINES).map(|i| format!("line-{i}")).collect();
    assert!(
        ok,
        "the stream ended with an error after {} lines",
        lines.len()
    );
    assert_eq!(
        lines.len(),
        expected.len(),
        "every line arrives (last: {:?})",
        lines.last()
    );
    assert!(
        lines.iter().zip(&expected).all(|(a, b)| a == b),
        "in order, none lost or changed"
    );
}

#[test]
fn a_deleted_leader_pod_is_replaced_and_exports_converge_again() {
    let tb = kubelet_testbed();
    join::ensure_joined(&tb);
    let before = tb.ok(
        "north",
        &[
            "get",
            "pods",
            "-n",
            join::LEADER_NS,
            "-l",
            "component=antrea-mc-controller",
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ],
    );
    let old = before
        .split_whitespace()
        .next()
        .expect("the leader's Pod")
        .to_owned();
    tb.ok(
        "north",
        &["delete", "pod", "-n", join::LEADER_NS, &old, "--wait=true"],
    );
    wait_for(
        "the Deployment's new leader Pod to be Ready",
        Duration::from_secs(120),
        || {
            let pods = tb
                .try_json(
                    "north",
                    &[
                        "get",
                        "pods",
                        "-n",
                        join::LEADER_NS,
                        "-l",
                        "component=antrea-mc-controller",
                    ],
                )
                .ok_or("no Pods")?;
            let ready_new = pods["items"].as_array().into_iter().flatten().any(|p| {
                p["metadata"]["name"] != old.as_str()
                    && p["status"]["conditions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
            });
            if ready_new {
                Ok(())
            } else {
                Err(pods["items"].to_string())
            }
        },
    );
    export_and_reach(&tb, "kn-leader", None);
}

#[test]
fn endpoint_ip_type_pod_ip_after_the_guides_configmap_edit_and_rollout_restart() {
    let tb = kubelet_testbed();
    join::ensure_joined(&tb);
    let ns = mc_integration::SameNamespace::new(&tb, "kn-podip");
    let pod_ip = pods::web(&tb, "west", &ns.name, "web", None, 8080);
    export_selected(&tb, "west", &ns.name, "web", 8080);
    let west_ip = wait_for("west's own ClusterIP", Duration::from_secs(30), || {
        tb.try_json("west", &["get", "service", "-n", &ns.name, "web"])
            .and_then(|s| s["spec"]["clusterIP"].as_str().map(str::to_owned))
            .ok_or_else(|| "no Service".to_owned())
    });
    let imported = |want: &str| {
        wait_for(
            &format!("east's imported endpoints to be {want}"),
            Duration::from_secs(90),
            || match endpoint_ips(&tb, "east", &ns.name, "antrea-mc-web") {
                Ok(ips) if ips == [want] => Ok(()),
                other => Err(format!("{other:?}")),
            },
        )
    };
    imported(&west_ip);
    // What seed 004 tells the operator: edit the ConfigMap, restart the controller.
    let set = |value: &str| tb.set_endpoint_ip_type("west", value);
    set("PodIP");
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        imported(&pod_ip);
        pods::client(&tb, "east", &ns.name, "client", None);
        answers(&tb, &ns.name);
    }));
    // Back to the default whatever happened: the other tests expect it.
    set("ClusterIP");
    if let Err(e) = outcome {
        std::panic::resume_unwind(e);
    }
    imported(&west_ip);
}

#[test]
fn a_crash_looping_agent_shows_in_kubectl_get_pods() {
    let tb = kubelet_testbed();
    // An agent that cannot start (an argument it does not know), on west's Nodes.
    let patch = r#"[{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"--no-such-flag"}]"#;
    tb.ok(
        "west",
        &[
            "patch",
            "daemonset",
            "-n",
            SYSTEM,
            "strait-agent",
            "--type=json",
            "-p",
            patch,
        ],
    );
    let restore = || {
        let ds = tb.get_json("west", &["get", "daemonset", "-n", SYSTEM, "strait-agent"]);
        let args = &ds["spec"]["template"]["spec"]["containers"][0]["args"];
        let n = args.as_array().map_or(0, Vec::len);
        if args[n.saturating_sub(1)] == "--no-such-flag" {
            let undo = format!(
                r#"[{{"op":"remove","path":"/spec/template/spec/containers/0/args/{}"}}]"#,
                n - 1
            );
            tb.ok(
                "west",
                &[
                    "patch",
                    "daemonset",
                    "-n",
                    SYSTEM,
                    "strait-agent",
                    "--type=json",
                    "-p",
                    &undo,
                ],
            );
        }
    };
    let seen = std::panic::catch_unwind(|| {
        wait_for(
            "an agent Pod in west to show the crash",
            Duration::from_secs(120),
            || {
                let pods = tb.ok(
                    "west",
                    &["get", "pods", "-n", SYSTEM, "-l", "app=strait-agent"],
                );
                if pods.contains("CrashLoopBackOff") || pods.contains("Error") {
                    Ok(pods)
                } else {
                    Err(pods)
                }
            },
        )
    });
    restore();
    let pods = seen.unwrap_or_else(|e| std::panic::resume_unwind(e));
    assert!(pods.contains("strait-agent-"), "{pods}");
    tb.ok(
        "west",
        &[
            "rollout",
            "status",
            "-n",
            SYSTEM,
            "daemonset/strait-agent",
            "--timeout=180s",
        ],
    );
}

/// `cargo xtask testbed node stop|start` (the kubelet of a Node).
fn node(action: &str, cluster: &str, name: &str) {
    xtask(&["testbed", "node", action, cluster, name]);
}

#[test]
fn a_node_whose_kubelet_stops_goes_not_ready_and_the_gateway_moves() {
    let tb = kubelet_testbed();
    join::ensure_joined(&tb);
    let gateway = || {
        tb.try_json("east", &["get", "gateways", "-n", SYSTEM])
            .and_then(|g| {
                g["items"][0]["metadata"]["name"]
                    .as_str()
                    .map(str::to_owned)
            })
            .unwrap_or_default()
    };
    assert_eq!(gateway(), "node-a", "node-a is east's gateway at first");
    tb.ok(
        "east",
        &[
            "annotate",
            "--overwrite",
            "node",
            "node-b",
            "multicluster.antrea.io/gateway=true",
        ],
    );
    node("stop", "east", "node-a");
    let outcome = std::panic::catch_unwind(|| {
        wait_for("node-a to be NotReady", Duration::from_secs(60), || {
            let n = tb.get_json("east", &["get", "node", "node-a"]);
            let ready = n["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["type"] == "Ready")
                .map(|c| c["status"].as_str().unwrap_or_default().to_owned())
                .unwrap_or_default();
            if ready == "True" { Err(ready) } else { Ok(()) }
        });
        wait_for(
            "east's gateway to move to node-b",
            Duration::from_secs(60),
            || {
                let g = gateway();
                if g == "node-b" { Ok(()) } else { Err(g) }
            },
        );
    });
    node("start", "east", "node-a");
    tb.ok(
        "east",
        &[
            "annotate",
            "node",
            "node-b",
            "multicluster.antrea.io/gateway-",
        ],
    );
    if let Err(e) = outcome {
        std::panic::resume_unwind(e);
    }
    wait_for(
        "node-a to be east's gateway again",
        Duration::from_secs(90),
        || {
            let g = gateway();
            if g == "node-a" { Ok(()) } else { Err(g) }
        },
    );
}

#[test]
fn west_runs_strait_from_the_helm_chart_and_the_others_from_the_manifests() {
    let tb = kubelet_testbed();
    let managed_by = |cluster: &str, what: &str| {
        tb.get_json(cluster, &["get", what, "-n", SYSTEM])["metadata"]["labels"]
            ["app.kubernetes.io/managed-by"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    for what in ["deployment/antrea-mc-controller", "daemonset/strait-agent"] {
        assert_eq!(managed_by("west", what), "Helm", "west's {what}");
        assert_eq!(
            managed_by("east", what),
            "",
            "east's {what} (kubectl apply -k)"
        );
    }
    // Both paths run the same image, as their Pods report it.
    let images = |cluster: &str| {
        tb.ok(
            cluster,
            &[
                "get",
                "pods",
                "-n",
                SYSTEM,
                "-o",
                "jsonpath={.items[*].spec.containers[*].image}",
            ],
        )
    };
    for cluster in ["east", "west"] {
        let images = images(cluster);
        let version = env!("CARGO_PKG_VERSION");
        assert!(
            images.contains(&format!("ghcr.io/strait-net/mc-controller:v{version}"))
                && images.contains(&format!("ghcr.io/strait-net/mc-agent:v{version}")),
            "{cluster}: {images}"
        );
    }
}

/// Both binaries stop on SIGTERM (as PID 1 of their containers): `kubectl delete pod` of a
/// controller or an agent returns within 5 s, not after the 30 s grace period, and the
/// Deployment or DaemonSet brings a Ready replacement. (What `kubectl delete` waits for includes
/// the kubelet's own work: noticing the exit, its relist runs every second, and the Pod network's
/// teardown: 0.8 s for the agent on the host network; the controller under 2 s in two runs and
/// 2.05 s in a third.) Also while starting: the agent's replacement, deleted as soon as its
/// container runs (it is loading its programs then), is gone within 5 s too (it took 30 s when a
/// SIGTERM came before the handler was installed, and 3-6 s while a load held the runtime).
#[test]
fn deleted_controller_and_agent_pods_stop_at_once_and_are_replaced() {
    let tb = kubelet_testbed();
    join::ensure_joined(&tb);
    // (The controller's replacement starts beside the old Pod and is Ready within a second:
    // only the agent's start, seconds of loading programs, is caught and deleted.)
    for (what, selector, owner, starting_too) in [
        (
            "the member controller",
            "component=antrea-mc-controller",
            "deployment/antrea-mc-controller",
            false,
        ),
        (
            "the agent",
            "app=strait-agent",
            "daemonset/strait-agent",
            true,
        ),
    ] {
        // (Right after `testbed up` the agents' own rollout may still be going.)
        tb.ok(
            "east",
            &["rollout", "status", "-n", SYSTEM, owner, "--timeout=120s"],
        );
        let pods = tb.get_json("east", &["get", "pods", "-n", SYSTEM, "-l", selector]);
        let live: Vec<&serde_json::Value> = pods["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .collect();
        // (The agent's Pod on node-b; the controller may run on either Node.)
        let pod = live
            .iter()
            .find(|p| p["spec"]["nodeName"] == "node-b")
            .or(live.first())
            .and_then(|p| p["metadata"]["name"].as_str())
            .unwrap_or_else(|| panic!("no Pod of {what} in east"))
            .to_owned();
        delete_within(&tb, what, &pod, Duration::from_secs(5));
        if starting_too {
            let starting = wait_for(
                &format!("a replacement Pod of {what} that runs and is not Ready yet"),
                Duration::from_secs(60),
                || {
                    let pods = tb.get_json("east", &["get", "pods", "-n", SYSTEM, "-l", selector]);
                    pods["items"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
                        .filter(|p| p["metadata"]["name"] != pod.as_str())
                        .filter(|p| {
                            !p["status"]["containerStatuses"][0]["state"]["running"].is_null()
                        })
                        .find(|p| {
                            !p["status"]["conditions"]
                                .as_array()
                                .into_iter()
                                .flatten()
                                .any(|c| c["type"] == "Ready" && c["status"] == "True")
                        })
                        .and_then(|p| p["metadata"]["name"].as_str().map(str::to_owned))
                        .ok_or_else(|| pods["items"].to_string())
                },
            );
            delete_within(
                &tb,
                &format!("{what}, deleted while starting,"),
                &starting,
                Duration::from_secs(5),
            );
        }
        tb.ok(
            "east",
            &["rollout", "status", "-n", SYSTEM, owner, "--timeout=120s"],
        );
    }
}

/// `kubectl delete pod --wait` of `pod` in east's kube-system returns within `limit`.
fn delete_within(tb: &Testbed, what: &str, pod: &str, limit: Duration) {
    let started = std::time::Instant::now();
    tb.ok("east", &["delete", "pod", "-n", SYSTEM, pod, "--wait=true"]);
    let took = started.elapsed();
    println!("kubectl delete pod of {what} ({pod}) returned after {took:?}");
    assert!(
        took < limit,
        "{what} ({pod}) took {took:?} to stop: it must stop on SIGTERM"
    );
}

/// What a Node holds of Strait, read in the Node's own namespaces (not through the agent).
#[derive(Debug)]
struct NodeState {
    /// Entries of /sys/fs/bpf/mc (the pin directories).
    pins: String,
    /// `ip route show table all proto 167`, and an earlier version's rule (`lookup 167`).
    routes: String,
    /// The pinned TCX link of the uplink's ingress (`bpftool link show pinned`).
    programs: String,
    /// rp_filter of the uplink, and of a new interface (what the uplink had before the agent).
    rp_filter: (String, String),
    ip_forward: String,
    /// The agent's record of the sysctls it changed (/run/strait/sysctls).
    record: String,
}

fn node_state(cluster: &str, node: &str) -> NodeState {
    let script = "ls /sys/fs/bpf/mc 2>/dev/null; echo '#'; ip -4 route show table all proto 167; ip -4 rule show pref 32000; echo '#'; \
                  bpftool link show pinned /sys/fs/bpf/mc/v1/links/eth0_ingress 2>/dev/null; echo '#'; \
                  cat /proc/sys/net/ipv4/conf/eth0/rp_filter; echo '#'; \
                  cat /proc/sys/net/ipv4/conf/default/rp_filter; echo '#'; \
                  cat /proc/sys/net/ipv4/ip_forward; echo '#'; cat /run/strait/sysctls 2>/dev/null; true";
    let out = xtask(&[
        "testbed",
        "exec",
        &format!("{cluster}/{node}"),
        "--",
        "sh",
        "-c",
        script,
    ]);
    let parts: Vec<String> = out.split('#').map(|p| p.trim().to_owned()).collect();
    assert_eq!(parts.len(), 7, "{cluster}/{node}: {out}");
    NodeState {
        pins: parts[0].clone(),
        routes: parts[1].clone(),
        programs: parts[2].clone(),
        rp_filter: (parts[3].clone(), parts[4].clone()),
        ip_forward: parts[5].clone(),
        record: parts[6].clone(),
    }
}

/// Every Node of every cluster.
fn all_nodes(tb: &Testbed) -> Vec<(&'static str, String)> {
    let mut all = Vec::new();
    for cluster in mc_integration::CLUSTERS {
        for n in tb
            .ok(cluster, &["get", "nodes", "-o", "name"])
            .lines()
            .filter_map(|l| l.strip_prefix("node/"))
        {
            all.push((cluster, n.to_owned()));
        }
    }
    all
}

/// The documented uninstall (docs/operating.md, "Uninstalling") in every cluster — leave the
/// ClusterSet, delete the controllers with their webhooks and the agents (the manifests in north
/// and east, `helm uninstall` in west), clean the Nodes with deploy/uninstall, delete the CRDs —
/// leaves no Node with a Strait program, pin, route or changed sysctl, checked in each Node's
/// own namespaces. Then `cargo xtask testbed up` installs everything again, as it first did, and
/// a Service exported from west answers in east.
#[test]
fn uninstalling_leaves_every_node_clean_and_reinstalling_works() {
    let tb = kubelet_testbed();
    join::ensure_joined(&tb);
    let nodes = all_nodes(&tb);
    assert!(nodes.len() >= 6, "{nodes:?}");
    // Installed: every Node has the agent's pins and programs, and the uplink's rp_filter is
    // the agent's (the testbed leaves it at the kernel's default), with the original recorded.
    for (cluster, node) in &nodes {
        let s = node_state(cluster, node);
        assert!(s.pins.contains("v1"), "{cluster}/{node}: {s:?}");
        assert!(s.programs.contains("prog "), "{cluster}/{node}: {s:?}");
        assert_eq!(s.rp_filter.0, "2", "{cluster}/{node}: {s:?}");
        assert!(
            s.record
                .contains(&format!("net/ipv4/conf/eth0/rp_filter={}", s.rp_filter.1)),
            "{cluster}/{node}: {s:?}"
        );
    }

    // 1. Leave the ClusterSet (members first).
    join::leave_all(&tb);
    // 2. Controllers with their webhooks, then the agents.
    for cluster in ["north", "east"] {
        tb.ok(cluster, &["delete", "-k", "deploy/member/"]);
    }
    tb.ok("north", &["delete", "-k", "deploy/leader/"]);
    for cluster in ["north", "east"] {
        tb.ok(cluster, &["delete", "-k", "deploy/agent/"]);
    }
    let out = tb
        .helm("west")
        .args(["uninstall", "strait", "--namespace", SYSTEM, "--wait"])
        .output()
        .expect("helm");
    assert!(
        out.status.success(),
        "helm uninstall: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for cluster in mc_integration::CLUSTERS {
        tb.ok(
            cluster,
            &[
                "-n",
                SYSTEM,
                "wait",
                "--for=delete",
                "pod",
                "-l",
                "app=strait-agent",
                "--timeout=120s",
            ],
        );
    }
    // 3. Clean the Nodes.
    for cluster in mc_integration::CLUSTERS {
        tb.ok(cluster, &["apply", "-k", "deploy/uninstall/"]);
    }
    for cluster in mc_integration::CLUSTERS {
        tb.ok(
            cluster,
            &[
                "-n",
                SYSTEM,
                "rollout",
                "status",
                "daemonset/strait-cleanup",
                "--timeout=300s",
            ],
        );
        tb.ok(cluster, &["delete", "-k", "deploy/uninstall/"]);
    }
    // 4. CoreDNS's grant, the CRDs (with every object of theirs), and the gateway annotations.
    for cluster in mc_integration::CLUSTERS {
        tb.ok(cluster, &["delete", "-k", "deploy/coredns/"]);
        tb.ok(cluster, &["delete", "-f", "deploy/crds/"]);
        tb.ok(cluster, &["delete", "-f", "deploy/antrea-crds/"]);
        tb.ok(
            cluster,
            &[
                "annotate",
                "node",
                "--all",
                "multicluster.antrea.io/gateway-",
            ],
        );
    }

    for cluster in mc_integration::CLUSTERS {
        let left = tb.ok(
            cluster,
            &[
                "get",
                "crd,validatingwebhookconfigurations,mutatingwebhookconfigurations,daemonsets,deployments",
                "-A",
                "-o",
                "name",
            ],
        );
        for line in left.lines() {
            assert!(
                !(line.contains("antrea") || line.contains("strait")),
                "{cluster}: {line} is left"
            );
        }
    }
    // Programs are the kernel's objects, not a Node's: with Strait gone from every Node of the
    // machine none of its programs may remain loaded (a detached program is freed once its last
    // reference goes, within moments).
    wait_for(
        "no Strait program loaded on the machine",
        Duration::from_secs(15),
        || {
            let out = Command::new("bpftool")
                .args(["prog", "show"])
                .output()
                .map_err(|e| e.to_string())?;
            let left: Vec<String> = String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter(|l| l.contains("name mc_ingress") || l.contains("name mc_egress"))
                .map(str::to_owned)
                .collect();
            if left.is_empty() {
                Ok(())
            } else {
                Err(left.join("; "))
            }
        },
    );
    for (cluster, node) in &nodes {
        let s = node_state(cluster, node);
        println!("{cluster}/{node} after uninstalling: {s:?}");
        assert_eq!(s.pins, "", "{cluster}/{node}: pins left");
        assert_eq!(s.routes, "", "{cluster}/{node}: routes left");
        assert_eq!(s.programs, "", "{cluster}/{node}: programs left");
        assert_eq!(
            s.rp_filter.0, s.rp_filter.1,
            "{cluster}/{node}: the uplink's rp_filter is not what the kernel gave it"
        );
        assert_eq!(
            s.ip_forward, "1",
            "{cluster}/{node}: the testbed's forwarding"
        );
        assert_eq!(s.record, "", "{cluster}/{node}: the record is left");
    }

    // Reinstalling: the testbed's `up` (the README's install) and a cross-cluster answer.
    xtask(&["testbed", "up"]);
    join::ensure_joined(&tb);
    for (cluster, node) in &nodes {
        wait_for(
            &format!("the agent on {cluster}/{node} to attach again"),
            Duration::from_secs(90),
            || {
                let s = node_state(cluster, node);
                if s.programs.contains("prog ") && s.rp_filter.0 == "2" {
                    Ok(())
                } else {
                    Err(format!("{s:?}"))
                }
            },
        );
    }
    export_and_reach(&tb, "reinstalled", None);
}

/// An object as read, without what the API server set, in namespace `ns`.
fn moved(obj: &serde_json::Value, ns: &str) -> String {
    let mut o = obj.clone();
    let m = o["metadata"].as_object_mut().expect("metadata");
    for key in [
        "resourceVersion",
        "uid",
        "creationTimestamp",
        "managedFields",
        "generation",
        "ownerReferences",
        "finalizers",
    ] {
        m.remove(key);
    }
    m.insert("namespace".into(), ns.into());
    o.as_object_mut().expect("object").remove("status");
    o.to_string()
}

/// `helm upgrade` of west's release with the member (and so the agent) in `ns`.
fn helm_member_namespace(tb: &Testbed, ns: &str) -> Result<(), String> {
    let chart = mc_integration::repo_root().join("deploy/chart/strait");
    let out = tb
        .helm("west")
        .args(["upgrade", "strait"])
        .arg(&chart)
        .args([
            "--namespace",
            SYSTEM,
            "--reuse-values",
            "--set",
            &format!("member.namespace={ns}"),
        ])
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// West's member back in kube-system and the other namespace gone, whatever the test did
/// (also when it failed half-way: the later tests need west as the testbed made it).
struct MemberInKubeSystem<'a>(&'a Testbed, &'static str);

impl Drop for MemberInKubeSystem<'_> {
    fn drop(&mut self) {
        let (tb, ns) = (self.0, self.1);
        if let Err(e) = helm_member_namespace(tb, SYSTEM) {
            eprintln!("restoring west's member namespace: {e}");
        }
        let _ = tb
            .kubectl("west")
            .args([
                "delete",
                "namespace",
                ns,
                "--ignore-not-found",
                "--timeout=120s",
            ])
            .output();
    }
}

/// West leaves the ClusterSet in `from` (its controller still there); returns what joined it
/// (its token Secret and ClusterSet), to write in another namespace.
fn leave_in(tb: &Testbed, from: &str) -> (serde_json::Value, serde_json::Value) {
    let secret = tb.get_json(
        "west",
        &["get", "secret", "-n", from, "member-west-access-token"],
    );
    let clusterset = tb.get_json("west", &["get", "clusterset", "-n", from, join::CLUSTERSET]);
    tb.delete("west", &["clusterset", "-n", from, join::CLUSTERSET]);
    tb.wait_gone(
        "west's ClusterSet to go",
        Duration::from_secs(60),
        "west",
        &["get", "clusterset", "-n", from, join::CLUSTERSET],
    );
    (secret, clusterset)
}

/// The chart with `member.namespace` changed: the agent follows the member into that namespace
/// (its Pod's namespace is where it looks for the Gateway and ClusterInfoImports), becomes
/// ready and programs the remote prefixes into its maps; back to kube-system afterwards.
#[test]
fn with_the_chart_in_another_member_namespace_the_agent_is_ready_and_programs_its_maps() {
    const NS: &str = "strait-member";
    let tb = kubelet_testbed();
    join::ensure_joined(&tb);
    tb.ensure_namespace("west", NS);
    let restore = MemberInKubeSystem(&tb, NS);
    let (secret, clusterset) = leave_in(&tb, SYSTEM);
    helm_member_namespace(&tb, NS).expect("helm upgrade");
    tb.ok(
        "west",
        &[
            "rollout",
            "status",
            "-n",
            NS,
            "deployment/antrea-mc-controller",
            "--timeout=180s",
        ],
    );
    tb.apply("west", NS, &moved(&secret, NS));
    tb.apply("west", NS, &moved(&clusterset, NS));
    wait_for(
        "the leader to count both members ready",
        Duration::from_secs(120),
        || match join::leader_counts(&tb) {
            Some((2, 2)) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    // east's Service CIDR, as west's ClusterInfoImport in the new namespace carries it.
    let east_cidr = wait_for(
        "east's ClusterInfoImport in west's new namespace",
        Duration::from_secs(90),
        || {
            let list = tb.get_json("west", &["get", "clusterinfoimport", "-n", NS]);
            list["items"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|i| i["spec"]["clusterID"] == join::id("east"))
                .and_then(|i| i["spec"]["serviceCIDR"].as_str().map(str::to_owned))
                .ok_or_else(|| list.to_string())
        },
    );
    tb.ok(
        "west",
        &[
            "rollout",
            "status",
            "-n",
            NS,
            "daemonset/strait-agent",
            "--timeout=120s",
        ],
    );
    let maps = wait_for(
        "the agent in the new namespace to route east's Service CIDR",
        Duration::from_secs(60),
        || {
            let maps = tb.ok(
                "west",
                &[
                    "exec",
                    "-n",
                    NS,
                    "ds/strait-agent",
                    "--",
                    "mc-agent",
                    "maps",
                ],
            );
            if maps.contains(&east_cidr) {
                Ok(maps)
            } else {
                Err(maps)
            }
        },
    );
    println!("mc-agent maps in {NS}:\n{maps}");

    // Back to kube-system: west leaves in the other namespace, then joins in kube-system again.
    let (secret, clusterset) = leave_in(&tb, NS);
    drop(restore);
    let rollout = |what: &str| {
        tb.ok(
            "west",
            &["rollout", "status", "-n", SYSTEM, what, "--timeout=180s"],
        )
    };
    rollout("deployment/antrea-mc-controller");
    tb.apply("west", SYSTEM, &moved(&secret, SYSTEM));
    tb.apply("west", SYSTEM, &moved(&clusterset, SYSTEM));
    join::wait_ready(&tb);
    rollout("daemonset/strait-agent");
}
