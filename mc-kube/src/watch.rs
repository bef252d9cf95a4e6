//! The watch side of every level-triggered loop: stores kept up to date by watches, which wake
//! the loop through its [`Trigger`] and report their health for readiness. Failed watch attempts
//! are counted in the loop's [`Metrics`].

use std::{
    fmt::Debug,
    hash::Hash,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use futures::StreamExt as _;
use kube::{
    Api, Resource, ResourceExt as _,
    runtime::{
        WatchStreamExt as _,
        utils::ResetTimerBackoff,
        watcher::{self, ExponentialBackoff, watcher},
    },
};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;

use crate::{
    metrics::Metrics,
    store::{ObjectStore, StoreWriter},
    work::Work,
};

/// Wakes a sync loop and says what to recompute. Any number of events before the loop runs
/// collapse into one wake-up whose [`Work`] is the union of what they marked. It carries the
/// loop's metrics, where its watches count their failures.
#[derive(Clone)]
pub struct Trigger {
    notify: Arc<Notify>,
    marked: Arc<Mutex<Work>>,
    metrics: Metrics,
}

/// Which keys an event about an object marks: `None` when its effect has no key (everything is
/// recomputed), `Some(vec![])` when only the parts of the loop that are not per key are. A keyed
/// store also finds its objects by these keys ([`Watched::covered`]).
pub use crate::store::KeysOf;

impl Trigger {
    pub fn new(metrics: &Metrics) -> Self {
        Self {
            notify: Arc::default(),
            marked: Arc::default(),
            metrics: metrics.clone(),
        }
    }

    /// Wakes the loop to recompute everything.
    pub fn fire(&self) {
        self.mark(None);
    }

    /// Wakes the loop to recompute `keys` (`None`: everything).
    pub fn mark(&self, keys: Option<Vec<String>>) {
        {
            let mut marked = self.marked.lock().expect("trigger");
            match keys {
                None => *marked = Work::All,
                Some(keys) => {
                    for k in keys {
                        marked.add(k);
                    }
                }
            }
        }
        self.notify.notify_one();
    }

    pub async fn wait(&self) {
        self.notify.notified().await;
    }

    /// What was marked since the last call; the marks are cleared.
    pub fn take(&self) -> Work {
        std::mem::take(&mut *self.marked.lock().expect("trigger"))
    }
}

pub(crate) const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// How long a watch may keep failing before readiness says so: reconnecting after an API server
/// restart or a dropped connection takes seconds, and the stores keep their content meanwhile.
pub const WATCH_FAILING_GRACE: Duration = Duration::from_secs(30);

/// A run of failures is over when no error came for this long. A watch that resumes from its
/// last resource version yields no event until an object changes, so the end of the errors is
/// the sign it works again; retries are at most `WATCH_RETRY_MAX` apart, so a watch still
/// failing errs within this.
const WATCH_ERRORS_OVER: Duration = Duration::from_secs(60);

/// The longest wait between two attempts of a failing watch (kube's default is 30 s, and with a
/// run of failures during an API server's restart a watch came back up to 90 s after the server
/// did: an export made meanwhile waited as long). Each watch retries at most this often, the
/// first retries sooner (0.5 s, doubling).
pub const WATCH_RETRY_MAX: Duration = Duration::from_secs(5);

fn watch_backoff() -> ResetTimerBackoff<ExponentialBackoff> {
    ResetTimerBackoff::new(
        ExponentialBackoff::from(
            backon::ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(500))
                .with_max_delay(WATCH_RETRY_MAX)
                .with_factor(2.0)
                .with_jitter()
                .without_max_times(),
        ),
        Duration::from_secs(60),
    )
}

/// How long one watch request lasts before the API server ends it and the watcher resumes from
/// where it was (no relist, no error). It must stay below the client's read timeout (30 s on
/// every connection, `READ_TIMEOUT`): an idle watch cut by that timeout is an error, and kube's
/// backoff after errors that never stop grows to 30 s, an import delayed by as much. kube also
/// gives up on a watch that stays silent 5 s past this, so a connection to an API server that
/// went away without closing it is noticed within 30 s, not 5 min. (It applies to every watch,
/// the agents' too: a watch request every 25 s each, served from the API server's watch cache.
/// Watches list first and then watch; a streaming initial list would be cut by it.)
pub const WATCH_TIMEOUT_SECS: u32 = 25;

/// Whether a watch has delivered its first full list, and whether it has been failing.
#[derive(Default)]
pub struct WatchHealth {
    synced: AtomicBool,
    failing: Mutex<Option<Failing>>,
}

/// A run of failed attempts: since when, the last one's time and error.
struct Failing {
    since: Instant,
    last: Instant,
    error: String,
}

impl WatchHealth {
    /// As after the first full list (for tests of what waits on it).
    #[cfg(test)]
    pub(crate) fn set_synced(&self) {
        self.synced.store(true, Ordering::Release);
    }

