//! Every YAML of the user guides (tests/fixtures/guides, verbatim copies) is accepted unchanged by
//! a real API server with our CRDs, reads back with what the user wrote, and — where a version
//! pair exists — reads back through the other served version too.

use mc_integration::{Testbed, fixture};
use serde_json::Value;

/// Leader-side objects go to north, member-side ones to east (by the namespace the guide uses).
fn cluster_for(namespace: Option<&str>) -> &'static str {
    match namespace {
        Some("kube-system") | Some("default") => "east",
        _ => "north",
    }
}

/// Whether everything the user wrote (`want`) is in what the server returned (`got`).
fn contains(want: &Value, got: &Value, path: &str) -> Result<(), String> {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => w.iter().try_for_each(|(k, v)| {
            let next = format!("{path}.{k}");
            g.get(k)
                .ok_or_else(|| format!("{next} was dropped"))
                .and_then(|gv| contains(v, gv, &next))
        }),
        (Value::Array(w), Value::Array(g)) if w.len() == g.len() => w
            .iter()
            .zip(g)
            .enumerate()
            .try_for_each(|(i, (wv, gv))| contains(wv, gv, &format!("{path}[{i}]"))),
        (Value::Number(w), Value::Number(g)) if w.as_f64() == g.as_f64() => Ok(()),
        _ if want == got => Ok(()),
        _ => Err(format!("{path}: wrote {want}, read back {got}")),
    }
}

/// The fields a user writes (everything except apiVersion, kind and metadata).
fn user_fields(doc: &Value) -> Value {
    let mut doc = doc.clone();
    if let Some(o) = doc.as_object_mut() {
        o.remove("apiVersion");
        o.remove("kind");
        o.remove("metadata");
    }
    doc
}

/// The other served version of our two-version kinds, if any.
fn other_version(api_version: &str, kind: &str) -> Option<&'static str> {
    match (api_version, kind) {
        ("multicluster.crd.antrea.io/v1alpha1", "ClusterSet" | "ClusterClaim") => Some("v1alpha2"),
        ("multicluster.crd.antrea.io/v1alpha2", "ClusterSet" | "ClusterClaim") => Some("v1alpha1"),
        ("crd.antrea.io/v1alpha1", _) => Some("v1beta1"),
        ("crd.antrea.io/v1beta1", _) => Some("v1alpha1"),
        _ => None,
    }
}

/// Listings of the guides that Antrea itself refuses, with what the refusal must say: the
/// rendered guide's ACNP uses `action: Deny`, which no Antrea version accepts (Allow, Drop,
/// Reject, Pass). The listing is then applied with `Drop`, the action it means.
fn refused(file: &str) -> Option<(&'static [&'static str], (&'static str, &'static str))> {
    match file {
        "001-L325-clusternetworkpolicy.yaml" => Some((
            &[
                "spec.ingress[0].action",
                "Unsupported value: \"Deny\"",
                "supported values: \"Allow\", \"Drop\", \"Reject\", \"Pass\"",
            ],
            ("action: Deny", "action: Drop"),
        )),
        _ => None,
    }
}

#[test]
fn every_guide_yaml_applies_unchanged_and_reads_back() {
    let tb = Testbed::from_env();
    // The guides' ClusterSets name placeholder leaders and their Gateway is not elected: the
    // controllers would act on them. This test is about what the API servers accept and store.
    let _paused = mc_integration::ControllersPaused::new();
    tb.ensure_namespace("north", "antrea-multicluster");
    let dir = fixture("guides");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("fixtures")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 15, "fixtures missing: {files:?}");
    let mut checked_other_version = 0;

    for file in &files {
        let mut text = std::fs::read_to_string(file).expect("fixture");
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        if let Some((must_say, (from, to))) = refused(&name) {
            let out = tb.with_stdin("east", &["apply", "-f", "-"], &text);
            let message = String::from_utf8_lossy(&out.stderr).into_owned();
            assert!(
                !out.status.success(),
                "{name}: accepted, but Antrea refuses it"
            );
            for needle in must_say {
                assert!(
                    message.contains(needle),
                    "{name}: the refusal must say {needle:?}; it said: {message}"
                );
            }
            assert!(text.contains(from), "{name}: no {from:?} to correct");
            text = text.replace(from, to);
        }
        let docs: Vec<Value> = serde_yaml::Deserializer::from_str(&text)
            .map(|d| {
                let y: serde_yaml::Value = serde::Deserialize::deserialize(d).expect("YAML");
                serde_json::to_value(y).expect("JSON")
            })
            .filter(|d| !d.is_null())
            .collect();
        // All documents of a listing go to the cluster of its first namespaced object.
        let first_ns = docs
            .iter()
            .find_map(|d| d["metadata"]["namespace"].as_str());
        let cluster = cluster_for(first_ns);
        let default_ns = first_ns.unwrap_or("kube-system");
        let out = tb.with_stdin(cluster, &["apply", "-n", default_ns, "-f", "-"], &text);
        assert!(
            out.status.success(),
            "{name}: {cluster}'s API server refused the guide's YAML:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );

        for doc in &docs {
            let api_version = doc["apiVersion"].as_str().expect("apiVersion");
            let kind = doc["kind"].as_str().expect("kind");
            let obj_name = doc["metadata"]["name"].as_str().expect("name");
            let ns = doc["metadata"]["namespace"].as_str().unwrap_or(default_ns);
            let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
            let version = api_version.rsplit('/').next().unwrap();
            let resource = |v: &str| {
                if group.is_empty() {
                    kind.to_lowercase()
                } else {
                    format!("{}.{v}.{group}", kind.to_lowercase())
                }
            };
            let get = |v: &str| tb.get_json(cluster, &["get", &resource(v), obj_name, "-n", ns]);
            let want = user_fields(doc);
            let got = get(version);
            if let Err(e) = contains(&want, &got, kind) {
                panic!("{name}: {kind}/{obj_name} did not read back as written: {e}");
            }
            if let Some(other) = other_version(api_version, kind) {
                let got = get(other);
                assert_eq!(
                    got["apiVersion"].as_str(),
                    Some(format!("{group}/{other}").as_str())
                );
                if let Err(e) = contains(&want, &got, kind) {
                    panic!("{name}: {kind}/{obj_name} read through {other} lost data: {e}");
                }
                checked_other_version += 1;
            }
        }
        // Remove the objects: the next listing reuses the same names.
        let out = tb.with_stdin(
            cluster,
            &[
                "delete",
                "-n",
                default_ns,
                "--ignore-not-found",
                "--wait=true",
                "-f",
                "-",
            ],
            &text,
        );
        assert!(
            out.status.success(),
            "{name}: delete failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(
        checked_other_version >= 20,
        "expected the ClusterSet/ClusterClaim/ACNP listings to be read in both versions, got {checked_other_version}"
    );
}
