//! The dataplane's maps: the Node's role and addresses, the remote prefixes and the tunnel peers
//! (filled by the agent from the Gateway and ClusterInfoImport objects), and the gateway's SNAT
//! table (filled by the programs). Addresses are `[u8; 4]` in network order so that
//! `bpftool map dump` prints them as four readable bytes; ports are host order for the same
//! reason.

/// Geneve's IANA port, the default tunnel port.
pub const DEFAULT_TUNNEL_PORT: u16 = 6081;

/// Bytes the tunnel adds in front of an inner IPv4 packet: outer IPv4 (20), UDP (8) and Geneve
/// (8). Strait's Geneve carries IPv4 directly (protocol type 0x0800), with no inner Ethernet.
pub const ENCAP_OVERHEAD: u32 = 36;

/// How the tunnel takes a GSO packet (one that the kernel or the NIC cuts into segments after
/// Strait's programs; docs/design.md §4), from [`gso_encap`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GsoEncap {
    /// Its segments, each with the tunnel's headers in front, still fit the uplink: they keep
    /// their size (`BPF_F_ADJ_ROOM_FIXED_GSO`), as full as the path allows.
    Keep,
    /// TCP segments that would not fit (a flow whose MSS Strait did not clamp: opened before
    /// Strait was attached, or through a Pod MTU above the tunnel's): the kernel cuts them
    /// smaller by the tunnel's overhead.
    Shrink,
    /// UDP segments (`UDP_SEGMENT`, as QUIC stacks send) that would not fit: each segment is a
    /// datagram whose size the sender chose, so it cannot be cut; the sender gets
    /// fragmentation-needed (with DF or without: nothing fragments a GSO packet's segments)
    /// and sends smaller ones.
    TooBig,
}

/// [`GsoEncap`] for a GSO packet whose segments carry `gso_size` bytes of payload behind
/// `inner_headers` bytes of inner IPv4 and TCP or UDP header, tunnelled on an uplink with `mtu`
/// (0: unknown, when TCP's segments shrink as always and UDP's are sent as they are).
pub const fn gso_encap(gso_size: u32, inner_headers: u32, mtu: u32, tcp: bool) -> GsoEncap {
    let segment = ENCAP_OVERHEAD
        .saturating_add(inner_headers)
        .saturating_add(gso_size);
    if mtu != 0 && segment <= mtu {
        GsoEncap::Keep
    } else if tcp {
        GsoEncap::Shrink
    } else if mtu == 0 {
        GsoEncap::Keep
    } else {
        GsoEncap::TooBig
    }
}

/// Geneve VNI for "no label identity" (docs/design.md §4; Antrea's `UnknownLabelIdentity`).
pub const VNI_UNKNOWN: u32 = 0x00ff_ffff;

/// [`LocalConfig::role`]: not configured yet; the programs pass everything on.
pub const ROLE_NONE: u32 = 0;
/// [`LocalConfig::role`]: a regular Node; cross-cluster packets are tunnelled to the local gateway.
pub const ROLE_NODE: u32 = 1;
/// [`LocalConfig::role`]: the cluster's active Gateway Node.
pub const ROLE_GATEWAY: u32 = 2;

/// The single entry of the config map: who this Node is in the ClusterSet.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LocalConfig {
    /// [`ROLE_NONE`], [`ROLE_NODE`] or [`ROLE_GATEWAY`].
    pub role: u32,
    /// This Node's underlay address: the outer source of every packet it tunnels.
    pub node_ip: [u8; 4],
    /// The active local Gateway's `internalIP`: where regular Nodes tunnel to.
    pub gateway_internal_ip: [u8; 4],
    /// The active local Gateway's `gatewayIP`: the address cross-cluster flows are SNATed to and
    /// that remote gateways tunnel to.
    pub gateway_ip: [u8; 4],
    /// UDP destination port of the tunnel.
    pub tunnel_port: u16,
    /// A 16-bit digest of what the gateway's hairpin decides by, as the agent last wrote it:
    /// the remote routes, the peers and this config's role, addresses and tunnel port. The
    /// hairpin cache (`mc_hairpin_cache`) uses a flow's translation only under the generation
    /// it was made in.
    pub route_generation: u16,
    /// MTU of the uplink (for MSS clamping and fragmentation-needed).
    pub mtu: u32,
    /// [`CONFIG_ROUTED_VIA_GATEWAY`], [`CONFIG_STRETCHED_POLICY`], [`CONFIG_POLICY_EGRESS`],
    /// [`CONFIG_POLICY_INGRESS`], [`CONFIG_UPLINK_PEER`], [`CONFIG_MASQ_IDS`], or zero.
    pub flags: u32,
    /// A digest of the ingress policy the agent last wrote (`mc_ingress_policy`,
    /// `mc_protected_pods`): a verdict remembered in `mc_flow_verdicts` under another
    /// generation is stale and the flow is decided again.
    pub policy_generation: u32,
}

