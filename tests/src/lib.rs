//! Helpers for the black-box tests: they drive the real testbed with the real `kubectl`, the way
//! a user would. Start it first with `cargo xtask testbed up` (the test command does); without
//! it, or without root, the tests are skipped and say so ([`prerequisites`]).

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    sync::atomic::{AtomicU32, Ordering},
};

use serde_json::Value;
use testbed::{paths::testbed_dir, topology};

pub mod agent;
pub mod bpf;
pub mod net;
pub mod pods;
pub mod prerequisites;
pub mod require;
pub mod services;

/// The testbed's clusters, by name (north, the leader, east and west): the testbed's own list.
pub const CLUSTERS: [&str; 3] = [
    topology::CLUSTERS[0].name,
    topology::CLUSTERS[1].name,
    topology::CLUSTERS[2].name,
];

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
    /// The testbed `cargo xtask testbed up` wrote. Every test starts here (or at
    /// [`kubelet_nodes`]): without the testbed or root the test binary is skipped, or fails
    /// where `STRAIT_TEST_REQUIRE` asks ([`prerequisites::require`]).
    pub fn from_env() -> Self {
        prerequisites::require();
        let path = testbed_dir().join("env");
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

    /// The admin kubeconfig of `cluster`.
    pub fn kubeconfig(&self, cluster: &str) -> &Path {
        &self.kubeconfigs[cluster]
    }

    /// `helm --kubeconfig <cluster's admin kubeconfig>`.
    pub fn helm(&self, cluster: &str) -> Command {
        let mut cmd = Command::new(helm_bin());
        cmd.arg("--kubeconfig").arg(&self.kubeconfigs[cluster]);
        cmd
    }

    /// `kubectl --kubeconfig <cluster's admin kubeconfig>`, run from the repository's root (so
    /// paths such as `deploy/member/` mean what the docs say).
    pub fn kubectl(&self, cluster: &str) -> Command {
        let mut cmd = Command::new(&self.kubectl);
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfigs[cluster])
            .current_dir(repo_root());
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
        run_with_stdin(self.kubectl(cluster).args(args), Some(input))
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

/// A namespace of the same name in every cluster (namespace sameness), removed (without waiting)
/// when it drops.
pub struct SameNamespace<'a> {
    tb: &'a Testbed,
    pub name: String,
}

impl<'a> SameNamespace<'a> {
    pub fn new(tb: &'a Testbed, prefix: &str) -> Self {
        let name = format!("{prefix}-{}", std::process::id());
        for c in CLUSTERS {
            tb.ensure_namespace(c, &name);
        }
        Self { tb, name }
    }
}

impl Drop for SameNamespace<'_> {
    fn drop(&mut self) {
        for c in CLUSTERS {
            let _ = self
                .tb
                .kubectl(c)
                .args(["delete", "namespace", &self.name, "--wait=false"])
                .output();
        }
    }
}

/// The header line of `kubectl get` split into column names (multi-word names kept whole by
/// splitting on runs of two or more spaces).
/// An ACNP's STRAIT column in `kubectl get acnp` of `cluster` (what Strait enforces of it) and
/// its `EnforcedByStrait` condition's message; empty strings when not (yet) written.
pub fn strait_column(tb: &Testbed, cluster: &str, acnp: &str) -> (String, String) {
    let table = tb.ok(cluster, &["get", "acnp", acnp]);
    let mut lines = table.lines();
    let (header, row) = (
        lines.next().unwrap_or_default(),
        lines.next().unwrap_or_default(),
    );
    let column = header
        .find("STRAIT")
        .and_then(|at| row.get(at..))
        .and_then(|rest| rest.split_whitespace().next())
        .filter(|v| *v != "<none>")
        .unwrap_or_default()
        .to_owned();
    let p = tb.get_json(cluster, &["get", "acnp", acnp]);
    let message = p["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "EnforcedByStrait")
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_owned();
    (column, message)
}

pub fn header_columns(table: &str) -> Vec<String> {
    let header = table.lines().next().unwrap_or_default();
    header
        .split("  ")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Polls `check` every 300 ms until it returns `Some`, or panics after `timeout` with `what`
/// and the last observation.
/// The first 16 hex digits of the SHA-1 of a normalized label (Antrea's `HashLabelIdentity`: the
/// name of its LabelIdentity and ResourceImport), from coreutils, not from Strait's code.
pub fn label_hash(label: &str) -> String {
    let out = std::process::Command::new("sh")
        .args(["-c", "printf %s \"$1\" | sha1sum", "sh", label])
        .output()
        .expect("sha1sum");
    String::from_utf8_lossy(&out.stdout)[..16].to_owned()
}

pub fn wait_for<T>(
    what: &str,
    timeout: std::time::Duration,
    mut check: impl FnMut() -> Result<T, String>,
) -> T {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        match check() {
            Ok(v) => return v,
            Err(last) if std::time::Instant::now() > deadline => {
                panic!("timed out after {timeout:?} waiting for {what}; last seen: {last}")
            }
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(300)),
        }
    }
}

