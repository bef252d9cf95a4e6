//! The Multi-cluster Services API as its own consumers read it (the MCS conformance suite,
//! CoreDNS): ServiceImports served as `v1beta1` beside the guides' `v1alpha1`, carrying the
//! exported Service's traits, in every member (the exporter too), and the `clusterset.local`
//! names the cluster's CoreDNS answers from them (deploy/coredns and the Corefile's two lines, as
//! docs/operating.md tells an operator).

use std::time::Duration;

use mc_integration::{SameNamespace, Testbed, join, pods, services, wait_for};

/// West's `web` (a Pod answering on 8080) behind a Service with the traits the MCS API copies,
/// exported with a `v1beta1` ServiceExport.
fn export_web(tb: &Testbed, ns: &str) {
    pods::web(tb, "west", ns, "web", None, 8080);
    tb.apply(
        "west",
        ns,
        "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec:\n  selector: {app: web}\n  \
         ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP}]\n  sessionAffinity: ClientIP\n  \
         sessionAffinityConfig: {clientIP: {timeoutSeconds: 10}}\n  internalTrafficPolicy: Cluster\n  \
         trafficDistribution: PreferClose\n---\napiVersion: multicluster.x-k8s.io/v1beta1\nkind: ServiceExport\n\
         metadata: {name: web}\n",
    );
}

fn service_import(tb: &Testbed, cluster: &str, ns: &str, version: &str) -> serde_json::Value {
    service_import_where(tb, cluster, ns, version, "with an IP", |si| {
        si["spec"]["ips"][0].is_string()
    })
}

/// Waits until ServiceImport `<ns>/web`, read through `version`, is what `ok` says (`what`).
fn service_import_where(
    tb: &Testbed,
    cluster: &str,
    ns: &str,
    version: &str,
    what: &str,
    ok: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    wait_for(
        &format!("ServiceImport {ns}/web ({version}) {what} in {cluster}"),
        Duration::from_secs(60),
        || {
            let si = tb
                .try_json(
                    cluster,
                    &[
                        "get",
                        &format!("serviceimports.{version}.multicluster.x-k8s.io"),
                        "-n",
                        ns,
                        "web",
                    ],
                )
                .ok_or("none")?;
            if ok(&si) { Ok(si) } else { Err(si.to_string()) }
        },
    )
}

