//! Building the workspace's binaries with cargo (the controllers, the agent, the testbed Pods'
//! server), for the testbed, its images and the benchmarks: the path of each comes from cargo's
//! own report. A leaf: it uses only [`crate::paths`].

use std::{
    path::PathBuf,
    process::{Command as Cmd, Stdio},
};

use anyhow::{Context as _, bail};

use crate::paths::repo_root;

/// The binary the testbed's Pods answer with ([`crate::paths::TEST_SERVER`] in the tools image),
/// a binary of this package, built with the debug profile.
pub fn build_test_server() -> anyhow::Result<PathBuf> {
    build_target(env!("CARGO_PKG_NAME"), "strait-test-server", false)
}

/// Builds one binary of the workspace (the `dist` profile it ships with, or debug) and returns the path cargo
/// reports for it.
pub fn build_bin(package: &str, release: bool) -> anyhow::Result<PathBuf> {
    build_target(package, package, release)
}

/// Builds the binary `bin` of `package` (the `dist` profile if `release`) and returns its path.
pub fn build_target(package: &str, bin: &str, release: bool) -> anyhow::Result<PathBuf> {
    build_target_env(package, bin, release, &[])
}

/// As [`build_target`], with these variables in the build's environment (`STRAIT_BUILD_ID`).
pub fn build_target_env(
    package: &str,
    bin: &str,
    release: bool,
    env: &[(&str, &str)],
) -> anyhow::Result<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Cmd::new(cargo)
        .envs(env.iter().copied())
        .args([
            "build",
            "--quiet",
            "-p",
            package,
            "--bin",
            bin,
            "--message-format=json-render-diagnostics",
        ])
        .args(release.then_some("--profile=dist"))
        .current_dir(repo_root())
        .stderr(Stdio::inherit())
        .output()
        .context("running cargo build")?;
    if !out.status.success() {
        bail!("building {package} failed");
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["target"]["name"] == bin)
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .with_context(|| format!("cargo did not report the {bin} executable"))
}