const _: () = assert!(core::mem::size_of::<LocalConfig>() == 32);

/// [`LocalConfig::flags`], regular Nodes: the kernel routes the remote prefixes via the next hop
/// toward the local gateway (the gateway itself when it shares the uplink's link), so a packet
/// for a remote prefix already carries the Ethernet addresses its tunnel packet needs and the
/// egress program sends it on without a route lookup of its own. The agent sets it only once
/// those routes are in place for the current gateway.
pub const CONFIG_ROUTED_VIA_GATEWAY: u32 = 1;

/// [`LocalConfig::flags`], the gateway: stretched NetworkPolicy is on; the ingress program
/// records the label identity of every flow a remote cluster opens (`mc_flow_ids`) for the
/// policy program.
pub const CONFIG_STRETCHED_POLICY: u32 = 2;

/// [`LocalConfig::flags`]: `mc_egress_policy` has entries for this Node's Pods (without it the
/// policy program does not look there).
pub const CONFIG_POLICY_EGRESS: u32 = 4;

/// [`LocalConfig::flags`], the gateway: `mc_protected_pods` has entries (without it no
/// remote-opened flow has anything to be decided by, and the policy program lets it pass
/// without a lookup).
pub const CONFIG_POLICY_INGRESS: u32 = 8;

/// [`LocalConfig::flags`], the gateway: its uplink is one end of a veth pair whose other end is
/// in another network namespace (containers as Nodes: kind, the testbed, the bench), so the
/// hairpin hands its packets straight to that end's ingress (`bpf_redirect_peer`) instead of
/// transmitting them on the uplink: no pass through the uplink's egress hook and qdisc, no veth
/// transmit and no backlog queue in between. Without it (any other uplink) the hairpin redirects
/// to the uplink's egress. The agent sets it from what the kernel says of the uplink (asked at
/// attach and again in the first reconcile pass at least 10 s after the last answer).
pub const CONFIG_UPLINK_PEER: u32 = 16;

/// [`LocalConfig::flags`]: stretched NetworkPolicy is on, so this Node's Pods have label IDs and
/// the masquerade program (`mc_nf_masq`, netfilter's POSTROUTING after the source NAT) records
/// in `mc_masq_ids` the identity of every new flow a Pod opens to a remote prefix that the CNI
/// or kube-proxy source-NATed (Flannel's `--ip-masq`, Calico's `natOutgoing`): the egress
/// program looks a packet up there when its source is not one of the Node's Pods.
pub const CONFIG_MASQ_IDS: u32 = 32;

/// [`LocalConfig::flags`], the gateway: traffic between gateways is encrypted
/// (`trafficEncryptionMode: wireGuard`). Tunnel packets for remote gateways go into the
/// WireGuard device that `mc_wireguard` names ([`WireGuardConfig`]), with the gateway's
/// `gatewayIP` as their source, and the ingress program takes tunnel traffic from a remote
/// gateway only as that device hands it over (marked [`WIREGUARD_MARK`]): plaintext Geneve from
/// a remote gateway's address is dropped (`drop_plaintext_from_remote`).
pub const CONFIG_WIREGUARD: u32 = 64;

/// `skb->mark` of a decrypted tunnel packet the WireGuard device's program hands to the
/// uplink's ingress: the uplink's ingress program takes it as come through WireGuard and clears
/// the mark (a packet from the wire has none at that hook). Marks never cross the wire.
pub const WIREGUARD_MARK: u32 = 0x5354_5747;

/// [`RemoteRoute::cluster`]: encryption is on and the remote cluster's gateway announces no
/// WireGuard key (its member runs without encryption, or has not published one yet): packets
/// for its prefixes are dropped, counted (`drop_wireguard_no_peer`), never sent in plaintext.
/// The low bits stay the cluster's index.
pub const ROUTE_NO_WIREGUARD_PEER: u32 = 1 << 31;

/// Value of `mc_wireguard` (one entry), the gateway with encryption on: the WireGuard device
/// and the uplink it hands decrypted tunnel packets to.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WireGuardConfig {
    /// The WireGuard device (0: not up: packets for remote gateways are dropped, counted
    /// `drop_wireguard_not_ready`).
    pub ifindex: u32,
    /// The uplink, whose ingress takes the device's decrypted tunnel packets.
    pub uplink_ifindex: u32,
    /// The uplink's MAC address: the destination of the Ethernet header those packets get
    /// (the stack takes a frame only when addressed to the device).
    pub uplink_mac: [u8; 6],
    /// WireGuard's UDP port: its own datagrams on the uplink's egress are left alone.
    pub port: u16,
}

