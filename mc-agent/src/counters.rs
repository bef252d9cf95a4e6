//! Reading the per-CPU counters, from a loaded object or from the pinned map.

use std::path::Path;

use aya::maps::{Map, MapData, MapError, PerCpuArray};
use mc_common::{Counter, CounterValue};
use serde::Serialize;

/// One counter summed over all CPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct CounterReading {
    pub name: &'static str,
    pub key: u32,
    pub drop: bool,
    pub packets: u64,
    pub bytes: u64,
}

/// Opens the pinned counters map.
pub fn open_pinned(path: &Path) -> Result<PerCpuArray<MapData, CounterValue>, MapError> {
    let map = Map::from_map_data(MapData::from_pin(path)?)?;
    map.try_into()
}

/// Sums every known counter over the CPUs.
pub fn read<T: std::borrow::Borrow<MapData>>(
    map: &PerCpuArray<T, CounterValue>,
) -> Result<Vec<CounterReading>, MapError> {
    Counter::ALL
        .iter()
        .map(|&counter| {
            let per_cpu = map.get(&counter.key(), 0)?;
            let (packets, bytes) = per_cpu
                .iter()
                .fold((0u64, 0u64), |(p, b), v| (p + v.packets, b + v.bytes));
            Ok(CounterReading {
                name: counter.name(),
                key: counter.key(),
                drop: counter.is_drop(),
                packets,
                bytes,
            })
        })
        .collect()
}

/// Reads the per-rule counters of the policy program: `(name, packets, bytes)` for each name of
/// `names` (the compiled rules', by index; [`crate::policy::Compiled::rules`]).
pub fn read_rules<T: std::borrow::Borrow<MapData>>(
    map: &PerCpuArray<T, CounterValue>,
    names: &[String],
) -> Result<Vec<(String, u64, u64)>, MapError> {
    names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let per_cpu = map.get(&(i as u32), 0)?;
            let (packets, bytes) = per_cpu
                .iter()
                .fold((0u64, 0u64), |(p, b), v| (p + v.packets, b + v.bytes));
            Ok((name.clone(), packets, bytes))
        })
        .collect()
}
