//! Types and constants shared by the eBPF programs (`mc-ebpf`) and user space (`mc-agent`).
//!
//! Every type that crosses the kernel/user boundary is `#[repr(C)]`, `Copy`, has no implicit
//! padding (a `const` assertion checks each size) and implements `aya::Pod` only with the `user`
//! feature. Changing a layout means bumping [`PIN_VERSION`], because pinned maps outlive the agent.
#![no_std]

pub mod counters;
pub mod dataplane;

pub use counters::{Counter, CounterValue};

/// Version component of the pin directory (`/sys/fs/bpf/mc/<PIN_VERSION>/`). Bump it whenever the
/// layout of a pinned map changes, so a new agent never reuses a map it would misread.
pub const PIN_VERSION: &str = "v1";

/// Default pin root on a Node.
pub const DEFAULT_PIN_ROOT: &str = "/sys/fs/bpf/mc/v1";

/// Names of the programs in the eBPF object (at most 15 characters: the kernel truncates).
pub mod programs {
    /// TC classifier on the uplink's ingress: tunnel traffic from local Nodes and remote gateways.
    pub const INGRESS: &str = "mc_ingress";
    /// TC classifier on the uplink's egress: packets for remote clusters get tunnelled.
    pub const EGRESS: &str = "mc_egress";
    /// TC classifier on the WireGuard device's ingress (encryption on): decrypted tunnel
    /// packets, handed to the uplink's ingress.
    pub const WIREGUARD_INGRESS: &str = "mc_wg_ingress";
}

