//! Tunnel health (docs/design.md §4d): the active gateway's agent probes every remote gateway
//! through the tunnel once a second and judges each path from the answers the programs take
//! into `mc_probes`: up or down, round trip, loss. Probes go the way traffic goes (the tunnel
//! port, inside WireGuard with encryption on) and are answered by the remote gateway's
//! programs, not its agent. The agent exports the figures as metrics and writes a `TunnelUp`
//! condition on each remote cluster's ClusterInfoImport when the verdict changes.

use std::{
    collections::{BTreeMap, VecDeque},
    net::{Ipv4Addr, SocketAddrV4, UdpSocket},
    time::Duration,
};

use kube::api::{Api, Patch, PatchParams};
use mc_common::dataplane::{PROBE_MAGIC, PROBE_PORT, PROBE_REQUEST, PeerStats, Probe, ProbeState};

/// How often each remote gateway is probed.
pub const INTERVAL: Duration = Duration::from_secs(1);
/// A path with no answer for this long is down (an answer comes within a round trip of each
/// probe): three probes in a row lost. With the 1 s rounds, a blocked path is judged down
/// within 4 s.
pub const DOWN_AFTER: Duration = Duration::from_secs(3);
/// Probes the loss is reckoned over.
pub const LOSS_WINDOW: usize = 10;

/// What the agent knows of a remote gateway's path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Not probed long enough to say.
    Unknown,
    Up,
    Down,
}

/// A remote gateway to probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub cluster_id: String,
    /// Its ClusterInfoImport's name (where the condition goes).
    pub info_name: String,
    pub gateway_ip: Ipv4Addr,
    /// The agent's index of the cluster (its slot in `mc_peer_stats`).
    pub index: u32,
}

/// One remote gateway's path, as the agent sees it after a round of probes.
#[derive(Clone, Debug, PartialEq)]
pub struct Health {
    pub cluster_id: String,
    pub info_name: String,
    pub gateway_ip: Ipv4Addr,
    pub verdict: Verdict,
    /// The last answer's round trip.
    pub rtt: Option<Duration>,
    /// Of the last [`LOSS_WINDOW`] probes (or fewer, early on), the share not answered.
    pub loss: f64,
    pub sent: u64,
    pub answered: u64,
    /// Since the last answer (`None`: none yet).
    pub silent_for: Option<Duration>,
}

/// The running judgement of one path: fed what the programs recorded before each new probe.
#[derive(Clone, Debug)]
pub struct Track {
    started_ns: u64,
    sent: u64,
    /// The programs' answer count before each of the last probes (oldest first).
    answers_before: VecDeque<u64>,
    /// The programs' count when this track began (an earlier agent's answers are not ours).
    base: Option<u64>,
}

impl Track {
    pub fn new(now_ns: u64) -> Self {
        Self {
            started_ns: now_ns,
            sent: 0,
            answers_before: VecDeque::with_capacity(LOSS_WINDOW + 1),
            base: None,
        }
    }

    /// Judges the path at `now_ns` from `state` (the programs' record of answers from that
    /// gateway, if any yet), then counts the probe about to be sent.
    pub fn judge(&mut self, now_ns: u64, state: Option<&ProbeState>) -> (Verdict, Judgement) {
        let total = state.map_or(0, |s| s.replies);
        let base = *self.base.get_or_insert(total);
        let answered = total.saturating_sub(base);
        // Answers to the probes of the window: the count now less the count before its first.
        let loss = match self.answers_before.front() {
            Some(&first) if self.sent > 0 => {
                let window = self.answers_before.len() as f64;
                let got = total.saturating_sub(first) as f64;
                (1.0 - got / window).clamp(0.0, 1.0)
            }
            _ => 0.0,
        };
        let last = state.filter(|s| s.replies > base).map(|s| s.last_ns);
        let silent_for = last.map(|l| Duration::from_nanos(now_ns.saturating_sub(l)));
        let running = Duration::from_nanos(now_ns.saturating_sub(self.started_ns));
        let verdict = match silent_for {
            Some(s) if s < DOWN_AFTER => Verdict::Up,
            _ if running >= DOWN_AFTER => Verdict::Down,
            _ => Verdict::Unknown,
        };
        self.answers_before.push_back(total);
        if self.answers_before.len() > LOSS_WINDOW {
            self.answers_before.pop_front();
        }
        let judgement = Judgement {
            rtt: state
                .filter(|s| s.replies > base)
                .map(|s| Duration::from_nanos(s.rtt_ns)),
            loss,
            sent: self.sent,
            answered,
            silent_for,
        };
        self.sent += 1;
        (verdict, judgement)
    }
}

