//! The gateway's SNAT: flows leaving the cluster get the gateway address and an allocated port
//! (an echo identifier for ICMP echo); replies get the original address and port back. Both
//! directions live in one LRU table, and the reverse entry also records the Node that sent the
//! flow, so that replies are tunnelled back to it. ICMP errors about a translated flow are
//! translated with it, as the kernel's NAT does for "related" packets.

use aya_ebpf::{
    bindings::{BPF_ANY, BPF_F_MARK_MANGLED_0, BPF_F_PSEUDO_HDR, BPF_NOEXIST},
    helpers::generated::bpf_get_prandom_u32,
    programs::TcContext,
};
use mc_common::{
    Counter,
    dataplane::{
        FlowKey, SNAT_FORWARD, SNAT_PORT_MAX, SNAT_PORT_MIN, SNAT_PORT_TRIES, SNAT_REVERSE,
        SnatEntry,
    },
};

use crate::{
    maps::{SNAT, count, routed_via},
    packet::{
        ICMP_CHECK_OFF, ICMP_ECHO_ID_OFF, ICMP_HLEN, ICMP_TYPE_OFF, IPPROTO_ICMP, IPPROTO_TCP,
        IPPROTO_UDP, IPV4_CHECK_OFF, IPV4_DST_OFF, IPV4_HLEN, IPV4_SRC_OFF, Ipv4, L4_DST_PORT_OFF,
        L4_SRC_PORT_OFF, TCP_CHECK_OFF, UDP_CHECK_OFF, be16, ipv4_at, read,
    },
};

const ICMP_ECHO_REPLY: u8 = 0;
const ICMP_DEST_UNREACH: u8 = 3;
const ICMP_ECHO_REQUEST: u8 = 8;
const ICMP_TIME_EXCEEDED: u8 = 11;
const ICMP_PARAMETER_PROBLEM: u8 = 12;

/// What a packet offers to translate.
pub(crate) enum L4 {
    Ports(Ports),
    /// An ICMP error, which quotes the packet it answers.
    IcmpError,
}

/// Where a packet's translatable fields are and what they hold.
pub(crate) struct Ports {
    /// Source port, or the echo id of a request; 0 for an echo reply.
    pub src: u16,
    /// Destination port, or the echo id of a reply; 0 for an echo request.
    pub dst: u16,
    pub src_off: usize,
    pub dst_off: usize,
    csum_off: usize,
    /// TCP and UDP checksums cover the addresses (pseudo-header); ICMP's does not.
    pseudo: bool,
    /// UDP: a zero checksum means "none" and must stay zero.
    udp: bool,
}

#[inline(always)]
pub(crate) fn ports(ctx: &TcContext, ip: &Ipv4, leaving: bool) -> Result<L4, Counter> {
    if ip.is_later_fragment() {
        return Err(Counter::DropFragment);
    }
    let l4 = ip.l4();
    match ip.proto {
        IPPROTO_TCP | IPPROTO_UDP => {
            let p: [u8; 4] = ip.read(ctx, l4).map_err(|_| Counter::DropTruncated)?;
            let tcp = ip.proto == IPPROTO_TCP;
            // Make sure the checksum field is inside the packet before any rewrite.
            let csum_off = l4 + l4_check_off(tcp);
            let _: [u8; 2] = ip.read(ctx, csum_off).map_err(|_| Counter::DropTruncated)?;
            Ok(L4::Ports(Ports {
                src: be16(&p, L4_SRC_PORT_OFF),
                dst: be16(&p, L4_DST_PORT_OFF),
                src_off: l4 + L4_SRC_PORT_OFF,
                dst_off: l4 + L4_DST_PORT_OFF,
                csum_off,
                pseudo: true,
                udp: !tcp,
            }))
        }
        IPPROTO_ICMP => {
            let h: [u8; ICMP_HLEN] = ip.read(ctx, l4).map_err(|_| Counter::DropTruncated)?;
            let id = be16(&h, ICMP_ECHO_ID_OFF);
            let expected = if leaving {
                ICMP_ECHO_REQUEST
            } else {
                ICMP_ECHO_REPLY
            };
            if matches!(
                h[ICMP_TYPE_OFF],
                ICMP_DEST_UNREACH | ICMP_TIME_EXCEEDED | ICMP_PARAMETER_PROBLEM
            ) {
                return Ok(L4::IcmpError);
            }
            if h[ICMP_TYPE_OFF] != expected {
                return Err(Counter::DropUnsupportedProto);
            }
            let (src, dst) = if leaving { (id, 0) } else { (0, id) };
            Ok(L4::Ports(Ports {
                src,
                dst,
                src_off: l4 + ICMP_ECHO_ID_OFF,
                dst_off: l4 + ICMP_ECHO_ID_OFF,
                csum_off: l4 + ICMP_CHECK_OFF,
                pseudo: false,
                udp: false,
            }))
        }
        _ => Err(Counter::DropUnsupportedProto),
    }
}

