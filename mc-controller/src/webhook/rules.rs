//! The admission rules, as pure functions of the request and of facts read from the API before
//! (docs/design.md §3). Nothing here does I/O, so every allow/deny case is a unit test. The
//! objects are typed (mc-api): the webhook reads the request's objects once, and one that cannot
//! be read is refused there, naming why.
//!
//! The identity binding: a member's controller talks to the leader with the token of a
//! ServiceAccount in the leader's namespace. That ServiceAccount speaks for one cluster ID, named
//! by its annotation `multicluster.antrea.io/cluster-id`. The guides create the ServiceAccount
//! without the annotation; such a ServiceAccount may create the announce of a cluster ID no one
//! is bound to. The mutating webhook stamps the creator on the announce
//! (`multicluster.antrea.io/announced-by`), and the leader controller, reading the stored
//! announce, binds the ServiceAccount to its cluster ID. Until then it may only refresh the
//! announce it created, and may not write ResourceExports. The webhooks change nothing
//! themselves: a forged AdmissionReview sent to the webhook port binds nothing.

use json_patch::{
    AddOperation, PatchOperation, RemoveOperation,
    jsonptr::{PointerBuf, Token},
};
use kube::ResourceExt as _;
use mc_api::{
    clusterset::v1alpha2::ClusterSet,
    exports::{ResourceExport, kinds},
    gateway::Gateway,
    memberclusterannounce::MemberClusterAnnounce,
    names::{self, annotations, finalizers, labels},
};
use serde_json::Value;

/// Who sent the request, from the AdmissionReview's userInfo.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    /// This controller itself (its own identity, learnt at start).
    Controller,
    ServiceAccount {
        namespace: String,
        name: String,
    },
    /// A member of `system:masters`: a cluster administrator.
    Admin,
    /// Any other user.
    User(String),
}

impl Caller {
    pub fn classify(username: &str, groups: &[String], own_username: Option<&str>) -> Caller {
        if own_username == Some(username) {
            return Caller::Controller;
        }
        if let Some(rest) = username.strip_prefix("system:serviceaccount:")
            && let Some((ns, name)) = rest.split_once(':')
        {
            return Caller::ServiceAccount {
                namespace: ns.to_owned(),
                name: name.to_owned(),
            };
        }
        if groups.iter().any(|g| g == "system:masters") {
            return Caller::Admin;
        }
        Caller::User(username.to_owned())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Create,
    Update,
    Delete,
}

/// What the webhook answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    Deny(String),
}

use Verdict::{Allow, Deny};

fn deny(message: impl Into<String>) -> Verdict {
    Deny(message.into())
}

/// The caller's ServiceAccount, as read from the API.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Account {
    /// None: the ServiceAccount does not exist.
    pub found: bool,
    /// The value of its cluster-id annotation; None when it has none.
    pub cluster_id: Option<String>,
}

/// Other ServiceAccounts of the leader namespace bound to cluster IDs: (name, cluster ID).
pub type Bindings = Vec<(String, String)>;

/// An optional field as the rules compare it (absent reads as empty).
fn s(v: &Option<String>) -> &str {
    v.as_deref().unwrap_or("")
}

fn label<'a>(obj: &'a impl kube::Resource, key: &str) -> &'a str {
    obj.meta()
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map_or("", String::as_str)
}

fn object_name(obj: &impl kube::Resource) -> &str {
    obj.meta().name.as_deref().unwrap_or("")
}

pub use mc_api::names::{dns1123_label, prefix_pair};

// ---------------------------------------------------------------------------------------------
// ClusterSet (leader and member)

/// `others`: the ClusterSets already in the namespace, other than this one. `announces`: how
/// many MemberClusterAnnounces the namespace holds (leader only; 0 on a member).
pub fn clusterset(
    op: Op,
    old: Option<&ClusterSet>,
    new: Option<&ClusterSet>,
    others: &[String],
    announces: usize,
) -> Verdict {
    match op {
        Op::Create => {
            if let Some(other) = others.first() {
                return deny(format!(
                    "multiple ClusterSets in a Namespace are not allowed: ClusterSet {other} already exists here"
                ));
            }
            Allow
        }
        Op::Update => {
            let (Some(old), Some(new)) = (old, new) else {
                return Allow;
            };
            let (was, is) = (s(&old.spec.cluster_id), s(&new.spec.cluster_id));
            if !was.is_empty() && was != is {
                return deny(format!(
                    "the field 'clusterID' is immutable (it is {was:?}); delete and re-create the ClusterSet to change it"
                ));
            }
            let leader = |v: &ClusterSet| {
                v.spec
                    .leaders
                    .first()
                    .map_or("", |l| s(&l.cluster_id))
                    .to_owned()
            };
            let (was, is) = (leader(old), leader(new));
            if !was.is_empty() && was != is {
                return deny(format!(
                    "the field 'leaders[0].clusterID' is immutable (it is {was:?}); delete and re-create the ClusterSet to change it"
                ));
            }
            Allow
        }
        Op::Delete => {
            if announces > 0 {
                let name = old.map(object_name).unwrap_or_default();
                return deny(format!(
                    "failed to delete the ClusterSet {name} since there are still member clusters connecting to this leader cluster ({announces} MemberClusterAnnounce(s)): let the members leave first (delete their ClusterSets)"
                ));
            }
            Allow
        }
    }
}

// ---------------------------------------------------------------------------------------------
// MemberClusterAnnounce (leader)

/// Facts for a MemberClusterAnnounce request.
pub struct AnnounceFacts<'a> {
    pub leader_ns: &'a str,
    /// The caller's ServiceAccount (meaningful when the caller is one in `leader_ns`).
    pub account: Account,
    /// The ClusterSet of the namespace: (name, leaders[0].clusterID).
    pub clusterset: Option<(String, String)>,
    /// Other ServiceAccounts already bound.
    pub bound: Bindings,
}

fn announce_fields(v: &MemberClusterAnnounce) -> (&str, &str, &str) {
    (
        s(&v.spec.cluster_id),
        s(&v.spec.cluster_set_id),
        s(&v.spec.leader_cluster_id),
    )
}

