//! The server's one error shape: `{code, message, details}` with an HTTP status, mapped
//! exhaustively from [`CellarError`] and from the server's own refusals (bad JSON, overload,
//! deadline, authentication).

use std::path::{Path, PathBuf};

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use cellar_core::CellarError;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{json, Value};

/// The JSON body of every error answer.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ErrorBody {
    /// Stable and machine-readable: `invalid_request`, `wrong_dimension`, `overloaded`, ...
    pub code: String,
    pub message: String,
    /// Structured facts of the error (a field, a limit, the expected dimension), or `{}`.
    pub details: Value,
}

/// An error answer. `retry_after` (seconds) goes into a `Retry-After` header.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub details: Value,
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError { status, code, message: message.into(), details: json!({}), retry_after: None }
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = details;
        self
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    /// The server is full (queue or admitted requests): come back in a second.
    pub fn overloaded(message: String, details: Value) -> Self {
        let mut error =
            ApiError::new(StatusCode::TOO_MANY_REQUESTS, "overloaded", message).with_details(details);
        error.retry_after = Some(1);
        error
    }

    pub fn deadline(deadline_ms: u64) -> Self {
        ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            "deadline_exceeded",
            format!("the request did not finish within its deadline of {deadline_ms} ms"),
        )
        .with_details(json!({ "deadline_ms": deadline_ms }))
    }

    /// A JSON body that does not parse (`syntax`) or does not fit the request's schema; `path`
    /// is the field at fault (`.` for the whole body), named in the message and the details.
    pub fn from_json(error: serde_json::Error, path: &str) -> Self {
        let code = match error.classify() {
            serde_json::error::Category::Data => "invalid_request",
            _ => "malformed_json",
        };
        let message = if path == "." || code == "malformed_json" {
            format!("request body: {error}")
        } else {
            format!("request body: {path}: {error}")
        };
        ApiError::new(StatusCode::BAD_REQUEST, code, message)
            .with_details(json!({ "field": path, "line": error.line(), "column": error.column() }))
    }

    /// The JSON body of this error: every answer's error leaves through here or
    /// [`ApiError::into_body`], so both scrub absolute paths ([`public_paths`]) from the message
    /// and the details, whoever made the error.
    pub fn body(&self) -> Value {
        json!({ "code": self.code, "message": public_paths(&self.message), "details": public_details(&self.details) })
    }

    /// The body of this error as a typed value.
    pub fn into_body(self) -> ErrorBody {
        ErrorBody {
            code: self.code.to_string(),
            message: public_paths(&self.message),
            details: public_details(&self.details),
        }
    }
}

/// A path as clients see it: its last two components (`bm25/meta.json`), never where the
/// server keeps its data. The log has the whole path.
pub fn public_path(path: &Path) -> PathBuf {
    let parts: Vec<_> = path.components().rev().take(2).collect();
    parts.into_iter().rev().collect()
}

/// `text` with every absolute path in it (a `/` that starts a word, up to the next space, quote
/// or bracket) cut to its [`public_path`]: `/srv/data/idx/bm25: corrupted` becomes
/// `idx/bm25: corrupted`. Errors whose messages carry paths in free text (a tantivy or OS
/// message, an `Internal` wrapping another error, an index's directory) reach clients this way
/// and never whole; the log keeps them whole. This API's own routes (`/v1/...`, which a client
/// sent) are left as they are.
pub fn public_paths(text: &str) -> String {
    const STARTS: &[char] = &[' ', '"', '\'', '(', '[', '{', '<', '=', ':', '`', '\n', '\t', ','];
    const ENDS: &[char] = &[' ', '"', '\'', ')', ']', '}', '>', '`', '\n', '\t', ',', ';'];
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut previous: Option<char> = None;
    while let Some(c) = rest.chars().next() {
        let starts_path = c == '/'
            && previous.is_none_or(|p| STARTS.contains(&p))
            && rest[1..].chars().next().is_some_and(|n| n != '/' && !ENDS.contains(&n))
            && !rest.starts_with("/v1/");
        if !starts_path {
            out.push(c);
            previous = Some(c);
            rest = &rest[c.len_utf8()..];
            continue;
        }
        let end = rest.find(ENDS).unwrap_or(rest.len());
        // A path ends before the punctuation of the sentence it is in (`/a/b: ...`, `/a/b.`).
        let path = rest[..end].trim_end_matches([':', '.']);
        out.push_str(&public_path(Path::new(path)).to_string_lossy());
        previous = path.chars().last();
        rest = &rest[path.len()..];
    }
    out
}

