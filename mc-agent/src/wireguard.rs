//! Encryption between gateways (`trafficEncryptionMode: wireGuard`, docs/design.md §4c): this
//! Node's WireGuard key pair and the gateway's WireGuard device.
//!
//! WireGuard itself is not Strait's. Where the Node's kernel has WireGuard (Linux 5.6 and
//! later, or the module), the device is the kernel's, created with `ip link add ... type
//! wireguard` and configured over its generic netlink API (the `wireguard-uapi` crate); it
//! outlives the agent, so a restarted agent finds it carrying traffic. Where the kernel has
//! none, the device is boringtun's (Cloudflare's userspace implementation, in this process),
//! configured through the cross-platform UAPI, the text protocol `wg` speaks; it goes with the
//! process. Either way the programs hand it Geneve packets for remote gateways (`bpf_redirect`
//! to the device) and take the decrypted ones back from its ingress (`mc_wg_ingress`);
//! WireGuard's own datagrams leave and arrive on the uplink.

use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader, Write},
    net::Ipv4Addr,
    os::{fd::IntoRawFd, unix::net::UnixStream},
    path::Path,
    process::Command,
};

use base64::Engine as _;
use boringtun::{
    device::{DeviceConfig, DeviceHandle},
    x25519::{PublicKey, StaticSecret},
};

/// A remote gateway as a WireGuard peer of this gateway: its key, where it listens, and the one
/// address it may send from inside the tunnel (its `gatewayIP`, the outer source of its Geneve).
/// [`crate::state::desired`] makes them; [`Device::set_peers`] configures them.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct WireGuardPeer {
    pub cluster_id: String,
    pub public_key: [u8; 32],
    pub endpoint: std::net::SocketAddrV4,
}

/// The gateway's WireGuard device (Antrea's is `antrea-mc-wg0`).
pub const DEVICE: &str = "strait-wg0";
/// WireGuard's UDP port between gateways: Antrea Multi-cluster's default.
pub const DEFAULT_PORT: u16 = 51821;
/// Each peer gets a keepalive every second (`persistent_keepalive_interval`): a device that
/// was just started (the agent restarted) shakes hands with its peers within a second, not
/// only when this side next sends (a gateway that only receives, a stream's far end, would
/// otherwise wait for the peer's 15 s handshake timeout while the peer's packets, under the old
/// session, are dropped); it also keeps NAT mappings on the way open. 32 bytes a second each.
pub const KEEPALIVE_SECONDS: u16 = 1;

/// What WireGuard adds to each tunnel packet over IPv4: outer IPv4 (20) and UDP (8) headers,
/// its data header (16) and the authentication tag (16).
pub const OVERHEAD: u32 = 60;

#[derive(Debug, thiserror::Error)]
pub enum WireGuardError {
    #[error("the WireGuard key {path}: {message}")]
    Key { path: String, message: String },
    #[error("starting the WireGuard device {name}: {message}")]
    Device { name: String, message: String },
    #[error("configuring the WireGuard device: {0}")]
    Api(String),
}

/// A WireGuard key in its text form (base64 of 32 bytes, as `wg` prints it and the Gateway and
/// ClusterInfo objects carry it).
pub fn parse_key(text: &str) -> Result<[u8; 32], String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|e| format!("{text:?} is not base64: {e}"))?;
    <[u8; 32]>::try_from(bytes.as_slice())
        .map_err(|_| format!("{text:?} is {} bytes, not a 32-byte key", bytes.len()))
}

fn base64(key: &[u8; 32]) -> String {
    base64::engine::general_purpose::STANDARD.encode(key)
}

