//! Every path of the packet walk (docs/design.md §4) with `BPF_PROG_TEST_RUN`: a hand-built frame
//! goes into the ingress or egress program and the test checks the frame that comes out (outer
//! headers, VNI, inner addresses and ports, checksums recomputed from scratch), the verdict, the
//! counters and the SNAT table. No interfaces are involved. Run as root, one test at a time.

mod support;

use mc_agent::dataplane::Direction;
use mc_common::{
    Counter,
    dataplane::{
        CONFIG_ROUTED_VIA_GATEWAY, CONFIG_STRETCHED_POLICY, EXPOSED_POD_CIDR, Exposed,
        HAIRPIN_SNAT, HAIRPIN_UNSNAT, NextHop, PEER_LOCAL_NODE, PEER_REMOTE_GATEWAY, Peer,
        PodIdentity, ROLE_GATEWAY, ROLE_NODE, RemoteRoute, SNAT_FORWARD, SNAT_PORT_MIN,
        SNAT_REVERSE, SenderId, SenderIdKey,
    },
};
use support::{
    fixture::*,
    frames::{
        ETH_HLEN, ICMP, Ip, TCP, UDP, as_fragment, decode_geneve, eth, geneve, geneve_with_options,
        icmp_echo, icmp_error, ipv4, tcp, tcp_mss, tcp_syn_mss, tcp_syn_options, udp, without_df,
    },
    lacks_root,
};

/// Why the tests here need root (said when they are skipped without it).
const WHY_ROOT: &str = "loads eBPF programs and mounts a bpffs";

/// The outer headers Strait writes: DF, TTL 64, UDP to the tunnel port from the flow-hash range
/// with checksum 0, Geneve version 0 carrying IPv4 with VNI 0xffffff (no label identity).
fn assert_tunnel(frame: &[u8], src: [u8; 4], dst: [u8; 4]) {
    assert_tunnel_vni(frame, src, dst, 0x00ff_ffff);
}

/// [`assert_tunnel`] with the VNI `vni`.
fn assert_tunnel_vni(frame: &[u8], src: [u8; 4], dst: [u8; 4], vni: u32) {
    let e = decode_geneve(frame);
    e.outer.assert_checksums("outer");
    assert_eq!(e.outer.src(), src, "outer source");
    assert_eq!(e.outer.dst(), dst, "outer destination");
    assert!(e.outer.df(), "outer DF must be set");
    assert_eq!(e.outer.0[8], 64, "outer TTL");
    assert_eq!(e.udp_dst_port, PORT);
    assert!(
        e.udp_src_port >= 0xc000,
        "source port {} not from the hash range",
        e.udp_src_port
    );
    assert_eq!(e.udp_checksum, 0, "outer UDP checksum must be 0");
    assert_eq!(e.udp_len, 16 + e.inner.total_len());
    let v = vni.to_be_bytes();
    assert_eq!(
        e.geneve,
        &[0, 0, 0x08, 0x00, v[1], v[2], v[3], 0],
        "Geneve header"
    );
}

/// The VNI of a Geneve frame.
fn vni_of(frame: &[u8]) -> u32 {
    let g = decode_geneve(frame).geneve;
    u32::from_be_bytes([0, g[4], g[5], g[6]])
}

#[test]
fn the_vni_carries_the_source_pods_label_id_from_node_and_gateway_and_the_hairpin_keeps_it() {
    if lacks_root(WHY_ROOT) {
        return;
    }
    let set_ids = |f: &mut Fixture, ids: &[([u8; 4], u32)]| {
        let mut maps = f.dp.maps().expect("maps");
        for (ip, id) in ids {
            maps.pod_ids
                .insert(ip, &PodIdentity { id: *id }, 0)
                .expect("pod id");
        }
    };
    // A regular Node: its Pod with an ID, and one without.
    let mut f = Fixture::new("node-vni", ROLE_NODE);
    set_ids(&mut f, &[(POD_N, 7)]);
    let (verdict, out) = f.run(
        Direction::Egress,
        &eth(&tcp(POD_N, WEST_SVC, 40000, 80, 0x02, b"")),
    );
    assert_eq!(verdict, REDIRECT);
    assert_tunnel_vni(&out, N, G, 7);
    let (_, out) = f.run(
        Direction::Egress,
        &eth(&tcp([10, 244, 1, 6], WEST_SVC, 40000, 80, 0x02, b"")),
    );
    assert_tunnel_vni(&out, N, G, 0x00ff_ffff);
    drop(f);

    // The gateway: its own Pod's flow is SNATed, yet carries the Pod's ID; a Node's tunnel
    // packet keeps the VNI the Node wrote through the hairpin.
    let mut f = Fixture::new("gw-vni", ROLE_GATEWAY);
    set_ids(&mut f, &[(POD_G, 0x12_3456)]);
    let (verdict, out) = f.run(
        Direction::Egress,
        &eth(&tcp(POD_G, WEST_SVC, 41000, 80, 0x02, b"")),
    );
    assert_eq!(verdict, REDIRECT);
    assert_tunnel_vni(&out, G, W, 0x12_3456);
    assert_eq!(decode_geneve(&out).inner.src(), G, "SNATed to the gateway");
    let inner = tcp(POD_N, WEST_SVC, 40000, 80, 0x02, b"");
    let mut frame = eth(&geneve(N, G, PORT, &inner));
    // VNI 7 in the Node's Geneve header (bytes 4..7 after the outer IPv4 and UDP headers).
    let vni_at = ETH_HLEN + 20 + 8 + 4;
    frame[vni_at..vni_at + 3].copy_from_slice(&[0, 0, 7]);
    let (verdict, out) = f.run(Direction::Ingress, &frame);
    assert_eq!(verdict, REDIRECT);
    assert_eq!(vni_of(&out), 7, "the hairpin keeps the Node's VNI");
    assert_eq!(decode_geneve(&out).inner.src(), G);
    f.assert_counters(&[(Counter::TxSnatToRemote, 1), (Counter::HairpinSnat, 1)]);
}

/// With stretched NetworkPolicy, the gateway checks the identity a local Node's packet claims
/// before the hairpin carries it to another cluster: the VNI must be the label ID of the Pod
/// with the inner source address on that Node (or, from the Node's own address, a masqueraded
/// flow's, one of its Pods' IDs). Anything else goes on with VNI unknown, counted: a
/// host-network process cannot pass for another Pod, nor a Node for another Node's Pod.
#[test]
fn the_gateway_lets_a_node_claim_only_the_identities_of_its_own_pods() {
    if lacks_root(WHY_ROOT) {
        return;
    }
    let mut f = Fixture::new("gw-sender-ids", ROLE_GATEWAY);
    const N2: [u8; 4] = [198, 18, 1, 3];
    {
        let mut maps = f.dp.maps().expect("maps");
        let mut config = maps.config.get(&0, 0).expect("config");
        config.flags |= CONFIG_STRETCHED_POLICY;
        maps.config.set(0, &config, 0).expect("config");
        let local = Peer {
            kind: PEER_LOCAL_NODE,
            cluster: 0,
        };
        maps.peers.insert(&N2, &local, 0).expect("peer N2");
        // POD_N (ID 7) runs on N, so N's own address may claim 7 too.
        for addr in [POD_N, N] {
            let key = SenderIdKey { addr, id: 7 };
            maps.sender_ids
                .insert(&key, &SenderId { node: N }, 0)
                .expect("sender id");
        }
    }
    let send = |f: &mut Fixture, node: [u8; 4], src: [u8; 4], sport: u16, vni: u32| {
        let mut frame = eth(&geneve(
            node,
            G,
            PORT,
            &tcp(src, WEST_SVC, sport, 80, 0x02, b""),
        ));
        let at = ETH_HLEN + 20 + 8 + 4;
        frame[at..at + 3].copy_from_slice(&vni.to_be_bytes()[1..]);
        let (verdict, out) = f.run(Direction::Ingress, &frame);
        assert_eq!(verdict, REDIRECT);
        vni_of(&out)
    };
    assert_eq!(send(&mut f, N, POD_N, 40000, 7), 7, "the Pod's own ID");
    assert_eq!(
        send(&mut f, N, N, 40001, 7),
        7,
        "a masqueraded flow of the Pod"
    );
    assert_eq!(send(&mut f, N, POD_N, 40002, 0xff_ffff), 0xff_ffff);
    // Forged: another ID for the Pod, another Node for it, the Node's address with an ID none
    // of its Pods has.
    assert_eq!(send(&mut f, N, POD_N, 40003, 9), 0xff_ffff);
    assert_eq!(send(&mut f, N2, POD_N, 40004, 7), 0xff_ffff);
    assert_eq!(send(&mut f, N, N, 40005, 9), 0xff_ffff);
    // The hairpin cache's path checks too: the flow's next packet with another VNI.
    assert_eq!(send(&mut f, N, POD_N, 40000, 7), 7);
    assert_eq!(send(&mut f, N, POD_N, 40000, 9), 0xff_ffff, "a cached flow");
    f.assert_counters(&[(Counter::HairpinSnat, 8), (Counter::IdentityRewritten, 4)]);
}

