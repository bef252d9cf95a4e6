//! Multi-cluster NetworkPolicy on the testbed (issue 23; docs/design.md §4b): the guide's
//! ClusterSet-scoped ingress rules, enforced by the receiving gateway for remote clients, on
//! Pods of its own Node and of the regular Node, decided by the source Pod's label identity
//! (carried in the VNI) and the Pod kube-proxy chose. The testbed runs stretched NetworkPolicy in
//! every controller and agent.

use std::{
    collections::BTreeSet,
    process::Command,
    time::{Duration, Instant},
};

use mc_integration::{
    Reconfigured, Testbed,
    agent::{counters, packets},
    join::{self},
    label_hash, pods, repo_root,
    services::endpoint_ips,
    wait_for,
};
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(90);

/// A Pod of the tools image with `labels` on `node`: with `serve`, busybox httpd on 8080
/// (answering `hello from <cluster>/<name>`) and a UDP echo on 5353. Returns its IP once Ready.
fn pod(
    tb: &Testbed,
    cluster: &str,
    ns: &str,
    name: &str,
    node: &str,
    labels: Value,
    serve: bool,
) -> String {
    let script = if serve {
        format!(
            "mkdir -p /tmp/www && echo 'hello from {cluster}/{name}' > /tmp/www/index.html && \
             httpd -p 8080 -h /tmp/www && exec socat UDP-RECVFROM:5353,fork EXEC:cat"
        )
    } else {
        "exec sleep 86400".to_owned()
    };
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": pods::tools_image(),
                            "imagePullPolicy": "Never", "command": ["/bin/sh", "-c", script]}],
        },
    });
    tb.apply(cluster, ns, &pod.to_string());
    pods::wait_ready(tb, cluster, ns, name)
}

