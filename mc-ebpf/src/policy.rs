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
//! (`mc-agent/src/netfilter.rs`). Netfilter programs may only accept or drop, and read kernel
//! memory through `bpf_probe_read_kernel`, at the offsets the agent found in the kernel's BTF.

use core::ffi::c_void;

use aya_ebpf::{
    helpers::{bpf_probe_read_kernel, bpf_probe_read_kernel_buf},
    programs::TcContext,
};
use mc_common::{
    Counter,
    dataplane::{
        ACTION_ALLOW, ACTION_REJECT, CONFIG_POLICY_EGRESS, CONFIG_POLICY_INGRESS, EgressKey,
        FlowIdentity, FlowKey, FlowVerdict, IP_CT_NEW, KernelOffsets, PEER_REMOTE_GATEWAY,
        PolicyKey, PolicyVerdict, VNI_UNKNOWN, ct_tuple,
    },
};

use crate::{
    maps::{
        EGRESS_POLICY, FLOW_IDS, FLOW_VERDICTS, INGRESS_POLICY, PROTECTED_PODS, REJECTS, config,
        count_len, count_rule, kernel_offsets, peer_kind, skb_data_offset,
    },
    packet::{IPPROTO_ICMP, IPPROTO_TCP, IPPROTO_UDP, Ipv4},
    tunnel::{Tunnel, UDP_HLEN},
};

/// `struct bpf_nf_ctx`: the netfilter program's context.
#[repr(C)]
pub struct NfCtx {
    state: *const c_void,
    skb: *const u8,
}

const NF_DROP: i32 = 0;
const NF_ACCEPT: i32 = 1;
const AF_INET: u16 = 2;
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
    let Ok(vni) = outer.read::<[u8; 3]>(ctx, outer.l4() + UDP_HLEN + 4) else {
        return;
    };
    let id = FlowIdentity {
        id: u32::from_be_bytes([0, vni[0], vni[1], vni[2]]),
    };
    // SAFETY: the value is compared at once.
    if unsafe { FLOW_IDS.get(&key) }.is_some_and(|known| *known == id) {
        return;
    }
    // A full LRU evicts its oldest flow; an update that fails leaves the flow unknown to the
    // policy program, which drops it if a ClusterSet-scoped rule covers its Pod
    // (`policy_drop_no_flow_identity`).
    let _ = FLOW_IDS.insert(&key, &id, 0);
    // A flow that comes with another identity (its Pod relabelled while it is still new to
    // conntrack) is decided again. After the insert: the policy program checks the identity
    // again after remembering a verdict, so one of the two always catches a race.
    let _ = FLOW_VERDICTS.remove(&key);
}

/// The flow of the inner packet as conntrack's ORIGINAL tuple will hold it.
#[inline(always)]
fn flow_key(ctx: &TcContext, ip: &Ipv4) -> Option<FlowKey> {
    let (src_port, dst_port) = match ip.proto {
        IPPROTO_TCP | IPPROTO_UDP => {
            if ip.is_later_fragment() {
                return None;
            }
            let p: [u8; 4] = ip.read(ctx, ip.l4()).ok()?;
            (
                u16::from_be_bytes([p[0], p[1]]),
                u16::from_be_bytes([p[2], p[3]]),
            )
        }
        IPPROTO_ICMP => {
            if ip.is_later_fragment() {
                return None;
            }
            let h: [u8; 6] = ip.read(ctx, ip.l4()).ok()?;
            if h[0] != ICMP_ECHO {
                return None;
            }
            (u16::from_be_bytes([h[4], h[5]]), 0)
        }
        _ => (0, 0),
    };
    Some(FlowKey {
        src: ip.src,
        dst: ip.dst,
        src_port,
        dst_port,
        proto: ip.proto,
        _pad: [0; 3],
    })
}

#[unsafe(no_mangle)]
#[unsafe(link_section = "classifier/mc_nf_ingress")]
pub extern "C" fn mc_nf_ingress(ctx: *const NfCtx) -> i32 {
    // SAFETY: the kernel passes a valid `struct bpf_nf_ctx`.
    let skb = unsafe { (*ctx).skb };
    decide(skb).unwrap_or(NF_ACCEPT)
}