/// The figures beside a verdict.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Judgement {
    pub rtt: Option<Duration>,
    pub loss: f64,
    pub sent: u64,
    pub answered: u64,
    pub silent_for: Option<Duration>,
}

/// The UDP payload of a probe (what follows the outer UDP header): Strait's Geneve with the OAM
/// bit, an IPv4/UDP packet from `from` to `to` (the two gateways' `gatewayIP`s), the
/// [`Probe`].
pub fn packet(from: Ipv4Addr, to: Ipv4Addr, seq: u32, sent_ns: u64) -> Vec<u8> {
    const INNER_LEN: usize = 20 + 8 + std::mem::size_of::<Probe>();
    let mut p = Vec::with_capacity(8 + INNER_LEN);
    // Geneve: version 0, no options, OAM, protocol IPv4, VNI 0.
    p.extend_from_slice(&[0, mc_common::dataplane::GENEVE_OAM, 0x08, 0x00, 0, 0, 0, 0]);
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&(INNER_LEN as u16).to_be_bytes());
    ip[6] = 0x40; // DF
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&from.octets());
    ip[16..20].copy_from_slice(&to.octets());
    let sum = crate::reject::checksum(&[&ip]);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    p.extend_from_slice(&ip);
    p.extend_from_slice(&PROBE_PORT.to_be_bytes());
    p.extend_from_slice(&PROBE_PORT.to_be_bytes());
    p.extend_from_slice(&((8 + std::mem::size_of::<Probe>()) as u16).to_be_bytes());
    p.extend_from_slice(&[0, 0]); // no UDP checksum
    p.extend_from_slice(&PROBE_MAGIC);
    p.push(PROBE_REQUEST);
    p.extend_from_slice(&[0; 3]);
    p.extend_from_slice(&seq.to_ne_bytes());
    p.extend_from_slice(&sent_ns.to_ne_bytes());
    p
}

/// `CLOCK_MONOTONIC` in nanoseconds: the programs' clock (`bpf_ktime_get_ns`).
pub fn monotonic_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to write; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    (t.tv_sec as u64) * 1_000_000_000 + t.tv_nsec as u64
}

/// The prober of the active gateway: its socket and a track per remote gateway.
pub struct Prober {
    socket: UdpSocket,
    from: Ipv4Addr,
    port: u16,
    seq: u32,
    tracks: BTreeMap<Ipv4Addr, Track>,
}

impl Prober {
    /// A socket on the Node's address `node_ip` (the programs take a probe for what it is only
    /// from there) sending to remote gateways' tunnel `port`; probes carry `gateway_ip` as
    /// their inner source.
    pub fn new(node_ip: Ipv4Addr, gateway_ip: Ipv4Addr, port: u16) -> std::io::Result<Self> {
        let socket = UdpSocket::bind(SocketAddrV4::new(node_ip, 0))?;
        socket.set_nonblocking(true)?;
        Ok(Self {
            socket,
            from: gateway_ip,
            port,
            seq: 0,
            tracks: BTreeMap::new(),
        })
    }

    /// Whether this prober was made for these addresses.
    pub fn is_for(&self, node_ip: Ipv4Addr, gateway_ip: Ipv4Addr, port: u16) -> bool {
        self.socket.local_addr().ok().map(|a| a.ip()) == Some(node_ip.into())
            && self.from == gateway_ip
            && self.port == port
    }

