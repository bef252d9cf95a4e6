//! The leader's merge: every ResourceExport in the Common Area → the ResourceImports members
//! import, and a verdict per export. Pure: the same exports always give the same imports, so the
//! leader can recompute everything after a restart or a missed event.
//!
//! Rules (Antrea's, with the MCS API's conflicts): Service exports of one `<ns>/<name>` must agree on their ports (and,
//! Strait's addition, on headlessness). The ports already imported stay while some exporter
//! still has them; otherwise the oldest exporter's win. An exporter that disagrees gets a Failure
//! and contributes no endpoints. Any disagreement (ports, headlessness, the copied traits, the
//! exported labels and annotations) is also reported to every exporter as the MCS API's Conflict. Endpoints are the
//! union over the clusters whose Service export succeeded (and whose endpoints are not withdrawn).
//! A ClusterInfo is imported under the export's own name; an ACNP under `<name>-<kind>`. Label
//! identities are gathered by hash (`labels`); the leader gives them their IDs (stateful, so not
//! here) and imports each under its hash.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use k8s_openapi::api::core::v1::{EndpointSubset, ServicePort, ServiceSpec};
use kube::ResourceExt as _;
use mc_api::{
    antrea::ClusterNetworkPolicySpec,
    exports::{
        ClusterSubsets, ConflictReason, EndpointsExport, Kind, ResourceExport, with_ports_named,
    },
    imports::{
        ImportedService, ImportedServiceMeta, ResourceImport, ResourceImportSpec, kinds as ri_kinds,
    },
    mcs::{self, ServiceImportSpec, ServiceImportType},
    names,
    parsed::{OrWhy, Parsed},
};

use super::announce::{self, Announcement};

/// What the leader says about one export (the leader–member contract, in mc-api).
pub use mc_api::exports::Verdict;

#[derive(Debug, Default)]
pub struct Merged {
    /// Desired ResourceImports by name.
    pub imports: BTreeMap<String, ResourceImportSpec>,
    /// Verdict per ResourceExport name (live exports only).
    pub verdicts: BTreeMap<String, Verdict>,
    /// The label identities the live exports name, by hash: the normalized label and the
    /// exports that carry it (valid ones get no verdict, as in Antrea).
    pub labels: BTreeMap<String, (String, Vec<String>)>,
}

/// `(name, port, protocol)` of a Service port: what importers need to agree on.
type PortKey = (String, i32, String);

fn port_key(p: &ServicePort) -> PortKey {
    (
        p.name.clone().unwrap_or_default(),
        p.port,
        p.protocol.clone().unwrap_or_else(|| "TCP".into()),
    )
}

/// The keys of `ports`, sorted (what exporters compare).
fn port_keys(ports: &[ServicePort]) -> Vec<PortKey> {
    let mut keys: Vec<PortKey> = ports.iter().map(port_key).collect();
    keys.sort();
    keys
}

fn describe(keys: &[PortKey]) -> String {
    let parts: Vec<String> = keys
        .iter()
        .map(|(n, p, proto)| {
            if n.is_empty() {
                format!("{p}/{proto}")
            } else {
                format!("{n}:{p}/{proto}")
            }
        })
        .collect();
    format!("[{}]", parts.join(", "))
}

struct Tuple<'a> {
    namespace: String,
    name: String,
    exports: Vec<&'a ResourceExport>,
}

/// The source object of an export, `(namespace, name)`: its spec's, else its labels'.
pub(super) fn source_of(re: &ResourceExport) -> (String, String) {
    (
        spec_or_label(&re.spec.namespace, re, names::labels::SOURCE_NAMESPACE),
        spec_or_label(&re.spec.name, re, names::labels::SOURCE_NAME),
    )
}

fn spec_or_label(value: &Option<String>, re: &ResourceExport, label: &str) -> String {
    value
        .clone()
        .filter(|v| !v.is_empty())
        .or_else(|| re.labels().get(label).cloned())
        .unwrap_or_default()
}

/// The cluster an export comes from (its spec's, else its label's).
pub(crate) fn cluster_of(re: &ResourceExport) -> String {
    spec_or_label(&re.spec.cluster_id, re, names::labels::SOURCE_CLUSTER_ID)
}

/// Oldest first; the name breaks ties, so the order is the same on every run.
fn by_age(a: &&ResourceExport, b: &&ResourceExport) -> std::cmp::Ordering {
    let ta = a.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let tb = b.metadata.creation_timestamp.as_ref().map(|t| t.0);
    ta.cmp(&tb).then_with(|| a.name_any().cmp(&b.name_any()))
}

/// `(kind, namespace, name)` of the source object: the exports merged together.
type GroupKey = (Kind, String, String);
/// `(namespace, name, cluster)` of a cluster's Service export the leader accepted, with the
/// names of the ports it serves.
type Accepted = BTreeMap<(String, String, String), BTreeSet<String>>;

/// The live ClusterInfo exports among `exports`, oldest first, with what their imports hold, as
/// [`announce::weigh`] takes them.
pub fn announcements<'a>(
    exports: &'a [Arc<ResourceExport>],
    existing: &'a [Arc<ResourceImport>],
) -> Vec<Announcement<'a>> {
    let imported: BTreeMap<String, &mc_api::clusterinfo::ClusterInfo> = existing
        .iter()
        .filter(|ri| ri.spec.kind.as_deref() == Some(ri_kinds::CLUSTER_INFO))
        .filter_map(|ri| Some((ri.name_any(), ri.spec.cluster_info.as_ref()?)))
        .collect();
    let mut infos: Vec<&ResourceExport> = exports
        .iter()
        .map(Arc::as_ref)
        .filter(|re| re.metadata.deletion_timestamp.is_none())
        .filter(|re| re.spec.kind() == Kind::ClusterInfo)
        .collect();
    infos.sort_by(by_age);
    infos
        .into_iter()
        .filter_map(|re| {
            let info = re.spec.cluster_info.as_ref()?;
            Some(Announcement {
                export: re.name_any(),
                cluster: cluster_of(re),
                info,
                imported: imported.get(&re.name_any()).copied(),
            })
        })
        .collect()
}

/// How many exports one member may have, by kind ([`over_quota`]).
#[derive(Clone, Copy, Debug)]
pub struct Quota {
    /// Service and ACNP exports (a Service's Endpoints export follows it).
    pub services: usize,
    pub label_identities: usize,
}

impl Default for Quota {
    fn default() -> Self {
        Self {
            services: mc_api::config::DEFAULT_MAX_SERVICE_EXPORTS_PER_MEMBER,
            label_identities: mc_api::config::DEFAULT_MAX_LABEL_IDENTITIES_PER_MEMBER,
        }
    }
}

/// The live exports beyond their member's [`Quota`], by name, with why: each member's newest
/// beyond it, so that one member cannot crowd the others out of the leader's imports or the
/// ClusterSet's label IDs.
pub fn over_quota(exports: &[Arc<ResourceExport>], quota: Quota) -> BTreeMap<String, String> {
    let mut by_member: BTreeMap<(String, bool), Vec<&ResourceExport>> = BTreeMap::new();
    for re in exports.iter().map(Arc::as_ref) {
        if re.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let labels = match re.spec.kind() {
            Kind::Service | Kind::Acnp => false,
            Kind::LabelIdentity => true,
            _ => continue,
        };
        by_member
            .entry((cluster_of(re), labels))
            .or_default()
            .push(re);
    }
    let mut out = BTreeMap::new();
    for ((cluster, labels), mut list) in by_member {
        let (max, what, key) = if labels {
            (
                quota.label_identities,
                "label identities",
                "maxLabelIdentitiesPerMember",
            )
        } else {
            (
                quota.services,
                "Service and ACNP exports",
                "maxServiceExportsPerMember",
            )
        };
        if list.len() <= max {
            continue;
        }
        list.sort_by(by_age);
        for re in &list[max..] {
            out.insert(
                re.name_any(),
                format!(
                    "cluster {cluster} has {} {what}, more than the leader's {key} ({max}): its newest are refused",
                    list.len()
                ),
            );
        }
    }
    out
}

