//! The policy program at netfilter's PREROUTING (docs/design.md §4b): loaded from the same
//! object as the uplink programs, with the same pinned maps, as `BPF_PROG_TYPE_NETFILTER`, which
//! aya 0.16 does not know: the object is parsed and its map references relocated with aya-obj,
//! then `BPF_PROG_LOAD`, `BPF_LINK_CREATE` and `BPF_OBJ_PIN` are called directly. The link is
//! pinned as `links/netfilter_ingress`; a restart attaches the new program first and only then
//! detaches the old one (a netfilter link cannot swap its program), so there is no moment
//! without a decision. The running agent keeps the program loaded and links it only while its
//! Node has something to decide ([`PolicyHook`]); elsewhere no packet pays for the hook.
//!
//! The program reads the kernel's `sk_buff` and conntrack entry by plain loads, built with
//! placeholder offsets (`mc_common::dataplane::nf_patch`): this module finds the real ones, and
//! the BTF IDs of `struct nf_conn` and of the `bpf_rdonly_cast` kfunc, in the running kernel's
//! BTF (`/sys/kernel/btf/vmlinux`) and patches them into the instructions before the load
//! (`bpftool prog dump xlated name mc_nf_ingress` shows the result).

use std::{
    collections::{BTreeMap, HashSet},
    ffi::CString,
    io,
    os::{
        fd::{AsFd as _, AsRawFd as _, FromRawFd as _, OwnedFd},
        unix::ffi::OsStrExt as _,
    },
    path::{Path, PathBuf},
};

use aya::maps::MapData;
use mc_common::dataplane::{ct_tuple, nf_patch};

use crate::{
    bpf_sys::{put32, put64},
    bpffs::PinLayout,
};

/// The policy program's name in the object.
pub const PROGRAM: &str = "mc_nf_ingress";

/// Strait's netfilter programs, loaded and linked the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    /// `mc_nf_ingress`, stretched NetworkPolicy's decisions at PREROUTING after the DNAT.
    Policy,
    /// `mc_nf_masq`, at POSTROUTING after the source NAT: the label identity of the Pods'
    /// flows a CNI masqueraded (docs/design.md §4b).
    Masquerade,
}

impl Hook {
    pub const BOTH: [Hook; 2] = [Hook::Policy, Hook::Masquerade];

    /// The program's name in the object (and in `bpftool prog`).
    pub fn program(self) -> &'static str {
        match self {
            Hook::Policy => PROGRAM,
            Hook::Masquerade => "mc_nf_masq",
        }
    }

    fn hook_number(self) -> u32 {
        match self {
            Hook::Policy => NF_INET_PRE_ROUTING,
            Hook::Masquerade => NF_INET_POST_ROUTING,
        }
    }

    fn hook_name(self) -> &'static str {
        match self {
            Hook::Policy => "PREROUTING",
            Hook::Masquerade => "POSTROUTING",
        }
    }

    /// Policy: just after the nat table's DNAT (`NF_IP_PRI_NAT_DST`, -100), the destination
    /// is the Pod. Masquerade: just after its SNAT (`NF_IP_PRI_NAT_SRC`, 100), the REPLY tuple
    /// holds the translated source. Two BPF links may not share a priority: a restart attaches
    /// its program at the other one of the two while the earlier link still holds the first,
    /// then detaches the earlier link.
    pub fn priorities(self) -> [i32; 2] {
        match self {
            Hook::Policy => [-99, -98],
            Hook::Masquerade => [101, 102],
        }
    }

    /// The pinned link's name under the links directory.
    fn link_name(self) -> &'static str {
        match self {
            Hook::Policy => "netfilter_ingress",
            Hook::Masquerade => "netfilter_masq",
        }
    }

    /// The placeholders (indexes of [`PLACEHOLDERS`]) the program must hold.
    fn required(self) -> &'static [usize] {
        match self {
            Hook::Policy => &[0, 1, 2, 3, 4, 5, 6],
            Hook::Masquerade => &[0, 3, 4, 5, 6],
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum NetfilterError {
    #[error("reading the kernel's BTF ({path}): {source}")]
    Btf {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "the kernel's BTF has no {0}: stretched ingress policy needs a kernel with BTF and \
         conntrack built in (CONFIG_DEBUG_INFO_BTF, CONFIG_NF_CONNTRACK=y)"
    )]
    MissingType(String),
    #[error("the eBPF object: {0}")]
    Object(String),
    #[error("the pinned map {name}: {message}")]
    Map { name: String, message: String },
    #[error("{what}: {source}")]
    Syscall {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("the kernel refused the netfilter program: {source}\n{log}")]
    Verifier {
        #[source]
        source: io::Error,
        log: String,
    },
}