fn stamp(v: &MemberClusterAnnounce) -> &str {
    v.annotations()
        .get(annotations::ANNOUNCED_BY)
        .map_or("", String::as_str)
}

/// An update may not change an announce's IDs, nor (but for the controller) who created it.
fn announce_update(
    caller: &Caller,
    old: &MemberClusterAnnounce,
    new: &MemberClusterAnnounce,
) -> Option<Verdict> {
    let (o, n) = (announce_fields(old), announce_fields(new));
    for (field, was, is) in [
        ("clusterID", o.0, n.0),
        ("clusterSetID", o.1, n.1),
        ("leaderClusterID", o.2, n.2),
    ] {
        if was != is {
            return Some(deny(format!(
                "the field '{field}' of a MemberClusterAnnounce is immutable ({was:?} -> {is:?})"
            )));
        }
    }
    if stamp(old) != stamp(new) && *caller != Caller::Controller {
        return Some(deny(format!(
            "the annotation {} records who created the announce; it cannot be changed",
            annotations::ANNOUNCED_BY
        )));
    }
    None
}

/// A new announce must name this leader's ClusterSet and cluster ID, carry its cluster's name,
/// and not claim a cluster ID that differs from a bound one only by a '-' suffix.
fn announce_create(new: &MemberClusterAnnounce, claimed: &str, facts: &AnnounceFacts) -> Verdict {
    let Some((set, leader)) = &facts.clusterset else {
        return deny(format!(
            "there is no ClusterSet in the leader namespace {}; create it first",
            facts.leader_ns
        ));
    };
    let fields = announce_fields(new);
    if fields.1 != set {
        return deny(format!(
            "clusterSetID {:?} is not the ClusterSet of this leader ({set:?})",
            fields.1
        ));
    }
    if fields.2 != leader {
        return deny(format!(
            "leaderClusterID {:?} is not this leader's cluster ID ({leader:?})",
            fields.2
        ));
    }
    let expected = names::member_announce(claimed);
    let name = object_name(new);
    if name != expected {
        return deny(format!(
            "a MemberClusterAnnounce of cluster {claimed:?} must be named {expected:?}, not {name:?}"
        ));
    }
    if let Some((other, id)) = facts.bound.iter().find(|(_, id)| prefix_pair(id, claimed)) {
        return deny(format!(
            "cluster ID {claimed:?} and cluster ID {id:?} (ServiceAccount {other}) differ only by a '-' suffix, which makes the names of their exports ambiguous; choose another cluster ID"
        ));
    }
    Allow
}

pub fn member_announce(
    op: Op,
    caller: &Caller,
    old: Option<&MemberClusterAnnounce>,
    new: Option<&MemberClusterAnnounce>,
    facts: &AnnounceFacts,
) -> Verdict {
    if op == Op::Update
        && let (Some(old), Some(new)) = (old, new)
        && let Some(denied) = announce_update(caller, old, new)
    {
        return denied;
    }
    let (ns, sa) = match caller {
        Caller::Controller => return Allow,
        Caller::Admin | Caller::User(_) => {
            return if op == Op::Delete {
                Allow
            } else {
                deny(
                    "MemberClusterAnnounces are written by member controllers with their ServiceAccount's token, not by users",
                )
            };
        }
        Caller::ServiceAccount { namespace, name } => (namespace, name),
    };
    let who = format!("{ns}/{sa}");
    if ns != facts.leader_ns {
        return if op == Op::Delete {
            Allow
        } else {
            deny(format!(
                "ServiceAccount {who} is not in the leader namespace {}; members use a ServiceAccount of that namespace",
                facts.leader_ns
            ))
        };
    }
    if !facts.account.found {
        return if op == Op::Delete {
            Allow
        } else {
            deny(format!("ServiceAccount {who} does not exist"))
        };
    }
    let target = match op {
        Op::Create => new,
        Op::Update | Op::Delete => old,
    };
    let claimed = target.map(announce_fields).unwrap_or_default().0;
    if claimed.is_empty() {
        return deny("clusterID must not be empty");
    }
    match facts.account.cluster_id.as_deref() {
        Some("") => {
            return deny(format!(
                "ServiceAccount {who} has an empty {} annotation",
                annotations::CLUSTER_ID
            ));
        }
        Some(id) if id != claimed => {
            return deny(format!(
                "ServiceAccount {who} speaks for cluster {id:?}; it may not {} the announce of cluster {claimed:?}",
                match op {
                    Op::Create => "create",
                    Op::Update => "change",
                    Op::Delete => "delete",
                }
            ));
        }
        Some(_) => {}
        None => {
            // Not bound yet: the guides' ServiceAccount. It may create the announce of a cluster
            // ID nobody holds, and refresh or delete the announce it created (stamped) until the
            // leader has bound it; nothing else.
            if let Some((other, _)) = facts.bound.iter().find(|(_, id)| id == claimed) {
                return deny(format!(
                    "cluster ID {claimed:?} is already bound to ServiceAccount {other}; ServiceAccount {who} may not announce it"
                ));
            }
            if op != Op::Create && target.map(stamp) != Some(sa.as_str()) {
                return deny(format!(
                    "ServiceAccount {who} is not bound to a cluster ID ({}) and did not create this announce",
                    annotations::CLUSTER_ID
                ));
            }
        }
    }
    if op == Op::Create {
        return match new {
            Some(new) => announce_create(new, claimed, facts),
            None => deny("the request carries no object"),
        };
    }
    Allow
}

/// The JSON pointer `/metadata/<field>[/<key>]` (the key escaped as RFC 6901 asks).
fn metadata_path(field: &str, key: Option<&str>) -> PointerBuf {
    PointerBuf::from_tokens(["metadata", field].into_iter().chain(key).map(Token::new))
}

fn add(path: PointerBuf, value: impl Into<Value>) -> PatchOperation {
    PatchOperation::Add(AddOperation {
        path,
        value: value.into(),
    })
}