const _: () = assert!(core::mem::size_of::<WireGuardConfig>() == 16);

/// Tunnel probes (docs/design.md §4d): the active gateway's agent sends each remote gateway,
/// every second, a Geneve packet with the OAM bit set to its tunnel port, the way its traffic
/// goes (through WireGuard when encryption is on). Inside: an IPv4/UDP packet from this
/// gateway's `gatewayIP` to the remote one's ([`PROBE_PORT`] both ways) carrying a
/// [`Probe`]. The remote gateway's programs answer it themselves (so a probe tests the path
/// and the remote dataplane, not the remote agent): the outer and inner addresses swapped, the
/// kind [`PROBE_REPLY`], sent back the same way. The prober's programs take the answer into
/// `mc_probes` ([`ProbeState`]) and drop it.
pub const PROBE_MAGIC: [u8; 8] = *b"STRAITPB";
/// [`Probe::kind`]: a probe on its way to a remote gateway.
pub const PROBE_REQUEST: u8 = 1;
/// [`Probe::kind`]: a remote gateway's answer.
pub const PROBE_REPLY: u8 = 2;
/// The inner UDP ports of a probe.
pub const PROBE_PORT: u16 = 7;
/// Geneve's OAM bit (its second byte's top bit): Strait's Geneve with it carries a probe.
pub const GENEVE_OAM: u8 = 0x80;

/// A tunnel probe's payload, after its inner IPv4 and UDP headers. Only the prober reads `seq`
/// and `sent_ns` (native byte order: the answer comes back to the machine that wrote them).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Probe {
    pub magic: [u8; 8],
    /// [`PROBE_REQUEST`] or [`PROBE_REPLY`].
    pub kind: u8,
    pub _pad: [u8; 3],
    /// The prober's sequence number.
    pub seq: u32,
    /// When the prober sent it: `CLOCK_MONOTONIC` in nanoseconds (the programs' clock).
    pub sent_ns: u64,
}

const _: () = assert!(core::mem::size_of::<Probe>() == 24);

/// Value of `mc_probes`, keyed by a remote gateway's address: the answers to this gateway's
/// probes the programs took from it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeState {
    /// Answers taken, in all.
    pub replies: u64,
    /// The last answer's round trip, in nanoseconds.
    pub rtt_ns: u64,
    /// When the last answer came (`CLOCK_MONOTONIC`, nanoseconds).
    pub last_ns: u64,
    /// The last answer's sequence number.
    pub seq: u32,
    pub _pad: u32,
}

const _: () = assert!(core::mem::size_of::<ProbeState>() == 32);

/// Remote gateways probed at once (one entry each in `mc_probes`).
pub const MAX_PROBED: u32 = 4096;

/// Value of `mc_peer_stats` (per CPU, indexed by the agent's cluster index, the `cluster` of
/// [`Peer`] and [`RemoteRoute`]): packets and bytes (whole frames, as they leave or arrive,
/// tunnel headers included) the gateway's programs sent into the tunnel to that remote
/// cluster's gateway and took from it. Indexes past the map are not counted.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeerStats {
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub rx_packets: u64,
    pub rx_bytes: u64,
}

const _: () = assert!(core::mem::size_of::<PeerStats>() == 32);

/// Entries of `mc_peer_stats`: cluster indexes 1 to 4095.
pub const MAX_PEER_STATS: u32 = 4096;

/// Value of the remote-prefix LPM trie (remote Service CIDRs, and remote Pod CIDRs when
/// Pod-to-Pod connectivity is on).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RemoteRoute {
    /// The agent's index of the remote cluster (`mc-agent maps` prints this index).
    pub cluster: u32,
    /// The remote cluster's gateway (`gatewayInfos[0].gatewayIP` of its ClusterInfoImport).
    pub gateway_ip: [u8; 4],
}

const _: () = assert!(core::mem::size_of::<RemoteRoute>() == 8);

/// [`Peer::kind`]: a remote cluster's gateway (may send tunnel traffic to the local gateway).
pub const PEER_REMOTE_GATEWAY: u32 = 1;
/// [`Peer::kind`]: a Node of the local cluster (may send tunnel traffic to the local gateway).
pub const PEER_LOCAL_NODE: u32 = 2;

/// Value of the peer map, keyed by underlay address: who may send us tunnel traffic.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Peer {
    /// [`PEER_REMOTE_GATEWAY`] or [`PEER_LOCAL_NODE`].
    pub kind: u32,
    /// For a remote gateway, the agent's index of its cluster; 0 otherwise.
    pub cluster: u32,
}

