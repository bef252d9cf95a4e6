//! `cargo xtask <command>`: the project's own tasks. The CLI and its dispatch; the testbed and
//! the images are the `strait-testbed` crate (`testbed/`), the benchmarks `strait-bench`
//! (`bench/`).

mod crdgen;
mod lint;

use clap::{Parser, Subcommand};
use testbed::image;

#[derive(Parser)]
#[command(about = "Strait project tasks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write the CRDs to deploy/ (with --check: fail if the committed files differ).
    Crdgen {
        #[arg(long)]
        check: bool,
    },
    /// Benchmarks on the testbed (they print numbers; they assert nothing).
    Bench {
        #[command(subcommand)]
        command: bench::BenchCommand,
    },
    /// Container images (images/<name>/Containerfile), built without a daemon by default.
    Image {
        #[command(subcommand)]
        command: image::ImageCommand,
    },
    /// Check the product code: no function over 120 lines, no import cycle between a crate's
    /// modules (exit status 1 when there is one).
    Lint,
    /// The local testbed: real kube-apiservers for north (leader), east and west.
    Testbed {
        #[command(subcommand)]
        command: testbed::TestbedCommand,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Crdgen { check } => crdgen::run(check),
        Command::Lint => lint::run(),
        Command::Testbed { command } => testbed::run(command),
        Command::Bench { command } => bench::run(command),
        Command::Image { command } => image::run(command),
    }
}