/// The mutating webhook on a new announce: the creator's name in `announced-by` (a ServiceAccount
/// of the leader namespace), or no such annotation (anyone else). JSON-patch operations.
pub fn stamp_announce(
    caller: &Caller,
    leader_ns: &str,
    mca: &MemberClusterAnnounce,
) -> Vec<PatchOperation> {
    let want = match caller {
        Caller::ServiceAccount { namespace, name } if namespace == leader_ns => Some(name.as_str()),
        _ => None,
    };
    let have = mca
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotations::ANNOUNCED_BY))
        .map(String::as_str);
    if have == want {
        return Vec::new();
    }
    let path = metadata_path("annotations", Some(annotations::ANNOUNCED_BY));
    match want {
        Some(sa) => {
            let mut ops = Vec::new();
            if mca.metadata.annotations.is_none() {
                ops.push(add(
                    metadata_path("annotations", None),
                    serde_json::Map::new(),
                ));
            }
            ops.push(add(path, sa));
            ops
        }
        None => vec![PatchOperation::Remove(RemoveOperation { path })],
    }
}

// ---------------------------------------------------------------------------------------------
// ResourceExport (leader)

pub const MEMBER_KINDS: [&str; 4] = ["Service", "Endpoints", "ClusterInfo", "LabelIdentity"];

pub fn resource_export(
    op: Op,
    caller: &Caller,
    leader_ns: &str,
    account: &Account,
    old: Option<&ResourceExport>,
    new: Option<&ResourceExport>,
) -> Verdict {
    let (ns, sa) = match caller {
        // Administrators export ACNPs by hand; the controller manages finalizers.
        Caller::Controller | Caller::Admin | Caller::User(_) => return Allow,
        Caller::ServiceAccount { namespace, name } => (namespace, name),
    };
    if ns != leader_ns {
        // Not a member identity (members use ServiceAccounts of the leader namespace).
        return Allow;
    }
    let who = format!("{ns}/{sa}");
    if !account.found {
        let terminating = old.is_some_and(|o| o.metadata.deletion_timestamp.is_some());
        return if op == Op::Delete && terminating {
            Allow
        } else {
            deny(format!("ServiceAccount {who} does not exist"))
        };
    }
    let id = match account.cluster_id.as_deref() {
        None => {
            return deny(format!(
                "ServiceAccount {who} is not bound to a cluster ID yet: a member announces itself (MemberClusterAnnounce) before it exports"
            ));
        }
        Some("") => {
            return deny(format!(
                "ServiceAccount {who} has an empty {} annotation",
                annotations::CLUSTER_ID
            ));
        }
        Some(id) => id,
    };
    if let Some(old) = old {
        let owner = s(&old.spec.cluster_id);
        if owner != id {
            return deny(format!(
                "ServiceAccount {who} speaks for cluster {id:?}; it may not change the ResourceExport {} of cluster {owner:?}",
                object_name(old)
            ));
        }
    }
    if op == Op::Delete {
        return Allow;
    }
    let Some(new) = new else {
        return deny("the request carries no object");
    };
    if let Some(old) = old {
        let has = |v: &ResourceExport, f: &str| v.finalizers().iter().any(|x| x == f);
        for f in [
            finalizers::RESOURCE_EXPORT,
            finalizers::RESOURCE_EXPORT_LEGACY,
        ] {
            if has(old, f) && !has(new, f) {
                return deny(format!(
                    "the finalizer {f} is the leader's; a member may not remove it"
                ));
            }
        }
        let kind = s(&old.spec.kind);
        if kind == kinds::SERVICE || kind == kinds::ENDPOINTS {
            let tuple = |v: &ResourceExport| {
                (
                    s(&v.spec.namespace).to_owned(),
                    s(&v.spec.name).to_owned(),
                    s(&v.spec.kind).to_owned(),
                )
            };
            if tuple(old) != tuple(new) {
                return deny(
                    "spec.namespace, spec.name and spec.kind of a Service or Endpoints export are immutable",
                );
            }
        }
    }
    check_export(&who, id, new)
}

fn check_export(who: &str, id: &str, re: &ResourceExport) -> Verdict {
    let kind = s(&re.spec.kind);
    if !MEMBER_KINDS.contains(&kind) {
        return deny(format!(
            "a member may export kinds {MEMBER_KINDS:?} only, not {kind:?}"
        ));
    }
    let spec_id = s(&re.spec.cluster_id);
    if spec_id != id {
        return deny(format!(
            "ServiceAccount {who} speaks for cluster {id:?}; spec.clusterID {spec_id:?} is spoofed"
        ));
    }
    let source = label(re, labels::SOURCE_CLUSTER_ID);
    if source != id {
        return deny(format!(
            "ServiceAccount {who} speaks for cluster {id:?}; label {} = {source:?} is spoofed",
            labels::SOURCE_CLUSTER_ID
        ));
    }
    let source_kind = label(re, labels::SOURCE_KIND);
    if source_kind != kind {
        return deny(format!(
            "label {} = {source_kind:?} differs from spec.kind {kind:?}",
            labels::SOURCE_KIND
        ));
    }
    let name = object_name(re);
    let expected = match kind {
        "Service" | "Endpoints" => {
            let (payload, carried) = if kind == kinds::SERVICE {
                ("service", re.spec.service.is_some())
            } else {
                ("endpoints", re.spec.endpoints.is_some())
            };
            if !carried {
                return deny(format!("a {kind} export needs spec.{payload}"));
            }
            let (ns, n) = (s(&re.spec.namespace), s(&re.spec.name));
            for (what, v) in [("spec.namespace", ns), ("spec.name", n)] {
                if !dns1123_label(v) {
                    return deny(format!("{what} {v:?} is not a DNS-1123 label"));
                }
            }
            for (key, v) in [(labels::SOURCE_NAMESPACE, ns), (labels::SOURCE_NAME, n)] {
                if label(re, key) != v {
                    return deny(format!(
                        "label {key} = {:?} differs from the exported object ({v:?})",
                        label(re, key)
                    ));
                }
            }
            names::resource_export(id, ns, n, kind)
        }
        "ClusterInfo" => {
            let info_id = re
                .spec
                .cluster_info
                .as_ref()
                .map_or("", |i| s(&i.cluster_id));
            if info_id != id {
                return deny(format!(
                    "ServiceAccount {who} speaks for cluster {id:?}; spec.clusterInfo.clusterID {info_id:?} is spoofed"
                ));
            }
            names::cluster_info_export(id)
        }
        _ => {
            // LabelIdentity: `<clusterID>-<hash>`.
            let label = re
                .spec
                .label_identity
                .as_ref()
                .map_or("", |l| s(&l.normalized_label));
            if label.is_empty() {
                return deny("a LabelIdentity export needs spec.labelIdentity.normalizedLabel");
            }
            let hash = mc_api::labelidentity::label_hash(label);
            let expected = names::label_identity_export(id, &hash);
            if name == expected {
                return Allow;
            }
            return deny(format!(
                "a LabelIdentity export of cluster {id:?} is named {id}-<first 16 hex digits of the label's SHA-1>: {expected:?}, not {name:?}"
            ));
        }
    };
    if name != expected {
        return deny(format!(
            "this ResourceExport must be named {expected:?}, not {name:?}"
        ));
    }
    Allow
}