const _: () = assert!(core::mem::size_of::<Peer>() == 8);

/// Key of the SNAT table: one direction of a flow, as its packets look on the wire at the
/// gateway (before translation when leaving, before reverse translation when arriving).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FlowKey {
    pub src: [u8; 4],
    pub dst: [u8; 4],
    /// TCP/UDP source port; 0 for ICMP echo replies.
    pub src_port: u16,
    /// TCP/UDP destination port; the echo identifier for ICMP echo replies.
    pub dst_port: u16,
    /// IP protocol number (6, 17 or 1).
    pub proto: u8,
    pub _pad: [u8; 3],
}

const _: () = assert!(core::mem::size_of::<FlowKey>() == 16);

/// [`SnatEntry::flags`]: an entry for packets leaving the cluster (rewrite the source).
pub const SNAT_FORWARD: u32 = 1;
/// [`SnatEntry::flags`]: an entry for packets coming back (rewrite the destination).
pub const SNAT_REVERSE: u32 = 2;

/// Value of the SNAT table.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SnatEntry {
    /// Forward: the gateway address the source becomes. Reverse: the original source address.
    pub addr: [u8; 4],
    /// Forward: the allocated port (or echo id). Reverse: the original port (or echo id).
    pub port: u16,
    /// Forward: when a packet of the flow last made sure its reverse entry exists, in units of
    /// 2^30 ns of the coarse monotonic clock (about a second), wrapping. Reverse: 0.
    pub checked: u16,
    /// The Node that sent the flow (replies are tunnelled back to it).
    pub node: [u8; 4],
    /// [`SNAT_FORWARD`] or [`SNAT_REVERSE`].
    pub flags: u32,
}

const _: () = assert!(core::mem::size_of::<SnatEntry>() == 16);

/// Value of the next-hop cache, keyed by underlay address: the Ethernet addresses that reach it
/// out of `ifindex`, as the kernel's FIB and neighbour table gave them (`bpf_fib_lookup`), used
/// until `expires_ns` so that the hairpin and the tunnel do not look the route up per packet.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NextHop {
    /// Destination and source MAC addresses of the frame.
    pub macs: [u8; 12],
    pub ifindex: u32,
    /// `bpf_ktime_get_coarse_ns` time after which the kernel is asked again.
    pub expires_ns: u64,
}

const _: () = assert!(core::mem::size_of::<NextHop>() == 24);

/// How long a next hop learned from the kernel is used before it is looked up again: a neighbour
/// that changes its MAC address, or a route that changes, is followed within this time.
pub const NEXT_HOP_TTL_NS: u64 = 1_000_000_000;

/// Value of the Pod identity map, keyed by the IPv4 address of a Pod on this Node: the
/// ClusterSet-wide ID of the Pod's label (its LabelIdentity), which the Node's encapsulation
/// writes into the Geneve VNI of the Pod's cross-cluster packets. A Pod without one (no ID yet,
/// stretched NetworkPolicy off, a host-network Pod) is absent: its VNI is [`VNI_UNKNOWN`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PodIdentity {
    /// 1..=0xfffffe.
    pub id: u32,
}

const _: () = assert!(core::mem::size_of::<PodIdentity>() == 4);

/// Value of the gateway's flow identity map (LRU), keyed by the [`FlowKey`] of a flow a remote
/// cluster opened as it enters this Node's stack (before kube-proxy's DNAT; ICMP echo: the
/// identifier as `src_port`, `dst_port` 0): the VNI its first packets carried, the label ID of
/// the Pod that opened it ([`VNI_UNKNOWN`] when it had none). Written by the ingress program,
/// read by the policy program after the DNAT.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowIdentity {
    pub id: u32,
}

const _: () = assert!(core::mem::size_of::<FlowIdentity>() == 4);

/// Value of the gateway's verdict cache (LRU), keyed like [`FlowIdentity`]: the verdict the
/// policy program made on a flow's first packet, for the flow's later packets that conntrack
/// still calls new (a one-way UDP stream has no reply, so every packet of it is "new"). Valid
/// while the flow's conntrack entry still leads to `pod`:`port` and the policy is still the one of
/// `generation` ([`LocalConfig::policy_generation`]); the ingress program forgets it when the
/// flow arrives with another identity.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowVerdict {
    pub generation: u32,
    /// The Pod the DNAT chose and the port it receives on (the REPLY tuple's source).
    pub pod: [u8; 4],
    pub port: u16,
    /// [`ACTION_ALLOW`], [`ACTION_DROP`] or [`ACTION_REJECT`].
    pub action: u16,
    pub rule: u32,
}

