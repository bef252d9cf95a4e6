//! Nothing black-holes at the tunnel's MTU (docs/design.md §4): TCP MSS is clamped on SYN and
//! SYN-ACK before encapsulation, and an oversize packet with DF set gets ICMP fragmentation-needed
//! back at its sender instead of vanishing. A GSO packet's segments keep their size when they fit
//! the tunnel; TCP ones that would not are cut smaller by the kernel (the encap flags without
//! `BPF_F_ADJ_ROOM_FIXED_GSO`), UDP ones (datagrams of a size the sender chose) get
//! fragmentation-needed, with DF or without.

use aya_ebpf::{
    EbpfContext as _,
    bindings::{__sk_buff, BPF_F_ADJ_ROOM_FIXED_GSO, BPF_F_INGRESS},
    helpers::generated::bpf_redirect,
    programs::TcContext,
};
use mc_common::{
    Counter,
    dataplane::{ENCAP_OVERHEAD, GsoEncap, gso_encap},
};

use crate::packet::{
    ETH_HLEN, ICMP_CHECK_OFF, ICMP_HLEN, ICMP_TYPE_OFF, IPPROTO_ICMP, IPPROTO_TCP, IPPROTO_UDP,
    IPV4_CHECK_OFF, IPV4_HLEN, Ipv4, TCP_CHECK_OFF, TCP_DOFF_OFF, TCP_FLAGS_OFF, TCP_HLEN,
    UDP_HLEN, fold, sum_words,
};

const TCP_SYN: u8 = 0x02;
const TCP_OPT_END: u8 = 0;
const TCP_OPT_NOP: u8 = 1;
const TCP_OPT_MSS: u8 = 2;
/// TCP options are at most 40 bytes; every option is at least one byte.
const MAX_OPTIONS: usize = 40;
/// Where a TCP option's length byte lies in it, after its kind.
const TCP_OPT_LEN_OFF: usize = 1;
/// Where a TCP option's value lies in it, after its kind and length.
const TCP_OPT_VALUE_OFF: usize = 2;

/// What a packet about to be encapsulated needs.
pub enum Fit {
    /// It fits, or is GSO whose segments will: encapsulate it with these `bpf_skb_adjust_room`
    /// flags (`BPF_F_ADJ_ROOM_FIXED_GSO` when the segments keep their size, else none).
    Fits(u64),
    /// Too large, DF set (or a UDP GSO packet, DF or not): answer with fragmentation-needed.
    TooBig,
    /// Too large without DF: the tunnel cannot fragment it (the outer packet has DF, and
    /// outer fragments could not be decapsulated); dropped and counted.
    TooBigNoDf,
}

/// The largest inner IPv4 packet the tunnel carries on an uplink with `mtu`.
#[inline(always)]
pub fn inner_mtu(mtu: u32) -> u32 {
    mtu.saturating_sub(ENCAP_OVERHEAD)
}

#[inline(always)]
pub fn check(ctx: &TcContext, ip: &Ipv4, mtu: u32) -> Fit {
    let skb = ctx.as_ptr() as *const __sk_buff;
    // SAFETY: the context pointer is valid for the whole program run.
    let gso_size = unsafe { (*skb).gso_size };
    if gso_size != 0 {
        return match gso(ctx, ip, gso_size, mtu) {
            GsoEncap::Keep => Fit::Fits(u64::from(BPF_F_ADJ_ROOM_FIXED_GSO)),
            GsoEncap::Shrink => Fit::Fits(0),
            // The tunnel can never carry these datagrams, DF or not (nothing fragments a GSO
            // packet's segments): the sender learns the MTU either way.
            GsoEncap::TooBig => Fit::TooBig,
        };
    }
    if mtu == 0 || ctx.len().saturating_sub(ip.off() as u32) <= inner_mtu(mtu) {
        Fit::Fits(0)
    } else if ip.frag & 0x4000 != 0 {
        Fit::TooBig
    } else {
        Fit::TooBigNoDf
    }
}

