//! Tunnel probes (docs/design.md §4d). The active gateway's agent sends every remote gateway a
//! probe each second: Strait's Geneve with the OAM bit, to the tunnel port, from the Node's
//! address (a UDP socket of the agent's). On the way out the egress program sends it on as it
//! is, or into WireGuard with `gatewayIP` as source when encryption is on ([`send`]). The
//! remote gateway's ingress program answers it itself ([`take`]: addresses swapped, the kind
//! set to reply, back the way it came), so an answer says the path and the remote dataplane
//! work, whatever its agent does. The answer, arriving at the prober's ingress, goes into
//! `mc_probes` (round trip, sequence, time) and no further.

use aya_ebpf::{
    bindings::{TC_ACT_SHOT, TC_ACT_UNSPEC},
    helpers::generated::bpf_ktime_get_ns,
    helpers::generated::bpf_redirect,
    programs::TcContext,
};
use core::mem::offset_of;

use mc_common::{
    Counter,
    dataplane::{
        GENEVE_OAM, LocalConfig, PEER_REMOTE_GATEWAY, PROBE_MAGIC, PROBE_REPLY, PROBE_REQUEST,
        Probe,
    },
};

use crate::{
    maps::{peer_kind, probe_answered, wireguard},
    packet::{
        GENEVE_FLAGS_OFF, GENEVE_HLEN, GENEVE_VER_OPT_LEN_OFF, IPPROTO_UDP, IPV4_HLEN, Ipv4,
        UDP_CHECK_OFF, UDP_HLEN,
    },
    tunnel::{self, Tunnel},
};

/// The probe's kind byte, past its magic.
const KIND_OFF: usize = offset_of!(Probe, kind);

type Outcome = Result<(Counter, i32), Counter>;

/// The egress program, on the gateway: a packet from the Node's address to a remote gateway's
/// tunnel port. `Some` verdict when it is the agent's probe (sent on, into WireGuard with
/// `gatewayIP` as source when `encrypted`); `None` for anything else (the programs' own tunnel
/// packets coming through again, a reflected answer). A BPF-to-BPF call: off the path of
/// every other packet, and off the caller's stack.
#[inline(never)]
pub fn send(
    ctx: &TcContext,
    ip: &Ipv4,
    cfg: &LocalConfig,
    encrypted: bool,
    pass: i32,
) -> Result<Option<i32>, Counter> {
    // Anything too short to be a probe is not one (left alone, as before probes existed).
    let Ok(geneve) = ip.read::<[u8; 2]>(ctx, ip.l4() + UDP_HLEN) else {
        return Ok(None);
    };
    if geneve[GENEVE_FLAGS_OFF] & GENEVE_OAM == 0 || geneve[GENEVE_VER_OPT_LEN_OFF] & 0x3f != 0 {
        return Ok(None);
    }
    // The agent builds the inner header without options.
    let kind_at = ip.l4() + UDP_HLEN + GENEVE_HLEN + IPV4_HLEN + UDP_HLEN + KIND_OFF;
    // Four bytes (the kind and its padding): a one-byte read's bounds check compiles to a
    // comparison the verifier cannot follow.
    let Ok(kind) = ip.read::<[u8; 4]>(ctx, kind_at) else {
        return Ok(None);
    };
    if kind[0] != PROBE_REQUEST {
        return Ok(None);
    }
    if encrypted {
        let hop = (cfg.gateway_ip, ip.dst);
        return tunnel::retarget_into_wireguard(ctx, ip, hop, &wireguard()).map(Some);
    }
    Ok(Some(pass))
}

