//! What the maps should hold, computed from what the API says (docs/design.md §4), free of I/O: the
//! local Gateway decides this Node's role, every ClusterInfoImport becomes remote prefixes and a
//! remote gateway peer, the cluster's Nodes become local peers on the gateway. Bad entries (an
//! unparsable address, a CIDR that overlaps one already taken) are skipped with a reason that
//! the agent logs and reports; they never reach the maps. With stretched NetworkPolicy on, this
//! Node's Pods get the IDs of their labels (the LabelIdentities), for the VNI.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::Ipv4Addr,
};

pub use mc_api::net::Prefix;

// Defined in `pods` (policy.rs reads it too, without importing this module); this path stays
// the one the integration tests and xtask use.
pub use crate::pods::PodObject;

use mc_api::labelidentity::{MAX_ID, normalized_label};
use mc_common::dataplane::{
    CONFIG_MASQ_IDS, CONFIG_POLICY_EGRESS, CONFIG_POLICY_INGRESS, CONFIG_ROUTED_VIA_GATEWAY,
    CONFIG_STRETCHED_POLICY, CONFIG_UPLINK_PEER, CONFIG_WIREGUARD, DEFAULT_TUNNEL_PORT,
    EXPOSED_POD_CIDR, Exposed, ExposedKey, LocalConfig, MAX_EXPOSED, MAX_POLICY_ENTRIES,
    PEER_LOCAL_NODE, PEER_REMOTE_GATEWAY, Peer, PodIdentity, ROLE_GATEWAY, ROLE_NODE,
    ROUTE_NO_WIREGUARD_PEER, RemoteRoute, SenderId, SenderIdKey, WireGuardConfig,
};

use crate::wireguard::WireGuardPeer;

/// A Gateway object of the local cluster, as read from the API.
#[derive(Clone, Debug, Default)]
pub struct GatewayObject {
    /// Object name = the gateway Node's name.
    pub name: String,
    pub gateway_ip: Option<String>,
    pub internal_ip: Option<String>,
    pub service_cidr: Option<String>,
}

/// A ClusterInfoImport, as read from the API.
#[derive(Clone, Debug, Default)]
pub struct ClusterInfoObject {
    /// Object name (`<clusterID>-clusterinfo`), for messages.
    pub name: String,
    pub cluster_id: Option<String>,
    pub service_cidr: Option<String>,
    pub gateway_ips: Vec<String>,
    pub pod_cidrs: Vec<String>,
    /// `wireGuard.publicKey` (base64): its gateway's WireGuard key, when it encrypts.
    pub wireguard_public_key: Option<String>,
}

/// Everything the desired state depends on.
#[derive(Clone, Debug, Default)]
pub struct Inputs {
    pub node_name: String,
    pub node_ip: Option<Ipv4Addr>,
    pub gateways: Vec<GatewayObject>,
    pub cluster_infos: Vec<ClusterInfoObject>,
    /// InternalIPs of the cluster's Nodes.
    pub local_nodes: Vec<Ipv4Addr>,
    /// Local Pod CIDRs (remote prefixes must not overlap them).
    pub local_pod_cidrs: Vec<String>,
    /// The subnets of the uplink's addresses (remote prefixes must not overlap them: the
    /// Node would lose its own link).
    pub uplink_subnets: Vec<Prefix>,
    pub pod_to_pod: bool,
    pub tunnel_port: u16,
    pub mtu: u32,
    /// The uplink is a veth whose other end is in another network namespace
    /// ([`CONFIG_UPLINK_PEER`] on the gateway).
    pub uplink_peer: bool,
    /// This Node's Pods (none without stretched NetworkPolicy).
    pub pods: Vec<PodObject>,
    /// Each Namespace's labels, by name.
    pub namespace_labels: BTreeMap<String, BTreeMap<String, String>>,
    /// The LabelIdentities: normalized label -> ID.
    pub label_ids: BTreeMap<String, u32>,
    /// Stretched NetworkPolicy is on in the agent config: the gateway records remote flows'
    /// identities and decides ClusterSet-scoped ingress rules.
    pub stretched_policy: bool,
    /// Every Pod of the cluster (stretched NetworkPolicy only): the gateway decides for all.
    pub cluster_pods: Vec<PodObject>,
    /// The Antrea-native policies of the cluster (stretched NetworkPolicy only).
    pub policies: Vec<crate::policy::PolicyObject>,
    /// The Tiers (name, priority) besides Antrea's default ones.
    pub tiers: Vec<(String, i32)>,
    /// The imported multi-cluster Services (namespace, name) and their ServiceImports' IPs.
    pub imported_services: BTreeMap<(String, String), Vec<Ipv4Addr>>,
    /// kube-proxy's mode on this Node, when it said (stretched NetworkPolicy only).
    pub proxy_mode: Option<crate::kube_proxy::ProxyMode>,
    /// How many entries the ingress policy map holds (`None`: its compiled-in size).
    pub policy_capacity: Option<usize>,
    /// This cluster's exported Services, on a Node that may be the gateway once their watches
    /// have listed them; `None`: not known here (the exposure map is left as it is).
    pub exported: Option<Vec<crate::exposure::ExportedService>>,
    /// `trafficEncryptionMode: wireGuard`: traffic between gateways goes through WireGuard.
    pub encryption: bool,
    /// WireGuard's UDP port (the same on every gateway of the ClusterSet, as in Antrea).
    pub wireguard_port: u16,
    /// The gateway's WireGuard device as the agent found it (its `port` is not read here);
    /// `None`: not up.
    pub wireguard_device: Option<WireGuardConfig>,
}

/// A remote cluster as it ended up in the maps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteCluster {
    pub index: u32,
    pub cluster_id: String,
    pub gateway_ip: Ipv4Addr,
    pub prefixes: Vec<Prefix>,
}

/// Strait's kernel routes to the remote prefixes as a sync that succeeded left them: their next
/// hop is the kernel's toward `toward`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Routed {
    pub toward: Ipv4Addr,
    pub prefixes: BTreeSet<Prefix>,
}

/// The maps' desired contents, and what was left out and why.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Desired {
    pub config: LocalConfig,
    pub routes: BTreeMap<Prefix, RemoteRoute>,
    pub peers: BTreeMap<Ipv4Addr, Peer>,
    pub clusters: Vec<RemoteCluster>,
    /// This Node's Pod addresses with a label identity.
    pub pod_ids: BTreeMap<Ipv4Addr, PodIdentity>,
    /// The gateway, with stretched policy: (source address, label ID) -> the Node that may
    /// claim it in its VNI.
    pub sender_ids: BTreeMap<SenderIdKey, SenderId>,
    /// The gateway's compiled ClusterSet-scoped ingress rules (empty elsewhere).
    pub policy: crate::policy::Compiled,
    /// What remote clusters may open flows to (`mc_exposed`); `None`: leave the map as it is.
    pub exposed: Option<BTreeMap<ExposedKey, Exposed>>,
    /// The Pod CIDRs remote clusters may reach (`mc_exposed_prefixes`; Pod-to-Pod only).
    pub exposed_prefixes: BTreeMap<Prefix, Exposed>,
    /// The gateway with encryption on: `mc_wireguard` (all zero elsewhere).
    pub wireguard: WireGuardConfig,
    /// The gateway with encryption on: the remote gateways as WireGuard peers.
    pub wireguard_peers: Vec<WireGuardPeer>,
    /// The gateway: remote clusters that disagree on the encryption mode (without a usable key
    /// while this one encrypts, with one while it does not), by cluster ID.
    pub encryption_mismatch: Vec<String>,
    /// Human-readable reasons for every skipped object or entry.
    pub skipped: Vec<String>,
    /// Why the Node cannot carry cross-cluster traffic at all (no usable Gateway, unknown Node
    /// IP); `None` when it can.
    pub not_ready: Option<String>,
}

