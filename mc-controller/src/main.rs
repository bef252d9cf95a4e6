//! `mc-controller leader|member` — the multi-cluster control plane (see docs/design.md §3).

use std::{path::PathBuf, time::Duration};

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use k8s_openapi::jiff::SignedDuration;
use mc_api::config::MultiClusterConfig;
use mc_controller::{
    leader::{self, members::Liveness},
    member, webhook,
};
use mc_kube::{Metrics, Trigger};

#[derive(Parser)]
#[command(version, about = "Strait multi-cluster controller")]
struct Cli {
    #[command(subcommand)]
    role: Role,
}

#[derive(Subcommand)]
enum Role {
    /// Run the leader controllers in the Common Area namespace.
    Leader(Common),
    /// Run the member controllers.
    Member {
        #[command(flatten)]
        common: Common,
        /// Seconds between two heartbeats (MemberClusterAnnounce updates).
        #[arg(long, default_value_t = 10)]
        heartbeat_interval: u64,
    },
}

#[derive(Args)]
struct Common {
    /// Kubeconfig of this cluster; in-cluster configuration when absent.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// The controller's namespace (leader: the Common Area; member: where its ClusterSet,
    /// Gateway and ClusterInfoImports live). Default: POD_NAMESPACE, else the documented one.
    #[arg(long, env = "POD_NAMESPACE")]
    namespace: Option<String>,
    /// The MultiClusterConfig file (the ConfigMap key controller_manager_config.yaml).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Overrides health.healthProbeBindAddress (where /healthz, /readyz and /metrics are served).
    #[arg(long)]
    health_addr: Option<String>,
    /// Leader: seconds without a heartbeat after which a member is Disconnected.
    #[arg(long, default_value_t = 25)]
    member_timeout: i64,
    /// Leader: seconds a member may stay Disconnected before its endpoints are withdrawn.
    #[arg(long, default_value_t = 60)]
    withdraw_after: i64,
    /// Where the admission webhooks listen (HTTPS). Default: every address, port webhook.port
    /// of the config file (9443).
    #[arg(long)]
    webhook_addr: Option<String>,
    /// Another DNS name or IP address for the webhooks' serving certificate (repeatable), for
    /// API servers that reach the webhooks by URL rather than through the Service.
    #[arg(long)]
    webhook_host: Vec<String>,
    /// Log as JSON lines.
    #[arg(long)]
    log_json: bool,
}

fn load_config(path: Option<&PathBuf>) -> anyhow::Result<MultiClusterConfig> {
    match path {
        None => Ok(MultiClusterConfig::default()),
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("reading the controller config {}", p.display()))?;
            MultiClusterConfig::parse(&text).with_context(|| format!("in {}", p.display()))
        }
    }
}

fn init_logs(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "info,kube_runtime=warn,kube_client=warn".into());
    use std::io::IsTerminal as _;
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stdout().is_terminal());
    if json {
        b.json().init();
    } else {
        b.init();
    }
}

fn main() -> anyhow::Result<()> {
    one_heap_arena();
    // Two runtime workers whatever the Node's core count: a controller's work is a few tasks
    // deep, and every worker costs memory.
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(run())
}

/// One glibc heap arena for the whole process, set before any thread starts. By default glibc
/// gives each new thread an arena of its own on its first allocation (up to eight per core), and
/// the runtime's workers and blocking threads each fill and fragment theirs during a burst: at
/// 1000 Services the exporting member kept 51-52 MiB resident (62-65 at its peak) against 47-48
/// (55-57) with one arena, and the controllers' CPU in the burst and the export latency did not
/// change (docs/benchmarks.md, ninth series).
fn one_heap_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets a glibc tunable; it is called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// Every 10 s, returns the heap's free pages to the kernel. A burst of changes (a thousand
/// exports at once) leaves glibc's heap holding many MiB freed in the middle of the heap, which
/// glibc keeps resident until told otherwise: without this, the controller's resident memory
/// stays at its largest burst so far, not what it holds now. (jemalloc and mimalloc were both
/// measured: each left more resident than glibc with this.)
async fn give_back_free_heap() {
    let mut tick = tokio::time::interval(Duration::from_secs(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: malloc_trim only takes glibc's own arena locks; it has no preconditions.
        unsafe {
            libc::malloc_trim(0);
        }
    }
}

async fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let (common, is_leader, heartbeat) = match &cli.role {
        Role::Leader(c) => (c, true, 10),
        Role::Member {
            common,
            heartbeat_interval,
        } => (common, false, *heartbeat_interval),
    };
    init_logs(common.log_json);
    let mut shutdown = mc_kube::Shutdown::listen();
    let config = load_config(common.config.as_ref())?;
    let client = mc_kube::client(common.kubeconfig.as_ref()).await?;
    let metrics = Metrics::default();
    let addr = common
        .health_addr
        .clone()
        .unwrap_or_else(|| config.health.health_probe_bind_address.clone());
    let serve = metrics.clone().serve(&addr);
    let namespace = common.namespace.clone().unwrap_or_else(|| {
        if is_leader {
            "antrea-multicluster"
        } else {
            "kube-system"
        }
        .into()
    });
    // The leader loop and the webhooks share one watch of the namespace's ServiceAccounts.
    let trigger = Trigger::new(&metrics);
    let accounts = is_leader.then(|| leader::watch_accounts(&client, &namespace, &trigger));
    let webhooks = webhook::WebhookOptions {
        role: if is_leader {
            webhook::Role::Leader
        } else {
            webhook::Role::Member
        },
        namespace: namespace.clone(),
        addr: common
            .webhook_addr
            .clone()
            .unwrap_or_else(|| format!(":{}", config.webhook.port)),
        hosts: common.webhook_host.clone(),
        accounts: accounts.clone(),
    };
    let webhooks = tokio::select! {
        w = webhook::start(client.clone(), webhooks, metrics.clone()) => w?,
        signal = shutdown.recv() => {
            tracing::info!(signal, "asked to stop while starting; exiting");
            return Ok(());
        }
    };
    let work = async {
        if let Some(accounts) = accounts {
            let liveness = Liveness {
                timeout: SignedDuration::from_secs(common.member_timeout),
                withdraw_after: SignedDuration::from_secs(common.withdraw_after),
            };
            leader::run(
                client,
                leader::LeaderOptions {
                    namespace,
                    liveness,
                    trigger,
                    accounts,
                    stretched: config.enable_stretched_network_policy,
                    min_prefix_len: config.min_announced_prefix_length(),
                    quota: leader::merge::Quota {
                        services: config.max_service_exports_per_member(),
                        label_identities: config.max_label_identities_per_member(),
                    },
                },
                metrics,
            )
            .await
        } else {
            member::run(
                client,
                member::MemberOptions {
                    namespace,
                    config,
                    heartbeat: Duration::from_secs(heartbeat.max(1)),
                },
                metrics,
            )
            .await
        }
    };
    tokio::select! {
        _ = give_back_free_heap() => Ok(()),
        r = serve => r,
        r = webhooks => r,
        r = work => r,
        signal = shutdown.recv() => {
            tracing::info!(signal, "asked to stop; exiting");
            Ok(())
        }
    }
}
