//! Strait's uplink programs (docs/design.md §4): `mc_egress` tunnels packets for remote clusters
//! (to the local gateway from a regular Node; SNATed, to the remote gateway from the gateway), and
//! `mc_ingress` decapsulates, runs the gateway's hairpin between local Nodes and remote gateways,
//! and drops tunnel traffic from anyone else. Every packet is counted under exactly one verdict or
//! drop reason.
//!
//! Cold paths (ICMP errors, a flow's first packet, the once-a-second SNAT check, the next-hop
//! cache's misses, SYN option walks, fragmentation-needed) are `#[inline(never)]` functions,
//! called BPF-to-BPF: everything else is inlined, and without them the programs' every-packet
//! code would be spread over half as many instructions again (19 and 28 KiB of BPF against 13 and
//! 18), which costs instruction-cache misses on every packet.
#![no_std]
#![no_main]
// The program macros expand to a `pub fn` taking the raw context pointer.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

mod hairpin;
mod maps;
mod masq;
mod mtu;
mod nat;
mod packet;
mod policy;
mod probe;
mod tunnel;

use aya_ebpf::{
    EbpfContext as _,
    bindings::{__sk_buff, BPF_F_INGRESS, TC_ACT_OK, TC_ACT_SHOT, TC_ACT_UNSPEC},
    helpers::generated::{bpf_redirect, bpf_skb_change_head},
    macros::classifier,
    programs::TcContext,
};
use mc_common::{
    Counter,
    dataplane::{
        CONFIG_MASQ_IDS, CONFIG_ROUTED_VIA_GATEWAY, CONFIG_STRETCHED_POLICY, CONFIG_UPLINK_PEER,
        CONFIG_WIREGUARD, DEFAULT_TUNNEL_PORT, HAIRPIN_SNAT, HAIRPIN_UNSNAT, LocalConfig,
        PEER_LOCAL_NODE, PEER_REMOTE_GATEWAY, ROLE_GATEWAY, ROLE_NODE, ROUTE_NO_WIREGUARD_PEER,
        VNI_UNKNOWN, WIREGUARD_MARK,
    },
};

use crate::{
    maps::{config, count, peer_kind, pod_vni, remote_route},
    packet::{ETH_HLEN, ETH_P_IP, IPPROTO_TCP, IPPROTO_UDP, dst_port, eth_ipv4},
    tunnel::Tunnel,
};

/// Under TCX, "continue with the next program, then the kernel's default" (TCX_NEXT). Strait
/// shares the hook with whatever CNI is on the Node, so "nothing for us" never ends the chain.
const VERDICT_NEXT: i32 = TC_ACT_UNSPEC;
const VERDICT_DROP: i32 = TC_ACT_SHOT;
/// Send the (rewritten) packet on out of this device.
const VERDICT_PASS: i32 = TC_ACT_OK;

/// A counter and the verdict to return; `Err` is a drop reason.
type Outcome = Result<(Counter, i32), Counter>;

#[classifier]
pub fn mc_egress(ctx: TcContext) -> i32 {
    finish(&ctx, try_egress(&ctx))
}

#[classifier]
pub fn mc_ingress(ctx: TcContext) -> i32 {
    finish(&ctx, try_ingress(&ctx))
}

#[inline(always)]
fn finish(ctx: &TcContext, outcome: Outcome) -> i32 {
    let (counter, verdict) = match outcome {
        Ok(done) => done,
        Err(reason) => (reason, VERDICT_DROP),
    };
    count(ctx, counter);
    verdict
}

#[inline(always)]
fn tunnel_port(cfg: &LocalConfig) -> u16 {
    if cfg.tunnel_port == 0 {
        DEFAULT_TUNNEL_PORT
    } else {
        cfg.tunnel_port
    }
}

