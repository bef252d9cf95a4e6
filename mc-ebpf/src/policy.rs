//! Stretched NetworkPolicy's decisions (docs/design.md §4b): ingress rules on the gateway, egress
//! `toServices` rules at the source Node.
//!
//! The ingress program sees a remote-opened flow's label identity (the VNI) but not the Pod
//! kube-proxy will pick; netfilter's PREROUTING after the nat table's DNAT sees the Pod but not
//! the VNI. So `record_flow` (in the ingress program, before the decapsulation) remembers the
//! identity per flow, keyed by the inner 5-tuple as the stack is about to see it, and
//! `mc_nf_ingress` (a netfilter program at PREROUTING, priority -99) finds the flow's conntrack
//! entry: its ORIGINAL tuple gives the key, its REPLY tuple's source the Pod the DNAT chose. Only
//! a flow's first packets (ctinfo `IP_CT_NEW`) are decided; replies and established flows pass.
//!
//! aya 0.16 has no netfilter program type: this program sits in a `classifier/` section, which
//! aya parses and never loads, and the agent loads it itself as `BPF_PROG_TYPE_NETFILTER`
//! (`mc-agent/src/netfilter.rs`). Netfilter programs may only accept or drop. The program reads
//! the `sk_buff` and the `nf_conn` by plain loads (the verifier checks them against the kernel's
//! BTF and wants their offsets constant): it is built with placeholders (`nf_patch`) where the
//! offsets and the `bpf_rdonly_cast` kfunc go, and the agent patches in what the running
//! kernel's BTF says before it loads the program. No helper is called on a decided flow's path
//! (on kernels that inline per-CPU array lookups, as 6.18 does).

use core::ffi::c_void;

use aya_ebpf::{helpers::bpf_probe_read_kernel_buf, programs::TcContext};
use mc_common::{
    Counter,
    dataplane::{
        ACTION_ALLOW, ACTION_REFUSE_ALL, ACTION_REJECT, CACHE_UNCOVERED, CACHE_UNDECIDED,
        CONFIG_POLICY_EGRESS, CONFIG_POLICY_INGRESS, EgressKey, FLOW_IDS_REFRESH, FlowCacheEntry,
        FlowIdentity, FlowKey, FlowVerdict, IP_CT_NEW, PEER_REMOTE_GATEWAY, PolicyKey,
        PolicyVerdict, VNI_UNKNOWN, ct_tuple, nf_patch,
    },
};

use crate::{
    maps::{
        EGRESS_POLICY, FLOW_IDS, FLOW_VERDICTS, INGRESS_POLICY, MASQ_IDS, PROTECTED_PODS, REJECTS,
        config, count, count_len, count_rule, flow_cache_slot, may_claim, peer_kind, same_flow,
    },
    nat::key,
    packet::{
        GENEVE_VNI_OFF, ICMP_ECHO_ID_OFF, ICMP_TYPE_OFF, IPPROTO_ICMP, IPPROTO_TCP, IPPROTO_UDP,
        Ipv4, L4_DST_PORT_OFF, L4_SRC_PORT_OFF, UDP_HLEN, be16,
    },
    tunnel::Tunnel,
};

/// `struct bpf_nf_ctx`: the netfilter program's context.
#[repr(C)]
pub(crate) struct NfCtx {
    state: *const c_void,
    pub(crate) skb: *const u8,
}

const NF_DROP: i32 = 0;
pub(crate) const NF_ACCEPT: i32 = 1;
pub(crate) const AF_INET: u16 = 2;
const ICMP_ECHO: u8 = 8;

