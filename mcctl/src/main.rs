//! `mcctl` — Strait's command line for ClusterSets, the counterpart of `antctl mc`: inspect
//! ClusterSets, exports and imports; make member tokens; set up, join, leave and tear down a
//! ClusterSet. It talks to one cluster at a time (`--kubeconfig`, `--context`).
//!
//! This file is the command line and its dispatch; each command lives in its own module.

mod cluster;
mod clusterset;
mod created;
mod diagnose;
mod get;
mod init;
mod join;
mod joinconfig;
mod leave;
mod member;
mod output;
mod token;
mod verify;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "mcctl",
    version,
    about = "Strait multi-cluster command line (the counterpart of antctl mc)"
)]
struct Cli {
    /// The kubeconfig of the cluster to talk to (default: $KUBECONFIG, ~/.kube/config, in-cluster).
    #[arg(long, global = true, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, global = true)]
    context: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show ClusterSets, ResourceExports, ResourceImports, member tokens or a join config.
    #[command(subcommand)]
    Get(get::Get),
    /// Create a member token (in the leader).
    #[command(subcommand)]
    Create(token::Token),
    /// Delete a member token (in the leader).
    #[command(subcommand)]
    Delete(token::Token),
    /// Leader: create the ClusterSet and write the join config for members.
    Init(init::InitArgs),
    /// Member: join a ClusterSet and wait until the leader accepts this cluster.
    Join(join::JoinArgs),
    /// Member: leave the ClusterSet and remove what mcctl created here.
    Leave(leave::LeaveArgs),
    /// Leader: delete the ClusterSet and the member tokens mcctl created.
    Destroy(leave::LeaveArgs),
    /// Members: send traffic between the members of the contexts given, as applications do
    /// (imported Services by both names, Pod-to-Pod, a full-size transfer); name the first
    /// failing hop; clean up. Exit status 1 when a check fails.
    Verify(verify::VerifyArgs),
    /// Members: read-only checks of what makes traffic cross, with a verdict and a hint each.
    /// Exit status 1 when a check fails.
    Diagnose(diagnose::DiagnoseArgs),
}

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    if let Err(e) = run(cli).await {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let (kubeconfig, context) = (cli.kubeconfig.as_deref(), cli.context.as_deref());
    match &cli.command {
        Command::Verify(a) => {
            let members = member::load_all(kubeconfig, context, &a.contexts).await?;
            if !verify::run(members, a).await? {
                std::process::exit(1);
            }
            return Ok(());
        }
        Command::Diagnose(a) => {
            let members = member::load_all(kubeconfig, context, &a.contexts).await?;
            if !diagnose::run(&members, a).await? {
                std::process::exit(1);
            }
            return Ok(());
        }
        _ => {}
    }
    let cluster = cluster::connect_to(kubeconfig, context).await?;
    match cli.command {
        Command::Get(g) => get::get(&cluster, g).await,
        Command::Create(t) => token::create(&cluster, t).await,
        Command::Delete(t) => token::delete(&cluster, t).await,
        Command::Init(a) => init::init(&cluster, a).await,
        Command::Join(a) => join::join(&cluster, a).await,
        Command::Leave(a) => leave::member(&cluster, a).await,
        Command::Destroy(a) => leave::leader(&cluster, a).await,
        Command::Verify(_) | Command::Diagnose(_) => unreachable!("handled above"),
    }
}
