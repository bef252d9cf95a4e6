//! `mcctl diagnose`: read-only checks of what makes traffic cross, per member, each with a
//! verdict and a hint. It reads objects (Deployments, DaemonSets, Nodes, the Gateway, the
//! ClusterSet and ClusterInfoImports, webhook configurations, EndpointSlices) and each agent's
//! `/metrics` and `/readyz` through the API server's Pod proxy; it writes nothing. The agents'
//! `strait_agent_info` says what each Node runs (kernel, attach mode, uplink and MTU, tunnel
//! MTU, kube-proxy's mode); the gateways' probes (`TunnelUp`, `strait_tunnel_*`) say whether
//! the tunnel port passes between the gateways.

use std::collections::BTreeMap;

use k8s_openapi::api::{
    admissionregistration::v1::{
        MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
    },
    apps::v1::{DaemonSet, Deployment},
    core::v1::Pod,
};
use kube::{Api, ResourceExt as _, api::ListParams};
use mc_api::{names::annotations, net::Prefix};
use serde::Serialize;

use crate::{
    member::{Member, node_ready},
    output::{Format, table},
};

#[derive(clap::Args)]
pub struct DiagnoseArgs {
    /// The kubeconfig contexts of the members to check (default: the current context;
    /// `--kubeconfig` may list several files separated by `:`).
    pub contexts: Vec<String>,
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: Format,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Ok,
    Warn,
    Fail,
}

impl Verdict {
    fn as_str(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Warn => "warn",
            Verdict::Fail => "FAIL",
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Check {
    pub cluster: String,
    pub check: &'static str,
    pub verdict: Verdict,
    pub detail: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub hint: String,
}

/// One series of an agent's `/metrics`.
#[derive(Clone, Debug)]
struct Series {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Prometheus text: `name{k="v",...} value` lines.
fn parse_metrics(text: &str) -> Vec<Series> {
    let mut out = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let Some((head, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let (name, labels) = match head.split_once('{') {
            Some((n, rest)) => (n, rest.trim_end_matches('}')),
            None => (head, ""),
        };
        let mut map = BTreeMap::new();
        let mut rest = labels;
        while let Some((k, after)) = rest.split_once("=\"") {
            let Some(end) = after.find('"') else { break };
            map.insert(
                k.trim_start_matches(',').to_owned(),
                after[..end].to_owned(),
            );
            rest = &after[end + 1..];
        }
        out.push(Series {
            name: name.to_owned(),
            labels: map,
            value,
        });
    }
    out
}

/// An agent Pod and what it says.
struct Agent {
    node: String,
    ready: bool,
    readyz: Option<String>,
    metrics: Vec<Series>,
}

impl Agent {
    fn info(&self, label: &str) -> Option<&str> {
        self.metrics
            .iter()
            .find(|s| s.name == "strait_agent_info")?
            .labels
            .get(label)
            .map(String::as_str)
    }

    fn counter(&self, reason: &str) -> u64 {
        self.metrics
            .iter()
            .filter(|s| {
                s.name == "strait_dataplane_packets_total"
                    && s.labels.get("reason").map(String::as_str) == Some(reason)
            })
            .map(|s| s.value as u64)
            .sum()
    }

    fn value(&self, name: &str, label: &str, value: &str) -> Option<f64> {
        self.metrics
            .iter()
            .find(|s| s.name == name && s.labels.get(label).map(String::as_str) == Some(value))
            .map(|s| s.value)
    }
}

/// Through the API server: `GET /api/v1/namespaces/<ns>/pods/<pod>:<port>/proxy/<path>`.
async fn pod_proxy(
    client: &kube::Client,
    pod: &Pod,
    port: i32,
    path: &str,
) -> Result<String, String> {
    let uri = format!(
        "/api/v1/namespaces/{}/pods/{}:{port}/proxy/{path}",
        pod.namespace().unwrap_or_default(),
        pod.name_any()
    );
    let req = http::Request::get(uri)
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    match client.request_text(req).await {
        Ok(t) => Ok(t),
        // /readyz answers 503 with the reason.
        Err(kube::Error::Api(s)) => Err(s.message),
        Err(e) => Err(e.to_string()),
    }
}

fn image_version(image: &str) -> String {
    image
        .rsplit_once(':')
        .filter(|(_, tag)| !tag.contains('/'))
        .map_or("latest".into(), |(_, tag)| tag.to_owned())
}

pub async fn run(members: &[Member], args: &DiagnoseArgs) -> anyhow::Result<bool> {
    let mut checks = Vec::new();
    for m in members {
        checks.extend(member_checks(m, members).await);
    }
    let failed = checks.iter().any(|c| c.verdict == Verdict::Fail);
    match args.output {
        Format::Table => {
            let rows: Vec<Vec<String>> = checks
                .iter()
                .map(|c| {
                    vec![
                        c.cluster.clone(),
                        c.check.to_owned(),
                        c.verdict.as_str().to_owned(),
                        c.detail.clone(),
                    ]
                })
                .collect();
            print!(
                "{}",
                table(&["CLUSTER", "CHECK", "VERDICT", "DETAIL"], &rows)
            );
            let hints: Vec<&Check> = checks
                .iter()
                .filter(|c| c.verdict != Verdict::Ok && !c.hint.is_empty())
                .collect();
            if !hints.is_empty() {
                println!();
                for c in hints {
                    println!("{} {}: {}", c.cluster, c.check, c.hint);
                }
            }
        }
        _ => println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "passed": !failed,
                "checks": checks,
            }))?
        ),
    }
    Ok(!failed)
}