#[test]
fn regular_node_tunnels_remote_traffic_to_the_local_gateway() {
    if lacks_root(WHY_ROOT) {
        return;
    }
    let mut f = Fixture::new("node-egress", ROLE_NODE);

    // A Pod's TCP SYN to a west ClusterIP (kube-proxy already chose the endpoint).
    let inner = tcp(POD_N, WEST_SVC, 40000, 80, 0x02, b"");
    let (verdict, out) = f.run(Direction::Egress, &eth(&inner));
    assert_eq!(
        verdict, REDIRECT,
        "a remote packet must be sent out encapsulated"
    );
    assert_tunnel(&out, N, G);
    let e = decode_geneve(&out);
    assert_eq!(
        e.inner.0,
        &inner[..],
        "the inner packet must travel unchanged"
    );
    assert_eq!(
        &out[..ETH_HLEN],
        &eth(&inner)[..ETH_HLEN],
        "Ethernet header kept"
    );

    // A reply to a flow a remote cluster opened goes to the local gateway as well.
    let reply = udp(POD_N, W, 53, 33333, b"answer", true);
    let (verdict, out) = f.run(Direction::Egress, &eth(&reply));
    assert_eq!(verdict, REDIRECT);
    assert_tunnel(&out, N, G);
    assert_eq!(decode_geneve(&out).inner.0, &reply[..]);

    // Local traffic is not ours: unchanged, handed on.
    let local = tcp(POD_N, EAST_SVC, 40000, 80, 0x02, b"");
    let (verdict, out) = f.run(Direction::Egress, &eth(&local));
    assert_eq!(verdict, NEXT);
    assert_eq!(out, eth(&local));

    f.assert_counters(&[(Counter::TxToGateway, 2), (Counter::PassIpv4, 1)]);
}

#[test]
fn the_outer_source_port_follows_the_flow() {
    if lacks_root(WHY_ROOT) {
        return;
    }
    let mut f = Fixture::new("node-flow-hash", ROLE_NODE);
    // Test frames carry no stack hash: the program hashes the inner packet itself. The same flow always leaves with the same port; flows that differ in
    // any one of source port, destination port, source or destination address spread out.
    let mut port_of_packet = |packet: &[u8]| {
        let (verdict, out) = f.run(Direction::Egress, &eth(packet));
        assert_eq!(verdict, REDIRECT);
        decode_geneve(&out).udp_src_port
    };
    // Two fragments of one datagram (the first carries the ports, the second does not) take
    // the same path.
    let datagram = without_df(&udp(POD_N, WEST_SVC, 40000, 53, &[7; 24], true));
    assert_eq!(
        port_of_packet(&as_fragment(&datagram, 0x2000)),
        port_of_packet(&as_fragment(&datagram, 0x0002)),
        "fragments of one datagram"
    );
    let mut port_of = |src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16| {
        port_of_packet(&udp(src, dst, sport, dport, b"x", true))
    };
    let base = port_of(POD_N, WEST_SVC, 40000, 53);
    assert_eq!(port_of(POD_N, WEST_SVC, 40000, 53), base, "same flow");
    let mut ports = std::collections::BTreeSet::from([base]);
    for sport in 40001..40017 {
        ports.insert(port_of(POD_N, WEST_SVC, sport, 53));
    }
    ports.insert(port_of(POD_N, WEST_SVC, 40000, 54));
    ports.insert(port_of([10, 244, 1, 6], WEST_SVC, 40000, 53));
    ports.insert(port_of(POD_N, [10, 98, 0, 11], 40000, 53));
    // 20 flows over 16384 ports: a collision or two may happen, a constant hash may not.
    assert!(
        ports.len() >= 18,
        "20 flows left with only {} ports",
        ports.len()
    );
    assert!(ports.iter().all(|p| *p >= 0xc000));
}

#[test]
fn with_routes_via_the_gateway_the_kernels_ethernet_header_is_kept() {
    if lacks_root(WHY_ROOT) {
        return;
    }
    let mut f = Fixture::new("node-routed", ROLE_NODE);
    {
        let mut maps = f.dp.maps().expect("maps");
        let mut config = maps.config.get(&0, 0).expect("config");
        config.flags = CONFIG_ROUTED_VIA_GATEWAY;
        maps.config.set(0, &config, 0).expect("config");
    }
    // For a remote prefix the kernel already addressed the frame to the gateway: sent on as is.
    let inner = tcp(POD_N, WEST_SVC, 40000, 80, 0x10, b"data");
    let (verdict, out) = f.run(Direction::Egress, &eth(&inner));
    assert_eq!(
        verdict, OK,
        "encapsulated and sent on without a route lookup"
    );
    assert_tunnel(&out, N, G);
    assert_eq!(decode_geneve(&out).inner.0, &inner[..]);
    assert_eq!(&out[..ETH_HLEN], &eth(&inner)[..ETH_HLEN]);

    // A reply to a remote gateway was routed by other routes: the program still finds the hop.
    let reply = udp(POD_N, W, 53, 33333, b"answer", true);
    let (verdict, out) = f.run(Direction::Egress, &eth(&reply));
    assert_eq!(verdict, REDIRECT);
    assert_tunnel(&out, N, G);
    f.assert_counters(&[(Counter::TxToGateway, 2)]);
}

#[test]
fn regular_node_decapsulates_only_from_its_gateway() {
    if lacks_root(WHY_ROOT) {
        return;
    }
    let mut f = Fixture::new("node-ingress", ROLE_NODE);
    let inner = tcp(WEST_SVC, POD_N, 80, 40000, 0x12, b"");
    let (verdict, out) = f.run(Direction::Ingress, &eth(&geneve(G, N, PORT, &inner)));
    assert_eq!(verdict, NEXT, "decapsulated traffic goes to the stack");
    assert_eq!(
        out,
        eth(&inner),
        "exactly the inner packet behind the Ethernet header"
    );

    // The same from a remote gateway (or anyone else) is not Strait's on a regular Node: never
    // decapsulated, left to the kernel as it came (a CNI may tunnel on the same port).
    for from in [W, STRANGER] {
        let frame = eth(&geneve(from, N, PORT, &inner));
        let (verdict, out) = f.run(Direction::Ingress, &frame);
        assert_eq!((verdict, out), (NEXT, frame), "untouched, to the stack");
    }
    // Nor is a datagram to the port that is not Geneve carrying IPv4, from anyone, the gateway
    // included (a CNI tunnelling between the same Nodes, or a test's socket pair).
    for from in [STRANGER, G] {
        let plain = eth(&udp(from, N, 40000, PORT, b"hello on 6081", true));
        let (verdict, out) = f.run(Direction::Ingress, &plain);
        assert_eq!((verdict, out), (NEXT, plain));
    }

    f.assert_counters(&[(Counter::RxFromGateway, 1), (Counter::PassForeignTunnel, 4)]);
}

