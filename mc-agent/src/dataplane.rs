//! Loading the programs with pinned maps and attaching them to the uplink with pinned TCX links.
//!
//! First start: maps are created and pinned, the program is attached at ingress and egress and
//! both links are pinned. Every later start (a restart or a new binary): the pinned maps are
//! reused as they are (no counter or table is reset) and the new program replaces the old one
//! inside the existing links with `BPF_LINK_UPDATE`, which is atomic — the hook never runs
//! without a program.

use std::{io, path::PathBuf};

use aya::{
    Ebpf, EbpfError, EbpfLoader,
    maps::{MapData, PerCpuArray},
    programs::{
        LinkOrder, ProgramError, SchedClassifier, TcAttachType,
        links::{FdLink, LinkError, PinnedLink},
        tc::{SchedClassifierLink, TcAttach},
    },
    sys::SyscallError,
};
use mc_common::{CounterValue, maps, programs};
use serde::Serialize;

use crate::bpffs::{PinLayout, PinRootError};

#[derive(Debug, thiserror::Error)]
pub enum DataplaneError {
    #[error(transparent)]
    PinRoot(#[from] PinRootError),
    #[error(
        "uplink interface {0:?} does not exist on this Node; set `uplink` in the agent config to \
         the interface that holds the Node's InternalIP"
    )]
    UnknownInterface(String),
    #[error("loading the eBPF object failed (see the verifier log above): {0}")]
    Load(#[from] EbpfError),
    #[error("program {name}: {source}")]
    Program {
        name: &'static str,
        #[source]
        source: ProgramError,
    },
    #[error("link {path}: {message}")]
    Link { path: PathBuf, message: String },
}

/// Which hooks a program is attached to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    Ingress,
    Egress,
}

impl Direction {
    pub const BOTH: [Direction; 2] = [Direction::Ingress, Direction::Egress];

    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Ingress => "ingress",
            Direction::Egress => "egress",
        }
    }

    fn attach_type(self) -> TcAttachType {
        match self {
            Direction::Ingress => TcAttachType::Ingress,
            Direction::Egress => TcAttachType::Egress,
        }
    }
}

/// What happened to one hook.
#[derive(Clone, Debug, Serialize)]
pub struct HookState {
    pub direction: Direction,
    /// `true` when an existing pinned link was kept and its program replaced.
    pub reused: bool,
    pub link_pin: PathBuf,
}

/// The loaded object; maps are pinned (or reused) as soon as it exists.
pub struct Dataplane {
    ebpf: Ebpf,
    layout: PinLayout,
}

impl Dataplane {
    /// Loads the embedded object, reusing every map already pinned under the layout's root.
    pub fn load(layout: PinLayout) -> Result<Self, DataplaneError> {
        Self::load_object(layout, crate::EBPF_OBJECT)
    }