/// Reads a `T` of kernel memory at `base + off`.
#[inline(always)]
fn kread<T: Copy>(base: u64, off: u32) -> Option<T> {
    // SAFETY: bpf_probe_read_kernel checks the address; a fault is an error, not a crash.
    unsafe { bpf_probe_read_kernel((base + u64::from(off)) as *const T) }.ok()
}

/// `skb->_nfct` then `skb->len`, as the kernel lays them out (Linux 6.18 does; the offsets the
/// agent read from BTF say whether this one does): one read.
#[repr(C)]
#[derive(Clone, Copy)]
struct NfctLen {
    nfct: u64,
    len: u32,
}

/// The packet's conntrack pointer with its ctinfo, and its length; one `bpf_probe_read_kernel`
/// where the fields are adjacent (each read is a helper call that validates the address: on the
/// path every packet of a one-way flow takes, the reads are most of the program's time).
#[inline(always)]
fn nfct_and_len(skb: u64, k: &KernelOffsets) -> Option<(u64, u32)> {
    if k.skb_len == k.skb_nfct + 8 {
        let both: NfctLen = kread(skb, k.skb_nfct)?;
        return Some((both.nfct, both.len));
    }
    Some((kread(skb, k.skb_nfct)?, kread(skb, k.skb_len).unwrap_or(0)))
}

/// `struct nf_conn`'s `tuplehash[2]`: each direction's tuple after its 16-byte list node.
#[repr(C)]
#[derive(Clone, Copy)]
struct CtTuples {
    original: [u8; ct_tuple::LEN],
    /// The rest of the ORIGINAL tuple and the REPLY entry's `hnnode`.
    _between: [u8; TUPLE_HASH_LEN - ct_tuple::LEN],
    reply: [u8; ct_tuple::LEN],
}

/// `sizeof(struct nf_conntrack_tuple_hash)` on 64-bit kernels (a 16-byte list node and the
/// 40-byte tuple); where the BTF offsets say otherwise, the tuples are read one by one.
const TUPLE_HASH_LEN: usize = 56;