#[test]
fn service_imports_read_as_v1beta1_carry_the_services_traits_in_every_member() {
    let tb = Testbed::from_env();
    join::ensure_joined(&tb);
    let ns = SameNamespace::new(&tb, "mcs-v1beta1");
    export_web(&tb, &ns.name);
    // In the importer and in the exporter itself.
    for cluster in ["east", "west"] {
        let si = service_import(&tb, cluster, &ns.name, "v1beta1");
        assert_eq!(si["apiVersion"], "multicluster.x-k8s.io/v1beta1");
        let spec = &si["spec"];
        let imported_ip = services::cluster_ip(&tb, cluster, &ns.name, "antrea-mc-web");
        assert_eq!(
            spec["ips"],
            serde_json::json!([imported_ip]),
            "{cluster}: {si}"
        );
        assert_eq!(
            spec["ipFamilies"],
            serde_json::json!(["IPv4"]),
            "{cluster}: {si}"
        );
        assert_eq!(spec["type"], "ClusterSetIP");
        assert_eq!(
            spec["ports"],
            serde_json::json!([{"name": "http", "port": 80, "protocol": "TCP"}])
        );
        assert_eq!(spec["sessionAffinity"], "ClientIP", "{cluster}: {si}");
        assert_eq!(
            spec["sessionAffinityConfig"],
            serde_json::json!({"clientIP": {"timeoutSeconds": 10}})
        );
        assert_eq!(spec["internalTrafficPolicy"], "Cluster");
        assert_eq!(spec["trafficDistribution"], "PreferClose");
        // The same object through the guides' version.
        let alpha = service_import(&tb, cluster, &ns.name, "v1alpha1");
        assert_eq!(alpha["spec"], si["spec"]);
        // kube-proxy keeps a client on one endpoint of the imported Service too.
        let svc = tb.get_json(
            cluster,
            &["get", "service", "-n", &ns.name, "antrea-mc-web"],
        );
        assert_eq!(svc["spec"]["sessionAffinity"], "ClientIP");
        // The MCS EndpointSlice of the exporting cluster (its exported endpoint).
        let slices = wait_for(
            &format!("{cluster}: the MCS EndpointSlice of web"),
            Duration::from_secs(30),
            || {
                let s = mcs_slices(&tb, cluster, &ns.name, "web");
                if s.len() == 1 && s[0]["endpoints"][0]["addresses"][0].is_string() {
                    Ok(s)
                } else {
                    Err(format!("{s:?}"))
                }
            },
        );
        let labels = &slices[0]["metadata"]["labels"];
        assert_eq!(
            labels["multicluster.kubernetes.io/source-cluster"],
            join::id("west").as_str()
        );
        assert_eq!(slices[0]["addressType"], "IPv4");
        // It is kube-proxy's slice of the imported Service too: no mirrored copy beside it.
        assert_eq!(labels["kubernetes.io/service-name"], "antrea-mc-web");
        let proxied = tb.get_json(
            cluster,
            &[
                "get",
                "endpointslices",
                "-n",
                &ns.name,
                "-l",
                "kubernetes.io/service-name=antrea-mc-web",
            ],
        );
        let names: Vec<&str> = proxied["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["metadata"]["name"].as_str())
            .collect();
        assert_eq!(names, [slices[0]["metadata"]["name"].as_str().unwrap()]);
    }
    // The ServiceExport written as v1beta1 is Valid, read through either version.
    for version in ["v1beta1", "v1alpha1"] {
        let se = tb.get_json(
            "west",
            &[
                "get",
                &format!("serviceexports.{version}.multicluster.x-k8s.io"),
                "-n",
                &ns.name,
                "web",
            ],
        );
        let valid = se["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Valid")
            .cloned();
        assert_eq!(
            valid.map(|c| c["status"].clone()),
            Some("True".into()),
            "{se}"
        );
    }
    tb.delete("west", &["serviceexport", "-n", &ns.name, "web"]);
    for cluster in ["east", "west"] {
        tb.wait_gone(
            &format!("the ServiceImport to go in {cluster}"),
            Duration::from_secs(20),
            cluster,
            &["get", "serviceimport", "-n", &ns.name, "web"],
        );
        wait_for(
            &format!("{cluster}: no MCS EndpointSlice"),
            Duration::from_secs(20),
            || {
                let s = mcs_slices(&tb, cluster, &ns.name, "web");
                if s.is_empty() {
                    Ok(())
                } else {
                    Err(format!("{s:?}"))
                }
            },
        );
    }
}

/// What busybox's nslookup printed as answers (after the server's own lines).
fn answers(out: &str) -> Vec<String> {
    out.split("Name:")
        .skip(1)
        .flat_map(|block| {
            block
                .lines()
                .filter_map(|l| l.trim().strip_prefix("Address:"))
                .map(|a| a.split_whitespace().next().unwrap_or("").to_owned())
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn clusterset_local_names_answer_with_the_service_import_ip_and_reach_the_exporter() {
    let tb = Testbed::from_env();
    join::ensure_joined(&tb);
    let ns = SameNamespace::new(&tb, "mcs-dns");
    export_web(&tb, &ns.name);
    // A Service of the same name in east that is not exported: its cluster.local name stays
    // east's own.
    pods::web(&tb, "east", &ns.name, "web", None, 8080);
    tb.apply(
        "east",
        &ns.name,
        "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec:\n  selector: {app: web}\n  \
         ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP}]\n",
    );
    // And one in west that is not exported at all.
    tb.apply(
        "west",
        &ns.name,
        "apiVersion: v1\nkind: Service\nmetadata: {name: hidden}\nspec:\n  selector: {app: web}\n  \
         ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP}]\n",
    );
    pods::client(&tb, "east", &ns.name, "client", None);
    let si = service_import(&tb, "east", &ns.name, "v1alpha1");
    let ip = si["spec"]["ips"][0].as_str().expect("an IP").to_owned();
    let name = format!("web.{}.svc.clusterset.local", ns.name);
    let lookup = |name: &str| {
        let out = pods::exec(&tb, "east", &ns.name, "client", &["nslookup", name]);
        answers(&String::from_utf8_lossy(&out.stdout))
    };
    wait_for(
        &format!("{name} to answer {ip} in east"),
        Duration::from_secs(60),
        || {
            let got = lookup(&name);
            if got == [ip.clone()] {
                Ok(())
            } else {
                Err(format!("{got:?}"))
            }
        },
    );
    wait_for(
        &format!("http://{name}/ from east"),
        Duration::from_secs(60),
        || match pods::curl(&tb, "east", &ns.name, "client", &format!("http://{name}/")) {
            Ok(body) if body == "hello from west/web" => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    let local = services::cluster_ip(&tb, "east", &ns.name, "web");
    let got = lookup(&format!("web.{}.svc.cluster.local", ns.name));
    assert_eq!(got, [local], "cluster.local stays this cluster's");
    let hidden = lookup(&format!("hidden.{}.svc.clusterset.local", ns.name));
    assert!(
        hidden.is_empty(),
        "an unexported Service has no clusterset name: {hidden:?}"
    );
}

fn condition(obj: &serde_json::Value, type_: &str) -> Option<serde_json::Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

/// Waits until the ServiceExport `<ns>/<name>` in `cluster` has condition `type_` with `status`
/// and a reason containing `reason`; returns that condition.
fn export_condition(
    tb: &Testbed,
    cluster: &str,
    ns: &str,
    name: &str,
    (type_, status, reason): (&str, &str, &str),
) -> serde_json::Value {
    wait_for(
        &format!("{cluster}: ServiceExport {ns}/{name} {type_}={status} ({reason})"),
        Duration::from_secs(30),
        || {
            let se = tb.get_json(cluster, &["get", "serviceexport", "-n", ns, name]);
            match condition(&se, type_) {
                Some(c)
                    if c["status"] == status
                        && c["reason"].as_str().unwrap_or("").contains(reason) =>
                {
                    Ok(c)
                }
                _ => Err(se["status"].to_string()),
            }
        },
    )
}

/// The MCS EndpointSlices of `<ns>/<service>` in `cluster` (label `multicluster.kubernetes.io/service-name`).
fn mcs_slices(tb: &Testbed, cluster: &str, ns: &str, service: &str) -> Vec<serde_json::Value> {
    let list = tb.get_json(
        cluster,
        &[
            "get",
            "endpointslices",
            "-n",
            ns,
            "-l",
            &format!("multicluster.kubernetes.io/service-name={service}"),
        ],
    );
    list["items"].as_array().cloned().unwrap_or_default()
}

#[test]
fn exported_labels_and_annotations_reach_every_service_import_and_disagreeing_exporters_both_hear_of_it()
 {
    let tb = Testbed::from_env();
    join::ensure_joined(&tb);
    let ns = SameNamespace::new(&tb, "mcs-labels");
    let ns = ns.name.as_str();
    pods::web(&tb, "west", ns, "web", None, 8080);
    let service = "apiVersion: v1\nkind: Service\nmetadata: {name: web, labels: {only-the-service: x}, \
                   annotations: {only-the-service: x}}\nspec:\n  selector: {app: web}\n  \
                   ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP}]\n";
    let export = |cluster: &str, tier: &str, note: &str| {
        tb.apply(
            cluster,
            ns,
            &format!(
                "apiVersion: multicluster.x-k8s.io/v1beta1\nkind: ServiceExport\nmetadata: {{name: web}}\n\
                 spec:\n  exportedLabels: {{tier: {tier}}}\n  exportedAnnotations: {{note: {note}}}\n"
            ),
        )
    };
    tb.apply("west", ns, service);
    export("west", "front", "from-west");
    let marked = |cluster: &str, tier: Option<&str>, note: Option<&str>| {
        let what = format!("labelled tier={tier:?}, note={note:?}");
        service_import_where(&tb, cluster, ns, "v1beta1", &what, |si| {
            si["metadata"]["labels"]["tier"].as_str() == tier
                && si["metadata"]["annotations"]["note"].as_str() == note
        })
    };
    for cluster in ["east", "west"] {
        let si = marked(cluster, Some("front"), Some("from-west"));
        // Only what the ServiceExport marks: nothing of the Service's own.
        assert!(
            si["metadata"]["labels"]["only-the-service"].is_null(),
            "{si}"
        );
        assert!(
            si["metadata"]["annotations"]["only-the-service"].is_null(),
            "{si}"
        );
    }
    export_condition(&tb, "west", ns, "web", ("Conflict", "False", ""));

    // East exports the same Service with other marks: both exporters report the conflict, and
    // the oldest export's marks stay.
    pods::web(&tb, "east", ns, "web", None, 8080);
    tb.apply("east", ns, service);
    export("east", "back", "from-east");
    for cluster in ["west", "east"] {
        let c = export_condition(
            &tb,
            cluster,
            ns,
            "web",
            ("Conflict", "True", "LabelsConflict"),
        );
        assert!(
            c["reason"]
                .as_str()
                .unwrap()
                .contains("AnnotationsConflict"),
            "{c}"
        );
        // A marks conflict refuses nobody: both clusters serve.
        export_condition(&tb, cluster, ns, "web", ("Ready", "True", "Exported"));
    }
    for cluster in ["east", "west"] {
        marked(cluster, Some("front"), Some("from-west"));
    }
    // East agrees again: the conflict is over on both.
    export("east", "front", "from-west");
    for cluster in ["west", "east"] {
        export_condition(&tb, cluster, ns, "web", ("Conflict", "False", ""));
    }
    // A mark taken off the ServiceExports is taken off the ServiceImports.
    for cluster in ["west", "east"] {
        tb.apply(
            cluster,
            ns,
            "apiVersion: multicluster.x-k8s.io/v1beta1\nkind: ServiceExport\nmetadata: {name: web}\n\
             spec:\n  exportedAnnotations: {note: from-west}\n",
        );
    }
    for cluster in ["east", "west"] {
        marked(cluster, None, Some("from-west"));
    }
}

/// A StatefulSet `web` (of the headless Service `web`) of `replicas` Pods `web-<i>` answering
/// HTTP on 8080 with `hello from <cluster>/web-<i>`; waits until they are Ready and returns
/// their IPs in order. The StatefulSet controller gives each Pod its hostname, which its
/// EndpointSlice endpoint carries.
fn stateful_web(tb: &Testbed, cluster: &str, ns: &str, replicas: usize) -> Vec<String> {
    let set = serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {
            "serviceName": "web",
            "replicas": replicas,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{
                        "name": "main",
                        "image": pods::tools_image(),
                        "imagePullPolicy": "Never",
                        "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                        "command": ["/bin/sh", "-c", format!(
                            "mkdir -p /tmp/www && echo \"hello from {cluster}/$POD\" > /tmp/www/index.html && \
                             exec httpd -f -p 8080 -h /tmp/www"
                        )],
                    }],
                },
            },
        },
    });
    tb.apply(cluster, ns, &set.to_string());
    (0..replicas)
        .map(|i| pods::wait_ready(tb, cluster, ns, &format!("web-{i}")))
        .collect()
}

