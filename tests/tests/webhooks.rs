//! Issue 3, acceptance 9: the admission webhooks on the testbed. A member's token (its
//! ServiceAccount in the leader) may write only its own MemberClusterAnnounce and ResourceExports;
//! an unannotated ServiceAccount (the guides make them so) is bound by the leader to the cluster
//! ID of the first announce it creates (stamped by the mutating webhook); one ClusterSet per namespace with immutable IDs; only the controller and the agents
//! write Gateways. Allowed cases use `--dry-run=server` (admission runs, nothing is stored), so a
//! broken rule cannot damage the ClusterSet the other tests share.

use mc_integration::{
    AsServiceAccount, Testbed,
    join::{self, CLUSTERSET, LEADER_NS, MEMBER_NS, id},
    ok, wait_for,
};
use serde_json::Value;

fn denied(what: &str, (ok, _, err): (bool, String, String), needle: &str) {
    assert!(
        !ok,
        "{what}: allowed, expected a denial mentioning {needle:?}"
    );
    assert!(
        err.contains("denied the request") && err.contains(needle),
        "{what}: refused, but not by the webhook for the expected reason ({needle:?}): {err}"
    );
}

fn create(who: &AsServiceAccount, ns: &str, yaml: &str, dry: bool) -> (bool, String, String) {
    let mut args = vec!["create", "-n", ns, "-f", "-", "-o", "json"];
    if dry {
        args.push("--dry-run=server");
    }
    who.run(&args, Some(yaml))
}

/// A Service or Endpoints export, consistent unless the caller spoils a field.
fn service_export(name: &str, spec_id: &str, label_id: &str, kind: &str) -> String {
    let payload = if kind == "Service" {
        "service:\n    serviceSpec:\n      ports: [{port: 80, protocol: TCP}]"
    } else {
        "endpoints:\n    subsets: []"
    };
    format!(
        "apiVersion: multicluster.crd.antrea.io/v1alpha1\nkind: ResourceExport\nmetadata:\n  name: {name}\n  labels:\n    sourceClusterID: {label_id}\n    sourceKind: {kind}\n    sourceNamespace: probe\n    sourceName: web\nspec:\n  clusterID: {spec_id}\n  kind: {kind}\n  namespace: probe\n  name: web\n  {payload}\n"
    )
}

fn announce(name: &str, cluster: &str, clusterset: &str) -> String {
    format!(
        "apiVersion: multicluster.crd.antrea.io/v1alpha1\nkind: MemberClusterAnnounce\nmetadata:\n  name: {name}\nclusterID: {cluster}\nclusterSetID: {clusterset}\nleaderClusterID: {}\n",
        id("north")
    )
}

fn member_token(tb: &Testbed, member: &str) -> AsServiceAccount {
    tb.as_service_account("north", LEADER_NS, &format!("member-{member}-access-sa"))
}

