//! Makes the maps equal to a [`Desired`] state, level-triggered: whatever the maps hold (after a
//! restart, a crash mid-update, or someone's `bpftool map update`), the result is the same.
//!
//! Order matters because the programs read the maps while they change: new routes, peers and
//! policy go in first, then stale routes, peers and policy go, then the config (a new gateway or
//! role, and the generations that tell the gateway's caches what they remember is stale), then
//! stale Pod identities. A packet sees the old config with the old, a mixed or the new routes
//! and peers, or the new config with the new ones, never a config that points at entries not
//! written yet; and whatever the hairpin cache learned from a mixed state it learned under the
//! old generation. (A removal that fails leaves the config as it was until a later pass.)

use std::{borrow::BorrowMut, collections::BTreeMap, net::Ipv4Addr};

use aya::{
    Pod,
    maps::{HashMap, LpmTrie, MapData, MapError, lpm_trie::Key},
};
use mc_common::dataplane::{
    ACTION_REFUSE_ALL, Peer, PodIdentity, PolicyKey, PolicyVerdict, SenderIdKey,
};

use crate::{
    dataplane::DataplaneMaps,
    state::{Desired, Prefix},
};

/// What one sync changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncReport {
    pub routes_written: usize,
    pub routes_removed: usize,
    pub peers_written: usize,
    pub peers_removed: usize,
    pub pod_ids_written: usize,
    pub pod_ids_removed: usize,
    pub policy_written: usize,
    pub policy_removed: usize,
    pub exposed_written: usize,
    pub exposed_removed: usize,
    pub config_changed: bool,
}

impl SyncReport {
    pub fn changed(&self) -> bool {
        *self != SyncReport::default()
    }
}

/// Maps that could not be made equal to the desired state (each map syncs on its own: the
/// others were still written), and what the ones that could changed.
#[derive(Debug)]
pub struct SyncError {
    pub report: SyncReport,
    /// `<map>: <error>` for each map that failed.
    pub failed: Vec<String>,
}

impl std::fmt::Display for SyncError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.failed.join("; "))
    }
}

impl std::error::Error for SyncError {}

/// Makes the maps equal to `desired`, in the order the module's doc gives: new routes, peers,
/// identities, policy and exposure first, then stale routes and peers go, then the WireGuard
/// entry and the config, then stale identities. Each map syncs on its own: one that fails is
/// named in the error and the others are still written.
pub fn apply<T: BorrowMut<MapData>>(
    maps: &mut DataplaneMaps<T>,
    desired: &Desired,
) -> Result<SyncReport, SyncError> {
    let mut sync = Syncing::default();
    let keyed = Keyed::of(desired);
    let held = sync.write_new(maps, desired, &keyed);
    sync.write_exposure(maps, desired);
    sync.remove_stale_routes_and_peers(maps, desired, &keyed, &held);
    sync.write_config(maps, desired, &held);
    sync.remove_stale_identities(maps, desired, &keyed, &held);
    sync.finish()
}

/// A sync in progress: what it changed, and the maps that failed.
#[derive(Default)]
struct Syncing {
    report: SyncReport,
    /// `<map>: <error>` for each map that failed.
    failed: Vec<String>,
}

/// The desired peers and Pod identities keyed as the maps are (by the address's octets).
struct Keyed {
    peers: BTreeMap<[u8; 4], Peer>,
    pod_ids: BTreeMap<[u8; 4], PodIdentity>,
}

impl Keyed {
    fn of(desired: &Desired) -> Self {
        Self {
            peers: desired
                .peers
                .iter()
                .map(|(a, p)| (a.octets(), *p))
                .collect(),
            pod_ids: desired
                .pod_ids
                .iter()
                .map(|(a, i)| (a.octets(), *i))
                .collect(),
        }
    }
}

/// What the first writes found in the maps whose stale entries go later: `None` for a map
/// whose write failed (its stale entries stay until a later pass).
struct Held {
    routes: Option<HeldPrefixes>,
    peers: Option<Vec<[u8; 4]>>,
    pod_ids: Option<Vec<[u8; 4]>>,
    sender_ids: Option<Vec<SenderIdKey>>,
    /// The policy maps were synced whole.
    policy: bool,
}