#[test]
fn snat_keeps_a_flows_port_when_free_and_picks_another_on_a_clash() {
    if lacks_root(WHY_ROOT) {
        return;
    }
    let mut f = Fixture::new("gw-port-clash", ROLE_GATEWAY);
    let hairpin = |f: &mut Fixture, pod: [u8; 4], port: u16| {
        let request = tcp(pod, WEST_SVC, port, 80, 0x02, b"");
        let (verdict, out) = f.run(Direction::Ingress, &eth(&geneve(N, G, PORT, &request)));
        assert_eq!(verdict, REDIRECT);
        let e = decode_geneve(&out);
        e.inner.assert_checksums("SNATed");
        e.inner.src_port()
    };
    // A port in the SNAT range is kept.
    assert_eq!(hairpin(&mut f, POD_N, 40000), 40000);
    // Another Pod, same port, same destination: the reply key is taken, so another port.
    let other_pod = [10, 244, 1, 6];
    let second = hairpin(&mut f, other_pod, 40000);
    assert_ne!(second, 40000);
    assert!(second >= SNAT_PORT_MIN);
    // A port below the range is never used as is.
    assert!(hairpin(&mut f, POD_N, 1234) >= SNAT_PORT_MIN);

    // Each reply goes back to its own Pod.
    for (port, pod) in [(40000, POD_N), (second, other_pod)] {
        let reply = tcp(WEST_SVC, G, 80, port, 0x12, b"");
        let (verdict, out) = f.run(Direction::Ingress, &eth(&geneve(W, G, PORT, &reply)));
        assert_eq!(verdict, REDIRECT);
        let e = decode_geneve(&out);
        e.inner.assert_checksums("reverse-SNATed");
        assert_eq!((e.inner.dst(), e.inner.dst_port()), (pod, 40000));
    }
    assert_eq!(f.snat_entries(), (3, 3));
}

#[test]
fn a_flow_whose_reverse_entry_was_evicted_gets_it_back_with_its_next_packet() {
    if lacks_root(WHY_ROOT) {
        return;
    }
    let mut f = Fixture::new("gw-rev-evicted", ROLE_GATEWAY);
    let port = f.hairpin_tcp(POD_N, 3000, 0x02);
    // The LRU table evicts the reverse entry, not the forward one (a user-space delete here).
    f.evict(SNAT_REVERSE);
    let reply = tcp(WEST_SVC, G, 80, port, 0x12, b"");
    let (verdict, _) = f.run(Direction::Ingress, &eth(&geneve(W, G, PORT, &reply)));
    assert_eq!(verdict, SHOT, "no reverse entry: the reply is dropped");
    // The flow's next packet, in a later second of the coarse clock, puts it back.
    std::thread::sleep(std::time::Duration::from_millis(1200));
    assert_eq!(f.hairpin_tcp(POD_N, 3000, 0x10), port, "same port");
    assert_eq!(f.snat_entries(), (1, 1));
    let (verdict, out) = f.run(Direction::Ingress, &eth(&geneve(W, G, PORT, &reply)));
    assert_eq!(verdict, REDIRECT);
    let e = decode_geneve(&out);
    e.inner.assert_checksums("reply after the repair");
    assert_eq!((e.inner.dst(), e.inner.dst_port()), (POD_N, 3000));
    f.assert_counters(&[
        (Counter::HairpinSnat, 2),
        (Counter::DropNoSnatEntry, 1),
        (Counter::HairpinUnsnat, 1),
    ]);
}

#[test]
fn a_flow_whose_reply_key_went_to_another_flow_moves_to_a_new_port() {
    if lacks_root(WHY_ROOT) {
        return;
    }
    let mut f = Fixture::new("gw-rev-taken", ROLE_GATEWAY);
    let other_pod = [10, 244, 1, 6];
    assert_eq!(f.hairpin_tcp(POD_N, 40000, 0x02), 40000);
    // Its reverse entry is evicted, and another Pod's flow takes the freed reply key.
    f.evict(SNAT_REVERSE);
    assert_eq!(f.hairpin_tcp(other_pod, 40000, 0x02), 40000);
    // The first flow's next check finds the key taken: it moves to a new port rather than
    // have its replies delivered to the other Pod.
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let moved = f.hairpin_tcp(POD_N, 40000, 0x10);
    assert_ne!(moved, 40000);
    assert_eq!(f.snat_entries(), (2, 2));
    for (port, pod) in [(40000, other_pod), (moved, POD_N)] {
        let reply = tcp(WEST_SVC, G, 80, port, 0x10, b"");
        let (verdict, out) = f.run(Direction::Ingress, &eth(&geneve(W, G, PORT, &reply)));
        assert_eq!(verdict, REDIRECT);
        assert_eq!(decode_geneve(&out).inner.dst(), pod);
    }
}

#[test]
fn a_flow_whose_forward_entry_was_evicted_keeps_its_port() {
    if lacks_root(WHY_ROOT) {
        return;
    }
    let mut f = Fixture::new("gw-evicted", ROLE_GATEWAY);
    assert_eq!(f.hairpin_tcp(POD_N, 40000, 0x02), 40000);
    // The LRU table evicts the forward entry, not the reverse one (as a user-space delete here).
    f.evict(SNAT_FORWARD);
    assert_eq!(f.snat_entries(), (0, 1));
    // The next packet finds its own reply key held by itself: same port, no second flow.
    assert_eq!(
        f.hairpin_tcp(POD_N, 40000, 0x10),
        40000,
        "the port must not change mid-flow"
    );
    assert_eq!(f.snat_entries(), (1, 1));
    // Another Pod with the same port still gets another one.
    let other = tcp([10, 244, 1, 6], WEST_SVC, 40000, 80, 0x02, b"");
    let (_, out) = f.run(Direction::Ingress, &eth(&geneve(N, G, PORT, &other)));
    assert_ne!(decode_geneve(&out).inner.src_port(), 40000);
}

/// CLOCK_MONOTONIC_COARSE, the clock of `bpf_ktime_get_coarse_ns`.
fn coarse_now_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

#[test]
fn the_hairpin_takes_the_next_hop_from_the_cache_while_it_is_fresh() {
    if lacks_root(WHY_ROOT) {
        return;
    }
    let mut f = Fixture::new("gw-next-hop", ROLE_GATEWAY);
    // BPF_PROG_TEST_RUN runs the program on loopback (ifindex 1). A fresh entry for W there:
    let macs = [0x02, 0xaa, 0, 0, 0, 0x01, 0x02, 0xbb, 0, 0, 0, 0x02];
    let fresh = NextHop {
        macs,
        ifindex: 1,
        expires_ns: coarse_now_ns() + 60_000_000_000,
    };
    f.dp.maps()
        .expect("maps")
        .next_hops
        .insert(&W, &fresh, 0)
        .expect("next hop");
    let request = tcp(POD_N, WEST_SVC, 40000, 80, 0x10, b"data");
    let (verdict, out) = f.run(Direction::Ingress, &eth(&geneve(N, G, PORT, &request)));
    assert_eq!(verdict, REDIRECT);
    assert_tunnel(&out, G, W);
    assert_eq!(&out[..12], &macs, "Ethernet addresses from the cache");

    // Expired: the program asks the kernel (which has no route here: the kernel resolves the hop
    // on redirect) and the cached addresses are not used. (The hairpin cache keeps the flow's
    // hop until the coarse clock's second ends: wait for that.)
    next_coarse_second();
    let stale = NextHop {
        expires_ns: coarse_now_ns().saturating_sub(1_000_000_000),
        ..fresh
    };
    f.dp.maps()
        .expect("maps")
        .next_hops
        .insert(&W, &stale, 0)
        .expect("next hop");
    let (verdict, out) = f.run(Direction::Ingress, &eth(&geneve(N, G, PORT, &request)));
    assert_eq!(verdict, REDIRECT);
    assert_tunnel(&out, G, W);
    assert_eq!(&out[..12], &eth(&request)[..12], "no stale addresses");
    f.assert_counters(&[(Counter::HairpinSnat, 2)]);
}