/// [`public_paths`] over every string of a details object.
fn public_details(details: &Value) -> Value {
    match details {
        Value::String(s) => Value::String(public_paths(s)),
        Value::Array(items) => Value::Array(items.iter().map(public_details).collect()),
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), public_details(v))).collect())
        }
        other => other.clone(),
    }
}

impl From<CellarError> for ApiError {
    fn from(full: CellarError) -> Self {
        let error = full.map_paths(public_path);
        let message = public_paths(&error.to_string());
        let code = error.code();
        let (status, details) = match &error {
            CellarError::InvalidInput(_) => (StatusCode::BAD_REQUEST, json!({})),
            CellarError::WrongDimension { expected, received } => {
                (StatusCode::UNPROCESSABLE_ENTITY, json!({ "expected": expected, "received": received }))
            }
            CellarError::DocOutOfRange { id, count } => {
                (StatusCode::NOT_FOUND, json!({ "id": id, "count": count }))
            }
            CellarError::NotFound(_) => (StatusCode::NOT_FOUND, json!({})),
            CellarError::Corrupted { path, offset, .. } => {
                (StatusCode::INTERNAL_SERVER_ERROR, json!({ "path": path, "offset": offset }))
            }
            // The files are fine, this build is too old or too new for them: a conflict between
            // the server and its data, not a server fault.
            CellarError::Incompatible { path, found, oldest, newest } => (
                StatusCode::CONFLICT,
                json!({ "path": path, "found": found, "oldest": oldest, "newest": newest }),
            ),
            CellarError::Model { path, .. } => (StatusCode::SERVICE_UNAVAILABLE, json!({ "path": path })),
            CellarError::Locked { path, .. } => (StatusCode::CONFLICT, json!({ "path": path })),
            CellarError::Unsupported(_) => (StatusCode::NOT_IMPLEMENTED, json!({})),
            CellarError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, json!({})),
            // Nothing was written: the client may retry once space is freed.
            CellarError::Io { path, .. } if error.is_disk_full() => {
                (StatusCode::INSUFFICIENT_STORAGE, json!({ "path": path }))
            }
            CellarError::Io { path, .. } => (StatusCode::INTERNAL_SERVER_ERROR, json!({ "path": path })),
        };
        match &full {
            CellarError::Internal(_) => {
                log::error!("{code} (HTTP {status}): {full}: a bug or a vanished worker; the request failed")
            }
            _ if status.is_server_error() => log::error!("{code} (HTTP {status}): {full}"),
            _ => {}
        }
        ApiError { status, code, message, details, retry_after: None }
    }
}