/// Remembers the label identity a remote-opened flow's packet carried, unless already known.
/// A call of its own: inlined, its stack would push the ingress program's past 512 bytes.
#[inline(never)]
pub fn record_flow(ctx: &TcContext, tunnel: &Tunnel) {
    let Some(key) = flow_key(ctx, &tunnel.inner) else {
        return;
    };
    // The Geneve VNI (read here rather than kept in `Tunnel`, whose every byte costs the
    // ingress program's stack): the label ID of the Pod that opened the flow, or 0xffffff.
    let outer = &tunnel.outer;
    let Ok(vni) = outer.read::<[u8; 3]>(ctx, outer.l4() + UDP_HLEN + GENEVE_VNI_OFF) else {
        return;
    };
    let id = FlowIdentity {
        id: u32::from_be_bytes([0, vni[0], vni[1], vni[2]]),
    };
    // The flow's packets after its first on this CPU: its slot of the flow cache already says
    // so, with this identity (no hash-table lookup; the policy program reads the same slot),
    // and every FLOW_IDS_REFRESH-th of them refreshes the shared map's entry (the verdict in
    // the slot stays: it is for this identity).
    let slot = flow_cache_slot(&key);
    // SAFETY (slot): this CPU's entry; nothing else on this CPU runs while the program does.
    if let Some(slot) = slot
        && same_flow(unsafe { &(*slot).flow }, &key)
        && unsafe { (*slot).id } == id.id
    {
        let hits = unsafe { (*slot).hits }.wrapping_add(1);
        unsafe { (*slot).hits = hits };
        if hits & (FLOW_IDS_REFRESH - 1) == 0 {
            remember_identity(&key, &id);
        }
        return;
    }
    remember_identity(&key, &id);
    if let Some(slot) = slot {
        // SAFETY: as above. Field by field: the verdict's fields mean nothing while undecided.
        unsafe {
            (*slot).flow = key;
            (*slot).id = id.id;
            (*slot).action = CACHE_UNDECIDED;
            (*slot).hits = 0;
        }
    }
}

/// The gateway: a local Node's tunnel packet keeps the label identity its VNI claims only if
/// its inner source has it (`mc_sender_ids`: the Pod with that address, on that Node; or, from
/// the Node's own address, one of its Pods, for a flow the CNI masqueraded); otherwise the VNI
/// becomes "unknown" and the packet goes on, counted. A host-network process of the Node cannot
/// pass for another Pod. A call of its own, as `record_flow`.
#[inline(never)]
pub fn check_identity(ctx: &TcContext, tunnel: &Tunnel) {
    let outer = &tunnel.outer;
    let off = outer.l4() + UDP_HLEN + GENEVE_VNI_OFF;
    // The VNI and the reserved byte after it.
    let Ok(word) = outer.read::<[u8; 4]>(ctx, off) else {
        return;
    };
    let id = u32::from_be_bytes([0, word[0], word[1], word[2]]);
    if id == VNI_UNKNOWN || may_claim(tunnel.inner.src, id, outer.src) {
        return;
    }
    // The Geneve header has no checksum, and the outer UDP checksum is 0 (Strait's tunnel).
    // Written as a word built here (a constant array would become a `.rodata` map, which the
    // policy program's loader does not have).
    let unknown = [0xff, 0xff, 0xff, word[3]];
    if ctx.store(off, &unknown, 0).is_ok() {
        count(ctx, Counter::IdentityRewritten);
    }
}

/// Makes `mc_flow_ids` hold the flow with this identity.
#[inline(always)]
fn remember_identity(key: &FlowKey, id: &FlowIdentity) {
    // SAFETY: the value is compared at once.
    if unsafe { FLOW_IDS.get(key) }.is_some_and(|known| known == id) {
        return;
    }
    // A full LRU evicts its oldest flow; an update that fails leaves the flow unknown to the
    // policy program, which drops it if a ClusterSet-scoped rule covers its Pod
    // (`policy_drop_no_flow_identity`), unless the flow cache holds it.
    let _ = FLOW_IDS.insert(key, id, 0);
    // A flow that comes with another identity (its Pod relabelled while it is still new to
    // conntrack) is decided again. After the insert: the policy program checks the identity
    // again after remembering a verdict, so one of the two always catches a race.
    let _ = FLOW_VERDICTS.remove(key);
}

/// The flow of the inner packet as conntrack's ORIGINAL tuple will hold it.
#[inline(always)]
pub(crate) fn flow_key(ctx: &TcContext, ip: &Ipv4) -> Option<FlowKey> {
    let (src_port, dst_port) = match ip.proto {
        IPPROTO_TCP | IPPROTO_UDP => {
            if ip.is_later_fragment() {
                return None;
            }
            let p: [u8; 4] = ip.read(ctx, ip.l4()).ok()?;
            (be16(&p, L4_SRC_PORT_OFF), be16(&p, L4_DST_PORT_OFF))
        }
        IPPROTO_ICMP => {
            if ip.is_later_fragment() {
                return None;
            }
            let h: [u8; ICMP_ECHO_ID_OFF + 2] = ip.read(ctx, ip.l4()).ok()?;
            if h[ICMP_TYPE_OFF] != ICMP_ECHO {
                return None;
            }
            (be16(&h, ICMP_ECHO_ID_OFF), 0)
        }
        _ => (0, 0),
    };
    Some(key(ip.src, ip.dst, src_port, dst_port, ip.proto))
}

