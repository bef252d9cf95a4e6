//! The leader: in the Common Area namespace, it tracks members from their announces, merges
//! their exports into imports, reports the ClusterSet's status and collects what departed
//! members left behind. One level-triggered loop, incremental by key: a change to a
//! ResourceExport or ResourceImport marks its group (`group_of_export`, `group_of_import`), and a
//! pass merges and writes only the marked groups; the members' state and the ClusterSet status
//! (a handful of objects) are recomputed on every pass, and a 2 s tick catches heartbeat
//! timeouts. A cluster that comes, goes, is withdrawn or has a new accepted ClusterInfo
//! re-merges the groups it exports to; everything is recomputed after a failed write, when the
//! quota refusals change, and every `FULL_RESYNC`.

pub mod announce;
pub mod binding;
pub mod members;
pub mod merge;

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::{Endpoints, Node, ServiceAccount};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::{Api, Client, ResourceExt as _, runtime::watcher};
use mc_api::{
    clusterclaim::v1alpha2::ClusterClaim,
    clusterset::v1alpha2::ClusterSet,
    exports::{Kind, ResourceExport},
    imports::{LabelIdentityImport, ResourceImport, ResourceImportSpec, kinds as ri_kinds},
    labelidentity::IdAllocator,
    memberclusterannounce::MemberClusterAnnounce,
    names::{self, annotations, finalizers},
};
use serde_json::json;

use crate::conditions::{condition, keep_transition_time, same};
use mc_kube::{
    Driver, Metrics, Op, Reconciler, StatusPacer, Trigger, Watched, Work, Writer, run_all,
    watch::WatchHealth, write::Compare,
};
use members::{Liveness, Tracker};

pub struct LeaderOptions {
    pub namespace: String,
    pub liveness: Liveness,
    /// Wakes the loop; `accounts` was made with it.
    pub trigger: Trigger,
    /// The namespace's ServiceAccounts (shared with the webhooks, which look callers up in it).
    pub accounts: Arc<Watched<ServiceAccount>>,
    /// `enableStretchedNetworkPolicy`: label identities get IDs and are imported.
    pub stretched: bool,
    /// `minAnnouncedPrefixLength`: members' wider prefixes are refused.
    pub min_prefix_len: u8,
    /// `maxServiceExportsPerMember`, `maxLabelIdentitiesPerMember`.
    pub quota: merge::Quota,
}

/// The watch of the leader namespace's ServiceAccounts, firing `trigger` on every change.
pub fn watch_accounts(
    client: &Client,
    namespace: &str,
    trigger: &Trigger,
) -> Arc<Watched<ServiceAccount>> {
    Arc::new(Watched::new(
        Api::namespaced(client.clone(), namespace),
        watcher::Config::default(),
        trigger.clone(),
        "ServiceAccount",
    ))
}

struct Leader {
    ns: String,
    liveness: Liveness,
    writer: Writer,
    metrics: Metrics,
    clustersets: Watched<ClusterSet>,
    claims: Watched<ClusterClaim>,
    announces: Watched<MemberClusterAnnounce>,
    exports: Watched<ResourceExport>,
    imports: Watched<ResourceImport>,
    /// This cluster's Nodes (their addresses only): no member may announce a prefix holding one.
    nodes: Watched<Node>,
    /// This cluster's API server addresses (the `kubernetes` Endpoints), read every
    /// `FULL_RESYNC`, and when.
    api_addrs: (Vec<std::net::Ipv4Addr>, Option<Instant>),
    client: Client,
    re_api: Api<ResourceExport>,
    mca_api: Api<MemberClusterAnnounce>,
    ri_api: Api<ResourceImport>,
    cs_api: Api<ClusterSet>,
    tracker: Tracker,
    accounts: Arc<Watched<ServiceAccount>>,
    sa_api: Api<ServiceAccount>,
    statuses: StatusPacer,
    /// Work left over for the next pass: deferred statuses, young orphans, failed writes.
    pending: Work,
    /// The members as the last pass saw them (known, withdrawn): a change re-merges the groups
    /// of the clusters it is about.
    members_seen: (BTreeSet<String>, BTreeSet<String>),
    /// The ClusterInfos the last pass accepted: a change re-merges the groups of the clusters
    /// it is about (endpoints are imported only inside their exporter's accepted CIDRs).
    accepted_seen: BTreeMap<String, announce::Accepted>,
    /// The last weighing of the announcements, with what it was made from (the ClusterInfo
    /// exports' and imports' versions, `cluster_infos_fingerprint`, and the rules): a pass that
    /// changed neither (a heartbeat, every member's every 10 s; another kind of export) does not
    /// weigh every ClusterInfo against every other again.
    weighed: Option<((u64, announce::Rules), Arc<announce::Verdicts>)>,
    /// The exports' store generation the quotas were last counted at.
    quota_counted: Option<u64>,
    /// Members whose ClusterInfo is refused, with why (their ClusterSet status says so).
    refused_infos: BTreeMap<String, members::Announced>,
    min_prefix_len: u8,
    quota: merge::Quota,
    /// The exports the last pass refused for their member's quota: a change re-merges
    /// everything (one freed slot admits another member's export in another group).
    over_quota: BTreeMap<String, String>,
    stretched: bool,
    /// The label identities' IDs (restored from the imports on the first pass).
    ids: Option<IdAllocator>,
    /// The highest ID this leader wrote on the ClusterSet (`annotations::LABEL_IDS_ISSUED`).
    ids_recorded: u32,
}