    /// One round: judges every target's path from `answers` (`mc_probes`, read just now), then
    /// sends each its next probe. Tracks of gateways no longer targets are dropped.
    pub fn round(
        &mut self,
        targets: &[Target],
        answers: &dyn Fn(Ipv4Addr) -> Option<ProbeState>,
    ) -> Vec<Health> {
        let now = monotonic_ns();
        self.tracks
            .retain(|ip, _| targets.iter().any(|t| t.gateway_ip == *ip));
        self.seq = self.seq.wrapping_add(1);
        let mut out = Vec::with_capacity(targets.len());
        for t in targets {
            let track = self
                .tracks
                .entry(t.gateway_ip)
                .or_insert_with(|| Track::new(now));
            let (verdict, j) = track.judge(now, answers(t.gateway_ip).as_ref());
            let probe = packet(self.from, t.gateway_ip, self.seq, monotonic_ns());
            if let Err(e) = self
                .socket
                .send_to(&probe, SocketAddrV4::new(t.gateway_ip, self.port))
            {
                tracing::debug!(gateway = %t.gateway_ip, "sending a probe: {e}");
            }
            out.push(Health {
                cluster_id: t.cluster_id.clone(),
                info_name: t.info_name.clone(),
                gateway_ip: t.gateway_ip,
                verdict,
                rtt: j.rtt,
                loss: j.loss,
                sent: j.sent,
                answered: j.answered,
                silent_for: j.silent_for,
            });
        }
        out
    }
}

/// What the active gateway's prober needs, from the agent's last pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Setup {
    pub node_ip: Ipv4Addr,
    pub gateway_ip: Ipv4Addr,
    /// The tunnel port.
    pub port: u16,
    /// With encryption on: WireGuard's port (for the messages).
    pub wireguard_port: Option<u16>,
    pub targets: Vec<Target>,
}

/// The condition type on each remote cluster's ClusterInfoImport.
pub const CONDITION: &str = "TunnelUp";

/// The `TunnelUp` condition for a path's verdict (none while unknown): status, reason, message.
pub fn condition(h: &Health, setup: &Setup) -> Option<(&'static str, &'static str, String)> {
    let way = match setup.wireguard_port {
        Some(wg) => format!("UDP {} inside WireGuard, UDP {wg}", setup.port),
        None => format!("UDP {}", setup.port),
    };
    match h.verdict {
        Verdict::Unknown => None,
        Verdict::Up => Some((
            "True",
            "ProbesAnswered",
            format!(
                "gateway {} answers probes through the tunnel ({way}) from gateway {}: round trip {:.2} ms when it came up",
                h.gateway_ip,
                setup.gateway_ip,
                h.rtt.map_or(0.0, |r| r.as_secs_f64() * 1e3)
            ),
        )),
        Verdict::Down => Some((
            "False",
            "NoAnswer",
            format!(
                "gateway {} has not answered probes through the tunnel ({way}) from gateway {} for {} s: the path between the gateways drops them (a firewall, a security group), or that gateway's dataplane is not running; traffic to the cluster goes the same way",
                h.gateway_ip,
                setup.gateway_ip,
                h.silent_for
                    .map_or(0, |s| s.as_secs())
                    .max(DOWN_AFTER.as_secs())
            ),
        )),
    }
}

/// The prober's loop (a task of the agent): once a second, while `setup` names targets, a
/// round of probes, the metrics, and the `TunnelUp` condition of each remote cluster's
/// ClusterInfoImport (in `namespace`) written when its verdict changes.
pub async fn run(
    mut setup: tokio::sync::watch::Receiver<Option<Setup>>,
    client: kube::Client,
    namespace: String,
    layout: crate::bpffs::PinLayout,
    metrics: mc_kube::Metrics,
) {
    let api: Api<mc_api::clusterinfo::ClusterInfoImport> = Api::namespaced(client, &namespace);
    let mut probing = Probing::new(layout, metrics);
    let mut ticks = tokio::time::interval(INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            changed = setup.changed() => if changed.is_err() { return },
        }
        let Some(now) = setup.borrow_and_update().clone() else {
            probing.stand_down();
            continue;
        };
        let Some(health) = probing.round(&now) else {
            continue;
        };
        probing.peer_traffic(&now);
        probing.forget_gone(&health);
        probing.report(&api, &now, &health).await;
    }
}

/// The prober task's state from one round to the next.
struct Probing {
    layout: crate::bpffs::PinLayout,
    metrics: mc_kube::Metrics,
    /// The socket and tracks, for this gateway's addresses and port.
    prober: Option<Prober>,
    /// `mc_probes`, once it is pinned.
    answers: Option<aya::maps::HashMap<aya::maps::MapData, [u8; 4], ProbeState>>,
    /// `mc_peer_stats`, once it is pinned.
    peer_stats: Option<aya::maps::PerCpuArray<aya::maps::MapData, PeerStats>>,
    /// Whether a missing `mc_peer_stats` was said (it is said once).
    told_no_stats: bool,
    traffic: PeerTraffic,
    /// The verdict written on each ClusterInfoImport (by its name).
    written: BTreeMap<String, Verdict>,
    /// The (cluster, gateway) pairs whose series are out.
    exported: Vec<(String, Ipv4Addr)>,
}

