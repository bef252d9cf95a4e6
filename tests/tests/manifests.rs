//! The deployment manifests are valid for a real API server (`kubectl apply --dry-run=server`).

use mc_integration::{Testbed, repo_root};
use serde::Deserialize as _;
use serde_json::Value;

fn dry_run(tb: &Testbed, cluster: &str, dir: &str) {
    let path = repo_root().join(dir);
    let out = tb
        .kubectl(cluster)
        .args(["apply", "--dry-run=server", "-k"])
        .arg(&path)
        .output()
        .expect("kubectl");
    assert!(
        out.status.success(),
        "{dir} is not valid for {cluster}'s API server:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("(server dry run)"),
        "{dir}: expected a server dry run, got:\n{stdout}"
    );
}

#[test]
fn leader_manifests_validate_on_the_leader() {
    let tb = Testbed::from_env();
    tb.ensure_namespace("north", "antrea-multicluster");
    dry_run(&tb, "north", "deploy/leader");
}

#[test]
fn member_agent_and_cleanup_manifests_validate_on_a_member() {
    let tb = Testbed::from_env();
    dry_run(&tb, "east", "deploy/member");
    dry_run(&tb, "east", "deploy/agent");
    dry_run(&tb, "east", "deploy/uninstall");
}

/// (kind, namespace, name): objects sorted by it compare one to one.
fn object_id(d: &Value) -> (String, String, String) {
    let s = |v: &Value| v.as_str().unwrap_or("").to_owned();
    (
        s(&d["kind"]),
        s(&d["metadata"]["namespace"]),
        s(&d["metadata"]["name"]),
    )
}

fn docs(yaml: &str) -> Vec<Value> {
    let mut v: Vec<Value> = serde_yaml::Deserializer::from_str(yaml)
        .map(|d| {
            serde_json::to_value(serde_yaml::Value::deserialize(d).expect("YAML")).expect("JSON")
        })
        .filter(|d: &Value| !d.is_null())
        .collect();
    v.sort_by_key(object_id);
    v
}

