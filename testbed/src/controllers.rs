//! The multi-cluster controllers on the testbed: the leader in north (Common Area
//! `antrea-multicluster`), members in east and west (namespace `kube-system`), each a process in
//! the testbed's core namespace with its admin kubeconfig, its MultiClusterConfig file, and
//! `/healthz` `/readyz` `/metrics` on `<API address>:8080`. `--join` then performs the guides'
//! join (member ServiceAccounts, token Secrets, RoleBindings, ClusterSets).

use std::{
    io::{Read as _, Write as _},
    net::TcpStream,
    path::{Path, PathBuf},
    process::Stdio,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use serde::Deserialize as _;

use crate::{
    cargo::build_bin,
    paths::{repo_root, testbed_dir},
    proc::{self, Procs, run as exec},
    shared::{admin_kubeconfig, cluster_dir, kubectl_for, say},
    topology::{CLUSTERS, CORE_NETNS, Cluster},
};

pub const LEADER_NS: &str = "antrea-multicluster";
pub const MEMBER_NS: &str = "kube-system";
pub const CLUSTERSET: &str = "test-clusterset";
/// The leader's grace period before a silent member's endpoints are withdrawn, on the testbed.
pub const WITHDRAW_AFTER_SECS: u32 = 15;

pub fn process_name(cluster: &Cluster) -> String {
    format!("{}-mc-controller", cluster.name)
}

/// The north cluster's second controller: a member in kube-system beside the leader (the
/// dual-role cluster of the guides). It joins nothing until someone joins it.
pub fn dual_member_name(cluster: &Cluster) -> String {
    format!("{}-mc-member", cluster.name)
}

/// One controller process of the testbed.
pub struct Instance {
    pub cluster: &'static Cluster,
    pub leader: bool,
}

impl Instance {
    /// Every controller: the leader and a member in north, a member in east and in west.
    pub fn all() -> Vec<Instance> {
        let mut v = Vec::new();
        for cluster in &CLUSTERS {
            v.push(Instance {
                cluster,
                leader: cluster.leader,
            });
            if cluster.leader {
                v.push(Instance {
                    cluster,
                    leader: false,
                });
            }
        }
        v
    }

    /// The second controller of a dual-role cluster.
    fn dual(&self) -> bool {
        self.cluster.leader && !self.leader
    }

    pub fn name(&self) -> String {
        if self.dual() {
            dual_member_name(self.cluster)
        } else {
            process_name(self.cluster)
        }
    }

    fn role(&self) -> &'static str {
        if self.leader { "leader" } else { "member" }
    }

    fn namespace(&self) -> &'static str {
        if self.leader { LEADER_NS } else { MEMBER_NS }
    }

    pub fn health_addr(&self) -> String {
        let port = if self.dual() { 8081 } else { 8080 };
        format!("{}:{port}", self.cluster.api_ip)
    }

    /// Where the controller serves its admission webhooks.
    pub fn webhook_addr(&self) -> String {
        let port = if self.dual() { 9444 } else { 9443 };
        format!("{}:{port}", self.cluster.api_ip)
    }
}

/// The role's webhook configurations from `deploy/<role>/webhooks.yaml`, pointed at the
/// controller process by URL (the testbed has no Service network for the API server to reach
/// `antrea-mc-webhook-service` through). The controller fills caBundle in when it starts.
fn register_webhooks(kubectl: &Path, instance: &Instance) -> anyhow::Result<()> {
    let (cluster, role) = (instance.cluster, instance.role());
    let path = repo_root().join(format!("deploy/{role}/webhooks.yaml"));
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let mut v = serde_yaml::Value::deserialize(doc)?;
        if let Some(hooks) = v
            .get_mut("webhooks")
            .and_then(serde_yaml::Value::as_sequence_mut)
        {
            for hook in hooks {
                let path = hook["clientConfig"]["service"]["path"]
                    .as_str()
                    .with_context(|| format!("a webhook in {} has no service path", role))?
                    .to_owned();
                let mut cc = serde_yaml::Mapping::new();
                cc.insert(
                    "url".into(),
                    format!("https://{}{path}", instance.webhook_addr()).into(),
                );
                hook["clientConfig"] = cc.into();
            }
        }
        docs.push(serde_yaml::to_string(&v)?);
    }
    apply(kubectl, cluster, &docs.join("---\n"))
        .with_context(|| format!("registering the {role} webhooks in {}", cluster.name))
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.len() == y.len() && x.modified().ok() == y.modified().ok(),
        _ => false,
    }
}