/// What the tunnel does with the segments of a GSO packet of `gso_size` ([`gso_encap`]). Only
/// TCP and UDP are cut by the kernel after an encapsulation; anything else is left to
/// `bpf_skb_adjust_room`, which refuses it (counted as a failed rewrite).
#[inline(always)]
fn gso(ctx: &TcContext, ip: &Ipv4, gso_size: u32, mtu: u32) -> GsoEncap {
    let l4_header = match ip.proto {
        // The data offset: the high nibble of byte 12, in 32-bit words.
        IPPROTO_TCP => match ip.read::<u8>(ctx, ip.l4() + TCP_DOFF_OFF) {
            Ok(offset) => u32::from(offset >> 4) * 4,
            Err(_) => return GsoEncap::Shrink,
        },
        IPPROTO_UDP => UDP_HLEN as u32,
        _ => return GsoEncap::Shrink,
    };
    gso_encap(
        gso_size,
        ip.hlen() as u32 + l4_header,
        mtu,
        ip.proto == IPPROTO_TCP,
    )
}

/// Lowers the MSS option of a TCP SYN or SYN-ACK so that full-size segments fit the tunnel.
/// Returns whether it changed the packet.
#[inline(always)]
pub fn clamp_mss(ctx: &TcContext, ip: &Ipv4, mtu: u32) -> Result<bool, Counter> {
    if mtu == 0 || ip.proto != IPPROTO_TCP || ip.is_later_fragment() {
        return Ok(false);
    }
    let l4 = ip.l4();
    let head: [u8; TCP_FLAGS_OFF + 1] = ip.read(ctx, l4).map_err(|_| Counter::DropTruncated)?;
    if head[TCP_FLAGS_OFF] & TCP_SYN == 0 {
        return Ok(false);
    }
    let header_len = usize::from(head[TCP_DOFF_OFF] >> 4) * 4;
    if l4 + header_len > ip.end() {
        // Options past the packet's end: not ours to rewrite (the receiver drops it).
        return Ok(false);
    }
    // IPv4 and TCP headers without options, inside the tunnel.
    let max_mss = inner_mtu(mtu).saturating_sub((IPV4_HLEN + TCP_HLEN) as u32) as u16;
    clamp_syn_mss(ctx, l4, header_len, max_mss)
}

/// The option walk of [`clamp_mss`] for a SYN whose `header_len` bytes of TCP header at `l4` lie
/// inside the packet. Out of line (a BPF-to-BPF call): only SYNs run it.
#[inline(never)]
fn clamp_syn_mss(
    ctx: &TcContext,
    l4: usize,
    header_len: usize,
    max_mss: u16,
) -> Result<bool, Counter> {
    // The options follow the header's fixed part.
    let mut off = TCP_HLEN;
    let mut steps = 0;
    while steps < MAX_OPTIONS && off + 1 < header_len {
        steps += 1;
        let kind: u8 = ctx.load(l4 + off).map_err(|_| Counter::DropTruncated)?;
        match kind {
            TCP_OPT_END => break,
            TCP_OPT_NOP => off += 1,
            _ => {
                // Kind and length only: the option may be the last, ending the segment.
                let kl: [u8; 2] = ctx.load(l4 + off).map_err(|_| Counter::DropTruncated)?;
                let len = usize::from(kl[TCP_OPT_LEN_OFF]);
                if len < 2 || off + len > header_len {
                    // Malformed options: not ours to rewrite (the receiver rejects them).
                    return Ok(false);
                }
                if kind == TCP_OPT_MSS && len == 4 {
                    let value_off = l4 + off + TCP_OPT_VALUE_OFF;
                    let v: [u8; 2] = ctx.load(value_off).map_err(|_| Counter::DropTruncated)?;
                    let mss = u16::from_be_bytes(v);
                    // The value must sit on a 16-bit boundary of the segment for the
                    // incremental checksum update; MSS is the first option almost always.
                    if mss <= max_mss || !(off + TCP_OPT_VALUE_OFF).is_multiple_of(2) {
                        return Ok(false);
                    }
                    let fail = |_| Counter::DropRewriteFailed;
                    ctx.l4_csum_replace(
                        l4 + TCP_CHECK_OFF,
                        u64::from(u16::from_ne_bytes(mss.to_be_bytes())),
                        u64::from(u16::from_ne_bytes(max_mss.to_be_bytes())),
                        2,
                    )
                    .map_err(fail)?;
                    ctx.store(value_off, &max_mss.to_be_bytes(), 0)
                        .map_err(fail)?;
                    return Ok(true);
                }
                off += len;
            }
        }
    }
    Ok(false)
}

