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
    maps::{Array, HashMap, LpmTrie, MapData, MapError, PerCpuArray},
    programs::{
        LinkOrder, ProgramError, SchedClassifier, TcAttachType,
        links::{FdLink, LinkError, PinnedLink},
        tc::{self, NlOptions, SchedClassifierLink, TcAttach, TcHandle},
    },
    sys::SyscallError,
    util::KernelVersion,
};
use mc_common::{
    CounterValue,
    dataplane::{
        EgressKey, Exposed, ExposedKey, FlowKey, LocalConfig, NextHop, Peer, PodIdentity,
        PolicyKey, PolicyVerdict, RemoteRoute, SenderId, SenderIdKey, SnatEntry, WireGuardConfig,
    },
    maps, programs,
};
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

    /// The program that runs at this hook.
    pub fn program(self) -> &'static str {
        match self {
            Direction::Ingress => programs::INGRESS,
            Direction::Egress => programs::EGRESS,
        }
    }

    fn attach_type(self) -> TcAttachType {
        match self {
            Direction::Ingress => TcAttachType::Ingress,
            Direction::Egress => TcAttachType::Egress,
        }
    }

    fn tcx_attach_type(self) -> u32 {
        match self {
            Direction::Ingress => crate::bpf_sys::BPF_TCX_INGRESS,
            Direction::Egress => crate::bpf_sys::BPF_TCX_EGRESS,
        }
    }
}

/// How the programs are attached to the uplink: TCX links (Linux 6.6 and later), or legacy TC
/// filters on a `clsact` qdisc (older kernels: Debian 12, Ubuntu 22.04, Amazon Linux 2023's
/// 6.1). Both run the same programs at the same two hooks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AttachMode {
    Tcx,
    Tc,
}

impl AttachMode {
    /// The agent config's `tcAttach`: `tcx`, `tc`, or empty / `auto` for [`Self::for_kernel`].
    pub fn parse(value: &str) -> Result<Option<Self>, String> {
        match value {
            "" | "auto" => Ok(None),
            "tcx" => Ok(Some(AttachMode::Tcx)),
            "tc" => Ok(Some(AttachMode::Tc)),
            other => Err(format!("{other:?}: expected tcx, tc or auto")),
        }
    }

    /// TCX where the running kernel has it (6.6 and later), else legacy TC.
    pub fn for_kernel() -> Self {
        match KernelVersion::current() {
            Ok(v) if v < KernelVersion::new(6, 6, 0) => AttachMode::Tc,
            _ => AttachMode::Tcx,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            AttachMode::Tcx => "tcx",
            AttachMode::Tc => "tc",
        }
    }
}

/// Legacy TC: Strait's filter at each hook has this priority (the lowest number runs first, as
/// Strait's TCX links come first) and handle, so that a restart replaces it in place.
const TC_PRIORITY: u16 = 1;
const TC_HANDLE: u32 = 0x5175;

/// What happened to one hook.
#[derive(Clone, Debug, Serialize)]
pub struct HookState {
    pub direction: Direction,
    /// `true` when an existing pinned link (or TC filter) was kept and its program replaced.
    pub reused: bool,
    /// The pinned link; with legacy TC, the directory under the pin root that records the
    /// interface's filters (bpffs holds no other files).
    pub link_pin: PathBuf,
    pub mode: AttachMode,
}

