//! Writing this cluster's exports to the leader (decided in `export`) and the ServiceExports'
//! conditions, for the Services a pass covers.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use k8s_openapi::{
    api::discovery::v1::EndpointSlice,
    apimachinery::pkg::apis::meta::v1::Condition as MetaCondition,
};
use kube::{Api, ResourceExt as _};
use mc_api::{
    exports::{ResourceExport, Verdict, kinds as re_kinds},
    mcs::{self, ServiceExport},
    names,
};
use mc_kube::{Op, Work, run_all_failed, write::Compare};
use serde_json::json;

use super::{
    Member,
    connection::Connection,
    export::{self, Invalid},
    stores::{self, own_export_key},
};
use crate::conditions::{meta_condition, same_meta};

/// What writing the exports of a pass came to.
pub(super) struct ExportWrites {
    /// The ResourceExport writes that failed.
    pub failures: usize,
    /// The work keys of those failures that have one (the Service a ResourceExport is about,
    /// or `stores::IDENTITIES`): a pass over these keys makes those writes again. A failure
    /// without a key (the ClusterInfo export) is counted in `failures` only.
    pub failed_keys: BTreeSet<String>,
    /// How many of `failures` have their key in `failed_keys`.
    pub keyed_failures: usize,
    /// Whether any ResourceExport was written (ServiceExport statuses then wait: `StatusPacer`).
    pub wrote: bool,
    /// The ServiceExport status writes to make, labelled with their Services' keys.
    pub statuses: Vec<(String, Op)>,
}

/// Each ServiceExport of a pass with what was decided about exporting its Service.
type Decisions = Vec<(Arc<ServiceExport>, Result<export::Exported, Invalid>)>;

impl Member {
    /// The local EndpointSlices by the Service `(ns, name)` they belong to.
    pub(super) fn slices_by_service(
        &self,
        work: &Work,
    ) -> BTreeMap<(String, String), Vec<Arc<EndpointSlice>>> {
        let mut slices: BTreeMap<(String, String), Vec<Arc<EndpointSlice>>> = BTreeMap::new();
        for s in self.local.slices.covered(work) {
            if let Some(svc) = s.labels().get(mcs::labels::KUBE_SERVICE_NAME) {
                slices
                    .entry((s.namespace().unwrap_or_default(), svc.clone()))
                    .or_default()
                    .push(s.clone());
            }
        }
        slices
    }

    /// Writes this cluster's exports to the leader: the ResourceExports of the Services `work`
    /// covers, the ClusterInfo and, when `work` covers them, the label identities. The
    /// ServiceExport status writes are returned, not made (the caller paces them).
    pub(super) async fn export(&self, conn: &Connection, work: &Work) -> ExportWrites {
        let id = &conn.identity;
        let (desired, decisions) = self.desired_exports(conn, work);
        let api: Api<ResourceExport> = Api::namespaced(conn.client.clone(), &id.leader_ns);
        let stored = conn.own_exports.covered(work);
        let keys = export_keys(&desired, &stored);
        let ops = self.writer.converge(
            desired,
            &stored,
            Compare::ExactSpec,
            |_| api.clone(),
            |_| true,
        );
        let wrote = !ops.is_empty();
        let failed = run_all_failed("ResourceExport", ops).await;
        let failures = failed.len();
        let (failed_keys, keyed_failures) = keys_of_failed(failed, &keys);
        ExportWrites {
            failures,
            failed_keys,
            keyed_failures,
            wrote,
            statuses: self.service_export_statuses(conn, decisions),
        }
    }