// ---- BTF: the few offsets the program needs ----

const BTF_MAGIC: u16 = 0xeb9f;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_FUNC: u32 = 12;

/// One struct or union of a BTF blob: its name, size and members (name, type, bit offset).
#[derive(Debug, Clone)]
struct Composite {
    name: String,
    size: u32,
    members: Vec<(String, u32, u32)>,
}

/// Types of a BTF blob: every struct and union by type ID, and the IDs of its functions (others
/// are only counted).
#[derive(Debug, Default)]
pub struct Btf {
    composites: BTreeMap<u32, Composite>,
    functions: BTreeMap<String, u32>,
}

impl Btf {
    /// Parses a BTF blob (the kernel's `/sys/kernel/btf/vmlinux`).
    pub fn parse(data: &[u8]) -> Result<Self, String> {
        let u16_at = |o: usize| data.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
        let u32_at = |o: usize| {
            data.get(o..o + 4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        if u16_at(0) != Some(BTF_MAGIC) {
            return Err("not little-endian BTF (bad magic)".into());
        }
        let field = |i: usize| u32_at(4 + 4 * i).map(|v| v as usize).ok_or("short header");
        let (hdr_len, type_off, type_len, str_off, str_len) =
            (field(0)?, field(1)?, field(2)?, field(3)?, field(4)?);
        let types = hdr_len + type_off;
        let strings = hdr_len + str_off;
        if data.len() < types + type_len || data.len() < strings + str_len {
            return Err("sections past the end of the blob".into());
        }
        let name = |off: u32| -> String {
            let start = strings + off as usize;
            let end = data[start..strings + str_len]
                .iter()
                .position(|&b| b == 0)
                .map_or(strings + str_len, |n| start + n);
            String::from_utf8_lossy(&data[start..end]).into_owned()
        };
        let mut out = Btf::default();
        let (mut at, mut id) = (types, 1u32);
        while at + 12 <= types + type_len {
            let (name_off, info, size) = (
                u32_at(at).ok_or("short type")?,
                u32_at(at + 4).ok_or("short type")?,
                u32_at(at + 8).ok_or("short type")?,
            );
            let (kind, vlen, kind_flag) = ((info >> 24) & 0x1f, info & 0xffff, info >> 31);
            at += 12;
            let extra = match kind {
                1 | 14 | 17 => 4,                      // INT, VAR, DECL_TAG
                3 => 12,                               // ARRAY
                4 | 5 | 15 | 19 => 12 * vlen as usize, // STRUCT, UNION, DATASEC, ENUM64
                6 | 13 => 8 * vlen as usize,           // ENUM, FUNC_PROTO
                2 | 7..=12 | 16 | 18 => 0,
                k => return Err(format!("unknown BTF kind {k} (type {id})")),
            };
            if kind == KIND_FUNC {
                out.functions.insert(name(name_off), id);
            }
            if kind == KIND_STRUCT || kind == KIND_UNION {
                let mut members = Vec::with_capacity(vlen as usize);
                for m in 0..vlen as usize {
                    let o = at + 12 * m;
                    let (mname, mtype, moff) = (
                        u32_at(o).ok_or("short member")?,
                        u32_at(o + 4).ok_or("short member")?,
                        u32_at(o + 8).ok_or("short member")?,
                    );
                    let bits = if kind_flag != 0 {
                        moff & 0x00ff_ffff
                    } else {
                        moff
                    };
                    members.push((name(mname), mtype, bits));
                }
                out.composites.insert(
                    id,
                    Composite {
                        name: name(name_off),
                        size,
                        members,
                    },
                );
            }
            at += extra;
            id += 1;
        }
        Ok(out)
    }

    fn composite(&self, name: &str) -> Result<&Composite, NetfilterError> {
        self.composites
            .values()
            .find(|c| c.name == name && !c.members.is_empty())
            .ok_or_else(|| NetfilterError::MissingType(format!("struct {name}")))
    }

    /// The byte offset of `member` in struct `name`, looking into anonymous members.
    pub fn offset(&self, name: &str, member: &str) -> Result<u32, NetfilterError> {
        let c = self.composite(name)?;
        self.find(c, member)
            .map(|bits| bits / 8)
            .ok_or_else(|| NetfilterError::MissingType(format!("{name}.{member}")))
    }

    fn find(&self, c: &Composite, member: &str) -> Option<u32> {
        for (name, ty, bits) in &c.members {
            if name == member {
                return Some(*bits);
            }
            if name.is_empty()
                && let Some(inner) = self.composites.get(ty)
                && let Some(b) = self.find(inner, member)
            {
                return Some(bits + b);
            }
        }
        None
    }

    /// The size of struct `name`.
    pub fn size(&self, name: &str) -> Result<u32, NetfilterError> {
        Ok(self.composite(name)?.size)
    }

    /// The type ID of struct `name` (its definition, not a forward declaration).
    pub fn struct_id(&self, name: &str) -> Result<u32, NetfilterError> {
        self.composites
            .iter()
            .find(|(_, c)| c.name == name && !c.members.is_empty())
            .map(|(id, _)| *id)
            .ok_or_else(|| NetfilterError::MissingType(format!("struct {name}")))
    }

    /// The type ID of function `name` (a kfunc's, for a call).
    pub fn function_id(&self, name: &str) -> Result<u32, NetfilterError> {
        self.functions
            .get(name)
            .copied()
            .ok_or_else(|| NetfilterError::MissingType(format!("function {name}")))
    }

    /// What goes in place of the policy program's placeholders, for this kernel.
    pub fn patch(&self) -> Result<Patch, NetfilterError> {
        let tuple = self.offset("nf_conntrack_tuple_hash", "tuple")?;
        let original = self.offset("nf_conn", "tuplehash")? + tuple;
        Ok(Patch {
            skb_nfct: self.offset("sk_buff", "_nfct")?,
            skb_len: self.offset("sk_buff", "len")?,
            skb_data: self.offset("sk_buff", "data")?,
            ct_tuple_original: original,
            ct_tuple_reply: original + self.size("nf_conntrack_tuple_hash")?,
            rdonly_cast: self.function_id("bpf_rdonly_cast")?,
            nf_conn: self.struct_id("nf_conn")?,
        })
    }
}

/// What the running kernel puts in place of the policy program's placeholders
/// (`mc_common::dataplane::nf_patch`): byte offsets of the fields it reads and BTF type IDs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Patch {
    /// `struct sk_buff`: `_nfct`, `len`, `data`.
    pub skb_nfct: u32,
    pub skb_len: u32,
    pub skb_data: u32,
    /// `struct nf_conn`: the ORIGINAL and the REPLY direction's `struct nf_conntrack_tuple`.
    pub ct_tuple_original: u32,
    pub ct_tuple_reply: u32,
    /// The `bpf_rdonly_cast` kfunc's BTF ID.
    pub rdonly_cast: u32,
    /// `struct nf_conn`'s BTF ID.
    pub nf_conn: u32,
}

/// The running kernel's [`Patch`].
pub fn running_kernel_patch() -> Result<Patch, NetfilterError> {
    let path = PathBuf::from("/sys/kernel/btf/vmlinux");
    let data = std::fs::read(&path).map_err(|source| NetfilterError::Btf {
        path: path.clone(),
        source,
    })?;
    Btf::parse(&data)
        .map_err(|e| NetfilterError::Btf {
            path,
            source: io::Error::new(io::ErrorKind::InvalidData, e),
        })?
        .patch()
}

const BPF_LDX: u8 = 0x01;
const BPF_MEM: u8 = 0x60;
const BPF_CALL: u8 = 0x85;
const BPF_MOV64_K: u8 = 0xb7;
const BPF_MOV32_K: u8 = 0xb4;
const BPF_PSEUDO_KFUNC_CALL: u8 = 2;

/// What [`patch_instructions`] looks for, by kind (for its error).
const PLACEHOLDERS: [&str; 7] = [
    "sk_buff._nfct",
    "sk_buff.len",
    "sk_buff.data",
    "the ORIGINAL tuple",
    "the REPLY tuple",
    "the bpf_rdonly_cast call",
    "struct nf_conn's type ID",
];

/// Replaces the placeholders in the policy program's instructions with `p`: every load whose
/// offset is one, the placeholder call (the kfunc) and the type ID its argument names. Each kind
/// must be there at least once, else the object is not the program this agent was built with.
pub fn patch_instructions(insns: &mut [u64], p: &Patch) -> Result<(), NetfilterError> {
    patch_program(insns, p, Hook::Policy)
}

/// [`patch_instructions`] for either program: the placeholders `hook`'s program must hold.
pub fn patch_program(insns: &mut [u64], p: &Patch, hook: Hook) -> Result<(), NetfilterError> {
    // (placeholder, how many bytes from it are the field's, the kernel's offset)
    let loads: [(i16, i16, u32); 5] = [
        (nf_patch::SKB_NFCT, 1, p.skb_nfct),
        (nf_patch::SKB_LEN, 1, p.skb_len),
        (nf_patch::SKB_DATA, 1, p.skb_data),
        (
            nf_patch::CT_ORIGINAL,
            ct_tuple::LEN as i16,
            p.ct_tuple_original,
        ),
        (nf_patch::CT_REPLY, ct_tuple::LEN as i16, p.ct_tuple_reply),
    ];
    let mut found = [0usize; PLACEHOLDERS.len()];
    for insn in insns.iter_mut() {
        let mut b = insn.to_le_bytes();
        let code = b[0];
        let off = i16::from_le_bytes([b[2], b[3]]);
        let imm = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        if code & 0x07 == BPF_LDX && code & 0xe0 == BPF_MEM {
            let Some((k, &(at, _, real))) = loads
                .iter()
                .enumerate()
                .find(|(_, (at, span, _))| off >= *at && off < at + span)
            else {
                continue;
            };
            let real = i16::try_from(i64::from(real) + i64::from(off - at)).map_err(|_| {
                NetfilterError::Object(format!("offset {real} does not fit a load"))
            })?;
            b[2..4].copy_from_slice(&real.to_le_bytes());
            found[k] += 1;
        } else if code == BPF_CALL && b[1] == 0 && off == 0 && imm == nf_patch::RDONLY_CAST {
            b[1] = BPF_PSEUDO_KFUNC_CALL << 4;
            b[4..8].copy_from_slice(&p.rdonly_cast.to_le_bytes());
            found[5] += 1;
        } else if (code == BPF_MOV64_K || code == BPF_MOV32_K) && imm == nf_patch::NF_CONN_TYPE {
            b[4..8].copy_from_slice(&p.nf_conn.to_le_bytes());
            found[6] += 1;
        } else {
            continue;
        }
        *insn = u64::from_le_bytes(b);
    }
    if let Some(&k) = hook.required().iter().find(|&&k| found[k] == 0) {
        return Err(NetfilterError::Object(format!(
            "{} has no placeholder for {} (an object built for another agent?)",
            hook.program(),
            PLACEHOLDERS[k]
        )));
    }
    Ok(())
}

// ---- loading and attaching ----

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_OBJ_PIN: libc::c_long = 6;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_PROG_TYPE_NETFILTER: u32 = 32;
const BPF_NETFILTER: u32 = 45;
const NFPROTO_IPV4: u32 = 2;
const NF_INET_PRE_ROUTING: u32 = 0;
const NF_INET_POST_ROUTING: u32 = 4;

fn bpf(cmd: libc::c_long, attr: &mut [u8], what: &str) -> Result<i64, NetfilterError> {
    crate::bpf_sys::bpf(cmd, attr).map_err(|source| NetfilterError::Syscall {
        what: what.to_owned(),
        source,
    })
}

/// The pinned maps a program refers to, by name: their file descriptors must stay open until the
/// program is loaded.
type OpenMaps = Vec<(String, MapData)>;

/// A netfilter program's instructions from `object`, its maps relocated to the pinned ones, and
/// those maps.
fn instructions(
    object: &[u8],
    layout: &PinLayout,
    program: &str,
) -> Result<(Vec<u64>, OpenMaps), NetfilterError> {
    let mut obj =
        aya_obj::Object::parse(object).map_err(|e| NetfilterError::Object(e.to_string()))?;
    let objs = obj.maps.clone();
    let mut opened = Vec::new();
    for name in objs.keys() {
        let data = MapData::from_pin(layout.map(name)).map_err(|e| NetfilterError::Map {
            name: name.clone(),
            message: e.to_string(),
        })?;
        opened.push((name.clone(), data));
    }
    let text_sections: HashSet<usize> = obj.functions.keys().map(|(s, _)| *s).collect();
    obj.relocate_maps(
        opened
            .iter()
            .map(|(name, data)| (name.as_str(), data.fd().as_fd().as_raw_fd(), &objs[name])),
        &text_sections,
    )
    .map_err(|e| NetfilterError::Object(e.to_string()))?;
    obj.relocate_calls(&text_sections)
        .map_err(|e| NetfilterError::Object(e.to_string()))?;
    let program = obj
        .programs
        .get(program)
        .ok_or_else(|| NetfilterError::Object(format!("no program {program}")))?;
    let function = &obj.functions[&program.function_key()];
    let insns = function
        .instructions
        .iter()
        // SAFETY: `bpf_insn` is 8 plain bytes.
        .map(|i| unsafe { std::mem::transmute::<aya_obj::generated::bpf_insn, u64>(*i) })
        .collect();
    Ok((insns, opened))
}

fn load_program(insns: &[u64], program: &str) -> Result<OwnedFd, NetfilterError> {
    let license = CString::from(c"GPL");
    let mut log = vec![0u8; 1 << 20];
    let mut attr = [0u8; 128];
    put32(&mut attr, 0, BPF_PROG_TYPE_NETFILTER);
    put32(&mut attr, 4, insns.len() as u32);
    put64(&mut attr, 8, insns.as_ptr() as u64);
    put64(&mut attr, 16, license.as_ptr() as u64);
    // The kernel keeps 15 characters and a NUL.
    let name = &program.as_bytes()[..program.len().min(15)];
    attr[48..48 + name.len()].copy_from_slice(name);
    put32(&mut attr, 68, BPF_NETFILTER);
    match bpf(BPF_PROG_LOAD, &mut attr, "BPF_PROG_LOAD") {
        // SAFETY: a new file descriptor, now ours.
        Ok(fd) => Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) }),
        Err(_) => {
            // Again with the verifier's log, to say why.
            put32(&mut attr, 24, 1);
            put32(&mut attr, 28, log.len() as u32);
            put64(&mut attr, 32, log.as_mut_ptr() as u64);
            let source = match bpf(BPF_PROG_LOAD, &mut attr, "BPF_PROG_LOAD") {
                // SAFETY: as above (loaded the second time: keep it).
                Ok(fd) => return Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) }),
                Err(NetfilterError::Syscall { source, .. }) => source,
                Err(e) => return Err(e),
            };
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let text = String::from_utf8_lossy(&log[..end]);
            let tail: Vec<&str> = text.lines().rev().take(20).collect();
            Err(NetfilterError::Verifier {
                source,
                log: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
            })
        }
    }
}

