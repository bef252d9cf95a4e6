//! Generated frames through the real programs (issue 24): `BPF_PROG_TEST_RUN` of `mc_ingress`
//! and `mc_egress`, with the maps of a gateway and of a regular Node, on frames made by proptest
//! from a valid frame of every path of the packet walk (docs/design.md §4) by mutation (cut at
//! any byte, bytes overwritten, lengths, IHLs, fragment bits, Geneve version, option length and
//! protocol, TCP data offsets) and on random frames. For every frame:
//! - the verdict is one a TC program may give (next, ok, shot, redirect);
//! - exactly one counter counts it, and a drop verdict comes with a drop counter and only then;
//! - a frame passed on by a `pass_*` counter is unchanged;
//! - a frame the programs changed is well-formed as the packet walk says: outer IPv4 header and
//!   checksum, lengths, UDP to the tunnel port, Geneve version 0 carrying IPv4, the outer
//!   addresses of its path, the SNAT address; inner IPv4 and TCP/UDP/ICMP checksums valid
//!   whenever they were valid going in (recomputed here from scratch).
//!
//! The default run is 100,000 frames per role (200,000), seed fixed; `STRAIT_FUZZ_CASES=<n>`
//! runs n per role and `STRAIT_FUZZ_SEED=<n>` another seed. Run as root.

mod support;

use mc_agent::dataplane::Direction;
use mc_common::{Counter, dataplane::ROLE_GATEWAY, dataplane::ROLE_NODE};
use proptest::{
    prelude::*,
    test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner},
};
use support::{
    fixture::*,
    frames::{
        ETH_HLEN, ICMP, TCP, UDP, as_fragment, csum, eth, geneve, geneve_with_options, icmp_echo,
        icmp_error, ipv4, tcp, tcp_syn_mss, udp, without_df,
    },
    lacks_root,
};

/// Why the tests here need root (said when they are skipped without it).
const WHY_ROOT: &str = "loads eBPF programs and mounts a bpffs";

const DEFAULT_CASES: u32 = 100_000;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A valid frame of each path, for the hook it meets; `reply_port` is the SNAT port of a flow
/// the gateway already has (its replies take the reverse path).
fn seeds(reply_port: u16) -> Vec<(Direction, Vec<u8>)> {
    use Direction::{Egress, Ingress};
    let syn = tcp(POD_N, WEST_SVC, 40000, 80, 0x02, b"GET / HTTP/1.1\r\n");
    let big = without_df(&udp(POD_N, WEST_SVC, 40000, 53, &[7; 1480], true));
    vec![
        // Egress: to a remote prefix (node: to the gateway; gateway: SNAT to the remote).
        (Egress, eth(&syn)),
        (
            Egress,
            eth(&tcp_syn_mss(POD_G, WEST_SVC, 41000, 80, false, 1460)),
        ),
        (
            Egress,
            eth(&udp(POD_N, WEST_SVC, 40000, 53, b"query", true)),
        ),
        (Egress, eth(&icmp_echo(POD_N, WEST_SVC, 8, 77, 1))),
        (Egress, eth(&as_fragment(&big, 0x2000))),
        (
            Egress,
            eth(&udp(POD_N, WEST_SVC, 40000, 53, &[7; 1500], true)),
        ),
        // Egress: a reply to a flow a remote cluster opened; local traffic.
        (Egress, eth(&udp(POD_N, W, 53, 33333, b"answer", true))),
        (Egress, eth(&tcp(POD_N, EAST_SVC, 40000, 80, 0x02, b""))),
        // Egress: our own tunnel packet coming through again.
        (Egress, eth(&geneve(N, G, PORT, &syn))),
        // Ingress at the gateway from a Node: the hairpin; a reply from a Node.
        (Ingress, eth(&geneve(N, G, PORT, &syn))),
        (
            Ingress,
            eth(&geneve(N, G, PORT, &tcp(EAST_SVC, W, 80, 33333, 0x12, b""))),
        ),
        (
            Ingress,
            eth(&geneve_with_options(
                N,
                G,
                PORT,
                &[0x01, 0x02, 0x80, 0x01, 0, 0, 0, 9],
                &syn,
            )),
        ),
        // Ingress from the remote gateway: a reply to an SNATed flow, a new flow to a local
        // Service, an ICMP error about a flow.
        (
            Ingress,
            eth(&geneve(
                W,
                G,
                PORT,
                &tcp(WEST_SVC, G, 80, reply_port, 0x12, b""),
            )),
        ),
        (
            Ingress,
            eth(&geneve(W, G, PORT, &tcp(W, EAST_SVC, 33333, 80, 0x02, b""))),
        ),
        (
            Ingress,
            eth(&geneve(
                W,
                G,
                PORT,
                &icmp_error(
                    WEST_SVC,
                    G,
                    3,
                    4,
                    &tcp(G, WEST_SVC, reply_port, 80, 0x10, b"")[..28],
                ),
            )),
        ),
        // Ingress at a Node from its gateway; from a stranger; a datagram on the port that
        // is not Geneve; plain traffic.
        (Ingress, eth(&geneve(G, N, PORT, &syn))),
        (Ingress, eth(&geneve(STRANGER, G, PORT, &syn))),
        (
            Ingress,
            eth(&udp(STRANGER, G, 5000, PORT, b"not geneve at all", true)),
        ),
        (Ingress, eth(&ipv4(W, G, ICMP, &[8, 0, 0, 0, 0, 1, 0, 1]))),
    ]
}

