//! `mc-agent run`: keeps this Node's dataplane equal to what the API says. Watches the local
//! Gateway and the ClusterInfoImports (in the member controller's namespace) and the Nodes (with
//! stretched NetworkPolicy on, also the cluster's Pods, the Namespaces, the LabelIdentities, the
//! Antrea-native policies, the Tiers and the ServiceImports); on
//! every change, and on a periodic resync, recomputes the desired state and applies it to the
//! maps and the kernel routes. Level-triggered: a restart starts from the pins and the API, never
//! from memory. Problems (no Node IP, unknown uplink, no bpffs, unusable objects) are logged once
//! when they appear and reported on `/readyz`; the agent keeps running and retries.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::{Ipv4Addr, SocketAddr},
    time::{Duration, Instant},
};

use k8s_openapi::api::{
    core::v1::{Namespace, Node, ObjectReference, Pod, PodSpec, PodStatus, Service, ServiceSpec},
    discovery::v1::{Endpoint, EndpointSlice},
};
use kube::{
    Api, Client, ResourceExt as _,
    runtime::events::{Event, EventType, Recorder, Reporter},
};
use mc_api::{
    antrea::{ClusterNetworkPolicy, NetworkPolicy as AntreaNetworkPolicy, PolicyCondition, Tier},
    clusterinfo::ClusterInfoImport,
    conditions::{Condition, condition, keep_transition_time, same},
    gateway::{DATAPLANE_READY, Gateway, TRAFFIC_ENCRYPTED},
    labelidentity::LabelIdentity,
    mcs::{ServiceExport, ServiceImport},
    names::annotations,
};
use mc_kube::{Driver, Metrics, Reconciler, Trigger, Watched, Work, Writer, watch::WatchHealth};

use crate::{
    bpffs::PinLayout,
    config::Multicluster,
    counters,
    dataplane::Dataplane,
    exposure::{ExportedService, exported_services},
    host::HostState,
    kube_proxy::ProxyMode,
    netfilter::{Hook, PolicyHook},
    policy::{Coverage, ENFORCED_CONDITION, PolicyObject},
    routes,
    state::{ClusterInfoObject, Desired, GatewayObject, Inputs, PodObject, Routed, desired},
    sync, wireguard,
};

/// How often counters and map occupancy are read for /metrics.
const PUBLISH_EVERY: Duration = Duration::from_secs(10);
/// kube-proxy's metrics port, where it answers `/proxyMode`.
const KUBE_PROXY_METRICS_PORT: u16 = 10249;

pub struct RunOptions {
    pub node_name: String,
    /// Where the Gateway and ClusterInfoImports live.
    pub namespace: String,
    pub config: Multicluster,
    /// Full resync period (besides every watch event).
    pub resync: Duration,
    /// Where the Node's sysctls from before Strait are recorded (for `mc-agent uninstall`), and
    /// its WireGuard key.
    pub host: HostState,
}

/// The attached dataplane of this Node.
struct Attached {
    dataplane: Dataplane,
    uplink: String,
    /// Whether the uplink is a veth whose other end is in another network namespace.
    uplink_peer: UplinkPeer,
    /// Strait's routes to the remote prefixes as the last sync that succeeded left them.
    routed: Option<Routed>,
    /// With stretched policy: the policy program, linked while this Node has something to decide.
    policy: Option<PolicyHook>,
    /// With stretched policy: the masquerade program at POSTROUTING, linked from the start
    /// (its links outlive the agent like the uplink's).
    masq: Option<PolicyHook>,
    /// Encryption on, while this Node is the gateway: its WireGuard device.
    wireguard: Option<WireGuardUp>,
    /// How the programs attach (TCX, or legacy TC where the kernel has no TCX).
    mode: crate::dataplane::AttachMode,
}

/// The gateway's WireGuard device, up, with what the programs are told of it.
struct WireGuardUp {
    device: wireguard::Device,
    config: mc_common::dataplane::WireGuardConfig,
    public_key: String,
}

/// `mc-agent run`: the watches, the prober's task and the agent's reconcile loop, until the
/// process stops; with `enableGateway` off, nothing (ready, idle).
pub async fn run(client: Client, opts: RunOptions, metrics: Metrics) -> anyhow::Result<()> {
    tracing::info!(version = crate::VERSION, "mc-agent starting");
    if !opts.config.enable_gateway {
        tracing::info!(
            "multicluster.enableGateway is false: this Node carries no cross-cluster traffic; nothing to attach"
        );
        metrics.set_ready(None);
        std::future::pending::<()>().await;
    }
    let trigger = Trigger::new(&metrics);
    let gateways = Watched::new(
        Api::<Gateway>::namespaced(client.clone(), &opts.namespace),
        Default::default(),
        trigger.clone(),
        "Gateway",
    );
    let infos = Watched::new(
        Api::<ClusterInfoImport>::namespaced(client.clone(), &opts.namespace),
        Default::default(),
        trigger.clone(),
        "ClusterInfoImport",
    );
    let stretched = opts
        .config
        .enable_stretched_network_policy
        .then(|| Stretched::new(&client, &trigger));
    let nodes = Watched::new(
        Api::<Node>::all(client.clone()),
        Default::default(),
        trigger.clone(),
        "Node",
    );
    let events = Recorder::new(
        client.clone(),
        Reporter {
            controller: "strait-agent".into(),
            instance: Some(opts.node_name.clone()),
        },
    );
    // Tunnel health: the active gateway's probes, in a task of their own (docs/design.md §4d).
    let (probe_setup, probe_rx) = tokio::sync::watch::channel(None);
    tokio::spawn(crate::probe::run(
        probe_rx,
        client.clone(),
        opts.namespace.clone(),
        PinLayout::new(&opts.config.pin_path),
        metrics.clone(),
    ));
    let mut agent = Agent {
        probe_setup,
        events,
        opts,
        client: client.clone(),
        writer: Writer::new(metrics.clone()),
        metrics: metrics.clone(),
        gateways,
        infos,
        nodes,
        stretched,
        exports: None,
        trigger: trigger.clone(),
        attached: None,
        problems: Vec::new(),
        published: None,
        not_ready: None,
        proxy_mode: None,
        proxy_asked: None,
    };
    let driver = Driver {
        domain: "dataplane",
        trigger,
        metrics,
        tick: agent.opts.resync,
        // Let a burst of events settle into one pass.
        settle: Duration::from_millis(50),
        // A handful of objects: every pass recomputes everything anyway.
        full_resync: agent.opts.resync,
    };
    driver.reconcile(&mut agent).await;
    Ok(())
}

/// What the label identities of this Node's Pods, and the gateway's policy decisions, come from
/// (stretched NetworkPolicy).
struct Stretched {
    /// Every Pod of the cluster: this Node's get identities; the gateway decides for all.
    pods: Watched<Pod>,
    namespaces: Watched<Namespace>,
    identities: Watched<LabelIdentity>,
    acnps: Watched<ClusterNetworkPolicy>,
    anps: Watched<AntreaNetworkPolicy>,
    tiers: Watched<Tier>,
    /// The multi-cluster Services' addresses, for egress `toServices` rules.
    service_imports: Watched<ServiceImport>,
}

impl Stretched {
    /// The watches of stretched NetworkPolicy, each firing `trigger`.
    fn new(client: &Client, trigger: &Trigger) -> Self {
        Self {
            pods: Watched::trimmed(
                Api::<Pod>::all(client.clone()),
                Default::default(),
                trigger.clone(),
                "Pod",
                trim_pod,
            ),
            acnps: Watched::new(
                Api::<ClusterNetworkPolicy>::all(client.clone()),
                Default::default(),
                trigger.clone(),
                "ClusterNetworkPolicy",
            ),
            anps: Watched::new(
                Api::<AntreaNetworkPolicy>::all(client.clone()),
                Default::default(),
                trigger.clone(),
                "NetworkPolicy.crd.antrea.io",
            ),
            tiers: Watched::new(
                Api::<Tier>::all(client.clone()),
                Default::default(),
                trigger.clone(),
                "Tier",
            ),
            service_imports: Watched::new(
                Api::<ServiceImport>::all(client.clone()),
                Default::default(),
                trigger.clone(),
                "ServiceImport",
            ),
            namespaces: Watched::new(
                Api::<Namespace>::all(client.clone()),
                Default::default(),
                trigger.clone(),
                "Namespace",
            ),
            identities: Watched::new(
                Api::<LabelIdentity>::all(client.clone()),
                Default::default(),
                trigger.clone(),
                "LabelIdentity",
            ),
        }
    }

