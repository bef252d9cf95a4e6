//! The objects a watch has seen, by namespace and name.
//!
//! kube's reflector store keys every object by an `ObjectRef` beside it: four more strings (name,
//! namespace, resourceVersion, UID) and about 100 bytes of key in the map, some 300 bytes per
//! object, for names the object already holds. A controller holds about ten thousand objects at
//! 1000 Services, so this store finds objects by their own metadata instead: one pointer per
//! object in the set.
//!
//! A store can also index its objects by the keys its loop marks for them (the same function that
//! marks them, `KeysOf`), so that a pass over a few keys reads those objects, not all of them.

use std::{
    borrow::Borrow,
    collections::{HashMap, HashSet},
    hash::{Hash, Hasher},
    sync::{Arc, RwLock},
};

use kube::{Resource, runtime::watcher};

use crate::work::Work;

/// Which keys an object is about: `None` when its effect has no key (a change recomputes
/// everything), `Some(vec![])` when it is about no key in particular.
pub type KeysOf<K> = fn(&K) -> Option<Vec<String>>;

/// Where the index keeps objects that are about no key: every pass reads them.
const UNKEYED: &str = "";

/// Namespace and name: what objects in a store are told apart by ("" for no namespace).
trait Key {
    fn key(&self) -> (&str, &str);
}

impl Key for (&str, &str) {
    fn key(&self) -> (&str, &str) {
        *self
    }
}

impl Hash for dyn Key + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key().hash(state);
    }
}

impl PartialEq for dyn Key + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for dyn Key + '_ {}

/// A stored object; hashed and compared by its namespace and name only.
struct Stored<K>(Arc<K>);

impl<K> Clone for Stored<K> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<K: Resource> Key for Stored<K> {
    fn key(&self) -> (&str, &str) {
        let meta = self.0.meta();
        (
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default(),
        )
    }
}

impl<'a, K: Resource + 'a> Borrow<dyn Key + 'a> for Stored<K> {
    fn borrow(&self) -> &(dyn Key + 'a) {
        self
    }
}

impl<K: Resource> Hash for Stored<K> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key().hash(state);
    }
}

impl<K: Resource> PartialEq for Stored<K> {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl<K: Resource> Eq for Stored<K> {}

struct Content<K> {
    objects: HashSet<Stored<K>>,
    /// The objects by key, when the store is indexed.
    index: HashMap<String, HashSet<Stored<K>>>,
    /// Counts the changes applied (see [`ObjectStore::generation`]).
    generation: u64,
}

impl<K> Default for Content<K> {
    fn default() -> Self {
        Self {
            objects: HashSet::new(),
            index: HashMap::new(),
            generation: 0,
        }
    }
}

fn keys_of<K>(keys: KeysOf<K>, obj: &K) -> Vec<String> {
    match keys(obj) {
        Some(k) if !k.is_empty() => k,
        _ => vec![UNKEYED.to_owned()],
    }
}

impl<K: Resource> Content<K> {
    fn index_add(&mut self, keys: Option<KeysOf<K>>, obj: &Stored<K>) {
        if let Some(keys) = keys {
            for k in keys_of(keys, &obj.0) {
                self.index.entry(k).or_default().replace(obj.clone());
            }
        }
    }

    fn index_remove(&mut self, keys: Option<KeysOf<K>>, obj: &Stored<K>) {
        if let Some(keys) = keys {
            for k in keys_of(keys, &obj.0) {
                if let Some(set) = self.index.get_mut(&k) {
                    set.remove(&obj.key() as &dyn Key);
                    if set.is_empty() {
                        self.index.remove(&k);
                    }
                }
            }
        }
    }
}

/// The readers' side: a snapshot of one object, of those of some keys, or of all.
pub struct ObjectStore<K> {
    content: Arc<RwLock<Content<K>>>,
    keys: Option<KeysOf<K>>,
}

impl<K> Clone for ObjectStore<K> {
    fn clone(&self) -> Self {
        Self {
            content: self.content.clone(),
            keys: self.keys,
        }
    }
}

impl<K: Resource> ObjectStore<K> {
    pub fn get(&self, namespace: Option<&str>, name: &str) -> Option<Arc<K>> {
        let content = self.content.read().expect("object store");
        let key = (namespace.unwrap_or_default(), name);
        content
            .objects
            .get(&key as &dyn Key)
            .map(|stored| stored.0.clone())
    }

    /// A number that changes whenever the stored objects do (an object added, changed or
    /// removed, a re-list): what a reader computed from them may be kept while it stays the same.
    pub fn generation(&self) -> u64 {
        self.content.read().expect("object store").generation
    }

    pub fn all(&self) -> Vec<Arc<K>> {
        let content = self.content.read().expect("object store");
        content
            .objects
            .iter()
            .map(|stored| stored.0.clone())
            .collect()
    }

