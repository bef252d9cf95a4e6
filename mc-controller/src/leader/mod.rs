//! The leader: in the Common Area namespace, it tracks members from their announces, merges
//! their exports into imports, reports the ClusterSet's status and collects what departed
//! members left behind. One level-triggered loop: every change (or a 2 s tick, for heartbeat
//! timeouts) recomputes the whole desired state from the watched objects and writes the
//! difference.

pub mod binding;
pub mod members;
pub mod merge;

use std::{
    collections::BTreeSet,
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::{Api, Client, ResourceExt as _, runtime::watcher};
use mc_api::{
    clusterclaim::v1alpha2::ClusterClaim,
    clusterset::v1alpha2::ClusterSet,
    exports::ResourceExport,
    imports::ResourceImport,
    memberclusterannounce::MemberClusterAnnounce,
    names::{self, annotations, finalizers},
};
use serde_json::json;

use crate::conditions::{condition, keep_transition_time, same};
use mc_kube::{Metrics, Op, StatusPacer, Trigger, Watched, Writer, run_all, watch_readiness};
use members::{Liveness, Tracker};
use merge::Verdict;

pub struct LeaderOptions {
    pub namespace: String,
    pub liveness: Liveness,
    /// Wakes the loop; `accounts` was made with it.
    pub trigger: Trigger,
    /// The namespace's ServiceAccounts (shared with the webhooks, which look callers up in it).
    pub accounts: Arc<Watched<ServiceAccount>>,
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
    re_api: Api<ResourceExport>,
    mca_api: Api<MemberClusterAnnounce>,
    ri_api: Api<ResourceImport>,
    cs_api: Api<ClusterSet>,
    tracker: Tracker,
    accounts: Arc<Watched<ServiceAccount>>,
    sa_api: Api<ServiceAccount>,
    statuses: StatusPacer,
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
        clustersets: Watched::new(
            Api::namespaced(client.clone(), &ns),
            cfg(),
            trigger.clone(),
            "ClusterSet",
        ),
        claims: Watched::new(
            Api::namespaced(client.clone(), &ns),
            cfg(),
            trigger.clone(),
            "ClusterClaim",
        ),
        announces: Watched::new(
            Api::namespaced(client.clone(), &ns),
            cfg(),
            trigger.clone(),
            "MemberClusterAnnounce",
        ),
        exports: Watched::new(
            Api::namespaced(client.clone(), &ns),
            cfg(),
            trigger.clone(),
            "ResourceExport",
        ),
        imports: Watched::new(
            Api::namespaced(client.clone(), &ns),
            cfg(),
            trigger.clone(),
            "ResourceImport",
        ),
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
    };
    tracing::info!(namespace = leader.ns, "leader controller started");
    let mut tick = tokio::time::interval(Duration::from_secs(2));
    loop {
        tokio::select! {
            _ = trigger.wait() => {}
            _ = tick.tick() => {}
        }
        // Let a burst of events land before computing.
        tokio::time::sleep(Duration::from_millis(5)).await;
        match watch_readiness(&[
            ("ClusterSets", leader.clustersets.health()),
            ("ClusterClaims", leader.claims.health()),
            ("MemberClusterAnnounces", leader.announces.health()),
            ("ResourceExports", leader.exports.health()),
            ("ResourceImports", leader.imports.health()),
            ("ServiceAccounts", leader.accounts.health()),
        ]) {
            Err(waiting) => {
                metrics.set_ready(Some(waiting));
                continue;
            }
            Ok(failing) => metrics.set_ready(failing),
        }
        let started = Instant::now();
        let failures = leader.sync().await;
        metrics.sync("leader", started.elapsed(), failures);
    }
}

