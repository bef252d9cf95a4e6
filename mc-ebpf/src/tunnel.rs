//! Geneve (UDP) encapsulation, decapsulation and in-place re-addressing of tunnel packets.
//!
//! Strait's Geneve carries the inner IPv4 packet directly (protocol type 0x0800): 36 bytes of
//! overhead. Growing and shrinking use `bpf_skb_adjust_room` at the MAC layer with the encap /
//! decap flags so GSO packets stay GSO. The outer UDP checksum is 0 and its source port comes from
//! the flow hash, so the underlay spreads flows (DESIGN §4).

use aya_ebpf::{
    EbpfContext as _,
    bindings::{
        __sk_buff, BPF_F_ADJ_ROOM_DECAP_L3_IPV4, BPF_F_ADJ_ROOM_ENCAP_L3_IPV4,
        BPF_F_ADJ_ROOM_ENCAP_L4_UDP, BPF_F_ADJ_ROOM_FIXED_GSO, bpf_adj_room_mode::BPF_ADJ_ROOM_MAC,
    },
    helpers::generated::{bpf_get_hash_recalc, bpf_redirect_neigh},
    programs::TcContext,
};
use mc_common::{Counter, dataplane::VNI_UNKNOWN};

use crate::packet::{ETH_HLEN, IPPROTO_UDP, Ipv4, ipv4_at, ipv4_header_checksum};

const UDP_HLEN: usize = 8;
const GENEVE_HLEN: usize = 8;
const GENEVE_PROTO_IPV4: u16 = 0x0800;
/// Outer IPv4 + UDP + Geneve without options.
const ENCAP_LEN: usize = 20 + UDP_HLEN + GENEVE_HLEN;
const OUTER_TTL: u8 = 64;

/// A parsed tunnel packet: the outer IPv4 header and the inner one.
pub struct Tunnel {
    pub outer: Ipv4,
    pub inner: Ipv4,
}

/// `Ok(None)` when the packet is not Geneve to `port`; malformed Geneve is an error (a drop).
#[inline(always)]
pub fn parse(ctx: &TcContext, outer: &Ipv4, port: u16) -> Result<Option<Tunnel>, Counter> {
    if outer.proto != IPPROTO_UDP || outer.is_later_fragment() {
        return Ok(None);
    }
    let udp: [u8; UDP_HLEN] = ctx.load(outer.l4()).map_err(|_| Counter::DropTruncated)?;
    if u16::from_be_bytes([udp[2], udp[3]]) != port {
        return Ok(None);
    }
    // Our tunnel packets are sent with DF; a fragmented one cannot be decapsulated here.
    if outer.more_fragments() {
        return Err(Counter::DropBadGeneve);
    }
    let geneve: [u8; GENEVE_HLEN] = ctx
        .load(outer.l4() + UDP_HLEN)
        .map_err(|_| Counter::DropTruncated)?;
    let version = geneve[0] >> 6;
    let options_len = usize::from(geneve[0] & 0x3f) * 4;
    let control = geneve[1] & 0x80 != 0;
    let protocol = u16::from_be_bytes([geneve[2], geneve[3]]);
    if version != 0 || control || protocol != GENEVE_PROTO_IPV4 {
        return Err(Counter::DropBadGeneve);
    }
    let inner_off = outer.l4() + UDP_HLEN + GENEVE_HLEN + options_len;
    let inner = ipv4_at(ctx, inner_off, Counter::DropBadGeneve)?;
    Ok(Some(Tunnel {
        outer: *outer,
        inner,
    }))
}

/// Wraps the IPv4 packet that follows the Ethernet header in outer IPv4/UDP/Geneve headers from
/// `src` to `dst`.
#[inline(always)]
pub fn encap(ctx: &TcContext, src: [u8; 4], dst: [u8; 4], port: u16) -> Result<(), Counter> {
    let inner_len = (ctx.len() as usize).saturating_sub(ETH_HLEN);
    let source_port = flow_source_port(ctx);
    let gso_flags = (BPF_F_ADJ_ROOM_ENCAP_L3_IPV4 | BPF_F_ADJ_ROOM_ENCAP_L4_UDP) as u64;
    if ctx
        .adjust_room(ENCAP_LEN as i32, BPF_ADJ_ROOM_MAC, gso_flags)
        .is_err()
        && ctx
            .adjust_room(ENCAP_LEN as i32, BPF_ADJ_ROOM_MAC, 0)
            .is_err()
    {
        return Err(Counter::DropRewriteFailed);
    }
    let mut header = [0u8; ENCAP_LEN];
    let total = (ENCAP_LEN + inner_len) as u16;
    let ip: [u8; 20] = {
        let t = total.to_be_bytes();
        let mut ip = [
            0x45,
            0,
            t[0],
            t[1],
            0,
            0,
            0x40,
            0, // version/IHL, TOS, length, id, DF
            OUTER_TTL,
            IPPROTO_UDP,
            0,
            0, // TTL, protocol, checksum
            src[0],
            src[1],
            src[2],
            src[3],
            dst[0],
            dst[1],
            dst[2],
            dst[3],
        ];
        let check = ipv4_header_checksum(&ip).to_be_bytes();
        ip[10] = check[0];
        ip[11] = check[1];
        ip
    };
    header[..20].copy_from_slice(&ip);
    let udp_len = ((UDP_HLEN + GENEVE_HLEN + inner_len) as u16).to_be_bytes();
    let sport = source_port.to_be_bytes();
    let dport = port.to_be_bytes();
    header[20..28].copy_from_slice(&[
        sport[0], sport[1], dport[0], dport[1], udp_len[0], udp_len[1], 0, 0,
    ]);
    let proto = GENEVE_PROTO_IPV4.to_be_bytes();
    let vni = (VNI_UNKNOWN << 8).to_be_bytes();
    header[28..36].copy_from_slice(&[0, 0, proto[0], proto[1], vni[0], vni[1], vni[2], 0]);
    ctx.store(ETH_HLEN, &header, 0)
        .map_err(|_| Counter::DropRewriteFailed)
}

