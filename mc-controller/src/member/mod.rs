//! The member: joins the leader named by its ClusterSet, heartbeats, exports its ServiceExport'ed
//! Services and its ClusterInfo, imports what the leader merged, elects its Gateway, and cleans up
//! after itself when the ClusterSet goes. One level-triggered loop, incremental by key: a change
//! to anything about one multi-cluster Service (its ServiceExport, Service, EndpointSlices, its
//! ResourceExports or ResourceImports, the objects imported for it) marks its `service_key`, and
//! a pass recomputes and writes only the marked Services; the ClusterSet, the Gateway, the
//! ClusterInfo exchange and ACNPs (a handful of objects) are recomputed on every pass.
//! Everything is recomputed when the connection or this cluster's CIDRs change, after a failed
//! write that has no key, and every `FULL_RESYNC`; a failed write that has one (a ServiceExport
//! status, a ResourceExport) is retried alone, with backoff. While the leader is unreachable the
//! last imports stay in place.
//!
//! ## Where the member's code is
//!
//! One `Member`, whose pass is `Member::sync` (here): one sequence of named steps, each an
//! `impl Member` method of one of these files:
//! - `cluster.rs` (this cluster beyond exports and imports): `default_tiers` creates Antrea's
//!   default Tiers; `refresh_cni_cidrs` lists the CNIs' Pod CIDR objects; `elect_gateway` elects
//!   and writes the Gateway; `own_prefixes` (with `pod_cidrs`) gives this cluster's CIDRs. Also
//!   `discover_service_cidr`, once at start.
//! - this file (the leader's connection): `finish_leaving` retries leaving a leader;
//!   `connect` opens, keeps or drops the connection, from `identity` (who we are, how to reach
//!   the leader; the token from `token_secret`), leaving an old leader (`leave`);
//!   `refused_cluster_info` reads the leader's verdict on our ClusterInfo; `no_clusterset`
//!   leaves and cleans up; `exchange` runs the exports, imports and ServiceExport statuses
//!   (`write_statuses`) below.
//! - `status.rs`: `clusterset_status` writes the ClusterSet's status (`member_status`, pure).
//! - `exporting.rs`: `export` writes the ResourceExports (`desired_exports`, from
//!   `slices_by_service`) and gives the ServiceExport status writes (`service_export_statuses`).
//!   What is exported and the ServiceExport's conditions (the export verdict) are decided in
//!   `export.rs`, pure: `export::decide`, `export::exports_for`,
//!   `export::service_export_conditions`.
//! - `importing.rs`: `import` writes what the leader's imports make here (`own_endpoints`,
//!   `cluster_wide_writes`, `namespaces`, `report_acnp_failures`); `clean_up_all` removes it all
//!   without a ClusterSet. What is imported is decided in `import.rs`, pure: `import::plan`.
//!
//! `stores.rs` holds the watched stores (`LocalStores`) and the keys their changes mark;
//! `connection.rs` the connection to the leader and its heartbeat; `gateway.rs` the Gateway
//! election (pure).

mod cluster;
pub mod connection;
pub mod export;
mod exporting;
pub mod gateway;
pub mod import;
mod importing;
mod status;
mod stores;

pub use cluster::discover_service_cidr;
pub use status::member_status;
pub use stores::{import_key, own_export_key, service_key};

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client, ResourceExt as _};
use mc_api::{
    clusterset::v1alpha2::ClusterSet, config::MultiClusterConfig, exports::Verdict, names,
    net::Prefix,
};
use mc_kube::{
    Driver, Metrics, Op, Reconciler, StatusPacer, Trigger, Watched, Work, Writer, run_all_failed,
    watch::WatchHealth,
};
use serde_json::json;

use connection::{Beat, Connection, Identity};
use stores::LocalStores;

pub struct MemberOptions {
    pub namespace: String,
    pub config: MultiClusterConfig,
    pub heartbeat: Duration,
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
    /// Work left over for the next pass: deferred statuses, failed writes.
    pending: Work,
    /// This cluster's CIDRs as the last pass saw them: a change recomputes every import.
    prefixes_seen: Vec<Prefix>,
    /// When the default Tiers were last looked at.
    tiers_tried: Option<Instant>,
    /// Pod CIDRs the CNI keeps in its own objects, by source (`cluster::CNI_SOURCES`).
    cni_cidrs: BTreeMap<&'static str, Vec<String>>,
    /// When those were last listed.
    cni_listed: Option<Instant>,
    /// The failed writes of the last pass that have a work key (ServiceExport statuses,
    /// ResourceExports), and how many writes failed in all: when every failure has a key, the
    /// driver retries just those keys, with backoff ([`Reconciler::failed_keys`]).
    failed: FailedWrites,
    last_failures: usize,
    /// The leader token Secret as last read: its name, the Secret (None: not found), when.
    token: Option<(String, Option<Arc<Secret>>, Instant)>,
}