impl Syncing {
    /// Records a map's result: false (and the map's error) when it failed.
    fn note(&mut self, map: &str, r: Result<(), MapError>) -> bool {
        if let Err(e) = r {
            self.failed.push(format!("{map}: {e}"));
            return false;
        }
        true
    }

    /// The first phase: the desired routes, peers, Pod and sender identities written where the
    /// maps lack them or hold them otherwise, then the policy maps ([`sync_policy`]). Returns
    /// what those maps held before.
    fn write_new<T: BorrowMut<MapData>>(
        &mut self,
        maps: &mut DataplaneMaps<T>,
        desired: &Desired,
        keyed: &Keyed,
    ) -> Held {
        let routes = write_trie(&mut maps.routes, &desired.routes);
        let routes = self.written(mc_common::maps::ROUTES, routes, |r| &mut r.routes_written);
        let peers = write_changed(&mut maps.peers, &keyed.peers);
        let peers = self.written(mc_common::maps::PEERS, peers, |r| &mut r.peers_written);
        let pod_ids = write_changed(&mut maps.pod_ids, &keyed.pod_ids);
        let pod_ids = self.written(mc_common::maps::POD_IDS, pod_ids, |r| {
            &mut r.pod_ids_written
        });
        let sender_ids = write_changed(&mut maps.sender_ids, &desired.sender_ids);
        let sender_ids = self.written(mc_common::maps::SENDER_IDS, sender_ids, |r| {
            &mut r.pod_ids_written
        });
        let policy = sync_policy(maps, desired, &mut self.report);
        let policy = self.note(mc_common::maps::INGRESS_POLICY, policy);
        Held {
            routes,
            peers,
            pod_ids,
            sender_ids,
            policy,
        }
    }

    /// A write's result: what the map held before when it succeeded (the count of entries
    /// written added to the report's `count`), else `None` (and the map's error noted).
    fn written<K>(
        &mut self,
        map: &str,
        result: Result<(K, usize), MapError>,
        count: impl FnOnce(&mut SyncReport) -> &mut usize,
    ) -> Option<K> {
        match result {
            Ok((held, n)) => {
                *count(&mut self.report) += n;
                Some(held)
            }
            Err(e) => {
                self.note(map, Err(e));
                None
            }
        }
    }

    /// What remote clusters may reach: new destinations before stale ones go (a Service that
    /// moves keeps a way in). `mc_exposed` is left as it is while the exports are not known (a
    /// restarted agent keeps the pinned map until its watches have listed them); then the Pod
    /// CIDRs of `mc_exposed_prefixes`.
    fn write_exposure<T: BorrowMut<MapData>>(
        &mut self,
        maps: &mut DataplaneMaps<T>,
        desired: &Desired,
    ) {
        let report = &mut self.report;
        if let Some(exposed) = &desired.exposed {
            let result = write_changed(&mut maps.exposed, exposed).and_then(|(held, n)| {
                report.exposed_written += n;
                report.exposed_removed += remove_unwanted(&mut maps.exposed, &held, exposed)?;
                Ok(())
            });
            self.note(mc_common::maps::EXPOSED, result);
        }
        let report = &mut self.report;
        let prefixes = &desired.exposed_prefixes;
        let result = write_trie(&mut maps.exposed_prefixes, prefixes).and_then(|(held, n)| {
            report.exposed_written += n;
            report.exposed_removed += remove_trie(&mut maps.exposed_prefixes, &held, prefixes)?;
            Ok(())
        });
        self.note(mc_common::maps::EXPOSED_PREFIXES, result);
    }

    /// The second phase: the stale routes and peers go (where their write succeeded).
    fn remove_stale_routes_and_peers<T: BorrowMut<MapData>>(
        &mut self,
        maps: &mut DataplaneMaps<T>,
        desired: &Desired,
        keyed: &Keyed,
        held: &Held,
    ) {
        if let Some(held_routes) = &held.routes {
            let result = remove_trie(&mut maps.routes, held_routes, &desired.routes)
                .map(|n| self.report.routes_removed += n);
            self.note(mc_common::maps::ROUTES, result);
        }
        if let Some(held_peers) = &held.peers {
            let result = remove_unwanted(&mut maps.peers, held_peers, &keyed.peers)
                .map(|n| self.report.peers_removed += n);
            self.note(mc_common::maps::PEERS, result);
        }
    }

