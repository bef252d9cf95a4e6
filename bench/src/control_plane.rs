//! `cargo xtask bench control-plane`: export→import latency on the testbed (controllers built
//! with the release profile). For 1, 100 and 1000 Services: the Services (with ready endpoints)
//! exist in west, their ServiceExports are created in one burst, and each Service's latency is the
//! time from its ServiceExport create request to the moment east holds both its ServiceImport
//! (with an IP) and the Endpoints `antrea-mc-<name>` (with an address). Then, once every
//! ServiceExport reports Ready (statuses are written after the imports), `STEADY` more Services
//! are exported one at a time (the next once the previous is imported): the latency an operator
//! sees at that scale (with when each hop saw each export, and the slowest exports hop by hop).
//! Prints p50/p99 of both per size and
//! each controller's resident memory after the size, and what each burst cost: the writes the
//! three API servers served (their own `apiserver_request_total`) and the CPU time of the
//! testbed's processes by kind, until every ServiceExport was Ready.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::{
    core::v1::{Endpoints, Namespace, Service},
    discovery::v1::EndpointSlice,
};
use kube::{
    Api, Client, ResourceExt as _,
    api::{DeleteParams, PostParams},
    runtime::watcher,
};
use mc_api::{
    clusterinfo::ClusterInfoImport,
    exports::ResourceExport,
    imports::ResourceImport,
    mcs::{ServiceExport, ServiceImport},
};
use serde_json::json;

use testbed::{
    paths::testbed_dir,
    topology::{CLUSTERS, TestNode},
};

pub(crate) async fn client(cluster: &str) -> anyhow::Result<Client> {
    let c = CLUSTERS
        .iter()
        .find(|c| c.name == cluster)
        .expect("cluster");
    let kc = kube::config::Kubeconfig::read_from(testbed::admin_kubeconfig(c))?;
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    // The bench creates thousands of objects; do not let the client throttle it.
    config.read_timeout = Some(Duration::from_secs(60));
    Ok(Client::try_from(config)?)
}

/// Per Service: when east first held its ServiceImport, and its Endpoints.
type Seen = Arc<Mutex<HashMap<String, (Option<Instant>, Option<Instant>)>>>;

/// When each Service's object of one kind was first seen (by a watch of its own).
type FirstSeen = Arc<Mutex<HashMap<String, Instant>>>;

/// Watches `api` and records when each Service's object first appeared, keyed by what `key`
/// makes of the object (`None`: not one of ours, or not complete yet).
pub(crate) fn first_seen<K>(
    api: Api<K>,
    key: impl Fn(&K) -> Option<String> + Send + 'static,
) -> (FirstSeen, tokio::task::JoinHandle<()>)
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    let seen: FirstSeen = Default::default();
    let s = seen.clone();
    let task = tokio::spawn(async move {
        let mut stream = watcher(api, Default::default()).boxed();
        while let Some(ev) = stream.next().await {
            let Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) = ev else {
                continue;
            };
            if let Some(k) = key(&o) {
                s.lock()
                    .expect("first seen")
                    .entry(k)
                    .or_insert_with(Instant::now);
            }
        }
    });
    (seen, task)
}

/// Creates `count` Services `<prefix>-<i>` in `ns` of `cluster`, each with one ready endpoint
/// (Endpoints, which Kubernetes mirrors into an EndpointSlice) in 10.244.`<third>`+ .0/24s.
pub(crate) async fn services_with_endpoints(
    cluster: &Client,
    ns: &str,
    prefix: &str,
    count: usize,
    third: usize,
) -> anyhow::Result<()> {
    let svcs: Api<Service> = Api::namespaced(cluster.clone(), ns);
    let eps: Api<Endpoints> = Api::namespaced(cluster.clone(), ns);
    for_all(count, |i| {
        let (svcs, eps) = (svcs.clone(), eps.clone());
        async move {
            let name = format!("{prefix}-{i}");
            let svc: Service = serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}
            }))
            .expect("Service");
            svcs.create(&PostParams::default(), &svc).await?;
            let ip = format!("10.244.{}.{}", third + i / 250, 1 + i % 250);
            let ep: Endpoints = serde_json::from_value(json!({
                "metadata": {"name": name},
                "subsets": [{"addresses": [{"ip": ip}],
                             "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}]
            }))
            .expect("Endpoints");
            eps.create(&PostParams::default(), &ep).await?;
            Ok(())
        }
    })
    .await
    .context("creating the Services")
}

