//! Our CRDs on the real API servers: installed and established everywhere, the guides' columns,
//! and malformed objects refused with a message naming the field.

use mc_integration::{CLUSTERS, Testbed, header_columns, repo_root};

/// Names of every CRD under deploy/crds and deploy/antrea-crds.
fn crd_names() -> Vec<String> {
    let mut names = Vec::new();
    for dir in ["deploy/crds", "deploy/antrea-crds"] {
        for entry in std::fs::read_dir(repo_root().join(dir)).expect(dir) {
            let path = entry.expect("entry").path();
            let text = std::fs::read_to_string(&path).expect("CRD file");
            let doc: serde_yaml::Value = serde_yaml::from_str(&text).expect("CRD YAML");
            names.push(
                doc["metadata"]["name"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{} has no metadata.name", path.display()))
                    .to_owned(),
            );
        }
    }
    names.sort();
    names
}

#[test]
fn every_crd_is_established_in_every_cluster() {
    let tb = Testbed::from_env();
    let names = crd_names();
    assert!(
        names.len() >= 12,
        "expected our 10 kinds and ACNP/Tier, got {names:?}"
    );
    for cluster in CLUSTERS {
        for name in &names {
            let crd = tb.get_json(cluster, &["get", "crd", name]);
            let established = crd["status"]["conditions"]
                .as_array()
                .expect("conditions")
                .iter()
                .any(|c| c["type"] == "Established" && c["status"] == "True");
            assert!(established, "{name} is not established in {cluster}");
        }
    }
}

/// One minimal object per kind and the columns `kubectl get` must print for it (the guides').
const COLUMN_CASES: &[(&str, &str, &[&str])] = &[
    (
        "clusterset",
        "apiVersion: multicluster.crd.antrea.io/v1alpha2\nkind: ClusterSet\nmetadata: {name: cols-clusterset}\nspec:\n  clusterID: cols-north\n  namespace: antrea-multicluster\n  leaders:\n  - clusterID: cols-north\n",
        &[
            "NAME",
            "LEADER CLUSTER NAMESPACE",
            "TOTAL CLUSTERS",
            "READY CLUSTERS",
            "AGE",
        ],
    ),
    (
        "clusterclaim",
        "apiVersion: multicluster.crd.antrea.io/v1alpha2\nkind: ClusterClaim\nmetadata: {name: id.k8s.io}\nvalue: cols-east\n",
        &["NAME", "VALUE", "AGE"],
    ),
    (
        "memberclusterannounce",
        "apiVersion: multicluster.crd.antrea.io/v1alpha1\nkind: MemberClusterAnnounce\nmetadata: {name: member-announce-from-cols-east}\nclusterID: cols-east\nclusterSetID: cols-set\n",
        &["NAME", "CLUSTER ID", "CLUSTERSET ID", "AGE"],
    ),
    (
        "resourceexport",
        "apiVersion: multicluster.crd.antrea.io/v1alpha1\nkind: ResourceExport\nmetadata: {name: cols-west-default-nginx-service}\nspec:\n  clusterID: cols-west\n  name: nginx\n  namespace: default\n  kind: Service\n",
        &["NAME", "CLUSTER ID", "KIND", "NAMESPACE", "NAME", "AGE"],
    ),
    (
        "resourceimport",
        "apiVersion: multicluster.crd.antrea.io/v1alpha1\nkind: ResourceImport\nmetadata: {name: default-nginx-service}\nspec:\n  name: nginx\n  namespace: default\n  kind: ServiceImport\n",
        &["NAME", "KIND", "NAMESPACE", "NAME", "AGE"],
    ),
    (
        "gateway",
        "apiVersion: multicluster.crd.antrea.io/v1alpha1\nkind: Gateway\nmetadata: {name: node-1}\ngatewayIP: 10.17.27.55\ninternalIP: 10.17.27.55\n",
        &["NAME", "GATEWAY IP", "INTERNAL IP", "AGE"],
    ),
    (
        "clusterinfoimport",
        "apiVersion: multicluster.crd.antrea.io/v1alpha1\nkind: ClusterInfoImport\nmetadata: {name: cols-east-clusterinfo}\nspec:\n  clusterID: cols-east\n  serviceCIDR: 10.97.0.0/16\n  gatewayInfos:\n  - gatewayIP: 198.18.1.10\n",
        &["NAME", "CLUSTER ID", "SERVICE CIDR", "AGE"],
    ),
    (
        "serviceexport",
        "apiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceExport\nmetadata: {name: nginx}\n",
        &["NAME", "AGE"],
    ),
    (
        "annp",
        "apiVersion: crd.antrea.io/v1beta1\nkind: NetworkPolicy\nmetadata: {name: cols-annp}\nspec:\n  tier: application\n  priority: 5\n  appliedTo:\n  - podSelector: {}\n  ingress:\n  - action: Allow\n    from:\n    - podSelector: {}\n  - action: Drop\n",
        &[
            "NAME",
            "TIER",
            "PRIORITY",
            "DESIRED NODES",
            "CURRENT NODES",
            "STRAIT",
            "AGE",
        ],
    ),
    (
        "serviceimport",
        "apiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceImport\nmetadata: {name: nginx}\nspec:\n  type: ClusterSetIP\n  ips: [\"10.19.57.62\"]\n  ports:\n  - port: 80\n    protocol: TCP\n",
        &["NAME", "TYPE", "IP", "AGE"],
    ),
];

#[test]
fn kubectl_get_prints_the_columns_of_the_guides() {
    let tb = Testbed::from_env();
    let ns = tb.namespace("north", "columns");
    for (kind, yaml, expected) in COLUMN_CASES {
        tb.apply("north", &ns.name, yaml);
        let table = tb.ok("north", &["get", kind, "-n", &ns.name]);
        assert_eq!(
            header_columns(&table),
            expected.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            "kubectl get {kind}:\n{table}"
        );
    }
    // The ServiceImport's IP column shows the ips list as the guide does.
    let table = tb.ok("north", &["get", "serviceimport", "nginx", "-n", &ns.name]);
    assert!(
        table.contains("ClusterSetIP") && table.contains("[\"10.19.57.62\"]"),
        "{table}"
    );

    // LabelIdentity is cluster-scoped.
    let label = "apiVersion: multicluster.crd.antrea.io/v1alpha1\nkind: LabelIdentity\nmetadata: {name: cols-0123456789abcdef}\nspec:\n  label: ns:kubernetes.io/metadata.name=kube-system&pod:app=db\n  id: 7\n";
    let out = tb.with_stdin("north", &["apply", "-f", "-"], label);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = tb.ok("north", &["get", "labelidentity", "cols-0123456789abcdef"]);
    tb.ok(
        "north",
        &["delete", "labelidentity", "cols-0123456789abcdef"],
    );
    assert_eq!(
        header_columns(&table),
        ["NAME", "LABEL", "ID", "AGE"],
        "{table}"
    );
    assert!(table.contains("app=db") && table.contains(" 7 "), "{table}");
}

#[test]
fn malformed_objects_are_refused_with_the_field_named() {
    let tb = Testbed::from_env();
    let ns = tb.namespace("north", "malformed");
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "a v1alpha2 ClusterSet with two leaders",
            "apiVersion: multicluster.crd.antrea.io/v1alpha2\nkind: ClusterSet\nmetadata: {name: two-leaders}\nspec:\n  clusterID: a\n  leaders:\n  - clusterID: a\n  - clusterID: b\n",
            &["spec.leaders"],
        ),
        (
            "a v1alpha1 ClusterSet with two leaders",
            "apiVersion: multicluster.crd.antrea.io/v1alpha1\nkind: ClusterSet\nmetadata: {name: two-leaders-v1}\nspec:\n  leaders:\n  - clusterID: a\n  - clusterID: b\n  members:\n  - clusterID: c\n  namespace: antrea-multicluster\n",
            &["spec.leaders"],
        ),
        (
            "a ClusterClaim without value",
            "apiVersion: multicluster.crd.antrea.io/v1alpha2\nkind: ClusterClaim\nmetadata: {name: id.k8s.io}\n",
            &["value", "Required"],
        ),
        (
            "a v1alpha1 ClusterClaim without value",
            "apiVersion: multicluster.crd.antrea.io/v1alpha1\nkind: ClusterClaim\nmetadata: {name: clusterset.k8s.io}\nname: clusterset.k8s.io\n",
            &["value", "Required"],
        ),
        (
            "a Gateway whose gatewayIP is not an IP",
            "apiVersion: multicluster.crd.antrea.io/v1alpha1\nkind: Gateway\nmetadata: {name: node-x}\ngatewayIP: not-an-ip\ninternalIP: 10.0.0.1\n",
            &["gatewayIP"],
        ),
        (
            "a Gateway whose internalIP is not an IP",
            "apiVersion: multicluster.crd.antrea.io/v1alpha1\nkind: Gateway\nmetadata: {name: node-y}\ngatewayIP: 10.0.0.1\ninternalIP: 10.0.0.300\n",
            &["internalIP"],
        ),
        (
            "an ACNP rule whose action is Deny (the guide's example; Antrea refuses it too)",
            "apiVersion: crd.antrea.io/v1alpha1\nkind: ClusterNetworkPolicy\nmetadata: {name: deny-rule}\nspec:\n  priority: 1\n  appliedTo:\n  - podSelector: {}\n  ingress:\n  - action: Deny\n    from:\n    - podSelector: {}\n",
            &[
                "spec.ingress[0].action",
                "Unsupported value: \"Deny\"",
                "\"Allow\", \"Drop\", \"Reject\", \"Pass\"",
            ],
        ),
        (
            "an Antrea NetworkPolicy egress rule whose action is Deny",
            "apiVersion: crd.antrea.io/v1beta1\nkind: NetworkPolicy\nmetadata: {name: deny-rule}\nspec:\n  priority: 1\n  appliedTo:\n  - podSelector: {}\n  egress:\n  - action: Allow\n  - action: Deny\n",
            &["spec.egress[1].action", "Unsupported value: \"Deny\""],
        ),
        (
            "an Antrea NetworkPolicy rule without an action",
            "apiVersion: crd.antrea.io/v1beta1\nkind: NetworkPolicy\nmetadata: {name: no-action}\nspec:\n  priority: 1\n  appliedTo:\n  - podSelector: {}\n  ingress:\n  - from:\n    - podSelector: {}\n",
            &["spec.ingress[0].action", "Required"],
        ),
    ];
    for (what, yaml, must_name) in cases {
        let message = tb.refused("north", &ns.name, yaml);
        for needle in *must_name {
            assert!(
                message.contains(needle),
                "{what}: the API server's message must name {needle:?}; it said: {message}"
            );
        }
    }
}

