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
        BPF_F_ADJ_ROOM_ENCAP_L4_UDP, BPF_F_ADJ_ROOM_FIXED_GSO, BPF_FIB_LKUP_RET_SUCCESS,
        BPF_FIB_LOOKUP_OUTPUT, TC_ACT_OK, bpf_adj_room_mode::BPF_ADJ_ROOM_MAC, bpf_fib_lookup,
    },
    helpers::generated::{
        bpf_fib_lookup, bpf_get_hash_recalc, bpf_ktime_get_coarse_ns, bpf_redirect,
        bpf_redirect_neigh,
    },
    programs::TcContext,
};
use mc_common::{
    Counter,
    dataplane::{NEXT_HOP_TTL_NS, NextHop, VNI_UNKNOWN},
};

use crate::{
    NEXT_HOPS,
    packet::{ETH_HLEN, IPPROTO_UDP, Ipv4, checksum, ipv4_at, read},
};

const UDP_HLEN: usize = 8;
const GENEVE_HLEN: usize = 8;
const GENEVE_PROTO_IPV4: u16 = 0x0800;
/// Outer IPv4 + UDP + Geneve without options.
const ENCAP_LEN: usize = 20 + UDP_HLEN + GENEVE_HLEN;
const OUTER_TTL: u8 = 64;
const AF_INET: u8 = 2;

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
    let udp: [u8; UDP_HLEN] = read(ctx, outer.l4()).map_err(|_| Counter::DropTruncated)?;
    if u16::from_be_bytes([udp[2], udp[3]]) != port {
        return Ok(None);
    }
    // Our tunnel packets are sent with DF; a fragmented one cannot be decapsulated here.
    if outer.more_fragments() {
        return Err(Counter::DropBadGeneve);
    }
    let geneve: [u8; GENEVE_HLEN] =
        read(ctx, outer.l4() + UDP_HLEN).map_err(|_| Counter::DropTruncated)?;
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
        let check = checksum(&ip).to_be_bytes();
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

/// Points a tunnel packet at a new hop and redirects it there (the gateway's hairpin, on the
/// uplink's ingress) without decapsulating it: the outer IPv4 header is rebuilt with the new
/// source and destination, TTL restored and its checksum computed afresh, and the outer UDP
/// checksum cleared (the inner packet changed; it is optional in IPv4). With the next hop known,
/// the Ethernet addresses and these headers go in one store; returns the verdict.
#[inline(always)]
pub fn retarget(ctx: &TcContext, outer: &Ipv4, src: [u8; 4], dst: [u8; 4]) -> Result<i32, Counter> {
    let fail = |_| Counter::DropRewriteFailed;
    if outer.hlen != 20 || outer.off != ETH_HLEN {
        // Outer IP options never come from Strait's peers; not worth a slower path.
        return Err(Counter::DropBadGeneve);
    }
    // Ethernet addresses (filled below), EtherType, outer IPv4 and UDP headers.
    let mut f: [u8; 42] = read(ctx, 0).map_err(|_| Counter::DropTruncated)?;
    let h = ETH_HLEN;
    f[h + 8] = OUTER_TTL;
    f[h + 10] = 0;
    f[h + 11] = 0;
    f[h + 12..h + 16].copy_from_slice(&src);
    f[h + 16..h + 20].copy_from_slice(&dst);
    let mut ip = [0u8; 20];
    ip.copy_from_slice(&f[h..h + 20]);
    let check = checksum(&ip).to_be_bytes();
    f[h + 10] = check[0];
    f[h + 11] = check[1];
    f[h + 26] = 0;
    f[h + 27] = 0;
    let ifindex = ifindex(ctx);
    if let Some(macs) = next_hop(ctx, ifindex, src, dst) {
        f[..12].copy_from_slice(&macs);
        ctx.store(0, &f, 0).map_err(fail)?;
        // SAFETY: plain helper call.
        return Ok(unsafe { bpf_redirect(ifindex, 0) as i32 });
    }
    let mut headers = [0u8; 28];
    headers.copy_from_slice(&f[h..]);
    ctx.store(h, &headers, 0).map_err(fail)?;
    // SAFETY: a NULL params pointer (with length 0) asks the kernel to do the route lookup.
    Ok(unsafe { bpf_redirect_neigh(ifindex, core::ptr::null_mut(), 0, 0) as i32 })
}

