//! What the agent changes on its Node besides bpffs — two sysctls and its `proto 167` routes —
//! and `mc-agent uninstall`, which takes all of it back with the dataplane.
//!
//! A sysctl's value from before Strait first changed it is recorded in `<state dir>/sysctls`
//! (`/run/strait` on a Node: a tmpfs, so the record lives exactly as long as the change, which a
//! reboot undoes too). A restarted agent finds its own value in place and records nothing, so
//! the record keeps the Node's original however often the agent restarts.
//!
//! In a container that is not privileged the runtime mounts `/proc/sys` read-only: the DaemonSet
//! mounts the host's `/proc/sys/net` (a hostPath) at `/host/proc/sys/net` and passes
//! `--sysctl-root=/host/proc/sys`. The net sysctls read and write the network namespace of the
//! process that opens them, the Node's with `hostNetwork`.

use std::{
    collections::BTreeMap,
    io,
    path::{Path, PathBuf},
};

use crate::{bpffs::PinLayout, dataplane, routes};

/// Where the agent records what it changed (a hostPath in the DaemonSet).
pub const DEFAULT_STATE_DIR: &str = "/run/strait";
/// Where the sysctls are read and written unless `--sysctl-root` says otherwise.
pub const DEFAULT_SYSCTL_ROOT: &str = "/proc/sys";
const SYSCTLS: &str = "sysctls";

/// Where the Node's WireGuard private key is kept unless `--wireguard-key` says otherwise.
pub const DEFAULT_WIREGUARD_KEY: &str = "/var/lib/strait/wireguard/private.key";

/// The agent's record of the Node's sysctls, and the Node's WireGuard key.
#[derive(Clone, Debug)]
pub struct HostState {
    dir: PathBuf,
    sysctl_root: PathBuf,
    wireguard_key: PathBuf,
}

impl HostState {
    /// The record in `dir`, the sysctls under /proc/sys.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            sysctl_root: PathBuf::from(DEFAULT_SYSCTL_ROOT),
            wireguard_key: PathBuf::from(DEFAULT_WIREGUARD_KEY),
        }
    }

    /// The WireGuard key at `path` instead.
    pub fn with_wireguard_key(mut self, path: impl Into<PathBuf>) -> Self {
        self.wireguard_key = path.into();
        self
    }

    /// The Node's WireGuard private key (`trafficEncryptionMode: wireGuard`).
    pub fn wireguard_key(&self) -> &Path {
        &self.wireguard_key
    }

    /// The sysctls under `root` instead (`/host/proc/sys` in the DaemonSet).
    pub fn with_sysctl_root(mut self, root: impl Into<PathBuf>) -> Self {
        self.sysctl_root = root.into();
        self
    }

    fn sysctl(&self, key: &str) -> PathBuf {
        self.sysctl_root.join(key)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn file(&self) -> PathBuf {
        self.dir.join(SYSCTLS)
    }

    /// The recorded originals: sysctl path (under /proc/sys) → value before Strait.
    pub fn recorded(&self) -> io::Result<BTreeMap<String, String>> {
        let text = match std::fs::read_to_string(self.file()) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
            Err(e) => return Err(e),
        };
        Ok(parse(&text))
    }

    fn record(&self, key: &str, original: &str) -> io::Result<()> {
        let mut all = self.recorded()?;
        if all.contains_key(key) {
            return Ok(());
        }
        all.insert(key.to_owned(), original.to_owned());
        std::fs::create_dir_all(&self.dir)?;
        let tmp = self.dir.join(format!(".{SYSCTLS}.tmp"));
        std::fs::write(&tmp, render(&all))?;
        std::fs::rename(&tmp, self.file())
    }

    /// Sets the sysctl `key` (a path under /proc/sys) to `value`. When that changes it, the
    /// value it had is recorded first (unless an earlier change recorded one) and returned.
    /// A record that cannot be written is logged, and the sysctl is set all the same: the
    /// dataplane needs it, and only `uninstall` would miss the record. A sysctl that already
    /// has the value is not written (nor needs to be writable).
    pub fn set_sysctl(&self, key: &str, value: &str) -> io::Result<Option<String>> {
        let path = self.sysctl(key);
        let old = std::fs::read_to_string(&path)?.trim().to_owned();
        if old == value {
            return Ok(None);
        }
        if let Err(e) = self.record(key, &old) {
            tracing::warn!(
                key,
                state_dir = %self.dir.display(),
                error = %e,
                "cannot record the sysctl's value before Strait: `mc-agent uninstall` will not restore it"
            );
        }
        std::fs::write(&path, value).map_err(|e| writing(&path, e))?;
        Ok(Some(old))
    }
}

/// A failed sysctl write, with the way out when the mount is read-only.
fn writing(path: &Path, e: io::Error) -> io::Error {
    if e.raw_os_error() == Some(libc::EROFS) {
        return io::Error::new(
            e.kind(),
            format!(
                "{} is read-only (a container's /proc/sys is): mount the host's /proc/sys/net \
                 read-write at /host/proc/sys/net and pass --sysctl-root=/host/proc/sys",
                path.display()
            ),
        );
    }
    e
}

fn parse(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .filter(|(k, _)| !k.is_empty())
        .collect()
}

fn render(all: &BTreeMap<String, String>) -> String {
    all.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
}