/// Where a TCP (`tcp`) or else UDP header's checksum lies in it.
#[inline(always)]
fn l4_check_off(tcp: bool) -> usize {
    if tcp { TCP_CHECK_OFF } else { UDP_CHECK_OFF }
}

/// The SNAT table key of a packet as it is on the wire.
#[inline(always)]
pub(crate) fn flow_key(ip: &Ipv4, p: &Ports) -> FlowKey {
    key(ip.src, ip.dst, p.src, p.dst, ip.proto)
}

/// A `FlowKey` put together from four 32-bit words: written field by field, zeroing its 3-byte
/// pad compiles to a call to a byte-at-a-time `memset` in BPF.
#[inline(always)]
pub(crate) fn key(src: [u8; 4], dst: [u8; 4], src_port: u16, dst_port: u16, proto: u8) -> FlowKey {
    let (s, d) = (src_port.to_ne_bytes(), dst_port.to_ne_bytes());
    let words: [u32; 4] = [
        u32::from_ne_bytes(src),
        u32::from_ne_bytes(dst),
        u32::from_ne_bytes([s[0], s[1], d[0], d[1]]),
        u32::from_ne_bytes([proto, 0, 0, 0]),
    ];
    // SAFETY: FlowKey is a 16-byte repr(C) struct of plain bytes and integers laid out as these
    // words (src, dst, the two ports, the protocol and its zero pad); any bytes are valid.
    unsafe { core::mem::transmute::<[u32; 4], FlowKey>(words) }
}

/// Translates the source of a packet leaving the cluster to `gateway_ip` and an allocated port,
/// creating both table entries for a new flow. `node` is the Node that sent it; `now` is
/// `tunnel::now()`'s. Returns the flow (as it arrived) and its translated port, for TCP and UDP
/// (what the hairpin cache keeps).
#[inline(always)]
pub fn snat(
    ctx: &TcContext,
    ip: &Ipv4,
    gateway_ip: [u8; 4],
    node: [u8; 4],
    now: u64,
) -> Result<Option<(FlowKey, u16)>, Counter> {
    let p = match ports(ctx, ip, true)? {
        L4::Ports(p) => p,
        L4::IcmpError => return icmp_error(ctx, ip, None).map(|_| None),
    };
    let key = flow_key(ip, &p);
    let second = coarse_seconds(now);
    let mut known = None;
    if let Some(entry) = SNAT.get_ptr_mut(&key) {
        // SAFETY: a pointer into the map's value, valid for this program run; copied before any
        // insert (which may recycle an element of a full table).
        let forward = unsafe { *entry };
        if forward.checked == second {
            known = Some(forward.port);
        } else {
            // Written once a second, not per packet: the entry's cache line stays shared
            // between CPUs. Another CPU writing it at the same time only repeats the check.
            // SAFETY: as above.
            unsafe { (*entry).checked = second };
            if keep_reverse(&key, &forward, node) {
                known = Some(forward.port);
            } else {
                // Its reply key went to another flow: replies would reach another Pod. This
                // flow starts over with a new port (the connection breaks, as it would anyway).
                let _ = SNAT.remove(&key);
            }
        }
    }
    let port = match known {
        Some(port) => port,
        None => allocate(&key, gateway_ip, node, second)?,
    };
    rewrite(
        ctx,
        ip,
        &p,
        ip.src_off(),
        ip.src,
        gateway_ip,
        p.src_off,
        p.src,
        port,
    )?;
    Ok((ip.proto != IPPROTO_ICMP).then_some((key, port)))
}

