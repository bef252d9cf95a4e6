//! The one control loop of the leader, the member and the agent. It waits for a watch event or
//! a tick, lets a burst of events settle, and runs a pass over the [`Work`] the events marked,
//! plus whatever the previous pass left for later. A loop that names the keys of its failed
//! writes ([`Reconciler::failed_keys`]) has each of them retried alone with a growing delay;
//! for one that does not, everything is recomputed after a failed write. Everything is
//! recomputed at least every `full_resync` (the safety net of an incremental loop: an event
//! whose key was computed wrong, or a change nothing watches, is still corrected).
//!
//! A periodic resync goes through every key the stores know in slices of [`RESYNC_SLICE`] keys,
//! one slice per pass beside the marked keys: a Service exported during a resync waits for one
//! slice, not for the whole ClusterSet (a pass over 1000 Services takes 40-70 ms).

use std::{
    collections::{BTreeMap, BTreeSet, VecDeque},
    time::{Duration, Instant},
};

use crate::{Metrics, Trigger, Work, watch::WatchHealth};

/// How many keys of a periodic resync one pass takes.
pub const RESYNC_SLICE: usize = 50;

/// The first retry of a key whose write failed waits this long; each further failure of it
/// doubles the wait, up to [`RETRY_MAX`] (as kube-runtime's controllers requeue one object).
pub const RETRY_FIRST: Duration = Duration::from_millis(500);
pub const RETRY_MAX: Duration = Duration::from_secs(60);

/// The keys whose writes failed, each with its failures in a row and when it is retried.
#[derive(Debug, Default)]
struct Retries(BTreeMap<String, (u32, Instant)>);

impl Retries {
    /// After a pass over `ran`: the keys in `failed` wait longer; the others of `ran` (every
    /// key, for a pass over everything) succeeded and are forgotten.
    fn settle(&mut self, ran: &Work, failed: &BTreeSet<String>, now: Instant) {
        match ran {
            Work::All => self.0.retain(|k, _| failed.contains(k)),
            Work::Keys(keys) => self
                .0
                .retain(|k, _| !keys.contains(k) || failed.contains(k)),
        }
        for k in failed {
            let e = self.0.entry(k.clone()).or_insert((0, now));
            e.0 += 1;
            let delay = RETRY_FIRST
                .saturating_mul(1u32 << (e.0 - 1).min(16))
                .min(RETRY_MAX);
            e.1 = now + delay;
        }
    }

    /// The keys whose retry is due at `now`.
    fn due(&self, now: Instant) -> impl Iterator<Item = &String> {
        self.0
            .iter()
            .filter(move |(_, (_, at))| *at <= now)
            .map(|(k, _)| k)
    }

    /// When the next retry is due.
    fn next(&self) -> Option<Instant> {
        self.0.values().map(|(_, at)| *at).min()
    }
}

