//! The control plane end to end on the testbed (issue 3): the leader in north and members in
//! east and west are real `mc-controller` processes; these tests drive them the way a user
//! does, with kubectl and the guides' YAML, and check the objects the guides describe.

use std::time::Duration;

use mc_integration::{
    SameNamespace, Testbed, condition, fixture, header_columns,
    join::{self, CLUSTERSET, LEADER_NS, MEMBER_NS, MEMBERS, id},
    services::{cluster_ip, endpoint_ips, export, service},
    wait_for,
};

const T: Duration = Duration::from_secs(30);

#[test]
fn join_with_the_oldest_guides_v1alpha1_forms_then_the_newer_v1alpha2_forms() {
    let tb = Testbed::from_env();
    join::leave_all(&tb);

    // The oldest guide: v1alpha1 ClusterClaims and ClusterSets, cluster IDs from the claims.
    let server = |yaml: String| yaml.replace("https://172.18.0.1:6443", &tb.leader_server);
    let read = |f: &str| std::fs::read_to_string(fixture(f)).expect("fixture");
    tb.apply(
        "north",
        LEADER_NS,
        &read("guides/000-L249-clusterclaim-clusterclaim-clusterset.yaml"),
    );
    join::grant_access(&tb, "east");
    join::grant_access(&tb, "west");
    tb.apply(
        "east",
        MEMBER_NS,
        &server(read(
            "guides/000-L176-clusterclaim-clusterclaim-clusterset.yaml",
        )),
    );
    tb.apply(
        "west",
        MEMBER_NS,
        &server(read(
            "guides/000-L213-clusterclaim-clusterclaim-clusterset.yaml",
        )),
    );
    join::wait_ready(&tb);
    let leader = tb.get_json("north", &["get", "clusterset", "-n", LEADER_NS, CLUSTERSET]);
    // The ID from the ClusterClaim is written back into the ClusterSet, as Antrea does.
    assert_eq!(leader["spec"]["clusterID"], id("north"));
    let statuses = leader["status"]["clusterStatuses"]
        .as_array()
        .expect("clusterStatuses");
    let ids: Vec<&str> = statuses
        .iter()
        .filter_map(|s| s["clusterID"].as_str())
        .collect();
    assert_eq!(ids, [id("east"), id("west")]);
    for s in statuses {
        assert_eq!(s["conditions"][0]["type"], "Ready");
        assert_eq!(s["conditions"][0]["status"], "True");
        assert_eq!(s["conditions"][0]["reason"], "Connected");
    }
    assert_eq!(condition(&leader, "Ready").unwrap()["status"], "True");
    for m in MEMBERS {
        let set = wait_for(&format!("{m}'s ClusterSet Ready"), T, || {
            let s = tb.get_json(m, &["get", "clusterset", "-n", MEMBER_NS, CLUSTERSET]);
            match condition(&s, "Ready").map(|c| c["status"].clone()) {
                Some(v) if v == "True" => Ok(s),
                other => Err(format!("{other:?}")),
            }
        });
        assert_eq!(set["status"]["totalClusters"], 1);
        assert_eq!(set["status"]["readyClusters"], 1);
        let leader_status = &set["status"]["clusterStatuses"][0];
        assert_eq!(leader_status["clusterID"], id("north"));
        let is_leader = leader_status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "IsLeader")
            .expect("IsLeader");
        assert_eq!(is_leader["status"], "True");
    }
    // The columns of `kubectl get clusterset`, as the guides show them.
    let table = tb.ok("north", &["get", "clusterset", "-n", LEADER_NS]);
    assert_eq!(
        header_columns(&table),
        [
            "NAME",
            "LEADER CLUSTER NAMESPACE",
            "TOTAL CLUSTERS",
            "READY CLUSTERS",
            "AGE"
        ]
    );
    assert!(
        table
            .lines()
            .nth(1)
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>()[2..4]
            == ["2", "2"],
        "{table}"
    );

    // The newer guides: v1alpha2 ClusterSets with spec.clusterID.
    join::leave_all(&tb);
    join::join_v1alpha2(&tb);
    join::wait_ready(&tb);
}

