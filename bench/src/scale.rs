//! `cargo xtask bench scale`: the leader and the real members with hundreds of simulated members
//! in the ClusterSet (issue: hundreds of members).
//!
//! Each simulated member is a task here that speaks only what a member controller speaks to the
//! leader, through the leader's API server, with its own credentials: a ServiceAccount of its own
//! in the leader's namespace, bound to the member Role as the guides bind one (its token from the
//! TokenRequest API), announced through the leader's webhooks (which stamp the announce, and the
//! leader binds the ServiceAccount to its cluster ID), a heartbeat every 10 s (the member's read
//! and patch of its announce's `touch-ts`), its ClusterInfo (distinct CIDRs and gateway address)
//! and its Service and Endpoints exports, built by the member controller's own functions
//! (`member::export::{decide, exports_for, cluster_info_export}`) and written with server-side
//! apply as it writes them; and the member's two watches, every ResourceImport and its own
//! ResourceExports (their objects are read for their metadata only, which is what the simulation
//! costs here, not what it costs the API server). The real east and west members (controllers
//! with the release profile) import everything.
//!
//! Per size K: the time until the leader reports every member Ready; a burst (every simulated
//! member exports its S Services at once) until east has imported them all; then Services
//! exported one at a time from west (a real member) to east with K members in place, p50/p99;
//! the memory and CPU of the leader, east's member, the leader's API server and etcd; the leader
//! API server's request rate with only heartbeats and watches going on; one member's death
//! (heartbeats stopped) until the leader reports it Disconnected and east's Endpoints no longer
//! hold its addresses, and its return.

use std::{
    borrow::Cow,
    collections::{BTreeMap, HashMap},
    marker::PhantomData,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::{
    api::{
        authentication::v1::{TokenRequest, TokenRequestSpec},
        core::v1::{Endpoints, Namespace, Service, ServiceAccount},
        discovery::v1::EndpointSlice,
        rbac::v1::RoleBinding,
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
    jiff::Timestamp,
};
use kube::{
    Api, Client, Resource, ResourceExt as _,
    api::{Patch, PatchParams, PostParams},
    runtime::watcher,
};
use mc_api::{
    clusterset::v1alpha2::ClusterSet,
    config::EndpointIpType,
    exports::ResourceExport,
    gateway::{Gateway, GatewayFields},
    imports::ResourceImport,
    mcs::ServiceExport,
    memberclusterannounce::{MemberClusterAnnounce, MemberClusterAnnounceFields},
    names::{self, annotations, labels},
};
use mc_controller::member::export as member_export;
use serde::Deserialize;
use serde_json::json;
use testbed::{
    controllers::{CLUSTERSET, LEADER_NS, WITHDRAW_AFTER_SECS},
    paths::testbed_dir,
    topology::CLUSTERS,
};
use tokio::sync::watch;

use crate::control_plane::{
    client, first_seen, for_all, imported_endpoints, kube_proxy_slices, percentile,
    service_imports_with_ip, services_with_endpoints, testbed_cpu,
};

/// What each simulated member exports.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// Simulated members (K).
    pub members: usize,
    /// Services each exports (S).
    pub services: usize,
    /// Endpoints of each Service (E).
    pub endpoints: usize,
}

/// The namespace of the simulated members' Services (created in the real members, which import
/// only into namespaces that exist).
const NS: &str = "scale";
/// The namespace of the Services exported one at a time from west.
const STEADY_NS: &str = "scale-steady";
/// Services exported one at a time from west with every member in place.
const STEADY: usize = 100;
/// The heartbeat interval of a member (`--heartbeat-interval`'s default).
const HEARTBEAT: Duration = Duration::from_secs(10);
/// The leader's `--member-timeout` (its default; the testbed does not set it).
const MEMBER_TIMEOUT_SECS: u64 = 25;
/// The field manager the member controller writes with.
const MANAGER: &str = "strait-mc-controller";
/// Writes one simulated member has in flight at once.
const MEMBER_WRITES: usize = 4;

fn cluster_id(i: usize) -> String {
    format!("sim-{i}")
}

/// Simulated member `i`'s Service CIDR (a /24 of 172.16.0.0/12), Pod CIDR (a /22 of
/// 100.64.0.0/10) and gateway address (in 198.19.0.0/16): distinct for up to 4096 members, none
/// inside a testbed cluster's ranges.
fn cidrs(i: usize) -> (String, String, String) {
    let pod = 0x6440_0000u32 + (i as u32) * 1024;
    let pod = std::net::Ipv4Addr::from(pod);
    (
        format!("172.{}.{}.0/24", 16 + i / 256, i % 256),
        format!("{pod}/22"),
        format!("198.19.{}.{}", i / 250, 1 + i % 250),
    )
}

/// An object of kind `K` read for its metadata only: what a simulated member's watches decode.
#[derive(Clone, Debug, Deserialize)]
#[serde(bound = "")]
struct Meta<K> {
    metadata: ObjectMeta,
    #[serde(skip)]
    kind: PhantomData<K>,
}

impl<K: Resource<DynamicType = ()>> Resource for Meta<K> {
    type DynamicType = ();
    type Scope = K::Scope;
    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// What the simulated members did, summed over all of them.
#[derive(Default)]
struct Counters {
    /// Watch events received (ResourceImports and own ResourceExports).
    events: AtomicU64,
    beats: AtomicU64,
    failed_beats: AtomicU64,
    writes: AtomicU64,
    /// Writes refused or failed (each retried after a second).
    failed_writes: AtomicU64,
}

/// One simulated member: its ID, its client (its own token), whether it keeps beating.
struct Sim {
    index: usize,
    id: String,
    client: Client,
    alive: Arc<AtomicBool>,
}

/// The ServiceAccount, RoleBinding and token of simulated member `i`, as an administrator of the
/// leader makes them for a member; its client speaks to the leader's API server with that token.
async fn credentials(north: &Client, i: usize) -> anyhow::Result<Client> {
    let name = format!("{}-access-sa", cluster_id(i));
    let sas: Api<ServiceAccount> = Api::namespaced(north.clone(), LEADER_NS);
    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    ignore_exists(sas.create(&PostParams::default(), &sa).await)?;
    let rbs: Api<RoleBinding> = Api::namespaced(north.clone(), LEADER_NS);
    let rb: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": format!("{}-access-rolebinding", cluster_id(i))},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": "antrea-mc-member-cluster-role"},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": LEADER_NS}],
    }))?;
    ignore_exists(rbs.create(&PostParams::default(), &rb).await)?;
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: None,
            expiration_seconds: Some(24 * 3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    let token = sas
        .create_token_request(&name, &PostParams::default(), &request)
        .await
        .context("TokenRequest")?
        .status
        .context("a TokenRequest without a status")?
        .token
        .context("a TokenRequest without a token")?;
    let north_cluster = CLUSTERS
        .iter()
        .find(|c| c.name == "north")
        .context("no north")?;
    let kc = kube::config::Kubeconfig::read_from(testbed::admin_kubeconfig(north_cluster))?;
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.into()),
        ..Default::default()
    };
    config.default_namespace = LEADER_NS.into();
    mc_kube::with_read_timeout(&mut config);
    Ok(Client::try_from(config)?)
}

