//! The member: joins the leader named by its ClusterSet, heartbeats, exports its ServiceExport'ed
//! Services and its ClusterInfo, imports what the leader merged, elects its Gateway, and cleans up
//! after itself when the ClusterSet goes. One level-triggered loop: each pass recomputes the
//! desired state from the watched objects (local and leader) and writes the difference. While the
//! leader is unreachable the last imports stay in place.

pub mod connection;
pub mod export;
pub mod gateway;
pub mod import;

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::{
    api::{
        core::v1::{
            Endpoints, Event, EventSource, Namespace, Node, ObjectReference, Secret, Service,
            ServiceSpec,
        },
        discovery::v1::EndpointSlice,
        networking::v1::ServiceCIDR,
    },
    apimachinery::pkg::apis::meta::v1::{Condition as MetaCondition, Time},
    jiff::Timestamp,
};
use kube::{
    Api, Client, Resource, ResourceExt as _,
    api::{ObjectMeta, PostParams},
    runtime::watcher,
};
use mc_api::{
    antrea::{ClusterNetworkPolicy, Tier},
    clusterclaim::v1alpha2::ClusterClaim,
    clusterinfo::{ClusterInfo, ClusterInfoImport, GatewayInfo},
    clusterset::{ClusterSetStatus, ClusterStatus, v1alpha2::ClusterSet},
    config::MultiClusterConfig,
    exports::{ResourceExport, ResourceExportSpec, kinds as re_kinds},
    gateway::Gateway,
    mcs::{ServiceExport, ServiceImport},
    names::{self, annotations, labels},
    net::Prefix,
};
use serde_json::json;

use crate::{
    conditions::{condition, keep_transition_time, meta_condition, same_meta},
    leader::members::same_status,
};
use connection::{Beat, Connection, Identity};
use mc_kube::{
    Metrics, Op, StatusPacer, Trigger, Watched, Writer, is_managed, run_all, watch_readiness,
};

pub struct MemberOptions {
    pub namespace: String,
    pub config: MultiClusterConfig,
    pub heartbeat: Duration,
}

struct LocalStores {
    clustersets: Watched<ClusterSet>,
    claims: Watched<ClusterClaim>,
    secrets: Watched<Secret>,
    namespaces: Watched<Namespace>,
    services: Watched<Service>,
    slices: Watched<EndpointSlice>,
    endpoints: Watched<Endpoints>,
    service_exports: Watched<ServiceExport>,
    service_imports: Watched<ServiceImport>,
    nodes: Watched<Node>,
    gateways: Watched<Gateway>,
    cluster_infos: Watched<ClusterInfoImport>,
    acnps: Watched<ClusterNetworkPolicy>,
    tiers: Watched<Tier>,
}

struct Member {
    ns: String,
    config: MultiClusterConfig,
    heartbeat: Duration,
    service_cidr: String,
    client: Client,
    trigger: Trigger,
    writer: Writer,
    metrics: Metrics,
    local: LocalStores,
    conn: Option<Connection>,
    /// A connection whose ClusterSet went, kept until the leader has forgotten us.
    leaving: Option<(Connection, Instant)>,
    /// ACNP failures already reported to the leader, and when.
    reported: HashMap<(String, String), Instant>,
    statuses: StatusPacer,
    /// Messages already logged (skipped imports, gateway problems), so a pass every 2 s does not
    /// repeat them.
    logged: BTreeSet<String>,
}

/// How long a member keeps trying to remove its announce and exports from a leader it left.
const LEAVE_RETRY: Duration = Duration::from_secs(120);
/// An ACNP import failure is reported to the leader again after this long.
const REPORT_AGAIN: Duration = Duration::from_secs(600);

fn local_watch<K>(
    client: &Client,
    ns: Option<&str>,
    trigger: &Trigger,
    what: &'static str,
) -> Watched<K>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
{
    let api = match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    Watched::new(api, watcher::Config::default(), trigger.clone(), what)
}

fn managed_watch<K>(client: &Client, trigger: &Trigger, what: &'static str) -> Watched<K>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    Watched::new(
        Api::all(client.clone()),
        watcher::Config::default().labels(&format!(
            "{}={}",
            labels::MANAGED_BY,
            labels::MANAGED_BY_VALUE
        )),
        trigger.clone(),
        what,
    )
}

/// What the member reads of a Service: its type, ClusterIPs and ports (exports), and its
/// metadata. Imported Services are compared with what is desired of them, which sets no more.
fn trim_service(svc: &mut Service) {
    svc.status = None;
    if let Some(spec) = svc.spec.take() {
        svc.spec = Some(ServiceSpec {
            type_: spec.type_,
            cluster_ip: spec.cluster_ip,
            cluster_ips: spec.cluster_ips,
            ports: spec.ports,
            ..Default::default()
        });
    }
}

/// What the member reads of an EndpointSlice: its address type, ports and each endpoint's
/// addresses and readiness (the Service it belongs to is its label).
fn trim_slice(slice: &mut EndpointSlice) {
    slice.metadata.owner_references = None;
    for e in slice.endpoints.iter_mut().flatten() {
        *e = k8s_openapi::api::discovery::v1::Endpoint {
            addresses: std::mem::take(&mut e.addresses),
            conditions: e.conditions.as_ref().map(|c| {
                k8s_openapi::api::discovery::v1::EndpointConditions {
                    ready: c.ready,
                    ..Default::default()
                }
            }),
            ..Default::default()
        };
    }
}

/// What the member reads of a Node: annotations, addresses, the Ready condition and the Pod
/// CIDRs. On a real cluster most of a Node object is its status (the image list alone is tens of
/// KiB per Node).
fn trim_node(node: &mut Node) {
    if let Some(status) = node.status.take() {
        node.status = Some(k8s_openapi::api::core::v1::NodeStatus {
            addresses: status.addresses,
            conditions: status.conditions,
            ..Default::default()
        });
    }
}

