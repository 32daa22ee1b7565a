//! Helpers every CLI test binary shares: run the binary, read its output, check a user error.
#![allow(dead_code)] // each test binary uses its own subset

use std::process::{Command, Output};

pub fn cellar(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cellar")).args(args).output().expect("run cellar")
}

/// The loopback port of `cellar serve`'s ready line (`listening on http://127.0.0.1:PORT ...`).
pub fn port_of(ready: &str) -> u16 {
    ready
        .split("http://127.0.0.1:")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no address in {ready:?}"))
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub fn stderr(out: &Output) -> String {
    text(&out.stderr)
}

/// Exit code 2 with `needle` in the message, and never a panic.
pub fn assert_user_error(out: &Output, needle: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert!(err.contains(needle) && !err.contains("panicked"), "expected {needle:?} in: {err}");
}

/// One HTTP/1.1 exchange over a fresh loopback connection: (status, body).
pub fn http(port: u16, method: &str, path: &str, body: &str) -> (u16, String) {
    http_with(port, method, path, "", body)
}

/// `http` with extra header lines (each ending in `\r\n`).
pub fn http_with(port: u16, method: &str, path: &str, headers: &str, body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(std::time::Duration::from_secs(60))).unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response[9..12].parse().unwrap();
    let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_string();
    (status, body)
}