    /// Writes the `EnforcedByStrait` condition where it changed (merge patch of the status:
    /// these CRDs are Strait's, no other writer shares their conditions). Returns the failures.
    async fn write_conditions(
        &self,
        client: &Client,
        writer: &Writer,
        coverage: &BTreeMap<(Option<String>, String), Coverage>,
    ) -> usize {
        let stored: BTreeMap<_, _> = self
            .acnps
            .all()
            .iter()
            .map(|p| {
                let c = p.status.as_ref().map(|s| s.conditions.clone());
                ((None, p.name_any()), c.unwrap_or_default())
            })
            .chain(self.anps.all().iter().map(|p| {
                let c = p.status.as_ref().map(|s| s.conditions.clone());
                ((p.namespace(), p.name_any()), c.unwrap_or_default())
            }))
            .collect();
        let now = format!("{:.0}", k8s_openapi::jiff::Timestamp::now());
        let mut failures = 0;
        for (namespace, name, condition) in policy_conditions(coverage, &stored, &now) {
            // A merge-patch body: generic JSON by nature (the fields it sets are typed in mc-api).
            let status = serde_json::json!({"conditions": [condition]});
            let written = match &namespace {
                None => {
                    let api = Api::<ClusterNetworkPolicy>::all(client.clone());
                    writer.patch_status(&api, &name, status).await
                }
                Some(ns) => {
                    let api = Api::<AntreaNetworkPolicy>::namespaced(client.clone(), ns);
                    writer.patch_status(&api, &name, status).await
                }
            };
            match written {
                Ok(()) => tracing::info!(
                    namespace,
                    name,
                    reason = condition.reason,
                    "policy condition {ENFORCED_CONDITION} written"
                ),
                // Gone meanwhile: the next pass no longer lists it.
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => {
                    tracing::warn!(
                        namespace,
                        name,
                        "writing the policy's {ENFORCED_CONDITION} condition: {e}"
                    );
                    failures += 1;
                }
            }
        }
        failures
    }

    /// `node_ips`: each Node's InternalIP by name (the address its tunnel packets come from).
    fn inputs(&self, inputs: &mut Inputs, node_ips: &BTreeMap<String, Ipv4Addr>) {
        inputs.stretched_policy = true;
        let pods = self.pods.all();
        let on_node = |p: &&std::sync::Arc<Pod>| {
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&inputs.node_name)
        };
        let object = |p: &std::sync::Arc<Pod>| PodObject {
            namespace: p.namespace().unwrap_or_default(),
            name: p.name_any(),
            labels: p.labels().clone(),
            ips: p
                .status
                .iter()
                .flat_map(|s| s.pod_ips.iter().flatten())
                .map(|ip| ip.ip.clone())
                .collect(),
            host_network: p
                .spec
                .as_ref()
                .and_then(|s| s.host_network)
                .unwrap_or(false),
            finished: p
                .status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .is_some_and(|ph| ph == "Succeeded" || ph == "Failed"),
            host_ip: p
                .spec
                .as_ref()
                .and_then(|s| node_ips.get(s.node_name.as_deref()?))
                .map(Ipv4Addr::to_string)
                .or_else(|| p.status.as_ref().and_then(|s| s.host_ip.clone())),
        };
        inputs.pods = pods.iter().filter(on_node).map(object).collect();
        inputs.cluster_pods = pods.iter().map(object).collect();
        inputs.policies = self
            .acnps
            .all()
            .iter()
            .map(|p| PolicyObject {
                namespace: None,
                name: p.name_any(),
                spec: p.spec.clone(),
            })
            .chain(self.anps.all().iter().map(|p| PolicyObject {
                namespace: p.namespace(),
                name: p.name_any(),
                spec: p.spec.policy.clone(),
            }))
            .collect();
        inputs.tiers = self
            .tiers
            .all()
            .iter()
            .map(|t| (t.name_any(), t.spec.priority))
            .collect();
        inputs.imported_services = self
            .service_imports
            .all()
            .iter()
            .map(|si| {
                let ips = si
                    .spec
                    .ips
                    .iter()
                    .filter_map(|ip| ip.parse().ok())
                    .collect();
                ((si.namespace().unwrap_or_default(), si.name_any()), ips)
            })
            .collect();
        inputs.namespace_labels = self
            .namespaces
            .all()
            .iter()
            .map(|n| (n.name_any(), n.labels().clone()))
            .collect();
        inputs.label_ids = self
            .identities
            .all()
            .iter()
            .filter_map(|li| Some((li.spec.label.clone()?, li.spec.id?)))
            .collect();
    }
}

/// What the agent reads of a Pod: namespace, name, labels, host networking, phase and addresses.
fn trim_pod(pod: &mut Pod) {
    let host_network = pod.spec.as_ref().and_then(|s| s.host_network);
    let node_name = pod.spec.as_ref().and_then(|s| s.node_name.clone());
    pod.spec = Some(PodSpec {
        host_network,
        node_name,
        ..Default::default()
    });
    pod.status = pod.status.take().map(|s| PodStatus {
        phase: s.phase,
        pod_ips: s.pod_ips,
        host_ip: s.host_ip,
        ..Default::default()
    });
    let m = &mut pod.metadata;
    (m.annotations, m.owner_references) = (None, None);
}

/// What this cluster exported, watched on a Node that may be the gateway (the exposure map,
/// `exposure.rs`).
struct Exports {
    exports: Watched<ServiceExport>,
    services: Watched<Service>,
    slices: Watched<EndpointSlice>,
}

impl Exports {
    fn new(client: &Client, trigger: &Trigger) -> Self {
        Self {
            exports: Watched::new(
                Api::all(client.clone()),
                Default::default(),
                trigger.clone(),
                "ServiceExport",
            ),
            services: Watched::trimmed(
                Api::all(client.clone()),
                Default::default(),
                trigger.clone(),
                "Service",
                trim_service,
            ),
            slices: Watched::trimmed(
                Api::all(client.clone()),
                Default::default(),
                trigger.clone(),
                "EndpointSlice",
                trim_slice,
            ),
        }
    }

    fn services(&self) -> Vec<ExportedService> {
        let exports = self.exports.all();
        let slices = self.slices.all();
        exported_services(
            exports.iter().map(|e| e.as_ref()),
            |ns, name| self.services.get(Some(ns), name),
            &slices,
        )
    }
}

/// What the agent reads of a Service: its ClusterIPs and ports.
fn trim_service(svc: &mut Service) {
    svc.spec = svc.spec.take().map(|s| ServiceSpec {
        cluster_ip: s.cluster_ip,
        cluster_ips: s.cluster_ips,
        ports: s.ports,
        ..Default::default()
    });
    svc.status = None;
    let m = &mut svc.metadata;
    (m.annotations, m.owner_references) = (None, None);
}

/// What the agent reads of an EndpointSlice: its addresses and ports.
fn trim_slice(slice: &mut EndpointSlice) {
    for e in slice.endpoints.iter_mut().flatten() {
        *e = Endpoint {
            addresses: std::mem::take(&mut e.addresses),
            ..Default::default()
        };
    }
    let m = &mut slice.metadata;
    (m.annotations, m.owner_references) = (None, None);
}

/// The agent's loop: its watches and what it has attached.
struct Agent {
    /// What the prober task probes: the remote gateways while this Node is the gateway.
    probe_setup: tokio::sync::watch::Sender<Option<crate::probe::Setup>>,
    /// Events on this Node when the dataplane stops or starts being ready (`kubectl describe
    /// node`, `kubectl get events`), with the reason.
    events: Recorder,
    opts: RunOptions,
    client: Client,
    /// Writes the policies' conditions (counted in the write metrics).
    writer: Writer,
    metrics: Metrics,
    gateways: Watched<Gateway>,
    infos: Watched<ClusterInfoImport>,
    nodes: Watched<Node>,
    stretched: Option<Stretched>,
    /// On a Node that may be the gateway: what this cluster exported (watched from the first
    /// pass that finds the Node a gateway candidate on).
    exports: Option<Exports>,
    /// Fires the passes (the watches started later take it too).
    trigger: Trigger,
    attached: Option<Attached>,
    /// Everything wrong after the last pass (logged when it first appears).
    problems: Vec<String>,
    /// When the counters were last published.
    published: Option<Instant>,
    /// Why the last pass left the agent not ready.
    not_ready: Option<String>,
    /// kube-proxy's mode on this Node, as it last said (stretched NetworkPolicy only).
    proxy_mode: Option<ProxyMode>,
    /// When kube-proxy was last asked.
    proxy_asked: Option<Instant>,
}

/// How often the agent asks kube-proxy its mode again (it changes only with kube-proxy's config).
const ASK_PROXY_EVERY: Duration = Duration::from_secs(60);

