//! `mcctl verify`: traffic across the members named by kubeconfig contexts, end to end, the way
//! an application's would go. In a namespace of its own in every member: a server (Deployment,
//! Service, ServiceExport); once every other member imports it, client Pods on the gateway Node
//! and on a regular Node of each member fetch every other member's server by the imported
//! Service's name (`antrea-mc-<name>`), by its `clusterset.local` name, Pod-to-Pod where both
//! members route Pod CIDRs, and a transfer large enough to fill full-size packets (MTU). The
//! results come from the clients' logs (no exec); a failure names the first hop that fails. The
//! namespaces are deleted at the end, also on an error, Ctrl-C or SIGTERM.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Namespace, Pod, Service},
};
use kube::{
    Api,
    api::{DeleteParams, ListParams, LogParams, PostParams},
};
use mc_api::{
    mcs::{ServiceExport, ServiceImport},
    names::IMPORTED_PREFIX,
};
use serde_json::json;

use crate::{
    member::Member,
    output::{Format, table},
};

/// The label on everything verify creates.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "mcctl-verify");
/// The server's port (busybox httpd) and the size of the transfer.
const SERVER_PORT: u16 = 8080;
const TRANSFER_BYTES: usize = 4 << 20;
/// The prefix of the clients' result lines.
const MARK: &str = "STRAIT-VERIFY";

#[derive(clap::Args)]
pub struct VerifyArgs {
    /// The kubeconfig contexts of the members to verify between (at least two; `--kubeconfig`
    /// may list several files separated by `:`, as KUBECONFIG does).
    #[arg(required = true, num_args = 2..)]
    pub contexts: Vec<String>,
    /// The image of the server and client Pods: a busybox (httpd, wget or curl, awk).
    /// Give a mirror's copy where Nodes cannot pull from Docker Hub.
    #[arg(long, default_value = "docker.io/library/busybox:1.37")]
    pub image: String,
    /// Its pull policy (`Never` for an image preloaded on the Nodes).
    #[arg(long, default_value = "IfNotPresent")]
    pub image_pull_policy: String,
    /// Seconds to wait for the servers, the imports and the clients, each.
    #[arg(long, default_value_t = 120)]
    pub timeout: u64,
    /// Keep the namespaces (to look at what failed); delete them with `kubectl delete ns`.
    #[arg(long)]
    pub keep: bool,
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: Format,
}

/// One check's outcome.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Outcome {
    pub from: String,
    pub node: String,
    pub role: &'static str,
    pub to: String,
    pub path: String,
    pub result: String,
    pub millis: Option<u64>,
    pub detail: String,
}

impl Outcome {
    fn ok(&self) -> bool {
        self.result == "ok" || self.result == "skipped"
    }
}

/// A server: one per member.
struct Server {
    member: usize,
    name: String,
    pod_ip: Option<String>,
}

fn server_name(id: &str) -> String {
    let mut s: String = id
        .to_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    s.truncate(40);
    format!("verify-{}", s.trim_matches('-'))
}