#[test]
fn a_member_writes_only_its_own_exports() {
    let tb = Testbed::from_env();
    join::ensure_joined(&tb);
    let east = member_token(&tb, "east");
    let (me, peer) = (id("east"), id("west"));
    let own = format!("{me}-probe-web-service");
    ok(
        "east creates its own Service export",
        create(
            &east,
            LEADER_NS,
            &service_export(&own, &me, &me, "Service"),
            true,
        ),
    );
    ok(
        "east creates its own Endpoints export",
        create(
            &east,
            LEADER_NS,
            &service_export(&format!("{me}-probe-web-endpoints"), &me, &me, "Endpoints"),
            true,
        ),
    );
    denied(
        "east exports in west's name",
        create(
            &east,
            LEADER_NS,
            &service_export(
                &format!("{peer}-probe-web-service"),
                &peer,
                &peer,
                "Service",
            ),
            true,
        ),
        "spoofed",
    );
    denied(
        "east labels its export as west's",
        create(
            &east,
            LEADER_NS,
            &service_export(&own, &me, &peer, "Service"),
            true,
        ),
        "sourceClusterID",
    );
    denied(
        "east names its export like someone else's",
        create(
            &east,
            LEADER_NS,
            &service_export("probe-web-service", &me, &me, "Service"),
            true,
        ),
        "must be named",
    );
    let policy = own.replace("-service", "-acnp");
    denied(
        "east exports a cluster network policy",
        create(
            &east,
            LEADER_NS,
            &service_export(&policy, &me, &me, "Service")
                .replace("kind: Service", "kind: AntreaClusterNetworkPolicy")
                .replace(
                    "sourceKind: Service",
                    "sourceKind: AntreaClusterNetworkPolicy",
                ),
            true,
        ),
        "may export kinds",
    );
    let spoofed_info = format!(
        "apiVersion: multicluster.crd.antrea.io/v1alpha1\nkind: ResourceExport\nmetadata:\n  name: {me}-clusterinfo-probe\n  labels: {{sourceClusterID: {me}, sourceKind: ClusterInfo}}\nspec:\n  clusterID: {me}\n  kind: ClusterInfo\n  name: {me}\n  namespace: kube-system\n  clusterInfo: {{clusterID: {peer}, serviceCIDR: 10.96.0.0/16}}\n"
    );
    denied(
        "east announces a ClusterInfo for west",
        create(&east, LEADER_NS, &spoofed_info, true),
        "clusterInfo.clusterID",
    );
    // West's real exports (its gateway's ClusterInfo) may not be changed or deleted by east;
    // east's own may.
    let peer_info = format!("resourceexport/{peer}-clusterinfo");
    let own_info = format!("resourceexport/{me}-clusterinfo");
    mc_integration::wait_for(
        "both members' ClusterInfo exports",
        std::time::Duration::from_secs(60),
        || {
            for name in [&peer_info, &own_info] {
                tb.try_json("north", &["get", "-n", LEADER_NS, name])
                    .ok_or(format!("no {name}"))?;
            }
            Ok(())
        },
    );
    denied(
        "east relabels west's export",
        east.run(
            &[
                "label",
                "-n",
                LEADER_NS,
                &peer_info,
                "probe=1",
                "--dry-run=server",
            ],
            None,
        ),
        "may not change",
    );
    denied(
        "east deletes west's export",
        east.run(
            &["delete", "-n", LEADER_NS, &peer_info, "--dry-run=server"],
            None,
        ),
        "may not change",
    );
    ok(
        "east relabels its own export",
        east.run(
            &[
                "label",
                "-n",
                LEADER_NS,
                &own_info,
                "probe=1",
                "--dry-run=server",
            ],
            None,
        ),
    );
    ok(
        "east deletes its own export",
        east.run(
            &["delete", "-n", LEADER_NS, &own_info, "--dry-run=server"],
            None,
        ),
    );
}

#[test]
fn a_member_announces_only_itself() {
    let tb = Testbed::from_env();
    join::ensure_joined(&tb);
    let east = member_token(&tb, "east");
    let south = "test-cluster-south";
    denied(
        "east announces another cluster",
        create(
            &east,
            LEADER_NS,
            &announce(&format!("member-announce-from-{south}"), south, CLUSTERSET),
            true,
        ),
        "speaks for cluster",
    );
    let west_mca = format!("memberclusterannounce/member-announce-from-{}", id("west"));
    let east_mca = format!("memberclusterannounce/member-announce-from-{}", id("east"));
    denied(
        "east touches west's announce",
        east.run(
            &[
                "annotate",
                "-n",
                LEADER_NS,
                &west_mca,
                "touch-ts=now",
                "--overwrite",
                "--dry-run=server",
            ],
            None,
        ),
        "speaks for cluster",
    );
    denied(
        "east deletes west's announce",
        east.run(
            &["delete", "-n", LEADER_NS, &west_mca, "--dry-run=server"],
            None,
        ),
        "may not delete",
    );
    ok(
        "east touches its own announce",
        east.run(
            &[
                "annotate",
                "-n",
                LEADER_NS,
                &east_mca,
                "probe=1",
                "--dry-run=server",
            ],
            None,
        ),
    );
    denied(
        "east changes the cluster ID of its announce",
        east.run(
            &[
                "patch",
                "-n",
                LEADER_NS,
                &east_mca,
                "--type=merge",
                "-p",
                r#"{"clusterID":"test-cluster-other"}"#,
                "--dry-run=server",
            ],
            None,
        ),
        "immutable",
    );
}