fn config_file(cluster: &Cluster) -> anyhow::Result<PathBuf> {
    let path = cluster_dir(cluster).join("controller_manager_config.yaml");
    // The documented defaults: serviceCIDR empty, so members discover it.
    std::fs::write(
        &path,
        "apiVersion: multicluster.crd.antrea.io/v1alpha1\nkind: MultiClusterConfig\nserviceCIDR: \"\"\npodCIDRs:\n  - \"\"\ngatewayIPPrecedence: \"private\"\nendpointIPType: \"ClusterIP\"\nenableStretchedNetworkPolicy: false\n",
    )?;
    Ok(path)
}

/// Builds, installs and starts the controllers (restarting them when the binary changed), then
/// waits until each reports ready.
pub fn start(procs: &Procs, kubectl: &Path, release: bool) -> anyhow::Result<()> {
    let built = build_bin("mc-controller", release)?;
    let bin_dir = testbed_dir().join("bin");
    std::fs::create_dir_all(&bin_dir)?;
    let installed = bin_dir.join("mc-controller");
    if !same_file(&built, &installed) {
        let running: Vec<i32> = Instance::all()
            .iter()
            .filter_map(|i| procs.running(&i.name()))
            .collect();
        if !running.is_empty() {
            say("mc-controller changed: restarting the controllers");
            proc::terminate(&running, Duration::from_secs(10));
        }
        // Copy to a temporary name, then rename: a running binary is never overwritten.
        let tmp = bin_dir.join("mc-controller.new");
        std::fs::copy(&built, &tmp)?;
        let mtime = std::fs::metadata(&built)?.modified()?;
        std::fs::File::options()
            .write(true)
            .open(&tmp)?
            .set_modified(mtime)?;
        std::fs::rename(&tmp, &installed)?;
    }
    let leader = CLUSTERS.iter().find(|c| c.leader).expect("one leader");
    exec(
        kubectl_for(kubectl, leader)
            .args(["apply", "-f"])
            .arg(repo_root().join("deploy/leader/namespace.yaml"))
            .arg("-f")
            .arg(repo_root().join("deploy/leader/member-cluster-role.yaml")),
    )
    .context("creating the Common Area and the member Role in the leader")?;
    for instance in Instance::all() {
        register_webhooks(kubectl, &instance)?;
    }
    for instance in Instance::all() {
        let (cluster, role) = (instance.cluster, instance.role());
        let mut args = vec![
            role.to_owned(),
            format!("--kubeconfig={}", admin_kubeconfig(cluster).display()),
            format!("--namespace={}", instance.namespace()),
            format!("--config={}", config_file(cluster)?.display()),
            format!("--health-addr={}", instance.health_addr()),
            format!("--webhook-addr={}", instance.webhook_addr()),
            format!("--webhook-host={}", cluster.api_ip),
        ];
        if instance.leader {
            // Shorter than the 60 s default, so that the tests of withdrawal stay quick.
            args.push(format!("--withdraw-after={WITHDRAW_AFTER_SECS}"));
        }
        if procs.ensure(&instance.name(), CORE_NETNS, &installed, &args)? {
            say(format!(
                "started the {role} controller for {}",
                cluster.name
            ));
        }
    }
    for instance in Instance::all() {
        wait_ready(procs, &instance)?;
    }
    Ok(())
}

/// A plain HTTP/1.0 GET: (status code, body).
pub fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr.parse().ok()?, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
    Some((code, body))
}

