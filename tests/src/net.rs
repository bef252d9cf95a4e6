//! Plain-socket clients for what the testbed serves (controllers' health endpoints, Pods' web
//! servers).

use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpStream},
    os::fd::AsRawFd as _,
    time::Duration,
};

/// Runs `f` on a thread inside the network namespace `/run/netns/<name>`.
pub fn in_netns<T: Send + 'static>(name: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/run/netns/{name}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        // SAFETY: setns on this thread only, with a valid namespace file descriptor.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
        f()
    })
    .join()
    .expect("thread in the network namespace")
}

/// Runs `f` in the testbed's core namespace, which routes to the API servers, the Nodes and
/// their Pods (the host routes only to the API servers).
pub fn in_core<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    in_netns("strait-core", f)
}

/// `GET path` over HTTP/1.0, connecting within `connect_timeout` and reading for up to 5 s: the
/// status code and the body (as sent, not trimmed).
pub fn http_get(
    addr: SocketAddr,
    path: &str,
    connect_timeout: Duration,
) -> Result<(u16, String), String> {
    let mut conn = TcpStream::connect_timeout(&addr, connect_timeout)
        .map_err(|e| format!("connect {addr}: {e}"))?;
    conn.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    // One write: the request in one segment.
    conn.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .map_err(|e| e.to_string())?;
    let mut text = String::new();
    conn.read_to_string(&mut text)
        .map_err(|e| format!("reading from {addr}: {e}"))?;
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no HTTP status in {text:?}"))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .ok_or_else(|| format!("no HTTP body in {text:?}"))?;
    Ok((code, body))
}

/// tcpdump on one of the router's bridges (in the testbed's `strait-core` namespace), writing a
/// pcap, not promiscuous: it sees what the router routes (between clusters, to the API servers),
/// not a cluster's own Node-to-Node frames crossing the bridge; or on a device of a Node.
/// Stopped and removed when dropped.
pub struct RouterCapture {
    child: std::process::Child,
    pcap: std::path::PathBuf,
}

impl RouterCapture {
    /// Starts capturing on `bridge` (`br-west`, say) what `filter` (tcpdump syntax) selects.
    pub fn start(bridge: &str, filter: &str) -> Self {
        Self::start_in("strait-core", bridge, filter)
    }

    /// Starts capturing on `device` of a testbed Node (`west`, `node-a`): its namespace is
    /// `strait-<cluster>-<node>` (on the gateway, `strait-wg0` shows what WireGuard decrypted).
    pub fn on_node(cluster: &str, node: &str, device: &str, filter: &str) -> Self {
        Self::start_in(&format!("strait-{cluster}-{node}"), device, filter)
    }

    fn start_in(netns: &str, device: &str, filter: &str) -> Self {
        use std::process::{Command, Stdio};
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let pcap = std::env::temp_dir().join(format!(
            "strait-testbed-{}-{}.pcap",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let child = Command::new("ip")
            .args(["netns", "exec", netns, "tcpdump", "-p", "-i", device])
            .args(["-n", "-U", "-w"])
            .arg(&pcap)
            .arg(filter)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("tcpdump");
        // tcpdump needs a moment before it captures.
        std::thread::sleep(Duration::from_millis(500));
        Self { child, pcap }
    }

    /// What was captured so far, one line per packet (`tcpdump -n -r`).
    pub fn lines(&self) -> Vec<String> {
        let out = std::process::Command::new("tcpdump")
            .args(["-n", "-r"])
            .arg(&self.pcap)
            .output()
            .expect("tcpdump -r");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The capture file's bytes (every packet as it crossed, payloads included).
    pub fn bytes(&self) -> Vec<u8> {
        std::fs::read(&self.pcap).unwrap_or_default()
    }

    /// Stops capturing (what was captured stays readable).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RouterCapture {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_file(&self.pcap);
    }
}

/// The underlay between two addresses cut in the testbed's router (a blackhole rule each way in
/// `strait-core`, the namespace that routes between the clusters' underlays), for everything or
/// only one UDP port; restored when dropped, also when a test fails.
pub struct UnderlayCut(String, String, Option<u16>);

impl UnderlayCut {
    fn rules(&self, verb: &str) -> Vec<Vec<String>> {
        [(&self.0, &self.1), (&self.1, &self.0)]
            .iter()
            .map(|(from, to)| {
                [
                    "netns",
                    "exec",
                    "strait-core",
                    "ip",
                    "rule",
                    verb,
                    "from",
                    from,
                    "to",
                    to,
                ]
                .iter()
                .map(|s| (*s).to_owned())
                .chain(self.2.into_iter().flat_map(|port| {
                    [
                        "ipproto".to_owned(),
                        "udp".to_owned(),
                        "dport".to_owned(),
                        port.to_string(),
                    ]
                }))
                .chain(["priority", "90", "blackhole"].map(str::to_owned))
                .collect()
            })
            .collect()
    }

    pub fn new(a: &str, b: &str) -> Self {
        Self::with(UnderlayCut(a.to_owned(), b.to_owned(), None))
    }

    /// Only UDP to `port`, both ways.
    pub fn udp_port(a: &str, b: &str, port: u16) -> Self {
        Self::with(UnderlayCut(a.to_owned(), b.to_owned(), Some(port)))
    }

    fn with(cut: Self) -> Self {
        for args in cut.rules("add") {
            let ok = std::process::Command::new("ip")
                .args(&args)
                .status()
                .expect("ip rule");
            assert!(ok.success(), "ip {}", args.join(" "));
        }
        cut
    }
}

impl Drop for UnderlayCut {
    fn drop(&mut self) {
        for args in self.rules("del") {
            let _ = std::process::Command::new("ip").args(&args).status();
        }
    }
}