/// Everything is recomputed at least this often, whatever the watches said.
pub const FULL_RESYNC: Duration = Duration::from_secs(30);

/// How long the ID of a label gone from every cluster is held back before another label may get
/// it: far longer than a member takes to remove the LabelIdentity and an agent its map entry, so
/// that no VNI still in flight or in a map names the new label.
pub const LABEL_ID_HOLD: Duration = Duration::from_secs(600);

/// The group a ResourceExport is merged in: the stem of the ResourceImports it feeds
/// (`<ns>-<name>` for a Service and its Endpoints; two sources whose imports would share a name
/// share a group).
pub fn group_of_export(re: &ResourceExport) -> String {
    let (ns, name) = merge::source_of(re);
    match re.spec.kind() {
        Kind::Service | Kind::Endpoints => format!("{ns}-{name}"),
        Kind::Acnp => name,
        // Every cluster's export of a label feeds the one import named by its hash.
        Kind::LabelIdentity => names::label_hash_of_export(&re.name_any()).to_owned(),
        // About no key: the leader weighs every ClusterInfo against the others in every pass.
        Kind::ClusterInfo => String::new(),
        _ => re.name_any(),
    }
}

/// The group of a ResourceImport (see [`group_of_export`]).
pub fn group_of_import(ri: &ResourceImport) -> String {
    let ns = ri.spec.namespace.as_deref().unwrap_or_default();
    let name = ri.spec.name.as_deref().unwrap_or_default();
    match ri.spec.kind.as_deref() {
        Some(ri_kinds::SERVICE_IMPORT | ri_kinds::ENDPOINTS) => format!("{ns}-{name}"),
        Some(ri_kinds::ACNP) => name.to_owned(),
        Some(ri_kinds::CLUSTER_INFO) => String::new(),
        _ => ri.name_any(),
    }
}

/// A member's export left without its announce this long is collected (the announce comes first
/// when a member joins, so a younger export may just be ahead of the announce in the watch).
const ORPHAN_AGE: SignedDuration = SignedDuration::from_secs(10);
/// A member silent for this long has its announce removed (Antrea: 24 h), so that its exports
/// are collected as those of a member that left.
const ANNOUNCE_MAX_AGE: SignedDuration = SignedDuration::from_hours(24);

pub async fn run(client: Client, opts: LeaderOptions, metrics: Metrics) -> anyhow::Result<()> {
    let trigger = opts.trigger.clone();
    let ns = opts.namespace.clone();
    let ns_for_binder = opts.namespace.clone();
    let cfg = watcher::Config::default;
    let mut leader = Leader {
        // These feed only the members' state and the ClusterSet status, recomputed every pass.
        clustersets: Watched::keyed(
            Api::namespaced(client.clone(), &ns),
            cfg(),
            trigger.clone(),
            "ClusterSet",
            |_| {},
            |_| Some(vec![]),
        ),
        claims: Watched::keyed(
            Api::namespaced(client.clone(), &ns),
            cfg(),
            trigger.clone(),
            "ClusterClaim",
            |_| {},
            |_| Some(vec![]),
        ),
        announces: Watched::keyed(
            Api::namespaced(client.clone(), &ns),
            cfg(),
            trigger.clone(),
            "MemberClusterAnnounce",
            |_| {},
            |_| Some(vec![]),
        ),
        exports: Watched::keyed(
            Api::namespaced(client.clone(), &ns),
            cfg(),
            trigger.clone(),
            "ResourceExport",
            |_| {},
            |re| Some(vec![group_of_export(re)]),
        ),
        imports: Watched::keyed(
            Api::namespaced(client.clone(), &ns),
            cfg(),
            trigger.clone(),
            "ResourceImport",
            |_| {},
            |ri| Some(vec![group_of_import(ri)]),
        ),
        nodes: Watched::keyed(
            Api::all(client.clone()),
            cfg(),
            trigger.clone(),
            "Node",
            trim_node,
            |_| Some(vec![]),
        ),
        api_addrs: (Vec::new(), None),
        client: client.clone(),
        re_api: Api::namespaced(client.clone(), &ns),
        mca_api: Api::namespaced(client.clone(), &ns),
        ri_api: Api::namespaced(client.clone(), &ns),
        cs_api: Api::namespaced(client.clone(), &ns),
        writer: Writer::new(metrics.clone()),
        metrics: metrics.clone(),
        ns,
        liveness: opts.liveness,
        tracker: Tracker::default(),
        accounts: opts.accounts.clone(),
        sa_api: Api::namespaced(client.clone(), &ns_for_binder),
        statuses: StatusPacer::default(),
        pending: Work::default(),
        members_seen: Default::default(),
        accepted_seen: BTreeMap::new(),
        weighed: None,
        quota_counted: None,
        refused_infos: BTreeMap::new(),
        min_prefix_len: opts.min_prefix_len,
        quota: opts.quota,
        over_quota: BTreeMap::new(),
        stretched: opts.stretched,
        ids: None,
        ids_recorded: 0,
    };
    tracing::info!(namespace = leader.ns, "leader controller started");
    let driver = Driver {
        domain: "leader",
        trigger,
        metrics: metrics.clone(),
        // Heartbeat timeouts are noticed on the tick.
        tick: Duration::from_secs(2),
        settle: crate::SETTLE,
        full_resync: FULL_RESYNC,
    };
    driver.reconcile(&mut leader).await;
    Ok(())
}

