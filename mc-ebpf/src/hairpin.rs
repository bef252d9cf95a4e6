//! The gateway's hairpin cache (docs/design.md §4): per CPU, how the hairpin last handled a TCP
//! or UDP flow from a sender (its SNAT or reverse translation, the next hop it went to), so that
//! the flow's later packets in the same second of the coarse clock skip the peer, route, SNAT
//! and next-hop lookups: the cache lines those touch looked like a large part of the hairpin's
//! cost per packet while a bulk transfer kept the CPU's caches busy (docs/benchmarks.md).

use aya_ebpf::programs::TcContext;
use mc_common::{
    Counter,
    dataplane::{CONFIG_STRETCHED_POLICY, FlowKey, HAIRPIN_SNAT, HairpinCacheEntry, LocalConfig},
};

use crate::{
    maps::{count_peer, hairpin_cache_slot, same_flow},
    nat::{L4, flow_key, ports, rewrite},
    packet::{IPPROTO_TCP, IPPROTO_UDP, Ipv4},
    tunnel::{self, Tunnel},
};

/// The hairpin for a packet whose flow this CPU's cache holds: translated and sent on as the
/// cache says (`peer`: see [`tunnel::retarget_via`]); its counter and verdict. `None`: not
/// cached, nothing written (the caller takes the full path).
#[inline(always)]
pub fn fast(
    ctx: &TcContext,
    tunnel: &Tunnel,
    cfg: &LocalConfig,
    ifindex: u32,
    peer: bool,
    plaintext: bool,
) -> Result<Option<(Counter, i32)>, Counter> {
    let sender = tunnel.outer.src;
    let generation = cfg.route_generation;
    let Some(slot) = cached(ctx, &tunnel.inner, sender, generation, ifindex, plaintext)? else {
        return Ok(None);
    };
    // SAFETY: this CPU's slot (see `cached`), read while this program runs.
    let e = unsafe { &*slot };
    let counter = if e.kind == HAIRPIN_SNAT {
        // From a local Node: the identity it claims is checked on every packet, as on the
        // full path.
        if cfg.flags & CONFIG_STRETCHED_POLICY != 0 {
            crate::policy::check_identity(ctx, tunnel);
        }
        Counter::HairpinSnat
    } else {
        Counter::HairpinUnsnat
    };
    let (src, dst) = (cfg.node_ip, e.dst);
    let (cluster, rx) = (e.cluster, e.kind != HAIRPIN_SNAT);
    let verdict = tunnel::retarget_via(ctx, &tunnel.outer, src, dst, &e.macs, ifindex, peer)?;
    count_peer(cluster, rx, ctx.len());
    Ok(Some((counter, verdict)))
}

/// Translates the inner packet `ip` from `sender` as this CPU's cache says, when it holds the
/// flow under `generation` for `ifindex` and has not expired; returns the slot. `None`: not
/// cached (or not TCP or UDP, or not a packet the full path would translate, or `plaintext`
/// from a remote gateway while encryption is on), nothing written;
/// the caller takes the full path, which decides (and counts) every case as without the cache.
#[inline(always)]
fn cached(
    ctx: &TcContext,
    ip: &Ipv4,
    sender: [u8; 4],
    generation: u16,
    ifindex: u32,
    plaintext: bool,
) -> Result<Option<*mut HairpinCacheEntry>, Counter> {
    if (ip.proto != IPPROTO_TCP && ip.proto != IPPROTO_UDP) || ip.is_later_fragment() {
        return Ok(None);
    }
    let Ok(L4::Ports(p)) = ports(ctx, ip, true) else {
        return Ok(None);
    };
    let key = flow_key(ip, &p);
    let Some(slot) = hairpin_cache_slot(&key, sender) else {
        return Ok(None);
    };
    // SAFETY: this CPU's slot; only this CPU's programs write it, and a TC program runs to its
    // end on its CPU (no other run on this CPU between the read and the use; as `mc_flow_cache`).
    let e = unsafe { &*slot };
    if e.kind == 0
        || e.sender != sender
        || e.generation != generation
        || e.ifindex != ifindex
        || !same_flow(&e.flow, &key)
        || tunnel::now() >= e.until_ns
        // With encryption on, a remote gateway's packet that did not come through WireGuard:
        // the full path drops it.
        || (plaintext && e.kind != HAIRPIN_SNAT)
    {
        return Ok(None);
    }
    let (addr_off, old_addr, port_off, old_port) = if e.kind == HAIRPIN_SNAT {
        (ip.src_off(), ip.src, p.src_off, p.src)
    } else {
        (ip.dst_off(), ip.dst, p.dst_off, p.dst)
    };
    rewrite(
        ctx, ip, &p, addr_off, old_addr, e.addr, port_off, old_port, e.port,
    )?;
    Ok(Some(slot))
}

/// Takes this CPU's slot for `flow` from `sender`, translated (`kind`) to `addr`:`port` by the
/// full path (to or from the remote cluster with index `cluster`) under `generation`: written
/// at once, but expired (`until_ns` 0) until [`crate::maps::hairpin_cache_complete`] (called by
/// [`tunnel::retarget`]) adds where the packet went. Done right after the translation so that
/// the flow's key does not stay on the program's stack (512 bytes, nearly all in use) while the
/// packet is re-addressed.
#[inline(always)]
pub fn claim(
    flow: &FlowKey,
    sender: [u8; 4],
    generation: u16,
    kind: u16,
    addr: [u8; 4],
    port: u16,
    cluster: u32,
) -> Option<*mut HairpinCacheEntry> {
    let slot = hairpin_cache_slot(flow, sender)?;
    // SAFETY: this CPU's slot, as in `cached`; written field by field, in place.
    unsafe {
        (*slot).until_ns = 0;
        (*slot).flow = *flow;
        (*slot).sender = sender;
        (*slot).generation = generation;
        (*slot).kind = kind;
        (*slot).addr = addr;
        (*slot).port = port;
        (*slot).cluster = cluster;
    }
    Some(slot)
}
