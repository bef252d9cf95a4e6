//! Shared fixtures for the kernel tests: a fresh network namespace per test and a private bpffs
//! instance per test, both removed on drop (also when the test panics). A test that needs root
//! starts with [`lacks_root`]: without root it is skipped and says so, unless
//! `STRAIT_TEST_REQUIRE` names `root` (the test command's setting), where it fails.
#![allow(dead_code)] // each test file uses a subset

pub mod fixture;
pub mod frames;

use std::{
    io::Write as _,
    path::{Path, PathBuf},
    process::{Command, Output},
};

// The variable and its reading, shared with the testbed's tests.
#[path = "../../../tests/src/require.rs"]
mod require;
pub use require::REQUIRE_VAR;
use require::required;

/// Whether a test that needs root must return at once, skipped: true when this process is not
/// root. Every such test starts with `if lacks_root("<what it does>") { return; }`, so a plain
/// `cargo test` as a user passes and says what it left out: one line on stderr,
/// `skipped: <test>: needs root (<why>)` (written past the test harness's capture, so it shows).
/// Where [`REQUIRE_VAR`] names `root` it panics instead, as a missing prerequisite must fail in CI.
#[must_use]
pub fn lacks_root(why: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return false;
    }
    let reason = format!("needs root ({why})");
    if required("root") {
        panic!("{reason}; {REQUIRE_VAR} names root: run the tests as root");
    }
    let test = std::thread::current().name().unwrap_or("a test").to_owned();
    // Not `eprintln!`: the harness captures that and shows it only for a failed test.
    let _ = writeln!(std::io::stderr(), "skipped: {test}: {reason}");
    true
}

/// Panics unless this process is root: the fixtures' own check, behind each test's
/// [`lacks_root`].
pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "these tests load eBPF programs and create network namespaces: run them as root"
    );
}

pub fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("spawning {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

pub fn sh(line: &str) -> Output {
    run(Command::new("sh").arg("-c").arg(line))
}

/// A network namespace created with `ip netns add`, deleted on drop.
pub struct NetNs {
    pub name: String,
}

impl NetNs {
    pub fn new(prefix: &str) -> Self {
        let name = format!("{prefix}-{}", std::process::id());
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        run(Command::new("ip").args(["netns", "add", &name]));
        run(Command::new("ip").args(["-n", &name, "link", "set", "lo", "up"]));
        Self { name }
    }

    pub fn path(&self) -> String {
        format!("/run/netns/{}", self.name)
    }

    /// A command run inside this namespace (network only; the mount namespace is shared, so a
    /// bpffs mounted by the test is visible).
    pub fn cmd(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net={}", self.path())).arg(program);
        cmd
    }
}

/// Runs `f` on a thread of its own in `ns` (and the processes it starts: they inherit the
/// thread's namespace).
#[allow(dead_code)]
pub fn in_netns<T: Send + 'static>(
    ns: &NetNs,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    use std::os::fd::AsFd as _;
    let path = ns.path();
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        nix::sched::setns(file.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
            .unwrap_or_else(|e| panic!("setns {path}: {e}"));
        f()
    })
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// A private bpffs instance mounted on a fresh directory, unmounted on drop.
pub struct Bpffs {
    pub mountpoint: PathBuf,
}

impl Bpffs {
    pub fn new(name: &str) -> Self {
        let mountpoint = PathBuf::from(format!("/run/strait-test/{name}-{}", std::process::id()));
        let _ = Command::new("umount").arg(&mountpoint).output();
        std::fs::create_dir_all(&mountpoint).expect("creating the bpffs mountpoint");
        run(Command::new("mount")
            .args(["-t", "bpf", "bpf"])
            .arg(&mountpoint));
        Self { mountpoint }
    }

    pub fn pin_root(&self) -> PathBuf {
        self.mountpoint.join("mc/v1")
    }
}

impl Drop for Bpffs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mountpoint).output();
        let _ = std::fs::remove_dir(&self.mountpoint);
    }
}

/// Builds an Ethernet + IPv4 + UDP frame with a correct IPv4 header checksum.
pub fn udp_frame(src: [u8; 4], dst: [u8; 4], payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 2]); // dst MAC
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 1]); // src MAC
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    let total = (20 + 8 + payload.len()) as u16;
    let mut ip = vec![0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, 17, 0, 0];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&dst);
    let csum = frames::csum(&ip, 0);
    ip[10..12].copy_from_slice(&csum.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&40000u16.to_be_bytes());
    f.extend_from_slice(&6081u16.to_be_bytes());
    f.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]); // UDP checksum: none
    f.extend_from_slice(payload);
    f
}

/// Pushes `frame` through the program of one hook with `BPF_PROG_TEST_RUN`: (verdict, frame out).
pub fn test_run(
    dp: &mut mc_agent::dataplane::Dataplane,
    direction: mc_agent::dataplane::Direction,
    frame: &[u8],
) -> (u32, Vec<u8>) {
    try_test_run(dp, direction, frame).unwrap_or_else(|| {
        panic!(
            "BPF_PROG_TEST_RUN ({direction:?}) refused a {}-byte frame",
            frame.len()
        )
    })
}

