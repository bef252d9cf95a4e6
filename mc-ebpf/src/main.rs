//! Strait's uplink TC program.
//!
//! Today it parses Ethernet and IPv4 and accounts for every frame in a per-CPU counter keyed by
//! verdict or drop reason; the Geneve and NAT paths of DESIGN §4 build on this entry point.
#![no_std]
#![no_main]
// The program macros expand to a `pub fn` taking the raw context pointer.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use aya_ebpf::{
    bindings::{TC_ACT_SHOT, TC_ACT_UNSPEC},
    btf_maps::PerCpuArray,
    macros::{btf_map, classifier},
    programs::TcContext,
};
use mc_common::{Counter, CounterValue, counters::COUNTER_SLOTS};
use network_types::{eth::EthHdr, ip::Ipv4Hdr};

const ETH_P_IP: u16 = 0x0800;

/// Under TCX, "continue with the next program, then the kernel's default" (TCX_NEXT). Strait
/// shares the hook with whatever CNI is on the Node, so "nothing for us" never ends the chain.
const VERDICT_NEXT: i32 = TC_ACT_UNSPEC;
const VERDICT_DROP: i32 = TC_ACT_SHOT;

#[btf_map(name = "mc_counters")]
static COUNTERS: PerCpuArray<CounterValue, { COUNTER_SLOTS as usize }> = PerCpuArray::new();

#[classifier]
pub fn mc_uplink(ctx: TcContext) -> i32 {
    let counter = match try_uplink(&ctx) {
        Ok(counter) | Err(counter) => counter,
    };
    count(&ctx, counter);
    if counter.is_drop() {
        VERDICT_DROP
    } else {
        VERDICT_NEXT
    }
}

/// Classifies one frame. `Err` carries the drop reason.
fn try_uplink(ctx: &TcContext) -> Result<Counter, Counter> {
    let eth: EthHdr = ctx.load(0).map_err(|_| Counter::DropTruncated)?;
    if u16::from_be(eth.ether_type) != ETH_P_IP {
        return Ok(Counter::PassNotIpv4);
    }
    let ip: Ipv4Hdr = ctx.load(EthHdr::LEN).map_err(|_| Counter::DropTruncated)?;
    let header_len = usize::from(ip.ihl());
    if ip.version() != 4 || header_len < Ipv4Hdr::LEN {
        return Err(Counter::DropBadIpv4Header);
    }
    if usize::from(ip.tot_len()) < header_len {
        return Err(Counter::DropBadIpv4Header);
    }
    if ctx.len() < (EthHdr::LEN + header_len) as u32 {
        return Err(Counter::DropTruncated);
    }
    Ok(Counter::PassIpv4)
}

#[inline(always)]
fn count(ctx: &TcContext, counter: Counter) {
    if let Some(slot) = COUNTERS.get_ptr_mut(counter.key()) {
        // SAFETY: per-CPU slot, only this CPU writes it while the program runs.
        unsafe {
            (*slot).packets += 1;
            (*slot).bytes += u64::from(ctx.len());
        }
    }
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