/// `announced`: the verdicts on every ClusterInfo ([`announce::weigh`] over [`announcements`]);
/// the ClusterInfo exports among `exports` are imported or refused by them, and an exporter's
/// endpoints are imported only inside its accepted CIDRs.
/// `over_quota`: exports refused for their member's quota ([`over_quota`]).
pub fn merge(
    leader_namespace: &str,
    exports: &[Arc<ResourceExport>],
    existing: &[Arc<ResourceImport>],
    withdrawn: &BTreeSet<String>,
    announced: &announce::Verdicts,
    over_quota: &BTreeMap<String, String>,
) -> Merged {
    let mut out = Merged::default();
    let live: Vec<&ResourceExport> = exports
        .iter()
        .map(Arc::as_ref)
        .filter(|re| re.metadata.deletion_timestamp.is_none())
        .filter(|re| match over_quota.get(&re.name_any()) {
            Some(why) => {
                out.verdicts
                    .insert(re.name_any(), Verdict::Failure(why.clone()));
                false
            }
            None => true,
        })
        .collect();
    let existing: BTreeMap<String, &ResourceImport> = existing
        .iter()
        .map(|ri| (ri.name_any(), ri.as_ref()))
        .collect();
    let mut groups = group(leader_namespace, &live, announced, &mut out);

    for tuple in groups.values_mut() {
        tuple.exports.sort_by(by_age);
    }
    // Which source object owns which import name: `-` joins are ambiguous (ns `a-b`/name `c`
    // and ns `a`/name `b-c` give the same name).
    let claimed = owners(&groups, &existing);
    let mut service_ok: Accepted = BTreeMap::new();
    let mut serviced: BTreeSet<(String, String)> = BTreeSet::new();
    for ((kind, _, _), tuple) in groups.iter() {
        let ri_name = names::resource_import(&tuple.namespace, &tuple.name, kind.as_str());
        if !claim(&claimed, &ri_name, tuple, &mut out) {
            continue;
        }
        let ri_kind = if *kind == Kind::Service {
            ri_kinds::SERVICE_IMPORT
        } else {
            kind.as_str()
        };
        let mut spec = ResourceImportSpec {
            name: Some(tuple.name.clone()),
            namespace: (!tuple.namespace.is_empty()).then(|| tuple.namespace.clone()),
            kind: Some(ri_kind.to_owned()),
            ..Default::default()
        };
        match kind {
            Kind::Service => {
                let imported = existing.get(&ri_name).copied();
                let Some(si) = service(tuple, imported, &mut service_ok, &mut out) else {
                    continue;
                };
                spec.service_import = Some(si);
                serviced.insert((tuple.namespace.clone(), tuple.name.clone()));
            }
            Kind::Acnp => {
                let Some(policy) = acnp(tuple, &mut out) else {
                    continue;
                };
                spec.cluster_network_policy = Some(policy);
            }
            _ => continue, // Endpoints: below, once every Service verdict is known.
        }
        out.imports.insert(ri_name, spec);
    }
    for ((kind, _, _), tuple) in groups.iter() {
        let ri_name = names::resource_import(&tuple.namespace, &tuple.name, kind.as_str());
        if *kind == Kind::Endpoints
            && claimed.get(&ri_name) == Some(&(tuple.namespace.clone(), tuple.name.clone()))
        {
            endpoints(
                tuple,
                ri_name,
                (&service_ok, &serviced),
                withdrawn,
                &announced.accepted,
                &mut out,
            );
        }
    }
    out
}

/// The most a merged Endpoints import may hold of endpoint subsets, as JSON: etcd refuses an
/// object over 1.5 MiB (its default request limit), and a ResourceImport that cannot be written
/// stops updating in every member. Exports that would push an import past it are refused,
/// newest first.
pub const MAX_MERGED_ENDPOINTS_BYTES: usize = 1 << 20;

/// The live exports by kind and source object; ClusterInfo exports are merged on the way, and
/// exports of an unknown kind or without a name get their Failure.
fn group<'a>(
    leader_namespace: &str,
    live: &[&'a ResourceExport],
    announced: &announce::Verdicts,
    out: &mut Merged,
) -> BTreeMap<GroupKey, Tuple<'a>> {
    let mut groups: BTreeMap<GroupKey, Tuple> = BTreeMap::new();
    for re in live {
        let kind = re.spec.kind();
        let (namespace, name) = source_of(re);
        match &kind {
            Kind::Service | Kind::Endpoints | Kind::Acnp => {}
            Kind::ClusterInfo => {
                clusterinfo(leader_namespace, re, announced, out);
                continue;
            }
            Kind::LabelIdentity => {
                label_identity(re, out);
                continue;
            }
            Kind::Unknown(_) => {
                out.verdicts.insert(
                    re.name_any(),
                    Verdict::Failure(format!(
                        "kind {:?} is not supported by this leader",
                        kind.as_str()
                    )),
                );
                continue;
            }
        }
        if name.is_empty() {
            out.verdicts
                .insert(re.name_any(), Verdict::Failure("spec.name is empty".into()));
            continue;
        }
        groups
            .entry((kind, namespace.clone(), name.clone()))
            .or_insert_with(|| Tuple {
                namespace,
                name,
                exports: Vec::new(),
            })
            .exports
            .push(re);
    }
    groups
}

/// The owner `(namespace, name)` of each import name the groups make. Sources whose names join
/// to the same stem (`a-b`/`c` and `a`/`b-c` both give `a-b-c-service` and `a-b-c-endpoints`)
/// have one owner for all the stem's names: the source the existing Service import (else
/// Endpoints import) holds while it is still exported (names are sticky), else the source with
/// the oldest Service export (else the oldest export). A later export that joins to the same
/// names never takes an import over.
fn owners(
    groups: &BTreeMap<GroupKey, Tuple>,
    existing: &BTreeMap<String, &ResourceImport>,
) -> BTreeMap<String, (String, String)> {
    // By stem: each tuple with the import name it makes.
    let mut stems: BTreeMap<String, Vec<(&Kind, &Tuple, String)>> = BTreeMap::new();
    for ((kind, _, _), tuple) in groups {
        let ri_name = names::resource_import(&tuple.namespace, &tuple.name, kind.as_str());
        let stem = match kind {
            Kind::Service | Kind::Endpoints => {
                names::resource_import(&tuple.namespace, &tuple.name, "")
            }
            _ => ri_name.clone(),
        };
        stems.entry(stem).or_default().push((kind, tuple, ri_name));
    }
    let held_by = |ri_name: &str| {
        existing.get(ri_name).map(|ri| {
            (
                ri.spec.namespace.clone().unwrap_or_default(),
                ri.spec.name.clone().unwrap_or_default(),
            )
        })
    };
    let mut out = BTreeMap::new();
    for (stem, tuples) in stems {
        let source = |t: &Tuple| (t.namespace.clone(), t.name.clone());
        let held = held_by(&format!("{stem}service"))
            .or_else(|| held_by(&format!("{stem}endpoints")))
            .or_else(|| held_by(&stem))
            .filter(|h| tuples.iter().any(|(_, t, _)| source(t) == *h));
        let oldest = |services_only: bool| {
            tuples
                .iter()
                .filter(|(k, t, _)| {
                    !t.exports.is_empty() && (!services_only || **k == Kind::Service)
                })
                .min_by(|a, b| by_age(&a.1.exports[0], &b.1.exports[0]))
                .map(|(_, t, _)| source(t))
        };
        let Some(owner) = held.or_else(|| oldest(true)).or_else(|| oldest(false)) else {
            continue;
        };
        for (_, _, ri_name) in tuples {
            out.insert(ri_name, owner.clone());
        }
    }
    out
}

/// Whether `tuple` owns the import name `ri_name` ([`owners`]); the exports of a tuple that does
/// not get their Failure.
fn claim(
    claimed: &BTreeMap<String, (String, String)>,
    ri_name: &str,
    tuple: &Tuple,
    out: &mut Merged,
) -> bool {
    let source = (tuple.namespace.clone(), tuple.name.clone());
    let Some(owner) = claimed.get(ri_name) else {
        return false;
    };
    if *owner == source {
        return true;
    }
    for re in &tuple.exports {
        out.verdicts.insert(
            re.name_any(),
            Verdict::Failure(format!(
                "ResourceImport {ri_name} already imports {}/{}",
                owner.0, owner.1
            )),
        );
    }
    false
}

/// What every exporter of a Service must agree on: headless or not, and the ports.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Shape {
    headless: bool,
    ports: Vec<PortKey>,
}

impl Shape {
    fn of(spec: &ServiceSpec) -> Option<Shape> {
        Some(Shape {
            headless: spec.cluster_ip.as_deref() == Some("None"),
            ports: port_keys(spec.ports.as_ref()?),
        })
    }