impl Desired {
    /// Where the kernel routes to the remote prefixes must lead: a regular Node's toward its
    /// gateway (the tunnel's next hop), a gateway's toward the remote gateways.
    pub fn routes_toward(&self) -> Option<Ipv4Addr> {
        if self.config.role == ROLE_NODE {
            Some(Ipv4Addr::from(self.config.gateway_internal_ip))
        } else {
            self.clusters.first().map(|c| c.gateway_ip)
        }
    }

    /// [`CONFIG_ROUTED_VIA_GATEWAY`] for a regular Node when the kernel routes every remote
    /// prefix of the maps toward its current gateway (`routed`: what was last installed), else 0.
    /// A prefix not yet routed (a new cluster) would otherwise leave by some other route with the
    /// kernel's Ethernet header for that route, tunnelled to the gateway's address.
    pub fn routed_flag(&self, routed: Option<&Routed>) -> u32 {
        let gateway = Ipv4Addr::from(self.config.gateway_internal_ip);
        if self.config.role == ROLE_NODE
            && routed.is_some_and(|r| {
                r.toward == gateway && self.routes.keys().all(|p| r.prefixes.contains(p))
            })
        {
            CONFIG_ROUTED_VIA_GATEWAY
        } else {
            0
        }
    }
    /// Whether the policy program has anything to decide on this Node (on the gateway, a Pod of
    /// the cluster that a ClusterSet-scoped ingress rule covers; on any Node, an egress
    /// `toServices` rule for one of its Pods): only then is it linked at PREROUTING.
    pub fn decides_policy(&self) -> bool {
        self.config.flags & (CONFIG_POLICY_EGRESS | CONFIG_POLICY_INGRESS) != 0
    }
}

fn parse_ip(what: &str, object: &str, value: Option<&str>) -> Result<Ipv4Addr, String> {
    let value = value.ok_or_else(|| format!("{object}: {what} is empty"))?;
    value
        .parse()
        .map_err(|_| format!("{object}: {what} {value:?} is not an IPv4 address"))
}

/// The label identity of each address of this Node's Pods: the ID of the LabelIdentity whose
/// label is the Pod's normalized label. An address gets an ID only if every live Pod that claims
/// it has that same ID: a Pod without one (its label has no ID yet, its Namespace is not known
/// yet) leaves its address out, so its packets say "unknown" (never an old Pod's ID that still
/// holds the address); two IDs for one address are reported.
fn pod_identities(inputs: &Inputs, out: &mut Desired) {
    // Per address: the ID every claim agrees on so far (None: some claim has none or differs),
    // and who claimed it first.
    let mut claims: BTreeMap<Ipv4Addr, (Option<u32>, &str)> = BTreeMap::new();
    for pod in &inputs.pods {
        if pod.host_network || pod.finished {
            continue;
        }
        let id = match identity_of(inputs, pod) {
            Ok(id) => id,
            Err(e) => {
                out.skipped.push(e);
                None
            }
        };
        for ip in pod.ips.iter().filter_map(|ip| ip.parse::<Ipv4Addr>().ok()) {
            match claims.get_mut(&ip) {
                None => {
                    claims.insert(ip, (id, &pod.name));
                }
                Some((agreed, first)) => {
                    if let (Some(a), Some(b)) = (*agreed, id)
                        && a != b
                    {
                        out.skipped.push(format!(
                            "Pod address {ip} is claimed by {first} and {}/{} with different label IDs: its packets carry no identity",
                            pod.namespace, pod.name
                        ));
                    }
                    if *agreed != id {
                        *agreed = None;
                    }
                }
            }
        }
    }
    out.pod_ids = claims
        .into_iter()
        .filter_map(|(ip, (id, _))| Some((ip, PodIdentity { id: id? })))
        .collect();
}

/// The ID of the LabelIdentity of a Pod's normalized label, if there is one; `Err` for an ID
/// out of range.
fn identity_of(inputs: &Inputs, pod: &PodObject) -> Result<Option<u32>, String> {
    let id = inputs
        .namespace_labels
        .get(&pod.namespace)
        .and_then(|ns| inputs.label_ids.get(&normalized_label(ns, &pod.labels)))
        .copied();
    match id {
        Some(bad) if !(1..=MAX_ID).contains(&bad) => Err(format!(
            "Pod {}/{}: LabelIdentity ID {bad} is out of range",
            pod.namespace, pod.name
        )),
        id => Ok(id),
    }
}

/// The gateway's check of the VNIs local Nodes send (`mc_sender_ids`): each Pod of the cluster
/// with an ID may claim it from its own address and, for flows the CNI masqueraded, from its
/// Node's. Host-network and finished Pods claim nothing (a host-network Pod's packets carry no
/// identity); an address two Pods claim with different IDs is left out (its packets go on as
/// "unknown"). Out-of-range IDs are reported by [`pod_identities`].
fn sender_identities(inputs: &Inputs) -> BTreeMap<SenderIdKey, SenderId> {
    let mut out = BTreeMap::new();
    // Per Pod address: the (ID, Node) every claim agrees on (None: the claims differ).
    let mut claims: BTreeMap<Ipv4Addr, Option<(u32, Ipv4Addr)>> = BTreeMap::new();
    for pod in &inputs.cluster_pods {
        if pod.host_network || pod.finished {
            continue;
        }
        let id = identity_of(inputs, pod).ok().flatten();
        let node = pod
            .host_ip
            .as_deref()
            .and_then(|h| h.parse::<Ipv4Addr>().ok());
        let claim = id.zip(node);
        if let Some((id, node)) = claim {
            let key = SenderIdKey {
                addr: node.octets(),
                id,
            };
            out.insert(key, SenderId { node: key.addr });
        }
        // A Pod without an ID (or Node) claims its address too: nothing certain is left.
        for ip in pod.ips.iter().filter_map(|ip| ip.parse::<Ipv4Addr>().ok()) {
            claims
                .entry(ip)
                .and_modify(|c| {
                    if *c != claim {
                        *c = None;
                    }
                })
                .or_insert(claim);
        }
    }
    out.extend(claims.into_iter().filter_map(|(ip, claim)| {
        let (id, node) = claim?;
        let key = SenderIdKey {
            addr: ip.octets(),
            id,
        };
        Some((
            key,
            SenderId {
                node: node.octets(),
            },
        ))
    }));
    out
}