fn link_create(prog: &OwnedFd, hook: Hook, priority: i32) -> Result<OwnedFd, NetfilterError> {
    let mut attr = [0u8; 64];
    put32(&mut attr, 0, prog.as_raw_fd() as u32);
    put32(&mut attr, 8, BPF_NETFILTER);
    put32(&mut attr, 16, NFPROTO_IPV4);
    put32(&mut attr, 20, hook.hook_number());
    attr[24..28].copy_from_slice(&priority.to_ne_bytes());
    let fd = bpf(
        BPF_LINK_CREATE,
        &mut attr,
        &format!("BPF_LINK_CREATE (netfilter, {})", hook.hook_name()),
    )?;
    // SAFETY: a new file descriptor, now ours.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn c_path(path: &Path) -> Result<CString, NetfilterError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|e| NetfilterError::Syscall {
        what: format!("{}", path.display()),
        source: io::Error::new(io::ErrorKind::InvalidInput, e),
    })
}

fn pin(fd: &OwnedFd, path: &Path) -> Result<(), NetfilterError> {
    let p = c_path(path)?;
    let mut attr = [0u8; 16];
    put64(&mut attr, 0, p.as_ptr() as u64);
    put32(&mut attr, 8, fd.as_raw_fd() as u32);
    bpf(
        BPF_OBJ_PIN,
        &mut attr,
        &format!("pinning {}", path.display()),
    )
    .map(|_| ())
}

