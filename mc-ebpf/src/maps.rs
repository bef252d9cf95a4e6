//! The maps the programs share with mc-agent (docs/design.md §4), and the programs' accessors
//! for them: counting a packet, the Node's config, the remote routes, the peers. The agent pins
//! every map under its name (`mc_common::maps`), the name operators inspect it by
//! (docs/design.md §6).

use aya_ebpf::{
    btf_maps::{Array, HashMap, LpmTrie, LruHashMap, PerCpuArray, RingBuf},
    macros::btf_map,
    maps::lpm_trie::Key,
    programs::TcContext,
};
use mc_common::{
    Counter, CounterValue,
    counters::COUNTER_SLOTS,
    dataplane::{
        EgressKey, Exposed, ExposedKey, FLOW_CACHE_SLOTS, FlowCacheEntry, FlowIdentity, FlowKey,
        FlowVerdict, HAIRPIN_CACHE_SLOTS, HairpinCacheEntry, LocalConfig, MAX_EGRESS_ENTRIES,
        MAX_EXPOSED, MAX_EXPOSED_PREFIXES, MAX_FLOW_IDENTITIES, MAX_FLOW_VERDICTS, MAX_MASQ_FLOWS,
        MAX_NEXT_HOPS, MAX_PEER_STATS, MAX_PEERS, MAX_POD_IDENTITIES, MAX_POLICY_ENTRIES,
        MAX_POLICY_RULES, MAX_PROBED, MAX_PROTECTED_PODS, MAX_REMOTE_PREFIXES, MAX_SENDER_IDS,
        MAX_SNAT_ENTRIES, NextHop, Peer, PeerStats, PodIdentity, PolicyKey, PolicyVerdict,
        ProbeState, REJECT_RING_BYTES, RejectEvent, RemoteRoute, SenderId, SenderIdKey, SnatEntry,
        VNI_UNKNOWN, WireGuardConfig,
    },
};

#[btf_map(name = "mc_counters")]
static COUNTERS: PerCpuArray<CounterValue, { COUNTER_SLOTS as usize }> = PerCpuArray::new();

#[btf_map(name = "mc_config")]
static CONFIG: Array<LocalConfig, 1> = Array::new();

#[btf_map(name = "mc_wireguard")]
static WIREGUARD: Array<WireGuardConfig, 1> = Array::new();

#[btf_map(name = "mc_probes")]
static PROBES: HashMap<[u8; 4], ProbeState, { MAX_PROBED as usize }> = HashMap::new();

#[btf_map(name = "mc_peer_stats")]
static PEER_STATS: PerCpuArray<PeerStats, { MAX_PEER_STATS as usize }> = PerCpuArray::new();

#[btf_map(name = "mc_routes")]
static ROUTES: LpmTrie<[u8; 4], RemoteRoute, { MAX_REMOTE_PREFIXES as usize }> = LpmTrie::new();

#[btf_map(name = "mc_peers")]
static PEERS: HashMap<[u8; 4], Peer, { MAX_PEERS as usize }> = HashMap::new();

#[btf_map(name = "mc_snat")]
pub(crate) static SNAT: LruHashMap<FlowKey, SnatEntry, { MAX_SNAT_ENTRIES as usize }> =
    LruHashMap::new();

#[btf_map(name = "mc_next_hops")]
pub(crate) static NEXT_HOPS: LruHashMap<[u8; 4], NextHop, { MAX_NEXT_HOPS as usize }> =
    LruHashMap::new();

#[btf_map(name = "mc_pod_ids")]
static POD_IDS: HashMap<[u8; 4], PodIdentity, { MAX_POD_IDENTITIES as usize }> = HashMap::new();

#[btf_map(name = "mc_masq_ids")]
pub(crate) static MASQ_IDS: LruHashMap<FlowKey, PodIdentity, { MAX_MASQ_FLOWS as usize }> =
    LruHashMap::new();