#[unsafe(no_mangle)]
#[unsafe(link_section = "classifier/mc_nf_ingress")]
pub extern "C" fn mc_nf_ingress(ctx: *const NfCtx) -> i32 {
    // SAFETY: the kernel passes a valid `struct bpf_nf_ctx`.
    let skb = unsafe { (*ctx).skb };
    decide(skb).unwrap_or(NF_ACCEPT)
}

/// A `T` at `base + off`, where `off` is one of the `nf_patch` placeholders (plus an offset
/// inside the field it stands for): one load instruction, whose offset the agent replaces.
///
/// # Safety
/// `base` is the context's `sk_buff` or the conntrack entry `rdonly_cast` gave; the verifier
/// checks the patched load against the kernel's BTF (a read through the cast pointer that
/// faults reads 0).
#[inline(always)]
pub(crate) unsafe fn patched<T: Copy>(base: *const u8, off: i16) -> T {
    // SAFETY: as the function says; volatile, so that each field is one load of its own at an
    // offset the agent can find.
    unsafe { core::ptr::read_volatile(base.wrapping_offset(off as isize) as *const T) }
}

/// The conntrack entry `_nfct` points at, as a read-only `struct nf_conn *`: the placeholder
/// helper call becomes the `bpf_rdonly_cast` kfunc, which the verifier turns into a register
/// move.
#[inline(always)]
pub(crate) fn rdonly_cast(ct: u64) -> *const u8 {
    // SAFETY: the agent replaces this call before loading the program (an unpatched one is
    // refused by the verifier: no helper has this ID).
    let cast: unsafe extern "C" fn(u64, u32) -> *const u8 =
        unsafe { core::mem::transmute(nf_patch::RDONLY_CAST as usize) };
    unsafe { cast(ct, nf_patch::NF_CONN_TYPE) }
}

/// Reads a field of a conntrack tuple: `tuple` is [`nf_patch::CT_ORIGINAL`] or
/// [`nf_patch::CT_REPLY`], `at` an offset of [`ct_tuple`].
///
/// # Safety
/// `ct` comes from [`rdonly_cast`].
#[inline(always)]
pub(crate) unsafe fn tuple_field<T: Copy>(ct: *const u8, tuple: i16, at: u32) -> T {
    // SAFETY: as the function says; the offset is a placeholder the agent patches.
    unsafe { patched(ct, tuple + at as i16) }
}

/// The verdict on one packet; `None` when it is none of the policy's business.
#[inline(always)]
fn decide(skb: *const u8) -> Option<i32> {
    // A Node with no egress rule for its Pods and no Pod a ClusterSet-scoped ingress rule
    // covers has nothing to decide: one array lookup, and the packet goes on.
    let cfg = config();
    if cfg.flags & (CONFIG_POLICY_EGRESS | CONFIG_POLICY_INGRESS) == 0 {
        return None;
    }
    let ct = new_flow(skb)?;
    // SAFETY (tuple field): `ct` comes from `rdonly_cast`.
    let proto: u8 = unsafe { tuple_field(ct, nf_patch::CT_ORIGINAL, ct_tuple::PROTO) };
    let key = original_key(ct, proto);
    // SAFETY: the context's `sk_buff`; the offset is a placeholder the agent patches.
    let len: u32 = unsafe { patched(skb, nf_patch::SKB_LEN) };
    // A Pod of this Node opening a flow to a multi-cluster Service an egress rule names (the
    // Service's address, before the DNAT: its endpoints here and in other clusters alike).
    // SAFETY (map reads): values are copied out at once.
    if cfg.flags & CONFIG_POLICY_EGRESS != 0
        && let Some(v) = unsafe {
            EGRESS_POLICY.get(&EgressKey {
                src: key.src,
                dst: key.dst,
            })
        }
        .copied()
    {
        return Some(apply(v, len, skb, &key));
    }
    if cfg.flags & CONFIG_POLICY_INGRESS == 0 {
        return None;
    }
    // The Pod the DNAT chose and the port it receives on: the REPLY tuple's source (the
    // destination itself without a DNAT).
    const R: i16 = nf_patch::CT_REPLY;
    // SAFETY (tuple fields): `ct` comes from `rdonly_cast`.
    let pod = unsafe { tuple_field::<u32>(ct, R, ct_tuple::SRC_IP) }.to_ne_bytes();
    let port = match proto {
        IPPROTO_TCP | IPPROTO_UDP => {
            u16::from_be(unsafe { tuple_field(ct, R, ct_tuple::SRC_PORT) })
        }
        _ => 0,
    };
    let flow = Ingress {
        skb,
        len,
        proto,
        pod,
        port,
        generation: cfg.policy_generation,
    };
    decide_ingress(&flow, &key)
}