impl Reconciler for Agent {
    fn watches(&self) -> Vec<(&'static str, &WatchHealth)> {
        let mut w = vec![
            ("Gateways", self.gateways.health()),
            ("ClusterInfoImports", self.infos.health()),
            ("Nodes", self.nodes.health()),
        ];
        if let Some(s) = &self.stretched {
            w.extend([
                ("Pods", s.pods.health()),
                ("Namespaces", s.namespaces.health()),
                ("LabelIdentities", s.identities.health()),
                ("ClusterNetworkPolicies", s.acnps.health()),
                ("NetworkPolicies.crd.antrea.io", s.anps.health()),
                ("Tiers", s.tiers.health()),
                ("ServiceImports", s.service_imports.health()),
            ]);
        }
        if let Some(e) = &self.exports {
            w.extend([
                ("ServiceExports", e.exports.health()),
                ("Services", e.services.health()),
                ("EndpointSlices", e.slices.health()),
            ]);
        }
        w
    }

    /// Every pass recomputes everything (a handful of objects): `_work` is not read.
    async fn pass(&mut self, _work: Work) -> usize {
        self.ask_proxy_mode().await;
        if self.exports.is_none() && self.may_be_gateway() {
            tracing::info!(
                "this Node may be the gateway: watching the ServiceExports, Services and EndpointSlices (remote clusters reach only what was exported)"
            );
            self.exports = Some(Exports::new(&self.client, &self.trigger));
        }
        let exported = self
            .exports
            .as_ref()
            .filter(|e| e.exports.ready() && e.services.ready() && e.slices.ready())
            .map(Exports::services);
        let seen = Seen {
            gateways: &self.gateways,
            infos: &self.infos,
            nodes: &self.nodes,
            stretched: self.stretched.as_ref(),
            proxy_mode: self.proxy_mode.as_ref(),
            exported,
        };
        let mut outcome = pass(&self.opts, &mut self.attached, seen);
        let probes = outcome.probes.take();
        self.probe_setup.send_if_modified(|current| {
            let changed = *current != probes;
            *current = probes;
            changed
        });
        if outcome.problems != self.problems {
            for p in outcome
                .problems
                .iter()
                .filter(|p| !self.problems.contains(p))
            {
                tracing::warn!("{p}");
            }
            if outcome.problems.is_empty() && !self.problems.is_empty() {
                tracing::info!("every earlier problem is resolved");
            }
            self.problems = outcome.problems;
        }
        let mut failures = usize::from(outcome.not_ready.is_some());
        if outcome.not_ready != self.not_ready {
            self.node_event(outcome.not_ready.as_deref()).await;
        }
        self.not_ready = outcome.not_ready;
        failures += self.gateway_condition(outcome.encryption.as_ref()).await;
        if let Some(key) = &outcome.wireguard_key {
            failures += self.publish_wireguard_key(key).await;
        }
        if let (Some(coverage), Some(s)) = (&outcome.coverage, &self.stretched) {
            failures += s
                .write_conditions(&self.client, &self.writer, coverage)
                .await;
        }
        // Counting the maps walks the whole SNAT table: not on every event, at most every 10 s.
        if self
            .published
            .is_none_or(|at| at.elapsed() >= PUBLISH_EVERY)
        {
            publish(&self.metrics, self.attached.as_mut());
            self.publish_info();
            self.published = Some(Instant::now());
        }
        failures
    }

    fn later(&mut self) -> Work {
        Work::default()
    }

    fn not_ready(&self) -> Option<String> {
        self.not_ready.clone()
    }
}

impl Agent {
    /// Asks kube-proxy its mode (at most every [`ASK_PROXY_EVERY`]; logged when it changes):
    /// for stretched policy's enforcement, and for `strait_agent_info` (`mcctl diagnose`).
    async fn ask_proxy_mode(&mut self) {
        if self
            .proxy_asked
            .is_some_and(|at| at.elapsed() < ASK_PROXY_EVERY)
        {
            return;
        }
        self.proxy_asked = Some(Instant::now());
        let node_ip = self
            .nodes
            .get(None, &self.opts.node_name)
            .and_then(|n| internal_ip(&n));
        let mut addrs = vec![SocketAddr::from(([127, 0, 0, 1], KUBE_PROXY_METRICS_PORT))];
        addrs.extend(node_ip.map(|ip| SocketAddr::from((ip, KUBE_PROXY_METRICS_PORT))));
        let mode = crate::kube_proxy::ask(&addrs).await;
        if mode != self.proxy_mode {
            match &mode {
                Some(ProxyMode::Ipvs) if self.stretched.is_some() => tracing::warn!(
                    "kube-proxy runs in IPVS mode: ClusterSet-scoped ingress rules are not enforced for flows to ClusterIP exports (the policies' EnforcedByStrait condition says so)"
                ),
                Some(m) => tracing::info!(mode = m.as_str(), "kube-proxy's mode"),
                None => tracing::info!(
                    ?addrs,
                    "kube-proxy did not say its mode (/proxyMode): assumed to choose backends before netfilter's PREROUTING ends, as iptables and nftables modes do"
                ),
            }
        }
        self.proxy_mode = mode;
    }

    /// `strait_agent_info`: one series (value 1) whose labels say what this agent runs with,
    /// for `mcctl diagnose` and dashboards: version, kernel, attach mode, uplink and its MTU,
    /// the tunnel's MTU, kube-proxy's mode, the Node's role, which WireGuard.
    fn publish_info(&self) {
        let node = self.opts.node_name.as_str();
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let role = if self.gateways.all().iter().any(|g| g.name_any() == node) {
            "gateway"
        } else {
            "node"
        };
        let (attach, uplink, uplink_mtu_, tunnel_mtu_, wireguard) = match &self.attached {
            Some(a) => {
                let up = uplink_mtu(&a.uplink);
                (
                    a.mode.as_str(),
                    a.uplink.clone(),
                    up.to_string(),
                    tunnel_mtu(
                        up,
                        self.opts.config.tunnel_mtu,
                        self.opts.config.encryption(),
                    )
                    .to_string(),
                    a.wireguard
                        .as_ref()
                        .map_or("off", |w| w.device.implementation()),
                )
            }
            None => ("none", String::new(), String::new(), String::new(), "off"),
        };
        let proxy = self
            .proxy_mode
            .as_ref()
            .map_or("unknown", ProxyMode::as_str);
        self.metrics.forget("strait_agent_info", "node", node);
        self.metrics.gauge(
            "strait_agent_info",
            &[
                ("node", node),
                ("version", crate::VERSION),
                ("kernel", kernel.trim()),
                ("attach", attach),
                ("uplink", &uplink),
                ("uplink_mtu", &uplink_mtu_),
                ("tunnel_mtu", &tunnel_mtu_),
                ("kube_proxy", proxy),
                ("role", role),
                ("wireguard", wireguard),
                (
                    "pod_to_pod",
                    if self.opts.config.enable_pod_to_pod_connectivity {
                        "true"
                    } else {
                        "false"
                    },
                ),
            ],
            1.0,
        );
    }

    /// A gateway candidate (annotated `multicluster.antrea.io/gateway`), or the gateway.
    fn may_be_gateway(&self) -> bool {
        let name = &self.opts.node_name;
        self.nodes
            .get(None, name)
            .is_some_and(|n| n.annotations().contains_key(annotations::GATEWAY))
            || self
                .gateways
                .get(Some(&self.opts.namespace), name)
                .is_some()
    }

    /// On the gateway Node: the Gateway's `DataplaneReady` condition, written where it changed
    /// (the member's controller shows it in the ClusterSet's status, `mcctl get clusterset`).
    /// The agent is its only writer: a merge patch of the whole list.
    async fn gateway_condition(
        &self,
        encryption: Option<&(&'static str, &'static str, String)>,
    ) -> usize {
        let (ns, node) = (&self.opts.namespace, &self.opts.node_name);
        let Some(gateway) = self.gateways.get(Some(ns), node) else {
            return 0;
        };
        let stored_encryption = gateway.condition(TRAFFIC_ENCRYPTED);
        let mut encrypted = encryption
            .map(|(status, reason, message)| condition(TRAFFIC_ENCRYPTED, status, reason, message));
        let encryption_same = match (&encrypted, stored_encryption) {
            (Some(want), Some(have)) => same(have, want),
            (None, None) => true,
            _ => false,
        };
        let dataplane = dataplane_condition(self.not_ready.as_deref(), gateway.dataplane_ready());
        if dataplane.is_none() && encryption_same {
            return 0;
        }
        let Some(c) = dataplane.or_else(|| gateway.dataplane_ready().cloned()) else {
            return 0;
        };
        if let Some(e) = encrypted.as_mut() {
            keep_transition_time(e, stored_encryption.map(std::slice::from_ref));
        }
        let api = Api::<Gateway>::namespaced(self.client.clone(), ns);
        let conditions: Vec<&Condition> = std::iter::once(&c).chain(encrypted.as_ref()).collect();
        // A merge-patch body: generic JSON by nature (the fields it sets are typed in mc-api).
        let status = serde_json::json!({"conditions": conditions});
        match self.writer.patch_status(&api, node, status).await {
            Ok(()) => {
                tracing::info!(
                    status = c.status,
                    reason = c.reason,
                    "Gateway condition {DATAPLANE_READY} written"
                );
                0
            }
            // Another Node was elected meanwhile.
            Err(kube::Error::Api(e)) if e.code == 404 => 0,
            Err(e) => {
                tracing::warn!("writing the Gateway's {DATAPLANE_READY} condition: {e}");
                1
            }
        }
    }