/// One change to a frame.
#[derive(Clone, Debug)]
enum Mutation {
    /// Keep the first `n` bytes (at least the Ethernet and a minimal IPv4 header: the kernel
    /// refuses to test-run less).
    Cut(usize),
    /// Overwrite the byte at `at` (modulo the length).
    Byte(usize, u8),
    /// The IPv4 header's first byte (version and IHL) of the outer (0) or inner (1) packet.
    VersionIhl(u8, u8),
    /// The IPv4 total length.
    TotalLen(u8, u16),
    /// The IPv4 flags and fragment offset.
    Frag(u8, u16),
    /// Geneve's first two bytes (version, option length, flags).
    GeneveHead(u8, u8),
    /// Geneve's protocol type.
    GeneveProto(u16),
    /// The inner TCP data offset byte.
    TcpOffset(u8),
    /// Bytes appended after the packet.
    Tail(Vec<u8>),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (ETH_HLEN + 20..1600).prop_map(Mutation::Cut),
        (any::<usize>(), any::<u8>()).prop_map(|(a, b)| Mutation::Byte(a, b)),
        (0u8..2, any::<u8>()).prop_map(|(w, b)| Mutation::VersionIhl(w, b)),
        (0u8..2, any::<u16>()).prop_map(|(w, v)| Mutation::TotalLen(w, v)),
        (0u8..2, any::<u16>()).prop_map(|(w, v)| Mutation::Frag(w, v)),
        (any::<u8>(), any::<u8>()).prop_map(|(a, b)| Mutation::GeneveHead(a, b)),
        prop_oneof![Just(0x0800u16), Just(0x6558), any::<u16>()].prop_map(Mutation::GeneveProto),
        any::<u8>().prop_map(Mutation::TcpOffset),
        proptest::collection::vec(any::<u8>(), 1..64).prop_map(Mutation::Tail),
    ]
}

/// Where the outer IPv4 header, the Geneve header and the inner IPv4 header would be.
fn offsets(frame: &[u8]) -> (usize, usize, usize) {
    let outer = ETH_HLEN;
    let ihl = frame.get(outer).map_or(20, |b| usize::from(b & 0x0f) * 4);
    let geneve = outer + ihl + 8;
    let opts = frame.get(geneve).map_or(0, |b| usize::from(b & 0x3f) * 4);
    (outer, geneve, geneve + 8 + opts)
}

/// Overwrites `bytes` at `at` when they fit.
fn set(frame: &mut [u8], at: usize, bytes: &[u8]) {
    if at + bytes.len() <= frame.len() {
        frame[at..at + bytes.len()].copy_from_slice(bytes);
    }
}

fn apply(frame: &mut Vec<u8>, m: &Mutation) {
    let (outer, geneve, inner) = offsets(frame);
    let ip_at = |which: u8| if which == 0 { outer } else { inner };
    let inner_ihl = frame.get(inner).map_or(20, |x| usize::from(x & 0x0f) * 4);
    match m {
        Mutation::Cut(n) => frame.truncate(*n),
        Mutation::Byte(at, b) => {
            let at = at % frame.len();
            frame[at] = *b;
        }
        Mutation::VersionIhl(w, b) => set(frame, ip_at(*w), &[*b]),
        Mutation::TotalLen(w, v) => set(frame, ip_at(*w) + 2, &v.to_be_bytes()),
        Mutation::Frag(w, v) => set(frame, ip_at(*w) + 6, &v.to_be_bytes()),
        Mutation::GeneveHead(a, b) => set(frame, geneve, &[*a, *b]),
        Mutation::GeneveProto(p) => set(frame, geneve + 2, &p.to_be_bytes()),
        Mutation::TcpOffset(b) => set(frame, inner + inner_ihl + 12, &[*b]),
        Mutation::Tail(bytes) => frame.extend_from_slice(bytes),
    }
}