/// A coarse clock reading (ns) in units of 2^30 ns (about a second), wrapping.
#[inline(always)]
fn coarse_seconds(now: u64) -> u16 {
    (now >> 30) as u16
}

/// Whether the reverse entry `(remote, gateway address, remote port, gateway port)` is this
/// flow's: the whole 5-tuple is in its key and value.
#[inline(always)]
fn is_reverse_of(entry: &SnatEntry, key: &FlowKey) -> bool {
    entry.flags == SNAT_REVERSE && entry.addr == key.src && entry.port == key.src_port
}

/// The reply key of a flow translated to `gateway_ip`:`port`: (remote, gateway address, remote
/// port, gateway port), as a reply arrives.
#[inline(always)]
fn reverse_key(key: &FlowKey, gateway_ip: [u8; 4], port: u16) -> FlowKey {
    self::key(key.dst, gateway_ip, key.dst_port, port, key.proto)
}

/// A flow's reverse entry: its original source, and the Node that sends it.
#[inline(always)]
fn reverse_entry(key: &FlowKey, node: [u8; 4]) -> SnatEntry {
    SnatEntry {
        addr: key.src,
        port: key.src_port,
        checked: 0,
        node,
        flags: SNAT_REVERSE,
    }
}

/// Makes sure a flow's reverse entry exists, re-creating it if not: the LRU table may evict it
/// while the forward entry stays in use, and then every reply would be dropped. Runs for the
/// first packet of a flow in each second, so an idle flow checks when it sends again. False
/// when the reply key now belongs to another flow. Out of line (a BPF-to-BPF call), as are the
/// other paths that few packets take: the code every packet runs stays short (see the module's
/// note on cold paths in `main.rs`).
#[inline(never)]
fn keep_reverse(key: &FlowKey, forward: &SnatEntry, node: [u8; 4]) -> bool {
    let reverse_key = reverse_key(key, forward.addr, forward.port);
    if let Some(reverse) = SNAT.get_ptr(&reverse_key) {
        // SAFETY: a pointer into the map's value, read at once.
        return is_reverse_of(unsafe { &*reverse }, key);
    }
    let reverse = reverse_entry(key, node);
    // NOEXIST: if another flow has just taken the key, it keeps it (and the next check finds
    // out).
    let _ = SNAT.insert(&reverse_key, &reverse, BPF_NOEXIST as u64);
    true
}

/// A reply's flow as it arrived, and the original address and port it was translated back to.
pub type Translated = (FlowKey, [u8; 4], u16);

/// Reverses the translation of a reply arriving at the gateway address from the remote gateway
/// `sender`. Returns the Node that sent the flow, where the reply goes. Only the gateway of the
/// cluster the flow went to may answer for it: the flow's remote address must be routed via
/// `sender`. With it, for TCP and UDP, the flow (as it arrived) and its original address and
/// port (what the hairpin cache keeps).
#[inline(always)]
pub fn unsnat(
    ctx: &TcContext,
    ip: &Ipv4,
    sender: [u8; 4],
) -> Result<([u8; 4], Option<Translated>), Counter> {
    let p = match ports(ctx, ip, false)? {
        L4::Ports(p) => p,
        L4::IcmpError => return icmp_error(ctx, ip, Some(sender)).map(|node| (node, None)),
    };
    let key = flow_key(ip, &p);
    if !routed_via(key.src, sender) {
        return Err(Counter::DropSpoofedSource);
    }
    let entry = match SNAT.get_ptr(&key) {
        // SAFETY: as above; copied out at once.
        Some(entry) => unsafe { *entry },
        None => return Err(Counter::DropNoSnatEntry),
    };
    rewrite(
        ctx,
        ip,
        &p,
        ip.dst_off(),
        ip.dst,
        entry.addr,
        p.dst_off,
        p.dst,
        entry.port,
    )?;
    let translated = (ip.proto != IPPROTO_ICMP).then_some((key, entry.addr, entry.port));
    Ok((entry.node, translated))
}

