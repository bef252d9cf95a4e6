//! Kubernetes label selectors (`matchLabels`, `matchExpressions`) as policies carry them, read
//! from their JSON: what Strait's policy compilation matches Pods, Namespaces and label
//! identities with.

use std::collections::BTreeMap;

use serde_json::Value;

/// Labels by key.
pub type Labels = BTreeMap<String, String>;

/// Labels from `(key, value)` pairs.
pub fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// A parsed label selector. An empty one (`{}`) selects everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

impl Selector {
    /// Parses `{matchLabels: {..}, matchExpressions: [{key, operator, values}]}`; an unknown
    /// operator or a malformed entry is an error naming it.
    pub fn parse(v: &Value) -> Result<Self, String> {
        let Some(obj) = v.as_object() else {
            return Err(format!("a label selector must be an object, not {v}"));
        };
        let mut requirements = Vec::new();
        if let Some(labels) = obj.get("matchLabels") {
            let labels = labels
                .as_object()
                .ok_or_else(|| format!("matchLabels must be an object, not {labels}"))?;
            for (k, val) in labels {
                let val = val
                    .as_str()
                    .ok_or_else(|| format!("matchLabels.{k} must be a string, not {val}"))?;
                requirements.push(Requirement::In(k.clone(), vec![val.to_owned()]));
            }
        }
        for e in obj
            .get("matchExpressions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let key = e
                .get("key")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("matchExpressions entry without a key: {e}"))?
                .to_owned();
            let values: Vec<String> = e
                .get("values")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect();
            requirements.push(match e.get("operator").and_then(Value::as_str) {
                Some("In") => Requirement::In(key, values),
                Some("NotIn") => Requirement::NotIn(key, values),
                Some("Exists") => Requirement::Exists(key),
                Some("DoesNotExist") => Requirement::DoesNotExist(key),
                other => {
                    return Err(format!(
                        "matchExpressions operator {other:?} (key {key}) is not In, NotIn, Exists or DoesNotExist"
                    ));
                }
            });
        }
        Ok(Self { requirements })
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &Labels) -> bool {
        self.requirements.iter().all(|r| match r {
            Requirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
        })
    }
}

/// Read as [`Selector::parse`] reads it: a malformed selector fails the object that carries it,
/// with the reason.
impl<'de> serde::Deserialize<'de> for Selector {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        Selector::parse(&v).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn match_labels_and_expressions() {
        let s = Selector::parse(&json!({
            "matchLabels": {"app": "db"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["a", "b"]},
                {"key": "env", "operator": "NotIn", "values": ["prod"]},
                {"key": "team", "operator": "Exists"},
                {"key": "legacy", "operator": "DoesNotExist"},
            ],
        }))
        .unwrap();
        let ok = labels(&[("app", "db"), ("tier", "b"), ("team", "x")]);
        assert!(s.matches(&ok));
        let mut bad = ok.clone();
        bad.insert("env".into(), "prod".into());
        assert!(!s.matches(&bad));
        let mut bad = ok.clone();
        bad.insert("legacy".into(), "1".into());
        assert!(!s.matches(&bad));
        assert!(!s.matches(&labels(&[("app", "db"), ("tier", "c"), ("team", "x")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "a"), ("team", "x")])));
    }

    #[test]
    fn empty_selects_everything_and_bad_input_is_an_error() {
        assert!(Selector::parse(&json!({})).unwrap().matches(&Labels::new()));
        for bad in [
            json!("app=db"),
            json!({"matchLabels": {"app": 1}}),
            json!({"matchExpressions": [{"key": "a", "operator": "Equals"}]}),
            json!({"matchExpressions": [{"operator": "Exists"}]}),
        ] {
            assert!(Selector::parse(&bad).is_err(), "{bad}");
        }
    }
}