impl HookState {
    /// What attaching did, for the log.
    pub fn what(&self) -> &'static str {
        match (self.mode, self.reused) {
            (AttachMode::Tcx, true) => {
                "replaced the program in the pinned link (no detach, maps kept)"
            }
            (AttachMode::Tcx, false) => "attached with TCX and pinned the link",
            (AttachMode::Tc, true) => {
                "replaced the program in Strait's TC filter (legacy TC, clsact; no detach, maps kept)"
            }
            (AttachMode::Tc, false) => {
                "attached as a TC filter on the clsact qdisc (legacy TC: this kernel has no TCX, or tcAttach says tc)"
            }
        }
    }
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
        for retired in maps::RETIRED {
            let _ = std::fs::remove_file(layout.map(retired));
        }
        for name in [
            programs::INGRESS,
            programs::EGRESS,
            programs::WIREGUARD_INGRESS,
        ] {
            classifier(&mut ebpf, name)?
                .load()
                .map_err(|source| DataplaneError::Program { name, source })?;
        }
        Ok(Self { ebpf, layout })
    }

    /// Attaches the WireGuard device's program (`mc_wg_ingress`) to `interface`'s ingress, with
    /// TCX or, where `mode` says so (a kernel without TCX), as a filter on a `clsact` qdisc.
    /// With `keep` (the kernel's device, which outlives the agent) the link is pinned, or the
    /// filter left in place, as the uplink's are: a restarted agent replaces the program inside
    /// it and the decrypted traffic never meets a device without it. Without (boringtun's
    /// device, a TUN of this process) the link lives as long as this object.
    pub fn attach_wireguard(
        &mut self,
        interface: &str,
        mode: AttachMode,
        keep: bool,
    ) -> Result<(), DataplaneError> {
        let name = programs::WIREGUARD_INGRESS;
        let if_index = if_index(interface)
            .ok_or_else(|| DataplaneError::UnknownInterface(interface.to_owned()))?;
        let layout = self.layout.clone();
        let program = classifier(&mut self.ebpf, name)?;
        if keep {
            let attach = |program: &mut SchedClassifier| match mode {
                AttachMode::Tcx => {
                    attach_one(program, &layout, interface, if_index, Direction::Ingress)
                }
                AttachMode::Tc => {
                    attach_tc(program, &layout, interface, if_index, Direction::Ingress)
                }
            };
            return match attach(program) {
                Ok(_) => Ok(()),
                // A pin left from a device that is gone (deleted and made again): its link
                // holds no hook any more.
                Err(_) if layout.link(interface, Direction::Ingress.as_str()).exists() => {
                    forget_link(&layout, interface);
                    attach(program).map(|_| ())
                }
                Err(e) => Err(e),
            };
        }
        forget_link(&layout, interface);
        let how = match mode {
            AttachMode::Tcx => TcAttach::Tcx {
                attach_type: TcAttachType::Ingress,
                order: LinkOrder::first(),
            },
            AttachMode::Tc => {
                // A new device: nothing else is on it.
                let _ = tc::qdisc_add_clsact(if_index);
                TcAttach::Netlink {
                    parent: TcHandle::from(TcAttachType::Ingress),
                    options: NlOptions {
                        priority: TC_PRIORITY,
                        handle: TcHandle::from(TC_HANDLE),
                        classid: None,
                    },
                }
            }
        };
        program
            .attach(if_index, how)
            .map_err(|source| DataplaneError::Program { name, source })?;
        Ok(())
    }

    /// Forgets the WireGuard device's kept link (the device was closed): its pin and record.
    pub fn forget_wireguard_link(&self, interface: &str) {
        forget_link(&self.layout, interface);
    }

    /// Attaches (or re-attaches) the ingress and egress programs to `interface`, with TCX.
    pub fn attach_uplink(&mut self, interface: &str) -> Result<Vec<HookState>, DataplaneError> {
        self.attach_uplink_with(interface, AttachMode::Tcx)
    }

    /// Attaches (or re-attaches) the ingress and egress programs to `interface` the way `mode`
    /// says; what the other way left there (a TCX link, a TC filter of Strait's) is taken off.
    pub fn attach_uplink_with(
        &mut self,
        interface: &str,
        mode: AttachMode,
    ) -> Result<Vec<HookState>, DataplaneError> {
        let if_index = if_index(interface)
            .ok_or_else(|| DataplaneError::UnknownInterface(interface.to_owned()))?;
        if let Ok((Some(kind), _)) = crate::routes::link_kind(interface)
            && kind == "bridge"
        {
            // A Linux bridge advertises no checksum or segmentation offloads for encapsulated
            // packets (`hw_enc_features`): each tunnel packet that leaves through it is
            // checksummed, and a GSO one segmented, in software (docs/operating.md).
            tracing::warn!(
                uplink = interface,
                "the uplink is a Linux bridge, which offers no checksum or segmentation offloads for encapsulated packets: the kernel checksums and segments every tunnel packet in software as it leaves through it (a kernel VXLAN stream ran at about a quarter of its rate out of a bridge; docs/operating.md)"
            );
        }
        let layout = self.layout.clone();
        Direction::BOTH
            .iter()
            .map(|&direction| {
                let program = program_of(&mut self.ebpf, direction)?;
                match mode {
                    AttachMode::Tcx => {
                        detach_tc(&layout, interface, direction).map_err(|e| {
                            DataplaneError::Link {
                                path: tc_record(&layout, interface),
                                message: format!("taking Strait's TC filter off: {e}"),
                            }
                        })?;
                        attach_one(program, &layout, interface, if_index, direction)
                    }
                    AttachMode::Tc => {
                        let link = layout.link(interface, direction.as_str());
                        match detach_pinned_link(&link) {
                            Ok(()) => {
                                let _ = std::fs::remove_file(&link);
                            }
                            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                            Err(e) => {
                                return Err(DataplaneError::Link {
                                    path: link,
                                    message: format!("detaching the TCX link: {e}"),
                                });
                            }
                        }
                        attach_tc(program, &layout, interface, if_index, direction)
                    }
                }
            })
            .collect()
    }

    /// Programs that run before Strait's at a hook of `interface` (attached later with
    /// "before", or an earlier agent's link at the tail), each as `<direction>: <name> (id
    /// <id>)`, or `<direction>: program id <id> ...` where reading its name takes the
    /// CAP_SYS_ADMIN the agent is not given: what they end with `TC_ACT_OK` or `TC_ACT_SHOT`
    /// never reaches Strait's. Empty when Strait's programs come first, or when the chain
    /// cannot be read (said in the log).
    pub fn programs_ahead(&mut self, interface: &str) -> Vec<String> {
        let mut ahead = Vec::new();
        for direction in Direction::BOTH {
            let ours = match program_of(&mut self.ebpf, direction).and_then(|p| {
                p.info().map_err(|source| DataplaneError::Program {
                    name: direction.program(),
                    source,
                })
            }) {
                Ok(info) => info.id(),
                Err(e) => {
                    tracing::debug!("cannot read Strait's program: {e}");
                    continue;
                }
            };
            let Some(index) = if_index(interface) else {
                continue;
            };
            let chain = match crate::bpf_sys::tcx_program_ids(index, direction.tcx_attach_type()) {
                Ok(chain) => chain,
                Err(e) => {
                    tracing::debug!(interface, "cannot read the TCX chain: {e}");
                    continue;
                }
            };
            let Some(at) = chain.iter().position(|&id| id == ours) else {
                continue;
            };
            ahead.extend(chain[..at].iter().map(|&id| {
                let direction = direction.as_str();
                match crate::bpf_sys::program_name(id) {
                    Ok(name) => format!("{direction}: {name} (id {id})"),
                    Err(_) => format!(
                        "{direction}: program id {id} (`bpftool prog show id {id}` on the Node names it)"
                    ),
                }
            }));
        }
        ahead
    }

    /// The loaded program of one hook, for `BPF_PROG_TEST_RUN`.
    pub fn program(
        &mut self,
        direction: Direction,
    ) -> Result<&mut SchedClassifier, DataplaneError> {
        program_of(&mut self.ebpf, direction)
    }

    fn map(&self, name: &str) -> Result<&aya::maps::Map, DataplaneError> {
        self.ebpf.map(name).ok_or_else(|| missing_map(name))
    }

    /// The counters map of this object (the pinned one when pins exist).
    pub fn counters(&self) -> Result<PerCpuArray<&MapData, CounterValue>, DataplaneError> {
        PerCpuArray::try_from(self.map(maps::COUNTERS)?).map_err(map_err)
    }

    /// The maps the agent writes and the SNAT table, typed.
    pub fn maps(&mut self) -> Result<DataplaneMaps<&mut MapData>, DataplaneError> {
        // Distinct maps borrowed mutably at once: take them one by one out of the object.
        let mut config = None;
        let mut routes = None;
        let mut peers = None;
        let mut snat = None;
        let mut next_hops = None;
        let mut pod_ids = None;
        let mut ingress_policy = None;
        let mut protected_pods = None;
        let mut egress_policy = None;
        let mut exposed = None;
        let mut exposed_prefixes = None;
        let mut sender_ids = None;
        let mut wireguard = None;
        for (name, map) in self.ebpf.maps_mut() {
            match name {
                maps::CONFIG => config = Some(map),
                maps::ROUTES => routes = Some(map),
                maps::PEERS => peers = Some(map),
                maps::SNAT => snat = Some(map),
                maps::NEXT_HOPS => next_hops = Some(map),
                maps::POD_IDS => pod_ids = Some(map),
                maps::INGRESS_POLICY => ingress_policy = Some(map),
                maps::PROTECTED_PODS => protected_pods = Some(map),
                maps::EGRESS_POLICY => egress_policy = Some(map),
                maps::EXPOSED => exposed = Some(map),
                maps::EXPOSED_PREFIXES => exposed_prefixes = Some(map),
                maps::SENDER_IDS => sender_ids = Some(map),
                maps::WIREGUARD => wireguard = Some(map),
                _ => {}
            }
        }
        let missing = missing_map;
        Ok(DataplaneMaps {
            config: Array::try_from(config.ok_or_else(|| missing(maps::CONFIG))?)
                .map_err(map_err)?,
            routes: LpmTrie::try_from(routes.ok_or_else(|| missing(maps::ROUTES))?)
                .map_err(map_err)?,
            peers: HashMap::try_from(peers.ok_or_else(|| missing(maps::PEERS))?)
                .map_err(map_err)?,
            snat: HashMap::try_from(snat.ok_or_else(|| missing(maps::SNAT))?).map_err(map_err)?,
            next_hops: HashMap::try_from(next_hops.ok_or_else(|| missing(maps::NEXT_HOPS))?)
                .map_err(map_err)?,
            pod_ids: HashMap::try_from(pod_ids.ok_or_else(|| missing(maps::POD_IDS))?)
                .map_err(map_err)?,
            ingress_policy: HashMap::try_from(
                ingress_policy.ok_or_else(|| missing(maps::INGRESS_POLICY))?,
            )
            .map_err(map_err)?,
            protected_pods: HashMap::try_from(
                protected_pods.ok_or_else(|| missing(maps::PROTECTED_PODS))?,
            )
            .map_err(map_err)?,
            egress_policy: HashMap::try_from(
                egress_policy.ok_or_else(|| missing(maps::EGRESS_POLICY))?,
            )
            .map_err(map_err)?,
            exposed: HashMap::try_from(exposed.ok_or_else(|| missing(maps::EXPOSED))?)
                .map_err(map_err)?,
            exposed_prefixes: LpmTrie::try_from(
                exposed_prefixes.ok_or_else(|| missing(maps::EXPOSED_PREFIXES))?,
            )
            .map_err(map_err)?,
            sender_ids: HashMap::try_from(sender_ids.ok_or_else(|| missing(maps::SENDER_IDS))?)
                .map_err(map_err)?,
            wireguard: Array::try_from(wireguard.ok_or_else(|| missing(maps::WIREGUARD))?)
                .map_err(map_err)?,
        })
    }

    /// How many entries the ingress policy map holds, as the kernel has it.
    pub fn policy_capacity(&self) -> Option<usize> {
        match self.ebpf.map(maps::INGRESS_POLICY)? {
            aya::maps::Map::HashMap(data) => data.info().ok().map(|i| i.max_entries() as usize),
            _ => None,
        }
    }

    /// The pin root this object's maps live under.
    pub fn layout(&self) -> &PinLayout {
        &self.layout
    }
}