impl Testbed {
    /// `kubectl get ... -o json`, or None when kubectl fails (for example NotFound).
    pub fn try_json(&self, cluster: &str, args: &[&str]) -> Option<Value> {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        let out = self.kubectl(cluster).args(&all).output().ok()?;
        if !out.status.success() {
            return None;
        }
        serde_json::from_slice(&out.stdout).ok()
    }

    /// Waits until `kubectl get <args>` finds nothing.
    pub fn wait_gone(
        &self,
        what: &str,
        timeout: std::time::Duration,
        cluster: &str,
        args: &[&str],
    ) {
        wait_for(what, timeout, || match self.try_json(cluster, args) {
            None => Ok(()),
            Some(_) => Err("still there".to_owned()),
        });
    }

    /// `kubectl delete --ignore-not-found ...`.
    pub fn delete(&self, cluster: &str, args: &[&str]) {
        let mut all = vec!["delete", "--ignore-not-found", "--wait=false"];
        all.extend(args);
        self.ok(cluster, &all);
    }
}

/// The join of the guides, shared by the control-plane tests.
pub mod join {
    use super::*;
    use std::time::Duration;

    pub const LEADER_NS: &str = "antrea-multicluster";
    pub const MEMBER_NS: &str = "kube-system";
    pub const CLUSTERSET: &str = "test-clusterset";
    pub const MEMBERS: [&str; 2] = ["east", "west"];

    pub fn id(cluster: &str) -> String {
        format!("test-cluster-{cluster}")
    }

    /// The guide's member access objects in the leader, for `member` (the guide shows east).
    pub fn access_yaml(member: &str) -> String {
        std::fs::read_to_string(fixture(
            "guides/000-L122-serviceaccount-secret-rolebinding.yaml",
        ))
        .expect("fixture")
        .replace("member-east", &format!("member-{member}"))
    }

