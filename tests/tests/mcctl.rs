//! Issue 5: `mcctl` against the testbed — every subcommand, a join that fails and rolls back, and
//! the dual-role cluster (north as leader and member at once, its second controller in
//! kube-system).

use std::{os::unix::fs::PermissionsExt as _, path::PathBuf, time::Duration};

use mc_integration::{
    Testbed, header_columns,
    join::{self, CLUSTERSET, LEADER_NS, MEMBER_NS, id},
    ok, procs, wait_for,
};
use serde_json::Value;

fn fails(what: &str, (success, out, err): (bool, String, String), needle: &str) -> String {
    assert!(!success, "{what} succeeded, expected a failure:\n{out}");
    assert!(
        err.contains(needle),
        "{what}: the error does not say {needle:?}:\n{err}"
    );
    err
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("strait-mcctl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir.join(name)
}

#[test]
fn get_shows_clustersets_exports_and_imports() {
    let tb = Testbed::from_env();
    join::ensure_joined(&tb);
    let table = ok(
        "get clusterset in north",
        tb.mcctl("north", &["get", "clusterset", "-n", LEADER_NS]),
    );
    assert_eq!(
        header_columns(&table),
        [
            "CLUSTER-ID",
            "NAMESPACE",
            "CLUSTERSET-ID",
            "TYPE",
            "STATUS",
            "REASON"
        ]
    );
    for m in join::MEMBERS {
        let row = table
            .lines()
            .find(|l| l.starts_with(&id(m)))
            .unwrap_or_else(|| panic!("no row for {m}:\n{table}"));
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(
            cells,
            [&id(m), LEADER_NS, CLUSTERSET, "Ready", "True", "Connected"],
            "{table}"
        );
    }
    let table = ok(
        "get clusterset in east",
        tb.mcctl("east", &["get", "clustersets"]),
    );
    let rows: Vec<Vec<&str>> = table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(
        rows.contains(&vec![
            &id("north"),
            MEMBER_NS,
            CLUSTERSET,
            "Ready",
            "True",
            "Connected"
        ]),
        "{table}"
    );
    assert!(
        rows.iter()
            .any(|r| r[..5] == [&id("north"), MEMBER_NS, CLUSTERSET, "IsLeader", "True"]),
        "{table}"
    );
    let yaml = ok(
        "get clusterset -o yaml",
        tb.mcctl(
            "north",
            &[
                "get",
                "clusterset",
                CLUSTERSET,
                "-n",
                LEADER_NS,
                "-o",
                "yaml",
            ],
        ),
    );
    let set: Value = serde_yaml::from_str(&yaml).expect("YAML");
    assert_eq!(set["kind"], "ClusterSet");
    assert_eq!(set["status"]["readyClusters"], 2);
    assert!(set["metadata"]["managedFields"].is_null());

    let west_info = format!("{}-clusterinfo", id("west"));
    wait_for("west's ClusterInfo export", Duration::from_secs(60), || {
        tb.try_json(
            "north",
            &["get", "resourceexport", "-n", LEADER_NS, &west_info],
        )
        .map(|_| ())
        .ok_or_else(|| "missing".to_owned())
    });
    let table = ok(
        "get resourceexport --cluster-id",
        tb.mcctl(
            "north",
            &["get", "re", "-n", LEADER_NS, "--cluster-id", &id("west")],
        ),
    );
    assert_eq!(
        header_columns(&table),
        ["CLUSTER-ID", "NAMESPACE", "NAME", "KIND"]
    );
    assert!(
        table
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == [&id("west"), LEADER_NS, &west_info, "ClusterInfo"]),
        "{table}"
    );
    assert!(
        table.lines().skip(1).all(|l| l.starts_with(&id("west"))),
        "--cluster-id must filter:\n{table}"
    );
    let list: Value = serde_json::from_str(&ok(
        "get resourceexport -o json",
        tb.mcctl(
            "north",
            &[
                "get",
                "resourceexports",
                "--cluster-id",
                &id("east"),
                "-o",
                "json",
            ],
        ),
    ))
    .expect("JSON");
    let items = list["items"].as_array().expect("a List");
    assert!(!items.is_empty());
    assert!(
        items
            .iter()
            .all(|i| i["metadata"]["labels"]["sourceClusterID"] == id("east").as_str())
    );
    let table = ok(
        "get resourceimport",
        tb.mcctl("north", &["get", "ri", "-n", LEADER_NS]),
    );
    assert_eq!(header_columns(&table), ["NAMESPACE", "NAME", "KIND"]);
    assert!(
        table
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == [LEADER_NS, &west_info, "ClusterInfo"]),
        "{table}"
    );
    fails(
        "get an unknown ClusterSet",
        tb.mcctl("north", &["get", "clusterset", "nope", "-n", LEADER_NS]),
        "no ClusterSet named nope",
    );
}

