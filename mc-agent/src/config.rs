//! The agent's config file: the `multicluster` section of antrea-agent's config (the keys the
//! guides use) plus Strait's own keys in the same section. Other top-level sections (such as
//! antrea-agent's `featureGates`) are ignored, so an existing antrea-agent.conf can be reused.

use std::path::PathBuf;

use mc_common::{DEFAULT_PIN_ROOT, dataplane::DEFAULT_TUNNEL_PORT};
use serde::Deserialize;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("the agent config is not valid YAML: {0}")]
    Yaml(#[from] serde_yaml::Error),
    #[error("multicluster.{key}: {message}")]
    Invalid { key: &'static str, message: String },
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
struct File {
    #[serde(default)]
    multicluster: Multicluster,
}

/// The `multicluster` section.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Multicluster {
    /// Program the cross-cluster paths on this Node.
    #[serde(default)]
    pub enable_gateway: bool,
    /// Also route remote Pod CIDRs (not only remote Service CIDRs).
    #[serde(default)]
    pub enable_pod_to_pod_connectivity: bool,
    /// Label identities in the VNI: the agent watches its Node's Pods, the Namespaces and the
    /// LabelIdentities and tunnels each Pod's packets with its label's ID (needs the gateway).
    #[serde(default)]
    pub enable_stretched_network_policy: bool,
    /// Namespace of the member controller (Gateway, ClusterInfoImports); empty: the agent's.
    #[serde(default)]
    pub namespace: String,
    /// `none` (the default) or `wireGuard`: traffic between gateways goes through WireGuard
    /// (antrea-agent's setting; Geneve runs inside it, Node-to-gateway stays Geneve).
    #[serde(default)]
    pub traffic_encryption_mode: Option<String>,
    /// antrea-agent's `wireGuard` section: the port (51821, Antrea Multi-cluster's default).
    #[serde(default)]
    pub wire_guard: WireGuard,
    /// Strait: the interface to attach to; empty: the one holding the Node's InternalIP.
    #[serde(default)]
    pub uplink: String,
    /// Strait: Geneve UDP port between Nodes and gateways.
    #[serde(default = "default_tunnel_port")]
    pub tunnel_port: u16,
    /// Strait: where maps and links are pinned.
    #[serde(default = "default_pin_path")]
    pub pin_path: PathBuf,
    /// Strait's own: how the programs attach to the uplink, `tcx` (Linux 6.6 and later),
    /// `tc` (a legacy `clsact` filter) or empty / `auto` (TCX where the kernel has it).
    #[serde(default, rename = "tcAttach")]
    pub tc_attach: String,
    /// Strait's own: the largest IPv4 packet the path between Nodes and gateways carries (0:
    /// the uplink's MTU). Set it where that path is narrower than the uplink (an AWS uplink of
    /// 9001 with 1500 between VPCs): MSS clamping and fragmentation-needed follow it.
    #[serde(default, rename = "tunnelMTU")]
    pub tunnel_mtu: u32,
    /// Strait's own: which WireGuard the gateway runs with `trafficEncryptionMode: wireGuard`:
    /// empty / `auto` (the kernel's where the Node has it, else boringtun in userspace),
    /// `kernel` or `userspace`.
    #[serde(default)]
    pub wire_guard_implementation: String,
}

/// `multicluster.wireGuard`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WireGuard {
    /// WireGuard's UDP port on the gateways (the same in every member).
    #[serde(default = "default_wireguard_port")]
    pub port: u16,
}

impl Default for WireGuard {
    fn default() -> Self {
        Self {
            port: default_wireguard_port(),
        }
    }
}

fn default_wireguard_port() -> u16 {
    crate::wireguard::DEFAULT_PORT
}

fn default_tunnel_port() -> u16 {
    DEFAULT_TUNNEL_PORT
}

fn default_pin_path() -> PathBuf {
    PathBuf::from(DEFAULT_PIN_ROOT)
}

