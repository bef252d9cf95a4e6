//! Answers to the packets `Reject` rules refuse (docs/design.md §4b). The policy program drops
//! such a packet and hands its flow and first bytes to the agent through the `mc_rejects` ring
//! buffer; the agent answers as the destination would have: a TCP RST for TCP, an ICMP
//! "destination unreachable, host administratively prohibited" (type 3, code 10, as Antrea) for
//! anything else. The answer comes from the address and port the client sent to (the flow's
//! ORIGINAL tuple, before kube-proxy's DNAT), so the client's stack takes it for the answer of
//! the Service it called; it leaves through the Node's routes like a reply of the Pod would
//! (towards a remote cluster: through the gateway's tunnel).
//!
//! A raw socket (`IPPROTO_RAW`) sends it: the Node's routing, not the agent, picks the way.
//! Never an answer to a TCP RST or to anything too short to quote.

use std::{net::Ipv4Addr, os::fd::AsRawFd as _};

use aya::maps::{Map, MapData, RingBuf};
use mc_common::{
    dataplane::{REJECT_CAPTURE, RejectEvent},
    maps,
};
use tokio::io::unix::AsyncFd;

use crate::bpffs::PinLayout;

const PROTO_ICMP: u8 = 1;
const PROTO_TCP: u8 = 6;
const TCP_FIN: u8 = 0x01;
const TCP_SYN: u8 = 0x02;
const TCP_RST: u8 = 0x04;
const TCP_ACK: u8 = 0x10;
const ICMP_DEST_UNREACHABLE: u8 = 3;
/// "Host administratively prohibited", Antrea's code for a rejected packet.
const ICMP_HOST_PROHIBITED: u8 = 10;
const TTL: u8 = 64;

/// The packet answering a rejected one, with its destination; `None` when it gets no answer
/// (a TCP RST, a packet too short to quote, not IPv4).
pub fn answer(e: &RejectEvent) -> Option<(Ipv4Addr, Vec<u8>)> {
    let captured = &e.packet[..(e.len as usize).min(REJECT_CAPTURE)];
    let first = *captured.first()?;
    if first >> 4 != 4 {
        return None;
    }
    let ihl = usize::from(first & 0x0f) * 4;
    // The header and the 8 bytes of the transport header an ICMP error quotes.
    if ihl < 20 || captured.len() < ihl + 8 {
        return None;
    }
    let (from, to) = (Ipv4Addr::from(e.flow.dst), Ipv4Addr::from(e.flow.src));
    let packet = if e.flow.proto == PROTO_TCP {
        tcp_reset(e, captured, ihl)?
    } else {
        unreachable(e, captured, ihl)
    };
    let proto = if e.flow.proto == PROTO_TCP {
        PROTO_TCP
    } else {
        PROTO_ICMP
    };
    Some((to, ipv4(from, to, proto, &packet)))
}

/// The TCP header of the RST answering `captured` (RFC 9293 §3.5.2: to a segment with ACK,
/// a RST at its acknowledgement number; to one without, RST+ACK acknowledging it).
fn tcp_reset(e: &RejectEvent, captured: &[u8], ihl: usize) -> Option<Vec<u8>> {
    let tcp = captured.get(ihl..ihl + 14)?;
    let flags = tcp[13];
    if flags & TCP_RST != 0 {
        return None;
    }
    let seq = u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]);
    let ack = u32::from_be_bytes([tcp[8], tcp[9], tcp[10], tcp[11]]);
    let total = usize::from(u16::from_be_bytes([captured[2], captured[3]]));
    let data_offset = usize::from(tcp[12] >> 4) * 4;
    let payload = total.saturating_sub(ihl + data_offset) as u32;
    let (seq, ack, flags) = if flags & TCP_ACK != 0 {
        (ack, 0, TCP_RST)
    } else {
        let len = payload + u32::from(flags & TCP_SYN != 0) + u32::from(flags & TCP_FIN != 0);
        (0, seq.wrapping_add(len), TCP_RST | TCP_ACK)
    };
    let mut h = vec![0u8; 20];
    h[0..2].copy_from_slice(&e.flow.dst_port.to_be_bytes());
    h[2..4].copy_from_slice(&e.flow.src_port.to_be_bytes());
    h[4..8].copy_from_slice(&seq.to_be_bytes());
    h[8..12].copy_from_slice(&ack.to_be_bytes());
    h[12] = 5 << 4;
    h[13] = flags;
    let sum = checksum(&[&pseudo_header(e.flow.dst, e.flow.src, PROTO_TCP, 20), &h]);
    h[16..18].copy_from_slice(&sum.to_be_bytes());
    Some(h)
}

