//! Builds the eBPF programs (`mc-ebpf`) for the BPF target with the pinned nightly toolchain and
//! leaves the object in OUT_DIR, where `src/lib.rs` embeds it (`EBPF_OBJECT`).
use anyhow::{Context as _, anyhow};

fn main() -> anyhow::Result<()> {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").context("CARGO_MANIFEST_DIR")?;
    let workspace = std::path::Path::new(&manifest_dir)
        .parent()
        .ok_or_else(|| anyhow!("mc-agent has no parent directory"))?;
    // The nightly is pinned once, in scripts/versions.env (its LLVM must match bpf-linker's).
    let versions = workspace.join("scripts/versions.env");
    println!("cargo:rerun-if-changed={}", versions.display());
    println!("cargo:rerun-if-env-changed=STRAIT_BUILD_ID");
    let text = std::fs::read_to_string(&versions)
        .with_context(|| format!("reading {}", versions.display()))?;
    let nightly = text
        .lines()
        .find_map(|l| l.strip_prefix("RUST_NIGHTLY="))
        .map(str::trim)
        .ok_or_else(|| anyhow!("RUST_NIGHTLY missing from {}", versions.display()))?
        .to_owned();

    let metadata = cargo_metadata::MetadataCommand::new()
        .no_deps()
        .exec()
        .context("cargo metadata")?;
    let ebpf = metadata
        .packages
        .into_iter()
        .find(|p| p.name.as_str() == "mc-ebpf")
        .ok_or_else(|| anyhow!("mc-ebpf package not found in the workspace"))?;
    let root_dir = ebpf
        .manifest_path
        .parent()
        .ok_or_else(|| anyhow!("no parent for {}", ebpf.manifest_path))?
        .to_string();
    let package = aya_build::Package {
        name: ebpf.name.as_str(),
        root_dir: &root_dir,
        ..Default::default()
    };
    aya_build::build_ebpf([package], aya_build::Toolchain::Custom(&nightly))
}