/// HTTP from a Pod (2 s): the body, or why not.
fn http(tb: &Testbed, cluster: &str, ns: &str, from: &str, ip: &str) -> Result<String, String> {
    let url = format!("http://{ip}:8080/");
    let out = pods::exec(tb, cluster, ns, from, &["curl", "-sS", "-m", "2", &url]);
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

/// How long after `started` a TCP connection from `from` to `ip` first gives `want` (probing
/// with 0.5 s connections, about three a second).
fn first_time(
    tb: &Testbed,
    (cluster, ns, from): (&str, &str, &str),
    ip: &str,
    want: bool,
    started: Instant,
) -> Duration {
    let url = format!("http://{ip}:8080/");
    loop {
        let at = started.elapsed();
        let out = pods::exec(tb, cluster, ns, from, &["curl", "-sS", "-m", "0.5", &url]);
        if out.status.success() == want {
            return at;
        }
        assert!(at < T, "{from} -> {ip}: still not {want} after {at:?}");
    }
}

/// A datagram from a Pod to `ip`:5353: whether it came back within 2 s.
fn udp(tb: &Testbed, cluster: &str, ns: &str, from: &str, ip: &str) -> bool {
    let out = pods::exec(
        tb,
        cluster,
        ns,
        from,
        &[
            "sh",
            "-c",
            &format!("echo policy | socat -T2 - UDP:{ip}:5353"),
        ],
    );
    String::from_utf8_lossy(&out.stdout).contains("policy")
}

/// Namespaces created for a test, deleted at its end; cluster-scoped policies with them, and
/// ResourceExports in the leader.
struct Cleanup<'a> {
    tb: &'a Testbed,
    namespaces: Vec<(&'static str, String)>,
    acnps: Vec<(&'static str, String)>,
    leader_exports: Vec<String>,
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        for name in &self.leader_exports {
            let _ = self
                .tb
                .kubectl("north")
                .args([
                    "delete",
                    "resourceexport",
                    "-n",
                    join::LEADER_NS,
                    name,
                    "--ignore-not-found",
                ])
                .output();
        }
        for (c, name) in &self.acnps {
            let _ = self
                .tb
                .kubectl(c)
                .args(["delete", "acnp", name, "--ignore-not-found"])
                .output();
        }
        for (c, ns) in &self.namespaces {
            let _ = self
                .tb
                .kubectl(c)
                .args(["delete", "namespace", ns, "--wait=false"])
                .output();
        }
    }
}

fn label_namespace(tb: &Testbed, cluster: &str, ns: &str, label: &str) {
    tb.ok(cluster, &["label", "namespace", ns, label, "--overwrite"]);
}

/// The ingress policy map of east's gateway, as bpftool prints it (named fields).
fn gateway_policy_map(cluster: &str) -> Value {
    let out = Command::new(env!("CARGO"))
        .args([
            "xtask",
            "testbed",
            "exec",
            &format!("{cluster}/node-a"),
            "--",
        ])
        .args([
            "bpftool",
            "-j",
            "map",
            "dump",
            "pinned",
            "/sys/fs/bpf/mc/v1/mc_ingress_policy",
        ])
        .current_dir(repo_root())
        .output()
        .expect("cargo xtask testbed exec");
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

/// The type of the link pinned as the policy program's on a Node (`netfilter` while the agent
/// has it linked at PREROUTING), `None` when bpftool finds no such pin, read with bpftool in the
/// Node's own namespaces; `Err` for any other answer (so that a failed read is never taken for
/// "no link").
fn policy_link(cluster: &str, node: &str) -> Result<Option<String>, String> {
    let out = Command::new(env!("CARGO"))
        .args([
            "xtask",
            "testbed",
            "exec",
            &format!("{cluster}/{node}"),
            "--",
        ])
        .args([
            "bpftool",
            "-j",
            "link",
            "show",
            "pinned",
            "/sys/fs/bpf/mc/v1/links/netfilter_ingress",
        ])
        .current_dir(repo_root())
        .output()
        .map_err(|e| format!("cargo xtask testbed exec: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let link: Value = serde_json::from_slice(&out.stdout).map_err(|_| text.clone())?;
    // (A bpftool older than the netfilter link type prints its number, 10.)
    match &link["type"] {
        Value::String(t) => return Ok(Some(t.clone())),
        Value::Number(n) if n.as_u64() == Some(10) => return Ok(Some("netfilter".into())),
        _ => {}
    }
    if link["error"]
        .as_str()
        .is_some_and(|e| e.contains("No such file"))
    {
        return Ok(None);
    }
    Err(text)
}

/// Waits until the policy program is linked on a Node (`true`) or not (`false`).
fn wait_policy_link(cluster: &str, node: &str, linked: bool) {
    let what = if linked {
        "the policy program linked at PREROUTING (an egress rule for a Pod there)"
    } else {
        "no policy program linked (nothing to decide there)"
    };
    wait_for(&format!("{cluster}/{node}: {what}"), T, || {
        let got = policy_link(cluster, node)?;
        (got.as_deref().is_some_and(|t| t == "netfilter") == linked)
            .then_some(())
            .ok_or_else(|| format!("{got:?}"))
    });
}

/// `servers_in`'s `<prefix>admin-<pid>` Namespace (`role=admin`) with an `app=admin-web` Pod
/// serving on each Node, `client_in`'s `<prefix>tenant-<pid>` Namespace (unlabelled) with a
/// client Pod on the regular Node; `acnp` (in `servers_in`) goes with them at the end. Returns
/// the cleanup, the tenant Namespace and the servers (name, IP).
fn admin_and_tenant<'a>(
    tb: &'a Testbed,
    prefix: &str,
    acnp: &str,
    (servers_in, client_in): (&'static str, &'static str),
) -> (Cleanup<'a>, String, Vec<(String, String)>) {
    join::ensure_joined(tb);
    let pid = std::process::id();
    let (admin, tenant) = (
        format!("{prefix}admin-{pid}"),
        format!("{prefix}tenant-{pid}"),
    );
    let cleanup = Cleanup {
        tb,
        namespaces: vec![(servers_in, admin.clone()), (client_in, tenant.clone())],
        acnps: vec![(servers_in, acnp.to_owned())],
        leader_exports: vec![],
    };
    tb.ensure_namespace(servers_in, &admin);
    label_namespace(tb, servers_in, &admin, "role=admin");
    tb.ensure_namespace(client_in, &tenant);
    let servers = ["node-a", "node-b"]
        .iter()
        .map(|node| {
            let name = format!("admin-web-{}", &node[5..]);
            let labels = json!({"app": "admin-web"});
            let ip = pod(tb, servers_in, &admin, &name, node, labels, true);
            (name, ip)
        })
        .collect();
    let labels = json!({"app": "client"});
    pod(tb, client_in, &tenant, "client", "node-b", labels, false);
    (cleanup, tenant, servers)
}

/// Whether `client` (cluster, Namespace, Pod) opens TCP and UDP to every one of `servers`
/// exactly when `want`; else which did not.
fn all_reach(
    tb: &Testbed,
    (cluster, ns, client): (&str, &str, &str),
    servers: &[(String, String)],
    want: bool,
) -> Result<(), String> {
    for (name, ip) in servers {
        let tcp = http(tb, cluster, ns, client, ip);
        if tcp.is_ok() != want {
            return Err(format!("TCP to {name} ({ip}): {tcp:?}"));
        }
        if udp(tb, cluster, ns, client, ip) != want {
            return Err(format!("UDP to {name} ({ip}): reached {}", !want));
        }
    }
    Ok(())
}

/// The guide's `drop-tenant-access-to-admin-namespace` ACNP with `action` for its rule.
fn admin_acnp(name: &str, action: &str) -> String {
    format!(
        "apiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata:\n  name: {name}\nspec:\n  appliedTo:\n  - namespaceSelector:\n      matchLabels:\n        role: admin\n  priority: 1\n  tier: securityops\n  ingress:\n  - action: {action}\n    from:\n    - scope: ClusterSet\n      namespaceSelector:\n        matchLabels:\n          role: tenant\n"
    )
}

/// The guide's `drop-tenant-access-to-admin-namespace` (with `Drop`, the guide's `Deny` being
/// invalid): west's client in a `role=tenant` Namespace cannot open connections to east's Pods in
/// the `role=admin` Namespace, on the gateway Node or the regular one, over TCP and UDP; from an
/// unlabelled Namespace it can. Labelling the Namespace blocks new connections, unlabelling
/// restores them (the time each takes is printed), and deleting the policy lifts it.
#[test]
fn the_guides_admin_namespace_policy_stops_tenants_of_other_clusters() {
    let tb = Testbed::from_env();
    let acnp = "drop-tenant-access-to-admin-namespace";
    let (_cleanup, tenant, servers) = admin_and_tenant(&tb, "", acnp, ("east", "west"));
    let pid = std::process::id();
    tb.apply("east", "default", &admin_acnp(acnp, "Drop"));
    let all_reach = |want: bool| all_reach(&tb, ("west", &tenant, "client"), &servers, want);
    // Unlabelled: the client's identity matches no rule (the Pods are covered, so until its
    // identity is known everywhere its flows are dropped as unknown: wait for it).
    wait_for("the unlabelled client to reach both admin Pods", T, || {
        all_reach(true)
    });
    assert_eq!(
        http(&tb, "west", &tenant, "client", &servers[0].1).unwrap(),
        "hello from east/admin-web-a"
    );

    let client = ("west", tenant.as_str(), "client");
    let started = Instant::now();
    label_namespace(&tb, "west", &tenant, "role=tenant");
    let blocked = first_time(&tb, client, &servers[0].1, false, started);
    wait_for("a tenant to be refused by both admin Pods", T, || {
        all_reach(false)
    });
    // West is the Flannel member (docs/design.md §5): its Pods' flows to another cluster leave
    // masqueraded to the Node's address, and the client's label ID reached east's gateway
    // through conntrack (the masquerade program), not from the packet's source.
    let west_b = counters("west", "node-b");
    assert!(
        packets(&west_b, "tx_identity_via_conntrack") > 0,
        "west's client was refused, but not by the identity its masqueraded flows carry: {west_b}"
    );
    // bpftool shows the compiled verdicts with named fields: Drop (2) for the tenant's ID.
    let map = gateway_policy_map("east");
    let drops = map
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["formatted"]["value"]["action"] == 2)
        .count();
    assert!(
        drops >= 2,
        "no Drop verdicts in east's mc_ingress_policy: {map}"
    );

    let started = Instant::now();
    tb.ok("west", &["label", "namespace", &tenant, "role-"]);
    let restored = first_time(&tb, client, &servers[0].1, true, started);
    wait_for("the unlabelled client to reach them again", T, || {
        all_reach(true)
    });

    // A label nobody had: its new ID must go through west's member, the leader and back to both
    // members before the client's flows carry it; until then they carry none (and the covered
    // Pods refuse them).
    let started = Instant::now();
    label_namespace(&tb, "west", &tenant, &format!("team=t{pid}"));
    let fresh = format!("ns:kubernetes.io/metadata.name={tenant},team=t{pid}&pod:app=client");
    let h = label_hash(&fresh);
    wait_for("the fresh label's LabelIdentity in east", T, || {
        tb.try_json("east", &["get", "labelidentity", &h])
            .ok_or_else(|| format!("no LabelIdentity {h}"))
    });
    let identity_in_east = started.elapsed();
    let fresh_open = first_time(&tb, client, &servers[0].1, true, started);
    tb.ok("west", &["label", "namespace", &tenant, "team-"]);

    label_namespace(&tb, "west", &tenant, "role=tenant");
    wait_for("a tenant to be refused again", T, || all_reach(false));
    let started = Instant::now();
    tb.ok("east", &["delete", "acnp", acnp]);
    let opened = first_time(&tb, client, &servers[0].1, true, started);
    wait_for("the policy's deletion to let the tenant in", T, || {
        all_reach(true)
    });
    println!(
        "stretched policy, until a new connection sees the change (probed about three times a second): \
         west's Namespace labelled role=tenant: refused after {:.2} s (until the label's ID reaches \
         west's agent, the client's flows carry none, which a covered Pod refuses); unlabelled: \
         open after {:.2} s; east's ACNP deleted: open after {:.2} s; a label nobody had: its \
         LabelIdentity in east after {:.2} s, connections open after {:.2} s",
        blocked.as_secs_f64(),
        restored.as_secs_f64(),
        opened.as_secs_f64(),
        identity_in_east.as_secs_f64(),
        fresh_open.as_secs_f64(),
    );
}

/// The other direction across the mixed ClusterSet: the guide's admin policy in west (Flannel,
/// kube-proxy in iptables mode) for a client in east (`ptp`, nftables). A tenant of east is
/// refused by both of west's admin Pods (on its gateway Node and its regular Node, through
/// Flannel's VXLAN) over TCP and UDP; unlabelled, it is let in.
#[test]
fn the_admin_policy_in_the_flannel_member_stops_tenants_of_the_other() {
    let tb = Testbed::from_env();
    let acnp = "drop-tenant-access-to-admin-namespace-w";
    let (_cleanup, tenant, servers) = admin_and_tenant(&tb, "w", acnp, ("west", "east"));
    tb.apply("west", "default", &admin_acnp(acnp, "Drop"));
    let client = ("east", tenant.as_str(), "client");
    wait_for(
        "east's unlabelled client to reach both of west's admin Pods",
        T,
        || all_reach(&tb, client, &servers, true),
    );
    assert_eq!(
        http(&tb, "east", &tenant, "client", &servers[1].1).unwrap(),
        "hello from west/admin-web-b"
    );
    label_namespace(&tb, "east", &tenant, "role=tenant");
    wait_for(
        "east's tenant to be refused by both of west's admin Pods",
        T,
        || all_reach(&tb, client, &servers, false),
    );
    tb.ok("east", &["label", "namespace", &tenant, "role-"]);
    wait_for("east's unlabelled client to be let in again", T, || {
        all_reach(&tb, client, &servers, true)
    });
}

/// The guide's `db-svc-allow-ingress-from-client-only` (an Antrea NetworkPolicy in
/// `prod-us-west`, `Drop` for its `Deny`): from west, `app=client` in `prod-us-west` reaches
/// east's `app=db` Pods, through the multi-cluster Service (ClusterIP endpoints: east's
/// kube-proxy picks the Pod) and Pod to Pod; `app=other` in `prod-us-west` and `app=client` in
/// another Namespace do not, over TCP and UDP; the db Pods are on the gateway Node and the
/// regular Node.
#[test]
fn the_guides_db_policy_lets_only_clients_of_its_namespace_in() {
    let tb = Testbed::from_env();
    join::ensure_joined(&tb);
    let pid = std::process::id();
    // The guide's Namespace, named per run (a rerun must not meet the last one terminating).
    let (prod, elsewhere) = (format!("prod-us-west-{pid}"), format!("elsewhere-{pid}"));
    let _cleanup = Cleanup {
        tb: &tb,
        namespaces: vec![
            ("east", prod.clone()),
            ("west", prod.clone()),
            ("west", elsewhere.clone()),
        ],
        acnps: vec![],
        leader_exports: vec![],
    };
    for (c, ns) in [("east", &prod), ("west", &prod), ("west", &elsewhere)] {
        tb.ensure_namespace(c, ns);
    }
    // db on the gateway Node and on the regular Node; web, which the policy does not cover,
    // beside them behind the Service `backend`.
    let db: Vec<String> = ["node-a", "node-b"]
        .iter()
        .map(|node| {
            pod(
                &tb,
                "east",
                &prod,
                &format!("db-{}", &node[5..]),
                node,
                json!({"app": "db", "tier": "backend"}),
                true,
            )
        })
        .collect();
    let web = pod(
        &tb,
        "east",
        &prod,
        "web",
        "node-b",
        json!({"app": "web", "tier": "backend"}),
        true,
    );
    let service = |name: &str, app: &str| {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\nspec:\n  selector:\n    {app}\n  ports:\n  - {{name: http, port: 8080, protocol: TCP}}\n  - {{name: echo, port: 5353, protocol: UDP}}\n---\napiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceExport\nmetadata:\n  name: {name}\n"
        )
    };
    tb.apply("east", &prod, &service("db", "app: db"));
    tb.apply("east", &prod, &service("backend", "tier: backend"));
    tb.apply(
        "east",
        &prod,
        "apiVersion: crd.antrea.io/v1beta1\nkind: NetworkPolicy\nmetadata:\n  name: db-svc-allow-ingress-from-client-only\nspec:\n  appliedTo:\n  - podSelector:\n      matchLabels:\n        app: db\n  priority: 1\n  tier: application\n  ingress:\n  - action: Allow\n    from:\n    - scope: ClusterSet\n      podSelector:\n        matchLabels:\n          app: client\n  - action: Drop\n",
    );
    for (ns, name, app) in [
        (&prod, "client", "client"),
        (&prod, "other", "other"),
        (&elsewhere, "client", "client"),
    ] {
        pod(&tb, "west", ns, name, "node-b", json!({"app": app}), false);
    }
    let imported = |name: &str| {
        wait_for(&format!("antrea-mc-{name} imported in west"), T, || {
            tb.try_json(
                "west",
                &["get", "service", "-n", &prod, &format!("antrea-mc-{name}")],
            )
            .and_then(|s| s["spec"]["clusterIP"].as_str().map(str::to_owned))
            .ok_or_else(|| "not yet".to_owned())
        })
    };
    let (db_service, backend) = (imported("db"), imported("backend"));
    let mut targets: Vec<String> = db.clone();
    targets.push(db_service.clone());
    let every_endpoint = |name: &str, want: &[&String]| {
        let mut want: Vec<String> = want.iter().map(|w| (*w).clone()).collect();
        want.sort();
        wait_for(
            &format!("antrea-mc-{name}'s endpoints in west to be {want:?}"),
            T,
            || {
                let have = endpoint_ips(&tb, "west", &prod, &format!("antrea-mc-{name}"))?;
                (have == want)
                    .then_some(())
                    .ok_or_else(|| format!("{have:?}"))
            },
        );
    };
    // With endpointIPType ClusterIP (the testbed's), west's imports lead to east's Services
    // and east's kube-proxy picks the Pod at east's gateway; the db Pods are also reached Pod to
    // Pod. With PodIP, west's kube-proxy picks one of east's Pods itself.
    let db_ips: Vec<&String> = db.iter().collect();
    let backend_ips: Vec<&String> = db.iter().chain([&web]).collect();
    enforced(&tb, &prod, &elsewhere, &targets, &backend);
    {
        let _podip = Reconfigured::endpoint_ip_type(&["east", "west"], "PodIP");
        every_endpoint("db", &db_ips);
        every_endpoint("backend", &backend_ips);
        enforced(&tb, &prod, &elsewhere, &[db_service], &backend);
    }
}

/// The guide's db policy as west's Pods meet it: `prod/client` reaches every target over TCP
/// and UDP, `prod/other` and `elsewhere/client` none; through `backend` (two db Pods and web,
/// which the policy does not cover), every connection gets the verdict of the Pod chosen:
/// `other` reaches web only, `client` all three.
fn enforced(tb: &Testbed, prod: &str, elsewhere: &str, targets: &[String], backend: &str) {
    // Allowed: every target, TCP and UDP; through the Service, several connections, so that
    // both db Pods are chosen in turn.
    wait_for("prod-us-west/client to reach every db target", T, || {
        for ip in targets {
            for _ in 0..3 {
                http(tb, "west", prod, "client", ip).map_err(|e| format!("{ip}: {e}"))?;
            }
            if !udp(tb, "west", prod, "client", ip) {
                return Err(format!("UDP to {ip}"));
            }
        }
        Ok(())
    });
    for (ns, who) in [(prod, "other"), (elsewhere, "client")] {
        for ip in targets {
            for _ in 0..2 {
                let got = http(tb, "west", ns, who, ip);
                assert!(got.is_err(), "{ns}/{who} reached {ip} over TCP: {got:?}");
            }
            assert!(
                !udp(tb, "west", ns, who, ip),
                "{ns}/{who} reached {ip} over UDP"
            );
        }
    }
    // `backend`: 20 connections each (all three Pods are chosen, at random, with 1 - (2/3)^20
    // certainty that web is, and more that a db Pod is).
    let answers = |who: &str| -> Vec<Result<String, String>> {
        (0..20)
            .map(|_| http(tb, "west", prod, who, backend))
            .collect()
    };
    let client = answers("client");
    assert!(
        client.iter().all(Result::is_ok),
        "prod/client through backend: {client:?}"
    );
    let other = answers("other");
    let opened: Vec<&String> = other.iter().filter_map(|a| a.as_ref().ok()).collect();
    assert!(
        opened.iter().all(|body| body.ends_with("/web")),
        "prod/other reached a db Pod through backend: {other:?}"
    );
    assert!(
        !opened.is_empty() && opened.len() < other.len(),
        "prod/other through backend: web must answer and the db Pods must not: {other:?}"
    );
}

/// The guide's `acnp-drop-tenant-to-secured-mc-service` in east: a `role=tenant` Pod's flows to
/// the multi-cluster Service `secured-service` (exported by west and by east itself) are dropped
/// at its Node, whichever backend kube-proxy would pick; a Pod without the label reaches it, the
/// tenant reaches another multi-cluster Service, and deleting the policy restores access.
#[test]
fn the_guides_tenant_policy_keeps_tenants_from_the_secured_multicluster_service() {
    secured_service_policy(false);
}

/// The same policy as the guide suggests placing it: in a ResourceExport of kind
/// AntreaClusterNetworkPolicy in the leader, replicated to every member as
/// `antrea-mc-acnp-drop-tenant-to-secured-mc-service`, and enforced there: a `role=tenant` Pod
/// in east and one in west are refused alike; deleting the ResourceExport lifts it in both.
#[test]
fn the_replicated_tenant_policy_keeps_tenants_of_every_member_out() {
    secured_service_policy(true);
}

fn secured_service_policy(replicated: bool) {
    let tb = Testbed::from_env();
    join::ensure_joined(&tb);
    let pid = std::process::id();
    // Each test its own Namespace: the other's may still be terminating.
    let ns = format!("svc{}-{pid}", if replicated { "r" } else { "" });
    let acnp = "acnp-drop-tenant-to-secured-mc-service";
    let export = format!("{acnp}-{pid}");
    let clients: &[&str] = if replicated {
        &["east", "west"]
    } else {
        &["east"]
    };
    let _cleanup = Cleanup {
        tb: &tb,
        namespaces: vec![("east", ns.clone()), ("west", ns.clone())],
        acnps: vec![("east", acnp.to_owned())],
        leader_exports: vec![export.clone()],
    };
    for c in ["east", "west"] {
        tb.ensure_namespace(c, &ns);
    }
    let service = |c: &str, name: &str, app: &str| {
        tb.apply(
            c,
            &ns,
            &format!(
                "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\nspec:\n  selector:\n    app: {app}\n  ports:\n  - {{name: http, port: 8080, protocol: TCP}}\n---\napiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceExport\nmetadata:\n  name: {name}\n"
            ),
        );
    };
    pod(
        &tb,
        "west",
        &ns,
        "secured-w",
        "node-b",
        json!({"app": "secured"}),
        true,
    );
    pod(
        &tb,
        "east",
        &ns,
        "secured-e",
        "node-a",
        json!({"app": "secured"}),
        true,
    );
    pod(
        &tb,
        "west",
        &ns,
        "open-w",
        "node-b",
        json!({"app": "open"}),
        true,
    );
    service("west", "secured-service", "secured");
    service("east", "secured-service", "secured");
    service("west", "open-service", "open");
    for c in clients {
        for (name, labels) in [("tenant", json!({"role": "tenant"})), ("guest", json!({}))] {
            pod(&tb, c, &ns, name, "node-b", labels, false);
        }
    }
    let imported = |c: &str, name: &str| {
        wait_for(&format!("antrea-mc-{name} in {c}"), T, || {
            tb.try_json(
                c,
                &["get", "service", "-n", &ns, &format!("antrea-mc-{name}")],
            )
            .and_then(|s| s["spec"]["clusterIP"].as_str().map(str::to_owned))
            .ok_or_else(|| "not yet".to_owned())
        })
    };
    // Per client cluster: (cluster, secured-service's address there, open-service's).
    let addresses: Vec<(&str, String, String)> = clients
        .iter()
        .map(|c| {
            (
                *c,
                imported(c, "secured-service"),
                imported(c, "open-service"),
            )
        })
        .collect();
    // Both backends answer the guest (east's and west's), before and with the policy.
    let answers = |c: &str, from: &str, ip: &str, tries: usize| -> BTreeSet<String> {
        (0..tries)
            .filter_map(|_| http(&tb, c, &ns, from, ip).ok())
            .collect()
    };
    let both: BTreeSet<String> = [
        "hello from east/secured-e".to_owned(),
        "hello from west/secured-w".to_owned(),
    ]
    .into();
    let everywhere = |what: &str, from: &str, want: &BTreeSet<String>| {
        for (c, secured, _) in &addresses {
            wait_for(&format!("{c}: {what}"), T, || {
                let got = answers(c, from, secured, if want.is_empty() { 4 } else { 8 });
                (&got == want).then_some(()).ok_or(format!("{got:?}"))
            });
        }
    };
    everywhere(
        "both backends of secured-service answering the tenant",
        "tenant",
        &both,
    );
    // The client Nodes link the policy program only while an egress rule covers a Pod of theirs.
    for c in clients {
        wait_policy_link(c, "node-b", false);
    }
    let spec = format!(
        "    priority: 1\n    tier: securityops\n    appliedTo:\n    - podSelector:\n        matchLabels:\n          role: tenant\n    egress:\n    - action: Drop\n      toServices:\n      - name: secured-service\n        namespace: {ns}\n        scope: ClusterSet\n"
    );
    if replicated {
        tb.apply(
            "north",
            join::LEADER_NS,
            &format!(
                "apiVersion: multicluster.crd.antrea.io/v1alpha1\nkind: ResourceExport\nmetadata:\n  name: {export}\nspec:\n  kind: AntreaClusterNetworkPolicy\n  name: {acnp}\n  clusternetworkpolicy:\n{spec}"
            ),
        );
    } else {
        tb.apply(
            "east",
            "default",
            &format!(
                "apiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata:\n  name: {acnp}\nspec:\n{}",
                spec.lines().map(|l| &l[2..]).collect::<Vec<_>>().join("\n") + "\n"
            ),
        );
    }
    everywhere(
        "the tenant refused by secured-service",
        "tenant",
        &BTreeSet::new(),
    );
    everywhere(
        "both backends answering the guest, with the policy",
        "guest",
        &both,
    );
    for c in clients {
        wait_policy_link(c, "node-b", true);
    }
    for (c, _, open) in &addresses {
        assert!(
            http(&tb, c, &ns, "tenant", open).is_ok(),
            "{c}: the tenant must reach another multi-cluster Service"
        );
    }
    if replicated {
        for c in clients {
            let (column, _) = mc_integration::strait_column(&tb, c, &format!("antrea-mc-{acnp}"));
            assert_eq!(
                column, "Enforced",
                "{c}: the replicated policy's STRAIT column"
            );
        }
        tb.delete("north", &["resourceexport", "-n", join::LEADER_NS, &export]);
    } else {
        tb.ok("east", &["delete", "acnp", acnp]);
    }
    everywhere("the tenant let in again", "tenant", &both);
    for c in clients {
        wait_policy_link(c, "node-b", false);
    }
}

/// A `Reject` rule answers: west's tenant client, refused by east's admin Pods (on the gateway
/// Node and the regular Node), gets a TCP RST at once (socat: "Connection refused", not a
/// timeout) and, over UDP, an ICMP "host administratively prohibited" (socat: "No route to
/// host"), both from the address it called. `kubectl get acnp` says in its STRAIT column that
/// Strait enforces this policy.
#[test]
fn a_reject_rule_answers_and_kubectl_says_strait_enforces_it() {
    let tb = Testbed::from_env();
    let acnp = "reject-tenants";
    let (_cleanup, tenant, servers) = admin_and_tenant(&tb, "r", acnp, ("east", "west"));
    label_namespace(&tb, "west", &tenant, "role=tenant");
    wait_for("the tenant client to reach both admin Pods", T, || {
        servers
            .iter()
            .try_for_each(|(_, ip)| http(&tb, "west", &tenant, "client", ip).map(drop))
    });
    tb.apply("east", "default", &admin_acnp(acnp, "Reject"));
    // The client's socat fails with the error the answer makes its socket report (a timeout
    // would say nothing of the kind).
    let answered = |what: &str, command: &str, error: &str| {
        wait_for(what, T, || {
            let out = pods::exec(&tb, "west", &tenant, "client", &["sh", "-c", command]);
            let err = String::from_utf8_lossy(&out.stderr).trim().to_owned();
            if err.contains(error) && !out.status.success() {
                Ok(())
            } else {
                Err(format!("socat exit {:?}: {err:?}", out.status.code()))
            }
        });
    };
    for (_, ip) in &servers {
        // TCP: refused (a RST).
        answered(
            &format!("a RST from {ip}"),
            &format!("socat -T2 - TCP:{ip}:8080,connect-timeout=2 </dev/null"),
            "Connection refused",
        );
        // UDP: the ICMP error reaches the client's socket, which reports it.
        answered(
            &format!("an ICMP error from {ip}"),
            &format!("echo policy | socat -T2 - UDP:{ip}:5353"),
            "No route to host",
        );
    }

    let (column, message) = wait_for("the STRAIT column of the Reject policy", T, || {
        let (column, message) = mc_integration::strait_column(&tb, "east", acnp);
        (column == "Enforced")
            .then(|| (column.clone(), message.clone()))
            .ok_or(format!("{column:?}: {message:?}"))
    });
    assert_eq!(
        message, "Strait enforces ingress[0] on traffic between clusters",
        "{column}"
    );
}
