//! Writing what the leader's ResourceImports make in this cluster (decided in `import`), for the
//! Services a pass covers, and removing everything when the ClusterSet goes.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::Arc,
    time::Instant,
};

use k8s_openapi::{
    api::{
        core::v1::{Event, EventSource, Namespace, ObjectReference, Service},
        discovery::v1::EndpointSlice,
    },
    apimachinery::pkg::apis::meta::v1::Time,
    jiff::Timestamp,
};
use kube::{
    Api, Client, Resource, ResourceExt as _,
    api::{ObjectMeta, PostParams},
};
use mc_api::{
    antrea::ClusterNetworkPolicy,
    clusterinfo::ClusterInfoImport,
    exports::kinds as re_kinds,
    labelidentity::LabelIdentity,
    mcs::ServiceImport,
    names::{self, annotations},
};
use mc_kube::{Op, Then, Work, Writer, is_managed, run_all, write::Compare};

use super::{Member, REPORT_AGAIN, connection::Connection, export, import};

impl Member {
    /// This cluster's own side of every multi-cluster Service it imports endpoints for and
    /// also has (see `import::serveable_subsets`).
    pub(super) fn own_endpoints(
        &self,
        conn: &Connection,
        imports: &[Arc<mc_api::imports::ResourceImport>],
        work: &Work,
    ) -> BTreeMap<(String, String), import::OwnEndpoints> {
        let id = &conn.identity;
        let mut slices = self.slices_by_service(work);
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

    /// The writes of the imports that are not about one Service: ClusterInfoImports, label
    /// identities and, once their watches have listed (`acnps` is then given, with what is
    /// stored), the replicated ClusterNetworkPolicies.
    fn cluster_wide_writes(
        &self,
        cluster_infos: Vec<ClusterInfoImport>,
        label_identities: Vec<LabelIdentity>,
        acnps: Option<(Vec<ClusterNetworkPolicy>, &[Arc<ClusterNetworkPolicy>])>,
        work: &Work,
    ) -> Vec<(String, Op)> {
        let (w, c) = (&self.writer, &self.client);
        let mut ops = w.converge(
            cluster_infos,
            &self.local.cluster_infos.all(),
            Compare::ExactSpec,
            |ns: &str| Api::namespaced(c.clone(), ns),
            |_| true,
        );
        ops.extend(w.converge(
            label_identities,
            &self.local.label_identities.covered(work),
            Compare::ExactSpec,
            |_| Api::all(c.clone()),
            is_managed,
        ));
        if let Some((desired, stored)) = acnps {
            ops.extend(w.converge(
                desired,
                stored,
                Compare::Fields,
                |_| Api::all(c.clone()),
                is_managed,
            ));
        }
        ops
    }

    /// Writes the imports; returns the failures and whether anything was written.
    pub(super) async fn import(&mut self, conn: &Connection, work: &Work) -> (usize, bool) {
        let (namespaces, terminating) = self.namespaces();
        let dying = |ns: &str| terminating.contains(ns);
        let services_v = self.local.services.covered(work);
        let services = by_ns_name(&services_v);
        let sis_v = self.local.service_imports.covered(work);
        let service_imports = by_ns_name(&sis_v);
        let mcs_slices_v = self.local.mcs_slices.covered(work);
        let mcs_slices = by_ns_name(&mcs_slices_v);
        let acnps_ready = self.local.acnps.ready() && self.local.tiers.ready();
        let acnps_v = self.local.acnps.all();
        let acnps: BTreeMap<String, &ClusterNetworkPolicy> =
            acnps_v.iter().map(|a| (a.name_any(), a.as_ref())).collect();
        let tiers = self.local.tier_names();
        let id = conn.identity.clone();
        let imports = conn.imports.covered(work);
        let own_endpoints = self.own_endpoints(conn, &imports, work);
        let plan = import::plan(
            &imports,
            &import::Local {
                cluster_id: &id.cluster_id,
                member_ns: &self.ns,
                namespaces: &namespaces,
                services: &services,
                service_imports: &service_imports,
                mcs_slices: &mcs_slices,
                acnps: &acnps,
                tiers: &tiers,
                // Computed at the start of the pass (sync).
                own_prefixes: &self.prefixes_seen,
                own_endpoints: &own_endpoints,
                stretched: self.config.enable_stretched_network_policy,
            },
        );
        let (w, c) = (&self.writer, &self.client);
        let endpoints_v = self.local.endpoints.covered(work);
        // A Service being created (its ServiceImport waits for its ClusterIP) has its Endpoints
        // and MCS EndpointSlices written after its apply, with its ServiceImport: its apply
        // (the ClusterIP allocation, the longest write of an import) then has the API server
        // to itself, and the ServiceImport, which waits for it, comes sooner.
        let creating: BTreeSet<NsName> = plan.awaiting_ip.keys().cloned().collect();
        let (endpoints_after, endpoints_now): (Vec<_>, Vec<_>) = plan
            .endpoints
            .into_iter()
            .partition(|eps| creating.contains(&ns_name(eps)));
        let (slices_after, slices_now): (Vec<_>, Vec<_>) = plan
            .mcs_slices
            .into_iter()
            .partition(|s| creating.contains(&slice_service(s)));
        // Only these are kept from the pass's deletes below: a stale object of a Service being
        // created goes at once.
        let deferred_endpoints: BTreeSet<NsName> = endpoints_after.iter().map(ns_name).collect();
        let deferred_slices: BTreeSet<NsName> = slices_after.iter().map(ns_name).collect();
        let mut after: BTreeMap<NsName, Vec<(String, Op)>> = BTreeMap::new();
        follow_ups(
            w,
            endpoints_after,
            &endpoints_v,
            ns_name,
            |ns: &str| Api::namespaced(c.clone(), ns),
            &mut after,
        );
        follow_ups(
            w,
            slices_after,
            &mcs_slices_v,
            slice_service,
            |ns: &str| Api::namespaced(c.clone(), ns),
            &mut after,
        );
        let (mut ops, want_si) = service_writes(
            w,
            c,
            plan.services,
            plan.awaiting_ip,
            after,
            &services_v,
            &dying,
        );
        ops.extend(w.converge(
            endpoints_now,
            &endpoints_v,
            Compare::Fields,
            |ns: &str| Api::namespaced(c.clone(), ns),
            |eps| !dying(ns_of(eps)) && !deferred_endpoints.contains(&ns_name(eps)),
        ));
        ops.extend(w.converge(
            plan.service_imports,
            &sis_v,
            Compare::Fields,
            |ns: &str| Api::namespaced(c.clone(), ns),
            |si| {
                is_managed(si)
                    && !want_si.contains(&(ns_of(si).to_owned(), si.name_any()))
                    && !dying(ns_of(si))
            },
        ));
        ops.extend(w.converge(
            slices_now,
            &mcs_slices_v,
            Compare::Fields,
            |ns: &str| Api::namespaced(c.clone(), ns),
            |s| is_managed(s) && !dying(ns_of(s)) && !deferred_slices.contains(&ns_name(s)),
        ));
        ops.extend(self.cluster_wide_writes(
            plan.cluster_infos,
            plan.label_identities,
            acnps_ready.then_some((plan.acnps, acnps_v.as_slice())),
            work,
        ));
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

    /// Names of the live and the terminating Namespaces. A namespace being deleted takes its
    /// objects with it: nothing is written into it, and nothing in it is deleted one by one.
    fn namespaces(&self) -> (BTreeSet<String>, BTreeSet<String>) {
        let (live, dying): (Vec<_>, Vec<_>) = self
            .local
            .namespaces
            .all()
            .into_iter()
            .partition(|n| n.metadata.deletion_timestamp.is_none());
        let names = |v: Vec<Arc<Namespace>>| v.iter().map(|n| n.name_any()).collect();
        (names(live), names(dying))
    }

    /// ACNP import failures become Warning Events `ACNPImportFailed` in the leader, on the
    /// ResourceImport, so the admin who exported the policy sees which cluster refused it.
    pub(super) async fn report_acnp_failures(
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

    /// No ClusterSet: nothing imported or elected may stay, as in Antrea.
    pub(super) async fn clean_up_all(&mut self) -> usize {
        let (w, c) = (&self.writer, &self.client);
        let l = &self.local;
        let mut ops = w.converge(
            vec![],
            &l.services.all(),
            Compare::Fields,
            |ns: &str| Api::namespaced(c.clone(), ns),
            is_managed,
        );
        ops.extend(w.converge(
            vec![],
            &l.endpoints.all(),
            Compare::Fields,
            |ns: &str| Api::namespaced(c.clone(), ns),
            |_| true,
        ));
        ops.extend(w.converge(
            vec![],
            &l.service_imports.all(),
            Compare::Fields,
            |ns: &str| Api::namespaced(c.clone(), ns),
            is_managed,
        ));
        ops.extend(w.converge(
            vec![],
            &l.mcs_slices.all(),
            Compare::Fields,
            |ns: &str| Api::namespaced(c.clone(), ns),
            is_managed,
        ));
        ops.extend(w.converge(
            vec![],
            &l.cluster_infos.all(),
            Compare::Fields,
            |ns: &str| Api::namespaced(c.clone(), ns),
            |_| true,
        ));
        ops.extend(w.converge(
            vec![],
            &l.gateways.all(),
            Compare::Fields,
            |ns: &str| Api::namespaced(c.clone(), ns),
            |_| true,
        ));
        ops.extend(w.converge(
            vec![],
            &l.label_identities.all(),
            Compare::Fields,
            |_| Api::all(c.clone()),
            is_managed,
        ));
        if l.acnps.ready() {
            ops.extend(w.converge(
                vec![],
                &l.acnps.all(),
                Compare::Fields,
                |_| Api::all(c.clone()),
                is_managed,
            ));
        }
        run_all("cleanup", ops).await
    }
}

/// The writes of `desired` (objects that follow the apply of the Service `service` gives),
/// added to `after` under that Service. Applies only: the pass's own converge deletes what is
/// not desired. They wait for the Service's apply: while it fails, they are not written (nor is
/// the ServiceImport, which needs its ClusterIP), and the pass after a failure recomputes them.
fn follow_ups<K>(
    w: &Writer,
    desired: Vec<K>,
    stored: &[Arc<K>],
    service: impl Fn(&K) -> NsName,
    api: impl Fn(&str) -> Api<K>,
    after: &mut BTreeMap<NsName, Vec<(String, Op)>>,
) where
    K: Resource + serde::Serialize + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    K: Send + Sync + 'static,
    K::DynamicType: Default,
{
    if desired.is_empty() {
        // Most passes: nothing being created, and no index of the stored objects to build.
        return;
    }
    let stored: HashMap<NsName, &Arc<K>> =
        stored.iter().map(|o| (ns_name(o.as_ref()), o)).collect();
    for obj in desired {
        let key = service(&obj);
        let copy: Vec<Arc<K>> = stored
            .get(&ns_name(&obj))
            .map(|o| (*o).clone())
            .into_iter()
            .collect();
        let ops = w.converge(vec![obj], &copy, Compare::Fields, &api, |_| false);
        after.entry(key).or_default().extend(ops);
    }
}

/// An object's namespace and name.
fn ns_name<K: Resource>(o: &K) -> NsName {
    (ns_of(o).to_owned(), o.name_any())
}

/// The imported Service an MCS EndpointSlice is for (its namespace and name).
fn slice_service(s: &EndpointSlice) -> NsName {
    let service = s
        .labels()
        .get(mc_api::mcs::labels::SERVICE_NAME)
        .map(|n| names::imported(n))
        .unwrap_or_default();
    (ns_of(s).to_owned(), service)
}

/// The writes of the imported Services, each new one's ServiceImport chained to its apply (see
/// `import`) with the writes `after` holds for it, and the ServiceImports they stand for (not
/// to be deleted while they wait for a ClusterIP). Follow-ups of a Service that needs no write
/// this pass are written as the pass's other writes are.
fn service_writes(
    w: &Writer,
    c: &Client,
    services: Vec<Service>,
    awaiting_ip: BTreeMap<(String, String), ServiceImport>,
    mut after: BTreeMap<NsName, Vec<(String, Op)>>,
    stored: &[Arc<Service>],
    dying: &impl Fn(&str) -> bool,
) -> (Vec<(String, Op)>, BTreeSet<NsName>) {
    // A ServiceImport waits for its Service's ClusterIP; it is not deleted meanwhile.
    let want_si: BTreeSet<(String, String)> = services
        .iter()
        .map(|svc| {
            let name = svc.name_any();
            let name = name.strip_prefix(names::IMPORTED_PREFIX).unwrap_or(&name);
            (ns_of(svc).to_owned(), name.to_owned())
        })
        .collect();
    // A new imported Service's ServiceImport follows its apply, with the ClusterIP the API
    // server allocated (one write sooner than waiting for the Service's watch event).
    let mut awaiting = awaiting_ip;
    let then = |svc: &Service| -> Option<Then<Service>> {
        let key = ns_name(svc);
        let si = awaiting.remove(&key);
        let follow = after.remove(&key).unwrap_or_default();
        if si.is_none() && follow.is_empty() {
            return None;
        }
        let (w, api) = (
            w.clone(),
            Api::<ServiceImport>::namespaced(c.clone(), ns_of(svc)),
        );
        Some(Box::new(move |stored: Service| {
            let ip = stored
                .spec
                .and_then(|s| s.cluster_ip)
                .filter(|ip| ip != "None" && !ip.is_empty());
            let si = si.zip(ip).map(|(mut si, ip)| {
                si.spec.ips = vec![ip];
                w.apply_op(&api, si)
            });
            let ops: Vec<(String, Op)> = si.into_iter().chain(follow).collect();
            // A few writes (the ServiceImport, the Endpoints, a slice per source cluster), at
            // once. The first failure fails the chain (`run_all` logs it, under the Service's
            // name, and the pass after recomputes everything); the others are logged here.
            Some(Box::pin(async move {
                let results = futures::future::join_all(
                    ops.into_iter()
                        .map(|(label, op)| async move { (label, op.await) }),
                )
                .await;
                let mut first = Ok(());
                for (label, result) in results {
                    match result {
                        Err(e) if first.is_ok() => {
                            first = Err(kube::Error::Service(
                                format!("{label}, after the Service's apply: {e}").into(),
                            ))
                        }
                        Err(e) => {
                            tracing::warn!(what = "import", object = label, error = %e, "write failed; will retry")
                        }
                        Ok(()) => {}
                    }
                }
                first
            }) as Op)
        }))
    };
    let mut ops = w.converge_then(
        services,
        stored,
        Compare::Fields,
        |ns: &str| Api::namespaced(c.clone(), ns),
        |svc| {
            is_managed(svc)
                && svc
                    .annotations()
                    .contains_key(annotations::IMPORTED_SERVICE)
                && !dying(ns_of(svc))
        },
        then,
    );
    // Follow-ups whose Service needed no write.
    ops.extend(after.into_values().flatten());
    (ops, want_si)
}

/// A namespace and a name.
type NsName = (String, String);

fn ns_of<K: Resource>(o: &K) -> &str {
    o.meta().namespace.as_deref().unwrap_or_default()
}

/// Objects by `(namespace, name)`.
fn by_ns_name<K: Resource>(objects: &[Arc<K>]) -> BTreeMap<(String, String), &K> {
    objects
        .iter()
        .map(|o| (ns_name(o.as_ref()), o.as_ref()))
        .collect()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use kube::api::ObjectMeta;
    use mc_api::names;

    use super::slice_service;

    #[test]
    fn an_mcs_slice_follows_the_imported_service_it_is_labelled_for() {
        let mut slice = EndpointSlice {
            metadata: ObjectMeta {
                name: Some("web-west-0".into()),
                namespace: Some("shop".into()),
                ..Default::default()
            },
            address_type: "IPv4".into(),
            endpoints: None,
            ports: None,
        };
        // Unlabelled: no Service, so it follows none being created.
        assert_eq!(slice_service(&slice), ("shop".to_owned(), String::new()));
        slice.metadata.labels = Some(
            [(
                mc_api::mcs::labels::SERVICE_NAME.to_owned(),
                "web".to_owned(),
            )]
            .into(),
        );
        assert_eq!(
            slice_service(&slice),
            ("shop".to_owned(), names::imported("web"))
        );
        assert_eq!(names::imported("web"), "antrea-mc-web");
    }
}
