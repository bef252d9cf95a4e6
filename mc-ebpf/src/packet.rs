//! Header parsing. Reads come straight from the packet's linear data when the bytes are there
//! (no helper call: headers nearly always are), else from `bpf_skb_load_bytes`, which also
//! reaches paged data; either way a read past the end fails. Writes stay with the helpers: a
//! program that writes packet memory directly makes the kernel unclone every packet it sees.

use core::mem::offset_of;

use aya_ebpf::programs::TcContext;
use mc_common::Counter;
use network_types::{
    eth::EthHdr,
    geneve::GeneveHdr,
    icmp::{IcmpIdSequence, Icmpv4Hdr},
    ip::Ipv4Hdr,
    tcp::TcpHdr,
    udp::UdpHdr,
};

// Header lengths and where fields lie inside their headers (`*_OFF`, from the header's
// start), taken from network-types' layouts so that no offset is a bare number. All are
// constants: the verifier follows packet offsets best when they are known at compile time.

pub const ETH_HLEN: usize = EthHdr::LEN;
/// An IPv4 header without options.
pub const IPV4_HLEN: usize = Ipv4Hdr::LEN;
/// The IPv4 header checksum.
pub const IPV4_CHECK_OFF: usize = offset_of!(Ipv4Hdr, check);
/// The IPv4 source address.
pub const IPV4_SRC_OFF: usize = offset_of!(Ipv4Hdr, src_addr);
/// The IPv4 destination address.
pub const IPV4_DST_OFF: usize = offset_of!(Ipv4Hdr, dst_addr);
/// The source port of a TCP or UDP header (the same place in both).
pub const L4_SRC_PORT_OFF: usize = offset_of!(UdpHdr, src);
/// The destination port of a TCP or UDP header (the same place in both).
pub const L4_DST_PORT_OFF: usize = offset_of!(UdpHdr, dst);
const _: () = assert!(
    offset_of!(TcpHdr, source) == L4_SRC_PORT_OFF && offset_of!(TcpHdr, dest) == L4_DST_PORT_OFF
);
/// A TCP header without options.
pub const TCP_HLEN: usize = TcpHdr::LEN;
/// The TCP byte whose high nibble is the data offset (the header's length in 32-bit words).
pub const TCP_DOFF_OFF: usize = offset_of!(TcpHdr, _bitfield_1);
/// The TCP flags byte (SYN, ACK, ...), after the data offset's.
pub const TCP_FLAGS_OFF: usize = TCP_DOFF_OFF + 1;
/// The TCP checksum.
pub const TCP_CHECK_OFF: usize = offset_of!(TcpHdr, check);
pub const UDP_HLEN: usize = UdpHdr::LEN;
/// The UDP length (header and payload).
pub const UDP_LEN_OFF: usize = offset_of!(UdpHdr, len);
/// The UDP checksum.
pub const UDP_CHECK_OFF: usize = offset_of!(UdpHdr, check);
pub const ICMP_HLEN: usize = Icmpv4Hdr::LEN;
/// The ICMP type.
pub const ICMP_TYPE_OFF: usize = offset_of!(Icmpv4Hdr, type_);
/// The ICMP checksum.
pub const ICMP_CHECK_OFF: usize = offset_of!(Icmpv4Hdr, check);
/// An ICMP echo request's or reply's identifier.
pub const ICMP_ECHO_ID_OFF: usize = offset_of!(Icmpv4Hdr, data) + offset_of!(IcmpIdSequence, id);
/// A Geneve header without options.
pub const GENEVE_HLEN: usize = GeneveHdr::LEN;
/// The Geneve byte holding the version (top two bits) and the options' length (the rest, in
/// 32-bit words).
pub const GENEVE_VER_OPT_LEN_OFF: usize = offset_of!(GeneveHdr, ver_opt_len);
/// The Geneve flags byte (OAM, critical).
pub const GENEVE_FLAGS_OFF: usize = offset_of!(GeneveHdr, o_c_rsvd);
/// The Geneve protocol type of the payload.
pub const GENEVE_PROTO_OFF: usize = offset_of!(GeneveHdr, protocol_type);
/// The Geneve VNI (three bytes, then a reserved byte).
pub const GENEVE_VNI_OFF: usize = offset_of!(GeneveHdr, vni);

pub const ETH_P_IP: u16 = 0x0800;
pub const IPPROTO_ICMP: u8 = 1;
pub const IPPROTO_TCP: u8 = 6;
pub const IPPROTO_UDP: u8 = 17;

/// An IPv4 header that parsed, at offset `off` in the frame. Kept to 24 bytes: the ingress
/// program holds three of these on a stack the verifier caps at 512 bytes. The offset stays a
/// full register's width, so the verifier keeps its bounds through a spill to the stack (a
/// narrower field would come back as any 16-bit value, too wide to add to a packet pointer);
/// the header length comes back as any byte, which is fine.
#[derive(Clone, Copy)]
pub struct Ipv4 {
    off: usize,
    hlen: u8,
    pub src: [u8; 4],
    pub dst: [u8; 4],
    pub proto: u8,
    /// Flags and fragment offset, host order.
    pub frag: u16,
    /// Where the packet ends by its header's total length: bytes past it (an Ethernet frame's
    /// padding, or what follows a quoted header) are not the packet's.
    end: u32,
}

impl Ipv4 {
    /// Offset of the header in the frame.
    #[inline(always)]
    pub fn off(&self) -> usize {
        self.off
    }

    /// Length of the header, options included.
    #[inline(always)]
    pub fn hlen(&self) -> usize {
        usize::from(self.hlen)
    }