pub async fn run(members: Vec<Member>, args: &VerifyArgs) -> anyhow::Result<bool> {
    let ns = format!(
        "strait-verify-{:06x}",
        (std::process::id() as u64 ^ now_nanos()) & 0xff_ffff
    );
    for m in &members {
        if m.gateway.is_none() {
            bail!(
                "context {}: cluster {} has no Gateway yet (no Ready Node annotated multicluster.antrea.io/gateway=true): nothing can cross",
                m.context,
                m.id
            );
        }
    }
    eprintln!(
        "verifying between {} in namespace {ns}",
        members
            .iter()
            .map(|m| format!("{} ({})", m.id, m.context))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let body = verify(&members, &ns, args);
    tokio::pin!(body);
    let result = tokio::select! {
        r = &mut body => r,
        s = interrupted() => Err(anyhow::anyhow!("interrupted ({s}): cleaning up")),
    };
    if args.keep {
        eprintln!("kept namespace {ns} in every member (--keep)");
    } else if let Err(e) = cleanup(&members, &ns).await {
        eprintln!("cleanup: {e:#}");
        return Err(e);
    }
    let outcomes = result?;
    let failed = outcomes.iter().any(|o| !o.ok());
    match args.output {
        Format::Table => {
            let rows: Vec<Vec<String>> = outcomes
                .iter()
                .map(|o| {
                    vec![
                        format!("{}/{} ({})", o.from, o.node, o.role),
                        o.to.clone(),
                        o.path.clone(),
                        o.result.clone(),
                        o.millis.map_or("-".into(), |m| format!("{m} ms")),
                        o.detail.clone(),
                    ]
                })
                .collect();
            print!(
                "{}",
                table(&["FROM", "TO", "PATH", "RESULT", "TIME", "DETAIL"], &rows)
            );
        }
        _ => {
            let hops = first_failing_hops(&members, &outcomes);
            println!(
                "{}",
                serde_json::to_string_pretty(&json!({
                    "namespace": ns,
                    "passed": !failed,
                    "checks": outcomes,
                    "firstFailingHops": hops,
                }))?
            );
            return Ok(!failed);
        }
    }
    if failed {
        for hop in first_failing_hops(&members, &outcomes) {
            println!("first failing hop: {hop}");
        }
        println!("verify FAILED");
    } else {
        println!("verify passed: {} checks", outcomes.len());
    }
    Ok(!failed)
}

fn now_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Ctrl-C or SIGTERM.
async fn interrupted() -> &'static str {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return "SIGINT";
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "SIGINT",
        _ = term.recv() => "SIGTERM",
    }
}

async fn verify(members: &[Member], ns: &str, args: &VerifyArgs) -> anyhow::Result<Vec<Outcome>> {
    let timeout = Duration::from_secs(args.timeout);
    let mut servers = Vec::new();
    for (i, m) in members.iter().enumerate() {
        let name = server_name(&m.id);
        create_server(m, ns, &name, args)
            .await
            .with_context(|| format!("context {}: creating the server", m.context))?;
        servers.push(Server {
            member: i,
            name,
            pod_ip: None,
        });
    }
    for s in &mut servers {
        let m = &members[s.member];
        s.pod_ip = Some(wait_server(m, ns, &s.name, timeout).await?);
    }
    // Every member's import of every other member's server.
    let mut missing: BTreeMap<(usize, usize), String> = BTreeMap::new();
    let deadline = Instant::now() + timeout;
    for (ci, c) in members.iter().enumerate() {
        for s in servers.iter().filter(|s| s.member != ci) {
            if let Err(why) = wait_import(c, ns, &s.name, deadline).await {
                missing.insert((ci, s.member), why);
            }
        }
    }
    // Clients on the gateway and on a regular Node of every member.
    let mut clients = Vec::new();
    for (ci, c) in members.iter().enumerate() {
        let targets: Vec<Target> = servers
            .iter()
            .filter(|s| s.member != ci && !missing.contains_key(&(ci, s.member)))
            .map(|s| {
                let t = &members[s.member];
                let pod_to_pod = c.agent_flag("enablePodToPodConnectivity") == Some(true)
                    && t.agent_flag("enablePodToPodConnectivity") == Some(true);
                // Without an agent config to read, say so rather than "off".
                let unread: Vec<&str> = [c, t]
                    .iter()
                    .filter(|m| m.agent_config.is_none())
                    .map(|m| m.id.as_str())
                    .collect();
                let pod_skip = if unread.is_empty() {
                    "Pod-to-Pod is off in one of the two members".to_owned()
                } else {
                    format!(
                        "no agent config ({}) found in {}: Pod-to-Pod not checked",
                        crate::member::AGENT_CONFIG,
                        unread.join(", ")
                    )
                };
                Target {
                    id: t.id.clone(),
                    service: s.name.clone(),
                    pod_ip: pod_to_pod.then(|| s.pod_ip.clone()).flatten(),
                    pod_skip,
                }
            })
            .collect();
        let nodes = [("gateway", c.gateway_node()), ("node", c.regular_node())];
        for (role, node) in nodes {
            let Some(node) = node else {
                continue;
            };
            let name = format!("client-{role}");
            create_client(c, ns, &name, &node, &targets, args)
                .await
                .with_context(|| format!("context {}: creating the client on {node}", c.context))?;
            clients.push((ci, role, node, name));
        }
    }
    let mut outcomes = Vec::new();
    for ((ci, ti), why) in &missing {
        for (_, role, node, _) in clients.iter().filter(|(c, ..)| c == ci) {
            outcomes.push(Outcome {
                from: members[*ci].id.clone(),
                node: node.clone(),
                role,
                to: members[*ti].id.clone(),
                path: "import".into(),
                result: "FAIL".into(),
                millis: None,
                detail: why.clone(),
            });
        }
    }
    let deadline = Instant::now() + timeout;
    for (ci, role, node, name) in &clients {
        let c = &members[*ci];
        let mut lines = match wait_client(c, ns, name, deadline).await {
            Ok(log) => parse(&log),
            Err(why) => {
                outcomes.push(Outcome {
                    from: c.id.clone(),
                    node: node.clone(),
                    role,
                    to: "-".into(),
                    path: "client".into(),
                    result: "FAIL".into(),
                    millis: None,
                    detail: why,
                });
                continue;
            }
        };
        for l in &mut lines {
            l.from = c.id.clone();
            l.node = node.clone();
            l.role = role;
        }
        outcomes.extend(lines);
    }
    outcomes.sort_by(|a, b| (&a.from, a.role, &a.to).cmp(&(&b.from, b.role, &b.to)));
    Ok(outcomes)
}

