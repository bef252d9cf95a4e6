//! Geneve (UDP) encapsulation, decapsulation and in-place re-addressing of tunnel packets.
//!
//! Strait's Geneve carries the inner IPv4 packet directly (protocol type 0x0800): 36 bytes of
//! overhead. Growing and shrinking use `bpf_skb_adjust_room` at the MAC layer with the encap /
//! decap flags so GSO packets stay GSO. The outer UDP checksum is 0 and its source port comes from
//! the flow hash, so the underlay spreads flows (docs/design.md §4).

use aya_ebpf::{
    EbpfContext as _,
    bindings::{
        __sk_buff, BPF_F_ADJ_ROOM_DECAP_L3_IPV4, BPF_F_ADJ_ROOM_ENCAP_L3_IPV4,
        BPF_F_ADJ_ROOM_ENCAP_L4_UDP, BPF_F_ADJ_ROOM_FIXED_GSO, BPF_FIB_LKUP_RET_SUCCESS,
        BPF_FIB_LOOKUP_OUTPUT, TC_ACT_OK, bpf_adj_room_mode::BPF_ADJ_ROOM_MAC, bpf_fib_lookup,
    },
    helpers::generated::{
        bpf_fib_lookup, bpf_ktime_get_coarse_ns, bpf_redirect, bpf_redirect_neigh,
        bpf_redirect_peer,
    },
    programs::TcContext,
};
use mc_common::{
    Counter,
    dataplane::{
        GENEVE_OAM, HairpinCacheEntry, NEXT_HOP_TTL_NS, NextHop, VNI_UNKNOWN, WireGuardConfig,
    },
};

use core::mem::offset_of;

use network_types::eth::EthHdr;

use crate::{
    maps::{NEXT_HOPS, hairpin_cache_complete},
    packet::{
        ETH_HLEN, ETH_P_IP, GENEVE_FLAGS_OFF, GENEVE_HLEN, GENEVE_PROTO_OFF,
        GENEVE_VER_OPT_LEN_OFF, GENEVE_VNI_OFF, IPPROTO_TCP, IPPROTO_UDP, IPV4_CHECK_OFF,
        IPV4_HLEN, Ipv4, L4_DST_PORT_OFF, L4_SRC_PORT_OFF, UDP_HLEN, UDP_LEN_OFF, be16, fold,
        sum_words, whole_ipv4_at,
    },
};

const GENEVE_PROTO_IPV4: u16 = 0x0800;
/// Outer IPv4 + UDP + Geneve without options.
const ENCAP_LEN: usize = IPV4_HLEN + UDP_HLEN + GENEVE_HLEN;
// Where the outer headers' fields lie in them counted in 16-bit words, as `outer_headers` and
// `retargeted_frame` build them.
/// The UDP header, after the IPv4 header (without options).
const UDP_WORD: usize = IPV4_HLEN / 2;
/// The Geneve header, after the UDP header.
const GENEVE_WORD: usize = UDP_WORD + UDP_HLEN / 2;
/// The Ethernet type, in a frame.
const ETHER_TYPE_WORD: usize = offset_of!(EthHdr, ether_type) / 2;
/// The IPv4 header, in a frame.
const IPV4_WORD: usize = ETH_HLEN / 2;
/// The outer IPv4 and UDP headers, in words.
const IP_UDP_WORDS: usize = (IPV4_HLEN + UDP_HLEN) / 2;
/// The Ethernet header and the outer IPv4 and UDP headers, in words.
const FRAME_WORDS: usize = IPV4_WORD + IP_UDP_WORDS;
const OUTER_TTL: u8 = 64;
const AF_INET: u8 = 2;

/// A parsed tunnel packet: the outer IPv4 header and the inner one.
pub struct Tunnel {
    pub outer: Ipv4,
    pub inner: Ipv4,
}