    /// The shape an existing ServiceImport in a ResourceImport carries, with its ports in the
    /// order the import lists them (the claims keep that order, so a merge over its own output
    /// writes nothing new).
    fn imported(ri: &ResourceImport) -> Option<Shape> {
        // One that cannot be read is not kept: the merge writes the import anew.
        let si = &ri.spec.service_import.as_ref()?.ok()?.spec;
        Some(Shape {
            headless: si.type_ == ServiceImportType::Headless,
            ports: si
                .ports
                .iter()
                .map(|p| {
                    (
                        p.name.clone().unwrap_or_default(),
                        p.port,
                        p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                    )
                })
                .collect(),
        })
    }

    fn describe(&self) -> String {
        let ports = describe(&self.ports);
        if self.headless {
            format!("headless with ports {ports}")
        } else {
            format!("ports {ports}")
        }
    }
}

/// One cluster's Service export: what it says about the Service.
struct Exporter<'a> {
    re: &'a ResourceExport,
    spec: &'a ServiceSpec,
    shape: Shape,
    payload: &'a mc_api::exports::ServiceExport,
}

/// Whether `e` differs from the import on `reason`: its ports (`union`), its kind (`headless`),
/// and the traits and marks of the export imported (`chosen`).
fn differs(
    reason: &ConflictReason,
    e: &Exporter,
    union: &[PortKey],
    headless: bool,
    chosen: &Exporter,
) -> bool {
    let (a, b) = (e.spec, chosen.spec);
    match reason {
        ConflictReason::Port => e.shape.ports != union,
        ConflictReason::Type => e.shape.headless != headless,
        ConflictReason::SessionAffinity => {
            a.session_affinity.as_deref().unwrap_or("None")
                != b.session_affinity.as_deref().unwrap_or("None")
        }
        ConflictReason::SessionAffinityConfig => {
            a.session_affinity_config != b.session_affinity_config
        }
        ConflictReason::InternalTrafficPolicy => {
            a.internal_traffic_policy != b.internal_traffic_policy
        }
        ConflictReason::TrafficDistribution => a.traffic_distribution != b.traffic_distribution,
        ConflictReason::Labels => e.payload.exported_labels != chosen.payload.exported_labels,
        ConflictReason::Annotations => {
            e.payload.exported_annotations != chosen.payload.exported_annotations
        }
        ConflictReason::PodCidrsNotRouted | ConflictReason::Other(_) => false,
    }
}

/// The ServiceImport of a Service's exports (oldest first), by the MCS API's rules:
/// - headlessness: the one already imported stays while an exporter still has it, else the
///   oldest's; an export of the other kind is refused (`TypeConflict`);
/// - ports, per name: a name is claimed by the port (number, protocol) already imported while an
///   exporter still has it, else by the oldest exporter's; an export serves the names whose port
///   it has (the import's ports are the union of the claimed ones), and one that serves none is
///   refused. Ports that differ in any way are a `PortConflict`;
/// - the traits, labels and annotations imported are the oldest accepted export's.
///
/// When the exports disagree on anything, every exporter hears of it (the MCS API's
/// `Conflict`, with its reasons). The accepted ones, with the port names each serves, go to
/// `service_ok`. None when no export has ports.
fn service(
    tuple: &Tuple,
    imported: Option<&ResourceImport>,
    service_ok: &mut Accepted,
    out: &mut Merged,
) -> Option<OrWhy<ImportedService>> {
    let exporters = exporters(tuple, out);
    let oldest = exporters.first()?;
    let imported = imported
        .filter(|ri| ri.spec.kind.as_deref() == Some(ri_kinds::SERVICE_IMPORT))
        .and_then(Shape::imported);
    let headless = imported
        .as_ref()
        .map(|s| s.headless)
        .filter(|h| exporters.iter().any(|e| e.shape.headless == *h))
        .unwrap_or(oldest.shape.headless);
    // Port names claimed, in the order the import lists them: the imported ports first while an
    // exporter of the kept kind still has them, then each exporter's, oldest first.
    let mut claimed: Vec<PortKey> = Vec::new();
    let alike = || exporters.iter().filter(|e| e.shape.headless == headless);
    for key in imported.iter().flat_map(|s| &s.ports) {
        if alike().any(|e| e.shape.ports.contains(key)) {
            claimed.push(key.clone());
        }
    }
    for e in alike() {
        for key in &e.shape.ports {
            if !claimed.iter().any(|c| c.0 == key.0) {
                claimed.push(key.clone());
            }
        }
    }
    // What each exporter serves: the claimed ports it has.
    let serves = |e: &Exporter| -> BTreeSet<String> {
        if e.shape.headless != headless {
            return BTreeSet::new();
        }
        e.shape
            .ports
            .iter()
            .filter(|k| claimed.contains(k))
            .map(|k| k.0.clone())
            .collect()
    };
    // Accepted: of the kept kind, serving a port (or exporting none: a headless Service may
    // have no ports).
    let accepts = |e: &Exporter| {
        e.shape.headless == headless && (e.shape.ports.is_empty() || !serves(e).is_empty())
    };
    let chosen = exporters.iter().find(|e| accepts(e))?;
    let mut union = claimed.clone();
    union.sort();
    // The MCS API's reasons any exporter gives, in its order.
    let reasons: Vec<ConflictReason> = ConflictReason::MCS
        .into_iter()
        .filter(|r| {
            exporters
                .iter()
                .any(|e| differs(r, e, &union, headless, chosen))
        })
        .collect();
    let joined = ConflictReason::join(&reasons);
    let winner = cluster_of(chosen.re);
    let reference = Shape {
        headless,
        ports: union,
    };
    for e in &exporters {
        let served = serves(e);
        let accepted = accepts(e);
        let message = if accepted {
            format!(
                "the exports of {}/{} disagree ({}); the import has {} and the traits, labels and annotations of cluster {winner:?}, the oldest export",
                tuple.namespace,
                tuple.name,
                joined.replace(',', ", "),
                reference.describe()
            )
        } else {
            format!(
                "ResourceExport can't be converged to ResourceImport: {} differ from the {} already exported for {}/{}",
                e.shape.describe(),
                reference.describe(),
                tuple.namespace,
                tuple.name
            )
        };
        if accepted {
            service_ok.insert(
                (
                    tuple.namespace.clone(),
                    tuple.name.clone(),
                    cluster_of(e.re),
                ),
                served,
            );
        }
        let verdict = match (accepted, reasons.is_empty()) {
            (true, true) => Verdict::Succeeded,
            (false, true) => Verdict::Failure(message),
            (accepted, false) => Verdict::Conflict {
                accepted,
                reasons: reasons.clone(),
                message,
            },
        };
        out.verdicts.insert(e.re.name_any(), verdict);
    }
    Some(OrWhy(Ok(service_import(tuple, &claimed, headless, chosen))))
}

/// The exports of `tuple` that carry a Service spec with ports, oldest first; the others are
/// told they failed.
fn exporters<'a>(tuple: &Tuple<'a>, out: &mut Merged) -> Vec<Exporter<'a>> {
    tuple
        .exports
        .iter()
        .filter_map(|re| {
            let payload = re.spec.service.as_ref();
            let spec = payload.and_then(|s| s.service_spec.as_deref());
            let shape = spec.and_then(Shape::of);
            if shape.is_none() {
                out.verdicts.insert(
                    re.name_any(),
                    Verdict::Failure(
                        "a Service export needs spec.service.serviceSpec.ports".into(),
                    ),
                );
            }
            Some(Exporter {
                re,
                spec: spec?,
                shape: shape?,
                payload: payload?,
            })
        })
        .collect()
}

/// The ServiceImport of `tuple`: the `claimed` ports, its type, the traits (the MCS API's
/// copies of the exported Service's), labels and annotations of the `chosen` export.
fn service_import(
    tuple: &Tuple,
    claimed: &[PortKey],
    headless: bool,
    chosen: &Exporter,
) -> ImportedService {
    let from = chosen.spec;
    ImportedService {
        metadata: ImportedServiceMeta {
            name: Some(tuple.name.clone()),
            namespace: Some(tuple.namespace.clone()),
            labels: chosen.payload.exported_labels.clone(),
            annotations: chosen.payload.exported_annotations.clone(),
        },
        spec: ServiceImportSpec {
            ports: claimed
                .iter()
                .map(|(name, port, protocol)| mcs::ServicePort {
                    name: (!name.is_empty()).then(|| name.clone()),
                    protocol: Some(protocol.clone()),
                    app_protocol: None,
                    port: *port,
                })
                .collect(),
            type_: if headless {
                ServiceImportType::Headless
            } else {
                ServiceImportType::ClusterSetIP
            },
            session_affinity: from.session_affinity.clone(),
            session_affinity_config: from.session_affinity_config.clone(),
            internal_traffic_policy: from.internal_traffic_policy.clone(),
            traffic_distribution: from.traffic_distribution.clone(),
            ips: Vec::new(),
            ip_families: Vec::new(),
        },
    }
}

