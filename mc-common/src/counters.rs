//! Per-CPU counters: one slot per verdict or drop reason.

/// Packets and bytes seen for one verdict or reason, on one CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CounterValue {
    pub packets: u64,
    pub bytes: u64,
}

const _: () = assert!(core::mem::size_of::<CounterValue>() == 16);

#[cfg(feature = "user")]
// SAFETY: `#[repr(C)]`, two u64 fields, no padding (size asserted above).
unsafe impl aya::Pod for CounterValue {}

/// Number of slots in the counters map. Larger than the number of [`Counter`]s so new reasons can
/// be added without changing the map's layout (and therefore without a new pin version).
pub const COUNTER_SLOTS: u32 = 64;

/// Declares [`Counter`] with its stable key, name and whether it is a drop, in one table.
macro_rules! counters {
    ($( $(#[$doc:meta])* $variant:ident = $key:literal, $name:literal, $drop:literal; )*) => {
        /// Every verdict and drop reason the programs count. The discriminant is the key in the
        /// counters map; it never changes once released.
        #[repr(u32)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Counter {
            $( $(#[$doc])* $variant = $key, )*
        }

        impl Counter {
            /// Every counter, in key order.
            pub const ALL: &'static [Counter] = &[$(Counter::$variant),*];

            /// Stable name, used in metrics labels and by `mc-agent counters`.
            pub const fn name(self) -> &'static str {
                match self { $(Counter::$variant => $name,)* }
            }

            /// Whether packets counted here were dropped.
            pub const fn is_drop(self) -> bool {
                match self { $(Counter::$variant => $drop,)* }
            }
        }
    };
}

counters! {
    /// A frame that is not IPv4 (ARP, IPv6, ...): not Strait's business, passed on.
    PassNotIpv4 = 0, "pass_not_ipv4", false;
    /// A well-formed IPv4 packet with nothing for Strait to do, passed on.
    PassIpv4 = 1, "pass_ipv4", false;
    /// The frame ends inside a header it announces, or before the end its IPv4 total length
    /// gives (an inner packet before its outer one's end; an ICMP error's quote past the error).
    DropTruncated = 2, "drop_truncated", true;
    /// IPv4 header with a wrong version, a header length under 20 bytes or a total length
    /// shorter than its header.
    DropBadIpv4Header = 3, "drop_bad_ipv4_header", true;
    /// Regular Node, egress: a packet for a remote cluster tunnelled to the local gateway.
    TxToGateway = 4, "tx_to_gateway", false;
    /// Gateway, egress: a packet from the gateway Node itself for a remote prefix, SNATed and
    /// tunnelled to the remote gateway.
    TxSnatToRemote = 5, "tx_snat_to_remote", false;
    /// Gateway, egress: a reply to a flow a remote cluster opened, tunnelled to its gateway.
    TxReplyToRemote = 6, "tx_reply_to_remote", false;
    /// Egress: a packet this Node's programs already encapsulated, left alone.
    PassOwnTunnel = 7, "pass_own_tunnel", false;
    /// Regular Node, ingress: tunnel traffic from the local gateway, decapsulated to the stack.
    RxFromGateway = 8, "rx_from_gateway", false;
    /// Gateway, ingress: a local Node's packet for a remote prefix, SNATed and sent on to the
    /// remote gateway (the hairpin; it never enters the stack).
    HairpinSnat = 9, "hairpin_snat", false;
    /// Gateway, ingress: a reply from a remote gateway, SNAT reversed and tunnelled back to the
    /// local Node that sent the flow.
    HairpinUnsnat = 10, "hairpin_unsnat", false;
    /// Gateway, ingress: a reply from a remote gateway for a flow of the gateway Node itself,
    /// SNAT reversed and passed to the stack.
    RxUnsnatLocal = 11, "rx_unsnat_local", false;
    /// Gateway, ingress: a flow a remote cluster opened (to a local ClusterIP or Pod),
    /// decapsulated to the stack.
    RxFromRemote = 12, "rx_from_remote", false;
    /// Gateway, ingress: a local Node's reply to a remote-opened flow, decapsulated to the stack
    /// (conntrack there reverses kube-proxy's DNAT).
    RxReplyFromNode = 13, "rx_reply_from_node", false;
    /// Gateway, ingress: Strait's tunnel packet (Geneve version 0 carrying IPv4 on the tunnel
    /// port) from an address that is neither a local Node nor a remote gateway.
    DropUnknownPeer = 14, "drop_unknown_peer", true;
    /// Strait's Geneve (from a peer, version 0, IPv4 inside) whose inner IPv4 header does not
    /// parse.
    DropBadGeneve = 15, "drop_bad_geneve", true;
    /// A reply to the gateway address with no SNAT entry (expired, or never ours).
    DropNoSnatEntry = 16, "drop_no_snat_entry", true;
    /// No free SNAT port for a new flow after every try.
    DropSnatExhausted = 17, "drop_snat_exhausted", true;
    /// A protocol the gateway cannot SNAT (not TCP, UDP, ICMP echo, or an ICMP error about one
    /// of those).
    DropUnsupportedProto = 18, "drop_unsupported_proto", true;
    /// A non-first IPv4 fragment: it has no ports to translate.
    DropFragment = 19, "drop_fragment", true;
    /// A local Node tunnelled a packet whose inner destination is not remote.
    DropNotRemote = 20, "drop_not_remote", true;
    /// The kernel refused to grow or shrink the packet (`bpf_skb_adjust_room`) or to rewrite it.
    DropRewriteFailed = 21, "drop_rewrite_failed", true;
    /// Tunnel traffic arrived while this Node has no role yet (the agent has not configured it).
    PassNotConfigured = 22, "pass_not_configured", false;
    /// An oversize packet with DF set for the tunnel: answered with ICMP fragmentation-needed
    /// (the packet itself is not sent).
    TxFragNeeded = 23, "tx_frag_needed", false;
    /// An oversize packet for the tunnel that cannot be answered with fragmentation-needed (no
    /// DF, IP options, or itself an ICMP error), or a GSO packet too large for an outer IPv4
    /// length (BIG TCP beyond 64 KiB): dropped.
    DropTooBig = 24, "drop_too_big", true;
    /// Not a verdict: SYNs and SYN-ACKs whose MSS was lowered to fit the tunnel (each is also
    /// counted under its verdict).
    TcpMssClamped = 25, "tcp_mss_clamped", false;
    /// Not a verdict: ICMP errors (destination unreachable, time exceeded, parameter problem)
    /// about a SNATed flow, translated with it (each is also counted under its verdict).
    IcmpErrorTranslated = 26, "icmp_error_translated", false;
    /// Gateway, from a remote gateway: a packet that gateway cannot have sent on its cluster's
    /// behalf. A flow its cluster opens carries its own address as inner source (it SNATs
    /// them); a reply, or an ICMP error, about a flow of ours comes from the gateway of the
    /// cluster that flow went to. Anything else would let one member inject traffic under
    /// another's or a local address.
    DropSpoofedSource = 27, "drop_spoofed_source", true;
    /// Gateway, from a remote gateway: a flow its cluster opened to an address that is not this
    /// cluster's to serve: another remote cluster's prefix (the gateway relays nothing between
    /// members), or a Node's or gateway's own address.
    DropNotLocal = 28, "drop_not_local", true;
    /// UDP to the tunnel port that is not Strait's: on a regular Node from an address that is
    /// not its gateway, or not Geneve version 0 carrying IPv4 (a CNI tunnelling Ethernet on
    /// the same port between its Nodes, anyone else's datagram, a fragment). Left to the kernel
    /// untouched: Strait never decapsulates it.
    PassForeignTunnel = 29, "pass_foreign_tunnel", false;
    /// Gateway, the policy program after kube-proxy's DNAT (not one of the uplink programs'
    /// verdicts): a new flow a remote cluster opened to a Pod a ClusterSet-scoped ingress rule
    /// covers, allowed (by a rule, or matched by none).
    PolicyAllow = 30, "policy_allow", false;
    /// As `policy_allow`: dropped by a `Drop` rule.
    PolicyDrop = 31, "policy_drop", true;
    /// As `policy_allow`: refused by a `Reject` rule (dropped; the agent answers it with a TCP
    /// RST or an ICMP unreachable).
    PolicyReject = 32, "policy_reject", true;
    /// As `policy_allow`: the flow came without a label identity (VNI 0xffffff): dropped, as
    /// Antrea does towards Pods that ClusterSet-scoped ingress rules cover.
    PolicyDropUnknownIdentity = 33, "policy_drop_unknown_identity", true;
    /// A packet counted under `policy_reject` that the agent will not answer: the ring buffer
    /// was full, or the packet could not be read (not a second drop).
    PolicyRejectUnanswered = 34, "policy_reject_unanswered", false;
    /// As `policy_allow`: a flow from a remote gateway to a covered Pod whose identity the
    /// gateway did not keep (`mc_flow_ids` full, its entry evicted): it cannot be decided
    /// exactly, so it is dropped.
    PolicyDropNoFlowIdentity = 35, "policy_drop_no_flow_identity", true;
    /// A tunnel packet that reached decapsulation as one GSO packet the kernel cannot cut
    /// correctly once the tunnel is gone: UDP datagrams sent as one (`UDP_SEGMENT`, as QUIC
    /// stacks send) that nothing cut into wire packets on the way (virtual links within one
    /// host, or a receive offload that merged them again), which Linux (through 6.18) keeps
    /// marked as encapsulated after `bpf_skb_adjust_room` removes the tunnel and then fails to
    /// segment, losing them uncounted; or several tunnel packets a receive offload (UDP GRO
    /// forwarding) merged behind one outer header, of which only the first would be
    /// decapsulated. Dropped here instead, counted.
    DropGsoUnsplit = 36, "drop_gso_unsplit", true;
    /// Not a verdict: with stretched NetworkPolicy, a packet for a remote prefix whose source
    /// is not one of the Node's Pods but whose flow a Pod opened and the CNI (or kube-proxy)
    /// masqueraded: its VNI carries that Pod's label ID, found through conntrack
    /// (`mc_masq_ids`). Each is also counted under its verdict.
    TxIdentityViaConntrack = 37, "tx_identity_via_conntrack", false;
    /// Not a verdict: with stretched NetworkPolicy, a packet for a remote prefix with no label
    /// identity to carry (a host-network process, or a flow source-NATed where Strait cannot
    /// see it): its VNI says unknown, and ClusterSet-scoped ingress rules of the receiving
    /// cluster refuse it. Each is also counted under its verdict.
    TxIdentityUnknown = 38, "tx_identity_unknown", false;
    /// Gateway, from a remote gateway: a flow its cluster opened to an address of this cluster
    /// that was not exported: not an exported Service's ClusterIP and port, not one of its
    /// endpoints' addresses and ports, not a Pod CIDR with Pod-to-Pod connectivity on (the
    /// API server's `kubernetes` Service, an unexported Service, a Pod, a host the gateway Node
    /// can route to). Replies to flows this cluster opened are not checked here.
    DropNotExported = 39, "drop_not_exported", true;
    /// As `policy_allow`: a flow to a Pod whose ClusterSet-scoped ingress rules did not fit the
    /// gateway's policy map: it cannot be decided, so it is dropped (the policy's
    /// `EnforcedByStrait` condition names the Pods).
    PolicyDropMapFull = 40, "policy_drop_map_full", true;
    /// Not a verdict: the gateway, with stretched NetworkPolicy: a local Node's tunnel packet
    /// for a remote cluster whose VNI claims a label identity its inner source does not have
    /// (not the ID of the Pod with that address on that Node, nor, from the Node's own address,
    /// the ID of one of its Pods): sent on with the VNI "unknown" instead, which
    /// ClusterSet-scoped ingress rules refuse. Each is also counted under its verdict.
    IdentityRewritten = 41, "identity_rewritten", false;
    /// Not a verdict of the uplink's programs: the WireGuard device's program handed a
    /// decrypted tunnel packet from a remote gateway to the uplink's ingress (where it is
    /// counted again under its verdict).
    RxWireGuard = 42, "rx_wireguard", false;
    /// Gateway, encryption on: Strait's tunnel packet from a remote gateway's address that did
    /// not come through WireGuard (plaintext on the underlay: a spoofed source, or a member
    /// running without encryption).
    DropPlaintextFromRemote = 43, "drop_plaintext_from_remote", true;
    /// Gateway, encryption on: a tunnel packet for a remote gateway while the WireGuard device
    /// is not up (never sent in plaintext).
    DropWireGuardNotReady = 44, "drop_wireguard_not_ready", true;
    /// Gateway, encryption on: a packet for a remote cluster whose gateway announces no
    /// WireGuard key (its member runs without encryption, or has not published its key yet).
    DropWireGuardNoPeer = 45, "drop_wireguard_no_peer", true;
    /// The WireGuard device's program: a decrypted packet that is not Strait's tunnel traffic
    /// to this gateway (a peer may only tunnel, not reach the gateway Node itself).
    DropWireGuardNotTunnel = 46, "drop_wireguard_not_tunnel", true;
    /// Egress, encryption on: WireGuard's own datagram to a remote gateway (what the device
    /// made of the tunnel packets the programs handed it), left alone.
    PassOwnWireGuard = 47, "pass_own_wireguard", false;
    /// Gateway, egress: the agent's tunnel probe to a remote gateway, sent on (into WireGuard
    /// when encryption is on).
    ProbeSent = 48, "probe_sent", false;
    /// Gateway, ingress: a remote gateway's tunnel probe, answered by the programs (sent back
    /// the way it came).
    ProbeAnswered = 49, "probe_answered", false;
    /// Gateway, ingress: a remote gateway's answer to this gateway's probe, taken into
    /// `mc_probes` (and not passed on: nothing else is its addressee).
    ProbeReply = 50, "probe_reply", false;
}

impl Counter {
    pub const fn key(self) -> u32 {
        self as u32
    }

    pub fn from_key(key: u32) -> Option<Counter> {
        Counter::ALL.iter().copied().find(|c| c.key() == key)
    }
}

const _: () = assert!((Counter::ALL.len() as u32) <= COUNTER_SLOTS);

// Keys are dense and in table order: the key of `ALL[i]` is `i`.
const _: () = {
    let mut i = 0;
    while i < Counter::ALL.len() {
        assert!(Counter::ALL[i] as u32 == i as u32);
        i += 1;
    }
};