/// When each import's ServiceImport in `ns` of `cluster` first had an IP.
pub(crate) fn service_imports_with_ip(
    cluster: &Client,
    ns: &str,
) -> (FirstSeen, tokio::task::JoinHandle<()>) {
    first_seen(Api::<ServiceImport>::namespaced(cluster.clone(), ns), |o| {
        (!o.spec.ips.is_empty()).then(|| o.name_any())
    })
}

/// When each import's Endpoints `antrea-mc-<name>` in `ns` of `cluster` first held an address
/// (keyed by `<name>`).
pub(crate) fn imported_endpoints(
    cluster: &Client,
    ns: &str,
) -> (FirstSeen, tokio::task::JoinHandle<()>) {
    first_seen(Api::<Endpoints>::namespaced(cluster.clone(), ns), |o| {
        let has = o
            .subsets
            .iter()
            .flatten()
            .any(|s| s.addresses.as_ref().is_some_and(|a| !a.is_empty()));
        has.then(|| o.name_any().strip_prefix("antrea-mc-").map(str::to_owned))
            .flatten()
    })
}

/// The hops of one export, in order: the leader's two ResourceExports and two ResourceImports,
/// then east's Service (with its ClusterIP); the ServiceImport and Endpoints are `Seen`.
fn hop_watches(
    north: &Client,
    east: &Client,
    ns: &str,
) -> Vec<(&'static str, (FirstSeen, tokio::task::JoinHandle<()>))> {
    let leader_ns = testbed::controllers::LEADER_NS;
    let res: Api<ResourceExport> = Api::namespaced(north.clone(), leader_ns);
    let ris: Api<ResourceImport> = Api::namespaced(north.clone(), leader_ns);
    let svc: Api<Service> = Api::namespaced(east.clone(), ns);
    let named = |prefix: String, suffix: &'static str| {
        move |name: &str| {
            name.strip_prefix(&prefix)
                .and_then(|n| n.strip_suffix(suffix))
                .map(str::to_owned)
        }
    };
    let (re_svc, re_eps) = (
        named(format!("test-cluster-west-{ns}-"), "-service"),
        named(format!("test-cluster-west-{ns}-"), "-endpoints"),
    );
    let (ri_svc, ri_eps) = (
        named(format!("{ns}-"), "-service"),
        named(format!("{ns}-"), "-endpoints"),
    );
    vec![
        (
            "ResourceExport service",
            first_seen(res.clone(), move |o| re_svc(&o.name_any())),
        ),
        (
            "ResourceExport endpoints",
            first_seen(res, move |o| re_eps(&o.name_any())),
        ),
        (
            "ResourceImport service",
            first_seen(ris.clone(), move |o| ri_svc(&o.name_any())),
        ),
        (
            "ResourceImport endpoints",
            first_seen(ris, move |o| ri_eps(&o.name_any())),
        ),
        (
            "east Service with a ClusterIP",
            first_seen(svc, |o| {
                o.spec.as_ref()?.cluster_ip.as_ref()?;
                o.name_any().strip_prefix("antrea-mc-").map(str::to_owned)
            }),
        ),
        (
            "east ServiceImport with an IP",
            service_imports_with_ip(east, ns),
        ),
        (KUBE_PROXY_HOP, kube_proxy_slices(east, ns)),
    ]
}

/// When kube-proxy's EndpointSlice of each import `antrea-mc-<name>` in `ns` of `cluster` first
/// held an endpoint (keyed by `<name>`).
pub(crate) fn kube_proxy_slices(
    cluster: &Client,
    ns: &str,
) -> (FirstSeen, tokio::task::JoinHandle<()>) {
    first_seen(Api::<EndpointSlice>::namespaced(cluster.clone(), ns), |o| {
        if o.endpoints.as_ref().is_none_or(Vec::is_empty) {
            return None;
        }
        o.labels()
            .get(mc_api::mcs::labels::KUBE_SERVICE_NAME)?
            .strip_prefix("antrea-mc-")
            .map(str::to_owned)
    })
}

/// Services exported one at a time after each burst.
const STEADY: usize = 100;

/// The hop of kube-proxy's EndpointSlice, part of what "imported" means (see [`imported`]).
const KUBE_PROXY_HOP: &str = "east kube-proxy's EndpointSlice with an endpoint";