    /// Creates the member's access objects in the leader and copies its token Secret (as type
    /// Opaque, as the guides' grep/sed does) into the member's namespace.
    pub fn grant_access(tb: &Testbed, member: &str) {
        tb.apply("north", LEADER_NS, &access_yaml(member));
        let secret = format!("member-{member}-access-token");
        let data = wait_for(
            &format!("the token of {secret} in north"),
            // kube-controller-manager's token controller fills it: within a second usually,
            // but more than 30 s late right after north's API server was restarted.
            Duration::from_secs(120),
            || {
                let s = tb
                    .try_json("north", &["get", "secret", "-n", LEADER_NS, &secret])
                    .ok_or("no Secret")?;
                let d = &s["data"];
                if d["token"].is_string() && d["ca.crt"].is_string() {
                    Ok(d.clone())
                } else {
                    Err(s.to_string())
                }
            },
        );
        let yaml = format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {secret}\n  namespace: {MEMBER_NS}\ntype: Opaque\ndata:\n  ca.crt: {}\n  token: {}\n",
            data["ca.crt"].as_str().unwrap(),
            data["token"].as_str().unwrap()
        );
        tb.apply(member, MEMBER_NS, &yaml);
    }

    /// The newer guides' v1alpha2 ClusterSets.
    pub fn join_v1alpha2(tb: &Testbed) {
        tb.apply(
            "north",
            LEADER_NS,
            &format!(
                "apiVersion: multicluster.crd.antrea.io/v1alpha2\nkind: ClusterSet\nmetadata:\n  name: {CLUSTERSET}\n  namespace: {LEADER_NS}\nspec:\n  clusterID: {}\n  leaders:\n    - clusterID: {}\n",
                id("north"),
                id("north")
            ),
        );
        for m in MEMBERS {
            grant_access(tb, m);
            tb.apply(
                m,
                MEMBER_NS,
                &format!(
                    "apiVersion: multicluster.crd.antrea.io/v1alpha2\nkind: ClusterSet\nmetadata:\n  name: {CLUSTERSET}\n  namespace: {MEMBER_NS}\nspec:\n  clusterID: {}\n  leaders:\n    - clusterID: {}\n      secret: \"member-{m}-access-token\"\n      server: \"{}\"\n  namespace: {LEADER_NS}\n",
                    id(m),
                    id("north"),
                    tb.leader_server
                ),
            );
        }
    }

    /// Leader status: (total, ready).
    pub fn leader_counts(tb: &Testbed) -> Option<(i64, i64)> {
        let s = tb.try_json("north", &["get", "clusterset", "-n", LEADER_NS, CLUSTERSET])?;
        Some((
            s["status"]["totalClusters"].as_i64()?,
            s["status"]["readyClusters"].as_i64()?,
        ))
    }

    pub fn wait_ready(tb: &Testbed) {
        wait_for(
            "both members Ready in the leader",
            Duration::from_secs(60),
            || match leader_counts(tb) {
                Some((2, 2)) => Ok(()),
                other => Err(format!("{other:?}")),
            },
        );
    }

    /// Everything joined and ready, joining with the v1alpha2 forms if needed.
    /// [`ensure_joined`], then waits until east and west have elected `node-a` their gateway.
    pub fn ensure_joined_with_gateways(tb: &Testbed) {
        ensure_joined(tb);
        for c in MEMBERS {
            wait_for(
                &format!("{c}'s Gateway node-a"),
                Duration::from_secs(60),
                || {
                    tb.try_json(c, &["get", "gateway", "-n", MEMBER_NS, "node-a"])
                        .ok_or_else(|| "none".to_owned())
                },
            );
        }
    }

    pub fn ensure_joined(tb: &Testbed) {
        let members_present = MEMBERS.iter().all(|m| {
            tb.try_json(m, &["get", "clusterset", "-n", MEMBER_NS, CLUSTERSET])
                .is_some()
        });
        if members_present && leader_counts(tb) == Some((2, 2)) {
            return;
        }
        leave_all(tb);
        join_v1alpha2(tb);
        wait_ready(tb);
    }

    /// North joins as a member of its own ClusterSet (the dual-role cluster), with the guide's
    /// access objects; waits until the leader counts three members. [`DualRole`] undoes it.
    pub fn north_as_member(tb: &Testbed) -> DualRole<'_> {
        grant_access(tb, "north");
        tb.apply(
            "north",
            MEMBER_NS,
            &format!(
                "apiVersion: multicluster.crd.antrea.io/v1alpha2\nkind: ClusterSet\nmetadata:\n  name: {CLUSTERSET}\n  namespace: {MEMBER_NS}\nspec:\n  clusterID: {}\n  leaders:\n    - clusterID: {}\n      secret: \"member-north-access-token\"\n      server: \"{}\"\n  namespace: {LEADER_NS}\n",
                id("north"),
                id("north"),
                tb.leader_server,
            ),
        );
        wait_for(
            "north's member Ready",
            Duration::from_secs(60),
            || match leader_counts(tb) {
                Some((3, 3)) => Ok(()),
                other => Err(format!("{other:?}")),
            },
        );
        DualRole(tb)
    }

    /// North's membership of [`north_as_member`]: dropping it makes north leave and removes
    /// its access objects (the next test that makes north a member makes its own token).
    pub struct DualRole<'a>(&'a Testbed);

    impl DualRole<'_> {
        /// North leaves; waits until the leader counts two members again.
        pub fn leave(self) {
            drop(self);
        }
    }

    impl Drop for DualRole<'_> {
        fn drop(&mut self) {
            let tb = self.0;
            tb.delete("north", &["clusterset", "--all", "-n", MEMBER_NS]);
            let gone = (0..200).any(|_| {
                let two = leader_counts(tb) == Some((2, 2));
                if !two {
                    std::thread::sleep(Duration::from_millis(300));
                }
                two
            });
            if !gone && !std::thread::panicking() {
                panic!("north's member did not leave: {:?}", leader_counts(tb));
            }
            tb.delete(
                "north",
                &[
                    "-n",
                    LEADER_NS,
                    "serviceaccount/member-north-access-sa",
                    "secret/member-north-access-token",
                    "rolebinding/member-north-access-rolebinding",
                ],
            );
            tb.delete(
                "north",
                &["-n", MEMBER_NS, "secret/member-north-access-token"],
            );
        }
    }

    /// Members leave (their announces go), then the leader's ClusterSet and claims go.
    pub fn leave_all(tb: &Testbed) {
        for m in MEMBERS {
            tb.delete(m, &["clusterset", "--all", "-n", MEMBER_NS]);
        }
        // Members remove their own announces; one whose controller could not (it was stopped,
        // or never connected) is removed by hand, as an admin would.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let list = tb.get_json("north", &["get", "memberclusterannounce", "-n", LEADER_NS]);
            if list["items"].as_array().is_none_or(Vec::is_empty) {
                break;
            }
            if std::time::Instant::now() > deadline {
                tb.delete(
                    "north",
                    &["memberclusterannounce", "--all", "-n", LEADER_NS],
                );
                tb.delete("north", &["resourceexport", "--all", "-n", LEADER_NS]);
                break;
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        tb.delete("north", &["clusterset", "--all", "-n", LEADER_NS]);
        for (c, ns) in [
            ("north", LEADER_NS),
            ("east", MEMBER_NS),
            ("west", MEMBER_NS),
        ] {
            tb.delete(c, &["clusterclaim", "--all", "-n", ns]);
        }
    }
}