/// The ingress program, on the gateway: Strait's Geneve with the OAM bit. From a remote gateway
/// only (from anyone else it is not Strait's: passed on), and with encryption on only as
/// WireGuard handed it over (`plaintext`: it came from the wire). A probe is answered; an answer to this gateway's probe is recorded and dropped.
/// A BPF-to-BPF call, as [`send`].
#[inline(never)]
pub fn take(
    ctx: &TcContext,
    cfg: &LocalConfig,
    t: &Tunnel,
    encrypted: bool,
    plaintext: bool,
) -> Outcome {
    let sender = t.outer.src;
    if peer_kind(&sender) != PEER_REMOTE_GATEWAY {
        // Only gateways probe each other: Geneve with the OAM bit from anyone else is not
        // Strait's (as before probes existed), left to the kernel.
        return Ok((Counter::PassForeignTunnel, TC_ACT_UNSPEC));
    }
    if plaintext {
        return Err(Counter::DropPlaintextFromRemote);
    }
    if t.inner.proto != IPPROTO_UDP || t.inner.is_later_fragment() {
        return Err(Counter::DropBadGeneve);
    }
    let at = t.inner.l4() + UDP_HLEN;
    let probe: Probe = t.inner.read(ctx, at).map_err(|_| Counter::DropTruncated)?;
    // As one word: an array constant would be kept in `.rodata`, a map the policy program's
    // object (the same object, loaded with pinned maps only) cannot have.
    if u64::from_ne_bytes(probe.magic) != u64::from_ne_bytes(PROBE_MAGIC) {
        return Err(Counter::DropBadGeneve);
    }
    match probe.kind {
        PROBE_REQUEST => answer(ctx, t, at, &probe, encrypted),
        PROBE_REPLY => {
            if t.outer.dst != cfg.node_ip && t.outer.dst != cfg.gateway_ip {
                return Err(Counter::DropNotLocal);
            }
            // SAFETY: plain helper call. The agent's clock (CLOCK_MONOTONIC) is this one.
            let now = unsafe { bpf_ktime_get_ns() };
            probe_answered(sender, probe.seq, probe.sent_ns, now);
            Ok((Counter::ProbeReply, TC_ACT_SHOT))
        }
        _ => Err(Counter::DropBadGeneve),
    }
}

/// Sends a probe back to its prober: the kind set to reply, the outer and the inner addresses
/// swapped (which leaves the IPv4 headers' checksums as they were: a header's sum does not
/// depend on the order of its words), the outer UDP checksum cleared (the new kind would
/// spoil the one the prober's socket computed; 0 is "none" over IPv4, as Strait's own tunnel
/// packets carry), then into WireGuard (`encrypted`) or out of the uplink toward the hop it
/// came from (the Ethernet addresses swapped).
#[inline(always)]
fn answer(ctx: &TcContext, t: &Tunnel, at: usize, probe: &Probe, encrypted: bool) -> Outcome {
    let failed = |_| Counter::DropRewriteFailed;
    // The kind with the padding read from the packet: a store of the constant alone would be
    // kept in `.rodata`, a map the policy program's object cannot have.
    let kind = [PROBE_REPLY, probe._pad[0], probe._pad[1], probe._pad[2]];
    ctx.store(at + KIND_OFF, &kind, 0).map_err(failed)?;
    // A local, not a constant's address (which would land in `.rodata`).
    let no_checksum: u16 = 0;
    ctx.store(t.outer.l4() + UDP_CHECK_OFF, &no_checksum, 0)
        .map_err(failed)?;
    let swapped = |ip: &Ipv4| -> [u8; 8] {
        let (s, d) = (ip.src, ip.dst);
        [d[0], d[1], d[2], d[3], s[0], s[1], s[2], s[3]]
    };
    ctx.store(t.inner.src_off(), &swapped(&t.inner), 0)
        .map_err(failed)?;
    ctx.store(t.outer.src_off(), &swapped(&t.outer), 0)
        .map_err(failed)?;
    if encrypted {
        return Ok((
            Counter::ProbeAnswered,
            tunnel::into_wireguard(&wireguard())?,
        ));
    }
    let macs: [u8; 12] = crate::packet::read(ctx, 0).map_err(|_| Counter::DropTruncated)?;
    let back: [u8; 12] = [
        macs[6], macs[7], macs[8], macs[9], macs[10], macs[11], macs[0], macs[1], macs[2], macs[3],
        macs[4], macs[5],
    ];
    ctx.store(0, &back, 0).map_err(failed)?;
    // SAFETY: plain helper call: out of the device it came in by.
    let verdict = unsafe { bpf_redirect(tunnel::ifindex(ctx), 0) as i32 };
    Ok((Counter::ProbeAnswered, verdict))
}
