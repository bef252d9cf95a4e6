//! Real Pods on the testbed's kubelet Nodes (`cargo xtask testbed up`): containers of the
//! testbed's tools image (busybox, curl, socat) that the kubelets run, and `kubectl exec` into them.

use std::{process::Output, time::Duration};

use crate::{Testbed, wait_for};

/// The testbed's Pod image (`cargo xtask image build test-tools`); never pulled.
pub fn tools_image() -> String {
    format!("localhost/strait-test/tools:v{}", env!("CARGO_PKG_VERSION"))
}

/// A Pod of the tools image running `script` with `sh -c`, labelled `app=<name>`, on `node` if
/// given; waits until it is Ready and returns its IP.
pub fn run(
    tb: &Testbed,
    cluster: &str,
    ns: &str,
    name: &str,
    node: Option<&str>,
    script: &str,
) -> String {
    let pod = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": name}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main",
                "image": tools_image(),
                "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c", script],
            }],
        },
    });
    tb.apply(cluster, ns, &pod.to_string());
    wait_ready(tb, cluster, ns, name)
}

/// A Pod answering HTTP on `port` with `hello from <cluster>/<name>` (busybox httpd).
pub fn web(
    tb: &Testbed,
    cluster: &str,
    ns: &str,
    name: &str,
    node: Option<&str>,
    port: u16,
) -> String {
    run(
        tb,
        cluster,
        ns,
        name,
        node,
        &format!(
            "mkdir -p /tmp/www && echo 'hello from {cluster}/{name}' > /tmp/www/index.html && \
             exec httpd -f -p {port} -h /tmp/www"
        ),
    )
}

/// A Pod that only sleeps: the client side of tests.
pub fn client(tb: &Testbed, cluster: &str, ns: &str, name: &str, node: Option<&str>) -> String {
    run(tb, cluster, ns, name, node, "exec sleep 86400")
}

/// Waits until the Pod is Ready; returns its IP.
pub fn wait_ready(tb: &Testbed, cluster: &str, ns: &str, name: &str) -> String {
    wait_for(
        &format!("Pod {cluster}/{ns}/{name} to be Ready"),
        Duration::from_secs(60),
        || {
            let pod = tb
                .try_json(cluster, &["get", "pod", "-n", ns, name])
                .ok_or("no Pod")?;
            let ready = pod["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            match pod["status"]["podIP"].as_str() {
                Some(ip) if ready => Ok(ip.to_owned()),
                _ => Err(format!("{}", pod["status"])),
            }
        },
    )
}

/// `kubectl exec -n <ns> <pod> -- <args>`.
pub fn exec(tb: &Testbed, cluster: &str, ns: &str, pod: &str, args: &[&str]) -> Output {
    tb.kubectl(cluster)
        .args(["exec", "-n", ns, pod, "--"])
        .args(args)
        .output()
        .expect("kubectl exec")
}

/// `curl` from a Pod: the body, or the error.
pub fn curl(tb: &Testbed, cluster: &str, ns: &str, pod: &str, url: &str) -> Result<String, String> {
    let out = exec(tb, cluster, ns, pod, &["curl", "-sS", "-m", "5", url]);
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}