#[test]
fn a_wrong_token_or_a_missing_secret_is_reported_in_the_members_clusterset() {
    let tb = Testbed::from_env();
    join::ensure_joined(&tb);
    let secret = "member-west-access-token";
    let good = tb.get_json("west", &["get", "secret", "-n", MEMBER_NS, secret]);
    let leader_condition = |want: &str| {
        wait_for(&format!("west's ClusterSet to say {want:?}"), T, || {
            let s = tb.get_json("west", &["get", "clusterset", "-n", MEMBER_NS, CLUSTERSET]);
            let text = format!(
                "{} {}",
                s["status"]["conditions"], s["status"]["clusterStatuses"]
            );
            if text.contains(want) {
                Ok(s)
            } else {
                Err(text)
            }
        })
    };

    // A token the leader does not accept.
    tb.ok(
        "west",
        &[
            "patch",
            "secret",
            "-n",
            MEMBER_NS,
            secret,
            "--type=merge",
            "-p",
            r#"{"data":{"token":"bm90LWEtdG9rZW4="}}"#,
        ],
    );
    let s = leader_condition("refused the token");
    assert_eq!(s["status"]["readyClusters"], 0);
    assert_eq!(condition(&s, "Ready").unwrap()["status"], "False");

    // No Secret at all.
    tb.delete("west", &["secret", "-n", MEMBER_NS, secret]);
    let s = leader_condition("SecretNotFound");
    assert!(
        condition(&s, "Ready").unwrap()["message"]
            .as_str()
            .unwrap()
            .contains(secret)
    );

    // The right Secret back: connected again.
    let mut restored = good.clone();
    for f in [
        "resourceVersion",
        "uid",
        "creationTimestamp",
        "managedFields",
    ] {
        restored["metadata"].as_object_mut().unwrap().remove(f);
    }
    tb.apply("west", MEMBER_NS, &restored.to_string());
    join::wait_ready(&tb);
    leader_condition("This leader cluster is the leader for local cluster");
}

