//! `cargo xtask bench control-plane|scale|dataplane`: benchmarks on the testbed (they print
//! numbers; they assert nothing). `control_plane`: export→import latency and the controllers'
//! memory; `scale`: hundreds of simulated members against the real leader and members, and the
//! agents with as many remote clusters (also the dataplane bench's agent memory figure);
//! `dataplane`: throughput and cost through copies of one namespace topology. This module is the
//! subcommands and their dispatch; no benchmark uses it.

mod control_plane;
mod dataplane;
mod gateways;
mod scale;

use testbed::paths::testbed_dir;

#[derive(clap::Subcommand)]
pub enum BenchCommand {
    /// Export→import latency for 1, 100 and 1000 Services, and the controllers' memory.
    ControlPlane {
        /// Service counts to measure.
        #[arg(long, value_delimiter = ',', default_values_t = [1, 100, 1000])]
        sizes: Vec<usize>,
    },
    /// The leader and two real members with K simulated members (their own tokens, heartbeats,
    /// ClusterInfo, S Services of E endpoints each, the member's watches): time until every
    /// member is Ready, a burst, one-by-one exports from a real member, memory, CPU, request
    /// rates, a member's death. Each K on a fresh testbed.
    Scale {
        /// Simulated member counts (K); 0 measures only the agents.
        #[arg(long, value_delimiter = ',', default_values_t = [10, 100, 500])]
        members: Vec<usize>,
        /// Services each simulated member exports (S). At K = 500 with S = 10 this machine's 2
        /// cores cannot carry the API server's fan-out of every import to every member's watch
        /// (docs/benchmarks.md): 2 is the default.
        #[arg(long, default_value_t = 2)]
        services: usize,
        /// Ready endpoints of each of those Services (E).
        #[arg(long, default_value_t = 10)]
        endpoints: usize,
        /// Then east's agents with this many remote clusters, on a fresh testbed with kubelet
        /// Nodes (0: skipped).
        #[arg(long, default_value_t = 500)]
        agent_clusters: usize,
    },
    /// Plain routing vs the kernel's VXLAN+SNAT vs Strait through copies of one namespace topology:
    /// TCP throughput (1 and 4 streams), request/response, small-packet rate, CPU per packet.
    Dataplane {
        /// Rounds (the median is printed): in each, every test runs through every variant in
        /// turn, all the variants' topologies being up at once; a multiple of 10 balances the
        /// order of the variants (see `turns`).
        #[arg(long, default_value_t = 20)]
        runs: usize,
        /// Seconds per test and variant in a round.
        #[arg(long, default_value_t = 2)]
        seconds: u64,
        /// Measure only these variants, by tag (a, a2, b, c, d, d2, e, f; e.g. `c,e,f` for the
        /// encryption figures): every topology is still up, the rest are not run. All when
        /// absent; the one-stream costs run only with all.
        #[arg(long, value_delimiter = ',')]
        variants: Vec<String>,
    },
}

/// Runs a benchmark.
pub fn run(command: BenchCommand) -> anyhow::Result<()> {
    match command {
        BenchCommand::ControlPlane { sizes } => {
            fresh_testbed(false)?;
            tokio::runtime::Runtime::new()?.block_on(control_plane::control_plane(sizes))
        }
        BenchCommand::Scale {
            members,
            services,
            endpoints,
            agent_clusters,
        } => {
            let mut done = Vec::new();
            // (`--members 0`: the agents only.)
            for k in members.into_iter().filter(|k| *k > 0) {
                fresh_testbed(false)?;
                let plan = scale::Plan {
                    members: k,
                    services,
                    endpoints,
                };
                let figures = tokio::runtime::Runtime::new()?.block_on(scale::scale(plan));
                match figures {
                    Ok(f) => done.push(f),
                    Err(e) => {
                        print_scale(&done);
                        return Err(e.context(format!("the scale bench at K = {k}")));
                    }
                }
            }
            print_scale(&done);
            if agent_clusters > 0 {
                fresh_testbed(true)?;
                let lines =
                    tokio::runtime::Runtime::new()?.block_on(scale::agent(agent_clusters))?;
                println!("\nscale: east's agents with {agent_clusters} remote clusters");
                for line in lines {
                    println!("  {line}");
                }
            }
            Ok(())
        }
        BenchCommand::Dataplane {
            runs,
            seconds,
            variants,
        } => {
            let only = dataplane::Variant::select(&variants)?;
            let testbed_was_up = testbed_running();
            if testbed_was_up {
                eprintln!(
                    "note: the testbed is up; its API servers share the CPUs with the measurement \
                     (`cargo xtask testbed down` first for quieter numbers)"
                );
            }
            dataplane::run(runs.max(1), seconds.max(1), &only)?;
            if !variants.is_empty() {
                // A chosen few: the figures asked for, not the agent's memory.
                return Ok(());
            }
            // The agent's memory with many remote clusters: real agents on the testbed's Nodes,
            // in a joined ClusterSet (so that east has a Gateway).
            testbed::run(testbed::TestbedCommand::Up {
                join: true,
                no_nodes: false,
                release: true,
                processes: true,
            })?;
            let measured =
                tokio::runtime::Runtime::new()?.block_on(scale::agent(AGENT_REMOTE_CLUSTERS));
            if !testbed_was_up {
                testbed::run(testbed::TestbedCommand::Down)?;
            }
            println!(
                "\nmc-agent with {AGENT_REMOTE_CLUSTERS} remote clusters in its maps (target: < 30 MiB)"
            );
            for line in measured? {
                println!("  {line}");
            }
            Ok(())
        }
    }
}

/// Remote clusters in the agents' maps for the dataplane bench's memory figure.
const AGENT_REMOTE_CLUSTERS: usize = 100;

/// A fresh testbed (Node-less unless `nodes`) with release controllers, joined. Every run on a fresh one: on one
/// kept up, each run left etcd larger (thousands of objects created and deleted) and the next was
/// slower (all 1000 imported in 31.5, 32.8, 35.9, then 41.7, 36.5, 35.1 s over six runs on one
/// testbed).
fn fresh_testbed(nodes: bool) -> anyhow::Result<()> {
    if testbed_running() {
        eprintln!("note: taking the running testbed down: the bench starts from a fresh one");
        testbed::run(testbed::TestbedCommand::Down)?;
    }
    testbed::run(testbed::TestbedCommand::Up {
        join: true,
        no_nodes: !nodes,
        release: true,
        processes: true,
    })
}

fn print_scale(done: &[scale::Figures]) {
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    for f in done {
        println!(
            "\nscale: K = {} simulated members, S = {} Services each, E = {} endpoints each ({cores} cores)",
            f.plan.members, f.plan.services, f.plan.endpoints
        );
        for line in &f.lines {
            println!("  {line}");
        }
    }
    println!(
        "targets at K = 500: one export p99 <= 1 s; leader resident <= 256 MiB; every member Ready within 5 min; a dead member withdrawn within its bound"
    );
}

/// Whether a testbed is up (its etcd runs).
fn testbed_running() -> bool {
    testbed::proc::Procs::new(&testbed_dir())
        .ok()
        .and_then(|p| p.running("etcd"))
        .is_some()
}