/// Translates an ICMP error (destination unreachable, time exceeded, parameter problem) about a
/// translated flow. The error quotes the flow's packet as the error's sender got it, so the
/// quoted header is translated back the other way: entering (to the gateway address), the
/// quoted source is the gateway's address and port and becomes the Pod's, and the error goes
/// to the Pod; leaving (a Pod's error about a reply it got), the quoted destination is the Pod
/// and becomes the gateway's, and so does the error's source. The checksums of the quoted
/// header and of the quoted L4 header (when quoted) are updated, and the ICMP checksum with
/// them. `entering` is the remote gateway that sent an entering error (`None`: leaving); it must
/// be the gateway of the cluster the quoted packet went to. Returns the Node that sent the flow.
/// Out of line: a cold path.
#[inline(never)]
fn icmp_error(ctx: &TcContext, ip: &Ipv4, entering: Option<[u8; 4]>) -> Result<[u8; 4], Counter> {
    let fail = |_| Counter::DropRewriteFailed;
    let leaving = entering.is_none();
    let q = quoted_ipv4(ctx, ip, entering)?;
    let QuotedL4 {
        sport,
        dport,
        sport_off,
        csum_off,
        pseudo,
    } = quoted_l4(ctx, ip, &q, leaving)?;
    // The quoted packet runs the other way from the error: its reverse is the flow's packet in
    // the direction the error travels, and that is how the table knows it.
    let entry = match SNAT.get_ptr(&key(q.dst, q.src, dport, sport, q.proto)) {
        // SAFETY: a pointer into the map's value, copied out at once.
        Some(entry) => unsafe { *entry },
        None => return Err(Counter::DropNoSnatEntry),
    };
    // Leaving, only a flow's own direction: a quote shaped like a SNATed request would match a
    // reverse entry and put another Pod's address on the wire. (The error's source may be any
    // local address, as with the kernel's NAT: a Node forwarding the reply may answer it.)
    if entry.flags != if leaving { SNAT_FORWARD } else { SNAT_REVERSE } {
        return Err(Counter::DropNoSnatEntry);
    }
    let (q_addr_off, old_addr, port_off, old_port) = if leaving {
        (q.dst_off(), q.dst, q.l4() + L4_DST_PORT_OFF, dport)
    } else {
        (q.src_off(), q.src, sport_off, sport)
    };
    let (new_addr, new_port) = (entry.addr, entry.port);
    let icmp_csum = ip.l4() + ICMP_CHECK_OFF;
    // The quoted L4 checksum, when the error quotes that far (a TCP checksum may lie beyond the
    // 8 bytes an error must quote); a zero UDP checksum means none and stays zero.
    if let Ok(c) = ip.read::<[u8; 2]>(ctx, csum_off) {
        let old = u16::from_be_bytes(c);
        if !(q.proto == IPPROTO_UDP && old == 0) {
            let mut new = csum_replace2(old, old_port, new_port);
            if pseudo {
                new = csum_replace4(new, old_addr, new_addr);
            }
            if q.proto == IPPROTO_UDP && new == 0 {
                new = 0xffff;
            }
            store16(ctx, icmp_csum, csum_off, old, new)?;
        }
    }
    if old_port != new_port {
        store16(ctx, icmp_csum, port_off, old_port, new_port)?;
    }
    let c: [u8; 2] = ip
        .read(ctx, q.check_off())
        .map_err(|_| Counter::DropTruncated)?;
    let old_check = u16::from_be_bytes(c);
    store16(
        ctx,
        icmp_csum,
        q.check_off(),
        old_check,
        csum_replace4(old_check, old_addr, new_addr),
    )?;
    let (old_a, new_a) = (
        u64::from(u32::from_ne_bytes(old_addr)),
        u64::from(u32::from_ne_bytes(new_addr)),
    );
    ctx.l4_csum_replace(icmp_csum, old_a, new_a, 4)
        .map_err(fail)?;
    ctx.store(q_addr_off, &new_addr, 0).map_err(fail)?;

    // The error itself: to the Pod entering, from the gateway leaving.
    let (outer_off, outer_old) = if leaving {
        (ip.src_off(), ip.src)
    } else {
        (ip.dst_off(), ip.dst)
    };
    ctx.l3_csum_replace(
        ip.check_off(),
        u64::from(u32::from_ne_bytes(outer_old)),
        new_a,
        4,
    )
    .map_err(fail)?;
    ctx.store(outer_off, &new_addr, 0).map_err(fail)?;
    count(ctx, Counter::IcmpErrorTranslated);
    Ok(entry.node)
}

