//! A minimal HTTP/1.1 client over `tokio::net::TcpStream`: one connection per request
//! (`Connection: close`), loopback targets only. Enough for a benchmark on one machine, and no
//! dependency beyond tokio.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use cellar_core::{CellarError, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A server on this machine: where to connect and what to send as `Host`.
#[derive(Clone, Debug)]
pub struct Target {
    pub addr: SocketAddr,
    pub host_header: String,
}

impl Target {
    pub fn loopback(port: u16) -> Self {
        Target {
            addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port),
            host_header: format!("127.0.0.1:{port}"),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.host_header)
    }
}

/// Parses `http://HOST[:PORT][/]` where HOST is 127.0.0.1, localhost or [::1]; anything else
/// (another host, https, a path, credentials) is refused: this tool loads only this machine.
pub fn parse_loopback_url(url: &str) -> Result<Target> {
    let bad = |why: &str| CellarError::InvalidInput(format!("--url {url:?}: {why}"));
    let rest = url.strip_prefix("http://").ok_or_else(|| bad("only http://127.0.0.1, localhost or [::1]"))?;
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.contains('/') || authority.contains('@') || authority.contains('?') {
        return Err(bad("give the server's root only (no path, query or credentials)"));
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or_else(|| bad("unclosed [ in the host"))?;
        (host, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    let ip = match host.to_ascii_lowercase().as_str() {
        "127.0.0.1" | "localhost" => IpAddr::V4(Ipv4Addr::LOCALHOST),
        "::1" => IpAddr::V6(Ipv6Addr::LOCALHOST),
        other => {
            return Err(bad(&format!(
            "host {other:?} is not loopback: the load generator only targets 127.0.0.1, localhost or [::1]"
        )))
        }
    };
    let port = match port {
        None => 80,
        Some(p) => p.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| bad("bad port"))?,
    };
    Ok(Target { addr: SocketAddr::new(ip, port), host_header: authority.to_string() })
}

/// A complete request, ready to write (built once per query, sent many times).
pub fn build_request(method: &str, path: &str, host: &str, json_body: Option<&[u8]>) -> Vec<u8> {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    if let Some(body) = json_body {
        head.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    if let Some(body) = json_body {
        bytes.extend_from_slice(body);
    }
    bytes
}

#[derive(Clone, Debug)]
pub struct Response {
    pub status: u16,
    #[cfg_attr(not(test), allow(dead_code))]
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    #[cfg(test)]
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

fn invalid(why: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.into())
}

/// How far a buffer holds a response: `Ok(Some(response))` once complete.
fn try_parse(buf: &[u8], eof: bool) -> io::Result<Option<Response>> {
    let Some(head_end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return if eof {
            Err(invalid("connection closed before the response headers ended"))
        } else {
            Ok(None)
        };
    };
    let head = std::str::from_utf8(&buf[..head_end]).map_err(|_| invalid("response head is not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    if !version.starts_with("HTTP/1.") {
        return Err(invalid(format!("not an HTTP/1.x status line: {status_line:?}")));
    }
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| invalid(format!("bad status line {status_line:?}")))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let find = |name: &str| headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v);
    let body = &buf[head_end + 4..];
    let chunked = find("transfer-encoding").is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    let body = if chunked {
        match decode_chunked(body)? {
            Some(b) => b,
            None if eof => return Err(invalid("connection closed inside a chunked body")),
            None => return Ok(None),
        }
    } else if let Some(len) = find("content-length") {
        let len: usize = len.parse().map_err(|_| invalid(format!("bad Content-Length {len:?}")))?;
        if body.len() < len {
            return if eof {
                Err(invalid(format!("body cut short: {} of {len} bytes", body.len())))
            } else {
                Ok(None)
            };
        }
        body[..len].to_vec()
    } else if eof || status == 204 || status == 304 {
        body.to_vec()
    } else {
        return Ok(None);
    };
    Ok(Some(Response { status, headers, body }))
}

/// The body of a complete chunked encoding, `None` while incomplete.
fn decode_chunked(mut data: &[u8]) -> io::Result<Option<Vec<u8>>> {
    let mut out = Vec::new();
    loop {
        let Some(line_end) = data.windows(2).position(|w| w == b"\r\n") else { return Ok(None) };
        let size_text = std::str::from_utf8(&data[..line_end]).map_err(|_| invalid("bad chunk size"))?;
        let size_text = size_text.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16).map_err(|_| invalid("bad chunk size"))?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Ok(Some(out));
        }
        if data.len() < size + 2 {
            return Ok(None);
        }
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

/// Connects, writes `request`, reads one complete response (by Content-Length, chunks or EOF).
pub async fn send(addr: SocketAddr, request: &[u8]) -> io::Result<Response> {
    let mut stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    // A server that answers early (429) may close before reading everything: read its answer.
    let write_error = stream.write_all(request).await.err();
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = match stream.read(&mut chunk).await {
            Ok(n) => n,
            Err(e) => return Err(write_error.unwrap_or(e)),
        };
        if n > 0 {
            buf.extend_from_slice(&chunk[..n]);
        }
        match try_parse(&buf, n == 0) {
            Ok(Some(response)) => return Ok(response),
            Ok(None) => {}
            Err(e) => return Err(write_error.unwrap_or(e)),
        }
    }
}