/// The ICMP error quoting the packet's IPv4 header and first 8 bytes as the client sent them:
/// the destination address (and a UDP or TCP destination port) put back from before the DNAT.
fn unreachable(e: &RejectEvent, captured: &[u8], ihl: usize) -> Vec<u8> {
    let mut quote = captured[..ihl + 8].to_vec();
    quote[16..20].copy_from_slice(&e.flow.dst);
    if e.flow.proto != PROTO_ICMP {
        quote[ihl + 2..ihl + 4].copy_from_slice(&e.flow.dst_port.to_be_bytes());
    }
    quote[10..12].fill(0);
    let sum = checksum(&[&quote[..ihl]]);
    quote[10..12].copy_from_slice(&sum.to_be_bytes());
    let mut icmp = vec![
        ICMP_DEST_UNREACHABLE,
        ICMP_HOST_PROHIBITED,
        0,
        0,
        0,
        0,
        0,
        0,
    ];
    icmp.extend_from_slice(&quote);
    let sum = checksum(&[&icmp]);
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());
    icmp
}

/// An IPv4 packet (header without options) around `payload`.
fn ipv4(from: Ipv4Addr, to: Ipv4Addr, proto: u8, payload: &[u8]) -> Vec<u8> {
    let total = (20 + payload.len()) as u16;
    let mut p = vec![0u8; 20];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&total.to_be_bytes());
    // Don't fragment.
    p[6] = 0x40;
    p[8] = TTL;
    p[9] = proto;
    p[12..16].copy_from_slice(&from.octets());
    p[16..20].copy_from_slice(&to.octets());
    let sum = checksum(&[&p]);
    p[10..12].copy_from_slice(&sum.to_be_bytes());
    p.extend_from_slice(payload);
    p
}

fn pseudo_header(src: [u8; 4], dst: [u8; 4], proto: u8, len: u16) -> [u8; 12] {
    let l = len.to_be_bytes();
    [
        src[0], src[1], src[2], src[3], dst[0], dst[1], dst[2], dst[3], 0, proto, l[0], l[1],
    ]
}

/// The Internet checksum of the concatenated parts (each of even length but the last).
pub(crate) fn checksum(parts: &[&[u8]]) -> u16 {
    let mut sum = 0u32;
    for part in parts {
        for pair in part.chunks(2) {
            let word = u16::from_be_bytes([pair[0], pair.get(1).copied().unwrap_or(0)]);
            sum += u32::from(word);
        }
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Reads `mc_rejects` and answers every packet in it, until the agent stops. Errors opening
/// the ring or the socket are returned (the agent reports them and runs on without answers:
/// the packets are still dropped).
pub async fn serve(layout: PinLayout) -> Result<(), String> {
    let path = layout.map(maps::REJECTS);
    let data = MapData::from_pin(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let ring =
        RingBuf::try_from(Map::RingBuf(data)).map_err(|e| format!("{}: {e}", path.display()))?;
    // SAFETY: the ring owns its map's descriptor, which stays open and the same until the
    // AsyncFd (which owns the ring) is dropped.
    let mut ring =
        unsafe { AsyncFd::register(ring) }.map_err(|e| format!("{}: {e}", path.display()))?;
    let socket = RawSocket::open().map_err(|e| format!("a raw IPv4 socket: {e}"))?;
    tracing::info!(ring = %path.display(), "answering the packets Reject rules refuse");
    loop {
        let mut guard = ring
            .readable_mut()
            .await
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let ring = guard.get_inner_mut();
        while let Some(item) = ring.next() {
            let Some(event) = parse(&item) else { continue };
            let Some((to, packet)) = answer(&event) else {
                continue;
            };
            if let Err(e) = socket.send(to, &packet) {
                tracing::debug!(%to, "answering a rejected packet: {e}");
            }
        }
        guard.clear_ready();
    }
}

fn parse(bytes: &[u8]) -> Option<RejectEvent> {
    if bytes.len() < std::mem::size_of::<RejectEvent>() {
        return None;
    }
    // SAFETY: RejectEvent is plain old data of this size; read unaligned from the ring's bytes.
    Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<RejectEvent>()) })
}

