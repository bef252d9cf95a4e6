//! Someone else's TC program, loaded and attached with raw `bpf(2)` calls: what a CNI's
//! DaemonSet (Cilium's, say) leaves on an uplink. Used by the kernel tests (mc-agent) and the
//! testbed tests alike.

use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_PROG_TYPE_SCHED_CLS: u32 = 3;
const BPF_TCX_INGRESS: u32 = 46;
const BPF_TCX_EGRESS: u32 = 47;
/// `BPF_F_BEFORE`: attach ahead of the program `relative_fd` names (none: the head).
pub const BPF_F_BEFORE: u32 = 1 << 3;

fn bpf(cmd: libc::c_long, attr: &[u8]) -> OwnedFd {
    // SAFETY: `attr` outlives the call; the kernel reads at most its size.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_ptr(), attr.len()) };
    assert!(fd >= 0, "bpf({cmd}): {}", std::io::Error::last_os_error());
    // SAFETY: a new file descriptor, now ours.
    unsafe { OwnedFd::from_raw_fd(fd as i32) }
}

/// Attaches `foreign_ok`, which returns `TC_ACT_OK` for every packet and so ends the chain, to
/// `eth0` of the calling thread's network namespace at ingress and egress, with TCX (as Cilium
/// does: at the tail with `flags` 0, at the head with [`BPF_F_BEFORE`]). Returns its links:
/// closing them detaches it.
pub fn foreign_tcx(flags: u32) -> Vec<OwnedFd> {
    // r0 = 0 (TC_ACT_OK); exit
    let insns: [u64; 2] = [0x0000_0000_0000_00b7, 0x0000_0000_0000_0095];
    let license = c"GPL";
    let mut attr = [0u8; 128];
    attr[0..4].copy_from_slice(&BPF_PROG_TYPE_SCHED_CLS.to_ne_bytes());
    attr[4..8].copy_from_slice(&2u32.to_ne_bytes());
    attr[8..16].copy_from_slice(&(insns.as_ptr() as u64).to_ne_bytes());
    attr[16..24].copy_from_slice(&(license.as_ptr() as u64).to_ne_bytes());
    attr[48..58].copy_from_slice(b"foreign_ok");
    let prog = bpf(BPF_PROG_LOAD, &attr);
    // SAFETY: a NUL-terminated name.
    let ifindex = unsafe { libc::if_nametoindex(c"eth0".as_ptr()) };
    assert_ne!(ifindex, 0, "no eth0");
    let mut links = vec![];
    for attach_type in [BPF_TCX_INGRESS, BPF_TCX_EGRESS] {
        let mut attr = [0u8; 64];
        attr[0..4].copy_from_slice(&(prog.as_raw_fd() as u32).to_ne_bytes());
        attr[4..8].copy_from_slice(&ifindex.to_ne_bytes());
        attr[8..12].copy_from_slice(&attach_type.to_ne_bytes());
        attr[12..16].copy_from_slice(&flags.to_ne_bytes());
        links.push(bpf(BPF_LINK_CREATE, &attr));
    }
    links
}

/// The ID of the program a link (from [`foreign_tcx`]) runs (`BPF_OBJ_GET_INFO_BY_FD`: `struct
/// bpf_link_info` has `type`, `id`, then `prog_id`).
pub fn link_program_id(link: &OwnedFd) -> u32 {
    const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
    let mut info = [0u8; 16];
    let mut attr = [0u8; 16];
    attr[0..4].copy_from_slice(&(link.as_raw_fd() as u32).to_ne_bytes());
    attr[4..8].copy_from_slice(&(info.len() as u32).to_ne_bytes());
    attr[8..16].copy_from_slice(&(info.as_mut_ptr() as u64).to_ne_bytes());
    // SAFETY: `attr` and `info` outlive the call; the kernel writes at most `info.len()` bytes.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_OBJ_GET_INFO_BY_FD,
            attr.as_mut_ptr(),
            attr.len(),
        )
    };
    assert_eq!(rc, 0, "link info: {}", std::io::Error::last_os_error());
    u32::from_ne_bytes(info[8..12].try_into().expect("four bytes"))
}