/// The policy program's pinned link's path.
pub fn link_path(layout: &PinLayout) -> PathBuf {
    hook_link_path(layout, Hook::Policy)
}

/// A netfilter program's pinned link's path.
pub fn hook_link_path(layout: &PinLayout, hook: Hook) -> PathBuf {
    layout.links_dir().join(hook.link_name())
}

/// Where a new link is pinned before it is renamed over the old one (bpffs refuses names with a
/// dot); a start that stopped between the two leaves it behind.
fn fresh_link_path(layout: &PinLayout, hook: Hook) -> PathBuf {
    layout.links_dir().join(format!("{}_new", hook.link_name()))
}

/// Loads both netfilter programs from `object`, patched for this kernel, and attaches them
/// (replacing pinned ones from an earlier start): what `mc-agent attach --stretched-policy`
/// does. Each program and its pinned link's path.
pub fn attach(object: &[u8], layout: &PinLayout) -> Result<Vec<(Hook, PathBuf)>, NetfilterError> {
    let mut links = Vec::new();
    for which in Hook::BOTH {
        let mut hook = PolicyHook::load_hook(object, layout, which)?;
        hook.attach()?;
        links.push((which, hook.link_path()));
    }
    Ok(links)
}

/// The policy program, loaded once when the agent starts and linked at PREROUTING only while
/// this Node has something to decide (on the gateway, a Pod of the cluster a ClusterSet-scoped
/// ingress rule covers; on any Node, an egress `toServices` rule for one of its Pods): on the
/// other Nodes no packet pays for the hook (docs/design.md §4b).
pub struct PolicyHook {
    hook: Hook,
    layout: PinLayout,
    prog: OwnedFd,
    /// Whether the pinned link holds this program (attached or replaced since this start).
    linked: bool,
}