    /// True once the first full list has been received.
    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// For how long the watch has been failing, and its last error; None while it works.
    pub fn failing(&self) -> Option<(Duration, String)> {
        let failing = self.failing.lock().expect("watch health");
        failing
            .as_ref()
            .filter(|f| f.last.elapsed() < WATCH_ERRORS_OVER)
            .map(|f| (f.since.elapsed(), f.error.clone()))
    }

    /// Records a failed attempt; returns true for the first of a run of failures.
    fn failed(&self, error: String) -> bool {
        let now = Instant::now();
        let mut failing = self.failing.lock().expect("watch health");
        match failing.as_mut() {
            Some(f) if now.duration_since(f.last) < WATCH_ERRORS_OVER => {
                f.last = now;
                f.error = error;
                false
            }
            _ => {
                *failing = Some(Failing {
                    since: now,
                    last: now,
                    error,
                });
                true
            }
        }
    }

    /// Records an event that came from the API server; returns true when it ends a run of
    /// failures.
    fn worked(&self) -> bool {
        self.failing.lock().expect("watch health").take().is_some()
    }
}

/// Readiness from a controller's watches (by what they watch): `Err` with the message while a
/// first list is missing (the sync must wait for it); `Ok(Some(message))` while a watch has been
/// failing for longer than [`WATCH_FAILING_GRACE`] (not ready, but the sync goes on with what the
/// stores hold, as they keep their content); `Ok(None)` when every watch works.
pub fn watch_readiness(watches: &[(&str, &WatchHealth)]) -> Result<Option<String>, String> {
    let waiting: Vec<&str> = watches
        .iter()
        .filter(|(_, h)| !h.synced())
        .map(|(what, _)| *what)
        .collect();
    if !waiting.is_empty() {
        return Err(format!(
            "waiting for the first list of {}",
            waiting.join(", ")
        ));
    }
    let failing: Vec<String> = watches
        .iter()
        .filter_map(|(what, h)| {
            let (since, error) = h.failing()?;
            (since >= WATCH_FAILING_GRACE)
                .then(|| format!("{what} for {} s ({error})", since.as_secs()))
        })
        .collect();
    Ok((!failing.is_empty()).then(|| {
        format!(
            "watch failing, working from the last state seen: {}",
            failing.join("; ")
        )
    }))
}

/// A store kept up to date by a watch; every change fires the trigger. The store keeps its last
/// content while the API server is unreachable (the watch retries with backoff).
pub struct Watched<K: Resource + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    store: ObjectStore<K>,
    health: Arc<WatchHealth>,
    task: tokio::task::JoinHandle<()>,
}