/// What one member's checks read: its controllers (name, image, ready replicas), its agent
/// DaemonSets and each agent Pod's `/readyz` and `/metrics`.
struct Facts {
    controllers: Vec<(String, String, i32)>,
    agent_sets: Vec<DaemonSet>,
    agents: Vec<Agent>,
}

/// The containers' images of a Pod template that contain `what`.
fn images(spec: Option<&k8s_openapi::api::core::v1::PodSpec>, what: &str) -> Vec<String> {
    spec.map(|s| s.containers.iter())
        .into_iter()
        .flatten()
        .filter_map(|c| c.image.clone())
        .filter(|i| i.contains(what))
        .collect()
}

async fn facts(m: &Member) -> Facts {
    let client = &m.cluster.client;
    let deployments = Api::<Deployment>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let daemonsets = Api::<DaemonSet>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let controllers: Vec<(String, String, i32)> = deployments
        .iter()
        .filter(|d| d.namespace().as_deref() == Some(m.namespace.as_str()))
        .flat_map(|d| {
            let ready = d
                .status
                .as_ref()
                .and_then(|s| s.ready_replicas)
                .unwrap_or(0);
            images(d.spec.template.spec.as_ref(), "mc-controller")
                .into_iter()
                .map(move |i| (d.name_any(), i, ready))
        })
        .collect();
    let agent_sets: Vec<DaemonSet> = daemonsets
        .into_iter()
        .filter(|d| !images(d.spec.template.spec.as_ref(), "mc-agent").is_empty())
        .collect();

    // The agents: their Pods, /readyz and /metrics.
    let mut agents = Vec::new();
    for ds in &agent_sets {
        let selector = ds
            .spec
            .selector
            .match_labels
            .clone()
            .unwrap_or_default()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        let ns = ds.namespace().unwrap_or_default();
        let pods = Api::<Pod>::namespaced(client.clone(), &ns)
            .list(&ListParams::default().labels(&selector))
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        for p in pods {
            let node = p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default();
            let port = p
                .spec
                .as_ref()
                .into_iter()
                .flat_map(|s| &s.containers)
                .flat_map(|c| c.ports.iter().flatten())
                .find(|p| p.name.as_deref() == Some("http"))
                .map_or(9090, |p| p.container_port);
            let ready = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
            let (readyz, metrics) = if running {
                let readyz = pod_proxy(client, &p, port, "readyz").await.err();
                let metrics = pod_proxy(client, &p, port, "metrics")
                    .await
                    .map(|t| parse_metrics(&t))
                    .unwrap_or_default();
                (readyz, metrics)
            } else {
                (
                    Some(format!("Pod {} is not running", p.name_any())),
                    Vec::new(),
                )
            };
            agents.push(Agent {
                node,
                ready,
                readyz,
                metrics,
            });
        }
    }
    agents.sort_by(|a, b| a.node.cmp(&b.node));
    Facts {
        controllers,
        agent_sets,
        agents,
    }
}

/// The checks of one member, in order.
struct Checks<'a> {
    m: &'a Member,
    out: Vec<Check>,
}