/// What arrived on the tunnel's UDP port.
pub enum Parsed {
    /// Not UDP to the tunnel port.
    Other,
    /// To the tunnel port, but not Geneve version 0 carrying IPv4 (a CNI's own Geneve between
    /// Nodes, anyone's datagram, a fragment): not Strait's, left to the kernel untouched.
    Foreign,
    /// Strait's tunnel packet from a peer.
    Tunnel(Tunnel),
    /// Strait's Geneve with the OAM bit: a tunnel probe or its answer (`crate::probe`).
    Probe(Tunnel),
}

/// Parses UDP to `port` as Strait's Geneve (version 0, IPv4 inside); a broken one (cut short, an
/// inner header that does not parse) is an error (a drop).
#[inline(always)]
pub fn parse(ctx: &TcContext, outer: &Ipv4, port: u16) -> Result<Parsed, Counter> {
    if outer.proto != IPPROTO_UDP || outer.is_later_fragment() {
        return Ok(Parsed::Other);
    }
    let udp: [u8; UDP_HLEN] = outer
        .read(ctx, outer.l4())
        .map_err(|_| Counter::DropTruncated)?;
    if be16(&udp, L4_DST_PORT_OFF) != port {
        return Ok(Parsed::Other);
    }
    // Strait's own is whole (sent with DF), Geneve version 0 without the control bit carrying
    // IPv4. Anything else on the port is someone else's (a CNI's Geneve carries Ethernet,
    // 0x6558), even between Nodes that are also Strait's peers. (Who sent it is checked by the
    // caller, which knows this Node's peers.)
    let udp_len = usize::from(be16(&udp, UDP_LEN_OFF));
    if outer.more_fragments() || udp_len < UDP_HLEN + GENEVE_HLEN {
        return Ok(Parsed::Foreign);
    }
    let geneve: [u8; GENEVE_HLEN] = outer
        .read(ctx, outer.l4() + UDP_HLEN)
        .map_err(|_| Counter::DropTruncated)?;
    let version = geneve[GENEVE_VER_OPT_LEN_OFF] >> 6;
    let options_len = usize::from(geneve[GENEVE_VER_OPT_LEN_OFF] & 0x3f) * 4;
    let oam = geneve[GENEVE_FLAGS_OFF] & GENEVE_OAM != 0;
    let critical = geneve[GENEVE_FLAGS_OFF] & 0x40 != 0;
    let protocol = be16(&geneve, GENEVE_PROTO_OFF);
    if version != 0 || critical || protocol != GENEVE_PROTO_IPV4 {
        return Ok(Parsed::Foreign);
    }
    let inner_off = outer.l4() + UDP_HLEN + GENEVE_HLEN + options_len;
    if oam {
        // A probe is whole, or not Strait's (as the OAM bit was before probes existed).
        return Ok(
            match whole_ipv4_at(ctx, inner_off, outer.end(), Counter::DropBadGeneve) {
                Ok(inner) => Parsed::Probe(Tunnel {
                    outer: *outer,
                    inner,
                }),
                Err(_) => Parsed::Foreign,
            },
        );
    }
    // The inner packet must be whole and inside the outer one.
    let inner = whole_ipv4_at(ctx, inner_off, outer.end(), Counter::DropBadGeneve)?;
    Ok(Parsed::Tunnel(Tunnel {
        outer: *outer,
        inner,
    }))
}

/// Wraps the IPv4 packet `ip` that follows the Ethernet header in outer IPv4/UDP/Geneve headers
/// from `src` to `dst`. `segments`: `BPF_F_ADJ_ROOM_FIXED_GSO` when a GSO packet's segments keep
/// their size (they fit the tunnel, `mtu::check`), else 0 (TCP's are cut smaller by the
/// tunnel's overhead).
#[inline(always)]
pub fn encap(
    ctx: &TcContext,
    ip: &Ipv4,
    src: [u8; 4],
    dst: [u8; 4],
    port: u16,
    vni: u32,
    segments: u64,
) -> Result<(), Counter> {
    let inner_len = (ctx.len() as usize).saturating_sub(ETH_HLEN);
    let header = outer_headers(src, dst, flow_source_port(ctx, ip), port, inner_len, vni)?;
    let gso_flags = (BPF_F_ADJ_ROOM_ENCAP_L3_IPV4 | BPF_F_ADJ_ROOM_ENCAP_L4_UDP) as u64 | segments;
    // The fallback, for a packet the kernel already marks as encapsulated (refusing the encap
    // flags), takes no flags: a TCP GSO packet's segments are cut smaller by the overhead, and
    // a UDP GSO packet is refused (the kernel, not knowing where Strait's headers end, would
    // cut its datagrams at the wrong place).
    let grown = ctx
        .adjust_room(ENCAP_LEN as i32, BPF_ADJ_ROOM_MAC, gso_flags)
        .is_ok()
        || ctx
            .adjust_room(ENCAP_LEN as i32, BPF_ADJ_ROOM_MAC, 0)
            .is_ok();
    if !grown {
        return Err(Counter::DropRewriteFailed);
    }
    ctx.store(ETH_HLEN, &header, 0)
        .map_err(|_| Counter::DropRewriteFailed)
}