/// The IPv4 header an ICMP error `ip` quotes, checked: inside the error, the first fragment,
/// and, `entering` from that remote gateway, about a packet the gateway address sent to that
/// gateway's cluster.
#[inline(always)]
fn quoted_ipv4(ctx: &TcContext, ip: &Ipv4, entering: Option<[u8; 4]>) -> Result<Ipv4, Counter> {
    let q = ipv4_at(ctx, ip.l4() + ICMP_HLEN, Counter::DropBadIpv4Header)?;
    // The quote is cut short of the quoted packet's length: it ends where the error does, and
    // every read of it below is bounded by the error (`ip.read`), not by the frame.
    if q.l4() > ip.end() {
        return Err(Counter::DropTruncated);
    }
    if q.is_later_fragment() {
        return Err(Counter::DropFragment);
    }
    if let Some(sender) = entering {
        if q.src != ip.dst {
            // Not about a packet the gateway address sent.
            return Err(Counter::DropNoSnatEntry);
        }
        // The error's own source may be any router of that cluster; the quoted destination
        // is the flow's remote address.
        if !routed_via(q.dst, sender) {
            return Err(Counter::DropSpoofedSource);
        }
    }
    Ok(q)
}

/// What an ICMP error quotes of its packet's L4 header, and where.
struct QuotedL4 {
    /// Source port or echo id.
    sport: u16,
    /// Destination port (0 for an echo request).
    dport: u16,
    /// Where the source port or echo id is.
    sport_off: usize,
    /// Where the quoted L4 checksum is.
    csum_off: usize,
    /// Whether that checksum covers the addresses.
    pseudo: bool,
}

/// The L4 header quoted after `q` in the ICMP error `ip`: TCP or UDP, or (entering, not
/// `leaving`) an echo request the gateway sent for a Pod.
#[inline(always)]
fn quoted_l4(ctx: &TcContext, ip: &Ipv4, q: &Ipv4, leaving: bool) -> Result<QuotedL4, Counter> {
    let l4 = q.l4();
    let (sport, dport, sport_off, csum_off, pseudo) = match q.proto {
        IPPROTO_TCP | IPPROTO_UDP => {
            let p: [u8; 4] = ip.read(ctx, l4).map_err(|_| Counter::DropTruncated)?;
            (
                be16(&p, L4_SRC_PORT_OFF),
                be16(&p, L4_DST_PORT_OFF),
                l4 + L4_SRC_PORT_OFF,
                l4 + l4_check_off(q.proto == IPPROTO_TCP),
                true,
            )
        }
        // An error about an echo request the gateway sent for a Pod.
        IPPROTO_ICMP if !leaving => {
            let h: [u8; ICMP_HLEN] = ip.read(ctx, l4).map_err(|_| Counter::DropTruncated)?;
            if h[ICMP_TYPE_OFF] != ICMP_ECHO_REQUEST {
                return Err(Counter::DropUnsupportedProto);
            }
            (
                be16(&h, ICMP_ECHO_ID_OFF),
                0,
                l4 + ICMP_ECHO_ID_OFF,
                l4 + ICMP_CHECK_OFF,
                false,
            )
        }
        _ => return Err(Counter::DropUnsupportedProto),
    };
    Ok(QuotedL4 {
        sport,
        dport,
        sport_off,
        csum_off,
        pseudo,
    })
}

