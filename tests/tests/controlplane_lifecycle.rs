//! The control plane over time (issue 3): gateways and ClusterInfo, ACNP replication, members
//! leaving and going silent, controllers killed mid-flow, and the leader's API server down.

use std::{
    collections::{BTreeMap, HashSet},
    net::SocketAddr,
    time::{Duration, Instant},
};

use mc_integration::{
    SameNamespace, Testbed, fixture, header_columns,
    join::{self, CLUSTERSET, LEADER_NS, MEMBER_NS, MEMBERS, id},
    net::{http_get, in_core},
    procs,
    services::{addresses_of, cluster_ip, endpoint_ips, service_and_export, services_and_exports},
    strait_column, wait_for,
};
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(30);

/// A Node object as the kubelet would register it, with its Ready condition set.
fn node(
    tb: &Testbed,
    cluster: &str,
    name: &str,
    ip: &str,
    pod_cidr: &str,
    annotations: &[(&str, &str)],
    ready: bool,
) {
    let ann: Vec<String> = annotations
        .iter()
        .map(|(k, v)| format!("    {k}: \"{v}\"\n"))
        .collect();
    let ann = if ann.is_empty() {
        String::new()
    } else {
        format!("  annotations:\n{}", ann.concat())
    };
    tb.apply(
        cluster,
        "default",
        &format!("apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n{ann}spec:\n  podCIDR: {pod_cidr}\n  podCIDRs: [{pod_cidr}]\n"),
    );
    set_ready(tb, cluster, name, ip, ready);
}

fn set_ready(tb: &Testbed, cluster: &str, name: &str, ip: &str, ready: bool) {
    let status = json!({"status": {
        "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
        "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" },
                        "reason": "Testbed", "message": "set by the test",
                        "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
    }});
    tb.ok(
        cluster,
        &[
            "patch",
            "node",
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            &status.to_string(),
        ],
    );
}