#[btf_map(name = "mc_flow_ids")]
pub(crate) static FLOW_IDS: LruHashMap<FlowKey, FlowIdentity, { MAX_FLOW_IDENTITIES as usize }> =
    LruHashMap::new();

#[btf_map(name = "mc_flow_verdicts")]
pub(crate) static FLOW_VERDICTS: LruHashMap<FlowKey, FlowVerdict, { MAX_FLOW_VERDICTS as usize }> =
    LruHashMap::new();

#[btf_map(name = "mc_flow_cache")]
static FLOW_CACHE: PerCpuArray<FlowCacheEntry, { FLOW_CACHE_SLOTS as usize }> = PerCpuArray::new();

#[btf_map(name = "mc_hairpin_cache")]
static HAIRPIN_CACHE: PerCpuArray<HairpinCacheEntry, { HAIRPIN_CACHE_SLOTS as usize }> =
    PerCpuArray::new();

#[btf_map(name = "mc_ingress_policy")]
pub(crate) static INGRESS_POLICY: HashMap<
    PolicyKey,
    PolicyVerdict,
    { MAX_POLICY_ENTRIES as usize },
> = HashMap::new();

#[btf_map(name = "mc_egress_policy")]
pub(crate) static EGRESS_POLICY: HashMap<
    EgressKey,
    PolicyVerdict,
    { MAX_EGRESS_ENTRIES as usize },
> = HashMap::new();

#[btf_map(name = "mc_protected_pods")]
pub(crate) static PROTECTED_PODS: HashMap<[u8; 4], PolicyVerdict, { MAX_PROTECTED_PODS as usize }> =
    HashMap::new();

#[btf_map(name = "mc_rule_counters")]
static RULE_COUNTERS: PerCpuArray<CounterValue, { MAX_POLICY_RULES as usize }> = PerCpuArray::new();

#[btf_map(name = "mc_exposed")]
static EXPOSED: HashMap<ExposedKey, Exposed, { MAX_EXPOSED as usize }> = HashMap::new();

#[btf_map(name = "mc_exposed_prefixes")]
static EXPOSED_PREFIXES: LpmTrie<[u8; 4], Exposed, { MAX_EXPOSED_PREFIXES as usize }> =
    LpmTrie::new();

#[btf_map(name = "mc_sender_ids")]
static SENDER_IDS: HashMap<SenderIdKey, SenderId, { MAX_SENDER_IDS as usize }> = HashMap::new();

#[btf_map(name = "mc_rejects")]
pub(crate) static REJECTS: RingBuf<RejectEvent, { REJECT_RING_BYTES as usize }> = RingBuf::new();

/// A per-CPU cache's slot index for `flow` (and `extra`, 0 for none) among `slots` (a power
/// of two): a multiplicative hash of the flow's four words.
#[inline(always)]
fn slot_index(flow: &FlowKey, extra: u32, slots: u32) -> u32 {
    let w = flow_words(flow);
    let mixed = (w[0] ^ w[1].rotate_left(7) ^ w[2].rotate_left(13) ^ w[3] ^ extra.rotate_left(19))
        .wrapping_mul(0x9e37_79b1);
    mixed >> (32 - slots.trailing_zeros())
}

/// This CPU's flow-cache slot for `flow`.
#[inline(always)]
pub(crate) fn flow_cache_slot(flow: &FlowKey) -> Option<*mut FlowCacheEntry> {
    FLOW_CACHE.get_ptr_mut(slot_index(flow, 0, FLOW_CACHE_SLOTS))
}

/// This CPU's hairpin-cache slot for `flow` from `sender`.
#[inline(always)]
pub(crate) fn hairpin_cache_slot(
    flow: &FlowKey,
    sender: [u8; 4],
) -> Option<*mut HairpinCacheEntry> {
    let slot = slot_index(flow, u32::from_ne_bytes(sender), HAIRPIN_CACHE_SLOTS);
    HAIRPIN_CACHE.get_ptr_mut(slot)
}