const _: () = assert!(core::mem::size_of::<FlowVerdict>() == 16);

/// An entry of the gateway's per-CPU flow cache (`mc_flow_cache`, [`FLOW_CACHE_SLOTS`] per CPU,
/// a slot per flow by a hash of its key): the remote-opened flow whose packet last came through
/// this CPU in that slot, the identity it carried, and once the policy program has decided it,
/// the verdict. The ingress program and then the policy program handle each packet on the same
/// CPU (with a batch of packets received together, the ingress program runs for the batch
/// first), so a flow's packets after its first are decided without a hash-table lookup in either
/// program (the LRU maps stay for the flows the cache does not hold).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowCacheEntry {
    pub flow: FlowKey,
    /// The label ID the flow's last packet through this slot carried.
    pub id: u32,
    /// The policy digest the verdict was made under ([`LocalConfig::policy_generation`]).
    pub generation: u32,
    /// The Pod the DNAT chose and the port it receives on.
    pub pod: [u8; 4],
    pub port: u16,
    /// [`ACTION_ALLOW`], [`ACTION_DROP`], [`ACTION_REJECT`], [`CACHE_UNCOVERED`] (no
    /// ClusterSet-scoped rule covers the Pod) or [`CACHE_UNDECIDED`].
    pub action: u16,
    pub rule: u32,
    /// Packets the ingress program found in this slot since it last looked the flow up in
    /// `mc_flow_ids`: every [`FLOW_IDS_REFRESH`] it looks again, so that the shared map keeps a
    /// long flow (its LRU would evict an entry never touched) with the identity it carries.
    pub hits: u32,
}

const _: () = assert!(core::mem::size_of::<FlowCacheEntry>() == 40);

/// How often (in packets found in the flow cache) the ingress program refreshes a flow's entry
/// of `mc_flow_ids` (a power of two).
pub const FLOW_IDS_REFRESH: u32 = 256;

/// [`FlowCacheEntry::action`]: not decided yet (or decided no more: the flow came with another
/// identity).
pub const CACHE_UNDECIDED: u16 = 0;
/// [`FlowCacheEntry::action`]: none of the policy's business (the Pod is not covered).
pub const CACHE_UNCOVERED: u16 = 0xffff;
/// Slots of the per-CPU flow cache (a power of two).
pub const FLOW_CACHE_SLOTS: u32 = 1024;

/// An entry of the gateway's per-CPU hairpin cache (`mc_hairpin_cache`,
/// [`HAIRPIN_CACHE_SLOTS`] per CPU, a slot by a hash of the inner flow and the sender): how the
/// hairpin last handled a TCP or UDP packet of `flow` from `sender` on this CPU, so that the
/// flow's next packets skip the peer, route, SNAT and next-hop lookups. Valid while
/// [`LocalConfig::route_generation`] is `generation`, the packet arrives on `ifindex` and the
/// coarse clock is before `until_ns` (the end of the clock's second in which it was made, and
/// no later than the next hop's expiry): the SNAT table's once-a-second check and the next hop's
/// refresh run as often as without the cache.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HairpinCacheEntry {
    /// The inner packet's flow as it arrives.
    pub flow: FlowKey,
    /// The outer source: the local Node or remote gateway that sent it.
    pub sender: [u8; 4],
    pub generation: u16,
    /// [`HAIRPIN_SNAT`] or [`HAIRPIN_UNSNAT`]; 0: an empty slot.
    pub kind: u16,
    pub until_ns: u64,
    /// The inner address and port after the translation (the source for [`HAIRPIN_SNAT`], the
    /// destination for [`HAIRPIN_UNSNAT`]).
    pub addr: [u8; 4],
    pub port: u16,
    pub _pad: u16,
    /// The outer destination: the remote gateway or the Node the packet is sent on to.
    pub dst: [u8; 4],
    pub ifindex: u32,
    /// Destination and source MAC addresses of the frame.
    pub macs: [u8; 12],
    /// The remote cluster's index ([`PeerStats`]): where the packet goes ([`HAIRPIN_SNAT`]) or
    /// comes from ([`HAIRPIN_UNSNAT`]).
    pub cluster: u32,
}

const _: () = assert!(core::mem::size_of::<HairpinCacheEntry>() == 64);

/// [`HairpinCacheEntry::kind`]: a flow from a local Node, SNATed and sent to a remote gateway.
pub const HAIRPIN_SNAT: u16 = 1;
/// [`HairpinCacheEntry::kind`]: a reply from a remote gateway, translated back and sent to the
/// Node that opened the flow.
pub const HAIRPIN_UNSNAT: u16 = 2;
/// Slots of the per-CPU hairpin cache (a power of two).
pub const HAIRPIN_CACHE_SLOTS: u32 = 512;