fn labels(app: &str) -> serde_json::Value {
    json!({ MANAGED_BY.0: MANAGED_BY.1, "app": app })
}

async fn create_server(m: &Member, ns: &str, name: &str, args: &VerifyArgs) -> anyhow::Result<()> {
    let client = m.cluster.client.clone();
    let namespace: Namespace = serde_json::from_value(json!({
        "metadata": {"name": ns, "labels": {MANAGED_BY.0: MANAGED_BY.1}},
    }))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .context("creating the namespace")?;
    let script = format!(
        "mkdir -p /tmp/www && echo 'strait-verify {id}' > /tmp/www/index.html && \
         head -c {TRANSFER_BYTES} /dev/zero > /tmp/www/transfer && exec httpd -f -p {SERVER_PORT} -h /tmp/www",
        id = m.id
    );
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns, "labels": labels(name)},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": labels(name)},
                "spec": {
                    "automountServiceAccountToken": false,
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{
                        "name": "server",
                        "image": args.image,
                        "imagePullPolicy": args.image_pull_policy,
                        "command": ["/bin/sh", "-c", script],
                        "ports": [{"containerPort": SERVER_PORT}],
                        "readinessProbe": {"tcpSocket": {"port": SERVER_PORT}, "periodSeconds": 1},
                    }],
                },
            },
        },
    }))?;
    Api::<Deployment>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &deployment)
        .await
        .context("creating the server Deployment")?;
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns, "labels": labels(name)},
        "spec": {
            "selector": {"app": name},
            "ports": [{"name": "http", "port": 80, "targetPort": SERVER_PORT, "protocol": "TCP"}],
        },
    }))?;
    Api::<Service>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &service)
        .await
        .context("creating the server Service")?;
    let export: ServiceExport = serde_json::from_value(json!({
        "apiVersion": "multicluster.x-k8s.io/v1alpha1",
        "kind": "ServiceExport",
        "metadata": {"name": name, "namespace": ns, "labels": {MANAGED_BY.0: MANAGED_BY.1}},
    }))?;
    Api::<ServiceExport>::namespaced(client, ns)
        .create(&PostParams::default(), &export)
        .await
        .context("creating the ServiceExport")?;
    Ok(())
}

