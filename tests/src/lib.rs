//! Helpers for the black-box tests: they drive the real testbed with the real `kubectl`, the way
//! a user would. Start it first with `cargo xtask testbed up` (the test command does).

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    sync::atomic::{AtomicU32, Ordering},
};

use serde_json::Value;

pub const CLUSTERS: [&str; 3] = ["north", "east", "west"];

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is inside the repository")
        .to_owned()
}

pub fn fixture(relative: &str) -> PathBuf {
    repo_root().join("tests/fixtures").join(relative)
}

/// The running testbed, read from `target/testbed/env`.
pub struct Testbed {
    kubectl: PathBuf,
    kubeconfigs: HashMap<String, PathBuf>,
    pub leader_server: String,
}

impl Testbed {
    pub fn from_env() -> Self {
        let path = repo_root().join("target/testbed/env");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; start the testbed first: cargo xtask testbed up",
                path.display()
            )
        });
        let vars: HashMap<&str, &str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("export ")?.split_once('='))
            .collect();
        let kubeconfigs = CLUSTERS
            .iter()
            .map(|c| {
                let key = format!("KUBECONFIG_{}", c.to_uppercase());
                let value = vars
                    .get(key.as_str())
                    .unwrap_or_else(|| panic!("{key} missing in {}", path.display()));
                ((*c).to_owned(), PathBuf::from(value))
            })
            .collect();
        Self {
            kubectl: PathBuf::from(vars.get("KUBECTL").expect("KUBECTL in env")),
            kubeconfigs,
            leader_server: vars
                .get("LEADER_SERVER")
                .expect("LEADER_SERVER")
                .to_string(),
        }
    }

    pub fn kubectl_path(&self) -> &Path {
        &self.kubectl
    }

    /// `kubectl --kubeconfig <cluster's admin kubeconfig>`.
    pub fn kubectl(&self, cluster: &str) -> Command {
        let mut cmd = Command::new(&self.kubectl);
        cmd.arg("--kubeconfig").arg(&self.kubeconfigs[cluster]);
        cmd
    }

    /// Runs kubectl and returns stdout; panics with stderr when it fails.
    pub fn ok(&self, cluster: &str, args: &[&str]) -> String {
        let out = self.kubectl(cluster).args(args).output().expect("kubectl");
        assert!(
            out.status.success(),
            "kubectl {} in {cluster} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs kubectl with `input` on stdin.
    pub fn with_stdin(&self, cluster: &str, args: &[&str], input: &str) -> Output {
        use std::io::Write as _;
        let mut child = self
            .kubectl(cluster)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())
            .expect("writing stdin");
        child.wait_with_output().expect("kubectl")
    }

    /// `kubectl apply -f -` of `yaml`; panics with the server's message when refused.
    pub fn apply(&self, cluster: &str, namespace: &str, yaml: &str) -> String {
        let out = self.with_stdin(cluster, &["apply", "-n", namespace, "-f", "-"], yaml);
        assert!(
            out.status.success(),
            "the API server of {cluster} refused:\n{yaml}\n---\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `kubectl create -f -` of `yaml`, expected to be refused; returns the server's message.
    pub fn refused(&self, cluster: &str, namespace: &str, yaml: &str) -> String {
        let out = self.with_stdin(cluster, &["create", "-n", namespace, "-f", "-"], yaml);
        assert!(
            !out.status.success(),
            "the API server of {cluster} accepted an invalid object:\n{yaml}"
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    pub fn get_json(&self, cluster: &str, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        serde_json::from_str(&self.ok(cluster, &all)).expect("kubectl JSON")
    }

    /// Creates `name` unless it exists (a server-side dry run cannot create the namespace its
    /// objects go into, and guide YAML names fixed namespaces).
    pub fn ensure_namespace(&self, cluster: &str, name: &str) {
        let yaml = format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n");
        let out = self.with_stdin(cluster, &["apply", "-f", "-"], &yaml);
        assert!(
            out.status.success(),
            "creating namespace {name} in {cluster}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A fresh namespace, deleted (without waiting) when the guard drops.
    pub fn namespace(&self, cluster: &str, prefix: &str) -> Namespace<'_> {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "{prefix}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        self.ok(cluster, &["create", "namespace", &name]);
        Namespace {
            testbed: self,
            cluster: cluster.to_owned(),
            name,
        }
    }
}

pub struct Namespace<'a> {
    testbed: &'a Testbed,
    cluster: String,
    pub name: String,
}

impl Drop for Namespace<'_> {
    fn drop(&mut self) {
        let _ = self
            .testbed
            .kubectl(&self.cluster)
            .args(["delete", "namespace", &self.name, "--wait=false"])
            .output();
    }
}

/// The header line of `kubectl get` split into column names (multi-word names kept whole by
/// splitting on runs of two or more spaces).
pub fn header_columns(table: &str) -> Vec<String> {
    let header = table.lines().next().unwrap_or_default();
    header
        .split("  ")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}