/// Key of the ingress policy map: a Pod of this cluster that a ClusterSet-scoped ingress rule
/// covers, a source label ID and the destination port and protocol as the Pod receives them
/// (after the DNAT). Port and protocol 0: every port no rule of the Pod names.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PolicyKey {
    pub pod: [u8; 4],
    pub id: u32,
    pub port: u16,
    pub proto: u8,
    pub _pad: u8,
}

const _: () = assert!(core::mem::size_of::<PolicyKey>() == 12);

/// Key of the egress policy map: a Pod of this Node and the address of a multi-cluster Service
/// (its ServiceImport's IP, the ClusterIP of `antrea-mc-<name>`) that an egress `toServices`
/// rule of `scope: ClusterSet` names, as the Pod's first packet has them, before the DNAT.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EgressKey {
    pub src: [u8; 4],
    pub dst: [u8; 4],
}

const _: () = assert!(core::mem::size_of::<EgressKey>() == 8);

/// [`PolicyVerdict::action`]: the flow may open.
pub const ACTION_ALLOW: u32 = 1;
/// [`PolicyVerdict::action`]: the flow's packets are dropped.
pub const ACTION_DROP: u32 = 2;
/// [`PolicyVerdict::action`]: refused (Antrea's `Reject`): dropped, and the agent answers the
/// packet (TCP RST, or ICMP unreachable) from a [`RejectEvent`] (docs/design.md §4b).
pub const ACTION_REJECT: u32 = 3;
/// [`PolicyVerdict::action`] in `mc_protected_pods` only: the Pod's rules did not fit the
/// ingress policy map, so no flow to it can be decided: every flow a remote cluster opens to it
/// is dropped (`policy_drop_map_full`), whatever its identity (fail closed).
pub const ACTION_REFUSE_ALL: u32 = 4;

/// Bytes of a rejected packet the policy program hands the agent, from its IPv4 header on.
pub const REJECT_CAPTURE: usize = 64;
/// Size of the rejected-packet ring buffer (bytes; a power of 2, a multiple of the page size).
pub const REJECT_RING_BYTES: u32 = 65_536;

/// What the policy program tells the agent of a packet a `Reject` rule refused
/// ([`crate::maps::REJECTS`], a ring buffer): enough to answer it as its destination would.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RejectEvent {
    /// The flow's conntrack ORIGINAL tuple: addresses and ports as the client sent them (before
    /// the DNAT).
    pub flow: FlowKey,
    pub rule: u32,
    /// The packet's length (`skb->len`): how many bytes of `packet` are the packet's.
    pub len: u32,
    /// The packet from its IPv4 header on, as netfilter's PREROUTING has it (after the DNAT).
    pub packet: [u8; REJECT_CAPTURE],
}

const _: () = assert!(core::mem::size_of::<RejectEvent>() == 24 + REJECT_CAPTURE);

/// Value of the ingress policy map and of the protected-Pod map: what a new flow gets, and the
/// rule that decided it (an index of the rule counters; the agent names each index).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PolicyVerdict {
    /// [`ACTION_ALLOW`], [`ACTION_DROP`] or [`ACTION_REJECT`].
    pub action: u32,
    pub rule: u32,
}

const _: () = assert!(core::mem::size_of::<PolicyVerdict>() == 8);

/// Placeholders in the policy program's instructions that the agent replaces, when it loads the
/// program, with what the running kernel's BTF says (docs/design.md §4b): the program reads the
/// kernel's `sk_buff` and `nf_conn` by plain loads, whose offsets the verifier wants constant,
/// and no helper call is left on a decided flow's path.
pub mod nf_patch {
    /// A load's offset from the `sk_buff`: `_nfct` (the conntrack entry, ctinfo in the low 3
    /// bits).
    pub const SKB_NFCT: i16 = 0x7e00;
    /// `sk_buff.len`.
    pub const SKB_LEN: i16 = 0x7e08;
    /// `sk_buff.data` (a rejected packet's first byte: its IPv4 header at PREROUTING).
    pub const SKB_DATA: i16 = 0x7e10;
    /// A load's offset from the `nf_conn`: the ORIGINAL direction's `nf_conntrack_tuple`, plus
    /// an offset inside it ([`super::ct_tuple`]).
    pub const CT_ORIGINAL: i16 = 0x7c00;
    /// The REPLY direction's tuple (its source is the DNATed destination), plus an offset inside.
    pub const CT_REPLY: i16 = 0x7d00;
    /// A helper call's ID that stands for the `bpf_rdonly_cast` kfunc (the conntrack pointer in
    /// `_nfct` is a number to the verifier; the cast makes it a read-only `struct nf_conn *`).
    pub const RDONLY_CAST: u32 = 0x7ffe_0001;
    /// An immediate that stands for `struct nf_conn`'s BTF type ID (the cast's second argument).
    pub const NF_CONN_TYPE: u32 = 0x7ffe_0002;
}