/// The latency of each Service in `created` that east has fully imported: its ServiceImport
/// (with an IP), its Endpoints and kube-proxy's EndpointSlice of `antrea-mc-<svc>` (with an
/// endpoint) all seen. Without the slice kube-proxy cannot route the import, so until
/// 2026-11-27 night's change to this definition a base that left the slice to Kubernetes'
/// mirroring looked imported up to 25 s before it worked (docs/benchmarks.md).
fn imported(seen: &Seen, slices: &FirstSeen, created: &HashMap<String, Instant>) -> Vec<Duration> {
    let s = seen.lock().expect("seen");
    let k = slices.lock().expect("slices");
    created
        .iter()
        .filter_map(|(name, t0)| match (s.get(name), k.get(name)) {
            (Some((Some(a), Some(b))), Some(c)) => Some((*a).max(*b).max(*c) - *t0),
            _ => None,
        })
        .collect()
}

/// CPU time used so far by the testbed's processes (and their finished children), by kind.
pub(crate) fn testbed_cpu() -> BTreeMap<&'static str, Duration> {
    let mut by_kind = BTreeMap::new();
    let procs = testbed::proc::Procs::new(&testbed_dir()).ok();
    let files = std::fs::read_dir(testbed_dir().join("pids"))
        .into_iter()
        .flatten();
    for file in files.flatten() {
        let name = file.file_name().to_string_lossy().into_owned();
        let Some(name) = name.strip_suffix(".pid") else {
            continue;
        };
        let kind = if name.ends_with("-apiserver") {
            "API servers"
        } else if name == "etcd" {
            "etcd"
        } else if name.ends_with("-controller-manager") {
            "controller-managers"
        } else if name.ends_with("-mc-controller") || name.ends_with("-mc-member") {
            "Strait controllers"
        } else if name.ends_with("-mc-agent") {
            "agents"
        } else {
            "other"
        };
        if let Some(pid) = procs.as_ref().and_then(|p| p.running(name)) {
            *by_kind.entry(kind).or_default() += testbed::proc::cpu_time(pid);
        }
    }
    by_kind
}

/// One sample of an API server's `/metrics`: the metric's name, its labels and its value.
struct Sample<'a> {
    name: &'a str,
    labels: &'a str,
    value: f64,
}

impl Sample<'_> {
    fn label(&self, name: &str) -> &str {
        self.labels
            .split_once(&format!("{name}=\""))
            .and_then(|(_, rest)| rest.split_once('"'))
            .map_or("", |(value, _)| value)
    }

    /// For a write (create, update, patch, apply, delete): its verb and its resource
    /// (`resource/subresource` for a subresource).
    fn write(&self) -> Option<(&str, String)> {
        let verb = self.label("verb");
        if !["POST", "PUT", "PATCH", "APPLY", "DELETE"].contains(&verb) {
            return None;
        }
        let resource = match self.label("subresource") {
            "" => self.label("resource").to_owned(),
            sub => format!("{}/{sub}", self.label("resource")),
        };
        Some((verb, resource))
    }
}

/// Each API server's `/metrics`, by cluster, for [`samples`].
async fn api_metrics(clients: &[(&str, &Client)]) -> anyhow::Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for (cluster, c) in clients {
        let text = c
            .request_text(http::Request::get("/metrics").body(Vec::new())?)
            .await
            .context("the API server's /metrics")?;
        out.push((cluster.to_string(), text));
    }
    Ok(out)
}

/// The samples of the metrics named in `names` in a `/metrics` text.
fn samples<'a>(text: &'a str, names: &'a [&str]) -> impl Iterator<Item = Sample<'a>> {
    text.lines().filter_map(move |line| {
        let (name, rest) = line.split_once('{')?;
        let (labels, value) = rest.rsplit_once("} ")?;
        names.contains(&name).then(|| Sample {
            name,
            labels,
            value: value.parse().unwrap_or(0.0),
        })
    })
}

/// Writes (create, update, patch, apply, delete) the API servers have served so far, from their
/// own `apiserver_request_total`, by cluster and resource.
async fn api_writes(clients: &[(&str, &Client)]) -> anyhow::Result<BTreeMap<String, u64>> {
    let mut writes = BTreeMap::new();
    for (cluster, text) in api_metrics(clients).await? {
        for s in samples(&text, &["apiserver_request_total"]) {
            if let Some((_, resource)) = s.write() {
                *writes.entry(format!("{cluster} {resource}")).or_default() += s.value as u64;
            }
        }
    }
    Ok(writes)
}

