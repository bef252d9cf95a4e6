//! The testbed's fixed addressing (docs/design.md §5). Everything lives in 198.18.0.0/15 or inside
//! the testbed's own namespaces; the host only gets a connected route to the management subnet.

/// The namespace that hosts etcd, the API servers and the controller managers (and, later, the
/// router between the cluster underlays).
pub const CORE_NETNS: &str = "strait-core";
/// Host side of the management veth.
pub const HOST_VETH: &str = "strait-mgmt";
/// Core side of the management veth.
pub const CORE_VETH: &str = "mgmt0";
pub const HOST_MGMT_ADDR: &str = "198.18.0.1/24";
pub const CORE_MGMT_ADDR: &str = "198.18.0.2/24";
pub const ETCD_URL: &str = "http://127.0.0.1:2379";

/// The network a cluster's Pods are on (with kubelet Nodes; `up --processes` makes bare Pod
/// namespaces of its own for every cluster). The default ClusterSet is mixed, as real ones are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodNetwork {
    /// Debian's `ptp` CNI plugin: a veth per Pod, the Pod CIDRs routed between the Nodes by the
    /// testbed, no masquerade.
    Ptp,
    /// Flannel: flanneld on every Node (VXLAN backend, `--ip-masq`: the Pods' traffic to
    /// anything outside the cluster's Pod CIDR leaves with the Node's address) and the flannel
    /// CNI plugin over a `cni0` bridge.
    Flannel,
}

impl PodNetwork {
    pub fn name(self) -> &'static str {
        match self {
            PodNetwork::Ptp => "ptp",
            PodNetwork::Flannel => "flannel (VXLAN, masquerade)",
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Cluster {
    pub name: &'static str,
    pub leader: bool,
    /// Address of the API server on the management subnet.
    pub api_ip: &'static str,
    pub service_cidr: &'static str,
    /// First address of the Service CIDR: the `kubernetes` Service, also a SAN of the cert.
    pub kubernetes_service_ip: &'static str,
    /// Third octet of the cluster's Node underlay `198.18.<n>.0/24` (the router is `.254`).
    pub underlay: u8,
    /// Second octet of the cluster's Pod CIDR `10.<n>.0.0/16` (Node k gets `10.<n>.k.0/24`).
    pub pod_octet: u8,
    pub network: PodNetwork,
    /// kube-proxy's `--proxy-mode` on the cluster's Nodes.
    pub proxy_mode: &'static str,
}

impl Cluster {
    pub fn server(&self) -> String {
        format!("https://{}:6443", self.api_ip)
    }

    pub fn pod_cidr(&self) -> String {
        format!("10.{}.0.0/16", self.pod_octet)
    }

    /// The cluster DNS Service (`kube-dns`): the tenth address of the Service CIDR.
    pub fn dns_service_ip(&self) -> String {
        let base = self
            .kubernetes_service_ip
            .rsplit_once('.')
            .map_or("", |(net, _)| net);
        format!("{base}.10")
    }

    pub fn router_ip(&self) -> String {
        format!("198.18.{}.254", self.underlay)
    }
}

/// The testbed's Nodes in every cluster (unless `up --no-nodes`): the first is a gateway candidate.
pub const NODES: [&str; 2] = ["node-a", "node-b"];

/// A testbed Node.
#[derive(Clone, Copy, Debug)]
pub struct TestNode {
    pub cluster: Cluster,
    pub name: &'static str,
    /// 1-based position: the last octet of its address and the third of its Pod CIDR.
    pub index: u8,
}

impl TestNode {
    pub fn all() -> impl Iterator<Item = TestNode> {
        CLUSTERS.into_iter().flat_map(|cluster| {
            NODES.iter().enumerate().map(move |(i, name)| TestNode {
                cluster,
                name,
                index: i as u8 + 1,
            })
        })
    }

    pub fn find(cluster: &str, name: &str) -> Option<TestNode> {
        Self::all().find(|n| n.cluster.name == cluster && n.name == name)
    }

    pub fn ip(&self) -> String {
        format!("198.18.{}.{}", self.cluster.underlay, self.index)
    }

    pub fn pod_cidr(&self) -> String {
        format!("10.{}.{}.0/24", self.cluster.pod_octet, self.index)
    }

    /// Network namespace of the Node.
    pub fn netns(&self) -> String {
        format!("strait-{}-{}", self.cluster.name, self.name)
    }

    /// The router's side of the Node's uplink (at most 15 characters).
    pub fn router_veth(&self) -> String {
        format!("{}-{}", &self.cluster.name[..1], self.name)
    }

    pub fn gateway_candidate(&self) -> bool {
        self.index == 1
    }
}

pub const CLUSTERS: [Cluster; 3] = [
    Cluster {
        name: "north",
        underlay: 10,
        pod_octet: 240,
        leader: true,
        api_ip: "198.18.0.10",
        service_cidr: "10.96.0.0/16",
        kubernetes_service_ip: "10.96.0.1",
        network: PodNetwork::Ptp,
        proxy_mode: "nftables",
    },
    Cluster {
        name: "east",
        underlay: 11,
        pod_octet: 244,
        leader: false,
        api_ip: "198.18.0.11",
        service_cidr: "10.97.0.0/16",
        kubernetes_service_ip: "10.97.0.1",
        network: PodNetwork::Ptp,
        proxy_mode: "nftables",
    },
    Cluster {
        name: "west",
        underlay: 12,
        pod_octet: 245,
        leader: false,
        api_ip: "198.18.0.12",
        service_cidr: "10.98.0.0/16",
        kubernetes_service_ip: "10.98.0.1",
        network: PodNetwork::Flannel,
        proxy_mode: "iptables",
    },
];