fn wait_ready(procs: &Procs, instance: &Instance) -> anyhow::Result<()> {
    let (cluster, name) = (instance.cluster, instance.name());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let answer = http_get(&instance.health_addr(), "/readyz");
        if matches!(answer, Some((200, _))) {
            return Ok(());
        }
        if procs.running(&name).is_none() {
            bail!(
                "the controller for {} exited; see {}",
                cluster.name,
                procs.log_path(&name).display()
            );
        }
        if Instant::now() > deadline {
            bail!(
                "the controller for {} is not ready after 60 s ({:?}); see {}",
                cluster.name,
                answer.map(|(_, b)| b),
                procs.log_path(&name).display()
            );
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

pub(super) fn apply(kubectl: &Path, cluster: &Cluster, yaml: &str) -> anyhow::Result<()> {
    let mut child = kubectl_for(kubectl, cluster)
        .args(["apply", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .context("kubectl stdin")?
        .write_all(yaml.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "kubectl apply in {} refused:\n{yaml}\n{}",
            cluster.name,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// The guides' join (v1alpha2 forms): cluster IDs `test-cluster-<name>`, ClusterSet
/// `test-clusterset`, per member a ServiceAccount `member-<name>-access-sa`, token Secret
/// `member-<name>-access-token` and RoleBinding in the leader.
pub fn join(kubectl: &Path) -> anyhow::Result<()> {
    let leader = CLUSTERS.iter().find(|c| c.leader).expect("one leader");
    apply(
        kubectl,
        leader,
        &format!(
            "apiVersion: multicluster.crd.antrea.io/v1alpha2\nkind: ClusterSet\nmetadata:\n  name: {CLUSTERSET}\n  namespace: {LEADER_NS}\nspec:\n  clusterID: test-cluster-{id}\n  leaders:\n    - clusterID: test-cluster-{id}\n",
            id = leader.name
        ),
    )?;
    for member in CLUSTERS.iter().filter(|c| !c.leader) {
        let m = member.name;
        apply(
            kubectl,
            leader,
            &format!(
                "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: member-{m}-access-sa\n  namespace: {LEADER_NS}\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: member-{m}-access-token\n  namespace: {LEADER_NS}\n  annotations:\n    kubernetes.io/service-account.name: member-{m}-access-sa\ntype: kubernetes.io/service-account-token\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: member-{m}-access-rolebinding\n  namespace: {LEADER_NS}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: antrea-mc-member-cluster-role\nsubjects:\n  - kind: ServiceAccount\n    name: member-{m}-access-sa\n    namespace: {LEADER_NS}\n"
            ),
        )?;
        // The token controller fills the Secret in.
        let deadline = Instant::now() + Duration::from_secs(30);
        let (ca, token) = loop {
            let out = exec(kubectl_for(kubectl, leader).args([
                "get",
                "secret",
                "-n",
                LEADER_NS,
                &format!("member-{m}-access-token"),
                "-o",
                "jsonpath={.data.ca\\.crt} {.data.token}",
            ]))?;
            let mut parts = out.split_whitespace();
            if let (Some(ca), Some(token)) = (parts.next(), parts.next()) {
                break (ca.to_owned(), token.to_owned());
            }
            if Instant::now() > deadline {
                bail!(
                    "the token Secret member-{m}-access-token in north was not filled in within 30 s"
                );
            }
            std::thread::sleep(Duration::from_millis(300));
        };
        apply(
            kubectl,
            member,
            &format!(
                "apiVersion: v1\nkind: Secret\nmetadata:\n  name: member-{m}-access-token\n  namespace: {MEMBER_NS}\ntype: Opaque\ndata:\n  ca.crt: {ca}\n  token: {token}\n---\napiVersion: multicluster.crd.antrea.io/v1alpha2\nkind: ClusterSet\nmetadata:\n  name: {CLUSTERSET}\n  namespace: {MEMBER_NS}\nspec:\n  clusterID: test-cluster-{m}\n  leaders:\n    - clusterID: test-cluster-{leader}\n      secret: member-{m}-access-token\n      server: {server}\n  namespace: {LEADER_NS}\n",
                leader = leader.name,
                server = leader.server(),
            ),
        )?;
    }
    let members = CLUSTERS.iter().filter(|c| !c.leader).count();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ready = exec(kubectl_for(kubectl, leader).args([
            "get",
            "clusterset",
            "-n",
            LEADER_NS,
            CLUSTERSET,
            "-o",
            "jsonpath={.status.readyClusters}",
        ]))?;
        if ready.trim() == members.to_string() {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "the leader reports {} of {members} members ready after 60 s; see {}",
                ready.trim(),
                testbed_dir().join("logs").display()
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    say(format!(
        "ClusterSet {CLUSTERSET} is ready: east and west joined north"
    ));
    Ok(())
}