    /// On the gateway with encryption on: its WireGuard public key in its Gateway object
    /// (`wireGuard.publicKey`, as antrea-agent writes it), which the member's controller carries
    /// in the ClusterInfo to every other member. The private key never leaves the Node.
    async fn publish_wireguard_key(&self, key: &str) -> usize {
        let (ns, node) = (&self.opts.namespace, &self.opts.node_name);
        let Some(gateway) = self.gateways.get(Some(ns), node) else {
            return 0;
        };
        let published = gateway
            .spec
            .wire_guard
            .as_ref()
            .and_then(|w| w.public_key.as_deref());
        if published == Some(key) {
            return 0;
        }
        let api = Api::<Gateway>::namespaced(self.client.clone(), ns);
        // A merge-patch body: generic JSON by nature (the fields it sets are typed in mc-api).
        let patch = serde_json::json!({"wireGuard": {"publicKey": key}});
        match api
            .patch(
                node,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => {
                tracing::info!(
                    public_key = key,
                    "WireGuard public key published in the Gateway"
                );
                0
            }
            Err(kube::Error::Api(e)) if e.code == 404 => 0,
            Err(e) => {
                tracing::warn!("publishing the WireGuard public key in the Gateway: {e}");
                1
            }
        }
    }

    /// An Event on this Node: Warning `StraitDataplaneNotReady` with the reason when the
    /// dataplane is not ready (or the reason changed), Normal `StraitDataplaneReady` when it is
    /// again. A failed write is logged; the readiness endpoint says the same.
    async fn node_event(&self, not_ready: Option<&str>) {
        let (type_, reason, note) = match not_ready {
            Some(why) => (
                EventType::Warning,
                "StraitDataplaneNotReady",
                // An Event's note holds at most 1 kB.
                why.chars().take(1000).collect::<String>(),
            ),
            None if self.not_ready.is_some() => (
                EventType::Normal,
                "StraitDataplaneReady",
                "Strait's dataplane on this Node is ready".to_owned(),
            ),
            None => return,
        };
        let node = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(self.opts.node_name.clone()),
            ..Default::default()
        };
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: "Attach".into(),
            secondary: None,
        };
        if let Err(e) = self.events.publish(&event, &node).await {
            tracing::warn!(
                "cannot write the Event {reason} on Node {}: {e}",
                self.opts.node_name
            );
        }
    }
}

/// What a pass leaves for the agent to write and report.
struct Pass {
    /// The gateway with encryption on: the public key its Gateway object must carry.
    wireguard_key: Option<String>,
    /// The gateway: its `TrafficEncrypted` condition (status, reason, message), when encryption
    /// is on here or anywhere in the ClusterSet.
    encryption: Option<(&'static str, &'static str, String)>,
    not_ready: Option<String>,
    /// Everything wrong right now (logged when it first appears).
    problems: Vec<String>,
    /// On the active gateway with stretched NetworkPolicy: what Strait enforces of each policy.
    coverage: Option<BTreeMap<(Option<String>, String), Coverage>>,
    /// On the active gateway: the remote gateways its prober probes.
    probes: Option<crate::probe::Setup>,
}

impl Pass {
    /// A pass that stopped before the maps, for `why`: not ready, with that one problem.
    fn failed(why: String) -> Self {
        Pass {
            wireguard_key: None,
            encryption: None,
            not_ready: Some(why.clone()),
            problems: vec![why],
            coverage: None,
            probes: None,
        }
    }
}

/// What the watches (and kube-proxy) say, for one pass.
struct Seen<'a> {
    gateways: &'a Watched<Gateway>,
    infos: &'a Watched<ClusterInfoImport>,
    nodes: &'a Watched<Node>,
    stretched: Option<&'a Stretched>,
    proxy_mode: Option<&'a ProxyMode>,
    /// This cluster's exports, once their watches have listed them (gateway candidates only).
    exported: Option<Vec<ExportedService>>,
}

/// One pass over everything: finds this Node and attaches (once), computes the desired state
/// (with the gateway's WireGuard device), then applies it step by step ([`Apply`]): the
/// WireGuard peers, the maps, the netfilter programs, forwarding, the kernel routes, the
/// routed-via-gateway flag and the check of the uplink's chains; and says what the agent is
/// to write (conditions, the WireGuard key) and probe.
fn pass(opts: &RunOptions, attached: &mut Option<Attached>, seen: Seen) -> Pass {
    let all_nodes = seen.nodes.all();
    let node_ip = match this_node_ip(opts, seen.nodes) {
        Ok(ip) => ip,
        Err(why) => return Pass::failed(why),
    };
    let a = match attached_now(opts, attached, node_ip) {
        Ok(a) => a,
        Err(why) => return Pass::failed(why),
    };
    let stretched = seen.stretched.is_some();
    let mut inputs = pass_inputs(opts, a, node_ip, &all_nodes, seen);
    let (mut want, wireguard_problem) = desired_with_device(opts, a, &mut inputs);
    let toward = want.routes_toward();
    // Only routes already in place toward this gateway, for every prefix, let the programs keep
    // the kernel's Ethernet header (after a gateway change or a new cluster, the flag follows
    // the routes, never leads them).
    want.config.flags |= want.routed_flag(a.routed.as_ref());
    let mut problems = Problems::of(&want);
    if let Some(e) = wireguard_problem {
        problems.fail(e);
    }
    let mut apply = Apply {
        opts,
        a,
        want,
        problems,
    };
    // The remote gateways as the device's peers (before the maps send anything their way).
    let wireguard_key = apply.wireguard_peers();
    let maps_written = apply.write_maps();
    if let Err(e) = &maps_written {
        apply.problems.fail(e.clone());
    }
    let policy_linked = apply.link_programs(maps_written.is_ok());
    apply.enable_forwarding();
    apply.sync_routes(toward, maps_written.is_ok());
    apply.settle_routed_flag();
    apply.check_programs_ahead();
    let Apply {
        a,
        mut want,
        problems,
        ..
    } = apply;
    let is_gateway = want.config.role == mc_common::dataplane::ROLE_GATEWAY;
    // The active gateway says on each policy what Strait enforces of it (nothing new while its
    // policy program could not be linked: the conditions stay as they were until a pass links it).
    let coverage = (is_gateway && stretched && policy_linked)
        .then(|| std::mem::take(&mut want.policy.coverage));
    let encryption = is_gateway
        .then(|| encryption_condition(opts, &want, a.wireguard.is_some()))
        .flatten();
    let probes = is_gateway.then(|| probe_setup(opts, node_ip, &want, &inputs.cluster_infos));
    Pass {
        wireguard_key,
        encryption,
        not_ready: problems.not_ready,
        problems: problems.all,
        coverage,
        probes,
    }
}

/// This Node's InternalIP, or why there is none to read.
fn this_node_ip(opts: &RunOptions, nodes: &Watched<Node>) -> Result<Ipv4Addr, String> {
    let Some(node) = nodes.get(None, &opts.node_name) else {
        return Err(format!(
            "Node {:?} not found: set NODE_NAME (or --node-name) to this Node's name",
            opts.node_name
        ));
    };
    internal_ip(&node).ok_or_else(|| format!("Node {} has no IPv4 InternalIP", opts.node_name))
}

/// The attached dataplane, attaching it first when the agent has not yet.
fn attached_now<'a>(
    opts: &RunOptions,
    attached: &'a mut Option<Attached>,
    node_ip: Ipv4Addr,
) -> Result<&'a mut Attached, String> {
    if attached.is_none() {
        // Loading and verifying the programs keeps this thread for seconds: off the runtime's
        // worker (`block_in_place` hands its queue and the I/O driver to another thread), so
        // that the watches, /readyz and a SIGTERM are served meanwhile. (Measured: a SIGTERM
        // during the load was acted on only when the load ended, 3 s later.) The agent's
        // runtime is multi-threaded (main.rs); `block_in_place` panics on a current-thread one.
        *attached = Some(tokio::task::block_in_place(|| attach(opts, node_ip))?);
    }
    attached.as_mut().ok_or_else(|| "not attached".to_owned())
}