/// Keeps this thread on the CPU it is on now.
fn pin_to_current_cpu() {
    // SAFETY: plain libc calls on a zeroed cpu_set_t of this thread.
    unsafe {
        let cpu = libc::sched_getcpu();
        assert!(cpu >= 0, "sched_getcpu");
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
            0,
            "sched_setaffinity"
        );
    }
}

/// Sleeps until just after the coarse clock (the programs' `now() >> 30`) starts a new second.
fn next_coarse_second() {
    let now = coarse_now_ns();
    let next = ((now >> 30) + 1) << 30;
    std::thread::sleep(std::time::Duration::from_nanos(next - now + 20_000_000));
}

#[test]
fn the_hairpin_reuses_a_flows_translation_and_next_hop_until_the_routes_change() {
    if lacks_root(WHY_ROOT) {
        return;
    }
    let mut f = Fixture::new("gw-hairpin-cache", ROLE_GATEWAY);
    let to_w = [0x02, 0xaa, 0, 0, 0, 0x01, 0x02, 0xbb, 0, 0, 0, 0x02];
    let to_n = [0x02, 0xaa, 0, 0, 0, 0x03, 0x02, 0xbb, 0, 0, 0, 0x02];
    let hop = |macs| NextHop {
        macs,
        ifindex: 1,
        expires_ns: coarse_now_ns() + 60_000_000_000,
    };
    {
        let mut maps = f.dp.maps().expect("maps");
        maps.next_hops.insert(&W, &hop(to_w), 0).expect("hop W");
        maps.next_hops.insert(&N, &hop(to_n), 0).expect("hop N");
    }
    // All of it on one CPU (the cache is per CPU; test runs go where the thread is) and within
    // one second of the coarse clock, as the cache's entries are.
    pin_to_current_cpu();
    next_coarse_second();
    let request = tcp(POD_N, WEST_SVC, 40000, 80, 0x10, b"data");
    let reply = tcp(WEST_SVC, G, 80, 40000, 0x10, b"ack");
    let (verdict, first) = f.run(Direction::Ingress, &eth(&geneve(N, G, PORT, &request)));
    assert_eq!(verdict, REDIRECT);
    let (verdict, back) = f.run(Direction::Ingress, &eth(&geneve(W, G, PORT, &reply)));
    assert_eq!(verdict, REDIRECT);
    assert_eq!(&back[..12], &to_n);
    let mut cached = f.hairpin_cache();
    cached.sort_by_key(|e| e.kind);
    let kinds: Vec<_> = cached
        .iter()
        .map(|e| (e.kind, e.sender, e.addr, e.port, e.dst, e.macs))
        .collect();
    assert_eq!(
        kinds,
        [
            (HAIRPIN_SNAT, N, G, 40000, W, to_w),
            (HAIRPIN_UNSNAT, W, POD_N, 40000, N, to_n)
        ]
    );

    // Without the tables' entries the flow's packets still go out as the first did: from the
    // cache (the full path would now hand the hop to the kernel).
    {
        let mut maps = f.dp.maps().expect("maps");
        maps.next_hops.remove(&W).expect("hop W");
        maps.next_hops.remove(&N).expect("hop N");
    }
    let (verdict, again) = f.run(Direction::Ingress, &eth(&geneve(N, G, PORT, &request)));
    assert_eq!((verdict, &again), (REDIRECT, &first));
    let e = decode_geneve(&again);
    e.inner.assert_checksums("SNATed from the cache");
    assert_eq!((e.inner.src(), e.inner.src_port()), (G, 40000));
    let (verdict, back_again) = f.run(Direction::Ingress, &eth(&geneve(W, G, PORT, &reply)));
    assert_eq!((verdict, &back_again), (REDIRECT, &back));
    decode_geneve(&back_again)
        .inner
        .assert_checksums("reverse-SNATed from the cache");

    // The agent removes the route and writes the config with the new generation: the flow's
    // next packet is decided afresh (nothing routes it to west any more).
    {
        let mut maps = f.dp.maps().expect("maps");
        maps.routes
            .remove(&aya::maps::lpm_trie::Key::new(16, [10, 98, 0, 0]))
            .expect("route");
        let mut config = maps.config.get(&0, 0).expect("config");
        config.route_generation = config.route_generation.wrapping_add(1);
        maps.config.set(0, &config, 0).expect("config");
    }
    let (verdict, _) = f.run(Direction::Ingress, &eth(&geneve(N, G, PORT, &request)));
    assert_eq!(verdict, SHOT);
    f.assert_counters(&[
        (Counter::HairpinSnat, 2),
        (Counter::HairpinUnsnat, 2),
        (Counter::DropNotRemote, 1),
    ]);
}

#[test]
fn the_hairpin_carries_geneve_options_and_counts_them_in_its_lengths() {
    if lacks_root(WHY_ROOT) {
        return;
    }
    let mut f = Fixture::new("gw-options", ROLE_GATEWAY);
    let request = tcp(POD_N, WEST_SVC, 40000, 80, 0x10, b"data");
    // One option: class 0x0102, type 0x80, one 4-byte word of data.
    let options = [0x01, 0x02, 0x80, 0x01, 0xde, 0xad, 0xbe, 0xef];
    let frame = eth(&geneve_with_options(N, G, PORT, &options, &request));
    let (verdict, out) = f.run(Direction::Ingress, &frame);
    assert_eq!(verdict, REDIRECT);
    let outer = Ip(&out[ETH_HLEN..]);
    outer.assert_checksums("outer");
    assert_eq!((outer.src(), outer.dst()), (G, W), "outer addresses");
    assert_eq!(
        outer.total_len(),
        out.len() - ETH_HLEN,
        "outer total length"
    );
    let udp = &out[ETH_HLEN + outer.hlen()..];
    assert_eq!(
        usize::from(u16::from_be_bytes([udp[4], udp[5]])),
        udp.len(),
        "outer UDP length counts the options"
    );
    assert_eq!(udp[8], 2, "Geneve option length kept");
    assert_eq!(&udp[16..24], &options, "options carried unchanged");
    let inner = Ip(&udp[24..]);
    inner.assert_checksums("SNATed inner packet");
    assert_eq!((inner.src(), inner.dst()), (G, WEST_SVC), "inner SNATed");
    f.assert_counters(&[(Counter::HairpinSnat, 1)]);
}

/// One request through the hairpin and its reply back, for a protocol.
fn hairpin_round_trip(f: &mut Fixture, request: &[u8], reply_for: impl Fn(u16) -> Vec<u8>) {
    let (verdict, out) = f.run(Direction::Ingress, &eth(&geneve(N, G, PORT, request)));
    assert_eq!(verdict, REDIRECT, "the hairpin sends the packet on");
    assert_tunnel(&out, G, W);
    let e = decode_geneve(&out);
    e.inner.assert_checksums("SNATed inner packet");
    let req = Ip(request);
    assert_eq!(e.inner.src(), G, "inner source SNATed to the gateway IP");
    assert_eq!(e.inner.dst(), req.dst(), "inner destination unchanged");
    assert_eq!(e.inner.0[8], req.0[8], "inner TTL unchanged");
    let port = if req.proto() == ICMP {
        assert_eq!(e.inner.l4()[0], 8, "still an echo request");
        e.inner.icmp_id()
    } else {
        assert_eq!(
            e.inner.dst_port(),
            req.dst_port(),
            "destination port unchanged"
        );
        e.inner.src_port()
    };
    assert!(
        port >= SNAT_PORT_MIN,
        "allocated port {port} outside the SNAT range"
    );
    assert_eq!(
        e.inner.l4().len(),
        req.l4().len(),
        "payload length unchanged"
    );

    // The reply from west comes back to the gateway IP and goes back to N, restored.
    let reply = reply_for(port);
    let (verdict, out) = f.run(Direction::Ingress, &eth(&geneve(W, G, PORT, &reply)));
    assert_eq!(verdict, REDIRECT, "the reply is tunnelled on to the Node");
    assert_tunnel(&out, G, N);
    let e = decode_geneve(&out);
    e.inner.assert_checksums("reverse-SNATed reply");
    assert_eq!(e.inner.src(), req.dst(), "reply source unchanged");
    assert_eq!(
        e.inner.dst(),
        req.src(),
        "reply destination restored to the Pod"
    );
    if req.proto() == ICMP {
        assert_eq!(e.inner.icmp_id(), req.icmp_id(), "echo id restored");
    } else {
        assert_eq!(e.inner.dst_port(), req.src_port(), "reply port restored");
    }
}