/// Typed handles on the dataplane's maps (from a loaded object or from the pins).
pub struct DataplaneMaps<T> {
    pub config: Array<T, LocalConfig>,
    pub routes: LpmTrie<T, [u8; 4], RemoteRoute>,
    pub peers: HashMap<T, [u8; 4], Peer>,
    pub snat: HashMap<T, FlowKey, SnatEntry>,
    /// Written by the programs only: the Ethernet addresses they learned per underlay address.
    pub next_hops: HashMap<T, [u8; 4], NextHop>,
    /// This Node's Pods' label identities (the VNI of their tunnelled packets).
    pub pod_ids: HashMap<T, [u8; 4], PodIdentity>,
    /// The gateway's compiled ClusterSet-scoped ingress rules.
    pub ingress_policy: HashMap<T, PolicyKey, PolicyVerdict>,
    /// The Pods those rules cover, and what a flow without an identity gets.
    pub protected_pods: HashMap<T, [u8; 4], PolicyVerdict>,
    /// This Node's Pods' flows to multi-cluster Services that egress rules decide.
    pub egress_policy: HashMap<T, EgressKey, PolicyVerdict>,
    /// What remote clusters may open flows to: exported Services and their endpoints.
    pub exposed: HashMap<T, ExposedKey, Exposed>,
    /// The Pod CIDRs remote clusters may reach (Pod-to-Pod connectivity).
    pub exposed_prefixes: LpmTrie<T, [u8; 4], Exposed>,
    /// The gateway, stretched policy: which Node may claim which label ID for which source.
    pub sender_ids: HashMap<T, SenderIdKey, SenderId>,
    /// The gateway with encryption on: its WireGuard device.
    pub wireguard: Array<T, WireGuardConfig>,
}