impl Reconciler for Leader {
    fn watches(&self) -> Vec<(&'static str, &WatchHealth)> {
        vec![
            ("ClusterSets", self.clustersets.health()),
            ("ClusterClaims", self.claims.health()),
            ("MemberClusterAnnounces", self.announces.health()),
            ("ResourceExports", self.exports.health()),
            ("ResourceImports", self.imports.health()),
            ("ServiceAccounts", self.accounts.health()),
            ("Nodes", self.nodes.health()),
        ]
    }

    fn pass(&mut self, work: Work) -> impl Future<Output = usize> + Send {
        self.sync(work)
    }

    fn later(&mut self) -> Work {
        std::mem::take(&mut self.pending)
    }

    fn wake_at(&self) -> Option<std::time::Instant> {
        self.statuses.wake_at()
    }

    fn keys(&self) -> Option<BTreeSet<String>> {
        Some(
            self.exports
                .keys()
                .into_iter()
                .chain(self.imports.keys())
                .collect(),
        )
    }
}

/// What the ClusterInfo exports and imports among `exports` and `imports` are, as one number:
/// their names and resourceVersions (and whether an export is being deleted), in any order.
fn cluster_infos_fingerprint(
    exports: &[Arc<ResourceExport>],
    imports: &[Arc<ResourceImport>],
) -> u64 {
    use std::hash::{BuildHasher as _, BuildHasherDefault, DefaultHasher};
    let hasher = BuildHasherDefault::<DefaultHasher>::default();
    let infos = exports
        .iter()
        .filter(|re| re.spec.kind() == Kind::ClusterInfo)
        .map(|re| {
            let m = &re.metadata;
            hasher.hash_one((
                "export",
                m.name.as_deref(),
                m.resource_version.as_deref(),
                m.deletion_timestamp.is_some(),
            ))
        });
    let imported = imports
        .iter()
        .filter(|ri| ri.spec.kind.as_deref() == Some(ri_kinds::CLUSTER_INFO))
        .map(|ri| {
            let m = &ri.metadata;
            hasher.hash_one(("import", m.name.as_deref(), m.resource_version.as_deref()))
        });
    // A sum: the stores give their objects in no particular order.
    infos
        .chain(imported)
        .fold(0u64, |sum, h| sum.wrapping_add(h))
}

/// The keys whose values differ between two maps (present in one only, or different).
fn differing<'a, V: PartialEq>(
    a: &'a BTreeMap<String, V>,
    b: &'a BTreeMap<String, V>,
) -> impl Iterator<Item = String> + 'a {
    let only_b = b.keys().filter(|k| !a.contains_key(*k));
    a.iter()
        .filter(|(k, v)| b.get(*k) != Some(*v))
        .map(|(k, _)| k)
        .chain(only_b)
        .cloned()
}

/// What the leader keeps of a Node: its addresses.
fn trim_node(node: &mut Node) {
    node.spec = None;
    let addresses = node.status.take().and_then(|s| s.addresses);
    node.status = Some(k8s_openapi::api::core::v1::NodeStatus {
        addresses,
        ..Default::default()
    });
    let m = &mut node.metadata;
    (
        m.annotations,
        m.labels,
        m.managed_fields,
        m.owner_references,
    ) = (None, None, None, None);
}

impl Leader {
    /// What announcements are weighed against: the floor, and the addresses of this cluster's
    /// Nodes and API server (members must keep reaching their leader).
    async fn rules(&mut self) -> announce::Rules {
        if self
            .api_addrs
            .1
            .is_none_or(|at| at.elapsed() >= FULL_RESYNC)
        {
            self.api_addrs.1 = Some(Instant::now());
            let api: Api<Endpoints> = Api::namespaced(self.client.clone(), "default");
            match api.get_opt("kubernetes").await {
                Ok(eps) => {
                    self.api_addrs.0 = eps
                        .into_iter()
                        .flat_map(|e| e.subsets.unwrap_or_default())
                        .flat_map(|s| s.addresses.unwrap_or_default())
                        .filter_map(|a| a.ip.parse().ok())
                        .collect();
                }
                Err(e) => tracing::warn!(
                    "cannot read the API server's addresses (Endpoints default/kubernetes); announcements are not checked against them: {e}"
                ),
            }
        }
        let mut reserved: Vec<(std::net::Ipv4Addr, String)> = self
            .api_addrs
            .0
            .iter()
            .map(|ip| (*ip, "the leader cluster's API server".to_owned()))
            .collect();
        for node in self.nodes.all() {
            let addrs = node
                .status
                .iter()
                .flat_map(|s| s.addresses.iter().flatten());
            reserved.extend(addrs.filter_map(|a| {
                let ip = a.address.parse().ok()?;
                Some((
                    ip,
                    format!("Node {} of the leader cluster", node.name_any()),
                ))
            }));
        }
        announce::Rules {
            min_len: self.min_prefix_len,
            reserved,
        }
    }