#[test]
fn an_exported_service_is_imported_everywhere() {
    let tb = Testbed::from_env();
    join::ensure_joined(&tb);
    let ns = SameNamespace::new(&tb, "mcs-export");
    let ns = ns.name.as_str();
    service(&tb, "west", ns, "nginx", 80, &["10.244.2.5"]);
    export(&tb, "west", ns, "nginx");
    let west_ip = cluster_ip(&tb, "west", ns, "nginx");

    // In the leader: the exports and the merged imports, with the guides' names.
    let re_svc = format!("{}-{ns}-nginx-service", id("west"));
    let re_eps = format!("{}-{ns}-nginx-endpoints", id("west"));
    for re in [&re_svc, &re_eps] {
        wait_for(&format!("ResourceExport {re} Succeeded"), T, || {
            let r = tb
                .try_json("north", &["get", "resourceexport", "-n", LEADER_NS, re])
                .ok_or("absent")?;
            match condition(&r, "Succeeded") {
                Some(c) if c["status"] == "True" => Ok(()),
                _ => Err(r["status"].to_string()),
            }
        });
    }
    let ri = tb.get_json(
        "north",
        &[
            "get",
            "resourceimport",
            "-n",
            LEADER_NS,
            &format!("{ns}-nginx-service"),
        ],
    );
    assert_eq!(ri["spec"]["kind"], "ServiceImport");
    assert_eq!(ri["spec"]["serviceImport"]["spec"]["type"], "ClusterSetIP");
    assert_eq!(ri["spec"]["serviceImport"]["spec"]["ports"][0]["port"], 80);
    let ri = tb.get_json(
        "north",
        &[
            "get",
            "resourceimport",
            "-n",
            LEADER_NS,
            &format!("{ns}-nginx-endpoints"),
        ],
    );
    assert_eq!(ri["spec"]["kind"], "Endpoints");
    let table = tb.ok("north", &["get", "resourceexport", "-n", LEADER_NS]);
    assert_eq!(
        header_columns(&table),
        ["NAME", "CLUSTER ID", "KIND", "NAMESPACE", "NAME", "AGE"]
    );
    let table = tb.ok("north", &["get", "resourceimport", "-n", LEADER_NS]);
    assert_eq!(
        header_columns(&table),
        ["NAME", "KIND", "NAMESPACE", "NAME", "AGE"]
    );

    // In every member (west too): Service + Endpoints antrea-mc-nginx and ServiceImport nginx.
    // West, the exporter, serves its share with its own ready endpoints, never its ClusterIP.
    for m in MEMBERS {
        let want = if m == "west" {
            "10.244.2.5".to_owned()
        } else {
            west_ip.clone()
        };
        let ips = wait_for(&format!("Endpoints antrea-mc-nginx in {m}"), T, || {
            endpoint_ips(&tb, m, ns, "antrea-mc-nginx")
        });
        assert_eq!(ips, [want], "in {m}");
        let svc = tb.get_json(m, &["get", "service", "-n", ns, "antrea-mc-nginx"]);
        assert_eq!(
            svc["metadata"]["annotations"]["multicluster.antrea.io/imported-service"],
            "true"
        );
        assert_eq!(svc["spec"]["ports"][0]["port"], 80);
        let eps = tb.get_json(m, &["get", "endpoints", "-n", ns, "antrea-mc-nginx"]);
        assert_eq!(
            eps["metadata"]["annotations"]["multicluster.antrea.io/imported-service"],
            "true"
        );
        let imported_ip = svc["spec"]["clusterIP"].as_str().unwrap().to_owned();
        let si = wait_for(&format!("ServiceImport nginx in {m}"), T, || {
            tb.try_json(m, &["get", "serviceimport", "-n", ns, "nginx"])
                .ok_or("absent".to_owned())
        });
        assert_eq!(si["spec"]["type"], "ClusterSetIP");
        assert_eq!(si["spec"]["ips"], serde_json::json!([imported_ip]));
        let table = tb.ok(m, &["get", "serviceimport", "-n", ns]);
        assert_eq!(header_columns(&table), ["NAME", "TYPE", "IP", "AGE"]);
        assert!(
            table.contains("ClusterSetIP") && table.contains(&imported_ip),
            "{table}"
        );
    }
    // The exporter's ServiceExport says so.
    let se = tb.get_json("west", &["get", "serviceexport", "-n", ns, "nginx"]);
    assert_eq!(condition(&se, "Valid").unwrap()["status"], "True");
    let se = wait_for("ServiceExport Ready", T, || {
        let se = tb.get_json("west", &["get", "serviceexport", "-n", ns, "nginx"]);
        match condition(&se, "Ready") {
            Some(c) if c["status"] == "True" => Ok(se),
            _ => Err(se["status"].to_string()),
        }
    });
    assert_eq!(condition(&se, "Conflict").unwrap()["status"], "False");

    // Endpoint changes propagate; the export of a Service scaled to zero is withdrawn.
    service(&tb, "west", ns, "nginx", 8080, &["10.244.2.5"]);
    wait_for("the new port in east", T, || {
        let svc = tb.get_json("east", &["get", "service", "-n", ns, "antrea-mc-nginx"]);
        if svc["spec"]["ports"][0]["port"] == 8080 {
            Ok(())
        } else {
            Err(svc["spec"].to_string())
        }
    });
    tb.ok(
        "west",
        &[
            "patch",
            "endpoints",
            "-n",
            ns,
            "nginx",
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/subsets","value":[]}]"#,
        ],
    );
    for m in MEMBERS {
        wait_for(&format!("the import to go from {m}"), T, || {
            match tb.try_json(m, &["get", "service", "-n", ns, "antrea-mc-nginx"]) {
                None if tb
                    .try_json(m, &["get", "serviceimport", "-n", ns, "nginx"])
                    .is_none() =>
                {
                    Ok(())
                }
                _ => Err("still there".to_owned()),
            }
        });
    }
    let se = tb.get_json("west", &["get", "serviceexport", "-n", ns, "nginx"]);
    assert_eq!(
        condition(&se, "Valid").unwrap()["reason"],
        "ServiceWithoutEndpoints"
    );
    assert!(
        tb.try_json(
            "north",
            &["get", "resourceexport", "-n", LEADER_NS, &re_svc]
        )
        .is_none()
    );
}