/// How often the member reads its leader token Secret again.
const SECRET_REREAD: Duration = Duration::from_secs(10);

/// Everything is recomputed at least this often, whatever the watches said.
pub const FULL_RESYNC: Duration = Duration::from_secs(30);

/// How long a member keeps trying to remove its announce and exports from a leader it left.
const LEAVE_RETRY: Duration = Duration::from_secs(120);
/// An ACNP import failure is reported to the leader again after this long.
const REPORT_AGAIN: Duration = Duration::from_secs(600);

pub async fn run(client: Client, opts: MemberOptions, metrics: Metrics) -> anyhow::Result<()> {
    let service_cidr = if opts.config.service_cidr.is_empty() {
        cluster::discover_service_cidr_retrying(&client).await?
    } else {
        opts.config.service_cidr.clone()
    };
    let trigger = Trigger::new(&metrics);
    let local = LocalStores::new(
        &client,
        &opts.namespace,
        &trigger,
        opts.config.enable_stretched_network_policy,
    );
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
        pending: Work::default(),
        prefixes_seen: Vec::new(),
        tiers_tried: None,
        cni_cidrs: BTreeMap::new(),
        cni_listed: None,
        failed: FailedWrites::default(),
        last_failures: 0,
        token: None,
    };
    tracing::info!(namespace = member.ns, "member controller started");
    let driver = Driver {
        domain: "member",
        trigger,
        metrics: metrics.clone(),
        tick: Duration::from_secs(2),
        settle: crate::SETTLE,
        full_resync: FULL_RESYNC,
    };
    driver.reconcile(&mut member).await;
    Ok(())
}

impl Reconciler for Member {
    fn watches(&self) -> Vec<(&'static str, &WatchHealth)> {
        let l = &self.local;
        vec![
            ("ClusterSets", l.clustersets.health()),
            ("ClusterClaims", l.claims.health()),
            ("Namespaces", l.namespaces.health()),
            ("Services", l.services.health()),
            ("EndpointSlices", l.slices.health()),
            ("MCS EndpointSlices", l.mcs_slices.health()),
            ("Endpoints", l.endpoints.health()),
            ("ServiceExports", l.service_exports.health()),
            ("ServiceImports", l.service_imports.health()),
            ("Nodes", l.nodes.health()),
            ("Gateways", l.gateways.health()),
            ("ClusterInfoImports", l.cluster_infos.health()),
            ("LabelIdentities", l.label_identities.health()),
        ]
        .into_iter()
        .chain(l.pods.as_ref().map(|p| ("Pods", p.health())))
        .collect()
    }

    async fn pass(&mut self, work: Work) -> usize {
        self.failed = FailedWrites::default();
        self.last_failures = self.sync(work).await;
        self.last_failures
    }

    fn failed_keys(&mut self) -> Option<BTreeSet<String>> {
        self.failed.retry_keys(self.last_failures)
    }

    fn later(&mut self) -> Work {
        std::mem::take(&mut self.pending)
    }

    fn wake_at(&self) -> Option<std::time::Instant> {
        self.statuses.wake_at()
    }

    fn keys(&self) -> Option<BTreeSet<String>> {
        let l = &self.local;
        let mut keys: BTreeSet<String> = [
            l.services.keys(),
            l.slices.keys(),
            l.mcs_slices.keys(),
            l.endpoints.keys(),
            l.service_exports.keys(),
            l.service_imports.keys(),
            l.label_identities.keys(),
            l.pods.as_ref().map(Watched::keys).unwrap_or_default(),
        ]
        .into_iter()
        .flatten()
        .collect();
        if let Some(conn) = &self.conn {
            keys.extend(conn.imports.keys());
            keys.extend(conn.own_exports.keys());
        }
        Some(keys)
    }
}

fn problem(reason: &'static str, message: String) -> (&'static str, String) {
    (reason, message)
}

/// The failed writes of a pass that have a work key, and their keys.
#[derive(Debug, Default)]
struct FailedWrites {
    /// How many writes failed that have a key in `keys` (several may share one).
    writes: usize,
    keys: BTreeSet<String>,
}