impl Checks<'_> {
    fn push(&mut self, check: &'static str, verdict: Verdict, detail: String, hint: &str) {
        self.out.push(Check {
            cluster: self.m.id.clone(),
            check,
            verdict,
            detail,
            hint: hint.to_owned(),
        });
    }
}

async fn member_checks(m: &Member, all: &[Member]) -> Vec<Check> {
    let f = facts(m).await;
    let mut c = Checks { m, out: Vec::new() };
    versions(&mut c, &f);
    agents(&mut c, &f);
    gateway(&mut c);
    leader(&mut c);
    cidrs(&mut c, all);
    pod_cidrs(&mut c);
    tunnels(&mut c, &f);
    mtu(&mut c, &f);
    proxy_and_masquerade(&mut c, &f);
    webhooks(&mut c).await;
    c.out
}

/// Versions of the controller and the agents.
fn versions(c: &mut Checks, f: &Facts) {
    let m = c.m;
    let (controllers, agent_sets, agents) = (&f.controllers, &f.agent_sets, &f.agents);
    let mut versions: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, image, _) in controllers {
        versions
            .entry(image_version(image))
            .or_default()
            .push(format!("controller {name}"));
    }
    for a in agents {
        if let Some(v) = a.info("version") {
            versions
                .entry(format!("v{v}"))
                .or_default()
                .push(format!("agent on {}", a.node));
        }
    }
    for ds in agent_sets {
        for i in images(ds.spec.template.spec.as_ref(), "mc-agent") {
            versions.entry(image_version(&i)).or_default();
        }
    }
    versions.retain(|_, who| !who.is_empty());
    let controllers_ready = controllers.iter().any(|(_, _, r)| *r > 0);
    match (
        controllers.is_empty(),
        agent_sets.is_empty(),
        versions.len(),
    ) {
        (true, _, _) => c.push(
            "versions",
            Verdict::Fail,
            format!(
                "no member controller (an mc-controller image) in namespace {}",
                m.namespace
            ),
            "install the member controller: kubectl apply -k deploy/member (or the chart)",
        ),
        (_, true, _) => c.push(
            "versions",
            Verdict::Fail,
            "no agent DaemonSet (an mc-agent image)".into(),
            "install the agents: kubectl apply -k deploy/agent (or the chart)",
        ),
        (_, _, n) if n > 1 => c.push(
            "versions",
            Verdict::Warn,
            versions
                .iter()
                .map(|(v, who)| format!("{v}: {}", who.join(", ")))
                .collect::<Vec<_>>()
                .join("; "),
            "an upgrade is under way, or one was left half done: roll every controller and agent to one version (docs/operating.md, Upgrading)",
        ),
        _ => c.push(
            "versions",
            if controllers_ready {
                Verdict::Ok
            } else {
                Verdict::Fail
            },
            format!(
                "controller and {} agents at {}{}",
                agents.len(),
                versions.keys().next().cloned().unwrap_or_default(),
                if controllers_ready {
                    ""
                } else {
                    "; the controller has no ready replica"
                }
            ),
            "the controller's Pod: kubectl -n <ns> get pods, its logs and /readyz",
        ),
    }
}