/// helm, built from its Go module by scripts/build-helm.sh (part of the set-up).
pub fn helm_bin() -> PathBuf {
    let path = testbed::paths::helm_bin().expect("HELM_VERSION in versions.env");
    assert!(
        path.exists(),
        "{} missing: run scripts/setup.sh",
        path.display()
    );
    path
}

/// Whether the testbed runs kubelet Nodes with Strait in Pods (the default shape), not the
/// development shape of host processes (`testbed up --processes`).
/// The object's `status.conditions` entry of that type.
pub fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// Whether the testbed's Nodes are kubelets (`testbed up` without `--processes`). Some tests
/// start here: it checks the tests' prerequisites first ([`prerequisites::require`]).
pub fn kubelet_nodes() -> bool {
    prerequisites::require();
    testbed::kubelet_mode()
}

/// Where a testbed controller (by its process name) runs on kubelet Nodes: the cluster and the
/// namespace of its Deployment `antrea-mc-controller`.
fn controller_deployment(name: &str) -> Option<(&'static str, &'static str)> {
    match name {
        "north-mc-controller" => Some(("north", join::LEADER_NS)),
        "north-mc-member" => Some(("north", join::MEMBER_NS)),
        "east-mc-controller" => Some(("east", join::MEMBER_NS)),
        "west-mc-controller" => Some(("west", join::MEMBER_NS)),
        _ => None,
    }
}

/// The label of the controllers' Pods (deploy/base/controller).
const CONTROLLER_PODS: &str = "component=antrea-mc-controller";