/// Writes the 16-bit field at `off` of an ICMP error (`old` to `new`, host order) and updates
/// the ICMP checksum at `icmp_csum`, which covers it.
#[inline(always)]
fn store16(
    ctx: &TcContext,
    icmp_csum: usize,
    off: usize,
    old: u16,
    new: u16,
) -> Result<(), Counter> {
    let fail = |_| Counter::DropRewriteFailed;
    let (old_b, new_b) = (old.to_be_bytes(), new.to_be_bytes());
    ctx.l4_csum_replace(
        icmp_csum,
        u64::from(u16::from_ne_bytes(old_b)),
        u64::from(u16::from_ne_bytes(new_b)),
        2,
    )
    .map_err(fail)?;
    ctx.store(off, &new_b, 0).map_err(fail)
}

/// Picks a free port for a new flow: the reverse entry is inserted only if no flow holds that
/// (remote address, remote port, gateway port) yet, so two flows never share a reply key. The
/// flow's own port comes first when it lies in the SNAT range (as the kernel's masquerade
/// does): then only the address changes, and each packet costs one checksum update less. If
/// that reply key is held by this very flow (the LRU table evicted its forward entry but not
/// its reverse one), the flow keeps its port instead of changing it mid-connection. Out of line:
/// once per flow.
#[inline(never)]
fn allocate(
    key: &FlowKey,
    gateway_ip: [u8; 4],
    node: [u8; 4],
    second: u16,
) -> Result<u16, Counter> {
    const RANGE: u32 = (SNAT_PORT_MAX - SNAT_PORT_MIN) as u32 + 1;
    // SAFETY: no preconditions.
    let start = unsafe { bpf_get_prandom_u32() };
    // (SNAT_PORT_MAX is the largest port.)
    let keep = key.src_port >= SNAT_PORT_MIN;
    let mut i = 0;
    while i < SNAT_PORT_TRIES {
        let port = if i == 0 && keep {
            key.src_port
        } else {
            SNAT_PORT_MIN + (start.wrapping_add(i) % RANGE) as u16
        };
        let reverse_key = reverse_key(key, gateway_ip, port);
        let reverse = reverse_entry(key, node);
        // The reply key held by this very flow: taken back, with the Node that sends it now.
        let ours = || match SNAT.get_ptr_mut(&reverse_key) {
            // SAFETY: a pointer into the map's value, valid for this program run.
            Some(r) if is_reverse_of(unsafe { &*r }, key) => {
                // SAFETY: as above.
                unsafe { (*r).node = node };
                true
            }
            _ => false,
        };
        if SNAT
            .insert(&reverse_key, &reverse, BPF_NOEXIST as u64)
            .is_ok()
            || (i == 0 && keep && ours())
        {
            let forward = SnatEntry {
                addr: gateway_ip,
                port,
                checked: second,
                node,
                flags: SNAT_FORWARD,
            };
            if SNAT.insert(key, &forward, BPF_ANY as u64).is_err() {
                let _ = SNAT.remove(&reverse_key);
                return Err(Counter::DropSnatExhausted);
            }
            return Ok(port);
        }
        i += 1;
    }
    Err(Counter::DropSnatExhausted)
}