/// The mutating webhook: an ACNP export gets its source labels and the leader's finalizer.
/// Returns JSON-patch operations (empty: nothing to change).
pub fn mutate_resource_export(re: &ResourceExport) -> Vec<PatchOperation> {
    if re.spec.acnp().is_none() {
        return Vec::new();
    }
    let mut ops = Vec::new();
    let want = [
        (labels::SOURCE_NAME, s(&re.spec.name).to_owned()),
        (labels::SOURCE_NAMESPACE, String::new()),
        (labels::SOURCE_KIND, kinds::ACNP.to_owned()),
    ];
    let have = re.metadata.labels.as_ref();
    if have.is_none() {
        ops.push(add(metadata_path("labels", None), serde_json::Map::new()));
    }
    for (k, v) in want {
        if have.and_then(|l| l.get(k)) != Some(&v) {
            ops.push(add(metadata_path("labels", Some(k)), v));
        }
    }
    let deleting = re.metadata.deletion_timestamp.is_some();
    let fins = re.metadata.finalizers.as_ref();
    let has = fins.is_some_and(|a| a.iter().any(|f| f == finalizers::RESOURCE_EXPORT));
    if !deleting && !has {
        if fins.is_none() {
            ops.push(add(
                metadata_path("finalizers", None),
                vec![finalizers::RESOURCE_EXPORT],
            ));
        } else {
            ops.push(add(
                metadata_path("finalizers", Some("-")),
                finalizers::RESOURCE_EXPORT,
            ));
        }
    }
    ops
}

// ---------------------------------------------------------------------------------------------
// Gateway (member)

/// The user-info extra the API server gives a Pod's ServiceAccount token: the Node the Pod runs
/// on (Kubernetes 1.30 and later).
pub const NODE_NAME_EXTRA: &str = "authentication.kubernetes.io/node-name";

/// Only the controller (which elects the gateway) and the agents write Gateways; cluster
/// administrators may repair them by hand. An agent (its ServiceAccount is every Node's) only
/// publishes its WireGuard key in a Gateway the controller made: it may change `wireGuard` and
/// nothing else, so a Node cannot redirect its cluster's cross-cluster traffic by rewriting the
/// gateway's addresses or CIDRs; and where its token names its Node (`node`, from
/// [`NODE_NAME_EXTRA`]), only in its own Node's Gateway (named after the Node), so another
/// Node cannot put its key in the gateway's place. (`status` is a subresource this webhook
/// does not see.)
pub fn gateway(
    caller: &Caller,
    op: Op,
    old: Option<&Gateway>,
    new: Option<&Gateway>,
    node: Option<&str>,
) -> Verdict {
    match caller {
        Caller::Controller | Caller::Admin => Allow,
        Caller::ServiceAccount { name, .. } if name == "antrea-mc-controller" => Allow,
        Caller::ServiceAccount { name, .. } if name == "antrea-agent" || name == "strait-agent" => {
            let (Op::Update, Some(old), Some(new)) = (op, old, new) else {
                return deny(format!(
                    "the agents (ServiceAccount {name}) only publish their WireGuard key in a Gateway the multi-cluster controller made; they do not create or delete Gateways"
                ));
            };
            let gateway = object_name(new);
            if let Some(node) = node
                && node != gateway
            {
                return deny(format!(
                    "the agent on Node {node} may publish only its own Node's WireGuard key, not in Gateway {gateway}"
                ));
            }
            let key = |g: &Gateway| {
                g.spec
                    .wire_guard
                    .as_ref()
                    .and_then(|w| w.public_key.clone())
            };
            if old.spec.wire_guard.is_some() && key(new).is_none() {
                return deny(format!(
                    "the agents (ServiceAccount {name}) may not remove a Gateway's WireGuard key"
                ));
            }
            let changed = changed_fields(old, new, &["wireGuard", "status"]);
            if changed.is_empty() {
                Allow
            } else {
                deny(format!(
                    "the agents (ServiceAccount {name}) may change only wireGuard in a Gateway, not {}",
                    changed.join(", ")
                ))
            }
        }
        Caller::ServiceAccount { namespace, name } => deny(format!(
            "Gateways are written by the multi-cluster controller and the agents only, not by ServiceAccount {namespace}/{name}"
        )),
        Caller::User(u) => deny(format!(
            "Gateways are written by the multi-cluster controller and the agents only, not by user {u}"
        )),
    }
}