/// Computes the desired map contents: this Node's Pod identities, then (given a Node IP and an
/// active Gateway) the config, WireGuard, stretched policy, exposure, the remote clusters'
/// routes and peers, the gateway's local peers and the route generation, in that order.
pub fn desired(inputs: &Inputs) -> Desired {
    let mut out = Desired::default();
    pod_identities(inputs, &mut out);
    let Some(node_ip) = inputs.node_ip else {
        out.not_ready = Some(format!(
            "Node {} has no IPv4 InternalIP: nothing to tunnel from",
            inputs.node_name
        ));
        return out;
    };
    let Some(local) = active_gateway(inputs, node_ip, &mut out) else {
        out.not_ready = Some(no_gateway_reason(inputs));
        return out;
    };
    out.config = local_config(inputs, &local);
    if local.is_gateway && inputs.encryption {
        wireguard_device(inputs, &mut out);
    }
    if inputs.stretched_policy && local.is_gateway {
        out.sender_ids = sender_identities(inputs);
    }
    if inputs.stretched_policy {
        stretched_policy(inputs, local.is_gateway, &mut out);
    }
    let taken = local_prefixes(inputs, local.gateway, &mut out);
    if let Some(exported) = &inputs.exported {
        let (exposed, left_out) = crate::exposure::entries(exported, MAX_EXPOSED as usize);
        out.skipped.extend(left_out);
        out.exposed = Some(exposed);
    }
    let mut claimed = Claimed {
        taken,
        held: held_addresses(inputs, &local),
    };
    remote_clusters(inputs, &local, &mut claimed, &mut out);
    // Only the gateway takes tunnel traffic from local Nodes.
    if local.is_gateway {
        local_peers(inputs, node_ip, &mut out);
    }
    out.config.route_generation = route_generation(&out);
    out
}

/// This Node and the cluster's active gateway, as the rest of [`desired`] reads them.
struct Local<'a> {
    /// The active Gateway object.
    gateway: &'a GatewayObject,
    node_ip: Ipv4Addr,
    /// The active gateway's `gatewayIP` (where remote gateways send).
    gateway_ip: Ipv4Addr,
    /// The active gateway's `internalIP` (where this cluster's Nodes send).
    internal_ip: Ipv4Addr,
    /// This Node is the active gateway.
    is_gateway: bool,
}

/// The active gateway: the Gateway object (the member controller writes one; if an operator
/// or a failover leaves two for a moment, the first by name, as every Node will choose) whose
/// addresses parse. Those before it that do not are skipped, with the reason.
fn active_gateway<'a>(
    inputs: &'a Inputs,
    node_ip: Ipv4Addr,
    out: &mut Desired,
) -> Option<Local<'a>> {
    let mut gateways: Vec<&GatewayObject> = inputs.gateways.iter().collect();
    gateways.sort_by(|a, b| a.name.cmp(&b.name));
    for gw in gateways {
        let object = format!("Gateway {}", gw.name);
        match (
            parse_ip("gatewayIP", &object, gw.gateway_ip.as_deref()),
            parse_ip("internalIP", &object, gw.internal_ip.as_deref()),
        ) {
            (Ok(gateway_ip), Ok(internal_ip)) => {
                return Some(Local {
                    gateway: gw,
                    node_ip,
                    gateway_ip,
                    internal_ip,
                    is_gateway: gw.name == inputs.node_name,
                });
            }
            (Err(e), _) | (_, Err(e)) => out.skipped.push(e),
        }
    }
    None
}

/// Why there is no active gateway: no Gateway object at all, or none usable.
fn no_gateway_reason(inputs: &Inputs) -> String {
    if inputs.gateways.is_empty() {
        "no Gateway in this cluster yet: annotate a Node with multicluster.antrea.io/gateway=true"
            .to_owned()
    } else {
        "no Gateway object with a valid gatewayIP and internalIP".to_owned()
    }
}

/// The config entry: this Node's role, the addresses, the tunnel port and MTU, and the flags
/// that follow from the role and the agent config.
fn local_config(inputs: &Inputs, local: &Local) -> LocalConfig {
    let is_gateway = local.is_gateway;
    LocalConfig {
        role: if is_gateway { ROLE_GATEWAY } else { ROLE_NODE },
        node_ip: local.node_ip.octets(),
        gateway_internal_ip: local.internal_ip.octets(),
        gateway_ip: local.gateway_ip.octets(),
        tunnel_port: if inputs.tunnel_port == 0 {
            DEFAULT_TUNNEL_PORT
        } else {
            inputs.tunnel_port
        },
        mtu: inputs.mtu,
        flags: if is_gateway && inputs.stretched_policy {
            CONFIG_STRETCHED_POLICY
        } else {
            0
        } | if is_gateway && inputs.uplink_peer {
            CONFIG_UPLINK_PEER
        } else {
            0
        } | if inputs.stretched_policy {
            CONFIG_MASQ_IDS
        } else {
            0
        } | if is_gateway && inputs.encryption {
            CONFIG_WIREGUARD
        } else {
            0
        },
        ..Default::default()
    }
}

/// The gateway with encryption on: `mc_wireguard` from the device as the agent found it, or a
/// reason when the device is not up (traffic is then dropped, never sent in plaintext).
fn wireguard_device(inputs: &Inputs, out: &mut Desired) {
    match inputs.wireguard_device {
        Some(device) => {
            out.wireguard = WireGuardConfig {
                port: inputs.wireguard_port,
                ..device
            };
        }
        None => out.skipped.push(
            "trafficEncryptionMode is wireGuard and the WireGuard device is not up: traffic to remote clusters is dropped (never sent in plaintext)".to_owned(),
        ),
    }
}

/// Stretched NetworkPolicy: the compiled rules (egress rules for this Node's Pods on every
/// Node; ingress rules on the gateway only), fitted to the ingress map, their skipped parts,
/// and the config flags that tell the policy program it has something to decide.
fn stretched_policy(inputs: &Inputs, is_gateway: bool, out: &mut Desired) {
    let no_pods = Vec::new();
    out.policy = crate::policy::compile(
        &inputs.policies,
        &crate::policy::Cluster {
            tiers: &crate::policy::tier_priorities(&inputs.tiers),
            pods: if is_gateway {
                &inputs.cluster_pods
            } else {
                &no_pods
            },
            node_pods: &inputs.pods,
            namespace_labels: &inputs.namespace_labels,
            label_ids: &inputs.label_ids,
            services: &inputs.imported_services,
            proxy_mode: inputs.proxy_mode.as_ref(),
        },
    );
    let capacity = inputs.policy_capacity;
    out.policy
        .fit(capacity.unwrap_or(MAX_POLICY_ENTRIES as usize));
    out.skipped.extend(
        out.policy
            .skipped
            .iter()
            .map(|s| format!("stretched NetworkPolicy: {s}")),
    );
    // What the policy program has to look at on this Node: nothing, on most Nodes.
    if !out.policy.egress.is_empty() {
        out.config.flags |= CONFIG_POLICY_EGRESS;
    }
    if is_gateway && !out.policy.protected.is_empty() {
        out.config.flags |= CONFIG_POLICY_INGRESS;
        out.config.policy_generation = out.policy.ingress_generation();
    }
}