/// The conntrack entry (from [`rdonly_cast`]) of a packet that opens a new IPv4 flow; `None`
/// for any other packet.
#[inline(always)]
fn new_flow(skb: *const u8) -> Option<*const u8> {
    if skb.is_null() {
        return None;
    }
    // SAFETY: the context's `sk_buff`; the offsets are placeholders the agent patches.
    let nfct: u64 = unsafe { patched(skb, nf_patch::SKB_NFCT) };
    if nfct & 7 != IP_CT_NEW {
        return None;
    }
    if nfct & !7 == 0 {
        return None;
    }
    let ct = rdonly_cast(nfct & !7);
    const O: i16 = nf_patch::CT_ORIGINAL;
    // SAFETY (tuple fields): `ct` comes from `rdonly_cast`.
    if unsafe { tuple_field::<u16>(ct, O, ct_tuple::L3NUM) } != AF_INET {
        return None;
    }
    Some(ct)
}

/// A flow of protocol `proto` as the ORIGINAL tuple of its conntrack entry `ct` (from
/// [`rdonly_cast`]) holds it.
#[inline(always)]
fn original_key(ct: *const u8, proto: u8) -> FlowKey {
    const O: i16 = nf_patch::CT_ORIGINAL;
    // SAFETY (tuple fields): `ct` comes from `rdonly_cast`.
    let port = |i: u32| u16::from_be(unsafe { tuple_field(ct, O, i) });
    let (src_port, dst_port) = match proto {
        IPPROTO_TCP | IPPROTO_UDP => (port(ct_tuple::SRC_PORT), port(ct_tuple::DST_PORT)),
        IPPROTO_ICMP => (port(ct_tuple::SRC_PORT), 0),
        _ => (0, 0),
    };
    // Addresses as they lie in memory (network order), like the maps' keys.
    let ip = |i: u32| unsafe { tuple_field::<u32>(ct, O, i) }.to_ne_bytes();
    key(
        ip(ct_tuple::SRC_IP),
        ip(ct_tuple::DST_IP),
        src_port,
        dst_port,
        proto,
    )
}

/// A new flow the ingress rules may cover, as [`decide`] found it (besides its key: the flow as
/// it arrived, conntrack's ORIGINAL tuple).
struct Ingress {
    /// The context's `sk_buff`.
    skb: *const u8,
    /// The packet's length.
    len: u32,
    proto: u8,
    /// The Pod the DNAT chose and the port it receives on.
    pod: [u8; 4],
    port: u16,
    /// The policy's generation ([`mc_common::dataplane::LocalConfig::policy_generation`]).
    generation: u32,
}

/// [`decide`] for a flow the ingress rules may cover: from this CPU's flow cache, from a
/// verdict remembered in `mc_flow_verdicts`, else decided afresh.
#[inline(always)]
fn decide_ingress(f: &Ingress, key: &FlowKey) -> Option<i32> {
    // The flow whose packet the ingress program recorded on this CPU (a remote gateway's flow,
    // with the identity the packet carried; a packet of another flow in the same received batch
    // may have taken the slot since, and then the LRU maps below decide): decided once per CPU
    // and flow, its later packets take the verdict from the slot. As with a verdict remembered
    // in `mc_flow_verdicts`, a refusal holds only while the source is still a remote gateway.
    if let Some(slot) = flow_cache_slot(key)
        // SAFETY: this CPU's entry; nothing else on this CPU runs while the program does.
        && let slot = unsafe { &mut *slot }
        && same_flow(&slot.flow, key)
    {
        return decide_cached(f, key, slot);
    }
    // A later packet of a flow already decided under this policy, to the same Pod and port
    // (one the flow cache does not hold: on another CPU, or its slot taken by another flow):
    // the same verdict, without deciding again (looked up first: on a one-way flow, where
    // conntrack calls every packet new, it saves the peer lookup below on each packet). Only
    // remote-opened flows are remembered; a refusal is still checked against the peers, so
    // that a flow whose source stopped being a remote gateway is none of the policy's business.
    // SAFETY (map reads): values are copied out at once.
    if let Some(v) = unsafe { FLOW_VERDICTS.get(key) }.copied()
        && v.generation == f.generation
        && v.pod == f.pod
        && v.port == f.port
        && still_holds(v.action, &key.src)
    {
        let verdict = PolicyVerdict {
            action: u32::from(v.action),
            rule: v.rule,
        };
        return Some(apply(verdict, f.len, f.skb, key));
    }
    // Ingress: only flows other clusters opened, which their gateways SNATed to their own
    // addresses (the ingress program drops any other inner source from a remote gateway).
    if peer_kind(&key.src) != PEER_REMOTE_GATEWAY {
        return None;
    }
    decide_remote(f, key)
}