/// The top-level fields (and `metadata.labels`, `metadata.annotations`, ...) that differ
/// between `old` and `new`, other than `allowed` and the metadata the API server keeps
/// (resourceVersion, managedFields, generation, ...). Over every top-level field of the Gateway
/// as JSON, on purpose: a field added to the type later is covered without a change here, so the
/// agents never gain a field to write by omission. (The CRD is generated from the type and
/// drift-checked, and its schema prunes unknown fields, so the type holds all a Gateway can.)
fn changed_fields(old: &Gateway, new: &Gateway, allowed: &[&str]) -> Vec<String> {
    const SERVER_METADATA: [&str; 6] = [
        "resourceVersion",
        "managedFields",
        "generation",
        "creationTimestamp",
        "uid",
        "selfLink",
    ];
    let empty = serde_json::Map::new();
    let fields = |g: &Gateway| match serde_json::to_value(g) {
        Ok(Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    };
    let (old, new) = (fields(old), fields(new));
    let mut changed: Vec<String> = Vec::new();
    let keys: std::collections::BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    for key in keys {
        if allowed.contains(&key.as_str()) || key == "apiVersion" || key == "kind" {
            continue;
        }
        if key == "metadata" {
            let meta = |m: Option<&Value>| m.and_then(Value::as_object).unwrap_or(&empty).clone();
            let (om, nm) = (meta(old.get(key)), meta(new.get(key)));
            let mkeys: std::collections::BTreeSet<&String> = om.keys().chain(nm.keys()).collect();
            for m in mkeys {
                if !SERVER_METADATA.contains(&m.as_str()) && om.get(m) != nm.get(m) {
                    changed.push(format!("metadata.{m}"));
                }
            }
            continue;
        }
        if old.get(key) != new.get(key) {
            changed.push(key.clone());
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::DeserializeOwned;
    use serde_json::json;

    // The rules as the webhook calls them, with the request's objects given as JSON (the wire
    // form): each is read as the webhook reads it, so these tests also cover that reading.

    fn typed<K: DeserializeOwned>(v: &Value) -> K {
        serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{v}: {e}"))
    }

    fn clusterset(
        op: Op,
        old: Option<&Value>,
        new: Option<&Value>,
        others: &[String],
        announces: usize,
    ) -> Verdict {
        let (old, new): (Option<ClusterSet>, _) = (old.map(typed), new.map(typed));
        super::clusterset(op, old.as_ref(), new.as_ref(), others, announces)
    }

    fn member_announce(
        op: Op,
        caller: &Caller,
        old: Option<&Value>,
        new: Option<&Value>,
        facts: &AnnounceFacts,
    ) -> Verdict {
        let (old, new): (Option<MemberClusterAnnounce>, _) = (old.map(typed), new.map(typed));
        super::member_announce(op, caller, old.as_ref(), new.as_ref(), facts)
    }

    fn resource_export(
        op: Op,
        caller: &Caller,
        leader_ns: &str,
        account: &Account,
        old: Option<&Value>,
        new: Option<&Value>,
    ) -> Verdict {
        let (old, new): (Option<ResourceExport>, _) = (old.map(typed), new.map(typed));
        super::resource_export(op, caller, leader_ns, account, old.as_ref(), new.as_ref())
    }

    fn gateway(
        caller: &Caller,
        op: Op,
        old: Option<&Value>,
        new: Option<&Value>,
        node: Option<&str>,
    ) -> Verdict {
        let (old, new): (Option<Gateway>, _) = (old.map(typed), new.map(typed));
        super::gateway(caller, op, old.as_ref(), new.as_ref(), node)
    }

    /// JSON-patch operations as JSON.
    fn ops(ops: Vec<PatchOperation>) -> Vec<Value> {
        ops.iter()
            .map(|o| serde_json::to_value(o).unwrap())
            .collect()
    }

    fn stamp_announce(caller: &Caller, leader_ns: &str, mca: &Value) -> Vec<Value> {
        ops(super::stamp_announce(caller, leader_ns, &typed(mca)))
    }

    fn mutate_resource_export(re: &Value) -> Vec<Value> {
        ops(super::mutate_resource_export(&typed(re)))
    }

    const NS: &str = "antrea-multicluster";

    fn sa(name: &str) -> Caller {
        Caller::ServiceAccount {
            namespace: NS.into(),
            name: name.into(),
        }
    }

    fn bound(id: &str) -> Account {
        Account {
            found: true,
            cluster_id: Some(id.into()),
        }
    }

    fn unbound() -> Account {
        Account {
            found: true,
            cluster_id: None,
        }
    }

    fn mca(id: &str) -> Value {
        json!({"metadata": {"name": format!("member-announce-from-{id}")},
               "clusterID": id, "clusterSetID": "set", "leaderClusterID": "north"})
    }

    fn facts(account: Account) -> AnnounceFacts<'static> {
        AnnounceFacts {
            leader_ns: NS,
            account,
            clusterset: Some(("set".into(), "north".into())),
            bound: vec![("member-west".into(), "west".into())],
        }
    }

    fn denied(v: Verdict, needle: &str) {
        match v {
            Deny(m) => assert!(m.contains(needle), "{m:?} lacks {needle:?}"),
            other => panic!("expected a denial mentioning {needle:?}, got {other:?}"),
        }
    }

    #[test]
    fn callers_are_classified() {
        let g = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            Caller::classify("system:serviceaccount:a:b", &g(&[]), None),
            Caller::ServiceAccount {
                namespace: "a".into(),
                name: "b".into()
            }
        );
        assert_eq!(
            Caller::classify("kubernetes-admin", &g(&["system:masters"]), None),
            Caller::Admin
        );
        assert_eq!(
            Caller::classify("me", &g(&["system:masters"]), Some("me")),
            Caller::Controller
        );
        assert_eq!(
            Caller::classify("bob", &g(&["devs"]), Some("me")),
            Caller::User("bob".into())
        );
    }

    #[test]
    fn announce_create() {
        let east = sa("member-east");
        let new = mca("east");
        // Bound to its own ID, or not bound yet (the guides' ServiceAccount): allowed.
        for account in [bound("east"), unbound()] {
            assert_eq!(
                member_announce(Op::Create, &east, None, Some(&new), &facts(account)),
                Allow
            );
        }
        // Spoofing a cluster bound elsewhere, bound or not.
        denied(
            member_announce(
                Op::Create,
                &east,
                None,
                Some(&mca("west")),
                &facts(unbound()),
            ),
            "already bound to ServiceAccount member-west",
        );
        denied(
            member_announce(
                Op::Create,
                &east,
                None,
                Some(&mca("west")),
                &facts(bound("east")),
            ),
            "speaks for cluster \"east\"",
        );
        // Wrong ClusterSet, wrong leader, wrong name, no ClusterSet.
        let mut v = new.clone();
        v["clusterSetID"] = json!("other");
        denied(
            member_announce(Op::Create, &east, None, Some(&v), &facts(bound("east"))),
            "clusterSetID",
        );
        let mut v = new.clone();
        v["leaderClusterID"] = json!("south");
        denied(
            member_announce(Op::Create, &east, None, Some(&v), &facts(bound("east"))),
            "leaderClusterID",
        );
        let mut v = new.clone();
        v["metadata"]["name"] = json!("hello");
        denied(
            member_announce(Op::Create, &east, None, Some(&v), &facts(bound("east"))),
            "must be named \"member-announce-from-east\"",
        );
        let mut f = facts(bound("east"));
        f.clusterset = None;
        denied(
            member_announce(Op::Create, &east, None, Some(&new), &f),
            "no ClusterSet",
        );
        // Empty annotation, missing ServiceAccount, other namespace, users.
        denied(
            member_announce(Op::Create, &east, None, Some(&new), &facts(bound(""))),
            "empty",
        );
        denied(
            member_announce(
                Op::Create,
                &east,
                None,
                Some(&new),
                &facts(Account::default()),
            ),
            "does not exist",
        );
        let other = Caller::ServiceAccount {
            namespace: "default".into(),
            name: "member-east".into(),
        };
        denied(
            member_announce(Op::Create, &other, None, Some(&new), &facts(unbound())),
            "not in the leader namespace",
        );
        denied(
            member_announce(
                Op::Create,
                &Caller::Admin,
                None,
                Some(&new),
                &facts(unbound()),
            ),
            "not by users",
        );
        // IDs that differ by a dash suffix, both ways round.
        denied(
            member_announce(
                Op::Create,
                &east,
                None,
                Some(&mca("west-1")),
                &facts(unbound()),
            ),
            "differ only by a '-' suffix",
        );
        let mut f = facts(unbound());
        f.bound = vec![("member-x".into(), "east-1".into())];
        denied(
            member_announce(Op::Create, &east, None, Some(&new), &f),
            "differ only by a '-' suffix",
        );
    }

    fn stamped(id: &str, by: &str) -> Value {
        let mut v = mca(id);
        v["metadata"]["annotations"] = json!({ANNOUNCED_BY_KEY: by});
        v
    }

    const ANNOUNCED_BY_KEY: &str = annotations::ANNOUNCED_BY;

    #[test]
    fn announce_update_and_delete() {
        let east = sa("member-east");
        let old = mca("east");
        let mut beat = old.clone();
        beat["metadata"]["annotations"] = json!({"touch-ts": "now"});
        assert_eq!(
            member_announce(
                Op::Update,
                &east,
                Some(&old),
                Some(&beat),
                &facts(bound("east"))
            ),
            Allow
        );
        // Not bound yet: only the announce it created (the stamp says so) may be refreshed.
        let mine = stamped("east", "member-east");
        let mut mine_beat = mine.clone();
        mine_beat["metadata"]["annotations"]["touch-ts"] = json!("now");
        assert_eq!(
            member_announce(
                Op::Update,
                &east,
                Some(&mine),
                Some(&mine_beat),
                &facts(unbound())
            ),
            Allow
        );
        // ... not an announce made by someone else, nor one made before the stamp existed: an
        // unbound token cannot take over a cluster ID by touching its announce.
        for other in [stamped("south", "member-south"), mca("south")] {
            denied(
                member_announce(
                    Op::Update,
                    &east,
                    Some(&other),
                    Some(&other),
                    &facts(unbound()),
                ),
                "did not create this announce",
            );
            denied(
                member_announce(Op::Delete, &east, Some(&other), None, &facts(unbound())),
                "did not create this announce",
            );
        }
        // The stamp cannot be forged or changed, except by the controller.
        let mut forged = mine.clone();
        forged["metadata"]["annotations"][ANNOUNCED_BY_KEY] = json!("member-west");
        denied(
            member_announce(
                Op::Update,
                &east,
                Some(&mine),
                Some(&forged),
                &facts(bound("east")),
            ),
            "cannot be changed",
        );
        for field in ["clusterID", "clusterSetID", "leaderClusterID"] {
            let mut v = old.clone();
            v[field] = json!("changed");
            denied(
                member_announce(
                    Op::Update,
                    &Caller::Controller,
                    Some(&old),
                    Some(&v),
                    &facts(bound("east")),
                ),
                "immutable",
            );
        }
    }

    #[test]
    fn announce_of_another_cluster_and_deletes() {
        let east = sa("member-east");
        let old = mca("east");
        let west = mca("west");
        denied(
            member_announce(
                Op::Update,
                &east,
                Some(&west),
                Some(&west),
                &facts(bound("east")),
            ),
            "speaks for cluster",
        );
        denied(
            member_announce(Op::Delete, &east, Some(&west), None, &facts(bound("east"))),
            "may not delete",
        );
        assert_eq!(
            member_announce(Op::Delete, &east, Some(&old), None, &facts(bound("east"))),
            Allow
        );
        // Administrators, the controller, gone ServiceAccounts and other namespaces may delete.
        for caller in [Caller::Admin, Caller::Controller, Caller::User("x".into())] {
            assert_eq!(
                member_announce(Op::Delete, &caller, Some(&west), None, &facts(unbound())),
                Allow
            );
        }
        assert_eq!(
            member_announce(
                Op::Delete,
                &east,
                Some(&west),
                None,
                &facts(Account::default())
            ),
            Allow
        );
        assert_eq!(
            member_announce(
                Op::Update,
                &Caller::Controller,
                Some(&west),
                Some(&west),
                &facts(unbound())
            ),
            Allow
        );
    }

    #[test]
    fn announces_are_stamped_with_their_creator() {
        let apply = |v: &Value, ops: Vec<Value>| {
            let mut v = v.clone();
            json_patch::patch(
                &mut v,
                &serde_json::from_value::<json_patch::Patch>(Value::Array(ops)).unwrap(),
            )
            .unwrap();
            v
        };
        let east = sa("member-east");
        let v = apply(&mca("east"), stamp_announce(&east, NS, &mca("east")));
        assert_eq!(
            v["metadata"]["annotations"][ANNOUNCED_BY_KEY],
            "member-east"
        );
        assert!(stamp_announce(&east, NS, &v).is_empty());
        // A stamp someone wrote themselves is replaced, or removed for non-members.
        let forged = stamped("east", "member-west");
        let v = apply(&forged, stamp_announce(&east, NS, &forged));
        assert_eq!(
            v["metadata"]["annotations"][ANNOUNCED_BY_KEY],
            "member-east"
        );
        let v = apply(&forged, stamp_announce(&Caller::Admin, NS, &forged));
        assert!(v["metadata"]["annotations"][ANNOUNCED_BY_KEY].is_null());
        assert!(stamp_announce(&Caller::Admin, NS, &mca("east")).is_empty());
    }

    fn svc_export(id: &str, kind: &str) -> Value {
        json!({
            "metadata": {
                "name": names::resource_export(id, "default", "nginx", kind),
                "labels": {"sourceClusterID": id, "sourceKind": kind,
                           "sourceNamespace": "default", "sourceName": "nginx"}
            },
            "spec": {"clusterID": id, "kind": kind, "namespace": "default", "name": "nginx",
                     "service": {"serviceSpec": {}}, "endpoints": {"subsets": []}}
        })
    }

    fn info_export(id: &str) -> Value {
        json!({
            "metadata": {"name": format!("{id}-clusterinfo"),
                         "labels": {"sourceClusterID": id, "sourceKind": "ClusterInfo"}},
            "spec": {"clusterID": id, "kind": "ClusterInfo", "name": id, "namespace": "kube-system",
                     "clusterInfo": {"clusterID": id}}
        })
    }

    #[test]
    fn export_rules() {
        let east = sa("member-east");
        let me = bound("east");
        let re = |op, old: Option<&Value>, new: Option<&Value>| {
            resource_export(op, &east, NS, &me, old, new)
        };
        for kind in ["Service", "Endpoints"] {
            let v = svc_export("east", kind);
            assert_eq!(re(Op::Create, None, Some(&v)), Allow, "{kind}");
            assert_eq!(re(Op::Update, Some(&v), Some(&v)), Allow, "{kind}");
            assert_eq!(re(Op::Delete, Some(&v), None), Allow, "{kind}");
        }
        let info = info_export("east");
        assert_eq!(re(Op::Create, None, Some(&info)), Allow);
        // A peer's exports.
        let west = svc_export("west", "Service");
        denied(re(Op::Update, Some(&west), Some(&west)), "may not change");
        denied(re(Op::Delete, Some(&west), None), "may not change");
        denied(re(Op::Create, None, Some(&west)), "spec.clusterID");
        // Spoofed label, kind label, name, ClusterInfo.
        let mut v = svc_export("east", "Service");
        v["metadata"]["labels"]["sourceClusterID"] = json!("west");
        denied(re(Op::Create, None, Some(&v)), "sourceClusterID");
        let mut v = svc_export("east", "Service");
        v["metadata"]["labels"]["sourceKind"] = json!("Endpoints");
        denied(re(Op::Create, None, Some(&v)), "sourceKind");
        let mut v = svc_export("east", "Service");
        v["metadata"]["name"] = json!("west-default-nginx-service");
        denied(re(Op::Create, None, Some(&v)), "must be named");
        let mut v = svc_export("east", "Service");
        v["metadata"]["labels"]["sourceName"] = json!("other");
        denied(re(Op::Create, None, Some(&v)), "sourceName");
        let mut v = info_export("east");
        v["spec"]["clusterInfo"]["clusterID"] = json!("west");
        denied(re(Op::Create, None, Some(&v)), "clusterInfo.clusterID");
        // Kinds a member may not export, payloads missing, bad names.
        let mut v = svc_export("east", "Service");
        v["spec"]["kind"] = json!("AntreaClusterNetworkPolicy");
        v["metadata"]["labels"]["sourceKind"] = json!("AntreaClusterNetworkPolicy");
        denied(re(Op::Create, None, Some(&v)), "may export kinds");
        let mut v = svc_export("east", "Service");
        v["spec"]["service"] = Value::Null;
        denied(re(Op::Create, None, Some(&v)), "needs spec.service");
        let mut v = svc_export("east", "Endpoints");
        v["spec"]["endpoints"] = Value::Null;
        denied(re(Op::Create, None, Some(&v)), "needs spec.endpoints");
        let mut v = svc_export("east", "Service");
        v["spec"]["name"] = json!("Bad_Name");
        v["metadata"]["labels"]["sourceName"] = json!("Bad_Name");
        denied(re(Op::Create, None, Some(&v)), "DNS-1123");
        // Immutable tuple; the leader's finalizer stays.
        let old = svc_export("east", "Service");
        let mut v = old.clone();
        v["spec"]["name"] = json!("other");
        denied(re(Op::Update, Some(&old), Some(&v)), "immutable");
        let mut old = svc_export("east", "Service");
        old["metadata"]["finalizers"] = json!([finalizers::RESOURCE_EXPORT]);
        denied(
            re(Op::Update, Some(&old), Some(&svc_export("east", "Service"))),
            "finalizer",
        );
        // Identity problems.
        let v = svc_export("east", "Service");
        denied(
            resource_export(Op::Create, &east, NS, &unbound(), None, Some(&v)),
            "not bound to a cluster ID yet",
        );
        denied(
            resource_export(Op::Create, &east, NS, &bound(""), None, Some(&v)),
            "empty",
        );
        denied(
            resource_export(Op::Create, &east, NS, &Account::default(), None, Some(&v)),
            "does not exist",
        );
        let mut dying = v.clone();
        dying["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert_eq!(
            resource_export(
                Op::Delete,
                &east,
                NS,
                &Account::default(),
                Some(&dying),
                None
            ),
            Allow
        );
        // Administrators (ACNP exports), other namespaces and the controller are trusted.
        let mut acnp = svc_export("", "Service");
        acnp["spec"]["kind"] = json!("AntreaClusterNetworkPolicy");
        for caller in [
            Caller::Admin,
            Caller::User("bob".into()),
            Caller::Controller,
            Caller::ServiceAccount {
                namespace: "default".into(),
                name: "ci".into(),
            },
        ] {
            assert_eq!(
                resource_export(Op::Create, &caller, NS, &unbound(), None, Some(&acnp)),
                Allow
            );
        }
    }

    #[test]
    fn label_identity_names() {
        let me = bound("east");
        let v = json!({
            "metadata": {"name": "east-1e5106b3b89537a1",
                         "labels": {"sourceClusterID": "east", "sourceKind": "LabelIdentity"}},
            "spec": {"clusterID": "east", "kind": "LabelIdentity",
                     "labelIdentity": {"normalizedLabel": "ns:a=b&pod:c=d"}}
        });
        let east = sa("member-east");
        assert_eq!(
            resource_export(Op::Create, &east, NS, &me, None, Some(&v)),
            Allow
        );
        // Another cluster's name, or a hash that is not the label's.
        for name in ["west-1e5106b3b89537a1", "east-0123456789abcdef"] {
            let mut bad = v.clone();
            bad["metadata"]["name"] = json!(name);
            denied(
                resource_export(Op::Create, &east, NS, &me, None, Some(&bad)),
                "\"east-1e5106b3b89537a1\", not",
            );
        }
    }

    #[test]
    fn clusterset_rules() {
        let cs = |id: &str, leader: &str| {
            json!({"metadata": {"name": "set"},
                   "spec": {"clusterID": id, "leaders": [{"clusterID": leader}]}})
        };
        assert_eq!(
            clusterset(Op::Create, None, Some(&cs("a", "l")), &[], 0),
            Allow
        );
        denied(
            clusterset(Op::Create, None, Some(&cs("a", "l")), &["other".into()], 0),
            "multiple ClusterSets",
        );
        assert_eq!(
            clusterset(Op::Update, Some(&cs("", "l")), Some(&cs("a", "l")), &[], 0),
            Allow
        );
        denied(
            clusterset(Op::Update, Some(&cs("a", "l")), Some(&cs("b", "l")), &[], 0),
            "'clusterID' is immutable",
        );
        denied(
            clusterset(Op::Update, Some(&cs("a", "l")), Some(&cs("a", "m")), &[], 0),
            "'leaders[0].clusterID' is immutable",
        );
        denied(
            clusterset(Op::Delete, Some(&cs("a", "l")), None, &[], 2),
            "still member clusters",
        );
        assert_eq!(
            clusterset(Op::Delete, Some(&cs("a", "l")), None, &[], 0),
            Allow
        );
    }

    #[test]
    fn acnp_exports_are_labelled() {
        let v = json!({"metadata": {"name": "x"},
                       "spec": {"kind": "AntreaClusterNetworkPolicy", "name": "strict",
                                "clusterNetworkPolicy": {}}});
        let ops = mutate_resource_export(&v);
        let mut patched = v.clone();
        json_patch::patch(
            &mut patched,
            &serde_json::from_value::<json_patch::Patch>(Value::Array(ops)).unwrap(),
        )
        .unwrap();
        assert_eq!(patched["metadata"]["labels"]["sourceName"], "strict");
        assert_eq!(patched["metadata"]["labels"]["sourceNamespace"], "");
        assert_eq!(
            patched["metadata"]["labels"]["sourceKind"],
            "AntreaClusterNetworkPolicy"
        );
        assert_eq!(
            patched["metadata"]["finalizers"],
            json!([finalizers::RESOURCE_EXPORT])
        );
        // Applying again changes nothing; a Service export is left alone.
        assert!(mutate_resource_export(&patched).is_empty());
        assert!(mutate_resource_export(&svc_export("east", "Service")).is_empty());
    }

    #[test]
    fn gateway_writers() {
        let gw = json!({"apiVersion": "multicluster.crd.antrea.io/v1alpha1", "kind": "Gateway",
            "metadata": {"name": "node-a", "resourceVersion": "7", "annotations": {"a": "b"}},
            "gatewayIP": "198.18.1.1", "internalIP": "198.18.1.1", "serviceCIDR": "10.96.0.0/16"});
        let update =
            |new: &Value, who: &Caller| gateway(who, Op::Update, Some(&gw), Some(new), None);
        let create = |who: &Caller| gateway(who, Op::Create, None, Some(&gw), None);
        assert_eq!(create(&Caller::Controller), Allow);
        assert_eq!(create(&Caller::Admin), Allow);
        assert_eq!(create(&sa("antrea-mc-controller")), Allow);
        denied(create(&sa("default")), "not by ServiceAccount");
        denied(create(&Caller::User("bob".into())), "not by user bob");
        // The agents: their key, in a Gateway that exists, and nothing else.
        let agent = sa("strait-agent");
        denied(create(&agent), "do not create or delete");
        denied(
            gateway(&agent, Op::Delete, Some(&gw), None, None),
            "do not create or delete",
        );
        let mut keyed = gw.clone();
        keyed["wireGuard"] = json!({"publicKey": "AAAA"});
        keyed["metadata"]["resourceVersion"] = json!("8");
        keyed["metadata"]["managedFields"] = json!([{"manager": "mc-agent"}]);
        assert_eq!(update(&keyed, &agent), Allow);
        assert_eq!(update(&keyed, &sa("antrea-agent")), Allow);
        // A token that names its Node: that Node's Gateway only.
        let on = |node: &str| gateway(&agent, Op::Update, Some(&gw), Some(&keyed), Some(node));
        assert_eq!(on("node-a"), Allow);
        denied(
            on("node-b"),
            "the agent on Node node-b may publish only its own",
        );
        let mut unkeyed = keyed.clone();
        unkeyed["wireGuard"] = Value::Null;
        denied(
            gateway(&agent, Op::Update, Some(&keyed), Some(&unkeyed), None),
            "may not remove a Gateway's WireGuard key",
        );
        let mut moved = keyed.clone();
        moved["gatewayIP"] = json!("198.18.9.9");
        moved["serviceCIDR"] = json!("0.0.0.0/0");
        denied(
            update(&moved, &agent),
            "may change only wireGuard in a Gateway, not gatewayIP, serviceCIDR",
        );
        let mut annotated = keyed.clone();
        annotated["metadata"]["annotations"] =
            json!({"multicluster.strait.io/pod-cidrs": "0.0.0.0/0"});
        denied(update(&annotated, &agent), "not metadata.annotations");
        // The controller and administrators change anything.
        assert_eq!(update(&moved, &Caller::Controller), Allow);
        assert_eq!(update(&moved, &Caller::Admin), Allow);
    }
}
