//! `testbed pod add|del` and `testbed exec <cluster>/<pod>` on kubelet Nodes: real Pods of the
//! testbed's tools image that the Node's kubelet runs (containerd, runc, the `ptp` CNI plugin),
//! in namespace `default`. A Pod's network namespace (the one containerd made for its sandbox)
//! is also named `strait-<cluster>-pod-<name>` in `/run/netns` (`ip netns attach`), so that
//! tests and `ip netns exec` reach it from the host as they reach the Nodes'.

use std::{process::Command as Cmd, time::Duration};

use anyhow::{Context as _, bail};
use serde_json::json;

use crate::{
    image,
    paths::{TEST_SERVER, kube_bin_dir},
    proc::run as exec,
    runtime,
    shared::{ip, kubectl_for, netns_exists, say},
    topology::{Cluster, TestNode},
};

/// The host's name for a Pod's network namespace.
pub fn netns_name(cluster: &str, pod: &str) -> String {
    format!("strait-{cluster}-pod-{pod}")
}

fn kubectl(cluster: &Cluster) -> anyhow::Result<Cmd> {
    Ok(kubectl_for(&kube_bin_dir()?.join("kubectl"), cluster))
}

/// The Pod object `testbed pod add` creates: the tools image running the testbed Pods' server
/// (`serve_http`) or a sleep, labelled `strait.io/testbed-pod` and `labels` (`key=value`).
fn pod_manifest(
    cluster: &Cluster,
    node: &TestNode,
    name: &str,
    labels: &[String],
    serve_http: Option<u16>,
) -> anyhow::Result<serde_json::Value> {
    let mut label_map = serde_json::Map::new();
    label_map.insert("strait.io/testbed-pod".into(), json!(name));
    for l in labels {
        let (k, v) = l
            .split_once('=')
            .with_context(|| format!("label {l:?}: expected key=value"))?;
        label_map.insert(k.into(), json!(v));
    }
    let mut container = json!({
        "name": "main",
        "image": image::reference("test-tools")?,
        "imagePullPolicy": "Never",
        "command": ["/bin/sleep", "2147483647"],
    });
    if let Some(port) = serve_http {
        container["command"] = json!([
            TEST_SERVER,
            "--port",
            port.to_string(),
            "--answer",
            format!("hello from {}/{name}", cluster.name),
        ]);
        container["ports"] = json!([
            {"containerPort": port, "protocol": "TCP"},
            {"containerPort": port, "protocol": "UDP"},
        ]);
        container["readinessProbe"] = json!({"tcpSocket": {"port": port}, "periodSeconds": 1});
    }
    Ok(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": label_map},
        "spec": {
            "nodeName": node.name,
            "terminationGracePeriodSeconds": 1,
            "containers": [container],
        },
    }))
}

/// The Pod `name` on `node`: its server (`--serve-http`) or a shell that sleeps; waits until it is
/// Ready and names its network namespace.
pub fn add(
    cluster: &Cluster,
    node: &TestNode,
    name: &str,
    labels: &[String],
    serve_http: Option<u16>,
) -> anyhow::Result<()> {
    let pod = pod_manifest(cluster, node, name, labels, serve_http)?;
    // A testbed Pod of that name left by an earlier run (a test that failed before deleting
    // it) is replaced, so that tests can run again on the same testbed.
    let leftover = exec(kubectl(cluster)?.args([
        "get",
        "pod",
        "-n",
        "default",
        name,
        "--ignore-not-found",
        "-o",
        "jsonpath={.metadata.labels.strait\\.io/testbed-pod}",
    ]))?;
    if leftover.trim() == name {
        say(format!(
            "replacing the testbed Pod {}/{name} left behind",
            cluster.name
        ));
        del(cluster, name)?;
    }
    let mut child = kubectl(cluster)?
        .args(["create", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    {
        use std::io::Write as _;
        child
            .stdin
            .take()
            .context("stdin")?
            .write_all(pod.to_string().as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "creating Pod {}/{name}: {}",
            cluster.name,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    exec(kubectl(cluster)?.args([
        "wait",
        "--for=condition=Ready",
        "-n",
        "default",
        &format!("pod/{name}"),
        "--timeout=120s",
    ]))
    .with_context(|| {
        format!(
            "Pod {}/{name} did not become Ready; see `kubectl -n default describe pod {name}`",
            cluster.name
        )
    })?;
    let pod = pod_json(cluster, name)?;
    let uid = pod["metadata"]["uid"]
        .as_str()
        .context("no uid")?
        .to_owned();
    let pid = runtime::pod_pids(&uid)
        .into_iter()
        .next()
        .with_context(|| format!("no process of Pod {}/{name} ({uid})", cluster.name))?;
    let netns = netns_name(cluster.name, name);
    if netns_exists(&netns) {
        ip(&["netns", "del", &netns])?;
    }
    ip(&["netns", "attach", &netns, &pid.to_string()])?;
    say(format!(
        "Pod {}/{name} on {}: {} (network namespace {netns})",
        cluster.name,
        node.name,
        pod["status"]["podIP"].as_str().unwrap_or("?")
    ));
    Ok(())
}

fn pod_json(cluster: &Cluster, name: &str) -> anyhow::Result<serde_json::Value> {
    let out = exec(kubectl(cluster)?.args(["get", "pod", "-n", "default", name, "-o", "json"]))?;
    Ok(serde_json::from_str(&out)?)
}

/// Deletes the Pod and waits until it is gone; its namespace's name goes with it.
pub fn del(cluster: &Cluster, name: &str) -> anyhow::Result<()> {
    let netns = netns_name(cluster.name, name);
    if netns_exists(&netns) {
        ip(&["netns", "del", &netns])?;
    }
    exec(kubectl(cluster)?.args([
        "delete",
        "pod",
        "-n",
        "default",
        name,
        "--ignore-not-found",
        "--wait=true",
        "--timeout=60s",
    ]))
    .with_context(|| format!("deleting Pod {}/{name}", cluster.name))?;
    Ok(())
}

/// `kubectl exec` into the Pod's container; returns the command's exit code.
pub fn exec_in(cluster: &Cluster, name: &str, command: &[String]) -> anyhow::Result<i32> {
    let status = kubectl(cluster)?
        .args(["exec", "-n", "default", name, "--"])
        .args(command)
        .status()?;
    Ok(status.code().unwrap_or(1))
}

/// Stops or starts `node`'s kubelet and waits until the Node's Ready condition says so (the
/// kubelet Nodes' `testbed node ready`).
pub fn node_ready(
    cluster: &Cluster,
    node: &TestNode,
    ready: bool,
    switch: impl FnOnce() -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    switch()?;
    let want = if ready { "True" } else { "False|Unknown" };
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let out = exec(kubectl(cluster)?.args([
            "get",
            "node",
            node.name,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ]))?;
        if want.split('|').any(|w| w == out.trim()) {
            say(format!(
                "Node {}/{} Ready={}",
                cluster.name,
                node.name,
                out.trim()
            ));
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            bail!(
                "Node {}/{} is still Ready={} after 90 s",
                cluster.name,
                node.name,
                out.trim()
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}
