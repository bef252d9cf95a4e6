//! `BPF_PROG_TEST_RUN`: hand-built frames pushed through the uplink program, no interfaces.
//! Run as root.

mod support;

use mc_agent::{
    bpffs::PinLayout,
    dataplane::{Dataplane, Direction},
};
use mc_common::Counter;
use support::{Bpffs, lacks_root, packets, udp_frame};

/// Why the tests here need root (said when they are skipped without it).
const WHY_ROOT: &str = "loads eBPF programs and mounts a bpffs";

/// TCX_NEXT: the program hands the packet on.
const NEXT: u32 = u32::MAX;
/// TC_ACT_SHOT.
const SHOT: u32 = 2;

fn run_frame(dataplane: &mut Dataplane, frame: &[u8]) -> (u32, Vec<u8>) {
    support::test_run(dataplane, Direction::Egress, frame)
}

#[test]
fn frames_get_the_right_verdict_and_counter() {
    if lacks_root(WHY_ROOT) {
        return;
    }
    let fs = Bpffs::new("test-run");
    let mut dp = Dataplane::load(PinLayout::new(fs.pin_root())).expect("loading the object");

    // A valid IPv4/UDP frame is handed on unchanged and counted as IPv4.
    let frame = udp_frame([198, 18, 0, 1], [198, 18, 0, 2], b"hello strait");
    let (verdict, out) = run_frame(&mut dp, &frame);
    assert_eq!(verdict, NEXT, "a valid IPv4 frame must be passed on");
    assert_eq!(out, frame, "the program must not modify a frame it passes");
    assert_eq!(packets(&dp, Counter::PassIpv4), 1);

    // ARP is not ours: passed on, counted as not-IPv4.
    let mut arp = frame[..14].to_vec();
    arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    arp.extend_from_slice(&[0u8; 28]);
    let (verdict, _) = run_frame(&mut dp, &arp);
    assert_eq!(verdict, NEXT);
    assert_eq!(packets(&dp, Counter::PassNotIpv4), 1);

    // IPv4 header length of 12 bytes (IHL = 3): dropped and counted.
    let mut bad = frame.clone();
    bad[14] = 0x43;
    let (verdict, _) = run_frame(&mut dp, &bad);
    assert_eq!(verdict, SHOT, "a bad IPv4 header must be dropped");
    assert_eq!(packets(&dp, Counter::DropBadIpv4Header), 1);

    // Version 6 in an IPv4 ethertype frame: dropped.
    let mut v6 = frame.clone();
    v6[14] = 0x65;
    assert_eq!(run_frame(&mut dp, &v6).0, SHOT);
    assert_eq!(packets(&dp, Counter::DropBadIpv4Header), 2);

    // A header announcing 60 bytes (IHL = 15) in a frame that ends after 20: dropped as
    // truncated. (The kernel refuses to test-run an IPv4 frame shorter than a minimal header.)
    let mut truncated = frame[..14 + 20].to_vec();
    truncated[14] = 0x4f;
    truncated[16..18].copy_from_slice(&60u16.to_be_bytes());
    assert_eq!(run_frame(&mut dp, &truncated).0, SHOT);
    assert_eq!(packets(&dp, Counter::DropTruncated), 1);

    // Nothing was counted twice.
    assert_eq!(packets(&dp, Counter::PassIpv4), 1);
}

#[test]
fn unknown_uplink_is_a_clear_error() {
    if lacks_root(WHY_ROOT) {
        return;
    }
    let fs = Bpffs::new("unknown-uplink");
    let mut dp = Dataplane::load(PinLayout::new(fs.pin_root())).expect("loading the object");
    let err = dp
        .attach_uplink("nosuchif0")
        .expect_err("attaching to a missing interface must fail");
    let message = err.to_string();
    assert!(
        message.contains("\"nosuchif0\" does not exist") && message.contains("uplink"),
        "unexpected message: {message}"
    );
}

#[test]
fn pin_root_outside_bpffs_is_a_clear_error() {
    if lacks_root(WHY_ROOT) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("strait-not-bpffs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let err = match Dataplane::load(PinLayout::new(dir.join("mc/v1"))) {
        Ok(_) => panic!("a pin root outside bpffs must be refused"),
        Err(e) => e.to_string(),
    };
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        err.contains("not on a BPF filesystem"),
        "unexpected message: {err}"
    );
}
