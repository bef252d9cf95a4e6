//! The one control loop of the leader, the member and the agent. It waits for a watch event or
//! a tick, lets a burst of events settle, and runs a pass over the [`Work`] the events marked,
//! plus whatever the previous pass left for later. Everything is recomputed after a failed
//! write and at least every `full_resync` (the safety net of an incremental loop: an event
//! whose key was computed wrong, or a change nothing watches, is still corrected).

use std::time::{Duration, Instant};

use crate::{Metrics, Trigger, Work, watch::WatchHealth};

/// A controller the driver runs: its watches (the pass waits for their first lists) and its pass.
pub trait Reconciler {
    /// The watches whose health makes readiness, with the names readiness gives them.
    fn watches(&self) -> Vec<(&'static str, &WatchHealth)>;
    /// Recomputes and writes `work`; returns the failed writes.
    fn pass(&mut self, work: Work) -> impl std::future::Future<Output = usize> + Send;
    /// What the last pass left for the next one.
    fn later(&mut self) -> Work;
}

/// What a pass did.
pub enum Step {
    /// The loop's watches have not delivered their first lists (or readiness says why not):
    /// nothing was done, the work waits for the next pass.
    NotReady,
    /// Done; `failures` failed writes (everything is recomputed next time) and `later` the work
    /// the pass left for the next one (statuses it held back, objects to look at again).
    Done { failures: usize, later: Work },
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

impl Driver {
    /// Runs a [`Reconciler`] for good.
    pub async fn reconcile(self, r: &mut impl Reconciler) {
        let metrics = self.metrics.clone();
        self.run(async |work| {
            if !metrics.watches_ready(&r.watches()) {
                return Step::NotReady;
            }
            let failures = r.pass(work).await;
            Step::Done {
                failures,
                later: r.later(),
            }
        })
        .await;
    }

    pub async fn run(self, mut pass: impl AsyncFnMut(Work) -> Step) {
        let mut tick = tokio::time::interval(self.tick);
        let mut last_full: Option<Instant> = None;
        let mut later = Work::All;
        loop {
            tokio::select! {
                _ = self.trigger.wait() => {}
                _ = tick.tick() => {}
            }
            tokio::time::sleep(self.settle).await;
            let mut work = self.trigger.take();
            work.merge(std::mem::take(&mut later));
            if last_full.is_none_or(|at| at.elapsed() >= self.full_resync) {
                work = Work::All;
            }
            let all = work.is_all();
            let keys = match &work {
                Work::All => 0,
                Work::Keys(k) => k.len(),
            };
            let started = Instant::now();
            match pass(work.clone()).await {
                Step::NotReady => later = work,
                Step::Done {
                    failures,
                    later: left,
                } => {
                    if all {
                        last_full = Some(started);
                    }
                    later = if failures > 0 { Work::All } else { left };
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
                }
            }
        }
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
    }

    impl Reconciler for Recorder {
        fn watches(&self) -> Vec<(&'static str, &WatchHealth)> {
            vec![("Things", &*self.health)]
        }

        fn pass(&mut self, work: Work) -> impl std::future::Future<Output = usize> + Send {
            let mut seen = self.seen.lock().unwrap();
            let failures = usize::from(self.fail_at.contains(&seen.len()));
            seen.push(work);
            async move { failures }
        }

        fn later(&mut self) -> Work {
            Work::default()
        }
    }

    fn keys(k: &[&str]) -> Work {
        Work::Keys(k.iter().map(|s| (*s).to_owned()).collect())
    }

    #[tokio::test]
    async fn marks_wait_for_the_first_lists_and_a_failed_pass_is_followed_by_everything() {
        let metrics = Metrics::default();
        let trigger = Trigger::new(&metrics);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let health = Arc::new(WatchHealth::default());
        let mut r = Recorder {
            health: health.clone(),
            fail_at: vec![1],
            seen: seen.clone(),
        };
        let driver = Driver {
            domain: "test",
            trigger: trigger.clone(),
            metrics: metrics.clone(),
            // Only the first tick (at once) comes within the test.
            tick: Duration::from_secs(3600),
            settle: Duration::from_millis(1),
            full_resync: Duration::from_secs(3600),
        };
        let passes = |n: usize| {
            let seen = seen.clone();
            async move {
                for _ in 0..400 {
                    if seen.lock().unwrap().len() >= n {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                panic!("fewer than {n} passes: {:?}", seen.lock().unwrap());
            }
        };
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
}