fn ignore_exists<T>(r: kube::Result<T>) -> kube::Result<()> {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// The member's heartbeat: its announce read, then its `touch-ts` patched (created the first
/// time), as `member::connection` does.
async fn beat(api: &Api<MemberClusterAnnounce>, id: &str) -> kube::Result<()> {
    let name = names::member_announce(id);
    let now = Timestamp::now().to_string();
    if api.get_opt(&name).await?.is_some() {
        let patch = json!({"metadata": {"annotations": {annotations::TOUCH_TS: now}}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
    } else {
        let mut mca = MemberClusterAnnounce::new(
            &name,
            MemberClusterAnnounceFields {
                cluster_id: Some(id.to_owned()),
                cluster_set_id: Some(CLUSTERSET.to_owned()),
                leader_cluster_id: Some("test-cluster-north".to_owned()),
            },
        );
        mca.annotations_mut()
            .insert(annotations::TOUCH_TS.into(), now);
        api.create(&PostParams::default(), &mca).await?;
    }
    Ok(())
}

/// Server-side apply of one export, retried every second until it is taken (a webhook refuses
/// a ClusterInfo export until the leader has bound the member's ServiceAccount).
async fn apply_export(api: &Api<ResourceExport>, re: &ResourceExport, counters: &Counters) {
    let mut obj = serde_json::to_value(re).unwrap_or_default();
    if let Some(meta) = obj.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        meta.remove("creationTimestamp");
    }
    loop {
        counters.writes.fetch_add(1, Ordering::Relaxed);
        match api
            .patch(
                &re.name_any(),
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&obj),
            )
            .await
        {
            Ok(_) => return,
            Err(_) => {
                counters.failed_writes.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// A watch as the member's (list, then watch, resumed), counting what it receives.
fn watch_counting<K>(
    api: Api<Meta<K>>,
    config: watcher::Config,
    counters: Arc<Counters>,
) -> tokio::task::JoinHandle<()>
where
    K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + Sync + 'static,
    K::Scope: Send + Sync,
{
    tokio::spawn(async move {
        let mut stream = watcher(api, config).boxed();
        while let Some(ev) = stream.next().await {
            if let Ok(
                watcher::Event::Apply(_) | watcher::Event::InitApply(_) | watcher::Event::Delete(_),
            ) = ev
            {
                counters.events.fetch_add(1, Ordering::Relaxed);
            }
        }
    })
}

/// Simulated member `index`'s exports: its ClusterInfo, and each Service's two exports as the
/// member controller builds them from a Service with `endpoints` ready Pod addresses.
fn exports(index: usize, plan: Plan) -> (ResourceExport, Vec<ResourceExport>) {
    let id = cluster_id(index);
    let (service_cidr, pod_cidr, gateway_ip) = cidrs(index);
    let gateway = Gateway::new(
        "gateway",
        GatewayFields {
            gateway_ip: Some(gateway_ip.clone()),
            internal_ip: Some(gateway_ip),
            service_cidr: Some(service_cidr.clone()),
            ..Default::default()
        },
    );
    let info = member_export::cluster_info_export(
        &id,
        LEADER_NS,
        "kube-system",
        &gateway,
        vec![pod_cidr.clone()],
    );
    let pod_base: std::net::Ipv4Addr = pod_cidr
        .split('/')
        .next()
        .and_then(|a| a.parse().ok())
        .expect("a Pod CIDR");
    let svc_base: std::net::Ipv4Addr = service_cidr
        .split('/')
        .next()
        .and_then(|a| a.parse().ok())
        .expect("a Service CIDR");
    let mut services = Vec::new();
    for s in 0..plan.services {
        let name = format!("{}-svc-{s}", id);
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": NS},
            "spec": {"clusterIP": std::net::Ipv4Addr::from(u32::from(svc_base) + 10 + s as u32).to_string(),
                     "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}
        }))
        .expect("a Service");
        let addresses: Vec<_> = (0..plan.endpoints)
            .map(|e| {
                let ip = u32::from(pod_base) + 1 + (s * plan.endpoints + e) as u32;
                json!({"addresses": [std::net::Ipv4Addr::from(ip).to_string()],
                       "conditions": {"ready": true}})
            })
            .collect();
        let slice: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"name": format!("{name}-x"), "namespace": NS},
            "addressType": "IPv4",
            "endpoints": addresses,
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        }))
        .expect("an EndpointSlice");
        let exported = member_export::decide(Some(&svc), &[&slice], EndpointIpType::PodIP)
            .expect("a valid export");
        services.extend(member_export::exports_for(
            &id, LEADER_NS, NS, &name, &exported, None,
        ));
    }
    (info, services)
}