/// Antrea's default Tiers are in every member (its controller writes them where absent), with
/// Antrea's priorities, so that a policy naming one of them is accepted and imported.
#[test]
fn antreas_default_tiers_are_in_every_member() {
    let tb = Testbed::from_env();
    // Antrea's own values (pkg/controller/networkpolicy/tier.go).
    let tiers = [
        ("emergency", 50, "Emergency Tier"),
        ("securityops", 100, "SecurityOps Tier"),
        ("networkops", 150, "NetworkOps Tier"),
        ("platform", 200, "Platform Tier"),
        ("application", 250, "default Application Tier"),
        ("baseline", 253, "Baseline Tier"),
    ];
    for cluster in mc_integration::join::MEMBERS {
        for (name, priority, description) in tiers {
            let tier = mc_integration::wait_for(
                &format!("Tier {name} in {cluster}"),
                std::time::Duration::from_secs(60),
                || {
                    tb.try_json(cluster, &["get", "tier", name])
                        .ok_or_else(|| "absent".to_owned())
                },
            );
            assert_eq!(tier["spec"]["priority"], priority, "{cluster}: {tier}");
            assert_eq!(
                tier["spec"]["description"],
                format!("[READ-ONLY]: System generated {description}"),
                "{cluster}: {tier}"
            );
        }
    }
}
