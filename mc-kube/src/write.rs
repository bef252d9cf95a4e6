//! The write side of every level-triggered loop: a writer that makes the API equal to a computed
//! desired state (server-side apply, remembering what it confirmed), bounded concurrent writes,
//! status pacing, and the label of the objects a member manages.

use std::{
    collections::HashMap,
    fmt::Debug,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::StreamExt as _;
use kube::{
    Api, Resource, ResourceExt as _,
    api::{DeleteParams, Patch, PatchParams},
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

use crate::metrics::Metrics;

/// Field manager of every server-side apply the controllers make.
pub const MANAGER: &str = "strait-mc-controller";

/// True when every field set in `desired` has the same value in `actual` (objects compared key by
/// key, arrays element by element): what a server-side apply of `desired` would not change. Fields
/// the API server defaults (a port's targetPort, a clusterIP) do not count as differences.
pub fn json_subset(desired: &Value, actual: &Value) -> bool {
    // An empty list or map the API server does not store (Go's omitempty) is no difference.
    let empty = |v: &Value| match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    };
    match (desired, actual) {
        (Value::Object(d), Value::Object(a)) => d.iter().all(|(k, v)| match a.get(k) {
            Some(av) => json_subset(v, av) || v.is_null(),
            None => empty(v),
        }),
        (Value::Array(d), Value::Array(a)) => {
            d.len() == a.len() && d.iter().zip(a).all(|(x, y)| json_subset(x, y))
        }
        _ => desired == actual,
    }
}

/// Makes objects in the API equal to desired ones with server-side apply, skipping writes the
/// store shows are not needed, and writes it has just made while the store catches up.
#[derive(Clone)]
pub struct Writer {
    metrics: Metrics,
    memory: Arc<Mutex<Memory>>,
}

/// What a [`Writer`] remembers per object: 64-bit hashes, not objects or names, as it holds an
/// entry per object the controller ever wrote or checked (thousands at 1000 Services). Keys are
/// hashes of "apiVersion/kind/namespace/name".
#[derive(Default)]
struct Memory {
    /// A hash of what was written, and when.
    applied: HashMap<u64, (u64, Instant)>,
    /// A desired state found already in place, and a hash of the object (UID) and
    /// resourceVersion it was found in: while none of them changes, the comparison need not be
    /// made again (a pass recomputes every object, and most are unchanged). The UID makes the
    /// entry specific to one object of one cluster, as resourceVersions are not.
    /// When an entry was last used: entries of objects that went with their namespace are dropped
    /// once unused for `UNCONFIRMED_TTL`.
    confirmed: HashMap<u64, (u64, u64, Instant)>,
}

impl Memory {
    /// The hash of the desired state last written or last found in place for a key, if any.
    fn last_desired(&self, key: u64) -> Option<u64> {
        let applied = self.applied.get(&key).map(|&(h, at)| (at, h));
        let confirmed = self.confirmed.get(&key).map(|&(h, _, used)| (used, h));
        applied.max(confirmed).map(|(_, h)| h)
    }
}

/// A hash of some strings (SipHash with fixed keys: the same in every process).
fn hash_of(parts: &[&str]) -> u64 {
    use std::hash::{Hash as _, Hasher as _};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for p in parts {
        p.hash(&mut h);
    }
    h.finish()
}

/// How long a write with no store to confirm it is trusted before it is made again.
const UNCONFIRMED_TTL: Duration = Duration::from_secs(300);
/// How long the store may lag behind a write before the write is made again.
const STORE_LAG: Duration = Duration::from_secs(10);

impl Writer {
    pub fn new(metrics: Metrics) -> Self {
        Self {
            metrics,
            memory: Default::default(),
        }
    }

    fn cache_key<K: Resource>(obj: &K) -> u64
    where
        K::DynamicType: Default,
    {
        let meta = obj.meta();
        Self::key_of::<K>(
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default(),
        )
    }

    fn key_of<K: Resource>(namespace: &str, name: &str) -> u64
    where
        K::DynamicType: Default,
    {
        hash_of(&[
            &K::api_version(&Default::default()),
            &K::kind(&Default::default()),
            namespace,
            name,
        ])
    }

    /// Whether `desired` must be applied, given what the store holds (`None` if there is no
    /// store for this kind, `Some(None)` if the store has no such object).
    pub fn needed<K>(&self, desired: &K, actual: Option<Option<&K>>) -> bool
    where
        K: Resource + Serialize,
        K::DynamicType: Default,
    {
        self.needed_with(desired, actual, false)
    }

    /// Like [`Writer::needed`], for objects whose whole `spec` this controller writes and the
    /// API server never fills in (Strait's own CRDs, which have no defaults): a field in the
    /// stored spec that is not desired also counts as a difference. Unlike the memory of what
    /// was written, this holds across a restart.
    pub fn needed_exact_spec<K>(&self, desired: &K, actual: Option<Option<&K>>) -> bool
    where
        K: Resource + Serialize,
        K::DynamicType: Default,
    {
        self.needed_with(desired, actual, true)
    }

    fn needed_with<K>(&self, desired: &K, actual: Option<Option<&K>>, exact_spec: bool) -> bool
    where
        K: Resource + Serialize,
        K::DynamicType: Default,
    {
        let key = Self::cache_key(desired);
        let want_hash = desired_hash(desired);
        if let Some(Some(actual)) = actual {
            let rv = actual
                .meta()
                .resource_version
                .as_deref()
                .unwrap_or_default();
            let uid = actual.meta().uid.as_deref().unwrap_or_default();
            let found_in = hash_of(&[uid, rv]);
            let mut memory = self.memory.lock().expect("writer cache");
            // The desired state changed since it was last written or found in place: apply it,
            // even when the stored object holds every field it sets. A field it no longer sets
            // (a withdrawn cluster's endpoints, a policy's removed rules) is removed by the apply
            // and by nothing else. (After a restart nothing is remembered, and the comparison
            // below decides.)
            if memory.last_desired(key).is_some_and(|h| h != want_hash) {
                return true;
            }
            if let Some((h, f, used)) = memory.confirmed.get_mut(&key)
                && *h == want_hash
                && *f == found_in
            {
                *used = Instant::now();
                return false;
            }
            drop(memory);
            let want = serde_json::to_value(desired).unwrap_or(Value::Null);
            let actual_v = serde_json::to_value(actual).unwrap_or(Value::Null);
            if json_subset(&want, &actual_v)
                && (!exact_spec || json_subset(&actual_v["spec"], &want["spec"]))
            {
                if !rv.is_empty() && !uid.is_empty() {
                    let mut memory = self.memory.lock().expect("writer cache");
                    if memory.confirmed.len() % 1024 == 1023 {
                        memory
                            .confirmed
                            .retain(|_, (_, _, used)| used.elapsed() < UNCONFIRMED_TTL);
                    }
                    let entry = (want_hash, found_in, Instant::now());
                    memory.confirmed.insert(key, entry);
                }
                return false;
            }
        }
        let ttl = if actual.is_some() {
            STORE_LAG
        } else {
            UNCONFIRMED_TTL
        };
        let memory = self.memory.lock().expect("writer cache");
        !matches!(memory.applied.get(&key), Some((v, at)) if *v == want_hash && at.elapsed() < ttl)
    }

    /// Server-side apply of `desired` (which carries apiVersion and kind).
    pub async fn apply<K>(&self, api: &Api<K>, desired: &K) -> kube::Result<()>
    where
        K: Resource + Serialize + Clone + DeserializeOwned + Debug,
        K::DynamicType: Default,
    {
        self.apply_get(api, desired).await.map(|_| ())
    }

    /// [`Writer::apply`], returning the object as the API server stored it.
    pub async fn apply_get<K>(&self, api: &Api<K>, desired: &K) -> kube::Result<K>
    where
        K: Resource + Serialize + Clone + DeserializeOwned + Debug,
        K::DynamicType: Default,
    {
        let name = desired.name_any();
        let kind = K::kind(&Default::default()).into_owned();
        let mut obj = serde_json::to_value(desired).unwrap_or(Value::Null);
        if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            // Never send read-only metadata in an apply.
            for f in [
                "resourceVersion",
                "uid",
                "creationTimestamp",
                "managedFields",
            ] {
                meta.remove(f);
            }
        }
        let result = api
            .patch(
                &name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&obj),
            )
            .await;
        self.metrics.write(&kind, "apply", result.is_ok());
        let stored = result?;
        self.applied(desired);
        tracing::debug!(kind, name, "applied");
        Ok(stored)
    }

    /// Remembers that `desired` was just written.
    fn applied<K>(&self, desired: &K)
    where
        K: Resource + Serialize,
        K::DynamicType: Default,
    {
        let written = desired_hash(desired);
        let mut memory = self.memory.lock().expect("writer cache");
        // Entries past the longest time they are trusted only take memory: drop them now and
        // then (objects deleted with their namespace never get a delete call here).
        if memory.applied.len() % 1024 == 1023 {
            memory
                .applied
                .retain(|_, (_, at)| at.elapsed() < UNCONFIRMED_TTL);
        }
        memory
            .applied
            .insert(Self::cache_key(desired), (written, Instant::now()));
    }

    /// Deletes an object; one that is already gone is not an error.
    pub async fn delete<K>(&self, api: &Api<K>, namespace: &str, name: &str) -> kube::Result<()>
    where
        K: Resource + Clone + DeserializeOwned + Debug,
        K::DynamicType: Default,
    {
        let kind = K::kind(&Default::default()).into_owned();
        let result = match api.delete(name, &DeleteParams::background()).await {
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            other => other.map(|_| ()),
        };
        self.metrics.write(&kind, "delete", result.is_ok());
        result?;
        let key = Self::key_of::<K>(namespace, name);
        let mut memory = self.memory.lock().expect("writer cache");
        memory.applied.remove(&key);
        memory.confirmed.remove(&key);
        drop(memory);
        tracing::debug!(kind, name, "deleted");
        Ok(())
    }

    /// A delete for [`run_all`], labelled with the object's name.
    pub fn delete_op<K>(&self, api: &Api<K>, namespace: &str, name: &str) -> (String, Op)
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        K::DynamicType: Default,
    {
        let (w, api, ns, n) = (
            self.clone(),
            api.clone(),
            namespace.to_owned(),
            name.to_owned(),
        );
        (
            name.to_owned(),
            Box::pin(async move { w.delete(&api, &ns, &n).await }),
        )
    }

    /// A server-side apply for [`run_all`], labelled with the object's name.
    pub fn apply_op<K>(&self, api: &Api<K>, desired: K) -> (String, Op)
    where
        K: Resource + Serialize + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        K::DynamicType: Default,
    {
        let (w, api) = (self.clone(), api.clone());
        (
            desired.name_any(),
            Box::pin(async move { w.apply(&api, &desired).await }),
        )
    }

    /// [`Writer::converge`], where `then` may give an applied object a follow-up: a write made
    /// from the object as the API server stored it (a field it fills in, such as a Service's
    /// ClusterIP), at once instead of on the next pass after the watch brings it.
    pub fn converge_then<K>(
        &self,
        desired: Vec<K>,
        stored: &[Arc<K>],
        compare: Compare,
        api: impl Fn(&str) -> Api<K>,
        removable: impl Fn(&K) -> bool,
        mut then: impl FnMut(&K) -> Option<Then<K>>,
    ) -> Vec<(String, Op)>
    where
        K: Resource + Serialize + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        K::DynamicType: Default,
    {
        let id = |o: &K| (o.namespace().unwrap_or_default(), o.name_any());
        let by_id: HashMap<(String, String), &K> =
            stored.iter().map(|o| (id(o), o.as_ref())).collect();
        let wanted: std::collections::HashSet<(String, String)> = desired.iter().map(id).collect();
        let mut ops = Vec::new();
        for obj in desired {
            let key = id(&obj);
            let current = Some(by_id.get(&key).copied());
            let needed = match compare {
                Compare::Fields => self.needed(&obj, current),
                Compare::ExactSpec => self.needed_exact_spec(&obj, current),
            };
            if !needed {
                continue;
            }
            let api = api(&key.0);
            match then(&obj) {
                None => ops.push(self.apply_op(&api, obj)),
                Some(next) => {
                    let w = self.clone();
                    ops.push((
                        key.1,
                        Box::pin(async move {
                            let stored = w.apply_get(&api, &obj).await?;
                            match next(stored) {
                                Some(op) => op.await,
                                None => Ok(()),
                            }
                        }) as Op,
                    ));
                }
            }
        }
        for obj in stored {
            let (ns, name) = id(obj);
            if !wanted.contains(&(ns.clone(), name.clone()))
                && obj.meta().deletion_timestamp.is_none()
                && removable(obj)
            {
                ops.push(self.delete_op(&api(&ns), &ns, &name));
            }
        }
        ops
    }

    /// The writes that make one kind's objects equal to `desired`: an apply for each desired
    /// object that differs from its copy in `stored`, and a delete for each object of `stored`
    /// that is not desired and that `removable` gives up (only objects the loop manages, and not
    /// in a namespace being deleted, say). `api` gives the API of a namespace ("" for objects
    /// without one). `stored` is what the loop looked at: objects outside it are left alone.
    pub fn converge<K>(
        &self,
        desired: Vec<K>,
        stored: &[Arc<K>],
        compare: Compare,
        api: impl Fn(&str) -> Api<K>,
        removable: impl Fn(&K) -> bool,
    ) -> Vec<(String, Op)>
    where
        K: Resource + Serialize + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        K::DynamicType: Default,
    {
        self.converge_then(desired, stored, compare, api, removable, |_| None)
    }

    /// A merge patch of the status subresource.
    pub async fn patch_status<K>(&self, api: &Api<K>, name: &str, status: Value) -> kube::Result<()>
    where
        K: Resource + Clone + DeserializeOwned + Debug,
        K::DynamicType: Default,
    {
        let kind = K::kind(&Default::default()).into_owned();
        let result = api
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({ "status": status })),
            )
            .await;
        self.metrics.write(&kind, "status", result.is_ok());
        result.map(|_| ())
    }

    /// Forgets every write, so the next sync re-asserts everything (used after a reconnect).
    pub fn forget(&self) {
        *self.memory.lock().expect("writer cache") = Memory::default();
    }
}