/// Runs simulated member `sim`: announce, watches, heartbeat (while `alive`), its ClusterInfo;
/// its Service exports once `go` turns true.
async fn run_member(sim: Sim, plan: Plan, mut go: watch::Receiver<bool>, counters: Arc<Counters>) {
    let mcas: Api<MemberClusterAnnounce> = Api::namespaced(sim.client.clone(), LEADER_NS);
    while beat(&mcas, &sim.id).await.is_err() {
        counters.failed_beats.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    counters.beats.fetch_add(1, Ordering::Relaxed);
    let mut watches = vec![
        watch_counting::<ResourceImport>(
            Api::namespaced(sim.client.clone(), LEADER_NS),
            watcher::Config::default().timeout(25),
            counters.clone(),
        ),
        watch_counting::<ResourceExport>(
            Api::namespaced(sim.client.clone(), LEADER_NS),
            watcher::Config::default().timeout(25).labels(&format!(
                "{}={}",
                labels::SOURCE_CLUSTER_ID,
                sim.id
            )),
            counters.clone(),
        ),
    ];
    let (alive, c, id) = (sim.alive.clone(), counters.clone(), sim.id.clone());
    watches.push(tokio::spawn(async move {
        loop {
            tokio::time::sleep(HEARTBEAT).await;
            if !alive.load(Ordering::Relaxed) {
                continue;
            }
            match beat(&mcas, &id).await {
                Ok(()) => c.beats.fetch_add(1, Ordering::Relaxed),
                Err(_) => c.failed_beats.fetch_add(1, Ordering::Relaxed),
            };
        }
    }));
    let res: Api<ResourceExport> = Api::namespaced(sim.client.clone(), LEADER_NS);
    let (info, services) = exports(sim.index, plan);
    apply_export(&res, &info, &counters).await;
    if go.wait_for(|go| *go).await.is_ok() {
        futures::stream::iter(services.iter())
            .for_each_concurrent(MEMBER_WRITES, |re| apply_export(&res, re, &counters))
            .await;
    }
    // Runs until aborted; the watches and heartbeat with it.
    let _guard = AbortOnDrop(watches);
    std::future::pending::<()>().await;
}

struct AbortOnDrop(Vec<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// The simulated members the leader's ClusterSet status reports Ready, and by what reason the
/// others are not.
async fn ready_members(north: &Client) -> anyhow::Result<(usize, BTreeMap<String, usize>)> {
    let sets: Api<ClusterSet> = Api::namespaced(north.clone(), LEADER_NS);
    let Some(set) = sets.get_opt(CLUSTERSET).await? else {
        return Ok((0, BTreeMap::new()));
    };
    let mut ready = 0;
    let mut not = BTreeMap::new();
    for s in set.status.iter().flat_map(|s| s.cluster_statuses.iter()) {
        if !s
            .cluster_id
            .as_deref()
            .is_some_and(|c| c.starts_with("sim-"))
        {
            continue;
        }
        match s
            .conditions
            .iter()
            .find(|c| c.type_.as_deref() == Some("Ready"))
        {
            Some(c) if c.status.as_deref() == Some("True") => ready += 1,
            Some(c) => *not.entry(c.reason.clone().unwrap_or_default()).or_default() += 1,
            None => *not.entry("no Ready condition".into()).or_default() += 1,
        }
    }
    Ok((ready, not))
}

/// Whether the leader reports simulated member `id` Ready.
async fn member_ready(north: &Client, id: &str) -> anyhow::Result<bool> {
    let sets: Api<ClusterSet> = Api::namespaced(north.clone(), LEADER_NS);
    let set = sets.get(CLUSTERSET).await?;
    Ok(set
        .status
        .iter()
        .flat_map(|s| s.cluster_statuses.iter())
        .filter(|s| s.cluster_id.as_deref() == Some(id))
        .flat_map(|s| s.conditions.iter())
        .any(|c| c.type_.as_deref() == Some("Ready") && c.status.as_deref() == Some("True")))
}

/// Resident memory (MiB) of the testbed's processes that matter here.
fn memory() -> BTreeMap<&'static str, (u64, u64)> {
    let procs = testbed::proc::Procs::new(&testbed_dir()).ok();
    [
        ("leader controller", "north-mc-controller"),
        ("east member controller", "east-mc-controller"),
        ("leader API server", "north-apiserver"),
        ("etcd (all three clusters)", "etcd"),
    ]
    .into_iter()
    .map(|(what, name)| {
        let (now, peak) = procs
            .as_ref()
            .and_then(|p| p.running(name))
            .map_or((0, 0), testbed::proc::rss_kib);
        (what, (now / 1024, peak / 1024))
    })
    .collect()
}

fn memory_line() -> String {
    memory()
        .iter()
        .map(|(k, (now, peak))| format!("{k} {now} ({peak})"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// CPU time of the named testbed processes and of this bench (the simulated members).
fn cpu() -> BTreeMap<String, Duration> {
    let procs = testbed::proc::Procs::new(&testbed_dir()).ok();
    let mut out: BTreeMap<String, Duration> = [
        ("leader controller", "north-mc-controller"),
        ("east member", "east-mc-controller"),
        ("west member", "west-mc-controller"),
        ("leader API server", "north-apiserver"),
        ("east API server", "east-apiserver"),
        ("etcd", "etcd"),
        ("leader controller-manager", "north-controller-manager"),
        ("east controller-manager", "east-controller-manager"),
    ]
    .into_iter()
    .map(|(what, name)| {
        let t = procs
            .as_ref()
            .and_then(|p| p.running(name))
            .map_or(Duration::ZERO, testbed::proc::cpu_time);
        (what.to_owned(), t)
    })
    .collect();
    out.insert(
        "simulated members (this bench)".into(),
        testbed::proc::cpu_time(std::process::id() as i32),
    );
    let all: Duration = testbed_cpu().values().sum();
    out.insert("all testbed processes".into(), all);
    out
}

fn cpu_line(before: &BTreeMap<String, Duration>, wall: Duration) -> String {
    cpu()
        .iter()
        .map(|(k, t)| {
            let used = t.saturating_sub(before.get(k).copied().unwrap_or_default());
            format!("{k} {:.2}", used.as_secs_f64() / wall.as_secs_f64())
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The leader API server's requests so far: (all requests by verb, open long-running requests).
async fn leader_requests(north: &Client) -> anyhow::Result<(BTreeMap<String, f64>, f64)> {
    let text = north
        .request_text(http::Request::get("/metrics").body(Vec::new())?)
        .await?;
    let mut by_verb = BTreeMap::new();
    let mut long = 0.0;
    for line in text.lines() {
        let Some((name, rest)) = line.split_once('{') else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let value: f64 = value.parse().unwrap_or(0.0);
        let label = |l: &str| {
            labels
                .split_once(&format!("{l}=\""))
                .and_then(|(_, r)| r.split_once('"'))
                .map_or("", |(v, _)| v)
        };
        match name {
            "apiserver_request_total" => {
                *by_verb.entry(label("verb").to_owned()).or_default() += value;
            }
            "apiserver_longrunning_requests" => long += value,
            _ => {}
        }
    }
    Ok((by_verb, long))
}

fn rate_line(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
    wall: Duration,
) -> String {
    let mut total = 0.0;
    let parts: Vec<String> = after
        .iter()
        .filter_map(|(verb, n)| {
            let d = n - before.get(verb).copied().unwrap_or(0.0);
            total += d;
            (d > 0.0).then(|| format!("{verb} {:.1}", d / wall.as_secs_f64()))
        })
        .collect();
    format!(
        "{:.1} requests/s ({})",
        total / wall.as_secs_f64(),
        parts.join(", ")
    )
}

async fn namespace(c: &Client, name: &str) -> anyhow::Result<()> {
    let api: Api<Namespace> = Api::all(c.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    ignore_exists(api.create(&PostParams::default(), &ns).await)?;
    Ok(())
}

/// One size's figures, as printed.
pub struct Figures {
    pub plan: Plan,
    pub lines: Vec<String>,
}

/// Runs the simulation for one K on the running (fresh, Node-less) testbed.
pub async fn scale(plan: Plan) -> anyhow::Result<Figures> {
    let mut lines = Vec::new();
    let mut say = |line: String| {
        eprintln!("scale K={}: {line}", plan.members);
        lines.push(line);
    };
    let (north, east, west) = (
        client("north").await?,
        client("east").await?,
        client("west").await?,
    );
    let gateways = crate::control_plane::announce_members(&east, &west).await?;
    for c in [&north, &east, &west] {
        namespace(c, NS).await?;
        namespace(c, STEADY_NS).await?;
    }
    let counters = Arc::new(Counters::default());
    let (go_tx, go) = watch::channel(false);

    // Joining: credentials, then each member's task.
    let cpu0 = cpu();
    let started = Instant::now();
    let sims: Vec<Sim> = futures::stream::iter(0..plan.members)
        .map(|i| {
            let north = north.clone();
            async move {
                Ok::<_, anyhow::Error>(Sim {
                    index: i,
                    id: cluster_id(i),
                    client: credentials(&north, i).await?,
                    alive: Arc::new(AtomicBool::new(true)),
                })
            }
        })
        .buffer_unordered(16)
        .try_collect()
        .await
        .context("the simulated members' credentials")?;
    say(format!(
        "credentials for {} members in {:.1} s",
        plan.members,
        started.elapsed().as_secs_f64()
    ));
    let mut alive = HashMap::new();
    let mut tasks = Vec::new();
    let mover = sims.get(1).map(|s| (s.index, s.client.clone()));
    for sim in sims {
        alive.insert(sim.index, sim.alive.clone());
        tasks.push(tokio::spawn(run_member(
            sim,
            plan,
            go.clone(),
            counters.clone(),
        )));
    }
    let _members = AbortOnDrop(tasks);
    let deadline = started + Duration::from_secs(600);
    let mut last_said = Instant::now();
    let all_ready = loop {
        let (ready, not) = ready_members(&north).await?;
        if ready == plan.members {
            break started.elapsed();
        }
        if Instant::now() > deadline {
            bail!(
                "only {ready} of {} members Ready after 600 s; the others: {not:?}",
                plan.members
            );
        }
        if last_said.elapsed() > Duration::from_secs(15) {
            eprintln!(
                "scale: {ready} of {} Ready after {:.0} s; the others: {not:?}",
                plan.members,
                started.elapsed().as_secs_f64()
            );
            last_said = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    say(format!(
        "every member Ready (leader's ClusterSet status) {:.1} s after the simulation started",
        all_ready.as_secs_f64()
    ));
    say(format!(
        "joining, CPU in cores: {}",
        cpu_line(&cpu0, started.elapsed())
    ));
    say(format!(
        "after joining, resident MiB (peak): {}",
        memory_line()
    ));
    // East's ClusterInfoImports: one per other cluster.
    let ciis: Api<mc_api::clusterinfo::ClusterInfoImport> =
        Api::namespaced(east.clone(), "kube-system");
    let imported_infos = loop {
        let n = ciis.list(&Default::default()).await?.items.len();
        if n > plan.members || started.elapsed() > Duration::from_secs(600) {
            break n;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    say(format!(
        "east holds {imported_infos} ClusterInfoImports {:.1} s after the start",
        started.elapsed().as_secs_f64()
    ));

    // Idle: heartbeats and watches only.
    let (req0, _) = leader_requests(&north).await?;
    let cpu0 = cpu();
    let idle = Instant::now();
    tokio::time::sleep(Duration::from_secs(30)).await;
    let (req1, long) = leader_requests(&north).await?;
    say(format!(
        "idle (heartbeats, watches) over 30 s: leader API server {}; {long} long-running requests open; CPU in cores: {}",
        rate_line(&req0, &req1, idle.elapsed()),
        cpu_line(&cpu0, idle.elapsed())
    ));

    // The burst: every member exports its Services at once.
    let total = plan.members * plan.services;
    let (imports, si_task) = service_imports_with_ip(&east, NS);
    let (eps, ep_task) = imported_endpoints(&east, NS);
    let (req0, _) = leader_requests(&north).await?;
    let cpu0 = cpu();
    let burst = Instant::now();
    go_tx.send(true)?;
    let deadline = burst + Duration::from_secs(900);
    let all_imported = loop {
        let (a, b) = (
            imports.lock().expect("seen").len(),
            eps.lock().expect("seen").len(),
        );
        if a >= total && b >= total {
            break burst.elapsed();
        }
        if Instant::now() > deadline {
            bail!("east imported {a} ServiceImports and {b} Endpoints of {total} after 900 s");
        }
        if last_said.elapsed() > Duration::from_secs(15) {
            eprintln!(
                "scale: east has {a} ServiceImports and {b} Endpoints of {total} after {:.0} s",
                burst.elapsed().as_secs_f64()
            );
            last_said = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (req1, _) = leader_requests(&north).await?;
    let half = {
        let s = imports.lock().expect("seen");
        let mut at: Vec<Duration> = s
            .values()
            .map(|t| t.saturating_duration_since(burst))
            .collect();
        at.sort();
        percentile(&at, 0.5)
    };
    si_task.abort();
    ep_task.abort();
    say(format!(
        "burst: {total} Services ({} per member, {} endpoints each) exported at once: east imported half in {:.1} s, all in {:.1} s (ServiceImport with an IP and Endpoints with addresses)",
        plan.services,
        plan.endpoints,
        half.as_secs_f64(),
        all_imported.as_secs_f64()
    ));
    say(format!(
        "burst: leader API server {}; CPU in cores: {}",
        rate_line(&req0, &req1, burst.elapsed()),
        cpu_line(&cpu0, burst.elapsed())
    ));
    say(format!(
        "after the burst, resident MiB (peak): {}",
        memory_line()
    ));

    // A remote cluster's gateway moves: from its export to east's ClusterInfoImport.
    if let Some((index, client)) = mover {
        say(gateway_moves(&east, index, client, plan).await?);
    }

    // One at a time from west, with everything in place.
    let (steady50, steady99, steady_cpu) = one_by_one(&east, &west).await?;
    say(format!(
        "one by one from west ({STEADY} Services) with {} members and {total} Services in place: p50 {:.0} ms, p99 {:.0} ms; CPU in cores: {steady_cpu}",
        plan.members,
        steady50.as_secs_f64() * 1e3,
        steady99.as_secs_f64() * 1e3
    ));

    // A member dies: its heartbeats stop.
    let victim = 0;
    let id = cluster_id(victim);
    let watched = format!("antrea-mc-{id}-svc-0");
    let east_eps: Api<Endpoints> = Api::namespaced(east.clone(), NS);
    let holds = |e: Option<Endpoints>| {
        let (_, pod_cidr, _) = cidrs(victim);
        let prefix: String = pod_cidr
            .rsplitn(2, '.')
            .last()
            .unwrap_or_default()
            .to_owned();
        e.iter()
            .flat_map(|e| e.subsets.iter().flatten())
            .flat_map(|s| s.addresses.iter().flatten())
            .any(|a| a.ip.starts_with(&prefix))
    };
    alive[&victim].store(false, Ordering::Relaxed);
    let died = Instant::now();
    let mut disconnected = None;
    let withdrawn = loop {
        if disconnected.is_none() && !member_ready(&north, &id).await? {
            disconnected = Some(died.elapsed());
        }
        if !holds(east_eps.get_opt(&watched).await?) {
            break died.elapsed();
        }
        if died.elapsed() > Duration::from_secs(300) {
            bail!("{id}'s endpoints still in east's {watched} 300 s after its heartbeats stopped");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    alive[&victim].store(true, Ordering::Relaxed);
    let back = Instant::now();
    let returned = loop {
        if holds(east_eps.get_opt(&watched).await?) && member_ready(&north, &id).await? {
            break back.elapsed();
        }
        if back.elapsed() > Duration::from_secs(120) {
            bail!("{id} not back 120 s after its heartbeats resumed");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    say(format!(
        "{id}'s heartbeats stopped: Disconnected in the leader after {:.1} s, its endpoints gone from east after {:.1} s (bound: {} s after its last heartbeat, up to {} s before they stopped: member timeout {MEMBER_TIMEOUT_SECS} s + withdraw after {WITHDRAW_AFTER_SECS} s, plus the leader's 2 s tick); back (Ready, endpoints in east) {:.1} s after its heartbeats resumed",
        disconnected.unwrap_or(withdrawn).as_secs_f64(),
        withdrawn.as_secs_f64(),
        MEMBER_TIMEOUT_SECS + u64::from(WITHDRAW_AFTER_SECS),
        HEARTBEAT.as_secs(),
        returned.as_secs_f64()
    ));
    say(format!(
        "simulated members: {} watch events received, {} heartbeats ({} failed), {} writes ({} refused or failed, retried)",
        counters.events.load(Ordering::Relaxed),
        counters.beats.load(Ordering::Relaxed),
        counters.failed_beats.load(Ordering::Relaxed),
        counters.writes.load(Ordering::Relaxed),
        counters.failed_writes.load(Ordering::Relaxed)
    ));
    say(format!(
        "at the end, resident MiB (peak): {}",
        memory_line()
    ));
    gateways.abort();
    crate::gateways::remove(&[east.clone(), west.clone()]).await;
    Ok(Figures { plan, lines })
}

/// Gateway moves timed in [`gateway_moves`].
const MOVES: usize = 10;

/// Simulated member `index` announces a new gateway address [`MOVES`] times (its ClusterInfo
/// export rewritten with its own token): the time until east's ClusterInfoImport of it holds
/// the address, with every member and Service in place (a change in what the leader accepted
/// re-merges every group).
async fn gateway_moves(
    east: &Client,
    index: usize,
    client: Client,
    plan: Plan,
) -> anyhow::Result<String> {
    let id = cluster_id(index);
    let wanted = id.clone();
    let (seen, task) = first_seen(
        Api::<mc_api::clusterinfo::ClusterInfoImport>::namespaced(east.clone(), "kube-system"),
        move |o| {
            let info = &o.spec.0;
            (info.cluster_id.as_deref() == Some(wanted.as_str()))
                .then(|| info.gateway_infos.first()?.gateway_ip.clone())
                .flatten()
        },
    );
    let res: Api<ResourceExport> = Api::namespaced(client, LEADER_NS);
    let counters = Counters::default();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut took = Vec::new();
    for m in 0..MOVES {
        let gateway = format!("198.19.{}.{}", 240 + m / 250, 1 + m % 250);
        let (mut info, _) = exports(
            index,
            Plan {
                services: 0,
                ..plan
            },
        );
        if let Some(ci) = info.spec.cluster_info.as_mut() {
            ci.gateway_infos[0].gateway_ip = Some(gateway.clone());
        }
        let t0 = Instant::now();
        apply_export(&res, &info, &counters).await;
        loop {
            if let Some(at) = seen.lock().expect("seen").get(&gateway) {
                took.push(at.saturating_duration_since(t0));
                break;
            }
            if t0.elapsed() > Duration::from_secs(60) {
                bail!("{id}'s gateway {gateway} not in east's ClusterInfoImport after 60 s");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    task.abort();
    took.sort();
    Ok(format!(
        "{id}'s gateway moved ({MOVES} times, its ClusterInfo export rewritten) → east's ClusterInfoImport: p50 {:.0} ms, p99 {:.0} ms",
        percentile(&took, 0.5).as_secs_f64() * 1e3,
        percentile(&took, 0.99).as_secs_f64() * 1e3
    ))
}

/// Exports [`STEADY`] Services from west one at a time (the next once east imported the
/// previous): p50 and p99 of export→import (ServiceImport with an IP, Endpoints with an address
/// and kube-proxy's EndpointSlice in east), and the CPU over the phase.
async fn one_by_one(east: &Client, west: &Client) -> anyhow::Result<(Duration, Duration, String)> {
    services_with_endpoints(west, STEADY_NS, "one", STEADY, 200).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (si, t1) = service_imports_with_ip(east, STEADY_NS);
    let (ep, t2) = imported_endpoints(east, STEADY_NS);
    let (sl, t3) = kube_proxy_slices(east, STEADY_NS);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let se: Api<ServiceExport> = Api::namespaced(west.clone(), STEADY_NS);
    let mut took = Vec::new();
    let cpu0 = cpu();
    let started = Instant::now();
    for i in 0..STEADY {
        let name = format!("one-{i}");
        let t0 = Instant::now();
        se.create(
            &PostParams::default(),
            &ServiceExport::new(&name, Default::default()),
        )
        .await
        .context("creating a ServiceExport")?;
        loop {
            let at = [&si, &ep, &sl].map(|s| s.lock().expect("seen").get(&name).copied());
            if let [Some(a), Some(b), Some(c)] = at {
                took.push(a.max(b).max(c).saturating_duration_since(t0));
                break;
            }
            if t0.elapsed() > Duration::from_secs(60) {
                bail!("{name} was not imported in east within 60 s");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let cpu = cpu_line(&cpu0, started.elapsed());
    for t in [t1, t2, t3] {
        t.abort();
    }
    took.sort();
    Ok((percentile(&took, 0.5), percentile(&took, 0.99), cpu))
}

/// Changes of one remote cluster's gateway timed in [`agent`].
const AGENT_CHANGES: usize = 20;

/// East's agents with `k` remote clusters, on the testbed with kubelet Nodes: the
/// ClusterInfoImports east's member controller writes for `k` clusters (the simulated members'
/// CIDRs and gateways) are made here, as that controller makes them (unmanaged, so it leaves them
/// alone); how long each agent takes to hold all of them in its maps, its resident memory and map
/// sizes then, and the time from a ClusterInfoImport's new gateway address to the gateway
/// agent's peer table holding it, [`AGENT_CHANGES`] times (p50/p99).
pub async fn agent(k: usize) -> anyhow::Result<Vec<String>> {
    use mc_agent::{bpffs::PinLayout, dataplane::DataplaneMaps};
    use mc_api::clusterinfo::{ClusterInfo, ClusterInfoImport, ClusterInfoImportSpec, GatewayInfo};
    use mc_common::dataplane::PEER_REMOTE_GATEWAY;
    let api: Api<ClusterInfoImport> = Api::namespaced(client("east").await?, "kube-system");
    let name = |i: usize| format!("{}-clusterinfo", cluster_id(i));
    let info = |i: usize, gateway: String| {
        let (service_cidr, pod_cidr, _) = cidrs(i);
        ClusterInfoImport::new(
            &name(i),
            ClusterInfoImportSpec(ClusterInfo {
                cluster_id: Some(cluster_id(i)),
                service_cidr: Some(service_cidr),
                gateway_infos: vec![GatewayInfo {
                    gateway_ip: Some(gateway),
                }],
                pod_cidrs: vec![pod_cidr],
                ..Default::default()
            }),
        )
    };
    let procs = testbed::proc::Procs::new(&testbed_dir())?;
    let agents: Vec<(String, i32)> = testbed::topology::TestNode::all()
        .filter(|t| t.cluster.name == "east")
        .filter_map(|t| {
            let name = format!("{}-{}-mc-agent", t.cluster.name, t.name);
            procs.running(&name).map(|pid| (name, pid))
        })
        .collect();
    if agents.is_empty() {
        bail!("no east agent runs (the agent phase needs the testbed with kubelet Nodes)");
    }
    // The agent's pins, seen through its own mount namespace.
    let maps = |pid: i32| {
        DataplaneMaps::open_pinned(&PinLayout::new(format!(
            "/proc/{pid}/root/sys/fs/bpf/mc/v1"
        )))
        .ok()
    };
    let remote_gateways = |pid: i32| {
        maps(pid).map_or(Vec::new(), |m| {
            m.peers
                .iter()
                .filter_map(Result::ok)
                .filter(|(_, p)| p.kind == PEER_REMOTE_GATEWAY)
                .map(|(ip, _)| std::net::Ipv4Addr::from(ip))
                .collect()
        })
    };
    let mut lines = Vec::new();
    let started = Instant::now();
    for_all(k, |i| {
        let api = api.clone();
        let cii = info(i, cidrs(i).2);
        async move { ignore_exists(api.create(&PostParams::default(), &cii).await) }
    })
    .await?;
    let created = started.elapsed();
    for (agent, pid) in &agents {
        loop {
            let n = remote_gateways(*pid).len();
            if n >= k {
                break;
            }
            if started.elapsed() > Duration::from_secs(300) {
                bail!("{agent}: {n} of {k} remote clusters in its maps after 300 s");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        lines.push(format!(
            "{agent}: all {k} remote clusters in its maps {:.1} s after the first of {k} ClusterInfoImports was created (created in {:.1} s)",
            started.elapsed().as_secs_f64(),
            created.as_secs_f64()
        ));
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    for (agent, pid) in &agents {
        let (now, peak) = testbed::proc::rss_kib(*pid);
        let (peers, routes) = maps(*pid).map_or((0, 0), |m| {
            (m.peers.keys().count(), m.routes.keys().count())
        });
        lines.push(format!(
            "{agent}: resident {:.1} MiB (peak {:.1}); maps: {peers} peers (of {}), {routes} routes (of {})",
            now as f64 / 1024.0,
            peak as f64 / 1024.0,
            mc_common::dataplane::MAX_PEERS,
            mc_common::dataplane::MAX_REMOTE_PREFIXES
        ));
    }
    // A remote cluster's gateway moves: the time until the gateway agent's peers hold it.
    let (gateway_agent, pid) = agents
        .iter()
        .find(|(n, _)| n.contains("node-a"))
        .unwrap_or(&agents[0])
        .clone();
    let mut took = Vec::new();
    for c in 0..AGENT_CHANGES {
        let i = c % k;
        let moved = format!("198.19.{}.{}", 200 + c / 250, 1 + c % 250);
        let want: std::net::Ipv4Addr = moved.parse()?;
        let mut cii = api.get(&name(i)).await?;
        cii.spec.0.gateway_infos = vec![GatewayInfo {
            gateway_ip: Some(moved),
        }];
        let t0 = Instant::now();
        api.replace(&name(i), &PostParams::default(), &cii).await?;
        loop {
            if remote_gateways(pid).contains(&want) {
                took.push(t0.elapsed());
                break;
            }
            if t0.elapsed() > Duration::from_secs(30) {
                bail!(
                    "{gateway_agent}: the new gateway {want} of {} not in its peers after 30 s",
                    cluster_id(i)
                );
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    took.sort();
    lines.push(format!(
        "{gateway_agent}: a remote cluster's gateway changed in its ClusterInfoImport → in the peer table, with {k} remote clusters ({AGENT_CHANGES} changes): p50 {:.0} ms, p99 {:.0} ms",
        percentile(&took, 0.5).as_secs_f64() * 1e3,
        percentile(&took, 0.99).as_secs_f64() * 1e3
    ));
    for_all(k, |i| {
        let api = api.clone();
        async move {
            api.delete(&name(i), &Default::default()).await?;
            Ok(())
        }
    })
    .await?;
    Ok(lines)
}