fn try_egress(ctx: &TcContext) -> Outcome {
    let Some(ip) = eth_ipv4(ctx)? else {
        return Ok((Counter::PassNotIpv4, VERDICT_NEXT));
    };
    let cfg = config();
    if cfg.role != ROLE_NODE && cfg.role != ROLE_GATEWAY {
        return Ok((Counter::PassIpv4, VERDICT_NEXT));
    }
    let port = tunnel_port(&cfg);
    let encrypted = cfg.flags & CONFIG_WIREGUARD != 0;
    // Our own encapsulations sent by `bpf_redirect_neigh`, and the hairpin's packets when it
    // transmits on the uplink (not when it hands them to a veth's other end), come through here
    // again: leave them alone.
    if ip.proto == IPPROTO_UDP
        && !ip.is_later_fragment()
        && ip.src == cfg.node_ip
        && dst_port(ctx, &ip)? == port
    {
        // The gateway agent's tunnel probe (through WireGuard with encryption on).
        if cfg.role == ROLE_GATEWAY
            && peer_kind(&ip.dst) == PEER_REMOTE_GATEWAY
            && let Some(verdict) = probe::send(ctx, &ip, &cfg, encrypted, VERDICT_NEXT)?
        {
            return Ok((Counter::ProbeSent, verdict));
        }
        return Ok((Counter::PassOwnTunnel, VERDICT_NEXT));
    }
    let route = remote_route(ip.dst);
    // Not for a remote prefix: only a reply to a flow a remote cluster opened (to its gateway's
    // address, kube-proxy having reversed its DNAT) goes into the tunnel.
    let reply_to = if route.is_none() {
        let (kind, cluster) = maps::peer(&ip.dst);
        if kind != PEER_REMOTE_GATEWAY {
            return Ok((Counter::PassIpv4, VERDICT_NEXT));
        }
        cluster
    } else {
        0
    };
    // WireGuard's own datagrams to a remote gateway: left alone too.
    if route.is_none()
        && encrypted
        && ip.proto == IPPROTO_UDP
        && !ip.is_later_fragment()
        && dst_port(ctx, &ip)? == maps::wireguard().port
    {
        return Ok((Counter::PassOwnWireGuard, VERDICT_NEXT));
    }
    let gso_flags = match fit_tunnel(ctx, &ip, &cfg)? {
        Ok(flags) => flags,
        Err(refused) => return Ok(refused),
    };
    // The source Pod's label identity rides in the VNI (read before the gateway's SNAT); a
    // flow the CNI masqueraded has it from conntrack (`masq`).
    let mut vni = pod_vni(&ip.src);
    if vni == VNI_UNKNOWN && cfg.flags & CONFIG_MASQ_IDS != 0 && route.is_some() {
        vni = policy::masqueraded_vni(ctx, &ip);
    }
    if cfg.role == ROLE_NODE {
        tunnel::encap(
            ctx,
            &ip,
            cfg.node_ip,
            cfg.gateway_internal_ip,
            port,
            vni,
            gso_flags,
        )?;
        if route.is_some() && cfg.flags & CONFIG_ROUTED_VIA_GATEWAY != 0 {
            // The kernel routed it via the hop toward the gateway: its Ethernet header is right.
            return Ok((Counter::TxToGateway, VERDICT_PASS));
        }
        let verdict = tunnel::send_out(ctx, cfg.node_ip, cfg.gateway_internal_ip, tunnel::now());
        return Ok((Counter::TxToGateway, verdict));
    }
    if let Some(route) = route {
        // A process or Pod on the gateway Node itself opens a cross-cluster flow.
        if encrypted && route.cluster & ROUTE_NO_WIREGUARD_PEER != 0 {
            return Err(Counter::DropWireGuardNoPeer);
        }
        let now = tunnel::now();
        let _ = nat::snat(ctx, &ip, cfg.gateway_ip, cfg.node_ip, now)?;
        let src = if encrypted {
            cfg.gateway_ip
        } else {
            cfg.node_ip
        };
        tunnel::encap(ctx, &ip, src, route.gateway_ip, port, vni, gso_flags)?;
        maps::count_peer(route.cluster, false, ctx.len());
        let verdict = if encrypted {
            tunnel::into_wireguard(&maps::wireguard())?
        } else {
            tunnel::send_out(ctx, cfg.node_ip, route.gateway_ip, now)
        };
        return Ok((Counter::TxSnatToRemote, verdict));
    }
    // A reply to a flow a remote gateway opened: the tunnel packet goes to the address the
    // kernel just routed this one to, so the Ethernet header it wrote is already right.
    if encrypted {
        tunnel::encap(ctx, &ip, cfg.gateway_ip, ip.dst, port, vni, gso_flags)?;
        maps::count_peer(reply_to, false, ctx.len());
        let verdict = tunnel::into_wireguard(&maps::wireguard())?;
        return Ok((Counter::TxReplyToRemote, verdict));
    }
    tunnel::encap(ctx, &ip, cfg.node_ip, ip.dst, port, vni, gso_flags)?;
    maps::count_peer(reply_to, false, ctx.len());
    Ok((Counter::TxReplyToRemote, VERDICT_PASS))
}