    /// The keys of the stored objects (none when the store is not indexed).
    pub fn keys(&self) -> Vec<String> {
        let content = self.content.read().expect("object store");
        content
            .index
            .keys()
            .filter(|k| k.as_str() != UNKEYED)
            .cloned()
            .collect()
    }

    /// The objects a pass over `work` reads: those of its keys and those about no key in
    /// particular (all of them for `Work::All`, or when the store is not indexed).
    pub fn covered(&self, work: &Work) -> Vec<Arc<K>> {
        let Work::Keys(keys) = work else {
            return self.all();
        };
        if self.keys.is_none() {
            return self.all();
        }
        let content = self.content.read().expect("object store");
        let mut found: HashSet<Stored<K>> = HashSet::new();
        for k in keys.iter().map(String::as_str).chain([UNKEYED]) {
            if let Some(set) = content.index.get(k) {
                found.extend(set.iter().cloned());
            }
        }
        found.into_iter().map(|stored| stored.0).collect()
    }
}

/// A stored copy of a watched object. The copy, not the object itself: a decoded object's
/// pieces lie between the decoder's short-lived allocations, and its vectors keep the spare
/// capacity they grew with, so keeping it left the heap fragmented (measured: 58 instead of
/// 47 MiB for west's controller at 1000 Services); a clone's pieces are allocated together, to
/// size. (kube's reflector stores a clone too.)
fn stored<K: Clone>(obj: &K) -> Stored<K> {
    Stored(Arc::new(obj.clone()))
}

/// The watch's side: applies its events. A relist (`Init` .. `InitDone`) is collected aside and
/// replaces the content at its end, so objects deleted while the watch was down go, and readers
/// never see half a list.
pub struct StoreWriter<K> {
    store: ObjectStore<K>,
    relist: Option<HashSet<Stored<K>>>,
}

impl<K: Resource + Clone> StoreWriter<K> {
    pub fn new() -> (ObjectStore<K>, Self) {
        Self::indexed(None)
    }

    /// A store whose objects are also found by the keys `keys` gives them.
    pub fn indexed(keys: Option<KeysOf<K>>) -> (ObjectStore<K>, Self) {
        let store = ObjectStore {
            content: Default::default(),
            keys,
        };
        let writer = Self {
            store: store.clone(),
            relist: None,
        };
        (store, writer)
    }