fn hex(key: &[u8; 32]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

/// This Node's WireGuard key pair. The private half stays in its file on the Node (mode 0600)
/// and in the device; the public half is published in the Gateway object.
pub struct KeyPair {
    secret: StaticSecret,
    public: PublicKey,
}

impl KeyPair {
    /// The key in `path`, or a new one written there (the directory is created) when there is
    /// none: a restarted agent keeps its key, so its peers need not learn a new one.
    pub fn load_or_create(path: &Path) -> Result<Self, WireGuardError> {
        let err = |message: String| WireGuardError::Key {
            path: path.display().to_string(),
            message,
        };
        let secret = match std::fs::read_to_string(path) {
            Ok(text) => StaticSecret::from(parse_key(&text).map_err(err)?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let secret = StaticSecret::from(random_key().map_err(|e| err(e.to_string()))?);
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir).map_err(|e| err(e.to_string()))?;
                }
                write_private(path, &base64(&secret.to_bytes())).map_err(|e| err(e.to_string()))?;
                secret
            }
            Err(e) => return Err(err(e.to_string())),
        };
        let public = PublicKey::from(&secret);
        Ok(Self { secret, public })
    }

    /// The public key as the API carries it (`wireGuard.publicKey`).
    pub fn public_base64(&self) -> String {
        base64(self.public.as_bytes())
    }

    /// The public key's bytes.
    pub fn public(&self) -> [u8; 32] {
        *self.public.as_bytes()
    }
}

/// 32 bytes from the kernel's random source (the secret clamps them as X25519 requires).
fn random_key() -> std::io::Result<[u8; 32]> {
    let mut key = [0u8; 32];
    // SAFETY: the buffer is valid for its length; getrandom(2) writes at most that much.
    let n = unsafe { libc::getrandom(key.as_mut_ptr().cast(), key.len(), 0) };
    if n != key.len() as isize {
        return Err(std::io::Error::last_os_error());
    }
    Ok(key)
}

/// Writes `text` to a new file readable by its owner only, then renames it into place: a
/// crash never leaves half a key.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// A peer's counters, as the device reports them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerStats {
    pub public_key: String,
    pub endpoint: Option<String>,
    /// Seconds since the last handshake; `None`: none yet.
    pub since_handshake: Option<u64>,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
}

/// Which WireGuard the gateway runs (`multicluster.wireGuardImplementation`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Implementation {
    /// The kernel's where the Node has it, else userspace.
    #[default]
    Auto,
    /// The kernel's only: a Node without it is not ready (names why).
    Kernel,
    /// boringtun in the agent's process, even where the kernel has WireGuard.
    Userspace,
}

impl Implementation {
    /// `auto` (or empty), `kernel` or `userspace`, any case.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(Self::Auto),
            "kernel" => Ok(Self::Kernel),
            "userspace" => Ok(Self::Userspace),
            _ => Err(format!(
                "{text:?} is not a WireGuard implementation: auto, kernel or userspace"
            )),
        }
    }
}

/// The gateway's WireGuard device: the kernel's (it stays when the agent stops) or a TUN of this
/// process (boringtun, gone with it).
pub struct Device {
    name: String,
    peers: BTreeMap<[u8; 32], WireGuardPeer>,
    backend: Backend,
}

enum Backend {
    Kernel(wireguard_uapi::WgSocket),
    Userspace {
        api: BufReader<UnixStream>,
        // Dropped last: its threads end when the API socket closes.
        _handle: DeviceHandle,
    },
}

impl Device {
    /// Creates the device `name` with `key`, listening on `port`, with `mtu` (the largest
    /// tunnel packet it carries: the tunnel MTU less WireGuard's overhead), and sets it up: the
    /// kernel's where `how` allows it and the kernel has it (an existing kernel device of that
    /// name, an earlier agent's, is taken over with its peers and sessions), else boringtun's.
    pub fn start(
        name: &str,
        port: u16,
        mtu: u32,
        key: &KeyPair,
        how: Implementation,
    ) -> Result<Self, WireGuardError> {
        let device_err = |message: String| WireGuardError::Device {
            name: name.to_owned(),
            message,
        };
        let device = match how {
            Implementation::Userspace => {
                // An earlier agent's kernel device of that name (the setting changed) goes.
                if is_kernel_device(name) {
                    remove_kernel_device(name).map_err(device_err)?;
                }
                Self::userspace(name, port, key)?
            }
            Implementation::Kernel => Self::kernel(name, port, key).map_err(device_err)?,
            Implementation::Auto => match Self::kernel(name, port, key) {
                Ok(device) => device,
                Err(why) => {
                    tracing::info!(
                        device = name,
                        "no WireGuard in this kernel ({why}): running WireGuard in userspace (boringtun)"
                    );
                    Self::userspace(name, port, key)?
                }
            },
        };
        // On failure the kernel's device stays (it may be an earlier agent's, carrying
        // traffic): the next start takes it over again.
        device.set_link(mtu).map_err(device_err)?;
        Ok(device)
    }

