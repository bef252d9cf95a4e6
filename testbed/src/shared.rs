//! What every part of the testbed uses: its log line, where a cluster's state is, the shape it
//! was brought up in, kubectl as a cluster's admin, `ip` and the network namespaces. A leaf: it
//! uses only [`crate::paths`], [`crate::proc`] and [`crate::topology`].

use std::{
    path::{Path, PathBuf},
    process::Command as Cmd,
};

use crate::{paths::testbed_dir, proc::run as exec, topology::Cluster};

/// Prints a progress line of the testbed.
pub(crate) fn say(msg: impl AsRef<str>) {
    println!("[testbed] {}", msg.as_ref());
}

/// `target/testbed/<cluster>`: the cluster's PKI and kubeconfigs.
pub(crate) fn cluster_dir(cluster: &Cluster) -> PathBuf {
    testbed_dir().join(cluster.name)
}

/// The admin kubeconfig of `cluster`.
pub fn admin_kubeconfig(cluster: &Cluster) -> PathBuf {
    cluster_dir(cluster).join("admin.kubeconfig")
}

/// Where `up` records which shape the testbed has (`processes` or `kubelets`).
pub(crate) fn mode_file() -> PathBuf {
    testbed_dir().join("mode")
}

/// Whether the testbed was brought up with kubelet Nodes.
pub fn kubelet_mode() -> bool {
    std::fs::read_to_string(mode_file()).is_ok_and(|m| m.trim() == "kubelets")
}

/// Runs `ip <args>` and returns its output.
pub(crate) fn ip(args: &[&str]) -> anyhow::Result<String> {
    exec(Cmd::new("ip").args(args))
}

/// Whether the network namespace `name` exists (in /run/netns).
pub(crate) fn netns_exists(name: &str) -> bool {
    Path::new("/run/netns").join(name).exists()
}

/// `kubectl --kubeconfig <cluster's admin kubeconfig>`.
pub(crate) fn kubectl_for(kubectl: &Path, cluster: &Cluster) -> Cmd {
    let mut cmd = Cmd::new(kubectl);
    cmd.arg("--kubeconfig").arg(admin_kubeconfig(cluster));
    cmd
}