/// A raw IPv4 socket that sends whole packets (IPPROTO_RAW implies IP_HDRINCL).
struct RawSocket(std::os::fd::OwnedFd);

impl RawSocket {
    fn open() -> std::io::Result<Self> {
        // SAFETY: plain socket(2); the descriptor is owned at once.
        let fd = unsafe {
            libc::socket(
                libc::AF_INET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::IPPROTO_RAW,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new descriptor nobody else owns.
        Ok(Self(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) }))
    }

    fn send(&self, to: Ipv4Addr, packet: &[u8]) -> std::io::Result<()> {
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes(to.octets()),
            },
            sin_zero: [0; 8],
        };
        // SAFETY: the buffer and the address outlive the call; sizes are theirs.
        let sent = unsafe {
            libc::sendto(
                self.0.as_raw_fd(),
                packet.as_ptr().cast(),
                packet.len(),
                libc::MSG_DONTWAIT,
                std::ptr::from_ref(&addr).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        };
        if sent < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mc_common::dataplane::FlowKey;

    /// A client 10.244.9.5:40000 opened a flow to the Service 10.96.0.10:80, DNATed to the Pod
    /// 10.244.1.7:8080: the captured packet has the Pod's address and port.
    fn event(proto: u8, l4: &[u8], payload: usize) -> RejectEvent {
        let mut packet = [0u8; REJECT_CAPTURE];
        let total = 20 + l4.len() + payload;
        packet[0] = 0x45;
        packet[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        packet[8] = 63;
        packet[9] = proto;
        packet[12..16].copy_from_slice(&[10, 244, 9, 5]);
        packet[16..20].copy_from_slice(&[10, 244, 1, 7]);
        packet[20..20 + l4.len()].copy_from_slice(l4);
        RejectEvent {
            flow: FlowKey {
                src: [10, 244, 9, 5],
                dst: [10, 96, 0, 10],
                src_port: 40000,
                dst_port: if proto == PROTO_ICMP { 0 } else { 80 },
                proto,
                _pad: [0; 3],
            },
            rule: 2,
            len: total as u32,
            packet,
        }
    }

    fn tcp_header(seq: u32, ack: u32, flags: u8) -> Vec<u8> {
        let mut h = vec![0u8; 20];
        h[0..2].copy_from_slice(&40000u16.to_be_bytes());
        h[2..4].copy_from_slice(&8080u16.to_be_bytes());
        h[4..8].copy_from_slice(&seq.to_be_bytes());
        h[8..12].copy_from_slice(&ack.to_be_bytes());
        h[12] = 5 << 4;
        h[13] = flags;
        h
    }

    fn valid(sum_over: &[&[u8]]) -> bool {
        checksum(sum_over) == 0
    }

    #[test]
    fn a_syn_gets_a_rst_ack_from_the_service_it_called() {
        let e = event(PROTO_TCP, &tcp_header(1000, 0, TCP_SYN), 0);
        let (to, p) = answer(&e).expect("an answer");
        assert_eq!(to, Ipv4Addr::new(10, 244, 9, 5));
        assert_eq!(p.len(), 40);
        assert!(valid(&[&p[..20]]), "IPv4 checksum");
        assert_eq!(&p[12..16], &[10, 96, 0, 10], "from the Service's address");
        assert_eq!(&p[16..20], &[10, 244, 9, 5]);
        assert_eq!(p[9], PROTO_TCP);
        let tcp = &p[20..];
        assert_eq!(u16::from_be_bytes([tcp[0], tcp[1]]), 80);
        assert_eq!(u16::from_be_bytes([tcp[2], tcp[3]]), 40000);
        assert_eq!(u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]), 0);
        assert_eq!(u32::from_be_bytes([tcp[8], tcp[9], tcp[10], tcp[11]]), 1001);
        assert_eq!(tcp[13], TCP_RST | TCP_ACK);
        assert!(valid(&[
            &pseudo_header([10, 96, 0, 10], [10, 244, 9, 5], PROTO_TCP, 20),
            tcp
        ]));
    }

    #[test]
    fn a_segment_with_ack_gets_a_rst_at_its_acknowledgement_and_a_rst_gets_nothing() {
        let e = event(PROTO_TCP, &tcp_header(5, 777, TCP_ACK), 10);
        let (_, p) = answer(&e).unwrap();
        let tcp = &p[20..];
        assert_eq!(u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]), 777);
        assert_eq!(tcp[13], TCP_RST);
        let e = event(PROTO_TCP, &tcp_header(5, 777, TCP_RST | TCP_ACK), 0);
        assert!(answer(&e).is_none());
    }

    #[test]
    fn udp_gets_an_icmp_error_quoting_what_the_client_sent() {
        let mut udp = vec![0u8; 8];
        udp[0..2].copy_from_slice(&40000u16.to_be_bytes());
        udp[2..4].copy_from_slice(&8080u16.to_be_bytes());
        udp[4..6].copy_from_slice(&12u16.to_be_bytes());
        let e = event(17, &udp, 4);
        let (to, p) = answer(&e).unwrap();
        assert_eq!(to, Ipv4Addr::new(10, 244, 9, 5));
        assert_eq!(p[9], PROTO_ICMP);
        assert_eq!(&p[12..16], &[10, 96, 0, 10]);
        let icmp = &p[20..];
        assert_eq!((icmp[0], icmp[1]), (3, 10));
        assert!(valid(&[icmp]), "ICMP checksum");
        let quote = &icmp[8..];
        assert_eq!(quote.len(), 28);
        assert!(valid(&[&quote[..20]]), "the quoted header's checksum");
        assert_eq!(&quote[16..20], &[10, 96, 0, 10], "the Service's address");
        assert_eq!(u16::from_be_bytes([quote[22], quote[23]]), 80, "its port");
        assert_eq!(u16::from_be_bytes([quote[20], quote[21]]), 40000);
    }

    #[test]
    fn an_echo_request_gets_an_icmp_error_and_garbage_gets_nothing() {
        let e = event(PROTO_ICMP, &[8, 0, 0, 0, 0x12, 0x34, 0, 1], 56);
        let (_, p) = answer(&e).unwrap();
        assert_eq!(&p[20..22], &[3, 10]);
        assert_eq!(&p[28 + 20..28 + 28], &[8, 0, 0, 0, 0x12, 0x34, 0, 1]);
        let mut short = event(17, &[0; 8], 0);
        short.len = 24;
        assert!(answer(&short).is_none());
        let mut v6 = event(17, &[0; 8], 0);
        v6.packet[0] = 0x60;
        assert!(answer(&v6).is_none());
        let mut options = event(17, &[0; 8], 0);
        options.packet[0] = 0x4f;
        assert!(
            answer(&options).is_none(),
            "60 bytes of header, no quote captured"
        );
        assert!(parse(&[0; 10]).is_none());
    }
}