    /// The third phase: the WireGuard entry, then the config, each written when it differs.
    ///
    /// The routes and peers complete before the config names their generation: the gateway's
    /// hairpin cache keeps what it learned under the new generation from the new maps only. A
    /// map that failed gets a generation no complete state has, so that nothing learned from
    /// the mixed maps is kept once they are complete (the next pass writes the real one); the
    /// rest of the config (a new gateway, role or MTU) is written all the same.
    /// The WireGuard device before the config turns encryption on (or after it is off: a zero
    /// entry while the flag is still set only drops, counted).
    fn write_config<T: BorrowMut<MapData>>(
        &mut self,
        maps: &mut DataplaneMaps<T>,
        desired: &Desired,
        held: &Held,
    ) {
        let report = &mut self.report;
        let result = maps.wireguard.get(&0, 0).and_then(|current| {
            if current != desired.wireguard {
                maps.wireguard.set(0, &desired.wireguard, 0)?;
                report.config_changed = true;
            }
            Ok(())
        });
        self.note(mc_common::maps::WIREGUARD, result);
        let mut config = desired.config;
        if !(held.routes.is_some() && held.peers.is_some()) {
            config.route_generation = config.route_generation.wrapping_add(1);
        }
        if !held.policy {
            config.policy_generation = config.policy_generation.wrapping_add(1);
        }
        let report = &mut self.report;
        let result = maps.config.get(&0, 0).and_then(|current| {
            if current != config {
                maps.config.set(0, &config, 0)?;
                report.config_changed = true;
            }
            Ok(())
        });
        self.note(mc_common::maps::CONFIG, result);
    }

    /// The last phase: the stale Pod and sender identities go (where their write succeeded).
    fn remove_stale_identities<T: BorrowMut<MapData>>(
        &mut self,
        maps: &mut DataplaneMaps<T>,
        desired: &Desired,
        keyed: &Keyed,
        held: &Held,
    ) {
        if let Some(held_ids) = &held.pod_ids {
            let result = remove_unwanted(&mut maps.pod_ids, held_ids, &keyed.pod_ids)
                .map(|n| self.report.pod_ids_removed += n);
            self.note(mc_common::maps::POD_IDS, result);
        }
        if let Some(held_senders) = &held.sender_ids {
            let result = remove_unwanted(&mut maps.sender_ids, held_senders, &desired.sender_ids)
                .map(|n| self.report.pod_ids_removed += n);
            self.note(mc_common::maps::SENDER_IDS, result);
        }
    }

    /// The report, or the maps that failed with it.
    fn finish(self) -> Result<SyncReport, SyncError> {
        let Syncing { report, failed } = self;
        if failed.is_empty() {
            Ok(report)
        } else {
            Err(SyncError { report, failed })
        }
    }
}

