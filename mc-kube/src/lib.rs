//! Strait's Kubernetes runtime, shared by the controllers and the agent: watch-backed stores
//! that wake a loop ([`watch`]), the writer that makes the API equal to a desired state
//! ([`write`]), the object store behind the watches ([`store`]), the one control loop that
//! runs them by key ([`driver`]), and Prometheus metrics with health and readiness
//! ([`metrics`]).

pub mod driver;
pub mod metrics;
pub mod store;
pub mod watch;
pub mod write;

pub use driver::{Driver, RESYNC_SLICE, Reconciler};
pub use metrics::Metrics;
pub use watch::{Trigger, Watched, Work, watch_readiness};
pub use write::{Op, StatusPacer, Then, Writer, is_managed, managed_labels, run_all};

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

/// Resolves when the process is asked to stop: SIGTERM (what the kubelet sends a container's
/// PID 1 first) or SIGINT (Ctrl-C). Returns the signal's name.
pub async fn shutdown_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = tokio::signal::ctrl_c() => "SIGINT",
        },
        // No SIGTERM handler could be installed: Ctrl-C still works.
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            "SIGINT"
        }
    }
}