impl Probing {
    fn new(layout: crate::bpffs::PinLayout, metrics: mc_kube::Metrics) -> Self {
        Self {
            layout,
            metrics,
            prober: None,
            answers: None,
            peer_stats: None,
            told_no_stats: false,
            traffic: PeerTraffic::default(),
            written: BTreeMap::new(),
            exported: Vec::new(),
        }
    }

    /// Not the gateway (or not yet): the new gateway's agent probes and writes. The prober and
    /// what was written go, and so do the series.
    fn stand_down(&mut self) {
        self.prober = None;
        self.written.clear();
        for (cluster, _) in self.exported.drain(..) {
            forget(&self.metrics, "cluster", &cluster);
        }
    }

    /// A round of probes to `now`'s targets, judged from `mc_probes`; `None` (and the reason
    /// logged) while there is no socket for `now`'s addresses or no answer map.
    fn round(&mut self, now: &Setup) -> Option<Vec<Health>> {
        if !self
            .prober
            .as_ref()
            .is_some_and(|p| p.is_for(now.node_ip, now.gateway_ip, now.port))
        {
            match Prober::new(now.node_ip, now.gateway_ip, now.port) {
                Ok(p) => self.prober = Some(p),
                Err(e) => {
                    tracing::warn!(node_ip = %now.node_ip, "tunnel probes: no socket: {e}");
                    return None;
                }
            }
        }
        if self.answers.is_none() {
            self.answers = open_answers(&self.layout);
            if self.answers.is_none() {
                // The verdicts would all read "no answer": say why instead.
                tracing::warn!(
                    map = %self.layout.map(mc_common::maps::PROBES).display(),
                    "tunnel probes: the programs' answer map is not pinned (an older dataplane?): no verdicts until it is"
                );
                return None;
            }
        }
        let p = self.prober.as_mut()?;
        let answers = &self.answers;
        let read = |ip: Ipv4Addr| answers.as_ref().and_then(|m| m.get(&ip.octets(), 0).ok());
        Some(p.round(&now.targets, &read))
    }

    /// Per remote cluster, the traffic through the tunnel from `mc_peer_stats` (once it is
    /// pinned), published as running totals.
    fn peer_traffic(&mut self, now: &Setup) {
        if self.peer_stats.is_none() {
            self.peer_stats = open_peer_stats(&self.layout);
            if self.peer_stats.is_none() && !self.told_no_stats {
                tracing::warn!(
                    map = %self.layout.map(mc_common::maps::PEER_STATS).display(),
                    "per-peer traffic: the programs' map is not pinned (an older dataplane?): no strait_tunnel_{{tx,rx}}_* series until it is"
                );
                self.told_no_stats = true;
            }
        }
        if let Some(map) = &self.peer_stats {
            let readings: Vec<(u32, String, PeerStats)> = now
                .targets
                .iter()
                .filter_map(|t| {
                    Some((
                        t.index,
                        t.cluster_id.clone(),
                        read_peer_stats(map, t.index)?,
                    ))
                })
                .collect();
            for (cluster, t) in self.traffic.update(&readings) {
                publish_traffic(&self.metrics, &cluster, &t);
            }
        }
    }

    /// A cluster gone, or its gateway moved: its old series go. A ClusterInfoImport no longer
    /// probed is forgotten too (made again, it gets its condition again).
    fn forget_gone(&mut self, health: &[Health]) {
        for (cluster, gateway) in &self.exported {
            if !health
                .iter()
                .any(|h| &h.cluster_id == cluster && h.gateway_ip == *gateway)
            {
                forget(&self.metrics, "gateway", &gateway.to_string());
            }
        }
        self.exported = health
            .iter()
            .map(|h| (h.cluster_id.clone(), h.gateway_ip))
            .collect();
        self.written
            .retain(|name, _| health.iter().any(|h| &h.info_name == name));
    }