#[test]
fn gateway_hairpin_snats_tcp_udp_and_icmp_and_reverses_replies() {
    if lacks_root(WHY_ROOT) {
        return;
    }
    let mut f = Fixture::new("gw-hairpin", ROLE_GATEWAY);

    let syn = tcp(POD_N, WEST_SVC, 40000, 80, 0x02, b"");
    hairpin_round_trip(&mut f, &syn, |port| tcp(WEST_SVC, G, 80, port, 0x12, b""));
    assert_eq!(
        f.snat_entries(),
        (1, 1),
        "one flow: one forward and one reverse entry"
    );

    // A second packet of the same flow reuses the entry (same port, no new entries).
    let data = tcp(POD_N, WEST_SVC, 40000, 80, 0x18, b"GET / HTTP/1.1\r\n\r\n");
    let (_, first) = f.run(Direction::Ingress, &eth(&geneve(N, G, PORT, &syn)));
    let (_, second) = f.run(Direction::Ingress, &eth(&geneve(N, G, PORT, &data)));
    assert_eq!(
        decode_geneve(&first).inner.src_port(),
        decode_geneve(&second).inner.src_port(),
        "the same flow must keep its port"
    );
    assert_eq!(f.snat_entries(), (1, 1));

    let dns = udp(POD_N, WEST_SVC, 5353, 53, b"query", true);
    hairpin_round_trip(&mut f, &dns, |port| {
        udp(WEST_SVC, G, 53, port, b"answer!", true)
    });
    // A UDP checksum of 0 ("none") stays 0.
    let nocsum = udp(POD_N, WEST_SVC, 5354, 53, b"query", false);
    hairpin_round_trip(&mut f, &nocsum, |port| {
        udp(WEST_SVC, G, 53, port, b"a", false)
    });
    let (_, out) = f.run(Direction::Ingress, &eth(&geneve(N, G, PORT, &nocsum)));
    assert_eq!(&decode_geneve(&out).inner.l4()[6..8], &[0, 0]);

    let ping = icmp_echo(POD_N, WEST_SVC, 8, 0x4242, 1);
    hairpin_round_trip(&mut f, &ping, |id| icmp_echo(WEST_SVC, G, 0, id, 1));

    assert_eq!(f.snat_entries(), (4, 4));
    f.assert_counters(&[(Counter::HairpinSnat, 7), (Counter::HairpinUnsnat, 4)]);
}

#[test]
fn gateway_node_itself_snats_on_egress_and_takes_its_replies() {
    if lacks_root(WHY_ROOT) {
        return;
    }
    let mut f = Fixture::new("gw-local", ROLE_GATEWAY);
    // A Pod on the gateway Node opens a flow to west.
    let syn = tcp(POD_G, WEST_SVC, 41000, 80, 0x02, b"");
    let (verdict, out) = f.run(Direction::Egress, &eth(&syn));
    assert_eq!(verdict, REDIRECT);
    assert_tunnel(&out, G, W);
    let e = decode_geneve(&out);
    e.inner.assert_checksums("SNATed on egress");
    assert_eq!(e.inner.src(), G);
    let port = e.inner.src_port();

    // The encapsulated packet comes through egress again (bpf_redirect_neigh): left alone.
    let (verdict, again) = f.run(Direction::Egress, &out);
    assert_eq!(verdict, NEXT);
    assert_eq!(again, out);

    // West's reply: reverse SNAT, and since the flow is the gateway's own, decapsulated to the
    // stack.
    let reply = tcp(WEST_SVC, G, 80, port, 0x12, b"");
    let (verdict, out) = f.run(Direction::Ingress, &eth(&geneve(W, G, PORT, &reply)));
    assert_eq!(verdict, NEXT);
    let inner = Ip(&out[ETH_HLEN..]);
    inner.assert_checksums("reply to the gateway's own Pod");
    assert_eq!(inner.dst(), POD_G);
    assert_eq!(inner.dst_port(), 41000);
    assert_eq!(out.len(), ETH_HLEN + reply.len(), "outer headers removed");

    f.assert_counters(&[
        (Counter::TxSnatToRemote, 1),
        (Counter::PassOwnTunnel, 1),
        (Counter::RxUnsnatLocal, 1),
    ]);
}

#[test]
fn flows_opened_by_a_remote_cluster_reach_the_stack_and_replies_go_back() {
    if lacks_root(WHY_ROOT) {
        return;
    }
    let mut f = Fixture::new("gw-remote-open", ROLE_GATEWAY);
    // West's gateway (SNATed west Pod) opens a flow to an east ClusterIP.
    let syn = tcp(W, EAST_SVC, 42000, 80, 0x02, b"");
    let (verdict, out) = f.run(Direction::Ingress, &eth(&geneve(W, G, PORT, &syn)));
    assert_eq!(verdict, NEXT);
    assert_eq!(out, eth(&syn), "decapsulated, not translated");

    // The backend on N answers; N tunnels the reply to the gateway, which hands it to its stack
    // (where conntrack reverses kube-proxy's DNAT).
    let synack = tcp(POD_N, W, 80, 42000, 0x12, b"");
    let (verdict, out) = f.run(Direction::Ingress, &eth(&geneve(N, G, PORT, &synack)));
    assert_eq!(verdict, NEXT);
    assert_eq!(out, eth(&synack));

    // After the un-DNAT the stack routes it to west's gateway: encapsulated, no SNAT, and sent
    // on with the Ethernet header the stack wrote for that very address.
    let undnat = tcp(EAST_SVC, W, 80, 42000, 0x12, b"");
    let (verdict, out) = f.run(Direction::Egress, &eth(&undnat));
    assert_eq!(verdict, OK);
    assert_tunnel(&out, G, W);
    assert_eq!(&out[..ETH_HLEN], &eth(&undnat)[..ETH_HLEN]);
    assert_eq!(decode_geneve(&out).inner.0, &undnat[..]);

    assert_eq!(f.snat_entries(), (0, 0), "no SNAT for remote-opened flows");
    f.assert_counters(&[
        (Counter::RxFromRemote, 1),
        (Counter::RxReplyFromNode, 1),
        (Counter::TxReplyToRemote, 1),
    ]);
}