/// [`decide_ingress`] for a flow this CPU's flow cache holds in `slot` (with the identity its
/// packet carried): the verdict the slot remembers for this policy, Pod and port, else decided
/// and remembered there.
#[inline(always)]
fn decide_cached(f: &Ingress, key: &FlowKey, slot: &mut FlowCacheEntry) -> Option<i32> {
    let (len, skb, pod) = (f.len, f.skb, f.pod);
    if slot.action != CACHE_UNDECIDED
        && slot.generation == f.generation
        && slot.pod == f.pod
        && slot.port == f.port
    {
        if slot.action == CACHE_UNCOVERED || !still_holds(slot.action, &key.src) {
            return None;
        }
        let verdict = PolicyVerdict {
            action: u32::from(slot.action),
            rule: slot.rule,
        };
        return Some(apply(verdict, len, skb, key));
    }
    // SAFETY (map read): the value is copied out at once.
    let (action, verdict) = match unsafe { PROTECTED_PODS.get(&pod) }.copied() {
        None => (CACHE_UNCOVERED, None),
        Some(full) if full.action == ACTION_REFUSE_ALL => {
            count_rule(full.rule, len);
            count_len(Counter::PolicyDropMapFull, len);
            return Some(NF_DROP);
        }
        Some(unknown) if slot.id == VNI_UNKNOWN => {
            // Not remembered: each packet counted under its reason.
            count_rule(unknown.rule, len);
            count_len(Counter::PolicyDropUnknownIdentity, len);
            return Some(NF_DROP);
        }
        Some(_) => {
            let v = rules_verdict(f.pod, slot.id, f.port, f.proto);
            (v.action as u16, Some(v))
        }
    };
    slot.generation = f.generation;
    slot.pod = f.pod;
    slot.port = f.port;
    slot.action = action;
    slot.rule = verdict.map_or(0, |v| v.rule);
    verdict.map(|v| apply(v, len, skb, key))
}

/// [`decide_ingress`] for a remote gateway's flow neither the flow cache nor
/// `mc_flow_verdicts` holds: decided by the rules for the identity the ingress program recorded
/// (`mc_flow_ids`), and remembered in `mc_flow_verdicts`.
#[inline(always)]
fn decide_remote(f: &Ingress, key: &FlowKey) -> Option<i32> {
    let (len, skb, pod) = (f.len, f.skb, f.pod);
    // SAFETY (map reads): values are copied out at once.
    let unknown = *unsafe { PROTECTED_PODS.get(&pod) }?;
    if unknown.action == ACTION_REFUSE_ALL {
        count_rule(unknown.rule, len);
        count_len(Counter::PolicyDropMapFull, len);
        return Some(NF_DROP);
    }
    let Some(id) = unsafe { FLOW_IDS.get(key) }.map(|i| i.id) else {
        // A remote-opened flow whose identity was lost (the LRU full): it cannot be decided.
        count_rule(unknown.rule, len);
        count_len(Counter::PolicyDropNoFlowIdentity, len);
        return Some(NF_DROP);
    };
    if id == VNI_UNKNOWN {
        count_rule(unknown.rule, len);
        count_len(Counter::PolicyDropUnknownIdentity, len);
        return Some(NF_DROP);
    }
    let verdict = rules_verdict(f.pod, id, f.port, f.proto);
    // Remembered for the flow's next packets; a full LRU evicts its oldest, and a failed
    // update only means the next packet is decided again.
    let _ = FLOW_VERDICTS.insert(
        key,
        &FlowVerdict {
            generation: f.generation,
            pod: f.pod,
            port: f.port,
            action: verdict.action as u16,
            rule: verdict.rule,
        },
        0,
    );
    // The flow came with another identity while this verdict was made (`record_flow` on
    // another CPU recorded it, then forgot the remembered verdict, maybe before this insert):
    // not kept, so the next packet is decided for the new identity.
    if unsafe { FLOW_IDS.get(key) }.is_none_or(|i| i.id != id) {
        let _ = FLOW_VERDICTS.remove(key);
    }
    Some(apply(verdict, len, skb, key))
}

