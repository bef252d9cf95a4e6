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
use mc_common::dataplane::{ACTION_REFUSE_ALL, Peer, PodIdentity, PolicyKey, PolicyVerdict};

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

pub fn apply<T: BorrowMut<MapData>>(
    maps: &mut DataplaneMaps<T>,
    desired: &Desired,
) -> Result<SyncReport, SyncError> {
    let mut report = SyncReport::default();
    let mut failed: Vec<String> = Vec::new();
    let mut note = |map: &str, r: Result<(), MapError>| {
        if let Err(e) = r {
            failed.push(format!("{map}: {e}"));
            return false;
        }
        true
    };

    let mut held_routes = Vec::new();
    let routes_ok = note(
        mc_common::maps::ROUTES,
        write_trie(&mut maps.routes, &desired.routes).map(|(held, n)| {
            held_routes = held;
            report.routes_written += n;
        }),
    );
    // Keyed as the maps are.
    let peers: BTreeMap<[u8; 4], Peer> = desired
        .peers
        .iter()
        .map(|(a, p)| (a.octets(), *p))
        .collect();
    let pod_ids: BTreeMap<[u8; 4], PodIdentity> = desired
        .pod_ids
        .iter()
        .map(|(a, i)| (a.octets(), *i))
        .collect();
    let mut held_peers = Vec::new();
    let peers_ok = note(
        mc_common::maps::PEERS,
        write_changed(&mut maps.peers, &peers).map(|(held, n)| {
            held_peers = held;
            report.peers_written += n;
        }),
    );
    let mut held_ids = Vec::new();
    let ids_ok = note(
        mc_common::maps::POD_IDS,
        write_changed(&mut maps.pod_ids, &pod_ids).map(|(held, n)| {
            held_ids = held;
            report.pod_ids_written += n;
        }),
    );

    let mut held_senders = Vec::new();
    let senders_ok = note(
        mc_common::maps::SENDER_IDS,
        write_changed(&mut maps.sender_ids, &desired.sender_ids).map(|(held, n)| {
            held_senders = held;
            report.pod_ids_written += n;
        }),
    );

    let policy_ok = note(
        mc_common::maps::INGRESS_POLICY,
        sync_policy(maps, desired, &mut report),
    );

    // What remote clusters may reach: new destinations before stale ones go (a Service that
    // moves keeps a way in). Left as it is while the exports are not known (a restarted agent
    // keeps the pinned map until its watches have listed them).
    if let Some(exposed) = &desired.exposed {
        note(
            mc_common::maps::EXPOSED,
            write_changed(&mut maps.exposed, exposed).and_then(|(held, n)| {
                report.exposed_written += n;
                report.exposed_removed += remove_unwanted(&mut maps.exposed, held, exposed)?;
                Ok(())
            }),
        );
    }
    note(
        mc_common::maps::EXPOSED_PREFIXES,
        write_trie(&mut maps.exposed_prefixes, &desired.exposed_prefixes).and_then(|(held, n)| {
            report.exposed_written += n;
            report.exposed_removed +=
                remove_trie(&mut maps.exposed_prefixes, &held, &desired.exposed_prefixes)?;
            Ok(())
        }),
    );

    if routes_ok {
        note(
            mc_common::maps::ROUTES,
            remove_trie(&mut maps.routes, &held_routes, &desired.routes)
                .map(|n| report.routes_removed += n),
        );
    }
    if peers_ok {
        note(
            mc_common::maps::PEERS,
            remove_unwanted(&mut maps.peers, held_peers, &peers).map(|n| report.peers_removed += n),
        );
    }

    // The routes and peers complete before the config names their generation: the gateway's
    // hairpin cache keeps what it learned under the new generation from the new maps only. A
    // map that failed gets a generation no complete state has, so that nothing learned from
    // the mixed maps is kept once they are complete (the next pass writes the real one); the
    // rest of the config (a new gateway, role or MTU) is written all the same.
    // The WireGuard device before the config turns encryption on (or after it is off: a zero
    // entry while the flag is still set only drops, counted).
    note(
        mc_common::maps::WIREGUARD,
        maps.wireguard.get(&0, 0).and_then(|current| {
            if current != desired.wireguard {
                maps.wireguard.set(0, &desired.wireguard, 0)?;
                report.config_changed = true;
            }
            Ok(())
        }),
    );
    let mut config = desired.config;
    if !(routes_ok && peers_ok) {
        config.route_generation = config.route_generation.wrapping_add(1);
    }
    if !policy_ok {
        config.policy_generation = config.policy_generation.wrapping_add(1);
    }
    note(
        mc_common::maps::CONFIG,
        maps.config.get(&0, 0).and_then(|current| {
            if current != config {
                maps.config.set(0, &config, 0)?;
                report.config_changed = true;
            }
            Ok(())
        }),
    );

    if ids_ok {
        note(
            mc_common::maps::POD_IDS,
            remove_unwanted(&mut maps.pod_ids, held_ids, &pod_ids)
                .map(|n| report.pod_ids_removed += n),
        );
    }
    if senders_ok {
        note(
            mc_common::maps::SENDER_IDS,
            remove_unwanted(&mut maps.sender_ids, held_senders, &desired.sender_ids)
                .map(|n| report.pod_ids_removed += n),
        );
    }
    if failed.is_empty() {
        Ok(report)
    } else {
        Err(SyncError { report, failed })
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
    report.policy_removed += remove_unwanted(&mut maps.protected_pods, held_protected, &protected)?
        + remove_unwanted(&mut maps.egress_policy, held_egress, &desired.policy.egress)?
        + remove_unwanted(
            &mut maps.ingress_policy,
            held_policy.into_keys().collect(),
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
    held: Vec<K>,
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