#[test]
fn a_remote_gateway_answers_only_for_its_own_clusters_flows_and_opens_flows_only_as_itself_into_this_cluster()
 {
    if lacks_root(WHY_ROOT) {
        return;
    }
    let mut f = Fixture::new("gw-spoof", ROLE_GATEWAY);
    // A second remote cluster, south, behind gateway S.
    const S: [u8; 4] = [198, 18, 3, 1];
    const SOUTH_NODE: [u8; 4] = [198, 18, 3, 7];
    {
        let mut maps = f.dp.maps().expect("maps");
        let south = RemoteRoute {
            cluster: 2,
            gateway_ip: S,
        };
        maps.routes
            .insert(
                &aya::maps::lpm_trie::Key::new(16, [10, 99, 0, 0]),
                &south,
                0,
            )
            .expect("route");
        let peer = Peer {
            kind: PEER_REMOTE_GATEWAY,
            cluster: 2,
        };
        maps.peers.insert(&S, &peer, 0).expect("peer S");
    }

    // N's Pod opens a flow to west. South's gateway, a known peer, answers for it, or sends an
    // error about it: neither reaches the Pod.
    let port = f.hairpin_tcp(POD_N, 40000, 0x02);
    let reply = tcp(WEST_SVC, G, 80, port, 0x12, b"");
    let (v, _) = f.run(Direction::Ingress, &eth(&geneve(S, G, PORT, &reply)));
    assert_eq!(v, SHOT, "a reply about west's flow from south's gateway");
    let sent = tcp(G, WEST_SVC, port, 80, 0x02, b"");
    let error = icmp_error(SOUTH_NODE, G, 3, 3, &sent);
    let (v, _) = f.run(Direction::Ingress, &eth(&geneve(S, G, PORT, &error)));
    assert_eq!(v, SHOT, "an error about west's flow from south's gateway");
    // West's own answer still goes through.
    let (v, out) = f.run(Direction::Ingress, &eth(&geneve(W, G, PORT, &reply)));
    assert_eq!(v, REDIRECT, "west answers for its own flow");
    assert_eq!(decode_geneve(&out).inner.dst(), POD_N);

    // A flow a remote cluster opens carries its gateway's address: not another cluster's, not
    // one of this cluster's, not a remote Service's.
    for forged in [S, POD_G, POD_N, WEST_SVC] {
        let syn = tcp(forged, EAST_SVC, 42000, 80, 0x02, b"");
        let (v, _) = f.run(Direction::Ingress, &eth(&geneve(W, G, PORT, &syn)));
        assert_eq!(v, SHOT, "west's gateway sending as {forged:?}");
    }
    let syn = tcp(W, EAST_SVC, 42000, 80, 0x02, b"");
    let (v, out) = f.run(Direction::Ingress, &eth(&geneve(W, G, PORT, &syn)));
    assert_eq!((v, out), (NEXT, eth(&syn)), "west's gateway as itself");
    // ... and only to this cluster: not through this gateway on to south (where it would
    // arrive SNATed as this gateway's), not back to west, not to a Node or a gateway.
    for elsewhere in [[10, 99, 0, 5], WEST_SVC, N, S] {
        let syn = tcp(W, elsewhere, 42000, 80, 0x02, b"");
        let (v, _) = f.run(Direction::Ingress, &eth(&geneve(W, G, PORT, &syn)));
        assert_eq!(v, SHOT, "west's gateway opening a flow to {elsewhere:?}");
    }

    f.assert_counters(&[
        (Counter::HairpinSnat, 1),
        (Counter::HairpinUnsnat, 1),
        (Counter::RxFromRemote, 1),
        (Counter::DropSpoofedSource, 6),
        (Counter::DropNotLocal, 4),
    ]);
}

/// The receiving gateway is an allow-list: a flow a remote cluster opens reaches an exported
/// Service's ClusterIP on its ports and its endpoints on theirs, Pods only with Pod-to-Pod
/// connectivity (their CIDR in `mc_exposed_prefixes`), and nothing else of this cluster: not the
/// API server's `kubernetes` Service, not an unexported Service or another port, not a host the
/// gateway Node could route to. Replies to flows this cluster opened are not asked.
#[test]
fn a_remote_cluster_opens_flows_only_to_what_this_cluster_exported() {
    if lacks_root(WHY_ROOT) {
        return;
    }
    let mut f = Fixture::new("gw-exposed", ROLE_GATEWAY);
    const KUBERNETES: [u8; 4] = [10, 97, 0, 1];
    const UNEXPORTED: [u8; 4] = [10, 97, 0, 30];
    const ELSEWHERE: [u8; 4] = [203, 0, 113, 5];
    let from_west = |dst: [u8; 4], proto: &str, port: u16| -> Vec<u8> {
        let inner = match proto {
            "tcp" => tcp(W, dst, 42000, port, 0x02, b""),
            "udp" => udp(W, dst, 42000, port, b"q", true),
            _ => icmp_echo(W, dst, 8, 7, 1),
        };
        eth(&geneve(W, G, PORT, &inner))
    };
    let verdict = |f: &mut Fixture, frame: &[u8]| f.run(Direction::Ingress, frame).0;

    // The exported Service (TCP 80, the fixture's) and, once exported, its endpoint.
    assert_eq!(verdict(&mut f, &from_west(EAST_SVC, "tcp", 80)), NEXT);
    let mut exports = east_exports();
    exports[0].endpoints = vec![(POD_N.into(), 6, 8080)];
    f.expose(&exports);
    assert_eq!(verdict(&mut f, &from_west(POD_N, "tcp", 8080)), NEXT);
    // A later fragment of a flow to it (no ports to check), and ICMP to it.
    let later = as_fragment(&tcp(W, EAST_SVC, 42000, 80, 0x10, &[0; 64]), 0x0004);
    assert_eq!(verdict(&mut f, &eth(&geneve(W, G, PORT, &later))), NEXT);
    assert_eq!(verdict(&mut f, &from_west(EAST_SVC, "icmp", 0)), NEXT);

    // Nothing else.
    let refused = [
        (KUBERNETES, "tcp", 443),
        (UNEXPORTED, "tcp", 80),
        (EAST_SVC, "tcp", 443),
        (EAST_SVC, "udp", 80),
        (POD_N, "tcp", 22),
        (POD_G, "tcp", 8080),
        (POD_G, "icmp", 0),
        (ELSEWHERE, "tcp", 80),
    ];
    for (dst, proto, port) in refused {
        let frame = from_west(dst, proto, port);
        assert_eq!(verdict(&mut f, &frame), SHOT, "{dst:?} {proto} {port}");
    }
    let later = as_fragment(&tcp(W, UNEXPORTED, 42000, 80, 0x10, &[0; 64]), 0x0004);
    assert_eq!(verdict(&mut f, &eth(&geneve(W, G, PORT, &later))), SHOT);

    // Pod-to-Pod connectivity: every address of the local Pod CIDR, any port.
    {
        let mut maps = f.dp.maps().expect("maps");
        let pods = Exposed {
            kind: EXPOSED_POD_CIDR,
        };
        let key = aya::maps::lpm_trie::Key::new(16, [10, 244, 0, 0]);
        maps.exposed_prefixes
            .insert(&key, &pods, 0)
            .expect("prefix");
    }
    assert_eq!(verdict(&mut f, &from_west(POD_G, "tcp", 8080)), NEXT);
    assert_eq!(verdict(&mut f, &from_west(POD_G, "icmp", 0)), NEXT);
    for (dst, proto, port) in [(KUBERNETES, "tcp", 443), (ELSEWHERE, "tcp", 80)] {
        let frame = from_west(dst, proto, port);
        assert_eq!(verdict(&mut f, &frame), SHOT, "{dst:?} {proto} {port}");
    }

    // A flow this cluster's Pod opened gets its answer as ever.
    let port = f.hairpin_tcp(POD_N, 40000, 0x02);
    let reply = tcp(WEST_SVC, G, 80, port, 0x12, b"");
    let (v, _) = f.run(Direction::Ingress, &eth(&geneve(W, G, PORT, &reply)));
    assert_eq!(v, REDIRECT);

    f.assert_counters(&[
        (Counter::RxFromRemote, 6),
        (Counter::DropNotExported, 11),
        (Counter::HairpinSnat, 1),
        (Counter::HairpinUnsnat, 1),
    ]);
}

/// Checks an ICMP error after translation: valid checksums (the error's, and the quoted IPv4
/// header's), the error's addresses, and a quote equal to `want` byte for byte: the packet as
/// the error's receiver knows it.
fn assert_icmp_error(error: Ip, src: [u8; 4], dst: [u8; 4], want: &[u8]) {
    error.assert_checksums("translated ICMP error");
    assert_eq!((error.src(), error.dst()), (src, dst), "error's addresses");
    let quoted = &error.l4()[8..];
    assert_eq!(
        support::frames::csum(&quoted[..20], 0),
        0,
        "quoted IPv4 header checksum"
    );
    assert_eq!(quoted, want, "the quoted packet, translated back");
}