    /// See the field.
    #[inline(always)]
    pub fn end(&self) -> usize {
        self.end as usize
    }

    /// Offset of the L4 header.
    #[inline(always)]
    pub fn l4(&self) -> usize {
        self.off() + self.hlen()
    }

    /// A fragment other than the first: no L4 header.
    #[inline(always)]
    pub fn is_later_fragment(&self) -> bool {
        self.frag & 0x1fff != 0
    }

    /// More fragments follow.
    #[inline(always)]
    pub fn more_fragments(&self) -> bool {
        self.frag & 0x2000 != 0
    }

    /// Offset of the header checksum.
    #[inline(always)]
    pub fn check_off(&self) -> usize {
        self.off() + IPV4_CHECK_OFF
    }

    /// Offset of the source address.
    #[inline(always)]
    pub fn src_off(&self) -> usize {
        self.off() + IPV4_SRC_OFF
    }

    /// Offset of the destination address.
    #[inline(always)]
    pub fn dst_off(&self) -> usize {
        self.off() + IPV4_DST_OFF
    }

    /// Reads a `T` at `off`, which must lie inside this packet by its total length.
    #[inline(always)]
    pub fn read<T: Copy>(&self, ctx: &TcContext, off: usize) -> Result<T, ()> {
        if off + core::mem::size_of::<T>() > self.end() {
            return Err(());
        }
        read(ctx, off)
    }
}

/// Reads a `T` at offset `off` of the packet: from the linear data if it holds the bytes, else
/// with `bpf_skb_load_bytes`. `Err` when the packet is shorter.
#[inline(always)]
pub fn read<T: Copy>(ctx: &TcContext, off: usize) -> Result<T, ()> {
    let start = ctx.data();
    let end = ctx.data_end();
    if start + off + core::mem::size_of::<T>() <= end {
        // SAFETY: the bytes lie inside the linear data, as just checked (and as the verifier
        // checks again); an unaligned read of a plain-bytes type.
        return Ok(unsafe { core::ptr::read_unaligned((start + off) as *const T) });
    }
    ctx.load(off).map_err(|_| ())
}

/// The outer (or only) IPv4 header of an Ethernet frame; `None` when the frame is not IPv4.
#[inline(always)]
pub fn eth_ipv4(ctx: &TcContext) -> Result<Option<Ipv4>, Counter> {
    let eth: EthHdr = read(ctx, 0).map_err(|_| Counter::DropTruncated)?;
    if u16::from_be(eth.ether_type) != ETH_P_IP {
        return Ok(None);
    }
    whole_ipv4_at(
        ctx,
        ETH_HLEN,
        ctx.len() as usize,
        Counter::DropBadIpv4Header,
    )
    .map(Some)
}

/// Parses the IPv4 header at `off` of a packet that must be whole and end by `limit`: shorter
/// than its header's total length is truncated.
#[inline(always)]
pub fn whole_ipv4_at(
    ctx: &TcContext,
    off: usize,
    limit: usize,
    bad: Counter,
) -> Result<Ipv4, Counter> {
    let ip = ipv4_at(ctx, off, bad)?;
    if limit < ip.end() {
        return Err(Counter::DropTruncated);
    }
    Ok(ip)
}

/// Parses the IPv4 header at `off` (of a whole packet, or one quoted in an ICMP error and so
/// cut short); a malformed one is counted as `bad`.
#[inline(always)]
pub fn ipv4_at(ctx: &TcContext, off: usize, bad: Counter) -> Result<Ipv4, Counter> {
    let ip: Ipv4Hdr = read(ctx, off).map_err(|_| Counter::DropTruncated)?;
    let hlen = usize::from(ip.ihl());
    let len = usize::from(ip.tot_len());
    if ip.version() != 4 || hlen < Ipv4Hdr::LEN || len < hlen {
        return Err(bad);
    }
    if (ctx.len() as usize) < off + hlen {
        return Err(Counter::DropTruncated);
    }
    // (hlen is at most 60; off + len fits 32 bits, len being 16.)
    Ok(Ipv4 {
        off,
        hlen: hlen as u8,
        src: ip.src_addr,
        dst: ip.dst_addr,
        proto: ip.proto,
        frag: u16::from_be_bytes(ip.frags),
        end: (off + len) as u32,
    })
}

/// The destination port of a (first-fragment) UDP or TCP packet.
#[inline(always)]
pub fn dst_port(ctx: &TcContext, ip: &Ipv4) -> Result<u16, Counter> {
    let ports: [u8; 4] = ip.read(ctx, ip.l4()).map_err(|_| Counter::DropTruncated)?;
    Ok(be16(&ports, L4_DST_PORT_OFF))
}

/// The big-endian 16-bit field at `off` of header bytes read into `bytes` (`off` a constant,
/// so the indexing compiles to two byte loads).
#[inline(always)]
pub fn be16<const N: usize>(bytes: &[u8; N], off: usize) -> u16 {
    u16::from_be_bytes([bytes[off], bytes[off + 1]])
}

/// Sum of `words[from..to]` (bounds known at compile time where it is called).
#[inline(always)]
pub fn sum_words<const N: usize>(words: &[u16; N], from: usize, to: usize) -> u32 {
    let mut sum = 0u32;
    let mut i = from;
    while i < to && i < N {
        sum += u32::from(words[i]);
        i += 1;
    }
    sum
}

/// The one's complement of a folded RFC 1071 sum, in the byte order of the words summed.
#[inline(always)]
pub fn fold(mut sum: u32) -> u16 {
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    !(sum as u16)
}