/// A PUT the data directory refused: past `--max-indexes` it is a 409 `too_many_indexes` (a
/// conflict with what the directory holds: drop one, then retry).
impl From<crate::registry::CreateError> for ApiError {
    fn from(error: crate::registry::CreateError) -> Self {
        match error {
            crate::registry::CreateError::TooMany { max } => {
                let message = error.to_string();
                ApiError::new(StatusCode::CONFLICT, "too_many_indexes", message)
                    .with_details(json!({ "max_indexes": max }))
            }
            crate::registry::CreateError::Cellar(e) => e.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body())).into_response();
        if let Some(seconds) = self.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_internal_error_is_a_500_with_its_own_code() {
        let error = CellarError::Internal("the search worker stopped without answering".into());
        assert!(!error.is_user_error());
        let api = ApiError::from(error);
        assert_eq!(api.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(api.code, "internal");
        assert!(api.message.contains("the search worker stopped"), "{}", api.message);
    }

    #[test]
    fn clients_see_no_absolute_paths_and_a_full_disk_is_a_507() {
        let full = std::io::Error::from_raw_os_error(libc::ENOSPC);
        let api = ApiError::from(CellarError::io(Path::new("/srv/data/streams/s1/wal.log"), full));
        assert_eq!(api.status, StatusCode::INSUFFICIENT_STORAGE);
        assert_eq!(api.code, "disk_full");
        assert_eq!(api.details["path"], "s1/wal.log");
        assert!(!api.message.contains("/srv"), "{}", api.message);
        let corrupt = CellarError::corrupted(Path::new("/srv/data/idx/texts.bin"), 40, "checksum");
        let api = ApiError::from(corrupt);
        assert_eq!(api.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(api.message.starts_with("idx/texts.bin: corrupted"), "{}", api.message);
        let other = std::io::Error::from_raw_os_error(libc::EIO);
        let api = ApiError::from(CellarError::io(Path::new("/a/b/c"), other));
        assert_eq!((api.status, api.code), (StatusCode::INTERNAL_SERVER_ERROR, "io"));
    }

    /// Issue 43.3 and 43.2: a BM25 commit out of file descriptors is 500 `io` and one out of
    /// space 507 `disk_full`, naming only `idx/bm25`; a write refused while the memtable cannot
    /// be flushed (an error of the full disk's kind carrying its explanation) is 507 too.
    #[test]
    fn a_failed_bm25_commit_or_a_full_memtable_is_typed_and_names_no_server_path() {
        let bm25 = Path::new("/srv/data/idx/bm25");
        for (errno, status, code) in [
            (libc::EMFILE, StatusCode::INTERNAL_SERVER_ERROR, "io"),
            (libc::ENOSPC, StatusCode::INSUFFICIENT_STORAGE, "disk_full"),
        ] {
            let api = ApiError::from(CellarError::io(bm25, std::io::Error::from_raw_os_error(errno)));
            assert_eq!((api.status, api.code), (status, code));
            assert!(
                api.message.starts_with("idx/bm25: ") && !api.body().to_string().contains("/srv"),
                "{}",
                api.message
            );
        }
        let full = std::io::Error::new(
            std::io::ErrorKind::StorageFull,
            "the memtable ...: this batch was not written",
        );
        let api = ApiError::from(CellarError::io(Path::new("/srv/data/idx/live"), full));
        assert_eq!((api.status, api.code), (StatusCode::INSUFFICIENT_STORAGE, "disk_full"));
        assert_eq!(api.message, "idx/live: the memtable ...: this batch was not written");
    }

    #[test]
    fn paths_in_free_text_reach_clients_cut_to_their_last_two_parts() {
        for (text, want) in [
            ("/srv/data/idx/bm25: corrupted", "idx/bm25: corrupted"),
            ("open \"/srv/data/a/b.bin\" failed (/srv/x/y/z).", "open \"a/b.bin\" failed (y/z)."),
            ("path=/tmp/.tmpAb12/index/meta.json, then", "path=index/meta.json, then"),
            ("4 bytes / 2 values and a/b/c stay; /v1 too", "4 bytes / 2 values and a/b/c stay; /v1 too"),
            ("no endpoint at /v1/indexes/x/nothing", "no endpoint at /v1/indexes/x/nothing"),
            ("file:/srv/data/x/y and http://host/a/b/c", "file:x/y and http://host/a/b/c"),
            ("", ""),
        ] {
            assert_eq!(public_paths(text), want, "{text}");
            assert_eq!(public_paths(want), want, "scrubbing twice changes nothing: {want}");
        }
        // Errors that carry paths in their text, whatever their kind, and errors made by hand.
        let errors = [
            CellarError::Internal("bm25 commit: /srv/data/indexes/x/bm25/meta.json: corrupted".into()),
            CellarError::invalid("/srv/data/indexes/x: this index holds the caller's embeddings"),
            CellarError::corrupted(Path::new("/srv/data/x/bm25"), 0, "tantivy: open /srv/data/x/bm25/1.idx"),
        ];
        for error in errors {
            let body = ApiError::from(error).body().to_string();
            assert!(!body.contains("/srv"), "{body}");
        }
        let by_hand =
            ApiError::new(StatusCode::NOT_FOUND, "not_found", "no index \"x\" in /srv/data/indexes")
                .with_details(json!({ "dir": "/srv/data/indexes" }));
        assert!(!by_hand.body().to_string().contains("/srv"), "{}", by_hand.body());
        assert!(!serde_json::to_string(&by_hand.into_body()).unwrap().contains("/srv"));
    }

    #[test]
    fn a_newer_format_is_a_409_naming_both_versions() {
        let error =
            CellarError::Incompatible { path: "idx/index.json".into(), found: 7, oldest: 1, newest: 2 };
        let api = ApiError::from(error);
        assert_eq!(api.status, StatusCode::CONFLICT);
        assert_eq!(api.code, "incompatible_version");
        assert!(api.message.contains('7') && api.message.contains("1..=2"), "{}", api.message);
        assert_eq!(api.details["found"], 7);
        assert_eq!(api.details["newest"], 2);
    }
}