/// Waits until the server's Pod is Ready; its IP.
async fn wait_server(
    m: &Member,
    ns: &str,
    name: &str,
    timeout: Duration,
) -> anyhow::Result<String> {
    let pods: Api<Pod> = Api::namespaced(m.cluster.client.clone(), ns);
    let lp = ListParams::default().labels(&format!("app={name}"));
    let deadline = Instant::now() + timeout;
    loop {
        let list = pods.list(&lp).await.map(|l| l.items).unwrap_or_default();
        if let Some(ip) = list.iter().find(|p| pod_ready(p)).and_then(pod_ip) {
            return Ok(ip);
        }
        if Instant::now() > deadline {
            bail!(
                "context {}: the server Pod did not become Ready within {} s: {}",
                m.context,
                timeout.as_secs(),
                list.first().map_or("no Pod was created".into(), pod_state)
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits until `c` imports the server: Service `antrea-mc-<name>` with a ClusterIP and
/// endpoints, ServiceImport `<name>` with its IP (what DNS answers). Why not, else.
async fn wait_import(c: &Member, ns: &str, name: &str, deadline: Instant) -> Result<(), String> {
    let client = c.cluster.client.clone();
    let imported = format!("{IMPORTED_PREFIX}{name}");
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    let imports: Api<ServiceImport> = Api::namespaced(client, ns);
    loop {
        let svc = services.get_opt(&imported).await.ok().flatten();
        let si = imports.get_opt(name).await.ok().flatten();
        let endpoints = crate::member::ready_endpoints(&c.cluster.client, ns, &imported).await;
        let why = match (&svc, &si) {
            (None, _) => format!(
                "Service {imported} not imported into {} (the leader's ResourceExports and ResourceImports: mcctl get resourceexport/resourceimport in the leader)",
                c.id
            ),
            (Some(_), _) if endpoints == 0 => {
                format!("Service {imported} in {} has no ready endpoints", c.id)
            }
            (Some(_), None) => format!("no ServiceImport {name} in {}", c.id),
            (Some(_), Some(si)) if si.spec.ips.is_empty() => {
                format!("ServiceImport {name} in {} has no IP yet", c.id)
            }
            _ => return Ok(()),
        };
        if Instant::now() > deadline {
            return Err(why);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// What one client checks in another member.
struct Target {
    id: String,
    service: String,
    pod_ip: Option<String>,
    /// Why Pod-to-Pod is not checked, when `pod_ip` is `None`.
    pod_skip: String,
}

/// The client's script: busybox sh. Each check retries for up to 12 s; one line per check:
/// `STRAIT-VERIFY <target> <path> ok|FAIL <ms> <detail>`.
fn client_script(ns: &str, targets: &[Target]) -> String {
    let mut s = format!(
        r#"ms() {{ awk '{{printf "%d", $1 * 1000}}' /proc/uptime; }}
mtu=$(cat /sys/class/net/eth0/mtu 2>/dev/null || echo ?)
# fetch SECONDS URL: the body on stdout, errors on stderr; curl where the image has it.
if command -v curl >/dev/null 2>&1; then
  fetch() {{ curl -sS -m "$1" -o - "$2"; }}
else
  fetch() {{ wget -q -T "$1" -O - "$2"; }}
fi
# check TARGET PATH URL EXPECT: EXPECT is the body's first line, or a byte count.
check() {{
  start=$(ms); end=$((start + 12000)); out=""
  while :; do
    t0=$(ms)
    case "$4" in
      [0-9]*) n=$(fetch 14 "$3" 2>/tmp/err | wc -c | tr -d ' '); out="$n bytes $(head -c 200 /tmp/err)"; [ "$n" = "$4" ] && ok=1 || ok=0 ;;
      *) out=$(fetch 5 "$3" 2>&1 | head -c 200); [ "$out" = "$4" ] && ok=1 || ok=0 ;;
    esac
    t1=$(ms)
    if [ $ok = 1 ]; then echo "{MARK} $1 $2 ok $((t1 - t0)) $(echo $out | tr '\n' ' ')"; return 0; fi
    [ $t1 -ge $end ] && break
    sleep 1
  done
  echo "{MARK} $1 $2 FAIL $((t1 - start)) $(echo $out | tr '\n' ' ')"
  return 1
}}
echo "{MARK}-MTU $mtu"
"#
    );
    for t in targets {
        let body = format!("strait-verify {}", t.id);
        let id = &t.id;
        let svc = &t.service;
        s.push_str(&format!(
            "if check {id} service http://{IMPORTED_PREFIX}{svc}/ '{body}'; then\n  \
             check {id} transfer http://{IMPORTED_PREFIX}{svc}/transfer {TRANSFER_BYTES}\n\
             else\n  echo \"{MARK} {id} transfer skipped 0 the service check failed\"\nfi\n\
             check {id} dns http://{svc}.{ns}.svc.clusterset.local/ '{body}'\n"
        ));
        match &t.pod_ip {
            Some(ip) => s.push_str(&format!(
                "check {id} pod http://{ip}:{SERVER_PORT}/ '{body}'\n"
            )),
            None => s.push_str(&format!(
                "echo \"{MARK} {id} pod skipped 0 {}\"\n",
                t.pod_skip
            )),
        }
    }
    s.push_str("echo \"STRAIT-VERIFY-DONE\"\n");
    s
}

async fn create_client(
    c: &Member,
    ns: &str,
    name: &str,
    node: &str,
    targets: &[Target],
    args: &VerifyArgs,
) -> anyhow::Result<()> {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns, "labels": labels(name)},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 1,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{
                "name": "client",
                "image": args.image,
                "imagePullPolicy": args.image_pull_policy,
                "command": ["/bin/sh", "-c", client_script(ns, targets)],
            }],
        },
    }))?;
    Api::<Pod>::namespaced(c.cluster.client.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await?;
    Ok(())
}