/// Local prefixes a remote one must not overlap, with whose they are: the local Service CIDR
/// (skipped, with the reason, when it does not parse) and the local Pod CIDRs, summarized. With
/// Pod-to-Pod on, the Pod CIDRs are what remote clusters may reach too (`mc_exposed_prefixes`).
fn local_prefixes(
    inputs: &Inputs,
    gateway: &GatewayObject,
    out: &mut Desired,
) -> Vec<(Prefix, String)> {
    let mut taken: Vec<(Prefix, String)> = Vec::new();
    if let Some(cidr) = gateway.service_cidr.as_deref().filter(|c| !c.is_empty()) {
        match Prefix::parse(cidr) {
            Ok(p) => taken.push((p, "the local Service CIDR".to_owned())),
            Err(e) => out
                .skipped
                .push(format!("Gateway {}: serviceCIDR {e}", gateway.name)),
        }
    }
    let local_pods = mc_api::net::summarize(
        inputs
            .local_pod_cidrs
            .iter()
            .filter_map(|c| Prefix::parse(c).ok()),
    );
    for p in local_pods {
        taken.push((p, "a local Pod CIDR".to_owned()));
        if inputs.pod_to_pod {
            let kind = EXPOSED_POD_CIDR;
            out.exposed_prefixes.insert(p, Exposed { kind });
        }
    }
    taken
}

/// Addresses no remote prefix may hold (the second line of defence behind the leader's
/// checks): routed toward a gateway, this Node's own traffic to them would be captured. Each
/// with whose address it is.
fn held_addresses(inputs: &Inputs, local: &Local) -> Vec<(Ipv4Addr, String)> {
    let mut held: Vec<(Ipv4Addr, String)> = vec![
        (local.node_ip, "this Node's".to_owned()),
        (local.gateway_ip, "the local gateway's".to_owned()),
        (local.internal_ip, "the local gateway's".to_owned()),
    ];
    held.extend(
        inputs
            .local_nodes
            .iter()
            .map(|ip| (*ip, "a Node of this cluster's".to_owned())),
    );
    held.extend(inputs.cluster_infos.iter().flat_map(|c| {
        let cluster = c.cluster_id.clone().unwrap_or_default();
        c.gateway_ips
            .iter()
            .filter_map(|g| g.parse().ok())
            .map(move |ip| (ip, format!("cluster {cluster}'s gateway")))
    }));
    held
}

/// What a remote prefix must keep clear of, threaded through the remote clusters in order.
struct Claimed {
    /// Prefixes taken (the local ones, then each remote one routed so far), with whose they are.
    taken: Vec<(Prefix, String)>,
    /// Addresses no remote prefix may hold ([`held_addresses`]).
    held: Vec<(Ipv4Addr, String)>,
}

/// The remote clusters in cluster-ID order, so indexes and overlap decisions are the same on
/// every Node and after every restart: each admitted one gets its routes, its peer and its
/// place in [`Desired::clusters`].
fn remote_clusters(inputs: &Inputs, local: &Local, claimed: &mut Claimed, out: &mut Desired) {
    let mut infos: Vec<&ClusterInfoObject> = inputs.cluster_infos.iter().collect();
    infos.sort_by(|a, b| a.cluster_id.cmp(&b.cluster_id).then(a.name.cmp(&b.name)));
    for info in infos {
        let object = format!("ClusterInfoImport {}", info.name);
        let (cluster_id, remote_gw) = match admit_cluster(inputs, local, info, &object, out) {
            Ok(admitted) => admitted,
            Err(e) => {
                out.skipped.push(e);
                continue;
            }
        };
        let index = out.clusters.len() as u32 + 1;
        let encrypted_route = if local.is_gateway {
            wireguard_peer(inputs, info, &cluster_id, remote_gw, out)
        } else {
            0
        };
        let route = RemoteRoute {
            cluster: index | encrypted_route,
            gateway_ip: remote_gw.octets(),
        };
        let remote = Remote {
            object: &object,
            cluster_id: &cluster_id,
            route,
        };
        let prefixes = remote_prefixes(inputs, info, &remote, claimed, out);
        out.peers.insert(
            remote_gw,
            Peer {
                kind: PEER_REMOTE_GATEWAY,
                cluster: index,
            },
        );
        out.clusters.push(RemoteCluster {
            index,
            cluster_id,
            gateway_ip: remote_gw,
            prefixes,
        });
    }
}

/// A ClusterInfoImport's cluster ID and gateway address, or why it is skipped: no cluster ID,
/// no usable gateway address, a gateway that is a Node of this cluster, or a cluster or gateway
/// already imported (a stale import under another name, or a gateway two clusters claim, would
/// overwrite the first's peer).
fn admit_cluster(
    inputs: &Inputs,
    local: &Local,
    info: &ClusterInfoObject,
    object: &str,
    out: &Desired,
) -> Result<(String, Ipv4Addr), String> {
    let Some(cluster_id) = info.cluster_id.clone().filter(|c| !c.is_empty()) else {
        return Err(format!("{object}: clusterID is empty"));
    };
    let remote_gw = parse_ip(
        "gatewayInfos[0].gatewayIP",
        object,
        info.gateway_ips.first().map(String::as_str),
    )?;
    if remote_gw == local.node_ip || inputs.local_nodes.contains(&remote_gw) {
        return Err(format!(
            "{object}: gateway {remote_gw} is a Node of this cluster"
        ));
    }
    if let Some(first) = out
        .clusters
        .iter()
        .find(|c| c.cluster_id == cluster_id || c.gateway_ip == remote_gw)
    {
        return Err(if first.cluster_id == cluster_id {
            format!(
                "{object}: cluster {cluster_id} is already imported (gateway {})",
                first.gateway_ip
            )
        } else {
            format!(
                "{object}: gateway {remote_gw} is already cluster {}'s",
                first.cluster_id
            )
        });
    }
    Ok((cluster_id, remote_gw))
}

/// An admitted remote cluster, as its routes and messages name it.
struct Remote<'a> {
    /// `ClusterInfoImport <name>`, for messages.
    object: &'a str,
    cluster_id: &'a str,
    /// The route each of its prefixes gets.
    route: RemoteRoute,
}