impl DataplaneMaps<MapData> {
    /// Opens the pinned maps of a running dataplane (what `mc-agent maps` and a restarted agent
    /// use).
    pub fn open_pinned(layout: &PinLayout) -> Result<Self, MapError> {
        let open = |name: &str| aya::maps::Map::from_map_data(MapData::from_pin(layout.map(name))?);
        Ok(Self {
            config: open(maps::CONFIG)?.try_into()?,
            routes: open(maps::ROUTES)?.try_into()?,
            peers: open(maps::PEERS)?.try_into()?,
            snat: open(maps::SNAT)?.try_into()?,
            next_hops: open(maps::NEXT_HOPS)?.try_into()?,
            pod_ids: open(maps::POD_IDS)?.try_into()?,
            ingress_policy: open(maps::INGRESS_POLICY)?.try_into()?,
            protected_pods: open(maps::PROTECTED_PODS)?.try_into()?,
            egress_policy: open(maps::EGRESS_POLICY)?.try_into()?,
            exposed: open(maps::EXPOSED)?.try_into()?,
            exposed_prefixes: open(maps::EXPOSED_PREFIXES)?.try_into()?,
            sender_ids: open(maps::SENDER_IDS)?.try_into()?,
            wireguard: open(maps::WIREGUARD)?.try_into()?,
        })
    }
}

