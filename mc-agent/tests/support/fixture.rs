//! The dataplane in a known state for `BPF_PROG_TEST_RUN`: east's gateway G (its internalIP is its
//! gatewayIP) or east's regular Node N, one remote cluster (west, gateway W, prefix 10.98/16), the
//! peers a gateway knows. Shared by the packet-path tests and the fuzz test.

use mc_agent::{
    bpffs::PinLayout,
    dataplane::{Dataplane, Direction},
    exposure::{ExportedService, entries},
};
use mc_common::{
    Counter,
    dataplane::{
        LocalConfig, PEER_LOCAL_NODE, PEER_REMOTE_GATEWAY, Peer, ROLE_GATEWAY, RemoteRoute,
        SNAT_FORWARD, SNAT_REVERSE,
    },
};

use super::{
    Bpffs,
    frames::{decode_geneve, eth, geneve, tcp},
    require_root,
};

pub const NEXT: u32 = u32::MAX; // TCX_NEXT
pub const OK: u32 = 0; // TC_ACT_OK
pub const SHOT: u32 = 2; // TC_ACT_SHOT
pub const REDIRECT: u32 = 7; // TC_ACT_REDIRECT (bpf_redirect_neigh)
pub const PORT: u16 = 6081;

// East: gateway G (internal = gateway IP), regular Node N. West: gateway W.
pub const G: [u8; 4] = [198, 18, 1, 1];
pub const N: [u8; 4] = [198, 18, 1, 2];
pub const W: [u8; 4] = [198, 18, 2, 1];
pub const STRANGER: [u8; 4] = [198, 18, 9, 9];
pub const POD_N: [u8; 4] = [10, 244, 1, 5];
pub const POD_G: [u8; 4] = [10, 244, 0, 7];
pub const WEST_SVC: [u8; 4] = [10, 98, 0, 10];
pub const EAST_SVC: [u8; 4] = [10, 97, 0, 20];

/// What east exported: a Service at EAST_SVC, TCP port 80, with no endpoints.
pub fn east_exports() -> Vec<ExportedService> {
    vec![ExportedService {
        namespace: "demo".into(),
        name: "web".into(),
        cluster_ips: vec![EAST_SVC.into()],
        ports: vec![(6, 80)],
        endpoints: vec![],
    }]
}

pub struct Fixture {
    _fs: Bpffs,
    pub dp: Dataplane,
}

impl Fixture {
    pub fn new(name: &str, role: u32) -> Self {
        require_root();
        let fs = Bpffs::new(name);
        let mut dp = Dataplane::load(PinLayout::new(fs.pin_root())).expect("loading the object");
        {
            let mut maps = dp.maps().expect("maps");
            let node_ip = if role == ROLE_GATEWAY { G } else { N };
            let config = LocalConfig {
                role,
                node_ip,
                gateway_internal_ip: G,
                gateway_ip: G,
                tunnel_port: PORT,
                mtu: 1500,
                ..Default::default()
            };
            maps.config.set(0, &config, 0).expect("config");
            let west = RemoteRoute {
                cluster: 1,
                gateway_ip: W,
            };
            maps.routes
                .insert(&aya::maps::lpm_trie::Key::new(16, [10, 98, 0, 0]), &west, 0)
                .expect("route");
            maps.peers
                .insert(
                    &W,
                    &Peer {
                        kind: PEER_REMOTE_GATEWAY,
                        cluster: 1,
                    },
                    0,
                )
                .expect("peer W");
            maps.peers
                .insert(
                    &N,
                    &Peer {
                        kind: PEER_LOCAL_NODE,
                        cluster: 0,
                    },
                    0,
                )
                .expect("peer N");
        }
        let mut f = Self { _fs: fs, dp };
        f.expose(&east_exports());
        f
    }

    /// Makes the exposure map hold what `exported` gives, as the agent would write it.
    pub fn expose(&mut self, exported: &[ExportedService]) {
        let mut maps = self.dp.maps().expect("maps");
        let keys: Vec<_> = maps.exposed.keys().map(|k| k.expect("key")).collect();
        for k in keys {
            maps.exposed.remove(&k).expect("remove");
        }
        for (k, v) in entries(exported, 1000).0 {
            maps.exposed.insert(&k, &v, 0).expect("exposed");
        }
    }

    pub fn run(&mut self, direction: Direction, frame: &[u8]) -> (u32, Vec<u8>) {
        super::test_run(&mut self.dp, direction, frame)
    }

    pub fn packets(&self, counter: Counter) -> u64 {
        super::packets(&self.dp, counter)
    }

    /// (forward, reverse) SNAT entries.
    pub fn snat_entries(&mut self) -> (usize, usize) {
        let maps = self.dp.maps().expect("maps");
        let mut forward = 0;
        let mut reverse = 0;
        for item in maps.snat.iter() {
            let (_, v) = item.expect("snat entry");
            match v.flags {
                SNAT_FORWARD => forward += 1,
                SNAT_REVERSE => reverse += 1,
                other => panic!("SNAT entry with flags {other}"),
            }
        }
        (forward, reverse)
    }

    /// A TCP packet from `pod`:`sport` to west, through the hairpin: the source port it leaves
    /// with.
    pub fn hairpin_tcp(&mut self, pod: [u8; 4], sport: u16, flags: u8) -> u16 {
        let packet = tcp(pod, WEST_SVC, sport, 80, flags, b"");
        let (verdict, out) = self.run(Direction::Ingress, &eth(&geneve(N, G, PORT, &packet)));
        assert_eq!(verdict, REDIRECT);
        decode_geneve(&out).inner.src_port()
    }

    /// Every CPU's completed hairpin-cache entries.
    pub fn hairpin_cache(&self) -> Vec<mc_common::dataplane::HairpinCacheEntry> {
        super::hairpin_cache(&self._fs.pin_root())
    }

    /// Removes the one SNAT entry with `flags`, as the LRU table's eviction would.
    pub fn evict(&mut self, flags: u32) {
        let mut maps = self.dp.maps().expect("maps");
        let keys: Vec<_> = maps
            .snat
            .iter()
            .map(|item| item.expect("snat entry"))
            .filter(|(_, v)| v.flags == flags)
            .map(|(k, _)| k)
            .collect();
        assert_eq!(keys.len(), 1);
        maps.snat.remove(&keys[0]).expect("remove");
    }

    /// Asserts that exactly these counters are non-zero, with these packet counts.
    pub fn assert_counters(&self, expected: &[(Counter, u64)]) {
        for &counter in Counter::ALL {
            let want = expected
                .iter()
                .find(|(c, _)| *c == counter)
                .map_or(0, |(_, n)| *n);
            assert_eq!(self.packets(counter), want, "counter {}", counter.name());
        }
    }
}