/// Rewrites one address (at `addr_off`) and one port (at `port_off`), updating the L4 checksum
/// (with the pseudo-header for TCP/UDP; helpers, as they know how the skb's checksum is being
/// offloaded) and the IPv4 header checksum. Without IP options the address, the port and the
/// header checksum lie within 16 bytes: they are written with one store.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) fn rewrite(
    ctx: &TcContext,
    ip: &Ipv4,
    p: &Ports,
    addr_off: usize,
    old_addr: [u8; 4],
    new_addr: [u8; 4],
    port_off: usize,
    old_port: u16,
    new_port: u16,
) -> Result<(), Counter> {
    let fail = |_| Counter::DropRewriteFailed;
    let old_a = u64::from(u32::from_ne_bytes(old_addr));
    let new_a = u64::from(u32::from_ne_bytes(new_addr));
    let mangled = if p.udp {
        BPF_F_MARK_MANGLED_0 as u64
    } else {
        0
    };
    if p.pseudo {
        ctx.l4_csum_replace(
            p.csum_off,
            old_a,
            new_a,
            BPF_F_PSEUDO_HDR as u64 | mangled | 4,
        )
        .map_err(fail)?;
    }
    if old_port != new_port {
        let old_p = u64::from(u16::from_ne_bytes(old_port.to_be_bytes()));
        let new_p = u64::from(u16::from_ne_bytes(new_port.to_be_bytes()));
        ctx.l4_csum_replace(p.csum_off, old_p, new_p, mangled | 2)
            .map_err(fail)?;
    }
    let base = ip.check_off();
    // Where the address and the port fall in the 16 bytes from the header checksum on.
    let a = addr_off.wrapping_sub(base);
    let pt = port_off.wrapping_sub(base);
    if ip.hlen() == IPV4_HLEN
        && (a == W_SRC || a == W_DST)
        && (pt == W_SRC_PORT || pt == W_DST_PORT || pt == W_ECHO_ID)
    {
        // Read after the L4 checksum update: an ICMP checksum lies inside this window.
        let mut w: [u8; W_LEN] = read(ctx, base).map_err(|_| Counter::DropTruncated)?;
        let check = csum_replace4(be16(&w, 0), old_addr, new_addr);
        w[0..2].copy_from_slice(&check.to_be_bytes());
        if a == W_SRC {
            w[W_SRC..W_SRC + 4].copy_from_slice(&new_addr);
        } else {
            w[W_DST..W_DST + 4].copy_from_slice(&new_addr);
        }
        let port = new_port.to_be_bytes();
        match pt {
            W_SRC_PORT => w[W_SRC_PORT..W_SRC_PORT + 2].copy_from_slice(&port),
            W_DST_PORT => w[W_DST_PORT..W_DST_PORT + 2].copy_from_slice(&port),
            _ => w[W_ECHO_ID..W_ECHO_ID + 2].copy_from_slice(&port),
        }
        return ctx.store(base, &w, 0).map_err(fail);
    }
    if old_port != new_port {
        ctx.store(port_off, &new_port.to_be_bytes(), 0)
            .map_err(fail)?;
    }
    ctx.l3_csum_replace(ip.check_off(), old_a, new_a, 4)
        .map_err(fail)?;
    ctx.store(addr_off, &new_addr, 0).map_err(fail)
}

// The window `rewrite` writes in one store: from the IPv4 header checksum (of a header without
// options) to the end of the L4 header's first 4 bytes (TCP and UDP ports, an ICMP echo's id);
// where each field lies in it.
const W_L4: usize = IPV4_HLEN - IPV4_CHECK_OFF;
const W_LEN: usize = W_L4 + ICMP_ECHO_ID_OFF + 2;
const W_SRC: usize = IPV4_SRC_OFF - IPV4_CHECK_OFF;
const W_DST: usize = IPV4_DST_OFF - IPV4_CHECK_OFF;
const W_SRC_PORT: usize = W_L4 + L4_SRC_PORT_OFF;
const W_DST_PORT: usize = W_L4 + L4_DST_PORT_OFF;
const W_ECHO_ID: usize = W_L4 + ICMP_ECHO_ID_OFF;
const _: () = assert!(W_LEN == 16 && W_SRC_PORT == 10 && W_DST_PORT == 12 && W_ECHO_ID == 14);

/// A checksum after a 16-bit field it covers changed from `old` to `new` (RFC 1624).
#[inline(always)]
fn csum_replace2(check: u16, old: u16, new: u16) -> u16 {
    let mut sum = u32::from(!check) + u32::from(!old) + u32::from(new);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    !(sum as u16)
}

/// A checksum (the IPv4 header's, or one over a pseudo-header) after a 32-bit field it covers
/// changed from `old` to `new` (RFC 1624).
#[inline(always)]
fn csum_replace4(check: u16, old: [u8; 4], new: [u8; 4]) -> u16 {
    let word = |b: [u8; 4], i: usize| u32::from(u16::from_be_bytes([b[i], b[i + 1]]));
    let mut sum = u32::from(!check);
    sum += (!word(old, 0) & 0xffff) + (!word(old, 2) & 0xffff);
    sum += word(new, 0) + word(new, 2);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    !(sum as u16)
}
