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
                    self.metrics.sync(self.domain, started.elapsed(), failures);
                }
            }
        }
    }
}