impl PolicyHook {
    /// Loads the program, patched for the running kernel; attaches nothing (a link an earlier
    /// start pinned stays until [`Self::attach`] replaces it or [`Self::detach`] removes it).
    pub fn load(object: &[u8], layout: &PinLayout) -> Result<Self, NetfilterError> {
        Self::load_hook(object, layout, Hook::Policy)
    }

    /// [`Self::load`] for either of the two programs.
    pub fn load_hook(
        object: &[u8],
        layout: &PinLayout,
        hook: Hook,
    ) -> Result<Self, NetfilterError> {
        let patch = running_kernel_patch()?;
        let (mut insns, _maps) = instructions(object, layout, hook.program())?;
        patch_program(&mut insns, &patch, hook)?;
        Ok(Self {
            hook,
            layout: layout.clone(),
            prog: load_program(&insns, hook.program())?,
            linked: false,
        })
    }

    /// Which of the two programs this is.
    pub fn hook(&self) -> Hook {
        self.hook
    }

    /// The pinned link's path.
    pub fn link_path(&self) -> PathBuf {
        hook_link_path(&self.layout, self.hook)
    }

    /// Links the program at PREROUTING unless it already is; `true` when this call linked it.
    /// An earlier start's link is replaced: the new link is pinned beside the old one before the
    /// old one goes, and renamed over it, so an agent killed at any step leaves a pinned,
    /// attached program (two at most, which the next start reduces to one), never none.
    pub fn attach(&mut self) -> Result<bool, NetfilterError> {
        let path = self.link_path();
        if self.linked && path.exists() {
            return Ok(false);
        }
        let fresh = fresh_link_path(&self.layout, self.hook);
        if fresh.exists() {
            // An earlier start stopped between pinning its link and renaming it: keep one of the two.
            if path.exists() {
                detach_and_unpin(&fresh)?;
            } else {
                std::fs::rename(&fresh, &path).map_err(|source| NetfilterError::Syscall {
                    what: format!("renaming {} to {}", fresh.display(), path.display()),
                    source,
                })?;
            }
        }
        let [first, second] = self.hook.priorities();
        let link = match link_create(&self.prog, self.hook, first) {
            Err(NetfilterError::Syscall { source, .. })
                if source.raw_os_error() == Some(libc::EBUSY) =>
            {
                link_create(&self.prog, self.hook, second)?
            }
            other => other?,
        };
        pin(&link, &fresh)?;
        if path.exists() {
            detach_and_unpin(&path)?;
        }
        std::fs::rename(&fresh, &path).map_err(|source| NetfilterError::Syscall {
            what: format!("renaming {} to {}", fresh.display(), path.display()),
            source,
        })?;
        self.linked = true;
        Ok(true)
    }