#[test]
fn exports_from_two_clusters_merge_and_a_port_conflict_is_refused_until_fixed() {
    let tb = Testbed::from_env();
    join::ensure_joined(&tb);
    let ns = SameNamespace::new(&tb, "mcs-merge");
    let ns = ns.name.as_str();
    service(&tb, "west", ns, "web", 80, &["10.244.2.5"]);
    export(&tb, "west", ns, "web");
    let west_ip = cluster_ip(&tb, "west", ns, "web");
    wait_for("west's endpoints in east", T, || {
        endpoint_ips(&tb, "east", ns, "antrea-mc-web").and_then(|ips| {
            if ips.is_empty() {
                Err("empty".into())
            } else {
                Ok(())
            }
        })
    });

    // East exports the same Service with other ports: refused, contributes nothing.
    service(&tb, "east", ns, "web", 8080, &["10.244.1.5"]);
    export(&tb, "east", ns, "web");
    let east_ip = cluster_ip(&tb, "east", ns, "web");
    let re = format!("{}-{ns}-web-service", id("east"));
    let failure = wait_for("east's export to fail", T, || {
        let r = tb
            .try_json("north", &["get", "resourceexport", "-n", LEADER_NS, &re])
            .ok_or("absent")?;
        condition(&r, "Failure")
            .cloned()
            .ok_or_else(|| r["status"].to_string())
    });
    assert_eq!(failure["status"], "False");
    assert_eq!(failure["reason"], "ConvergeFailure");
    let conflict = wait_for("east's ServiceExport to show the conflict", T, || {
        let se = tb.get_json("east", &["get", "serviceexport", "-n", ns, "web"]);
        match condition(&se, "Conflict") {
            Some(c) if c["status"] == "True" => Ok(c.clone()),
            _ => Err(se["status"].to_string()),
        }
    });
    assert_eq!(conflict["reason"], "PortConflict");
    assert!(
        conflict["message"].as_str().unwrap().contains("8080"),
        "{conflict}"
    );
    // The MCS API: the exporter whose ports are imported hears of the conflict too, and serves.
    wait_for("west's ServiceExport to show the conflict", T, || {
        let se = tb.get_json("west", &["get", "serviceexport", "-n", ns, "web"]);
        match (condition(&se, "Conflict"), condition(&se, "Ready")) {
            (Some(c), Some(r))
                if c["status"] == "True"
                    && c["reason"] == "PortConflict"
                    && r["status"] == "True" =>
            {
                Ok(())
            }
            _ => Err(se["status"].to_string()),
        }
    });
    assert_eq!(
        endpoint_ips(&tb, "west", ns, "antrea-mc-web").unwrap(),
        ["10.244.2.5"],
        "west serves its share with its own ready endpoint"
    );
    let si = tb.get_json("west", &["get", "service", "-n", ns, "antrea-mc-web"]);
    assert_eq!(
        si["spec"]["ports"][0]["port"], 80,
        "the first exporter's ports stay"
    );

    // Fixed: both clusters' endpoints, everywhere (each cluster's own as its ready endpoint).
    service(&tb, "east", ns, "web", 80, &["10.244.1.5"]);
    for (m, mut both) in [
        ("west", vec![east_ip, "10.244.2.5".to_owned()]),
        ("east", vec![west_ip, "10.244.1.5".to_owned()]),
    ] {
        both.sort();
        wait_for(&format!("both endpoints in {m}"), T, || {
            let ips = endpoint_ips(&tb, m, ns, "antrea-mc-web")?;
            if ips == both {
                Ok(())
            } else {
                Err(format!("{ips:?}"))
            }
        });
    }
    wait_for("the conflict to clear", T, || {
        let se = tb.get_json("east", &["get", "serviceexport", "-n", ns, "web"]);
        match condition(&se, "Conflict") {
            Some(c) if c["status"] == "False" => Ok(()),
            _ => Err(se["status"].to_string()),
        }
    });

    // Deleting one ServiceExport removes only that cluster's endpoints; the other's removes all.
    tb.delete("east", &["serviceexport", "-n", ns, "web"]);
    wait_for("only west's endpoints", T, || {
        let ips = endpoint_ips(&tb, "east", ns, "antrea-mc-web")?;
        if ips.len() == 1 {
            Ok(())
        } else {
            Err(format!("{ips:?}"))
        }
    });
    tb.delete("west", &["serviceexport", "-n", ns, "web"]);
    for m in MEMBERS {
        tb.wait_gone(
            &format!("no import in {m}"),
            T,
            m,
            &["get", "serviceimport", "-n", ns, "web"],
        );
    }
}