/// The device the packet is on.
#[inline(always)]
fn ifindex(ctx: &TcContext) -> u32 {
    let skb = ctx.as_ptr() as *mut __sk_buff;
    // SAFETY: the context pointer is valid for the whole program run.
    unsafe { (*skb).ifindex }
}

/// The destination and source MAC addresses for sending to `dst` out of `ifindex`, when the
/// route and the neighbour are known and the route leaves by that device: from the next-hop
/// cache while its entry is fresh, else from the kernel (`bpf_fib_lookup`), which refills it.
#[inline(always)]
fn next_hop(ctx: &TcContext, ifindex: u32, src: [u8; 4], dst: [u8; 4]) -> Option<[u8; 12]> {
    // SAFETY: plain helper call.
    let now = unsafe { bpf_ktime_get_coarse_ns() };
    // SAFETY: the entry is copied out at once (updates replace entries, never edit them).
    if let Some(hop) = unsafe { NEXT_HOPS.get(&dst) }
        && hop.ifindex == ifindex
        && now < hop.expires_ns
    {
        return Some(hop.macs);
    }
    let macs = fib_next_hop(ctx, ifindex, src, dst)?;
    let hop = NextHop {
        macs,
        ifindex,
        expires_ns: now + NEXT_HOP_TTL_NS,
    };
    // A full table only means the next packet asks the kernel again.
    let _ = NEXT_HOPS.insert(&dst, &hop, 0);
    Some(macs)
}

/// [`next_hop`] from the kernel's FIB and neighbour table.
#[inline(always)]
fn fib_next_hop(ctx: &TcContext, ifindex: u32, src: [u8; 4], dst: [u8; 4]) -> Option<[u8; 12]> {
    let mut params = zeroed_fib_params();
    params.family = AF_INET;
    params.ifindex = ifindex;
    params.__bindgen_anon_3.ipv4_src = u32::from_ne_bytes(src);
    params.__bindgen_anon_4.ipv4_dst = u32::from_ne_bytes(dst);
    // SAFETY: params lives on this stack frame for the call; its size is passed.
    let rc = unsafe {
        bpf_fib_lookup(
            ctx.as_ptr().cast(),
            &mut params,
            core::mem::size_of::<bpf_fib_lookup>() as i32,
            BPF_FIB_LOOKUP_OUTPUT,
        )
    };
    if rc != BPF_FIB_LKUP_RET_SUCCESS as i64 || params.ifindex != ifindex {
        return None;
    }
    // SAFETY: the helper filled the address variant of the union on success.
    let (dmac, smac) = unsafe {
        let a = &params.__bindgen_anon_6.__bindgen_anon_2;
        (a.dmac, a.smac)
    };
    let mut macs = [0u8; 12];
    macs[..6].copy_from_slice(&dmac);
    macs[6..].copy_from_slice(&smac);
    Some(macs)
}

/// An all-zero `bpf_fib_lookup`, written as 32-bit words: `mem::zeroed` compiles to a call to a
/// byte-at-a-time `memset` in BPF (64 iterations).
#[inline(always)]
fn zeroed_fib_params() -> bpf_fib_lookup {
    const WORDS: usize = core::mem::size_of::<bpf_fib_lookup>() / 4;
    const _: () = assert!(
        core::mem::align_of::<bpf_fib_lookup>() >= 4
            && core::mem::size_of::<bpf_fib_lookup>() % 4 == 0
    );
    let mut raw = core::mem::MaybeUninit::<bpf_fib_lookup>::uninit();
    let words = raw.as_mut_ptr().cast::<u32>();
    let mut i = 0;
    while i < WORDS {
        // SAFETY: in bounds (the struct is WORDS 32-bit words and 4-aligned); volatile so the
        // stores are not merged back into a memset.
        unsafe { core::ptr::write_volatile(words.add(i), 0) };
        i += 1;
    }
    // SAFETY: every byte was written; all-zero is a valid value of this plain C struct.
    unsafe { raw.assume_init() }
}

/// Sends a packet just encapsulated on the uplink's egress to `dst`. With the route and the
/// neighbour known (`bpf_fib_lookup`), the Ethernet header is written here and the packet goes
/// on without another route lookup; otherwise the kernel resolves it (`bpf_redirect_neigh`).
#[inline(always)]
pub fn send_out(ctx: &TcContext, src: [u8; 4], dst: [u8; 4]) -> i32 {
    let ifindex = ifindex(ctx);
    if let Some(macs) = next_hop(ctx, ifindex, src, dst)
        && ctx.store(0, &macs, 0).is_ok()
    {
        return TC_ACT_OK;
    }
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