impl<K: Resource + 'static> Drop for Watched<K>
where
    K::DynamicType: Eq + Hash + Clone,
{
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl<K> Watched<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    pub fn new(api: Api<K>, config: watcher::Config, trigger: Trigger, what: &'static str) -> Self {
        Self::trimmed(api, config, trigger, what, |_| {})
    }

    /// Like [`Watched::trimmed`], with each change marking only the keys `keys` gives for the
    /// object (before and after it changed; a re-list marks everything).
    pub fn keyed(
        api: Api<K>,
        config: watcher::Config,
        trigger: Trigger,
        what: &'static str,
        trim: fn(&mut K),
        keys: KeysOf<K>,
    ) -> Self {
        Self::start(api, config, trigger, what, trim, Some(keys))
    }

    /// Like [`Watched::new`], with `trim` removing from each object, before it is stored, the
    /// fields nothing here reads (it holds thousands of them at 1000 Services).
    pub fn trimmed(
        api: Api<K>,
        config: watcher::Config,
        trigger: Trigger,
        what: &'static str,
        trim: fn(&mut K),
    ) -> Self {
        Self::start(api, config, trigger, what, trim, None)
    }

    fn start(
        api: Api<K>,
        config: watcher::Config,
        trigger: Trigger,
        what: &'static str,
        trim: fn(&mut K),
        keys: Option<KeysOf<K>>,
    ) -> Self {
        let (store, mut writer) = StoreWriter::indexed(keys);
        let store2 = store.clone();
        let config = match config.timeout {
            Some(_) => config,
            None => config.timeout(WATCH_TIMEOUT_SECS),
        };
        let metrics = trigger.metrics.clone();
        metrics.watch_error(what, 0);
        let health = Arc::new(WatchHealth::default());
        let health2 = health.clone();
        let task = tokio::spawn(async move {
            // managedFields, and kubectl's copy of the last applied object, are often the largest
            // part of an object and nothing here reads them: keep them out of the stores.
            let stream = watcher(api, config)
                .backoff(watch_backoff())
                .modify(move |obj| {
                    obj.managed_fields_mut().clear();
                    obj.annotations_mut().remove(LAST_APPLIED);
                    trim(obj);
                });
            futures::pin_mut!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(event) => {
                        let done = matches!(event, watcher::Event::InitDone);
                        // `Init` comes before the list is even asked for: not a sign of life.
                        let alive = !matches!(event, watcher::Event::Init);
                        let marks = match (keys, &event) {
                            (
                                Some(keys),
                                watcher::Event::Apply(obj) | watcher::Event::Delete(obj),
                            ) => {
                                // The object as it was too: a change can move it between keys.
                                let old = store2.get(obj.namespace().as_deref(), &obj.name_any());
                                let mut marks = keys(obj);
                                if let (Some(m), Some(old)) = (&mut marks, old)
                                    && let Some(more) = keys(&old)
                                {
                                    m.extend(more);
                                }
                                marks
                            }
                            // A (re-)list: everything, once it is complete.
                            (Some(_), watcher::Event::Init | watcher::Event::InitApply(_)) => {
                                Some(vec![])
                            }
                            _ => None,
                        };
                        writer.apply(event);
                        if done {
                            health2.synced.store(true, Ordering::Release);
                        }
                        if alive && health2.worked() {
                            tracing::info!(what, "watch recovered");
                        }
                        trigger.mark(marks);
                    }
                    Err(e) => {
                        metrics.watch_error(what, 1);
                        if health2.failed(e.to_string()) {
                            tracing::warn!(what, error = %e, "watch failed; retrying with backoff");
                        }
                    }
                }
            }
        });
        Self {
            store,
            health,
            task,
        }
    }

    /// True once the first full list has been received.
    pub fn ready(&self) -> bool {
        self.health.synced()
    }

    pub fn health(&self) -> &WatchHealth {
        &self.health
    }

    pub fn get(&self, namespace: Option<&str>, name: &str) -> Option<Arc<K>> {
        self.store.get(namespace, name)
    }

    pub fn all(&self) -> Vec<Arc<K>> {
        self.store.all()
    }

    /// See [`ObjectStore::generation`].
    pub fn generation(&self) -> u64 {
        self.store.generation()
    }

    /// The keys of the stored objects (see [`ObjectStore::keys`]).
    pub fn keys(&self) -> Vec<String> {
        self.store.keys()
    }

    /// The objects a pass over `work` reads (see [`ObjectStore::covered`]).
    pub fn covered(&self, work: &Work) -> Vec<Arc<K>> {
        self.store.covered(work)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn readiness_waits_for_first_lists_then_names_watches_failing_too_long() {
        let (a, b) = (WatchHealth::default(), WatchHealth::default());
        a.synced.store(true, Ordering::Release);
        assert_eq!(
            watch_readiness(&[("A", &a), ("B", &b)]),
            Err("waiting for the first list of B".to_owned())
        );
        b.synced.store(true, Ordering::Release);
        assert_eq!(watch_readiness(&[("A", &a), ("B", &b)]), Ok(None));
        // Failures within the grace are not reported: reconnecting takes seconds.
        assert!(b.failed("connection refused".into()), "first of a run");
        assert!(!b.failed("connection refused".into()));
        assert_eq!(watch_readiness(&[("A", &a), ("B", &b)]), Ok(None));
        let long_ago = |d: Duration| Instant::now() - d;
        *b.failing.lock().unwrap() = Some(Failing {
            since: long_ago(WATCH_FAILING_GRACE + Duration::from_secs(1)),
            last: Instant::now(),
            error: "403 Forbidden".into(),
        });
        let message = watch_readiness(&[("A", &a), ("B", &b)])
            .expect("the sync goes on")
            .expect("not ready");
        assert!(message.contains("B for 31 s (403 Forbidden)"), "{message}");
        assert!(!message.contains("A for"), "{message}");
        assert!(b.worked(), "an event ends the run");
        assert_eq!(watch_readiness(&[("A", &a), ("B", &b)]), Ok(None));
        // A watch that resumed yields no event until an object changes: the run is over when
        // the errors stop.
        *b.failing.lock().unwrap() = Some(Failing {
            since: long_ago(Duration::from_secs(120)),
            last: long_ago(WATCH_ERRORS_OVER + Duration::from_secs(1)),
            error: "connection refused".into(),
        });
        assert_eq!(watch_readiness(&[("A", &a), ("B", &b)]), Ok(None));
        assert!(b.failed("connection refused".into()), "a new run starts");
        assert_eq!(watch_readiness(&[("A", &a), ("B", &b)]), Ok(None));
    }

    #[test]
    fn marks_collapse_into_one_work_until_taken() {
        let t = Trigger::new(&Metrics::default());
        assert_eq!(t.take(), Work::Keys(BTreeSet::new()));
        t.mark(Some(vec!["default/a".into()]));
        t.mark(Some(vec!["default/b".into(), "default/a".into()]));
        t.mark(Some(vec![]));
        let work = t.take();
        assert!(work.covers("default/a") && work.covers("default/b"));
        assert!(!work.covers("default/c") && !work.is_all());
        assert_eq!(t.take(), Work::Keys(BTreeSet::new()), "taken: cleared");
        t.mark(Some(vec!["default/a".into()]));
        t.fire();
        t.mark(Some(vec!["default/b".into()]));
        assert_eq!(t.take(), Work::All, "everything stays everything");
        let mut w = Work::Keys(BTreeSet::from(["x".to_owned()]));
        w.merge(Work::Keys(BTreeSet::from(["y".to_owned()])));
        assert!(w.covers("x") && w.covers("y"));
        w.merge(Work::All);
        assert!(w.is_all() && w.covers("anything"));
    }
}
