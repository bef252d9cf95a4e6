//! Long-running testbed processes: started detached inside a network namespace, their PID in
//! `target/testbed/pids/<name>.pid`, their output in `target/testbed/logs/<name>.log`.

use std::{
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

pub struct Procs {
    pids: PathBuf,
    logs: PathBuf,
}

impl Procs {
    pub fn new(testbed: &Path) -> anyhow::Result<Self> {
        let pids = testbed.join("pids");
        let logs = testbed.join("logs");
        std::fs::create_dir_all(&pids)?;
        std::fs::create_dir_all(&logs)?;
        Ok(Self { pids, logs })
    }

    pub fn log_path(&self, name: &str) -> PathBuf {
        self.logs.join(format!("{name}.log"))
    }

    /// PID of `name` if it is running.
    pub fn running(&self, name: &str) -> Option<i32> {
        let pid: i32 = std::fs::read_to_string(self.pids.join(format!("{name}.pid")))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        alive(pid).then_some(pid)
    }

    /// Starts `program args` in `netns` unless `name` already runs. Returns whether it started.
    pub fn ensure(
        &self,
        name: &str,
        netns: &str,
        program: &Path,
        args: &[String],
    ) -> anyhow::Result<bool> {
        self.ensure_in(name, netns, None, program, args)
    }

    /// As [`Procs::ensure`], also inside the mount namespace bound at `mount_ns` (a testbed
    /// Node's own view of /sys/fs/bpf).
    pub fn ensure_in(
        &self,
        name: &str,
        netns: &str,
        mount_ns: Option<&Path>,
        program: &Path,
        args: &[String],
    ) -> anyhow::Result<bool> {
        if self.running(name).is_some() {
            return Ok(false);
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(name))?;
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net=/run/netns/{netns}"));
        if let Some(m) = mount_ns {
            cmd.arg(format!("--mount={}", m.display()));
        }
        cmd.arg("--")
            .arg(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        // SAFETY: setsid is async-signal-safe; it detaches the child from our session so it
        // outlives `cargo xtask`.
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", program.display()))?;
        std::fs::write(
            self.pids.join(format!("{name}.pid")),
            child.id().to_string(),
        )?;
        Ok(true)
    }
}

pub fn alive(pid: i32) -> bool {
    // A zombie still answers kill(0); look at its state too.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// Every process whose network namespace is `netns` (found through /proc, so this also works
/// after a crash that lost the PID files).
pub fn pids_in_netns(netns: &str) -> Vec<i32> {
    let Ok(target) = std::fs::metadata(format!("/run/netns/{netns}")) else {
        return Vec::new();
    };
    use std::os::unix::fs::MetadataExt as _;
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if let Ok(meta) = std::fs::metadata(format!("/proc/{pid}/ns/net"))
            && meta.ino() == target.ino()
            && meta.dev() == target.dev()
        {
            pids.push(pid);
        }
    }
    pids
}

/// SIGTERM, then SIGKILL after `grace`.
pub fn terminate(pids: &[i32], grace: Duration) {
    for &pid in pids {
        // SAFETY: plain syscall.
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline && pids.iter().any(|&p| alive(p)) {
        std::thread::sleep(Duration::from_millis(100));
    }
    for &pid in pids.iter().filter(|&&p| alive(p)) {
        // SAFETY: plain syscall.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// Resident memory of a process in KiB: (now, peak).
pub fn rss_kib(pid: i32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// CPU time a process and its finished children have used so far (user and system), or zero if
/// it is gone.
pub fn cpu_time(pid: i32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which is in parentheses and may hold spaces: utime, stime,
    // cutime and cstime are the 12th to 15th of them, in clock ticks.
    let ticks: u64 = stat
        .rsplit_once(") ")
        .map(|(_, rest)| {
            rest.split_whitespace()
                .skip(11)
                .take(4)
                .filter_map(|f| f.parse::<u64>().ok())
                .sum()
        })
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) })
        .unwrap_or(100)
        .max(1);
    Duration::from_millis(ticks * 1000 / hz)
}

/// Runs a command to completion and fails with its output when it fails.
pub fn run(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