/// The largest IPv4 packet an outer header can describe.
const MAX_IP_LEN: usize = 0xffff;

/// Strait's outer IPv4, UDP and Geneve headers (no options) around `inner_len` bytes, as 16-bit
/// words in memory order, IPv4 checksum included (the RFC 1071 sum is the same in either byte
/// order, so it is summed over the words as they are). A GSO packet beyond IPv4's 64 KiB (BIG
/// TCP on the Node) has no outer length that fits the header's 16 bits: it is dropped.
#[inline(always)]
fn outer_headers(
    src: [u8; 4],
    dst: [u8; 4],
    source_port: u16,
    port: u16,
    inner_len: usize,
    vni: u32,
) -> Result<[u16; ENCAP_LEN / 2], Counter> {
    if ENCAP_LEN + inner_len > MAX_IP_LEN {
        return Err(Counter::DropTooBig);
    }
    let w = |a: u8, b: u8| u16::from_ne_bytes([a, b]);
    let vni = ((vni & VNI_UNKNOWN) << 8).to_be_bytes();
    let mut h = [0u16; ENCAP_LEN / 2];
    put_ip_udp(&mut h, 0, src, dst, source_port, port, inner_len);
    // Geneve: version 0, no options, no flags; IPv4 payload; VNI and reserved byte.
    h[GENEVE_WORD + GENEVE_VER_OPT_LEN_OFF / 2] = 0;
    h[GENEVE_WORD + GENEVE_PROTO_OFF / 2] = GENEVE_PROTO_IPV4.to_be();
    h[GENEVE_WORD + GENEVE_VNI_OFF / 2] = w(vni[0], vni[1]);
    h[GENEVE_WORD + GENEVE_VNI_OFF / 2 + 1] = w(vni[2], vni[3]);
    h[IPV4_CHECK_OFF / 2] = fold(sum_words(&h, 0, UDP_WORD));
    Ok(h)
}

/// Writes Strait's outer IPv4 header (checksum left 0) and UDP header (checksum 0: none) around
/// `inner_len` bytes of Geneve payload into `words[at..at + IP_UDP_WORDS]`, in memory order; ports in host
/// order. In place: the callers' arrays are the program's stack, which has little to spare.
#[inline(always)]
fn put_ip_udp<const N: usize>(
    words: &mut [u16; N],
    at: usize,
    src: [u8; 4],
    dst: [u8; 4],
    source_port: u16,
    port: u16,
    inner_len: usize,
) {
    let w = |a: u8, b: u8| u16::from_ne_bytes([a, b]);
    let header = [
        // IPv4: version/IHL, TOS; length; id; DF; TTL, protocol; checksum; addresses.
        w(0x45, 0),
        ((ENCAP_LEN + inner_len) as u16).to_be(),
        0,
        w(0x40, 0),
        w(OUTER_TTL, IPPROTO_UDP),
        0,
        w(src[0], src[1]),
        w(src[2], src[3]),
        w(dst[0], dst[1]),
        w(dst[2], dst[3]),
        // UDP: ports, length, checksum 0 (none).
        source_port.to_be(),
        port.to_be(),
        ((UDP_HLEN + GENEVE_HLEN + inner_len) as u16).to_be(),
        0,
    ];
    let mut i = 0;
    while i < header.len() && at + i < N {
        words[at + i] = header[i];
        i += 1;
    }
}