/// What `uninstall` did.
#[derive(Debug, Default)]
pub struct Uninstalled {
    /// Pinned links detached and removed.
    pub links: Vec<PathBuf>,
    /// The pin directory (with the maps) was removed.
    pub pin_dir_removed: bool,
    /// Routes with Strait's protocol removed.
    pub routes: Vec<String>,
    /// Sysctls put back: (key, value restored).
    pub sysctls: Vec<(String, String)>,
    /// The Node's WireGuard private key was removed.
    pub wireguard_key_removed: bool,
    /// The kernel's WireGuard device (`strait-wg0`), which outlives the agent, was deleted.
    pub wireguard_device_removed: bool,
}

/// Takes Strait off this Node: detaches every pinned link under the pin root, removes the pin
/// directory with its maps (and its parent when that is left empty and is not the bpffs mount),
/// removes every route with `proto 167` (and an earlier version's rule, `lookup 167`), and restores
/// the recorded sysctls, and removes the Node's WireGuard key and its kernel WireGuard device.
/// Safe to run twice;
/// run it after the agent has stopped, or the agent attaches again.
pub fn uninstall(layout: &PinLayout, state: &HostState) -> anyhow::Result<Uninstalled> {
    use anyhow::Context as _;
    let mut done = Uninstalled::default();
    let links_dir = layout.links_dir();
    match std::fs::read_dir(&links_dir) {
        Ok(entries) => {
            for entry in entries {
                let path = entry?.path();
                dataplane::detach_pinned_link(&path)
                    .with_context(|| format!("detaching {}", path.display()))?;
                std::fs::remove_file(&path)
                    .with_context(|| format!("removing {}", path.display()))?;
                done.links.push(path);
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("reading {}", links_dir.display())),
    }
    for interface in dataplane::detach_all_tc(layout).context("taking Strait's TC filters off")? {
        done.links.push(dataplane::tc_record(layout, &interface));
    }
    let root = layout.root();
    if root.exists() {
        std::fs::remove_dir_all(root).with_context(|| format!("removing {}", root.display()))?;
        done.pin_dir_removed = true;
        if let Some(parent) = root.parent()
            && !is_mount_point(parent)
        {
            // Only when empty (another version's pins keep it).
            let _ = std::fs::remove_dir(parent);
        }
    }
    done.routes = routes::flush_own().context("removing Strait's routes")?;
    if routes::remove_rule().context("removing an earlier version's routing rule")? {
        done.routes.push(format!(
            "rule pref {} lookup {}",
            routes::OLD_RULE_PREF,
            routes::OLD_TABLE
        ));
    }
    for (key, value) in state.recorded().context("reading the recorded sysctls")? {
        let path = state.sysctl(&key);
        std::fs::write(&path, &value)
            .map_err(|e| writing(&path, e))
            .with_context(|| format!("restoring {key} to {value}"))?;
        done.sysctls.push((key, value));
    }
    match std::fs::remove_file(state.file()) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).context("removing the sysctl record"),
    }
    match std::fs::remove_file(state.wireguard_key()) {
        Ok(()) => done.wireguard_key_removed = true,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).context("removing the WireGuard key"),
    }
    done.wireguard_device_removed =
        crate::wireguard::remove_kernel_device(crate::wireguard::DEVICE)
            .map_err(|e| anyhow::anyhow!("removing the WireGuard device: {e}"))?;
    Ok(done)
}

/// What of Strait is still on this Node: the pin directory, routes with `proto 167`, an earlier
/// version's rule,
/// sysctls
/// changed and not restored. Empty once `uninstall` has run with the agent stopped.
pub fn leftovers(layout: &PinLayout, state: &HostState) -> anyhow::Result<Vec<String>> {
    let mut left = Vec::new();
    if layout.root().exists() {
        left.push(format!(
            "pin directory {} (maps and links)",
            layout.root().display()
        ));
    }
    for route in routes::own()? {
        left.push(format!("route {route} (proto {})", routes::ROUTE_PROTO));
    }
    if routes::has_rule()? {
        left.push(format!(
            "rule pref {} lookup {}",
            routes::OLD_RULE_PREF,
            routes::OLD_TABLE
        ));
    }
    for (key, value) in state.recorded()? {
        left.push(format!("sysctl {key}: changed by Strait, was {value}"));
    }
    if state.wireguard_key().exists() {
        left.push(format!(
            "WireGuard private key {}",
            state.wireguard_key().display()
        ));
    }
    if crate::wireguard::is_kernel_device(crate::wireguard::DEVICE) {
        left.push(format!(
            "WireGuard device {} (the kernel's)",
            crate::wireguard::DEVICE
        ));
    }
    Ok(left)
}

fn is_mount_point(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    match (dir.metadata(), dir.parent().map(Path::metadata)) {
        (Ok(d), Some(Ok(p))) => d.dev() != p.dev(),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_keeps_the_first_original() {
        let dir = std::env::temp_dir().join(format!("strait-host-{}", std::process::id()));
        let state = HostState::new(&dir);
        assert!(state.recorded().unwrap().is_empty());
        state.record("net/ipv4/conf/eth0/rp_filter", "0").unwrap();
        // A restarted agent finds its own value; it never overwrites the original.
        state.record("net/ipv4/conf/eth0/rp_filter", "2").unwrap();
        state.record("net/ipv4/ip_forward", "0").unwrap();
        let all = state.recorded().unwrap();
        assert_eq!(all["net/ipv4/conf/eth0/rp_filter"], "0");
        assert_eq!(all["net/ipv4/ip_forward"], "0");
        assert_eq!(all.len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_damaged_record_parses_what_it_can() {
        let all = parse("a/b=1\ngarbage\n=3\n c/d = 2 \n");
        assert_eq!(all.len(), 2);
        assert_eq!(all["c/d"], "2");
    }
}