    /// The kernel's device `name`, created or an earlier agent's, with `key` and `port`; why
    /// not (the kernel has no WireGuard, `name` is another kind of device) otherwise.
    fn kernel(name: &str, port: u16, key: &KeyPair) -> Result<Self, String> {
        let created = match crate::routes::link_kind(name) {
            Ok((Some(kind), _)) if kind == "wireguard" => false,
            Ok((kind, _)) if nix::net::if_::if_nametoindex(name).is_ok() => {
                return Err(format!(
                    "{name} exists and is not a WireGuard device (kind {})",
                    kind.as_deref().unwrap_or("none")
                ));
            }
            _ => {
                let out = Command::new("ip")
                    .args(["link", "add", name, "type", "wireguard"])
                    .output()
                    .map_err(|e| format!("running ip: {e}"))?;
                if !out.status.success() {
                    return Err(format!(
                        "ip link add {name} type wireguard: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    ));
                }
                true
            }
        };
        let configured = (|| -> Result<Self, String> {
            let mut socket = wireguard_uapi::WgSocket::connect()
                .map_err(|e| format!("the kernel's WireGuard netlink API: {e}"))?;
            let secret = key.secret.to_bytes();
            socket
                .set_device(
                    wireguard_uapi::set::Device::from_ifname(name)
                        .private_key(&secret)
                        .listen_port(port),
                )
                .map_err(|e| format!("setting the key and port: {e}"))?;
            // An earlier agent's peers: kept as they are until the first `set_peers`.
            let current = socket
                .get_device(wireguard_uapi::DeviceInterface::from_name(name))
                .map_err(|e| format!("reading the device: {e}"))?;
            let peers = current
                .peers
                .into_iter()
                .filter_map(|p| match p.endpoint {
                    Some(std::net::SocketAddr::V4(endpoint)) => Some((
                        p.public_key,
                        WireGuardPeer {
                            cluster_id: String::new(),
                            public_key: p.public_key,
                            endpoint,
                        },
                    )),
                    _ => None,
                })
                .collect();
            Ok(Self {
                name: name.to_owned(),
                peers,
                backend: Backend::Kernel(socket),
            })
        })();
        if configured.is_err() && created {
            let _ = Command::new("ip").args(["link", "del", name]).output();
        }
        configured
    }

    /// boringtun's device `name`, a TUN of this process.
    fn userspace(name: &str, port: u16, key: &KeyPair) -> Result<Self, WireGuardError> {
        let device_err = |message: String| WireGuardError::Device {
            name: name.to_owned(),
            message,
        };
        let (ours, theirs) = UnixStream::pair().map_err(|e| device_err(e.to_string()))?;
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get().min(4));
        let handle = DeviceHandle::new(
            name,
            DeviceConfig {
                n_threads: threads,
                use_connected_socket: true,
                use_multi_queue: true,
                uapi_fd: theirs.into_raw_fd(),
            },
        )
        .map_err(|e| {
            device_err(format!(
                "{e} (the agent needs /dev/net/tun and CAP_NET_ADMIN)"
            ))
        })?;
        let mut device = Self {
            name: name.to_owned(),
            peers: BTreeMap::new(),
            backend: Backend::Userspace {
                api: BufReader::new(ours),
                _handle: handle,
            },
        };
        device.set(&format!(
            "private_key={}\nlisten_port={port}\n",
            hex(&key.secret.to_bytes())
        ))?;
        Ok(device)
    }

    fn set_link(&self, mtu: u32) -> Result<(), String> {
        let name = &self.name;
        let out = Command::new("ip")
            .args(["link", "set", name, "mtu", &mtu.to_string(), "up"])
            .output()
            .map_err(|e| format!("running ip: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "ip link set {name} up: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(())
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `kernel` or `userspace (boringtun)`, for logs and `mc-agent maps`.
    pub fn implementation(&self) -> &'static str {
        match self.backend {
            Backend::Kernel(_) => "kernel",
            Backend::Userspace { .. } => "userspace (boringtun)",
        }
    }

    /// The kernel's device: it stays (carrying traffic) when this process ends.
    pub fn outlives_process(&self) -> bool {
        matches!(self.backend, Backend::Kernel(_))
    }

    /// Removes the device: the kernel's is deleted, boringtun's ends with this object.
    pub fn close(self) {
        if self.outlives_process()
            && let Err(e) = remove_kernel_device(&self.name)
        {
            tracing::warn!(device = self.name, "deleting the WireGuard device: {e}");
        }
    }

    /// Makes the device's peers exactly `peers`: a peer whose key is new is added, one whose
    /// endpoint changed is replaced (boringtun changes a peer only by removing it first; the
    /// kernel changes it in place), one no longer wanted is removed. Each peer may send from its
    /// endpoint's address only.
    pub fn set_peers(&mut self, peers: &[WireGuardPeer]) -> Result<bool, WireGuardError> {
        let wanted: BTreeMap<[u8; 32], &WireGuardPeer> =
            peers.iter().map(|p| (p.public_key, p)).collect();
        let gone: Vec<[u8; 32]> = self
            .peers
            .keys()
            .filter(|k| !wanted.contains_key(*k))
            .copied()
            .collect();
        let changed: Vec<&WireGuardPeer> = wanted
            .iter()
            .filter(|(k, w)| self.peers.get(*k) != Some(**w))
            .map(|(_, w)| *w)
            .collect();
        if gone.is_empty() && changed.is_empty() {
            return Ok(false);
        }
        match &mut self.backend {
            Backend::Kernel(socket) => {
                use wireguard_uapi::set::{AllowedIp, Peer, WgPeerF};
                let endpoints: Vec<(std::net::SocketAddr, std::net::IpAddr)> = changed
                    .iter()
                    .map(|w| (w.endpoint.into(), (*w.endpoint.ip()).into()))
                    .collect();
                let mut set: Vec<Peer> = gone
                    .iter()
                    .map(|k| Peer::from_public_key(k).flags(vec![WgPeerF::RemoveMe]))
                    .collect();
                for (w, (endpoint, ip)) in changed.iter().zip(&endpoints) {
                    set.push(
                        Peer::from_public_key(&w.public_key)
                            .flags(vec![WgPeerF::ReplaceAllowedIps])
                            .endpoint(endpoint)
                            .persistent_keepalive_interval(KEEPALIVE_SECONDS)
                            .allowed_ips(vec![AllowedIp {
                                ipaddr: ip,
                                cidr_mask: Some(32),
                            }]),
                    );
                }
                socket
                    .set_device(wireguard_uapi::set::Device::from_ifname(&self.name).peers(set))
                    .map_err(|e| WireGuardError::Api(e.to_string()))?;
            }
            Backend::Userspace { .. } => {
                let mut commands = String::new();
                for key in gone.iter().chain(
                    changed
                        .iter()
                        .map(|w| &w.public_key)
                        .filter(|k| self.peers.contains_key(*k)),
                ) {
                    commands.push_str(&format!("public_key={}\nremove=true\n", hex(key)));
                }
                for want in &changed {
                    let ip: Ipv4Addr = *want.endpoint.ip();
                    commands.push_str(&format!(
                        "public_key={}\nendpoint={}\npersistent_keepalive_interval={KEEPALIVE_SECONDS}\nreplace_allowed_ips=true\nallowed_ip={ip}/32\n",
                        hex(&want.public_key),
                        want.endpoint
                    ));
                }
                self.set(&commands)?;
            }
        }
        self.peers = wanted.into_iter().map(|(k, p)| (k, p.clone())).collect();
        Ok(true)
    }

    /// The cluster of the peer with `public_key` (base64), as the last [`Device::set_peers`]
    /// named it.
    pub fn cluster_of(&self, public_key: &str) -> Option<String> {
        let key = parse_key(public_key).ok()?;
        self.peers
            .get(&key)
            .map(|p| p.cluster_id.clone())
            .filter(|c| !c.is_empty())
    }

    /// Adds one peer that may send from `allowed` (CIDRs): for a plain WireGuard tunnel
    /// between subnets (the benchmark's bare tunnel), outside what [`Device::set_peers`] keeps.
    pub fn add_peer(
        &mut self,
        public_key: &[u8; 32],
        endpoint: std::net::SocketAddrV4,
        allowed: &[&str],
    ) -> Result<(), WireGuardError> {
        if let Backend::Kernel(socket) = &mut self.backend {
            use wireguard_uapi::set::{AllowedIp, Peer};
            let endpoint = std::net::SocketAddr::from(endpoint);
            let cidrs = allowed
                .iter()
                .map(|c| {
                    let (ip, len) = c.split_once('/').unwrap_or((c, "32"));
                    Ok((
                        ip.parse::<std::net::IpAddr>().map_err(|e| e.to_string())?,
                        len.parse::<u8>().map_err(|e| e.to_string())?,
                    ))
                })
                .collect::<Result<Vec<_>, String>>()
                .map_err(WireGuardError::Api)?;
            let peer = Peer::from_public_key(public_key)
                .endpoint(&endpoint)
                .allowed_ips(
                    cidrs
                        .iter()
                        .map(|(ipaddr, len)| AllowedIp {
                            ipaddr,
                            cidr_mask: Some(*len),
                        })
                        .collect(),
                );
            return socket
                .set_device(wireguard_uapi::set::Device::from_ifname(&self.name).peers(vec![peer]))
                .map_err(|e| WireGuardError::Api(e.to_string()));
        }
        let mut body = format!(
            "public_key={}\nendpoint={endpoint}\nreplace_allowed_ips=true\n",
            hex(public_key)
        );
        for cidr in allowed {
            body.push_str(&format!("allowed_ip={cidr}\n"));
        }
        self.set(&body)
    }

    /// Every peer's handshake and byte counters.
    pub fn stats(&mut self) -> Result<Vec<PeerStats>, WireGuardError> {
        if let Backend::Kernel(socket) = &mut self.backend {
            let device = socket
                .get_device(wireguard_uapi::DeviceInterface::from_name(&self.name))
                .map_err(|e| WireGuardError::Api(e.to_string()))?;
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            return Ok(device
                .peers
                .into_iter()
                .map(|p| PeerStats {
                    public_key: base64(&p.public_key),
                    endpoint: p.endpoint.map(|e| e.to_string()),
                    // The kernel gives the time of day of the last handshake (0: none).
                    since_handshake: (!p.last_handshake_time.is_zero())
                        .then(|| now.saturating_sub(p.last_handshake_time).as_secs()),
                    rx_bytes: p.rx_bytes,
                    tx_bytes: p.tx_bytes,
                })
                .collect());
        }
        let lines = self.request("get=1\n\n")?;
        let mut out: Vec<PeerStats> = Vec::new();
        for line in lines {
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            if key == "public_key" {
                let mut bytes = [0u8; 32];
                for (i, b) in bytes.iter_mut().enumerate() {
                    *b = u8::from_str_radix(value.get(2 * i..2 * i + 2).unwrap_or("00"), 16)
                        .unwrap_or(0);
                }
                out.push(PeerStats {
                    public_key: base64(&bytes),
                    ..Default::default()
                });
                continue;
            }
            let Some(peer) = out.last_mut() else {
                continue;
            };
            match key {
                "endpoint" => peer.endpoint = Some(value.to_owned()),
                "last_handshake_time_sec" => peer.since_handshake = value.parse().ok(),
                "rx_bytes" => peer.rx_bytes = value.parse().unwrap_or(0),
                "tx_bytes" => peer.tx_bytes = value.parse().unwrap_or(0),
                _ => {}
            }
        }
        Ok(out)
    }

    fn set(&mut self, body: &str) -> Result<(), WireGuardError> {
        let lines = self.request(&format!("set=1\n{body}\n"))?;
        match lines.iter().find_map(|l| l.strip_prefix("errno=")) {
            Some("0") => Ok(()),
            Some(errno) => Err(WireGuardError::Api(format!(
                "the device refused the settings (errno {errno})"
            ))),
            None => Err(WireGuardError::Api("no answer from the device".into())),
        }
    }

    /// One UAPI exchange: the request, then the answer's lines up to the empty line that ends
    /// it.
    fn request(&mut self, text: &str) -> Result<Vec<String>, WireGuardError> {
        let api_err = |e: std::io::Error| WireGuardError::Api(e.to_string());
        let Backend::Userspace { api, .. } = &mut self.backend else {
            return Err(WireGuardError::Api(
                "the kernel's device has no UAPI socket".into(),
            ));
        };
        api.get_mut().write_all(text.as_bytes()).map_err(api_err)?;
        let mut lines = Vec::new();
        loop {
            let mut line = String::new();
            if api.read_line(&mut line).map_err(api_err)? == 0 {
                return Err(WireGuardError::Api("the device closed its API".into()));
            }
            let line = line.trim_end().to_owned();
            if line.is_empty() {
                // `get` answers with its values, then errno, then the empty line.
                if lines.iter().any(|l: &String| l.starts_with("errno=")) {
                    return Ok(lines);
                }
                continue;
            }
            lines.push(line);
        }
    }
}

/// Deletes the kernel's WireGuard device `name` if there is one (`uninstall`, a Node that is no
/// longer the gateway); whether there was.
pub fn remove_kernel_device(name: &str) -> Result<bool, String> {
    if !is_kernel_device(name) {
        return Ok(false);
    }
    let out = Command::new("ip")
        .args(["link", "del", name])
        .output()
        .map_err(|e| format!("running ip: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "ip link del {name}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(true)
}

/// Whether `name` is a kernel WireGuard device (one that outlives the agent). Cheap when there
/// is no such interface (one system call).
pub fn is_kernel_device(name: &str) -> bool {
    nix::net::if_::if_nametoindex(name).is_ok()
        && matches!(crate::routes::link_kind(name), Ok((Some(kind), _)) if kind == "wireguard")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_as_wg_prints_them_and_nothing_else() {
        let key = [7u8; 32];
        assert_eq!(parse_key(&base64(&key)), Ok(key));
        assert_eq!(parse_key(&format!(" {}\n", base64(&key))), Ok(key));
        assert!(parse_key("not base64!").unwrap_err().contains("not base64"));
        assert!(parse_key("AAAA").unwrap_err().contains("3 bytes"));
    }

    #[test]
    fn a_key_is_kept_where_a_restarted_agent_finds_it() {
        let dir = std::env::temp_dir().join(format!("strait-wg-key-{}", std::process::id()));
        let path = dir.join("wireguard").join("private.key");
        let first = KeyPair::load_or_create(&path).unwrap();
        let again = KeyPair::load_or_create(&path).unwrap();
        assert_eq!(first.public_base64(), again.public_base64());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::write(&path, "garbage").unwrap();
        let e = KeyPair::load_or_create(&path).err().unwrap().to_string();
        assert!(e.contains("private.key") && e.contains("not base64"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
