//! The objects a watch has seen, by namespace and name.
//!
//! kube's reflector store keys every object by an `ObjectRef` beside it: four more strings (name,
//! namespace, resourceVersion, UID) and about 100 bytes of key in the map, some 300 bytes per
//! object, for names the object already holds. A controller holds about ten thousand objects at
//! 1000 Services, so this store finds objects by their own metadata instead: one pointer per
//! object in the set.

use std::{
    borrow::Borrow,
    collections::HashSet,
    hash::{Hash, Hasher},
    sync::{Arc, RwLock},
};

use kube::{Resource, runtime::watcher};

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

/// The readers' side: a snapshot of one object, or of all.
pub struct ObjectStore<K> {
    objects: Arc<RwLock<HashSet<Stored<K>>>>,
}

impl<K> Clone for ObjectStore<K> {
    fn clone(&self) -> Self {
        Self {
            objects: self.objects.clone(),
        }
    }
}

impl<K: Resource> ObjectStore<K> {
    pub fn get(&self, namespace: Option<&str>, name: &str) -> Option<Arc<K>> {
        let objects = self.objects.read().expect("object store");
        let key = (namespace.unwrap_or_default(), name);
        objects.get(&key as &dyn Key).map(|stored| stored.0.clone())
    }

    pub fn all(&self) -> Vec<Arc<K>> {
        let objects = self.objects.read().expect("object store");
        objects.iter().map(|stored| stored.0.clone()).collect()
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
        let store = ObjectStore {
            objects: Default::default(),
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
                let old = std::mem::replace(
                    &mut *self.store.objects.write().expect("object store"),
                    listed,
                );
                // (Freed after the lock is released.)
                drop(old);
            }
            watcher::Event::Apply(obj) => {
                let new = stored(&obj);
                let old = self
                    .store
                    .objects
                    .write()
                    .expect("object store")
                    .replace(new);
                drop(old);
            }
            watcher::Event::Delete(obj) => {
                let meta = obj.meta();
                let key = (
                    meta.namespace.as_deref().unwrap_or_default(),
                    meta.name.as_deref().unwrap_or_default(),
                );
                let old = self
                    .store
                    .objects
                    .write()
                    .expect("object store")
                    .take(&key as &dyn Key);
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
}
