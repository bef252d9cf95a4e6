//! Label identities across the ClusterSet (issue 23, step 2), with stretched NetworkPolicy on
//! (the testbed's controller config): each member exports one ResourceExport per distinct
//! normalized Pod label, the leader gives each label one 24-bit ID and imports it under the
//! label's hash, every member makes a LabelIdentity of it, and restarts change no ID. The agents
//! (stretched policy on in their config too) put the source Pod's ID in the tunnel's VNI.

use std::time::Duration;

use mc_integration::{
    SameNamespace, Testbed,
    join::{self, CLUSTERSET, LEADER_NS},
    label_hash,
    net::RouterCapture,
    pods, procs, wait_for,
};
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(60);

/// A Pod with `labels` (it need not run: a Pod counts from its creation).
fn pod(tb: &Testbed, cluster: &str, ns: &str, name: &str, labels: Value) {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": mc_integration::pods::tools_image(),
                            "imagePullPolicy": "Never", "command": ["sleep", "86400"]}],
        },
    });
    tb.apply(cluster, ns, &pod.to_string());
}

/// Deletes a Pod at once.
fn delete_pod(tb: &Testbed, cluster: &str, ns: &str, name: &str) {
    tb.ok(
        cluster,
        &[
            "delete",
            "pod",
            "-n",
            ns,
            name,
            "--grace-period=0",
            "--force",
        ],
    );
}

/// The leader's import of `hash`: its label and ID.
fn imported(tb: &Testbed, hash: &str) -> Result<(String, u64), String> {
    let ri = tb
        .try_json("north", &["get", "resourceimport", "-n", LEADER_NS, hash])
        .ok_or("no ResourceImport")?;
    if ri["spec"]["kind"] != "LabelIdentity" {
        return Err(format!("kind {}", ri["spec"]["kind"]));
    }
    let li = &ri["spec"]["labelIdentity"];
    match (li["label"].as_str(), li["id"].as_u64()) {
        (Some(l), Some(id)) => Ok((l.to_owned(), id)),
        _ => Err(format!("spec {}", ri["spec"])),
    }
}

/// A member's LabelIdentity `hash`: its label and ID.
fn member_identity(tb: &Testbed, cluster: &str, hash: &str) -> Result<(String, u64), String> {
    let li = tb
        .try_json(cluster, &["get", "labelidentity", hash])
        .ok_or_else(|| format!("no LabelIdentity {hash} in {cluster}"))?;
    match (li["spec"]["label"].as_str(), li["spec"]["id"].as_u64()) {
        (Some(l), Some(id)) => Ok((l.to_owned(), id)),
        _ => Err(format!("{cluster}: spec {}", li["spec"])),
    }
}

/// Waits until the leader imports `label` and both members hold it with the same ID.
fn same_id_everywhere(tb: &Testbed, label: &str) -> u64 {
    let h = label_hash(label);
    wait_for(
        &format!("one ID for {label} in the leader and both members"),
        T,
        || {
            let (l, id) = imported(tb, &h)?;
            if l != label {
                return Err(format!("import {h} has label {l}"));
            }
            if !(1..0xffffff).contains(&id) {
                return Err(format!("ID {id} out of range"));
            }
            for m in join::MEMBERS {
                let got = member_identity(tb, m, &h)?;
                if got != (label.to_owned(), id) {
                    return Err(format!("{m} has {got:?}, the leader ({l}, {id})"));
                }
            }
            Ok(id)
        },
    )
}

fn exporters(tb: &Testbed, h: &str) -> Vec<String> {
    let list = tb.get_json(
        "north",
        &[
            "get",
            "resourceexports",
            "-n",
            LEADER_NS,
            "-l",
            "sourceKind=LabelIdentity",
        ],
    );
    let mut names: Vec<String> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|re| re["metadata"]["name"].as_str())
        .filter(|n| n.ends_with(&format!("-{h}")))
        .map(str::to_owned)
        .collect();
    names.sort();
    names
}