#[test]
fn invalid_exports_say_why_and_a_users_own_service_is_never_touched() {
    let tb = Testbed::from_env();
    join::ensure_joined(&tb);
    let ns = SameNamespace::new(&tb, "mcs-invalid");
    let ns = ns.name.as_str();
    tb.apply("west", ns, "apiVersion: v1\nkind: Service\nmetadata: {name: ext}\nspec: {type: ExternalName, externalName: example.invalid}\n");
    tb.apply("west", ns, "apiVersion: v1\nkind: Service\nmetadata: {name: headless}\nspec:\n  clusterIP: None\n  ports: [{port: 80}]\n");
    for (name, reason) in [
        ("ext", "ServiceTypeNotSupported"),
        // Headless Services are exported (MCS API), once they have ready endpoints.
        ("headless", "ServiceWithoutEndpoints"),
        ("missing", "ServiceNotFound"),
    ] {
        export(&tb, "west", ns, name);
        wait_for(&format!("{name}: Valid=False {reason}"), T, || {
            let se = tb.get_json("west", &["get", "serviceexport", "-n", ns, name]);
            match condition(&se, "Valid") {
                Some(c) if c["status"] == "False" && c["reason"] == reason => Ok(()),
                _ => Err(se["status"].to_string()),
            }
        });
    }

    // East's own Service named antrea-mc-db: an import of `db` must leave it alone.
    tb.apply("east", ns, "apiVersion: v1\nkind: Service\nmetadata: {name: antrea-mc-db, labels: {owner: me}}\nspec:\n  ports: [{port: 5432}]\n");
    let before = tb.get_json("east", &["get", "service", "-n", ns, "antrea-mc-db"]);
    service(&tb, "west", ns, "db", 5432, &["10.244.2.9"]);
    export(&tb, "west", ns, "db");
    // West imports it (proof the import happened), east does not touch its own Service.
    wait_for("the import of db in west", T, || {
        endpoint_ips(&tb, "west", ns, "antrea-mc-db")
    });
    std::thread::sleep(Duration::from_secs(2));
    let after = tb.get_json("east", &["get", "service", "-n", ns, "antrea-mc-db"]);
    assert_eq!(
        before["metadata"]["resourceVersion"],
        after["metadata"]["resourceVersion"]
    );
    assert!(
        tb.try_json("east", &["get", "serviceimport", "-n", ns, "db"])
            .is_none()
    );
}