/// The WireGuard device the pinned maps name (`mc_wireguard`), when it is gone (boringtun's
/// device ends with the agent that made it; the kernel's stays): forgotten, so that the
/// programs drop what they would send through it, counted (`drop_wireguard_not_ready`), until
/// the next device is up, instead of redirecting to an interface that no longer exists (the
/// kernel drops those without a Strait counter). Whether it was forgotten; no pinned maps
/// (a first start) is not an error.
pub fn forget_gone_wireguard_device(layout: &PinLayout, device: &str) -> Result<bool, MapError> {
    let pinned = match MapData::from_pin(layout.map(maps::WIREGUARD)) {
        Ok(pinned) => pinned,
        Err(MapError::SyscallError(SyscallError { io_error, .. }))
            if io_error.kind() == io::ErrorKind::NotFound =>
        {
            return Ok(false);
        }
        Err(e) => return Err(e),
    };
    let mut array: Array<MapData, WireGuardConfig> =
        aya::maps::Map::from_map_data(pinned)?.try_into()?;
    let mut current = array.get(&0, 0)?;
    if current.ifindex == 0
        || (crate::wireguard::is_kernel_device(device) && if_index(device) == Some(current.ifindex))
    {
        return Ok(false);
    }
    current.ifindex = 0;
    array.set(0, &current, 0)?;
    Ok(true)
}