/// Every Node's agent ready, its kernel, attach mode and uplink; programs ahead of Strait's.
fn agents(c: &mut Checks, f: &Facts) {
    let m = c.m;
    let (agent_sets, agents) = (&f.agent_sets, &f.agents);
    let ready_nodes: Vec<String> = m
        .nodes
        .iter()
        .filter(|n| node_ready(n))
        .map(|n| n.name_any())
        .collect();
    let not_ready: Vec<String> = agents
        .iter()
        .filter(|a| !a.ready || a.readyz.is_some())
        .map(|a| {
            format!(
                "{}: {}",
                a.node,
                a.readyz.clone().unwrap_or_else(|| "not Ready".into())
            )
        })
        .collect();
    let missing: Vec<&String> = ready_nodes
        .iter()
        .filter(|n| !agents.iter().any(|a| &a.node == *n))
        .collect();
    if !agent_sets.is_empty() {
        let verdict = if not_ready.is_empty() && missing.is_empty() {
            Verdict::Ok
        } else {
            Verdict::Fail
        };
        let mut detail: Vec<String> = agents
            .iter()
            .map(|a| {
                format!(
                    "{}: kernel {}, attach {}, uplink {} (MTU {})",
                    a.node,
                    a.info("kernel").unwrap_or("?"),
                    a.info("attach").unwrap_or("?"),
                    a.info("uplink").unwrap_or("?"),
                    a.info("uplink_mtu").unwrap_or("?")
                )
            })
            .collect();
        detail.extend(not_ready.iter().map(|n| format!("not ready: {n}")));
        detail.extend(missing.iter().map(|n| format!("no agent on Node {n}")));
        c.push(
            "agents",
            verdict,
            detail.join("; "),
            "the reason is the agent's /readyz: a program attached ahead of Strait's on the uplink (move it, or detach it), a kernel without TCX (tcAttach: tc) or without what stretched policy needs, no bpffs, an unknown uplink (multicluster.uplink); kubectl describe node <node> shows StraitDataplaneNotReady Events",
        );
        let ahead: Vec<&String> = not_ready.iter().filter(|r| r.contains("ahead")).collect();
        c.push(
            "uplink-programs",
            if ahead.is_empty() {
                Verdict::Ok
            } else {
                Verdict::Fail
            },
            if ahead.is_empty() {
                "no program is attached ahead of Strait's on any uplink".into()
            } else {
                ahead
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            },
            "another program (a CNI's, Cilium's) attached at the head of the uplink's TCX chain after Strait: Strait's programs must see packets first; restart the agent to attach at the head again, and tell the other program's owner",
        );
    }
}

/// Gateway election.
fn gateway(c: &mut Checks) {
    let m = c.m;
    let candidates: Vec<String> = m
        .nodes
        .iter()
        .filter(|n| {
            n.annotations()
                .get(annotations::GATEWAY)
                .is_some_and(|v| v == "true")
        })
        .map(|n| {
            format!(
                "{}{}",
                n.name_any(),
                if node_ready(n) { "" } else { " (NotReady)" }
            )
        })
        .collect();
    match &m.gateway {
        None => c.push(
            "gateway",
            Verdict::Fail,
            format!(
                "no Gateway; candidates: {}",
                if candidates.is_empty() {
                    "none".into()
                } else {
                    candidates.join(", ")
                }
            ),
            "annotate a Ready Node: kubectl annotate node <node> multicluster.antrea.io/gateway=true",
        ),
        Some(g) => {
            let node = g.name_any();
            let node_ok = m
                .nodes
                .iter()
                .any(|n| n.name_any() == node && node_ready(n));
            let dp = g.dataplane_ready();
            let dp_ok = dp.is_some_and(|c| c.status.as_deref() == Some("True"));
            c.push(
                "gateway",
                if node_ok && dp_ok {
                    Verdict::Ok
                } else {
                    Verdict::Fail
                },
                format!(
                    "active {node} (gatewayIP {}, internalIP {}), {}, DataplaneReady {}; candidates: {}",
                    g.spec.gateway_ip.clone().unwrap_or_default(),
                    g.spec.internal_ip.clone().unwrap_or_default(),
                    if node_ok { "Ready" } else { "NotReady" },
                    dp.map_or("not reported".into(), |c| format!(
                        "{} {}",
                        c.status.clone().unwrap_or_default(),
                        c.reason.clone().unwrap_or_default()
                    )),
                    candidates.join(", ")
                ),
                "the gateway's agent says why in the Gateway's DataplaneReady message (kubectl get gateway -n <ns> -o yaml); a NotReady gateway Node is replaced by another Ready candidate",
            );
        }
    }
}

/// The control plane: the member's own Ready.
fn leader(c: &mut Checks) {
    let m = c.m;
    let own = m
        .set
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let ready = own.iter().find(|c| c.type_.as_deref() == Some("Ready"));
    c.push(
        "leader",
        if ready.is_some_and(|c| c.status.as_deref() == Some("True")) {
            Verdict::Ok
        } else {
            Verdict::Fail
        },
        ready.map_or("no Ready condition yet".into(), |c| {
            format!(
                "Ready {} {}{}",
                c.status.clone().unwrap_or_default(),
                c.reason.clone().unwrap_or_default(),
                c.message
                    .as_deref()
                    .filter(|m| !m.is_empty())
                    .map_or(String::new(), |m| format!(": {m}"))
            )
        }),
        "docs/operating.md, Troubleshooting: the first rows (token, Secret, the leader's address)",
    );
}