    /// Each path's series, and its `TunnelUp` condition written where its verdict changed
    /// (logged once written).
    async fn report(
        &mut self,
        api: &Api<mc_api::clusterinfo::ClusterInfoImport>,
        now: &Setup,
        health: &[Health],
    ) {
        for h in health {
            publish(&self.metrics, h);
            let Some((status, reason, message)) = condition(h, now) else {
                continue;
            };
            if h.info_name.is_empty() || self.written.get(&h.info_name) == Some(&h.verdict) {
                continue;
            }
            let c = mc_api::conditions::condition(CONDITION, status, reason, &message);
            // A merge-patch body: generic JSON by nature (the fields it sets are typed in mc-api).
            let patch = serde_json::json!({"status": {"conditions": [c]}});
            let ok = api
                .patch_status(&h.info_name, &PatchParams::default(), &Patch::Merge(&patch))
                .await;
            self.metrics
                .write("ClusterInfoImport", "patch_status", ok.is_ok());
            match ok {
                Ok(_) => {
                    if h.verdict == Verdict::Down {
                        tracing::warn!(cluster = h.cluster_id, gateway = %h.gateway_ip, "{message}");
                    } else {
                        tracing::info!(cluster = h.cluster_id, gateway = %h.gateway_ip, "{message}");
                    }
                    self.written.insert(h.info_name.clone(), h.verdict);
                }
                Err(e) => tracing::warn!(info = h.info_name, "writing the TunnelUp condition: {e}"),
            }
        }
    }
}

/// `mc_probes`, once the programs are loaded (an older dataplane has none: no answers).
fn open_answers(
    layout: &crate::bpffs::PinLayout,
) -> Option<aya::maps::HashMap<aya::maps::MapData, [u8; 4], ProbeState>> {
    let pin = layout.map(mc_common::maps::PROBES);
    let data = aya::maps::MapData::from_pin(&pin).ok()?;
    aya::maps::HashMap::try_from(aya::maps::Map::from_map_data(data).ok()?).ok()
}

fn publish(metrics: &mc_kube::Metrics, h: &Health) {
    let gateway = h.gateway_ip.to_string();
    let labels = [
        ("cluster", h.cluster_id.as_str()),
        ("gateway", gateway.as_str()),
    ];
    match h.verdict {
        Verdict::Up => metrics.gauge("strait_tunnel_up", &labels, 1.0),
        Verdict::Down => metrics.gauge("strait_tunnel_up", &labels, 0.0),
        Verdict::Unknown => {}
    }
    if let Some(rtt) = h.rtt {
        metrics.gauge("strait_tunnel_rtt_seconds", &labels, rtt.as_secs_f64());
    }
    metrics.gauge("strait_tunnel_probe_loss_ratio", &labels, h.loss);
    metrics.set_counter("strait_tunnel_probes_sent_total", &labels, h.sent);
    metrics.set_counter("strait_tunnel_probes_answered_total", &labels, h.answered);
}

/// Per remote cluster, the packets and bytes the gateway's programs sent into the tunnel and
/// took from it, from `mc_peer_stats` (indexed by the agent's cluster index, which a cluster
/// keeps while it stays but another may take after it goes): running totals by cluster ID.
#[derive(Debug, Default)]
pub struct PeerTraffic {
    /// Per index: the cluster it counted for at the last reading, and that reading.
    last: BTreeMap<u32, (String, PeerStats)>,
    totals: BTreeMap<String, PeerStats>,
    started: bool,
}

impl PeerTraffic {
    /// Takes a reading (index, cluster, the slot's sums over CPUs); returns the totals of the
    /// clusters read. A cluster counts what its index added since the last reading; at an
    /// index that counted for another cluster (or nothing) at the last reading it counts from
    /// this reading on (what the slot holds is not known to be its); a cluster not read is
    /// forgotten.
    pub fn update(&mut self, readings: &[(u32, String, PeerStats)]) -> Vec<(String, PeerStats)> {
        let mut out = Vec::new();
        let mut last = BTreeMap::new();
        for (index, cluster, now) in readings {
            let total = self.totals.entry(cluster.clone()).or_default();
            match self.last.get(index) {
                Some((c, before)) if c == cluster => {
                    // A slot only grows; one that shrank was made again (a new map): all new.
                    let d = |now: u64, before: u64| now.checked_sub(before).unwrap_or(now);
                    total.tx_packets += d(now.tx_packets, before.tx_packets);
                    total.tx_bytes += d(now.tx_bytes, before.tx_bytes);
                    total.rx_packets += d(now.rx_packets, before.rx_packets);
                    total.rx_bytes += d(now.rx_bytes, before.rx_bytes);
                }
                // This agent's first reading: what the slot holds is this cluster's (the map
                // is new, or this agent's predecessor gave the same clusters the same indexes).
                _ if !self.started => *total = *now,
                // An index new to this cluster: counted from this reading on.
                _ => {}
            }
            last.insert(*index, (cluster.clone(), *now));
            out.push((cluster.clone(), *total));
        }
        self.last = last;
        self.started = true;
        self.totals
            .retain(|c, _| readings.iter().any(|(_, r, _)| r == c));
        out
    }
}