/// Makes a packet bound for the tunnel fit it: clamps the MSS of SYNs and SYN-ACKs, and
/// answers an oversize DF packet with ICMP fragmentation-needed (`Err`: the packet's outcome).
/// `Ok`: the `bpf_skb_adjust_room` flags for its segments' size (GSO) to encapsulate it with.
#[inline(always)]
fn fit_tunnel(
    ctx: &TcContext,
    ip: &packet::Ipv4,
    cfg: &LocalConfig,
) -> Result<Result<u64, (Counter, i32)>, Counter> {
    let gso_flags = match mtu::check(ctx, ip, cfg.mtu) {
        mtu::Fit::Fits(flags) => flags,
        mtu::Fit::TooBig => {
            let verdict = mtu::frag_needed(ctx, ip, cfg.mtu)?;
            return Ok(Err((Counter::TxFragNeeded, verdict)));
        }
        mtu::Fit::TooBigNoDf => return Err(Counter::DropTooBig),
    };
    if mtu::clamp_mss(ctx, ip, cfg.mtu)? {
        count(ctx, Counter::TcpMssClamped);
    }
    Ok(Ok(gso_flags))
}

fn try_ingress(ctx: &TcContext) -> Outcome {
    let Some(outer) = eth_ipv4(ctx)? else {
        return Ok((Counter::PassNotIpv4, VERDICT_NEXT));
    };
    let cfg = config();
    let tunnel = match tunnel::parse(ctx, &outer, tunnel_port(&cfg))? {
        tunnel::Parsed::Other => return Ok((Counter::PassIpv4, VERDICT_NEXT)),
        tunnel::Parsed::Foreign => return Ok((Counter::PassForeignTunnel, VERDICT_NEXT)),
        tunnel::Parsed::Tunnel(t) => t,
        tunnel::Parsed::Probe(t) if cfg.role == ROLE_GATEWAY => {
            let encrypted = cfg.flags & CONFIG_WIREGUARD != 0;
            let plaintext = encrypted && !take_wireguard_mark(ctx);
            return probe::take(ctx, &cfg, &t, encrypted, plaintext);
        }
        // Only gateways probe each other.
        tunnel::Parsed::Probe(_) => return Ok((Counter::PassForeignTunnel, VERDICT_NEXT)),
    };
    match cfg.role {
        ROLE_NODE => {
            // A regular Node only takes tunnel traffic from its own cluster's gateway. Geneve
            // from anyone else is not Strait's (a CNI's between its Nodes): the kernel's.
            if tunnel.outer.src != cfg.gateway_internal_ip {
                return Ok((Counter::PassForeignTunnel, VERDICT_NEXT));
            }
            tunnel::decap(ctx, &tunnel)?;
            Ok((Counter::RxFromGateway, VERDICT_NEXT))
        }
        ROLE_GATEWAY => gateway_ingress(ctx, &cfg, &tunnel),
        _ => Ok((Counter::PassNotConfigured, VERDICT_NEXT)),
    }
}