impl Leader {
    async fn sync(&mut self) -> usize {
        let now = Timestamp::now();
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
        let withdrawn = self.tracker.withdrawn(self.liveness, now);
        let exports = self.exports.all();
        let merged = merge::merge(&self.ns, &exports, &self.imports.all(), &withdrawn);

        // Imports first: a deleting export's finalizer goes only once the imports no longer
        // count it.
        let mut ops = Vec::new();
        for (name, spec) in &merged.imports {
            let mut ri = ResourceImport::new(name, spec.clone());
            ri.metadata.namespace = Some(self.ns.clone());
            let current = self.imports.get(Some(&self.ns), name);
            if self.writer.needed_exact_spec(&ri, Some(current.as_deref())) {
                let (w, api) = (self.writer.clone(), self.ri_api.clone());
                ops.push((
                    name.clone(),
                    Box::pin(async move { w.apply(&api, &ri).await }) as Op,
                ));
            }
        }
        for ri in self.imports.all() {
            let name = ri.name_any();
            if !merged.imports.contains_key(&name) && ri.metadata.deletion_timestamp.is_none() {
                ops.push(self.writer.delete_op(&self.ri_api, &self.ns, &name));
            }
        }
        let statuses_due = self.statuses.due(!ops.is_empty());
        failures += run_all("ResourceImport", ops).await;

        let mut ops = Vec::new();
        let mut statuses = Vec::new();
        let known: BTreeSet<String> = self
            .tracker
            .last_seen()
            .map(|(c, _)| c.to_owned())
            .collect();
        for re in &exports {
            let name = re.name_any();
            if re.metadata.deletion_timestamp.is_some() {
                let ours = [
                    finalizers::RESOURCE_EXPORT,
                    finalizers::RESOURCE_EXPORT_LEGACY,
                ];
                let fins = re.finalizers();
                if fins.iter().any(|f| ours.contains(&f.as_str())) {
                    let keep: Vec<&String> = fins
                        .iter()
                        .filter(|f| !ours.contains(&f.as_str()))
                        .collect();
                    let patch = json!({"metadata": {"finalizers": keep, "resourceVersion": re.resource_version()}});
                    let api = self.re_api.clone();
                    ops.push((
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
                    ));
                }
                continue;
            }
            // A departed member's exports: its announce is gone.
            let cluster = re.spec.cluster_id.clone().unwrap_or_default();
            let age = re
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(SignedDuration::ZERO, |t| now.duration_since(t.0));
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
            let mut want = match verdict {
                Verdict::Succeeded => condition("Succeeded", "True", "", ""),
                Verdict::Failure(message) => {
                    condition("Failure", "False", "ConvergeFailure", message)
                }
            };
            let old = re.status.as_ref().map(|s| s.conditions.as_slice());
            if old.and_then(|c| c.first()).is_some_and(|c| same(c, &want)) {
                continue;
            }
            keep_transition_time(&mut want, old);
            let (w, api) = (self.writer.clone(), self.re_api.clone());
            statuses.push((
                name.clone(),
                Box::pin(async move {
                    w.patch_status(&api, &name, json!({"conditions": [want]}))
                        .await
                }) as Op,
            ));
        }
        if statuses_due && !statuses.is_empty() {
            ops.extend(statuses);
            self.statuses.written();
        }
        failures += run_all("ResourceExport", ops).await;
        failures += self.clusterset_status(now, &withdrawn).await;
        failures
    }

    /// The ClusterSet of this namespace (the oldest, if a user made several) gets the members'
    /// state; this cluster's ID is resolved and written back when it came from a ClusterClaim.
    async fn clusterset_status(&mut self, now: Timestamp, withdrawn: &BTreeSet<String>) -> usize {
        let mut sets = self.clustersets.all();
        sets.sort_by_key(|s| {
            (
                s.metadata.creation_timestamp.as_ref().map(|t| t.0),
                s.name_any(),
            )
        });
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
                set.status.as_ref(),
            );
            if set
                .status
                .as_ref()
                .is_some_and(|old| members::same_status(old, &status))
            {
                continue;
            }
            let mut value = serde_json::to_value(&status).unwrap_or_default();
            // A merge patch leaves out keys alone: an emptied list must be sent as empty.
            value["clusterStatuses"] = json!(status.cluster_statuses);
            if let Err(e) = self.writer.patch_status(&self.cs_api, &name, value).await {
                tracing::warn!(clusterset = name, error = %e, "writing ClusterSet status");
                failures += 1;
            }
        }
        failures
    }
}