/// Whether a remembered verdict (in the flow cache or `mc_flow_verdicts`) still applies to a
/// flow from `src`: an allow always; a refusal only while `src` is a remote gateway (a flow whose
/// source stopped being one is none of the policy's business).
#[inline(always)]
fn still_holds(action: u16, src: &[u8; 4]) -> bool {
    u32::from(action) == ACTION_ALLOW || peer_kind(src) == PEER_REMOTE_GATEWAY
}

/// The verdict of the ingress rules covering `pod` for a flow from `id` to `port`: for this
/// port if a rule of the Pod names it, else for every other port of the protocol if a rule
/// names the protocol alone, else for everything else; no entry: no rule matched this
/// identity, and the flow gets what the cluster would do without the policy (the agent's rule
/// 0, "no rule matched").
#[inline(always)]
fn rules_verdict(pod: [u8; 4], id: u32, port: u16, proto: u8) -> PolicyVerdict {
    let mut pkey = PolicyKey {
        pod,
        id,
        port,
        proto,
        _pad: 0,
    };
    // SAFETY (map reads): values are copied out at once.
    let exact = unsafe { INGRESS_POLICY.get(&pkey) }.copied();
    pkey.port = 0;
    exact
        .or_else(|| unsafe { INGRESS_POLICY.get(&pkey) }.copied())
        .or_else(|| {
            pkey.proto = 0;
            unsafe { INGRESS_POLICY.get(&pkey) }.copied()
        })
        .unwrap_or(PolicyVerdict {
            action: ACTION_ALLOW,
            rule: 0,
        })
}

/// Counts a verdict under its rule and the policy's counters; the netfilter verdict. A rejected
/// packet goes to the agent, which answers it.
#[inline(always)]
fn apply(verdict: PolicyVerdict, len: u32, skb: *const u8, flow: &FlowKey) -> i32 {
    count_rule(verdict.rule, len);
    match verdict.action {
        ACTION_ALLOW => {
            count_len(Counter::PolicyAllow, len);
            NF_ACCEPT
        }
        ACTION_REJECT => {
            count_len(Counter::PolicyReject, len);
            if !hand_over(skb, flow, verdict.rule, len) {
                count_len(Counter::PolicyRejectUnanswered, len);
            }
            NF_DROP
        }
        _ => {
            count_len(Counter::PolicyDrop, len);
            NF_DROP
        }
    }
}

/// Puts a rejected packet's flow and first bytes in the ring buffer for the agent to answer;
/// `false` when it cannot (no room, an unreadable packet).
#[inline(never)]
fn hand_over(skb: *const u8, flow: &FlowKey, rule: u32, len: u32) -> bool {
    // SAFETY: the context's `sk_buff`; the offset is a placeholder the agent patches.
    let data: u64 = unsafe { patched(skb, nf_patch::SKB_DATA) };
    let Some(mut entry) = REJECTS.reserve(0) else {
        return false;
    };
    let event = entry.as_mut_ptr();
    // SAFETY: `event` points at the reserved entry, RejectEvent's size; every field is written
    // before the entry is submitted. The packet bytes come from bpf_probe_read_kernel, which
    // checks the address (the linear buffer holds at least the IPv4 and transport headers
    // the kernel has pulled; bytes past the packet's end are read from its tailroom and ignored
    // by the agent, which knows the length).
    unsafe {
        (*event).flow = *flow;
        (*event).rule = rule;
        (*event).len = len;
        if bpf_probe_read_kernel_buf(data as *const u8, &mut (*event).packet).is_err() {
            entry.discard(0);
            return false;
        }
    }
    entry.submit(0);
    true
}

/// The VNI of a packet for a remote prefix whose source is not one of the Node's Pods: the
/// label ID `mc_nf_masq` found for its flow through conntrack (a Pod's flow the CNI
/// masqueraded), else unknown. Each packet is counted under which of the two it got.
#[inline(never)]
pub fn masqueraded_vni(ctx: &TcContext, ip: &Ipv4) -> u32 {
    // SAFETY: the value is copied out at once.
    let id = flow_key(ctx, ip).and_then(|k| unsafe { MASQ_IDS.get(&k) }.copied());
    match id {
        Some(id) => {
            count(ctx, Counter::TxIdentityViaConntrack);
            id.id & VNI_UNKNOWN
        }
        None => {
            count(ctx, Counter::TxIdentityUnknown);
            VNI_UNKNOWN
        }
    }
}