#[inline(always)]
fn gateway_ingress(ctx: &TcContext, cfg: &LocalConfig, tunnel: &Tunnel) -> Outcome {
    let sender = tunnel.outer.src;
    let ifindex = tunnel::ifindex(ctx);
    let peer = cfg.flags & CONFIG_UPLINK_PEER != 0;
    let encrypted = cfg.flags & CONFIG_WIREGUARD != 0;
    // With encryption on, tunnel traffic from remote gateways comes only as the WireGuard
    // device's program hands it over, marked (a frame from the wire has no mark here).
    let plaintext = encrypted && !take_wireguard_mark(ctx);
    // A flow the hairpin handled on this CPU in this second: as then, without the lookups.
    if let Some(done) = hairpin::fast(ctx, tunnel, cfg, ifindex, peer, plaintext)? {
        return Ok(done);
    }
    match peer_kind(&sender) {
        PEER_LOCAL_NODE => {
            if let Some(route) = remote_route(tunnel.inner.dst) {
                if cfg.flags & CONFIG_STRETCHED_POLICY != 0 {
                    policy::check_identity(ctx, tunnel);
                }
                // The hairpin: SNAT the inner packet and send it on to the remote gateway
                // without decapsulating it or letting it into the stack.
                let now = tunnel::now();
                let translated = nat::snat(ctx, &tunnel.inner, cfg.gateway_ip, sender, now)?;
                let slot = translated.and_then(|(flow, port)| {
                    let generation = cfg.route_generation;
                    hairpin::claim(
                        &flow,
                        sender,
                        generation,
                        HAIRPIN_SNAT,
                        cfg.gateway_ip,
                        port,
                        route.cluster,
                    )
                });
                let dst = route.gateway_ip;
                if encrypted {
                    // Not cached: the slot stays expired, so the flow's packets take this path.
                    if route.cluster & ROUTE_NO_WIREGUARD_PEER != 0 {
                        return Err(Counter::DropWireGuardNoPeer);
                    }
                    let hop = (cfg.gateway_ip, dst);
                    let wg = maps::wireguard();
                    let verdict = tunnel::retarget_into_wireguard(ctx, &tunnel.outer, hop, &wg)?;
                    maps::count_peer(route.cluster, false, ctx.len());
                    return Ok((Counter::HairpinSnat, verdict));
                }
                let hop = (cfg.node_ip, dst);
                let verdict = tunnel::retarget(ctx, &tunnel.outer, hop, now, slot, peer)?;
                maps::count_peer(route.cluster, false, ctx.len());
                return Ok((Counter::HairpinSnat, verdict));
            }
            if peer_kind(&tunnel.inner.dst) == PEER_REMOTE_GATEWAY {
                // A reply to a remote-opened flow: conntrack on this Node reverses the DNAT.
                tunnel::decap(ctx, tunnel)?;
                return Ok((Counter::RxReplyFromNode, VERDICT_NEXT));
            }
            Err(Counter::DropNotRemote)
        }
        PEER_REMOTE_GATEWAY => {
            // Everything the remote gateway's tunnel brings, whatever becomes of it (its
            // cluster looked up again: the program's stack has no room to keep it).
            maps::count_peer(maps::peer(&sender).1, true, ctx.len());
            if plaintext {
                return Err(Counter::DropPlaintextFromRemote);
            }
            if tunnel.inner.dst != cfg.gateway_ip {
                // A flow a remote cluster opened to a local ClusterIP or Pod. Its gateway SNATed
                // it to the gateway's own address, the tunnel's source: any other inner source
                // is forged (another cluster's or a local address, to slip past policy).
                if tunnel.inner.src != tunnel.outer.src {
                    return Err(Counter::DropSpoofedSource);
                }
                // And it is for this cluster: not relayed on to another member under this
                // gateway's address, not to a Node's or gateway's own address.
                let dst = tunnel.inner.dst;
                if dst == cfg.node_ip || peer_kind(&dst) != 0 || remote_route(dst).is_some() {
                    return Err(Counter::DropNotLocal);
                }
                // And to something this cluster exported (an allow-list the agent keeps from
                // the ServiceExports): not its API server, an unexported Service, a Pod
                // without Pod-to-Pod connectivity, or any host the gateway Node can route to.
                if !maps::exposed(dst, exposed_port(ctx, &tunnel.inner)?, tunnel.inner.proto) {
                    return Err(Counter::DropNotExported);
                }
                if cfg.flags & CONFIG_STRETCHED_POLICY != 0 {
                    policy::record_flow(ctx, tunnel);
                }
                tunnel::decap(ctx, tunnel)?;
                return Ok((Counter::RxFromRemote, VERDICT_NEXT));
            }
            let (node, translated) = nat::unsnat(ctx, &tunnel.inner, sender)?;
            if node == cfg.node_ip {
                tunnel::decap(ctx, tunnel)?;
                return Ok((Counter::RxUnsnatLocal, VERDICT_NEXT));
            }
            let slot = translated.and_then(|(flow, addr, port)| {
                let generation = cfg.route_generation;
                hairpin::claim(
                    &flow,
                    sender,
                    generation,
                    HAIRPIN_UNSNAT,
                    addr,
                    port,
                    maps::peer(&sender).1,
                )
            });
            let now = tunnel::now();
            let hop = (cfg.node_ip, node);
            let verdict = tunnel::retarget(ctx, &tunnel.outer, hop, now, slot, peer)?;
            Ok((Counter::HairpinUnsnat, verdict))
        }
        // Strait's tunnel packet from neither a local Node nor a remote gateway: a gateway that
        // left, a Node not known yet, or a flood at the gateway's public address. Nothing on
        // this Node would take it (a CNI's Geneve carries Ethernet and is `Foreign`), so it is
        // dropped here, counted, before the stack spends anything on it.
        _ => Err(Counter::DropUnknownPeer),
    }
}

