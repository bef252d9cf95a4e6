//! `mc-agent`: the Strait Node agent.

use std::{io::IsTerminal as _, path::PathBuf};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use mc_agent::{
    bpffs::PinLayout,
    counters,
    dataplane::{self, Dataplane},
};
use mc_common::{DEFAULT_PIN_ROOT, maps};

#[derive(Parser)]
#[command(version, about = "Strait Node agent (eBPF dataplane)")]
struct Cli {
    /// Directory on bpffs where maps and links are pinned.
    #[arg(long, global = true, env = "MC_PIN_ROOT", default_value = DEFAULT_PIN_ROOT)]
    pin_root: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Load, attach and pin the programs on the uplink, then keep running.
    Run {
        /// Interface to attach to.
        #[arg(long)]
        uplink: String,
    },
    /// Load, attach and pin the programs on the uplink, then exit (the pins keep them attached).
    Attach {
        #[arg(long)]
        uplink: String,
    },
    /// Remove the pinned links of the uplink (detaching the programs), and with --maps the maps.
    Detach {
        #[arg(long)]
        uplink: String,
        #[arg(long)]
        maps: bool,
    },
    /// Print the counters (summed over CPUs) from the pinned map.
    Counters {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let cli = Cli::parse();
    let layout = PinLayout::new(&cli.pin_root);
    match cli.command {
        Command::Run { uplink } => {
            attach(layout, &uplink)?;
            tracing::info!("attached; running until stopped (the pins keep the dataplane up)");
            loop {
                std::thread::park();
            }
        }
        Command::Attach { uplink } => attach(layout, &uplink),
        Command::Detach { uplink, maps } => {
            for path in dataplane::detach(&layout, &uplink, maps)
                .with_context(|| format!("detaching from {uplink}"))?
            {
                tracing::info!(path = %path.display(), "removed pin");
            }
            Ok(())
        }
        Command::Counters { json } => {
            let path = layout.map(maps::COUNTERS);
            let map = counters::open_pinned(&path).with_context(|| {
                format!(
                    "opening {}: is the agent attached with this --pin-root?",
                    path.display()
                )
            })?;
            let readings = counters::read(&map)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&readings)?);
            } else {
                println!("{:<24} {:>14} {:>16}", "COUNTER", "PACKETS", "BYTES");
                for r in readings {
                    println!("{:<24} {:>14} {:>16}", r.name, r.packets, r.bytes);
                }
            }
            Ok(())
        }
    }
}

fn attach(layout: PinLayout, uplink: &str) -> anyhow::Result<()> {
    let root = layout.root().to_owned();
    let mut dataplane = Dataplane::load(layout)?;
    for hook in dataplane.attach_uplink(uplink)? {
        tracing::info!(
            uplink,
            direction = hook.direction.as_str(),
            reused = hook.reused,
            link = %hook.link_pin.display(),
            pin_root = %root.display(),
            "{}",
            if hook.reused {
                "replaced the program in the pinned link (no detach, maps kept)"
            } else {
                "attached with TCX and pinned the link"
            }
        );
    }
    Ok(())
}