/// The Pod CIDRs the member controller announces (the Gateway's annotation).
fn announced_pod_cidrs(m: &Member) -> Vec<String> {
    m.gateway
        .as_ref()
        .and_then(|g| g.annotations().get(annotations::POD_CIDRS).cloned())
        .map(|l| {
            l.split(',')
                .map(|c| c.trim().to_owned())
                .filter(|c| !c.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// CIDRs: refused announcements, overlaps, members without an import here.
fn cidrs(c: &mut Checks, all: &[Member]) {
    let m = c.m;
    let own_service = m.gateway.as_ref().and_then(|g| g.spec.service_cidr.clone());
    let own_pods = announced_pod_cidrs(m);
    let mut prefixes: Vec<(String, String, Prefix)> = Vec::new();
    let mut add = |cluster: &str, what: &str, text: &str| {
        if let Ok(p) = Prefix::parse(text) {
            prefixes.push((cluster.to_owned(), format!("{what} {text}"), p));
        }
    };
    if let Some(s) = &own_service {
        add(&m.id, "Service CIDR", s);
    }
    for p in &own_pods {
        add(&m.id, "Pod CIDR", p);
    }
    for i in &m.infos {
        let id = i.spec.0.cluster_id.clone().unwrap_or_default();
        if let Some(s) = &i.spec.0.service_cidr {
            add(&id, "Service CIDR", s);
        }
        for p in &i.spec.0.pod_cidrs {
            add(&id, "Pod CIDR", p);
        }
    }
    let mut overlaps = Vec::new();
    for (i, (ca, wa, pa)) in prefixes.iter().enumerate() {
        for (cb, wb, pb) in &prefixes[i + 1..] {
            if ca != cb && pa.overlaps(pb) {
                overlaps.push(format!("{ca} {wa} overlaps {cb} {wb}"));
            }
        }
    }
    let refused: Vec<String> = m
        .set
        .status
        .iter()
        .flat_map(|s| {
            s.conditions
                .iter()
                .chain(s.cluster_statuses.iter().flat_map(|c| &c.conditions))
        })
        .filter(|c| c.reason.as_deref() == Some("ClusterInfoRefused"))
        .map(|c| c.message.clone().unwrap_or_default())
        .collect();
    let remote_ids: Vec<String> = m
        .infos
        .iter()
        .filter_map(|i| i.spec.0.cluster_id.clone())
        .collect();
    let absent: Vec<&str> = all
        .iter()
        .filter(|o| o.id != m.id && !remote_ids.contains(&o.id))
        .map(|o| o.id.as_str())
        .collect();
    c.push(
        "cidrs",
        if overlaps.is_empty() && refused.is_empty() && absent.is_empty() {
            Verdict::Ok
        } else {
            Verdict::Fail
        },
        {
            let mut d = vec![format!(
                "this cluster: Service {}, Pods {}; imported from {}",
                own_service.clone().unwrap_or_else(|| "?".into()),
                if own_pods.is_empty() {
                    "none announced".into()
                } else {
                    own_pods.join(",")
                },
                if remote_ids.is_empty() {
                    "no cluster".into()
                } else {
                    remote_ids.join(", ")
                }
            )];
            d.extend(overlaps.iter().cloned());
            d.extend(refused.iter().map(|r| format!("refused: {r}")));
            d.extend(
                absent
                    .iter()
                    .map(|a| format!("no ClusterInfoImport of {a}")),
            );
            d.join("; ")
        },
        "CIDRs must be unique across the ClusterSet: give the later cluster other Service/Pod CIDRs (controller config serviceCIDR/podCIDRs, matching what the cluster uses); a missing ClusterInfoImport means that cluster has no Gateway or its ClusterInfo was refused (mcctl get resourceexport --cluster-id <id> in the leader)",
    );
}

/// With Pod-to-Pod: the Nodes' Pod CIDRs inside what is announced.
fn pod_cidrs(c: &mut Checks) {
    let m = c.m;
    let own_pods = announced_pod_cidrs(m);
    let pod_to_pod = m.agent_flag("enablePodToPodConnectivity") == Some(true);
    if pod_to_pod {
        let announced: Vec<Prefix> = own_pods
            .iter()
            .filter_map(|p| Prefix::parse(p).ok())
            .collect();
        let uncovered: Vec<String> = m
            .nodes
            .iter()
            .flat_map(|n| {
                n.spec
                    .as_ref()
                    .and_then(|s| s.pod_cidrs.clone())
                    .unwrap_or_default()
                    .into_iter()
                    .map(move |c| (n.name_any(), c))
            })
            .filter(|(_, c)| {
                Prefix::parse(c).is_ok_and(|p| !announced.iter().any(|a| a.contains(&p)))
            })
            .map(|(n, c)| format!("Node {n}'s {c}"))
            .collect();
        c.push(
            "pod-cidrs",
            if !announced.is_empty() && uncovered.is_empty() {
                Verdict::Ok
            } else {
                Verdict::Fail
            },
            if announced.is_empty() {
                "Pod-to-Pod is on, but no Pod CIDR is announced".into()
            } else if uncovered.is_empty() {
                format!(
                    "announced {} cover every Node's Pod CIDR",
                    own_pods.join(",")
                )
            } else {
                format!("not announced: {}", uncovered.join(", "))
            },
            "the member controller announces the Nodes' spec.podCIDRs, Calico's IPPools and Cilium's CiliumNodes; a CNI that keeps its subnets elsewhere (Flannel with etcd) needs podCIDRs in the controller config",
        );
    } else if m.agent_config.is_none() {
        c.push(
            "pod-cidrs",
            Verdict::Warn,
            format!(
                "no agent config ({}) found: whether Pod-to-Pod is on is not known; the checks assume the agents' defaults",
                crate::member::AGENT_CONFIG
            ),
            "the agents' ConfigMap (deploy/agent, the chart) holds their multicluster settings; diagnose reads it to know Pod-to-Pod, encryption and the tunnel port",
        );
    } else {
        c.push(
            "pod-cidrs",
            Verdict::Ok,
            "Pod-to-Pod is off (enablePodToPodConnectivity)".into(),
            "",
        );
    }
}

/// The gateway's agent, where it reported.
fn gateway_agent<'a>(m: &Member, f: &'a Facts) -> Option<&'a Agent> {
    m.gateway_node()
        .and_then(|g| f.agents.iter().find(|a| a.node == g))
}

/// The tunnel between the gateways, per remote cluster, from the probes.
fn tunnels(out: &mut Checks, f: &Facts) {
    let m = out.m;
    let gateway_agent = gateway_agent(m, f);
    let encryption = m
        .agent_str("trafficEncryptionMode")
        .is_some_and(|v| v.eq_ignore_ascii_case("wireguard"));
    let tunnel_port = m.agent_str("tunnelPort").unwrap_or_else(|| "6081".into());
    let wg_port = m
        .agent_config
        .as_ref()
        .and_then(|c| c.get("wireGuard")?.get("port")?.as_u64())
        .unwrap_or(51821);
    let port = if encryption {
        format!("UDP {wg_port} (WireGuard, carrying the tunnel's UDP {tunnel_port})")
    } else {
        format!("UDP {tunnel_port}")
    };
    for i in &m.infos {
        let id = i.spec.0.cluster_id.clone().unwrap_or_default();
        let remote_gw = i
            .spec
            .0
            .gateway_infos
            .first()
            .and_then(|g| g.gateway_ip.clone())
            .unwrap_or_default();
        let c = i
            .status
            .iter()
            .flat_map(|s| &s.conditions)
            .find(|c| c.type_.as_deref() == Some("TunnelUp"));
        let loss =
            gateway_agent.and_then(|a| a.value("strait_tunnel_probe_loss_ratio", "cluster", &id));
        let rtt = gateway_agent.and_then(|a| a.value("strait_tunnel_rtt_seconds", "cluster", &id));
        let up = c.and_then(|c| c.status.as_deref()) == Some("True");
        let count = |name: &str| {
            gateway_agent
                .and_then(|a| a.value(name, "cluster", &id))
                .map(|v| v as u64)
        };
        let traffic = match (
            count("strait_tunnel_tx_packets_total"),
            count("strait_tunnel_tx_bytes_total"),
            count("strait_tunnel_rx_packets_total"),
            count("strait_tunnel_rx_bytes_total"),
        ) {
            (Some(tp), Some(tb), Some(rp), Some(rb)) => {
                format!("; sent {tp} packets ({tb} bytes), received {rp} packets ({rb} bytes)")
            }
            _ => String::new(),
        };
        // The round trip is the last answered probe's: only while answers come.
        let figures = format!(
            "{}{}",
            loss.map_or(String::new(), |l| format!(", loss {:.0}%", l * 100.0)),
            rtt.filter(|_| up)
                .map_or(String::new(), |r| format!(", round trip {:.2} ms", r * 1e3))
        );
        let (verdict, detail, hint) = match c.map(|c| c.status.as_deref().unwrap_or_default()) {
            Some("True") => (
                if loss.is_some_and(|l| l > 0.2) {
                    Verdict::Warn
                } else {
                    Verdict::Ok
                },
                format!(
                    "to {id}: {port} from {} to {remote_gw} passes (probes answered{figures}){traffic}",
                    m.gateway_ip().unwrap_or_default()
                ),
                "probes get lost on the way between the gateways: a congested or lossy path",
            ),
            Some("False") => (
                Verdict::Fail,
                format!(
                    "to {id}: {port} from {} to {remote_gw} is blocked: probes unanswered since {}{figures}{traffic}",
                    m.gateway_ip().unwrap_or_default(),
                    c.and_then(|c| c.last_transition_time.as_ref())
                        .map_or("?".into(), |t| t.0.to_string())
                ),
                "open the port both ways between the gateway candidates of both clusters (firewall, security groups, NAT port forward); or the remote gateway's agent is not attached (its /readyz)",
            ),
            _ => (
                Verdict::Warn,
                format!("to {id}: no verdict from the gateway's probes yet"),
                "the gateway's agent writes TunnelUp within seconds of starting; an older agent does not probe",
            ),
        };
        out.push("tunnel", verdict, detail, hint);
    }
}

/// MTU: the tunnel's, and what the programs had to do about larger packets.
fn mtu(c: &mut Checks, f: &Facts) {
    let m = c.m;
    let agents = &f.agents;
    if let Some(a) = gateway_agent(m, f) {
        let too_big: u64 = agents.iter().map(|a| a.counter("drop_too_big")).sum();
        let frag_needed: u64 = agents.iter().map(|a| a.counter("tx_frag_needed")).sum();
        let clamped: u64 = agents.iter().map(|a| a.counter("tcp_mss_clamped")).sum();
        let tunnel = a.info("tunnel_mtu").unwrap_or("?");
        c.push(
            "mtu",
            if too_big > 0 {
                Verdict::Warn
            } else {
                Verdict::Ok
            },
            format!(
                "tunnel MTU {tunnel} (uplink {}): inner packets up to {} bytes cross; {clamped} TCP handshakes clamped, {frag_needed} fragmentation-needed sent, {too_big} datagrams too big dropped",
                a.info("uplink_mtu").unwrap_or("?"),
                tunnel
                    .parse::<u32>()
                    .map_or("?".into(), |t| (t - 36).to_string())
            ),
            "datagrams larger than the tunnel without DF are dropped (drop_too_big): give Pods an MTU of the tunnel's minus 36; if large transfers stall while small requests work, the path between the gateways is narrower than the tunnel MTU: set tunnelMTU in the agents' config (mcctl verify's transfer check shows it)",
        );
    }
}

/// kube-proxy's mode, and masquerade of remote prefixes.
fn proxy_and_masquerade(c: &mut Checks, f: &Facts) {
    let m = c.m;
    let agents = &f.agents;
    let stretched = m.agent_flag("enableStretchedNetworkPolicy") == Some(true);
    let mut modes: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for a in agents {
        modes
            .entry(a.info("kube_proxy").unwrap_or("unknown").to_owned())
            .or_default()
            .push(a.node.clone());
    }
    let ipvs = modes.contains_key("ipvs");
    c.push(
        "kube-proxy",
        if ipvs && stretched {
            Verdict::Warn
        } else {
            Verdict::Ok
        },
        modes
            .iter()
            .map(|(mode, nodes)| format!("{mode} on {}", nodes.join(", ")))
            .collect::<Vec<_>>()
            .join("; "),
        "in IPVS mode ClusterSet-scoped ingress rules are not enforced for ClusterIP exports (use endpointIPType: PodIP); unknown: kube-proxy's /proxyMode (127.0.0.1:10249) did not answer",
    );
    let via_conntrack: u64 = agents
        .iter()
        .map(|a| a.counter("tx_identity_via_conntrack"))
        .sum();
    let unknown: u64 = agents
        .iter()
        .map(|a| a.counter("tx_identity_unknown"))
        .sum();
    // Masquerade of remote prefixes: packets whose Pod the CNI hid behind the Node's address
    // and Strait found again in conntrack say the CNI masquerades them.
    c.push(
        "masquerade",
        Verdict::Ok,
        match (stretched, via_conntrack > 0) {
            (false, _) => "stretched NetworkPolicy is off: a CNI's masquerade of remote prefixes changes nothing".into(),
            (true, true) => format!(
                "the CNI masquerades remote prefixes: {via_conntrack} packets' Pods found through conntrack; {unknown} packets without an identity (host-network senders, or masquerade outside the Node's conntrack)"
            ),
            (true, false) => format!(
                "no masquerade of remote prefixes seen; {unknown} packets without an identity (host-network senders)"
            ),
        },
        "",
    );
}

/// A webhook served by a Service: (webhook, its namespace, its name, whether a CA is set).
fn served(name: String, config: WebhookClientConfig) -> Option<(String, String, String, bool)> {
    let s = config.service?;
    let ca = config.ca_bundle.is_some_and(|b| !b.0.is_empty());
    Some((name, s.namespace, s.name, ca))
}

/// The webhooks of the controller in this member's namespace.
async fn webhooks(c: &mut Checks<'_>) {
    let m = c.m;
    let client = &m.cluster.client;
    let validating = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let mutating = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let mut hooks: Vec<(String, String, String, bool)> = validating
        .into_iter()
        .flat_map(|c| c.webhooks.unwrap_or_default())
        .filter_map(|w| served(w.name, w.client_config))
        .chain(
            mutating
                .into_iter()
                .flat_map(|c| c.webhooks.unwrap_or_default())
                .filter_map(|w| served(w.name, w.client_config)),
        )
        .collect();
    hooks.retain(|(name, ns, ..)| ns == &m.namespace && name.contains("antrea.io"));
    let mut problems = Vec::new();
    let mut services = std::collections::BTreeSet::new();
    for (name, ns, svc, ca) in &hooks {
        if !ca {
            problems.push(format!("{name}: no caBundle yet"));
        }
        services.insert((ns.clone(), svc.clone()));
    }
    for (ns, svc) in &services {
        let ready = crate::member::ready_endpoints(client, ns, svc).await;
        if ready == 0 {
            problems.push(format!("Service {ns}/{svc} has no ready endpoint"));
        }
    }
    c.push(
        "webhooks",
        if hooks.is_empty() {
            Verdict::Warn
        } else if problems.is_empty() {
            Verdict::Ok
        } else {
            Verdict::Fail
        },
        if hooks.is_empty() {
            format!("no webhook served from namespace {}", m.namespace)
        } else if problems.is_empty() {
            format!(
                "{} webhooks, served by {}",
                hooks.len(),
                services
                    .iter()
                    .map(|(n, s)| format!("{n}/{s}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        } else {
            problems.join("; ")
        },
        "writes of Strait's objects fail closed while the controller serving the webhooks has no ready Pod; its CA is published into the configurations at start and every 30 s",
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_text_parses_into_series_with_labels() {
        let text = "# HELP x\nstrait_agent_info{node=\"node-a\",kernel=\"6.18.0\",wireguard=\"userspace (boringtun)\"} 1\n\
                    strait_dataplane_packets_total{reason=\"drop_too_big\",verdict=\"drop\"} 3\n\
                    strait_tunnel_up{cluster=\"c2\"} 0\nplain 2.5\n";
        let s = parse_metrics(text);
        assert_eq!(s.len(), 4);
        assert_eq!(s[0].labels["wireguard"], "userspace (boringtun)");
        assert_eq!(s[0].labels["kernel"], "6.18.0");
        let a = Agent {
            node: "node-a".into(),
            ready: true,
            readyz: None,
            metrics: s,
        };
        assert_eq!(a.info("node"), Some("node-a"));
        assert_eq!(a.counter("drop_too_big"), 3);
        assert_eq!(a.value("strait_tunnel_up", "cluster", "c2"), Some(0.0));
    }

    #[test]
    fn an_images_version_is_its_tag() {
        assert_eq!(
            image_version("ghcr.io/strait-net/mc-agent:v0.1.0"),
            "v0.1.0"
        );
        assert_eq!(image_version("localhost:5000/mc-agent"), "latest");
    }
}