/// A controller the driver runs: its watches (a pass waits for their first lists) and its pass.
pub trait Reconciler {
    /// The watches whose health makes readiness, with the names readiness gives them.
    fn watches(&self) -> Vec<(&'static str, &WatchHealth)>;
    /// Recomputes and writes `work`; returns the failed writes.
    fn pass(&mut self, work: Work) -> impl std::future::Future<Output = usize> + Send;
    /// What the last pass left for the next one.
    fn later(&mut self) -> Work;
    /// Every key the stores know, for a periodic resync in slices; `None` (a loop that is not
    /// keyed) recomputes everything in one pass instead.
    fn keys(&self) -> Option<BTreeSet<String>> {
        None
    }
    /// When the loop has work that is waiting for a time rather than an event (held statuses,
    /// see [`crate::StatusPacer`]): the driver wakes it then.
    fn wake_at(&self) -> Option<Instant> {
        None
    }
    /// Why the loop is not ready after its last pass, beyond its watches (`/readyz`).
    fn not_ready(&self) -> Option<String> {
        None
    }
    /// The keys of the last pass's failed writes, where the loop knows them: each is retried
    /// alone, after [`RETRY_FIRST`] doubling to [`RETRY_MAX`] while it keeps failing, and the
    /// other keys go on as usual. `None` (the default), or no key for failed writes: a pass
    /// with failures is followed by a pass over everything.
    fn failed_keys(&mut self) -> Option<BTreeSet<String>> {
        None
    }
}

pub struct Driver {
    /// For the sync metrics (`strait_mc_syncs_total{domain}`...).
    pub domain: &'static str,
    pub trigger: Trigger,
    pub metrics: Metrics,
    /// A pass runs at least this often, with the work left for later (and time-based checks).
    pub tick: Duration,
    /// Events closer together than this fall into one pass.
    pub settle: Duration,
    pub full_resync: Duration,
}

/// A periodic resync under way: the keys still to go, and when it began.
struct Resync {
    began: Instant,
    keys: VecDeque<String>,
}

/// What the driver carries from one pass to the next.
struct State {
    /// When everything was last recomputed (in one pass or in slices).
    last_full: Option<Instant>,
    /// The work left for the next pass (by the loop, or because it could not run).
    later: Work,
    resync: Option<Resync>,
    retries: Retries,
    /// Whether the last attempt found the watches not ready (nothing ran).
    waiting: bool,
    /// When the last pass began.
    last_pass: Option<Instant>,
}

impl Default for State {
    fn default() -> Self {
        Self {
            last_full: None,
            // The first pass recomputes everything.
            later: Work::All,
            resync: None,
            retries: Retries::default(),
            waiting: false,
            last_pass: None,
        }
    }
}

impl State {
    /// When to wake without an event: the loop's held work or the next retry. A wake-up time no
    /// later than the last pass's start is stale (that pass did not get to the held work, e.g.
    /// without a connection): the next event or tick brings it, rather than a pass every
    /// `settle`. Nothing runs while waiting for the watches anyway.
    fn wake_at(&self, r: &impl Reconciler) -> Option<Instant> {
        [r.wake_at(), self.retries.next()]
            .into_iter()
            .flatten()
            .min()
            .filter(|at| !self.waiting && self.last_pass.is_none_or(|p| *at > p))
    }
}

impl Driver {
    /// Runs a [`Reconciler`] for good.
    pub async fn reconcile(self, r: &mut impl Reconciler) {
        let mut tick = tokio::time::interval(self.tick);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut state = State::default();
        loop {
            // During a resync the next slice does not wait for an event (unless the loop is
            // waiting for its watches).
            if state.resync.is_none() || state.waiting {
                self.wait(&mut tick, state.wake_at(r)).await;
            }
            tokio::time::sleep(self.settle).await;
            let work = self.next_work(r, &mut state);
            let failing_watches = match crate::watch_readiness(&r.watches()) {
                Ok(failing) => failing,
                Err(why) => {
                    // Nothing is done; the work waits for the next pass.
                    self.metrics.set_ready(Some(why));
                    state.later = work;
                    state.waiting = true;
                    continue;
                }
            };
            state.waiting = false;
            self.run_pass(r, work, failing_watches, &mut state).await;
        }
    }