/// The policy of an ACNP's exports: the oldest's; an export with another spec, or one whose
/// spec cannot be read, fails.
fn acnp(tuple: &Tuple, out: &mut Merged) -> Option<Parsed<ClusterNetworkPolicySpec>> {
    let oldest = tuple.exports[0];
    let failed = |why: String, out: &mut Merged| {
        for re in &tuple.exports {
            out.verdicts
                .insert(re.name_any(), Verdict::Failure(why.clone()));
        }
    };
    let Some(policy) = oldest.spec.acnp() else {
        failed("an ACNP export needs spec.clusterNetworkPolicy".into(), out);
        return None;
    };
    if let Err(why) = policy.get() {
        failed(
            format!(
                "spec.clusterNetworkPolicy cannot be read as an Antrea ClusterNetworkPolicy spec: {why}"
            ),
            out,
        );
        return None;
    }
    for re in &tuple.exports {
        let verdict = if re.spec.acnp() == Some(policy) {
            Verdict::Succeeded
        } else {
            Verdict::Failure(format!(
                "ResourceExport {} already exports ACNP {} with another spec",
                oldest.name_any(),
                tuple.name
            ))
        };
        out.verdicts.insert(re.name_any(), verdict);
    }
    Some(policy.clone())
}

/// The Endpoints import of a Service: the union of the endpoints of the clusters whose Service
/// export was accepted and that are not withdrawn (one contribution per cluster, the oldest).
fn endpoints(
    tuple: &Tuple,
    ri_name: String,
    (service_ok, serviced): (&Accepted, &BTreeSet<(String, String)>),
    withdrawn: &BTreeSet<String>,
    clusters: &BTreeMap<String, announce::Accepted>,
    out: &mut Merged,
) {
    let mut subsets = BTreeMap::new();
    // Bytes of the subsets taken so far, oldest exports first.
    let mut bytes = 0usize;
    for re in &tuple.exports {
        let cluster = cluster_of(re);
        let served =
            service_ok.get(&(tuple.namespace.clone(), tuple.name.clone(), cluster.clone()));
        let verdict = match (&re.spec.endpoints, served) {
            (None, _) => Verdict::Failure("an Endpoints export needs spec.endpoints".into()),
            (Some(_), None) => Verdict::Failure(format!(
                "the Service export of cluster {cluster:?} for {}/{} has not converged",
                tuple.namespace, tuple.name
            )),
            (Some(eps), Some(served)) => {
                let ips = eps.subsets.iter().flat_map(|s| {
                    let ready = s.addresses.iter().flatten();
                    ready.chain(s.not_ready_addresses.iter().flatten())
                });
                if let Some(why) =
                    announce::outside(&cluster, clusters.get(&cluster), ips.map(|a| a.ip.as_str()))
                {
                    out.verdicts.insert(re.name_any(), Verdict::Failure(why));
                    continue;
                }
                if !withdrawn.contains(&cluster) && !subsets.contains_key(&cluster) {
                    let mine = serving(&eps.subsets, served);
                    let size = serde_json::to_vec(&mine).map_or(usize::MAX, |v| v.len());
                    if bytes.saturating_add(size) > MAX_MERGED_ENDPOINTS_BYTES {
                        let why = format!(
                            "the merged endpoints of {}/{} would hold {} KiB with cluster {cluster}'s {} KiB, more than the leader's {} KiB (etcd refuses objects over 1.5 MiB): its endpoints are refused, the older exports keep theirs",
                            tuple.namespace,
                            tuple.name,
                            bytes.saturating_add(size) / 1024,
                            size / 1024,
                            MAX_MERGED_ENDPOINTS_BYTES / 1024
                        );
                        out.verdicts.insert(re.name_any(), Verdict::Failure(why));
                        continue;
                    }
                    bytes += size;
                    subsets.insert(cluster, mine);
                }
                Verdict::Succeeded
            }
        };
        out.verdicts.insert(re.name_any(), verdict);
    }
    if !serviced.contains(&(tuple.namespace.clone(), tuple.name.clone())) {
        return;
    }
    out.imports.insert(
        ri_name,
        ResourceImportSpec {
            name: Some(tuple.name.clone()),
            namespace: Some(tuple.namespace.clone()),
            kind: Some(ri_kinds::ENDPOINTS.into()),
            endpoints: Some(EndpointsExport {
                cluster_subsets: subsets
                    .iter()
                    .map(|(cluster, s)| ClusterSubsets {
                        cluster_id: cluster.clone(),
                        count: u32::try_from(s.len()).unwrap_or(u32::MAX),
                    })
                    .collect(),
                subsets: subsets.into_values().flatten().collect(),
            }),
            ..Default::default()
        },
    );
}

/// A cluster's endpoint subsets with only the ports it serves (by name): traffic to a port
/// another cluster's export claimed never reaches it.
fn serving(subsets: &[EndpointSubset], served: &BTreeSet<String>) -> Vec<EndpointSubset> {
    subsets
        .iter()
        .filter_map(|s| with_ports_named(s, served))
        .collect()
}

/// A LabelIdentity export `<clusterID>-<hash>`: its label must hash to its name's `<hash>`; a
/// second label under a hash already taken (a collision of the 64-bit prefix) is refused.
fn label_identity(re: &ResourceExport, out: &mut Merged) {
    let name = re.name_any();
    let hash = names::label_hash_of_export(&name).to_owned();
    let label = re
        .spec
        .label_identity
        .as_ref()
        .and_then(|l| l.normalized_label.clone())
        .unwrap_or_default();
    let refuse = |out: &mut Merged, why: String| {
        out.verdicts.insert(name.clone(), Verdict::Failure(why));
    };
    if label.is_empty() {
        return refuse(
            out,
            "a LabelIdentity export needs spec.labelIdentity.normalizedLabel".into(),
        );
    }
    let want = mc_api::labelidentity::label_hash(&label);
    if want != hash {
        return refuse(
            out,
            format!("the label {label:?} hashes to {want}, not to this export's {hash}"),
        );
    }
    match out.labels.get_mut(&hash) {
        Some((held, exports)) if *held == label => exports.push(name),
        Some((held, _)) => {
            let held = held.clone();
            refuse(
                out,
                format!("the label {label:?} collides with {held:?} under the hash {hash}"),
            );
        }
        None => {
            out.labels.insert(hash, (label, vec![name]));
        }
    }
}