/// Both tuples of a conntrack entry: one read where they lie one `nf_conntrack_tuple_hash`
/// apart, as they do on 64-bit kernels (the agent found the offsets in this kernel's BTF).
#[inline(always)]
fn read_tuples(ct: u64, k: &KernelOffsets) -> Option<CtTuples> {
    if k.ct_tuple_reply == k.ct_tuple_original + TUPLE_HASH_LEN as u32 {
        return kread(ct, k.ct_tuple_original);
    }
    Some(CtTuples {
        original: kread(ct, k.ct_tuple_original)?,
        _between: [0; TUPLE_HASH_LEN - ct_tuple::LEN],
        reply: kread(ct, k.ct_tuple_reply)?,
    })
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
    let k = kernel_offsets()?;
    let skb = skb as u64;
    let (nfct, len) = nfct_and_len(skb, &k)?;
    if nfct & 7 != IP_CT_NEW {
        return None;
    }
    let ct = nfct & !7;
    if ct == 0 {
        return None;
    }
    let tuples = read_tuples(ct, &k)?;
    let t = &tuples.original;
    let at = |i: u32| t[i as usize];
    if u16::from_ne_bytes([at(ct_tuple::L3NUM), at(ct_tuple::L3NUM + 1)]) != AF_INET {
        return None;
    }
    let proto = at(ct_tuple::PROTO);
    let port = |i: u32| u16::from_be_bytes([at(i), at(i + 1)]);
    let (src_port, dst_port) = match proto {
        IPPROTO_TCP | IPPROTO_UDP => (port(ct_tuple::SRC_PORT), port(ct_tuple::DST_PORT)),
        IPPROTO_ICMP => (port(ct_tuple::SRC_PORT), 0),
        _ => (0, 0),
    };
    let ip = |i: u32| [at(i), at(i + 1), at(i + 2), at(i + 3)];
    let key = FlowKey {
        src: ip(ct_tuple::SRC_IP),
        dst: ip(ct_tuple::DST_IP),
        src_port,
        dst_port,
        proto,
        _pad: [0; 3],
    };
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
    let r = &tuples.reply;
    let rat = |i: u32| r[i as usize];
    let pod = [
        rat(ct_tuple::SRC_IP),
        rat(ct_tuple::SRC_IP + 1),
        rat(ct_tuple::SRC_IP + 2),
        rat(ct_tuple::SRC_IP + 3),
    ];
    let port = match proto {
        IPPROTO_TCP | IPPROTO_UDP => {
            u16::from_be_bytes([rat(ct_tuple::SRC_PORT), rat(ct_tuple::SRC_PORT + 1)])
        }
        _ => 0,
    };
    // A later packet of a flow already decided under this policy, to the same Pod and port:
    // the same verdict, without deciding again (looked up first: on a one-way flow, where
    // conntrack calls every packet new, it saves the peer lookup below on each packet). Only
    // remote-opened flows are remembered; a refusal is still checked against the peers, so
    // that a flow whose source stopped being a remote gateway is none of the policy's business.
    if let Some(v) = unsafe { FLOW_VERDICTS.get(&key) }.copied()
        && v.generation == cfg.policy_generation
        && v.pod == pod
        && v.port == port
        && (u32::from(v.action) == ACTION_ALLOW || peer_kind(&key.src) == PEER_REMOTE_GATEWAY)
    {
        let verdict = PolicyVerdict {
            action: u32::from(v.action),
            rule: v.rule,
        };
        return Some(apply(verdict, len, skb, &key));
    }
    // Ingress: only flows other clusters opened, which their gateways SNATed to their own
    // addresses (the ingress program drops any other inner source from a remote gateway).
    if peer_kind(&key.src) != PEER_REMOTE_GATEWAY {
        return None;
    }
    let unknown = *unsafe { PROTECTED_PODS.get(&pod) }?;
    let Some(id) = unsafe { FLOW_IDS.get(&key) }.map(|f| f.id) else {
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
    // The verdict for this port if a rule of the Pod names it, else for every other port of
    // the protocol if a rule names the protocol alone, else for everything else; no entry: no
    // rule matched this identity, and the flow gets what the cluster would do without the
    // policy (the agent's rule 0, "no rule matched").
    let mut pkey = PolicyKey {
        pod,
        id,
        port,
        proto,
        _pad: 0,
    };
    let exact = unsafe { INGRESS_POLICY.get(&pkey) }.copied();
    pkey.port = 0;
    let verdict = exact
        .or_else(|| unsafe { INGRESS_POLICY.get(&pkey) }.copied())
        .or_else(|| {
            pkey.proto = 0;
            unsafe { INGRESS_POLICY.get(&pkey) }.copied()
        })
        .unwrap_or(PolicyVerdict {
            action: ACTION_ALLOW,
            rule: 0,
        });
    // Remembered for the flow's next packets; a full LRU evicts its oldest, and a failed
    // update only means the next packet is decided again.
    let _ = FLOW_VERDICTS.insert(
        &key,
        &FlowVerdict {
            generation: cfg.policy_generation,
            pod,
            port,
            action: verdict.action as u16,
            rule: verdict.rule,
        },
        0,
    );
    // The flow came with another identity while this verdict was made (`record_flow` on
    // another CPU recorded it, then forgot the remembered verdict, maybe before this insert):
    // not kept, so the next packet is decided for the new identity.
    if unsafe { FLOW_IDS.get(&key) }.is_none_or(|f| f.id != id) {
        let _ = FLOW_VERDICTS.remove(&key);
    }
    Some(apply(verdict, len, skb, &key))
}

/// Counts a verdict under its rule and the policy's counters; the netfilter verdict. A rejected
/// packet goes to the agent, which answers it.
#[inline(always)]
fn apply(verdict: PolicyVerdict, len: u32, skb: u64, flow: &FlowKey) -> i32 {
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
/// `false` when it cannot (no room, no offsets, an unreadable packet).
#[inline(never)]
fn hand_over(skb: u64, flow: &FlowKey, rule: u32, len: u32) -> bool {
    let Some(data_at) = skb_data_offset() else {
        return false;
    };
    let Some(data) = kread::<u64>(skb, data_at) else {
        return false;
    };
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