fn issued_up_to(tb: &Testbed) -> u64 {
    tb.get_json("north", &["get", "clusterset", "-n", LEADER_NS, CLUSTERSET])["metadata"]
        ["annotations"]["multicluster.strait.io/label-ids-issued-up-to"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

#[test]
fn one_label_gets_one_id_in_every_member_and_restarts_change_no_id() {
    let tb = Testbed::from_env();
    join::ensure_joined(&tb);
    let ns = SameNamespace::new(&tb, "labelid");
    let shared = format!(
        "ns:kubernetes.io/metadata.name={}&pod:app=db,tier=back",
        ns.name
    );
    let west_only = format!("ns:kubernetes.io/metadata.name={}&pod:app=cache", ns.name);
    for c in join::MEMBERS {
        // Two Pods of one label in each member: one export per cluster.
        pod(
            &tb,
            c,
            &ns.name,
            "db-0",
            json!({"app": "db", "tier": "back"}),
        );
        pod(
            &tb,
            c,
            &ns.name,
            "db-1",
            json!({"tier": "back", "app": "db"}),
        );
    }
    pod(&tb, "west", &ns.name, "cache", json!({"app": "cache"}));

    // Antrea's names: `<clusterID>-<hash>` exports, one import `<hash>`.
    let (h, h2) = (label_hash(&shared), label_hash(&west_only));
    let id = same_id_everywhere(&tb, &shared);
    assert_eq!(
        exporters(&tb, &h),
        [
            format!("{}-{h}", join::id("east")),
            format!("{}-{h}", join::id("west"))
        ]
    );
    let id2 = wait_for("the west-only label imported", T, || imported(&tb, &h2)).1;
    assert_ne!(id, id2);
    assert_eq!(exporters(&tb, &h2), [format!("{}-{h2}", join::id("west"))]);
    // The high-water mark on the ClusterSet covers every ID imported.
    assert!(issued_up_to(&tb) >= id.max(id2), "{}", issued_up_to(&tb));

    // A label that gets the highest ID so far, then leaves every cluster: its ID is freed, and
    // a restarted leader must still not give it out (the recorded high-water mark).
    let last = format!("ns:kubernetes.io/metadata.name={}&pod:app=last", ns.name);
    pod(&tb, "west", &ns.name, "last", json!({"app": "last"}));
    let id_last = same_id_everywhere(&tb, &last);
    assert!(id_last > id.max(id2), "{id_last}");
    assert!(issued_up_to(&tb) >= id_last, "{}", issued_up_to(&tb));
    delete_pod(&tb, "west", &ns.name, "last");
    tb.wait_gone(
        "the last label's import",
        T,
        "north",
        &["get", "resourceimport", "-n", LEADER_NS, &label_hash(&last)],
    );

    // Restarts: the leader re-reads its imports, a member its leader's; no ID changes, and a
    // restarted member does not withdraw and re-create its exports (same uid).
    let uid = |name: &str| {
        tb.get_json("north", &["get", "resourceexport", "-n", LEADER_NS, name])["metadata"]["uid"]
            .as_str()
            .map(str::to_owned)
    };
    let west_export = format!("{}-{h2}", join::id("west"));
    let before = uid(&west_export);
    for victim in [
        "north-mc-controller",
        "east-mc-controller",
        "west-mc-controller",
    ] {
        let args = procs::kill(victim);
        procs::start(victim, &args);
        assert_eq!(
            same_id_everywhere(&tb, &shared),
            id,
            "after {victim} restarted"
        );
        assert_eq!(
            wait_for("the west-only label after the restart", T, || imported(
                &tb, &h2
            ))
            .1,
            id2
        );
    }
    assert_eq!(uid(&west_export), before, "west's export was re-created");
    // A label born after the leader's restart gets a fresh ID: not the freed one, though it
    // was the highest the leader had issued.
    let third = format!("ns:kubernetes.io/metadata.name={}&pod:app=web", ns.name);
    pod(&tb, "east", &ns.name, "web", json!({"app": "web"}));
    let id3 = same_id_everywhere(&tb, &third);
    assert!(
        id3 > id_last,
        "{id3} reuses an ID up to the freed {id_last}"
    );

    // The last Pod of a label gone from one cluster: that cluster's export goes, the ID stays.
    for p in ["db-0", "db-1"] {
        delete_pod(&tb, "east", &ns.name, p);
    }
    wait_for(
        "east's export of the shared label removed",
        T,
        || match exporters(&tb, &h).as_slice() {
            [only] if *only == format!("{}-{h}", join::id("west")) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    assert_eq!(same_id_everywhere(&tb, &shared), id);

    // Gone from every cluster: the import and the members' LabelIdentities go, and the freed
    // ID is not given to the next new label.
    for p in ["db-0", "db-1"] {
        delete_pod(&tb, "west", &ns.name, p);
    }
    tb.wait_gone(
        "the shared label's import",
        T,
        "north",
        &["get", "resourceimport", "-n", LEADER_NS, &h],
    );
    for m in join::MEMBERS {
        tb.wait_gone(
            "the member's LabelIdentity",
            T,
            m,
            &["get", "labelidentity", &h],
        );
    }
    pod(&tb, "east", &ns.name, "fresh", json!({"app": "fresh"}));
    let fresh = format!("ns:kubernetes.io/metadata.name={}&pod:app=fresh", ns.name);
    let id4 = same_id_everywhere(&tb, &fresh);
    assert!(
        ![id, id2, id3, id_last].contains(&id4),
        "{id4} reuses a recent ID"
    );

    // A Namespace label change is a new label for every Pod in it.
    tb.ok("west", &["label", "namespace", &ns.name, "env=prod"]);
    let relabelled = format!(
        "ns:env=prod,kubernetes.io/metadata.name={}&pod:app=cache",
        ns.name
    );
    let id5 = wait_for("the relabelled Namespace's label imported", T, || {
        imported(&tb, &label_hash(&relabelled))
    })
    .1;
    assert!(![id, id2, id3, id4, id_last].contains(&id5));
    tb.wait_gone(
        "the old label of the relabelled Namespace",
        T,
        "north",
        &["get", "resourceimport", "-n", LEADER_NS, &h2],
    );
}

/// The VNIs of the Geneve packets from `src` (an underlay address) a capture saw so far.
fn vnis_from(capture: &RouterCapture, src: &str) -> Vec<u32> {
    capture
        .lines()
        .iter()
        .filter(|l| l.contains(&format!(" IP {src}.")))
        // The gateways' tunnel probes (Geneve's OAM bit, VNI 0, inner UDP port 7) carry no
        // Pod's identity.
        .filter(|l| !l.contains("Flags [O") && !l.contains(&format!("{src}.7 > ")))
        .filter_map(|l| {
            let hex = l
                .split("vni 0x")
                .nth(1)?
                .split(|c: char| !c.is_ascii_hexdigit())
                .next()?;
            u32::from_str_radix(hex, 16).ok()
        })
        .collect()
}

/// East's gateway (node-a) on the underlay.
const EAST_GATEWAY: &str = "198.18.11.1";

#[test]
fn the_source_pods_label_id_is_the_vni_between_the_gateways() {
    let tb = Testbed::from_env();
    join::ensure_joined(&tb);
    for c in join::MEMBERS {
        wait_for(&format!("{c}'s Gateway node-a"), T, || {
            tb.try_json(c, &["get", "gateway", "-n", join::MEMBER_NS, "node-a"])
                .ok_or_else(|| "none".to_owned())
        });
    }
    let ns = SameNamespace::new(&tb, "vni");
    pods::web(&tb, "west", &ns.name, "web", Some("node-b"), 8080);
    tb.apply(
        "west",
        &ns.name,
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  selector:\n    app: web\n  ports:\n    - {port: 80, targetPort: 8080}\n---\napiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceExport\nmetadata:\n  name: web\n",
    );
    let url = wait_for("antrea-mc-web in east", T, || {
        let svc = tb
            .try_json("east", &["get", "service", "-n", &ns.name, "antrea-mc-web"])
            .ok_or("no Service")?;
        let ep = tb
            .try_json(
                "east",
                &["get", "endpoints", "-n", &ns.name, "antrea-mc-web"],
            )
            .ok_or("no Endpoints")?;
        if ep["subsets"].as_array().is_none_or(Vec::is_empty) {
            return Err("no endpoints yet".to_owned());
        }
        Ok(format!(
            "http://{}",
            svc["spec"]["clusterIP"].as_str().ok_or("no IP")?
        ))
    });
    // What west's gateway decrypted from WireGuard: east's gateway's Geneve as it sent it.
    let capture = RouterCapture::on_node("west", "node-a", "strait-wg0", "udp port 6081");
    // A client on the regular Node (its VNI is written there and kept by the gateway's
    // hairpin) and one on the gateway Node (written there, after the SNAT).
    for (pod, node) in [("client-b", "node-b"), ("client-a", "node-a")] {
        pods::client(&tb, "east", &ns.name, pod, Some(node));
        let label = format!("ns:kubernetes.io/metadata.name={}&pod:app={pod}", ns.name);
        let id = same_id_everywhere(&tb, &label) as u32;
        wait_for(
            &format!("{pod}'s requests to west tunnelled with VNI {id}"),
            T,
            || {
                let body = pods::curl(&tb, "east", &ns.name, pod, &url)?;
                if !body.contains("hello from west/web") {
                    return Err(format!("answer {body:?}"));
                }
                let seen = vnis_from(&capture, EAST_GATEWAY);
                if seen.contains(&id) {
                    Ok(())
                } else {
                    Err(format!("VNIs from east's gateway: {seen:?}"))
                }
            },
        );
    }
    // Nothing left the east gateway with an ID no label has (other than "unknown").
    let known: Vec<u32> = tb.get_json("east", &["get", "labelidentities"])["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|li| li["spec"]["id"].as_u64().map(|i| i as u32))
        .collect();
    let seen = vnis_from(&capture, EAST_GATEWAY);
    assert!(!seen.is_empty());
    for vni in seen {
        assert!(
            vni == 0xffffff || known.contains(&vni),
            "VNI {vni:#x} is no label's ID ({known:?})"
        );
    }
}