/// The policy maps. A Pod's verdicts before the Pod is protected, so that it is never
/// protected with some of them missing (a missing one allows); unprotected first, then its
/// verdicts go. When the ingress map refuses an entry (full), the Pods whose verdicts are not
/// all in place are protected as refusing every remote flow instead (fail closed): the entries
/// are written in key order, Pod by Pod, so every Pod before the refused entry's is complete.
fn sync_policy<T: BorrowMut<MapData>>(
    maps: &mut DataplaneMaps<T>,
    desired: &Desired,
    report: &mut SyncReport,
) -> Result<(), MapError> {
    let mut protected: BTreeMap<[u8; 4], PolicyVerdict> = desired
        .policy
        .protected
        .iter()
        .map(|(ip, v)| (ip.octets(), *v))
        .collect();
    let held_policy: BTreeMap<PolicyKey, PolicyVerdict> = maps
        .ingress_policy
        .iter()
        .collect::<Result<_, MapError>>()?;
    let mut refused: Option<MapError> = None;
    for (key, v) in &desired.policy.entries {
        if held_policy.get(key) == Some(v) {
            continue;
        }
        if let Err(e) = maps.ingress_policy.insert(key, v, 0) {
            for (_, verdict) in protected.range_mut(key.pod..) {
                verdict.action = ACTION_REFUSE_ALL;
            }
            refused = Some(e);
            break;
        }
        report.policy_written += 1;
    }
    let (held_egress, n2) = write_changed(&mut maps.egress_policy, &desired.policy.egress)?;
    let (held_protected, n3) = write_changed(&mut maps.protected_pods, &protected)?;
    report.policy_written += n2 + n3;
    // The policy complete before the config names its generation: a verdict the gateway
    // remembers under the new generation must have been made from the new entries only.
    report.policy_removed +=
        remove_unwanted(&mut maps.protected_pods, &held_protected, &protected)?
            + remove_unwanted(
                &mut maps.egress_policy,
                &held_egress,
                &desired.policy.egress,
            )?
            + remove_unwanted(
                &mut maps.ingress_policy,
                &held_policy.into_keys().collect::<Vec<_>>(),
                &desired.policy.entries,
            )?;
    match refused {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Writes the entries of `want` that `map` lacks or holds otherwise; returns the keys it held
/// before and how many entries were written.
fn write_changed<T: BorrowMut<MapData>, K: Pod + Ord, V: Pod + PartialEq>(
    map: &mut HashMap<T, K, V>,
    want: &BTreeMap<K, V>,
) -> Result<(Vec<K>, usize), MapError> {
    let held: BTreeMap<K, V> = map.iter().collect::<Result<_, MapError>>()?;
    let mut written = 0;
    for (key, v) in want {
        if held.get(key) != Some(v) {
            map.insert(key, v, 0)?;
            written += 1;
        }
    }
    Ok((held.into_keys().collect(), written))
}

/// Removes the keys of `held` that `want` has not; returns how many.
fn remove_unwanted<T: BorrowMut<MapData>, K: Pod + Ord, V: Pod>(
    map: &mut HashMap<T, K, V>,
    held: &[K],
    want: &BTreeMap<K, V>,
) -> Result<usize, MapError> {
    let mut removed = 0;
    for key in held.iter().filter(|k| !want.contains_key(k)) {
        remove_absent(map.remove(key))?;
        removed += 1;
    }
    Ok(removed)
}

/// The prefixes an LPM trie held before a sync.
type HeldPrefixes = Vec<Key<[u8; 4]>>;

/// Writes the prefixes of `want` that `trie` lacks or holds otherwise; returns the entries it
/// held before and how many were written.
fn write_trie<T: BorrowMut<MapData>, V: Pod + PartialEq>(
    trie: &mut LpmTrie<T, [u8; 4], V>,
    want: &BTreeMap<Prefix, V>,
) -> Result<(HeldPrefixes, usize), MapError> {
    let held: Vec<(Key<[u8; 4]>, V)> = trie.iter().collect::<Result<_, MapError>>()?;
    let mut written = 0;
    for (prefix, v) in want {
        let key = Key::new(u32::from(prefix.len), prefix.addr.octets());
        let same = held.iter().any(|(k, held_v)| {
            k.prefix_len() == key.prefix_len() && k.data() == key.data() && held_v == v
        });
        if !same {
            trie.insert(&key, v, 0)?;
            written += 1;
        }
    }
    Ok((held.into_iter().map(|(k, _)| k).collect(), written))
}

/// Removes the prefixes of `held` that `want` has not; returns how many.
fn remove_trie<T: BorrowMut<MapData>, V: Pod>(
    trie: &mut LpmTrie<T, [u8; 4], V>,
    held: &[Key<[u8; 4]>],
    want: &BTreeMap<Prefix, V>,
) -> Result<usize, MapError> {
    let mut removed = 0;
    for key in held {
        let prefix = Prefix::new(Ipv4Addr::from(key.data()), key.prefix_len().min(32) as u8);
        // A key with host bits set was not written by us: it goes too.
        let normalised = key.prefix_len() <= 32 && prefix.addr.octets() == key.data();
        if !normalised || !want.contains_key(&prefix) {
            remove_absent(trie.remove(key))?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// Removing what is already gone is fine (someone else cleaned up first).
fn remove_absent(result: Result<(), MapError>) -> Result<(), MapError> {
    match result {
        Err(MapError::KeyNotFound) => Ok(()),
        Err(MapError::SyscallError(e)) if e.io_error.kind() == std::io::ErrorKind::NotFound => {
            Ok(())
        }
        other => other,
    }
}