/// Time the API servers took over each kind of write, and over each admission webhook call:
/// (total seconds, count) by "cluster verb resource" and "cluster webhook name", from their
/// `apiserver_request_duration_seconds` and `apiserver_admission_webhook_admission_duration_seconds`.
async fn write_latencies(
    clients: &[(&str, &Client)],
) -> anyhow::Result<BTreeMap<String, (f64, f64)>> {
    const WEBHOOK: &str = "apiserver_admission_webhook_admission_duration_seconds";
    let names = [
        "apiserver_request_duration_seconds_sum",
        "apiserver_request_duration_seconds_count",
        "apiserver_admission_webhook_admission_duration_seconds_sum",
        "apiserver_admission_webhook_admission_duration_seconds_count",
    ];
    let mut out: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for (cluster, text) in api_metrics(clients).await? {
        for s in samples(&text, &names) {
            let key = if s.name.starts_with(WEBHOOK) {
                format!("{cluster} webhook {}", s.label("name"))
            } else if let Some((verb, resource)) = s.write() {
                format!("{cluster} {verb} {resource}")
            } else {
                continue;
            };
            let e = out.entry(key).or_default();
            if s.name.ends_with("_sum") {
                e.0 += s.value;
            } else {
                e.1 += s.value;
            }
        }
    }
    Ok(out)
}