#[test]
fn tokens_join_and_leave_with_north_as_leader_and_member() {
    let tb = Testbed::from_env();
    join::ensure_joined(&tb);
    let token = "north-member";
    // Leftovers of an interrupted run.
    let _ = tb.mcctl("north", &["leave", "-n", MEMBER_NS]);
    let _ = tb.mcctl("north", &["delete", "membertoken", token, "-n", LEADER_NS]);

    let token_file = scratch("north-token.yaml");
    ok(
        "create membertoken",
        tb.mcctl(
            "north",
            &[
                "create",
                "membertoken",
                token,
                "-n",
                LEADER_NS,
                "--cluster-id",
                &id("north"),
                "-o",
                token_file.to_str().unwrap(),
            ],
        ),
    );
    let mode = std::fs::metadata(&token_file)
        .expect("token file")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the token file must be private");
    let file: Value = serde_yaml::from_str(&std::fs::read_to_string(&token_file).unwrap()).unwrap();
    assert_eq!(file["type"], "Opaque");
    assert!(
        file["data"]["token"]
            .as_str()
            .is_some_and(|t| !t.is_empty())
    );
    let sa = tb.get_json("north", &["get", "serviceaccount", token, "-n", LEADER_NS]);
    assert_eq!(
        sa["metadata"]["annotations"]["multicluster.antrea.io/cluster-id"],
        id("north")
    );
    let rb = tb.get_json("north", &["get", "rolebinding", token, "-n", LEADER_NS]);
    assert_eq!(rb["roleRef"]["name"], "antrea-mc-member-cluster-role");
    let table = ok(
        "get membertoken",
        tb.mcctl("north", &["get", "membertoken", "-n", LEADER_NS]),
    );
    assert_eq!(header_columns(&table), ["NAMESPACE", "NAME"]);
    assert!(
        table
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == [LEADER_NS, token]),
        "{table}"
    );

    // Tokens that would break the identity binding are refused.
    fails(
        "a second token for a bound cluster ID",
        tb.mcctl(
            "north",
            &[
                "create",
                "membertoken",
                "spoof",
                "-n",
                LEADER_NS,
                "--cluster-id",
                &id("east"),
            ],
        ),
        "already bound to ServiceAccount",
    );
    fails(
        "a dash-suffixed cluster ID",
        tb.mcctl(
            "north",
            &[
                "create",
                "membertoken",
                "spoof",
                "-n",
                LEADER_NS,
                "--cluster-id",
                &format!("{}-1", id("east")),
            ],
        ),
        "differ only by a '-' suffix",
    );
    fails(
        "a token outside the leader's namespace",
        tb.mcctl(
            "north",
            &[
                "create",
                "membertoken",
                "spoof",
                "-n",
                "default",
                "--cluster-id",
                "x",
            ],
        ),
        "Deploy the leader first",
    );
    fails(
        "a token without --cluster-id",
        tb.mcctl(
            "north",
            &["create", "membertoken", "spoof", "-n", LEADER_NS],
        ),
        "--cluster-id is required",
    );

    // The join config with the token, then the dual-role join: north's member controller
    // (kube-system) joins north's own leader.
    let config = ok(
        "get joinconfig",
        tb.mcctl(
            "north",
            &[
                "get",
                "joinconfig",
                "-n",
                LEADER_NS,
                "--member-token",
                token,
            ],
        ),
    );
    assert!(
        config.contains(&format!("clusterSetID: {CLUSTERSET}")),
        "{config}"
    );
    assert!(
        config.contains(&format!("leaderAPIServer: {}", tb.leader_server)),
        "{config}"
    );
    let config_file = scratch("join.yaml");
    std::fs::write(&config_file, &config).unwrap();
    // Joined while north's member controller is away and coming back (as during its Pod's
    // replacement): the API server cannot reach the ClusterSet webhook for a few seconds, and
    // mcctl retries the creation instead of failing and rolling back.
    procs::pause("north-mc-member");
    let resume = std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(3));
        procs::resume_without_waiting("north-mc-member");
    });
    let (joined, out, err) = tb.mcctl(
        "north",
        &[
            "join",
            "-f",
            config_file.to_str().unwrap(),
            "--clusterid",
            &id("north"),
        ],
    );
    resume.join().expect("resuming north's member controller");
    assert!(joined, "join (dual role): {out}{err}");
    assert!(out.contains("joined"), "{out}");
    assert!(
        err.contains("admission webhook is not reachable yet; retrying"),
        "the join met the missing webhook and waited for it: {err}"
    );
    wait_for(
        "north's member Ready in the leader beside east and west",
        Duration::from_secs(60),
        || match join::leader_counts(&tb) {
            Some((3, 3)) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    let table = ok(
        "get clusterset of north's member",
        tb.mcctl("north", &["get", "clusterset", "-n", MEMBER_NS]),
    );
    assert!(
        table
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == [
                    &id("north"),
                    MEMBER_NS,
                    CLUSTERSET,
                    "Ready",
                    "True",
                    "Connected"
                ]),
        "{table}"
    );

    // Leaving removes the ClusterSet and the token copy mcctl made; the leader forgets north.
    let out = ok("leave", tb.mcctl("north", &["leave", "-n", MEMBER_NS]));
    assert!(
        out.contains("ClusterSet kube-system/test-clusterset deleted"),
        "{out}"
    );
    assert!(
        tb.try_json("north", &["get", "clusterset", CLUSTERSET, "-n", MEMBER_NS])
            .is_none()
    );
    assert!(
        tb.try_json("north", &["get", "secret", token, "-n", MEMBER_NS])
            .is_none(),
        "leave removes the token Secret join created"
    );
    wait_for(
        "the leader back to east and west",
        Duration::from_secs(60),
        || match join::leader_counts(&tb) {
            Some((2, 2)) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    let out = ok(
        "delete membertoken",
        tb.mcctl("north", &["delete", "membertoken", token, "-n", LEADER_NS]),
    );
    for kind in ["Secret", "RoleBinding", "ServiceAccount"] {
        assert!(
            out.contains(&format!("{kind} {LEADER_NS}/{token} deleted")),
            "{out}"
        );
    }
    fails(
        "deleting it again",
        tb.mcctl("north", &["delete", "membertoken", token, "-n", LEADER_NS]),
        "no member token",
    );
}

#[test]
fn a_join_that_fails_rolls_back() {
    let tb = Testbed::from_env();
    join::ensure_joined(&tb);
    let _ = tb.mcctl("north", &["leave", "-n", MEMBER_NS]);
    // A token the leader does not know.
    let bad = scratch("bad-token.yaml");
    std::fs::write(
        &bad,
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: bad-token\ntype: Opaque\ndata:\n  ca.crt: bm90IGEgY2VydGlmaWNhdGU=\n  token: bm90LWEtdG9rZW4=\n",
    )
    .unwrap();
    let err = fails(
        "join with a bad token",
        tb.mcctl(
            "north",
            &[
                "join",
                "--clusterset",
                CLUSTERSET,
                "--clusterid",
                &id("north"),
                "--leader-clusterid",
                &id("north"),
                "--leader-namespace",
                LEADER_NS,
                "--leader-apiserver",
                &tb.leader_server,
                "--token-secret-file",
                bad.to_str().unwrap(),
                "--timeout",
                "8",
            ],
        ),
        "Deleting the created resources",
    );
    assert!(err.contains("rolled back: deleted ClusterSet"), "{err}");
    assert!(err.contains("rolled back: deleted Secret"), "{err}");
    assert!(
        err.contains("last status"),
        "the failure says what the member saw: {err}"
    );
    wait_for(
        "nothing left of the failed join",
        Duration::from_secs(30),
        || {
            let set = tb.try_json("north", &["get", "clusterset", CLUSTERSET, "-n", MEMBER_NS]);
            let secret = tb.try_json("north", &["get", "secret", "bad-token", "-n", MEMBER_NS]);
            match (set, secret) {
                (None, None) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    );
    // The same through a join config naming the token file (relative to the config).
    let config = scratch("bad-join.yaml");
    std::fs::write(
        &config,
        format!(
            "apiVersion: multicluster.antrea.io/v1alpha1\nkind: ClusterSetJoinConfig\nclusterSetID: {CLUSTERSET}\nclusterID: {}\nleaderClusterID: {}\nleaderNamespace: {LEADER_NS}\nleaderAPIServer: {}\ntokenSecretFile: bad-token.yaml\n",
            id("north"),
            id("north"),
            tb.leader_server
        ),
    )
    .unwrap();
    let err = fails(
        "join -f with a bad token file",
        tb.mcctl(
            "north",
            &["join", "-f", config.to_str().unwrap(), "--timeout", "5"],
        ),
        "Deleting the created resources",
    );
    assert!(
        err.contains("rolled back: deleted Secret kube-system/bad-token"),
        "the config's tokenSecretFile is read: {err}"
    );
    fails(
        "join without a leader",
        tb.mcctl(
            "north",
            &["join", "--clusterset", CLUSTERSET, "--clusterid", "x"],
        ),
        "the leader's cluster ID is missing",
    );
    fails(
        "joining a cluster that is already in a ClusterSet",
        tb.mcctl(
            "east",
            &[
                "join",
                "--clusterset",
                CLUSTERSET,
                "--clusterid",
                &id("east"),
                "--leader-clusterid",
                &id("north"),
                "--leader-namespace",
                LEADER_NS,
                "--leader-apiserver",
                &tb.leader_server,
                "--token-secret-name",
                "member-east-access-token",
            ],
        ),
        "mcctl leave first",
    );
}

#[test]
fn init_and_destroy_a_leader_clusterset() {
    let tb = Testbed::from_env();
    let ns = tb.namespace("north", "mcctl-leader");
    let ns = ns.name.as_str();
    // What deploy/leader gives the Common Area: the Role member tokens are bound to.
    tb.apply(
        "north",
        ns,
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: antrea-mc-member-cluster-role\nrules:\n  - apiGroups: [multicluster.crd.antrea.io]\n    resources: [memberclusterannounces, resourceexports]\n    verbs: [get, list, watch, create, update, patch, delete]\n",
    );
    let join_file = scratch("init-join.yaml");
    let out = ok(
        "init",
        tb.mcctl(
            "north",
            &[
                "init",
                "-n",
                ns,
                "--clusterset",
                "set-x",
                "--clusterid",
                "leader-x",
                "-j",
                join_file.to_str().unwrap(),
            ],
        ),
    );
    assert!(out.contains("ClusterSet set-x created"), "{out}");
    let set = tb.get_json("north", &["get", "clusterset", "set-x", "-n", ns]);
    assert_eq!(set["spec"]["clusterID"], "leader-x");
    assert_eq!(set["spec"]["leaders"][0]["clusterID"], "leader-x");
    let config = std::fs::read_to_string(&join_file).unwrap();
    for line in [
        "clusterSetID: set-x",
        "leaderClusterID: leader-x",
        &format!("leaderNamespace: {ns}"),
        &format!("leaderAPIServer: {}", tb.leader_server),
    ] {
        assert!(config.contains(line), "{line:?} missing:\n{config}");
    }
    ok(
        "init again (idempotent)",
        tb.mcctl(
            "north",
            &[
                "init",
                "-n",
                ns,
                "--clusterset",
                "set-x",
                "--clusterid",
                "leader-x",
            ],
        ),
    );
    fails(
        "init of another ClusterSet",
        tb.mcctl(
            "north",
            &[
                "init",
                "-n",
                ns,
                "--clusterset",
                "set-y",
                "--clusterid",
                "leader-x",
            ],
        ),
        "mcctl destroy first",
    );
    ok(
        "create membertoken in the new leader namespace",
        tb.mcctl(
            "north",
            &[
                "create",
                "membertoken",
                "m1",
                "-n",
                ns,
                "--cluster-id",
                "member-x",
            ],
        ),
    );
    let out = ok("destroy", tb.mcctl("north", &["destroy", "-n", ns]));
    assert!(out.contains("ClusterSet"), "{out}");
    assert!(
        tb.try_json("north", &["get", "clusterset", "set-x", "-n", ns])
            .is_none()
    );
    for kind in ["serviceaccount", "rolebinding", "secret"] {
        assert!(
            tb.try_json("north", &["get", kind, "m1", "-n", ns])
                .is_none(),
            "destroy leaves {kind} m1 behind"
        );
    }
    fails(
        "init where the leader is not deployed",
        tb.mcctl(
            "north",
            &[
                "init",
                "-n",
                "no-such-namespace",
                "--clusterset",
                "s",
                "--clusterid",
                "l",
            ],
        ),
        "deploy the leader first",
    );
}