/// What the desired state is computed from: the watched objects (`all_nodes`: the Nodes as the
/// pass first listed them), the agent config, and what the kernel says of the uplink (its
/// subnets, its MTU, whether it is a veth into another namespace).
fn pass_inputs(
    opts: &RunOptions,
    a: &mut Attached,
    node_ip: Ipv4Addr,
    all_nodes: &[std::sync::Arc<Node>],
    seen: Seen,
) -> Inputs {
    let Seen {
        gateways,
        infos,
        stretched,
        proxy_mode,
        exported,
        ..
    } = seen;
    let mut inputs = Inputs {
        node_name: opts.node_name.clone(),
        node_ip: Some(node_ip),
        gateways: gateway_objects(gateways),
        cluster_infos: cluster_info_objects(infos),
        local_nodes: all_nodes.iter().filter_map(|n| internal_ip(n)).collect(),
        local_pod_cidrs: local_pod_cidrs(all_nodes, gateways),
        pod_to_pod: opts.config.enable_pod_to_pod_connectivity,
        tunnel_port: opts.config.tunnel_port,
        uplink_subnets: routes::subnets_of(&a.uplink),
        mtu: tunnel_mtu(
            uplink_mtu(&a.uplink),
            opts.config.tunnel_mtu,
            opts.config.encryption(),
        ),
        encryption: opts.config.encryption(),
        wireguard_port: opts.config.wire_guard.port,
        uplink_peer: a.uplink_peer.current(&a.uplink),
        exported,
        policy_capacity: a.dataplane.policy_capacity(),
        ..Default::default()
    };
    if let Some(s) = stretched {
        let node_ips: BTreeMap<String, Ipv4Addr> = all_nodes
            .iter()
            .filter_map(|n| Some((n.name_any(), internal_ip(n)?)))
            .collect();
        s.inputs(&mut inputs, &node_ips);
        inputs.proxy_mode = proxy_mode.cloned();
    }
    inputs
}

/// The Gateway objects, as the desired state reads them.
fn gateway_objects(gateways: &Watched<Gateway>) -> Vec<GatewayObject> {
    gateways
        .all()
        .iter()
        .map(|g| GatewayObject {
            name: g.name_any(),
            gateway_ip: g.spec.gateway_ip.clone(),
            internal_ip: g.spec.internal_ip.clone(),
            service_cidr: g.spec.service_cidr.clone(),
        })
        .collect()
}

/// The ClusterInfoImports, as the desired state reads them.
fn cluster_info_objects(infos: &Watched<ClusterInfoImport>) -> Vec<ClusterInfoObject> {
    infos
        .all()
        .iter()
        .map(|c| ClusterInfoObject {
            name: c.name_any(),
            cluster_id: c.spec.0.cluster_id.clone(),
            service_cidr: c.spec.0.service_cidr.clone(),
            gateway_ips: c
                .spec
                .0
                .gateway_infos
                .iter()
                .filter_map(|g| g.gateway_ip.clone())
                .collect(),
            pod_cidrs: c.spec.0.pod_cidrs.clone(),
            wireguard_public_key: c
                .spec
                .0
                .wire_guard
                .as_ref()
                .and_then(|w| w.public_key.clone()),
        })
        .collect()
}

/// The local Pod CIDRs: the Nodes' and those the member controller announces (it reads the
/// CNI's own objects: Calico's IPPools, Cilium's CiliumNodes), from the Gateway.
fn local_pod_cidrs(all_nodes: &[std::sync::Arc<Node>], gateways: &Watched<Gateway>) -> Vec<String> {
    all_nodes
        .iter()
        .filter_map(|n| n.spec.as_ref())
        .flat_map(|s| s.pod_cidrs.clone().unwrap_or_default())
        .chain(gateways.all().iter().flat_map(|g| {
            g.annotations()
                .get(mc_api::names::annotations::POD_CIDRS)
                .map(|list| list.split(',').map(|c| c.trim().to_owned()).collect())
                .unwrap_or_else(Vec::new)
        }))
        .filter(|c| !c.is_empty())
        .collect()
}

/// The desired state. Encryption on: the gateway's WireGuard device (a Node that is no longer
/// the gateway closes its own), then the state again with the device in it; off: an earlier
/// agent's kernel device is closed. Returns the device's problem too, if it has one.
fn desired_with_device(
    opts: &RunOptions,
    a: &mut Attached,
    inputs: &mut Inputs,
) -> (Desired, Option<String>) {
    let mut want = desired(inputs);
    let mut wireguard_problem = None;
    if !opts.config.encryption()
        && a.wireguard.is_none()
        && wireguard::is_kernel_device(wireguard::DEVICE)
    {
        close_kernel_device("trafficEncryptionMode is not wireGuard");
        a.dataplane.forget_wireguard_link(wireguard::DEVICE);
    }
    if opts.config.encryption() {
        let is_gateway = want.config.role == mc_common::dataplane::ROLE_GATEWAY;
        match wireguard_up(opts, a, is_gateway, inputs.mtu) {
            Ok(Some(device)) => {
                inputs.wireguard_device = Some(device);
                want = desired(inputs);
            }
            Ok(None) => {}
            Err(e) => wireguard_problem = Some(e),
        }
    }
    (want, wireguard_problem)
}

/// What went wrong in a pass so far: every problem (logged when it first appears), and why the
/// agent is not ready, if it is not.
struct Problems {
    all: Vec<String>,
    not_ready: Option<String>,
}

impl Problems {
    /// The desired state's: its skipped entries, and why it is not ready.
    fn of(want: &Desired) -> Self {
        let mut all = want.skipped.clone();
        if let Some(why) = &want.not_ready {
            all.push(why.clone());
        }
        Self {
            all,
            not_ready: want.not_ready.clone(),
        }
    }

    /// A problem that leaves the agent not ready (the latest such one is the reason).
    fn fail(&mut self, why: String) {
        self.all.push(why.clone());
        self.not_ready = Some(why);
    }

    /// A problem that leaves the agent not ready, unless something earlier in the pass already
    /// did (whose reason stays).
    fn fail_unless_failed(&mut self, why: String) {
        self.all.push(why.clone());
        self.not_ready.get_or_insert(why);
    }

    /// A problem that leaves readiness as it is.
    fn note(&mut self, why: String) {
        self.all.push(why);
    }
}

/// A pass's steps on the attached dataplane once the desired state is known, in the order
/// [`pass`] calls them: each reads the state and adds what went wrong.
struct Apply<'a> {
    opts: &'a RunOptions,
    a: &'a mut Attached,
    want: Desired,
    problems: Problems,
}

