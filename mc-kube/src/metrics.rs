//! Prometheus metrics, health and readiness, served over HTTP (`/metrics`, `/healthz`, `/readyz`).

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{Router, http::StatusCode, routing::get};

#[derive(Default)]
struct Inner {
    counters: BTreeMap<String, u64>,
    gauges: BTreeMap<String, f64>,
    /// Failed watch attempts by what is watched (every watch of the process has an entry).
    watch_errors: BTreeMap<&'static str, u64>,
    /// Why the controller is not ready; empty when it is.
    not_ready: Option<String>,
}

#[derive(Clone)]
pub struct Metrics(Arc<Mutex<Inner>>);

impl Default for Metrics {
    fn default() -> Self {
        Self(Arc::new(Mutex::new(Inner {
            not_ready: Some("starting".into()),
            ..Default::default()
        })))
    }
}

fn series(name: &str, labels: &[(&str, &str)]) -> String {
    if labels.is_empty() {
        return name.to_owned();
    }
    let l: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\"")))
        .collect();
    format!("{name}{{{}}}", l.join(","))
}

impl Metrics {
    fn add(&self, name: &str, labels: &[(&str, &str)], by: u64) {
        *self
            .0
            .lock()
            .expect("metrics")
            .counters
            .entry(series(name, labels))
            .or_default() += by;
    }

    /// Counts `by` failed attempts of the watch of `what` (0 registers the watch).
    pub fn watch_error(&self, what: &'static str, by: u64) {
        *self
            .0
            .lock()
            .expect("metrics")
            .watch_errors
            .entry(what)
            .or_default() += by;
    }

    pub fn inc(&self, name: &str, labels: &[(&str, &str)]) {
        self.add(name, labels, 1);
    }

    /// Sets a counter whose running total is kept elsewhere (the kernel's per-CPU counters).
    pub fn set_counter(&self, name: &str, labels: &[(&str, &str)], total: u64) {
        self.0
            .lock()
            .expect("metrics")
            .counters
            .insert(series(name, labels), total);
    }

    pub fn gauge(&self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.0
            .lock()
            .expect("metrics")
            .gauges
            .insert(series(name, labels), value);
    }

    /// Drops the series of `name` (counter or gauge) whose labels include `label` = `value`
    /// (a peer that is gone).
    pub fn forget(&self, name: &str, label: &str, value: &str) {
        let needle = series("", &[(label, value)]);
        let needle = needle.trim_start_matches('{').trim_end_matches('}');
        let mut inner = self.0.lock().expect("metrics");
        let gone = |k: &String| {
            k.split_once('{').is_some_and(|(n, l)| {
                n == name && l.trim_end_matches('}').split(',').any(|p| p == needle)
            })
        };
        inner.counters.retain(|k, _| !gone(k));
        inner.gauges.retain(|k, _| !gone(k));
    }

    /// One write to an API server.
    pub fn write(&self, kind: &str, op: &str, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        self.add(
            "strait_mc_api_writes_total",
            &[("kind", kind), ("op", op), ("result", result)],
            1,
        );
    }

    /// One pass of a sync loop.
    pub fn sync(&self, domain: &str, took: Duration, failures: usize) {
        let result = if failures == 0 { "ok" } else { "error" };
        self.add(
            "strait_mc_reconcile_total",
            &[("loop", domain), ("result", result)],
            1,
        );
        self.add(
            "strait_mc_reconcile_micros_total",
            &[("loop", domain)],
            took.as_micros() as u64,
        );
    }

    /// Readiness from a loop's watches (see [`crate::watch_readiness`]): false while a first
    /// list is missing (the loop waits), true once they are in, with readiness saying which
    /// watch has been failing too long, if any.
    pub fn set_ready(&self, not_ready: Option<String>) {
        self.0.lock().expect("metrics").not_ready = not_ready;
    }

    pub fn render(&self) -> String {
        let inner = self.0.lock().expect("metrics");
        let mut out = String::new();
        let mut typed = std::collections::BTreeSet::new();
        for (series, v) in &inner.counters {
            let name = series.split('{').next().unwrap_or(series);
            if typed.insert(name.to_owned()) {
                let _ = writeln!(out, "# TYPE {name} counter");
            }
            let _ = writeln!(out, "{series} {v}");
        }
        let watch_errors = &inner.watch_errors;
        if !watch_errors.is_empty() {
            let _ = writeln!(out, "# TYPE strait_mc_watch_errors_total counter");
        }
        for (what, n) in watch_errors {
            let _ = writeln!(
                out,
                "{} {n}",
                series("strait_mc_watch_errors_total", &[("watch", what)])
            );
        }
        for (series, v) in &inner.gauges {
            let name = series.split('{').next().unwrap_or(series);
            if typed.insert(name.to_owned()) {
                let _ = writeln!(out, "# TYPE {name} gauge");
            }
            let _ = writeln!(out, "{series} {v}");
        }
        out
    }

    /// Serves `/healthz`, `/readyz` and `/metrics` on `addr` (`:8080` means every address).
    pub async fn serve(self, addr: &str) -> anyhow::Result<()> {
        let addr = if addr.starts_with(':') {
            format!("0.0.0.0{addr}")
        } else {
            addr.to_owned()
        };
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .map_err(|e| anyhow::anyhow!("cannot serve health and metrics on {addr}: {e}"))?;
        tracing::info!(addr, "serving /healthz, /readyz and /metrics");
        let m1 = self.clone();
        let m2 = self.clone();
        let app = Router::new()
            .route("/healthz", get(|| async { "ok\n" }))
            .route(
                "/readyz",
                get(move || {
                    let m = m1.clone();
                    async move {
                        match m.0.lock().expect("metrics").not_ready.clone() {
                            None => (StatusCode::OK, "ok\n".to_owned()),
                            Some(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
                        }
                    }
                }),
            )
            .route(
                "/metrics",
                get(move || {
                    let m = m2.clone();
                    async move { m.render() }
                }),
            );
        axum::serve(listener, app).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text() {
        let m = Metrics::default();
        m.write("ResourceImport", "apply", true);
        m.write("ResourceImport", "apply", true);
        m.gauge("strait_mc_member_clusters", &[("state", "ready")], 2.0);
        let text = m.render();
        assert!(text.contains("# TYPE strait_mc_api_writes_total counter"));
        assert!(text.contains(
            "strait_mc_api_writes_total{kind=\"ResourceImport\",op=\"apply\",result=\"ok\"} 2"
        ));
        assert!(text.contains("strait_mc_member_clusters{state=\"ready\"} 2"));
    }

    #[test]
    fn a_gone_peers_series_are_forgotten() {
        let m = Metrics::default();
        m.gauge(
            "strait_tunnel_up",
            &[("cluster", "west"), ("gateway", "1.1.1.1")],
            1.0,
        );
        m.gauge("strait_tunnel_up", &[("cluster", "westward")], 1.0);
        m.set_counter("strait_tunnel_probes_sent_total", &[("cluster", "west")], 3);
        m.forget("strait_tunnel_up", "cluster", "west");
        let text = m.render();
        assert!(
            !text.contains("strait_tunnel_up{cluster=\"west\""),
            "{text}"
        );
        assert!(
            text.contains("strait_tunnel_up{cluster=\"westward\"} 1"),
            "{text}"
        );
        assert!(text.contains("strait_tunnel_probes_sent_total{cluster=\"west\"} 3"));
    }
}
