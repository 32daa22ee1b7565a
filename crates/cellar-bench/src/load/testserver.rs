//! A tiny HTTP server for the tests: answers after a configurable delay (one hit whose id is the
//! request's query text), every n-th search refused with 429, a /metrics page whose read counter
//! grows 4096 bytes per answered search.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Clone, Copy, Debug)]
pub struct Behaviour {
    pub delay: Duration,
    /// Every n-th search gets 429 (0: never).
    pub reject_every: usize,
}

pub struct TestServer {
    pub addr: SocketAddr,
    searches: Arc<AtomicUsize>,
}

impl TestServer {
    /// Searches received so far.
    pub fn searches(&self) -> usize {
        self.searches.load(Ordering::SeqCst)
    }
}

pub async fn spawn(behaviour: Behaviour) -> TestServer {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let searches = Arc::new(AtomicUsize::new(0));
    let answered = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&searches);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let (searches, answered) = (Arc::clone(&counter), Arc::clone(&answered));
            tokio::spawn(async move {
                let _ = serve(stream, behaviour, searches, answered).await;
            });
        }
    });
    TestServer { addr, searches }
}

async fn serve(
    mut stream: TcpStream,
    b: Behaviour,
    searches: Arc<AtomicUsize>,
    answered: Arc<AtomicUsize>,
) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let length: usize = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string()))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
    let (status, extra, body) = match path.as_str() {
        "/healthz" => ("200 OK", "", "{\"status\":\"ok\",\"docs\":3}".to_string()),
        "/metrics" => {
            let bytes = 4096 * answered.load(Ordering::SeqCst);
            let text = format!(
                "# TYPE cellar_read_bytes_total counter\ncellar_read_bytes_total {bytes}\n\
                 cellar_requests_total{{endpoint=\"search\",status=\"200\"}} 1\n\
                 cellar_process_rss_bytes 1.2345e7\n"
            );
            ("200 OK", "", text)
        }
        "/v1/search" => {
            let n = searches.fetch_add(1, Ordering::SeqCst) + 1;
            if b.reject_every > 0 && n.is_multiple_of(b.reject_every) {
                ("429 Too Many Requests", "Retry-After: 1\r\n", "{\"code\":\"overloaded\"}".to_string())
            } else {
                tokio::time::sleep(b.delay).await;
                answered.fetch_add(1, Ordering::SeqCst);
                ("200 OK", "", echo_hit(&buf[head_end..]))
            }
        }
        _ => ("404 Not Found", "", "{}".to_string()),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\n{extra}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

/// A search answer with one hit whose id is the request's `query`.
fn echo_hit(request_body: &[u8]) -> String {
    let request: serde_json::Value = serde_json::from_slice(request_body).unwrap_or_default();
    let id = request["query"].as_str().unwrap_or("");
    serde_json::json!({ "hits": [{ "id": id, "score": 1.0 }] }).to_string()
}