/// The remote cluster's prefixes that are routed (its Service CIDR, and its Pod CIDRs with
/// Pod-to-Pod on): each one that parses and keeps clear of what is claimed gets a route and is
/// taken; the others are skipped with the reason.
fn remote_prefixes(
    inputs: &Inputs,
    info: &ClusterInfoObject,
    remote: &Remote,
    claimed: &mut Claimed,
    out: &mut Desired,
) -> Vec<Prefix> {
    let object = remote.object;
    let mut wanted: Vec<&str> = info.service_cidr.as_deref().into_iter().collect();
    if inputs.pod_to_pod {
        wanted.extend(info.pod_cidrs.iter().map(String::as_str));
    }
    let mut prefixes = Vec::new();
    for cidr in wanted {
        let prefix = match Prefix::parse(cidr) {
            Ok(p) => p,
            Err(e) => {
                out.skipped.push(format!("{object}: {e}"));
                continue;
            }
        };
        if let Some(why) = unroutable(object, prefix, &inputs.uplink_subnets, claimed) {
            out.skipped.push(why);
            continue;
        }
        claimed
            .taken
            .push((prefix, format!("{cidr} of cluster {}", remote.cluster_id)));
        out.routes.insert(prefix, remote.route);
        prefixes.push(prefix);
    }
    prefixes
}

/// Why a remote prefix is not routed, if it is not: a special range, one that holds a claimed
/// address, covers the uplink's subnet or overlaps a taken prefix.
fn unroutable(
    object: &str,
    prefix: Prefix,
    uplink_subnets: &[Prefix],
    claimed: &Claimed,
) -> Option<String> {
    if let Some(why) = prefix.special() {
        return Some(format!("{object}: {why}; not routed"));
    }
    if let Some((ip, what)) = claimed
        .held
        .iter()
        .find(|(ip, _)| prefix.contains(&Prefix::new(*ip, 32)))
    {
        return Some(format!(
            "{object}: {prefix} holds {ip}, {what} address; not routed (the route would capture traffic to it)"
        ));
    }
    // A prefix covering the uplink's whole subnet would take the Node off its link (one
    // inside a wide flat subnet is routed: the addresses above stay protected).
    if let Some(u) = uplink_subnets.iter().find(|u| prefix.contains(u)) {
        return Some(format!(
            "{object}: {prefix} covers the uplink's subnet {u}; not routed"
        ));
    }
    if let Some((_, owner)) = claimed.taken.iter().find(|(t, _)| t.overlaps(&prefix)) {
        return Some(format!(
            "{object}: {prefix} overlaps {owner}; not routed (CIDRs in a ClusterSet must not overlap)"
        ));
    }
    None
}

/// The gateway: the cluster's other Nodes as local peers (it takes their tunnel traffic),
/// unless the address is already a remote gateway's peer.
fn local_peers(inputs: &Inputs, node_ip: Ipv4Addr, out: &mut Desired) {
    for &ip in &inputs.local_nodes {
        if ip != node_ip && !out.peers.contains_key(&ip) {
            out.peers.insert(
                ip,
                Peer {
                    kind: PEER_LOCAL_NODE,
                    cluster: 0,
                },
            );
        }
    }
}

/// The gateway: the remote cluster's gateway as a WireGuard peer (encryption on) and the flag
/// its routes get ([`ROUTE_NO_WIREGUARD_PEER`] when it has no usable key: its traffic is
/// dropped, counted, never sent in plaintext). A member that disagrees on the mode is reported
/// either way: one side would drop the other's traffic.
fn wireguard_peer(
    inputs: &Inputs,
    info: &ClusterInfoObject,
    cluster_id: &str,
    remote_gw: Ipv4Addr,
    out: &mut Desired,
) -> u32 {
    let key = info
        .wireguard_public_key
        .as_deref()
        .filter(|k| !k.is_empty());
    if !inputs.encryption {
        if key.is_some() {
            out.encryption_mismatch.push(cluster_id.to_owned());
            out.skipped.push(format!(
                "cluster {cluster_id} encrypts its gateway's traffic (WireGuard) and this cluster does not (trafficEncryptionMode): it drops this cluster's tunnel traffic; set the same trafficEncryptionMode in every member"
            ));
        }
        return 0;
    }
    let Some(key) = key else {
        out.encryption_mismatch.push(cluster_id.to_owned());
        out.skipped.push(format!(
            "cluster {cluster_id} announces no WireGuard public key (its members run without trafficEncryptionMode: wireGuard, or its gateway has not published its key yet): traffic to it is dropped, never sent in plaintext"
        ));
        return ROUTE_NO_WIREGUARD_PEER;
    };
    match crate::wireguard::parse_key(key) {
        Ok(public_key) => {
            out.wireguard_peers.push(WireGuardPeer {
                cluster_id: cluster_id.to_owned(),
                public_key,
                endpoint: std::net::SocketAddrV4::new(remote_gw, inputs.wireguard_port),
            });
            0
        }
        Err(e) => {
            out.encryption_mismatch.push(cluster_id.to_owned());
            out.skipped.push(format!(
                "ClusterInfoImport {}: wireGuard.publicKey {e}: traffic to cluster {cluster_id} is dropped",
                info.name
            ));
            ROUTE_NO_WIREGUARD_PEER
        }
    }
}

