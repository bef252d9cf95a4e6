//! Where things are: the repository, the testbed state, the cached Kubernetes binaries.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow};

/// Where the testbed Pods' server lives in the tools image (images/test-tools), run by the
/// testbed's Pods (`testbed pod add --serve-http`).
pub const TEST_SERVER: &str = "/usr/local/bin/strait-test-server";

/// The checkout `cargo xtask` runs in: the nearest ancestor of the working directory holding
/// `scripts/versions.env` (not the path baked in at compile time, which belongs to whichever
/// checkout built this binary), else the checkout that built it.
pub fn repo_root() -> PathBuf {
    std::env::current_dir()
        .ok()
        .and_then(|cwd| {
            cwd.ancestors()
                .find(|d| d.join("scripts/versions.env").is_file() && d.join("xtask").is_dir())
                .map(Path::to_owned)
        })
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .parent()
                .expect("the testbed crate lives in the workspace")
                .to_owned()
        })
}

/// `target/testbed` in the repository (not CARGO_TARGET_DIR: users and tests look here).
pub fn testbed_dir() -> PathBuf {
    repo_root().join("target/testbed")
}

/// A value pinned in scripts/versions.env.
pub fn pinned(key: &str) -> anyhow::Result<String> {
    let path = repo_root().join("scripts/versions.env");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .map(|v| v.trim().to_owned())
        .ok_or_else(|| anyhow!("{key} is not set in {}", path.display()))
}

/// Where the set-up scripts keep what they build (`STRAIT_CACHE`, default /var/cache/strait).
fn cache_dir() -> PathBuf {
    std::env::var_os("STRAIT_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/strait"))
}

/// Directory of the Kubernetes and etcd binaries built by scripts/build-kube.sh.
pub fn kube_bin_dir() -> anyhow::Result<PathBuf> {
    let cache = cache_dir();
    Ok(cache.join(format!(
        "kube/{}-etcd-{}/bin",
        pinned("KUBE_VERSION")?,
        pinned("ETCD_VERSION")?
    )))
}

/// Directory of containerd, CoreDNS and pause built by scripts/build-node.sh.
pub fn node_bin_dir() -> anyhow::Result<PathBuf> {
    let cache = cache_dir();
    Ok(cache.join(format!(
        "node/containerd-{}-coredns-{}-pause-{}/bin",
        pinned("CONTAINERD_VERSION")?,
        pinned("COREDNS_VERSION")?,
        pinned("PAUSE_VERSION")?
    )))
}

/// Directory of flanneld and the flannel CNI plugin built by scripts/build-flannel.sh.
pub fn flannel_bin_dir() -> anyhow::Result<PathBuf> {
    let cache = cache_dir();
    Ok(cache.join(format!(
        "flannel/{}-cni-{}/bin",
        pinned("FLANNEL_VERSION")?,
        pinned("FLANNEL_CNI_VERSION")?
    )))
}

/// helm, built by scripts/build-helm.sh.
pub fn helm_bin() -> anyhow::Result<PathBuf> {
    let cache = cache_dir();
    Ok(cache.join(format!("helm/{}/helm", pinned("HELM_VERSION")?)))
}