/// This cluster's Service CIDR: from the ServiceCIDR object `kubernetes`, or, on an older API
/// server, from the error a dry-run Service with an impossible ClusterIP gets.
pub async fn discover_service_cidr(client: &Client) -> anyhow::Result<String> {
    let api: Api<ServiceCIDR> = Api::all(client.clone());
    if let Ok(Some(sc)) = api.get_opt("kubernetes").await
        && let Some(cidr) = sc
            .spec
            .and_then(|s| s.cidrs)
            .into_iter()
            .flatten()
            .find(|c| c.contains('.'))
    {
        return Ok(cidr);
    }
    let svc = Service {
        metadata: ObjectMeta {
            name: Some("strait-discover-service-cidr".into()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("0.0.0.0".into()),
            ports: Some(vec![k8s_openapi::api::core::v1::ServicePort {
                port: 443,
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    };
    let api: Api<Service> = Api::namespaced(client.clone(), "default");
    let pp = PostParams {
        dry_run: true,
        ..Default::default()
    };
    match api.create(&pp, &svc).await {
        Err(kube::Error::Api(e)) => e
            .message
            .rsplit_once("valid IPs is ")
            .map(|(_, cidr)| cidr.trim().to_owned())
            .ok_or_else(|| anyhow::anyhow!("cannot discover the Service CIDR: {}", e.message)),
        Err(e) => Err(anyhow::anyhow!("cannot discover the Service CIDR: {e}")),
        Ok(_) => anyhow::bail!("cannot discover the Service CIDR: the API server accepted 0.0.0.0"),
    }
}

pub async fn run(client: Client, opts: MemberOptions, metrics: Metrics) -> anyhow::Result<()> {
    let service_cidr = if opts.config.service_cidr.is_empty() {
        let mut attempt = 0;
        loop {
            match discover_service_cidr(&client).await {
                Ok(cidr) => {
                    tracing::info!(cidr, "discovered the Service CIDR");
                    break cidr;
                }
                Err(e) if attempt < 10 => {
                    attempt += 1;
                    tracing::warn!(error = %e, "retrying");
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
                Err(e) => return Err(e.context("set serviceCIDR in the controller config")),
            }
        }
    } else {
        opts.config.service_cidr.clone()
    };
    let trigger = Trigger::new(&metrics);
    let ns = opts.namespace.as_str();
    let c = &client;
    let t = &trigger;
    let local = LocalStores {
        clustersets: local_watch(c, Some(ns), t, "ClusterSet"),
        claims: local_watch(c, Some(ns), t, "ClusterClaim"),
        secrets: local_watch(c, Some(ns), t, "Secret"),
        namespaces: Watched::new(
            Api::all(client.clone()),
            Default::default(),
            trigger.clone(),
            "Namespace",
        ),
        services: Watched::trimmed(
            Api::all(client.clone()),
            Default::default(),
            trigger.clone(),
            "Service",
            trim_service,
        ),
        // The slices of Services (the exports' endpoints), not those the API server mirrors
        // from the Endpoints we import (they carry our label; nothing here reads them).
        slices: Watched::trimmed(
            Api::all(client.clone()),
            watcher::Config::default().labels(&format!(
                "kubernetes.io/service-name,{}!={}",
                labels::MANAGED_BY,
                labels::MANAGED_BY_VALUE
            )),
            trigger.clone(),
            "EndpointSlice",
            trim_slice,
        ),
        endpoints: managed_watch(c, t, "Endpoints"),
        service_exports: local_watch(c, None, t, "ServiceExport"),
        service_imports: local_watch(c, None, t, "ServiceImport"),
        nodes: Watched::trimmed(
            Api::all(client.clone()),
            Default::default(),
            trigger.clone(),
            "Node",
            trim_node,
        ),
        gateways: local_watch(c, Some(ns), t, "Gateway"),
        cluster_infos: managed_watch(c, t, "ClusterInfoImport"),
        acnps: Watched::new(
            Api::all(client.clone()),
            Default::default(),
            trigger.clone(),
            "ClusterNetworkPolicy",
        ),
        tiers: Watched::new(
            Api::all(client.clone()),
            Default::default(),
            trigger.clone(),
            "Tier",
        ),
    };
    let mut member = Member {
        ns: opts.namespace.clone(),
        config: opts.config,
        heartbeat: opts.heartbeat,
        service_cidr,
        client: client.clone(),
        trigger: trigger.clone(),
        writer: Writer::new(metrics.clone()),
        metrics: metrics.clone(),
        local,
        conn: None,
        leaving: None,
        reported: HashMap::new(),
        statuses: StatusPacer::default(),
        logged: BTreeSet::new(),
    };
    tracing::info!(namespace = member.ns, "member controller started");
    let mut tick = tokio::time::interval(Duration::from_secs(2));
    loop {
        tokio::select! {
            _ = trigger.wait() => {}
            _ = tick.tick() => {}
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        let l = &member.local;
        match watch_readiness(&[
            ("ClusterSets", l.clustersets.health()),
            ("ClusterClaims", l.claims.health()),
            ("Secrets", l.secrets.health()),
            ("Namespaces", l.namespaces.health()),
            ("Services", l.services.health()),
            ("EndpointSlices", l.slices.health()),
            ("Endpoints", l.endpoints.health()),
            ("ServiceExports", l.service_exports.health()),
            ("ServiceImports", l.service_imports.health()),
            ("Nodes", l.nodes.health()),
            ("Gateways", l.gateways.health()),
            ("ClusterInfoImports", l.cluster_infos.health()),
        ]) {
            Err(waiting) => {
                metrics.set_ready(Some(waiting));
                continue;
            }
            Ok(failing) => metrics.set_ready(failing),
        }
        let started = Instant::now();
        let failures = member.sync().await;
        metrics.sync("member", started.elapsed(), failures);
    }
}

fn problem(reason: &'static str, message: String) -> (&'static str, String) {
    (reason, message)
}

impl Member {
    fn log_once(&mut self, message: String) {
        if self.logged.insert(message.clone()) {
            tracing::warn!("{message}");
        }
    }

    async fn sync(&mut self) -> usize {
        let mut failures = 0;
        if let Some((conn, since)) = &self.leaving {
            match conn.leave().await {
                Ok(()) => {
                    tracing::info!(leader = conn.identity.server, "left the leader");
                    self.leaving = None;
                }
                Err(e) if since.elapsed() > LEAVE_RETRY => {
                    tracing::warn!(
                        error = e,
                        "giving up leaving the leader; it will collect our exports when our announce ages out"
                    );
                    self.leaving = None;
                }
                Err(_) => {}
            }
        }
        let mut sets = self.local.clustersets.all();
        sets.sort_by_key(|s| {
            (
                s.metadata.creation_timestamp.as_ref().map(|t| t.0),
                s.name_any(),
            )
        });
        let Some(set) = sets.first().cloned() else {
            if let Some(conn) = self.conn.take() {
                tracing::info!(
                    clusterset = conn.identity.clusterset,
                    "ClusterSet deleted: leaving"
                );
                self.leave(conn).await;
            }
            self.metrics.gauge("strait_mc_leader_connected", &[], 0.0);
            return self.clean_up_all().await;
        };
        let identity = self.identity(&set).await;
        let (beat, problem) = match identity {
            Err(p) => {
                // Stop talking to the leader, but do not leave it: a Secret being rotated
                // must not withdraw this cluster's exports. Imports stay as they are.
                if self.conn.take().is_some() {
                    tracing::warn!(reason = p.0, message = p.1, "disconnected from the leader");
                }
                (None, Some(p))
            }
            Ok(id) => {
                if self.conn.as_ref().map(|c| &c.identity) != Some(&id) {
                    if let Some(old) = self.conn.take() {
                        let o = &old.identity;
                        if (&o.server, &o.leader_ns, &o.cluster_id, &o.clusterset)
                            != (&id.server, &id.leader_ns, &id.cluster_id, &id.clusterset)
                        {
                            self.leave(old).await;
                        }
                    }
                    self.writer.forget();
                    match Connection::open(id, self.trigger.clone(), self.heartbeat).await {
                        Ok(c) => {
                            // A leave still being retried for the same cluster at the same
                            // leader would delete this connection's exports and announce
                            // (they carry the same cluster ID): this connection supersedes it.
                            if let Some((old, _)) = &self.leaving {
                                let (o, n) = (&old.identity, &c.identity);
                                if (&o.server, &o.leader_ns, &o.cluster_id)
                                    == (&n.server, &n.leader_ns, &n.cluster_id)
                                {
                                    tracing::info!(
                                        "rejoined the same leader: the pending leave is dropped"
                                    );
                                    self.leaving = None;
                                }
                            }
                            self.conn = Some(c);
                        }
                        Err(e) => {
                            self.log_once(format!("cannot make a client for the leader: {e:#}"));
                        }
                    }
                }
                (self.conn.as_ref().map(Connection::beat), None)
            }
        };
        let connected = beat.as_ref().and_then(|b| b.connected) == Some(true);
        self.metrics.gauge(
            "strait_mc_leader_connected",
            &[],
            if connected { 1.0 } else { 0.0 },
        );
        failures += self.clusterset_status(&set, beat.as_ref(), problem).await;
        failures += self.elect_gateway().await;
        if let Some(conn) = self.conn.take() {
            // ServiceExport statuses wait while exports or imports are written (StatusPacer).
            let mut busy = false;
            let mut statuses = Vec::new();
            if conn.beat().is_leader && conn.own_exports.ready() {
                let (f, wrote, s) = self.export(&conn).await;
                (failures, busy, statuses) = (failures + f, wrote, s);
            }
            if conn.imports.ready() {
                let (f, wrote) = self.import(&conn).await;
                (failures, busy) = (failures + f, busy || wrote);
            }
            if !statuses.is_empty() && self.statuses.due(busy) {
                failures += run_all("ServiceExport", statuses).await;
                self.statuses.written();
            }
            self.conn = Some(conn);
        }
        failures
    }

    async fn leave(&mut self, conn: Connection) {
        match conn.leave().await {
            Ok(()) => tracing::info!(leader = conn.identity.server, "left the leader"),
            Err(e) => {
                tracing::warn!(error = e, "leaving the leader failed; retrying");
                self.leaving = Some((conn, Instant::now()));
            }
        }
    }

    /// Who we are and how to reach the leader, or what in the ClusterSet or Secret is wrong.
    async fn identity(&mut self, set: &ClusterSet) -> Result<Identity, (&'static str, String)> {
        let name = set.name_any();
        let claim = self
            .local
            .claims
            .get(Some(&self.ns), names::claims::CLUSTER_ID)
            .map(|c| c.spec.value.clone());
        let cluster_id = match set.spec.cluster_id.clone().filter(|s| !s.is_empty()) {
            Some(id) => id,
            None => {
                let id = claim.ok_or_else(|| {
                    problem(
                        "NoClusterID",
                        format!(
                            "spec.clusterID is empty and there is no ClusterClaim {} in {}",
                            names::claims::CLUSTER_ID,
                            self.ns
                        ),
                    )
                })?;
                let api: Api<ClusterSet> = Api::namespaced(self.client.clone(), &self.ns);
                let patch = json!({"spec": {"clusterID": id}});
                if let Err(e) = api
                    .patch(&name, &Default::default(), &kube::api::Patch::Merge(patch))
                    .await
                {
                    tracing::warn!(error = %e, "writing spec.clusterID back");
                }
                id
            }
        };
        let leader = set.spec.leaders.first().cloned().unwrap_or_default();
        let need = |v: Option<String>, field: &str| {
            v.filter(|s| !s.is_empty()).ok_or_else(|| {
                problem(
                    "InvalidClusterSet",
                    format!("ClusterSet {name}: {field} is empty"),
                )
            })
        };
        let leader_id = need(leader.cluster_id, "spec.leaders[0].clusterID")?;
        let server = need(leader.server, "spec.leaders[0].server")?;
        let secret_name = need(leader.secret, "spec.leaders[0].secret")?;
        let leader_ns = need(
            set.spec.namespace.clone(),
            "spec.namespace (the leader's namespace)",
        )?;
        let secret = self
            .local
            .secrets
            .get(Some(&self.ns), &secret_name)
            .ok_or_else(|| {
                problem(
                    "SecretNotFound",
                    format!(
                        "Secret {secret_name} not found in namespace {}: copy the member's token Secret from the leader",
                        self.ns
                    ),
                )
            })?;
        let (token, ca) =
            connection::read_secret(&secret).map_err(|m| problem("InvalidSecret", m))?;
        Ok(Identity {
            clusterset: name,
            cluster_id,
            leader_id,
            server,
            leader_ns,
            secret: secret_name,
            token,
            ca,
        })
    }

    async fn clusterset_status(
        &self,
        set: &ClusterSet,
        beat: Option<&Beat>,
        problem: Option<(&'static str, String)>,
    ) -> usize {
        let leader_id = set
            .spec
            .leaders
            .first()
            .and_then(|l| l.cluster_id.clone())
            .unwrap_or_default();
        let status = member_status(
            &leader_id,
            beat,
            problem,
            set.metadata.generation,
            set.status.as_ref(),
        );
        if set
            .status
            .as_ref()
            .is_some_and(|old| same_status(old, &status))
        {
            return 0;
        }
        let mut value = serde_json::to_value(&status).unwrap_or_default();
        value["clusterStatuses"] = json!(status.cluster_statuses);
        let api: Api<ClusterSet> = Api::namespaced(self.client.clone(), &self.ns);
        match self.writer.patch_status(&api, &set.name_any(), value).await {
            Ok(()) => 0,
            Err(e) => {
                tracing::warn!(error = %e, "writing ClusterSet status");
                1
            }
        }
    }

    async fn elect_gateway(&mut self) -> usize {
        let nodes = self.local.nodes.all();
        let node_refs: Vec<&Node> = nodes.iter().map(Arc::as_ref).collect();
        let mut gateways = self.local.gateways.all();
        gateways.sort_by_key(|g| g.name_any());
        let current = gateways.first().map(|g| g.name_any());
        let (chosen, problems) = gateway::elect(
            &node_refs,
            current.as_deref(),
            self.config.gateway_ip_precedence,
            &self.service_cidr,
        );
        for p in problems {
            self.log_once(p);
        }
        let api: Api<Gateway> = Api::namespaced(self.client.clone(), &self.ns);
        let mut ops: Vec<(String, Op)> = Vec::new();
        if let Some(mut gw) = chosen.clone() {
            gw.metadata.namespace = Some(self.ns.clone());
            let stored = self.local.gateways.get(Some(&self.ns), &gw.name_any());
            if self.writer.needed(&gw, Some(stored.as_deref())) {
                if current.as_deref() != Some(&gw.name_any()) {
                    tracing::info!(node = gw.name_any(), "elected the Gateway");
                }
                let (w, api) = (self.writer.clone(), api.clone());
                ops.push((
                    gw.name_any(),
                    Box::pin(async move { w.apply(&api, &gw).await }),
                ));
            }
        } else if current.is_some() {
            self.log_once("no Ready gateway candidate: annotate a Node with multicluster.antrea.io/gateway=true".into());
        }
        for g in gateways {
            let name = g.name_any();
            if chosen.as_ref().map(|c| c.name_any()) != Some(name.clone()) {
                let (w, api, ns) = (self.writer.clone(), api.clone(), self.ns.clone());
                ops.push((
                    name.clone(),
                    Box::pin(async move { w.delete(&api, &ns, &name).await }),
                ));
            }
        }
        run_all("Gateway", ops).await
    }

    fn pod_cidrs(&self) -> Vec<String> {
        if !self.config.pod_cidrs.is_empty() {
            return self.config.pod_cidrs.clone();
        }
        let cidrs: BTreeSet<String> = self
            .local
            .nodes
            .all()
            .iter()
            .flat_map(|n| {
                n.spec
                    .as_ref()
                    .and_then(|s| s.pod_cidrs.clone())
                    .unwrap_or_default()
            })
            .filter(|c| c.contains('.'))
            .collect();
        cidrs.into_iter().collect()
    }

    /// The local EndpointSlices by the Service `(ns, name)` they belong to.
    fn slices_by_service(&self) -> BTreeMap<(String, String), Vec<Arc<EndpointSlice>>> {
        let mut slices: BTreeMap<(String, String), Vec<Arc<EndpointSlice>>> = BTreeMap::new();
        for s in self.local.slices.all() {
            if let Some(svc) = s.labels().get("kubernetes.io/service-name") {
                slices
                    .entry((s.namespace().unwrap_or_default(), svc.clone()))
                    .or_default()
                    .push(s.clone());
            }
        }
        slices
    }

    /// This cluster's own side of every multi-cluster Service it imports endpoints for and
    /// also has (see `import::serveable_subsets`).
    fn own_endpoints(
        &self,
        conn: &Connection,
        imports: &[Arc<mc_api::imports::ResourceImport>],
    ) -> BTreeMap<(String, String), import::OwnEndpoints> {
        let id = &conn.identity;
        let mut slices = self.slices_by_service();
        let mut out = BTreeMap::new();
        for ri in imports {
            if ri.spec.kind.as_deref() != Some(mc_api::imports::kinds::ENDPOINTS) {
                continue;
            }
            let ns = ri.spec.namespace.clone().unwrap_or_default();
            let name = ri.spec.name.clone().unwrap_or_default();
            let Some(svc) = self.local.services.get(Some(&ns), &name) else {
                continue;
            };
            let svc_slices = slices
                .remove(&(ns.clone(), name.clone()))
                .unwrap_or_default();
            let mut addresses: BTreeSet<String> = svc
                .spec
                .iter()
                .flat_map(|s| s.cluster_ips.iter().flatten().chain(s.cluster_ip.iter()))
                .cloned()
                .collect();
            addresses.extend(
                svc_slices
                    .iter()
                    .flat_map(|s| s.endpoints.iter().flatten())
                    .flat_map(|e| e.addresses.iter().cloned()),
            );
            let re = names::resource_export(&id.cluster_id, &ns, &name, re_kinds::ENDPOINTS);
            if let Some(re) = conn.own_exports.get(Some(&id.leader_ns), &re) {
                addresses.extend(
                    re.spec
                        .endpoints
                        .iter()
                        .flat_map(|e| e.subsets.iter())
                        .flat_map(|s| s.addresses.iter().flatten())
                        .map(|a| a.ip.clone()),
                );
            }
            let refs: Vec<&EndpointSlice> = svc_slices.iter().map(Arc::as_ref).collect();
            let ready = export::decide(Some(&svc), &refs, mc_api::config::EndpointIpType::PodIP)
                .map(|e| e.subsets)
                .unwrap_or_default();
            out.insert((ns, name), import::OwnEndpoints { addresses, ready });
        }
        out
    }

    /// This cluster's Service CIDR and Pod CIDRs, those that parse.
    fn own_prefixes(&self) -> Vec<Prefix> {
        std::iter::once(self.service_cidr.clone())
            .chain(self.pod_cidrs())
            .filter_map(|c| Prefix::parse(&c).ok())
            .collect()
    }

    /// Writes this cluster's exports to the leader; returns the failures, whether anything was
    /// written, and the ServiceExport status writes to make.
    async fn export(&self, conn: &Connection) -> (usize, bool, Vec<(String, Op)>) {
        let id = &conn.identity;
        let slices = self.slices_by_service();
        let mut desired: BTreeMap<String, ResourceExport> = BTreeMap::new();
        let mut verdicts = Vec::new();
        for se in self.local.service_exports.all() {
            let (ns, name) = (se.namespace().unwrap_or_default(), se.name_any());
            let svc = self.local.services.get(Some(&ns), &name);
            let svc_slices: Vec<&EndpointSlice> = slices
                .get(&(ns.clone(), name.clone()))
                .into_iter()
                .flatten()
                .map(Arc::as_ref)
                .collect();
            let decision =
                export::decide(svc.as_deref(), &svc_slices, self.config.endpoint_ip_type);
            if let Ok(exported) = &decision {
                for re in export::exports_for(&id.cluster_id, &id.leader_ns, &ns, &name, exported) {
                    desired.insert(re.name_any(), re);
                }
            }
            verdicts.push((se, decision));
        }
        // The Gateway the election counts as current (the first by name), so that the exported
        // ClusterInfo does not flap while an old and a new Gateway briefly coexist.
        let mut gateways = self.local.gateways.all();
        gateways.sort_by_key(|g| g.name_any());
        if let Some(gw) = gateways.first() {
            let name = names::cluster_info_export(&id.cluster_id);
            let mut re = ResourceExport::new(
                &name,
                ResourceExportSpec {
                    cluster_id: Some(id.cluster_id.clone()),
                    name: Some(id.cluster_id.clone()),
                    namespace: Some(self.ns.clone()),
                    kind: Some(re_kinds::CLUSTER_INFO.into()),
                    cluster_info: Some(ClusterInfo {
                        cluster_id: Some(id.cluster_id.clone()),
                        service_cidr: gw.spec.service_cidr.clone(),
                        gateway_infos: vec![GatewayInfo {
                            gateway_ip: gw.spec.gateway_ip.clone(),
                        }],
                        pod_cidrs: self.pod_cidrs(),
                        wire_guard: gw.spec.wire_guard.clone(),
                    }),
                    ..Default::default()
                },
            );
            re.metadata.namespace = Some(id.leader_ns.clone());
            re.metadata.labels = Some(
                [
                    (
                        labels::SOURCE_KIND.to_owned(),
                        re_kinds::CLUSTER_INFO.to_owned(),
                    ),
                    (labels::SOURCE_CLUSTER_ID.to_owned(), id.cluster_id.clone()),
                ]
                .into(),
            );
            desired.insert(name, re);
        }

        let api: Api<ResourceExport> = Api::namespaced(conn.client.clone(), &id.leader_ns);
        let mut ops: Vec<(String, Op)> = Vec::new();
        for (name, re) in &desired {
            let stored = conn.own_exports.get(Some(&id.leader_ns), name);
            if self.writer.needed_exact_spec(re, Some(stored.as_deref())) {
                let (w, api, re) = (self.writer.clone(), api.clone(), re.clone());
                ops.push((
                    name.clone(),
                    Box::pin(async move { w.apply(&api, &re).await }),
                ));
            }
        }
        for re in conn.own_exports.all() {
            let name = re.name_any();
            if !desired.contains_key(&name) && re.metadata.deletion_timestamp.is_none() {
                let (w, api, ns) = (self.writer.clone(), api.clone(), id.leader_ns.clone());
                ops.push((
                    name.clone(),
                    Box::pin(async move { w.delete(&api, &ns, &name).await }),
                ));
            }
        }
        let wrote = !ops.is_empty();
        let failures = run_all("ResourceExport", ops).await;

        // ServiceExport status: Valid (as Antrea) plus the standard Ready and Conflict.
        let mut ops: Vec<(String, Op)> = Vec::new();
        for (se, decision) in verdicts {
            let (ns, name) = (se.namespace().unwrap_or_default(), se.name_any());
            let old: Vec<MetaCondition> = se
                .status
                .as_ref()
                .map(|s| s.conditions.clone())
                .unwrap_or_default();
            let c = |t: &str, s: &str, r: &str, m: &str| meta_condition(t, s, r, m, &old);
            let want = match decision {
                Err(inv) => vec![
                    c("Valid", "False", inv.reason, &inv.message),
                    c("Ready", "False", "Failed", "The ServiceExport is not valid"),
                ],
                Ok(_) => {
                    let re_name =
                        names::resource_export(&id.cluster_id, &ns, &name, re_kinds::SERVICE);
                    let verdict = conn
                        .own_exports
                        .get(Some(&id.leader_ns), &re_name)
                        .and_then(|re| re.status.as_ref()?.conditions.first().cloned());
                    let valid = c(
                        "Valid",
                        "True",
                        "Succeed",
                        "The Service is exported successfully",
                    );
                    match verdict {
                        Some(v) if v.type_.as_deref() == Some("Failure") => vec![
                            valid,
                            c("Ready", "False", "Failed", "The leader refused the export"),
                            c(
                                "Conflict",
                                "True",
                                "PortConflict",
                                v.message.as_deref().unwrap_or_default(),
                            ),
                        ],
                        Some(v) if v.status.as_deref() == Some("True") => vec![
                            valid,
                            c(
                                "Ready",
                                "True",
                                "Exported",
                                "The Service is exported to the ClusterSet",
                            ),
                            c(
                                "Conflict",
                                "False",
                                "NoConflicts",
                                "No conflicts with other exports",
                            ),
                        ],
                        _ => vec![
                            valid,
                            c("Ready", "False", "Pending", "Waiting for the leader"),
                        ],
                    }
                }
            };
            if same_meta(&old, &want) {
                continue;
            }
            let (w, api) = (
                self.writer.clone(),
                Api::<ServiceExport>::namespaced(self.client.clone(), &ns),
            );
            ops.push((
                format!("{ns}/{name}"),
                Box::pin(async move {
                    w.patch_status(&api, &name, json!({"conditions": want}))
                        .await
                }),
            ));
        }
        (failures, wrote, ops)
    }

    /// Writes the imports; returns the failures and whether anything was written.
    async fn import(&mut self, conn: &Connection) -> (usize, bool) {
        // A namespace being deleted takes its objects with it: nothing is written into it, and
        // nothing in it is deleted one by one.
        let (namespaces, terminating): (BTreeSet<String>, BTreeSet<String>) = {
            let (live, dying): (Vec<_>, Vec<_>) = self
                .local
                .namespaces
                .all()
                .into_iter()
                .partition(|n| n.metadata.deletion_timestamp.is_none());
            let names = |v: Vec<Arc<Namespace>>| v.iter().map(|n| n.name_any()).collect();
            (names(live), names(dying))
        };
        let dying = |ns: &str| terminating.contains(ns);
        let services_v = self.local.services.all();
        let services: BTreeMap<(String, String), &Service> = services_v
            .iter()
            .map(|s| {
                (
                    (s.namespace().unwrap_or_default(), s.name_any()),
                    s.as_ref(),
                )
            })
            .collect();
        let sis_v = self.local.service_imports.all();
        let service_imports: BTreeMap<(String, String), &ServiceImport> = sis_v
            .iter()
            .map(|s| {
                (
                    (s.namespace().unwrap_or_default(), s.name_any()),
                    s.as_ref(),
                )
            })
            .collect();
        let acnps_ready = self.local.acnps.ready() && self.local.tiers.ready();
        let acnps_v = self.local.acnps.all();
        let acnps: BTreeMap<String, &ClusterNetworkPolicy> =
            acnps_v.iter().map(|a| (a.name_any(), a.as_ref())).collect();
        let tiers: BTreeSet<String> = self
            .local
            .tiers
            .all()
            .iter()
            .map(|t| t.name_any())
            .collect();
        let id = conn.identity.clone();
        let imports = conn.imports.all();
        let own_prefixes = self.own_prefixes();
        let own_endpoints = self.own_endpoints(conn, &imports);
        let plan = import::plan(
            &imports,
            &import::Local {
                cluster_id: &id.cluster_id,
                member_ns: &self.ns,
                namespaces: &namespaces,
                services: &services,
                service_imports: &service_imports,
                acnps: &acnps,
                tiers: &tiers,
                own_prefixes: &own_prefixes,
                own_endpoints: &own_endpoints,
            },
        );
        let mut ops: Vec<(String, Op)> = Vec::new();
        let w = &self.writer;
        let c = &self.client;

        // Services, Endpoints and ServiceImports, namespaced; desired by (ns, name).
        fn key<K: Resource>(o: &K) -> (String, String) {
            (
                o.meta().namespace.clone().unwrap_or_default(),
                o.meta().name.clone().unwrap_or_default(),
            )
        }
        let want_svc: BTreeSet<_> = plan.services.iter().map(key).collect();
        for svc in plan.services {
            let (ns, name) = key(&svc);
            let stored = self.local.services.get(Some(&ns), &name);
            if w.needed(&svc, Some(stored.as_deref())) {
                let (w, api) = (w.clone(), Api::<Service>::namespaced(c.clone(), &ns));
                ops.push((
                    format!("{ns}/{name}"),
                    Box::pin(async move { w.apply(&api, &svc).await }),
                ));
            }
        }
        for svc in services_v.iter().filter(|s| {
            is_managed(s.as_ref()) && s.annotations().contains_key(annotations::IMPORTED_SERVICE)
        }) {
            let (ns, name) = key(svc.as_ref());
            if !want_svc.contains(&(ns.clone(), name.clone())) && !dying(&ns) {
                let (w, api) = (w.clone(), Api::<Service>::namespaced(c.clone(), &ns));
                ops.push((
                    format!("{ns}/{name}"),
                    Box::pin(async move { w.delete(&api, &ns, &name).await }),
                ));
            }
        }
        let want_eps: BTreeSet<_> = plan.endpoints.iter().map(key).collect();
        for eps in plan.endpoints {
            let (ns, name) = key(&eps);
            let stored = self.local.endpoints.get(Some(&ns), &name);
            if w.needed(&eps, Some(stored.as_deref())) {
                let (w, api) = (w.clone(), Api::<Endpoints>::namespaced(c.clone(), &ns));
                ops.push((
                    format!("{ns}/{name}"),
                    Box::pin(async move { w.apply(&api, &eps).await }),
                ));
            }
        }
        for eps in self.local.endpoints.all() {
            let (ns, name) = key(eps.as_ref());
            if !want_eps.contains(&(ns.clone(), name.clone())) && !dying(&ns) {
                let (w, api) = (w.clone(), Api::<Endpoints>::namespaced(c.clone(), &ns));
                ops.push((
                    format!("{ns}/{name}"),
                    Box::pin(async move { w.delete(&api, &ns, &name).await }),
                ));
            }
        }
        // A ServiceImport waits for its Service's ClusterIP; do not delete it meanwhile.
        let want_si: BTreeSet<_> = want_svc
            .iter()
            .map(|(ns, n)| {
                (
                    ns.clone(),
                    n.strip_prefix(names::IMPORTED_PREFIX)
                        .unwrap_or(n)
                        .to_owned(),
                )
            })
            .collect();
        for si in plan.service_imports {
            let (ns, name) = key(&si);
            let stored = self.local.service_imports.get(Some(&ns), &name);
            if w.needed(&si, Some(stored.as_deref())) {
                let (w, api) = (w.clone(), Api::<ServiceImport>::namespaced(c.clone(), &ns));
                ops.push((
                    format!("{ns}/{name}"),
                    Box::pin(async move { w.apply(&api, &si).await }),
                ));
            }
        }
        for si in sis_v.iter().filter(|s| is_managed(s.as_ref())) {
            let (ns, name) = key(si.as_ref());
            if !want_si.contains(&(ns.clone(), name.clone())) && !dying(&ns) {
                let (w, api) = (w.clone(), Api::<ServiceImport>::namespaced(c.clone(), &ns));
                ops.push((
                    format!("{ns}/{name}"),
                    Box::pin(async move { w.delete(&api, &ns, &name).await }),
                ));
            }
        }
        let want_cii: BTreeSet<_> = plan.cluster_infos.iter().map(key).collect();
        for cii in plan.cluster_infos {
            let (ns, name) = key(&cii);
            let stored = self.local.cluster_infos.get(Some(&ns), &name);
            if w.needed_exact_spec(&cii, Some(stored.as_deref())) {
                let (w, api) = (
                    w.clone(),
                    Api::<ClusterInfoImport>::namespaced(c.clone(), &ns),
                );
                ops.push((
                    name.clone(),
                    Box::pin(async move { w.apply(&api, &cii).await }),
                ));
            }
        }
        for cii in self.local.cluster_infos.all() {
            let (ns, name) = key(cii.as_ref());
            if !want_cii.contains(&(ns.clone(), name.clone())) {
                let (w, api) = (
                    w.clone(),
                    Api::<ClusterInfoImport>::namespaced(c.clone(), &ns),
                );
                ops.push((
                    name.clone(),
                    Box::pin(async move { w.delete(&api, &ns, &name).await }),
                ));
            }
        }
        if acnps_ready {
            let want: BTreeSet<String> = plan.acnps.iter().map(|a| a.name_any()).collect();
            let api: Api<ClusterNetworkPolicy> = Api::all(c.clone());
            for acnp in plan.acnps {
                let stored = self.local.acnps.get(None, &acnp.name_any());
                if w.needed(&acnp, Some(stored.as_deref())) {
                    let (w, api) = (w.clone(), api.clone());
                    ops.push((
                        acnp.name_any(),
                        Box::pin(async move { w.apply(&api, &acnp).await }),
                    ));
                }
            }
            for acnp in acnps_v.iter().filter(|a| is_managed(a.as_ref())) {
                let name = acnp.name_any();
                if !want.contains(&name) {
                    let (w, api) = (w.clone(), api.clone());
                    ops.push((
                        name.clone(),
                        Box::pin(async move { w.delete(&api, "", &name).await }),
                    ));
                }
            }
        }
        let wrote = !ops.is_empty();
        let mut failures = run_all("import", ops).await;
        for s in plan.skipped {
            self.log_once(format!("import skipped: {s}"));
        }
        if acnps_ready {
            failures += self.report_acnp_failures(conn, plan.acnp_failures).await;
        }
        (failures, wrote)
    }

    /// ACNP import failures become Warning Events `ACNPImportFailed` in the leader, on the
    /// ResourceImport, so the admin who exported the policy sees which cluster refused it.
    async fn report_acnp_failures(
        &mut self,
        conn: &Connection,
        failures: Vec<(String, String)>,
    ) -> usize {
        let mut errors = 0;
        self.reported.retain(|_, at| at.elapsed() < REPORT_AGAIN);
        for (ri, message) in failures {
            if self.reported.contains_key(&(ri.clone(), message.clone())) {
                continue;
            }
            let ns = &conn.identity.leader_ns;
            let now = Timestamp::now();
            let uid = conn
                .imports
                .get(Some(ns), &ri)
                .and_then(|r| r.metadata.uid.clone());
            let event = Event {
                metadata: ObjectMeta {
                    name: Some(format!("{ri}.{:x}", now.as_nanosecond())),
                    namespace: Some(ns.clone()),
                    ..Default::default()
                },
                involved_object: ObjectReference {
                    api_version: Some(format!("{}/v1alpha1", mc_api::GROUP)),
                    kind: Some("ResourceImport".into()),
                    name: Some(ri.clone()),
                    namespace: Some(ns.clone()),
                    uid,
                    ..Default::default()
                },
                reason: Some("ACNPImportFailed".into()),
                message: Some(message.clone()),
                type_: Some("Warning".into()),
                action: Some("synced".into()),
                reporting_component: Some("resourceimport-controller".into()),
                reporting_instance: Some("antrea-mc-controller".into()),
                source: Some(EventSource {
                    component: Some("resourceimport-controller".into()),
                    host: None,
                }),
                first_timestamp: Some(Time(now)),
                last_timestamp: Some(Time(now)),
                count: Some(1),
                ..Default::default()
            };
            let api: Api<Event> = Api::namespaced(conn.client.clone(), ns);
            match api.create(&PostParams::default(), &event).await {
                Ok(_) => {
                    tracing::warn!(
                        import = ri,
                        message,
                        "ACNP import failed; reported to the leader"
                    );
                    self.reported.insert((ri, message), Instant::now());
                }
                Err(e) => {
                    tracing::warn!(error = %e, "reporting an ACNP import failure to the leader");
                    errors += 1;
                }
            }
        }
        errors
    }

    /// No ClusterSet: nothing imported or elected may stay (reference §3.4.6).
    async fn clean_up_all(&mut self) -> usize {
        let w = &self.writer;
        let c = &self.client;
        let mut ops: Vec<(String, Op)> = Vec::new();
        for svc in self
            .local
            .services
            .all()
            .iter()
            .filter(|s| is_managed(s.as_ref()))
        {
            let (ns, name) = (svc.namespace().unwrap_or_default(), svc.name_any());
            let (w, api) = (w.clone(), Api::<Service>::namespaced(c.clone(), &ns));
            ops.push((
                name.clone(),
                Box::pin(async move { w.delete(&api, &ns, &name).await }),
            ));
        }
        for eps in self.local.endpoints.all() {
            let (ns, name) = (eps.namespace().unwrap_or_default(), eps.name_any());
            let (w, api) = (w.clone(), Api::<Endpoints>::namespaced(c.clone(), &ns));
            ops.push((
                name.clone(),
                Box::pin(async move { w.delete(&api, &ns, &name).await }),
            ));
        }
        for si in self
            .local
            .service_imports
            .all()
            .iter()
            .filter(|s| is_managed(s.as_ref()))
        {
            let (ns, name) = (si.namespace().unwrap_or_default(), si.name_any());
            let (w, api) = (w.clone(), Api::<ServiceImport>::namespaced(c.clone(), &ns));
            ops.push((
                name.clone(),
                Box::pin(async move { w.delete(&api, &ns, &name).await }),
            ));
        }
        for cii in self.local.cluster_infos.all() {
            let (ns, name) = (cii.namespace().unwrap_or_default(), cii.name_any());
            let (w, api) = (
                w.clone(),
                Api::<ClusterInfoImport>::namespaced(c.clone(), &ns),
            );
            ops.push((
                name.clone(),
                Box::pin(async move { w.delete(&api, &ns, &name).await }),
            ));
        }
        for gw in self.local.gateways.all() {
            let (ns, name) = (gw.namespace().unwrap_or_default(), gw.name_any());
            let (w, api) = (w.clone(), Api::<Gateway>::namespaced(c.clone(), &ns));
            ops.push((
                name.clone(),
                Box::pin(async move { w.delete(&api, &ns, &name).await }),
            ));
        }
        if self.local.acnps.ready() {
            for acnp in self
                .local
                .acnps
                .all()
                .iter()
                .filter(|a| is_managed(a.as_ref()))
            {
                let name = acnp.name_any();
                let (w, api) = (w.clone(), Api::<ClusterNetworkPolicy>::all(c.clone()));
                ops.push((
                    name.clone(),
                    Box::pin(async move { w.delete(&api, "", &name).await }),
                ));
            }
        }
        run_all("cleanup", ops).await
    }
}

/// The member's ClusterSet status: one entry, for its leader, with `Ready` and `IsLeader`.
pub fn member_status(
    leader_id: &str,
    beat: Option<&Beat>,
    problem: Option<(&'static str, String)>,
    generation: Option<i64>,
    old: Option<&ClusterSetStatus>,
) -> ClusterSetStatus {
    let (ready, is_leader) = match beat.and_then(|b| b.connected.map(|c| (c, b))) {
        None => (
            condition("Ready", "Unknown", "", "Leader cluster added"),
            condition("IsLeader", "False", "", "Leader cluster added"),
        ),
        Some((connected, b)) => (
            if connected {
                condition("Ready", "True", "Connected", "")
            } else {
                condition("Ready", "False", "Disconnected", &b.message)
            },
            if b.is_leader {
                condition(
                    "IsLeader",
                    "True",
                    "",
                    "This leader cluster is the leader for local cluster",
                )
            } else {
                condition("IsLeader", "False", "", "Leader cluster added")
            },
        ),
    };
    let old_conditions = old
        .and_then(|o| o.cluster_statuses.first())
        .map(|s| s.conditions.as_slice());
    let mut conditions = vec![ready, is_leader];
    for c in &mut conditions {
        keep_transition_time(c, old_conditions);
    }
    let ready_count = i32::from(conditions[0].status.as_deref() == Some("True"));
    let mut overall = match (&problem, beat.and_then(|b| b.connected)) {
        (Some((reason, message)), _) => condition("Ready", "False", reason, message),
        (None, Some(true)) if conditions[1].status.as_deref() == Some("True") => {
            condition("Ready", "True", "", "")
        }
        (None, Some(false)) => {
            condition("Ready", "False", "Disconnected", "Disconnected from leader")
        }
        _ => condition("Ready", "Unknown", "", "Leader not yet connected"),
    };
    keep_transition_time(&mut overall, old.map(|o| o.conditions.as_slice()));
    ClusterSetStatus {
        total_clusters: Some(1),
        ready_clusters: Some(ready_count),
        conditions: vec![overall],
        cluster_statuses: vec![ClusterStatus {
            cluster_id: Some(leader_id.to_owned()),
            conditions,
        }],
        observed_generation: generation,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_status_tells_why_it_is_not_ready() {
        let s = member_status("north", None, None, Some(1), None);
        assert_eq!(s.conditions[0].status.as_deref(), Some("Unknown"));
        let bad = Beat {
            connected: Some(false),
            message: "the leader refused the token".into(),
            is_leader: false,
        };
        let s = member_status("north", Some(&bad), None, Some(1), Some(&s));
        assert_eq!(s.ready_clusters, Some(0));
        assert_eq!(
            s.cluster_statuses[0].conditions[0].message.as_deref(),
            Some("the leader refused the token")
        );
        let good = Beat {
            connected: Some(true),
            message: String::new(),
            is_leader: true,
        };
        let s = member_status("north", Some(&good), None, Some(1), Some(&s));
        assert_eq!((s.total_clusters, s.ready_clusters), (Some(1), Some(1)));
        assert_eq!(s.conditions[0].status.as_deref(), Some("True"));
        let s = member_status(
            "north",
            None,
            Some(problem("SecretNotFound", "Secret x not found".into())),
            Some(1),
            Some(&s),
        );
        assert_eq!(s.conditions[0].reason.as_deref(), Some("SecretNotFound"));
    }

    #[test]
    fn stored_services_and_slices_keep_what_the_exports_read() {
        let full: Service = serde_json::from_value(json!({
            "metadata": {"name": "nginx", "namespace": "default",
                         "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}},
            "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                     "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
                     "selector": {"app": "nginx"}, "sessionAffinity": "None",
                     "ipFamilies": ["IPv4"], "internalTrafficPolicy": "Cluster"},
            "status": {"loadBalancer": {}}
        }))
        .expect("Service");
        let mut trimmed = full.clone();
        trim_service(&mut trimmed);
        let slice: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"name": "nginx-abc", "namespace": "default",
                         "labels": {"kubernetes.io/service-name": "nginx"},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": "nginx", "uid": "u"}]},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
            "endpoints": [
                {"addresses": ["10.244.1.5"], "conditions": {"ready": true, "serving": true},
                 "nodeName": "node-a", "targetRef": {"kind": "Pod", "name": "nginx-1"}},
                {"addresses": ["10.244.1.6"], "conditions": {"ready": false}}
            ]
        }))
        .expect("EndpointSlice");
        let mut trimmed_slice = slice.clone();
        trim_slice(&mut trimmed_slice);
        for ip_type in [
            mc_api::config::EndpointIpType::ClusterIP,
            mc_api::config::EndpointIpType::PodIP,
        ] {
            assert_eq!(
                export::decide(Some(&full), &[&slice], ip_type),
                export::decide(Some(&trimmed), &[&trimmed_slice], ip_type)
            );
        }
        let e = &trimmed_slice.endpoints.as_ref().expect("endpoints")[0];
        assert!(e.node_name.is_none() && e.target_ref.is_none());
        assert!(trimmed.status.is_none());
        assert!(trimmed.spec.as_ref().expect("spec").selector.is_none());
    }
}