/// Removes the outer headers so the inner packet follows the Ethernet header.
#[inline(always)]
pub fn decap(ctx: &TcContext, tunnel: &Tunnel) -> Result<(), Counter> {
    let len = (tunnel.inner.off - ETH_HLEN) as i32;
    let flags = (BPF_F_ADJ_ROOM_FIXED_GSO | BPF_F_ADJ_ROOM_DECAP_L3_IPV4) as u64;
    if ctx.adjust_room(-len, BPF_ADJ_ROOM_MAC, flags).is_err()
        && ctx
            .adjust_room(-len, BPF_ADJ_ROOM_MAC, BPF_F_ADJ_ROOM_FIXED_GSO as u64)
            .is_err()
    {
        return Err(Counter::DropRewriteFailed);
    }
    Ok(())
}

/// Points a tunnel packet at a new hop without decapsulating it: outer source and destination
/// rewritten (header checksum updated), TTL restored, outer UDP checksum cleared (the inner
/// packet changed and the outer checksum is optional in IPv4).
#[inline(always)]
pub fn retarget(ctx: &TcContext, outer: &Ipv4, src: [u8; 4], dst: [u8; 4]) -> Result<(), Counter> {
    let fail = |_| Counter::DropRewriteFailed;
    let old: [u8; 8] = ctx.load(outer.src_off()).map_err(fail)?;
    let old_src = u32::from_ne_bytes([old[0], old[1], old[2], old[3]]);
    let old_dst = u32::from_ne_bytes([old[4], old[5], old[6], old[7]]);
    let ttl: [u8; 2] = ctx.load(outer.off + 8).map_err(fail)?;
    ctx.l3_csum_replace(
        outer.check_off(),
        u64::from(old_src),
        u64::from(u32::from_ne_bytes(src)),
        4,
    )
    .map_err(fail)?;
    ctx.l3_csum_replace(
        outer.check_off(),
        u64::from(old_dst),
        u64::from(u32::from_ne_bytes(dst)),
        4,
    )
    .map_err(fail)?;
    let new_ttl = [OUTER_TTL, ttl[1]];
    ctx.l3_csum_replace(
        outer.check_off(),
        u64::from(u16::from_ne_bytes(ttl)),
        u64::from(u16::from_ne_bytes(new_ttl)),
        2,
    )
    .map_err(fail)?;
    ctx.store(outer.off + 8, &new_ttl, 0).map_err(fail)?;
    let addrs = [
        src[0], src[1], src[2], src[3], dst[0], dst[1], dst[2], dst[3],
    ];
    ctx.store(outer.src_off(), &addrs, 0).map_err(fail)?;
    ctx.store(outer.l4() + 6, &[0u8; 2], 0).map_err(fail)
}

/// Sends the (re)encapsulated packet out of the device it is on: the kernel looks up the route
/// to the outer destination and its neighbour and fills in the Ethernet header.
#[inline(always)]
pub fn send_out(ctx: &TcContext) -> i32 {
    let skb = ctx.as_ptr() as *const __sk_buff;
    // SAFETY: the context pointer is valid for the whole program run.
    let ifindex = unsafe { (*skb).ifindex };
    // SAFETY: a NULL params pointer (with length 0) asks the kernel to do the route lookup.
    unsafe { bpf_redirect_neigh(ifindex, core::ptr::null_mut(), 0, 0) as i32 }
}

/// Outer UDP source port: from the flow hash (the one the stack already has when it has one), in
/// the range 49152..=65535.
#[inline(always)]
fn flow_source_port(ctx: &TcContext) -> u16 {
    let skb = ctx.as_ptr() as *mut __sk_buff;
    // SAFETY: the context pointer is valid for the whole program run.
    let mut hash = unsafe { (*skb).hash };
    if hash == 0 {
        // SAFETY: as above.
        hash = unsafe { bpf_get_hash_recalc(skb) };
    }
    0xc000 | (hash as u16 & 0x3fff)
}