#[test]
fn an_unannotated_service_account_is_bound_by_its_first_announce() {
    let tb = Testbed::from_env();
    join::ensure_joined(&tb);
    let sa = "member-probe-access-sa";
    let cluster = "probe-cluster";
    tb.apply(
        "north",
        LEADER_NS,
        &format!(
            "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {sa}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: member-probe-access-rolebinding\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: antrea-mc-member-cluster-role\nsubjects:\n  - kind: ServiceAccount\n    name: {sa}\n    namespace: {LEADER_NS}\n"
        ),
    );
    let cleanup = || {
        tb.delete(
            "north",
            &[
                "-n",
                LEADER_NS,
                "memberclusterannounce",
                &format!("member-announce-from-{cluster}"),
            ],
        );
        tb.delete("north", &["-n", LEADER_NS, "serviceaccount", sa]);
        tb.delete(
            "north",
            &[
                "-n",
                LEADER_NS,
                "rolebinding",
                "member-probe-access-rolebinding",
            ],
        );
    };
    let probe = tb.as_service_account("north", LEADER_NS, sa);
    let binding = || {
        tb.get_json("north", &["get", "-n", LEADER_NS, "serviceaccount", sa])["metadata"]
            ["annotations"]["multicluster.antrea.io/cluster-id"]
            .clone()
    };
    let export = service_export(
        &format!("{cluster}-probe-web-service"),
        cluster,
        cluster,
        "Service",
    );
    denied(
        "an unbound ServiceAccount exports",
        create(&probe, LEADER_NS, &export, true),
        "not bound to a cluster ID yet",
    );
    denied(
        "an unbound ServiceAccount announces a cluster bound to another",
        create(
            &probe,
            LEADER_NS,
            &announce(
                &format!("member-announce-from-{}", id("west")),
                &id("west"),
                CLUSTERSET,
            ),
            true,
        ),
        "already bound to ServiceAccount member-west-access-sa",
    );
    let dashed = format!("{}-1", id("east"));
    denied(
        "a cluster ID that extends a bound one by a dash",
        create(
            &probe,
            LEADER_NS,
            &announce(
                &format!("member-announce-from-{dashed}"),
                &dashed,
                CLUSTERSET,
            ),
            true,
        ),
        "differ only by a '-' suffix",
    );
    let name = format!("member-announce-from-{cluster}");
    denied(
        "an announce for another ClusterSet",
        create(
            &probe,
            LEADER_NS,
            &announce(&name, cluster, "other-set"),
            true,
        ),
        "clusterSetID",
    );
    denied(
        "an announce with the wrong name",
        create(
            &probe,
            LEADER_NS,
            &announce("hello", cluster, CLUSTERSET),
            true,
        ),
        "must be named",
    );
    ok(
        "a dry run of the first announce",
        create(
            &probe,
            LEADER_NS,
            &announce(&name, cluster, CLUSTERSET),
            true,
        ),
    );
    assert_eq!(binding(), Value::Null, "a dry run must not bind");
    // Before it announces, an unbound token may not touch the announces of others: it cannot
    // take over a cluster ID by refreshing its announce (the unit tests cover an announce whose
    // cluster is not bound yet).
    let east_mca = format!("memberclusterannounce/member-announce-from-{}", id("east"));
    denied(
        "an unbound ServiceAccount touches another cluster's announce",
        probe.run(
            &[
                "annotate",
                "-n",
                LEADER_NS,
                &east_mca,
                "touch-ts=now",
                "--overwrite",
                "--dry-run=server",
            ],
            None,
        ),
        "already bound to ServiceAccount member-east-access-sa",
    );
    let created = ok(
        "the first announce",
        create(
            &probe,
            LEADER_NS,
            &announce(&name, cluster, CLUSTERSET),
            false,
        ),
    );
    let created: Value = serde_json::from_str(&created).expect("JSON");
    assert_eq!(
        created["metadata"]["annotations"]["multicluster.antrea.io/announced-by"], sa,
        "the leader's mutating webhook stamps the creator"
    );
    wait_for(
        "the leader to bind the ServiceAccount",
        std::time::Duration::from_secs(20),
        || {
            if binding() == cluster {
                Ok(())
            } else {
                Err(binding().to_string())
            }
        },
    );
    denied(
        "rewriting who created an announce",
        probe.run(
            &[
                "annotate",
                "-n",
                LEADER_NS,
                &format!("memberclusterannounce/{name}"),
                "multicluster.antrea.io/announced-by=member-west-access-sa",
                "--overwrite",
                "--dry-run=server",
            ],
            None,
        ),
        "cannot be changed",
    );
    // From now on the same rules as for an annotated ServiceAccount.
    let other = "probe-other";
    let result = create(
        &probe,
        LEADER_NS,
        &announce(&format!("member-announce-from-{other}"), other, CLUSTERSET),
        true,
    );
    let export_ok = create(&probe, LEADER_NS, &export, true);
    cleanup();
    denied(
        "a bound ServiceAccount announces another cluster",
        result,
        "speaks for cluster",
    );
    ok("a bound ServiceAccount exports for its cluster", export_ok);
}