    /// Waits for a watch event, the tick, or `wake`.
    async fn wait(&self, tick: &mut tokio::time::Interval, wake: Option<Instant>) {
        tokio::select! {
            _ = self.trigger.wait() => {}
            _ = tick.tick() => {}
            _ = async {
                match wake {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            } => {}
        }
    }

    /// The work of the next pass: what the watches marked, what the last pass left, the retries
    /// that are due, and everything when it is time (at first, or the next slice of a periodic
    /// resync, which this starts when `full_resync` has passed).
    fn next_work(&self, r: &impl Reconciler, state: &mut State) -> Work {
        let mut work = self.trigger.take();
        work.merge(std::mem::take(&mut state.later));
        let now = Instant::now();
        for k in state.retries.due(now) {
            work.add(k.clone());
        }
        match state.last_full {
            None => work = Work::All,
            Some(at) if state.resync.is_none() && at.elapsed() >= self.full_resync => {
                match r.keys() {
                    Some(keys) => {
                        state.resync = Some(Resync {
                            began: Instant::now(),
                            keys: keys.into_iter().collect(),
                        })
                    }
                    None => work = Work::All,
                }
            }
            Some(_) => {}
        }
        if let Some(rs) = &mut state.resync {
            if work.is_all() {
                // This pass recomputes everything anyway.
                state.resync = None;
            } else {
                let n = rs.keys.len().min(RESYNC_SLICE);
                for k in rs.keys.drain(..n) {
                    work.add(k);
                }
            }
        }
        work
    }

    /// Runs one pass over `work` and records it: metrics, readiness (`failing_watches` beside
    /// the loop's own), when everything was last recomputed, and what the next pass takes
    /// (what the loop left, with the failed keys' retries; or everything, after failures the
    /// loop cannot name).
    async fn run_pass(
        &self,
        r: &mut impl Reconciler,
        work: Work,
        failing_watches: Option<String>,
        state: &mut State,
    ) {
        let all = work.is_all();
        let keys = match &work {
            Work::All => 0,
            Work::Keys(k) => k.len(),
        };
        let started = Instant::now();
        state.last_pass = Some(started);
        let ran = work.clone();
        let failures = r.pass(work).await;
        let left = r.later();
        let took = started.elapsed();
        tracing::debug!(
            domain = self.domain,
            all,
            keys,
            failures,
            ms = took.as_secs_f64() * 1e3,
            "pass"
        );
        self.metrics.sync(self.domain, took, failures);
        // Readiness is set once per pass, after it: never Ready in the middle of a pass
        // that then fails.
        self.metrics.set_ready(r.not_ready().or(failing_watches));
        if all {
            state.last_full = Some(started);
        } else if let Some(rs) = state.resync.take_if(|rs| rs.keys.is_empty()) {
            state.last_full = Some(rs.began);
        }
        let failed = if failures > 0 {
            r.failed_keys().filter(|k| !k.is_empty())
        } else {
            Some(BTreeSet::new())
        };
        state.later = match failed {
            Some(keys) => {
                state.retries.settle(&ran, &keys, Instant::now());
                left
            }
            None => Work::All,
        };
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Records the work of every pass and fails the passes whose index is in `fail_at`.
    struct Recorder {
        health: Arc<WatchHealth>,
        fail_at: Vec<usize>,
        seen: Arc<Mutex<Vec<Work>>>,
        keys: Option<BTreeSet<String>>,
        wake: Arc<Mutex<Option<Instant>>>,
        /// A key whose write always fails, named by `failed_keys`; when each pass ran.
        broken: Option<String>,
        at: Arc<Mutex<Vec<Instant>>>,
    }

    impl Reconciler for Recorder {
        fn watches(&self) -> Vec<(&'static str, &WatchHealth)> {
            vec![("Things", &*self.health)]
        }

        fn pass(&mut self, work: Work) -> impl std::future::Future<Output = usize> + Send {
            let mut seen = self.seen.lock().unwrap();
            let broken = self.broken.as_ref().is_some_and(|b| work.covers(b));
            let failures = usize::from(self.fail_at.contains(&seen.len()) || broken);
            seen.push(work);
            self.at.lock().unwrap().push(Instant::now());
            async move { failures }
        }

        fn failed_keys(&mut self) -> Option<BTreeSet<String>> {
            self.broken.clone().map(|b| BTreeSet::from([b]))
        }

        fn later(&mut self) -> Work {
            Work::default()
        }

        fn keys(&self) -> Option<BTreeSet<String>> {
            self.keys.clone()
        }

        fn wake_at(&self) -> Option<Instant> {
            *self.wake.lock().unwrap()
        }
    }

    /// Waits until `seen` holds `n` passes.
    async fn passes(seen: &Mutex<Vec<Work>>, n: usize) {
        for _ in 0..400 {
            if seen.lock().unwrap().len() >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("fewer than {n} passes: {:?}", seen.lock().unwrap());
    }

    /// A driver whose tick comes only once (at once) within a test.
    fn driver(trigger: &Trigger, metrics: &Metrics, full_resync: Duration) -> Driver {
        Driver {
            domain: "test",
            trigger: trigger.clone(),
            metrics: metrics.clone(),
            tick: Duration::from_secs(3600),
            settle: Duration::from_millis(1),
            full_resync,
        }
    }

    /// A recorder with no failures, and its record of passes.
    fn recorder(
        health: &Arc<WatchHealth>,
        keys: Option<BTreeSet<String>>,
    ) -> (Recorder, Arc<Mutex<Vec<Work>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let r = Recorder {
            health: health.clone(),
            fail_at: vec![],
            seen: seen.clone(),
            keys,
            wake: Default::default(),
            broken: None,
            at: Default::default(),
        };
        (r, seen)
    }

    fn keys(k: &[&str]) -> Work {
        Work::Keys(k.iter().map(|s| (*s).to_owned()).collect())
    }

    #[tokio::test]
    async fn marks_wait_for_the_first_lists_and_a_failed_pass_is_followed_by_everything() {
        let metrics = Metrics::default();
        let trigger = Trigger::new(&metrics);
        let health = Arc::new(WatchHealth::default());
        let (mut r, seen) = recorder(&health, None);
        r.fail_at = vec![1];
        let driver = driver(&trigger, &metrics, Duration::from_secs(3600));
        let passes = |n: usize| passes(&seen, n);
        let script = async {
            trigger.mark(Some(vec!["default/early".into()]));
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert!(
                seen.lock().unwrap().is_empty(),
                "no pass before the first list"
            );
            health.set_synced();
            trigger.mark(Some(vec![]));
            passes(1).await;
            trigger.mark(Some(vec!["default/a".into()]));
            passes(2).await;
            trigger.mark(Some(vec!["default/b".into()]));
            passes(3).await;
            trigger.mark(Some(vec!["default/c".into()]));
            passes(4).await;
        };
        tokio::select! {
            _ = driver.reconcile(&mut r) => unreachable!("the driver runs for good"),
            _ = script => {}
        }
        let seen = seen.lock().unwrap().clone();
        assert_eq!(
            seen,
            [
                Work::All,
                keys(&["default/a"]),
                Work::All,
                keys(&["default/c"])
            ],
            "first everything (the unready passes kept it), then the marks; after the failed \
             second pass everything again"
        );
    }

    #[tokio::test]
    async fn a_periodic_resync_goes_through_every_key_in_slices_beside_the_marks() {
        let metrics = Metrics::default();
        let trigger = Trigger::new(&metrics);
        let health = Arc::new(WatchHealth::default());
        health.set_synced();
        let all_keys: Vec<String> = (0..2 * RESYNC_SLICE + 20)
            .map(|i| format!("k{i:03}"))
            .collect();
        let (mut r, seen) = recorder(&health, Some(all_keys.iter().cloned().collect()));
        let driver = driver(&trigger, &metrics, Duration::from_millis(400));
        let script = async {
            passes(&seen, 1).await;
            trigger.mark(Some(vec!["m1".into()]));
            passes(&seen, 2).await;
            // The resync is due: the next mark starts it, and its slices follow without events.
            tokio::time::sleep(Duration::from_millis(450)).await;
            trigger.mark(Some(vec!["m2".into()]));
            passes(&seen, 5).await;
            tokio::time::sleep(Duration::from_millis(30)).await;
            assert_eq!(seen.lock().unwrap().len(), 5, "the resync is over");
            trigger.mark(Some(vec!["m3".into()]));
            passes(&seen, 6).await;
        };
        tokio::select! {
            _ = driver.reconcile(&mut r) => unreachable!("the driver runs for good"),
            _ = script => {}
        }
        let seen = seen.lock().unwrap().clone();
        let slice = |from: usize, to: usize, mark: Option<&str>| {
            Work::Keys(
                all_keys[from..to]
                    .iter()
                    .cloned()
                    .chain(mark.map(str::to_owned))
                    .collect(),
            )
        };
        let n = RESYNC_SLICE;
        assert_eq!(
            seen,
            [
                Work::All,
                keys(&["m1"]),
                slice(0, n, Some("m2")),
                slice(n, 2 * n, None),
                slice(2 * n, 2 * n + 20, None),
                keys(&["m3"]),
            ],
            "everything at first; then the resync in slices (the first with the mark that came)"
        );
    }

    #[tokio::test]
    async fn a_loop_is_woken_when_its_held_work_is_due_and_not_again_for_a_stale_time() {
        let metrics = Metrics::default();
        let trigger = Trigger::new(&metrics);
        let health = Arc::new(WatchHealth::default());
        health.set_synced();
        let (mut r, seen) = recorder(&health, None);
        let wake = r.wake.clone();
        let driver = driver(&trigger, &metrics, Duration::from_secs(3600));
        let script = async {
            passes(&seen, 1).await;
            let due = Instant::now() + Duration::from_millis(100);
            *wake.lock().unwrap() = Some(due);
            trigger.mark(Some(vec!["a".into()]));
            passes(&seen, 2).await;
            assert!(Instant::now() < due, "the mark's pass came at once");
            // No event: the wake-up brings the next pass.
            passes(&seen, 3).await;
            assert!(Instant::now() >= due, "woken at the time asked, not before");
            // The time stays asked for but is now older than the last pass: no more passes.
            tokio::time::sleep(Duration::from_millis(60)).await;
            assert_eq!(
                seen.lock().unwrap().len(),
                3,
                "a stale wake-up time is ignored"
            );
        };
        tokio::select! {
            _ = driver.reconcile(&mut r) => unreachable!("the driver runs for good"),
            _ = script => {}
        }
    }

    #[tokio::test]
    async fn a_key_that_keeps_failing_is_retried_alone_ever_later_and_the_others_go_on() {
        let metrics = Metrics::default();
        let trigger = Trigger::new(&metrics);
        let health = Arc::new(WatchHealth::default());
        health.set_synced();
        let (mut r, seen) = recorder(&health, None);
        r.broken = Some("bad".into());
        let at = r.at.clone();
        let driver = driver(&trigger, &metrics, Duration::from_secs(3600));
        let script = async {
            passes(&seen, 1).await;
            trigger.mark(Some(vec!["bad".into(), "a".into()]));
            passes(&seen, 2).await;
            // Other keys converge in one pass each, while "bad" waits for its retries.
            trigger.mark(Some(vec!["b".into()]));
            passes(&seen, 3).await;
            // Retries after 0.5 s, then 1 s more, then 2 s more (from the failed pass).
            for _ in 0..3 {
                let n = seen.lock().unwrap().len();
                for _ in 0..1000 {
                    if seen.lock().unwrap().len() > n {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        };
        tokio::select! {
            _ = driver.reconcile(&mut r) => unreachable!("the driver runs for good"),
            _ = script => {}
        }
        let seen = seen.lock().unwrap().clone();
        let at = at.lock().unwrap().clone();
        assert_eq!(
            seen[..6],
            [
                Work::All,
                keys(&["a", "bad"]),
                keys(&["b"]),
                keys(&["bad"]),
                keys(&["bad"]),
                keys(&["bad"]),
            ],
            "no pass over everything because of the failing key; each retry of it alone"
        );
        // The first pass over everything failed too ("bad" is among everything): its retries
        // count from there. Each wait is twice the one before.
        let gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
        let retry_gaps = [at[3] - at[1], at[4] - at[3], at[5] - at[4]];
        for (gap, want) in retry_gaps.iter().zip([1000, 2000, 4000]) {
            let want = Duration::from_millis(want);
            assert!(
                *gap >= want && *gap < want + Duration::from_millis(300),
                "retry gaps {retry_gaps:?} (all gaps {gaps:?}): wanted about {want:?}"
            );
        }
    }
}