/// Offsets inside `struct nf_conntrack_tuple`, unchanged since Linux 2.6.
pub mod ct_tuple {
    pub const SRC_IP: u32 = 0;
    /// The source port, or the ICMP echo identifier (network order).
    pub const SRC_PORT: u32 = 16;
    /// `src.l3num`: 2 for IPv4.
    pub const L3NUM: u32 = 18;
    pub const DST_IP: u32 = 20;
    /// The destination port, or the ICMP type and code.
    pub const DST_PORT: u32 = 36;
    pub const PROTO: u32 = 38;
    /// The bytes up to and with `dst.protonum` (the offsets the policy program reads in a tuple,
    /// and the span of each tuple's placeholder offsets, `nf_patch`).
    pub const LEN: usize = 40;
}

/// conntrack's `IP_CT_NEW`: the ctinfo of a flow's packets before its first reply.
pub const IP_CT_NEW: u64 = 2;

/// Rules the per-rule counters can name.
pub const MAX_POLICY_RULES: u32 = 1024;
/// Remote-opened flows the gateway remembers the identity of.
pub const MAX_FLOW_IDENTITIES: u32 = 65_536;
/// Flows whose verdict the gateway remembers.
pub const MAX_FLOW_VERDICTS: u32 = 65_536;
/// (protected Pod, source identity) pairs with a verdict.
pub const MAX_POLICY_ENTRIES: u32 = 262_144;
/// (Pod of this Node, multi-cluster Service address) pairs with an egress verdict.
pub const MAX_EGRESS_ENTRIES: u32 = 65_536;
/// Pods of the cluster a ClusterSet-scoped ingress rule covers.
pub const MAX_PROTECTED_PODS: u32 = 16_384;

/// Key of the gateway's exposure map (`mc_exposed`): a destination in this cluster that remote
/// clusters may open flows to, as the flow's first packet names it (before kube-proxy's DNAT):
/// an exported Service's ClusterIP with one of its ports, or one of its endpoints' addresses
/// with an endpoint port. Port 0 stands for the address's packets without a port to check (a
/// later fragment; ICMP, whose key has protocol 1): the agent writes it beside every address's
/// ports.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExposedKey {
    pub addr: [u8; 4],
    /// Host order.
    pub port: u16,
    pub proto: u8,
    pub _pad: u8,
}

const _: () = assert!(core::mem::size_of::<ExposedKey>() == 8);

/// [`Exposed::kind`]: an exported Service's ClusterIP.
pub const EXPOSED_SERVICE: u32 = 1;
/// [`Exposed::kind`]: an endpoint of an exported Service (what `endpointIPType: PodIP` and
/// headless exports hand out; kube-proxy leads a ClusterIP's flows to the same Pods and ports).
pub const EXPOSED_ENDPOINT: u32 = 2;
/// [`Exposed::kind`]: a Pod CIDR of this cluster, with Pod-to-Pod connectivity on
/// (`mc_exposed_prefixes`).
pub const EXPOSED_POD_CIDR: u32 = 3;

/// Value of the exposure maps: why remote clusters may reach the destination (read by people
/// with `bpftool map dump`; the programs only ask whether an entry exists).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Exposed {
    /// [`EXPOSED_SERVICE`], [`EXPOSED_ENDPOINT`] or [`EXPOSED_POD_CIDR`].
    pub kind: u32,
}

const _: () = assert!(core::mem::size_of::<Exposed>() == 4);

/// Key of the gateway's sender-identity map (`mc_sender_ids`, stretched NetworkPolicy): an inner
/// source address a local Node's tunnel packet may come from and a label ID it may claim in its
/// VNI. Each Pod of the cluster with an ID gives (its address, its ID) and (its Node's address,
/// its ID): the latter for the flows the CNI masqueraded, which carry the Pod's ID from the
/// Node's address.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SenderIdKey {
    pub addr: [u8; 4],
    pub id: u32,
}

const _: () = assert!(core::mem::size_of::<SenderIdKey>() == 8);

/// Value of the sender-identity map: the Node that may send it (its InternalIP, the outer
/// source of its tunnel packets).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SenderId {
    pub node: [u8; 4],
}

const _: () = assert!(core::mem::size_of::<SenderId>() == 4);

/// (address, label ID) pairs the gateway checks local Nodes' VNIs against.
pub const MAX_SENDER_IDS: u32 = 131_072;