/// The mean of each kind of write or webhook call between two [`write_latencies`] readings.
fn latency_line(
    before: &BTreeMap<String, (f64, f64)>,
    after: &BTreeMap<String, (f64, f64)>,
) -> String {
    after
        .iter()
        .filter_map(|(k, (sum, n))| {
            let (s0, n0) = before.get(k).copied().unwrap_or_default();
            let count = (n - n0).round();
            (count > 0.0).then(|| format!("{k} {:.1} ms ({count})", (sum - s0) / count * 1e3))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Waits (up to a minute) until the API servers serve fewer than 10 writes in 2 s (leases and
/// heartbeats go on): the mirroring of EndpointSlices and other work a burst set off is done.
async fn wait_quiet(clients: &[(&str, &Client)]) -> anyhow::Result<BTreeMap<String, u64>> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = api_writes(clients).await?;
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = api_writes(clients).await?;
        let new: u64 = now
            .iter()
            .map(|(k, n)| n.saturating_sub(last.get(k).copied().unwrap_or(0)))
            .sum();
        if new < 10 {
            return Ok(now);
        }
        if Instant::now() > deadline {
            eprintln!(
                "warning: the API servers were still serving {new} writes per 2 s after a minute; \
                 the burst's cost below may be incomplete"
            );
            return Ok(now);
        }
        last = now;
    }
}

/// Where a burst's work went: the API writes it took, by cluster and resource, and the CPU time
/// of each kind of process, from before the burst until the API servers were quiet again.
fn burst_cost(
    n: usize,
    writes: (&BTreeMap<String, u64>, &BTreeMap<String, u64>),
    wall: Duration,
    cpu: (
        &BTreeMap<&'static str, Duration>,
        &BTreeMap<&'static str, Duration>,
    ),
) -> String {
    let mut by_resource: Vec<(&str, u64)> = writes
        .1
        .iter()
        .map(|(k, v)| {
            (
                k.as_str(),
                v.saturating_sub(writes.0.get(k).copied().unwrap_or(0)),
            )
        })
        .filter(|(_, v)| *v > 0)
        .collect();
    by_resource.sort_by_key(|(_, v)| std::cmp::Reverse(*v));
    let total_writes: u64 = by_resource.iter().map(|(_, v)| v).sum();
    let per = |v: u64| v as f64 / n as f64;
    let biggest: Vec<String> = by_resource
        .iter()
        .take(12)
        .map(|(k, v)| format!("{k} {:.1}", per(*v)))
        .collect();
    let used = cpu_used(cpu);
    let total: Duration = used.iter().map(|(_, t)| *t).sum();
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let parts: Vec<String> = used
        .iter()
        .map(|(k, t)| format!("{k} {:.1} s", t.as_secs_f64()))
        .collect();
    format!(
        "burst of {n}, until the API servers were quiet ({:.1} s): {total_writes} API writes ({:.1} per Service) and {:.1} s of the testbed's CPU ({:.0} ms per Service, {:.2} of {cores} cores): {}\n  writes per Service, by cluster and resource: {}",
        wall.as_secs_f64(),
        per(total_writes),
        total.as_secs_f64(),
        total.as_secs_f64() * 1000.0 / n as f64,
        total.as_secs_f64() / wall.as_secs_f64(),
        parts.join(", "),
        biggest.join(", ")
    )
}

/// The CPU each kind of process used between two [`testbed_cpu`] readings.
fn cpu_used(
    cpu: (
        &BTreeMap<&'static str, Duration>,
        &BTreeMap<&'static str, Duration>,
    ),
) -> Vec<(&'static str, Duration)> {
    cpu.1
        .iter()
        .map(|(k, t)| {
            (
                *k,
                t.saturating_sub(cpu.0.get(k).copied().unwrap_or_default()),
            )
        })
        .collect()
}

/// How long the testbed's idle CPU is measured before each one-by-one phase.
const IDLE_WINDOW: Duration = Duration::from_secs(5);

/// The CPU each kind of process used between two [`testbed_cpu`] readings `wall` apart, in
/// cores, and per export when `exports` were made in that time.
fn cpu_line(
    cpu: (
        &BTreeMap<&'static str, Duration>,
        &BTreeMap<&'static str, Duration>,
    ),
    wall: Duration,
    exports: Option<usize>,
) -> String {
    let used = cpu_used(cpu);
    let total: Duration = used.iter().map(|(_, t)| *t).sum();
    let share = |t: Duration| t.as_secs_f64() / wall.as_secs_f64().max(1e-9);
    let parts: Vec<String> = used
        .iter()
        .map(|(k, t)| match exports {
            Some(n) => format!(
                "{k} {:.2} cores ({:.1} ms per export, idle included)",
                share(*t),
                t.as_secs_f64() * 1e3 / n as f64
            ),
            None => format!("{k} {:.2} cores", share(*t)),
        })
        .collect();
    format!(
        "{:.2} cores over {:.1} s: {}",
        share(total),
        wall.as_secs_f64(),
        parts.join(", ")
    )
}

pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

pub(crate) async fn for_all<F, Fut>(n: usize, f: F) -> anyhow::Result<()>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = kube::Result<()>>,
{
    futures::stream::iter((0..n).map(f))
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// Waits until the namespace `ns` is gone from every cluster, so that the next size creates its
/// Services after the previous size's are deleted (1100 Services created while 600 were still
/// being deleted timed out). A failed read is retried (and said once); after 5 minutes it warns
/// and lets the run go on: the sizes measured so far are printed at the end.
async fn namespaces_gone(ns: &str, clients: &[&Client]) {
    let deadline = Instant::now() + Duration::from_secs(300);
    for c in clients {
        let api: Api<Namespace> = Api::all((*c).clone());
        let mut said = false;
        loop {
            match api.get_opt(ns).await {
                Ok(None) => break,
                Ok(Some(_)) => {}
                Err(e) if !said => {
                    eprintln!("warning: reading the namespace {ns} (retrying): {e}");
                    said = true;
                }
                Err(_) => {}
            }
            if Instant::now() > deadline {
                eprintln!(
                    "warning: the namespace {ns} was not gone within 5 minutes; the next size \
                     starts anyway"
                );
                return;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// Gateway Nodes the bench keeps Ready in east and west (the bench's testbed has no Nodes), so
/// that the members announce their clusters; waits until west's ClusterInfo reached east. The
/// returned task renews the Nodes' Leases until it is aborted.
pub(crate) async fn announce_members(
    east: &Client,
    west: &Client,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let gateways = crate::gateways::start(
        &[("east", east.clone()), ("west", west.clone())],
        |cluster| {
            let n = TestNode::all()
                .find(|n| n.cluster.name == cluster && n.gateway_candidate())
                .expect("a gateway candidate per member");
            (n.ip(), n.pod_cidr())
        },
    )
    .await?;
    let infos: Api<ClusterInfoImport> = Api::namespaced(east.clone(), "kube-system");
    let announced = Instant::now();
    while !infos
        .list(&Default::default())
        .await?
        .items
        .iter()
        .any(|i| {
            i.spec
                .0
                .cluster_id
                .as_deref()
                .is_some_and(|c| c.ends_with("west"))
        })
    {
        if announced.elapsed() > Duration::from_secs(120) {
            bail!("west's ClusterInfo did not reach east within 120 s");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!(
        "west's ClusterInfo reached east {:.1} s after the gateway Nodes",
        announced.elapsed().as_secs_f64()
    );
    Ok(gateways)
}

pub(crate) async fn control_plane(sizes: Vec<usize>) -> anyhow::Result<()> {
    let west = client("west").await?;
    let east = client("east").await?;
    let north = client("north").await?;
    let gateways = announce_members(&east, &west).await?;
    let mut rows = Vec::new();
    for (size_index, &n) in sizes.iter().enumerate() {
        let ns = format!("bench-{n}-{}", std::process::id());
        for c in [&west, &east, &north] {
            let api: Api<Namespace> = Api::all(c.clone());
            let nsobj: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
            api.create(&PostParams::default(), &nsobj).await?;
        }
        services_with_endpoints(&west, &ns, "svc", n + STEADY, 100).await?;
        // Let the endpoint-slice mirroring catch up before timing anything.
        tokio::time::sleep(Duration::from_secs(2 + (n + STEADY) as u64 / 200)).await;

        // Watch east for the imports.
        let seen: Seen = Default::default();
        let s1 = seen.clone();
        let si_api: Api<ServiceImport> = Api::namespaced(east.clone(), &ns);
        let si_task = tokio::spawn(async move {
            let mut stream = watcher(si_api, Default::default()).boxed();
            while let Some(ev) = stream.next().await {
                // A watch error (a relist) is retried by the watcher: skip it.
                let Ok(ev) = ev else { continue };
                if let watcher::Event::Apply(si) | watcher::Event::InitApply(si) = ev
                    && !si.spec.ips.is_empty()
                {
                    let mut s = s1.lock().expect("seen");
                    s.entry(si.name_any())
                        .or_default()
                        .0
                        .get_or_insert(Instant::now());
                }
            }
        });
        let s2 = seen.clone();
        let ep_api: Api<Endpoints> = Api::namespaced(east.clone(), &ns);
        let ep_task = tokio::spawn(async move {
            let mut stream = watcher(ep_api, Default::default()).boxed();
            while let Some(ev) = stream.next().await {
                let Ok(ev) = ev else { continue };
                if let watcher::Event::Apply(ep) | watcher::Event::InitApply(ep) = ev
                    && let Some(name) = ep.name_any().strip_prefix("antrea-mc-")
                    && ep
                        .subsets
                        .iter()
                        .flatten()
                        .any(|s| s.addresses.as_ref().is_some_and(|a| !a.is_empty()))
                {
                    let mut s = s2.lock().expect("seen");
                    s.entry(name.to_owned())
                        .or_default()
                        .1
                        .get_or_insert(Instant::now());
                }
            }
        });
        // Each hop of an export, for the one-by-one phase: where its latency goes.
        let hops = hop_watches(&north, &east, &ns);
        let slices = hops
            .iter()
            .find(|(hop, _)| *hop == KUBE_PROXY_HOP)
            .map(|(_, (seen, _))| seen.clone())
            .context("the kube-proxy EndpointSlice hop")?;
        tokio::time::sleep(Duration::from_millis(500)).await;

        let clusters = [("west", &west), ("east", &east), ("north", &north)];
        // (Reading the API servers' metrics costs them CPU: outside the CPU window.)
        let writes_before = wait_quiet(&clusters).await?;
        let cpu_before = testbed_cpu();
        let created: Arc<Mutex<HashMap<String, Instant>>> = Default::default();
        let se_api: Api<ServiceExport> = Api::namespaced(west.clone(), &ns);
        let started = Instant::now();
        for_all(n, |i| {
            let (api, created) = (se_api.clone(), created.clone());
            async move {
                let name = format!("svc-{i}");
                let se = ServiceExport::new(&name, Default::default());
                created
                    .lock()
                    .expect("created")
                    .insert(name, Instant::now());
                api.create(&PostParams::default(), &se).await?;
                Ok(())
            }
        })
        .await
        .context("creating the ServiceExports")?;
        let deadline = Instant::now() + Duration::from_secs(120 + n as u64 / 5);
        let latencies = loop {
            let done = imported(&seen, &slices, &created.lock().expect("created"));
            if done.len() == n {
                break done;
            }
            if Instant::now() > deadline {
                bail!(
                    "only {} of {n} Services imported in east (ServiceImport, Endpoints and kube-proxy's EndpointSlice) after {:?}; see {}",
                    done.len(),
                    started.elapsed(),
                    testbed_dir().join("logs").display()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let total = started.elapsed();
        // Where the burst's time goes: when each hop had seen half and all of the Services.
        let burst_hops: Vec<String> = hops
            .iter()
            .map(|(hop, (seen, _))| {
                let s = seen.lock().expect("hop");
                let mut at: Vec<Duration> = (0..n)
                    .filter_map(|i| s.get(&format!("svc-{i}")))
                    .map(|t| t.saturating_duration_since(started))
                    .collect();
                at.sort();
                let all = match at.len() {
                    k if k == n => format!("{:.1?}", at[k - 1]),
                    k => format!("{k} of {n}"),
                };
                format!("{hop} {:.1?}/{all}", percentile(&at, 0.5))
            })
            .collect();
        // Steady state first: every ServiceExport reports Ready (its statuses written too).
        let ready_deadline = Instant::now() + Duration::from_secs(120 + n as u64 / 5);
        let all_ready = loop {
            let exports = se_api.list(&Default::default()).await?;
            let ready = exports
                .items
                .iter()
                .filter(|se| {
                    se.status.as_ref().is_some_and(|s| {
                        s.conditions
                            .iter()
                            .any(|c| c.type_ == "Ready" && c.status == "True")
                    })
                })
                .count();
            if ready >= n {
                break started.elapsed();
            }
            if Instant::now() > ready_deadline {
                bail!(
                    "only {ready} of {n} ServiceExports Ready after {:?}",
                    started.elapsed()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let writes_after = wait_quiet(&clusters).await?;
        let cpu_after = testbed_cpu();
        let cost = format!(
            "{}\n  burst of {n}, when each hop had seen half / all of the Services after the first \
             create request: {}",
            burst_cost(
                n,
                (&writes_before, &writes_after),
                started.elapsed(),
                (&cpu_before, &cpu_after),
            ),
            burst_hops.join(", ")
        );
        // At this scale, one more at a time.
        let mut steady = Vec::new();
        // Each export's latency and when each hop saw it: the hops' percentiles, and the
        // slowest exports hop by hop (the tail).
        let mut traces: Vec<(Duration, String, Vec<Option<Duration>>)> = Vec::new();
        // What the testbed uses with nothing in flight (leases, resyncs, what the burst left
        // behind), then over the one-by-one phase: the background, and what an export costs.
        let idle_before = testbed_cpu();
        let idle_started = Instant::now();
        tokio::time::sleep(IDLE_WINDOW).await;
        let idle_line = cpu_line((&idle_before, &testbed_cpu()), idle_started.elapsed(), None);
        // (After the idle window, so that its leases are not in the phase's write times; before
        // the phase's CPU window, as reading the metrics costs the API servers CPU.)
        let latencies_before = write_latencies(&clusters).await?;
        let steady_cpu_before = testbed_cpu();
        let steady_started = Instant::now();
        for i in n..n + STEADY {
            let name = format!("svc-{i}");
            let t0 = Instant::now();
            se_api
                .create(
                    &PostParams::default(),
                    &ServiceExport::new(&name, Default::default()),
                )
                .await
                .context("creating a ServiceExport")?;
            let one: HashMap<String, Instant> = [(name.clone(), t0)].into();
            loop {
                if let Some(d) = imported(&seen, &slices, &one).first() {
                    steady.push(*d);
                    let trace = hops
                        .iter()
                        .map(|(_, (seen, _))| {
                            seen.lock()
                                .expect("hop")
                                .get(&name)
                                .map(|at| at.saturating_duration_since(t0))
                        })
                        .collect();
                    traces.push((*d, name.clone(), trace));
                    break;
                }
                if t0.elapsed() > Duration::from_secs(60) {
                    bail!("{name} was not imported in east within 60 s");
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let steady_line = cpu_line(
            (&steady_cpu_before, &testbed_cpu()),
            steady_started.elapsed(),
            Some(STEADY),
        );
        let request_line = latency_line(&latencies_before, &write_latencies(&clusters).await?);
        steady.sort();
        si_task.abort();
        ep_task.abort();
        let hop_line: Vec<String> = hops
            .iter()
            .enumerate()
            .map(|(i, (hop, (_, task)))| {
                task.abort();
                let mut took: Vec<Duration> = traces.iter().filter_map(|t| t.2[i]).collect();
                took.sort();
                format!(
                    "{hop} {:.0?}/{:.0?}",
                    percentile(&took, 0.5),
                    percentile(&took, 0.99)
                )
            })
            .collect();
        traces.sort_by_key(|a| std::cmp::Reverse(a.0));
        let slowest: Vec<String> = traces
            .iter()
            .take(3)
            .map(|(took, name, hops)| {
                let at: Vec<String> = hops
                    .iter()
                    .map(|h| h.map_or("-".to_owned(), |d| d.as_millis().to_string()))
                    .collect();
                format!("{name} {} ms ({})", took.as_millis(), at.join(", "))
            })
            .collect();
        let mut sorted = latencies;
        sorted.sort();
        let rss: Vec<(String, u64, u64)> = CLUSTERS
            .iter()
            .map(|c| {
                let name = testbed::controllers::process_name(c);
                let (now, peak) = controller_mem_kib(&name);
                (name.clone(), now / 1024, peak / 1024)
            })
            .collect();
        rows.push((
            n,
            [
                percentile(&sorted, 0.5),
                percentile(&sorted, 0.99),
                percentile(&steady, 0.5),
                percentile(&steady, 0.99),
            ],
            total,
            all_ready,
            rss,
            (
                cost,
                hop_line,
                request_line,
                slowest,
                (idle_line, steady_line),
            ),
        ));
        for c in [&west, &east, &north] {
            let api: Api<Namespace> = Api::all(c.clone());
            api.delete(&ns, &DeleteParams::background()).await?;
        }
        if size_index + 1 < sizes.len() {
            namespaces_gone(&ns, &[&west, &east, &north]).await;
        }
    }
    println!(
        "\nexport→import latency (ServiceExport created in west → ServiceImport, Endpoints and kube-proxy's EndpointSlice in east)"
    );
    println!(
        "BURST: all N exported at once (ALL READY: every ServiceExport Ready); 1-BY-1: then {STEADY} more exported one by one"
    );
    println!(
        "{:>9} {:>10} {:>10} {:>12} {:>10} {:>11} {:>11}   resident memory after the run (peak so far), MiB",
        "SERVICES",
        "BURST p50",
        "BURST p99",
        "ALL IMPORTED",
        "ALL READY",
        "1-BY-1 p50",
        "1-BY-1 p99"
    );
    let mut costs = Vec::new();
    for (n, [p50, p99, s50, s99], total, all_ready, rss, (cost, hops, requests, slowest, cpu)) in
        rows
    {
        costs.push(format!(
            "{cost}\n  1-by-1 at {n}, when each hop was first seen after the ServiceExport's create request (p50/p99): {}\n  1-by-1 at {n}, the slowest exports and when each hop above saw them (ms): {}\n  1-by-1 at {n}, the API servers' mean time per write and per webhook call (count): {requests}\n  at {n}, the testbed's CPU idle before the one-by-one phase: {}\n  1-by-1 at {n}, the testbed's CPU over the phase: {}",
            hops.join(", "),
            slowest.join("; "),
            cpu.0,
            cpu.1
        ));
        let mem: Vec<String> = rss
            .iter()
            .map(|(k, now, peak)| format!("{k} {now} ({peak})"))
            .collect();
        println!(
            "{n:>9} {:>10} {:>10} {:>12} {:>10} {:>11} {:>11}   {}",
            format!("{:.0?}", p50),
            format!("{:.0?}", p99),
            format!("{:.1?}", total),
            format!("{:.1?}", all_ready),
            format!("{:.0?}", s50),
            format!("{:.0?}", s99),
            mem.join(", ")
        );
    }
    for cost in costs {
        println!("{cost}");
    }
    println!("targets: p99 <= 1 s at 1000 Services; <= 50 MiB resident per controller");
    gateways.abort();
    crate::gateways::remove(&[east.clone(), west.clone()]).await;
    Ok(())
}

/// A controller's resident memory now and its peak so far (VmRSS, VmHWM), in KiB; zeros if it
/// is not running.
fn controller_mem_kib(name: &str) -> (u64, u64) {
    testbed::proc::Procs::new(&testbed_dir())
        .ok()
        .and_then(|p| p.running(name))
        .map_or((0, 0), testbed::proc::rss_kib)
}
