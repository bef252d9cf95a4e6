//! Label identity through a CNI's masquerade (docs/design.md §4b).
//!
//! A CNI that masquerades its Pods' traffic to anything outside its own network (Flannel's
//! `--ip-masq`, Calico's `natOutgoing`, the AWS VPC CNI's SNAT) rewrites the source at
//! netfilter's POSTROUTING, before the uplink's egress program sees the packet: the Pod, and so
//! the label ID its VNI must carry, is gone from the packet. Its conntrack entry still has it.
//! `mc_nf_masq`, a netfilter program at POSTROUTING just after the source NAT (priority 101),
//! reads a new flow's entry: when its ORIGINAL source is a Pod of this Node with a label ID, its
//! destination a remote prefix, and the REPLY tuple says the source was translated, the flow as
//! the uplink will see it (the REPLY tuple turned round) gets the Pod's ID in `mc_masq_ids`,
//! where the egress program looks a packet up when its source is not one of the Node's Pods.
//! Loaded and patched by the agent like the policy program (`mc-agent/src/netfilter.rs`); it
//! only ever accepts.

use mc_common::dataplane::{CONFIG_MASQ_IDS, IP_CT_NEW, ct_tuple, nf_patch};

use crate::{
    maps::{MASQ_IDS, config, pod_id, remote_route},
    nat::key,
    packet::{IPPROTO_ICMP, IPPROTO_TCP, IPPROTO_UDP},
    policy::{AF_INET, NF_ACCEPT, NfCtx, patched, rdonly_cast, tuple_field},
};

#[unsafe(no_mangle)]
#[unsafe(link_section = "classifier/mc_nf_masq")]
pub extern "C" fn mc_nf_masq(ctx: *const NfCtx) -> i32 {
    // SAFETY: the kernel passes a valid `struct bpf_nf_ctx`.
    let skb = unsafe { (*ctx).skb };
    let _ = record(skb);
    NF_ACCEPT
}

/// Remembers the label identity of a new, source-NATed flow of this Node's Pods to a remote
/// prefix; `None` when the packet is not one.
#[inline(always)]
fn record(skb: *const u8) -> Option<()> {
    if config().flags & CONFIG_MASQ_IDS == 0 || skb.is_null() {
        return None;
    }
    // SAFETY: the context's `sk_buff`; the offset is a placeholder the agent patches.
    let nfct: u64 = unsafe { patched(skb, nf_patch::SKB_NFCT) };
    if nfct & 7 != IP_CT_NEW || nfct & !7 == 0 {
        return None;
    }
    let ct = rdonly_cast(nfct & !7);
    const O: i16 = nf_patch::CT_ORIGINAL;
    const R: i16 = nf_patch::CT_REPLY;
    // SAFETY (tuple fields): `ct` comes from `rdonly_cast`.
    if unsafe { tuple_field::<u16>(ct, O, ct_tuple::L3NUM) } != AF_INET {
        return None;
    }
    let ip = |t: i16, i: u32| unsafe { tuple_field::<u32>(ct, t, i) }.to_ne_bytes();
    let pod = ip(O, ct_tuple::SRC_IP);
    // The translated source: the REPLY tuple's destination.
    let translated = ip(R, ct_tuple::DST_IP);
    if translated == pod {
        return None;
    }
    // The destination after any DNAT: the REPLY tuple's source.
    let dst = ip(R, ct_tuple::SRC_IP);
    remote_route(dst)?;
    let id = pod_id(&pod)?;
    let proto: u8 = unsafe { tuple_field(ct, O, ct_tuple::PROTO) };
    let port = |i: u32| u16::from_be(unsafe { tuple_field(ct, R, i) });
    // As the egress program keys a packet (`policy::flow_key`): TCP and UDP by their ports,
    // an ICMP echo by its identifier (the REPLY tuple's, translated too).
    let (src_port, dst_port) = match proto {
        IPPROTO_TCP | IPPROTO_UDP => (port(ct_tuple::DST_PORT), port(ct_tuple::SRC_PORT)),
        IPPROTO_ICMP => (port(ct_tuple::SRC_PORT), 0),
        _ => return None,
    };
    // A full LRU evicts its oldest flow; a failed update leaves this one unknown
    // (`tx_identity_unknown`), which the receiving cluster's rules refuse.
    let _ = MASQ_IDS.insert(&key(translated, dst, src_port, dst_port, proto), &id, 0);
    Some(())
}