#[test]
fn one_clusterset_per_namespace_with_fixed_ids() {
    let tb = Testbed::from_env();
    join::ensure_joined(&tb);
    let admin_dry = |cluster: &str, args: &[&str], input: Option<&str>| {
        let mut all = args.to_vec();
        all.push("--dry-run=server");
        let out = match input {
            Some(i) => tb.with_stdin(cluster, &all, i),
            None => tb.kubectl(cluster).args(&all).output().expect("kubectl"),
        };
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    for (cluster, ns) in [("north", LEADER_NS), ("east", MEMBER_NS)] {
        let second = format!(
            "apiVersion: multicluster.crd.antrea.io/v1alpha2\nkind: ClusterSet\nmetadata:\n  name: second-set\n  namespace: {ns}\nspec:\n  clusterID: {}\n  leaders:\n    - clusterID: {}\n",
            id(cluster),
            id("north")
        );
        denied(
            &format!("a second ClusterSet in {cluster}"),
            admin_dry(cluster, &["create", "-f", "-"], Some(&second)),
            "multiple ClusterSets",
        );
        denied(
            &format!("changing the cluster ID in {cluster}"),
            admin_dry(
                cluster,
                &[
                    "patch",
                    "clusterset",
                    CLUSTERSET,
                    "-n",
                    ns,
                    "--type=merge",
                    "-p",
                    r#"{"spec":{"clusterID":"renamed"}}"#,
                ],
                None,
            ),
            "'clusterID' is immutable",
        );
        denied(
            &format!("changing the leader's cluster ID in {cluster}"),
            admin_dry(
                cluster,
                &[
                    "patch",
                    "clusterset",
                    CLUSTERSET,
                    "-n",
                    ns,
                    "--type=json",
                    "-p",
                    r#"[{"op":"replace","path":"/spec/leaders/0/clusterID","value":"renamed"}]"#,
                ],
                None,
            ),
            "'leaders[0].clusterID' is immutable",
        );
    }
    denied(
        "deleting the leader's ClusterSet while members are connected",
        admin_dry(
            "north",
            &["delete", "clusterset", CLUSTERSET, "-n", LEADER_NS],
            None,
        ),
        "still member clusters",
    );
    ok(
        "deleting a member's ClusterSet (leaving)",
        admin_dry(
            "east",
            &["delete", "clusterset", CLUSTERSET, "-n", MEMBER_NS],
            None,
        ),
    );
}

#[test]
fn only_the_controller_and_agents_write_gateways() {
    let tb = Testbed::from_env();
    let sa = "gateway-probe";
    tb.apply(
        "east",
        MEMBER_NS,
        &format!(
            "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {sa}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: {sa}\nrules:\n  - apiGroups: [multicluster.crd.antrea.io]\n    resources: [gateways]\n    verbs: [create, update, patch]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: {sa}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: {sa}\nsubjects:\n  - kind: ServiceAccount\n    name: {sa}\n    namespace: {MEMBER_NS}\n"
        ),
    );
    let probe = tb.as_service_account("east", MEMBER_NS, sa);
    let gateway = "apiVersion: multicluster.crd.antrea.io/v1alpha1\nkind: Gateway\nmetadata:\n  name: node-probe\ngatewayIP: 198.18.11.99\ninternalIP: 198.18.11.99\n";
    let result = create(&probe, MEMBER_NS, gateway, true);
    let admin = tb.with_stdin(
        "east",
        &["create", "-n", MEMBER_NS, "-f", "-", "--dry-run=server"],
        gateway,
    );
    for kind in ["rolebinding", "role", "serviceaccount"] {
        tb.delete("east", &["-n", MEMBER_NS, kind, sa]);
    }
    denied(
        "another ServiceAccount writes a Gateway",
        result,
        "not by ServiceAccount",
    );
    assert!(
        admin.status.success(),
        "a cluster administrator may repair Gateways: {}",
        String::from_utf8_lossy(&admin.stderr)
    );
}

/// The agents' ServiceAccount is every Node's: with it a Node may publish the gateway's
/// WireGuard key, and may not move the gateway (its addresses, its CIDRs, the Pod CIDRs the
/// controller annotates) nor make a Gateway of its own.
#[test]
fn the_agents_may_change_only_the_wireguard_key_of_a_gateway() {
    let tb = Testbed::from_env();
    let name = wait_for("east's Gateway", std::time::Duration::from_secs(60), || {
        let gateways = tb.get_json("east", &["get", "gateways", "-n", MEMBER_NS]);
        gateways["items"][0]["metadata"]["name"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| "no Gateway yet".to_owned())
    });
    let agent = tb.as_service_account("east", MEMBER_NS, "strait-agent");
    let patch_as = |who: &AsServiceAccount, body: &str| {
        who.run(
            &[
                "patch",
                "gateway",
                &name,
                "-n",
                MEMBER_NS,
                "--type=merge",
                "-p",
                body,
                "--dry-run=server",
            ],
            None,
        )
    };
    let patch = |body: &str| patch_as(&agent, body);
    const KEY: &str =
        r#"{"wireGuard":{"publicKey":"9Gq9BSIb0lXRQm0Hu8RjvJ2u5hLOkbE3XAbCaFUdLWU="}}"#;
    ok("the agent publishes a WireGuard key", patch(KEY));
    denied(
        "the agent moves the gateway",
        patch(r#"{"gatewayIP":"198.18.99.99","serviceCIDR":"0.0.0.0/0"}"#),
        "may change only wireGuard in a Gateway, not gatewayIP, serviceCIDR",
    );
    denied(
        "the agent widens the Pod CIDRs",
        patch(r#"{"metadata":{"annotations":{"multicluster.strait.io/pod-cidrs":"0.0.0.0/0"}}}"#),
        "not metadata.annotations",
    );
    // With the token the kubelet gives the agent Pod on the other Node (it names that Node),
    // the key of the gateway Node's Gateway cannot be replaced.
    let other_node = if name == "node-a" { "node-b" } else { "node-a" };
    let pods = tb.get_json(
        "east",
        &[
            "get",
            "pods",
            "-n",
            MEMBER_NS,
            "-l",
            "app=strait-agent",
            "--field-selector",
            &format!("spec.nodeName={other_node}"),
        ],
    );
    if let Some(pod) = pods["items"][0]["metadata"]["name"].as_str() {
        let elsewhere = tb.as_service_account_of("east", MEMBER_NS, "strait-agent", Some(pod));
        denied(
            "the agent on another Node replaces the gateway's key",
            patch_as(&elsewhere, KEY),
            &format!("the agent on Node {other_node} may publish only its own"),
        );
    } else {
        eprintln!(
            "no agent Pod on {other_node} (a testbed without kubelets): the Node check is not exercised"
        );
    }
    // RBAC refuses it first (the agents may patch Gateways, not create them); the webhook
    // would too (its unit test).
    let (made, _, err) = create(
        &agent,
        MEMBER_NS,
        "apiVersion: multicluster.crd.antrea.io/v1alpha1\nkind: Gateway\nmetadata:\n  name: node-forged\ngatewayIP: 198.18.11.98\ninternalIP: 198.18.11.98\n",
        true,
    );
    assert!(
        !made && err.contains("Forbidden"),
        "the agent made a Gateway: {err}"
    );
}

#[test]
fn policy_exports_get_their_labels_and_the_finalizer() {
    let tb = Testbed::from_env();
    let yaml = "apiVersion: multicluster.crd.antrea.io/v1alpha1\nkind: ResourceExport\nmetadata:\n  name: strict-ns-isolation-for-test-clusterset\nspec:\n  kind: AntreaClusterNetworkPolicy\n  name: strict-ns-isolation\n  clusterNetworkPolicy:\n    priority: 1\n    tier: securityops\n    appliedTo:\n      - namespaceSelector: {}\n    ingress:\n      - action: Pass\n        from:\n          - namespaceSelector: {}\n";
    let out = tb.with_stdin(
        "north",
        &[
            "create",
            "-n",
            LEADER_NS,
            "-f",
            "-",
            "--dry-run=server",
            "-o",
            "json",
        ],
        yaml,
    );
    assert!(
        out.status.success(),
        "an administrator's policy export: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let re: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let labels = &re["metadata"]["labels"];
    assert_eq!(labels["sourceKind"], "AntreaClusterNetworkPolicy", "{re}");
    assert_eq!(labels["sourceName"], "strict-ns-isolation", "{re}");
    assert_eq!(labels["sourceNamespace"], "", "{re}");
    assert_eq!(
        re["metadata"]["finalizers"],
        serde_json::json!(["resourceexport.antrea.io/finalizer"]),
        "{re}"
    );
}
