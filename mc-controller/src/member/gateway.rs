//! Gateway election as Antrea elects, without I/O. Candidates are Ready Nodes annotated
//! `multicluster.antrea.io/gateway` whose addresses are valid. The active Gateway stays while its
//! Node remains a valid candidate; otherwise the candidate with the smallest name takes over, so
//! every controller (and every restart) picks the same Node.

use std::net::IpAddr;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt as _;
use mc_api::{
    config::GatewayIpPrecedence,
    gateway::{Gateway, GatewayFields},
    names::annotations,
};

use mc_kube::managed_labels;

/// The Node's first address of `kind` that is an IP address; `Err` says what it has instead.
fn address(node: &Node, kind: &str) -> Result<String, String> {
    let of_kind: Vec<&str> = node
        .status
        .iter()
        .flat_map(|s| s.addresses.iter().flatten())
        .filter(|a| a.type_ == kind)
        .map(|a| a.address.as_str())
        .collect();
    match of_kind.iter().find(|a| a.parse::<IpAddr>().is_ok()) {
        Some(ip) => Ok((*ip).to_owned()),
        None if of_kind.is_empty() => {
            Err(format!("Node {} has no {kind} address", node.name_any()))
        }
        None => Err(format!(
            "Node {}: no {kind} address is an IP address ({})",
            node.name_any(),
            of_kind.join(", ")
        )),
    }
}

fn ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The Gateway a candidate Node would get, or why it cannot be one.
pub fn gateway_fields(
    node: &Node,
    precedence: GatewayIpPrecedence,
    service_cidr: &str,
) -> Result<GatewayFields, String> {
    let name = node.name_any();
    let internal = address(node, "InternalIP")?;
    let gateway = match node.annotations().get(annotations::GATEWAY_IP) {
        Some(ip) if ip.parse::<IpAddr>().is_ok() => ip.clone(),
        Some(ip) => {
            return Err(format!(
                "Node {name}: annotation {} is {ip:?}, not an IP address",
                annotations::GATEWAY_IP
            ));
        }
        None => match precedence {
            GatewayIpPrecedence::Private | GatewayIpPrecedence::Internal => internal.clone(),
            GatewayIpPrecedence::Public | GatewayIpPrecedence::External => {
                address(node, "ExternalIP")
                    .map_err(|e| format!("{e}, and gatewayIPPrecedence is {precedence:?}"))?
            }
        },
    };
    Ok(GatewayFields {
        gateway_ip: Some(gateway),
        internal_ip: Some(internal),
        service_cidr: Some(service_cidr.to_owned()),
        wire_guard: None,
    })
}

/// The elected Gateway (None: no candidate), plus why candidates were passed over.
pub fn elect(
    nodes: &[&Node],
    current: Option<&str>,
    precedence: GatewayIpPrecedence,
    service_cidr: &str,
) -> (Option<Gateway>, Vec<String>) {
    let mut problems = Vec::new();
    let mut valid: Vec<(String, GatewayFields)> = Vec::new();
    for node in nodes {
        if !node.annotations().contains_key(annotations::GATEWAY) {
            continue;
        }
        if node.metadata.deletion_timestamp.is_some() || !ready(node) {
            problems.push(format!(
                "gateway candidate {} is not Ready",
                node.name_any()
            ));
            continue;
        }
        match gateway_fields(node, precedence, service_cidr) {
            Ok(f) => valid.push((node.name_any(), f)),
            Err(e) => problems.push(e),
        }
    }
    valid.sort_by(|a, b| a.0.cmp(&b.0));
    let chosen = valid
        .iter()
        .find(|(n, _)| Some(n.as_str()) == current)
        .or(valid.first())
        .map(|(name, fields)| {
            let mut gw = Gateway::new(name, fields.clone());
            gw.metadata.labels = Some(managed_labels());
            gw
        });
    (chosen, problems)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeCondition, NodeStatus};
    use kube::ResourceExt as _;
    use mc_api::{config::GatewayIpPrecedence, gateway::Gateway, names::annotations};

    use super::{elect, gateway_fields};

    fn node(name: &str, ip: &str, candidate: bool, is_ready: bool) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some(name.into());
        if candidate {
            n.metadata.annotations =
                Some([(annotations::GATEWAY.to_owned(), "true".to_owned())].into());
        }
        n.status = Some(NodeStatus {
            addresses: Some(vec![
                NodeAddress {
                    type_: "InternalIP".into(),
                    address: ip.into(),
                },
                NodeAddress {
                    type_: "ExternalIP".into(),
                    address: "203.0.113.9".into(),
                },
            ]),
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: if is_ready { "True" } else { "False" }.into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        n
    }

    fn name(g: &(Option<Gateway>, Vec<String>)) -> Option<String> {
        g.0.as_ref().map(|g| g.name_any())
    }

    #[test]
    fn election_is_sticky_and_deterministic() {
        let a = node("node-a", "198.18.1.2", true, true);
        let b = node("node-b", "198.18.1.3", true, true);
        let c = node("node-c", "198.18.1.4", false, true);
        let p = GatewayIpPrecedence::Private;
        assert_eq!(
            name(&elect(&[&b, &a, &c], None, p, "10.97.0.0/16")).as_deref(),
            Some("node-a")
        );
        assert_eq!(
            name(&elect(&[&b, &a], Some("node-b"), p, "")).as_deref(),
            Some("node-b")
        );
        // The active one turns NotReady: the other takes over.
        let b_down = node("node-b", "198.18.1.3", true, false);
        let r = elect(&[&b_down, &a], Some("node-b"), p, "");
        assert_eq!(name(&r).as_deref(), Some("node-a"));
        assert!(r.1[0].contains("not Ready"));
        // Nobody annotated: no Gateway.
        assert_eq!(name(&elect(&[&c], None, p, "")), None);
    }

    #[test]
    fn addresses_follow_precedence_and_annotation() {
        let mut a = node("node-a", "198.18.1.2", true, true);
        let f = gateway_fields(&a, GatewayIpPrecedence::Public, "10.97.0.0/16").unwrap();
        assert_eq!(f.gateway_ip.as_deref(), Some("203.0.113.9"));
        assert_eq!(f.internal_ip.as_deref(), Some("198.18.1.2"));
        a.annotations_mut()
            .insert(annotations::GATEWAY_IP.into(), "198.19.0.5".into());
        let f = gateway_fields(&a, GatewayIpPrecedence::Private, "").unwrap();
        assert_eq!(f.gateway_ip.as_deref(), Some("198.19.0.5"));
        a.annotations_mut()
            .insert(annotations::GATEWAY_IP.into(), "not-an-ip".into());
        let r = elect(&[&a], None, GatewayIpPrecedence::Private, "");
        assert!(r.0.is_none());
        assert!(r.1[0].contains("not-an-ip"));
    }
}