impl Testbed {
    /// The names of the controller Pods of the Deployment in `ns` that are Ready.
    fn ready_controller_pods(&self, cluster: &str, ns: &str) -> Vec<String> {
        let list = self.get_json(cluster, &["get", "pods", "-n", ns, "-l", CONTROLLER_PODS]);
        list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .filter(|p| {
                p["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
            .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_owned))
            .collect()
    }

    /// The address of a controller's health and metrics port (`:8080`): its Pod's on kubelet
    /// Nodes (reached from the testbed's core namespace, which routes the Pod CIDRs), else the
    /// process's.
    pub fn controller_health(&self, name: &str) -> std::net::SocketAddr {
        let addr = match controller_deployment(name).filter(|_| kubelet_nodes()) {
            Some((cluster, ns)) => {
                let list =
                    self.get_json(cluster, &["get", "pods", "-n", ns, "-l", CONTROLLER_PODS]);
                let ip = list["items"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
                    .find_map(|p| p["status"]["podIP"].as_str())
                    .unwrap_or_else(|| panic!("no Pod of {name} with an IP"))
                    .to_owned();
                format!("{ip}:8080")
            }
            None => {
                let api = match name {
                    "north-mc-controller" => "198.18.0.10",
                    "east-mc-controller" => "198.18.0.11",
                    "west-mc-controller" => "198.18.0.12",
                    other => panic!("no health address known for {other}"),
                };
                format!("{api}:8080")
            }
        };
        addr.parse().expect("an address")
    }

    /// Seed 004's operator steps: edit `endpointIPType` in ConfigMap
    /// `antrea-mc-controller-config` of `cluster`'s member namespace and restart the controller
    /// (`kubectl rollout restart`), waiting until the new one runs.
    pub fn set_endpoint_ip_type(&self, cluster: &str, value: &str) {
        let ns = join::MEMBER_NS;
        let cm = self.get_json(
            cluster,
            &["get", "configmap", "-n", ns, "antrea-mc-controller-config"],
        );
        let text = cm["data"]["controller_manager_config.yaml"]
            .as_str()
            .expect("the config")
            .to_owned();
        let edited: String = text
            .lines()
            .map(|l| {
                if l.trim_start().starts_with("endpointIPType:") {
                    format!("endpointIPType: \"{value}\"")
                } else {
                    l.to_owned()
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        let patch = serde_json::json!({"data": {"controller_manager_config.yaml": edited}});
        self.ok(
            cluster,
            &[
                "patch",
                "configmap",
                "-n",
                ns,
                "antrea-mc-controller-config",
                "--type=merge",
                "-p",
                &patch.to_string(),
            ],
        );
        self.ok(
            cluster,
            &[
                "rollout",
                "restart",
                "-n",
                ns,
                "deployment/antrea-mc-controller",
            ],
        );
        self.ok(
            cluster,
            &[
                "rollout",
                "status",
                "-n",
                ns,
                "deployment/antrea-mc-controller",
                "--timeout=120s",
            ],
        );
    }
}

/// Controllers restarted with another MultiClusterConfig; the original ones come back on drop.
/// On kubelet Nodes as seed 004 tells an operator: the ConfigMap edited, the Deployment
/// restarted; with process controllers, the processes restarted with an edited config file.
pub enum Reconfigured {
    Deployments(Vec<&'static str>),
    Processes(Vec<(String, Vec<String>)>),
}

impl Reconfigured {
    pub fn endpoint_ip_type(clusters: &[&'static str], ip_type: &str) -> Self {
        if kubelet_nodes() {
            let tb = Testbed::from_env();
            for cluster in clusters {
                tb.set_endpoint_ip_type(cluster, ip_type);
            }
            return Self::Deployments(clusters.to_vec());
        }
        let mut restarted = Vec::new();
        for cluster in clusters {
            let name = format!("{cluster}-mc-controller");
            let args = procs::kill(&name);
            let config = args
                .iter()
                .find_map(|a| a.strip_prefix("--config="))
                .expect("--config")
                .to_owned();
            let text = std::fs::read_to_string(&config).expect("config");
            let changed = std::env::temp_dir().join(format!("strait-{name}-{ip_type}.yaml"));
            std::fs::write(
                &changed,
                text.replace(
                    "endpointIPType: \"ClusterIP\"",
                    &format!("endpointIPType: \"{ip_type}\""),
                ),
            )
            .expect("config");
            let new_args: Vec<String> = args
                .iter()
                .map(|a| {
                    if a.starts_with("--config=") {
                        format!("--config={}", changed.display())
                    } else {
                        a.clone()
                    }
                })
                .collect();
            procs::start(&name, &new_args);
            restarted.push((name, args));
        }
        Self::Processes(restarted)
    }
}

impl Drop for Reconfigured {
    fn drop(&mut self) {
        match self {
            Self::Deployments(clusters) => {
                let tb = Testbed::from_env();
                for cluster in clusters.iter() {
                    tb.set_endpoint_ip_type(cluster, "ClusterIP");
                }
            }
            Self::Processes(restarted) => {
                for (name, args) in restarted.iter() {
                    procs::kill(name);
                    procs::start(name, args);
                }
            }
        }
    }
}

/// Testbed processes (`target/testbed/pids/<name>.pid`), as a crash would treat them. On kubelet
/// Nodes the controllers are Deployments: "pausing" one scales it to zero (a liveness probe would
/// restart a frozen container), "killing" one force-deletes its Pod, "starting" it waits for the
/// Deployment's new Pod; the API servers and etcd are processes in both shapes.
pub mod procs {
    use super::*;
    use std::{os::unix::process::CommandExt as _, time::Duration};

    fn scale(cluster: &str, ns: &str, replicas: u32, wait: bool) {
        let tb = Testbed::from_env();
        tb.ok(
            cluster,
            &[
                "scale",
                "-n",
                ns,
                "deployment/antrea-mc-controller",
                &format!("--replicas={replicas}"),
            ],
        );
        if !wait {
            return;
        }
        wait_for(
            &format!("{replicas} controller Pods in {cluster}/{ns}"),
            Duration::from_secs(120),
            || {
                let list = tb.get_json(cluster, &["get", "pods", "-n", ns, "-l", CONTROLLER_PODS]);
                let all = list["items"].as_array().map_or(0, Vec::len);
                let ready = tb.ready_controller_pods(cluster, ns).len();
                if all == replicas as usize && ready == replicas as usize {
                    Ok(())
                } else {
                    Err(format!("{all} Pods, {ready} Ready"))
                }
            },
        );
    }

    fn alive(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            !s.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        })
    }

    fn signal(pid: i32, sig: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{sig}"), &pid.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -{sig} {pid}");
    }

    fn pid(name: &str) -> i32 {
        std::fs::read_to_string(testbed_dir().join(format!("pids/{name}.pid")))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or_else(|| panic!("no PID file for {name}: is the testbed up?"))
    }

    /// Freezes a process (SIGSTOP): it holds its connections but does nothing. A controller on
    /// kubelet Nodes is scaled to zero instead.
    pub fn pause(name: &str) {
        match controller_deployment(name).filter(|_| kubelet_nodes()) {
            Some((cluster, ns)) => scale(cluster, ns, 0, true),
            None => signal(pid(name), "STOP"),
        }
    }

    /// Undoes `pause`; on kubelet Nodes waits until the controller's Pod is Ready.
    pub fn resume(name: &str) {
        match controller_deployment(name).filter(|_| kubelet_nodes()) {
            Some((cluster, ns)) => scale(cluster, ns, 1, true),
            None => signal(pid(name), "CONT"),
        }
    }

    /// Undoes `pause` and returns at once (the Pod on kubelet Nodes starts meanwhile).
    pub fn resume_without_waiting(name: &str) {
        match controller_deployment(name).filter(|_| kubelet_nodes()) {
            Some((cluster, ns)) => scale(cluster, ns, 1, false),
            None => signal(pid(name), "CONT"),
        }
    }

    /// SIGKILLs a testbed process and returns its command line, to start it again. A controller
    /// on kubelet Nodes: its Pod is deleted at once (grace period 0); returns the Pod's name.
    pub fn kill(name: &str) -> Vec<String> {
        if let Some((cluster, ns)) = controller_deployment(name).filter(|_| kubelet_nodes()) {
            let tb = Testbed::from_env();
            let pods = tb.ready_controller_pods(cluster, ns);
            assert!(!pods.is_empty(), "no Ready Pod of {name}");
            for pod in &pods {
                tb.ok(
                    cluster,
                    &[
                        "delete",
                        "pod",
                        "-n",
                        ns,
                        pod,
                        "--grace-period=0",
                        "--force",
                        "--wait=false",
                    ],
                );
            }
            return pods;
        }
        let pid = pid(name);
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).expect("cmdline");
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        signal(pid, "KILL");
        wait_for(&format!("{name} to exit"), Duration::from_secs(10), || {
            if alive(pid) {
                Err("alive".into())
            } else {
                Ok(())
            }
        });
        args
    }

    /// Starts `args` again as testbed process `name`, in the testbed's core network namespace,
    /// appending to its log (what `cargo xtask testbed up` does for a missing process).
    /// On kubelet Nodes, for a controller: waits until its Deployment runs a Ready Pod other
    /// than those `kill` deleted (`args`).
    pub fn start(name: &str, args: &[String]) {
        if let Some((cluster, ns)) = controller_deployment(name).filter(|_| kubelet_nodes()) {
            let tb = Testbed::from_env();
            wait_for(
                &format!("a new Pod of {name}"),
                Duration::from_secs(120),
                || {
                    let ready = tb.ready_controller_pods(cluster, ns);
                    if ready.iter().any(|p| !args.contains(p)) {
                        Ok(())
                    } else {
                        Err(format!("Ready: {ready:?}"))
                    }
                },
            );
            return;
        }
        start_in(name, "/run/netns/strait-core", None, args);
    }

    /// Starts a process in a network namespace (and a mount namespace), as the testbed does.
    pub fn start_in(name: &str, netns: &str, mount: Option<&str>, args: &[String]) {
        let root = testbed_dir();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(root.join(format!("logs/{name}.log")))
            .expect("log");
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net={netns}"));
        if let Some(m) = mount {
            cmd.arg(format!("--mount={m}"));
        }
        cmd.arg("--")
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log);
        // SAFETY: setsid is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        // Detached on purpose: it outlives the test (init reaps it once the test process ends).
        #[allow(clippy::zombie_processes)]
        let child = cmd.spawn().expect("spawning");
        std::fs::write(
            root.join(format!("pids/{name}.pid")),
            child.id().to_string(),
        )
        .expect("pid file");
    }
}

/// Pauses the testbed's controllers while it lives (tests of the API alone, like the guides'
/// YAML read-back, must not race with controllers acting on what they apply). The admission
/// webhooks they serve are unregistered meanwhile (tests/webhooks.rs tests them) and put back,
/// with their CA, on drop.
pub struct ControllersPaused {
    webhooks: Vec<(String, String)>,
}

/// The testbed's controller processes: one per cluster, and north's second (dual-role) member.
pub fn controller_processes() -> Vec<String> {
    let mut v: Vec<String> = CLUSTERS
        .iter()
        .map(|c| format!("{c}-mc-controller"))
        .collect();
    v.push("north-mc-member".into());
    v
}

const WEBHOOK_KINDS: [&str; 2] = [
    "validatingwebhookconfigurations",
    "mutatingwebhookconfigurations",
];

impl ControllersPaused {
    pub fn new() -> Self {
        let tb = Testbed::from_env();
        let mut webhooks = Vec::new();
        for c in CLUSTERS {
            for kind in WEBHOOK_KINDS {
                let list = tb.get_json(c, &["get", kind, "-l", "served-by=antrea-mc-controller"]);
                for mut item in list["items"].as_array().cloned().unwrap_or_default() {
                    let name = item["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    if let Some(m) = item["metadata"].as_object_mut() {
                        for k in [
                            "resourceVersion",
                            "uid",
                            "creationTimestamp",
                            "managedFields",
                            "generation",
                        ] {
                            m.remove(k);
                        }
                    }
                    tb.delete(c, &[kind, &name]);
                    webhooks.push((c.to_owned(), item.to_string()));
                }
            }
        }
        for name in controller_processes() {
            procs::pause(&name);
        }
        Self { webhooks }
    }
}

impl Default for ControllersPaused {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for ControllersPaused {
    fn drop(&mut self) {
        for name in controller_processes() {
            procs::resume(&name);
        }
        let tb = Testbed::from_env();
        for (c, json) in &self.webhooks {
            let out = tb.with_stdin(c, &["create", "-f", "-"], json);
            if !out.status.success() {
                eprintln!(
                    "restoring a webhook configuration in {c} failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
}

/// kubectl as a ServiceAccount (a token from the TokenRequest API), as a member's controller
/// talks to the leader.
pub struct AsServiceAccount {
    kubectl: PathBuf,
    kubeconfig: PathBuf,
}

impl Testbed {
    pub fn as_service_account(&self, cluster: &str, namespace: &str, sa: &str) -> AsServiceAccount {
        self.as_service_account_of(cluster, namespace, sa, None)
    }

    /// As [`Testbed::as_service_account`], with a token bound to the Pod `pod` (of that
    /// namespace), as the kubelet gives the Pod's containers: the API server adds the Pod's
    /// Node to the caller's user info.
    pub fn as_service_account_of(
        &self,
        cluster: &str,
        namespace: &str,
        sa: &str,
        pod: Option<&str>,
    ) -> AsServiceAccount {
        let mut args = vec!["create", "token", sa, "-n", namespace, "--duration=1h"];
        if let Some(pod) = pod {
            args.extend(["--bound-object-kind", "Pod", "--bound-object-name", pod]);
        }
        let token = self.ok(cluster, &args);
        let view: Value = serde_json::from_str(&self.ok(
            cluster,
            &["config", "view", "--raw", "--minify", "-o", "json"],
        ))
        .expect("kubeconfig JSON");
        let config = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": view["clusters"],
            "users": [{"name": sa, "user": {"token": token.trim()}}],
            "contexts": [{"name": sa, "context": {"cluster": view["clusters"][0]["name"], "user": sa}}],
            "current-context": sa,
        });
        let dir = std::env::temp_dir().join("strait-tests");
        std::fs::create_dir_all(&dir).expect("temp dir");
        let kubeconfig = dir.join(format!(
            "{cluster}-{namespace}-{sa}-{}-{}.json",
            pod.unwrap_or("any"),
            std::process::id()
        ));
        std::fs::write(&kubeconfig, config.to_string()).expect("writing a kubeconfig");
        AsServiceAccount {
            kubectl: self.kubectl.clone(),
            kubeconfig,
        }
    }
}

impl AsServiceAccount {
    /// Runs kubectl with `input` on stdin (when given): (success, stdout, stderr).
    pub fn run(&self, args: &[&str], input: Option<&str>) -> (bool, String, String) {
        let out = run_with_stdin(
            Command::new(&self.kubectl)
                .arg("--kubeconfig")
                .arg(&self.kubeconfig)
                .args(args),
            input,
        );
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

/// The stdout of a run that must succeed (`(success, stdout, stderr)`, as [`Testbed::mcctl`] and
/// [`AsServiceAccount::run`] return it); panics with both outputs when it failed.
pub fn ok(what: &str, (success, out, err): (bool, String, String)) -> String {
    assert!(success, "{what} failed:\n{out}\n{err}");
    out
}

/// Runs `cmd` with `input` (or nothing) on its stdin, capturing stdout and stderr.
fn run_with_stdin(cmd: &mut Command, input: Option<&str>) -> Output {
    use std::io::Write as _;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl");
    let mut stdin = child.stdin.take().expect("stdin");
    if let Some(input) = input {
        stdin.write_all(input.as_bytes()).expect("writing stdin");
    }
    drop(stdin);
    child.wait_with_output().expect("kubectl")
}

impl Drop for AsServiceAccount {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.kubeconfig);
    }
}

/// The `mcctl` binary of this checkout (built once per test process, as a user would build it).
pub fn mcctl_bin() -> PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let out = Command::new(env!("CARGO"))
            .args(["build", "--quiet", "-p", "mcctl", "--message-format=json"])
            .current_dir(repo_root())
            .stderr(Stdio::inherit())
            .output()
            .expect("cargo build -p mcctl");
        assert!(out.status.success(), "building mcctl failed");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|m| m["target"]["name"] == "mcctl")
            .find_map(|m| m["executable"].as_str().map(PathBuf::from))
            .expect("cargo reported no mcctl executable")
    })
    .clone()
}

impl Testbed {
    /// `mcctl --kubeconfig <cluster's admin kubeconfig> args...`: (success, stdout, stderr).
    pub fn mcctl(&self, cluster: &str, args: &[&str]) -> (bool, String, String) {
        let out = Command::new(mcctl_bin())
            .arg("--kubeconfig")
            .arg(&self.kubeconfigs[cluster])
            .args(args)
            .output()
            .expect("running mcctl");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

impl Testbed {
    /// `cluster`'s `TunnelUp` condition on `remote`'s ClusterInfoImport: (status, reason), if
    /// any (the gateway agent's verdict on the tunnel to `remote`'s gateway).
    pub fn tunnel_up(&self, cluster: &str, remote: &str) -> Option<(String, String)> {
        let info = self.try_json(
            cluster,
            &[
                "get",
                "clusterinfoimport",
                "-n",
                join::MEMBER_NS,
                &format!("{}-clusterinfo", join::id(remote)),
            ],
        )?;
        info["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "TunnelUp")
            .map(|c| {
                (
                    c["status"].as_str().unwrap_or_default().to_owned(),
                    c["reason"].as_str().unwrap_or_default().to_owned(),
                )
            })
    }
}