/// [`test_run`], `None` when the kernel refuses the frame before the program sees it (a frame
/// shorter than the headers its Ethernet type announces, say).
pub fn try_test_run(
    dp: &mut mc_agent::dataplane::Dataplane,
    direction: mc_agent::dataplane::Direction,
    frame: &[u8],
) -> Option<(u32, Vec<u8>)> {
    use aya::programs::{TestRun as _, TestRunOptions};
    let mut out = vec![0u8; frame.len() + 256];
    let program = dp.program(direction).expect("program");
    let result = program
        .test_run(TestRunOptions {
            data_in: Some(frame),
            data_out: Some(&mut out),
            ..Default::default()
        })
        .ok()?;
    out.truncate(result.data_size_out as usize);
    Some((result.return_value, out))
}

/// Packets counted under `counter` by a loaded dataplane, summed over the CPUs.
pub fn packets(dp: &mc_agent::dataplane::Dataplane, counter: mc_common::Counter) -> u64 {
    let map = dp.counters().expect("counters map");
    mc_agent::counters::read(&map)
        .expect("reading counters")
        .into_iter()
        .find(|r| r.key == counter.key())
        .expect("known counter")
        .packets
}

pub fn agent_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_mc-agent"))
}

/// How `attach` attaches in these tests: `STRAIT_TEST_TC_ATTACH` (`tc` for legacy TC filters;
/// the test command runs the traffic tests both ways), else TCX.
pub fn tc_attach() -> String {
    std::env::var("STRAIT_TEST_TC_ATTACH").unwrap_or_else(|_| "tcx".into())
}

/// What the agent logs when it attached a program the way [`tc_attach`] says.
#[allow(dead_code)] // Not every test binary that includes `support` attaches.
pub fn attached_log() -> &'static str {
    if tc_attach() == "tc" {
        "attached as a TC filter"
    } else {
        "attached with TCX"
    }
}

/// Runs the agent binary in `ns` with `--pin-root <pin_root> args...` (`attach` the way
/// [`tc_attach`] says); returns its stderr (its log). Panics when it fails.
pub fn agent(ns: &NetNs, pin_root: &Path, args: &[&str]) -> String {
    let mut cmd = ns.cmd(agent_bin());
    cmd.arg("--pin-root").arg(pin_root).args(args);
    if args.first() == Some(&"attach") {
        cmd.arg("--tc-attach").arg(tc_attach());
    }
    String::from_utf8_lossy(&run(&mut cmd).stderr).into_owned()
}

/// Every CPU's completed hairpin-cache entries in the pinned `mc_hairpin_cache` under
/// `pin_root` (a claimed slot waits for its next hop with `until_ns` 0).
#[allow(dead_code)] // Not every test binary that includes `support` reads the cache.
pub fn hairpin_cache(pin_root: &Path) -> Vec<mc_common::dataplane::HairpinCacheEntry> {
    use aya::maps::{Map, MapData, PerCpuArray};
    let path = pin_root.join(mc_common::maps::HAIRPIN_CACHE);
    let data = MapData::from_pin(path).expect("hairpin cache");
    let map: PerCpuArray<MapData, mc_common::dataplane::HairpinCacheEntry> =
        PerCpuArray::try_from(Map::PerCpuArray(data)).expect("a per-CPU array");
    let mut out = Vec::new();
    for values in map.iter() {
        out.extend(values.expect("read").iter().filter(|e| e.until_ns != 0));
    }
    out
}

/// The capabilities deploy/agent/daemonset.yaml grants the agent container (its `add:` list),
/// with their numbers: what the kernel tests run the agent with to show they are enough.
#[allow(dead_code)] // Not every test binary that includes `support` drops capabilities.
pub fn daemonset_caps() -> Vec<(String, u32)> {
    const NUMBERS: [(&str, u32); 7] = [
        ("NET_ADMIN", 12),
        ("NET_RAW", 13),
        ("IPC_LOCK", 14),
        ("SYS_ADMIN", 21),
        ("SYS_RESOURCE", 24),
        ("PERFMON", 38),
        ("BPF", 39),
    ];
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/agent/daemonset.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let line = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("add: ["))
        .unwrap_or_else(|| panic!("no `add: [...]` capability list in {}", path.display()));
    line.trim_end_matches(']')
        .split(',')
        .map(|name| {
            let name = name.trim().trim_matches('"').to_owned();
            let number = NUMBERS
                .iter()
                .find(|(n, _)| *n == name)
                .unwrap_or_else(|| panic!("capability {name}: add its number to NUMBERS"))
                .1;
            (name, number)
        })
        .collect()
}

/// Keeps only `caps` in the calling thread's effective and permitted sets (capabilities are
/// per thread: the rest of the test process keeps its own).
#[allow(dead_code)]
pub fn keep_only_caps_in_this_thread(caps: &[(String, u32)]) {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let mask: u64 = caps.iter().map(|(_, n)| 1u64 << n).sum();
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    for (i, d) in data.iter_mut().enumerate() {
        let part = (mask >> (32 * i)) as u32;
        d.effective = part;
        d.permitted = part;
    }
    // SAFETY: capset reads the header and two data structs we own (version 3's layout).
    let rc = unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_mut_ptr()) };
    assert_eq!(rc, 0, "capset: {}", std::io::Error::last_os_error());
}

/// `setpriv` arguments that run a program with only `caps` (bounding set and all), for a binary
/// run by the tests as the DaemonSet would run it.
#[allow(dead_code)]
pub fn setpriv_only(caps: &[(String, u32)]) -> Vec<String> {
    let list: String = caps
        .iter()
        .map(|(n, _)| format!(",+{}", n.to_lowercase()))
        .collect();
    vec![
        "setpriv".into(),
        format!("--bounding-set=-all{list}"),
        "--inh-caps=-all".into(),
        "--no-new-privs".into(),
        "--".into(),
    ]
}