/// A frame to run: a mutated seed, or random bytes after an IPv4 Ethernet header.
#[derive(Clone, Debug)]
enum Case {
    Mutated(usize, Vec<Mutation>),
    Random(Direction, Vec<u8>),
}

fn case(seeds: usize) -> impl Strategy<Value = Case> {
    prop_oneof![
        8 => (0..seeds, proptest::collection::vec(mutation(), 0..4))
            .prop_map(|(s, m)| Case::Mutated(s, m)),
        1 => (any::<bool>(), proptest::collection::vec(any::<u8>(), 20..200)).prop_map(
            |(ingress, bytes)| {
                let mut f = eth(&[]);
                f.extend_from_slice(&bytes);
                let d = if ingress { Direction::Ingress } else { Direction::Egress };
                Case::Random(d, f)
            }
        ),
    ]
}

/// Counters that are not verdicts: counted beside the verdict of the frames they concern.
const BESIDE: [Counter; 4] = [
    Counter::TcpMssClamped,
    Counter::IcmpErrorTranslated,
    Counter::TxIdentityViaConntrack,
    Counter::TxIdentityUnknown,
];

/// The verdict counter a run added one packet to (at most one packet more under each counter
/// of [`BESIDE`]).
fn counted(before: &[u64], after: &[u64]) -> Result<Counter, String> {
    let mut verdicts = Vec::new();
    for (i, (b, a)) in before.iter().zip(after).enumerate() {
        if a == b {
            continue;
        }
        let c = Counter::from_key(i as u32).ok_or(format!("counter slot {i} has no name"))?;
        if BESIDE.contains(&c) {
            if a - b != 1 {
                return Err(format!("{} grew by {}", c.name(), a - b));
            }
            continue;
        }
        verdicts.push((c, a - b));
    }
    match verdicts.as_slice() {
        [(c, 1)] => Ok(*c),
        other => Err(format!(
            "the frame changed these verdict counters (counter, by): {:?}",
            other
                .iter()
                .map(|(c, n)| (c.name(), *n))
                .collect::<Vec<_>>()
        )),
    }
}

fn all_counters(f: &Fixture) -> Vec<u64> {
    let map = f.dp.counters().expect("counters map");
    let mut slots = vec![0u64; 64];
    for r in mc_agent::counters::read(&map).expect("reading counters") {
        slots[r.key as usize] = r.packets;
    }
    slots
}

