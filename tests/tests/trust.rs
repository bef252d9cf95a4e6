//! The trust boundary (issue 55) on the testbed: what a member announces is weighed by the leader
//! before any cluster routes it. A member that lies (here one with a token of its own and no
//! controller at all, writing to the leader as a compromised or misconfigured member would)
//! changes no route on any Node of the other clusters, leaves the honest members' traffic as it
//! was, and its refusals are visible with `kubectl get` and `mcctl get clusterset`. And a
//! cluster's gateway lets the others reach only what that cluster exported.
//!
//! Needs the testbed's kubelet Nodes (the default `cargo xtask testbed up`).

use std::{collections::BTreeMap, process::Command, time::Duration};

use mc_integration::{
    AsServiceAccount, SameNamespace, Testbed, agent, condition,
    join::{self, CLUSTERSET, LEADER_NS, id},
    pods, wait_for,
};
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(60);

/// The member that lies: cluster ID `test-cluster-evil`, its token made by `mcctl create
/// membertoken` in the leader, as for any member. Its announce and exports and the token go
/// when dropped.
struct Evil<'a> {
    tb: &'a Testbed,
    token: AsServiceAccount,
}

const EVIL_TOKEN: &str = "evil-member";

fn evil_id() -> String {
    id("evil")
}

impl<'a> Evil<'a> {
    fn new(tb: &'a Testbed) -> Self {
        Self::clean(tb);
        mc_integration::ok(
            "mcctl create membertoken",
            tb.mcctl(
                "north",
                &[
                    "create",
                    "membertoken",
                    EVIL_TOKEN,
                    "-n",
                    LEADER_NS,
                    "--cluster-id",
                    &evil_id(),
                ],
            ),
        );
        let token = tb.as_service_account("north", LEADER_NS, EVIL_TOKEN);
        let evil = Self { tb, token };
        evil.write(&json!({
            "apiVersion": "multicluster.crd.antrea.io/v1alpha1",
            "kind": "MemberClusterAnnounce",
            "metadata": {"name": format!("member-announce-from-{}", evil_id())},
            "clusterID": evil_id(),
            "clusterSetID": CLUSTERSET,
            "leaderClusterID": id("north"),
        }));
        evil
    }

    /// A heartbeat: the announce touched, as the member controller does every few seconds.
    fn beat(&self) {
        let now = Command::new("date")
            .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
            .output()
            .expect("date");
        let now = String::from_utf8_lossy(&now.stdout).trim().to_owned();
        mc_integration::ok(
            "the evil member's heartbeat",
            self.token.run(
                &[
                    "annotate",
                    "-n",
                    LEADER_NS,
                    &format!("memberclusterannounce/member-announce-from-{}", evil_id()),
                    &format!("touch-ts={now}"),
                    "--overwrite",
                ],
                None,
            ),
        );
    }

    fn write(&self, object: &Value) {
        mc_integration::ok(
            "the evil member's write",
            self.token.run(
                &["apply", "-n", LEADER_NS, "-f", "-"],
                Some(&object.to_string()),
            ),
        );
    }

    /// Announces `service` and `pods` with the gateway `gw`, as the member controller would.
    fn announce(&self, service: &str, pods: &[&str], gw: &str) {
        let id = evil_id();
        self.write(&json!({
            "apiVersion": "multicluster.crd.antrea.io/v1alpha1",
            "kind": "ResourceExport",
            "metadata": {"name": format!("{id}-clusterinfo"),
                         "labels": {"sourceKind": "ClusterInfo", "sourceClusterID": id}},
            "spec": {"clusterID": id, "name": id, "namespace": "kube-system", "kind": "ClusterInfo",
                     "clusterInfo": {"clusterID": id, "serviceCIDR": service, "podCIDRs": pods,
                                     "gatewayInfos": [{"gatewayIP": gw}]}},
        }));
    }