impl Apply<'_> {
    /// The remote gateways as the WireGuard device's peers; the device's public key, while this
    /// agent has one up.
    fn wireguard_peers(&mut self) -> Option<String> {
        let wg = self.a.wireguard.as_mut()?;
        if let Err(e) = wg.device.set_peers(&self.want.wireguard_peers) {
            self.problems.fail(e.to_string());
        }
        Some(wg.public_key.clone())
    }

    /// Makes the maps equal to the desired state (logging what changed).
    fn write_maps(&mut self) -> Result<(), String> {
        write_maps(&mut self.a.dataplane, &self.want)
    }

    /// The netfilter programs: the policy program follows the maps (linked once they hold what
    /// it decides by, taken off once they say there is nothing to decide here); the masquerade
    /// program stays linked (again, if something took its link away). Returns false when the
    /// policy program could not be linked or unlinked.
    fn link_programs(&mut self, maps_written: bool) -> bool {
        let mut policy_linked = true;
        if let (true, Some(hook)) = (maps_written, self.a.policy.as_mut())
            && let Err(e) = link_policy(hook, self.want.decides_policy())
        {
            policy_linked = false;
            self.problems.fail(e);
        }
        if let Some(hook) = self.a.masq.as_mut()
            && let Err(e) = hook.attach()
        {
            self.problems
                .fail(format!("linking the masquerade program: {e}"));
        }
        policy_linked
    }

    /// The gateway forwards IPv4 (`ip_forward=1`, the old value recorded for `uninstall`).
    fn enable_forwarding(&mut self) {
        if self.want.config.role != mc_common::dataplane::ROLE_GATEWAY {
            return;
        }
        match self.opts.host.set_sysctl("net/ipv4/ip_forward", "1") {
            Ok(Some(old)) => {
                tracing::info!(old, "enabled IPv4 forwarding on the gateway (ip_forward=1)")
            }
            Ok(None) => {}
            Err(e) => self
                .problems
                .note(format!("enabling IPv4 forwarding on the gateway: {e}")),
        }
    }

    /// The kernel routes to the remote prefixes, toward `toward`, and what they carry whole
    /// ([`Attached::routed`]). The routes follow the maps: if these could not be written, the
    /// programs may still tunnel as before, and moving the routes now could send that traffic
    /// toward another gateway. They stay as they are, and the flag waits for a pass that syncs
    /// them.
    fn sync_routes(&mut self, toward: Option<Ipv4Addr>, maps_written: bool) {
        let a = &mut *self.a;
        let prefixes: BTreeSet<_> = self.want.routes.keys().copied().collect();
        if !maps_written {
            a.routed = None;
            return;
        }
        match routes::sync(&a.uplink, &prefixes, toward) {
            Ok(r) => {
                // Only what Strait's routes carry whole: a prefix another route wins (in part)
                // keeps the Node's egress looking up the next hop itself (flag 1 stays off).
                a.routed = toward
                    .filter(|_| !prefixes.is_empty())
                    .map(|toward| Routed {
                        toward,
                        prefixes: r.routed.clone(),
                    });
                if !r.added.is_empty() || !r.removed.is_empty() {
                    tracing::info!(uplink = a.uplink, added = ?r.added.iter().map(ToString::to_string).collect::<Vec<_>>(), removed = ?r.removed, "routes to remote prefixes updated");
                }
                // Said once per change, as every problem (routes of someone else's win over
                // Strait's: traffic to those addresses goes where they lead).
                for s in &r.shadowed {
                    self.problems.note(format!("remote prefix {s}"));
                }
            }
            Err(e) => {
                a.routed = None;
                self.problems
                    .fail_unless_failed(format!("routes to remote prefixes: {e}"));
            }
        }
    }

    /// [`CONFIG_ROUTED_VIA_GATEWAY`](mc_common::dataplane::CONFIG_ROUTED_VIA_GATEWAY) as the
    /// routes now are, written to the maps when it changes. Turning the flag on waits for a
    /// pass with nothing wrong; turning it off never waits (a failed route sync leaves the
    /// kernel's routes unknown).
    fn settle_routed_flag(&mut self) {
        let want = &mut self.want;
        let routed = want.routed_flag(self.a.routed.as_ref());
        let flags = (want.config.flags & !mc_common::dataplane::CONFIG_ROUTED_VIA_GATEWAY) | routed;
        if flags != want.config.flags && (routed == 0 || self.problems.not_ready.is_none()) {
            want.config.flags = flags;
            if let Err(e) = self.write_maps() {
                self.problems.fail(e);
            }
        }
    }

    /// Strait's programs first in the uplink's TCX chains (they attach there): a program that
    /// came before them since may end the chain before they run.
    fn check_programs_ahead(&mut self) {
        let a = &mut *self.a;
        let ahead = a.dataplane.programs_ahead(&a.uplink);
        if !ahead.is_empty() {
            self.problems.fail(format!(
                "programs run before Strait's on the uplink {} ({}): traffic they end with TC_ACT_OK or TC_ACT_SHOT never reaches Strait's programs; detach them or have them attach after Strait's",
                a.uplink,
                ahead.join(", ")
            ));
        }
    }
}

/// Makes the maps equal to `want`; logs what changed, if anything did.
fn write_maps(dataplane: &mut Dataplane, want: &Desired) -> Result<(), String> {
    let report = dataplane
        .maps()
        .map_err(|e| e.to_string())
        .and_then(|mut maps| {
            sync::apply(&mut maps, want).map_err(|e| format!("writing the maps: {e}"))
        })?;
    if report.changed() {
        log_change(want, &report);
    }
    Ok(())
}

/// The active gateway's prober's targets: every remote cluster's gateway, with the name of its
/// ClusterInfoImport (where the `TunnelUp` condition goes).
fn probe_setup(
    opts: &RunOptions,
    node_ip: Ipv4Addr,
    want: &Desired,
    cluster_infos: &[ClusterInfoObject],
) -> crate::probe::Setup {
    crate::probe::Setup {
        node_ip,
        gateway_ip: Ipv4Addr::from(want.config.gateway_ip),
        port: opts.config.tunnel_port,
        wireguard_port: opts
            .config
            .encryption()
            .then_some(opts.config.wire_guard.port),
        targets: want
            .clusters
            .iter()
            .map(|c| crate::probe::Target {
                cluster_id: c.cluster_id.clone(),
                info_name: cluster_infos
                    .iter()
                    .find(|i| i.cluster_id.as_deref() == Some(c.cluster_id.as_str()))
                    .map(|i| i.name.clone())
                    .unwrap_or_default(),
                gateway_ip: c.gateway_ip,
                index: c.index,
            })
            .collect(),
    }
}

/// The gateway's `TrafficEncrypted` condition: with encryption on, True when the device is up
/// and every remote cluster is a WireGuard peer, else False naming what is missing; with it off,
/// False when some remote cluster encrypts (it drops this cluster's traffic), else none.
fn encryption_condition(
    opts: &RunOptions,
    want: &Desired,
    device_up: bool,
) -> Option<(&'static str, &'static str, String)> {
    let others = want.encryption_mismatch.join(", ");
    if !opts.config.encryption() {
        return (!others.is_empty()).then(|| {
            (
                "False",
                "ModeMismatch",
                format!(
                    "clusters {others} encrypt traffic between gateways (WireGuard) and this cluster does not: they drop its traffic; set the same trafficEncryptionMode in every member"
                ),
            )
        });
    }
    Some(if !device_up {
        (
            "False",
            "DeviceNotUp",
            format!(
                "the WireGuard device {} is not up: traffic to remote clusters is dropped (the agent's log says why)",
                wireguard::DEVICE
            ),
        )
    } else if !others.is_empty() {
        (
            "False",
            "ModeMismatch",
            format!(
                "clusters {others} announce no WireGuard key (they run without trafficEncryptionMode: wireGuard, or have not published one yet): traffic to them is dropped, never sent in plaintext"
            ),
        )
    } else {
        (
            "True",
            "WireGuard",
            format!(
                "traffic to {} remote clusters goes through WireGuard ({}, UDP {})",
                want.wireguard_peers.len(),
                wireguard::DEVICE,
                opts.config.wire_guard.port
            ),
        )
    })
}

/// Encryption on: the WireGuard device while this Node is the gateway (started with the Node's
/// key and the program on its ingress), none otherwise; what the programs are told of it.
fn wireguard_up(
    opts: &RunOptions,
    a: &mut Attached,
    is_gateway: bool,
    mtu: u32,
) -> Result<Option<mc_common::dataplane::WireGuardConfig>, String> {
    if !is_gateway {
        if let Some(wg) = a.wireguard.take() {
            wg.device.close();
            a.dataplane.forget_wireguard_link(wireguard::DEVICE);
            tracing::info!(
                "no longer the gateway: WireGuard device {} closed",
                wireguard::DEVICE
            );
        } else {
            // An earlier agent's kernel device (the gateway moved while this Node's agent
            // restarted): not this Node's to keep.
            close_kernel_device("this Node is not the gateway");
            a.dataplane.forget_wireguard_link(wireguard::DEVICE);
        }
        return Ok(None);
    }
    if let Some(wg) = &a.wireguard {
        // The device as this agent made it, unless someone deleted it (`ip link del`): then
        // it is made again, and the maps learn its new index.
        if nix::net::if_::if_nametoindex(wireguard::DEVICE).ok() == Some(wg.config.ifindex) {
            return Ok(Some(wg.config));
        }
        tracing::warn!(
            device = wireguard::DEVICE,
            "the WireGuard device is gone or was made again outside the agent: starting it anew"
        );
        a.wireguard = None;
        a.dataplane.forget_wireguard_link(wireguard::DEVICE);
    }
    let key =
        wireguard::KeyPair::load_or_create(opts.host.wireguard_key()).map_err(|e| e.to_string())?;
    let port = opts.config.wire_guard.port;
    let device = wireguard::Device::start(
        wireguard::DEVICE,
        port,
        mtu,
        &key,
        opts.config.wireguard_implementation(),
    )
    .map_err(|e| e.to_string())?;
    // The kernel's device stays when the agent stops, and so does its program (pinned); a
    // restarted agent replaces the program inside the link.
    a.dataplane
        .attach_wireguard(device.name(), a.mode, device.outlives_process())
        .map_err(|e| format!("attaching to {}: {e}", device.name()))?;
    let index = |dev: &str| {
        nix::net::if_::if_nametoindex(dev).map_err(|e| format!("no interface {dev}: {e}"))
    };
    let mac = routes::mac_address(&a.uplink).map_err(|e| e.to_string())?;
    let config = mc_common::dataplane::WireGuardConfig {
        ifindex: index(device.name())?,
        uplink_ifindex: index(&a.uplink)?,
        uplink_mac: mac,
        port,
    };
    let public_key = key.public_base64();
    tracing::info!(
        device = device.name(),
        implementation = device.implementation(),
        port,
        mtu,
        public_key,
        "WireGuard device up: traffic between gateways is encrypted"
    );
    a.wireguard = Some(WireGuardUp {
        device,
        config,
        public_key,
    });
    Ok(Some(config))
}