/// `mc_peer_stats`, once the programs are loaded (an older dataplane has none).
fn open_peer_stats(
    layout: &crate::bpffs::PinLayout,
) -> Option<aya::maps::PerCpuArray<aya::maps::MapData, PeerStats>> {
    let pin = layout.map(mc_common::maps::PEER_STATS);
    let data = aya::maps::MapData::from_pin(&pin).ok()?;
    aya::maps::PerCpuArray::try_from(aya::maps::Map::from_map_data(data).ok()?).ok()
}

/// The slot of `index`, summed over CPUs.
fn read_peer_stats(
    map: &aya::maps::PerCpuArray<aya::maps::MapData, PeerStats>,
    index: u32,
) -> Option<PeerStats> {
    let values = map.get(&index, 0).ok()?;
    Some(values.iter().fold(PeerStats::default(), |mut a, v| {
        a.tx_packets += v.tx_packets;
        a.tx_bytes += v.tx_bytes;
        a.rx_packets += v.rx_packets;
        a.rx_bytes += v.rx_bytes;
        a
    }))
}

fn publish_traffic(metrics: &mc_kube::Metrics, cluster: &str, t: &PeerStats) {
    let labels = [("cluster", cluster)];
    metrics.set_counter("strait_tunnel_tx_packets_total", &labels, t.tx_packets);
    metrics.set_counter("strait_tunnel_tx_bytes_total", &labels, t.tx_bytes);
    metrics.set_counter("strait_tunnel_rx_packets_total", &labels, t.rx_packets);
    metrics.set_counter("strait_tunnel_rx_bytes_total", &labels, t.rx_bytes);
}