/// Waits until the client has run; its log.
async fn wait_client(
    c: &Member,
    ns: &str,
    name: &str,
    deadline: Instant,
) -> Result<String, String> {
    let pods: Api<Pod> = Api::namespaced(c.cluster.client.clone(), ns);
    loop {
        let pod = pods.get_opt(name).await.ok().flatten();
        let phase = pod
            .as_ref()
            .and_then(|p| p.status.as_ref()?.phase.clone())
            .unwrap_or_default();
        if phase == "Succeeded" || phase == "Failed" {
            return pods
                .logs(name, &LogParams::default())
                .await
                .map_err(|e| format!("reading the client's log: {e}"));
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the client Pod did not finish in time: {}",
                pod.as_ref().map_or("gone".into(), pod_state)
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The client's result lines; a client that stopped early says so.
fn parse(log: &str) -> Vec<Outcome> {
    let mut out = Vec::new();
    let mut mtu = String::new();
    for line in log.lines() {
        if let Some(m) = line.strip_prefix(&format!("{MARK}-MTU ")) {
            mtu = m.trim().to_owned();
            continue;
        }
        let Some(rest) = line.strip_prefix(&format!("{MARK} ")) else {
            continue;
        };
        let mut f = rest.splitn(5, ' ');
        let (Some(to), Some(path), Some(result), Some(ms)) =
            (f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        let mut detail = f.next().unwrap_or("").trim().to_owned();
        if path == "transfer" && result != "skipped" {
            detail = format!("{detail} (Pod MTU {mtu})");
        }
        out.push(Outcome {
            from: String::new(),
            node: String::new(),
            role: "",
            to: to.to_owned(),
            path: path.to_owned(),
            result: result.to_owned(),
            millis: (result != "skipped").then(|| ms.parse().ok()).flatten(),
            detail,
        });
    }
    if !log.contains("STRAIT-VERIFY-DONE") {
        out.push(Outcome {
            from: String::new(),
            node: String::new(),
            role: "",
            to: "-".into(),
            path: "client".into(),
            result: "FAIL".into(),
            millis: None,
            detail: format!(
                "the client stopped before its last check: {}",
                log.lines().last().unwrap_or("no output")
            ),
        });
    }
    out
}

/// Per (from, to) pair that failed, the first hop that fails, from what the checks say and
/// the members' own reports (the gateways' `TunnelUp`).
pub fn first_failing_hops(members: &[Member], outcomes: &[Outcome]) -> Vec<String> {
    let by_id = |id: &str| members.iter().find(|m| m.id == id);
    let mut pairs: BTreeMap<(String, String), Vec<&Outcome>> = BTreeMap::new();
    for o in outcomes {
        pairs
            .entry((o.from.clone(), o.to.clone()))
            .or_default()
            .push(o);
    }
    let mut hops = Vec::new();
    for ((from, to), checks) in pairs {
        if checks.iter().all(|o| o.ok()) {
            continue;
        }
        let failed = |path: &str, role: Option<&str>| {
            checks
                .iter()
                .any(|o| o.path == path && !o.ok() && role.is_none_or(|r| o.role == r))
        };
        let passed = |path: &str, role: Option<&str>| {
            checks
                .iter()
                .any(|o| o.path == path && o.result == "ok" && role.is_none_or(|r| o.role == r))
        };
        let (Some(a), b) = (by_id(&from), by_id(&to)) else {
            continue;
        };
        let hop = if let Some(o) = checks
            .iter()
            .find(|o| o.path == "import" || o.path == "client")
        {
            format!("{from}: {}", o.detail)
        } else if let Some(tunnel) = b.and_then(|b| tunnel_down(a, b).or_else(|| tunnel_down(b, a)))
        {
            tunnel
        } else if passed("service", Some("gateway")) && failed("service", Some("node")) {
            format!(
                "inside {from}: from Node {} to its gateway {} (the tunnel port, UDP {}, must pass between a cluster's Nodes; `mc-agent counters` on both: tx_to_gateway, rx_from_node)",
                checks
                    .iter()
                    .find(|o| o.role == "node")
                    .map_or("?", |o| o.node.as_str()),
                a.gateway_node().unwrap_or_default(),
                a.agent_str("tunnelPort").unwrap_or_else(|| "6081".into())
            )
        } else if passed("service", None) && failed("transfer", None) {
            format!(
                "{from} -> {to}: small requests cross, the {TRANSFER_BYTES}-byte transfer does not: the path MTU between the gateways is smaller than the tunnel's (set tunnelMTU in the agents' config to the path's, or lower the uplinks' MTU; `mcctl diagnose`)"
            )
        } else if passed("service", None) && failed("dns", None) {
            format!(
                "{from}: the clusterset.local name does not resolve or answer while the Service does: CoreDNS's multicluster zone (docs/operating.md, DNS)"
            )
        } else if passed("service", None) && failed("pod", None) {
            format!(
                "{from} -> {to}: Pod-to-Pod does not cross while Services do: the Pod CIDRs (both members' enablePodToPodConnectivity, the announced podCIDRs; `mcctl diagnose`)"
            )
        } else {
            format!(
                "{from} -> {to}: the imported Service does not answer while the gateways answer each other's probes: from {to}'s gateway to its server (`mc-agent counters` on {from}'s gateway: hairpin_snat, drop_*; on {to}'s gateway: rx_from_remote, drop_*)"
            )
        };
        hops.push(hop);
    }
    hops
}

/// `a`'s gateway's verdict on the tunnel to `b`'s, when it is down.
fn tunnel_down(a: &Member, b: &Member) -> Option<String> {
    let info = a.info_of(&b.id)?;
    let c = info
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_.as_deref() == Some("TunnelUp"))?;
    if c.status.as_deref() != Some("False") {
        return None;
    }
    Some(format!(
        "the tunnel between the gateways: {} gateway {} ({}) -> {} gateway {}: TunnelUp False {} since {}: {}",
        a.id,
        a.gateway_node().unwrap_or_default(),
        a.gateway_ip().unwrap_or_default(),
        b.id,
        match b.gateway_node() {
            Some(node) => format!(
                "{node} ({})",
                info.spec
                    .0
                    .gateway_infos
                    .first()
                    .and_then(|g| g.gateway_ip.clone())
                    .unwrap_or_default()
            ),
            None => String::new(),
        },
        c.reason.as_deref().unwrap_or_default(),
        c.last_transition_time
            .as_ref()
            .map_or("?".into(), |t| t.0.to_string()),
        c.message.as_deref().unwrap_or_default()
    ))
}

fn pod_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

fn pod_ip(p: &Pod) -> Option<String> {
    p.status.as_ref()?.pod_ip.clone()
}

/// Why a Pod is not running: its phase and its container's waiting reason.
fn pod_state(p: &Pod) -> String {
    let status = p.status.as_ref();
    let phase = status.and_then(|s| s.phase.clone()).unwrap_or_default();
    let waiting = status
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| c.state.as_ref()?.waiting.as_ref())
        .map(|w| {
            format!(
                "{} {}",
                w.reason.clone().unwrap_or_default(),
                w.message.clone().unwrap_or_default()
            )
        })
        .next();
    let scheduled = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        .map(|c| c.message.clone().unwrap_or_default());
    format!(
        "phase {phase}{}{}",
        waiting.map_or(String::new(), |w| format!(", {}", w.trim())),
        scheduled.map_or(String::new(), |m| format!(", not scheduled: {m}"))
    )
}

/// Deletes the namespace in every member and waits until it is gone (its ServiceExports
/// first, so the members withdraw the exports while their controllers can still see them).
async fn cleanup(members: &[Member], ns: &str) -> anyhow::Result<()> {
    for m in members {
        let exports: Api<ServiceExport> = Api::namespaced(m.cluster.client.clone(), ns);
        let _ = exports
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await;
        match Api::<Namespace>::all(m.cluster.client.clone())
            .delete(ns, &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                return Err(e).context(format!("context {}: deleting namespace {ns}", m.context));
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(90);
    for m in members {
        let nss: Api<Namespace> = Api::all(m.cluster.client.clone());
        loop {
            match nss.get_opt(ns).await {
                Ok(None) => break,
                Ok(Some(_)) | Err(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(500)).await
                }
                Ok(Some(n)) => bail!(
                    "context {}: namespace {ns} is still there after 90 s ({:?})",
                    m.context,
                    n.status.and_then(|s| s.conditions)
                ),
                Err(e) => return Err(e).context(format!("context {}: namespace {ns}", m.context)),
            }
        }
    }
    eprintln!("removed namespace {ns} from every member");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_are_dns_labels_of_the_cluster_id() {
        assert_eq!(server_name("test-cluster-east"), "verify-test-cluster-east");
        assert_eq!(server_name("Cluster.A_1"), "verify-cluster-a-1");
        let long = server_name(&"x".repeat(100));
        assert!(long.len() + IMPORTED_PREFIX.len() <= 63, "{long}");
    }

    #[test]
    fn a_client_log_becomes_one_outcome_per_check_and_a_short_log_fails() {
        let log = "STRAIT-VERIFY-MTU 1464\n\
                   STRAIT-VERIFY c2 service ok 12 strait-verify c2\n\
                   STRAIT-VERIFY c2 transfer FAIL 12000 0 bytes wget: download timed out\n\
                   STRAIT-VERIFY c2 pod skipped 0 Pod-to-Pod is off in one of the two members\n";
        let out = parse(log);
        assert_eq!(out.len(), 4, "{out:?}");
        assert_eq!(
            (out[0].path.as_str(), out[0].result.as_str(), out[0].millis),
            ("service", "ok", Some(12))
        );
        assert!(
            out[1].detail.contains("(Pod MTU 1464)"),
            "{}",
            out[1].detail
        );
        assert!(!out[1].ok());
        assert!(out[2].ok() && out[2].millis.is_none());
        assert_eq!(out[3].path, "client");
        assert!(!out[3].ok());
        let done = format!("{log}STRAIT-VERIFY-DONE\n");
        assert_eq!(parse(&done).len(), 3);
    }

    #[test]
    fn the_client_script_checks_every_path_of_every_target() {
        let s = client_script(
            "strait-verify-1",
            &[Target {
                id: "c2".into(),
                service: "verify-c2".into(),
                pod_ip: Some("10.1.2.3".into()),
                pod_skip: String::new(),
            }],
        );
        for want in [
            "check c2 service http://antrea-mc-verify-c2/ 'strait-verify c2'",
            "check c2 transfer http://antrea-mc-verify-c2/transfer 4194304",
            "check c2 dns http://verify-c2.strait-verify-1.svc.clusterset.local/",
            "check c2 pod http://10.1.2.3:8080/",
        ] {
            assert!(s.contains(want), "{want} not in\n{s}");
        }
    }
}