/// Deletes an earlier agent's kernel WireGuard device that this agent does not use (`why`).
fn close_kernel_device(why: &str) {
    match wireguard::remove_kernel_device(wireguard::DEVICE) {
        Ok(true) => tracing::info!(
            device = wireguard::DEVICE,
            "deleted the kernel's WireGuard device an earlier agent left: {why}"
        ),
        Ok(false) => {}
        Err(e) => tracing::warn!(device = wireguard::DEVICE, "{e}"),
    }
}

/// Links the policy program at PREROUTING when this Node has something to decide, else takes it
/// off (a Node without it spends nothing per packet on the policy).
fn link_policy(hook: &mut PolicyHook, decide: bool) -> Result<(), String> {
    if decide {
        let linked = hook
            .attach()
            .map_err(|e| format!("linking the stretched NetworkPolicy program: {e}"))?;
        if linked {
            tracing::info!(
                link = %hook.link_path().display(),
                "linked the policy program at netfilter's PREROUTING, after the DNAT: this Node has flows to decide"
            );
        }
    } else if hook
        .detach()
        .map_err(|e| format!("unlinking the stretched NetworkPolicy program: {e}"))?
    {
        tracing::info!("took the policy program off PREROUTING: nothing on this Node to decide");
    }
    Ok(())
}

/// The Gateway's `DataplaneReady` condition for this pass's readiness, or None when the stored
/// one already says it (its transition time kept while the status stays).
fn dataplane_condition(not_ready: Option<&str>, stored: Option<&Condition>) -> Option<Condition> {
    let mut c = match not_ready {
        None => condition(
            DATAPLANE_READY,
            "True",
            "Attached",
            "Strait's programs are attached on the gateway Node and follow the ClusterSet",
        ),
        // A condition's message is for people: the reason as the agent's readiness gives it,
        // bounded like the Node Event's note.
        Some(why) => condition(
            DATAPLANE_READY,
            "False",
            "NotReady",
            &why.chars().take(1000).collect::<String>(),
        ),
    };
    if stored.is_some_and(|s| same(s, &c)) {
        return None;
    }
    keep_transition_time(&mut c, stored.map(std::slice::from_ref));
    Some(c)
}

/// The `EnforcedByStrait` condition of every policy whose stored one differs from what
/// `coverage` says, as (namespace, name, condition).
fn policy_conditions(
    coverage: &BTreeMap<(Option<String>, String), Coverage>,
    stored: &BTreeMap<(Option<String>, String), Vec<PolicyCondition>>,
    now: &str,
) -> Vec<(Option<String>, String, PolicyCondition)> {
    let mut out = Vec::new();
    for (key, cover) in coverage {
        let Some(conditions) = stored.get(key) else {
            continue;
        };
        let (enforced, reason, message) = cover.condition();
        let status = if enforced { "True" } else { "False" };
        let old = conditions.iter().find(|c| c.type_ == ENFORCED_CONDITION);
        if old.is_some_and(|c| {
            c.status == status
                && c.reason.as_deref() == Some(reason)
                && c.message.as_deref() == Some(message.as_str())
        }) {
            continue;
        }
        let last_transition_time = match old {
            Some(c) if c.status == status => c.last_transition_time.clone(),
            _ => Some(now.to_owned()),
        };
        out.push((
            key.0.clone(),
            key.1.clone(),
            PolicyCondition {
                type_: ENFORCED_CONDITION.to_owned(),
                status: status.to_owned(),
                last_transition_time,
                reason: Some(reason.to_owned()),
                message: Some(message),
            },
        ));
    }
    out
}

fn attach(opts: &RunOptions, node_ip: Ipv4Addr) -> Result<Attached, String> {
    let uplink = if opts.config.uplink.is_empty() {
        routes::interface_with_address(node_ip).ok_or_else(|| {
            format!(
                "no interface holds the Node's InternalIP {node_ip}: set multicluster.uplink in the agent config"
            )
        })?
    } else {
        opts.config.uplink.clone()
    };
    let layout = PinLayout::new(&opts.config.pin_path);
    forget_gone_wireguard(&layout);
    let mut dataplane = Dataplane::load(layout.clone()).map_err(|e| e.to_string())?;
    let mut policy = None;
    let mut masq = None;
    if !opts.config.enable_stretched_network_policy {
        // An earlier agent's policy program, with stretched policy on then, does not stay.
        match crate::netfilter::unlink(&layout) {
            Ok(true) => tracing::info!(
                "took an earlier agent's policy program off PREROUTING: stretched NetworkPolicy is off"
            ),
            Ok(false) => {}
            Err(e) => tracing::warn!("cannot remove an earlier policy program's link: {e}"),
        }
    } else {
        policy = Some(
            PolicyHook::load(crate::EBPF_OBJECT, &layout)
                .map_err(|e| format!("the stretched NetworkPolicy program: {e}"))?,
        );
        // The Pods' label IDs survive a CNI's masquerade only through this program: linked for
        // as long as stretched policy is on, on every Node.
        let mut hook = PolicyHook::load_hook(crate::EBPF_OBJECT, &layout, Hook::Masquerade)
            .map_err(|e| format!("the masquerade program: {e}"))?;
        if hook
            .attach()
            .map_err(|e| format!("linking the masquerade program: {e}"))?
        {
            tracing::info!(
                link = %hook.link_path().display(),
                "linked the masquerade program at netfilter's POSTROUTING, after the source NAT: a Pod's flow the CNI masquerades keeps its label ID"
            );
        }
        masq = Some(hook);
        let layout = layout.clone();
        tokio::spawn(async move {
            if let Err(e) = crate::reject::serve(layout).await {
                tracing::warn!("rejected packets get no answer (they are still dropped): {e}");
            }
        });
    }
    let mode = match crate::dataplane::AttachMode::parse(&opts.config.tc_attach) {
        Ok(Some(mode)) => mode,
        _ => crate::dataplane::AttachMode::for_kernel(),
    };
    let hooks = dataplane
        .attach_uplink_with(&uplink, mode)
        .map_err(|e| e.to_string())?;
    for hook in hooks {
        tracing::info!(
            uplink,
            direction = hook.direction.as_str(),
            program = hook.direction.program(),
            reused = hook.reused,
            mode = hook.mode.as_str(),
            "{}",
            hook.what()
        );
    }
    match opts
        .host
        .set_sysctl(&format!("net/ipv4/conf/{uplink}/rp_filter"), "2")
    {
        Ok(Some(old)) => tracing::info!(
            uplink,
            old,
            "set loose reverse-path filtering on the uplink (rp_filter=2): decapsulated packets arrive from remote prefixes"
        ),
        Ok(None) => {}
        Err(e) => tracing::warn!(uplink, error = %e, "cannot set rp_filter on the uplink"),
    }
    let uplink_peer = UplinkPeer::check(&uplink, None);
    Ok(Attached {
        dataplane,
        uplink,
        uplink_peer,
        routed: None,
        policy,
        masq,
        wireguard: None,
        mode,
    })
}

/// An earlier agent's WireGuard device that went with it (boringtun's): the programs stop
/// sending to it (`drop_wireguard_not_ready`, counted) until this agent's device is up. Also
/// when the agent stops (`mc-agent run`'s exit).
pub fn forget_gone_wireguard(layout: &PinLayout) {
    match crate::dataplane::forget_gone_wireguard_device(layout, wireguard::DEVICE) {
        Ok(true) => tracing::info!(
            "the WireGuard device of the last agent is gone: traffic to remote gateways is dropped (drop_wireguard_not_ready) until this Node's device is up"
        ),
        Ok(false) => {}
        Err(e) => tracing::warn!("cannot read or clear mc_wireguard: {e}"),
    }
}

fn log_change(want: &Desired, report: &sync::SyncReport) {
    let role = match want.config.role {
        mc_common::dataplane::ROLE_GATEWAY => "gateway",
        mc_common::dataplane::ROLE_NODE => "node",
        _ => "none",
    };
    tracing::info!(
        role,
        gateway_internal_ip = %Ipv4Addr::from(want.config.gateway_internal_ip),
        gateway_ip = %Ipv4Addr::from(want.config.gateway_ip),
        remote_clusters = ?want.clusters.iter().map(|c| c.cluster_id.as_str()).collect::<Vec<_>>(),
        routes_written = report.routes_written,
        routes_removed = report.routes_removed,
        peers_written = report.peers_written,
        peers_removed = report.peers_removed,
        pod_ids_written = report.pod_ids_written,
        pod_ids_removed = report.pod_ids_removed,
        protected_pods = want.policy.protected.len(),
        policy_written = report.policy_written,
        policy_removed = report.policy_removed,
        config_changed = report.config_changed,
        "dataplane maps updated"
    );
}