/// Drops the tunnel series whose `label` is `value`.
fn forget(metrics: &mc_kube::Metrics, label: &str, value: &str) {
    for name in [
        "strait_tunnel_up",
        "strait_tunnel_rtt_seconds",
        "strait_tunnel_probe_loss_ratio",
        "strait_tunnel_probes_sent_total",
        "strait_tunnel_probes_answered_total",
        "strait_tunnel_tx_packets_total",
        "strait_tunnel_tx_bytes_total",
        "strait_tunnel_rx_packets_total",
        "strait_tunnel_rx_bytes_total",
    ] {
        metrics.forget(name, label, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn stats(n: u64) -> PeerStats {
        PeerStats {
            tx_packets: n,
            tx_bytes: n * 100,
            rx_packets: n * 2,
            rx_bytes: n * 200,
        }
    }

    #[test]
    fn per_peer_totals_follow_the_cluster_not_the_index() {
        let mut t = PeerTraffic::default();
        // First reading: what the slots hold is theirs.
        let out = t.update(&[(1, "a".into(), stats(10)), (2, "b".into(), stats(5))]);
        assert_eq!(out, vec![("a".into(), stats(10)), ("b".into(), stats(5))]);
        let out = t.update(&[(1, "a".into(), stats(15)), (2, "b".into(), stats(5))]);
        assert_eq!(out[0], ("a".into(), stats(15)));
        // b goes; c takes index 2 (whose slot still holds b's counts): c starts from nothing,
        // b's series is gone.
        let out = t.update(&[(1, "a".into(), stats(16)), (2, "c".into(), stats(7))]);
        assert_eq!(out[1], ("c".into(), PeerStats::default()));
        let out = t.update(&[(1, "a".into(), stats(16)), (2, "c".into(), stats(9))]);
        assert_eq!(out[1], ("c".into(), stats(2)));
        // a moves to index 3 (the agent's order changed): it keeps its total and counts on
        // from the new slot's next reading.
        let out = t.update(&[(3, "a".into(), stats(4)), (2, "c".into(), stats(9))]);
        assert_eq!(out[0], ("a".into(), stats(16)));
        let out = t.update(&[(3, "a".into(), stats(6)), (2, "c".into(), stats(9))]);
        assert_eq!(out[0], ("a".into(), stats(18)));
        // A slot that shrank belongs to a new map: all of it is new.
        let out = t.update(&[(3, "a".into(), stats(1)), (2, "c".into(), stats(9))]);
        assert_eq!(out[0], ("a".into(), stats(19)));
    }

    fn answered(replies: u64, last_ns: u64) -> ProbeState {
        ProbeState {
            replies,
            rtt_ns: 400_000,
            last_ns,
            seq: replies as u32,
            _pad: 0,
        }
    }

    /// Unknown until answers come or three seconds pass without; up while answers keep coming;
    /// down three seconds after the last; loss over the last ten.
    #[test]
    fn a_path_is_judged_by_its_answers() {
        let mut t = Track::new(0);
        assert_eq!(t.judge(0, None).0, Verdict::Unknown);
        let (v, j) = t.judge(S, Some(&answered(1, S / 2)));
        assert_eq!(v, Verdict::Up);
        assert_eq!(j.rtt, Some(Duration::from_micros(400)));
        assert_eq!((j.sent, j.answered), (1, 1));
        let mut replies = 1;
        for second in 2..12 {
            replies += 1;
            let (v, j) = t.judge(second * S, Some(&answered(replies, second * S - S / 2)));
            assert_eq!(v, Verdict::Up);
            assert_eq!(j.loss, 0.0, "second {second}");
        }
        // Answers stop: up while the last is under three seconds old, then down, and the loss
        // climbs.
        let stopped = answered(replies, 11 * S - S / 2);
        assert_eq!(t.judge(12 * S, Some(&stopped)).0, Verdict::Up);
        assert_eq!(t.judge(13 * S, Some(&stopped)).0, Verdict::Up);
        let (v, j) = t.judge(14 * S, Some(&stopped));
        assert_eq!(v, Verdict::Down);
        assert!(j.loss > 0.25 && j.loss < 0.35, "{j:?}");
        assert_eq!(j.silent_for, Some(Duration::from_millis(3500)));
        // Back.
        let (v, _) = t.judge(16 * S, Some(&answered(replies + 1, 16 * S - S / 4)));
        assert_eq!(v, Verdict::Up);
    }

    /// A gateway that never answers is down once the agent has probed it long enough.
    #[test]
    fn a_silent_gateway_is_down_after_three_seconds() {
        let mut t = Track::new(10 * S);
        assert_eq!(t.judge(10 * S, None).0, Verdict::Unknown);
        assert_eq!(t.judge(12 * S, None).0, Verdict::Unknown);
        let (v, j) = t.judge(13 * S, None);
        assert_eq!(v, Verdict::Down);
        assert_eq!(j.loss, 1.0);
        // An earlier agent's answers (before this track) do not count as this one's.
        let mut t = Track::new(20 * S);
        let old = answered(50, 19 * S);
        assert_eq!(t.judge(20 * S, Some(&old)).0, Verdict::Unknown);
        assert_eq!(t.judge(24 * S, Some(&old)).0, Verdict::Down);
    }

    #[test]
    fn a_probe_is_geneve_with_the_oam_bit_and_a_valid_inner_header() {
        let p = packet(
            Ipv4Addr::new(198, 18, 1, 1),
            Ipv4Addr::new(198, 18, 2, 1),
            7,
            42,
        );
        assert_eq!(p.len(), 8 + 20 + 8 + 24);
        assert_eq!(&p[..4], &[0, 0x80, 0x08, 0x00]);
        assert_eq!(
            crate::reject::checksum(&[&p[8..28]]),
            0,
            "the inner header's checksum adds up"
        );
        assert_eq!(&p[20..24], &[198, 18, 1, 1]);
        assert_eq!(&p[24..28], &[198, 18, 2, 1]);
        assert_eq!(&p[36..44], b"STRAITPB");
        assert_eq!(p[44], PROBE_REQUEST);
        assert_eq!(u32::from_ne_bytes(p[48..52].try_into().unwrap()), 7);
        assert_eq!(u64::from_ne_bytes(p[52..60].try_into().unwrap()), 42);
    }
}
