//! Strait's Kubernetes runtime, shared by the controllers and the agent: watch-backed stores
//! that wake a loop ([`watch`]), the writer that makes the API equal to a desired state
//! ([`write`]), the object store behind the watches ([`store`]), what a pass recomputes
//! ([`work`]), the one control loop that runs them by key ([`driver`]), and Prometheus metrics
//! with health and readiness ([`metrics`]).
//!
//! The modules depend on each other one way only: `work` and `metrics` on none of the others,
//! `store` on `work`, `watch` on `store`, `work` and `metrics`, `write` on `metrics`, and
//! `driver` on `watch`, `work` and `metrics`.

pub mod driver;
pub mod metrics;
pub mod store;
pub mod watch;
pub mod work;
pub mod write;

pub use driver::{Driver, RESYNC_SLICE, Reconciler};
pub use metrics::Metrics;
pub use watch::{Trigger, Watched, watch_readiness};
pub use work::Work;
pub use write::{
    Op, StatusPacer, Then, Writer, is_managed, managed_labels, run_all, run_all_failed,
};

/// A request that gets no byte for this long fails: an API server gone without closing the
/// connection, or one that took a request and never answered it (kube sets no read timeout by
/// default). Watches end sooner by themselves
/// (`WATCH_TIMEOUT_SECS`), so an idle watch is never cut by it.
pub const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
const _: () = assert!((watch::WATCH_TIMEOUT_SECS as u64) < READ_TIMEOUT.as_secs());

/// A client from a kubeconfig file, or from the in-cluster configuration when there is none.
pub async fn client(kubeconfig: Option<&std::path::PathBuf>) -> anyhow::Result<kube::Client> {
    use anyhow::Context as _;
    let mut config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?
        }
        None => kube::Config::infer()
            .await
            .context("no --kubeconfig and no in-cluster configuration")?,
    };
    with_read_timeout(&mut config);
    Ok(kube::Client::try_from(config)?)
}

/// [`READ_TIMEOUT`] on a client's configuration, counted from each request, not from when its
/// pooled connection went idle (which would fail a request on a connection idle for 30 s before
/// any answer could come).
pub fn with_read_timeout(config: &mut kube::Config) {
    config.read_timeout = Some(READ_TIMEOUT);
    config.reset_reader_on_write = true;
}

/// The process's stop signals: SIGTERM (what the kubelet sends a container's PID 1 first) and
/// SIGINT (Ctrl-C), caught from the moment [`Shutdown::listen`] runs. Listen first thing at
/// start: the kernel drops a signal PID 1 of a container has no handler for, so a SIGTERM that
/// arrived while the process was still starting (loading its programs, its first requests) was
/// lost, and the kubelet killed the Pod after its 30 s grace period.
pub struct Shutdown {
    term: Option<tokio::signal::unix::Signal>,
    int: Option<tokio::signal::unix::Signal>,
}

impl Shutdown {
    /// Installs the handlers (inside a Tokio runtime). One that cannot be installed is logged
    /// and never fires.
    pub fn listen() -> Self {
        use tokio::signal::unix::{SignalKind, signal};
        let install = |kind, name: &str| {
            signal(kind)
                .inspect_err(|e| tracing::warn!(signal = name, error = %e, "cannot catch"))
                .ok()
        };
        Self {
            term: install(SignalKind::terminate(), "SIGTERM"),
            int: install(SignalKind::interrupt(), "SIGINT"),
        }
    }

    /// Resolves at the next stop signal (also one that came before this call, since
    /// [`Shutdown::listen`]). Returns the signal's name.
    pub async fn recv(&mut self) -> &'static str {
        async fn next(s: &mut Option<tokio::signal::unix::Signal>) {
            match s {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            _ = next(&mut self.term) => "SIGTERM",
            _ = next(&mut self.int) => "SIGINT",
        }
    }
}
