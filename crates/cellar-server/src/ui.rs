//! `GET /ui` and `GET /ui/{asset}`: the search console, a hand-written page, script and style
//! sheet (`crates/cellar-server/ui/`) embedded in the binary. It holds no data, so it needs no API
//! key; the calls it makes (`/v1/search` with the key the user gives it, and the keyless
//! `/metrics`, `/healthz` and `/openapi.json`) go through the router like anyone's. Its content
//! security policy lets it load and call nothing but this server.

use axum::extract::Path;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::error::ApiError;
use crate::openapi::{Api, Operation};

/// The page at `/ui`.
const PAGE: &str = include_str!("../ui/index.html");

/// The page's assets at `/ui/{name}`: name, content type, bytes.
const ASSETS: [(&str, &str, &str); 2] = [
    ("console.js", "text/javascript; charset=utf-8", include_str!("../ui/console.js")),
    ("console.css", "text/css; charset=utf-8", include_str!("../ui/console.css")),
];

/// Only this server: no inline script or style, nothing from elsewhere.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The console's routes (outside `/v1`, so without the API-key check).
pub fn api() -> Api {
    Api::default()
        .route(
            Operation { ok: "text/html", ..Operation::new("get", "/ui", "The search console (HTML)") },
            get(page),
        )
        .route(
            Operation {
                ok: "text/javascript or text/css",
                errors: &[(404, "No such asset")],
                ..Operation::new("get", "/ui/{asset}", "The search console's script and style sheet")
            },
            get(asset),
        )
}

fn answer(content_type: &'static str, body: &'static str) -> Response {
    let headers = [
        (header::CONTENT_TYPE, content_type),
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::CACHE_CONTROL, "no-cache"),
    ];
    (headers, body).into_response()
}

async fn page() -> Response {
    answer("text/html; charset=utf-8", PAGE)
}

async fn asset(Path(name): Path<String>) -> Result<Response, ApiError> {
    let (_, content_type, body) = ASSETS.iter().find(|(n, _, _)| *n == name).ok_or_else(|| {
        let names: Vec<&str> = ASSETS.iter().map(|(n, _, _)| *n).collect();
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("the console has no asset {name:?}; it has {}", names.join(", ")),
        )
    })?;
    Ok(answer(content_type, body))
}
