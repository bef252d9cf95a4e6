//! Building and checking frames for `BPF_PROG_TEST_RUN`. Checksums are computed here from
//! scratch (RFC 1071 over the whole header or segment), never incrementally, so a wrong
//! incremental update in the programs shows up as a mismatch.

pub const ETH_HLEN: usize = 14;
pub const TCP: u8 = 6;
pub const UDP: u8 = 17;
pub const ICMP: u8 = 1;

pub fn csum(data: &[u8], initial: u32) -> u16 {
    let mut sum = initial;
    for chunk in data.chunks(2) {
        sum += u32::from(u16::from_be_bytes([chunk[0], *chunk.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

fn pseudo_sum(src: [u8; 4], dst: [u8; 4], proto: u8, len: usize) -> u32 {
    let mut sum = 0u32;
    for pair in [
        [src[0], src[1]],
        [src[2], src[3]],
        [dst[0], dst[1]],
        [dst[2], dst[3]],
    ] {
        sum += u32::from(u16::from_be_bytes(pair));
    }
    sum + u32::from(proto) + len as u32
}

/// An IPv4 packet (no options) around `l4`, with a correct header checksum.
pub fn ipv4(src: [u8; 4], dst: [u8; 4], proto: u8, l4: &[u8]) -> Vec<u8> {
    let total = (20 + l4.len()) as u16;
    let mut p = vec![0x45, 0, 0, 0, 0x12, 0x34, 0x40, 0, 63, proto, 0, 0];
    p[2..4].copy_from_slice(&total.to_be_bytes());
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    let c = csum(&p, 0);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p.extend_from_slice(l4);
    p
}

/// TCP segment with `options` (a multiple of 4 bytes) and a correct checksum.
fn tcp_segment(
    src: [u8; 4],
    dst: [u8; 4],
    sport: u16,
    dport: u16,
    flags: u8,
    options: &[u8],
    payload: &[u8],
) -> Vec<u8> {
    let mut s = Vec::new();
    s.extend_from_slice(&sport.to_be_bytes());
    s.extend_from_slice(&dport.to_be_bytes());
    s.extend_from_slice(&1000u32.to_be_bytes());
    s.extend_from_slice(&0u32.to_be_bytes());
    let offset = ((20 + options.len()) / 4) as u8;
    s.extend_from_slice(&[offset << 4, flags, 0xff, 0xff, 0, 0, 0, 0]);
    s.extend_from_slice(options);
    s.extend_from_slice(payload);
    let c = csum(&s, pseudo_sum(src, dst, TCP, s.len()));
    s[16..18].copy_from_slice(&c.to_be_bytes());
    ipv4(src, dst, TCP, &s)
}

/// TCP segment (20-byte header) with a correct checksum.
pub fn tcp(
    src: [u8; 4],
    dst: [u8; 4],
    sport: u16,
    dport: u16,
    flags: u8,
    payload: &[u8],
) -> Vec<u8> {
    tcp_segment(src, dst, sport, dport, flags, &[], payload)
}

/// TCP SYN (or SYN-ACK with `ack`) carrying an MSS option, with a correct checksum.
pub fn tcp_syn_mss(
    src: [u8; 4],
    dst: [u8; 4],
    sport: u16,
    dport: u16,
    ack: bool,
    mss: u16,
) -> Vec<u8> {
    let m = mss.to_be_bytes();
    let flags = if ack { 0x12 } else { 0x02 };
    tcp_segment(src, dst, sport, dport, flags, &[2, 4, m[0], m[1]], &[])
}

/// TCP SYN with the given options (a multiple of 4 bytes) and payload, with a correct checksum.
pub fn tcp_syn_options(
    src: [u8; 4],
    dst: [u8; 4],
    sport: u16,
    dport: u16,
    options: &[u8],
    payload: &[u8],
) -> Vec<u8> {
    assert_eq!(options.len() % 4, 0, "TCP options fill whole words");
    tcp_segment(src, dst, sport, dport, 0x02, options, payload)
}

/// The same packet with DF cleared (header checksum recomputed).
pub fn without_df(packet: &[u8]) -> Vec<u8> {
    let mut p = packet.to_vec();
    p[6] &= !0x40;
    p[10] = 0;
    p[11] = 0;
    let c = csum(&p[..20], 0);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p
}

/// The same packet as a fragment: its flags and fragment offset field set to `frag` (host
/// order; 0x2000 is more-fragments, the low 13 bits the offset in 8-byte units), header checksum
/// recomputed.
pub fn as_fragment(packet: &[u8], frag: u16) -> Vec<u8> {
    let mut p = packet.to_vec();
    p[6..8].copy_from_slice(&frag.to_be_bytes());
    p[10] = 0;
    p[11] = 0;
    let c = csum(&p[..20], 0);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p
}

/// The MSS option value of a TCP segment inside `packet`, if any.
pub fn tcp_mss(packet: &[u8]) -> Option<u16> {
    let ip = Ip(packet);
    let l4 = ip.l4();
    let header_len = usize::from(l4[12] >> 4) * 4;
    let mut off = 20;
    while off < header_len {
        match l4[off] {
            0 => return None,
            1 => off += 1,
            2 => return Some(u16::from_be_bytes([l4[off + 2], l4[off + 3]])),
            _ => off += usize::from(l4[off + 1]).max(2),
        }
    }
    None
}

/// UDP datagram; with `checksum` false the checksum field is 0 ("none").
pub fn udp(
    src: [u8; 4],
    dst: [u8; 4],
    sport: u16,
    dport: u16,
    payload: &[u8],
    checksum: bool,
) -> Vec<u8> {
    let mut s = Vec::new();
    s.extend_from_slice(&sport.to_be_bytes());
    s.extend_from_slice(&dport.to_be_bytes());
    s.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    s.extend_from_slice(&[0, 0]);
    s.extend_from_slice(payload);
    if checksum {
        let mut c = csum(&s, pseudo_sum(src, dst, UDP, s.len()));
        if c == 0 {
            c = 0xffff;
        }
        s[6..8].copy_from_slice(&c.to_be_bytes());
    }
    ipv4(src, dst, UDP, &s)
}

/// ICMP echo request (type 8) or reply (type 0).
pub fn icmp_echo(src: [u8; 4], dst: [u8; 4], kind: u8, id: u16, seq: u16) -> Vec<u8> {
    let mut s = vec![kind, 0, 0, 0];
    s.extend_from_slice(&id.to_be_bytes());
    s.extend_from_slice(&seq.to_be_bytes());
    s.extend_from_slice(b"strait-ping-payload");
    let c = csum(&s, 0);
    s[2..4].copy_from_slice(&c.to_be_bytes());
    ipv4(src, dst, ICMP, &s)
}

/// An ICMP error (`kind`, `code`) quoting `quoted` (an IPv4 packet, or its first bytes).
pub fn icmp_error(src: [u8; 4], dst: [u8; 4], kind: u8, code: u8, quoted: &[u8]) -> Vec<u8> {
    let mut s = vec![kind, code, 0, 0, 0, 0, 0, 0];
    s.extend_from_slice(quoted);
    let c = csum(&s, 0);
    s[2..4].copy_from_slice(&c.to_be_bytes());
    ipv4(src, dst, ICMP, &s)
}

/// Geneve (IPv4 payload, VNI 0xffffff) from `src` to `dst` around an inner IPv4 packet.
pub fn geneve(src: [u8; 4], dst: [u8; 4], port: u16, inner: &[u8]) -> Vec<u8> {
    geneve_with_options(src, dst, port, &[], inner)
}

/// Like [`geneve`], with `options` (a multiple of 4 bytes) after the Geneve base header.
pub fn geneve_with_options(
    src: [u8; 4],
    dst: [u8; 4],
    port: u16,
    options: &[u8],
    inner: &[u8],
) -> Vec<u8> {
    let mut s = Vec::new();
    s.extend_from_slice(&50000u16.to_be_bytes());
    s.extend_from_slice(&port.to_be_bytes());
    s.extend_from_slice(&((16 + options.len() + inner.len()) as u16).to_be_bytes());
    s.extend_from_slice(&[0, 0]);
    let opt_words = (options.len() / 4) as u8;
    s.extend_from_slice(&[opt_words, 0, 0x08, 0x00, 0xff, 0xff, 0xff, 0]);
    s.extend_from_slice(options);
    s.extend_from_slice(inner);
    ipv4(src, dst, UDP, &s)
}

/// An Ethernet frame around an IPv4 packet.
pub fn eth(packet: &[u8]) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00];
    f.extend_from_slice(packet);
    f
}

/// A view of an IPv4 packet.
#[derive(Clone, Copy)]
pub struct Ip<'a>(pub &'a [u8]);

impl<'a> Ip<'a> {
    pub fn hlen(&self) -> usize {
        usize::from(self.0[0] & 0x0f) * 4
    }
    pub fn src(&self) -> [u8; 4] {
        self.0[12..16].try_into().unwrap()
    }
    pub fn dst(&self) -> [u8; 4] {
        self.0[16..20].try_into().unwrap()
    }
    pub fn proto(&self) -> u8 {
        self.0[9]
    }
    pub fn total_len(&self) -> usize {
        usize::from(u16::from_be_bytes([self.0[2], self.0[3]]))
    }
    pub fn df(&self) -> bool {
        self.0[6] & 0x40 != 0
    }
    pub fn l4(&self) -> &'a [u8] {
        &self.0[self.hlen()..self.total_len()]
    }
    pub fn src_port(&self) -> u16 {
        let l4 = self.l4();
        u16::from_be_bytes([l4[0], l4[1]])
    }
    pub fn dst_port(&self) -> u16 {
        let l4 = self.l4();
        u16::from_be_bytes([l4[2], l4[3]])
    }
    pub fn icmp_id(&self) -> u16 {
        let l4 = self.l4();
        u16::from_be_bytes([l4[4], l4[5]])
    }

    /// Asserts that the header and the L4 checksums are right, recomputed from scratch.
    pub fn assert_checksums(&self, what: &str) {
        assert_eq!(
            csum(&self.0[..self.hlen()], 0),
            0,
            "{what}: IPv4 header checksum is wrong"
        );
        assert!(
            self.total_len() <= self.0.len(),
            "{what}: total length beyond the packet"
        );
        let l4 = self.l4();
        match self.proto() {
            TCP => assert_eq!(
                csum(l4, pseudo_sum(self.src(), self.dst(), TCP, l4.len())),
                0,
                "{what}: TCP checksum is wrong"
            ),
            UDP => {
                if l4[6..8] != [0, 0] {
                    assert_eq!(
                        csum(l4, pseudo_sum(self.src(), self.dst(), UDP, l4.len())),
                        0,
                        "{what}: UDP checksum is wrong"
                    );
                }
            }
            ICMP => assert_eq!(csum(l4, 0), 0, "{what}: ICMP checksum is wrong"),
            _ => {}
        }
    }
}

/// The parts of an encapsulated frame.
pub struct Encapsulated<'a> {
    pub outer: Ip<'a>,
    pub udp_src_port: u16,
    pub udp_dst_port: u16,
    pub udp_len: usize,
    pub udp_checksum: u16,
    pub geneve: &'a [u8],
    pub inner: Ip<'a>,
}

/// Splits an Ethernet frame carrying Geneve (no options) into its layers, checking that the
/// lengths agree.
pub fn decode_geneve(frame: &[u8]) -> Encapsulated<'_> {
    assert_eq!(&frame[12..14], &[0x08, 0x00], "not an IPv4 frame");
    let outer = Ip(&frame[ETH_HLEN..]);
    assert_eq!(outer.proto(), UDP, "outer protocol is not UDP");
    assert_eq!(
        outer.total_len(),
        frame.len() - ETH_HLEN,
        "outer total length"
    );
    let udp = &frame[ETH_HLEN + outer.hlen()..];
    let udp_len = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
    assert_eq!(udp_len, udp.len(), "outer UDP length");
    let geneve = &udp[8..16];
    Encapsulated {
        udp_src_port: u16::from_be_bytes([udp[0], udp[1]]),
        udp_dst_port: u16::from_be_bytes([udp[2], udp[3]]),
        udp_len,
        udp_checksum: u16::from_be_bytes([udp[6], udp[7]]),
        geneve,
        inner: Ip(&udp[16..]),
        outer,
    }
}