/// Counters, map occupancy and SNAT table use, for `/metrics`.
fn publish(metrics: &Metrics, attached: Option<&mut Attached>) {
    let Some(a) = attached else { return };
    if let Ok(map) = a.dataplane.counters()
        && let Ok(readings) = counters::read(&map)
    {
        for r in readings {
            let verdict = if r.drop { "drop" } else { "forward" };
            metrics.set_counter(
                "strait_dataplane_packets_total",
                &[("reason", r.name), ("verdict", verdict)],
                r.packets,
            );
            metrics.set_counter(
                "strait_dataplane_bytes_total",
                &[("reason", r.name), ("verdict", verdict)],
                r.bytes,
            );
        }
    }
    if let Ok(maps) = a.dataplane.maps() {
        let routes = maps.routes.iter().count();
        let peers = maps.peers.iter().count();
        let snat = maps.snat.keys().count();
        metrics.gauge(
            "strait_dataplane_map_entries",
            &[("map", mc_common::maps::POD_IDS)],
            maps.pod_ids.keys().count() as f64,
        );
        metrics.gauge(
            "strait_dataplane_map_entries",
            &[("map", mc_common::maps::ROUTES)],
            routes as f64,
        );
        metrics.gauge(
            "strait_dataplane_map_entries",
            &[("map", mc_common::maps::PEERS)],
            peers as f64,
        );
        metrics.gauge(
            "strait_dataplane_map_entries",
            &[("map", mc_common::maps::SNAT)],
            snat as f64,
        );
        metrics.gauge(
            "strait_dataplane_snat_table_use_ratio",
            &[],
            snat as f64 / f64::from(mc_common::dataplane::MAX_SNAT_ENTRIES),
        );
    }
    // Encryption on, the gateway: bytes each way per remote cluster, as WireGuard counts them.
    if let Some(wg) = a.wireguard.as_mut()
        && let Ok(stats) = wg.device.stats()
    {
        for s in stats {
            let cluster = wg.device.cluster_of(&s.public_key).unwrap_or_default();
            let labels = [("cluster", cluster.as_str())];
            metrics.set_counter(
                "strait_tunnel_wireguard_rx_bytes_total",
                &labels,
                s.rx_bytes,
            );
            metrics.set_counter(
                "strait_tunnel_wireguard_tx_bytes_total",
                &labels,
                s.tx_bytes,
            );
        }
    }
}

fn internal_ip(node: &Node) -> Option<Ipv4Addr> {
    node.status
        .as_ref()?
        .addresses
        .as_ref()?
        .iter()
        .filter(|a| a.type_ == "InternalIP")
        .find_map(|a| a.address.parse().ok())
}

/// How old an answer to whether the uplink is a veth into another namespace may be before a
/// reconcile pass asks again (passes run on watch events and on the resync tick): a handoff to
/// an end that moved into this namespace would be dropped by the kernel, uncounted.
const UPLINK_RECHECK: Duration = Duration::from_secs(10);

/// Whether the uplink is a veth whose other end is in another network namespace, as last asked
/// of the kernel (`routes::uplink_has_peer_elsewhere`): the gateway's hairpin then hands its
/// packets straight to that end (`CONFIG_UPLINK_PEER`).
struct UplinkPeer {
    peer: bool,
    asked: Instant,
}

impl UplinkPeer {
    /// Asks the kernel; logs what it says when it differs from `before`. A failed check is "no"
    /// (the hairpin transmits on the uplink, which works on any device).
    fn check(uplink: &str, before: Option<bool>) -> Self {
        let peer = match routes::uplink_has_peer_elsewhere(uplink) {
            Ok(peer) => peer,
            Err(e) => {
                if before != Some(false) {
                    tracing::warn!(uplink, error = %e, "cannot tell what kind of device the uplink is; the hairpin transmits on it");
                }
                false
            }
        };
        if peer && before != Some(true) {
            tracing::info!(
                uplink,
                "the uplink is a veth whose other end is in another network namespace: as the gateway, the hairpin hands its packets straight to that end (bpf_redirect_peer)"
            );
        } else if !peer && before == Some(true) {
            tracing::info!(
                uplink,
                "the uplink's other end is no longer in another network namespace: the hairpin transmits on the uplink"
            );
        }
        Self {
            peer,
            asked: Instant::now(),
        }
    }

    /// The answer, asked again when it is older than [`UPLINK_RECHECK`].
    fn current(&mut self, uplink: &str) -> bool {
        if self.asked.elapsed() >= UPLINK_RECHECK {
            *self = Self::check(uplink, Some(self.peer));
        }
        self.peer
    }
}

/// The MTU the programs fit tunnel packets to (the largest tunnel packet): the uplink's, or the
/// configured `tunnelMTU` where that is smaller (a path narrower than the uplink), less
/// WireGuard's overhead with encryption on (on every Node: their packets cross it at the gateway).
fn tunnel_mtu(uplink: u32, configured: u32, encryption: bool) -> u32 {
    let path = if configured == 0 {
        uplink
    } else {
        uplink.min(configured)
    };
    if encryption {
        path.saturating_sub(wireguard::OVERHEAD)
    } else {
        path
    }
}

/// The uplink's MTU, asked of the kernel in this network namespace (not from /sys, which can
/// belong to another namespace, as in a container with the host's sysfs).
fn uplink_mtu(uplink: &str) -> u32 {
    routes::interface_mtu(uplink).unwrap_or_else(|e| {
        tracing::warn!(uplink, error = %e, "cannot read the uplink's MTU; assuming 1500");
        1500
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The programs fit tunnel packets to the narrower of the uplink and `tunnelMTU`.
    #[test]
    fn the_tunnel_mtu_is_the_uplinks_unless_the_path_is_narrower() {
        assert_eq!(tunnel_mtu(1500, 0, false), 1500);
        assert_eq!(tunnel_mtu(9001, 1500, false), 1500);
        assert_eq!(tunnel_mtu(1500, 9001, false), 1500);
        // WireGuard's 60 bytes come off the narrower of the two.
        assert_eq!(tunnel_mtu(1500, 0, true), 1440);
        assert_eq!(tunnel_mtu(9001, 1500, true), 1440);
    }

    #[test]
    fn the_gateway_condition_says_why_and_is_written_only_when_it_changes() {
        let ready = dataplane_condition(None, None).expect("first write");
        assert_eq!(ready.status.as_deref(), Some("True"));
        assert_eq!(dataplane_condition(None, Some(&ready)), None);
        let why = "programs ahead of Strait's on eth0 (ingress): cil_from_netdev";
        let down = dataplane_condition(Some(why), Some(&ready)).expect("a change");
        assert_eq!(
            (
                down.status.as_deref(),
                down.reason.as_deref(),
                down.message.as_deref()
            ),
            (Some("False"), Some("NotReady"), Some(why))
        );
        // Another reason is another message; the status did not change, so neither does the
        // transition time.
        let mut old = down.clone();
        old.last_transition_time = None;
        let other = dataplane_condition(Some("no uplink"), Some(&old)).expect("a change");
        assert_eq!(other.last_transition_time, None);
        assert_eq!(other.message.as_deref(), Some("no uplink"));
    }

    #[test]
    fn a_policy_condition_is_written_when_it_changes_and_keeps_its_transition_time() {
        let key = (None, "p".to_owned());
        let enforced = Coverage {
            enforced: vec!["ingress[0]".into()],
            ..Default::default()
        };
        let coverage = BTreeMap::from([(key.clone(), enforced.clone())]);
        // A policy not stored (deleted meanwhile) gets nothing.
        assert!(policy_conditions(&coverage, &BTreeMap::new(), "t0").is_empty());
        let stored = BTreeMap::from([(key.clone(), Vec::new())]);
        let written = policy_conditions(&coverage, &stored, "t1");
        assert_eq!(written.len(), 1);
        let c = &written[0].2;
        assert_eq!(
            (c.status.as_str(), c.reason.as_deref()),
            ("True", Some("Enforced"))
        );
        assert_eq!(c.last_transition_time.as_deref(), Some("t1"));
        // Unchanged: nothing to write.
        let stored = BTreeMap::from([(key.clone(), vec![c.clone()])]);
        assert!(policy_conditions(&coverage, &stored, "t2").is_empty());
        // Another rule enforced: same status, new message, the old transition time.
        let mut more = enforced;
        more.enforced.push("ingress[1]".into());
        let written = policy_conditions(&BTreeMap::from([(key.clone(), more)]), &stored, "t3");
        assert_eq!(written[0].2.last_transition_time.as_deref(), Some("t1"));
        // Nothing enforced any more: False, a new transition time.
        let none = Coverage {
            in_cluster: vec!["ingress[0]".into()],
            ..Default::default()
        };
        let written = policy_conditions(&BTreeMap::from([(key, none)]), &stored, "t4");
        let c = &written[0].2;
        assert_eq!(
            (c.status.as_str(), c.reason.as_deref()),
            ("False", Some("NotEnforced"))
        );
        assert_eq!(c.last_transition_time.as_deref(), Some("t4"));
    }
}