impl FailedWrites {
    /// `writes` failed writes, whose keys are `keys`.
    fn add(&mut self, writes: usize, keys: impl IntoIterator<Item = String>) {
        self.writes += writes;
        self.keys.extend(keys);
    }

    /// The keys to retry alone, when every one of the pass's `failures` has one; `None` (a
    /// pass over everything) when some failed write has none.
    fn retry_keys(&mut self, failures: usize) -> Option<BTreeSet<String>> {
        (failures == self.writes).then(|| std::mem::take(&mut self.keys))
    }
}

impl Member {
    fn log_once(&mut self, message: String) {
        if self.logged.insert(message.clone()) {
            tracing::warn!("{message}");
        }
    }

    /// One pass: first what is not per key (a leave being retried, the ClusterSet and the
    /// connection, the ClusterSet's status, the CNI's Pod CIDRs, the Gateway), then the exports,
    /// imports and ServiceExport statuses of the Services `work` covers (everything when the
    /// connection or this cluster's CIDRs changed). Returns the failed writes.
    async fn sync(&mut self, mut work: Work) -> usize {
        // In a member cluster whether or not it has joined a ClusterSet yet.
        self.default_tiers().await;
        self.finish_leaving().await;
        let mut sets = self.local.clustersets.all();
        mc_api::clusterset::oldest_first(&mut sets);
        let Some(set) = sets.first().cloned() else {
            return self.no_clusterset().await;
        };
        let (beat, problem) = self.connect(&set, &mut work).await;
        let connected = beat.as_ref().and_then(|b| b.connected) == Some(true);
        self.metrics.gauge(
            "strait_mc_leader_connected",
            &[],
            if connected { 1.0 } else { 0.0 },
        );
        let mut failures = self.clusterset_status(&set, beat.as_ref(), problem).await;
        // The CNI's Pod CIDRs first: the Gateway names them.
        self.refresh_cni_cidrs().await;
        failures += self.elect_gateway().await;
        let prefixes = self.own_prefixes();
        if prefixes != self.prefixes_seen {
            work = Work::All;
            self.prefixes_seen = prefixes;
        }
        failures + self.exchange(&work).await
    }

    /// Retries leaving the leader of a connection whose ClusterSet went, for [`LEAVE_RETRY`].
    async fn finish_leaving(&mut self) {
        let Some((conn, since)) = &self.leaving else {
            return;
        };
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

    /// No ClusterSet: leaves the leader, and removes everything imported or elected.
    async fn no_clusterset(&mut self) -> usize {
        if let Some(conn) = self.conn.take() {
            tracing::info!(
                clusterset = conn.identity.clusterset,
                "ClusterSet deleted: leaving"
            );
            self.leave(conn).await;
        }
        self.metrics.gauge("strait_mc_leader_connected", &[], 0.0);
        self.clean_up_all().await
    }

    /// The connection `set` names: kept while who we are and how to reach the leader stay the
    /// same, opened anew (and everything recomputed: `work` becomes all) when they change. Gives
    /// the leader's heartbeat (none without a connection) and what is wrong, if anything.
    async fn connect(
        &mut self,
        set: &ClusterSet,
        work: &mut Work,
    ) -> (Option<Beat>, Option<(&'static str, String)>) {
        match self.identity(set).await {
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
                    self.reconnect(id).await;
                    *work = Work::All;
                }
                let refused = self.refused_cluster_info();
                (self.conn.as_ref().map(Connection::beat), refused)
            }
        }
    }