    /// Takes the program off PREROUTING (this start's link or an earlier one's); `true` when
    /// there was a link. Call it only once the maps say there is nothing to decide.
    pub fn detach(&mut self) -> Result<bool, NetfilterError> {
        self.linked = false;
        unlink_hook(&self.layout, self.hook)
    }
}

/// Takes the pinned netfilter programs off their hooks (and half-renamed ones a stopped start
/// left); `true` when there was one. The agent calls it at start with stretched policy off, so
/// that an earlier agent's links do not stay.
pub fn unlink(layout: &PinLayout) -> Result<bool, NetfilterError> {
    let mut removed = false;
    for hook in Hook::BOTH {
        removed |= unlink_hook(layout, hook)?;
    }
    Ok(removed)
}

fn unlink_hook(layout: &PinLayout, hook: Hook) -> Result<bool, NetfilterError> {
    let mut removed = false;
    for path in [fresh_link_path(layout, hook), hook_link_path(layout, hook)] {
        if path.exists() {
            detach_and_unpin(&path)?;
            removed = true;
        }
    }
    Ok(removed)
}

fn detach_and_unpin(path: &Path) -> Result<(), NetfilterError> {
    crate::dataplane::detach_pinned_link(path).map_err(|source| NetfilterError::Syscall {
        what: format!("detaching the earlier {}", path.display()),
        source,
    })?;
    let _ = std::fs::remove_file(path);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The policy program is loaded from the uplink programs' object with every map it refers
    /// to opened by its pin: the object may have no map the agent does not pin, such as the
    /// `.rodata` a constant the programs take the address of ends up in.
    #[test]
    fn the_object_has_only_maps_the_agent_pins() {
        let object = aya_obj::Object::parse(crate::EBPF_OBJECT).expect("the embedded object");
        for name in object.maps.keys() {
            assert!(
                mc_common::maps::ALL.contains(&name.as_str()),
                "map {name} in the eBPF object is not one the agent pins (a `.rodata`: a constant \
                 whose address a program takes; keep it in a local or compare it as a word)"
            );
        }
    }

    /// The running kernel's BTF gives offsets inside the structures' sizes, the reply tuple
    /// right after the original one, and the IDs of `struct nf_conn` and `bpf_rdonly_cast`
    /// (the values themselves differ from build to build).
    #[test]
    fn patch_of_the_running_kernel() {
        let Ok(p) = running_kernel_patch() else {
            eprintln!("no /sys/kernel/btf/vmlinux here: skipped");
            return;
        };
        let data = std::fs::read("/sys/kernel/btf/vmlinux").unwrap();
        let btf = Btf::parse(&data).unwrap();
        let skb = btf.size("sk_buff").unwrap();
        // The IDs as bpftool numbers the kernel's types (an independent reading of the BTF).
        let dump = std::process::Command::new("bpftool")
            .args(["btf", "dump", "file", "/sys/kernel/btf/vmlinux"])
            .output()
            .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
            .unwrap_or_default();
        let bpftool_id = |kind: &str, name: &str| -> Option<u32> {
            let tag = format!("] {kind} '{name}'");
            let line = dump.lines().find(|l| l.contains(&tag))?;
            line.trim_start_matches('[').split(']').next()?.parse().ok()
        };
        match (
            bpftool_id("STRUCT", "nf_conn"),
            bpftool_id("FUNC", "bpf_rdonly_cast"),
        ) {
            (Some(nf_conn), Some(cast)) => {
                assert_eq!(p.nf_conn, nf_conn, "struct nf_conn's BTF ID");
                assert_eq!(p.rdonly_cast, cast, "bpf_rdonly_cast's BTF ID");
            }
            _ => eprintln!("no bpftool here: the IDs are not checked against it"),
        }
        assert!(p.skb_nfct > 0 && p.skb_nfct < skb);
        assert!(p.skb_len > 0 && p.skb_len < skb);
        assert!(p.skb_data > p.skb_len && p.skb_data < skb);
        let tuple_hash = btf.size("nf_conntrack_tuple_hash").unwrap();
        assert_eq!(p.ct_tuple_reply - p.ct_tuple_original, tuple_hash);
        assert!(p.ct_tuple_reply + 40 <= btf.size("nf_conn").unwrap());
        assert_eq!(btf.size("nf_conntrack_tuple").unwrap(), 40);
    }

    fn insn(code: u8, regs: u8, off: i16, imm: u32) -> u64 {
        let mut b = [code, regs, 0, 0, 0, 0, 0, 0];
        b[2..4].copy_from_slice(&off.to_le_bytes());
        b[4..8].copy_from_slice(&imm.to_le_bytes());
        u64::from_le_bytes(b)
    }

    /// Every placeholder is replaced: loads keep their size and registers and get the kernel's
    /// offset (plus the offset inside the tuple), the call becomes the kfunc's, the type ID its
    /// argument; other instructions stay as they are.
    #[test]
    fn placeholders_are_patched() {
        let p = Patch {
            skb_nfct: 120,
            skb_len: 112,
            skb_data: 200,
            ct_tuple_original: 16,
            ct_tuple_reply: 72,
            rdonly_cast: 65475,
            nf_conn: 37114,
        };
        let ldxdw = 0x79; // BPF_LDX | BPF_MEM | BPF_DW
        let ldxw = 0x61;
        let ldxh = 0x69;
        let mut insns = vec![
            insn(ldxdw, 0x61, nf_patch::SKB_NFCT, 0),
            insn(ldxw, 0x62, nf_patch::SKB_LEN, 0),
            insn(ldxdw, 0x61, nf_patch::SKB_DATA, 0),
            insn(BPF_MOV64_K, 0x02, 0, nf_patch::NF_CONN_TYPE),
            insn(BPF_CALL, 0, 0, nf_patch::RDONLY_CAST),
            insn(ldxh, 0x70, nf_patch::CT_ORIGINAL + 18, 0),
            insn(ldxw, 0x70, nf_patch::CT_REPLY, 0),
            insn(ldxw, 0x71, 8, 0),                  // an ordinary load
            insn(BPF_CALL, 0, 0, 1),                 // a helper call
            insn(BPF_MOV64_K, 0x03, 0, 0x7ffe_0003), // another immediate
            insn(BPF_MOV32_K, 0x02, 0, nf_patch::NF_CONN_TYPE),
        ];
        let kept: Vec<u64> = insns[7..10].to_vec();
        patch_instructions(&mut insns, &p).unwrap();
        assert_eq!(insns[0], insn(ldxdw, 0x61, 120, 0));
        assert_eq!(insns[1], insn(ldxw, 0x62, 112, 0));
        assert_eq!(insns[2], insn(ldxdw, 0x61, 200, 0));
        assert_eq!(insns[3], insn(BPF_MOV64_K, 0x02, 0, 37114));
        assert_eq!(insns[4], insn(BPF_CALL, 0x20, 0, 65475));
        assert_eq!(insns[5], insn(ldxh, 0x70, 16 + 18, 0));
        assert_eq!(insns[6], insn(ldxw, 0x70, 72, 0));
        assert_eq!(&insns[7..10], &kept[..]);
        assert_eq!(insns[10], insn(BPF_MOV32_K, 0x02, 0, 37114));
    }

    /// An object without one of the placeholders (built for another agent) is refused, named.
    #[test]
    fn a_missing_placeholder_is_an_error() {
        let p = Patch {
            skb_nfct: 1,
            skb_len: 1,
            skb_data: 1,
            ct_tuple_original: 1,
            ct_tuple_reply: 1,
            rdonly_cast: 1,
            nf_conn: 1,
        };
        let mut insns = vec![insn(0x79, 0x61, nf_patch::SKB_NFCT, 0)];
        let err = patch_instructions(&mut insns, &p).unwrap_err().to_string();
        assert!(err.contains("sk_buff.len"), "{err}");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(Btf::parse(&[]).is_err());
        assert!(Btf::parse(&[0x9f, 0xeb, 1, 0, 24, 0, 0, 0]).is_err());
        let mut blob = vec![0x9f, 0xeb, 1, 0, 24, 0, 0, 0];
        blob.extend_from_slice(&[0, 0, 0, 0, 255, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert!(Btf::parse(&blob).is_err());
    }
}