/// Names of the maps in the eBPF object; they are also the file names of their pins.
pub mod maps {
    /// Per-CPU verdict and drop-reason counters ([`crate::Counter`] indexes it).
    pub const COUNTERS: &str = "mc_counters";
    /// The Node's role and addresses ([`crate::dataplane::LocalConfig`], one entry).
    pub const CONFIG: &str = "mc_config";
    /// Remote prefixes (LPM trie) -> [`crate::dataplane::RemoteRoute`].
    pub const ROUTES: &str = "mc_routes";
    /// Underlay address -> [`crate::dataplane::Peer`]: who may send tunnel traffic.
    pub const PEERS: &str = "mc_peers";
    /// The gateway's SNAT table (LRU): [`crate::dataplane::FlowKey`] ->
    /// [`crate::dataplane::SnatEntry`], both directions of every flow.
    pub const SNAT: &str = "mc_snat";
    /// Underlay address -> [`crate::dataplane::NextHop`] (LRU): the Ethernet addresses the
    /// programs last learned from the kernel for it.
    pub const NEXT_HOPS: &str = "mc_next_hops";
    /// Pod IPv4 address of this Node -> [`crate::dataplane::PodIdentity`]: the label ID its
    /// tunnelled packets carry in the VNI.
    pub const POD_IDS: &str = "mc_pod_ids";
    /// The gateway's remote-opened flows (LRU): [`crate::dataplane::FlowKey`] ->
    /// [`crate::dataplane::FlowIdentity`], the label ID they arrived with.
    pub const FLOW_IDS: &str = "mc_flow_ids";
    /// The gateway's verdicts on remote-opened flows (LRU): [`crate::dataplane::FlowKey`] ->
    /// [`crate::dataplane::FlowVerdict`], for the packets of a flow conntrack still calls new.
    pub const FLOW_VERDICTS: &str = "mc_flow_verdicts";
    /// The gateway's per-CPU flow cache: slot -> [`crate::dataplane::FlowCacheEntry`], the
    /// identity and the verdict of the flow that last used the slot on each CPU.
    pub const FLOW_CACHE: &str = "mc_flow_cache";
    /// The gateway's per-CPU hairpin cache: slot -> [`crate::dataplane::HairpinCacheEntry`],
    /// the translation and next hop of the flow that last used the slot on each CPU.
    pub const HAIRPIN_CACHE: &str = "mc_hairpin_cache";
    /// [`crate::dataplane::PolicyKey`] (protected Pod, source ID) ->
    /// [`crate::dataplane::PolicyVerdict`]: ClusterSet-scoped ingress rules, compiled.
    pub const INGRESS_POLICY: &str = "mc_ingress_policy";
    /// [`crate::dataplane::EgressKey`] (this Node's Pod, a multi-cluster Service's address) ->
    /// [`crate::dataplane::PolicyVerdict`]: egress `toServices` rules of `scope: ClusterSet`.
    pub const EGRESS_POLICY: &str = "mc_egress_policy";
    /// Pod address -> [`crate::dataplane::PolicyVerdict`] for an unknown identity: the Pods a
    /// ClusterSet-scoped ingress rule covers.
    pub const PROTECTED_PODS: &str = "mc_protected_pods";
    /// Per-CPU packets and bytes per policy rule (index: [`crate::dataplane::PolicyVerdict::rule`]).
    pub const RULE_COUNTERS: &str = "mc_rule_counters";
    /// Ring buffer of [`crate::dataplane::RejectEvent`]: packets `Reject` rules refused, for
    /// the agent to answer.
    pub const REJECTS: &str = "mc_rejects";
    /// Flows of this Node's Pods that were source-NATed on their way out (LRU):
    /// [`crate::dataplane::FlowKey`] as the uplink sees it, after the NAT ->
    /// [`crate::dataplane::PodIdentity`] of the Pod that opened it.
    pub const MASQ_IDS: &str = "mc_masq_ids";
    /// [`crate::dataplane::ExposedKey`] (address, port, protocol) ->
    /// [`crate::dataplane::Exposed`]: what this cluster exported, the only destinations the
    /// gateway lets remote clusters open flows to (besides `EXPOSED_PREFIXES`).
    pub const EXPOSED: &str = "mc_exposed";
    /// This cluster's Pod CIDRs (LPM trie) -> [`crate::dataplane::Exposed`], with Pod-to-Pod
    /// connectivity on: remote clusters may open flows to any of their addresses.
    pub const EXPOSED_PREFIXES: &str = "mc_exposed_prefixes";
    /// The gateway, with stretched NetworkPolicy: [`crate::dataplane::SenderIdKey`] (inner
    /// source, label ID) -> [`crate::dataplane::SenderId`], the Node that may claim that ID for
    /// that source in its VNI.
    pub const SENDER_IDS: &str = "mc_sender_ids";
    /// The gateway with encryption on: [`crate::dataplane::WireGuardConfig`] (one entry).
    pub const WIREGUARD: &str = "mc_wireguard";
    /// The gateway: remote gateway address -> [`crate::dataplane::ProbeState`], the answers to
    /// the agent's tunnel probes the programs took (tunnel health, docs/design.md §4d).
    pub const PROBES: &str = "mc_probes";
    /// The gateway, per CPU: agent's cluster index -> [`crate::dataplane::PeerStats`], what
    /// its programs sent into the tunnel to each remote cluster and took from it.
    pub const PEER_STATS: &str = "mc_peer_stats";
    /// Maps an earlier agent pinned that the programs no longer have (the policy program's
    /// kernel offsets, now patched into its instructions): removed when the agent starts and
    /// when it removes its maps.
    pub const RETIRED: &[&str] = &["mc_kernel", "mc_skb"];
    /// Every map the agent pins, for iteration.
    pub const ALL: &[&str] = &[
        COUNTERS,
        CONFIG,
        ROUTES,
        PEERS,
        SNAT,
        NEXT_HOPS,
        POD_IDS,
        FLOW_IDS,
        FLOW_VERDICTS,
        FLOW_CACHE,
        HAIRPIN_CACHE,
        INGRESS_POLICY,
        EGRESS_POLICY,
        PROTECTED_PODS,
        RULE_COUNTERS,
        REJECTS,
        MASQ_IDS,
        EXPOSED,
        EXPOSED_PREFIXES,
        SENDER_IDS,
        WIREGUARD,
        PROBES,
        PEER_STATS,
    ];
}