fn map_err(e: MapError) -> DataplaneError {
    DataplaneError::Load(EbpfError::MapError(e))
}

fn missing_map(name: &str) -> DataplaneError {
    map_err(MapError::InvalidName {
        name: name.to_owned(),
    })
}

fn program_of(
    ebpf: &mut Ebpf,
    direction: Direction,
) -> Result<&mut SchedClassifier, DataplaneError> {
    classifier(ebpf, direction.program())
}

fn classifier<'a>(
    ebpf: &'a mut Ebpf,
    name: &'static str,
) -> Result<&'a mut SchedClassifier, DataplaneError> {
    let program = ebpf.program_mut(name).ok_or(DataplaneError::Program {
        name,
        source: ProgramError::UnexpectedProgramType,
    })?;
    program
        .try_into()
        .map_err(|source| DataplaneError::Program { name, source })
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
        name: direction.program(),
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
                mode: AttachMode::Tcx,
            })
        }
        Err(LinkError::SyscallError(SyscallError { io_error, .. }))
            if io_error.kind() == io::ErrorKind::NotFound =>
        {
            // At the head of the hook's chain: a program attached after Strait's (a CNI
            // DaemonSet that starts later, such as Cilium's, which attaches at the tail and
            // ends the chain with TC_ACT_OK) still runs after Strait's, which hand on whatever
            // is not theirs (TCX_NEXT). Whichever starts first, Strait's programs run.
            let id = program
                .attach(
                    if_index,
                    TcAttach::Tcx {
                        attach_type: direction.attach_type(),
                        order: LinkOrder::first(),
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
                mode: AttachMode::Tcx,
            })
        }
        Err(e) => Err(link_err(format!("opening the pinned link: {e}"))),
    }
}

/// Removes the pinned ingress link (detached first) and the TC record of a device of Strait's
/// (the WireGuard device): what is not there is not an error.
fn forget_link(layout: &PinLayout, interface: &str) {
    let link = layout.link(interface, Direction::Ingress.as_str());
    if link.exists() {
        let _ = detach_pinned_link(&link);
        let _ = std::fs::remove_file(&link);
    }
    let _ = std::fs::remove_dir(tc_record(layout, interface));
}

/// Where the pin root records that Strait's TC filters are on `interface`: a directory (bpffs
/// holds no plain files), which `uninstall` finds.
pub fn tc_record(layout: &PinLayout, interface: &str) -> PathBuf {
    layout.root().join("tc").join(interface)
}