    /// The ResourceExports this cluster wants at the leader for `work` (see [`Member::export`]),
    /// and the decision about each ServiceExport `work` covers.
    fn desired_exports(&self, conn: &Connection, work: &Work) -> (Vec<ResourceExport>, Decisions) {
        let id = &conn.identity;
        let slices = self.slices_by_service(work);
        let mut desired: BTreeMap<String, ResourceExport> = BTreeMap::new();
        let mut decisions = Vec::new();
        for se in self.local.service_exports.covered(work) {
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
                let marks = se.spec.spec.as_ref();
                for re in
                    export::exports_for(&id.cluster_id, &id.leader_ns, &ns, &name, exported, marks)
                {
                    desired.insert(re.name_any(), re);
                }
            }
            decisions.push((se, decision));
        }
        // The Gateway the election counts as current (the first by name), so that the exported
        // ClusterInfo does not flap while an old and a new Gateway briefly coexist.
        let mut gateways = self.local.gateways.all();
        gateways.sort_by_key(|g| g.name_any());
        if let Some(gw) = gateways.first() {
            let re = export::cluster_info_export(
                &id.cluster_id,
                &id.leader_ns,
                &self.ns,
                gw,
                self.pod_cidrs(),
            );
            desired.insert(re.name_any(), re);
        }
        // Label identities: recomputed from every Pod when one of them (or anything about
        // identities) changed; none without stretched NetworkPolicy (a member that turned it
        // off withdraws them).
        if work.covers(stores::IDENTITIES)
            && let Some(pods) = &self.local.pods
        {
            let namespaces: BTreeMap<String, BTreeMap<String, String>> = self
                .local
                .namespaces
                .all()
                .iter()
                .map(|n| (n.name_any(), n.labels().clone()))
                .collect();
            let pods = pods.all();
            for label in export::pod_labels(pods.iter().map(Arc::as_ref), &namespaces) {
                let re = export::label_identity_export(&id.cluster_id, &id.leader_ns, &label);
                desired.insert(re.name_any(), re);
            }
        }
        (desired.into_values().collect(), decisions)
    }

    /// The ServiceExport status writes of `decisions`: Valid (as Antrea) plus the standard
    /// Ready and Conflict, from the decision and the leader's verdict on the Service's export.
    /// Only those that change something; each labelled with its Service's key.
    fn service_export_statuses(
        &self,
        conn: &Connection,
        decisions: Decisions,
    ) -> Vec<(String, Op)> {
        let id = &conn.identity;
        let mut ops: Vec<(String, Op)> = Vec::new();
        for (se, decision) in decisions {
            let (ns, name) = (se.namespace().unwrap_or_default(), se.name_any());
            let old: Vec<MetaCondition> = se
                .status
                .as_ref()
                .map(|s| s.conditions.clone())
                .unwrap_or_default();
            let re_name = names::resource_export(&id.cluster_id, &ns, &name, re_kinds::SERVICE);
            let verdict = conn
                .own_exports
                .get(Some(&id.leader_ns), &re_name)
                .and_then(|re| Verdict::of(re.status.as_ref()));
            let want: Vec<MetaCondition> =
                export::service_export_conditions(&decision, verdict.as_ref())
                    .into_iter()
                    .map(|(t, s, r, m)| meta_condition(t, s, &r, &m, &old))
                    .collect();
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
                    // A merge-patch body: generic JSON by nature (the conditions are typed).
                    w.patch_status(&api, &name, json!({"conditions": want}))
                        .await
                }),
            ));
        }
        ops
    }
}

/// The work key of each ResourceExport a pass may write, by name (the label of its write): what
/// it desires and what is stored (a stale export is deleted). One without a key (the ClusterInfo
/// export) is not there.
fn export_keys(
    desired: &[ResourceExport],
    stored: &[Arc<ResourceExport>],
) -> BTreeMap<String, String> {
    stored
        .iter()
        .map(Arc::as_ref)
        .chain(desired)
        .filter_map(|re| Some((re.name_any(), own_export_key(re)?)))
        .collect()
}

/// The keys of the failed ResourceExport writes `failed` (their labels: the exports' names),
/// and how many of them have one.
fn keys_of_failed(
    failed: Vec<String>,
    keys: &BTreeMap<String, String>,
) -> (BTreeSet<String>, usize) {
    let keyed: Vec<&String> = failed.iter().filter_map(|name| keys.get(name)).collect();
    let n = keyed.len();
    (keyed.into_iter().cloned().collect(), n)
}

#[cfg(test)]
mod tests {
    use std::{collections::BTreeSet, sync::Arc};

    use kube::ResourceExt as _;
    use mc_api::{exports::ResourceExport, gateway::Gateway};

    use super::{export_keys, keys_of_failed};
    use crate::member::{export, service_key, stores};

    /// A failed ResourceExport write is retried by the key of the Service it is about (both of
    /// its exports, and a stale one being deleted), or of the label identities; a failed
    /// ClusterInfo export has no key (everything is recomputed).
    #[test]
    fn failed_resource_export_writes_name_their_work_keys() {
        let (cluster, leader_ns) = ("east", "antrea-multicluster");
        let [web_svc, web_eps] = export::exports_for(
            cluster,
            leader_ns,
            "default",
            "web",
            &export::Exported::default(),
            None,
        );
        let [old_svc, _] = export::exports_for(
            cluster,
            leader_ns,
            "shop",
            "old",
            &export::Exported::default(),
            None,
        );
        let label = export::label_identity_export(cluster, leader_ns, "ns:a=b&pod:c=d");
        let info = export::cluster_info_export(
            cluster,
            leader_ns,
            "kube-system",
            &Gateway::new("node-a", Default::default()),
            vec![],
        );
        let desired = [
            web_svc.clone(),
            web_eps.clone(),
            label.clone(),
            info.clone(),
        ];
        // "old" is no longer exported: its stored export is deleted.
        let stored = [Arc::new(old_svc.clone()), Arc::new(info.clone())];
        let keys = export_keys(&desired, &stored);
        let web = service_key("default", "web");
        let failed = |exports: &[&ResourceExport]| {
            keys_of_failed(exports.iter().map(|re| re.name_any()).collect(), &keys)
        };
        assert_eq!(
            failed(&[&web_svc, &web_eps]),
            (BTreeSet::from([web.clone()]), 2),
            "both exports of one Service: its key, two keyed failures"
        );
        assert_eq!(
            failed(&[&old_svc, &label]),
            (
                BTreeSet::from([service_key("shop", "old"), stores::IDENTITIES.to_owned()]),
                2
            ),
            "a stale export's delete and a label identity"
        );
        assert_eq!(
            failed(&[&info, &web_eps]),
            (BTreeSet::from([web]), 1),
            "the ClusterInfo export has no key: one failure of two is keyed"
        );
    }
}
