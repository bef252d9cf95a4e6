//! `cargo xtask testbed ...`: the subcommands (clap) and their dispatch. The top of the crate:
//! nothing in it uses this module.

use std::path::PathBuf;

use anyhow::bail;
use clap::Subcommand;

use crate::{lifecycle, nodes};

#[derive(Subcommand)]
pub enum TestbedCommand {
    /// Start (or complete) the testbed, controllers included; a no-op when it is already up
    /// (controllers are restarted when mc-controller was rebuilt).
    Up {
        /// Also join east and west to north's ClusterSet `test-clusterset`, as the guides do.
        #[arg(long)]
        join: bool,
        /// Leave out the two Nodes per cluster (network namespaces registered as Node objects,
        /// the first a gateway candidate, each with kube-proxy and mc-agent).
        #[arg(long)]
        no_nodes: bool,
        /// Build mc-controller and mc-agent with the `dist` profile, as they ship (the
        /// benchmarks do; the tests use the faster-to-build debug profile).
        #[arg(long)]
        release: bool,
        /// Development shape: Strait's controllers and agents, and the Pods, as host processes
        /// and network namespaces, Nodes registered by the testbed (no kubelets). Quicker to
        /// bring up; the test command does not use it. By default every Node runs containerd
        /// and a kubelet, and Strait runs in Pods from its images (`cargo xtask image build`).
        #[arg(long)]
        processes: bool,
    },
    /// Stop everything and remove the namespaces and state, also after a crash.
    Down,
    /// Show what runs, its memory, and whether each API server is ready.
    Status,
    /// Pods on the testbed's Nodes: real Pods the kubelets run (kubelet Nodes), or network
    /// namespaces the testbed registers as Pods (process Nodes).
    Pod {
        #[command(subcommand)]
        command: PodCommand,
    },
    /// Run a command on a testbed Node (its network and mount namespaces) or in a Pod:
    /// `testbed exec east/node-a -- bpftool map dump pinned /sys/fs/bpf/mc/v1/mc_routes`.
    Exec {
        /// `<cluster>/<node>` or `<cluster>/<pod>`.
        target: String,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Import OCI archives (`cargo xtask image build --build-id ...`) into every kubelet Node's
    /// containerd, as a registry pull would bring them.
    Load {
        #[arg(required = true)]
        archives: Vec<PathBuf>,
    },
    /// Testbed Nodes.
    Node {
        #[command(subcommand)]
        command: NodeCommand,
    },
}

#[derive(Subcommand)]
pub enum PodCommand {
    /// Create a Pod on a Node in `default` and wait until it is Ready; its network namespace is
    /// `strait-<cluster>-pod-<name>` in /run/netns either way.
    Add {
        cluster: String,
        node: String,
        name: String,
        /// A label `key=value` (repeatable).
        #[arg(long = "label")]
        labels: Vec<String>,
        /// Answer HTTP on this TCP port with "hello from <cluster>/<pod>", and echo UDP on it.
        #[arg(long)]
        serve_http: Option<u16>,
    },
    /// Delete a Pod (namespace and object).
    Del { cluster: String, name: String },
}

#[derive(Subcommand)]
pub enum NodeCommand {
    /// Make a Node Ready or NotReady: its kubelet started or stopped (kubelet Nodes; waits for
    /// the condition), or the condition written (process Nodes).
    Ready {
        cluster: String,
        node: String,
        #[arg(action = clap::ArgAction::Set)]
        ready: bool,
    },
    /// Stop a Node's kubelet (kubelet Nodes): its containers keep running, the Node goes
    /// NotReady once its lease expires.
    Stop { cluster: String, node: String },
    /// Start a Node's kubelet again.
    Start { cluster: String, node: String },
}

/// Runs a testbed subcommand (as root).
pub fn run(command: TestbedCommand) -> anyhow::Result<()> {
    require_root()?;
    match command {
        TestbedCommand::Up {
            join,
            no_nodes,
            release,
            processes,
        } => lifecycle::up(join, !no_nodes, release, !processes),
        TestbedCommand::Down => lifecycle::down(),
        TestbedCommand::Status => lifecycle::status(),
        TestbedCommand::Pod {
            command:
                PodCommand::Add {
                    cluster,
                    node,
                    name,
                    labels,
                    serve_http,
                },
        } => nodes::pod_add(&cluster, &node, &name, &labels, serve_http),
        TestbedCommand::Pod {
            command: PodCommand::Del { cluster, name },
        } => nodes::pod_del(&cluster, &name),
        TestbedCommand::Exec { target, command } => {
            let code = nodes::exec_in(&target, &command)?;
            if code != 0 {
                std::process::exit(code);
            }
            Ok(())
        }
        TestbedCommand::Load { archives } => nodes::load(&archives),
        TestbedCommand::Node {
            command:
                NodeCommand::Ready {
                    cluster,
                    node,
                    ready,
                },
        } => nodes::node_ready(&cluster, &node, ready),
        TestbedCommand::Node {
            command: NodeCommand::Stop { cluster, node },
        } => nodes::kubelet(&cluster, &node, false),
        TestbedCommand::Node {
            command: NodeCommand::Start { cluster, node },
        } => nodes::kubelet(&cluster, &node, true),
    }
}

/// The testbed makes network namespaces and mounts: only root can.
fn require_root() -> anyhow::Result<()> {
    // SAFETY: plain syscall.
    if unsafe { libc::geteuid() } != 0 {
        bail!("the testbed creates network namespaces and runs API servers: run it as root");
    }
    Ok(())
}
