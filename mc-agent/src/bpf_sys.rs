//! The few `bpf(2)` commands the agent issues itself: where aya has no public call for one
//! (the netfilter programs), or where aya's call needs more privilege than the agent is given
//! (aya's `query_tcx` opens every program of the chain by ID, which takes CAP_SYS_ADMIN; the
//! agent runs with CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN and CAP_NET_RAW). Each `attr` is a
//! `union bpf_attr` prefix written field by field at the offsets of `<linux/bpf.h>`.

use std::{
    io,
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
};

const BPF_PROG_GET_FD_BY_ID: libc::c_long = 13;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
const BPF_PROG_QUERY: libc::c_long = 16;
/// `BPF_TCX_INGRESS` of `enum bpf_attach_type` (`BPF_TCX_EGRESS` is the next).
pub const BPF_TCX_INGRESS: u32 = 46;
pub const BPF_TCX_EGRESS: u32 = 47;

/// `bpf(cmd, attr, sizeof attr)`: its return value, or the error it set.
pub fn bpf(cmd: libc::c_long, attr: &mut [u8]) -> io::Result<i64> {
    // SAFETY: `attr` is a `union bpf_attr` prefix the kernel reads (and may write) within its
    // length; every pointer in it outlives the call.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), attr.len()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rc)
}

pub fn put32(attr: &mut [u8], at: usize, v: u32) {
    attr[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}

pub fn put64(attr: &mut [u8], at: usize, v: u64) {
    attr[at..at + 8].copy_from_slice(&v.to_ne_bytes());
}

fn get32(attr: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(attr[at..at + 4].try_into().expect("four bytes"))
}

/// The IDs of the programs in the TCX chain of `if_index` at `attach_type`, first to run
/// first (`BPF_PROG_QUERY`, which CAP_NET_ADMIN allows).
pub fn tcx_program_ids(if_index: u32, attach_type: u32) -> io::Result<Vec<u32>> {
    let mut room = 16usize;
    loop {
        let mut ids = vec![0u32; room];
        // query: target_ifindex 0, attach_type 4, query_flags 8, attach_flags 12, prog_ids 16,
        // prog_cnt 24, prog_attach_flags 32, link_ids 40, link_attach_flags 48, revision 56.
        let mut attr = [0u8; 64];
        put32(&mut attr, 0, if_index);
        put32(&mut attr, 4, attach_type);
        put64(&mut attr, 16, ids.as_mut_ptr() as u64);
        put32(&mut attr, 24, room as u32);
        match bpf(BPF_PROG_QUERY, &mut attr) {
            Ok(_) => {
                ids.truncate(get32(&attr, 24) as usize);
                return Ok(ids);
            }
            // More programs than room: the kernel says how many there are.
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) && room < 1 << 16 => {
                room = (get32(&attr, 24) as usize).max(room * 2);
            }
            Err(e) => return Err(e),
        }
    }
}

/// The name of the loaded program `id` (`BPF_PROG_GET_FD_BY_ID`, which takes CAP_SYS_ADMIN:
/// without it, `PermissionDenied`).
pub fn program_name(id: u32) -> io::Result<String> {
    let mut attr = [0u8; 12];
    put32(&mut attr, 0, id);
    let fd = bpf(BPF_PROG_GET_FD_BY_ID, &mut attr)?;
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    // struct bpf_prog_info up to its name (offset 64, 16 bytes).
    let mut info = [0u8; 80];
    let mut attr = [0u8; 16];
    put32(&mut attr, 0, fd.as_raw_fd() as u32);
    put32(&mut attr, 4, info.len() as u32);
    put64(&mut attr, 8, info.as_mut_ptr() as u64);
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    let name = &info[64..80];
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Ok(String::from_utf8_lossy(&name[..end]).into_owned())
}