#[test]
fn icmp_errors_about_translated_flows_are_translated_with_them() {
    if lacks_root(WHY_ROOT) {
        return;
    }
    let mut f = Fixture::new("gw-icmp-error", ROLE_GATEWAY);
    const WEST_NODE: [u8; 4] = [198, 18, 2, 7];

    // Entering, through the hairpin: errors from west about N's UDP (with and without a
    // checksum), TCP (quoted whole, and to the 8 bytes an error must carry, the TCP checksum not
    // among them; ports below the SNAT range, so the port changes too) and echo request go back
    // to N, as errors about the packets N's Pod sent.
    let dns = udp(POD_N, WEST_SVC, 5353, 53, b"query", true);
    let plain = udp(POD_N, WEST_SVC, 5354, 53, b"no checksum", false);
    let syn = tcp(POD_N, WEST_SVC, 3000, 80, 0x02, b"");
    let syn2 = tcp(POD_N, WEST_SVC, 3001, 80, 0x02, b"");
    let ping = icmp_echo(POD_N, WEST_SVC, 8, 0x4242, 1);
    for (request, quote_len, kind, code) in [
        (&dns, dns.len(), 3, 3),
        (&plain, plain.len(), 3, 3),
        (&syn, syn.len(), 3, 1),
        (&syn2, 28, 3, 1),
        (&ping, ping.len(), 11, 0),
    ] {
        let (v, out) = f.run(Direction::Ingress, &eth(&geneve(N, G, PORT, request)));
        assert_eq!(v, REDIRECT);
        let sent = decode_geneve(&out).inner.0.to_vec();
        if request[9] == TCP {
            assert_ne!(
                Ip(&sent).src_port(),
                Ip(request).src_port(),
                "port translated"
            );
        }
        let error = icmp_error(WEST_NODE, G, kind, code, &sent[..quote_len]);
        let (v, out) = f.run(Direction::Ingress, &eth(&geneve(W, G, PORT, &error)));
        assert_eq!(v, REDIRECT, "the error is tunnelled on to N");
        assert_tunnel(&out, G, N);
        let e = decode_geneve(&out);
        assert_icmp_error(e.inner, WEST_NODE, POD_N, &request[..quote_len]);
        assert_eq!(&e.inner.l4()[..2], &[kind, code]);
    }

    // Entering, for the gateway Node's own Pod: decapsulated to the stack.
    let (v, out) = f.run(Direction::Egress, &eth(&dns_from(POD_G)));
    assert_eq!(v, REDIRECT);
    let sent = decode_geneve(&out).inner.0.to_vec();
    let error = icmp_error(WEST_SVC, G, 3, 3, &sent);
    let (v, out) = f.run(Direction::Ingress, &eth(&geneve(W, G, PORT, &error)));
    assert_eq!(v, NEXT);
    assert_icmp_error(Ip(&out[ETH_HLEN..]), WEST_SVC, POD_G, &dns_from(POD_G));

    // Leaving: the Pod on the gateway Node got west's reply (un-SNATed) and answers it with an
    // error, which leaves from the gateway address and quotes the reply as west sent it.
    let port = Ip(&sent).src_port();
    let reply = udp(WEST_SVC, G, 53, port, b"late answer", true);
    let (v, out) = f.run(Direction::Ingress, &eth(&geneve(W, G, PORT, &reply)));
    assert_eq!(v, NEXT);
    let got = out[ETH_HLEN..].to_vec();
    let error = icmp_error(POD_G, WEST_SVC, 3, 3, &got);
    let (v, out) = f.run(Direction::Egress, &eth(&error));
    assert_eq!(v, REDIRECT);
    assert_tunnel(&out, G, W);
    assert_icmp_error(decode_geneve(&out).inner, G, WEST_SVC, &reply);

    // Leaving through the hairpin: N's Pod answers a reply of its flow with an error.
    let (_, out) = f.run(Direction::Ingress, &eth(&geneve(N, G, PORT, &dns)));
    let port = decode_geneve(&out).inner.src_port();
    let reply = udp(WEST_SVC, G, 53, port, b"late", true);
    let (v, out) = f.run(Direction::Ingress, &eth(&geneve(W, G, PORT, &reply)));
    assert_eq!(v, REDIRECT);
    let got = decode_geneve(&out).inner.0.to_vec();
    let error = icmp_error(POD_N, WEST_SVC, 3, 3, &got[..28]);
    let (v, out) = f.run(Direction::Ingress, &eth(&geneve(N, G, PORT, &error)));
    assert_eq!(v, REDIRECT);
    assert_tunnel(&out, G, W);
    assert_icmp_error(decode_geneve(&out).inner, G, WEST_SVC, &reply[..28]);

    // Errors about no flow of ours, or about a packet the gateway address did not send, or
    // too short to quote a header, are dropped and counted.
    let unknown = tcp(G, WEST_SVC, 50000, 80, 0x02, b"");
    let not_ours = tcp(POD_N, WEST_SVC, 40000, 80, 0x02, b"");
    for quoted in [&unknown[..28], &not_ours[..28]] {
        let error = icmp_error(WEST_NODE, G, 3, 3, quoted);
        let (v, _) = f.run(Direction::Ingress, &eth(&geneve(W, G, PORT, &error)));
        assert_eq!(v, SHOT);
    }
    // Leaving, a quote shaped like N's SNATed request (it matches the flow's reverse entry)
    // must not put N's Pod address on the wire.
    let forged = icmp_error(
        POD_G,
        WEST_SVC,
        3,
        3,
        &udp(G, WEST_SVC, port, 53, b"", true)[..28],
    );
    let (v, _) = f.run(Direction::Egress, &eth(&forged));
    assert_eq!(v, SHOT, "an error matching a reverse entry is refused");
    let short = icmp_error(WEST_NODE, G, 3, 3, &sent[..12]);
    let (v, _) = f.run(Direction::Ingress, &eth(&geneve(W, G, PORT, &short)));
    assert_eq!(v, SHOT);
    // An error whose own length ends inside the quoted ports, with the rest of a valid quote
    // after it (as padding would be): the quote is cut where the error ends, so it is short.
    let mut cut = icmp_error(WEST_NODE, G, 3, 3, &sent[..28]);
    cut[2..4].copy_from_slice(&(20u16 + 8 + 20 + 2).to_be_bytes());
    set_ipv4_checksum(&mut cut);
    let (v, _) = f.run(Direction::Ingress, &eth(&geneve(W, G, PORT, &cut)));
    assert_eq!(v, SHOT, "bytes past the error's length are not its quote");

    f.assert_counters(&[
        (Counter::HairpinSnat, 7),
        (Counter::HairpinUnsnat, 6),
        (Counter::IcmpErrorTranslated, 8),
        (Counter::TxSnatToRemote, 2),
        (Counter::RxUnsnatLocal, 2),
        (Counter::DropNoSnatEntry, 3),
        (Counter::DropTruncated, 2),
    ]);
}

/// Recomputes the IPv4 header checksum of `packet` (a 20-byte header) after an edit.
fn set_ipv4_checksum(packet: &mut [u8]) {
    packet[10..12].fill(0);
    let c = support::frames::csum(&packet[..20], 0);
    packet[10..12].copy_from_slice(&c.to_be_bytes());
}

/// A DNS query from `pod` to west.
fn dns_from(pod: [u8; 4]) -> Vec<u8> {
    udp(pod, WEST_SVC, 5400, 53, b"query", true)
}

