//! `MultiClusterConfig`: the controller's config file (ConfigMap `antrea-mc-controller-config`,
//! key `controller_manager_config.yaml`). Invalid values are a startup error that says which.

use serde::{Deserialize, Serialize};

pub const CONFIGMAP_NAME: &str = "antrea-mc-controller-config";
pub const CONFIGMAP_KEY: &str = "controller_manager_config.yaml";

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GatewayIpPrecedence {
    #[default]
    Private,
    Public,
    Internal,
    External,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum EndpointIpType {
    #[default]
    ClusterIP,
    PodIP,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MultiClusterConfig {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    /// Empty: discovered from the cluster.
    #[serde(rename = "serviceCIDR", default)]
    pub service_cidr: String,
    #[serde(rename = "podCIDRs", default)]
    pub pod_cidrs: Vec<String>,
    #[serde(rename = "gatewayIPPrecedence", default)]
    pub gateway_ip_precedence: GatewayIpPrecedence,
    #[serde(rename = "endpointIPType", default)]
    pub endpoint_ip_type: EndpointIpType,
    #[serde(default)]
    pub enable_stretched_network_policy: bool,
    /// Leader: the floor on the length of the prefixes members announce (Strait's addition;
    /// absent: [`DEFAULT_MIN_ANNOUNCED_PREFIX_LENGTH`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_announced_prefix_length: Option<u8>,
    /// Leader: how many Service (and ACNP) exports one member may have; the newest beyond it
    /// are refused (Strait's addition; absent: [`DEFAULT_MAX_SERVICE_EXPORTS_PER_MEMBER`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_service_exports_per_member: Option<usize>,
    /// Leader: how many label identities one member may export (the ClusterSet's 24-bit IDs
    /// are shared; absent: [`DEFAULT_MAX_LABEL_IDENTITIES_PER_MEMBER`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_label_identities_per_member: Option<usize>,
    #[serde(default)]
    pub health: HealthConfig,
    #[serde(default)]
    pub webhook: WebhookConfig,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookConfig {
    /// The port of the admission webhooks (HTTPS; the Service antrea-mc-webhook-service maps
    /// 443 to it).
    #[serde(default = "default_webhook_port")]
    pub port: u16,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        Self {
            port: default_webhook_port(),
        }
    }
}

fn default_webhook_port() -> u16 {
    9443
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthConfig {
    /// Where `/healthz`, `/readyz` and `/metrics` are served.
    #[serde(default = "default_health_addr")]
    pub health_probe_bind_address: String,
}

impl Default for HealthConfig {
    fn default() -> Self {
        Self {
            health_probe_bind_address: default_health_addr(),
        }
    }
}

fn default_health_addr() -> String {
    ":8080".into()
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{CONFIGMAP_KEY}: {0}")]
    Yaml(#[from] serde_yaml::Error),
    #[error("{CONFIGMAP_KEY}: kind is {0:?}, expected MultiClusterConfig")]
    Kind(String),
    #[error("{CONFIGMAP_KEY}: {field} {value:?} is not an IPv4 CIDR (like 10.96.0.0/12)")]
    Cidr { field: &'static str, value: String },
    #[error("{CONFIGMAP_KEY}: minAnnouncedPrefixLength {0} is not a prefix length (1 to 32)")]
    PrefixLength(u8),
}

/// Nothing wider than a /8 is a cluster's Service or Pod CIDR.
pub const DEFAULT_MIN_ANNOUNCED_PREFIX_LENGTH: u8 = 8;
/// Twice what the leader was measured with (1000 Services per member at 500 members).
pub const DEFAULT_MAX_SERVICE_EXPORTS_PER_MEMBER: usize = 10_000;
/// 500 members at this quota use 10 M of the 16.7 M label IDs.
pub const DEFAULT_MAX_LABEL_IDENTITIES_PER_MEMBER: usize = 20_000;

impl MultiClusterConfig {
    /// `maxServiceExportsPerMember`, or its default.
    pub fn max_service_exports_per_member(&self) -> usize {
        self.max_service_exports_per_member
            .unwrap_or(DEFAULT_MAX_SERVICE_EXPORTS_PER_MEMBER)
    }

    /// `maxLabelIdentitiesPerMember`, or its default.
    pub fn max_label_identities_per_member(&self) -> usize {
        self.max_label_identities_per_member
            .unwrap_or(DEFAULT_MAX_LABEL_IDENTITIES_PER_MEMBER)
    }

    /// `minAnnouncedPrefixLength`, or its default.
    pub fn min_announced_prefix_length(&self) -> u8 {
        self.min_announced_prefix_length
            .unwrap_or(DEFAULT_MIN_ANNOUNCED_PREFIX_LENGTH)
    }

    /// Parses and checks the file. Unknown `gatewayIPPrecedence` or `endpointIPType` values are
    /// refused by the parser with the list of accepted ones.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let mut config: MultiClusterConfig = serde_yaml::from_str(text)?;
        // The shipped default is `podCIDRs: [""]`: an empty entry means "none".
        config.pod_cidrs.retain(|c| !c.is_empty());
        if !config.kind.is_empty() && config.kind != "MultiClusterConfig" {
            return Err(ConfigError::Kind(config.kind));
        }
        if !config.service_cidr.is_empty() && !is_ipv4_cidr(&config.service_cidr) {
            return Err(ConfigError::Cidr {
                field: "serviceCIDR",
                value: config.service_cidr,
            });
        }
        if let Some(len) = config
            .min_announced_prefix_length
            .filter(|l| !(1..=32).contains(l))
        {
            return Err(ConfigError::PrefixLength(len));
        }
        if let Some(bad) = config.pod_cidrs.iter().find(|c| !is_ipv4_cidr(c)) {
            return Err(ConfigError::Cidr {
                field: "podCIDRs",
                value: bad.clone(),
            });
        }
        Ok(config)
    }
}

fn is_ipv4_cidr(s: &str) -> bool {
    crate::net::Prefix::parse(s).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_defaults_parse() {
        let c = MultiClusterConfig::parse(
            "apiVersion: multicluster.crd.antrea.io/v1alpha1\nkind: MultiClusterConfig\nserviceCIDR: \"\"\npodCIDRs:\n  - \"\"\ngatewayIPPrecedence: \"private\"\nendpointIPType: \"ClusterIP\"\nenableStretchedNetworkPolicy: false\n",
        );
        let c = c.unwrap();
        assert!(c.pod_cidrs.is_empty() && c.service_cidr.is_empty());
        assert_eq!(c.gateway_ip_precedence, GatewayIpPrecedence::Private);
        let c = MultiClusterConfig::parse(
            "kind: MultiClusterConfig\nserviceCIDR: 10.96.0.0/12\npodCIDRs: [10.244.0.0/16]\ngatewayIPPrecedence: public\nendpointIPType: PodIP\n",
        )
        .unwrap();
        assert_eq!(c.gateway_ip_precedence, GatewayIpPrecedence::Public);
        assert_eq!(c.endpoint_ip_type, EndpointIpType::PodIP);
        assert_eq!(c.pod_cidrs, ["10.244.0.0/16"]);
    }

    #[test]
    fn bad_values_say_what_is_wrong() {
        let e = MultiClusterConfig::parse("gatewayIPPrecedence: nearest\n").unwrap_err();
        assert!(e.to_string().contains("nearest"), "{e}");
        let e = MultiClusterConfig::parse("endpointIPType: NodeIP\n").unwrap_err();
        assert!(e.to_string().contains("NodeIP"), "{e}");
        let e = MultiClusterConfig::parse("serviceCIDR: 10.96.0.0/33\n").unwrap_err();
        assert!(e.to_string().contains("serviceCIDR"), "{e}");
    }
}
