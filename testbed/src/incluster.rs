//! Strait installed into the testbed's clusters as the README tells users (with kubelet Nodes,
//! `testbed up`, the default): CoreDNS first (the clusters' `kube-dns`), then the CRDs (already
//! there), `kubectl apply -k deploy/leader` in north, `deploy/member` and `deploy/agent` in north
//! and east, and in west the Helm chart (`helm install strait deploy/chart/strait` with the
//! member and the agent enabled): both paths a user may take. The controllers run with their
//! in-cluster config and ServiceAccounts; the API servers reach their webhooks at the Pods'
//! addresses.

use std::{path::Path, process::Command as Cmd, time::Duration};

use anyhow::Context as _;

use crate::{
    controllers::{self, LEADER_NS, MEMBER_NS, apply},
    image,
    paths::{helm_bin, repo_root, testbed_dir},
    proc::run as exec,
    shared::{admin_kubeconfig, kubectl_for, say},
    topology::{CLUSTERS, Cluster},
};

const COREDNS: &str = include_str!("manifests/coredns.yaml");
/// The cluster installed with the Helm chart instead of the manifests.
pub const HELM_CLUSTER: &str = "west";

/// The agents' configuration on the testbed: the defaults of deploy/agent/configmap.yaml with
/// Pod-to-Pod connectivity on (the guides' PodIP endpoint type needs it), stretched
/// NetworkPolicy on (label identities in the VNI) and traffic between gateways encrypted
/// (WireGuard), set the way an operator would: `kubectl edit` of the ConfigMap (or the chart's
/// `agent.config`) and a restart.
const AGENT_CONFIG: &str = "multicluster:\n  enableGateway: true\n  enablePodToPodConnectivity: true\n  enableStretchedNetworkPolicy: true\n  trafficEncryptionMode: wireGuard\n  wireGuard:\n    port: 51821\n  namespace: \"\"\n  uplink: \"\"\n  tunnelPort: 6081\n  pinPath: /sys/fs/bpf/mc/v1\n";

/// The controllers' configuration on the testbed: the defaults of
/// deploy/base/controller/configmap.yaml with stretched NetworkPolicy on (label identities), set
/// the way an operator would: `kubectl edit` of the ConfigMap (or the chart's `controllerConfig`)
/// and a restart.
const CONTROLLER_CONFIG: &str = "apiVersion: multicluster.crd.antrea.io/v1alpha1\nkind: MultiClusterConfig\nserviceCIDR: \"\"\npodCIDRs:\n  - \"\"\ngatewayIPPrecedence: \"private\"\nendpointIPType: \"ClusterIP\"\nenableStretchedNetworkPolicy: true\n";

/// Sets `key` of ConfigMap `configmap` in `ns` to `value` and restarts `workload` (as an
/// operator edits a config and restarts what reads it).
fn configure(
    kubectl: &Path,
    cluster: &Cluster,
    ns: &str,
    (configmap, key, value): (&str, &str, &str),
    workload: &str,
) -> anyhow::Result<()> {
    let patch = serde_json::json!({ "data": { key: value } });
    exec(kubectl_for(kubectl, cluster).args([
        "patch",
        "configmap",
        "-n",
        ns,
        configmap,
        "--type=merge",
        "-p",
        &patch.to_string(),
    ]))?;
    exec(kubectl_for(kubectl, cluster).args(["rollout", "restart", "-n", ns, workload]))?;
    Ok(())
}

/// The controllers' config ([`CONTROLLER_CONFIG`]) for the controller in `ns`, restarted.
fn configure_controller(kubectl: &Path, cluster: &Cluster, ns: &str) -> anyhow::Result<()> {
    configure(
        kubectl,
        cluster,
        ns,
        (
            "antrea-mc-controller-config",
            "controller_manager_config.yaml",
            CONTROLLER_CONFIG,
        ),
        "deployment/antrea-mc-controller",
    )
}

/// `helm upgrade --install strait <chart>` with the member and the agent (a member cluster).
fn helm_install(cluster: &Cluster, chart: &Path) -> anyhow::Result<()> {
    let config = testbed_dir().join("strait-agent.conf");
    std::fs::write(&config, AGENT_CONFIG)?;
    let controller_config = testbed_dir().join("controller_manager_config.yaml");
    std::fs::write(&controller_config, CONTROLLER_CONFIG)?;
    exec(
        Cmd::new(helm_bin()?)
            .arg("--kubeconfig")
            .arg(admin_kubeconfig(cluster))
            .args(["upgrade", "--install", "strait"])
            .arg(chart)
            .args([
                "--namespace",
                MEMBER_NS,
                "--set",
                "member.enabled=true",
                "--set",
                "agent.enabled=true",
                "--set-file",
                &format!("agent.config={}", config.display()),
                "--set-file",
                &format!("controllerConfig={}", controller_config.display()),
            ]),
    )
    .with_context(|| format!("helm install of {} in {}", chart.display(), cluster.name))?;
    Ok(())
}

