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
    wait_for(
        &format!("ServiceImport {ns}/web ({version}) with an IP in {cluster}"),
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
            if si["spec"]["ips"][0].is_string() {
                Ok(si)
            } else {
                Err(si.to_string())
            }
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