/// On kubelet Nodes, the controller-manager marks a Node whose kubelet stopped renewing its Lease
/// NotReady (Unknown) within 12 s: the test's Node objects, which no kubelet backs, get their
/// Leases renewed every 2 s by this guard while it lives, as a kubelet would; their Ready
/// condition stays what the test writes. (Without kubelets, nothing watches the Leases.)
struct Heartbeats {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Heartbeats {
    fn new(cluster: &'static str, nodes: &'static [&'static str]) -> Self {
        use std::sync::{Arc, atomic::AtomicBool, atomic::Ordering};
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let beat = move || {
            let tb = Testbed::from_env();
            let now = std::process::Command::new("date")
                .args(["-u", "+%Y-%m-%dT%H:%M:%S.%6NZ"])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
                .unwrap_or_default();
            for n in nodes {
                let lease = json!({
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": n, "namespace": "kube-node-lease"},
                    "spec": {"holderIdentity": n, "leaseDurationSeconds": 40, "renewTime": now},
                });
                let _ = tb.with_stdin(cluster, &["apply", "-f", "-"], &lease.to_string());
            }
        };
        beat();
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                beat();
                std::thread::sleep(Duration::from_secs(2));
            }
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Heartbeats {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn gateway(tb: &Testbed, cluster: &str) -> Result<Value, String> {
    let list = tb.get_json(cluster, &["get", "gateway", "-n", MEMBER_NS]);
    let items = list["items"].as_array().cloned().unwrap_or_default();
    match items.as_slice() {
        [one] => Ok(one.clone()),
        other => Err(format!("{} Gateways", other.len())),
    }
}

#[test]
fn the_gateway_is_elected_fails_over_and_its_clusterinfo_reaches_the_other_members() {
    let tb = Testbed::from_env();
    join::ensure_joined(&tb);
    let gw = "multicluster.antrea.io/gateway";
    // The testbed's own Nodes (node-a is its gateway candidate) step aside for this test, which
    // needs the election to start from nothing; they are restored at the end.
    let _ = tb
        .kubectl("east")
        .args(["annotate", "node", "node-a", &format!("{gw}-")])
        .output();
    wait_for("east without a Gateway", T, || match gateway(&tb, "east") {
        Err(e) if e == "0 Gateways" => Ok(()),
        other => Err(format!("{other:?}")),
    });
    const TEST_NODES: [&str; 3] = ["gw-test-a", "gw-test-b", "gw-test-c"];
    let heartbeats = Heartbeats::new("east", &TEST_NODES);
    node(
        &tb,
        "east",
        "gw-test-a",
        "198.18.1.2",
        "10.244.10.0/24",
        &[(gw, "true")],
        true,
    );
    node(
        &tb,
        "east",
        "gw-test-b",
        "198.18.1.3",
        "10.244.11.0/24",
        &[
            (gw, "true"),
            ("multicluster.antrea.io/gateway-ip", "198.19.0.3"),
        ],
        true,
    );
    node(
        &tb,
        "east",
        "gw-test-c",
        "198.18.1.4",
        "10.244.12.0/24",
        &[],
        true,
    );

    let g = wait_for("east's Gateway", T, || gateway(&tb, "east"));
    assert_eq!(g["metadata"]["name"], "gw-test-a", "the smallest name wins");
    assert_eq!(g["gatewayIP"], "198.18.1.2");
    assert_eq!(g["internalIP"], "198.18.1.2");
    assert_eq!(
        g["serviceCIDR"], "10.97.0.0/16",
        "discovered from the cluster"
    );
    let table = tb.ok("east", &["get", "gateway", "-n", MEMBER_NS]);
    assert_eq!(
        header_columns(&table),
        ["NAME", "GATEWAY IP", "INTERNAL IP", "AGE"]
    );

    let cii_name = format!("{}-clusterinfo", id("east"));
    let cii = |want_ip: &'static str| {
        wait_for(
            &format!("west's ClusterInfoImport with gateway {want_ip}"),
            T,
            || {
                let c = tb
                    .try_json(
                        "west",
                        &["get", "clusterinfoimport", "-n", MEMBER_NS, &cii_name],
                    )
                    .ok_or("absent")?;
                if c["spec"]["gatewayInfos"][0]["gatewayIP"] == want_ip {
                    Ok(c)
                } else {
                    Err(c["spec"].to_string())
                }
            },
        )
    };
    let c = cii("198.18.1.2");
    assert_eq!(c["spec"]["clusterID"], id("east"));
    assert_eq!(c["spec"]["serviceCIDR"], "10.97.0.0/16");
    // Every Node's Pod CIDR, summarized: the test's three (10.244.10.0/23 and 10.244.12.0/24),
    // and the testbed's own Nodes' if it has them.
    let cidrs: Vec<&str> = c["spec"]["podCIDRs"]
        .as_array()
        .expect("podCIDRs")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let tests = ["10.244.10.0/23", "10.244.12.0/24"];
    let testbed_nodes = ["10.244.1.0/24", "10.244.2.0/24"];
    for want in tests {
        assert!(cidrs.contains(&want), "{want} missing from {cidrs:?}");
    }
    assert!(
        cidrs
            .iter()
            .all(|c| tests.contains(c) || testbed_nodes.contains(c)),
        "unexpected Pod CIDRs {cidrs:?}"
    );
    let table = tb.ok("west", &["get", "clusterinfoimport", "-n", MEMBER_NS]);
    assert_eq!(
        header_columns(&table),
        ["NAME", "CLUSTER ID", "SERVICE CIDR", "AGE"]
    );
    assert!(
        tb.try_json(
            "east",
            &["get", "clusterinfoimport", "-n", MEMBER_NS, &cii_name]
        )
        .is_none(),
        "no import of itself"
    );
    let ri = tb.get_json(
        "north",
        &["get", "resourceimport", "-n", LEADER_NS, &cii_name],
    );
    assert_eq!(ri["spec"]["kind"], "ClusterInfo");

    // The active gateway turns NotReady: the other candidate takes over, with its gateway-ip.
    let flipped = Instant::now();
    set_ready(&tb, "east", "gw-test-a", "198.18.1.2", false);
    wait_for("gw-test-b to take over", T, || {
        let g = gateway(&tb, "east")?;
        if g["metadata"]["name"] == "gw-test-b" && g["gatewayIP"] == "198.19.0.3" {
            Ok(())
        } else {
            Err(g.to_string())
        }
    });
    cii("198.19.0.3");
    println!(
        "gateway failover reached west's ClusterInfoImport in {:?}",
        flipped.elapsed()
    );
    // a is Ready again: b stays (no flapping back).
    set_ready(&tb, "east", "gw-test-a", "198.18.1.2", true);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        gateway(&tb, "east").unwrap()["metadata"]["name"],
        "gw-test-b"
    );
    // b loses its annotation: a again.
    tb.ok(
        "east",
        &["annotate", "node", "gw-test-b", &format!("{gw}-")],
    );
    wait_for("gw-test-a back", T, || {
        let g = gateway(&tb, "east")?;
        if g["metadata"]["name"] == "gw-test-a" {
            Ok(())
        } else {
            Err(g.to_string())
        }
    });
    // No candidate at all: no Gateway, and the other members lose the ClusterInfo.
    drop(heartbeats);
    for n in TEST_NODES {
        tb.delete("east", &["node", n]);
        tb.delete("east", &["lease", "-n", "kube-node-lease", n]);
    }
    wait_for("no Gateway in east", T, || match gateway(&tb, "east") {
        Err(e) if e == "0 Gateways" => Ok(()),
        other => Err(format!("{other:?}")),
    });
    tb.wait_gone(
        "west's ClusterInfoImport to go",
        T,
        "west",
        &["get", "clusterinfoimport", "-n", MEMBER_NS, &cii_name],
    );
    // The testbed's gateway candidate back, if the testbed has Nodes.
    if tb.try_json("east", &["get", "node", "node-a"]).is_some() {
        tb.ok(
            "east",
            &[
                "annotate",
                "node",
                "node-a",
                &format!("{gw}=true"),
                "--overwrite",
            ],
        );
        wait_for("east's Gateway back on node-a", T, || {
            tb.try_json("east", &["get", "gateway", "-n", MEMBER_NS, "node-a"])
                .ok_or_else(|| "not yet".to_owned())
        });
    }
}

#[test]
fn an_exported_acnp_is_replicated_and_a_missing_tier_is_reported_to_the_leader() {
    let tb = Testbed::from_env();
    join::ensure_joined(&tb);
    // The guide's export, in a Tier only east has (every member has the default securityops).
    tb.apply("east", "default", "apiVersion: crd.antrea.io/v1beta1\nkind: Tier\nmetadata: {name: east-only}\nspec: {priority: 60}\n");
    tb.delete("west", &["tier", "east-only", "--ignore-not-found"]);
    let export = std::fs::read_to_string(fixture("guides/000-L500-resourceexport.yaml"))
        .unwrap()
        .replace("tier: securityops", "tier: east-only");
    assert!(export.contains("tier: east-only"));
    tb.apply("north", LEADER_NS, &export);
    let acnp = wait_for("antrea-mc-strict-namespace-isolation in east", T, || {
        tb.try_json(
            "east",
            &["get", "acnp", "antrea-mc-strict-namespace-isolation"],
        )
        .ok_or("absent".to_owned())
    });
    assert_eq!(
        acnp["metadata"]["annotations"]["multicluster.antrea.io/imported-acnp"],
        "true"
    );
    assert_eq!(acnp["spec"]["tier"], "east-only");
    assert_eq!(acnp["spec"]["ingress"][1]["action"], "Drop");
    // Stored, and not enforced by Strait (its peers are in-cluster): `kubectl get acnp` says so.
    let message = wait_for("the copy's STRAIT column", T, || {
        let (column, message) = strait_column(&tb, "east", "antrea-mc-strict-namespace-isolation");
        (column == "NotEnforced")
            .then(|| message.clone())
            .ok_or(format!("{column:?}: {message:?}"))
    });
    assert_eq!(
        message,
        "in-cluster peers (ingress[0], ingress[1]) need a policy engine in the cluster, such as Antrea"
    );
    let event = wait_for("an ACNPImportFailed Event naming west", T, || {
        let events = tb.get_json(
            "north",
            &[
                "get",
                "events",
                "-n",
                LEADER_NS,
                "--field-selector",
                "reason=ACNPImportFailed",
            ],
        );
        events["items"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| {
                e["message"]
                    .as_str()
                    .is_some_and(|m| m.contains(&id("west")))
            })
            .cloned()
            .ok_or_else(|| events["items"].to_string())
    });
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["involvedObject"]["kind"], "ResourceImport");
    assert_eq!(
        event["involvedObject"]["name"],
        "strict-namespace-isolation-antreaclusternetworkpolicy"
    );
    assert!(
        event["message"]
            .as_str()
            .unwrap()
            .contains("Tier east-only does not exist")
    );
    assert!(
        tb.try_json(
            "west",
            &["get", "acnp", "antrea-mc-strict-namespace-isolation"]
        )
        .is_none()
    );

