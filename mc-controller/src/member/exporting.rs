//! Writing this cluster's exports to the leader (decided in `export`) and the ServiceExports'
//! conditions, for the Services a pass covers.

use super::*;

impl Member {
    /// The local EndpointSlices by the Service `(ns, name)` they belong to.
    pub(super) fn slices_by_service(
        &self,
        work: &Work,
    ) -> BTreeMap<(String, String), Vec<Arc<EndpointSlice>>> {
        let mut slices: BTreeMap<(String, String), Vec<Arc<EndpointSlice>>> = BTreeMap::new();
        for s in self.local.slices.covered(work) {
            if let Some(svc) = s.labels().get(mc_api::mcs::labels::KUBE_SERVICE_NAME) {
                slices
                    .entry((s.namespace().unwrap_or_default(), svc.clone()))
                    .or_default()
                    .push(s.clone());
            }
        }
        slices
    }

    /// Writes this cluster's exports to the leader; returns the failures, whether anything was
    /// written, and the ServiceExport status writes to make.
    pub(super) async fn export(
        &self,
        conn: &Connection,
        work: &Work,
    ) -> (usize, bool, Vec<(String, Op)>) {
        let id = &conn.identity;
        let slices = self.slices_by_service(work);
        let mut desired: BTreeMap<String, ResourceExport> = BTreeMap::new();
        let mut verdicts = Vec::new();
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
            verdicts.push((se, decision));
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

        let api: Api<ResourceExport> = Api::namespaced(conn.client.clone(), &id.leader_ns);
        let stored = conn.own_exports.covered(work);
        let ops = self.writer.converge(
            desired.into_values().collect(),
            &stored,
            Compare::ExactSpec,
            |_| api.clone(),
            |_| true,
        );
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
                    w.patch_status(&api, &name, json!({"conditions": want}))
                        .await
                }),
            ));
        }
        (failures, wrote, ops)
    }
}