#[test]
fn a_headless_export_is_imported_headless_with_mcs_endpoint_slices_and_per_pod_clusterset_names() {
    let tb = Testbed::from_env();
    join::ensure_joined(&tb);
    let ns = SameNamespace::new(&tb, "mcs-headless");
    let ns = ns.name.as_str();
    let ips = stateful_web(&tb, "west", ns, 2);
    tb.apply(
        "west",
        ns,
        "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec:\n  clusterIP: None\n  \
         selector: {app: web}\n  ports: [{name: http, port: 8080, protocol: TCP}]\n---\n\
         apiVersion: multicluster.x-k8s.io/v1beta1\nkind: ServiceExport\nmetadata: {name: web}\n",
    );
    export_condition(&tb, "west", ns, "web", ("Valid", "True", ""));
    let west_id = join::id("west");
    for cluster in ["east", "west"] {
        let si = service_import_where(&tb, cluster, ns, "v1beta1", "Headless", |si| {
            si["spec"]["type"] == "Headless"
        });
        assert!(si["spec"]["ips"].is_null(), "no clusterset IP: {si}");
        assert_eq!(si["spec"]["ipFamilies"], serde_json::json!(["IPv4"]));
        assert!(
            tb.try_json(cluster, &["get", "service", "-n", ns, "antrea-mc-web"])
                .is_none(),
            "{cluster}: a headless import has no antrea-mc Service"
        );
        // One MCS EndpointSlice from west with both Pods and their hostnames, not taken by
        // kube-proxy (no kubernetes.io/service-name) nor by the stock controller.
        let slices = wait_for(
            &format!("{cluster}: the MCS EndpointSlice of {ns}/web"),
            Duration::from_secs(60),
            || {
                let s = mcs_slices(&tb, cluster, ns, "web");
                let n: usize = s
                    .iter()
                    .map(|s| s["endpoints"].as_array().map_or(0, Vec::len))
                    .sum();
                if n == 2 { Ok(s) } else { Err(format!("{s:?}")) }
            },
        );
        assert_eq!(slices.len(), 1, "{slices:?}");
        let slice = &slices[0];
        let labels = &slice["metadata"]["labels"];
        assert_eq!(
            labels["multicluster.kubernetes.io/source-cluster"],
            west_id.as_str()
        );
        assert!(labels["kubernetes.io/service-name"].is_null(), "{labels}");
        assert_ne!(
            labels["endpointslice.kubernetes.io/managed-by"],
            "endpointslice-controller.k8s.io"
        );
        assert_eq!(slice["addressType"], "IPv4");
        let mut got: Vec<(String, String)> = slice["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["hostname"].as_str().unwrap_or("").to_owned(),
                    e["addresses"][0].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect();
        got.sort();
        assert_eq!(
            got,
            [
                ("web-0".to_owned(), ips[0].clone()),
                ("web-1".to_owned(), ips[1].clone())
            ]
        );
    }
    // DNS in east: the Service's name answers both Pods, a Pod's name answers that Pod, and the
    // Pod answers across the clusters.
    pods::client(&tb, "east", ns, "client", None);
    let lookup = |name: &str| {
        let out = pods::exec(&tb, "east", ns, "client", &["nslookup", name]);
        let mut a = answers(&String::from_utf8_lossy(&out.stdout));
        a.sort();
        a
    };
    let mut want = ips.clone();
    want.sort();
    let all = format!("web.{ns}.svc.clusterset.local");
    wait_for(
        &format!("{all} to answer both Pods"),
        Duration::from_secs(60),
        || {
            let got = lookup(&all);
            if got == want {
                Ok(())
            } else {
                Err(format!("{got:?}"))
            }
        },
    );
    let one = format!("web-1.{west_id}.web.{ns}.svc.clusterset.local");
    assert_eq!(lookup(&one), [ips[1].clone()]);
    wait_for(
        &format!("http://{one}:8080/ from east"),
        Duration::from_secs(60),
        || match pods::curl(&tb, "east", ns, "client", &format!("http://{one}:8080/")) {
            Ok(body) if body == "hello from west/web-1" => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );

    // East exports a ClusterIP Service of the same name: headlessness differs, the first export
    // stays (a Headless import) and both exporters report the conflict.
    pods::web(&tb, "east", ns, "east-web", None, 8080);
    tb.apply(
        "east",
        ns,
        "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec:\n  selector: {app: east-web}\n  \
         ports: [{name: http, port: 8080, protocol: TCP}]\n---\n\
         apiVersion: multicluster.x-k8s.io/v1beta1\nkind: ServiceExport\nmetadata: {name: web}\n",
    );
    export_condition(&tb, "east", ns, "web", ("Conflict", "True", "TypeConflict"));
    export_condition(&tb, "east", ns, "web", ("Ready", "False", ""));
    export_condition(&tb, "west", ns, "web", ("Conflict", "True", "TypeConflict"));
    export_condition(&tb, "west", ns, "web", ("Ready", "True", ""));
    let si = tb.get_json("east", &["get", "serviceimport", "-n", ns, "web"]);
    assert_eq!(si["spec"]["type"], "Headless");
    tb.delete("east", &["serviceexport", "-n", ns, "web"]);

    // Unexported: the ServiceImports and the MCS EndpointSlices go everywhere.
    tb.delete("west", &["serviceexport", "-n", ns, "web"]);
    for cluster in ["east", "west"] {
        tb.wait_gone(
            &format!("{cluster}: the ServiceImport"),
            Duration::from_secs(20),
            cluster,
            &["get", "serviceimport", "-n", ns, "web"],
        );
        wait_for(
            &format!("{cluster}: no MCS EndpointSlice"),
            Duration::from_secs(20),
            || {
                let s = mcs_slices(&tb, cluster, ns, "web");
                if s.is_empty() {
                    Ok(())
                } else {
                    Err(format!("{s:?}"))
                }
            },
        );
    }
}

#[test]
fn differently_named_ports_are_the_union_served_each_by_its_exporter_and_a_clashing_name_stays_the_oldest()
 {
    let tb = Testbed::from_env();
    join::ensure_joined(&tb);
    let ns = SameNamespace::new(&tb, "mcs-ports");
    let ns = ns.name.as_str();
    let service = |cluster: &str, port_name: &str, port: u16| {
        tb.apply(
            cluster,
            ns,
            &format!(
                "apiVersion: v1\nkind: Service\nmetadata: {{name: web}}\nspec:\n  selector: {{app: web}}\n  \
                 ports: [{{name: {port_name}, port: {port}, targetPort: 8080, protocol: TCP}}]\n---\n\
                 apiVersion: multicluster.x-k8s.io/v1beta1\nkind: ServiceExport\nmetadata: {{name: web}}\n"
            ),
        )
    };
    for cluster in ["west", "east"] {
        pods::web(&tb, cluster, ns, "web", None, 8080);
        pods::client(&tb, cluster, ns, "client", None);
    }
    service("west", "a", 80);
    service_import(&tb, "east", ns, "v1beta1");
    service("east", "b", 81);
    let ports = |si: &serde_json::Value| si["spec"]["ports"].to_string();
    let union = serde_json::json!([
        {"name": "a", "port": 80, "protocol": "TCP"},
        {"name": "b", "port": 81, "protocol": "TCP"}
    ])
    .to_string();
    for cluster in ["east", "west"] {
        service_import_where(&tb, cluster, ns, "v1beta1", "with both ports", |si| {
            ports(si) == union
        });
        export_condition(
            &tb,
            cluster,
            ns,
            "web",
            ("Conflict", "True", "PortConflict"),
        );
        export_condition(&tb, cluster, ns, "web", ("Ready", "True", ""));
    }
    // Each port reaches only the cluster that exposes it, from either cluster.
    let name = format!("web.{ns}.svc.clusterset.local");
    let only = |client_cluster: &str, port: u16, want: &str| {
        let url = format!("http://{name}:{port}/");
        wait_for(
            &format!("{url} from {client_cluster} to answer {want:?}"),
            Duration::from_secs(60),
            || match pods::curl(&tb, client_cluster, ns, "client", &url) {
                Ok(body) if body == want => Ok(()),
                other => Err(format!("{other:?}")),
            },
        );
        for _ in 0..8 {
            let body = pods::curl(&tb, client_cluster, ns, "client", &url);
            assert_eq!(body.as_deref(), Ok(want), "{url} from {client_cluster}");
        }
    };
    for client in ["east", "west"] {
        only(client, 80, "hello from west/web");
        only(client, 81, "hello from east/web");
    }
    // East renames its port to west's name on another number: the name stays west's, east
    // serves nothing and is refused; port 80 still reaches only west.
    service("east", "a", 82);
    export_condition(&tb, "east", ns, "web", ("Ready", "False", ""));
    export_condition(&tb, "east", ns, "web", ("Conflict", "True", "PortConflict"));
    export_condition(&tb, "west", ns, "web", ("Conflict", "True", "PortConflict"));
    let west_only = serde_json::json!([{"name": "a", "port": 80, "protocol": "TCP"}]).to_string();
    service_import_where(&tb, "east", ns, "v1beta1", "with west's port only", |si| {
        ports(si) == west_only
    });
    for client in ["east", "west"] {
        only(client, 80, "hello from west/web");
    }
}

#[test]
fn the_dual_role_leader_exports_a_headless_service_with_marks_that_every_member_imports() {
    let tb = Testbed::from_env();
    join::ensure_joined(&tb);
    let north = join::north_as_member(&tb);
    let ns = SameNamespace::new(&tb, "mcs-north");
    let ns = ns.name.as_str();
    let ip = stateful_web(&tb, "north", ns, 1).remove(0);
    tb.apply(
        "north",
        ns,
        "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec:\n  clusterIP: None\n  \
         selector: {app: web}\n  ports: [{name: http, port: 8080, protocol: TCP}]\n---\n\
         apiVersion: multicluster.x-k8s.io/v1beta1\nkind: ServiceExport\nmetadata: {name: web}\n\
         spec:\n  exportedLabels: {from: north}\n",
    );
    let north_id = join::id("north");
    for cluster in ["north", "east", "west"] {
        let si = service_import_where(&tb, cluster, ns, "v1beta1", "Headless, marked", |si| {
            si["spec"]["type"] == "Headless" && si["metadata"]["labels"]["from"] == "north"
        });
        assert!(si["spec"]["ips"].is_null(), "{si}");
        let slices = wait_for(
            &format!("{cluster}: north's MCS EndpointSlice"),
            Duration::from_secs(60),
            || {
                let s = mcs_slices(&tb, cluster, ns, "web");
                match s.as_slice() {
                    [one] if one["endpoints"][0]["addresses"][0] == ip.as_str() => Ok(s.clone()),
                    _ => Err(format!("{s:?}")),
                }
            },
        );
        let slice = &slices[0];
        assert_eq!(
            slice["metadata"]["labels"]["multicluster.kubernetes.io/source-cluster"],
            north_id.as_str()
        );
        assert_eq!(slice["endpoints"][0]["hostname"], "web-0");
    }
    export_condition(&tb, "north", ns, "web", ("Ready", "True", "Exported"));
    tb.delete("north", &["serviceexport", "-n", ns, "web"]);
    for cluster in ["north", "east", "west"] {
        tb.wait_gone(
            &format!("{cluster}: the ServiceImport"),
            Duration::from_secs(20),
            cluster,
            &["get", "serviceimport", "-n", ns, "web"],
        );
    }
    north.leave();
}