/// CoreDNS, the controllers and the agents in every cluster; waits until they are rolled out.
pub fn install(kubectl: &Path) -> anyhow::Result<()> {
    let coredns = image::reference("test-coredns")?;
    let deploy = repo_root().join("deploy");
    for cluster in &CLUSTERS {
        kustomize(kubectl, cluster, &deploy.join("coredns"))?;
        let manifest = COREDNS
            .replace("__DNS_IP__", &cluster.dns_service_ip())
            .replace("__IMAGE__", &coredns);
        apply(kubectl, cluster, &manifest)
            .with_context(|| format!("installing CoreDNS in {}", cluster.name))?;
    }
    for cluster in &CLUSTERS {
        if cluster.name == HELM_CLUSTER {
            helm_install(cluster, &deploy.join("chart/strait"))?;
            continue;
        }
        if cluster.leader {
            kustomize(kubectl, cluster, &deploy.join("leader"))?;
            withdraw_sooner(kubectl, cluster)?;
            configure_controller(kubectl, cluster, LEADER_NS)?;
        }
        kustomize(kubectl, cluster, &deploy.join("member"))?;
        configure_controller(kubectl, cluster, MEMBER_NS)?;
        kustomize(kubectl, cluster, &deploy.join("agent"))?;
        configure(
            kubectl,
            cluster,
            "kube-system",
            ("strait-agent-config", "strait-agent.conf", AGENT_CONFIG),
            "daemonset/strait-agent",
        )?;
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
    for cluster in &CLUSTERS {
        if cluster.leader {
            webhooks_at_current_pods(kubectl, cluster, LEADER_NS)?;
        }
        webhooks_at_current_pods(kubectl, cluster, MEMBER_NS)?;
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

/// The leader's grace before a silent member's endpoints are withdrawn, shorter than the 60 s
/// default so that the tests of withdrawal stay quick: an argument added to the Deployment, as an
/// operator would patch it (`kubectl patch --type=json`), once.
fn withdraw_sooner(kubectl: &Path, cluster: &Cluster) -> anyhow::Result<()> {
    let flag = format!("--withdraw-after={}", controllers::WITHDRAW_AFTER_SECS);
    let args = exec(kubectl_for(kubectl, cluster).args([
        "get",
        "deployment",
        "-n",
        LEADER_NS,
        "antrea-mc-controller",
        "-o",
        "jsonpath={.spec.template.spec.containers[0].args}",
    ]))?;
    if args.contains(&flag) {
        return Ok(());
    }
    let patch = serde_json::json!([
        {"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": flag}
    ]);
    exec(kubectl_for(kubectl, cluster).args([
        "patch",
        "deployment",
        "-n",
        LEADER_NS,
        "antrea-mc-controller",
        "--type=json",
        "-p",
        &patch.to_string(),
    ]))?;
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

/// Waits until the webhook Service in `ns` sends the API server only to the controller Pods that
/// run now. `kubectl rollout status` returns once the old Pods are scaled down, while the
/// EndpointSlice names a terminating Pod as ready until the Pod object is gone (the Service
/// publishes not-ready addresses): a ClusterSet created then could reach a controller that has
/// exited.
fn webhooks_at_current_pods(kubectl: &Path, cluster: &Cluster, ns: &str) -> anyhow::Result<()> {
    let json = |args: &[&str]| -> anyhow::Result<serde_json::Value> {
        let out = exec(
            kubectl_for(kubectl, cluster)
                .args(args)
                .args(["-o", "json"]),
        )?;
        Ok(serde_json::from_str(&out)?)
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let pods = json(&[
            "get",
            "pods",
            "-n",
            ns,
            "-l",
            "component=antrea-mc-controller",
        ])?;
        let mut current: Vec<String> = pods["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            // (A Failed or Succeeded Pod is in no slice.)
            .filter(|p| matches!(p["status"]["phase"].as_str(), Some("Running" | "Pending")))
            .filter_map(|p| p["status"]["podIP"].as_str().map(str::to_owned))
            .collect();
        let slices = json(&[
            "get",
            "endpointslices",
            "-n",
            ns,
            "-l",
            "kubernetes.io/service-name=antrea-mc-webhook-service",
        ])?;
        let mut ready: Vec<String> = slices["items"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
            .filter(|e| e["conditions"]["ready"] != false)
            .filter_map(|e| e["addresses"][0].as_str().map(str::to_owned))
            .collect();
        current.sort();
        ready.sort();
        ready.dedup();
        if !ready.is_empty() && ready == current {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            anyhow::bail!(
                "the webhook Service in {} (namespace {ns}) still sends to {ready:?} while the controller Pods are at {current:?}; see `kubectl -n {ns} get endpointslices,pods -o wide`",
                cluster.name
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}