/// Completes a hairpin-cache slot [`crate::hairpin::claim`] took: the packet went to `dst` through `hop` (out of its device).
/// Valid until the coarse clock's second ends (the SNAT table's check runs once a second) and
/// no longer than the next hop.
#[inline(always)]
pub(crate) fn hairpin_cache_complete(
    slot: *mut HairpinCacheEntry,
    dst: [u8; 4],
    hop: &NextHop,
    now: u64,
) {
    let second_ends = ((now >> 30) + 1) << 30;
    // SAFETY: this CPU's slot, as in `hairpin::claim`; written field by field, in place.
    unsafe {
        (*slot).dst = dst;
        (*slot).ifindex = hop.ifindex;
        (*slot).macs = hop.macs;
        (*slot).until_ns = if hop.expires_ns < second_ends {
            hop.expires_ns
        } else {
            second_ends
        };
    }
}

/// Whether two flow keys are the same flow: two 64-bit compares.
#[inline(always)]
pub(crate) fn same_flow(a: &FlowKey, b: &FlowKey) -> bool {
    // SAFETY: as in `flow_words`.
    let (a, b) = unsafe {
        (
            core::mem::transmute::<FlowKey, [u64; 2]>(*a),
            core::mem::transmute::<FlowKey, [u64; 2]>(*b),
        )
    };
    a[0] == b[0] && a[1] == b[1]
}

#[inline(always)]
fn flow_words(flow: &FlowKey) -> [u32; 4] {
    // SAFETY: FlowKey is a 16-byte repr(C) struct of plain bytes and integers, its padding
    // zeroed where keys are built (`nat::key`).
    unsafe { core::mem::transmute::<FlowKey, [u32; 4]>(*flow) }
}

#[inline(always)]
pub(crate) fn config() -> LocalConfig {
    CONFIG.get(0).copied().unwrap_or_default()
}

/// The WireGuard device and the uplink it hands over to (all zero: no device).
#[inline(always)]
pub(crate) fn wireguard() -> WireGuardConfig {
    WIREGUARD.get(0).copied().unwrap_or_default()
}

/// Takes a remote gateway's answer to probe `seq`, sent at `sent_ns`, arriving at `now_ns`.
#[inline(always)]
pub(crate) fn probe_answered(gateway: [u8; 4], seq: u32, sent_ns: u64, now_ns: u64) {
    let rtt_ns = now_ns.saturating_sub(sent_ns);
    match PROBES.get_ptr_mut(&gateway) {
        // SAFETY: a map value's pointer; answers from one gateway come about once a second,
        // and a lost update only delays the count by one.
        Some(state) => unsafe {
            (*state).replies += 1;
            (*state).rtt_ns = rtt_ns;
            (*state).last_ns = now_ns;
            (*state).seq = seq;
        },
        None => {
            let state = ProbeState {
                replies: 1,
                rtt_ns,
                last_ns: now_ns,
                seq,
                _pad: 0,
            };
            // Full (more remote gateways than MAX_PROBED): that gateway's health is unknown.
            let _ = PROBES.insert(&gateway, &state, 0);
        }
    }
}

#[inline(always)]
pub(crate) fn remote_route(addr: [u8; 4]) -> Option<RemoteRoute> {
    ROUTES.get(&Key::new(32, addr)).copied()
}

/// Whether this cluster exported `addr` (with `port` of `proto`; 0 for a packet without a port
/// to check) to remote clusters, or `addr` lies in a Pod CIDR remote clusters may reach.
#[inline(always)]
pub(crate) fn exposed(addr: [u8; 4], port: u16, proto: u8) -> bool {
    let key = ExposedKey {
        addr,
        port,
        proto,
        _pad: 0,
    };
    // SAFETY: only whether the entry exists is read.
    unsafe { EXPOSED.get(&key) }.is_some() || EXPOSED_PREFIXES.get(&Key::new(32, addr)).is_some()
}