    pub fn apply(&mut self, event: watcher::Event<K>) {
        match event {
            watcher::Event::Init => self.relist = Some(HashSet::new()),
            watcher::Event::InitApply(obj) => {
                self.relist
                    .get_or_insert_with(HashSet::new)
                    .replace(stored(&obj));
            }
            watcher::Event::InitDone => {
                let listed = self.relist.take().unwrap_or_default();
                let mut new = Content {
                    objects: HashSet::new(),
                    index: HashMap::new(),
                    generation: 0,
                };
                for obj in &listed {
                    new.index_add(self.store.keys, obj);
                }
                new.objects = listed;
                let mut content = self.store.content.write().expect("object store");
                new.generation = content.generation + 1;
                let old = std::mem::replace(&mut *content, new);
                drop(content);
                // (Freed after the lock is released.)
                drop(old);
            }
            watcher::Event::Apply(obj) => {
                let new = stored(&obj);
                let keys = self.store.keys;
                let mut content = self.store.content.write().expect("object store");
                content.generation += 1;
                let old = content.objects.replace(new.clone());
                if let Some(old) = &old {
                    content.index_remove(keys, old);
                }
                content.index_add(keys, &new);
                drop(content);
                drop(old);
            }
            watcher::Event::Delete(obj) => {
                let meta = obj.meta();
                let key = (
                    meta.namespace.as_deref().unwrap_or_default(),
                    meta.name.as_deref().unwrap_or_default(),
                );
                let keys = self.store.keys;
                let mut content = self.store.content.write().expect("object store");
                content.generation += 1;
                let old = content.objects.take(&key as &dyn Key);
                if let Some(old) = &old {
                    content.index_remove(keys, old);
                }
                drop(content);
                drop(old);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    use kube::api::ObjectMeta;

    use super::*;

    fn cm(ns: &str, name: &str, value: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                ..Default::default()
            },
            data: Some([("v".to_owned(), value.to_owned())].into()),
            ..Default::default()
        }
    }

    fn value(store: &ObjectStore<ConfigMap>, ns: &str, name: &str) -> Option<String> {
        store
            .get(Some(ns), name)
            .and_then(|c| c.data.as_ref()?.get("v").cloned())
    }

    #[test]
    fn the_generation_moves_with_every_change_and_only_then() {
        let (store, mut w) = StoreWriter::new();
        let g0 = store.generation();
        w.apply(watcher::Event::Apply(cm("a", "x", "1")));
        let g1 = store.generation();
        assert_ne!(g0, g1);
        assert_eq!(store.generation(), g1, "reading changes nothing");
        w.apply(watcher::Event::Delete(cm("a", "x", "1")));
        let g2 = store.generation();
        assert_ne!(g1, g2);
        // A re-list, even of the same objects, is a change.
        w.apply(watcher::Event::Init);
        w.apply(watcher::Event::InitApply(cm("a", "x", "1")));
        w.apply(watcher::Event::InitDone);
        assert_ne!(store.generation(), g2);
    }

    #[test]
    fn objects_are_found_by_namespace_and_name_and_replaced_and_deleted() {
        let (store, mut w) = StoreWriter::new();
        w.apply(watcher::Event::Apply(cm("a", "x", "1")));
        w.apply(watcher::Event::Apply(cm("b", "x", "2")));
        w.apply(watcher::Event::Apply(cm("a", "x", "3")));
        assert_eq!(value(&store, "a", "x").as_deref(), Some("3"));
        assert_eq!(value(&store, "b", "x").as_deref(), Some("2"));
        assert_eq!(store.all().len(), 2);
        assert!(store.get(Some("a"), "y").is_none());
        // "a/x" and "ax/" or the like must not meet.
        assert!(store.get(Some("ax"), "").is_none());
        w.apply(watcher::Event::Delete(cm("a", "x", "whatever")));
        assert!(store.get(Some("a"), "x").is_none());
        assert_eq!(store.all().len(), 1);

        let (nss, mut w) = StoreWriter::<Namespace>::new();
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some("default".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        w.apply(watcher::Event::Apply(ns));
        assert!(nss.get(None, "default").is_some());
    }

    #[test]
    fn a_relist_replaces_the_content_at_its_end() {
        let (store, mut w) = StoreWriter::new();
        w.apply(watcher::Event::Apply(cm("a", "gone", "1")));
        w.apply(watcher::Event::Apply(cm("a", "kept", "1")));
        w.apply(watcher::Event::Init);
        w.apply(watcher::Event::InitApply(cm("a", "kept", "2")));
        w.apply(watcher::Event::InitApply(cm("a", "new", "1")));
        // Until the list is complete, readers see the old content.
        assert!(store.get(Some("a"), "gone").is_some());
        assert!(store.get(Some("a"), "new").is_none());
        w.apply(watcher::Event::InitDone);
        assert!(store.get(Some("a"), "gone").is_none());
        assert_eq!(value(&store, "a", "kept").as_deref(), Some("2"));
        assert!(store.get(Some("a"), "new").is_some());
        assert_eq!(store.all().len(), 2);
    }

    #[test]
    fn an_indexed_store_finds_the_objects_of_some_keys_and_follows_their_moves() {
        // Keyed by the value; "-" means about no key in particular.
        let (store, mut w) = StoreWriter::indexed(Some(|c: &ConfigMap| {
            let v = c.data.as_ref()?.get("v")?.clone();
            Some(if v == "-" { vec![] } else { vec![v] })
        }));
        let names = |work: &Work| {
            let mut n: Vec<String> = store
                .covered(work)
                .iter()
                .map(|c| c.metadata.name.clone().unwrap())
                .collect();
            n.sort();
            n
        };
        let keys = |k: &[&str]| Work::Keys(k.iter().map(|s| (*s).to_owned()).collect());
        w.apply(watcher::Event::Apply(cm("a", "x", "k1")));
        w.apply(watcher::Event::Apply(cm("a", "y", "k2")));
        w.apply(watcher::Event::Apply(cm("a", "z", "-")));
        assert_eq!(names(&keys(&["k1"])), ["x", "z"]);
        assert_eq!(names(&keys(&["k1", "k2"])), ["x", "y", "z"]);
        assert_eq!(names(&Work::All), ["x", "y", "z"]);
        let sorted = |mut k: Vec<String>| {
            k.sort();
            k
        };
        assert_eq!(
            sorted(store.keys()),
            ["k1", "k2"],
            "the keys, not the unkeyed"
        );
        // y moves to k1; x is deleted.
        w.apply(watcher::Event::Apply(cm("a", "y", "k1")));
        assert_eq!(names(&keys(&["k2"])), ["z"]);
        w.apply(watcher::Event::Delete(cm("a", "x", "k1")));
        assert_eq!(names(&keys(&["k1"])), ["y", "z"]);
        // A relist rebuilds the index.
        w.apply(watcher::Event::Init);
        w.apply(watcher::Event::InitApply(cm("a", "y", "k3")));
        w.apply(watcher::Event::InitDone);
        assert_eq!(names(&keys(&["k1"])), Vec::<String>::new());
        assert_eq!(names(&keys(&["k3"])), ["y"]);
        assert_eq!(store.keys(), ["k3"]);
    }
}
