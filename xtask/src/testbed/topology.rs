//! The testbed's fixed addressing (DESIGN §5). Everything lives in 198.18.0.0/15 or inside the
//! testbed's own namespaces; the host only gets a connected route to the management subnet.

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

#[derive(Clone, Copy, Debug)]
pub struct Cluster {
    pub name: &'static str,
    pub leader: bool,
    /// Address of the API server on the management subnet.
    pub api_ip: &'static str,
    pub service_cidr: &'static str,
    /// First address of the Service CIDR: the `kubernetes` Service, also a SAN of the cert.
    pub kubernetes_service_ip: &'static str,
}

impl Cluster {
    pub fn server(&self) -> String {
        format!("https://{}:6443", self.api_ip)
    }
}

pub const CLUSTERS: [Cluster; 3] = [
    Cluster {
        name: "north",
        leader: true,
        api_ip: "198.18.0.10",
        service_cidr: "10.96.0.0/16",
        kubernetes_service_ip: "10.96.0.1",
    },
    Cluster {
        name: "east",
        leader: false,
        api_ip: "198.18.0.11",
        service_cidr: "10.97.0.0/16",
        kubernetes_service_ip: "10.97.0.1",
    },
    Cluster {
        name: "west",
        leader: false,
        api_ip: "198.18.0.12",
        service_cidr: "10.98.0.0/16",
        kubernetes_service_ip: "10.98.0.1",
    },
];