/// Whether the local Node `node` may send a packet from `addr` claiming label ID `id`.
#[inline(always)]
pub(crate) fn may_claim(addr: [u8; 4], id: u32, node: [u8; 4]) -> bool {
    let key = SenderIdKey { addr, id };
    // SAFETY: the value is compared at once.
    unsafe { SENDER_IDS.get(&key) }.is_some_and(|s| s.node == node)
}

/// Whether `addr` lies in the prefixes of the remote cluster whose gateway is `gateway`: only
/// that gateway answers for flows to it.
#[inline(always)]
pub(crate) fn routed_via(addr: [u8; 4], gateway: [u8; 4]) -> bool {
    remote_route(addr).is_some_and(|r| r.gateway_ip == gateway)
}

/// The VNI a packet from `addr` carries: the label ID of the Pod of this Node that has the
/// address, else [`VNI_UNKNOWN`].
#[inline(always)]
pub(crate) fn pod_vni(addr: &[u8; 4]) -> u32 {
    // SAFETY: the value is copied out at once.
    unsafe { POD_IDS.get(addr) }.map_or(VNI_UNKNOWN, |p| p.id & VNI_UNKNOWN)
}

/// The label ID of the Pod of this Node that has `addr`.
#[inline(always)]
pub(crate) fn pod_id(addr: &[u8; 4]) -> Option<PodIdentity> {
    // SAFETY: the value is copied out at once.
    unsafe { POD_IDS.get(addr) }.copied()
}

#[inline(always)]
pub(crate) fn peer_kind(addr: &[u8; 4]) -> u32 {
    // SAFETY: the value is copied out at once.
    unsafe { PEERS.get(addr) }.map_or(0, |p| p.kind)
}

/// The peer at `addr`: (kind, remote cluster index); kind 0 for none.
#[inline(always)]
pub(crate) fn peer(addr: &[u8; 4]) -> (u32, u32) {
    // SAFETY: the value is copied out at once.
    unsafe { PEERS.get(addr) }.map_or((0, 0), |p| (p.kind, p.cluster))
}

/// Counts a frame of `len` bytes sent into the tunnel to (`rx` false) or taken from (`rx`
/// true) the gateway of the remote cluster with index `cluster` (a route's, flag bits
/// masked off).
#[inline(always)]
pub(crate) fn count_peer(cluster: u32, rx: bool, len: u32) {
    let index = cluster & !mc_common::dataplane::ROUTE_NO_WIREGUARD_PEER;
    if let Some(slot) = PEER_STATS.get_ptr_mut(index) {
        // SAFETY: per-CPU slot, only this CPU writes it while the program runs.
        unsafe {
            if rx {
                (*slot).rx_packets += 1;
                (*slot).rx_bytes += u64::from(len);
            } else {
                (*slot).tx_packets += 1;
                (*slot).tx_bytes += u64::from(len);
            }
        }
    }
}

#[inline(always)]
pub(crate) fn count(ctx: &TcContext, counter: Counter) {
    count_len(counter, ctx.len());
}

#[inline(always)]
pub(crate) fn count_len(counter: Counter, len: u32) {
    if let Some(slot) = COUNTERS.get_ptr_mut(counter.key()) {
        // SAFETY: per-CPU slot, only this CPU writes it while the program runs.
        unsafe {
            (*slot).packets += 1;
            (*slot).bytes += u64::from(len);
        }
    }
}

/// Counts a packet under a policy rule's own counter.
#[inline(always)]
pub(crate) fn count_rule(rule: u32, len: u32) {
    if let Some(slot) = RULE_COUNTERS.get_ptr_mut(rule) {
        // SAFETY: as in `count_len`.
        unsafe {
            (*slot).packets += 1;
            (*slot).bytes += u64::from(len);
        }
    }
}