/// A GET with a time limit, for /healthz and /metrics.
pub async fn get(target: &Target, path: &str, limit: Duration) -> io::Result<Response> {
    let request = build_request("GET", path, &target.host_header, None);
    tokio::time::timeout(limit, send(target.addr, &request))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, format!("GET {path}: no answer in {limit:?}")))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_urls_parse_and_others_are_refused() {
        for (url, port) in [
            ("http://127.0.0.1:8080", 8080),
            ("http://localhost:9/", 9),
            ("http://[::1]:7000", 7000),
            ("http://127.0.0.1", 80),
        ] {
            let t = parse_loopback_url(url).unwrap();
            assert_eq!(t.addr.port(), port, "{url}");
            assert!(t.addr.ip().is_loopback(), "{url}");
        }
        for url in [
            "http://10.0.0.1:80",
            "http://example.com:80",
            "http://0.0.0.0:80",
            "https://127.0.0.1:443",
            "127.0.0.1:80",
            "http://127.0.0.1:80/v1/search",
            "http://user@127.0.0.1:80",
            "http://127.0.0.1:0",
            "http://127.0.0.1:port",
            "http://127.0.0.1.evil.com:80",
        ] {
            let err = parse_loopback_url(url).unwrap_err();
            assert!(matches!(err, CellarError::InvalidInput(_)), "{url}: {err}");
        }
    }

    #[test]
    fn responses_parse_by_length_chunks_or_eof() {
        let r = try_parse(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi", false).unwrap().unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, b"hi".as_slice()));
        assert!(try_parse(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhi", false).unwrap().is_none());
        assert!(try_parse(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhi", true).is_err());
        let chunked = b"HTTP/1.1 429 Too Many\r\ntransfer-encoding: chunked\r\nRetry-After: 1\r\n\r\n2\r\nab\r\n1\r\nc\r\n0\r\n\r\n";
        let r = try_parse(chunked, false).unwrap().unwrap();
        assert_eq!((r.status, r.text().as_str(), r.header("retry-after")), (429, "abc", Some("1")));
        assert!(try_parse(&chunked[..chunked.len() - 6], false).unwrap().is_none());
        let r = try_parse(b"HTTP/1.0 503 x\r\n\r\nbody", true).unwrap().unwrap();
        assert_eq!((r.status, r.text().as_str()), (503, "body"));
        assert!(try_parse(b"SSH-2.0\r\n\r\n", true).is_err());
        assert!(try_parse(b"HTTP/1.1 200", true).is_err());
    }

    #[test]
    fn requests_carry_length_and_close() {
        let r = build_request("POST", "/v1/search", "127.0.0.1:1", Some(b"{}"));
        let text = String::from_utf8(r).unwrap();
        assert!(text.starts_with("POST /v1/search HTTP/1.1\r\nHost: 127.0.0.1:1\r\nConnection: close\r\n"));
        assert!(text.ends_with("Content-Length: 2\r\n\r\n{}"));
    }
}
