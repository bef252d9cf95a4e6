//! `ClusterSetJoinConfig`: what `mcctl init` and `mcctl get joinconfig` write in the leader and
//! `mcctl join -f` reads in a member (the same file as antctl's), optionally followed by the
//! member's token Secret as a second YAML document.

use serde::{Deserialize, Serialize};

pub const API_VERSION: &str = "multicluster.antrea.io/v1alpha1";
pub const KIND: &str = "ClusterSetJoinConfig";

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JoinConfig {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(rename = "clusterSetID", default)]
    pub clusterset_id: String,
    /// The joining member's own ID (to fill in).
    #[serde(
        rename = "clusterID",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub cluster_id: String,
    /// The member's namespace for its ClusterSet and Secret (default kube-system).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(rename = "leaderClusterID", default)]
    pub leader_cluster_id: String,
    #[serde(default)]
    pub leader_namespace: String,
    #[serde(rename = "leaderAPIServer", default)]
    pub leader_api_server: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub token_secret_name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub token_secret_file: String,
}

impl JoinConfig {
    /// The config file text: the fields, commented hints for the ones a member fills in, and
    /// the token Secret when there is one.
    pub fn render(&self, secret: Option<&serde_json::Value>) -> anyhow::Result<String> {
        let mut c = self.clone();
        c.api_version = API_VERSION.into();
        c.kind = KIND.into();
        let mut out = String::from(
            "# mcctl join -f <this file> --clusterid <member ID>, in the member cluster.\n",
        );
        out.push_str(&serde_yaml::to_string(&c)?);
        if c.cluster_id.is_empty() {
            out.push_str("# clusterID: <the member's cluster ID, or pass --clusterid>\n");
        }
        if c.namespace.is_empty() {
            out.push_str("# namespace: kube-system  # the member controller's namespace\n");
        }
        if c.token_secret_name.is_empty() && secret.is_none() {
            out.push_str("# tokenSecretName: <a token Secret already in the member, or>\n# tokenSecretFile: <the file mcctl create membertoken -o wrote>\n");
        }
        if let Some(s) = secret {
            out.push_str("---\n");
            out.push_str(&serde_yaml::to_string(s)?);
        }
        Ok(out)
    }

    /// Reads a config file; a Secret document in it is returned too.
    pub fn parse(text: &str) -> anyhow::Result<(Self, Option<serde_json::Value>)> {
        let mut config = None;
        let mut secret = None;
        for doc in serde_yaml::Deserializer::from_str(text) {
            let v = serde_json::Value::deserialize(doc)?;
            match v["kind"].as_str() {
                Some(KIND) => config = Some(serde_json::from_value::<JoinConfig>(v)?),
                Some("Secret") => secret = Some(v),
                Some(other) => anyhow::bail!("unexpected kind {other:?} in the join config"),
                None if v.is_null() => {}
                None => anyhow::bail!("a document without kind in the join config"),
            }
        }
        let config =
            config.ok_or_else(|| anyhow::anyhow!("no {KIND} document in the join config"))?;
        Ok((config, secret))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_then_parse() {
        let c = JoinConfig {
            clusterset_id: "set".into(),
            leader_cluster_id: "north".into(),
            leader_namespace: "antrea-multicluster".into(),
            leader_api_server: "https://198.18.0.10:6443".into(),
            ..Default::default()
        };
        let secret = serde_json::json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "t"}, "type": "Opaque", "data": {"token": "eA=="}});
        let text = c.render(Some(&secret)).unwrap();
        assert!(text.contains("# clusterID:"), "{text}");
        let (back, s) = JoinConfig::parse(&text).unwrap();
        assert_eq!(back.clusterset_id, "set");
        assert_eq!(back.leader_api_server, "https://198.18.0.10:6443");
        assert_eq!(s.unwrap()["data"]["token"], "eA==");
        assert!(JoinConfig::parse("kind: Pod\n").is_err());
        assert!(JoinConfig::parse("").is_err());
    }
}