    fn load_object(layout: PinLayout, object: &[u8]) -> Result<Self, DataplaneError> {
        layout.prepare()?;
        let pins: Vec<(&'static str, PathBuf)> =
            maps::ALL.iter().map(|&m| (m, layout.map(m))).collect();
        let mut loader = EbpfLoader::new();
        for (name, path) in &pins {
            loader.map_pin_path(name, path.as_path());
        }
        let mut ebpf = loader.load(object)?;
        let program = uplink_program(&mut ebpf)?;
        program.load().map_err(|source| DataplaneError::Program {
            name: programs::UPLINK,
            source,
        })?;
        Ok(Self { ebpf, layout })
    }

    /// Attaches (or re-attaches) the uplink program at ingress and egress of `interface`.
    pub fn attach_uplink(&mut self, interface: &str) -> Result<Vec<HookState>, DataplaneError> {
        let if_index = if_index(interface)
            .ok_or_else(|| DataplaneError::UnknownInterface(interface.to_owned()))?;
        let layout = self.layout.clone();
        let program = uplink_program(&mut self.ebpf)?;
        Direction::BOTH
            .iter()
            .map(|&direction| attach_one(program, &layout, interface, if_index, direction))
            .collect()
    }

    /// The loaded program, for `BPF_PROG_TEST_RUN`.
    pub fn uplink_program(&mut self) -> Result<&mut SchedClassifier, DataplaneError> {
        uplink_program(&mut self.ebpf)
    }

    /// The counters map of this object (the pinned one when pins exist).
    pub fn counters(&self) -> Result<PerCpuArray<&MapData, CounterValue>, DataplaneError> {
        let map = self
            .ebpf
            .map(maps::COUNTERS)
            .ok_or_else(|| DataplaneError::Load(EbpfError::MapError(missing_map())))?;
        PerCpuArray::try_from(map).map_err(|e| DataplaneError::Load(EbpfError::MapError(e)))
    }
}

fn missing_map() -> aya::maps::MapError {
    aya::maps::MapError::InvalidName {
        name: maps::COUNTERS.to_owned(),
    }
}

fn uplink_program(ebpf: &mut Ebpf) -> Result<&mut SchedClassifier, DataplaneError> {
    let program = ebpf
        .program_mut(programs::UPLINK)
        .ok_or(DataplaneError::Program {
            name: programs::UPLINK,
            source: ProgramError::UnexpectedProgramType,
        })?;
    program
        .try_into()
        .map_err(|source| DataplaneError::Program {
            name: programs::UPLINK,
            source,
        })
}

fn attach_one(
    program: &mut SchedClassifier,
    layout: &PinLayout,
    interface: &str,
    if_index: u32,
    direction: Direction,
) -> Result<HookState, DataplaneError> {
    let path = layout.link(interface, direction.as_str());
    let link_err = |message: String| DataplaneError::Link {
        path: path.clone(),
        message,
    };
    let program_err = |source| DataplaneError::Program {
        name: programs::UPLINK,
        source,
    };
    match PinnedLink::from_pin(&path) {
        Ok(pinned) => {
            // Keep the link (and the hook it holds) and swap the program inside it.
            let link = SchedClassifierLink::try_from(FdLink::from(pinned))
                .map_err(|e| link_err(format!("not a TCX link: {e}")))?;
            let id = program.attach_to_link(link).map_err(program_err)?;
            // The link stays pinned; dropping our handle only closes a file descriptor.
            drop(program.take_link(id).map_err(program_err)?);
            Ok(HookState {
                direction,
                reused: true,
                link_pin: path,
            })
        }
        Err(LinkError::SyscallError(SyscallError { io_error, .. }))
            if io_error.kind() == io::ErrorKind::NotFound =>
        {
            let id = program
                .attach(
                    if_index,
                    TcAttach::Tcx {
                        attach_type: direction.attach_type(),
                        order: LinkOrder::default(),
                    },
                )
                .map_err(program_err)?;
            let link = program.take_link(id).map_err(program_err)?;
            let fd_link =
                FdLink::try_from(link).map_err(|e| link_err(format!("not an fd link: {e}")))?;
            fd_link
                .pin(&path)
                .map_err(|e| link_err(format!("pinning: {e}")))?;
            Ok(HookState {
                direction,
                reused: false,
                link_pin: path,
            })
        }
        Err(e) => Err(link_err(format!("opening the pinned link: {e}"))),
    }
}

/// Detaches the programs from `interface` and removes their pinned links and, with `maps`, the
/// pinned maps too. Missing pins are not an error: detaching twice is a no-op.
pub fn detach(layout: &PinLayout, interface: &str, remove_maps: bool) -> io::Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    let links: Vec<PathBuf> = Direction::BOTH
        .iter()
        .map(|d| layout.link(interface, d.as_str()))
        .collect();
    for link in &links {
        // Dropping the last reference to a link detaches it only once the kernel releases the
        // pin's inode; BPF_LINK_DETACH takes the program off the hook now.
        match link_detach(link) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    let mut paths = links;
    if remove_maps {
        paths.extend(maps::ALL.iter().map(|m| layout.map(m)));
    }
    for path in paths {
        match std::fs::remove_file(&path) {
            Ok(()) => removed.push(path),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(removed)
}

fn if_index(name: &str) -> Option<u32> {
    let c_name = std::ffi::CString::new(name).ok()?;
    // SAFETY: NUL-terminated string we own.
    let index = unsafe { libc::if_nametoindex(c_name.as_ptr()) };
    (index != 0).then_some(index)
}

/// `BPF_OBJ_GET` of a pinned link, then `BPF_LINK_DETACH` on it.
fn link_detach(path: &std::path::Path) -> io::Result<()> {
    use std::os::{fd::FromRawFd as _, unix::ffi::OsStrExt as _};
    const BPF_OBJ_GET: libc::c_long = 7;
    const BPF_LINK_DETACH: libc::c_long = 34;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // union bpf_attr, BPF_OBJ_GET member: { u64 pathname; u32 bpf_fd; u32 file_flags; ... }
    let get_attr: [u64; 3] = [c_path.as_ptr() as u64, 0, 0];
    // SAFETY: the attr buffer outlives the call; the kernel reads at most its size.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_OBJ_GET,
            get_attr.as_ptr(),
            std::mem::size_of_val(&get_attr),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the syscall returned a new file descriptor that we now own.
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) };
    use std::os::fd::AsRawFd as _;
    // BPF_LINK_DETACH member: { u32 link_fd; }
    let detach_attr: [u32; 2] = [fd.as_raw_fd() as u32, 0];
    // SAFETY: as above.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_LINK_DETACH,
            detach_attr.as_ptr(),
            std::mem::size_of_val(&detach_attr),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