/// Turns the packet into an ICMP fragmentation-needed error to its sender (carrying the tunnel's
/// inner MTU and the packet's IPv4 header and first 8 bytes more, as RFC 792 asks) and hands it to the uplink's
/// ingress, where the stack routes it back to the sender. The error comes from the packet's
/// destination: an error from the Node's own address, arriving at its own uplink, would be a
/// martian to the stack and dropped. Only for IPv4 headers without options.
///
/// A function of its own in the object (a BPF-to-BPF call): its buffers live in its own stack
/// frame, not in the egress program's, which must also hold the tunnel's and the SNAT's.
#[inline(never)]
pub fn frag_needed(ctx: &TcContext, ip: &Ipv4, mtu: u32) -> Result<i32, Counter> {
    if ip.hlen() != IPV4_HLEN || (ip.proto == IPPROTO_ICMP && is_icmp_error(ctx, ip)) {
        // Never answer an ICMP error with another one.
        return Err(Counter::DropTooBig);
    }
    let fail = |_| Counter::DropRewriteFailed;
    // Everything is handled as 16-bit words in memory order: the RFC 1071 sum is the same in
    // either byte order, and the buffers stay small (this runs with the egress program's frame
    // below it on the stack).
    let eth: [u16; 6] = ctx.load(0).map_err(fail)?;
    let quoted: [u16; QUOTED / 2] = ctx.load(ip.off()).map_err(|_| Counter::DropTruncated)?;
    ctx.change_tail((ETH_HLEN + TOTAL) as u32, 0)
        .map_err(fail)?;
    // Back to where it came from: swap the MAC addresses.
    let macs = [eth[3], eth[4], eth[5], eth[0], eth[1], eth[2]];
    ctx.store(0, &macs, 0).map_err(fail)?;
    ctx.store(ETH_HLEN + QUOTE_OFF, &quoted, 0).map_err(fail)?;

    let word = |b: [u8; 2]| u16::from_ne_bytes(b);
    let (from, to) = (ip.dst, ip.src);
    // IPv4 header (words 0-9), then the ICMP header (10-13); checksums filled in below.
    let mut out: [u16; QUOTE_OFF / 2] = [
        word([0x45, 0xc0]),
        (TOTAL as u16).to_be(),
        0,
        0,
        word([64, IPPROTO_ICMP]),
        0,
        word([from[0], from[1]]),
        word([from[2], from[3]]),
        word([to[0], to[1]]),
        word([to[2], to[3]]),
        word([3, 4]), // destination unreachable: fragmentation needed and DF set
        0,
        0,
        (inner_mtu(mtu) as u16).to_be(),
    ];
    const ICMP_WORD: usize = IPV4_HLEN / 2;
    out[IPV4_CHECK_OFF / 2] = fold(sum_words(&out, 0, ICMP_WORD));
    out[ICMP_WORD + ICMP_CHECK_OFF / 2] =
        fold(sum_words(&out, ICMP_WORD, QUOTE_OFF / 2) + sum_words(&quoted, 0, QUOTED / 2));
    ctx.store(ETH_HLEN, &out, 0).map_err(fail)?;

    let skb = ctx.as_ptr() as *const __sk_buff;
    // SAFETY: the context pointer is valid for the whole program run.
    let ifindex = unsafe { (*skb).ifindex };
    // SAFETY: plain helper call.
    Ok(unsafe { bpf_redirect(ifindex, u64::from(BPF_F_INGRESS)) } as i32)
}

/// The start of the packet an ICMP error quotes (RFC 792): its IPv4 header and 8 bytes more.
const QUOTED: usize = IPV4_HLEN + 8;
/// Where the quote starts in the ICMP error's IPv4 packet: after its IPv4 and ICMP headers.
const QUOTE_OFF: usize = IPV4_HLEN + ICMP_HLEN;
/// The ICMP error's IPv4 packet: header, ICMP header, quote.
const TOTAL: usize = QUOTE_OFF + QUOTED;

#[inline(always)]
fn is_icmp_error(ctx: &TcContext, ip: &Ipv4) -> bool {
    match ctx.load::<u8>(ip.l4() + ICMP_TYPE_OFF) {
        // Echo reply (0) and request (8) are queries; the rest an answer must not answer.
        Ok(kind) => kind != 0 && kind != 8,
        Err(_) => true,
    }
}