/// How [`Writer::converge`] compares a desired object with its stored copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compare {
    /// Fields the API server defaults or adds are no difference (Kubernetes' own kinds).
    Fields,
    /// A stored spec field that is not desired is a difference too (Strait's own CRDs, whose
    /// whole spec the loop writes).
    ExactSpec,
}

/// A hash of an object's JSON text, computed while serializing (no JSON tree is built); the same
/// object always gives the same text (maps are ordered).
fn desired_hash<T: Serialize>(obj: &T) -> u64 {
    use std::hash::Hasher as _;
    struct HashWriter(std::collections::hash_map::DefaultHasher);
    impl std::io::Write for HashWriter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.write(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut w = HashWriter(Default::default());
    // Serializing a k8s-openapi or CRD type to JSON does not fail.
    let _ = serde_json::to_writer(&mut w, obj);
    w.0.finish()
}

/// Status writes are not on the way from an export to its imports: a loop holds them back while
/// it writes exports or imports and until it has written none for `STATUS_QUIET`, so that an
/// export's statuses (and what they set off in other clusters: a ResourceExport's status wakes
/// its member, which writes its ServiceExport's) do not compete with its own imports for the API
/// servers; for at most `STATUS_DEFER` from when holding began (then they go anyway, so a busy
/// loop still reports). The loop wakes itself when they are due ([`StatusPacer::wake_at`]).
#[derive(Default)]
pub struct StatusPacer {
    /// When the loop last wrote exports or imports.
    busy: Option<Instant>,
    /// Since when statuses have been held; `None` while none are.
    held_since: Option<Instant>,
}

const STATUS_DEFER: Duration = Duration::from_secs(5);

/// How long a loop writes no exports or imports before it writes statuses. The members take up
/// an import within some tens of milliseconds of the leader's write.
const STATUS_QUIET: Duration = Duration::from_millis(100);

impl StatusPacer {
    /// Called by every pass, which is (`busy`) or is not writing exports/imports and has or has
    /// not statuses `waiting`: whether it writes them now (it does, when told so); when not, they
    /// are held until [`Self::wake_at`].
    pub fn due(&mut self, busy: bool, waiting: bool) -> bool {
        self.due_at(Instant::now(), busy, waiting)
    }

    fn due_at(&mut self, now: Instant, busy: bool, waiting: bool) -> bool {
        if busy {
            self.busy = Some(now);
        }
        if !waiting {
            self.held_since = None;
            return false;
        }
        let quiet = self
            .busy
            .is_none_or(|at| now.duration_since(at) >= STATUS_QUIET);
        let since = *self.held_since.get_or_insert(now);
        let due = quiet || now.duration_since(since) >= STATUS_DEFER;
        if due {
            self.held_since = None;
        }
        due
    }

    /// When held statuses are due, for the loop to wake up then.
    pub fn wake_at(&self) -> Option<Instant> {
        let since = self.held_since?;
        let quiet = self.busy.map_or(since, |at| at + STATUS_QUIET);
        Some(quiet.min(since + STATUS_DEFER))
    }
}

/// One write for [`run_all`], boxed so that writes of different kinds share one list.
pub type Op = std::pin::Pin<Box<dyn Future<Output = kube::Result<()>> + Send>>;

/// A follow-up of an applied object (see [`Writer::converge_then`]).
pub type Then<K> = Box<dyn FnOnce(K) -> Option<Op> + Send>;

/// Runs futures with bounded concurrency, logging and counting failures; returns how many failed.
pub async fn run_all<F>(what: &str, ops: Vec<(String, F)>) -> usize
where
    F: Future<Output = kube::Result<()>>,
{
    run_all_failed(what, ops).await.len()
}

/// As [`run_all`]; the labels of the writes that failed (for a loop whose labels are its work
/// keys: [`crate::driver::Reconciler::failed_keys`]).
pub async fn run_all_failed<F>(what: &str, ops: Vec<(String, F)>) -> Vec<String>
where
    F: Future<Output = kube::Result<()>>,
{
    let results: Vec<(String, kube::Result<()>)> = futures::stream::iter(
        ops.into_iter()
            .map(|(label, op)| async move { (label, op.await) }),
    )
    .buffer_unordered(16)
    .collect()
    .await;
    let mut failed = Vec::new();
    for (label, result) in results {
        if let Err(e) = result {
            tracing::warn!(what, object = label, error = %e, "write failed; will retry");
            failed.push(label);
        }
    }
    failed
}

/// Labels an object created by a member controller carries.
pub fn managed_labels() -> std::collections::BTreeMap<String, String> {
    [(
        mc_api::names::labels::MANAGED_BY.to_owned(),
        mc_api::names::labels::MANAGED_BY_VALUE.to_owned(),
    )]
    .into()
}

pub fn is_managed<K: Resource>(obj: &K) -> bool {
    obj.labels()
        .get(mc_api::names::labels::MANAGED_BY)
        .map(String::as_str)
        == Some(mc_api::names::labels::MANAGED_BY_VALUE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn subset_ignores_server_defaults_but_not_changes() {
        let actual = json!({"spec": {"ports": [{"port": 80, "protocol": "TCP", "targetPort": 80}], "clusterIP": "10.0.0.1"}});
        assert!(json_subset(
            &json!({"spec": {"ports": [{"port": 80, "protocol": "TCP"}]}}),
            &actual
        ));
        assert!(!json_subset(
            &json!({"spec": {"ports": [{"port": 81, "protocol": "TCP"}]}}),
            &actual
        ));
        assert!(!json_subset(
            &json!({"spec": {"ports": [{"port": 80}, {"port": 81}]}}),
            &actual
        ));
        assert!(!json_subset(&json!({"x": 1}), &json!({})));
    }

    fn config_map(rv: &str, value: &str) -> k8s_openapi::api::core::v1::ConfigMap {
        serde_json::from_value(json!({
            "metadata": {"name": "a", "namespace": "ns", "resourceVersion": rv, "uid": "u1"},
            "data": {"k": value}
        }))
        .expect("ConfigMap")
    }

    #[test]
    fn a_confirmed_object_is_not_compared_again_but_changes_are_seen() {
        let w = Writer::new(Metrics::default());
        let mut want = config_map("", "v1");
        want.metadata.resource_version = None;
        // Nothing stored: a write is needed.
        assert!(w.needed(&want, Some(None)));
        // Stored and equal: no write, and the verdict is remembered for this resourceVersion.
        let stored = config_map("7", "v1");
        assert!(!w.needed(&want, Some(Some(&stored))));
        assert!(!w.needed(&want, Some(Some(&stored))));
        // Someone changed the object (new resourceVersion): compared again, and rewritten.
        assert!(w.needed(&want, Some(Some(&config_map("8", "edited")))));
        // Another object of the same name (another cluster, or re-created) that happens to have
        // the same resourceVersion: compared again.
        let mut other_object = config_map("7", "edited");
        other_object.metadata.uid = Some("u2".into());
        assert!(w.needed(&want, Some(Some(&other_object))));
        // We want something else: a write, even though the stored version was confirmed.
        let mut other = config_map("", "v2");
        other.metadata.resource_version = None;
        assert!(w.needed(&other, Some(Some(&stored))));
    }

    #[test]
    fn a_field_no_longer_desired_is_written_away() {
        let w = Writer::new(Metrics::default());
        let both: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "a", "namespace": "ns"},
            "data": {"k": "v1", "gone": "x"}
        }))
        .expect("ConfigMap");
        let mut stored = both.clone();
        stored.metadata.resource_version = Some("7".into());
        stored.metadata.uid = Some("u1".into());
        // In place: nothing to write.
        assert!(!w.needed(&both, Some(Some(&stored))));
        // The desired state drops a field: the stored object still holds every field it sets,
        // but only an apply removes the other one.
        let fewer: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "a", "namespace": "ns"},
            "data": {"k": "v1"}
        }))
        .expect("ConfigMap");
        assert!(w.needed(&fewer, Some(Some(&stored))));
        // Until it has been written; then the store's copy is compared as usual.
        w.applied(&fewer);
        assert!(!w.needed(&fewer, Some(Some(&stored))));
        let mut after = stored.clone();
        after.data = fewer.data.clone();
        after.metadata.resource_version = Some("8".into());
        assert!(!w.needed(&fewer, Some(Some(&after))));
        // A write that failed is made again (nothing recorded it).
        assert!(w.needed(&both, Some(Some(&after))));
        assert!(w.needed(&both, Some(Some(&after))));
    }

    #[test]
    fn an_exact_spec_sees_a_field_left_behind_even_after_a_restart() {
        use mc_api::imports::ResourceImport;
        let ri = |spec: serde_json::Value, rv: Option<&str>| -> ResourceImport {
            let mut meta = json!({"name": "default-nginx-endpoints", "namespace": "mc"});
            if let Some(rv) = rv {
                meta["resourceVersion"] = json!(rv);
                meta["uid"] = json!("u1");
            }
            serde_json::from_value(json!({"metadata": meta, "spec": spec})).expect("RI")
        };
        // A fresh Writer (a restarted controller) and a stored spec with endpoints no longer
        // desired.
        let w = Writer::new(Metrics::default());
        let stored = ri(
            json!({"kind": "Endpoints", "endpoints": {"subsets": [{"addresses": [{"ip": "10.0.0.1"}]}]}}),
            Some("5"),
        );
        let want = ri(json!({"kind": "Endpoints"}), None);
        assert!(
            !w.needed(&want, Some(Some(&stored))),
            "the loose comparison misses it"
        );
        let w = Writer::new(Metrics::default());
        assert!(w.needed_exact_spec(&want, Some(Some(&stored))));
        // Equal specs (empty lists the server left out included) need no write.
        let same = ri(json!({"kind": "Endpoints"}), Some("6"));
        let want_empty = ri(
            json!({"kind": "Endpoints", "endpoints": {"subsets": []}}),
            None,
        );
        assert!(!w.needed_exact_spec(&want_empty, Some(Some(&same))));
    }

    #[test]
    fn an_empty_list_matches_one_the_server_left_out() {
        assert!(json_subset(
            &json!({"subsets": []}),
            &json!({"metadata": {}})
        ));
        assert!(json_subset(&json!({"a": {}}), &json!({})));
        assert!(!json_subset(&json!({"subsets": [1]}), &json!({})));
        assert!(!json_subset(
            &json!({"subsets": []}),
            &json!({"subsets": [1]})
        ));
    }

    #[test]
    fn statuses_wait_until_the_loop_is_quiet_and_it_wakes_up_for_them() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let mut p = StatusPacer::default();
        // A loop that never wrote exports or imports writes statuses at once.
        assert!(p.due_at(ms(1), false, true));
        assert_eq!(p.wake_at(), None);
        // A pass writing imports holds its statuses, and the loop wakes when they are due.
        assert!(!p.due_at(ms(10), true, true));
        assert_eq!(p.wake_at(), Some(ms(10) + STATUS_QUIET));
        // A quiet pass before then still holds them; one after writes them.
        assert!(!p.due_at(ms(60), false, true));
        assert_eq!(p.wake_at(), Some(ms(10) + STATUS_QUIET));
        assert!(p.due_at(ms(10) + STATUS_QUIET, false, true));
        assert_eq!(p.wake_at(), None);
        // Nothing waiting: nothing to wake up for, even while busy.
        assert!(!p.due_at(ms(200), true, false));
        assert_eq!(p.wake_at(), None);
        // Long after the last status write, an export's statuses still wait for its imports.
        let later = ms(20_000);
        assert!(!p.due_at(later, true, true));
        assert_eq!(p.wake_at(), Some(later + STATUS_QUIET));
        assert!(p.due_at(later + STATUS_QUIET, false, true));
        // A loop busy for longer than STATUS_DEFER from when holding began writes them anyway.
        let began = ms(30_000);
        let mut t = began;
        while !p.due_at(t, true, true) {
            assert!(t < began + STATUS_DEFER, "held past STATUS_DEFER");
            assert!(p.wake_at().is_some_and(|at| at <= began + STATUS_DEFER));
            t += Duration::from_millis(50);
        }
        assert_eq!(t, began + STATUS_DEFER);
        assert_eq!(p.wake_at(), None);
    }
}