/// Removes the outer headers so the inner packet follows the Ethernet header.
#[inline(always)]
pub fn decap(ctx: &TcContext, tunnel: &Tunnel) -> Result<(), Counter> {
    let skb = ctx.as_ptr() as *const __sk_buff;
    // SAFETY: the context pointer is valid for the whole program run.
    if unsafe { (*skb).gso_size } != 0
        && (tunnel.inner.proto == IPPROTO_UDP || tunnel.inner.end() != tunnel.outer.end())
    {
        // UDP datagrams still in one GSO packet, or tunnel packets merged behind one outer
        // header: the kernel cannot cut them apart once the tunnel is gone.
        return Err(Counter::DropGsoUnsplit);
    }
    let len = (tunnel.inner.off() - ETH_HLEN) as i32;
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
/// uplink's ingress) without decapsulating it: the outer IPv4 and UDP headers are written afresh
/// (Strait's own, as `encap` makes them) with the new source and destination, keeping the UDP
/// ports; the outer UDP checksum is left out (the inner packet changed; it is optional in IPv4).
/// With the next hop known, the Ethernet addresses and these headers go in one store, and a
/// hairpin-cache slot claimed for the flow (`cache`) is completed with it; returns the verdict
/// (`peer`: see [`retarget_via`]).
#[inline(always)]
pub fn retarget(
    ctx: &TcContext,
    outer: &Ipv4,
    (src, dst): ([u8; 4], [u8; 4]),
    now: u64,
    cache: Option<*mut HairpinCacheEntry>,
    peer: bool,
) -> Result<i32, Counter> {
    let ifindex = ifindex(ctx);
    if let Some(hop) = next_hop(ctx, ifindex, src, dst, now) {
        if let Some(slot) = cache {
            hairpin_cache_complete(slot, dst, &hop, now);
        }
        return retarget_via(ctx, outer, src, dst, &hop.macs, ifindex, peer);
    }
    readdress(ctx, outer, src, dst)?;
    // SAFETY: a NULL params pointer (with length 0) asks the kernel to do the route lookup.
    Ok(unsafe { bpf_redirect_neigh(ifindex, core::ptr::null_mut(), 0, 0) as i32 })
}

/// Writes a tunnel packet's outer IPv4 and UDP headers afresh for `src` -> `dst` (the Ethernet
/// header is left as it is).
#[inline(always)]
fn readdress(ctx: &TcContext, outer: &Ipv4, src: [u8; 4], dst: [u8; 4]) -> Result<(), Counter> {
    let frame = retargeted_frame(ctx, outer, src, dst, &[0; 12])?;
    // SAFETY: the frame's words from IPV4_WORD to its end: the outer IPv4 and UDP headers.
    let headers = unsafe { &*(frame.as_ptr().add(IPV4_WORD) as *const [u16; IP_UDP_WORDS]) };
    ctx.store(ETH_HLEN, headers, 0)
        .map_err(|_| Counter::DropRewriteFailed)
}

/// [`retarget`] into the WireGuard device (encryption on): the tunnel packet re-addressed from
/// `src` to the remote gateway `dst` and handed to the device, which encrypts it for that peer.
#[inline(always)]
pub fn retarget_into_wireguard(
    ctx: &TcContext,
    outer: &Ipv4,
    (src, dst): ([u8; 4], [u8; 4]),
    wg: &WireGuardConfig,
) -> Result<i32, Counter> {
    if wg.ifindex == 0 {
        return Err(Counter::DropWireGuardNotReady);
    }
    readdress(ctx, outer, src, dst)?;
    into_wireguard(wg)
}

/// Hands a tunnel packet for a remote gateway to the WireGuard device (`CONFIG_WIREGUARD`): the
/// device encrypts it for the peer whose allowed address is its destination, and WireGuard's
/// own datagram leaves by the uplink. The kernel strips the Ethernet header (the device carries
/// bare IP). No device: dropped, never sent in plaintext.
#[inline(always)]
pub fn into_wireguard(wg: &WireGuardConfig) -> Result<i32, Counter> {
    if wg.ifindex == 0 {
        return Err(Counter::DropWireGuardNotReady);
    }
    // SAFETY: plain helper call.
    Ok(unsafe { bpf_redirect(wg.ifindex, 0) as i32 })
}

/// The Ethernet header (with `m`'s addresses) and the outer IPv4 and UDP headers of a tunnel
/// packet sent on from `src` to `dst`, as words in memory order: built in place, as the
/// program's stack has little room to spare.
#[inline(always)]
fn retargeted_frame(
    ctx: &TcContext,
    outer: &Ipv4,
    src: [u8; 4],
    dst: [u8; 4],
    m: &[u8; 12],
) -> Result<[u16; FRAME_WORDS], Counter> {
    if outer.hlen() != IPV4_HLEN || outer.off() != ETH_HLEN {
        // Outer IP options never come from Strait's peers; not worth a slower path.
        return Err(Counter::DropBadGeneve);
    }
    let ports: [u8; 4] = outer
        .read(ctx, outer.l4())
        .map_err(|_| Counter::DropTruncated)?;
    // Everything after the Geneve base header, options included, counts as carried; the Geneve
    // header stays as the sender wrote it, its VNI (the source Pod's label identity) included.
    let carried = (ctx.len() as usize).saturating_sub(ETH_HLEN + ENCAP_LEN);
    if ENCAP_LEN + carried > MAX_IP_LEN {
        return Err(Counter::DropTooBig);
    }
    let w = |a: u8, b: u8| u16::from_ne_bytes([a, b]);
    let mut f = [0u16; FRAME_WORDS];
    let mut i = 0;
    while i < ETHER_TYPE_WORD {
        f[i] = w(m[2 * i], m[2 * i + 1]);
        i += 1;
    }
    f[ETHER_TYPE_WORD] = ETH_P_IP.to_be();
    // The sender's UDP ports are kept.
    let sport = be16(&ports, L4_SRC_PORT_OFF);
    let dport = be16(&ports, L4_DST_PORT_OFF);
    put_ip_udp(&mut f, IPV4_WORD, src, dst, sport, dport, carried);
    f[IPV4_WORD + IPV4_CHECK_OFF / 2] = fold(sum_words(&f, IPV4_WORD, IPV4_WORD + UDP_WORD));
    Ok(f)
}

/// [`retarget`] to a next hop already known (`macs`, the hairpin cache's or the next-hop
/// table's): the Ethernet addresses and the outer IPv4 and UDP headers in one store, and the
/// packet redirected out of `ifindex`; with `peer` (the uplink is a veth whose other end is in
/// another namespace, [`mc_common::dataplane::CONFIG_UPLINK_PEER`]) handed straight to that
/// end's ingress instead, where the transmit would have put it after the uplink's egress hook,
/// qdisc and the receiving end's backlog queue.
#[inline(always)]
pub fn retarget_via(
    ctx: &TcContext,
    outer: &Ipv4,
    src: [u8; 4],
    dst: [u8; 4],
    macs: &[u8; 12],
    ifindex: u32,
    peer: bool,
) -> Result<i32, Counter> {
    let frame = retargeted_frame(ctx, outer, src, dst, macs)?;
    ctx.store(0, &frame, 0)
        .map_err(|_| Counter::DropRewriteFailed)?;
    // SAFETY: plain helper calls.
    Ok(unsafe {
        if peer {
            bpf_redirect_peer(ifindex, 0) as i32
        } else {
            bpf_redirect(ifindex, 0) as i32
        }
    })
}

/// The device the packet is on.
#[inline(always)]
pub fn ifindex(ctx: &TcContext) -> u32 {
    let skb = ctx.as_ptr() as *mut __sk_buff;
    // SAFETY: the context pointer is valid for the whole program run.
    unsafe { (*skb).ifindex }
}

/// The destination and source MAC addresses for sending to `dst` out of `ifindex`, when the
/// route and the neighbour are known and the route leaves by that device: from the next-hop
/// cache while its entry is fresh, else from the kernel (`bpf_fib_lookup`), which refills it.
/// `now` is [`now`]'s.
#[inline(always)]
fn next_hop(
    ctx: &TcContext,
    ifindex: u32,
    src: [u8; 4],
    dst: [u8; 4],
    now: u64,
) -> Option<NextHop> {
    // SAFETY: the entry is copied out at once (updates replace entries, never edit them).
    if let Some(hop) = unsafe { NEXT_HOPS.get(&dst) }
        && hop.ifindex == ifindex
        && now < hop.expires_ns
    {
        return Some(*hop);
    }
    let macs = fib_next_hop(ctx, ifindex, src, dst)?;
    let hop = NextHop {
        macs,
        ifindex,
        expires_ns: now + NEXT_HOP_TTL_NS,
    };
    // A full table only means the next packet asks the kernel again.
    let _ = NEXT_HOPS.insert(&dst, &hop, 0);
    Some(hop)
}

/// [`next_hop`] from the kernel's FIB and neighbour table. Out of line: the cache's misses only.
#[inline(never)]
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
            && core::mem::size_of::<bpf_fib_lookup>().is_multiple_of(4)
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

/// The coarse monotonic clock (ns) that the next-hop cache and the SNAT table's checks share:
/// read once per packet.
#[inline(always)]
pub fn now() -> u64 {
    // SAFETY: plain helper call.
    unsafe { bpf_ktime_get_coarse_ns() }
}

/// Sends a packet just encapsulated on the uplink's egress to `dst`. With the route and the
/// neighbour known (`bpf_fib_lookup`), the Ethernet header is written here and the packet goes
/// on without another route lookup; otherwise the kernel resolves it (`bpf_redirect_neigh`).
#[inline(always)]
pub fn send_out(ctx: &TcContext, src: [u8; 4], dst: [u8; 4], now: u64) -> i32 {
    let ifindex = ifindex(ctx);
    if let Some(hop) = next_hop(ctx, ifindex, src, dst, now)
        && ctx.store(0, &hop.macs, 0).is_ok()
    {
        return TC_ACT_OK;
    }
    // SAFETY: a NULL params pointer (with length 0) asks the kernel to do the route lookup.
    unsafe { bpf_redirect_neigh(ifindex, core::ptr::null_mut(), 0, 0) as i32 }
}

/// Outer UDP source port: from the flow hash, in the range 49152..=65535. The stack's own hash
/// when the packet has one (TCP's, from its socket); else a hash of the inner packet made here in
/// a few register operations, where `bpf_get_hash_recalc` would run the kernel's flow dissector
/// over the packet again for every packet that comes without one.
#[inline(always)]
fn flow_source_port(ctx: &TcContext, ip: &Ipv4) -> u16 {
    let skb = ctx.as_ptr() as *mut __sk_buff;
    // SAFETY: the context pointer is valid for the whole program run.
    let mut hash = unsafe { (*skb).hash };
    if hash == 0 {
        hash = tuple_hash(ctx, ip);
    }
    0xc000 | (hash as u16 & 0x3fff)
}

/// A hash of the packet's addresses, protocol and, for TCP and UDP, ports: a flow's packets all
/// get the same one, and flows spread over the underlay's paths. A fragment is hashed without
/// ports (only the first carries them), so all fragments of a datagram take the same path, as
/// with the kernel's own flow hash.
#[inline(always)]
fn tuple_hash(ctx: &TcContext, ip: &Ipv4) -> u32 {
    let ports = if (ip.proto == IPPROTO_TCP || ip.proto == IPPROTO_UDP)
        && !ip.is_later_fragment()
        && !ip.more_fragments()
    {
        ip.read::<[u8; 4]>(ctx, ip.l4())
            .map_or(0, u32::from_ne_bytes)
    } else {
        0
    };
    let mut h = u32::from_ne_bytes(ip.src).wrapping_mul(0x9e37_79b1);
    h = (h ^ u32::from_ne_bytes(ip.dst)).wrapping_mul(0x85eb_ca6b);
    h = (h ^ ports ^ u32::from(ip.proto)).wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}
