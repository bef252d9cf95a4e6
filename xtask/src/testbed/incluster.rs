//! Strait installed into the testbed's clusters as the README tells users (with kubelet Nodes,
//! `testbed up --kubelets`): CoreDNS first (the clusters' `kube-dns`), then the CRDs (already
//! there), `kubectl apply -k deploy/leader` in north, `deploy/member` in north, east and west,
//! and the agent DaemonSet of `deploy/agent` everywhere. The controllers run with their in-cluster
//! config and ServiceAccounts; the API servers reach their webhooks at the Pods' addresses.

use std::{path::Path, time::Duration};

use anyhow::Context as _;

use super::{
    controllers::{LEADER_NS, MEMBER_NS, apply},
    kubectl_for,
    proc::run as exec,
    say,
    topology::{CLUSTERS, Cluster},
};
use crate::{image, paths::repo_root};

const COREDNS: &str = include_str!("manifests/coredns.yaml");

fn image_ref(name: &str) -> anyhow::Result<String> {
    Ok(image::images()?
        .into_iter()
        .find(|i| i.name == name)
        .with_context(|| format!("no image {name}"))?
        .reference)
}

/// CoreDNS, the controllers and the agents in every cluster; waits until they are rolled out.
pub fn install(kubectl: &Path) -> anyhow::Result<()> {
    let coredns = image_ref("test-coredns")?;
    for cluster in &CLUSTERS {
        let manifest = COREDNS
            .replace("__DNS_IP__", &cluster.dns_service_ip())
            .replace("__IMAGE__", &coredns);
        apply(kubectl, cluster, &manifest)
            .with_context(|| format!("installing CoreDNS in {}", cluster.name))?;
    }
    let deploy = repo_root().join("deploy");
    for cluster in &CLUSTERS {
        if cluster.leader {
            kustomize(kubectl, cluster, &deploy.join("leader"))?;
        }
        kustomize(kubectl, cluster, &deploy.join("member"))?;
        kustomize(kubectl, cluster, &deploy.join("agent"))?;
    }
    for cluster in &CLUSTERS {
        rollout(kubectl, cluster, "kube-system", "deployment/coredns")?;
        if cluster.leader {
            rollout(
                kubectl,
                cluster,
                LEADER_NS,
                "deployment/antrea-mc-controller",
            )?;
        }
        rollout(
            kubectl,
            cluster,
            MEMBER_NS,
            "deployment/antrea-mc-controller",
        )?;
    }
    say("Strait installed from deploy/ in every cluster (controllers ready)");
    Ok(())
}

/// Waits until every agent is ready (an agent is ready once its cluster has a Gateway, that is
/// once the cluster joined a ClusterSet).
pub fn wait_agents(kubectl: &Path) -> anyhow::Result<()> {
    for cluster in CLUSTERS.iter().filter(|c| !c.leader) {
        rollout(kubectl, cluster, "kube-system", "daemonset/strait-agent")?;
    }
    say("the agents of the members are ready");
    Ok(())
}

fn kustomize(kubectl: &Path, cluster: &Cluster, dir: &Path) -> anyhow::Result<()> {
    exec(
        kubectl_for(kubectl, cluster)
            .args(["apply", "--server-side", "--force-conflicts", "-k"])
            .arg(dir),
    )
    .with_context(|| format!("kubectl apply -k {} in {}", dir.display(), cluster.name))?;
    Ok(())
}

fn rollout(kubectl: &Path, cluster: &Cluster, ns: &str, what: &str) -> anyhow::Result<()> {
    let timeout = Duration::from_secs(180);
    exec(kubectl_for(kubectl, cluster).args([
        "rollout",
        "status",
        "-n",
        ns,
        what,
        &format!("--timeout={}s", timeout.as_secs()),
    ]))
    .with_context(|| {
        format!(
            "{what} in {} (namespace {ns}) did not roll out; see `kubectl -n {ns} get pods -o wide` and `kubectl -n {ns} describe {what}`",
            cluster.name
        )
    })?;
    Ok(())
}