    /// The members' state from their announces (heartbeats, bindings of new members, removal of
    /// announces silent for 24 h); returns the failed writes.
    async fn members(&mut self, now: Timestamp) -> usize {
        let announces = self.announces.all();
        // Each announce's cluster ID (from its name when the spec has none).
        let clusters: Vec<String> = announces
            .iter()
            .map(|a| {
                a.spec
                    .cluster_id
                    .as_deref()
                    .or_else(|| {
                        a.metadata
                            .name
                            .as_deref()?
                            .strip_prefix(names::MEMBER_ANNOUNCE_PREFIX)
                    })
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect();
        self.tracker.observe(
            announces.iter().zip(&clusters).map(|(a, cluster)| {
                (
                    cluster.as_str(),
                    a.metadata.resource_version.as_deref().unwrap_or_default(),
                    a.annotations()
                        .get(annotations::TOUCH_TS)
                        .map(String::as_str),
                )
            }),
            now,
        );
        let mut failures = binding::bind(
            &self.sa_api,
            binding::pending(&announces, &self.accounts.all()),
        )
        .await;
        let expired = self.tracker.expired(ANNOUNCE_MAX_AGE, now);
        let mut ops = Vec::new();
        for (a, cluster) in announces.iter().zip(&clusters) {
            if expired.contains(cluster) && a.metadata.deletion_timestamp.is_none() {
                let name = a.name_any();
                tracing::info!(
                    announce = name,
                    cluster,
                    "removing the announce of a member silent for 24 h; its exports follow"
                );
                ops.push(self.writer.delete_op(&self.mca_api, &self.ns, &name));
            }
        }
        failures += run_all("MemberClusterAnnounce", ops).await;
        failures
    }

    async fn sync(&mut self, mut work: Work) -> usize {
        let now = Timestamp::now();
        let mut failures = self.members(now).await;
        let (known, withdrawn, mut changed) = self.standing(now);
        // The groups' own objects, found by key (every ClusterInfo export and import is in
        // every pass: they are about no key).
        let mut exports = self.exports.covered(&work);
        let mut imports = self.imports.covered(&work);
        let (announced, weighed_now) = self.announcements(&exports, &imports).await;
        if self.count_quotas() {
            work = Work::All;
        }
        if announced.accepted != self.accepted_seen {
            // Which endpoints of those clusters may be imported changed with them.
            changed.extend(differing(&announced.accepted, &self.accepted_seen));
            self.accepted_seen = announced.accepted.clone();
        }
        if !changed.is_empty() && !work.is_all() {
            for group in self.groups_of(&changed) {
                work.add(group);
            }
        }
        if work.is_all() || !changed.is_empty() {
            exports = self.exports.covered(&work);
            imports = self.imports.covered(&work);
        }
        if !weighed_now && changed.is_empty() && !work.is_all() && !work.covers("") {
            // Nothing about the ClusterInfos changed (no event about one, nothing left over for
            // them, the same weighing): their imports and statuses stand as the pass that wrote
            // them left them, and merging and comparing them (K of them) is skipped, as in the
            // pass every heartbeat sets off.
            exports.retain(|re| re.spec.kind() != Kind::ClusterInfo);
            imports.retain(|ri| ri.spec.kind.as_deref() != Some(ri_kinds::CLUSTER_INFO));
        }
        let mut merged = merge::merge(
            &self.ns,
            &exports,
            &imports,
            &withdrawn,
            &announced,
            &self.over_quota,
        );
        let (imports, f) = self
            .label_identities(&mut merged, &exports, imports, &work)
            .await;
        failures += f;

        // Imports first: a deleting export's finalizer goes only once the imports no longer
        // count it.
        let desired: Vec<ResourceImport> = merged
            .imports
            .iter()
            .map(|(name, spec)| {
                let mut ri = ResourceImport::new(name, spec.clone());
                ri.metadata.namespace = Some(self.ns.clone());
                ri
            })
            .collect();
        let ops = self.writer.converge(
            desired,
            &imports,
            Compare::ExactSpec,
            |_| self.ri_api.clone(),
            |_| true,
        );
        let busy = !ops.is_empty();
        failures += run_all("ResourceImport", ops).await;

        let ops = self.export_writes(&exports, &merged, &known, now, busy);
        failures += run_all("ResourceExport", ops).await;
        failures += self.clusterset_status(now, &withdrawn).await;
        failures
    }

    /// The members known and withdrawn now, and the clusters whose standing changed since the
    /// last pass (came, went, withdrawn or restored): the groups they export to are merged again
    /// (their endpoints come or go), not every group of the ClusterSet.
    fn standing(
        &mut self,
        now: Timestamp,
    ) -> (BTreeSet<String>, BTreeSet<String>, BTreeSet<String>) {
        let withdrawn = self.tracker.withdrawn(self.liveness, now);
        let known: BTreeSet<String> = self
            .tracker
            .last_seen()
            .map(|(c, _)| c.to_owned())
            .collect();
        let (seen_known, seen_withdrawn) = &self.members_seen;
        let changed: BTreeSet<String> = known
            .symmetric_difference(seen_known)
            .chain(withdrawn.symmetric_difference(seen_withdrawn))
            .cloned()
            .collect();
        if !changed.is_empty() {
            self.members_seen = (known.clone(), withdrawn.clone());
        }
        (known, withdrawn, changed)
    }

    /// The verdicts on every announcement (kept from the last pass while the ClusterInfos and
    /// the rules are the same; `true` when weighed now), and the members it leaves not Ready
    /// or partly routed, said once each.
    async fn announcements(
        &mut self,
        exports: &[Arc<ResourceExport>],
        imports: &[Arc<ResourceImport>],
    ) -> (Arc<announce::Verdicts>, bool) {
        let infos = merge::announcements(exports, imports);
        let inputs = (
            cluster_infos_fingerprint(exports, imports),
            self.rules().await,
        );
        let (announced, weighed_now) = match &self.weighed {
            Some((made_of, verdicts)) if *made_of == inputs => (verdicts.clone(), false),
            _ => {
                let verdicts = Arc::new(announce::weigh(&infos, &inputs.1));
                self.weighed = Some((inputs, verdicts.clone()));
                (verdicts, true)
            }
        };
        // A member whose announcement is refused is not Ready; one accepted with Pod CIDRs
        // left out is, and its status says which.
        let refused: BTreeMap<String, members::Announced> = infos
            .iter()
            .filter_map(|a| {
                let refused = announced.refused.get(&a.export).cloned();
                let why = refused.map(members::Announced::Refused).or_else(|| {
                    let partly = announced.partly.get(&a.export).cloned();
                    partly.map(members::Announced::Partly)
                })?;
                Some((a.cluster.clone(), why))
            })
            .collect();
        for (cluster, why) in &refused {
            if self.refused_infos.get(cluster) != Some(why) {
                match why {
                    members::Announced::Refused(w) => {
                        tracing::warn!(cluster, "ClusterInfo refused: {w}")
                    }
                    members::Announced::Partly(w) => {
                        tracing::warn!(cluster, "ClusterInfo accepted, but {w}")
                    }
                }
            }
        }
        self.refused_infos = refused;
        (announced, weighed_now)
    }

    /// Counts every member's exports against the quotas (again only when an export changed);
    /// `true` when the exports refused for them changed (one freed slot admits another member's
    /// export in another group: everything is merged again).
    fn count_quotas(&mut self) -> bool {
        let generation = self.exports.generation();
        if self.quota_counted == Some(generation) {
            return false;
        }
        self.quota_counted = Some(generation);
        let over_quota = merge::over_quota(&self.exports.all(), self.quota);
        if over_quota == self.over_quota {
            return false;
        }
        for (name, why) in &over_quota {
            if !self.over_quota.contains_key(name) {
                tracing::warn!(export = name, "refused: {why}");
            }
        }
        self.over_quota = over_quota;
        true
    }

    /// The groups the exports of `clusters` feed.
    fn groups_of(&self, clusters: &BTreeSet<String>) -> BTreeSet<String> {
        self.exports
            .all()
            .iter()
            .filter(|re| clusters.contains(&merge::cluster_of(re)))
            .map(|re| group_of_export(re))
            .collect()
    }

    /// The writes about the exports of this pass: finalizers released (their imports no longer
    /// count them), exports of departed members collected, verdicts written as statuses (held
    /// back while imports are written and shortly after, see `StatusPacer`).
    fn export_writes(
        &mut self,
        exports: &[Arc<ResourceExport>],
        merged: &merge::Merged,
        known: &BTreeSet<String>,
        now: Timestamp,
        busy: bool,
    ) -> Vec<(String, Op)> {
        let mut ops = Vec::new();
        let mut statuses = Vec::new();
        for re in exports {
            let name = re.name_any();
            if re.metadata.deletion_timestamp.is_some() {
                ops.extend(self.release_finalizer(re));
                continue;
            }
            // A departed member's exports: its announce is gone.
            let cluster = re.spec.cluster_id.clone().unwrap_or_default();
            let age = re
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(SignedDuration::ZERO, |t| now.duration_since(t.0));
            if !cluster.is_empty() && !known.contains(&cluster) && age <= ORPHAN_AGE {
                // Perhaps ahead of its announce: looked at again on the next pass.
                self.pending.add(group_of_export(re));
            }
            if !cluster.is_empty() && !known.contains(&cluster) && age > ORPHAN_AGE {
                tracing::info!(
                    export = name,
                    cluster,
                    "collecting the export of a cluster that left"
                );
                ops.push(self.writer.delete_op(&self.re_api, &self.ns, &name));
                continue;
            }
            let Some(verdict) = merged.verdicts.get(&name) else {
                continue;
            };
            let mut want: Vec<_> = verdict
                .conditions()
                .into_iter()
                .map(|(type_, status, reason, message)| condition(type_, status, &reason, message))
                .collect();
            let old = re.status.as_ref().map(|s| s.conditions.as_slice());
            let unchanged = old.is_some_and(|old| {
                old.len() == want.len() && old.iter().zip(&want).all(|(a, b)| same(a, b))
            });
            if unchanged {
                continue;
            }
            for c in &mut want {
                keep_transition_time(c, old);
            }
            let (w, api) = (self.writer.clone(), self.re_api.clone());
            statuses.push((
                group_of_export(re),
                name.clone(),
                Box::pin(async move {
                    // A merge-patch body: generic JSON by nature (the conditions are typed).
                    w.patch_status(&api, &name, json!({"conditions": want}))
                        .await
                }) as Op,
            ));
        }
        if self.statuses.due(busy, !statuses.is_empty()) {
            ops.extend(statuses.into_iter().map(|(_, name, op)| (name, op)));
        } else {
            // Deferred: the next pass (a wake-up or the tick) writes them.
            for (group, _, _) in statuses {
                self.pending.add(group);
            }
        }
        ops
    }

    /// The label identities of this pass's groups, as imports with their IDs (`merged.labels`
    /// become `merged.imports`); the ID of a label gone from every cluster is released (held
    /// back, see `LABEL_ID_HOLD`). A new ID is recorded on the ClusterSet (compared, every pass,
    /// with what the ClusterSet says, so a mark someone removed is written again) before any
    /// import carries it; if that fails, the imports with unrecorded IDs wait (they are left out
    /// of `imports`, the stored imports the pass converges). A valid label export that carries
    /// an old condition (a Failure from before) is told it succeeded. Without stretched
    /// NetworkPolicy, label exports are refused and their imports removed. Returns the imports
    /// to converge and the failures.
    async fn label_identities(
        &mut self,
        merged: &mut merge::Merged,
        exports: &[Arc<ResourceExport>],
        mut imports: Vec<Arc<ResourceImport>>,
        work: &Work,
    ) -> (Vec<Arc<ResourceImport>>, usize) {
        let labels = std::mem::take(&mut merged.labels);
        if !self.stretched {
            for (label, exports) in labels.values() {
                for re in exports {
                    merged.verdicts.insert(
                        re.clone(),
                        merge::Verdict::Failure(format!(
                            "label {label:?} is not imported: enableStretchedNetworkPolicy is off in the leader's controller config"
                        )),
                    );
                }
            }
            return (imports, 0);
        }
        let with_conditions: BTreeSet<String> = exports
            .iter()
            .filter(|re| re.status.as_ref().is_some_and(|s| !s.conditions.is_empty()))
            .map(|re| re.name_any())
            .collect();
        for (_, names) in labels.values() {
            for re in names.iter().filter(|re| with_conditions.contains(*re)) {
                merged
                    .verdicts
                    .insert(re.clone(), merge::Verdict::Succeeded);
            }
        }
        let now = Instant::now();
        let mut sets = self.clustersets.all();
        mc_api::clusterset::oldest_first(&mut sets);
        let set = sets.first().cloned();
        // What the ClusterSet says now (0 without a ClusterSet or the annotation).
        let marked: u32 = set
            .as_ref()
            .and_then(|s| {
                s.annotations()
                    .get(annotations::LABEL_IDS_ISSUED)?
                    .parse()
                    .ok()
            })
            .unwrap_or(0);
        // The allocator knows each label by its hash: the label's group and its import's name.
        let ids = self.ids.get_or_insert_with(|| {
            let kept = self
                .imports
                .all()
                .iter()
                .filter(|ri| ri.spec.kind.as_deref() == Some(ri_kinds::LABEL_IDENTITY))
                .filter_map(|ri| Some((ri.name_any(), ri.spec.label_identity.as_ref()?.id?)))
                .collect::<Vec<_>>();
            let ids = IdAllocator::restored(LABEL_ID_HOLD, kept, marked, now);
            tracing::info!(
                labels = ids.assigned().len(),
                issued_up_to = ids.issued_up_to(),
                "label identity IDs restored from the imports"
            );
            ids
        });
        // Labels gone from every cluster: this pass covers their hash, and no export names it
        // (whether or not their import was ever written).
        let assigned = ids.assigned();
        let gone: Vec<String> = match work {
            Work::All => assigned.keys().collect::<Vec<_>>(),
            Work::Keys(keys) => keys.iter().filter(|h| assigned.contains_key(*h)).collect(),
        }
        .into_iter()
        .filter(|h| !labels.contains_key(*h))
        .cloned()
        .collect();
        for hash in gone {
            ids.release(&hash, now);
        }
        let mut failures = 0;
        for (hash, (label, _)) in &labels {
            match ids.id(hash, now) {
                Ok(id) => {
                    merged.imports.insert(
                        hash.clone(),
                        ResourceImportSpec {
                            kind: Some(ri_kinds::LABEL_IDENTITY.into()),
                            label_identity: Some(LabelIdentityImport {
                                label: Some(label.clone()),
                                id: Some(id),
                            }),
                            ..Default::default()
                        },
                    );
                }
                Err(e) => {
                    tracing::warn!(label, error = ?e, "no ID left for a label identity");
                    self.pending.add(hash.clone());
                    failures += 1;
                }
            }
        }
        let issued = ids.issued_up_to();
        failures += self
            .record_label_ids(issued, marked, set.as_ref(), merged, &mut imports)
            .await;
        (imports, failures)
    }

    /// Records `issued` (the highest label ID handed out) on the ClusterSet when it says less
    /// (`marked`); if that fails, the imports with IDs above what is recorded wait (left out of
    /// `merged` and `imports`, their keys for the next pass). Returns the failures.
    async fn record_label_ids(
        &mut self,
        issued: u32,
        marked: u32,
        set: Option<&Arc<ClusterSet>>,
        merged: &mut merge::Merged,
        imports: &mut Vec<Arc<ResourceImport>>,
    ) -> usize {
        // After a write of ours the store may lag a moment: the mark is then written again,
        // which changes nothing.
        let recorded = self.ids_recorded.max(marked);
        if issued > marked {
            let written = match set {
                Some(set) => {
                    // A merge-patch body: generic JSON by nature.
                    let patch = json!({"metadata": {"annotations": {
                        annotations::LABEL_IDS_ISSUED: issued.to_string()}}});
                    self.cs_api
                        .patch(
                            &set.name_any(),
                            &kube::api::PatchParams::default(),
                            &kube::api::Patch::Merge(patch),
                        )
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                }
                None => Err(format!("no ClusterSet in {}", self.ns)),
            };
            match written {
                Ok(()) => self.ids_recorded = issued,
                Err(e) => {
                    tracing::warn!(
                        error = e,
                        "recording the label IDs issued; their imports wait"
                    );
                    let unrecorded: BTreeSet<String> = merged
                        .imports
                        .iter()
                        .filter(|(_, spec)| {
                            spec.label_identity
                                .as_ref()
                                .and_then(|l| l.id)
                                .is_some_and(|id| id > recorded)
                        })
                        .map(|(name, _)| name.clone())
                        .collect();
                    merged.imports.retain(|name, _| !unrecorded.contains(name));
                    imports.retain(|ri| !unrecorded.contains(&ri.name_any()));
                    for name in unrecorded {
                        self.pending.add(name);
                    }
                    return 1;
                }
            }
        }
        0
    }

    /// Removes the leader's finalizer from a deleting export.
    fn release_finalizer(&self, re: &ResourceExport) -> Option<(String, Op)> {
        let ours = [
            finalizers::RESOURCE_EXPORT,
            finalizers::RESOURCE_EXPORT_LEGACY,
        ];
        let fins = re.finalizers();
        if !fins.iter().any(|f| ours.contains(&f.as_str())) {
            return None;
        }
        let keep: Vec<&String> = fins
            .iter()
            .filter(|f| !ours.contains(&f.as_str()))
            .collect();
        let patch =
            // A merge-patch body (with the resourceVersion it was computed against): generic JSON.
            json!({"metadata": {"finalizers": keep, "resourceVersion": re.resource_version()}});
        let (api, name) = (self.re_api.clone(), re.name_any());
        Some((
            name.clone(),
            Box::pin(async move {
                api.patch(
                    &name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(patch),
                )
                .await
                .map(|_| ())
            }) as Op,
        ))
    }

    /// The ClusterSet of this namespace (the oldest, if a user made several) gets the members'
    /// state; this cluster's ID is resolved and written back when it came from a ClusterClaim.
    async fn clusterset_status(&mut self, now: Timestamp, withdrawn: &BTreeSet<String>) -> usize {
        let mut sets = self.clustersets.all();
        mc_api::clusterset::oldest_first(&mut sets);
        let connected = self
            .tracker
            .last_seen()
            .filter(|(_, at)| now.duration_since(*at) <= self.liveness.timeout)
            .count();
        let total = self.tracker.last_seen().count();
        self.metrics.gauge(
            "strait_mc_member_clusters",
            &[("state", "connected")],
            connected as f64,
        );
        self.metrics.gauge(
            "strait_mc_member_clusters",
            &[("state", "disconnected")],
            (total - connected) as f64,
        );
        self.metrics.gauge(
            "strait_mc_member_clusters",
            &[("state", "withdrawn")],
            withdrawn.len() as f64,
        );
        let mut failures = 0;
        for (i, set) in sets.iter().enumerate() {
            let name = set.name_any();
            let claim = self
                .claims
                .get(Some(&self.ns), names::claims::CLUSTER_ID)
                .map(|c| c.spec.value.clone());
            let own_id = set
                .spec
                .cluster_id
                .clone()
                .filter(|s| !s.is_empty())
                .or(claim.clone());
            let leader_id = set.spec.leaders.first().and_then(|l| l.cluster_id.clone());
            let problem = if i > 0 {
                Some((
                    "MultipleClusterSets",
                    format!(
                        "ClusterSet {} already exists in {}; a namespace holds one ClusterSet",
                        sets[0].name_any(),
                        self.ns
                    ),
                ))
            } else {
                match (&own_id, &leader_id) {
                    (None, _) => Some((
                        "NoClusterID",
                        format!(
                            "spec.clusterID is empty and there is no ClusterClaim {} in {}",
                            names::claims::CLUSTER_ID,
                            self.ns
                        ),
                    )),
                    (Some(id), l) if l.as_ref() != Some(id) => Some((
                        "NotLeader",
                        format!("local cluster {id} is not defined as leader in ClusterSet {name}"),
                    )),
                    _ => None,
                }
            };
            if i == 0
                && set
                    .spec
                    .cluster_id
                    .as_deref()
                    .unwrap_or_default()
                    .is_empty()
                && let Some(id) = &claim
            {
                // As Antrea: the ID from the ClusterClaim is written into the ClusterSet.
                // A merge-patch body: generic JSON by nature.
                let patch = json!({"spec": {"clusterID": id}});
                if let Err(e) = self
                    .cs_api
                    .patch(
                        &name,
                        &kube::api::PatchParams::default(),
                        &kube::api::Patch::Merge(patch),
                    )
                    .await
                {
                    tracing::warn!(clusterset = name, error = %e, "writing spec.clusterID back");
                    failures += 1;
                }
            }
            let tracker = if i == 0 {
                &self.tracker
            } else {
                &Tracker::default()
            };
            let status = members::leader_status(
                tracker,
                self.liveness,
                now,
                set.metadata.generation,
                problem.as_ref().map(|(r, m)| (*r, m.clone())),
                &self.refused_infos,
                set.status.as_ref(),
            );
            if set.status.as_ref().is_some_and(|old| old.same(&status)) {
                continue;
            }
            let mut value = serde_json::to_value(&status).unwrap_or_default();
            // A merge patch leaves out keys alone: an emptied list must be sent as empty.
            // An empty list is written as one (the typed status omits it), so that stale entries go.
            value["clusterStatuses"] = json!(status.cluster_statuses);
            if let Err(e) = self.writer.patch_status(&self.cs_api, &name, value).await {
                tracing::warn!(clusterset = name, error = %e, "writing ClusterSet status");
                failures += 1;
            }
        }
        failures
    }
}

#[cfg(test)]
mod tests {
    use super::{cluster_infos_fingerprint, differing};
    use mc_api::exports::{ResourceExport, ResourceExportSpec};
    use std::{collections::BTreeMap, sync::Arc};

    fn export(name: &str, kind: &str, rv: &str) -> Arc<ResourceExport> {
        let mut re = ResourceExport::new(
            name,
            ResourceExportSpec {
                kind: Some(kind.into()),
                ..Default::default()
            },
        );
        re.metadata.resource_version = Some(rv.into());
        Arc::new(re)
    }

    #[test]
    fn the_cluster_infos_fingerprint_follows_their_versions_in_any_order_and_nothing_else() {
        let a = export("a-clusterinfo", "ClusterInfo", "1");
        let b = export("b-clusterinfo", "ClusterInfo", "2");
        let svc = export("a-ns-svc-service", "Service", "3");
        let one = cluster_infos_fingerprint(&[a.clone(), b.clone(), svc], &[]);
        assert_eq!(one, cluster_infos_fingerprint(&[b.clone(), a.clone()], &[]));
        let svc2 = export("a-ns-svc-service", "Service", "4");
        assert_eq!(
            one,
            cluster_infos_fingerprint(&[a.clone(), b.clone(), svc2], &[])
        );
        let b2 = export("b-clusterinfo", "ClusterInfo", "5");
        assert_ne!(one, cluster_infos_fingerprint(&[a.clone(), b2], &[]));
        assert_ne!(one, cluster_infos_fingerprint(&[a], &[]));
    }

    #[test]
    fn differing_names_the_clusters_added_removed_or_changed_and_no_other() {
        let a: BTreeMap<String, u8> = [("same", 1), ("changed", 2), ("gone", 3)]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        let b: BTreeMap<String, u8> = [("same", 1), ("changed", 9), ("new", 4)]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        let mut got: Vec<String> = differing(&b, &a).collect();
        got.sort();
        assert_eq!(got, ["changed", "gone", "new"]);
        assert_eq!(differing(&a, &a).count(), 0);
    }
}
