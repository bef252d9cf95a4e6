//! The testbed Pods' server (`cargo xtask testbed pod add --serve-http <port>`), in the testbed's
//! tools image: HTTP on TCP `port` answers every request with one line, `<answer>\n`; UDP `port`
//! echoes each datagram prefixed with `<answer>: `; `GET /slow/<bytes>` sends a stream of a known
//! pattern (byte i is i mod 251) paced at about 2 MB/s, for tests of what happens to established
//! flows. Only the standard library: it is copied into an image with the libraries ldd names.
//!
//! Usage: `strait-test-server --port <port> --answer <line>`.

use std::{
    io::{Read as _, Write as _},
    net::{TcpListener, TcpStream, UdpSocket},
    process::ExitCode,
    time::Duration,
};

fn main() -> ExitCode {
    let mut port = None;
    let mut answer = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let (key, value) = match a.split_once('=') {
            Some((k, v)) => (k.to_owned(), Some(v.to_owned())),
            None => (a.clone(), args.next()),
        };
        match key.as_str() {
            "--port" => port = value.and_then(|v| v.parse::<u16>().ok()),
            "--answer" => answer = value,
            _ => {
                eprintln!("unknown argument {a:?}; usage: --port <port> --answer <line>");
                return ExitCode::from(2);
            }
        }
    }
    let (Some(port), Some(answer)) = (port, answer) else {
        eprintln!("usage: strait-test-server --port <port> --answer <line>");
        return ExitCode::from(2);
    };
    match serve(port, &answer) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("strait-test-server: {e}");
            ExitCode::FAILURE
        }
    }
}

fn serve(port: u16, answer: &str) -> std::io::Result<()> {
    let udp = UdpSocket::bind(("0.0.0.0", port))?;
    let prefix = format!("{answer}: ");
    std::thread::spawn(move || {
        let mut buf = [0u8; 65536];
        while let Ok((n, from)) = udp.recv_from(&mut buf) {
            let mut reply = prefix.clone().into_bytes();
            reply.extend_from_slice(&buf[..n]);
            let _ = udp.send_to(&reply, from);
        }
    });
    let listener = TcpListener::bind(("0.0.0.0", port))?;
    println!("answering on TCP and UDP port {port} as {answer:?}");
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let answer = answer.to_owned();
        std::thread::spawn(move || handle(conn, &answer));
    }
    Ok(())
}

fn handle(mut conn: TcpStream, answer: &str) {
    // Read the whole request head: closing with unread data would send a reset.
    let mut req = Vec::new();
    let mut buf = [0u8; 2048];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 65536 {
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => req.extend_from_slice(&buf[..n]),
        }
    }
    let head = String::from_utf8_lossy(&req).into_owned();
    if let Some(n) = head
        .strip_prefix("GET /slow/")
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse::<usize>().ok())
    {
        let _ = write!(
            conn,
            "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {n}\r\nConnection: close\r\n\r\n"
        );
        let chunk = 64 * 1024;
        let mut sent = 0;
        while sent < n {
            let len = chunk.min(n - sent);
            let data: Vec<u8> = (sent..sent + len).map(|i| (i % 251) as u8).collect();
            if conn.write_all(&data).is_err() {
                return;
            }
            sent += len;
            std::thread::sleep(Duration::from_millis(32));
        }
        return;
    }
    let body = format!("{answer}\n");
    let _ = write!(
        conn,
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}