/// Legacy TC: the program as a filter on the interface's `clsact` qdisc (added if missing), at
/// Strait's priority and handle: an earlier start's filter is replaced in place (the hook
/// never runs without Strait's program), else the filter is added. It stays when the agent
/// stops, as a pinned TCX link does.
fn attach_tc(
    program: &mut SchedClassifier,
    layout: &PinLayout,
    interface: &str,
    if_index: u32,
    direction: Direction,
) -> Result<HookState, DataplaneError> {
    let record = tc_record(layout, interface);
    let link_err = |message: String| DataplaneError::Link {
        path: record.clone(),
        message,
    };
    let program_err = |source| DataplaneError::Program {
        name: direction.program(),
        source,
    };
    // Already there (an earlier start, or the CNI's) is fine; anything else shows below.
    let clsact = tc::qdisc_add_clsact(if_index);
    let parent = TcHandle::from(direction.attach_type());
    let handle = TcHandle::from(TC_HANDLE);
    let ours = SchedClassifierLink::attached(if_index, parent, TC_PRIORITY, handle, None)
        .map_err(|e| link_err(format!("the interface: {e}")))?;
    let (id, reused) = match program.attach_to_link(ours) {
        Ok(id) => (id, true),
        Err(_) => {
            let options = NlOptions {
                priority: TC_PRIORITY,
                handle,
                classid: None,
            };
            let id = program
                .attach(if_index, TcAttach::Netlink { parent, options })
                .map_err(|e| {
                    link_err(format!(
                        "adding the TC filter: {e} (adding the clsact qdisc: {clsact:?})"
                    ))
                })?;
            (id, false)
        }
    };
    // The filter outlives this process; dropping the link would take it off.
    std::mem::forget(program.take_link(id).map_err(program_err)?);
    std::fs::create_dir_all(&record).map_err(|e| link_err(format!("recording it: {e}")))?;
    Ok(HookState {
        direction,
        reused,
        link_pin: record,
        mode: AttachMode::Tc,
    })
}

/// Takes Strait's TC filter of `direction` off `interface` (by its program's name, as
/// `tc filter` lists it) and, when neither direction's is left, the record; nothing there is
/// not an error.
fn detach_tc(layout: &PinLayout, interface: &str, direction: Direction) -> io::Result<()> {
    let record = tc_record(layout, interface);
    let Some(index) = if_index(interface) else {
        // No such interface: nothing of Strait's can be on it.
        let _ = std::fs::remove_dir(&record);
        return Ok(());
    };
    match tc::qdisc_detach_program(index, direction.attach_type().into(), direction.program()) {
        Ok(()) => {}
        // No filter of that name, or no clsact qdisc at all.
        Err(tc::TcError::IoError(e)) if e.kind() == io::ErrorKind::NotFound => {}
        Err(_) if !record.exists() => {}
        Err(e) => return Err(io::Error::other(e.to_string())),
    }
    if direction == Direction::Egress {
        match std::fs::remove_dir(&record) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Takes Strait's TC filters off every interface the pin root records (`uninstall`); the
/// interfaces it found.
pub fn detach_all_tc(layout: &PinLayout) -> io::Result<Vec<String>> {
    let dir = layout.root().join("tc");
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut done = Vec::new();
    for entry in entries {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if if_index(&name).is_some() {
            for direction in Direction::BOTH {
                detach_tc(layout, &name, direction)?;
            }
        }
        let _ = std::fs::remove_dir(dir.join(&name));
        done.push(name);
    }
    let _ = std::fs::remove_dir(&dir);
    Ok(done)
}

/// Detaches the programs from `interface` and removes their pinned links and, with `maps`, the
/// pinned maps too. Missing pins are not an error: detaching twice is a no-op.
pub fn detach(layout: &PinLayout, interface: &str, remove_maps: bool) -> io::Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    for direction in Direction::BOTH {
        detach_tc(layout, interface, direction)?;
    }
    let links: Vec<PathBuf> = Direction::BOTH
        .iter()
        .map(|d| layout.link(interface, d.as_str()))
        .collect();
    for link in &links {
        // Dropping the last reference to a link detaches it only once the kernel releases the
        // pin's inode; BPF_LINK_DETACH takes the program off the hook now.
        match detach_pinned_link(link) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    let mut paths = links;
    if remove_maps {
        paths.extend(maps::ALL.iter().chain(maps::RETIRED).map(|m| layout.map(m)));
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

/// `BPF_OBJ_GET` of a pinned link, then `BPF_LINK_DETACH` on it (the pin stays: remove it).
pub fn detach_pinned_link(path: &std::path::Path) -> io::Result<()> {
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