/// [`LocalConfig::route_generation`]: a 16-bit digest (FNV-1a, folded) of everything the
/// gateway's hairpin decides by: the routes, the peers, and the config's role, addresses and
/// tunnel port. The same state always gives the same value, so a restart invalidates nothing.
fn route_generation(out: &Desired) -> u16 {
    let c = &out.config;
    let mut bytes = Vec::with_capacity(32 + 13 * out.routes.len() + 12 * out.peers.len());
    bytes.extend_from_slice(&c.role.to_le_bytes());
    bytes.extend_from_slice(&c.node_ip);
    bytes.extend_from_slice(&c.gateway_internal_ip);
    bytes.extend_from_slice(&c.gateway_ip);
    bytes.extend_from_slice(&c.tunnel_port.to_le_bytes());
    for (prefix, route) in &out.routes {
        bytes.extend_from_slice(&prefix.addr.octets());
        bytes.push(prefix.len);
        bytes.extend_from_slice(&route.cluster.to_le_bytes());
        bytes.extend_from_slice(&route.gateway_ip);
    }
    for (addr, peer) in &out.peers {
        bytes.extend_from_slice(&addr.octets());
        bytes.extend_from_slice(&peer.kind.to_le_bytes());
        bytes.extend_from_slice(&peer.cluster.to_le_bytes());
    }
    let hash = bytes.iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    (hash ^ (hash >> 16)) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    fn inputs(node: &str, node_ip: &str) -> Inputs {
        Inputs {
            node_name: node.to_owned(),
            node_ip: Some(ip(node_ip)),
            gateways: vec![GatewayObject {
                name: "east-gw".into(),
                gateway_ip: Some("198.18.1.1".into()),
                internal_ip: Some("198.18.1.1".into()),
                service_cidr: Some("10.97.0.0/16".into()),
            }],
            cluster_infos: vec![ClusterInfoObject {
                name: "west-clusterinfo".into(),
                cluster_id: Some("west".into()),
                service_cidr: Some("10.98.0.0/16".into()),
                gateway_ips: vec!["198.18.2.1".into()],
                pod_cidrs: vec!["10.245.0.0/16".into()],
                ..Default::default()
            }],
            local_nodes: vec![ip("198.18.1.1"), ip("198.18.1.2")],
            local_pod_cidrs: vec!["10.244.0.0/16".into()],
            pod_to_pod: false,
            tunnel_port: 0,
            mtu: 1500,
            ..Default::default()
        }
    }

    /// Encryption on the gateway: a remote cluster with a key is a WireGuard peer at its
    /// gatewayIP and WireGuard's port; one without (or with a bad one) keeps its routes, flagged
    /// so its packets are dropped, and is named; a regular Node has no peers. Encryption off
    /// with a remote cluster that encrypts: named too.
    #[test]
    fn encryption_makes_peers_of_keyed_clusters_and_names_those_that_disagree() {
        let key = "HHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHE=";
        let device = WireGuardConfig {
            ifindex: 9,
            uplink_ifindex: 2,
            uplink_mac: [2, 0, 0, 0, 0, 1],
            port: 0,
        };
        let mut i = inputs("east-gw", "198.18.1.1");
        i.encryption = true;
        i.wireguard_port = 51821;
        i.wireguard_device = Some(device);
        i.cluster_infos[0].wireguard_public_key = Some(key.into());
        for (id, gw, cidr, k) in [
            ("north", "198.18.3.1", "10.96.0.0/16", None),
            ("south", "198.18.4.1", "10.95.0.0/16", Some("short")),
        ] {
            i.cluster_infos.push(ClusterInfoObject {
                name: format!("{id}-clusterinfo"),
                cluster_id: Some(id.into()),
                service_cidr: Some(cidr.into()),
                gateway_ips: vec![gw.into()],
                wireguard_public_key: k.map(Into::into),
                ..Default::default()
            });
        }
        let d = desired(&i);
        assert_eq!(d.config.flags & CONFIG_WIREGUARD, CONFIG_WIREGUARD);
        assert_eq!(
            d.wireguard,
            WireGuardConfig {
                port: 51821,
                ..device
            }
        );
        assert_eq!(d.wireguard_peers.len(), 1, "{:?}", d.wireguard_peers);
        let peer = &d.wireguard_peers[0];
        assert_eq!(peer.cluster_id, "west");
        assert_eq!(peer.endpoint.to_string(), "198.18.2.1:51821");
        assert_eq!(crate::wireguard::parse_key(key), Ok(peer.public_key));
        let flag =
            |cidr: &str| d.routes[&Prefix::parse(cidr).unwrap()].cluster & ROUTE_NO_WIREGUARD_PEER;
        assert_eq!(flag("10.98.0.0/16"), 0);
        assert_eq!(flag("10.96.0.0/16"), ROUTE_NO_WIREGUARD_PEER);
        assert_eq!(flag("10.95.0.0/16"), ROUTE_NO_WIREGUARD_PEER);
        assert_eq!(d.encryption_mismatch, ["north", "south"]);
        assert!(
            d.skipped
                .iter()
                .any(|s| s.contains("cluster north announces no WireGuard public key")),
            "{:?}",
            d.skipped
        );
        assert!(
            d.skipped
                .iter()
                .any(|s| s.contains("wireGuard.publicKey") && s.contains("cluster south")),
            "{:?}",
            d.skipped
        );

        // The device not up yet: the flag stays (nothing leaves in plaintext), the entry is
        // empty, and it is said.
        i.wireguard_device = None;
        let d = desired(&i);
        assert_eq!(d.config.flags & CONFIG_WIREGUARD, CONFIG_WIREGUARD);
        assert_eq!(d.wireguard, WireGuardConfig::default());
        assert!(
            d.skipped
                .iter()
                .any(|s| s.contains("WireGuard device is not up"))
        );

        // A regular Node: Geneve to its gateway as always; no peers, no flag.
        let mut n = i.clone();
        n.node_name = "east-node".into();
        n.node_ip = Some(ip("198.18.1.2"));
        let d = desired(&n);
        assert_eq!(d.config.flags & CONFIG_WIREGUARD, 0);
        assert!(d.wireguard_peers.is_empty() && d.encryption_mismatch.is_empty());
        assert!(
            d.routes
                .values()
                .all(|r| r.cluster & ROUTE_NO_WIREGUARD_PEER == 0)
        );

        // Encryption off here, on in west (and south, whose key is bad): named; no flags.
        i.encryption = false;
        let d = desired(&i);
        assert_eq!(d.config.flags & CONFIG_WIREGUARD, 0);
        assert_eq!(d.encryption_mismatch, ["south", "west"]);
        assert!(
            d.routes
                .values()
                .all(|r| r.cluster & ROUTE_NO_WIREGUARD_PEER == 0)
        );
    }

    #[test]
    fn a_remote_prefix_that_would_capture_the_nodes_own_traffic_is_not_routed() {
        let mut i = inputs("east-node", "198.18.1.2");
        i.pod_to_pod = true;
        i.uplink_subnets = vec![Prefix::parse("198.18.1.0/24").unwrap()];
        i.cluster_infos.push(ClusterInfoObject {
            name: "evil-clusterinfo".into(),
            cluster_id: Some("evil".into()),
            service_cidr: Some("169.254.169.254/32".into()),
            gateway_ips: vec!["198.18.3.1".into()],
            pod_cidrs: vec![
                "128.0.0.0/1".into(),
                "198.18.1.0/25".into(),
                "198.18.2.0/24".into(),
                "10.99.0.0/16".into(),
            ],
            ..Default::default()
        });
        let d = desired(&i);
        let routed: Vec<String> = d.routes.keys().map(ToString::to_string).collect();
        assert_eq!(
            routed,
            ["10.98.0.0/16", "10.99.0.0/16", "10.245.0.0/16"],
            "{:?}",
            d.skipped
        );
        let said = d.skipped.join("\n");
        for why in [
            "169.254.169.254/32 overlaps 169.254.0.0/16 (link-local",
            "128.0.0.0/1 overlaps 169.254.0.0/16",
            "198.18.1.0/25 holds 198.18.1.2, this Node's address",
            "198.18.2.0/24 holds 198.18.2.1, cluster west's gateway address",
        ] {
            assert!(said.contains(why), "{why:?} missing from:\n{said}");
        }
        // A subnet of the uplink that holds no Node yet is not routed either.
        i.uplink_subnets = vec![Prefix::parse("10.99.0.0/24").unwrap()];
        let d = desired(&i);
        assert!(!d.routes.keys().any(|p| p.to_string() == "10.99.0.0/16"));
        assert!(
            d.skipped.join("\n").contains("covers the uplink's subnet"),
            "{:?}",
            d.skipped
        );
        // One inside a wide flat uplink subnet is routed (the Nodes' addresses stay protected).
        i.uplink_subnets = vec![Prefix::parse("10.0.0.0/8").unwrap()];
        let d = desired(&i);
        assert!(
            d.routes.keys().any(|p| p.to_string() == "10.99.0.0/16"),
            "{:?}",
            d.skipped
        );
    }

    #[test]
    fn each_pod_address_gets_the_id_of_its_label_and_nothing_uncertain_does() {
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        let pod = |name: &str, ns: &str, l: &[(&str, &str)], ips: &[&str]| PodObject {
            namespace: ns.into(),
            name: name.into(),
            labels: labels(l),
            ips: ips.iter().map(|s| (*s).to_owned()).collect(),
            ..Default::default()
        };
        let mut i = inputs("east-node", "198.18.1.2");
        i.namespace_labels = [(
            "prod".to_owned(),
            labels(&[("kubernetes.io/metadata.name", "prod")]),
        )]
        .into();
        i.label_ids = [
            (
                "ns:kubernetes.io/metadata.name=prod&pod:app=db".to_owned(),
                7,
            ),
            (
                "ns:kubernetes.io/metadata.name=prod&pod:app=web".to_owned(),
                8,
            ),
            (
                "ns:kubernetes.io/metadata.name=prod&pod:app=bad".to_owned(),
                0x00ff_ffff,
            ),
        ]
        .into();
        i.pods = vec![
            pod("db", "prod", &[("app", "db")], &["10.244.1.5", "fd00::5"]),
            pod("web", "prod", &[("app", "web")], &["10.244.1.6"]),
            // Same address, different IDs: neither.
            pod("a", "prod", &[("app", "db")], &["10.244.1.7"]),
            pod("b", "prod", &[("app", "web")], &["10.244.1.7"]),
            pod("new", "prod", &[("app", "new")], &["10.244.1.8"]), // no ID yet
            // An old Pod still listed with an ID, and a new one on its address without one yet:
            // the address says "unknown", not the old Pod's label.
            pod("old", "prod", &[("app", "db")], &["10.244.1.12"]),
            pod("reborn", "prod", &[("app", "new")], &["10.244.1.12"]),
            pod("elsewhere", "dev", &[("app", "db")], &["10.244.1.9"]), // Namespace unknown
            pod("bad", "prod", &[("app", "bad")], &["10.244.1.10"]),    // ID out of range
            PodObject {
                host_network: true,
                ..pod("host", "prod", &[("app", "db")], &["198.18.1.2"])
            },
            PodObject {
                finished: true,
                ..pod("done", "prod", &[("app", "web")], &["10.244.1.11"])
            },
        ];
        let d = desired(&i);
        let got: Vec<(String, u32)> = d
            .pod_ids
            .iter()
            .map(|(ip, p)| (ip.to_string(), p.id))
            .collect();
        assert_eq!(
            got,
            [("10.244.1.5".to_owned(), 7), ("10.244.1.6".to_owned(), 8)]
        );
        assert!(
            d.skipped.iter().any(|s| s.contains("10.244.1.7")),
            "{:?}",
            d.skipped
        );
        assert!(
            d.skipped.iter().any(|s| s.contains("prod/bad")),
            "{:?}",
            d.skipped
        );
    }

    #[test]
    fn regular_node_routes_remote_service_cidrs_to_its_gateway() {
        let d = desired(&inputs("east-node", "198.18.1.2"));
        assert_eq!(d.not_ready, None);
        assert_eq!(d.config.role, ROLE_NODE);
        assert_eq!(d.config.node_ip, [198, 18, 1, 2]);
        assert_eq!(d.config.gateway_internal_ip, [198, 18, 1, 1]);
        assert_eq!(d.config.tunnel_port, 6081);
        assert_eq!(
            d.routes.keys().map(ToString::to_string).collect::<Vec<_>>(),
            ["10.98.0.0/16"]
        );
        // Only the remote gateway is a peer on a regular Node.
        assert_eq!(d.peers.len(), 1);
        assert_eq!(d.peers[&ip("198.18.2.1")].kind, PEER_REMOTE_GATEWAY);
        assert!(d.skipped.is_empty(), "{:?}", d.skipped);
    }

    #[test]
    fn the_flag_needs_every_prefix_routed_toward_the_current_gateway() {
        let d = desired(&inputs("east-node", "198.18.1.2"));
        let routed = |toward: &str, prefixes: &[&str]| Routed {
            toward: ip(toward),
            prefixes: prefixes.iter().map(|p| Prefix::parse(p).unwrap()).collect(),
        };
        assert_eq!(d.routed_flag(None), 0);
        assert_eq!(
            d.routed_flag(Some(&routed("198.18.1.1", &["10.98.0.0/16"]))),
            CONFIG_ROUTED_VIA_GATEWAY
        );
        // Routes toward another (the previous) gateway.
        assert_eq!(
            d.routed_flag(Some(&routed("198.18.1.9", &["10.98.0.0/16"]))),
            0
        );
        // A prefix of the maps whose route is not in place yet.
        assert_eq!(d.routed_flag(Some(&routed("198.18.1.1", &[]))), 0);
        // A route left over for a prefix the maps no longer hold does no harm.
        assert_eq!(
            d.routed_flag(Some(&routed(
                "198.18.1.1",
                &["10.98.0.0/16", "10.99.0.0/16"]
            ))),
            CONFIG_ROUTED_VIA_GATEWAY
        );
        // Never on a gateway.
        let g = desired(&inputs("east-gw", "198.18.1.1"));
        assert_eq!(
            g.routed_flag(Some(&routed("198.18.2.1", &["10.98.0.0/16"]))),
            0
        );
    }

    #[test]
    fn gateway_accepts_its_nodes_and_pod_cidrs_follow_the_switch() {
        let mut i = inputs("east-gw", "198.18.1.1");
        i.pod_to_pod = true;
        let d = desired(&i);
        assert_eq!(d.config.role, ROLE_GATEWAY);
        assert_eq!(d.routes.len(), 2, "Service and Pod CIDR with pod-to-pod on");
        assert_eq!(d.peers[&ip("198.18.1.2")].kind, PEER_LOCAL_NODE);
        assert!(!d.peers.contains_key(&ip("198.18.1.1")), "not itself");
    }

    #[test]
    fn the_route_generation_follows_routes_peers_and_addresses_and_nothing_else() {
        let base = inputs("east-gw", "198.18.1.1");
        let g = desired(&base).config.route_generation;
        assert_eq!(
            g,
            desired(&base).config.route_generation,
            "same state, same value"
        );
        let mut more = base.clone();
        more.pod_to_pod = true;
        assert_ne!(g, desired(&more).config.route_generation, "a route more");
        let mut nodes = base.clone();
        nodes.local_nodes.push(ip("198.18.1.3"));
        assert_ne!(g, desired(&nodes).config.route_generation, "a peer more");
        let mut moved = base.clone();
        moved.cluster_infos[0].gateway_ips = vec!["198.18.2.9".into()];
        assert_ne!(
            g,
            desired(&moved).config.route_generation,
            "a gateway moved"
        );
        let mut mtu = base.clone();
        mtu.mtu = 9000;
        assert_eq!(
            g,
            desired(&mtu).config.route_generation,
            "the MTU is not the hairpin's"
        );
    }

    #[test]
    fn bad_objects_are_skipped_with_a_reason_and_overlaps_are_refused() {
        let mut i = inputs("east-node", "198.18.1.2");
        i.cluster_infos.push(ClusterInfoObject {
            name: "south-clusterinfo".into(),
            cluster_id: Some("south".into()),
            service_cidr: Some("10.97.128.0/17".into()), // inside east's own Service CIDR
            gateway_ips: vec!["198.18.3.1".into()],
            pod_cidrs: vec![],
            ..Default::default()
        });
        i.cluster_infos.push(ClusterInfoObject {
            name: "x-clusterinfo".into(),
            cluster_id: Some("x".into()),
            service_cidr: Some("10.99.0.0/16".into()),
            gateway_ips: vec!["not-an-ip".into()],
            pod_cidrs: vec![],
            ..Default::default()
        });
        i.cluster_infos.push(ClusterInfoObject {
            name: "y-clusterinfo".into(),
            cluster_id: Some("y".into()),
            service_cidr: Some("10.98.7.0/24".into()), // inside west's
            gateway_ips: vec!["198.18.4.1".into()],
            pod_cidrs: vec![],
            ..Default::default()
        });
        let d = desired(&i);
        assert_eq!(
            d.routes.len(),
            1,
            "only west's CIDR is routed: {:?}",
            d.routes
        );
        let skipped = d.skipped.join("\n");
        assert!(
            skipped.contains("10.97.128.0/17 overlaps the local Service CIDR"),
            "{skipped}"
        );
        assert!(
            skipped.contains("\"not-an-ip\" is not an IPv4 address"),
            "{skipped}"
        );
        assert!(
            skipped.contains("10.98.7.0/24 overlaps 10.98.0.0/16 of cluster west"),
            "{skipped}"
        );
        // Clusters whose prefixes were all refused still identify their gateway.
        assert!(d.peers.contains_key(&ip("198.18.3.1")));
        assert!(!d.peers.contains_key(&ip("198.18.9.9")));
    }

    /// Only the gateway's hairpin redirects, so only a gateway whose uplink is a veth into
    /// another namespace gets the flag that hands its packets to the other end.
    #[test]
    fn only_a_gateway_with_a_veth_uplink_hands_its_hairpin_to_the_peer() {
        let mut gw = inputs("east-gw", "198.18.1.1");
        assert_eq!(desired(&gw).config.flags & CONFIG_UPLINK_PEER, 0);
        gw.uplink_peer = true;
        assert_eq!(desired(&gw).config.flags, CONFIG_UPLINK_PEER);
        let mut node = gw.clone();
        node.node_name = "east-node".into();
        node.node_ip = Some(ip("198.18.1.2"));
        assert_eq!(desired(&node).config.role, ROLE_NODE);
        assert_eq!(desired(&node).config.flags, 0);
    }

    /// The policy program looks only where this Node has something to decide: egress entries
    /// for its Pods, covered Pods on the gateway (with the digest its remembered verdicts are
    /// checked against).
    #[test]
    fn the_policy_flags_say_what_a_node_has_to_decide() {
        use crate::policy::PolicyObject;
        let mut gw = inputs("east-gw", "198.18.1.1");
        gw.stretched_policy = true;
        let flags = |i: &Inputs| desired(i).config.flags;
        // Every Node with stretched policy keeps its Pods' identities through a masquerade.
        assert_eq!(
            flags(&gw),
            CONFIG_STRETCHED_POLICY | CONFIG_MASQ_IDS,
            "no policy: nothing to decide"
        );
        gw.namespace_labels = [(
            "prod".to_owned(),
            [("kubernetes.io/metadata.name".to_owned(), "prod".to_owned())].into(),
        )]
        .into();
        gw.cluster_pods = vec![PodObject {
            namespace: "prod".into(),
            name: "db".into(),
            labels: [("app".to_owned(), "db".to_owned())].into(),
            ips: vec!["10.244.0.9".into()],
            ..Default::default()
        }];
        gw.policies = vec![PolicyObject {
            namespace: Some("prod".into()),
            name: "db-svc-allow-ingress-from-client-only".into(),
            spec: serde_json::from_value(serde_json::json!({
                "priority": 1, "tier": "application",
                "appliedTo": [{"podSelector": {"matchLabels": {"app": "db"}}}],
                "ingress": [{"action": "Allow", "from": [{"scope": "ClusterSet",
                    "podSelector": {"matchLabels": {"app": "client"}}}]}, {"action": "Drop"}],
            }))
            .unwrap(),
        }];
        let d = desired(&gw);
        assert_eq!(
            d.config.flags,
            CONFIG_STRETCHED_POLICY | CONFIG_POLICY_INGRESS | CONFIG_MASQ_IDS
        );
        assert_eq!(d.config.policy_generation, d.policy.ingress_generation());
        assert!(d.decides_policy(), "the gateway links the policy program");
        // The regular Node: the same world, no egress rule for its Pods, nothing to decide.
        let mut node = gw.clone();
        node.node_name = "east-node".into();
        node.node_ip = Some(ip("198.18.1.2"));
        let d = desired(&node);
        assert_eq!(d.config.flags, CONFIG_MASQ_IDS);
        assert_eq!(d.config.policy_generation, 0);
        assert!(!d.decides_policy(), "no policy program on this Node");
    }

    #[test]
    fn no_usable_gateway_means_not_ready_and_nothing_routed() {
        let mut i = inputs("east-node", "198.18.1.2");
        i.gateways[0].gateway_ip = Some("300.1.1.1".into());
        let d = desired(&i);
        assert!(d.not_ready.is_some());
        assert_eq!(d.config.role, 0);
        assert!(d.routes.is_empty() && d.peers.is_empty());
        assert!(d.skipped[0].contains("\"300.1.1.1\" is not an IPv4 address"));
        i.gateways.clear();
        assert!(desired(&i).not_ready.unwrap().contains("annotate a Node"));
    }

    #[test]
    fn the_choice_is_deterministic() {
        let mut i = inputs("east-node", "198.18.1.2");
        i.gateways.insert(
            0,
            GatewayObject {
                name: "z-gw".into(),
                gateway_ip: Some("198.18.1.9".into()),
                internal_ip: Some("198.18.1.9".into()),
                service_cidr: None,
            },
        );
        let a = desired(&i);
        i.gateways.reverse();
        i.cluster_infos.reverse();
        assert_eq!(a, desired(&i));
        assert_eq!(
            a.config.gateway_internal_ip,
            [198, 18, 1, 1],
            "first by name"
        );
    }

    #[test]
    fn prefixes_are_normalised() {
        assert_eq!(
            Prefix::parse("10.98.3.4/16").unwrap().to_string(),
            "10.98.0.0/16"
        );
        assert!(Prefix::parse("10.98.0.0").is_err());
        assert!(Prefix::parse("10.98.0.0/33").is_err());
        assert!(
            Prefix::parse("0.0.0.0/0")
                .unwrap()
                .contains(&Prefix::parse("1.2.3.4/32").unwrap())
        );
    }
}