#[test]
fn bad_tunnel_packets_are_dropped_and_counted_and_others_tunnels_left_alone() {
    if lacks_root(WHY_ROOT) {
        return;
    }
    let mut f = Fixture::new("gw-bad", ROLE_GATEWAY);
    let inner = tcp(POD_N, WEST_SVC, 40000, 80, 0x02, b"");
    let good = geneve(N, G, PORT, &inner);

    // Strait's Geneve from an unknown outer source: never decapsulated nor forwarded, and not
    // left to the stack either (nothing there takes it): dropped and counted.
    let stranger = eth(&geneve(STRANGER, G, PORT, &inner));
    let (v, _) = f.run(Direction::Ingress, &stranger);
    assert_eq!(v, SHOT, "Strait's Geneve from a stranger");

    // Truncated inside the Geneve header (the outer lengths still claim the full packet).
    let frame = eth(&good);
    let (v, _) = f.run(Direction::Ingress, &frame[..ETH_HLEN + 20 + 8 + 4]);
    assert_eq!(v, SHOT);

    // Geneve version 1; the OAM bit (Strait's probes, but only between gateways: from a local
    // Node it is not Strait's); a payload that is not IPv4 (a CNI's Ethernet): not Strait's,
    // even from a peer: to the kernel untouched, never decapsulated.
    for (offset, value) in [(28, 0x40u8), (29, 0x80), (30, 0x65)] {
        let mut other = good.clone();
        other[offset] = value;
        let (v, out) = f.run(Direction::Ingress, &eth(&other));
        assert_eq!(
            (v, out),
            (NEXT, eth(&other)),
            "byte {offset} = {value:#x}: not Strait's"
        );
    }
    // A broken inner header in Strait's own Geneve is refused.
    let mut bad_inner = good.clone();
    bad_inner[36] = 0x43; // inner IHL 3
    let (v, _) = f.run(Direction::Ingress, &eth(&bad_inner));
    assert_eq!(v, SHOT);
    // An inner packet longer than the tunnel carries: cut short, never forwarded.
    let mut long = inner.clone();
    long[2..4].copy_from_slice(&(inner.len() as u16 + 100).to_be_bytes());
    set_ipv4_checksum(&mut long);
    let (v, _) = f.run(Direction::Ingress, &eth(&geneve(N, G, PORT, &long)));
    assert_eq!(v, SHOT, "an inner packet past the tunnel's end");

    // A reply to the gateway IP that no flow of ours expects.
    let stray = tcp(WEST_SVC, G, 80, 50000, 0x12, b"");
    let (v, _) = f.run(Direction::Ingress, &eth(&geneve(W, G, PORT, &stray)));
    assert_eq!(v, SHOT);

    // A local Node tunnelling something that is not for a remote cluster.
    let local = tcp(POD_N, EAST_SVC, 40000, 80, 0x02, b"");
    let (v, _) = f.run(Direction::Ingress, &eth(&geneve(N, G, PORT, &local)));
    assert_eq!(v, SHOT);

    // SCTP cannot be SNATed; neither can a non-first fragment.
    let sctp = ipv4(POD_N, WEST_SVC, 132, &[0u8; 16]);
    let (v, _) = f.run(Direction::Ingress, &eth(&geneve(N, G, PORT, &sctp)));
    assert_eq!(v, SHOT);
    // Offset 128 bytes.
    let fragment = as_fragment(&udp(POD_N, WEST_SVC, 5353, 53, b"tail", false), 0x10);
    let (v, _) = f.run(Direction::Ingress, &eth(&geneve(N, G, PORT, &fragment)));
    assert_eq!(v, SHOT);

    // Nothing of the above was forwarded, and no SNAT state was created by it.
    assert_eq!(f.snat_entries(), (0, 0));
    f.assert_counters(&[
        (Counter::PassForeignTunnel, 3),
        (Counter::DropUnknownPeer, 1),
        (Counter::DropTruncated, 2),
        (Counter::DropBadGeneve, 1),
        (Counter::DropNoSnatEntry, 1),
        (Counter::DropNotRemote, 1),
        (Counter::DropUnsupportedProto, 1),
        (Counter::DropFragment, 1),
    ]);

    // Geneve to another port is not ours: handed on untouched.
    let other = geneve(N, G, 6082, &inner);
    let (v, out) = f.run(Direction::Ingress, &eth(&other));
    assert_eq!((v, out), (NEXT, eth(&other)));
    assert_eq!(f.packets(Counter::PassIpv4), 1);
    let _ = (TCP, UDP);
}

#[test]
fn syn_mss_is_clamped_to_the_tunnel_and_oversize_df_packets_get_frag_needed() {
    if lacks_root(WHY_ROOT) {
        return;
    }
    let mut f = Fixture::new("node-mtu", ROLE_NODE);
    // Uplink MTU 1500: inner packets up to 1464 bytes, so MSS up to 1424.

    // A SYN announcing 1460 leaves with 1424 and a checksum that still adds up.
    let syn = tcp_syn_mss(POD_N, WEST_SVC, 40000, 80, false, 1460);
    let (verdict, out) = f.run(Direction::Egress, &eth(&syn));
    assert_eq!(verdict, REDIRECT);
    let e = decode_geneve(&out);
    e.inner.assert_checksums("clamped SYN");
    assert_eq!(tcp_mss(e.inner.0), Some(1424));
    // A SYN-ACK too (a reply to a remote-opened flow); a small MSS is left alone.
    let synack = tcp_syn_mss(POD_N, W, 80, 42000, true, 8960);
    let (_, out) = f.run(Direction::Egress, &eth(&synack));
    assert_eq!(tcp_mss(decode_geneve(&out).inner.0), Some(1424));
    let small = tcp_syn_mss(POD_N, WEST_SVC, 40001, 80, false, 1200);
    let (_, out) = f.run(Direction::Egress, &eth(&small));
    assert_eq!(
        decode_geneve(&out).inner.0,
        &small[..],
        "a small MSS stays as it is"
    );
    // A SYN without MSS whose last option (window scale, 3 bytes) ends the segment: nothing to
    // clamp, and nothing read past the header.
    let ts = [8, 10, 0, 0, 0, 1, 0, 0, 0, 0];
    let no_mss = [&[1, 1][..], &ts, &[1, 3, 3, 7]].concat();
    let syn = tcp_syn_options(POD_N, WEST_SVC, 40002, 80, &no_mss, &[]);
    let (verdict, out) = f.run(Direction::Egress, &eth(&syn));
    assert_eq!(verdict, REDIRECT, "a SYN without MSS goes through");
    assert_eq!(decode_geneve(&out).inner.0, &syn[..]);
    // An MSS option that runs past the header's end is malformed: the bytes after the header
    // (here data, 1460 in the shape of an MSS value) are not rewritten.
    let syn = tcp_syn_options(
        POD_N,
        WEST_SVC,
        40003,
        80,
        &[1, 1, 1, 1, 1, 1, 2, 4],
        &[5, 180],
    );
    let (verdict, out) = f.run(Direction::Egress, &eth(&syn));
    assert_eq!(verdict, REDIRECT);
    assert_eq!(
        decode_geneve(&out).inner.0,
        &syn[..],
        "an option crossing the header's end is left alone"
    );

    // A 1465-byte DF datagram does not fit: ICMP fragmentation-needed goes back to the Pod.
    let big = udp(POD_N, WEST_SVC, 5353, 53, &[7u8; 1465 - 28], true);
    let (verdict, out) = f.run(Direction::Egress, &eth(&big));
    assert_eq!(
        verdict, REDIRECT,
        "the ICMP error is redirected to the uplink's ingress"
    );
    assert_eq!(
        &out[..6],
        &eth(&big)[6..12],
        "sent back to where the packet came from"
    );
    let icmp = Ip(&out[ETH_HLEN..]);
    icmp.assert_checksums("fragmentation-needed");
    assert_eq!(
        (icmp.src(), icmp.dst(), icmp.proto()),
        (WEST_SVC, POD_N, ICMP),
        "from the unreachable destination (the Node's own address would be a martian) to the Pod"
    );
    let l4 = icmp.l4();
    assert_eq!(
        (l4[0], l4[1]),
        (3, 4),
        "destination unreachable, fragmentation needed"
    );
    assert_eq!(
        u16::from_be_bytes([l4[6], l4[7]]),
        1464,
        "the tunnel's inner MTU"
    );
    assert_eq!(
        &l4[8..36],
        &big[..28],
        "the original header and 8 bytes of its data"
    );
    // Exactly at the limit it fits.
    let fits = udp(POD_N, WEST_SVC, 5353, 53, &[7u8; 1464 - 28], true);
    let (verdict, out) = f.run(Direction::Egress, &eth(&fits));
    assert_eq!(verdict, REDIRECT);
    assert_eq!(decode_geneve(&out).inner.0, &fits[..]);
    // Too big without DF: the tunnel cannot fragment it; dropped and counted.
    let (verdict, _) = f.run(Direction::Egress, &eth(&without_df(&big)));
    assert_eq!(verdict, SHOT);

    f.assert_counters(&[
        (Counter::TxToGateway, 6),
        (Counter::TcpMssClamped, 2),
        (Counter::TxFragNeeded, 1),
        (Counter::DropTooBig, 1),
    ]);
    let _ = TCP;
}