/// Whether the packet came through the WireGuard device (`mc_wg_ingress` marked it); the mark
/// is cleared, so that nothing after Strait (a CNI's rules by mark) sees it.
#[inline(always)]
fn take_wireguard_mark(ctx: &TcContext) -> bool {
    let skb = ctx.as_ptr() as *mut __sk_buff;
    // SAFETY: the context pointer is valid for the whole program run; TC programs may write
    // `mark`.
    unsafe {
        if (*skb).mark != WIREGUARD_MARK {
            return false;
        }
        (*skb).mark = 0;
    }
    true
}

/// The WireGuard device's ingress (encryption on): a decrypted packet from a peer, bare IPv4.
/// Only Strait's tunnel traffic to this gateway may come this way: it gets the Ethernet header
/// the uplink's frames have, the mark, and goes to the uplink's ingress, where `mc_ingress`
/// takes it as any tunnel packet (and as one that came encrypted). Anything else a peer sends
/// (WireGuard lets it use only its gateway's address as source) is dropped: a remote cluster
/// may tunnel, not reach the gateway Node.
#[classifier]
pub fn mc_wg_ingress(ctx: TcContext) -> i32 {
    finish(&ctx, try_wg_ingress(&ctx))
}

fn try_wg_ingress(ctx: &TcContext) -> Outcome {
    let wg = maps::wireguard();
    let skb = ctx.as_ptr() as *mut __sk_buff;
    // SAFETY: the context pointer is valid for the whole program run.
    let protocol = unsafe { (*skb).protocol };
    if wg.uplink_ifindex == 0 || protocol != u32::from(ETH_P_IP.to_be()) {
        return Err(Counter::DropWireGuardNotTunnel);
    }
    // SAFETY: plain helper call on this program's packet.
    if unsafe { bpf_skb_change_head(ctx.as_ptr().cast(), ETH_HLEN as u32, 0) } != 0 {
        return Err(Counter::DropRewriteFailed);
    }
    let mac = wg.uplink_mac;
    let eth: [u8; ETH_HLEN] = [
        mac[0], mac[1], mac[2], mac[3], mac[4], mac[5], mac[0], mac[1], mac[2], mac[3], mac[4],
        mac[5], 0x08, 0x00,
    ];
    ctx.store(0, &eth, 0)
        .map_err(|_| Counter::DropRewriteFailed)?;
    let Some(outer) = eth_ipv4(ctx)? else {
        return Err(Counter::DropWireGuardNotTunnel);
    };
    let cfg = config();
    match tunnel::parse(ctx, &outer, tunnel_port(&cfg))? {
        tunnel::Parsed::Tunnel(t) | tunnel::Parsed::Probe(t) if t.outer.dst == cfg.gateway_ip => {}
        _ => return Err(Counter::DropWireGuardNotTunnel),
    }
    // SAFETY: as above; TC programs may write `mark`.
    unsafe { (*skb).mark = WIREGUARD_MARK };
    // SAFETY: plain helper call.
    let verdict = unsafe { bpf_redirect(wg.uplink_ifindex, u64::from(BPF_F_INGRESS)) as i32 };
    Ok((Counter::RxWireGuard, verdict))
}

/// The destination port the exposure map is keyed by: a TCP or UDP packet's (its first
/// fragment's), else 0 (later fragments, ICMP; the agent writes port 0 beside every exposed
/// address's ports).
#[inline(always)]
fn exposed_port(ctx: &TcContext, ip: &packet::Ipv4) -> Result<u16, Counter> {
    if (ip.proto == IPPROTO_TCP || ip.proto == IPPROTO_UDP) && !ip.is_later_fragment() {
        return dst_port(ctx, ip);
    }
    Ok(0)
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
