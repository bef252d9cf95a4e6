//! `mc-controller leader|member` — the multi-cluster control plane (see DESIGN §3).

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(version, about = "Strait multi-cluster controller")]
struct Cli {
    #[command(subcommand)]
    role: Role,
}

#[derive(Subcommand)]
enum Role {
    /// Run the leader controllers in the Common Area namespace.
    Leader,
    /// Run the member controllers.
    Member,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let role = match cli.role {
        Role::Leader => "leader",
        Role::Member => "member",
    };
    anyhow::bail!("mc-controller {role}: the controllers are not implemented yet (issue 3)")
}
