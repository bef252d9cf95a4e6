//! kube-proxy's mode, as kube-proxy itself reports it: `GET /proxyMode` on its metrics port
//! (10249; `iptables`, `ipvs`, `nftables`, `kernelspace`). It matters to stretched
//! NetworkPolicy: in IPVS mode kube-proxy picks a ClusterIP's backend at netfilter's LOCAL_IN,
//! after the gateway's policy program at PREROUTING, which then sees the ClusterIP and not the
//! Pod (docs/design.md §4b). The agent asks on the Node's loopback (kube-proxy's default
//! `--metrics-bind-address`) and on the Node's address.

use std::{net::SocketAddr, time::Duration};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// kube-proxy's mode on this Node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProxyMode {
    Iptables,
    Nftables,
    Ipvs,
    /// What it answered, when it is none of the above (`kernelspace` on Windows).
    Other(String),
}

impl ProxyMode {
    /// The mode from the body of kube-proxy's `/proxyMode` answer.
    pub fn parse(body: &str) -> Option<ProxyMode> {
        match body.trim() {
            "" => None,
            "iptables" => Some(ProxyMode::Iptables),
            "nftables" => Some(ProxyMode::Nftables),
            "ipvs" => Some(ProxyMode::Ipvs),
            other => Some(ProxyMode::Other(other.to_owned())),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            ProxyMode::Iptables => "iptables",
            ProxyMode::Nftables => "nftables",
            ProxyMode::Ipvs => "ipvs",
            ProxyMode::Other(s) => s,
        }
    }
}

/// The body of an HTTP/1.x answer with status 200, else `None`.
fn ok_body(answer: &str) -> Option<&str> {
    let (head, body) = answer.split_once("\r\n\r\n")?;
    let status = head.lines().next()?;
    let mut words = status.split_whitespace();
    (words.next()?.starts_with("HTTP/1.") && words.next()? == "200").then_some(body)
}

async fn ask_one(addr: SocketAddr) -> Option<ProxyMode> {
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let request = format!("GET /proxyMode HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut answer = Vec::new();
    // The answer is a few bytes; anything past 4 KiB is not kube-proxy's.
    stream.take(4096).read_to_end(&mut answer).await.ok()?;
    ProxyMode::parse(ok_body(&String::from_utf8_lossy(&answer))?)
}

/// Asks kube-proxy at each address in turn (one second each); `None` when none answered (no
/// kube-proxy on this Node, a replacement such as Cilium's, or its metrics elsewhere).
pub async fn ask(addrs: &[SocketAddr]) -> Option<ProxyMode> {
    for &addr in addrs {
        if let Ok(Some(mode)) = tokio::time::timeout(Duration::from_secs(1), ask_one(addr)).await {
            return Some(mode);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_modes_kube_proxy_reports() {
        assert_eq!(ProxyMode::parse("ipvs"), Some(ProxyMode::Ipvs));
        assert_eq!(ProxyMode::parse("iptables\n"), Some(ProxyMode::Iptables));
        assert_eq!(ProxyMode::parse("nftables"), Some(ProxyMode::Nftables));
        assert_eq!(
            ProxyMode::parse("kernelspace"),
            Some(ProxyMode::Other("kernelspace".into()))
        );
        assert_eq!(ProxyMode::parse(" "), None);
    }

    #[test]
    fn only_a_200_answer_has_a_mode() {
        let ok = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nipvs";
        assert_eq!(ok_body(ok), Some("ipvs"));
        assert_eq!(
            ok_body("HTTP/1.1 404 Not Found\r\n\r\n404 page not found"),
            None
        );
        assert_eq!(ok_body("garbage"), None);
    }

    /// A listener that answers as kube-proxy does: the agent reads its mode; a closed port
    /// answers nothing.
    #[tokio::test]
    async fn asks_a_listener_that_answers_like_kube_proxy() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 512];
            let _ = s.read(&mut buf).await;
            s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nipvs")
                .await
                .unwrap();
        });
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        assert_eq!(ask(&[closed, addr]).await, Some(ProxyMode::Ipvs));
        assert_eq!(ask(&[closed]).await, None);
    }
}