/// (address, protocol, port) destinations the gateway lets remote clusters open flows to.
pub const MAX_EXPOSED: u32 = 65_536;
/// This cluster's Pod CIDRs that remote clusters may reach (Pod-to-Pod connectivity).
pub const MAX_EXPOSED_PREFIXES: u32 = 1024;

/// Masqueraded flows whose label identity a Node remembers (`mc_masq_ids`).
pub const MAX_MASQ_FLOWS: u32 = 65_536;

/// Ports (and echo identifiers) the gateway allocates for SNAT.
pub const SNAT_PORT_MIN: u16 = 32768;
pub const SNAT_PORT_MAX: u16 = 65535;
/// Candidate ports tried for a new flow before it is dropped as `drop_snat_exhausted`.
pub const SNAT_PORT_TRIES: u32 = 16;

/// Capacities.
pub const MAX_REMOTE_PREFIXES: u32 = 4096;
pub const MAX_PEERS: u32 = 16384;
pub const MAX_SNAT_ENTRIES: u32 = 262_144;
pub const MAX_NEXT_HOPS: u32 = 4096;
/// Pods of one Node (Kubernetes' default is 110 per Node).
pub const MAX_POD_IDENTITIES: u32 = 4096;

#[cfg(feature = "user")]
mod pod {
    // SAFETY (all): `#[repr(C)]`, plain integer fields, explicit padding (sizes asserted above).
    unsafe impl aya::Pod for super::LocalConfig {}
    unsafe impl aya::Pod for super::RemoteRoute {}
    unsafe impl aya::Pod for super::Peer {}
    unsafe impl aya::Pod for super::WireGuardConfig {}
    unsafe impl aya::Pod for super::Probe {}
    unsafe impl aya::Pod for super::ProbeState {}
    unsafe impl aya::Pod for super::PeerStats {}
    unsafe impl aya::Pod for super::FlowKey {}
    unsafe impl aya::Pod for super::SnatEntry {}
    unsafe impl aya::Pod for super::NextHop {}
    unsafe impl aya::Pod for super::HairpinCacheEntry {}
    unsafe impl aya::Pod for super::PodIdentity {}
    unsafe impl aya::Pod for super::FlowIdentity {}
    unsafe impl aya::Pod for super::FlowVerdict {}
    unsafe impl aya::Pod for super::FlowCacheEntry {}
    unsafe impl aya::Pod for super::PolicyKey {}
    unsafe impl aya::Pod for super::EgressKey {}
    unsafe impl aya::Pod for super::PolicyVerdict {}
    unsafe impl aya::Pod for super::RejectEvent {}
    unsafe impl aya::Pod for super::ExposedKey {}
    unsafe impl aya::Pod for super::Exposed {}
    unsafe impl aya::Pod for super::SenderIdKey {}
    unsafe impl aya::Pod for super::SenderId {}
}

#[cfg(test)]
mod tests {
    use super::{GsoEncap, gso_encap};

    /// IPv4 (20) and TCP with timestamps (32), or UDP (8).
    const TCP_HEADERS: u32 = 52;
    const UDP_HEADERS: u32 = 28;

    #[test]
    fn segments_that_fit_the_uplink_keep_their_size() {
        // A clamped flow on a 1500-byte uplink: MSS 1424, 1412 bytes per segment with
        // timestamps; 36 + 52 + 1412 = 1500, exactly the uplink's MTU.
        assert_eq!(gso_encap(1412, TCP_HEADERS, 1500, true), GsoEncap::Keep);
        assert_eq!(gso_encap(1200, UDP_HEADERS, 1500, false), GsoEncap::Keep);
        assert_eq!(gso_encap(1436, UDP_HEADERS, 1500, false), GsoEncap::Keep);
    }

    #[test]
    fn tcp_segments_too_large_shrink_and_udp_ones_are_refused() {
        // A flow opened before Strait (MSS 1460 - 12): one byte over is over.
        assert_eq!(gso_encap(1448, TCP_HEADERS, 1500, true), GsoEncap::Shrink);
        assert_eq!(gso_encap(1413, TCP_HEADERS, 1500, true), GsoEncap::Shrink);
        assert_eq!(gso_encap(1437, UDP_HEADERS, 1500, false), GsoEncap::TooBig);
        assert_eq!(
            gso_encap(u32::MAX, UDP_HEADERS, 9000, false),
            GsoEncap::TooBig
        );
    }

    #[test]
    fn an_unknown_mtu_changes_nothing_from_before() {
        assert_eq!(gso_encap(1412, TCP_HEADERS, 0, true), GsoEncap::Shrink);
        assert_eq!(gso_encap(1448, UDP_HEADERS, 0, false), GsoEncap::Keep);
    }
}
