//! The server on a real loopback socket, where what happens before a request reaches the
//! router matters: a body past the byte budget is refused unread, slow clients hold no
//! admission slot, and past the connection limit new connections wait until one closes.

use std::time::Duration;

use cellar_server::{AppState, ServerConfig};
use serde_json::json;

mod common;

use common::{config, index};

/// A raw HTTP/1.1 exchange on a real socket: writes `head` and `body`, then reads until the
/// server closes or 20 s pass. Returns what arrived (empty when the server closed silently).
async fn exchange(address: std::net::SocketAddr, head: &str, body: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "no answer and no close within 20 s; got so far: {answer:?}");
    String::from_utf8_lossy(&answer).into_owned()
}

/// A small search on a fresh connection is answered 200.
async fn answers_a_query(address: std::net::SocketAddr) {
    let body = json!({ "query": "coffee", "k": 1 }).to_string();
    let answer = exchange(address, &search_head(body.len()), body.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

fn search_head(length: usize) -> String {
    format!(
        "POST /v1/search HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n"
    )
}

async fn serve_in_background(
    config: ServerConfig,
) -> (std::net::SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let state = AppState::new(index(), config);
    tokio::spawn(cellar_server::serve_on(listener, state, async move {
        let _ = stopped.await;
    }));
    (address, stop)
}

/// Under a byte budget a body counts from its Content-Length before it is read: past the budget
/// a request is refused at once with its body unread (reading it first would wait out the read
/// timeout for a body that never comes, and hold it in memory when it does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_byte_budget_a_body_is_refused_before_it_is_read() {
    use tokio::io::AsyncWriteExt;
    let mut tight = config();
    tight.max_in_flight_bytes = Some(150);
    tight.read_timeout = Duration::from_secs(5);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let state = AppState::new(index(), tight);
    tokio::spawn(cellar_server::serve_on(listener, state.clone(), async move {
        let _ = stopped.await;
    }));
    let settled = |want: usize| {
        let state = state.clone();
        async move {
            for _ in 0..500 {
                if state.in_flight_bytes() == want {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("in-flight bytes stayed at {}, not {want}", state.in_flight_bytes());
        }
    };
    // A client announces 100 bytes and sends one: it holds 100 of the 150.
    let mut trickler = tokio::net::TcpStream::connect(address).await.unwrap();
    trickler.write_all(search_head(100).as_bytes()).await.unwrap();
    trickler.write_all(b"{").await.unwrap();
    settled(100).await;
    // 80 more announced, none sent: 429 now, not 408 after the 5 s read timeout.
    let answer = exchange(address, &search_head(80), b"").await;
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
    assert!(answer.contains("max_in_flight_bytes") && answer.contains("150"), "{answer}");
    drop(trickler);
    settled(0).await;
    answers_a_query(address).await;
    stop.send(()).unwrap();
}

/// Issue 21.3: connections trickling their bodies held every admission slot (429 for all), a
/// Content-Length above the limit was not refused up front, one larger than the body sent was
/// never answered, and a connection that never finished its head was never closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_hold_no_admission_slot_and_are_answered_or_closed() {
    use tokio::io::AsyncWriteExt;
    let mut patient = config();
    patient.max_in_flight = 2;
    patient.read_timeout = Duration::from_secs(60);
    let (address, stop) = serve_in_background(patient).await;
    // Four clients announce 100 bytes and send one: twice the admission limit.
    let mut tricklers = Vec::new();
    for _ in 0..4 {
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        stream.write_all(search_head(100).as_bytes()).await.unwrap();
        stream.write_all(b"{").await.unwrap();
        tricklers.push(stream);
    }
    answers_a_query(address).await;
    // 50 MiB announced, 13 bytes sent: refused at once from the header (the timeout is 60 s).
    let answer = exchange(address, &search_head(52_428_800), b"{\"query\":\"a\"}").await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("body_too_large") && answer.contains("52428800"), "{answer}");
    drop(tricklers);
    stop.send(()).unwrap();

    let mut hasty = config();
    hasty.read_timeout = Duration::from_millis(300);
    let (address, stop) = serve_in_background(hasty).await;
    // A body that stops short of its Content-Length: 408 once the read timeout passes.
    let answer = exchange(address, &search_head(100), b"{\"query\":").await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("body_timeout"), "{answer}");
    // A head that never ends: the connection is closed.
    let answer = exchange(address, "POST /v1/search HTTP/1.1\r\nHost: t\r\n", b"").await;
    assert!(!answer.starts_with("HTTP/1.1 2"), "{answer}");
    answers_a_query(address).await;
    stop.send(()).unwrap();
}

/// Issue 16.6: past `max_connections` the server accepts nothing more until a connection
/// closes, so idle clients cannot take its file descriptors; once they go (closed by the client,
/// or by the server after `read_timeout` without a request head), a normal request is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_max_connections_new_ones_wait_until_one_closes() {
    let mut limited = config();
    limited.max_connections = 2;
    limited.read_timeout = Duration::from_secs(60);
    let (address, stop) = serve_in_background(limited).await;
    let idle: Vec<_> = futures_idle(address, 2).await;
    let body = json!({ "query": "coffee", "k": 1 }).to_string();
    let request =
        tokio::spawn(async move { exchange(address, &search_head(body.len()), body.as_bytes()).await });
    // Held back while both slots are taken: the server cannot accept it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!request.is_finished(), "a third connection was served past the limit of 2");
    drop(idle);
    let answer = request.await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    stop.send(()).unwrap();

    // Idle connections that never send a head are closed after the read timeout, freeing slots.
    let mut hasty = config();
    hasty.max_connections = 2;
    hasty.read_timeout = Duration::from_millis(300);
    let (address, stop) = serve_in_background(hasty).await;
    let _idle = futures_idle(address, 2).await;
    answers_a_query(address).await;
    stop.send(()).unwrap();
}

/// `n` connections that send nothing.
async fn futures_idle(address: std::net::SocketAddr, n: usize) -> Vec<tokio::net::TcpStream> {
    let mut idle = Vec::new();
    for _ in 0..n {
        idle.push(tokio::net::TcpStream::connect(address).await.unwrap());
    }
    // Let the server accept them (and so take the slots) before the caller goes on.
    tokio::time::sleep(Duration::from_millis(100)).await;
    idle
}