    /// Exports a Service `ns/web` whose endpoint is `ip`.
    fn export_endpoint(&self, ns: &str, ip: &str) {
        let id = evil_id();
        let labels = |kind: &str| json!({"sourceKind": kind, "sourceClusterID": id, "sourceNamespace": ns, "sourceName": "web"});
        self.write(&json!({
            "apiVersion": "multicluster.crd.antrea.io/v1alpha1",
            "kind": "ResourceExport",
            "metadata": {"name": format!("{id}-{ns}-web-service"), "labels": labels("Service")},
            "spec": {"clusterID": id, "name": "web", "namespace": ns, "kind": "Service",
                     "service": {"serviceSpec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}},
        }));
        self.write(&json!({
            "apiVersion": "multicluster.crd.antrea.io/v1alpha1",
            "kind": "ResourceExport",
            "metadata": {"name": format!("{id}-{ns}-web-endpoints"), "labels": labels("Endpoints")},
            "spec": {"clusterID": id, "name": "web", "namespace": ns, "kind": "Endpoints",
                     "endpoints": {"subsets": [{"addresses": [{"ip": ip}],
                                                "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}]}},
        }));
    }

    /// The leader's verdict on one of its exports: (type, status, message) of the first condition.
    fn verdict(&self, export: &str) -> Option<(String, String, String)> {
        let re = self
            .tb
            .try_json("north", &["get", "resourceexport", "-n", LEADER_NS, export])?;
        let c = &re["status"]["conditions"][0];
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        Some((text(&c["type"]), text(&c["status"]), text(&c["message"])))
    }

    /// Waits for the leader to refuse `export` with a message containing `says`.
    fn refused(&self, export: &str, says: &str) -> String {
        wait_for(
            &format!("the leader to refuse {export}: {says}"),
            T,
            || match self.verdict(export) {
                Some((t, _, m)) if t == "Failure" && m.contains(says) => Ok(m),
                other => Err(format!("{other:?}")),
            },
        )
    }

    fn clean(tb: &Testbed) {
        tb.delete(
            "north",
            &[
                "resourceexport",
                "-n",
                LEADER_NS,
                "-l",
                &format!("sourceClusterID={}", evil_id()),
            ],
        );
        tb.delete(
            "north",
            &[
                "memberclusterannounce",
                "-n",
                LEADER_NS,
                &format!("member-announce-from-{}", evil_id()),
            ],
        );
        let _ = tb.mcctl(
            "north",
            &["delete", "membertoken", EVIL_TOKEN, "-n", LEADER_NS],
        );
    }
}

impl Drop for Evil<'_> {
    fn drop(&mut self) {
        Self::clean(self.tb);
    }
}

/// Every IPv4 route of every Node of every cluster, all tables, as `ip route show table all`
/// prints them, by Node (but the per-Pod routes of the `ptp` CNI).
fn all_routes() -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    for cluster in ["north", "east", "west"] {
        for node in ["node-a", "node-b"] {
            let ns = format!("strait-{cluster}-{node}");
            let text = Command::new("ip")
                .args(["-n", &ns, "-4", "route", "show", "table", "all"])
                .output()
                .expect("ip route");
            assert!(text.status.success(), "ip -n {ns} route");
            // The CNI's own routes to its Pods' veths come and go with Pods (of other tests
            // too): not what an announcement could move.
            let mut lines: Vec<String> = String::from_utf8_lossy(&text.stdout)
                .lines()
                .filter(|l| !l.contains(" dev veth"))
                .map(str::to_owned)
                .collect();
            lines.sort();
            out.insert(ns, lines);
        }
    }
    out
}

/// The row of `mcctl get clusterset` in the leader for a cluster: (type, status, reason).
fn leader_row(tb: &Testbed, cluster: &str) -> Option<Vec<String>> {
    let (ok, table, _) = tb.mcctl("north", &["get", "clusterset", "-n", LEADER_NS]);
    assert!(ok, "mcctl get clusterset: {table}");
    table
        .lines()
        .map(|l| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .find(|r| r.first().map(String::as_str) == Some(cluster) && r.len() >= 5)
        .map(|r| r[3..].to_vec())
}

/// West's web Pod answers east's client by the imported name.
fn east_reaches_west(tb: &Testbed, ns: &str) {
    let url = format!("http://antrea-mc-web.{ns}.svc.cluster.local/");
    wait_for(
        "east's client to get west's answer",
        T,
        || match pods::curl(tb, "east", ns, "client", &url) {
            Ok(body) if body == "hello from west/web" => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
}

#[test]
fn a_member_that_announces_what_is_not_its_own_changes_no_route_anywhere() {
    assert!(
        mc_integration::kubelet_nodes(),
        "this test needs the testbed's kubelet Nodes (`cargo xtask testbed up`)"
    );
    let tb = Testbed::from_env();
    join::ensure_joined(&tb);
    // Honest traffic first: east's client reaches west's exported web Pod.
    let ns = SameNamespace::new(&tb, "trust");
    pods::web(&tb, "west", &ns.name, "web", None, 8080);
    tb.apply(
        "west",
        &ns.name,
        "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec:\n  selector: {app: web}\n  ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP}]\n---\napiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceExport\nmetadata: {name: web}\n",
    );
    pods::client(&tb, "east", &ns.name, "client", Some("node-b"));
    east_reaches_west(&tb, &ns.name);
    let before = all_routes();

    let east_gateway = tb.get_json("east", &["get", "gateways", "-n", "kube-system"]);
    let east_service = east_gateway["items"][0]["serviceCIDR"]
        .as_str()
        .expect("east's Service CIDR")
        .to_owned();
    let west_node = tb.get_json("west", &["get", "node", "node-b"]);
    let west_node_ip = west_node["status"]["addresses"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["type"] == "InternalIP")
        .and_then(|a| a["address"].as_str())
        .expect("west node-b's InternalIP")
        .to_owned();

    let evil = Evil::new(&tb);
    let info = format!("{}-clusterinfo", evil_id());
    let gw = "198.18.20.1";
    // Each claim is refused, naming what it collides with.
    for (service, pods, says) in [
        (
            east_service.as_str(),
            vec![],
            format!(
                "{east_service} overlaps {east_service} of cluster {}",
                id("east")
            ),
        ),
        (
            "198.18.10.0/24",
            vec![],
            "198.18.10.0/24 holds 198.18.10.".to_owned(),
        ),
        (
            "169.254.169.254/32",
            vec![],
            "169.254.169.254/32 overlaps 169.254.0.0/16".to_owned(),
        ),
        (
            "128.0.0.0/1",
            vec![],
            "128.0.0.0/1 is wider than /8".to_owned(),
        ),
    ] {
        evil.announce(service, &pods, gw);
        let why = evil.refused(&info, &says);
        assert!(why.contains(&says), "{why}");
    }
    // The refusal is the member's state in the leader: connected, not Ready.
    let row = wait_for("the evil member's row in mcctl get clusterset", T, || {
        evil.beat();
        match leader_row(&tb, &evil_id()) {
            Some(r) if r[..2] == ["Ready", "False"] => Ok(r),
            other => Err(format!("{other:?}")),
        }
    });
    assert_eq!(row[2], "ClusterInfoRefused", "{row:?}");
    let set = tb.get_json("north", &["get", "clusterset", "-n", LEADER_NS, CLUSTERSET]);
    let status = set["status"]["clusterStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["clusterID"] == evil_id())
        .cloned()
        .expect("the evil member's status");
    assert!(
        status["conditions"][0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("128.0.0.0/1")),
        "{status}"
    );
    // No import of it anywhere; an endpoint at west's Node is refused as well.
    for member in join::MEMBERS {
        assert!(
            tb.try_json(
                member,
                &["get", "clusterinfoimport", "-n", "kube-system", &info]
            )
            .is_none(),
            "{member} imported the evil ClusterInfo"
        );
    }
    evil.export_endpoint(&ns.name, &west_node_ip);
    let why = evil.refused(
        &format!("{}-{}-web-endpoints", evil_id(), ns.name),
        &west_node_ip,
    );
    assert!(why.contains("has no accepted ClusterInfo"), "{why}");
    let imported = tb.get_json(
        "east",
        &[
            "get",
            "endpointslices",
            "-n",
            &ns.name,
            "-l",
            "multicluster.kubernetes.io/service-name=web",
        ],
    );
    assert!(
        !imported.to_string().contains(&west_node_ip),
        "west's Node IP reached east's imported endpoints: {imported}"
    );

    // Nothing routed changed on any Node of any cluster, and the honest traffic still flows.
    assert_eq!(all_routes(), before, "a route changed");
    east_reaches_west(&tb, &ns.name);
    // The honest members are Ready; the leader's own row too.
    for member in join::MEMBERS {
        let row = leader_row(&tb, &id(member)).expect("a row");
        assert_eq!(
            row[..3],
            ["Ready", "True", "Connected"],
            "{member}: {row:?}"
        );
        let s = tb.get_json(
            member,
            &["get", "clusterset", "-n", "kube-system", CLUSTERSET],
        );
        assert_eq!(
            condition(&s, "Ready").unwrap()["status"],
            "True",
            "{member}"
        );
    }
    drop(evil);
    wait_for(
        "the leader to count two members again",
        T,
        || match join::leader_counts(&tb) {
            Some((2, 2)) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
}

/// `drop_not_exported` on west's Nodes (whichever is the gateway).
fn west_not_exported() -> u64 {
    ["node-a", "node-b"]
        .iter()
        .map(|n| agent::packets(&agent::counters("west", n), "drop_not_exported"))
        .sum()
}

/// A Pod of east reaches what west exported and nothing else of west: not its API server's
/// `kubernetes` Service, not a Service it did not export; once that Service is exported it
/// answers, and once the export goes it is unreachable again. West's gateway counts what it
/// dropped.
#[test]
fn another_cluster_reaches_only_what_this_cluster_exported() {
    assert!(
        mc_integration::kubelet_nodes(),
        "this test needs the testbed's kubelet Nodes (`cargo xtask testbed up`)"
    );
    let tb = Testbed::from_env();
    join::ensure_joined(&tb);
    let ns = SameNamespace::new(&tb, "exposed");
    pods::web(&tb, "west", &ns.name, "web", None, 8080);
    let service = |name: &str| {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}}}\nspec:\n  selector: {{app: web}}\n  ports: [{{name: http, port: 80, targetPort: 8080, protocol: TCP}}]\n"
        )
    };
    let export = |name: &str| {
        format!(
            "apiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceExport\nmetadata: {{name: {name}}}\n"
        )
    };
    tb.apply(
        "west",
        &ns.name,
        &(service("web") + "---\n" + &export("web")),
    );
    tb.apply("west", &ns.name, &service("hidden"));
    pods::client(&tb, "east", &ns.name, "client", Some("node-b"));
    east_reaches_west(&tb, &ns.name);

    let cluster_ip = |ns: &str, name: &str| {
        tb.get_json("west", &["get", "service", name, "-n", ns])["spec"]["clusterIP"]
            .as_str()
            .expect("clusterIP")
            .to_owned()
    };
    let web = format!("http://{}/", cluster_ip(&ns.name, "web"));
    let hidden = format!("http://{}/", cluster_ip(&ns.name, "hidden"));
    let api = format!("https://{}/", cluster_ip("default", "kubernetes"));
    let curl = |url: &str| pods::curl(&tb, "east", &ns.name, "client", url);

    // The exported Service by its own ClusterIP too (the address west exported).
    assert_eq!(curl(&web).as_deref(), Ok("hello from west/web"));
    let before = west_not_exported();
    for url in [&hidden, &api] {
        let got = curl(url);
        assert!(got.is_err(), "{url} answered east: {got:?}");
    }
    let dropped = west_not_exported() - before;
    assert!(
        dropped >= 2,
        "west's gateway counted {dropped} drop_not_exported"
    );
    // `mc-agent maps` on west's gateway lists what is open: web's ClusterIP, not hidden's.
    let maps = agent::gateway_maps("west");
    let web_ip = cluster_ip(&ns.name, "web");
    assert!(maps.contains(&format!("{web_ip}:80 ")), "{maps}");
    assert!(!maps.contains(&cluster_ip(&ns.name, "hidden")), "{maps}");

    // Exported, it answers; the export withdrawn, it is unreachable again.
    tb.apply("west", &ns.name, &export("hidden"));
    wait_for(
        "west's hidden Service to answer once exported",
        T,
        || match curl(&hidden) {
            Ok(body) if body == "hello from west/web" => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    tb.delete("west", &["serviceexport", "hidden", "-n", &ns.name]);
    wait_for(
        "west's hidden Service to be unreachable again",
        T,
        || match curl(&hidden) {
            Err(_) => Ok(()),
            Ok(body) => Err(format!("answered {body:?}")),
        },
    );
}

/// `kubectl auth can-i` for a ServiceAccount: whether it may.
fn can_i(tb: &Testbed, cluster: &str, sa: &str, args: &[&str]) -> bool {
    let mut all = vec!["auth", "can-i"];
    all.extend(args);
    let who = format!("--as=system:serviceaccount:{sa}");
    all.push(&who);
    let out = tb.kubectl(cluster).args(&all).output().expect("kubectl");
    String::from_utf8_lossy(&out.stdout).trim() == "yes"
}

/// The controllers read the one Secret each needs: the leader its webhook CA (not the member
/// tokens beside it), the member its leader token by name (it cannot list kube-system's).
#[test]
fn the_controllers_cannot_list_secrets() {
    let tb = Testbed::from_env();
    let leader = format!("{LEADER_NS}:antrea-mc-controller");
    let member = "kube-system:antrea-mc-controller";
    for verb in ["list", "watch"] {
        assert!(
            !can_i(&tb, "north", &leader, &[verb, "secrets", "-n", LEADER_NS]),
            "leader {verb}"
        );
        assert!(
            !can_i(&tb, "east", member, &[verb, "secrets", "-n", "kube-system"]),
            "member {verb}"
        );
    }
    assert!(!can_i(
        &tb,
        "north",
        &leader,
        &["get", "secret/member-east-access-token", "-n", LEADER_NS]
    ));
    assert!(can_i(
        &tb,
        "north",
        &leader,
        &["get", "secret/antrea-mc-webhook-ca", "-n", LEADER_NS]
    ));
    assert!(can_i(
        &tb,
        "east",
        member,
        &[
            "get",
            "secret/member-east-access-token",
            "-n",
            "kube-system"
        ]
    ));
}

/// The capabilities the agent's DaemonSet grants: the bits of `CapEff` in /proc/<pid>/status.
const AGENT_CAPS: [(&str, u32); 4] = [
    ("BPF", 39),
    ("PERFMON", 38),
    ("NET_ADMIN", 12),
    ("NET_RAW", 13),
];

/// The agents run unprivileged, with the four capabilities their DaemonSet names and no other:
/// no container of their Pods is privileged but the init container that mounts bpffs (and exits),
/// and every running `mc-agent run` process on the testbed's Nodes (they are processes of this
/// machine) has exactly those capabilities in effect and cannot gain more (no_new_privs); the
/// members' agents are ready, and the other tests show what they do with them.
#[test]
fn the_agents_run_with_their_capabilities_and_no_privilege() {
    if !mc_integration::kubelet_nodes() {
        eprintln!("process Nodes: the agents are not in Pods");
        return;
    }
    let tb = Testbed::from_env();
    let mut pods = 0;
    for cluster in ["north", "east", "west"] {
        let list = tb.get_json(
            cluster,
            &["get", "pods", "-n", "kube-system", "-l", "app=strait-agent"],
        );
        for pod in list["items"].as_array().expect("items") {
            let name = pod["metadata"]["name"].as_str().unwrap_or("?");
            let spec = &pod["spec"];
            for c in spec["containers"].as_array().expect("containers") {
                let sc = &c["securityContext"];
                assert_ne!(sc["privileged"], true, "{cluster}/{name}: {c}");
                assert_eq!(
                    sc["capabilities"]["drop"],
                    json!(["ALL"]),
                    "{cluster}/{name}"
                );
                assert_eq!(
                    sc["capabilities"]["add"],
                    json!(AGENT_CAPS.map(|(n, _)| n)),
                    "{cluster}/{name}"
                );
            }
            let init: Vec<_> = spec["initContainers"]
                .as_array()
                .map(|a| a.iter().map(|c| c["name"].clone()).collect())
                .unwrap_or_default();
            assert_eq!(init, vec![json!("mount-bpffs")], "{cluster}/{name}");
            let ready = pod["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            // (North, the leader's cluster, has joined no ClusterSet: no Gateway, not ready.)
            assert!(
                ready || cluster == "north",
                "{cluster}/{name} is not ready: {}",
                pod["status"]
            );
            pods += 1;
        }
    }
    let want: u64 = AGENT_CAPS.iter().map(|(_, bit)| 1u64 << bit).sum();
    let out = Command::new("pgrep")
        .args(["-f", "mc-agent run --config=/etc/strait/strait-agent.conf"])
        .output()
        .expect("pgrep");
    let all: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    // Not an agent's child caught between its fork and the exec of `ip` (same command line).
    let parent = |pid: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("PPid:"))
                    .map(|p| p.trim().to_owned())
            })
            .unwrap_or_default()
    };
    let pids: Vec<String> = all
        .iter()
        .filter(|p| !all.contains(&parent(p)))
        .cloned()
        .collect();
    assert_eq!(
        pids.len(),
        pods,
        "one agent process per agent Pod: {pids:?}"
    );
    for pid in pids {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
        let field = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .unwrap_or_else(|| panic!("{key} in /proc/{pid}/status"))
                .trim()
                .to_owned()
        };
        let eff = u64::from_str_radix(&field("CapEff:"), 16).expect("CapEff");
        assert_eq!(
            eff, want,
            "agent {pid}: effective capabilities {eff:#x}, the DaemonSet grants {want:#x}"
        );
        assert_eq!(field("NoNewPrivs:"), "1", "agent {pid}");
    }
}