fn render(sets: &[&str]) -> String {
    let mut cmd = std::process::Command::new(mc_integration::helm_bin());
    cmd.args(["template", "strait"])
        .arg(repo_root().join("deploy/chart/strait"));
    for s in sets {
        cmd.args(["--set", s]);
    }
    let out = cmd.output().expect("helm");
    assert!(
        out.status.success(),
        "helm template {sets:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn kustomize(tb: &Testbed, dirs: &[&str]) -> Vec<Value> {
    let mut all = Vec::new();
    for dir in dirs {
        let out = tb
            .kubectl("north")
            .arg("kustomize")
            .arg(repo_root().join(dir))
            .output()
            .expect("kubectl kustomize");
        assert!(out.status.success(), "kubectl kustomize {dir}");
        all.extend(docs(&String::from_utf8_lossy(&out.stdout)));
    }
    all.sort_by_key(object_id);
    all
}

fn dry_run_yaml(tb: &Testbed, cluster: &str, yaml: &str) {
    let out = tb.with_stdin(cluster, &["apply", "--dry-run=server", "-f", "-"], yaml);
    assert!(
        out.status.success(),
        "the chart's objects are not valid for {cluster}'s API server:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_chart_renders_the_manifests_objects_and_they_validate() {
    let tb = Testbed::from_env();
    for (sets, dirs, cluster) in [
        (
            &["leader.enabled=true"][..],
            &["deploy/leader"][..],
            "north",
        ),
        (
            &["member.enabled=true", "agent.enabled=true"][..],
            &["deploy/member", "deploy/agent"][..],
            "east",
        ),
        (
            &[
                "leader.enabled=true",
                "member.enabled=true",
                "agent.enabled=true",
            ][..],
            &["deploy/leader", "deploy/member", "deploy/agent"][..],
            "north",
        ),
    ] {
        let rendered = render(sets);
        let (chart, plain) = (docs(&rendered), kustomize(&tb, dirs));
        let ids = |v: &[Value]| -> Vec<String> {
            v.iter()
                .map(|d| {
                    format!(
                        "{} {}/{}",
                        d["kind"], d["metadata"]["namespace"], d["metadata"]["name"]
                    )
                })
                .collect()
        };
        assert_eq!(
            ids(&chart),
            ids(&plain),
            "{sets:?}: the chart and the manifests differ in objects"
        );
        for (c, p) in chart.iter().zip(&plain) {
            assert_eq!(c, p, "{sets:?}: the chart renders this object differently");
        }
        dry_run_yaml(&tb, cluster, &rendered);
    }
    // Values: another leader namespace, images and configuration.
    let rendered = render(&[
        "leader.enabled=true",
        "leader.namespace=mc-leader",
        "image.controller=registry.example/strait/mc-controller:dev",
        "controllerConfig=serviceCIDR: 10.96.0.0/16\n",
        "leader.extraArgs={--withdraw-after=30,--member-timeout=20}",
    ]);
    let objs = docs(&rendered);
    for o in &objs {
        let ns = &o["metadata"]["namespace"];
        // The one exception: the leader reads the API server's addresses (Endpoints
        // default/kubernetes) through a Role there.
        let apiserver =
            ns == "default" && o["metadata"]["name"] == "antrea-mc-controller-leader-apiserver";
        assert!(ns.is_null() || ns == "mc-leader" || apiserver, "{o}");
        assert!(!o.to_string().contains("antrea-multicluster"), "{o}");
        if apiserver && o["kind"] == "RoleBinding" {
            assert_eq!(o["subjects"][0]["namespace"], "mc-leader", "{o}");
        }
    }
    let deploy = objs
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("Deployment");
    let c = &deploy["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["image"], "registry.example/strait/mc-controller:dev");
    assert_eq!(c["args"][1], "--namespace=mc-leader");
    assert_eq!(
        c["args"],
        serde_json::json!([
            "leader",
            "--namespace=mc-leader",
            "--config=/etc/strait/controller_manager_config.yaml",
            "--withdraw-after=30",
            "--member-timeout=20"
        ]),
        "extra arguments are appended"
    );
    let agent = docs(&render(&[
        "agent.enabled=true",
        "agent.extraArgs={--resync=60}",
        "image.agent=registry.example/strait/mc-agent:dev",
    ]));
    let ds = agent
        .iter()
        .find(|o| o["kind"] == "DaemonSet")
        .expect("DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(
        pod["containers"][0]["args"],
        serde_json::json!([
            "run",
            "--config=/etc/strait/strait-agent.conf",
            "--resync=60"
        ])
    );
    // The image of the agent and of the init container that mounts bpffs.
    for c in [&pod["containers"][0], &pod["initContainers"][0]] {
        assert_eq!(c["image"], "registry.example/strait/mc-agent:dev", "{c}");
    }
    // One value per port: the container port (which the probes and the webhook Service name)
    // and the listener's flag move together; the agent follows the member's namespace.
    let moved = docs(&render(&[
        "member.enabled=true",
        "agent.enabled=true",
        "member.namespace=strait-member",
        "ports.webhook=10443",
        "ports.controllerHealth=8181",
        "ports.agentHealth=9191",
    ]));
    let container = |kind: &str| {
        let o = moved
            .iter()
            .find(|o| o["kind"] == kind)
            .unwrap_or_else(|| panic!("{kind}"));
        assert_eq!(o["metadata"]["namespace"], "strait-member", "{kind}");
        o["spec"]["template"]["spec"]["containers"][0].clone()
    };
    let c = container("Deployment");
    assert_eq!(
        c["ports"],
        serde_json::json!([
            {"name": "http", "containerPort": 8181},
            {"name": "webhook", "containerPort": 10443}
        ])
    );
    let args = c["args"].to_string();
    assert!(
        args.contains("--health-addr=:8181") && args.contains("--webhook-addr=:10443"),
        "{args}"
    );
    let c = container("DaemonSet");
    assert_eq!(
        c["ports"],
        serde_json::json!([{"name": "http", "containerPort": 9191}])
    );
    assert!(c["args"].to_string().contains("--health-addr=:9191"), "{c}");
    let cm = objs
        .iter()
        .find(|o| o["kind"] == "ConfigMap")
        .expect("ConfigMap");
    assert_eq!(
        cm["data"]["controller_manager_config.yaml"],
        "serviceCIDR: 10.96.0.0/16\n"
    );
    let hooks = objs
        .iter()
        .find(|o| o["kind"] == "ValidatingWebhookConfiguration")
        .expect("webhooks");
    assert_eq!(
        hooks["webhooks"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "mc-leader"
    );
    assert!(
        render(&[]).trim().is_empty(),
        "nothing is enabled by default"
    );
}

/// What the controllers' ServiceAccounts may do, once deploy/'s RBAC is applied for real: every
/// call the webhooks make (the testbed runs the controllers with admin credentials, so only this
/// test would notice a missing grant).
#[test]
fn the_controllers_rbac_grants_what_the_webhooks_use() {
    let tb = Testbed::from_env();
    for (cluster, dir) in [
        ("north", "deploy/leader/rbac.yaml"),
        ("east", "deploy/member/rbac.yaml"),
    ] {
        let out = tb
            .kubectl(cluster)
            .args(["apply", "-f"])
            .arg(repo_root().join(dir))
            .output()
            .expect("kubectl");
        assert!(
            out.status.success(),
            "{dir}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let can = |cluster: &str, sa: &str, args: &[&str]| {
        let mut all = vec!["auth", "can-i", "--as", sa];
        all.extend(args);
        let out = tb.kubectl(cluster).args(&all).output().expect("kubectl");
        assert!(
            String::from_utf8_lossy(&out.stdout).trim() == "yes",
            "{sa} in {cluster} may not {args:?}"
        );
    };
    let leader = "system:serviceaccount:antrea-multicluster:antrea-mc-controller";
    for args in [
        &["list", "validatingwebhookconfigurations"][..],
        &["list", "mutatingwebhookconfigurations"],
        &[
            "update",
            "validatingwebhookconfigurations/antrea-mc-leader-validating",
        ],
        &[
            "update",
            "mutatingwebhookconfigurations/antrea-mc-leader-mutating",
        ],
        &[
            "patch",
            "configmaps/antrea-mc-ca",
            "-n",
            "antrea-multicluster",
        ],
        &["create", "secrets", "-n", "antrea-multicluster"],
        &[
            "update",
            "secrets/antrea-mc-webhook-ca",
            "-n",
            "antrea-multicluster",
        ],
        &["get", "serviceaccounts", "-n", "antrea-multicluster"],
        &["list", "serviceaccounts", "-n", "antrea-multicluster"],
        &["patch", "serviceaccounts", "-n", "antrea-multicluster"],
        &[
            "list",
            "clustersets.multicluster.crd.antrea.io",
            "-n",
            "antrea-multicluster",
        ],
        &[
            "list",
            "memberclusterannounces.multicluster.crd.antrea.io",
            "-n",
            "antrea-multicluster",
        ],
        &["create", "selfsubjectreviews.authentication.k8s.io"],
    ] {
        can("north", leader, args);
    }
    // A member's token may write announces and exports (the webhooks narrow it to its own),
    // not the statuses the leader writes.
    let token = "system:serviceaccount:antrea-multicluster:member-token-probe";
    for args in [
        &[
            "create",
            "memberclusterannounces.multicluster.crd.antrea.io",
            "-n",
            "antrea-multicluster",
        ][..],
        &[
            "patch",
            "resourceexports.multicluster.crd.antrea.io",
            "-n",
            "antrea-multicluster",
        ],
        &["create", "events", "-n", "antrea-multicluster"],
    ] {
        can_with_role(&tb, token, args, true);
    }
    for args in [
        &[
            "patch",
            "resourceexports.multicluster.crd.antrea.io",
            "--subresource=status",
            "-n",
            "antrea-multicluster",
        ][..],
        &[
            "patch",
            "resourceimports.multicluster.crd.antrea.io",
            "--subresource=status",
            "-n",
            "antrea-multicluster",
        ],
        &[
            "create",
            "resourceimports.multicluster.crd.antrea.io",
            "-n",
            "antrea-multicluster",
        ],
    ] {
        can_with_role(&tb, token, args, false);
    }
    let member = "system:serviceaccount:kube-system:antrea-mc-controller";
    for args in [
        &["list", "validatingwebhookconfigurations"][..],
        &[
            "update",
            "validatingwebhookconfigurations/antrea-mc-member-validating",
        ],
        &["patch", "configmaps/antrea-mc-ca", "-n", "kube-system"],
        &["create", "secrets", "-n", "kube-system"],
        &[
            "update",
            "secrets/antrea-mc-webhook-ca",
            "-n",
            "kube-system",
        ],
        &[
            "list",
            "clustersets.multicluster.crd.antrea.io",
            "-n",
            "kube-system",
        ],
        &["create", "selfsubjectreviews.authentication.k8s.io"],
    ] {
        can("east", member, args);
    }
}

/// `kubectl auth can-i` for a ServiceAccount bound to the member Role (the binding is made here;
/// can-i needs no ServiceAccount object).
fn can_with_role(tb: &Testbed, sa: &str, args: &[&str], expected: bool) {
    let yaml = "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: member-token-probe\n  namespace: antrea-multicluster\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: antrea-mc-member-cluster-role\nsubjects:\n  - kind: ServiceAccount\n    name: member-token-probe\n    namespace: antrea-multicluster\n";
    tb.apply("north", "antrea-multicluster", yaml);
    let mut all = vec!["auth", "can-i", "--as", sa];
    all.extend(args);
    let out = tb.kubectl("north").args(&all).output().expect("kubectl");
    let yes = String::from_utf8_lossy(&out.stdout).trim() == "yes";
    assert_eq!(yes, expected, "{sa} {args:?}: expected {expected}");
}