/// A well-formed IPv4 packet at the start of `p`: version 4, IHL >= 5, total length within
/// `p`, header checksum right. Returns the header length and total length.
fn ipv4_ok(p: &[u8], what: &str) -> Result<(usize, usize), String> {
    if p.len() < 20 || p[0] >> 4 != 4 || p[0] & 0x0f < 5 {
        return Err(format!("{what}: not an IPv4 header"));
    }
    let hlen = usize::from(p[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([p[2], p[3]]));
    if total < hlen || total > p.len() || hlen > p.len() {
        return Err(format!(
            "{what}: total length {total} for {} bytes",
            p.len()
        ));
    }
    if csum(&p[..hlen], 0) != 0 {
        return Err(format!("{what}: IPv4 header checksum wrong"));
    }
    Ok((hlen, total))
}

/// Whether the IPv4 header checksum of `p` is right (no other check).
fn header_sum_ok(p: &[u8]) -> bool {
    let hlen = p.first().map_or(0, |b| usize::from(b & 0x0f) * 4);
    hlen >= 20 && p.len() >= hlen && csum(&p[..hlen], 0) == 0
}

/// Whether a whole, unfragmented TCP/UDP/ICMP packet has a right checksum (`None`: not one, or
/// cut, or a fragment).
fn l4_sum_ok(p: &[u8]) -> Option<bool> {
    if p.len() < 20 {
        return None;
    }
    let hlen = usize::from(p[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([p[2], p[3]]));
    let frag = u16::from_be_bytes([p[6], p[7]]) & 0x3fff;
    if hlen < 20 || total > p.len() || total < hlen || frag != 0 {
        return None;
    }
    let l4 = &p[hlen..total];
    let (src, dst): ([u8; 4], [u8; 4]) = (p[12..16].try_into().ok()?, p[16..20].try_into().ok()?);
    let pseudo = |proto: u8| {
        let mut s = 0u32;
        for w in [&src[..2], &src[2..], &dst[..2], &dst[2..]] {
            s += u32::from(u16::from_be_bytes([w[0], w[1]]));
        }
        s + u32::from(proto) + l4.len() as u32
    };
    match p[9] {
        TCP if l4.len() >= 20 => Some(csum(l4, pseudo(TCP)) == 0),
        UDP if l4.len() >= 8 => Some(l4[6..8] == [0, 0] || csum(l4, pseudo(UDP)) == 0),
        ICMP if l4.len() >= 8 => Some(csum(l4, 0) == 0),
        _ => None,
    }
}

/// The inner packet of a frame as the programs see it: after the Ethernet header (egress) or
/// inside the Geneve of an ingress frame.
fn inner_of(frame: &[u8], direction: Direction) -> &[u8] {
    match direction {
        Direction::Egress => frame.get(ETH_HLEN..).unwrap_or_default(),
        Direction::Ingress => frame.get(offsets(frame).2..).unwrap_or_default(),
    }
}

/// Checks a frame the programs encapsulated (or retargeted): Strait's outer headers from `src`
/// to `dst`; returns the inner packet.
fn tunnel_ok(out: &[u8], src: [u8; 4], dst: [u8; 4]) -> Result<&[u8], String> {
    let outer = out.get(ETH_HLEN..).ok_or("no outer header")?;
    let (hlen, total) = ipv4_ok(outer, "outer")?;
    if total != outer.len() {
        return Err(format!(
            "outer total length {total}, frame carries {}",
            outer.len()
        ));
    }
    if outer[9] != UDP || outer[12..16] != src || outer[16..20] != dst {
        return Err(format!(
            "outer {:?} -> {:?} proto {}, want {src:?} -> {dst:?} UDP",
            &outer[12..16],
            &outer[16..20],
            outer[9]
        ));
    }
    let udp = &outer[hlen..];
    if udp.len() < 16 || u16::from_be_bytes([udp[2], udp[3]]) != PORT {
        return Err("not UDP to the tunnel port".into());
    }
    if usize::from(u16::from_be_bytes([udp[4], udp[5]])) != udp.len() {
        return Err("outer UDP length".into());
    }
    let g = &udp[8..];
    if g[0] >> 6 != 0 || u16::from_be_bytes([g[2], g[3]]) != 0x0800 {
        return Err(format!("Geneve header {:?}", &g[..4]));
    }
    let opts = usize::from(g[0] & 0x3f) * 4;
    g.get(8 + opts..)
        .ok_or_else(|| "Geneve options beyond the frame".into())
}

/// Everything that must hold for one frame.
fn check(
    direction: Direction,
    input: &[u8],
    verdict: u32,
    out: &[u8],
    counter: Counter,
) -> Result<(), String> {
    if ![NEXT, OK, SHOT, REDIRECT].contains(&verdict) {
        return Err(format!("verdict {verdict}"));
    }
    if counter.is_drop() != (verdict == SHOT) {
        return Err(format!("verdict {verdict} counted as {}", counter.name()));
    }
    if verdict == SHOT {
        return Ok(());
    }
    let name = counter.name();
    if name.starts_with("pass_") {
        if verdict != NEXT || out != input {
            return Err(format!("{name}: a frame passed on must be untouched"));
        }
        return Ok(());
    }
    let inner_in = inner_of(input, direction);
    let sums_in = (header_sum_ok(inner_in), l4_sum_ok(inner_in));
    let inner_out = match counter {
        Counter::TxToGateway => tunnel_ok(out, N, G)?,
        Counter::TxSnatToRemote | Counter::HairpinSnat => {
            let inner = tunnel_ok(out, G, W)?;
            if inner.get(12..16) != Some(&G[..]) {
                return Err(format!("{name}: inner source not SNATed to the gateway"));
            }
            inner
        }
        Counter::TxReplyToRemote => tunnel_ok(out, G, W)?,
        Counter::HairpinUnsnat => tunnel_ok(out, G, N)?,
        Counter::RxFromGateway
        | Counter::RxUnsnatLocal
        | Counter::RxFromRemote
        | Counter::RxReplyFromNode => {
            if verdict != NEXT {
                return Err(format!("{name}: decapsulated with verdict {verdict}"));
            }
            let inner = out.get(ETH_HLEN..).ok_or("no inner packet")?;
            if counter == Counter::RxFromRemote
                && (inner.get(12..16) != Some(&W[..]) || inner.get(16..18) == Some(&[10, 98]))
            {
                return Err(format!(
                    "{name}: a remote flow not from W or to a remote prefix"
                ));
            }
            inner
        }
        Counter::TxFragNeeded => {
            let icmp = out.get(ETH_HLEN..).ok_or("no ICMP packet")?;
            ipv4_ok(icmp, "fragmentation-needed")?;
            if l4_sum_ok(icmp) != Some(true) || icmp[9] != ICMP {
                return Err("fragmentation-needed: ICMP checksum".into());
            }
            return Ok(());
        }
        other => return Err(format!("{} forwarded with verdict {verdict}", other.name())),
    };
    if sums_in.0 {
        ipv4_ok(inner_out, "inner")?;
    }
    if sums_in.1 == Some(true) && l4_sum_ok(inner_out) == Some(false) {
        return Err(format!("{name}: inner L4 checksum broken"));
    }
    Ok(())
}

fn fuzz(role: u32, name: &str) {
    let mut f = Fixture::new(name, role);
    // A flow the gateway already SNATed: its replies take the reverse path.
    let reply_port = if role == ROLE_GATEWAY {
        f.hairpin_tcp(POD_N, 3000, 0x02)
    } else {
        3000
    };
    let seeds = seeds(reply_port);
    let cases = env_u64("STRAIT_FUZZ_CASES", u64::from(DEFAULT_CASES)) as u32;
    let seed = env_u64("STRAIT_FUZZ_SEED", 0x0571_2a17) ^ u64::from(role);
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let config = Config {
        cases,
        failure_persistence: None,
        rng_algorithm: RngAlgorithm::ChaCha,
        ..Config::default()
    };
    let mut runner = TestRunner::new_with_rng(
        config,
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
    );
    struct State {
        f: Fixture,
        counters: Vec<u64>,
        frames: u64,
        refused: u64,
        by_counter: std::collections::BTreeMap<&'static str, u64>,
    }
    let state = std::cell::RefCell::new(State {
        counters: all_counters(&f),
        f,
        frames: 0,
        refused: 0,
        by_counter: Default::default(),
    });
    let result = runner.run(&case(seeds.len()), |c| {
        let (direction, frame) = match &c {
            Case::Mutated(s, ms) => {
                let (d, mut frame) = seeds[*s].clone();
                for m in ms {
                    apply(&mut frame, m);
                }
                (d, frame)
            }
            Case::Random(d, frame) => (*d, frame.clone()),
        };
        let st = &mut *state.borrow_mut();
        let Some((verdict, out)) = support::try_test_run(&mut st.f.dp, direction, &frame) else {
            // The kernel refuses some frames before the program sees them.
            st.refused += 1;
            return Ok(());
        };
        st.frames += 1;
        let now = all_counters(&st.f);
        let counted = counted(&st.counters, &now);
        st.counters = now;
        let counter = counted
            .map_err(|e| TestCaseError::fail(format!("{direction:?} frame {frame:02x?}: {e}")))?;
        *st.by_counter.entry(counter.name()).or_default() += 1;
        check(direction, &frame, verdict, &out, counter)
            .map_err(|e| TestCaseError::fail(format!("{direction:?} frame {frame:02x?}: {e}")))
    });
    let st = state.into_inner();
    let by_counter = st.by_counter;
    println!(
        "{name}: {} frames through the programs ({} refused by the kernel before them); by counter: {by_counter:?}",
        st.frames, st.refused
    );
    if let Err(e) = result {
        panic!("{name}: {e}");
    }
    // Every path was reached, not only the drops.
    for wanted in if role == ROLE_GATEWAY {
        &[
            "hairpin_snat",
            "hairpin_unsnat",
            "rx_from_remote",
            "tx_snat_to_remote",
        ][..]
    } else {
        &["tx_to_gateway", "rx_from_gateway"][..]
    } {
        assert!(
            by_counter.contains_key(wanted),
            "{name}: no frame took {wanted}"
        );
    }
}

#[test]
fn generated_frames_through_the_gateway_programs_keep_every_invariant() {
    if lacks_root(WHY_ROOT) {
        return;
    }
    fuzz(ROLE_GATEWAY, "fuzz-gateway");
}

#[test]
fn generated_frames_through_a_regular_nodes_programs_keep_every_invariant() {
    if lacks_root(WHY_ROOT) {
        return;
    }
    fuzz(ROLE_NODE, "fuzz-node");
}