    tb.delete(
        "north",
        &[
            "resourceexport",
            "-n",
            LEADER_NS,
            "strict-namespace-isolation-for-test-clusterset",
        ],
    );
    tb.wait_gone(
        "the copy to go from east",
        T,
        "east",
        &["get", "acnp", "antrea-mc-strict-namespace-isolation"],
    );
    tb.delete("east", &["tier", "east-only"]);
}

#[test]
fn a_member_that_leaves_takes_its_exports_and_imports_with_it() {
    let tb = Testbed::from_env();
    join::ensure_joined(&tb);
    let ns = SameNamespace::new(&tb, "mcs-leave");
    let ns = ns.name.as_str();
    service_and_export(&tb, "west", ns, "api", "10.244.2.7");
    wait_for("the import in east and west", T, || {
        endpoint_ips(&tb, "east", ns, "antrea-mc-api")?;
        endpoint_ips(&tb, "west", ns, "antrea-mc-api")
    });
    let west_set = tb.get_json("west", &["get", "clusterset", "-n", MEMBER_NS, CLUSTERSET]);

    tb.delete("west", &["clusterset", "-n", MEMBER_NS, CLUSTERSET]);
    wait_for("west's announce and exports to leave the leader", T, || {
        let mcas = tb.get_json("north", &["get", "memberclusterannounce", "-n", LEADER_NS]);
        let res = tb.get_json(
            "north",
            &[
                "get",
                "resourceexport",
                "-n",
                LEADER_NS,
                "-l",
                &format!("sourceClusterID={}", id("west")),
            ],
        );
        let (a, r) = (
            mcas["items"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| m["clusterID"] == id("west"))
                .count(),
            res["items"].as_array().unwrap().len(),
        );
        if a + r == 0 {
            Ok(())
        } else {
            Err(format!("{a} announces, {r} exports"))
        }
    });
    for (m, what) in [("west", "its imported objects"), ("east", "west's Service")] {
        wait_for(&format!("{m} to drop {what}"), T, || {
            match tb.try_json(m, &["get", "serviceimport", "-n", ns, "api"]) {
                None if tb
                    .try_json(m, &["get", "service", "-n", ns, "antrea-mc-api"])
                    .is_none() =>
                {
                    Ok(())
                }
                _ => Err("still there".into()),
            }
        });
    }
    wait_for(
        "the leader to count one member",
        T,
        || match join::leader_counts(&tb) {
            Some((1, 1)) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );

    // Back in: the same ClusterSet again.
    let mut again = west_set.clone();
    again["metadata"] = json!({"name": CLUSTERSET, "namespace": MEMBER_NS});
    again.as_object_mut().unwrap().remove("status");
    tb.apply("west", MEMBER_NS, &again.to_string());
    join::wait_ready(&tb);
    wait_for("the import back in east", T, || {
        endpoint_ips(&tb, "east", ns, "antrea-mc-api")
    });
}

#[test]
fn a_silent_member_is_disconnected_its_endpoints_withdrawn_and_restored() {
    let tb = Testbed::from_env();
    join::ensure_joined(&tb);
    let ns = SameNamespace::new(&tb, "mcs-silent");
    let ns = ns.name.as_str();
    service_and_export(&tb, "west", ns, "db", "10.244.2.8");
    service_and_export(&tb, "east", ns, "db", "10.244.1.8");
    // East serves its own share with its ready endpoint, never its ClusterIP.
    let east_ip = "10.244.1.8".to_owned();
    let mut both = vec![cluster_ip(&tb, "west", ns, "db"), east_ip.clone()];
    both.sort();
    wait_for("both endpoints in east", T, || {
        let ips = endpoint_ips(&tb, "east", ns, "antrea-mc-db")?;
        if ips == both {
            Ok(())
        } else {
            Err(format!("{ips:?}"))
        }
    });

    procs::pause("west-mc-controller");
    // Running again however the test ends: the next tests need west.
    let _resume = Resume("west-mc-controller");
    let stopped = Instant::now();
    let west_status = || {
        let s = tb.get_json("north", &["get", "clusterset", "-n", LEADER_NS, CLUSTERSET]);
        s["status"]["clusterStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["clusterID"] == id("west"))
            .map(|c| c["conditions"][0].clone())
            .unwrap_or(Value::Null)
    };
    let c = wait_for(
        "west Disconnected in the leader",
        Duration::from_secs(35),
        || {
            let c = west_status();
            if c["reason"] == "Disconnected" {
                Ok(c)
            } else {
                Err(c.to_string())
            }
        },
    );
    let disconnected_after = stopped.elapsed();
    assert!(
        disconnected_after <= Duration::from_secs(30),
        "Disconnected after {disconnected_after:?}"
    );
    assert_eq!(c["status"], "False");
    assert!(
        c["message"]
            .as_str()
            .unwrap()
            .starts_with("No MemberClusterAnnounce update after")
    );
    let ips = wait_for(
        "west's endpoints withdrawn in east",
        Duration::from_secs(40),
        || {
            let ips = endpoint_ips(&tb, "east", ns, "antrea-mc-db")?;
            if ips == [east_ip.clone()] {
                Ok(ips)
            } else {
                Err(format!("{ips:?}"))
            }
        },
    );
    println!(
        "west Disconnected after {disconnected_after:?}, withdrawn after {:?}: {ips:?}",
        stopped.elapsed()
    );

    drop(_resume);
    wait_for("west connected again", T, || {
        let c = west_status();
        if c["reason"] == "Connected" {
            Ok(())
        } else {
            Err(c.to_string())
        }
    });
    wait_for("west's endpoints restored", T, || {
        let ips = endpoint_ips(&tb, "east", ns, "antrea-mc-db")?;
        if ips == both {
            Ok(())
        } else {
            Err(format!("{ips:?}"))
        }
    });
}

/// Resumes a paused testbed controller when dropped.
struct Resume(&'static str);

impl Drop for Resume {
    fn drop(&mut self) {
        procs::resume(self.0);
    }
}

/// Every object in the leader's namespace and the members' imports, as (kind, name) sets.
fn snapshot(tb: &Testbed, ns: &str) -> Vec<String> {
    snapshot_in(tb, ns, &[])
}

/// `snapshot` of the clusters `only` (every cluster when empty).
fn snapshot_in(tb: &Testbed, ns: &str, only: &[&str]) -> Vec<String> {
    let mut all = Vec::new();
    for (cluster, kind, namespace) in [
        ("north", "resourceexport", LEADER_NS),
        ("north", "resourceimport", LEADER_NS),
        ("east", "service", ns),
        ("east", "serviceimport", ns),
        ("west", "service", ns),
        ("west", "serviceimport", ns),
    ] {
        if !only.is_empty() && !only.contains(&cluster) {
            continue;
        }
        let list = tb.get_json(cluster, &["get", kind, "-n", namespace]);
        for item in list["items"].as_array().into_iter().flatten() {
            if item["metadata"]["deletionTimestamp"].is_null() {
                all.push(format!(
                    "{cluster}/{kind}/{}",
                    item["metadata"]["name"].as_str().unwrap()
                ));
            }
        }
    }
    all.sort();
    all
}

#[test]
fn killed_controllers_and_a_leader_outage_leave_nothing_stale_and_converge() {
    let tb = Testbed::from_env();
    join::ensure_joined(&tb);
    let ns = SameNamespace::new(&tb, "mcs-restart");
    let ns = ns.name.as_str();

    // Kill each controller right after a change it must act on; a restart must converge.
    for (victim, svc) in [
        ("north-mc-controller", "a"),
        ("west-mc-controller", "b"),
        ("east-mc-controller", "c"),
    ] {
        let args = procs::kill(victim);
        service_and_export(&tb, "west", ns, svc, "10.244.2.20");
        std::thread::sleep(Duration::from_millis(500));
        procs::start(victim, &args);
        for m in MEMBERS {
            wait_for(
                &format!("{svc} imported in {m} after {victim} restarted"),
                T,
                || {
                    endpoint_ips(&tb, m, ns, &format!("antrea-mc-{svc}"))?;
                    tb.try_json(m, &["get", "serviceimport", "-n", ns, svc])
                        .ok_or("no ServiceImport".to_owned())
                },
            );
        }
    }
    // No duplicates, orphans or leftovers: exactly the objects of a, b and c.
    tb.delete("west", &["serviceexport", "-n", ns, "a"]);
    // Exactly: west's exports of b and c and their imports in the leader; in each member the
    // imported Services and ServiceImports of b and c; in west also its own Services a, b, c.
    let mut expected: Vec<String> = Vec::new();
    for s in ["b", "c"] {
        expected.push(format!(
            "north/resourceexport/{}-{ns}-{s}-endpoints",
            id("west")
        ));
        expected.push(format!(
            "north/resourceexport/{}-{ns}-{s}-service",
            id("west")
        ));
        expected.push(format!("north/resourceimport/{ns}-{s}-endpoints"));
        expected.push(format!("north/resourceimport/{ns}-{s}-service"));
        for m in MEMBERS {
            expected.push(format!("{m}/service/antrea-mc-{s}"));
            expected.push(format!("{m}/serviceimport/{s}"));
        }
    }
    for s in ["a", "b", "c"] {
        expected.push(format!("west/service/{s}"));
    }
    expected.sort();
    let snap = wait_for("exactly the objects of b and c", T, || {
        let snap: Vec<String> = snapshot(&tb, ns)
            .into_iter()
            .filter(|s| !s.starts_with("north/") || s.contains(ns))
            .collect();
        if snap == expected {
            Ok(snap)
        } else {
            Err(format!("{snap:#?}"))
        }
    });
    println!("{snap:#?}");

    // The leader's API server goes down: members keep their imports; an export made meanwhile
    // arrives once it is back. (Where the leader answers, asked while north can tell.)
    let leader_health = tb.controller_health("north-mc-controller");
    let apiserver = procs::kill("north-apiserver");
    std::thread::sleep(Duration::from_secs(8));
    for m in MEMBERS {
        assert!(
            endpoint_ips(&tb, m, ns, "antrea-mc-b").is_ok_and(|ips| !ips.is_empty()),
            "{m} lost its import while north was down"
        );
        assert!(
            tb.try_json(m, &["get", "serviceimport", "-n", ns, "b"])
                .is_some()
        );
    }
    service_and_export(&tb, "west", ns, "d", "10.244.2.21");
    // The leader, which watches north, says so on /readyz once its watches have failed for
    // longer than the 30 s a reconnect may take.
    let not_ready = wait_for(
        "the leader not ready during the outage",
        Duration::from_secs(90),
        || match readyz(leader_health) {
            Some((code, body)) if code != 200 && body.contains("watch failing") => Ok(body),
            other => Err(format!("{other:?}")),
        },
    );
    assert!(
        not_ready.contains("MemberClusterAnnounces for"),
        "{not_ready}"
    );
    procs::start("north-apiserver", &apiserver);
    for m in MEMBERS {
        wait_for(
            &format!("d imported in {m} after the outage"),
            Duration::from_secs(90),
            || endpoint_ips(&tb, m, ns, "antrea-mc-d"),
        );
    }
    join::wait_ready(&tb);
    // (A watch that resumed is known to work once its errors stop: up to a minute.)
    wait_for(
        "the leader ready again",
        Duration::from_secs(150),
        || match readyz(leader_health) {
            Some((200, _)) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
}

/// Issue 24 (faults): a burst of 100 exports from west, and in the middle of it (the leader
/// holds some of west's ResourceExports, not all) etcd and the leader's API server are killed
/// (SIGKILL) and restarted 10 s later. The testbed's three API servers share that etcd, so every
/// cluster's API is gone meanwhile. Afterwards nothing is lost or duplicated: exactly two
/// ResourceExports and two ResourceImports per Service in the leader, and in each member exactly
/// one `antrea-mc-<svc>` Service with its one endpoint and one ServiceImport per Service. Prints
/// how long the ClusterSet took to converge after the restart.
///
/// West's controller is paused while the burst's objects are created, so that its writes to the
/// leader start all at once when it resumes; a watch on the leader sees the first of them
/// arrive and the kill follows at once. (Polling after creating the objects raced the
/// controller, which could export all of them before the first poll.)
#[test]
fn etcd_and_the_leaders_api_server_killed_in_a_burst_lose_and_duplicate_nothing() {
    const N: usize = 100;
    let tb = Testbed::from_env();
    join::ensure_joined(&tb);
    let ns = SameNamespace::new(&tb, "burst-fault");
    let ns = ns.name.as_str();
    let names: Vec<(String, String)> = (0..N)
        .map(|i| (format!("s{i}"), format!("10.244.3.{}", i + 1)))
        .collect();
    let refs: Vec<(&str, &str)> = names
        .iter()
        .map(|(n, ip)| (n.as_str(), ip.as_str()))
        .collect();
    procs::pause("west-mc-controller");
    // Running again however the test ends.
    let _resume = Resume("west-mc-controller");
    services_and_exports(&tb, "west", ns, &refs);
    let selector = format!("sourceNamespace={ns}");
    let mut watch = tb
        .kubectl("north")
        .args([
            "get",
            "resourceexport",
            "-n",
            LEADER_NS,
            "-l",
            &selector,
            "--watch",
            "-o",
            "name",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("kubectl get --watch");
    let (seen_tx, seen) = std::sync::mpsc::channel();
    let stdout = watch.stdout.take().expect("watch's stdout");
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if seen_tx.send(line).is_err() {
                break;
            }
        }
    });
    // The watch established (and its empty initial list printed) before west resumes.
    std::thread::sleep(Duration::from_secs(1));
    procs::resume_without_waiting("west-mc-controller");
    let mut names_seen = HashSet::new();
    while names_seen.is_empty() {
        let name = seen
            .recv_timeout(Duration::from_secs(120))
            .expect("no ResourceExport of the burst reached the leader within 120 s");
        names_seen.insert(name);
    }
    let apiserver = procs::kill("north-apiserver");
    let etcd = procs::kill("etcd");
    let _ = watch.kill();
    let _ = watch.wait();
    names_seen.extend(seen.try_iter());
    let in_flight = names_seen.len();
    assert!(
        in_flight < 2 * N,
        "all {in_flight} ResourceExports of the burst were in the leader before the kill"
    );
    std::thread::sleep(Duration::from_secs(10));
    procs::start("etcd", &etcd);
    procs::start("north-apiserver", &apiserver);
    let restarted = Instant::now();
    for c in ["north", "east", "west"] {
        wait_for(&format!("{c}'s API server back"), T, || {
            tb.try_json(c, &["get", "namespace", ns])
                .ok_or("no answer".to_owned())
        });
    }

    let exported: Vec<(&str, &str)> = names.iter().map(|(s, _)| ("west", s.as_str())).collect();
    let want = expected_snapshot(ns, &exported, &exported);
    wait_for(
        "exactly the burst's objects everywhere",
        Duration::from_secs(240),
        || exact(&tb, ns, &want, &[]),
    );
    let objects = restarted.elapsed();
    // Every imported Service serves its one endpoint, and every ServiceImport has its IP.
    let burst: Vec<(&str, &str, &str)> = refs.iter().map(|(s, ip)| ("west", *s, *ip)).collect();
    let ips = cluster_ips(&tb, ns, &["west"]);
    for m in MEMBERS {
        wait_for(
            &format!("{m}: every import serves its endpoint"),
            Duration::from_secs(120),
            || imports_serving(&tb, m, ns, &burst, &ips),
        );
    }
    join::wait_ready(&tb);
    eprintln!(
        "burst fault: killed with {in_flight} of {} ResourceExports in the leader; after the \
         restart every object exact in {:.1} s, every import serving in {:.1} s",
        2 * N,
        objects.as_secs_f64(),
        restarted.elapsed().as_secs_f64()
    );
}

/// The ClusterIPs of the Services in `ns` of each of `clusters`, by cluster and Service.
fn cluster_ips(
    tb: &Testbed,
    ns: &str,
    clusters: &[&str],
) -> BTreeMap<String, BTreeMap<String, String>> {
    clusters
        .iter()
        .map(|c| {
            let ips = tb.get_json(c, &["get", "service", "-n", ns])["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| {
                    Some((
                        s["metadata"]["name"].as_str()?.to_owned(),
                        s["spec"]["clusterIP"].as_str()?.to_owned(),
                    ))
                })
                .collect();
            ((*c).to_owned(), ips)
        })
        .collect()
}

/// Whether member `m` imports exactly the `(exporter, service, endpoint IP)` in `exported`: every
/// `antrea-mc-<svc>` Endpoints holds its one endpoint (the exporter's Service's ClusterIP from
/// `ips`, as `endpointIPType: ClusterIP` exports it; in the exporter itself its own endpoint), no
/// other imported Endpoints exists, kube-proxy's EndpointSlices of `antrea-mc-<svc>` hold the same
/// endpoint, and every ServiceImport has its IP.
fn imports_serving(
    tb: &Testbed,
    m: &str,
    ns: &str,
    exported: &[(&str, &str, &str)],
    ips: &BTreeMap<String, BTreeMap<String, String>>,
) -> Result<(), String> {
    let want: BTreeMap<String, Vec<String>> = exported
        .iter()
        .map(|(exporter, svc, ip)| {
            let ip = if *exporter == m {
                (*ip).to_owned()
            } else {
                ips[*exporter][*svc].clone()
            };
            ((*svc).to_owned(), vec![ip])
        })
        .collect();
    let eps = tb.get_json(m, &["get", "endpoints", "-n", ns]);
    let mut have = BTreeMap::new();
    for e in eps["items"].as_array().into_iter().flatten() {
        let name = e["metadata"]["name"].as_str().unwrap_or_default();
        let Some(svc) = name.strip_prefix("antrea-mc-") else {
            continue;
        };
        have.insert(svc.to_owned(), addresses_of(e));
    }
    // What kube-proxy reads: the slices of `antrea-mc-<svc>` (Strait's, per source cluster).
    let slices = tb.get_json(m, &["get", "endpointslices", "-n", ns]);
    let mut sliced: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for sl in slices["items"].as_array().into_iter().flatten() {
        let labels = &sl["metadata"]["labels"];
        let Some(svc) = labels["kubernetes.io/service-name"]
            .as_str()
            .and_then(|n| n.strip_prefix("antrea-mc-"))
        else {
            continue;
        };
        let ips = sl["endpoints"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|e| e["addresses"].as_array().into_iter().flatten())
            .filter_map(|a| a.as_str().map(str::to_owned));
        sliced.entry(svc.to_owned()).or_default().extend(ips);
    }
    let sis = tb.get_json(m, &["get", "serviceimport", "-n", ns]);
    let with_ip = sis["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|si| si["spec"]["ips"][0].is_string())
        .count();
    let serving = want
        .iter()
        .filter(|(s, ips)| have.get(*s) == Some(ips))
        .count();
    let in_slices = want
        .iter()
        .filter(|(s, ips)| sliced.get(*s) == Some(ips))
        .count();
    let n = want.len();
    if have.len() == n && serving == n && sliced.len() == n && in_slices == n && with_ip == n {
        Ok(())
    } else {
        Err(format!(
            "{serving} of {n} Endpoints serve ({} imported Endpoints), {in_slices} in their \
             EndpointSlices ({} sliced), {with_ip} ServiceImports with an IP",
            have.len(),
            sliced.len()
        ))
    }
}

/// The objects `snapshot` lists when `exported` holds the `(exporter, service)` exported from the
/// namespace `ns` and `own` the `(cluster, service)` Services that exist there: two
/// ResourceExports and two ResourceImports per export in the leader, and in each member its own
/// Services plus one `antrea-mc-<svc>` Service and one ServiceImport per export.
fn expected_snapshot(ns: &str, exported: &[(&str, &str)], own: &[(&str, &str)]) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for (exporter, s) in exported {
        let cluster = id(exporter);
        for kind in ["endpoints", "service"] {
            v.push(format!("north/resourceexport/{cluster}-{ns}-{s}-{kind}"));
            v.push(format!("north/resourceimport/{ns}-{s}-{kind}"));
        }
        for m in MEMBERS {
            v.push(format!("{m}/service/antrea-mc-{s}"));
            v.push(format!("{m}/serviceimport/{s}"));
        }
    }
    v.extend(own.iter().map(|(c, s)| format!("{c}/service/{s}")));
    v.sort();
    v.dedup();
    v
}

/// Whether the `snapshot` of the clusters `only` (every cluster when empty), without other
/// namespaces' objects in the leader, equals `want` (restricted to those clusters).
fn exact(tb: &Testbed, ns: &str, want: &[String], only: &[&str]) -> Result<(), String> {
    let snap: Vec<String> = snapshot_in(tb, ns, only)
        .into_iter()
        .filter(|s| !s.starts_with("north/") || s.contains(ns))
        .collect();
    let keep =
        |s: &&String| only.is_empty() || only.iter().any(|c| s.starts_with(&format!("{c}/")));
    let want: Vec<&String> = want.iter().filter(keep).collect();
    if snap.iter().eq(want.iter().copied()) {
        Ok(())
    } else {
        let missing = want.iter().filter(|w| !snap.contains(w)).count();
        let extra: Vec<&String> = snap.iter().filter(|s| !want.contains(s)).collect();
        Err(format!("{missing} missing, extra: {extra:?}"))
    }
}

/// A member's API server down for 60 s (issue 24): its controller keeps its connection to the
/// leader, so its exports stay in the ClusterSet; the leader and the other member go on
/// exporting, withdrawing and importing meanwhile; once the API server is back, every object is
/// exact in every cluster, nothing lost and nothing duplicated, and every import serves its
/// endpoint. Prints how long the member took to catch up.
#[test]
fn a_members_api_server_down_for_60_s_loses_and_duplicates_nothing() {
    const DOWN: Duration = Duration::from_secs(60);
    let tb = Testbed::from_env();
    join::ensure_joined(&tb);
    let ns = SameNamespace::new(&tb, "member-down");
    let ns = ns.name.as_str();
    let svcs: Vec<(&str, String, String)> = (0..8)
        .map(|i| ("west", format!("w{i}"), format!("10.244.3.{}", i + 1)))
        .chain((0..5).map(|i| ("east", format!("e{i}"), format!("10.244.4.{}", i + 1))))
        .collect();
    let of = |cluster: &str, range: std::ops::Range<usize>| -> Vec<(&str, &str)> {
        svcs.iter()
            .filter(|(c, s, _)| *c == cluster && range.contains(&s[1..].parse().unwrap()))
            .map(|(_, s, ip)| (s.as_str(), ip.as_str()))
            .collect()
    };
    services_and_exports(&tb, "west", ns, &of("west", 0..5));
    services_and_exports(&tb, "east", ns, &of("east", 0..5));
    let state = |west: std::ops::Range<usize>, withdrawn: &[&str]| {
        let all: Vec<(&str, &str, &str)> = svcs
            .iter()
            .filter(|(c, s, _)| {
                let i: usize = s[1..].parse().unwrap();
                (*c == "east" || west.contains(&i)) && !withdrawn.contains(&s.as_str())
            })
            .map(|(c, s, ip)| (*c, s.as_str(), ip.as_str()))
            .collect();
        let own: Vec<(&str, &str)> = svcs
            .iter()
            .filter(|(c, s, _)| *c == "east" || west.contains(&s[1..].parse().unwrap()))
            .map(|(c, s, _)| (*c, s.as_str()))
            .collect();
        let exported: Vec<(&str, &str)> = all.iter().map(|(c, s, _)| (*c, *s)).collect();
        (expected_snapshot(ns, &exported, &own), all)
    };
    let (before, _) = state(0..5, &[]);
    wait_for("both members' exports imported", T, || {
        exact(&tb, ns, &before, &[])
    });
    // East's ClusterIPs are read now: east cannot be asked while it is down.
    let mut ips = cluster_ips(&tb, ns, &["east"]);

    let apiserver = procs::kill("east-apiserver");
    let down = Instant::now();
    // Meanwhile west exports three more Services and withdraws one.
    services_and_exports(&tb, "west", ns, &of("west", 5..8));
    ips.extend(cluster_ips(&tb, ns, &["west"]));
    tb.ok("west", &["delete", "serviceexport", "-n", ns, "w0"]);
    let (after, serving) = state(0..8, &["w0"]);
    wait_for("the leader and west without east", DOWN, || {
        exact(&tb, ns, &after, &["north", "west"])
    });
    wait_for("west's imports serving", DOWN, || {
        imports_serving(&tb, "west", ns, &serving, &ips)
    });
    std::thread::sleep(DOWN.saturating_sub(down.elapsed()));
    // East's exports were not withdrawn while its API server was away.
    exact(&tb, ns, &after, &["north"]).expect("the leader after 60 s without east's API server");
    procs::start("east-apiserver", &apiserver);
    let restarted = Instant::now();
    wait_for("east's API server back", T, || {
        tb.try_json("east", &["get", "namespace", ns])
            .ok_or("no answer".to_owned())
    });
    wait_for(
        "exactly the exports everywhere",
        Duration::from_secs(240),
        || exact(&tb, ns, &after, &[]),
    );
    let objects = restarted.elapsed();
    for m in MEMBERS {
        wait_for(
            &format!("{m}: every import serves its endpoint"),
            Duration::from_secs(120),
            || imports_serving(&tb, m, ns, &serving, &ips),
        );
    }
    let serving_after = restarted.elapsed();
    // East's controller sees its own API again (its watches were cut with the server and come
    // back with backoff): a Service exported in east now reaches west. (Later tests start from
    // here, and east must be watching again before they do.)
    service_and_export(&tb, "east", ns, "late", "10.244.4.99");
    wait_for(
        "east's new export imported in west",
        Duration::from_secs(180),
        || endpoint_ips(&tb, "west", ns, "antrea-mc-late"),
    );
    join::wait_ready(&tb);
    eprintln!(
        "member API server down for {} s: the leader kept east's {} exports; after the restart \
         every object exact in {:.1} s, every import serving in {:.1} s, a new export of east \
         imported in west {:.1} s after the restart",
        DOWN.as_secs(),
        of("east", 0..5).len(),
        objects.as_secs_f64(),
        serving_after.as_secs_f64(),
        restarted.elapsed().as_secs_f64()
    );
}

/// How long a health endpoint gets to accept a connection.
const HEALTH_CONNECT: Duration = Duration::from_secs(2);

/// `GET /readyz` of the controller at `addr` (`Testbed::controller_health`), from the testbed's
/// core namespace: the status code and the body, or None when nothing answers.
fn readyz(addr: SocketAddr) -> Option<(u16, String)> {
    in_core(move || http_get(addr, "/readyz", HEALTH_CONNECT).ok())
}

/// The failed watch attempts a member made on the leader so far (`/metrics`).
fn leader_watch_errors(addr: SocketAddr) -> u64 {
    let (code, text) = in_core(move || http_get(addr, "/metrics", HEALTH_CONNECT).ok())
        .expect("the member's /metrics");
    assert_eq!(code, 200, "{text}");
    let counts: Vec<u64> = text
        .lines()
        .filter(|l| l.starts_with("strait_mc_watch_errors_total{watch=\"leader "))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse().ok())
        .collect();
    assert_eq!(
        counts.len(),
        2,
        "the leader watches' error counters at {addr}:\n{text}"
    );
    counts.iter().sum()
}

#[test]
fn idle_watches_on_the_leader_keep_working_and_a_late_export_is_imported() {
    let tb = Testbed::from_env();
    join::ensure_joined(&tb);
    let ns = SameNamespace::new(&tb, "idle");
    let ns = ns.name.as_str();
    // Earlier tests' namespaces may still be going (their imports withdrawn): first, the
    // leader's ResourceImports and ResourceExports hold still for 5 s.
    let state = || {
        let mut versions: Vec<String> = ["resourceimports", "resourceexports"]
            .iter()
            .flat_map(|kind| {
                tb.get_json("north", &["get", kind, "-n", LEADER_NS])["items"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .filter_map(|o| o["metadata"]["resourceVersion"].as_str().map(str::to_owned))
            .collect();
        versions.sort();
        versions
    };
    let mut last = (state(), Instant::now());
    wait_for(
        "the leader's exports and imports holding still",
        Duration::from_secs(120),
        || {
            let now = state();
            if now != last.0 {
                last = (now, Instant::now());
            }
            if last.1.elapsed() >= Duration::from_secs(5) {
                Ok(())
            } else {
                Err(format!("changed {:?} ago", last.1.elapsed()))
            }
        },
    );
    let members = ["east-mc-controller", "west-mc-controller"].map(|c| tb.controller_health(c));
    let before = members.map(leader_watch_errors);
    // Nothing the members watch on the leader changes for longer than the read timeout of
    // their connection to it (30 s): a watch cut by that timeout is an error, and after a few
    // of them kube's backoff keeps the watch down for up to 30 s at a time, the delay the
    // next import would get. Errors come at most 60 s apart then (a 30 s cut, a backoff of
    // up to 30 s): 65 s see one.
    std::thread::sleep(Duration::from_secs(65));
    let after = members.map(leader_watch_errors);
    assert_eq!(
        before, after,
        "watches of the leader failed while idle (east, west)"
    );
    service_and_export(&tb, "west", ns, "late", "10.244.7.7");
    let west_ip = wait_for("late's ClusterIP in west", T, || {
        tb.try_json("west", &["get", "service", "-n", ns, "late"])
            .and_then(|s| s["spec"]["clusterIP"].as_str().map(str::to_owned))
            .ok_or_else(|| "no ClusterIP yet".to_owned())
    });
    wait_for("late imported in east", T, || {
        match endpoint_ips(&tb, "east", ns, "antrea-mc-late")? {
            ips if ips == [west_ip.clone()] => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
}

/// A CRD as a CNI installs it, schema left open: the test needs only its objects' fields.
fn open_crd(group: &str, kind: &str, plural: &str, version: &str) -> String {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "scope": "Cluster",
            "names": {"kind": kind, "plural": plural, "listKind": format!("{kind}List"),
                      "singular": kind.to_lowercase()},
            "versions": [{"name": version, "served": true, "storage": true,
                          "schema": {"openAPIV3Schema": {
                              "type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    })
    .to_string()
}

/// Deletes the CNIs' CRDs (and so their objects) when the test ends, passed or not.
struct CniCrds;

impl Drop for CniCrds {
    fn drop(&mut self) {
        Testbed::from_env().delete(
            "east",
            &[
                "crd",
                "ippools.crd.projectcalico.org",
                "ciliumnodes.cilium.io",
            ],
        );
    }
}

/// The Pod CIDRs east announces (west's ClusterInfoImport of east).
fn east_pod_cidrs(tb: &Testbed) -> Result<Vec<String>, String> {
    let name = format!("{}-clusterinfo", id("east"));
    let c = tb
        .try_json(
            "west",
            &["get", "clusterinfoimport", "-n", MEMBER_NS, &name],
        )
        .ok_or("no ClusterInfoImport of east in west")?;
    Ok(c["spec"]["podCIDRs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c.as_str().map(str::to_owned))
        .collect())
}

/// Calico and Cilium keep Pod CIDRs in their own objects and leave `Node.spec.podCIDRs` empty:
/// with the config's `podCIDRs` empty, a member announces the Calico IPPools Pods draw from and
/// the CiliumNodes' CIDRs as soon as their CRDs exist, and stops once they are gone. Its
/// gateway lets the other clusters open flows to them (Pod-to-Pod is on in the testbed): the
/// member controller names them on the Gateway, and the gateway's agent exposes them.
#[test]
fn pod_cidrs_come_from_calico_ippools_and_cilium_nodes_where_their_crds_exist() {
    let tb = Testbed::from_env();
    join::ensure_joined(&tb);
    let _crds = CniCrds;
    tb.apply(
        "east",
        "default",
        &open_crd("crd.projectcalico.org", "IPPool", "ippools", "v1"),
    );
    tb.apply(
        "east",
        "default",
        &open_crd("cilium.io", "CiliumNode", "ciliumnodes", "v2"),
    );
    let objects = |kind: &str| {
        wait_for(&format!("the {kind} CRD served"), T, || {
            tb.try_json("east", &["get", kind])
                .ok_or_else(|| "not yet".to_owned())
        })
    };
    objects("ippools.crd.projectcalico.org");
    objects("ciliumnodes.cilium.io");
    let pools = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "crd.projectcalico.org/v1", "kind": "IPPool",
         "metadata": {"name": "strait-test-pods"},
         "spec": {"cidr": "10.231.0.0/16", "ipipMode": "Always", "natOutgoing": true}},
        {"apiVersion": "crd.projectcalico.org/v1", "kind": "IPPool",
         "metadata": {"name": "strait-test-lb"},
         "spec": {"cidr": "10.233.0.0/24", "allowedUses": ["LoadBalancer"]}},
        {"apiVersion": "cilium.io/v2", "kind": "CiliumNode",
         "metadata": {"name": "strait-test-node"},
         "spec": {"ipam": {"podCIDRs": ["10.232.1.0/24"]}}},
    ]});
    tb.apply("east", "default", &pools.to_string());
    // The controller lists them every 30 s.
    let cidrs = wait_for("east to announce the pools' CIDRs", 3 * T, || {
        let c = east_pod_cidrs(&tb)?;
        if c.iter().any(|c| c == "10.231.0.0/16") && c.iter().any(|c| c == "10.232.1.0/24") {
            Ok(c)
        } else {
            Err(format!("{c:?}"))
        }
    });
    assert!(
        !cidrs.iter().any(|c| c == "10.233.0.0/24"),
        "a pool for LoadBalancer addresses is no Pod CIDR: {cidrs:?}"
    );
    // The Nodes' own still count.
    assert!(cidrs.iter().any(|c| c.starts_with("10.244.")), "{cidrs:?}");
    let exposed = |cidr: &str| {
        mc_integration::agent::try_gateway_maps("east")
            .unwrap_or_default()
            .lines()
            .any(|l| l.starts_with(cidr) && l.ends_with("pod-cidr"))
    };
    wait_for("east's gateway to expose the pools' CIDRs", T, || {
        match (exposed("10.231.0.0/16"), exposed("10.232.1.0/24")) {
            (true, true) => Ok(()),
            other => Err(format!(
                "{other:?}: {:?}",
                mc_integration::agent::try_gateway_maps("east")
            )),
        }
    });
    drop(_crds);
    wait_for("east to withdraw them", 3 * T, || {
        let c = east_pod_cidrs(&tb)?;
        if c.iter().any(|c| c.starts_with("10.23")) {
            Err(format!("{c:?}"))
        } else {
            Ok(())
        }
    });
    wait_for("east's gateway to close them", T, || {
        if exposed("10.231.0.0/16") || exposed("10.232.1.0/24") {
            Err(format!(
                "{:?}",
                mc_integration::agent::try_gateway_maps("east")
            ))
        } else {
            Ok(())
        }
    });
}