fn clusterinfo(
    leader_namespace: &str,
    re: &ResourceExport,
    announced: &announce::Verdicts,
    out: &mut Merged,
) {
    let name = re.name_any();
    if re.spec.cluster_info.is_none() {
        out.verdicts.insert(
            name,
            Verdict::Failure("a ClusterInfo export needs spec.clusterInfo".into()),
        );
        return;
    }
    // A refused change leaves the announcement imported before (if any) in place.
    if let Some(held) = announced.imports.get(&name) {
        out.imports.insert(
            name.clone(),
            ResourceImportSpec {
                name: Some(name.clone()),
                namespace: Some(leader_namespace.to_owned()),
                kind: Some(ri_kinds::CLUSTER_INFO.into()),
                cluster_info: Some(held.clone()),
                ..Default::default()
            },
        );
    }
    let verdict = match (announced.refused.get(&name), announced.partly.get(&name)) {
        (Some(why), _) => Verdict::Failure(why.clone()),
        // Accepted with Pod CIDRs left out: said as a conflict beside `Succeeded`.
        (None, Some(why)) => Verdict::Conflict {
            accepted: true,
            reasons: vec![ConflictReason::PodCidrsNotRouted],
            message: why.clone(),
        },
        (None, None) if announced.imports.contains_key(&name) => Verdict::Succeeded,
        // Not among the announcements weighed (the leader weighs every live ClusterInfo).
        (None, None) => Verdict::Failure("this ClusterInfo was not weighed yet".into()),
    };
    out.verdicts.insert(name, verdict);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`super::merge`] with the ClusterInfos among `exports` weighed, and east (10.97.0.0/16,
    /// 10.244.0.0/16) and west (10.98.0.0/16, 10.245.0.0/16) accepted when they announce none.
    fn merge(
        ns: &str,
        exports: &[Arc<ResourceExport>],
        existing: &[Arc<ResourceImport>],
        withdrawn: &BTreeSet<String>,
    ) -> Merged {
        let mut announced =
            announce::weigh(&announcements(exports, existing), &announce::Rules::new(8));
        for (cluster, service, pods, gw) in [
            ("east", "10.97.0.0/16", "10.244.0.0/16", [198, 18, 1, 1]),
            ("west", "10.98.0.0/16", "10.245.0.0/16", [198, 18, 2, 1]),
        ] {
            announced
                .accepted
                .entry(cluster.into())
                .or_insert(announce::Accepted {
                    service: mc_api::net::Prefix::parse(service).unwrap(),
                    pods: vec![mc_api::net::Prefix::parse(pods).unwrap()],
                    gateways: vec![gw.into()],
                });
        }
        let over = over_quota(exports, Quota::default());
        super::merge(ns, exports, existing, withdrawn, &announced, &over)
    }
    use k8s_openapi::{
        api::core::v1::{EndpointAddress, EndpointPort, EndpointSubset, ServiceSpec},
        apimachinery::pkg::apis::meta::v1::Time,
        jiff::Timestamp,
    };
    use mc_api::{
        clusterinfo::{ClusterInfo, GatewayInfo},
        exports::{ResourceExportSpec, ServiceExport},
    };
    use serde_json::{Value, json};

    /// The ServiceImport of `name`'s import as the leader writes it (the wire format).
    fn wire(m: &Merged, name: &str) -> Value {
        serde_json::to_value(m.imports[name].service_import.as_ref().unwrap()).unwrap()
    }

    const NS: &str = "antrea-multicluster";

    fn port(name: &str, port: i32) -> ServicePort {
        ServicePort {
            name: Some(name.into()),
            port,
            protocol: Some("TCP".into()),
            ..Default::default()
        }
    }

    fn re(cluster: &str, kind: &str, age: i64, spec: ResourceExportSpec) -> Arc<ResourceExport> {
        let name = names::resource_export(cluster, "default", "nginx", kind);
        let mut re = ResourceExport::new(
            &name,
            ResourceExportSpec {
                cluster_id: Some(cluster.into()),
                name: Some("nginx".into()),
                namespace: Some("default".into()),
                kind: Some(kind.into()),
                ..spec
            },
        );
        re.metadata.creation_timestamp =
            Some(Time(Timestamp::from_second(1_700_000_000 + age).unwrap()));
        Arc::new(re)
    }

    fn svc(cluster: &str, age: i64, ports: Vec<ServicePort>) -> Arc<ResourceExport> {
        re(
            cluster,
            "Service",
            age,
            ResourceExportSpec {
                service: Some(ServiceExport {
                    service_spec: Some(Box::new(ServiceSpec {
                        ports: Some(ports),
                        ..Default::default()
                    })),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
    }

    fn eps(cluster: &str, ip: &str) -> Arc<ResourceExport> {
        re(
            cluster,
            "Endpoints",
            0,
            ResourceExportSpec {
                endpoints: Some(EndpointsExport {
                    subsets: vec![EndpointSubset {
                        addresses: Some(vec![EndpointAddress {
                            ip: ip.into(),
                            ..Default::default()
                        }]),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
    }

    fn ips(m: &Merged) -> Vec<String> {
        m.imports["default-nginx-endpoints"]
            .endpoints
            .as_ref()
            .unwrap()
            .subsets
            .iter()
            .flat_map(|s| s.addresses.clone().unwrap_or_default())
            .map(|a| a.ip)
            .collect()
    }

    #[test]
    fn one_exporter_gives_a_service_import_and_endpoints() {
        let exports = vec![
            svc("west", 0, vec![port("http", 80)]),
            eps("west", "10.98.0.7"),
        ];
        let m = merge(NS, &exports, &[], &BTreeSet::new());
        let si = &m.imports["default-nginx-service"];
        assert_eq!(si.kind.as_deref(), Some("ServiceImport"));
        assert_eq!(
            serde_json::to_value(si.service_import.as_ref().unwrap()).unwrap()["spec"],
            json!({"ports": [{"name": "http", "port": 80, "protocol": "TCP"}], "type": "ClusterSetIP"})
        );
        assert_eq!(ips(&m), ["10.98.0.7"]);
        assert!(m.verdicts.values().all(|v| *v == Verdict::Succeeded));
    }

    /// The MCS API's copies of the Service's traits come from the export whose ports won (the
    /// oldest), not from a later one.
    #[test]
    fn the_service_import_carries_the_oldest_agreeing_exporters_traits() {
        let with_traits = |cluster: &str, age: i64, affinity: &str| {
            let mut re = (*svc(cluster, age, vec![port("http", 80)])).clone();
            let spec = re
                .spec
                .service
                .as_mut()
                .unwrap()
                .service_spec
                .as_mut()
                .unwrap();
            spec.session_affinity = Some(affinity.into());
            spec.internal_traffic_policy = Some("Cluster".into());
            spec.traffic_distribution = Some("PreferClose".into());
            spec.session_affinity_config =
                Some(serde_json::from_value(json!({"clientIP": {"timeoutSeconds": 10}})).unwrap());
            Arc::new(re)
        };
        let exports = vec![
            with_traits("east", 5, "None"),
            with_traits("west", 0, "ClientIP"),
        ];
        let m = merge(NS, &exports, &[], &BTreeSet::new());
        let spec = &wire(&m, "default-nginx-service")["spec"];
        assert_eq!(spec["sessionAffinity"], "ClientIP");
        assert_eq!(
            spec["sessionAffinityConfig"],
            json!({"clientIP": {"timeoutSeconds": 10}})
        );
        assert_eq!(spec["internalTrafficPolicy"], "Cluster");
        assert_eq!(spec["trafficDistribution"], "PreferClose");
    }

    /// Two clusters' endpoints that together would push the merged import past what etcd
    /// takes: the older export keeps its endpoints, the newer is refused, naming the sizes.
    #[test]
    fn endpoints_that_would_make_the_import_too_large_are_refused_newest_first() {
        let many = |cluster: &str, net: u8, age: i64| {
            let addresses = (0..30_000u32)
                .map(|i| EndpointAddress {
                    ip: format!("10.{net}.{}.{}", i / 250, i % 250 + 1),
                    ..Default::default()
                })
                .collect();
            let mut e = (*eps(cluster, "10.0.0.1")).clone();
            e.spec.endpoints.as_mut().unwrap().subsets[0].addresses = Some(addresses);
            e.metadata.creation_timestamp =
                Some(Time(Timestamp::from_second(1_700_000_000 + age).unwrap()));
            Arc::new(e)
        };
        let exports = vec![
            svc("west", 0, vec![port("http", 80)]),
            svc("east", 1, vec![port("http", 80)]),
            many("west", 98, 0),
            many("east", 97, 5),
        ];
        let m = merge(NS, &exports, &[], &BTreeSet::new());
        let merged = &m.imports["default-nginx-endpoints"];
        let size = serde_json::to_vec(&merged.endpoints.as_ref().unwrap().subsets)
            .unwrap()
            .len();
        assert!(size <= MAX_MERGED_ENDPOINTS_BYTES, "{size}");
        assert_eq!(ips(&m).len(), 30_000);
        assert!(ips(&m).iter().all(|ip| ip.starts_with("10.98.")));
        let east = names::resource_export("east", "default", "nginx", "Endpoints");
        match &m.verdicts[&east] {
            Verdict::Failure(why) => {
                assert!(why.contains("more than the leader's 1024 KiB"), "{why}")
            }
            other => panic!("{other:?}"),
        }
        let west = names::resource_export("west", "default", "nginx", "Endpoints");
        assert_eq!(m.verdicts[&west], Verdict::Succeeded);
    }

    #[test]
    fn endpoints_are_merged_and_a_conflicting_exporter_is_refused() {
        let mut exports = vec![
            svc("west", 0, vec![port("http", 80)]),
            eps("west", "10.98.0.7"),
            svc("east", 5, vec![port("http", 80)]),
            eps("east", "10.97.0.9"),
        ];
        let m = merge(NS, &exports, &[], &BTreeSet::new());
        assert_eq!(ips(&m), ["10.97.0.9", "10.98.0.7"]);

        exports[2] = svc("east", 5, vec![port("http", 8080)]);
        let m = merge(NS, &exports, &[], &BTreeSet::new());
        assert_eq!(ips(&m), ["10.98.0.7"]);
        // East is refused (Antrea's rule) and both exporters hear of the conflict (MCS API).
        assert!(matches!(
            &m.verdicts["east-default-nginx-service"],
            Verdict::Conflict { accepted: false, reasons, message }
                if *reasons == [ConflictReason::Port] && message.contains("8080")
        ));
        assert!(matches!(
            &m.verdicts["east-default-nginx-endpoints"],
            Verdict::Failure(_)
        ));
        assert!(matches!(
            &m.verdicts["west-default-nginx-service"],
            Verdict::Conflict { accepted: true, reasons, message }
                if *reasons == [ConflictReason::Port] && message.contains("\"west\"")
        ));
    }

    type Marks<'a> = &'a [(&'a str, &'a str)];

    /// West's export with `labels`/`annotations` marked and the given headlessness.
    fn marked(
        cluster: &str,
        age: i64,
        headless: bool,
        marks: (Marks, Marks),
    ) -> Arc<ResourceExport> {
        let mut re = (*svc(cluster, age, vec![port("http", 80)])).clone();
        let payload = re.spec.service.as_mut().unwrap();
        let map = |m: &[(&str, &str)]| -> BTreeMap<String, String> {
            m.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect()
        };
        payload.exported_labels = map(marks.0);
        payload.exported_annotations = map(marks.1);
        if headless {
            payload.service_spec.as_mut().unwrap().cluster_ip = Some("None".into());
        }
        Arc::new(re)
    }

    #[test]
    fn the_oldest_exports_marks_are_imported_and_disagreeing_marks_are_a_conflict_for_all() {
        let west = marked("west", 0, false, (&[("tier", "front")], &[("note", "w")]));
        let m = merge(NS, std::slice::from_ref(&west), &[], &BTreeSet::new());
        let si = wire(&m, "default-nginx-service");
        assert_eq!(si["metadata"]["labels"], json!({"tier": "front"}));
        assert_eq!(si["metadata"]["annotations"], json!({"note": "w"}));
        assert_eq!(m.verdicts["west-default-nginx-service"], Verdict::Succeeded);

        let east = marked("east", 5, false, (&[("tier", "back")], &[("note", "w")]));
        let m = merge(NS, &[west.clone(), east], &[], &BTreeSet::new());
        let si = wire(&m, "default-nginx-service");
        assert_eq!(si["metadata"]["labels"], json!({"tier": "front"}));
        for cluster in ["west", "east"] {
            assert_eq!(
                m.verdicts[&format!("{cluster}-default-nginx-service")],
                Verdict::Conflict {
                    accepted: true,
                    reasons: vec![ConflictReason::Labels],
                    message: "the exports of default/nginx disagree (LabelsConflict); the import has ports [http:80/TCP] and the traits, labels and annotations of cluster \"west\", the oldest export".into(),
                },
                "{cluster}"
            );
        }
        // Marks the same again: no conflict.
        let east = marked("east", 5, false, (&[("tier", "front")], &[("note", "w")]));
        let m = merge(NS, &[west, east], &[], &BTreeSet::new());
        assert!(m.verdicts.values().all(|v| *v == Verdict::Succeeded));
    }

    /// The import's ports as `name:port/protocol`, and each cluster's endpoint ports.
    fn ports_of(m: &Merged) -> (Vec<String>, Vec<(String, Vec<String>)>) {
        let si = wire(m, "default-nginx-service");
        let ports = si["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                format!(
                    "{}:{}/{}",
                    p["name"].as_str().unwrap_or(""),
                    p["port"],
                    p["protocol"].as_str().unwrap()
                )
            })
            .collect();
        let eps = m.imports["default-nginx-endpoints"]
            .endpoints
            .clone()
            .unwrap();
        let by = eps
            .by_cluster()
            .unwrap()
            .into_iter()
            .map(|(c, subsets)| {
                let names = subsets
                    .iter()
                    .flat_map(|s| s.ports.iter().flatten())
                    .map(|p| format!("{}:{}", p.name.as_deref().unwrap_or(""), p.port))
                    .collect();
                (c.to_owned(), names)
            })
            .collect();
        (ports, by)
    }

    /// An Endpoints export of `cluster` whose one subset carries `ports`.
    fn eps_ports(cluster: &str, ip: &str, ports: &[(&str, i32)]) -> Arc<ResourceExport> {
        let mut re = (*eps(cluster, ip)).clone();
        re.spec.endpoints.as_mut().unwrap().subsets[0].ports = Some(
            ports
                .iter()
                .map(|(n, p)| EndpointPort {
                    name: Some((*n).into()),
                    port: *p,
                    protocol: Some("TCP".into()),
                    app_protocol: None,
                })
                .collect(),
        );
        Arc::new(re)
    }

    #[test]
    fn differently_named_ports_are_the_union_and_each_is_served_only_by_its_exporters() {
        let exports = vec![
            svc("west", 0, vec![port("tcp", 42)]),
            eps_ports("west", "10.98.0.7", &[("tcp", 42)]),
            svc("east", 5, vec![port("tcp2", 4242)]),
            eps_ports("east", "10.97.0.9", &[("tcp2", 4242)]),
        ];
        let m = merge(NS, &exports, &[], &BTreeSet::new());
        let (ports, by) = ports_of(&m);
        assert_eq!(ports, ["tcp:42/TCP", "tcp2:4242/TCP"]);
        assert_eq!(
            by,
            [
                ("east".to_owned(), vec!["tcp2:4242".to_owned()]),
                ("west".to_owned(), vec!["tcp:42".to_owned()])
            ]
        );
        for cluster in ["west", "east"] {
            assert!(
                matches!(
                    &m.verdicts[&format!("{cluster}-default-nginx-service")],
                    Verdict::Conflict { accepted: true, reasons, .. } if *reasons == [ConflictReason::Port]
                ),
                "{cluster}: {:?}",
                m.verdicts
            );
        }
    }

    #[test]
    fn a_clashing_port_name_stays_the_oldest_exports_and_is_not_served_by_the_other() {
        // East has the same name on another port, and a port of its own: it serves only that one.
        let exports = vec![
            svc("west", 0, vec![port("tcp", 42), port("udp", 43)]),
            eps_ports("west", "10.98.0.7", &[("tcp", 42), ("udp", 43)]),
            svc("east", 5, vec![port("tcp", 4242), port("extra", 50)]),
            eps_ports("east", "10.97.0.9", &[("tcp", 42), ("extra", 50)]),
        ];
        let m = merge(NS, &exports, &[], &BTreeSet::new());
        let (ports, by) = ports_of(&m);
        assert_eq!(ports, ["tcp:42/TCP", "udp:43/TCP", "extra:50/TCP"]);
        assert_eq!(
            by,
            [
                ("east".to_owned(), vec!["extra:50".to_owned()]),
                (
                    "west".to_owned(),
                    vec!["tcp:42".to_owned(), "udp:43".to_owned()]
                )
            ]
        );
        // East with only the clashing port serves nothing: refused, its endpoints not merged.
        let exports = vec![
            exports[0].clone(),
            exports[1].clone(),
            svc("east", 5, vec![port("tcp", 4242)]),
            eps_ports("east", "10.97.0.9", &[("tcp", 42)]),
        ];
        let m = merge(NS, &exports, &[], &BTreeSet::new());
        let (ports, by) = ports_of(&m);
        assert_eq!(ports, ["tcp:42/TCP", "udp:43/TCP"]);
        assert_eq!(by.len(), 1);
        assert!(matches!(
            &m.verdicts["east-default-nginx-service"],
            Verdict::Conflict {
                accepted: false,
                ..
            }
        ));
        assert!(matches!(
            &m.verdicts["west-default-nginx-service"],
            Verdict::Conflict { accepted: true, .. }
        ));
    }

    #[test]
    fn a_headless_export_is_imported_headless_and_headlessness_must_agree() {
        let west = marked("west", 0, true, (&[], &[]));
        let m = merge(NS, std::slice::from_ref(&west), &[], &BTreeSet::new());
        let si = wire(&m, "default-nginx-service");
        assert_eq!(si["spec"]["type"], "Headless");
        let east = marked("east", 5, false, (&[], &[]));
        let m = merge(NS, &[west, east], &[], &BTreeSet::new());
        let si = wire(&m, "default-nginx-service");
        assert_eq!(si["spec"]["type"], "Headless", "the oldest's");
        assert!(matches!(
            &m.verdicts["east-default-nginx-service"],
            Verdict::Conflict { accepted: false, reasons, .. } if *reasons == [ConflictReason::Type]
        ));
        assert!(matches!(
            &m.verdicts["west-default-nginx-service"],
            Verdict::Conflict { accepted: true, reasons, .. } if *reasons == [ConflictReason::Type]
        ));
    }

    #[test]
    fn the_endpoints_import_says_which_cluster_each_subset_came_from() {
        let exports = vec![
            svc("west", 0, vec![port("http", 80)]),
            eps("west", "10.98.0.7"),
            svc("east", 5, vec![port("http", 80)]),
            eps("east", "10.97.0.9"),
        ];
        let m = merge(NS, &exports, &[], &BTreeSet::new());
        let e = m.imports["default-nginx-endpoints"]
            .endpoints
            .clone()
            .unwrap();
        let by: Vec<(String, Vec<String>)> = e
            .by_cluster()
            .unwrap()
            .into_iter()
            .map(|(c, subsets)| {
                let ips = subsets
                    .iter()
                    .flat_map(|s| s.addresses.iter().flatten().map(|a| a.ip.clone()))
                    .collect();
                (c.to_owned(), ips)
            })
            .collect();
        assert_eq!(
            by,
            [
                ("east".to_owned(), vec!["10.97.0.9".to_owned()]),
                ("west".to_owned(), vec!["10.98.0.7".to_owned()])
            ]
        );
    }

    #[test]
    fn imported_ports_stay_while_an_exporter_has_them() {
        // West (oldest) changes its ports while east still exports the imported ones: west is
        // the one refused, imports do not flap.
        let exports = vec![
            svc("west", 0, vec![port("http", 8080)]),
            svc("east", 5, vec![port("http", 80)]),
        ];
        let first = merge(
            NS,
            &[svc("west", 0, vec![port("http", 80)]), exports[1].clone()],
            &[],
            &BTreeSet::new(),
        );
        let existing = vec![Arc::new(ResourceImport::new(
            "default-nginx-service",
            first.imports["default-nginx-service"].clone(),
        ))];
        let m = merge(NS, &exports, &existing, &BTreeSet::new());
        assert!(matches!(
            m.verdicts["west-default-nginx-service"],
            Verdict::Conflict {
                accepted: false,
                ..
            }
        ));
        assert!(matches!(
            m.verdicts["east-default-nginx-service"],
            Verdict::Conflict { accepted: true, .. }
        ));
        // The sole exporter may change its ports.
        let m = merge(NS, &exports[..1], &existing, &BTreeSet::new());
        assert_eq!(m.verdicts["west-default-nginx-service"], Verdict::Succeeded);
    }

    #[test]
    fn withdrawn_and_deleting_exports_contribute_nothing() {
        let mut deleting = (*svc("east", 5, vec![port("http", 80)])).clone();
        deleting.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
        let exports = vec![
            svc("west", 0, vec![port("http", 80)]),
            eps("west", "10.98.0.7"),
            Arc::new(deleting),
            eps("east", "10.97.0.9"),
        ];
        let m = merge(NS, &exports, &[], &BTreeSet::from(["west".to_owned()]));
        assert!(ips(&m).is_empty());
        assert!(
            !merge(NS, &exports[..1], &[], &BTreeSet::new())
                .imports
                .contains_key("default-nginx-endpoints")
        );
    }

    #[test]
    fn clusterinfo_keeps_the_export_name() {
        let mut re = ResourceExport::new(
            "east-clusterinfo",
            ResourceExportSpec {
                cluster_id: Some("east".into()),
                kind: Some("ClusterInfo".into()),
                cluster_info: Some(ClusterInfo {
                    cluster_id: Some("east".into()),
                    service_cidr: Some("10.97.0.0/16".into()),
                    gateway_infos: vec![GatewayInfo {
                        gateway_ip: Some("198.18.1.2".into()),
                    }],
                    ..Default::default()
                }),
                ..Default::default()
            },
        );
        re.metadata.creation_timestamp = Some(Time(Timestamp::now()));
        let m = merge(NS, &[Arc::new(re)], &[], &BTreeSet::new());
        let ri = &m.imports["east-clusterinfo"];
        assert_eq!(ri.kind.as_deref(), Some("ClusterInfo"));
        assert_eq!(ri.namespace.as_deref(), Some(NS));
        assert_eq!(
            ri.cluster_info.as_ref().unwrap().service_cidr.as_deref(),
            Some("10.97.0.0/16")
        );
    }

    /// The leader recomputes only the groups a change marks: every import must be in the group
    /// of the exports it is made from, or a change to an export would not reach its import.
    #[test]
    fn every_import_is_in_the_group_of_the_exports_it_is_made_from() {
        use crate::leader::{group_of_export, group_of_import};
        let mut info = ResourceExport::new(
            "east-clusterinfo",
            ResourceExportSpec {
                cluster_id: Some("east".into()),
                kind: Some("ClusterInfo".into()),
                cluster_info: Some(ClusterInfo {
                    cluster_id: Some("east".into()),
                    service_cidr: Some("10.97.0.0/16".into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
        );
        info.metadata.creation_timestamp = Some(Time(Timestamp::now()));
        let acnp = re(
            "west",
            "AntreaClusterNetworkPolicy",
            0,
            ResourceExportSpec {
                name: Some("strict".into()),
                namespace: Some(String::new()),
                cluster_network_policy: Some(Parsed::new(json!({"priority": 1.0}))),
                ..Default::default()
            },
        );
        let exports = vec![
            svc("west", 0, vec![port("http", 80)]),
            eps("west", "10.98.0.20"),
            Arc::new(info),
            acnp,
        ];
        let m = merge(NS, &exports, &[], &BTreeSet::new());
        assert_eq!(m.imports.len(), 4, "{:?}", m.imports.keys());
        let export_groups: BTreeSet<String> =
            exports.iter().map(|re| group_of_export(re)).collect();
        for (name, spec) in &m.imports {
            let ri = ResourceImport::new(name, spec.clone());
            assert!(
                export_groups.contains(&group_of_import(&ri)),
                "import {name} is in group {:?}, not one of {export_groups:?}",
                group_of_import(&ri)
            );
        }
        assert_eq!(
            group_of_export(&exports[0]),
            group_of_export(&exports[1]),
            "a Service and its Endpoints are merged together"
        );
    }

    /// A ClusterInfo export of `cluster` announcing the Service CIDR `service`, `age` seconds old.
    fn info(cluster: &str, age: i64, service: &str) -> Arc<ResourceExport> {
        let mut re = ResourceExport::new(
            &format!("{cluster}-clusterinfo"),
            ResourceExportSpec {
                cluster_id: Some(cluster.into()),
                kind: Some("ClusterInfo".into()),
                cluster_info: Some(ClusterInfo {
                    cluster_id: Some(cluster.into()),
                    service_cidr: Some(service.into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
        );
        re.metadata.creation_timestamp =
            Some(Time(Timestamp::from_second(1_700_000_000 + age).unwrap()));
        Arc::new(re)
    }

    #[test]
    fn a_refused_cluster_info_is_not_imported_and_endpoints_outside_the_cidrs_are_refused() {
        // Both on kubeadm's default Service CIDR: west, the younger, is refused.
        let exports = vec![
            info("east", 0, "10.96.0.0/12"),
            info("west", 5, "10.96.0.0/12"),
            svc("east", 0, vec![port("http", 80)]),
            eps("east", "10.96.0.20"),
        ];
        let m = merge(NS, &exports, &[], &BTreeSet::new());
        assert!(m.imports.contains_key("east-clusterinfo"));
        assert!(!m.imports.contains_key("west-clusterinfo"));
        let Verdict::Failure(why) = &m.verdicts["west-clusterinfo"] else {
            panic!("{:?}", m.verdicts);
        };
        assert!(
            why.contains("overlaps 10.96.0.0/12 of cluster east"),
            "{why}"
        );
        assert_eq!(ips(&m), ["10.96.0.20"]);
        // An endpoint pointing at another cluster's Node: the whole export is refused, named.
        let exports = vec![
            info("east", 0, "10.96.0.0/12"),
            svc("east", 0, vec![port("http", 80)]),
            eps("east", "198.18.2.1"),
        ];
        let m = merge(NS, &exports, &[], &BTreeSet::new());
        let name = exports[2].name_any();
        let Verdict::Failure(why) = &m.verdicts[&name] else {
            panic!("{:?}", m.verdicts);
        };
        assert!(
            why.contains(
                "198.18.2.1 lie outside cluster east's accepted Service CIDR 10.96.0.0/12"
            ),
            "{why}"
        );
        assert!(ips(&m).is_empty());
    }

    #[test]
    fn a_member_that_changes_its_announcement_to_anothers_cidr_displaces_nothing() {
        // West is the older member; both are imported.
        let honest = vec![
            info("west", 0, "10.98.0.0/16"),
            info("east", 5, "10.97.0.0/16"),
        ];
        let m = merge(NS, &honest, &[], &BTreeSet::new());
        let imports: Vec<Arc<ResourceImport>> = m
            .imports
            .iter()
            .map(|(n, s)| Arc::new(ResourceImport::new(n, s.clone())))
            .collect();
        assert_eq!(imports.len(), 2);
        // West now claims east's CIDR: refused, east keeps it, and west's earlier announcement
        // stays imported (nothing routed changes anywhere).
        let evil = vec![
            info("west", 0, "10.97.0.0/16"),
            info("east", 5, "10.97.0.0/16"),
        ];
        let m = merge(NS, &evil, &imports, &BTreeSet::new());
        assert_eq!(m.verdicts["east-clusterinfo"], Verdict::Succeeded);
        assert!(
            matches!(&m.verdicts["west-clusterinfo"], Verdict::Failure(w) if w.contains("of cluster east")),
            "{:?}",
            m.verdicts
        );
        let held = m.imports["west-clusterinfo"].cluster_info.as_ref().unwrap();
        assert_eq!(held.service_cidr.as_deref(), Some("10.98.0.0/16"));
    }

    #[test]
    fn an_import_name_stays_with_its_owner_and_otherwise_goes_to_the_oldest_export() {
        // ns `a-b`/name `c` and ns `a`/name `b-c` both join to `a-b-c-service`.
        let export = |ns: &str, name: &str, age: i64| {
            let svc = svc("east", age, vec![port("http", 80)]);
            let mut re = (*svc).clone();
            re.metadata.name = Some(format!("east-{ns}-{name}-service"));
            re.spec.namespace = Some(ns.into());
            re.spec.name = Some(name.into());
            Arc::new(re)
        };
        // The younger `a-b/c` sorts first by name, but the older `a/b-c` gets the import.
        let exports = vec![export("a-b", "c", 10), export("a", "b-c", 0)];
        let m = merge(NS, &exports, &[], &BTreeSet::new());
        let ri = &m.imports["a-b-c-service"];
        assert_eq!(
            (ri.namespace.as_deref(), ri.name.as_deref()),
            (Some("a"), Some("b-c"))
        );
        assert!(matches!(
            &m.verdicts["east-a-b-c-service"],
            Verdict::Failure(w) if w.contains("already imports a/b-c")
        ));
        // Once `a-b/c` holds the import, an older export of `a/b-c` does not take it over.
        let held = vec![Arc::new(ResourceImport::new(
            "a-b-c-service",
            ResourceImportSpec {
                namespace: Some("a-b".into()),
                name: Some("c".into()),
                kind: Some("ServiceImport".into()),
                ..Default::default()
            },
        ))];
        let m = merge(NS, &exports, &held, &BTreeSet::new());
        assert_eq!(m.imports["a-b-c-service"].name.as_deref(), Some("c"));
        assert_eq!(m.verdicts["east-a-b-c-service"], Verdict::Succeeded);
        // The Endpoints import follows the Service import's owner, even when the other
        // source's Endpoints export is the older one.
        let endpoints = |ns: &str, name: &str, age: i64| {
            let mut re = (*eps("east", "10.97.0.9")).clone();
            re.metadata.name = Some(format!("east-{ns}-{name}-endpoints"));
            re.spec.namespace = Some(ns.into());
            re.spec.name = Some(name.into());
            re.metadata.creation_timestamp =
                Some(Time(Timestamp::from_second(1_700_000_000 + age).unwrap()));
            Arc::new(re)
        };
        let mut with_eps = exports.clone();
        with_eps.extend([endpoints("a", "b-c", 0), endpoints("a-b", "c", 20)]);
        let m = merge(NS, &with_eps, &held, &BTreeSet::new());
        let ri = &m.imports["a-b-c-endpoints"];
        assert_eq!(
            (ri.namespace.as_deref(), ri.name.as_deref()),
            (Some("a-b"), Some("c"))
        );
        assert_eq!(m.verdicts["east-a-b-c-endpoints"], Verdict::Succeeded);
        assert!(matches!(
            &m.verdicts["east-a-b-c-service"],
            Verdict::Succeeded
        ));
    }

    #[test]
    fn a_member_beyond_its_quota_gets_its_newest_exports_refused() {
        let export = |cluster: &str, name: &str, age: i64| {
            let svc = svc(cluster, age, vec![port("http", 80)]);
            let mut re = (*svc).clone();
            re.metadata.name = Some(format!("{cluster}-default-{name}-service"));
            re.spec.name = Some(name.into());
            Arc::new(re)
        };
        let exports = vec![
            export("east", "a", 0),
            export("east", "c", 2),
            export("east", "b", 1),
            export("west", "d", 3),
        ];
        let quota = Quota {
            services: 2,
            label_identities: 2,
        };
        let over = over_quota(&exports, quota);
        assert_eq!(over.keys().collect::<Vec<_>>(), ["east-default-c-service"]);
        assert!(
            over["east-default-c-service"]
                .contains("more than the leader's maxServiceExportsPerMember (2)")
        );
        let m = super::merge(
            NS,
            &exports,
            &[],
            &BTreeSet::new(),
            &Default::default(),
            &over,
        );
        assert!(matches!(
            &m.verdicts["east-default-c-service"],
            Verdict::Failure(_)
        ));
        assert!(!m.imports.contains_key("default-c-service"));
        assert!(
            m.imports.contains_key("default-b-service")
                && m.imports.contains_key("default-d-service")
        );
    }

    #[test]
    fn missing_payloads_fail_without_panicking() {
        let exports = vec![
            re("west", "Service", 0, Default::default()),
            re("west", "Endpoints", 0, Default::default()),
            re("west", "Frobnicator", 0, Default::default()),
        ];
        let m = merge(NS, &exports, &[], &BTreeSet::new());
        assert!(m.imports.is_empty());
        assert_eq!(m.verdicts.len(), 3);
        assert!(
            m.verdicts
                .values()
                .all(|v| matches!(v, Verdict::Failure(_)))
        );
    }

    #[test]
    fn label_exports_are_gathered_by_hash_and_a_label_that_does_not_hash_to_its_name_is_refused() {
        use crate::leader::{group_of_export, group_of_import};
        let label = |cluster: &str, name: &str, l: &str| {
            let mut re = ResourceExport::new(
                name,
                ResourceExportSpec {
                    cluster_id: Some(cluster.into()),
                    kind: Some("LabelIdentity".into()),
                    label_identity: Some(mc_api::exports::LabelIdentityExport {
                        normalized_label: (!l.is_empty()).then(|| l.to_owned()),
                    }),
                    ..Default::default()
                },
            );
            re.metadata.creation_timestamp = Some(Time(Timestamp::now()));
            Arc::new(re)
        };
        let exports = vec![
            label("east", "east-1e5106b3b89537a1", "ns:a=b&pod:c=d"),
            label("west", "west-1e5106b3b89537a1", "ns:a=b&pod:c=d"),
            label("west", "west-0123456789abcdef", "ns:a=b&pod:c=d"),
            label("west", "west-da39a3ee5e6b4b0d", ""),
        ];
        let m = merge(NS, &exports, &[], &BTreeSet::new());
        assert!(m.imports.is_empty(), "the leader gives the IDs");
        assert_eq!(
            m.labels.get("1e5106b3b89537a1"),
            Some(&(
                "ns:a=b&pod:c=d".to_owned(),
                vec![
                    "east-1e5106b3b89537a1".to_owned(),
                    "west-1e5106b3b89537a1".to_owned()
                ]
            ))
        );
        assert_eq!(m.labels.len(), 1);
        assert!(matches!(&m.verdicts["west-0123456789abcdef"],
            Verdict::Failure(w) if w.contains("hashes to 1e5106b3b89537a1")));
        assert!(matches!(&m.verdicts["west-da39a3ee5e6b4b0d"],
            Verdict::Failure(w) if w.contains("normalizedLabel")));
        assert_eq!(m.verdicts.len(), 2, "valid label exports get no verdict");
        // Both clusters' exports and the import share the hash's group.
        let ri = ResourceImport::new(
            "1e5106b3b89537a1",
            ResourceImportSpec {
                kind: Some("LabelIdentity".into()),
                ..Default::default()
            },
        );
        for re in &exports[..2] {
            assert_eq!(group_of_export(re), group_of_import(&ri));
        }
    }
}