    /// Replaces the connection by one for `id`: the old leader is left when `id` is another
    /// leader, cluster or ClusterSet (not when only the token changed), and every write is
    /// asserted again.
    async fn reconnect(&mut self, id: Identity) {
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
                // A leave still being retried for the same cluster at the same leader would
                // delete this connection's exports and announce (they carry the same cluster
                // ID): this connection supersedes it.
                if let Some((old, _)) = &self.leaving {
                    let (o, n) = (&old.identity, &c.identity);
                    if (&o.server, &o.leader_ns, &o.cluster_id)
                        == (&n.server, &n.leader_ns, &n.cluster_id)
                    {
                        tracing::info!("rejoined the same leader: the pending leave is dropped");
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

    /// The leader refused this cluster's ClusterInfo: connected, but no other cluster routes to
    /// it. Disconnected says more than a verdict read before: nothing then.
    fn refused_cluster_info(&self) -> Option<(&'static str, String)> {
        let conn = self.conn.as_ref()?;
        conn.beat().connected.filter(|c| *c)?;
        let name = names::cluster_info_export(&conn.identity.cluster_id);
        let re = conn
            .own_exports
            .get(Some(&conn.identity.leader_ns), &name)?;
        match Verdict::of(re.status.as_ref())? {
            Verdict::Failure(why) => Some(problem(
                "ClusterInfoRefused",
                format!("the leader refused this cluster's ClusterInfo: {why}"),
            )),
            _ => None,
        }
    }

    /// The exchange with the leader, when connected: this cluster's exports (once the leader
    /// holds our announce and our stored exports are listed), the imports (once listed), and
    /// the ServiceExport statuses. Returns the failed writes.
    async fn exchange(&mut self, work: &Work) -> usize {
        let Some(conn) = self.conn.take() else {
            return 0;
        };
        let mut failures = 0;
        // ServiceExport statuses wait while exports or imports are written (StatusPacer).
        let mut busy = false;
        let mut statuses = Vec::new();
        if conn.beat().is_leader && conn.own_exports.ready() {
            let exported = self.export(&conn, work).await;
            failures += exported.failures;
            self.failed
                .add(exported.keyed_failures, exported.failed_keys);
            (busy, statuses) = (exported.wrote, exported.statuses);
        }
        if conn.imports.ready() {
            let (f, wrote) = self.import(&conn, work).await;
            (failures, busy) = (failures + f, busy || wrote);
        }
        failures += self.write_statuses(busy, statuses).await;
        self.conn = Some(conn);
        failures
    }

    /// Writes the ServiceExport statuses `statuses` (labelled with their Services' keys) when
    /// the [`StatusPacer`] says they are due, or leaves their keys for the next pass (a wake-up
    /// or the tick). Returns the failed writes.
    async fn write_statuses(&mut self, busy: bool, statuses: Vec<(String, Op)>) -> usize {
        if self.statuses.due(busy, !statuses.is_empty()) {
            let failed = run_all_failed("ServiceExport", statuses).await;
            let n = failed.len();
            self.failed.add(n, failed);
            n
        } else {
            for (key, _) in statuses {
                self.pending.add(key);
            }
            0
        }
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
    /// The leader token Secret `name`, read by name (the member may not list Secrets) when the
    /// ClusterSet names another one and at least every [`SECRET_REREAD`] (a rotated token is
    /// picked up within that). A failed read keeps the last one read.
    async fn token_secret(
        &mut self,
        name: &str,
    ) -> Result<Option<Arc<Secret>>, (&'static str, String)> {
        if let Some((held, secret, at)) = &self.token
            && held == name
            && at.elapsed() < SECRET_REREAD
        {
            return Ok(secret.clone());
        }
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.ns);
        match api.get_opt(name).await {
            Ok(secret) => {
                let secret = secret.map(Arc::new);
                self.token = Some((name.to_owned(), secret.clone(), Instant::now()));
                Ok(secret)
            }
            Err(e) => {
                let held = match &self.token {
                    Some((held, secret, _)) if held == name => Some(secret.clone()),
                    _ => None,
                };
                let why = format!("reading Secret {}/{name}: {e}", self.ns);
                match held {
                    Some(secret) => {
                        self.log_once(why);
                        Ok(secret)
                    }
                    None => Err(problem("SecretNotReadable", why)),
                }
            }
        }
    }

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
                // A merge-patch body: generic JSON by nature.
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
        let secret = self.token_secret(&secret_name).await?.ok_or_else(|| {
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
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::FailedWrites;

    fn keys(k: &[&str]) -> BTreeSet<String> {
        k.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn failed_writes_are_retried_by_key_only_when_every_one_has_a_key() {
        let mut f = FailedWrites::default();
        // A ServiceExport status and both ResourceExports of one Service, and another Service's.
        f.add(1, keys(&["default/web"]));
        f.add(3, keys(&["default/web", "default/db"]));
        assert_eq!(
            f.retry_keys(4),
            Some(keys(&["default/db", "default/web"])),
            "four failed writes, each with its key: those keys alone"
        );
        let mut f = FailedWrites::default();
        f.add(1, keys(&["default/web"]));
        assert_eq!(
            f.retry_keys(2),
            None,
            "a failed write without a key (the ClusterInfo, an import): everything"
        );
        assert_eq!(
            FailedWrites::default().retry_keys(0),
            Some(BTreeSet::new()),
            "no failure"
        );
    }
}