impl Default for Multicluster {
    fn default() -> Self {
        Self {
            enable_gateway: false,
            enable_pod_to_pod_connectivity: false,
            enable_stretched_network_policy: false,
            namespace: String::new(),
            traffic_encryption_mode: None,
            wire_guard: WireGuard::default(),
            uplink: String::new(),
            tunnel_port: DEFAULT_TUNNEL_PORT,
            pin_path: default_pin_path(),
            tc_attach: String::new(),
            tunnel_mtu: 0,
            wire_guard_implementation: String::new(),
        }
    }
}

impl Multicluster {
    /// `trafficEncryptionMode: wireGuard` (any case, as antrea-agent reads it).
    pub fn encryption(&self) -> bool {
        self.traffic_encryption_mode
            .as_deref()
            .is_some_and(|m| m.eq_ignore_ascii_case("wireGuard"))
    }

    /// `wireGuardImplementation`, checked when the file was parsed.
    pub fn wireguard_implementation(&self) -> crate::wireguard::Implementation {
        crate::wireguard::Implementation::parse(&self.wire_guard_implementation).unwrap_or_default()
    }

    /// Parses and validates the config file's text.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let file: File = if text.trim().is_empty() {
            File::default()
        } else {
            serde_yaml::from_str(text)?
        };
        let mc = file.multicluster;
        if mc.tunnel_port == 0 {
            return Err(ConfigError::Invalid {
                key: "tunnelPort",
                message: "must be a UDP port (1-65535)".into(),
            });
        }
        if mc.enable_stretched_network_policy && !mc.enable_gateway {
            return Err(ConfigError::Invalid {
                key: "enableStretchedNetworkPolicy",
                message: "requires enableGateway: true".into(),
            });
        }
        if let Some(mode) = mc.traffic_encryption_mode.as_deref()
            && !mode.is_empty()
            && !mode.eq_ignore_ascii_case("none")
            && !mode.eq_ignore_ascii_case("wireGuard")
        {
            return Err(ConfigError::Invalid {
                key: "trafficEncryptionMode",
                message: format!("{mode:?} is not a mode (\"none\" or \"wireGuard\")"),
            });
        }
        if mc.wire_guard.port == 0 || mc.wire_guard.port == mc.tunnel_port {
            return Err(ConfigError::Invalid {
                key: "wireGuard.port",
                message: format!(
                    "{} must be a UDP port (1-65535) other than the tunnel's",
                    mc.wire_guard.port
                ),
            });
        }
        if let Err(message) = crate::dataplane::AttachMode::parse(&mc.tc_attach) {
            return Err(ConfigError::Invalid {
                key: "tcAttach",
                message,
            });
        }
        if let Err(message) = crate::wireguard::Implementation::parse(&mc.wire_guard_implementation)
        {
            return Err(ConfigError::Invalid {
                key: "wireGuardImplementation",
                message,
            });
        }
        if mc.tunnel_mtu != 0 && !(576..=65535).contains(&mc.tunnel_mtu) {
            return Err(ConfigError::Invalid {
                key: "tunnelMTU",
                message: format!(
                    "{} is not an IPv4 MTU (576-65535; 0: the uplink's)",
                    mc.tunnel_mtu
                ),
            });
        }
        if !mc.pin_path.is_absolute() {
            return Err(ConfigError::Invalid {
                key: "pinPath",
                message: format!(
                    "{} must be an absolute path on bpffs",
                    mc.pin_path.display()
                ),
            });
        }
        Ok(mc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deployed_config_parses() {
        let text = include_str!("../../deploy/agent/configmap.yaml");
        // The ConfigMap embeds the file under `strait-agent.conf: |`.
        let body: String = text
            .lines()
            .skip_while(|l| !l.contains("strait-agent.conf: |"))
            .skip(1)
            .map(|l| l.strip_prefix("    ").unwrap_or(l))
            .collect::<Vec<_>>()
            .join("\n");
        let mc = Multicluster::parse(&body).expect("deployed config");
        assert!(mc.enable_gateway);
        assert_eq!(mc.tunnel_port, 6081);
        assert_eq!(mc.pin_path, PathBuf::from("/sys/fs/bpf/mc/v1"));
    }

    #[test]
    fn an_antrea_agent_conf_is_accepted_and_defaults_apply() {
        let mc = Multicluster::parse(
            "featureGates:\n  Multicluster: true\nmulticluster:\n  enableGateway: true\n  namespace: \"\"\n",
        )
        .unwrap();
        assert!(mc.enable_gateway && !mc.enable_pod_to_pod_connectivity);
        assert_eq!(mc.tunnel_port, 6081);
        assert_eq!(Multicluster::parse("").unwrap(), Multicluster::default());
    }

    /// Strait's own keys for the networks clusters run: how to attach, the path's MTU.
    #[test]
    fn tc_attach_and_tunnel_mtu_parse() {
        let mc = Multicluster::parse("multicluster:\n  tcAttach: tc\n  tunnelMTU: 1400\n").unwrap();
        assert_eq!(
            crate::dataplane::AttachMode::parse(&mc.tc_attach),
            Ok(Some(crate::dataplane::AttachMode::Tc))
        );
        assert_eq!(mc.tunnel_mtu, 1400);
        let mc = Multicluster::parse("multicluster:\n  enableGateway: true\n").unwrap();
        assert_eq!(crate::dataplane::AttachMode::parse(&mc.tc_attach), Ok(None));
        assert_eq!(mc.tunnel_mtu, 0);
    }

    /// antrea-agent's shape (docs of Antrea Multi-cluster): the mode and the port.
    #[test]
    fn wireguard_as_antrea_agent_conf_says_it() {
        let mc = Multicluster::parse(
            "multicluster:\n  enableGateway: true\n  trafficEncryptionMode: wireGuard\n  wireGuard:\n    port: 51821\n",
        )
        .unwrap();
        assert!(mc.encryption());
        assert_eq!(mc.wire_guard.port, 51821);
        let mc =
            Multicluster::parse("multicluster:\n  trafficEncryptionMode: wireguard\n").unwrap();
        assert!(mc.encryption() && mc.wire_guard.port == 51821);
        let mc = Multicluster::parse("multicluster:\n  trafficEncryptionMode: none\n").unwrap();
        assert!(!mc.encryption());
        assert!(!Multicluster::default().encryption());
        use crate::wireguard::Implementation;
        assert_eq!(mc.wireguard_implementation(), Implementation::Auto);
        let mc =
            Multicluster::parse("multicluster:\n  wireGuardImplementation: Userspace\n").unwrap();
        assert_eq!(mc.wireguard_implementation(), Implementation::Userspace);
        let mc = Multicluster::parse("multicluster:\n  wireGuardImplementation: kernel\n").unwrap();
        assert_eq!(mc.wireguard_implementation(), Implementation::Kernel);
    }

    #[test]
    fn bad_values_name_the_key() {
        for (text, key) in [
            (
                "multicluster:\n  tunnelPort: 0\n",
                "multicluster.tunnelPort",
            ),
            (
                "multicluster:\n  enableStretchedNetworkPolicy: true\n",
                "enableStretchedNetworkPolicy",
            ),
            (
                "multicluster:\n  enableGateway: true\n  trafficEncryptionMode: ipsec\n",
                "trafficEncryptionMode",
            ),
            (
                "multicluster:\n  trafficEncryptionMode: wireGuard\n  wireGuard:\n    port: 6081\n",
                "multicluster.wireGuard.port",
            ),
            ("multicluster:\n  pinPath: relative/dir\n", "pinPath"),
            (
                "multicluster:\n  wireGuardImplementation: wireguard-go\n",
                "multicluster.wireGuardImplementation: \"wireguard-go\" is not",
            ),
            (
                "multicluster:\n  tcAttach: clsact\n",
                "multicluster.tcAttach",
            ),
            (
                "multicluster:\n  tunnelMTU: 100\n",
                "multicluster.tunnelMTU",
            ),
            ("multicluster:\n  enableGatway: true\n", "enableGatway"),
        ] {
            let err = Multicluster::parse(text).unwrap_err().to_string();
            assert!(err.contains(key), "{text:?} -> {err}");
        }
    }
}
